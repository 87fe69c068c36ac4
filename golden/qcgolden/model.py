"""The Qwen3.5 text model (dense, or MoE: moe.py) in float64 (docs/qwen35-model.md 4-9), with its state (10).

One function per block, mirroring the doc. `Model.forward(tokens, state)` runs T tokens at
positions state.pos .. state.pos + T - 1, updates the state in place and returns the logits of
every position (and, on request, the hidden states in the HF convention).

Kernel choice follows HF (doc 8.8): the chunked gated delta rule whenever the layer has no
previous state or T > 1 (starting from the cached state: the fixed HF behaviour of
transformers#45513), the token recurrence for a single-token call with a previous state.
"""
import numpy as np
import torch
import torch.nn.functional as F

from . import checkpoint
from . import config as qconfig
from . import deltarule
from . import moe

L2NORM_EPS = 1e-6  # fixed, not rms_norm_eps (docs/qwen35-model.md 6.3)


# ------------------------------------------------------------------------------------------------
# Norms (docs/qwen35-model.md 6)
# ------------------------------------------------------------------------------------------------

def rms_norm_1p(x, w, eps):
    """Zero-centred RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w), over the last dim."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def rms_norm_gated(x, w, z, eps):
    """Gated RMSNorm per value head: w * RMSNorm(x) * silu(z); w is a plain multiplier (no +1)."""
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * F.silu(z)


def l2norm(x, eps=L2NORM_EPS):
    """x * rsqrt(sum(x^2) + eps) over the last dim."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


# ------------------------------------------------------------------------------------------------
# RoPE (docs/qwen35-model.md 7.3): rotate-half on the first rd dims, pairs (j, j + rd/2)
# ------------------------------------------------------------------------------------------------

def rope_cos_sin(positions, rd, theta):
    """cos, sin [T, rd] for integer positions [T]."""
    inv_freq = 1.0 / theta ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd)
    f = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat([f, f], dim=-1)
    return torch.cos(emb), torch.sin(emb)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    """x [T, heads, hd]; rotates the first rd = cos.shape[-1] dims, passes the rest through."""
    rd = cos.shape[-1]
    xr, xp = x[..., :rd], x[..., rd:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([xr * c + rotate_half(xr) * s, xp], dim=-1)


# ------------------------------------------------------------------------------------------------
# Gated full attention (docs/qwen35-model.md 7)
# ------------------------------------------------------------------------------------------------

def gated_attention(u, W, p, cfg, st, positions):
    """u [T, H] -> [T, H]; appends the new keys (post norm + RoPE) and values to st."""
    T = u.shape[0]
    nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    qg = (u @ W[p + "q_proj.weight"].T).view(T, nh, 2 * hd)   # per-head [query | gate]
    q, gate = qg[..., :hd], qg[..., hd:].reshape(T, nh * hd)
    q = rms_norm_1p(q, W[p + "q_norm.weight"], cfg.rms_norm_eps)
    k = rms_norm_1p((u @ W[p + "k_proj.weight"].T).view(T, nkv, hd), W[p + "k_norm.weight"],
                    cfg.rms_norm_eps)
    v = (u @ W[p + "v_proj.weight"].T).view(T, nkv, hd)
    cos, sin = rope_cos_sin(positions, cfg.rotary_dim, cfg.rope_theta)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)

    st["k_cache"] = torch.cat([st["k_cache"], k.transpose(0, 1)], dim=1)  # [nkv, P+T, hd]
    st["v_cache"] = torch.cat([st["v_cache"], v.transpose(0, 1)], dim=1)
    rep = nh // nkv                                               # query head h -> kv head h // rep
    keys = st["k_cache"].repeat_interleave(rep, dim=0)            # [nh, P+T, hd]
    vals = st["v_cache"].repeat_interleave(rep, dim=0)
    scores = (q.transpose(0, 1) @ keys.transpose(1, 2)) * hd ** -0.5   # [nh, T, P+T]
    key_pos = torch.arange(keys.shape[1])
    scores = scores.masked_fill(key_pos[None, None, :] > positions[None, :, None], float("-inf"))
    attn = torch.softmax(scores, dim=-1) @ vals                   # [nh, T, hd]
    attn = attn.transpose(0, 1).reshape(T, nh * hd) * torch.sigmoid(gate)
    return attn @ W[p + "o_proj.weight"].T


# ------------------------------------------------------------------------------------------------
# Gated DeltaNet (docs/qwen35-model.md 8)
# ------------------------------------------------------------------------------------------------

def causal_conv(x, w, conv_state):
    """Depthwise causal conv over time, no bias, BEFORE the activation.
    x [T, C] new projection columns, w [C, 1, K], conv_state [C, K] (the last K input columns,
    oldest first). Returns (y [T, C], new conv_state = last K columns of [state | x])."""
    K = w.shape[-1]
    xs = torch.cat([conv_state, x.T], dim=1)                      # [C, K + T]
    windows = xs.unfold(1, K, 1)[:, 1:]                           # [C, T, K]: cols t+1 .. t+K
    y = (windows * w[:, 0, None, :]).sum(-1)                      # w[..., K-1] = current token
    return y.T, xs[:, -K:].clone()


def gated_deltanet(u, W, p, cfg, st, kernel):
    """u [T, H] -> [T, H]; updates st["conv_state"], st["recurrent_state"]."""
    T = u.shape[0]
    nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    mixed = u @ W[p + "in_proj_qkv.weight"].T                     # [T, C]
    z = (u @ W[p + "in_proj_z.weight"].T).view(T, nv, dv)
    b = u @ W[p + "in_proj_b.weight"].T                           # [T, nv]
    a = u @ W[p + "in_proj_a.weight"].T

    y, st["conv_state"] = causal_conv(mixed, W[p + "conv1d.weight"], st["conv_state"])
    y = F.silu(y)
    q = y[:, :cfg.key_dim].view(T, nk, dk)
    k = y[:, cfg.key_dim:2 * cfg.key_dim].view(T, nk, dk)
    v = y[:, 2 * cfg.key_dim:].view(T, nv, dv)

    beta = torch.sigmoid(b)
    g = -torch.exp(W[p + "A_log"]) * F.softplus(a + W[p + "dt_bias"], beta=1, threshold=20)

    q = l2norm(q) * dk ** -0.5
    k = l2norm(k)
    r = nv // nk                                                  # value head j -> key head j // r
    q = q.repeat_interleave(r, dim=1)
    k = k.repeat_interleave(r, dim=1)

    use_chunk = kernel == "chunk" or (kernel == "auto" and (T > 1 or not st["has_previous"]))
    rule = deltarule.chunked if use_chunk else deltarule.recurrent
    o, st["recurrent_state"] = rule(q, k, v, g, beta, st["recurrent_state"])
    st["has_previous"] = True

    o = rms_norm_gated(o, W[p + "norm.weight"], z, cfg.rms_norm_eps)
    return o.reshape(T, nv * dv) @ W[p + "out_proj.weight"].T


# ------------------------------------------------------------------------------------------------
# MLP (docs/qwen35-model.md 9) and the decoder skeleton (4)
# ------------------------------------------------------------------------------------------------

def mlp(x, W, p):
    """down_proj(silu(gate_proj(x)) * up_proj(x))."""
    return (F.silu(x @ W[p + "gate_proj.weight"].T) * (x @ W[p + "up_proj.weight"].T)) \
        @ W[p + "down_proj.weight"].T


def decoder_layer(h, i, W, cfg, st, positions, kernel, moe_trace=None):
    """One layer; a MoE model's MLP is the MoE block (moe.py). moe_trace (a list): gets (the
    residual after the mixer = the MLP block's input, the router record; None for a dense
    model) appended."""
    p = "layers.%d." % i
    u = rms_norm_1p(h, W[p + "input_layernorm.weight"], cfg.rms_norm_eps)
    if cfg.layer_types[i] == qconfig.LINEAR:
        u = gated_deltanet(u, W, p + "linear_attn.", cfg, st, kernel)
    else:
        u = gated_attention(u, W, p + "self_attn.", cfg, st, positions)
    h = h + u
    x = rms_norm_1p(h, W[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
    if not cfg.is_moe:
        if moe_trace is not None:
            moe_trace.append((h, None))
        return h + mlp(x, W, p + "mlp.")
    out, rec = moe.moe_block(x, W, p + "mlp.", cfg)
    if moe_trace is not None:
        moe_trace.append((h, rec))
    return h + out


# ------------------------------------------------------------------------------------------------
# State (docs/qwen35-model.md 10, "Canonical state layouts"; float64 here)
# ------------------------------------------------------------------------------------------------

class State:
    """Per-layer caches + position counter. Full layers: k_cache / v_cache [nkv, pos, hd];
    linear layers: conv_state [C, K], recurrent_state [nv, dk, dv], has_previous."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.pos = 0
        self.layers = []
        for kind in cfg.layer_types:
            if kind == qconfig.FULL:
                e = torch.zeros(cfg.num_key_value_heads, 0, cfg.head_dim)
                self.layers.append({"k_cache": e.clone(), "v_cache": e.clone()})
            else:
                self.layers.append({
                    "conv_state": torch.zeros(cfg.conv_dim, cfg.linear_conv_kernel_dim),
                    "recurrent_state": torch.zeros(cfg.linear_num_value_heads,
                                                   cfg.linear_key_head_dim,
                                                   cfg.linear_value_head_dim),
                    "has_previous": False})

    def clone(self):
        c = State.__new__(State)
        c.cfg, c.pos = self.cfg, self.pos
        c.layers = [{k: (v.clone() if torch.is_tensor(v) else v) for k, v in d.items()}
                    for d in self.layers]
        return c

    def arrays(self):
        """{"layer_NN": {name: float64 numpy array}} (the golden's state group)."""
        return {"layer_%02d" % i: {k: v.numpy().copy() for k, v in d.items() if torch.is_tensor(v)}
                for i, d in enumerate(self.layers)}


# ------------------------------------------------------------------------------------------------
# Model
# ------------------------------------------------------------------------------------------------

class Model:
    def __init__(self, cfg, weights):
        self.cfg = cfg
        self.W = weights

    @classmethod
    def from_dir(cls, model_dir):
        cfg, weights, _ = checkpoint.load(model_dir)
        return cls(cfg, weights)

    def new_state(self):
        return State(self.cfg)

    def forward(self, tokens, state, kernel="auto", collect_hidden=False, moe_trace=None):
        """tokens: ints [T] at positions state.pos ..; kernel: auto | chunk | recurrent.
        Returns (logits [T, V], hidden [L+1, T, H] or None) as float64 tensors; hidden[0] is the
        embedding output, hidden[i] the output of layer i-1, hidden[L] the final-norm output.
        moe_trace (a dict): filled with float64 numpy "moe_in" [L, T, H] (the residual after
        each mixer), "topk_ids" int64 [L, T, k], "topk_weights" [L, T, k], "router_margins"
        [L, T] (moe.py) for a MoE model; with "mlp_in" [L, T, H] (the same residual, the
        input of the dense MLP block) for a dense one.
        (stream.py runs the same steps layer-major for many calls: token_ids, decoder_layer,
        store_moe_trace, rms_norm_1p, the lm_head product.)"""
        cfg = self.cfg
        ids = token_ids(tokens, cfg)
        positions = state.pos + torch.arange(ids.numel())
        h = self.W["embed_tokens.weight"][ids]                    # plain gather, no scaling
        hidden = [h]
        layers = [] if moe_trace is not None else None
        for i in range(cfg.num_hidden_layers):
            h = decoder_layer(h, i, self.W, cfg, state.layers[i], positions, kernel, layers)
            hidden.append(h)
        if layers is not None:
            store_moe_trace(layers, moe_trace)
        h = rms_norm_1p(h, self.W["norm.weight"], cfg.rms_norm_eps)
        hidden[-1] = h
        state.pos += ids.numel()
        logits = h @ self.W["lm_head.weight"].T
        return logits, (torch.stack(hidden) if collect_hidden else None)


def token_ids(tokens, cfg):
    """The int64 tensor [T] of a forward call's tokens; ValueError when empty or out of range."""
    ids = torch.as_tensor(np.asarray(tokens, dtype=np.int64))
    if ids.ndim != 1 or ids.numel() == 0:
        raise ValueError("tokens must be a non-empty 1-D sequence")
    if int(ids.min()) < 0 or int(ids.max()) >= cfg.vocab_size:
        raise ValueError("token id outside [0, %d)" % cfg.vocab_size)
    return ids


def store_moe_trace(layers, moe_trace):
    """Model.forward's moe_trace dict from decoder_layer's [(residual after the mixer, router
    record)] per layer: "moe_in" and the router record (MoE), or "mlp_in" (dense: no record)."""
    mixed = torch.stack([m for m, _ in layers]).numpy()
    if layers[0][1] is None:
        moe_trace["mlp_in"] = mixed
        return
    moe_trace["moe_in"] = mixed
    for key, name in (("ids", "topk_ids"), ("weights", "topk_weights"),
                      ("margins", "router_margins")):
        moe_trace[name] = torch.stack([r[key] for _, r in layers]).numpy()
