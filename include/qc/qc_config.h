/* qc_config.h — the Qwen3.5 text config, read from a Hugging Face config.json.
 *
 * Accepts the multimodal nesting (`text_config` object) or a flat text config; `rope_parameters`
 * or legacy top-level `rope_theta` / `partial_rotary_factor`; `layer_types` or
 * `full_attention_interval` (layer i is full iff (i+1) % interval == 0, default 4).
 */
#ifndef QC_CONFIG_H
#define QC_CONFIG_H

#include <stddef.h>

#include "qc/qc_status.h"

#define QC_MAX_LAYERS 256

typedef enum { QC_LAYER_LINEAR = 0, QC_LAYER_FULL = 1 } qc_layer_kind;

typedef struct {
    int vocab_size;            /* V: embedding rows */
    int hidden_size;           /* H */
    int intermediate_size;     /* I: SwiGLU width (dense models; 0 in a MoE config) */
    /* MoE (model_type qwen3_5_moe / qwen3_5_moe_text): every layer's MLP is a routed mixture of
     * experts plus one sigmoid-gated shared expert. All four are 0 for a dense model. */
    int n_experts;             /* E: routed experts per layer (num_experts) */
    int n_experts_per_tok;     /* k: experts chosen per token (num_experts_per_tok), 1..E */
    int moe_intermediate_size; /* Ie: SwiGLU width of one routed expert */
    int shared_expert_intermediate_size; /* Is: SwiGLU width of the shared expert */
    int n_layers;              /* L */
    int n_heads;               /* full attention query heads (nh) */
    int n_kv_heads;            /* full attention kv heads (nkv) */
    int head_dim;              /* full attention head size (hd) */
    int lin_n_k_heads;         /* DeltaNet q/k heads (nk) */
    int lin_n_v_heads;         /* DeltaNet v heads (nv), a multiple of nk */
    int lin_k_dim;             /* DeltaNet key head dim (dk) */
    int lin_v_dim;             /* DeltaNet value head dim (dv) */
    int conv_kernel;           /* K: causal conv taps */
    double rms_eps;            /* rms_norm_eps (all RMSNorms incl. the gated one) */
    double rope_theta;         /* RoPE base */
    double partial_rotary_factor; /* fraction of head_dim rotated */
    int rotary_dim;            /* (int)(head_dim * partial_rotary_factor), even */
    int tie_word_embeddings;   /* 1: lm_head = embed_tokens */
    int max_position_embeddings; /* informational */
    int nested;                /* 1 if read from a `text_config` object */
    qc_layer_kind layer_types[QC_MAX_LAYERS]; /* [n_layers] */
} qc_config;

/* Derived sizes. */
static inline int qc_cfg_is_moe(const qc_config *c) { return c->n_experts > 0; }
static inline int qc_cfg_key_dim(const qc_config *c) { return c->lin_n_k_heads * c->lin_k_dim; }
static inline int qc_cfg_value_dim(const qc_config *c) { return c->lin_n_v_heads * c->lin_v_dim; }
static inline int qc_cfg_conv_dim(const qc_config *c) {
    return 2 * qc_cfg_key_dim(c) + qc_cfg_value_dim(c);
}

/* Parse config JSON text (len bytes, need not be NUL-terminated). `path` is used in messages
 * only. Validates every field (present, integral, positive, consistent); a field whose value
 * would change the math from what the backends compute (hidden_act, attention_bias, rope_type,
 * attn_output_gate false, an output_gate_type other than swish / silu, ...) is
 * QC_ERR_UNSUPPORTED naming the file, the field and the value. */
qc_status qc_config_parse(const char *json, size_t len, const char *path, qc_config *cfg,
                          qc_err *err);

/* Read DIR/config.json and parse it. */
qc_status qc_config_load(const char *model_dir, qc_config *cfg, qc_err *err);

/* A flat Hugging Face text config.json for cfg (qc_config_parse reads it back to the same
 * config). *json is malloc'd; free it. */
qc_status qc_config_to_json(const qc_config *cfg, char **json, qc_err *err);

/* The real Qwen3.5-family dimensions: name is "0.8b", "2b", "4b", "9b", "27b" (dense; 27b is
 * also Qwen3.6-27B and Qwen3.8-27B) or "35b-a3b", "122b-a10b", "397b-a17b", "2.4t-a95b" (MoE;
 * the last is Qwen3.8-2.4T-A95B). docs/qwen35-model.md 2.6 gives the sources. */
qc_status qc_config_preset(const char *name, qc_config *cfg, qc_err *err);

#endif /* QC_CONFIG_H */
