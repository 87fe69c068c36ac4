/* qc_report_junit.c — JUnit XML report. */
#include "qc_report_junit.h"
#include "qc_report_verdict.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qc_outpath.h"

/* ---------------------------------------------------------------------------------------- */
/* A growing string                                                                          */
/* ---------------------------------------------------------------------------------------- */

typedef struct {
    char *s;     /* [cap] NUL-terminated */
    size_t n;    /* length */
    size_t cap;  /* capacity */
    int oom;     /* 1 after an allocation failure */
} sbuf;

static void sb_reserve(sbuf *b, size_t extra) {
    if (b->oom || b->n + extra + 1 <= b->cap) return;
    size_t nc = b->cap ? b->cap : 4096;
    while (nc < b->n + extra + 1) nc *= 2;
    char *ns = realloc(b->s, nc);
    if (!ns) {
        b->oom = 1;
        return;
    }
    b->s = ns;
    b->cap = nc;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    sb_reserve(b, (size_t)k);
    if (b->oom) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

/* XML-escaped text (attribute-safe); control characters other than \t \n \r are dropped
 * (they are not allowed in XML 1.0). */
static void sb_xml(sbuf *b, const char *t) {
    for (const unsigned char *p = (const unsigned char *)t; p && *p; p++) {
        switch (*p) {
        case '&': sb_printf(b, "&amp;"); break;
        case '<': sb_printf(b, "&lt;"); break;
        case '>': sb_printf(b, "&gt;"); break;
        case '"': sb_printf(b, "&quot;"); break;
        case '\'': sb_printf(b, "&apos;"); break;
        case '\n': sb_printf(b, "&#10;"); break;
        case '\t': sb_printf(b, "&#9;"); break;
        case '\r': sb_printf(b, "&#13;"); break;
        default:
            if (*p >= 0x20) sb_printf(b, "%c", *p);
        }
    }
}

/* Text content: newlines kept literally. */
static void sb_xml_text(sbuf *b, const char *t) {
    for (const unsigned char *p = (const unsigned char *)t; p && *p; p++) {
        if (*p == '\n')
            sb_printf(b, "\n");
        else {
            char c[2] = {(char)*p, 0};
            sb_xml(b, c);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Report                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/* The run's warnings as the suite's <system-err> (after its testcases: both schemas accept it
 * there). */
static void sb_system_err(sbuf *b, const qc_results *r) {
    if (r->n_warnings == 0) return;
    sb_printf(b, "    <system-err>");
    for (int i = 0; i < r->n_warnings; i++) {
        sb_xml_text(b, "warning: ");
        sb_xml_text(b, r->warnings[i]);
        sb_printf(b, "\n");
    }
    sb_printf(b, "</system-err>\n");
}

char *qc_report_junit_string(const qc_results *r) {
    sbuf b = {0};
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    sb_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    /* testsuites carries no "skipped": the Jenkins xunit plugin's schema does not allow it
     * there (each testsuite has its own skipped count) */
    sb_printf(&b,
              "<testsuites name=\"qwen-conform\" tests=\"%d\" failures=\"%d\" errors=\"%d\" "
              "time=\"%.3f\">\n",
              r->n, r->n_fail, r->n_error, r->seconds > 0 ? r->seconds : 0.0);
    /* one testsuite per stem, in first-seen order */
    char *done = calloc((size_t)(r->n > 0 ? r->n : 1), 1);
    if (!done) {
        free(b.s);
        return NULL;
    }
    qc_verdicts vs; /* the verdict of each runtime, a property of every suite */
    if (qc_verdicts_compute(r, &vs)) vs.n = 0;
    int suite_id = 0;
    for (int i = 0; i < r->n; i++) {
        if (done[i]) continue;
        const char *stem = r->rows[i].stem;
        int tests = 0, fails = 0, errs = 0, skips = 0;
        double t = 0;
        for (int j = i; j < r->n; j++) {
            const qc_check_row *w = &r->rows[j];
            if (strcmp(w->stem, stem) != 0) continue;
            tests++;
            t += w->seconds;
            fails += w->verdict == QC_VERDICT_FAIL;
            errs += w->verdict == QC_VERDICT_ERROR;
            skips += w->verdict == QC_VERDICT_SKIP;
        }
        sb_printf(&b, "  <testsuite id=\"%d\" name=\"", suite_id++);
        sb_xml(&b, stem);
        sb_printf(&b,
                  "\" tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\" time=\"%.3f\" "
                  "timestamp=\"%.19s\" hostname=\"",
                  tests, fails, errs, skips, t, r->started[0] ? r->started : "1970-01-01T00:00:00");
        sb_xml(&b, host);
        sb_printf(&b, "\">\n    <properties>\n");
        sb_printf(&b, "      <property name=\"golden\" value=\"");
        sb_xml(&b, r->rows[i].golden);
        sb_printf(&b, "\"/>\n      <property name=\"tool_version\" value=\"");
        sb_xml(&b, r->tool_version);
        sb_printf(&b, "\"/>\n      <property name=\"isa\" value=\"");
        sb_xml(&b, r->isa);
        sb_printf(&b, "\"/>\n      <property name=\"policy\" value=\"");
        sb_xml(&b, r->policy);
        sb_printf(&b, "\"/>\n");
        for (int v = 0; v < vs.n; v++) {
            sb_printf(&b, "      <property name=\"verdict:");
            sb_xml(&b, vs.v[v].backend);
            sb_printf(&b, "\" value=\"%s, coverage %.1f %%\"/>\n", vs.v[v].verdict,
                      100.0 * vs.v[v].coverage);
        }
        if (r->stopped_early)
            sb_printf(&b, "      <property name=\"stopped_early\" value=\"--maxfail %d reached; "
                          "the cases after it were not run\"/>\n", r->maxfail);
        sb_printf(&b, "    </properties>\n");
        for (int j = i; j < r->n; j++) {
            const qc_check_row *w = &r->rows[j];
            if (strcmp(w->stem, stem) != 0) continue;
            done[j] = 1;
            sb_printf(&b, "    <testcase classname=\"");
            sb_xml(&b, w->stem);
            sb_printf(&b, ".");
            sb_xml(&b, w->case_name);
            sb_printf(&b, "\" name=\"");
            sb_xml(&b, w->backend);
            sb_printf(&b, ".");
            sb_xml(&b, w->mode);
            sb_printf(&b, ".");
            sb_xml(&b, w->check);
            sb_printf(&b, "\" time=\"%.3f\"", w->seconds);
            if (w->verdict == QC_VERDICT_PASS) {
                sb_printf(&b, "/>\n");
                continue;
            }
            sb_printf(&b, ">\n");
            const char *tag = w->verdict == QC_VERDICT_FAIL    ? "failure"
                              : w->verdict == QC_VERDICT_ERROR ? "error"
                                                               : "skipped";
            sb_printf(&b, "      <%s message=\"", tag);
            sb_xml(&b, w->keyline);
            if (w->verdict == QC_VERDICT_SKIP) {
                sb_printf(&b, "\"/>\n");
            } else {
                sb_printf(&b, "\" type=\"%s\">", w->verdict == QC_VERDICT_FAIL ? "conformance"
                                                                                : "error");
                sb_xml_text(&b, w->keyline);
                if (w->detail) {
                    sb_printf(&b, "\n");
                    sb_xml_text(&b, w->detail);
                }
                sb_printf(&b, "</%s>\n", tag);
            }
            sb_printf(&b, "    </testcase>\n");
        }
        sb_system_err(&b, r);
        sb_printf(&b, "  </testsuite>\n");
    }
    free(done);
    qc_verdicts_free(&vs);
    if (r->n == 0 && r->n_warnings > 0) { /* no suite to carry them: one empty suite */
        sb_printf(&b, "  <testsuite id=\"0\" name=\"qwen-conform\" tests=\"0\" failures=\"0\" "
                      "errors=\"0\" skipped=\"0\" time=\"0.000\">\n");
        sb_system_err(&b, r);
        sb_printf(&b, "  </testsuite>\n");
    }
    sb_printf(&b, "</testsuites>\n");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

qc_status qc_report_junit_write(const char *path, const qc_results *r, qc_err *err) {
    char *text = qc_report_junit_string(r);
    if (!text) return qc_errf(err, QC_ERR_OOM, "%s: out of memory building the JUnit report", path);
    qc_status s = qc_out_write_file(path, text, strlen(text), QC_OUT_TEXT, err);
    free(text);
    return s;
}
