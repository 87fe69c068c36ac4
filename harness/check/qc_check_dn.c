/* qc_check_dn.c — the DeltaNet kernel checks of one (case, backend), dynamic prefill:
 * chunked_eq_recurrent (the chunked kernel vs the token recurrence; when they disagree, the
 * first layer where they diverge, from the hidden states and the state buffers of both runs)
 * and chunk_sweep (chunk sizes 1, 3, 64 and the whole prompt, each vs the golden).
 *
 * dn_kernel / chunk_size reach a runtime under test only here (docs/adapter-protocol.md,
 * "dn_kernel and chunk_size"): the engine keeps it in QC_REMOTE_KOPTS_OWN (nothing sent, its
 * own defaults) and these checks switch to QC_REMOTE_KOPTS_ASK around their runs:
 * chunked_eq_recurrent runs it with dn_kernel=recurrent, then dn_kernel=chunked; chunk_sweep
 * with dn_kernel=chunked and chunk_size=N. A built-in backend's chunked run is the engine's
 * dynamic-mode run (its default kernel is chunked): its rows are what they always were.
 */

#include "qc_check_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_remote.h"

#define CK_CER "chunked_eq_recurrent"

/* One part of the two runs against chunked_eq_recurrent's tolerance for it (the policy's, set
 * into p->d): its metrics into *m; 1 when within. */
static int part_within(ck_ctx *c, const char *bname, const char *case_id, ck_part *p,
                       qc_metrics *m) {
    qc_tol t;
    qc_policy_lookup(c->pol, p->d.cls, bname, "dynamic", CK_CER, case_id, p->d.path, &t, NULL);
    p->d.atol = t.atol, p->d.rtol = t.rtol;
    qc_metrics_init(m, 0);
    qc_metrics_add(m, &p->d, p->a, p->g);
    return qc_metrics_close(m);
}

/* 1 when every tensor of the two runs is within chunked_eq_recurrent's tolerance (the
 * element-wise test of ck_compare_parts; a structural problem counts as agreement here: the
 * row reports it, and per-layer data would not explain it). */
static int runs_agree(ck_ctx *c, const qc_golden_case *gc, const qc_golden_case *ch,
                      const qc_golden_case *rec, const char *bname) {
    ck_partlist *pl = calloc(1, sizeof *pl);
    if (!pl) return 1;
    ck_add_all_parts(pl, c->cfg, ch, rec);
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, gc->name);
    int ok = 1;
    for (int i = 0; i < pl->n && ok && !pl->problem[0]; i++) {
        qc_metrics m;
        ok = part_within(c, bname, case_id, &pl->p[i], &m);
    }
    free(pl);
    return ok;
}

/* The prompt's hidden states [L+1, T, H] of one dynamic run with kernel k into h->hidden. */
static qc_status capture_hidden(ck_ctx *c, qc_backend *be, const qc_golden_case *gc, qc_dn_kernel k,
                                ck_hcap *h, qc_err *err) {
    const int L1 = c->cfg->n_layers + 1, T = gc->n_tokens;
    memset(h->seen, 0, (size_t)L1 * T);
    h->bad = 0;
    qc_golden_case tmp;
    qc_call call = qc_backend_call_defaults(&be->opts);
    call.dn_kernel = k;
    qc_status s = ck_run_call(be, &call, gc, QC_MODE_DYNAMIC, c->o, 0, h, &tmp, err);
    if (s) return s;
    qc_case_free(c->cfg, &tmp);
    size_t seen = 0;
    for (size_t i = 0; i < (size_t)L1 * T; i++) seen += h->seen[i];
    if (seen != (size_t)L1 * T || h->bad)
        return qc_errf(err, QC_ERR_RUNTIME, "%s: hidden states for %zu of %zu (index, position) "
                       "rows%s", be->name, seen, (size_t)L1 * T,
                       h->bad ? "; a trace call had a wrong width or index" : "");
    return QC_OK;
}

/* From the hidden states of both kernels: the first divergent index, its text into loc and L.
 * Returns 1 when it named a place (a layer, the embeddings, or "after the final norm"). */
static int localise_hidden(ck_ctx *c, qc_backend *be, const char *bname, const qc_golden_case *gc,
                           char *loc, size_t n, qc_localisation *L) {
    const qc_config *cfg = c->cfg;
    const int Ln = cfg->n_layers, T = gc->n_tokens, H = cfg->hidden_size;
    size_t k = strlen(loc);
    ck_hcap a = {0}, b = {0};
    a.L1 = b.L1 = Ln + 1, a.T = b.T = T, a.H = b.H = H, a.lo = b.lo = gc->start_pos;
    a.hidden = calloc((size_t)(Ln + 1) * T * H, sizeof(float));
    b.hidden = calloc((size_t)(Ln + 1) * T * H, sizeof(float));
    a.seen = calloc((size_t)(Ln + 1) * T, 1);
    b.seen = calloc((size_t)(Ln + 1) * T, 1);
    qc_err err;
    qc_err_clear(&err);
    int named = 0;
    if (!a.hidden || !b.hidden || !a.seen || !b.seen) {
        snprintf(loc + k, n - k, "%sFirst divergent layer: unknown (out of memory for the "
                 "hidden states)", k ? "\n" : "");
        goto done;
    }
    /* recurrent first, as the check's own runs: a runtime under test is left at chunked */
    if (capture_hidden(c, be, gc, QC_DN_RECURRENT, &b, &err) ||
        capture_hidden(c, be, gc, QC_DN_CHUNKED, &a, &err)) {
        snprintf(loc + k, n - k, "%sFirst divergent layer: unknown (the hidden states of the two "
                 "kernels could not be captured: %s)", k ? "\n" : "", err.msg);
        goto done;
    }
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, gc->name);
    qc_tol t;
    qc_policy_lookup(c->pol, QC_TC_HIDDEN, bname, "dynamic", CK_CER, case_id, "prefill/hidden",
                     &t, NULL);
    int first = -1;
    char curve[2048];
    size_t o = 0;
    curve[0] = 0;
    for (int i = 0; i <= Ln; i++) {
        qc_metrics m;
        qc_metrics_init(&m, 0);
        qc_tdesc d;
        int64_t sh[3] = {1, T, H};
        qc_tdesc_init(&d, QC_TC_HIDDEN, "prefill/hidden", 3, sh);
        d.atol = t.atol, d.rtol = t.rtol;
        qc_metrics_add(&m, &d, a.hidden + (size_t)i * T * H, b.hidden + (size_t)i * T * H);
        int ok = qc_metrics_close(&m);
        if (!ok && first < 0) first = i;
        if (o < sizeof curve)
            o += (size_t)snprintf(curve + o, sizeof curve - o, "%s[%d] %.2g%s", i ? ", " : "", i,
                                  m.n_nonfinite ? INFINITY : m.max_abs, ok ? "" : "!");
    }
    named = 1;
    snprintf(L->source, sizeof L->source, "hidden");
    L->kind = first < 0 ? QC_LOC_AFTER_NORM : first == 0 ? QC_LOC_EMBEDDINGS
              : first == Ln ? QC_LOC_LAST_OR_NORM : QC_LOC_LAYER;
    L->layer = first <= 0 ? -1 : first - 1;
    const char *pre = k ? "\n" : "";
    if (first < 0)
        snprintf(loc + k, n - k, "%sFirst divergent layer: none (every prompt hidden state of the "
                 "chunked run agrees with the recurrent run's; the difference is in the state "
                 "buffers or after the final norm)\nPer-layer max |chunked - recurrent| of "
                 "hidden[i]: %s", pre, curve);
    else if (first == 0)
        snprintf(loc + k, n - k, "%sFirst divergent layer: embeddings (hidden[0] of the chunked "
                 "and recurrent runs)\nPer-layer max |chunked - recurrent| of hidden[i] (! = over "
                 "tolerance): %s", pre, curve);
    else
        snprintf(loc + k, n - k, "%sFirst divergent layer: layer %d (%s) (hidden[%d]%s: the "
                 "chunked and recurrent runs agree below it)\nPer-layer max |chunked - recurrent| "
                 "of hidden[i] (! = over tolerance): %s", pre, first - 1,
                 ck_layer_kind(cfg, first - 1), first,
                 first == Ln ? ", after the final norm" : " is its output", curve);
done:
    free(a.hidden), free(b.hidden), free(a.seen), free(b.seen);
    return named;
}

/* From the state buffers of both runs (prefill, else decode): the lowest layer whose state
 * differs and which buffer, appended to loc; L is filled when nothing named a layer yet.
 * Returns 1 when a state differs. */
static int localise_state(ck_ctx *c, const char *bname, const qc_golden_case *gc,
                          const qc_golden_case *ch, const qc_golden_case *rec, char *loc,
                          size_t n, qc_localisation *L) {
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, gc->name);
    ck_partlist *pl = calloc(1, sizeof *pl);
    if (!pl) return 0;
    int found = 0;
    for (int dec = 0; dec <= 1 && !found; dec++) {
        const char *when = dec ? "decode" : "prefill";
        if (dec && gc->n_decode == 0) break;
        memset(pl, 0, sizeof *pl);
        ck_add_state_parts(pl, c->cfg, when, -1, dec ? &ch->decode_state : &ch->prefill_state,
                           dec ? &rec->decode_state : &rec->prefill_state);
        int best = -1, below = -1, n_bad = 0;
        const char *what = "";
        double worst = 0.0;
        for (int i = 0; i < pl->n; i++) {
            qc_metrics m;
            if (part_within(c, bname, case_id, &pl->p[i], &m)) continue;
            n_bad++;
            if (best < 0 || pl->p[i].d.layer < best) {
                best = pl->p[i].d.layer;
                what = qc_tclass_str(pl->p[i].d.cls);
                worst = m.n_nonfinite ? INFINITY : m.max_abs;
            }
        }
        if (best < 0) continue;
        found = 1;
        for (int i = 0; i < pl->n; i++)
            if (pl->p[i].d.layer < best && pl->p[i].d.layer > below) below = pl->p[i].d.layer;
        if (L->kind == QC_LOC_NONE || L->kind == QC_LOC_AFTER_NORM) {
            L->kind = QC_LOC_AT_OR_BEFORE;
            L->layer = best;
            L->layer_lo = below;
            if (dec) L->step = gc->n_decode - 1;
            snprintf(L->source, sizeof L->source, "state");
        }
        size_t k = strlen(loc);
        snprintf(loc + k, n - k, "%sFirst layer whose state differs between the chunked and "
                 "recurrent runs after %s: layer %d (%s, %s, max |diff| %.3g)%s; %d state "
                 "buffer(s) differ in all", k ? "\n" : "", when, best,
                 ck_layer_kind(c->cfg, best), what, worst,
                 below >= 0 ? ", every state of the layers below it agrees"
                            : " (the lowest layer with a state)", n_bad);
    }
    free(pl);
    return found;
}

/* Why chunked and recurrent disagree, as far as the runtime's data shows: loc / L. */
static void localise(ck_ctx *c, qc_backend *be, const char *bname, const qc_golden_case *gc,
                     const qc_golden_case *ch, const qc_golden_case *rec, char *loc, size_t n,
                     qc_localisation *L) {
    int hid = (be->caps & QC_BE_CAP_HIDDEN) && gc->n_tokens > 0;
    int st = ch->prefill_state.present && rec->prefill_state.present;
    if (hid) localise_hidden(c, be, bname, gc, loc, n, L);
    if (st) localise_state(c, bname, gc, ch, rec, loc, n, L);
    size_t k = strlen(loc);
    if (!hid && !st)
        snprintf(loc + k, n - k, "%sFirst divergent layer: unknown: %s announces neither "
                 "'hidden' nor 'state_read'. Announce 'hidden' (get_hidden: per-layer hidden "
                 "states) to name the first layer where the chunked and recurrent runs diverge, "
                 "or 'state_read' (get_state) to name the first layer and state buffer that "
                 "differ", k ? "\n" : "", bname);
    else if (!hid)
        snprintf(loc + k, n - k, "%s(%s does not announce 'hidden': announce it to name the "
                 "first divergent layer from the hidden states, not only from the states)",
                 k ? "\n" : "", bname);
}

static void check_chunked_eq_recurrent(ck_ctx *c, qc_backend *be, const char *bname,
                                       const qc_golden_case *gc, const qc_golden_case *dyn) {
    const qc_config *cfg = c->cfg;
    if (!(be->caps & QC_BE_CAP_DN_KERNEL)) {
        ck_emit_cap_skip(c, gc->name, bname, "dynamic", CK_CER, QC_BE_CAP_DN_KERNEL);
        return;
    }
    /* a runtime under test: both kernels asked for explicitly (its dynamic-mode run used its
     * own default); a built-in backend: the dynamic-mode run is the chunked one */
    int remote = qc_remote_kernel_opts(be, QC_REMOTE_KOPTS_ASK);
    qc_golden_case rec, ch;
    qc_err err;
    qc_err_clear(&err);
    qc_call call = qc_backend_call_defaults(&be->opts);
    call.dn_kernel = QC_DN_RECURRENT;
    qc_status s = ck_run_call(be, &call, gc, QC_MODE_DYNAMIC, c->o, 0, NULL, &rec, &err);
    call.dn_kernel = QC_DN_CHUNKED;
    if (!s && remote &&
        (s = ck_run_call(be, &call, gc, QC_MODE_DYNAMIC, c->o, 0, NULL, &ch, &err)))
        qc_case_free(cfg, &rec);
    if (s) {
        if (remote) qc_remote_kernel_opts(be, QC_REMOTE_KOPTS_OWN);
        ck_emit_simple(c, gc->name, bname, "dynamic", CK_CER, ck_failed_run_verdict(s), err.msg,
                       NULL);
        return;
    }
    const qc_golden_case *chk = remote ? &ch : dyn;
    char loc[8192] = "";
    qc_localisation L;
    ck_loc_init(&L);
    if (!runs_agree(c, gc, chk, &rec, bname)) localise(c, be, bname, gc, chk, &rec, loc,
                                                       sizeof loc, &L);
    if (remote) qc_remote_kernel_opts(be, QC_REMOTE_KOPTS_OWN);
    ck_partlist *pl = calloc(1, sizeof *pl);
    if (pl) {
        ck_add_all_parts(pl, cfg, chk, &rec);
        cmp_spec sp = {.case_name = gc->name, .backend = bname, .mode = "dynamic",
                       .check = CK_CER, .loc_text = loc[0] ? loc : NULL,
                       .loc = L.kind != QC_LOC_NONE ? &L : NULL,
                       .extra = remote ? "Chunked DeltaNet (actual, dn_kernel=chunked) vs token "
                                         "recurrence (expected, dn_kernel=recurrent), dynamic "
                                         "prefill"
                                       : "Chunked DeltaNet (actual) vs token recurrence "
                                         "(expected), dynamic prefill"};
        ck_compare_parts(c, &sp, pl);
        free(pl);
    } else {
        ck_emit_simple(c, gc->name, bname, "dynamic", CK_CER, QC_VERDICT_ERROR, "out of memory",
                       NULL);
    }
    if (remote) qc_case_free(cfg, &ch);
    qc_case_free(cfg, &rec);
}

/* chunk_sweep: chunk sizes around the 64 boundary, each vs the golden (prompts of >= 63). */
static void check_chunk_sweep(ck_ctx *c, qc_backend *be, const char *bname,
                              const qc_golden_case *gc) {
    const qc_config *cfg = c->cfg;
    if (gc->n_tokens < 63) return;
    if (!(be->caps & QC_BE_CAP_CHUNK_SIZE)) {
        ck_emit_cap_skip(c, gc->name, bname, "dynamic", "chunk_sweep", QC_BE_CAP_CHUNK_SIZE);
        return;
    }
    int msl = gc->max_seq_len > 0 ? gc->max_seq_len : 128;
    /* the whole prompt in one chunk, or the largest chunk the backend's scratch holds (the
     * call contract: be->max_chunk_tokens) */
    if (be->max_chunk_tokens > 0 && msl > be->max_chunk_tokens) msl = be->max_chunk_tokens;
    int sizes[4] = {1, 3, 64, msl};
    int remote = qc_remote_kernel_opts(be, QC_REMOTE_KOPTS_ASK);
    for (int k = 0; k < 4; k++) {
        int dup = 0;
        for (int j = 0; j < k; j++) dup |= sizes[j] == sizes[k];
        if (dup) continue;
        char name[32];
        snprintf(name, sizeof name, "chunk_sweep.c%d", sizes[k]);
        qc_golden_case sw;
        qc_call call = qc_backend_call_defaults(&be->opts);
        call.chunk_size = sizes[k];
        qc_err err;
        qc_err_clear(&err);
        qc_status s = ck_run_call(be, &call, gc, QC_MODE_DYNAMIC, c->o, 0, NULL, &sw, &err);
        if (s == QC_OK) {
            char extra[160];
            snprintf(extra, sizeof extra, "Dynamic prefill with DeltaNet chunk size %d vs the "
                     "golden", sizes[k]);
            ck_partlist *pl = calloc(1, sizeof *pl);
            if (pl) {
                ck_add_all_parts(pl, cfg, &sw, gc);
                cmp_spec sp = {.case_name = gc->name, .backend = bname, .mode = "dynamic",
                               .check = name, .vs_golden = 1, .logits_stats = 1, .extra = extra,
                               .dump_file = c->slot[ck_slot_of(c, bname)].dump_path[QC_MODE_DYNAMIC]};
                ck_compare_parts(c, &sp, pl);
                free(pl);
            }
            qc_case_free(cfg, &sw);
        } else {
            ck_emit_simple(c, gc->name, bname, "dynamic", name, ck_failed_run_verdict(s), err.msg,
                           NULL);
        }
    }
    if (remote) qc_remote_kernel_opts(be, QC_REMOTE_KOPTS_OWN);
}

void ck_check_dn_variants(ck_ctx *c, qc_backend *be, const char *bname, const qc_golden_case *gc,
                          const qc_golden_case *dyn) {
    check_chunked_eq_recurrent(c, be, bname, gc, dyn);
    check_chunk_sweep(c, be, bname, gc);
}
