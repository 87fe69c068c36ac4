/* qc_ref_backend.c — the reference backend: the Qwen3.5 text forward pass, read top to bottom.
 *
 *   h = embed[tokens]                                          trace 0
 *   for each layer i:
 *       h = h + Mixer_i(RMSNorm_1p(h; input_norm))             DeltaNet or gated attention
 *       h = h + MLP_i(RMSNorm_1p(h; post_norm))                trace i+1 (i < L-1)
 *         (MoE models: h is traced as "moe_in" i, the MLP is the MoE block of qc_ref_moe.c,
 *          its choices are traced as "router_topk" i)
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
#include "qc/qc_memplan.h"
#include "qc/qc_reference.h"
#include "qc_ref_blocks.h"
#include "qc_ref_deltanet.h"
#include "qc_ref_faults.h"
#include "qc_ref_moe.h"

static qc_status ref_set_option(qc_backend *be, const char *key, const char *value, qc_err *err);

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
    /* mixture-of-experts MLP (MoE models) */
    qc_ref_moe_layer moe;   /* views of the model's router / experts / shared expert */
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
    qc_ref_moe_scratch moe; /* MoE models only */
} ref_impl;

/* ===================================================================================== */
/* Forward                                                                                */
/* ===================================================================================== */

static void trace(const qc_call *k, int index, int start_pos, int n, int dim, const float *d) {
    if (k->trace) k->trace(k->trace_user, index, "hidden", start_pos, n, dim, d);
}

/* A named trace ("moe_in", "mlp_in", "router_topk"; qc_backend.h). */
static void trace_named(const qc_call *k, const char *name, int index, int start_pos, int n,
                        int dim, const float *d) {
    if (k->trace) k->trace(k->trace_user, index, name, start_pos, n, dim, d);
}

/* Layer i on the residual stream h [n, H] (in place): the body of the forward's loop. */
static void ref_layer_pass(qc_backend *be, const qc_call *k, int i, float *h, int n, int start_pos,
                           qc_state *st) {
    ref_impl *R = (ref_impl *)be->impl;
    const qc_config *c = R->cfg;
    const int H = c->hidden_size, I = c->intermediate_size, L = c->n_layers;
    const int use_chunked = k->dn_kernel == QC_DN_CHUNKED;
    ref_layer *ly = &R->layers[i];
    const qc_layer_weights *w = &be->model->layers[i];

    /* token mixer: h = h + Mixer(RMSNorm_1p(h)) */
    qc_ref_rmsnorm_1p(R->u, h, n, H, ly->input_norm, (float)c->rms_eps);
    if (ly->kind == QC_LAYER_FULL)
        qc_ref_gated_attention(R->y, R->u, n, start_pos, &ly->attn, st->k_cache[i],
                               st->v_cache[i], st->max_context_len, &R->attn);
    else
        qc_ref_gated_deltanet(R->y, R->u, n, &ly->dn, st->conv_state[i], st->recurrent_state[i],
                              use_chunked, k->chunk_size, &R->dn);
    for (size_t j = 0; j < (size_t)n * H; j++) h[j] = h[j] + R->y[j];

    /* MLP: h = h + MLP(RMSNorm_1p(h)); a MoE model's MLP is the MoE block */
    trace_named(k, qc_cfg_is_moe(c) ? "moe_in" : "mlp_in", i, start_pos, n, H, h);
    qc_ref_rmsnorm_1p(R->u, h, n, H, ly->post_norm, (float)c->rms_eps);
    if (qc_cfg_is_moe(c)) {
        qc_ref_moe(R->y, R->u, n, &ly->moe, &R->moe);
        trace_named(k, "router_topk", i, start_pos, n, 2 * c->n_experts_per_tok, R->moe.route);
    } else {
        qc_ref_mlp(R->y, R->u, n, H, I, &w->mlp_gate, &w->mlp_up, &w->mlp_down, R->mlp_gate,
                   R->mlp_up, R->row);
    }
    for (size_t j = 0; j < (size_t)n * H; j++) h[j] = h[j] + R->y[j];

    if (i < L - 1) trace(k, i + 1, start_pos, n, H, h);
}

/* The final norm of h [n, H] into xn [n, H] (traced as index L). */
static void ref_norm(qc_backend *be, const qc_call *k, const float *h, float *xn, int n,
                     int start_pos) {
    ref_impl *R = (ref_impl *)be->impl;
    const qc_config *c = R->cfg;
    qc_ref_rmsnorm_1p(xn, h, n, c->hidden_size, R->final_norm, (float)c->rms_eps);
    trace(k, c->n_layers, start_pos, n, c->hidden_size, xn);
}

/* logits[t * ld + r] = xn[t] . rows[r] for the rows of the output head given. */
static void ref_logits(qc_backend *be, const float *xn, int n, const qc_tensor *rows,
                       float *logits, long ld) {
    ref_impl *R = (ref_impl *)be->impl;
    const int H = R->cfg->hidden_size, V = (int)rows->shape[0];
    for (int r = 0; r < V; r++) {
        const float *w = qc_ref_weight_row(rows, (size_t)r, H, R->row);
        for (int t = 0; t < n; t++) logits[(size_t)t * ld + r] = qc_ref_dot(xn + (size_t)t * H, w, H);
    }
}

static qc_status ref_forward(qc_backend *be, const qc_call *k, const int32_t *tokens, int n,
                             int start_pos, qc_state *st, float *logits, int all_logits,
                             qc_err *err) {
    ref_impl *R = (ref_impl *)be->impl;
    const qc_config *c = R->cfg;
    const int H = c->hidden_size, V = c->vocab_size;

    /* the arguments were validated by qc_backend_forward (the call contract, qc_backend.h) */
    (void)err;

    /* ---- embeddings ---- */
    qc_ref_embedding(R->h, tokens, n, H, &be->model->embed, R->row);
    trace(k, 0, start_pos, n, H, R->h);

    /* ---- decoder layers ---- */
    for (int i = 0; i < c->n_layers; i++) ref_layer_pass(be, k, i, R->h, n, start_pos, st);

    /* ---- final norm ---- */
    ref_norm(be, k, R->h, R->u, n, start_pos);

    /* ---- lm_head ---- */
    if (logits) {
        if (all_logits) ref_logits(be, R->u, n, &be->model->lm_head, logits, V);
        else ref_logits(be, R->u + (size_t)(n - 1) * H, 1, &be->model->lm_head, logits, V);
    }
    return QC_OK;
}

/* ---- the same pass in steps (qc_backend.h: layer-major execution) ---- */

static qc_status ref_step_layer(qc_backend *be, const qc_call *k, int l, float *h, int n,
                                int start_pos, qc_state *st, qc_err *err) {
    (void)err;
    ref_layer_pass(be, k, l, h, n, start_pos, st);
    return QC_OK;
}

static qc_status ref_step_norm(qc_backend *be, const qc_call *k, const float *h, float *xn, int n,
                               int start_pos, qc_err *err) {
    (void)err;
    ref_norm(be, k, h, xn, n, start_pos);
    return QC_OK;
}

static qc_status ref_step_logits(qc_backend *be, const float *xn, int n, const qc_tensor *rows,
                                 float *logits, long ld, qc_err *err) {
    (void)err;
    ref_logits(be, xn, n, rows, logits, ld);
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

/* Bump allocator over a float arena (counts when base == NULL). A count that overflows
 * saturates at SIZE_MAX (only a memory plan of absurd sizes can get there). */
typedef struct {
    float *base;
    size_t used;
} arena;

static float *take(arena *a, size_t count) {
    float *p = a->base ? a->base + a->used : NULL;
    if (__builtin_add_overflow(a->used, count, &a->used)) a->used = SIZE_MAX;
    return p;
}

/* rows x cols floats (rows: the token count, the factor that can be huge in a plan) */
static float *take2(arena *a, size_t rows, size_t cols) {
    size_t count;
    if (__builtin_mul_overflow(rows, cols, &count)) count = SIZE_MAX;
    return take(a, count);
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Owned fp32 small weights. One function for both passes: counting (a->base == NULL: only the
 * config is read; m may be NULL, R->layers may be NULL), then carving + widening from m. */
static void layout_owned(ref_impl *R, const qc_config *c, const qc_model *m, arena *a) {
    const size_t H = (size_t)c->hidden_size;
    for (int i = 0; i < c->n_layers; i++) {
        ref_layer counted, *ly = R->layers ? &R->layers[i] : &counted;
        ly->input_norm = take(a, H);
        ly->post_norm = take(a, H);
        if (c->layer_types[i] == QC_LAYER_FULL) {
            ly->q_norm = take(a, (size_t)c->head_dim);
            ly->k_norm = take(a, (size_t)c->head_dim);
        } else {
            ly->conv_w = take2(a, (size_t)qc_cfg_conv_dim(c), (size_t)c->conv_kernel);
            ly->A_log = take(a, (size_t)c->lin_n_v_heads);
            ly->dt_bias = take(a, (size_t)c->lin_n_v_heads);
            ly->lin_norm = take(a, (size_t)c->lin_v_dim);
        }
        if (a->base) {
            const qc_layer_weights *w = &m->layers[i];
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
    R->h = take2(a, NT, H);
    R->u = take2(a, NT, H);
    R->y = take2(a, NT, H);
    R->mlp_gate = take2(a, NT, I);
    R->mlp_up = take2(a, NT, I);
    R->row = take(a, max_sz(max_sz(H, I), max_sz(qdim, value_dim)));
    R->attn.qg = take2(a, NT, 2 * qdim);
    R->attn.q = take2(a, NT, qdim);
    R->attn.k = take2(a, NT, kvdim);
    R->attn.v = take2(a, NT, kvdim);
    R->attn.attn = take2(a, NT, qdim);
    R->attn.row = R->row;
    R->dn.mixed = take2(a, NT, C);
    R->dn.conv = take2(a, NT, C);
    R->dn.q = take2(a, NT, key_dim);
    R->dn.k = take2(a, NT, key_dim);
    R->dn.v = take2(a, NT, value_dim);
    R->dn.z = take2(a, NT, value_dim);
    R->dn.b = take2(a, NT, nv);
    R->dn.a = take2(a, NT, nv);
    R->dn.o = take2(a, NT, value_dim);
    R->dn.row = R->row;
    const qc_ref_dn_dims dims = {c->lin_n_k_heads, c->lin_n_v_heads, c->lin_k_dim, c->lin_v_dim};
    float *chunk_buf = take(a, qc_ref_dn_scratch_floats(&dims, NT_));
    if (a->base) qc_ref_dn_scratch_init(&R->dn.chunk, &dims, NT_, chunk_buf);
    if (qc_cfg_is_moe(c)) { /* the MoE block's scratch (router, one expert, route table) */
        const int E = c->n_experts, k = c->n_experts_per_tok, Ie = c->moe_intermediate_size;
        const int Is = c->shared_expert_intermediate_size;
        float *moe_buf = take(a, qc_ref_moe_scratch_floats(c->hidden_size, E, k, Ie, Is, NT_));
        if (a->base) qc_ref_moe_scratch_init(&R->moe, c->hidden_size, E, k, Ie, Is, NT_, moe_buf);
    }
}

/* The two arenas' sizes in floats for max_tokens NT: the counting pass of the very layout code
 * create carves with. */
typedef struct {
    size_t owned, scratch;
} ref_sizes;

static ref_sizes ref_count(const qc_config *c, int NT) {
    ref_impl R0;
    memset(&R0, 0, sizeof R0); /* R0.layers NULL: counting only */
    arena a = {NULL, 0}, b = {NULL, 0};
    layout_owned(&R0, c, NULL, &a);
    layout_scratch(&R0, c, NT, &b);
    return (ref_sizes){a.used, b.used};
}

/* Every byte create allocates (the backend, its impl and layer table, the two arenas);
 * SIZE_MAX when that overflows. */
static size_t ref_bytes(const qc_config *c, ref_sizes z) {
    size_t total = sizeof(qc_backend) + sizeof(ref_impl), part;
    int ovf = __builtin_mul_overflow((size_t)c->n_layers, sizeof(ref_layer), &part) ||
              __builtin_add_overflow(total, part, &total) ||
              __builtin_mul_overflow(z.owned, sizeof(float), &part) ||
              __builtin_add_overflow(total, part, &total) ||
              __builtin_mul_overflow(z.scratch, sizeof(float), &part) ||
              __builtin_add_overflow(total, part, &total);
    return ovf ? SIZE_MAX : total;
}

static void opts_or_default(const qc_backend_opts *o, qc_backend_opts *out) {
    if (o) *out = *o;
    else qc_backend_opts_default(out);
}

size_t qc_reference_scratch_bytes(const qc_config *c, const qc_backend_opts *o) {
    qc_backend_opts opts;
    opts_or_default(o, &opts);
    if (!c || opts.max_tokens < 1 || qc_memplan_check_config(c, NULL) != QC_OK) return SIZE_MAX;
    return ref_bytes(c, ref_count(c, opts.max_tokens));
}

qc_status qc_reference_create(const qc_model *m, const qc_backend_opts *o, qc_backend **out,
                              qc_err *err) {
    if (!out) return qc_errf(err, QC_ERR_ARG, "create: out is NULL");
    *out = NULL;
    qc_backend_opts opts;
    opts_or_default(o, &opts);
    qc_status s = qc_backend_check_create(m, &opts, err); /* the shared model + options check */
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
    be->step_layer = ref_step_layer;
    be->step_norm = ref_step_norm;
    be->step_logits = ref_step_logits;
    be->destroy = ref_destroy;
    be->set_option = ref_set_option;
    be->describe = ref_describe;
    be->max_chunk_tokens = 0; /* the chunk scratch holds max_tokens: any min(chunk_size, n) */
    R->cfg = c;
    R->max_tokens = opts.max_tokens;

    /* count, allocate, carve (+ widen): the same layout functions as qc_reference_scratch_bytes */
    const ref_sizes z = ref_count(c, opts.max_tokens);
    R->owned = calloc(z.owned, sizeof(float));
    R->scratch = calloc(z.scratch, sizeof(float));
    if (!R->owned || !R->scratch) {
        size_t mb = ref_bytes(c, z) >> 20;
        ref_destroy(be);
        return qc_errf(err, QC_ERR_OOM,
                       "reference backend: cannot allocate %zu MiB of scratch for max_tokens %d",
                       mb, opts.max_tokens);
    }
    arena a = {R->owned, 0}, b = {R->scratch, 0};
    layout_owned(R, c, m, &a);
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
        if (qc_cfg_is_moe(c)) {
            qc_ref_moe_layer *M = &ly->moe;
            M->hidden = c->hidden_size;
            M->n_experts = c->n_experts;
            M->top_k = c->n_experts_per_tok;
            M->expert_width = c->moe_intermediate_size;
            M->shared_width = c->shared_expert_intermediate_size;
            M->router = &w->router;
            M->gate_up = &w->exp_gate_up;
            M->down = &w->exp_down;
            M->sh_gate = &w->sh_gate;
            M->sh_up = &w->sh_up;
            M->sh_down = &w->sh_down;
            M->sh_expert_gate = &w->sh_expert_gate;
            M->ops = &qc_ref_moe_spec;
        }
    }
    *out = be;
    return QC_OK;
}

/* ===================================================================================== */
/* Options: the self-test's variants (qc_ref_faults.h)                                    */
/* ===================================================================================== */

static qc_status ref_set_option(qc_backend *be, const char *key, const char *value, qc_err *err) {
    ref_impl *R = (ref_impl *)be->impl;
    if (!strcmp(key, "fault.unguarded_exp")) {
        if (strcmp(value, "0") && strcmp(value, "1"))
            return qc_errf(err, QC_ERR_ARG, "reference: option %s: '%s' is not 0 or 1", key, value);
        R->dn.chunk.decay = qc_ref_fault_decay(value[0] == '1');
        return QC_OK;
    }
    if (!strcmp(key, "fault.moe")) {
        const qc_ref_moe_ops *ops = qc_ref_fault_moe(value);
        if (!ops)
            return qc_errf(err, QC_ERR_ARG, "reference: option %s: unknown variant '%s' (%s)", key,
                           value, qc_ref_fault_moe_names());
        if (!qc_cfg_is_moe(R->cfg))
            return qc_errf(err, QC_ERR_ARG, "reference: option %s: the model is not a "
                           "mixture-of-experts model", key);
        for (int i = 0; i < R->cfg->n_layers; i++) R->layers[i].moe.ops = ops;
        return QC_OK;
    }
    return qc_errf(err, QC_ERR_NO_OPTION, "reference: unknown option '%s' (fault.unguarded_exp, "
                   "fault.moe)", key);
}
