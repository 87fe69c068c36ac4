/* qc_testmodel.c — tiny Hugging Face-format checkpoint writer for tests (see qc_testmodel.h). */
#include "qc_testmodel.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ==== Defaults ==== */

void qc_testmodel_defaults(qc_testmodel_opts *o) {
    memset(o, 0, sizeof *o);
    qc_config *c = &o->cfg;
    c->vocab_size = 64;
    c->hidden_size = 32;
    c->intermediate_size = 48;
    c->n_layers = 4;
    c->n_heads = 4;
    c->n_kv_heads = 2;
    c->head_dim = 8;
    c->lin_n_k_heads = 2;
    c->lin_n_v_heads = 4;
    c->lin_k_dim = 8;
    c->lin_v_dim = 6;
    c->conv_kernel = 4;
    c->rms_eps = 1e-6;
    c->rope_theta = 10000.0;
    c->partial_rotary_factor = 0.5;
    c->rotary_dim = 4;
    c->tie_word_embeddings = 1;
    c->max_position_embeddings = 128;
    c->nested = 1;
    for (int i = 0; i < c->n_layers; i++)
        c->layer_types[i] = ((i + 1) % 4 == 0) ? QC_LAYER_FULL : QC_LAYER_LINEAR;
    o->dtype = QC_BF16;
    o->f32_special = 1;
    o->seed = 1;
    o->nested = 1;
    o->tie_where = QC_TM_TIE_TEXT;
    o->n_shards = 1;
}

const char *qc_testmodel_prefix(const qc_testmodel_opts *o) {
    if (o->prefix) return o->prefix;
    return o->nested ? "model.language_model." : "model.";
}

/* The config the writer actually describes (layer types from the interval if used). */
static qc_config effective_cfg(const qc_testmodel_opts *o) {
    qc_config c = o->cfg;
    if (o->use_interval) {
        int iv = o->interval > 0 ? o->interval : 4;
        for (int i = 0; i < c.n_layers; i++)
            c.layer_types[i] = ((i + 1) % iv == 0) ? QC_LAYER_FULL : QC_LAYER_LINEAR;
    }
    if (o->omit_rope) {
        c.rope_theta = 10000.0;
        c.partial_rotary_factor = 0.25;
        c.rotary_dim = (int)(c.head_dim * 0.25);
    }
    return c;
}

qc_status qc_testmodel_reference(const qc_testmodel_opts *o, qc_model **out, qc_err *err) {
    qc_config c = effective_cfg(o);
    c.tie_word_embeddings = 0;
    return qc_model_synthetic(&c, o->dtype, o->seed, out, err);
}

/* ==== Files ==== */

qc_status qc_testmodel_write_file(const char *path, const void *bytes, size_t len, qc_err *err) {
    char tmp[2100];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return qc_errf(err, QC_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    size_t w = len ? fwrite(bytes, 1, len, f) : 0;
    int bad = (w != len) | (fclose(f) != 0);
    if (bad || rename(tmp, path) != 0) {
        remove(tmp);
        return qc_errf(err, QC_ERR_IO, "%s: write failed", path);
    }
    return QC_OK;
}

qc_status qc_testmodel_write_raw(const char *path, const char *header, int64_t header_len_override,
                                 const void *data, size_t data_len, qc_err *err) {
    size_t hl = strlen(header);
    uint64_t n = header_len_override >= 0 ? (uint64_t)header_len_override : (uint64_t)hl;
    size_t total = 8 + hl + data_len;
    uint8_t *buf = malloc(total ? total : 1);
    if (!buf) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (data_len) memcpy(buf + 8 + hl, data, data_len);
    qc_status st = qc_testmodel_write_file(path, buf, total, err);
    free(buf);
    return st;
}

static size_t tm_numel(const qc_testmodel_tensor *t) {
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

qc_status qc_testmodel_write_safetensors(const char *path, const qc_testmodel_tensor *ts, int n,
                                         qc_err *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(root, ts[i].name);
        cJSON_AddStringToObject(e, "dtype", qc_dtype_str(ts[i].dtype));
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < ts[i].ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)ts[i].shape[d]));
        size_t nb = tm_numel(&ts[i]) * qc_dtype_size(ts[i].dtype);
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + nb)));
        off += nb;
    }
    char *h = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!h) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    size_t hl = strlen(h), hp = (hl + 7) & ~(size_t)7;
    size_t total = 8 + hp + off;
    uint8_t *buf = malloc(total);
    if (!buf) {
        cJSON_free(h);
        return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    }
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hp >> (8 * i));
    memcpy(buf + 8, h, hl);
    memset(buf + 8 + hl, ' ', hp - hl);
    cJSON_free(h);
    size_t pos = 8 + hp;
    for (int i = 0; i < n; i++) {
        size_t nb = tm_numel(&ts[i]) * qc_dtype_size(ts[i].dtype);
        if (nb) memcpy(buf + pos, ts[i].data, nb);
        pos += nb;
    }
    qc_status st = qc_testmodel_write_file(path, buf, total, err);
    free(buf);
    return st;
}

/* ==== Tensor list of a checkpoint ==== */

typedef struct {
    qc_testmodel_tensor *t; /* [n] */
    int n, cap;
    void **owned;           /* buffers to free */
    int n_owned, cap_owned;
} tlist;

static void *tl_own(tlist *L, size_t bytes) {
    if (L->n_owned == L->cap_owned) {
        L->cap_owned = L->cap_owned ? 2 * L->cap_owned : 64;
        L->owned = realloc(L->owned, (size_t)L->cap_owned * sizeof *L->owned);
        QC_ASSERT(L->owned);
    }
    void *p = calloc(1, bytes ? bytes : 1);
    QC_ASSERT(p);
    L->owned[L->n_owned++] = p;
    return p;
}

static void tl_add(tlist *L, const char *name, qc_dtype dt, int nd, const int64_t *sh,
                   const void *data) {
    if (L->n == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 64;
        L->t = realloc(L->t, (size_t)L->cap * sizeof *L->t);
        QC_ASSERT(L->t);
    }
    qc_testmodel_tensor *t = &L->t[L->n++];
    memset(t, 0, sizeof *t);
    char *nm = tl_own(L, strlen(name) + 1);
    strcpy(nm, name);
    t->name = nm;
    t->dtype = dt;
    t->ndim = nd;
    for (int i = 0; i < nd; i++) t->shape[i] = sh[i];
    t->data = data;
}

static void tl_free(tlist *L) {
    for (int i = 0; i < L->n_owned; i++) free(L->owned[i]);
    free(L->owned);
    free(L->t);
}

/* Add a model tensor view, converting to dtype `dt` when it differs. */
static void tl_add_view(tlist *L, const char *name, const qc_tensor *v, qc_dtype dt) {
    const void *data = v->data;
    if (v->dtype != dt) {
        size_t n = qc_tensor_numel(v);
        uint8_t *b = tl_own(L, n * qc_dtype_size(dt));
        for (size_t i = 0; i < n; i++) {
            float f = qc_tensor_get(v, i);
            if (dt == QC_F32) memcpy(b + 4 * i, &f, 4);
            else {
                uint16_t h = dt == QC_BF16 ? qc_f32_to_bf16(f) : qc_f32_to_f16(f);
                memcpy(b + 2 * i, &h, 2);
            }
        }
        data = b;
    }
    tl_add(L, name, dt, v->ndim, v->shape, data);
}

static int cmp_tm_name(const void *a, const void *b) {
    return strcmp(((const qc_testmodel_tensor *)a)->name, ((const qc_testmodel_tensor *)b)->name);
}

/* Rows [r0, r0+nr) of a [rows, cols] tensor copied to dst row d0. */
static void copy_rows(uint8_t *dst, size_t d0, const qc_tensor *src, size_t r0, size_t nr) {
    size_t rb = (size_t)src->shape[1] * qc_dtype_size(src->dtype);
    memcpy(dst + d0 * rb, (const uint8_t *)src->data + r0 * rb, nr * rb);
}

static void build_list(const qc_testmodel_opts *o, const qc_model *m, tlist *L) {
    const qc_config *c = &m->cfg;
    const char *P = qc_testmodel_prefix(o);
    char nm[512];
    qc_dtype dt = o->dtype;
    snprintf(nm, sizeof nm, "%sembed_tokens.weight", P);
    tl_add_view(L, nm, &m->embed, dt);
    snprintf(nm, sizeof nm, "%snorm.weight", P);
    tl_add_view(L, nm, &m->final_norm, dt);
    if (!o->cfg.tie_word_embeddings || o->write_lm_head) tl_add_view(L, "lm_head.weight", &m->lm_head, dt);
    for (int li = 0; li < c->n_layers; li++) {
        const qc_layer_weights *w = &m->layers[li];
#define T(suffix, field, dtype_)                                        \
    do {                                                                \
        snprintf(nm, sizeof nm, "%slayers.%d.%s", P, li, suffix);       \
        tl_add_view(L, nm, &w->field, dtype_);                          \
    } while (0)
        T("input_layernorm.weight", input_norm, dt);
        T("post_attention_layernorm.weight", post_norm, dt);
        T("mlp.gate_proj.weight", mlp_gate, dt);
        T("mlp.up_proj.weight", mlp_up, dt);
        T("mlp.down_proj.weight", mlp_down, dt);
        if (c->layer_types[li] == QC_LAYER_FULL) {
            T("self_attn.q_proj.weight", q_proj, dt);
            T("self_attn.k_proj.weight", k_proj, dt);
            T("self_attn.v_proj.weight", v_proj, dt);
            T("self_attn.o_proj.weight", o_proj, dt);
            T("self_attn.q_norm.weight", q_norm, dt);
            T("self_attn.k_norm.weight", k_norm, dt);
            continue;
        }
        qc_dtype sp = o->f32_special ? QC_F32 : dt;
        if (o->legacy_packed) {
            /* grouped by key head g: [q_g, k_g, v_g (r*dv), z_g (r*dv)] and [b_g (r), a_g (r)] */
            size_t nk = (size_t)c->lin_n_k_heads, dk = (size_t)c->lin_k_dim,
                   dv = (size_t)c->lin_v_dim, r = (size_t)(c->lin_n_v_heads / c->lin_n_k_heads);
            size_t kd = nk * dk, H = (size_t)c->hidden_size, es = qc_dtype_size(dt);
            size_t rows = 2 * kd + 2 * nk * r * dv, grp = 2 * dk + 2 * r * dv;
            uint8_t *qkvz = tl_own(L, rows * H * es), *ba = tl_own(L, 2 * nk * r * H * es);
            for (size_t g = 0; g < nk; g++) {
                copy_rows(qkvz, g * grp, &w->in_proj_qkv, g * dk, dk);
                copy_rows(qkvz, g * grp + dk, &w->in_proj_qkv, kd + g * dk, dk);
                copy_rows(qkvz, g * grp + 2 * dk, &w->in_proj_qkv, 2 * kd + g * r * dv, r * dv);
                copy_rows(qkvz, g * grp + 2 * dk + r * dv, &w->in_proj_z, g * r * dv, r * dv);
                copy_rows(ba, g * 2 * r, &w->in_proj_b, g * r, r);
                copy_rows(ba, g * 2 * r + r, &w->in_proj_a, g * r, r);
            }
            int64_t s1[2] = {(int64_t)rows, (int64_t)H}, s2[2] = {(int64_t)(2 * nk * r), (int64_t)H};
            snprintf(nm, sizeof nm, "%slayers.%d.linear_attn.in_proj_qkvz.weight", P, li);
            tl_add(L, nm, dt, 2, s1, qkvz);
            snprintf(nm, sizeof nm, "%slayers.%d.linear_attn.in_proj_ba.weight", P, li);
            tl_add(L, nm, dt, 2, s2, ba);
        } else {
            T("linear_attn.in_proj_qkv.weight", in_proj_qkv, dt);
            T("linear_attn.in_proj_z.weight", in_proj_z, dt);
            T("linear_attn.in_proj_b.weight", in_proj_b, dt);
            T("linear_attn.in_proj_a.weight", in_proj_a, dt);
        }
        T("linear_attn.conv1d.weight", conv1d, dt);
        if (o->conv_2d) {
            qc_testmodel_tensor *t = &L->t[L->n - 1];
            t->ndim = 2;
            t->shape[1] = t->shape[2];
        }
        T("linear_attn.dt_bias", dt_bias, dt);
        T("linear_attn.A_log", A_log, sp);
        T("linear_attn.norm.weight", lin_norm, sp);
        T("linear_attn.out_proj.weight", out_proj, dt);
#undef T
    }
    /* skipped extras */
    static const char *vis[] = {"patch_embed.proj.weight", "blocks.0.attn.qkv.weight",
                                "blocks.0.mlp.linear_fc1.bias", "merger.norm.weight"};
    static const char *mtp[] = {"fc.weight", "norm.weight", "pre_fc_norm_hidden.weight",
                                "layers.0.self_attn.q_proj.weight"};
    for (int i = 0; i < o->n_visual + o->n_mtp; i++) {
        int isv = i < o->n_visual, k = isv ? i : i - o->n_visual;
        if (k < 4) snprintf(nm, sizeof nm, "%s%s", isv ? "model.visual." : "mtp.", isv ? vis[k] : mtp[k]);
        else snprintf(nm, sizeof nm, "%sextra%d.weight", isv ? "model.visual." : "mtp.", k);
        int64_t sh[3] = {3, 2, 2};
        float *d = tl_own(L, 12 * sizeof(float));
        for (int j = 0; j < 12; j++) d[j] = (float)(j + i);
        tl_add(L, nm, QC_F32, 3, sh, d);
    }
    /* faults */
    if (o->extra) {
        int64_t sh[1] = {4};
        float *d = tl_own(L, 4 * sizeof(float));
        tl_add(L, o->extra, QC_F32, 1, sh, d);
    }
    for (int i = 0; i < L->n; i++) {
        if (o->omit && !strcmp(L->t[i].name, o->omit)) {
            L->t[i] = L->t[--L->n];
            i--;
            continue;
        }
        if (o->bad_shape && !strcmp(L->t[i].name, o->bad_shape)) {
            qc_testmodel_tensor *t = &L->t[i];
            size_t old = tm_numel(t) * qc_dtype_size(t->dtype);
            t->shape[0] += 1;
            uint8_t *b = tl_own(L, tm_numel(t) * qc_dtype_size(t->dtype));
            memcpy(b, t->data, old);
            t->data = b;
        }
    }
    qsort(L->t, (size_t)L->n, sizeof *L->t, cmp_tm_name);
}

/* ==== config.json ==== */

static char *config_json(const qc_testmodel_opts *o, const qc_config *c) {
    cJSON *root = cJSON_CreateObject();
    cJSON *tc = root;
    if (o->nested) {
        cJSON *a = cJSON_AddArrayToObject(root, "architectures");
        cJSON_AddItemToArray(a, cJSON_CreateString("Qwen3_5ForConditionalGeneration"));
        cJSON_AddStringToObject(root, "model_type", "qwen3_5");
        tc = cJSON_AddObjectToObject(root, "text_config");
        cJSON_AddStringToObject(tc, "model_type", "qwen3_5_text");
        cJSON *vc = cJSON_AddObjectToObject(root, "vision_config");
        cJSON_AddNumberToObject(vc, "depth", 1);
        cJSON_AddNumberToObject(vc, "hidden_size", 16);
        cJSON_AddStringToObject(vc, "model_type", "qwen3_5");
        cJSON_AddNumberToObject(root, "image_token_id", c->vocab_size - 4);
    } else {
        cJSON *a = cJSON_AddArrayToObject(root, "architectures");
        cJSON_AddItemToArray(a, cJSON_CreateString("Qwen3_5ForCausalLM"));
        cJSON_AddStringToObject(root, "model_type", "qwen3_5_text");
    }
    cJSON_AddNumberToObject(tc, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(tc, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(tc, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(tc, "num_hidden_layers", c->n_layers);
    cJSON_AddNumberToObject(tc, "num_attention_heads", c->n_heads);
    cJSON_AddNumberToObject(tc, "num_key_value_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(tc, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(tc, "linear_num_key_heads", c->lin_n_k_heads);
    cJSON_AddNumberToObject(tc, "linear_num_value_heads", c->lin_n_v_heads);
    cJSON_AddNumberToObject(tc, "linear_key_head_dim", c->lin_k_dim);
    cJSON_AddNumberToObject(tc, "linear_value_head_dim", c->lin_v_dim);
    cJSON_AddNumberToObject(tc, "linear_conv_kernel_dim", c->conv_kernel);
    cJSON_AddNumberToObject(tc, "rms_norm_eps", c->rms_eps);
    cJSON_AddNumberToObject(tc, "max_position_embeddings", c->max_position_embeddings);
    cJSON_AddStringToObject(tc, "hidden_act", "silu");
    cJSON_AddFalseToObject(tc, "attention_bias");
    cJSON_AddTrueToObject(tc, "attn_output_gate");
    if (o->use_interval) {
        if (o->interval > 0) cJSON_AddNumberToObject(tc, "full_attention_interval", o->interval);
    } else {
        cJSON *lt = cJSON_AddArrayToObject(tc, "layer_types");
        for (int i = 0; i < c->n_layers; i++)
            cJSON_AddItemToArray(lt, cJSON_CreateString(c->layer_types[i] == QC_LAYER_FULL
                                                            ? "full_attention"
                                                            : "linear_attention"));
    }
    if (!o->omit_rope) {
        if (o->legacy_rope) {
            cJSON_AddNumberToObject(tc, "rope_theta", c->rope_theta);
            cJSON_AddNumberToObject(tc, "partial_rotary_factor", c->partial_rotary_factor);
        } else {
            cJSON *rp = cJSON_AddObjectToObject(tc, "rope_parameters");
            cJSON_AddStringToObject(rp, "rope_type", "default");
            cJSON_AddNumberToObject(rp, "rope_theta", c->rope_theta);
            cJSON_AddNumberToObject(rp, "partial_rotary_factor", c->partial_rotary_factor);
            cJSON_AddTrueToObject(rp, "mrope_interleaved");
        }
    }
    if (o->tie_where == QC_TM_TIE_TEXT)
        cJSON_AddBoolToObject(tc, "tie_word_embeddings", c->tie_word_embeddings);
    if (o->nested && o->tie_where != QC_TM_TIE_OMIT)
        cJSON_AddBoolToObject(root, "tie_word_embeddings", c->tie_word_embeddings);
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

/* ==== Checkpoint ==== */

qc_status qc_testmodel_write(const char *dir, const qc_testmodel_opts *o, qc_err *err) {
    qc_config c = effective_cfg(o);
    qc_model *m = NULL;
    qc_status st = qc_testmodel_reference(o, &m, err);
    if (st) return st;
    char path[2048];
    char *cj = config_json(o, &c);
    snprintf(path, sizeof path, "%s/config.json", dir);
    st = cj ? qc_testmodel_write_file(path, cj, strlen(cj), err)
            : qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    cJSON_free(cj);
    tlist L;
    memset(&L, 0, sizeof L);
    if (!st) build_list(o, m, &L);
    if (!st && o->n_shards <= 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        st = qc_testmodel_write_safetensors(path, L.t, L.n, err);
    } else if (!st) {
        int ns = o->n_shards;
        cJSON *root = cJSON_CreateObject();
        cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
        cJSON *wm = cJSON_AddObjectToObject(root, "weight_map");
        size_t total = 0;
        for (int s = 0; s < ns && !st; s++) {
            int a = (int)((long)L.n * s / ns), b = (int)((long)L.n * (s + 1) / ns);
            char fn[128];
            snprintf(fn, sizeof fn, "model-%05d-of-%05d.safetensors", s + 1, ns);
            for (int i = a; i < b; i++) {
                cJSON_AddStringToObject(wm, L.t[i].name, fn);
                total += tm_numel(&L.t[i]) * qc_dtype_size(L.t[i].dtype);
            }
            snprintf(path, sizeof path, "%s/%s", dir, fn);
            st = qc_testmodel_write_safetensors(path, L.t + a, b - a, err);
        }
        cJSON_AddNumberToObject(meta, "total_size", (double)total);
        char *ij = cJSON_Print(root);
        cJSON_Delete(root);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        if (!st) st = ij ? qc_testmodel_write_file(path, ij, strlen(ij), err)
                         : qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
        cJSON_free(ij);
    }
    tl_free(&L);
    qc_model_free(m);
    return st;
}

/* ==== Comparison and temp dirs ==== */

int qc_testmodel_tensor_equal(const qc_tensor *a, const qc_tensor *b, const char *what) {
    if (a->ndim != b->ndim) {
        fprintf(stderr, "%s: ndim %d != %d\n", what, a->ndim, b->ndim);
        return 0;
    }
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) {
            fprintf(stderr, "%s: shape[%d] %lld != %lld\n", what, i, (long long)a->shape[i],
                    (long long)b->shape[i]);
            return 0;
        }
    size_t n = qc_tensor_numel(a);
    for (size_t i = 0; i < n; i++) {
        float x = qc_tensor_get(a, i), y = qc_tensor_get(b, i);
        if (a->dtype == QC_BF16) y = qc_bf16_to_f32(qc_f32_to_bf16(y));
        if (a->dtype == QC_F16) y = qc_f16_to_f32(qc_f32_to_f16(y));
        if (memcmp(&x, &y, sizeof x) != 0) {
            fprintf(stderr, "%s: element %zu: %.9g != %.9g\n", what, i, x, y);
            return 0;
        }
    }
    return 1;
}

qc_status qc_testmodel_mkdtemp(char *out, size_t n, const char *tag, qc_err *err) {
    const char *t = getenv("TMPDIR");
    if (!t || !t[0]) t = "/tmp";
    snprintf(out, n, "%s/qc-%s-XXXXXX", t, tag ? tag : "tm");
    if (!mkdtemp(out)) return qc_errf(err, QC_ERR_IO, "%s: mkdtemp: %s", out, strerror(errno));
    return QC_OK;
}

void qc_testmodel_rmtree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (remove(p) != 0 && e->d_type == DT_DIR) qc_testmodel_rmtree(p); /* nested test dirs */
    }
    closedir(d);
    rmdir(dir);
}
