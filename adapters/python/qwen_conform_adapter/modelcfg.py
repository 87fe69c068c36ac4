"""The few numbers of a Qwen3.5 config.json the helper needs (stdlib only): the dims reported
in `open`'s info and the expected names and shapes of the state buffers.

Reads the multimodal nesting (`text_config`) or a flat text config; `layer_types`, else
`full_attention_interval` (layer i is full attention iff (i + 1) % interval == 0, default 4);
HF defaults head_dim 256 and linear_conv_kernel_dim 4.
"""
import json
import os

FULL = "full_attention"
LINEAR = "linear_attention"


class ModelShape:
    """vocab_size, hidden_size, n_layers and, when the config has them, the state shapes."""

    def __init__(self, vocab_size, hidden_size, n_layers, layer_types=None, dims=None,
                 experts_per_tok=0):
        self.vocab_size, self.hidden_size, self.n_layers = vocab_size, hidden_size, n_layers
        self.experts_per_tok = experts_per_tok  # k of a MoE model (router [L, n, k]); 0 dense
        self.layer_types = layer_types   # [FULL | LINEAR] * n_layers, or None (unknown)
        self.dims = dims                 # {"nkv", "hd", "C", "K", "nv", "dk", "dv"} or None

    def state_shapes(self, n_pos):
        """[(name, shape)] of every state buffer in protocol order, or None when unknown."""
        if self.layer_types is None or self.dims is None:
            return None
        d, out = self.dims, []
        for i, kind in enumerate(self.layer_types):
            p = "layer_%02d/" % i
            if kind == FULL:
                out += [(p + "k_cache", (d["nkv"], n_pos, d["hd"])),
                        (p + "v_cache", (d["nkv"], n_pos, d["hd"]))]
            else:
                out += [(p + "conv_state", (d["C"], d["K"])),
                        (p + "recurrent_state", (d["nv"], d["dk"], d["dv"]))]
        return out


def text_config(cfg):
    """The text part of a parsed config.json (its `text_config`, or the object itself)."""
    return cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg


def from_json(cfg):
    """ModelShape from a parsed config.json; ValueError naming a missing core field."""
    tc = text_config(cfg)
    try:
        V, H, L = (int(tc[k]) for k in ("vocab_size", "hidden_size", "num_hidden_layers"))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError("config.json: missing or bad field %s" % e)
    lt = tc.get("layer_types")
    if lt is None:
        every = int(tc.get("full_attention_interval", 4))
        lt = [FULL if (i + 1) % every == 0 else LINEAR for i in range(L)]
    lt = [{"full": FULL, "linear": LINEAR}.get(t, t) for t in lt]
    if len(lt) != L or any(t not in (FULL, LINEAR) for t in lt):
        lt = None
    try:
        nk, dk = int(tc["linear_num_key_heads"]), int(tc["linear_key_head_dim"])
        nv, dv = int(tc["linear_num_value_heads"]), int(tc["linear_value_head_dim"])
        dims = {"nkv": int(tc["num_key_value_heads"]), "hd": int(tc.get("head_dim", 256)),
                "C": 2 * nk * dk + nv * dv, "K": int(tc.get("linear_conv_kernel_dim", 4)),
                "nv": nv, "dk": dk, "dv": dv}
    except (KeyError, TypeError, ValueError):
        dims = None
    try:
        k = int(tc.get("num_experts_per_tok", 0)) if int(tc.get("num_experts", 0) or 0) > 0 else 0
    except (TypeError, ValueError):
        k = 0
    return ModelShape(V, H, L, lt, dims, k)


def load(model_dir):
    """ModelShape from MODEL_DIR/config.json."""
    with open(os.path.join(model_dir, "config.json"), "rb") as f:
        return from_json(json.loads(f.read().decode("utf-8")))
