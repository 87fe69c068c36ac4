/* qc_report_html.h — the report a person reads in a browser (`check --html FILE`): ONE
 * self-contained HTML file (inline CSS, inline SVG, a small inline script; no network: a
 * Content-Security-Policy forbids every external load) with
 *   - the verdict per runtime (PASS / PARTIAL / FAIL), its coverage, the capability -> checks
 *     it unlocks table and the --require line (qc_report_verdict.h);
 *   - the summary counts, the exit code, the provenance and the warnings;
 *   - per (golden, case) the error charts the rows carry data for (qc_report_html_svg.c):
 *     the worst element / tolerance of every check on a log scale, the per-layer max |diff|
 *     of the hidden states a failing row's localisation lists, the long-decode drift curves
 *     of the logits and of every state buffer per layer;
 *   - the likely causes of the failures per runtime (qc_report_causes.h), each with a link
 *     that shows the rows it explains;
 *   - every row in a table, with its detail, filterable by text and verdict (the script; the
 *     page also takes ?q=WORDS&v=FAIL,ERROR, or ?rows=r3+r7: those rows). The script marks <html data-qc-script="ok">
 *     once it ran without throwing (what tests/cli/test_html_report.sh looks for).
 * All text from the rows is escaped. Written atomically (temp file + rename, qc_outpath.h).
 */
#ifndef QC_REPORT_HTML_H
#define QC_REPORT_HTML_H

#include "qc/qc_status.h"
#include "qc_report_results.h"

/* The page as a malloc'd string (NULL on OOM). */
char *qc_report_html_string(const qc_results *r);
qc_status qc_report_html_write(const char *path, const qc_results *r, qc_err *err);

#endif /* QC_REPORT_HTML_H */
