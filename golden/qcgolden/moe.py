"""The Qwen3.5 MoE block in float64 (replaces the dense MLP in every layer of a MoE model).

Per token row x = post_attention_layernorm(h) (Hugging Face's Qwen3_5MoeSparseMoeBlock,
paraphrased in docs/qwen35-model.md "MoE"):

    logits = x @ Wr^T                      router  mlp.gate.weight [E, H], no bias
    p      = softmax(logits) over all E    (HF: float32; here float64, the golden's precision)
    idx    = the k largest p, descending   (torch.topk; our data has no near-ties, see below)
    w      = p[idx] / sum(p[idx])          ALWAYS renormalised (Qwen3.5-MoE has no switch)
    y      = sum over the selected experts e, in ascending expert id (HF's eager order), of
             w_e * down_e(silu(gate_e x) * up_e x)
             with experts.gate_up_proj [E, 2Ie, H] (rows 0..Ie-1 gate, Ie..2Ie-1 up) and
             experts.down_proj [E, H, Ie]
    s      = shared_expert.down(silu(shared_expert.gate x) * shared_expert.up x)
             * sigmoid(shared_expert_gate.weight . x)     (a per-token scalar, shared expert only)
    out    = y + s                         (the decoder adds it to the residual)

The router record of a call: the k expert ids in descending probability, their renormalised
weights, and the margin p_k - p_{k+1} (the gap between the k-th and the (k+1)-th largest
probability; with k = E there is no (k+1)-th and the margin is p_k). A runtime whose router
probabilities differ from the golden's by less than half the margin chooses the same experts;
goldens.py picks prompts whose every router decision has margin >= ROUTER_MARGIN_THRESHOLD.
"""
import torch
import torch.nn.functional as F


def route(x, wr, k):
    """x [T, H], wr [E, H] -> (ids int64 [T, k] descending probability, weights [T, k]
    renormalised, margins [T] = p_k - p_{k+1}, probabilities [T, E])."""
    probs = torch.softmax(x @ wr.T, dim=-1)
    E = probs.shape[-1]
    top, ids = torch.topk(probs, min(k + 1, E), dim=-1, largest=True, sorted=True)
    margins = top[:, k - 1] - (top[:, k] if k < E else 0.0)
    pk = top[:, :k]
    return ids[:, :k], pk / pk.sum(-1, keepdim=True), margins, probs


def swiglu(x, w_gate, w_up, w_down):
    """down(silu(gate x) * up x) for rows x [n, H]; weights [I, H], [I, H], [H, I]."""
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def routed_experts(x, ids, weights, gate_up, down):
    """sum_j weights[t, j] * expert_{ids[t, j]}(x[t]) for every row t, experts visited in
    ascending id (each expert's rows at once, added with index_add_ as HF's eager loop)."""
    Ie = gate_up.shape[1] // 2
    y = torch.zeros_like(x)
    for e in sorted(set(int(i) for i in ids.flatten())):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        out = swiglu(x[tok], gate_up[e, :Ie], gate_up[e, Ie:], down[e])
        y.index_add_(0, tok, out * weights[tok, slot, None])
    return y


def shared_expert(x, W, p):
    """The shared expert gated by sigmoid(shared_expert_gate . x), one scalar per row."""
    s = swiglu(x, W[p + "shared_expert.gate_proj.weight"], W[p + "shared_expert.up_proj.weight"],
               W[p + "shared_expert.down_proj.weight"])
    return s * torch.sigmoid(x @ W[p + "shared_expert_gate.weight"].T)


def moe_block(x, W, p, cfg):
    """x [T, H] (already post_attention_layernorm'd), p = "layers.N.mlp." ->
    (out [T, H], record {"ids" [T, k] int64, "weights" [T, k], "margins" [T]})."""
    ids, weights, margins, _ = route(x, W[p + "gate.weight"], cfg.num_experts_per_tok)
    y = routed_experts(x, ids, weights, W[p + "experts.gate_up_proj"], W[p + "experts.down_proj"])
    return y + shared_expert(x, W, p), {"ids": ids, "weights": weights, "margins": margins}
