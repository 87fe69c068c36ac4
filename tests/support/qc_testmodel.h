/* qc_testmodel.h — write tiny Hugging Face-format Qwen3.5 checkpoints from C, for tests.
 *
 * A checkpoint is config.json + model.safetensors (or model.safetensors.index.json + shards).
 * Weight values are exactly those of qc_model_synthetic(cfg with tie_word_embeddings = 0,
 * dtype, seed) — so a test can load the directory and compare every tensor with
 * qc_testmodel_reference(). Options select every packaging variant the loader must accept
 * (nested / flat config, rope_parameters / legacy rope fields, layer_types / interval,
 * tied / untied, F32 / BF16 / F16, sharded, legacy packed in_proj_qkvz / in_proj_ba, conv1d as
 * [C,K], extra model.visual.* / mtp.* tensors) and a few faults (omit / add / reshape one tensor).
 *
 *   qc_testmodel_opts o;
 *   qc_testmodel_defaults(&o);          // 4 layers (L,L,L,F), H 32, nv = 2 nk, dk != dv, BF16
 *   o.dtype = QC_F32; o.n_shards = 3;
 *   qc_testmodel_write(dir, &o, &err);  // dir must exist (see qc_testmodel_mkdtemp)
 */
#ifndef QC_TESTMODEL_H
#define QC_TESTMODEL_H

#include <stddef.h>
#include <stdint.h>

#include "qc/qc_config.h"
#include "qc/qc_model.h"
#include "qc/qc_status.h"

typedef enum {
    QC_TM_TIE_TEXT = 0,  /* tie_word_embeddings in the text config (and the top level if nested) */
    QC_TM_TIE_TOP = 1,   /* only at the top level (nested configs) */
    QC_TM_TIE_OMIT = 2   /* not written (loader default: false) */
} qc_tm_tie_where;

typedef struct {
    qc_config cfg;          /* dims, rope, eps, tie_word_embeddings, layer_types */
    qc_dtype dtype;         /* storage dtype of the weights */
    int f32_special;        /* 1: A_log and linear_attn.norm.weight stored F32 (Hub style) */
    uint64_t seed;          /* weight values: qc_model_synthetic(.., seed) */
    int nested;             /* 1: multimodal config (text_config) */
    const char *prefix;     /* text tensor prefix; NULL: "model.language_model." if nested else "model." */
    int legacy_rope;        /* 1: rope_theta / partial_rotary_factor as plain text-config fields */
    int omit_rope;          /* 1: no rope fields at all (loader defaults 10000 / 0.25) */
    int use_interval;       /* 1: write full_attention_interval (below) instead of layer_types;
                               cfg.layer_types is then derived from it */
    int interval;           /* full_attention_interval when use_interval (0: omit the field, i.e. 4) */
    qc_tm_tie_where tie_where; /* where tie_word_embeddings is written */
    int write_lm_head;      /* 1: write lm_head.weight even when tied (its values differ from embed) */
    int n_shards;           /* <= 1: model.safetensors; else index + n_shards files */
    int legacy_packed;      /* 1: Qwen3-Next in_proj_qkvz / in_proj_ba instead of the split tensors */
    int conv_2d;            /* 1: conv1d stored as [C, K] */
    int n_visual;           /* extra model.visual.* tensors (skipped by the loader) */
    int n_mtp;              /* extra mtp.* tensors (skipped) */
    const char *omit;       /* fault: full name of a tensor not to write */
    const char *extra;      /* fault: full name of an extra [4] tensor to add */
    const char *bad_shape;  /* fault: full name of a tensor whose first dim is written +1 */
} qc_testmodel_opts;

/* Tiny defaults: V 64, H 32, I 48, L 4 (linear x3, full), nh 4, nkv 2, hd 8, rotary 4
 * (partial 0.5), nk 2, nv 4, dk 8, dv 6, K 4, eps 1e-6, theta 10000, tied, BF16, nested,
 * f32_special, seed 1, single file. */
void qc_testmodel_defaults(qc_testmodel_opts *o);

/* Write the checkpoint into the existing directory dir (files written to a temp name, then
 * renamed). */
qc_status qc_testmodel_write(const char *dir, const qc_testmodel_opts *o, qc_err *err);

/* The in-memory model whose values the writer stores: qc_model_synthetic of o->cfg (layer_types
 * resolved as the writer does) with tie_word_embeddings = 0, o->dtype, o->seed. A_log / lin_norm
 * are F32 here; the file holds them in o->dtype unless f32_special. */
qc_status qc_testmodel_reference(const qc_testmodel_opts *o, qc_model **out, qc_err *err);

/* Name of the text tensor prefix the writer uses for o. */
const char *qc_testmodel_prefix(const qc_testmodel_opts *o);

/* ---- lower-level writers (also for malformed-file tests) ---- */

typedef struct {
    const char *name;     /* tensor name */
    qc_dtype dtype;       /* storage dtype */
    int ndim;             /* 0..4 */
    int64_t shape[4];     /* [ndim] */
    const void *data;     /* numel * itemsize bytes */
} qc_testmodel_tensor;

/* A valid safetensors file with the tensors in the given order (data packed in that order,
 * header padded with spaces to a multiple of 8, "__metadata__": {"format": "pt"}). */
qc_status qc_testmodel_write_safetensors(const char *path, const qc_testmodel_tensor *ts, int n,
                                         qc_err *err);

/* Raw file: u64le(header_len) + header + data (header_len = strlen(header) unless
 * header_len_override >= 0, which writes that number instead). */
qc_status qc_testmodel_write_raw(const char *path, const char *header, int64_t header_len_override,
                                 const void *data, size_t data_len, qc_err *err);

/* Write bytes to a file. */
qc_status qc_testmodel_write_file(const char *path, const void *bytes, size_t len, qc_err *err);

/* ---- comparison and temp dirs ---- */

/* 1 if a and b have the same shape and every element of a equals the element of b rounded to
 * a's dtype (bitwise float comparison); 0 otherwise (first difference printed to stderr). */
int qc_testmodel_tensor_equal(const qc_tensor *a, const qc_tensor *b, const char *what);

/* mkdtemp under $TMPDIR (or /tmp) with the tag in its name; out receives the path. */
qc_status qc_testmodel_mkdtemp(char *out, size_t n, const char *tag, qc_err *err);

/* Remove dir and everything under it (files and subdirectories; symlinks are not followed). */
void qc_testmodel_rmtree(const char *dir);

#endif /* QC_TESTMODEL_H */
