/* qc_actual_moe.c — the MoE part of the ACTUAL reader (golden/SCHEMA.md "MoE", "Required and
 * optional"): a case's optional prefill/router and decode/router datasets, the router's
 * choices that `diff` compares (router_topk). topk_ids [L, rows, k] of any integer type,
 * topk_weights [L, rows, k] of any float type (optional, compared where the ids agree);
 * router/margins and moe_in are the golden's business and not read. The ids are not checked
 * here: an id outside [0, E) or chosen twice is the runtime's error, a FAIL found by the
 * comparison. A shape other than [L, rows, k] is a format error naming the dataset.
 */
#include "qc_actual_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

qc_status ac_router(const ac_ctx *c, hid_t grp, const char *gpath, const qc_config *cfg,
                    int rows, int32_t **ids, float **w) {
    *ids = NULL, *w = NULL;
    if (!qc_cfg_is_moe(cfg) || rows <= 0) return QC_OK; /* dense: ignored (diff SKIPs) */
    hid_t rg = gio_group_if(grp, "router");
    if (rg < 0) return QC_OK;
    char rpath[300];
    snprintf(rpath, sizeof rpath, "%s/router", gpath);
    const ac_shape cand[1] = {{AC_CANON, 3, {cfg->n_layers, rows, cfg->n_experts_per_tok}, 0,
                               "[L, rows, k]"}};
    /* the router has one layout: read it whatever --layout says, and keep it out of the
     * layout row's counts (a scratch case for the counters) */
    qc_actual_case scratch;
    memset(&scratch, 0, sizeof scratch);
    float *fids = NULL;
    qc_status st = ac_tensor(c, &scratch, QC_LAYOUT_AUTO, rg, rpath, "topk_ids", 0, cand, 1,
                             &fids, NULL);
    *ids = (int32_t *)(void *)fids; /* read as int32 (is_float 0) */
    if (!st && *ids)
        st = ac_tensor(c, &scratch, QC_LAYOUT_AUTO, rg, rpath, "topk_weights", 1, cand, 1, w,
                       NULL);
    CLOSE_G(rg);
    if (st) {
        free(*ids), free(*w);
        *ids = NULL, *w = NULL;
    }
    return st;
}
