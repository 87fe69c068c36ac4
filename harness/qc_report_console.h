/* qc_report_console.h — the readable console table: one row per case x backend x mode x check,
 * streamed as checks finish, failure details after the table, and the summary line
 * "N passed, M failed" alone on the last line. */
#ifndef QC_REPORT_CONSOLE_H
#define QC_REPORT_CONSOLE_H

#include <stdio.h>

#include "qc_report_results.h"

void qc_report_console_header(FILE *f);
/* One table row. quiet: print only FAIL / ERROR rows. */
void qc_report_console_row(FILE *f, const qc_check_row *row, int quiet);
/* The details (torch-style summary, localisation, h5diff line) of every FAIL / ERROR row. */
void qc_report_console_failures(FILE *f, const qc_results *r);
/* Totals; the last line printed is exactly "N passed, M failed". */
void qc_report_console_summary(FILE *f, const qc_results *r);

#endif /* QC_REPORT_CONSOLE_H */
