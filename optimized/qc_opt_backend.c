/* qc_opt_backend.c — the optimized backend: a whole-model forward pass with run-time SIMD
 * dispatch (qc_opt_kernels.h) and OpenMP threads.
 *
 * Weights stay in the model's memory and dtype (BF16 / F16 widened in registers or into one
 * small per-thread fp32 panel at a time; F32 read as is). Every buffer is allocated at create
 * for opts.max_tokens; forward never allocates.
 *
 * Projections: n < gemm_min tokens -> matrix-vector kernels split by output rows (bandwidth
 * bound, decode); else a packed GEMM: the tokens are packed once into strips [Kp, NR], the
 * output rows are split into panels of MR rows across threads, each thread widens its panel
 * into fp32 once per token block and runs the MR x NR micro tile over the block's strips.
 * Attention: an online softmax over key blocks of 16, tiled over query blocks x the heads of
 * a KV group (no scratch that grows with the context; qc_opt_attention.c). DeltaNet:
 * qc_opt_deltanet.c. MoE models: the MoE block (qc_opt_moe.c) in place of the dense MLP.
 *
 * Threads: one OpenMP region per forward pass; thread 0 runs the pass and posts each parallel
 * step as a job whose items the other threads help with (qc_opt_pool.c). Thread invariance:
 * see qc_opt_internal.h. Options (set_option, qc_opt_options.c): gemm_min, and par_min the
 * smallest step worth sharing (0: share every step); both read per call.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_memplan.h"
#include "qc/qc_optimized.h"
#include "qc_opt_internal.h"

/* ===================================================================================== */
/* Release (the layout and create are at the end of the file)                             */
/* ===================================================================================== */

static void opt_free(qc_opt *o) {
    if (!o) return;
    free(o->arena);
    free(o->layers);
    free(o->panel);
    free(o->th);
    qc_opt_pool_free(&o->pool);
    free(o);
}

/* ===================================================================================== */
/* Norms, residuals                                                                       */
/* ===================================================================================== */

typedef struct {
    const qc_opt_kernels *K;
    float *y;
    const float *x;
    int dim;
    const float *w1p;
    float eps;
} norm_job;

static void norm_item(void *ctx, long r, int tid) {
    const norm_job *j = ctx;
    (void)tid;
    const float *xr = j->x + (size_t)r * j->dim;
    float *yr = j->y + (size_t)r * j->dim;
    const float inv = 1.0f / sqrtf(j->K->sumsq(xr, j->dim) / (float)j->dim + j->eps);
    for (int i = 0; i < j->dim; i++) yr[i] = (xr[i] * inv) * j->w1p[i];
}

/* y[r] = x[r] * (1 / sqrt(mean(x[r]^2) + eps)) * w1p for each of `rows` rows */
static void rmsnorm_rows(qc_opt *o, float *y, const float *x, int rows, int dim, const float *w1p,
                         float eps) {
    norm_job j = {o->k, y, x, dim, w1p, eps};
    QC_OPT_PROF_CLASS(o, QC_OP_NORM);
    qc_opt_run(o, rows, QC_OPT_PAR(o, (double)rows * dim), norm_item, &j);
}

typedef struct {
    float *h;
    const float *u;
    size_t count;
} add_job;

#define ADD_CHUNK 16384

static void add_item(void *ctx, long it, int tid) {
    const add_job *j = ctx;
    (void)tid;
    size_t a = (size_t)it * ADD_CHUNK, b = a + ADD_CHUNK < j->count ? a + ADD_CHUNK : j->count;
    for (size_t i = a; i < b; i++) j->h[i] = j->h[i] + j->u[i];
}

static void add_rows(qc_opt *o, float *h, const float *u, size_t count) {
    add_job j = {h, u, count};
    QC_OPT_PROF_CLASS(o, QC_OP_ELEM);
    qc_opt_run(o, (long)((count + ADD_CHUNK - 1) / ADD_CHUNK), QC_OPT_PAR(o, (double)count), add_item, &j);
}

/* ===================================================================================== */
/* Gated full attention                                                                   */
/* ===================================================================================== */

static void rope_apply(float *x, const float *cs, int rd) {
    const int half = rd / 2;
    for (int i = 0; i < half; i++) {
        const float c = cs[i], s = cs[half + i];
        const float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c + (-x2) * s;
        x[i + half] = x2 * c + x1 * s;
    }
}

typedef struct {
    qc_opt *o;
    const qc_opt_layer *L;
    float *kc, *vc;          /* this layer's caches [nkv, max_ctx, hd] */
    int start_pos, max_ctx;
    int nh, nkv, hd, rd, grp;
    float eps, scale;
} attn_job;

/* token t: q/k norm + RoPE; keys and raw values into the caches */
static void qk_item(void *ctx, long t, int tid) {
    const attn_job *j = ctx;
    const qc_opt *o = j->o;
    const int hd = j->hd, qgd = 2 * j->nh * hd, kvd = j->nkv * hd, pos = j->start_pos + (int)t;
    const float *cs = o->rope + (size_t)t * j->rd;
    (void)tid;
    for (int h = 0; h < j->nh; h++) {
        const float *qs = o->mix + (size_t)t * qgd + (size_t)h * 2 * hd;
        float *qd = o->act + (size_t)t * j->nh * hd + (size_t)h * hd;
        const float inv = 1.0f / sqrtf(o->k->sumsq(qs, hd) / (float)hd + j->eps);
        for (int i = 0; i < hd; i++) qd[i] = (qs[i] * inv) * j->L->q_norm1p[i];
        rope_apply(qd, cs, j->rd);
    }
    for (int g = 0; g < j->nkv; g++) {
        const float *ks = o->kb + (size_t)t * kvd + (size_t)g * hd;
        float *kd = j->kc + ((size_t)g * j->max_ctx + pos) * hd;
        const float inv = 1.0f / sqrtf(o->k->sumsq(ks, hd) / (float)hd + j->eps);
        for (int i = 0; i < hd; i++) kd[i] = (ks[i] * inv) * j->L->k_norm1p[i];
        rope_apply(kd, cs, j->rd);
        memcpy(j->vc + ((size_t)g * j->max_ctx + pos) * hd, o->vb + (size_t)t * kvd + (size_t)g * hd,
               (size_t)hd * sizeof(float));
    }
}

static void attention(qc_opt *o, int l, int n, int start_pos, qc_state *st) {
    const qc_config *c = &o->m->cfg;
    const qc_layer_weights *W = &o->m->layers[l];
    const int H = c->hidden_size, nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim;
    const int qgd = 2 * nh * hd, kvd = nkv * hd;

    qc_opt_lin outs[3] = {{&W->q_proj, o->mix, qgd}, {&W->k_proj, o->kb, kvd}, {&W->v_proj, o->vb, kvd}};
    QC_OPT_PROF_CLASS(o, QC_OP_PROJ);
    qc_opt_linear(o, o->xn, H, n, H, outs, 3);

    attn_job j = {.o = o, .L = &o->layers[l], .kc = st->k_cache[l], .vc = st->v_cache[l],
                  .start_pos = start_pos, .max_ctx = st->max_context_len, .nh = nh, .nkv = nkv,
                  .hd = hd, .rd = c->rotary_dim, .grp = nh / nkv, .eps = (float)c->rms_eps,
                  .scale = (float)(1.0 / sqrt((double)hd))};
    QC_OPT_PROF_CLASS(o, QC_OP_ATTN);
    qc_opt_run(o, n, QC_OPT_PAR(o, (double)n * (nh + 2 * nkv) * hd * 4), qk_item, &j);
    /* the causal softmax, tiled over query blocks and key blocks (qc_opt_attention.c) */
    qc_opt_attend(o, j.kc, j.vc, j.max_ctx, n, start_pos, nh, nkv, hd, j.scale);

    qc_opt_lin oo = {&W->o_proj, o->u, H};
    QC_OPT_PROF_CLASS(o, QC_OP_PROJ);
    qc_opt_linear(o, o->ob, (long)nh * hd, n, nh * hd, &oo, 1);
}

/* ===================================================================================== */
/* MLP                                                                                    */
/* ===================================================================================== */

typedef struct {
    qc_opt *o;
    int I;
} mlp_job;

static void swiglu_item(void *ctx, long t, int tid) {
    const mlp_job *j = ctx;
    (void)tid;
    j->o->k->silu_mul(j->o->mix + (size_t)t * j->I, j->o->zb + (size_t)t * j->I, j->I);
}

static void mlp(qc_opt *o, int l, int n) {
    const qc_config *c = &o->m->cfg;
    const qc_layer_weights *W = &o->m->layers[l];
    const int H = c->hidden_size, I = c->intermediate_size;
    qc_opt_lin gu[2] = {{&W->mlp_gate, o->mix, I}, {&W->mlp_up, o->zb, I}};
    QC_OPT_PROF_CLASS(o, QC_OP_PROJ);
    qc_opt_linear(o, o->xn, H, n, H, gu, 2);
    mlp_job j = {o, I};
    QC_OPT_PROF_CLASS(o, QC_OP_ELEM);
    qc_opt_run(o, n, QC_OPT_PAR(o, (double)n * I * 8), swiglu_item, &j);
    qc_opt_lin dn = {&W->mlp_down, o->u, H};
    QC_OPT_PROF_CLASS(o, QC_OP_PROJ);
    qc_opt_linear(o, o->mix, I, n, I, &dn, 1);
}

/* ===================================================================================== */
/* Forward                                                                                */
/* ===================================================================================== */

/* One call: a whole forward pass or one of its steps (qc_backend.h). */
typedef enum { CALL_FORWARD, CALL_LAYER, CALL_NORM, CALL_LOGITS } call_kind;
typedef struct {
    call_kind kind;
    const qc_call *k;       /* FORWARD, LAYER, NORM: the call's options (trace; chunk below) */
    const int32_t *tokens;  /* FORWARD: [n] */
    int n, start_pos, layer, chunk, all_logits;
    qc_state *st;           /* FORWARD, LAYER */
    float *h;               /* LAYER: [n, H] in/out; NORM: [n, H] in */
    float *xn;              /* NORM: [n, H] out; LOGITS: [n, H] in */
    const qc_tensor *rows;  /* LOGITS: the output head's rows (FORWARD: model->lm_head) */
    float *logits;          /* FORWARD: NULL / [n, V] / [1, V]; LOGITS: [n, ld] */
    long ld;
} opt_call;

static void forward_body(qc_backend *be, const opt_call *c);

/* The DeltaNet chunk of a call of n tokens (0: the recurrence). */
static int chunk_of(const qc_call *k, int n) {
    return k->dn_kernel == QC_DN_CHUNKED ? (k->chunk_size < n ? k->chunk_size : n) : 0;
}

/* RoPE cos | sin of the call's positions into o->rope. */
static void rope_table(qc_opt *o, const qc_config *c, int n, int start_pos) {
    const int rd = c->rotary_dim, half = rd / 2;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < half; i++) {
            const float a = (float)(start_pos + t) * o->inv_freq[i];
            o->rope[(size_t)t * rd + i] = cosf(a);
            o->rope[(size_t)t * rd + half + i] = sinf(a);
        }
}

/* Layer l on o->h (the residual stream of the call's n tokens). */
static void layer_body(qc_backend *be, const qc_call *k, int l, int n, int start_pos, qc_state *st,
                       int chunk) {
    qc_opt *o = be->impl;
    const qc_config *c = &o->m->cfg;
    const int H = c->hidden_size;
    const float eps = (float)c->rms_eps;
    const qc_opt_layer *Ly = &o->layers[l];
    rmsnorm_rows(o, o->xn, o->h, n, H, Ly->in_norm1p, eps);
    if (c->layer_types[l] == QC_LAYER_FULL) attention(o, l, n, start_pos, st);
    else qc_opt_deltanet(o, l, n, st, chunk);
    add_rows(o, o->h, o->u, (size_t)n * H);
    if (k->trace) /* the mixer output: "moe_in" / "mlp_in" (qc_backend.h) */
        k->trace(k->trace_user, l, qc_cfg_is_moe(c) ? "moe_in" : "mlp_in", start_pos, n, H, o->h);
    rmsnorm_rows(o, o->xn, o->h, n, H, Ly->post_norm1p, eps);
    if (qc_cfg_is_moe(c)) qc_opt_moe(o, l, n, start_pos, k);
    else mlp(o, l, n);
    add_rows(o, o->h, o->u, (size_t)n * H);
    if (k->trace && l < c->n_layers - 1)
        k->trace(k->trace_user, l + 1, "hidden", start_pos, n, H, o->h);
}

/* The call on thread 0 (helpers, if any, take the jobs it posts). */
static void call_body(qc_backend *be, const opt_call *c) {
    qc_opt *o = be->impl;
    const qc_config *cfg = &o->m->cfg;
    const int H = cfg->hidden_size;
    const size_t bytes = (size_t)c->n * H * sizeof(float);
    switch (c->kind) {
    case CALL_FORWARD: forward_body(be, c); break;
    case CALL_LAYER:
        memcpy(o->h, c->h, bytes);
        if (cfg->layer_types[c->layer] == QC_LAYER_FULL) rope_table(o, cfg, c->n, c->start_pos);
        layer_body(be, c->k, c->layer, c->n, c->start_pos, c->st, c->chunk);
        memcpy(c->h, o->h, bytes);
        break;
    case CALL_NORM:
        rmsnorm_rows(o, c->xn, c->h, c->n, H, o->final_norm1p, (float)cfg->rms_eps);
        if (c->k->trace)
            c->k->trace(c->k->trace_user, cfg->n_layers, "hidden", c->start_pos, c->n, H, c->xn);
        break;
    case CALL_LOGITS: {
        qc_opt_lin lo = {c->rows, c->logits, c->ld};
        QC_OPT_PROF_CLASS(o, QC_OP_LMHEAD);
        qc_opt_linear(o, c->xn, H, c->n, H, &lo, 1);
        break;
    }
    }
}

/* A call runs with denormals flushed to zero (MXCSR FTZ and DAZ, in every thread of it; the
 * caller's mode is restored after): a value under 2^-126 in magnitude is 0. The chunked
 * DeltaNet's decay factors exp(gam_r - gam_s) and what they multiply, and attention's
 * exp(score - max), reach that range; on Intel cores every denormal operand or result of an
 * FMA costs a microcode assist (the synthetic 0.8B's DeltaNet prefill took 2.6x as long). The
 * values lost are below any tolerance of the policy; the results stay the same for any thread
 * count. */
static unsigned fp_mode_enter(void) {
#if defined(__x86_64__) || defined(__i386__)
    const unsigned saved = __builtin_ia32_stmxcsr();
    __builtin_ia32_ldmxcsr(saved | 0x8040u); /* FTZ (bit 15), DAZ (bit 6) */
    return saved;
#else
    return 0;
#endif
}

static void fp_mode_leave(unsigned saved) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_ldmxcsr(saved);
#else
    (void)saved;
#endif
}

/* Run a call: one parallel region when the work is worth sharing (thread 0 runs the call, the
 * others help with its jobs, qc_opt_pool.c), else inline; either way in fp_mode. */
static void run_call(qc_backend *be, const opt_call *c, double work) {
    qc_opt *o = be->impl;
    if (QC_OPT_PAR(o, work)) {
        qc_opt_pool_reset(&o->pool);
#pragma omp parallel num_threads(o->nthreads)
        {
            const unsigned mode = fp_mode_enter();
            if (omp_get_thread_num() == 0) {
                o->pool_active = omp_get_num_threads() > 1;
                call_body(be, c);
                o->pool_active = 0;
                qc_opt_pool_quit(&o->pool);
            } else {
                qc_opt_pool_helper(&o->pool, omp_get_thread_num());
            }
            fp_mode_leave(mode);
        }
    } else {
        const unsigned mode = fp_mode_enter();
        call_body(be, c);
        fp_mode_leave(mode);
    }
}

/* The work of a pass over n tokens that decides whether to share it: n * H * I. */
static double pass_work(const qc_config *c, int n) {
    const int I = qc_cfg_is_moe(c) ? c->n_experts_per_tok * c->moe_intermediate_size +
                                         c->shared_expert_intermediate_size
                                   : c->intermediate_size;
    return (double)n * c->hidden_size * I;
}

/* This backend's own capacity stays guarded (a caller that bypasses the contract gets an
 * error, not an overflow); the contract itself was checked by qc_backend_forward. */
static qc_status check_capacity(const qc_opt *o, int n, int chunk, qc_err *err) {
    if (chunk > o->cmax || n > o->max_tokens)
        return qc_errf(err, QC_ERR_ARG,
                       "optimized forward: %d tokens in chunks of %d exceed the scratch sized at "
                       "create (max_tokens %d, chunk scratch %d tokens)",
                       n, chunk, o->max_tokens, o->cmax);
    return QC_OK;
}

static qc_status opt_forward(qc_backend *be, const qc_call *k, const int32_t *tokens, int n,
                             int start_pos, qc_state *st, float *logits, int all_logits,
                             qc_err *err) {
    qc_opt *o = be->impl;
    const int chunk = chunk_of(k, n);
    qc_status s = check_capacity(o, n, chunk, err);
    if (s) return s;
    opt_call c = {.kind = CALL_FORWARD, .k = k, .tokens = tokens, .n = n, .start_pos = start_pos,
                  .chunk = chunk, .all_logits = all_logits, .st = st, .logits = logits,
                  .rows = &o->m->lm_head, .ld = o->m->cfg.vocab_size};
    run_call(be, &c, pass_work(&o->m->cfg, n));
    return QC_OK;
}

static qc_status opt_step_layer(qc_backend *be, const qc_call *k, int l, float *h, int n,
                                int start_pos, qc_state *st, qc_err *err) {
    qc_opt *o = be->impl;
    const int chunk = chunk_of(k, n);
    qc_status s = check_capacity(o, n, chunk, err);
    if (s) return s;
    if (l < 0 || l >= o->m->cfg.n_layers)
        return qc_errf(err, QC_ERR_ARG, "optimized step: layer %d of %d", l, o->m->cfg.n_layers);
    opt_call c = {.kind = CALL_LAYER, .k = k, .n = n, .start_pos = start_pos, .layer = l, .chunk = chunk,
                  .st = st, .h = h};
    run_call(be, &c, pass_work(&o->m->cfg, n));
    return QC_OK;
}

static qc_status opt_step_norm(qc_backend *be, const qc_call *k, const float *h, float *xn, int n,
                               int start_pos, qc_err *err) {
    qc_opt *o = be->impl;
    qc_status s = check_capacity(o, n, 0, err);
    if (s) return s;
    opt_call c = {.kind = CALL_NORM, .k = k, .n = n, .start_pos = start_pos, .h = (float *)h, .xn = xn};
    run_call(be, &c, pass_work(&o->m->cfg, n));
    return QC_OK;
}

static qc_status opt_step_logits(qc_backend *be, const float *xn, int n, const qc_tensor *rows,
                                 float *logits, long ld, qc_err *err) {
    qc_opt *o = be->impl;
    qc_status s = check_capacity(o, n, 0, err);
    if (s) return s;
    opt_call c = {.kind = CALL_LOGITS, .n = n, .xn = (float *)xn, .rows = rows, .logits = logits,
                  .ld = ld};
    run_call(be, &c, pass_work(&o->m->cfg, n));
    return QC_OK;
}

/* the pass itself (arguments validated) */
static void forward_body(qc_backend *be, const opt_call *cl) {
    qc_opt *o = be->impl;
    const qc_model *m = o->m;
    const qc_config *c = &m->cfg;
    const int H = c->hidden_size, L = c->n_layers;
    const int n = cl->n, start_pos = cl->start_pos;
    const int32_t *tokens = cl->tokens;
    float *logits = cl->logits;
    const float eps = (float)c->rms_eps;

    /* embeddings */
    const size_t es = qc_dtype_size(m->embed.dtype);
    for (int t = 0; t < n; t++) {
        const char *row = (const char *)m->embed.data + (size_t)tokens[t] * H * es;
        float *h = o->h + (size_t)t * H;
        if (m->embed.dtype == QC_F32) memcpy(h, row, (size_t)H * 4);
        else if (m->embed.dtype == QC_BF16)
            for (int i = 0; i < H; i++) {
                uint16_t b;
                memcpy(&b, row + 2 * i, 2);
                h[i] = qc_bf16_to_f32(b);
            }
        else
            for (int i = 0; i < H; i++) {
                uint16_t b;
                memcpy(&b, row + 2 * i, 2);
                h[i] = qc_f16_to_f32(b);
            }
    }
    const qc_call *k = cl->k;
    if (k->trace) k->trace(k->trace_user, 0, "hidden", start_pos, n, H, o->h);
    rope_table(o, c, n, start_pos);

    for (int l = 0; l < L; l++) layer_body(be, k, l, n, start_pos, cl->st, cl->chunk);

    /* final norm: every row when traced or all logits are asked, else the last row only */
    const int all = k->trace || (logits && cl->all_logits);
    if (all) {
        rmsnorm_rows(o, o->xn, o->h, n, H, o->final_norm1p, eps);
        if (k->trace) k->trace(k->trace_user, L, "hidden", start_pos, n, H, o->xn);
    } else if (logits) {
        rmsnorm_rows(o, o->xn + (size_t)(n - 1) * H, o->h + (size_t)(n - 1) * H, 1, H,
                     o->final_norm1p, eps);
    }
    if (logits) {
        qc_opt_lin lo = {cl->rows, logits, cl->ld};
        QC_OPT_PROF_CLASS(o, QC_OP_LMHEAD);
        if (cl->all_logits) qc_opt_linear(o, o->xn, H, n, H, &lo, 1);
        else qc_opt_linear(o, o->xn + (size_t)(n - 1) * H, H, 1, H, &lo, 1);
    }
}

/* ===================================================================================== */
/* Create / destroy / describe                                                            */
/* ===================================================================================== */

static const char *opt_describe(const qc_backend *be) { return ((const qc_opt *)be->impl)->desc; }

static void opt_destroy(qc_backend *be) {
    if (!be) return;
    opt_free(be->impl);
    free(be);
}

/* ---- one layout for counting and allocating ---- */

/* Bump allocator over the one 64-byte-aligned arena of every float buffer; counting when
 * base == NULL. Each buffer starts on a 64-byte boundary: its size rounded up to 64 bytes (at
 * least 64). A count that overflows saturates at SIZE_MAX (only a plan of absurd sizes). */
typedef struct {
    char *base;
    size_t used;
} opt_arena;

static float *take(opt_arena *a, size_t rows, size_t cols) {
    size_t n, bytes;
    if (__builtin_mul_overflow(rows, cols, &n) || __builtin_mul_overflow(n, sizeof(float), &bytes) ||
        __builtin_add_overflow(bytes, (size_t)63, &bytes))
        bytes = SIZE_MAX;
    else
        bytes = bytes < 64 ? 64 : bytes / 64 * 64;
    float *p = a->base ? (float *)(void *)(a->base + a->used) : NULL;
    if (__builtin_add_overflow(a->used, bytes, &a->used)) a->used = SIZE_MAX;
    return p;
}

static int imax(int a, int b) { return a > b ? a : b; }
static size_t zmax(size_t a, size_t b) { return a > b ? a : b; }

/* What create derives from the config and the options before any allocation: the kernel
 * tables (the GEMM tile; the AMX GEMM, which sizes the token strips), threads, capacities. */
static void opt_geometry(qc_opt *o, const qc_config *c, const qc_backend_opts *op) {
    o->k = qc_opt_kernels_pick();
    o->amx = qc_opt_amx_pick(); /* NULL without AMX (or below the AVX-512 table) */
    o->amx_q8 = qc_opt_amx_q8_pick();
    o->nthreads = op->n_threads > 0 ? op->n_threads : omp_get_max_threads();
    if (o->nthreads < 1) o->nthreads = 1;
    o->max_tokens = op->max_tokens;
    /* chunk scratch: chunks of up to max(chunk_size, 256) tokens, never more than a call holds */
    const int cm = imax(op->chunk_size, 256);
    o->cmax = cm < op->max_tokens ? cm : op->max_tokens;
    int kmax = imax(imax(c->hidden_size, c->intermediate_size),
                    imax(c->n_heads * c->head_dim, qc_cfg_value_dim(c)));
    kmax = imax(kmax, imax(c->moe_intermediate_size, c->shared_expert_intermediate_size));
    o->kp_max = qc_opt_kpad(kmax);
}

/* Every float buffer, in one pass: counting (a->base == NULL; only the config and the geometry
 * are read, o->layers / o->panel / o->th may be NULL) or carving the arena (pointers only: the
 * values are written by opt_fill). */
static void opt_layout(qc_opt *o, const qc_config *c, opt_arena *a) {
    const size_t N = (size_t)o->max_tokens, H = (size_t)c->hidden_size;
    const size_t I = (size_t)c->intermediate_size, hd = (size_t)c->head_dim;
    const size_t nh = (size_t)c->n_heads, nkv = (size_t)c->n_kv_heads;
    const size_t nv = (size_t)c->lin_n_v_heads, dv = (size_t)c->lin_v_dim;
    const size_t C = (size_t)qc_cfg_conv_dim(c), Kc = (size_t)c->conv_kernel;
    const size_t NR = (size_t)o->k->gemm_nr, Kp = (size_t)o->kp_max;
    const size_t rd = (size_t)(c->rotary_dim > 0 ? c->rotary_dim : 1);
    /* activations (widths: the largest of what shares a buffer, qc_opt_internal.h) */
    o->h = take(a, N, H);
    o->xn = take(a, N, H);
    o->u = take(a, N, H);
    o->mix = take(a, N, zmax(zmax(C, 2 * nh * hd), I));
    o->zb = take(a, N, zmax(nv * dv, I));
    o->act = take(a, N, zmax(C, nh * hd));
    o->ob = take(a, N, zmax(nv * dv, nh * hd));
    o->kb = take(a, N, nkv * hd);
    o->vb = take(a, N, nkv * hd);
    o->bab = take(a, N, 2 * nv);
    o->rope = take(a, N, rd);
    o->est = take(a, Kc, C);
    /* token strips: Kp x NR floats, or the AMX GEMM's 3 bf16 terms of each, Kp x NR x 3 / 2 */
    o->xpack = take(a, (N + NR - 1) / NR, Kp * NR * (o->amx ? 3 : 2) / 2);
    o->inv_freq = take(a, 1, (size_t)(c->rotary_dim / 2 + 1));
    if (qc_cfg_is_moe(c)) { /* the MoE block's scratch (qc_opt_moe.c) */
        float *moe = take(a, 1, qc_opt_moe_floats(c, o->max_tokens));
        if (a->base) qc_opt_moe_init(&o->moe, c, o->max_tokens, moe);
    }
    /* per thread: a GEMM weight panel and the DeltaNet chunk scratch */
    for (int t = 0; t < o->nthreads; t++) {
        float *panel = take(a, Kp, QC_OPT_MR_MAX);
        float *dn = take(a, 1, qc_opt_dn_thread_floats(c, o->cmax));
        if (a->base) {
            o->panel[t] = panel;
            qc_opt_dn_thread_init(&o->th[t], c, o->cmax, dn);
        }
    }
    /* the fp32 copies of the small weights */
    for (int l = 0; l < c->n_layers; l++) {
        qc_opt_layer counted, *ly = o->layers ? &o->layers[l] : &counted;
        ly->in_norm1p = take(a, 1, H);
        ly->post_norm1p = take(a, 1, H);
        if (c->layer_types[l] == QC_LAYER_FULL) {
            ly->q_norm1p = take(a, 1, hd);
            ly->k_norm1p = take(a, 1, hd);
        } else {
            ly->dt_bias = take(a, 1, nv);
            ly->lin_norm = take(a, 1, dv);
            ly->neg_expA = take(a, 1, nv);
            ly->conv_wT = take(a, Kc, C);
        }
    }
    o->final_norm1p = take(a, 1, H);
}

/* dst[i] = (plus1 ? 1 + t[i] : t[i]) widened to fp32 */
static void widen(float *dst, const qc_tensor *t, size_t count, int plus1) {
    for (size_t i = 0; i < count; i++) {
        float v = qc_tensor_get(t, i);
        dst[i] = plus1 ? 1.0f + v : v;
    }
}

/* The values (allocating pass only): fp32 small weights from m, the RoPE frequencies. */
static void opt_fill(qc_opt *o, const qc_model *m) {
    const qc_config *c = &m->cfg;
    const int H = c->hidden_size, hd = c->head_dim, nv = c->lin_n_v_heads, dv = c->lin_v_dim;
    const int C = qc_cfg_conv_dim(c), Kc = c->conv_kernel;
    for (int l = 0; l < c->n_layers; l++) {
        const qc_layer_weights *w = &m->layers[l];
        qc_opt_layer *ly = &o->layers[l];
        widen(ly->in_norm1p, &w->input_norm, (size_t)H, 1);
        widen(ly->post_norm1p, &w->post_norm, (size_t)H, 1);
        if (c->layer_types[l] == QC_LAYER_FULL) {
            widen(ly->q_norm1p, &w->q_norm, (size_t)hd, 1);
            widen(ly->k_norm1p, &w->k_norm, (size_t)hd, 1);
        } else {
            widen(ly->dt_bias, &w->dt_bias, (size_t)nv, 0);
            widen(ly->lin_norm, &w->lin_norm, (size_t)dv, 0);
            for (int h = 0; h < nv; h++) ly->neg_expA[h] = -expf(qc_tensor_get(&w->A_log, h));
            for (int c_ = 0; c_ < C; c_++)
                for (int j = 0; j < Kc; j++)
                    ly->conv_wT[(size_t)j * C + c_] = qc_tensor_get(&w->conv1d, (size_t)c_ * Kc + j);
        }
    }
    widen(o->final_norm1p, &m->final_norm, (size_t)H, 1);
    for (int i = 0; i < c->rotary_dim / 2; i++) {
        const float expo = (float)(2 * i) / (float)c->rotary_dim;
        o->inv_freq[i] = 1.0f / powf((float)c->rope_theta, expo);
    }
}

/* Every byte create allocates: the backend, qc_opt, its layer / panel / thread tables, the job
 * board (qc_opt_pool_init: one qc_opt_range per thread) and the arena. SIZE_MAX on overflow. */
static size_t opt_bytes(const qc_opt *o, const qc_config *c, size_t arena_bytes) {
    const size_t T = (size_t)o->nthreads;
    size_t total = sizeof(qc_backend) + sizeof(qc_opt), part;
    const size_t per_thread = sizeof(float *) + sizeof(qc_opt_thread) + sizeof(qc_opt_range);
    int ovf = __builtin_mul_overflow((size_t)c->n_layers, sizeof(qc_opt_layer), &part) ||
              __builtin_add_overflow(total, part, &total) ||
              __builtin_mul_overflow(T, per_thread, &part) ||
              __builtin_add_overflow(total, part, &total) ||
              __builtin_add_overflow(total, arena_bytes, &total);
    return ovf ? SIZE_MAX : total;
}

static void opts_or_default(const qc_backend_opts *op, qc_backend_opts *out) {
    if (op) *out = *op;
    else qc_backend_opts_default(out);
}

size_t qc_optimized_scratch_bytes(const qc_config *c, const qc_backend_opts *op) {
    qc_backend_opts opts;
    opts_or_default(op, &opts);
    if (!c || opts.max_tokens < 1 || qc_memplan_check_config(c, NULL) != QC_OK) return SIZE_MAX;
    qc_opt o0;
    memset(&o0, 0, sizeof o0); /* no tables: counting only */
    opt_geometry(&o0, c, &opts);
    if (o0.cmax > (1 << 28)) return SIZE_MAX; /* keeps the [cmax]^2 chunk terms in 64 bits */
    opt_arena a = {NULL, 0};
    opt_layout(&o0, c, &a);
    return a.used == SIZE_MAX ? SIZE_MAX : opt_bytes(&o0, c, a.used);
}

qc_status qc_optimized_create(const qc_model *m, const qc_backend_opts *opts, qc_backend **out,
                              qc_err *err) {
    if (!out) return qc_errf(err, QC_ERR_ARG, "create: out is NULL");
    *out = NULL;
    qc_backend_opts op;
    opts_or_default(opts, &op);
    qc_status s = qc_backend_check_create(m, &op, err); /* the shared model + options check */
    if (s) return s;
    const qc_config *c = &m->cfg;

    qc_opt *o = calloc(1, sizeof *o);
    qc_backend *be = qc_backend_alloc();
    if (!o || !be) {
        free(o);
        free(be);
        return qc_errf(err, QC_ERR_OOM, "optimized: out of memory");
    }
    o->m = m;
    opt_geometry(o, c, &op);
    o->gemm_min = 8;      /* the defaults; set_option changes them between calls */
    o->par_min = 1 << 16;

    /* count, allocate, carve, fill: the same layout as qc_optimized_scratch_bytes */
    const int T = o->nthreads;
    opt_arena a = {NULL, 0};
    opt_layout(o, c, &a);
    o->layers = calloc((size_t)c->n_layers, sizeof *o->layers);
    o->panel = calloc((size_t)T, sizeof *o->panel);
    o->th = calloc((size_t)T, sizeof *o->th);
    if (a.used != SIZE_MAX) o->arena = aligned_alloc(64, a.used); /* a multiple of 64 */
    if (!o->layers || !o->panel || !o->th || !o->arena || qc_opt_pool_init(&o->pool, T)) {
        size_t mb = opt_bytes(o, c, a.used) >> 20;
        opt_free(o);
        free(be);
        return qc_errf(err, QC_ERR_OOM,
                       "optimized: cannot allocate %zu MiB of scratch for max_tokens %d", mb,
                       op.max_tokens);
    }
    memset(o->arena, 0, a.used);
    a.base = o->arena;
    a.used = 0;
    opt_layout(o, c, &a);
    opt_fill(o, m);

    be->name = "optimized";
    be->model = m;
    be->opts = op;
    o->prof = op.profile;
    be->impl = o;
    qc_opt_describe_set(be);
    be->forward = opt_forward;
    be->step_layer = opt_step_layer;
    be->step_norm = opt_step_norm;
    be->step_logits = opt_step_logits;
    be->destroy = opt_destroy;
    be->describe = opt_describe;
    be->set_option = qc_opt_set_option;
    be->max_chunk_tokens = o->cmax; /* the call contract checks min(chunk_size, n) against it */
    *out = be;
    return QC_OK;
}
