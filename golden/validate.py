#!/usr/bin/python3
"""Validate golden HDF5 files against schema v1 (golden/SCHEMA.md).

    /usr/bin/python3 golden/validate.py [--no-model] FILE_OR_DIR...

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
