/* qc_ref_deltanet.c — gated delta rule: token recurrence and the chunked (parallel) algorithm.
 *
 * See qc_ref_deltanet.h for the layouts. Plain float loops, sums left to right.
 */
#include "qc_ref_deltanet.h"

#include <math.h>
#include <stdint.h>

#include "qc/qc_status.h"

/* Plain left-to-right float dot product. */
static float qc_ref_dn_dot(const float *a, const float *b, int len) {
    float acc = 0.0f;
    for (int i = 0; i < len; i++) acc += a[i] * b[i];
    return acc;
}

/* ===================================================================================== */
/* Scratch                                                                                */
/* ===================================================================================== */

size_t qc_ref_dn_scratch_floats(const qc_ref_dn_dims *d, int max_chunk) {
    size_t C = (size_t)max_chunk, dk = (size_t)d->k_dim, dv = (size_t)d->v_dim;
    return 2 * C + 1    /* gamma_d (double; +1 float to align it) */
           + C          /* gamma */
           + C * C      /* T */
           + C          /* trow */
           + C * dk     /* kbeta */
           + C * dv     /* vbeta */
           + C * dk     /* kcd */
           + C * dv     /* U */
           + C * dk     /* W */
           + C * dv;    /* Vn */
}

/* exp(gamma_r - gamma_c), c <= r: the difference from the double sums in an exact chunk. */
float qc_ref_dn_decay(const qc_ref_dn_scratch *s, int r, int c, int exact) {
    return expf(exact ? (float)(s->gamma_d[r] - s->gamma_d[c]) : s->gamma[r] - s->gamma[c]);
}

void qc_ref_dn_scratch_init(qc_ref_dn_scratch *s, const qc_ref_dn_dims *d, int max_chunk,
                            float *buf) {
    size_t C = (size_t)max_chunk, dk = (size_t)d->k_dim, dv = (size_t)d->v_dim;
    s->max_chunk = max_chunk;
    s->decay = qc_ref_dn_decay;
    if ((uintptr_t)(void *)buf % sizeof(double)) buf++; /* the +1 float of the count */
    s->gamma_d = (double *)(void *)buf; buf += 2 * C;
    s->gamma = buf;            buf += C;
    s->T = buf;                buf += C * C;
    s->trow = buf;             buf += C;
    s->kbeta = buf;            buf += C * dk;
    s->vbeta = buf;            buf += C * dv;
    s->kcd = buf;              buf += C * dk;
    s->U = buf;                buf += C * dv;
    s->W = buf;                buf += C * dk;
    s->Vn = buf;
}

/* ===================================================================================== */
/* Token recurrence (docs/qwen35-model.md 8.6)                                            */
/* ===================================================================================== */

void qc_ref_dn_recurrent(const qc_ref_dn_dims *d, int n, const float *q, const float *k,
                         const float *v, const float *g, const float *beta, float *S,
                         float *o) {
    const int nk = d->n_k_heads, nv = d->n_v_heads, dk = d->k_dim, dv = d->v_dim;
    const int ratio = nv / nk; /* value heads per key head */
    for (int t = 0; t < n; t++) {
        for (int j = 0; j < nv; j++) {
            const int kh = j / ratio; /* value head j uses key head j / (nv/nk) (interleave) */
            const float *qt = q + ((size_t)t * nk + kh) * dk;
            const float *kt = k + ((size_t)t * nk + kh) * dk;
            const float *vt = v + ((size_t)t * nv + j) * dv;
            const float bt = beta[(size_t)t * nv + j];
            const float decay = expf(g[(size_t)t * nv + j]);
            float *Sj = S + (size_t)j * dk * dv;
            float *ot = o + ((size_t)t * nv + j) * dv;

            /* S = exp(g) * S  (decay BEFORE the error term) */
            for (int i = 0; i < dk; i++)
                for (int e = 0; e < dv; e++) Sj[(size_t)i * dv + e] = Sj[(size_t)i * dv + e] * decay;

            /* Each value column e evolves independently:
             *   kv = sum_i S[i,e] k[i]; d = beta (v[e] - kv); S[i,e] += k[i] d; o[e] = sum_i S[i,e] q[i] */
            for (int e = 0; e < dv; e++) {
                float kv = 0.0f;
                for (int i = 0; i < dk; i++) kv += Sj[(size_t)i * dv + e] * kt[i];
                const float delta = (vt[e] - kv) * bt;
                for (int i = 0; i < dk; i++) Sj[(size_t)i * dv + e] += kt[i] * delta;
                float acc = 0.0f;
                for (int i = 0; i < dk; i++) acc += Sj[(size_t)i * dv + e] * qt[i];
                ot[e] = acc;
            }
        }
    }
}

/* ===================================================================================== */
/* Chunked algorithm (docs/qwen35-model.md 8.7)                                           */
/* ===================================================================================== */

/* One chunk of Lc tokens (tokens c0 .. c0+Lc-1) for value head j / key head kh. */
static void dn_chunk(const qc_ref_dn_dims *d, int c0, int Lc, int j, int kh, const float *q,
                     const float *k, const float *v, const float *g, const float *beta,
                     float *Sj, float *o, qc_ref_dn_scratch *s) {
    const int nk = d->n_k_heads, nv = d->n_v_heads, dk = d->k_dim, dv = d->v_dim;
    const int C = s->max_chunk; /* row stride of T */
#define QROW(r) (q + ((size_t)(c0 + (r)) * nk + kh) * dk)
#define KROW(r) (k + ((size_t)(c0 + (r)) * nk + kh) * dk)
#define VROW(r) (v + ((size_t)(c0 + (r)) * nv + j) * dv)
    float *gamma = s->gamma, *T = s->T, *trow = s->trow;

    /* 1. gamma_r = sum_{s<=r} g_s (restarts every chunk); k_beta = beta k; v_beta = beta v. */
    for (int r = 0; r < Lc; r++) {
        const float gr = g[(size_t)(c0 + r) * nv + j];
        gamma[r] = (r == 0) ? gr : gamma[r - 1] + gr;
        const float br = beta[(size_t)(c0 + r) * nv + j];
        for (int i = 0; i < dk; i++) s->kbeta[(size_t)r * dk + i] = KROW(r)[i] * br;
        for (int e = 0; e < dv; e++) s->vbeta[(size_t)r * dv + e] = VROW(r)[e] * br;
    }
    /* a chunk with a huge total decay: the cumulative sum in double (QC_REF_DN_GAMMA_EXACT) */
    const int exact = -gamma[Lc - 1] > QC_REF_DN_GAMMA_EXACT;
    if (exact) {
        double acc = 0.0;
        for (int r = 0; r < Lc; r++) {
            acc += (double)g[(size_t)(c0 + r) * nv + j];
            s->gamma_d[r] = acc;
            gamma[r] = (float)acc;
        }
    }
/* exp(gamma_r - gamma_c), c <= r (s->decay: qc_ref_dn_decay) */
#define DECAY(r, c) s->decay(s, (r), (c), exact)

    /* 2. M = -strictly_lower( (k_beta K^T) .* D ), D[r,s] = exp(gamma_r - gamma_s). */
    for (int r = 0; r < Lc; r++) {
        for (int c = 0; c < Lc; c++) {
            float a = 0.0f;
            if (c < r) {
                const float dot = qc_ref_dn_dot(s->kbeta + (size_t)r * dk, KROW(c), dk);
                a = -(dot * DECAY(r, c));
            }
            T[(size_t)r * C + c] = a;
        }
    }

    /* 3. Forward substitution: for i = 1..Lc-1, using the ORIGINAL row i and the already
     *    updated rows m < i:  T[i,c] = row[c] + sum_m row[m] T[m,c]  (terms with T[m,c] = 0,
     *    i.e. m <= c, are exact zeros and are skipped). Then T = M + I (diagonal implicit). */
    for (int i = 1; i < Lc; i++) {
        for (int c = 0; c < i; c++) trow[c] = T[(size_t)i * C + c];
        for (int c = 0; c < i; c++) {
            float acc = 0.0f;
            for (int m = c + 1; m < i; m++) acc += trow[m] * T[(size_t)m * C + c];
            T[(size_t)i * C + c] = trow[c] + acc;
        }
    }

    /* 4. U = T v_beta, W = T (k_beta * exp(gamma)), with T's unit diagonal. */
    for (int r = 0; r < Lc; r++) {
        const float eg = expf(gamma[r]);
        for (int i = 0; i < dk; i++) s->kcd[(size_t)r * dk + i] = s->kbeta[(size_t)r * dk + i] * eg;
    }
    for (int r = 0; r < Lc; r++) {
        for (int e = 0; e < dv; e++) {
            float acc = 0.0f;
            for (int c = 0; c < r; c++) acc += T[(size_t)r * C + c] * s->vbeta[(size_t)c * dv + e];
            s->U[(size_t)r * dv + e] = acc + s->vbeta[(size_t)r * dv + e];
        }
        for (int i = 0; i < dk; i++) {
            float acc = 0.0f;
            for (int c = 0; c < r; c++) acc += T[(size_t)r * C + c] * s->kcd[(size_t)c * dk + i];
            s->W[(size_t)r * dk + i] = acc + s->kcd[(size_t)r * dk + i];
        }
    }

    /* 5. Vn = U - W S  (S = the state entering this chunk). */
    for (int r = 0; r < Lc; r++) {
        for (int e = 0; e < dv; e++) {
            float ws = 0.0f;
            for (int i = 0; i < dk; i++) ws += s->W[(size_t)r * dk + i] * Sj[(size_t)i * dv + e];
            s->Vn[(size_t)r * dv + e] = s->U[(size_t)r * dv + e] - ws;
        }
    }

    /* 6. O[r] = (q_r exp(gamma_r)) S + sum_{c<=r} (q_r . k_c) exp(gamma_r - gamma_c) Vn[c]. */
    for (int r = 0; r < Lc; r++) {
        const float *qr = QROW(r);
        const float eg = expf(gamma[r]);
        float *orow = o + ((size_t)(c0 + r) * nv + j) * dv;
        /* intra-chunk weights, reusing trow as [r+1] */
        for (int c = 0; c <= r; c++)
            trow[c] = qc_ref_dn_dot(qr, KROW(c), dk) * DECAY(r, c);
        for (int e = 0; e < dv; e++) {
            float inter = 0.0f;
            for (int i = 0; i < dk; i++) inter += (qr[i] * eg) * Sj[(size_t)i * dv + e];
            float intra = 0.0f;
            for (int c = 0; c <= r; c++) intra += trow[c] * s->Vn[(size_t)c * dv + e];
            orow[e] = inter + intra;
        }
    }

    /* 7. S = exp(gamma_last) S + sum_c (k_c exp(gamma_last - gamma_c)) Vn[c]^T. Each element
     *    depends only on its own old value, so the update is done in place. */
    const float glast = gamma[Lc - 1];
    const float elast = expf(glast);
    for (int c = 0; c < Lc; c++) trow[c] = DECAY(Lc - 1, c);
    for (int i = 0; i < dk; i++) {
        for (int e = 0; e < dv; e++) {
            float acc = 0.0f;
            for (int c = 0; c < Lc; c++) acc += (KROW(c)[i] * trow[c]) * s->Vn[(size_t)c * dv + e];
            Sj[(size_t)i * dv + e] = Sj[(size_t)i * dv + e] * elast + acc;
        }
    }
#undef DECAY
#undef QROW
#undef KROW
#undef VROW
}

void qc_ref_dn_chunked(const qc_ref_dn_dims *d, int n, const float *q, const float *k,
                       const float *v, const float *g, const float *beta, float *S, float *o,
                       int chunk_size, qc_ref_dn_scratch *s) {
    QC_ASSERT(chunk_size >= 1);
    const int C = chunk_size < n ? chunk_size : n; /* effective chunk (see header) */
    QC_ASSERT(C <= s->max_chunk);
    const int ratio = d->n_v_heads / d->n_k_heads;
    for (int j = 0; j < d->n_v_heads; j++) {
        const int kh = j / ratio;
        float *Sj = S + (size_t)j * d->k_dim * d->v_dim;
        for (int c0 = 0; c0 < n; c0 += C) {
            const int Lc = (n - c0) < C ? (n - c0) : C;
            dn_chunk(d, c0, Lc, j, kh, q, k, v, g, beta, Sj, o, s);
        }
    }
}
