/* test_kv.c — the one splitter of comma-separated option lists (harness/io/qc_kv.h) and the
 * three harness sites that use it, each keeping the syntax and the errors it had:
 *   qc_kv_pair / qc_kv_item: items in order, empty items skipped, split at the first '=', an
 *     empty key or value handed over, no quoting (a quote is a character, a ',' always splits),
 *     the 2047-byte limit, messages naming the spec and the item, NULL err allowed;
 *   qc_server_parse (--backend http:URL,k=v): the URL then options, a bad item named;
 *   qc_cap_parse (--require a,b): names, empty items skipped;
 *   qc_registry_create of "optimized,k=v" / "reference,k=v": set_option per item, an item that
 *     is not key=value or that the backend refuses named with the spec, the backend destroyed. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness/host/qc_registry.h"
#include "../harness/host/qc_remote.h"
#include "../harness/host/qc_server.h"
#include "../harness/io/qc_kv.h"
#include "qc/qc_model.h"
#include "qc/qc_runtime_plugin.h"
#include "qc_testmodel.h"

/* Every pair of spec as "k=v;" (an item in <> when refused): the whole walk as one string. */
static qc_status walk(const char *spec, char *out, size_t n, qc_err *e) {
    qc_kv kv;
    char *k, *v;
    out[0] = '\0';
    qc_status s = qc_kv_init(&kv, spec, "W", e);
    while (!s && !(s = qc_kv_pair(&kv, &k, &v, e)) && k) {
        size_t used = strlen(out);
        snprintf(out + used, n - used, "%s=%s;", k, v);
    }
    return s;
}

START_TEST(pairs_in_order_empty_items_skipped) {
    char got[256];
    qc_err e;
    ck_assert_int_eq(walk("a=1,b=2", got, sizeof got, &e), QC_OK);
    ck_assert_str_eq(got, "a=1;b=2;");
    /* ",,", a leading and a trailing ',' are no items */
    ck_assert_int_eq(walk(",a=1,,,b=2,", got, sizeof got, &e), QC_OK);
    ck_assert_str_eq(got, "a=1;b=2;");
    /* nothing at all: no item, no error */
    ck_assert_int_eq(walk("", got, sizeof got, &e), QC_OK);
    ck_assert_str_eq(got, "");
    ck_assert_int_eq(walk(",,,", got, sizeof got, &e), QC_OK);
    ck_assert_str_eq(got, "");
    ck_assert_int_eq(walk(NULL, got, sizeof got, &e), QC_OK);
    ck_assert_str_eq(got, "");
    /* the first '=' splits: empty values, '=' in a value, an empty key (the caller's to refuse) */
    ck_assert_int_eq(walk("a=,b==c,u=http://h/p?x=1,=v", got, sizeof got, &e), QC_OK);
    ck_assert_str_eq(got, "a=;b==c;u=http://h/p?x=1;=v;");
    /* no trimming, no quoting: blanks and quotes are part of the item, a ',' always splits */
    ck_assert_int_eq(walk(" a = 1 ,q=\"x", got, sizeof got, &e), QC_OK);
    ck_assert_str_eq(got, " a = 1 ;q=\"x;");
}
END_TEST

START_TEST(missing_equals_named) {
    char got[256];
    qc_err e;
    qc_err_clear(&e);
    ck_assert_int_eq(walk("a=1,bogus,c=3", got, sizeof got, &e), QC_ERR_ARG);
    ck_assert_str_eq(got, "a=1;"); /* the items before it were handed over, none after */
    ck_assert_int_eq(e.code, QC_ERR_ARG);
    ck_assert_str_eq(e.msg, "W: option 'bogus' is not key=value");
    /* a quoted ',' splits too: the second half has no '=' */
    ck_assert_int_eq(walk("a=\"x,y\"", got, sizeof got, &e), QC_ERR_ARG);
    ck_assert_str_eq(e.msg, "W: option 'y\"' is not key=value");
    /* after the error the list is exhausted; err NULL is allowed */
    qc_kv kv;
    char *k, *v;
    ck_assert_int_eq(qc_kv_init(&kv, "x,y=1", "W", NULL), QC_OK);
    ck_assert_int_eq(qc_kv_pair(&kv, &k, &v, NULL), QC_ERR_ARG);
    ck_assert_ptr_null(k);
    ck_assert_ptr_null(v);
    ck_assert_int_eq(qc_kv_pair(&kv, &k, &v, NULL), QC_OK);
    ck_assert_ptr_null(k);
}
END_TEST

START_TEST(too_long_named) {
    char *spec = malloc(QC_KV_MAX_LEN + 1);
    ck_assert_ptr_nonnull(spec);
    memset(spec, 'a', QC_KV_MAX_LEN);
    spec[0] = 'k';
    spec[1] = '=';
    spec[QC_KV_MAX_LEN - 1] = '\0'; /* 2047 bytes: fits */
    qc_kv kv;
    char *k, *v;
    qc_err e;
    ck_assert_int_eq(qc_kv_init(&kv, spec, "W", &e), QC_OK);
    ck_assert_int_eq(qc_kv_pair(&kv, &k, &v, &e), QC_OK);
    ck_assert_str_eq(k, "k");
    ck_assert_uint_eq(strlen(v), QC_KV_MAX_LEN - 3);
    spec[QC_KV_MAX_LEN - 1] = 'a';
    spec[QC_KV_MAX_LEN] = '\0'; /* 2048 bytes: refused, the list empty */
    qc_err_clear(&e);
    ck_assert_int_eq(qc_kv_init(&kv, spec, "W", &e), QC_ERR_ARG);
    ck_assert_str_eq(e.msg, "W: too long (2048 bytes, at most 2047)");
    ck_assert_ptr_null(qc_kv_item(&kv));
    free(spec);
}
END_TEST

START_TEST(items_whole) {
    qc_kv kv;
    ck_assert_int_eq(qc_kv_init(&kv, ",hidden,,a=b,", "W", NULL), QC_OK);
    ck_assert_str_eq(qc_kv_item(&kv), "hidden");
    ck_assert_str_eq(qc_kv_item(&kv), "a=b"); /* an item is not split at '=' */
    ck_assert_ptr_null(qc_kv_item(&kv));
    ck_assert_ptr_null(qc_kv_item(&kv)); /* stays at the end */
}
END_TEST

/* --backend http:URL[,k=v...]: qc_server_parse */
START_TEST(server_spec) {
    qc_server_opts o;
    qc_err e;
    ck_assert_int_eq(qc_server_parse("http://127.0.0.1:1,,k=7,timeout=2.5,", &o, &e), QC_OK);
    ck_assert_str_eq(o.url, "http://127.0.0.1:1");
    ck_assert_int_eq(o.k, 7);
    ck_assert(o.timeout_s == 2.5);
    ck_assert_int_eq(qc_server_parse(",https://h/v1", &o, &e), QC_OK); /* leading ',' skipped */
    ck_assert_str_eq(o.url, "https://h/v1");
    ck_assert_int_eq(o.k, 5);
    ck_assert_int_eq(qc_server_parse("http://h,k7", &o, &e), QC_ERR_ARG);
    ck_assert_str_eq(e.msg, "--backend http: option 'k7' is not key=value");
    ck_assert_int_eq(qc_server_parse("http://h,bogus=1", &o, &e), QC_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "unknown option 'bogus'"), "%s", e.msg);
    ck_assert_int_eq(qc_server_parse("http://h,=1", &o, &e), QC_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "unknown option ''"), "%s", e.msg);
    ck_assert_int_eq(qc_server_parse("http://h,k=0", &o, &e), QC_ERR_ARG);
    ck_assert_str_eq(e.msg, "--backend http: k=0: invalid value");
    ck_assert_int_eq(qc_server_parse("", &o, &e), QC_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "'' does not start with http://"), "%s", e.msg);
    char longspec[QC_KV_MAX_LEN + 8];
    memset(longspec, 'x', sizeof longspec - 1);
    memcpy(longspec, "http://h,model=", 15);
    longspec[sizeof longspec - 1] = '\0';
    ck_assert_int_eq(qc_server_parse(longspec, &o, &e), QC_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "--backend http: too long"), "%s", e.msg);
}
END_TEST

/* --require name[,name...]: qc_cap_parse */
START_TEST(require_list) {
    unsigned bits = 0;
    qc_err e;
    ck_assert_int_eq(qc_cap_parse(",hidden,,threads,", &bits, &e), QC_OK);
    ck_assert_uint_eq(bits, QC_CAP_HIDDEN | QC_CAP_THREADS);
    ck_assert_int_eq(qc_cap_parse("", &bits, &e), QC_OK);
    ck_assert_uint_eq(bits, 0u);
    ck_assert_int_eq(qc_cap_parse("hidden,telepathy", &bits, &e), QC_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "unknown capability 'telepathy'"), "%s", e.msg);
    ck_assert_int_eq(qc_cap_parse("hidden=1", &bits, &e), QC_ERR_ARG); /* a name, whole */
    ck_assert_msg(strstr(e.msg, "unknown capability 'hidden=1'"), "%s", e.msg);
}
END_TEST

/* --backend NAME,k=v[,k=v...]: qc_registry_create of a built-in */
START_TEST(builtin_spec) {
    qc_testmodel_opts to;
    qc_testmodel_defaults(&to);
    qc_model *m = NULL;
    qc_err e;
    ck_assert_msg(qc_model_synthetic(&to.cfg, QC_F32, 5, &m, &e) == QC_OK, "%s", e.msg);
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.max_tokens = 4;
    static const struct {
        const char *spec, *want; /* want NULL: created; else the message */
    } CASES[] = {
        {"optimized,gemm_min=1,,par_min=0,", NULL},
        {"reference,fault.unguarded_exp=0", NULL},
        {"optimized,gemm_min=1,bogus", "--backend optimized,gemm_min=1,bogus: option 'bogus' "
                                       "is not key=value"},
        {"optimized,gemm_min=0", "--backend optimized,gemm_min=0: optimized: option gemm_min: "
                                 "'0' is not an integer >= 1"},
        {"reference,=1", "--backend reference,=1: reference: unknown option ''"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        qc_runtime_spec rs;
        ck_assert_msg(qc_registry_parse(CASES[i].spec, 0, &rs, &e) == QC_OK, "%s: %s",
                      CASES[i].spec, e.msg);
        qc_backend *be = (qc_backend *)&rs; /* must be reset to NULL on an error */
        qc_err_clear(&e);
        qc_status s = qc_registry_create(&rs, NULL, m, &bo, &be, &e);
        if (!CASES[i].want) {
            ck_assert_msg(s == QC_OK && be, "%s: %s", CASES[i].spec, e.msg);
            qc_backend_destroy(be);
        } else {
            ck_assert_int_eq(s, QC_ERR_ARG);
            ck_assert_ptr_null(be);
            ck_assert_msg(!strncmp(e.msg, CASES[i].want, strlen(CASES[i].want)), "%s: %s",
                          CASES[i].spec, e.msg);
        }
    }
    qc_model_free(m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("kv");
    TCase *tc = tcase_create("split");
    tcase_add_test(tc, pairs_in_order_empty_items_skipped);
    tcase_add_test(tc, missing_equals_named);
    tcase_add_test(tc, too_long_named);
    tcase_add_test(tc, items_whole);
    tcase_add_test(tc, server_spec);
    tcase_add_test(tc, require_list);
    tcase_add_test(tc, builtin_spec);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
