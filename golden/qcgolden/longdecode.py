"""The long-decode fixture (tiny-long-decode): 2048 greedy decode steps with a state trace.

One case, `decode2k`: a 16-token prompt, then S = 2048 greedy decode steps from the float64
model (fed teacher-forced by the harness), with the DeltaNet state buffers (conv_state,
recurrent_state) recorded after a subset of the steps (TRACE_STEPS: dense at the start, every
128 steps after 255), so a runtime's error can be drawn as a curve over the steps
(qwen-conform's long_decode_drift check). The KV caches are not traced: they hold each
position's own keys and values (no accumulation), and decode/state holds all 2064 positions.

Extra datasets (schema v1 readers ignore datasets they do not know; golden/SCHEMA.md):
  cases/<case>/decode/trace/steps                      int32 [M]  0-based decode steps s: the
                                                       state after feeding decode/tokens[s]
  cases/<case>/decode/trace/layer_NN/conv_state        float32 [M, C, K]
  cases/<case>/decode/trace/layer_NN/recurrent_state   float32 [M, nv, dk, dv]
The greedy margins are recorded but not enforced (2048 choices of a random model include
near-ties; the harness reports a flip at a near-tie without failing it).
"""
import os

import h5py
import numpy as np

from . import goldens, init
from .goldens import CaseSpec
from .init import ModelSpec

L, F = "linear_attention", "full_attention"
N_PROMPT, N_DECODE = 16, 2048
TRACE_STEPS = [0, 1, 3, 7, 15, 31, 63, 127] + list(range(255, N_DECODE, 128))

SPEC = ModelSpec(
    name="tiny-long-decode", seed=606,
    vocab_size=128, hidden_size=32, intermediate_size=64, layer_types=[L, L, L, F],
    num_attention_heads=2, num_key_value_heads=1, head_dim=16,
    linear_num_key_heads=1, linear_num_value_heads=2,
    linear_key_head_dim=16, linear_value_head_dim=16,
    partial_rotary_factor=0.25, rope_theta=1e7, tie_word_embeddings=True, dtype="F32",
    nested=False,
    description="Long decodes (F32, tied, flat, 4 layers with layer 3 full attention, V 128, "
    "n_k = 1, n_v = 2, d_k = d_v = 16): one case `decode2k`, a 16-token prompt and 2048 greedy "
    "decode steps, with the DeltaNet states after %d of the steps (`decode/trace`: steps %s, "
    "then every 128 to 2047) for the `long_decode_drift` check. Its greedy margins are recorded "
    "but not enforced (2048 choices include near-ties)."
    % (len(TRACE_STEPS), ", ".join(str(s) for s in TRACE_STEPS[:9])))

CASE = CaseSpec("decode2k", N_PROMPT, n_decode=N_DECODE,
                description="a 16-token prompt, then 2048 greedy decode steps with the DeltaNet "
                "states traced after %d of them (decode/trace)" % len(TRACE_STEPS))


def run(model, seed):
    """The case dict of goldens.run_case (with the mixer outputs: "mlp", as
    goldens.prefill_and_decode's) plus r["trace"] = {layer: {name: [M, ...]}}."""
    rs = np.random.RandomState([seed & 0xFFFFFFFF, 0, 0])
    tokens = rs.randint(0, model.cfg.vocab_size, size=N_PROMPT)
    state = model.new_state()
    mixed = {}                        # the prefill's mixer outputs (model.store_moe_trace)
    logits, hidden = model.forward(tokens, state, collect_hidden=True, moe_trace=mixed)
    r = {"history_tokens": np.zeros(0, dtype=np.int64), "history_margins": np.zeros(0),
         "logits": logits.numpy(), "hidden": hidden.numpy(), "state": state.arrays(),
         "tokens": np.asarray(tokens, dtype=np.int64), "start_pos": 0,
         "prompt_seed": [seed, 0, 0]}
    want = set(TRACE_STEPS)
    trace = {}
    toks, rows, margins, steps = [], [], [], []
    last = r["logits"][-1]
    for s in range(N_DECODE):
        t, m = goldens.top2_margin(last)
        toks.append(t)
        margins.append(m)
        steps.append({})
        lg, _ = model.forward([t], state, moe_trace=steps[-1])
        last = lg.numpy()[0]
        rows.append(last)
        if s in want:
            for layer, tensors in state.arrays().items():
                for name, arr in tensors.items():
                    if name in ("conv_state", "recurrent_state"):
                        trace.setdefault(layer, {}).setdefault(name, []).append(arr)
    r["decode_tokens"] = np.array(toks, dtype=np.int64)
    r["decode_logits"] = np.array(rows)
    r["margins"] = np.array(margins, dtype=np.float64)
    r["decode_state"] = state.arrays()
    r["moe" if model.cfg.is_moe else "mlp"] = {"prefill": mixed, "decode": {
        k: np.concatenate([st[k] for st in steps], axis=1) for k in mixed}}
    r["trace"] = {l: {n: np.stack(v) for n, v in d.items()} for l, d in trace.items()}
    return r


def write_trace(path, case_name, trace):
    """Add decode/trace to the golden at path (no timestamps, as goldens.write_golden)."""
    g = "cases/%s/decode/trace" % case_name
    with h5py.File(path, "r+") as f:
        goldens._ds(f, g + "/steps", np.array(TRACE_STEPS), np.int32)
        for layer, tensors in sorted(trace.items()):
            for name, arr in sorted(tensors.items()):
                goldens._ds(f, "%s/%s/%s" % (g, layer, name), arr, np.float32)


def build(root):
    """root/tiny-long-decode/{model, golden.h5}; returns {case name: case dict}."""
    from .model import Model
    d = os.path.join(root, SPEC.name)
    model_dir = os.path.join(d, "model")
    init.write_checkpoint(SPEC, model_dir)
    model = Model.from_dir(model_dir)
    r = run(model, SPEC.seed)
    out = os.path.join(d, "golden.h5")
    part = out + ".part"
    goldens.write_golden(part, model_dir, [(CASE, r)], SPEC.seed)
    write_trace(part, CASE.name, r["trace"])
    os.replace(part, out)
    return {CASE.name: r}
