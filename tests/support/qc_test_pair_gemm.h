/* qc_test_pair_gemm.h — shared checks of the bf16-pair GEMMs (qc_opt_bf16dot tables: the
 * BF16 dot GEMM, the AMX GEMMs) for test_opt_bf16dot.c and test_opt_amx.c. Header-only:
 * static functions; the caller owns every buffer. */
#ifndef QC_TEST_PAIR_GEMM_H
#define QC_TEST_PAIR_GEMM_H
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../optimized/qc_opt_kernels.h"

/* The thread invariance of g rests on this: an element's bits do not depend on the tile it is
 * computed in. Each (row, token) of picks[npicks] is computed alone -- a panel of that one row
 * (W rows wrow bytes apart), a strip of that one token (x rows K floats apart) -- and must equal
 * y[t * rows + r], computed in full tiles. panel: room for one panel. */
static inline void qc_test_pair_gemm_alone(const qc_opt_bf16dot *g, const void *W, size_t wrow,
                                           const float *x, int K, int Kp, size_t strip_words,
                                           uint32_t *panel, const float *y, int rows,
                                           const int (*picks)[2], int npicks) {
    uint32_t *s1 = aligned_alloc(64, (strip_words * 4 + 63) / 64 * 64);
    ck_assert_ptr_nonnull(s1);
    for (int q = 0; q < npicks; q++) {
        const int r = picks[q][0], t = picks[q][1];
        g->pack_x(s1, x + (size_t)t * K, K, K, 1);
        g->pack_w(panel, (const char *)W + (size_t)r * wrow, K, 1);
        float one = NAN;
        if (g->begin) g->begin();
        g->gemm_tile(panel, s1, Kp, &one, 1, 1, 1);
        if (g->end) g->end();
        ck_assert_msg(memcmp(&one, &y[(size_t)t * rows + r], 4) == 0,
                      "%s y[%d,%d]: %.9g alone, %.9g in the tile", g->name, t, r, one,
                      y[(size_t)t * rows + r]);
    }
    free(s1);
}

#endif
