/* test_plugin_lifecycle_abi.c — the plugin ABI's state lifecycle entries (snapshot, restore,
 * select_sequence, trim) as the harness sees them through qc_remote_backend_create:
 *   - a v1 plugin built before they existed (struct_size = QC_PLUGIN_V1_SIZE) is never read
 *     past its struct, whatever bits it announces: no lifecycle capability, no entry;
 *   - an announced bit whose entry is NULL is dropped; an entry without its bit is not used;
 *   - the calls reach the plugin with their argument, and UNSUPPORTED / ERROR map to
 *     QC_ERR_UNSUPPORTED (a SKIP) / QC_ERR_RUNTIME (a FAIL) with the plugin's text. */
#include <check.h>
#include <string.h>

#include "../harness/host/qc_remote.h"
#include "qc_testmodel.h"

static int g_calls[4], g_arg[4], g_rc;

static int f_snapshot(void *h, int32_t v) { (void)h; g_calls[0]++, g_arg[0] = v; return g_rc; }
static int f_restore(void *h, int32_t v) { (void)h; g_calls[1]++, g_arg[1] = v; return g_rc; }
static int f_select(void *h, int32_t v) { (void)h; g_calls[2]++, g_arg[2] = v; return g_rc; }
static int f_trim(void *h, int32_t v) { (void)h; g_calls[3]++, g_arg[3] = v; return g_rc; }
static int f_reset(void *h) { (void)h; return QC_PLUGIN_OK; }
static void f_close(void *h) { (void)h; }
static const char *f_last_error(void *h) { (void)h; return "the plugin's own words"; }

static qc_model *g_model;

static void setup(void) {
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o);
    o.dtype = QC_F32;
    ck_assert_int_eq(qc_testmodel_reference(&o, &g_model, NULL), QC_OK);
    memset(g_calls, 0, sizeof g_calls);
    g_rc = QC_PLUGIN_OK;
}

static void teardown(void) { qc_model_free(g_model); }

/* A backend over api announcing caps. */
static qc_backend *wrap(qc_runtime_plugin *api, unsigned caps) {
    qc_plugin_info info;
    memset(&info, 0, sizeof info);
    info.vocab_size = g_model->cfg.vocab_size;
    info.hidden_size = g_model->cfg.hidden_size;
    info.n_layers = g_model->cfg.n_layers;
    info.caps = caps;
    qc_backend_opts o;
    qc_backend_opts_default(&o);
    o.max_tokens = 8;
    qc_backend *be = NULL;
    qc_err e;
    qc_err_clear(&e);
    ck_assert_msg(qc_remote_backend_create("plugin:test", api, (void *)1, &info, NULL, g_model, &o,
                                           &be, &e) == QC_OK, "%s", e.msg);
    return be;
}

static qc_runtime_plugin full_api(void) {
    qc_runtime_plugin p;
    memset(&p, 0, sizeof p);
    p.abi_version = QC_PLUGIN_ABI_VERSION;
    p.struct_size = sizeof p;
    p.reset = f_reset, p.close = f_close, p.last_error = f_last_error;
    p.snapshot = f_snapshot, p.restore = f_restore, p.select_sequence = f_select, p.trim = f_trim;
    return p;
}

#define LIFE (QC_CAP_SNAPSHOT | QC_CAP_SEQUENCES | QC_CAP_TRIM)

START_TEST(old_v1_struct_is_not_read_past_its_end) {
    qc_runtime_plugin p = full_api(); /* entries "beyond" the old struct hold non-NULL junk */
    p.struct_size = (uint32_t)QC_PLUGIN_V1_SIZE;
    qc_backend *be = wrap(&p, QC_CAP_STATE_READ | LIFE);
    ck_assert_uint_eq(be->caps & LIFE, 0);
    ck_assert(!be->snapshot && !be->restore && !be->select_seq && !be->trim);
    qc_backend_destroy(be);
    ck_assert_int_eq(g_calls[0] + g_calls[1] + g_calls[2] + g_calls[3], 0);
}
END_TEST

START_TEST(bits_and_entries_must_agree) {
    qc_runtime_plugin p = full_api();
    p.restore = NULL; /* snapshot without restore is no snapshot capability */
    p.trim = NULL;
    qc_backend *be = wrap(&p, LIFE);
    ck_assert_uint_eq(be->caps & LIFE, QC_CAP_SEQUENCES);
    ck_assert(!be->snapshot && !be->restore && be->select_seq && !be->trim);
    qc_backend_destroy(be);
    p = full_api();
    be = wrap(&p, QC_CAP_TRIM); /* entries present, bits not announced: not used */
    ck_assert_uint_eq(be->caps & LIFE, QC_CAP_TRIM);
    ck_assert(!be->snapshot && !be->select_seq && be->trim);
    qc_backend_destroy(be);
}
END_TEST

START_TEST(calls_and_status_mapping) {
    qc_runtime_plugin p = full_api();
    qc_backend *be = wrap(&p, LIFE);
    ck_assert_uint_eq(be->caps & LIFE, LIFE);
    qc_err e;
    qc_err_clear(&e);
    ck_assert_int_eq(be->snapshot(be, 3, &e), QC_OK);
    ck_assert_int_eq(be->restore(be, 5, &e), QC_OK);
    ck_assert_int_eq(be->select_seq(be, 2, &e), QC_OK);
    ck_assert_int_eq(be->trim(be, 17, &e), QC_OK);
    ck_assert_int_eq(g_arg[0], 3);
    ck_assert_int_eq(g_arg[1], 5);
    ck_assert_int_eq(g_arg[2], 2);
    ck_assert_int_eq(g_arg[3], 17);
    g_rc = QC_PLUGIN_UNSUPPORTED;
    ck_assert_int_eq(be->select_seq(be, 9, &e), QC_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "select_sequence(9)"));
    ck_assert_ptr_nonnull(strstr(e.msg, "the plugin's own words"));
    g_rc = QC_PLUGIN_ERROR;
    ck_assert_int_eq(be->restore(be, 1, &e), QC_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(e.msg, "restore(1) failed: the plugin's own words"));
    qc_backend_destroy(be);
}
END_TEST

int main(void) {
    Suite *su = suite_create("plugin_lifecycle_abi");
    TCase *tc = tcase_create("abi");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, old_v1_struct_is_not_read_past_its_end);
    tcase_add_test(tc, bits_and_entries_must_agree);
    tcase_add_test(tc, calls_and_status_mapping);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
