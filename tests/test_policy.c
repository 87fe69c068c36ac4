/* test_policy.c — tolerance policy: parse, precedence (defaults < backend < overrides in file
 * order), regex / exact selectors, required reasons, clear errors, the committed fixture file. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../harness/io/qc_policy.h"

#define ALL_DEFAULTS                                                       \
    "\"defaults\": {"                                                      \
    " \"logits\": {\"atol\": 1e-4, \"rtol\": 1e-3, \"max_kl\": 1e-6},"     \
    " \"hidden\": {\"atol\": 2e-4, \"rtol\": 2e-3},"                       \
    " \"k_cache\": {\"atol\": 3e-4, \"rtol\": 3e-3},"                      \
    " \"v_cache\": {\"atol\": 4e-4, \"rtol\": 4e-3},"                      \
    " \"conv_state\": {\"atol\": 5e-4, \"rtol\": 5e-3},"                   \
    " \"recurrent_state\": {\"atol\": 6e-4, \"rtol\": 6e-3}}"

static qc_policy *parse_ok(const char *json) {
    qc_policy *p = NULL;
    qc_err e;
    qc_err_clear(&e);
    qc_status s = qc_policy_parse(json, strlen(json), "t.json", &p, &e);
    ck_assert_msg(s == QC_OK, "parse failed: %s", e.msg);
    return p;
}

static void parse_bad(const char *json, const char *needle) {
    qc_policy *p = NULL;
    qc_err e;
    qc_err_clear(&e);
    qc_status s = qc_policy_parse(json, strlen(json), "t.json", &p, &e);
    ck_assert_int_eq(s, QC_ERR_FORMAT);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(e.msg, needle) != NULL, "message '%s' lacks '%s'", e.msg, needle);
    ck_assert_msg(strstr(e.msg, "t.json") != NULL, "message '%s' lacks the file name", e.msg);
}

START_TEST(defaults_and_backend_and_overrides) {
    qc_policy *p = parse_ok(
        "{\"schema_version\": 1, " ALL_DEFAULTS ","
        " \"backends\": {\"optimized\": {\"logits\": {\"atol\": 1e-3}}},"
        " \"tie_margin\": 0.05,"
        " \"overrides\": ["
        "  {\"case\": \"len13[0-9]\", \"tensor\": \"prefill/state/layer_0[0-9]/k_cache\","
        "   \"atol\": 7e-3, \"reason\": \"long prompt\"},"
        "  {\"case\": \"fx/cont\", \"tensor\": \"logits\", \"backend\": \"optimized\","
        "   \"rtol\": 0.5, \"reason\": \"later wins\"},"
        "  {\"check\": \"opt_eq_ref\", \"atol\": 9, \"reason\": \"check selector\"}]}");
    qc_tol t;
    const char *why = NULL;
    qc_policy_lookup(p, QC_TC_LOGITS, "reference", "static", "prefill.logits", "fx/len001",
                     "prefill/logits", &t, &why);
    ck_assert_double_eq(t.atol, 1e-4);
    ck_assert_double_eq(t.rtol, 1e-3);
    ck_assert_double_eq(t.max_kl, 1e-6);
    ck_assert_ptr_null(why);
    /* backend section replaces only what it sets */
    qc_policy_lookup(p, QC_TC_LOGITS, "optimized", "static", "prefill.logits", "fx/len001",
                     "prefill/logits", &t, &why);
    ck_assert_double_eq(t.atol, 1e-3);
    ck_assert_double_eq(t.rtol, 1e-3);
    /* regex on the bare case name + regex on the tensor path */
    qc_policy_lookup(p, QC_TC_K_CACHE, "reference", "dynamic", "prefill.k_cache", "fx/len130",
                     "prefill/state/layer_03/k_cache", &t, &why);
    ck_assert_double_eq(t.atol, 7e-3);
    ck_assert_double_eq(t.rtol, 3e-3);
    ck_assert_str_eq(why, "long prompt");
    /* anchored: layer_13 does not match layer_0[0-9] */
    qc_policy_lookup(p, QC_TC_K_CACHE, "reference", "dynamic", "prefill.k_cache", "fx/len130",
                     "prefill/state/layer_13/k_cache", &t, &why);
    ck_assert_double_eq(t.atol, 3e-4);
    /* exact "<stem>/<case>" + class-name tensor selector + backend selector */
    qc_policy_lookup(p, QC_TC_LOGITS, "optimized", "nokv", "decode.logits", "fx/cont",
                     "decode/logits", &t, &why);
    ck_assert_double_eq(t.rtol, 0.5);
    ck_assert_double_eq(t.atol, 1e-3);
    ck_assert_str_eq(why, "later wins");
    qc_policy_lookup(p, QC_TC_LOGITS, "reference", "nokv", "decode.logits", "fx/cont",
                     "decode/logits", &t, &why);
    ck_assert_double_eq(t.rtol, 1e-3);
    /* check selector */
    qc_policy_lookup(p, QC_TC_HIDDEN, "optimized", "static", "opt_eq_ref", "fx/len001",
                     "prefill/hidden", &t, &why);
    ck_assert_double_eq(t.atol, 9);
    ck_assert_double_eq(qc_policy_tie_margin(p), 0.05);
    ck_assert_int_eq(qc_policy_n_overrides(p), 3);
    qc_policy_free(p);
}
END_TEST

START_TEST(tie_margin_default) {
    qc_policy *p = parse_ok("{\"schema_version\": 1, " ALL_DEFAULTS "}");
    ck_assert_double_eq_tol(qc_policy_tie_margin(p), 2e-4, 1e-18);
    qc_policy_free(p);
}
END_TEST

START_TEST(errors) {
    parse_bad("{\"schema_version\": 1, " ALL_DEFAULTS ", \"overrides\": [{\"atol\": 1}]}",
              "overrides[0]: \"reason\"");
    parse_bad("{\"schema_version\": 1, " ALL_DEFAULTS
              ", \"overrides\": [{\"atol\": 1, \"reason\": \"\"}]}",
              "reason");
    /* (a defaults section naming only some classes is a partial policy: see partial_merge) */
    parse_bad("{\"schema_version\": 1, \"defaults\": {\"logits\": {\"atl\": 0.01}}}",
              "defaults.logits: unknown key \"atl\"");
    parse_bad("{\"schema_version\": 1, \"backends\": {\"optimized\": {\"hidden\": {\"rtl\": 1}}}}",
              "backends.optimized.hidden: unknown key \"rtl\"");
    parse_bad("{\"schema_version\": 1, \"description\": 3}", "description: must be a string");
    parse_bad("{\"schema_version\": 1, \"defaults\": {\"kv\": {\"atol\": 1, \"rtol\": 1}}}",
              "unknown tensor class \"kv\"");
    parse_bad("{\"schema_version\": 1, " ALL_DEFAULTS
              ", \"backends\": {\"optimized\": {\"logits\": {\"atol\": -1}}}}",
              "backends.optimized.logits.atol");
    parse_bad("{\"schema_version\": 1, " ALL_DEFAULTS
              ", \"overrides\": [{\"case\": \"(\", \"atol\": 1, \"reason\": \"r\"}]}",
              "bad regex");
    parse_bad("{\"schema_version\": 1, " ALL_DEFAULTS
              ", \"overrides\": [{\"tensr\": \"x\", \"atol\": 1, \"reason\": \"r\"}]}",
              "unknown key \"tensr\"");
    parse_bad("{\"schema_version\": 1, " ALL_DEFAULTS
              ", \"overrides\": [{\"case\": \"x\", \"reason\": \"r\"}]}",
              "sets none");
    parse_bad("{" ALL_DEFAULTS "}", "schema_version");
    parse_bad("{\"schema_version\": 1, " ALL_DEFAULTS ", \"tolerance\": 1}", "unknown top-level");
    parse_bad("{\"schema_version\": 1, ", "JSON parse error");
}
END_TEST

/* A partial file is merged over the built-in defaults: what it names replaces, the rest stays. */
START_TEST(partial_merge) {
    qc_policy *b = NULL;
    qc_err e;
    qc_err_clear(&e);
    ck_assert_int_eq(qc_policy_builtin(&b, &e), QC_OK);
    qc_policy *p = parse_ok("{\"schema_version\":1,\"defaults\":{\"logits\":{\"atol\":0.01}}}");
    for (int c = 0; c < QC_TC_COUNT; c++) {
        qc_tol tb = qc_policy_default(b, (qc_tclass)c), tp = qc_policy_default(p, (qc_tclass)c);
        if (c == QC_TC_LOGITS) {
            ck_assert_double_eq(tp.atol, 0.01);
        } else {
            ck_assert_double_eq(tp.atol, tb.atol);
        }
        ck_assert_double_eq(tp.rtol, tb.rtol);     /* logits rtol kept too */
        ck_assert_double_eq(tp.max_kl, tb.max_kl); /* and the logits KL bound */
    }
    ck_assert(qc_policy_default(b, QC_TC_LOGITS).max_kl > 0);
    /* the tie margin follows the merged logits atol */
    ck_assert_double_eq_tol(qc_policy_tie_margin(p), 0.02, 1e-15);
    qc_policy_free(p);
    /* no defaults at all: only overrides, on top of every built-in default */
    p = parse_ok("{\"schema_version\": 1, \"overrides\": [{\"case\": \"len130\", \"tensor\":"
                 " \"hidden\", \"atol\": 0.5, \"reason\": \"r\"}]}");
    qc_tol t;
    qc_policy_lookup(p, QC_TC_HIDDEN, "reference", "static", "prefill.hidden", "fx/len130",
                     "prefill/hidden", &t, NULL);
    ck_assert_double_eq(t.atol, 0.5);
    ck_assert_double_eq(t.rtol, qc_policy_default(b, QC_TC_HIDDEN).rtol);
    qc_policy_lookup(p, QC_TC_HIDDEN, "reference", "static", "prefill.hidden", "fx/len001",
                     "prefill/hidden", &t, NULL);
    ck_assert_double_eq(t.atol, qc_policy_default(b, QC_TC_HIDDEN).atol);
    qc_policy_free(p);
    /* an explicit max_kl -1 removes the built-in KL bound; a class given in full replaces all */
    p = parse_ok("{\"schema_version\": 1, \"defaults\": {\"logits\": {\"max_kl\": -1},"
                 " \"conv_state\": {\"atol\": 1, \"rtol\": 2}}}");
    ck_assert(qc_policy_default(p, QC_TC_LOGITS).max_kl < 0);
    ck_assert_double_eq(qc_policy_default(p, QC_TC_LOGITS).atol, qc_policy_default(b, QC_TC_LOGITS).atol);
    ck_assert_double_eq(qc_policy_default(p, QC_TC_CONV_STATE).atol, 1);
    ck_assert_double_eq(qc_policy_default(p, QC_TC_CONV_STATE).rtol, 2);
    qc_policy_free(p);
    /* an empty defaults object keeps everything */
    p = parse_ok("{\"schema_version\": 1, \"defaults\": {}}");
    for (int c = 0; c < QC_TC_COUNT; c++)
        ck_assert_double_eq(qc_policy_default(p, (qc_tclass)c).atol,
                            qc_policy_default(b, (qc_tclass)c).atol);
    qc_policy_free(p);
    qc_policy_free(b);
}
END_TEST

/* --atol / --rtol CLASS=V: the class default changes, backend sections and overrides still win. */
START_TEST(set_default_and_note) {
    qc_policy *p = parse_ok(
        "{\"schema_version\": 1, " ALL_DEFAULTS ","
        " \"backends\": {\"optimized\": {\"logits\": {\"atol\": 1e-3}}},"
        " \"overrides\": [{\"case\": \"len130\", \"tensor\": \"logits\", \"rtol\": 0.5,"
        " \"reason\": \"r\"}]}");
    qc_err e;
    qc_err_clear(&e);
    ck_assert_int_eq(qc_policy_set_default(p, QC_TC_LOGITS, "atol", 0.25, &e), QC_OK);
    ck_assert_int_eq(qc_policy_set_default(p, QC_TC_LOGITS, "rtol", 0.125, &e), QC_OK);
    ck_assert_int_eq(qc_policy_set_default(p, QC_TC_LOGITS, "atol", -1, &e), QC_ERR_ARG);
    ck_assert_int_eq(qc_policy_set_default(p, QC_TC_LOGITS, "btol", 1, &e), QC_ERR_ARG);
    qc_tol t;
    qc_policy_lookup(p, QC_TC_LOGITS, "reference", "static", "prefill.logits", "fx/len001",
                     "prefill/logits", &t, NULL);
    ck_assert_double_eq(t.atol, 0.25);
    ck_assert_double_eq(t.rtol, 0.125);
    ck_assert_double_eq(t.max_kl, 1e-6);
    qc_policy_lookup(p, QC_TC_LOGITS, "optimized", "static", "prefill.logits", "fx/len001",
                     "prefill/logits", &t, NULL);
    ck_assert_double_eq(t.atol, 1e-3); /* the backend section applies on top */
    qc_policy_lookup(p, QC_TC_LOGITS, "reference", "static", "prefill.logits", "fx/len130",
                     "prefill/logits", &t, NULL);
    ck_assert_double_eq(t.rtol, 0.5); /* and the override */
    ck_assert_str_eq(qc_policy_describe(p), "t.json");
    qc_policy_note(p, "--atol logits=0.25");
    qc_policy_note(p, "--rtol logits=0.125");
    ck_assert_str_eq(qc_policy_describe(p), "t.json + --atol logits=0.25 --rtol logits=0.125");
    ck_assert_str_eq(qc_policy_source(p), "t.json"); /* the file stays the file */
    qc_policy_free(p);
}
END_TEST

/* The override matcher used for the "can never match" warnings, and --print's round trip. */
START_TEST(override_matches_and_print) {
    qc_policy *p = parse_ok(
        "{\"schema_version\": 1, \"description\": \"d\", \"defaults\": {\"hidden\": {\"atol\": 0.5}},"
        " \"backends\": {\"optimized\": {\"k_cache\": {\"rtol\": 0.25}}},"
        " \"overrides\": ["
        "  {\"case\": \"len00[15]\", \"tensor\": \"logits\", \"atol\": 1, \"reason\": \"a\"},"
        "  {\"case\": \"fx/len130\", \"tensor\": \"prefill/state/layer_0[0-3]/k_cache\","
        "   \"max_kl\": 2, \"reason\": \"b\"},"
        "  {\"tensor\": \"hiden\", \"rtol\": 1, \"reason\": \"typo\"}]}");
    ck_assert(qc_policy_override_matches(p, 0, "fx/len005", "decode/logits", QC_TC_LOGITS));
    ck_assert(!qc_policy_override_matches(p, 0, "fx/len0005", "decode/logits", QC_TC_LOGITS));
    ck_assert(!qc_policy_override_matches(p, 0, "fx/len005", "prefill/hidden", QC_TC_HIDDEN));
    ck_assert(qc_policy_override_matches(p, 1, "fx/len130", "prefill/state/layer_03/k_cache",
                                         QC_TC_K_CACHE));
    ck_assert(!qc_policy_override_matches(p, 1, "gx/len130", "prefill/state/layer_03/k_cache",
                                          QC_TC_K_CACHE));
    ck_assert(!qc_policy_override_matches(p, 2, "fx/len005", "prefill/hidden", QC_TC_HIDDEN));
    ck_assert(!qc_policy_override_matches(p, 9, "fx/len005", "prefill/hidden", QC_TC_HIDDEN));
    char d[256];
    qc_policy_override_describe(p, 1, d, sizeof d);
    ck_assert_str_eq(d, "overrides[1] {case \"fx/len130\", tensor \"prefill/state/layer_0[0-3]/k_cache\"}");
    /* --print: loadable again, the same effective numbers */
    char *text = qc_policy_to_json(p);
    ck_assert_ptr_nonnull(text);
    ck_assert_ptr_nonnull(strstr(text, "\"source\""));
    qc_policy *q = parse_ok(text);
    for (int c = 0; c < QC_TC_COUNT; c++) {
        qc_tol a = qc_policy_default(p, (qc_tclass)c), b = qc_policy_default(q, (qc_tclass)c);
        ck_assert_double_eq(a.atol, b.atol);
        ck_assert_double_eq(a.rtol, b.rtol);
        ck_assert_double_eq(a.max_kl, b.max_kl);
    }
    ck_assert_int_eq(qc_policy_n_overrides(q), 3);
    ck_assert_double_eq(qc_policy_tie_margin(q), qc_policy_tie_margin(p));
    qc_tol t;
    qc_policy_lookup(q, QC_TC_K_CACHE, "optimized", "static", "prefill.k_cache", "fx/len130",
                     "prefill/state/layer_02/k_cache", &t, NULL);
    ck_assert_double_eq(t.rtol, 0.25);
    ck_assert_double_eq(t.max_kl, 2);
    char *text2 = qc_policy_to_json(q);
    ck_assert_str_eq(text, text2); /* a fixed point */
    free(text);
    free(text2);
    qc_policy_free(q);
    qc_policy_free(p);
}
END_TEST

START_TEST(builtin_and_fixture_file) {
    qc_policy *p = NULL;
    qc_err e;
    qc_err_clear(&e);
    ck_assert_int_eq(qc_policy_builtin(&p, &e), QC_OK);
    ck_assert_str_eq(qc_policy_source(p), "built-in");
    qc_tol t;
    qc_policy_lookup(p, QC_TC_RECURRENT_STATE, "reference", NULL, NULL, NULL, NULL, &t, NULL);
    ck_assert(t.atol > 0 && t.rtol > 0);
    qc_policy_free(p);
    p = NULL;
    ck_assert_msg(qc_policy_load(QC_SOURCE_DIR "/fixtures/tolerances.json", &p, &e) == QC_OK,
                  "%s", e.msg);
    for (int c = 0; c < QC_TC_COUNT; c++) {
        qc_policy_lookup(p, (qc_tclass)c, "optimized", "static", "x", "a/b", "t", &t, NULL);
        ck_assert(t.atol > 0 && t.atol < 1e-1);
    }
    qc_policy_free(p);
    ck_assert_int_eq(qc_policy_load("/nonexistent/tol.json", &p, &e), QC_ERR_IO);
    ck_assert_ptr_nonnull(strstr(e.msg, "/nonexistent/tol.json"));
}
END_TEST

int main(void) {
    Suite *s = suite_create("policy");
    TCase *t = tcase_create("core");
    tcase_add_test(t, defaults_and_backend_and_overrides);
    tcase_add_test(t, tie_margin_default);
    tcase_add_test(t, errors);
    tcase_add_test(t, builtin_and_fixture_file);
    tcase_add_test(t, partial_merge);
    tcase_add_test(t, set_default_and_note);
    tcase_add_test(t, override_matches_and_print);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int nf = srunner_ntests_failed(r);
    srunner_free(r);
    return nf ? 1 : 0;
}
