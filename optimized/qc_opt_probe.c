/* qc_opt_probe.c — the machine probes of qc_probe.h on the optimized backend's kernel table
 * (stream_read, fma_burn), so `bench` measures its limits with the kernels and threads the
 * backend runs, without reaching into this directory's private headers. */
#include "qc/qc_probe.h"

#include <omp.h>
#include <stdint.h>
#include <time.h>

#include "qc_opt_kernels.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* the results go somewhere, so the compiler cannot drop the loops */
static volatile uint32_t probe_sink;
static volatile float probe_fsink;

const char *qc_probe_isa(void) { return qc_opt_kernels_pick()->isa; }

int qc_probe_max_threads(void) { return omp_get_max_threads(); }

double qc_probe_bandwidth_gbs(const void *const *bufs, const size_t *lens, int n, int threads) {
    const qc_opt_kernels *K = qc_opt_kernels_pick();
    double total = 0;
    for (int i = 0; i < n; i++) total += (double)lens[i];
    if (n <= 0 || total <= 0) return 0.0;
    const int T = threads > 0 ? threads : 1;
    double t0 = now_s();
    uint32_t acc = 0;
#pragma omp parallel num_threads(T) reduction(^ : acc)
    {
        const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
        const double lo = total * tid / nt, hi = total * (tid + 1) / nt;
        double base = 0;
        for (int i = 0; i < n; i++) {
            double a = lo > base ? lo : base, b = hi < base + (double)lens[i] ? hi : base + (double)lens[i];
            if (a < b) {
                size_t off = (size_t)(a - base) & ~(size_t)255, end = (size_t)(b - base);
                acc ^= K->stream_read((const char *)bufs[i] + off, end - off);
            }
            base += (double)lens[i];
        }
    }
    double dt = now_s() - t0;
    probe_sink = acc;
    return total / dt / 1e9;
}

/* GFLOP/s of `burn` (flops_per_iter an iteration) run on `threads` threads at once */
static double burn_gflops(float (*burn)(long, float), double flops_per_iter, int threads) {
    const int T = threads > 0 ? threads : 1;
    const long iters = 3000000;
    double t0 = now_s();
    float acc = 0.0f;
#pragma omp parallel num_threads(T) reduction(+ : acc)
    acc += burn(iters, (float)omp_get_thread_num());
    double dt = now_s() - t0;
    probe_fsink = acc;
    return flops_per_iter * (double)iters * T / dt / 1e9;
}

double qc_probe_fma_gflops(int threads) {
    const qc_opt_kernels *K = qc_opt_kernels_pick();
    return burn_gflops(K->fma_burn, 48.0 * K->lanes, threads);
}

double qc_probe_bf16dot_gflops(int threads) {
    const qc_opt_bf16dot *B = qc_opt_bf16dot_pick();
    return B ? burn_gflops(B->dot_burn, B->burn_flops, threads) : 0.0;
}

double qc_probe_amx_gflops(int threads) {
    const qc_opt_bf16dot *A = qc_opt_amx_pick();
    return A ? burn_gflops(A->dot_burn, A->burn_flops, threads) : 0.0;
}
