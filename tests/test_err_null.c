/* test_err_null.c — the status is the truth: every public fallible function, called with bad
 * input and err == NULL, returns the same error status as with an err buffer (a message buffer
 * is optional; a swallowed error is the worst bug a conformance tool can have). Also the status
 * table: every status has a distinct name and a description. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_config.h"
#include "qc/qc_memplan.h"
#include "qc/qc_model.h"
#include "qc/qc_optimized.h"
#include "qc/qc_prefill.h"
#include "qc/qc_reference.h"
#include "qc/qc_safetensors.h"
#include "qc/qc_state.h"
#include "qc/qc_status.h"

#define FIXTURE QC_SOURCE_DIR "/fixtures/tiny-f32-tied-flat/model"

/* Call EXPR twice (with a buffer and with NULL in place of `ERR`): same non-OK status. */
#define SAME_STATUS(call_with)                                                        \
    do {                                                                              \
        qc_err e_;                                                                    \
        qc_err_clear(&e_);                                                            \
        qc_err *ERR = &e_;                                                            \
        qc_status with_ = (call_with);                                                \
        ERR = NULL;                                                                   \
        qc_status without_ = (call_with);                                             \
        ck_assert_msg(with_ != QC_OK, "%s: expected an error", #call_with);           \
        ck_assert_msg(with_ == without_, "%s: status %s with err, %s with err == NULL", \
                      #call_with, qc_status_str(with_), qc_status_str(without_));     \
        ck_assert_msg(e_.code == with_ && e_.msg[0], "%s: err not filled", #call_with); \
    } while (0)

static qc_model *fixture_model(void) {
    qc_model *m = NULL;
    qc_err e;
    qc_err_clear(&e);
    ck_assert_msg(qc_model_load(FIXTURE, &m, &e) == QC_OK, "%s", e.msg);
    return m;
}

START_TEST(parsers_and_loaders) {
    qc_config cfg;
    qc_dtype dt;
    qc_mode md;
    qc_profile p;
    qc_model *m = NULL;
    uint64_t bytes = 0;
    qc_st_file st;
    SAME_STATUS(qc_config_parse("{", 1, "x.json", &cfg, ERR));
    SAME_STATUS(qc_config_load("/nonexistent/dir", &cfg, ERR));
    SAME_STATUS(qc_config_preset("7b", &cfg, ERR));
    SAME_STATUS(qc_dtype_parse("f64", "--dtype", &dt, ERR));
    SAME_STATUS(qc_mode_parse("turbo", &md, ERR));
    SAME_STATUS(qc_profile_parse("[1]", 3, "p.json", &p, ERR));
    SAME_STATUS(qc_profile_load("/nonexistent/p.json", &p, ERR));
    SAME_STATUS(qc_model_load("/nonexistent/dir", &m, ERR));
    SAME_STATUS(qc_memplan_parse_size("lots", "--max-memory", &bytes, ERR));
    SAME_STATUS(qc_memplan_parse_meminfo("nothing here", &bytes, ERR));
    SAME_STATUS(qc_memplan_check(2, 1, "test", ERR));
    static const uint8_t junk[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    SAME_STATUS(qc_st_parse(junk, sizeof junk, "junk.safetensors", &st, ERR));
    SAME_STATUS(qc_st_open("/nonexistent/x.safetensors", &st, ERR));
    ck_assert_ptr_null(m);
}
END_TEST

START_TEST(backends_state_runner) {
    qc_model *m = fixture_model();
    qc_backend_opts o;
    qc_backend_opts_default(&o);
    o.max_tokens = 0; /* invalid */
    qc_backend *be = NULL;
    SAME_STATUS(qc_reference_create(m, &o, &be, ERR));
    SAME_STATUS(qc_optimized_create(m, &o, &be, ERR));
    ck_assert_ptr_null(be);
    qc_state *st = NULL;
    SAME_STATUS(qc_state_create(&m->cfg, 0, &st, ERR));

    qc_backend_opts_default(&o);
    o.max_tokens = 16;
    qc_err e;
    qc_err_clear(&e);
    ck_assert_int_eq(qc_reference_create(m, &o, &be, &e), QC_OK);
    ck_assert_int_eq(qc_state_create(&m->cfg, 16, &st, &e), QC_OK);
    qc_profile p;
    qc_profile_for_mode(&p, QC_MODE_STATIC, 16, 32); /* needs more than the state holds */
    qc_runner *r = NULL;
    SAME_STATUS(qc_runner_create(be, &p, st, &r, ERR));
    qc_profile_for_mode(&p, QC_MODE_STATIC, 16, 16);
    ck_assert_int_eq(qc_runner_create(be, &p, st, &r, &e), QC_OK);
    /* the hole this test exists for: an out-of-range token with err == NULL */
    ck_assert_int_ne(qc_runner_decode(r, 999, NULL, NULL), QC_OK);
    SAME_STATUS(qc_runner_decode(r, 999, NULL, ERR));
    SAME_STATUS(qc_runner_decode(r, -1, NULL, ERR));
    const int32_t toks[2] = {1, 100000};
    SAME_STATUS(qc_runner_prefill(r, toks, 2, 0, NULL, NULL, NULL, ERR));
    SAME_STATUS(qc_runner_prefill(r, toks, 1, 5, NULL, NULL, NULL, ERR)); /* wrong start_pos */
    /* capabilities a backend does not have */
    unsigned caps = be->caps;
    be->caps = 0;
    SAME_STATUS(qc_backend_fill_state(be, st, NAN, ERR));
    SAME_STATUS(qc_backend_sync_state(be, st, 1, ERR));
    be->caps = caps;
    qc_runner_destroy(r);
    qc_state_destroy(st);
    qc_backend_destroy(be);
    qc_model_free(m);
}
END_TEST

START_TEST(err_helpers_keep_the_status) {
    ck_assert_int_eq(qc_errf(NULL, QC_ERR_RANGE, "x %d", 1), QC_ERR_RANGE);
    ck_assert_int_eq(qc_err_prefix(NULL, QC_ERR_IO, "ctx"), QC_ERR_IO);
    ck_assert_int_eq(qc_err_prefix(NULL, QC_OK, "ctx"), QC_OK);
    qc_err e;
    qc_err_clear(&e);
    /* a message never changes the status: prefixing with another status keeps the given one */
    qc_errf(&e, QC_ERR_SHAPE, "inner");
    ck_assert_int_eq(qc_err_prefix(&e, QC_ERR_SHAPE, "outer"), QC_ERR_SHAPE);
    ck_assert_str_eq(e.msg, "outer: inner");
    ck_assert_int_eq(e.code, QC_ERR_SHAPE);
}
END_TEST

START_TEST(status_table) {
    for (int s = 0; s < QC_STATUS_COUNT; s++) {
        const char *n = qc_status_str((qc_status)s), *d = qc_status_desc((qc_status)s);
        ck_assert_msg(n && !strncmp(n, "QC_", 3), "status %d has no name", s);
        ck_assert_msg(d && d[0] && strcmp(d, "unknown status"), "status %d has no description", s);
        for (int t = 0; t < s; t++) ck_assert_str_ne(n, qc_status_str((qc_status)t));
    }
    ck_assert_str_eq(qc_status_str(QC_ERR_RUNTIME), "QC_ERR_RUNTIME");
    ck_assert_str_eq(qc_status_str(QC_ERR_NO_OPTION), "QC_ERR_NO_OPTION");
    ck_assert_int_eq(QC_STATUS_COUNT, QC_ERR_NO_OPTION + 1); /* the last status */
    ck_assert_str_eq(qc_status_str((qc_status)QC_STATUS_COUNT), "QC_ERR_?");
    ck_assert_str_eq(qc_status_desc((qc_status)-1), "unknown status");
}
END_TEST

int main(void) {
    Suite *s = suite_create("err_null");
    TCase *tc = tcase_create("status");
    tcase_add_test(tc, parsers_and_loaders);
    tcase_add_test(tc, backends_state_runner);
    tcase_add_test(tc, err_helpers_keep_the_status);
    tcase_add_test(tc, status_table);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
