/* qc_probe.h — machine probes on the optimized backend's kernels (implemented in optimized/):
 * which kernel table this machine runs, and the two limits `qwen-conform bench` sets its figures
 * against (memory bandwidth, FP32 FMA peak), measured with the same kernels and threads as the
 * backend.
 *
 * Link: qwen_conform::optimized (it needs OpenMP).
 */
#ifndef QC_PROBE_H
#define QC_PROBE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The kernel table the optimized backend picks at run time: "AVX-512", "AVX2" or "scalar" (the
 * best the CPU runs, lowered by env QC_ISA=scalar|avx2|avx512). Static string, never NULL. */
const char *qc_probe_isa(void);

/* Threads the optimized backend uses when opts.n_threads is 0 (omp_get_max_threads()). */
int qc_probe_max_threads(void);

/* GB/s (1e9 bytes/s) of one streaming read of every buffer bufs[i] (lens[i] bytes), the total
 * split evenly over `threads` OpenMP threads (each thread reads its contiguous share of the
 * concatenation, rounded down to 256 bytes at its start), with integer ops only. One pass: take
 * the best of a few for a limit. n >= 0, threads >= 1; 0 when there is nothing to read. */
double qc_probe_bandwidth_gbs(const void *const *bufs, const size_t *lens, int n, int threads);

/* GFLOP/s of independent FP32 FMA chains (the kernel table's vector width) on `threads`
 * threads: 48 * lanes * 3e6 flops per thread. One pass. */
double qc_probe_fma_gflops(int threads);

/* GFLOP/s of independent AVX512_BF16 `vdpbf16ps` chains (two multiply-adds per lane) on
 * `threads` threads: the limit of the optimized backend's BF16 dot GEMM (option bf16_dot). One
 * pass; 0 when the CPU lacks AVX512_BF16 (or the ISA chosen is lower). */
double qc_probe_bf16dot_gflops(int threads);

/* GFLOP/s of AMX-BF16 `tdpbf16ps` on four tile accumulators (16 x 16 x 32 multiply-adds each)
 * on `threads` threads: the raw peak of the optimized backend's AMX GEMM, which does three of
 * them per multiply-add of the model (three bf16 terms per activation), so its limit is a
 * third of this. One pass; 0 without AMX (or the OS's permission, or the ISA chosen lower). */
double qc_probe_amx_gflops(int threads);

#ifdef __cplusplus
}
#endif

#endif /* QC_PROBE_H */
