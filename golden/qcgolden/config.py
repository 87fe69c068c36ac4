"""The Qwen3.5 text config (docs/qwen35-model.md 2) read from a Hugging Face config.json.

Accepts the multimodal nesting (`text_config`) or a flat text config; `rope_parameters` or the
legacy top-level `rope_theta` / `partial_rotary_factor` (and `rope_scaling`); `layer_types` or
`full_attention_interval` (layer i is full iff (i + 1) % interval == 0, default 4).
"""
import json
import math
import os
from dataclasses import dataclass, field
from typing import List

LINEAR = "linear_attention"
FULL = "full_attention"


class ConfigError(ValueError):
    """A config.json that does not describe a Qwen3.5 text model (message names the field)."""


@dataclass
class TextConfig:
    vocab_size: int                 # V
    hidden_size: int                # H
    intermediate_size: int          # I (SwiGLU width)
    num_hidden_layers: int          # L
    num_attention_heads: int        # nh (full attention query heads)
    num_key_value_heads: int        # nkv
    head_dim: int                   # hd
    linear_num_key_heads: int       # nk (DeltaNet q/k heads)
    linear_num_value_heads: int     # nv (a multiple of nk)
    linear_key_head_dim: int        # dk
    linear_value_head_dim: int      # dv
    linear_conv_kernel_dim: int     # K
    rms_norm_eps: float
    rope_theta: float
    partial_rotary_factor: float
    tie_word_embeddings: bool
    layer_types: List[str] = field(default_factory=list)
    nested: bool = False            # read from a `text_config` object
    # MoE (model_type qwen3_5_moe / qwen3_5_moe_text; all 0 for a dense model, golden/qcgolden/moe.py)
    num_experts: int = 0                     # E routed experts per layer
    num_experts_per_tok: int = 0             # k experts chosen per token (1 <= k <= E)
    moe_intermediate_size: int = 0           # Ie: SwiGLU width of one routed expert
    shared_expert_intermediate_size: int = 0  # Is: SwiGLU width of the shared expert

    @property
    def is_moe(self):
        return self.num_experts > 0

    # derived sizes ------------------------------------------------------------------------------
    @property
    def rotary_dim(self):
        """int(hd * partial_rotary_factor), exactly as HF computes it."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def key_dim(self):
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def value_dim(self):
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self):
        return 2 * self.key_dim + self.value_dim


def _req_int(tc, name, where):
    if name not in tc:
        raise ConfigError("%s: missing field %s" % (where, name))
    v = tc[name]
    if (isinstance(v, bool) or not isinstance(v, (int, float))
            or (isinstance(v, float) and (not math.isfinite(v) or v != int(v))) or v <= 0):
        raise ConfigError("%s: field %s = %.80r is not a positive integer" % (where, name, v))
    if v > 1 << 31:
        raise ConfigError("%s: field %s = %d is absurdly large (> 2^31)" % (where, name, v))
    return int(v)


def _opt_float(d, name, default, where, lo=0.0, hi=None, lo_open=True):
    """A finite number in (lo, hi] (a bool or a string is refused); default when absent."""
    if name not in d:
        return float(default)
    v = d[name]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError("%s: field %s = %r is not a finite number" % (where, name, v))
    if (v <= lo if lo_open else v < lo) or (hi is not None and v > hi):
        raise ConfigError("%s: field %s = %r is out of range (%s%g, %s]"
                          % (where, name, v, "" if lo_open else "=", lo,
                             "inf" if hi is None else "%g" % hi))
    return float(v)


def _opt_bool(d, name, default, where):
    if name not in d:
        return default
    v = d[name]
    if not isinstance(v, bool):
        raise ConfigError("%s: field %s = %r is not true/false" % (where, name, v))
    return v


MOE_MODEL_TYPES = ("qwen3_5_moe", "qwen3_5_moe_text")
MOE_FIELDS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
              "shared_expert_intermediate_size")


def is_moe_config(cfg):
    """A Qwen3.5 MoE config: model_type qwen3_5_moe / qwen3_5_moe_text (top level or in
    text_config), or, when no model_type is given, a num_experts field."""
    tc = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
    types = [t for t in (cfg.get("model_type"), tc.get("model_type")) if t is not None]
    if types:
        return any(t in MOE_MODEL_TYPES for t in types)
    return "num_experts" in tc


def _moe_ints(tc, w):
    """The four MoE sizes of a MoE text config (each a positive integer, k <= E)."""
    m = {n: _req_int(tc, n, w) for n in MOE_FIELDS}
    if m["num_experts_per_tok"] > m["num_experts"]:
        raise ConfigError("%s: field num_experts_per_tok = %d is more than num_experts = %d"
                          % (w, m["num_experts_per_tok"], m["num_experts"]))
    if tc.get("norm_topk_prob", True) is not True:
        raise ConfigError("%s: field norm_topk_prob = %.40r: Qwen3.5-MoE always renormalises "
                          "the top-k weights" % (w, tc["norm_topk_prob"]))
    mlp_only = tc.get("mlp_only_layers", [])
    if mlp_only not in ([], None):
        raise ConfigError("%s: field mlp_only_layers = %.40r: Qwen3.5-MoE has no dense layers"
                          % (w, mlp_only))
    return m


OUTPUT_GATE_TYPES = ("swish", "silu")   # the silu(z) of the DeltaNet gated RMSNorm


def _check_gates(tc, w):
    """The two output gates (docs/qwen35-model.md 2.2): attn_output_gate absent (null) or true
    (the sigmoid gate on the attention output; false would be an ungated q_proj);
    output_gate_type absent (null), "swish" or "silu" (the silu of the gated RMSNorm; "sigmoid"
    is another architecture's, qwen4_exp). Any other value changes the math: refused."""
    ag = tc.get("attn_output_gate")
    if ag is not None and not isinstance(ag, bool):
        raise ConfigError("%s: field attn_output_gate = %.40r is not true/false" % (w, ag))
    if ag is False:
        raise ConfigError("%s: attn_output_gate: false is not supported (true: the attention "
                          "output is gated by sigmoid of the second half of each q_proj head)" % w)
    og = tc.get("output_gate_type")
    if og is not None and (not isinstance(og, str) or og not in OUTPUT_GATE_TYPES):
        raise ConfigError("%s: output_gate_type: %.40r is not supported (%s)"
                          % (w, og, ", ".join(OUTPUT_GATE_TYPES)))


def parse(cfg, where="config.json"):
    """TextConfig from the parsed config.json object."""
    if not isinstance(cfg, dict):
        raise ConfigError("%s: not a JSON object" % where)
    nested = isinstance(cfg.get("text_config"), dict)
    tc = cfg["text_config"] if nested else cfg
    w = where + (": text_config" if nested else "")

    moe = is_moe_config(cfg)
    # a MoE model has no dense MLP: intermediate_size is optional there (0 when absent)
    ints = {n: (_req_int(tc, n, w) if n in tc or not moe or n != "intermediate_size" else 0)
            for n in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                      "num_attention_heads", "num_key_value_heads", "linear_num_key_heads",
                      "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim")}
    if moe:
        ints.update(_moe_ints(tc, w))
    ints["head_dim"] = _req_int(tc, "head_dim", w) if "head_dim" in tc else 256  # HF default
    ints["linear_conv_kernel_dim"] = (_req_int(tc, "linear_conv_kernel_dim", w)
                                      if "linear_conv_kernel_dim" in tc else 4)

    # rope: rope_parameters (current HF) or legacy top-level fields / rope_scaling
    rp = tc.get("rope_parameters")
    if not isinstance(rp, dict):
        rp = tc.get("rope_scaling") if isinstance(tc.get("rope_scaling"), dict) else {}
    rw = w + (": rope_parameters" if "rope_theta" in rp else "")
    theta = _opt_float(rp if "rope_theta" in rp else tc, "rope_theta", 10000.0, rw)
    pw = w + (": rope_parameters" if "partial_rotary_factor" in rp else "")
    prf = _opt_float(rp if "partial_rotary_factor" in rp else tc, "partial_rotary_factor", 0.25,
                     pw, hi=1.0)
    eps = _opt_float(tc, "rms_norm_eps", 1e-6, w, hi=1.0)

    # tie: top level wins for the multimodal layout (Qwen3_5ForConditionalGeneration)
    if nested and "tie_word_embeddings" in cfg:
        tie = _opt_bool(cfg, "tie_word_embeddings", False, where)
    else:
        tie = _opt_bool(tc, "tie_word_embeddings", False, w)

    L = ints["num_hidden_layers"]
    lt = tc.get("layer_types")
    if lt is None:
        interval = _req_int(tc, "full_attention_interval", w) if "full_attention_interval" in tc else 4
        lt = [FULL if (i + 1) % interval == 0 else LINEAR for i in range(L)]
    elif not isinstance(lt, list) or not all(isinstance(t, str) for t in lt):
        raise ConfigError("%s: field layer_types = %.80r is not a list of strings" % (w, lt))
    lt = [{"linear": LINEAR, "full": FULL}.get(t, t) for t in lt]
    if len(lt) != L:
        raise ConfigError("%s: layer_types has %d entries, num_hidden_layers is %d" % (w, len(lt), L))
    for i, t in enumerate(lt):
        if t not in (LINEAR, FULL):
            raise ConfigError("%s: layer_types[%d] = %r is not linear_attention/full_attention"
                              % (w, i, t))

    if tc.get("hidden_act", "silu") != "silu":
        raise ConfigError("%s: hidden_act %.80r (only silu)" % (w, tc.get("hidden_act")))
    if _opt_bool(tc, "attention_bias", False, w):
        raise ConfigError("%s: attention_bias true is not Qwen3.5" % w)
    _check_gates(tc, w)

    c = TextConfig(rms_norm_eps=eps, rope_theta=theta,
                   partial_rotary_factor=prf, tie_word_embeddings=tie,
                   layer_types=lt, nested=nested, **ints)
    if c.linear_num_value_heads % c.linear_num_key_heads:
        raise ConfigError("%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d"
                          % (w, c.linear_num_value_heads, c.linear_num_key_heads))
    if c.num_attention_heads % c.num_key_value_heads:
        raise ConfigError("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d"
                          % (w, c.num_attention_heads, c.num_key_value_heads))
    if c.rotary_dim % 2 or not 0 < c.rotary_dim <= c.head_dim:
        raise ConfigError("%s: rotary dim int(%d * %g) = %d must be even and in (0, head_dim]"
                          % (w, c.head_dim, c.partial_rotary_factor, c.rotary_dim))
    return c


def load(model_dir):
    """TextConfig from DIR/config.json."""
    path = os.path.join(model_dir, "config.json")
    with open(path, "rb") as f:
        text = f.read()
    try:
        obj = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ConfigError("%s: not valid JSON: %s" % (path, e))
    return parse(obj, path)
