/* qc_diff_router.c — `diff`'s router_topk row (issue 15): a MoE ACTUAL's router choices
 * (prefill/router/topk_ids, decode/router/topk_ids, and their topk_weights) against the
 * golden's, with the checker's own comparison (qc_check_router.c: ck_router_tally_*,
 * ck_router_emit): per layer and position the chosen ids as a set; a flip where the golden's
 * margin p_k - p_(k+1) is below its router_margin_threshold is reported, not failed; any other
 * flip fails naming the layer, the position, both id sets and the margin; where the ids agree
 * the weights are compared with the policy's hidden class (tensor prefill/router/topk_weights or
 * decode/router/topk_weights). Decode rows are compared up to the first step whose token left
 * the golden's path (decode.tokens). SKIPPED with the reason when the golden or the ACTUAL has
 * no router datasets; a dense model's SKIP is one row per file (qd_file).
 */
#include "qc_diff_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first n of S rows of every layer of a [L, S, w] array, packed to [L, n, w] (n < S). */
static void *first_rows(const void *src, size_t esz, int L, int S, int n, int w) {
    if (!src) return NULL;
    char *d = malloc((size_t)L * (n > 0 ? n : 1) * w * esz);
    if (!d) return NULL;
    for (int l = 0; l < L; l++)
        memcpy(d + (size_t)l * n * w * esz, (const char *)src + (size_t)l * S * w * esz,
               (size_t)n * w * esz);
    return d;
}

/* Decode rows [0, n) of S: the tally of the golden's against the ACTUAL's. 0, or -1 (OOM). */
static int add_decode(ck_ctx *c, ck_router_tally *t, const qc_tol *tol, const qc_golden_case *gc,
                      const qc_actual_case *ac, int n) {
    const qc_config *cfg = c->cfg;
    const int L = cfg->n_layers, K = cfg->n_experts_per_tok, S = gc->n_decode;
    if (n <= 0) return 0;
    if (n == S) {
        ck_router_tally_add(t, tol, L, S, K, cfg->n_experts, 1, gc->start_pos + gc->n_tokens,
                            gc->decode_topk_ids, gc->decode_topk_weights,
                            gc->decode_router_margins, ac->decode_topk_ids,
                            ac->decode_topk_weights, NULL);
        return 0;
    }
    int32_t *gi = first_rows(gc->decode_topk_ids, 4, L, S, n, K);
    int32_t *ai = first_rows(ac->decode_topk_ids, 4, L, S, n, K);
    float *gw = first_rows(gc->decode_topk_weights, 4, L, S, n, K);
    float *aw = first_rows(ac->decode_topk_weights, 4, L, S, n, K);
    float *gm = first_rows(gc->decode_router_margins, 4, L, S, n, 1);
    int oom = !gi || !ai || (gc->decode_topk_weights && !gw) ||
              (ac->decode_topk_weights && !aw) || (gc->decode_router_margins && !gm);
    if (!oom)
        ck_router_tally_add(t, tol, L, n, K, cfg->n_experts, 1, gc->start_pos + gc->n_tokens, gi,
                            gw, gm, ai, aw, NULL);
    free(gi), free(ai), free(gw), free(aw), free(gm);
    return oom ? -1 : 0;
}

/* The reason the router of this case cannot be compared, or NULL. */
static const char *router_skip(const qc_config *cfg, const qc_golden_case *gc,
                               const qc_actual_case *ac, int n_dec) {
    if (!qc_cfg_is_moe(cfg)) return "a dense model: no router";
    if (!gc->prefill_topk_ids && !gc->decode_topk_ids)
        return "the golden has no router datasets (prefill/router, decode/router)";
    if (!ac->prefill_topk_ids && !ac->decode_topk_ids)
        return "the ACTUAL has no router datasets (prefill/router/topk_ids, "
               "decode/router/topk_ids: optional)";
    int pre = gc->prefill_topk_ids && ac->prefill_topk_ids;
    int dec = gc->decode_topk_ids && ac->decode_topk_ids && n_dec > 0;
    if (!pre && !dec)
        return "the golden and the ACTUAL have no router dataset in common (one has prefill/"
               "router, the other decode/router)";
    if (cfg->n_experts_per_tok > CK_ROUTER_MAX_K)
        return "more than 64 experts per token: not supported by this check";
    return NULL;
}

/* The decode steps whose router rows are comparable: S, or the first step where the ACTUAL
 * fed another token than the golden (decode.tokens reports it). */
static int comparable_steps(const qc_golden_case *gc, const qc_actual_case *ac) {
    if (!ac->decode_tokens || ac->n_decode_tokens < 0) return gc->n_decode;
    for (int k = 0; k < gc->n_decode; k++)
        if (k >= ac->n_decode_tokens || ac->decode_tokens[k] != gc->decode_tokens[k]) return k;
    return gc->n_decode;
}

void qd_router(ck_ctx *c, const diff_opts *d, const qc_golden_case *gc, const qc_actual_case *ac) {
    const qc_config *cfg = c->cfg;
    const int n_dec = comparable_steps(gc, ac);
    const char *skip = router_skip(cfg, gc, ac, n_dec);
    if (skip) {
        ck_emit_simple(c, gc->name, d->label, "file", "router_topk", QC_VERDICT_SKIP, skip, NULL);
        return;
    }
    ck_router_tally t;
    ck_router_tally_init(&t, c->g ? c->g->router_margin_threshold : -1);
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, gc->name);
    qc_tol tol;
    if (gc->prefill_topk_ids && ac->prefill_topk_ids) {
        qc_policy_lookup(c->pol, QC_TC_HIDDEN, d->label, "file", "router_topk", case_id,
                         "prefill/router/topk_weights", &tol, NULL);
        ck_router_tally_add(&t, &tol, cfg->n_layers, gc->n_tokens, cfg->n_experts_per_tok,
                            cfg->n_experts, 0, gc->start_pos, gc->prefill_topk_ids,
                            gc->prefill_topk_weights, gc->prefill_router_margins,
                            ac->prefill_topk_ids, ac->prefill_topk_weights, NULL);
    }
    if (gc->decode_topk_ids && ac->decode_topk_ids && n_dec > 0) {
        qc_policy_lookup(c->pol, QC_TC_HIDDEN, d->label, "file", "router_topk", case_id,
                         "decode/router/topk_weights", &tol, NULL);
        if (add_decode(c, &t, &tol, gc, ac, n_dec)) {
            ck_emit_simple(c, gc->name, d->label, "file", "router_topk", QC_VERDICT_ERROR,
                           "out of memory", NULL);
            return;
        }
    }
    ck_router_emit(c, gc, &t, d->label, "file", NULL);
}
