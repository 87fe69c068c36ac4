/* qc_ref_blocks.h — the scalar reference blocks of the Qwen3.5 text model, one function each.
 *
 * Everything is plain fp32 C, compiled with -ffp-contract=off: every sum runs left to right in
 * float, every transcendental is the libm float function (expf, logf, log1pf, sqrtf, powf,
 * cosf, sinf). No threads, no allocation: callers pass every buffer (the backend allocates them
 * once at create). Shapes are written [rows, cols], row-major; "n" is the number of tokens.
 *
 * Weight matrices stay in their stored dtype (qc_tensor: F32 / BF16 / F16); qc_ref_matmul
 * widens one row at a time into a caller-provided scratch row, so a 9B BF16 checkpoint is
 * never converted as a whole. Small vectors (norm weights, A_log, dt_bias, conv1d) are widened
 * once at create into owned fp32 copies and passed here as plain float arrays.
 *
 * The math is docs/qwen35-model.md, sections 4 - 9 (Hugging Face is canonical).
 */
#ifndef QC_REF_BLOCKS_H
#define QC_REF_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#include "qc/qc_model.h"
#include "qc_ref_deltanet.h"

/* ===================================================================================== */
/* Scalar helpers                                                                         */
/* ===================================================================================== */

/* 1 / (1 + exp(-x)) */
float qc_ref_sigmoid(float x);
/* x / (1 + exp(-x))  (torch's SiLU) */
float qc_ref_silu(float x);
/* torch softplus (beta 1, threshold 20): x > 20 ? x : log1p(exp(x)) */
float qc_ref_softplus(float x);

/* Widen row `row` of a 2-D (or [rows, 1, k]-shaped) weight with `cols` elements per row to
 * fp32. Returns a pointer to the fp32 row: either straight into the tensor's storage (F32 and
 * 4-byte aligned) or `scratch[cols]` after conversion / copy. */
const float *qc_ref_weight_row(const qc_tensor *w, size_t row, int cols, float *scratch);

/* All elements of a (small) tensor widened into dst[numel] (owned copies made at create). */
void qc_ref_tensor_widen(const qc_tensor *t, float *dst);

/* ===================================================================================== */
/* Linear algebra                                                                         */
/* ===================================================================================== */

/* Plain left-to-right float dot product of a[len] and b[len]. */
float qc_ref_dot(const float *a, const float *b, int len);

/* y[n, out] = x[n, in] @ W^T with W = [out, in] (a torch Linear weight, no bias).
 * For each row r of W: widen it once into row_scratch[in], then y[t, r] = dot(x[t], W[r]) for
 * t = 0..n-1. */
void qc_ref_matmul(float *y, const float *x, int n, int in, int out, const qc_tensor *W,
                   float *row_scratch);

/* ===================================================================================== */
/* Blocks                                                                                 */
/* ===================================================================================== */

/* h[t, :] = embed[tokens[t], :]  (plain row gather, no scaling). Token ids are validated by
 * the caller. */
void qc_ref_embedding(float *h, const int32_t *tokens, int n, int dim, const qc_tensor *embed,
                      float *row_scratch);

/* Zero-centred RMSNorm, over `dim` for each of `rows` rows (y may alias x):
 *   y = x * (1 / sqrt(mean(x^2) + eps)) * (1 + w)                  (all in float) */
void qc_ref_rmsnorm_1p(float *y, const float *x, int rows, int dim, const float *w, float eps);

/* Gated RMSNorm of one vector (the DeltaNet output norm, weight used as-is, NO +1):
 *   y = w * (o * (1 / sqrt(mean(o^2) + eps))) * silu(z)             (y may alias o) */
void qc_ref_rmsnorm_gated(float *y, const float *o, const float *z, int dim, const float *w,
                          float eps);

/* l2 normalisation with the fixed eps 1e-6: x = x * (1 / sqrt(sum(x^2) + 1e-6)), in place. */
void qc_ref_l2norm(float *x, int dim);

/* RoPE inverse frequencies, as Hugging Face computes them in fp32:
 *   inv_freq[i] = 1 / theta^((float)(2i) / rotary_dim),  i = 0 .. rotary_dim/2 - 1 */
void qc_ref_rope_inv_freq(float *inv_freq, int rotary_dim, double theta);

/* Rotate-half (NeoX-style) RoPE in place on the first rotary_dim dims of one head vector x;
 * dims rotary_dim.. pass through. With half = rotary_dim/2, angle a_i = (float)pos * inv_freq[i]:
 *   x'[i]        = x[i]      * cos(a_i) - x[i+half] * sin(a_i)
 *   x'[i + half] = x[i+half] * cos(a_i) + x[i]      * sin(a_i)          (pairs (i, i+half)) */
void qc_ref_rope(float *x, int rotary_dim, const float *inv_freq, int pos);

/* SwiGLU MLP: out[n, H] = down( silu(gate(x)) * up(x) ). gate_buf / up_buf are [n, I]. */
void qc_ref_mlp(float *out, const float *x, int n, int H, int I, const qc_tensor *w_gate,
                const qc_tensor *w_up, const qc_tensor *w_down, float *gate_buf, float *up_buf,
                float *row_scratch);

/* Geometry + fp32 small weights of one full-attention layer. */
typedef struct {
    int hidden;          /* H */
    int n_heads;         /* nh */
    int n_kv_heads;      /* nkv */
    int head_dim;        /* hd */
    int rotary_dim;      /* rd: first rd dims of each q/k head are rotated */
    float eps;           /* rms_norm_eps */
    const float *q_norm; /* [hd] zero-centred */
    const float *k_norm; /* [hd] zero-centred */
    const float *inv_freq; /* [rd/2] */
    const qc_tensor *q_proj, *k_proj, *v_proj, *o_proj; /* [2*nh*hd,H] [nkv*hd,H] x2 [H,nh*hd] */
} qc_ref_attn_layer;

/* Scratch for qc_ref_gated_attention, each sized for n_max tokens. */
typedef struct {
    float *qg;   /* [n_max, 2*nh*hd] q_proj output, per head [query | gate] */
    float *q;    /* [n_max, nh*hd] normed + rotated queries */
    float *k;    /* [n_max, nkv*hd] */
    float *v;    /* [n_max, nkv*hd] */
    float *attn; /* [n_max, nh*hd] attention output, then gated */
    float *row;  /* [max(H, nh*hd)] weight row scratch */
} qc_ref_attn_scratch;

/* Gated full attention over n tokens at positions start_pos.. (x = normed input [n, H]):
 * projections; q/k RMSNorm (1+w) per head; RoPE; keys / raw values written into the caches
 * ([nkv, max_ctx, hd]) at start_pos..start_pos+n-1; causal softmax attention of query t over
 * cache positions 0..start_pos+t (GQA: head h -> kv head h / (nh/nkv); scale 1/sqrt(hd));
 * attn * sigmoid(gate); o_proj into out[n, H]. */
void qc_ref_gated_attention(float *out, const float *x, int n, int start_pos,
                            const qc_ref_attn_layer *L, float *k_cache, float *v_cache,
                            int max_ctx, qc_ref_attn_scratch *s);

/* Causal depthwise conv + SiLU over [conv_state (K cols) | x columns], and the conv state
 * update. x is [n, C] (token-major projection outputs); conv_state is [C, K], oldest first;
 * w is [C, K] (w[c, K-1] hits the current token). y[n, C]:
 *   y[t, c] = silu( sum_{j=0}^{K-1} w[c, j] * E[c, t + 1 + j] ),  E = [conv_state | x^T]
 * then conv_state <- the last K columns of E (pre-activation). y must not alias x. */
void qc_ref_causal_conv(float *y, const float *x, int n, int C, int K, const float *w,
                        float *conv_state);

/* Geometry + fp32 small weights of one Gated DeltaNet layer. */
typedef struct {
    int hidden;            /* H */
    qc_ref_dn_dims dims;   /* nk, nv, dk, dv */
    int conv_kernel;       /* K */
    float eps;             /* rms_norm_eps (gated norm) */
    const float *conv_w;   /* [C, K], C = 2*nk*dk + nv*dv */
    const float *A_log;    /* [nv] */
    const float *dt_bias;  /* [nv] */
    const float *norm_w;   /* [dv] gated-norm weight, used as-is (NO +1) */
    const qc_tensor *in_proj_qkv, *in_proj_z, *in_proj_b, *in_proj_a; /* [C,H] [nv*dv,H] [nv,H] x2 */
    const qc_tensor *out_proj; /* [H, nv*dv] */
} qc_ref_dn_layer;

/* Scratch for qc_ref_gated_deltanet, each sized for n_max tokens. */
typedef struct {
    float *mixed;  /* [n_max, C] in_proj_qkv output (pre-conv) */
    float *conv;   /* [n_max, C] after conv + SiLU */
    float *q;      /* [n_max, nk*dk] */
    float *k;      /* [n_max, nk*dk] */
    float *v;      /* [n_max, nv*dv] */
    float *z;      /* [n_max, nv*dv] output gate */
    float *b;      /* [n_max, nv] beta logits, then beta */
    float *a;      /* [n_max, nv] decay logits, then g */
    float *o;      /* [n_max, nv*dv] kernel output, then gated-normed */
    float *row;    /* [max(H, nv*dv)] weight row scratch */
    qc_ref_dn_scratch chunk; /* chunked-kernel scratch */
} qc_ref_dn_layer_scratch;

/* Gated DeltaNet over n tokens (x = normed input [n, H]) into out[n, H], updating conv_state
 * [C, K] and recurrent_state [nv, dk, dv]:
 *   projections qkv/z/b/a; causal conv + SiLU (qc_ref_causal_conv); split q|k|v head-major;
 *   l2norm(q), l2norm(k) (eps 1e-6); q *= 1/sqrt(dk); beta = sigmoid(b);
 *   g = -exp(A_log) * softplus(a + dt_bias); gated delta rule (recurrent when n == 1 or
 *   use_chunked == 0, else chunked with chunk_size); per (token, value head) gated RMSNorm
 *   with weight w (no +1) times silu(z); out_proj. */
void qc_ref_gated_deltanet(float *out, const float *x, int n, const qc_ref_dn_layer *L,
                           float *conv_state, float *recurrent_state, int use_chunked,
                           int chunk_size, qc_ref_dn_layer_scratch *s);

#endif /* QC_REF_BLOCKS_H */
