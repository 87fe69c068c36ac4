/* qc_llamacpp_gguf.c — GGUF metadata (dims, known-abort guard) and the cb_eval captures
 * (part of the llama.cpp plugin: see qc_llamacpp_internal.h) */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wformat-truncation" /* paths are bounded by PATH_MAX_ */
#include "qc_llamacpp_internal.h"

/* ===================================================================================== */
/* GGUF metadata: the dims as llama.cpp will see them, and the known-abort guard           */
/* ===================================================================================== */

static int gguf_u32(struct gguf_context *g, const char *key, uint32_t *out) {
    int64_t id = gguf_find_key(g, key);
    if (id < 0) return -1;
    enum gguf_type t = gguf_get_kv_type(g, id);
    if (t == GGUF_TYPE_UINT32) *out = gguf_get_val_u32(g, id);
    else if (t == GGUF_TYPE_INT32) *out = (uint32_t)gguf_get_val_i32(g, id);
    else return -1;
    return 0;
}

/* "<arch>.<suffix>" (qwen35 or qwen35moe: the same hybrid; the MoE one adds its expert keys) */
static const char *akey(const char *arch, const char *suffix) {
    static char k[128]; /* open runs on one thread; each key is used before the next is made */
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    return k;
}

int read_meta(qc_llama *h, const char *path) {
    struct gguf_init_params gp = {.no_alloc = true, .ctx = NULL};
    struct gguf_context *g = gguf_init_from_file(path, gp);
    if (!g) return set_err_log(NULL, QC_PLUGIN_ERROR, "cannot load: not a readable GGUF file");
    char arch[64] = "";
    int64_t id = gguf_find_key(g, "general.architecture");
    if (id >= 0 && gguf_get_kv_type(g, id) == GGUF_TYPE_STRING)
        snprintf(arch, sizeof arch, "%s", gguf_get_val_str(g, id));
    if (strcmp(arch, "qwen35") && strcmp(arch, "qwen35moe")) {
        gguf_free(g);
        return set_err(NULL, QC_PLUGIN_ERROR, "cannot load: %s: architecture '%s', not qwen35 or qwen35moe",
                       path, arch);
    }
    uint32_t nl = 0, kvh = 0, kl = 0, vl = 0, ck = 0, ss = 0, gc = 0, tsr = 0, inner = 0, fai = 4, ft = 0;
    /* one key at a time: akey's buffers are reused */
    int miss = 0;
    miss |= gguf_u32(g, akey(arch, "block_count"), &nl);
    miss |= gguf_u32(g, akey(arch, "attention.head_count_kv"), &kvh);
    miss |= gguf_u32(g, akey(arch, "attention.key_length"), &kl);
    miss |= gguf_u32(g, akey(arch, "attention.value_length"), &vl);
    miss |= gguf_u32(g, akey(arch, "ssm.conv_kernel"), &ck);
    miss |= gguf_u32(g, akey(arch, "ssm.state_size"), &ss);
    miss |= gguf_u32(g, akey(arch, "ssm.group_count"), &gc);
    miss |= gguf_u32(g, akey(arch, "ssm.time_step_rank"), &tsr);
    miss |= gguf_u32(g, akey(arch, "ssm.inner_size"), &inner);
    gguf_u32(g, akey(arch, "full_attention_interval"), &fai);
    gguf_u32(g, "general.file_type", &ft);
    uint32_t nextn = 0;
    gguf_u32(g, akey(arch, "nextn_predict_layers"), &nextn);
    if (miss || nl == 0 || nl > MAX_LAYERS || gc == 0 || tsr == 0 || ck < 2 || fai == 0) {
        gguf_free(g);
        return set_err(NULL, QC_PLUGIN_ERROR, "cannot load: %s: missing or invalid %s hyperparameters", path, arch);
    }
    int n_main = (int)nl - (int)nextn;
    if (n_main <= 0) n_main = (int)nl;
    h->L = n_main;
    h->n_nextn = (int)nl - n_main;
    h->n_head_kv = (int)kvh;
    h->head_dim = (int)kl;
    h->K = (int)ck;
    h->nk = (int)gc;
    h->nv = (int)tsr;
    h->dk = (int)ss;
    h->dv = (int)(inner / tsr);
    h->C = 2 * h->nk * h->dk + h->nv * h->dv;
    h->file_type = (int)ft;
    id = gguf_find_key(g, akey(arch, "attention.recurrent_layers"));
    if (id >= 0 && gguf_get_kv_type(g, id) == GGUF_TYPE_ARRAY && gguf_get_arr_type(g, id) == GGUF_TYPE_BOOL &&
        gguf_get_arr_n(g, id) >= (size_t)n_main) {
        const int8_t *b = gguf_get_arr_data(g, id);
        for (int i = 0; i < n_main; i++) h->is_recr[i] = b[i] != 0;
    } else {
        for (int i = 0; i < n_main; i++) h->is_recr[i] = ((i + 1) % (int)fai) != 0;
    }
    h->n_recr = h->n_full = 0;
    for (int i = 0; i < n_main; i++) {
        if (h->is_recr[i]) h->n_recr++;
        else h->n_full++;
    }

    /* The known abort (v0.5.0): ggml's CPU rope_multi asserts sum(sections) <= head dim
     * (GGML_ASSERT(sect_dims <= ne0), ops.cpp); the converter writes [11,11,10,0] when the
     * config has no mrope_section, so every model with a head dim < 32 aborts at its first
     * llama_decode. */
    int rc = QC_PLUGIN_OK;
    id = gguf_find_key(g, akey(arch, "rope.dimension_sections"));
    if (h->guard && h->n_full > 0 && id >= 0 && gguf_get_kv_type(g, id) == GGUF_TYPE_ARRAY &&
        gguf_get_arr_type(g, id) == GGUF_TYPE_INT32 && gguf_get_arr_n(g, id) >= 4) {
        const int32_t *s = gguf_get_arr_data(g, id);
        long sum = (long)s[0] + s[1] + s[2] + s[3];
        if (sum > (long)kl) {
            uint32_t nrot = 0;
            gguf_u32(g, akey(arch, "rope.dimension_count"), &nrot);
            rc = set_err(NULL, QC_PLUGIN_ERROR,
                         "cannot load: refused: llama.cpp " QC_LLAMACPP_TAG " would abort (SIGABRT) at the "
                         "first llama_decode: GGML_ASSERT(sect_dims <= ne0) in ggml_rope_multi; "
                         "%s.rope.dimension_sections = [%d,%d,%d,%d] (sum %ld) > head dim %u "
                         "(rotary dim %u; the converter writes [11,11,10,0] when config.json has no "
                         "mrope_section). guard=0 runs it anyway",
                         arch, s[0], s[1], s[2], s[3], sum, kl, nrot);
        }
    }
    gguf_free(g);
    (void)vl;
    return rc;
}


/* ===================================================================================== */
/* cb_eval: hidden states and conv windows                                               */
/* ===================================================================================== */

/* Copy a 2-D (ne0 x ne1, ne2 = ne3 = 1) F32 tensor into dst (row-major [ne1][ne0]). */
static int tensor_rows(const struct ggml_tensor *t, float *dst) {
    if (t->type != GGML_TYPE_F32 || t->ne[2] != 1 || t->ne[3] != 1) return -1;
    const int64_t ne0 = t->ne[0], ne1 = t->ne[1];
    if (ggml_is_contiguous(t)) {
        ggml_backend_tensor_get((struct ggml_tensor *)t, dst, 0, (size_t)(ne0 * ne1) * sizeof(float));
        return 0;
    }
    if (!t->buffer || !ggml_backend_buffer_is_host(t->buffer) || !t->data) return -1;
    for (int64_t i1 = 0; i1 < ne1; i1++)
        for (int64_t i0 = 0; i0 < ne0; i0++)
            dst[i1 * ne0 + i0] = *(const float *)((const char *)t->data + i1 * t->nb[1] + i0 * t->nb[0]);
    return 0;
}

/* hidden index of a tensor name, or -1; *conv_layer the layer of a conv_input-N tensor */
static int classify(const qc_llama *h, const char *name, int *conv_layer) {
    *conv_layer = -1;
    if (!strcmp(name, "model.input_embed")) return 0;
    if (!strcmp(name, "result_norm")) return h->L;
    int il;
    char tail;
    if (sscanf(name, "l_out-%d%c", &il, &tail) == 1 && il >= 0 && il < h->L - 1) return il + 1;
    if (sscanf(name, "conv_input-%d%c", &il, &tail) == 1 && il >= 0 && il < h->L) *conv_layer = il;
    return -1;
}

bool eval_cb(struct ggml_tensor *t, bool ask, void *ud) {
    qc_llama *h = ud;
    if (!h->capturing) return ask ? false : true;
    int cl;
    int idx = classify(h, t->name, &cl);
    if (ask) return idx >= 0 || cl >= 0;
    if (idx >= 0 && h->hidden) {
        if (t->ne[0] != h->H || t->ne[2] != 1 || t->ne[3] != 1) return true;
        int rows = (int)t->ne[1];
        if (h->hid_rows[idx] + rows > h->cap_tokens) return true; /* more than expected: ignore */
        float *dst = h->hidden + ((size_t)idx * h->cap_tokens + h->hid_rows[idx]) * h->H;
        if (tensor_rows(t, dst) == 0) h->hid_rows[idx] += rows;
    } else if (cl >= 0 && h->is_recr[cl]) {
        /* conv_input: [K-1+n, C, 1] (the K-1 cached columns, then the n new ones): keep the
         * last W = K + rs_seq columns of (the kept columns ++ the new ones), so that a trim by
         * j <= rs_seq finds the window of the position it goes back to */
        if (t->ne[1] != h->C || t->ne[0] < h->K || t->ne[2] != 1 || h->W > 128) return true;
        size_t need = (size_t)t->ne[0] * t->ne[1];
        if (need > h->conv_scratch_n) {
            float *p = realloc(h->conv_scratch, need * sizeof(float));
            if (!p) return true;
            h->conv_scratch = p;
            h->conv_scratch_n = need;
        }
        if (tensor_rows(t, h->conv_scratch) != 0) return true;
        const int T = (int)t->ne[0], W = h->W, n = T - (h->K - 1), keep = W - h->K + 1;
        float *w = conv_win_of(h, cl), old[128];
        /* X = kept[0 .. keep) ++ conv_input[0 .. T) (W + n columns); new[k] = X[n + k] */
        for (int c = 0; c < h->C; c++) {
            float *row = w + (size_t)c * W;
            memcpy(old, row, (size_t)W * sizeof(float));
            for (int k = 0; k < W; k++) {
                int i = n + k;
                row[k] = i < keep ? old[i] : h->conv_scratch[(size_t)c * T + (i - keep)];
            }
        }
        h->conv_win_ok[cl] = 1;
    }
    return true;
}

