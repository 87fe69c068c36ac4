/* qc_model.h — a loaded Qwen3.5 text model: config + typed weight views.
 *
 * Ownership: qc_model_load / qc_model_synthetic return a model that owns its memory (read-only copies of
 * the safetensors files and any buffers made at load, e.g. from the legacy packed layout);
 * qc_model_free releases all of it. Tensor views stay valid until then. Weights keep their
 * stored dtype (F32 / BF16 / F16, or Q8_0 for 2-D projection matrices); a backend converts or
 * repacks as it likes.
 */
#ifndef QC_MODEL_H
#define QC_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "qc/qc_config.h"
#include "qc/qc_status.h"

/* QC_I8: a raw safetensors I8 tensor (only ever the quants of a Q8_0 pair: the loader turns
 * `X.weight` I8 [out, in] + `X.weight_scale` F16 [out, in/32] into one QC_Q8_0 view).
 * QC_Q8_0: llama.cpp's Q8_0 block layout: a [out, in] matrix (in % 32 == 0) stored row-major
 * as out * in/32 blocks of QC_Q8_0_BLOCK_BYTES = 34 bytes, each { f16 d (little-endian);
 * int8 q[32] } holding the 32 consecutive values d * q[j] of one row (blocks never straddle
 * rows); d * q is exact in fp32. Element i of the tensor is in block i / 32, slot i % 32. */
typedef enum { QC_F32 = 0, QC_BF16 = 1, QC_F16 = 2, QC_Q8_0 = 3, QC_I8 = 4 } qc_dtype;
#define QC_Q8_0_BLOCK 32       /* values per Q8_0 block */
#define QC_Q8_0_BLOCK_BYTES 34 /* f16 d + 32 int8 */

const char *qc_dtype_str(qc_dtype t);     /* "F32", "BF16", "F16", "Q8_0", "I8" */
/* Bytes per element: 4, 2, 2, 1 (Q8_0: the int8 quant only; its real storage is 34 bytes per
 * 32 values: use qc_dtype_row_bytes / qc_tensor_bytes for byte counts), 1. */
size_t qc_dtype_size(qc_dtype t);
/* Bytes of n consecutive elements of one row (Q8_0: n must be a multiple of 32; n/32 * 34). */
size_t qc_dtype_row_bytes(qc_dtype t, int64_t n);
/* "bf16" / "f32" / "f16" / "q8_0" (any case) -> dtype; QC_ERR_ARG "<what>: 'x' is not bf16,
 * f32, f16 or q8_0". */
qc_status qc_dtype_parse(const char *s, const char *what, qc_dtype *out, qc_err *err);

typedef struct {
    qc_dtype dtype;      /* storage type */
    int ndim;            /* 0 when the tensor is absent (not used by this layer kind) */
    int64_t shape[4];    /* PyTorch order, [out, in] for linear weights */
    const void *data;    /* row-major, little-endian, NOT necessarily aligned */
} qc_tensor;

size_t qc_tensor_numel(const qc_tensor *t);
/* Bytes of the tensor's storage (0 when absent; Q8_0: numel / 32 * 34). */
size_t qc_tensor_bytes(const qc_tensor *t);
/* Element i widened to float (bf16: bits << 16; f16: IEEE half; Q8_0: d * q, exact). */
float qc_tensor_get(const qc_tensor *t, size_t i);
/* All elements widened to float into dst[numel]. */
void qc_tensor_to_f32(const qc_tensor *t, float *dst);

/* Scalar conversions (exact). */
float qc_bf16_to_f32(uint16_t h);
float qc_f16_to_f32(uint16_t h);
uint16_t qc_f32_to_bf16(float f); /* round to nearest even (NaN kept quiet) */
uint16_t qc_f32_to_f16(float f);  /* round to nearest even */
/* Quantize 32 finite floats into one Q8_0 block (34 bytes) as the golden generator does:
 * d = f16(max|v| / 127), q = clamp(round_half_even(v / d), -127, 127) (all 0 when d == 0). */
void qc_q8_0_quantize_block(const float *v, unsigned char *blk);

typedef struct {
    /* every layer */
    qc_tensor input_norm;   /* [H] zero-centred: used as (1 + w) */
    qc_tensor post_norm;    /* [H] zero-centred */
    qc_tensor mlp_gate;     /* [I, H] */
    qc_tensor mlp_up;       /* [I, H] */
    qc_tensor mlp_down;     /* [H, I] */
    /* MoE models: every layer has these instead of mlp_* (absent in a dense model). The per-
     * expert hub layout (experts.{e}.gate_proj/up_proj/down_proj.weight) is stacked at load
     * into the fused shapes below. */
    qc_tensor router;       /* [E, H] mlp.gate.weight: router logits */
    qc_tensor exp_gate_up;  /* [E, 2*Ie, H] mlp.experts.gate_up_proj: rows [gate (Ie) | up (Ie)] */
    qc_tensor exp_down;     /* [E, H, Ie] mlp.experts.down_proj */
    qc_tensor sh_gate;      /* [Is, H] mlp.shared_expert.gate_proj.weight */
    qc_tensor sh_up;        /* [Is, H] mlp.shared_expert.up_proj.weight */
    qc_tensor sh_down;      /* [H, Is] mlp.shared_expert.down_proj.weight */
    qc_tensor sh_expert_gate; /* [1, H] mlp.shared_expert_gate.weight: one sigmoid scalar per token,
                                 applied to the shared expert's output only */
    /* full attention layers (absent on linear layers) */
    qc_tensor q_proj;       /* [2*nh*hd, H], rows per head: [query (hd) | gate (hd)] */
    qc_tensor k_proj;       /* [nkv*hd, H] */
    qc_tensor v_proj;       /* [nkv*hd, H] */
    qc_tensor o_proj;       /* [H, nh*hd] */
    qc_tensor q_norm;       /* [hd] zero-centred */
    qc_tensor k_norm;       /* [hd] zero-centred */
    /* linear attention (Gated DeltaNet) layers (absent on full layers) */
    qc_tensor in_proj_qkv;  /* [C, H], C = 2*nk*dk + nv*dv, rows [q | k | v], head-major */
    qc_tensor in_proj_z;    /* [nv*dv, H] */
    qc_tensor in_proj_b;    /* [nv, H] */
    qc_tensor in_proj_a;    /* [nv, H] */
    qc_tensor conv1d;       /* [C, 1, K] depthwise, no bias; w[..., K-1] hits the current token */
    qc_tensor dt_bias;      /* [nv] */
    qc_tensor A_log;        /* [nv] */
    qc_tensor lin_norm;     /* [dv] gated RMSNorm weight, used as w (NO +1) */
    qc_tensor out_proj;     /* [H, nv*dv] */
} qc_layer_weights;

typedef struct qc_model {
    qc_config cfg;
    qc_tensor embed;          /* [V, H] */
    qc_tensor final_norm;     /* [H] zero-centred */
    qc_tensor lm_head;        /* [V, H]; a copy of `embed`'s view when tied */
    qc_layer_weights *layers; /* [n_layers] */
    int n_tensors_loaded;     /* text tensors used */
    int n_tensors_skipped;    /* model.visual.* and mtp.* tensors skipped */
    int legacy_packed;        /* 1 if the Qwen3-Next packed layout was split at load */
    char dir[1024];           /* model directory ("" for synthetic) */
    char config_sha256[65];   /* hex SHA-256 of config.json bytes ("" for synthetic) */
    char weights_sha256[65];  /* hex SHA-256 of the weight files' bytes, concatenated in
                                 ascending file-name order ("" for synthetic) */
    void *priv;               /* loader-private: the files' copies and owned buffers */
} qc_model;

/* Load a Hugging Face Qwen3.5 checkpoint directory (config.json + model.safetensors or
 * model.safetensors.index.json + shards). On error *out is NULL and err names the file and
 * the tensor or field. */
qc_status qc_model_load(const char *dir, qc_model **out, qc_err *err);

/* A model with the given config and seeded random weights in memory, every tensor stored as
 * `dtype` except A_log and lin_norm (always F32, as real checkpoints); QC_Q8_0: the dense
 * layers' 2-D projections and an untied lm_head Q8_0, the other tensors BF16. Weight scales are
 * realistic (norm offsets near 0, gated-norm weight near 1, decays from fast to slow). */
qc_status qc_model_synthetic(const qc_config *cfg, qc_dtype dtype, uint64_t seed, qc_model **out,
                             qc_err *err);

/* The one model check, shared by the loader (after its own per-file checks), qc_model_synthetic
 * and every backend's create: the config geometry the forward pass needs (QC_ERR_ARG "model:
 * config: ..."), then every tensor the config's layer kinds use present (QC_ERR_MISSING
 * "model: layers.3.linear_attn.A_log: missing"), F32 / BF16 / F16 (QC_ERR_UNSUPPORTED) and of
 * the expected shape (QC_ERR_SHAPE "model: layers.1.self_attn.q_proj.weight: shape [9,32] !=
 * [8,32]"; conv1d [C, 1, K]). Names as in the checkpoint after the text prefix. */
qc_status qc_model_validate(const qc_model *m, qc_err *err);

/* Bytes of weight storage the model holds (for memory planning / bench reports). */
size_t qc_model_weight_bytes(const qc_model *m);

void qc_model_free(qc_model *m);

/* ==== Streamed models: a layer's weights resident at a time (qc_model_stream.c) ====
 * qc_model_load_streamed loads like qc_model_load (every check, the same views, the same
 * hashes) but maps the weight files instead of reading them: only headers are read, and the
 * weights hash is computed by reading the files once in blocks. A tensor's bytes are read when
 * its layer is acquired and dropped from the process when it is released; the embedding table
 * and the output head are acquired in blocks of rows. Between acquire and release the views of
 * that layer are valid. What the in-memory loader rewrites at load — Q8_0 pairs (repacked),
 * the per-expert MoE layout (stacked), the legacy packed DeltaNet layout (split) — is made when
 * the layer is acquired and freed when it is released; until then such a view's data is an
 * inaccessible reserved range (a read faults instead of reading something else). Every call
 * below is a no-op returning QC_OK on an in-memory model, so one layer-major driver serves
 * both. */
qc_status qc_model_load_streamed(const char *dir, qc_model **out, qc_err *err);
int qc_model_is_streamed(const qc_model *m);
/* Layer l's weights resident (read from the files; Q8_0 pairs repacked into owned buffers).
 * QC_ERR_OOM. */
qc_status qc_model_layer_acquire(qc_model *m, int l, qc_err *err);
/* Layer l's weights dropped from the process (its Q8_0 buffers freed). */
void qc_model_layer_release(qc_model *m, int l);
/* Start reading layer l into the page cache in the background (a hint; out of range: none). */
void qc_model_layer_prefetch(qc_model *m, int l);
/* Bytes of layer l's weights as the backends read them (what an acquired layer holds). */
size_t qc_model_layer_bytes(const qc_model *m, int l);
/* Bytes read from the weight files by acquires so far (0 for an in-memory model). */
uint64_t qc_model_bytes_read(const qc_model *m);
/* Drop every resident page of t (a streamed model's embed table after the lookups). */
void qc_model_tensor_drop(const qc_model *m, const qc_tensor *t);

/* Rows [r0, r1) of a 2-D tensor of the model (the embedding table or the output head). */
typedef struct {
    qc_tensor view;      /* [r1 - r0, cols] in the tensor's dtype */
    void *owned;         /* a repacked Q8_0 block (freed by release), or NULL */
    const void *span;    /* the file bytes populated (dropped by release), or NULL */
    size_t span_len;
} qc_model_rows;
/* QC_ERR_RANGE (rows outside the tensor) or QC_ERR_OOM. */
qc_status qc_model_rows_acquire(qc_model *m, const qc_tensor *t, int64_t r0, int64_t r1,
                                qc_model_rows *rows, qc_err *err);
void qc_model_rows_release(qc_model *m, qc_model_rows *rows);

#endif /* QC_MODEL_H */
