/* test_opt_kernels.c — every kernel of every ISA table this CPU runs, against naive loops
 * written here (llm.c style), on odd sizes (SIMD tails) and all weight dtypes.
 *
 * Exactness checks: the FMA tables' gemm_tile / gemm_nn must equal a sequential fmaf() chain
 * over k bit for bit (and the scalar table a multiply-then-add chain): that is the property
 * that makes the backend's results independent of tiling and thread count. matvec must give
 * the same bits for a row whether it is computed alone or in a block. Everything else is
 * compared with a double-precision naive loop. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_model.h"
#include "../optimized/qc_opt_kernels.h"

static const char *const isa_names[3] = {"scalar", "avx2", "avx512"};

static unsigned rng_state = 12345u;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* storage of n random weights in dtype dt, and their exact fp32 values */
static void *make_w(qc_dtype dt, size_t n, float *exact) {
    void *w = malloc(n * qc_dtype_size(dt) + 64);
    for (size_t i = 0; i < n; i++) {
        float v = frand();
        if (dt == QC_F32) {
            ((float *)w)[i] = v;
            exact[i] = v;
        } else if (dt == QC_BF16) {
            uint16_t h = qc_f32_to_bf16(v);
            ((uint16_t *)w)[i] = h;
            exact[i] = qc_bf16_to_f32(h);
        } else {
            uint16_t h = qc_f32_to_f16(v);
            ((uint16_t *)w)[i] = h;
            exact[i] = qc_f16_to_f32(h);
        }
    }
    return w;
}

static float *rnd(size_t n) {
    float *p = malloc(n * sizeof(float) + 64);
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

/* the chain the table promises: fmaf for FMA ISAs, multiply-then-add for scalar */
static float chain(int fma, float acc, float a, float b) {
    if (fma) return fmaf(a, b, acc);
    volatile float p = a * b;
    return acc + p;
}

static int fma_isa(const qc_opt_kernels *k) { return strcmp(k->isa, "scalar") != 0; }

/* ===================================================================================== */
/* GEMM packing + micro tile                                                              */
/* ===================================================================================== */

START_TEST(gemm_tile_is_the_fma_chain) {
    const qc_opt_kernels *k = qc_opt_kernels_by_name(isa_names[_i]);
    if (!k) return; /* ISA not on this CPU */
    const int Ks[] = {1, 7, 16, 17, 33, 100, 129};
    const qc_dtype dts[] = {QC_F32, QC_BF16, QC_F16};
    const int MR = k->gemm_mr, NR = k->gemm_nr;
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (int di = 0; di < 3; di++) {
            const int K = Ks[ki], Kp = qc_opt_kpad(K), rows = MR + 3, ntok = NR + 5;
            float *wx = malloc((size_t)rows * K * sizeof(float));
            void *W = make_w(dts[di], (size_t)rows * K, wx);
            float *x = rnd((size_t)ntok * K);
            float *panel = aligned_alloc(64, (size_t)Kp * QC_OPT_MR_MAX * 4);
            float *strip = aligned_alloc(64, (size_t)Kp * QC_OPT_NR_MAX * 4);
            float *y = malloc((size_t)ntok * rows * sizeof(float));
            for (size_t i = 0; i < (size_t)ntok * rows; i++) y[i] = NAN;
            /* two panels (the second partial) x two strips (the second partial) */
            for (int r0 = 0; r0 < rows; r0 += MR) {
                int mr = rows - r0 < MR ? rows - r0 : MR;
                k->pack_w(panel, (const char *)W + (size_t)r0 * K * qc_dtype_size(dts[di]), dts[di], K, mr);
                for (int t0 = 0; t0 < ntok; t0 += NR) {
                    int nt = ntok - t0 < NR ? ntok - t0 : NR;
                    k->pack_x(strip, x + (size_t)t0 * K, K, K, nt);
                    k->gemm_tile(panel, strip, Kp, y + (size_t)t0 * rows + r0, rows, mr, nt);
                }
            }
            for (int t = 0; t < ntok; t++)
                for (int r = 0; r < rows; r++) {
                    float acc = 0.0f;
                    for (int kk = 0; kk < K; kk++) acc = chain(fma_isa(k), acc, wx[(size_t)r * K + kk], x[(size_t)t * K + kk]);
                    float got = y[(size_t)t * rows + r];
                    ck_assert_msg(memcmp(&got, &acc, 4) == 0,
                                  "%s gemm_tile %s K %d: y[%d,%d] = %.9g, chain %.9g", k->isa,
                                  qc_dtype_str(dts[di]), K, t, r, got, acc);
                }
            free(wx); free(W); free(x); free(panel); free(strip); free(y);
        }
}
END_TEST

/* ===================================================================================== */
/* Matrix-vector                                                                          */
/* ===================================================================================== */

START_TEST(matvec_matches_naive_and_is_grouping_invariant) {
    const qc_opt_kernels *k = qc_opt_kernels_by_name(isa_names[_i]);
    if (!k) return;
    const int Ks[] = {1, 5, 16, 31, 32, 47, 64, 100, 1030};
    const qc_dtype dts[] = {QC_F32, QC_BF16, QC_F16};
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (int di = 0; di < 3; di++) {
            const int K = Ks[ki], rows = 11, n = 3;
            float *wx = malloc((size_t)rows * K * sizeof(float));
            void *W = make_w(dts[di], (size_t)rows * K, wx);
            float *x = rnd((size_t)n * K);
            float y[3 * 11], y1[3 * 11];
            k->matvec(y, rows, W, dts[di], rows, K, x, K, n);
            /* each row alone (and the tokens one by one) gives the same bits */
            for (int r = 0; r < rows; r++)
                for (int t = 0; t < n; t++)
                    k->matvec(y1 + t * rows + r, rows, (const char *)W + (size_t)r * K * qc_dtype_size(dts[di]),
                              dts[di], 1, K, x + (size_t)t * K, K, 1);
            ck_assert_msg(!memcmp(y, y1, sizeof y), "%s matvec K %d %s: row grouping changed bits", k->isa, K,
                          qc_dtype_str(dts[di]));
            for (int t = 0; t < n; t++)
                for (int r = 0; r < rows; r++) {
                    double ref = 0, mag = 0;
                    for (int kk = 0; kk < K; kk++) {
                        ref += (double)wx[(size_t)r * K + kk] * x[(size_t)t * K + kk];
                        mag += fabs((double)wx[(size_t)r * K + kk] * x[(size_t)t * K + kk]);
                    }
                    ck_assert_msg(fabs(y[t * rows + r] - ref) <= 1e-6 * mag + 1e-30,
                                  "%s matvec K %d %s: %.9g vs %.9g", k->isa, K, qc_dtype_str(dts[di]),
                                  y[t * rows + r], ref);
                }
            free(wx); free(W); free(x);
        }
}
END_TEST

/* ===================================================================================== */
/* Small dense algebra                                                                    */
/* ===================================================================================== */

START_TEST(gemm_nn_is_the_fma_chain) {
    const qc_opt_kernels *k = qc_opt_kernels_by_name(isa_names[_i]);
    if (!k) return;
    const int sizes[][3] = {{1, 1, 1}, {1, 128, 5}, {7, 13, 9}, {6, 64, 128}, {13, 70, 33}, {64, 128, 64}, {3, 200, 17}};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (int acc = 0; acc < 2; acc++) {
            const int M = sizes[si][0], N = sizes[si][1], K = sizes[si][2];
            const long lda = K + 3, ldb = N + 5, ldc = N + 2;
            float *A = rnd((size_t)M * lda), *B = rnd((size_t)K * ldb), *C = rnd((size_t)M * ldc);
            float *C0 = malloc((size_t)M * ldc * sizeof(float));
            memcpy(C0, C, (size_t)M * ldc * sizeof(float));
            k->gemm_nn(M, N, K, A, lda, B, ldb, C, ldc, acc);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < ldc; j++) {
                    float want;
                    if (j >= N) want = C0[i * ldc + j]; /* untouched */
                    else {
                        want = acc ? C0[i * ldc + j] : 0.0f;
                        for (int kk = 0; kk < K; kk++) want = chain(fma_isa(k), want, A[i * lda + kk], B[kk * ldb + j]);
                    }
                    ck_assert_msg(!memcmp(&want, &C[i * ldc + j], 4), "%s gemm_nn %dx%dx%d acc %d: C[%d,%d] %.9g != %.9g",
                                  k->isa, M, N, K, acc, i, j, C[i * ldc + j], want);
                }
            free(A); free(B); free(C); free(C0);
        }
}
END_TEST

START_TEST(vector_ops_match_naive) {
    const qc_opt_kernels *k = qc_opt_kernels_by_name(isa_names[_i]);
    if (!k) return;
    const int ns[] = {1, 3, 8, 15, 16, 17, 31, 33, 64, 100, 257};
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        const int n = ns[ni];
        float *a = rnd(n), *b = rnd(n), *y = rnd(n), *y0 = malloc(n * sizeof(float));
        double d = 0, mag = 0, ss = 0;
        for (int i = 0; i < n; i++) {
            d += (double)a[i] * b[i];
            mag += fabs((double)a[i] * b[i]);
            ss += (double)a[i] * a[i];
        }
        ck_assert_msg(fabs(k->dot(a, b, n) - d) <= 1e-6 * mag, "%s dot n %d", k->isa, n);
        ck_assert_msg(fabs(k->sumsq(a, n) - ss) <= 1e-6 * ss, "%s sumsq n %d", k->isa, n);
        memcpy(y0, y, n * sizeof(float));
        k->axpy(y, 0.37f, a, n);
        for (int i = 0; i < n; i++) ck_assert(fabs(y[i] - (y0[i] + 0.37 * a[i])) <= 1e-6);
        memcpy(y0, y, n * sizeof(float));
        k->scale(y, -1.5f, n);
        for (int i = 0; i < n; i++) ck_assert(y[i] == -1.5f * y0[i]);
        k->mul(y, a, b, n);
        for (int i = 0; i < n; i++) ck_assert(y[i] == a[i] * b[i]);
        free(a); free(b); free(y); free(y0);
    }
}
END_TEST

/* ===================================================================================== */
/* Elementwise transcendental                                                             */
/* ===================================================================================== */

START_TEST(transcendental_match_libm) {
    const qc_opt_kernels *k = qc_opt_kernels_by_name(isa_names[_i]);
    if (!k) return;
    enum { N = 1003 };
    float x[N], y[N], u[N], g[N];
    for (int i = 0; i < N; i++) {
        x[i] = -90.0f + 180.0f * (float)i / (N - 1); /* covers underflow / overflow edges */
        u[i] = frand();
    }
    x[5] = 0.0f; x[6] = -0.0f; x[7] = 1e-30f; x[8] = -1e-30f;
    k->vexp(y, x, N);
    for (int i = 0; i < N; i++) {
        double e = exp((double)x[i]);
        if (e > 2.4e38) continue; /* near FLT_MAX: inf or a clamp, either is fine */
        ck_assert_msg(fabs(y[i] - e) <= 4e-7 * e + 1.5e-38, "%s exp(%g) = %.9g, want %.9g", k->isa, x[i], y[i], e);
    }
    k->silu(y, x, N);
    for (int i = 0; i < N; i++) {
        double s = x[i] / (1.0 + exp(-(double)x[i]));
        ck_assert_msg(fabs(y[i] - s) <= 1e-6 * fabs(s) + 1e-30, "%s silu(%g) = %.9g, want %.9g", k->isa, x[i], y[i], s);
    }
    memcpy(g, x, sizeof g);
    k->silu_mul(g, u, N);
    for (int i = 0; i < N; i++) {
        double s = x[i] / (1.0 + exp(-(double)x[i])) * u[i];
        ck_assert_msg(fabs(g[i] - s) <= 1e-6 * fabs(s) + 1e-30, "%s silu_mul", k->isa);
    }
    memcpy(g, u, sizeof g);
    k->sigmoid_mul(g, x, N);
    for (int i = 0; i < N; i++) {
        double s = u[i] / (1.0 + exp(-(double)x[i]));
        ck_assert_msg(fabs(g[i] - s) <= 1e-6 * fabs(s) + 1e-30, "%s sigmoid_mul(%g)", k->isa, x[i]);
    }
    /* NaN propagates (a NaN state must not be laundered into numbers) */
    float nx[3] = {NAN, 1.0f, NAN}, ny[3];
    k->vexp(ny, nx, 3);
    ck_assert(isnan(ny[0]) && isnan(ny[2]) && !isnan(ny[1]));
    k->silu(ny, nx, 3);
    ck_assert(isnan(ny[0]) && isnan(ny[2]));
}
END_TEST

/* ===================================================================================== */
/* Probes and dispatch                                                                    */
/* ===================================================================================== */

/* The attention inner loops (qc_opt_attention.c) where a table has them: attn_scores is the
 * table's dot per key, attn_pv the chain of its axpy calls, and the two-query kernels give
 * each query exactly what the one-query kernels give it -- bit for bit, every key count of a
 * block, head dims with SIMD tails (7, 33: one and two masked halves; 130: a narrow last
 * 128-column chunk of attn_pv) */
START_TEST(attention_kernels_are_dot_and_axpy) {
    const qc_opt_kernels *k = qc_opt_kernels_by_name(isa_names[_i]);
    if (!k || !k->attn_scores) return;
    ck_assert_msg(!k->attn_scores2 == !k->attn_pv2, "%s: one two-query kernel without the other", k->isa);
    const int hds[] = {7, 16, 33, 64, 130, 256};
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
        for (int nb = 1; nb <= 16; nb++) {
            const int hd = hds[hi];
            float *q0 = rnd((size_t)hd), *q1 = rnd((size_t)hd), *Kb = rnd((size_t)nb * hd);
            float *p0 = rnd((size_t)nb), *p1 = rnd((size_t)nb), *init = rnd((size_t)hd);
            float s0[16], s1[16], w0[16], w1[16];
            k->attn_scores(s0, q0, Kb, hd, nb, hd, 0.0625f);
            k->attn_scores(s1, q1, Kb, hd, nb, hd, 0.0625f);
            for (int i = 0; i < nb; i++) {
                const float want = k->dot(q0, Kb + (size_t)i * hd, hd) * 0.0625f;
                ck_assert_msg(!memcmp(&s0[i], &want, 4), "%s attn_scores hd %d nb %d key %d: %.9g != dot %.9g",
                              k->isa, hd, nb, i, s0[i], want);
            }
            float *o0 = malloc((size_t)hd * 4), *o1 = malloc((size_t)hd * 4), *ref = malloc((size_t)hd * 4);
            float *a0 = malloc((size_t)hd * 4), *a1 = malloc((size_t)hd * 4);
            memcpy(o0, init, (size_t)hd * 4);
            memcpy(ref, init, (size_t)hd * 4);
            k->attn_pv(o0, p0, Kb, hd, nb, hd);
            for (int i = 0; i < nb; i++) k->axpy(ref, p0[i], Kb + (size_t)i * hd, hd);
            ck_assert_msg(!memcmp(o0, ref, (size_t)hd * 4), "%s attn_pv hd %d nb %d != axpy chain", k->isa, hd, nb);
            if (k->attn_scores2) {
                k->attn_scores2(w0, w1, q0, q1, Kb, hd, nb, hd, 0.0625f);
                ck_assert_msg(!memcmp(w0, s0, (size_t)nb * 4) && !memcmp(w1, s1, (size_t)nb * 4),
                              "%s attn_scores2 hd %d nb %d != attn_scores", k->isa, hd, nb);
                memcpy(a0, init, (size_t)hd * 4);
                memcpy(a1, init, (size_t)hd * 4);
                memcpy(o1, init, (size_t)hd * 4);
                k->attn_pv(o1, p1, Kb, hd, nb, hd);
                k->attn_pv2(a0, a1, p0, p1, Kb, hd, nb, hd);
                ck_assert_msg(!memcmp(a0, o0, (size_t)hd * 4) && !memcmp(a1, o1, (size_t)hd * 4),
                              "%s attn_pv2 hd %d nb %d != attn_pv", k->isa, hd, nb);
            }
            free(q0); free(q1); free(Kb); free(p0); free(p1); free(init); free(o0); free(o1); free(ref);
            free(a0); free(a1);
        }
}
END_TEST

START_TEST(probes_and_pick) {
    const qc_opt_kernels *k = qc_opt_kernels_by_name(isa_names[_i]);
    if (!k) return;
    enum { N = 4099 };
    unsigned char *buf = malloc(N);
    for (int i = 0; i < N; i++) buf[i] = (unsigned char)(i * 37 + 11);
    for (int off = 0; off < 5; off++)
        ck_assert_uint_eq(k->stream_read(buf + off, N - off - 3), qc_opt_kernels_scalar.stream_read(buf + off, N - off - 3));
    free(buf);
    ck_assert(isfinite(k->fma_burn(1000, 1.0f)));
    ck_assert_int_le(k->gemm_mr, QC_OPT_MR_MAX);
    ck_assert_int_le(k->gemm_nr, QC_OPT_NR_MAX);
    /* QC_ISA forces this table */
    setenv("QC_ISA", isa_names[_i], 1);
    ck_assert_ptr_eq(qc_opt_kernels_pick(), k);
    unsetenv("QC_ISA");
    ck_assert_ptr_null(qc_opt_kernels_by_name("sse9"));
}
END_TEST

Suite *opt_kernels_suite(void) {
    Suite *s = suite_create("opt_kernels");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, gemm_tile_is_the_fma_chain, 0, 3);
    tcase_add_loop_test(tc, matvec_matches_naive_and_is_grouping_invariant, 0, 3);
    tcase_add_loop_test(tc, gemm_nn_is_the_fma_chain, 0, 3);
    tcase_add_loop_test(tc, vector_ops_match_naive, 0, 3);
    tcase_add_loop_test(tc, transcendental_match_libm, 0, 3);
    tcase_add_loop_test(tc, attention_kernels_are_dot_and_axpy, 0, 3);
    tcase_add_loop_test(tc, probes_and_pick, 0, 3);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(opt_kernels_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
