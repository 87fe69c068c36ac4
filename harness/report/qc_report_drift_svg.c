/* qc_report_drift_svg.c — `qwen-conform drift-svg REPORT.json --out F.svg`: the error curves of
 * every long_decode_drift row of a check report (its "drift" objects, qc_check_drift.c) drawn
 * as one SVG, one panel per row: max |actual - golden| per decode step on a log scale, the
 * logits over every step and each DeltaNet state buffer at the traced steps, the logits atol
 * dashed, and the first step over tolerance marked.
 *
 * Exit: 0 written; 2 usage, an unreadable or malformed report, a report without such rows
 * (message naming the file and the field), an output refused (README "Output files").
 */

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_file.h"
#include "qc_cli.h"
#include "qc_report_buf.h"
#include "qc_cli_common.h"
#include "qc_outpath.h"

/* ===================================================================================== */
/* a growing text buffer                                                                 */
/* ===================================================================================== */

/* ===================================================================================== */
/* drawing                                                                               */
/* ===================================================================================== */

#define PW 760     /* panel width */
#define PH 300     /* panel height */
#define ML 70      /* plot margins */
#define MR 190
#define MT 34
#define MB 40
#define YLO (-9.0) /* log10 range floor */

static const char *COLORS[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                               "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

static double num(const cJSON *v) {
    if (cJSON_IsNumber(v)) return v->valuedouble;
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "Infinity")) return INFINITY;
    return NAN;
}

static double ly(double v, double yhi) {
    double l = v > 0 && isfinite(v) ? log10(v) : v == 0 ? YLO : yhi;
    if (l < YLO) l = YLO;
    return MT + (PH - MT - MB) * (yhi - l) / (yhi - YLO);
}

static double lx(double step, int S) { return ML + (PW - ML - MR) * (S > 1 ? step / (S - 1) : 0); }

/* One panel at vertical offset y0 for one row's drift object. */
static void panel(qc_sbuf *b, const cJSON *row, const cJSON *d, int y0) {
    const char *stem = cJSON_GetStringValue(cJSON_GetObjectItem(row, "stem"));
    const char *cs = cJSON_GetStringValue(cJSON_GetObjectItem(row, "case"));
    const char *be = cJSON_GetStringValue(cJSON_GetObjectItem(row, "backend"));
    const char *md = cJSON_GetStringValue(cJSON_GetObjectItem(row, "mode"));
    const char *vd = cJSON_GetStringValue(cJSON_GetObjectItem(row, "verdict"));
    int S = (int)num(cJSON_GetObjectItem(d, "decode_steps"));
    const cJSON *ts = cJSON_GetObjectItem(d, "trace_steps"), *cv = cJSON_GetObjectItem(d, "curves");
    double yhi = 0.0; /* log10 of the top: at least 1 */
    const cJSON *k;
    cJSON_ArrayForEach(k, cv) {
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItem(k, "max_abs")) {
            double x = num(v);
            if (x > 0 && isfinite(x) && ceil(log10(x)) > yhi) yhi = ceil(log10(x));
        }
    }
    qc_sbuf_printf(b, "<g transform=\"translate(0,%d)\">\n", y0);
    qc_sbuf_printf(b, "<text x=\"%d\" y=\"20\" font-size=\"14\">%s/%s %s %s: long_decode_drift %s</text>\n", ML,
       stem ? stem : "?", cs ? cs : "?", be ? be : "?", md ? md : "?", vd ? vd : "?");
    qc_sbuf_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", ML,
       MT, PW - ML - MR, PH - MT - MB);
    for (int e = (int)YLO; e <= (int)yhi; e++) {
        double y = ly(pow(10.0, e), yhi);
        qc_sbuf_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>"
           "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">1e%d</text>\n", ML, y,
           PW - MR, y, ML - 4, y + 3, e);
    }
    for (int i = 0; i <= 4; i++) {
        double st = (S - 1) * i / 4.0;
        qc_sbuf_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%d</text>\n",
           lx(st, S), PH - MB + 14, (int)st);
    }
    qc_sbuf_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">decode step</text>\n",
       (ML + PW - MR) / 2, PH - 8);
    qc_sbuf_printf(b, "<text x=\"14\" y=\"%d\" font-size=\"11\" transform=\"rotate(-90 14 %d)\" "
       "text-anchor=\"middle\">max |actual - golden|</text>\n", (MT + PH - MB) / 2, (MT + PH - MB) / 2);
    int ci = 0, ly0 = MT + 4;
    cJSON_ArrayForEach(k, cv) {
        const char *col = COLORS[ci % 10];
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(k, "tensor"));
        const char *steps = cJSON_GetStringValue(cJSON_GetObjectItem(k, "steps"));
        int all = steps && !strcmp(steps, "all");
        const cJSON *ma = cJSON_GetObjectItem(k, "max_abs");
        int j = 0;
        qc_sbuf_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" points=\"", col,
           all ? "1" : "1.5");
        const cJSON *v;
        cJSON_ArrayForEach(v, ma) {
            double st = all ? j : num(cJSON_GetArrayItem(ts, j));
            qc_sbuf_printf(b, "%.1f,%.1f ", lx(st, S), ly(num(v), yhi));
            j++;
        }
        qc_sbuf_printf(b, "\"/>\n");
        if (ci == 0) {
            double at = num(cJSON_GetObjectItem(k, "atol"));
            if (at > 0)
                qc_sbuf_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" "
                   "stroke-dasharray=\"5,4\"/>\n", ML, ly(at, yhi), PW - MR, ly(at, yhi), col);
        }
        qc_sbuf_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>"
           "<text x=\"%d\" y=\"%d\" font-size=\"10\">%s</text>\n", PW - MR + 8, ly0, PW - MR + 24,
           ly0, col, PW - MR + 28, ly0 + 3, name ? name : "?");
        ly0 += 13;
        ci++;
    }
    const cJSON *fo = cJSON_GetObjectItem(d, "first_over");
    if (cJSON_IsObject(fo)) {
        double st = num(cJSON_GetObjectItem(fo, "step"));
        const char *tn = cJSON_GetStringValue(cJSON_GetObjectItem(fo, "tensor"));
        qc_sbuf_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#d00\" "
           "stroke-dasharray=\"2,2\"/><text x=\"%.1f\" y=\"%d\" font-size=\"10\" fill=\"#d00\">"
           "first over tolerance: step %d (%s)</text>\n", lx(st, S), MT, lx(st, S), PH - MB,
           lx(st, S) + 3, MT + 12, (int)st, tn ? tn : "?");
    }
    qc_sbuf_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"10\" fill=\"#555\">dashed: logits atol</text>\n",
       PW - MR + 8, ly0 + 8);
    qc_sbuf_printf(b, "</g>\n");
}

/* The SVG of every long_decode_drift row with a drift object; NULL with *why when none. */
static char *drift_svg(const cJSON *report, const char **why) {
    const cJSON *rows = cJSON_GetObjectItem(report, "checks"), *row;
    if (!cJSON_IsArray(rows)) {
        *why = "no 'checks' array (not a qwen-conform check report)";
        return NULL;
    }
    int n = 0;
    cJSON_ArrayForEach(row, rows) n += cJSON_IsObject(cJSON_GetObjectItem(row, "drift"));
    if (n == 0) {
        *why = "no long_decode_drift row with a 'drift' object (check a golden with a long "
               "decode, e.g. fixtures/tiny-long-decode)";
        return NULL;
    }
    qc_sbuf b = {0};
    qc_sbuf_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
       "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", PW,
       PH * n);
    int i = 0;
    cJSON_ArrayForEach(row, rows) {
        const cJSON *d = cJSON_GetObjectItem(row, "drift");
        if (cJSON_IsObject(d)) panel(&b, row, d, PH * i++);
    }
    qc_sbuf_printf(&b, "</svg>\n");
    if (b.oom) {
        free(b.s);
        *why = "out of memory";
        return NULL;
    }
    return b.s;
}

/* ===================================================================================== */
/* the command                                                                           */
/* ===================================================================================== */

static const char *USAGE =
    "usage: qwen-conform drift-svg REPORT.json --out F.svg\n"
    "  Draw the error curves of every long_decode_drift row of a check report (written by\n"
    "  `qwen-conform check --json`) as one SVG: max |actual - golden| per decode step, log\n"
    "  scale; the logits at every step and the DeltaNet states at the golden's traced steps.\n";

int qc_cmd_drift_svg(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
        } else if (argv[i][0] != '-' && !in) {
            in = argv[i];
        } else {
            fprintf(stderr, "qwen-conform drift-svg: unexpected argument '%s'\n%s", argv[i], USAGE);
            return 2;
        }
    }
    if (!in || !out) {
        fprintf(stderr, "qwen-conform drift-svg: need REPORT.json and --out F.svg\n%s", USAGE);
        return 2;
    }
    qc_err err;
    qc_err_clear(&err);
    qc_outpath_reset();
    qc_outpath_add_input(in, "REPORT.json");
    qc_outpath_add_output(out, "--out", QC_OUT_TEXT);
    if (qc_outpath_verify(&err)) {
        fprintf(stderr, "qwen-conform drift-svg: %s\n", err.msg);
        return 2;
    }
    char *text = NULL;
    size_t len = 0;
    if (qc_read_small_file(in, QC_CLI_MAX_INPUT_BYTES, &text, &len, &err)) {
        fprintf(stderr, "qwen-conform drift-svg: %s\n", err.msg);
        return 2;
    }
    cJSON *rep = cJSON_ParseWithLength(text, len);
    free(text);
    if (!rep) {
        fprintf(stderr, "qwen-conform drift-svg: %s: not valid JSON\n", in);
        return 2;
    }
    const char *why = NULL;
    char *svg = drift_svg(rep, &why);
    cJSON_Delete(rep);
    if (!svg) {
        fprintf(stderr, "qwen-conform drift-svg: %s: %s\n", in, why);
        return 2;
    }
    qc_status s = qc_out_write_file(out, svg, strlen(svg), QC_OUT_TEXT, &err);
    free(svg);
    if (s) {
        fprintf(stderr, "qwen-conform drift-svg: %s\n", err.msg);
        return 2;
    }
    return 0;
}
