/* qc_report_results.c — the row store shared by the reports. */
#include "qc_report_results.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

const char *qc_loc_kind_str(qc_loc_kind k) {
    switch (k) {
    case QC_LOC_NONE: return "none";
    case QC_LOC_EMBEDDINGS: return "embeddings";
    case QC_LOC_LAYER: return "layer";
    case QC_LOC_LAST_OR_NORM: return "last_layer_or_final_norm";
    case QC_LOC_AFTER_NORM: return "after_final_norm";
    case QC_LOC_AT_OR_BEFORE: return "at_or_before_layer";
    }
    return "?";
}

const char *qc_verdict_str(qc_verdict v) {
    switch (v) {
    case QC_VERDICT_PASS: return "PASS";
    case QC_VERDICT_FAIL: return "FAIL";
    case QC_VERDICT_SKIP: return "SKIP";
    case QC_VERDICT_ERROR: return "ERROR";
    }
    return "?";
}

void qc_results_init(qc_results *r) {
    memset(r, 0, sizeof *r);
    snprintf(r->isa, sizeof r->isa, "n/a");
    r->exit_code = -1;
}

void qc_results_free(qc_results *r) {
    for (int i = 0; i < r->n; i++) free(r->rows[i].detail), free(r->rows[i].drift_json);
    free(r->rows);
    r->rows = NULL;
    r->n = r->cap = 0;
    for (int i = 0; i < r->n_warnings; i++) free(r->warnings[i]);
    free(r->warnings);
    r->warnings = NULL;
    r->n_warnings = 0;
}

/* rank in the precedence: higher wins */
static int exit_rank(int code) {
    switch (code) {
    case 2: return 4;   /* usage / I/O / format error */
    case 1: return 3;   /* conformance failure */
    case 3: return 2;   /* nothing checked */
    case 0: return 1;   /* pass */
    }
    return code < 0 ? 0 : 5; /* unset; anything else (130 / 143 on a signal) wins */
}

int qc_exit_precedence(int a, int b) { return exit_rank(a) >= exit_rank(b) ? a : b; }

int qc_results_exit_code(const qc_results *r) {
    int rows = r->n_error ? 2 : r->n_fail ? 1 : r->n_pass == 0 ? 3 : 0;
    return qc_exit_precedence(r->exit_code, rows);
}

void qc_results_warn(qc_results *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    char *s = malloc((size_t)n + 1);
    char **nw = realloc(r->warnings, (size_t)(r->n_warnings + 1) * sizeof *nw);
    if (!s || !nw) {
        free(s);
        if (nw) r->warnings = nw;
        return;
    }
    r->warnings = nw;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    r->warnings[r->n_warnings++] = s;
}

qc_check_row *qc_results_add(qc_results *r, const qc_check_row *row) {
    if (r->n == r->cap) {
        int nc = r->cap ? 2 * r->cap : 64;
        qc_check_row *nr = realloc(r->rows, (size_t)nc * sizeof *nr);
        if (!nr) {
            free(row->detail);
            free(row->drift_json);
            return NULL;
        }
        r->rows = nr;
        r->cap = nc;
    }
    qc_check_row *d = &r->rows[r->n++];
    *d = *row;
    switch (row->verdict) {
    case QC_VERDICT_PASS: r->n_pass++; break;
    case QC_VERDICT_FAIL: r->n_fail++; break;
    case QC_VERDICT_SKIP: r->n_skip++; break;
    case QC_VERDICT_ERROR: r->n_error++; break;
    }
    return d;
}

void qc_results_fill_provenance(qc_results *r) {
    struct utsname u;
    char cpu[160] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) == 0) {
                char *c = strchr(line, ':');
                if (c) {
                    c++;
                    while (*c == ' ' || *c == '\t') c++;
                    c[strcspn(c, "\n")] = 0;
                    snprintf(cpu, sizeof cpu, "%s", c);
                }
                break;
            }
        }
        fclose(f);
    }
    if (uname(&u) == 0)
        snprintf(r->machine, sizeof r->machine, "%s %s %s, %s", u.sysname, u.release, u.machine,
                 cpu);
    else
        snprintf(r->machine, sizeof r->machine, "%s", cpu);
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(r->started, sizeof r->started, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

char *qc_strdup_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}
