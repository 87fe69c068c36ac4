/* qc_check_cli.h — what the command lines of the check engine share (harness-private):
 *   qc_check_cli.c    option parsing (check, diff, calibrate, policy), the policy it loads,
 *                     the reports it writes
 *   qc_check_scope.c  --rerun-failed (the combinations an earlier report failed) and the
 *                     warnings for policy overrides that can never match
 *   qc_check.c        qwen-conform [check] and policy --print
 *   qc_cmd_diff.c     qwen-conform diff;  qc_cmd_calibrate.c  qwen-conform calibrate
 * Functions return qc_status (or an exit code where named so); errors fill err.
 */
#ifndef QC_CHECK_CLI_H
#define QC_CHECK_CLI_H

#include "qc_check_internal.h"
#include "qc_policy.h"

/* What the command line of check (and diff, policy --print) holds beyond qc_check_opts. */
#define MAX_TOL_FLAGS 64
typedef struct {
    int durations;              /* --durations N; -1: not given; 0: all */
    const char *rerun;          /* --rerun-failed REPORT.json */
    struct {
        qc_tclass cls;
        const char *field;      /* "atol" / "rtol" */
        double v;
        const char *text;       /* as given: "logits=0.01" */
    } tol[MAX_TOL_FLAGS];       /* --atol / --rtol in command-line order (later wins) */
    int n_tol;
    const char *tier;           /* --tier NAME (qc_tier.h); NULL: the policy as loaded */
    int min_coverage;           /* --min-coverage PCT: a runtime whose coverage is below FAILS
                                   the run (exit 1); -1: no minimum */
    const char *html;           /* --html F: the self-contained HTML report (check only) */
} check_cli;

/* One combination; "*" in a field matches anything (a file-level row: case "_model" or
 * "_file", backend / mode "-"). */
typedef struct {
    char stem[128], case_name[64], backend[128], mode[32];
} rerun_key;

typedef struct {
    rerun_key *k;
    int n, cap;
    int n_rows;               /* FAIL / ERROR rows read */
    char tool_version[64];    /* of the report */
} rerun_set;

/* The verdict per runtime under test (console) and --min-coverage: a runtime below it makes
 * the run a conformance failure (res->exit_code raised to 1, a line says why). */
void ckcli_verdict(qc_results *res, int min_coverage);
/* Defaults: no --durations, no --rerun-failed, no --atol / --rtol. */
void ckcli_check_cli_init(check_cli *x);
/* One --atol / --rtol CLASS=V into x (QC_ERR_ARG naming the flag). */
qc_status ckcli_parse_tol_flag(const char *flag, const char *v, check_cli *x, qc_err *err);
/* Apply x's --tier, then its --atol / --rtol in order, to pol's class defaults. */
qc_status ckcli_apply_tol_flags(const check_cli *x, qc_policy *pol, qc_err *err);
/* Options of check / calibrate (runs != NULL: calibrate). Returns -1 to go on, else the exit code. */
int ckcli_parse_common(int argc, char **argv, const char *prog, qc_check_opts *o, int *runs,
                        const char **out, double *factor, const char **policy_out,
                        check_cli *x);
/* --policy, else tolerances.json beside the goldens (DIR/ or its parent), else built-in. */
qc_status ckcli_load_policy(const qc_check_opts *o, qc_policy **pol, qc_err *err);
/* qc_check_opts defaults (1 thread, no faults). */
void ckcli_opts_init(qc_check_opts *o);
/* Frees the compiled --filter. */
void ckcli_opts_free(qc_check_opts *o);
/* --model DIR holds a config.json (checked before any work). */
qc_status ckcli_check_model_dir(const qc_check_opts *o, qc_err *err);
/* Write --json / --junit; returns rc, raised to QC_EXIT_ERROR when a report fails. */
int ckcli_write_reports(const char *prog, const qc_check_opts *o, qc_results *res, int rc);
/* Write --html (path NULL: nothing); returns rc, raised to QC_EXIT_ERROR when it fails. */
int ckcli_write_html(const char *prog, const char *path, const qc_results *res, int rc);
/* The case selector of --rerun-failed: 1 when (stem, case, backend, mode) failed before. */
int ckcli_rerun_select(void *user, const char *stem, const char *cname, const char *backend,
                        const char *mode);
/* Read the FAIL / ERROR combinations of an earlier JSON report into rs. */
qc_status ckcli_rerun_load(const char *path, rerun_set *rs, qc_err *err);
/* Warn (res) about policy overrides that no case x tensor under golden_root can match. */
void ckcli_policy_scope_warnings(const qc_policy *pol, const char *golden_root,
                                  qc_results *res);

/* After a run that checked nothing under --filter: what --filter matches, and a note when its
 * text names a check (stderr). */
void ckcli_filter_hint(const qc_check_opts *o);

#endif /* QC_CHECK_CLI_H */
