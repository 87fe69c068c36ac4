/* qc_check_topk_rows.c — the topk.* rows of a case and what they are measured against
 * (qc_check_http.h, qc_check_topk.h): the limits of a top-k comparison, the golden's logits row
 * of a position, a case's token sequence and the four rows from a tally. Shared by a server's
 * checks (qc_check_http.c), its serving battery (qc_check_serving.c), a top-k-only runtime
 * (qc_check_topk.c) and diff; calls none of them back (tests/check_cycles.py). */

#include "qc_check_http.h"
#include "qc_check_topk.h"
#include "qc_tier_topk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ck_topk_limits(const ck_ctx *c, const char *case_name, int k, qc_topk_lim *lim) {
    memset(lim, 0, sizeof *lim);
    char id[256];
    snprintf(id, sizeof id, "%s/%s", c->stem, case_name);
    qc_tol tol;
    qc_policy_lookup(c->pol, QC_TC_LOGITS, c->o->ext.name, CK_SERVED, "topk.logprob", id,
                     "prefill/logits", &tol, NULL);
    lim->lp_atol = tol.atol;
    lim->lp_rtol = tol.rtol;
    lim->tie = qc_policy_tie_margin(c->pol);
    lim->overlap_min = 1.0;
    const qc_tier_gate *tg = qc_policy_tier(c->pol);
    if (!tg) return; /* fp32: derived from the policy, per position (qc_topk.h) */
    /* a tier: its measured top-k limits (docs/tolerance-tiers.md "Top-k limits"), this
     * golden's own where it is a fixture */
    const qc_topk_limit *tl = qc_topk_limit_find(tg->name, c->stem, k);
    if (tl) {
        lim->lp_fixed = tl->lp_max_abs;
        if (tl->tie_delta > lim->tie) lim->tie = tl->tie_delta;
        lim->overlap_min = tl->overlap_min;
    } else {
        if (tg->tie_delta > lim->tie) lim->tie = tg->tie_delta;
        lim->overlap_min = tg->topk_min;
    }
}

const float *ck_golden_row(const qc_golden_case *gc, int V, int p) {
    int r = p - gc->start_pos;
    if (r < 0) return NULL;
    if (r < gc->n_tokens) return gc->prefill_logits + (size_t)r * (size_t)V;
    r -= gc->n_tokens;
    if (r < gc->n_decode && gc->decode_logits) return gc->decode_logits + (size_t)r * (size_t)V;
    return NULL;
}

int32_t *ck_case_seq(const qc_golden_case *gc, int *n) {
    int P = gc->n_history > 0 ? gc->n_history : 0;
    *n = P + gc->n_tokens + gc->n_decode;
    int32_t *s = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *s);
    if (!s) return NULL;
    if (P) memcpy(s, gc->history, (size_t)P * sizeof *s);
    memcpy(s + P, gc->tokens, (size_t)gc->n_tokens * sizeof *s);
    if (gc->n_decode) memcpy(s + P + gc->n_tokens, gc->decode_tokens,
                             (size_t)gc->n_decode * sizeof *s);
    return s;
}

/* "prompt position 12" / "decode step 3" */
static void where(const qc_golden_case *gc, int p, char *b, size_t n) {
    int r = p - gc->start_pos;
    if (r < gc->n_tokens) snprintf(b, n, "prompt position %d", p);
    else snprintf(b, n, "decode step %d (position %d)", r - gc->n_tokens, p);
}

void ck_topk_emit_rows(ck_ctx *c, const qc_golden_case *gc, const qc_topk_lim *lim,
                       const ck_tf_result *r, const char *be, const char *mode) {
    char cost[160], w[96], kl[sizeof ((qc_check_row *)0)->keyline];
    snprintf(cost, sizeof cost, "%d of %d positions, %d request%s, %.2f s", r->scored, r->total,
             r->requests, r->requests == 1 ? "" : "s", r->seconds);
    if (!r->requests) /* a file (diff) or a run's logits (--topk): nothing was asked */
        snprintf(cost, sizeof cost, "%d of %d positions", r->scored, r->total);
    static const char *const names[4] = {"topk.argmax", "topk.logprob", "topk.top1_in_k",
                                         "topk.overlap"};
    if (r->fail[0]) {
        for (int i = 0; i < 4; i++)
            ck_emit_simple(c, gc->name, be, mode, names[i], QC_VERDICT_FAIL,
                           "the server's answer is not valid: see detail",
                           qc_strdup_printf("%s\n%s", r->fail, cost));
        return;
    }
    const qc_topk_tally *t = &r->t;
    /* argmax */
    if (t->flips) {
        where(gc, t->flip_pos, w, sizeof w);
        snprintf(kl, sizeof kl, "argmax differs at %ld of %ld positions, first at %s: golden %d, "
                 "server %d (golden margin %.3g > tie %.3g); %s", t->flips, t->rows, w,
                 (int)t->flip_exp, (int)t->flip_got, t->flip_margin, lim->tie, cost);
    } else {
        snprintf(kl, sizeof kl, "argmax agrees at %ld positions (%ld near-ties within %.3g); %s",
                 t->rows, t->ties, lim->tie, cost);
    }
    ck_emit_simple(c, gc->name, be, mode, names[0],
                   t->flips ? QC_VERDICT_FAIL : QC_VERDICT_PASS, kl, NULL);
    /* logprob */
    where(gc, t->lp_pos < 0 ? gc->start_pos : t->lp_pos, w, sizeof w);
    if (t->lp_bad)
        snprintf(kl, sizeof kl, "|d logprob| over its limit at %ld of %ld entries; worst at %s, "
                 "token %d: server %.6g, golden %.6g (|d| %.3g > %.3g)", t->lp_bad, t->lp_n, w,
                 (int)t->lp_tok, t->lp_got, t->lp_exp, fabs(t->lp_got - t->lp_exp), t->lp_lim);
    else
        snprintf(kl, sizeof kl, "max |d logprob| %.3g over %ld entries (limit %.3g at the worst "
                 "ratio, %s)", t->lp_max, t->lp_n, t->lp_lim, w);
    ck_emit_simple(c, gc->name, be, mode, names[1],
                   t->lp_bad ? QC_VERDICT_FAIL : QC_VERDICT_PASS, kl, NULL);
    /* top1 in k */
    if (t->missing) {
        where(gc, t->miss_pos, w, sizeof w);
        snprintf(kl, sizeof kl, "the golden's top-1 is missing from the server's top-k at %ld "
                 "positions, first at %s (token %d)", t->missing, w, (int)t->miss_tok);
    } else {
        snprintf(kl, sizeof kl, "the golden's top-1 is in the server's top-k at every position");
    }
    ck_emit_simple(c, gc->name, be, mode, names[2],
                   t->missing ? QC_VERDICT_FAIL : QC_VERDICT_PASS, kl, NULL);
    /* overlap */
    int bad = t->ov_min < lim->overlap_min - 1e-12;
    where(gc, t->ov_pos < 0 ? gc->start_pos : t->ov_pos, w, sizeof w);
    snprintf(kl, sizeof kl, "top-k overlap min %.3f (at %s), mean %.3f; limit %.3f (boundary "
             "near-ties excused)", t->ov_min, w, t->rows ? t->ov_sum / (double)t->rows : 1.0,
             lim->overlap_min);
    ck_emit_simple(c, gc->name, be, mode, names[3], bad ? QC_VERDICT_FAIL : QC_VERDICT_PASS,
                   kl, NULL);
}
