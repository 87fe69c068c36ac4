/* qc_report_html_svg.c — the inline SVG charts of `check --html` (qc_report_html.h), one block
 * per (golden stem, case), drawn from what the rows hold:
 *   - tolerance ratios: a bar per check to the worst of its rows, a dot per backend x mode
 *     on it: the worst element's |actual - golden| / (atol + rtol |golden|) on a log scale
 *     (1 = the tolerance, dashed); a bitwise check is "bit-identical" or "bits differ"; each
 *     dot links to its row in the table;
 *   - per-layer curves: the "Per-layer max |diff| ... : [0] v, [1] v!, ..." lines the
 *     localisation writes into a failing row's detail (hidden[i] vs the golden in the prefill,
 *     or vs the reference backend at a decode step), one curve per backend x mode, points over
 *     tolerance in red (the rows carry no structured per-layer numbers: only this text);
 *   - drift: the long_decode_drift rows' curves (drift_json): max |diff| per decode step of the
 *     logits and of every DeltaNet state buffer per layer at the golden's traced steps.
 */

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_report_html_internal.h"

static const char *COLORS[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                               "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

static const char *verdict_color(qc_verdict v) {
    return v == QC_VERDICT_PASS ? "#2e7d32" : v == QC_VERDICT_FAIL ? "#c62828"
         : v == QC_VERDICT_ERROR ? "#6a1b9a" : "#9e9e9e";
}

/* ===================================================================================== */
/* tolerance ratios: a bar per check, a dot per backend x mode on it                     */
/* ===================================================================================== */

#define BW 900   /* chart width */
#define BL 230   /* label column */
#define BR 150   /* value column */
#define BH 18    /* pixels per check */
#define BT 22    /* axis above the bars */
#define BLO (-7) /* log10 of the smallest ratio drawn */
#define BMAX 96  /* checks (and series) of a chart */

/* The worst element's ratio to its allowance (0: exact; inf: not finite or bits differ);
 * *what names a bitwise row's outcome ("" otherwise). */
static double row_ratio(const qc_check_row *w, const char **what) {
    *what = "";
    if (w->m.bitwise) {
        int same = w->m.n_mismatch == 0 && w->m.n_nonfinite == 0;
        *what = same ? "bit-identical" : "bits differ";
        return same ? 0.0 : INFINITY;
    }
    if (w->m.n_nonfinite) return INFINITY;
    if (w->m.worst.valid) return w->m.worst.value;
    return w->m.max_abs > 0 ? NAN : 0.0;
}

static double bar_x(double ratio, int hi) {
    double l = ratio > 0 ? (isfinite(ratio) ? log10(ratio) : hi) : BLO;
    if (l < BLO) l = BLO;
    if (l > hi) l = hi;
    return BL + (double)(BW - BL - BR) * (l - BLO) / (hi - BLO);
}

/* The distinct check names (checks) and backend x mode series of the rows with metrics. */
typedef struct {
    const char *check[BMAX];
    const qc_check_row *series[BMAX]; /* a row of each series (its backend and mode) */
    int nc, ns;
} bar_sets;

static int series_of(const bar_sets *s, const qc_check_row *w) {
    for (int i = 0; i < s->ns; i++)
        if (!strcmp(s->series[i]->backend, w->backend) && !strcmp(s->series[i]->mode, w->mode))
            return i;
    return -1;
}

static int check_of(const bar_sets *s, const char *check) {
    for (int i = 0; i < s->nc; i++)
        if (!strcmp(s->check[i], check)) return i;
    return -1;
}

/* The dot of row w (ri) of series k on the line at y. */
static void bar_dot(qc_hbuf *b, const qc_check_row *w, int ri, int k, int ns, int y, int hi) {
    const char *what;
    double ratio = row_ratio(w, &what);
    double dy = ns > 1 ? ((double)k - (ns - 1) / 2.0) * (8.0 / (ns - 1)) : 0;
    qc_hb_printf(b, "<a href=\"#r%d\"><circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\" "
                 "class=\"dot d-%s\"><title>", ri, bar_x(ratio, hi), y + 9 + dy, COLORS[k % 10],
                 qc_verdict_str(w->verdict));
    qc_hb_esc(b, w->backend);
    qc_hb_puts(b, " ");
    qc_hb_esc(b, w->mode);
    qc_hb_puts(b, " ");
    qc_hb_esc(b, w->check);
    qc_hb_printf(b, " %s: worst |diff| / allowed ", qc_verdict_str(w->verdict));
    if (what[0]) qc_hb_puts(b, what);
    else qc_hb_num(b, ratio);
    qc_hb_puts(b, "; max |diff| ");
    qc_hb_num(b, w->m.max_abs);
    if (!w->m.bitwise) {
        qc_hb_puts(b, ", atol ");
        qc_hb_num(b, w->tol.atol);
        qc_hb_puts(b, ", rtol ");
        qc_hb_num(b, w->tol.rtol);
    }
    qc_hb_puts(b, "</title></circle></a>");
}

/* The line of check c: a bar to its worst ratio (the colour of its worst verdict), the dots,
 * the worst value. */
static void bar_line(qc_hbuf *b, const qc_results *r, const int *idx, int n, const bar_sets *s,
                     int c, int hi) {
    int y = BT + BH * c, nfail = 0, nrows = 0;
    qc_verdict wv = QC_VERDICT_SKIP; /* the worst: ERROR > FAIL > PASS > SKIP */
    double worst = -1;
    const char *wwhat = "";
    for (int i = 0; i < n; i++) {
        const qc_check_row *w = &r->rows[idx[i]];
        if (!w->has_metrics || strcmp(w->check, s->check[c])) continue;
        const char *what;
        double ratio = row_ratio(w, &what);
        nrows++;
        nfail += w->verdict == QC_VERDICT_FAIL || w->verdict == QC_VERDICT_ERROR;
        if (w->verdict == QC_VERDICT_ERROR || (w->verdict == QC_VERDICT_FAIL && wv != QC_VERDICT_ERROR)
            || (w->verdict == QC_VERDICT_PASS && wv == QC_VERDICT_SKIP))
            wv = w->verdict;
        if (!(ratio <= worst)) worst = ratio, wwhat = what;
    }
    double x1 = bar_x(worst, hi);
    qc_hb_printf(b, "<g class=\"bar\"><text x=\"%d\" y=\"%d\" text-anchor=\"end\">", BL - 6, y + 13);
    qc_hb_esc(b, s->check[c]);
    qc_hb_printf(b, "</text><rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"8\" fill=\"%s\" "
                 "opacity=\".35\"/>\n", BL, y + 5, x1 > BL + 2 ? x1 - BL : 2.0, verdict_color(wv));
    for (int i = 0; i < n; i++) {
        const qc_check_row *w = &r->rows[idx[i]];
        if (w->has_metrics && !strcmp(w->check, s->check[c]))
            bar_dot(b, w, idx[i], series_of(s, w) < 0 ? 0 : series_of(s, w), s->ns, y, hi);
    }
    qc_hb_printf(b, "\n<text x=\"%d\" y=\"%d\">", BW - BR + 8, y + 13);
    if (wwhat[0]) qc_hb_puts(b, wwhat);
    else if (worst == 0) qc_hb_puts(b, "exact");
    else qc_hb_num(b, worst);
    qc_hb_puts(b, "</text></g>\n");
    if (nfail) qc_hb_printf(b, "<text x=\"%d\" y=\"%d\" class=\"t-FAIL\">%d/%d failed</text>\n",
                            BW - 62, y + 13, nfail, nrows);
}

/* The ratio chart of one case's rows (idx[n] into r->rows); nothing when none has metrics. */
static void bars_chart(qc_hbuf *b, const qc_results *r, const int *idx, int n) {
    bar_sets s = {0};
    int hi = 1;
    for (int i = 0; i < n; i++) {
        const qc_check_row *w = &r->rows[idx[i]];
        if (!w->has_metrics) continue;
        if (check_of(&s, w->check) < 0 && s.nc < BMAX) s.check[s.nc++] = w->check;
        if (series_of(&s, w) < 0 && s.ns < BMAX) s.series[s.ns++] = w;
        const char *what;
        double ratio = row_ratio(w, &what);
        if (ratio > 0 && isfinite(ratio) && ceil(log10(ratio)) > hi) hi = (int)ceil(log10(ratio));
    }
    if (s.nc == 0) return;
    if (hi > 12) hi = 12;
    int per = (BW - 20) / 170, legend = 16 * ((s.ns + per - 1) / per);
    int H = BT + s.nc * BH + 10 + legend;
    qc_hb_puts(b, "<h4>Worst element / tolerance per check (log scale; 1 = the tolerance, "
                  "dashed; a dot per backend \xc2\xb7 mode, click one for its row)</h4>\n");
    qc_hb_printf(b, "<svg class=\"chart bars\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
                 "role=\"img\">\n", BW, H, BW, H);
    for (int e = BLO; e <= hi; e++) {
        double x = bar_x(pow(10.0, e), hi);
        qc_hb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"grid\"/>"
                     "<text x=\"%.1f\" y=\"12\" text-anchor=\"middle\" class=\"tick\">%s%d</text>\n",
                     x, BT - 4, x, BT + s.nc * BH, x, e ? "1e" : "", e ? e : 1);
    }
    double x1 = bar_x(1.0, hi);
    qc_hb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"tol\"/>\n", x1,
                 BT - 4, x1, BT + s.nc * BH);
    for (int c = 0; c < s.nc; c++) bar_line(b, r, idx, n, &s, c, hi);
    for (int k = 0; k < s.ns; k++) {
        int lx = 10 + 170 * (k % per), ly = BT + s.nc * BH + 14 + 16 * (k / per);
        qc_hb_printf(b, "<circle cx=\"%d\" cy=\"%d\" r=\"4\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" "
                     "class=\"tick\">", lx + 4, ly - 4, COLORS[k % 10], lx + 12, ly);
        qc_hb_esc(b, s.series[k]->backend);
        qc_hb_puts(b, " \xc2\xb7 ");
        qc_hb_esc(b, s.series[k]->mode);
        qc_hb_puts(b, "</text>\n");
    }
    qc_hb_puts(b, "</svg>\n");
}

/* ===================================================================================== */
/* per-layer curves from the detail text                                                 */
/* ===================================================================================== */

#define LMAX 160   /* points of a curve */
#define LCMAX 12   /* curves of a chart */

typedef struct {
    char key[200];     /* backend | mode | kind: one curve each */
    char label[200];
    int n;
    double v[LMAX];
    unsigned char bad[LMAX];
    int row;           /* the row it was read from */
} lcurve;

/* Parse "[0] 0, [1] 3.1!, ..." at p (to the end of the line) into c; the point count. */
static int parse_points(const char *p, lcurve *c) {
    c->n = 0;
    while (*p && *p != '\n' && c->n < LMAX) {
        while (*p == ' ' || *p == ',') p++;
        if (*p != '[') break;
        char *e = NULL;
        long i = strtol(p + 1, &e, 10);
        if (!e || *e != ']' || i != c->n) break;
        p = e + 1;
        double v = strtod(p, &e);
        if (e == p) break;
        p = e;
        c->v[c->n] = v;
        c->bad[c->n] = *p == '!';
        if (*p == '!') p++;
        c->n++;
    }
    return c->n;
}

/* Every "Per-layer max |diff|" line of row w's detail into cs (new keys only). */
static void collect_curves(const qc_check_row *w, int ri, lcurve *cs, int *nc) {
    static const char tag[] = "Per-layer max |diff|";
    for (const char *p = w->detail ? strstr(w->detail, tag) : NULL; p && *nc < LCMAX;
         p = strstr(p + 1, tag)) {
        const char *colon = strchr(p, ':'), *nl = strchr(p, '\n');
        if (!colon || (nl && colon > nl)) continue;
        int vs_ref = strstr(p, "vs reference") && strstr(p, "vs reference") < colon;
        lcurve *c = &cs[*nc];
        snprintf(c->key, sizeof c->key, "%s|%s|%d", w->backend, w->mode, vs_ref);
        int dup = 0;
        for (int i = 0; i < *nc; i++) dup |= !strcmp(cs[i].key, c->key);
        if (dup || parse_points(colon + 1, c) < 2) continue;
        snprintf(c->label, sizeof c->label, "%s %s: %s", w->backend, w->mode,
                 vs_ref ? "decode, vs reference" : "hidden[i] vs golden");
        c->row = ri;
        (*nc)++;
    }
}

#define LW 900
#define LH 260
#define LML 60
#define LMR 250
#define LMT 14
#define LMB 44

static double lc_y(double v, int lo, int hi) {
    double l = v > 0 ? (isfinite(v) ? log10(v) : hi) : lo;
    if (l < lo) l = lo;
    if (l > hi) l = hi;
    return LMT + (double)(LH - LMT - LMB) * (hi - l) / (hi - lo);
}

static double lc_x(int i, int n) { return LML + (double)(LW - LML - LMR) * (n > 1 ? (double)i / (n - 1) : 0); }

/* zero: the bottom line stands for 0 (the values are all >= 10^(lo + 2) then) */
static void layers_axes(qc_hbuf *b, int n, int lo, int hi, int zero) {
    qc_hb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"frame\"/>\n", LML,
                 LMT, LW - LML - LMR, LH - LMT - LMB);
    for (int e = lo; e <= hi; e++) {
        double y = lc_y(pow(10.0, e), lo, hi);
        qc_hb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/><text "
                     "x=\"%d\" y=\"%.1f\" text-anchor=\"end\" class=\"tick\">", LML, y, LW - LMR, y,
                     LML - 4, y + 3);
        if (zero && e == lo) qc_hb_puts(b, "0</text>\n");
        else qc_hb_printf(b, "1e%d</text>\n", e);
    }
    int step = n > 24 ? (n + 11) / 12 : 1;
    for (int i = 0; i < n; i += step)
        qc_hb_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"tick\">%d</text>\n",
                     lc_x(i, n), LH - LMB + 14, i);
    qc_hb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"axis\">hidden[i]: 0 = "
                 "embeddings, i = output of layer i-1, %d = after the final norm</text>\n",
                 (LML + LW - LMR) / 2, LH - 10, n - 1);
}

/* One chart of every curve; nothing when no row carries one. */
static void layers_chart(qc_hbuf *b, const qc_results *r, const int *idx, int n) {
    lcurve *cs = calloc(LCMAX, sizeof *cs);
    if (!cs) return;
    int nc = 0, np = 0;
    for (int i = 0; i < n && nc < LCMAX; i++) collect_curves(&r->rows[idx[i]], idx[i], cs, &nc);
    double vmin = INFINITY, vmax = 0;
    for (int c = 0; c < nc; c++) {
        if (cs[c].n > np) np = cs[c].n;
        for (int i = 0; i < cs[c].n; i++) {
            double v = cs[c].v[i];
            if (v > 0 && isfinite(v) && v < vmin) vmin = v;
            if (isfinite(v) && v > vmax) vmax = v;
        }
    }
    int zero = 0;
    for (int c = 0; c < nc; c++)
        for (int i = 0; i < cs[c].n; i++) zero |= cs[c].v[i] == 0;
    if (nc > 0) {
        int hi = vmax > 0 ? (int)ceil(log10(vmax)) : 0;
        int lo = isfinite(vmin) ? (int)floor(log10(vmin)) - 1 : hi - 6;
        if (lo > hi - 2) lo = hi - 2;
        if (lo < -12) lo = -12;
        lo -= zero;
        qc_hb_puts(b, "<h4>Per-layer max |diff| of the hidden states (from the localisation of "
                      "a failing row; red = over tolerance)</h4>\n");
        qc_hb_printf(b, "<svg class=\"chart layers\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
                     "role=\"img\">\n", LW, LH, LW, LH);
        layers_axes(b, np, lo, hi, zero);
        for (int c = 0; c < nc; c++) {
            const char *col = COLORS[c % 10];
            qc_hb_printf(b, "<polyline class=\"curve\" stroke=\"%s\" points=\"", col);
            for (int i = 0; i < cs[c].n; i++)
                qc_hb_printf(b, "%.1f,%.1f ", lc_x(i, np), lc_y(cs[c].v[i], lo, hi));
            qc_hb_puts(b, "\"/>\n");
            for (int i = 0; i < cs[c].n; i++)
                qc_hb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" stroke=\"%s\" fill=\"%s\"/>",
                             lc_x(i, np), lc_y(cs[c].v[i], lo, hi), col,
                             cs[c].bad[i] ? "#d00" : "#fff");
            int ly = LMT + 8 + 14 * c;
            qc_hb_printf(b, "\n<a href=\"#r%d\"><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
                         "stroke=\"%s\" stroke-width=\"2\"/><text x=\"%d\" y=\"%d\" class=\"tick\">",
                         cs[c].row, LW - LMR + 10, ly, LW - LMR + 26, ly, col, LW - LMR + 30, ly + 3);
            qc_hb_esc(b, cs[c].label);
            qc_hb_puts(b, "</text></a>\n");
        }
        qc_hb_puts(b, "</svg>\n");
    }
    free(cs);
}

/* ===================================================================================== */
/* drift curves (long_decode_drift rows)                                                 */
/* ===================================================================================== */

#define DW 900
#define DML 60
#define DMR 250
#define DMT 14
#define DMB 40
#define DLO (-9)

static double jnum(const cJSON *v) {
    if (cJSON_IsNumber(v)) return v->valuedouble;
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "Infinity")) return INFINITY;
    return NAN;
}

static double dr_y(double v, int hi, int H) {
    double l = v > 0 ? (isfinite(v) ? log10(v) : hi) : DLO;
    if (l < DLO) l = DLO;
    if (l > hi) l = hi;
    return DMT + (double)(H - DMT - DMB) * (hi - l) / (hi - DLO);
}

static double dr_x(double step, int S) { return DML + (double)(DW - DML - DMR) * (S > 1 ? step / (S - 1) : 0); }

static void drift_axes(qc_hbuf *b, int S, int hi, int H) {
    qc_hb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"frame\"/>\n", DML,
                 DMT, DW - DML - DMR, H - DMT - DMB);
    for (int e = DLO; e <= hi; e++)
        qc_hb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/><text "
                     "x=\"%d\" y=\"%.1f\" text-anchor=\"end\" class=\"tick\">1e%d</text>\n", DML,
                     dr_y(pow(10.0, e), hi, H), DW - DMR, dr_y(pow(10.0, e), hi, H), DML - 4,
                     dr_y(pow(10.0, e), hi, H) + 3, e);
    for (int i = 0; i <= 4; i++)
        qc_hb_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"tick\">%d</text>\n",
                     dr_x((S - 1) * i / 4.0, S), H - DMB + 14, (int)((S - 1) * i / 4.0));
    qc_hb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"axis\">decode step "
                 "(max |actual - golden|; dashed: the logits atol)</text>\n", (DML + DW - DMR) / 2,
                 H - 8);
}

/* One curve of a drift object: its polyline, the atol of the first, its legend entry. */
static void drift_curve(qc_hbuf *b, const cJSON *k, const cJSON *ts, int ci, int S, int hi, int H) {
    const char *col = ci == 0 ? "#0d3b66" : COLORS[(ci - 1) % 10];
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(k, "tensor"));
    const char *steps = cJSON_GetStringValue(cJSON_GetObjectItem(k, "steps"));
    int all = steps && !strcmp(steps, "all");
    qc_hb_printf(b, "<polyline class=\"curve\" stroke=\"%s\" stroke-width=\"%s\" points=\"", col,
                 all ? "1" : "1.5");
    const cJSON *v;
    int j = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(k, "max_abs")) {
        double st = all ? j : jnum(cJSON_GetArrayItem(ts, j));
        if (isfinite(st)) qc_hb_printf(b, "%.1f,%.1f ", dr_x(st, S), dr_y(jnum(v), hi, H));
        j++;
    }
    qc_hb_puts(b, "\"/>\n");
    double at = jnum(cJSON_GetObjectItem(k, "atol"));
    if (ci == 0 && at > 0)
        qc_hb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" "
                     "stroke-dasharray=\"5,4\"/>\n", DML, dr_y(at, hi, H), DW - DMR, dr_y(at, hi, H), col);
    int ly = DMT + 8 + 13 * ci;
    qc_hb_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>"
                 "<text x=\"%d\" y=\"%d\" class=\"tick\">", DW - DMR + 10, ly, DW - DMR + 26, ly, col,
                 DW - DMR + 30, ly + 3);
    qc_hb_esc(b, name ? name : "?");
    qc_hb_puts(b, "</text>\n");
}

/* The drift panel of row w (ri) when it carries a drift object. */
static void drift_chart(qc_hbuf *b, const qc_check_row *w, int ri) {
    cJSON *d = w->drift_json ? cJSON_Parse(w->drift_json) : NULL;
    if (!d) return;
    const cJSON *cv = cJSON_GetObjectItem(d, "curves"), *ts = cJSON_GetObjectItem(d, "trace_steps");
    int S = (int)jnum(cJSON_GetObjectItem(d, "decode_steps")), nc = cJSON_GetArraySize(cv), hi = 0;
    if (S < 1) S = 1;
    const cJSON *k, *v;
    cJSON_ArrayForEach(k, cv) cJSON_ArrayForEach(v, cJSON_GetObjectItem(k, "max_abs")) {
        double x = jnum(v);
        if (x > 0 && isfinite(x) && ceil(log10(x)) > hi) hi = (int)ceil(log10(x));
    }
    int H = DMT + DMB + 14 * nc + 40;
    if (H < 300) H = 300;
    qc_hb_puts(b, "<h4><a href=\"#r");
    qc_hb_printf(b, "%d\">", ri);
    qc_hb_esc(b, w->backend);
    qc_hb_puts(b, " ");
    qc_hb_esc(b, w->mode);
    qc_hb_printf(b, ": long_decode_drift %s</a> (the logits at every step, the state buffers "
                 "at the traced steps)</h4>\n", qc_verdict_str(w->verdict));
    qc_hb_printf(b, "<svg class=\"chart drift\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
                 "role=\"img\">\n", DW, H, DW, H);
    drift_axes(b, S, hi, H);
    int ci = 0;
    cJSON_ArrayForEach(k, cv) drift_curve(b, k, ts, ci++, S, hi, H);
    const cJSON *fo = cJSON_GetObjectItem(d, "first_over");
    if (cJSON_IsObject(fo)) {
        double st = jnum(cJSON_GetObjectItem(fo, "step"));
        const char *tn = cJSON_GetStringValue(cJSON_GetObjectItem(fo, "tensor"));
        qc_hb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"over\"/><text "
                     "x=\"%.1f\" y=\"%d\" class=\"tick over-t\">first over tolerance: step %d (",
                     dr_x(st, S), DMT, dr_x(st, S), H - DMB, dr_x(st, S) + 3, DMT + 12, (int)st);
        qc_hb_esc(b, tn ? tn : "?");
        qc_hb_puts(b, ")</text>\n");
    }
    qc_hb_puts(b, "</svg>\n");
    cJSON_Delete(d);
}

/* ===================================================================================== */
/* the section                                                                           */
/* ===================================================================================== */

/* One case: its rows idx[n]; open when one of them failed. */
static void case_block(qc_hbuf *b, const qc_results *r, const int *idx, int n, int cno) {
    const qc_check_row *w0 = &r->rows[idx[0]];
    int bad = 0, withm = 0;
    for (int i = 0; i < n; i++) {
        qc_verdict v = r->rows[idx[i]].verdict;
        bad += v == QC_VERDICT_FAIL || v == QC_VERDICT_ERROR;
        withm += r->rows[idx[i]].has_metrics;
    }
    qc_hb_printf(b, "<details class=\"case\" id=\"case%d\"%s><summary><b>", cno, bad ? " open" : "");
    qc_hb_esc(b, w0->stem);
    qc_hb_puts(b, "/");
    qc_hb_esc(b, w0->case_name);
    qc_hb_printf(b, "</b> \xe2\x80\x94 %d checks, <span class=\"%s\">%d failed or errored</span>, "
                 "%d with metrics</summary>\n", n, bad ? "t-FAIL" : "t-PASS", bad, withm);
    bars_chart(b, r, idx, n);
    layers_chart(b, r, idx, n);
    for (int i = 0; i < n; i++)
        if (r->rows[idx[i]].drift_json) drift_chart(b, &r->rows[idx[i]], idx[i]);
    if (!withm) qc_hb_puts(b, "<p class=\"note\">No row of this case carries metrics.</p>\n");
    qc_hb_puts(b, "</details>\n");
}

void qc_html_curves(qc_hbuf *b, const qc_results *r) {
    int *idx = malloc((size_t)(r->n > 0 ? r->n : 1) * sizeof *idx);
    unsigned char *done = calloc((size_t)(r->n > 0 ? r->n : 1), 1);
    qc_hb_puts(b, "<section id=\"curves\"><h2>Error curves per case</h2>\n");
    int cno = 0;
    for (int i = 0; idx && done && i < r->n; i++) {
        const qc_check_row *w = &r->rows[i];
        if (done[i] || w->case_name[0] == '_' || !w->case_name[0]) continue;
        int n = 0;
        for (int j = i; j < r->n; j++)
            if (!done[j] && !strcmp(r->rows[j].stem, w->stem) &&
                !strcmp(r->rows[j].golden, w->golden) &&
                !strcmp(r->rows[j].case_name, w->case_name))
                idx[n++] = j, done[j] = 1;
        case_block(b, r, idx, n, cno++);
    }
    if (!idx || !done) b->oom = 1;
    if (cno == 0) qc_hb_puts(b, "<p class=\"note\">No per-case rows.</p>\n");
    qc_hb_puts(b, "</section>\n");
    free(idx);
    free(done);
}
