"""The hazard fixture (tiny-hazard-decay): extreme but legal DeltaNet parameters.

What it puts through the chunked gated delta rule (issue 17 item 6):
  * A_log at both ends of the range the real models are initialised from, log U(0.01, 16)
    (docs/qwen35-model.md: `A_log` init), i.e. A = exp(A_log) from 0.01 to 16, and dt_bias far
    from zero, so one value head decays almost completely every token (per-step decay down to
    ~6.5e-12, pytorch/executorch#21417's value, and below) while another barely decays at all
    (decay 1 - 1e-7);
  * one head whose gate input a + dt_bias swings by about +-120 (up to ~350) from token to token: decays
    near 0 AND near 1 inside the same head, and gate inputs far beyond softplus's large-input
    guard (x > 20 -> x; an unguarded log1p(exp(x)) overflows float32 above 88.7);
  * one head whose beta logits are large (beta saturates at 0 and 1);
  * prompts of 1 .. 300 tokens (up to 5 chunks of 64, 3 calls of max_seq_len 128) and a
    continuation, so those decays go through many chunk boundaries.
Every value is float32-representable and finite; the float64 golden stays finite.

The weights are the standard deterministic initialisation (qcgolden.init) with the DeltaNet
gate tensors of every linear layer replaced as in `edit_weights` (a pure function of the seed).
"""
import json
import os

import numpy as np

from . import goldens, init
from . import safetensors
from .goldens import CaseSpec
from .init import ModelSpec

L, F = "linear_attention", "full_attention"

SPEC = ModelSpec(
    name="tiny-hazard-decay", seed=707,
    vocab_size=192, hidden_size=32, intermediate_size=64, layer_types=[L, L, L, F],
    num_attention_heads=2, num_key_value_heads=1, head_dim=16,
    linear_num_key_heads=2, linear_num_value_heads=4,
    linear_key_head_dim=16, linear_value_head_dim=16,
    partial_rotary_factor=0.25, rope_theta=1e7, tie_word_embeddings=True, dtype="F32",
    nested=False,
    description="Numerical hazards of the chunked gated delta rule (F32, tied, flat, 4 layers, "
    "n_k = 2, n_v = 4, d_k = d_v = 16). In every linear layer: value head 0 with A = exp(A_log) "
    "= 16 (the top of the real models' A_log init range log U(0.01, 16)) and dt_bias 1.4 .. 8 "
    "(per-step decay from 6.5e-12, the value of pytorch/executorch#21417, down to below "
    "float32's range); head 1 with A = 0.01 (the bottom of the range) and dt_bias -12 (decay "
    "1 - 1e-7) and saturating beta logits (x 16); head 2 with A = 16, dt_bias 0 and decay "
    "logits a with a standard deviation of about 120 (|a| up to ~350: decays near 0 and near 1 "
    "in the same head; gate inputs far beyond softplus's large-input guard at 20); head 3 as initialised. Cases with prompts up "
    "to 300 tokens (5 chunks of 64) and a continuation.")

# (A, dt_bias) of value head 0 per linear layer: decays exp(-A softplus(dt_bias)) of 6.5e-12,
# ~1e-56 (zero in float32) and ~1e-23
HEAD0 = [(16.0, 1.3883), (16.0, 8.0), (16.0, 3.1)]
A_SLOW, DT_SLOW = 0.01, -12.0       # head 1: decay 1 - 0.01 * softplus(-12) = 1 - 6.1e-8
BETA_SCALE = 16.0                   # head 1: in_proj_b row scale (beta saturates)
A_SWING, A_SCALE = 16.0, 120.0      # head 2: dt_bias 0, in_proj_a row ~ N(0, 120 / sqrt(H))


def edit_weights(spec, tensors):
    """The standard weights with the hazard gates: [(name, dtype, float64 array)] -> same."""
    H = spec.hidden_size
    out = []
    for name, dtype, a in tensors:
        a = np.array(a, dtype=np.float64)
        if ".linear_attn." in name:
            layer = int(name.split(".layers.")[1].split(".")[0])
            rs = np.random.RandomState([spec.seed, 1000 + layer])
            if name.endswith("A_log"):
                a[0], a[1], a[2] = np.log(HEAD0[layer][0]), np.log(A_SLOW), np.log(A_SWING)
            elif name.endswith("dt_bias"):
                a[0], a[1], a[2] = HEAD0[layer][1], DT_SLOW, 0.0
            elif name.endswith("in_proj_a.weight"):
                a[2] = rs.normal(0.0, A_SCALE / np.sqrt(H), H)
            elif name.endswith("in_proj_b.weight"):
                a[1] = a[1] * BETA_SCALE
        out.append((name, dtype, a))
    return out


def write_checkpoint(spec, out_dir, edit):
    """init.write_checkpoint for a single-file F32 spec, with edit applied to the weights."""
    os.makedirs(out_dir, exist_ok=True)
    files = {"config.json": init.config_text(spec),
             "model.safetensors": safetensors.serialize(edit(spec, init.make_weights(spec)),
                                                        {"format": "pt"})}
    for fname, data in sorted(files.items()):
        tmp = os.path.join(out_dir, fname + ".tmp.%d" % os.getpid())
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(out_dir, fname))
    return sorted(files)


def cases():
    out = [CaseSpec("len%03d" % T, T, description="a %d-token prompt at position 0, prefilled, "
                    "then 8 greedy decode steps" % T) for T in (1, 5, 65, 130, 300)]
    out.append(CaseSpec("cont", 70, history_prompt=100, history_decode=3,
                        description="continuation: a 100-token prompt and 3 greedy decode "
                        "steps as history, then a 70-token prompt at start_pos 103 from the "
                        "cached state"))
    return out


# ------------------------------------------------------------------------------------------------
# Chunk hazards (issue 27 item 5): the prefill schedules seen failing in the field, as case
# lists of ordinary goldens (fixtures.py adds them to the nv/nk = 3 and 8 fixtures). A runtime
# that prefills a prompt in chunks of max_seq_len (dynamic strategy) or replays a history in one
# call before the prompt meets, with these cases:
#   * a chunk of 1, 2 or 3 tokens -- no longer than the conv window K - 1 = 3 -- right after a
#     long first chunk (a prompt of k * max_seq_len + 1..3 tokens, or a long history then a
#     1..3-token prompt): the conv state after the short chunk still holds K - 1 - n columns of
#     the previous chunk (the vLLM #56196 class: a runtime that writes it from the chunk alone
#     loses them; tests/adapters/mutants.py conv-short-chunk);
#   * prompt lengths = 5 (mod 64): a partial chunk of 5 after full chunks of the chunked delta
#     rule (chunk 64);
#   * history / prefix lengths (start_pos) at 64 n +- 1..10: the KV cache and the chunked
#     kernel's blocks entered just before or after a 64-boundary.
# Every case decodes 8 greedy steps afterwards (what reads the conv state written last).
# ------------------------------------------------------------------------------------------------

# (name, T, max_seq_len or None, history prompt, history decode steps)
CHUNK_CASES = [
    ("split64-1", 65, 64, 0, 0),
    ("split64-2", 66, 64, 0, 0),
    ("split64-3", 67, 64, 0, 0),
    ("split128-3", 131, 128, 0, 0),
    ("len069", 69, 64, 0, 0),
    ("len133", 133, None, 0, 0),
    ("hist054-len003", 3, None, 54, 0),
    ("hist063-len001", 1, None, 63, 0),
    ("hist065-len002", 2, None, 65, 0),
    ("hist074-len069", 69, None, 71, 3),
    ("hist118-len002", 2, None, 118, 0),
    ("hist129-len003", 3, None, 126, 3),
]


def _chunk_description(T, msl, hp, hd):
    """What the case puts through a runtime's prefill (dynamic strategy: chunks of max_seq_len,
    128 when the case has none)."""
    m = msl or 128
    P = hp + hd

    def chunks(n):
        c = [m] * (n // m) + ([n % m] if n % m else [])
        return "chunks of " + " + ".join(str(x) for x in c) if len(c) > 1 else "one call"
    if not P:
        return ("a %d-token prompt (%d = %d (mod 64))%s: dynamic prefill in %s, then 8 "
                "greedy decode steps" % (T, T, T % 64, " with max_seq_len %d" % msl if msl else "",
                                          chunks(T)))
    near = min(range(64, P + 74, 64), key=lambda b: abs(P - b))
    hist = "a %d-token prompt%s" % (hp, " and %d greedy decode steps" % hd if hd else "")
    return ("history: %s (start_pos %d = %d %s %d), replayed in one prefill (dynamic: "
            "%s), then a %d-token prompt%s in one call, then 8 greedy decode steps"
            % (hist, P, near, "+" if P > near else "-", abs(P - near), chunks(P), T,
               " (a chunk shorter than the conv window K - 1 = 3)" if T < 3 else
               " (a chunk of K - 1 = 3 tokens)" if T == 3 else " (%d = %d (mod 64))" % (T, T % 64)))


def chunk_cases():
    """The chunk-hazard cases (CaseSpec list), in CHUNK_CASES order."""
    return [CaseSpec(name, T, history_prompt=hp, history_decode=hd, max_seq_len=msl,
                     description=_chunk_description(T, msl, hp, hd))
            for name, T, msl, hp, hd in CHUNK_CASES]


# The case attribute `hazards` (schema v1 readers ignore it; qwen-conform's hazard_finite row
# runs on the cases that have it).
HAZARDS = "decays 1 - 1e-7 .. below float32's range, |a + dt_bias| up to ~350"


def build(root):
    """root/tiny-hazard-decay/{model, golden.h5}; returns the golden's case dict."""
    import h5py
    d = os.path.join(root, SPEC.name)
    model_dir = os.path.join(d, "model")
    write_checkpoint(SPEC, model_dir, edit_weights)
    out = os.path.join(d, "golden.h5")
    part = out + ".part"
    r = goldens.generate(model_dir, part, SPEC.seed, cases=cases())
    with h5py.File(part, "r+") as f:
        for c in cases():
            f["cases/" + c.name].attrs["hazards"] = HAZARDS
    os.replace(part, out)
    return r


def gate_ranges(model_dir, n_tokens=300):
    """{layer: {head: (min g, max g, min x, max x)}} with x = a + dt_bias and g = -A softplus(x),
    of the float64 model's DeltaNet layers over a random n-token prompt (the tests check that
    the fixture really reaches the hazards)."""
    import torch
    from . import model as qmodel
    m = qmodel.Model.from_dir(model_dir)
    cfg = m.cfg
    toks = np.random.RandomState([SPEC.seed, 99]).randint(0, cfg.vocab_size, n_tokens)
    _, hidden = m.forward(toks, m.new_state(), collect_hidden=True)
    out = {}
    for layer, kind in enumerate(cfg.layer_types):
        if kind != L:
            continue
        p = "layers.%d." % layer
        u = qmodel.rms_norm_1p(hidden[layer], m.W[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        x = u @ m.W[p + "linear_attn.in_proj_a.weight"].T + m.W[p + "linear_attn.dt_bias"]
        g = -torch.exp(m.W[p + "linear_attn.A_log"]) * torch.nn.functional.softplus(x)
        out[layer] = {h: (float(g[:, h].min()), float(g[:, h].max()), float(x[:, h].min()),
                          float(x[:, h].max())) for h in range(x.shape[1])}
    return out
