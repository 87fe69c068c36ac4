/* qc_report_results.h — the rows a check run produces, shared by the console, JSON and JUnit
 * reports. One row = one (golden file, case, backend, mode, check). */
#ifndef QC_REPORT_RESULTS_H
#define QC_REPORT_RESULTS_H

#include "qc/qc_status.h"
#include "qc_metrics.h"
#include "qc_policy.h"

typedef enum {
    QC_VERDICT_PASS = 0,
    QC_VERDICT_FAIL,   /* conformance failure */
    QC_VERDICT_SKIP,   /* not applicable / not run (reason in detail) */
    QC_VERDICT_ERROR   /* could not run (I/O, format, backend error) */
} qc_verdict;

const char *qc_verdict_str(qc_verdict v); /* "PASS", "FAIL", "SKIP", "ERROR" */

/* Where a failure first appears, as far as the data supports it. */
typedef enum {
    QC_LOC_NONE = 0,        /* not localised (the row passed, or no data to localise with) */
    QC_LOC_EMBEDDINGS,      /* hidden[0] already differs */
    QC_LOC_LAYER,           /* layer `layer` is the first divergent one (its output differs) */
    QC_LOC_LAST_OR_NORM,    /* the last layer or the final norm (hidden[L] is after the norm) */
    QC_LOC_AFTER_NORM,      /* every hidden state agrees: lm_head / logits, or the state buffers */
    QC_LOC_AT_OR_BEFORE     /* states only: the divergence began at or before layer `layer`,
                               after layer `layer_lo` (-1: no lower bound) */
} qc_loc_kind;

const char *qc_loc_kind_str(qc_loc_kind k); /* "none", "embeddings", "layer", ... */

typedef struct {
    qc_loc_kind kind;
    int layer;             /* the layer named (-1: none) */
    int layer_lo;          /* QC_LOC_AT_OR_BEFORE: the last layer below that passes (-1: none) */
    int step;              /* -1: in the prefill; else the first failing decode step */
    char source[16];       /* what localised it: "hidden", "state", "decode_hidden" */
    char block[8];         /* where in layer `layer` it starts: "mixer" (moe_in / mlp_in, the
                              mixer output, already differs), "moe" (MoE: moe_in agrees, the
                              layer output does not), "mlp" (dense: mlp_in agrees); "" unknown */
    int has_expert;        /* MoE: 1 when the router chose differently there: */
    int expert_expected;   /*   the golden's expert missing from the actual choice */
    int expert_got;        /*   the expert chosen instead (-1: ids agree, the weight of
                                expert_expected differs) */
} qc_localisation;

typedef struct {
    char golden[1024];     /* golden file path */
    char stem[128];        /* golden file stem (report classname prefix) */
    char case_name[64];    /* case, or "_model" for file-level checks */
    char backend[128];     /* "reference", "optimized", "plugin:libx.so", "exec:..." or "-" */
    char mode[32];         /* "static", "dynamic", "nokv" or "-" */
    char check[64];        /* check name, e.g. "prefill.logits", "static_eq_dynamic" */
    qc_verdict verdict;
    int has_metrics;       /* 1: m and tol are meaningful */
    qc_metrics m;          /* metrics (finished) */
    qc_tol tol;            /* tolerance of the main tensor (first part) */
    char tol_reason[256];  /* reason of the override that applied ("" = defaults) */
    char keyline[320];     /* one line of key numbers (or the reason for SKIP / ERROR) */
    char *detail;          /* malloc'd multi-line detail (summary, localisation, h5diff) or NULL */
    char *drift_json;      /* malloc'd JSON object text, the JSON report's "drift" of a
                              long_decode_drift row (the error curves over the steps), or NULL;
                              taken over with the row like detail */
    qc_localisation loc;   /* structured first divergence of a failing row (kind NONE else) */
    double seconds;        /* wall time attributed to the row */
} qc_check_row;

typedef struct {
    qc_check_row *rows;    /* [n] */
    int n, cap;
    int n_pass, n_fail, n_skip, n_error;
    /* provenance for reports */
    char tool_version[64];   /* "0.1.0 (abc1234)" */
    char machine[256];       /* uname + CPU model */
    char isa[256];           /* optimized backend describe() or "n/a" */
    char policy[1024];       /* policy source */
    char started[40];        /* ISO-8601 UTC start time */
    double seconds;          /* total wall time */
    /* how the run ended (set by the command before the reports are written) */
    int exit_code;           /* the process exit code; -1 (qc_results_init): derive it from the
                                rows with qc_results_exit_code */
    int stopped_early;       /* 1: --maxfail reached with work left; the reports hold what ran */
    int maxfail;             /* the --maxfail value when stopped_early */
    char **warnings;         /* [n_warnings] malloc'd lines (policy overrides that can never
                                match, ...): console stderr, JSON "warnings", JUnit system-err */
    int n_warnings;
} qc_results;

/* The exit-code precedence (README "Exit codes"): an error (2: usage / I/O / format / backend,
 * the run is incomplete) > a conformance failure (1) > nothing checked (3) > pass (0). */
int qc_exit_precedence(int a, int b);
/* The exit code the rows give by that precedence: any ERROR row 2, else any FAIL 1, else no
 * PASS 3, else 0 (r->exit_code when it is set, combined with that). */
int qc_results_exit_code(const qc_results *r);
/* Append a warning (printf format); OOM drops it. */
void qc_results_warn(qc_results *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void qc_results_init(qc_results *r);
void qc_results_free(qc_results *r);
/* Append a copy of row (detail is taken over: the caller must not free it). Returns the stored
 * row or NULL on OOM (detail freed). */
qc_check_row *qc_results_add(qc_results *r, const qc_check_row *row);

/* Fill machine (uname + /proc/cpuinfo model name) and started. */
void qc_results_fill_provenance(qc_results *r);

/* printf into a fresh malloc'd string (NULL on OOM). */
char *qc_strdup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* QC_REPORT_RESULTS_H */
