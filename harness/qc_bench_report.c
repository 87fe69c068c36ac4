/* qc_bench_report.c — the reports of `qwen-conform bench`: medians, minima, the ratio to the
 * reference backend and how far each figure is from its limit (static / decode vs weight
 * bytes per token / bandwidth; dynamic vs model flops per token / FMA peak); the Markdown
 * table, the JSON report, the SVG bar chart, each written through qc_outpath; and the
 * --baseline comparison (exit 1 on a regression, 3 when no metric matches). See
 * qc_bench_internal.h.
 */
#include "qc_bench_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "qc_cli.h"
#include "qc_cli_common.h"
#include "qc_outpath.h"

#ifndef QC_GIT_COMMIT
#define QC_GIT_COMMIT "unknown" /* normally defined by CMake */
#endif
#ifndef QC_VERSION
#define QC_VERSION "unknown"
#endif

static const char *const mode_names[N_MODES] = {"static", "dynamic", "decode"};

/* ===================================================================================== */
/* Statistics                                                                             */
/* ===================================================================================== */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(const double *v, int n) {
    if (n <= 0) return 0.0;
    double tmp[MAX_REPS];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

static double min_of(const double *v, int n) {
    double m = n ? v[0] : 0.0;
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

static double max_of(const double *v, int n) {
    double m = n ? v[0] : 0.0;
    for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

/* ===================================================================================== */
/* Reports                                                                                */
/* ===================================================================================== */

static const char *mode_label(int mi) {
    return mi == 0 ? "static prefill" : mi == 1 ? "dynamic prefill" : "decode";
}

static bench_metric *ref_metric(bench_report *R, int mi) {
    for (int b = 0; b < R->n_be; b++)
        if (!strcmp(R->be[b].name, "reference")) return &R->be[b].m[mi];
    return NULL;
}

static void finish(bench_report *R) {
    R->bw_med = median_of(R->bw, R->n_probe);
    R->bw_max = max_of(R->bw, R->n_probe);
    R->peak_med = median_of(R->peak, R->n_probe);
    R->peak_max = max_of(R->peak, R->n_probe);
    for (int b = 0; b < R->n_be; b++)
        for (int mi = 0; mi < N_MODES; mi++) {
            bench_metric *m = &R->be[b].m[mi];
            m->median = median_of(m->samples, m->n);
            m->min = min_of(m->samples, m->n);
            m->limit = mi == 1 ? R->peak_med * 1e9 / R->flops_per_token
                               : R->bw_med * 1e9 / R->bytes_per_token;
        }
    for (int b = 0; b < R->n_be; b++)
        for (int mi = 0; mi < N_MODES; mi++) {
            bench_metric *ref = ref_metric(R, mi), *m = &R->be[b].m[mi];
            if (ref) ref->median = median_of(ref->samples, ref->n);
            m->ratio = (ref && ref->median > 0 && m->n) ? m->median / ref->median : 0.0;
        }
}

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) return;
        if (b->p && b->n + (size_t)w < b->cap) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)w;
        char *np = realloc(b->p, cap);
        if (!np) return;
        b->p = np;
        b->cap = cap;
    }
}

static void markdown(const bench_report *R, const bench_opts *o, sbuf *b) {
    sb_printf(b, "## qwen-conform bench: %s (%s), %d thread%s, %s\n\n", R->model_name,
              qc_dtype_str(R->dtype), R->threads, R->threads == 1 ? "" : "s", R->isa);
    sb_printf(b, "- machine: %s, %d cores; commit %s; %s\n", R->cpu, R->cores, QC_GIT_COMMIT, R->date);
    sb_printf(b, "- probes (same run, %d threads): streaming read of the %.0f MB of weights %.1f GB/s "
                 "median (max %.1f); FP32 FMA loop %.0f GFLOP/s median (max %.0f)\n",
              R->threads, R->bytes_per_token / 1e6, R->bw_med, R->bw_max, R->peak_med, R->peak_max);
    sb_printf(b, "- workload: static prefill %d tokens (one call per token), dynamic prefill %d tokens "
                 "(one call per max_seq_len %d chunk), decode %d steps; reference backend: %d-token "
                 "prompts, %d decode steps; %d repetitions, interleaved\n",
              R->static_prompt, R->prompt, R->max_seq_len, R->decode, R->ref_prompt, R->ref_decode, o->reps);
    sb_printf(b, "- limits: static / decode = bandwidth / %.1f MB of weights per token; dynamic = FMA "
                 "peak / %.2f GFLOP per token\n\n",
              R->bytes_per_token / 1e6, R->flops_per_token / 1e9);
    sb_printf(b, "| backend | dtype | mode | tokens | tok/s median | tok/s min | vs reference | limit tok/s | %% of limit |\n");
    sb_printf(b, "|---|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (int bi = 0; bi < R->n_be; bi++)
        for (int mi = 0; mi < N_MODES; mi++) {
            const bench_metric *m = &R->be[bi].m[mi];
            if (!m->n) continue;
            char ratio[32] = "-";
            if (m->ratio > 0 && strcmp(R->be[bi].name, "reference")) snprintf(ratio, sizeof ratio, "%.1fx", m->ratio);
            else if (!strcmp(R->be[bi].name, "reference")) snprintf(ratio, sizeof ratio, "1.0x");
            sb_printf(b, "| %s | %s | %s | %d | %.2f | %.2f | %s | %.1f (%s) | %.0f%% |\n", R->be[bi].desc,
                      qc_dtype_str(R->dtype), mode_label(mi), m->tokens, m->median, m->min, ratio,
                      m->limit, mi == 1 ? "FMA peak" : "bandwidth",
                      m->limit > 0 ? 100.0 * m->median / m->limit : 0.0);
        }
    sb_printf(b, "\n");
}

static cJSON *json_report(const bench_report *R, const bench_opts *o) {
    cJSON *j = cJSON_CreateObject();
    /* bumped when a field is renamed or removed (fields are only ever added within one) */
    cJSON_AddNumberToObject(j, "schema_version", QC_BENCH_JSON_SCHEMA_VERSION);
    cJSON_AddStringToObject(j, "tool", "qwen-conform bench");
    cJSON_AddStringToObject(j, "version", QC_VERSION);
    cJSON_AddStringToObject(j, "commit", QC_GIT_COMMIT);
    cJSON_AddStringToObject(j, "date", R->date);
    cJSON *mc = cJSON_AddObjectToObject(j, "machine");
    cJSON_AddStringToObject(mc, "cpu", R->cpu);
    cJSON_AddNumberToObject(mc, "cores", R->cores);
    cJSON_AddStringToObject(mc, "isa", R->isa);
    cJSON_AddNumberToObject(mc, "threads", R->threads);
    cJSON *cf = cJSON_AddObjectToObject(j, "config");
    cJSON_AddStringToObject(cf, "model", R->model_name);
    cJSON_AddStringToObject(cf, "dtype", qc_dtype_str(R->dtype));
    cJSON_AddNumberToObject(cf, "static_prompt", R->static_prompt);
    cJSON_AddNumberToObject(cf, "prompt", R->prompt);
    cJSON_AddNumberToObject(cf, "max_seq_len", R->max_seq_len);
    cJSON_AddNumberToObject(cf, "decode", R->decode);
    cJSON_AddNumberToObject(cf, "ref_prompt", R->ref_prompt);
    cJSON_AddNumberToObject(cf, "ref_decode", R->ref_decode);
    cJSON_AddNumberToObject(cf, "reps", o->reps);
    cJSON_AddNumberToObject(cf, "weight_bytes_per_token", R->bytes_per_token);
    cJSON_AddNumberToObject(cf, "flops_per_prefill_token", R->flops_per_token);
    cJSON *pr = cJSON_AddObjectToObject(j, "probes");
    cJSON_AddItemToObject(pr, "bandwidth_gbs", cJSON_CreateDoubleArray(R->bw, R->n_probe));
    cJSON_AddItemToObject(pr, "fma_peak_gflops", cJSON_CreateDoubleArray(R->peak, R->n_probe));
    cJSON_AddNumberToObject(pr, "bandwidth_gbs_median", R->bw_med);
    cJSON_AddNumberToObject(pr, "fma_peak_gflops_median", R->peak_med);
    cJSON *res = cJSON_AddArrayToObject(j, "results");
    for (int bi = 0; bi < R->n_be; bi++)
        for (int mi = 0; mi < N_MODES; mi++) {
            const bench_metric *m = &R->be[bi].m[mi];
            if (!m->n) continue;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "backend", R->be[bi].name);
            cJSON_AddStringToObject(e, "describe", R->be[bi].desc);
            cJSON_AddStringToObject(e, "model", R->model_name);
            cJSON_AddStringToObject(e, "dtype", qc_dtype_str(R->dtype));
            cJSON_AddStringToObject(e, "mode", mode_names[mi]);
            cJSON_AddNumberToObject(e, "tokens", m->tokens);
            cJSON_AddNumberToObject(e, "threads", R->threads);
            cJSON_AddNumberToObject(e, "tok_s_median", m->median);
            cJSON_AddNumberToObject(e, "tok_s_min", m->min);
            cJSON_AddItemToObject(e, "tok_s_samples", cJSON_CreateDoubleArray(m->samples, m->n));
            if (m->ratio > 0) cJSON_AddNumberToObject(e, "ratio_vs_reference", m->ratio);
            cJSON_AddStringToObject(e, "limit", mi == 1 ? "fma_peak" : "bandwidth");
            cJSON_AddNumberToObject(e, "limit_tok_s", m->limit);
            cJSON_AddNumberToObject(e, "pct_of_limit", m->limit > 0 ? 100.0 * m->median / m->limit : 0);
            cJSON_AddItemToArray(res, e);
        }
    return j;
}

static void svg_escape(sbuf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '<') sb_printf(b, "&lt;");
        else if (*s == '>') sb_printf(b, "&gt;");
        else if (*s == '&') sb_printf(b, "&amp;");
        else sb_printf(b, "%c", *s);
    }
}

/* horizontal bars (log scale) of the median tokens/s per backend and mode; a tick at the min */
static void svg_chart(const bench_report *R, sbuf *b) {
    int rows = 0;
    double vmax = 1, vmin = 1e30;
    for (int bi = 0; bi < R->n_be; bi++)
        for (int mi = 0; mi < N_MODES; mi++)
            if (R->be[bi].m[mi].n) {
                rows++;
                if (R->be[bi].m[mi].median > vmax) vmax = R->be[bi].m[mi].median;
                if (R->be[bi].m[mi].min > 0 && R->be[bi].m[mi].min < vmin) vmin = R->be[bi].m[mi].min;
            }
    if (vmin > vmax) vmin = 1;
    const double lo = floor(log10(vmin > 0 ? vmin : 0.01)), hi = ceil(log10(vmax)) + (vmax == 1);
    const int W = 900, left = 330, right = 60, bar = 22, gap = 10, top = 60;
    const int H = top + rows * (bar + gap) + 50;
    const double span = (double)(W - left - right);
#define XPOS(v) (left + span * (log10(v) - lo) / (hi - lo))
    sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                 "font-family=\"sans-serif\" font-size=\"13\">\n", W, H);
    sb_printf(b, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    sb_printf(b, "<text x=\"10\" y=\"22\" font-size=\"16\" font-weight=\"bold\">qwen-conform bench: ");
    svg_escape(b, R->model_name);
    sb_printf(b, " (%s), %d threads, %s: tokens/s (log scale, median; tick = min)</text>\n",
              qc_dtype_str(R->dtype), R->threads, R->isa);
    sb_printf(b, "<text x=\"10\" y=\"42\" fill=\"#555\">");
    svg_escape(b, R->cpu);
    sb_printf(b, "; commit %s; %s</text>\n", QC_GIT_COMMIT, R->date);
    for (double d = lo; d <= hi + 1e-9; d += 1) {
        double x = left + span * (d - lo) / (hi - lo);
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n", x, top - 5, x,
                  H - 40);
        sb_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%g</text>\n", x, H - 22,
                  pow(10, d));
    }
    static const char *colors[N_MODES] = {"#8da0cb", "#66c2a5", "#fc8d62"};
    int row = 0;
    for (int bi = 0; bi < R->n_be; bi++)
        for (int mi = 0; mi < N_MODES; mi++) {
            const bench_metric *m = &R->be[bi].m[mi];
            if (!m->n) continue;
            int y = top + row * (bar + gap);
            double x1 = m->median > 0 ? XPOS(m->median) : left;
            if (x1 < left) x1 = left;
            sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s %s (%d tok)</text>\n", left - 8,
                      y + bar - 6, R->be[bi].name, mode_label(mi), m->tokens);
            sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", left, y,
                      x1 - left, bar, colors[mi]);
            if (m->min > 0) {
                double xm = XPOS(m->min);
                if (xm < left) xm = left;
                sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\" "
                             "stroke-width=\"2\"/>\n", xm, y, xm, y + bar);
            }
            sb_printf(b, "<text x=\"%.1f\" y=\"%d\">%.2f</text>\n", x1 + 4, y + bar - 6, m->median);
            row++;
        }
#undef XPOS
    sb_printf(b, "</svg>\n");
}

/* ===================================================================================== */
/* Baseline gating                                                                        */
/* ===================================================================================== */

/* 0 pass, 1 regression, 3 nothing compared; <0 error (err filled) */
static int compare_baseline(const bench_report *R, const bench_opts *o, qc_err *err) {
    char *text = NULL;
    size_t len = 0;
    if (qc_cli_read_file(o->baseline, &text, &len, err)) return -1;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) {
        qc_errf(err, QC_ERR_FORMAT, "%s: not valid JSON", o->baseline);
        return -1;
    }
    /* a baseline written before bench reports were versioned has no schema_version: read as 1 */
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(j, "schema_version");
    if (sv && (!cJSON_IsNumber(sv) || sv->valuedouble != (double)QC_BENCH_JSON_SCHEMA_VERSION)) {
        cJSON_Delete(j);
        qc_errf(err, QC_ERR_FORMAT, "%s: schema_version is not %d (a bench report of another "
                "format)", o->baseline, QC_BENCH_JSON_SCHEMA_VERSION);
        return -1;
    }
    cJSON *res = cJSON_GetObjectItemCaseSensitive(j, "results");
    if (!cJSON_IsArray(res)) {
        cJSON_Delete(j);
        qc_errf(err, QC_ERR_FORMAT, "%s: no \"results\" array", o->baseline);
        return -1;
    }
    int compared = 0, regressions = 0, idx = 0;
    cJSON *e;
    fprintf(stderr, "%s: baseline %s (max regression %.1f%%)\n", PROG, o->baseline, o->max_regression);
    cJSON_ArrayForEach(e, res) {
        idx++;
        const cJSON *jb = cJSON_GetObjectItemCaseSensitive(e, "backend");
        const cJSON *jm = cJSON_GetObjectItemCaseSensitive(e, "mode");
        const cJSON *jmod = cJSON_GetObjectItemCaseSensitive(e, "model");
        const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *jt = cJSON_GetObjectItemCaseSensitive(e, "tokens");
        const cJSON *jv = cJSON_GetObjectItemCaseSensitive(e, "tok_s_median");
        if (!cJSON_IsString(jb) || !cJSON_IsString(jm) || !cJSON_IsString(jmod) || !cJSON_IsString(jd) ||
            !cJSON_IsNumber(jt) || !cJSON_IsNumber(jv)) {
            cJSON_Delete(j);
            qc_errf(err, QC_ERR_FORMAT,
                    "%s: results[%d]: needs backend, model, dtype, mode (strings), tokens and "
                    "tok_s_median (numbers)", o->baseline, idx - 1);
            return -1;
        }
        for (int bi = 0; bi < R->n_be; bi++)
            for (int mi = 0; mi < N_MODES; mi++) {
                const bench_metric *m = &R->be[bi].m[mi];
                if (!m->n || strcmp(R->be[bi].name, jb->valuestring) || strcmp(mode_names[mi], jm->valuestring) ||
                    strcmp(R->model_name, jmod->valuestring) || strcmp(qc_dtype_str(R->dtype), jd->valuestring) ||
                    m->tokens != (int)jt->valuedouble)
                    continue;
                compared++;
                double base = jv->valuedouble, change = base > 0 ? 100.0 * (m->median - base) / base : 0;
                int bad = m->median < base * (1.0 - o->max_regression / 100.0);
                regressions += bad;
                fprintf(stderr, "  %-10s %-8s %6d tok: %10.2f tok/s vs baseline %10.2f (%+.1f%%)%s\n",
                        R->be[bi].name, mode_names[mi], m->tokens, m->median, base, change,
                        bad ? "  REGRESSION" : "");
            }
    }
    cJSON_Delete(j);
    if (!compared) {
        fprintf(stderr, "%s: the baseline %s has no metric matching this run (backend, model, dtype, "
                        "mode, tokens)\n", PROG, o->baseline);
        return 3;
    }
    fprintf(stderr, "%s: %d metric%s compared, %d regression%s\n", PROG, compared, compared == 1 ? "" : "s",
            regressions, regressions == 1 ? "" : "s");
    return regressions ? 1 : 0;
}

/* ===================================================================================== */
/* Writing them                                                                           */
/* ===================================================================================== */

/* The JSON report (and a final newline) into --json. Exit code. */
static int write_json(const bench_report *R, const bench_opts *o, qc_err *err) {
    int rc = QC_EXIT_PASS;
    cJSON *j = json_report(R, o);
    char *txt = cJSON_Print(j);
    cJSON_Delete(j);
    if (!txt) {
        qc_errf(err, QC_ERR_OOM, "%s: cannot render JSON", o->json);
        return qc_cli_fail(PROG, err);
    }
    size_t n = strlen(txt);
    txt[n] = '\0';
    char *nl = malloc(n + 2);
    if (nl) {
        memcpy(nl, txt, n);
        nl[n] = '\n';
        if (qc_out_write_file(o->json, nl, n + 1, QC_OUT_TEXT, err)) rc = qc_cli_fail(PROG, err);
        free(nl);
    }
    free(txt);
    return rc;
}

int bench_write_reports(bench_report *R, const bench_opts *o, qc_err *err) {
    int rc = QC_EXIT_PASS;
    finish(R);
    sbuf md = {0};
    markdown(R, o, &md);
    fwrite(md.p, 1, md.n, stdout);
    fflush(stdout);
    if (o->markdown && qc_out_write_file(o->markdown, md.p, md.n, QC_OUT_TEXT, err))
        rc = qc_cli_fail(PROG, err);
    free(md.p);
    if (!rc && o->json) rc = write_json(R, o, err);
    if (!rc && o->svg) {
        sbuf sv = {0};
        svg_chart(R, &sv);
        if (qc_out_write_file(o->svg, sv.p, sv.n, QC_OUT_TEXT, err)) rc = qc_cli_fail(PROG, err);
        free(sv.p);
    }
    if (!rc && o->baseline) {
        int g = compare_baseline(R, o, err);
        if (g < 0) rc = qc_cli_fail(PROG, err);
        else rc = g == 1 ? QC_EXIT_FAIL : g == 3 ? QC_EXIT_NOTHING : QC_EXIT_PASS;
    }
    return rc;
}
