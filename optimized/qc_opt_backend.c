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
 * Attention: per (token, head) with an online softmax over key blocks of 64 (no scratch that
 * grows with the context). DeltaNet: qc_opt_deltanet.c.
 *
 * Threads: one OpenMP region per forward pass; thread 0 runs the pass and posts each parallel
 * step as a job whose items the other threads help with (qc_opt_pool.c). Thread invariance:
 * see qc_opt_internal.h. Env (tests): QC_OPT_GEMM_MIN overrides gemm_min, QC_OPT_PAR_MIN the
 * smallest step worth sharing (0: share every step).
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_optimized.h"
#include "qc_opt_internal.h"

/* ===================================================================================== */
/* Allocation (create only)                                                               */
/* ===================================================================================== */

static float *opt_alloc(qc_opt *o, size_t nfloat) {
    if (o->n_blocks == o->cap_blocks) {
        int cap = o->cap_blocks ? 2 * o->cap_blocks : 64;
        void **nb = realloc(o->blocks, (size_t)cap * sizeof *nb);
        if (!nb) return NULL;
        o->blocks = nb;
        o->cap_blocks = cap;
    }
    size_t bytes = (nfloat * sizeof(float) + 63) / 64 * 64;
    if (bytes == 0) bytes = 64;
    float *p = aligned_alloc(64, bytes);
    if (!p) return NULL;
    memset(p, 0, bytes);
    o->blocks[o->n_blocks++] = p;
    return p;
}

static void opt_free(qc_opt *o) {
    if (!o) return;
    for (int i = 0; i < o->n_blocks; i++) free(o->blocks[i]);
    free(o->blocks);
    free(o->layers);
    free(o->panel);
    free(o->th);
    qc_opt_pool_free(&o->pool);
    free(o);
}

/* ===================================================================================== */
/* Projections                                                                            */
/* ===================================================================================== */

static size_t rows_of(const qc_tensor *t) { return (size_t)t->shape[0]; }

/* Work is handed out dynamically (qc_opt_pool.c: a helper preempted on a busy machine does
 * less of it); which thread computes a row / panel never changes its value. */
#define MV_CHUNK_ROWS 64 /* matrix-vector rows per work item */
#define GEMM_PANELS 2    /* GEMM panels per work item */

typedef struct {
    qc_opt *o;
    const float *x;          /* [n, K] input, row stride ldx */
    long ldx;
    int n, K, Kp, ns, sblk;  /* tokens, input dim, padded, token strips, strips per block */
    const qc_opt_lin *outs;
    long end[8];             /* cumulative work items per output */
    long ngrp;               /* GEMM: panel groups over all outputs */
} lin_job;

static int out_of_item(const lin_job *j, long it, long *first) {
    int wi = 0;
    while (it >= j->end[wi]) wi++;
    *first = wi ? j->end[wi - 1] : 0;
    return wi;
}

static void mv_item(void *ctx, long it, int tid) {
    const lin_job *j = ctx;
    (void)tid;
    long first;
    const int wi = out_of_item(j, it, &first);
    const qc_tensor *w = j->outs[wi].w;
    const long r0 = (it - first) * MV_CHUNK_ROWS, rows = (long)rows_of(w);
    const int cnt = (int)(rows - r0 < MV_CHUNK_ROWS ? rows - r0 : MV_CHUNK_ROWS);
    j->o->k->matvec(j->outs[wi].y + r0, j->outs[wi].ldy,
                    (const char *)w->data + (size_t)r0 * (size_t)j->K * qc_dtype_size(w->dtype),
                    w->dtype, cnt, j->K, j->x, j->ldx, j->n);
}

static void pack_item(void *ctx, long s, int tid) {
    const lin_job *j = ctx;
    (void)tid;
    const int NR = j->o->k->gemm_nr, t0 = (int)s * NR, cnt = j->n - t0 < NR ? j->n - t0 : NR;
    j->o->k->pack_x(j->o->xpack + (size_t)s * j->Kp * NR, j->x + (size_t)t0 * j->ldx, (int)j->ldx,
                    j->K, cnt);
}

/* item = (token block, group of GEMM_PANELS panels), token block major */
static void tile_item(void *ctx, long it, int tid) {
    const lin_job *j = ctx;
    const qc_opt_kernels *kt = j->o->k;
    const int MR = kt->gemm_mr, NR = kt->gemm_nr;
    const int sb = (int)(it / j->ngrp) * j->sblk, se = sb + j->sblk < j->ns ? sb + j->sblk : j->ns;
    long first;
    const long g = it % j->ngrp;
    const int wi = out_of_item(j, g, &first);
    const qc_tensor *w = j->outs[wi].w;
    const int rows = (int)rows_of(w);
    float *panel = j->o->panel[tid];
    const long p0 = (g - first) * GEMM_PANELS;
    for (long p = p0; p < p0 + GEMM_PANELS; p++) {
        const int row0 = (int)(p * MR);
        if (row0 >= rows) break;
        const int mr = rows - row0 < MR ? rows - row0 : MR;
        kt->pack_w(panel, (const char *)w->data + (size_t)row0 * j->K * qc_dtype_size(w->dtype),
                   w->dtype, j->K, mr);
        for (int s = sb; s < se; s++) {
            const int t0 = s * NR, cnt = j->n - t0 < NR ? j->n - t0 : NR;
            kt->gemm_tile(panel, j->o->xpack + (size_t)s * j->Kp * NR, j->Kp,
                          j->outs[wi].y + (long)t0 * j->outs[wi].ldy + row0, j->outs[wi].ldy, mr, cnt);
        }
    }
}

void qc_opt_linear(qc_opt *o, const float *x, long ldx, int n, int K, const qc_opt_lin *outs,
                   int nouts) {
    const qc_opt_kernels *kt = o->k;
    QC_ASSERT(nouts >= 1 && nouts <= 8);
    lin_job j = {.o = o, .x = x, .ldx = ldx, .n = n, .K = K, .outs = outs};
    long total = 0; /* output rows of all outputs */
    for (int i = 0; i < nouts; i++) total += (long)rows_of(outs[i].w);
    const int par = QC_OPT_PAR(o, (double)n * K * total);
    if (n < o->gemm_min) {
        /* matrix-vector: items of MV_CHUNK_ROWS rows of the concatenated outputs */
        long nitems = 0;
        for (int i = 0; i < nouts; i++) {
            nitems += ((long)rows_of(outs[i].w) + MV_CHUNK_ROWS - 1) / MV_CHUNK_ROWS;
            j.end[i] = nitems;
        }
        qc_opt_run(o, nitems, par, mv_item, &j);
        return;
    }
    /* packed GEMM */
    const int MR = kt->gemm_mr, NR = kt->gemm_nr;
    j.Kp = qc_opt_kpad(K);
    j.ns = (n + NR - 1) / NR;
    for (int i = 0; i < nouts; i++) {
        long panels = ((long)rows_of(outs[i].w) + MR - 1) / MR;
        j.ngrp += (panels + GEMM_PANELS - 1) / GEMM_PANELS;
        j.end[i] = j.ngrp;
    }
    /* token block: as many strips as fit in ~1.5 MiB (stays in the 2 MiB L2 with the panel
     * while the panels run; every panel is widened once per token block) */
    j.sblk = (int)((3L << 19) / ((long)j.Kp * NR * 4));
    if (j.sblk < 1) j.sblk = 1;
    const long nsb = (j.ns + j.sblk - 1) / j.sblk;
    qc_opt_run(o, j.ns, par, pack_item, &j);
    qc_opt_run(o, nsb * j.ngrp, par, tile_item, &j);
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

/* item = (token, head): causal softmax attention, online over key blocks of 64, then
 * * sigmoid(gate) */
static void attn_item(void *ctx, long it, int tid) {
    const attn_job *j = ctx;
    const qc_opt *o = j->o;
    const qc_opt_kernels *K = o->k;
    const int hd = j->hd, t = (int)(it / j->nh), h = (int)(it % j->nh), qgd = 2 * j->nh * hd;
    const float *q = o->act + (size_t)t * j->nh * hd + (size_t)h * hd;
    const int g = h / j->grp, npos = j->start_pos + t + 1;
    const float *Kc = j->kc + (size_t)g * j->max_ctx * hd, *Vc = j->vc + (size_t)g * j->max_ctx * hd;
    float *out = o->ob + (size_t)t * j->nh * hd + (size_t)h * hd;
    float *sc = o->th[tid].sc;
    float m = -INFINITY, lsum = 0.0f;
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int p0 = 0; p0 < npos; p0 += 64) {
        const int nb = npos - p0 < 64 ? npos - p0 : 64;
        float mb = -INFINITY;
        for (int i = 0; i < nb; i++) {
            sc[i] = K->dot(q, Kc + (size_t)(p0 + i) * hd, hd) * j->scale;
            if (sc[i] > mb) mb = sc[i];
        }
        const float mnew = mb > m ? mb : m;
        if (mnew > m && m != -INFINITY) {
            const float corr = expf(m - mnew);
            K->scale(out, corr, hd);
            lsum *= corr;
        }
        m = mnew;
        for (int i = 0; i < nb; i++) sc[i] = sc[i] - m;
        K->vexp(sc, sc, nb);
        for (int i = 0; i < nb; i++) {
            lsum += sc[i];
            K->axpy(out, sc[i], Vc + (size_t)(p0 + i) * hd, hd);
        }
    }
    K->scale(out, 1.0f / lsum, hd);
    K->sigmoid_mul(out, o->mix + (size_t)t * qgd + (size_t)h * 2 * hd + hd, hd);
}

static void attention(qc_opt *o, int l, int n, int start_pos, qc_state *st) {
    const qc_config *c = &o->m->cfg;
    const qc_layer_weights *W = &o->m->layers[l];
    const int H = c->hidden_size, nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim;
    const int qgd = 2 * nh * hd, kvd = nkv * hd;

    qc_opt_lin outs[3] = {{&W->q_proj, o->mix, qgd}, {&W->k_proj, o->kb, kvd}, {&W->v_proj, o->vb, kvd}};
    qc_opt_linear(o, o->xn, H, n, H, outs, 3);

    attn_job j = {.o = o, .L = &o->layers[l], .kc = st->k_cache[l], .vc = st->v_cache[l],
                  .start_pos = start_pos, .max_ctx = st->max_context_len, .nh = nh, .nkv = nkv,
                  .hd = hd, .rd = c->rotary_dim, .grp = nh / nkv, .eps = (float)c->rms_eps,
                  .scale = (float)(1.0 / sqrt((double)hd))};
    qc_opt_run(o, n, QC_OPT_PAR(o, (double)n * (nh + 2 * nkv) * hd * 4), qk_item, &j);
    qc_opt_run(o, (long)n * nh, QC_OPT_PAR(o, (double)n * nh * hd * (start_pos + n)), attn_item, &j);

    qc_opt_lin oo = {&W->o_proj, o->u, H};
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
    qc_opt_linear(o, o->xn, H, n, H, gu, 2);
    mlp_job j = {o, I};
    qc_opt_run(o, n, QC_OPT_PAR(o, (double)n * I * 8), swiglu_item, &j);
    qc_opt_lin dn = {&W->mlp_down, o->u, H};
    qc_opt_linear(o, o->mix, I, n, I, &dn, 1);
}

/* ===================================================================================== */
/* Forward                                                                                */
/* ===================================================================================== */

static void forward_body(qc_backend *be, const int32_t *tokens, int n, int start_pos,
                         qc_state *st, float *logits, int all_logits, int chunk);

static qc_status opt_forward(qc_backend *be, const int32_t *tokens, int n, int start_pos,
                             qc_state *st, float *logits, int all_logits, qc_err *err) {
    qc_opt *o = be->impl;
    const qc_model *m = o->m;
    const qc_config *c = &m->cfg;
    const int H = c->hidden_size, V = c->vocab_size, L = c->n_layers;
    if (!tokens || !st) return qc_errf(err, QC_ERR_ARG, "optimized forward: NULL tokens or state");
    if (n < 1 || n > o->max_tokens)
        return qc_errf(err, QC_ERR_RANGE, "optimized forward: n = %d outside [1, max_tokens = %d]", n,
                       o->max_tokens);
    if (start_pos < 0 || start_pos + n > st->max_context_len)
        return qc_errf(err, QC_ERR_RANGE,
                       "optimized forward: positions %d..%d exceed the state capacity %d",
                       start_pos, start_pos + n - 1, st->max_context_len);
    if (st->n_layers != L || st->conv_dim != qc_cfg_conv_dim(c) || st->n_v_heads != c->lin_n_v_heads ||
        st->k_dim != c->lin_k_dim || st->v_dim != c->lin_v_dim || st->head_dim != c->head_dim ||
        st->n_kv_heads != c->n_kv_heads || st->conv_kernel != c->conv_kernel)
        return qc_errf(err, QC_ERR_ARG, "optimized forward: state geometry does not match the model");
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= V)
            return qc_errf(err, QC_ERR_RANGE, "optimized forward: token %d (id %d) outside [0, %d)",
                           t, (int)tokens[t], V);
    int chunk = 0;
    if (be->opts.dn_kernel == QC_DN_CHUNKED) {
        chunk = be->opts.chunk_size > 0 ? be->opts.chunk_size : 64;
        if (chunk > n) chunk = n;
        if (chunk > o->cmax)
            return qc_errf(err, QC_ERR_ARG,
                           "optimized forward: chunk_size %d exceeds the chunk scratch (%d tokens) "
                           "sized at create",
                           chunk, o->cmax);
    }
    if (QC_OPT_PAR(o, (double)n * H * c->intermediate_size)) {
        /* one parallel region per forward: thread 0 runs the pass, the others help with its
         * jobs (qc_opt_pool.c); passes too small to share any job run inline */
        qc_opt_pool_reset(&o->pool);
#pragma omp parallel num_threads(o->nthreads)
        {
            if (omp_get_thread_num() == 0) {
                o->pool_active = omp_get_num_threads() > 1;
                forward_body(be, tokens, n, start_pos, st, logits, all_logits, chunk);
                o->pool_active = 0;
                qc_opt_pool_quit(&o->pool);
            } else {
                qc_opt_pool_helper(&o->pool, omp_get_thread_num());
            }
        }
    } else {
        forward_body(be, tokens, n, start_pos, st, logits, all_logits, chunk);
    }
    return QC_OK;
}

/* the pass itself (arguments validated) */
static void forward_body(qc_backend *be, const int32_t *tokens, int n, int start_pos,
                         qc_state *st, float *logits, int all_logits, int chunk) {
    qc_opt *o = be->impl;
    const qc_model *m = o->m;
    const qc_config *c = &m->cfg;
    const int H = c->hidden_size, V = c->vocab_size, L = c->n_layers;
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
    if (be->opts.trace) be->opts.trace(be->opts.trace_user, 0, "hidden", start_pos, n, H, o->h);
    /* RoPE cos | sin per token */
    const int rd = c->rotary_dim, half = rd / 2;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < half; i++) {
            const float a = (float)(start_pos + t) * o->inv_freq[i];
            o->rope[(size_t)t * rd + i] = cosf(a);
            o->rope[(size_t)t * rd + half + i] = sinf(a);
        }

    for (int l = 0; l < L; l++) {
        const qc_opt_layer *Ly = &o->layers[l];
        rmsnorm_rows(o, o->xn, o->h, n, H, Ly->in_norm1p, eps);
        if (c->layer_types[l] == QC_LAYER_FULL) attention(o, l, n, start_pos, st);
        else qc_opt_deltanet(o, l, n, st, chunk);
        add_rows(o, o->h, o->u, (size_t)n * H);
        rmsnorm_rows(o, o->xn, o->h, n, H, Ly->post_norm1p, eps);
        mlp(o, l, n);
        add_rows(o, o->h, o->u, (size_t)n * H);
        if (be->opts.trace && l < L - 1)
            be->opts.trace(be->opts.trace_user, l + 1, "hidden", start_pos, n, H, o->h);
    }

    /* final norm: every row when traced or all logits are asked, else the last row only */
    const int all = be->opts.trace || (logits && all_logits);
    if (all) {
        rmsnorm_rows(o, o->xn, o->h, n, H, o->final_norm1p, eps);
        if (be->opts.trace) be->opts.trace(be->opts.trace_user, L, "hidden", start_pos, n, H, o->xn);
    } else if (logits) {
        rmsnorm_rows(o, o->xn + (size_t)(n - 1) * H, o->h + (size_t)(n - 1) * H, 1, H,
                     o->final_norm1p, eps);
    }
    if (logits) {
        qc_opt_lin lo = {&m->lm_head, logits, V};
        if (all_logits) qc_opt_linear(o, o->xn, H, n, H, &lo, 1);
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

static qc_status need(const qc_tensor *t, const char *name, int layer, int64_t d0, int64_t d1,
                      qc_err *err) {
    if (t->ndim == 0 || !t->data)
        return qc_errf(err, QC_ERR_MISSING, "optimized: layer %d: tensor %s missing", layer, name);
    if (t->shape[0] != d0 || (d1 > 0 && (t->ndim < 2 || t->shape[1] != d1)))
        return qc_errf(err, QC_ERR_SHAPE,
                       "optimized: layer %d: %s: shape [%lld, %lld] != [%lld, %lld]", layer, name,
                       (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0),
                       (long long)d0, (long long)d1);
    return QC_OK;
}

static float *widen_copy(qc_opt *o, const qc_tensor *t, size_t count, int plus1) {
    float *p = opt_alloc(o, count);
    if (!p) return NULL;
    for (size_t i = 0; i < count; i++) {
        float v = qc_tensor_get(t, i);
        p[i] = plus1 ? 1.0f + v : v;
    }
    return p;
}

qc_status qc_optimized_create(const qc_model *m, const qc_backend_opts *opts, qc_backend **out,
                              qc_err *err) {
    if (!out) return qc_errf(err, QC_ERR_ARG, "optimized: NULL out");
    *out = NULL;
    if (!m) return qc_errf(err, QC_ERR_ARG, "optimized: NULL model");
    qc_backend_opts def;
    qc_backend_opts_default(&def);
    const qc_backend_opts *op = opts ? opts : &def;
    if (op->max_tokens < 1)
        return qc_errf(err, QC_ERR_ARG, "optimized: max_tokens %d < 1", op->max_tokens);
    const qc_config *c = &m->cfg;
    const int H = c->hidden_size, I = c->intermediate_size, L = c->n_layers, V = c->vocab_size;
    const int nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim;
    const int nk = c->lin_n_k_heads, nv = c->lin_n_v_heads, dv = c->lin_v_dim;
    const int C = qc_cfg_conv_dim(c), Kc = c->conv_kernel, N = op->max_tokens;
    if (nkv <= 0 || nh % nkv || nk <= 0 || nv % nk || c->rotary_dim % 2 || c->rotary_dim > hd)
        return qc_errf(err, QC_ERR_ARG, "optimized: inconsistent head geometry in the config");

    /* ---- validate the tensors the forward pass reads ---- */
    qc_status s;
    if ((s = need(&m->embed, "embed_tokens", -1, V, H, err))) return s;
    if ((s = need(&m->lm_head, "lm_head", -1, V, H, err))) return s;
    if ((s = need(&m->final_norm, "norm", -1, H, 0, err))) return s;
    for (int l = 0; l < L; l++) {
        const qc_layer_weights *w = &m->layers[l];
        if ((s = need(&w->input_norm, "input_layernorm", l, H, 0, err))) return s;
        if ((s = need(&w->post_norm, "post_attention_layernorm", l, H, 0, err))) return s;
        if ((s = need(&w->mlp_gate, "mlp.gate_proj", l, I, H, err))) return s;
        if ((s = need(&w->mlp_up, "mlp.up_proj", l, I, H, err))) return s;
        if ((s = need(&w->mlp_down, "mlp.down_proj", l, H, I, err))) return s;
        if (c->layer_types[l] == QC_LAYER_FULL) {
            if ((s = need(&w->q_proj, "q_proj", l, 2 * nh * hd, H, err))) return s;
            if ((s = need(&w->k_proj, "k_proj", l, nkv * hd, H, err))) return s;
            if ((s = need(&w->v_proj, "v_proj", l, nkv * hd, H, err))) return s;
            if ((s = need(&w->o_proj, "o_proj", l, H, nh * hd, err))) return s;
            if ((s = need(&w->q_norm, "q_norm", l, hd, 0, err))) return s;
            if ((s = need(&w->k_norm, "k_norm", l, hd, 0, err))) return s;
        } else {
            if ((s = need(&w->in_proj_qkv, "in_proj_qkv", l, C, H, err))) return s;
            if ((s = need(&w->in_proj_z, "in_proj_z", l, nv * dv, H, err))) return s;
            if ((s = need(&w->in_proj_b, "in_proj_b", l, nv, H, err))) return s;
            if ((s = need(&w->in_proj_a, "in_proj_a", l, nv, H, err))) return s;
            if ((s = need(&w->conv1d, "conv1d", l, C, 0, err))) return s;
            if (qc_tensor_numel(&w->conv1d) != (size_t)C * Kc)
                return qc_errf(err, QC_ERR_SHAPE, "optimized: layer %d: conv1d has %zu elements != %d",
                               l, qc_tensor_numel(&w->conv1d), C * Kc);
            if ((s = need(&w->dt_bias, "dt_bias", l, nv, 0, err))) return s;
            if ((s = need(&w->A_log, "A_log", l, nv, 0, err))) return s;
            if ((s = need(&w->lin_norm, "norm", l, dv, 0, err))) return s;
            if ((s = need(&w->out_proj, "out_proj", l, H, nv * dv, err))) return s;
        }
    }

    qc_opt *o = calloc(1, sizeof *o);
    qc_backend *be = qc_backend_alloc();
    if (!o || !be) {
        free(o);
        free(be);
        return qc_errf(err, QC_ERR_OOM, "optimized: out of memory");
    }
    o->m = m;
    o->k = qc_opt_kernels_pick();
    o->nthreads = op->n_threads > 0 ? op->n_threads : omp_get_max_threads();
    if (o->nthreads < 1) o->nthreads = 1;
    o->max_tokens = N;
    o->gemm_min = 8;
    o->par_min = 1 << 16;
    const char *pm = getenv("QC_OPT_PAR_MIN");
    if (pm && *pm) o->par_min = atof(pm);
    const char *gm = getenv("QC_OPT_GEMM_MIN");
    if (gm && *gm) o->gemm_min = atoi(gm) > 0 ? atoi(gm) : 1;
    int cm = op->chunk_size > 256 ? op->chunk_size : 256;
    o->cmax = cm < N ? cm : N;
    int kmax = H;
    if (I > kmax) kmax = I;
    if (nh * hd > kmax) kmax = nh * hd;
    if (nv * dv > kmax) kmax = nv * dv;
    o->kp_max = qc_opt_kpad(kmax);
    snprintf(o->desc, sizeof o->desc, "optimized (%s, %d thread%s)", o->k->isa, o->nthreads,
             o->nthreads == 1 ? "" : "s");

    const int T = o->nthreads, NR = o->k->gemm_nr;
    int wmix = C > 2 * nh * hd ? C : 2 * nh * hd;
    if (I > wmix) wmix = I;
    int wz = nv * dv > I ? nv * dv : I;
    int wact = C > nh * hd ? C : nh * hd;
    int wob = nv * dv > nh * hd ? nv * dv : nh * hd;
    int ok = 1;
#define A(ptr, count)                                  \
    do {                                               \
        if (!((ptr) = opt_alloc(o, (size_t)(count)))) ok = 0; \
    } while (0)
    o->layers = calloc((size_t)L, sizeof *o->layers);
    o->panel = calloc((size_t)T, sizeof *o->panel);
    o->th = calloc((size_t)T, sizeof *o->th);
    if (!o->layers || !o->panel || !o->th || qc_opt_pool_init(&o->pool, T)) ok = 0;
    if (ok) {
        A(o->h, (size_t)N * H);
        A(o->xn, (size_t)N * H);
        A(o->u, (size_t)N * H);
        A(o->mix, (size_t)N * wmix);
        A(o->zb, (size_t)N * wz);
        A(o->act, (size_t)N * wact);
        A(o->ob, (size_t)N * wob);
        A(o->kb, (size_t)N * nkv * hd);
        A(o->vb, (size_t)N * nkv * hd);
        A(o->bab, (size_t)N * 2 * nv);
        A(o->rope, (size_t)N * (c->rotary_dim > 0 ? c->rotary_dim : 1));
        A(o->est, (size_t)Kc * C);
        A(o->xpack, (size_t)((N + NR - 1) / NR) * o->kp_max * NR);
        A(o->inv_freq, (size_t)(c->rotary_dim / 2 + 1));
        for (int t = 0; t < T && ok; t++) {
            A(o->panel[t], (size_t)o->kp_max * QC_OPT_MR_MAX);
            float *buf;
            A(buf, qc_opt_dn_thread_floats(c, o->cmax));
            if (ok) qc_opt_dn_thread_init(&o->th[t], c, o->cmax, buf);
        }
    }
#undef A
    /* small weights in fp32 */
    for (int l = 0; l < L && ok; l++) {
        const qc_layer_weights *w = &m->layers[l];
        qc_opt_layer *ly = &o->layers[l];
        if (!(ly->in_norm1p = widen_copy(o, &w->input_norm, H, 1))) ok = 0;
        if (!(ly->post_norm1p = widen_copy(o, &w->post_norm, H, 1))) ok = 0;
        if (c->layer_types[l] == QC_LAYER_FULL) {
            if (!(ly->q_norm1p = widen_copy(o, &w->q_norm, hd, 1))) ok = 0;
            if (!(ly->k_norm1p = widen_copy(o, &w->k_norm, hd, 1))) ok = 0;
        } else {
            if (!(ly->dt_bias = widen_copy(o, &w->dt_bias, nv, 0))) ok = 0;
            if (!(ly->lin_norm = widen_copy(o, &w->lin_norm, dv, 0))) ok = 0;
            if (!(ly->neg_expA = opt_alloc(o, nv))) ok = 0;
            if (!(ly->conv_wT = opt_alloc(o, (size_t)Kc * C))) ok = 0;
            if (!ok) break;
            for (int h = 0; h < nv; h++) ly->neg_expA[h] = -expf(qc_tensor_get(&w->A_log, h));
            for (int c_ = 0; c_ < C; c_++)
                for (int j = 0; j < Kc; j++)
                    ly->conv_wT[(size_t)j * C + c_] = qc_tensor_get(&w->conv1d, (size_t)c_ * Kc + j);
        }
    }
    if (ok && !(o->final_norm1p = widen_copy(o, &m->final_norm, H, 1))) ok = 0;
    if (!ok) {
        opt_free(o);
        free(be);
        return qc_errf(err, QC_ERR_OOM, "optimized: cannot allocate the scratch for max_tokens %d", N);
    }
    for (int i = 0; i < c->rotary_dim / 2; i++) {
        const float expo = (float)(2 * i) / (float)c->rotary_dim;
        o->inv_freq[i] = 1.0f / powf((float)c->rope_theta, expo);
    }

    be->name = "optimized";
    be->model = m;
    be->opts = *op;
    be->impl = o;
    be->forward = opt_forward;
    be->destroy = opt_destroy;
    be->describe = opt_describe;
    *out = be;
    return QC_OK;
}
