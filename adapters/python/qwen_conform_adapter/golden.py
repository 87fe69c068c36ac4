"""Golden files in, ACTUAL files out (schema v1, golden/SCHEMA.md). Needs h5py (imported on use).

    from qwen_conform_adapter import golden
    g = golden.read("fixtures/tiny-f32-tied-flat/golden.h5")        # the cases' inputs
    with golden.ActualWriter("mine.h5", g, generator="my-runtime 1.2") as out:
        for c in g.cases:
            ...                                                     # run c on your runtime
            out.add(c, prefill_logits=pre, decode_logits=dec)       # hidden / state optional
    # then: qwen-conform diff fixtures/tiny-f32-tied-flat/golden.h5 mine.h5

or, for a Runtime subclass, the whole loop: golden.record(runtime, golden_path, out_path).
The ACTUAL file copies the golden's provenance (config_json, its hashes, model_path made
relative to the new file), says compute_dtype "float32", and records each case's inputs
(start_pos, history_tokens, tokens, decode/tokens) so diff can check the case was run on them.
Like the golden writer: HDF5 1.8 format, no timestamps, float32 / int32, temp file + rename.

Without HDF5 on the reading side: `qwen-conform export-inputs GOLDEN.h5|DIR --out DIR` writes
every case's inputs as JSON (docs/export-inputs.md); golden.read(DIR) (or the index.json, or
one case file) reads them with the json module only, into the same Golden / Case objects, and
golden.read_all(DIR) gives one Golden per exported golden file. Writing the ACTUAL file still
needs h5py (it is HDF5), on whichever machine writes it.
"""
import json
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from . import modelcfg
from .runtime import as_f32

SCHEMA_VERSION = 1


def _h5py():
    try:
        import h5py
    except ImportError:  # pragma: no cover - Debian python3-h5py is the expected provider
        raise ImportError("qwen_conform_adapter.golden needs h5py (Debian: python3-h5py)")
    return h5py


@dataclass
class Case:
    """One golden case's inputs (what a runtime must be fed)."""
    name: str
    start_pos: int                  # P
    history_tokens: np.ndarray      # int32 [P]: replayed before the case
    tokens: np.ndarray              # int32 [T] at positions P .. P+T-1
    decode_tokens: np.ndarray       # int32 [S], teacher-forced one per step
    max_seq_len: Optional[int]      # the case's export max_seq_len (None: harness default)
    description: str = ""
    prefill: Optional[dict] = None  # from export-inputs JSON: mode, max_seq_len, max_context_len,
                                    # history_chunks, prompt_chunks (None when read from HDF5)


@dataclass
class Golden:
    """A golden file's provenance and cases."""
    path: str
    attrs: dict                     # root attributes (schema_version, config_json, ...)
    model_dir: str                  # model_path resolved against the file's directory
    shape: modelcfg.ModelShape
    cases: list


def read(path):
    """Golden from a golden (or ACTUAL) HDF5 file (needs h5py), or from export-inputs JSON (no
    h5py): its directory, its index.json or one case file. Cases in name order. A directory
    export of several goldens is refused here (ValueError): use read_all."""
    if _is_export(path):
        gs = _read_export(path)
        if len(gs) != 1:
            raise ValueError("%s: holds the inputs of %d goldens (%s): use golden.read_all"
                             % (path, len(gs), ", ".join(g.attrs["golden"] for g in gs)))
        return gs[0]
    return _read_h5(path)


def read_all(path):
    """Every Golden under path: an export-inputs directory / index.json (JSON only), a golden
    file, or a directory of goldens (*.h5, recursively, sorted; needs h5py)."""
    if _is_export(path):
        return _read_export(path)
    if os.path.isdir(path):
        found = sorted(os.path.join(d, n) for d, _, ns in os.walk(path) for n in ns
                       if n.endswith(".h5"))
        return [_read_h5(p) for p in found]
    return [_read_h5(path)]


# ---- export-inputs JSON (docs/export-inputs.md) ----------------------------------------------
EXPORT_FORMAT = "qwen-conform-inputs"
EXPORT_VERSION = 1


def _is_export(path):
    return path.endswith(".json") or os.path.isfile(os.path.join(path, "index.json"))


def _load_json(path, fmt):
    try:
        with open(path, "r", encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError("%s: cannot read export-inputs JSON: %s" % (path, e))
    if not isinstance(d, dict) or d.get("format") != fmt:
        raise ValueError("%s: format %r is not %r" % (path, d.get("format") if isinstance(d, dict)
                                                      else None, fmt))
    if d.get("format_version") != EXPORT_VERSION:
        raise ValueError("%s: format_version %r is not %d"
                         % (path, d.get("format_version"), EXPORT_VERSION))
    return d


def _ids(path, d, key):
    v = d.get(key)
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                          for x in v):
        raise ValueError("%s: %s: not a list of token ids" % (path, key))
    return np.asarray(v, dtype=np.int32)


def _case_from_json(path):
    d = _load_json(path, EXPORT_FORMAT + "/case")
    msl = d.get("max_seq_len")
    c = Case(str(d.get("case")), int(d.get("start_pos", 0)), _ids(path, d, "history_tokens"),
             _ids(path, d, "tokens"), _ids(path, d, "decode_tokens"),
             None if msl is None else int(msl), str(d.get("description", "")), d.get("prefill"))
    if len(c.history_tokens) != c.start_pos:
        raise ValueError("%s: history_tokens: %d ids for start_pos %d"
                         % (path, len(c.history_tokens), c.start_pos))
    return c, d


def _golden_from_entry(e, cases, where):
    m = e["model"]
    attrs = {"schema_version": int(e.get("schema_version", SCHEMA_VERSION)),
             "config_json": e["config_json"], "config_sha256": m["config_sha256"],
             "weights_sha256": m["weights_sha256"], "model_path": m["model_path"],
             "generator": e.get("generator", ""), "golden": e["golden"]}
    shape = modelcfg.from_json(json.loads(e["config_json"]))
    return Golden(e.get("golden_file", where), attrs, m["dir"], shape,
                  sorted(cases, key=lambda c: c.name))


def _read_export(path):
    if path.endswith(".json"):
        try:
            with open(path, "r", encoding="utf-8") as f:
                probe = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError("%s: cannot read export-inputs JSON: %s" % (path, e))
        if isinstance(probe, dict) and probe.get("format") == EXPORT_FORMAT + "/case":
            c, d = _case_from_json(path)          # one case file: its own golden entry
            e = {"golden": d["golden"], "model": d["model"],
                 "config_json": d.get("config_json") or _config_of(path, d),
                 "golden_file": d.get("golden_file", d["golden"])}
            return [_golden_from_entry(e, [c], path)]
        index, root = path, os.path.dirname(os.path.abspath(path))
    else:
        index, root = os.path.join(path, "index.json"), path
    d = _load_json(index, EXPORT_FORMAT)
    out = []
    for e in d.get("goldens", []):
        cases = [_case_from_json(os.path.join(root, ce["file"]))[0] for ce in e["cases"]]
        out.append(_golden_from_entry(e, cases, index))
    return out


def _config_of(path, d):
    """A case file read alone: the config from the model directory it names."""
    try:
        with open(os.path.join(d["model"]["dir"], "config.json"), "r", encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ValueError("%s: model dir: %s (read the export's index.json instead)" % (path, e))


# ---- HDF5 ---------------------------------------------------------------------------------------
def _read_h5(path):
    h5py = _h5py()
    with h5py.File(path, "r") as f:
        attrs = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in f.attrs.items()}
        if attrs.get("schema_version") != SCHEMA_VERSION:
            raise ValueError("%s: schema_version %r is not %d"
                             % (path, attrs.get("schema_version"), SCHEMA_VERSION))
        cases = []
        for name in sorted(f["cases"]):
            g = f["cases"][name]
            ints = lambda p: (np.asarray(g[p][()], dtype=np.int32) if p in g
                              else np.zeros(0, dtype=np.int32))
            msl = g.attrs.get("max_seq_len")
            cases.append(Case(name, int(g.attrs["start_pos"]), ints("history_tokens"),
                              ints("tokens"), ints("decode/tokens"),
                              None if msl is None else int(msl), str(g.attrs.get("description", ""))))
    mp = attrs.get("model_path", "")
    model_dir = mp if os.path.isabs(mp) else os.path.join(os.path.dirname(os.path.abspath(path)), mp)
    shape = modelcfg.from_json(json.loads(attrs["config_json"]))
    return Golden(path, attrs, model_dir, shape, cases)


def margins(first_row, decode_logits):
    """top1 - top2 of the rows that chose each decode token: [last prefill row, decode rows
    0 .. S-2] (as the golden's decode/margins)."""
    rows = np.concatenate([np.asarray(first_row, np.float64)[None],
                           np.asarray(decode_logits, np.float64)[:-1]])
    top2 = np.sort(rows, axis=1)[:, -2:]
    return (top2[:, 1] - top2[:, 0]).astype(np.float32)


def _same_file(a, b):
    """True when paths a and b name one file (device + inode; realpath when a is not there)."""
    try:
        sa, sb = os.stat(a), os.stat(b)
        return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _refuse_inputs(path, golden):
    """An ACTUAL file never replaces its golden or a file of the golden's model."""
    inputs = [golden.path]
    if os.path.isdir(golden.model_dir):
        inputs += [os.path.join(golden.model_dir, n) for n in sorted(os.listdir(golden.model_dir))]
    for q in inputs:
        if _same_file(path, q):
            raise ValueError("%s: is the same file as %s (an input): refusing to overwrite it"
                             % (path, q))


class ActualWriter:
    """Writes an ACTUAL file in the golden layout for the cases of `golden` (a Golden or a path).
    Use as a context manager: the file appears (renamed from a temporary) on a clean exit."""

    def __init__(self, path, golden, generator="python-runtime", compute_dtype="float32",
                 torch_version=""):
        h5py = _h5py()
        self.g = golden if isinstance(golden, Golden) else read(golden)
        _refuse_inputs(path, self.g)
        self.path, self.tmp = path, "%s.tmp.%d" % (path, os.getpid())
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        fapl.set_libver_bounds(h5py.h5f.LIBVER_V18, h5py.h5f.LIBVER_V18)
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        fcpl.set_obj_track_times(False)
        self.f = h5py.File(h5py.h5f.create(self.tmp.encode(), h5py.h5f.ACC_TRUNC, fapl=fapl,
                                           fcpl=fcpl))
        a, src = self.f.attrs, self.g.attrs
        a["schema_version"] = np.int32(SCHEMA_VERSION)
        a["generator"] = str(generator)
        a["torch_version"] = str(torch_version)
        a["seed"] = np.int64(-1)
        a["compute_dtype"] = str(compute_dtype)
        out_dir = os.path.dirname(os.path.abspath(path))
        a["model_path"] = os.path.relpath(os.path.abspath(self.g.model_dir), out_dir)
        for k in ("config_sha256", "weights_sha256", "config_json"):
            a[k] = str(src[k])

    # ---- writing ---------------------------------------------------------------------------
    def _group(self, path):
        h5py = _h5py()
        cur = self.f
        for part in path.strip("/").split("/"):
            if part not in cur:
                gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
                gcpl.set_obj_track_times(False)
                h5py.h5g.create(cur.id, part.encode(), gcpl=gcpl)
            cur = cur[part]
        return cur

    def _ds(self, path, data, dtype, shape=None):
        data = np.ascontiguousarray(data, dtype=dtype)
        if shape is not None and data.shape != tuple(shape):
            raise ValueError("%s: shape %s, expected %s" % (path, data.shape, tuple(shape)))
        parent, name = path.rsplit("/", 1)
        self._group(parent).create_dataset(name, data=data, track_times=False)

    def _state(self, group, state, n_pos):
        if hasattr(state, "items") and all(isinstance(v, dict) for v in state.values()):
            state = {"%s/%s" % (l, k): v for l, d in state.items() for k, v in d.items()}
        want = self.g.shape.state_shapes(n_pos)
        names = [n for n, _ in want] if want else sorted(state)
        shapes = dict(want) if want else {}
        missing = [n for n in names if n not in state]
        if missing:
            raise ValueError("%s: state lacks %s" % (group, missing[0]))
        for n in names:
            self._ds("%s/%s" % (group, n), as_f32(state[n], n), np.float32, shapes.get(n))

    def _router(self, group, router, rows):
        """A MoE case's router choices (ids [L, rows, k], weights [L, rows, k] or None) as
        GROUP/router/topk_ids (int32) and topk_weights (float32), the golden's layout."""
        if not isinstance(router, (tuple, list)) or len(router) != 2:
            raise ValueError("%s/router: give (ids, weights)" % group)
        k = self.g.shape.experts_per_tok
        if not k:
            raise ValueError("%s/router: the model is dense (config.json has no num_experts)"
                             % group)
        want = (self.g.shape.n_layers, rows, k)
        ids = np.asarray(router[0].detach().cpu().numpy() if hasattr(router[0], "detach")
                         else router[0])
        if ids.dtype.kind not in "iu" and not (ids.dtype.kind == "f" and
                                              np.all(np.floor(ids) == ids)):
            raise ValueError("%s/router/topk_ids: not integers (%s)" % (group, ids.dtype))
        self._ds(group + "/router/topk_ids", ids, np.int32, want)
        if router[1] is not None:
            self._ds(group + "/router/topk_weights", as_f32(router[1], "router weights"),
                     np.float32, want)

    def add(self, case, prefill_logits, decode_logits=None, prefill_hidden=None,
            prefill_state=None, decode_state=None, prefill_router=None, decode_router=None):
        """One case: logits [T, V] (every prompt position), optionally the teacher-forced decode
        logits [S, V], hidden [L+1, T, H] and the states ({"layer_NN/k_cache": array, ...} as
        Runtime.state returns, or nested {"layer_NN": {...}}) after prefill / after decode, and
        for a MoE model the router choices (ids [L, T, k] / [L, S, k], weights of the same shape
        or None) as Runtime.router returns them, one pair for the prompt and one for the decode
        steps (stacked along axis 1), written as prefill/router and decode/router."""
        if isinstance(case, str):
            case = next(c for c in self.g.cases if c.name == case)
        sh, P, T, S = self.g.shape, case.start_pos, len(case.tokens), len(case.decode_tokens)
        V, H, L = sh.vocab_size, sh.hidden_size, sh.n_layers
        g = "cases/" + case.name
        grp = self._group(g)
        grp.attrs["start_pos"] = np.int32(P)
        if case.max_seq_len is not None:
            grp.attrs["max_seq_len"] = np.int32(case.max_seq_len)
        grp.attrs["description"] = case.description
        if P > 0:
            self._ds(g + "/history_tokens", case.history_tokens, np.int32, (P,))
        self._ds(g + "/tokens", case.tokens, np.int32)
        pre = as_f32(prefill_logits, "prefill_logits")
        self._ds(g + "/prefill/logits", pre, np.float32, (T, V))
        if prefill_hidden is not None:
            self._ds(g + "/prefill/hidden", as_f32(prefill_hidden, "hidden"), np.float32,
                     (L + 1, T, H))
        if prefill_state is not None:
            self._state(g + "/prefill/state", prefill_state, P + T)
        if prefill_router is not None:
            self._router(g + "/prefill", prefill_router, T)
        if decode_logits is not None and S > 0:
            dec = as_f32(decode_logits, "decode_logits")
            self._ds(g + "/decode/tokens", case.decode_tokens, np.int32)
            self._ds(g + "/decode/logits", dec, np.float32, (S, V))
            self._ds(g + "/decode/margins", margins(pre[-1], dec), np.float32)
            if decode_state is not None:
                self._state(g + "/decode/state", decode_state, P + T + S)
            if decode_router is not None:
                self._router(g + "/decode", decode_router, S)

    # ---- closing ---------------------------------------------------------------------------
    def close(self):
        """Finish the file (rename the temporary into place)."""
        if self.f is not None:
            self.f.close()
            self.f = None
            os.replace(self.tmp, self.path)

    def abort(self):
        """Drop the temporary file."""
        if self.f is not None:
            self.f.close()
            self.f = None
            os.unlink(self.tmp)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        self.close() if exc_type is None else self.abort()


def run_case(runtime, case, hidden=True, state=True, router=True):
    """Drive a Runtime through one case teacher-forced: history, prompt, decode tokens.
    Returns the keyword arguments of ActualWriter.add (hidden / state / router when asked for
    and the runtime overrides hidden() / state() / router(); router only for a MoE model)."""
    from .runtime import Unsupported, overrides
    hidden, state = hidden and overrides(runtime, "hidden"), state and overrides(runtime, "state")
    router = router and overrides(runtime, "router")
    runtime.router_requested = router
    runtime.reset()
    P, T = case.start_pos, len(case.tokens)
    if P:
        runtime.hidden_requested = False
        runtime.forward(case.history_tokens, 0)
    runtime.hidden_requested = hidden
    out = {"prefill_logits": as_f32(runtime.forward(case.tokens, P), "logits")}
    if hidden:
        out["prefill_hidden"] = runtime.hidden()
    if state:
        out["prefill_state"] = runtime.state(P + T)
    if router:
        try:
            out["prefill_router"] = runtime.router()
        except Unsupported:  # e.g. a dense model: no router
            router = runtime.router_requested = False
    runtime.hidden_requested = False
    rows, routes = [], []
    for s in range(len(case.decode_tokens)):
        rows.append(as_f32(runtime.forward(case.decode_tokens[s:s + 1], P + T + s), "logits")[-1])
        if router:
            routes.append(runtime.router())
    if routes:   # [L, 1, k] per step -> [L, S, k]
        out["decode_router"] = tuple(np.concatenate([np.asarray(r[i]) for r in routes], axis=1)
                                     for i in range(2))
    if rows:
        out["decode_logits"] = np.stack(rows)
        if state:
            out["decode_state"] = runtime.state(P + T + len(rows))
    return out


def record(runtime, golden_path, out_path, generator=None, hidden=True, state=True,
           router=True):
    """Open `runtime` on the golden's model, run every case, write the ACTUAL file (with the
    router choices of a MoE model when the runtime overrides router())."""
    g = read(golden_path)
    runtime.open(g.model_dir, {})
    router = router and bool(g.shape.experts_per_tok)
    with ActualWriter(out_path, g, generator=generator or str(runtime.name)) as w:
        for c in g.cases:
            w.add(c, **run_case(runtime, c, hidden, state, router))
    return out_path
