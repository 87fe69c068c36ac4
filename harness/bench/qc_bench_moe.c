/* qc_bench_moe.c — `bench` for the Qwen3.5 MoE models and truncated presets: --layers N, the
 * memory plan's suggestion when a whole model does not fit, total vs active weight bytes, and
 * the whole-model figures a truncated run implies. Contract: qc_bench_moe.h.
 */
#include "qc_bench_moe.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "qc_registry.h"

/* ===================================================================================== */
/* --layers                                                                               */
/* ===================================================================================== */

qc_status bench_moe_truncate(const char *preset, int layers, qc_config *cfg, int *full_layers,
                             qc_err *err) {
    *full_layers = cfg->n_layers;
    if (layers <= 0) return QC_OK;
    if (layers > cfg->n_layers)
        return qc_errf(err, QC_ERR_ARG, "--layers: %d exceeds the %s preset's %d layers", layers,
                       preset ? preset : "model", cfg->n_layers);
    /* layer_types[0 .. layers-1] keep the preset's pattern (full attention at i % 4 == 3) */
    cfg->n_layers = layers;
    return QC_OK;
}

void bench_moe_refusal_hint(const qc_memplan_req *rq, const char *backends,
                            const char *max_memory, qc_err *err) {
    if (!err || !rq || !rq->cfg) return;
    uint64_t limit;
    qc_err e2;
    if (qc_memplan_limit(max_memory, &limit, &e2)) return;
    const qc_config *full = rq->cfg;
    int fits = 0;
    for (int n = full->n_layers - 1; n >= 1 && !fits; n--) {
        qc_config c = *full;
        c.n_layers = n;
        qc_memplan_req r = *rq;
        r.cfg = &c;
        r.n_backends = 0;
        qc_memplan p;
        if (qc_registry_memplan(backends, &r, &e2) || qc_memplan_estimate(&r, &p, &e2)) continue;
        if (p.total <= limit) fits = n;
    }
    const size_t used = strlen(err->msg);
    if (used + 8 >= sizeof err->msg) return;
    if (fits)
        snprintf(err->msg + used, sizeof err->msg - used,
                 "; the model does not fit: --layers N keeps the real per-layer dimensions "
                 "with only N layers (at most %d of its %d fit here)",
                 fits, full->n_layers);
    else
        snprintf(err->msg + used, sizeof err->msg - used,
                 "; not even --layers 1 (one layer with the real dimensions) fits this limit");
}

/* ===================================================================================== */
/* Bytes                                                                                  */
/* ===================================================================================== */

static double tbytes(const qc_tensor *t) {
    return t->ndim > 0 && t->data ? (double)qc_tensor_bytes(t) : 0.0; /* Q8_0: 34 B / 32 */
}

/* every tensor of a layer except the routed experts' */
static double layer_bytes_shared(const qc_layer_weights *w) {
    const qc_tensor *t[] = {&w->input_norm, &w->post_norm, &w->mlp_gate, &w->mlp_up,
                            &w->mlp_down, &w->router, &w->sh_gate, &w->sh_up, &w->sh_down,
                            &w->sh_expert_gate, &w->q_proj, &w->k_proj, &w->v_proj,
                            &w->o_proj, &w->q_norm, &w->k_norm, &w->in_proj_qkv,
                            &w->in_proj_z, &w->in_proj_b, &w->in_proj_a, &w->conv1d,
                            &w->dt_bias, &w->A_log, &w->lin_norm, &w->out_proj};
    double b = 0;
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) b += tbytes(t[i]);
    return b;
}

void bench_moe_fill(const qc_model *m, int full_layers, qc_dtype dt, bench_moe_info *mi) {
    const qc_config *c = &m->cfg;
    memset(mi, 0, sizeof *mi);
    mi->valid = 1;
    mi->moe = qc_cfg_is_moe(c);
    mi->n_experts = c->n_experts;
    mi->k = c->n_experts_per_tok;
    mi->layers_run = c->n_layers;
    mi->layers_full = full_layers > c->n_layers ? full_layers : c->n_layers;
    mi->truncated = mi->layers_full > mi->layers_run;
    /* measured model, from its tensors: a decode token reads every layer tensor (of the routed
     * experts k of E), the final norm and the lm_head; the embedding row is a gather */
    double total = tbytes(&m->embed) + tbytes(&m->final_norm), active = tbytes(&m->final_norm);
    if (!c->tie_word_embeddings) total += tbytes(&m->lm_head);
    active += tbytes(&m->lm_head);
    for (int l = 0; l < c->n_layers; l++) {
        const qc_layer_weights *w = &m->layers[l];
        const double sh = layer_bytes_shared(w), ex = tbytes(&w->exp_gate_up) + tbytes(&w->exp_down);
        total += sh + ex;
        active += sh + (mi->moe ? ex * mi->k / mi->n_experts : 0.0);
    }
    mi->weight_bytes = total;
    mi->active_bytes = active;
    /* the whole model, from its config */
    qc_config full = *c;
    full.n_layers = mi->layers_full;
    uint64_t wb = 0, ab = 0;
    qc_err e;
    if (!qc_memplan_weight_bytes(&full, dt, &wb, &e) &&
        !qc_memplan_active_weight_bytes(&full, dt, &ab, &e)) {
        mi->full_weight_bytes = (double)wb;
        mi->full_active_bytes = (double)ab;
    }
}

double bench_moe_implied_tok_s(const bench_moe_info *mi, double tok_s) {
    if (!mi->valid || mi->full_active_bytes <= 0) return 0.0;
    return tok_s * mi->active_bytes / mi->full_active_bytes;
}

/* ===================================================================================== */
/* Reports                                                                                */
/* ===================================================================================== */

const char *bench_moe_markdown(const bench_moe_info *mi, double bw_gbs, char *buf, size_t n) {
    int w = snprintf(buf, n,
                     "- weights: %.1f MB resident, %.1f MB read per decode token%s (decode "
                     "limits use the bytes read per token)",
                     mi->weight_bytes / 1e6, mi->active_bytes / 1e6,
                     mi->moe ? " (MoE: router, the active experts, shared expert, mixers, "
                               "norms, lm_head)"
                             : "");
    if (mi->truncated && w >= 0 && (size_t)w < n) {
        int w2 = snprintf(buf + w, n - (size_t)w,
                          "\n- TRUNCATED MODEL: measured with %d of the model's %d layers (real "
                          "per-layer dimensions); the whole model: %.2f GB resident, %.2f GB read "
                          "per decode token",
                          mi->layers_run, mi->layers_full, mi->full_weight_bytes / 1e9,
                          mi->full_active_bytes / 1e9);
        if (w2 >= 0 && (size_t)(w + w2) < n && bw_gbs > 0)
            snprintf(buf + w + w2, n - (size_t)(w + w2),
                     "; whole-model decode roofline at the measured %.1f GB/s: %.2f tok/s. "
                     "Implied whole-model decode rates below assume the measured fraction of "
                     "the roofline holds (measured tok/s x %.4f)",
                     bw_gbs, bw_gbs * 1e9 / mi->full_active_bytes,
                     mi->active_bytes / mi->full_active_bytes);
    }
    return buf;
}

void bench_moe_json(cJSON *config, const bench_moe_info *mi, double bw_gbs) {
    cJSON *w = cJSON_AddObjectToObject(config, "weights");
    if (!w) return;
    cJSON_AddBoolToObject(w, "moe", mi->moe);
    if (mi->moe) {
        cJSON_AddNumberToObject(w, "n_experts", mi->n_experts);
        cJSON_AddNumberToObject(w, "n_experts_per_tok", mi->k);
    }
    cJSON_AddNumberToObject(w, "layers_measured", mi->layers_run);
    cJSON_AddNumberToObject(w, "layers_model", mi->layers_full);
    cJSON_AddBoolToObject(w, "truncated", mi->truncated);
    cJSON_AddNumberToObject(w, "total_bytes", mi->weight_bytes);
    cJSON_AddNumberToObject(w, "active_bytes_per_token", mi->active_bytes);
    cJSON *f = cJSON_AddObjectToObject(w, "whole_model");
    if (!f) return;
    cJSON_AddStringToObject(f, "note", mi->truncated
                                           ? "computed from the config: the measured model is "
                                             "truncated to layers_measured layers"
                                           : "the measured model");
    cJSON_AddNumberToObject(f, "layers", mi->layers_full);
    cJSON_AddNumberToObject(f, "total_bytes", mi->full_weight_bytes);
    cJSON_AddNumberToObject(f, "active_bytes_per_token", mi->full_active_bytes);
    if (bw_gbs > 0 && mi->full_active_bytes > 0)
        cJSON_AddNumberToObject(f, "decode_roofline_tok_s", bw_gbs * 1e9 / mi->full_active_bytes);
}
