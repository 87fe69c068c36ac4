/* qc_check_router.c — the MoE checks (issue 15): the backend's router choices against the
 * golden's (`router_topk`), and the MoE part of the localisation of a divergent layer.
 *
 *   capture      a MoE backend traces, besides the hidden states, "moe_in" (the residual after
 *                layer l's mixer, before its MoE block) and "router_topk" (per token the k
 *                expert ids in descending probability, then their k renormalised weights);
 *                ck_moecap keeps them for every prompt and decode position of a case.
 *   router_topk  per layer and position the chosen ids as a set (the order inside the top k
 *                does not matter: the weighted sum does not depend on it); a flip at a golden
 *                near-tie (margin p_k - p_(k+1) below the golden's router_margin_threshold) is
 *                reported, not failed, like argmax; any other flip fails with the layer, the
 *                position, both id sets and the margin; where the ids agree, the weights are
 *                compared (matched by id) with the hidden class tolerance of the policy (tensor
 *                prefill/router/topk_weights or decode/router/topk_weights).
 *   localisation the first divergent layer l: moe_in[l] already off -> the divergence starts in
 *                l's mixer (attention / DeltaNet); moe_in[l] fine -> in l's MoE block, and then
 *                the router: which expert the backend chose instead of the golden's, or whose
 *                weight differs, or (router fine) the experts' / shared expert's computation.
 * Dense models have no router: the check is SKIPPED once per file (qc_check_engine.c).
 */

#include "qc_check_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================================== */
/* capture                                                                               */
/* ===================================================================================== */

qc_status ck_moecap_init(ck_moecap *mc, const qc_config *cfg, const qc_golden_case *gc) {
    memset(mc, 0, sizeof *mc);
    mc->L = cfg->n_layers, mc->K = cfg->n_experts_per_tok, mc->H = cfg->hidden_size;
    mc->lo = gc->start_pos;
    mc->n = gc->n_tokens + gc->n_decode;
    size_t rows = (size_t)mc->L * (size_t)(mc->n > 0 ? mc->n : 1);
    mc->moe_in = calloc(rows * (size_t)mc->H, sizeof(float));
    mc->topk = calloc(rows * 2 * (size_t)(mc->K > 0 ? mc->K : 1), sizeof(float));
    mc->seen_in = calloc(rows, 1);
    mc->seen_tk = calloc(rows, 1);
    if (!mc->moe_in || !mc->topk || !mc->seen_in || !mc->seen_tk) {
        ck_moecap_free(mc);
        return QC_ERR_OOM;
    }
    return QC_OK;
}

void ck_moecap_free(ck_moecap *mc) {
    if (!mc) return;
    free(mc->moe_in), free(mc->topk), free(mc->seen_in), free(mc->seen_tk);
    mc->moe_in = mc->topk = NULL;
    mc->seen_in = mc->seen_tk = NULL;
}

void ck_moecap_feed(ck_moecap *mc, int index, const char *name, int start_pos, int n_tokens,
                    int dim, const float *data) {
    if (!mc || !name) return;
    int is_in = !strcmp(name, "moe_in") || !strcmp(name, "mlp_in"),
        is_tk = !strcmp(name, "router_topk");
    if (!is_in && !is_tk) return;
    int want = is_in ? mc->H : 2 * mc->K;
    if (index < 0 || index >= mc->L || dim != want) {
        mc->bad = 1;
        return;
    }
    /* positions before the case (history replay) are not compared; a nokv run traces a
     * position again at every step: the last call wins (the same values) */
    for (int i = 0; i < n_tokens; i++) {
        int row = start_pos + i - mc->lo;
        if (row < 0 || row >= mc->n) continue;
        size_t r = (size_t)index * mc->n + row;
        memcpy((is_in ? mc->moe_in : mc->topk) + r * (size_t)dim, data + (size_t)i * dim,
               (size_t)dim * sizeof(float));
        (is_in ? mc->seen_in : mc->seen_tk)[r] = 1;
    }
}

/* ===================================================================================== */
/* comparing one block of router rows                                                    */
/* ===================================================================================== */

/* The expected / actual ids of one row as text "{3, 5}". */
static void ids_str(const int32_t *ids, int K, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "{");
    for (int j = 0; j < K && o < n; j++)
        o += (size_t)snprintf(buf + o, n - o, "%s%d", j ? ", " : "", (int)ids[j]);
    if (o < n) snprintf(buf + o, n - o, "}");
}

/* Index of id in ids[0..K) or -1. */
static int find_id(const int32_t *ids, int K, int32_t id) {
    for (int j = 0; j < K; j++)
        if (ids[j] == id) return j;
    return -1;
}

/* Actual ids of capture row (l, row) as int32 (a value that is not an integer id in [0, E)
 * becomes -1, which matches no golden id). */
static void cap_ids(const ck_moecap *mc, int l, int row, int E, int32_t *out) {
    const float *p = mc->topk + ((size_t)l * mc->n + row) * 2 * mc->K;
    for (int j = 0; j < mc->K; j++) {
        float v = p[j];
        out[j] = (isfinite(v) && v >= 0 && v < (float)E && v == floorf(v)) ? (int32_t)v : -1;
    }
}

/* One block of rows [off, off + rows) of the capture: ids / weights [L, rows, K] (ids checked:
 * integers in [0, E), distinct per row) and moe_in [L, rows, H] when with_in and traced. */
static qc_status export_rows(const ck_moecap *mc, int E, int off, int rows, int with_in,
                             int32_t **ids, float **w, float **in, qc_err *err) {
    const int L = mc->L, K = mc->K, H = mc->H;
    size_t n = (size_t)L * (size_t)rows, all_in = 1;
    for (int l = 0; l < L; l++)
        for (int r = 0; r < rows; r++) all_in &= mc->seen_in[(size_t)l * mc->n + off + r];
    *ids = malloc((n ? n : 1) * (size_t)K * sizeof **ids);
    *w = malloc((n ? n : 1) * (size_t)K * sizeof **w);
    if (with_in && all_in) *in = malloc((n ? n : 1) * (size_t)H * sizeof **in);
    if (!*ids || !*w || (with_in && all_in && !*in))
        return qc_errf(err, QC_ERR_OOM, "router capture: out of memory");
    for (int l = 0; l < L; l++)
        for (int r = 0; r < rows; r++) {
            size_t cr = (size_t)l * mc->n + off + r, o = (size_t)l * rows + r;
            const float *tk = mc->topk + cr * 2 * K;
            cap_ids(mc, l, off + r, E, *ids + o * K);
            memcpy(*w + o * K, tk + K, (size_t)K * sizeof **w);
            for (int j = 0; j < K; j++) {
                int32_t id = (*ids)[o * K + j];
                if (id < 0 || find_id(*ids + o * K, j, id) >= 0)
                    return qc_errf(err, QC_ERR_RUNTIME, "router_topk trace: layer %d, position "
                                   "%d: %s %g (experts are distinct integer ids in [0, %d))", l,
                                   mc->lo + off + r, id < 0 ? "expert id" : "expert chosen twice:",
                                   (double)tk[j], E);
            }
            if (*in) memcpy(*in + o * H, mc->moe_in + cr * H, (size_t)H * sizeof **in);
        }
    return QC_OK;
}

qc_status ck_moecap_export(const ck_moecap *mc, int E, int T, int with_in, qc_golden_case *out,
                           qc_err *err) {
    if (mc->bad)
        return qc_errf(err, QC_ERR_RUNTIME, "a moe_in / router_topk trace call had a width other "
                       "than H = %d / 2k = %d or a layer index outside 0..%d", mc->H, 2 * mc->K,
                       mc->L - 1);
    size_t n = (size_t)mc->L * mc->n;
    for (size_t i = 0; i < n; i++)
        if (!mc->seen_tk[i]) return QC_OK; /* not traced for every row: left out */
    const int S = mc->n - T;
    qc_status st = export_rows(mc, E, 0, T, with_in, &out->prefill_topk_ids,
                               &out->prefill_topk_weights, &out->prefill_moe_in, err);
    if (!st && S > 0)
        st = export_rows(mc, E, T, S, with_in, &out->decode_topk_ids, &out->decode_topk_weights,
                         &out->decode_moe_in, err);
    return st;
}

void ck_router_tally_init(ck_router_tally *t, double threshold) {
    memset(t, 0, sizeof *t);
    t->threshold = threshold;
    t->first_flip.layer = t->first_tie.layer = t->worst_w.layer = t->first_w.layer = -1;
}

/* One flip: the golden's first id missing from the actual set, and the first actual id that is
 * not in the golden's. */
static void note_flip(ck_router_flip *f, int l, int row, int decode, int pos, const int32_t *g,
                      const int32_t *a, int K, double margin) {
    f->layer = l, f->row = row, f->decode = decode, f->pos = pos, f->margin = margin;
    memcpy(f->expected, g, (size_t)K * sizeof *g);
    memcpy(f->got, a, (size_t)K * sizeof *a);
    f->missing = f->extra = -1;
    for (int j = 0; j < K; j++) {
        if (f->missing < 0 && find_id(a, K, g[j]) < 0) f->missing = g[j];
        if (f->extra < 0 && find_id(g, K, a[j]) < 0) f->extra = a[j];
    }
}

void ck_router_tally_add(ck_router_tally *t, const qc_tol *tol, int L, int rows, int K, int E,
                         int decode, int pos0, const int32_t *gids, const float *gw,
                         const float *gm, const int32_t *aids, const float *aw,
                         const ck_moecap *mc) {
    if (K > CK_ROUTER_MAX_K) K = CK_ROUTER_MAX_K;
    int32_t a[CK_ROUTER_MAX_K];
    for (int l = 0; l < L; l++)
        for (int r = 0; r < rows; r++) {
            size_t gr = (size_t)l * rows + r;
            const int32_t *g = gids + gr * K;
            const float *wa = NULL;
            if (mc) {
                int crow = decode ? mc->n - rows + r : r;
                if (!mc->seen_tk[(size_t)l * mc->n + crow]) {
                    t->missing++;
                    continue;
                }
                cap_ids(mc, l, crow, E, a);
                wa = mc->topk + ((size_t)l * mc->n + crow) * 2 * mc->K + mc->K;
            } else {
                memcpy(a, aids + gr * K, (size_t)K * sizeof *a);
                wa = aw ? aw + gr * K : NULL;
            }
            t->rows++;
            int same = 1;
            for (int j = 0; j < K; j++) same &= find_id(a, K, g[j]) >= 0;
            double margin = gm ? gm[gr] : INFINITY;
            if (!same) {
                int tie = t->threshold > 0 && margin < t->threshold;
                ck_router_flip *f = tie ? &t->first_tie : &t->first_flip;
                if (tie) t->near_tie++;
                else t->flips++;
                if (f->layer < 0) note_flip(f, l, r, decode, pos0 + r, g, a, K, margin);
                continue;
            }
            t->agree++;
            if (!wa || !gw) continue;
            for (int j = 0; j < K; j++) {
                int ja = find_id(a, K, g[j]);
                double wg = gw[gr * K + j], wv = wa[ja];
                double d = fabs(wv - wg), allow = tol->atol + tol->rtol * fabs(wg);
                t->n_w++;
                if (!(d <= allow)) { /* NaN is bad */
                    if (t->bad_w++ == 0 || l < t->first_w.layer) {
                        t->first_w.layer = l, t->first_w.row = r, t->first_w.decode = decode;
                        t->first_w.pos = pos0 + r, t->first_w.missing = g[j];
                        t->fw_expected = wg, t->fw_got = wv;
                    }
                }
                if (isnan(d)) d = INFINITY;
                if (t->worst_w.layer < 0 || d > t->max_w_diff) {
                    t->max_w_diff = d;
                    t->worst_w.layer = l, t->worst_w.row = r, t->worst_w.decode = decode;
                    t->worst_w.pos = pos0 + r, t->worst_w.missing = g[j];
                    t->worst_w.margin = margin;
                    t->w_expected = wg, t->w_got = wv, t->w_allow = allow;
                }
            }
        }
}

/* ===================================================================================== */
/* the router_topk row                                                                   */
/* ===================================================================================== */

static void flip_text(const ck_ctx *c, const ck_router_flip *f, int K, char *buf, size_t n) {
    char e[160], g[160];
    ids_str(f->expected, K, e, sizeof e);
    ids_str(f->got, K, g, sizeof g);
    char where[64];
    if (f->decode) snprintf(where, sizeof where, "decode step %d (position %d)", f->row, f->pos);
    else snprintf(where, sizeof where, "prefill position %d", f->pos);
    snprintf(buf, n, "layer %d (%s), %s: expected experts %s, got %s (expert %d not chosen, "
             "expert %d chosen instead; golden margin p_k - p_k+1 = %.3g)", f->layer,
             ck_layer_kind(c->cfg, f->layer), where, e, g, f->missing, f->extra, f->margin);
}

void ck_router_emit(ck_ctx *c, const qc_golden_case *gc, const ck_router_tally *t,
                    const char *backend, const char *mode, const char *loc) {
    const int K = c->cfg->n_experts_per_tok > CK_ROUTER_MAX_K ? CK_ROUTER_MAX_K
                                                              : c->cfg->n_experts_per_tok;
    qc_check_row row;
    ck_row_init(&row, c->stem, gc->name, backend, mode, "router_topk");
    int fail = t->flips > 0 || t->bad_w > 0 || t->missing > 0;
    row.verdict = fail ? QC_VERDICT_FAIL : QC_VERDICT_PASS;
    char thr[64];
    if (t->threshold > 0) snprintf(thr, sizeof thr, "margin threshold %g", t->threshold);
    else snprintf(thr, sizeof thr, "no margin threshold in the golden");
    snprintf(row.keyline, sizeof row.keyline, "top-%d sets agree at %ld/%ld (layer, position) "
             "rows (%ld near-tie flips, %s); weights max |diff| %.2g (%ld of %ld over tolerance)",
             K, t->agree, t->rows + t->missing, t->near_tie, thr, t->max_w_diff, t->bad_w,
             t->n_w);
    char buf[1024], tie[1024] = "";
    if (t->near_tie > 0) {
        flip_text(c, &t->first_tie, K, buf, sizeof buf);
        snprintf(tie, sizeof tie, "\nNear-tie flips (reported, not failed): %ld; first: %s",
                 t->near_tie, buf);
    }
    if (t->missing > 0) {
        row.detail = qc_strdup_printf("The backend traced no router_topk row for %ld (layer, "
                                      "position) row(s) of the golden's router datasets%s",
                                      t->missing, tie);
    } else if (t->flips > 0 || t->bad_w > 0) {
        char fl[1200] = "", wt[700] = "";
        if (t->flips > 0) {
            flip_text(c, &t->first_flip, K, buf, sizeof buf);
            snprintf(fl, sizeof fl, "\nRouter top-%d choice differs at %ld (layer, position) "
                     "row(s) outside near-ties; first: %s", K, t->flips, buf);
        }
        if (t->bad_w > 0) {
            const ck_router_flip *w = &t->first_w, *x = &t->worst_w;
            snprintf(wt, sizeof wt, "\nRouter weights differ at %ld of %ld (layer, position, "
                     "expert) entries where the chosen experts agree (the top-k probabilities "
                     "renormalised to sum 1); first: layer %d (%s), %s position %d, expert %d: "
                     "expected %.6g, got %.6g; worst: layer %d, position %d, expert %d: expected "
                     "%.6g, got %.6g (|diff| %.3g > allowed %.3g)", t->bad_w, t->n_w, w->layer,
                     ck_layer_kind(c->cfg, w->layer), w->decode ? "decode" : "prefill", w->pos,
                     w->missing, t->fw_expected, t->fw_got, x->layer, x->pos, x->missing,
                     t->w_expected, t->w_got, t->max_w_diff, t->w_allow);
        }
        /* the structured location: the lower layer of the first flip and the first bad weight */
        int use_w = t->bad_w > 0 && (t->flips == 0 || t->first_w.layer < t->first_flip.layer);
        const ck_router_flip *f = use_w ? &t->first_w : &t->first_flip;
        row.detail = qc_strdup_printf("The router disagrees with the golden from layer %d on%s%s"
                                      "%s%s%s", f->layer, fl, wt, tie, loc ? "\n" : "",
                                      loc ? loc : "");
        row.loc.kind = QC_LOC_LAYER;
        row.loc.layer = f->layer;
        row.loc.step = f->decode ? f->row : -1;
        snprintf(row.loc.source, sizeof row.loc.source, "router");
        snprintf(row.loc.block, sizeof row.loc.block, "moe");
        row.loc.has_expert = 1;
        row.loc.expert_expected = f->missing;
        row.loc.expert_got = use_w ? -1 : f->extra;
    } else if (tie[0]) {
        row.detail = qc_strdup_printf("%s", tie + 1);
    }
    ck_emit(c, &row);
}

/* The reason the router of gc cannot be checked on this run, or NULL. */
static const char *router_skip(const ck_ctx *c, const qc_golden_case *gc, const ck_moecap *mc) {
    if (!qc_cfg_is_moe(c->cfg)) return "a dense model: no router";
    if (!gc->prefill_topk_ids && !gc->decode_topk_ids)
        return "the golden has no router datasets (prefill/router, decode/router)";
    if (!mc) return "capability 'router' not announced: the backend reports no router choices";
    size_t n = (size_t)mc->L * mc->n, seen = 0;
    for (size_t i = 0; i < n; i++) seen += mc->seen_tk[i];
    if (seen == 0 && !mc->bad)
        return "capability 'router' not announced: the backend reports no router choices (no "
               "\"router_topk\" trace)";
    return NULL;
}

/* The rows of the capture that are not router choices at all (an id that is not an integer in
 * [0, E), an id chosen twice in a row, a weight that is not finite): how many, and the first
 * one described into buf ("" when none). A runtime under test reports them as it computed them;
 * the built-in backends never produce one. */
static long malformed_rows(const ck_moecap *mc, int E, int T, char *buf, size_t n) {
    long bad = 0;
    buf[0] = 0;
    const int K = mc->K;
    for (int l = 0; l < mc->L; l++)
        for (int r = 0; r < mc->n; r++) {
            size_t cr = (size_t)l * mc->n + r;
            if (!mc->seen_tk[cr]) continue;
            const float *p = mc->topk + cr * 2 * K;
            char why[160] = "";
            for (int j = 0; j < K && !why[0]; j++) {
                float v = p[j], w = p[K + j];
                if (!(isfinite(v) && v >= 0 && v < (float)E && v == floorf(v)))
                    snprintf(why, sizeof why, "expert id %g is not an integer in [0, %d)",
                             (double)v, E);
                else if (!isfinite(w))
                    snprintf(why, sizeof why, "weight of expert %d is %g", (int)v, (double)w);
                for (int i = 0; i < j && !why[0]; i++)
                    if (p[i] == v) snprintf(why, sizeof why, "expert %d chosen twice", (int)v);
            }
            if (!why[0]) continue;
            if (bad++ == 0) {
                char row[512];
                size_t o = 0;
                for (int j = 0; j < 2 * K && o < sizeof row; j++)
                    o += (size_t)snprintf(row + o, sizeof row - o, "%s%.6g",
                                          j == 0 ? "" : j == K ? " | " : ", ", (double)p[j]);
                snprintf(buf, n, "layer %d, %s %d (position %d): %s (ids | weights: %s)", l,
                         r < T ? "prefill row" : "decode step", r < T ? r : r - T, mc->lo + r,
                         why, row);
            }
        }
    return bad;
}

void ck_check_router(ck_ctx *c, const qc_golden_case *gc, const ck_moecap *mc, const char *backend,
                     const char *mode, const char *loc) {
    const char *skip = router_skip(c, gc, mc);
    if (skip) {
        ck_emit_simple(c, gc->name, backend, mode, "router_topk", QC_VERDICT_SKIP, skip, NULL);
        return;
    }
    if (mc->bad) {
        ck_emit_simple(c, gc->name, backend, mode, "router_topk", QC_VERDICT_FAIL,
                       "a moe_in / router_topk trace call had a wrong width or layer index",
                       qc_strdup_printf("The backend traced \"moe_in\" / \"router_topk\" with a "
                                        "width other than H = %d / 2k = %d or a layer index "
                                        "outside 0..%d", mc->H, 2 * mc->K, mc->L - 1));
        return;
    }
    const qc_config *cfg = c->cfg;
    char first[1024];
    long nbad = malformed_rows(mc, cfg->n_experts, gc->n_tokens, first, sizeof first);
    if (nbad > 0) {
        char key[160];
        snprintf(key, sizeof key, "malformed router choices at %ld (layer, position) row(s)",
                 nbad);
        ck_emit_simple(c, gc->name, backend, mode, "router_topk", QC_VERDICT_FAIL, key,
                       qc_strdup_printf("The backend's router choices are not a valid top-%d "
                                        "(distinct expert ids in [0, %d), finite weights) at "
                                        "%ld (layer, position) row(s); first: %s",
                                        cfg->n_experts_per_tok, cfg->n_experts, nbad, first));
        return;
    }
    if (cfg->n_experts_per_tok > CK_ROUTER_MAX_K) {
        ck_emit_simple(c, gc->name, backend, mode, "router_topk", QC_VERDICT_SKIP,
                       "more than 64 experts per token: not supported by this check", NULL);
        return;
    }
    ck_router_tally t;
    ck_router_tally_init(&t, c->g ? c->g->router_margin_threshold : -1);
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, gc->name);
    qc_tol tol;
    if (gc->prefill_topk_ids) {
        qc_policy_lookup(c->pol, QC_TC_HIDDEN, backend, mode, "router_topk", case_id,
                         "prefill/router/topk_weights", &tol, NULL);
        ck_router_tally_add(&t, &tol, cfg->n_layers, gc->n_tokens, cfg->n_experts_per_tok,
                            cfg->n_experts, 0, gc->start_pos, gc->prefill_topk_ids,
                            gc->prefill_topk_weights, gc->prefill_router_margins, NULL, NULL, mc);
    }
    if (gc->decode_topk_ids && gc->n_decode > 0) {
        qc_policy_lookup(c->pol, QC_TC_HIDDEN, backend, mode, "router_topk", case_id,
                         "decode/router/topk_weights", &tol, NULL);
        ck_router_tally_add(&t, &tol, cfg->n_layers, gc->n_decode, cfg->n_experts_per_tok,
                            cfg->n_experts, 1, gc->start_pos + gc->n_tokens, gc->decode_topk_ids,
                            gc->decode_topk_weights, gc->decode_router_margins, NULL, NULL, mc);
    }
    ck_router_emit(c, gc, &t, backend, mode, loc);
}

/* ===================================================================================== */
/* localisation: mixer or MoE block, and which expert                                    */
/* ===================================================================================== */

/* max |a - g| over rows [0, T) of layer l of a [L, n, H] capture vs a [L, T, H] golden, and
 * whether every element is within tol; *worst = the row of the max. -1: a row not traced. */
static int moe_in_close(const ck_moecap *mc, int l, int T, const float *g, const qc_tol *tol,
                        double *max_abs, int *worst) {
    *max_abs = 0, *worst = 0;
    int ok = 1;
    for (int r = 0; r < T; r++) {
        size_t cr = (size_t)l * mc->n + r;
        if (!mc->seen_in[cr]) return -1;
        const float *a = mc->moe_in + cr * mc->H, *gg = g + ((size_t)l * T + r) * mc->H;
        for (int h = 0; h < mc->H; h++) {
            double d = fabs((double)a[h] - gg[h]);
            if (!(d <= tol->atol + tol->rtol * fabs(gg[h]))) ok = 0;
            if (isnan(d)) d = INFINITY;
            if (d > *max_abs) *max_abs = d, *worst = r;
        }
    }
    return ok;
}

/* The router of layer l on the prompt rows: first flip (any margin) into f, or the worst weight
 * difference; 1 flip found, 2 weights differ, 0 agree, -1 not traced. */
static int layer_router(const ck_ctx *c, const qc_golden_case *gc, const ck_moecap *mc, int l,
                        const qc_tol *tol, ck_router_tally *t) {
    if (!gc->prefill_topk_ids) return -1;
    const int T = gc->n_tokens;
    for (int r = 0; r < T; r++)
        if (!mc->seen_tk[(size_t)l * mc->n + r]) return -1;
    ck_router_tally_init(t, 0); /* every flip counts here: a near-tie one can explain it too */
    const int K = mc->K, E = c->cfg->n_experts;
    /* a one-layer view: the rows of layer l only */
    ck_moecap one = *mc;
    one.L = 1;
    one.moe_in += (size_t)l * mc->n * mc->H;
    one.topk += (size_t)l * mc->n * 2 * K;
    one.seen_in += (size_t)l * mc->n;
    one.seen_tk += (size_t)l * mc->n;
    ck_router_tally_add(t, tol, 1, T, K, E, 0, gc->start_pos, gc->prefill_topk_ids +
                        (size_t)l * T * K, gc->prefill_topk_weights ? gc->prefill_topk_weights +
                        (size_t)l * T * K : NULL, gc->prefill_router_margins ?
                        gc->prefill_router_margins + (size_t)l * T : NULL, NULL, NULL, &one);
    if (t->flips) t->first_flip.layer = l;
    if (t->bad_w) t->worst_w.layer = l;
    return t->flips ? 1 : t->bad_w ? 2 : 0;
}

/* The prompt row where hidden[l + 1] differs most from the golden (0 without data). */
static int worst_out_row(const qc_golden_case *gc, const ck_hcap *hc, int l) {
    if (!hc || !hc->hidden || !gc->prefill_hidden || l + 1 >= hc->L1) return 0;
    const size_t TH = (size_t)hc->T * hc->H;
    const float *a = hc->hidden + (size_t)(l + 1) * TH, *g = gc->prefill_hidden + (size_t)(l + 1) * TH;
    double mx = -1;
    int w = 0;
    for (int r = 0; r < hc->T; r++)
        for (int h = 0; h < hc->H; h++) {
            double d = fabs((double)a[(size_t)r * hc->H + h] - g[(size_t)r * hc->H + h]);
            if (isnan(d)) d = INFINITY;
            if (d > mx) mx = d, w = r;
        }
    return w;
}

void ck_moe_localise(ck_ctx *c, const qc_golden_case *gc, const ck_moecap *mc, const ck_hcap *hc,
                     int l, const char *backend, const char *mode, char *loc, size_t loclen,
                     qc_localisation *L) {
    if (!mc || !gc->prefill_moe_in || l < 0 || l >= mc->L) return;
    const int moe = qc_cfg_is_moe(c->cfg);
    const char *in = moe ? "moe_in" : "mlp_in", *blk = moe ? "MoE block" : "MLP";
    const int T = gc->n_tokens;
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, gc->name);
    qc_tol tol, wtol;
    char dset[32];
    snprintf(dset, sizeof dset, "prefill/%s", in);
    qc_policy_lookup(c->pol, QC_TC_HIDDEN, backend, mode, "prefill.hidden", case_id, dset, &tol,
                     NULL);
    qc_policy_lookup(c->pol, QC_TC_HIDDEN, backend, mode, "router_topk", case_id,
                     "prefill/router/topk_weights", &wtol, NULL);
    double mx;
    int worst;
    int ok = moe_in_close(mc, l, T, gc->prefill_moe_in, &tol, &mx, &worst);
    size_t k = strlen(loc);
    const char *sep = k ? "\n" : "";
    if (ok < 0) {
        snprintf(loc + k, loclen - k, "%sMixer or %s of layer %d: the runtime sent no %s "
                 "(announce `mlp_in` to tell them apart)", sep, blk, l, in);
        return;
    }
    if (!ok) {
        snprintf(L->block, sizeof L->block, "mixer");
        snprintf(loc + k, loclen - k, "%sIt starts in layer %d's mixer (%s): %s[%d], the "
                 "residual after the mixer and before the %s, already differs (max |diff| "
                 "%.2g at position %d)", sep, l, ck_layer_kind(c->cfg, l), in, l, blk, mx,
                 gc->start_pos + worst);
        return;
    }
    if (!moe) { /* dense: the MLP (its post-attention norm, gate / up / down projections) */
        snprintf(L->block, sizeof L->block, "mlp");
        snprintf(loc + k, loclen - k, "%sIt starts in layer %d's MLP: mlp_in[%d] (the residual "
                 "after the mixer) agrees (max |diff| %.2g), the layer output does not (its "
                 "post-attention norm or the MLP)", sep, l, l, mx);
        return;
    }
    snprintf(L->block, sizeof L->block, "moe");
    ck_router_tally t;
    int rv = layer_router(c, gc, mc, l, &wtol, &t);
    char rt[900] = "";
    if (rv == 1) {
        char fl[600];
        flip_text(c, &t.first_flip, mc->K, fl, sizeof fl);
        snprintf(rt, sizeof rt, "; the router chose differently at %ld position(s), first: %s",
                 t.flips, fl);
        L->has_expert = 1;
        L->expert_expected = t.first_flip.missing;
        L->expert_got = t.first_flip.extra;
    } else if (rv == 2) {
        snprintf(rt, sizeof rt, "; the router chose the same experts but their weights differ at "
                 "%ld entries, worst: position %d, expert %d: expected weight %.6g, got %.6g",
                 t.bad_w, t.worst_w.pos, t.worst_w.missing, t.w_expected, t.w_got);
        L->has_expert = 1;
        L->expert_expected = t.worst_w.missing;
        L->expert_got = -1;
    } else if (rv == 0) {
        int32_t ids[CK_ROUTER_MAX_K];
        char is[160];
        int K = mc->K > CK_ROUTER_MAX_K ? CK_ROUTER_MAX_K : mc->K;
        int wo = worst_out_row(gc, hc, l);
        memcpy(ids, gc->prefill_topk_ids + ((size_t)l * T + wo) * mc->K, (size_t)K * sizeof *ids);
        ids_str(ids, K, is, sizeof is);
        snprintf(rt, sizeof rt, "; the router agrees (the same experts, weights within "
                 "tolerance): the divergence is in the routed experts' or the shared expert's "
                 "computation or their sum (experts %s at position %d, where the layer output "
                 "differs most)", is, gc->start_pos + wo);
    } else {
        snprintf(rt, sizeof rt, "; the router choices were not traced");
    }
    snprintf(loc + k, loclen - k, "%sIt starts in layer %d's MoE block: moe_in[%d] (after the "
             "mixer) agrees (max |diff| %.2g), the layer output does not%s", sep, l, l, mx, rt);
}
