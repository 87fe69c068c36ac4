/* qc_ref_moe.c — the scalar reference MoE block (see qc_ref_moe.h for the contract).
 *
 * Written as the definition, one token at a time, in Hugging Face's order
 * (Qwen3_5MoeSparseMoeBlock: router, fp32 softmax, top-k, renormalise; the experts' eager loop
 * in ascending expert id; then the gated shared expert added). Plain fp32, sums left to right,
 * libm float functions, -ffp-contract=off.
 */
#include "qc_ref_moe.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "qc_ref_blocks.h"

/* ===================================================================================== */
/* Scratch                                                                                */
/* ===================================================================================== */

static int imax(int a, int b) { return a > b ? a : b; }

/* The layout, once: counts when buf is NULL (s may then be a dummy). */
static size_t layout(qc_ref_moe_scratch *s, int H, int E, int k, int Ie, int Is, int n_max,
                     float *buf) {
    size_t used = 0;
    int ovf = 0;
#define TAKE(field, count)                                                       \
    do {                                                                         \
        size_t c_ = (count);                                                     \
        s->field = buf ? buf + used : NULL;                                      \
        ovf |= __builtin_add_overflow(used, c_, &used);                          \
    } while (0)
    size_t route;
    ovf |= __builtin_mul_overflow((size_t)n_max, (size_t)2 * (size_t)k, &route);
    TAKE(logits, (size_t)E);
    TAKE(prob, (size_t)E);
    TAKE(chosen, (size_t)k + 1);
    TAKE(gu, (size_t)2 * (size_t)Ie);
    TAKE(act, (size_t)imax(Ie, Is));
    TAKE(eo, (size_t)H);
    TAKE(sgate, (size_t)Is);
    TAKE(sup, (size_t)Is);
    TAKE(shared, (size_t)H);
    TAKE(route, route);
    TAKE(row, (size_t)imax(H, imax(Ie, Is)));
#undef TAKE
    return ovf ? SIZE_MAX : used;
}

size_t qc_ref_moe_scratch_floats(int H, int E, int k, int Ie, int Is, int n_max) {
    qc_ref_moe_scratch dummy;
    return layout(&dummy, H, E, k, Ie, Is, n_max, NULL);
}

void qc_ref_moe_scratch_init(qc_ref_moe_scratch *s, int H, int E, int k, int Ie, int Is,
                             int n_max, float *buf) {
    layout(s, H, E, k, Ie, Is, n_max, buf);
}

/* ===================================================================================== */
/* The block                                                                              */
/* ===================================================================================== */

/* Expert e's slice of a [E, rows, cols] tensor, as a 2-D [rows, cols] view. */
static qc_tensor expert_view(const qc_tensor *t, int e) {
    qc_tensor v = *t;
    const size_t per = (size_t)t->shape[1] * (size_t)t->shape[2] * qc_dtype_size(t->dtype);
    v.ndim = 2;
    v.shape[0] = t->shape[1];
    v.shape[1] = t->shape[2];
    v.shape[2] = 0;
    v.data = (const unsigned char *)t->data + (size_t)e * per;
    return v;
}

/* ---- the model's steps (qc_ref_moe_spec) ---- */

/* top-k: repeatedly the most probable expert not yet taken (ties: lower id). */
void qc_ref_moe_topk(const float *p, int E, int k, float *ids) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= (int)ids[q] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        ids[j] = (float)best;
    }
}

static float renormalised(float p, float psum) { return p / psum; }

static float sigmoid_gate(float logit) { return qc_ref_sigmoid(logit); }

/* out = routed + g * shared: the gate scales the shared expert only */
static void gate_shared(float *out, const float *s, float g, int H) {
    for (int i = 0; i < H; i++) out[i] = out[i] + g * s[i];
}

const qc_ref_moe_ops qc_ref_moe_spec = {qc_ref_moe_topk, renormalised, sigmoid_gate, gate_shared};

/* Router of one token: logits, fp32 softmax over all E, the top-k ids (descending p) and their
 * weights into route[2k]; the chosen ids ascending into s->chosen. */
static void route_token(const float *x, const qc_ref_moe_layer *L, qc_ref_moe_scratch *s,
                        float *route) {
    const int H = L->hidden, E = L->n_experts, k = L->top_k;
    qc_ref_matmul(s->logits, x, 1, H, E, L->router, s->row);

    /* softmax in float32: p_e = exp(l_e - max) / sum_e' exp(l_e' - max) */
    float mx = s->logits[0];
    for (int e = 1; e < E; e++) mx = s->logits[e] > mx ? s->logits[e] : mx;
    float sum = 0.0f;
    for (int e = 0; e < E; e++) sum += (s->prob[e] = expf(s->logits[e] - mx));
    for (int e = 0; e < E; e++) s->prob[e] = s->prob[e] / sum;

    /* top-k, descending p; w_j = p_j / (p_1 + ... + p_k) */
    float *ids = s->chosen; /* [k], descending p for now */
    L->ops->choose(s->prob, E, k, ids);
    float psum = 0.0f;
    for (int j = 0; j < k; j++) psum += s->prob[(int)ids[j]];
    for (int j = 0; j < k; j++) {
        route[j] = ids[j];
        route[k + j] = L->ops->weight(s->prob[(int)ids[j]], psum);
    }

    /* the experts are visited in ascending id (insertion sort of k ids) */
    for (int j = 1; j < k; j++)
        for (int q = j; q > 0 && ids[q - 1] > ids[q]; q--) {
            const float t = ids[q];
            ids[q] = ids[q - 1];
            ids[q - 1] = t;
        }
}

void qc_ref_moe(float *out, const float *x, int n, const qc_ref_moe_layer *L,
                qc_ref_moe_scratch *s) {
    const int H = L->hidden, k = L->top_k, Ie = L->expert_width, Is = L->shared_width;
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * H;
        float *ot = out + (size_t)t * H;
        float *route = s->route + (size_t)t * 2 * k;

        /* ---- router ---- */
        route_token(xt, L, s, route);

        /* ---- routed experts, ascending id: y = sum_e w_e * down_e(silu(gate_e x) * up_e x) */
        for (int i = 0; i < H; i++) ot[i] = 0.0f;
        for (int j = 0; j < k; j++) {
            const int e = (int)s->chosen[j];
            float w = 0.0f; /* this expert's weight: its slot in route */
            for (int q = 0; q < k; q++)
                if ((int)route[q] == e) w = route[k + q];
            const qc_tensor gu = expert_view(L->gate_up, e), dn = expert_view(L->down, e);
            qc_ref_matmul(s->gu, xt, 1, H, 2 * Ie, &gu, s->row); /* [gate (Ie) | up (Ie)] */
            for (int i = 0; i < Ie; i++) s->act[i] = qc_ref_silu(s->gu[i]) * s->gu[Ie + i];
            qc_ref_matmul(s->eo, s->act, 1, Ie, H, &dn, s->row);
            for (int i = 0; i < H; i++) ot[i] = ot[i] + s->eo[i] * w;
        }

        /* ---- shared expert, gated by one sigmoid scalar per token ---- */
        qc_ref_mlp(s->shared, xt, 1, H, Is, L->sh_gate, L->sh_up, L->sh_down, s->sgate, s->sup,
                   s->row);
        const float *gw = qc_ref_weight_row(L->sh_expert_gate, 0, H, s->eo);
        L->ops->combine(ot, s->shared, L->ops->gate(qc_ref_dot(xt, gw, H)), H);
    }
}
