/* qc_metrics_dist.c — distribution metrics of logit rows (qc_metrics_dist.h). */
#include "qc_metrics_dist.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Row helpers                                                                               */
/* ---------------------------------------------------------------------------------------- */

/* The k largest of v (ties -> the lower index; NaN counts as -inf), into idx[k]. */
static void topk_ids(const float *v, int n, int k, int *idx) {
    for (int s = 0; s < k; s++) {
        int best = -1;
        double bv = 0.0;
        for (int j = 0; j < n; j++) {
            int used = 0;
            for (int t = 0; t < s; t++) used |= idx[t] == j;
            if (used) continue;
            double x = isnan(v[j]) ? -INFINITY : (double)v[j];
            if (best < 0 || x > bv) best = j, bv = x;
        }
        idx[s] = best;
    }
}

/* argmax (ties -> lowest) and top1 - top2 of a row. */
static int argmax_margin(const float *v, int n, double *margin) {
    int best = 0;
    double b1 = -INFINITY, b2 = -INFINITY;
    for (int j = 0; j < n; j++) {
        double x = isnan(v[j]) ? -INFINITY : (double)v[j];
        if (x > b1) b2 = b1, b1 = x, best = j;
        else if (x > b2) b2 = x;
    }
    *margin = b1 - b2;
    return best;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---------------------------------------------------------------------------------------- */
/* Accumulation                                                                              */
/* ---------------------------------------------------------------------------------------- */

void qc_dist_init(qc_dist *m) {
    memset(m, 0, sizeof *m);
    m->worst_row = -1;
}

void qc_dist_add(qc_dist *m, const qc_tdesc *d, const float *actual, const float *golden, int k,
                 double tie_delta) {
    if (!actual || !golden || d->ndim != 2) return;
    const long R = (long)d->shape[0];
    const int V = (int)d->shape[1];
    if (k > V) k = V;
    if (k > 64) k = 64;
    if (m->rows + R > m->cap) {
        long nc = m->cap ? m->cap : 64;
        while (nc < m->rows + R) nc *= 2;
        double *n = realloc(m->kl, (size_t)nc * sizeof *n);
        if (!n) {
            m->oom = 1;
            return;
        }
        m->kl = n;
        m->cap = nc;
    }
    int ig[64], ia[64];
    for (long r = 0; r < R; r++) {
        const float *g = golden + (size_t)r * V, *a = actual + (size_t)r * V;
        double kl = qc_kl_row(g, a, V);
        if (m->worst_row < 0 || kl > m->kl_max) {
            m->kl_max = kl;
            m->worst_row = r;
            m->worst_desc = *d;
        }
        m->kl[m->rows++] = kl;
        double mg, ma;
        int ag = argmax_margin(g, V, &mg), aa = argmax_margin(a, V, &ma);
        if (mg > tie_delta) {
            m->top1_rows++;
            m->top1_agree += ag == aa;
        }
        if (k > 0) {
            topk_ids(g, V, k, ig);
            topk_ids(a, V, k, ia);
            int common = 0;
            for (int s = 0; s < k; s++)
                for (int t = 0; t < k; t++) common += ig[s] == ia[t];
            m->topk_sum += (double)common / k;
        }
    }
}

void qc_dist_finish(qc_dist *m) {
    m->kl_mean = m->kl_p99 = 0.0;
    m->top1_rate = m->top1_rows ? (double)m->top1_agree / (double)m->top1_rows : 1.0;
    m->topk_mean = m->rows ? m->topk_sum / (double)m->rows : 1.0;
    if (m->rows == 0) {
        m->kl_max = 0.0;
        return;
    }
    double s = 0.0;
    for (long i = 0; i < m->rows; i++) s += m->kl[i];
    m->kl_mean = s / (double)m->rows;
    double *c = malloc((size_t)m->rows * sizeof *c);
    if (!c) {
        m->oom = 1;
        m->kl_p99 = m->kl_max;
        return;
    }
    memcpy(c, m->kl, (size_t)m->rows * sizeof *c);
    qsort(c, (size_t)m->rows, sizeof *c, cmp_double);
    long i = (long)ceil(0.99 * (double)m->rows) - 1;
    m->kl_p99 = c[i < 0 ? 0 : i];
    free(c);
}

void qc_dist_free(qc_dist *m) {
    free(m->kl);
    m->kl = NULL;
    m->cap = 0;
}
