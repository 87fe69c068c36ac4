/* qc_ref_deltanet.h — the gated delta rule kernels of the reference backend.
 *
 * Both kernels compute, for every value head j (key head kh = j / (nv / nk)) and token t:
 *   S   = exp(g[t,j]) * S                      S = state[j] : [dk, dv]  (row = key dim)
 *   kv  = S^T k[t,kh]                          (dv)
 *   d   = beta[t,j] * (v[t,j] - kv)            (dv)
 *   S   = S + k[t,kh] d^T
 *   o[t,j] = S^T q[t,kh]                       (uses the updated state)
 * (docs/qwen35-model.md 8.6 "Token recurrence"); the chunked kernel is its parallel form (8.7).
 * Inputs are already prepared: q and k l2-normalised, q scaled by 1/sqrt(dk), beta = sigmoid(b),
 * g = -exp(A_log) * softplus(a + dt_bias). Both start from the state passed in (the state's
 * current recurrent_state, never an implicit zero) and leave the final state in it.
 *
 * Layouts (token-major, head-major inside a token, as the projections produce them):
 *   q, k  [n, nk, dk]    v, o  [n, nv, dv]    g, beta  [n, nv]    S  [nv, dk, dv]
 */
#ifndef QC_REF_DELTANET_H
#define QC_REF_DELTANET_H

#include <stddef.h>

typedef struct {
    int n_k_heads; /* nk: q/k heads */
    int n_v_heads; /* nv: value heads, a multiple of nk */
    int k_dim;     /* dk */
    int v_dim;     /* dv */
} qc_ref_dn_dims;

typedef struct qc_ref_dn_scratch qc_ref_dn_scratch;

/* The pairwise decay exp(gamma_r - gamma_c) (c <= r) of the chunk being computed, from
 * s->gamma (or s->gamma_d when exact: see QC_REF_DN_GAMMA_EXACT). */
typedef float (*qc_ref_dn_decay_fn)(const qc_ref_dn_scratch *s, int r, int c, int exact);

/* The model's decay: expf of the difference (qc_ref_dn_scratch_init installs it). */
float qc_ref_dn_decay(const qc_ref_dn_scratch *s, int r, int c, int exact);

/* Scratch of the chunked kernel for chunks of up to max_chunk tokens (caller-owned). */
struct qc_ref_dn_scratch {
    int max_chunk;  /* capacity in tokens */
    double *gamma_d; /* [max_chunk] the same in double, for chunks whose |gamma| is large
                        (see QC_REF_DN_GAMMA_EXACT) */
    qc_ref_dn_decay_fn decay; /* qc_ref_dn_decay; a test variant replaces it through the
                                 backend's set_option (qc_ref_faults.c), never the kernel */
    float *gamma;   /* [max_chunk] cumulative log-decay inside the chunk */
    float *T;       /* [max_chunk, max_chunk] A, then the unit lower-triangular inverse */
    float *trow;    /* [max_chunk] one row of A before it is updated (forward substitution) */
    float *kbeta;   /* [max_chunk, dk] beta * k */
    float *vbeta;   /* [max_chunk, dv] beta * v */
    float *kcd;     /* [max_chunk, dk] k_beta * exp(gamma) */
    float *U;       /* [max_chunk, dv] T @ v_beta */
    float *W;       /* [max_chunk, dk] T @ (k_beta * exp(gamma)) */
    float *Vn;      /* [max_chunk, dv] U - W S ("new values") */
};

/* Above this |gamma_last| (the chunk's total log-decay) the float32 cumulative sum has lost
 * too much absolute precision for its differences gamma_r - gamma_c (an ulp of 1024 is 1.2e-4,
 * a relative error of the pairwise decays exp(gamma_r - gamma_c) that are near 1 after a huge
 * decay earlier in the chunk): the cumulative sum is then taken in double and the differences
 * rounded once. Below it (every chunk of the standard fixtures) the float path is used, so
 * their numbers are unchanged. */
#define QC_REF_DN_GAMMA_EXACT 1024.0f

/* Floats of scratch needed for chunks of up to max_chunk tokens. */
size_t qc_ref_dn_scratch_floats(const qc_ref_dn_dims *d, int max_chunk);
/* Carve the scratch views out of buf[qc_ref_dn_scratch_floats(d, max_chunk)]. */
void qc_ref_dn_scratch_init(qc_ref_dn_scratch *s, const qc_ref_dn_dims *d, int max_chunk,
                            float *buf);

/* Token recurrence over n tokens. */
void qc_ref_dn_recurrent(const qc_ref_dn_dims *d, int n, const float *q, const float *k,
                         const float *v, const float *g, const float *beta, float *S,
                         float *o);

/* Chunked algorithm (docs/qwen35-model.md 8.7) with chunks of chunk_size tokens.
 * The end padding of the last chunk is not materialised: padded tokens have k = 0, beta = 0,
 * g = 0, so their rows of A, T, U, W and Vn are exactly zero and they add exact zeros to the
 * outputs and the state; skipping them gives the same numbers. Hence the effective chunk is
 * min(chunk_size, n), which must be <= s->max_chunk (programmer error otherwise). */
void qc_ref_dn_chunked(const qc_ref_dn_dims *d, int n, const float *q, const float *k,
                       const float *v, const float *g, const float *beta, float *S, float *o,
                       int chunk_size, qc_ref_dn_scratch *s);

#endif /* QC_REF_DELTANET_H */
