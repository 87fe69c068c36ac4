/* qc_check_localise.c — every check of one run against the golden (logits, argmax, states,
 * decode) and the localisation of a failure: the first divergent layer from the hidden
 * states, else the interval the state buffers support, and for decode-only failures the first
 * failing step. */

#include "qc_check_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================================== */
/* localisation                                                                          */
/* ===================================================================================== */

/* Hidden check + the localisation text for the (case, backend, mode) run. */
int ck_check_hidden(ck_ctx *c, const cmp_spec *base, const qc_golden_case *gc, ck_hcap *hc,
                    char *loc, size_t loclen, qc_localisation *where) {
    const qc_config *cfg = c->cfg;
    const int L = cfg->n_layers, T = gc->n_tokens, H = cfg->hidden_size;
    loc[0] = 0;
    cmp_spec s = *base;
    s.check = "prefill.hidden";
    size_t n_seen = 0, n_all = (size_t)(L + 1) * T;
    for (size_t i = 0; i < n_all; i++) n_seen += hc->seen[i];
    if (n_seen == 0 && !hc->bad) {
        ck_emit_simple(c, gc->name, base->backend, base->mode, s.check, QC_VERDICT_SKIP,
                    "the backend reports no hidden states (no trace hook)", NULL);
        snprintf(loc, loclen, "First divergent layer: unknown (no hidden states from the backend)");
        return 0;
    }
    if (n_seen != n_all || hc->bad) {
        int first_missing = -1;
        for (int t = 0; t < T && first_missing < 0; t++)
            for (int i = 0; i <= L; i++)
                if (!hc->seen[(size_t)i * T + t]) {
                    first_missing = t;
                    break;
                }
        char key[320];
        snprintf(key, sizeof key,
                 "hidden states seen for %zu of %zu (index, position) rows; first missing "
                 "position %d%s", n_seen, n_all, gc->start_pos + first_missing,
                 hc->bad ? "; a trace call had a wrong width or index" : "");
        ck_emit_simple(c, gc->name, base->backend, base->mode, s.check, QC_VERDICT_FAIL, key,
                    qc_strdup_printf("The prefill did not produce a hidden state for every prompt "
                                     "position: %s.\nThe runner does not visit (or does not "
                                     "advance through) every position.", key));
        snprintf(loc, loclen, "First divergent layer: unknown (hidden states incomplete: %s)", key);
        return 0;
    }
    /* per-index verdicts (the error curve) */
    qc_tol t;
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, gc->name);
    qc_policy_lookup(c->pol, QC_TC_HIDDEN, base->backend, base->mode, s.check, case_id,
                     "prefill/hidden", &t, NULL);
    int first_bad = -1;
    char curve[2048];
    size_t o = 0;
    curve[0] = 0;
    for (int i = 0; i <= L; i++) {
        qc_metrics m;
        qc_metrics_init(&m, 0);
        qc_tdesc d;
        int64_t sh[3] = {1, T, H};
        qc_tdesc_init(&d, QC_TC_HIDDEN, "prefill/hidden", 3, sh);
        d.atol = t.atol;
        d.rtol = t.rtol;
        qc_metrics_add(&m, &d, hc->hidden + (size_t)i * T * H, gc->prefill_hidden + (size_t)i * T * H);
        int ok = qc_metrics_close(&m);
        if (!ok && first_bad < 0) first_bad = i;
        if (o < sizeof curve)
            o += (size_t)snprintf(curve + o, sizeof curve - o, "%s[%d] %.2g%s", i ? ", " : "", i,
                                  m.n_nonfinite ? INFINITY : m.max_abs, ok ? "" : "!");
    }
    snprintf(where->source, sizeof where->source, "hidden");
    where->kind = first_bad < 0 ? QC_LOC_AFTER_NORM : first_bad == 0 ? QC_LOC_EMBEDDINGS
                  : first_bad == L ? QC_LOC_LAST_OR_NORM : QC_LOC_LAYER;
    where->layer = first_bad <= 0 ? -1 : first_bad - 1;
    if (first_bad < 0) {
        snprintf(loc, loclen,
                 "First divergent layer: none (every hidden state is within tolerance; the "
                 "divergence is after the final norm: lm_head / logits, or in the state "
                 "buffers)\nPer-layer max |diff| of hidden[i]: %s", curve);
    } else if (first_bad == 0) {
        snprintf(loc, loclen, "First divergent layer: embeddings (hidden[0])\nPer-layer max "
                 "|diff| of hidden[i] (! = over tolerance): %s", curve);
    } else if (first_bad == L) {
        snprintf(loc, loclen, "First divergent layer: layer %d (%s) or the final norm "
                 "(hidden[%d] is after the final norm)\nPer-layer max |diff| of hidden[i] "
                 "(! = over tolerance): %s", L - 1, ck_layer_kind(cfg, L - 1), L, curve);
    } else {
        snprintf(loc, loclen, "First divergent layer: layer %d (%s) (hidden[%d] is its output)\n"
                 "Per-layer max |diff| of hidden[i] (! = over tolerance): %s", first_bad - 1,
                 ck_layer_kind(cfg, first_bad - 1), first_bad, curve);
    }
    /* MoE: mixer or MoE block of that layer, and which expert (qc_check_router.c) */
    if (hc->moe && first_bad >= 1)
        ck_moe_localise(c, gc, hc->moe, hc, first_bad - 1, base->backend, base->mode, loc, loclen,
                        where);
    ck_partlist *pl = calloc(1, sizeof *pl);
    if (!pl) {
        ck_emit_simple(c, gc->name, base->backend, base->mode, s.check, QC_VERDICT_ERROR,
                       "out of memory", NULL);
        return first_bad >= 0;
    }
    qc_tdesc d;
    int64_t sh[3] = {L + 1, T, H};
    qc_tdesc_init(&d, QC_TC_HIDDEN, "prefill/hidden", 3, sh);
    d.n_layers = L;
    d.pos0 = gc->start_pos;
    ck_pl_add(pl, &d, hc->hidden, gc->prefill_hidden);
    s.loc_text = loc;
    s.loc = where;
    ck_compare_parts(c, &s, pl);
    free(pl);
    return first_bad >= 0;
}

/* When no hidden states localise: the lowest layer whose `when` ("prefill" / "decode") state
 * fails, appended to loc as an interval the data supports. */
void ck_state_localisation(ck_ctx *c, const qc_golden_case *act, const qc_golden_case *gc,
                           const char *when, const char *backend, const char *mode, char *loc,
                           size_t loclen, qc_localisation *L) {
    ck_partlist *pl = calloc(1, sizeof *pl);
    if (!pl) return;
    int dec = !strcmp(when, "decode");
    ck_add_state_parts(pl, c->cfg, when, -1, dec ? &act->decode_state : &act->prefill_state,
                       dec ? &gc->decode_state : &gc->prefill_state);
    ck_state_localise_parts(c, pl, gc, when, backend, mode, loc, loclen, L);
    free(pl);
}

/* The interval of ck_state_localisation from prepared state parts (every part a state tensor
 * of one layer; absent tensors simply have no part). States only show that a layer's own
 * state is right or wrong, so the text never names a single divergent layer: the divergence
 * began at or before the first layer with a failing state, after the last layer below it
 * whose states pass. */
void ck_state_localise_parts(ck_ctx *c, ck_partlist *pl, const qc_golden_case *gc, const char *when,
                             const char *backend, const char *mode, char *loc, size_t loclen,
                             qc_localisation *L) {
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, gc->name);
    int best = -1;
    const char *what = "";
    for (int i = 0; i < pl->n; i++) {
        qc_tol t;
        qc_policy_lookup(c->pol, pl->p[i].d.cls, backend, mode, NULL, case_id, pl->p[i].d.path, &t,
                         NULL);
        pl->p[i].d.atol = t.atol, pl->p[i].d.rtol = t.rtol;
        qc_metrics m;
        qc_metrics_init(&m, 0);
        qc_metrics_add(&m, &pl->p[i].d, pl->p[i].a, pl->p[i].g);
        if (!qc_metrics_close(&m) && (best < 0 || pl->p[i].d.layer < best)) {
            best = pl->p[i].d.layer;
            what = qc_tclass_str(pl->p[i].d.cls);
        }
    }
    size_t k = strlen(loc);
    if (best >= 0) {
        /* the last layer below `best` that has a state (every one of them passes) */
        int below = -1;
        for (int i = 0; i < pl->n; i++)
            if (pl->p[i].d.layer < best && pl->p[i].d.layer > below) below = pl->p[i].d.layer;
        if (L && (L->kind == QC_LOC_NONE || L->kind == QC_LOC_AFTER_NORM)) {
            L->kind = QC_LOC_AT_OR_BEFORE;
            L->layer = best;
            L->layer_lo = below;
            snprintf(L->source, sizeof L->source, "state");
        }
        /* the wording is matched by tests (test_faults.sh, test_exec_adapters.sh) */
        char after[200], span[32];
        if (best == below + 1) snprintf(span, sizeof span, "layer %d", best);
        else snprintf(span, sizeof span, "layers %d-%d", below + 1, best);
        if (below >= 0)
            snprintf(after, sizeof after, ", after layer %d whose state passes (in layer %d "
                     "after its state update, or in %s; states cannot pin it further)", below,
                     below, span);
        else
            snprintf(after, sizeof after, " (the embeddings included; states cannot pin it "
                     "further)");
        snprintf(loc + k, loclen - k, "%sFirst layer whose state diverges after %s: layer %d "
                 "(%s, %s); the divergence began at or before layer %d%s", k ? "\n" : "", when,
                 best, ck_layer_kind(c->cfg, best), what, best, after);
    }
}

int ck_first_bad_logits_row(ck_ctx *c, const qc_golden_case *gc, const qc_golden_case *act,
                            const char *backend, const char *mode, int prefill) {
    const int V = c->cfg->vocab_size;
    const int rows = prefill ? gc->n_tokens : gc->n_decode;
    const int pos0 = prefill ? gc->start_pos : gc->start_pos + gc->n_tokens;
    const char *path = prefill ? "prefill/logits" : "decode/logits";
    const float *a = prefill ? act->prefill_logits : act->decode_logits;
    const float *g = prefill ? gc->prefill_logits : gc->decode_logits;
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, gc->name);
    qc_tol t;
    qc_policy_lookup(c->pol, QC_TC_LOGITS, backend, mode, prefill ? "prefill.logits" : "decode.logits",
                     case_id, path, &t, NULL);
    for (int s = 0; s < rows; s++) {
        qc_tdesc d;
        ck_desc_logits(&d, path, 1, V, pos0 + s, !prefill);
        d.atol = t.atol, d.rtol = t.rtol;
        qc_metrics m;
        qc_metrics_init(&m, 0);
        qc_metrics_add(&m, &d, a + (size_t)s * V, g + (size_t)s * V);
        if (!qc_metrics_close(&m)) return s;
    }
    return -1;
}

/* ===================================================================================== */
/* the checks of one run against the golden                                              */
/* ===================================================================================== */

/* The decode rows of ck_vs_golden_checks: decode.logits (with the decode-only localisation when
 * the prefill passed) and the decode states (localised by themselves when every logits row
 * passes). s and pl are the caller's (reused). */
static void decode_checks(ck_ctx *c, cmp_spec s, ck_partlist *pl, const qc_golden_case *gc,
                          const qc_golden_case *act, const char *backend, const char *mode,
                          const char *loc, const qc_localisation *L, const char *state_skip,
                          const char *decode_loc, const qc_localisation *decode_L,
                          qc_verdict prefill_v) {
    const qc_config *cfg = c->cfg;
    const int V = cfg->vocab_size;
    qc_tdesc d;
    static const char *const dnames[] = {"decode.k_cache", "decode.v_cache", "decode.conv_state",
                                         "decode.recurrent_state"};
    /* decode-only localisation: prefill passes, so the divergence starts in decode */
    char dloc[4096] = "";
    qc_localisation dL;
    ck_loc_init(&dL);
    int step = ck_first_bad_logits_row(c, gc, act, backend, mode, 0);
    if (prefill_v == QC_VERDICT_PASS && step >= 0) {
        if (decode_L && decode_L->kind != QC_LOC_NONE) dL = *decode_L;
        snprintf(dloc, sizeof dloc, "Prefill logits pass; the divergence starts in decode: "
                 "first failing step %d (position %d, fed token %d)", step,
                 gc->start_pos + gc->n_tokens + step, gc->decode_tokens[step]);
        if (act->decode_state.present && gc->decode_state.present)
            ck_state_localisation(c, act, gc, "decode", backend, mode, dloc, sizeof dloc, &dL);
        else if (!decode_loc)
            snprintf(dloc + strlen(dloc), sizeof dloc - strlen(dloc), "\nNo decode state "
                     "or hidden states from the runtime: the layer cannot be named from this "
                     "data");
        if (decode_loc)
            snprintf(dloc + strlen(dloc), sizeof dloc - strlen(dloc), "\n%s", decode_loc);
        dL.step = step;
    }
    const char *dl = dloc[0] ? dloc : loc;
    /* every logits row passes but a decode state may not: the per-layer decode states
     * localise it (a state bug the logits do not show yet); the golden holds the state
     * after the last step only, so the step is not resolved */
    char sloc[4096] = "";
    qc_localisation sL;
    ck_loc_init(&sL);
    if (prefill_v == QC_VERDICT_PASS && step < 0 && act->decode_state.present &&
        gc->decode_state.present) {
        snprintf(sloc, sizeof sloc, "Prefill and every decode step's logits pass; the state "
                 "after the last decode step (%d) does not:", gc->n_decode - 1);
        size_t k0 = strlen(sloc);
        ck_state_localisation(c, act, gc, "decode", backend, mode, sloc, sizeof sloc, &sL);
        if (strlen(sloc) == k0) sloc[0] = '\0'; /* every decode state passes */
        else sL.step = gc->n_decode - 1;
    }
    memset(pl, 0, sizeof *pl);
    ck_desc_logits(&d, "decode/logits", gc->n_decode, V, gc->start_pos + gc->n_tokens, 1);
    ck_pl_add(pl, &d, act->decode_logits, gc->decode_logits);
    s.check = "decode.logits";
    s.logits_stats = 1;
    s.loc_text = dl;
    s.loc = dloc[0] ? &dL : L;
    ck_compare_parts(c, &s, pl);
    s.logits_stats = 0;
    if (sloc[0]) {
        s.loc_text = sloc;
        s.loc = &sL;
    }
    for (int k = QC_TC_K_CACHE; k <= QC_TC_RECURRENT_STATE; k++) {
        memset(pl, 0, sizeof *pl);
        ck_add_state_parts(pl, cfg, "decode", k, &act->decode_state, &gc->decode_state);
        if (pl->n == 0 && !pl->problem[0]) continue;
        s.check = dnames[k - QC_TC_K_CACHE];
        if (state_skip && !act->decode_state.present)
            ck_emit_simple(c, gc->name, backend, mode, s.check, QC_VERDICT_SKIP, state_skip,
                           NULL);
        else
            ck_compare_parts(c, &s, pl);
    }
}

void ck_vs_golden_checks(ck_ctx *c, const qc_golden_case *gc, const qc_golden_case *act,
                         const char *backend, const char *mode, const char *dump_file,
                         const char *loc, const qc_localisation *L, const char *state_skip,
                         const char *decode_loc, const qc_localisation *decode_L) {
    const qc_config *cfg = c->cfg;
    const int V = cfg->vocab_size;
    cmp_spec s = {.case_name = gc->name, .backend = backend, .mode = mode,
                  .vs_golden = 1, .loc_text = loc, .loc = L, .dump_file = dump_file};
    ck_partlist *pl = calloc(1, sizeof *pl);
    if (!pl) {
        ck_emit_simple(c, gc->name, backend, mode, "prefill.logits", QC_VERDICT_ERROR,
                       "out of memory", NULL);
        return;
    }
    qc_tdesc d;
    /* prefill logits */
    ck_desc_logits(&d, "prefill/logits", gc->n_tokens, V, gc->start_pos, 0);
    ck_pl_add(pl, &d, act->prefill_logits, gc->prefill_logits);
    s.check = "prefill.logits";
    s.logits_stats = 1;
    qc_verdict prefill_v = ck_compare_parts(c, &s, pl);
    /* argmax agreement (prefill rows + teacher-forced decode rows) */
    {
        qc_metrics m;
        qc_metrics_init(&m, 0);
        qc_metrics_add_logits(&m, &d, act->prefill_logits, gc->prefill_logits,
                              qc_policy_tie_margin(c->pol));
        qc_tdesc dd;
        if (gc->n_decode > 0) {
            ck_desc_logits(&dd, "decode/logits", gc->n_decode, V, gc->start_pos + gc->n_tokens, 1);
            qc_metrics_add_logits(&m, &dd, act->decode_logits, gc->decode_logits,
                                  qc_policy_tie_margin(c->pol));
        }
        qc_metrics_finish(&m);
        long hard = m.rows - m.top1_agree - m.top1_near_tie;
        qc_check_row row;
        ck_row_init(&row, c->stem, gc->name, backend, mode, "argmax");
        row.verdict = hard == 0 ? QC_VERDICT_PASS : QC_VERDICT_FAIL;
        snprintf(row.keyline, sizeof row.keyline, "top1 %ld/%ld rows agree (%ld near-tie flips, "
                 "tie margin %g)", m.top1_agree, m.rows, m.top1_near_tie,
                 qc_policy_tie_margin(c->pol));
        if (hard) {
            char mean[256];
            qc_tdesc_meaning(&m.first_top1_flip.desc, m.first_top1_flip.idx, mean, sizeof mean);
            row.detail = qc_strdup_printf("Argmax disagrees on %ld row(s) outside near-ties\nFirst "
                                          "flip: %s: golden argmax %d, actual argmax at %s "
                                          "(golden top1-top2 margin %.4g)%s%s",
                                          hard, m.first_top1_flip.desc.path, m.flip_golden_arg,
                                          mean, m.first_top1_flip.value, loc ? "\n" : "",
                                          loc ? loc : "");
        }
        ck_emit(c, &row);
    }
    /* state checks: compared, or SKIPPED with the reason the actual run has none */
    static const char *const pnames[] = {"prefill.k_cache", "prefill.v_cache", "prefill.conv_state",
                                         "prefill.recurrent_state"};
    s.logits_stats = 0;
    for (int k = QC_TC_K_CACHE; k <= QC_TC_RECURRENT_STATE; k++) {
        memset(pl, 0, sizeof *pl);
        ck_add_state_parts(pl, cfg, "prefill", k, &act->prefill_state, &gc->prefill_state);
        if (pl->n == 0 && !pl->problem[0]) continue;
        s.check = pnames[k - QC_TC_K_CACHE];
        if (state_skip && !act->prefill_state.present)
            ck_emit_simple(c, gc->name, backend, mode, s.check, QC_VERDICT_SKIP, state_skip, NULL);
        else
            ck_compare_parts(c, &s, pl);
    }
    if (gc->n_decode > 0)
        decode_checks(c, s, pl, gc, act, backend, mode, loc, L, state_skip, decode_loc, decode_L,
                      prefill_v);
    free(pl);
}

