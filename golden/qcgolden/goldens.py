"""Golden cases and the HDF5 golden writer (schema v1: golden/SCHEMA.md).

A case is: optional history (a prompt prefilled, then greedy decode steps), the prompt at
start_pos = len(history), its prefill (logits, hidden states, state), then S greedy decode
steps (tokens, logits, margins, state). Prompts are drawn from RandomState([seed, case, try]);
`try` is the first one (0, 1, 2, ...) for which every greedy choice in the case (history
included) has a top-1 minus top-2 logit margin of at least MIN_MARGIN.
"""
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Optional

import h5py
import numpy as np
import torch

from . import GENERATOR

SCHEMA_VERSION = 1
MIN_MARGIN = 0.05
MAX_TRIES = 200
# MoE goldens: every router decision (prefill, decode and history, every layer) has
# p_k - p_{k+1} at least this (root attribute router_margin_threshold; golden/SCHEMA.md "MoE").
# 1e-3 is not reachable with random prompts: about 1.1% of a tiny router's decisions fall below
# it and a 130-token case makes 520+ of them; 0.34% fall below 3e-4, which the search meets in
# at most ~40 tries per case. The float32 golden model's router margins differ from these by
# at most 1.4e-5 on the MoE fixtures (130-token prompts), 20x inside the threshold.
ROUTER_MARGIN_THRESHOLD = 3e-4


@dataclass
class CaseSpec:
    name: str                         # [A-Za-z0-9_-]+
    n_tokens: int                     # T (the prompt at start_pos)
    n_decode: int = 8                 # S
    history_prompt: int = 0           # > 0: a prompt of this length prefilled first ...
    history_decode: int = 0           # ... then this many greedy decode steps (history)
    max_seq_len: Optional[int] = None  # export max_seq_len attribute (longseq case)
    description: str = ""


def default_cases():
    cases = [CaseSpec("len%03d" % T, T, description="a %d-token prompt at position 0, "
                      "prefilled, then 8 greedy decode steps" % T)
             for T in (1, 2, 5, 63, 64, 65, 130)]
    cases.append(CaseSpec("cont", 70, history_prompt=45, history_decode=3,
                          description="continuation: a 45-token prompt prefilled and 3 greedy "
                          "decode steps (history_tokens, 48 positions), then a 70-token prompt "
                          "at start_pos 48 (two chunks of the chunked kernel, from the cached "
                          "state), then 8 greedy decode steps"))
    cases.append(CaseSpec("longseq", 33, max_seq_len=16,
                          description="a 33-token prompt longer than the case's max_seq_len 16 "
                          "(a runtime prefills it in chunks of 16, 16 and 1 tokens), then 8 "
                          "greedy decode steps"))
    return cases


# ------------------------------------------------------------------------------------------------
# Running a case
# ------------------------------------------------------------------------------------------------

def top2_margin(row):
    """(argmax with ties -> lowest id, top1 - top2) of a float64 logits row."""
    row = np.asarray(row, dtype=np.float64)
    i = int(np.argmax(row))
    rest = np.delete(row, i)
    return i, float(row[i] - rest.max())


def prefill_and_decode(model, state, tokens, n_decode, collect_hidden=True):
    """Prefill `tokens` into state, then n_decode greedy steps. Everything float64 numpy.
    The residual after each mixer is traced (Model.forward's moe_trace): r["moe"] (MoE: moe_in
    and the router record) or r["mlp"] (dense: mlp_in), each {"prefill": .., "decode": ..}."""
    trace = {}                                   # the prefill's (model.store_moe_trace)
    logits, hidden = model.forward(tokens, state, collect_hidden=collect_hidden, moe_trace=trace)
    r = {"logits": logits.numpy(), "hidden": None if hidden is None else hidden.numpy(),
         "state": state.arrays()}
    toks, rows, margins, steps = [], [], [], []
    last = r["logits"][-1]
    for _ in range(n_decode):
        t, m = top2_margin(last)
        toks.append(t)
        margins.append(m)
        steps.append({})
        lg, _ = model.forward([t], state, moe_trace=steps[-1])
        last = lg.numpy()[0]
        rows.append(last)
    r["moe" if model.cfg.is_moe else "mlp"] = {"prefill": trace, "decode": {k: np.concatenate(
        [st[k] for st in steps], axis=1) if steps else trace[k][:, :0] for k in trace}}
    r["decode_tokens"] = np.array(toks, dtype=np.int64)
    # (V explicit: reshape(0, -1) is ambiguous and raises for n_decode = 0)
    r["decode_logits"] = np.array(rows, dtype=np.float64).reshape(n_decode, r["logits"].shape[-1])
    r["margins"] = np.array(margins, dtype=np.float64)
    r["decode_state"] = state.arrays()
    return r


def run_case(model, case, tokens, history_prompt=None):
    """All arrays of one case for the given prompt (and history prompt)."""
    state = model.new_state()
    out = {"history_tokens": np.zeros(0, dtype=np.int64), "history_margins": np.zeros(0)}
    if history_prompt is not None:
        h = prefill_and_decode(model, state, history_prompt, case.history_decode,
                               collect_hidden=False)
        out["history_tokens"] = np.concatenate([np.asarray(history_prompt, dtype=np.int64),
                                                h["decode_tokens"]])
        out["history_margins"] = h["margins"]
        if "moe" in h:
            out["history_router_margins"] = np.concatenate(
                [h["moe"][ph]["router_margins"].ravel() for ph in ("prefill", "decode")])
    start = state.pos
    out.update(prefill_and_decode(model, state, tokens, case.n_decode))
    out["tokens"] = np.asarray(tokens, dtype=np.int64)
    out["start_pos"] = start
    return out


def choose_case(model, case, seed, case_index):
    """Search prompt seeds [seed, case_index, try] until no greedy choice is a near-tie."""
    V = model.cfg.vocab_size
    for attempt in range(MAX_TRIES):
        rs = np.random.RandomState([seed & 0xFFFFFFFF, case_index, attempt])
        hist = rs.randint(0, V, size=case.history_prompt) if case.history_prompt else None
        tokens = rs.randint(0, V, size=case.n_tokens)
        r = run_case(model, case, tokens, hist)
        margins = np.concatenate([r["history_margins"], r["margins"]])
        if (margins.size == 0 or margins.min() >= MIN_MARGIN) and \
                router_margin_min(r) >= ROUTER_MARGIN_THRESHOLD:
            r["prompt_seed"] = [seed, case_index, attempt]
            return r
    raise RuntimeError("%s: no prompt with all margins >= %g%s in %d tries"
                       % (case.name, MIN_MARGIN, " and router margins >= %g"
                          % ROUTER_MARGIN_THRESHOLD if model.cfg.is_moe else "", MAX_TRIES))


def router_margin_min(r):
    """The smallest router margin of a case (history, prefill, decode); inf for a dense model."""
    if "moe" not in r:
        return float("inf")
    m = [r["moe"][ph]["router_margins"].ravel() for ph in ("prefill", "decode")]
    m.append(r.get("history_router_margins", np.zeros(0)))
    m = np.concatenate(m)
    return float(m.min()) if m.size else float("inf")


# ------------------------------------------------------------------------------------------------
# Provenance
# ------------------------------------------------------------------------------------------------

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):  # 16 MiB at a time (a whole
            h.update(block)                                # weight file may not fit)
    return h.hexdigest()


def weights_sha256(model_dir):
    """SHA-256 of all *.safetensors bytes concatenated in ascending file-name order."""
    h = hashlib.sha256()
    for name in sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors")):
        with open(os.path.join(model_dir, name), "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------
# HDF5 writer
# ------------------------------------------------------------------------------------------------

def _no_times(plist_class):
    pl = h5py.h5p.create(plist_class)
    pl.set_obj_track_times(False)      # no timestamps: the file bytes depend only on the data
    return pl


def _create_file(path):
    """An HDF5 file in the 1.8 format (readable by HDF5 >= 1.8) without object timestamps."""
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_V18, h5py.h5f.LIBVER_V18)
    fid = h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fapl=fapl,
                          fcpl=_no_times(h5py.h5p.FILE_CREATE))
    return h5py.File(fid)


def _group(f, path):
    """Create every missing group on path (without timestamps); returns the group."""
    cur = f
    for part in path.strip("/").split("/"):
        if part not in cur:
            h5py.h5g.create(cur.id, part.encode(), gcpl=_no_times(h5py.h5p.GROUP_CREATE))
        cur = cur[part]
    return cur


def _ds(f, path, data, dtype):
    parent, name = path.rsplit("/", 1)
    _group(f, parent).create_dataset(name, data=np.ascontiguousarray(data, dtype=dtype),
                                     track_times=False)


def _write_state(f, group, state):
    for layer, tensors in sorted(state.items()):
        for name, arr in sorted(tensors.items()):
            _ds(f, "%s/%s/%s" % (group, layer, name), arr, np.float32)


def _write_moe(f, g, moe):
    """<g>/router/{topk_ids, topk_weights, margins} and <g>/moe_in (golden/SCHEMA.md "MoE")."""
    _ds(f, g + "/router/topk_ids", moe["topk_ids"], np.int32)
    _ds(f, g + "/router/topk_weights", moe["topk_weights"], np.float32)
    _ds(f, g + "/router/margins", moe["router_margins"], np.float32)
    _ds(f, g + "/moe_in", moe["moe_in"], np.float32)


def _write_trace(f, g, r, phase):
    """<g>/router/* and <g>/moe_in (MoE) or <g>/mlp_in (dense) of one phase, when traced."""
    if "moe" in r:
        _write_moe(f, g, r["moe"][phase])
    elif "mlp" in r:
        _ds(f, g + "/mlp_in", r["mlp"][phase]["mlp_in"], np.float32)


def write_golden(path, model_dir, cases, seed):
    """Write a schema-v1 golden for the model in model_dir. cases: [(CaseSpec, run_case dict)].
    model_path is stored relative to the directory of `path`. Temp file + rename."""
    with open(os.path.join(model_dir, "config.json"), "rb") as fh:
        config_bytes = fh.read()
    rel = os.path.relpath(os.path.abspath(model_dir), os.path.dirname(os.path.abspath(path)))
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with _create_file(tmp) as f:
        f.attrs["schema_version"] = np.int32(SCHEMA_VERSION)
        f.attrs["generator"] = GENERATOR
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["seed"] = np.int64(seed)
        f.attrs["compute_dtype"] = "float64"
        f.attrs["model_path"] = rel
        f.attrs["config_sha256"] = hashlib.sha256(config_bytes).hexdigest()
        f.attrs["weights_sha256"] = weights_sha256(model_dir)
        f.attrs["config_json"] = config_bytes.decode("utf-8")
        if any("moe" in r for _, r in cases):
            f.attrs["router_margin_threshold"] = np.float64(ROUTER_MARGIN_THRESHOLD)
        for spec, r in cases:
            g = "cases/" + spec.name
            grp = _group(f, g)
            grp.attrs["start_pos"] = np.int32(r["start_pos"])
            if spec.max_seq_len is not None:
                grp.attrs["max_seq_len"] = np.int32(spec.max_seq_len)
            grp.attrs["description"] = spec.description
            if r.get("prompt_seed") is not None:
                grp.attrs["prompt_seed"] = json.dumps(r["prompt_seed"])
            if r["start_pos"] > 0:
                _ds(f, g + "/history_tokens", r["history_tokens"], np.int32)
                if len(r["history_margins"]):
                    _ds(f, g + "/history_margins", r["history_margins"], np.float32)
            _ds(f, g + "/tokens", r["tokens"], np.int32)
            _ds(f, g + "/prefill/logits", r["logits"], np.float32)
            _ds(f, g + "/prefill/hidden", r["hidden"], np.float32)
            _write_state(f, g + "/prefill/state", r["state"])
            _write_trace(f, g + "/prefill", r, "prefill")
            if spec.n_decode > 0:
                _ds(f, g + "/decode/tokens", r["decode_tokens"], np.int32)
                _ds(f, g + "/decode/logits", r["decode_logits"], np.float32)
                _ds(f, g + "/decode/margins", r["margins"], np.float32)
                _write_state(f, g + "/decode/state", r["decode_state"])
                _write_trace(f, g + "/decode", r, "decode")
    os.replace(tmp, path)


def generate(model_dir, out_path, seed, cases=None, model=None):
    """Build every case for the checkpoint in model_dir and write the golden. Returns
    {case name: run_case dict}."""
    from .model import Model
    model = model or Model.from_dir(model_dir)
    cases = cases if cases is not None else default_cases()
    done = [(c, choose_case(model, c, seed, i)) for i, c in enumerate(cases)]
    write_golden(out_path, model_dir, done, seed)
    return {c.name: r for c, r in done}
