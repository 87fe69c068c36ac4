/* qc_opt_kernels_scalar.c — the portable kernel table (fallback, and the naive definition the
 * SIMD tables are tested against) plus the run-time ISA choice.
 *
 * Plain C loops; every sum runs in index order; a*b+c is a multiply then an add (the project
 * compiles with -ffp-contract=off), so this table differs from the FMA tables by rounding only.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qc_opt_kernels.h"

/* ===================================================================================== */
/* Element access                                                                         */
/* ===================================================================================== */

static inline float w_elem(const void *W, qc_dtype dt, size_t i) {
    switch (dt) {
    case QC_F32: {
        float f;
        memcpy(&f, (const char *)W + 4 * i, 4);
        return f;
    }
    case QC_BF16: {
        uint16_t h;
        memcpy(&h, (const char *)W + 2 * i, 2);
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case QC_F16: {
        uint16_t h;
        memcpy(&h, (const char *)W + 2 * i, 2);
        return qc_f16_to_f32(h);
    }
    case QC_Q8_0: { /* element i in block i / 32 (rows start on a block: K % 32 == 0) */
        const unsigned char *b = (const unsigned char *)W + i / 32 * QC_Q8_0_BLOCK_BYTES;
        uint16_t d;
        memcpy(&d, b, 2);
        return qc_f16_to_f32(d) * (float)(int8_t)b[2 + i % 32];
    }
    case QC_I8: break;
    }
    return 0.0f;
}

/* ===================================================================================== */
/* GEMM packing and micro tile                                                            */
/* ===================================================================================== */

#define SC_MR 4
#define SC_NR 8

static void sc_pack_w(float *panel, const void *W, qc_dtype dt, int K, int mr) {
    int Kp = qc_opt_kpad(K);
    for (int kb = 0; kb < Kp; kb += QC_OPT_KB)
        for (int r = 0; r < SC_MR; r++)
            for (int j = 0; j < QC_OPT_KB; j++) {
                int k = kb + j;
                panel[(size_t)kb * SC_MR + r * QC_OPT_KB + j] =
                    (r < mr && k < K) ? w_elem(W, dt, (size_t)r * K + k) : 0.0f;
            }
}

static void sc_pack_x(float *strip, const float *x, int ldx, int K, int nt) {
    int Kp = qc_opt_kpad(K);
    for (int k = 0; k < Kp; k++)
        for (int t = 0; t < SC_NR; t++)
            strip[(size_t)k * SC_NR + t] = (t < nt && k < K) ? x[(size_t)t * ldx + k] : 0.0f;
}

static void sc_gemm_tile(const float *panel, const float *strip, int Kp, float *y, long ldy,
                         int mr, int nt) {
    for (int r = 0; r < mr; r++)
        for (int t = 0; t < nt; t++) {
            float s = 0.0f;
            for (int k = 0; k < Kp; k++) {
                int kb = k / QC_OPT_KB * QC_OPT_KB, j = k % QC_OPT_KB;
                s += panel[(size_t)kb * SC_MR + r * QC_OPT_KB + j] * strip[(size_t)k * SC_NR + t];
            }
            y[(long)t * ldy + r] = s;
        }
}

/* ===================================================================================== */
/* Matrix-vector                                                                          */
/* ===================================================================================== */

static void sc_matvec(float *y, long ldy, const void *W, qc_dtype dt, int rows, int K,
                      const float *x, long ldx, int n) {
    for (int r = 0; r < rows; r++)
        for (int t = 0; t < n; t++) {
            float s = 0.0f;
            const float *xt = x + (long)t * ldx;
            for (int k = 0; k < K; k++) s += w_elem(W, dt, (size_t)r * K + k) * xt[k];
            y[(long)t * ldy + r] = s;
        }
}

/* ===================================================================================== */
/* Small dense algebra                                                                    */
/* ===================================================================================== */

static void sc_gemm_nn(int M, int N, int K, const float *A, long lda, const float *B, long ldb,
                       float *C, long ldc, int acc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = acc ? C[i * ldc + j] : 0.0f;
            for (int k = 0; k < K; k++) s += A[i * lda + k] * B[k * ldb + j];
            C[i * ldc + j] = s;
        }
}

static float sc_dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static float sc_sumsq(const float *x, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

static void sc_axpy(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static void sc_scale(float *y, float a, int n) {
    for (int i = 0; i < n; i++) y[i] *= a;
}

static void sc_mul(float *y, const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++) y[i] = a[i] * b[i];
}

/* ===================================================================================== */
/* Elementwise transcendental                                                             */
/* ===================================================================================== */

static void sc_vexp(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = expf(x[i]);
}

static void sc_silu(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}

static void sc_silu_mul(float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void sc_sigmoid_mul(float *y, const float *g, int n) {
    for (int i = 0; i < n; i++) y[i] = y[i] * (1.0f / (1.0f + expf(-g[i])));
}

/* ===================================================================================== */
/* Machine probes                                                                         */
/* ===================================================================================== */

static uint32_t sc_stream_read(const void *p, size_t bytes) {
    uint32_t a = 0, b = 0, c = 0, d = 0, w[4];
    const char *q = p;
    size_t i = 0;
    for (; i + 16 <= bytes; i += 16) {
        memcpy(w, q + i, 16);
        a ^= w[0]; b ^= w[1]; c ^= w[2]; d ^= w[3];
    }
    for (; i + 4 <= bytes; i += 4) {
        uint32_t t_;
        memcpy(&t_, q + i, 4);
        a ^= t_;
    }
    return a ^ b ^ c ^ d;
}

static float sc_fma_burn(long iters, float seed) {
    float acc[24];
    for (int j = 0; j < 24; j++) acc[j] = seed + (float)j;
    for (long i = 0; i < iters; i++)
        for (int j = 0; j < 24; j++) acc[j] = acc[j] * 0.999999f + 1e-7f;
    float s = 0.0f;
    for (int j = 0; j < 24; j++) s += acc[j];
    return s;
}

const qc_opt_kernels qc_opt_kernels_scalar = {
    .isa = "scalar",
    .gemm_mr = SC_MR,
    .gemm_nr = SC_NR,
    .lanes = 1,
    .pack_w = sc_pack_w,
    .pack_x = sc_pack_x,
    .gemm_tile = sc_gemm_tile,
    .matvec = sc_matvec,
    .gemm_nn = sc_gemm_nn,
    .dot = sc_dot,
    .sumsq = sc_sumsq,
    .axpy = sc_axpy,
    .scale = sc_scale,
    .mul = sc_mul,
    .vexp = sc_vexp,
    .silu = sc_silu,
    .silu_mul = sc_silu_mul,
    .sigmoid_mul = sc_sigmoid_mul,
    .stream_read = sc_stream_read,
    .fma_burn = sc_fma_burn,
};

/* ===================================================================================== */
/* Run-time choice                                                                        */
/* ===================================================================================== */

int qc_opt_cpu_has_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    /* F16C through cpuid leaf 1 (ECX bit 29): clang 14 has no __builtin_cpu_supports("f16c") */
    unsigned a = 0, b = 0, c = 0, d = 0;
    int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
    return 0;
#endif
}

int qc_opt_cpu_has_avx512(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    /* the AVX-512 table also uses F16C-era conversions (vcvtph2ps zmm is AVX-512F) and the
     * AVX2 table for nothing; AVX-512F alone suffices */
    return __builtin_cpu_supports("avx512f") && qc_opt_cpu_has_avx2();
#else
    return 0;
#endif
}

const qc_opt_kernels *qc_opt_kernels_by_name(const char *name) {
    if (!name) return NULL;
    if (!strcmp(name, "scalar")) return &qc_opt_kernels_scalar;
    if (!strcmp(name, "avx2"))
        return (qc_opt_kernels_avx2_ptr && qc_opt_cpu_has_avx2()) ? qc_opt_kernels_avx2_ptr : NULL;
    if (!strcmp(name, "avx512"))
        return (qc_opt_kernels_avx512_ptr && qc_opt_cpu_has_avx512()) ? qc_opt_kernels_avx512_ptr
                                                                       : NULL;
    return NULL;
}

const qc_opt_kernels *qc_opt_kernels_pick(void) {
    static const char *order[] = {"avx512", "avx2", "scalar"};
    const char *env = getenv("QC_ISA");
    int start = 0;
    if (env && *env) {
        for (int i = 0; i < 3; i++)
            if (!strcmp(env, order[i])) start = i;
    }
    for (int i = start; i < 3; i++) {
        const qc_opt_kernels *k = qc_opt_kernels_by_name(order[i]);
        if (k) return k;
    }
    return &qc_opt_kernels_scalar;
}
