/* qc_model_moe.c — the mixture-of-experts (Qwen3.5-MoE) part of the model code: the seven MoE
 * tensors of a layer (names, shapes, synthetic scales), their share of the one model check, and
 * the loader's MoE layouts.
 *
 * Checkpoint names (after "<prefix>layers.{i}."), shapes [out, in] as in PyTorch:
 *   mlp.gate.weight                        router            [E, H]
 *   mlp.experts.gate_up_proj   (no .weight) fused experts     [E, 2*Ie, H]  rows [gate | up]
 *   mlp.experts.down_proj      (no .weight)                   [E, H, Ie]
 *   mlp.shared_expert.{gate,up}_proj.weight                   [Is, H]
 *   mlp.shared_expert.down_proj.weight                        [H, Is]
 *   mlp.shared_expert_gate.weight          one scalar/token   [1, H]
 * The hub stores the routed experts fused (views into the mapped file). The older per-expert
 * layout experts.{e}.{gate,up,down}_proj.weight ([Ie,H], [Ie,H], [H,Ie]) is stacked at load
 * into owned buffers of the fused shapes: gate_up[e] = [gate_e ; up_e] (concatenated along the
 * rows, no transpose), down[e] = down_e — what transformers' qwen2_moe conversion rule does.
 * One layout per layer: both at once is an error, as is any part of either missing.
 */
#include <stdlib.h>
#include <string.h>

#include "qc_model_priv.h"

/* ==== The seven MoE tensors ==== */

static const char *const MOE_SUFFIX[QC_MOE_N] = {
    "mlp.gate.weight",
    "mlp.experts.gate_up_proj",
    "mlp.experts.down_proj",
    "mlp.shared_expert.gate_proj.weight",
    "mlp.shared_expert.up_proj.weight",
    "mlp.shared_expert.down_proj.weight",
    "mlp.shared_expert_gate.weight",
};

static const char *const PER_PROJ[3] = {"gate_proj.weight", "up_proj.weight", "down_proj.weight"};

const char *qc_moe_suffix(int which) { return MOE_SUFFIX[which]; }

qc_tensor *qc_moe_view(qc_layer_weights *lw, int which) {
    switch (which) {
    case QC_MOE_ROUTER: return &lw->router;
    case QC_MOE_GATE_UP: return &lw->exp_gate_up;
    case QC_MOE_DOWN: return &lw->exp_down;
    case QC_MOE_SH_GATE: return &lw->sh_gate;
    case QC_MOE_SH_UP: return &lw->sh_up;
    case QC_MOE_SH_DOWN: return &lw->sh_down;
    default: return &lw->sh_expert_gate;
    }
}

int qc_moe_shape(const qc_config *c, int which, int64_t sh[4]) {
    const int64_t E = c->n_experts, H = c->hidden_size, Ie = c->moe_intermediate_size;
    const int64_t Is = c->shared_expert_intermediate_size;
    sh[2] = sh[3] = 0;
    switch (which) {
    case QC_MOE_ROUTER: return sh[0] = E, sh[1] = H, 2;
    case QC_MOE_GATE_UP: return sh[0] = E, sh[1] = 2 * Ie, sh[2] = H, 3;
    case QC_MOE_DOWN: return sh[0] = E, sh[1] = H, sh[2] = Ie, 3;
    case QC_MOE_SH_GATE: case QC_MOE_SH_UP: return sh[0] = Is, sh[1] = H, 2;
    case QC_MOE_SH_DOWN: return sh[0] = H, sh[1] = Is, 2;
    default: return sh[0] = 1, sh[1] = H, 2;
    }
}

/* Scales of a trained model's order: every projection 1/sqrt(fan_in), so activations keep
 * unit scale. The router's logits (x has RMS ~1 after the norm) then have a standard deviation
 * of ~1: a softmax over E experts that is neither flat nor one-hot, and zero-mean independent
 * rows spread the tokens over all experts (no expert favoured). */
float qc_moe_synth_std(const qc_config *c, int which) {
    const double H = c->hidden_size, Ie = c->moe_intermediate_size;
    const double Is = c->shared_expert_intermediate_size;
    double fan_in = which == QC_MOE_DOWN ? Ie : which == QC_MOE_SH_DOWN ? Is : H;
    return (float)(1.0 / __builtin_sqrt(fan_in));
}

/* ==== The one model check: MoE part ==== */

qc_status qc_moe_check_geometry(const qc_config *c, qc_err *err) {
    if (!qc_cfg_is_moe(c)) {
        if (c->n_experts < 0 || c->n_experts_per_tok || c->moe_intermediate_size ||
            c->shared_expert_intermediate_size)
            return qc_errf(err, QC_ERR_ARG,
                           "model: config: MoE sizes without experts (E %d, k %d, Ie %d, Is %d)",
                           c->n_experts, c->n_experts_per_tok, c->moe_intermediate_size,
                           c->shared_expert_intermediate_size);
        return QC_OK;
    }
    if (c->n_experts_per_tok < 1 || c->n_experts_per_tok > c->n_experts ||
        c->n_experts > 65536 || c->moe_intermediate_size < 1 ||
        c->moe_intermediate_size > (1 << 24) || c->shared_expert_intermediate_size < 1 ||
        c->shared_expert_intermediate_size > (1 << 24))
        return qc_errf(err, QC_ERR_ARG,
                       "model: config: bad MoE geometry (experts %d, per token %d, expert width "
                       "%d, shared width %d)",
                       c->n_experts, c->n_experts_per_tok, c->moe_intermediate_size,
                       c->shared_expert_intermediate_size);
    return QC_OK;
}

qc_status qc_moe_validate_layer(const qc_model *m, int li, qc_err *err) {
    const qc_config *c = &m->cfg;
    qc_layer_weights *lw = (qc_layer_weights *)&m->layers[li];
    char name[160];
    qc_status st;
    if (!qc_cfg_is_moe(c)) {
        for (int w = 0; w < QC_MOE_N; w++)
            if (qc_moe_view(lw, w)->ndim != 0)
                return qc_errf(err, QC_ERR_ARG,
                               "model: layers.%d.%s: present in a dense model (no num_experts)",
                               li, MOE_SUFFIX[w]);
        return QC_OK;
    }
    const struct {
        const qc_tensor *t;
        const char *suf;
    } dense[3] = {{&lw->mlp_gate, "mlp.gate_proj.weight"},
                  {&lw->mlp_up, "mlp.up_proj.weight"},
                  {&lw->mlp_down, "mlp.down_proj.weight"}};
    for (int k = 0; k < 3; k++)
        if (dense[k].t->ndim != 0)
            return qc_errf(err, QC_ERR_ARG,
                           "model: layers.%d.%s: present in a mixture-of-experts model "
                           "(num_experts %d)",
                           li, dense[k].suf, c->n_experts);
    for (int w = 0; w < QC_MOE_N; w++) {
        int64_t sh[4];
        int nd = qc_moe_shape(c, w, sh);
        snprintf(name, sizeof name, "layers.%d.%s", li, MOE_SUFFIX[w]);
        if ((st = qc_model_check_view(qc_moe_view(lw, w), name, sh, nd, err))) return st;
    }
    return QC_OK;
}

size_t qc_moe_layer_bytes(const qc_layer_weights *lw) {
    size_t n = 0;
    for (int w = 0; w < QC_MOE_N; w++) {
        const qc_tensor *t = qc_moe_view((qc_layer_weights *)lw, w);
        if (t->ndim) n += qc_tensor_numel(t) * qc_dtype_size(t->dtype);
    }
    return n;
}

/* ==== Loader: classification ==== */

qc_status qc_moe_found_init(qc_moe_found *F, const qc_config *c, qc_err *err) {
    memset(F, 0, sizeof *F);
    if (!qc_cfg_is_moe(c)) return QC_OK;
    F->n_layers = c->n_layers;
    F->n_experts = c->n_experts;
    F->fused = calloc((size_t)c->n_layers * QC_MOE_N, sizeof *F->fused);
    F->per = calloc((size_t)c->n_layers * (size_t)c->n_experts * 3, sizeof *F->per);
    if (!F->fused || !F->per) {
        qc_moe_found_free(F);
        return qc_errf(err, QC_ERR_OOM, "model: out of memory (MoE tensor table)");
    }
    return QC_OK;
}

void qc_moe_found_free(qc_moe_found *F) {
    free(F->fused);
    free(F->per);
    memset(F, 0, sizeof *F);
}

/* "experts.{e}.<proj>" -> e and proj (0 gate, 1 up, 2 down); -1 if not that form. A number with
 * a leading zero or more than 9 digits is not an expert id. */
static long parse_per_expert(const char *s, int *proj) {
    const char *p = "mlp.experts.";
    if (strncmp(s, p, strlen(p)) != 0) return -1;
    s += strlen(p);
    long e = 0;
    int nd = 0;
    while (s[nd] >= '0' && s[nd] <= '9' && nd < 10) e = e * 10 + (s[nd] - '0'), nd++;
    if (nd == 0 || nd > 9 || s[nd] != '.' || (nd > 1 && s[0] == '0')) return -1;
    for (int k = 0; k < 3; k++)
        if (!strcmp(s + nd + 1, PER_PROJ[k])) return *proj = k, e;
    return -1;
}

qc_status qc_moe_classify(qc_moe_found *F, const qc_config *c, int li, const char *suf,
                          const char *fpath, const qc_st_tensor *t, qc_found **slot,
                          qc_err *err) {
    *slot = NULL;
    int which = -1, proj = -1;
    for (int w = 0; w < QC_MOE_N; w++)
        if (!strcmp(suf, MOE_SUFFIX[w])) which = w;
    long e = which < 0 ? parse_per_expert(suf, &proj) : -1;
    if (which < 0 && e < 0) return QC_OK; /* not a MoE name */
    if (!qc_cfg_is_moe(c))
        return qc_errf(err, QC_ERR_UNKNOWN,
                       "%s: %s: unknown tensor (a mixture-of-experts tensor, but config.json "
                       "describes a dense model without num_experts)",
                       fpath, t->name);
    if (which >= 0) {
        *slot = &F->fused[(size_t)li * QC_MOE_N + (size_t)which];
        return QC_OK;
    }
    if (e >= c->n_experts)
        return qc_errf(err, QC_ERR_UNKNOWN,
                       "%s: %s: unknown tensor (expert %ld >= num_experts %d)", fpath, t->name,
                       e, c->n_experts);
    *slot = &F->per[((size_t)li * (size_t)c->n_experts + (size_t)e) * 3 + (size_t)proj];
    return QC_OK;
}

/* ==== Loader: views, stacking ==== */

/* f's tensor has exactly shape exp[nd]: fill dst with a view of it. */
static qc_status take(const qc_model_priv *p, const qc_found *f, const int64_t *exp, int nd,
                      qc_tensor *dst, qc_err *err) {
    const qc_st_tensor *t = f->t;
    int ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == exp[i];
    if (!ok) {
        char g[160], e[160];
        qc_text_shape(g, sizeof g, t->shape, t->ndim <= 4 ? t->ndim : 4);
        qc_text_shape(e, sizeof e, exp, nd);
        return qc_errf(err, QC_ERR_SHAPE, "%s: %s: shape %s%s != %s", p->files[f->file].path,
                       t->name, g, t->ndim > 4 ? "..." : "", e);
    }
    memset(dst, 0, sizeof *dst);
    dst->dtype = t->dtype;
    dst->ndim = nd;
    for (int i = 0; i < nd; i++) dst->shape[i] = exp[i];
    dst->data = t->data;
    return QC_OK;
}

/* Per-expert layout of layer li: check every expert's three tensors, stack them. */
static qc_status stack_experts(const qc_moe_found *F, qc_model *m, qc_model_priv *p, int li,
                               const char *prefix, const char *missing_file, qc_err *err) {
    const qc_config *c = &m->cfg;
    const int E = c->n_experts;
    const int64_t H = c->hidden_size, Ie = c->moe_intermediate_size;
    const qc_found *P = &F->per[(size_t)li * (size_t)E * 3];
    const qc_found *first = NULL;
    qc_status st;
    for (int e = 0; e < E; e++)
        for (int k = 0; k < 3; k++) {
            const qc_found *f = &P[e * 3 + k];
            if (!f->t)
                return qc_errf(err, QC_ERR_MISSING,
                               "%s: %slayers.%d.mlp.experts.%d.%s: missing (the per-expert "
                               "layout needs all %d experts' gate_proj, up_proj and down_proj)",
                               missing_file, prefix, li, e, PER_PROJ[k], E);
            int64_t sh[2] = {k == 2 ? H : Ie, k == 2 ? Ie : H};
            qc_tensor tmp;
            if ((st = take(p, f, sh, 2, &tmp, err))) return st;
            if (!first) first = f;
            if (f->t->dtype != first->t->dtype)
                return qc_errf(err, QC_ERR_FORMAT, "%s: %s: dtype %s != %s of %s (one dtype per layer's experts)",
                               p->files[f->file].path, f->t->name, qc_dtype_str(f->t->dtype),
                               qc_dtype_str(first->t->dtype), first->t->name);
        }
    const qc_dtype dt = first->t->dtype;
    const size_t es = qc_dtype_size(dt), mat = (size_t)Ie * (size_t)H * es; /* one [Ie,H] */
    qc_layer_weights *lw0 = &m->layers[li];
    if (p->streamed) { /* stacked a layer at a time (qc_model_stream.c) */
        const void *gsrc[2 * QC_MAX_EXPERTS_STACK], *dsrc[QC_MAX_EXPERTS_STACK];
        if (E > QC_MAX_EXPERTS_STACK)
            return qc_errf(err, QC_ERR_UNSUPPORTED, "%s: layer %d: %d experts in the per-expert "
                           "layout (a streamed run stacks at most %d)", missing_file, li, E,
                           QC_MAX_EXPERTS_STACK);
        for (int e = 0; e < E; e++) {
            gsrc[2 * e] = P[e * 3 + 0].t->data;
            gsrc[2 * e + 1] = P[e * 3 + 1].t->data;
            dsrc[e] = P[e * 3 + 2].t->data;
        }
        lw0->exp_gate_up = (qc_tensor){dt, 3, {E, 2 * Ie, H, 0}, NULL};
        lw0->exp_down = (qc_tensor){dt, 3, {E, H, Ie, 0}, NULL};
        qc_status s2 = qc_model_stream_defer_stack(p, &lw0->exp_gate_up, gsrc, NULL, 2 * E, mat,
                                                   err);
        return s2 ? s2 : qc_model_stream_defer_stack(p, &lw0->exp_down, dsrc, NULL, E, mat, err);
    }
    uint8_t *gu = qc_model_priv_weights(p, (size_t)E * 2 * mat);
    uint8_t *dn = gu ? qc_model_priv_weights(p, (size_t)E * mat) : NULL;
    if (!gu || !dn) /* what was allocated is owned by the model, freed with it */
        return qc_errf(err, QC_ERR_OOM, "%s: out of memory stacking layer %d's experts",
                       missing_file, li);
    for (int e = 0; e < E; e++) {
        memcpy(gu + (size_t)e * 2 * mat, P[e * 3 + 0].t->data, mat);       /* gate rows */
        memcpy(gu + (size_t)e * 2 * mat + mat, P[e * 3 + 1].t->data, mat); /* up rows */
        memcpy(dn + (size_t)e * mat, P[e * 3 + 2].t->data, mat);
    }
    qc_layer_weights *lw = &m->layers[li];
    lw->exp_gate_up = (qc_tensor){dt, 3, {E, 2 * Ie, H, 0}, gu};
    lw->exp_down = (qc_tensor){dt, 3, {E, H, Ie, 0}, dn};
    return QC_OK;
}

qc_status qc_moe_take(const qc_moe_found *F, qc_model *m, qc_model_priv *p, const char *prefix,
                      const char *missing_file, qc_err *err) {
    const qc_config *c = &m->cfg;
    if (!qc_cfg_is_moe(c)) return QC_OK;
    qc_status st;
    for (int li = 0; li < c->n_layers; li++) {
        const qc_found *Fu = &F->fused[(size_t)li * QC_MOE_N];
        const qc_found *P = &F->per[(size_t)li * (size_t)c->n_experts * 3];
        const qc_found *any_per = NULL;
        for (size_t k = 0; k < (size_t)c->n_experts * 3 && !any_per; k++)
            if (P[k].t) any_per = &P[k];
        const int fused = Fu[QC_MOE_GATE_UP].t || Fu[QC_MOE_DOWN].t;
        if (fused && any_per)
            return qc_errf(err, QC_ERR_FORMAT,
                           "%s: %s: a per-expert tensor next to the fused experts.gate_up_proj / "
                           "experts.down_proj of layer %d (one expert layout per layer)",
                           p->files[any_per->file].path, any_per->t->name, li);
        for (int w = 0; w < QC_MOE_N; w++) {
            int is_exp = w == QC_MOE_GATE_UP || w == QC_MOE_DOWN;
            if (is_exp && !fused) continue; /* per-expert: stacked below */
            if (!Fu[w].t)
                return qc_errf(err, QC_ERR_MISSING, "%s: %slayers.%d.%s: missing%s",
                               missing_file, prefix, li, MOE_SUFFIX[w],
                               is_exp ? " (the fused expert layout needs both gate_up_proj and "
                                        "down_proj)"
                                      : "");
            int64_t sh[4];
            int nd = qc_moe_shape(c, w, sh);
            if ((st = take(p, &Fu[w], sh, nd, qc_moe_view(&m->layers[li], w), err))) return st;
        }
        if (!fused) {
            if (!any_per)
                return qc_errf(err, QC_ERR_MISSING,
                               "%s: %slayers.%d.mlp.experts.gate_up_proj: missing (neither the "
                               "fused experts.gate_up_proj / down_proj nor the per-expert "
                               "experts.{e}.*_proj.weight found)",
                               missing_file, prefix, li);
            if ((st = stack_experts(F, m, p, li, prefix, missing_file, err))) return st;
        }
    }
    return QC_OK;
}
