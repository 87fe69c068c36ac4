/* qc_diff_checks.c — the checks of one ACTUAL case against its golden case, for
 * `qwen-conform diff`: the inputs, prefill logits on the rows the ACTUAL has, argmax, hidden
 * states, state buffers (each optional; a partial state compares what is there), decode.
 * An absent optional tensor gives a SKIPPED row with the reason, never a FAIL; a NaN / Inf is
 * a FAIL found by the comparison (its first location in the row's detail). */

#include "qc_diff_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Golden slices of K-1-column conv states, freed with the case. */
typedef struct {
    float *p[2 * QC_MAX_LAYERS];
    int n;
} qd_scratch;

static void qd_scratch_free(qd_scratch *sc) {
    for (int i = 0; i < sc->n; i++) free(sc->p[i]);
    sc->n = 0;
}

/* ===================================================================================== */
/* inputs                                                                                */
/* ===================================================================================== */

/* The first index where two id lists differ, as text into msg; 0 when equal. */
static int qd_ids_differ(const char *casepath, const char *what, const int32_t *a, int na,
                         const int32_t *g, int ng, char *msg, size_t n) {
    if (na != ng) {
        snprintf(msg, n, "%s/%s: ACTUAL has %d ids, the golden %d", casepath, what, na, ng);
        return 1;
    }
    for (int i = 0; i < na; i++)
        if (a[i] != g[i]) {
            snprintf(msg, n, "%s/%s[%d]: ACTUAL %d, golden %d", casepath, what, i, (int)a[i],
                     (int)g[i]);
            return 1;
        }
    return 0;
}

/* The inputs the ACTUAL recorded (each optional) against the golden's: 1 when they agree,
 * else an ERROR row naming the input, the first differing index and both values. */
static int qd_inputs(ck_ctx *c, const diff_opts *d, const qc_actual *a, const qc_golden_case *gc,
                     const qc_actual_case *ac) {
    char casepath[1200], msg[1400] = "";
    snprintf(casepath, sizeof casepath, "%s: /cases/%s", a->path, gc->name);
    int bad = 0;
    if (ac->has_start_pos && ac->start_pos != gc->start_pos) {
        snprintf(msg, sizeof msg, "%s (attr start_pos): ACTUAL %d, golden %d", casepath,
                 ac->start_pos, gc->start_pos);
        bad = 1;
    }
    if (!bad && ac->n_history >= 0)
        bad = qd_ids_differ(casepath, "history_tokens", ac->history, ac->n_history, gc->history,
                            gc->n_history, msg, sizeof msg);
    /* tokens: the prompt, or (a continuation) the whole sequence history + prompt */
    int whole = ac->n_tokens >= 0 && gc->n_history > 0 &&
                ac->n_tokens == gc->n_history + gc->n_tokens &&
                !memcmp(ac->tokens, gc->history, (size_t)gc->n_history * sizeof(int32_t));
    if (!bad && ac->n_tokens >= 0)
        bad = whole ? qd_ids_differ(casepath, "tokens", ac->tokens + gc->n_history, gc->n_tokens,
                                    gc->tokens, gc->n_tokens, msg, sizeof msg)
                    : qd_ids_differ(casepath, "tokens", ac->tokens, ac->n_tokens, gc->tokens,
                                    gc->n_tokens, msg, sizeof msg);
    if (!bad && ac->n_decode_tokens >= 0 && ac->n_decode_tokens != gc->n_decode) {
        snprintf(msg, sizeof msg, "%s/decode/tokens: ACTUAL has %d ids, the golden %d", casepath,
                 ac->n_decode_tokens, gc->n_decode);
        bad = 1;
    }
    if (!bad) return 1;
    char key[1500];
    snprintf(key, sizeof key, "input mismatch: %s", msg);
    ck_emit_simple(c, gc->name, d->label, "file", "inputs", QC_VERDICT_ERROR, key,
                   qc_strdup_printf("Input mismatch: %s.\nThe ACTUAL case was not run on the "
                                    "golden's inputs (start_pos, history_tokens, tokens and the "
                                    "teacher-forced decode/tokens must be the golden's); its "
                                    "outputs cannot be compared.", msg));
    return 0;
}

/* ===================================================================================== */
/* parts                                                                                 */
/* ===================================================================================== */

/* The prefill logits parts: one per run of consecutive rows the ACTUAL has. 0, or -1 when
 * there are more runs than parts. */
static int qd_logit_parts(ck_partlist *pl, const qc_config *cfg, const qc_golden_case *gc,
                          const qc_actual_case *ac) {
    const int V = cfg->vocab_size;
    for (int i = 0; i < ac->n_rows;) {
        int j = i + 1;
        while (j < ac->n_rows && ac->rows[j] == ac->rows[j - 1] + 1) j++;
        if (pl->n >= MAX_PARTS) return -1;
        qc_tdesc dd;
        ck_desc_logits(&dd, "prefill/logits", j - i, V, gc->start_pos + ac->rows[i], 0);
        ck_pl_add(pl, &dd, ac->prefill_logits + (size_t)i * V,
                  gc->prefill_logits + (size_t)ac->rows[i] * V);
        i = j;
    }
    return 0;
}

/* The state parts of class cls (every class when cls < 0) at `when`: the tensors the ACTUAL
 * has. *n_want / *n_have count the golden's tensors of the class and those the ACTUAL has.
 * A K-1-column conv state is compared with the golden's K-1 newest columns (sliced into sc). */
static void qd_state_parts(ck_partlist *pl, const qc_config *cfg, const char *when, int cls,
                           const qc_golden_state *a, const qc_golden_state *g, int conv_cols,
                           qd_scratch *sc, int *n_want, int *n_have) {
    const int K = cfg->conv_kernel, C = qc_cfg_conv_dim(cfg);
    *n_want = *n_have = 0;
    if (!g->present) return;
    for (int l = 0; l < cfg->n_layers; l++) {
        const int full = cfg->layer_types[l] == QC_LAYER_FULL;
        for (int k = QC_TC_K_CACHE; k <= QC_TC_RECURRENT_STATE; k++) {
            if (cls >= 0 && k != cls) continue;
            int kv = k == QC_TC_K_CACHE || k == QC_TC_V_CACHE;
            if (kv != full) continue;
            const float *pg = k == QC_TC_K_CACHE ? g->k_cache[l] : k == QC_TC_V_CACHE ?
                              g->v_cache[l] : k == QC_TC_CONV_STATE ? g->conv_state[l] :
                              g->recurrent_state[l];
            const float *pa = !a->present ? NULL : k == QC_TC_K_CACHE ? a->k_cache[l] :
                              k == QC_TC_V_CACHE ? a->v_cache[l] : k == QC_TC_CONV_STATE ?
                              a->conv_state[l] : a->recurrent_state[l];
            if (!pg) continue;
            (*n_want)++;
            if (!pa) continue;
            (*n_have)++;
            int64_t sh[3];
            int nd = 3;
            if (kv) sh[0] = cfg->n_kv_heads, sh[1] = g->n_pos, sh[2] = cfg->head_dim;
            else if (k == QC_TC_CONV_STATE) sh[0] = C, sh[1] = K, nd = 2;
            else sh[0] = cfg->lin_n_v_heads, sh[1] = cfg->lin_k_dim, sh[2] = cfg->lin_v_dim;
            if (k == QC_TC_CONV_STATE && conv_cols == K - 1) {
                float *s = sc->n < 2 * QC_MAX_LAYERS ? malloc((size_t)C * (K - 1) * sizeof *s)
                                                     : NULL;
                if (!s) continue;
                sc->p[sc->n++] = s;
                for (int ch = 0; ch < C; ch++)
                    memcpy(s + (size_t)ch * (K - 1), pg + (size_t)ch * K + 1,
                           (size_t)(K - 1) * sizeof *s);
                pg = s;
                sh[1] = K - 1;
            }
            ck_pl_add_state(pl, cfg, when, l, (qc_tclass)k, nd, sh, pa, pg);
        }
    }
}

/* One row per state class at `when`: compared, or SKIPPED with why (skip != NULL, the
 * golden or the ACTUAL has none). */
static void qd_state_rows(ck_ctx *c, cmp_spec *s, ck_partlist *pl, const char *when,
                          const qc_golden_state *a, const qc_golden_state *g,
                          const qc_actual_case *ac, const char *skip, qd_scratch *sc) {
    const qc_config *cfg = c->cfg;
    for (int k = QC_TC_K_CACHE; k <= QC_TC_RECURRENT_STATE; k++) {
        int full = k == QC_TC_K_CACHE || k == QC_TC_V_CACHE, any = 0;
        for (int l = 0; l < cfg->n_layers; l++)
            any |= (cfg->layer_types[l] == QC_LAYER_FULL) == full;
        if (!any) continue;
        char check[64], why[300], extra[200];
        snprintf(check, sizeof check, "%s.%s", when, qc_tclass_str((qc_tclass)k));
        memset(pl, 0, sizeof *pl);
        int want = 0, have = 0;
        qd_state_parts(pl, cfg, when, k, a, g, ac->conv_cols, sc, &want, &have);
        if (!g->present)
            snprintf(why, sizeof why, "the golden has no %s/state", when);
        else if (skip)
            snprintf(why, sizeof why, "%s", skip);
        else if (have == 0)
            snprintf(why, sizeof why, "the ACTUAL has no %s/state/layer_NN/%s (optional)", when,
                     qc_tclass_str((qc_tclass)k));
        else
            why[0] = '\0';
        if (why[0]) {
            ck_emit_simple(c, s->case_name, s->backend, s->mode, check, QC_VERDICT_SKIP, why,
                           NULL);
            continue;
        }
        extra[0] = '\0';
        if (have < want)
            snprintf(extra, sizeof extra, "The ACTUAL holds %s for %d of %d layers; the others "
                     "are not compared.", qc_tclass_str((qc_tclass)k), have, want);
        else if (k == QC_TC_CONV_STATE && ac->conv_cols == cfg->conv_kernel - 1)
            snprintf(extra, sizeof extra, "The ACTUAL's conv states have K-1 = %d columns "
                     "(llama.cpp): compared with the golden's %d newest columns.",
                     cfg->conv_kernel - 1, cfg->conv_kernel - 1);
        cmp_spec s2 = *s;
        s2.check = check;
        s2.logits_stats = 0;
        s2.extra = extra[0] ? extra : NULL;
        ck_compare_parts(c, &s2, pl);
    }
}

/* ===================================================================================== */
/* argmax and decode                                                                     */
/* ===================================================================================== */

/* The argmax row over the prefill parts (already in pl) and the first n_dec decode rows. */
static void qd_argmax(ck_ctx *c, const cmp_spec *s, const ck_partlist *pl, const qc_golden_case *gc,
                      const qc_actual_case *ac, int n_dec, const char *loc) {
    const int V = c->cfg->vocab_size;
    const double tie = qc_policy_tie_margin(c->pol);
    qc_metrics m;
    qc_metrics_init(&m, 0);
    for (int i = 0; i < pl->n; i++) qc_metrics_add_logits(&m, &pl->p[i].d, pl->p[i].a,
                                                          pl->p[i].g, tie);
    if (n_dec > 0) {
        qc_tdesc dd;
        ck_desc_logits(&dd, "decode/logits", n_dec, V, gc->start_pos + gc->n_tokens, 1);
        qc_metrics_add_logits(&m, &dd, ac->decode_logits, gc->decode_logits, tie);
    }
    qc_metrics_finish(&m);
    long hard = m.rows - m.top1_agree - m.top1_near_tie;
    qc_check_row row;
    ck_row_init(&row, c->stem, gc->name, s->backend, s->mode, "argmax");
    row.verdict = hard == 0 ? QC_VERDICT_PASS : QC_VERDICT_FAIL;
    snprintf(row.keyline, sizeof row.keyline, "top1 %ld/%ld rows agree (%ld near-tie flips, tie "
             "margin %g)", m.top1_agree, m.rows, m.top1_near_tie, tie);
    if (hard) {
        char mean[256];
        qc_tdesc_meaning(&m.first_top1_flip.desc, m.first_top1_flip.idx, mean, sizeof mean);
        row.detail = qc_strdup_printf("Argmax disagrees on %ld row(s) outside near-ties\nFirst "
                                      "flip: %s: golden argmax %d, actual argmax at %s (golden "
                                      "top1-top2 margin %.4g)%s%s", hard,
                                      m.first_top1_flip.desc.path, m.flip_golden_arg, mean,
                                      m.first_top1_flip.value, loc ? "\n" : "", loc ? loc : "");
    }
    ck_emit(c, &row);
}

/* The first of the decode rows [0, n) over tolerance (-1: none). */
static int qd_first_bad_decode_row(ck_ctx *c, const cmp_spec *s, const qc_golden_case *gc,
                                   const qc_actual_case *ac, int n) {
    const int V = c->cfg->vocab_size;
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, gc->name);
    qc_tol t;
    qc_policy_lookup(c->pol, QC_TC_LOGITS, s->backend, s->mode, "decode.logits", case_id,
                     "decode/logits", &t, NULL);
    for (int r = 0; r < n; r++) {
        qc_tdesc dd;
        ck_desc_logits(&dd, "decode/logits", 1, V, gc->start_pos + gc->n_tokens + r, 1);
        dd.atol = t.atol, dd.rtol = t.rtol;
        qc_metrics m;
        qc_metrics_init(&m, 0);
        qc_metrics_add(&m, &dd, ac->decode_logits + (size_t)r * V,
                       gc->decode_logits + (size_t)r * V);
        if (!qc_metrics_close(&m)) return r;
    }
    return -1;
}

/* The decode checks: decode.tokens (a greedy run that left the golden's tokens), decode.logits
 * on the comparable steps with the decode-only localisation, the decode states. */
static void qd_decode(ck_ctx *c, cmp_spec *s, ck_partlist *pl, const qc_golden_case *gc,
                      const qc_actual_case *ac, int n_dec, qc_verdict prefill_v, qd_scratch *sc) {
    const int V = c->cfg->vocab_size, S = gc->n_decode;
    char why[320] = "";
    if (!ac->has_decode_logits)
        snprintf(why, sizeof why, "prefill-only ACTUAL: no decode/logits (optional)");
    else if (n_dec == 0)
        snprintf(why, sizeof why, "the ACTUAL fed another token than the golden at decode step "
                 "0: no decode row is comparable (see decode.tokens)");
    if (why[0]) {
        ck_emit_simple(c, gc->name, s->backend, s->mode, "decode.logits", QC_VERDICT_SKIP, why,
                       NULL);
        qd_state_rows(c, s, pl, "decode", &ac->decode_state, &gc->decode_state, ac, why, sc);
        return;
    }
    char dloc[4096] = "";
    qc_localisation dL;
    ck_loc_init(&dL);
    int step = qd_first_bad_decode_row(c, s, gc, ac, n_dec);
    if (prefill_v == QC_VERDICT_PASS && step >= 0) {
        snprintf(dloc, sizeof dloc, "Prefill logits pass; the divergence starts in decode: first "
                 "failing step %d (position %d, fed token %d)", step,
                 gc->start_pos + gc->n_tokens + step, gc->decode_tokens[step]);
        if (ac->decode_state.present && gc->decode_state.present && n_dec == S) {
            memset(pl, 0, sizeof *pl);
            int want, have;
            qd_state_parts(pl, c->cfg, "decode", -1, &ac->decode_state, &gc->decode_state,
                           ac->conv_cols, sc, &want, &have);
            ck_state_localise_parts(c, pl, gc, "decode", s->backend, s->mode, dloc, sizeof dloc,
                                    &dL);
        } else {
            snprintf(dloc + strlen(dloc), sizeof dloc - strlen(dloc), "\nNo decode state or "
                     "hidden states in the ACTUAL: the layer cannot be named from this data");
        }
        dL.step = step;
    }
    memset(pl, 0, sizeof *pl);
    qc_tdesc dd;
    ck_desc_logits(&dd, "decode/logits", n_dec, V, gc->start_pos + gc->n_tokens, 1);
    ck_pl_add(pl, &dd, ac->decode_logits, gc->decode_logits);
    cmp_spec s2 = *s;
    s2.check = "decode.logits";
    s2.logits_stats = 1;
    if (dloc[0]) {
        s2.loc_text = dloc;
        s2.loc = &dL;
    }
    char extra[160];
    if (n_dec < S) {
        snprintf(extra, sizeof extra, "Compared on decode steps 0..%d of %d (the ACTUAL fed "
                 "another token at step %d: decode.tokens)", n_dec - 1, S, n_dec);
        s2.extra = extra;
    }
    ck_compare_parts(c, &s2, pl);
    snprintf(why, sizeof why, "the ACTUAL fed another token at decode step %d: its state after "
             "the %d steps is not comparable (decode.tokens)", n_dec, S);
    qd_state_rows(c, s, pl, "decode", &ac->decode_state, &gc->decode_state, ac,
                  n_dec < S ? why : NULL, sc);
}

/* ===================================================================================== */
/* one case                                                                              */
/* ===================================================================================== */

/* Localisation of a prefill failure: the hidden states (a hidden row), else the interval the
 * state buffers support, else a note that nothing can be named. */
static void qd_localise(ck_ctx *c, const cmp_spec *base, const qc_golden_case *gc,
                        const qc_actual_case *ac, ck_partlist *pl, qd_scratch *sc, char *loc,
                        size_t n, qc_localisation *where) {
    const qc_config *cfg = c->cfg;
    const int L = cfg->n_layers, T = gc->n_tokens;
    int localised = 0;
    loc[0] = '\0';
    if (gc->prefill_hidden && ac->prefill_hidden) {
        unsigned char *seen = malloc((size_t)(L + 1) * T);
        if (seen) {
            memset(seen, 1, (size_t)(L + 1) * T);
            ck_hcap hc = {.hidden = ac->prefill_hidden, .seen = seen, .L1 = L + 1, .T = T,
                       .H = cfg->hidden_size, .lo = gc->start_pos};
            localised = ck_check_hidden(c, base, gc, &hc, loc, n, where);
            free(seen);
        }
    } else {
        ck_emit_simple(c, gc->name, base->backend, base->mode, "prefill.hidden", QC_VERDICT_SKIP,
                       gc->prefill_hidden ? "the ACTUAL has no prefill/hidden (optional)"
                                          : "the golden has no prefill/hidden", NULL);
    }
    if (localised) return;
    int want = 0, have = 0;
    memset(pl, 0, sizeof *pl);
    qd_state_parts(pl, cfg, "prefill", -1, &ac->prefill_state, &gc->prefill_state,
                   ac->conv_cols, sc, &want, &have);
    if (have > 0) {
        size_t before = strlen(loc);
        ck_state_localise_parts(c, pl, gc, "prefill", base->backend, base->mode, loc, n, where);
        int top = -1;
        for (int i = 0; i < pl->n; i++)
            if (pl->p[i].d.layer > top) top = pl->p[i].d.layer;
        if (strlen(loc) == before && !ac->prefill_hidden)
            snprintf(loc + before, n - before, "%sEvery prefill state the ACTUAL has passes (no "
                     "hidden states): the divergence began after layer %d's state update (in the "
                     "rest of that layer or a later one, the final norm or lm_head)",
                     before ? "\n" : "", top);
    } else if (!ac->prefill_hidden)
        snprintf(loc, n, "First divergent layer: unknown (the ACTUAL has no prefill/hidden and "
                 "no prefill/state: no layer can be named from this data)");
}

void qd_case(ck_ctx *c, const diff_opts *d, const qc_actual *a, const qc_golden_case *gc,
             const qc_actual_case *ac) {
    if (ac->note[0]) {
        qc_results_warn(c->res, "%s", ac->note);
        fprintf(stderr, "qwen-conform: warning: %s\n", ac->note);
    }
    if (!qd_inputs(c, d, a, gc, ac)) return;
    if (!ac->prefill_logits && ac->prefill_tk_ids) { /* a top-k case (qc_diff_topk.c) */
        qd_topk(c, d, a, gc, ac);
        if (qc_cfg_is_moe(c->cfg)) qd_router(c, d, gc, ac);
        return;
    }
    ck_partlist *pl = calloc(1, sizeof *pl);
    qd_scratch *sc = calloc(1, sizeof *sc);
    if (!pl || !sc) {
        ck_emit_simple(c, gc->name, d->label, "file", "prefill.logits", QC_VERDICT_ERROR,
                       "out of memory", NULL);
        free(pl);
        free(sc);
        return;
    }
    /* the h5diff line only makes sense for an ACTUAL in the golden's own shapes */
    int canonical = ac->n_hf == 0 && ac->n_rows == gc->n_tokens &&
                    ac->conv_cols != c->cfg->conv_kernel - 1;
    cmp_spec base = {.case_name = gc->name, .backend = d->label, .mode = "file", .vs_golden = 1,
                     .dump_file = canonical ? a->path : NULL, .advice = canonical ? NULL : ""};
    char loc[4096];
    qc_localisation where;
    ck_loc_init(&where);
    qd_localise(c, &base, gc, ac, pl, sc, loc, sizeof loc, &where);
    /* prefill logits on the rows the ACTUAL has */
    memset(pl, 0, sizeof *pl);
    cmp_spec s = base;
    s.loc_text = loc[0] ? loc : NULL;
    s.loc = &where;
    char extra[200];
    if (ac->n_rows < gc->n_tokens) {
        snprintf(extra, sizeof extra, "Compared on the %d of %d prompt positions the ACTUAL "
                 "has (%s)", ac->n_rows, gc->n_tokens,
                 ac->n_rows == 1 && ac->rows[0] == gc->n_tokens - 1 ? "the last row only"
                                                                      : "prefill/logits_positions");
        s.extra = extra;
    }
    qc_verdict prefill_v = QC_VERDICT_ERROR;
    if (qd_logit_parts(pl, c->cfg, gc, ac) < 0) {
        ck_emit_simple(c, gc->name, d->label, "file", "prefill.logits", QC_VERDICT_ERROR,
                       "prefill/logits_positions: too many separate runs of positions", NULL);
    } else {
        s.check = "prefill.logits";
        s.logits_stats = 1;
        prefill_v = ck_compare_parts(c, &s, pl);
    }
    s.extra = NULL;
    int n_dec = gc->n_decode > 0 ? qd_decode_tokens(c, &s, gc, ac) : 0;
    qd_argmax(c, &s, pl, gc, ac, ac->has_decode_logits ? n_dec : 0, s.loc_text);
    s.logits_stats = 0;
    qd_state_rows(c, &s, pl, "prefill", &ac->prefill_state, &gc->prefill_state, ac, NULL, sc);
    if (gc->n_decode > 0) qd_decode(c, &s, pl, gc, ac, n_dec, prefill_v, sc);
    if (qc_cfg_is_moe(c->cfg)) qd_router(c, d, gc, ac); /* dense: one SKIP per file (qd_file) */
    qd_scratch_free(sc);
    free(sc);
    free(pl);
}
