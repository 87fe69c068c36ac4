/* qc_report_junit.c — JUnit XML report. */
#include "qc_report_junit.h"
#include "qc_report_buf.h"
#include "qc_report_verdict.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qc_outpath.h"

/* XML-escaped text (attribute-safe); control characters other than \t \n \r are dropped
 * (they are not allowed in XML 1.0). */
static void sb_xml(qc_sbuf *b, const char *t) {
    for (const unsigned char *p = (const unsigned char *)t; p && *p; p++) {
        switch (*p) {
        case '&': qc_sbuf_printf(b, "&amp;"); break;
        case '<': qc_sbuf_printf(b, "&lt;"); break;
        case '>': qc_sbuf_printf(b, "&gt;"); break;
        case '"': qc_sbuf_printf(b, "&quot;"); break;
        case '\'': qc_sbuf_printf(b, "&apos;"); break;
        case '\n': qc_sbuf_printf(b, "&#10;"); break;
        case '\t': qc_sbuf_printf(b, "&#9;"); break;
        case '\r': qc_sbuf_printf(b, "&#13;"); break;
        default:
            if (*p >= 0x20) qc_sbuf_printf(b, "%c", *p);
        }
    }
}

/* Text content: newlines kept literally. */
static void sb_xml_text(qc_sbuf *b, const char *t) {
    for (const unsigned char *p = (const unsigned char *)t; p && *p; p++) {
        if (*p == '\n')
            qc_sbuf_printf(b, "\n");
        else {
            char c[2] = {(char)*p, 0};
            sb_xml(b, c);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Report                                                                                    */
/* ---------------------------------------------------------------------------------------- */


/* name = backend.mode.check; a backend with a dot of its own (exec:mine.py) is bracketed, so
 * the name still splits one way: [exec:mine.py].static.prefill.logits */
static void sb_testcase_name(qc_sbuf *b, const qc_check_row *w) {
    const int dotted = strchr(w->backend, '.') != NULL;
    if (dotted) qc_sbuf_printf(b, "[");
    sb_xml(b, w->backend);
    qc_sbuf_printf(b, dotted ? "]." : ".");
    sb_xml(b, w->mode);
    qc_sbuf_printf(b, ".");
    sb_xml(b, w->check);
}

/* The run's warnings as the suite's <system-err> (after its testcases: both schemas accept it
 * there). */
static void sb_system_err(qc_sbuf *b, const qc_results *r) {
    if (r->n_warnings == 0) return;
    qc_sbuf_printf(b, "    <system-err>");
    for (int i = 0; i < r->n_warnings; i++) {
        sb_xml_text(b, "warning: ");
        sb_xml_text(b, r->warnings[i]);
        qc_sbuf_printf(b, "\n");
    }
    qc_sbuf_printf(b, "</system-err>\n");
}

char *qc_report_junit_string(const qc_results *r) {
    qc_sbuf b = {0};
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    qc_sbuf_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    /* testsuites carries no "skipped": the Jenkins xunit plugin's schema does not allow it
     * there (each testsuite has its own skipped count) */
    qc_sbuf_printf(&b,
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
        qc_sbuf_printf(&b, "  <testsuite id=\"%d\" name=\"", suite_id++);
        sb_xml(&b, stem);
        qc_sbuf_printf(&b,
                  "\" tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\" time=\"%.3f\" "
                  "timestamp=\"%.19s\" hostname=\"",
                  tests, fails, errs, skips, t, r->started[0] ? r->started : "1970-01-01T00:00:00");
        sb_xml(&b, host);
        qc_sbuf_printf(&b, "\">\n    <properties>\n");
        qc_sbuf_printf(&b, "      <property name=\"golden\" value=\"");
        sb_xml(&b, r->rows[i].golden);
        qc_sbuf_printf(&b, "\"/>\n      <property name=\"tool_version\" value=\"");
        sb_xml(&b, r->tool_version);
        qc_sbuf_printf(&b, "\"/>\n      <property name=\"isa\" value=\"");
        sb_xml(&b, r->isa);
        qc_sbuf_printf(&b, "\"/>\n      <property name=\"policy\" value=\"");
        sb_xml(&b, r->policy);
        qc_sbuf_printf(&b, "\"/>\n");
        for (int v = 0; v < vs.n; v++) {
            qc_sbuf_printf(&b, "      <property name=\"verdict:");
            sb_xml(&b, vs.v[v].backend);
            qc_sbuf_printf(&b, "\" value=\"%s, coverage %.1f %%\"/>\n", vs.v[v].verdict,
                      100.0 * vs.v[v].coverage);
        }
        if (r->stopped_early)
            qc_sbuf_printf(&b, "      <property name=\"stopped_early\" value=\"--maxfail %d reached; "
                          "the cases after it were not run\"/>\n", r->maxfail);
        qc_sbuf_printf(&b, "    </properties>\n");
        for (int j = i; j < r->n; j++) {
            const qc_check_row *w = &r->rows[j];
            if (strcmp(w->stem, stem) != 0) continue;
            done[j] = 1;
            qc_sbuf_printf(&b, "    <testcase classname=\"");
            sb_xml(&b, w->stem);
            qc_sbuf_printf(&b, ".");
            sb_xml(&b, w->case_name);
            qc_sbuf_printf(&b, "\" name=\"");
            sb_testcase_name(&b, w);
            qc_sbuf_printf(&b, "\" time=\"%.3f\"", w->seconds);
            if (w->verdict == QC_VERDICT_PASS) {
                qc_sbuf_printf(&b, "/>\n");
                continue;
            }
            qc_sbuf_printf(&b, ">\n");
            const char *tag = w->verdict == QC_VERDICT_FAIL    ? "failure"
                              : w->verdict == QC_VERDICT_ERROR ? "error"
                                                               : "skipped";
            qc_sbuf_printf(&b, "      <%s message=\"", tag);
            sb_xml(&b, w->keyline);
            if (w->verdict == QC_VERDICT_SKIP) {
                qc_sbuf_printf(&b, "\"/>\n");
            } else {
                qc_sbuf_printf(&b, "\" type=\"%s\">", w->verdict == QC_VERDICT_FAIL ? "conformance"
                                                                                : "error");
                sb_xml_text(&b, w->keyline);
                if (w->detail) {
                    qc_sbuf_printf(&b, "\n");
                    sb_xml_text(&b, w->detail);
                }
                qc_sbuf_printf(&b, "</%s>\n", tag);
            }
            qc_sbuf_printf(&b, "    </testcase>\n");
        }
        sb_system_err(&b, r);
        qc_sbuf_printf(&b, "  </testsuite>\n");
    }
    free(done);
    qc_verdicts_free(&vs);
    if (r->n == 0 && r->n_warnings > 0) { /* no suite to carry them: one empty suite */
        qc_sbuf_printf(&b, "  <testsuite id=\"0\" name=\"qwen-conform\" tests=\"0\" failures=\"0\" "
                      "errors=\"0\" skipped=\"0\" time=\"0.000\">\n");
        sb_system_err(&b, r);
        qc_sbuf_printf(&b, "  </testsuite>\n");
    }
    qc_sbuf_printf(&b, "</testsuites>\n");
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
