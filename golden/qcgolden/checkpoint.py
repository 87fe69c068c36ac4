"""Weights of a Hugging Face Qwen3.5 checkpoint, by canonical text-model name, as float64.

Canonical names drop the `model.language_model.` / `model.` prefix: `embed_tokens.weight`,
`norm.weight`, `layers.{i}.…`, `lm_head.weight` (docs/qwen35-model.md 3). `model.visual.*`, `mtp.*` are
skipped (and counted); any other unknown tensor, any missing tensor and any shape that does not
match the config is an error naming file and tensor. The legacy Qwen3-Next packed layout
(`in_proj_qkvz`, `in_proj_ba`) is split into the Qwen3.5 tensors (docs/qwen35-model.md 3.4).
"""
import json
import os

import numpy as np
import torch

from . import config as qconfig
from . import q8_0
from . import safetensors

SKIP_PREFIXES = ("model.visual.", "mtp.")
TEXT_PREFIXES = ("model.language_model.", "model.")


class CheckpointError(ValueError):
    """A checkpoint that does not match its config (message names file and tensor)."""


# ------------------------------------------------------------------------------------------------
# Expected tensors
# ------------------------------------------------------------------------------------------------

def expected_shapes(cfg):
    """{canonical name: shape} of the split (Qwen3.5) layout, lm_head included when untied."""
    H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    s = {"embed_tokens.weight": (V, H), "norm.weight": (H,)}
    if not cfg.tie_word_embeddings:
        s["lm_head.weight"] = (V, H)
    for i, kind in enumerate(cfg.layer_types):
        p = "layers.%d." % i
        s[p + "input_layernorm.weight"] = (H,)
        s[p + "post_attention_layernorm.weight"] = (H,)
        if cfg.is_moe:
            s.update(moe_shapes(cfg, p + "mlp."))
        else:
            s[p + "mlp.gate_proj.weight"] = (I, H)
            s[p + "mlp.up_proj.weight"] = (I, H)
            s[p + "mlp.down_proj.weight"] = (H, I)
        if kind == qconfig.LINEAR:
            a = p + "linear_attn."
            nv, dv = cfg.linear_num_value_heads, cfg.linear_value_head_dim
            s[a + "in_proj_qkv.weight"] = (cfg.conv_dim, H)
            s[a + "in_proj_z.weight"] = (cfg.value_dim, H)
            s[a + "in_proj_b.weight"] = (nv, H)
            s[a + "in_proj_a.weight"] = (nv, H)
            s[a + "conv1d.weight"] = (cfg.conv_dim, 1, cfg.linear_conv_kernel_dim)
            s[a + "dt_bias"] = (nv,)
            s[a + "A_log"] = (nv,)
            s[a + "norm.weight"] = (dv,)
            s[a + "out_proj.weight"] = (H, cfg.value_dim)
        else:
            a = p + "self_attn."
            nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
            s[a + "q_proj.weight"] = (2 * nh * hd, H)
            s[a + "k_proj.weight"] = (nkv * hd, H)
            s[a + "v_proj.weight"] = (nkv * hd, H)
            s[a + "o_proj.weight"] = (H, nh * hd)
            s[a + "q_norm.weight"] = (hd,)
            s[a + "k_norm.weight"] = (hd,)
    return s


def moe_shapes(cfg, p):
    """{canonical name: shape} of one layer's MoE block (prefix p = "layers.N.mlp."), the hub
    layout: fused experts without a .weight suffix."""
    H, E = cfg.hidden_size, cfg.num_experts
    Ie, Is = cfg.moe_intermediate_size, cfg.shared_expert_intermediate_size
    return {p + "gate.weight": (E, H),
            p + "experts.gate_up_proj": (E, 2 * Ie, H),     # rows [gate (Ie) | up (Ie)]
            p + "experts.down_proj": (E, H, Ie),
            p + "shared_expert.gate_proj.weight": (Is, H),
            p + "shared_expert.up_proj.weight": (Is, H),
            p + "shared_expert.down_proj.weight": (H, Is),
            p + "shared_expert_gate.weight": (1, H)}


PER_EXPERT = ("gate_proj.weight", "up_proj.weight", "down_proj.weight")


def per_expert_name(p, e, which):
    """layers.N.mlp.experts.{e}.{gate,up,down}_proj.weight (the older per-expert layout)."""
    return "%sexperts.%d.%s" % (p, e, which)


def fuse_experts(raw, where, cfg, model_dir):
    """The per-expert layout (experts.{e}.{gate,up,down}_proj.weight) -> the fused hub tensors
    experts.gate_up_proj [E, 2Ie, H] (gate rows then up rows) and experts.down_proj [E, H, Ie],
    in place; both layouts in one layer, a missing expert or an expert id >= E is an error."""
    E, H, Ie = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
    for i in range(cfg.num_hidden_layers):
        p = "layers.%d.mlp." % i
        mine = sorted(c for c in raw if c.startswith(p + "experts.") and
                      c[len(p + "experts."):].split(".")[0].isdigit())
        if not mine:
            continue
        for fused in (p + "experts.gate_up_proj", p + "experts.down_proj"):
            if fused in raw:
                raise CheckpointError("%s: %s: the per-expert layout (%s) and the fused layout "
                                      "in one layer" % (where[mine[0]], fused, mine[0]))
        for c in mine:
            e, _, which = c[len(p + "experts."):].partition(".")
            if int(e) >= E or e != str(int(e)) or which not in PER_EXPERT:
                raise CheckpointError("%s: %s: unknown tensor (num_experts is %d)"
                                      % (where[c], c, E))
        gate, up, down = [], [], []
        for e in range(E):
            for which, lst, shape in ((PER_EXPERT[0], gate, (Ie, H)), (PER_EXPERT[1], up, (Ie, H)),
                                      (PER_EXPERT[2], down, (H, Ie))):
                n = per_expert_name(p, e, which)
                if n not in raw:
                    raise CheckpointError("%s: missing tensor %s (per-expert layout, %d experts)"
                                          % (model_dir, n, E))
                if tuple(raw[n].shape) != shape:
                    raise CheckpointError("%s: %s: shape %s != %s"
                                          % (where[n], n, list(raw[n].shape), list(shape)))
                lst.append(raw.pop(n))
                src = where.pop(n)
        raw[p + "experts.gate_up_proj"] = np.concatenate([np.stack(gate), np.stack(up)], axis=1)
        raw[p + "experts.down_proj"] = np.stack(down)
        where[p + "experts.gate_up_proj"] = where[p + "experts.down_proj"] = src


# ------------------------------------------------------------------------------------------------
# Legacy packed layout (Qwen3-Next), docs/qwen35-model.md 3.4
# ------------------------------------------------------------------------------------------------

def split_qkvz(w, cfg):
    """in_proj_qkvz [2*key_dim + 2*value_dim, H] (grouped by key head) -> (in_proj_qkv, in_proj_z)."""
    nk, dk, dv = cfg.linear_num_key_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    r = cfg.linear_num_value_heads // nk
    g = w.reshape(nk, 2 * dk + 2 * r * dv, w.shape[-1])
    q = g[:, :dk]
    k = g[:, dk:2 * dk]
    v = g[:, 2 * dk:2 * dk + r * dv]
    z = g[:, 2 * dk + r * dv:]
    H = w.shape[-1]
    qkv = np.concatenate([q.reshape(nk * dk, H), k.reshape(nk * dk, H), v.reshape(nk * r * dv, H)])
    return qkv, z.reshape(nk * r * dv, H)


def split_ba(w, cfg):
    """in_proj_ba [2*nv, H] (rows [b_g (r), a_g (r)] per key head g) -> (in_proj_b, in_proj_a)."""
    nk = cfg.linear_num_key_heads
    r = cfg.linear_num_value_heads // nk
    g = w.reshape(nk, 2 * r, w.shape[-1])
    return g[:, :r].reshape(nk * r, -1), g[:, r:].reshape(nk * r, -1)


def pack_qkvz(qkv, z, cfg):
    """Inverse of split_qkvz (used by the writer for legacy-packed fixtures)."""
    nk, dk, dv = cfg.linear_num_key_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    r = cfg.linear_num_value_heads // nk
    H = qkv.shape[-1]
    kd = nk * dk
    q = qkv[:kd].reshape(nk, dk, H)
    k = qkv[kd:2 * kd].reshape(nk, dk, H)
    v = qkv[2 * kd:].reshape(nk, r * dv, H)
    zz = z.reshape(nk, r * dv, H)
    return np.concatenate([q, k, v, zz], axis=1).reshape(-1, H)


def pack_ba(b, a, cfg):
    """Inverse of split_ba."""
    nk = cfg.linear_num_key_heads
    r = cfg.linear_num_value_heads // nk
    H = b.shape[-1]
    return np.concatenate([b.reshape(nk, r, H), a.reshape(nk, r, H)], axis=1).reshape(-1, H)


# ------------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------------

def weight_files(model_dir):
    """The weight files of a checkpoint: the shards named by model.safetensors.index.json, else
    model.safetensors, else every *.safetensors; ascending file-name order."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            try:
                wm = json.load(f)["weight_map"]
            except (ValueError, KeyError, TypeError) as e:
                raise CheckpointError("%s: no weight_map (%s)" % (index, e))
        names = sorted(set(wm.values()))
    elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
        names = ["model.safetensors"]
    else:
        names = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    if not names:
        raise CheckpointError("%s: no *.safetensors weight files" % model_dir)
    for n in names:
        if not os.path.exists(os.path.join(model_dir, n)):
            raise CheckpointError("%s: shard %s listed in the index is missing" % (model_dir, n))
    return [os.path.join(model_dir, n) for n in names]


def canonical_name(name):
    """Canonical text-model name, or None for a known ignorable tensor."""
    if name.startswith(SKIP_PREFIXES):
        return None
    if name == "lm_head.weight":
        return name
    for p in TEXT_PREFIXES:
        if name.startswith(p):
            return name[len(p):]
    return name  # unknown: reported by load()


def split_legacy(raw, where, cfg):
    """Every legacy packed in_proj_qkvz / in_proj_ba of raw (canonical name -> array) split
    into the Qwen3.5 tensors, in place (load(), and lazyweights.py per layer)."""
    for c in sorted(raw):
        if c.endswith("linear_attn.in_proj_qkvz.weight"):
            p = c[:-len("in_proj_qkvz.weight")]
            want = (2 * cfg.key_dim + 2 * cfg.value_dim, cfg.hidden_size)
            if raw[c].shape != want:
                raise CheckpointError("%s: %s: shape %s != %s" % (where[c], c, list(raw[c].shape), list(want)))
            raw[p + "in_proj_qkv.weight"], raw[p + "in_proj_z.weight"] = split_qkvz(raw.pop(c), cfg)
            where[p + "in_proj_qkv.weight"] = where[p + "in_proj_z.weight"] = where[c]
        elif c.endswith("linear_attn.in_proj_ba.weight"):
            p = c[:-len("in_proj_ba.weight")]
            want = (2 * cfg.linear_num_value_heads, cfg.hidden_size)
            if raw[c].shape != want:
                raise CheckpointError("%s: %s: shape %s != %s" % (where[c], c, list(raw[c].shape), list(want)))
            raw[p + "in_proj_b.weight"], raw[p + "in_proj_a.weight"] = split_ba(raw.pop(c), cfg)
            where[p + "in_proj_b.weight"] = where[p + "in_proj_a.weight"] = where[c]


def load(model_dir, cfg=None):
    """(cfg, {canonical name: float64 tensor}, info) for a checkpoint directory.
    info: {"dtypes": {name: dtype}, "skipped": n ignorable tensors, "files": [...]}."""
    cfg = cfg or qconfig.load(model_dir)
    raw, where, dtypes, skipped = {}, {}, {}, 0
    for path in weight_files(model_dir):
        for name, (dtype, arr) in safetensors.read(path).items():
            c = canonical_name(name)
            if c is None:
                skipped += 1
                continue
            if c in raw:
                raise CheckpointError("%s: %s: duplicate tensor (also in %s)" % (path, name, where[c]))
            raw[c], where[c], dtypes[c] = arr, path, dtype

    try:  # Q8_0: I8 weight + F16 weight_scale -> the dequantized weight (qcgolden/q8_0.py)
        q8_0.join_pairs(raw, where, dtypes)
    except ValueError as e:
        raise CheckpointError(str(e))

    split_legacy(raw, where, cfg)  # legacy packed layout -> split

    if cfg.is_moe:
        fuse_experts(raw, where, cfg, model_dir)

    if cfg.tie_word_embeddings:
        raw.pop("lm_head.weight", None)  # tied: lm_head is the embedding (HF ties and ignores it)
    expected = expected_shapes(cfg)
    for c in sorted(raw):
        if c not in expected:
            raise CheckpointError("%s: %s: unknown tensor" % (where[c], c))
        if tuple(raw[c].shape) != expected[c]:
            raise CheckpointError("%s: %s: shape %s != %s"
                                  % (where[c], c, list(raw[c].shape), list(expected[c])))
    missing = sorted(set(expected) - set(raw))
    if missing:
        raise CheckpointError("%s: missing tensor %s%s" % (model_dir, missing[0],
                              " (and %d more)" % (len(missing) - 1) if len(missing) > 1 else ""))
    weights = {c: torch.from_numpy(np.asarray(a, dtype=np.float64)) for c, a in raw.items()}
    if cfg.tie_word_embeddings:
        weights["lm_head.weight"] = weights["embed_tokens.weight"]
    info = {"dtypes": dtypes, "skipped": skipped,
            "files": [os.path.basename(p) for p in weight_files(model_dir)]}
    return cfg, weights, info
