"""Reduced-precision runtimes simulated in the float64 golden model (docs/tolerance-tiers.md).

A simulation rounds, at the points where a real runtime stores a value in a narrower type:
  - the weights: "f32" / "bf16" / "f16", or group-quantized "q8_0" / "q4_0" (blocks of 32
    along the input dimension, symmetric, one f16 scale per block, as llama.cpp's Q8_0 and
    Q4_0 do; a matrix whose input dimension is not a multiple of 32 falls back to f16, as
    llama.cpp falls back for such tensors). MoE: each expert of the stacked experts.* tensors
    is one matrix; the router (mlp.gate) and the shared-expert gate stay f32 under Q8_0 / Q4_0
    (llama.cpp leaves them unquantized), and are rounded like any matrix under bf16 / f16;
  - the activations: the embedding output, every norm output, every mixer / MLP (or MoE block:
    routed + shared experts; the router softmax and top-k are not stored) output and the
    residual stream after each layer ("f32" or "bf16");
  - the KV cache (k after its norm and RoPE, v) every time it is written ("f32" / "f16" / "bf16");
  - the DeltaNet conv and recurrent states at the end of every call ("f32" / "bf16").
Everything between those points stays float64, so the simulation is the golden model with
exactly these storage roundings and nothing else (no accumulation-order noise: the fp32 tier
covers that, measured by `calibrate` on real float32 backends).

SIMS names the simulated runtimes the tiers are derived from; BUGS are porting bugs that can be
injected on top of any simulation (for the tests: a tier must still reject them).
"""
import contextlib
import copy

import torch

from . import model as qmodel
from . import moe as qmoe

SIMS = {
    # name:     weights  activations  kv      state
    "f16-kv":  ("f32",   "f32",       "f16",  "f32"),
    "bf16-kv": ("f32",   "f32",       "bf16", "f32"),
    "bf16":    ("bf16",  "bf16",      "bf16", "f32"),
    "int8":    ("q8_0",  "f32",       "f16",  "f32"),
    "int4":    ("q4_0",  "f32",       "f16",  "f32"),
}

BUGS = {
    "rotary-dim": "RoPE rotates a wrong number of dims (all head dims instead of the partial "
                  "rotary_dim; half of them when every dim is rotated)",
    "norm-offset": "the zero-centred (1 + w) offset of the RMSNorms dropped (w used): every "
                   "input / post-attention / final norm and the attention q / k norms",
    "k-norm-offset": "the (1 + w) offset dropped in the attention k_norm only",
    "head-order": "query heads 0 and 1 swapped before o_proj (heads concatenated out of order)",
    "moe-no-renorm": "MoE models only: the top-k router weights not renormalised (the softmax "
                     "probabilities of the selected experts used as they are)",
}

QK = 32  # llama.cpp QK8_0 = QK4_0


# ------------------------------------------------------------------------------------------------
# Rounding
# ------------------------------------------------------------------------------------------------

_DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def rnd(x, kind):
    """x (float64) rounded to `kind` and back to float64 ("f64": unchanged)."""
    if kind == "f64":
        return x
    return x.to(_DT[kind]).to(torch.float64)


def quant_q8_0(w):
    """Q8_0 round trip of a [out, in] float64 matrix: per 32 inputs d = amax / 127,
    q = round(x / d) in [-127, 127], value = q * f16(d)."""
    o, n = w.shape
    b = w.to(torch.float32).reshape(o, n // QK, QK)
    d = b.abs().amax(-1, keepdim=True) / 127.0
    inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
    q = torch.round(b * inv)
    return (q * d.to(torch.float16).to(torch.float32)).to(torch.float64).reshape(o, n)


def quant_q4_0(w):
    """Q4_0 round trip: per 32 inputs, m = the value of largest magnitude (signed), d = m / -8,
    q = min(15, trunc(x / d + 8.5)) in [0, 15], value = (q - 8) * f16(d)."""
    o, n = w.shape
    b = w.to(torch.float32).reshape(o, n // QK, QK)
    idx = b.abs().argmax(-1, keepdim=True)
    m = torch.gather(b, -1, idx)
    d = m / -8.0
    inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
    q = torch.clamp(torch.trunc(b * inv + 8.5), max=15.0)
    return ((q - 8.0) * d.to(torch.float16).to(torch.float32)).to(torch.float64).reshape(o, n)


# MoE tensors llama.cpp's quantizer leaves in f32 whatever the type asked for: the router
# (ffn_gate_inp) and the shared-expert gate (ffn_gate_inp_shexp, a vector in GGUF).
_Q_KEEP_F32 = ("mlp.gate.weight", "mlp.shared_expert_gate.weight")


def _is_matrix(name, w):
    """A weight stored in the runtime's weight type: a 2-D matrix, or a 3-D stack of expert
    matrices [E, out, in] (mlp.experts.*); not the conv kernel [C, 1, K]."""
    return w.ndim == 2 or (w.ndim == 3 and ".mlp.experts." in name)


def _round_matrix(name, w, kind, fallback):
    """One matrix (or expert stack, per expert along its input dimension) in `kind`."""
    if kind in ("bf16", "f16"):
        return rnd(w, kind)
    if name.endswith(_Q_KEEP_F32):
        return rnd(w, "f32")
    if w.shape[-1] % QK:
        fallback.append(name)
        return rnd(w, "f16")
    q = quant_q8_0 if kind == "q8_0" else quant_q4_0
    return q(w.reshape(-1, w.shape[-1])).reshape(w.shape)


def round_weights(W, kind):
    """A new weight dict: matrices (2-D, and the 3-D expert stacks of a MoE model, each expert
    on its own) in `kind`; 1-D (norms, A_log, dt_bias) and the conv kernel stay float32 (as
    llama.cpp keeps them); with a quantized kind the MoE router and shared-expert gate stay f32
    (llama.cpp does not quantize them; with bf16 / f16 they are rounded like every matrix).
    Returns (W', fallbacks: names kept f16)."""
    out, fallback, seen = {}, [], {}
    for name, w in W.items():
        if id(w) in seen:                       # tied lm_head: the same tensor, once
            out[name] = seen[id(w)]
            continue
        if kind == "f64":
            v = w
        elif not _is_matrix(name, w) or kind == "f32":
            v = rnd(w, "f32")
        else:
            v = _round_matrix(name, w, kind, fallback)
        seen[id(w)] = v
        out[name] = v
    return out, fallback


# ------------------------------------------------------------------------------------------------
# Bugs (applied to the weights / config of the simulated model)
# ------------------------------------------------------------------------------------------------

def inject_bug(cfg, W, bug):
    """(cfg', W') with the porting bug `bug` (a key of BUGS) built in."""
    cfg, W = copy.copy(cfg), dict(W)
    if bug == "rotary-dim":
        cfg.partial_rotary_factor = 1.0 if cfg.rotary_dim < cfg.head_dim else 0.5
    elif bug in ("norm-offset", "k-norm-offset"):
        ends = ("self_attn.k_norm.weight",) if bug == "k-norm-offset" else (
            "input_layernorm.weight", "post_attention_layernorm.weight",
            "self_attn.q_norm.weight", "self_attn.k_norm.weight")
        for k in [k for k in W if k.endswith(ends) or (bug == "norm-offset" and k == "norm.weight")]:
            W[k] = W[k] - 1.0                   # (1 + (w - 1)) = w: the offset dropped
    elif bug == "head-order":
        hd = cfg.head_dim
        for k in [k for k in W if k.endswith("self_attn.o_proj.weight")]:
            w = W[k].clone()
            w[:, 0:hd], w[:, hd:2 * hd] = W[k][:, hd:2 * hd], W[k][:, 0:hd]
            W[k] = w
    elif bug == "moe-no-renorm":
        if not getattr(cfg, "is_moe", False):
            raise ValueError("bug moe-no-renorm: the model is not a MoE model (no router)")
    else:
        raise ValueError("unknown bug %r (one of %s)" % (bug, ", ".join(sorted(BUGS))))
    return cfg, W


# ------------------------------------------------------------------------------------------------
# The simulated model
# ------------------------------------------------------------------------------------------------

class _RoundingDict(dict):
    """A layer state whose stored tensors are rounded on every write."""

    def __init__(self, d, kinds):
        super().__init__(d)
        self.kinds = kinds
        for k in list(d):
            if k in kinds and torch.is_tensor(d[k]):
                super().__setitem__(k, rnd(d[k], kinds[k]))

    def __setitem__(self, k, v):
        if k in self.kinds and torch.is_tensor(v):
            v = rnd(v, self.kinds[k])
        super().__setitem__(k, v)


@contextlib.contextmanager
def _rounded_activations(kind):
    """Round the outputs of the norms, mixers, MLPs (dense, or the MoE block: routed + shared
    experts) and layers while inside. The router probabilities are not stored: the softmax and
    top-k stay in the golden's precision (a runtime computes them in f32 by definition)."""
    names = ("rms_norm_1p", "rms_norm_gated", "gated_attention", "gated_deltanet", "mlp",
             "decoder_layer")
    saved = {n: getattr(qmodel, n) for n in names}
    saved_moe = qmoe.moe_block

    def wrap(f):
        return lambda *a, **k: rnd(f(*a, **k), kind)

    def wrap_moe(*a, **k):
        out, rec = saved_moe(*a, **k)
        return rnd(out, kind), rec
    try:
        for n in names:
            setattr(qmodel, n, wrap(saved[n]))
        qmoe.moe_block = wrap_moe
        yield
    finally:
        for n in names:
            setattr(qmodel, n, saved[n])
        qmoe.moe_block = saved_moe


@contextlib.contextmanager
def _no_renorm(active):
    """Bug moe-no-renorm while inside (if active): moe.route returns the selected experts'
    softmax probabilities as their weights, not renormalised to sum to 1."""
    saved = qmoe.route

    def route(x, wr, k):
        ids, _, margins, probs = saved(x, wr, k)
        return ids, torch.gather(probs, -1, ids), margins, probs
    try:
        if active:
            qmoe.route = route
        yield
    finally:
        qmoe.route = saved


class SimModel(qmodel.Model):
    """qmodel.Model with the storage roundings of simulation `sim` (a key of SIMS) and
    optionally one injected bug."""

    def __init__(self, cfg, weights, sim, bug=None):
        if sim not in SIMS:
            raise ValueError("unknown simulation %r (one of %s)" % (sim, ", ".join(SIMS)))
        wk, self.act, self.kv, self.st = SIMS[sim]
        if bug:
            cfg, weights = inject_bug(cfg, weights, bug)
        W, self.fallback = round_weights(weights, wk)
        super().__init__(cfg, W)
        self.sim, self.bug = sim, bug

    def new_state(self):
        s = super().new_state()
        kinds = {"k_cache": self.kv, "v_cache": self.kv, "conv_state": self.st,
                 "recurrent_state": self.st}
        s.layers = [_RoundingDict(d, kinds) for d in s.layers]
        return s

    def forward(self, tokens, state, kernel="auto", collect_hidden=False, moe_trace=None):
        with _rounded_activations(self.act), _no_renorm(self.bug == "moe-no-renorm"):
            logits, hidden = super().forward(tokens, state, kernel, collect_hidden, moe_trace)
        return rnd(logits, "f32"), hidden
