/* qc_report_console.c — console table and summary. */
/* Messages are cut to their buffers on purpose (snprintf); GCC's truncation warning is noise. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "qc_report_console.h"

#include <string.h>

#define W_CASE 30
#define W_BACKEND 9
#define W_MODE 7
#define W_CHECK 26

void qc_report_console_header(FILE *f) {
    fprintf(f, "%-*s %-*s %-*s %-*s %-6s %s\n", W_CASE, "CASE", W_BACKEND, "BACKEND", W_MODE,
            "MODE", W_CHECK, "CHECK", "RESULT", "KEY NUMBERS");
}

void qc_report_console_row(FILE *f, const qc_check_row *row, int quiet) {
    if (quiet && (row->verdict == QC_VERDICT_PASS || row->verdict == QC_VERDICT_SKIP)) return;
    char cs[256];
    snprintf(cs, sizeof cs, "%s/%s", row->stem, row->case_name);
    fprintf(f, "%-*s %-*s %-*s %-*s %-6s %s\n", W_CASE, cs, W_BACKEND, row->backend, W_MODE,
            row->mode, W_CHECK, row->check, qc_verdict_str(row->verdict), row->keyline);
    fflush(f);
}

void qc_report_console_failures(FILE *f, const qc_results *r) {
    int shown = 0;
    for (int i = 0; i < r->n; i++) {
        const qc_check_row *row = &r->rows[i];
        if (row->verdict != QC_VERDICT_FAIL && row->verdict != QC_VERDICT_ERROR) continue;
        if (!shown) fprintf(f, "\n== failures ==\n");
        shown++;
        fprintf(f, "\n%s %s/%s %s %s %s\n", qc_verdict_str(row->verdict), row->stem,
                row->case_name, row->backend, row->mode, row->check);
        fprintf(f, "  golden: %s\n", row->golden);
        if (row->detail) {
            /* indent every line by two spaces */
            const char *p = row->detail;
            while (*p) {
                const char *e = strchr(p, '\n');
                int n = e ? (int)(e - p) : (int)strlen(p);
                fprintf(f, "  %.*s\n", n, p);
                p += n;
                if (*p == '\n') p++;
            }
        } else {
            fprintf(f, "  %s\n", row->keyline);
        }
    }
    fflush(f);
}

void qc_report_console_summary(FILE *f, const qc_results *r) {
    fprintf(f, "\n%d checks in %.1f s: %d passed, %d failed, %d skipped, %d errors "
               "(policy: %s)\n",
            r->n, r->seconds, r->n_pass, r->n_fail, r->n_skip, r->n_error, r->policy);
    fprintf(f, "%d passed, %d failed\n", r->n_pass, r->n_fail + r->n_error);
    fflush(f);
}
