/* qc_golden_moe.c — the golden reader's MoE part (golden/SCHEMA.md "MoE"): per case the optional
 * router datasets prefill/router/{topk_ids, topk_weights, margins} and prefill/moe_in (the same
 * under decode/), and the root attribute router_margin_threshold. margins may be absent (a
 * file written by `qwen-conform record`: no flip then counts as a near-tie). Dense goldens have no
 * router; a dense golden that carries one (or moe_in) is refused (its router cannot be checked
 * against a model without experts). A dense golden's mixer output is prefill/mlp_in (decode/
 * mlp_in): the same [L, rows, H] meaning as moe_in, read into the same fields; a MoE golden
 * that carries mlp_in is refused (its name there is moe_in). Shapes are checked against the config before anything is read, and
 * the values when they are: ids in [0, E) and distinct within a row, weights and margins finite,
 * margins >= 0 (p_k - p_(k+1) of probabilities sorted descending). Nothing stays allocated on
 * error. */
#include "qc_golden_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================================== */
/* root attribute                                                                        */
/* ===================================================================================== */

qc_status gio_moe_root(const gio_ctx *c, hid_t f, double *thr) {
    *thr = -1;
    if (H5Aexists(f, "router_margin_threshold") <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return QC_OK;
    }
    qc_status st = QC_OK;
    char h5msg[300];
    hid_t a = H5Aopen(f, "router_margin_threshold", H5P_DEFAULT);
    hid_t ft = a >= 0 ? H5Aget_type(a) : H5I_INVALID_HID;
    hid_t sp = a >= 0 ? H5Aget_space(a) : H5I_INVALID_HID;
    double v = 0;
    if (a < 0 || ft < 0 || sp < 0) {
        st = qc_errf(c->err, QC_ERR_HDF5, "%s: /router_margin_threshold: cannot read: %s",
                     c->file, gio_h5_errdesc(h5msg, sizeof h5msg));
    } else if (H5Tget_class(ft) != H5T_FLOAT || H5Sget_simple_extent_npoints(sp) != 1) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: /router_margin_threshold: not a float scalar",
                     c->file);
    } else if (H5Aread(a, H5T_NATIVE_DOUBLE, &v) < 0) {
        st = qc_errf(c->err, QC_ERR_HDF5, "%s: /router_margin_threshold: cannot read: %s",
                     c->file, gio_h5_errdesc(h5msg, sizeof h5msg));
    } else if (!isfinite(v) || v < 0 || v >= 1) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: /router_margin_threshold: %g is not a "
                     "probability gap in [0, 1)", c->file, v);
    } else {
        *thr = v;
    }
    CLOSE_S(sp);
    CLOSE_T(ft);
    CLOSE_A(a);
    return st;
}

/* ===================================================================================== */
/* metadata: presence and shapes                                                         */
/* ===================================================================================== */

/* The dataset of the residual after each layer's mixer: moe_in (MoE), mlp_in (dense). */
static const char *mixer_out_name(const qc_config *cfg) {
    return qc_cfg_is_moe(cfg) ? "moe_in" : "mlp_in";
}

qc_status gio_moe_meta(const gio_ctx *c, const qc_config *cfg, hid_t grp, const char *gpath,
                       int rows, int *has_router, int *has_moe_in) {
    *has_router = *has_moe_in = 0;
    const char *mname = mixer_out_name(cfg), *other = qc_cfg_is_moe(cfg) ? "mlp_in" : "moe_in";
    const int r_here = gio_link_exists(grp, "router"), m_here = gio_link_exists(grp, mname);
    const long long L = cfg->n_layers, K = cfg->n_experts_per_tok, H = cfg->hidden_size;
    hsize_t dims[3];
    qc_status st;
    if (gio_link_exists(grp, other))
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/%s: in the golden of a %s model (its "
                       "mixer output is %s/%s)", c->file, gpath, other,
                       qc_cfg_is_moe(cfg) ? "MoE" : "dense", gpath, mname);
    if (!qc_cfg_is_moe(cfg) && r_here)
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/router: router data in the golden of a "
                       "dense model (config_json has no experts)", c->file, gpath);
    if (r_here) {
        long long wk[3] = {L, rows, K}, wm[2] = {L, rows};
        if ((st = gio_probe_dataset(c, grp, gpath, "router/topk_ids", 0, 3, wk, dims, NULL)) ||
            (st = gio_probe_dataset(c, grp, gpath, "router/topk_weights", 1, 3, wk, dims, NULL)))
            return st;
        /* margins: optional here (a file from `qwen-conform record` has none: a C backend
         * traces no router probabilities); validate.py requires them of a golden */
        if (gio_link_exists(grp, "router/margins") &&
            (st = gio_probe_dataset(c, grp, gpath, "router/margins", 1, 2, wm, dims, NULL)))
            return st;
        *has_router = 1;
    }
    if (m_here) {
        long long wi[3] = {L, rows, H};
        if ((st = gio_probe_dataset(c, grp, gpath, mname, 1, 3, wi, dims, NULL))) return st;
        *has_moe_in = 1;
    }
    return QC_OK;
}

/* Floats (and int32s) the MoE datasets of a case with this metadata hold. */
uint64_t gio_moe_elems(const qc_config *cfg, const qc_golden_case_meta *m) {
    const uint64_t L = (uint64_t)cfg->n_layers, K = (uint64_t)cfg->n_experts_per_tok,
                   H = (uint64_t)cfg->hidden_size;
    uint64_t n = 0;
    const uint64_t T = (uint64_t)m->n_tokens, S = (uint64_t)m->n_decode;
    if (m->has_prefill_router) n = gio_sat_madd(L * T, 2 * K + 1, n);
    if (m->has_prefill_moe_in) n = gio_sat_madd(L * T, H, n);
    if (m->has_decode_router) n = gio_sat_madd(L * S, 2 * K + 1, n);
    if (m->has_decode_moe_in) n = gio_sat_madd(L * S, H, n);
    return n;
}

/* ===================================================================================== */
/* loading                                                                               */
/* ===================================================================================== */

/* ids [L, rows, K] in [0, E) and distinct within each row; margins >= 0. */
static qc_status check_router(const gio_ctx *c, const qc_config *cfg, const char *gpath,
                              int rows, const int32_t *ids, const float *margins) {
    const int L = cfg->n_layers, K = cfg->n_experts_per_tok, E = cfg->n_experts;
    for (int l = 0; l < L; l++)
        for (int r = 0; r < rows; r++) {
            const int32_t *row = ids + ((size_t)l * rows + r) * K;
            for (int j = 0; j < K; j++) {
                if (row[j] < 0 || row[j] >= E)
                    return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/router/topk_ids: expert id %d "
                                   "at (%d, %d, %d) is outside [0, %d)", c->file, gpath,
                                   (int)row[j], l, r, j, E);
                for (int i = 0; i < j; i++)
                    if (row[i] == row[j])
                        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/router/topk_ids: expert "
                                       "%d chosen twice at (%d, %d)", c->file, gpath,
                                       (int)row[j], l, r);
            }
            if (margins && margins[(size_t)l * rows + r] < 0)
                return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/router/margins: %g at (%d, %d) is "
                               "negative (p_k - p_k+1 of probabilities sorted descending)",
                               c->file, gpath, margins[(size_t)l * rows + r], l, r);
        }
    return QC_OK;
}

qc_status gio_moe_load(const gio_ctx *c, const qc_config *cfg, hid_t grp, const char *gpath,
                       int rows, int has_router, int has_moe_in, int32_t **ids, float **w,
                       float **margins, float **moe_in) {
    const long long L = cfg->n_layers, K = cfg->n_experts_per_tok, H = cfg->hidden_size;
    qc_status st = QC_OK;
    *ids = NULL, *w = *margins = *moe_in = NULL;
    if (has_router) {
        long long wk[3] = {L, rows, K}, wm[2] = {L, rows};
        if ((st = gio_read_dataset(c, grp, gpath, "router/topk_ids", 0, 3, wk, (void **)ids)) ||
            (st = gio_read_dataset(c, grp, gpath, "router/topk_weights", 1, 3, wk, (void **)w)) ||
            (gio_link_exists(grp, "router/margins") &&
             (st = gio_read_dataset(c, grp, gpath, "router/margins", 1, 2, wm,
                                    (void **)margins))) ||
            (st = check_router(c, cfg, gpath, rows, *ids, *margins)))
            goto fail;
    }
    if (has_moe_in) {
        long long wi[3] = {L, rows, H};
        if ((st = gio_read_dataset(c, grp, gpath, mixer_out_name(cfg), 1, 3, wi, (void **)moe_in)))
            goto fail;
    }
    return QC_OK;
fail:
    free(*ids), free(*w), free(*margins), free(*moe_in);
    *ids = NULL, *w = *margins = *moe_in = NULL;
    return st;
}

void gio_moe_free(qc_golden_case *gc) {
    free(gc->prefill_topk_ids), free(gc->prefill_topk_weights);
    free(gc->prefill_router_margins), free(gc->prefill_moe_in);
    free(gc->decode_topk_ids), free(gc->decode_topk_weights);
    free(gc->decode_router_margins), free(gc->decode_moe_in);
    gc->prefill_topk_ids = gc->decode_topk_ids = NULL;
    gc->prefill_topk_weights = gc->prefill_router_margins = gc->prefill_moe_in = NULL;
    gc->decode_topk_weights = gc->decode_router_margins = gc->decode_moe_in = NULL;
}
