/* test_cli_common.c — the shared CLI helpers (harness/qc_cli_common.h): argv walker, profile
 * flags (ExecuTorch defaults, JSON then flags), token lists (messages name the source and the
 * item), relative paths, atomic writes and the exit-code map. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness/qc_cli_common.h"

static char tmp_[256];

static void mk_tmp(void) {
    snprintf(tmp_, sizeof tmp_, "/tmp/qc_cli_common_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp_));
}

static void rm_tmp(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmp_);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* ===================================================================================== */

START_TEST(test_tokens_parse) {
    int32_t *ids = NULL;
    int n = -1;
    qc_err err;
    ck_assert_int_eq(qc_cli_parse_tokens("1,2, 3\n40\t5,,6", "--tokens", &ids, &n, &err), QC_OK);
    ck_assert_int_eq(n, 6);
    int32_t want[6] = {1, 2, 3, 40, 5, 6};
    ck_assert_int_eq(memcmp(ids, want, sizeof want), 0);
    free(ids);
    ck_assert_int_eq(qc_cli_parse_tokens("  , \n", "--tokens", &ids, &n, &err), QC_OK);
    ck_assert_int_eq(n, 0);
    ck_assert_ptr_null(ids);
    ck_assert_int_eq(qc_cli_parse_tokens("1,2,x3", "--tokens", &ids, &n, &err), QC_ERR_ARG);
    ck_assert_str_eq(err.msg, "--tokens: item 3: 'x3' is not an integer");
    ck_assert_int_eq(qc_cli_parse_tokens("7 -1", "p.txt", &ids, &n, &err), QC_ERR_RANGE);
    ck_assert_msg(strstr(err.msg, "p.txt: item 2: token id -1") == err.msg, "%s", err.msg);
    ck_assert_int_eq(qc_cli_parse_tokens("2.5", "--tokens", &ids, &n, &err), QC_ERR_ARG);
    ck_assert_int_eq(qc_cli_parse_tokens("99999999999", "--tokens", &ids, &n, &err), QC_ERR_RANGE);
    /* many ids (growth) */
    char big[20000];
    size_t o = 0;
    for (int i = 0; i < 3000; i++) o += (size_t)snprintf(big + o, sizeof big - o, "%d ", i);
    ck_assert_int_eq(qc_cli_parse_tokens(big, "--tokens", &ids, &n, &err), QC_OK);
    ck_assert_int_eq(n, 3000);
    ck_assert_int_eq(ids[2999], 2999);
    free(ids);
    /* vocabulary check */
    int32_t v[3] = {0, 511, 512};
    ck_assert_int_eq(qc_cli_check_tokens(v, 2, 512, "--tokens", &err), QC_OK);
    ck_assert_int_eq(qc_cli_check_tokens(v, 3, 512, "f.txt", &err), QC_ERR_RANGE);
    ck_assert_str_eq(err.msg, "f.txt: item 3: token id 512 outside the vocabulary [0, 512)");
}
END_TEST

START_TEST(test_tokens_file) {
    mk_tmp();
    char p[400];
    int32_t *ids = NULL;
    int n = 0;
    qc_err err;
    snprintf(p, sizeof p, "%s/t.txt", tmp_);
    write_text(p, "10 20\n30,\n");
    ck_assert_int_eq(qc_cli_read_tokens_file(p, &ids, &n, &err), QC_OK);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[2], 30);
    free(ids);
    write_text(p, "10 2o\n");
    ck_assert_int_eq(qc_cli_read_tokens_file(p, &ids, &n, &err), QC_ERR_ARG);
    ck_assert_msg(strstr(err.msg, p) == err.msg && strstr(err.msg, "item 2: '2o'"), "%s", err.msg);
    snprintf(p, sizeof p, "%s/missing.txt", tmp_);
    ck_assert_int_eq(qc_cli_read_tokens_file(p, &ids, &n, &err), QC_ERR_IO);
    ck_assert_msg(strstr(err.msg, p) == err.msg, "%s", err.msg);
    rm_tmp();
}
END_TEST

/* Run the profile flags over an argv; returns the finish status. */
static qc_status prof_from(int argc, char **argv, qc_profile *p, int *ctx_given, qc_err *err) {
    qc_cli_profile pf;
    qc_cli_profile_init(&pf);
    qc_argp a;
    qc_argp_init(&a, "t", argc, argv);
    qc_status st = QC_OK;
    while (qc_argp_next(&a)) {
        if (!qc_cli_profile_flag(&a, &pf, &st, err)) return qc_argp_unknown(&a, err);
        if (st) return st;
    }
    return qc_cli_profile_finish(&pf, p, ctx_given, err);
}

START_TEST(test_profile_flags) {
    qc_profile p;
    int given = -1;
    qc_err err;
    char *a0[] = {"t"};
    ck_assert_int_eq(prof_from(1, a0, &p, &given, &err), QC_OK);
    ck_assert_int_eq(p.enable_dynamic_shape, 0); /* ExecuTorch: absent = false */
    ck_assert_int_eq(p.use_kv_cache, 1);
    ck_assert_int_eq(p.max_seq_len, 128);
    ck_assert_int_eq(p.max_context_len, 128);
    ck_assert_int_eq(given, 0);
    char *a1[] = {"t", "--dynamic", "--max-seq-len=32"};
    ck_assert_int_eq(prof_from(3, a1, &p, &given, &err), QC_OK);
    ck_assert_int_eq(qc_profile_mode(&p), QC_MODE_DYNAMIC);
    ck_assert_int_eq(p.max_seq_len, 32);
    ck_assert_int_eq(p.max_context_len, 32); /* follows max_seq_len when not given */
    char *a2[] = {"t", "--no-kv-cache", "--max-context-len", "300"};
    ck_assert_int_eq(prof_from(4, a2, &p, &given, &err), QC_OK);
    ck_assert_int_eq(qc_profile_mode(&p), QC_MODE_NOKV);
    ck_assert_int_eq(p.max_context_len, 300);
    ck_assert_int_eq(given, 1);
    char *a3[] = {"t", "--static", "--dynamic"};
    ck_assert_int_eq(prof_from(3, a3, &p, &given, &err), QC_ERR_ARG);
    char *a4[] = {"t", "--max-seq-len", "0"};
    ck_assert_int_eq(prof_from(3, a4, &p, &given, &err), QC_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "--max-seq-len") == err.msg, "%s", err.msg);
    char *a5[] = {"t", "--max-seq-len"};
    ck_assert_int_eq(prof_from(2, a5, &p, &given, &err), QC_ERR_ARG);
    ck_assert_str_eq(err.msg, "--max-seq-len: missing value");

    /* JSON first, flags override; a JSON max_context_len counts as given */
    mk_tmp();
    char f[400];
    snprintf(f, sizeof f, "%s/p.json", tmp_);
    write_text(f, "{\"enable_dynamic_shape\": true, \"max_seq_len\": 64}");
    char *a6[] = {"t", "--profile", f, "--max-seq-len", "16"};
    ck_assert_int_eq(prof_from(5, a6, &p, &given, &err), QC_OK);
    ck_assert_int_eq(qc_profile_mode(&p), QC_MODE_DYNAMIC);
    ck_assert_int_eq(p.max_seq_len, 16);
    ck_assert_int_eq(p.max_context_len, 16);
    ck_assert_int_eq(given, 0);
    write_text(f, "{\"max_seq_len\": 64, \"max_context_len\": 100}");
    char *a7[] = {"t", "--profile", f, "--static"};
    ck_assert_int_eq(prof_from(4, a7, &p, &given, &err), QC_OK);
    ck_assert_int_eq(p.max_context_len, 100);
    ck_assert_int_eq(given, 1);
    write_text(f, "{\"max_seq_len\": ");
    ck_assert_int_eq(prof_from(3, a7, &p, &given, &err), QC_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, f) == err.msg, "%s", err.msg);
    rm_tmp();
}
END_TEST

START_TEST(test_argp) {
    char *argv[] = {"prog", "--out=x.h5", "pos1", "--decode", "5", "--flag=v", "--", "--lit"};
    qc_argp a;
    qc_err err;
    qc_argp_init(&a, "prog", 8, argv);
    const char *v = NULL;
    int n = 0;
    ck_assert(qc_argp_next(&a));
    ck_assert(qc_argp_is(&a, "--out"));
    ck_assert_int_eq(qc_argp_value(&a, &v, &err), QC_OK);
    ck_assert_str_eq(v, "x.h5");
    ck_assert(qc_argp_next(&a));
    ck_assert(a.positional);
    ck_assert_str_eq(a.arg, "pos1");
    ck_assert(qc_argp_next(&a));
    ck_assert_int_eq(qc_argp_int(&a, 0, 10, &n, &err), QC_OK);
    ck_assert_int_eq(n, 5);
    ck_assert(qc_argp_next(&a));
    ck_assert_int_eq(qc_argp_bool(&a, &err), QC_ERR_ARG);
    ck_assert_int_eq(qc_argp_unknown(&a, &err), QC_ERR_ARG);
    ck_assert_str_eq(err.msg, "unknown option '--flag=v'");
    ck_assert(qc_argp_next(&a));
    ck_assert(a.positional);
    ck_assert_str_eq(a.arg, "--lit");
    ck_assert(!qc_argp_next(&a));
    char *argv2[] = {"prog", "--decode", "12x"};
    qc_argp_init(&a, "prog", 3, argv2);
    qc_argp_next(&a);
    ck_assert_int_eq(qc_argp_int(&a, 0, 10, &n, &err), QC_ERR_ARG);
    ck_assert_str_eq(err.msg, "--decode: '12x' is not an integer");
    char *argv3[] = {"prog", "--decode", "11"};
    qc_argp_init(&a, "prog", 3, argv3);
    qc_argp_next(&a);
    ck_assert_int_eq(qc_argp_int(&a, 0, 10, &n, &err), QC_ERR_ARG);
    ck_assert_str_eq(err.msg, "--decode: 11 outside [0, 10]");
}
END_TEST

START_TEST(test_files_and_paths) {
    mk_tmp();
    char p[400], d[400], buf[1024];
    qc_err err;
    snprintf(p, sizeof p, "%s/out.bin", tmp_);
    ck_assert_int_eq(qc_cli_write_atomic(p, "hello", 5, &err), QC_OK);
    char *data = NULL;
    size_t len = 0;
    ck_assert_int_eq(qc_cli_read_file(p, &data, &len, &err), QC_OK);
    ck_assert_int_eq((int)len, 5);
    ck_assert_str_eq(data, "hello");
    free(data);
    snprintf(p, sizeof p, "%s/nodir/out.bin", tmp_);
    ck_assert_int_eq(qc_cli_write_atomic(p, "x", 1, &err), QC_ERR_IO);
    ck_assert_int_eq(qc_cli_check_writable(p, &err), QC_ERR_IO);
    ck_assert_msg(strstr(err.msg, p) == err.msg, "%s", err.msg);
    snprintf(p, sizeof p, "%s/ok.h5", tmp_);
    ck_assert_int_eq(qc_cli_check_writable(p, &err), QC_OK);
    ck_assert_int_eq(qc_cli_check_writable(tmp_, &err), QC_ERR_IO); /* a directory */
    /* only out.bin remains: no temp files */
    snprintf(buf, sizeof buf, "test \"$(ls -A '%s')\" = out.bin", tmp_);
    ck_assert_int_eq(system(buf), 0);

    ck_assert_str_eq(qc_cli_dirname("a/b/c.h5", d, sizeof d), "a/b");
    ck_assert_str_eq(qc_cli_dirname("c.h5", d, sizeof d), ".");
    ck_assert_str_eq(qc_cli_dirname("/c.h5", d, sizeof d), "/");
    /* relpath: tmp/x/model from tmp/y/z -> ../../x/model; from tmp/x -> model */
    snprintf(buf, sizeof buf, "mkdir -p '%s/x/model' '%s/y/z'", tmp_, tmp_);
    ck_assert_int_eq(system(buf), 0);
    snprintf(p, sizeof p, "%s/x/model", tmp_);
    snprintf(d, sizeof d, "%s/y/z", tmp_);
    ck_assert_int_eq(qc_cli_relpath(p, d, buf, sizeof buf, &err), QC_OK);
    ck_assert_str_eq(buf, "../../x/model");
    snprintf(d, sizeof d, "%s/x", tmp_);
    ck_assert_int_eq(qc_cli_relpath(p, d, buf, sizeof buf, &err), QC_OK);
    ck_assert_str_eq(buf, "model");
    snprintf(d, sizeof d, "%s/x/model", tmp_);
    ck_assert_int_eq(qc_cli_relpath(p, d, buf, sizeof buf, &err), QC_OK);
    ck_assert_str_eq(buf, ".");
    snprintf(d, sizeof d, "%s/x/model/", tmp_);
    ck_assert_int_eq(qc_cli_relpath(d, "/", buf, sizeof buf, &err), QC_OK);
    ck_assert_str_eq(buf, p + 1);
    snprintf(d, sizeof d, "%s/missing", tmp_);
    ck_assert_int_eq(qc_cli_relpath(d, tmp_, buf, sizeof buf, &err), QC_ERR_IO);
    rm_tmp();
}
END_TEST

START_TEST(test_exit_codes) {
    ck_assert_int_eq(qc_cli_exit_code(QC_OK), QC_EXIT_PASS);
    ck_assert_int_eq(qc_cli_exit_code(QC_ERR_ARG), QC_EXIT_ERROR);
    ck_assert_int_eq(qc_cli_exit_code(QC_ERR_IO), QC_EXIT_ERROR);
    ck_assert_int_eq(qc_cli_exit_code(QC_ERR_FORMAT), QC_EXIT_ERROR);
    ck_assert_int_eq(qc_cli_exit_code(QC_ERR_RANGE), QC_EXIT_ERROR);
    ck_assert_int_eq(QC_EXIT_ERROR, 2);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cli_common");
    TCase *tc = tcase_create("helpers");
    tcase_add_test(tc, test_tokens_parse);
    tcase_add_test(tc, test_tokens_file);
    tcase_add_test(tc, test_profile_flags);
    tcase_add_test(tc, test_argp);
    tcase_add_test(tc, test_files_and_paths);
    tcase_add_test(tc, test_exit_codes);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
