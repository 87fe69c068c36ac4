/* test_opt_amx.c — the AMX GEMM (optimized/qc_opt_kernels_amx.c) beside naive loops written
 * here: the strip's three bf16 terms of each activation (hi = rne(x), mid = rne(x - hi),
 * lo = rne(x - hi - mid), against qc_opt_bf16_rne), the panel's VNNI transpose element by
 * element, every tile element against a double-precision sum of the exact products (odd sizes:
 * k, row and token tails), how close that is to the unsplit fp32 product, and the tiling
 * invariance the backend's thread invariance rests on (an element computed alone has the bits
 * it has in a full 32 x 32 tile). Needs AMX-BF16 and the OS's permission: elsewhere it checks
 * that the table is refused (NULL) and says the GEMM was not run. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_model.h"
#include "../optimized/qc_opt_kernels.h"
#include "support/qc_test_pair_gemm.h"

static unsigned rng = 4242u;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static float bf16_f(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* the three terms of x, naive */
static void split3(float x, uint16_t t[3]) {
    float r = x;
    for (int i = 0; i < 3; i++) {
        t[i] = qc_opt_bf16_rne(r);
        r = r - bf16_f(t[i]);
    }
}

enum { ROWS = 45, K = 96 + 17, NT = 37 }; /* k tail inside the last 32-step, row and token tails */

static int kp32(int k) { return (k + 31) / 32 * 32; }

START_TEST(amx_refused_or_picked) {
    const qc_opt_bf16dot *a = qc_opt_amx_pick();
    if (!qc_opt_cpu_has_amx()) {
        ck_assert_ptr_null(a);
        printf("test_opt_amx: no AMX-BF16 (or no OS permission): GEMM not checked\n");
        return;
    }
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(a->x_terms, 3);
    ck_assert_int_eq(a->kstep, 32);
    ck_assert_int_le(a->mr, 2 * QC_OPT_MR_MAX); /* panel: mr x Kp / 2 uint32 <= Kp x MR_MAX */
}
END_TEST

START_TEST(gemm_matches_naive_and_tiling) {
    const qc_opt_bf16dot *a = qc_opt_amx_pick();
    if (!a) return;
    const int MR = a->mr, NR = a->nr, Kp = kp32(K);
    const size_t strip_words = (size_t)Kp / 2 * NR * a->x_terms;
    uint16_t *w = malloc((size_t)ROWS * K * 2);
    float *x = malloc((size_t)NT * K * 4);
    for (int i = 0; i < ROWS * K; i++) w[i] = qc_opt_bf16_rne(frand());
    for (int i = 0; i < NT * K; i++) x[i] = frand() * 3.0f * (i % 7 == 0 ? 1e-3f : 1.0f);
    const int ns = (NT + NR - 1) / NR;
    uint32_t *strip = aligned_alloc(64, (size_t)ns * strip_words * 4);
    uint32_t *panel = aligned_alloc(64, (size_t)Kp / 2 * MR * 4);
    float *y = malloc((size_t)NT * ROWS * 4);
    for (int s = 0; s < ns; s++) {
        const int cnt = NT - s * NR < NR ? NT - s * NR : NR;
        a->pack_x(strip + (size_t)s * strip_words, x + (size_t)s * NR * K, K, K, cnt);
    }
    /* strip [Kp/32][term][token half][16 tokens][16 pairs]; zeros past K and the last token */
    for (int s = 0; s < ns; s++)
        for (int ks = 0; ks < Kp / 32; ks++)
            for (int t = 0; t < NR; t++)
                for (int p = 0; p < 16; p++)
                    for (int term = 0; term < 3; term++) {
                        const int tok = s * NR + t;
                        uint32_t want = 0;
                        for (int h = 0; h < 2; h++) {
                            const int k = 32 * ks + 2 * p + h;
                            if (tok < NT && k < K) {
                                uint16_t tt[3];
                                split3(x[(size_t)tok * K + k], tt);
                                want |= (uint32_t)tt[term] << (16 * h);
                            }
                        }
                        const size_t at = (size_t)s * strip_words + (size_t)ks * 1536 +
                                          (size_t)(2 * term + t / 16) * 256 + (t % 16) * 16 + p;
                        ck_assert_msg(strip[at] == want, "strip s%d ks%d t%d p%d term%d: %08x != %08x",
                                      s, ks, t, p, term, strip[at], want);
                    }
    for (int r0 = 0; r0 < ROWS; r0 += MR) {
        const int mr = ROWS - r0 < MR ? ROWS - r0 : MR;
        a->pack_w(panel, w + (size_t)r0 * K, K, mr);
        /* panel [Kp/32][row half][16 pairs][16 rows] */
        for (int ks = 0; ks < Kp / 32; ks++)
            for (int r = 0; r < MR; r++)
                for (int p = 0; p < 16; p++) {
                    uint32_t want = 0;
                    for (int h = 0; h < 2; h++) {
                        const int k = 32 * ks + 2 * p + h;
                        if (r < mr && k < K) want |= (uint32_t)w[(size_t)(r0 + r) * K + k] << (16 * h);
                    }
                    const size_t at = (size_t)ks * 512 + (size_t)(r / 16) * 256 + p * 16 + r % 16;
                    ck_assert_msg(panel[at] == want, "panel r%d ks%d p%d", r, ks, p);
                }
        a->begin();
        for (int s = 0; s < ns; s++) {
            const int cnt = NT - s * NR < NR ? NT - s * NR : NR;
            a->gemm_tile(panel, strip + (size_t)s * strip_words, Kp, y + (size_t)s * NR * ROWS + r0,
                         ROWS, mr, cnt);
        }
        a->end();
    }
    /* every element: the double sum of the exact products of the three terms, within fp32
     * accumulation; and within fp32 accuracy of the unsplit product */
    double worst = 0;
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < ROWS; r++) {
            double ref = 0, exact = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double wk = bf16_f(w[(size_t)r * K + k]);
                uint16_t tt[3];
                split3(x[(size_t)t * K + k], tt);
                ref += wk * bf16_f(tt[0]) + wk * bf16_f(tt[1]) + wk * bf16_f(tt[2]);
                exact += wk * (double)x[(size_t)t * K + k];
                mag += fabs(wk * x[(size_t)t * K + k]);
            }
            const double got = y[(size_t)t * ROWS + r];
            ck_assert_msg(fabs(got - ref) <= 3 * 6e-8 * mag * 3 + 1e-30, "y[%d,%d] = %.9g, want %.9g",
                          t, r, got, ref);
            ck_assert_msg(fabs(got - exact) <= 1e-6 * mag, "y[%d,%d] = %.9g, fp64 %.9g", t, r, got,
                          exact);
            if (fabs(got - exact) / mag > worst) worst = fabs(got - exact) / mag;
        }
    printf("test_opt_amx: worst |y - fp64| / sum|w x| = %.3g\n", worst);
    /* an element's bits do not depend on its tile */
    const int picks[4][2] = {{0, 0}, {ROWS - 1, NT - 1}, {13, 31}, {40, 33}};
    qc_test_pair_gemm_alone(a, w, (size_t)K * 2, x, K, Kp, strip_words, panel, y, ROWS, picks, 4);
    free(w); free(x); free(strip); free(panel); free(y);
}
END_TEST

/* Q8_0 weights: the panel holds each block's int8 values as bf16 and the rows' scales; every
 * element is the double sum over blocks of d * (q . (hi + mid + lo)) within fp32 rounding, and
 * within fp32 accuracy of the reference's sum of (d q) x */
enum { QROWS = 37, QK = 96, QNT = 33 };

START_TEST(q8_matches_naive) {
    const qc_opt_bf16dot *a = qc_opt_amx_q8_pick();
    if (!qc_opt_cpu_has_amx()) {
        ck_assert_ptr_null(a);
        return;
    }
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(a->wdtype, QC_Q8_0);
    const int MR = a->mr, NR = a->nr, nb = QK / 32;
    const size_t rb = (size_t)nb * QC_Q8_0_BLOCK_BYTES;
    const size_t strip_words = (size_t)QK / 2 * NR * a->x_terms;
    unsigned char *w = malloc((size_t)QROWS * rb);
    float *wf = malloc((size_t)QROWS * QK * 4); /* d * q, as the reference widens them */
    for (int r = 0; r < QROWS; r++)
        for (int b = 0; b < nb; b++) {
            unsigned char *blk = w + (size_t)r * rb + (size_t)b * QC_Q8_0_BLOCK_BYTES;
            const float d = (0.5f + 0.5f * frand()) / 64.0f;
            const uint16_t hd = qc_f32_to_f16(d);
            memcpy(blk, &hd, 2);
            for (int i = 0; i < 32; i++) {
                const int q = (int)lrintf(frand() * 127.0f);
                blk[2 + i] = (unsigned char)(signed char)q;
                wf[(size_t)r * QK + 32 * b + i] = qc_f16_to_f32(hd) * (float)q;
            }
        }
    float *x = malloc((size_t)QNT * QK * 4);
    for (int i = 0; i < QNT * QK; i++) x[i] = frand() * 2.0f;
    const int ns = (QNT + NR - 1) / NR;
    uint32_t *strip = aligned_alloc(64, (size_t)ns * strip_words * 4);
    uint32_t *panel = aligned_alloc(64, (size_t)QK * QC_OPT_MR_MAX * 4);
    float *y = malloc((size_t)QNT * QROWS * 4);
    for (int s = 0; s < ns; s++) {
        const int cnt = QNT - s * NR < NR ? QNT - s * NR : NR;
        a->pack_x(strip + (size_t)s * strip_words, x + (size_t)s * NR * QK, QK, QK, cnt);
    }
    for (int r0 = 0; r0 < QROWS; r0 += MR) {
        const int mr = QROWS - r0 < MR ? QROWS - r0 : MR;
        a->pack_w(panel, w + (size_t)r0 * rb, QK, mr);
        for (int b = 0; b < nb; b++) /* the scales after the block's two B tiles */
            for (int r = 0; r < MR; r++) {
                const float *d = (const float *)(const void *)(panel + (size_t)b * 544 + 512);
                uint16_t hd = 0;
                if (r < mr) memcpy(&hd, w + (size_t)(r0 + r) * rb + (size_t)b * QC_Q8_0_BLOCK_BYTES, 2);
                ck_assert_msg(d[r] == (r < mr ? qc_f16_to_f32(hd) : 0.0f), "scale r%d b%d", r, b);
            }
        a->begin();
        for (int s = 0; s < ns; s++) {
            const int cnt = QNT - s * NR < NR ? QNT - s * NR : NR;
            a->gemm_tile(panel, strip + (size_t)s * strip_words, QK, y + (size_t)s * NR * QROWS + r0,
                         QROWS, mr, cnt);
        }
        a->end();
    }
    for (int t = 0; t < QNT; t++)
        for (int r = 0; r < QROWS; r++) {
            double ref = 0, exact = 0, mag = 0;
            for (int b = 0; b < nb; b++) {
                const unsigned char *blk = w + (size_t)r * rb + (size_t)b * QC_Q8_0_BLOCK_BYTES;
                uint16_t hd;
                memcpy(&hd, blk, 2);
                double part = 0;
                for (int i = 0; i < 32; i++) {
                    uint16_t tt[3];
                    split3(x[(size_t)t * QK + 32 * b + i], tt);
                    const double q = (double)(signed char)blk[2 + i];
                    part += q * bf16_f(tt[0]) + q * bf16_f(tt[1]) + q * bf16_f(tt[2]);
                }
                ref += (double)qc_f16_to_f32(hd) * part;
            }
            for (int k = 0; k < QK; k++) {
                exact += (double)wf[(size_t)r * QK + k] * x[(size_t)t * QK + k];
                mag += fabs((double)wf[(size_t)r * QK + k] * x[(size_t)t * QK + k]);
            }
            const double got = y[(size_t)t * QROWS + r];
            ck_assert_msg(fabs(got - ref) <= 1e-6 * mag + 1e-30, "q8 y[%d,%d] = %.9g, want %.9g", t, r,
                          got, ref);
            ck_assert_msg(fabs(got - exact) <= 1e-6 * mag, "q8 y[%d,%d] = %.9g, fp64 %.9g", t, r, got,
                          exact);
        }
    free(w); free(wf); free(x); free(strip); free(panel); free(y);
}
END_TEST

int main(void) {
    Suite *s = suite_create("opt_amx");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, amx_refused_or_picked);
    tcase_add_test(tc, gemm_matches_naive_and_tiling);
    tcase_add_test(tc, q8_matches_naive);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
