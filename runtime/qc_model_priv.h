/* qc_model_priv.h — private to the model code (qc_model.c, qc_model_moe.c, qc_model_synth.c):
 * the loader-private state behind qc_model.priv, the shared shape checks, and the MoE part of
 * the loader / the one model check / the synthetic generator. Not installed.
 */
#ifndef QC_MODEL_PRIV_H
#define QC_MODEL_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "qc/qc_model.h"
#include "qc/qc_safetensors.h"
#include "qc_text.h" /* qc_text_shape for the shape messages */

/* ==== Private state (qc_model.c) ==== */

typedef struct {
    qc_st_file *files;   /* [n_files] mapped weight files, ascending file name */
    int n_files;
    void **owned;        /* [n_owned] buffers made at load (legacy split, stacked experts) or
                            the synthetic arena */
    int n_owned, cap_owned;
    int lm_head_given_tied; /* tie_word_embeddings true but lm_head.weight present (it is used) */
    /* ---- a streamed model (qc_model_load_streamed; qc_model_stream.c) ---- */
    int streamed;           /* 1: files mapped lazily, layers populated / dropped on demand */
    struct qc_q8_defer *q8; /* [n_q8] Q8_0 pairs repacked on demand */
    int n_q8, cap_q8;
    struct qc_stack_defer *stk; /* [n_stk] per-expert MoE views stacked on demand */
    int n_stk, cap_stk;
    void **layer_bufs;      /* [n_layers] the repacked Q8_0 buffers of an acquired layer */
    uint64_t bytes_read;    /* bytes populated so far (layers and rows) */
} qc_model_priv;

/* ==== Streamed models (qc_model_stream.c) ==== */

/* SHA-256 of the weight files, concatenated in order, read (not mapped) in blocks into hex. */
qc_status qc_model_stream_hash(qc_model_priv *p, char hex[65], qc_err *err);
/* A Q8_0 pair of a streamed model: w (I8 quants) becomes a Q8_0 entry whose bytes are made on
 * demand from w's and the scale's file bytes. QC_ERR_OOM. */
qc_status qc_model_stream_defer_q8(qc_model_priv *p, qc_st_tensor *w, const qc_st_tensor *scale,
                                   qc_err *err);
/* A view of a streamed model made on demand from pieces of the files (a per-expert MoE layer's
 * matrices, a legacy packed layer's row blocks): `view` (shape and dtype set) is the n_src
 * pieces src[k] of len[k] bytes (len NULL: `mat` bytes each) concatenated. QC_ERR_OOM. */
#define QC_MAX_EXPERTS_STACK 1024
qc_status qc_model_stream_defer_stack(qc_model_priv *p, qc_tensor *view, const void *const *src,
                                      const size_t *len, int n_src, size_t mat, qc_err *err);
/* After the views are taken: link every deferred Q8_0 view to its pair; every deferred view's
 * data := a reserved, inaccessible range of its size until acquired (touching it faults). */
qc_status qc_model_stream_finish(qc_model *m, qc_err *err);
/* Free the streamed model's tables and buffers (qc_model_free). */
void qc_model_stream_free(qc_model_priv *p, int n_layers);

/* Register buf to be freed with the model. QC_OK, or QC_ERR_OOM (no message; buf not owned). */
qc_status qc_model_priv_own(qc_model_priv *p, void *buf);
/* A weight buffer of `bytes` owned by p (freed with the model): 64-byte aligned, 2 MiB aligned
 * with transparent huge pages asked for when large. NULL when out of memory (nothing owned). */
void *qc_model_priv_weights(qc_model_priv *p, size_t bytes);

/* A zeroed model owning a copy of cfg, its layer table and an empty priv; NULL when out of
 * memory. Free with qc_model_free. */
qc_model *qc_model_new(const qc_config *cfg);

/* The one view check of qc_model_validate: t present (QC_ERR_MISSING "model: NAME: missing"),
 * F32 / BF16 / F16 (QC_ERR_UNSUPPORTED), exactly shape exp[nd] (QC_ERR_SHAPE). */
qc_status qc_model_check_view(const qc_tensor *t, const char *name, const int64_t *exp, int nd,
                              qc_err *err);

/* ==== Q8_0 pairs (qc_model_q8.c) ==== */

/* Does the name end in ".weight_scale" (a Q8_0 scale, consumed by qc_q8_prepare)? */
int qc_q8_is_scale_name(const char *name);
/* Before classification: every `X.weight_scale` is checked against its I8 `X.weight` (present:
 * QC_ERR_MISSING; a quantizable name: QC_ERR_UNSUPPORTED; I8: QC_ERR_FORMAT; in % 32 == 0 and
 * scale F16 [out, in/32]: QC_ERR_SHAPE / QC_ERR_FORMAT; each naming file and tensor) and
 * repacked into an owned Q8_0 buffer the weight's table entry then points to (dtype QC_Q8_0);
 * an I8 tensor without a scale is QC_ERR_MISSING. */
qc_status qc_q8_prepare(qc_model_priv *p, const char *prefix, qc_err *err);
/* qc_model_check_view, but a Q8_0 view is accepted too (2-D, exp[1] % 32 == 0). */
qc_status qc_model_check_view_q(const qc_tensor *t, const char *name, const int64_t *exp, int nd,
                                qc_err *err);

/* ==== MoE tensors (qc_model_moe.c) ==== */

/* The seven MoE tensors of one layer, in this order (the fused shapes of qc_model.h). */
enum {
    QC_MOE_ROUTER = 0, QC_MOE_GATE_UP, QC_MOE_DOWN, QC_MOE_SH_GATE, QC_MOE_SH_UP, QC_MOE_SH_DOWN,
    QC_MOE_SH_EXPERT_GATE, QC_MOE_N
};

/* Checkpoint name after "layers.{i}." of MoE tensor `which` ("mlp.gate.weight", ...). */
const char *qc_moe_suffix(int which);
/* The view of MoE tensor `which` in lw. */
qc_tensor *qc_moe_view(qc_layer_weights *lw, int which);
/* Expected shape of MoE tensor `which`; returns ndim. */
int qc_moe_shape(const qc_config *c, int which, int64_t sh[4]);
/* The synthetic generator's standard deviation for MoE tensor `which` (mean 0). */
float qc_moe_synth_std(const qc_config *c, int which);

/* Config geometry of a MoE config (QC_ERR_ARG "model: config: ..."); QC_OK for a dense one. */
qc_status qc_moe_check_geometry(const qc_config *c, qc_err *err);
/* qc_model_validate's MoE part for layer li: a MoE model has the seven tensors (checked as
 * every other) and no dense mlp.*_proj; a dense model has none of the seven (QC_ERR_ARG). */
qc_status qc_moe_validate_layer(const qc_model *m, int li, qc_err *err);
/* Bytes of the MoE tensors of one layer. */
size_t qc_moe_layer_bytes(const qc_layer_weights *lw);

/* ==== MoE loader (qc_model_moe.c) ==== */

typedef struct {
    const qc_st_tensor *t; /* the tensor, or NULL */
    int file;              /* index into priv->files */
} qc_found;

typedef struct {
    int n_layers, n_experts;
    qc_found *fused; /* [L * QC_MOE_N] */
    qc_found *per;   /* [L * E * 3] experts.{e}.{gate,up,down}_proj.weight (MoE configs only) */
} qc_moe_found;

/* Allocate the found-tensor tables for cfg (nothing for a dense config). QC_ERR_OOM. */
qc_status qc_moe_found_init(qc_moe_found *F, const qc_config *c, qc_err *err);
void qc_moe_found_free(qc_moe_found *F);

/* Classify a layer tensor name suffix `suf` (after "layers.{li}.") of tensor t in file fpath.
 * *slot = its MoE slot, or NULL when suf is not a MoE name (the caller tries the dense ones).
 * A MoE name in a dense config, or an expert id >= num_experts: QC_ERR_UNKNOWN naming the
 * file and tensor. */
qc_status qc_moe_classify(qc_moe_found *F, const qc_config *c, int li, const char *suf,
                          const char *fpath, const qc_st_tensor *t, qc_found **slot,
                          qc_err *err);

/* Fill the MoE views of every layer from the found tensors: shapes checked (QC_ERR_SHAPE
 * naming file and tensor), a layer's experts either fused or per-expert (both: QC_ERR_FORMAT),
 * per-expert tensors stacked into owned fused buffers (one dtype), a missing tensor
 * QC_ERR_MISSING "<missing_file>: <prefix>layers.3.mlp.experts.5.up_proj.weight: missing". */
qc_status qc_moe_take(const qc_moe_found *F, qc_model *m, qc_model_priv *p, const char *prefix,
                      const char *missing_file, qc_err *err);

#endif /* QC_MODEL_PRIV_H */
