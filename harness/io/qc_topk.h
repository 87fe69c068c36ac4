/* qc_topk.h — checking top-k log-probabilities (what a server returns) against full golden
 * logits, and two top-k answers against each other.
 *
 * Per position, the golden's log-probabilities lpg = g - logsumexp(g) (double) and the
 * runtime's top-k list (ids descending, log-probabilities lp). One tally accumulates a check
 * row's positions; each metric is its own row (qc_check_http.c):
 *   argmax     ids[0] == argmax(g), unless the golden margin lpg[argmax] - lpg[ids[0]] <= tie
 *   logprob    |lp[j] - lpg[ids[j]]| <= limit for every j. limit = 2 (atol + rtol max|g|) from
 *              the policy's logits tolerance (log-softmax shifts every entry by the same
 *              logsumexp error, so |d lp| <= 2 max |d logit|), or a tier's measured limit
 *   top1_in_k  argmax(g) among ids, unless lpg[argmax] - lpg[ids[k-1]] <= tie
 *   overlap    |{j: golden rank of ids[j] < k, or lpg[ids[j]] >= (golden k-th) - 2 limit}| / k,
 *              its minimum over positions >= overlap_min
 * Ownership: plain structs, no allocation.
 */
#ifndef QC_TOPK_H
#define QC_TOPK_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    double tie;          /* near-tie margin on golden log-probabilities */
    double lp_atol;      /* the logits tolerance the limit derives from ... */
    double lp_rtol;
    double lp_fixed;     /* > 0: a fixed |d lp| limit instead (a tier's measured top-k limit) */
    double overlap_min;  /* each position's overlap must be >= this (1: every entry) */
} qc_topk_lim;

typedef struct {
    long rows;                 /* positions tallied */
    /* argmax */
    long flips, ties;          /* flips beyond tie / excused as near-ties */
    int flip_pos;              /* first flip beyond tie (-1: none) */
    int32_t flip_exp, flip_got;
    double flip_margin;
    /* logprob */
    long lp_n, lp_bad;         /* entries compared / over their limit */
    double lp_max;             /* max |d lp| */
    double lp_ratio;           /* max |d lp| / limit */
    int lp_pos;                /* where the worst ratio is */
    int32_t lp_tok;
    double lp_got, lp_exp, lp_lim;
    /* top1 in k */
    long missing;
    int miss_pos;
    int32_t miss_tok;
    /* overlap */
    double ov_min, ov_sum;
    int ov_pos;
} qc_topk_tally;

void qc_topk_tally_init(qc_topk_tally *t);
/* One position: golden logits g[V], the runtime's ids/lps[k] (descending), pos for messages. */
void qc_topk_tally_row(qc_topk_tally *t, const qc_topk_lim *lim, const float *g, int V,
                       const int32_t *ids, const float *lps, int k, int pos);
/* The |d lp| limit of one position (lp_fixed, or 2 (atol + rtol max|g|)). */
double qc_topk_lp_limit(const qc_topk_lim *lim, const float *g, int V);

/* Two top-k answers for the same position (a runtime against itself: repeated, concurrent,
 * cached vs cold). *bitwise: identical ids and log-probabilities. Returns 1 when they agree
 * within lim_lp: same top-1 (or a near-tie of `tie` within a), |d lp| <= lim_lp on every id in
 * both, and an id in only one list within lim_lp + tie of the other's k-th. *maxd: max |d lp|
 * over the ids in both. */
int qc_topk_agree(const int32_t *ia, const float *la, const int32_t *ib, const float *lb, int k,
                  double lim_lp, double tie, int *bitwise, double *maxd);

/* A runtime's top-k answer of `rows` positions (absolute position pos0 + r) is well formed:
 * every id in [0, V) and distinct within its row, every log-probability finite and <= lp_max,
 * each row non-increasing. 0, or -1 with why = the first offence and its position. */
int qc_topk_check_answer(const int32_t *ids, const float *lps, int rows, int k, int V,
                         double lp_max, int pos0, char *why, size_t cap);

#endif /* QC_TOPK_H */
