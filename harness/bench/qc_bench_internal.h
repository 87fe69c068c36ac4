/* qc_bench_internal.h — what the files of `qwen-conform bench` share (harness-private).
 *
 * The command is split by concern:
 *   qc_cmd_bench.c      the command's steps (files, memory plan, model, measure, gate, report)
 *   qc_bench_args.c     the command line (lists, backend specs, options)
 *   qc_bench_machine.c  the machine facts (/proc/cpuinfo, /proc/meminfo, cpuid, caches), the
 *                       weight segments and flops per token the limits use, the two probes
 *   qc_bench_measure.c  the figures of a run (backend x mode x tokens x depth x threads), the
 *                       backends under test, warm-up and the interleaved repetitions
 *   qc_bench_stats.c    median, min/max, MAD and the bootstrap interval of every figure, the
 *                       limits, the --ratio-to ratios and the warnings
 *   qc_bench_gate.c     --peer-json (a llama-bench -o json file) and the --baseline gate
 *   qc_bench_report.c   the reports: Markdown, JSON, SVG
 *
 * A "figure" is one thing measured: a backend's static prefill of N tokens, dynamic prefill
 * (llama-bench "pp N") or N decode steps at depth D (llama-bench "tg N @ d D"), at T threads.
 *
 * Return convention: int step functions return a process exit code (QC_EXIT_PASS = go on;
 * anything else was already reported on stderr through qc_cli_fail and is the command's
 * result); qc_status functions QC_OK or the error in err.
 */
#ifndef QC_BENCH_INTERNAL_H
#define QC_BENCH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "qc/qc_backend.h"
#include "qc/qc_model.h"
#include "qc/qc_state.h"
#include "qc/qc_status.h"
#include "qc_bench_moe.h"

#define PROG "qwen-conform bench"
#define MAX_BACKENDS 8      /* backends measured, plus one imported peer */
#define MAX_REPS 64
#define MAX_LIST 16         /* entries of --prompt / --depth / --threads lists */
#define MAX_FIGS 512
#define MAX_WARN 64
#define N_MODES 3
#define MAX_SEGMENTS 4096  /* weight tensors streamed by the bandwidth probe */

/* schema_version of the --json report (and of a --baseline read back); fields are only ever
 * added within one version */
#define QC_BENCH_JSON_SCHEMA_VERSION 1

/* modes: index into mode names */
enum { BM_STATIC = 0, BM_DYNAMIC = 1, BM_DECODE = 2 };

/* ===================================================================================== */
/* Options and results                                                                    */
/* ===================================================================================== */

typedef struct {
    const char *model_dir;   /* --model DIR, or NULL */
    const char *synthetic;   /* --synthetic NAME, or NULL */
    qc_dtype dtype;          /* synthetic weight dtype */
    int prompts[MAX_LIST];   /* dynamic prefill lengths (--prompt list) */
    int n_prompts;
    int depths[MAX_LIST];    /* decode depths (--depth list; default: the first prompt) */
    int n_depths;
    int threads_list[MAX_LIST]; /* --threads list (0: OpenMP default) */
    int n_threads;
    int static_prompt;       /* static prefill tokens (0: min(first prompt, 64)) */
    int decode;              /* decode steps */
    int max_seq_len;         /* dynamic chunk (0: = each prompt) */
    int ref_prompt;          /* reference backend: prompt (static and dynamic) */
    int ref_decode;          /* reference backend: decode steps */
    int reps;                /* repetitions (at least) */
    int warmup;              /* unmeasured warm-up passes per thread count */
    double min_time;         /* seconds measured per figure at least (more reps up to MAX_REPS) */
    double adapter_timeout;  /* seconds per request of an exec-hosted runtime (0: the default 60) */
    char backends[MAX_BACKENDS][2100]; /* backend specs (registry names: qc_registry.h) */
    int n_backends;
    int n_external;          /* how many are runtimes under test (plugin / exec) */
    long seed;               /* synthetic weights seed */
    int layers;              /* --layers N: a synthetic preset truncated to N layers (0: all) */
    const char *json, *markdown, *svg, *baseline, *peer_json;
    const char *ratio_to;    /* --ratio-to NAME, or NULL (reference when present) */
    const char *max_memory;  /* --max-memory SIZE, or NULL (available memory) */
    double max_regression;   /* percent */
    int no_remeasure;        /* --no-remeasure: a suspected regression is final */
    int profile_ops;         /* --profile-ops: time per op class (qc_bench_profile.c) */
} bench_opts;

typedef struct {
    int backend;                /* index into bench_report.be */
    int mode;                   /* BM_* */
    int tokens;                 /* tokens per sample */
    int depth;                  /* decode: positions before the first step; prefill: 0 */
    int threads;                /* threads (as reported: the resolved count) */
    int ti;                     /* index into bench_report.probe (-1: imported) */
    double samples[MAX_REPS];   /* tokens/s per repetition */
    double fast[MAX_REPS];      /* per repetition the tokens/s of its fastest run (a sample
                                 * repeats its run up to --min-time / reps): the gate's samples */
    int rep[MAX_REPS];          /* the repetition of each sample (probe index) */
    int n;
    double secs;                /* seconds measured, summed */
    double wait_secs;           /* of which the process waited for a CPU (run-queue wait,
                                 * estimated per sample: its share of the sample's wall time) */
    /* statistics (qc_bench_stats.c) */
    double median, min, max, mad, lo, hi; /* lo..hi: bootstrap 95 % interval of the median */
    double best, best_lo;       /* the gate's location: the fastest run over all repetitions,
                                 * and its lower bound: the upper-quartile repetition's fastest */
    double limit;               /* tokens/s the limit allows (0: unknown) */
    int base;                   /* figure of the --ratio-to backend it is compared with (-1) */
    double ratio, ratio_lo, ratio_hi;
    /* the --baseline gate (qc_bench_gate.c) */
    int gated;                  /* 1: a baseline figure matched */
    double b_median, b_lo, b_hi;
    double b_best, b_best_lo;   /* the baseline's location (its best, else median) and bound */
    int verdict;                /* 0 ok, 1 regression, 2 faster */
} bench_fig;

typedef struct {
    char name[128];     /* "optimized", "plugin:libx.so", "exec:x.py", "llamacpp", "llama-bench" */
    char desc[768];     /* describe() of the last thread count opened (or the peer's) */
    char tdesc[MAX_LIST][768]; /* describe() per --threads entry: a figure's label (bench_fig_desc) */
    int isref;          /* the reference backend (runs the ref_* workload) */
    int peer;           /* imported from --peer-json (not measured here) */
    int http;           /* a server (http:): timed per request, no static figure */
    int bf16_dot;       /* 1: the backend created reported QC_BE_KERNEL_BF16_DOT (be->kernels,
                           qc_backend.h): its dynamic prefill limit is the BF16 dot probe's */
    int amx;            /* 1: it reported QC_BE_KERNEL_AMX: on BF16 weights its dynamic
                           prefill limit is the AMX probe's / 3 */
} bench_backend;

typedef struct {
    int threads;
    double bw[MAX_REPS], peak[MAX_REPS]; /* probe samples: GB/s, GFLOP/s */
    double dot[MAX_REPS];     /* BF16 dot (vdpbf16ps) GFLOP/s, when a backend uses it; else 0 */
    double amx[MAX_REPS];     /* AMX tdpbf16ps GFLOP/s, when a backend uses it; else 0 */
    int n;
    double bw_med, bw_max, peak_med, peak_max, dot_med, dot_max, amx_med, amx_max;
} bench_probe;

typedef struct {
    char vendor[64];        /* vendor_id / cpuid vendor string */
    char cpu[256];          /* model name */
    int family, model, stepping; /* -1 unknown */
    char flags[512];        /* ISA flags of interest present ("avx2 fma avx512f ...") */
    int cores;              /* online CPUs */
    double mem_gib;         /* MemTotal */
    double cache_bytes;     /* the largest CPU cache (sysfs), 0 unknown */
    char cpuid_src[32];     /* "cpuid" or "/proc/cpuinfo" */
} bench_machine_info;

typedef struct {
    char model_name[256];   /* "synthetic 0.8b" or the directory */
    bench_moe_info wt;      /* total vs active weight bytes, --layers truncation (qc_bench_moe.c) */
    qc_dtype dtype;         /* weight dtype (of the lm_head) */
    bench_machine_info mc;
    const char *isa;        /* optimized kernel table chosen at run time */
    char date[64];          /* UTC ISO 8601 */
    bench_probe probe[MAX_LIST]; /* per thread count */
    int n_probe;
    double bytes_per_token;  /* weight bytes read per decoded token */
    double flops_pp[MAX_LIST]; /* model flops per prefill token, per prompt length */
    int static_prompt, decode, max_seq_len, ref_prompt, ref_decode, reps;
    bench_backend be[MAX_BACKENDS];
    int n_be;
    bench_fig fig[MAX_FIGS];
    int n_fig;
    int ratio_base;          /* backend index of --ratio-to (-1: none) */
    char warn[MAX_WARN][320];
    int n_warn;
    /* peer import */
    char peer_desc[512];     /* what the llama-bench run used ("" none) */
    int peer_unmatched;      /* its entries no figure of this run matched */
    /* the gate */
    int gate_done;           /* 1: a --baseline was compared */
    int gate_compared, gate_regressions, gate_remeasured;
    char gate_verdict[64];   /* "pass", "regression", "nothing compared" */
} bench_report;

/* What the measuring works with (owned; released by bench_close). */
typedef struct {
    qc_backend *bes[MAX_BACKENDS];   /* per backend of bench_opts.backends (NULL: not made) */
    struct qc_server *srv[MAX_BACKENDS]; /* a server backend (http:) instead of bes[b] */
    qc_state *sts[MAX_BACKENDS];     /* its state */
    int32_t *toks;                   /* the prompt tokens (every run takes a prefix) */
    int ntoks;
    float *logits;                   /* [V] decode logits */
    int ctx;                         /* state positions of the optimized / runtime backends */
    const void *seg_p[MAX_SEGMENTS]; /* the weight tensors streamed by the bandwidth probe */
    size_t seg_n[MAX_SEGMENTS];      /* their sizes in bytes */
    int nseg;
} bench_run;

/* ---- qc_bench_args.c --------------------------------------------------------------------- */

extern const char bench_usage[];
/* Parse the command line into *o (*help = 1 for --help). QC_OK or QC_ERR_ARG. */
qc_status bench_parse_args(int argc, char **argv, bench_opts *o, int *help, qc_err *err);
/* The largest value of a list (0 for none). */
int bench_list_max(const int *v, int n);

/* ---- qc_bench_machine.c ------------------------------------------------------------------ */

/* CLOCK_MONOTONIC in seconds. */
double bench_now_s(void);
/* The machine facts into *mc (never fails: unknown fields stay "unknown" / -1 / 0). */
void bench_machine_info_read(bench_machine_info *mc);
/* The machine facts, ISA, date, the model's weight bytes and flops per token, the workload of
 * o into *R; the weight segments into run. */
void bench_machine(const bench_opts *o, const qc_model *m, bench_report *R, bench_run *run);
/* This process's run-queue wait so far in seconds (Linux /proc schedstat: the time its
 * threads were runnable but not running; 0 where unavailable): threads <= 1 the calling
 * thread's, else the sum over the process's threads / threads. */
double bench_rq_wait_s(int threads);
/* One probe sample (best of 3 passes) at thread count probe p into R->probe[p]. */
void bench_probe_sample(bench_report *R, const bench_run *run, int p, int rep, int reps);

/* ---- qc_bench_measure.c ------------------------------------------------------------------ */

/* run->toks (the prompt of every run) and run->logits. 0, or -1 out of memory (both NULL). */
int bench_alloc_prompts(const bench_opts *o, const qc_model *m, bench_run *run);
/* The backends' names and descriptions into R (specs parsed; none created yet). Exit code. */
int bench_name_backends(const bench_opts *o, bench_report *R, qc_err *err);
/* Every thread count: create the backends, warm up, run the interleaved repetitions (probes,
 * then every backend's figures), destroy them; samples into R->fig. Exit code. */
int bench_measure_all(const bench_opts *o, qc_model *m, bench_report *R, bench_run *run,
                      qc_err *err);
/* Re-measure every figure of R (twice the repetitions and --min-time), the new samples added
 * to the first look's: the gate's second look. Exit code. */
int bench_remeasure(const bench_opts *o, qc_model *m, bench_report *R, bench_run *run,
                    qc_err *err);
/* Free the prompts. */
void bench_close(bench_run *run);
/* Figure index of (backend, mode, tokens, depth, threads), or -1. */
int bench_find_fig(const bench_report *R, int backend, int mode, int tokens, int depth,
                   int threads);
/* Append a figure (no samples); its index, or -1 when full. */
int bench_add_fig(bench_report *R, int backend, int mode, int tokens, int depth, int threads,
                  int ti);

/* ---- qc_bench_stats.c -------------------------------------------------------------------- */

extern const char *const bench_mode_names[N_MODES]; /* "static", "dynamic", "decode" */
/* Statistics, limits, ratios of every figure, then the warnings. */
void bench_finish(bench_report *R, const bench_opts *o);
/* Backend b runs the BF16 dot GEMM (R->be[b].bf16_dot, from the backend's own report when it
 * was created): its dynamic prefill limit is the BF16 dot probe's, not the FP32 FMA probe's. */
static inline int bench_uses_bf16_dot(const bench_report *R, int b) {
    return b >= 0 && b < R->n_be && R->be[b].bf16_dot;
}
/* Backend b runs the AMX GEMM on this run's BF16 or Q8_0 weights (R->be[b].amx, its own
 * report): its dynamic prefill limit is the AMX probe's / 3 (three tdpbf16ps terms per
 * multiply-add). */
static inline int bench_uses_amx(const bench_report *R, int b) {
    return b >= 0 && b < R->n_be && R->be[b].amx &&
           (R->dtype == QC_BF16 || R->dtype == QC_Q8_0);
}
/* The name of a figure's limit: "bandwidth", "FMA peak", "BF16 dot peak" or "AMX peak / 3". */
const char *bench_limit_name(const bench_report *R, const bench_fig *f);
/* Statistics of one figure only (median, min, max, MAD, interval). */
void bench_fig_stats(bench_fig *f);
/* The label of f's backend at f's thread count (its describe() then), else the backend's. */
const char *bench_fig_desc(const bench_report *R, const bench_fig *f);
/* Add a warning (printf format); also printed on stderr. */
void bench_warn(bench_report *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- qc_bench_gate.c --------------------------------------------------------------------- */

/* --peer-json FILE: its entries become figures of an imported backend "llama-bench", matched
 * by test (pp N / tg N at depth D, threads) to this run's figures. Call after the figures are
 * planned. Exit code (2: the file or a field is bad, named). */
int bench_import_peer(const bench_opts *o, bench_report *R, qc_err *err);
/* The gate's noise model in one line (reports, --help). */
extern const char bench_gate_model[];
/* Compare R with --baseline (noise model, bench_gate_model: a regression when a figure's new
 * fastest run lies below the baseline's bound, its upper-quartile repetition's fastest run, by
 * more than --max-regression). Fills the figures' gate fields and R->gate_*. *suspects
 * receives the regression count. Exit code (2 bad baseline). */
int bench_gate(const bench_opts *o, bench_report *R, int *suspects, qc_err *err);
/* The gate's per-figure lines (REGRESSION marked) and its summary, on stderr. */
void bench_gate_print(const bench_opts *o, const bench_report *R);
/* The gate's exit code once the reports are written: QC_EXIT_FAIL on a regression,
 * QC_EXIT_NOTHING when no figure matched, else QC_EXIT_PASS. */
int bench_gate_exit(const bench_report *R);

/* ---- qc_bench_report.c ------------------------------------------------------------------- */

/* The Markdown table on stdout and --markdown, --json, --svg. Exit code. */
int bench_write_reports(bench_report *R, const bench_opts *o, qc_err *err);

/* ---- --profile-ops (qc_bench_profile.c) ---- */
struct cJSON;
/* Time per op class of the optimized backend (prefill, decode, prefill with all logits) with
 * its timer hook; the probes of R. Exit code (QC_EXIT_PASS, or the error reported). */
int bench_profile_ops(const bench_opts *o, const qc_model *m, const bench_report *R, qc_err *err);
/* Its Markdown section (malloc'ed, the caller frees), NULL when not measured. */
char *bench_profile_markdown(void);
/* Adds "profile_ops" to the JSON report when measured. */
void bench_profile_json(struct cJSON *root);

#endif /* QC_BENCH_INTERNAL_H */
