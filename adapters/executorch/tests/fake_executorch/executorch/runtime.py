"""A stand-in for `executorch.runtime` (tests only; NOT ExecuTorch).

It has the surface of the real module that qc_executorch_adapter uses:
    Runtime.get() -> Runtime (a singleton); Runtime.load_program(path) -> Program
    Program.method_names (set); Program.load_method(name) -> Method, cached per name
    Method.execute(inputs) -> [outputs]; Method.metadata -> MethodMeta
    MethodMeta.num_inputs(), .num_outputs(), .input_tensor_meta(i).sizes(), .output_tensor_meta(i)
Like the real one, Program.load_method returns the same Method (and so the same mutable
buffers) when asked twice; only a new load_program gives fresh ones.

A "program" file here is a JSON object (not a .pte), `spec`:
    vocab, dim, max_context (buffer slots), seed
    meta: {metadata method name: value}; a name absent = that method absent
    kv: true (tokens, input_pos -> KV-cache-like state) | false (tokens only, no state)
    dynamic: true (tokens [1, 1..max_seq_len]) | false (exactly [1, 1])
    max_seq_len: the token bound of a dynamic or no-KV program
    input_pos: "scalar" ([1] start position) | "vector" ([n] cache positions)
    logits: "3d" [1,n,V] | "2d" [n,V] | "last2" [1,V] | "last3" [1,1,V]
    method_meta: false -> Method.metadata raises (a build without it)
    initial_state: "zeros" | "garbage" (uninitialised buffers: different random values per load)

The tiny model, per token t at position p, in order (`state` = cache [max_context, dim], r [dim]):
    h = E[t] + P[p];  cache[p] = h;  r = 0.5 r + h;  a = mean(cache[0..p]);
    logits = W tanh(h + a + r)
so a wrong input_pos (other slot, other P row, other attention range) or a missing reset (r and
the cache carry over) changes the logits. Every forward execute is appended to LOG.
"""
import functools
import json

import numpy as np

try:
    import torch
except ImportError:  # the stand-in then speaks numpy
    torch = None

LOG = []      # one dict per "forward" execute
LOADS = []    # one path per load_program


def make_weights(spec):
    """E [V, D], P [max_context, D], W [V, D] of a spec (deterministic in spec["seed"])."""
    rng = np.random.default_rng(spec.get("seed", 0))
    V, D, C = spec["vocab"], spec["dim"], spec["max_context"]
    return {"E": rng.standard_normal((V, D)), "P": rng.standard_normal((C, D)),
            "W": rng.standard_normal((V, D)) / np.sqrt(D)}


def _np(x, what):
    if torch is not None and isinstance(x, torch.Tensor):
        if x.dtype != torch.int64:
            raise RuntimeError("%s: dtype %s, the program takes int64" % (what, x.dtype))
        return x.numpy()
    a = np.asarray(x)
    if a.dtype != np.int64:
        raise RuntimeError("%s: dtype %s, the program takes int64" % (what, a.dtype))
    return a


class TensorInfo:
    def __init__(self, sizes):
        self._sizes = tuple(sizes)

    def sizes(self):
        return self._sizes


class MethodMeta:
    def __init__(self, inputs, outputs):
        self._in, self._out = inputs, outputs

    def num_inputs(self):
        return len(self._in)

    def num_outputs(self):
        return len(self._out)

    def input_tensor_meta(self, i):
        if not 0 <= i < len(self._in):
            raise IndexError(i)
        return TensorInfo(self._in[i])

    def output_tensor_meta(self, i):
        if not 0 <= i < len(self._out):
            raise IndexError(i)
        return TensorInfo(self._out[i])


class _ConstMethod:
    """A metadata method: no inputs, one value."""

    def __init__(self, value):
        self._value = value

    def execute(self, inputs):
        if len(inputs) != 0:
            raise RuntimeError("a metadata method takes no inputs")
        return [self._value]


class _Forward:
    """The "forward" method of a stand-in program, with its own mutable buffers."""

    def __init__(self, spec, weights, load_id):
        self.spec, self.w, self.load_id = spec, weights, load_id
        D, C = spec["dim"], spec["max_context"]
        if spec.get("initial_state", "zeros") == "garbage":
            g = np.random.default_rng(1000 + load_id)
            self.cache, self.r = g.standard_normal((C, D)), g.standard_normal(D)
        else:
            self.cache, self.r = np.zeros((C, D)), np.zeros(D)

    @property
    def metadata(self):
        s = self.spec
        if s.get("method_meta", True) is False:
            raise RuntimeError("method_meta is not available in this build")
        n = s["max_seq_len"] if (s.get("dynamic") or not s.get("kv", True)) else 1
        ins = [(1, n)]
        if s.get("kv", True):
            ins.append((s["max_seq_len"],) if s.get("input_pos") == "vector" else (1,))
        return MethodMeta(ins, [(1, n, s["vocab"])])

    def _step(self, cache, r, t, p):
        w = self.w
        h = w["E"][t] + w["P"][p]
        cache[p] = h
        r = 0.5 * r + h
        a = cache[:p + 1].mean(axis=0)
        return r, w["W"] @ np.tanh(h + a + r)

    def execute(self, inputs):
        s = self.spec
        kv = s.get("kv", True)
        inputs = list(inputs)
        if len(inputs) != (2 if kv else 1):
            raise RuntimeError("forward takes %d inputs, got %d" % (2 if kv else 1, len(inputs)))
        toks = _np(inputs[0], "tokens")
        if toks.ndim != 2 or toks.shape[0] != 1:
            raise RuntimeError("tokens shape %s, expected [1, n]" % (toks.shape,))
        n = toks.shape[1]
        if kv and not s.get("dynamic") and n != 1:
            raise RuntimeError("static program: tokens must be [1, 1], got [1, %d]" % n)
        if (s.get("dynamic") or not kv) and not 1 <= n <= s["max_seq_len"]:
            raise RuntimeError("tokens [1, %d] beyond the dynamic bound %d" % (n, s["max_seq_len"]))
        entry = {"load": self.load_id, "tokens": toks[0].tolist(), "tokens_shape": toks.shape,
                 "input_pos": None, "input_pos_shape": None}
        if kv:
            ip = _np(inputs[1], "input_pos")
            entry["input_pos"], entry["input_pos_shape"] = ip.tolist(), ip.shape
            if s.get("input_pos") == "vector":
                if ip.shape != (n,):
                    raise RuntimeError("input_pos shape %s, expected [%d]" % (ip.shape, n))
                pos = ip.tolist()
            else:
                if ip.shape != (1,):
                    raise RuntimeError("input_pos shape %s, expected [1]" % (ip.shape,))
                pos = list(range(int(ip[0]), int(ip[0]) + n))
            cache, r = self.cache, self.r
        else:
            pos = list(range(n))
            cache, r = np.zeros_like(self.cache), np.zeros_like(self.r)
        LOG.append(entry)
        if min(pos) < 0 or max(pos) >= s["max_context"]:
            raise RuntimeError("position outside the %d buffer slots" % s["max_context"])
        rows = []
        for t, p in zip(toks[0].tolist(), pos):
            r, lg = self._step(cache, r, t, p)
            rows.append(lg)
        if kv:
            self.r = r
        all_rows = np.asarray(rows, dtype=np.float32)
        form = s.get("logits", "3d")
        if form == "3d":
            out = all_rows[None]
        elif form == "2d":
            out = all_rows
        elif form == "last2":
            out = all_rows[-1:]
        elif form == "last3":
            out = all_rows[None, -1:]
        else:
            raise RuntimeError("bad spec logits form %r" % form)
        return [torch.from_numpy(out.copy()) if torch is not None else out]


class Program:
    def __init__(self, spec, load_id):
        self._spec = spec
        self._weights = make_weights(spec)
        self._load_id = load_id
        self._methods = {"forward": None}
        for k in spec.get("meta", {}):
            self._methods[k] = None

    @property
    def method_names(self):
        return set(self._methods)

    def load_method(self, name):
        if name not in self._methods:
            raise KeyError(name)
        m = self._methods[name]
        if m is None:   # cached per name, as in the real executorch.runtime.Program
            m = (_Forward(self._spec, self._weights, self._load_id) if name == "forward"
                 else _ConstMethod(self._spec["meta"][name]))
            self._methods[name] = m
        return m


class Runtime:
    @staticmethod
    @functools.lru_cache(maxsize=1)
    def get():
        return Runtime()

    def load_program(self, data, **kw):
        path = str(data)
        with open(path, "r") as f:
            spec = json.load(f)
        LOADS.append(path)
        return Program(spec, len(LOADS))
