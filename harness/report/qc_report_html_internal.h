/* qc_report_html_internal.h — what the two halves of the HTML report share (report-private):
 *   qc_report_html.c      the page: verdicts, summary, the row table and its filter script
 *   qc_report_html_svg.c  the inline SVG charts of each case (tolerance ratios per check, the
 *                         per-layer curves of the detail text, the long-decode drift curves)
 *   qc_report_html_text.c the text primitives both write with (qc_hb_puts / _esc / _num)
 */
#ifndef QC_REPORT_HTML_INTERNAL_H
#define QC_REPORT_HTML_INTERNAL_H

#include <stddef.h>

#include "qc_report_buf.h"
#include "qc_report_results.h"

/* The reports' growing text buffer (qc_report_buf.h). */
typedef qc_sbuf qc_hbuf;
#define qc_hb_printf qc_sbuf_printf
void qc_hb_puts(qc_hbuf *b, const char *s);
/* s escaped for HTML text and attribute values (& < > " ' ; control characters other than
 * tab / newline / carriage return become U+FFFD); NULL writes nothing. */
void qc_hb_esc(qc_hbuf *b, const char *s);
/* A number as text: %.3g, "NaN", "inf", "-inf". */
void qc_hb_num(qc_hbuf *b, double v);

/* The "curves" section: per (stem, case) the charts its rows carry data for. */
void qc_html_curves(qc_hbuf *b, const qc_results *r);

#endif /* QC_REPORT_HTML_INTERNAL_H */
