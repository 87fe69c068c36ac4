/* qc_model.c — load a Hugging Face Qwen3.5 checkpoint into typed weight views, or build a
 * synthetic model with seeded random weights.
 *
 * Loading: config.json (qc_config_parse) + model.safetensors, or model.safetensors.index.json
 * and its shards (each read into read-only anonymous memory and validated by qc_st_parse). Every tensor name is
 * classified:
 *   model.visual.* / visual.* / mtp.*         skipped and counted (n_tensors_skipped)
 *   lm_head.weight                            the output head
 *   model.language_model.* or model.*         text tensors (one prefix, used consistently)
 *   anything else                             QC_ERR_UNKNOWN naming the tensor
 * Each text tensor's shape is checked against the config (QC_ERR_SHAPE "[got] != [expected]");
 * a missing one is QC_ERR_MISSING naming it. The legacy Qwen3-Next packed in_proj_qkvz /
 * in_proj_ba (docs/qwen35-model.md 3.4, by key head) is split into in_proj_qkv / z / b / a.
 * Mixture-of-experts layers (router, routed experts fused or per-expert, shared expert) are
 * classified and taken by qc_model_moe.c; the synthetic generator is qc_model_synth.c.
 */
#include "qc/qc_model.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>

#include "qc/qc_file.h"
#include "qc/qc_safetensors.h"
#include "qc/qc_sha256.h"
#include "qc_model_priv.h"

/* ==== Private state (qc_model_priv.h) ==== */

typedef qc_model_priv model_priv;
typedef qc_found found_t;

#define priv_own qc_model_priv_own

void qc_model_free(qc_model *m) {
    if (!m) return;
    model_priv *p = (model_priv *)m->priv;
    if (p) {
        for (int i = 0; i < p->n_files; i++) qc_st_close(&p->files[i]);
        free(p->files);
        for (int i = 0; i < p->n_owned; i++) free(p->owned[i]);
        free(p->owned);
        qc_model_stream_free(p, m->cfg.n_layers);
        free(p);
    }
    free(m->layers);
    free(m);
}

qc_model *qc_model_new(const qc_config *cfg) {
    qc_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->cfg = *cfg;
    m->layers = calloc((size_t)(cfg->n_layers > 0 ? cfg->n_layers : 1), sizeof *m->layers);
    m->priv = calloc(1, sizeof(model_priv));
    if (!m->layers || !m->priv) {
        qc_model_free(m);
        return NULL;
    }
    return m;
}

/* ==== Tensor slots and expected shapes ==== */

enum { K_EVERY = -1 };
enum { S_NORMAL = 0, S_QKVZ = 1, S_BA = 2 };
/* what a slot is besides its shape */
enum {
    F_MLP = 1,   /* the dense MLP: absent in a MoE model */
    F_PROJ = 2,  /* a 2-D projection matrix (may be Q8_0, qc_model_q8.c) */
    F_SPLIT = 4, /* made from the legacy packed in_proj_qkvz / in_proj_ba when those are given */
    F_CONV = 8,  /* conv1d.weight: [C,K] is accepted for [C,1,K] */
};
/* the config quantities an extent is made of (their values: slot_shape's table q) */
enum { D_H, D_I, D_QG, D_KV, D_ATT, D_HD, D_CONV, D_VD, D_NV, D_LVD, D_ONE, D_KER, D_QKVZ, D_BA,
       N_DQ };

typedef struct {
    const char *suffix;  /* name after "layers.{i}." */
    size_t off;          /* offsetof(qc_layer_weights, field); unused for packed slots */
    int kind;            /* K_EVERY or a qc_layer_kind */
    int special;         /* S_NORMAL, S_QKVZ, S_BA */
    int flags;           /* F_* */
    int nd;              /* expected rank */
    int dim[3];          /* expected extents: D_* quantities of the config */
} slot_desc;

#define LW(f) offsetof(qc_layer_weights, f)
#define LIN QC_LAYER_LINEAR
static const slot_desc SLOTS[] = {
    {"input_layernorm.weight", LW(input_norm), K_EVERY, S_NORMAL, 0, 1, {D_H}},
    {"post_attention_layernorm.weight", LW(post_norm), K_EVERY, S_NORMAL, 0, 1, {D_H}},
    {"mlp.gate_proj.weight", LW(mlp_gate), K_EVERY, S_NORMAL, F_MLP | F_PROJ, 2, {D_I, D_H}},
    {"mlp.up_proj.weight", LW(mlp_up), K_EVERY, S_NORMAL, F_MLP | F_PROJ, 2, {D_I, D_H}},
    {"mlp.down_proj.weight", LW(mlp_down), K_EVERY, S_NORMAL, F_MLP | F_PROJ, 2, {D_H, D_I}},
    {"self_attn.q_proj.weight", LW(q_proj), QC_LAYER_FULL, S_NORMAL, F_PROJ, 2, {D_QG, D_H}},
    {"self_attn.k_proj.weight", LW(k_proj), QC_LAYER_FULL, S_NORMAL, F_PROJ, 2, {D_KV, D_H}},
    {"self_attn.v_proj.weight", LW(v_proj), QC_LAYER_FULL, S_NORMAL, F_PROJ, 2, {D_KV, D_H}},
    {"self_attn.o_proj.weight", LW(o_proj), QC_LAYER_FULL, S_NORMAL, F_PROJ, 2, {D_H, D_ATT}},
    {"self_attn.q_norm.weight", LW(q_norm), QC_LAYER_FULL, S_NORMAL, 0, 1, {D_HD}},
    {"self_attn.k_norm.weight", LW(k_norm), QC_LAYER_FULL, S_NORMAL, 0, 1, {D_HD}},
    {"linear_attn.in_proj_qkv.weight", LW(in_proj_qkv), LIN, S_NORMAL, F_PROJ | F_SPLIT, 2,
     {D_CONV, D_H}},
    {"linear_attn.in_proj_z.weight", LW(in_proj_z), LIN, S_NORMAL, F_PROJ | F_SPLIT, 2,
     {D_VD, D_H}},
    {"linear_attn.in_proj_b.weight", LW(in_proj_b), LIN, S_NORMAL, F_PROJ | F_SPLIT, 2,
     {D_NV, D_H}},
    {"linear_attn.in_proj_a.weight", LW(in_proj_a), LIN, S_NORMAL, F_PROJ | F_SPLIT, 2,
     {D_NV, D_H}},
    {"linear_attn.conv1d.weight", LW(conv1d), LIN, S_NORMAL, F_CONV, 3, {D_CONV, D_ONE, D_KER}},
    {"linear_attn.dt_bias", LW(dt_bias), LIN, S_NORMAL, 0, 1, {D_NV}},
    {"linear_attn.A_log", LW(A_log), LIN, S_NORMAL, 0, 1, {D_NV}},
    {"linear_attn.norm.weight", LW(lin_norm), LIN, S_NORMAL, 0, 1, {D_LVD}},
    {"linear_attn.out_proj.weight", LW(out_proj), LIN, S_NORMAL, F_PROJ, 2, {D_H, D_VD}},
    {"linear_attn.in_proj_qkvz.weight", 0, LIN, S_QKVZ, 0, 2, {D_QKVZ, D_H}},
    {"linear_attn.in_proj_ba.weight", 0, LIN, S_BA, 0, 2, {D_BA, D_H}},
};
#undef LIN
#undef LW
#define N_SLOTS ((int)(sizeof SLOTS / sizeof SLOTS[0]))
enum { SL_QKVZ = N_SLOTS - 2, SL_BA = N_SLOTS - 1 }; /* the packed pair: the last two rows */

static qc_tensor *slot_ptr(qc_layer_weights *lw, int s) {
    return (qc_tensor *)((char *)lw + SLOTS[s].off);
}

/* Expected shape of slot s: its row's extents looked up in the config. Returns ndim. */
static int slot_shape(const qc_config *c, int s, int64_t sh[4]) {
    const int64_t hd = c->head_dim;
    const int64_t q[N_DQ] = {
        /* D_QG: the query and its gate; D_QKVZ / D_BA: the legacy packed pair */
        [D_H] = c->hidden_size, [D_I] = c->intermediate_size, [D_QG] = 2 * c->n_heads * hd,
        [D_KV] = c->n_kv_heads * hd, [D_ATT] = c->n_heads * hd, [D_HD] = hd,
        [D_CONV] = qc_cfg_conv_dim(c), [D_VD] = qc_cfg_value_dim(c), [D_NV] = c->lin_n_v_heads,
        [D_LVD] = c->lin_v_dim, [D_ONE] = 1, [D_KER] = c->conv_kernel,
        [D_QKVZ] = 2 * (int64_t)qc_cfg_key_dim(c) + 2 * (int64_t)qc_cfg_value_dim(c),
        [D_BA] = 2 * (int64_t)c->lin_n_v_heads,
    };
    QC_ASSERT(s >= 0 && s < N_SLOTS);
    for (int i = 0; i < SLOTS[s].nd; i++) sh[i] = q[SLOTS[s].dim[i]];
    return SLOTS[s].nd;
}

/* ==== The one model check (qc_model_validate): loader, synthetic models, every backend ==== */

/* The config geometry the forward pass relies on (the kinds of layers present decide which
 * head counts must be usable). */
static qc_status check_geometry(const qc_config *c, qc_err *err) {
    if (c->n_layers < 1 || c->n_layers > QC_MAX_LAYERS || c->hidden_size < 1 ||
        (qc_cfg_is_moe(c) ? c->intermediate_size != 0 : c->intermediate_size < 1) ||
        c->vocab_size < 1)
        return qc_errf(err, QC_ERR_ARG, "model: config: bad sizes (L %d, H %d, I %d, V %d)",
                       c->n_layers, c->hidden_size, c->intermediate_size, c->vocab_size);
    qc_status st = qc_moe_check_geometry(c, err); /* MoE sizes (qc_model_moe.c) */
    if (st) return st;
    int any_full = 0, any_linear = 0;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_types[i] == QC_LAYER_FULL) any_full = 1;
        else if (c->layer_types[i] == QC_LAYER_LINEAR) any_linear = 1;
        else
            return qc_errf(err, QC_ERR_ARG, "model: config: layer %d has an unknown kind %d", i,
                           (int)c->layer_types[i]);
    }
    if (any_full && (c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads != 0 ||
                     c->head_dim < 1 || c->rotary_dim < 0 || c->rotary_dim % 2 != 0 ||
                     c->rotary_dim > c->head_dim))
        return qc_errf(err, QC_ERR_ARG,
                       "model: config: bad attention geometry (heads %d, kv heads %d, head_dim "
                       "%d, rotary_dim %d)",
                       c->n_heads, c->n_kv_heads, c->head_dim, c->rotary_dim);
    if (any_linear && (c->lin_n_k_heads < 1 || c->lin_n_v_heads < 1 ||
                       c->lin_n_v_heads % c->lin_n_k_heads != 0 || c->lin_k_dim < 1 ||
                       c->lin_v_dim < 1 || c->conv_kernel < 1))
        return qc_errf(err, QC_ERR_ARG,
                       "model: config: bad DeltaNet geometry (k heads %d, v heads %d, dk %d, dv "
                       "%d, conv kernel %d)",
                       c->lin_n_k_heads, c->lin_n_v_heads, c->lin_k_dim, c->lin_v_dim,
                       c->conv_kernel);
    return QC_OK;
}

qc_status qc_model_validate(const qc_model *m, qc_err *err) {
    if (!m) return qc_errf(err, QC_ERR_ARG, "model: NULL");
    const qc_config *c = &m->cfg;
    qc_status st = check_geometry(c, err);
    if (st) return st;
    if (!m->layers) return qc_errf(err, QC_ERR_ARG, "model: no layers");
    int64_t sh[4] = {c->vocab_size, c->hidden_size, 0, 0};
    if ((st = qc_model_check_view(&m->embed, "embed_tokens.weight", sh, 2, err)) ||
        (st = qc_model_check_view_q(&m->lm_head, "lm_head.weight", sh, 2, err)))
        return st;
    sh[0] = c->hidden_size;
    if ((st = qc_model_check_view(&m->final_norm, "norm.weight", sh, 1, err))) return st;
    for (int li = 0; li < c->n_layers; li++) {
        if ((st = qc_moe_validate_layer(m, li, err))) return st; /* MoE tensors, or none */
        for (int s = 0; s < N_SLOTS; s++) {
            if (SLOTS[s].special != S_NORMAL) continue; /* the legacy packed form is split at load */
            if (SLOTS[s].kind != K_EVERY && SLOTS[s].kind != (int)c->layer_types[li]) continue;
            if (qc_cfg_is_moe(c) && (SLOTS[s].flags & F_MLP)) continue; /* checked absent above */
            char name[128];
            snprintf(name, sizeof name, "layers.%d.%s", li, SLOTS[s].suffix);
            const int nd = slot_shape(c, s, sh);
            if ((st = ((SLOTS[s].flags & F_PROJ) ? qc_model_check_view_q : qc_model_check_view)(
                     slot_ptr((qc_layer_weights *)&m->layers[li], s), name, sh, nd, err)))
                return st;
        }
    }
    return QC_OK;
}

/* ==== Loader: found-tensor bookkeeping ==== */

typedef struct {
    const char *dir;       /* model directory (no trailing '/') */
    qc_model *m;
    model_priv *p;
    const char *prefix;    /* "model.language_model." or "model." */
    found_t embed, norm, lm_head;
    found_t *lay;          /* [n_layers * N_SLOTS] */
    qc_moe_found moe;      /* the MoE tensors (qc_model_moe.c) */
    int lazy;              /* 1: streamed (qc_model_load_streamed): files mapped, not read */
    qc_err *err;
} load_ctx;

static const char *fpath(load_ctx *L, int file) { return L->p->files[file].path; }

/* Checks shape (conv1d [C,K] accepted as [C,1,K]) and fills the view. */
static qc_status take_view(load_ctx *L, const found_t *f, const int64_t *exp, int exp_nd,
                           int conv_slot, qc_tensor *dst) {
    const qc_st_tensor *t = f->t;
    int ok = (t->ndim == exp_nd);
    for (int i = 0; ok && i < exp_nd; i++) ok = (t->shape[i] == exp[i]);
    int conv2d = 0;
    if (!ok && conv_slot && t->ndim == 2 && t->shape[0] == exp[0] && t->shape[1] == exp[2])
        ok = conv2d = 1;
    if (!ok) {
        char g[160], e[160];
        qc_text_shape(g, sizeof g, t->shape, t->ndim);
        qc_text_shape(e, sizeof e, exp, exp_nd);
        return qc_errf(L->err, QC_ERR_SHAPE, "%s: %s: shape %s != %s", fpath(L, f->file),
                       t->name, g, e);
    }
    memset(dst, 0, sizeof *dst);
    dst->dtype = t->dtype;
    dst->ndim = exp_nd;
    for (int i = 0; i < exp_nd; i++) dst->shape[i] = exp[i];
    (void)conv2d; /* [C,K] and [C,1,K] share one memory layout */
    dst->data = t->data;
    return QC_OK;
}

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* Sort file names ascending (strcmp) — the weights_sha256 order. */
static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Classify one tensor and record it in its slot. */
static qc_status classify(load_ctx *L, int file, const qc_st_tensor *t) {
    const char *nm = t->name;
    const qc_config *c = &L->m->cfg;
    if (qc_q8_is_scale_name(nm)) return QC_OK; /* a Q8_0 scale, taken by qc_q8_prepare */
    if (starts(nm, "model.visual.") || starts(nm, "visual.") || starts(nm, "mtp.")) {
        L->m->n_tensors_skipped++;
        return QC_OK;
    }
    found_t *slot = NULL;
    if (!strcmp(nm, "lm_head.weight")) {
        slot = &L->lm_head;
    } else if (starts(nm, L->prefix)) {
        const char *r = nm + strlen(L->prefix);
        if (!strcmp(r, "embed_tokens.weight")) slot = &L->embed;
        else if (!strcmp(r, "norm.weight")) slot = &L->norm;
        else if (starts(r, "layers.")) {
            const char *q = r + 7;
            long li = 0;
            int nd = 0;
            while (q[nd] >= '0' && q[nd] <= '9' && nd < 9) li = li * 10 + (q[nd] - '0'), nd++;
            if (nd == 0 || q[nd] != '.' || (nd > 1 && q[0] == '0'))
                return qc_errf(L->err, QC_ERR_UNKNOWN, "%s: %s: unknown tensor", fpath(L, file), nm);
            if (li >= c->n_layers)
                return qc_errf(L->err, QC_ERR_UNKNOWN,
                               "%s: %s: unknown tensor (layer %ld >= num_hidden_layers %d)",
                               fpath(L, file), nm, li, c->n_layers);
            const char *suf = q + nd + 1;
            qc_status st = qc_moe_classify(&L->moe, c, (int)li, suf, fpath(L, file), t, &slot,
                                           L->err);
            if (st) return st;
            int s = slot ? 0 : -1;
            for (int k = 0; k < N_SLOTS && !slot; k++)
                if (!strcmp(suf, SLOTS[k].suffix)) s = k;
            if (!slot && s >= 0 && qc_cfg_is_moe(c) && (SLOTS[s].flags & F_MLP))
                return qc_errf(L->err, QC_ERR_UNKNOWN,
                               "%s: %s: unknown tensor (a dense MLP tensor, but config.json "
                               "describes a mixture-of-experts model with num_experts %d)",
                               fpath(L, file), nm, c->n_experts);
            if (s < 0)
                return qc_errf(L->err, QC_ERR_UNKNOWN, "%s: %s: unknown tensor", fpath(L, file), nm);
            if (!slot && SLOTS[s].kind != K_EVERY && SLOTS[s].kind != (int)c->layer_types[li])
                return qc_errf(L->err, QC_ERR_UNKNOWN, "%s: %s: unknown tensor (layer %ld is %s)",
                               fpath(L, file), nm, li,
                               c->layer_types[li] == QC_LAYER_FULL ? "full_attention"
                                                                   : "linear_attention");
            if (!slot) slot = &L->lay[li * N_SLOTS + s];
        }
    } else if (starts(nm, "model.")) {
        return qc_errf(L->err, QC_ERR_UNKNOWN,
                       "%s: %s: unknown tensor (the text tensors use the prefix %s)",
                       fpath(L, file), nm, L->prefix);
    }
    if (!slot)
        return qc_errf(L->err, QC_ERR_UNKNOWN, "%s: %s: unknown tensor", fpath(L, file), nm);
    if (slot->t)
        return qc_errf(L->err, QC_ERR_FORMAT, "%s: %s: also present in %s", fpath(L, file), nm,
                       fpath(L, slot->file));
    slot->t = t;
    slot->file = file;
    L->m->n_tensors_loaded++;
    return QC_OK;
}

/* ==== Loader: legacy packed split (docs/qwen35-model.md 3.4) ==== */

/* in_proj_qkvz rows per key head g: [q_g (dk), k_g (dk), v_g (r*dv), z_g (r*dv)];
 * in_proj_ba rows per key head g: [b_g (r), a_g (r)]. */
static qc_status split_packed_lazy(load_ctx *L, int li, const qc_tensor *qkvz,
                                   const qc_tensor *ba);

static qc_status split_packed(load_ctx *L, int li, const qc_tensor *qkvz, const qc_tensor *ba) {
    if (L->lazy) return split_packed_lazy(L, li, qkvz, ba);
    const qc_config *c = &L->m->cfg;
    qc_layer_weights *lw = &L->m->layers[li];
    size_t es = qc_dtype_size(qkvz->dtype), row = es * (size_t)c->hidden_size;
    int nk = c->lin_n_k_heads, dk = c->lin_k_dim, dv = c->lin_v_dim;
    int r = c->lin_n_v_heads / nk;
    size_t kd = (size_t)qc_cfg_key_dim(c), vd = (size_t)qc_cfg_value_dim(c);
    size_t C = (size_t)qc_cfg_conv_dim(c), nv = (size_t)c->lin_n_v_heads;
    size_t rowb = qc_dtype_size(ba->dtype) * (size_t)c->hidden_size;
    model_priv *p = L->p;
    /* what was allocated is owned by the model, freed with it */
    uint8_t *qkv = qc_model_priv_weights(p, C * row);
    uint8_t *z = qkv ? qc_model_priv_weights(p, vd * row) : NULL;
    uint8_t *b = z ? qc_model_priv_weights(p, nv * rowb) : NULL;
    uint8_t *a = b ? qc_model_priv_weights(p, nv * rowb) : NULL;
    if (!a)
        return qc_errf(L->err, QC_ERR_OOM, "%s: out of memory splitting layer %d in_proj_qkvz",
                       L->dir, li);
    const uint8_t *src = qkvz->data;
    size_t grp = 2 * (size_t)dk + 2 * (size_t)r * dv; /* rows per key head */
    for (int g = 0; g < nk; g++) {
        const uint8_t *G = src + (size_t)g * grp * row;
        memcpy(qkv + (size_t)g * dk * row, G, (size_t)dk * row);                    /* q_g */
        memcpy(qkv + (kd + (size_t)g * dk) * row, G + (size_t)dk * row, (size_t)dk * row); /* k_g */
        memcpy(qkv + (2 * kd + (size_t)g * r * dv) * row, G + 2 * (size_t)dk * row,
               (size_t)r * dv * row);                                                /* v_g */
        memcpy(z + (size_t)g * r * dv * row, G + (2 * (size_t)dk + (size_t)r * dv) * row,
               (size_t)r * dv * row);                                                /* z_g */
        const uint8_t *B = (const uint8_t *)ba->data + (size_t)g * 2 * r * rowb;
        memcpy(b + (size_t)g * r * rowb, B, (size_t)r * rowb);
        memcpy(a + (size_t)g * r * rowb, B + (size_t)r * rowb, (size_t)r * rowb);
    }
    int64_t H = c->hidden_size;
    lw->in_proj_qkv = (qc_tensor){qkvz->dtype, 2, {(int64_t)C, H, 0, 0}, qkv};
    lw->in_proj_z = (qc_tensor){qkvz->dtype, 2, {(int64_t)vd, H, 0, 0}, z};
    lw->in_proj_b = (qc_tensor){ba->dtype, 2, {(int64_t)nv, H, 0, 0}, b};
    lw->in_proj_a = (qc_tensor){ba->dtype, 2, {(int64_t)nv, H, 0, 0}, a};
    return QC_OK;
}

/* A streamed model: the same split, as row blocks of the files joined when the layer is
 * acquired (qc_model_stream.c). */
static qc_status split_packed_lazy(load_ctx *L, int li, const qc_tensor *qkvz,
                                   const qc_tensor *ba) {
    const qc_config *c = &L->m->cfg;
    qc_layer_weights *lw = &L->m->layers[li];
    const size_t row = qc_dtype_size(qkvz->dtype) * (size_t)c->hidden_size;
    const size_t rowb = qc_dtype_size(ba->dtype) * (size_t)c->hidden_size;
    const int nk = c->lin_n_k_heads, dk = c->lin_k_dim, dv = c->lin_v_dim;
    const int r = c->lin_n_v_heads / nk;
    const size_t grp = 2 * (size_t)dk + 2 * (size_t)r * dv; /* rows per key head */
    const void **src = malloc((size_t)3 * nk * sizeof *src);
    size_t *len = malloc((size_t)3 * nk * sizeof *len);
    qc_status st = src && len ? QC_OK : qc_errf(L->err, QC_ERR_OOM, "%s: out of memory", L->dir);
    const uint8_t *Q = qkvz->data, *BA = ba->data;
    const int64_t H = c->hidden_size;
    lw->in_proj_qkv = (qc_tensor){qkvz->dtype, 2, {qc_cfg_conv_dim(c), H, 0, 0}, NULL};
    lw->in_proj_z = (qc_tensor){qkvz->dtype, 2, {qc_cfg_value_dim(c), H, 0, 0}, NULL};
    lw->in_proj_b = (qc_tensor){ba->dtype, 2, {c->lin_n_v_heads, H, 0, 0}, NULL};
    lw->in_proj_a = (qc_tensor){ba->dtype, 2, {c->lin_n_v_heads, H, 0, 0}, NULL};
    for (int g = 0; g < nk && !st; g++) { /* qkv = [q_g for g | k_g for g | v_g for g] */
        const uint8_t *G = Q + (size_t)g * grp * row;
        src[g] = G, len[g] = (size_t)dk * row;
        src[nk + g] = G + (size_t)dk * row, len[nk + g] = (size_t)dk * row;
        src[2 * nk + g] = G + 2 * (size_t)dk * row, len[2 * nk + g] = (size_t)r * dv * row;
    }
    if (!st) st = qc_model_stream_defer_stack(L->p, &lw->in_proj_qkv, src, len, 3 * nk, 0, L->err);
    for (int g = 0; g < nk && !st; g++) { /* z = [z_g] */
        src[g] = Q + ((size_t)g * grp + 2 * (size_t)dk + (size_t)r * dv) * row;
        len[g] = (size_t)r * dv * row;
    }
    if (!st) st = qc_model_stream_defer_stack(L->p, &lw->in_proj_z, src, len, nk, 0, L->err);
    for (int k = 0; k < 2 && !st; k++) { /* b = [b_g], a = [a_g] */
        for (int g = 0; g < nk; g++) {
            src[g] = BA + ((size_t)g * 2 * r + (size_t)k * r) * rowb;
            len[g] = (size_t)r * rowb;
        }
        st = qc_model_stream_defer_stack(L->p, k ? &lw->in_proj_a : &lw->in_proj_b, src, len, nk,
                                         0, L->err);
    }
    free(src);
    free(len);
    return st;
}

/* ==== Loader: files ==== */

/* config.json / the index: the shared reader (regular files only, never blocks on a FIFO);
 * an absent file is QC_ERR_MISSING here (the loader's contract), other failures QC_ERR_IO. */
static qc_status read_small_file(const char *path, size_t limit, char **out, size_t *len,
                                 qc_err *err) {
    *out = NULL;
    *len = 0;
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT)
        return qc_errf(err, QC_ERR_MISSING, "%s: cannot open: %s", path, strerror(ENOENT));
    return qc_read_small_file(path, limit, out, len, err);
}

typedef struct {
    const char *tensor; /* weight_map key */
    int shard;          /* index into the sorted shard list */
} wm_entry;

static int cmp_wm(const void *a, const void *b) {
    return strcmp(((const wm_entry *)a)->tensor, ((const wm_entry *)b)->tensor);
}

/* Sharded checkpoint: parse the index, open every shard, cross-check both directions. */
static qc_status open_sharded(load_ctx *L, const char *ipath) {
    char *text = NULL;
    size_t len = 0;
    qc_err *err = L->err;
    qc_status st = read_small_file(ipath, (size_t)64 << 20, &text, &len, err);
    if (st) return st;
    char *z = realloc(text, len + 1);
    if (!z) {
        free(text);
        return qc_errf(err, QC_ERR_OOM, "%s: out of memory", ipath);
    }
    text = z;
    text[len] = '\0';
    if (memchr(text, '\0', len)) {
        free(text);
        return qc_errf(err, QC_ERR_FORMAT, "%s: contains a NUL byte", ipath);
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    size_t off = end ? (size_t)(end - text) : 0;
    free(text);
    if (!root) return qc_errf(err, QC_ERR_FORMAT, "%s: not well-formed JSON (near byte %zu)", ipath, off);
    wm_entry *wm = NULL;
    char **shards = NULL;
    int nwm = 0, nsh = 0;
    const cJSON *map = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(root)) {
        st = qc_errf(err, QC_ERR_FORMAT, "%s: top level is not a JSON object", ipath);
        goto done;
    }
    if (!map) {
        st = qc_errf(err, QC_ERR_MISSING, "%s: weight_map: missing", ipath);
        goto done;
    }
    if (!cJSON_IsObject(map)) {
        st = qc_errf(err, QC_ERR_FORMAT, "%s: weight_map: not an object", ipath);
        goto done;
    }
    int cap = cJSON_GetArraySize(map);
    wm = calloc((size_t)cap + 1, sizeof *wm);
    shards = calloc((size_t)cap + 1, sizeof *shards);
    if (!wm || !shards) {
        st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", ipath);
        goto done;
    }
    /* collect unique shard names */
    for (const cJSON *e = map->child; e; e = e->next) {
        const char *key = e->string ? e->string : "";
        if (!cJSON_IsString(e)) {
            st = qc_errf(err, QC_ERR_FORMAT, "%s: weight_map.%s: shard name is not a string", ipath, key);
            goto done;
        }
        const char *s = e->valuestring;
        if (!s[0] || strchr(s, '/') || strstr(s, "..") || strlen(s) > 255) {
            st = qc_errf(err, QC_ERR_FORMAT,
                         "%s: weight_map.%s: shard \"%.300s\" is not a plain file name", ipath, key, s);
            goto done;
        }
        int found = 0;
        for (int i = 0; i < nsh && !found; i++) found = !strcmp(shards[i], s);
        if (!found) shards[nsh++] = e->valuestring;
    }
    qsort(shards, (size_t)nsh, sizeof *shards, cmp_str);
    for (const cJSON *e = map->child; e; e = e->next) {
        int k = 0;
        while (strcmp(shards[k], e->valuestring)) k++;
        wm[nwm++] = (wm_entry){e->string ? e->string : "", k};
    }
    qsort(wm, (size_t)nwm, sizeof *wm, cmp_wm);
    for (int i = 1; i < nwm; i++)
        if (!strcmp(wm[i].tensor, wm[i - 1].tensor)) {
            st = qc_errf(err, QC_ERR_FORMAT, "%s: weight_map.%s: listed twice", ipath, wm[i].tensor);
            goto done;
        }
    L->p->files = calloc((size_t)nsh + 1, sizeof *L->p->files);
    if (!L->p->files) {
        st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", ipath);
        goto done;
    }
    for (int i = 0; i < nsh; i++) {
        char sp[2048];
        snprintf(sp, sizeof sp, "%s/%s", L->dir, shards[i]);
        if ((st = (L->lazy ? qc_st_open_lazy : qc_st_open)(sp, &L->p->files[i], err)) != QC_OK)
            goto done;
        L->p->n_files = i + 1;
    }
    /* index -> shards: every listed tensor is in its shard */
    for (int i = 0; i < nwm; i++)
        if (!qc_st_find(&L->p->files[wm[i].shard], wm[i].tensor)) {
            st = qc_errf(err, QC_ERR_MISSING, "%s: %s: listed in %s but absent from this shard",
                         L->p->files[wm[i].shard].path, wm[i].tensor, ipath);
            goto done;
        }
    /* shards -> index: every stored tensor is listed, in this shard */
    for (int f = 0; f < nsh; f++)
        for (int j = 0; j < L->p->files[f].n_tensors; j++) {
            wm_entry key = {L->p->files[f].tensors[j].name, 0};
            wm_entry *hit = bsearch(&key, wm, (size_t)nwm, sizeof *wm, cmp_wm);
            if (!hit || hit->shard != f) {
                st = qc_errf(err, QC_ERR_FORMAT, "%s: %s: %s", L->p->files[f].path, key.tensor,
                             hit ? "the index weight_map places it in another shard"
                                 : "not listed in the index weight_map");
                goto done;
            }
        }
done:
    free(wm);
    free(shards);
    cJSON_Delete(root);
    return st;
}

/* ==== Loader: main ==== */

static qc_status load_impl(load_ctx *L) {
    qc_model *m = L->m;
    model_priv *p = L->p;
    const qc_config *c = &m->cfg;
    qc_err *err = L->err;
    qc_status st;
    char path[2048];

    /* weight files */
    struct stat sb;
    char missing_file[2048]; /* the file that should have listed a missing tensor */
    snprintf(path, sizeof path, "%s/model.safetensors", L->dir);
    snprintf(missing_file, sizeof missing_file, "%s", path);
    if (stat(path, &sb) == 0) {
        p->files = calloc(1, sizeof *p->files);
        if (!p->files) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
        if ((st = (L->lazy ? qc_st_open_lazy : qc_st_open)(path, &p->files[0], err)) != QC_OK)
            return st;
        p->n_files = 1;
    } else {
        char ipath[2048];
        snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", L->dir);
        if (stat(ipath, &sb) != 0)
            return qc_errf(err, QC_ERR_MISSING,
                           "%s: neither model.safetensors nor model.safetensors.index.json found",
                           L->dir);
        if ((st = open_sharded(L, ipath)) != QC_OK) return st;
        snprintf(missing_file, sizeof missing_file, "%s", ipath);
    }
    /* prefix: model.language_model.* if any tensor uses it, else model.* */
    L->prefix = "model.";
    for (int f = 0; f < p->n_files; f++)
        for (int j = 0; j < p->files[f].n_tensors; j++)
            if (starts(p->files[f].tensors[j].name, "model.language_model."))
                L->prefix = "model.language_model.";

    L->lay = calloc((size_t)c->n_layers * N_SLOTS, sizeof *L->lay);
    if (!L->lay) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", L->dir);
    if ((st = qc_moe_found_init(&L->moe, c, err)) != QC_OK) return st;
    if ((st = qc_q8_prepare(p, L->prefix, err)) != QC_OK) return st; /* Q8_0 pairs */
    for (int f = 0; f < p->n_files; f++)
        for (int j = 0; j < p->files[f].n_tensors; j++)
            if ((st = classify(L, f, &p->files[f].tensors[j])) != QC_OK) return st;

    /* globals */
    int64_t sh[4];
    sh[0] = c->vocab_size, sh[1] = c->hidden_size;
    if (!L->embed.t)
        return qc_errf(err, QC_ERR_MISSING, "%s: %sembed_tokens.weight: missing", missing_file, L->prefix);
    if ((st = take_view(L, &L->embed, sh, 2, 0, &m->embed)) != QC_OK) return st;
    if (L->lm_head.t) {
        if ((st = take_view(L, &L->lm_head, sh, 2, 0, &m->lm_head)) != QC_OK) return st;
        p->lm_head_given_tied = c->tie_word_embeddings; /* tied, yet given: use the stored head */
    } else if (c->tie_word_embeddings) {
        m->lm_head = m->embed;
    } else {
        return qc_errf(err, QC_ERR_MISSING, "%s: lm_head.weight: missing (tie_word_embeddings is false)",
                       missing_file);
    }
    sh[0] = c->hidden_size;
    if (!L->norm.t)
        return qc_errf(err, QC_ERR_MISSING, "%s: %snorm.weight: missing", missing_file, L->prefix);
    if ((st = take_view(L, &L->norm, sh, 1, 0, &m->final_norm)) != QC_OK) return st;

    /* layers */
    for (int li = 0; li < c->n_layers; li++) {
        found_t *F = &L->lay[li * N_SLOTS];
        int kind = (int)c->layer_types[li];
        int packed = F[SL_QKVZ].t || F[SL_BA].t;
        for (int s = 0; s < N_SLOTS; s++) {
            if (SLOTS[s].kind != K_EVERY && SLOTS[s].kind != kind) continue;
            if (qc_cfg_is_moe(c) && (SLOTS[s].flags & F_MLP)) continue; /* MoE: qc_moe_take below */
            int is_split = (SLOTS[s].flags & F_SPLIT) != 0;
            int is_packed = (SLOTS[s].special != S_NORMAL);
            if ((packed && is_split) || (!packed && is_packed)) {
                if (F[s].t) /* a split tensor next to a packed one */
                    return qc_errf(err, QC_ERR_UNKNOWN,
                                   "%s: %s: unexpected next to the packed in_proj_qkvz / in_proj_ba "
                                   "layout of layer %d",
                                   fpath(L, F[s].file), F[s].t->name, li);
                continue;
            }
            if (!F[s].t)
                return qc_errf(err, QC_ERR_MISSING, "%s: %slayers.%d.%s: missing", missing_file,
                               L->prefix, li, SLOTS[s].suffix);
            int nd = slot_shape(c, s, sh);
            if (is_packed) {
                qc_tensor tmp;
                if ((st = take_view(L, &F[s], sh, nd, 0, &tmp)) != QC_OK) return st;
            } else {
                if ((st = take_view(L, &F[s], sh, nd, (SLOTS[s].flags & F_CONV) != 0,
                                    slot_ptr(&m->layers[li], s))) != QC_OK)
                    return st;
            }
        }
        if (packed) {
            int64_t s1[4], s2[4];
            int n1 = slot_shape(c, SL_QKVZ, s1), n2 = slot_shape(c, SL_BA, s2);
            qc_tensor qkvz, ba;
            take_view(L, &F[SL_QKVZ], s1, n1, 0, &qkvz); /* shapes checked above */
            take_view(L, &F[SL_BA], s2, n2, 0, &ba);
            if ((st = split_packed(L, li, &qkvz, &ba)) != QC_OK) return st;
            m->legacy_packed = 1;
        }
    }
    /* the MoE blocks: router, routed experts (fused or stacked), shared expert */
    if ((st = qc_moe_take(&L->moe, m, p, L->prefix, missing_file, err)) != QC_OK) return st;

    /* provenance: weight files hashed in ascending file-name order (shards are sorted) */
    if (L->lazy) return qc_model_stream_hash(p, m->weights_sha256, err); /* read, not mapped */
    qc_sha256_ctx hc;
    uint8_t dg[32];
    qc_sha256_init(&hc);
    for (int f = 0; f < p->n_files; f++)
        if (qc_st_hash_update(&p->files[f], &hc))
            return qc_errf(err, QC_ERR_OOM, "%s: out of memory hashing", p->files[f].path);
    qc_sha256_final(&hc, dg);
    qc_sha256_to_hex(dg, m->weights_sha256);
    return QC_OK;
}

static qc_status load_dir(const char *dir, int lazy, qc_model **out, qc_err *err);

qc_status qc_model_load(const char *dir, qc_model **out, qc_err *err) {
    return load_dir(dir, 0, out, err);
}

qc_status qc_model_load_streamed(const char *dir, qc_model **out, qc_err *err) {
    return load_dir(dir, 1, out, err);
}

static qc_status load_dir(const char *dir, int lazy, qc_model **out, qc_err *err) {
    QC_ASSERT(out);
    *out = NULL;
    if (!dir || !dir[0]) return qc_errf(err, QC_ERR_ARG, "model directory is empty");
    char d[1024];
    size_t dl = strlen(dir);
    if (dl >= sizeof d) return qc_errf(err, QC_ERR_ARG, "%.100s...: model directory path too long", dir);
    memcpy(d, dir, dl + 1);
    while (dl > 1 && d[dl - 1] == '/') d[--dl] = '\0';

    char cpath[1100];
    snprintf(cpath, sizeof cpath, "%s/config.json", d);
    char *ctext = NULL;
    size_t clen = 0;
    qc_status st = read_small_file(cpath, (size_t)64 << 20, &ctext, &clen, err);
    if (st) return st;
    qc_config cfg;
    st = qc_config_parse(ctext, clen, cpath, &cfg, err);
    char chex[65];
    qc_sha256_buf_hex(ctext, clen, chex);
    free(ctext);
    if (st) return st;

    qc_model *m = qc_model_new(&cfg);
    if (!m) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", d);
    snprintf(m->dir, sizeof m->dir, "%s", d);
    memcpy(m->config_sha256, chex, sizeof chex);
    load_ctx L;
    memset(&L, 0, sizeof L);
    L.dir = d;
    L.m = m;
    L.p = (model_priv *)m->priv;
    L.err = err;
    L.lazy = lazy;
    L.p->streamed = lazy;
    st = load_impl(&L);
    if (st == QC_OK && lazy) st = qc_model_stream_finish(m, err); /* deferred views: guards */
    if (st == QC_OK) st = qc_model_validate(m, err); /* the one model check, as every backend */
    free(L.lay);
    qc_moe_found_free(&L.moe);
    if (st) {
        qc_model_free(m);
        return st;
    }
    *out = m;
    return QC_OK;
}

/* ==== Weight bytes ==== */

static size_t tensor_bytes(const qc_tensor *t) { return qc_tensor_bytes(t); }

size_t qc_model_weight_bytes(const qc_model *m) {
    if (!m) return 0;
    size_t n = tensor_bytes(&m->embed) + tensor_bytes(&m->final_norm);
    if (m->lm_head.data != m->embed.data) n += tensor_bytes(&m->lm_head);
    for (int li = 0; li < m->cfg.n_layers; li++)
        for (int s = 0; s < N_SLOTS; s++)
            if (SLOTS[s].special == S_NORMAL)
                n += tensor_bytes(slot_ptr((qc_layer_weights *)&m->layers[li], s));
    for (int li = 0; li < m->cfg.n_layers; li++) n += qc_moe_layer_bytes(&m->layers[li]);
    return n;
}
