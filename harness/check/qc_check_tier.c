/* qc_check_tier.c — the distribution rows of a reduced-precision tier (qc_tier.h): after a
 * logits comparison against the golden, one row per metric (KL mean / p99 / max, same-top-1
 * rate outside near-ties, top-k overlap), each held to the tier's limit. */

#include "qc_check_internal.h"
#include "qc_metrics_dist.h"
#include "qc_tier.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ===================================================================================== */
/* one metric row                                                                        */
/* ===================================================================================== */

/* A row "<check>.<metric>": value compared with limit (upper: value <= limit, else >=). */
static void tier_row(ck_ctx *c, const cmp_spec *s, const qc_tier_gate *g, const char *scope,
                     const char *metric, double value, double limit, int upper, long rows,
                     const char *what, const char *worst) {
    char check[96];
    snprintf(check, sizeof check, "%s.%s", s->check, metric);
    qc_check_row r;
    ck_row_init(&r, c->stem, s->case_name, s->backend, s->mode, check);
    int ok = upper ? value <= limit : value >= limit;
    if (!isfinite(value)) ok = 0;
    r.verdict = ok ? QC_VERDICT_PASS : QC_VERDICT_FAIL;
    snprintf(r.keyline, sizeof r.keyline, "%s %.4g %s %.4g (tier %s, limit of %s, %ld rows)",
             metric, value, upper ? "<=" : ">=", limit, g->name, scope, rows);
    if (!ok)
        r.detail = qc_strdup_printf("Tier %s: %s of %s is %.6g, %s %.6g allowed (%s)%s%s",
                                    g->name, what, s->check, value,
                                    upper ? "at most" : "at least", limit,
                                    "docs/tolerance-tiers.md", worst ? "\n" : "",
                                    worst ? worst : "");
    ck_emit(c, &r);
}

/* ===================================================================================== */
/* the rows of one logits comparison                                                     */
/* ===================================================================================== */

void ck_tier_rows(ck_ctx *c, const cmp_spec *s, const ck_partlist *pl) {
    const qc_tier_gate *g = qc_policy_tier(c->pol);
    if (!g || !g->dist) return;
    /* the limits measured on this golden when the tier has them, else the tier's */
    double kl_mean = g->kl_mean, kl_p99 = g->kl_p99, kl_max = g->kl_max, topk_min = g->topk_min;
    double tie = qc_policy_tie_margin(c->pol);
    const char *scope = "every fixture";
    for (int i = 0; c->stem && i < g->n_stems; i++) {
        if (strcmp(g->stems[i].stem, c->stem)) continue;
        kl_mean = g->stems[i].kl_mean, kl_p99 = g->stems[i].kl_p99;
        kl_max = g->stems[i].kl_max, topk_min = g->stems[i].topk_min;
        tie = g->stems[i].tie_delta > 0.0 ? g->stems[i].tie_delta : tie;
        scope = g->stems[i].stem;
    }
    qc_dist m;
    qc_dist_init(&m);
    for (int i = 0; i < pl->n; i++)
        if (pl->p[i].d.cls == QC_TC_LOGITS)
            qc_dist_add(&m, &pl->p[i].d, pl->p[i].a, pl->p[i].g, g->topk, tie);
    qc_dist_finish(&m);
    if (m.rows == 0 || m.oom) {
        char check[96];
        snprintf(check, sizeof check, "%s.tier", s->check);
        ck_emit_simple(c, s->case_name, s->backend, s->mode, check,
                       m.oom ? QC_VERDICT_ERROR : QC_VERDICT_SKIP,
                       m.oom ? "tier rows: out of memory" : "tier rows: no logit rows", NULL);
        qc_dist_free(&m);
        return;
    }
    char worst[400] = "";
    if (m.worst_row >= 0) {
        char mean[256];
        qc_tdesc_meaning(&m.worst_desc, (size_t)m.worst_row * (size_t)m.worst_desc.shape[1],
                         mean, sizeof mean);
        snprintf(worst, sizeof worst, "Largest KL: %.6g nats at %s row %ld (%s)", m.kl_max,
                 m.worst_desc.path, m.worst_row, mean);
    }
    tier_row(c, s, g, scope, "kl_mean", m.kl_mean, kl_mean, 1, m.rows,
             "the mean of KL(golden || actual) over the rows", worst);
    tier_row(c, s, g, scope, "kl_p99", m.kl_p99, kl_p99, 1, m.rows,
             "the 99th percentile (nearest rank) of KL(golden || actual)", worst);
    tier_row(c, s, g, scope, "kl_max", m.kl_max, kl_max, 1, m.rows, "the largest KL(golden || actual)",
             worst);
    char why[160];
    snprintf(why, sizeof why, "the same-top-1 rate (rows whose golden top1 - top2 > %g: %ld)", tie,
             m.top1_rows);
    tier_row(c, s, g, scope, "top1", m.top1_rate, 1.0, 0, m.top1_rows, why, NULL);
    snprintf(why, sizeof why, "the mean top-%d overlap", g->topk);
    tier_row(c, s, g, scope, "topk", m.topk_mean, topk_min, 0, m.rows, why, NULL);
    qc_dist_free(&m);
}

double ck_tier_nmse(const ck_ctx *c, const cmp_spec *s, const ck_partlist *pl) {
    const qc_tier_gate *g = qc_policy_tier(c->pol);
    if (!g || !s->vs_golden || s->bitwise || pl->n == 0) return 0.0;
    return qc_tier_nmse_limit(g, c->stem, pl->p[0].d.cls);
}
