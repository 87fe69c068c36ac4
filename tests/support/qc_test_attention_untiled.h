/* qc_test_attention_untiled.h — the optimized attention's untiled online-softmax loop (one
 * (token, head) at a time, key blocks of QC_OPT_ATT_KB), as the backend had it before tiling: the
 * reference the tiled core must equal bitwise (tests/test_opt_attention_long.c) and the
 * baseline it is timed against (tests/bench_opt_attention.c). Header-only: the bench does
 * not link the Check-based test support library. */
#ifndef QC_TEST_ATTENTION_UNTILED_H
#define QC_TEST_ATTENTION_UNTILED_H

#include <math.h>
#include <string.h>

#include "../../optimized/qc_opt_internal.h"

/* the untiled loop (one (token, head) at a time), as the backend had it */
static inline void qc_test_attention_untiled(const qc_opt_kernels *K, float *ob, const float *act, const float *mix,
                    const float *kc, const float *vc, int max_ctx, int n, int start_pos, int nh,
                    int nkv, int hd, float scale) {
    const int grp = nh / nkv, qgd = 2 * nh * hd;
    float sc[64];
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++) {
            const float *q = act + (size_t)t * nh * hd + (size_t)h * hd;
            const int g = h / grp, npos = start_pos + t + 1;
            const float *Kc = kc + (size_t)g * max_ctx * hd, *Vc = vc + (size_t)g * max_ctx * hd;
            float *out = ob + (size_t)t * nh * hd + (size_t)h * hd;
            float m = -INFINITY, lsum = 0.0f;
            memset(out, 0, (size_t)hd * sizeof(float));
            for (int p0 = 0; p0 < npos; p0 += QC_OPT_ATT_KB) {
                const int nb = npos - p0 < QC_OPT_ATT_KB ? npos - p0 : QC_OPT_ATT_KB;
                float mb = -INFINITY;
                for (int i = 0; i < nb; i++) {
                    sc[i] = K->dot(q, Kc + (size_t)(p0 + i) * hd, hd) * scale;
                    if (sc[i] > mb) mb = sc[i];
                }
                const float mnew = mb > m ? mb : m;
                if (mnew > m && m != -INFINITY) {
                    const float corr = expf(m - mnew);
                    K->scale(out, corr, hd);
                    lsum *= corr;
                }
                m = mnew;
                for (int i = 0; i < nb; i++) sc[i] = sc[i] - m;
                K->vexp(sc, sc, nb);
                for (int i = 0; i < nb; i++) {
                    lsum += sc[i];
                    K->axpy(out, sc[i], Vc + (size_t)(p0 + i) * hd, hd);
                }
            }
            K->scale(out, 1.0f / lsum, hd);
            K->sigmoid_mul(out, mix + (size_t)t * qgd + (size_t)h * 2 * hd + hd, hd);
        }
}

#endif /* QC_TEST_ATTENTION_UNTILED_H */
