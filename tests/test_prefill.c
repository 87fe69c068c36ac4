/* test_prefill.c — the export profile and the prefill controller's strategies, checked with a
 * mock backend that records every forward call (n, start_pos) and writes logits that depend
 * only on (token, absolute position), so misplaced rows or wrong positions are visible. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qc/qc_prefill.h"

#define V 16
#define MAXCALLS 256

typedef struct { int n, pos; } call_rec;
static call_rec calls[MAXCALLS];
static int ncalls;

/* argmax of the mock logits for token t at absolute position p */
static int expect_tok(int t, int p) { return (t * 7 + p) % V; }

static void mock_row(float *row, int t, int p) {
    int a = expect_tok(t, p);
    for (int v = 0; v < V; v++) row[v] = -(float)abs(v - a);
}

static int fail_at_call = -1; /* >= 0: that forward call (0-based) fails */

static qc_status mock_forward(qc_backend *be, const qc_call *call, const int32_t *toks, int n,
                              int pos, qc_state *st, float *logits, int all, qc_err *err) {
    (void)call;
    if (n > be->opts.max_tokens) return qc_errf(err, QC_ERR_RANGE, "mock: n %d too large", n);
    if (fail_at_call >= 0 && ncalls == fail_at_call) {
        ncalls++;
        return qc_errf(err, QC_ERR_RUNTIME, "mock: call %d fails", fail_at_call);
    }
    if (ncalls < MAXCALLS) calls[ncalls++] = (call_rec){n, pos};
    /* mark which cache positions were written so "no KV" recomputation can be seen */
    for (int i = 0; i < n; i++) st->k_cache[1][pos + i] = (float)toks[i] + 1.0f;
    if (logits) {
        if (all) for (int i = 0; i < n; i++) mock_row(logits + (size_t)i * V, toks[i], pos + i);
        else mock_row(logits, toks[n - 1], pos + n - 1);
    }
    return QC_OK;
}

static qc_config cfg;
static qc_model model;
static qc_backend be;
static qc_state *st;

static void setup(void) {
    memset(&cfg, 0, sizeof cfg);
    cfg.vocab_size = V; cfg.hidden_size = 4; cfg.intermediate_size = 4; cfg.n_layers = 2;
    cfg.n_heads = 1; cfg.n_kv_heads = 1; cfg.head_dim = 1;
    cfg.lin_n_k_heads = 1; cfg.lin_n_v_heads = 1; cfg.lin_k_dim = 1; cfg.lin_v_dim = 1;
    cfg.conv_kernel = 2; cfg.layer_types[0] = QC_LAYER_LINEAR; cfg.layer_types[1] = QC_LAYER_FULL;
    model.cfg = cfg;
    memset(&be, 0, sizeof be);
    be.name = "mock";
    be.model = &model;
    qc_backend_opts_default(&be.opts);
    be.opts.max_tokens = 64;
    be.forward = mock_forward;
    ck_assert_int_eq(qc_state_create(&cfg, 64, &st, NULL), QC_OK);
    ncalls = 0;
    fail_at_call = -1;
}
static void teardown(void) { qc_state_destroy(st); }

static qc_runner *mk(qc_mode mode, int seq, int ctx) {
    qc_profile p;
    qc_profile_for_mode(&p, mode, seq, ctx);
    qc_runner *r = NULL;
    qc_err e = {0};
    ck_assert_msg(qc_runner_create(&be, &p, st, &r, &e) == QC_OK, "%s", e.msg);
    return r;
}

static const int32_t prompt[10] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};

static void check_logits(const float *all, int n, int start) {
    for (int i = 0; i < n; i++) {
        int a = 0;
        for (int v = 1; v < V; v++) if (all[i * V + v] > all[i * V + a]) a = v;
        ck_assert_int_eq(a, expect_tok(prompt[i], start + i));
    }
}

START_TEST(static_one_token_per_call) {
    qc_runner *r = mk(QC_MODE_STATIC, 4, 32);
    float all[10 * V], last[V];
    int32_t first = -1;
    ck_assert_int_eq(qc_runner_prefill(r, prompt, 10, 0, all, last, &first, NULL), QC_OK);
    ck_assert_int_eq(ncalls, 10);
    for (int i = 0; i < 10; i++) { ck_assert_int_eq(calls[i].n, 1); ck_assert_int_eq(calls[i].pos, i); }
    check_logits(all, 10, 0);
    ck_assert_int_eq(first, expect_tok(3, 9));
    ck_assert_int_eq(qc_runner_pos(r), 10);
    ck_assert_int_eq(qc_runner_decode(r, 2, last, NULL), QC_OK);
    ck_assert_int_eq(calls[10].n, 1); ck_assert_int_eq(calls[10].pos, 10);
    ck_assert_int_eq(qc_argmax(last, V), expect_tok(2, 10));
    qc_runner_destroy(r);
}
END_TEST

/* A chunk that fails: the position stays after the chunks really consumed (not past the failed
 * one), and the runner refuses further prefill / decode until reset (issue #14). */
START_TEST(failed_chunk_does_not_advance) {
    qc_runner *r = mk(QC_MODE_DYNAMIC, 4, 32);
    float all[10 * V];
    qc_err e = {0};
    fail_at_call = 1; /* the second chunk, positions 4..7 */
    ck_assert_int_eq(qc_runner_prefill(r, prompt, 10, 0, all, NULL, NULL, &e), QC_ERR_RUNTIME);
    ck_assert_int_eq(ncalls, 2);                /* no third chunk after the failure */
    ck_assert_int_eq(qc_runner_pos(r), 4);      /* only the first chunk was consumed */
    fail_at_call = -1;
    ck_assert_int_eq(qc_runner_decode(r, 2, NULL, &e), QC_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "reset"), "%s", e.msg);
    ck_assert_int_eq(qc_runner_prefill(r, prompt + 4, 6, 4, all, NULL, NULL, NULL), QC_ERR_ARG);
    ck_assert_int_eq(ncalls, 2);                /* refused before any backend call */
    ck_assert_int_eq(qc_runner_reset(r, NULL), QC_OK);
    ck_assert_int_eq(qc_runner_pos(r), 0);
    ck_assert_int_eq(qc_runner_prefill(r, prompt, 10, 0, all, NULL, NULL, NULL), QC_OK);
    check_logits(all, 10, 0);
    ck_assert_int_eq(qc_runner_pos(r), 10);
    /* a failed decode: position unchanged, then refused until reset */
    fail_at_call = ncalls;
    ck_assert_int_eq(qc_runner_decode(r, 2, NULL, NULL), QC_ERR_RUNTIME);
    ck_assert_int_eq(qc_runner_pos(r), 10);
    fail_at_call = -1;
    ck_assert_int_eq(qc_runner_decode(r, 2, NULL, NULL), QC_ERR_ARG);
    qc_runner_destroy(r);
}
END_TEST

START_TEST(dynamic_chunks_of_max_seq_len) {
    qc_runner *r = mk(QC_MODE_DYNAMIC, 4, 32);
    float all[10 * V];
    ck_assert_int_eq(qc_runner_prefill(r, prompt, 10, 0, all, NULL, NULL, NULL), QC_OK);
    ck_assert_int_eq(ncalls, 3);
    ck_assert_int_eq(calls[0].n, 4); ck_assert_int_eq(calls[0].pos, 0);
    ck_assert_int_eq(calls[1].n, 4); ck_assert_int_eq(calls[1].pos, 4);
    ck_assert_int_eq(calls[2].n, 2); ck_assert_int_eq(calls[2].pos, 8);
    check_logits(all, 10, 0);
    /* continuation at start_pos 10 */
    ck_assert_int_eq(qc_runner_prefill(r, prompt, 3, 10, all, NULL, NULL, NULL), QC_OK);
    ck_assert_int_eq(calls[3].n, 3); ck_assert_int_eq(calls[3].pos, 10);
    check_logits(all, 3, 10);
    qc_runner_destroy(r);
}
END_TEST

START_TEST(nokv_recomputes_from_zero) {
    qc_runner *r = mk(QC_MODE_NOKV, 4, 32);
    float all[10 * V], last[V];
    ck_assert_int_eq(qc_runner_prefill(r, prompt, 10, 0, all, last, NULL, NULL), QC_OK);
    ck_assert_int_eq(ncalls, 3);
    ck_assert_int_eq(calls[0].n, 4); ck_assert_int_eq(calls[0].pos, 0);
    ck_assert_int_eq(calls[1].n, 8); ck_assert_int_eq(calls[1].pos, 0);
    ck_assert_int_eq(calls[2].n, 10); ck_assert_int_eq(calls[2].pos, 0);
    check_logits(all, 10, 0);
    ck_assert_int_eq(qc_runner_decode(r, 7, last, NULL), QC_OK);
    ck_assert_int_eq(calls[3].n, 11); ck_assert_int_eq(calls[3].pos, 0);
    ck_assert_int_eq(qc_argmax(last, V), expect_tok(7, 10));
    ck_assert_int_eq(qc_runner_pos(r), 11);
    qc_runner_destroy(r);
}
END_TEST

START_TEST(errors_leave_state_alone) {
    qc_runner *r = mk(QC_MODE_DYNAMIC, 8, 12);
    qc_err e = {0};
    ck_assert_int_eq(qc_runner_prefill(r, prompt, 0, 0, NULL, NULL, NULL, &e), QC_ERR_ARG);
    ck_assert(strstr(e.msg, "empty prompt"));
    int32_t bad[3] = {1, V, 2};
    ck_assert_int_eq(qc_runner_prefill(r, bad, 3, 0, NULL, NULL, NULL, &e), QC_ERR_RANGE);
    ck_assert_msg(strstr(e.msg, "token 16 (index 1)"), "%s", e.msg);
    int32_t neg[1] = {-1};
    ck_assert_int_eq(qc_runner_prefill(r, neg, 1, 0, NULL, NULL, NULL, &e), QC_ERR_RANGE);
    ck_assert_int_eq(qc_runner_prefill(r, prompt, 10, 0, NULL, NULL, NULL, &e), QC_OK);
    ck_assert_int_eq(qc_runner_prefill(r, prompt, 3, 10, NULL, NULL, NULL, &e), QC_ERR_RANGE);
    ck_assert_msg(strstr(e.msg, "max_context_len 12"), "%s", e.msg);
    ck_assert_int_eq(qc_runner_prefill(r, prompt, 1, 3, NULL, NULL, NULL, &e), QC_ERR_ARG);
    ck_assert_int_eq(ncalls, 2);           /* only the one good prefill (8 + 2) ran */
    ck_assert_int_eq(qc_runner_pos(r), 10);
    ck_assert_int_eq(qc_runner_decode(r, 1, NULL, &e), QC_OK);
    ck_assert_int_eq(qc_runner_decode(r, 1, NULL, &e), QC_OK);
    ck_assert_int_eq(qc_runner_decode(r, 1, NULL, &e), QC_ERR_RANGE);   /* context full */
    ck_assert_int_eq(qc_runner_pos(r), 12);
    qc_runner_destroy(r);
}
END_TEST

START_TEST(backend_too_small_for_mode) {
    qc_profile p;
    qc_profile_for_mode(&p, QC_MODE_NOKV, 16, 64);
    be.opts.max_tokens = 16;
    qc_runner *r = NULL;
    qc_err e = {0};
    ck_assert_int_eq(qc_runner_create(&be, &p, st, &r, &e), QC_ERR_UNSUPPORTED);
    ck_assert(strstr(e.msg, "nokv mode needs 64"));
}
END_TEST

START_TEST(fault_static_no_advance) {
    qc_runner *r = mk(QC_MODE_STATIC, 8, 32);
    qc_err e = {0};
    ck_assert_int_eq(qc_runner_set_option(r, "fault.static_no_advance", "1", &e), QC_OK);
    ck_assert_int_eq(qc_runner_prefill(r, prompt, 5, 0, NULL, NULL, NULL, NULL), QC_OK);
    for (int i = 0; i < 5; i++) ck_assert_int_eq(calls[i].pos, 0);
    /* back to the correct step; unknown keys and values are refused, naming them */
    ck_assert_int_eq(qc_runner_set_option(r, "fault.static_no_advance", "0", &e), QC_OK);
    ck_assert_int_eq(qc_runner_reset(r, &e), QC_OK);
    ncalls = 0;
    ck_assert_int_eq(qc_runner_prefill(r, prompt, 5, 0, NULL, NULL, NULL, NULL), QC_OK);
    for (int i = 0; i < 5; i++) ck_assert_int_eq(calls[i].pos, i);
    ck_assert_int_eq(qc_runner_set_option(r, "fault.nope", "1", &e), QC_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "'fault.nope' unknown"), "%s", e.msg);
    ck_assert_int_eq(qc_runner_set_option(r, "fault.static_no_advance", "2", &e), QC_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "value '2' is not 0 or 1"), "%s", e.msg);
    qc_runner_destroy(r);
}
END_TEST

START_TEST(profile_json) {
    qc_profile p;
    qc_err e = {0};
    const char *j1 = "{\"max_seq_len\": 32}";
    ck_assert_int_eq(qc_profile_parse(j1, strlen(j1), "p.json", &p, &e), QC_OK);
    ck_assert_int_eq(p.enable_dynamic_shape, 0);     /* absent means false */
    ck_assert_int_eq(p.use_kv_cache, 1);
    ck_assert_int_eq(p.max_context_len, 32);         /* = max_seq_len when absent */
    ck_assert_int_eq(qc_profile_mode(&p), QC_MODE_STATIC);
    const char *j2 = "{\"enable_dynamic_shape\": true, \"get_max_seq_len\": 8, \"get_max_context_len\": 64}";
    ck_assert_int_eq(qc_profile_parse(j2, strlen(j2), "p.json", &p, &e), QC_OK);
    ck_assert_int_eq(qc_profile_mode(&p), QC_MODE_DYNAMIC);
    ck_assert_int_eq(p.max_seq_len, 8); ck_assert_int_eq(p.max_context_len, 64);
    const char *j3 = "{\"use_kv_cache\": false, \"enable_dynamic_shape\": true}";
    ck_assert_int_eq(qc_profile_parse(j3, strlen(j3), "p.json", &p, &e), QC_OK);
    ck_assert_int_eq(qc_profile_mode(&p), QC_MODE_NOKV);
    const char *bad1 = "{\"max_seq_len\": -3}";
    ck_assert_int_eq(qc_profile_parse(bad1, strlen(bad1), "p.json", &p, &e), QC_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, "p.json: max_seq_len"), "%s", e.msg);
    const char *bad2 = "{\"enable_dynamic_shape\": \"yes\"}";
    ck_assert_int_eq(qc_profile_parse(bad2, strlen(bad2), "p.json", &p, &e), QC_ERR_FORMAT);
    ck_assert(strstr(e.msg, "enable_dynamic_shape"));
    const char *bad3 = "{\"max_seq_len\": 4";
    ck_assert_int_eq(qc_profile_parse(bad3, strlen(bad3), "p.json", &p, &e), QC_ERR_FORMAT);
    ck_assert(strstr(e.msg, "p.json: malformed JSON"));
    ck_assert_int_eq(qc_profile_load("/nonexistent/p.json", &p, &e), QC_ERR_IO);
    ck_assert(strstr(e.msg, "/nonexistent/p.json"));
    qc_mode m;
    ck_assert_int_eq(qc_mode_parse("nokv", &m, NULL), QC_OK);
    ck_assert_int_eq(m, QC_MODE_NOKV);
    ck_assert_int_eq(qc_mode_parse("fast", &m, &e), QC_ERR_ARG);
}
END_TEST

/* Parse a profile text; status, and the message when `want` is non-NULL (exact match). */
static void prof_expect(const char *json, qc_status code, const char *want) {
    qc_profile p;
    qc_err e = {0};
    qc_status st = qc_profile_parse(json, strlen(json), "p.json", &p, &e);
    ck_assert_msg(st == code, "%s: status %s != %s (%s)", json, qc_status_str(st),
                  qc_status_str(code), e.msg);
    if (want) ck_assert_msg(strcmp(e.msg, want) == 0, "%s:\n  got  %s\n  want %s", json, e.msg, want);
    if (st) { /* a failed parse leaves the defaults, never a half-read profile */
        ck_assert_int_eq(p.enable_dynamic_shape, 0);
        ck_assert_int_eq(p.max_seq_len, 128);
    }
}

#define KNOWN "known keys: enable_dynamic_shape, use_kv_cache, max_seq_len, max_context_len, " \
              "get_max_seq_len, get_max_context_len"

START_TEST(profile_unknown_keys) {
    /* a typo of a known key: named, with the nearest key and the known keys */
    prof_expect("{\"enable_dynamic_shap\": true, \"max_seq_len\": 16}", QC_ERR_UNKNOWN,
                "p.json: unknown key 'enable_dynamic_shap' (did you mean "
                "'enable_dynamic_shape'?); " KNOWN);
    prof_expect("{\"max_seqlen\": 16}", QC_ERR_UNKNOWN,
                "p.json: unknown key 'max_seqlen' (did you mean 'max_seq_len'?); " KNOWN);
    prof_expect("{\"max_sqe_len\": 16}", QC_ERR_UNKNOWN, /* a transposition is one edit */
                "p.json: unknown key 'max_sqe_len' (did you mean 'max_seq_len'?); " KNOWN);
    prof_expect("{\"use_kv_cahce\": false}", QC_ERR_UNKNOWN,
                "p.json: unknown key 'use_kv_cahce' (did you mean 'use_kv_cache'?); " KNOWN);
    prof_expect("{\"Max_Context_Len\": 64}", QC_ERR_UNKNOWN, /* keys are case-sensitive */
                "p.json: unknown key 'Max_Context_Len' (did you mean 'max_context_len'?); " KNOWN);
    /* nothing within edit distance 2: no suggestion */
    prof_expect("{\"max_ctx_len\": 64}", QC_ERR_UNKNOWN,
                "p.json: unknown key 'max_ctx_len'; " KNOWN);
    prof_expect("{\"dynamic\": true}", QC_ERR_UNKNOWN, "p.json: unknown key 'dynamic'; " KNOWN);
    prof_expect("{\"\": 1}", QC_ERR_UNKNOWN, "p.json: unknown key ''; " KNOWN);
    /* an unknown key after valid ones, a control character shown cleaned */
    prof_expect("{\"max_seq_len\": 16, \"x\\u0001\": 1}", QC_ERR_UNKNOWN,
                "p.json: unknown key 'x?'; " KNOWN);
    /* a key twice; a short name and its ExecuTorch name that disagree */
    prof_expect("{\"max_seq_len\": 16, \"max_seq_len\": 32}", QC_ERR_FORMAT,
                "p.json: key 'max_seq_len' appears more than once");
    prof_expect("{\"max_seq_len\": 16, \"get_max_seq_len\": 32}", QC_ERR_FORMAT,
                "p.json: max_seq_len 16 and get_max_seq_len 32 disagree (give one)");
    prof_expect("{\"max_context_len\": 16, \"get_max_context_len\": 32}", QC_ERR_FORMAT,
                "p.json: max_context_len 16 and get_max_context_len 32 disagree (give one)");
    /* every known key, both spellings agreeing: accepted */
    prof_expect("{\"enable_dynamic_shape\": true, \"use_kv_cache\": true, \"max_seq_len\": 8, "
                "\"get_max_seq_len\": 8, \"max_context_len\": 32, \"get_max_context_len\": 32}",
                QC_OK, NULL);
    prof_expect("{}", QC_OK, NULL);
}
END_TEST

/* A FIFO / a directory / a device as the profile file: refused at once (alarm: a hang fails). */
START_TEST(profile_load_not_regular) {
    char dir[] = "/tmp/qc_test_prefill_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], want[320];
    snprintf(path, sizeof path, "%s/p.json", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    qc_profile p;
    qc_err e = {0};
    alarm(10);
    ck_assert_int_eq(qc_profile_load(path, &p, &e), QC_ERR_IO);
    alarm(0);
    snprintf(want, sizeof want, "%s: not a regular file (a FIFO)", path);
    ck_assert_str_eq(e.msg, want);
    unlink(path);
    ck_assert_int_eq(qc_profile_load(dir, &p, &e), QC_ERR_IO);
    snprintf(want, sizeof want, "%s: not a regular file (a directory)", dir);
    ck_assert_str_eq(e.msg, want);
    ck_assert_int_eq(qc_profile_load("/dev/null", &p, &e), QC_ERR_IO);
    ck_assert_str_eq(e.msg, "/dev/null: not a regular file (a character device)");
    /* a regular file with a typo in it: the load names the file and the key */
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"enable_dynamic_shap\": true}", f);
    fclose(f);
    ck_assert_int_eq(qc_profile_load(path, &p, &e), QC_ERR_UNKNOWN);
    ck_assert_msg(strstr(e.msg, path) == e.msg && strstr(e.msg, "'enable_dynamic_shap'"), "%s",
                  e.msg);
    /* larger than QC_PROFILE_MAX_BYTES */
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputc('{', f);
    for (size_t i = 0; i < QC_PROFILE_MAX_BYTES; i++) fputc(' ', f);
    fputc('}', f);
    fclose(f);
    ck_assert_int_eq(qc_profile_load(path, &p, &e), QC_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, path) == e.msg && strstr(e.msg, "limit"), "%s", e.msg);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void) {
    Suite *su = suite_create("prefill");
    TCase *tc = tcase_create("controller");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, static_one_token_per_call);
    tcase_add_test(tc, dynamic_chunks_of_max_seq_len);
    tcase_add_test(tc, failed_chunk_does_not_advance);
    tcase_add_test(tc, nokv_recomputes_from_zero);
    tcase_add_test(tc, errors_leave_state_alone);
    tcase_add_test(tc, backend_too_small_for_mode);
    tcase_add_test(tc, fault_static_no_advance);
    tcase_add_test(tc, profile_json);
    suite_add_tcase(su, tc);
    TCase *pr = tcase_create("profile");
    tcase_add_test(pr, profile_unknown_keys);
    tcase_add_test(pr, profile_load_not_regular);
    suite_add_tcase(su, pr);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
