/* qc_metrics.c — comparison metrics (see qc_metrics.h for the definitions). */

#include "qc_metrics.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Tensor classes and descriptors                                                            */
/* ---------------------------------------------------------------------------------------- */

static const char *const tclass_names[QC_TC_COUNT] = {
    "logits", "hidden", "k_cache", "v_cache", "conv_state", "recurrent_state",
};

const char *qc_tclass_str(qc_tclass c) {
    if ((int)c < 0 || c >= QC_TC_COUNT) return "?";
    return tclass_names[c];
}

int qc_tclass_parse(const char *s, qc_tclass *c) {
    for (int i = 0; i < QC_TC_COUNT; i++) {
        if (s && strcmp(s, tclass_names[i]) == 0) {
            *c = (qc_tclass)i;
            return 0;
        }
    }
    return -1;
}

void qc_tdesc_init(qc_tdesc *d, qc_tclass cls, const char *path, int ndim, const int64_t *shape) {
    memset(d, 0, sizeof *d);
    d->cls = cls;
    snprintf(d->path, sizeof d->path, "%s", path ? path : "");
    d->ndim = ndim < 1 ? 1 : (ndim > 4 ? 4 : ndim);
    for (int i = 0; i < d->ndim; i++) d->shape[i] = shape[i];
    d->layer = -1;
}

size_t qc_tdesc_numel(const qc_tdesc *d) {
    size_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= (size_t)(d->shape[i] > 0 ? d->shape[i] : 0);
    return n;
}

/* Split flat into per-axis indices. */
static void unravel(const qc_tdesc *d, size_t flat, int64_t *ix) {
    for (int i = d->ndim - 1; i >= 0; i--) {
        int64_t s = d->shape[i] > 0 ? d->shape[i] : 1;
        ix[i] = (int64_t)(flat % (size_t)s);
        flat /= (size_t)s;
    }
}

void qc_tdesc_index_str(const qc_tdesc *d, size_t flat, char *buf, size_t len) {
    int64_t ix[4] = {0};
    unravel(d, flat, ix);
    size_t o = 0;
    o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "(");
    for (int i = 0; i < d->ndim; i++)
        o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "%s%lld", i ? ", " : "",
                              (long long)ix[i]);
    if (d->ndim == 1) o += (size_t)snprintf(buf + o, o < len ? len - o : 0, ",");
    snprintf(buf + o, o < len ? len - o : 0, ")");
}

void qc_tdesc_meaning(const qc_tdesc *d, size_t flat, char *buf, size_t len) {
    int64_t ix[4] = {0};
    unravel(d, flat, ix);
    switch (d->cls) {
    case QC_TC_LOGITS:
        if (d->decode)
            snprintf(buf, len, "decode step %lld (position %lld), vocab %lld", (long long)ix[0],
                     (long long)(d->pos0 + ix[0]), (long long)ix[1]);
        else
            snprintf(buf, len, "position %lld, vocab %lld", (long long)(d->pos0 + ix[0]),
                     (long long)ix[1]);
        break;
    case QC_TC_HIDDEN: {
        char what[64];
        if (ix[0] == 0)
            snprintf(what, sizeof what, "embeddings");
        else if (d->n_layers > 0 && ix[0] >= d->n_layers)
            snprintf(what, sizeof what, "final norm after layer %lld", (long long)(ix[0] - 1));
        else
            snprintf(what, sizeof what, "output of layer %lld", (long long)(ix[0] - 1));
        snprintf(buf, len, "hidden[%lld] (%s), position %lld, channel %lld", (long long)ix[0],
                 what, (long long)(d->pos0 + ix[1]), (long long)ix[2]);
        break;
    }
    case QC_TC_K_CACHE:
    case QC_TC_V_CACHE:
        snprintf(buf, len, "layer %d, kv head %lld, position %lld, channel %lld", d->layer,
                 (long long)ix[0], (long long)ix[1], (long long)ix[2]);
        break;
    case QC_TC_CONV_STATE: {
        long long c = ix[0];
        char part[64];
        if (d->key_dim > 0 && d->dk > 0 && d->dv > 0) {
            if (c < d->key_dim)
                snprintf(part, sizeof part, "q head %lld dim %lld", c / d->dk, c % d->dk);
            else if (c < 2LL * d->key_dim)
                snprintf(part, sizeof part, "k head %lld dim %lld", (c - d->key_dim) / d->dk,
                         (c - d->key_dim) % d->dk);
            else
                snprintf(part, sizeof part, "v head %lld dim %lld",
                         (c - 2LL * d->key_dim) / d->dv, (c - 2LL * d->key_dim) % d->dv);
        } else {
            snprintf(part, sizeof part, "-");
        }
        snprintf(buf, len, "layer %d, conv channel %lld (%s), column %lld of %lld (oldest first)",
                 d->layer, c, part, (long long)ix[1], (long long)d->shape[1]);
        break;
    }
    case QC_TC_RECURRENT_STATE:
        snprintf(buf, len, "layer %d, v head %lld, key dim %lld, value dim %lld", d->layer,
                 (long long)ix[0], (long long)ix[1], (long long)ix[2]);
        break;
    default:
        qc_tdesc_index_str(d, flat, buf, len);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Accumulation                                                                              */
/* ---------------------------------------------------------------------------------------- */

void qc_metrics_init(qc_metrics *m, int bitwise) {
    memset(m, 0, sizeof *m);
    m->bitwise = bitwise;
    m->kl_max_row = -1;
}

static void set_loc(qc_loc *l, const qc_tdesc *d, size_t i, float a, float g, double v) {
    l->valid = 1;
    l->desc = *d;
    l->idx = i;
    l->actual = a;
    l->golden = g;
    l->value = v;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

void qc_metrics_add(qc_metrics *m, const qc_tdesc *d, const float *actual, const float *golden) {
    size_t n = qc_tdesc_numel(d);
    m->n_parts++;
    m->n += n;
    for (size_t i = 0; i < n; i++) {
        float a = actual[i], g = golden[i];
        int fin = isfinite(a) && isfinite(g);
        if (!isfinite(a)) {
            m->n_nonfinite++;
            if (!m->first_nonfinite.valid) set_loc(&m->first_nonfinite, d, i, a, g, INFINITY);
            if (!m->worst.valid || isfinite(m->worst.value))
                set_loc(&m->worst, d, i, a, g, INFINITY);
        }
        int mismatch;
        if (m->bitwise) {
            mismatch = f32_bits(a) != f32_bits(g);
        } else {
            mismatch = !fin;
        }
        if (fin) {
            double da = a, dg = g, diff = fabs(da - dg);
            double rel = diff == 0.0 ? 0.0 : (dg == 0.0 ? INFINITY : diff / fabs(dg));
            double allowed = m->bitwise ? 0.0 : d->atol + d->rtol * fabs(dg);
            double ratio = diff == 0.0 ? 0.0 : (allowed > 0.0 ? diff / allowed : INFINITY);
            if (!m->bitwise && diff > allowed) mismatch = 1;
            if (!m->at_max_abs.valid || diff > m->max_abs) {
                m->max_abs = diff;
                set_loc(&m->at_max_abs, d, i, a, g, diff);
            }
            if (!m->at_max_rel.valid || rel > m->max_rel) {
                m->max_rel = rel;
                set_loc(&m->at_max_rel, d, i, a, g, rel);
            }
            if (!m->worst.valid || (isfinite(m->worst.value) && ratio > m->worst.value) ||
                (m->worst.value == INFINITY && ratio == INFINITY && isfinite(m->worst.actual) &&
                 diff > fabs((double)m->worst.actual - m->worst.golden)))
                set_loc(&m->worst, d, i, a, g, ratio);
            m->sum_ag += da * dg;
            m->sum_aa += da * da;
            m->sum_gg += dg * dg;
            m->sum_dd += (da - dg) * (da - dg);
        }
        if (mismatch) {
            m->n_mismatch++;
            if (!m->first_mismatch.valid) set_loc(&m->first_mismatch, d, i, a, g, 0.0);
        }
    }
}

double qc_kl_row(const float *golden, const float *actual, int V) {
    double mg = -INFINITY, ma = -INFINITY;
    for (int j = 0; j < V; j++) {
        if (!isfinite(golden[j]) || !isfinite(actual[j])) return INFINITY;
        if (golden[j] > mg) mg = golden[j];
        if (actual[j] > ma) ma = actual[j];
    }
    double sg = 0.0, sa = 0.0;
    for (int j = 0; j < V; j++) {
        sg += exp((double)golden[j] - mg);
        sa += exp((double)actual[j] - ma);
    }
    double lzg = mg + log(sg), lza = ma + log(sa), kl = 0.0;
    for (int j = 0; j < V; j++) {
        double lg = (double)golden[j] - lzg, la = (double)actual[j] - lza;
        kl += exp(lg) * (lg - la);
    }
    return kl < 0.0 ? 0.0 : kl;
}

/* argmax with ties to the lowest index; also the runner-up value. */
static int argmax2(const float *v, int n, double *top1, double *top2) {
    int best = 0;
    double b1 = -INFINITY, b2 = -INFINITY;
    for (int j = 0; j < n; j++) {
        double x = v[j];
        if (x > b1) {
            b2 = b1;
            b1 = x;
            best = j;
        } else if (x > b2) {
            b2 = x;
        }
    }
    *top1 = b1;
    *top2 = b2;
    return best;
}

void qc_metrics_add_logits(qc_metrics *m, const qc_tdesc *d, const float *actual,
                           const float *golden, double tie_margin) {
    qc_metrics_add(m, d, actual, golden);
    m->has_logits = 1;
    long rows = (long)d->shape[0];
    int V = (int)d->shape[1];
    for (long r = 0; r < rows; r++) {
        const float *a = actual + (size_t)r * (size_t)V, *g = golden + (size_t)r * (size_t)V;
        double g1, g2, a1, a2;
        int ag = argmax2(g, V, &g1, &g2), aa = argmax2(a, V, &a1, &a2);
        m->rows++;
        if (ag == aa) {
            m->top1_agree++;
        } else {
            if (g1 - g2 <= tie_margin) m->top1_near_tie++;
            if (!m->first_top1_flip.valid) {
                size_t idx = (size_t)r * (size_t)V + (size_t)aa;
                set_loc(&m->first_top1_flip, d, idx, a[aa], g[aa], g1 - g2);
                m->flip_golden_arg = ag;
            }
        }
        double kl = qc_kl_row(g, a, V);
        m->kl_sum += kl;
        if (m->kl_max_row < 0 || kl > m->kl_max) {
            m->kl_max = kl;
            m->kl_max_row = r;
            m->kl_max_desc = *d;
        }
    }
}

void qc_metrics_finish(qc_metrics *m) {
    if (m->sum_aa == 0.0 && m->sum_gg == 0.0)
        m->cosine = 1.0;
    else if (m->sum_aa == 0.0 || m->sum_gg == 0.0)
        m->cosine = 0.0;
    else
        m->cosine = m->sum_ag / (sqrt(m->sum_aa) * sqrt(m->sum_gg));
    if (m->n_nonfinite > 0)
        m->cosine = NAN, m->nmse = NAN;
    else if (m->sum_dd == 0.0)
        m->nmse = 0.0;
    else
        m->nmse = m->sum_gg > 0.0 ? m->sum_dd / m->sum_gg : INFINITY;
    m->kl_mean = m->rows > 0 ? m->kl_sum / (double)m->rows : 0.0;
}

int qc_metrics_close(const qc_metrics *m) {
    return m->n > 0 && m->n_nonfinite == 0 && m->n_mismatch == 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Text                                                                                      */
/* ---------------------------------------------------------------------------------------- */

double qc_round_125(double x) {
    if (!(x > 0.0)) return 0.0;
    if (!isfinite(x)) return x;
    double e = floor(log10(x));
    double base = pow(10.0, e);
    static const double steps[] = {1.0, 2.0, 5.0, 10.0};
    for (int i = 0; i < 4; i++) {
        double v = steps[i] * base;
        /* guard against pow/log10 rounding: accept v when within 1e-12 relative */
        if (v >= x * (1.0 - 1e-12)) return v;
    }
    return 10.0 * base;
}

void qc_loc_str(const qc_loc *l, char *buf, size_t len) {
    if (!l->valid) {
        snprintf(buf, len, "-");
        return;
    }
    char ix[96], mean[192];
    qc_tdesc_index_str(&l->desc, l->idx, ix, sizeof ix);
    qc_tdesc_meaning(&l->desc, l->idx, mean, sizeof mean);
    snprintf(buf, len, "%s %s [%s]", l->desc.path, ix, mean);
}

#define APPEND(...)                                                              \
    do {                                                                         \
        if (o < len) o += (size_t)snprintf(buf + o, len - o, __VA_ARGS__);       \
    } while (0)

void qc_metrics_summary(const qc_metrics *m, char *buf, size_t len) {
    size_t o = 0;
    char where[512];
    if (len) buf[0] = 0;
    if (m->n == 0) {
        APPEND("No elements were compared (a check that compares nothing fails)");
        return;
    }
    double pct = 100.0 * (double)m->n_mismatch / (double)m->n;
    if (m->n_mismatch == 0 && m->n_nonfinite > 0) /* e.g. NaN in both runs, bit for bit */
        APPEND("Bit-identical, but %zu / %zu values are non-finite (NaN / Inf) in both: the "
               "comparison is exact, the computation itself produced them", m->n_nonfinite, m->n);
    else
        APPEND("Mismatched elements%s: %zu / %zu (%.1f%%)", m->bitwise ? " (bitwise)" : "",
               m->n_mismatch, m->n, pct);
    if (m->first_nonfinite.valid) {
        qc_loc_str(&m->first_nonfinite, where, sizeof where);
        APPEND("\nFirst non-finite actual value: %g at %s", (double)m->first_nonfinite.actual,
               where);
    }
    if (m->at_max_abs.valid) {
        char ix[96];
        qc_tdesc_index_str(&m->at_max_abs.desc, m->at_max_abs.idx, ix, sizeof ix);
        if (m->bitwise)
            APPEND("\nGreatest absolute difference: %.6g at %s index %s (bit-identical "
                   "required)", m->max_abs, m->at_max_abs.desc.path, ix);
        else
            APPEND("\nGreatest absolute difference: %.6g at %s index %s (up to %g allowed)",
                   m->max_abs, m->at_max_abs.desc.path, ix, m->at_max_abs.desc.atol);
    }
    if (m->at_max_rel.valid) {
        char ix[96];
        qc_tdesc_index_str(&m->at_max_rel.desc, m->at_max_rel.idx, ix, sizeof ix);
        if (m->bitwise)
            APPEND("\nGreatest relative difference: %.6g at %s index %s", m->max_rel,
                   m->at_max_rel.desc.path, ix);
        else
            APPEND("\nGreatest relative difference: %.6g at %s index %s (up to %g allowed)",
                   m->max_rel, m->at_max_rel.desc.path, ix, m->at_max_rel.desc.rtol);
    }
    const qc_loc *w = m->bitwise ? &m->first_mismatch : &m->worst;
    if (w->valid && (m->n_mismatch > 0 || m->n_nonfinite > 0)) {
        qc_loc_str(w, where, sizeof where);
        APPEND("\n%s: %s: actual %.9g, expected %.9g", m->bitwise ? "First difference"
                                                                  : "Worst element",
               where, (double)w->actual, (double)w->golden);
    }
    if (m->has_logits) {
        APPEND("\nTop-1 agreement: %ld / %ld rows", m->top1_agree, m->rows);
        if (m->top1_near_tie) APPEND(" (%ld disagreement(s) at golden near-ties)",
                                     m->top1_near_tie);
        if (m->first_top1_flip.valid) {
            char mean[192];
            qc_tdesc_meaning(&m->first_top1_flip.desc, m->first_top1_flip.idx, mean,
                             sizeof mean);
            APPEND("\nFirst top-1 flip: %s: golden argmax %d, actual argmax at %s (golden "
                   "margin %.4g)", m->first_top1_flip.desc.path, m->flip_golden_arg, mean,
                   m->first_top1_flip.value);
        }
        APPEND("\nKL(golden || actual): mean %.3g, max %.3g nats (row %ld of %s)", m->kl_mean,
               m->kl_max, m->kl_max_row, m->kl_max_desc.path);
    }
}

void qc_metrics_keyline(const qc_metrics *m, char *buf, size_t len) {
    size_t o = 0;
    if (len) buf[0] = 0;
    APPEND("max_abs %.3g max_rel %.3g mism %zu/%zu", m->max_abs, m->max_rel, m->n_mismatch, m->n);
    if (m->n_nonfinite) APPEND(" nonfinite %zu", m->n_nonfinite);
    if (!m->bitwise) APPEND(" cos %.6f nmse %.3g", m->cosine, m->nmse);
    if (m->has_logits) APPEND(" top1 %ld/%ld kl_max %.3g", m->top1_agree, m->rows, m->kl_max);
}
