/* test_ref_blocks.c — each reference block against small independently derived values:
 * numbers worked out by hand, or the same quantity computed here in float64 by a different
 * formulation (complex rotation for RoPE, closed-form 2-element softmax, explicit index
 * formulas for the causal conv, ...).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../reference/qc_ref_blocks.h"
#include "qc/qc_model.h"

/* ---------------------------------------------------------------------------------------- */
/* helpers                                                                                  */
/* ---------------------------------------------------------------------------------------- */

static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s * 2654435761ull + 1; }
static double urand(void) { /* [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 2685821657736338717ull;
    return (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
static void fill(float *p, int n, double scale) {
    for (int i = 0; i < n; i++) p[i] = (float)(scale * urand());
}

/* An F32 2-D tensor view over data. */
static qc_tensor t2(const float *data, int rows, int cols) {
    qc_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = QC_F32; t.ndim = 2; t.shape[0] = rows; t.shape[1] = cols; t.data = data;
    return t;
}

/* y = W x in float64 for W [out, in]. */
static void dmatvec(double *y, const float *W, const double *x, int out, int in) {
    for (int r = 0; r < out; r++) {
        double a = 0;
        for (int c = 0; c < in; c++) a += (double)W[r * in + c] * x[c];
        y[r] = a;
    }
}
static double dsigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

#define TOL 1e-5

/* ---------------------------------------------------------------------------------------- */
/* scalar helpers                                                                           */
/* ---------------------------------------------------------------------------------------- */

START_TEST(scalar_functions) {
    ck_assert_float_eq_tol(qc_ref_sigmoid(0.0f), 0.5f, 1e-7f);
    ck_assert_float_eq_tol(qc_ref_sigmoid(2.0f), 0.8807970779778823f, 1e-7f);
    ck_assert_float_eq_tol(qc_ref_silu(1.0f), 0.7310585786300049f, 1e-7f);
    ck_assert_float_eq_tol(qc_ref_silu(-3.0f), -0.14227761953270035f, 1e-7f);
    ck_assert_float_eq_tol(qc_ref_softplus(0.0f), 0.6931471805599453f, 1e-7f); /* ln 2 */
    ck_assert_float_eq_tol(qc_ref_softplus(1.0f), 1.3132616875182228f, 1e-6f);
    ck_assert_float_eq(qc_ref_softplus(25.0f), 25.0f);  /* linear above 20 */
    ck_assert_float_eq(qc_ref_softplus(20.5f), 20.5f);
    /* far negative: log1p keeps the tiny value (log(1 + e^-30) ~ 9.357623e-14) */
    ck_assert(fabs(qc_ref_softplus(-30.0f) - 9.357622968840175e-14) < 1e-18);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* weights: row widening from F32 (aligned / unaligned), BF16, F16                          */
/* ---------------------------------------------------------------------------------------- */

START_TEST(weight_rows_all_dtypes) {
    float scratch[4];
    /* BF16: 1.5 = 0x3FC0, -2 = 0xC000, 0.15625 = 0x3E20 ; row 1 of a [2,3] tensor */
    const uint16_t bf[6] = {0, 0, 0, 0x3FC0, 0xC000, 0x3E20};
    qc_tensor tb = {QC_BF16, 2, {2, 3, 0, 0}, bf};
    const float *r = qc_ref_weight_row(&tb, 1, 3, scratch);
    ck_assert_float_eq(r[0], 1.5f); ck_assert_float_eq(r[1], -2.0f); ck_assert_float_eq(r[2], 0.15625f);
    /* F16: 1.5 = 0x3E00, -0.5 = 0xB800, smallest subnormal 0x0001 = 2^-24 */
    const uint16_t hf[3] = {0x3E00, 0xB800, 0x0001};
    qc_tensor th = {QC_F16, 2, {1, 3, 0, 0}, hf};
    r = qc_ref_weight_row(&th, 0, 3, scratch);
    ck_assert_float_eq(r[0], 1.5f); ck_assert_float_eq(r[1], -0.5f);
    ck_assert_float_eq(r[2], ldexpf(1.0f, -24));
    /* F32 at an unaligned address: copied */
    unsigned char raw[4 * 4 + 1];
    const float vals[4] = {1.25f, -3.0f, 7.0f, 0.5f};
    memcpy(raw + 1, vals, sizeof vals);
    qc_tensor tf = {QC_F32, 2, {2, 2, 0, 0}, raw + 1};
    r = qc_ref_weight_row(&tf, 1, 2, scratch);
    ck_assert_float_eq(r[0], 7.0f); ck_assert_float_eq(r[1], 0.5f);
    /* F32 aligned: used in place */
    qc_tensor ta = {QC_F32, 2, {2, 2, 0, 0}, vals};
    ck_assert_ptr_eq(qc_ref_weight_row(&ta, 1, 2, scratch), vals + 2);
}
END_TEST

/* y = x W^T by hand: W = [[1,2,3],[4,5,6]], x = [[1,0,-1],[2,1,0]] -> [[-2,-2],[4,13]] */
START_TEST(matmul_by_hand) {
    const float W[6] = {1, 2, 3, 4, 5, 6}, x[6] = {1, 0, -1, 2, 1, 0};
    float y[4], row[3];
    qc_tensor tw = t2(W, 2, 3);
    qc_ref_matmul(y, x, 2, 3, 2, &tw, row);
    ck_assert_float_eq(y[0], -2.0f); ck_assert_float_eq(y[1], -2.0f);
    ck_assert_float_eq(y[2], 4.0f); ck_assert_float_eq(y[3], 13.0f);
}
END_TEST

START_TEST(embedding_gather) {
    const float E[8] = {0, 1, 10, 11, 20, 21, 30, 31};
    qc_tensor te = t2(E, 4, 2);
    const int32_t tok[3] = {3, 0, 2};
    float h[6], row[2];
    qc_ref_embedding(h, tok, 3, 2, &te, row);
    const float want[6] = {30, 31, 0, 1, 20, 21};
    for (int i = 0; i < 6; i++) ck_assert_float_eq(h[i], want[i]);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* norms                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/* x = [1,2,3,4]: mean(x^2) = 7.5; y = x / sqrt(7.5 + 1e-6) * (1 + w), w = [0, .5, -.5, 1]. */
START_TEST(rmsnorm_zero_centred) {
    const float x[4] = {1, 2, 3, 4}, w[4] = {0, 0.5f, -0.5f, 1};
    float y[4];
    qc_ref_rmsnorm_1p(y, x, 1, 4, w, 1e-6f);
    const double inv = 1.0 / sqrt(7.5 + 1e-6);
    const double want[4] = {1 * inv, 2 * inv * 1.5, 3 * inv * 0.5, 4 * inv * 2};
    for (int i = 0; i < 4; i++) ck_assert(fabs(y[i] - want[i]) < 1e-6);
    /* zero weights are the identity scaling (the +1), not zero output */
    const float w0[4] = {0, 0, 0, 0};
    qc_ref_rmsnorm_1p(y, x, 1, 4, w0, 1e-6f);
    ck_assert(fabs(y[3] - 4 * inv) < 1e-6);
    /* two rows are normalised independently */
    const float x2[4] = {3, 4, 0, 2};
    float y2[4];
    qc_ref_rmsnorm_1p(y2, x2, 2, 2, w0, 0.0f);
    ck_assert(fabs(y2[0] - 3 / sqrt(12.5)) < 1e-6 && fabs(y2[3] - 2 / sqrt(2.0)) < 1e-6);
}
END_TEST

/* gated norm: weight used as-is (NO +1), times silu(z). o = [3, -4]: mean = 12.5. */
START_TEST(rmsnorm_gated_no_offset) {
    const float o[2] = {3, -4}, z[2] = {1, -2}, w[2] = {2, 0};
    float y[2];
    qc_ref_rmsnorm_gated(y, o, z, 2, w, 1e-6f);
    const double inv = 1.0 / sqrt(12.5 + 1e-6);
    const double silu1 = 1.0 / (1.0 + exp(-1.0));
    ck_assert(fabs(y[0] - 2 * 3 * inv * silu1) < 1e-6);
    ck_assert_float_eq(y[1], 0.0f); /* w = 0 kills the channel: no +1 */
}
END_TEST

START_TEST(l2norm_fixed_eps) {
    float x[2] = {3, 4};
    qc_ref_l2norm(x, 2);
    ck_assert(fabs(x[0] - 3 / sqrt(25 + 1e-6)) < 1e-7 && fabs(x[1] - 4 / sqrt(25 + 1e-6)) < 1e-7);
    float zz[3] = {0, 0, 0}; /* eps keeps a zero vector finite */
    qc_ref_l2norm(zz, 3);
    ck_assert(zz[0] == 0.0f && isfinite(zz[1]));
    float tiny[1] = {1e-3f}; /* fixed eps 1e-6 is visible: 1e-3 / sqrt(1e-6 + 1e-6) */
    qc_ref_l2norm(tiny, 1);
    ck_assert(fabs(tiny[0] - 1e-3 / sqrt(2e-6)) < 1e-5);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* RoPE                                                                                     */
/* ---------------------------------------------------------------------------------------- */

/* Rotate-half on the first rd dims == multiplying the complex number x[i] + i x[i+rd/2] by
 * e^{i pos theta^(-2i/rd)}; dims rd.. pass through. */
START_TEST(rope_is_complex_rotation) {
    const int hd = 12, rd = 8, half = 4;
    const double theta = 1e4;
    float inv[4];
    qc_ref_rope_inv_freq(inv, rd, theta);
    for (int i = 0; i < half; i++) ck_assert(fabs(inv[i] - pow(theta, -2.0 * i / rd)) < 1e-6 * pow(theta, -2.0 * i / rd));
    rng_seed(3);
    const int positions[3] = {0, 1, 37};
    for (int pi = 0; pi < 3; pi++) {
        float x[12], x0[12];
        fill(x, hd, 1.0);
        memcpy(x0, x, sizeof x);
        qc_ref_rope(x, rd, inv, positions[pi]);
        for (int i = 0; i < half; i++) {
            double a = positions[pi] * pow(theta, -2.0 * i / rd);
            double re = x0[i] * cos(a) - x0[i + half] * sin(a);
            double im = x0[i] * sin(a) + x0[i + half] * cos(a);
            ck_assert(fabs(x[i] - re) < 2e-5 && fabs(x[i + half] - im) < 2e-5);
        }
        for (int i = rd; i < hd; i++) ck_assert_float_eq(x[i], x0[i]);
    }
    /* the pairing is (i, i + rd/2), not adjacent: a vector with only x[0] = 1 at pos 1 moves
     * into x[half], never into x[1] */
    float e0[12] = {1};
    qc_ref_rope(e0, rd, inv, 1);
    ck_assert(fabs(e0[0] - cos(1.0)) < 1e-6 && fabs(e0[half] - sin(1.0)) < 1e-6);
    ck_assert_float_eq(e0[1], 0.0f);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* MLP                                                                                      */
/* ---------------------------------------------------------------------------------------- */

/* H = 2, I = 2, identity gate/up, down = [[1,1],[0,2]]; x = [1, -2]:
 * h = silu(x) * x = [silu(1), -2 silu(-2)]; out = [h0 + h1, 2 h1]. */
START_TEST(mlp_by_hand) {
    const float Id[4] = {1, 0, 0, 1}, D[4] = {1, 1, 0, 2}, x[2] = {1, -2};
    qc_tensor g = t2(Id, 2, 2), u = t2(Id, 2, 2), d = t2(D, 2, 2);
    float out[2], gb[2], ub[2], row[2];
    qc_ref_mlp(out, x, 1, 2, 2, &g, &u, &d, gb, ub, row);
    const double h0 = 1.0 / (1 + exp(-1.0)), h1 = -2.0 * (-2.0 / (1 + exp(2.0)));
    ck_assert(fabs(out[0] - (h0 + h1)) < 1e-6 && fabs(out[1] - 2 * h1) < 1e-6);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* causal conv                                                                              */
/* ---------------------------------------------------------------------------------------- */

/* C = 2 channels, K = 4 taps, state columns s0..s3 (oldest first), n = 2 new columns.
 * y[t, c] = silu( sum_j w[c,j] * seq[c][t + 1 + j] ) with seq = [s0 s1 s2 s3 x0 x1]; the
 * state becomes [s2 s3 x0 x1]. Also n = 1 (decode) and n = 6 > K. */
START_TEST(causal_conv_explicit) {
    const int C = 2, K = 4;
    const float w[8] = {0.1f, -0.2f, 0.3f, 0.4f, 1.0f, 0.0f, -1.0f, 2.0f};
    for (int n = 1; n <= 6; n += (n == 1 ? 1 : 4)) {
        float state[8] = {1, 2, 3, 4, -1, -2, -3, -4};
        float seq[2][10];
        for (int c = 0; c < C; c++)
            for (int m = 0; m < K; m++) seq[c][m] = state[c * K + m];
        float x[12], y[12];
        rng_seed(9 + n);
        fill(x, n * C, 2.0);
        for (int t = 0; t < n; t++)
            for (int c = 0; c < C; c++) seq[c][K + t] = x[t * C + c];
        qc_ref_causal_conv(y, x, n, C, K, w, state);
        for (int t = 0; t < n; t++)
            for (int c = 0; c < C; c++) {
                /* output of token t looks at the K most recent columns ending at token t */
                double a = 0;
                for (int j = 0; j < K; j++) a += (double)w[c * K + j] * seq[c][t + 1 + j];
                const double want = a * dsigmoid(a);
                ck_assert(fabs(y[t * C + c] - want) < 1e-5);
            }
        for (int c = 0; c < C; c++)
            for (int m = 0; m < K; m++) ck_assert_float_eq(state[c * K + m], seq[c][n + m]);
    }
    /* tap order: w[c, K-1] multiplies the current token. Zero state, n = 1, x = 1:
     * channel 0 = silu(0.4), channel 1 = silu(2). */
    float st0[8] = {0}, x1[2] = {1, 1}, y1[2];
    qc_ref_causal_conv(y1, x1, 1, C, K, w, st0);
    ck_assert(fabs(y1[0] - 0.4 * dsigmoid(0.4)) < 1e-6 && fabs(y1[1] - 2 * dsigmoid(2.0)) < 1e-6);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* gated full attention                                                                     */
/* ---------------------------------------------------------------------------------------- */

/* H = 6, nh = 4, nkv = 2 (query heads 0,1 -> kv head 0; 2,3 -> kv head 1), hd = 4, rd = 2.
 * Two tokens at positions 0, 1 (start_pos 0), then a third token at position 2 in a second
 * call. Checked against float64: per-head projections, (1+w) norms, RoPE as a complex
 * rotation, the 2-element softmax of token 1 as [1 - s, s] with s = sigmoid(score1 - score0),
 * the 3-element one by explicit exp / sum, the sigmoid gate, o_proj. Also the caches and
 * unused slots. */
enum { AH = 6, ANH = 4, ANKV = 2, AHD = 4, AMAX = 5 };
typedef struct {
    float Wq[2 * ANH * AHD * AH], Wk[ANKV * AHD * AH], Wv[ANKV * AHD * AH], Wo[AH * ANH * AHD];
    float qn[AHD], kn[AHD];
} attn_w;

static void d_norm_rope(double *v, const float *w, int pos) {
    double ss = 0;
    for (int i = 0; i < 4; i++) ss += v[i] * v[i];
    double inv = 1.0 / sqrt(ss / 4 + 1e-6);
    for (int i = 0; i < 4; i++) v[i] = v[i] * inv * (1.0 + w[i]);
    double a = pos * 1.0; /* rd = 2: one frequency, theta^0 = 1; pair (0, 1) */
    double re = v[0] * cos(a) - v[1] * sin(a), im = v[0] * sin(a) + v[1] * cos(a);
    v[0] = re; v[1] = im;
}

START_TEST(gated_attention_vs_double) {
    attn_w W;
    rng_seed(21);
    fill(W.Wq, 2 * ANH * AHD * AH, 0.5); fill(W.Wk, ANKV * AHD * AH, 0.5);
    fill(W.Wv, ANKV * AHD * AH, 0.5); fill(W.Wo, AH * ANH * AHD, 0.5);
    fill(W.qn, 4, 0.3); fill(W.kn, 4, 0.3);
    qc_tensor tq = t2(W.Wq, 2 * ANH * AHD, AH), tk = t2(W.Wk, ANKV * AHD, AH),
              tv = t2(W.Wv, ANKV * AHD, AH), to = t2(W.Wo, AH, ANH * AHD);
    float inv[1];
    qc_ref_rope_inv_freq(inv, 2, 1e4);
    qc_ref_attn_layer L = {AH, ANH, ANKV, AHD, 2, 1e-6f, W.qn, W.kn, inv, &tq, &tk, &tv, &to};
    float qg[3 * 2 * ANH * AHD], q[3 * ANH * AHD], k[3 * ANKV * AHD], v[3 * ANKV * AHD];
    float attn[3 * ANH * AHD], row[ANH * AHD];
    qc_ref_attn_scratch s = {qg, q, k, v, attn, row};
    float kc[ANKV * AMAX * AHD] = {0}, vc[ANKV * AMAX * AHD] = {0};
    float x[3 * AH], out[3 * AH];
    fill(x, 3 * AH, 1.0);
    qc_ref_gated_attention(out, x, 2, 0, &L, kc, vc, AMAX, &s);
    qc_ref_gated_attention(out + 2 * AH, x + 2 * AH, 1, 2, &L, kc, vc, AMAX, &s);

    /* float64 model */
    double K[3][ANKV * AHD], Vv[3][ANKV * AHD];
    for (int t = 0; t < 3; t++) {
        double xt[AH];
        for (int i = 0; i < AH; i++) xt[i] = x[t * AH + i];
        dmatvec(K[t], W.Wk, xt, ANKV * AHD, AH);
        dmatvec(Vv[t], W.Wv, xt, ANKV * AHD, AH);
        for (int g = 0; g < ANKV; g++) {
            d_norm_rope(K[t] + g * AHD, W.kn, t);
            for (int i = 0; i < AHD; i++) { /* cache [nkv, max_ctx, hd] */
                ck_assert(fabs(kc[(g * AMAX + t) * AHD + i] - K[t][g * AHD + i]) < TOL);
                ck_assert(fabs(vc[(g * AMAX + t) * AHD + i] - Vv[t][g * AHD + i]) < TOL);
            }
        }
    }
    for (int g = 0; g < ANKV; g++) /* unused slots (positions 3, 4) stay zero */
        for (int i = 3 * AHD; i < AMAX * AHD; i++)
            ck_assert(kc[g * AMAX * AHD + i] == 0.0f && vc[g * AMAX * AHD + i] == 0.0f);
    for (int t = 0; t < 3; t++) {
        double xt[AH], qgd[2 * ANH * AHD], att[ANH * AHD];
        for (int i = 0; i < AH; i++) xt[i] = x[t * AH + i];
        dmatvec(qgd, W.Wq, xt, 2 * ANH * AHD, AH);
        for (int h = 0; h < ANH; h++) {
            const int g = h / (ANH / ANKV); /* repeat_interleave */
            double qh[AHD];
            for (int i = 0; i < AHD; i++) qh[i] = qgd[h * 2 * AHD + i]; /* [query | gate] */
            d_norm_rope(qh, W.qn, t);
            double sc[3];
            for (int p = 0; p <= t; p++) {
                sc[p] = 0;
                for (int i = 0; i < AHD; i++) sc[p] += qh[i] * K[p][g * AHD + i];
                sc[p] *= 0.5; /* 1/sqrt(4) */
            }
            double pr[3];
            if (t == 0) {
                pr[0] = 1;
            } else if (t == 1) {
                double s1 = dsigmoid(sc[1] - sc[0]);
                pr[0] = 1 - s1; pr[1] = s1;
            } else {
                double z = exp(sc[0]) + exp(sc[1]) + exp(sc[2]);
                for (int p = 0; p < 3; p++) pr[p] = exp(sc[p]) / z;
            }
            for (int i = 0; i < AHD; i++) {
                double a = 0;
                for (int p = 0; p <= t; p++) a += pr[p] * Vv[p][g * AHD + i];
                att[h * AHD + i] = a * dsigmoid(qgd[h * 2 * AHD + AHD + i]);
            }
        }
        double o[AH];
        dmatvec(o, W.Wo, att, AH, ANH * AHD);
        for (int i = 0; i < AH; i++)
            if (fabs(out[t * AH + i] - o[i]) > TOL)
                ck_abort_msg("attention t=%d i=%d: %g vs %g", t, i, out[t * AH + i], o[i]);
    }
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* Gated DeltaNet layer: one token from a non-zero state, against float64 written out        */
/* ---------------------------------------------------------------------------------------- */

/* H = 4, nk = 1, nv = 2 (both value heads use key head 0), dk = 2, dv = 3, K = 3,
 * C = 2 + 2 + 6 = 10. */
START_TEST(deltanet_layer_one_token_vs_double) {
    enum { H = 4, nk = 1, nv = 2, dk = 2, dv = 3, K = 3, C = 10, VD = 6 };
    float Wqkv[C * H], Wz[VD * H], Wb[nv * H], Wa[nv * H], Wo[H * VD];
    float conv_w[C * K], A_log[nv], dt_bias[nv], norm_w[dv];
    rng_seed(77);
    fill(Wqkv, C * H, 0.7); fill(Wz, VD * H, 0.7); fill(Wb, nv * H, 0.7); fill(Wa, nv * H, 0.7);
    fill(Wo, H * VD, 0.7); fill(conv_w, C * K, 0.6); fill(dt_bias, nv, 0.5);
    A_log[0] = logf(0.5f); A_log[1] = logf(4.0f);
    for (int i = 0; i < dv; i++) norm_w[i] = (float)(1.0 + 0.2 * urand());
    qc_tensor tqkv = t2(Wqkv, C, H), tz = t2(Wz, VD, H), tb = t2(Wb, nv, H), ta = t2(Wa, nv, H),
              to = t2(Wo, H, VD);
    qc_ref_dn_layer L = {H, {nk, nv, dk, dv}, K, 1e-6f, conv_w, A_log, dt_bias, norm_w,
                         &tqkv, &tz, &tb, &ta, &to};
    float conv_state[C * K], S[nv * dk * dv], x[H];
    fill(conv_state, C * K, 1.0); fill(S, nv * dk * dv, 0.5); fill(x, H, 1.0);
    float conv_state0[C * K], S0[nv * dk * dv];
    memcpy(conv_state0, conv_state, sizeof conv_state);
    memcpy(S0, S, sizeof S);
    /* scratch */
    float mixed[C], conv[C], q[2], k[2], v[VD], z[VD], b[nv], a[nv], o[VD], row[VD];
    qc_ref_dn_layer_scratch s = {mixed, conv, q, k, v, z, b, a, o, row, {0}};
    float out[H];
    qc_ref_gated_deltanet(out, x, 1, &L, conv_state, S, 1, 64, &s);

    /* float64 */
    double xd[H], mix[C], zz[VD], bb[nv], aa[nv], y[C];
    for (int i = 0; i < H; i++) xd[i] = x[i];
    dmatvec(mix, Wqkv, xd, C, H); dmatvec(zz, Wz, xd, VD, H);
    dmatvec(bb, Wb, xd, nv, H); dmatvec(aa, Wa, xd, nv, H);
    for (int c = 0; c < C; c++) { /* window: state columns 1, 2 then the new column */
        double acc = conv_w[c * K + 0] * conv_state0[c * K + 1] + conv_w[c * K + 1] * conv_state0[c * K + 2] +
                     conv_w[c * K + 2] * mix[c];
        y[c] = acc * dsigmoid(acc);
        ck_assert_float_eq(conv_state[c * K + 0], conv_state0[c * K + 1]);
        ck_assert_float_eq(conv_state[c * K + 1], conv_state0[c * K + 2]);
        ck_assert(fabs(conv_state[c * K + 2] - mix[c]) < TOL);
    }
    double qd[2] = {y[0], y[1]}, kd[2] = {y[2], y[3]};
    double nq = sqrt(qd[0] * qd[0] + qd[1] * qd[1] + 1e-6), nkk = sqrt(kd[0] * kd[0] + kd[1] * kd[1] + 1e-6);
    for (int i = 0; i < 2; i++) { qd[i] = qd[i] / nq / sqrt(2.0); kd[i] /= nkk; }
    double att[VD];
    for (int j = 0; j < nv; j++) {
        double beta = dsigmoid(bb[j]);
        double sp = log(1 + exp(aa[j] + dt_bias[j]));
        double g = -exp((double)A_log[j]) * sp, dec = exp(g);
        double Sj[2][3], oj[3];
        for (int i = 0; i < 2; i++)
            for (int e = 0; e < 3; e++) Sj[i][e] = dec * S0[j * 6 + i * 3 + e];
        for (int e = 0; e < 3; e++) {
            double pred = Sj[0][e] * kd[0] + Sj[1][e] * kd[1];
            double d = beta * (y[4 + j * 3 + e] - pred);
            Sj[0][e] += kd[0] * d; Sj[1][e] += kd[1] * d;
            oj[e] = Sj[0][e] * qd[0] + Sj[1][e] * qd[1];
        }
        for (int i = 0; i < 2; i++)
            for (int e = 0; e < 3; e++) ck_assert(fabs(S[j * 6 + i * 3 + e] - Sj[i][e]) < TOL);
        double ms = (oj[0] * oj[0] + oj[1] * oj[1] + oj[2] * oj[2]) / 3;
        for (int e = 0; e < 3; e++) {
            double zv = zz[j * 3 + e];
            att[j * 3 + e] = norm_w[e] * (oj[e] / sqrt(ms + 1e-6)) * (zv * dsigmoid(zv));
        }
    }
    double od[H];
    dmatvec(od, Wo, att, H, VD);
    for (int i = 0; i < H; i++)
        if (fabs(out[i] - od[i]) > TOL) ck_abort_msg("deltanet out[%d] %g vs %g", i, out[i], od[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ref_blocks");
    TCase *tc = tcase_create("blocks");
    tcase_add_test(tc, scalar_functions);
    tcase_add_test(tc, weight_rows_all_dtypes);
    tcase_add_test(tc, matmul_by_hand);
    tcase_add_test(tc, embedding_gather);
    tcase_add_test(tc, rmsnorm_zero_centred);
    tcase_add_test(tc, rmsnorm_gated_no_offset);
    tcase_add_test(tc, l2norm_fixed_eps);
    tcase_add_test(tc, rope_is_complex_rotation);
    tcase_add_test(tc, mlp_by_hand);
    tcase_add_test(tc, causal_conv_explicit);
    tcase_add_test(tc, gated_attention_vs_double);
    tcase_add_test(tc, deltanet_layer_one_token_vs_double);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
