/* qc_record_moe.c — `record` of the block-level evidence (qc_record_moe.h): the case run with
 * each layer's mixer output captured, and for a MoE model its router choices. The backend traces
 * "moe_in" / "router_topk" (MoE) or "mlp_in" (dense, capability mlp_in) rows through the same
 * hook as the hidden states ("hidden"); qc_run_case's own hidden capture drops them, so here the
 * checker's capture (qc_check_compare.c ck_hcap_cb, qc_check_router.c ck_moecap) is installed
 * for the whole case instead and its rows are handed over to the result (MoE: ck_moecap_export;
 * dense: dense_export below, the same [L, rows, H] fields, written as mlp_in).
 */
#include "qc_record_moe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_check_internal.h"

int qc_record_has_router(const qc_golden_case *out) {
    return out->prefill_topk_ids != NULL;
}

/* The hidden rows the capture holds: every one of [L+1, T], each of width H (as qc_run_case
 * requires of a backend asked for them). */
static qc_status hidden_complete(const ck_hcap *hc, const qc_backend *be, const char *name,
                                 qc_err *err) {
    size_t n_all = (size_t)hc->L1 * hc->T, n_seen = 0;
    for (size_t i = 0; i < n_all; i++) n_seen += hc->seen[i];
    if (hc->bad || n_seen != n_all)
        return qc_errf(err, QC_ERR_UNSUPPORTED, "case %s: backend %s: trace hook reported %zu "
                       "of %zu hidden rows%s", name, be->name, n_seen, n_all,
                       hc->bad ? " (a row of the wrong width or an index outside 0..L)" : "");
    return QC_OK;
}

/* A dense model's mlp_in rows as out->prefill_moe_in [L, T, H] and decode_moe_in [L, S, H] (the
 * fields the reader fills from mlp_in, qc_golden.h): the backend announced them, so every row of
 * every layer must have been traced (else QC_ERR_RUNTIME with the count). */
static qc_status dense_export(const ck_moecap *mc, int T, qc_golden_case *out, qc_err *err) {
    const int L = mc->L, H = mc->H, S = mc->n - T;
    size_t n_all = (size_t)L * mc->n, n_seen = 0;
    for (size_t i = 0; i < n_all; i++) n_seen += mc->seen_in[i];
    if (mc->bad || n_seen != n_all)
        return qc_errf(err, QC_ERR_RUNTIME, "capability mlp_in: trace hook reported %zu of %zu "
                       "mlp_in rows (%d layers x %d positions)%s", n_seen, n_all, L, mc->n,
                       mc->bad ? "; a row of a width other than H or a layer outside 0..L-1"
                               : "");
    for (int part = 0; part < 2; part++) {
        const int off = part ? T : 0, rows = part ? S : T;
        if (rows < 1) continue;
        float *dst = malloc((size_t)L * rows * H * sizeof *dst);
        if (!dst) return qc_errf(err, QC_ERR_OOM, "mlp_in capture: out of memory");
        for (int l = 0; l < L; l++)
            memcpy(dst + (size_t)l * rows * H, mc->moe_in + ((size_t)l * mc->n + off) * H,
                   (size_t)rows * H * sizeof *dst);
        *(part ? &out->decode_moe_in : &out->prefill_moe_in) = dst;
    }
    return QC_OK;
}

/* What the run captures beside the logits: 1 MoE (router, moe_in), 2 dense (mlp_in), 0 nothing
 * more than qc_run_case does. */
static int capture_kind(const qc_backend *be, const qc_case_input *in, int with_in) {
    const qc_config *cfg = &be->model->cfg;
    if (in->n_tokens < 1) return 0;
    if (qc_cfg_is_moe(cfg)) return (be->caps & (QC_BE_CAP_HIDDEN | QC_BE_CAP_ROUTER)) ? 1 : 0;
    return with_in && (be->caps & QC_BE_CAP_MLP_IN) && (be->caps & QC_BE_CAP_HIDDEN) ? 2 : 0;
}

qc_status qc_record_run_case(qc_backend *be, const qc_profile *profile, const char *name,
                             const qc_case_input *in, int with_in, qc_golden_case *out,
                             qc_err *err) {
    const qc_config *cfg = &be->model->cfg;
    const int kind = capture_kind(be, in, with_in);
    if (!kind) return qc_run_case(be, profile, name, in, out, err);
    qc_case_input in2 = *in;
    in2.capture_hidden = 0; /* captured here, with the mixer / router rows */
    qc_golden_case shape;
    memset(&shape, 0, sizeof shape);
    shape.start_pos = in->n_history > 0 ? in->n_history : 0;
    shape.n_tokens = in->n_tokens;
    shape.n_decode = in->n_decode > 0 ? in->n_decode : 0;
    const int L = cfg->n_layers, T = in->n_tokens, H = cfg->hidden_size;
    ck_moecap mc;
    ck_hcap hc;
    memset(&hc, 0, sizeof hc);
    if (ck_moecap_init(&mc, cfg, &shape))
        return qc_errf(err, QC_ERR_OOM, "case %s: out of memory (%s capture)", name,
                       kind == 1 ? "router" : "mlp_in");
    hc.moe = &mc;
    if (in->capture_hidden) {
        hc.hidden = calloc((size_t)(L + 1) * T * H, sizeof(float));
        hc.seen = calloc((size_t)(L + 1) * T, 1);
        hc.L1 = L + 1, hc.T = T, hc.H = H, hc.lo = shape.start_pos;
        if (!hc.hidden || !hc.seen) {
            free(hc.hidden), free(hc.seen);
            ck_moecap_free(&mc);
            return qc_errf(err, QC_ERR_OOM, "case %s: out of memory (hidden-state capture)",
                           name);
        }
    }
    qc_call call = in->call ? *in->call : qc_backend_call_defaults(&be->opts);
    call.trace = ck_hcap_cb;
    call.trace_user = &hc;
    in2.call = &call;
    qc_status st = qc_run_case(be, profile, name, &in2, out, err);
    if (!st) {
        if (in->capture_hidden && !(st = hidden_complete(&hc, be, name, err))) {
            out->prefill_hidden = hc.hidden; /* handed over */
            hc.hidden = NULL;
        }
        if (!st && (st = kind == 1 ? ck_moecap_export(&mc, cfg->n_experts, T, with_in, out, err)
                                   : dense_export(&mc, T, out, err)))
            qc_err_prefix(err, st, "case %s: backend %s", name, be->name);
        if (st) qc_case_free(cfg, out);
    }
    free(hc.hidden), free(hc.seen);
    ck_moecap_free(&mc);
    return st;
}
