/* qc_opt_kernels_avx512.c — the AVX-512F kernel table.
 *
 * Every function carries __attribute__((target(...))): the library is built for the baseline
 * ISA and this code only runs after qc_opt_kernels_pick has checked the CPU.
 *
 *   GEMM micro tile: 12 weight rows x 32 tokens = 24 zmm accumulators; per k two strip loads and
 *     12 broadcasts from the packed panel [Kp/16][12][16] (16 k-steps fully unrolled, so every
 *     broadcast is a constant offset from one pointer).
 *   matvec: one row at a time (a single software-prefetched stream per thread; Q8_0 rows
 *     left to the hardware prefetcher), four accumulators over 64-element blocks, 16-bit
 *     weights widened in registers (bf16: shift and mask of a 512-bit load against a
 *     de-interleaved x, mv_row_bf16; f16: vcvtph2ps; Q8_0: each block's 32 int8 widened to
 *     2 x 16 fp32 times its d, mv_row_q8 -- the F32 arithmetic on the dequantized row, since
 *     d * q is exact).
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "qc_opt_kernels.h"

#define T512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define T512I __attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) static inline

#define MR 12
#define MV_PD 2048      /* matvec prefetch distance, bytes (F32 rows, F16) */
#define MV_PD_BF16 4096 /* the BF16 kernel's: 0.8B decode, 1 thread 12.4 -> 13.4-13.7 tok/s and
                           2 threads 21-23 -> 24 tok/s against 2048 (F32 is best at 2048) */
#define NR 32

/* ===================================================================================== */
/* Loads that widen                                                                       */
/* ===================================================================================== */

/* 16 elements at element index i of W (dtype dt), widened to fp32 */
T512I __m512 ld16(const void *W, qc_dtype dt, size_t i) {
    if (dt == QC_F32) return _mm512_loadu_ps((const float *)W + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)W + i));
    if (dt == QC_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* the first m (< 16) elements at index i, zero-filled */
T512I __m512 ld16_part(const void *W, qc_dtype dt, size_t i, int m) {
    if (dt == QC_F32) return _mm512_maskz_loadu_ps((__mmask16)((1u << m) - 1), (const float *)W + i);
    uint16_t tmp[16] = {0};
    memcpy(tmp, (const uint16_t *)W + i, (size_t)m * 2);
    __m256i h = _mm256_loadu_si256((const __m256i *)tmp);
    if (dt == QC_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* Q8_0: the 16 values at element index i (i % 16 == 0) of a block array, as fp32 d * q */
T512I __m512 ldq16(const void *W, size_t i) {
    const unsigned char *b = (const unsigned char *)W + i / 32 * QC_Q8_0_BLOCK_BYTES;
    uint16_t h;
    memcpy(&h, b, 2);
    __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b + 2 + i % 32))));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(h)), q);
}

/* ===================================================================================== */
/* Vector exp (Cephes expf; ~1 ulp; NaN propagates; underflows to 0 / overflows to inf)   */
/* ===================================================================================== */

T512I __m512 exp512(__m512 x) {
    /* min/max with x as the SECOND operand return x when it is NaN */
    x = _mm512_min_ps(_mm512_set1_ps(88.8f), x);
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, fx);
}

T512I __mmask16 tail_mask(int m) { return (__mmask16)((1u << m) - 1); }

/* ===================================================================================== */
/* GEMM packing and micro tile                                                            */
/* ===================================================================================== */

/* Row by row: each weight row is read as one sequential stream (a panel's rows are adjacent
 * in W, so the panel is one forward sweep), not the mr rows interleaved 32 bytes at a time */
T512I void pack_row(float *dst, const void *W, qc_dtype dt, size_t i0, int K, int Kp) {
    int kb = 0;
    for (; kb + 16 <= K; kb += 16, dst += MR * 16) {
        __m512 v;
        switch (dt) {
        case QC_BF16: v = ld16(W, QC_BF16, i0 + (size_t)kb); break;
        case QC_F16: v = ld16(W, QC_F16, i0 + (size_t)kb); break;
        case QC_Q8_0: v = ldq16(W, i0 + (size_t)kb); break;
        default: v = ld16(W, QC_F32, i0 + (size_t)kb); break;
        }
        _mm512_storeu_ps(dst, v);
    }
    if (kb < K) {
        _mm512_storeu_ps(dst, ld16_part(W, dt, i0 + (size_t)kb, K - kb));
        kb += 16;
        dst += MR * 16;
    }
    for (; kb < Kp; kb += 16, dst += MR * 16) _mm512_storeu_ps(dst, _mm512_setzero_ps());
}

T512 static void k5_pack_w(float *panel, const void *W, qc_dtype dt, int K, int mr) {
    const int Kp = qc_opt_kpad(K);
    for (int r = 0; r < MR; r++) {
        if (r < mr) {
            pack_row(panel + r * 16, W, dt, (size_t)r * K, K, Kp);
            continue;
        }
        for (int kb = 0; kb < Kp; kb += 16)
            _mm512_storeu_ps(panel + (size_t)kb * MR + r * 16, _mm512_setzero_ps());
    }
}

T512 static void k5_pack_x(float *strip, const float *x, int ldx, int K, int nt) {
    int Kp = qc_opt_kpad(K);
    /* 16 tokens x 16 k at a time through a small transpose buffer */
    float buf[16][16];
    for (int t0 = 0; t0 < NR; t0 += 16) {
        for (int k0 = 0; k0 < Kp; k0 += 16) {
            int mk = K - k0 < 16 ? (K - k0 > 0 ? K - k0 : 0) : 16;
            for (int t = 0; t < 16; t++) {
                __m512 v = (t0 + t < nt && mk > 0)
                               ? _mm512_maskz_loadu_ps(tail_mask(mk),
                                                       x + (size_t)(t0 + t) * ldx + k0)
                               : _mm512_setzero_ps();
                _mm512_storeu_ps(buf[t], v);
            }
            for (int k = 0; k < 16; k++) {
                __m512 v = _mm512_set_ps(buf[15][k], buf[14][k], buf[13][k], buf[12][k],
                                         buf[11][k], buf[10][k], buf[9][k], buf[8][k], buf[7][k],
                                         buf[6][k], buf[5][k], buf[4][k], buf[3][k], buf[2][k],
                                         buf[1][k], buf[0][k]);
                _mm512_storeu_ps(strip + (size_t)(k0 + k) * NR + t0, v);
            }
        }
    }
}

#define ACC2(r) __m512 c##r##a = _mm512_setzero_ps(), c##r##b = _mm512_setzero_ps()
#define STEP(r)                                                   \
    do {                                                          \
        __m512 b_ = _mm512_set1_ps(p[(r) * 16 + kk]);             \
        c##r##a = _mm512_fmadd_ps(b_, x0, c##r##a);               \
        c##r##b = _mm512_fmadd_ps(b_, x1, c##r##b);               \
    } while (0)
#define OUT(r)                                                    \
    do {                                                          \
        _mm512_store_ps(tmp[r], c##r##a);                         \
        _mm512_store_ps(tmp[r] + 16, c##r##b);                    \
    } while (0)

T512 static void k5_gemm_tile(const float *panel, const float *strip, int Kp, float *y, long ldy,
                              int mr, int nt) {
    ACC2(0); ACC2(1); ACC2(2); ACC2(3); ACC2(4); ACC2(5);
    ACC2(6); ACC2(7); ACC2(8); ACC2(9); ACC2(10); ACC2(11);
    const float *p = panel, *s = strip;
    for (int kb = 0; kb < Kp; kb += 16, p += MR * 16, s += 16 * NR) {
#pragma GCC unroll 16
        for (int kk = 0; kk < 16; kk++) {
            __m512 x0 = _mm512_loadu_ps(s + kk * NR), x1 = _mm512_loadu_ps(s + kk * NR + 16);
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

/* ===================================================================================== */
/* Matrix-vector                                                                          */
/* ===================================================================================== */

/* One row x one token: four accumulators over 64-element blocks (one sequential stream per
 * thread, prefetched MV_PD bytes ahead: measured faster than interleaving several rows), then
 * 16-element blocks into the accumulators in turn, one fixed reduction, the scalar tail in
 * index order. The arithmetic depends only on K. */
T512I float mv_row(const void *W, qc_dtype dt, int K, const float *x, int prefetch) {
    const size_t es = dt == QC_F32 ? 4 : 2;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int k = 0;
    for (; k + 64 <= K; k += 64) {
        if (prefetch) {
            const char *pf = (const char *)W + (size_t)k * es + MV_PD;
            _mm_prefetch(pf, _MM_HINT_T0);
            _mm_prefetch(pf + 64, _MM_HINT_T0);
            if (es == 4) {
                _mm_prefetch(pf + 128, _MM_HINT_T0);
                _mm_prefetch(pf + 192, _MM_HINT_T0);
            }
        }
        a0 = _mm512_fmadd_ps(ld16(W, dt, (size_t)k), _mm512_loadu_ps(x + k), a0);
        a1 = _mm512_fmadd_ps(ld16(W, dt, (size_t)k + 16), _mm512_loadu_ps(x + k + 16), a1);
        a2 = _mm512_fmadd_ps(ld16(W, dt, (size_t)k + 32), _mm512_loadu_ps(x + k + 32), a2);
        a3 = _mm512_fmadd_ps(ld16(W, dt, (size_t)k + 48), _mm512_loadu_ps(x + k + 48), a3);
    }
    if (k + 16 <= K) { a0 = _mm512_fmadd_ps(ld16(W, dt, (size_t)k), _mm512_loadu_ps(x + k), a0); k += 16; }
    if (k + 16 <= K) { a1 = _mm512_fmadd_ps(ld16(W, dt, (size_t)k), _mm512_loadu_ps(x + k), a1); k += 16; }
    if (k + 16 <= K) { a2 = _mm512_fmadd_ps(ld16(W, dt, (size_t)k), _mm512_loadu_ps(x + k), a2); k += 16; }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; k < K; k++) s += qc_opt_wscalar(W, dt, (size_t)k) * x[k];
    return s;
}

/* BF16 fast path of mv_row, the same numbers: one 512-bit load of 32 bf16 widened by a shift
 * (the even elements) and a mask (the odd ones) -- two in-lane ops instead of two
 * cross-lane zero-extensions and two shifts, which competed with the FMAs for the vector
 * ports (tests/bench_opt_matvec.c: cache-resident BF16 52 -> 58 GB/s, DRAM-bound 10.9 -> 12.6
 * GB/s one thread, the F32 kernel's 11.3) -- against xe, x de-interleaved the same way per 32
 * elements. Each lane of e0 / o0 / e1 / o1 still accumulates one residue of k mod 64 in block
 * order (the lanes of a0..a3 of mv_row, permuted), so re-interleaving them gives a0..a3 bit
 * for bit, and the rest (16-element blocks, reduction, scalar tail) is mv_row's. */
T512I float mv_row_bf16(const void *W, int K, const float *x, const float *xe, int prefetch) {
    const char *Wb = W;
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512 e0 = _mm512_setzero_ps(), o0 = e0, e1 = e0, o1 = e0;
    int k = 0;
    for (; k + 64 <= K; k += 64) {
        if (prefetch) {
            _mm_prefetch(Wb + (size_t)k * 2 + MV_PD_BF16, _MM_HINT_T0);
            _mm_prefetch(Wb + (size_t)k * 2 + MV_PD_BF16 + 64, _MM_HINT_T0);
        }
        const __m512i v0 = _mm512_loadu_si512((const void *)(Wb + (size_t)k * 2));
        const __m512i v1 = _mm512_loadu_si512((const void *)(Wb + (size_t)k * 2 + 64));
        e0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v0, 16)), _mm512_load_ps(xe + k), e0);
        o0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v0, hi)), _mm512_load_ps(xe + k + 16), o0);
        e1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v1, 16)), _mm512_load_ps(xe + k + 32), e1);
        o1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v1, hi)), _mm512_load_ps(xe + k + 48), o1);
    }
    const __m512i ilo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i ihi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    __m512 a0 = _mm512_permutex2var_ps(e0, ilo, o0), a1 = _mm512_permutex2var_ps(e0, ihi, o0);
    __m512 a2 = _mm512_permutex2var_ps(e1, ilo, o1), a3 = _mm512_permutex2var_ps(e1, ihi, o1);
    if (k + 16 <= K) { a0 = _mm512_fmadd_ps(ld16(W, QC_BF16, (size_t)k), _mm512_loadu_ps(x + k), a0); k += 16; }
    if (k + 16 <= K) { a1 = _mm512_fmadd_ps(ld16(W, QC_BF16, (size_t)k), _mm512_loadu_ps(x + k), a1); k += 16; }
    if (k + 16 <= K) { a2 = _mm512_fmadd_ps(ld16(W, QC_BF16, (size_t)k), _mm512_loadu_ps(x + k), a2); k += 16; }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; k < K; k++) s += qc_opt_wscalar(W, QC_BF16, (size_t)k) * x[k];
    return s;
}

/* Q8_0 path of mv_row (K % 32 == 0), the same numbers as mv_row on the dequantized F32 row:
 * a 64-element step is two blocks (a0, a1 | a2, a3), a last odd block goes to a0, a1 as
 * mv_row's two 16-element tail steps; each half-block widened, times the block's d (exact).
 * No software prefetch: on Zen 5 the hardware prefetcher alone streams these rows faster
 * (6144 x 1024 Q8_0 matrices from DRAM, one thread, variants interleaved: 23.6-27.8 GB/s
 * without, 20.7-22.9 with prefetches 1024 bytes ahead, 21.4-22.8 at 2048, 23.3-25.7 at 4096;
 * 0.8B Q8_0 decode, one thread: 22.4-23.6 -> 25.0-25.3 tok/s; docs/performance.md). */
T512I float mv_row_q8(const void *W, int K, const float *x) {
    const unsigned char *Wb = W;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
#define Q8H(b, o) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)((b) + 2 + (o)))))
#define Q8D(b) _mm512_set1_ps(_cvtsh_ss((uint16_t)((b)[0] | (b)[1] << 8)))
    int k = 0;
    for (; k + 64 <= K; k += 64, Wb += 2 * QC_Q8_0_BLOCK_BYTES) {
        const unsigned char *B1 = Wb + QC_Q8_0_BLOCK_BYTES;
        const __m512 d0 = Q8D(Wb), d1 = Q8D(B1);
        a0 = _mm512_fmadd_ps(_mm512_mul_ps(d0, Q8H(Wb, 0)), _mm512_loadu_ps(x + k), a0);
        a1 = _mm512_fmadd_ps(_mm512_mul_ps(d0, Q8H(Wb, 16)), _mm512_loadu_ps(x + k + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_mul_ps(d1, Q8H(B1, 0)), _mm512_loadu_ps(x + k + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_mul_ps(d1, Q8H(B1, 16)), _mm512_loadu_ps(x + k + 48), a3);
    }
    if (k + 32 <= K) {
        const __m512 d0 = Q8D(Wb);
        a0 = _mm512_fmadd_ps(_mm512_mul_ps(d0, Q8H(Wb, 0)), _mm512_loadu_ps(x + k), a0);
        a1 = _mm512_fmadd_ps(_mm512_mul_ps(d0, Q8H(Wb, 16)), _mm512_loadu_ps(x + k + 16), a1);
    }
#undef Q8H
#undef Q8D
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* floats of the de-interleaved copies of x (64 KiB of stack): tokens are taken in groups
 * whose copies fit; a K beyond it takes the generic path */
#define MV_XE 16384

T512I void mv_dt(float *y, long ldy, const void *W, qc_dtype dt, int rows, int K,
                 const float *x, long ldx, int n) {
    const size_t es = dt == QC_F32 ? 4 : 2;
    const int K64 = K / 64 * 64;
    if (dt == QC_Q8_0) {
        const size_t rb = qc_dtype_row_bytes(QC_Q8_0, K);
        for (int r = 0; r < rows; r++)
            for (int t = 0; t < n; t++)
                y[(long)t * ldy + r] = mv_row_q8((const char *)W + (size_t)r * rb, K, x + t * ldx);
        return;
    }
    if (dt == QC_BF16 && K64 > 0 && K64 <= MV_XE) {
        float xe[MV_XE] __attribute__((aligned(64)));
        const int g = MV_XE / K64; /* tokens per group */
        for (int t0 = 0; t0 < n; t0 += g) {
            const int nt = n - t0 < g ? n - t0 : g;
            for (int t = 0; t < nt; t++)
                for (int k = 0; k < K64; k += 32)
                    for (int i = 0; i < 16; i++) {
                        xe[(size_t)t * K64 + k + i] = x[(t0 + t) * ldx + k + 2 * i];
                        xe[(size_t)t * K64 + k + 16 + i] = x[(t0 + t) * ldx + k + 2 * i + 1];
                    }
            for (int r = 0; r < rows; r++) {
                const char *Wr = (const char *)W + (size_t)r * K * es;
                for (int t = 0; t < nt; t++)
                    y[(long)(t0 + t) * ldy + r] =
                        mv_row_bf16(Wr, K, x + (t0 + t) * ldx, xe + (size_t)t * K64, t == 0);
            }
        }
        return;
    }
    for (int r = 0; r < rows; r++) {
        const char *Wr = (const char *)W + (size_t)r * K * es;
        for (int t = 0; t < n; t++) y[(long)t * ldy + r] = mv_row(Wr, dt, K, x + t * ldx, t == 0);
    }
}

T512 static void k5_matvec(float *y, long ldy, const void *W, qc_dtype dt, int rows, int K,
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

/* rows i0..i0+R-1 (R = 6 or 1) x columns j0..j0+63 (masks per vector) */
T512I void nn_block(int K, const float *A, long lda, const float *B, long ldb, float *C, long ldc,
                    int acc, int j0, const __mmask16 m[4], const int R) {
    __m512 c[6][4];
    for (int i = 0; i < R; i++)
        for (int v = 0; v < 4; v++)
            c[i][v] = acc ? _mm512_maskz_loadu_ps(m[v], C + i * ldc + j0 + 16 * v)
                          : _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        const float *Bk = B + k * ldb + j0;
        __m512 b0 = _mm512_maskz_loadu_ps(m[0], Bk), b1 = _mm512_maskz_loadu_ps(m[1], Bk + 16);
        __m512 b2 = _mm512_maskz_loadu_ps(m[2], Bk + 32), b3 = _mm512_maskz_loadu_ps(m[3], Bk + 48);
        for (int i = 0; i < R; i++) {
            __m512 a = _mm512_set1_ps(A[i * lda + k]);
            c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
            c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
            c[i][2] = _mm512_fmadd_ps(a, b2, c[i][2]);
            c[i][3] = _mm512_fmadd_ps(a, b3, c[i][3]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int v = 0; v < 4; v++) _mm512_mask_storeu_ps(C + i * ldc + j0 + 16 * v, m[v], c[i][v]);
}

T512 static void k5_gemm_nn(int M, int N, int K, const float *A, long lda, const float *B,
                            long ldb, float *C, long ldc, int acc) {
    for (int j0 = 0; j0 < N; j0 += 64) {
        __mmask16 m[4];
        for (int v = 0; v < 4; v++) {
            int rem = N - j0 - 16 * v;
            m[v] = rem >= 16 ? 0xFFFF : rem <= 0 ? 0 : tail_mask(rem);
        }
        int i = 0;
        for (; i + 6 <= M; i += 6) nn_block(K, A + i * lda, lda, B, ldb, C + i * ldc, ldc, acc, j0, m, 6);
        for (; i < M; i++) nn_block(K, A + i * lda, lda, B, ldb, C + i * ldc, ldc, acc, j0, m, 1);
    }
}

T512 static float k5_dot(const float *a, const float *b, int n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    if (i < n) {
        int m = n - i >= 16 ? 16 : n - i;
        __mmask16 k = tail_mask(m);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i), s0);
        i += m;
        if (i < n) {
            k = tail_mask(n - i);
            s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i), s1);
        }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

T512 static float k5_sumsq(const float *x, int n) { return k5_dot(x, x, n); }

/* k5_dot of q against four keys at once (four independent pairs of chains, q loaded once):
 * each score is the same operations as k5_dot, in the same order */
T512 static void k5_attn_scores(float *sc, const float *q, const float *Kb, long ldk, int nb,
                                int hd, float scale) {
    int i = 0;
    for (; i + 4 <= nb; i += 4) {
        const float *k0 = Kb + (size_t)i * ldk, *k1 = k0 + ldk, *k2 = k1 + ldk, *k3 = k2 + ldk;
        __m512 s00 = _mm512_setzero_ps(), s01 = s00, s10 = s00, s11 = s00;
        __m512 s20 = s00, s21 = s00, s30 = s00, s31 = s00;
        int e = 0;
        for (; e + 32 <= hd; e += 32) {
            const __m512 qa = _mm512_loadu_ps(q + e), qb = _mm512_loadu_ps(q + e + 16);
            s00 = _mm512_fmadd_ps(qa, _mm512_loadu_ps(k0 + e), s00);
            s01 = _mm512_fmadd_ps(qb, _mm512_loadu_ps(k0 + e + 16), s01);
            s10 = _mm512_fmadd_ps(qa, _mm512_loadu_ps(k1 + e), s10);
            s11 = _mm512_fmadd_ps(qb, _mm512_loadu_ps(k1 + e + 16), s11);
            s20 = _mm512_fmadd_ps(qa, _mm512_loadu_ps(k2 + e), s20);
            s21 = _mm512_fmadd_ps(qb, _mm512_loadu_ps(k2 + e + 16), s21);
            s30 = _mm512_fmadd_ps(qa, _mm512_loadu_ps(k3 + e), s30);
            s31 = _mm512_fmadd_ps(qb, _mm512_loadu_ps(k3 + e + 16), s31);
        }
        if (e < hd) { /* k5_dot's tails, per key */
            const int m = hd - e >= 16 ? 16 : hd - e;
            __mmask16 km = tail_mask(m);
            const __m512 qa = _mm512_maskz_loadu_ps(km, q + e);
            s00 = _mm512_fmadd_ps(qa, _mm512_maskz_loadu_ps(km, k0 + e), s00);
            s10 = _mm512_fmadd_ps(qa, _mm512_maskz_loadu_ps(km, k1 + e), s10);
            s20 = _mm512_fmadd_ps(qa, _mm512_maskz_loadu_ps(km, k2 + e), s20);
            s30 = _mm512_fmadd_ps(qa, _mm512_maskz_loadu_ps(km, k3 + e), s30);
            const int e2 = e + m;
            if (e2 < hd) {
                km = tail_mask(hd - e2);
                const __m512 qb = _mm512_maskz_loadu_ps(km, q + e2);
                s01 = _mm512_fmadd_ps(qb, _mm512_maskz_loadu_ps(km, k0 + e2), s01);
                s11 = _mm512_fmadd_ps(qb, _mm512_maskz_loadu_ps(km, k1 + e2), s11);
                s21 = _mm512_fmadd_ps(qb, _mm512_maskz_loadu_ps(km, k2 + e2), s21);
                s31 = _mm512_fmadd_ps(qb, _mm512_maskz_loadu_ps(km, k3 + e2), s31);
            }
        }
        sc[i] = _mm512_reduce_add_ps(_mm512_add_ps(s00, s01)) * scale;
        sc[i + 1] = _mm512_reduce_add_ps(_mm512_add_ps(s10, s11)) * scale;
        sc[i + 2] = _mm512_reduce_add_ps(_mm512_add_ps(s20, s21)) * scale;
        sc[i + 3] = _mm512_reduce_add_ps(_mm512_add_ps(s30, s31)) * scale;
    }
    for (; i < nb; i++) sc[i] = k5_dot(q, Kb + (size_t)i * ldk, hd) * scale;
}

/* out += p[i] * V[i] for i in key order, 128 columns at a time held in registers across the
 * keys: per element the FMA chain of nb k5_axpy calls */
/* Two queries against the same keys: per key and query the chain of k5_attn_scores (two
 * 16-lane accumulators over 32-element steps, k5_dot's tails, one reduction, * scale), so
 * sc0 / sc1 are bit for bit k5_attn_scores of q0 / q1; each K load now serves both queries
 * (one query and four keys took 10 loads for 8 FMAs: load bound). */
T512 static void k5_attn_scores2(float *sc0, float *sc1, const float *q0, const float *q1,
                                 const float *Kb, long ldk, int nb, int hd, float scale) {
    int i = 0;
    for (; i + 4 <= nb; i += 4) {
        const float *kr[4] = {Kb + (size_t)i * ldk, Kb + (size_t)(i + 1) * ldk,
                              Kb + (size_t)(i + 2) * ldk, Kb + (size_t)(i + 3) * ldk};
        __m512 a[4][2], b[4][2]; /* [key][half]: query 0, query 1 */
        for (int r = 0; r < 4; r++) a[r][0] = a[r][1] = b[r][0] = b[r][1] = _mm512_setzero_ps();
        int e = 0;
        for (; e + 32 <= hd; e += 32) {
            const __m512 qa0 = _mm512_loadu_ps(q0 + e), qb0 = _mm512_loadu_ps(q0 + e + 16);
            const __m512 qa1 = _mm512_loadu_ps(q1 + e), qb1 = _mm512_loadu_ps(q1 + e + 16);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                const __m512 ka = _mm512_loadu_ps(kr[r] + e), kb = _mm512_loadu_ps(kr[r] + e + 16);
                a[r][0] = _mm512_fmadd_ps(qa0, ka, a[r][0]);
                a[r][1] = _mm512_fmadd_ps(qb0, kb, a[r][1]);
                b[r][0] = _mm512_fmadd_ps(qa1, ka, b[r][0]);
                b[r][1] = _mm512_fmadd_ps(qb1, kb, b[r][1]);
            }
        }
        if (e < hd) { /* k5_dot's tails, per key */
            const int m = hd - e >= 16 ? 16 : hd - e;
            __mmask16 km = tail_mask(m);
            const __m512 qa0 = _mm512_maskz_loadu_ps(km, q0 + e), qa1 = _mm512_maskz_loadu_ps(km, q1 + e);
            for (int r = 0; r < 4; r++) {
                const __m512 ka = _mm512_maskz_loadu_ps(km, kr[r] + e);
                a[r][0] = _mm512_fmadd_ps(qa0, ka, a[r][0]);
                b[r][0] = _mm512_fmadd_ps(qa1, ka, b[r][0]);
            }
            const int e2 = e + m;
            if (e2 < hd) {
                km = tail_mask(hd - e2);
                const __m512 qb0 = _mm512_maskz_loadu_ps(km, q0 + e2), qb1 = _mm512_maskz_loadu_ps(km, q1 + e2);
                for (int r = 0; r < 4; r++) {
                    const __m512 kb = _mm512_maskz_loadu_ps(km, kr[r] + e2);
                    a[r][1] = _mm512_fmadd_ps(qb0, kb, a[r][1]);
                    b[r][1] = _mm512_fmadd_ps(qb1, kb, b[r][1]);
                }
            }
        }
        for (int r = 0; r < 4; r++) {
            sc0[i + r] = _mm512_reduce_add_ps(_mm512_add_ps(a[r][0], a[r][1])) * scale;
            sc1[i + r] = _mm512_reduce_add_ps(_mm512_add_ps(b[r][0], b[r][1])) * scale;
        }
    }
    for (; i < nb; i++) {
        sc0[i] = k5_dot(q0, Kb + (size_t)i * ldk, hd) * scale;
        sc1[i] = k5_dot(q1, Kb + (size_t)i * ldk, hd) * scale;
    }
}

T512 static void k5_attn_pv(float *out, const float *p, const float *Vb, long ldv, int nb, int hd) {
    for (int c0 = 0; c0 < hd; c0 += 128) {
        __mmask16 km[8];
        __m512 acc[8];
        const int nv = (hd - c0 + 15) / 16 < 8 ? (hd - c0 + 15) / 16 : 8;
        for (int v = 0; v < nv; v++) {
            const int rem = hd - c0 - 16 * v;
            km[v] = rem >= 16 ? (__mmask16)0xFFFF : tail_mask(rem);
            acc[v] = _mm512_maskz_loadu_ps(km[v], out + c0 + 16 * v);
        }
        if (nv == 8) {
            for (int i = 0; i < nb; i++) {
                const float *vr = Vb + (size_t)i * ldv + c0;
                const __m512 pa = _mm512_set1_ps(p[i]);
#pragma GCC unroll 8
                for (int v = 0; v < 8; v++)
                    acc[v] = _mm512_fmadd_ps(pa, _mm512_maskz_loadu_ps(km[v], vr + 16 * v), acc[v]);
            }
        } else {
            for (int i = 0; i < nb; i++) {
                const float *vr = Vb + (size_t)i * ldv + c0;
                const __m512 pa = _mm512_set1_ps(p[i]);
                for (int v = 0; v < nv; v++)
                    acc[v] = _mm512_fmadd_ps(pa, _mm512_maskz_loadu_ps(km[v], vr + 16 * v), acc[v]);
            }
        }
        for (int v = 0; v < nv; v++) _mm512_mask_storeu_ps(out + c0 + 16 * v, km[v], acc[v]);
    }
}

/* Two outputs against the same values: each element of out0 / out1 the chain of k5_attn_pv
 * (fma(p[i], V[i], out) in key order, 128-column chunks), bit for bit; each V load serves
 * both (one query: a load per FMA) */
T512 static void k5_attn_pv2(float *out0, float *out1, const float *p0, const float *p1,
                             const float *Vb, long ldv, int nb, int hd) {
    for (int c0 = 0; c0 < hd; c0 += 128) {
        const int nv = (hd - c0 + 15) / 16 < 8 ? (hd - c0 + 15) / 16 : 8;
        if (nv < 8) { /* the last, narrower chunk: one query at a time */
            k5_attn_pv(out0 + c0, p0, Vb + c0, ldv, nb, hd - c0);
            k5_attn_pv(out1 + c0, p1, Vb + c0, ldv, nb, hd - c0);
            continue;
        }
        __m512 a[8], b[8];
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) {
            a[v] = _mm512_loadu_ps(out0 + c0 + 16 * v);
            b[v] = _mm512_loadu_ps(out1 + c0 + 16 * v);
        }
        for (int i = 0; i < nb; i++) {
            const float *vr = Vb + (size_t)i * ldv + c0;
            const __m512 pa = _mm512_set1_ps(p0[i]), pb = _mm512_set1_ps(p1[i]);
#pragma GCC unroll 8
            for (int v = 0; v < 8; v++) {
                const __m512 vv = _mm512_loadu_ps(vr + 16 * v);
                a[v] = _mm512_fmadd_ps(pa, vv, a[v]);
                b[v] = _mm512_fmadd_ps(pb, vv, b[v]);
            }
        }
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) {
            _mm512_storeu_ps(out0 + c0 + 16 * v, a[v]);
            _mm512_storeu_ps(out1 + c0 + 16 * v, b[v]);
        }
    }
}


T512 static void k5_axpy(float *y, float a, const float *x, int n) {
    __m512 va = _mm512_set1_ps(a);
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
        __m512 v = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, y + i));
        _mm512_mask_storeu_ps(y + i, k, v);
    }
}

T512 static void k5_scale(float *y, float a, int n) {
    __m512 va = _mm512_set1_ps(a);
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(va, _mm512_maskz_loadu_ps(k, y + i)));
    }
}

T512 static void k5_mul(float *y, const float *a, const float *b, int n) {
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, k,
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i)));
    }
}

/* ===================================================================================== */
/* Elementwise transcendental                                                             */
/* ===================================================================================== */

T512 static void k5_vexp(float *y, const float *x, int n) {
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, k, exp512(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

T512I __m512 silu512(__m512 x) {
    __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

T512 static void k5_silu(float *y, const float *x, int n) {
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, k, silu512(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

T512 static void k5_silu_mul(float *g, const float *u, int n) {
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
        __m512 v = _mm512_mul_ps(silu512(_mm512_maskz_loadu_ps(k, g + i)), _mm512_maskz_loadu_ps(k, u + i));
        _mm512_mask_storeu_ps(g + i, k, v);
    }
}

T512 static void k5_sigmoid_mul(float *y, const float *g, int n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
        __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(k, g + i)));
        __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), s));
    }
}

/* ===================================================================================== */
/* Machine probes                                                                         */
/* ===================================================================================== */

T512 static uint32_t k5_stream_read(const void *p, size_t bytes) {
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    const char *q = p;
    size_t i = 0;
    for (; i + 256 <= bytes; i += 256) {
        /* prefetched like the matvec stream, so the probe measures the same access pattern */
        _mm_prefetch(q + i + MV_PD, _MM_HINT_T0);
        _mm_prefetch(q + i + MV_PD + 64, _MM_HINT_T0);
        _mm_prefetch(q + i + MV_PD + 128, _MM_HINT_T0);
        _mm_prefetch(q + i + MV_PD + 192, _MM_HINT_T0);
        a = _mm512_xor_si512(a, _mm512_loadu_si512((const void *)(q + i)));
        b = _mm512_xor_si512(b, _mm512_loadu_si512((const void *)(q + i + 64)));
        c = _mm512_xor_si512(c, _mm512_loadu_si512((const void *)(q + i + 128)));
        d = _mm512_xor_si512(d, _mm512_loadu_si512((const void *)(q + i + 192)));
    }
    a = _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d));
    uint32_t w[16], r = 0;
    _mm512_storeu_si512((void *)w, a);
    for (int j = 0; j < 16; j++) r ^= w[j];
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
T512 static float k5_fma_burn(long iters, float seed) {
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
#define FB_INIT(j) __m512 a##j = _mm512_set1_ps(seed + (float)j)
    FB_INIT(0); FB_INIT(1); FB_INIT(2); FB_INIT(3); FB_INIT(4); FB_INIT(5);
    FB_INIT(6); FB_INIT(7); FB_INIT(8); FB_INIT(9); FB_INIT(10); FB_INIT(11);
#undef FB_INIT
#define FB_STEP(j) a##j = _mm512_fmadd_ps(a##j, m, c)
#define FB_ROUND FB_STEP(0); FB_STEP(1); FB_STEP(2); FB_STEP(3); FB_STEP(4); FB_STEP(5); \
                 FB_STEP(6); FB_STEP(7); FB_STEP(8); FB_STEP(9); FB_STEP(10); FB_STEP(11)
    for (long i = 0; i < iters; i++) {
        FB_ROUND;
        FB_ROUND;
    }
#undef FB_ROUND
#undef FB_STEP
    __m512 s0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)), _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    __m512 s1 = _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11));
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static const qc_opt_kernels k5_table = {
    .isa = "AVX-512",
    .gemm_mr = MR,
    .gemm_nr = NR,
    .lanes = 16,
    .pack_w = k5_pack_w,
    .pack_x = k5_pack_x,
    .gemm_tile = k5_gemm_tile,
    .matvec = k5_matvec,
    .gemm_nn = k5_gemm_nn,
    .dot = k5_dot,
    .sumsq = k5_sumsq,
    .axpy = k5_axpy,
    .attn_scores = k5_attn_scores,
    .attn_pv = k5_attn_pv,
    .attn_scores2 = k5_attn_scores2,
    .attn_pv2 = k5_attn_pv2,
    .scale = k5_scale,
    .mul = k5_mul,
    .vexp = k5_vexp,
    .silu = k5_silu,
    .silu_mul = k5_silu_mul,
    .sigmoid_mul = k5_sigmoid_mul,
    .stream_read = k5_stream_read,
    .fma_burn = k5_fma_burn,
};

const qc_opt_kernels *const qc_opt_kernels_avx512_ptr = &k5_table;
