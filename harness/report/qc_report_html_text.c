/* qc_report_html_text.c — the HTML report's text primitives (qc_report_html_internal.h): a
 * string, a string escaped for HTML text and attribute values, a number. The bottom of the two
 * halves of the report (qc_report_html.c the page, qc_report_html_svg.c the charts): it calls
 * neither, so they do not call each other back (tests/check_cycles.py).
 */
#include <math.h>

#include "qc_report_html_internal.h"

void qc_hb_puts(qc_hbuf *b, const char *s) { qc_hb_printf(b, "%s", s); }

void qc_hb_esc(qc_hbuf *b, const char *s) {
    if (!s) return;
    const char *run = s; /* the start of the text not yet written */
    for (const char *p = s;; p++) {
        unsigned char c = (unsigned char)*p;
        const char *rep = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;"
                        : c == '"' ? "&quot;" : c == '\'' ? "&#39;"
                        : (c < 0x20 && c && c != '\t' && c != '\n' && c != '\r') || c == 0x7f
                            ? "\xef\xbf\xbd" : NULL;
        if (!rep && c) continue;
        qc_hb_printf(b, "%.*s", (int)(p - run), run);
        if (!c) return;
        qc_hb_puts(b, rep);
        run = p + 1;
    }
}

void qc_hb_num(qc_hbuf *b, double v) {
    if (isnan(v)) qc_hb_puts(b, "NaN");
    else if (isinf(v)) qc_hb_puts(b, v > 0 ? "inf" : "-inf");
    else qc_hb_printf(b, "%.3g", v);
}

