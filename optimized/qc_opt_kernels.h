/* qc_opt_kernels.h — the optimized backend's kernel table (ggml-style: a struct of function
 * pointers, one instance per ISA), chosen once at run time.
 *
 * Three implementations: qc_opt_kernels_scalar.c (portable C, the fallback and the naive
 * definition every fast kernel is tested against), qc_opt_kernels_avx2.c (AVX2 + FMA + F16C)
 * and qc_opt_kernels_avx512.c (AVX-512F). The SIMD files compile every function with
 * __attribute__((target(...))), so the library itself needs no -mavx flags; qc_opt_kernels_pick
 * checks __builtin_cpu_supports and the QC_ISA environment variable (scalar|avx2|avx512 forces
 * a lower ISA; asking for one the CPU lacks falls back to the best available).
 *
 * Numerics contract (what makes results bit-identical for any thread count): every output
 * element of every kernel is computed by one call in a fixed order that depends only on the
 * problem sizes, never on which rows / tokens / heads are processed together. In particular
 *   - gemm_tile, gemm_nn: each C element is one sequential FMA chain over k (k = 0, 1, ...),
 *     started from 0 or from the old C value; tiling, padding with zeros and tails do not
 *     change it;
 *   - matvec: each (row, token) dot product uses the same accumulator structure whatever rows
 *     are grouped with it;
 *   - elementwise kernels are per element.
 * Activations and accumulation are fp32; 16-bit and Q8_0 weights are widened in registers
 * (matvec) or once per packed panel (gemm). Q8_0 (llama.cpp blocks of 34 bytes, K % 32 == 0;
 * W then points at a row's first block) widens exactly (d * q), so every kernel gives for a
 * Q8_0 matrix bit for bit what it gives for the dequantized F32 matrix.
 */
#ifndef QC_OPT_KERNELS_H
#define QC_OPT_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "qc/qc_model.h"

/* k is padded to a multiple of this in packed GEMM panels and token strips */
#define QC_OPT_KB 16
/* the largest gemm_mr / gemm_nr of any ISA (scratch sizing) */
#define QC_OPT_MR_MAX 17 /* 17: the AMX Q8_0 panel, 32 rows of bf16 pairs + 32 scales a 32-k
                            step (qc_opt_kernels_amx.c) */
#define QC_OPT_NR_MAX 32

typedef struct qc_opt_kernels {
    const char *isa;  /* "AVX-512", "AVX2", "scalar" */
    int gemm_mr;      /* weight rows per GEMM micro tile (<= QC_OPT_MR_MAX) */
    int gemm_nr;      /* tokens per packed token strip (<= QC_OPT_NR_MAX) */
    int lanes;        /* fp32 lanes per vector register (flop accounting of fma_burn) */

    /* ---- projections: prefill GEMM (packed) ---- */

    /* Pack rows r0..r0+mr-1 of W ([rows_total, K] row-major, dtype dt, data at W) into the fp32
     * panel layout [Kp/16][gemm_mr][16] (Kp = K rounded up to 16); rows >= mr and k >= K are
     * zero. */
    void (*pack_w)(float *panel, const void *W, qc_dtype dt, int K, int mr);
    /* Pack tokens t0..t0+nt-1 of x (row stride ldx) into one token strip [Kp][gemm_nr]
     * (tokens >= nt and k >= K are zero). */
    void (*pack_x)(float *strip, const float *x, int ldx, int K, int nt);
    /* One micro tile: for r < mr, t < nt:
     *   y[t*ldy + r] = sum_{k<Kp} panel(r, k) * strip(k, t)      (FMA chain over k from 0) */
    void (*gemm_tile)(const float *panel, const float *strip, int Kp, float *y, long ldy, int mr,
                      int nt);

    /* ---- projections: decode / few-token matrix-vector ---- */

    /* y[t*ldy + r] = dot(W row r, x[t*ldx ..]) for r < rows, t < n; W is [rows, K] row-major
     * in dtype dt. */
    void (*matvec)(float *y, long ldy, const void *W, qc_dtype dt, int rows, int K,
                   const float *x, long ldx, int n);

    /* ---- small dense algebra (DeltaNet chunks, attention) ---- */

    /* C[M,N] = (acc ? C : 0) + A[M,K] @ B[K,N]; row-major with leading dims; FMA chain over k. */
    void (*gemm_nn)(int M, int N, int K, const float *A, long lda, const float *B, long ldb,
                    float *C, long ldc, int acc);
    float (*dot)(const float *a, const float *b, int n);     /* fixed-order dot product */
    /* attention inner loops (qc_opt_attention.c); NULL: the caller loops over dot / axpy.
     * attn_scores: sc[i] = dot(q, Kb + i*ldk, hd) * scale for i < nb, each bit for bit the
     * table's dot; attn_pv: out += p[i] * Vb[i*ldv ..] for i = 0, 1, .. nb-1, each element
     * the chain of the table's axpy calls. */
    void (*attn_scores)(float *sc, const float *q, const float *Kb, long ldk, int nb, int hd,
                        float scale);
    void (*attn_pv)(float *out, const float *p, const float *Vb, long ldv, int nb, int hd);
    /* the same for two queries against one key block, sharing the K / V loads: sc0 / sc1 bit
     * for bit attn_scores of q0 / q1, out0 / out1 bit for bit attn_pv with p0 / p1. NULL: the
     * caller runs the one-query kernels twice. */
    void (*attn_scores2)(float *sc0, float *sc1, const float *q0, const float *q1,
                         const float *Kb, long ldk, int nb, int hd, float scale);
    void (*attn_pv2)(float *out0, float *out1, const float *p0, const float *p1, const float *Vb,
                     long ldv, int nb, int hd);
    float (*sumsq)(const float *x, int n);                   /* fixed-order sum of squares */
    void (*axpy)(float *y, float a, const float *x, int n);  /* y += a * x */
    void (*scale)(float *y, float a, int n);                 /* y *= a */
    void (*mul)(float *y, const float *a, const float *b, int n); /* y = a * b */

    /* ---- elementwise transcendental kernels (vector exp: ~1 ulp, NaN propagates) ---- */
    void (*vexp)(float *y, const float *x, int n);           /* y = exp(x) (may alias) */
    void (*silu)(float *y, const float *x, int n);           /* y = x / (1 + exp(-x)) */
    void (*silu_mul)(float *g, const float *u, int n);       /* g = silu(g) * u */
    void (*sigmoid_mul)(float *y, const float *g, int n);    /* y *= 1 / (1 + exp(-g)) */

    /* ---- machine probes (bench) ---- */
    /* XOR of the bytes/4 32-bit words of p (trailing bytes ignored): a streaming read with
     * integer ops only (no FP assists on arbitrary bit patterns) */
    uint32_t (*stream_read)(const void *p, size_t bytes);
    /* iters x 24 independent FMA chains of `lanes` floats: 48 * lanes * iters flops */
    float (*fma_burn)(long iters, float seed);
} qc_opt_kernels;

extern const qc_opt_kernels qc_opt_kernels_scalar;
/* NULL when the compiler cannot target the ISA (never on x86-64 GCC / Clang). */
extern const qc_opt_kernels *const qc_opt_kernels_avx2_ptr;
extern const qc_opt_kernels *const qc_opt_kernels_avx512_ptr;

/* Does this CPU run the table? (scalar: always) */
int qc_opt_cpu_has_avx2(void);
int qc_opt_cpu_has_avx512(void);

/* The best table the CPU supports, lowered by env QC_ISA (scalar|avx2|avx512) when set.
 * Never NULL. */
const qc_opt_kernels *qc_opt_kernels_pick(void);
/* By name ("scalar", "avx2", "avx512"); NULL when unknown or unsupported by this CPU. */
const qc_opt_kernels *qc_opt_kernels_by_name(const char *name);

/* A GEMM of BF16 weights with its own packing, used instead of the table's for BF16 weights:
 *  - the BF16 dot GEMM (qc_opt_kernels_bf16dot.c: AVX512_BF16 vdpbf16ps) when the backend's
 *    option bf16_dot is on: activations rounded to bf16 (x_terms 1), products exact, fp32
 *    accumulation, one accumulator lane per output element over the k pairs in order;
 *  - the AMX GEMM (qc_opt_kernels_amx.c: tdpbf16ps) by default where the CPU has AMX: each
 *    activation split into two bf16, hi + lo (x_terms 2), within the float32 policy.
 * Both thread invariant. Panels and strips hold uint32 bf16 pairs, the lower half the even k;
 * a panel takes at most QC_OPT_MR_MAX x Kp uint32, a strip nr x Kp / 2 x x_terms (Kp a
 * multiple of kstep). */
typedef struct qc_opt_bf16dot {
    const char *name; /* "BF16 dot", "AMX" (describe text, bench limit name) */
    qc_dtype wdtype;  /* the weights it multiplies: QC_BF16, QC_Q8_0 (AMX) */
    int mr, nr;       /* rows per panel / tokens per strip */
    int kstep;        /* Kp must be a multiple of it (else the table's GEMM runs) */
    int x_terms;      /* bf16 terms per activation in a strip: 1 rounded, 2 hi + lo */
    /* rows r0..r0+mr-1 of the BF16 matrix W [rows_total, K] -> panel (zeros past mr, K) */
    void (*pack_w)(uint32_t *panel, const void *W, int K, int mr);
    /* tokens of x (row stride ldx) -> strip (zeros past nt, K) */
    void (*pack_x)(uint32_t *strip, const float *x, int ldx, int K, int nt);
    /* y[t*ldy + r] = sum over k of panel(r, k) . strip(k, t), for r < mr, t < nt */
    void (*gemm_tile)(const uint32_t *panel, const uint32_t *strip, int Kp, float *y, long ldy,
                      int mr, int nt);
    /* NULL or run by the thread before / after its gemm_tile calls (AMX: tile config) */
    void (*begin)(void);
    void (*end)(void);
    /* the probe (bench): iters of the kernel's instruction at its peak, burn_flops an iter */
    float (*dot_burn)(long iters, float seed);
    double burn_flops;
} qc_opt_bf16dot;
/* Does this CPU have AVX512_BF16 (+ BW, VL, the AVX-512 table)? */
int qc_opt_cpu_has_bf16dot(void);
/* The table when the CPU has it and the picked ISA is AVX-512, else NULL. */
const qc_opt_bf16dot *qc_opt_bf16dot_pick(void);
/* Does this CPU have AMX-BF16 with the OS's permission (asked once, Linux)? */
int qc_opt_cpu_has_amx(void);
/* The AMX table when the CPU has it and the picked ISA is AVX-512, else NULL: BF16 weights;
 * _q8: Q8_0 weights. */
const qc_opt_bf16dot *qc_opt_amx_pick(void);
const qc_opt_bf16dot *qc_opt_amx_q8_pick(void);
/* fp32 -> bf16, round to nearest even (NaN stays NaN): the rounding of pack_x */
uint16_t qc_opt_bf16_rne(float f);

/* Round k up to the packing block. */
static inline int qc_opt_kpad(int K) { return (K + QC_OPT_KB - 1) / QC_OPT_KB * QC_OPT_KB; }

/* Element i of a weight row array W of type dt as fp32 (the scalar tails of the SIMD kernels;
 * Q8_0: d * q of its block). */
static inline float qc_opt_wscalar(const void *W, qc_dtype dt, size_t i) {
    if (dt == QC_Q8_0) {
        const unsigned char *b = (const unsigned char *)W + i / 32 * QC_Q8_0_BLOCK_BYTES;
        uint16_t d;
        memcpy(&d, b, 2);
        return qc_f16_to_f32(d) * (float)(int8_t)b[2 + i % 32];
    }
    if (dt == QC_F32) {
        float f;
        memcpy(&f, (const float *)W + i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const uint16_t *)W + i, 2);
    if (dt == QC_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    return qc_f16_to_f32(h);
}

#endif /* QC_OPT_KERNELS_H */
