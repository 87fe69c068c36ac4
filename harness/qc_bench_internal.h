/* qc_bench_internal.h — what the files of `qwen-conform bench` share (harness-private).
 *
 * The command is split by concern:
 *   qc_cmd_bench.c      the command line and its steps (files, model, measure, report)
 *   qc_bench_measure.c  the measuring: machine facts and probes, the backends under test,
 *                       the interleaved repetitions
 *   qc_bench_report.c   the reports: medians and limits, Markdown, JSON, SVG, the --baseline
 *                       comparison
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

#define PROG "qwen-conform bench"
#define MAX_BACKENDS 4
#define MAX_REPS 64
#define N_MODES 3
#define MAX_SEGMENTS 4096  /* weight tensors streamed by the bandwidth probe */

/* schema_version of the --json report (and of a --baseline read back) */
#define QC_BENCH_JSON_SCHEMA_VERSION 1

/* ===================================================================================== */
/* Options and results                                                                    */
/* ===================================================================================== */

typedef struct {
    const char *model_dir;   /* --model DIR, or NULL */
    const char *synthetic;   /* --synthetic NAME, or NULL */
    qc_dtype dtype;          /* synthetic weight dtype */
    int prompt;              /* dynamic prefill tokens */
    int static_prompt;       /* static prefill tokens (0: min(prompt, 64)) */
    int decode;              /* decode steps */
    int max_seq_len;         /* dynamic chunk (0: = prompt) */
    int ref_prompt;          /* reference backend: prompt (static and dynamic) */
    int ref_decode;          /* reference backend: decode steps */
    int threads;             /* optimized backend threads (0: OpenMP default) */
    int reps;                /* repetitions */
    char backends[MAX_BACKENDS][2100]; /* backend specs (registry names: qc_registry.h) */
    int n_backends;
    int n_external;          /* how many are runtimes under test (plugin / exec) */
    long seed;               /* synthetic weights seed */
    const char *json, *markdown, *svg, *baseline;
    const char *max_memory;   /* --max-memory SIZE, or NULL (available memory) */
    double max_regression;   /* percent */
} bench_opts;

typedef struct {
    int tokens;                 /* tokens per sample */
    double samples[MAX_REPS];   /* tokens/s per repetition */
    int n;
    double median, min;
    double ratio;               /* median / reference median (0: no reference) */
    double limit;               /* tokens/s the limit allows (0: unknown) */
} bench_metric;

typedef struct {
    char name[128];     /* "optimized", "plugin:libx.so", "exec:x.py", "llamacpp" */
    char desc[768];     /* describe() */
    bench_metric m[N_MODES];
} bench_backend;

typedef struct {
    char model_name[256];   /* "synthetic 0.8b" or the directory */
    qc_dtype dtype;         /* weight dtype (of the lm_head) */
    char cpu[256];          /* /proc/cpuinfo model name */
    int cores;              /* online CPUs */
    const char *isa;        /* optimized kernel table chosen at run time */
    int threads;            /* threads used by the probes and the optimized backend */
    char date[64];          /* UTC ISO 8601 */
    double bw[MAX_REPS], peak[MAX_REPS]; /* probe samples: GB/s, GFLOP/s */
    int n_probe;
    double bw_med, bw_max, peak_med, peak_max;
    double bytes_per_token;  /* weight bytes read per decoded token */
    double flops_per_token;  /* model flops per prefill token (dynamic) */
    int static_prompt, prompt, decode, max_seq_len, ref_prompt, ref_decode;
    bench_backend be[MAX_BACKENDS];
    int n_be;
} bench_report;

/* What the measuring works with (owned; released by bench_close). */
typedef struct {
    qc_backend *bes[MAX_BACKENDS];   /* per backend of bench_opts.backends (NULL: not made) */
    qc_state *sts[MAX_BACKENDS];     /* its state */
    int32_t *toks;                   /* the prompt tokens (every run takes a prefix) */
    float *logits;                   /* [V] decode logits */
    int big;                         /* max(prompt, static_prompt) */
    const void *seg_p[MAX_SEGMENTS]; /* the weight tensors streamed by the bandwidth probe */
    size_t seg_n[MAX_SEGMENTS];      /* their sizes in bytes */
    int nseg;
} bench_run;

/* ---- qc_bench_measure.c ------------------------------------------------------------------ */

/* CLOCK_MONOTONIC in seconds. */
double bench_now_s(void);
/* The machine facts (cpu, cores, ISA, threads, date), the model's weight bytes and flops per
 * token, the workload of o into *R; the weight segments into run. */
void bench_machine(const bench_opts *o, const qc_model *m, bench_report *R, bench_run *run);
/* run->toks (the prompt of every run) and run->logits. 0, or -1 out of memory (both NULL). */
int bench_alloc_prompts(const bench_opts *o, const qc_model *m, bench_run *run);
/* Create every backend of o and its state, name them in R (R->n_be, names, tokens per
 * mode). Exit code. */
int bench_open_backends(const bench_opts *o, qc_model *m, bench_report *R, bench_run *run,
                        qc_err *err);
/* The interleaved repetitions: probes, then every backend's static / dynamic / decode run,
 * samples into R. Exit code. */
int bench_run_reps(const bench_opts *o, bench_report *R, bench_run *run, qc_err *err);
/* Destroy the backends and states, free the prompts. */
void bench_close(const bench_opts *o, bench_run *run);

/* ---- qc_bench_report.c ------------------------------------------------------------------- */

/* Medians, limits and ratios of R; the Markdown table on stdout and --markdown, --json,
 * --svg; then the --baseline gate (QC_EXIT_FAIL on a regression, QC_EXIT_NOTHING when no
 * metric matches). Exit code. */
int bench_write_reports(bench_report *R, const bench_opts *o, qc_err *err);

#endif /* QC_BENCH_INTERNAL_H */
