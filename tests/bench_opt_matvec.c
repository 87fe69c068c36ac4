/* bench_opt_matvec.c — microbenchmark of the optimized backend's decode matrix-vector kernel
 * alone, on the real Qwen3.5-0.8B projection shapes (issue #16 item 3: why BF16 decode moves
 * fewer bytes per second than F32).
 *
 *   qc_bench_matvec [--layers L] [--reps R] [--isa avx512|avx2|scalar] [--variants] [--l2]
 *
 * Builds L copies of one DeltaNet layer's projections (in_proj_qkv 6144x1024, in_proj_z
 * 2048x1024, out_proj 1024x2048, mlp gate / up 3584x1024, down 1024x3584: 21.5 M weights a
 * layer; default L = 12: 516 MB BF16, 1 GB F32, well beyond the last-level cache) in F32 and in
 * BF16, and times one pass of every matrix, one token, on ONE thread, in items of 64 rows as
 * the backend hands them out. F32 and BF16 passes are interleaved (F32, BF16, F32, ...), so
 * both see the same machine load; the report gives the minimum and the median GB/s of weight
 * bytes, and for the AVX-512 / AVX2 tables also "old BF16": the BF16 loop before the
 * shift / mask widening (zero-extend + shift), checked to give the same bits. --variants also
 * times the experimental kernels below (same numbers required: each is
 * checked bit for bit against the table's matvec before it is timed). --l2: one 256x1024 matrix
 * passed again and again (cache resident: the kernel's compute limit, not memory's).
 *
 * Not a test (the numbers depend on the machine): built as an executable, never run by CTest.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qc/qc_model.h"
#include "../optimized/qc_opt_kernels.h"

/* ===================================================================================== */
/* Shapes and buffers                                                                     */
/* ===================================================================================== */

static const int SH[][2] = {{6144, 1024}, {2048, 1024}, {1024, 2048},
                            {3584, 1024}, {3584, 1024}, {1024, 3584}};
#define NSH 6

typedef struct {
    void *w[64 * NSH];
    int rows[64 * NSH], K[64 * NSH];
    int nmat;
    double bytes;
} mats;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint32_t rng = 12345u;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xFFFF) / 65536.0f - 0.5f;
}

static void mats_make(mats *m, int layers, qc_dtype dt) {
    memset(m, 0, sizeof *m);
    for (int l = 0; l < layers; l++)
        for (int s = 0; s < NSH; s++) {
            const size_t n = (size_t)SH[s][0] * SH[s][1], es = dt == QC_F32 ? 4 : 2;
            char *p = aligned_alloc(64, n * es);
            if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
            for (size_t i = 0; i < n; i++) {
                float f = frand();
                if (dt == QC_F32) memcpy(p + 4 * i, &f, 4);
                else {
                    uint32_t u;
                    memcpy(&u, &f, 4);
                    uint16_t b = (uint16_t)(u >> 16);
                    memcpy(p + 2 * i, &b, 2);
                }
            }
            m->w[m->nmat] = p;
            m->rows[m->nmat] = SH[s][0];
            m->K[m->nmat] = SH[s][1];
            m->nmat++;
            m->bytes += (double)n * (double)es;
        }
}

/* --l2: one 256x1024 matrix (1 MB F32, 512 KB BF16) passed 256 times: the compute limit */
static void mats_l2(mats *m, qc_dtype dt) {
    memset(m, 0, sizeof *m);
    const size_t n = (size_t)256 * 1024, es = dt == QC_F32 ? 4 : 2;
    char *p = aligned_alloc(64, n * es);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (size_t i = 0; i < n; i++) {
        float f = frand();
        uint32_t u;
        memcpy(&u, &f, 4);
        uint16_t b = (uint16_t)(u >> 16);
        if (dt == QC_F32) memcpy(p + 4 * i, &f, 4);
        else memcpy(p + 2 * i, &b, 2);
    }
    for (int i = 0; i < 64 * NSH; i++) {
        m->w[i] = p;
        m->rows[i] = 256;
        m->K[i] = 1024;
        m->bytes += (double)n * (double)es;
    }
    m->nmat = 64 * NSH;
}

typedef void (*mv_fn)(float *y, long ldy, const void *W, qc_dtype dt, int rows, int K,
                      const float *x, long ldx, int n);

/* one pass over every matrix, items of 64 rows (the backend's MV_CHUNK_ROWS) */
static double pass(const mats *m, qc_dtype dt, mv_fn fn, const float *x, float *y) {
    const size_t es = dt == QC_F32 ? 4 : 2;
    double t0 = now_s();
    for (int i = 0; i < m->nmat; i++)
        for (int r0 = 0; r0 < m->rows[i]; r0 += 64)
            fn(y + r0, 1, (const char *)m->w[i] + (size_t)r0 * m->K[i] * es, dt, 64, m->K[i], x, 0, 1);
    return now_s() - t0;
}

/* ===================================================================================== */
/* Experimental AVX-512 variants (each must equal the table's matvec bit for bit)          */
/* ===================================================================================== */

#define T512 __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))

/* the table's structure with a prefetch distance PD (0: none) */
#define MV_VARIANT(NAME, PD)                                                                   \
    T512 static void NAME(float *y, long ldy, const void *W, qc_dtype dt, int rows, int K,    \
                          const float *x, long ldx, int n) {                                   \
        (void)ldx; (void)n;                                                                    \
        const size_t es = dt == QC_F32 ? 4 : 2;                                                \
        for (int r = 0; r < rows; r++) {                                                       \
            const char *Wr = (const char *)W + (size_t)r * K * es;                            \
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                        \
            int k = 0;                                                                         \
            for (; k + 64 <= K; k += 64) {                                                     \
                if (PD) {                                                                      \
                    const char *pf = Wr + (size_t)k * es + (PD);                               \
                    _mm_prefetch(pf, _MM_HINT_T0);                                             \
                    _mm_prefetch(pf + 64, _MM_HINT_T0);                                        \
                    if (es == 4) { _mm_prefetch(pf + 128, _MM_HINT_T0); _mm_prefetch(pf + 192, _MM_HINT_T0); } \
                }                                                                              \
                __m512 w0, w1, w2, w3;                                                         \
                if (dt == QC_F32) {                                                            \
                    const float *f = (const float *)(const void *)Wr + k;                      \
                    w0 = _mm512_loadu_ps(f); w1 = _mm512_loadu_ps(f + 16);                     \
                    w2 = _mm512_loadu_ps(f + 32); w3 = _mm512_loadu_ps(f + 48);               \
                } else {                                                                       \
                    const __m256i *h = (const __m256i *)(const void *)(Wr + (size_t)k * 2);   \
                    w0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(h)), 16)); \
                    w1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(h + 1)), 16)); \
                    w2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(h + 2)), 16)); \
                    w3 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(h + 3)), 16)); \
                }                                                                              \
                a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + k), a0);                          \
                a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + k + 16), a1);                     \
                a2 = _mm512_fmadd_ps(w2, _mm512_loadu_ps(x + k + 32), a2);                     \
                a3 = _mm512_fmadd_ps(w3, _mm512_loadu_ps(x + k + 48), a3);                     \
            }                                                                                  \
            y[(long)r * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))); \
        }                                                                                      \
    }

MV_VARIANT(mv_pf0, 0)
MV_VARIANT(mv_pf1k, 1024)
MV_VARIANT(mv_pf2k, 2048)
MV_VARIANT(mv_pf4k, 4096)
MV_VARIANT(mv_pf8k, 8192)

/* BF16, K % 64 == 0: widening by shift (even elements) and mask (odd elements) of one 512-bit
 * load of 32 values, against x de-interleaved once per call; per-lane sums identical to the
 * table's (each lane still sums one residue mod 64 in block order), re-interleaved before the
 * same reduction. */
#define MV_EO(NAME, PD)                                                                       \
    T512 static void NAME(float *y, long ldy, const void *W, qc_dtype dt, int rows, int K,    \
                          const float *x, long ldx, int n) {                                   \
        (void)ldx; (void)n; (void)dt;                                                          \
        float xe[4096] __attribute__((aligned(64)));                                           \
        for (int k = 0; k < K; k += 32)                                                        \
            for (int i = 0; i < 16; i++) {                                                     \
                xe[k + i] = x[k + 2 * i];                                                      \
                xe[k + 16 + i] = x[k + 2 * i + 1];                                             \
            }                                                                                  \
        const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);                                \
        const __m512i ilo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23); \
        const __m512i ihi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31); \
        for (int r = 0; r < rows; r++) {                                                       \
            const char *Wr = (const char *)W + (size_t)r * K * 2;                             \
            __m512 e0 = _mm512_setzero_ps(), o0 = e0, e1 = e0, o1 = e0;                        \
            for (int k = 0; k < K; k += 64) {                                                  \
                const char *pf = Wr + (size_t)k * 2 + (PD);                                    \
                _mm_prefetch(pf, _MM_HINT_T0);                                                 \
                _mm_prefetch(pf + 64, _MM_HINT_T0);                                            \
                __m512i v0 = _mm512_loadu_si512((const void *)(Wr + (size_t)k * 2));           \
                __m512i v1 = _mm512_loadu_si512((const void *)(Wr + (size_t)k * 2 + 64));      \
                e0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v0, 16)), _mm512_load_ps(xe + k), e0); \
                o0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v0, hi)), _mm512_load_ps(xe + k + 16), o0); \
                e1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v1, 16)), _mm512_load_ps(xe + k + 32), e1); \
                o1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v1, hi)), _mm512_load_ps(xe + k + 48), o1); \
            }                                                                                  \
            __m512 a0 = _mm512_permutex2var_ps(e0, ilo, o0), a1 = _mm512_permutex2var_ps(e0, ihi, o0); \
            __m512 a2 = _mm512_permutex2var_ps(e1, ilo, o1), a3 = _mm512_permutex2var_ps(e1, ihi, o1); \
            y[(long)r * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))); \
        }                                                                                      \
    }

MV_EO(mv_bf16_eo, 2048)
MV_EO(mv_bf16_eo4k, 4096)
MV_EO(mv_bf16_eo8k, 8192)


/* even / odd widening, two rows interleaved (eight independent FMA chains) */
#define MV_EO2(NAME, PD)                                                                      \
    T512 static void NAME(float *y, long ldy, const void *W, qc_dtype dt, int rows, int K,    \
                          const float *x, long ldx, int n) {                                   \
        (void)ldx; (void)n; (void)dt;                                                          \
        float xe[4096] __attribute__((aligned(64)));                                           \
        for (int k = 0; k < K; k += 32)                                                        \
            for (int i = 0; i < 16; i++) {                                                     \
                xe[k + i] = x[k + 2 * i];                                                      \
                xe[k + 16 + i] = x[k + 2 * i + 1];                                             \
            }                                                                                  \
        const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);                                \
        const __m512i ilo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23); \
        const __m512i ihi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31); \
        for (int r = 0; r < rows; r += 2) {                                                    \
            const char *Wa = (const char *)W + (size_t)r * K * 2, *Wb = Wa + (size_t)K * 2;   \
            __m512 e0 = _mm512_setzero_ps(), o0 = e0, e1 = e0, o1 = e0;                        \
            __m512 f0 = e0, p0 = e0, f1 = e0, p1 = e0;                                         \
            for (int k = 0; k < K; k += 64) {                                                  \
                _mm_prefetch(Wa + (size_t)k * 2 + (PD), _MM_HINT_T0);                          \
                _mm_prefetch(Wa + (size_t)k * 2 + (PD) + 64, _MM_HINT_T0);                     \
                _mm_prefetch(Wb + (size_t)k * 2 + (PD), _MM_HINT_T0);                          \
                _mm_prefetch(Wb + (size_t)k * 2 + (PD) + 64, _MM_HINT_T0);                     \
                const __m512 x0 = _mm512_load_ps(xe + k), x1 = _mm512_load_ps(xe + k + 16);    \
                const __m512 x2 = _mm512_load_ps(xe + k + 32), x3 = _mm512_load_ps(xe + k + 48); \
                __m512i v0 = _mm512_loadu_si512((const void *)(Wa + (size_t)k * 2));           \
                __m512i v1 = _mm512_loadu_si512((const void *)(Wa + (size_t)k * 2 + 64));      \
                __m512i u0 = _mm512_loadu_si512((const void *)(Wb + (size_t)k * 2));           \
                __m512i u1 = _mm512_loadu_si512((const void *)(Wb + (size_t)k * 2 + 64));      \
                e0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v0, 16)), x0, e0);  \
                o0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v0, hi)), x1, o0);   \
                e1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v1, 16)), x2, e1);  \
                o1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v1, hi)), x3, o1);   \
                f0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(u0, 16)), x0, f0);  \
                p0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(u0, hi)), x1, p0);   \
                f1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(u1, 16)), x2, f1);  \
                p1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(u1, hi)), x3, p1);   \
            }                                                                                  \
            __m512 a0 = _mm512_permutex2var_ps(e0, ilo, o0), a1 = _mm512_permutex2var_ps(e0, ihi, o0); \
            __m512 a2 = _mm512_permutex2var_ps(e1, ilo, o1), a3 = _mm512_permutex2var_ps(e1, ihi, o1); \
            y[(long)r * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))); \
            a0 = _mm512_permutex2var_ps(f0, ilo, p0); a1 = _mm512_permutex2var_ps(f0, ihi, p0); \
            a2 = _mm512_permutex2var_ps(f1, ilo, p1); a3 = _mm512_permutex2var_ps(f1, ihi, p1); \
            y[(long)(r + 1) * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))); \
        }                                                                                      \
    }

MV_EO2(mv_bf16_eo2, 2048)
MV_EO2(mv_bf16_eo2_4k, 4096)

/* two rows interleaved (two streams), table structure */
T512 static void mv_2row(float *y, long ldy, const void *W, qc_dtype dt, int rows, int K,
                         const float *x, long ldx, int n) {
    (void)ldx; (void)n;
    const size_t es = dt == QC_F32 ? 4 : 2;
    for (int r = 0; r < rows; r += 2) {
        const char *Wa = (const char *)W + (size_t)r * K * es, *Wb = Wa + (size_t)K * es;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        for (int k = 0; k < K; k += 64) {
            __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
            __m512 x2 = _mm512_loadu_ps(x + k + 32), x3 = _mm512_loadu_ps(x + k + 48);
#define WLD(P, j) (dt == QC_F32 ? _mm512_loadu_ps((const float *)(const void *)(P) + k + 16 * (j)) \
    : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)((P) + (size_t)(k + 16 * (j)) * 2))), 16)))
            a0 = _mm512_fmadd_ps(WLD(Wa, 0), x0, a0); a1 = _mm512_fmadd_ps(WLD(Wa, 1), x1, a1);
            a2 = _mm512_fmadd_ps(WLD(Wa, 2), x2, a2); a3 = _mm512_fmadd_ps(WLD(Wa, 3), x3, a3);
            b0 = _mm512_fmadd_ps(WLD(Wb, 0), x0, b0); b1 = _mm512_fmadd_ps(WLD(Wb, 1), x1, b1);
            b2 = _mm512_fmadd_ps(WLD(Wb, 2), x2, b2); b3 = _mm512_fmadd_ps(WLD(Wb, 3), x3, b3);
#undef WLD
        }
        y[(long)r * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
        y[(long)(r + 1) * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(b0, b1), _mm512_add_ps(b2, b3)));
    }
}


/* the AVX2 table's BF16 loop before the shift / mask widening (zero-extend + shift per 8) */
#define T2 __attribute__((target("avx2,fma,f16c")))
T2 static void mv_avx2_old(float *y, long ldy, const void *W, qc_dtype dt, int rows, int K,
                           const float *x, long ldx, int n) {
    (void)ldx; (void)n; (void)dt;
    for (int r = 0; r < rows; r++) {
        const uint16_t *Wr = (const uint16_t *)W + (size_t)r * K;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int k = 0; k < K; k += 32) {
            _mm_prefetch((const char *)(Wr + k) + 2048, _MM_HINT_T0);
#define L8(j) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(Wr + k + 8 * (j)))), 16))
            a0 = _mm256_fmadd_ps(L8(0), _mm256_loadu_ps(x + k), a0);
            a1 = _mm256_fmadd_ps(L8(1), _mm256_loadu_ps(x + k + 8), a1);
            a2 = _mm256_fmadd_ps(L8(2), _mm256_loadu_ps(x + k + 16), a2);
            a3 = _mm256_fmadd_ps(L8(3), _mm256_loadu_ps(x + k + 24), a3);
#undef L8
        }
        __m256 v = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
        __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
        lo = _mm_add_ps(lo, hi);
        lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
        lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
        y[(long)r * ldy] = _mm_cvtss_f32(lo);
    }
}

/* ===================================================================================== */
/* Driver                                                                                 */
/* ===================================================================================== */

typedef struct {
    const char *name;
    mv_fn fn;
    qc_dtype dt;
    double t[64];
    int nt;
} variant;

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* bit-for-bit against the table on the first matrix of each shape */
static int same_numbers(const mats *m, qc_dtype dt, mv_fn fn, mv_fn ref, const float *x) {
    static float y1[8192], y2[8192];
    const size_t es = dt == QC_F32 ? 4 : 2;
    for (int i = 0; i < NSH && i < m->nmat; i++) {
        for (int r0 = 0; r0 < m->rows[i]; r0 += 64) {
            ref(y1 + r0, 1, (const char *)m->w[i] + (size_t)r0 * m->K[i] * es, dt, 64, m->K[i], x, 0, 1);
            fn(y2 + r0, 1, (const char *)m->w[i] + (size_t)r0 * m->K[i] * es, dt, 64, m->K[i], x, 0, 1);
        }
        if (memcmp(y1, y2, (size_t)m->rows[i] * 4) != 0) return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    int layers = 12, reps = 7, with_variants = 0, l2 = 0;
    const char *isa = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) isa = argv[++i];
        else if (!strcmp(argv[i], "--variants")) with_variants = 1;
        else if (!strcmp(argv[i], "--l2")) l2 = 1;
        else {
            fprintf(stderr, "usage: qc_bench_matvec [--layers L] [--reps R] [--isa avx512|avx2|scalar] [--variants] [--l2]\n");
            return 2;
        }
    }
    if (layers < 1 || layers > 64 || reps < 1 || reps > 64) {
        fprintf(stderr, "qc_bench_matvec: --layers 1..64, --reps 1..64\n");
        return 2;
    }
    const qc_opt_kernels *kt = isa ? qc_opt_kernels_by_name(isa) : qc_opt_kernels_pick();
    if (!kt) {
        fprintf(stderr, "qc_bench_matvec: ISA '%s' unknown or not supported by this CPU\n", isa);
        return 2;
    }
    mats mf, mb;
    if (l2) {
        mats_l2(&mf, QC_F32);
        mats_l2(&mb, QC_BF16);
    } else {
        mats_make(&mf, layers, QC_F32);
        mats_make(&mb, layers, QC_BF16);
    }
    static float x[4096] __attribute__((aligned(64))), y[8192];
    for (int i = 0; i < 4096; i++) x[i] = frand();

    variant v[32];
    int nv = 0;
    v[nv++] = (variant){"table F32", kt->matvec, QC_F32, {0}, 0};
    v[nv++] = (variant){"table BF16", kt->matvec, QC_BF16, {0}, 0};
    const int avx512 = !strcmp(kt->isa, "AVX-512"), avx2 = !strcmp(kt->isa, "AVX2");
    if (avx512) v[nv++] = (variant){"old BF16", mv_pf2k, QC_BF16, {0}, 0};
    if (avx2) v[nv++] = (variant){"old BF16", mv_avx2_old, QC_BF16, {0}, 0};
    const int nfixed = nv;
    for (int i = 2; i < nfixed; i++)
        if (!same_numbers(&mb, QC_BF16, v[i].fn, kt->matvec, x))
            printf("note: variant %s differs from the table's numbers\n", v[i].name);
    if (with_variants && avx512) {
        v[nv++] = (variant){"pf0 F32", mv_pf0, QC_F32, {0}, 0};
        v[nv++] = (variant){"pf0 BF16", mv_pf0, QC_BF16, {0}, 0};
        v[nv++] = (variant){"pf1k BF16", mv_pf1k, QC_BF16, {0}, 0};
        v[nv++] = (variant){"pf4k BF16", mv_pf4k, QC_BF16, {0}, 0};
        v[nv++] = (variant){"pf8k BF16", mv_pf8k, QC_BF16, {0}, 0};
        v[nv++] = (variant){"pf4k F32", mv_pf4k, QC_F32, {0}, 0};
        v[nv++] = (variant){"evenodd BF16", mv_bf16_eo, QC_BF16, {0}, 0};
        v[nv++] = (variant){"eo pf4k BF16", mv_bf16_eo4k, QC_BF16, {0}, 0};
        v[nv++] = (variant){"eo pf8k BF16", mv_bf16_eo8k, QC_BF16, {0}, 0};
        v[nv++] = (variant){"pf8k F32", mv_pf8k, QC_F32, {0}, 0};
        v[nv++] = (variant){"eo2 BF16", mv_bf16_eo2, QC_BF16, {0}, 0};
        v[nv++] = (variant){"eo2 pf4k BF16", mv_bf16_eo2_4k, QC_BF16, {0}, 0};
        v[nv++] = (variant){"2row BF16", mv_2row, QC_BF16, {0}, 0};
        v[nv++] = (variant){"2row F32", mv_2row, QC_F32, {0}, 0};
        for (int i = nfixed; i < nv; i++)
            if (!same_numbers(v[i].dt == QC_F32 ? &mf : &mb, v[i].dt, v[i].fn, kt->matvec, x))
                printf("note: variant %s differs from the table's numbers\n", v[i].name);
    }
    printf("matvec microbenchmark: ISA %s, 1 thread, %s: F32 %.0f MB, BF16 %.0f MB per pass, "
           "%d interleaved reps\n", kt->isa, l2 ? "--l2 (one cache-resident 256x1024 matrix)" : "0.8B layer copies",
           mf.bytes / 1e6, mb.bytes / 1e6, reps);
    for (int i = 0; i < nv; i++) pass(v[i].dt == QC_F32 ? &mf : &mb, v[i].dt, v[i].fn, x, y); /* warm-up */
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < nv; i++) v[i].t[v[i].nt++] = pass(v[i].dt == QC_F32 ? &mf : &mb, v[i].dt, v[i].fn, x, y);
    printf("%-14s %10s %10s %10s\n", "variant", "best GB/s", "med GB/s", "worst GB/s");
    for (int i = 0; i < nv; i++) {
        qsort(v[i].t, (size_t)v[i].nt, sizeof(double), cmpd);
        const double B = (v[i].dt == QC_F32 ? mf.bytes : mb.bytes) / 1e9;
        printf("%-14s %10.1f %10.1f %10.1f\n", v[i].name, B / v[i].t[0], B / v[i].t[v[i].nt / 2],
               B / v[i].t[v[i].nt - 1]);
    }
    return 0;
}
