#!/usr/bin/python3
"""Validate golden HDF5 files against schema v1 (golden/SCHEMA.md).

    /usr/bin/python3 golden/validate.py [--no-model] FILE_OR_DIR...
    /usr/bin/python3 golden/validate.py --actual [--layout auto|canonical|hf] GOLDEN ACTUAL

Directories are searched recursively for *.h5. Every problem is reported as
"<file>: <dataset or attribute>: <what is wrong>". Exit status: 0 all valid, 1 a file is
invalid, 2 usage error, a path that does not exist or no file found (one line on stderr).
Importable: `validate(path) -> [error strings]`. A file that cannot be read (not HDF5, truncated,
an object libhdf5 cannot decode, a config_json that is no Qwen3.5 config) is reported as invalid
with the place where reading stopped, never as a traceback; the other files are still checked.

Checks: root attributes (presence, type, schema_version 1, config_sha256 = SHA-256 of
config_json, and when the model directory resolves: the config / weight hashes of its files);
every case: name, start_pos / history_tokens, tokens in range, exact shapes and dtypes (float32,
int32) of every required dataset against the config, finiteness, the state groups (exactly the
tensors of each layer's kind), decode consistency (tokens[0] = argmax of the last prefill row,
tokens[s] = argmax of decode/logits[s-1], margins = top1 - top2 of those rows).

--actual: an ACTUAL file (a runtime's outputs) against its golden, by the ACTUAL column of
golden/SCHEMA.md "Required and optional": exit 1 exactly when `qwen-conform diff` would refuse
it with a format error (exit 2); "note" lines say what diff SKIPs or fails on without one.
Importable: `validate_actual(golden, actual) -> (errors, notes)`.
"""
import hashlib
import json
import os
import re
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qcgolden import config as qconfig  # noqa: E402
from qcgolden.__main__ import InputError, check_config_fields  # noqa: E402

SCHEMA_VERSION = 1
CASE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
STRING_ATTRS = ("generator", "torch_version", "compute_dtype", "model_path", "config_sha256",
                "weights_sha256", "config_json")


class _Report:
    def __init__(self, path):
        self.path = path
        self.errors = []

    def err(self, where, msg):
        self.errors.append("%s: %s: %s" % (self.path, where, msg))


def _is_int_scalar(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _sha256_files(paths):
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------
# Pieces
# ------------------------------------------------------------------------------------------------

def _check_root(f, rep):
    """Root attributes; returns the parsed TextConfig or None."""
    a = f.attrs
    if "schema_version" not in a:
        rep.err("/ (attr schema_version)", "missing")
        return None
    sv = a["schema_version"]
    if not _is_int_scalar(sv) or int(sv) != SCHEMA_VERSION:
        rep.err("/ (attr schema_version)", "%r is not %d (this validator reads schema v%d only)"
                % (sv, SCHEMA_VERSION, SCHEMA_VERSION))
        return None
    for name in STRING_ATTRS:
        if name not in a:
            rep.err("/ (attr %s)" % name, "missing")
        elif not isinstance(a[name], str):
            rep.err("/ (attr %s)" % name, "not a variable-length string (%r)" % type(a[name]))
    if "seed" not in a:
        rep.err("/ (attr seed)", "missing")
    elif not _is_int_scalar(a["seed"]):
        rep.err("/ (attr seed)", "not an integer (%r)" % (a["seed"],))
    if "router_margin_threshold" in a:
        thr = a["router_margin_threshold"]
        if not isinstance(thr, (float, np.floating)) or not 0 < float(thr) < 1:
            rep.err("/ (attr router_margin_threshold)", "%r is not a float in (0, 1)" % (thr,))
    if rep.errors:
        return None
    for name in ("config_sha256", "weights_sha256"):
        if not re.match(r"^[0-9a-f]{64}$", a[name]):
            rep.err("/ (attr %s)" % name, "%r is not 64 lowercase hex digits" % a[name])
    cj = a["config_json"]
    if hashlib.sha256(cj.encode("utf-8")).hexdigest() != a["config_sha256"]:
        rep.err("/ (attr config_sha256)", "does not match the SHA-256 of attr config_json")
    try:
        obj = json.loads(cj)
    except ValueError as e:
        rep.err("/ (attr config_json)", "not valid JSON: %s" % e)
        return None
    try:  # the generator's own checks first: model family, field types (one clear line)
        check_config_fields(obj, "attr config_json")
    except InputError as e:
        rep.err("/ (attr config_json)", str(e))
        return None
    try:
        cfg = qconfig.parse(obj, "attr config_json")
    except qconfig.ConfigError as e:
        rep.err("/ (attr config_json)", str(e))
        return None
    except Exception as e:  # noqa: BLE001 - a field of the wrong type the parser trips on
        rep.err("/ (attr config_json)", "not a Qwen3.5 text config (%s: %s)"
                % (type(e).__name__, e))
        return None
    return cfg


def _check_model_files(f, rep):
    mp = f.attrs["model_path"]
    d = mp if os.path.isabs(mp) else os.path.join(os.path.dirname(os.path.abspath(rep.path)), mp)
    if not os.path.isdir(d):
        rep.err("/ (attr model_path)", "model directory %s does not exist" % d)
        return
    cpath = os.path.join(d, "config.json")
    if not os.path.exists(cpath) or _sha256_files([cpath]) != f.attrs["config_sha256"]:
        rep.err("/ (attr config_sha256)", "does not match %s" % cpath)
    weights = sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".safetensors"))
    if not weights:
        rep.err("/ (attr model_path)", "no *.safetensors in %s" % d)
    elif _sha256_files(weights) != f.attrs["weights_sha256"]:
        rep.err("/ (attr weights_sha256)", "does not match the weight files of %s" % d)


def _dataset(f, path, rep, shape, kind):
    """The dataset's array if it exists with the exact shape, dtype and finite values."""
    if path not in f:
        rep.err(path, "missing dataset")
        return None
    ds = f[path]
    if not isinstance(ds, h5py.Dataset):
        rep.err(path, "is a group, not a dataset")
        return None
    want = np.dtype(np.float32) if kind == "f" else np.dtype(np.int32)
    if ds.dtype != want:
        rep.err(path, "dtype %s != %s" % (ds.dtype, want))
        return None
    if tuple(ds.shape) != tuple(shape):
        rep.err(path, "shape %s != expected %s" % (tuple(ds.shape), tuple(shape)))
        return None
    a = ds[()]
    if kind == "f" and not np.all(np.isfinite(a)):
        bad = np.argwhere(~np.isfinite(a))[0]
        rep.err(path, "non-finite value %r at index %s" % (a[tuple(bad)], tuple(int(i) for i in bad)))
        return None
    return a


def _check_tokens(a, path, V, rep):
    if a is not None and a.size and (a.min() < 0 or a.max() >= V):
        rep.err(path, "token id outside [0, %d): min %d max %d" % (V, a.min(), a.max()))


def _check_state(f, group, cfg, n_pos, rep):
    if group not in f:
        rep.err(group, "missing group")
        return
    want = {}
    for i, kind in enumerate(cfg.layer_types):
        if kind == qconfig.FULL:
            kv = (cfg.num_key_value_heads, n_pos, cfg.head_dim)
            want["layer_%02d" % i] = {"k_cache": kv, "v_cache": kv}
        else:
            want["layer_%02d" % i] = {
                "conv_state": (cfg.conv_dim, cfg.linear_conv_kernel_dim),
                "recurrent_state": (cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                                    cfg.linear_value_head_dim)}
    for extra in sorted(set(f[group].keys()) - set(want)):
        rep.err(group + "/" + extra, "unexpected layer group (config has %d layers)"
                % cfg.num_hidden_layers)
    for layer, tensors in want.items():
        lg = group + "/" + layer
        if lg not in f:
            rep.err(lg, "missing group")
            continue
        for extra in sorted(set(f[lg].keys()) - set(tensors)):
            rep.err(lg + "/" + extra, "unexpected for a %s layer" % cfg.layer_types[int(layer[6:])])
        for name, shape in tensors.items():
            _dataset(f, lg + "/" + name, rep, shape, "f")


def _check_moe(f, g, cfg, n, rep):
    """Optional extras of one phase g (<case>/prefill or <case>/decode, n rows): a MoE model's
    router/{topk_ids, topk_weights, margins} and moe_in (golden/SCHEMA.md "MoE"), a dense
    model's mlp_in ("Mixer outputs (dense)")."""
    L, H, E, k = cfg.num_hidden_layers, cfg.hidden_size, cfg.num_experts, cfg.num_experts_per_tok
    if g + "/mlp_in" in f:
        if cfg.is_moe:
            rep.err(g + "/mlp_in", "dense dataset in the golden of a MoE model (its name is moe_in)")
        else:
            _dataset(f, g + "/mlp_in", rep, (L, n, H), "f")
    have = [x for x in ("router", "moe_in") if g + "/" + x in f]
    if not have:
        return
    if not cfg.is_moe:
        rep.err(g + "/" + have[0], "MoE dataset in the golden of a dense model")
        return
    _dataset(f, g + "/moe_in", rep, (L, n, H), "f")
    ids = _dataset(f, g + "/router/topk_ids", rep, (L, n, k), "i")
    w = _dataset(f, g + "/router/topk_weights", rep, (L, n, k), "f")
    gen = f.attrs.get("generator", "")
    if (g + "/router/margins" not in f and isinstance(gen, str)
            and gen.startswith("qwen-conform record")):
        m = None  # a C backend traces no router probabilities: `record` writes no margins
    else:
        m = _dataset(f, g + "/router/margins", rep, (L, n), "f")
    if ids is not None and ids.size:
        if ids.min() < 0 or ids.max() >= E:
            rep.err(g + "/router/topk_ids", "expert id outside [0, %d)" % E)
        elif any(len(set(r)) != k for r in ids.reshape(-1, k).tolist()):
            rep.err(g + "/router/topk_ids", "an expert chosen twice for one token")
    if w is not None and w.size:
        if np.abs(w.astype(np.float64).sum(-1) - 1.0).max() > 1e-5 or w.min() <= 0:
            rep.err(g + "/router/topk_weights", "rows are not positive weights summing to 1 "
                    "(renormalised top-k)")
        elif (np.diff(w, axis=-1) > 1e-7).any():
            rep.err(g + "/router/topk_weights", "not in descending probability order")
    thr = f.attrs.get("router_margin_threshold")
    if m is not None and m.size and thr is not None and float(m.min()) < float(thr):
        rep.err(g + "/router/margins", "min %g < the root attribute router_margin_threshold %g"
                % (m.min(), thr))


def _top2(row):
    i = int(np.argmax(row))
    r = row.astype(np.float64)
    return i, float(r[i] - np.delete(r, i).max())


def _check_case(f, name, cfg, rep):
    g = "/cases/" + name
    if not CASE_NAME.match(name):
        rep.err(g, "case name does not match [A-Za-z0-9_-]+")
    if not isinstance(f[g], h5py.Group):
        rep.err(g, "is not a group")
        return
    a = f[g].attrs
    V, H, L = cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers
    if "start_pos" not in a or not _is_int_scalar(a["start_pos"]) or int(a["start_pos"]) < 0:
        rep.err(g + " (attr start_pos)", "missing or not a non-negative integer")
        return
    P = int(a["start_pos"])
    if "description" not in a or not isinstance(a["description"], str):
        rep.err(g + " (attr description)", "missing or not a string")
    if "max_seq_len" in a and (not _is_int_scalar(a["max_seq_len"]) or int(a["max_seq_len"]) <= 0):
        rep.err(g + " (attr max_seq_len)", "not a positive integer")
    if P > 0:
        _check_tokens(_dataset(f, g + "/history_tokens", rep, (P,), "i"), g + "/history_tokens", V, rep)
    elif g + "/history_tokens" in f:
        rep.err(g + "/history_tokens", "present but start_pos is 0")
    if g + "/tokens" not in f:
        rep.err(g + "/tokens", "missing dataset")
        return
    T = f[g + "/tokens"].shape[0] if f[g + "/tokens"].ndim == 1 else -1
    if T < 1:
        rep.err(g + "/tokens", "must be a non-empty 1-D dataset, shape %s" % (f[g + "/tokens"].shape,))
        return
    _check_tokens(_dataset(f, g + "/tokens", rep, (T,), "i"), g + "/tokens", V, rep)
    logits = _dataset(f, g + "/prefill/logits", rep, (T, V), "f")
    _dataset(f, g + "/prefill/hidden", rep, (L + 1, T, H), "f")
    _check_state(f, g + "/prefill/state", cfg, P + T, rep)
    _check_moe(f, g + "/prefill", cfg, T, rep)

    if g + "/decode" not in f:
        return
    d = g + "/decode"
    if d + "/tokens" not in f or f[d + "/tokens"].ndim != 1:
        rep.err(d + "/tokens", "missing or not 1-D")
        return
    S = f[d + "/tokens"].shape[0]
    toks = _dataset(f, d + "/tokens", rep, (S,), "i")
    _check_tokens(toks, d + "/tokens", V, rep)
    dlog = _dataset(f, d + "/logits", rep, (S, V), "f")
    margins = _dataset(f, d + "/margins", rep, (S,), "f")
    _check_state(f, d + "/state", cfg, P + T + S, rep)
    _check_moe(f, d, cfg, S, rep)
    if toks is None or dlog is None or logits is None:
        return
    rows = [logits[-1]] + [dlog[s] for s in range(S - 1)]
    for s, row in enumerate(rows):
        best, m = _top2(row)
        src = "prefill/logits[%d]" % (T - 1) if s == 0 else "decode/logits[%d]" % (s - 1)
        if int(toks[s]) != best:
            rep.err(d + "/tokens", "tokens[%d] = %d but argmax of %s is %d (greedy decode)"
                    % (s, toks[s], src, best))
            break
        if margins is not None and abs(float(margins[s]) - m) > 1e-3 + 1e-4 * abs(m):
            rep.err(d + "/margins", "margins[%d] = %g but top1 - top2 of %s is %g"
                    % (s, margins[s], src, m))
            break


# ------------------------------------------------------------------------------------------------
# ACTUAL files (golden/SCHEMA.md "Required and optional", "ACTUAL layouts")
# ------------------------------------------------------------------------------------------------

# (tag, shape, variant) candidates per tensor; -1 = any extent. Tags: "canonical" / "hf".
def _logit_shapes(T, V, R):
    if R is not None:
        return [("canonical", (R, V), "rows"), ("hf", (1, R, V), "rows")]
    return [("canonical", (T, V), "all"), ("hf", (1, T, V), "all"), ("hf", (V,), "last"),
            ("hf", (1, V), "last"), ("hf", (1, 1, V), "last")]


def _state_shapes(cfg, kind, n_pos):
    if kind == "kv":  # N >= n_pos: a larger static cache is accepted (checked by the caller)
        s = (cfg.num_key_value_heads, -1, cfg.head_dim)
        return [("canonical", s, 0), ("hf", (1,) + s, 0)]
    if kind == "conv":
        C, K = cfg.conv_dim, cfg.linear_conv_kernel_dim
        return [("canonical", (C, K), K), ("hf", (1, C, K), K), ("canonical", (C, K - 1), K - 1),
                ("hf", (1, C, K - 1), K - 1)]
    s = (cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim)
    return [("canonical", s, 0), ("hf", (1,) + s, 0)]


class _ActualCheck:
    """What `qwen-conform diff` refuses (errors) and SKIPs (notes) in an ACTUAL file."""

    def __init__(self, path, layout):
        self.rep = _Report(path)
        self.layout = layout
        self.notes = []
        self.tags = {"canonical": 0, "hf": 0}
        self.max_pos = 1 << 20

    def note(self, where, msg):
        self.notes.append("%s: %s: %s" % (self.rep.path, where, msg))

    def shaped(self, f, path, cands, kind):
        """The dataset's (array, variant) if present and of one of the shapes; None absent."""
        if path not in f:
            return None
        ds = f[path]
        if not isinstance(ds, h5py.Dataset):
            self.rep.err(path, "not a dataset")
            return None
        want = np.floating if kind == "f" else np.integer
        if not np.issubdtype(ds.dtype, want):
            self.rep.err(path, "not a%s dataset (%s)" % (" float" if kind == "f" else "n integer",
                                                        ds.dtype))
            return None
        for tag, shape, var in cands:
            if self.layout not in ("auto", tag):
                continue
            if len(shape) == ds.ndim and all(w < 0 or w == h for w, h in zip(shape, ds.shape)):
                self.tags[tag] += 1
                return ds[()], var
        self.rep.err(path, "shape %s fits no %slayout" % (tuple(ds.shape),
                                                         "" if self.layout == "auto" else self.layout + " "))
        return None

    def ids(self, f, path):
        got = self.shaped(f, path, [("canonical", (-1,), 0), ("hf", (1, -1), 0)], "i")
        return None if got is None else np.asarray(got[0]).reshape(-1)

    def inputs(self, f, g, c, gc):
        a = f[c].attrs
        if "start_pos" in a and (not _is_int_scalar(a["start_pos"]) or
                                 int(a["start_pos"]) != int(gc.attrs["start_pos"])):
            self.rep.err(c + " (attr start_pos)", "ACTUAL %r, golden %d (input mismatch)"
                         % (a["start_pos"], int(gc.attrs["start_pos"])))
        for rel in ("history_tokens", "tokens", "decode/tokens"):
            got = self.ids(f, c + "/" + rel)
            if got is None:
                continue
            want = gc[rel][()] if rel in gc else np.zeros(0, np.int32)
            hist = gc["history_tokens"][()] if "history_tokens" in gc else np.zeros(0, np.int32)
            if (rel == "tokens" and hist.size and got.size == hist.size + want.size
                    and np.array_equal(got[:hist.size], hist)):
                got = got[hist.size:]   # the whole sequence: history + prompt
            if rel == "decode/tokens":  # a different token is a FAIL (decode.tokens), not here
                if got.size != want.size:
                    self.rep.err(c + "/" + rel, "ACTUAL has %d ids, the golden %d"
                                 % (got.size, want.size))
                continue
            if got.size != want.size:
                self.rep.err(c + "/" + rel, "ACTUAL has %d ids, the golden %d (input mismatch)"
                             % (got.size, want.size))
            elif not np.array_equal(got, want):
                i = int(np.argmax(got != want))
                self.rep.err(c + "/" + rel, "[%d]: ACTUAL %d, golden %d (input mismatch)"
                             % (i, got[i], want[i]))

    def state(self, f, group, cfg, n_pos):
        if group not in f:
            self.note(group, "absent: the %s state checks are SKIPPED" % group.split("/")[-2])
            return
        cols = set()
        for i, kind in enumerate(cfg.layer_types):
            lg = "%s/layer_%02d" % (group, i)
            full = kind == qconfig.FULL
            names = ("k_cache", "v_cache") if full else ("conv_state", "recurrent_state")
            wrong = ("conv_state", "recurrent_state") if full else ("k_cache", "v_cache")
            for w in wrong:
                if lg + "/" + w in f:
                    self.note(lg + "/" + w, "ignored: layer %d is a %s layer" % (i, kind))
            for n in names:
                k = "kv" if full else ("conv" if n == "conv_state" else "rec")
                got = self.shaped(f, lg + "/" + n, _state_shapes(cfg, k, n_pos), "f")
                if got is not None and k == "conv":
                    cols.add(got[1])
                if got is not None and k == "kv":
                    N = got[0].shape[-2]
                    lim = self.max_pos
                    if N < n_pos or N > lim:
                        self.rep.err(lg + "/" + n, "holds %d positions; the case needs %d" % (N, n_pos))
        if len(cols) > 1:
            self.rep.err(group, "conv states with different column counts %s" % sorted(cols))

    def router(self, f, group, cfg, n):
        """<group>/router/{topk_ids, topk_weights} of a MoE model (golden/SCHEMA.md "MoE"): one
        layout, [L, n, k] under any --layout; margins are the golden's (not read)."""
        r = group + "/router"
        if not cfg.is_moe:
            if r in f:
                self.note(r, "ignored: a dense model has no router")
            return
        if r + "/topk_ids" not in f:
            self.note(r + "/topk_ids", "absent: router_topk is SKIPPED")
            return
        want = (cfg.num_hidden_layers, n, cfg.num_experts_per_tok)
        for rel, kind in (("topk_ids", "i"), ("topk_weights", "f")):
            path = r + "/" + rel
            if path not in f:
                continue
            ds = f[path]
            if not isinstance(ds, h5py.Dataset):
                self.rep.err(path, "not a dataset")
            elif not np.issubdtype(ds.dtype, np.integer if kind == "i" else np.floating):
                self.rep.err(path, "not a%s dataset (%s)" % ("n integer" if kind == "i" else " float",
                                                            ds.dtype))
            elif tuple(ds.shape) != want:
                self.rep.err(path, "shape %s is not [L, %d, k] = %s" % (tuple(ds.shape), n, want))

    def topk(self, f, group, V, rows, k_other):
        """<group>/topk/{ids, logprobs} [rows, k] (golden/SCHEMA.md "Top-k ACTUAL"): one layout,
        ids in [0, V) and distinct per row, log-probabilities finite, <= 0 (1e-3 of slack) and
        descending; the k, or None when absent or invalid."""
        t = group + "/topk"
        if t not in f:
            return None
        if not isinstance(f[t], h5py.Group):
            self.rep.err(t, "not a group of ids and logprobs")
            return None
        for rel, kind in (("ids", np.integer), ("logprobs", np.floating)):
            p = t + "/" + rel
            if p not in f:
                self.rep.err(p, "missing dataset (a top-k list needs both ids and logprobs)")
                return None
            if not isinstance(f[p], h5py.Dataset) or not np.issubdtype(f[p].dtype, kind):
                self.rep.err(p, "not a%s dataset" % ("n integer" if kind is np.integer else " float"))
                return None
        ids, lps = f[t + "/ids"], f[t + "/logprobs"]
        if ids.ndim != 2 or ids.shape[0] != rows or not 1 <= ids.shape[1] <= V:
            self.rep.err(t + "/ids", "shape %s is not [%d, k] with 1 <= k <= %d"
                         % (tuple(ids.shape), rows, V))
            return None
        k = ids.shape[1]
        if k_other and k != k_other:
            self.rep.err(t + "/ids", "k = %d, the case's prefill/topk has k = %d" % (k, k_other))
            return None
        if tuple(lps.shape) != (rows, k):
            self.rep.err(t + "/logprobs", "shape %s is not the ids' %s" % (tuple(lps.shape), (rows, k)))
            return None
        a, lp = ids[()].astype(np.int64), lps[()].astype(np.float32)
        for bad, path, what in (((a < 0) | (a >= V), "ids", "not a token id in [0, %d)" % V),
                                (~np.isfinite(lp) | (lp > 1e-3), "logprobs",
                                 "not a finite log-probability <= 0")):
            if bad.any():
                r, j = np.argwhere(bad)[0]
                v = a[r, j] if path == "ids" else lp[r, j]
                self.rep.err("%s/%s" % (t, path), "[%d, %d] = %s: %s" % (r, j, v, what))
                return None
        dup = np.diff(np.sort(a, axis=1), axis=1) == 0
        if dup.any():
            self.rep.err(t + "/ids", "row %d: a token listed twice" % np.argwhere(dup)[0][0])
            return None
        up = np.diff(lp, axis=1) > 0
        if up.any():
            self.rep.err(t + "/logprobs", "row %d: not in descending order" % np.argwhere(up)[0][0])
            return None
        return k

    def case(self, f, g, name, cfg):
        c, gc = "/cases/" + name, g["cases"][name]
        P, T = int(gc.attrs["start_pos"]), gc["tokens"].shape[0]
        S = gc["decode/tokens"].shape[0] if "decode/tokens" in gc else 0
        V, L, H = cfg.vocab_size, cfg.num_hidden_layers, cfg.hidden_size
        if not isinstance(f[c], h5py.Group):
            self.rep.err(c, "not a group")
            return
        self.inputs(f, g, c, gc)
        pre = c + "/prefill"
        k = self.topk(f, pre, V, T, None)
        if pre + "/logits" not in f:
            if pre + "/topk" not in f:
                self.rep.err(pre + "/logits", "missing dataset (the one tensor every ACTUAL case "
                             "must have, or prefill/topk)")
            else:
                self.topk_case(f, c, cfg, T, S, k)
            return
        pos = self.ids(f, pre + "/logits_positions")
        got = self.shaped(f, pre + "/logits", _logit_shapes(T, V, None if pos is None else pos.size), "f")
        if got is not None and pos is not None:
            rows = pos.astype(np.int64) - P
            if pos.size == 0 or rows.min() < 0 or rows.max() >= T or np.any(np.diff(rows) <= 0):
                self.rep.err(pre + "/logits_positions", "not ascending prompt positions in [%d, %d)"
                             % (P, P + T))
        if got is not None and got[1] != "all":
            self.note(pre + "/logits", "a subset of the prompt positions: compared on those")
        hid = [("canonical", (L + 1, T, H), 0), ("hf", (L + 1, 1, T, H), 0), ("hf", (1, L + 1, T, H), 0)]
        if self.shaped(f, pre + "/hidden", hid, "f") is None and pre + "/hidden" not in f:
            self.note(pre + "/hidden", "absent: prefill.hidden is SKIPPED")
        self.state(f, pre + "/state", cfg, P + T)
        self.router(f, pre, cfg, T)
        dec = c + "/decode"
        self.decode_topk(f, dec, V, S, k)
        if dec + "/logits" in f and S == 0:
            self.rep.err(dec + "/logits", "the golden case has no decode steps")
        elif S > 0:
            self.ids(f, dec + "/tokens")
            if dec in f and isinstance(f[dec], h5py.Group):
                self.router(f, dec, cfg, S)
            dl = [("canonical", (S, V), 0), ("hf", (1, S, V), 0), ("hf", (S, 1, V), 0)]
            if self.shaped(f, dec + "/logits", dl, "f") is None and dec + "/logits" not in f:
                self.note(dec + "/logits", "absent (prefill-only ACTUAL): decode checks SKIPPED")
            else:
                self.state(f, dec + "/state", cfg, P + T + S)


    def decode_topk(self, f, dec, V, S, k):
        if dec + "/topk" not in f:
            return
        if S == 0:
            self.rep.err(dec + "/topk", "the golden case has no decode steps")
        elif dec[:-len("decode")] + "prefill/topk" not in f:
            self.rep.err(dec + "/topk", "top-k decode rows without prefill/topk")
        else:
            self.topk(f, dec, V, S, k)

    def topk_case(self, f, c, cfg, T, S, k):
        """A top-k case (prefill/topk, no prefill/logits): diff compares its top-k lists (and a
        MoE model's router choices) only."""
        dec = c + "/decode"
        self.router(f, c + "/prefill", cfg, T)
        self.decode_topk(f, dec, cfg.vocab_size, S, k)
        if S > 0:
            self.ids(f, dec + "/tokens")
            if dec in f and isinstance(f[dec], h5py.Group):
                self.router(f, dec, cfg, S)
            if dec + "/topk" not in f:
                self.note(dec + "/topk", "absent: the topk rows cover the prompt positions only")
        for x in ("prefill/hidden", "prefill/state", "decode/logits", "decode/state"):
            if c + "/" + x in f:
                self.note(c + "/" + x, "not compared in a top-k case (no prefill/logits)")


def _same_object(f, a, b):
    try:
        return h5py.h5o.get_info(f[a].id).addr == h5py.h5o.get_info(f[b].id).addr
    except (AttributeError, KeyError, TypeError):
        return f[a] == f[b]


def _golden_as_actual(f, g):
    """A golden passed as the ACTUAL: the golden generator's signature and either a float32
    GOLDEN (the two swapped), another model's config, or the first common case's
    prefill/logits bit-identical to the golden's. (The signature alone, on a golden copied and
    its tensors replaced, is compared as a runtime's output; a float64 compute_dtype alone is
    an independent float64 implementation.)"""
    if not str(f.attrs.get("generator", "")).startswith("qwen-conform-golden"):
        return False
    if g.attrs.get("compute_dtype") != "float64":
        return True
    if "config_json" in f.attrs:
        try:
            if json.loads(f.attrs["config_json"]) != json.loads(g.attrs["config_json"]):
                return True
        except (TypeError, ValueError):
            return True
    common = [n for n in sorted(g["cases"]) if "cases" in f and n in f["cases"]]
    if not common:
        return False
    p = "cases/%s/prefill/logits" % common[0]
    if p not in f or not isinstance(f[p], h5py.Dataset):
        return False
    a, b = f[p][()], g[p][()]
    return a.shape == b.shape and a.dtype == np.float32 and a.tobytes() == b.tobytes()


def _actual_root(f, g, chk):
    rep, a = chk.rep, f.attrs
    if "schema_version" not in a:
        rep.err("/ (attr schema_version)", "missing")
        return False
    if not _is_int_scalar(a["schema_version"]) or int(a["schema_version"]) != SCHEMA_VERSION:
        rep.err("/ (attr schema_version)", "%r is not %d" % (a["schema_version"], SCHEMA_VERSION))
        return False
    if _golden_as_actual(f, g):
        rep.err("/ (attr generator)", "this is a golden (%r), not a runtime's output"
                % a.get("generator"))
        return False
    for k in ("config_sha256", "weights_sha256"):
        if k in a:
            if not isinstance(a[k], str) or not re.match(r"^([0-9a-fA-F]{64})?$", a[k]):
                chk.note("/ (attr %s)" % k, "not a hex SHA-256: ignored (optional)")
            elif a[k] and g.attrs[k] and a[k].lower() != g.attrs[k].lower():
                chk.note("/ (attr %s)" % k, "differs from the golden's: ACTUAL was computed from a "
                         "different model (diff: model_hash FAIL)")
        else:
            chk.note("/ (attr %s)" % k, "absent: the model is not compared")
    if "cases" not in f or not isinstance(f["cases"], h5py.Group) or not len(f["cases"]):
        rep.err("/cases", "missing or empty")
        return False
    names = sorted(f["cases"].keys())
    for n in names:
        if not CASE_NAME.match(n):
            rep.err("/cases/" + n, "case name does not match [A-Za-z0-9_-]+")
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            if x.lower() == y.lower() or _same_object(f, "/cases/" + x, "/cases/" + y):
                rep.err("/cases/%s and /cases/%s" % (x, y), "duplicated case")
    extra = [n for n in names if n not in g["cases"]]
    if extra:
        rep.err("/cases", "case(s) with no golden counterpart: %s" % ", ".join(extra))
    return not rep.errors


def validate_actual(golden_path, path, layout="auto"):
    """(errors, notes) of an ACTUAL file against its golden: errors are what diff refuses
    (exit 2), notes what it SKIPs or fails without a format error."""
    chk = _ActualCheck(path, layout)
    try:
        g = h5py.File(golden_path, "r")
    except (OSError, ValueError) as e:
        return ["%s: /: cannot open as HDF5: %s" % (golden_path, e)], []
    try:
        f = h5py.File(path, "r")
    except (OSError, ValueError) as e:
        g.close()
        chk.rep.err("/", "cannot open as HDF5: %s" % e)
        return chk.rep.errors, []
    where = "/"
    try:
        with f, g:
            obj = json.loads(g.attrs["config_json"])
            cfg = qconfig.parse(obj, golden_path)
            mpe = (obj.get("text_config") or obj).get("max_position_embeddings", 32768)
            chk.max_pos = int(mpe) if isinstance(mpe, int) and 0 < mpe < (1 << 20) else 1 << 20
            if "config_json" in f.attrs:
                try:
                    other = qconfig.parse(json.loads(f.attrs["config_json"]), path) != cfg
                    if other:
                        chk.note("/ (attr config_json)", "not the golden's config: another model "
                                 "(diff: model_hash FAIL)")
                except Exception as e:  # noqa: BLE001 - optional: not compared
                    chk.note("/ (attr config_json)", "cannot be parsed (%s): not compared" % e)
            if _actual_root(f, g, chk):
                for name in sorted(f["cases"].keys()):
                    where = "/cases/" + name
                    chk.case(f, g, name, cfg)
                missing = [n for n in sorted(g["cases"]) if n not in f["cases"]]
                if missing:
                    chk.note("/cases", "golden case(s) missing (diff: coverage FAIL unless "
                             "--cases): %s" % ", ".join(missing))
    except READ_ERRORS as e:
        _cannot_read(chk.rep, where, e)
    return chk.rep.errors, chk.notes


def main_actual(args):
    layout = "auto"
    if "--layout" in args:
        i = args.index("--layout")
        layout = args[i + 1] if i + 1 < len(args) else ""
        args = args[:i] + args[i + 2:]
    if len(args) != 2 or layout not in ("auto", "canonical", "hf"):
        sys.stderr.write("usage: validate.py --actual [--layout auto|canonical|hf] GOLDEN ACTUAL\n")
        return 2
    for a in args:
        if not os.path.isfile(a):
            sys.stderr.write("validate.py: %s: no such file\n" % a)
            return 2
    errors, notes = validate_actual(args[0], args[1], layout)
    for n in notes:
        print("note    " + n)
    for e in errors:
        print("INVALID " + e)
    if not errors:
        print("ok      %s (an ACTUAL for %s)" % (args[1], args[0]))
    return 1 if errors else 0


# ------------------------------------------------------------------------------------------------
# Entry points
# ------------------------------------------------------------------------------------------------

# What reading a damaged file can raise from h5py / libhdf5 (and numpy on the values it
# returns): reported as "cannot read" at the object being checked, not as a traceback.
READ_ERRORS = (OSError, KeyError, RuntimeError, TypeError, ValueError, IndexError)


def validate(path, check_model=True):
    """List of error strings (empty = valid)."""
    rep = _Report(path)
    try:
        f = h5py.File(path, "r")
    except (OSError, ValueError) as e:
        rep.err("/", "cannot open as HDF5: %s" % e)
        return rep.errors
    where = "/"
    try:
        with f:
            cfg = _check_root(f, rep)
            if cfg is None:
                return rep.errors
            if check_model:
                where = "/ (attr model_path)"
                _check_model_files(f, rep)
            where = "/cases"
            if "cases" not in f or not isinstance(f["cases"], h5py.Group) or not len(f["cases"]):
                rep.err("/cases", "missing or empty")
                return rep.errors
            for name in sorted(f["cases"].keys()):
                try:
                    _check_case(f, name, cfg, rep)
                except READ_ERRORS as e:  # this case is unreadable; the others are checked
                    _cannot_read(rep, "/cases/" + name, e)
    except READ_ERRORS as e:
        _cannot_read(rep, where, e)
    return rep.errors


def _cannot_read(rep, where, e):
    rep.err(where, "cannot read (%s: %s)" % (type(e).__name__, " ".join(str(e).split())))


def find_goldens(p):
    if os.path.isdir(p):
        out = []
        for root, dirs, files in os.walk(p):
            dirs.sort()
            out += [os.path.join(root, n) for n in sorted(files) if n.endswith(".h5")]
        return out
    return [p]


def main(argv):
    if argv and argv[0] == "--actual":
        return main_actual(argv[1:])
    args = [a for a in argv if a != "--no-model"]
    if not args or any(a.startswith("-") for a in args):
        sys.stderr.write("usage: validate.py [--no-model] FILE_OR_DIR...\n")
        return 2
    for a in args:
        if not os.path.exists(a):
            sys.stderr.write("validate.py: %s: no such file or directory\n" % a)
            return 2
    files = [f for a in args for f in find_goldens(a)]
    if not files:
        sys.stderr.write("validate.py: no *.h5 file found in %s\n" % ", ".join(args))
        return 2
    bad = 0
    for path in files:
        errors = validate(path, check_model="--no-model" not in argv)
        if errors:
            bad += 1
            for e in errors:
                print("INVALID " + e)
        else:
            print("ok      %s" % path)
    print("%d file(s) checked, %d invalid" % (len(files), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
