/* test_report.c — JSON and JUnit reports: parse back (cJSON, python xml.etree), JUnit schema
 * (tests/data/junit.xsd via xmllint when installed), non-finite numbers as strings, XML
 * escaping, atomic writes, console summary line. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../harness/report/qc_report_console.h"
#include "../harness/report/qc_report_json.h"
#include "../harness/report/qc_report_junit.h"

/* Three rows: a pass with metrics, a failure whose metrics hold NaN / Inf and a detail with
 * XML specials, a skip. */
static void make_results(qc_results *r) {
    qc_results_init(r);
    snprintf(r->tool_version, sizeof r->tool_version, "0.1.0 (test)");
    snprintf(r->machine, sizeof r->machine, "test-machine");
    snprintf(r->isa, sizeof r->isa, "optimized (AVX2, 2 threads)");
    snprintf(r->policy, sizeof r->policy, "built-in");
    snprintf(r->started, sizeof r->started, "2026-12-02T10:00:00Z");
    r->seconds = 1.5;

    qc_check_row w;
    memset(&w, 0, sizeof w);
    snprintf(w.golden, sizeof w.golden, "fixtures/a/golden.h5");
    snprintf(w.stem, sizeof w.stem, "a");
    snprintf(w.case_name, sizeof w.case_name, "len001");
    snprintf(w.backend, sizeof w.backend, "reference");
    snprintf(w.mode, sizeof w.mode, "static");
    snprintf(w.check, sizeof w.check, "prefill.logits");
    w.verdict = QC_VERDICT_PASS;
    w.has_metrics = 1;
    float g[2] = {1, 2}, a[2] = {1, 2.0001f};
    qc_tdesc d;
    int64_t sh[2] = {1, 2};
    qc_tdesc_init(&d, QC_TC_LOGITS, "prefill/logits", 2, sh);
    d.atol = 1e-3;
    qc_metrics_init(&w.m, 0);
    qc_metrics_add_logits(&w.m, &d, a, g, 0.0);
    qc_metrics_finish(&w.m);
    w.tol.atol = 1e-3;
    w.tol.max_kl = -1;
    snprintf(w.keyline, sizeof w.keyline, "ok");
    w.seconds = 0.25;
    ck_assert_ptr_nonnull(qc_results_add(r, &w));

    snprintf(w.case_name, sizeof w.case_name, "len130");
    snprintf(w.backend, sizeof w.backend, "optimized");
    snprintf(w.check, sizeof w.check, "decode.k_cache");
    w.verdict = QC_VERDICT_FAIL;
    float g2[2] = {0, 1}, a2[2] = {NAN, 1};
    qc_metrics_init(&w.m, 0);
    qc_metrics_add(&w.m, &d, a2, g2);
    qc_metrics_finish(&w.m); /* cosine, nmse = NaN */
    w.m.max_rel = INFINITY;
    snprintf(w.keyline, sizeof w.keyline, "max_abs nan <bad> & \"worse\"");
    w.detail = strdup("Mismatched elements: 1 / 2 (50.0%)\nh5diff -r -d 0.001 a.h5 b.h5 /cases/x <&>");
    ck_assert_ptr_nonnull(qc_results_add(r, &w));

    memset(&w, 0, sizeof w);
    snprintf(w.golden, sizeof w.golden, "fixtures/b/golden.h5");
    snprintf(w.stem, sizeof w.stem, "b");
    snprintf(w.case_name, sizeof w.case_name, "_model");
    snprintf(w.backend, sizeof w.backend, "-");
    snprintf(w.mode, sizeof w.mode, "-");
    snprintf(w.check, sizeof w.check, "model_hash");
    w.verdict = QC_VERDICT_SKIP;
    snprintf(w.keyline, sizeof w.keyline, "skipped (--no-hash-check)");
    ck_assert_ptr_nonnull(qc_results_add(r, &w));
}

static char tmpdir[512];

static void setup_tmp(void) {
    snprintf(tmpdir, sizeof tmpdir, "%s/test_report_tmp.%d", QC_BINARY_DIR, (int)getpid());
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", tmpdir, tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static void cleanup_tmp(void) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(json_report) {
    qc_results r;
    make_results(&r);
    setup_tmp();
    char path[700];
    snprintf(path, sizeof path, "%s/report.json", tmpdir);
    qc_err e;
    qc_err_clear(&e);
    ck_assert_int_eq(qc_report_json_write(path, &r, &e), QC_OK);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* cJSON would write NaN as null: a null may only be a cause's "nothing named" (the causes'
     * layer / step / block / after_layer fields) */
    for (const char *q = strstr(buf, "null"); q; q = strstr(q + 4, "null")) {
        const char *k = q;
        while (k > buf && *k != ':') k--;
        const char *ke = k;
        while (k > buf && *(k - 1) != '"') k--; /* the key's closing quote */
        const char *kb = k - 1;
        while (kb > buf && *(kb - 1) != '"') kb--;
        char key[32] = "";
        size_t kl = (size_t)(k - 1 - kb);
        if (kl < sizeof key) memcpy(key, kb, kl), key[kl] = 0;
        ck_assert_msg(ke > buf && (!strcmp(key, "layer") || !strcmp(key, "step") ||
                                   !strcmp(key, "block") || !strcmp(key, "after_layer")),
                      "a null in the JSON report outside a cause's fields (key '%s')", key);
    }
    cJSON *root = cJSON_Parse(buf);
    ck_assert_ptr_nonnull(root);
    ck_assert_int_eq(cJSON_GetObjectItem(root, "schema_version")->valueint, 1);
    ck_assert_str_eq(cJSON_GetObjectItem(root, "isa")->valuestring, "optimized (AVX2, 2 threads)");
    cJSON *sum = cJSON_GetObjectItem(root, "summary");
    ck_assert_int_eq(cJSON_GetObjectItem(sum, "passed")->valueint, 1);
    ck_assert_int_eq(cJSON_GetObjectItem(sum, "failed")->valueint, 1);
    ck_assert_int_eq(cJSON_GetObjectItem(sum, "skipped")->valueint, 1);
    cJSON *checks = cJSON_GetObjectItem(root, "checks");
    ck_assert_int_eq(cJSON_GetArraySize(checks), 3);
    cJSON *c1 = cJSON_GetArrayItem(checks, 1);
    ck_assert_str_eq(cJSON_GetObjectItem(c1, "verdict")->valuestring, "FAIL");
    cJSON *m = cJSON_GetObjectItem(c1, "metrics");
    ck_assert_str_eq(cJSON_GetObjectItem(m, "cosine")->valuestring, "NaN");
    ck_assert_str_eq(cJSON_GetObjectItem(m, "max_rel")->valuestring, "Infinity");
    cJSON *fn = cJSON_GetObjectItem(m, "first_nonfinite");
    ck_assert_str_eq(cJSON_GetObjectItem(fn, "actual")->valuestring, "NaN");
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(fn, "index")), 2);
    cJSON *c0 = cJSON_GetArrayItem(checks, 0);
    cJSON *lg = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "metrics"), "logits");
    ck_assert_int_eq(cJSON_GetObjectItem(lg, "top1_agree")->valueint, 1);
    ck_assert_double_eq_tol(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "tolerance"), "atol")->valuedouble,
                            1e-3, 1e-15);
    cJSON_Delete(root);
    /* atomic: no temp file left beside it */
    char cmd[900];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q tmp", tmpdir);
    ck_assert_int_ne(system(cmd), 0);
    /* unwritable target: clear error, no crash */
    ck_assert_int_ne(qc_report_json_write("/nonexistent-dir/x.json", &r, &e), QC_OK);
    cleanup_tmp();
    qc_results_free(&r);
}
END_TEST

/* A backend name with dots of its own keeps the testcase name unambiguous. */
START_TEST(junit_dotted_backend) {
    qc_results r;
    make_results(&r);
    for (int i = 0; i < r.n; i++) snprintf(r.rows[i].backend, sizeof r.rows[i].backend, "exec:mine2.py");
    setup_tmp();
    char path[700], *buf = NULL;
    snprintf(path, sizeof path, "%s/junit.xml", tmpdir);
    qc_err e;
    qc_err_clear(&e);
    ck_assert_int_eq(qc_report_junit_write(path, &r, &e), QC_OK);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    buf = calloc(1, 1 << 16);
    size_t got = fread(buf, 1, (1 << 16) - 1, f);
    fclose(f);
    ck_assert(got > 0);
    ck_assert_msg(strstr(buf, "name=\"[exec:mine2.py].static.prefill.logits\""), "%s", buf);
    ck_assert_msg(!strstr(buf, "name=\"exec:mine2.py."), "%s", buf);
    free(buf);
    cleanup_tmp();
    qc_results_free(&r);
}
END_TEST

START_TEST(junit_report) {
    qc_results r;
    make_results(&r);
    setup_tmp();
    char path[700];
    snprintf(path, sizeof path, "%s/junit.xml", tmpdir);
    qc_err e;
    qc_err_clear(&e);
    ck_assert_int_eq(qc_report_junit_write(path, &r, &e), QC_OK);
    char cmd[2400];
    /* 1. schema, when xmllint is installed (libxml2-utils) */
    if (system("command -v xmllint >/dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof cmd, "xmllint --noout --schema '%s/tests/data/junit.xsd' '%s'",
                 QC_SOURCE_DIR, path);
        ck_assert_msg(system(cmd) == 0, "xmllint rejected %s", path);
        /* and the Jenkins xunit plugin's schema (no "skipped" on testsuites) */
        snprintf(cmd, sizeof cmd,
                 "xmllint --noout --schema '%s/tests/data/junit-jenkins.xsd' '%s'",
                 QC_SOURCE_DIR, path);
        ck_assert_msg(system(cmd) == 0, "xmllint (junit-jenkins.xsd) rejected %s", path);
        snprintf(cmd, sizeof cmd,
                 "printf '<testsuites skipped=\"0\"><testsuite name=\"x\" tests=\"0\" "
                 "failures=\"0\" errors=\"0\"/></testsuites>' > '%s/bad2.xml' && ! xmllint "
                 "--noout --schema '%s/tests/data/junit-jenkins.xsd' '%s/bad2.xml' 2>/dev/null",
                 tmpdir, QC_SOURCE_DIR, tmpdir);
        ck_assert_msg(system(cmd) == 0, "junit-jenkins.xsd accepted testsuites@skipped");
        /* and the schema is not vacuous: a testcase without classname is rejected */
        snprintf(cmd, sizeof cmd,
                 "printf '<testsuites><testsuite name=\"x\" tests=\"1\"><testcase name=\"n\"/>"
                 "</testsuite></testsuites>' > '%s/bad.xml' && ! xmllint --noout --schema "
                 "'%s/tests/data/junit.xsd' '%s/bad.xml' 2>/dev/null",
                 tmpdir, QC_SOURCE_DIR, tmpdir);
        ck_assert_msg(system(cmd) == 0, "schema accepted a testcase without classname");
    } else {
        fprintf(stderr, "test_report: xmllint not installed (libxml2-utils): schema check skipped\n");
    }
    /* 2. a real XML parser: structure, names, escaping round trip */
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 - '%s' <<'EOF'\n"
             "import sys, xml.etree.ElementTree as ET\n"
             "root = ET.parse(sys.argv[1]).getroot()\n"
             "assert root.tag == 'testsuites', root.tag\n"
             "assert root.get('tests') == '3' and root.get('failures') == '1', root.attrib\n"
             "assert root.get('skipped') is None, root.attrib\n"
             "assert root.find('testsuite').get('skipped') == '0'\n"
             "suites = root.findall('testsuite')\n"
             "assert [s.get('name') for s in suites] == ['a', 'b'], suites\n"
             "cases = root.findall('.//testcase')\n"
             "assert len(cases) == 3\n"
             "assert cases[0].get('classname') == 'a.len001'\n"
             "assert cases[0].get('name') == 'reference.static.prefill.logits'\n"
             "f = cases[1].find('failure')\n"
             "assert f is not None and cases[1].get('name') == 'optimized.static.decode.k_cache'\n"
             "assert f.get('message') == 'max_abs nan <bad> & \"worse\"', f.get('message')\n"
             "assert 'h5diff -r -d 0.001 a.h5 b.h5 /cases/x <&>' in f.text, f.text\n"
             "assert cases[2].find('skipped') is not None\n"
             "assert suites[0].get('tests') == '2' and suites[0].get('failures') == '1'\n"
             "EOF",
             path);
    ck_assert_msg(system(cmd) == 0, "python xml.etree check failed on %s", path);
    cleanup_tmp();
    qc_results_free(&r);
}
END_TEST

/* An ERROR row next to a FAIL row: exit 2 by the precedence, the error counted on the first
 * summary line, "failed" on the last line counts failures only (1, not 2). */
START_TEST(console_summary_error_and_failure) {
    qc_results r;
    make_results(&r);
    qc_check_row w;
    memset(&w, 0, sizeof w);
    snprintf(w.stem, sizeof w.stem, "b");
    snprintf(w.case_name, sizeof w.case_name, "_file");
    snprintf(w.backend, sizeof w.backend, "-");
    snprintf(w.mode, sizeof w.mode, "-");
    snprintf(w.check, sizeof w.check, "open");
    w.verdict = QC_VERDICT_ERROR;
    snprintf(w.keyline, sizeof w.keyline, "x.h5: not an HDF5 file");
    ck_assert_ptr_nonnull(qc_results_add(&r, &w));
    r.stopped_early = 1;
    r.maxfail = 2;
    ck_assert_int_eq(qc_results_exit_code(&r), 2);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    qc_report_console_summary(f, &r);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "4 checks in 1.5 s (policy: built-in): 1 error; exit 2"));
    ck_assert_ptr_nonnull(strstr(buf, "stopped early: --maxfail 2 reached (2 failing checks)"));
    buf[len - 1] = 0;
    const char *last = strrchr(buf, '\n');
    ck_assert_str_eq(last ? last + 1 : buf, "1 passed, 1 failed, 1 skipped");
    /* exactly one "N passed, M failed" line */
    int lines = 0;
    for (const char *p = buf; (p = strstr(p, " passed, ")) != NULL; p++) lines++;
    ck_assert_int_eq(lines, 1);
    free(buf);
    /* the JSON keeps the failure visible whatever the exit code */
    char *js = qc_report_json_string(&r);
    ck_assert_ptr_nonnull(js);
    cJSON *root = cJSON_Parse(js);
    cJSON *sum = cJSON_GetObjectItem(root, "summary");
    ck_assert_int_eq(cJSON_GetObjectItem(sum, "exit_code")->valueint, 2);
    ck_assert_int_eq(cJSON_GetObjectItem(sum, "failed")->valueint, 1);
    ck_assert_int_eq(cJSON_GetObjectItem(sum, "errors")->valueint, 1);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(sum, "stopped_early")));
    ck_assert_int_eq(cJSON_GetObjectItem(sum, "maxfail")->valueint, 2);
    cJSON_Delete(root);
    free(js);
    qc_results_free(&r);
}
END_TEST

START_TEST(exit_precedence) {
    /* 2 (error) > 1 (failure) > 3 (nothing checked) > 0 (pass); -1 = unset */
    ck_assert_int_eq(qc_exit_precedence(1, 2), 2);
    ck_assert_int_eq(qc_exit_precedence(2, 1), 2);
    ck_assert_int_eq(qc_exit_precedence(3, 1), 1);
    ck_assert_int_eq(qc_exit_precedence(0, 3), 3);
    ck_assert_int_eq(qc_exit_precedence(-1, 0), 0);
    ck_assert_int_eq(qc_exit_precedence(2, 3), 2);
    qc_results r;
    qc_results_init(&r);
    ck_assert_int_eq(qc_results_exit_code(&r), 3); /* no row: nothing checked */
    r.exit_code = 2;                                /* e.g. no golden could be listed */
    ck_assert_int_eq(qc_results_exit_code(&r), 2);
    qc_results_free(&r);
}
END_TEST

/* Warnings reach the JSON "warnings" array and every JUnit testsuite's <system-err>. */
START_TEST(warnings_in_reports) {
    qc_results r;
    make_results(&r);
    qc_results_warn(&r, "policy %s: overrides[%d] can never match <&>", "t.json", 0);
    ck_assert_int_eq(r.n_warnings, 1);
    char *js = qc_report_json_string(&r);
    cJSON *root = cJSON_Parse(js);
    cJSON *wa = cJSON_GetObjectItem(root, "warnings");
    ck_assert_int_eq(cJSON_GetArraySize(wa), 1);
    ck_assert_str_eq(cJSON_GetArrayItem(wa, 0)->valuestring,
                     "policy t.json: overrides[0] can never match <&>");
    cJSON_Delete(root);
    free(js);
    char *x = qc_report_junit_string(&r);
    ck_assert_ptr_nonnull(x);
    int n = 0;
    for (const char *p = x; (p = strstr(p, "<system-err>warning: policy t.json: overrides[0] can "
                                           "never match &lt;&amp;&gt;")) != NULL; p++)
        n++;
    ck_assert_int_eq(n, 2); /* two suites (a, b) */
    free(x);
    qc_results_free(&r);
    /* no row at all: one empty suite still carries them */
    qc_results_init(&r);
    qc_results_warn(&r, "w");
    x = qc_report_junit_string(&r);
    ck_assert_ptr_nonnull(strstr(x, "tests=\"0\""));
    ck_assert_ptr_nonnull(strstr(x, "<system-err>warning: w"));
    free(x);
    qc_results_free(&r);
}
END_TEST

/* 27 ERROR rows with one message: printed once, with the count and the first rows named. */
START_TEST(console_identical_errors_collapsed) {
    qc_results r;
    qc_results_init(&r);
    for (int i = 0; i < 27; i++) {
        qc_check_row w;
        memset(&w, 0, sizeof w);
        snprintf(w.stem, sizeof w.stem, "s");
        snprintf(w.case_name, sizeof w.case_name, "len%03d", i);
        snprintf(w.backend, sizeof w.backend, "exec:x.py");
        snprintf(w.mode, sizeof w.mode, "static");
        snprintf(w.check, sizeof w.check, "run");
        w.verdict = QC_VERDICT_ERROR;
        snprintf(w.keyline, sizeof w.keyline, "exec adapter 'x.py': cannot start: No such file");
        ck_assert_ptr_nonnull(qc_results_add(&r, &w));
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    qc_report_console_failures(f, &r);
    fclose(f);
    int n = 0;
    for (const char *p = buf; (p = strstr(p, "cannot start")); p++) n++;
    ck_assert_int_eq(n, 1);
    ck_assert_msg(strstr(buf, "the same error in 26 more rows: s/len001 exec:x.py static run,"), "%s", buf);
    ck_assert_msg(strstr(buf, "(and 21 more)"), "%s", buf);
    free(buf);
    qc_results_free(&r);
}
END_TEST

START_TEST(console_summary_last_line) {
    qc_results r;
    make_results(&r);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    qc_report_console_header(f);
    for (int i = 0; i < r.n; i++) qc_report_console_row(f, &r.rows[i], 0);
    qc_report_console_failures(f, &r);
    qc_report_console_summary(f, &r);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "a/len130"));
    ck_assert_ptr_nonnull(strstr(buf, "FAIL"));
    ck_assert_ptr_nonnull(strstr(buf, "  h5diff -r -d 0.001"));
    /* the last line is exactly "1 passed, 1 failed, 1 skipped"; one summary, no errors */
    ck_assert(len > 0 && buf[len - 1] == '\n');
    buf[len - 1] = 0;
    const char *last = strrchr(buf, '\n');
    ck_assert_str_eq(last ? last + 1 : buf, "1 passed, 1 failed, 1 skipped");
    ck_assert_ptr_nonnull(strstr(buf, "3 checks in 1.5 s (policy: built-in): 0 errors; exit 1"));
    ck_assert_ptr_null(strstr(buf, "stopped early"));
    free(buf);
    /* quiet hides passing rows */
    buf = NULL;
    f = open_memstream(&buf, &len);
    qc_report_console_row(f, &r.rows[0], 1);
    qc_report_console_row(f, &r.rows[1], 1);
    fclose(f);
    ck_assert_ptr_null(strstr(buf, "len001"));
    ck_assert_ptr_nonnull(strstr(buf, "len130"));
    free(buf);
    qc_results_free(&r);
}
END_TEST

int main(void) {
    Suite *s = suite_create("report");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, json_report);
    tcase_add_test(t, junit_report);
    tcase_add_test(t, junit_dotted_backend);
    tcase_add_test(t, console_identical_errors_collapsed);
    tcase_add_test(t, console_summary_last_line);
    tcase_add_test(t, console_summary_error_and_failure);
    tcase_add_test(t, exit_precedence);
    tcase_add_test(t, warnings_in_reports);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int nf = srunner_ntests_failed(r);
    srunner_free(r);
    return nf ? 1 : 0;
}
