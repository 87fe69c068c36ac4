/* qc_metrics_dist.h — distribution metrics of logit rows for the reduced-precision tiers
 * (docs/tolerance-tiers.md; the same definitions as golden/qcgolden/precision_run.py):
 *   KL(golden || actual) per row (qc_kl_row): its mean, nearest-rank p99 (the ceil(0.99 n)-th
 *   smallest) and max over the rows of one check;
 *   same-top-1 rate: rows whose argmax agrees / rows whose golden top1 - top2 > tie_delta
 *   (golden near-ties excluded; argmax ties -> the lowest id);
 *   top-k overlap: |top-k(golden) & top-k(actual)| / k per row (ties -> the lower id), its mean.
 * A non-finite actual value makes that row's KL +inf.
 */
#ifndef QC_METRICS_DIST_H
#define QC_METRICS_DIST_H

#include "qc_metrics.h"

typedef struct {
    long rows;              /* rows added */
    double *kl;             /* [rows] per-row KL (owned; grown by qc_dist_add) */
    long cap;
    int oom;                /* 1: an allocation failed (the metrics are incomplete) */
    long top1_rows;         /* rows outside near-ties */
    long top1_agree;        /* of those, rows whose argmax agrees */
    double topk_sum;        /* sum of the per-row overlaps */
    qc_tdesc worst_desc;    /* the part of the row with the largest KL */
    long worst_row;         /* its row in that part (-1: none) */
    double kl_mean, kl_p99, kl_max, top1_rate, topk_mean; /* set by qc_dist_finish */
} qc_dist;

void qc_dist_init(qc_dist *m);
/* Add the d->shape[0] rows of a [rows, V] logits part (k of the top-k overlap, tie_delta). */
void qc_dist_add(qc_dist *m, const qc_tdesc *d, const float *actual, const float *golden, int k,
                 double tie_delta);
/* Derive the means, p99 and rates (no rows: every metric 0, rates 1). */
void qc_dist_finish(qc_dist *m);
/* Frees m->kl. */
void qc_dist_free(qc_dist *m);

#endif /* QC_METRICS_DIST_H */
