/* qc_model.c — load a Hugging Face Qwen3.5 checkpoint into typed weight views, or build a
 * synthetic model with seeded random weights.
 *
 * Loading: config.json (qc_config_parse) + model.safetensors, or model.safetensors.index.json
 * and its shards (each mmapped read-only and validated by qc_st_parse). Every tensor name is
 * classified:
 *   model.visual.* / visual.* / mtp.*         skipped and counted (n_tensors_skipped)
 *   lm_head.weight                            the output head
 *   model.language_model.* or model.*         text tensors (one prefix, used consistently)
 *   anything else                             QC_ERR_UNKNOWN naming the tensor
 * Each text tensor's shape is checked against the config (QC_ERR_SHAPE "[got] != [expected]");
 * a missing one is QC_ERR_MISSING naming it. The legacy Qwen3-Next packed in_proj_qkvz /
 * in_proj_ba (docs/qwen35-model.md 3.4, by key head) is split into in_proj_qkv / z / b / a.
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

/* ==== Private state ==== */

typedef struct {
    qc_st_file *files;   /* [n_files] mapped weight files, ascending file name */
    int n_files;
    void **owned;        /* [n_owned] buffers made at load (legacy split) or synthetic arena */
    int n_owned, cap_owned;
    int lm_head_given_tied; /* tie_word_embeddings true but lm_head.weight present (it is used) */
} model_priv;

static qc_status priv_own(model_priv *p, void *buf) {
    if (p->n_owned == p->cap_owned) {
        int nc = p->cap_owned ? 2 * p->cap_owned : 16;
        void **no = realloc(p->owned, (size_t)nc * sizeof *no);
        if (!no) return QC_ERR_OOM;
        p->owned = no;
        p->cap_owned = nc;
    }
    p->owned[p->n_owned++] = buf;
    return QC_OK;
}

void qc_model_free(qc_model *m) {
    if (!m) return;
    model_priv *p = (model_priv *)m->priv;
    if (p) {
        for (int i = 0; i < p->n_files; i++) qc_st_close(&p->files[i]);
        free(p->files);
        for (int i = 0; i < p->n_owned; i++) free(p->owned[i]);
        free(p->owned);
        free(p);
    }
    free(m->layers);
    free(m);
}

static qc_model *model_new(const qc_config *cfg) {
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

typedef struct {
    const char *suffix;  /* name after "layers.{i}." */
    size_t off;          /* offsetof(qc_layer_weights, field); unused for packed slots */
    int kind;            /* K_EVERY or a qc_layer_kind */
    int special;         /* S_NORMAL, S_QKVZ, S_BA */
} slot_desc;

#define LW(f) offsetof(qc_layer_weights, f)
static const slot_desc SLOTS[] = {
    {"input_layernorm.weight", LW(input_norm), K_EVERY, S_NORMAL},
    {"post_attention_layernorm.weight", LW(post_norm), K_EVERY, S_NORMAL},
    {"mlp.gate_proj.weight", LW(mlp_gate), K_EVERY, S_NORMAL},
    {"mlp.up_proj.weight", LW(mlp_up), K_EVERY, S_NORMAL},
    {"mlp.down_proj.weight", LW(mlp_down), K_EVERY, S_NORMAL},
    {"self_attn.q_proj.weight", LW(q_proj), QC_LAYER_FULL, S_NORMAL},
    {"self_attn.k_proj.weight", LW(k_proj), QC_LAYER_FULL, S_NORMAL},
    {"self_attn.v_proj.weight", LW(v_proj), QC_LAYER_FULL, S_NORMAL},
    {"self_attn.o_proj.weight", LW(o_proj), QC_LAYER_FULL, S_NORMAL},
    {"self_attn.q_norm.weight", LW(q_norm), QC_LAYER_FULL, S_NORMAL},
    {"self_attn.k_norm.weight", LW(k_norm), QC_LAYER_FULL, S_NORMAL},
    {"linear_attn.in_proj_qkv.weight", LW(in_proj_qkv), QC_LAYER_LINEAR, S_NORMAL},
    {"linear_attn.in_proj_z.weight", LW(in_proj_z), QC_LAYER_LINEAR, S_NORMAL},
    {"linear_attn.in_proj_b.weight", LW(in_proj_b), QC_LAYER_LINEAR, S_NORMAL},
    {"linear_attn.in_proj_a.weight", LW(in_proj_a), QC_LAYER_LINEAR, S_NORMAL},
    {"linear_attn.conv1d.weight", LW(conv1d), QC_LAYER_LINEAR, S_NORMAL},
    {"linear_attn.dt_bias", LW(dt_bias), QC_LAYER_LINEAR, S_NORMAL},
    {"linear_attn.A_log", LW(A_log), QC_LAYER_LINEAR, S_NORMAL},
    {"linear_attn.norm.weight", LW(lin_norm), QC_LAYER_LINEAR, S_NORMAL},
    {"linear_attn.out_proj.weight", LW(out_proj), QC_LAYER_LINEAR, S_NORMAL},
    {"linear_attn.in_proj_qkvz.weight", 0, QC_LAYER_LINEAR, S_QKVZ},
    {"linear_attn.in_proj_ba.weight", 0, QC_LAYER_LINEAR, S_BA},
};
#undef LW
#define N_SLOTS ((int)(sizeof SLOTS / sizeof SLOTS[0]))
enum { SL_QKV = 11, SL_Z = 12, SL_B = 13, SL_A = 14, SL_CONV = 15, SL_QKVZ = 20, SL_BA = 21 };

static qc_tensor *slot_ptr(qc_layer_weights *lw, int s) {
    return (qc_tensor *)((char *)lw + SLOTS[s].off);
}

/* Expected shape of slot s. Returns ndim. */
static int slot_shape(const qc_config *c, int s, int64_t sh[4]) {
    int64_t H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    int64_t kd = qc_cfg_key_dim(c), vd = qc_cfg_value_dim(c), C = qc_cfg_conv_dim(c);
    int64_t nv = c->lin_n_v_heads;
#define SH1(a) return sh[0] = (a), 1
#define SH2(a, b) return sh[0] = (a), sh[1] = (b), 2
    switch (s) {
    case 0: case 1: SH1(H);
    case 2: case 3: SH2(I, H);
    case 4: SH2(H, I);
    case 5: SH2(2 * c->n_heads * hd, H);
    case 6: case 7: SH2(c->n_kv_heads * hd, H);
    case 8: SH2(H, c->n_heads * hd);
    case 9: case 10: SH1(hd);
    case SL_QKV: SH2(C, H);
    case SL_Z: SH2(vd, H);
    case SL_B: case SL_A: SH2(nv, H);
    case SL_CONV: return sh[0] = C, sh[1] = 1, sh[2] = c->conv_kernel, 3;
    case 16: case 17: SH1(nv);
    case 18: SH1(c->lin_v_dim);
    case 19: SH2(H, vd);
    case SL_QKVZ: SH2(2 * kd + 2 * vd, H);
    case SL_BA: SH2(2 * nv, H);
    }
#undef SH1
#undef SH2
    QC_ASSERT(!"bad slot");
    return 0;
}

static void fmt_shape(char *buf, size_t n, const int64_t *sh, int nd) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)sh[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* ==== The one model check (qc_model_validate): loader, synthetic models, every backend ==== */

/* The config geometry the forward pass relies on (the kinds of layers present decide which
 * head counts must be usable). */
static qc_status check_geometry(const qc_config *c, qc_err *err) {
    if (c->n_layers < 1 || c->n_layers > QC_MAX_LAYERS || c->hidden_size < 1 ||
        c->intermediate_size < 1 || c->vocab_size < 1)
        return qc_errf(err, QC_ERR_ARG, "model: config: bad sizes (L %d, H %d, I %d, V %d)",
                       c->n_layers, c->hidden_size, c->intermediate_size, c->vocab_size);
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

/* t present, in a supported dtype, with exactly the expected shape. */
static qc_status check_view(const qc_tensor *t, const char *name, const int64_t *exp, int nd,
                            qc_err *err) {
    if (t->ndim == 0 || !t->data) return qc_errf(err, QC_ERR_MISSING, "model: %s: missing", name);
    if (t->dtype != QC_F32 && t->dtype != QC_BF16 && t->dtype != QC_F16)
        return qc_errf(err, QC_ERR_UNSUPPORTED, "model: %s: unsupported dtype %d", name,
                       (int)t->dtype);
    int ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == exp[i];
    if (!ok) {
        char g[160], e[160];
        fmt_shape(g, sizeof g, t->shape, t->ndim > 0 && t->ndim <= 4 ? t->ndim : 0);
        fmt_shape(e, sizeof e, exp, nd);
        if (t->ndim < 0 || t->ndim > 4)
            return qc_errf(err, QC_ERR_SHAPE, "model: %s: %d dimensions != %s", name, t->ndim, e);
        return qc_errf(err, QC_ERR_SHAPE, "model: %s: shape %s != %s", name, g, e);
    }
    return QC_OK;
}

qc_status qc_model_validate(const qc_model *m, qc_err *err) {
    if (!m) return qc_errf(err, QC_ERR_ARG, "model: NULL");
    const qc_config *c = &m->cfg;
    qc_status st = check_geometry(c, err);
    if (st) return st;
    if (!m->layers) return qc_errf(err, QC_ERR_ARG, "model: no layers");
    int64_t sh[4] = {c->vocab_size, c->hidden_size, 0, 0};
    if ((st = check_view(&m->embed, "embed_tokens.weight", sh, 2, err)) ||
        (st = check_view(&m->lm_head, "lm_head.weight", sh, 2, err)))
        return st;
    sh[0] = c->hidden_size;
    if ((st = check_view(&m->final_norm, "norm.weight", sh, 1, err))) return st;
    for (int li = 0; li < c->n_layers; li++)
        for (int s = 0; s < N_SLOTS; s++) {
            if (SLOTS[s].special != S_NORMAL) continue; /* the legacy packed form is split at load */
            if (SLOTS[s].kind != K_EVERY && SLOTS[s].kind != (int)c->layer_types[li]) continue;
            char name[128];
            snprintf(name, sizeof name, "layers.%d.%s", li, SLOTS[s].suffix);
            const int nd = slot_shape(c, s, sh);
            if ((st = check_view(slot_ptr((qc_layer_weights *)&m->layers[li], s), name, sh, nd,
                                 err)))
                return st;
        }
    return QC_OK;
}

/* ==== Loader: found-tensor bookkeeping ==== */

typedef struct {
    const qc_st_tensor *t; /* the tensor, or NULL */
    int file;              /* index into priv->files */
} found_t;

typedef struct {
    const char *dir;       /* model directory (no trailing '/') */
    qc_model *m;
    model_priv *p;
    const char *prefix;    /* "model.language_model." or "model." */
    found_t embed, norm, lm_head;
    found_t *lay;          /* [n_layers * N_SLOTS] */
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
        fmt_shape(g, sizeof g, t->shape, t->ndim);
        fmt_shape(e, sizeof e, exp, exp_nd);
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
            int s = -1;
            for (int k = 0; k < N_SLOTS; k++)
                if (!strcmp(suf, SLOTS[k].suffix)) s = k;
            if (s < 0)
                return qc_errf(L->err, QC_ERR_UNKNOWN, "%s: %s: unknown tensor", fpath(L, file), nm);
            if (SLOTS[s].kind != K_EVERY && SLOTS[s].kind != (int)c->layer_types[li])
                return qc_errf(L->err, QC_ERR_UNKNOWN, "%s: %s: unknown tensor (layer %ld is %s)",
                               fpath(L, file), nm, li,
                               c->layer_types[li] == QC_LAYER_FULL ? "full_attention"
                                                                   : "linear_attention");
            slot = &L->lay[li * N_SLOTS + s];
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
static qc_status split_packed(load_ctx *L, int li, const qc_tensor *qkvz, const qc_tensor *ba) {
    const qc_config *c = &L->m->cfg;
    qc_layer_weights *lw = &L->m->layers[li];
    size_t es = qc_dtype_size(qkvz->dtype), row = es * (size_t)c->hidden_size;
    int nk = c->lin_n_k_heads, dk = c->lin_k_dim, dv = c->lin_v_dim;
    int r = c->lin_n_v_heads / nk;
    size_t kd = (size_t)qc_cfg_key_dim(c), vd = (size_t)qc_cfg_value_dim(c);
    size_t C = (size_t)qc_cfg_conv_dim(c), nv = (size_t)c->lin_n_v_heads;
    size_t rowb = qc_dtype_size(ba->dtype) * (size_t)c->hidden_size;
    uint8_t *qkv = malloc(C * row), *z = malloc(vd * row);
    uint8_t *b = malloc(nv * rowb), *a = malloc(nv * rowb);
    model_priv *p = L->p;
    if (!qkv || !z || !b || !a || priv_own(p, qkv) || priv_own(p, z) || priv_own(p, b) ||
        priv_own(p, a)) {
        /* whatever was registered is freed with the model; free the rest here */
        int reg = 0;
        for (int i = 0; i < p->n_owned; i++)
            reg |= (p->owned[i] == qkv) << 0 | (p->owned[i] == z) << 1 | (p->owned[i] == b) << 2 |
                   (p->owned[i] == a) << 3;
        if (!(reg & 1)) free(qkv);
        if (!(reg & 2)) free(z);
        if (!(reg & 4)) free(b);
        if (!(reg & 8)) free(a);
        return qc_errf(L->err, QC_ERR_OOM, "%s: out of memory splitting layer %d in_proj_qkvz",
                       L->dir, li);
    }
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
        if ((st = qc_st_open(sp, &L->p->files[i], err)) != QC_OK) goto done;
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
        if ((st = qc_st_open(path, &p->files[0], err)) != QC_OK) return st;
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
            int is_split = (s == SL_QKV || s == SL_Z || s == SL_B || s == SL_A);
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
                if ((st = take_view(L, &F[s], sh, nd, s == SL_CONV, slot_ptr(&m->layers[li], s))) != QC_OK)
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

    /* provenance: weight files hashed in ascending file-name order (shards are sorted) */
    qc_sha256_ctx hc;
    uint8_t dg[32];
    qc_sha256_init(&hc);
    for (int f = 0; f < p->n_files; f++) qc_sha256_update(&hc, p->files[f].bytes, p->files[f].file_len);
    qc_sha256_final(&hc, dg);
    qc_sha256_to_hex(dg, m->weights_sha256);
    return QC_OK;
}

qc_status qc_model_load(const char *dir, qc_model **out, qc_err *err) {
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

    qc_model *m = model_new(&cfg);
    if (!m) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", d);
    snprintf(m->dir, sizeof m->dir, "%s", d);
    memcpy(m->config_sha256, chex, sizeof chex);
    load_ctx L;
    memset(&L, 0, sizeof L);
    L.dir = d;
    L.m = m;
    L.p = (model_priv *)m->priv;
    L.err = err;
    st = load_impl(&L);
    if (st == QC_OK) st = qc_model_validate(m, err); /* the one model check, as every backend */
    free(L.lay);
    if (st) {
        qc_model_free(m);
        return st;
    }
    *out = m;
    return QC_OK;
}

/* ==== Weight bytes ==== */

static size_t tensor_bytes(const qc_tensor *t) {
    return t->ndim ? qc_tensor_numel(t) * qc_dtype_size(t->dtype) : 0;
}

size_t qc_model_weight_bytes(const qc_model *m) {
    if (!m) return 0;
    size_t n = tensor_bytes(&m->embed) + tensor_bytes(&m->final_norm);
    if (m->lm_head.data != m->embed.data) n += tensor_bytes(&m->lm_head);
    for (int li = 0; li < m->cfg.n_layers; li++)
        for (int s = 0; s < N_SLOTS; s++)
            if (SLOTS[s].special == S_NORMAL)
                n += tensor_bytes(slot_ptr((qc_layer_weights *)&m->layers[li], s));
    return n;
}

/* ==== Synthetic model ==== */

/* Random numbers: splitmix64 per block of SYN_BLOCK elements, seeded from (seed, tensor id,
 * block), so the result does not depend on the thread count. Normals are approximated by
 * Irwin-Hall sums of four 16-bit uniforms (mean 0, std 1, support +-3.46): cheap and bounded. */
#define SYN_BLOCK 65536

static inline uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline float approx_normal(uint64_t r) {
    uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
                 (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
    return ((float)s - 131070.0f) * (1.0f / 37837.23f);
}

typedef enum { G_NORMAL = 0, G_ALOG = 1 } gen_kind;

typedef struct {
    qc_tensor *dst;   /* view to fill (data set once the arena exists) */
    size_t numel;     /* elements */
    size_t offset;    /* byte offset in the arena */
    float mean, std;  /* value = mean + std * normal */
    gen_kind kind;    /* G_ALOG: log of decays spread over [0.05, 8] */
    uint64_t id;      /* tensor id for seeding */
} gen_job;

/* f32 -> bf16 round-to-nearest-even, inlined for the generator (values are finite here). */
static inline uint16_t bf16_rne_finite(float v) {
    uint32_t x;
    memcpy(&x, &v, 4);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static void gen_block(const gen_job *j, size_t blk, uint64_t seed) {
    uint64_t s = seed ^ (0xd1b54a32d192ed03ULL * (j->id + 1));
    uint64_t s2 = splitmix64(&s) ^ (blk * 0x9e3779b97f4a7c15ULL);
    uint64_t st = splitmix64(&s2);
    size_t i0 = blk * SYN_BLOCK, i1 = i0 + SYN_BLOCK;
    if (i1 > j->numel) i1 = j->numel;
    uint8_t *base = (uint8_t *)j->dst->data;
    const float mean = j->mean, sd = j->std;
    if (j->kind == G_ALOG) {
        /* head i of n: A = exp(lerp(ln 0.05, ln 8, (i + u) / n)), u uniform in [0,1) */
        for (size_t i = i0; i < i1; i++) {
            double u = (double)(splitmix64(&st) >> 11) * (1.0 / 9007199254740992.0);
            double t = ((double)i + u) / (double)j->numel;
            float v = (float)(log(0.05) + (log(8.0) - log(0.05)) * t);
            QC_ASSERT(j->dst->dtype == QC_F32);
            memcpy(base + 4 * i, &v, 4);
        }
        return;
    }
    switch (j->dst->dtype) {
    case QC_F32: {
        float *o = (float *)(void *)base; /* arena offsets are 64-byte aligned */
        for (size_t i = i0; i < i1; i++) o[i] = mean + sd * approx_normal(splitmix64(&st));
    } break;
    case QC_BF16: {
        uint16_t *o = (uint16_t *)(void *)base;
        for (size_t i = i0; i < i1; i++) o[i] = bf16_rne_finite(mean + sd * approx_normal(splitmix64(&st)));
    } break;
    case QC_F16: {
        uint16_t *o = (uint16_t *)(void *)base;
        for (size_t i = i0; i < i1; i++) o[i] = qc_f32_to_f16(mean + sd * approx_normal(splitmix64(&st)));
    } break;
    }
}

static qc_status check_synth_cfg(const qc_config *c, qc_err *err) {
    if (c->n_layers < 1 || c->n_layers > QC_MAX_LAYERS || c->vocab_size < 1 || c->hidden_size < 1 ||
        c->intermediate_size < 1 || c->n_heads < 1 || c->n_kv_heads < 1 || c->head_dim < 1 ||
        c->lin_n_k_heads < 1 || c->lin_n_v_heads < 1 || c->lin_k_dim < 1 || c->lin_v_dim < 1 ||
        c->conv_kernel < 1)
        return qc_errf(err, QC_ERR_ARG, "synthetic model: config has a non-positive size");
    if (c->lin_n_v_heads % c->lin_n_k_heads || c->n_heads % c->n_kv_heads)
        return qc_errf(err, QC_ERR_ARG, "synthetic model: head counts are not multiples");
    return QC_OK;
}

qc_status qc_model_synthetic(const qc_config *cfg, qc_dtype dtype, uint64_t seed, qc_model **out,
                             qc_err *err) {
    QC_ASSERT(cfg && out);
    *out = NULL;
    qc_status st = check_synth_cfg(cfg, err);
    if (st) return st;
    if (dtype != QC_F32 && dtype != QC_BF16 && dtype != QC_F16)
        return qc_errf(err, QC_ERR_ARG, "synthetic model: bad dtype %d", (int)dtype);
    qc_model *m = model_new(cfg);
    if (!m) return qc_errf(err, QC_ERR_OOM, "synthetic model: out of memory");
    const qc_config *c = &m->cfg;
    int njobs_max = 3 + c->n_layers * N_SLOTS;
    gen_job *jobs = calloc((size_t)njobs_max, sizeof *jobs);
    if (!jobs) {
        qc_model_free(m);
        return qc_errf(err, QC_ERR_OOM, "synthetic model: out of memory");
    }
    int nj = 0;
    size_t total = 0;
    uint64_t id = 0;
#define ADD(t, dt, nd_, s0, s1, s2, mean_, std_, kind_)                              \
    do {                                                                           \
        qc_tensor *t_ = (t);                                                       \
        t_->dtype = (dt), t_->ndim = (nd_);                                        \
        t_->shape[0] = (s0), t_->shape[1] = (s1), t_->shape[2] = (s2);             \
        gen_job *j_ = &jobs[nj++];                                                 \
        j_->dst = t_, j_->numel = qc_tensor_numel(t_), j_->offset = total;         \
        j_->mean = (mean_), j_->std = (std_), j_->kind = (kind_), j_->id = id++;   \
        total += (j_->numel * qc_dtype_size(dt) + 63) & ~(size_t)63;               \
    } while (0)
    int64_t V = c->vocab_size, H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    int64_t nh = c->n_heads, nkv = c->n_kv_heads, nv = c->lin_n_v_heads, K = c->conv_kernel;
    int64_t vd = qc_cfg_value_dim(c), C = qc_cfg_conv_dim(c);
    float sH = (float)(1.0 / sqrt((double)H));
    ADD(&m->embed, dtype, 2, V, H, 0, 0.0f, sH, G_NORMAL);
    ADD(&m->final_norm, dtype, 1, H, 0, 0, 0.0f, 0.1f, G_NORMAL);
    if (!c->tie_word_embeddings) ADD(&m->lm_head, dtype, 2, V, H, 0, 0.0f, sH, G_NORMAL);
    else id++; /* keep every later tensor's id (hence values) independent of tying */
    for (int li = 0; li < c->n_layers; li++) {
        qc_layer_weights *w = &m->layers[li];
        ADD(&w->input_norm, dtype, 1, H, 0, 0, 0.0f, 0.1f, G_NORMAL);
        ADD(&w->post_norm, dtype, 1, H, 0, 0, 0.0f, 0.1f, G_NORMAL);
        ADD(&w->mlp_gate, dtype, 2, I, H, 0, 0.0f, sH, G_NORMAL);
        ADD(&w->mlp_up, dtype, 2, I, H, 0, 0.0f, sH, G_NORMAL);
        ADD(&w->mlp_down, dtype, 2, H, I, 0, 0.0f, (float)(1.0 / sqrt((double)I)), G_NORMAL);
        if (c->layer_types[li] == QC_LAYER_FULL) {
            ADD(&w->q_proj, dtype, 2, 2 * nh * hd, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->k_proj, dtype, 2, nkv * hd, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->v_proj, dtype, 2, nkv * hd, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->o_proj, dtype, 2, H, nh * hd, 0, 0.0f, (float)(1.0 / sqrt((double)(nh * hd))),
                G_NORMAL);
            ADD(&w->q_norm, dtype, 1, hd, 0, 0, 0.0f, 0.1f, G_NORMAL);
            ADD(&w->k_norm, dtype, 1, hd, 0, 0, 0.0f, 0.1f, G_NORMAL);
        } else {
            ADD(&w->in_proj_qkv, dtype, 2, C, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->in_proj_z, dtype, 2, vd, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->in_proj_b, dtype, 2, nv, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->in_proj_a, dtype, 2, nv, H, 0, 0.0f, sH, G_NORMAL);
            ADD(&w->conv1d, dtype, 3, C, 1, K, 0.0f, (float)(1.0 / sqrt((double)K)), G_NORMAL);
            ADD(&w->dt_bias, dtype, 1, nv, 0, 0, 0.0f, 0.5f, G_NORMAL);
            ADD(&w->A_log, QC_F32, 1, nv, 0, 0, 0.0f, 0.0f, G_ALOG);
            ADD(&w->lin_norm, QC_F32, 1, c->lin_v_dim, 0, 0, 1.0f, 0.1f, G_NORMAL);
            ADD(&w->out_proj, dtype, 2, H, vd, 0, 0.0f, (float)(1.0 / sqrt((double)vd)), G_NORMAL);
        }
    }
#undef ADD
    uint8_t *arena = malloc(total ? total : 1);
    model_priv *p = (model_priv *)m->priv;
    if (!arena || priv_own(p, arena)) {
        free(arena);
        free(jobs);
        qc_model_free(m);
        return qc_errf(err, QC_ERR_OOM, "synthetic model: cannot allocate %zu bytes of weights", total);
    }
    size_t nblocks = 0;
    for (int j = 0; j < nj; j++) {
        jobs[j].dst->data = arena + jobs[j].offset;
        nblocks += (jobs[j].numel + SYN_BLOCK - 1) / SYN_BLOCK;
    }
    /* flatten (job, block) pairs so the big tensors spread over threads */
    size_t *bj = malloc((nblocks ? nblocks : 1) * 2 * sizeof *bj);
    if (!bj) {
        free(jobs);
        qc_model_free(m);
        return qc_errf(err, QC_ERR_OOM, "synthetic model: out of memory");
    }
    size_t k = 0;
    for (int j = 0; j < nj; j++)
        for (size_t b = 0; b * SYN_BLOCK < jobs[j].numel; b++) bj[2 * k] = (size_t)j, bj[2 * k + 1] = b, k++;
    long nb = (long)nblocks;
#pragma omp parallel for schedule(dynamic, 8)
    for (long q = 0; q < nb; q++) gen_block(&jobs[bj[2 * q]], bj[2 * q + 1], seed);
    free(bj);
    free(jobs);
    if (c->tie_word_embeddings) m->lm_head = m->embed;
    m->n_tensors_loaded = nj;
    if ((st = qc_model_validate(m, err)) != QC_OK) { /* by construction: never */
        qc_model_free(m);
        return st;
    }
    *out = m;
    return QC_OK;
}
