/* qc_ref_backend.c — the reference backend: the Qwen3.5 text forward pass, read top to bottom.
 *
 *   h = embed[tokens]                                          trace 0
 *   for each layer i:
 *       h = h + Mixer_i(RMSNorm_1p(h; input_norm))             DeltaNet or gated attention
 *       h = h + MLP_i(RMSNorm_1p(h; post_norm))                trace i+1 (i < L-1)
 *   h = RMSNorm_1p(h; final_norm)                              trace L
 *   logits = h @ lm_head^T
 *
 * Weight matrices are read in their stored dtype one row at a time (qc_ref_matmul); small
 * vectors are widened to owned fp32 copies here at create. All scratch is allocated once at
 * create for opts.max_tokens tokens; forward never allocates. See qc_backend.h for the contract.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_reference.h"
#include "qc_ref_blocks.h"
#include "qc_ref_deltanet.h"

/* ===================================================================================== */
/* Private types                                                                          */
/* ===================================================================================== */

typedef struct {
    qc_layer_kind kind;
    float *input_norm;      /* [H] owned fp32, zero-centred */
    float *post_norm;       /* [H] owned fp32, zero-centred */
    /* full attention */
    float *q_norm, *k_norm; /* [hd] each */
    qc_ref_attn_layer attn; /* views of the above + the model's matrices */
    /* linear attention */
    float *conv_w;          /* [C, K] */
    float *A_log, *dt_bias; /* [nv] each */
    float *lin_norm;        /* [dv] */
    qc_ref_dn_layer dn;     /* views of the above + the model's matrices */
} ref_layer;

typedef struct {
    const qc_config *cfg;   /* the model's config (borrowed) */
    ref_layer *layers;      /* [L] */
    float *final_norm;      /* [H] */
    float *inv_freq;        /* [rotary_dim/2] */
    float *owned;           /* arena of every owned fp32 small weight */
    int max_tokens;         /* NT: opts.max_tokens at create (the scratch capacity) */
    /* scratch, sized for max_tokens (NT) tokens */
    float *scratch;         /* arena of everything below */
    float *h;               /* [NT, H] residual stream */
    float *u;               /* [NT, H] normed input of a block */
    float *y;               /* [NT, H] block output */
    float *mlp_gate;        /* [NT, I] */
    float *mlp_up;          /* [NT, I] */
    float *row;             /* [max(H, I, nh*hd, nv*dv)] one widened weight row */
    qc_ref_attn_scratch attn;
    qc_ref_dn_layer_scratch dn;
} ref_impl;

/* ===================================================================================== */
/* Create: validation of the model's tensors                                              */
/* ===================================================================================== */

/* t must be present with the given shape (d1/d2 < 0: that dimension is absent). */
static qc_status check_tensor(const qc_tensor *t, const char *name, int layer, int64_t d0,
                              int64_t d1, int64_t d2, qc_err *err) {
    char where[96];
    if (layer >= 0)
        snprintf(where, sizeof where, "layers.%d.%s", layer, name);
    else
        snprintf(where, sizeof where, "%s", name);
    const int ndim = d2 >= 0 ? 3 : (d1 >= 0 ? 2 : 1);
    if (t->ndim == 0 || t->data == NULL)
        return qc_errf(err, QC_ERR_MISSING, "reference backend: %s: tensor missing", where);
    if (t->dtype != QC_F32 && t->dtype != QC_BF16 && t->dtype != QC_F16)
        return qc_errf(err, QC_ERR_UNSUPPORTED, "reference backend: %s: unsupported dtype %d",
                       where, (int)t->dtype);
    const int64_t want[3] = {d0, d1, d2};
    int ok = (t->ndim == ndim);
    for (int i = 0; ok && i < ndim; i++) ok = (t->shape[i] == want[i]);
    if (!ok)
        return qc_errf(err, QC_ERR_SHAPE,
                       "reference backend: %s: shape (ndim %d) [%lld,%lld,%lld] != [%lld,%lld,%lld]",
                       where, t->ndim, (long long)t->shape[0],
                       (long long)(t->ndim > 1 ? t->shape[1] : -1),
                       (long long)(t->ndim > 2 ? t->shape[2] : -1), (long long)d0, (long long)d1,
                       (long long)d2);
    return QC_OK;
}

static qc_status check_model(const qc_model *m, qc_err *err) {
    const qc_config *c = &m->cfg;
    const int H = c->hidden_size, I = c->intermediate_size, V = c->vocab_size;
    if (c->n_layers < 1 || c->n_layers > QC_MAX_LAYERS || H < 1 || I < 1 || V < 1)
        return qc_errf(err, QC_ERR_ARG, "reference backend: config: bad sizes (L %d, H %d, I %d, V %d)",
                       c->n_layers, H, I, V);
    qc_status s;
    if ((s = check_tensor(&m->embed, "embed_tokens.weight", -1, V, H, -1, err))) return s;
    if ((s = check_tensor(&m->final_norm, "norm.weight", -1, H, -1, -1, err))) return s;
    if ((s = check_tensor(&m->lm_head, "lm_head.weight", -1, V, H, -1, err))) return s;
    int any_full = 0, any_linear = 0;
    for (int i = 0; i < c->n_layers; i++) {
        const qc_layer_weights *w = &m->layers[i];
        if ((s = check_tensor(&w->input_norm, "input_layernorm.weight", i, H, -1, -1, err))) return s;
        if ((s = check_tensor(&w->post_norm, "post_attention_layernorm.weight", i, H, -1, -1, err))) return s;
        if ((s = check_tensor(&w->mlp_gate, "mlp.gate_proj.weight", i, I, H, -1, err))) return s;
        if ((s = check_tensor(&w->mlp_up, "mlp.up_proj.weight", i, I, H, -1, err))) return s;
        if ((s = check_tensor(&w->mlp_down, "mlp.down_proj.weight", i, H, I, -1, err))) return s;
        if (c->layer_types[i] == QC_LAYER_FULL) {
            const int nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim;
            any_full = 1;
            if ((s = check_tensor(&w->q_proj, "self_attn.q_proj.weight", i, 2 * nh * hd, H, -1, err))) return s;
            if ((s = check_tensor(&w->k_proj, "self_attn.k_proj.weight", i, nkv * hd, H, -1, err))) return s;
            if ((s = check_tensor(&w->v_proj, "self_attn.v_proj.weight", i, nkv * hd, H, -1, err))) return s;
            if ((s = check_tensor(&w->o_proj, "self_attn.o_proj.weight", i, H, nh * hd, -1, err))) return s;
            if ((s = check_tensor(&w->q_norm, "self_attn.q_norm.weight", i, hd, -1, -1, err))) return s;
            if ((s = check_tensor(&w->k_norm, "self_attn.k_norm.weight", i, hd, -1, -1, err))) return s;
        } else {
            const int nv = c->lin_n_v_heads, dv = c->lin_v_dim, C = qc_cfg_conv_dim(c);
            any_linear = 1;
            if ((s = check_tensor(&w->in_proj_qkv, "linear_attn.in_proj_qkv.weight", i, C, H, -1, err))) return s;
            if ((s = check_tensor(&w->in_proj_z, "linear_attn.in_proj_z.weight", i, nv * dv, H, -1, err))) return s;
            if ((s = check_tensor(&w->in_proj_b, "linear_attn.in_proj_b.weight", i, nv, H, -1, err))) return s;
            if ((s = check_tensor(&w->in_proj_a, "linear_attn.in_proj_a.weight", i, nv, H, -1, err))) return s;
            if ((s = check_tensor(&w->conv1d, "linear_attn.conv1d.weight", i, C, 1, c->conv_kernel, err))) return s;
            if ((s = check_tensor(&w->dt_bias, "linear_attn.dt_bias", i, nv, -1, -1, err))) return s;
            if ((s = check_tensor(&w->A_log, "linear_attn.A_log", i, nv, -1, -1, err))) return s;
            if ((s = check_tensor(&w->lin_norm, "linear_attn.norm.weight", i, dv, -1, -1, err))) return s;
            if ((s = check_tensor(&w->out_proj, "linear_attn.out_proj.weight", i, H, nv * dv, -1, err))) return s;
        }
    }
    if (any_full && (c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads != 0 ||
                     c->head_dim < 1 || c->rotary_dim < 0 || c->rotary_dim % 2 != 0 ||
                     c->rotary_dim > c->head_dim))
        return qc_errf(err, QC_ERR_ARG,
                       "reference backend: config: bad attention geometry (heads %d, kv heads %d, "
                       "head_dim %d, rotary_dim %d)",
                       c->n_heads, c->n_kv_heads, c->head_dim, c->rotary_dim);
    if (any_linear && (c->lin_n_k_heads < 1 || c->lin_n_v_heads < 1 ||
                       c->lin_n_v_heads % c->lin_n_k_heads != 0 || c->lin_k_dim < 1 ||
                       c->lin_v_dim < 1 || c->conv_kernel < 1))
        return qc_errf(err, QC_ERR_ARG,
                       "reference backend: config: bad DeltaNet geometry (k heads %d, v heads %d, "
                       "dk %d, dv %d, conv kernel %d)",
                       c->lin_n_k_heads, c->lin_n_v_heads, c->lin_k_dim, c->lin_v_dim, c->conv_kernel);
    return QC_OK;
}

/* ===================================================================================== */
/* Forward                                                                                */
/* ===================================================================================== */

static qc_status ref_check_state(const qc_config *c, const qc_state *st, qc_err *err) {
    int ok = st->n_layers == c->n_layers && st->conv_kernel == c->conv_kernel &&
             st->conv_dim == qc_cfg_conv_dim(c) && st->n_v_heads == c->lin_n_v_heads &&
             st->k_dim == c->lin_k_dim && st->v_dim == c->lin_v_dim &&
             st->n_kv_heads == c->n_kv_heads && st->head_dim == c->head_dim;
    for (int i = 0; ok && i < c->n_layers; i++) {
        if (c->layer_types[i] == QC_LAYER_FULL)
            ok = st->k_cache[i] != NULL && st->v_cache[i] != NULL;
        else
            ok = st->conv_state[i] != NULL && st->recurrent_state[i] != NULL;
    }
    if (!ok)
        return qc_errf(err, QC_ERR_ARG, "reference forward: state geometry does not match the model");
    return QC_OK;
}

static void trace(const qc_backend *be, int index, int start_pos, int n, int dim, const float *d) {
    if (be->opts.trace) be->opts.trace(be->opts.trace_user, index, "hidden", start_pos, n, dim, d);
}

static qc_status ref_forward(qc_backend *be, const int32_t *tokens, int n, int start_pos,
                             qc_state *st, float *logits, int all_logits, qc_err *err) {
    ref_impl *R = (ref_impl *)be->impl;
    const qc_config *c = R->cfg;
    const int H = c->hidden_size, I = c->intermediate_size, V = c->vocab_size, L = c->n_layers;

    /* ---- validation: nothing is touched before all of it passes ---- */
    if (tokens == NULL || st == NULL)
        return qc_errf(err, QC_ERR_ARG, "reference forward: tokens or state is NULL");
    if (n < 1)
        return qc_errf(err, QC_ERR_RANGE, "reference forward: n = %d tokens (need >= 1)", n);
    if (n > R->max_tokens) /* the capacity fixed at create, whatever opts says now */
        return qc_errf(err, QC_ERR_RANGE, "reference forward: n = %d tokens > max_tokens %d", n,
                       R->max_tokens);
    if (start_pos < 0)
        return qc_errf(err, QC_ERR_RANGE, "reference forward: start_pos %d < 0", start_pos);
    if ((int64_t)start_pos + n > st->max_context_len)
        return qc_errf(err, QC_ERR_RANGE,
                       "reference forward: start_pos %d + n %d > max_context_len %d", start_pos, n,
                       st->max_context_len);
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= V)
            return qc_errf(err, QC_ERR_RANGE,
                           "reference forward: token %d has id %d outside the vocabulary [0, %d)",
                           t, (int)tokens[t], V);
    const int use_chunked = be->opts.dn_kernel == QC_DN_CHUNKED;
    if (be->opts.dn_kernel != QC_DN_CHUNKED && be->opts.dn_kernel != QC_DN_RECURRENT)
        return qc_errf(err, QC_ERR_ARG, "reference forward: unknown dn_kernel %d", (int)be->opts.dn_kernel);
    if (use_chunked && be->opts.chunk_size < 1)
        return qc_errf(err, QC_ERR_ARG, "reference forward: chunk_size %d < 1", be->opts.chunk_size);
    qc_status s = ref_check_state(c, st, err);
    if (s) return s;

    /* ---- embeddings ---- */
    qc_ref_embedding(R->h, tokens, n, H, &be->model->embed, R->row);
    trace(be, 0, start_pos, n, H, R->h);

    /* ---- decoder layers ---- */
    for (int i = 0; i < L; i++) {
        ref_layer *ly = &R->layers[i];
        const qc_layer_weights *w = &be->model->layers[i];

        /* token mixer: h = h + Mixer(RMSNorm_1p(h)) */
        qc_ref_rmsnorm_1p(R->u, R->h, n, H, ly->input_norm, (float)c->rms_eps);
        if (ly->kind == QC_LAYER_FULL)
            qc_ref_gated_attention(R->y, R->u, n, start_pos, &ly->attn, st->k_cache[i],
                                   st->v_cache[i], st->max_context_len, &R->attn);
        else
            qc_ref_gated_deltanet(R->y, R->u, n, &ly->dn, st->conv_state[i], st->recurrent_state[i],
                                  use_chunked, be->opts.chunk_size, &R->dn);
        for (size_t k = 0; k < (size_t)n * H; k++) R->h[k] = R->h[k] + R->y[k];

        /* MLP: h = h + MLP(RMSNorm_1p(h)) */
        qc_ref_rmsnorm_1p(R->u, R->h, n, H, ly->post_norm, (float)c->rms_eps);
        qc_ref_mlp(R->y, R->u, n, H, I, &w->mlp_gate, &w->mlp_up, &w->mlp_down, R->mlp_gate,
                   R->mlp_up, R->row);
        for (size_t k = 0; k < (size_t)n * H; k++) R->h[k] = R->h[k] + R->y[k];

        if (i < L - 1) trace(be, i + 1, start_pos, n, H, R->h);
    }

    /* ---- final norm ---- */
    qc_ref_rmsnorm_1p(R->u, R->h, n, H, R->final_norm, (float)c->rms_eps);
    trace(be, L, start_pos, n, H, R->u);

    /* ---- lm_head ---- */
    if (logits) {
        if (all_logits)
            qc_ref_matmul(logits, R->u, n, H, V, &be->model->lm_head, R->row);
        else
            qc_ref_matmul(logits, R->u + (size_t)(n - 1) * H, 1, H, V, &be->model->lm_head, R->row);
    }
    return QC_OK;
}

/* ===================================================================================== */
/* Create / destroy / describe                                                            */
/* ===================================================================================== */

static const char *ref_describe(const qc_backend *be) {
    (void)be;
    return "reference (scalar fp32)";
}

static void ref_destroy(qc_backend *be) {
    if (!be) return;
    ref_impl *R = (ref_impl *)be->impl;
    if (R) {
        free(R->layers);
        free(R->owned);
        free(R->scratch);
        free(R);
    }
    free(be);
}

/* Bump allocator over a float arena (counts when base == NULL). */
typedef struct {
    float *base;
    size_t used;
} arena;

static float *take(arena *a, size_t count) {
    float *p = a->base ? a->base + a->used : NULL;
    a->used += count;
    return p;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Owned fp32 small weights (two passes: count, then carve + widen). */
static void layout_owned(ref_impl *R, const qc_model *m, arena *a) {
    const qc_config *c = &m->cfg;
    const size_t H = (size_t)c->hidden_size;
    for (int i = 0; i < c->n_layers; i++) {
        ref_layer *ly = &R->layers[i];
        const qc_layer_weights *w = &m->layers[i];
        ly->input_norm = take(a, H);
        ly->post_norm = take(a, H);
        if (c->layer_types[i] == QC_LAYER_FULL) {
            ly->q_norm = take(a, (size_t)c->head_dim);
            ly->k_norm = take(a, (size_t)c->head_dim);
        } else {
            ly->conv_w = take(a, (size_t)qc_cfg_conv_dim(c) * c->conv_kernel);
            ly->A_log = take(a, (size_t)c->lin_n_v_heads);
            ly->dt_bias = take(a, (size_t)c->lin_n_v_heads);
            ly->lin_norm = take(a, (size_t)c->lin_v_dim);
        }
        if (a->base) {
            qc_ref_tensor_widen(&w->input_norm, ly->input_norm);
            qc_ref_tensor_widen(&w->post_norm, ly->post_norm);
            if (c->layer_types[i] == QC_LAYER_FULL) {
                qc_ref_tensor_widen(&w->q_norm, ly->q_norm);
                qc_ref_tensor_widen(&w->k_norm, ly->k_norm);
            } else {
                qc_ref_tensor_widen(&w->conv1d, ly->conv_w); /* [C,1,K] == [C,K] */
                qc_ref_tensor_widen(&w->A_log, ly->A_log);
                qc_ref_tensor_widen(&w->dt_bias, ly->dt_bias);
                qc_ref_tensor_widen(&w->lin_norm, ly->lin_norm);
            }
        }
    }
    R->final_norm = take(a, H);
    R->inv_freq = take(a, (size_t)(c->rotary_dim / 2 > 0 ? c->rotary_dim / 2 : 1));
    if (a->base) {
        qc_ref_tensor_widen(&m->final_norm, R->final_norm);
        qc_ref_rope_inv_freq(R->inv_freq, c->rotary_dim, c->rope_theta);
    }
}

/* Scratch for NT tokens (two passes: count, then carve). */
static void layout_scratch(ref_impl *R, const qc_config *c, int NT_, arena *a) {
    const size_t NT = (size_t)NT_, H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t qdim = (size_t)c->n_heads * c->head_dim, kvdim = (size_t)c->n_kv_heads * c->head_dim;
    const size_t key_dim = (size_t)qc_cfg_key_dim(c), value_dim = (size_t)qc_cfg_value_dim(c);
    const size_t C = (size_t)qc_cfg_conv_dim(c), nv = (size_t)c->lin_n_v_heads;
    R->h = take(a, NT * H);
    R->u = take(a, NT * H);
    R->y = take(a, NT * H);
    R->mlp_gate = take(a, NT * I);
    R->mlp_up = take(a, NT * I);
    R->row = take(a, max_sz(max_sz(H, I), max_sz(qdim, value_dim)));
    R->attn.qg = take(a, NT * 2 * qdim);
    R->attn.q = take(a, NT * qdim);
    R->attn.k = take(a, NT * kvdim);
    R->attn.v = take(a, NT * kvdim);
    R->attn.attn = take(a, NT * qdim);
    R->attn.row = R->row;
    R->dn.mixed = take(a, NT * C);
    R->dn.conv = take(a, NT * C);
    R->dn.q = take(a, NT * key_dim);
    R->dn.k = take(a, NT * key_dim);
    R->dn.v = take(a, NT * value_dim);
    R->dn.z = take(a, NT * value_dim);
    R->dn.b = take(a, NT * nv);
    R->dn.a = take(a, NT * nv);
    R->dn.o = take(a, NT * value_dim);
    R->dn.row = R->row;
    const qc_ref_dn_dims dims = {c->lin_n_k_heads, c->lin_n_v_heads, c->lin_k_dim, c->lin_v_dim};
    float *chunk_buf = take(a, qc_ref_dn_scratch_floats(&dims, NT_));
    if (a->base) qc_ref_dn_scratch_init(&R->dn.chunk, &dims, NT_, chunk_buf);
}

qc_status qc_reference_create(const qc_model *m, const qc_backend_opts *o, qc_backend **out,
                              qc_err *err) {
    if (!out) return qc_errf(err, QC_ERR_ARG, "reference backend: out is NULL");
    *out = NULL;
    if (!m) return qc_errf(err, QC_ERR_ARG, "reference backend: model is NULL");
    qc_backend_opts opts;
    if (o) {
        opts = *o;
    } else {
        memset(&opts, 0, sizeof opts);
        opts.dn_kernel = QC_DN_CHUNKED;
        opts.chunk_size = 64;
        opts.max_tokens = 128;
    }
    if (opts.max_tokens < 1)
        return qc_errf(err, QC_ERR_ARG, "reference backend: max_tokens %d < 1", opts.max_tokens);
    qc_status s = check_model(m, err);
    if (s) return s;
    const qc_config *c = &m->cfg;

    qc_backend *be = qc_backend_alloc();
    ref_impl *R = calloc(1, sizeof *R);
    if (R) R->layers = calloc((size_t)c->n_layers, sizeof *R->layers);
    if (!be || !R || !R->layers) {
        if (R) free(R->layers);
        free(R);
        free(be);
        return qc_errf(err, QC_ERR_OOM, "reference backend: out of memory");
    }
    be->name = "reference";
    be->caps = QC_BE_CAP_ALL & ~QC_BE_CAP_THREADS; /* one thread by definition */
    be->model = m;
    be->opts = opts;
    be->impl = R;
    be->forward = ref_forward;
    be->destroy = ref_destroy;
    be->describe = ref_describe;
    R->cfg = c;
    R->max_tokens = opts.max_tokens;

    arena a = {NULL, 0};
    layout_owned(R, m, &a);
    R->owned = calloc(a.used, sizeof(float));
    arena b = {NULL, 0};
    layout_scratch(R, c, opts.max_tokens, &b);
    R->scratch = calloc(b.used, sizeof(float));
    if (!R->owned || !R->scratch) {
        size_t mb = (a.used + b.used) * sizeof(float) >> 20;
        ref_destroy(be);
        return qc_errf(err, QC_ERR_OOM,
                       "reference backend: cannot allocate %zu MiB of scratch for max_tokens %d",
                       mb, opts.max_tokens);
    }
    a.base = R->owned;
    a.used = 0;
    layout_owned(R, m, &a);
    b.base = R->scratch;
    b.used = 0;
    layout_scratch(R, c, opts.max_tokens, &b);

    /* per-layer block descriptors (views of the owned copies + the model's matrices) */
    for (int i = 0; i < c->n_layers; i++) {
        ref_layer *ly = &R->layers[i];
        const qc_layer_weights *w = &m->layers[i];
        ly->kind = c->layer_types[i];
        if (ly->kind == QC_LAYER_FULL) {
            qc_ref_attn_layer *A = &ly->attn;
            A->hidden = c->hidden_size;
            A->n_heads = c->n_heads;
            A->n_kv_heads = c->n_kv_heads;
            A->head_dim = c->head_dim;
            A->rotary_dim = c->rotary_dim;
            A->eps = (float)c->rms_eps;
            A->q_norm = ly->q_norm;
            A->k_norm = ly->k_norm;
            A->inv_freq = R->inv_freq;
            A->q_proj = &w->q_proj;
            A->k_proj = &w->k_proj;
            A->v_proj = &w->v_proj;
            A->o_proj = &w->o_proj;
        } else {
            qc_ref_dn_layer *D = &ly->dn;
            D->hidden = c->hidden_size;
            D->dims.n_k_heads = c->lin_n_k_heads;
            D->dims.n_v_heads = c->lin_n_v_heads;
            D->dims.k_dim = c->lin_k_dim;
            D->dims.v_dim = c->lin_v_dim;
            D->conv_kernel = c->conv_kernel;
            D->eps = (float)c->rms_eps;
            D->conv_w = ly->conv_w;
            D->A_log = ly->A_log;
            D->dt_bias = ly->dt_bias;
            D->norm_w = ly->lin_norm;
            D->in_proj_qkv = &w->in_proj_qkv;
            D->in_proj_z = &w->in_proj_z;
            D->in_proj_b = &w->in_proj_b;
            D->in_proj_a = &w->in_proj_a;
            D->out_proj = &w->out_proj;
        }
    }
    *out = be;
    return QC_OK;
}
