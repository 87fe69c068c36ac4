/* qc_ref_moe.h — the scalar reference mixture-of-experts block of Qwen3.5-MoE (the MLP of every
 * layer of a MoE model; docs/qwen35-model.md "MoE"). Plain fp32 in the style of
 * qc_ref_blocks.h: sums left to right, libm float functions, -ffp-contract=off, no threads,
 * no allocation (the backend carves the scratch once at create).
 */
#ifndef QC_REF_MOE_H
#define QC_REF_MOE_H

#include <stddef.h>

#include "qc/qc_model.h"

/* The steps of the block that a port can get wrong, as a table (qc_ref_moe_spec: the model;
 * the self-test's variants live in qc_ref_faults.c, reached through the backend's set_option:
 * the kernel itself has no fault branch). */
typedef struct {
    /* ids[0..k) := the k experts of highest p[0..E), descending (equal p: the lower id first);
     * ids has room for k + 1 */
    void (*choose)(const float *p, int E, int k, float *ids);
    /* the weight of a chosen expert of probability p (psum: the chosen ones' sum) */
    float (*weight)(float p, float psum);
    /* the shared expert's gate from its logit sh_expert_gate . x */
    float (*gate)(float logit);
    /* out[H] (the routed experts' sum) := the block's output with the shared expert's
     * output s[H] and its gate g */
    void (*combine)(float *out, const float *s, float g, int H);
} qc_ref_moe_ops;

/* The model (docs/qwen35-model.md "MoE"): top-k, renormalised, sigmoid gate on the shared
 * expert only. */
extern const qc_ref_moe_ops qc_ref_moe_spec;

/* The top-k step of qc_ref_moe_spec (a variant may build on it). */
void qc_ref_moe_topk(const float *p, int E, int k, float *ids);

/* Geometry and weights of one MoE block (views of the model's tensors). */
typedef struct {
    int hidden;        /* H */
    int n_experts;     /* E */
    int top_k;         /* k, 1..E */
    int expert_width;  /* Ie: SwiGLU width of one routed expert */
    int shared_width;  /* Is: SwiGLU width of the shared expert */
    const qc_tensor *router;         /* [E, H] */
    const qc_tensor *gate_up;        /* [E, 2*Ie, H], rows per expert [gate | up] */
    const qc_tensor *down;           /* [E, H, Ie] */
    const qc_tensor *sh_gate, *sh_up; /* [Is, H] */
    const qc_tensor *sh_down;        /* [H, Is] */
    const qc_tensor *sh_expert_gate; /* [1, H] */
    const qc_ref_moe_ops *ops; /* &qc_ref_moe_spec (a test variant: qc_ref_faults.c) */
} qc_ref_moe_layer;

/* Scratch of qc_ref_moe for up to n_max tokens (carved by qc_ref_moe_scratch_init). */
typedef struct {
    float *logits;  /* [E] router logits of one token */
    float *prob;    /* [E] router probabilities (fp32 softmax over all E) */
    float *chosen;  /* [k] the chosen expert ids (exact small integers), ascending */
    float *gu;      /* [2*Ie] one expert's gate | up projections */
    float *act;     /* [max(Ie, Is)] silu(gate) * up */
    float *eo;      /* [H] one expert's output */
    float *sgate;   /* [Is] shared expert gate projection */
    float *sup;     /* [Is] shared expert up projection */
    float *shared;  /* [H] shared expert output (before its sigmoid gate) */
    float *route;   /* [n_max, 2k] per token: the k chosen ids in descending probability,
                       then their k weights (the "router_topk" trace rows) */
    float *row;     /* [max(H, Ie, Is)] one widened weight row */
} qc_ref_moe_scratch;

/* Floats qc_ref_moe_scratch_init carves for (H, E, k, Ie, Is, n_max); SIZE_MAX on overflow. */
size_t qc_ref_moe_scratch_floats(int H, int E, int k, int Ie, int Is, int n_max);
/* Point s's arrays into buf[qc_ref_moe_scratch_floats(...)]. */
void qc_ref_moe_scratch_init(qc_ref_moe_scratch *s, int H, int E, int k, int Ie, int Is,
                             int n_max, float *buf);

/* The MoE block over n tokens (x = the post-attention-normed input [n, H]) into out[n, H]
 * (out must not alias x). Per token:
 *   logits = Wr x;  p = softmax(logits) (fp32, over all E);
 *   top-k: the k largest p, descending (equal p: the lower expert id first);
 *   w_j = p_j / (p_1 + ... + p_k)                       (always renormalised);
 *   y = sum over the chosen experts e in ASCENDING id of w_e * down_e(silu(gate_e x) * up_e x)
 *       (accumulated from 0, in that order: Hugging Face's eager loop);
 *   s = sh_down(silu(sh_gate x) * sh_up x);  g = sigmoid(sh_expert_gate . x);
 *   out = y + g * s                                      (the gate scales the shared expert only)
 * and route[t] = [ids in descending p | their weights]. */
void qc_ref_moe(float *out, const float *x, int n, const qc_ref_moe_layer *L,
                qc_ref_moe_scratch *s);

#endif /* QC_REF_MOE_H */
