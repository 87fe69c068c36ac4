/* qc_bench_gate.c — what `qwen-conform bench` compares with besides its own backends:
 *   --peer-json F   a `llama-bench -o json` file measured elsewhere (an array of test objects:
 *                   n_prompt, n_gen, n_depth (newer llama-bench; 0 when absent), n_threads,
 *                   avg_ts, samples_ts, and what the run used: model_type, type_k, type_v,
 *                   flash_attn, build_commit, cpu_info). Each test becomes a figure of the
 *                   imported backend "llama-bench" when it matches one of this run's: pp N
 *                   (n_prompt N, n_gen 0, depth 0) = dynamic prefill of N tokens; tg N at
 *                   depth D (n_prompt 0, n_gen N) = N decode steps at depth D; same threads.
 *   --baseline F    an earlier bench --json report: the gate. The noise model (measured on a
 *                   2-vCPU machine at load 8-10: the median of a tiny model's figure swings
 *                   0.4x-2.4x between runs, the per-repetition probes 11-37 GB/s and 72-152
 *                   GFLOP/s, so neither is a location nor a divisor; the fastest run stays
 *                   within 0.90x-1.11x once single-thread repetitions visit every CPU, whose
 *                   speeds differ by up to 30 %): a figure's location is its fastest run
 *                   (tok_s_best; host load only ever slows a run down), bounded below by the
 *                   upper-quartile repetition's fastest run (tok_s_best_lo); it regressed when
 *                   the new fastest < the baseline's bound x (1 - --max-regression %), faster
 *                   when the new bound > the baseline's fastest x (1 + it). A baseline without
 *                   those fields (an older report): its tok_s_max, else median, bounded by its
 *                   median.
 * Bad input exits 2 naming the file and the field. See qc_bench_internal.h.
 */
#include "qc_bench_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "qc_cli.h"
#include "qc_cli_common.h"

/* ===================================================================================== */
/* Reading fields                                                                         */
/* ===================================================================================== */

static cJSON *read_json(const char *path, qc_err *err) {
    char *text = NULL;
    size_t len = 0;
    if (qc_cli_read_file(path, &text, &len, err)) return NULL;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) qc_errf(err, QC_ERR_FORMAT, "%s: not valid JSON", path);
    return j;
}

/* a non-negative integer field (required: absent is an error; else absent gives *out = dflt) */
static qc_status get_count(const cJSON *e, const char *file, int idx, const char *key, int required,
                           int dflt, int *out, qc_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
    if (!v) {
        if (required) return qc_errf(err, QC_ERR_FORMAT, "%s: [%d].%s: missing", file, idx, key);
        *out = dflt;
        return QC_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > (1 << 24) ||
        v->valuedouble != (double)(int)v->valuedouble)
        return qc_errf(err, QC_ERR_FORMAT, "%s: [%d].%s: not a non-negative integer", file, idx, key);
    *out = (int)v->valuedouble;
    return QC_OK;
}

static const char *get_str(const cJSON *e, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ===================================================================================== */
/* --peer-json                                                                            */
/* ===================================================================================== */

/* the samples of one llama-bench test into f (samples_ts, else avg_ts) */
static qc_status peer_samples(const cJSON *e, const char *file, int idx, bench_fig *f, qc_err *err) {
    const cJSON *avg = cJSON_GetObjectItemCaseSensitive(e, "avg_ts");
    if (!cJSON_IsNumber(avg) || !(avg->valuedouble > 0))
        return qc_errf(err, QC_ERR_FORMAT, "%s: [%d].avg_ts: missing or not a positive number", file, idx);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "samples_ts"), *x;
    if (st && !cJSON_IsArray(st))
        return qc_errf(err, QC_ERR_FORMAT, "%s: [%d].samples_ts: not an array", file, idx);
    int k = 0;
    cJSON_ArrayForEach(x, st) {
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0))
            return qc_errf(err, QC_ERR_FORMAT, "%s: [%d].samples_ts[%d]: not a positive number", file, idx, k);
        if (f && f->n < MAX_REPS) f->samples[f->n++] = x->valuedouble;
        k++;
    }
    if (f && !f->n) f->samples[f->n++] = avg->valuedouble;
    return QC_OK;
}

/* one test: validated, then matched; *matched 1 when it became a figure */
static qc_status peer_entry(const cJSON *e, const char *file, int idx, bench_report *R, int peer,
                            int *matched, qc_err *err) {
    *matched = 0;
    if (!cJSON_IsObject(e)) return qc_errf(err, QC_ERR_FORMAT, "%s: [%d]: not an object", file, idx);
    int np = 0, ng = 0, nd = 0, nt = 0;
    qc_status s;
    if ((s = get_count(e, file, idx, "n_prompt", 1, 0, &np, err)) ||
        (s = get_count(e, file, idx, "n_gen", 1, 0, &ng, err)) ||
        (s = get_count(e, file, idx, "n_depth", 0, 0, &nd, err)) ||
        (s = get_count(e, file, idx, "n_threads", 1, 0, &nt, err)) ||
        (s = peer_samples(e, file, idx, NULL, err)))
        return s;
    int mode = np > 0 && ng == 0 ? BM_DYNAMIC : np == 0 && ng > 0 ? BM_DECODE : -1;
    if (mode < 0 || (mode == BM_DYNAMIC && nd != 0)) return QC_OK; /* pg / pp at depth: not ours */
    const int tokens = mode == BM_DYNAMIC ? np : ng, depth = mode == BM_DYNAMIC ? 0 : nd;
    int ours = 0;
    for (int i = 0; i < R->n_fig && !ours; i++) {
        const bench_fig *f = &R->fig[i];
        ours = !R->be[f->backend].peer && f->mode == mode && f->tokens == tokens &&
               f->depth == depth && f->threads == nt;
    }
    if (!ours || bench_find_fig(R, peer, mode, tokens, depth, nt) >= 0) return QC_OK;
    int fi = bench_add_fig(R, peer, mode, tokens, depth, nt, -1);
    if (fi < 0) return QC_OK;
    *matched = 1;
    return peer_samples(e, file, idx, &R->fig[fi], err);
}

int bench_import_peer(const bench_opts *o, bench_report *R, qc_err *err) {
    if (!o->peer_json) return QC_EXIT_PASS;
    const char *file = o->peer_json;
    cJSON *j = read_json(file, err);
    if (!j) return qc_cli_fail(PROG, err);
    if (!cJSON_IsArray(j) || !cJSON_GetArraySize(j)) {
        cJSON_Delete(j);
        qc_errf(err, QC_ERR_FORMAT, "%s: not a non-empty JSON array of llama-bench tests "
                "(llama-bench -o json)", file);
        return qc_cli_fail(PROG, err);
    }
    const int peer = R->n_be++;
    bench_backend *pb = &R->be[peer];
    memset(pb, 0, sizeof *pb);
    snprintf(pb->name, sizeof pb->name, "llama-bench");
    pb->peer = 1;
    const cJSON *e0 = cJSON_GetArrayItem(j, 0);
    const char *mt = get_str(e0, "model_type"), *tk = get_str(e0, "type_k"), *tv = get_str(e0, "type_v"),
               *bc = get_str(e0, "build_commit"), *ci = get_str(e0, "cpu_info");
    const cJSON *fa = cJSON_GetObjectItemCaseSensitive(e0, "flash_attn");
    snprintf(pb->desc, sizeof pb->desc, "llama-bench (imported: %s, KV %s/%s, flash attn %s, build %s)",
             mt ? mt : "?", tk ? tk : "?", tv ? tv : "?",
             cJSON_IsBool(fa) ? (cJSON_IsTrue(fa) ? "on" : "off")
                              : cJSON_IsNumber(fa) ? (fa->valuedouble != 0 ? "on" : "off") : "?",
             bc ? bc : "?");
    snprintf(R->peer_desc, sizeof R->peer_desc, "%s; file %s; cpu %s", pb->desc, file, ci ? ci : "?");
    int idx = 0, n_match = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, j) {
        int matched = 0;
        if (peer_entry(e, file, idx, R, peer, &matched, err)) {
            cJSON_Delete(j);
            return qc_cli_fail(PROG, err);
        }
        n_match += matched;
        idx++;
    }
    cJSON_Delete(j);
    R->peer_unmatched = idx - n_match;
    fprintf(stderr, "%s: %s: %d llama-bench test%s matched this run's figures, %d not\n", PROG, file,
            n_match, n_match == 1 ? "" : "s", R->peer_unmatched);
    return QC_EXIT_PASS;
}

/* ===================================================================================== */
/* --baseline                                                                             */
/* ===================================================================================== */

const char bench_gate_model[] =
    "location = the fastest run of a figure (host load only ever slows a run down), bound below by "
    "the upper-quartile repetition's fastest run; regression when the new fastest < the baseline's "
    "bound x (1 - max_regression)";

/* one baseline entry against every figure of R */
static qc_status gate_entry(const cJSON *e, const char *file, int idx, const bench_opts *o,
                            bench_report *R, qc_err *err) {
    const cJSON *jt = cJSON_GetObjectItemCaseSensitive(e, "tokens"),
                *jv = cJSON_GetObjectItemCaseSensitive(e, "tok_s_median"),
                *jlo = cJSON_GetObjectItemCaseSensitive(e, "tok_s_ci_lo"),
                *jhi = cJSON_GetObjectItemCaseSensitive(e, "tok_s_ci_hi");
    const char *b = get_str(e, "backend"), *m = get_str(e, "mode"), *mod = get_str(e, "model"),
               *dt = get_str(e, "dtype");
    if (!b || !m || !mod || !dt || !cJSON_IsNumber(jt) || !cJSON_IsNumber(jv))
        return qc_errf(err, QC_ERR_FORMAT, "%s: results[%d]: needs backend, model, dtype, mode (strings), "
                       "tokens and tok_s_median (numbers)", file, idx);
    if ((jlo && !cJSON_IsNumber(jlo)) || (jhi && !cJSON_IsNumber(jhi)))
        return qc_errf(err, QC_ERR_FORMAT, "%s: results[%d].tok_s_ci_lo/hi: not numbers", file, idx);
    const cJSON *jb = cJSON_GetObjectItemCaseSensitive(e, "tok_s_best"),
                *jbl = cJSON_GetObjectItemCaseSensitive(e, "tok_s_best_lo"),
                *jmax = cJSON_GetObjectItemCaseSensitive(e, "tok_s_max");
    if ((jb && !cJSON_IsNumber(jb)) || (jbl && !cJSON_IsNumber(jbl)) || (jmax && !cJSON_IsNumber(jmax)))
        return qc_errf(err, QC_ERR_FORMAT, "%s: results[%d].tok_s_best/best_lo/max: not numbers", file, idx);
    int depth = -1, threads = -1;
    qc_status s;
    if ((s = get_count(e, file, idx, "depth", 0, -1, &depth, err)) ||
        (s = get_count(e, file, idx, "threads", 0, -1, &threads, err)))
        return s;
    const double med = jv->valuedouble;
    double lo = jlo ? jlo->valuedouble : med, hi = jhi ? jhi->valuedouble : med;
    lo = lo < med ? lo : med;
    hi = hi > med ? hi : med;
    /* the location: tok_s_best (its bound tok_s_best_lo); a report older than those: its
     * fastest sample (tok_s_max, else the median), bounded below by its median. Neither is
     * ever below the median (in a report bench wrote they are not: a run is at least as fast
     * as its repetition, the upper quartile at least the median), so a baseline whose
     * medians were edited is read by them */
    double best = jb ? jb->valuedouble : jmax ? jmax->valuedouble : med;
    double best_lo = jb && jbl ? jbl->valuedouble : med;
    best = best > med ? best : med;
    best_lo = best_lo > med ? best_lo : med;
    best_lo = best_lo < best ? best_lo : best;
    for (int i = 0; i < R->n_fig; i++) {
        bench_fig *f = &R->fig[i];
        if (!f->n || R->be[f->backend].peer || strcmp(R->be[f->backend].name, b) ||
            strcmp(bench_mode_names[f->mode], m) || strcmp(R->model_name, mod) ||
            strcmp(qc_dtype_str(R->dtype), dt) || f->tokens != (int)jt->valuedouble ||
            (depth >= 0 && f->depth != depth) || (threads >= 0 && f->threads != threads) || f->gated)
            continue;
        f->gated = 1;
        f->b_median = med;
        f->b_lo = lo;
        f->b_hi = hi;
        f->b_best = best;
        f->b_best_lo = best_lo;
        const double k = o->max_regression / 100.0;
        f->verdict = f->best < best_lo * (1.0 - k) ? 1 : f->best_lo > best * (1.0 + k) ? 2 : 0;
        R->gate_compared++;
        R->gate_regressions += f->verdict == 1;
    }
    return QC_OK;
}

int bench_gate(const bench_opts *o, bench_report *R, int *suspects, qc_err *err) {
    *suspects = 0;
    R->gate_compared = R->gate_regressions = 0;
    for (int i = 0; i < R->n_fig; i++) R->fig[i].gated = R->fig[i].verdict = 0;
    if (!o->baseline) return QC_EXIT_PASS;
    cJSON *j = read_json(o->baseline, err);
    if (!j) return qc_cli_fail(PROG, err);
    /* a baseline written before bench reports were versioned has no schema_version: read as 1 */
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(j, "schema_version");
    qc_status s = QC_OK;
    if (sv && (!cJSON_IsNumber(sv) || sv->valuedouble != (double)QC_BENCH_JSON_SCHEMA_VERSION))
        s = qc_errf(err, QC_ERR_FORMAT, "%s: schema_version is not %d (a bench report of another "
                    "format)", o->baseline, QC_BENCH_JSON_SCHEMA_VERSION);
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(j, "results"), *e;
    if (!s && !cJSON_IsArray(res)) s = qc_errf(err, QC_ERR_FORMAT, "%s: no \"results\" array", o->baseline);
    int idx = 0;
    if (!s)
        cJSON_ArrayForEach(e, res) {
            if ((s = gate_entry(e, o->baseline, idx++, o, R, err))) break;
        }
    cJSON_Delete(j);
    if (s) return qc_cli_fail(PROG, err);
    R->gate_done = 1;
    *suspects = R->gate_regressions;
    snprintf(R->gate_verdict, sizeof R->gate_verdict, "%s",
             !R->gate_compared ? "nothing compared" : R->gate_regressions ? "regression" : "pass");
    return QC_EXIT_PASS;
}

void bench_gate_print(const bench_opts *o, const bench_report *R) {
    if (!R->gate_done) return;
    fprintf(stderr, "%s: baseline %s (max regression %.1f%%, noise model: %s%s)\n", PROG,
            o->baseline, o->max_regression, bench_gate_model,
            R->gate_remeasured ? "; suspects re-measured once" : "");
    for (int i = 0; i < R->n_fig; i++) {
        const bench_fig *f = &R->fig[i];
        if (!f->gated) continue;
        fprintf(stderr, "  %-12s %-8s %6d tok @ %5d, %2d thr: best %.2f [%.2f] tok/s vs baseline "
                "%.2f [%.2f]: ratio %.3f (median %.2f vs %.2f)%s\n", R->be[f->backend].name,
                bench_mode_names[f->mode], f->tokens, f->depth, f->threads, f->best, f->best_lo,
                f->b_best, f->b_best_lo, f->b_best > 0 ? f->best / f->b_best : 0.0, f->median,
                f->b_median, f->verdict == 1 ? "  REGRESSION" : f->verdict == 2 ? "  faster" : "");
    }
    if (!R->gate_compared)
        fprintf(stderr, "%s: the baseline %s has no metric matching this run (backend, model, dtype, "
                "mode, tokens, depth, threads)\n", PROG, o->baseline);
    else
        fprintf(stderr, "%s: %d figure%s compared, %d regression%s: %s\n", PROG, R->gate_compared,
                R->gate_compared == 1 ? "" : "s", R->gate_regressions, R->gate_regressions == 1 ? "" : "s",
                R->gate_verdict);
}

int bench_gate_exit(const bench_report *R) {
    if (!R->gate_done) return QC_EXIT_PASS;
    return !R->gate_compared ? QC_EXIT_NOTHING : R->gate_regressions ? QC_EXIT_FAIL : QC_EXIT_PASS;
}
