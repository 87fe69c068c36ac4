/* qc_bench_report.c — the reports of `qwen-conform bench`: the Markdown table (stdout and
 * --markdown), the JSON report (--json) and the SVG bar chart (--svg), each written through
 * qc_outpath. Every report carries the machine (CPU vendor, family / model / stepping, ISA
 * flags, cores, memory), every figure with its spread (min / max, MAD, 95 % interval), the
 * ratio to the --ratio-to backend, the % of its limit, the warnings and the --baseline verdict.
 * See qc_bench_internal.h.
 */
#include "qc_bench_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "qc_cli.h"
#include "qc_cli_common.h"
#include "qc_outpath.h"
#include "qc_report_buf.h"

#ifndef QC_GIT_COMMIT
#define QC_GIT_COMMIT "unknown" /* normally defined by CMake */
#endif
#ifndef QC_VERSION
#define QC_VERSION "unknown"
#endif

/* ===================================================================================== */
/* Helpers                                                                                */
/* ===================================================================================== */

static const char *mode_label(int mi) {
    return mi == BM_STATIC ? "static prefill" : mi == BM_DYNAMIC ? "dynamic prefill" : "decode";
}

/* llama-bench style test name: "static64", "pp512", "tg32@d512" */
static void test_name(const bench_fig *f, char *buf, size_t n) {
    if (f->mode == BM_STATIC) snprintf(buf, n, "static%d", f->tokens);
    else if (f->mode == BM_DYNAMIC) snprintf(buf, n, "pp%d", f->tokens);
    else snprintf(buf, n, "tg%d@d%d", f->tokens, f->depth);
}

static const char *verdict_str(const bench_fig *f) {
    return !f->gated ? "" : f->verdict == 1 ? "REGRESSION" : f->verdict == 2 ? "faster" : "ok";
}

static void threads_str(const bench_report *R, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int t = 0; t < R->n_probe; t++) {
        int w = snprintf(buf + used, n - used, "%s%d", t ? "," : "", R->probe[t].threads);
        if (w > 0 && (size_t)w < n - used) used += (size_t)w;
    }
}

static const char *base_name(const bench_report *R) {
    return R->ratio_base >= 0 ? R->be[R->ratio_base].name : "";
}

/* "cpu (vendor, family / model / stepping), cores, memory, cache" and "flags: ..." */
static void machine_lines(const bench_report *R, char *buf, size_t n, char *flags, size_t nf) {
    const bench_machine_info *mc = &R->mc;
    snprintf(buf, n, "%s (%s, family %d model %d stepping %d by %s), %d cores, %.1f GiB memory, "
             "largest cache %.1f MB", mc->cpu, mc->vendor, mc->family, mc->model,
             mc->stepping, mc->cpuid_src, mc->cores, mc->mem_gib, mc->cache_bytes / 1e6);
    snprintf(flags, nf, "flags: %s", mc->flags[0] ? mc->flags : "none of interest");
}

static void machine_line(const bench_report *R, char *buf, size_t n) {
    char a[512], f[600];
    machine_lines(R, a, sizeof a, f, sizeof f);
    size_t l = strlen(a) < n - 1 ? strlen(a) : n - 1;
    memcpy(buf, a, l);
    buf[l] = '\0';
    if (l + 2 + strlen(f) < n) {
        memcpy(buf + l, "; ", 2);
        memcpy(buf + l + 2, f, strlen(f) + 1);
    }
}

/* ===================================================================================== */
/* Markdown                                                                               */
/* ===================================================================================== */

static void md_header(const bench_report *R, const bench_opts *o, qc_sbuf *b) {
    char th[128], mline[1024];
    threads_str(R, th, sizeof th);
    machine_line(R, mline, sizeof mline);
    qc_sbuf_printf(b, "## qwen-conform bench: %s (%s), threads %s, %s\n\n", R->model_name,
              qc_dtype_str(R->dtype), th, R->isa);
    qc_sbuf_printf(b, "- machine: %s; commit %s; %s\n", mline, QC_GIT_COMMIT, R->date);
    for (int t = 0; t < R->n_probe; t++) {
        const bench_probe *p = &R->probe[t];
        qc_sbuf_printf(b, "- probes (same run, %d threads): streaming read of the %.1f MB of weights %.1f GB/s "
                     "median (max %.1f); FP32 FMA loop %.0f GFLOP/s median (max %.0f)\n",
                  p->threads, R->bytes_per_token / 1e6, p->bw_med, p->bw_max, p->peak_med, p->peak_max);
        if (p->dot_med > 0)
            qc_sbuf_printf(b, "  - BF16 dot loop (vdpbf16ps, the prefill limit of the '+ BF16 dot' "
                           "rows) %.0f GFLOP/s median (max %.0f)\n", p->dot_med, p->dot_max);
        if (p->amx_med > 0)
            qc_sbuf_printf(b, "  - AMX tile loop (tdpbf16ps; the '+ AMX' rows do three per "
                           "multiply-add: their prefill limit is a third) %.0f GFLOP/s median "
                           "(max %.0f)\n", p->amx_med, p->amx_max);
    }
    qc_sbuf_printf(b, "- workload: static prefill %d tokens (one call per token), dynamic prefill (pp) ",
              R->static_prompt);
    for (int i = 0; i < o->n_prompts; i++) qc_sbuf_printf(b, "%s%d", i ? "," : "", o->prompts[i]);
    qc_sbuf_printf(b, " tokens (%s), decode (tg) %d steps at depth ",
              o->max_seq_len ? "chunks of max_seq_len" : "one call each", R->decode);
    for (int i = 0; i < o->n_depths; i++) qc_sbuf_printf(b, "%s%d", i ? "," : "", o->depths[i]);
    qc_sbuf_printf(b, "; reference backend: %d-token prompts, %d decode steps; at least %d repetitions "
                 "(interleaved), %d warm-up, %.2f s measured per figure at least\n",
              R->ref_prompt, R->ref_decode, o->reps, o->warmup, o->min_time);
    qc_sbuf_printf(b, "- limits: static / decode = bandwidth / %.2f MB of weights per token; dynamic = FMA "
                 "peak / %.3f GFLOP per token (pp%d)\n",
              R->bytes_per_token / 1e6, R->flops_pp[0] / 1e9, o->prompts[0]);
    if (R->wt.valid) { /* total vs active weights, truncation (qc_bench_moe.c) */
        char wl[1024];
        qc_sbuf_printf(b, "%s\n", bench_moe_markdown(&R->wt, R->probe[0].bw_med, wl, sizeof wl));
    }
    if (R->peer_desc[0])
        qc_sbuf_printf(b, "- peer: %s (%d of its tests match no figure of this run)\n", R->peer_desc,
                  R->peer_unmatched);
    qc_sbuf_printf(b, "- spread: min / max of the samples, MAD = median absolute deviation, 95%% = "
                 "bootstrap interval of the median; ratio = median / %s's median (interval from "
                 "both intervals)\n\n", R->ratio_base >= 0 ? base_name(R) : "(no --ratio-to base)");
}

static void markdown(const bench_report *R, const bench_opts *o, qc_sbuf *b) {
    md_header(R, o, b);
    qc_sbuf_printf(b, "| backend | dtype | mode | tokens | depth | threads | tok/s median | tok/s min | tok/s max "
                 "| MAD | 95%% interval | vs %s | limit tok/s | %% of limit |%s\n",
              R->ratio_base >= 0 ? base_name(R) : "base", R->gate_done ? " baseline |" : "");
    qc_sbuf_printf(b, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|%s\n",
              R->gate_done ? "---|" : "");
    for (int i = 0; i < R->n_fig; i++) {
        const bench_fig *f = &R->fig[i];
        if (!f->n) continue;
        char ratio[64] = "-", gate[96] = "";
        if (f->backend == R->ratio_base) snprintf(ratio, sizeof ratio, "1.00x");
        else if (f->ratio > 0) snprintf(ratio, sizeof ratio, "%.2fx [%.2f, %.2f]", f->ratio, f->ratio_lo, f->ratio_hi);
        if (R->gate_done)
            snprintf(gate, sizeof gate, " %s |", f->gated ? verdict_str(f) : "-");
        qc_sbuf_printf(b, "| %s | %s | %s | %d | %d | %d | %.2f | %.2f | %.2f | %.2f | [%.2f, %.2f] | %s | ",
                  bench_fig_desc(R, f), qc_dtype_str(R->dtype), mode_label(f->mode), f->tokens, f->depth,
                  f->threads, f->median, f->min, f->max, f->mad, f->lo, f->hi, ratio);
        if (f->limit > 0)
            qc_sbuf_printf(b, "%.1f (%s) | %.0f%% |%s\n", f->limit, bench_limit_name(R, f),
                      100.0 * f->median / f->limit, gate);
        else
            qc_sbuf_printf(b, "- | - |%s\n", gate);
    }
    if (R->wt.truncated) { /* what the truncated run implies (qc_bench_moe.c), labelled */
        qc_sbuf_printf(b, "\n### Whole model (%d layers), implied -- NOT measured\n\n", R->wt.layers_full);
        for (int i = 0; i < R->n_fig; i++) {
            const bench_fig *f = &R->fig[i];
            if (f->n && f->mode == BM_DECODE)
                qc_sbuf_printf(b, "- %s decode %d @ %d, %d threads: measured %.2f tok/s on %d layers -> "
                             "implied %.2f tok/s for the whole model (same %% of the roofline)\n",
                          bench_fig_desc(R, f), f->tokens, f->depth, f->threads, f->median,
                          R->wt.layers_run, bench_moe_implied_tok_s(&R->wt, f->median));
        }
    }
    char *ops = bench_profile_markdown(); /* --profile-ops (qc_bench_profile.c) */
    if (ops) qc_sbuf_printf(b, "%s", ops);
    free(ops);
    qc_sbuf_printf(b, "\n### Warnings\n\n");
    if (!R->n_warn) qc_sbuf_printf(b, "- none\n");
    for (int w = 0; w < R->n_warn; w++) qc_sbuf_printf(b, "- %s\n", R->warn[w]);
    if (R->gate_done) {
        qc_sbuf_printf(b, "\n### Gate: %s\n\n", R->gate_verdict);
        qc_sbuf_printf(b, "- baseline %s, max regression %.1f%%; noise model: %s%s; %d figures compared, "
                     "%d regressions\n", o->baseline, o->max_regression, bench_gate_model,
                  R->gate_remeasured ? "; the suspected regressions were re-measured once (twice the "
                                       "repetitions, samples pooled)" : "",
                  R->gate_compared, R->gate_regressions);
        for (int i = 0; i < R->n_fig; i++) {
            const bench_fig *f = &R->fig[i];
            if (f->gated && f->verdict == 1)
                qc_sbuf_printf(b, "- REGRESSION: %s %s %d tok @ %d, %d threads: best %.2f [%.2f] tok/s vs "
                             "baseline %.2f [%.2f] (median %.2f vs %.2f)\n", R->be[f->backend].name,
                          bench_mode_names[f->mode], f->tokens, f->depth, f->threads, f->best, f->best_lo,
                          f->b_best, f->b_best_lo, f->median, f->b_median);
        }
    }
    qc_sbuf_printf(b, "\n");
}

/* ===================================================================================== */
/* JSON                                                                                   */
/* ===================================================================================== */

static cJSON *int_array(const int *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static void json_head(cJSON *j, const bench_report *R, const bench_opts *o) {
    /* bumped when a field is renamed or removed (fields are only ever added within one) */
    cJSON_AddNumberToObject(j, "schema_version", QC_BENCH_JSON_SCHEMA_VERSION);
    cJSON_AddStringToObject(j, "tool", "qwen-conform bench");
    cJSON_AddStringToObject(j, "version", QC_VERSION);
    cJSON_AddStringToObject(j, "commit", QC_GIT_COMMIT);
    cJSON_AddStringToObject(j, "date", R->date);
    const bench_machine_info *m = &R->mc;
    cJSON *mc = cJSON_AddObjectToObject(j, "machine");
    cJSON_AddStringToObject(mc, "cpu", m->cpu);
    cJSON_AddStringToObject(mc, "vendor", m->vendor);
    cJSON_AddNumberToObject(mc, "family", m->family);
    cJSON_AddNumberToObject(mc, "model", m->model);
    cJSON_AddNumberToObject(mc, "stepping", m->stepping);
    cJSON_AddStringToObject(mc, "id_source", m->cpuid_src);
    cJSON_AddStringToObject(mc, "flags", m->flags);
    cJSON_AddNumberToObject(mc, "cores", m->cores);
    cJSON_AddNumberToObject(mc, "memory_gib", m->mem_gib);
    cJSON_AddNumberToObject(mc, "largest_cache_bytes", m->cache_bytes);
    cJSON_AddStringToObject(mc, "isa", R->isa);
    cJSON_AddNumberToObject(mc, "threads", R->probe[0].threads);
    int th[MAX_LIST];
    for (int t = 0; t < R->n_probe; t++) th[t] = R->probe[t].threads;
    cJSON_AddItemToObject(mc, "threads_list", int_array(th, R->n_probe));
    cJSON *cf = cJSON_AddObjectToObject(j, "config");
    cJSON_AddStringToObject(cf, "model", R->model_name);
    cJSON_AddStringToObject(cf, "dtype", qc_dtype_str(R->dtype));
    cJSON_AddNumberToObject(cf, "static_prompt", R->static_prompt);
    cJSON_AddNumberToObject(cf, "prompt", o->prompts[0]);
    cJSON_AddItemToObject(cf, "prompts", int_array(o->prompts, o->n_prompts));
    cJSON_AddItemToObject(cf, "depths", int_array(o->depths, o->n_depths));
    cJSON_AddNumberToObject(cf, "max_seq_len", R->max_seq_len);
    cJSON_AddNumberToObject(cf, "decode", R->decode);
    cJSON_AddNumberToObject(cf, "ref_prompt", R->ref_prompt);
    cJSON_AddNumberToObject(cf, "ref_decode", R->ref_decode);
    cJSON_AddNumberToObject(cf, "reps", o->reps);
    cJSON_AddNumberToObject(cf, "warmup", o->warmup);
    cJSON_AddNumberToObject(cf, "min_time_s", o->min_time);
    cJSON_AddStringToObject(cf, "ratio_to", base_name(R));
    cJSON_AddNumberToObject(cf, "weight_bytes_per_token", R->bytes_per_token);
    cJSON_AddNumberToObject(cf, "flops_per_prefill_token", R->flops_pp[0]);
    if (R->wt.valid) bench_moe_json(cf, &R->wt, R->probe[0].bw_med); /* total vs active */
    cJSON *pr = cJSON_AddObjectToObject(j, "probes");
    cJSON_AddItemToObject(pr, "bandwidth_gbs", cJSON_CreateDoubleArray(R->probe[0].bw, R->probe[0].n));
    cJSON_AddItemToObject(pr, "fma_peak_gflops", cJSON_CreateDoubleArray(R->probe[0].peak, R->probe[0].n));
    cJSON_AddNumberToObject(pr, "bandwidth_gbs_median", R->probe[0].bw_med);
    cJSON_AddNumberToObject(pr, "fma_peak_gflops_median", R->probe[0].peak_med);
    cJSON *pt = cJSON_AddArrayToObject(pr, "per_threads");
    for (int t = 0; t < R->n_probe; t++) {
        const bench_probe *p = &R->probe[t];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "threads", p->threads);
        cJSON_AddItemToObject(e, "bandwidth_gbs", cJSON_CreateDoubleArray(p->bw, p->n));
        cJSON_AddItemToObject(e, "fma_peak_gflops", cJSON_CreateDoubleArray(p->peak, p->n));
        cJSON_AddNumberToObject(e, "bandwidth_gbs_median", p->bw_med);
        cJSON_AddNumberToObject(e, "fma_peak_gflops_median", p->peak_med);
        if (p->dot_med > 0) {
            cJSON_AddItemToObject(e, "bf16_dot_peak_gflops", cJSON_CreateDoubleArray(p->dot, p->n));
            cJSON_AddNumberToObject(e, "bf16_dot_peak_gflops_median", p->dot_med);
        }
        if (p->amx_med > 0) {
            cJSON_AddItemToObject(e, "amx_peak_gflops", cJSON_CreateDoubleArray(p->amx, p->n));
            cJSON_AddNumberToObject(e, "amx_peak_gflops_median", p->amx_med);
        }
        cJSON_AddItemToArray(pt, e);
    }
    if (R->peer_desc[0]) {
        cJSON *pe = cJSON_AddObjectToObject(j, "peer");
        cJSON_AddStringToObject(pe, "file", o->peer_json);
        cJSON_AddStringToObject(pe, "describe", R->peer_desc);
        cJSON_AddNumberToObject(pe, "unmatched_tests", R->peer_unmatched);
    }
}

static cJSON *json_fig(const bench_report *R, const bench_fig *f) {
    char tn[64];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "backend", R->be[f->backend].name);
    cJSON_AddStringToObject(e, "describe", bench_fig_desc(R, f));
    if (R->be[f->backend].peer) cJSON_AddBoolToObject(e, "imported", 1);
    cJSON_AddStringToObject(e, "model", R->model_name);
    cJSON_AddStringToObject(e, "dtype", qc_dtype_str(R->dtype));
    cJSON_AddStringToObject(e, "mode", bench_mode_names[f->mode]);
    test_name(f, tn, sizeof tn);
    cJSON_AddStringToObject(e, "test", tn);
    cJSON_AddNumberToObject(e, "tokens", f->tokens);
    cJSON_AddNumberToObject(e, "depth", f->depth);
    cJSON_AddNumberToObject(e, "threads", f->threads);
    cJSON_AddNumberToObject(e, "tok_s_median", f->median);
    cJSON_AddNumberToObject(e, "tok_s_min", f->min);
    cJSON_AddNumberToObject(e, "tok_s_max", f->max);
    cJSON_AddNumberToObject(e, "tok_s_mad", f->mad);
    cJSON_AddNumberToObject(e, "tok_s_ci_lo", f->lo);
    cJSON_AddNumberToObject(e, "tok_s_ci_hi", f->hi);
    cJSON_AddItemToObject(e, "tok_s_samples", cJSON_CreateDoubleArray(f->samples, f->n));
    if (!R->be[f->backend].peer) {
        cJSON_AddItemToObject(e, "tok_s_fastest_run_samples", cJSON_CreateDoubleArray(f->fast, f->n));
        cJSON_AddNumberToObject(e, "run_queue_wait_pct", f->secs > 0 ? 100 * f->wait_secs / f->secs : 0);
    }
    cJSON_AddNumberToObject(e, "tok_s_best", f->best);
    cJSON_AddNumberToObject(e, "tok_s_best_lo", f->best_lo);
    cJSON_AddNumberToObject(e, "seconds_measured", f->secs);
    if (f->ratio > 0 || f->backend == R->ratio_base) {
        const int self = f->backend == R->ratio_base;
        cJSON_AddStringToObject(e, "ratio_to", base_name(R));
        cJSON_AddNumberToObject(e, "ratio", self ? 1.0 : f->ratio);
        cJSON_AddNumberToObject(e, "ratio_lo", self ? 1.0 : f->ratio_lo);
        cJSON_AddNumberToObject(e, "ratio_hi", self ? 1.0 : f->ratio_hi);
        if (!self && R->be[R->ratio_base].isref) cJSON_AddNumberToObject(e, "ratio_vs_reference", f->ratio);
    }
    cJSON_AddStringToObject(e, "limit", f->mode == BM_DYNAMIC ? "fma_peak" : "bandwidth");
    cJSON_AddNumberToObject(e, "limit_tok_s", f->limit);
    cJSON_AddNumberToObject(e, "pct_of_limit", f->limit > 0 ? 100.0 * f->median / f->limit : 0);
    if (f->mode == BM_DECODE && R->wt.truncated) /* labelled: not measured */
        cJSON_AddNumberToObject(e, "implied_whole_model_tok_s", bench_moe_implied_tok_s(&R->wt, f->median));
    if (f->gated) {
        cJSON *g = cJSON_AddObjectToObject(e, "baseline");
        cJSON_AddNumberToObject(g, "tok_s_median", f->b_median);
        cJSON_AddNumberToObject(g, "tok_s_ci_lo", f->b_lo);
        cJSON_AddNumberToObject(g, "tok_s_ci_hi", f->b_hi);
        cJSON_AddNumberToObject(g, "tok_s_best", f->b_best);
        cJSON_AddNumberToObject(g, "tok_s_best_lo", f->b_best_lo);
        cJSON_AddNumberToObject(g, "ratio_best", f->b_best > 0 ? f->best / f->b_best : 0);
        cJSON_AddStringToObject(g, "verdict", verdict_str(f));
    }
    return e;
}

static cJSON *json_report(const bench_report *R, const bench_opts *o) {
    cJSON *j = cJSON_CreateObject();
    json_head(j, R, o);
    cJSON *res = cJSON_AddArrayToObject(j, "results");
    for (int i = 0; i < R->n_fig; i++)
        if (R->fig[i].n) cJSON_AddItemToArray(res, json_fig(R, &R->fig[i]));
    bench_profile_json(j); /* --profile-ops */
    cJSON *w = cJSON_AddArrayToObject(j, "warnings");
    for (int i = 0; i < R->n_warn; i++) cJSON_AddItemToArray(w, cJSON_CreateString(R->warn[i]));
    if (R->gate_done) {
        cJSON *g = cJSON_AddObjectToObject(j, "gate");
        cJSON_AddStringToObject(g, "baseline", o->baseline);
        cJSON_AddNumberToObject(g, "max_regression_pct", o->max_regression);
        cJSON_AddStringToObject(g, "noise_model", bench_gate_model);
        cJSON_AddStringToObject(g, "location", "fastest_run");
        cJSON_AddStringToObject(g, "location_bound", "upper_quartile_repetition");
        cJSON_AddStringToObject(g, "normalisation", "none (single-thread repetitions pinned to each "
                                "CPU in turn; probes too noisy under load to divide by)");
        cJSON_AddNumberToObject(g, "compared", R->gate_compared);
        cJSON_AddNumberToObject(g, "regressions", R->gate_regressions);
        cJSON_AddBoolToObject(g, "remeasured", R->gate_remeasured);
        cJSON_AddStringToObject(g, "verdict", R->gate_verdict);
    }
    return j;
}

/* ===================================================================================== */
/* SVG                                                                                    */
/* ===================================================================================== */

static void svg_escape(qc_sbuf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '<') qc_sbuf_printf(b, "&lt;");
        else if (*s == '>') qc_sbuf_printf(b, "&gt;");
        else if (*s == '&') qc_sbuf_printf(b, "&amp;");
        else qc_sbuf_printf(b, "%c", *s);
    }
}

static void svg_text(qc_sbuf *b, int x, int y, const char *attrs, const char *s) {
    qc_sbuf_printf(b, "<text x=\"%d\" y=\"%d\" %s>", x, y, attrs);
    svg_escape(b, s);
    qc_sbuf_printf(b, "</text>\n");
}

/* horizontal bars (log scale) of the median tokens/s per figure; a line from min to max */
static void svg_chart(const bench_report *R, qc_sbuf *b) {
    int rows = 0;
    double vmax = 1, vmin = 1e30;
    for (int i = 0; i < R->n_fig; i++) {
        const bench_fig *f = &R->fig[i];
        if (!f->n) continue;
        rows++;
        vmax = f->max > vmax ? f->max : vmax;
        if (f->min > 0 && f->min < vmin) vmin = f->min;
    }
    if (vmin > vmax) vmin = 1;
    char title[512], sub[600], sub2[900], th[128], mline[512], flags[600];
    threads_str(R, th, sizeof th);
    machine_lines(R, mline, sizeof mline, flags, sizeof flags);
    snprintf(title, sizeof title, "qwen-conform bench: %s (%s), threads %s, %s", R->model_name,
             qc_dtype_str(R->dtype), th, R->isa);
    snprintf(sub, sizeof sub, "%s", mline);
    snprintf(sub2, sizeof sub2, "%s; commit %s; %s", flags, QC_GIT_COMMIT, R->date);
    const double lo = floor(log10(vmin > 0 ? vmin : 0.01)), hi = ceil(log10(vmax)) + (vmax == 1);
    /* the width fits the title (16 px bold ~ 9.5 px a character) and the subtitle (12 px) */
    int W = 1200, left = 380, right = 360, bar = 22, gap = 10, top = 112;
    if ((int)(strlen(title) * 9.5) + 20 > W) W = (int)(strlen(title) * 9.5) + 20;
    if ((int)(strlen(sub) * 6.6) + 20 > W) W = (int)(strlen(sub) * 6.6) + 20;
    if ((int)(strlen(sub2) * 6.6) + 20 > W) W = (int)(strlen(sub2) * 6.6) + 20;
    const int H = top + rows * (bar + gap) + 50 + 16 * (3 * R->n_warn + (R->gate_done ? 1 : 0));
    const double span = (double)(W - left - right);
#define XPOS(v) (left + span * (log10(v) - lo) / (hi - lo))
    qc_sbuf_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                 "font-family=\"sans-serif\" font-size=\"13\">\n", W, H);
    qc_sbuf_printf(b, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    svg_text(b, 10, 22, "font-size=\"16\" font-weight=\"bold\"", title);
    svg_text(b, 10, 42, "font-size=\"12\" fill=\"#555\"", sub);
    svg_text(b, 10, 60, "font-size=\"12\" fill=\"#555\"", sub2);
    svg_text(b, 10, 80, "font-size=\"12\" fill=\"#555\"",
             "tokens/s, log scale: bar = median [95% interval], black line = min..max of the "
             "repetitions; ratio = median / the --ratio-to backend's [interval]");
    for (double d = lo; d <= hi + 1e-9; d += 1) {
        double x = left + span * (d - lo) / (hi - lo);
        qc_sbuf_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n", x, top - 5, x,
                  top + rows * (bar + gap));
        qc_sbuf_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%g</text>\n", x,
                  top + rows * (bar + gap) + 18, pow(10, d));
    }
    static const char *colors[N_MODES] = {"#8da0cb", "#66c2a5", "#fc8d62"};
    int row = 0;
    for (int i = 0; i < R->n_fig; i++) {
        const bench_fig *f = &R->fig[i];
        if (!f->n) continue;
        int y = top + row * (bar + gap);
        double x1 = f->median > 0 ? XPOS(f->median) : left;
        x1 = x1 < left ? left : x1;
        char tn[64], label[300];
        test_name(f, tn, sizeof tn);
        snprintf(label, sizeof label, "%s %s, %d thr", R->be[f->backend].name, tn, f->threads);
        qc_sbuf_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 8, y + bar - 6);
        svg_escape(b, label);
        qc_sbuf_printf(b, "</text>\n");
        qc_sbuf_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", left, y,
                  x1 - left, bar, colors[f->mode]);
        if (f->min > 0 && f->max > 0) {
            double xa = XPOS(f->min), xb = XPOS(f->max);
            xa = xa < left ? left : xa;
            qc_sbuf_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\" "
                         "stroke-width=\"2\"/>\n", xa, y + bar / 2, xb, y + bar / 2);
        }
        char rt[192] = "";
        if (f->ratio > 0)
            snprintf(rt, sizeof rt, " [%.2f..%.2f]; %.2fx %s [%.2f, %.2f]", f->lo, f->hi, f->ratio,
                     base_name(R), f->ratio_lo, f->ratio_hi);
        else
            snprintf(rt, sizeof rt, " [%.2f..%.2f]", f->lo, f->hi);
        qc_sbuf_printf(b, "<text x=\"%.1f\" y=\"%d\">%.2f", x1 + 4, y + bar - 6, f->median);
        svg_escape(b, rt);
        qc_sbuf_printf(b, "%s</text>\n", f->gated && f->verdict == 1 ? " REGRESSION" : "");
        row++;
    }
#undef XPOS
    int y = top + rows * (bar + gap) + 40;
    if (R->gate_done) {
        char g[128];
        snprintf(g, sizeof g, "gate vs baseline: %s (%d compared, %d regressions)", R->gate_verdict,
                 R->gate_compared, R->gate_regressions);
        svg_text(b, 10, y, "font-size=\"12\" font-weight=\"bold\"", g);
        y += 16;
    }
    /* warnings wrapped at the chart's width (12 px ~ 6.6 px a character) */
    const size_t wrap = (size_t)((W - 20) / 6.6);
    for (int w = 0; w < R->n_warn; w++) {
        char line[400];
        snprintf(line, sizeof line, "warning: %s", R->warn[w]);
        for (char *p = line; *p;) {
            size_t n = strlen(p);
            if (n > wrap) {
                n = wrap;
                while (n > wrap / 2 && p[n] != ' ') n--;
            }
            char save = p[n];
            p[n] = '\0';
            svg_text(b, 10, y, "font-size=\"12\" fill=\"#b00\"", p);
            p[n] = save;
            p += n;
            while (*p == ' ') p++;
            y += 16;
        }
    }
    qc_sbuf_printf(b, "</svg>\n");
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
    qc_sbuf md = {0};
    markdown(R, o, &md);
    fwrite(md.s, 1, md.n, stdout);
    fflush(stdout);
    if (o->markdown && qc_out_write_file(o->markdown, md.s, md.n, QC_OUT_TEXT, err))
        rc = qc_cli_fail(PROG, err);
    free(md.s);
    if (!rc && o->json) rc = write_json(R, o, err);
    if (!rc && o->svg) {
        qc_sbuf sv = {0};
        svg_chart(R, &sv);
        if (qc_out_write_file(o->svg, sv.s, sv.n, QC_OUT_TEXT, err)) rc = qc_cli_fail(PROG, err);
        free(sv.s);
    }
    return rc;
}
