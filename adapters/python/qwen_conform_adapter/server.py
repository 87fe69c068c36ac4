"""serve(): the child side of the adapter protocol, one request at a time.

Isolation: while serving, sys.stdout is sys.stderr (a stray print() in runtime code cannot
corrupt the protocol) and sys.stdin is /dev/null. When serve() owns the process's real stdout
(stdout=None), it also moves file descriptor 1: frames go to a private duplicate of it and fd 1
itself points at stderr, so native libraries printing with printf cannot corrupt it either.
Everything is restored when serve() returns.
"""
import contextlib
import os
import sys
import traceback

import numpy as np

from . import framing, modelcfg, state
from .runtime import Runtime, Unsupported, as_f32, capabilities, overrides

PROTOCOL = "qwen-conform-adapter"
VERSION = 1


class Refused(Exception):
    """A request the helper itself rejects (bad arguments, shapes the runtime got wrong)."""


@contextlib.contextmanager
def _isolated(stdin, stdout):
    """(reader, writer) for the protocol, with print() and fd 1 pointed at stderr meanwhile."""
    saved = sys.stdin, sys.stdout
    fd_saved = None
    devnull = open(os.devnull, "r")
    try:
        if stdin is None:
            stdin = sys.stdin.buffer
        if stdout is None:
            sys.stdout.flush()
            fd_saved = os.dup(1)
            stdout = os.fdopen(os.dup(1), "wb")
            os.dup2(2, 1)
        sys.stdin, sys.stdout = devnull, sys.stderr
        yield stdin, stdout
    finally:
        sys.stdin, sys.stdout = saved
        devnull.close()
        if fd_saved is not None:
            try:
                stdout.close()
            except OSError:      # the host is gone; nothing left to flush to
                pass
            os.dup2(fd_saved, 1)
            os.close(fd_saved)


def _int(header, key, lo=0):
    v = header.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise Refused("%s must be an integer >= %d, got %r" % (key, lo, v))
    return v


def _fill_value(v):
    """A fill_state value: a number or "nan" / "inf" / "-inf"."""
    if isinstance(v, str) and v.lower() in ("nan", "inf", "+inf", "-inf", "infinity", "-infinity"):
        return float(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Refused("value must be a number or \"nan\", \"inf\", \"-inf\", got %r" % (v,))
    return float(v)


def parse_options(text):
    """"k=v,k=v" -> {k: v} ("" -> {})."""
    out = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise Refused("option %r is not key=value" % item)
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _topk_offence(ids, lps, V):
    """The first (row, entry, what) wrong in a top-k answer, or None."""
    for r in range(ids.shape[0]):
        for j in range(ids.shape[1]):
            i, lp = ids[r, j], lps[r, j]
            what = ("token id out of range" if not 0 <= i < V else
                    "log-probability not finite" if not np.isfinite(lp) else
                    "log-probability > 0" if lp > 1e-3 else
                    "log-probabilities not descending" if j and lp > lps[r, j - 1] else
                    "token id repeated in the row" if i in ids[r, :j] else None)
            if what:
                return r, j, what
    return None


class _Session:
    """One conversation: the runtime, what open() established, the request handlers."""

    def __init__(self, runtime):
        self.rt = runtime
        self.shape = None      # modelcfg.ModelShape after open
        self.caps = []
        self.default_fill = False   # fill_state done by the helper through state()'s views

    # ---- handlers: each returns (extra header fields, [(name, array)]) ----------------------
    def op_open(self, h):
        model_dir = h.get("model_dir")
        if not isinstance(model_dir, str) or not model_dir:
            raise Refused("model_dir must be a non-empty string")
        options = parse_options(h.get("options", ""))
        caps = capabilities(self.rt)
        dims = self.rt.open(model_dir, options)
        try:
            shape = modelcfg.load(model_dir)
        except (OSError, ValueError):
            if dims is None:
                raise
            shape = None
        if dims is not None:
            try:
                V, H, L = (int(dims[k]) for k in ("vocab_size", "hidden_size", "n_layers"))
            except (KeyError, TypeError, ValueError) as e:
                raise Refused("open() must return vocab_size, hidden_size, n_layers: %s" % e)
            if shape is None or (V, H, L) != (shape.vocab_size, shape.hidden_size, shape.n_layers):
                shape = modelcfg.ModelShape(V, H, L, shape and shape.layer_types,
                                            shape and shape.dims,
                                            shape.experts_per_tok if shape else 0)
        for k in ("max_tokens_per_call", "max_context_len"):
            v = getattr(self.rt, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise Refused("Runtime.%s must be an integer >= 0, got %r" % (k, v))
        if not getattr(shape, "experts_per_tok", 0):   # a dense model has no router to report
            caps = [c for c in caps if c != "router"]
        self.shape, self.caps = shape, caps
        self.default_fill = self._probe_default_fill()
        if self.default_fill:
            caps.insert(caps.index("state_read") + 1, "state_fill")
        info = {"vocab_size": shape.vocab_size, "hidden_size": shape.hidden_size,
                "n_layers": shape.n_layers, "max_tokens_per_call": self.rt.max_tokens_per_call,
                "max_context_len": self.rt.max_context_len, "capabilities": caps,
                "name": str(self.rt.name)}
        return {"info": info}, []

    def _probe_default_fill(self):
        """True when the helper can provide fill_state: the runtime defines state() but not
        fill_state, allows it (auto_fill_state), and state() returns writable views of its
        own buffers (after a reset, the same memory on two calls)."""
        rt = self.rt
        if (not getattr(rt, "auto_fill_state", True) or "state_read" not in self.caps or
                "state_fill" in self.caps or overrides(rt, "fill_state") or
                self.shape.state_shapes(0) is None):
            return False
        try:
            rt.reset()
        except Exception:   # noqa: BLE001 - the host's own reset will report it
            return False
        return state.writable_views(rt, self.shape, rt.max_context_len) is not None

    def op_reset(self, h):
        self.rt.reset()
        return {}, []

    def op_forward(self, h):
        toks = h.get("tokens")
        V, L, H = self.shape.vocab_size, self.shape.n_layers, self.shape.hidden_size
        if (not isinstance(toks, list) or not toks or
                any(isinstance(t, bool) or not isinstance(t, int) for t in toks)):
            raise Refused("tokens must be a non-empty list of integers")
        if min(toks) < 0 or max(toks) >= V:
            raise Refused("token id outside [0, %d)" % V)
        start = _int(h, "start_pos")
        n, all_logits, want_hidden = len(toks), h.get("all_logits", True), h.get("hidden", False)
        mt, mc = self.rt.max_tokens_per_call, self.rt.max_context_len
        if mt and n > mt:
            raise Refused("%d tokens in one call, the runtime takes at most %d" % (n, mt))
        if mc and start + n > mc:
            raise Refused("positions up to %d, the runtime holds %d" % (start + n, mc))
        if want_hidden and "hidden" not in self.caps:
            raise Refused("hidden states asked for but not announced")
        self.rt.hidden_requested = bool(want_hidden)
        want_router = h.get("router", False)
        if want_router and "router" not in self.caps:
            raise Refused("router choices asked for but not announced")
        self.rt.router_requested = bool(want_router)
        if h.get("topk") is not None:
            return {}, self._forward_topk(h, np.asarray(toks, dtype=np.int32), start, V)
        logits = as_f32(self.rt.forward(np.asarray(toks, dtype=np.int32), start), "logits")
        if logits.shape != (n, V):
            raise Refused("forward returned logits of shape %s, expected %s (every position)"
                          % (tuple(logits.shape), (n, V)))
        out = [("logits", logits if all_logits else logits[-1:])]
        if want_hidden:
            hid = as_f32(self.rt.hidden(), "hidden")
            if hid.shape != (L + 1, n, H):
                raise Refused("hidden() returned shape %s, expected %s"
                              % (tuple(hid.shape), (L + 1, n, H)))
            out.append(("hidden", hid))
            if "mlp_in" in self.caps:
                mi = as_f32(self.rt.mlp_in(), "mlp_in")
                if mi.shape != (L, n, H):
                    raise Refused("mlp_in() returned shape %s, expected %s"
                                  % (tuple(mi.shape), (L, n, H)))
                out.append(("mlp_in", mi))
        if want_router:
            out.extend(self._router(n))
        return {}, out

    def _router(self, n):
        """[("router_ids", int32 [L, n, k]), ("router_weights", f32 [L, n, k])] of the last forward."""
        k = getattr(self.shape, "experts_per_tok", 0)
        if not k:
            raise Refused("router choices asked for, but config.json has no num_experts / "
                          "num_experts_per_tok (a dense model)")
        got = self.rt.router()
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Refused("router() must return (ids, weights)")
        ids = np.asarray(got[0].detach().cpu().numpy() if hasattr(got[0], "detach") else got[0])
        w = as_f32(got[1], "router weights")
        want = (self.shape.n_layers, n, k)
        if ids.shape != want or w.shape != want:
            raise Refused("router() returned ids %s and weights %s, expected %s each"
                          % (tuple(ids.shape), tuple(w.shape), want))
        if ids.dtype.kind not in "iu" and not (ids.dtype.kind == "f" and
                                              np.all(np.floor(ids) == ids)):
            raise Refused("router() ids are not integers (%s)" % ids.dtype)
        ids = ids.astype(np.int64)
        if ids.size and (ids.min() < -2**31 or ids.max() >= 2**31):
            raise Refused("router() ids do not fit int32")
        return [("router_ids", ids.astype(np.int32)), ("router_weights", w)]

    def _forward_topk(self, h, toks, start, V):
        """A topk_only forward: [("topk_ids", int32 [n, k]), ("topk_logprobs", f32 [n, k])]."""
        if "topk_only" not in self.caps:
            raise Refused("topk asked for but topk_only not announced")
        k, n = _int(h, "topk", 1), len(toks)
        if k > min(V, 100):
            raise Refused("topk %d outside 1 .. %d" % (k, min(V, 100)))
        got = self.rt.forward_topk(toks, start, k)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Refused("forward_topk must return (ids, logprobs)")
        ids = np.asarray(got[0].detach().cpu().numpy() if hasattr(got[0], "detach") else got[0])
        lps = as_f32(got[1], "logprobs")
        if ids.shape != (n, k) or lps.shape != (n, k):
            raise Refused("forward_topk returned ids %s and logprobs %s, expected %s each"
                          % (tuple(ids.shape), tuple(lps.shape), (n, k)))
        if ids.dtype.kind not in "iu" and not (ids.dtype.kind == "f" and
                                              np.all(np.floor(ids) == ids)):
            raise Refused("forward_topk ids are not integers (%s)" % ids.dtype)
        bad = _topk_offence(ids.astype(np.int64), lps, V)
        if bad:
            r, j, what = bad
            raise Refused("forward_topk: %s at position %d, entry %d (id %s, logprob %r)"
                          % (what, start + r, j, ids[r, j], float(lps[r, j])))
        return [("topk_ids", ids.astype(np.int32)), ("topk_logprobs", lps)]

    def op_get_state(self, h):
        n_pos = _int(h, "n_pos")
        try:   # flat, nested or HF-style; HF layouts converted, KV caches padded to n_pos
            return {}, state.normalise(self.rt.state(n_pos), self.shape, n_pos)
        except state.StateError as e:
            raise Refused(str(e))

    def op_fill_state(self, h):
        value = _fill_value(h.get("value"))
        if self.default_fill:   # the runtime's own arrays, seen through state()
            try:
                state.fill(self.rt, self.shape, self.rt.max_context_len, value)
            except state.StateError as e:
                raise Refused(str(e))
        else:
            self.rt.fill_state(value)
        return {}, []

    def op_set_option(self, h):
        key, value = h.get("key"), h.get("value")
        if not isinstance(key, str) or not isinstance(value, (str, int, float)):
            raise Refused("set_option needs a string key and value")
        if key not in self.caps or key not in ("threads", "dn_kernel", "chunk_size"):
            raise Unsupported("option %r is not supported" % key)
        self.rt.set_option(key, str(value))
        return {}, []

    def op_snapshot(self, h):
        self.rt.snapshot(_int(h, "slot"))
        return {}, []

    def op_restore(self, h):
        self.rt.restore(_int(h, "slot"))
        return {}, []

    def op_select_sequence(self, h):
        self.rt.select_sequence(_int(h, "seq"))
        return {}, []

    def op_trim(self, h):
        self.rt.trim(_int(h, "n_pos"))
        return {}, []

    # ---- dispatch --------------------------------------------------------------------------
    NEEDS = {"get_state": "state_read", "fill_state": "state_fill",   # op -> capability
             "snapshot": "snapshot", "restore": "snapshot", "select_sequence": "sequences",
             "trim": "trim"}

    def handle(self, h):
        """The response frame (header, tensors) for one request header."""
        op = h.get("op")
        fn = getattr(self, "op_%s" % op, None) if isinstance(op, str) else None
        try:
            if fn is None:
                raise Refused("unknown op %r" % (op,))
            if op != "open" and self.shape is None:
                raise Refused("%s before open" % op)
            cap = self.NEEDS.get(op)
            if cap and cap not in self.caps:
                raise Unsupported("%s was not announced" % cap)
            extra, tensors = fn(h)
            return dict({"type": "ok"}, **extra), tensors
        except Unsupported as e:
            return {"type": "error", "unsupported": True,
                    "message": str(e) or "unsupported"}, []
        except Refused as e:
            sys.stderr.write("qwen_conform_adapter: %s: %s\n" % (op, e))
            return {"type": "error", "message": "%s: %s" % (op, e)}, []
        except Exception as e:  # the runtime's own failure: traceback on stderr, last line back
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
            last = traceback.format_exception_only(type(e), e)[-1].strip()
            return {"type": "error", "message": last}, []


def serve(runtime, stdin=None, stdout=None):
    """Speak the protocol for `runtime` on stdin/stdout (binary streams; default the process's
    own) until close or EOF. Returns the exit code: 0 after close or a clean EOF, 1 when the
    host sent a malformed frame or closed the pipe mid-answer."""
    if not isinstance(runtime, Runtime):
        raise TypeError("serve() needs a Runtime instance, got %r" % (runtime,))
    session = _Session(runtime)
    with _isolated(stdin, stdout) as (rd, wr):
        try:
            return _loop(session, rd, wr)
        except BrokenPipeError:
            sys.stderr.write("qwen_conform_adapter: the host closed the pipe\n")
            return 1


def _loop(session, rd, wr):
    """hello, then one response per request until close (0), EOF (0) or a bad frame (1)."""
    runtime = session.rt
    framing.write_frame(wr, {"type": "hello", "protocol": PROTOCOL, "version": VERSION,
                             "name": str(runtime.name)})
    while True:
        try:
            frame = framing.read_frame(rd)
        except framing.ProtocolError as e:
            sys.stderr.write("qwen_conform_adapter: protocol violation from the host: %s\n" % e)
            return 1
        if frame is None:
            return 0
        header, _ = frame
        if header.get("op") == "close":
            try:
                runtime.close()
            except Exception as e:
                traceback.print_exc(file=sys.stderr)
                last = traceback.format_exception_only(type(e), e)[-1].strip()
                framing.write_frame(wr, {"type": "error", "message": last})
                return 1
            framing.write_frame(wr, {"type": "ok"})
            return 0
        framing.write_frame(wr, *session.handle(header))
