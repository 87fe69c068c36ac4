"""Q8_0 weights (llama.cpp's block layout) in a safetensors checkpoint.

Convention (golden/SCHEMA.md "Q8_0 checkpoints", docs/qwen35-model.md 3.3): a quantized linear
weight `X.weight` [out, in] (in % 32 == 0) is stored as I8 `X.weight` [out, in] plus F16
`X.weight_scale` [out, in/32]; value[r, k] = scale[r, k // 32] * q[r, k]. Blocks are 32
consecutive values of one row: d = f16(max|x| / 127), q = clamp(round_half_even(x / d), -127,
127) (q = 0 when d == 0). d * q is exact in float32 (|q| <= 127: 7 bits; d: 11 bits), so a Q8_0
model is exactly the float model with the dequantized weights.

Which tensors: the 2-D projection matrices of the dense layers (self_attn.{q,k,v,o}_proj,
linear_attn.in_proj_{qkv,z,b,a} and out_proj, mlp.{gate,up,down}_proj) and an untied lm_head.
Embeddings, norms, conv1d, A_log, dt_bias and every MoE tensor stay float.
"""
import numpy as np

BLOCK = 32
SCALE_SUFFIX = "_scale"          # X.weight -> X.weight_scale

PROJ_SUFFIXES = (
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight",
    "linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight",
    "linear_attn.out_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)


def quantizable(canonical_name):
    """May this canonical (prefix-free) tensor name be stored as Q8_0?"""
    if canonical_name == "lm_head.weight":
        return True
    return canonical_name.startswith("layers.") and canonical_name.endswith(PROJ_SUFFIXES) \
        and ".mlp.shared_expert." not in canonical_name and ".mlp.experts." not in canonical_name


def quantize(x):
    """(q int8 [out, in], d float16 [out, in/32]) of a float [out, in] array (in % 32 == 0)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] % BLOCK:
        raise ValueError("Q8_0 needs a 2-D weight with a multiple of %d inputs, not %s"
                         % (BLOCK, list(x.shape)))
    out, n = x.shape
    b = x.reshape(out, n // BLOCK, BLOCK)
    d = (np.abs(b).max(axis=2) / 127.0).astype(np.float16)
    d64 = d.astype(np.float64)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d64 > 0, np.round(b / np.where(d64 > 0, d64, 1.0)), 0.0)
    q = np.clip(q, -127, 127).astype(np.int8)
    return q.reshape(out, n), d


def dequantize(q, d):
    """float64 [out, in] = d[r, k // 32] * q[r, k] (exact)."""
    q = np.asarray(q, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    if q.ndim != 2 or q.shape[1] % BLOCK or d.shape != (q.shape[0], q.shape[1] // BLOCK):
        raise ValueError("Q8_0: scale shape %s does not fit weight shape %s (want [%d, %d])"
                         % (list(d.shape), list(q.shape), q.shape[0] if q.ndim else 0,
                            q.shape[1] // BLOCK if q.ndim == 2 else 0))
    return q * np.repeat(d, BLOCK, axis=1)


def quantize_tensors(tensors, canonical):
    """[(name, dtype, array)] with every quantizable float weight replaced by its I8 weight and
    F16 scale; canonical(name) gives the prefix-free name (None: not a text tensor)."""
    out = []
    for name, dtype, a in tensors:
        c = canonical(name)
        if c is not None and quantizable(c):
            q, d = quantize(a)
            out += [(name, "I8", q), (name + SCALE_SUFFIX, "F16", d)]
        else:
            out.append((name, dtype, a))
    return sorted(out, key=lambda t: t[0])


def join_pairs(raw, where, dtypes):
    """checkpoint.load's step: every `X.weight_scale` with its I8 `X.weight` replaced in raw
    (canonical name -> float array) by the dequantized float64 weight (dtype "Q8_0").
    ValueError naming file and tensor on a scale without its weight, a non-I8 weight, a lone I8
    tensor or a shape mismatch."""
    for c in sorted(n for n in raw if n.endswith(".weight" + SCALE_SUFFIX)):
        w = c[:-len(SCALE_SUFFIX)]
        if w not in raw:
            raise ValueError("%s: %s: a Q8_0 scale without its weight %s" % (where[c], c, w))
        if dtypes[w] != "I8":
            raise ValueError("%s: %s: dtype %s next to %s (a Q8_0 weight is I8)"
                             % (where[w], w, dtypes[w], c))
        if dtypes[c] != "F16":
            raise ValueError("%s: %s: dtype %s != F16" % (where[c], c, dtypes[c]))
        if not quantizable(w):
            raise ValueError("%s: %s: Q8_0 is for the dense layers' 2-D projections and an "
                             "untied lm_head only" % (where[c], c))
        try:
            raw[w] = dequantize(raw[w], raw.pop(c))
        except ValueError as e:
            raise ValueError("%s: %s: %s" % (where[c], c, e))
        dtypes[w] = "Q8_0"
    for n in sorted(raw):
        if dtypes.get(n) == "I8":
            raise ValueError("%s: %s: dtype I8 without its %s%s" % (where[n], n, n, SCALE_SUFFIX))
