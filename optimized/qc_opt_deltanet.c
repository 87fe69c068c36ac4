/* qc_opt_deltanet.c — the Gated DeltaNet mixer of the optimized backend.
 *
 * Projections (one packed GEMM / matvec over in_proj_qkv | z | b | a), causal depthwise conv +
 * SiLU vectorised over channels, per-head l2norm / beta / g, then per value head (split across
 * threads) either the token recurrence or the chunked algorithm of docs/qwen35-model.md 8.7
 * with every product a blocked gemm_nn:
 *   A  = -(kb K^T * D)  (strictly lower)          D[r,s] = exp(gam_r - gam_s)
 *   T  = (I - A)^{-1}                               forward substitution (unit lower)
 *   U  = T (beta v),  Wn = T (-kb exp(gam))         blocked products
 *   Vn = U + Wn S
 *   O  = (Q exp(gam)) S + (Q K^T * D, incl. diag) Vn
 *   S  = exp(gam_last) S + (K exp(gam_last - gam))^T Vn
 * The end padding of the last chunk is not materialised (padded tokens have k = 0, beta = 0,
 * g = 0 and change nothing), so a chunk is min(chunk, remaining) tokens.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "qc_opt_internal.h"

/* ===================================================================================== */
/* Scratch                                                                                */
/* ===================================================================================== */

static int vec_len(const qc_config *c) {
    int m = c->lin_k_dim > c->lin_v_dim ? c->lin_k_dim : c->lin_v_dim;
    if (c->head_dim > m) m = c->head_dim;
    return (m + 64 + 15) / 16 * 16;
}

size_t qc_opt_dn_thread_floats(const qc_config *c, int cmax) {
    size_t dk = (size_t)c->lin_k_dim, dv = (size_t)c->lin_v_dim, cm = (size_t)cmax;
    return 2 * cm /*gamd (double)*/ + 3 * cm + cm * dk /*kb*/ + 2 * dk * cm /*KT KdT*/ + 4 * cm * cm /*D A P T*/ + cm * dv /*Vb*/ +
           cm * dk /*Wn*/ + cm * dv /*Vn*/ + cm * dk /*Qg*/ + (size_t)vec_len(c) + 64 + 16 * 16;
}

void qc_opt_dn_thread_init(qc_opt_thread *t, const qc_config *c, int cmax, float *buf) {
    size_t dk = (size_t)c->lin_k_dim, dv = (size_t)c->lin_v_dim, cm = (size_t)cmax;
    float *p = buf;
#define TAKE(field, count) \
    do {                   \
        t->field = p;      \
        p += (count);      \
    } while (0)
    t->gamd = (double *)(void *)p; /* first: aligned as buf */
    p += 2 * cm;
    TAKE(gam, cm);
    TAKE(eg, cm);
    TAKE(tmp, cm);
    TAKE(kb, cm * dk);
    TAKE(KT, dk * cm);
    TAKE(KdT, dk * cm);
    TAKE(D, cm * cm);
    TAKE(A, cm * cm);
    TAKE(P, cm * cm);
    TAKE(T, cm * cm);
    TAKE(Vb, cm * dv);
    TAKE(Wn, cm * dk);
    TAKE(Vn, cm * dv);
    TAKE(Qg, cm * dk);
    TAKE(vec, (size_t)vec_len(c));
    TAKE(sc, 64);
#undef TAKE
}

/* ===================================================================================== */
/* Per-head kernels                                                                       */
/* ===================================================================================== */

typedef struct {
    int n, nv, dk, dv;
    const float *q;  /* q of this head's key head, token t at q + t * ldqk */
    const float *k;  /* likewise */
    long ldqk;       /* C */
    const float *v;  /* token t at v + t * ldqk */
    const float *bg; /* beta at bg[t * 2nv], g at bg[t * 2nv + nv] (already offset by head) */
    float *o;        /* token t at o + t * ldo */
    long ldo;
} dn_head;

/* token recurrence (docs/qwen35-model.md 8.6) */
static void dn_recurrent_head(const qc_opt_kernels *K, const dn_head *a, float *S, float *kv) {
    const int dk = a->dk, dv = a->dv, nv2 = 2 * a->nv;
    for (int t = 0; t < a->n; t++) {
        const float *q = a->q + t * a->ldqk, *k = a->k + t * a->ldqk, *v = a->v + t * a->ldqk;
        const float beta = a->bg[t * nv2], eg = expf(a->bg[t * nv2 + a->nv]);
        float *o = a->o + t * a->ldo;
        /* pass 1 (read only): kv = (exp(g) S)^T k = exp(g) (S^T k) */
        memset(kv, 0, (size_t)dv * sizeof(float));
        for (int i = 0; i < dk; i++) K->axpy(kv, k[i], S + (size_t)i * dv, dv);
        for (int j = 0; j < dv; j++) kv[j] = beta * (v[j] - eg * kv[j]);
        /* pass 2 (read-write, each row while it is in L1): S = exp(g) S + k d^T; o = S^T q */
        memset(o, 0, (size_t)dv * sizeof(float));
        for (int i = 0; i < dk; i++) {
            float *Si = S + (size_t)i * dv;
            K->scale(Si, eg, dv);
            K->axpy(Si, k[i], kv, dv);
            K->axpy(o, q[i], Si, dv);
        }
    }
}

/* Above this total log-decay of a chunk (|gam_last|) the float32 cumulative sum has lost too
 * much absolute precision for its differences gam_r - gam_s (an ulp of 1024 is 1.2e-4: the
 * pairwise decays near 1 after a huge decay earlier in the chunk are then off by that much
 * relatively): the sum is taken in double and each difference rounded once. Below it (every
 * chunk of the standard fixtures) the float path runs, unchanged. Same rule as the reference
 * (QC_REF_DN_GAMMA_EXACT). */
#define DN_GAMMA_EXACT 1024.0f

/* chunked algorithm (docs/qwen35-model.md 8.7), chunks of `chunk` tokens */
static void dn_chunked_head(const qc_opt_kernels *K, const dn_head *a, float *S, int chunk,
                            int cm, qc_opt_thread *w) {
    const int dk = a->dk, dv = a->dv, nv2 = 2 * a->nv;
    for (int c0 = 0; c0 < a->n; c0 += chunk) {
        const int Lc = a->n - c0 < chunk ? a->n - c0 : chunk;
        const float *Q = a->q + c0 * a->ldqk, *Kr = a->k + c0 * a->ldqk, *V = a->v + c0 * a->ldqk;
        const float *bg = a->bg + c0 * nv2;
        float *O = a->o + c0 * a->ldo;
        /* gamma = cumsum(g); eg = exp(gamma) */
        float acc = 0.0f;
        for (int r = 0; r < Lc; r++) {
            acc += bg[r * nv2 + a->nv];
            w->gam[r] = acc;
        }
        const int exact = -w->gam[Lc - 1] > DN_GAMMA_EXACT;
        if (exact) {
            double dacc = 0.0;
            for (int r = 0; r < Lc; r++) {
                dacc += (double)bg[r * nv2 + a->nv];
                w->gamd[r] = dacc;
                w->gam[r] = (float)dacc;
            }
        }
        K->vexp(w->eg, w->gam, Lc);
        const float glast = w->gam[Lc - 1];
        /* kb = beta k; KT = k^T; KdT = (k exp(glast - gam))^T; Qg = q exp(gam) */
        for (int r = 0; r < Lc; r++)
            w->tmp[r] = exact ? (float)(w->gamd[Lc - 1] - w->gamd[r]) : glast - w->gam[r];
        K->vexp(w->tmp, w->tmp, Lc);
        for (int r = 0; r < Lc; r++) {
            const float *kr = Kr + r * a->ldqk, *qr = Q + r * a->ldqk;
            const float beta = bg[r * nv2];
            float *kbr = w->kb + (size_t)r * dk, *qg = w->Qg + (size_t)r * dk;
            for (int i = 0; i < dk; i++) {
                kbr[i] = beta * kr[i];
                qg[i] = qr[i] * w->eg[r];
            }
        }
        /* the transposes read down the columns of k and write whole rows (strided stores
         * were a quarter of the chunked head's time) */
        for (int i = 0; i < dk; i++) {
            float *kt = w->KT + (size_t)i * cm, *kdt = w->KdT + (size_t)i * cm;
            for (int r = 0; r < Lc; r++) kt[r] = Kr[r * a->ldqk + i];
            for (int r = 0; r < Lc; r++) kdt[r] = kt[r] * w->tmp[r];
        }
        /* D[r, s] = exp(gam_r - gam_s) for s <= r */
        for (int r = 0; r < Lc; r++) {
            float *Dr = w->D + (size_t)r * cm;
            for (int s = 0; s <= r; s++)
                Dr[s] = exact ? (float)(w->gamd[r] - w->gamd[s]) : w->gam[r] - w->gam[s];
            K->vexp(Dr, Dr, r + 1);
        }
        /* A = -(kb K^T * D) strictly lower; P = (Q K^T * D) lower incl. diagonal */
        K->gemm_nn(Lc, Lc, dk, w->kb, dk, w->KT, cm, w->A, cm, 0);
        K->gemm_nn(Lc, Lc, dk, Q, a->ldqk, w->KT, cm, w->P, cm, 0);
        for (int r = 0; r < Lc; r++) {
            float *Ar = w->A + (size_t)r * cm, *Pr = w->P + (size_t)r * cm;
            const float *Dr = w->D + (size_t)r * cm;
            for (int s = 0; s < r; s++) Ar[s] = -(Ar[s] * Dr[s]);
            for (int s = r; s < Lc; s++) Ar[s] = 0.0f;
            for (int s = 0; s <= r; s++) Pr[s] = Pr[s] * Dr[s];
            for (int s = r + 1; s < Lc; s++) Pr[s] = 0.0f;
        }
        /* T = (I - A)^{-1} (A holds -L): row i = e_i + sum_{m<i} A[i,m] T[m] (unit lower) */
        for (int r = 0; r < Lc; r++) {
            float *Tr = w->T + (size_t)r * cm;
            memset(Tr, 0, (size_t)Lc * sizeof(float));
            Tr[r] = 1.0f;
            if (r > 0) K->gemm_nn(1, r, r, w->A + (size_t)r * cm, cm, w->T, cm, Tr, cm, 1);
        }
        /* U = T (beta v) (kept in Vn); Wn = T (-kb exp(gam)) */
        for (int r = 0; r < Lc; r++) {
            const float beta = bg[r * nv2], e = w->eg[r];
            const float *vr = V + r * a->ldqk;
            float *vb = w->Vb + (size_t)r * dv, *kbr = w->kb + (size_t)r * dk;
            for (int j = 0; j < dv; j++) vb[j] = beta * vr[j];
            for (int i = 0; i < dk; i++) kbr[i] = -(kbr[i] * e);
        }
        K->gemm_nn(Lc, dv, Lc, w->T, cm, w->Vb, dv, w->Vn, dv, 0);
        K->gemm_nn(Lc, dk, Lc, w->T, cm, w->kb, dk, w->Wn, dk, 0);
        /* Vn = U + Wn S */
        K->gemm_nn(Lc, dv, dk, w->Wn, dk, S, dv, w->Vn, dv, 1);
        /* O = Qg S + P Vn */
        K->gemm_nn(Lc, dv, dk, w->Qg, dk, S, dv, O, a->ldo, 0);
        K->gemm_nn(Lc, dv, Lc, w->P, cm, w->Vn, dv, O, a->ldo, 1);
        /* S = exp(glast) S + KdT Vn */
        K->scale(S, w->eg[Lc - 1], dk * dv);
        K->gemm_nn(dk, dv, Lc, w->KdT, cm, w->Vn, dv, S, dv, 1);
    }
}

/* ===================================================================================== */
/* The mixer                                                                              */
/* ===================================================================================== */

static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

typedef struct {
    qc_opt *o;
    const qc_opt_layer *L;
    float *S0;               /* this layer's recurrent state [nv, dk, dv] */
    int n, chunk;            /* tokens; effective chunk (0: recurrence) */
    int nk, nv, dk, dv, Kc, C, key_dim, vdim;
    float q_scale, eps;
} dn_job;

#define CONV_CB 256 /* conv channels per block */

/* token t: causal conv + SiLU over E = [conv_state | x^T] (y[t] uses columns t+1 .. t+K);
 * l2norm q, k per key head (fixed eps 1e-6), q *= 1/sqrt(dk); beta = sigmoid(b),
 * g = -exp(A_log) softplus(a + dt_bias) */
static void conv_item(void *ctx, long t, int tid) {
    const dn_job *j = ctx;
    const qc_opt *o = j->o;
    const qc_opt_kernels *K = o->k;
    const int C = j->C, Kc = j->Kc, dk = j->dk, nv = j->nv;
    (void)tid;
    float *y = o->act + (size_t)t * C;
    /* channels in blocks of CONV_CB, each block's sum over the taps while it is in L1 (the
     * same operations per channel, in tap order) */
    for (int c0 = 0; c0 < C; c0 += CONV_CB) {
        const int c1 = c0 + CONV_CB < C ? c0 + CONV_CB : C;
        for (int jj = 0; jj < Kc; jj++) {
            const long idx = t + 1 + jj;
            const float *col = idx < Kc ? o->est + (size_t)idx * C : o->mix + (size_t)(idx - Kc) * C;
            const float *wj = j->L->conv_wT + (size_t)jj * C;
            if (jj == 0)
                for (int c_ = c0; c_ < c1; c_++) y[c_] = wj[c_] * col[c_];
            else
                for (int c_ = c0; c_ < c1; c_++) y[c_] = y[c_] + wj[c_] * col[c_];
        }
    }
    K->silu(y, y, C);
    for (int hk = 0; hk < 2 * j->nk; hk++) {
        float *x = y + (size_t)hk * dk;
        const float inv = 1.0f / sqrtf(K->sumsq(x, dk) + 1e-6f);
        for (int i = 0; i < dk; i++) x[i] = x[i] * inv;
        if (hk < j->nk)
            for (int i = 0; i < dk; i++) x[i] = x[i] * j->q_scale;
    }
    float *bg = o->bab + (size_t)t * 2 * nv;
    for (int h = 0; h < nv; h++) {
        const float b = bg[h], a = bg[nv + h];
        bg[h] = 1.0f / (1.0f + expf(-b));
        bg[nv + h] = j->L->neg_expA[h] * softplus(a + j->L->dt_bias[h]);
    }
}

/* value head h: the delta rule over the n tokens */
static void head_item(void *ctx, long h, int tid) {
    const dn_job *j = ctx;
    qc_opt *o = j->o;
    qc_opt_thread *w = &o->th[tid];
    const int hk = (int)h / (j->nv / j->nk);
    dn_head a = {.n = j->n, .nv = j->nv, .dk = j->dk, .dv = j->dv,
                 .q = o->act + (size_t)hk * j->dk, .k = o->act + j->key_dim + (size_t)hk * j->dk,
                 .ldqk = j->C, .v = o->act + 2 * j->key_dim + (size_t)h * j->dv,
                 .bg = o->bab + h, .o = o->ob + (size_t)h * j->dv, .ldo = j->vdim};
    float *S = j->S0 + (size_t)h * j->dk * j->dv;
    if (j->chunk <= 0 || j->n == 1) dn_recurrent_head(o->k, &a, S, w->vec);
    else dn_chunked_head(o->k, &a, S, j->chunk, o->cmax, w);
}

/* token t: gated RMSNorm per head, y = w * (o * inv) * silu(z) */
static void gnorm_item(void *ctx, long t, int tid) {
    const dn_job *j = ctx;
    const qc_opt *o = j->o;
    const qc_opt_kernels *K = o->k;
    const int dv = j->dv;
    float *sz = o->th[tid].vec;
    for (int h = 0; h < j->nv; h++) {
        float *x = o->ob + (size_t)t * j->vdim + (size_t)h * dv;
        K->silu(sz, o->zb + (size_t)t * j->vdim + (size_t)h * dv, dv);
        const float inv = 1.0f / sqrtf(K->sumsq(x, dv) / (float)dv + j->eps);
        for (int i = 0; i < dv; i++) x[i] = j->L->lin_norm[i] * (x[i] * inv) * sz[i];
    }
}

void qc_opt_deltanet(qc_opt *o, int l, int n, qc_state *st, int chunk) {
    const qc_config *c = &o->m->cfg;
    const qc_layer_weights *W = &o->m->layers[l];
    const int H = c->hidden_size, nk = c->lin_n_k_heads, nv = c->lin_n_v_heads;
    const int dk = c->lin_k_dim, dv = c->lin_v_dim, Kc = c->conv_kernel;
    const int vdim = nv * dv, C = qc_cfg_conv_dim(c), nv2 = 2 * nv;
    dn_job j = {.o = o, .L = &o->layers[l], .S0 = st->recurrent_state[l], .n = n, .chunk = chunk,
                .nk = nk, .nv = nv, .dk = dk, .dv = dv, .Kc = Kc, .C = C, .key_dim = nk * dk,
                .vdim = vdim, .q_scale = (float)(1.0 / sqrt((double)dk)), .eps = (float)c->rms_eps};

    /* 1. projections */
    qc_opt_lin outs[4] = {{&W->in_proj_qkv, o->mix, C},
                          {&W->in_proj_z, o->zb, vdim},
                          {&W->in_proj_b, o->bab, nv2},
                          {&W->in_proj_a, o->bab + nv, nv2}};
    QC_OPT_PROF_CLASS(o, QC_OP_PROJ);
    qc_opt_linear(o, o->xn, H, n, H, outs, 4);

    /* 2-3. conv + SiLU, q/k l2norm, beta, g; then the conv state <- last K columns of E */
    float *cs = st->conv_state[l];
    for (int c_ = 0; c_ < C; c_++)
        for (int jj = 0; jj < Kc; jj++) o->est[(size_t)jj * C + c_] = cs[(size_t)c_ * Kc + jj];
    QC_OPT_PROF_CLASS(o, QC_OP_CONV);
    qc_opt_run(o, n, QC_OPT_PAR(o, (double)n * C * (Kc + 8)), conv_item, &j);
    for (int jj = 0; jj < Kc; jj++) {
        const int idx = n + jj;
        const float *col = idx < Kc ? o->est + (size_t)idx * C : o->mix + (size_t)(idx - Kc) * C;
        for (int c_ = 0; c_ < C; c_++) cs[(size_t)c_ * Kc + jj] = col[c_];
    }

    /* 4. the delta rule, one value head per item */
    QC_OPT_PROF_CLASS(o, QC_OP_DELTANET);
    qc_opt_run(o, nv, QC_OPT_PAR(o, 4.0 * n * nv * dk * dv), head_item, &j);

    /* 5. gated RMSNorm */
    QC_OPT_PROF_CLASS(o, QC_OP_NORM);
    qc_opt_run(o, n, QC_OPT_PAR(o, (double)n * vdim * 8), gnorm_item, &j);

    /* 6. out_proj */
    qc_opt_lin oo = {&W->out_proj, o->u, H};
    QC_OPT_PROF_CLASS(o, QC_OP_PROJ);
    qc_opt_linear(o, o->ob, vdim, n, vdim, &oo, 1);
}
