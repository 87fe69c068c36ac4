/* qc_state.c — the canonical mutable state: k/v caches, conv states, recurrent states.
 *
 * Every buffer is calloc'd at creation (deterministic zeros, never "initialised later") and
 * reset by assignment. The layout is the one the goldens use (include/qc/qc_state.h). */
#include "qc/qc_state.h"

#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* sizes                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static size_t kv_floats(const qc_state *s) {
    return (size_t)s->n_kv_heads * (size_t)s->max_context_len * (size_t)s->head_dim;
}
static size_t conv_floats(const qc_state *s) { return (size_t)s->conv_dim * s->conv_kernel; }
static size_t rec_floats(const qc_state *s) {
    return (size_t)s->n_v_heads * s->k_dim * s->v_dim;
}

size_t qc_state_bytes(const qc_config *cfg, int max_context_len) {
    size_t kv = (size_t)cfg->n_kv_heads * (size_t)max_context_len * cfg->head_dim;
    size_t conv = (size_t)qc_cfg_conv_dim(cfg) * cfg->conv_kernel;
    size_t rec = (size_t)cfg->lin_n_v_heads * cfg->lin_k_dim * cfg->lin_v_dim;
    size_t total = 0;
    for (int l = 0; l < cfg->n_layers; l++)
        total += cfg->layer_types[l] == QC_LAYER_FULL ? 2 * kv : conv + rec;
    return total * sizeof(float) + 4 * (size_t)cfg->n_layers * sizeof(float *);
}

/* ------------------------------------------------------------------------------------------ */
/* lifecycle                                                                                  */
/* ------------------------------------------------------------------------------------------ */

qc_status qc_state_create(const qc_config *cfg, int max_context_len, qc_state **out,
                          qc_err *err) {
    *out = NULL;
    if (max_context_len < 1)
        return qc_errf(err, QC_ERR_RANGE, "state: max_context_len %d < 1", max_context_len);
    qc_state *s = calloc(1, sizeof *s);
    if (!s) return qc_errf(err, QC_ERR_OOM, "state: out of memory");
    s->n_layers = cfg->n_layers;
    s->max_context_len = max_context_len;
    s->n_kv_heads = cfg->n_kv_heads;
    s->head_dim = cfg->head_dim;
    s->conv_dim = qc_cfg_conv_dim(cfg);
    s->conv_kernel = cfg->conv_kernel;
    s->n_v_heads = cfg->lin_n_v_heads;
    s->k_dim = cfg->lin_k_dim;
    s->v_dim = cfg->lin_v_dim;
    int L = cfg->n_layers;
    s->k_cache = calloc((size_t)L, sizeof(float *));
    s->v_cache = calloc((size_t)L, sizeof(float *));
    s->conv_state = calloc((size_t)L, sizeof(float *));
    s->recurrent_state = calloc((size_t)L, sizeof(float *));
    int ok = s->k_cache && s->v_cache && s->conv_state && s->recurrent_state;
    for (int l = 0; ok && l < L; l++) {
        if (cfg->layer_types[l] == QC_LAYER_FULL) {
            s->k_cache[l] = calloc(kv_floats(s), sizeof(float));
            s->v_cache[l] = calloc(kv_floats(s), sizeof(float));
            ok = s->k_cache[l] && s->v_cache[l];
        } else {
            s->conv_state[l] = calloc(conv_floats(s), sizeof(float));
            s->recurrent_state[l] = calloc(rec_floats(s), sizeof(float));
            ok = s->conv_state[l] && s->recurrent_state[l];
        }
    }
    if (!ok) {
        qc_state_destroy(s);
        return qc_errf(err, QC_ERR_OOM, "state: out of memory allocating %zu bytes",
                       qc_state_bytes(cfg, max_context_len));
    }
    *out = s;
    return QC_OK;
}

void qc_state_destroy(qc_state *s) {
    if (!s) return;
    for (int l = 0; l < s->n_layers; l++) {
        if (s->k_cache) free(s->k_cache[l]);
        if (s->v_cache) free(s->v_cache[l]);
        if (s->conv_state) free(s->conv_state[l]);
        if (s->recurrent_state) free(s->recurrent_state[l]);
    }
    free(s->k_cache);
    free(s->v_cache);
    free(s->conv_state);
    free(s->recurrent_state);
    free(s);
}

/* ------------------------------------------------------------------------------------------ */
/* reset / fill / copy                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Assign v to n floats (an assignment, so NaN garbage is really gone). */
static void assign(float *p, size_t n, float v) {
    if (!p) return;
    for (size_t i = 0; i < n; i++) p[i] = v;
}

void qc_state_fill(qc_state *s, float v) {
    for (int l = 0; l < s->n_layers; l++) {
        assign(s->k_cache[l], kv_floats(s), v);
        assign(s->v_cache[l], kv_floats(s), v);
        assign(s->conv_state[l], conv_floats(s), v);
        assign(s->recurrent_state[l], rec_floats(s), v);
    }
}

void qc_state_reset(qc_state *s) {
    qc_state_fill(s, 0.0f);
    s->pos = 0;
}

static void zero_buf(float *b, size_t n) {
    for (size_t i = 0; b && i < n; i++) b[i] = 0.0f; /* exact zeros: never a multiply */
}

void qc_state_reset_layer(qc_state *s, int l) {
    QC_ASSERT(l >= 0 && l < s->n_layers);
    zero_buf(s->k_cache[l], kv_floats(s));
    zero_buf(s->v_cache[l], kv_floats(s));
    zero_buf(s->conv_state[l], conv_floats(s));
    zero_buf(s->recurrent_state[l], rec_floats(s));
}

static void copy_buf(float *dst, const float *src, size_t n) {
    QC_ASSERT((dst == NULL) == (src == NULL));
    if (dst) memcpy(dst, src, n * sizeof(float));
}

/* positions 0..n_pos-1 of every kv head of one layer's cache */
static void copy_cache(float *dst, int dst_cap, const float *src, int src_cap, int nkv, int hd,
                       int n_pos) {
    QC_ASSERT((dst == NULL) == (src == NULL));
    for (int h = 0; dst && h < nkv; h++)
        memcpy(dst + (size_t)h * dst_cap * hd, src + (size_t)h * src_cap * hd,
               (size_t)n_pos * hd * sizeof(float));
}

void qc_state_copy_layer(qc_state *dst, const qc_state *src, int l, int n_pos) {
    QC_ASSERT(l >= 0 && l < src->n_layers && dst->n_layers == src->n_layers &&
              n_pos >= 0 && n_pos <= dst->max_context_len && n_pos <= src->max_context_len &&
              dst->n_kv_heads == src->n_kv_heads && dst->head_dim == src->head_dim &&
              dst->conv_dim == src->conv_dim && dst->conv_kernel == src->conv_kernel &&
              dst->n_v_heads == src->n_v_heads && dst->k_dim == src->k_dim &&
              dst->v_dim == src->v_dim);
    copy_cache(dst->k_cache[l], dst->max_context_len, src->k_cache[l], src->max_context_len,
               src->n_kv_heads, src->head_dim, n_pos);
    copy_cache(dst->v_cache[l], dst->max_context_len, src->v_cache[l], src->max_context_len,
               src->n_kv_heads, src->head_dim, n_pos);
    copy_buf(dst->conv_state[l], src->conv_state[l], conv_floats(src));
    copy_buf(dst->recurrent_state[l], src->recurrent_state[l], rec_floats(src));
}

void qc_state_copy(qc_state *dst, const qc_state *src) {
    QC_ASSERT(dst->n_layers == src->n_layers && dst->max_context_len == src->max_context_len &&
              dst->n_kv_heads == src->n_kv_heads && dst->head_dim == src->head_dim &&
              dst->conv_dim == src->conv_dim && dst->conv_kernel == src->conv_kernel &&
              dst->n_v_heads == src->n_v_heads && dst->k_dim == src->k_dim &&
              dst->v_dim == src->v_dim);
    for (int l = 0; l < src->n_layers; l++) {
        copy_buf(dst->k_cache[l], src->k_cache[l], kv_floats(src));
        copy_buf(dst->v_cache[l], src->v_cache[l], kv_floats(src));
        copy_buf(dst->conv_state[l], src->conv_state[l], conv_floats(src));
        copy_buf(dst->recurrent_state[l], src->recurrent_state[l], rec_floats(src));
    }
    dst->pos = src->pos;
}

/* ------------------------------------------------------------------------------------------ */
/* snapshots                                                                                  */
/* ------------------------------------------------------------------------------------------ */

qc_status qc_state_clone(const qc_state *src, qc_state **out, qc_err *err) {
    *out = NULL;
    qc_state *s = calloc(1, sizeof *s);
    if (!s) return qc_errf(err, QC_ERR_OOM, "state clone: out of memory");
    *s = *src; /* the geometry; the buffers are replaced below */
    int L = src->n_layers;
    s->k_cache = calloc((size_t)L, sizeof(float *));
    s->v_cache = calloc((size_t)L, sizeof(float *));
    s->conv_state = calloc((size_t)L, sizeof(float *));
    s->recurrent_state = calloc((size_t)L, sizeof(float *));
    int ok = s->k_cache && s->v_cache && s->conv_state && s->recurrent_state;
    for (int l = 0; ok && l < L; l++) {
        if (src->k_cache[l]) ok &= (s->k_cache[l] = malloc(kv_floats(s) * sizeof(float))) != NULL;
        if (src->v_cache[l]) ok &= (s->v_cache[l] = malloc(kv_floats(s) * sizeof(float))) != NULL;
        if (src->conv_state[l])
            ok &= (s->conv_state[l] = malloc(conv_floats(s) * sizeof(float))) != NULL;
        if (src->recurrent_state[l])
            ok &= (s->recurrent_state[l] = malloc(rec_floats(s) * sizeof(float))) != NULL;
    }
    if (!ok) {
        qc_state_destroy(s);
        return qc_errf(err, QC_ERR_OOM, "state clone: out of memory");
    }
    qc_state_copy(s, src);
    *out = s;
    return QC_OK;
}

static int same_buf(const float *a, const float *b, size_t n) {
    if ((a == NULL) != (b == NULL)) return 0;
    return !a || memcmp(a, b, n * sizeof(float)) == 0;
}

int qc_state_equal(const qc_state *a, const qc_state *b) {
    if (a->n_layers != b->n_layers || a->max_context_len != b->max_context_len ||
        a->n_kv_heads != b->n_kv_heads || a->head_dim != b->head_dim ||
        a->conv_dim != b->conv_dim || a->conv_kernel != b->conv_kernel ||
        a->n_v_heads != b->n_v_heads || a->k_dim != b->k_dim || a->v_dim != b->v_dim ||
        a->pos != b->pos)
        return 0;
    for (int l = 0; l < a->n_layers; l++)
        if (!same_buf(a->k_cache[l], b->k_cache[l], kv_floats(a)) ||
            !same_buf(a->v_cache[l], b->v_cache[l], kv_floats(a)) ||
            !same_buf(a->conv_state[l], b->conv_state[l], conv_floats(a)) ||
            !same_buf(a->recurrent_state[l], b->recurrent_state[l], rec_floats(a)))
            return 0;
    return 1;
}
