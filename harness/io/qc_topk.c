/* qc_topk.c — top-k log-probabilities against golden logits (qc_topk.h). */
#include "qc_topk.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void qc_topk_tally_init(qc_topk_tally *t) {
    memset(t, 0, sizeof *t);
    t->flip_pos = t->lp_pos = t->miss_pos = t->ov_pos = -1;
    t->ov_min = 1.0;
}

double qc_topk_lp_limit(const qc_topk_lim *lim, const float *g, int V) {
    if (lim->lp_fixed > 0) return lim->lp_fixed;
    double gmax = 0;
    for (int i = 0; i < V; i++)
        if (fabs(g[i]) > gmax) gmax = fabs(g[i]);
    return 2.0 * (lim->lp_atol + lim->lp_rtol * gmax);
}

/* The golden's log-sum-exp and argmax. */
static double golden_lse(const float *g, int V, int *argmax) {
    int am = 0;
    for (int i = 1; i < V; i++)
        if (g[i] > g[am]) am = i;
    double s = 0;
    for (int i = 0; i < V; i++) s += exp((double)g[i] - (double)g[am]);
    *argmax = am;
    return (double)g[am] + log(s);
}

/* The k-th largest golden logit (k <= V), and whether id is among the k largest (rank < k). */
static double kth_largest(const float *g, int V, int k) {
    /* k passes of "largest below the previous", counting duplicates: k is small */
    double prev = INFINITY;
    int taken = 0;
    double v = -INFINITY;
    while (taken < k) {
        v = -INFINITY;
        for (int i = 0; i < V; i++)
            if (g[i] < prev && g[i] > v) v = g[i];
        if (v == -INFINITY) break;
        int dup = 0;
        for (int i = 0; i < V; i++) dup += g[i] == v;
        taken += dup;
        prev = v;
    }
    return v;
}

void qc_topk_tally_row(qc_topk_tally *t, const qc_topk_lim *lim, const float *g, int V,
                       const int32_t *ids, const float *lps, int k, int pos) {
    int am;
    double lse = golden_lse(g, V, &am);
    double limit = qc_topk_lp_limit(lim, g, V);
    t->rows++;
    /* argmax */
    if (ids[0] != am) {
        double margin = (double)g[am] - (double)g[ids[0]];
        if (margin <= lim->tie) {
            t->ties++;
        } else if (t->flips++ == 0) {
            t->flip_pos = pos;
            t->flip_exp = am;
            t->flip_got = ids[0];
            t->flip_margin = margin;
        }
    }
    /* logprob */
    for (int j = 0; j < k; j++) {
        double exp_lp = (double)g[ids[j]] - lse;
        double d = fabs((double)lps[j] - exp_lp);
        t->lp_n++;
        if (d > t->lp_max) t->lp_max = d;
        if (d > limit) t->lp_bad++;
        double r = limit > 0 ? d / limit : (d > 0 ? INFINITY : 0);
        if (r > t->lp_ratio || t->lp_pos < 0) {
            t->lp_ratio = r;
            t->lp_pos = pos;
            t->lp_tok = ids[j];
            t->lp_got = lps[j];
            t->lp_exp = exp_lp;
            t->lp_lim = limit;
        }
    }
    /* top1 in k */
    int in = 0;
    for (int j = 0; j < k; j++) in |= ids[j] == am;
    if (!in && (double)g[am] - (double)g[ids[k - 1]] > lim->tie && t->missing++ == 0) {
        t->miss_pos = pos;
        t->miss_tok = am;
    }
    /* overlap, near-ties at the k-th boundary excused */
    double kth = kth_largest(g, V, k < V ? k : V);
    double allow = 2.0 * limit > lim->tie ? 2.0 * limit : lim->tie;
    int cnt = 0;
    for (int j = 0; j < k; j++) cnt += (double)g[ids[j]] >= kth - allow;
    double ov = (double)cnt / k;
    t->ov_sum += ov;
    if (ov < t->ov_min || t->ov_pos < 0) {
        if (ov < t->ov_min) t->ov_min = ov;
        if (ov < 1.0 || t->ov_pos < 0) t->ov_pos = pos;
    }
}

int qc_topk_agree(const int32_t *ia, const float *la, const int32_t *ib, const float *lb, int k,
                  double lim_lp, double tie, int *bitwise, double *maxd) {
    *bitwise = !memcmp(ia, ib, (size_t)k * sizeof *ia) && !memcmp(la, lb, (size_t)k * sizeof *la);
    *maxd = 0;
    int ok = 1;
    if (ia[0] != ib[0]) {
        /* a flip of a near-tie: b's top-1 must be within tie of a's top-1 in a's list */
        int found = 0;
        for (int j = 0; j < k; j++)
            if (ia[j] == ib[0]) found = (double)la[0] - (double)la[j] <= tie;
        ok &= found;
    }
    for (int j = 0; j < k; j++) {
        int m = -1;
        for (int q = 0; q < k; q++)
            if (ib[q] == ia[j]) m = q;
        if (m >= 0) {
            double d = fabs((double)la[j] - (double)lb[m]);
            if (d > *maxd) *maxd = d;
            ok &= d <= lim_lp;
        } else {
            ok &= (double)la[j] <= (double)lb[k - 1] + lim_lp + tie;
        }
    }
    for (int j = 0; j < k; j++) { /* ids only b has: must sit at a's boundary */
        int m = 0;
        for (int q = 0; q < k; q++) m |= ia[q] == ib[j];
        if (!m) ok &= (double)lb[j] <= (double)la[k - 1] + lim_lp + tie;
    }
    return ok;
}

int qc_topk_check_answer(const int32_t *ids, const float *lps, int rows, int k, int V,
                         double lp_max, int pos0, char *why, size_t cap) {
    for (int r = 0; r < rows; r++) {
        const int32_t *id = ids + (size_t)r * (size_t)k;
        const float *lp = lps + (size_t)r * (size_t)k;
        for (int j = 0; j < k; j++) {
            const char *bad = NULL;
            if (id[j] < 0 || id[j] >= V) bad = "token id out of range";
            else if (!isfinite(lp[j])) bad = "log-probability not finite";
            else if ((double)lp[j] > lp_max) bad = "log-probability > 0";
            else if (j > 0 && lp[j] > lp[j - 1]) bad = "log-probabilities not descending";
            for (int q = 0; !bad && q < j; q++)
                if (id[q] == id[j]) bad = "token id repeated in the row";
            if (bad) {
                snprintf(why, cap, "%s at position %d, entry %d of %d: id %d, log-probability "
                         "%.9g (V = %d)", bad, pos0 + r, j, k, (int)id[j], (double)lp[j], V);
                return -1;
            }
        }
    }
    return 0;
}
