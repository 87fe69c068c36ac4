/* qc_opt_kernels_avx2.c — the AVX2 + FMA (+ F16C) kernel table.
 *
 *   GEMM micro tile: 6 weight rows x 16 tokens = 12 ymm accumulators; packed panel
 *     [Kp/16][6][16], token strip [Kp][16].
 *   matvec: one row at a time, four 8-wide accumulators over 32-element blocks (bf16: shift
 *     and mask of a 256-bit load against a de-interleaved x, mv_row_bf16; Q8_0: one block of
 *     32 int8 widened to 4 x 8 fp32 and scaled by its d, mv_row_q8 -- the F32 arithmetic on
 *     the dequantized row, since d * q is exact).
 * Every function carries __attribute__((target(...))); see qc_opt_kernels.h for the numerics
 * contract.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "qc_opt_kernels.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
#define T2I __attribute__((target("avx2,fma,f16c"), always_inline)) static inline

#define MR 6
#define NR 16

/* ===================================================================================== */
/* Loads that widen                                                                       */
/* ===================================================================================== */

T2I __m256 ld8(const void *W, qc_dtype dt, size_t i) {
    if (dt == QC_F32) return _mm256_loadu_ps((const float *)W + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)W + i));
    if (dt == QC_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* Q8_0: the 8 values at element index i (i % 8 == 0) of a block array, as fp32 d * q */
T2I __m256 ldq8(const void *W, size_t i) {
    const unsigned char *b = (const unsigned char *)W + i / 32 * QC_Q8_0_BLOCK_BYTES;
    uint16_t h;
    memcpy(&h, b, 2);
    __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b + 2 + i % 32))));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h)), q);
}

/* mask of the first m (0..8) lanes */
T2I __m256i mask8(int m) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), idx);
}

T2I __m256 ldm(const float *p, int m) {
    return m >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask8(m));
}

T2I void stm(float *p, __m256 v, int m) {
    if (m >= 8) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, mask8(m), v);
}

/* ===================================================================================== */
/* Vector exp (Cephes expf, inputs clamped to [-87.34, 88.38]; NaN propagates)            */
/* ===================================================================================== */

T2I __m256 exp256(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), x);
    x = _mm256_max_ps(_mm256_set1_ps(-87.3365478515625f), x);
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^fx: fx in [-126, 128] after the clamp; 128 only when y < 1 would overflow -> handle
     * by splitting the scale in two halves */
    __m256i e = _mm256_cvtps_epi32(fx);
    __m256i e1 = _mm256_srai_epi32(e, 1), e2 = _mm256_sub_epi32(e, e1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e1, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}

/* ===================================================================================== */
/* GEMM packing and micro tile                                                            */
/* ===================================================================================== */

T2 static void k2_pack_w(float *panel, const void *W, qc_dtype dt, int K, int mr) {
    int Kp = qc_opt_kpad(K);
    for (int kb = 0; kb < Kp; kb += 16) {
        float *dst = panel + (size_t)kb * MR;
        int m = K - kb < 16 ? K - kb : 16;
        for (int r = 0; r < MR; r++) {
            if (r >= mr) {
                _mm256_storeu_ps(dst + r * 16, _mm256_setzero_ps());
                _mm256_storeu_ps(dst + r * 16 + 8, _mm256_setzero_ps());
            } else if (m == 16) {
                size_t i = (size_t)r * K + kb;
                __m256 v0, v1;
                switch (dt) {
                case QC_BF16: v0 = ld8(W, QC_BF16, i); v1 = ld8(W, QC_BF16, i + 8); break;
                case QC_F16: v0 = ld8(W, QC_F16, i); v1 = ld8(W, QC_F16, i + 8); break;
                case QC_Q8_0: v0 = ldq8(W, i); v1 = ldq8(W, i + 8); break;
                default: v0 = ld8(W, QC_F32, i); v1 = ld8(W, QC_F32, i + 8); break;
                }
                _mm256_storeu_ps(dst + r * 16, v0);
                _mm256_storeu_ps(dst + r * 16 + 8, v1);
            } else {
                for (int j = 0; j < 16; j++)
                    dst[r * 16 + j] = j < m ? qc_opt_wscalar(W, dt, (size_t)r * K + kb + j) : 0.0f;
            }
        }
    }
}

T2 static void k2_pack_x(float *strip, const float *x, int ldx, int K, int nt) {
    int Kp = qc_opt_kpad(K);
    for (int k = 0; k < Kp; k++)
        for (int t = 0; t < NR; t++)
            strip[(size_t)k * NR + t] = (t < nt && k < K) ? x[(size_t)t * ldx + k] : 0.0f;
}

#define ACC2(r) __m256 c##r##a = _mm256_setzero_ps(), c##r##b = _mm256_setzero_ps()
#define STEP(r)                                                   \
    do {                                                          \
        __m256 b_ = _mm256_broadcast_ss(p + (r) * 16 + kk);       \
        c##r##a = _mm256_fmadd_ps(b_, x0, c##r##a);               \
        c##r##b = _mm256_fmadd_ps(b_, x1, c##r##b);               \
    } while (0)
#define OUT(r)                                                    \
    do {                                                          \
        _mm256_store_ps(tmp[r], c##r##a);                         \
        _mm256_store_ps(tmp[r] + 8, c##r##b);                     \
    } while (0)

T2 static void k2_gemm_tile(const float *panel, const float *strip, int Kp, float *y, long ldy,
                            int mr, int nt) {
    ACC2(0); ACC2(1); ACC2(2); ACC2(3); ACC2(4); ACC2(5);
    const float *p = panel, *s = strip;
    for (int kb = 0; kb < Kp; kb += 16, p += MR * 16, s += 16 * NR) {
#pragma GCC unroll 16
        for (int kk = 0; kk < 16; kk++) {
            __m256 x0 = _mm256_loadu_ps(s + kk * NR), x1 = _mm256_loadu_ps(s + kk * NR + 8);
            STEP(0); STEP(1); STEP(2); STEP(3); STEP(4); STEP(5);
        }
    }
    float tmp[MR][NR] __attribute__((aligned(32)));
    OUT(0); OUT(1); OUT(2); OUT(3); OUT(4); OUT(5);
    for (int t = 0; t < nt; t++) {
        float *yt = y + (long)t * ldy;
        for (int r = 0; r < mr; r++) yt[r] = tmp[r][t];
    }
}

/* ===================================================================================== */
/* Matrix-vector                                                                          */
/* ===================================================================================== */

T2I float hsum8(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

/* One row x one token: four 8-wide accumulators over 32-element blocks (prefetched 2 KiB
 * ahead), 8-element blocks into the accumulators in turn, one fixed reduction, the scalar tail
 * in index order. The arithmetic depends only on K. */
T2I float mv_row(const void *W, qc_dtype dt, int K, const float *x, int prefetch) {
    const size_t es = dt == QC_F32 ? 4 : 2;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        if (prefetch) {
            const char *pf = (const char *)W + (size_t)k * es + 2048;
            _mm_prefetch(pf, _MM_HINT_T0);
            if (es == 4) _mm_prefetch(pf + 64, _MM_HINT_T0);
        }
        a0 = _mm256_fmadd_ps(ld8(W, dt, (size_t)k), _mm256_loadu_ps(x + k), a0);
        a1 = _mm256_fmadd_ps(ld8(W, dt, (size_t)k + 8), _mm256_loadu_ps(x + k + 8), a1);
        a2 = _mm256_fmadd_ps(ld8(W, dt, (size_t)k + 16), _mm256_loadu_ps(x + k + 16), a2);
        a3 = _mm256_fmadd_ps(ld8(W, dt, (size_t)k + 24), _mm256_loadu_ps(x + k + 24), a3);
    }
    if (k + 8 <= K) { a0 = _mm256_fmadd_ps(ld8(W, dt, (size_t)k), _mm256_loadu_ps(x + k), a0); k += 8; }
    if (k + 8 <= K) { a1 = _mm256_fmadd_ps(ld8(W, dt, (size_t)k), _mm256_loadu_ps(x + k), a1); k += 8; }
    if (k + 8 <= K) { a2 = _mm256_fmadd_ps(ld8(W, dt, (size_t)k), _mm256_loadu_ps(x + k), a2); k += 8; }
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; k < K; k++) s += qc_opt_wscalar(W, dt, (size_t)k) * x[k];
    return s;
}

/* BF16 fast path of mv_row, the same numbers: one 256-bit load of 16 bf16 widened by a shift
 * (the even elements) and a mask (the odd ones) instead of a cross-lane zero-extension and a
 * shift per 8, against xe, x de-interleaved the same way per 16 elements. Each lane of
 * e0 / o0 / e1 / o1 accumulates one residue of k mod 32 in block order (the lanes of a0..a3
 * of mv_row, permuted): re-interleaving gives a0..a3 bit for bit; the rest is mv_row's. */
T2I float mv_row_bf16(const void *W, int K, const float *x, const float *xe, int prefetch) {
    const char *Wb = W;
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256 e0 = _mm256_setzero_ps(), o0 = e0, e1 = e0, o1 = e0;
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        if (prefetch) _mm_prefetch(Wb + (size_t)k * 2 + 2048, _MM_HINT_T0);
        const __m256i v0 = _mm256_loadu_si256((const __m256i *)(const void *)(Wb + (size_t)k * 2));
        const __m256i v1 = _mm256_loadu_si256((const __m256i *)(const void *)(Wb + (size_t)k * 2 + 32));
        e0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), _mm256_load_ps(xe + k), e0);
        o0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v0, hi)), _mm256_load_ps(xe + k + 8), o0);
        e1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)), _mm256_load_ps(xe + k + 16), e1);
        o1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v1, hi)), _mm256_load_ps(xe + k + 24), o1);
    }
    /* unpack lo / hi: residues {0-3, 8-11} / {4-7, 12-15} of each 16; halves recombined */
    __m256 l0 = _mm256_unpacklo_ps(e0, o0), h0 = _mm256_unpackhi_ps(e0, o0);
    __m256 l1 = _mm256_unpacklo_ps(e1, o1), h1 = _mm256_unpackhi_ps(e1, o1);
    __m256 a0 = _mm256_permute2f128_ps(l0, h0, 0x20), a1 = _mm256_permute2f128_ps(l0, h0, 0x31);
    __m256 a2 = _mm256_permute2f128_ps(l1, h1, 0x20), a3 = _mm256_permute2f128_ps(l1, h1, 0x31);
    if (k + 8 <= K) { a0 = _mm256_fmadd_ps(ld8(W, QC_BF16, (size_t)k), _mm256_loadu_ps(x + k), a0); k += 8; }
    if (k + 8 <= K) { a1 = _mm256_fmadd_ps(ld8(W, QC_BF16, (size_t)k), _mm256_loadu_ps(x + k), a1); k += 8; }
    if (k + 8 <= K) { a2 = _mm256_fmadd_ps(ld8(W, QC_BF16, (size_t)k), _mm256_loadu_ps(x + k), a2); k += 8; }
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; k < K; k++) s += qc_opt_wscalar(W, QC_BF16, (size_t)k) * x[k];
    return s;
}

/* Q8_0 path of mv_row (K % 32 == 0), the same numbers as mv_row on the dequantized F32 row:
 * each block's 32 int8 widened to four 8-vectors, times the block's d (exact), into a0..a3. */
T2I float mv_row_q8(const void *W, int K, const float *x, int prefetch) {
    const unsigned char *Wb = W;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int k = 0; k + 32 <= K; k += 32, Wb += QC_Q8_0_BLOCK_BYTES) {
        if (prefetch) _mm_prefetch((const char *)Wb + 1024, _MM_HINT_T0);
        uint16_t h;
        memcpy(&h, Wb, 2);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(h));
        const __m128i q0 = _mm_loadu_si128((const __m128i *)(const void *)(Wb + 2));
        const __m128i q1 = _mm_loadu_si128((const __m128i *)(const void *)(Wb + 18));
#define Q8W(q) _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)))
        a0 = _mm256_fmadd_ps(Q8W(q0), _mm256_loadu_ps(x + k), a0);
        a1 = _mm256_fmadd_ps(Q8W(_mm_srli_si128(q0, 8)), _mm256_loadu_ps(x + k + 8), a1);
        a2 = _mm256_fmadd_ps(Q8W(q1), _mm256_loadu_ps(x + k + 16), a2);
        a3 = _mm256_fmadd_ps(Q8W(_mm_srli_si128(q1, 8)), _mm256_loadu_ps(x + k + 24), a3);
#undef Q8W
    }
    return hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

/* floats of the de-interleaved copies of x (64 KiB of stack): tokens are taken in groups
 * whose copies fit; a K beyond it takes the generic path */
#define MV_XE 16384

T2I void mv_dt(float *y, long ldy, const void *W, qc_dtype dt, int rows, int K, const float *x,
               long ldx, int n) {
    const size_t es = dt == QC_F32 ? 4 : 2;
    const int K32 = K / 32 * 32;
    if (dt == QC_Q8_0) {
        const size_t rb = qc_dtype_row_bytes(QC_Q8_0, K);
        for (int r = 0; r < rows; r++)
            for (int t = 0; t < n; t++)
                y[(long)t * ldy + r] = mv_row_q8((const char *)W + (size_t)r * rb, K, x + t * ldx, t == 0);
        return;
    }
    if (dt == QC_BF16 && K32 > 0 && K32 <= MV_XE) {
        float xe[MV_XE] __attribute__((aligned(32)));
        const int g = MV_XE / K32; /* tokens per group */
        for (int t0 = 0; t0 < n; t0 += g) {
            const int nt = n - t0 < g ? n - t0 : g;
            for (int t = 0; t < nt; t++)
                for (int k = 0; k < K32; k += 16)
                    for (int i = 0; i < 8; i++) {
                        xe[(size_t)t * K32 + k + i] = x[(t0 + t) * ldx + k + 2 * i];
                        xe[(size_t)t * K32 + k + 8 + i] = x[(t0 + t) * ldx + k + 2 * i + 1];
                    }
            for (int r = 0; r < rows; r++) {
                const char *Wr = (const char *)W + (size_t)r * K * es;
                for (int t = 0; t < nt; t++)
                    y[(long)(t0 + t) * ldy + r] =
                        mv_row_bf16(Wr, K, x + (t0 + t) * ldx, xe + (size_t)t * K32, t == 0);
            }
        }
        return;
    }
    for (int r = 0; r < rows; r++) {
        const char *Wr = (const char *)W + (size_t)r * K * es;
        for (int t = 0; t < n; t++) y[(long)t * ldy + r] = mv_row(Wr, dt, K, x + t * ldx, t == 0);
    }
}

T2 static void k2_matvec(float *y, long ldy, const void *W, qc_dtype dt, int rows, int K,
                         const float *x, long ldx, int n) {
    switch (dt) {
    case QC_BF16: mv_dt(y, ldy, W, QC_BF16, rows, K, x, ldx, n); break;
    case QC_F16: mv_dt(y, ldy, W, QC_F16, rows, K, x, ldx, n); break;
    case QC_Q8_0: mv_dt(y, ldy, W, QC_Q8_0, rows, K, x, ldx, n); break;
    default: mv_dt(y, ldy, W, QC_F32, rows, K, x, ldx, n); break;
    }
}

/* ===================================================================================== */
/* Small dense algebra                                                                    */
/* ===================================================================================== */

/* R rows (4 or 1) x 32 columns from j0, with the valid column count per 8-vector in m[] */
T2I void nn_block(int K, const float *A, long lda, const float *B, long ldb, float *C, long ldc,
                  int acc, int j0, const int m[4], const int R) {
    __m256 c[4][4];
    for (int i = 0; i < R; i++)
        for (int v = 0; v < 4; v++)
            c[i][v] = (acc && m[v] > 0) ? ldm(C + i * ldc + j0 + 8 * v, m[v]) : _mm256_setzero_ps();
    for (int k = 0; k < K; k++) {
        const float *Bk = B + k * ldb + j0;
        __m256 bv[4];
        for (int v = 0; v < 4; v++) bv[v] = m[v] > 0 ? ldm(Bk + 8 * v, m[v]) : _mm256_setzero_ps();
        for (int i = 0; i < R; i++) {
            __m256 a = _mm256_broadcast_ss(A + i * lda + k);
            for (int v = 0; v < 4; v++) c[i][v] = _mm256_fmadd_ps(a, bv[v], c[i][v]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int v = 0; v < 4; v++)
            if (m[v] > 0) stm(C + i * ldc + j0 + 8 * v, c[i][v], m[v]);
}

T2 static void k2_gemm_nn(int M, int N, int K, const float *A, long lda, const float *B,
                          long ldb, float *C, long ldc, int acc) {
    for (int j0 = 0; j0 < N; j0 += 32) {
        int m[4];
        for (int v = 0; v < 4; v++) {
            int rem = N - j0 - 8 * v;
            m[v] = rem >= 8 ? 8 : rem <= 0 ? 0 : rem;
        }
        int i = 0;
        for (; i + 3 <= M; i += 3) nn_block(K, A + i * lda, lda, B, ldb, C + i * ldc, ldc, acc, j0, m, 3);
        for (; i < M; i++) nn_block(K, A + i * lda, lda, B, ldb, C + i * ldc, ldc, acc, j0, m, 1);
    }
}

T2 static float k2_dot(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    if (i < n) {
        int m = n - i >= 8 ? 8 : n - i;
        s0 = _mm256_fmadd_ps(ldm(a + i, m), ldm(b + i, m), s0);
        i += m;
        if (i < n) s1 = _mm256_fmadd_ps(ldm(a + i, n - i), ldm(b + i, n - i), s1);
    }
    return hsum8(_mm256_add_ps(s0, s1));
}

T2 static float k2_sumsq(const float *x, int n) { return k2_dot(x, x, n); }

T2 static void k2_axpy(float *y, float a, const float *x, int n) {
    __m256 va = _mm256_set1_ps(a);
    for (int i = 0; i < n; i += 8) {
        int m = n - i;
        stm(y + i, _mm256_fmadd_ps(va, ldm(x + i, m), ldm(y + i, m)), m);
    }
}

T2 static void k2_scale(float *y, float a, int n) {
    __m256 va = _mm256_set1_ps(a);
    for (int i = 0; i < n; i += 8) {
        int m = n - i;
        stm(y + i, _mm256_mul_ps(va, ldm(y + i, m)), m);
    }
}

T2 static void k2_mul(float *y, const float *a, const float *b, int n) {
    for (int i = 0; i < n; i += 8) {
        int m = n - i;
        stm(y + i, _mm256_mul_ps(ldm(a + i, m), ldm(b + i, m)), m);
    }
}

/* ===================================================================================== */
/* Elementwise transcendental                                                             */
/* ===================================================================================== */

T2 static void k2_vexp(float *y, const float *x, int n) {
    for (int i = 0; i < n; i += 8) {
        int m = n - i;
        stm(y + i, exp256(ldm(x + i, m)), m);
    }
}

T2I __m256 silu256(__m256 x) {
    __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

T2 static void k2_silu(float *y, const float *x, int n) {
    for (int i = 0; i < n; i += 8) {
        int m = n - i;
        stm(y + i, silu256(ldm(x + i, m)), m);
    }
}

T2 static void k2_silu_mul(float *g, const float *u, int n) {
    for (int i = 0; i < n; i += 8) {
        int m = n - i;
        stm(g + i, _mm256_mul_ps(silu256(ldm(g + i, m)), ldm(u + i, m)), m);
    }
}

T2 static void k2_sigmoid_mul(float *y, const float *g, int n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int i = 0; i < n; i += 8) {
        int m = n - i;
        __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), ldm(g + i, m)));
        __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, e));
        stm(y + i, _mm256_mul_ps(ldm(y + i, m), s), m);
    }
}

/* ===================================================================================== */
/* Machine probes                                                                         */
/* ===================================================================================== */

T2 static uint32_t k2_stream_read(const void *p, size_t bytes) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    const char *q = p;
    size_t i = 0;
    for (; i + 128 <= bytes; i += 128) {
        _mm_prefetch(q + i + 2048, _MM_HINT_T0);
        _mm_prefetch(q + i + 2048 + 64, _MM_HINT_T0);
        a = _mm256_xor_si256(a, _mm256_loadu_si256((const __m256i *)(q + i)));
        b = _mm256_xor_si256(b, _mm256_loadu_si256((const __m256i *)(q + i + 32)));
        c = _mm256_xor_si256(c, _mm256_loadu_si256((const __m256i *)(q + i + 64)));
        d = _mm256_xor_si256(d, _mm256_loadu_si256((const __m256i *)(q + i + 96)));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    uint32_t w[8], r = 0;
    _mm256_storeu_si256((__m256i *)w, a);
    for (int j = 0; j < 8; j++) r ^= w[j];
    for (; i + 4 <= bytes; i += 4) {
        uint32_t t_;
        memcpy(&t_, q + i, 4);
        r ^= t_;
    }
    return r;
}

/* FMA throughput: 12 independent chains in named registers (an array of accumulators was
 * kept in memory by gcc: one store-to-load round trip per FMA, half the real peak), two FMAs
 * per chain per iteration = 24 FMAs per iteration (the bench counts 48 * lanes flops) */
T2 static float k2_fma_burn(long iters, float seed) {
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
#define FB_INIT(j) __m256 a##j = _mm256_set1_ps(seed + (float)j)
    FB_INIT(0); FB_INIT(1); FB_INIT(2); FB_INIT(3); FB_INIT(4); FB_INIT(5);
    FB_INIT(6); FB_INIT(7); FB_INIT(8); FB_INIT(9); FB_INIT(10); FB_INIT(11);
#undef FB_INIT
#define FB_STEP(j) a##j = _mm256_fmadd_ps(a##j, m, c)
#define FB_ROUND FB_STEP(0); FB_STEP(1); FB_STEP(2); FB_STEP(3); FB_STEP(4); FB_STEP(5); \
                 FB_STEP(6); FB_STEP(7); FB_STEP(8); FB_STEP(9); FB_STEP(10); FB_STEP(11)
    for (long i = 0; i < iters; i++) {
        FB_ROUND;
        FB_ROUND;
    }
#undef FB_ROUND
#undef FB_STEP
    __m256 s0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)), _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    __m256 s1 = _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11));
    return hsum8(_mm256_add_ps(s0, s1));
}

static const qc_opt_kernels k2_table = {
    .isa = "AVX2",
    .gemm_mr = MR,
    .gemm_nr = NR,
    .lanes = 8,
    .pack_w = k2_pack_w,
    .pack_x = k2_pack_x,
    .gemm_tile = k2_gemm_tile,
    .matvec = k2_matvec,
    .gemm_nn = k2_gemm_nn,
    .dot = k2_dot,
    .sumsq = k2_sumsq,
    .axpy = k2_axpy,
    .scale = k2_scale,
    .mul = k2_mul,
    .vexp = k2_vexp,
    .silu = k2_silu,
    .silu_mul = k2_silu_mul,
    .sigmoid_mul = k2_sigmoid_mul,
    .stream_read = k2_stream_read,
    .fma_burn = k2_fma_burn,
};

const qc_opt_kernels *const qc_opt_kernels_avx2_ptr = &k2_table;
