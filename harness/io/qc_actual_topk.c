/* qc_actual_topk.c — the top-k part of the ACTUAL reader (golden/SCHEMA.md "Top-k ACTUAL"): a
 * case's optional prefill/topk and decode/topk datasets, what a runtime that gives top-k
 * log-probabilities only (a server: `record --like GOLDEN --backend http:URL`) writes instead
 * of the logits. ids [rows, k] of any integer type, logprobs [rows, k] of any float type, one
 * layout under every --layout (not counted in the layout row). Unlike logits, whose NaN is a
 * conformance failure, the lists are validated here like a server's answer: an id outside
 * [0, V) or twice in a row, a log-probability that is not finite or above 0, a row out of
 * descending order is a format error naming the file, the dataset and the entry.
 */

#include "qc_actual_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The same slack as a server's answer (qc_server_dialect.c): a float32 log-softmax of a
 * near-certain token may round a hair above 0. */
#define TK_LP_MAX 1e-3

/* The second extent of dataset `name` under tg when it is a rank-2 dataset, else -1 (the
 * reader that follows names the problem). */
static long long tk_cols(hid_t tg, const char *name) {
    long long k = -1;
    if (!gio_link_exists(tg, name)) return -1;
    hid_t o = H5Oopen(tg, name, H5P_DEFAULT);
    if (o >= 0 && H5Iget_type(o) == H5I_DATASET) {
        hid_t sp = H5Dget_space(o);
        hsize_t d[2];
        if (sp >= 0 && H5Sget_simple_extent_ndims(sp) == 2 &&
            H5Sget_simple_extent_dims(sp, d, NULL) == 2)
            k = (long long)d[1];
        CLOSE_S(sp);
    }
    if (o >= 0) H5Oclose(o);
    H5Eclear2(H5E_DEFAULT);
    return k;
}

/* Every entry of ids / lps [rows, k]: the first bad one as a format error. */
static qc_status tk_values(const ac_ctx *c, const char *tpath, int rows, int k, int V,
                           const int32_t *ids, const float *lps) {
    for (int r = 0; r < rows; r++) {
        const int32_t *ir = ids + (size_t)r * (size_t)k;
        const float *lr = lps + (size_t)r * (size_t)k;
        for (int j = 0; j < k; j++) {
            if (ir[j] < 0 || ir[j] >= V)
                return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/ids: [%d, %d] = %d: not a token id "
                               "in [0, %d)", c->file, tpath, r, j, (int)ir[j], V);
            for (int q = 0; q < j; q++)
                if (ir[q] == ir[j])
                    return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/ids: row %d: token %d listed "
                                   "twice ([%d, %d] and [%d, %d])", c->file, tpath, r,
                                   (int)ir[j], r, q, r, j);
            if (!isfinite(lr[j]) || lr[j] > TK_LP_MAX)
                return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/logprobs: [%d, %d] = %.9g: not a "
                               "finite log-probability <= 0", c->file, tpath, r, j,
                               (double)lr[j]);
            if (j > 0 && lr[j] > lr[j - 1])
                return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/logprobs: row %d: not in "
                               "descending order ([%d, %d] = %.9g > [%d, %d] = %.9g)", c->file,
                               tpath, r, r, j, (double)lr[j], r, j - 1, (double)lr[j - 1]);
        }
    }
    return QC_OK;
}

qc_status ac_topk(const ac_ctx *c, hid_t grp, const char *gpath, const qc_config *cfg, int rows,
                  int *k, int32_t **ids, float **lps) {
    *ids = NULL, *lps = NULL;
    hid_t tg = gio_group_if(grp, "topk");
    if (tg < 0) return QC_OK;
    char tpath[300];
    snprintf(tpath, sizeof tpath, "%s/topk", gpath);
    const int V = cfg->vocab_size;
    qc_status st = QC_OK;
    const char *alone = !gio_link_exists(tg, "ids") ? "ids" :
                        !gio_link_exists(tg, "logprobs") ? "logprobs" : NULL;
    if (alone) {
        st = qc_errf(c->err, QC_ERR_MISSING, "%s: %s/%s: missing dataset (a top-k list needs "
                     "both ids and logprobs [%s, k])", c->file, tpath, alone,
                     strstr(gpath, "/decode") ? "S" : "T");
        CLOSE_G(tg);
        return st;
    }
    long long kk = tk_cols(tg, "ids");
    if (kk == 0 || kk > V)
        st = qc_errf(c->err, QC_ERR_SHAPE, "%s: %s/ids: k = %lld entries per position: not in "
                     "[1, %d] (the vocabulary)", c->file, tpath, kk, V);
    else if (kk > 0 && *k > 0 && kk != *k)
        st = qc_errf(c->err, QC_ERR_SHAPE, "%s: %s/ids: k = %lld, the case's other top-k "
                     "group has k = %d (one k per case)", c->file, tpath, kk, *k);
    char what[64];
    snprintf(what, sizeof what, "[%s, k]", strstr(gpath, "/decode") ? "S" : "T");
    const ac_shape cand[1] = {{AC_CANON, 2, {rows, kk > 0 ? kk : -1}, 0, what}};
    /* one layout whatever --layout says, kept out of the layout row (a scratch case) */
    qc_actual_case scratch;
    memset(&scratch, 0, sizeof scratch);
    float *fids = NULL;
    if (!st) st = ac_tensor(c, &scratch, QC_LAYOUT_AUTO, tg, tpath, "ids", 0, cand, 1, &fids, NULL);
    *ids = (int32_t *)(void *)fids; /* read as int32 (is_float 0) */
    if (!st) st = ac_tensor(c, &scratch, QC_LAYOUT_AUTO, tg, tpath, "logprobs", 1, cand, 1, lps,
                            NULL);
    if (!st) st = tk_values(c, tpath, rows, (int)kk, V, *ids, *lps);
    CLOSE_G(tg);
    if (st) {
        free(*ids), free(*lps);
        *ids = NULL, *lps = NULL;
    } else {
        *k = (int)kk;
    }
    return st;
}
