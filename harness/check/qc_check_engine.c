/* qc_check_engine.c — the check engine: runs every selected case on the backends under test.
 *
 * Flow per golden file: open (read-only) -> select cases (--filter, --shard) -> load the model
 * the golden names -> model_hash -> create the backends (reference; optimized with N threads
 * and with 1 thread for the bitwise thread check) -> per case, per backend, per mode: run
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

/* Profile for a case in a mode (context large enough for history + prompt + decode). */
void ck_case_profile(const qc_golden_case *gc, qc_mode mode, int extra, qc_profile *p) {
    int msl = gc->max_seq_len > 0 ? gc->max_seq_len : 128;
    int need = gc->start_pos + gc->n_tokens + gc->n_decode;
    int ctxlen = need > msl ? need : msl;
    qc_profile_for_mode(p, mode, msl, ctxlen + extra);
}

static void case_input(const qc_golden_case *gc, const qc_check_opts *o, qc_case_input *in) {
    memset(in, 0, sizeof *in);
    in->history = gc->n_history > 0 ? gc->history : NULL;
    in->n_history = gc->n_history;
    in->tokens = gc->tokens;
    in->n_tokens = gc->n_tokens;
    in->n_decode = gc->n_decode;
    in->forced = gc->n_decode > 0 ? gc->decode_tokens : NULL;
    in->static_no_advance = o->faults.static_no_advance;
}

/* Run with an optional hidden capture. hc may be NULL. */
qc_status ck_run_one(qc_backend *be, const qc_golden_case *gc, qc_mode mode,
                     const qc_check_opts *o, int garbage, hcap *hc, qc_golden_case *out,
                     qc_err *err) {
    return ck_run_call(be, NULL, gc, mode, o, garbage, hc, out, err);
}

qc_status ck_run_call(qc_backend *be, const qc_call *call, const qc_golden_case *gc,
                      qc_mode mode, const qc_check_opts *o, int garbage, hcap *hc,
                      qc_golden_case *out, qc_err *err) {
    qc_profile p;
    qc_case_input in;
    ck_case_profile(gc, mode, 0, &p);
    case_input(gc, o, &in);
    in.garbage_state = garbage;
    qc_call k = call ? *call : qc_backend_call_defaults(&be->opts);
    if (hc) {
        k.trace = ck_hcap_cb;
        k.trace_user = hc;
    }
    in.call = &k;
    return qc_run_case(be, &p, gc->name, &in, out, err);
}

/* ===================================================================================== */
/* per case                                                                              */
/* ===================================================================================== */

/* The mode column of (backend, m): an http: runtime has the one mode "served" (NULL for m > 0). */
static const char *mode_col(const ctx *c, const char *backend, qc_mode m) {
    if (!(c->srv || c->o->ext.kind == QC_RT_HTTP) || strcmp(backend, c->o->ext.name))
        return qc_mode_str(m);
    return m == 0 ? CK_SERVED : NULL;
}

static int mode_selected(ctx *c, const char *case_name, const char *backend, qc_mode m) {
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
static void compare_runs(ctx *c, const qc_golden_case *gc, const qc_golden_case *a,
                         const qc_golden_case *b, const char *backend, const char *mode,
                         const char *check, int bitwise, int vs_golden, const char *extra) {
    partlist *pl = calloc(1, sizeof *pl);
    if (!pl) return;
    ck_add_all_parts(pl, c->cfg, a, b);
    cmp_spec s = {.case_name = gc->name, .backend = backend, .mode = mode, .check = check,
                  .bitwise = bitwise, .vs_golden = vs_golden, .extra = extra,
                  .logits_stats = vs_golden};
    int bi = ck_slot_of(c, backend);
    qc_mode mm;
    if (vs_golden && qc_mode_parse(mode, &mm, NULL) == QC_OK) s.dump_file = c->dump_path[bi][mm];
    ck_compare_parts(c, &s, pl);
    free(pl);
}

typedef struct {
    int have[QC_CK_SLOTS][N_MODES];            /* 1: act filled */
    qc_golden_case act[QC_CK_SLOTS][N_MODES];  /* main results */
} case_runs;

/* The hidden state (L+1 indices) of one decode step of a run: the case run again with the trace
 * hook capturing only that position. */
static qc_status decode_hidden(ctx *c, qc_backend *be, const qc_golden_case *gc, qc_mode mode,
                               int step, float *dst, qc_err *err) {
    const qc_config *cfg = c->cfg;
    const int L = cfg->n_layers, H = cfg->hidden_size;
    hcap h = {0};
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
static char *decode_hidden_localisation(ctx *c, backends *bs, int bi, const qc_golden_case *gc,
                                        qc_mode mode, const qc_golden_case *act,
                                        qc_localisation *where) {
    qc_backend *be = bs->be[bi], *ref = bs->cmp;
    const char *bname = c->slot_name[bi], *mname = qc_mode_str(mode);
    if (!ref || ref == be || bi == QC_CK_REF || gc->n_decode == 0 ||
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
static void check_mode(ctx *c, backends *bs, int bi, const qc_golden_case *gc, qc_mode mode,
                       case_runs *cr) {
    const qc_config *cfg = c->cfg;
    const int L = cfg->n_layers, T = gc->n_tokens, H = cfg->hidden_size;
    qc_backend *be = bs->be[bi];
    const char *bname = c->slot_name[bi], *mname = qc_mode_str(mode);
    qc_err err;
    qc_err_clear(&err);
    if (be->caps & QC_BE_CAP_TOPK_ONLY) { /* top-k rows only, the rest SKIPPED (qc_check_topk.c) */
        cr->have[bi][mode] = ck_topk_runtime_mode(c, be, gc, mode, bname, &cr->act[bi][mode]);
        return;
    }
    hcap hc = {0};
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
    qc_golden_case *act = &cr->act[bi][mode];
    qc_status s = ck_run_one(be, gc, mode, c->o, 0, want_hidden || want_moe ? &hc : NULL, act,
                             &err);
    if (s) {
        ck_emit_simple(c, gc->name, bname, mname, "run", ck_failed_run_verdict(s), err.msg, NULL);
        free(hc.hidden), free(hc.seen);
        if (want_moe) ck_moecap_free(&mc);
        return;
    }
    cr->have[bi][mode] = 1;
    if (c->o->topk > 0) { /* --topk K: the runtime seen through its top-k only (no capture) */
        ck_topk_view_rows(c, gc, act, bname, mname, c->o->topk);
        return;
    }
    char loc[4096] = "";
    cmp_spec base = {.case_name = gc->name, .backend = bname, .mode = mname,
                     .vs_golden = 1, .dump_file = c->dump_path[bi][mode]};
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
    ck_vs_golden_checks(c, gc, act, bname, mname, c->dump_path[bi][mode], loc[0] ? loc : NULL,
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
                partlist *pl = calloc(1, sizeof *pl);
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

static void check_case(ctx *c, backends *bs, const qc_golden_case *gc, case_runs *cr) {
    for (int bi = 0; bi < QC_CK_SLOTS; bi++) {
        qc_backend *be = bs->be[bi];
        if (!be) continue;
        /* a runtime under test is told dn_kernel / chunk_size by the kernel checks only */
        qc_remote_kernel_opts(be, QC_REMOTE_KOPTS_OWN);
        qc_remote_kernel_opts(bs->alt[bi], QC_REMOTE_KOPTS_OWN);
        const char *bname = c->slot_name[bi];
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
        if (cr->have[bi][QC_MODE_STATIC] && cr->have[bi][QC_MODE_DYNAMIC])
            compare_runs(c, gc, &cr->act[bi][QC_MODE_DYNAMIC], &cr->act[bi][QC_MODE_STATIC],
                         bname, "dynamic", "static_eq_dynamic", 0, 0,
                         "Dynamic-shape prefill (actual) vs static one-token-per-call prefill "
                         "(expected), same backend");
        if (cr->have[bi][QC_MODE_DYNAMIC])   /* chunked_eq_recurrent, chunk_sweep */
            ck_check_dn_variants(c, be, bname, gc, &cr->act[bi][QC_MODE_DYNAMIC]);
        ck_check_lifecycle(c, be, bname, gc, cr->have[bi]); /* snapshot, rollback, sequences */
    }
    /* optimized == reference */
    for (int mi = 0; mi < N_MODES && !c->o->topk; mi++)
        if (cr->have[QC_CK_REF][mi] && cr->have[QC_CK_OPT][mi])
            compare_runs(c, gc, &cr->act[QC_CK_OPT][mi], &cr->act[QC_CK_REF][mi],
                         c->slot_name[QC_CK_OPT], qc_mode_str((qc_mode)mi), "opt_eq_ref", 0, 0,
                         "Optimized backend (actual) vs reference backend (expected), same mode");
}

static int case_selected(ctx *c, const char *case_name, int avail_backends) {
    for (int bi = 0; bi < QC_CK_SLOTS; bi++) {
        if (!(avail_backends & (1 << bi))) continue;
        for (int m = 0; m < N_MODES; m++)
            if (mode_selected(c, case_name, c->slot_name[bi], (qc_mode)m)) return 1;
    }
    return 0;
}

/* ---- check_file: one golden file, in steps ---- */

/* An ERROR row for a golden that does not open (the message names the file and field). */
static void cf_open_error(ctx *c, const char *path, const char *stem, const qc_err *err) {
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
static int cf_select(ctx *c, const qc_golden *g, const char *stem, int avail, long *case_counter,
                     int *sel) {
    int n_sel = 0;
    for (int i = 0; sel && i < g->n_cases; i++) {
        long k = (*case_counter)++;
        if (c->o->shard_n > 0 && (k % c->o->shard_n) != c->o->shard_i - 1) continue;
        if (!case_selected(c, g->cases[i].name, avail)) continue;
        sel[i] = 1;
        n_sel++;
        if (c->o->list) {
            for (int bi = 0; bi < QC_CK_SLOTS; bi++)
                for (int m = 0; (avail & (1 << bi)) && m < N_MODES; m++)
                    if (mode_selected(c, g->cases[i].name, c->slot_name[bi], (qc_mode)m) &&
                        ++c->listed)
                        printf("%s/%s/%s/%s\n", stem, g->cases[i].name, c->slot_name[bi],
                               mode_col(c, c->slot_name[bi], (qc_mode)m));
        }
    }
    return n_sel;
}

/* The built-in backends check_file keeps alive at once, each with the options it is created
 * with (ck_create_slot): the reference (default threads), the optimized at --threads and its
 * threads_bitwise twin (--threads 1: 2, else 1), all at the default chunk size. */
static qc_status cf_plan_backends(const ctx *c, int avail, qc_memplan_req *rq, qc_err *err) {
    qc_status st = QC_OK;
    qc_memplan_req one = *rq;
    rq->n_backends = 0;
    const struct { int slot; const char *name; int threads; } run[3] = {
        {QC_CK_REF, "reference", 0},
        {QC_CK_OPT, "optimized", c->o->threads},
        {QC_CK_OPT, "optimized", c->o->threads == 1 ? 2 : 1},
    };
    for (int k = 0; k < 3 && !st; k++) {
        /* the reference is alive either as its slot or as the comparison of a runtime under
         * test */
        if (run[k].slot != QC_CK_REF && !(avail & (1 << run[k].slot))) continue;
        one.n_threads = run[k].threads;
        if ((st = qc_registry_memplan(run[k].name, &one, err))) break;
        char what[64];
        snprintf(what, sizeof what, "the %s backend", run[k].name);
        for (int b = 0; b < one.n_backends && !st; b++)
            st = qc_memplan_add_backend(rq, what, one.backend_bytes[b], err);
    }
    return st;
}

/* Memory plan: refuse cleanly (an ERROR row, returns 0) before the backends, states and
 * captures are allocated; the golden's part is its metadata plus the tensors of the largest
 * selected case (one case is loaded at a time). */
static int cf_memory_ok(ctx *c, const char *path, const qc_golden *g, const qc_model *model,
                        const int *sel, int avail) {
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
    qc_status ms = cf_plan_backends(c, avail, &rq, &err);
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
static void cf_model_hash(ctx *c, const char *path, const qc_golden *g, const qc_model *model) {
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
static void cf_backends(ctx *c, backends *bs, const qc_golden *g, const int *sel, int avail,
                        const qc_model *model, const qc_model *use_model) {
    memset(bs, 0, sizeof *bs);
    int maxctx = 0;
    for (int i = 0; i < g->n_cases; i++) {
        if (!sel[i]) continue;
        qc_profile p;
        ck_case_profile(&g->cases[i], QC_MODE_NOKV, 8, &p);
        if (p.max_context_len > maxctx) maxctx = p.max_context_len;
        if (p.max_seq_len > maxctx) maxctx = p.max_seq_len;
    }
    bs->max_tokens = maxctx;
    for (int bi = 0; bi < QC_CK_SLOTS; bi++)
        if (avail & (1 << bi)) ck_create_slot(c, bs, bi, g->model_dir, model, use_model, maxctx);
    bs->cmp = bs->be[QC_CK_REF];
    if (!bs->cmp && bs->be[QC_CK_EXT]) {
        qc_backend_opts bo;
        qc_backend_opts_default(&bo);
        bo.max_tokens = maxctx;
        qc_runtime_spec rs;
        qc_err err;
        qc_err_clear(&err);
        if (qc_registry_parse("reference", 0, &rs, &err) == QC_OK &&
            qc_registry_create(&rs, g->model_dir, model, &bo, &bs->cmp, &err) == QC_OK)
            bs->own_cmp = 1;
    }
}

/* Run the selected cases one at a time (each loaded, checked, unloaded); with --dump-dir the
 * runs' outputs are kept and written per (slot, mode) at the end. */
static void cf_run_cases(ctx *c, backends *bs, qc_golden *g, const int *sel, int n_sel,
                         const char *stem) {
    qc_err err;
    memset(c->dump_path, 0, sizeof c->dump_path);
    if (c->o->dump_dir)
        for (int bi = 0; bi < QC_CK_SLOTS; bi++)
            for (int m = 0; bs->be[bi] && m < N_MODES; m++)
                snprintf(c->dump_path[bi][m], sizeof c->dump_path[bi][m], "%s/%s.%s.%s.h5",
                         c->o->dump_dir, stem, ck_dump_name(c->slot_name[bi]).s,
                         qc_mode_str((qc_mode)m));
    qc_golden_case *dump[QC_CK_SLOTS][N_MODES] = {{0}};
    int n_dump[QC_CK_SLOTS][N_MODES] = {{0}};
    if (c->o->dump_dir)
        for (int bi = 0; bi < QC_CK_SLOTS; bi++)
            for (int m = 0; m < N_MODES; m++)
                dump[bi][m] = calloc((size_t)g->n_cases, sizeof(qc_golden_case));
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
        case_runs *cr = calloc(1, sizeof *cr);
        if (!cr) {
            qc_golden_unload_case(g, i);
            break;
        }
        check_case(c, bs, gc, cr);
        for (int bi = 0; bi < QC_CK_SLOTS; bi++)
            for (int m = 0; m < N_MODES; m++) {
                if (!cr->have[bi][m]) continue;
                if (dump[bi][m])
                    dump[bi][m][n_dump[bi][m]++] = cr->act[bi][m];
                else
                    qc_case_free(&g->cfg, &cr->act[bi][m]);
            }
        free(cr);
        qc_golden_unload_case(g, i);
        done++;
        if (!c->o->quiet)
            fprintf(stderr, "[%s] case %s done (%d/%d, %.2f s)\n", stem, gc->name, done, n_sel,
                    ck_wall() - t0);
    }
    for (int bi = 0; bi < QC_CK_SLOTS; bi++)
        for (int m = 0; m < N_MODES; m++) {
            if (!dump[bi][m]) continue;
            if (n_dump[bi][m] > 0) ck_dump_actual(c, g, dump[bi][m], n_dump[bi][m], c->dump_path[bi][m]);
            for (int k = 0; k < n_dump[bi][m]; k++) qc_case_free(&g->cfg, &dump[bi][m][k]);
            free(dump[bi][m]);
        }
}

/* One golden file: open (metadata only), select, load the model, plan memory, check the
 * model's identity, create the backends, run the cases; every failure is a row. */
static void check_file(ctx *c, const char *path, long *case_counter) {
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
    int avail = c->o->backends ? c->o->backends : (QC_BACKEND_REF | QC_BACKEND_OPT);
    for (int bi = 0; bi < QC_CK_SLOTS; bi++)
        if (!c->slot_name[bi]) avail &= ~(1 << bi);
    int n_sel = cf_select(c, g, stem, avail, case_counter, sel);
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
    if (!cf_memory_ok(c, path, g, model, sel, avail)) goto out;
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
    backends bs;
    cf_backends(c, &bs, g, sel, avail, model, use_model);
    cf_run_cases(c, &bs, g, sel, n_sel, stem);
    for (int bi = 0; bi < QC_CK_SLOTS; bi++) qc_backend_destroy(bs.be[bi]);
    for (int bi = 0; bi < QC_CK_SLOTS; bi++) qc_backend_destroy(bs.alt[bi]);
    if (bs.own_cmp) qc_backend_destroy(bs.cmp);
out:
    ck_fault_model_free(fm);
    qc_model_free(model);
    free(sel);
    qc_golden_free(g);
    c->g = NULL;
}

/* ---- engine entry ---- */

int qc_check_run(qc_check_opts *o, qc_policy *pol, qc_results *res) {
    ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.pol = pol;
    c.res = res;
    c.cal = o->calibrate ? (calib_sink *)o->calib : NULL;
    c.slot_name[QC_CK_REF] = "reference";
    c.slot_name[QC_CK_OPT] = "optimized";
    c.slot_name[QC_CK_EXT] = (o->backends & QC_BACKEND_EXT) ? o->ext.name : NULL;
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
    if (ck_http_open(&c)) { /* an http: runtime that cannot be reached: a usage error */
        qc_golden_paths_free(paths, n);
        return QC_EXIT_ERROR;
    }
    qc_report_console_fit(c.slot_name, QC_CK_SLOTS);
    if (!o->list && !o->calibrate) qc_report_console_header_lazy(); /* above the first row */
    long counter = 0;
    for (int i = 0; i < n; i++) {
        if (!o->list && ck_stop_now(&c)) break; /* --maxfail */
        if (!o->list) qc_report_console_progress(stderr, i, n, paths, ck_wall() - t0, o->quiet);
        check_file(&c, paths[i], &counter);
    }
    if (!o->list) qc_report_console_progress(stderr, n, n, paths, ck_wall() - t0, o->quiet);
    qc_golden_paths_free(paths, n);
    qc_server_close(c.srv);
    res->seconds = ck_wall() - t0;
    if (o->list) return res->n_error ? QC_EXIT_ERROR : c.listed ? QC_EXIT_PASS : QC_EXIT_NOTHING;
    if (res->n_error) return QC_EXIT_ERROR;
    if (res->n_fail) return QC_EXIT_FAIL;
    if (res->n_pass == 0) {
        fprintf(stderr, "qwen-conform: nothing was checked (filter / shard selected no case)\n");
        return QC_EXIT_NOTHING;
    }
    return QC_EXIT_PASS;
}

