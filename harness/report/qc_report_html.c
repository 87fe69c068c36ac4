/* qc_report_html.c — `check --html FILE`: one self-contained HTML page (qc_report_html.h). The
 * charts are drawn by qc_report_html_svg.c, both write through the text primitives of
 * qc_report_html_text.c; this file holds the page, the verdicts, the summary, the row table
 * and the script that filters it. */

#include "qc_report_html.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_outpath.h"
#include "qc_report_causes.h"
#include "qc_report_html_internal.h"
#include "qc_report_verdict.h"

/* ===================================================================================== */
/* style and script                                                                      */
/* ===================================================================================== */

static const char CSS[] =
    ":root{--pass:#2e7d32;--fail:#c62828;--skip:#757575;--error:#6a1b9a;--partial:#e65100}\n"
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,Arial,sans-serif;margin:0;"
    "color:#212121;background:#fafafa}\n"
    "header{padding:14px 22px;color:#fff;background:#455a64}\n"
    "header h1{margin:0;font-size:22px}header p{margin:4px 0 0}\n"
    "header.s-PASS{background:var(--pass)}header.s-FAIL{background:var(--fail)}"
    "header.s-ERROR{background:var(--error)}header.s-NOTHING{background:var(--skip)}\n"
    "main{padding:0 22px 40px}\n"
    "h2{margin:26px 0 10px;padding-bottom:3px;border-bottom:1px solid #ddd;font-size:18px}\n"
    "h3{margin:6px 0}h4{margin:14px 0 4px;font-size:13px;font-weight:600}\n"
    ".cards{display:flex;flex-wrap:wrap;gap:14px}\n"
    ".card{background:#fff;border:1px solid #ddd;border-left:8px solid #999;border-radius:6px;"
    "padding:10px 14px;flex:1 1 440px;max-width:760px}\n"
    ".card.v-PASS{border-left-color:var(--pass)}.card.v-PARTIAL{border-left-color:var(--partial)}"
    ".card.v-FAIL{border-left-color:var(--fail)}\n"
    ".badge{display:inline-block;font-weight:700;font-size:20px;padding:1px 12px;border-radius:4px;"
    "color:#fff;background:#999;margin-right:10px}\n"
    ".v-PASS .badge{background:var(--pass)}.v-PARTIAL .badge{background:var(--partial)}"
    ".v-FAIL .badge{background:var(--fail)}\n"
    ".cov{height:10px;background:#eee;border-radius:5px;overflow:hidden;max-width:420px;"
    "margin:4px 0}.cov span{display:block;height:100%;background:#1976d2}\n"
    "table{border-collapse:collapse;background:#fff}\n"
    "th,td{border:1px solid #e0e0e0;padding:3px 7px;text-align:left;vertical-align:top}\n"
    "th{background:#f1f3f4;font-weight:600}\n"
    ".tiles{display:flex;gap:10px;flex-wrap:wrap;margin-bottom:10px}\n"
    ".tile{background:#fff;border:1px solid #ddd;border-radius:6px;padding:6px 16px;"
    "text-align:center;min-width:80px}.tile b{display:block;font-size:24px}\n"
    ".tile.t-FAIL b,.t-FAIL{color:var(--fail)}.tile.t-PASS b,.t-PASS{color:var(--pass)}"
    ".tile.t-ERROR b{color:var(--error)}.tile.t-SKIP b{color:var(--skip)}\n"
    "#tbl td:nth-child(-n+6){white-space:nowrap}\n"
    "#tbl{width:100%}#tbl td.num{text-align:right;font-variant-numeric:tabular-nums;"
    "white-space:nowrap}\n"
    "td.vd{font-weight:700}tr.r-PASS td.vd{color:var(--pass)}tr.r-FAIL td.vd{color:var(--fail)}"
    "tr.r-SKIP td.vd{color:var(--skip)}tr.r-ERROR td.vd{color:var(--error)}\n"
    "tr.r-FAIL{background:#fff5f5}tr.r-ERROR{background:#faf2ff}tr[hidden]{display:none}\n"
    "tr:target{outline:3px solid #ffb300}\n"
    "pre{white-space:pre-wrap;word-break:break-word;margin:4px 0;font-size:12px}\n"
    ".filters{position:sticky;top:0;background:#fafafa;padding:8px 0;z-index:1;display:flex;"
    "gap:14px;align-items:center;flex-wrap:wrap}\n"
    "#q{width:360px;padding:4px 6px}\n"
    ".chart{display:block;max-width:100%;height:auto;background:#fff;border:1px solid #e0e0e0;"
    "font-family:Arial,sans-serif;font-size:11px}\n"
    ".chart .grid{stroke:#ececec}.chart .frame{fill:none;stroke:#999}"
    ".chart .tol{stroke:#d00;stroke-dasharray:5 4;stroke-width:1.5}\n"
    ".chart .curve{fill:none;stroke-width:1.5}.chart .tick{font-size:10px;fill:#444}"
    ".chart .axis{font-size:11px;fill:#333}\n"
    ".chart .over{stroke:#d00;stroke-dasharray:2 2}.chart .over-t{fill:#d00}"
    ".chart .dot{stroke:#fff;stroke-width:1}.chart .d-FAIL,.chart .d-ERROR{stroke:#7f0000;"
    "stroke-width:2}.chart .t-FAIL{fill:var(--fail)}\n"
    "details.case{background:#fff;border:1px solid #ddd;border-radius:6px;padding:6px 12px;"
    "margin:8px 0}details.case summary{cursor:pointer}\n"
    "code{background:#eceff1;padding:1px 4px;border-radius:3px}\n"
    ".note{color:#666}.loc{color:#0d47a1}\n";

/* No data in the script: it reads the table. Marks <html data-qc-script="ok"> at the end. */
static const char JS[] =
    "(function () {\n"
    "  'use strict';\n"
    "  var root = document.documentElement;\n"
    "  try {\n"
    "    var all = function (s) { return Array.prototype.slice.call(document.querySelectorAll(s)); };\n"
    "    var q = document.getElementById('q'), shown = document.getElementById('shown');\n"
    "    var boxes = all('input.vf'), rows = all('#tbl tbody tr');\n"
    "    var text = rows.map(function (r) { return r.textContent.toLowerCase(); });\n"
    "    var only = null; /* the row ids a cause explains, or null */\n"
    "    var apply = function () {\n"
    "      var words = q.value.toLowerCase().split(/\\s+/).filter(Boolean), on = {}, n = 0;\n"
    "      boxes.forEach(function (b) { on[b.value] = b.checked; });\n"
    "      rows.forEach(function (r, i) {\n"
    "        var ok = only ? only[r.id] === true : on[r.getAttribute('data-v')] === true &&\n"
    "                 words.every(function (w) { return text[i].indexOf(w) >= 0; });\n"
    "        r.hidden = !ok;\n"
    "        if (ok) n++;\n"
    "      });\n"
    "      shown.textContent = n + ' of ' + rows.length + ' rows shown' + (only ? ' (a cause)' : '');\n"
    "    };\n"
    "    var set = function (qv, vv, ids) {\n"
    "      only = null;\n"
    "      if (ids) {\n"
    "        only = {};\n"
    "        ids.split(/\\s+/).forEach(function (id) { only[id] = true; });\n"
    "      }\n"
    "      if (qv !== null) q.value = qv;\n"
    "      if (vv !== null) {\n"
    "        var want = vv.toUpperCase().split(',');\n"
    "        boxes.forEach(function (b) { b.checked = want.indexOf(b.value) >= 0; });\n"
    "      }\n"
    "      apply();\n"
    "    };\n"
    "    var typed = function () { only = null; apply(); };\n"
    "    q.addEventListener('input', typed);\n"
    "    boxes.forEach(function (b) { b.addEventListener('change', typed); });\n"
    "    all('[data-q],[data-v],[data-rows]').forEach(function (a) {\n"
    "      a.addEventListener('click', function () {\n"
    "        set(a.getAttribute('data-q'), a.getAttribute('data-v'), a.getAttribute('data-rows'));\n"
    "      });\n"
    "    });\n"
    "    var reveal = function () {\n"
    "      var id = decodeURIComponent(location.hash.slice(1));\n"
    "      var t = id ? document.getElementById(id) : null;\n"
    "      if (t && t.hidden) { set('', 'PASS,FAIL,SKIP,ERROR'); t.scrollIntoView(); }\n"
    "    };\n"
    "    window.addEventListener('hashchange', reveal);\n"
    "    var p = new URLSearchParams(location.search);\n"
    "    set(p.get('q'), p.get('v'), p.get('rows'));\n"
    "    reveal();\n"
    "    root.setAttribute('data-qc-script', 'ok');\n"
    "  } catch (e) {\n"
    "    root.setAttribute('data-qc-script', 'error: ' + e);\n"
    "    throw e;\n"
    "  }\n"
    "})();\n";

/* ===================================================================================== */
/* the page                                                                              */
/* ===================================================================================== */

static const char *overall(int rc) {
    return rc == 0 ? "PASS" : rc == 1 ? "FAIL" : rc == 2 ? "ERROR" : "NOTHING";
}

static void head(qc_hbuf *b, const qc_results *r, int rc) {
    qc_hb_puts(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                  "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                  "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
                  "base-uri 'none'; form-action 'none'\">\n"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    qc_hb_printf(b, "<title>qwen-conform check: %s \xe2\x80\x94 %d checks, %d failed, %d errors"
                 "</title>\n<style>\n%s</style>\n</head>\n<body>\n", overall(rc), r->n, r->n_fail,
                 r->n_error, CSS);
    static const char *what[] = {"every check passed", "a conformance failure",
                                 "an error: the run is incomplete", "nothing was checked"};
    qc_hb_printf(b, "<header class=\"s-%s\"><h1>qwen-conform check: %s</h1><p>exit %d (%s); "
                 "%d checks in %.1f s, started ", overall(rc), overall(rc), rc,
                 rc >= 0 && rc <= 3 ? what[rc] : "?", r->n, r->seconds);
    qc_hb_esc(b, r->started);
    qc_hb_puts(b, "; qwen-conform ");
    qc_hb_esc(b, r->tool_version);
    qc_hb_puts(b, "</p></header>\n<main>\n");
}

/* One runtime's card: verdict, counts, coverage, the unlock table, the --require line. */
static void verdict_card(qc_hbuf *b, const qc_rt_verdict *x) {
    int run = x->pass + x->fail + x->error;
    qc_hb_printf(b, "<div class=\"card v-%s\"><h3><span class=\"badge\">%s</span>", x->verdict,
                 x->verdict);
    qc_hb_esc(b, x->backend);
    qc_hb_printf(b, "</h3>\n<p>%d passed, %d failed%s, %d skipped.", x->pass, x->fail + x->error,
                 x->error ? " (errors included)" : "", x->skip);
    if (x->fail + x->error) {
        qc_hb_puts(b, " <a href=\"#rows\" data-q=\"");
        qc_hb_esc(b, x->backend);
        qc_hb_puts(b, "\" data-v=\"FAIL,ERROR\">Show its failures</a>");
    }
    qc_hb_puts(b, "</p>\n");
    qc_hb_printf(b, "<div class=\"cov\"><span style=\"width:%.1f%%\"></span></div>\n<p>coverage "
                 "<b>%.0f %%</b>", 100.0 * x->coverage, 100.0 * x->coverage);
    if (x->cap_skip)
        qc_hb_printf(b, " (%d of %d checks; %d skipped for capabilities it does not announce)</p>\n",
                     run, run + x->cap_skip, x->cap_skip);
    else
        qc_hb_puts(b, " (no check skipped for a missing capability)</p>\n");
    if (x->n_caps) {
        qc_hb_puts(b, "<table class=\"caps\"><thead><tr><th>capability</th><th>checks it "
                      "unlocks</th><th>what they give</th></tr></thead><tbody>\n");
        char req[256] = "";
        for (int c = 0; c < x->n_caps; c++) {
            qc_hb_puts(b, "<tr><td><code>");
            qc_hb_esc(b, x->caps[c].name);
            qc_hb_printf(b, "</code></td><td class=\"num\">%d</td><td>", x->caps[c].n);
            qc_hb_esc(b, qc_capability_gives(x->caps[c].name));
            qc_hb_puts(b, "</td></tr>\n");
            size_t o = strlen(req);
            if (strcmp(x->caps[c].name, "topk_only")) /* not a capability one can require */
                snprintf(req + o, sizeof req - o, "%s%s", o ? "," : "", x->caps[c].name);
        }
        qc_hb_puts(b, "</tbody></table>\n");
        if (req[0]) {
            qc_hb_puts(b, "<p class=\"req\">CI can insist: <code>--require ");
            qc_hb_esc(b, req);
            qc_hb_puts(b, "</code> (a missing capability FAILS), or <code>--min-coverage PCT</code>"
                          "</p>\n");
        }
    }
    if (x->n_reasons) qc_hb_puts(b, "<p>Skipped for other reasons:</p><ul>\n");
    for (int s = 0; s < x->n_reasons; s++) {
        qc_hb_printf(b, "<li>%d: ", x->reason_n[s]);
        qc_hb_esc(b, x->reasons[s]);
        qc_hb_puts(b, "</li>\n");
    }
    if (x->n_reasons) qc_hb_puts(b, "</ul>\n");
    qc_hb_puts(b, "</div>\n");
}

static void verdicts(qc_hbuf *b, const qc_results *r) {
    qc_hb_puts(b, "<section id=\"verdict\"><h2>Verdict per runtime</h2>\n");
    qc_verdicts v;
    if (qc_verdicts_compute(r, &v)) {
        b->oom = 1;
        return;
    }
    if (v.n == 0) qc_hb_puts(b, "<p class=\"note\">No row names a runtime.</p>\n");
    qc_hb_puts(b, "<div class=\"cards\">\n");
    for (int i = 0; i < v.n; i++) verdict_card(b, &v.v[i]);
    qc_hb_puts(b, "</div>\n</section>\n");
    qc_verdicts_free(&v);
}

static void prov_row(qc_hbuf *b, const char *k, const char *v) {
    qc_hb_printf(b, "<tr><th>%s</th><td>", k);
    qc_hb_esc(b, v);
    qc_hb_puts(b, "</td></tr>\n");
}

static void summary(qc_hbuf *b, const qc_results *r, int rc) {
    qc_hb_puts(b, "<section id=\"summary\"><h2>Summary</h2>\n<div class=\"tiles\">\n");
    qc_hb_printf(b, "<div class=\"tile\"><b>%d</b>checks</div>\n"
                 "<div class=\"tile t-PASS\"><b>%d</b>passed</div>\n"
                 "<div class=\"tile t-FAIL\"><b>%d</b>failed</div>\n"
                 "<div class=\"tile t-SKIP\"><b>%d</b>skipped</div>\n"
                 "<div class=\"tile t-ERROR\"><b>%d</b>errors</div>\n"
                 "<div class=\"tile\"><b>%d</b>exit code</div>\n</div>\n",
                 r->n, r->n_pass, r->n_fail, r->n_skip, r->n_error, rc);
    if (r->stopped_early)
        qc_hb_printf(b, "<p class=\"t-FAIL\">Stopped early: --maxfail %d reached with work left; "
                     "the report holds what ran.</p>\n", r->maxfail);
    if (r->n_warnings) qc_hb_puts(b, "<h4>Warnings</h4><ul>\n");
    for (int i = 0; i < r->n_warnings; i++) {
        qc_hb_puts(b, "<li>");
        qc_hb_esc(b, r->warnings[i]);
        qc_hb_puts(b, "</li>\n");
    }
    if (r->n_warnings) qc_hb_puts(b, "</ul>\n");
    qc_hb_puts(b, "<table class=\"prov\">\n");
    prov_row(b, "tool", r->tool_version);
    prov_row(b, "machine", r->machine);
    prov_row(b, "ISA", r->isa);
    prov_row(b, "policy", r->policy);
    prov_row(b, "started", r->started);
    qc_hb_puts(b, "</table>\n</section>\n");
}

/* The root-cause triage (qc_report_causes.h): per runtime with a failure its likely causes,
 * biggest first, each sentence with a link that shows its rows. Nothing when nothing failed. */
static void causes(qc_hbuf *b, const qc_results *r) {
    qc_causes cz;
    if (qc_causes_compute(r, &cz)) {
        b->oom = 1;
        return;
    }
    if (cz.n) qc_hb_puts(b, "<section id=\"causes\"><h2>Likely causes</h2>\n<p class=\"note\">The "
                            "failing rows of each runtime grouped by their evidence, one sentence "
                            "a cause; each link shows the rows it explains.</p>\n");
    for (int i = 0; i < cz.n; i++) {
        const qc_cause *c = &cz.c[i];
        if (i == 0 || strcmp(c->backend, cz.c[i - 1].backend)) {
            qc_hb_puts(b, i ? "</ol>\n<h3>" : "<h3>");
            qc_hb_esc(b, c->backend);
            qc_hb_puts(b, "</h3>\n<ol class=\"causes\">\n");
        }
        qc_hb_puts(b, "<li><code>");
        qc_hb_esc(b, c->rule);
        qc_hb_puts(b, "</code> ");
        qc_hb_esc(b, c->text);
        qc_hb_puts(b, " \xe2\x80\x94 <a href=\"#rows\" data-rows=\"");
        for (int k = 0; k < c->n_rows; k++) qc_hb_printf(b, "%sr%d", k ? " " : "", c->rows[k]);
        qc_hb_printf(b, "\">its %d row%s</a></li>\n", c->n_rows, c->n_rows == 1 ? "" : "s");
    }
    if (cz.n) qc_hb_puts(b, "</ol>\n</section>\n");
    qc_causes_free(&cz);
}

/* ===================================================================================== */
/* the rows                                                                              */
/* ===================================================================================== */

static void loc_text(qc_hbuf *b, const qc_localisation *l) {
    if (l->kind == QC_LOC_NONE) return;
    qc_hb_printf(b, "<div class=\"loc\">first divergence: %s", qc_loc_kind_str(l->kind));
    if (l->layer >= 0) qc_hb_printf(b, " %d", l->layer);
    if (l->kind == QC_LOC_AT_OR_BEFORE && l->layer_lo >= 0)
        qc_hb_printf(b, " (after layer %d)", l->layer_lo);
    if (l->step >= 0) qc_hb_printf(b, ", decode step %d", l->step);
    if (l->block[0]) {
        qc_hb_puts(b, ", block ");
        qc_hb_esc(b, l->block);
    }
    if (l->has_expert) qc_hb_printf(b, ", expert %d", l->expert_expected);
    if (l->has_expert && l->expert_got >= 0) qc_hb_printf(b, " (got %d)", l->expert_got);
    qc_hb_puts(b, " \xe2\x80\x94 from ");
    qc_hb_esc(b, l->source);
    qc_hb_puts(b, "</div>");
}

static void num_cell(qc_hbuf *b, int has, double v) {
    qc_hb_puts(b, "<td class=\"num\">");
    if (has) qc_hb_num(b, v);
    qc_hb_puts(b, "</td>");
}

static void row_html(qc_hbuf *b, const qc_check_row *w, int i) {
    const char *vs = qc_verdict_str(w->verdict);
    qc_hb_printf(b, "<tr id=\"r%d\" class=\"r-%s\" data-v=\"%s\"><td class=\"num\">%d</td><td "
                 "title=\"", i, vs, vs, i + 1);
    qc_hb_esc(b, w->golden);
    qc_hb_puts(b, "\">");
    qc_hb_esc(b, w->stem);
    qc_hb_puts(b, "/");
    qc_hb_esc(b, w->case_name);
    qc_hb_puts(b, "</td><td>");
    qc_hb_esc(b, w->backend);
    qc_hb_puts(b, "</td><td>");
    qc_hb_esc(b, w->mode);
    qc_hb_puts(b, "</td><td>");
    qc_hb_esc(b, w->check);
    qc_hb_printf(b, "</td><td class=\"vd\">%s</td>", vs);
    num_cell(b, w->has_metrics, w->m.max_abs);
    int ratio = w->has_metrics && !w->m.bitwise && w->m.worst.valid;
    num_cell(b, ratio, w->m.worst.value);
    qc_hb_puts(b, "<td class=\"num\">");
    if (w->has_metrics && w->m.bitwise) qc_hb_puts(b, "bitwise");
    else if (w->has_metrics) {
        qc_hb_num(b, w->tol.atol);
        qc_hb_puts(b, " / ");
        qc_hb_num(b, w->tol.rtol);
    }
    qc_hb_printf(b, "</td><td class=\"num\">%.2f</td><td>", w->seconds);
    qc_hb_esc(b, w->keyline);
    loc_text(b, &w->loc);
    if (w->detail || w->tol_reason[0]) {
        qc_hb_puts(b, "<details><summary>detail</summary><pre>");
        qc_hb_esc(b, w->detail);
        if (w->tol_reason[0]) {
            qc_hb_puts(b, w->detail ? "\n" : "");
            qc_hb_puts(b, "tolerance: ");
            qc_hb_esc(b, w->tol_reason);
        }
        qc_hb_puts(b, "</pre></details>");
    }
    qc_hb_puts(b, "</td></tr>\n");
}

static void rows_table(qc_hbuf *b, const qc_results *r) {
    int cnt[4] = {r->n_pass, r->n_fail, r->n_skip, r->n_error};
    static const char *vn[4] = {"PASS", "FAIL", "SKIP", "ERROR"};
    qc_hb_printf(b, "<section id=\"rows\"><h2>Every check (%d rows)</h2>\n<div class=\"filters\">"
                 "<input id=\"q\" type=\"search\" placeholder=\"filter: words that must all "
                 "appear in the row (e.g. prefill.hidden optimized)\" aria-label=\"filter\">\n",
                 r->n);
    for (int v = 0; v < 4; v++)
        qc_hb_printf(b, "<label><input type=\"checkbox\" class=\"vf\" value=\"%s\" checked> %s "
                     "(%d)</label>\n", vn[v], vn[v], cnt[v]);
    qc_hb_printf(b, "<a href=\"#rows\" data-q=\"\" data-v=\"FAIL,ERROR\">failures only</a> "
                 "<a href=\"#rows\" data-q=\"\" data-v=\"PASS,FAIL,SKIP,ERROR\">all</a> "
                 "<span id=\"shown\">%d of %d rows shown</span></div>\n", r->n, r->n);
    qc_hb_puts(b, "<table id=\"tbl\"><thead><tr><th>#</th><th>golden/case</th><th>backend</th>"
                  "<th>mode</th><th>check</th><th>verdict</th><th>max |diff|</th>"
                  "<th title=\"the worst element's |actual - golden| / (atol + rtol |golden|)\">"
                  "worst / tol</th><th>atol / rtol</th><th>s</th><th>message</th></tr></thead>"
                  "\n<tbody>\n");
    for (int i = 0; i < r->n; i++) row_html(b, &r->rows[i], i);
    qc_hb_puts(b, "</tbody></table>\n</section>\n");
}

char *qc_report_html_string(const qc_results *r) {
    qc_hbuf b = {0};
    int rc = qc_results_exit_code(r);
    head(&b, r, rc);
    verdicts(&b, r);
    summary(&b, r, rc);
    causes(&b, r);
    qc_html_curves(&b, r);
    rows_table(&b, r);
    qc_hb_printf(&b, "</main>\n<script>\n%s</script>\n</body>\n</html>\n", JS);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

qc_status qc_report_html_write(const char *path, const qc_results *r, qc_err *err) {
    char *text = qc_report_html_string(r);
    if (!text) return qc_errf(err, QC_ERR_OOM, "%s: out of memory building the HTML report", path);
    qc_status s = qc_out_write_file(path, text, strlen(text), QC_OUT_TEXT, err);
    free(text);
    return s;
}
