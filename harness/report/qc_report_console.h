/* qc_report_console.h — the readable console table: one row per case x backend x mode x check,
 * streamed as checks finish, failure details after the table, and the summary ending with the
 * line "N passed, M failed, K skipped" alone on the last line. */
#ifndef QC_REPORT_CONSOLE_H
#define QC_REPORT_CONSOLE_H

#include <stdio.h>

#include "qc_report_results.h"

void qc_report_console_header(FILE *f);
/* The header printed by the first row that is printed (--quiet: no header above nothing). */
void qc_report_console_header_lazy(void);
/* Progress before golden file paths[i] of n (i == n: the end): on a terminal one line
 * rewritten in place (file, elapsed, ETA) and cleared at the end; otherwise "[file i/n] path"
 * lines, none with quiet. */
void qc_report_console_progress(FILE *f, int i, int n, char *const *paths, double elapsed,
                                int quiet);
/* The BACKEND column as wide as the longest of the run's backend names (9 to 40; NULLs skipped),
 * so that `exec:my_adapter.py` does not push the columns after it out of line. */
void qc_report_console_fit(const char *const *backends, int n);
/* One table row. quiet: print only FAIL / ERROR rows. */
void qc_report_console_row(FILE *f, const qc_check_row *row, int quiet);
/* The details (torch-style summary, localisation, h5diff line) of every FAIL / ERROR row. */
void qc_report_console_failures(FILE *f, const qc_results *r);
/* The one summary, two or three lines that agree:
 *   "<n> checks in <t> s (policy: P): <E> error(s)[, <W> warning(s)]; exit <code>"
 *   ["stopped early: --maxfail N reached (<k> failing checks); the rest was not run"]
 *   "<passed> passed, <failed> failed, <skipped> skipped"      (always the last line)
 * failed counts FAIL rows only; ERROR rows are counted on the first line. The exit code is
 * r->exit_code combined with the rows (qc_results_exit_code). */
void qc_report_console_summary(FILE *f, const qc_results *r);
/* pytest's --durations: the n slowest (stem/case/backend/mode) runs (every check row's time
 * summed; n = 0: all), slowest first. */
void qc_report_console_durations(FILE *f, const qc_results *r, int n);
/* Every warning on f, one "<prog>: warning: ..." line each. */
void qc_report_console_warnings(FILE *f, const qc_results *r, const char *prog);

#endif /* QC_REPORT_CONSOLE_H */
