/* qc_bench_stats.c — the statistics of `qwen-conform bench`: per figure the median, min, max,
 * the median absolute deviation and a bootstrap 95 % interval of the median (2000 resamples,
 * a fixed seed: the same samples give the same interval); the limits (static / decode vs
 * weight bytes per token / bandwidth; dynamic vs model flops per token / FMA peak, both from
 * the in-run probes at the figure's thread count); the --ratio-to ratios with their
 * intervals; and the warnings every report carries (implausible probes, threads > cores,
 * weights that fit in cache, too few repetitions, host contention). See
 * qc_bench_internal.h.
 */
#include "qc_bench_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const bench_mode_names[N_MODES] = {"static", "dynamic", "decode"};

/* ===================================================================================== */
/* Statistics                                                                             */
/* ===================================================================================== */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_sorted(const double *v, int n) {
    if (n <= 0) return 0.0;
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double median_of(const double *v, int n) {
    double tmp[MAX_REPS];
    if (n <= 0) return 0.0;
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    return median_sorted(tmp, n);
}

static double min_of(const double *v, int n) {
    double m = n ? v[0] : 0.0;
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

static double max_of(const double *v, int n) {
    double m = n ? v[0] : 0.0;
    for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

#define N_BOOT 2000

/* the gate's location: the fastest run of all repetitions (an imported figure has no runs:
 * its samples), and as its lower bound the upper-quartile repetition's fastest run (order
 * statistic at 0.75 (n - 1)) */
static void fig_best(bench_fig *f) {
    double c[MAX_REPS];
    for (int i = 0; i < f->n; i++) c[i] = f->fast[i] > 0 ? f->fast[i] : f->samples[i];
    qsort(c, (size_t)f->n, sizeof *c, cmp_double);
    f->best = c[f->n - 1];
    f->best_lo = c[(int)(0.75 * (f->n - 1))];
}

void bench_fig_stats(bench_fig *f) {
    const int n = f->n;
    f->median = f->min = f->max = f->mad = f->lo = f->hi = f->best = f->best_lo = 0;
    if (n <= 0) return;
    fig_best(f);
    double s[MAX_REPS], dev[MAX_REPS];
    memcpy(s, f->samples, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    f->median = median_sorted(s, n);
    f->min = s[0];
    f->max = s[n - 1];
    for (int i = 0; i < n; i++) dev[i] = fabs(s[i] - f->median);
    f->mad = median_of(dev, n);
    if (n == 1) {
        f->lo = f->hi = f->median;
        return;
    }
    /* percentile bootstrap of the median */
    static double meds[N_BOOT];
    uint64_t x = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) x ^= (uint64_t)(s[i] * 1e3) * 0xBF58476D1CE4E5B9ull;
    for (int b = 0; b < N_BOOT; b++) {
        double r[MAX_REPS];
        for (int i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            r[i] = s[x % (uint64_t)n];
        }
        meds[b] = median_of(r, n);
    }
    qsort(meds, N_BOOT, sizeof *meds, cmp_double);
    f->lo = meds[(int)(0.025 * N_BOOT)];
    f->hi = meds[(int)(0.975 * N_BOOT) - 1];
}

void bench_warn(bench_report *R, const char *fmt, ...) {
    if (R->n_warn == MAX_WARN) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(R->warn[R->n_warn], sizeof R->warn[0], fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: warning: %s\n", PROG, R->warn[R->n_warn]);
    R->n_warn++;
}

/* ===================================================================================== */
/* Limits, ratios                                                                         */
/* ===================================================================================== */

/* the probe of a figure: its thread index, else (an imported figure) the probe at its thread
 * count, else NULL */
static const bench_probe *fig_probe(const bench_report *R, const bench_fig *f) {
    if (f->ti >= 0) return &R->probe[f->ti];
    for (int t = 0; t < R->n_probe; t++)
        if (R->probe[t].threads == f->threads) return &R->probe[t];
    return NULL;
}

static double fig_limit(const bench_report *R, const bench_opts *o, const bench_fig *f) {
    const bench_probe *p = fig_probe(R, f);
    if (!p || !p->n) return 0;
    if (f->mode != BM_DYNAMIC) return R->bytes_per_token > 0 ? p->bw_med * 1e9 / R->bytes_per_token : 0;
    double fl = R->flops_pp[0];
    for (int i = 0; i < o->n_prompts; i++)
        if (o->prompts[i] == f->tokens) fl = R->flops_pp[i];
    const double peak = bench_uses_bf16_dot(R, f->backend) && p->dot_med > 0 ? p->dot_med
                        : bench_uses_amx(R, f->backend) && p->amx_med > 0 ? p->amx_med / 3
                                                                          : p->peak_med;
    return fl > 0 ? peak * 1e9 / fl : 0;
}

const char *bench_limit_name(const bench_report *R, const bench_fig *f) {
    if (f->mode != BM_DYNAMIC) return "bandwidth";
    const bench_probe *p = fig_probe(R, f);
    if (bench_uses_bf16_dot(R, f->backend) && p && p->dot_med > 0) return "BF16 dot peak";
    return bench_uses_amx(R, f->backend) && p && p->amx_med > 0 ? "AMX peak / 3" : "FMA peak";
}

/* the base figure f is compared with: same test on the --ratio-to backend; when either side is
 * the reference backend (its own short workload) the same mode and threads */
static int base_of(const bench_report *R, const bench_fig *f) {
    if (R->ratio_base < 0) return -1;
    int i = bench_find_fig(R, R->ratio_base, f->mode, f->tokens, f->depth, f->threads);
    if (i >= 0 || (!R->be[R->ratio_base].isref && !R->be[f->backend].isref)) return i;
    for (int k = 0; k < R->n_fig; k++)
        if (R->fig[k].backend == R->ratio_base && R->fig[k].mode == f->mode &&
            R->fig[k].threads == f->threads)
            return k;
    return -1;
}

static void ratios(bench_report *R, const bench_opts *o) {
    R->ratio_base = -1;
    const char *want = o->ratio_to;
    for (int b = 0; b < R->n_be; b++)
        if (want ? !strcmp(R->be[b].name, want) : R->be[b].isref) {
            R->ratio_base = b;
            break;
        }
    for (int i = 0; i < R->n_fig; i++) {
        bench_fig *f = &R->fig[i];
        f->base = base_of(R, f);
        f->ratio = f->ratio_lo = f->ratio_hi = 0;
        if (f->base < 0 || !f->n) continue;
        const bench_fig *g = &R->fig[f->base];
        if (!g->n || g->median <= 0) continue;
        f->ratio = f->median / g->median;
        f->ratio_lo = g->hi > 0 ? f->lo / g->hi : 0;
        f->ratio_hi = g->lo > 0 ? f->hi / g->lo : 0;
    }
}

/* ===================================================================================== */
/* Warnings                                                                               */
/* ===================================================================================== */

/* a repetition far below the others while the in-run probe dropped too: host contention */
static void contention(bench_report *R, const bench_fig *f) {
    const bench_probe *p = f->ti >= 0 ? &R->probe[f->ti] : NULL;
    if (!p || f->n < 3 || p->peak_med <= 0 || p->bw_med <= 0) return;
    char reps[160] = "";
    size_t used = 0;
    int k = 0;
    double worst = 1;
    for (int i = 0; i < f->n; i++) {
        const int r = f->rep[i];
        if (r < 0 || r >= p->n || f->samples[i] >= 0.6 * f->median) continue;
        if (p->peak[r] >= 0.8 * p->peak_med && p->bw[r] >= 0.8 * p->bw_med) continue;
        int w = snprintf(reps + used, sizeof reps - used, "%s%d", k ? "," : "", r + 1);
        if (w > 0 && (size_t)w < sizeof reps - used) used += (size_t)w;
        k++;
        worst = f->samples[i] / f->median < worst ? f->samples[i] / f->median : worst;
    }
    if (k)
        bench_warn(R, "host contention: %s %s %d tok @ %d, %d threads: repetition(s) %s ran at "
                   "%.0f%% of the median while the in-run probe dropped too",
                   R->be[f->backend].name, bench_mode_names[f->mode], f->tokens, f->depth,
                   f->threads, reps, 100 * worst);
}

static void warnings(bench_report *R, const bench_opts *o) {
    if (o->reps < 3)
        bench_warn(R, "reps %d < 3: a median and interval of so few samples say little", o->reps);
    for (int t = 0; t < R->n_probe; t++) {
        const bench_probe *p = &R->probe[t];
        if (p->threads > R->mc.cores)
            bench_warn(R, "threads %d > %d cores: the figures at %d threads measure oversubscription",
                       p->threads, R->mc.cores, p->threads);
        if (p->n >= 2 && p->bw_max > 1.5 * p->bw_med)
            bench_warn(R, "the bandwidth probe swings %.1f-%.1f GB/s at %d threads: the limits are unsteady",
                       min_of(p->bw, p->n), p->bw_max, p->threads);
    }
    if (R->mc.cache_bytes > 0 && R->bytes_per_token <= R->mc.cache_bytes)
        bench_warn(R, "the weights (%.2f MB) fit in the %.1f MB CPU cache: the bandwidth probe and "
                   "the decode limit measure the cache, not memory", R->bytes_per_token / 1e6,
                   R->mc.cache_bytes / 1e6);
    int over = 0;
    for (int i = 0; i < R->n_fig; i++) {
        const bench_fig *f = &R->fig[i];
        if (f->n && f->limit > 0 && f->median > f->limit && over++ < 4)
            bench_warn(R, "%s %s %d tok @ %d, %d threads runs at %.0f%% of its %s limit: the probe is "
                       "implausible (> 100%%)", R->be[f->backend].name, bench_mode_names[f->mode],
                       f->tokens, f->depth, f->threads, 100 * f->median / f->limit,
                       bench_limit_name(R, f));
    }
    for (int i = 0; i < R->n_fig; i++) contention(R, &R->fig[i]);
}

void bench_finish(bench_report *R, const bench_opts *o) {
    for (int t = 0; t < R->n_probe; t++) {
        bench_probe *p = &R->probe[t];
        p->bw_med = median_of(p->bw, p->n);
        p->bw_max = max_of(p->bw, p->n);
        p->peak_med = median_of(p->peak, p->n);
        p->peak_max = max_of(p->peak, p->n);
        p->dot_med = median_of(p->dot, p->n);
        p->dot_max = max_of(p->dot, p->n);
        p->amx_med = median_of(p->amx, p->n);
        p->amx_max = max_of(p->amx, p->n);
    }
    for (int i = 0; i < R->n_fig; i++) {
        bench_fig_stats(&R->fig[i]);
        R->fig[i].limit = fig_limit(R, o, &R->fig[i]);
    }
    ratios(R, o);
    R->n_warn = 0;
    warnings(R, o);
}
