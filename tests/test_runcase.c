/* test_runcase.c — qc_run_case invariants on a tiny checkpoint written with qc_testmodel:
 * static == dynamic == no-KV (logits, hidden, states, decode) within 1e-5 (absolute for
 * tensors of magnitude <= 1, relative to the tensor's max |x| above that); hidden-state
 * placement checked independently (row 0 = the embedding rows, row L times lm_head = the
 * logits); greedy == teacher-forced with the same tokens (bit-identical); a NaN-garbage state
 * reset gives bit-identical results; history replay + prompt == one prefill of both; errors. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "../harness/io/qc_golden.h"
#include "qc/qc_model.h"
#include "qc/qc_prefill.h"
#include "qc/qc_reference.h"
#include "../harness/host/qc_runcase.h"
#include "qc_testmodel.h"

/* ===================================================================================== */
/* fixture: one tiny model for the whole run                                             */
/* ===================================================================================== */

static char dir_[512];
static qc_model *model_;
static qc_backend *be_;

#define CTX 40      /* max_context_len of every profile here */
#define SEQ 4       /* max_seq_len: prompts are cut into chunks of 4 */

static void setup(void) {
    qc_err err;
    qc_err_clear(&err);
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o);
    o.dtype = QC_F32;
    o.cfg.layer_types[1] = QC_LAYER_FULL; /* L F L F: two attention layers, two DeltaNet */
    o.seed = 7;
    ck_assert_int_eq(qc_testmodel_mkdtemp(dir_, sizeof dir_, "runcase", &err), QC_OK);
    ck_assert_msg(qc_testmodel_write(dir_, &o, &err) == QC_OK, "%s", err.msg);
    ck_assert_msg(qc_model_load(dir_, &model_, &err) == QC_OK, "%s", err.msg);
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.max_tokens = CTX;
    ck_assert_msg(qc_reference_create(model_, &bo, &be_, &err) == QC_OK, "%s", err.msg);
}

static void teardown(void) {
    qc_backend_destroy(be_);
    qc_model_free(model_);
    qc_testmodel_rmtree(dir_);
    be_ = NULL;
    model_ = NULL;
}

static const qc_config *cfg(void) { return &model_->cfg; }

static void prompt(int32_t *t, int n, int salt) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)((i * 13 + salt * 7 + 5) % cfg()->vocab_size);
}

static qc_profile profile(qc_mode m) {
    qc_profile p;
    qc_profile_for_mode(&p, m, SEQ, CTX);
    return p;
}

static void run(qc_mode m, const qc_case_input *in, qc_golden_case *out) {
    qc_profile p = profile(m);
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_run_case(be_, &p, "c", in, out, &err);
    ck_assert_msg(st == QC_OK, "%s: %s", qc_mode_str(m), err.msg);
}

/* ===================================================================================== */
/* comparisons                                                                           */
/* ===================================================================================== */

static double maxdiff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates */
    }
    return m;
}

/* max |a - b| / max(1, max |a|): an absolute bound for tensors of magnitude <= 1, relative to
 * the tensor's scale above that (float32 reorderings scale with the magnitude). 0 iff equal. */
static double scaled_diff(const float *a, const float *b, size_t n) {
    double scale = 1;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)a[i]));
    return maxdiff(a, b, n) / scale;
}

/* Max scaled difference over all state buffers (same n_pos required). */
static double state_diff(const qc_golden_state *a, const qc_golden_state *b) {
    const qc_config *c = cfg();
    ck_assert_int_eq(a->present, 1);
    ck_assert_int_eq(b->present, 1);
    ck_assert_int_eq(a->n_pos, b->n_pos);
    double m = 0;
    for (int l = 0; l < c->n_layers; l++) {
        double d;
        if (c->layer_types[l] == QC_LAYER_FULL) {
            size_t n = (size_t)c->n_kv_heads * a->n_pos * c->head_dim;
            d = fmax(scaled_diff(a->k_cache[l], b->k_cache[l], n),
                     scaled_diff(a->v_cache[l], b->v_cache[l], n));
        } else {
            d = fmax(scaled_diff(a->conv_state[l], b->conv_state[l],
                             (size_t)qc_cfg_conv_dim(c) * c->conv_kernel),
                     scaled_diff(a->recurrent_state[l], b->recurrent_state[l],
                             (size_t)c->lin_n_v_heads * c->lin_k_dim * c->lin_v_dim));
        }
        if (!(d <= m)) m = d;
    }
    return m;
}

/* Everything of two cases with the same shape; returns the max scaled difference. */
static double case_diff(const qc_golden_case *a, const qc_golden_case *b) {
    const qc_config *c = cfg();
    const size_t V = (size_t)c->vocab_size;
    ck_assert_int_eq(a->n_tokens, b->n_tokens);
    ck_assert_int_eq(a->n_decode, b->n_decode);
    ck_assert_int_eq(a->start_pos, b->start_pos);
    double m = scaled_diff(a->prefill_logits, b->prefill_logits, (size_t)a->n_tokens * V);
    if (a->prefill_hidden && b->prefill_hidden)
        m = fmax(m, scaled_diff(a->prefill_hidden, b->prefill_hidden,
                            (size_t)(c->n_layers + 1) * a->n_tokens * c->hidden_size));
    m = fmax(m, state_diff(&a->prefill_state, &b->prefill_state));
    if (a->n_decode > 0) {
        ck_assert_int_eq(memcmp(a->decode_tokens, b->decode_tokens,
                                (size_t)a->n_decode * sizeof(int32_t)), 0);
        m = fmax(m, scaled_diff(a->decode_logits, b->decode_logits, (size_t)a->n_decode * V));
        m = fmax(m, scaled_diff(a->decode_margins, b->decode_margins, (size_t)a->n_decode));
        m = fmax(m, state_diff(&a->decode_state, &b->decode_state));
    }
    return m;
}

/* ===================================================================================== */
/* tests                                                                                 */
/* ===================================================================================== */

/* Shapes, trimming, hidden placement (independent of the runner), and top1-top2 margins. */
START_TEST(test_outputs_independent) {
    const qc_config *c = cfg();
    const int V = c->vocab_size, H = c->hidden_size, L = c->n_layers, T = 10, S = 3;
    int32_t t[10];
    prompt(t, T, 1);
    qc_case_input in = {.tokens = t, .n_tokens = T, .n_decode = S, .capture_hidden = 1};
    qc_golden_case r;
    run(QC_MODE_DYNAMIC, &in, &r);
    ck_assert_str_eq(r.name, "c");
    ck_assert_int_eq(r.start_pos, 0);
    ck_assert_int_eq(r.max_seq_len, SEQ);
    ck_assert_int_eq(r.prefill_state.n_pos, T);
    ck_assert_int_eq(r.decode_state.n_pos, T + S);
    /* hidden[0] = the embedding rows of the prompt, exactly */
    for (int p = 0; p < T; p++)
        for (int j = 0; j < H; j++)
            ck_assert(r.prefill_hidden[(size_t)p * H + j] ==
                      qc_tensor_get(&model_->embed, (size_t)t[p] * H + j));
    /* hidden[L] = the final-norm output: lm_head . hidden[L] reproduces every logits row */
    double worst = 0;
    for (int p = 0; p < T; p++)
        for (int v = 0; v < V; v++) {
            double acc = 0;
            for (int j = 0; j < H; j++)
                acc += (double)qc_tensor_get(&model_->lm_head, (size_t)v * H + j) *
                       r.prefill_hidden[((size_t)L * T + p) * H + j];
            worst = fmax(worst, fabs(acc - r.prefill_logits[(size_t)p * V + v]));
        }
    ck_assert_msg(worst < 1e-4, "lm_head(hidden[L]) vs logits: %g", worst);
    /* intermediate rows are neither zero nor copies of each other */
    ck_assert(maxdiff(r.prefill_hidden + (size_t)1 * T * H, r.prefill_hidden + (size_t)2 * T * H,
                      (size_t)T * H) > 1e-3);
    /* the logits equal one direct forward over the whole prompt on a fresh state */
    qc_state *st = NULL;
    qc_err err;
    ck_assert_int_eq(qc_state_create(c, CTX, &st, &err), QC_OK);
    float *direct = malloc((size_t)T * V * sizeof(float));
    ck_assert_int_eq(qc_backend_forward(be_, t, T, 0, st, direct, 1, &err), QC_OK);
    double dd = scaled_diff(direct, r.prefill_logits, (size_t)T * V);
    ck_assert_msg(dd < 1e-5, "one forward vs dynamic chunks of %d: %g", SEQ, dd);
    /* the decode tokens are greedy and the margins top1 - top2 of the choosing row */
    for (int s = 0; s < S; s++) {
        const float *row = s == 0 ? r.prefill_logits + (size_t)(T - 1) * V
                                  : r.decode_logits + (size_t)(s - 1) * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best]) best = v;
        float second = -INFINITY;
        for (int v = 0; v < V; v++)
            if (v != best && row[v] > second) second = row[v];
        ck_assert_int_eq(r.decode_tokens[s], best);
        ck_assert(r.decode_margins[s] == row[best] - second);
    }
    free(direct);
    qc_state_destroy(st);
    qc_case_free(c, &r);
    ck_assert_ptr_null(r.prefill_logits);
}
END_TEST

/* Static (one token per call), dynamic (chunks of 4) and no-KV (recompute from 0) agree. */
START_TEST(test_modes_agree) {
    const int T = 11, S = 4;
    int32_t t[11];
    prompt(t, T, 2);
    qc_case_input in = {.tokens = t, .n_tokens = T, .n_decode = S, .capture_hidden = 1};
    qc_golden_case rs, rd, rn;
    run(QC_MODE_STATIC, &in, &rs);
    run(QC_MODE_DYNAMIC, &in, &rd);
    run(QC_MODE_NOKV, &in, &rn);
    for (int s = 0; s < S; s++)
        ck_assert_msg(rs.decode_margins[s] > 1e-3, "near-tie at step %d: %g", s,
                      rs.decode_margins[s]);
    double sd = case_diff(&rs, &rd), sn = case_diff(&rs, &rn);
    fprintf(stderr, "test_modes_agree: max scaled |static - dynamic| %.3g, |static - nokv| %.3g\n",
            sd, sn);
    ck_assert_msg(sd <= 1e-5, "static vs dynamic: %g", sd);
    ck_assert_msg(sn <= 1e-5, "static vs nokv: %g", sn);
    qc_case_free(cfg(), &rs);
    qc_case_free(cfg(), &rd);
    qc_case_free(cfg(), &rn);
}
END_TEST

/* Greedy and teacher-forced with the greedy tokens: bit-identical. */
START_TEST(test_greedy_equals_forced) {
    const int T = 6, S = 5;
    int32_t t[6];
    prompt(t, T, 3);
    for (int m = 0; m < 3; m++) {
        qc_case_input in = {.tokens = t, .n_tokens = T, .n_decode = S, .capture_hidden = 1};
        qc_golden_case g, f;
        run((qc_mode)m, &in, &g);
        in.forced = g.decode_tokens;
        run((qc_mode)m, &in, &f);
        ck_assert_msg(case_diff(&g, &f) == 0.0, "%s: greedy vs forced differ",
                      qc_mode_str((qc_mode)m));
        /* forcing other tokens changes the decode, not the prefill */
        int32_t other[5];
        for (int s = 0; s < S; s++) other[s] = (g.decode_tokens[s] + 1) % cfg()->vocab_size;
        qc_golden_case o;
        in.forced = other;
        run((qc_mode)m, &in, &o);
        ck_assert_int_eq(memcmp(o.decode_tokens, other, sizeof other), 0);
        ck_assert(maxdiff(o.prefill_logits, g.prefill_logits, (size_t)T * cfg()->vocab_size) == 0);
        ck_assert(maxdiff(o.decode_logits, g.decode_logits, (size_t)S * cfg()->vocab_size) > 1e-4);
        qc_case_free(cfg(), &g);
        qc_case_free(cfg(), &f);
        qc_case_free(cfg(), &o);
    }
}
END_TEST

/* A state filled with NaN and reset gives exactly the fresh result. */
START_TEST(test_garbage_state_bit_identical) {
    const int T = 9, S = 3;
    int32_t t[9];
    prompt(t, T, 4);
    for (int m = 0; m < 3; m++) {
        qc_case_input in = {.tokens = t, .n_tokens = T, .n_decode = S, .capture_hidden = 1};
        qc_golden_case fresh, garbage;
        run((qc_mode)m, &in, &fresh);
        in.garbage_state = 1;
        run((qc_mode)m, &in, &garbage);
        ck_assert_msg(case_diff(&fresh, &garbage) == 0.0, "%s: garbage state leaks",
                      qc_mode_str((qc_mode)m));
        qc_case_free(cfg(), &fresh);
        qc_case_free(cfg(), &garbage);
    }
}
END_TEST

/* History replay (P tokens) then the prompt == one prefill of history + prompt. */
START_TEST(test_history_equals_one_prefill) {
    const qc_config *c = cfg();
    const int P = 6, T = 7, S = 3, V = c->vocab_size, H = c->hidden_size, L = c->n_layers;
    int32_t all[13];
    prompt(all, P + T, 5);
    for (int m = 0; m < 3; m++) {
        qc_case_input a = {.history = all, .n_history = P, .tokens = all + P, .n_tokens = T,
                           .n_decode = S, .capture_hidden = 1};
        qc_case_input b = {.tokens = all, .n_tokens = P + T, .n_decode = S, .capture_hidden = 1};
        qc_golden_case ra, rb;
        run((qc_mode)m, &a, &ra);
        run((qc_mode)m, &b, &rb);
        ck_assert_int_eq(ra.start_pos, P);
        ck_assert_int_eq(ra.n_history, P);
        ck_assert_int_eq(memcmp(ra.history, all, (size_t)P * sizeof(int32_t)), 0);
        double d = scaled_diff(ra.prefill_logits, rb.prefill_logits + (size_t)P * V, (size_t)T * V);
        for (int i = 0; i <= L; i++)
            d = fmax(d, scaled_diff(ra.prefill_hidden + (size_t)i * T * H,
                                rb.prefill_hidden + ((size_t)i * (P + T) + P) * H, (size_t)T * H));
        d = fmax(d, state_diff(&ra.prefill_state, &rb.prefill_state));
        ck_assert_int_eq(memcmp(ra.decode_tokens, rb.decode_tokens, S * sizeof(int32_t)), 0);
        d = fmax(d, scaled_diff(ra.decode_logits, rb.decode_logits, (size_t)S * V));
        d = fmax(d, state_diff(&ra.decode_state, &rb.decode_state));
        fprintf(stderr, "test_history_equals_one_prefill: %s max diff %.3g\n",
                qc_mode_str((qc_mode)m), d);
        /* static: the same [1,1] calls in the same order -> bit-identical */
        if (m == QC_MODE_STATIC)
            ck_assert_msg(d == 0.0, "static: %g", d);
        else
            ck_assert_msg(d <= 1e-5, "%s: %g", qc_mode_str((qc_mode)m), d);
        qc_case_free(c, &ra);
        qc_case_free(c, &rb);
    }
}
END_TEST

static int dummy_calls;
static void dummy_trace(void *u, int i, const char *n, int sp, int nt, int d, const float *x) {
    (void)u, (void)i, (void)sp, (void)nt, (void)d, (void)x;
    if (!strcmp(n, "hidden")) dummy_calls++; /* not the "mlp_in" rows beside them */
}

/* The case's call options reach every forward (the capture replaces the trace for the prompt
 * only); the backend's options stay untouched; errors are clean; the fault hook reaches the
 * runner. */
START_TEST(test_errors_and_hooks) {
    int32_t t[8];
    prompt(t, 8, 6);
    qc_err err;
    qc_golden_case r;
    qc_profile p = profile(QC_MODE_DYNAMIC);
    int sentinel = 0;
    qc_call call;
    qc_call_default(&call);
    call.trace = dummy_trace;
    call.trace_user = &sentinel;
    qc_case_input in = {.tokens = t, .n_tokens = 8, .n_decode = 2, .capture_hidden = 1,
                        .call = &call};
    ck_assert_int_eq(qc_run_case(be_, &p, "hooks", &in, &r, &err), QC_OK);
    ck_assert(be_->opts.trace == NULL && be_->opts.trace_user == NULL);
    /* the capture replaced the hook during the prefill only: the 2 decode calls reached it */
    ck_assert_int_eq(dummy_calls, 2 * (cfg()->n_layers + 1));
    qc_case_free(cfg(), &r);

    /* empty prompt */
    qc_case_input e = {.tokens = t, .n_tokens = 0};
    qc_err_clear(&err);
    ck_assert_int_eq(qc_run_case(be_, &p, "empty", &e, &r, &err), QC_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "empty") != NULL, "%s", err.msg);
    ck_assert_ptr_null(r.tokens);
    /* beyond max_context_len */
    qc_case_input big = {.tokens = t, .n_tokens = 8, .n_decode = CTX - 7};
    qc_err_clear(&err);
    ck_assert_int_eq(qc_run_case(be_, &p, "big", &big, &r, &err), QC_ERR_RANGE);
    ck_assert_msg(strstr(err.msg, "max_context_len") != NULL, "%s", err.msg);
    /* a token outside the vocabulary: the runner's error, prefixed with the case */
    int32_t bad[3] = {1, cfg()->vocab_size, 2};
    qc_case_input ob = {.tokens = bad, .n_tokens = 3, .capture_hidden = 1};
    qc_err_clear(&err);
    ck_assert_int_eq(qc_run_case(be_, &p, "oob", &ob, &r, &err), QC_ERR_RANGE);
    ck_assert_msg(strstr(err.msg, "case oob: prefill") != NULL, "%s", err.msg);
    ck_assert_ptr_null(r.prefill_logits);
    /* the static_no_advance fault reaches the runner and changes the result */
    qc_profile ps = profile(QC_MODE_STATIC);
    qc_case_input ok = {.tokens = t, .n_tokens = 8};
    qc_golden_case good, faulty;
    ck_assert_int_eq(qc_run_case(be_, &ps, "good", &ok, &good, &err), QC_OK);
    ok.static_no_advance = 1;
    ck_assert_int_eq(qc_run_case(be_, &ps, "faulty", &ok, &faulty, &err), QC_OK);
    ck_assert(maxdiff(good.prefill_logits, faulty.prefill_logits,
                      (size_t)8 * cfg()->vocab_size) > 1e-3);
    qc_case_free(cfg(), &good);
    qc_case_free(cfg(), &faulty);
}
END_TEST

/* ===================================================================================== */

static Suite *runcase_suite(void) {
    Suite *s = suite_create("runcase");
    TCase *tc = tcase_create("invariants");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_outputs_independent);
    tcase_add_test(tc, test_modes_agree);
    tcase_add_test(tc, test_greedy_equals_forced);
    tcase_add_test(tc, test_garbage_state_bit_identical);
    tcase_add_test(tc, test_history_equals_one_prefill);
    tcase_add_test(tc, test_errors_and_hooks);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(runcase_suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
