/* qc_ref_blocks.c — the scalar reference blocks (see qc_ref_blocks.h for the contract of each).
 *
 * Plain fp32, sums left to right, libm float transcendentals, -ffp-contract=off.
 */
#include "qc_ref_blocks.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "qc/qc_status.h"

/* ===================================================================================== */
/* Scalar helpers                                                                         */
/* ===================================================================================== */

float qc_ref_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

float qc_ref_silu(float x) { return x / (1.0f + expf(-x)); }

float qc_ref_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

const float *qc_ref_weight_row(const qc_tensor *w, size_t row, int cols, float *scratch) {
    const size_t off = row * (size_t)cols;
    switch (w->dtype) {
    case QC_F32: {
        const float *p = (const float *)w->data + off;
        if (((uintptr_t)p % _Alignof(float)) == 0) return p;
        memcpy(scratch, (const char *)w->data + off * sizeof(float), (size_t)cols * sizeof(float));
        return scratch;
    }
    case QC_BF16: {
        const unsigned char *b = (const unsigned char *)w->data + off * 2;
        for (int i = 0; i < cols; i++) {
            uint16_t h;
            memcpy(&h, b + (size_t)i * 2, 2);
            scratch[i] = qc_bf16_to_f32(h);
        }
        return scratch;
    }
    case QC_F16: {
        const unsigned char *b = (const unsigned char *)w->data + off * 2;
        for (int i = 0; i < cols; i++) {
            uint16_t h;
            memcpy(&h, b + (size_t)i * 2, 2);
            scratch[i] = qc_f16_to_f32(h);
        }
        return scratch;
    }
    case QC_Q8_0: {
        /* llama.cpp blocks of 32 (f16 d, int8 q[32]); a row starts on a block (cols % 32 == 0
         * for a matrix row; a whole-tensor widen starts at row 0). d * q is exact. */
        QC_ASSERT(off % QC_Q8_0_BLOCK == 0);
        const unsigned char *b = (const unsigned char *)w->data +
                                 off / QC_Q8_0_BLOCK * QC_Q8_0_BLOCK_BYTES;
        for (int i = 0; i < cols; i++) {
            const unsigned char *blk = b + (size_t)(i / QC_Q8_0_BLOCK) * QC_Q8_0_BLOCK_BYTES;
            uint16_t h;
            memcpy(&h, blk, 2);
            scratch[i] = qc_f16_to_f32(h) * (float)(int8_t)blk[2 + i % QC_Q8_0_BLOCK];
        }
        return scratch;
    }
    case QC_I8: break; /* never a model view (the loader pairs it into Q8_0) */
    }
    QC_ASSERT(!"unknown dtype");
    return NULL;
}

void qc_ref_tensor_widen(const qc_tensor *t, float *dst) {
    size_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= (size_t)t->shape[d];
    const float *p = qc_ref_weight_row(t, 0, (int)numel, dst);
    if (p != dst) memcpy(dst, p, numel * sizeof(float));
}

/* ===================================================================================== */
/* Linear algebra                                                                         */
/* ===================================================================================== */

float qc_ref_dot(const float *a, const float *b, int len) {
    float acc = 0.0f;
    for (int i = 0; i < len; i++) acc += a[i] * b[i];
    return acc;
}

void qc_ref_matmul(float *y, const float *x, int n, int in, int out, const qc_tensor *W,
                   float *row_scratch) {
    for (int r = 0; r < out; r++) {
        const float *w = qc_ref_weight_row(W, (size_t)r, in, row_scratch);
        for (int t = 0; t < n; t++) y[(size_t)t * out + r] = qc_ref_dot(x + (size_t)t * in, w, in);
    }
}

/* ===================================================================================== */
/* Embedding, norms, RoPE                                                                 */
/* ===================================================================================== */

void qc_ref_embedding(float *h, const int32_t *tokens, int n, int dim, const qc_tensor *embed,
                      float *row_scratch) {
    for (int t = 0; t < n; t++) {
        const float *row = qc_ref_weight_row(embed, (size_t)tokens[t], dim, row_scratch);
        memcpy(h + (size_t)t * dim, row, (size_t)dim * sizeof(float));
    }
}

void qc_ref_rmsnorm_1p(float *y, const float *x, int rows, int dim, const float *w, float eps) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim;
        float *yr = y + (size_t)r * dim;
        float ss = 0.0f;
        for (int i = 0; i < dim; i++) ss += xr[i] * xr[i];
        const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int i = 0; i < dim; i++) yr[i] = (xr[i] * inv) * (1.0f + w[i]);
    }
}

void qc_ref_rmsnorm_gated(float *y, const float *o, const float *z, int dim, const float *w,
                          float eps) {
    float ss = 0.0f;
    for (int i = 0; i < dim; i++) ss += o[i] * o[i];
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = 0; i < dim; i++) y[i] = (w[i] * (o[i] * inv)) * qc_ref_silu(z[i]);
}

void qc_ref_l2norm(float *x, int dim) {
    float ss = 0.0f;
    for (int i = 0; i < dim; i++) ss += x[i] * x[i];
    const float inv = 1.0f / sqrtf(ss + 1e-6f);
    for (int i = 0; i < dim; i++) x[i] = x[i] * inv;
}

void qc_ref_rope_inv_freq(float *inv_freq, int rotary_dim, double theta) {
    for (int i = 0; i < rotary_dim / 2; i++) {
        const float expo = (float)(2 * i) / (float)rotary_dim;
        inv_freq[i] = 1.0f / powf((float)theta, expo);
    }
}

void qc_ref_rope(float *x, int rotary_dim, const float *inv_freq, int pos) {
    const int half = rotary_dim / 2;
    for (int i = 0; i < half; i++) {
        const float angle = (float)pos * inv_freq[i];
        const float c = cosf(angle), s = sinf(angle);
        const float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c + (-x2) * s;
        x[i + half] = x2 * c + x1 * s;
    }
}

/* ===================================================================================== */
/* SwiGLU MLP                                                                             */
/* ===================================================================================== */

void qc_ref_mlp(float *out, const float *x, int n, int H, int I, const qc_tensor *w_gate,
                const qc_tensor *w_up, const qc_tensor *w_down, float *gate_buf, float *up_buf,
                float *row_scratch) {
    qc_ref_matmul(gate_buf, x, n, H, I, w_gate, row_scratch);
    qc_ref_matmul(up_buf, x, n, H, I, w_up, row_scratch);
    for (size_t i = 0; i < (size_t)n * I; i++) gate_buf[i] = qc_ref_silu(gate_buf[i]) * up_buf[i];
    qc_ref_matmul(out, gate_buf, n, I, H, w_down, row_scratch);
}

/* ===================================================================================== */
/* Gated full attention                                                                   */
/* ===================================================================================== */

/* Scaled score of query q against the cached key at position p of one kv head. */
static float attn_score(const float *q, const float *kc, int p, int hd, float scale) {
    return qc_ref_dot(q, kc + (size_t)p * hd, hd) * scale;
}

void qc_ref_gated_attention(float *out, const float *x, int n, int start_pos,
                            const qc_ref_attn_layer *L, float *k_cache, float *v_cache,
                            int max_ctx, qc_ref_attn_scratch *s) {
    const int H = L->hidden, nh = L->n_heads, nkv = L->n_kv_heads, hd = L->head_dim;
    const int qdim = nh * hd, kvdim = nkv * hd;
    const int group = nh / nkv; /* query heads per kv head */
    const float scale = (float)(1.0 / sqrt((double)hd));

    /* 1. projections */
    qc_ref_matmul(s->qg, x, n, H, 2 * qdim, L->q_proj, s->row);
    qc_ref_matmul(s->k, x, n, H, kvdim, L->k_proj, s->row);
    qc_ref_matmul(s->v, x, n, H, kvdim, L->v_proj, s->row);

    for (int t = 0; t < n; t++) {
        const int pos = start_pos + t;
        /* 2. query head h = rows [h*2hd, h*2hd+hd) of q_proj; q-norm, then RoPE */
        for (int h = 0; h < nh; h++) {
            float *qh = s->q + (size_t)t * qdim + (size_t)h * hd;
            memcpy(qh, s->qg + (size_t)t * 2 * qdim + (size_t)h * 2 * hd, (size_t)hd * sizeof(float));
            qc_ref_rmsnorm_1p(qh, qh, 1, hd, L->q_norm, L->eps);
            qc_ref_rope(qh, L->rotary_dim, L->inv_freq, pos);
        }
        /* 3. k-norm + RoPE on keys; write keys and raw values into the caches */
        for (int g = 0; g < nkv; g++) {
            float *kh = s->k + (size_t)t * kvdim + (size_t)g * hd;
            const float *vh = s->v + (size_t)t * kvdim + (size_t)g * hd;
            qc_ref_rmsnorm_1p(kh, kh, 1, hd, L->k_norm, L->eps);
            qc_ref_rope(kh, L->rotary_dim, L->inv_freq, pos);
            memcpy(k_cache + ((size_t)g * max_ctx + pos) * hd, kh, (size_t)hd * sizeof(float));
            memcpy(v_cache + ((size_t)g * max_ctx + pos) * hd, vh, (size_t)hd * sizeof(float));
        }
    }

    /* 4. causal softmax attention over cache positions 0..pos (the scores are recomputed in
     *    each pass instead of stored: same values, no buffer sized by the context). */
    for (int t = 0; t < n; t++) {
        const int pos = start_pos + t;
        for (int h = 0; h < nh; h++) {
            const int g = h / group; /* GQA: repeat_interleave */
            const float *qh = s->q + (size_t)t * qdim + (size_t)h * hd;
            const float *kc = k_cache + (size_t)g * max_ctx * hd;
            const float *vc = v_cache + (size_t)g * max_ctx * hd;
            float *ah = s->attn + (size_t)t * qdim + (size_t)h * hd;

            float mx = -INFINITY;
            for (int p = 0; p <= pos; p++) {
                const float sc = attn_score(qh, kc, p, hd, scale);
                if (sc > mx) mx = sc;
            }
            float sum = 0.0f;
            for (int p = 0; p <= pos; p++) sum += expf(attn_score(qh, kc, p, hd, scale) - mx);
            for (int d = 0; d < hd; d++) ah[d] = 0.0f;
            for (int p = 0; p <= pos; p++) {
                const float prob = expf(attn_score(qh, kc, p, hd, scale) - mx) / sum;
                for (int d = 0; d < hd; d++) ah[d] += prob * vc[(size_t)p * hd + d];
            }
            /* 5. output gate: attn * sigmoid(gate), gate = rows [h*2hd+hd, h*2hd+2hd) */
            const float *gate = s->qg + (size_t)t * 2 * qdim + (size_t)h * 2 * hd + hd;
            for (int d = 0; d < hd; d++) ah[d] = ah[d] * qc_ref_sigmoid(gate[d]);
        }
    }

    /* 6. o_proj */
    qc_ref_matmul(out, s->attn, n, qdim, H, L->o_proj, s->row);
}

/* ===================================================================================== */
/* Gated DeltaNet                                                                         */
/* ===================================================================================== */

void qc_ref_causal_conv(float *y, const float *x, int n, int C, int K, const float *w,
                        float *conv_state) {
    /* E[c, m] for m in 0 .. K+n-1: columns 0..K-1 are the conv state, then the n inputs. */
#define E(c, m) ((m) < K ? conv_state[(size_t)(c) * K + (m)] : x[(size_t)((m) - K) * C + (c)])
    for (int t = 0; t < n; t++) {
        for (int c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int j = 0; j < K; j++) acc += w[(size_t)c * K + j] * E(c, t + 1 + j);
            y[(size_t)t * C + c] = qc_ref_silu(acc);
        }
    }
    /* conv_state <- E[:, n .. n+K-1] (increasing m reads only columns not yet overwritten) */
    for (int c = 0; c < C; c++)
        for (int m = 0; m < K; m++) conv_state[(size_t)c * K + m] = E(c, n + m);
#undef E
}

void qc_ref_gated_deltanet(float *out, const float *x, int n, const qc_ref_dn_layer *L,
                           float *conv_state, float *recurrent_state, int use_chunked,
                           int chunk_size, qc_ref_dn_layer_scratch *s) {
    const int H = L->hidden;
    const int nk = L->dims.n_k_heads, nv = L->dims.n_v_heads;
    const int dk = L->dims.k_dim, dv = L->dims.v_dim;
    const int key_dim = nk * dk, value_dim = nv * dv;
    const int C = 2 * key_dim + value_dim, K = L->conv_kernel;

    /* 1. projections */
    qc_ref_matmul(s->mixed, x, n, H, C, L->in_proj_qkv, s->row);
    qc_ref_matmul(s->z, x, n, H, value_dim, L->in_proj_z, s->row);
    qc_ref_matmul(s->b, x, n, H, nv, L->in_proj_b, s->row);
    qc_ref_matmul(s->a, x, n, H, nv, L->in_proj_a, s->row);

    /* 2. causal depthwise conv + SiLU, conv state update */
    qc_ref_causal_conv(s->conv, s->mixed, n, C, K, L->conv_w, conv_state);

    /* 3. split q | k | v (head-major); l2norm q, k per head; q *= 1/sqrt(dk) */
    const float q_scale = (float)(1.0 / sqrt((double)dk));
    for (int t = 0; t < n; t++) {
        const float *row = s->conv + (size_t)t * C;
        float *qt = s->q + (size_t)t * key_dim, *kt = s->k + (size_t)t * key_dim;
        memcpy(qt, row, (size_t)key_dim * sizeof(float));
        memcpy(kt, row + key_dim, (size_t)key_dim * sizeof(float));
        memcpy(s->v + (size_t)t * value_dim, row + 2 * key_dim, (size_t)value_dim * sizeof(float));
        for (int h = 0; h < nk; h++) {
            qc_ref_l2norm(qt + (size_t)h * dk, dk);
            qc_ref_l2norm(kt + (size_t)h * dk, dk);
        }
        for (int i = 0; i < key_dim; i++) qt[i] = qt[i] * q_scale;
    }

    /* 4. beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias) (in place in b, a) */
    for (int t = 0; t < n; t++) {
        for (int j = 0; j < nv; j++) {
            const size_t i = (size_t)t * nv + j;
            s->b[i] = qc_ref_sigmoid(s->b[i]);
            s->a[i] = -expf(L->A_log[j]) * qc_ref_softplus(s->a[i] + L->dt_bias[j]);
        }
    }

    /* 5. gated delta rule (n == 1 always by the recurrence) */
    if (n == 1 || !use_chunked)
        qc_ref_dn_recurrent(&L->dims, n, s->q, s->k, s->v, s->a, s->b, recurrent_state, s->o);
    else
        qc_ref_dn_chunked(&L->dims, n, s->q, s->k, s->v, s->a, s->b, recurrent_state, s->o,
                          chunk_size, &s->chunk);

    /* 6. gated RMSNorm per (token, value head) over dv, weight w (no +1), times silu(z) */
    for (int t = 0; t < n; t++)
        for (int j = 0; j < nv; j++) {
            const size_t off = (size_t)t * value_dim + (size_t)j * dv;
            qc_ref_rmsnorm_gated(s->o + off, s->o + off, s->z + off, dv, L->norm_w, L->eps);
        }

    /* 7. out_proj */
    qc_ref_matmul(out, s->o, n, value_dim, H, L->out_proj, s->row);
}
