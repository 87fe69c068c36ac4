/* tiny_model.h — write a tiny, valid Qwen3.5 Hugging Face checkpoint directory from C (header
 * only; used by the fuzz targets and tests/test_badinput.c, which mutate it into bad inputs).
 *
 * Model: 2 layers (linear_attention, full_attention), vocab 32, hidden 8, intermediate 16,
 * 2 query heads x 4 (1 KV head), partial_rotary_factor 0.5, DeltaNet 1 key head x 4 and
 * 2 value heads x 4, conv kernel 4, tied embeddings, nested `text_config`, F32 weights
 * (seeded values in [-0.1, 0.1); norms 0; A_log 0; the gated-norm weight 1).
 *
 *   tm_write_config(dir)               config.json
 *   tm_write_single(dir)               model.safetensors (every tensor)
 *   tm_write_sharded(dir)              model-0000{1,2}-of-00002.safetensors + index.json
 *   tm_safetensors_bytes(...)          an in-memory safetensors file for any tensor list
 */
#ifndef QC_TINY_MODEL_H
#define QC_TINY_MODEL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TM_V 32
#define TM_H 8
#define TM_I 16
#define TM_L 2
#define TM_NH 2
#define TM_NKV 1
#define TM_HD 4
#define TM_NK 1
#define TM_NV 2
#define TM_DK 4
#define TM_DV 4
#define TM_K 4
#define TM_C (2 * TM_NK * TM_DK + TM_NV * TM_DV) /* conv dim 16 */
#define TM_PREFIX "model.language_model."

static const char TM_CONFIG[] =
    "{\n"
    "  \"architectures\": [\"Qwen3_5ForConditionalGeneration\"],\n"
    "  \"model_type\": \"qwen3_5\",\n"
    "  \"text_config\": {\n"
    "    \"vocab_size\": 32,\n"
    "    \"hidden_size\": 8,\n"
    "    \"intermediate_size\": 16,\n"
    "    \"num_hidden_layers\": 2,\n"
    "    \"num_attention_heads\": 2,\n"
    "    \"num_key_value_heads\": 1,\n"
    "    \"head_dim\": 4,\n"
    "    \"linear_num_key_heads\": 1,\n"
    "    \"linear_num_value_heads\": 2,\n"
    "    \"linear_key_head_dim\": 4,\n"
    "    \"linear_value_head_dim\": 4,\n"
    "    \"linear_conv_kernel_dim\": 4,\n"
    "    \"rms_norm_eps\": 1e-06,\n"
    "    \"hidden_act\": \"silu\",\n"
    "    \"layer_types\": [\"linear_attention\", \"full_attention\"],\n"
    "    \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0,\n"
    "                        \"partial_rotary_factor\": 0.5},\n"
    "    \"tie_word_embeddings\": true\n"
    "  },\n"
    "  \"tie_word_embeddings\": true\n"
    "}\n";

typedef struct {
    char name[96];  /* full tensor name */
    char dtype[8];  /* "F32" unless changed */
    int ndim;       /* 1..3 */
    int64_t shape[3];
} tm_tensor;

/* The tensor list of the tiny model (sorted as written: embed, layers, norm). Returns count. */
static inline int tm_tensors(tm_tensor *t /* [64] */) {
    int n = 0;
#define TM_ADD(nm, nd, a, b, c)                                                   \
    do {                                                                          \
        snprintf(t[n].name, sizeof t[n].name, "%s", nm);                          \
        snprintf(t[n].dtype, sizeof t[n].dtype, "F32");                           \
        t[n].ndim = nd, t[n].shape[0] = a, t[n].shape[1] = b, t[n].shape[2] = c;  \
        n++;                                                                      \
    } while (0)
    char nm[96];
    TM_ADD(TM_PREFIX "embed_tokens.weight", 2, TM_V, TM_H, 0);
    for (int l = 0; l < TM_L; l++) {
#define TM_L_ADD(suf, nd, a, b, c)                                                \
    do {                                                                          \
        snprintf(nm, sizeof nm, TM_PREFIX "layers.%d.%s", l, suf);                \
        TM_ADD(nm, nd, a, b, c);                                                  \
    } while (0)
        TM_L_ADD("input_layernorm.weight", 1, TM_H, 0, 0);
        TM_L_ADD("post_attention_layernorm.weight", 1, TM_H, 0, 0);
        TM_L_ADD("mlp.gate_proj.weight", 2, TM_I, TM_H, 0);
        TM_L_ADD("mlp.up_proj.weight", 2, TM_I, TM_H, 0);
        TM_L_ADD("mlp.down_proj.weight", 2, TM_H, TM_I, 0);
        if (l == 1) {
            TM_L_ADD("self_attn.q_proj.weight", 2, 2 * TM_NH * TM_HD, TM_H, 0);
            TM_L_ADD("self_attn.k_proj.weight", 2, TM_NKV * TM_HD, TM_H, 0);
            TM_L_ADD("self_attn.v_proj.weight", 2, TM_NKV * TM_HD, TM_H, 0);
            TM_L_ADD("self_attn.o_proj.weight", 2, TM_H, TM_NH * TM_HD, 0);
            TM_L_ADD("self_attn.q_norm.weight", 1, TM_HD, 0, 0);
            TM_L_ADD("self_attn.k_norm.weight", 1, TM_HD, 0, 0);
        } else {
            TM_L_ADD("linear_attn.in_proj_qkv.weight", 2, TM_C, TM_H, 0);
            TM_L_ADD("linear_attn.in_proj_z.weight", 2, TM_NV * TM_DV, TM_H, 0);
            TM_L_ADD("linear_attn.in_proj_b.weight", 2, TM_NV, TM_H, 0);
            TM_L_ADD("linear_attn.in_proj_a.weight", 2, TM_NV, TM_H, 0);
            TM_L_ADD("linear_attn.conv1d.weight", 3, TM_C, 1, TM_K);
            TM_L_ADD("linear_attn.dt_bias", 1, TM_NV, 0, 0);
            TM_L_ADD("linear_attn.A_log", 1, TM_NV, 0, 0);
            TM_L_ADD("linear_attn.norm.weight", 1, TM_DV, 0, 0);
            TM_L_ADD("linear_attn.out_proj.weight", 2, TM_H, TM_NV * TM_DV, 0);
        }
#undef TM_L_ADD
    }
    TM_ADD(TM_PREFIX "norm.weight", 1, TM_H, 0, 0);
#undef TM_ADD
    return n;
}

static inline size_t tm_itemsize(const char *dtype) {
    if (!strcmp(dtype, "F32") || !strcmp(dtype, "I32") || !strcmp(dtype, "U32")) return 4;
    if (!strcmp(dtype, "F64") || !strcmp(dtype, "I64") || !strcmp(dtype, "U64")) return 8;
    if (!strcmp(dtype, "BF16") || !strcmp(dtype, "F16") || !strcmp(dtype, "I16")) return 2;
    return 1;
}

static inline uint64_t tm_numel(const tm_tensor *t) {
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
    return n;
}

/* Deterministic weight values: seeded LCG in [-0.1, 0.1); norms 0, A_log 0, gated norm 1. */
static inline float tm_value(const char *name, uint64_t i, uint64_t *seed) {
    if (strstr(name, "layernorm.weight")) return 0.0f;
    if (strstr(name, "linear_attn.norm.weight")) return 1.0f;
    if (strstr(name, "A_log")) return 0.0f;
    if (strstr(name, "q_norm") || strstr(name, "k_norm") ||
        !strcmp(name, TM_PREFIX "norm.weight"))
        return 0.0f;
    (void)i;
    *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*seed >> 40) / (double)(1ull << 24) * 0.2 - 0.1);
}

/* Build a safetensors file for t[n] (values by tm_value for F32, zero bytes otherwise).
 * The spans tile the data region in list order. *len receives the size; caller frees. */
static inline uint8_t *tm_safetensors_bytes(const tm_tensor *t, int n, size_t *len) {
    size_t cap = 256 + (size_t)n * 256, hl = 0;
    char *hdr = (char *)malloc(cap);
    if (!hdr) abort();
    hl += (size_t)snprintf(hdr + hl, cap - hl, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int k = 0; k < n; k++) {
        uint64_t nb = tm_numel(&t[k]) * tm_itemsize(t[k].dtype);
        hl += (size_t)snprintf(hdr + hl, cap - hl, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[k].name,
                               t[k].dtype);
        for (int d = 0; d < t[k].ndim; d++)
            hl += (size_t)snprintf(hdr + hl, cap - hl, "%s%lld", d ? "," : "",
                                   (long long)t[k].shape[d]);
        hl += (size_t)snprintf(hdr + hl, cap - hl, "],\"data_offsets\":[%llu,%llu]}",
                               (unsigned long long)off, (unsigned long long)(off + nb));
        off += nb;
    }
    hl += (size_t)snprintf(hdr + hl, cap - hl, "}");
    while (hl % 8) hdr[hl++] = ' '; /* pad as the reference writer does */
    *len = 8 + hl + (size_t)off;
    uint8_t *b = (uint8_t *)calloc(1, *len);
    if (!b) abort();
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, hdr, hl);
    free(hdr);
    uint8_t *p = b + 8 + hl;
    uint64_t seed = 42;
    for (int k = 0; k < n; k++) {
        uint64_t ne = tm_numel(&t[k]);
        size_t is = tm_itemsize(t[k].dtype);
        if (!strcmp(t[k].dtype, "F32"))
            for (uint64_t i = 0; i < ne; i++) {
                float v = tm_value(t[k].name, i, &seed);
                memcpy(p + i * 4, &v, 4);
            }
        p += ne * is;
    }
    return b;
}

static inline int tm_write_file(const char *dir, const char *name, const void *data, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static inline int tm_write_config(const char *dir) {
    return tm_write_file(dir, "config.json", TM_CONFIG, strlen(TM_CONFIG));
}

/* config.json + model.safetensors holding t[n] (or the tiny model's list when t == NULL). */
static inline int tm_write_single_list(const char *dir, const tm_tensor *t, int n) {
    tm_tensor def[64];
    if (!t) n = tm_tensors(def), t = def;
    size_t len;
    uint8_t *b = tm_safetensors_bytes(t, n, &len);
    int rc = tm_write_config(dir) | tm_write_file(dir, "model.safetensors", b, len);
    free(b);
    return rc;
}

static inline int tm_write_single(const char *dir) { return tm_write_single_list(dir, NULL, 0); }

#define TM_SHARD1 "model-00001-of-00002.safetensors"
#define TM_SHARD2 "model-00002-of-00002.safetensors"

/* The index JSON of the sharded tiny model (tensor k goes to shard 1 + k % 2). Caller frees. */
static inline char *tm_index_json(void) {
    tm_tensor t[64];
    int n = tm_tensors(t);
    size_t cap = 512 + (size_t)n * 160, l = 0;
    char *s = (char *)malloc(cap);
    if (!s) abort();
    l += (size_t)snprintf(s + l, cap - l, "{\n  \"metadata\": {\"total_size\": 0},\n  \"weight_map\": {");
    for (int k = 0; k < n; k++)
        l += (size_t)snprintf(s + l, cap - l, "%s\n    \"%s\": \"%s\"", k ? "," : "", t[k].name,
                              k % 2 ? TM_SHARD2 : TM_SHARD1);
    snprintf(s + l, cap - l, "\n  }\n}\n");
    return s;
}

/* config.json + two shards + model.safetensors.index.json (when with_index). */
static inline int tm_write_sharded(const char *dir, int with_index) {
    tm_tensor t[64], a[64], b[64];
    int n = tm_tensors(t), na = 0, nb = 0;
    for (int k = 0; k < n; k++) {
        if (k % 2) b[nb++] = t[k];
        else a[na++] = t[k];
    }
    size_t la, lb;
    uint8_t *ba = tm_safetensors_bytes(a, na, &la), *bb = tm_safetensors_bytes(b, nb, &lb);
    int rc = tm_write_config(dir) | tm_write_file(dir, TM_SHARD1, ba, la) |
             tm_write_file(dir, TM_SHARD2, bb, lb);
    free(ba);
    free(bb);
    if (with_index) {
        char *ix = tm_index_json();
        rc |= tm_write_file(dir, "model.safetensors.index.json", ix, strlen(ix));
        free(ix);
    }
    return rc;
}

#endif /* QC_TINY_MODEL_H */
