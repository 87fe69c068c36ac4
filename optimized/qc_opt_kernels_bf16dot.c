/* qc_opt_kernels_bf16dot.c — the BF16 dot-product GEMM (AVX512_BF16, `vdpbf16ps`): the
 * optimized backend's prefill projections of BF16 weights when its option bf16_dot is on
 * (qc_opt_options.c; off by default).
 *
 * What changes numerically: the activations are rounded to bf16 (round to nearest even) before
 * the product, as llama.cpp's CPU backend does for BF16 weights; weight x activation products
 * of two bf16 are exact in fp32, accumulated in fp32. The results are no longer those of the
 * float32 policy but of the `bf16` tier (docs/tolerance-tiers.md; docs/performance.md has the
 * error measured on the fixtures). They stay bit-identical for any thread count: each output
 * element is one accumulator lane over the k pairs 0, 1, .. Kp/2-1 in order, whatever rows and
 * tokens share its tile.
 *
 * Layouts (uint32 = a pair of bf16, the lower half the even k):
 *   panel [Kp/16][MR][8]: rows r0..r0+mr-1 of W, 8 k-pairs per block (zeros past mr and K);
 *     copied from the BF16 rows without widening
 *   strip [Kp/2][NR]: tokens t0..t0+nt-1, pair p = (x[2p], x[2p+1]) rounded (zeros past nt, K)
 * Micro tile: 12 rows x 32 tokens = 24 zmm accumulators; per k pair two strip loads and 12
 * broadcasts, 24 vdpbf16ps (each two multiply-adds per lane).
 */
#include <cpuid.h>
#include <immintrin.h>
#include <string.h>

#include "qc_opt_kernels.h"

#define TBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define MR 12
#define NR 32

/* ---- the portable definition (tests: naive beside fast) ---- */

uint16_t qc_opt_bf16_rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ---- packing ---- */

TBF static void bd_pack_w(uint32_t *panel, const void *W, int K, int mr) {
    const int Kp = qc_opt_kpad(K);
    const uint16_t *w = W;
    for (int kb = 0; kb < Kp; kb += 16) {
        uint32_t *dst = panel + (size_t)kb / 2 * MR;
        const int m = K - kb < 16 ? (K - kb > 0 ? K - kb : 0) : 16;
        for (int r = 0; r < MR; r++) {
            if (r < mr && m == 16) {
                _mm256_storeu_si256((__m256i *)(void *)(dst + r * 8),
                                    _mm256_loadu_si256((const __m256i *)(const void *)(w + (size_t)r * K + kb)));
            } else {
                uint16_t tmp[16] = {0};
                if (r < mr) memcpy(tmp, w + (size_t)r * K + kb, (size_t)m * 2);
                memcpy(dst + r * 8, tmp, 32);
            }
        }
    }
}

TBF static void bd_pack_x(uint32_t *strip, const float *x, int ldx, int K, int nt) {
    const int Kp = qc_opt_kpad(K);
    uint32_t buf[16][8]; /* 16 tokens x 8 pairs */
    for (int t0 = 0; t0 < NR; t0 += 16)
        for (int k0 = 0; k0 < Kp; k0 += 16) {
            const int mk = K - k0 < 16 ? (K - k0 > 0 ? K - k0 : 0) : 16;
            for (int t = 0; t < 16; t++) {
                const __m512 v = (t0 + t < nt && mk > 0)
                                     ? _mm512_maskz_loadu_ps((__mmask16)((1u << mk) - 1),
                                                             x + (size_t)(t0 + t) * ldx + k0)
                                     : _mm512_setzero_ps();
                /* 16 floats -> 16 bf16 in k order = 8 pairs */
                _mm256_storeu_si256((__m256i *)(void *)buf[t], (__m256i)_mm512_cvtneps_pbh(v));
            }
            for (int j = 0; j < 8; j++) {
                uint32_t *d = strip + (size_t)(k0 / 2 + j) * NR + t0;
                for (int t = 0; t < 16; t++) d[t] = buf[t][j];
            }
        }
}

/* ---- micro tile ---- */

#define ACC2(r) __m512 c##r##a = _mm512_setzero_ps(), c##r##b = _mm512_setzero_ps()
#define STEP(r)                                                                        \
    do {                                                                               \
        const __m512bh b_ = (__m512bh)_mm512_set1_epi32((int)p[(r) * 8 + j]);          \
        c##r##a = _mm512_dpbf16_ps(c##r##a, b_, x0);                                   \
        c##r##b = _mm512_dpbf16_ps(c##r##b, b_, x1);                                   \
    } while (0)
#define OUT(r)                                                                         \
    do {                                                                               \
        _mm512_store_ps(tmp[r], c##r##a);                                              \
        _mm512_store_ps(tmp[r] + 16, c##r##b);                                         \
    } while (0)

TBF static void bd_gemm_tile(const uint32_t *panel, const uint32_t *strip, int Kp, float *y,
                             long ldy, int mr, int nt) {
    ACC2(0); ACC2(1); ACC2(2); ACC2(3); ACC2(4); ACC2(5);
    ACC2(6); ACC2(7); ACC2(8); ACC2(9); ACC2(10); ACC2(11);
    const uint32_t *p = panel, *s = strip;
    for (int kb = 0; kb < Kp; kb += 16, p += MR * 8, s += 8 * NR) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m512bh x0 = (__m512bh)_mm512_loadu_si512((const void *)(s + j * NR));
            const __m512bh x1 = (__m512bh)_mm512_loadu_si512((const void *)(s + j * NR + 16));
            STEP(0); STEP(1); STEP(2); STEP(3); STEP(4); STEP(5);
            STEP(6); STEP(7); STEP(8); STEP(9); STEP(10); STEP(11);
        }
    }
    float tmp[MR][NR] __attribute__((aligned(64)));
    OUT(0); OUT(1); OUT(2); OUT(3); OUT(4); OUT(5);
    OUT(6); OUT(7); OUT(8); OUT(9); OUT(10); OUT(11);
    for (int t = 0; t < nt; t++) {
        float *yt = y + (long)t * ldy;
        for (int r = 0; r < mr; r++) yt[r] = tmp[r][t];
    }
}

/* 12 independent accumulator chains of vdpbf16ps, two rounds an iteration (24 instructions of
 * 16 lanes x 2 multiply-adds = 64 flops each; the shape of the FMA probe's loop), distinct
 * starting values so the compiler cannot merge the chains */
TBF static float bd_dot_burn(long iters, float seed) {
    const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3F7F3F7F); /* (0.996, 0.996) */
    const __m512bh b = (__m512bh)_mm512_set1_epi32(0x3C003C00); /* (2^-7, 2^-7) */
#define DB_INIT(j) __m512 c##j = _mm512_set1_ps(seed + (float)(j))
    DB_INIT(0); DB_INIT(1); DB_INIT(2); DB_INIT(3); DB_INIT(4); DB_INIT(5);
    DB_INIT(6); DB_INIT(7); DB_INIT(8); DB_INIT(9); DB_INIT(10); DB_INIT(11);
#undef DB_INIT
#define DB_STEP(j) c##j = _mm512_dpbf16_ps(c##j, a, b)
#define DB_ROUND DB_STEP(0); DB_STEP(1); DB_STEP(2); DB_STEP(3); DB_STEP(4); DB_STEP(5); \
                 DB_STEP(6); DB_STEP(7); DB_STEP(8); DB_STEP(9); DB_STEP(10); DB_STEP(11)
    for (long i = 0; i < iters; i++) {
        DB_ROUND;
        DB_ROUND;
    }
#undef DB_ROUND
#undef DB_STEP
    const __m512 s0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                                    _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
    const __m512 s1 = _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11));
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static const qc_opt_bf16dot bf16dot = {
    .name = "BF16 dot",
    .wdtype = QC_BF16,
    .mr = MR,
    .nr = NR,
    .kstep = QC_OPT_KB,
    .x_terms = 1,
    .pack_w = bd_pack_w,
    .pack_x = bd_pack_x,
    .gemm_tile = bd_gemm_tile,
    .dot_burn = bd_dot_burn,
    .burn_flops = 24.0 * 16 * 4,
};

int qc_opt_cpu_has_bf16dot(void) {
#if defined(__x86_64__) || defined(__i386__)
    /* cpuid leaf 7 subleaf 1, EAX bit 5: AVX512_BF16 */
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!qc_opt_cpu_has_avx512() || !__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
    unsigned a0 = 0, b0 = 0, c0 = 0, d0 = 0; /* leaf 7 subleaf 0, EBX bit 30: AVX512BW */
    if (!__get_cpuid_count(7, 0, &a0, &b0, &c0, &d0)) return 0;
    return (a & (1u << 5)) && (b0 & (1u << 30)) && (b0 & (1u << 31)); /* BF16, BW, VL */
#else
    return 0;
#endif
}

const qc_opt_bf16dot *qc_opt_bf16dot_pick(void) {
    const qc_opt_kernels *k = qc_opt_kernels_pick(); /* QC_ISA lower than AVX-512: none */
    return qc_opt_cpu_has_bf16dot() && !strcmp(k->isa, "AVX-512") ? &bf16dot : NULL;
}
