/* qc_check.h — the check engine behind `qwen-conform [check]` and `qwen-conform calibrate`.
 *
 * For every golden file (qc_golden_find), every selected case, backend and prefill mode, the
 * engine runs the case (teacher-forced decode) and produces one qc_check_row per check:
 *   vs the golden    prefill.logits prefill.hidden prefill.<state> decode.logits decode.<state>
 *                    argmax
 *   invariants       garbage_reset (NaN state + reset == fresh, bitwise), unused_slots (KV slots
 *                    beyond the used positions stay exactly 0), threads_bitwise (a threaded
 *                    backend at 1 vs 2 threads), static_eq_dynamic, chunked_eq_recurrent,
 *                    chunk_sweep.cN, opt_eq_ref (a built-in against the reference built-in:
 *                    qc_builtin_info.vs_reference, qc_registry.h)
 *   per file         model_hash (config / weights SHA-256 of the loaded model vs the golden)
 * The qc_cmd_check / qc_cmd_calibrate entry points are declared in qc_cli.h.
 */
#ifndef QC_CHECK_H
#define QC_CHECK_H

#include <regex.h>

#include "qc/qc_prefill.h"
#include "qc_policy.h"
#include "qc_registry.h"
#include "qc_report_results.h"

/* qc_check_opts.quiet: how much the console shows (the reports always hold every row). */
enum { QC_QUIET_VERBOSE = 0, QC_QUIET_DEFAULT = 1, QC_QUIET_ALL = 2 };

/* Test-only faults (hidden CLI flag --inject-fault). */
typedef struct {
    int norm_no_offset;     /* 0 none; 1: (1 + w) norms applied as w */
    int norm_layer;         /* -1: every input/post/final norm; else only layer N's input norm */
    int stale_conv_state;   /* 1: conv_state holds stale columns after a reset */
    int static_no_advance;  /* 1: static prefill does not advance the position */
    int snapshot_noop;      /* 1: a snapshot saves nothing (restore only resets the position) */
    int rollback_keeps_conv;/* 1: a rollback restores everything but the conv states */
    int slot_off_by_one;    /* 1: sequence i > 0 uses slot i - 1 (built-in backends) */
    int recurrent_bf16;     /* 1: the recurrent state is rounded to bf16 after every forward
                               call (built-in backends; ollama/ollama#15865) */
    int unguarded_exp;      /* 1: the reference's chunked DeltaNet computes its decay ratios as
                               exp(gamma_r) * exp(-gamma_c) (pytorch/executorch#21417) */
    const char *moe_fault;  /* MoE models, reference backend: the fault.moe variant (NULL: none):
                               no_renorm, gate_all, topk_next, gate_drop */
} qc_check_faults;

typedef struct {
    const char *golden;       /* --golden DIR|FILE */
    unsigned builtins;        /* --backend: bit i = the registry's built-in backend i
                                 (qc_registry_builtin); 0 without a runtime under test: every
                                 built-in backend */
    int has_ext;              /* 1: a runtime under test was given (ext) */
    qc_runtime_spec ext;      /* the runtime under test: plugin / exec / http */
    unsigned require;         /* --require: capability bits whose absence is a FAIL */
    double adapter_timeout;   /* --adapter-timeout SECONDS (exec adapters), default 60 */
    int modes;                /* bit (1 << qc_mode) mask; 0 = all */
    const char *policy_path;  /* --policy F, or NULL (auto) */
    const char *json_path;    /* --json F */
    const char *junit_path;   /* --junit F */
    const char *dump_dir;     /* --dump-actual DIR */
    int list;                 /* --list: print ids, run nothing */
    int quiet;                /* console: QC_QUIET_VERBOSE (-v: every row, per-case lines),
                               * QC_QUIET_DEFAULT (failures, notes, summary), QC_QUIET_ALL
                               * (--quiet: no notes either); 0 unless the command sets it */
    int no_hash_check;        /* --no-hash-check */
    const char *max_memory;   /* --max-memory SIZE (NULL: the machine's available memory) */
    int has_filter;           /* --filter given */
    regex_t filter;           /* compiled --filter (POSIX extended) */
    const char *filter_src;   /* --filter's text (argv) */
    int shard_i, shard_n;     /* --shard i/n (1-based i); n = 0: no sharding */
    int threads;              /* optimized backend threads for the main runs (default 2) */
    qc_check_faults faults;   /* test-only */
    const char *model_dir;    /* --model DIR: the model every golden is checked against (NULL:
                                 each golden's model_path) */
    int insecure;             /* --insecure: an https:// server's certificate is not verified
                                 (self-signed servers; also insecure=1 in the http: spec) */
    int topk;                 /* --topk K: see every runtime through its top-k log-probabilities
                                 only (the topk.* rows instead of the checks against the golden's
                                 tensors; 0: off) */
    int maxfail;              /* --maxfail N / -x: stop once N rows FAILED or ERRORED (0: never);
                                 the run in progress finishes with all its checks */
    int stopped;              /* set by the engine when it stopped with work left (--maxfail) */
    /* an extra selection of (stem, case, backend, mode), ANDed with --filter (--rerun-failed);
     * NULL: everything */
    int (*select)(void *user, const char *stem, const char *case_name, const char *backend,
                  const char *mode);
    void *select_user;
    /* calibration */
    int calibrate;            /* 1: collect noise measurements */
    void *calib;              /* calibration sink (qc_check.c private) */
} qc_check_opts;

/* Run the engine; fills res (rows + provenance). Returns the exit code (QC_EXIT_*). */
int qc_check_run(qc_check_opts *o, qc_policy *pol, qc_results *res);

#endif /* QC_CHECK_H */
