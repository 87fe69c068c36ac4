/* bench_opt_attention.c — microbenchmark of the optimized backend's attention core on the
 * Qwen3.5-0.8B attention shapes (8 query heads, 2 KV heads, head dim 256), ONE thread: the
 * tiled qc_opt_attend (issue #16 item 2) against the per-(token, head) loop it replaced
 * (copied here; the two give the same bits, which is checked), interleaved rep by rep.
 *
 *   qc_bench_attention [--prompt N] [--depth D] [--reps R]
 *
 * Cases: prefill of N tokens from position 0 (default 2048), and one decode token at depth D
 * (default 16384). Prints the best and the median seconds of each and the ratio.
 * Not a test: built as an executable, never run by CTest.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../optimized/qc_opt_internal.h"
#include "support/qc_test_attention_untiled.h"

static unsigned rng_state = 99u;
static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run_case(const char *what, int n, int start_pos, int reps) {
    const int nh = 8, nkv = 2, hd = 256, ctx = start_pos + n;
    const qc_opt_kernels *K = qc_opt_kernels_pick();
    float *act = malloc((size_t)n * nh * hd * 4), *mix = malloc((size_t)n * 2 * nh * hd * 4);
    float *kc = malloc((size_t)nkv * ctx * hd * 4), *vc = malloc((size_t)nkv * ctx * hd * 4);
    float *ob1 = calloc((size_t)n * nh * hd, 4), *ob2 = calloc((size_t)n * nh * hd, 4);
    if (!act || !mix || !kc || !vc || !ob1 || !ob2) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (size_t i = 0; i < (size_t)n * nh * hd; i++) act[i] = frand();
    for (size_t i = 0; i < (size_t)n * 2 * nh * hd; i++) mix[i] = frand();
    for (size_t i = 0; i < (size_t)nkv * ctx * hd; i++) { kc[i] = frand(); vc[i] = frand(); }
    const float scale = 1.0f / 16.0f;
    qc_opt o;
    memset(&o, 0, sizeof o);
    qc_opt_thread th;
    memset(&th, 0, sizeof th);
    float sc[64];
    th.sc = sc;
    o.k = K; o.nthreads = 1; o.par_min = 1e300; o.th = &th; o.act = act; o.mix = mix; o.ob = ob2;
    double tu[64], tt[64];
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        qc_test_attention_untiled(K, ob1, act, mix, kc, vc, ctx, n, start_pos, nh, nkv, hd, scale);
        double t1 = now_s();
        qc_opt_attend(&o, kc, vc, ctx, n, start_pos, nh, nkv, hd, scale);
        double t2 = now_s();
        tu[r] = t1 - t0;
        tt[r] = t2 - t1;
    }
    const int same = memcmp(ob1, ob2, (size_t)n * nh * hd * 4) == 0;
    qsort(tu, (size_t)reps, sizeof(double), cmpd);
    qsort(tt, (size_t)reps, sizeof(double), cmpd);
    const double fl = 4.0 * hd * nh * ((double)n * start_pos + (double)n * (n + 1) / 2);
    printf("%-28s untiled best %8.4f s med %8.4f s | tiled best %8.4f s med %8.4f s | "
           "speed-up best %.2fx med %.2fx | tiled %.1f GFLOP/s | same bits: %s\n",
           what, tu[0], tu[reps / 2], tt[0], tt[reps / 2], tu[0] / tt[0], tu[reps / 2] / tt[reps / 2],
           fl / tt[0] / 1e9, same ? "yes" : "NO");
    free(act); free(mix); free(kc); free(vc); free(ob1); free(ob2);
}

int main(int argc, char **argv) {
    int prompt = 2048, depth = 16384, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--prompt") && i + 1 < argc) prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--depth") && i + 1 < argc) depth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: qc_bench_attention [--prompt N] [--depth D] [--reps R]\n");
            return 2;
        }
    }
    if (prompt < 1 || depth < 0 || reps < 1 || reps > 64) {
        fprintf(stderr, "qc_bench_attention: --prompt >= 1, --depth >= 0, --reps 1..64\n");
        return 2;
    }
    printf("attention core, 0.8B shapes (nh 8, nkv 2, hd 256), ISA %s, 1 thread, %d interleaved reps\n",
           qc_opt_kernels_pick()->isa, reps);
    char what[64];
    snprintf(what, sizeof what, "prefill %d", prompt);
    run_case(what, prompt, 0, reps);
    snprintf(what, sizeof what, "decode 1 @ depth %d", depth);
    run_case(what, 1, depth, reps);
    return 0;
}
