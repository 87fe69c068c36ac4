/* qc_check_engine.c — the check engine: runs every selected case on the backends under test.
 *
 * Flow per golden file: open (read-only) -> select cases (--filter, --shard) -> load the model
 * the golden names -> model_hash -> create the backends (the slots: the registry's built-in
 * backends, enumerated from its table, a threaded one at N threads with a twin at another
 * thread count for the bitwise thread check; the runtime under test) -> per case, per backend, per mode: run
 * (teacher-forced, hidden states captured through the trace hook), compare every tensor with
 * the golden under the policy, run the invariants -> cross-mode / cross-backend checks ->
 * optional dump of the actual tensors in the golden layout.
 */

#include "qc_check_internal.h"
#include "qc_check_http.h"
#include "qc_check_topk.h"

#include "qc_cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>

#include "qc/qc_memplan.h"
#include "qc/qc_state.h"
#include "qc_remote.h"
#include "qc_report_console.h"

/* ===================================================================================== */
/* running one case                                                                      */
/* ===================================================================================== */

/* ===================================================================================== */
/* per case                                                                              */
/* ===================================================================================== */

/* The mode column of (backend, m): an http: runtime has the one mode "served" (NULL for m > 0). */
static const char *mode_col(const ck_ctx *c, const char *backend, qc_mode m) {
    if (!(c->srv || c->o->ext.kind == QC_RT_HTTP) || strcmp(backend, c->o->ext.name))
        return qc_mode_str(m);
    return m == 0 ? CK_SERVED : NULL;
}

static int mode_selected(ck_ctx *c, const char *case_name, const char *backend, qc_mode m) {
    const char *mn = mode_col(c, backend, m);
    if (!mn || (strcmp(mn, CK_SERVED) && !(c->o->modes & (1 << m)))) return 0;
    if (c->o->select && !c->o->select(c->o->select_user, c->stem, case_name, backend, mn))
        return 0; /* --rerun-failed */
    if (!c->o->has_filter) return 1;
    char id[512];
    snprintf(id, sizeof id, "%s/%s/%s/%s", c->stem, case_name, backend, mn);
    return regexec(&c->o->filter, id, 0, NULL, 0) == 0;
}

/* A comparison of two complete runs (logits + states). */
static void compare_runs(ck_ctx *c, const qc_golden_case *gc, const qc_golden_case *a,
                         const qc_golden_case *b, const char *backend, const char *mode,
                         const char *check, int bitwise, int vs_golden, const char *extra) {
    ck_partlist *pl = calloc(1, sizeof *pl);
    if (!pl) return;
    ck_add_all_parts(pl, c->cfg, a, b);
    cmp_spec s = {.case_name = gc->name, .backend = backend, .mode = mode, .check = check,
                  .bitwise = bitwise, .vs_golden = vs_golden, .extra = extra,
                  .logits_stats = vs_golden};
    int bi = ck_slot_of(c, backend);
    qc_mode mm;
    if (vs_golden && qc_mode_parse(mode, &mm, NULL) == QC_OK) s.dump_file = c->slot[bi].dump_path[mm];
    ck_compare_parts(c, &s, pl);
    free(pl);
}

/* The main runs of one slot on the case being checked (an array of them: one per slot). */
typedef struct {
    int have[N_MODES];            /* 1: act filled */
    qc_golden_case act[N_MODES];  /* main results */
} case_runs;

/* The hidden state (L+1 indices) of one decode step of a run: the case run again with the trace
 * hook capturing only that position. */
static qc_status decode_hidden(ck_ctx *c, qc_backend *be, const qc_golden_case *gc, qc_mode mode,
                               int step, float *dst, qc_err *err) {
    const qc_config *cfg = c->cfg;
    const int L = cfg->n_layers, H = cfg->hidden_size;
    ck_hcap h = {0};
    h.hidden = dst;
    h.seen = calloc((size_t)L + 1, 1);
    if (!h.seen) return qc_errf(err, QC_ERR_OOM, "out of memory");
    h.L1 = L + 1, h.T = 1, h.H = H, h.lo = gc->start_pos + gc->n_tokens + step;
    qc_golden_case tmp;
    qc_status s = ck_run_one(be, gc, mode, c->o, 0, &h, &tmp, err);
    if (!s) qc_case_free(cfg, &tmp);
    int seen = 0;
    for (int i = 0; i <= L; i++) seen += h.seen[i];
    free(h.seen);
    if (!s && seen != L + 1)
        s = qc_errf(err, QC_ERR_RUNTIME, "%s: %d of %d hidden states at the decode step", be->name,
                    seen, L + 1);
    return s;
}

/* Decode-only failures with hidden states: the first divergent layer at the first failing
 * decode step, against the reference backend run on the same inputs (the golden holds no
 * decode hidden states). NULL when not applicable; else malloc'd text. */
static char *decode_hidden_localisation(ck_ctx *c, ck_backends *bs, int bi, const qc_golden_case *gc,
                                        qc_mode mode, const qc_golden_case *act,
                                        qc_localisation *where) {
    qc_backend *be = bs->be[bi], *ref = bs->cmp;
    const char *bname = c->slot[bi].name, *mname = qc_mode_str(mode);
    if (!ref || ref == be || bi == c->ref_slot || gc->n_decode == 0 ||
        !(be->caps & QC_BE_CAP_HIDDEN))
        return NULL;
    if (ck_first_bad_logits_row(c, gc, act, bname, mname, 1) >= 0) return NULL;
    int step = ck_first_bad_logits_row(c, gc, act, bname, mname, 0);
    if (step < 0) return NULL;
    const int L = c->cfg->n_layers, H = c->cfg->hidden_size;
    float *a = calloc((size_t)(L + 1) * H, sizeof(float)), *r = calloc((size_t)(L + 1) * H, sizeof(float));
    qc_err err;
    qc_err_clear(&err);
    char *out = NULL;
    if (!a || !r) goto done;
    if (decode_hidden(c, be, gc, mode, step, a, &err) || decode_hidden(c, ref, gc, mode, step, r, &err)) {
        out = qc_strdup_printf("Hidden states at decode step %d could not be compared: %s", step,
                               err.msg);
        goto done;
    }
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, gc->name);
    qc_tol t;
    qc_policy_lookup(c->pol, QC_TC_HIDDEN, bname, mname, "decode.hidden", case_id, "decode/hidden",
                     &t, NULL);
    int first = -1;
    char curve[2048];
    size_t o = 0;
    curve[0] = 0;
    for (int i = 0; i <= L; i++) {
        qc_metrics m;
        qc_metrics_init(&m, 0);
        qc_tdesc d;
        int64_t sh[2] = {1, H};
        qc_tdesc_init(&d, QC_TC_HIDDEN, "decode/hidden", 2, sh);
        d.atol = t.atol, d.rtol = t.rtol;
        qc_metrics_add(&m, &d, a + (size_t)i * H, r + (size_t)i * H);
        int ok = qc_metrics_close(&m);
        if (!ok && first < 0) first = i;
        if (o < sizeof curve)
            o += (size_t)snprintf(curve + o, sizeof curve - o, "%s[%d] %.2g%s", i ? ", " : "", i,
                                  m.n_nonfinite ? INFINITY : m.max_abs, ok ? "" : "!");
    }
    where->kind = first < 0 ? QC_LOC_AFTER_NORM : first == 0 ? QC_LOC_EMBEDDINGS
                  : first == L ? QC_LOC_LAST_OR_NORM : QC_LOC_LAYER;
    where->layer = first <= 0 ? -1 : first - 1;
    where->step = step;
    snprintf(where->source, sizeof where->source, "decode_hidden");
    if (first < 0)
        out = qc_strdup_printf("At decode step %d every hidden state agrees with the reference "
                               "backend (the divergence is after the final norm)\nPer-layer max "
                               "|diff| vs reference: %s", step, curve);
    else if (first == 0)
        out = qc_strdup_printf("At decode step %d the first divergent layer (vs the reference "
                               "backend on the same inputs) is the embeddings (hidden[0])\n"
                               "Per-layer max |diff| vs reference (! = over tolerance): %s", step,
                               curve);
    else
        out = qc_strdup_printf("At decode step %d the first divergent layer (vs the reference "
                               "backend on the same inputs) is layer %d (%s) (hidden[%d]%s)\n"
                               "Per-layer max |diff| vs reference (! = over tolerance): %s", step,
                               first - 1, ck_layer_kind(c->cfg, first - 1), first,
                               first == L ? ", after the final norm" : " is its output", curve);
done:
    free(a);
    free(r);
    return out;
}

/* The main run of one (backend, mode): vs the golden, localisation, garbage / slots, threads. */
static void check_mode(ck_ctx *c, ck_backends *bs, int bi, const qc_golden_case *gc, qc_mode mode,
                       case_runs *cr) {
    const qc_config *cfg = c->cfg;
    const int L = cfg->n_layers, T = gc->n_tokens, H = cfg->hidden_size;
    qc_backend *be = bs->be[bi];
    const char *bname = c->slot[bi].name, *mname = qc_mode_str(mode);
    qc_err err;
    qc_err_clear(&err);
    if (be->caps & QC_BE_CAP_TOPK_ONLY) { /* top-k rows only, the rest SKIPPED (qc_check_topk.c) */
        cr[bi].have[mode] = ck_topk_runtime_mode(c, be, gc, mode, bname, &cr[bi].act[mode]);
        return;
    }
    ck_hcap hc = {0};
    int want_hidden = gc->prefill_hidden != NULL && (be->caps & QC_BE_CAP_HIDDEN) && !c->o->topk;
    ck_moecap mc; /* moe_in (MoE) / mlp_in (dense), router_topk traces (qc_check_router.c) */
    int want_moe = (qc_cfg_is_moe(cfg) || gc->prefill_moe_in) && /* dense: mlp_in */
                   (be->caps & (QC_BE_CAP_HIDDEN | QC_BE_CAP_ROUTER)) &&
                   !c->o->topk && ck_moecap_init(&mc, cfg, gc) == QC_OK;
    if (want_moe) hc.moe = &mc;
    if (want_hidden) {
        hc.hidden = calloc((size_t)(L + 1) * T * H, sizeof(float));
        hc.seen = calloc((size_t)(L + 1) * T, 1);
        hc.L1 = L + 1, hc.T = T, hc.H = H, hc.lo = gc->start_pos;
        if (!hc.hidden || !hc.seen) {
            free(hc.hidden), free(hc.seen);
            if (want_moe) ck_moecap_free(&mc);
            ck_emit_simple(c, gc->name, bname, mname, "run", QC_VERDICT_ERROR,
                           "out of memory (hidden-state capture)", NULL);
            return;
        }
    }
    qc_golden_case *act = &cr[bi].act[mode];
    qc_status s = ck_run_one(be, gc, mode, c->o, 0, want_hidden || want_moe ? &hc : NULL, act,
                             &err);
    if (s) {
        ck_emit_simple(c, gc->name, bname, mname, "run", ck_failed_run_verdict(s), err.msg, NULL);
        free(hc.hidden), free(hc.seen);
        if (want_moe) ck_moecap_free(&mc);
        return;
    }
    cr[bi].have[mode] = 1;
    if (c->o->topk > 0) { /* --topk K: the runtime seen through its top-k only (no capture) */
        ck_topk_view_rows(c, gc, act, bname, mname, c->o->topk);
        return;
    }
    char loc[4096] = "";
    cmp_spec base = {.case_name = gc->name, .backend = bname, .mode = mname,
                     .vs_golden = 1, .dump_file = c->slot[bi].dump_path[mode]};
    int localised = 0;
    qc_localisation where, dwhere;
    ck_loc_init(&where);
    ck_loc_init(&dwhere);
    if (want_hidden) localised = ck_check_hidden(c, &base, gc, &hc, loc, sizeof loc, &where);
    else if (gc->prefill_hidden)
        ck_emit_cap_skip(c, gc->name, bname, mname, "prefill.hidden", QC_BE_CAP_HIDDEN);
    if (!localised)
        ck_state_localisation(c, act, gc, "prefill", bname, mname, loc, sizeof loc, &where);
    if (qc_cfg_is_moe(cfg))
        ck_check_router(c, gc, want_moe ? &mc : NULL, bname, mname, loc[0] ? loc : NULL);
    if (want_moe) ck_moecap_free(&mc);
    free(hc.hidden), free(hc.seen);
    char state_skip[400];
    snprintf(state_skip, sizeof state_skip, "capability '%s' not announced by %s",
             qc_cap_name(QC_BE_CAP_STATE_READ), bname);
    char *dec_loc = decode_hidden_localisation(c, bs, bi, gc, mode, act, &dwhere);
    ck_vs_golden_checks(c, gc, act, bname, mname, c->slot[bi].dump_path[mode], loc[0] ? loc : NULL,
                        &where, (be->caps & QC_BE_CAP_STATE_READ) ? NULL : state_skip, dec_loc,
                        &dwhere);
    free(dec_loc);
    ck_check_drift(c, be, bname, gc, mode);        /* long decodes only (qc_check_drift.c) */
    ck_check_hazard(c, gc, act, bname, mname);     /* hazard cases only (qc_check_hazard.c) */

    if (be->caps & QC_BE_CAP_STATE_FILL) {
        ck_check_garbage_and_slots(c, be, gc, mode, act);
    } else {
        ck_emit_cap_skip(c, gc->name, bname, mname, "garbage_reset", QC_BE_CAP_STATE_FILL);
        ck_emit_cap_skip(c, gc->name, bname, mname, "unused_slots", QC_BE_CAP_STATE_FILL);
    }

    /* thread counts, bitwise. Static prefill of long prompts is skipped: it runs the same
     * one-token kernels as decode and the short cases, and its many small parallel regions are
     * the slowest part of a run on a busy 2-core machine. */
    if (!(be->caps & QC_BE_CAP_THREADS)) {
        ck_emit_cap_skip(c, gc->name, bname, mname, "threads_bitwise", QC_BE_CAP_THREADS);
    } else if (bs->alt[bi] && (mode != QC_MODE_STATIC || T <= 8)) {
        qc_golden_case t1;
        qc_err_clear(&err);
        if ((s = ck_run_one(bs->alt[bi], gc, mode, c->o, 0, NULL, &t1, &err)) == QC_OK) {
            char extra[160];
            snprintf(extra, sizeof extra, "%s, %d thread(s) (actual) vs %d thread(s) (expected)",
                     bname, bs->alt[bi]->opts.n_threads, be->opts.n_threads);
            compare_runs(c, gc, &t1, act, bname, mname, "threads_bitwise", 1, 0, extra);
            if (c->cal) {
                ck_partlist *pl = calloc(1, sizeof *pl);
                if (pl) {
                    ck_add_all_parts(pl, cfg, &t1, gc);
                    for (int i = 0; i < pl->n; i++)
                        ck_calib_measure(c, bi, CAL_KIND_GOLDEN, &pl->p[i], gc->name);
                    free(pl);
                }
            }
            qc_case_free(cfg, &t1);
        } else {
            ck_emit_simple(c, gc->name, bname, mname, "threads_bitwise", ck_failed_run_verdict(s),
                           err.msg, NULL);
        }
    }
}

static void check_case(ck_ctx *c, ck_backends *bs, const qc_golden_case *gc, case_runs *cr) {
    for (int bi = 0; bi < c->n_slots; bi++) {
        qc_backend *be = bs->be[bi];
        if (!be) continue;
        /* a runtime under test is told dn_kernel / chunk_size by the kernel checks only */
        qc_remote_kernel_opts(be, QC_REMOTE_KOPTS_OWN);
        qc_remote_kernel_opts(bs->alt[bi], QC_REMOTE_KOPTS_OWN);
        const char *bname = c->slot[bi].name;
        for (int mi = 0; mi < N_MODES; mi++)
            if (mode_selected(c, gc->name, bname, (qc_mode)mi) && !ck_stop_now(c)) {
                if (mi == QC_MODE_NOKV && ck_drift_is_long(gc))
                    ck_emit_simple(c, gc->name, bname, "nokv", "run", QC_VERDICT_SKIP,
                                   "a long decode: nokv recomputes the whole sequence at every "
                                   "decode step (quadratic); static and dynamic run it", NULL);
                else
                    check_mode(c, bs, bi, gc, (qc_mode)mi, cr);
            }
        if (c->o->topk || (be->caps & QC_BE_CAP_TOPK_ONLY)) continue; /* top-k rows only */
        /* static == dynamic */
        if (cr[bi].have[QC_MODE_STATIC] && cr[bi].have[QC_MODE_DYNAMIC])
            compare_runs(c, gc, &cr[bi].act[QC_MODE_DYNAMIC], &cr[bi].act[QC_MODE_STATIC],
                         bname, "dynamic", "static_eq_dynamic", 0, 0,
                         "Dynamic-shape prefill (actual) vs static one-token-per-call prefill "
                         "(expected), same backend");
        if (cr[bi].have[QC_MODE_DYNAMIC])   /* chunked_eq_recurrent, chunk_sweep */
            ck_check_dn_variants(c, be, bname, gc, &cr[bi].act[QC_MODE_DYNAMIC]);
        ck_check_lifecycle(c, be, bname, gc, cr[bi].have); /* snapshot, rollback, sequences */
    }
    /* each built-in with a vs_reference check == the reference built-in (opt_eq_ref) */
    const int r = c->ref_slot;
    for (int bi = 0; r >= 0 && bi < c->n_slots && !c->o->topk; bi++) {
        const qc_builtin_info *b = c->slot[bi].builtin;
        if (bi == r || !b || !b->vs_reference) continue;
        char extra[200];
        snprintf(extra, sizeof extra, "%c%s backend (actual) vs %s backend (expected), same mode",
                 toupper((unsigned char)b->name[0]), b->name + 1, c->slot[r].name);
        for (int mi = 0; mi < N_MODES; mi++)
            if (cr[r].have[mi] && cr[bi].have[mi])
                compare_runs(c, gc, &cr[bi].act[mi], &cr[r].act[mi], c->slot[bi].name,
                             qc_mode_str((qc_mode)mi), b->vs_reference, 0, 0, extra);
    }
}

static int case_selected(ck_ctx *c, const char *case_name) {
    for (int bi = 0; bi < c->n_slots; bi++) {
        if (!c->slot[bi].run) continue;
        for (int m = 0; m < N_MODES; m++)
            if (mode_selected(c, case_name, c->slot[bi].name, (qc_mode)m)) return 1;
    }
    return 0;
}

/* ---- check_file: one golden file, in steps ---- */

/* An ERROR row for a golden that does not open (the message names the file and field). */
static void cf_open_error(ck_ctx *c, const char *path, const char *stem, const qc_err *err) {
    qc_check_row r;
    ck_row_init(&r, stem, "_file", "-", "-", "open");
    r.verdict = QC_VERDICT_ERROR;
    snprintf(r.keyline, sizeof r.keyline, "%s", err->msg);
    snprintf(r.golden, sizeof r.golden, "%s", path);
    r.seconds = 0;
    qc_check_row *st = qc_results_add(c->res, &r);
    if (st && !c->o->list && !c->o->calibrate) qc_report_console_row(stdout, st, c->o->quiet);
    fprintf(stderr, "qwen-conform: %s\n", err->msg);
}

/* Mark the cases this shard and the filters select (sel[i] = 1); --list prints their runs.
 * Returns the number selected. */
static int cf_select(ck_ctx *c, const qc_golden *g, const char *stem, long *case_counter,
                     int *sel) {
    int n_sel = 0;
    for (int i = 0; sel && i < g->n_cases; i++) {
        long k = (*case_counter)++;
        if (c->o->shard_n > 0 && (k % c->o->shard_n) != c->o->shard_i - 1) continue;
        if (!case_selected(c, g->cases[i].name)) continue;
        sel[i] = 1;
        n_sel++;
        if (c->o->list) {
            for (int bi = 0; bi < c->n_slots; bi++)
                for (int m = 0; c->slot[bi].run && m < N_MODES; m++)
                    if (mode_selected(c, g->cases[i].name, c->slot[bi].name, (qc_mode)m) &&
                        ++c->listed)
                        printf("%s/%s/%s/%s\n", stem, g->cases[i].name, c->slot[bi].name,
                               mode_col(c, c->slot[bi].name, (qc_mode)m));
        }
    }
    return n_sel;
}

/* The built-in backends check_file keeps alive at once, each with the options it is created
 * with (ck_create_slot): each checked built-in (the reference always: it is also the comparison
 * of a runtime under test) at its thread count (--threads with the threads capability, else
 * its default) and, with the threads capability, its threads_bitwise twin (--threads 1: 2,
 * else 1), all at the default chunk size. */
static qc_status cf_plan_backends(const ck_ctx *c, qc_memplan_req *rq, qc_err *err) {
    qc_status st = QC_OK;
    qc_memplan_req one = *rq;
    rq->n_backends = 0;
    for (int bi = 0; bi < c->n_slots && !st; bi++) {
        const qc_builtin_info *b = c->slot[bi].builtin;
        if (!b || (bi != c->ref_slot && !c->slot[bi].run)) continue;
        const int threaded = (b->caps & QC_BE_CAP_THREADS) != 0;
        const int threads[2] = {threaded ? c->o->threads : 0, c->o->threads == 1 ? 2 : 1};
        for (int k = 0; k < 1 + threaded && !st; k++) {
            one.n_threads = threads[k];
            if ((st = qc_registry_memplan(b->name, &one, err))) break;
            char what[64];
            snprintf(what, sizeof what, "the %s backend", b->name);
            for (int j = 0; j < one.n_backends && !st; j++)
                st = qc_memplan_add_backend(rq, what, one.backend_bytes[j], err);
        }
    }
    return st;
}

/* Memory plan: refuse cleanly (an ERROR row, returns 0) before the backends, states and
 * captures are allocated; the golden's part is its metadata plus the tensors of the largest
 * selected case (one case is loaded at a time). */
static int cf_memory_ok(ck_ctx *c, const char *path, const qc_golden *g, const qc_model *model,
                        const int *sel) {
    qc_err err;
    qc_err_clear(&err);
    int ctxlen = 1;
    uint64_t golden_bytes = 0;
    for (int i = 0; i < g->n_cases; i++) {
        const qc_golden_case *gc = &g->cases[i];
        int need = gc->start_pos + gc->n_tokens + gc->n_decode;
        if (sel[i] && need > ctxlen) ctxlen = need;
        size_t cb = sel[i] ? qc_golden_case_bytes(&g->cfg, &g->meta[i]) : 0;
        if (cb > golden_bytes) golden_bytes = cb;
    }
    uint64_t golden_meta = (uint64_t)g->n_cases * (sizeof *g->cases + sizeof *g->meta + 1);
    golden_bytes = golden_bytes > UINT64_MAX - golden_meta ? UINT64_MAX
                                                           : golden_bytes + golden_meta;
    qc_memplan_req rq;
    qc_memplan_req_init(&rq, &model->cfg, model->embed.dtype, ctxlen, ctxlen);
    rq.weight_bytes = qc_model_weight_bytes(model);
    rq.nokv = 1;
    rq.n_logit_rows = 2 * ctxlen;
    rq.n_hidden_tokens = ctxlen;
    rq.n_state_copies = 4;
    qc_memplan plan;
    uint64_t limit = 0;
    qc_status ms = cf_plan_backends(c, &rq, &err);
    if (!ms) ms = qc_memplan_estimate(&rq, &plan, &err);
    if (!ms) ms = qc_memplan_limit(c->o->max_memory, &limit, &err);
    if (!ms) {
        uint64_t total = plan.total > UINT64_MAX - golden_bytes ? UINT64_MAX
                                                               : plan.total + golden_bytes;
        if ((ms = qc_memplan_check(total, limit, path, &err)) != QC_OK) {
            char line[256];
            size_t used = strlen(err.msg);
            snprintf(err.msg + used, sizeof err.msg - used, ": golden %.2f GiB (metadata + "
                     "the largest selected case) + %s", qc_memplan_gib(golden_bytes),
                     qc_memplan_str(&plan, line, sizeof line));
        }
    }
    if (ms == QC_OK) return 1;
    ck_emit_simple(c, "_model", "-", "-", "memory", QC_VERDICT_ERROR, err.msg, NULL);
    return 0;
}

/* The model_hash row: the loaded model's config / weights SHA-256 against the golden's. */
static void cf_model_hash(ck_ctx *c, const char *path, const qc_golden *g, const qc_model *model) {
    int ch = strcmp(model->config_sha256, g->config_sha256) == 0;
    int wh = strcmp(model->weights_sha256, g->weights_sha256) == 0;
    char k[320];
    if (c->o->no_hash_check) {
        snprintf(k, sizeof k, "skipped (--no-hash-check)%s",
                 ch && wh ? "" : "; WARNING: the model's hashes differ from the golden's");
        ck_emit_simple(c, "_model", "-", "-", "model_hash", QC_VERDICT_SKIP, k,
                       ch && wh ? NULL
                                : qc_strdup_printf("config_sha256: golden %s, model %s\n"
                                                   "weights_sha256: golden %s, model %s",
                                                   g->config_sha256, model->config_sha256,
                                                   g->weights_sha256, model->weights_sha256));
        if (!(ch && wh))
            fprintf(stderr, "qwen-conform: warning: %s: model %s does not match the golden's "
                    "hashes (config %s vs %s, weights %s vs %s)\n", path, g->model_dir,
                    model->config_sha256, g->config_sha256, model->weights_sha256,
                    g->weights_sha256);
    } else if (ch && wh) {
        snprintf(k, sizeof k, "config %.12s weights %.12s match the golden", g->config_sha256,
                 g->weights_sha256);
        ck_emit_simple(c, "_model", "-", "-", "model_hash", QC_VERDICT_PASS, k, NULL);
    } else {
        snprintf(k, sizeof k, "%s%s%s differs from the golden", ch ? "" : "config_sha256",
                 !ch && !wh ? " and " : "", wh ? "" : "weights_sha256");
        ck_emit_simple(c, "_model", "-", "-", "model_hash", QC_VERDICT_FAIL, k,
                       qc_strdup_printf("The golden claims a different model than the one "
                                        "loaded from %s\nconfig_sha256:  golden %s\n"
                                        "                model  %s%s\nweights_sha256: golden %s\n"
                                        "                model  %s%s",
                                        g->model_dir, g->config_sha256, model->config_sha256,
                                        ch ? "  (same)" : "  (DIFFERENT)", g->weights_sha256,
                                        model->weights_sha256, wh ? "  (same)" : "  (DIFFERENT)"));
    }
}

/* Create the selected slots' backends (bs zeroed here) for the longest selected case, and the
 * reference to compare a runtime under test with when the reference slot is not run. */
static int cf_backends(ck_ctx *c, ck_backends *bs, const qc_golden *g, const int *sel,
                       const qc_model *model, const qc_model *use_model) {
    memset(bs, 0, sizeof *bs);
    bs->be = calloc((size_t)c->n_slots, sizeof *bs->be);
    bs->alt = calloc((size_t)c->n_slots, sizeof *bs->alt);
    if (!bs->be || !bs->alt) {
        ck_emit_simple(c, "_model", "-", "-", "create", QC_VERDICT_ERROR, "out of memory", NULL);
        return 0;
    }
    int maxctx = 0;
    for (int i = 0; i < g->n_cases; i++) {
        if (!sel[i]) continue;
        qc_profile p;
        ck_case_profile(&g->cases[i], QC_MODE_NOKV, 8, &p);
        if (p.max_context_len > maxctx) maxctx = p.max_context_len;
        if (p.max_seq_len > maxctx) maxctx = p.max_seq_len;
    }
    bs->max_tokens = maxctx;
    for (int bi = 0; bi < c->n_slots; bi++)
        if (c->slot[bi].run) ck_create_slot(c, bs, bi, g->model_dir, model, use_model, maxctx);
    bs->cmp = c->ref_slot >= 0 ? bs->be[c->ref_slot] : NULL;
    if (!bs->cmp && c->ref_slot >= 0 && bs->be[c->ext_slot]) {
        qc_backend_opts bo;
        qc_backend_opts_default(&bo);
        bo.max_tokens = maxctx;
        qc_runtime_spec rs;
        qc_err err;
        qc_err_clear(&err);
        if (qc_registry_parse(c->slot[c->ref_slot].name, 0, &rs, &err) == QC_OK &&
            qc_registry_create(&rs, g->model_dir, model, &bo, &bs->cmp, &err) == QC_OK)
            bs->own_cmp = 1;
    }
    return 1;
}

/* Destroy what cf_backends made. */
static void cf_backends_free(const ck_ctx *c, ck_backends *bs) {
    for (int bi = 0; bs->be && bi < c->n_slots; bi++) qc_backend_destroy(bs->be[bi]);
    for (int bi = 0; bs->alt && bi < c->n_slots; bi++) qc_backend_destroy(bs->alt[bi]);
    if (bs->own_cmp) qc_backend_destroy(bs->cmp);
    free(bs->be);
    free(bs->alt);
    memset(bs, 0, sizeof *bs);
}

/* Run the selected cases one at a time (each loaded, checked, unloaded); with --dump-dir the
 * runs' outputs are kept and written per (slot, mode) at the end. */
static void cf_run_cases(ck_ctx *c, ck_backends *bs, qc_golden *g, const int *sel, int n_sel,
                         const char *stem) {
    qc_err err;
    for (int bi = 0; bi < c->n_slots; bi++)
        for (int m = 0; m < N_MODES; m++) {
            char *dp = c->slot[bi].dump_path[m];
            dp[0] = 0;
            if (c->o->dump_dir && bs->be[bi])
                snprintf(dp, sizeof c->slot[bi].dump_path[m], "%s/%s.%s.%s.h5", c->o->dump_dir,
                         stem, ck_dump_name(c->slot[bi].name).s, qc_mode_str((qc_mode)m));
        }
    /* the runs kept for --dump-actual, per slot and mode */
    struct slot_dump {
        qc_golden_case *cases[N_MODES];
        int n[N_MODES];
    } *dump = c->o->dump_dir ? calloc((size_t)(c->n_slots > 0 ? c->n_slots : 1), sizeof *dump)
                             : NULL;
    for (int bi = 0; dump && bi < c->n_slots; bi++)
        for (int m = 0; m < N_MODES; m++)
            dump[bi].cases[m] = calloc((size_t)g->n_cases, sizeof(qc_golden_case));
    int done = 0;
    for (int i = 0; i < g->n_cases; i++) {
        if (!sel[i]) continue;
        if (ck_stop_now(c)) break; /* --maxfail */
        const qc_golden_case *gc = &g->cases[i];
        double t0 = ck_wall();
        qc_err_clear(&err);
        if (qc_golden_load_case(g, i, &err) != QC_OK) {
            /* this case is an ERROR row naming the file and dataset; the others still run */
            ck_emit_simple(c, gc->name, "-", "-", "load", QC_VERDICT_ERROR, err.msg, NULL);
            fprintf(stderr, "qwen-conform: %s\n", err.msg);
            done++;
            continue;
        }
        case_runs *cr = calloc((size_t)c->n_slots, sizeof *cr);
        if (!cr) {
            qc_golden_unload_case(g, i);
            break;
        }
        check_case(c, bs, gc, cr);
        for (int bi = 0; bi < c->n_slots; bi++)
            for (int m = 0; m < N_MODES; m++) {
                if (!cr[bi].have[m]) continue;
                if (dump && dump[bi].cases[m])
                    dump[bi].cases[m][dump[bi].n[m]++] = cr[bi].act[m];
                else
                    qc_case_free(&g->cfg, &cr[bi].act[m]);
            }
        free(cr);
        qc_golden_unload_case(g, i);
        done++;
        if (!c->o->quiet)
            fprintf(stderr, "[%s] case %s done (%d/%d, %.2f s)\n", stem, gc->name, done, n_sel,
                    ck_wall() - t0);
    }
    for (int bi = 0; dump && bi < c->n_slots; bi++)
        for (int m = 0; m < N_MODES; m++) {
            struct slot_dump *d = &dump[bi];
            if (!d->cases[m]) continue;
            if (d->n[m] > 0) ck_dump_actual(c, g, d->cases[m], d->n[m], c->slot[bi].dump_path[m]);
            for (int k = 0; k < d->n[m]; k++) qc_case_free(&g->cfg, &d->cases[m][k]);
            free(d->cases[m]);
        }
    free(dump);
}

/* One golden file: open (metadata only), select, load the model, plan memory, check the
 * model's identity, create the backends, run the cases; every failure is a row. */
static void check_file(ck_ctx *c, const char *path, long *case_counter) {
    qc_err err;
    qc_err_clear(&err);
    qc_golden *g = NULL;
    char stem[128];
    ck_make_stem(path, c->o->golden, stem, sizeof stem);
    c->stem = stem;
    c->g = NULL;
    c->t_row = ck_wall();
    /* metadata only (every shape validated, no tensor read): --list and --shard touch no
     * tensor data; a case's tensors are loaded when it runs and freed after */
    if (qc_golden_open_lazy(path, &g, &err) != QC_OK) {
        cf_open_error(c, path, stem, &err);
        return;
    }
    c->g = g;
    c->cfg = &g->cfg;
    if (c->o->model_dir) snprintf(g->model_dir, sizeof g->model_dir, "%s", c->o->model_dir);
    int *sel = calloc((size_t)(g->n_cases > 0 ? g->n_cases : 1), sizeof *sel);
    int n_sel = cf_select(c, g, stem, case_counter, sel);
    qc_model *model = NULL;
    fault_model *fm = NULL;
    if (c->o->list || n_sel == 0) goto out;
    if (c->srv) { /* a server loads its own model: only the golden's tokens and logits count */
        ck_http_file(c, c->srv, g, sel);
        goto out;
    }
    if (qc_model_load(g->model_dir, &model, &err) != QC_OK) {
        ck_emit_simple(c, "_model", "-", "-", "load", QC_VERDICT_ERROR, err.msg,
                       ck_model_hint(c, g, err.msg));
        goto out;
    }
    if (!cf_memory_ok(c, path, g, model, sel)) goto out;
    int cfg_ok = ck_cfg_same(&model->cfg, &g->cfg);
    cf_model_hash(c, path, g, model);
    if (!cfg_ok) {
        ck_emit_simple(c, "_model", "-", "-", "model_config", QC_VERDICT_FAIL,
                       "the loaded model's config differs from the golden's config_json: "
                       "numerical checks skipped", NULL);
        goto out;
    }
    /* test-only model fault */
    const qc_model *use_model = model;
    if (c->o->faults.norm_no_offset) {
        if (c->o->faults.norm_layer >= model->cfg.n_layers) {
            ck_emit_simple(c, "_model", "-", "-", "inject_fault", QC_VERDICT_ERROR,
                           "--inject-fault norm-no-offset: layer out of range", NULL);
        } else if (ck_fault_model_make(model, c->o->faults.norm_layer, &fm, &err) == QC_OK) {
            use_model = &fm->m;
        }
    }
    ck_backends bs;
    if (cf_backends(c, &bs, g, sel, model, use_model)) cf_run_cases(c, &bs, g, sel, n_sel, stem);
    cf_backends_free(c, &bs);
out:
    ck_fault_model_free(fm);
    qc_model_free(model);
    free(sel);
    qc_golden_free(g);
    c->g = NULL;
}

/* ---- engine entry ---- */

/* Every golden file of o->golden; the exit code. */
static int check_all(ck_ctx *c) {
    qc_check_opts *o = c->o;
    qc_results *res = c->res;
    if (o->modes == 0) o->modes = (1 << N_MODES) - 1;
    if (o->threads <= 0) o->threads = 1;
    double t0 = ck_wall();
    qc_err err;
    qc_err_clear(&err);
    char **paths = NULL;
    int n = 0;
    if (qc_golden_find(o->golden, &paths, &n, &err) != QC_OK) {
        fprintf(stderr, "qwen-conform: %s\n", err.msg);
        return QC_EXIT_ERROR;
    }
    if (n == 0) {
        fprintf(stderr, "qwen-conform: no golden files (*.h5) under %s: nothing to check\n", o->golden);
        qc_golden_paths_free(paths, n);
        return QC_EXIT_NOTHING;
    }
    if (o->dump_dir) {
        struct stat sb;
        if (stat(o->dump_dir, &sb) != 0 && mkdir(o->dump_dir, 0777) != 0) {
            fprintf(stderr, "qwen-conform: --dump-actual: cannot create %s: %s\n", o->dump_dir,
                    strerror(errno));
            qc_golden_paths_free(paths, n);
            return QC_EXIT_ERROR;
        }
    }
    if (ck_http_open(c)) { /* an http: runtime that cannot be reached: a usage error */
        qc_golden_paths_free(paths, n);
        return QC_EXIT_ERROR;
    }
    const char **names = malloc((size_t)c->n_slots * sizeof *names);
    for (int bi = 0; names && bi < c->n_slots; bi++) names[bi] = c->slot[bi].name;
    if (names) qc_report_console_fit(names, c->n_slots);
    free(names);
    if (!o->list && !o->calibrate) qc_report_console_header_lazy(); /* above the first row */
    long counter = 0;
    for (int i = 0; i < n; i++) {
        if (!o->list && ck_stop_now(c)) break; /* --maxfail */
        if (!o->list) qc_report_console_progress(stderr, i, n, paths, ck_wall() - t0, o->quiet);
        check_file(c, paths[i], &counter);
    }
    if (!o->list) qc_report_console_progress(stderr, n, n, paths, ck_wall() - t0, o->quiet);
    qc_golden_paths_free(paths, n);
    qc_server_close(c->srv);
    res->seconds = ck_wall() - t0;
    if (o->list) return res->n_error ? QC_EXIT_ERROR : c->listed ? QC_EXIT_PASS : QC_EXIT_NOTHING;
    if (res->n_error) return QC_EXIT_ERROR;
    if (res->n_fail) return QC_EXIT_FAIL;
    if (res->n_pass == 0) {
        fprintf(stderr, "qwen-conform: nothing was checked (filter / shard selected no case)\n");
        return QC_EXIT_NOTHING;
    }
    return QC_EXIT_PASS;
}

int qc_check_run(qc_check_opts *o, qc_policy *pol, qc_results *res) {
    ck_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.pol = pol;
    c.res = res;
    c.cal = o->calibrate ? (calib_sink *)o->calib : NULL;
    int rc = QC_EXIT_ERROR;
    if (ck_slots_make(&c))
        rc = check_all(&c);
    else
        fprintf(stderr, "qwen-conform: out of memory\n");
    free(c.slot);
    return rc;
}

