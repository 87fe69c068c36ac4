"""Deterministic tiny Qwen3.5 checkpoints in the real Hugging Face format.

`ModelSpec` describes a model and how it is stored; `make_weights` draws every tensor from
numpy's legacy RandomState (a stream numpy guarantees never to change) seeded by
(spec.seed, crc32(tensor name)), so a tensor's values depend only on the seed, its name and its
shape — the split and the legacy-packed variants of one spec hold the same numbers.
`write_checkpoint` writes config.json + safetensors byte-deterministically (sorted keys, fixed
JSON formatting, data in sorted-name order).

Initialisation ("realistic" enough that nothing is degenerate):
  projections      N(0, 1/sqrt(fan_in))
  embed / lm_head  N(0, 1/sqrt(H))            -> logits with a standard deviation of about 1
                   (|logit| up to ~5): a float32 runtime's absolute noise scales with the logit
                   magnitude, and 3.5/sqrt(H) (|logit| ~15) put it at 1e-3, too close to the bugs
                   the goldens must catch
  (1+w) norms      N(0, 0.1)                   (input/post-attention/final/q_norm/k_norm)
  gated norm       N(1, 0.1)                   (linear_attn.norm.weight, plain multiplier)
  conv1d           N(0, 0.4)
  in_proj_a        N(0, 0.5/sqrt(H))           small: the decay is set mostly by dt_bias / A_log
  dt_bias, A_log   per-step decays exp(g) from fast (~0.14) to slow (~0.995) across the value
                   heads of a layer: dt_bias ~ U(-4, 1), A_log = log(lambda / softplus(dt_bias))
"""
import json
import os
import zlib
from dataclasses import dataclass, field
from typing import List

import numpy as np

from . import checkpoint
from . import config as qconfig
from . import q8_0
from . import safetensors

TORCH_DTYPE_NAME = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
KEEP_F32 = ("linear_attn.A_log", "linear_attn.norm.weight")  # F32 in real BF16 checkpoints
# MoE router N(0, ROUTER_SCALE / sqrt(H)): router logits with a standard deviation of about
# 1.5 (x is RMS-normalised), so the probabilities over the experts are well spread (no expert
# dominates, the k-th and (k+1)-th are rarely within 1e-3 of each other)
ROUTER_SCALE = 1.5


@dataclass
class ModelSpec:
    name: str
    seed: int
    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 128
    layer_types: List[str] = field(default_factory=lambda: ["linear_attention"] * 3 + ["full_attention"])
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    linear_num_key_heads: int = 2
    linear_num_value_heads: int = 2
    linear_key_head_dim: int = 16
    linear_value_head_dim: int = 16
    linear_conv_kernel_dim: int = 4
    partial_rotary_factor: float = 0.25
    rope_theta: float = 10000000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    dtype: str = "F32"                 # storage dtype: F32 | BF16 | F16
    weight_type: str = "float"         # float | q8_0 (projections I8 + F16 scale, q8_0.py)
    nested: bool = False               # config under text_config, names model.language_model.*
    rope_style: str = "parameters"     # parameters (rope_parameters) | legacy (top-level fields)
    layer_style: str = "types"         # types (layer_types) | interval (full_attention_interval)
    legacy_packed: bool = False        # in_proj_qkvz / in_proj_ba (Qwen3-Next layout)
    shards: int = 1                    # > 1: model-0000i-of-0000n.safetensors + index
    extras: bool = False               # ignorable model.visual.* and mtp.* tensors
    # MoE (num_experts > 0: model_type qwen3_5_moe / qwen3_5_moe_text, no dense MLP)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    expert_layout: str = "fused"       # fused (hub: experts.gate_up_proj) | per_expert (experts.{e}.*)
    description: str = ""

    @property
    def num_hidden_layers(self):
        return len(self.layer_types)

    def text_config(self):
        """The parsed config this spec describes (via the real parser, from its config.json)."""
        return qconfig.parse(config_json(self))


# ------------------------------------------------------------------------------------------------
# config.json
# ------------------------------------------------------------------------------------------------

def _mrope_section(rd):
    n = rd // 2
    base, rem = divmod(n, 3)
    return [base + (1 if i < rem else 0) for i in range(3)]


def _full_attention_interval(layer_types):
    fulls = [i for i, t in enumerate(layer_types) if t == qconfig.FULL]
    return fulls[0] + 1 if fulls else len(layer_types) + 1


def config_json(s):
    """The config.json object, in the style of the real repos (see hf-tiny-a)."""
    V = s.vocab_size
    tc = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "dtype": TORCH_DTYPE_NAME[s.dtype],
        "eos_token_id": V - 1,
        "full_attention_interval": _full_attention_interval(s.layer_types),
        "head_dim": s.head_dim,
        "hidden_act": "silu",
        "hidden_size": s.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": s.intermediate_size,
        "linear_conv_kernel_dim": s.linear_conv_kernel_dim,
        "linear_key_head_dim": s.linear_key_head_dim,
        "linear_num_key_heads": s.linear_num_key_heads,
        "linear_num_value_heads": s.linear_num_value_heads,
        "linear_value_head_dim": s.linear_value_head_dim,
        "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 4096,
        "mlp_only_layers": [],
        "model_type": "qwen3_5_text",
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False,
        "num_attention_heads": s.num_attention_heads,
        "num_hidden_layers": s.num_hidden_layers,
        "num_key_value_heads": s.num_key_value_heads,
        "rms_norm_eps": s.rms_norm_eps,
        "tie_word_embeddings": s.tie_word_embeddings,
        "use_cache": True,
        "vocab_size": V,
    }
    if s.layer_style == "types":
        tc["layer_types"] = list(s.layer_types)
    rd = int(s.head_dim * s.partial_rotary_factor)
    if s.rope_style == "parameters":
        tc["rope_parameters"] = {"mrope_interleaved": True, "mrope_section": _mrope_section(rd),
                                 "partial_rotary_factor": s.partial_rotary_factor,
                                 "rope_theta": s.rope_theta, "rope_type": "default"}
    else:  # legacy: top-level fields, as Qwen3-Next configs have them
        tc["partial_rotary_factor"] = s.partial_rotary_factor
        tc["rope_scaling"] = None
        tc["rope_theta"] = s.rope_theta
    moe = s.num_experts > 0
    if moe:
        _moe_fields(s, tc)
    if not s.nested:
        tc["architectures"] = ["Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"]
        tc["transformers_version"] = "4.57.0.dev0"
        return tc
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration" if moe
                          else "Qwen3_5ForConditionalGeneration"],
        "image_token_id": V - 4,
        "model_type": "qwen3_5_moe" if moe else "qwen3_5",
        "text_config": tc,
        "tie_word_embeddings": s.tie_word_embeddings,
        "transformers_version": "4.57.0.dev0",
        "video_token_id": V - 3,
        "vision_config": {"deepstack_visual_indexes": [], "depth": 1,
                          "hidden_act": "gelu_pytorch_tanh", "hidden_size": 32, "in_channels": 3,
                          "initializer_range": 0.02, "intermediate_size": 64,
                          "model_type": "qwen3_5_moe" if moe else "qwen3_5", "num_heads": 2,
                          "num_position_embeddings": 64, "out_hidden_size": s.hidden_size,
                          "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2},
        "vision_end_token_id": V - 5,
        "vision_start_token_id": V - 6,
    }


def _moe_fields(s, tc):
    """A Qwen3_5MoeTextConfig's fields in place of the dense ones (no intermediate_size)."""
    del tc["intermediate_size"]
    tc.update({"model_type": "qwen3_5_moe_text", "num_experts": s.num_experts,
               "num_experts_per_tok": s.num_experts_per_tok,
               "moe_intermediate_size": s.moe_intermediate_size,
               "shared_expert_intermediate_size": s.shared_expert_intermediate_size,
               "output_router_logits": False, "router_aux_loss_coef": 0.001})


def config_text(s):
    """config.json bytes: 2-space indent, sorted keys, trailing newline."""
    return (json.dumps(config_json(s), indent=2, sort_keys=True) + "\n").encode("utf-8")


# ------------------------------------------------------------------------------------------------
# Weights
# ------------------------------------------------------------------------------------------------

def _rng(seed, name):
    return np.random.RandomState([seed & 0xFFFFFFFF, zlib.crc32(name.encode("utf-8"))])


def _softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def init_tensor(s, name, shape):
    """float64 array for one canonical tensor (values before storage rounding)."""
    rs = _rng(s.seed, name)
    H = s.hidden_size
    if name in ("embed_tokens.weight", "lm_head.weight"):
        return rs.normal(0.0, 1.0 / np.sqrt(H), shape)
    if name.endswith("linear_attn.norm.weight"):
        return rs.normal(1.0, 0.1, shape)
    if name.endswith("norm.weight"):  # every (1 + w) norm
        return rs.normal(0.0, 0.1, shape)
    if name.endswith("conv1d.weight"):
        return rs.normal(0.0, 0.4, shape)
    if name.endswith("in_proj_a.weight"):
        return rs.normal(0.0, 0.5 / np.sqrt(H), shape)
    if name.endswith("dt_bias"):
        return rs.uniform(-4.0, 1.0, shape)
    if name.endswith("mlp.gate.weight"):  # the MoE router, see ROUTER_SCALE
        return rs.normal(0.0, ROUTER_SCALE / np.sqrt(H), shape)
    if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
        return rs.normal(0.0, 1.0 / np.sqrt(shape[2]), shape)   # [E, out, in]
    if name.endswith("A_log"):
        # per-step decay exp(-lambda) spread log-uniformly from fast to slow over the heads
        nv = shape[0]
        lam = np.exp(np.linspace(np.log(2.0), np.log(0.005), nv) + rs.normal(0.0, 0.25, nv))
        dt = init_tensor(s, name[:-len("A_log")] + "dt_bias", shape)
        return np.log(lam / _softplus(dt))
    if len(shape) == 2:  # projections [out, in]
        return rs.normal(0.0, 1.0 / np.sqrt(shape[1]), shape)
    raise AssertionError("no initialiser for %s" % name)


def per_expert(canon, s):
    """The fused expert tensors of every layer -> the per-expert layout (same numbers)."""
    Ie = s.moe_intermediate_size
    for n in [n for n in canon if n.endswith("mlp.experts.gate_up_proj")]:
        p = n[:-len("gate_up_proj")]
        gu, dn = canon.pop(n), canon.pop(p + "down_proj")
        for e in range(s.num_experts):
            canon["%s%d.gate_proj.weight" % (p, e)] = gu[e, :Ie]
            canon["%s%d.up_proj.weight" % (p, e)] = gu[e, Ie:]
            canon["%s%d.down_proj.weight" % (p, e)] = dn[e]
    return canon


def storage_dtype(s, name):
    if s.dtype == "BF16" and name.endswith(KEEP_F32):
        return "F32"
    return s.dtype


def extra_tensors(s):
    """A few ignorable model.visual.* / mtp.* tensors (small shapes, real names)."""
    H = s.hidden_size
    shapes = {
        "model.visual.blocks.0.attn.qkv.weight": (96, 32),
        "model.visual.blocks.0.attn.qkv.bias": (96,),
        "model.visual.blocks.0.norm1.weight": (32,),
        "model.visual.merger.linear_fc2.weight": (H, 128),
        "mtp.fc.weight": (H, 2 * H),
        "mtp.norm.weight": (H,),
        "mtp.pre_fc_norm_embedding.weight": (H,),
        "mtp.pre_fc_norm_hidden.weight": (H,),
        "mtp.layers.0.input_layernorm.weight": (H,),
    }
    return {n: _rng(s.seed, n).normal(0.0, 0.1, sh) for n, sh in shapes.items()}


def make_weights(s):
    """[(file tensor name, dtype, float64 array)] exactly as stored (split or packed)."""
    cfg = s.text_config()
    canon = {n: init_tensor(s, n, shape) for n, shape in checkpoint.expected_shapes(cfg).items()}
    if s.legacy_packed:
        for n in [n for n in canon if n.endswith("linear_attn.in_proj_qkv.weight")]:
            p = n[:-len("in_proj_qkv.weight")]
            canon[p + "in_proj_qkvz.weight"] = checkpoint.pack_qkvz(
                canon.pop(n), canon.pop(p + "in_proj_z.weight"), cfg)
            canon[p + "in_proj_ba.weight"] = checkpoint.pack_ba(
                canon.pop(p + "in_proj_b.weight"), canon.pop(p + "in_proj_a.weight"), cfg)
    if s.num_experts and s.expert_layout == "per_expert":
        canon = per_expert(canon, s)
    prefix = "model.language_model." if s.nested else "model."
    out = [("lm_head.weight" if n == "lm_head.weight" else prefix + n, storage_dtype(s, n), a)
           for n, a in canon.items()]
    if s.weight_type == "q8_0":
        out = q8_0.quantize_tensors(out, checkpoint.canonical_name)
    elif s.weight_type != "float":
        raise ValueError("%s: weight_type %r: float or q8_0" % (s.name, s.weight_type))
    if s.extras:
        out += [(n, s.dtype, a) for n, a in extra_tensors(s).items()]
    return sorted(out, key=lambda t: t[0])


def _split_shards(tensors, n):
    """Contiguous groups of the sorted tensor list with roughly equal byte sizes."""
    return group_by_size(tensors, [len(safetensors.encode(a, d)) for _, d, a in tensors], n)


def group_by_size(items, sizes, n):
    """At most n contiguous groups of items whose byte sizes (sizes[i]) are roughly equal: the
    shard split of every checkpoint writer (init, preset)."""
    total = sum(sizes)
    groups, cur, acc = [], [], 0
    for t, sz in zip(items, sizes):
        cur.append(t)
        acc += sz
        if len(groups) < n - 1 and acc >= total * (len(groups) + 1) / n:
            groups.append(cur)
            cur = []
    groups.append(cur)
    return [g for g in groups if g]


def write_checkpoint(s, out_dir):
    """Write config.json + weights into out_dir (created). Returns the written file names."""
    os.makedirs(out_dir, exist_ok=True)
    files = {"config.json": config_text(s)}
    tensors = make_weights(s)
    meta = {"format": "pt"}
    if s.shards <= 1:
        files["model.safetensors"] = safetensors.serialize(tensors, meta)
    else:
        groups = _split_shards(tensors, s.shards)
        weight_map, total = {}, 0
        for i, g in enumerate(groups):
            fname = "model-%05d-of-%05d.safetensors" % (i + 1, len(groups))
            files[fname] = safetensors.serialize(g, meta)
            for name, d, a in g:
                weight_map[name] = fname
                total += len(safetensors.encode(a, d))
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        files["model.safetensors.index.json"] = \
            (json.dumps(index, indent=2, sort_keys=True) + "\n").encode("utf-8")
    for fname, data in sorted(files.items()):
        tmp = os.path.join(out_dir, fname + ".tmp.%d" % os.getpid())
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(out_dir, fname))
    return sorted(files)
