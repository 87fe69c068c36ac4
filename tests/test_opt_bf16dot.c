/* test_opt_bf16dot.c — the BF16 dot-product GEMM (optimized/qc_opt_kernels_bf16dot.c) beside
 * naive loops written here: the bf16 rounding against known bit patterns, the packed strip
 * against that rounding, every tile element against a double-precision sum of the rounded
 * products (odd sizes: k, row and token tails), and the tiling invariance the backend's
 * thread invariance rests on (an element computed in a 1 x 1 tile has the bits it has in a
 * full 12 x 32 tile). The GEMM part needs AVX512_BF16: on a CPU without it only the rounding
 * is checked (and the option's refusal, test_opt_backend.c). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_model.h"
#include "../optimized/qc_opt_kernels.h"
#include "support/qc_test_pair_gemm.h"

static unsigned rng = 777u;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float bf16_f(uint16_t h) { return bits_f((uint32_t)h << 16); }

START_TEST(rounding_is_nearest_even) {
    ck_assert_uint_eq(qc_opt_bf16_rne(1.0f), 0x3F80);
    ck_assert_uint_eq(qc_opt_bf16_rne(bits_f(0x3F808000u)), 0x3F80); /* tie, even: down */
    ck_assert_uint_eq(qc_opt_bf16_rne(bits_f(0x3F818000u)), 0x3F82); /* tie, odd: up */
    ck_assert_uint_eq(qc_opt_bf16_rne(bits_f(0x3F808001u)), 0x3F81); /* above the tie */
    ck_assert_uint_eq(qc_opt_bf16_rne(bits_f(0xBF807FFFu)), 0xBF80); /* below the tie */
    ck_assert_uint_eq(qc_opt_bf16_rne(INFINITY), 0x7F80);
    ck_assert_uint_eq(qc_opt_bf16_rne(bits_f(0x7F7FFFFFu)), 0x7F80); /* FLT_MAX rounds to inf */
    const uint16_t n = qc_opt_bf16_rne(NAN);
    ck_assert((n & 0x7F80) == 0x7F80 && (n & 0x7F) != 0);
}
END_TEST

enum { ROWS = 29, K = 77, NT = 37 };

START_TEST(gemm_matches_naive_and_tiling) {
    if (!qc_opt_cpu_has_bf16dot()) {
        printf("test_opt_bf16dot: this CPU has no AVX512_BF16: GEMM not checked\n");
        return;
    }
    const qc_opt_bf16dot *bd = qc_opt_bf16dot_pick();
    ck_assert_ptr_nonnull(bd);
    const int MR = bd->mr, NR = bd->nr, Kp = qc_opt_kpad(K);
    uint16_t *w = malloc((size_t)ROWS * K * 2);
    float *x = malloc((size_t)NT * K * 4);
    for (int i = 0; i < ROWS * K; i++) w[i] = qc_opt_bf16_rne(frand());
    for (int i = 0; i < NT * K; i++) x[i] = frand() * 3.0f;
    const int ns = (NT + NR - 1) / NR;
    uint32_t *strip = aligned_alloc(64, (size_t)ns * Kp / 2 * NR * 4);
    uint32_t *panel = aligned_alloc(64, (size_t)Kp / 2 * MR * 4);
    float *y = malloc((size_t)NT * ROWS * 4);
    for (int s = 0; s < ns; s++) {
        const int cnt = NT - s * NR < NR ? NT - s * NR : NR;
        bd->pack_x(strip + (size_t)s * Kp / 2 * NR, x + (size_t)s * NR * K, K, K, cnt);
    }
    /* the strip holds the rounded pairs, zeros past K and the last token */
    for (int s = 0; s < ns; s++)
        for (int p = 0; p < Kp / 2; p++)
            for (int t = 0; t < NR; t++) {
                const int tok = s * NR + t;
                uint32_t want = 0;
                if (tok < NT)
                    for (int h = 0; h < 2; h++)
                        if (2 * p + h < K)
                            want |= (uint32_t)qc_opt_bf16_rne(x[(size_t)tok * K + 2 * p + h]) << (16 * h);
                ck_assert_uint_eq(strip[((size_t)s * Kp / 2 + p) * NR + t], want);
            }
    for (int r0 = 0; r0 < ROWS; r0 += MR) {
        const int mr = ROWS - r0 < MR ? ROWS - r0 : MR;
        bd->pack_w(panel, w + (size_t)r0 * K, K, mr);
        for (int s = 0; s < ns; s++) {
            const int cnt = NT - s * NR < NR ? NT - s * NR : NR;
            bd->gemm_tile(panel, strip + (size_t)s * Kp / 2 * NR, Kp, y + (size_t)s * NR * ROWS + r0,
                          ROWS, mr, cnt);
        }
    }
    /* every element: the double sum of the rounded products, within fp32 accumulation */
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < ROWS; r++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double a = bf16_f(w[(size_t)r * K + k]);
                const double b = bf16_f(qc_opt_bf16_rne(x[(size_t)t * K + k]));
                ref += a * b;
                mag += fabs(a * b);
            }
            const double got = y[(size_t)t * ROWS + r];
            ck_assert_msg(fabs(got - ref) <= 2e-6 * mag + 1e-30, "y[%d,%d] = %.9g, want %.9g",
                          t, r, got, ref);
        }
    /* the element's bits do not depend on the tile it is computed in */
    const int picks[4][2] = {{0, 0}, {ROWS - 1, NT - 1}, {13, 31}, {5, 33}};
    qc_test_pair_gemm_alone(bd, w, (size_t)K * 2, x, K, Kp, (size_t)Kp / 2 * NR, panel, y, ROWS,
                            picks, 4);
    free(w); free(x); free(strip); free(panel); free(y);
}
END_TEST

int main(void) {
    Suite *s = suite_create("opt_bf16dot");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, rounding_is_nearest_even);
    tcase_add_test(tc, gemm_matches_naive_and_tiling);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
