/* qc_report_console.c — console table and summary. */

#include "qc_report_console.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define W_CASE 30
#define W_MODE 7
#define W_CHECK 26

static int header_pending; /* --quiet: the header waits for the first row printed */
static int W_BACKEND = 9;  /* the longest backend name of the run (qc_report_console_fit) */

void qc_report_console_fit(const char *const *backends, int n) {
    W_BACKEND = 9;
    for (int i = 0; i < n; i++) {
        int w = backends[i] ? (int)strlen(backends[i]) : 0;
        if (w > W_BACKEND) W_BACKEND = w < 40 ? w : 40;
    }
}

void qc_report_console_header(FILE *f) {
    header_pending = 0;
    fprintf(f, "%-*s %-*s %-*s %-*s %-6s %s\n", W_CASE, "CASE", W_BACKEND, "BACKEND", W_MODE,
            "MODE", W_CHECK, "CHECK", "RESULT", "KEY NUMBERS");
}

void qc_report_console_header_lazy(void) { header_pending = 1; }

void qc_report_console_progress(FILE *f, int i, int n, char *const *paths, double elapsed,
                                int quiet) {
    const char *path = i < n ? paths[i] : NULL;
    if (!isatty(fileno(f))) { /* a log: one line per file (none with --quiet) */
        if (!quiet && path) fprintf(f, "[file %d/%d] %s\n", i + 1, n, path);
        return;
    }
    if (!path) { /* the end: clear the line */
        fprintf(f, "\r\033[K");
        fflush(f);
        return;
    }
    const char *base = strrchr(path, '/'); /* show "stem/file": the last two components */
    if (base) {
        const char *p = base;
        while (p > path && p[-1] != '/') p--;
        base = p > path ? p - 1 : NULL;
    }
    char eta[48] = "";
    if (i > 0) snprintf(eta, sizeof eta, ", ETA %.0f s", elapsed / i * (n - i));
    fprintf(f, "\r\033[Kcheck: file %d/%d %.60s, %.0f s%s", i + 1, n, base ? base + 1 : path,
            elapsed, eta);
    fflush(f);
}

void qc_report_console_row(FILE *f, const qc_check_row *row, int quiet) {
    if (quiet && (row->verdict == QC_VERDICT_PASS || row->verdict == QC_VERDICT_SKIP)) return;
    if (header_pending) qc_report_console_header(f);
    char cs[256];
    snprintf(cs, sizeof cs, "%s/%s", row->stem, row->case_name);
    fprintf(f, "%-*s %-*s %-*s %-*s %-6s %s\n", W_CASE, cs, W_BACKEND, row->backend, W_MODE,
            row->mode, W_CHECK, row->check, qc_verdict_str(row->verdict), row->keyline);
    fflush(f);
}

/* An ERROR row whose message an earlier ERROR row already has (printed once, with the count). */
static int same_error(const qc_check_row *a, const qc_check_row *b) {
    return a->verdict == QC_VERDICT_ERROR && b->verdict == QC_VERDICT_ERROR &&
           !strcmp(a->keyline, b->keyline);
}

static int repeated_error(const qc_results *r, int i) {
    for (int j = 0; j < i; j++)
        if (same_error(&r->rows[j], &r->rows[i])) return 1;
    return 0;
}

/* "the same error in N more rows: stem/case backend mode, ... (and K more)" after row i. */
static void print_repeats(FILE *f, const qc_results *r, int i) {
    int n = 0;
    for (int j = i + 1; j < r->n; j++) n += same_error(&r->rows[i], &r->rows[j]);
    if (!n) return;
    fprintf(f, "  the same error in %d more row%s:", n, n == 1 ? "" : "s");
    int listed = 0;
    for (int j = i + 1; j < r->n && listed < 5; j++)
        if (same_error(&r->rows[i], &r->rows[j]))
            fprintf(f, "%s %s/%s %s %s %s", listed++ ? "," : "", r->rows[j].stem,
                    r->rows[j].case_name, r->rows[j].backend, r->rows[j].mode, r->rows[j].check);
    if (n > listed) fprintf(f, " (and %d more)", n - listed);
    fprintf(f, "\n");
}

void qc_report_console_failures(FILE *f, const qc_results *r) {
    int shown = 0;
    for (int i = 0; i < r->n; i++) {
        const qc_check_row *row = &r->rows[i];
        if (row->verdict != QC_VERDICT_FAIL && row->verdict != QC_VERDICT_ERROR) continue;
        if (repeated_error(r, i)) continue; /* listed under its first occurrence */
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
        print_repeats(f, r, i);
    }
    fflush(f);
}

void qc_report_console_summary(FILE *f, const qc_results *r) {
    int code = qc_results_exit_code(r);
    const char *why = code == 2 ? " (an error: the run is incomplete)"
                      : code == 1 ? " (a conformance failure)"
                      : code == 3 ? " (nothing was checked)"
                      : code == 0 ? "" : " (interrupted)";
    char warn[64] = "";
    if (r->n_warnings > 0)
        snprintf(warn, sizeof warn, ", %d warning%s", r->n_warnings, r->n_warnings == 1 ? "" : "s");
    fprintf(f, "\n%d checks in %.1f s (policy: %s): %d error%s%s; exit %d%s\n", r->n, r->seconds,
            r->policy, r->n_error, r->n_error == 1 ? "" : "s", warn, code, why);
    if (r->stopped_early)
        fprintf(f, "stopped early: --maxfail %d reached (%d failing check%s); the cases after "
                   "it were not run\n",
                r->maxfail, r->n_fail + r->n_error, r->n_fail + r->n_error == 1 ? "" : "s");
    fprintf(f, "%d passed, %d failed, %d skipped\n", r->n_pass, r->n_fail, r->n_skip);
    fflush(f);
}

typedef struct {
    char id[420];   /* stem/case/backend/mode */
    double s;       /* seconds */
    int n;          /* rows */
} dur_group;

static int dur_cmp(const void *a, const void *b) {
    const dur_group *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? 1 : -1;
    return strcmp(x->id, y->id);
}

void qc_report_console_durations(FILE *f, const qc_results *r, int n) {
    if (r->n == 0) return;
    dur_group *g = calloc((size_t)r->n, sizeof *g);
    if (!g) return;
    int ng = 0;
    for (int i = 0; i < r->n; i++) {
        const qc_check_row *w = &r->rows[i];
        char id[420];
        snprintf(id, sizeof id, "%s/%s/%s/%s", w->stem, w->case_name, w->backend, w->mode);
        int k = ng - 1; /* rows of one run are adjacent: try the last group first */
        if (k < 0 || strcmp(g[k].id, id) != 0)
            for (k = 0; k < ng && strcmp(g[k].id, id) != 0; k++) {}
        if (k == ng) snprintf(g[ng++].id, sizeof g[0].id, "%s", id);
        g[k].s += w->seconds > 0 ? w->seconds : 0;
        g[k].n++;
    }
    qsort(g, (size_t)ng, sizeof *g, dur_cmp);
    int show = n > 0 && n < ng ? n : ng;
    fprintf(f, "\n== slowest %d duration%s (of %d runs; --durations %d) ==\n", show,
            show == 1 ? "" : "s", ng, n);
    for (int i = 0; i < show; i++)
        fprintf(f, "%9.3fs  %s  (%d check%s)\n", g[i].s, g[i].id, g[i].n, g[i].n == 1 ? "" : "s");
    free(g);
    fflush(f);
}

void qc_report_console_warnings(FILE *f, const qc_results *r, const char *prog) {
    for (int i = 0; i < r->n_warnings; i++) fprintf(f, "%s: warning: %s\n", prog, r->warnings[i]);
    fflush(f);
}
