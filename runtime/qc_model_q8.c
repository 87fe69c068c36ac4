/* qc_model_q8.c — the Q8_0 part of the model code: the loader's I8 + F16-scale pairs and the
 * one model check's Q8_0 rule.
 *
 * Checkpoint convention (docs/qwen35-model.md 3.3): a quantized linear weight `X.weight` is
 * stored as I8 [out, in] plus `X.weight_scale` F16 [out, in/32] (in % 32 == 0): value [r, k]
 * = scale[r, k/32] * q[r, k]. Only the 2-D projection matrices of the dense layers (attention
 * q/k/v/o_proj, DeltaNet in_proj_qkv/z/b/a and out_proj, MLP gate/up/down_proj) and an untied
 * lm_head may be quantized; embeddings, norms, conv1d, A_log, dt_bias and every MoE tensor
 * stay float. The pair is repacked at load into one owned buffer of llama.cpp Q8_0 blocks
 * (34 bytes: f16 d, 32 int8; include/qc/qc_model.h) and the weight's table entry becomes a
 * QC_Q8_0 view of it; the scale entry is then skipped by the classifier.
 */
#include <stdlib.h>
#include <string.h>

#include "qc_model_priv.h"

static const char *const Q8_SUFFIX[] = {
    "mlp.gate_proj.weight",           "mlp.up_proj.weight",
    "mlp.down_proj.weight",           "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",        "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",        "linear_attn.in_proj_qkv.weight",
    "linear_attn.in_proj_z.weight",   "linear_attn.in_proj_b.weight",
    "linear_attn.in_proj_a.weight",   "linear_attn.out_proj.weight",
};

static const char SCALE_SUFFIX[] = ".weight_scale";

int qc_q8_is_scale_name(const char *name) {
    size_t n = strlen(name), s = sizeof SCALE_SUFFIX - 1;
    return n > s && !strcmp(name + n - s, SCALE_SUFFIX);
}

/* May `wname` (a full checkpoint name) be stored as Q8_0? */
static int quantizable(const char *wname, const char *prefix) {
    if (!strcmp(wname, "lm_head.weight")) return 1;
    size_t pl = strlen(prefix);
    if (strncmp(wname, prefix, pl) || strncmp(wname + pl, "layers.", 7)) return 0;
    const char *q = wname + pl + 7;
    if (*q < '0' || *q > '9') return 0;
    while (*q >= '0' && *q <= '9') q++;
    if (*q++ != '.') return 0;
    for (size_t i = 0; i < sizeof Q8_SUFFIX / sizeof Q8_SUFFIX[0]; i++)
        if (!strcmp(q, Q8_SUFFIX[i])) return 1;
    return 0;
}

/* Find a tensor by name in any file. */
static qc_st_tensor *find_any(qc_model_priv *p, const char *name, int *file) {
    for (int f = 0; f < p->n_files; f++) {
        const qc_st_tensor *t = qc_st_find(&p->files[f], name);
        if (t) {
            *file = f;
            return (qc_st_tensor *)t; /* the loader's own table */
        }
    }
    return NULL;
}

/* Check one pair (scale st in file sf) and repack it into the weight's entry. */
static qc_status take_pair(qc_model_priv *p, const char *prefix, int sf, const qc_st_tensor *st,
                           qc_err *err) {
    const char *sp = p->files[sf].path;
    char wname[1024];
    size_t wl = strlen(st->name) - (sizeof "_scale" - 1);
    if (wl >= sizeof wname)
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s: name too long", sp, st->name);
    memcpy(wname, st->name, wl);
    wname[wl] = '\0';
    int wf = 0;
    qc_st_tensor *w = find_any(p, wname, &wf);
    if (!w)
        return qc_errf(err, QC_ERR_MISSING, "%s: %s: a Q8_0 scale without its weight %s", sp,
                       st->name, wname);
    const char *wp = p->files[wf].path;
    if (!quantizable(wname, prefix))
        return qc_errf(err, QC_ERR_UNSUPPORTED,
                       "%s: %s: Q8_0 is supported for the 2-D projection weights of the dense "
                       "layers and an untied lm_head only",
                       sp, st->name);
    if (w->dtype != QC_I8)
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s: dtype %s next to %s (a Q8_0 weight is I8)",
                       wp, wname, qc_dtype_str(w->dtype), st->name);
    if (w->ndim != 2)
        return qc_errf(err, QC_ERR_SHAPE, "%s: %s: a Q8_0 weight has 2 dimensions, not %d", wp,
                       wname, w->ndim);
    const int64_t out = w->shape[0], in = w->shape[1];
    if (in % QC_Q8_0_BLOCK != 0)
        return qc_errf(err, QC_ERR_SHAPE,
                       "%s: %s: Q8_0 needs the input size %lld to be a multiple of 32", wp,
                       wname, (long long)in);
    if (st->dtype != QC_F16)
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s: dtype %s != F16 (the Q8_0 block scales)", sp,
                       st->name, qc_dtype_str(st->dtype));
    const int64_t nb = in / QC_Q8_0_BLOCK, exp[2] = {out, nb};
    if (st->ndim != 2 || st->shape[0] != out || st->shape[1] != nb) {
        char g[160], e[160];
        qc_text_shape(g, sizeof g, st->shape, st->ndim <= 4 ? st->ndim : 4);
        qc_text_shape(e, sizeof e, exp, 2);
        return qc_errf(err, QC_ERR_SHAPE, "%s: %s: shape %s != %s (the weight %s is [%lld,%lld])",
                       sp, st->name, g, e, wname, (long long)out, (long long)in);
    }
    if (p->streamed) /* repacked a layer (or a block of lm_head rows) at a time */
        return qc_model_stream_defer_q8(p, w, st, err);
    const size_t nblk = (size_t)out * (size_t)nb;
    unsigned char *buf = qc_model_priv_weights(p, nblk * QC_Q8_0_BLOCK_BYTES + 1);
    if (!buf) {
        return qc_errf(err, QC_ERR_OOM, "%s: %s: out of memory", wp, wname);
    }
    for (size_t b = 0; b < nblk; b++) {
        memcpy(buf + b * QC_Q8_0_BLOCK_BYTES, st->data + 2 * b, 2);
        memcpy(buf + b * QC_Q8_0_BLOCK_BYTES + 2, w->data + b * QC_Q8_0_BLOCK, QC_Q8_0_BLOCK);
    }
    w->dtype = QC_Q8_0;
    w->data = buf;
    return QC_OK;
}

qc_status qc_q8_prepare(qc_model_priv *p, const char *prefix, qc_err *err) {
    qc_status s;
    for (int f = 0; f < p->n_files; f++)
        for (int j = 0; j < p->files[f].n_tensors; j++) {
            const qc_st_tensor *t = &p->files[f].tensors[j];
            if (qc_q8_is_scale_name(t->name) && (s = take_pair(p, prefix, f, t, err))) return s;
        }
    for (int f = 0; f < p->n_files; f++)
        for (int j = 0; j < p->files[f].n_tensors; j++) {
            const qc_st_tensor *t = &p->files[f].tensors[j];
            if (t->dtype == QC_I8)
                return qc_errf(err, QC_ERR_MISSING,
                               "%s: %s: dtype I8 without its %s_scale (Q8_0 weights are I8 + "
                               "F16 scales)",
                               p->files[f].path, t->name, t->name);
        }
    return QC_OK;
}

qc_status qc_model_check_view_q(const qc_tensor *t, const char *name, const int64_t *exp, int nd,
                                qc_err *err) {
    if (t->dtype != QC_Q8_0 || t->ndim == 0 || !t->data)
        return qc_model_check_view(t, name, exp, nd, err);
    if (nd != 2 || exp[1] % QC_Q8_0_BLOCK != 0)
        return qc_errf(err, QC_ERR_UNSUPPORTED,
                       "model: %s: Q8_0 needs a 2-D weight with a multiple of 32 inputs", name);
    qc_tensor v = *t;
    v.dtype = QC_F32; /* the shape check only */
    return qc_model_check_view(&v, name, exp, nd, err);
}
