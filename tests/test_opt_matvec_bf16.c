/* test_opt_matvec_bf16.c — the BF16 matrix-vector fast path (shift / mask widening against a
 * de-interleaved x, issue #16 item 3) computes exactly what the generic path computes: for
 * every ISA table this CPU runs, matvec on BF16 weights equals, bit for bit, matvec on the
 * same weights widened to F32 (widening is exact, and the F32 path is the generic loop the
 * BF16 path was derived from). Sizes cover the 64- / 32-element blocks, each tail (16 / 8
 * blocks, scalar), the real 0.8B widths (1024, 2048, 3584), a K beyond the de-interleave
 * buffer (token groups) and 1..9 tokens with a row stride larger than K.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_model.h"
#include "../optimized/qc_opt_kernels.h"

static const char *const isa_names[3] = {"scalar", "avx2", "avx512"};

static unsigned rng_state = 777u;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

START_TEST(bf16_equals_widened_f32) {
    const qc_opt_kernels *k = qc_opt_kernels_by_name(isa_names[_i]);
    if (!k) return;
    const int Ks[] = {8, 31, 32, 48, 63, 64, 80, 96, 112, 127, 129, 200, 1024, 2048, 3584, 3600,
                      5000};
    const int ns[] = {1, 2, 3, 5, 9};
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
            const int K = Ks[ki], n = ns[ni], rows = 7;
            const long ldx = K + 5, ldy = rows + 2;
            uint16_t *wb = malloc((size_t)rows * K * 2);
            float *wf = malloc((size_t)rows * K * 4);
            float *x = malloc((size_t)n * ldx * 4);
            float *yb = calloc((size_t)n * ldy, 4), *yf = calloc((size_t)n * ldy, 4);
            ck_assert(wb && wf && x && yb && yf);
            for (size_t i = 0; i < (size_t)rows * K; i++) {
                wb[i] = qc_f32_to_bf16(frand());
                wf[i] = qc_bf16_to_f32(wb[i]);
            }
            for (size_t i = 0; i < (size_t)n * ldx; i++) x[i] = frand();
            k->matvec(yb, ldy, wb, QC_BF16, rows, K, x, ldx, n);
            k->matvec(yf, ldy, wf, QC_F32, rows, K, x, ldx, n);
            for (int t = 0; t < n; t++)
                for (int r = 0; r < rows; r++) {
                    float a = yb[t * ldy + r], b = yf[t * ldy + r];
                    ck_assert_msg(memcmp(&a, &b, 4) == 0,
                                  "%s matvec K %d n %d row %d token %d: BF16 %.9g != widened F32 %.9g",
                                  k->isa, K, n, r, t, a, b);
                }
            free(wb); free(wf); free(x); free(yb); free(yf);
        }
}
END_TEST

/* the 0.8B hidden width with a large token count at the de-interleave buffer's K limit */
START_TEST(bf16_large_k_token_groups) {
    const qc_opt_kernels *k = qc_opt_kernels_by_name(isa_names[_i]);
    if (!k) return;
    const int K = 16384 + 64, n = 3, rows = 2; /* beyond the buffer: the generic path */
    const int K2 = 8192, n2 = 4;               /* two tokens per group */
    for (int pass = 0; pass < 2; pass++) {
        const int KK = pass ? K2 : K, nn = pass ? n2 : n;
        uint16_t *wb = malloc((size_t)rows * KK * 2);
        float *wf = malloc((size_t)rows * KK * 4), *x = malloc((size_t)nn * KK * 4);
        float yb[8], yf[8];
        for (size_t i = 0; i < (size_t)rows * KK; i++) {
            wb[i] = qc_f32_to_bf16(frand());
            wf[i] = qc_bf16_to_f32(wb[i]);
        }
        for (size_t i = 0; i < (size_t)nn * KK; i++) x[i] = frand();
        k->matvec(yb, rows, wb, QC_BF16, rows, KK, x, KK, nn);
        k->matvec(yf, rows, wf, QC_F32, rows, KK, x, KK, nn);
        ck_assert_msg(memcmp(yb, yf, (size_t)rows * nn * 4) == 0, "%s matvec K %d n %d: BF16 != F32",
                      k->isa, KK, nn);
        free(wb); free(wf); free(x);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("opt_matvec_bf16");
    TCase *tc = tcase_create("bf16");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, bf16_equals_widened_f32, 0, 3);
    tcase_add_loop_test(tc, bf16_large_k_token_groups, 0, 3);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
