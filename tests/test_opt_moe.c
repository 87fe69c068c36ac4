/* test_opt_moe.c — the optimized backend's MoE block (optimized/qc_opt_moe.c) on tiny synthetic
 * MoE models:
 *   - against the reference backend: F32, BF16 and F16, nv = nk and nv = 2 nk, prefills of 1,
 *     7, 64 and 130 tokens (the matrix-vector, mixed and GEMM expert paths) + decode steps, also
 *     with every projection forced onto the GEMM path, and on every ISA this CPU runs; logits,
 *     states, the "hidden" / "moe_in" / "router_topk" traces (same expert sets, weights within
 *     the tolerance);
 *   - against an independent float64 computation of the block from the traces
 *     (hidden[l+1] - moe_in[l] = MoE(RMSNorm_1p(moe_in[l]))), router choices included;
 *   - bit-identical logits, states and router traces for 1, 2 and 3 threads;
 *   - decode and prefill read only the chosen experts: every routed expert no token chose is
 *     overwritten with NaN before the call, and the result is bitwise unchanged;
 *   - the MoE scratch is counted by qc_optimized_scratch_bytes; the memory plan's total and
 *     active weight bytes (qc_memplan_weight_bytes / qc_memplan_active_weight_bytes).
 *
 * Tolerance (as test_opt_backend.c): max |opt - ref| <= 1e-4 * max(|ref|) + 1e-6.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_memplan.h"
#include "qc/qc_model.h"
#include "qc/qc_optimized.h"
#include "qc/qc_reference.h"
#include "qc/qc_state.h"
#include "qc_testmodel.h"
#include "../optimized/qc_opt_kernels.h"

/* ===================================================================================== */
/* Models                                                                                 */
/* ===================================================================================== */

/* geometry 0: the qc_testmodel defaults (nv = 2 nk, dk 8 != dv 6), E 8, k 2, Ie 16, Is 24;
 * geometry 1: nv = nk, odd sizes (H 36, hd 12, dk 12, dv 10, V 70), E 6, k 3, Ie 20, Is 12 */
static qc_config moe_cfg(int geom) {
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o);
    qc_config c = o.cfg;
    c.tie_word_embeddings = 0;
    c.intermediate_size = 0;
    c.n_experts = 8;
    c.n_experts_per_tok = 2;
    c.moe_intermediate_size = 16;
    c.shared_expert_intermediate_size = 24;
    if (geom == 1) {
        c.vocab_size = 70; c.hidden_size = 36;
        c.n_heads = 2; c.n_kv_heads = 1; c.head_dim = 12; c.rotary_dim = 6;
        c.lin_n_k_heads = 3; c.lin_n_v_heads = 3; c.lin_k_dim = 12; c.lin_v_dim = 10;
        c.n_experts = 6; c.n_experts_per_tok = 3;
        c.moe_intermediate_size = 20; c.shared_expert_intermediate_size = 12;
    }
    return c;
}

static qc_model *moe_model(int geom, qc_dtype dt) {
    qc_config c = moe_cfg(geom);
    qc_model *m = NULL;
    qc_err e = {0};
    qc_status s = qc_model_synthetic(&c, dt, 11 + geom, &m, &e);
    ck_assert_msg(s == QC_OK, "synthetic MoE: %s", e.msg);
    ck_assert(qc_cfg_is_moe(&m->cfg));
    return m;
}

static void make_tokens(int32_t *t, int n, int V, unsigned seed) {
    unsigned x = seed * 2654435761u + 17u;
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        t[i] = (int32_t)((x >> 8) % (unsigned)V);
    }
}

/* ===================================================================================== */
/* Traces                                                                                 */
/* ===================================================================================== */

/* every trace of a sequence, positions 0 .. cap-1 (calls land at their start_pos) */
typedef struct {
    int L, H, k, cap;
    float *hidden; /* [L+1, cap, H] */
    float *moe_in; /* [L, cap, H] */
    float *topk;   /* [L, cap, 2k] */
    int bad;       /* a trace call with an unexpected index / dim */
} traces;

static void tr_init(traces *t, const qc_config *c, int cap) {
    t->L = c->n_layers;
    t->H = c->hidden_size;
    t->k = c->n_experts_per_tok;
    t->cap = cap;
    t->hidden = calloc((size_t)(t->L + 1) * cap * t->H, sizeof(float));
    t->moe_in = calloc((size_t)t->L * cap * t->H, sizeof(float));
    t->topk = calloc((size_t)t->L * cap * 2 * t->k, sizeof(float));
    t->bad = 0;
}

static void tr_free(traces *t) {
    free(t->hidden);
    free(t->moe_in);
    free(t->topk);
}

static void tr_hook(void *user, int index, const char *name, int start_pos, int n, int dim,
                    const float *data) {
    traces *t = user;
    if (start_pos < 0 || start_pos + n > t->cap) { t->bad = 1; return; }
    float *dst;
    if (!strcmp(name, "hidden") && index >= 0 && index <= t->L && dim == t->H)
        dst = t->hidden + ((size_t)index * t->cap + start_pos) * dim;
    else if (!strcmp(name, "moe_in") && index >= 0 && index < t->L && dim == t->H)
        dst = t->moe_in + ((size_t)index * t->cap + start_pos) * dim;
    else if (!strcmp(name, "router_topk") && index >= 0 && index < t->L && dim == 2 * t->k)
        dst = t->topk + ((size_t)index * t->cap + start_pos) * dim;
    else { t->bad = 1; return; }
    memcpy(dst, data, (size_t)n * dim * sizeof(float));
}

/* ===================================================================================== */
/* Running a sequence: one prefill call of n tokens, then S decode steps                  */
/* ===================================================================================== */

typedef struct {
    float *logits; /* [n + S, V] */
    qc_state *st;
    traces tr;
    char desc[160];
} run_out;

/* The work thresholds of the optimized backend (qc_opt_options.c) the tests force: every step
 * on the threads however tiny the model, or every expert on the packed-GEMM path. */
static const char *const PAR0[] = {"par_min", "0", NULL};
static const char *const GEMM1[] = {"gemm_min", "1", NULL};

/* kv: NULL, or key, value, ..., NULL set on the optimized backend after its create (the
 * reference backend gets none) */
static qc_backend *make_backend(const qc_model *m, int ref, int threads, int max_tokens,
                                traces *tr, const char *const *kv) {
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.n_threads = threads;
    bo.max_tokens = max_tokens;
    bo.chunk_size = 16;
    bo.trace = tr ? tr_hook : NULL;
    bo.trace_user = tr;
    qc_backend *be = NULL;
    qc_err e = {0};
    qc_status s = ref ? qc_reference_create(m, &bo, &be, &e) : qc_optimized_create(m, &bo, &be, &e);
    ck_assert_msg(s == QC_OK, "create: %s", e.msg);
    for (; !ref && kv && kv[0]; kv += 2)
        ck_assert_msg(qc_backend_set_option(be, kv[0], kv[1], &e) == QC_OK, "set_option %s=%s: %s",
                      kv[0], kv[1], e.msg);
    return be;
}

static void run_seq(const qc_model *m, int ref, int threads, const char *const *kv,
                    const int32_t *toks, int n, int S, run_out *out) {
    const int V = m->cfg.vocab_size, ctx = n + S;
    tr_init(&out->tr, &m->cfg, ctx);
    qc_backend *be = make_backend(m, ref, threads, n, &out->tr, kv);
    snprintf(out->desc, sizeof out->desc, "%s", be->describe(be));
    qc_err e = {0};
    ck_assert_int_eq(qc_state_create(&m->cfg, ctx, &out->st, &e), QC_OK);
    out->logits = calloc((size_t)ctx * V, sizeof(float));
    ck_assert_msg(qc_backend_forward(be, toks, n, 0, out->st, out->logits, 1, &e) == QC_OK,
                  "prefill: %s", e.msg);
    for (int s = 0; s < S; s++)
        ck_assert_msg(qc_backend_forward(be, toks + n + s, 1, n + s, out->st,
                                         out->logits + (size_t)(n + s) * V, 0, &e) == QC_OK,
                      "decode: %s", e.msg);
    ck_assert_msg(!out->tr.bad, "a trace call had an unexpected name / index / dim");
    qc_backend_destroy(be);
}

static void run_free(run_out *o) {
    free(o->logits);
    qc_state_destroy(o->st);
    tr_free(&o->tr);
}

/* max |a - b| <= tol * max|b| + 1e-6 */
static void close_enough(const float *a, const float *b, size_t count, double tol, const char *what) {
    double mx = 0.0, md = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < count; i++) {
        ck_assert_msg(isfinite(a[i]), "%s: element %zu is not finite", what, i);
        const double d = fabs((double)a[i] - (double)b[i]);
        if (fabs(b[i]) > mx) mx = fabs(b[i]);
        if (d > md) { md = d; at = i; }
    }
    if (getenv("QC_TEST_VERBOSE")) fprintf(stderr, "%s: max diff %.3g (max |ref| %.3g)\n", what, md, mx);
    ck_assert_msg(md <= tol * mx + 1e-6, "%s: max |diff| %.3g at %zu (%.8g vs %.8g), max |ref| %.3g",
                  what, md, at, a[at], b[at], mx);
}

static void compare_states(const qc_config *c, const qc_state *a, const qc_state *b, const char *tag) {
    char what[512];
    for (int l = 0; l < c->n_layers; l++) {
        snprintf(what, sizeof what, "%s: layer %d state", tag, l);
        if (c->layer_types[l] == QC_LAYER_FULL) {
            const size_t nkv = (size_t)a->n_kv_heads * a->max_context_len * a->head_dim;
            close_enough(a->k_cache[l], b->k_cache[l], nkv, 1e-4, what);
            close_enough(a->v_cache[l], b->v_cache[l], nkv, 1e-4, what);
        } else {
            close_enough(a->conv_state[l], b->conv_state[l], (size_t)a->conv_dim * a->conv_kernel, 1e-4, what);
            close_enough(a->recurrent_state[l], b->recurrent_state[l],
                         (size_t)a->n_v_heads * a->k_dim * a->v_dim, 1e-4, what);
        }
    }
}

/* the router traces of a and b: per layer and position the same expert set, weights close */
static void compare_routers(const traces *a, const traces *b, int npos, const char *tag) {
    const int k = a->k;
    for (int l = 0; l < a->L; l++)
        for (int p = 0; p < npos; p++) {
            const float *x = a->topk + ((size_t)l * a->cap + p) * 2 * k;
            const float *y = b->topk + ((size_t)l * b->cap + p) * 2 * k;
            for (int j = 0; j < k; j++) {
                int found = -1;
                for (int q = 0; q < k; q++)
                    if (x[j] == y[q]) found = q;
                ck_assert_msg(found >= 0, "%s: layer %d position %d: expert %g chosen by one backend only",
                              tag, l, p, x[j]);
                /* 2e-4: float32 noise through a few layers of this tiny random model (measured
                 * worst: FMA GEMM 8.7e-5, AMX GEMM 1.2e-4, over every case of this file) */
                ck_assert_msg(fabs(x[k + j] - y[k + found]) <= 2e-4 * fabs(y[k + found]) + 1e-6,
                              "%s: layer %d position %d expert %g: weight %.8g vs %.8g", tag, l, p,
                              x[j], x[k + j], y[k + found]);
            }
        }
}

/* ===================================================================================== */
/* Optimized vs reference                                                                 */
/* ===================================================================================== */

static void check_vs_ref(const qc_model *m, const char *const *kv, int n, int S, const char *tag0) {
    int32_t toks[256];
    ck_assert_int_le(n + S, 256);
    make_tokens(toks, n + S, m->cfg.vocab_size, (unsigned)(n * 31 + S));
    run_out ro, oo;
    run_seq(m, 1, 0, NULL, toks, n, S, &ro);
    run_seq(m, 0, 2, kv, toks, n, S, &oo);
    const qc_config *c = &m->cfg;
    const int ctx = n + S;
    char tag[256], what[320];
    snprintf(tag, sizeof tag, "%s prefill %d + decode %d [%s]", tag0, n, S, oo.desc);
    /* prefill: logits of every position; decode steps: one row each */
    snprintf(what, sizeof what, "%s: logits", tag);
    close_enough(oo.logits, ro.logits, (size_t)ctx * c->vocab_size, 1e-4, what);
    compare_states(c, oo.st, ro.st, tag);
    snprintf(what, sizeof what, "%s: hidden", tag);
    close_enough(oo.tr.hidden, ro.tr.hidden, (size_t)(c->n_layers + 1) * ctx * c->hidden_size, 1e-4, what);
    snprintf(what, sizeof what, "%s: moe_in", tag);
    close_enough(oo.tr.moe_in, ro.tr.moe_in, (size_t)c->n_layers * ctx * c->hidden_size, 1e-4, what);
    compare_routers(&oo.tr, &ro.tr, ctx, tag);
    run_free(&ro);
    run_free(&oo);
}

static const qc_dtype dtypes[3] = {QC_F32, QC_BF16, QC_F16};

/* loop index: dtype (F32, BF16, F16) x geometry x gemm_min (default / 1: every expert on the
 * GEMM path) */
START_TEST(matches_reference) {
    const qc_dtype dt = dtypes[_i % 3];
    const int geom = (_i / 3) % 2, gemm1 = _i / 6;
    qc_model *m = moe_model(geom, dt);
    char tag[128];
    snprintf(tag, sizeof tag, "%s geom %d (nv %s nk)%s", qc_dtype_str(dt), geom,
             geom ? "=" : "= 2", gemm1 ? " gemm_min 1" : "");
    static const int ns[4] = {1, 7, 64, 130};
    for (int i = 0; i < 4; i++) check_vs_ref(m, gemm1 ? GEMM1 : NULL, ns[i], 3, tag);
    qc_model_free(m);
}
END_TEST

/* every ISA this CPU runs (QC_ISA, read at create), matrix-vector and GEMM expert paths */
START_TEST(every_isa_matches_reference) {
    static const char *isas[3] = {"scalar", "avx2", "avx512"};
    qc_model *m = moe_model(1, QC_BF16);
    int ran = 0;
    for (int i = 0; i < 3; i++) {
        if (!qc_opt_kernels_by_name(isas[i])) continue;
        setenv("QC_ISA", isas[i], 1);
        char tag[64];
        snprintf(tag, sizeof tag, "ISA %s", isas[i]);
        check_vs_ref(m, NULL, 5, 2, tag);
        check_vs_ref(m, NULL, 70, 2, tag);
        unsetenv("QC_ISA");
        ran++;
    }
    ck_assert_int_ge(ran, 1);
    qc_model_free(m);
}
END_TEST

/* ===================================================================================== */
/* Against an independent float64 computation of the block                                */
/* ===================================================================================== */

/* y = W x for a [rows, K] matrix whose rows start at element `first` of t */
static void dmatvec(double *y, const qc_tensor *t, size_t first, int rows, int K, const double *x) {
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int i = 0; i < K; i++) s += (double)qc_tensor_get(t, first + (size_t)r * K + i) * x[i];
        y[r] = s;
    }
}

static double dsilu(double v) { return v / (1.0 + exp(-v)); }

/* The block of layer l on residual h (float64): out[H]; ids[k] chosen (descending p), w[k]. */
static void moe_f64(const qc_model *m, int l, const float *h, double *out, int *ids, double *w) {
    const qc_config *c = &m->cfg;
    const qc_layer_weights *W = &m->layers[l];
    const int H = c->hidden_size, E = c->n_experts, k = c->n_experts_per_tok;
    const int Ie = c->moe_intermediate_size, Is = c->shared_expert_intermediate_size;
    double *x = calloc((size_t)H, sizeof *x), *p = calloc((size_t)E, sizeof *p);
    double *gu = calloc((size_t)(2 * Ie + 2 * Is), sizeof *gu), *y = calloc((size_t)H, sizeof *y);
    double ss = 0;
    for (int i = 0; i < H; i++) ss += (double)h[i] * h[i];
    const double inv = 1.0 / sqrt(ss / H + c->rms_eps);
    for (int i = 0; i < H; i++) x[i] = h[i] * inv * (1.0 + qc_tensor_get(&W->post_norm, (size_t)i));
    dmatvec(p, &W->router, 0, E, H, x);
    double mx = p[0], sum = 0;
    for (int e = 1; e < E; e++) mx = p[e] > mx ? p[e] : mx;
    for (int e = 0; e < E; e++) sum += (p[e] = exp(p[e] - mx));
    double psum = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= ids[q] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        ids[j] = best;
        w[j] = p[best] / sum;
        psum += w[j];
    }
    for (int i = 0; i < H; i++) out[i] = 0;
    for (int j = 0; j < k; j++) {
        w[j] /= psum;
        dmatvec(gu, &W->exp_gate_up, (size_t)ids[j] * 2 * Ie * H, 2 * Ie, H, x);
        for (int i = 0; i < Ie; i++) gu[i] = dsilu(gu[i]) * gu[Ie + i];
        dmatvec(y, &W->exp_down, (size_t)ids[j] * H * Ie, H, Ie, gu);
        for (int i = 0; i < H; i++) out[i] += w[j] * y[i];
    }
    dmatvec(gu, &W->sh_gate, 0, Is, H, x);
    dmatvec(gu + Is, &W->sh_up, 0, Is, H, x);
    for (int i = 0; i < Is; i++) gu[i] = dsilu(gu[i]) * gu[Is + i];
    dmatvec(y, &W->sh_down, 0, H, Is, gu);
    double g;
    dmatvec(&g, &W->sh_expert_gate, 0, 1, H, x);
    g = 1.0 / (1.0 + exp(-g));
    for (int i = 0; i < H; i++) out[i] += y[i] * g;
    free(x); free(p); free(gu); free(y);
}

/* every layer but the last (whose output trace is after the final norm), every position */
START_TEST(matches_float64_block) {
    const qc_dtype dt = dtypes[_i % 2];
    qc_model *m = moe_model(_i / 2, dt);
    const qc_config *c = &m->cfg;
    const int n = 40, S = 2, H = c->hidden_size, k = c->n_experts_per_tok;
    int32_t toks[64];
    make_tokens(toks, n + S, c->vocab_size, 5);
    run_out oo;
    run_seq(m, 0, 2, NULL, toks, n, S, &oo);
    double out[64], w[16];
    int ids[16];
    for (int l = 0; l + 1 < c->n_layers; l++)
        for (int p = 0; p < n + S; p++) {
            const float *hin = oo.tr.moe_in + ((size_t)l * oo.tr.cap + p) * H;
            const float *hout = oo.tr.hidden + ((size_t)(l + 1) * oo.tr.cap + p) * H;
            const float *tk = oo.tr.topk + ((size_t)l * oo.tr.cap + p) * 2 * k;
            moe_f64(m, l, hin, out, ids, w);
            double mu = 0, mh = 0, md = 0;
            for (int i = 0; i < H; i++) {
                mu = fmax(mu, fabs(out[i]));
                mh = fmax(mh, fabs(hout[i]));
                md = fmax(md, fabs(((double)hout[i] - hin[i]) - out[i]));
            }
            ck_assert_msg(md <= 1e-4 * mu + 1e-6 * mh + 1e-7,
                          "layer %d position %d: block output off by %.3g (max |block| %.3g)", l, p, md, mu);
            for (int j = 0; j < k; j++) {
                ck_assert_msg((int)tk[j] == ids[j], "layer %d position %d: slot %d expert %g, float64 %d",
                              l, p, j, tk[j], ids[j]);
                ck_assert_msg(fabs(tk[k + j] - w[j]) <= 1e-5, "layer %d position %d: weight %.8g vs %.8g",
                              l, p, tk[k + j], w[j]);
            }
        }
    run_free(&oo);
    qc_model_free(m);
}
END_TEST

/* ===================================================================================== */
/* Thread-count invariance                                                                */
/* ===================================================================================== */

START_TEST(bit_identical_for_1_2_3_threads) {
    qc_model *m = moe_model(_i % 2, _i / 2 ? QC_BF16 : QC_F32);
    const qc_config *c = &m->cfg;
    const int V = c->vocab_size;
    int32_t toks[160];
    make_tokens(toks, 140, V, 77);
    /* par_min 0: every region on the threads, even for tiny sizes */
    static const int ns[3] = {1, 7, 130};
    for (int ni = 0; ni < 3; ni++) {
        const int n = ns[ni], S = 3;
        run_out r[3];
        for (int t = 0; t < 3; t++) run_seq(m, 0, t + 1, PAR0, toks, n, S, &r[t]);
        for (int t = 1; t < 3; t++) {
            ck_assert_msg(!memcmp(r[0].logits, r[t].logits, (size_t)(n + S) * V * sizeof(float)),
                          "prefill %d: logits differ between 1 and %d threads", n, t + 1);
            ck_assert_msg(!memcmp(r[0].tr.topk, r[t].tr.topk,
                                  (size_t)c->n_layers * (n + S) * 2 * c->n_experts_per_tok * sizeof(float)),
                          "prefill %d: router traces differ between 1 and %d threads", n, t + 1);
            for (int l = 0; l < c->n_layers; l++)
                if (c->layer_types[l] == QC_LAYER_LINEAR)
                    ck_assert_msg(!memcmp(r[0].st->recurrent_state[l], r[t].st->recurrent_state[l],
                                          (size_t)r[0].st->n_v_heads * r[0].st->k_dim * r[0].st->v_dim * 4),
                                  "prefill %d: layer %d state differs between 1 and %d threads", n, l, t + 1);
        }
        for (int t = 0; t < 3; t++) run_free(&r[t]);
    }
    qc_model_free(m);
}
END_TEST

/* ===================================================================================== */
/* Only the chosen experts' weights are read                                              */
/* ===================================================================================== */

/* NaN into every routed expert of every layer that no token of the call chose (by the clean
 * run's router trace, positions p0 .. p0+n-1) */
static void poison_unchosen(qc_model *m, const traces *tr, int p0, int n) {
    const qc_config *c = &m->cfg;
    const int E = c->n_experts, k = c->n_experts_per_tok, H = c->hidden_size;
    const int Ie = c->moe_intermediate_size;
    for (int l = 0; l < c->n_layers; l++) {
        qc_layer_weights *W = &m->layers[l];
        for (int e = 0; e < E; e++) {
            int used = 0;
            for (int p = p0; p < p0 + n; p++)
                for (int j = 0; j < k; j++)
                    used |= (int)tr->topk[((size_t)l * tr->cap + p) * 2 * k + j] == e;
            if (used) continue;
            const size_t es = qc_dtype_size(W->exp_gate_up.dtype), cnt = (size_t)2 * Ie * H;
            char *gu = (char *)(uintptr_t)W->exp_gate_up.data + (size_t)e * cnt * es;
            char *dn = (char *)(uintptr_t)W->exp_down.data + (size_t)e * cnt / 2 * es;
            const uint32_t nan32 = 0x7fc00000u;
            const uint16_t nan16 = W->exp_gate_up.dtype == QC_F16 ? 0x7e00u : 0x7fc0u;
            for (size_t i = 0; i < cnt; i++) {
                if (es == 4) memcpy(gu + i * 4, &nan32, 4);
                else memcpy(gu + i * 2, &nan16, 2);
                if (i < cnt / 2) {
                    if (es == 4) memcpy(dn + i * 4, &nan32, 4);
                    else memcpy(dn + i * 2, &nan16, 2);
                }
            }
        }
    }
}

/* the last step (decode, or a 3-token call) after a clean prefill: poisoned model = clean */
START_TEST(reads_only_chosen_experts) {
    const int last = _i % 2 ? 3 : 1, n = 9; /* prefill n, then one call of `last` tokens */
    const int V = 64;
    int32_t toks[16];
    const char *const *kv = _i / 2 ? GEMM1 : NULL; /* the GEMM expert path too */
    qc_model *m = moe_model(0, QC_BF16);
    ck_assert_int_eq(m->cfg.vocab_size, V);
    make_tokens(toks, n + last, V, 3);
    float *lg[2];
    traces tr[2];
    for (int pass = 0; pass < 2; pass++) {
        tr_init(&tr[pass], &m->cfg, n + last);
        qc_backend *be = make_backend(m, 0, 2, n, &tr[pass], kv);
        qc_state *st = NULL;
        qc_err e = {0};
        ck_assert_int_eq(qc_state_create(&m->cfg, n + last, &st, &e), QC_OK);
        lg[pass] = calloc((size_t)last * V, sizeof(float));
        ck_assert_int_eq(qc_backend_forward(be, toks, n, 0, st, NULL, 0, &e), QC_OK);
        /* pass 1: poison what the clean pass's last call did not choose */
        if (pass == 1) poison_unchosen(m, &tr[0], n, last);
        ck_assert_msg(qc_backend_forward(be, toks + n, last, n, st, lg[pass], 1, &e) == QC_OK, "%s", e.msg);
        qc_state_destroy(st);
        qc_backend_destroy(be);
    }
    int unchosen = 0; /* the test means something only if some expert was left out */
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int e = 0; e < m->cfg.n_experts; e++) {
            int used = 0;
            for (int p = n; p < n + last; p++)
                for (int j = 0; j < 2; j++) used |= (int)tr[0].topk[((size_t)l * tr[0].cap + p) * 4 + j] == e;
            unchosen += !used;
        }
    ck_assert_int_gt(unchosen, 0);
    ck_assert_msg(!memcmp(lg[0], lg[1], (size_t)last * V * sizeof(float)),
                  "a %d-token call read an expert no token chose (%d experts poisoned)", last, unchosen);
    ck_assert_msg(!memcmp(tr[0].topk, tr[1].topk, (size_t)m->cfg.n_layers * (n + last) * 4 * sizeof(float)),
                  "router traces changed");
    for (int p = 0; p < 2; p++) {
        free(lg[p]);
        tr_free(&tr[p]);
    }
    qc_model_free(m);
}
END_TEST

/* ===================================================================================== */
/* Scratch accounting                                                                     */
/* ===================================================================================== */

START_TEST(scratch_counts_moe_buffers) {
    qc_config c = moe_cfg(0);
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.n_threads = 1;
    bo.max_tokens = 1;
    const size_t s1 = qc_optimized_scratch_bytes(&c, &bo);
    bo.max_tokens = 1001;
    const size_t s2 = qc_optimized_scratch_bytes(&c, &bo);
    /* per token at least: gathered inputs + expert outputs (k rows of H each), gate | up
     * (k rows of 2 Ie), router logits (E) */
    const size_t per_tok = sizeof(float) * ((size_t)c.n_experts_per_tok *
                                                (2 * c.hidden_size + 2 * c.moe_intermediate_size) +
                                            c.n_experts);
    ck_assert_msg(s1 != SIZE_MAX && s2 != SIZE_MAX && s2 - s1 >= 1000 * per_tok,
                  "scratch grew by %zu bytes for 1000 tokens, MoE alone needs %zu", s2 - s1,
                  1000 * per_tok);
    /* the same config as a dense one of the same width has none of it */
    qc_config d = c;
    d.n_experts = d.n_experts_per_tok = d.moe_intermediate_size = d.shared_expert_intermediate_size = 0;
    d.intermediate_size = 48;
    bo.max_tokens = 1001;
    ck_assert_uint_lt(qc_optimized_scratch_bytes(&d, &bo), s2);
}
END_TEST

/* ===================================================================================== */
/* Memory plan: total vs active weight bytes                                              */
/* ===================================================================================== */

START_TEST(memplan_total_and_active_bytes) {
    const qc_dtype dt = dtypes[_i];
    qc_model *m = moe_model(0, dt);
    const qc_config *c = &m->cfg;
    uint64_t tot = 0, act = 0;
    qc_err e = {0};
    ck_assert_int_eq(qc_memplan_weight_bytes(c, dt, &tot, &e), QC_OK);
    ck_assert_int_eq(qc_memplan_active_weight_bytes(c, dt, &act, &e), QC_OK);
    /* the plan counts what the synthetic model holds */
    ck_assert_uint_eq(tot, qc_model_weight_bytes(m));
    /* active = total - the embedding (untied: the lm_head is read, the embedding row is a
     * gather) - the E - k experts no token reads, per layer */
    const uint64_t es = qc_dtype_size(dt), H = (uint64_t)c->hidden_size;
    const uint64_t unread = (uint64_t)c->vocab_size * H * es +
                            (uint64_t)c->n_layers * (uint64_t)(c->n_experts - c->n_experts_per_tok) * 3 *
                                (uint64_t)c->moe_intermediate_size * H * es;
    ck_assert_uint_eq(act, tot - unread);
    /* and the estimate reports both */
    qc_memplan_req rq;
    qc_memplan_req_init(&rq, c, dt, 16, 8);
    qc_memplan p;
    ck_assert_int_eq(qc_memplan_estimate(&rq, &p, &e), QC_OK);
    ck_assert_uint_eq(p.weights, tot);
    ck_assert_uint_eq(p.weights_active, act);
    char buf[512];
    ck_assert_ptr_nonnull(strstr(qc_memplan_str(&p, buf, sizeof buf), "active per token"));
    qc_model_free(m);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("opt_moe");
    TCase *tc = tcase_create("opt_moe");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, matches_reference, 0, 12);
    tcase_add_test(tc, every_isa_matches_reference);
    tcase_add_loop_test(tc, matches_float64_block, 0, 4);
    tcase_add_loop_test(tc, bit_identical_for_1_2_3_threads, 0, 4);
    tcase_add_loop_test(tc, reads_only_chosen_experts, 0, 4);
    tcase_add_test(tc, scratch_counts_moe_buffers);
    tcase_add_loop_test(tc, memplan_total_and_active_bytes, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
