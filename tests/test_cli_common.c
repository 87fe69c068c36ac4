/* test_cli_common.c — the shared CLI helpers (harness/io/qc_cli_common.h): argv walker, profile
 * flags (ExecuTorch defaults, JSON then flags), token lists (messages name the source and the
 * item), relative paths, atomic writes and the exit-code map. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness/io/qc_cli_common.h"

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
    /* commas (with whitespace around them) and whitespace both separate; the old test text
     * "5,,6" had an empty item, now refused (test_tokens_strict) */
    ck_assert_int_eq(qc_cli_parse_tokens("1,2, 3\n40\t5 ,6", "--tokens", &ids, &n, &err), QC_OK);
    ck_assert_int_eq(n, 6);
    int32_t want[6] = {1, 2, 3, 40, 5, 6};
    ck_assert_int_eq(memcmp(ids, want, sizeof want), 0);
    free(ids);
    /* empty and whitespace-only texts are an empty list (the caller refuses an empty prompt) */
    ck_assert_int_eq(qc_cli_parse_tokens("  \n\t", "--tokens", &ids, &n, &err), QC_OK);
    ck_assert_int_eq(n, 0);
    ck_assert_ptr_null(ids);
    ck_assert_int_eq(qc_cli_parse_tokens("", "--tokens", &ids, &n, &err), QC_OK);
    ck_assert_int_eq(n, 0);
    ck_assert_ptr_null(ids);
    /* ...but a lone comma is an empty item (it used to give an empty list) */
    ck_assert_int_eq(qc_cli_parse_tokens("  , \n", "--tokens", &ids, &n, &err), QC_ERR_ARG);
    ck_assert_str_eq(err.msg, "--tokens: item 1 is empty: a leading comma");
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
    write_text(p, "10 20\n30\n");
    ck_assert_int_eq(qc_cli_read_tokens_file(p, &ids, &n, &err), QC_OK);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[2], 30);
    free(ids);
    /* one per line (blank lines and CRLF allowed), or lines of comma-separated ids, a comma
     * at the end of a line continuing on the next */
    write_text(p, "\n7\r\n\n8\n9\n");
    ck_assert_int_eq(qc_cli_read_tokens_file(p, &ids, &n, &err), QC_OK);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[0], 7);
    ck_assert_int_eq(ids[2], 9);
    free(ids);
    write_text(p, "1, 2, 3,\n4, 5\n");
    ck_assert_int_eq(qc_cli_read_tokens_file(p, &ids, &n, &err), QC_OK);
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(ids[4], 5);
    free(ids);
    write_text(p, "10 2o\n");
    ck_assert_int_eq(qc_cli_read_tokens_file(p, &ids, &n, &err), QC_ERR_ARG);
    ck_assert_msg(strstr(err.msg, p) == err.msg && strstr(err.msg, "item 2: '2o'"), "%s", err.msg);
    /* messages of a file carry the line; items are numbered over the whole file */
    char want[600];
    struct { const char *text, *msg; qc_status code; } fcase[] = {
        {"10 20\n30,\n", "item 4 is empty: a trailing comma (line 2)", QC_ERR_ARG},
        {"1,2\n3,,4\n", "item 4 is empty: two commas in a row (line 2)", QC_ERR_ARG},
        {"1,2\n\n3,\n,4\n", "item 4 is empty: only whitespace between two commas (line 4)",
         QC_ERR_ARG},
        {"\n\n,1\n", "item 1 is empty: a leading comma (line 3)", QC_ERR_ARG},
        {"1\n2\n+3\n", "item 3: '+3' has a sign (token ids are plain decimal digits) (line 3)",
         QC_ERR_ARG},
        {"1 2\n3 abc\n", "item 4: 'abc' is not an integer (line 2)", QC_ERR_ARG},
        {"1\n0x10\n", "item 2: '0x10' is hexadecimal (token ids are decimal) (line 2)",
         QC_ERR_ARG},
        {"5\n-4\n", "item 2: token id -4 outside [0, 2147483647] (negative) (line 2)",
         QC_ERR_RANGE},
        {"1\n2\n3\n4294967296\n", "item 4: token id 4294967296 outside [0, 2147483647] (line 4)",
         QC_ERR_RANGE},
    };
    for (size_t i = 0; i < sizeof fcase / sizeof fcase[0]; i++) {
        write_text(p, fcase[i].text);
        ids = NULL;
        n = -1;
        ck_assert_int_eq(qc_cli_read_tokens_file(p, &ids, &n, &err), fcase[i].code);
        snprintf(want, sizeof want, "%s: %s", p, fcase[i].msg);
        ck_assert_str_eq(err.msg, want);
        ck_assert_ptr_null(ids);
        ck_assert_int_eq(n, 0);
    }
    snprintf(p, sizeof p, "%s/missing.txt", tmp_);
    ck_assert_int_eq(qc_cli_read_tokens_file(p, &ids, &n, &err), QC_ERR_IO);
    ck_assert_msg(strstr(err.msg, p) == err.msg, "%s", err.msg);
    rm_tmp();
}
END_TEST

/* Every malformed item class of a --tokens list: the exact message, the item number. */
START_TEST(test_tokens_strict) {
    struct {
        const char *text;
        qc_status code;
        const char *msg;
    } bad[] = {
        {"1,,3", QC_ERR_ARG, "--tokens: item 2 is empty: two commas in a row"},
        {"1, ,3", QC_ERR_ARG, "--tokens: item 2 is empty: only whitespace between two commas"},
        {"1,\t\n,3", QC_ERR_ARG, "--tokens: item 2 is empty: only whitespace between two commas"},
        {",1,2", QC_ERR_ARG, "--tokens: item 1 is empty: a leading comma"},
        {" ,1", QC_ERR_ARG, "--tokens: item 1 is empty: a leading comma"},
        {"1,2,", QC_ERR_ARG, "--tokens: item 3 is empty: a trailing comma"},
        {"1,2, ", QC_ERR_ARG, "--tokens: item 3 is empty: a trailing comma"},
        {",", QC_ERR_ARG, "--tokens: item 1 is empty: a leading comma"},
        {"1,2,,", QC_ERR_ARG, "--tokens: item 3 is empty: two commas in a row"},
        {"+5", QC_ERR_ARG, "--tokens: item 1: '+5' has a sign (token ids are plain decimal digits)"},
        {"1,-0", QC_ERR_ARG, "--tokens: item 2: '-0' has a sign (token ids are plain decimal digits)"},
        {"1,+0", QC_ERR_ARG, "--tokens: item 2: '+0' has a sign (token ids are plain decimal digits)"},
        {"3,-4", QC_ERR_RANGE, "--tokens: item 2: token id -4 outside [0, 2147483647] (negative)"},
        {"0x1f", QC_ERR_ARG, "--tokens: item 1: '0x1f' is hexadecimal (token ids are decimal)"},
        {"1 0XAB", QC_ERR_ARG, "--tokens: item 2: '0XAB' is hexadecimal (token ids are decimal)"},
        {"0x", QC_ERR_ARG, "--tokens: item 1: '0x' is not an integer"},
        {"2147483648", QC_ERR_RANGE, "--tokens: item 1: token id 2147483648 outside [0, 2147483647]"},
        {"1,99999999999999999999999999999999", QC_ERR_RANGE,
         "--tokens: item 2: token id 999999999999999999999999... outside [0, 2147483647]"},
        {"-99999999999999999999", QC_ERR_RANGE,
         "--tokens: item 1: token id -99999999999999999999 outside [0, 2147483647] (negative)"},
        {"1e3", QC_ERR_ARG, "--tokens: item 1: '1e3' is not an integer"},
        {"2.5", QC_ERR_ARG, "--tokens: item 1: '2.5' is not an integer"},
        {"1;2", QC_ERR_ARG, "--tokens: item 1: '1;2' is not an integer"},
        {"-", QC_ERR_ARG, "--tokens: item 1: '-' is not an integer"},
        {"1,x\x01y", QC_ERR_ARG, "--tokens: item 2: 'x?y' is not an integer"},
        {"\xef\xbc\x91", QC_ERR_ARG, "--tokens: item 1: '?\?\?' is not an integer"}, /* fullwidth 1 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t *ids = (int32_t *)&ids; /* must come back NULL */
        int n = -1;
        qc_err err;
        qc_err_clear(&err);
        qc_status st = qc_cli_parse_tokens(bad[i].text, "--tokens", &ids, &n, &err);
        ck_assert_msg(st == bad[i].code, "'%s': status %s (%s)", bad[i].text, qc_status_str(st),
                      err.msg);
        ck_assert_msg(strcmp(err.msg, bad[i].msg) == 0, "'%s':\n  got  %s\n  want %s",
                      bad[i].text, err.msg, bad[i].msg);
        ck_assert_ptr_null(ids);
        ck_assert_int_eq(n, 0);
    }
    /* accepted: separators with whitespace around them, leading zeros (decimal), the bounds */
    struct {
        const char *text;
        int n;
        int32_t last;
    } good[] = {
        {"1 , 2 ,3", 3, 3}, {" 7 ", 1, 7}, {"1,\n2", 2, 2}, {"007", 1, 7},
        {"0,2147483647", 2, 2147483647}, {"4\r\n5\r\n", 2, 5},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int32_t *ids = NULL;
        int n = -1;
        qc_err err;
        ck_assert_msg(qc_cli_parse_tokens(good[i].text, "--tokens", &ids, &n, &err) == QC_OK,
                      "'%s': %s", good[i].text, err.msg);
        ck_assert_int_eq(n, good[i].n);
        ck_assert_int_eq(ids[n - 1], good[i].last);
        free(ids);
    }
}
END_TEST

static qc_status prof_from(int argc, char **argv, qc_profile *p, int *ctx_given, qc_err *err);

/* A FIFO, a directory or a device as --tokens-file / --profile / any input: refused at once
 * with the path and the kind; alarm() turns a hang (the old fopen) into a failure. */
START_TEST(test_inputs_not_regular) {
    mk_tmp();
    char fifo[400], want[600];
    snprintf(fifo, sizeof fifo, "%s/fifo", tmp_);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    int32_t *ids = NULL;
    int n = -1;
    qc_err err;
    alarm(10);
    ck_assert_int_eq(qc_cli_read_tokens_file(fifo, &ids, &n, &err), QC_ERR_IO);
    snprintf(want, sizeof want, "%s: not a regular file (a FIFO)", fifo);
    ck_assert_str_eq(err.msg, want);
    ck_assert_ptr_null(ids);
    char *data = NULL;
    size_t len = 7;
    ck_assert_int_eq(qc_cli_read_file(fifo, &data, &len, &err), QC_ERR_IO); /* policy, baseline */
    ck_assert_str_eq(err.msg, want);
    ck_assert_ptr_null(data);
    ck_assert_int_eq((int)len, 0);
    qc_profile p;
    int given = 0;
    char *av[] = {"t", "--profile", fifo};
    ck_assert_int_eq(prof_from(3, av, &p, &given, &err), QC_ERR_IO);
    ck_assert_str_eq(err.msg, want);
    alarm(0);
    ck_assert_int_eq(qc_cli_read_tokens_file(tmp_, &ids, &n, &err), QC_ERR_IO);
    snprintf(want, sizeof want, "%s: not a regular file (a directory)", tmp_);
    ck_assert_str_eq(err.msg, want);
    ck_assert_int_eq(qc_cli_read_file("/dev/null", &data, &len, &err), QC_ERR_IO);
    ck_assert_str_eq(err.msg, "/dev/null: not a regular file (a character device)");
    /* a symlink to a regular file is read (the target is what counts) */
    char f[400], l[400];
    snprintf(f, sizeof f, "%s/t.txt", tmp_);
    snprintf(l, sizeof l, "%s/link.txt", tmp_);
    write_text(f, "4 5\n");
    ck_assert_int_eq(symlink(f, l), 0);
    ck_assert_int_eq(qc_cli_read_tokens_file(l, &ids, &n, &err), QC_OK);
    ck_assert_int_eq(n, 2);
    free(ids);
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
    /* the ExecuTorch spelling of max_context_len counts as given too (it used to be replaced
     * by max_seq_len) */
    write_text(f, "{\"get_max_seq_len\": 64, \"get_max_context_len\": 100}");
    ck_assert_int_eq(prof_from(4, a7, &p, &given, &err), QC_OK);
    ck_assert_int_eq(p.max_seq_len, 64);
    ck_assert_int_eq(p.max_context_len, 100);
    ck_assert_int_eq(given, 1);
    /* a misspelt key: refused, named, with the nearest known key */
    write_text(f, "{\"enable_dynamic_shap\": true}");
    ck_assert_int_eq(prof_from(4, a7, &p, &given, &err), QC_ERR_UNKNOWN);
    ck_assert_msg(strstr(err.msg, f) == err.msg &&
                      strstr(err.msg, "unknown key 'enable_dynamic_shap' (did you mean "
                                      "'enable_dynamic_shape'?); known keys: "),
                  "%s", err.msg);
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
    /* "did you mean": the nearest of the flags the parser asked about for this argument */
    (void)qc_argp_is(&a, "--flags");
    (void)qc_argp_is(&a, "--out");
    ck_assert_int_eq(qc_argp_unknown(&a, &err), QC_ERR_ARG);
    ck_assert_str_eq(err.msg, "unknown option '--flag=v' (did you mean '--flags'?)");
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
    tcase_add_test(tc, test_tokens_strict);
    tcase_add_test(tc, test_inputs_not_regular);
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
