/* qc_report_verdict.h — the verdict a runtime author reads first: per runtime under test PASS,
 * PARTIAL or FAIL, with the capability coverage of the battery.
 *
 *   FAIL     a check failed or could not run (ERROR) for this runtime
 *   PARTIAL  nothing failed, but checks were SKIPPED because the runtime does not announce a
 *            capability (hidden, state_read, ...): the table says how many checks each
 *            capability would unlock and what they give, and the --require line that makes
 *            CI insist on them
 *   PASS     nothing failed and no check was skipped for a missing capability (skips for
 *            other reasons — a dense model has no router — are listed, grouped by reason)
 * coverage = checks run / (checks run + checks skipped for a missing capability).
 * Ownership: qc_verdicts owns its arrays; free with qc_verdicts_free.
 */
#ifndef QC_REPORT_VERDICT_H
#define QC_REPORT_VERDICT_H

#include <stdio.h>

#include "qc_report_results.h"

typedef struct {
    char name[32];   /* capability ("hidden") or a skip reason's text */
    int n;           /* rows */
} qc_verdict_count;

typedef struct {
    char backend[128];
    int pass, fail, skip, error;
    int cap_skip;                  /* rows SKIPPED for a capability not announced */
    qc_verdict_count caps[16];     /* per capability */
    int n_caps;
    char reasons[8][160];          /* other skip reasons (first 8 distinct) */
    int reason_n[8];
    int n_reasons;
    const char *verdict;           /* "PASS", "PARTIAL", "FAIL" */
    double coverage;               /* 0..1 */
} qc_rt_verdict;

typedef struct {
    qc_rt_verdict *v;   /* one per backend column value (the "-" rows are not a runtime) */
    int n;
} qc_verdicts;

/* Compute the verdicts of r. 0, or -1 when out of memory. */
int qc_verdicts_compute(const qc_results *r, qc_verdicts *out);
void qc_verdicts_free(qc_verdicts *v);
/* What checks a capability unlocks (static), for the table; "" for an unknown name. */
const char *qc_capability_gives(const char *cap);
/* The console block (a few lines per runtime). */
void qc_report_verdict_console(FILE *f, const qc_verdicts *v);
/* 1 when some runtime's coverage is below min_pct (0..100; < 0: no minimum). */
int qc_verdicts_below(const qc_verdicts *v, double min_pct);

#endif /* QC_REPORT_VERDICT_H */
