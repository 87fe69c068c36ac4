/* qc_config.c — read the Qwen3.5 text config from a Hugging Face config.json (cJSON).
 *
 * Lookup rules (HF Qwen3_5TextConfig semantics):
 *   - text fields come from the `text_config` object when present (multimodal checkpoints),
 *     else from the top level (flat text config);
 *   - rope_theta / partial_rotary_factor: text.rope_parameters.X, text.X, then (nested only)
 *     top.rope_parameters.X, top.X; defaults 10000 and 0.25 (HF post_init);
 *   - layer_types, else full_attention_interval (default 4): layer i full iff (i+1) % n == 0;
 *   - tie_word_embeddings: text, then top level, default false (HF class default);
 *   - head_dim default hidden_size / num_attention_heads; rms_norm_eps default 1e-6;
 *     max_position_embeddings default 32768 (informational);
 *   - attn_output_gate absent or true, output_gate_type absent, "swish" or "silu" (check_gates:
 *     any other value is another model and is refused); mamba_ssm_dtype and mtp_* not read.
 * Every message names the file and the field path, e.g.
 *   "m/config.json: text_config.linear_num_value_heads: 3 is not a multiple of ...".
 *
 * Model family (check_family, before any dimension is read): `model_type` and `architectures`
 * must name a Qwen3.5 text model, dense or mixture-of-experts (MoE) —
 *   flat config:          model_type qwen3_5_text, qwen3_5_moe_text, or qwen3_next (the legacy
 *                         Qwen3-Next layout, dense only);
 *   with a text_config:   model_type qwen3_5 with text_config.model_type qwen3_5_text, or
 *                         qwen3_5_moe with text_config.model_type qwen3_5_moe_text;
 *   architectures[i]:     Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration,
 *                         Qwen3NextForCausalLM (dense), Qwen3_5MoeForCausalLM,
 *                         Qwen3_5MoeForConditionalGeneration (MoE); also
 *                         text_config.architectures (HF writes null); a dense architecture with
 *                         a MoE model_type (or the reverse) is refused;
 * anything else is QC_ERR_UNSUPPORTED naming the field, the value and the accepted values. A
 * config with neither field (hand-written, this tool's own minimal configs) is read as a dense
 * Qwen3.5 text config: Hugging Face always writes model_type, so a real checkpoint is always
 * checked.
 *
 * MoE (parse_moe, the Qwen3.5-MoE family only): num_experts E, num_experts_per_tok k,
 * moe_intermediate_size, shared_expert_intermediate_size are required positive integers with
 * k <= E; intermediate_size is not a field of this family (ignored, 0 in the config). Qwen3.5-MoE
 * always renormalises the top-k router weights and has a MoE block in every layer, so the
 * Qwen3-Next switches that would say otherwise are refused rather than silently overridden
 * (QC_ERR_UNSUPPORTED naming the field): norm_topk_prob false, a non-empty mlp_only_layers, a
 * decoder_sparse_step other than 1 (HF's Qwen3.5-MoE class ignores them; a config carrying
 * them describes another model). The dense families with sparse layers (num_experts > 0 on a
 * layer not in mlp_only_layers, every decoder_sparse_step-th layer; a qwen3_next config without
 * num_experts has HF's default 512) are refused: Qwen3-Next MoE is not supported.
 */
#include "qc/qc_config.h"
#include "qc/qc_file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "qc_text.h"

/* ==== Parse context ==== */

typedef struct {
    const cJSON *root;   /* top-level object */
    const cJSON *tc;     /* text config object (== root when flat) */
    const char *path;    /* file name for messages */
    const char *pfx;     /* "text_config." or "" */
    qc_err *err;         /* error sink */
} cfg_ctx;

/* Short description of a JSON value for messages. */
static const char *describe(const cJSON *v, char *buf, size_t n) {
    if (cJSON_IsNumber(v)) snprintf(buf, n, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v)) snprintf(buf, n, "a string (\"%.40s\")", v->valuestring);
    else if (cJSON_IsBool(v)) snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNull(v)) snprintf(buf, n, "null");
    else if (cJSON_IsArray(v)) snprintf(buf, n, "an array");
    else if (cJSON_IsObject(v)) snprintf(buf, n, "an object");
    else snprintf(buf, n, "an invalid value");
    return buf;
}

static const cJSON *get(const cJSON *obj, const char *name) {
    if (!obj || !cJSON_IsObject(obj)) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return (v && !cJSON_IsNull(v)) ? v : NULL; /* null == absent (HF writes null for unset) */
}

/* A positive integer field of the text config. required: MISSING if absent; else *out = def. */
static qc_status get_pos_int(cfg_ctx *c, const char *name, int required, int def, int *out) {
    const cJSON *v = get(c->tc, name);
    if (!v) {
        if (required)
            return qc_errf(c->err, QC_ERR_MISSING, "%s: %s%s: missing", c->path, c->pfx, name);
        *out = def;
        return QC_OK;
    }
    char d[96];
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < 1 || v->valuedouble > INT_MAX)
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s%s: expected a positive integer, got %s",
                       c->path, c->pfx, name, describe(v, d, sizeof d));
    *out = (int)v->valuedouble;
    return QC_OK;
}

/* A positive finite number found by the rope lookup order; `where` receives the field path. */
static qc_status get_rope_num(cfg_ctx *c, const char *name, double def, double *out,
                              char *where, size_t wn) {
    struct {
        const cJSON *obj;
        const char *label;
    } places[4];
    int np = 0;
    char l0[64], l1[64];
    const cJSON *rp = get(c->tc, "rope_parameters");
    snprintf(l0, sizeof l0, "%srope_parameters.", c->pfx);
    places[np].obj = rp, places[np++].label = l0;
    places[np].obj = c->tc, places[np++].label = c->pfx;
    if (c->tc != c->root) {
        snprintf(l1, sizeof l1, "rope_parameters.");
        places[np].obj = get(c->root, "rope_parameters"), places[np++].label = l1;
        places[np].obj = c->root, places[np++].label = "";
    }
    for (int i = 0; i < np; i++) {
        const cJSON *v = get(places[i].obj, name);
        if (!v) continue;
        snprintf(where, wn, "%s%s", places[i].label, name);
        char d[96];
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
            return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: expected a positive number, got %s",
                           c->path, where, describe(v, d, sizeof d));
        *out = v->valuedouble;
        return QC_OK;
    }
    snprintf(where, wn, "%srope_parameters.%s (default)", c->pfx, name);
    *out = def;
    return QC_OK;
}

/* ==== Model family: model_type / architectures ==== */

#define ACCEPTED_TYPES                                                                         \
    "qwen3_5_text, qwen3_5_moe_text, qwen3_next, or qwen3_5 / qwen3_5_moe with a text_config"
#define ACCEPTED_ARCHS                                                                         \
    "Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3NextForCausalLM, "              \
    "Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration"

typedef enum { FAM_UNKNOWN = 0, FAM_QWEN35, FAM_QWEN3_NEXT, FAM_QWEN35_MOE } cfg_family;

static const char *fam_type(cfg_family f) {
    return f == FAM_QWEN35_MOE ? "qwen3_5_moe" : f == FAM_QWEN3_NEXT ? "qwen3_next" : "qwen3_5";
}

/* One model_type field (`field` is its path for messages); sets *fam from it. */
static qc_status check_model_type(cfg_ctx *c, const cJSON *v, const char *field, int nested,
                                  int text_level, cfg_family *fam) {
    char d[96], b[80];
    if (!cJSON_IsString(v))
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: expected a string, got %s", c->path,
                       field, describe(v, d, sizeof d));
    const char *t = v->valuestring;
    if (text_level) { /* text_config.model_type: must match the wrapper's family */
        cfg_family tf = !strcmp(t, "qwen3_5_text")       ? FAM_QWEN35
                        : !strcmp(t, "qwen3_5_moe_text") ? FAM_QWEN35_MOE
                                                         : FAM_UNKNOWN;
        if (tf != FAM_UNKNOWN && (*fam == FAM_UNKNOWN || *fam == tf)) return *fam = tf, QC_OK;
        if (tf != FAM_UNKNOWN)
            return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                           "%s: %s '%s' does not match model_type '%s' (qwen3_5 nests "
                           "qwen3_5_text, qwen3_5_moe nests qwen3_5_moe_text)",
                           c->path, field, t, fam_type(*fam));
        return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                       "%s: %s '%s' is not a Qwen3.5 text model (accepted: %s)", c->path, field,
                       qc_text_clean(t, b, sizeof b),
                       *fam == FAM_QWEN35       ? "qwen3_5_text"
                       : *fam == FAM_QWEN35_MOE ? "qwen3_5_moe_text"
                                                : "qwen3_5_text or qwen3_5_moe_text");
    }
    if (!nested && !strcmp(t, "qwen3_5_text")) return *fam = FAM_QWEN35, QC_OK;
    if (!nested && !strcmp(t, "qwen3_5_moe_text")) return *fam = FAM_QWEN35_MOE, QC_OK;
    if (!nested && !strcmp(t, "qwen3_next")) return *fam = FAM_QWEN3_NEXT, QC_OK;
    if (nested && !strcmp(t, "qwen3_5")) return *fam = FAM_QWEN35, QC_OK;
    if (nested && !strcmp(t, "qwen3_5_moe")) return *fam = FAM_QWEN35_MOE, QC_OK;
    if (!nested && (!strcmp(t, "qwen3_5") || !strcmp(t, "qwen3_5_moe")))
        return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                       "%s: %s '%s' is the multimodal wrapper and needs a text_config "
                       "object (a flat text config is %s_text; accepted: %s)",
                       c->path, field, t, t, ACCEPTED_TYPES);
    if (nested && (!strcmp(t, "qwen3_5_text") || !strcmp(t, "qwen3_next") ||
                   !strcmp(t, "qwen3_5_moe_text")))
        return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                       "%s: %s '%s' is a flat text config but text_config is present (the "
                       "wrapper's model_type is qwen3_5 or qwen3_5_moe; accepted: %s)",
                       c->path, field, t, ACCEPTED_TYPES);
    return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                   "%s: %s '%s' is not a Qwen3.5 text model (accepted: %s)", c->path, field,
                   qc_text_clean(t, b, sizeof b), ACCEPTED_TYPES);
}

/* One architectures field: an array of strings, each an accepted architecture of the family
 * the model_type named (an unknown family takes the first architecture's). */
static qc_status check_architectures(cfg_ctx *c, const cJSON *v, const char *field,
                                     cfg_family *fam) {
    char d[96], b[80];
    if (!cJSON_IsArray(v))
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: expected an array of strings, got %s",
                       c->path, field, describe(v, d, sizeof d));
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e))
            return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s[%d]: expected a string, got %s",
                           c->path, field, i, describe(e, d, sizeof d));
        const char *a = e->valuestring;
        cfg_family af = FAM_UNKNOWN;
        if (!strcmp(a, "Qwen3_5ForCausalLM") || !strcmp(a, "Qwen3_5ForConditionalGeneration"))
            af = FAM_QWEN35;
        else if (!strcmp(a, "Qwen3NextForCausalLM"))
            af = FAM_QWEN3_NEXT;
        else if (!strcmp(a, "Qwen3_5MoeForCausalLM") ||
                 !strcmp(a, "Qwen3_5MoeForConditionalGeneration"))
            af = FAM_QWEN35_MOE;
        if (af == FAM_UNKNOWN)
            return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                           "%s: %s[%d] '%s' is not a Qwen3.5 text model (accepted: %s)", c->path,
                           field, i, qc_text_clean(a, b, sizeof b), ACCEPTED_ARCHS);
        if (*fam == FAM_UNKNOWN && af == FAM_QWEN35_MOE) *fam = af;
        /* Qwen3NextForCausalLM also names dense Qwen3.5 text checkpoints (legacy layout) */
        int same = af == *fam || *fam == FAM_UNKNOWN ||
                   (af != FAM_QWEN35_MOE && *fam != FAM_QWEN35_MOE);
        if (!same)
            return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                           "%s: %s[%d] '%s' is a %s architecture but model_type '%s' is %s",
                           c->path, field, i, a,
                           af == FAM_QWEN35_MOE ? "Qwen3.5 mixture-of-experts" : "dense",
                           fam_type(*fam),
                           *fam == FAM_QWEN35_MOE ? "mixture-of-experts" : "dense");
    }
    return QC_OK;
}

/* model_type / architectures of the top level and of text_config (see the file comment). */
static qc_status check_family(cfg_ctx *c, cfg_family *fam) {
    qc_status st;
    int nested = c->tc != c->root;
    *fam = FAM_UNKNOWN;
    const cJSON *mt = get(c->root, "model_type");
    if (mt && (st = check_model_type(c, mt, "model_type", nested, 0, fam))) return st;
    const cJSON *tmt = nested ? get(c->tc, "model_type") : NULL;
    if (tmt && (st = check_model_type(c, tmt, "text_config.model_type", 1, 1, fam))) return st;
    const cJSON *ar = get(c->root, "architectures");
    if (ar && (st = check_architectures(c, ar, "architectures", fam))) return st;
    const cJSON *tar = nested ? get(c->tc, "architectures") : NULL;
    if (tar && (st = check_architectures(c, tar, "text_config.architectures", fam))) return st;
    return QC_OK;
}

/* A non-negative integer field of the text config (absent: *out = def). */
static qc_status get_nonneg_int(cfg_ctx *c, const char *name, int def, int *out) {
    const cJSON *v = get(c->tc, name);
    *out = def;
    if (!v) return QC_OK;
    char d[96];
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < 0 || v->valuedouble > INT_MAX)
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s%s: expected a non-negative integer, got %s",
                       c->path, c->pfx, name, describe(v, d, sizeof d));
    *out = (int)v->valuedouble;
    return QC_OK;
}

/* Sparse-MoE layers (HF Qwen3-Next rule): layer i is MoE iff num_experts > 0, i is not in
 * mlp_only_layers and (i + 1) % decoder_sparse_step == 0. Any such layer: not supported. */
static qc_status check_moe(cfg_ctx *c, const qc_config *cfg, cfg_family fam) {
    qc_status st;
    char d[96];
    int ne = 0, step = 1;
    int absent = !get(c->tc, "num_experts");
    if ((st = get_nonneg_int(c, "num_experts", fam == FAM_QWEN3_NEXT ? 512 : 0, &ne))) return st;
    if (ne == 0) return QC_OK;
    if ((st = get_pos_int(c, "decoder_sparse_step", 0, 1, &step))) return st;
    const cJSON *mlp_only = get(c->tc, "mlp_only_layers");
    if (mlp_only && !cJSON_IsArray(mlp_only))
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %smlp_only_layers: expected an array, got %s",
                       c->path, c->pfx, describe(mlp_only, d, sizeof d));
    for (int i = 0; i < cfg->n_layers; i++) {
        if ((i + 1) % step != 0) continue;
        int dense = 0;
        for (const cJSON *e = mlp_only ? mlp_only->child : NULL; e && !dense; e = e->next)
            dense = cJSON_IsNumber(e) && e->valuedouble == (double)i;
        if (dense) continue;
        if (absent)
            return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                           "%s: %snum_experts: absent, so a qwen3_next config has %d experts "
                           "(the Hugging Face default): mixture-of-experts layers are not "
                           "supported yet (dense MLP only; layer %d would be MoE)",
                           c->path, c->pfx, ne, i);
        if (fam == FAM_QWEN3_NEXT)
            return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                           "%s: %snum_experts: %d: mixture-of-experts layers are not supported "
                           "yet (dense MLP only; layer %d is MoE): Qwen3-Next MoE is not "
                           "supported, Qwen3.5 MoE (model_type qwen3_5_moe_text) is",
                           c->path, c->pfx, ne, i);
        return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                       "%s: %snum_experts: %d: mixture-of-experts layers in a dense Qwen3.5 "
                       "config (layer %d would be MoE; a Qwen3.5 MoE config has model_type "
                       "qwen3_5_moe_text, or qwen3_5_moe with a text_config)",
                       c->path, c->pfx, ne, i);
    }
    return QC_OK;
}

/* The Qwen3.5-MoE fields (see the file comment): required, positive, k <= E; the Qwen3-Next
 * switches that would change the math are refused. */
static qc_status parse_moe(cfg_ctx *c, qc_config *cfg, const char *type) {
    qc_status st;
    char d[96];
    struct {
        const char *name;
        int *dst;
    } F[] = {{"num_experts", &cfg->n_experts},
             {"num_experts_per_tok", &cfg->n_experts_per_tok},
             {"moe_intermediate_size", &cfg->moe_intermediate_size},
             {"shared_expert_intermediate_size", &cfg->shared_expert_intermediate_size}};
    for (size_t i = 0; i < sizeof F / sizeof F[0]; i++) {
        if (!get(c->tc, F[i].name))
            return qc_errf(c->err, QC_ERR_MISSING,
                           "%s: %s%s: missing (required by model_type %s)", c->path, c->pfx,
                           F[i].name, type);
        if ((st = get_pos_int(c, F[i].name, 1, 0, F[i].dst))) return st;
    }
    if (cfg->n_experts_per_tok > cfg->n_experts)
        return qc_errf(c->err, QC_ERR_FORMAT,
                       "%s: %snum_experts_per_tok: %d is greater than num_experts %d", c->path,
                       c->pfx, cfg->n_experts_per_tok, cfg->n_experts);
    /* bounds that keep every expert tensor's row count (E * 2 * Ie) and index an int */
    if (cfg->n_experts > 65536 || cfg->moe_intermediate_size > (1 << 24) ||
        cfg->shared_expert_intermediate_size > (1 << 24))
        return qc_errf(c->err, QC_ERR_FORMAT,
                       "%s: %snum_experts: %d experts of width %d / shared width %d is too large "
                       "(at most 65536 experts, widths at most 2^24)",
                       c->path, c->pfx, cfg->n_experts, cfg->moe_intermediate_size,
                       cfg->shared_expert_intermediate_size);
    const cJSON *norm = get(c->tc, "norm_topk_prob");
    if (norm && !cJSON_IsBool(norm))
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %snorm_topk_prob: expected true or false, got %s",
                       c->path, c->pfx, describe(norm, d, sizeof d));
    if (norm && cJSON_IsFalse(norm))
        return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                       "%s: %snorm_topk_prob: false is not supported: Qwen3.5-MoE always "
                       "renormalises the top-k router weights (the field is not part of its "
                       "config; remove it or set it to true)",
                       c->path, c->pfx);
    const cJSON *mlp_only = get(c->tc, "mlp_only_layers");
    if (mlp_only && !cJSON_IsArray(mlp_only))
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %smlp_only_layers: expected an array, got %s",
                       c->path, c->pfx, describe(mlp_only, d, sizeof d));
    if (mlp_only && cJSON_GetArraySize(mlp_only) > 0)
        return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                       "%s: %smlp_only_layers: %d entries: Qwen3.5-MoE has a mixture-of-experts "
                       "block in every layer, no dense layers (expected [] or absent)",
                       c->path, c->pfx, cJSON_GetArraySize(mlp_only));
    int step = 1;
    if ((st = get_pos_int(c, "decoder_sparse_step", 0, 1, &step))) return st;
    if (step != 1)
        return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                       "%s: %sdecoder_sparse_step: %d: Qwen3.5-MoE has a mixture-of-experts "
                       "block in every layer (expected 1 or absent)",
                       c->path, c->pfx, step);
    cfg->intermediate_size = 0; /* not a field of this family (a dense MLP width) */
    return QC_OK;
}

/* ==== Field groups ==== */

static qc_status parse_dims(cfg_ctx *c, qc_config *cfg, int moe) {
    qc_status st;
#define REQ(field, name)                                                  \
    if ((st = get_pos_int(c, name, 1, 0, &cfg->field)) != QC_OK) return st;
    REQ(vocab_size, "vocab_size");
    REQ(hidden_size, "hidden_size");
    if (!moe) REQ(intermediate_size, "intermediate_size"); /* MoE: parse_moe */
    REQ(n_layers, "num_hidden_layers");
    REQ(n_heads, "num_attention_heads");
    REQ(n_kv_heads, "num_key_value_heads");
    REQ(lin_n_k_heads, "linear_num_key_heads");
    REQ(lin_n_v_heads, "linear_num_value_heads");
    REQ(lin_k_dim, "linear_key_head_dim");
    REQ(lin_v_dim, "linear_value_head_dim");
    REQ(conv_kernel, "linear_conv_kernel_dim");
#undef REQ
    int hd_def = cfg->hidden_size / cfg->n_heads;
    if (!get(c->tc, "head_dim") && hd_def < 1)
        return qc_errf(c->err, QC_ERR_FORMAT,
                       "%s: %shead_dim: absent and hidden_size %d / num_attention_heads %d is 0",
                       c->path, c->pfx, cfg->hidden_size, cfg->n_heads);
    if ((st = get_pos_int(c, "head_dim", 0, hd_def, &cfg->head_dim)) != QC_OK) return st;
    if ((st = get_pos_int(c, "max_position_embeddings", 0, 32768,
                          &cfg->max_position_embeddings)) != QC_OK)
        return st;

    const cJSON *eps = get(c->tc, "rms_norm_eps");
    cfg->rms_eps = 1e-6;
    if (eps) {
        char d[96];
        if (!cJSON_IsNumber(eps) || !isfinite(eps->valuedouble) || eps->valuedouble <= 0)
            return qc_errf(c->err, QC_ERR_FORMAT, "%s: %srms_norm_eps: expected a positive number, got %s",
                           c->path, c->pfx, describe(eps, d, sizeof d));
        cfg->rms_eps = eps->valuedouble;
    }
    return QC_OK;
}

/* The two output gates (docs/qwen35-model.md 2.2, "Gates"): attn_output_gate absent or true
 * (the sigmoid gate of section 7.5; false would be an ungated q_proj of nh*hd rows);
 * output_gate_type absent, "swish" or "silu" (the silu(z) of the gated RMSNorm, section 6.2;
 * "sigmoid" is the gate of another architecture, qwen4_exp). Anything else changes the math. */
static qc_status check_gates(cfg_ctx *c) {
    char d[96], b[80];
    const cJSON *ag = get(c->tc, "attn_output_gate");
    if (ag && !cJSON_IsBool(ag))
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %sattn_output_gate: expected true or false, got %s",
                       c->path, c->pfx, describe(ag, d, sizeof d));
    if (ag && cJSON_IsFalse(ag))
        return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                       "%s: %sattn_output_gate: false is not supported (true: the attention output "
                       "is gated by sigmoid of the second half of each q_proj head)",
                       c->path, c->pfx);
    const cJSON *og = get(c->tc, "output_gate_type");
    if (!og || (cJSON_IsString(og) && (!strcmp(og->valuestring, "swish") ||
                                       !strcmp(og->valuestring, "silu"))))
        return QC_OK;
    if (cJSON_IsString(og))
        return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                       "%s: %soutput_gate_type: '%s' is not supported (swish, silu)", c->path,
                       c->pfx, qc_text_clean(og->valuestring, b, sizeof b));
    return qc_errf(c->err, QC_ERR_FORMAT,
                   "%s: %soutput_gate_type: expected a string (swish, silu), got %s", c->path,
                   c->pfx, describe(og, d, sizeof d));
}

/* Fields whose other values would change the math: reject rather than compute wrongly. */
static qc_status check_unsupported(cfg_ctx *c) {
    char d[96];
    qc_status st = check_gates(c);
    if (st) return st;
    const cJSON *act = get(c->tc, "hidden_act");
    if (act && !(cJSON_IsString(act) &&
                 (!strcmp(act->valuestring, "silu") || !strcmp(act->valuestring, "swish"))))
        return qc_errf(c->err, QC_ERR_UNSUPPORTED, "%s: %shidden_act: %s is not supported (silu only)",
                       c->path, c->pfx, describe(act, d, sizeof d));
    const cJSON *bias = get(c->tc, "attention_bias");
    if (bias && !cJSON_IsFalse(bias))
        return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                       "%s: %sattention_bias: %s is not supported (false only)", c->path, c->pfx,
                       describe(bias, d, sizeof d));
    const cJSON *rp = get(c->tc, "rope_parameters");
    if (rp && !cJSON_IsObject(rp))
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %srope_parameters: expected an object, got %s",
                       c->path, c->pfx, describe(rp, d, sizeof d));
    const cJSON *rt = get(rp, "rope_type");
    if (rt && !(cJSON_IsString(rt) &&
                (!strcmp(rt->valuestring, "default") || !strcmp(rt->valuestring, "mrope"))))
        return qc_errf(c->err, QC_ERR_UNSUPPORTED,
                       "%s: %srope_parameters.rope_type: %s is not supported (default only)",
                       c->path, c->pfx, describe(rt, d, sizeof d));
    return QC_OK;
}

static qc_status parse_rope(cfg_ctx *c, qc_config *cfg) {
    char w_theta[128], w_prf[128];
    qc_status st = get_rope_num(c, "rope_theta", 10000.0, &cfg->rope_theta, w_theta, sizeof w_theta);
    if (st) return st;
    st = get_rope_num(c, "partial_rotary_factor", 0.25, &cfg->partial_rotary_factor, w_prf,
                      sizeof w_prf);
    if (st) return st;
    if (cfg->partial_rotary_factor > 1.0)
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: %g is greater than 1", c->path, w_prf,
                       cfg->partial_rotary_factor);
    cfg->rotary_dim = (int)(cfg->head_dim * cfg->partial_rotary_factor);
    if (cfg->rotary_dim < 2 || cfg->rotary_dim % 2 != 0 || cfg->rotary_dim > cfg->head_dim)
        return qc_errf(c->err, QC_ERR_FORMAT,
                       "%s: %s: %g x head_dim %d gives rotary dim %d (must be even, >= 2 and <= "
                       "head_dim)",
                       c->path, w_prf, cfg->partial_rotary_factor, cfg->head_dim, cfg->rotary_dim);
    return QC_OK;
}

static qc_status parse_layers(cfg_ctx *c, qc_config *cfg) {
    char d[96];
    if (cfg->n_layers > QC_MAX_LAYERS)
        return qc_errf(c->err, QC_ERR_UNSUPPORTED, "%s: %snum_hidden_layers: %d exceeds QC_MAX_LAYERS %d",
                       c->path, c->pfx, cfg->n_layers, QC_MAX_LAYERS);
    const cJSON *lt = get(c->tc, "layer_types");
    if (lt) {
        if (!cJSON_IsArray(lt))
            return qc_errf(c->err, QC_ERR_FORMAT, "%s: %slayer_types: expected an array, got %s",
                           c->path, c->pfx, describe(lt, d, sizeof d));
        int n = cJSON_GetArraySize(lt);
        if (n != cfg->n_layers)
            return qc_errf(c->err, QC_ERR_FORMAT,
                           "%s: %slayer_types: %d entries != num_hidden_layers %d", c->path,
                           c->pfx, n, cfg->n_layers);
        int i = 0;
        for (const cJSON *e = lt->child; e; e = e->next, i++) {
            if (cJSON_IsString(e) && !strcmp(e->valuestring, "linear_attention"))
                cfg->layer_types[i] = QC_LAYER_LINEAR;
            else if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention"))
                cfg->layer_types[i] = QC_LAYER_FULL;
            else
                return qc_errf(c->err, QC_ERR_FORMAT,
                               "%s: %slayer_types[%d]: %s is not \"linear_attention\" or "
                               "\"full_attention\"",
                               c->path, c->pfx, i, describe(e, d, sizeof d));
        }
        return QC_OK;
    }
    int interval;
    qc_status st = get_pos_int(c, "full_attention_interval", 0, 4, &interval);
    if (st) return st;
    for (int i = 0; i < cfg->n_layers; i++)
        cfg->layer_types[i] = ((i + 1) % interval == 0) ? QC_LAYER_FULL : QC_LAYER_LINEAR;
    return QC_OK;
}

static qc_status parse_tie(cfg_ctx *c, qc_config *cfg) {
    char d[96];
    const cJSON *v = get(c->tc, "tie_word_embeddings");
    const char *pfx = c->pfx;
    if (!v && c->tc != c->root) {
        v = get(c->root, "tie_word_embeddings");
        pfx = "";
    }
    cfg->tie_word_embeddings = 0;
    if (!v) return QC_OK;
    if (!cJSON_IsBool(v))
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %stie_word_embeddings: expected true or false, got %s",
                       c->path, pfx, describe(v, d, sizeof d));
    cfg->tie_word_embeddings = cJSON_IsTrue(v) ? 1 : 0;
    return QC_OK;
}

/* Divisibility and derived-size checks. */
static qc_status check_consistency(cfg_ctx *c, qc_config *cfg) {
    if (cfg->lin_n_v_heads % cfg->lin_n_k_heads != 0)
        return qc_errf(c->err, QC_ERR_FORMAT,
                       "%s: %slinear_num_value_heads: %d is not a multiple of linear_num_key_heads %d",
                       c->path, c->pfx, cfg->lin_n_v_heads, cfg->lin_n_k_heads);
    if (cfg->n_heads % cfg->n_kv_heads != 0)
        return qc_errf(c->err, QC_ERR_FORMAT,
                       "%s: %snum_attention_heads: %d is not a multiple of num_key_value_heads %d",
                       c->path, c->pfx, cfg->n_heads, cfg->n_kv_heads);
    /* every derived row count must fit an int (the tensors index with it) */
    int64_t kd = (int64_t)cfg->lin_n_k_heads * cfg->lin_k_dim;
    int64_t vd = (int64_t)cfg->lin_n_v_heads * cfg->lin_v_dim;
    int64_t conv = 2 * kd + vd;
    int64_t qrows = 2 * (int64_t)cfg->n_heads * cfg->head_dim;
    if (conv > INT_MAX / 2)
        return qc_errf(c->err, QC_ERR_FORMAT,
                       "%s: %slinear_num_key_heads: conv dim 2*%d*%d + %d*%d is too large", c->path,
                       c->pfx, cfg->lin_n_k_heads, cfg->lin_k_dim, cfg->lin_n_v_heads,
                       cfg->lin_v_dim);
    if (qrows > INT_MAX / 2)
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %snum_attention_heads: 2*%d*%d q_proj rows is too large",
                       c->path, c->pfx, cfg->n_heads, cfg->head_dim);
    return QC_OK;
}

/* ==== Public ==== */

qc_status qc_config_parse(const char *json, size_t len, const char *path, qc_config *cfg,
                          qc_err *err) {
    QC_ASSERT(cfg && path && (json || len == 0));
    memset(cfg, 0, sizeof *cfg);
    if (len > (size_t)64 << 20)
        return qc_errf(err, QC_ERR_FORMAT, "%s: %zu bytes is too large for a config", path, len);
    if (len && memchr(json, '\0', len))
        return qc_errf(err, QC_ERR_FORMAT, "%s: contains a NUL byte", path);
    char *text = malloc(len + 1);
    if (!text) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    if (len) memcpy(text, json, len);
    text[len] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        size_t off = end ? (size_t)(end - text) : 0;
        int line = 1;
        for (size_t i = 0; i < off && i < len; i++) line += text[i] == '\n';
        free(text);
        return qc_errf(err, QC_ERR_FORMAT, "%s: not well-formed JSON (line %d, byte %zu)", path,
                       line, off);
    }
    free(text);
    qc_status st = QC_OK;
    cfg_ctx c = {root, root, path, "", err};
    cfg_family fam = FAM_UNKNOWN;
    char d[96];
    if (!cJSON_IsObject(root)) {
        st = qc_errf(err, QC_ERR_FORMAT, "%s: top level is %s, not a JSON object", path,
                     describe(root, d, sizeof d));
        goto done;
    }
    const cJSON *tc = get(root, "text_config");
    if (tc) {
        if (!cJSON_IsObject(tc)) {
            st = qc_errf(err, QC_ERR_FORMAT, "%s: text_config: expected an object, got %s", path,
                         describe(tc, d, sizeof d));
            goto done;
        }
        c.tc = tc;
        c.pfx = "text_config.";
        cfg->nested = 1;
    }
    if ((st = check_family(&c, &fam)) != QC_OK) goto done;
    if ((st = parse_dims(&c, cfg, fam == FAM_QWEN35_MOE)) != QC_OK) goto done;
    if ((st = check_unsupported(&c)) != QC_OK) goto done;
    if ((st = parse_rope(&c, cfg)) != QC_OK) goto done;
    if ((st = parse_layers(&c, cfg)) != QC_OK) goto done; /* bounds n_layers */
    if (fam == FAM_QWEN35_MOE) {
        const cJSON *mt = get(root, "model_type");
        st = parse_moe(&c, cfg, cJSON_IsString(mt) ? mt->valuestring : "qwen3_5_moe_text");
    } else {
        st = check_moe(&c, cfg, fam);
    }
    if (st != QC_OK) goto done;
    if ((st = parse_tie(&c, cfg)) != QC_OK) goto done;
    if ((st = check_consistency(&c, cfg)) != QC_OK) goto done;
done:
    cJSON_Delete(root);
    if (st) {
        int nested = cfg->nested;
        memset(cfg, 0, sizeof *cfg);
        cfg->nested = nested;
    }
    return st;
}

qc_status qc_config_load(const char *model_dir, qc_config *cfg, qc_err *err) {
    char path[2048];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    char *buf = NULL;
    size_t n = 0;
    /* regular files only, never blocking on a FIFO; 64 MiB as qc_config_parse */
    qc_status st = qc_read_small_file(path, (size_t)64 << 20, &buf, &n, err);
    if (st) {
        memset(cfg, 0, sizeof *cfg);
        return st;
    }
    st = qc_config_parse(buf, n, path, cfg, err);
    free(buf);
    return st;
}

/* ==== Presets: the real Qwen3.5 sizes (docs/qwen35-model.md 2.6 "Presets") ==== */

qc_status qc_config_preset(const char *name, qc_config *cfg, qc_err *err) {
    static const struct {
        const char *name;
        int H, I, L, nh, nkv, nv, tie;
        int E, topk, Ie, Is; /* MoE (0: dense); I is 0 for MoE */
    } P[] = {
        {"0.8b", 1024, 3584, 24, 8, 2, 16, 1, 0, 0, 0, 0},
        {"2b", 2048, 6144, 24, 8, 2, 16, 1, 0, 0, 0, 0},
        {"4b", 2560, 9216, 32, 16, 4, 32, 1, 0, 0, 0, 0},
        {"9b", 4096, 12288, 32, 16, 4, 32, 0, 0, 0, 0, 0},
        /* Qwen3.5 MoE text configs (hub config.json text_config values; 122B's 32 query heads
         * are consistent with its published total parameter count) */
        {"35b-a3b", 2048, 0, 40, 16, 2, 32, 0, 256, 8, 512, 512},
        {"122b-a10b", 3072, 0, 48, 32, 2, 64, 0, 256, 8, 1024, 1024},
        {"397b-a17b", 4096, 0, 60, 32, 2, 64, 0, 512, 10, 1024, 1024},
        /* Qwen3.5-27B (= Qwen3.6-27B = Qwen3.8-27B: one layer geometry, 16 key / 48 value
         * heads) and Qwen3.8-2.4T-A95B (the Qwen3.5-MoE architecture at 92 layers, 16 key /
         * 128 value heads); sources and the unconfirmed fields: docs/qwen35-model.md 2.6 */
        {"27b", 5120, 17408, 64, 24, 4, 48, 0, 0, 0, 0, 0},
        {"2.4t-a95b", 8192, 0, 92, 64, 4, 128, 0, 512, 10, 2048, 2048},
    };
    QC_ASSERT(cfg);
    for (size_t k = 0; name && k < sizeof P / sizeof P[0]; k++) {
        if (strcmp(name, P[k].name) != 0) continue;
        memset(cfg, 0, sizeof *cfg);
        cfg->vocab_size = 248320;
        cfg->hidden_size = P[k].H;
        cfg->intermediate_size = P[k].I;
        cfg->n_layers = P[k].L;
        cfg->n_heads = P[k].nh;
        cfg->n_kv_heads = P[k].nkv;
        cfg->head_dim = 256;
        cfg->lin_n_k_heads = 16;
        cfg->lin_n_v_heads = P[k].nv;
        cfg->lin_k_dim = 128;
        cfg->lin_v_dim = 128;
        cfg->conv_kernel = 4;
        cfg->rms_eps = 1e-6;
        cfg->rope_theta = 1e7;
        cfg->partial_rotary_factor = 0.25;
        cfg->rotary_dim = 64;
        cfg->tie_word_embeddings = P[k].tie;
        cfg->n_experts = P[k].E;
        cfg->n_experts_per_tok = P[k].topk;
        cfg->moe_intermediate_size = P[k].Ie;
        cfg->shared_expert_intermediate_size = P[k].Is;
        cfg->max_position_embeddings = 262144;
        cfg->nested = 1; /* the real checkpoints nest the text config */
        for (int i = 0; i < cfg->n_layers; i++)
            cfg->layer_types[i] = ((i + 1) % 4 == 0) ? QC_LAYER_FULL : QC_LAYER_LINEAR;
        return QC_OK;
    }
    return qc_errf(err, QC_ERR_ARG,
                   "unknown model preset \"%s\" (0.8b, 2b, 4b, 9b, 27b, 35b-a3b, 122b-a10b, "
                   "397b-a17b or 2.4t-a95b)",
                   name ? name : "(null)");
}

/* ------------------------------------------------------------------------------------------ */
/* writing a config back as JSON                                                              */
/* ------------------------------------------------------------------------------------------ */

qc_status qc_config_to_json(const qc_config *c, char **json, qc_err *err) {
    *json = NULL;
    cJSON *o = cJSON_CreateObject(), *rp = cJSON_CreateObject(), *lt = cJSON_CreateArray();
    if (!o || !rp || !lt) goto oom;
    cJSON_AddStringToObject(o, "model_type", qc_cfg_is_moe(c) ? "qwen3_5_moe_text" : "qwen3_5_text");
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "hidden_size", c->hidden_size);
    if (qc_cfg_is_moe(c)) {
        cJSON_AddNumberToObject(o, "num_experts", c->n_experts);
        cJSON_AddNumberToObject(o, "num_experts_per_tok", c->n_experts_per_tok);
        cJSON_AddNumberToObject(o, "moe_intermediate_size", c->moe_intermediate_size);
        cJSON_AddNumberToObject(o, "shared_expert_intermediate_size",
                                c->shared_expert_intermediate_size);
    } else {
        cJSON_AddNumberToObject(o, "intermediate_size", c->intermediate_size);
    }
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->n_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", c->n_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(o, "linear_num_key_heads", c->lin_n_k_heads);
    cJSON_AddNumberToObject(o, "linear_num_value_heads", c->lin_n_v_heads);
    cJSON_AddNumberToObject(o, "linear_key_head_dim", c->lin_k_dim);
    cJSON_AddNumberToObject(o, "linear_value_head_dim", c->lin_v_dim);
    cJSON_AddNumberToObject(o, "linear_conv_kernel_dim", c->conv_kernel);
    cJSON_AddNumberToObject(o, "rms_norm_eps", c->rms_eps);
    cJSON_AddNumberToObject(o, "max_position_embeddings", c->max_position_embeddings);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_word_embeddings != 0);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddBoolToObject(o, "attention_bias", 0);
    for (int i = 0; i < c->n_layers; i++)
        cJSON_AddItemToArray(lt, cJSON_CreateString(c->layer_types[i] == QC_LAYER_FULL
                                                        ? "full_attention"
                                                        : "linear_attention"));
    cJSON_AddItemToObject(o, "layer_types", lt);
    lt = NULL;
    cJSON_AddStringToObject(rp, "rope_type", "default");
    cJSON_AddNumberToObject(rp, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(rp, "partial_rotary_factor", c->partial_rotary_factor);
    cJSON_AddItemToObject(o, "rope_parameters", rp);
    rp = NULL;
    *json = cJSON_Print(o);
    cJSON_Delete(o);
    if (!*json) return qc_errf(err, QC_ERR_OOM, "config: out of memory writing JSON");
    return QC_OK;
oom:
    cJSON_Delete(o);
    cJSON_Delete(rp);
    cJSON_Delete(lt);
    return qc_errf(err, QC_ERR_OOM, "config: out of memory writing JSON");
}
