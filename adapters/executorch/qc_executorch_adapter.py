#!/usr/bin/python3
"""An ExecuTorch .pte program as a qwen-conform exec adapter (protocol v1), driven the way
ExecuTorch's C++ LLM runner drives it (TextPrefiller / TextTokenGenerator / TextDecoderRunner):

    qwen-conform check --golden DIR \\
        --backend exec:"/usr/bin/python3 adapters/executorch/qc_executorch_adapter.py --pte M.pte"

The model directory given to `open` is the Hugging Face checkpoint directory: only its
config.json is read (dims). The program comes from --pte or the open option pte=PATH.

Profile, from the program's metadata methods (each may be absent):
  enable_dynamic_shape  absent -> False            use_kv_cache  absent -> True
  get_max_seq_len       absent -> refused, as the C++ runner does (unless --max-seq-len N)
  get_max_context_len   absent -> max_seq_len      get_vocab_size  checked against config.json
How forward(tokens, start_pos) drives the "forward" method:
  static  (KV cache, enable_dynamic_shape false): one execute([tokens [1,1], input_pos [1]])
          per token, input_pos = start_pos, start_pos+1, ...; each call's logits row is kept.
          Announces max_tokens_per_call 1.
  dynamic (KV cache, enable_dynamic_shape true): chunks of at most max_seq_len tokens, one
          execute([tokens [1,c], input_pos]) each; input_pos is [c] (cache positions) or [1]
          (the start) as the runner picks it: by the size of the method's second input
          (> 1: cache positions), overridable with input_pos=vector|scalar.
  nokv    (use_kv_cache false): the whole sequence since the last reset from position 0, one
          execute([tokens [1,T]]) (the runner passes no position to a one-input method); the
          last n rows are this call's logits. T is bounded by max_seq_len.
Logits: output 0 of shape [1,n,V], [n,V], or [1,V] / [1,1,V] (last position only). A program
that returns only the last position cannot serve a call of n > 1 tokens: a clear error, never
invented rows.
reset: reloads the program from the .pte and loads "forward" again (Program.load_method caches
the Method, so asking it again would return the same buffers). No state_read / state_fill: the
mutable buffers live inside the program and this adapter does not read them.

Importing this module needs neither ExecuTorch nor, for the class alone, the helper package.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
_HELPER = os.path.join(ROOT, "adapters", "python")
if _HELPER not in sys.path:
    sys.path.insert(0, _HELPER)

import numpy as np  # noqa: E402

try:  # the helper package (adapters/python); only serve() truly needs it
    from qwen_conform_adapter import Runtime as _Base  # noqa: E402
    HAVE_HELPER = True
except ImportError:  # pragma: no cover - exercised only when the helper is absent
    HAVE_HELPER = False

    class _Base(object):
        name = "python-runtime"
        max_tokens_per_call = 0
        max_context_len = 0
        options_supported = ()
        hidden_requested = False

        def close(self):
            pass

MODES = ("static", "dynamic", "nokv")
INPUT_POS_FORMS = ("auto", "vector", "scalar")


class ExecuTorchAdapterError(RuntimeError):
    """A program / profile / call this adapter refuses, with the reason."""


class LastPositionOnly(ExecuTorchAdapterError):
    """The program returned the logits of the last position only for a multi-token call."""


def _load_executorch():
    """The executorch.runtime module, imported only when a program is opened."""
    try:
        import executorch.runtime as etr
    except ImportError as e:
        raise ExecuTorchAdapterError(
            "cannot import executorch.runtime (%s): install the ExecuTorch Python package "
            "(pip install executorch) in the interpreter that runs this adapter" % e)
    return etr


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def _scalar(v, what):
    """A metadata method's value (int / bool / 0-d tensor / 1-element list) as a Python int."""
    if isinstance(v, (list, tuple)):
        if len(v) != 1:
            raise ExecuTorchAdapterError("metadata %s returned %d values, expected 1"
                                         % (what, len(v)))
        v = v[0]
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, bool):
        return int(v)
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ExecuTorchAdapterError("metadata %s returned %r, not a number" % (what, v))
    if f != int(f):
        raise ExecuTorchAdapterError("metadata %s returned %r, not an integer" % (what, v))
    return int(f)


def _as_f32(x):
    """An output tensor (torch of any float dtype, numpy, list) as float32 numpy."""
    if hasattr(x, "detach"):
        x = x.detach()
        if hasattr(x, "float"):
            x = x.float()       # bfloat16 / float16 have no direct numpy conversion
        return x.cpu().numpy().astype(np.float32, copy=False)
    return np.asarray(x, dtype=np.float32)


def _config_vocab(model_dir):
    """vocab_size from model_dir/config.json (multimodal text_config or flat), or None."""
    try:
        with open(os.path.join(model_dir, "config.json"), "rb") as f:
            cfg = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    tc = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    v = tc.get("vocab_size")
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class ExecuTorchRuntime(_Base):
    """qwen-conform Runtime over an ExecuTorch program (see the module docstring)."""

    name = "executorch"
    max_tokens_per_call = 0
    max_context_len = 0
    options_supported = ()

    def __init__(self, pte=None, input_pos="auto", max_seq_len=None):
        self.pte = pte
        self.input_pos_opt = input_pos
        self.max_seq_len_opt = max_seq_len
        self.program = None
        self.method = None
        self.profile = None           # {"enable_dynamic_shape", "use_kv_cache", ...}
        self.absent = []              # metadata methods the program lacks
        self.mode = None
        self.n_inputs = None
        self.input_pos_form = None    # "vector" | "scalar" (None for a one-input program)
        self.pos = 0                  # positions consumed since the last reset
        self.history = []             # tokens since the last reset (no-KV programs)
        self.stale = False            # a failed call left the program's state unknown
        self.loads = 0                # program loads (open + every reset)
        self._etr = None

    # ---- loading -------------------------------------------------------------------------
    def _load(self):
        """A fresh Program and its "forward" Method (fresh mutable buffers)."""
        self.program = self._etr.Runtime.get().load_program(self.pte)
        names = set(self.program.method_names)
        if "forward" not in names:
            raise ExecuTorchAdapterError("%s has no method \"forward\" (methods: %s)"
                                         % (self.pte, ", ".join(sorted(names)) or "none"))
        self.method = self.program.load_method("forward")
        self.loads += 1

    def _meta(self, name, default):
        if name not in set(self.program.method_names):
            self.absent.append(name)
            return default
        return _scalar(self.program.load_method(name).execute([]), name)

    def _method_meta(self):
        """The forward method's MethodMeta, or None when this ExecuTorch build lacks it."""
        try:
            return self.method.metadata
        except Exception:  # noqa: BLE001 - older / partial builds: fall back on the profile
            return None

    def open(self, model_dir, options):
        options = dict(options or {})
        unknown = sorted(set(options) - {"pte", "input_pos", "max_seq_len"})
        if unknown:
            raise ExecuTorchAdapterError("unknown option %s (known: pte, input_pos, max_seq_len)"
                                         % unknown[0])
        self.pte = options.get("pte") or self.pte
        if not self.pte:
            raise ExecuTorchAdapterError("no program: pass --pte PATH or the option pte=PATH")
        if not os.path.isfile(self.pte):
            raise ExecuTorchAdapterError("%s: no such file" % self.pte)
        self.input_pos_opt = options.get("input_pos", self.input_pos_opt) or "auto"
        if self.input_pos_opt not in INPUT_POS_FORMS:
            raise ExecuTorchAdapterError("input_pos must be one of %s, got %r"
                                         % ("|".join(INPUT_POS_FORMS), self.input_pos_opt))
        if options.get("max_seq_len"):
            try:
                self.max_seq_len_opt = int(options["max_seq_len"])
            except ValueError:
                raise ExecuTorchAdapterError("max_seq_len must be an integer, got %r"
                                             % options["max_seq_len"])
        self._etr = _load_executorch()
        self._load()

        self.absent = []
        dyn = bool(self._meta("enable_dynamic_shape", 0))
        kv = bool(self._meta("use_kv_cache", 1))
        msl = self._meta("get_max_seq_len", None)
        if msl is None:
            if not self.max_seq_len_opt:
                raise ExecuTorchAdapterError(
                    "%s has no get_max_seq_len metadata method; ExecuTorch's runner refuses such "
                    "a program too. Pass --max-seq-len N (option max_seq_len=N) if you know it"
                    % self.pte)
            msl = self.max_seq_len_opt
        mcl = self._meta("get_max_context_len", msl)
        vocab = self._meta("get_vocab_size", None)
        if msl < 1 or mcl < 1:
            raise ExecuTorchAdapterError("max_seq_len %d / max_context_len %d must be >= 1"
                                         % (msl, mcl))
        cfg_vocab = _config_vocab(model_dir)
        if vocab is not None and cfg_vocab is not None and vocab != cfg_vocab:
            raise ExecuTorchAdapterError("the program's get_vocab_size is %d but %s/config.json "
                                         "has vocab_size %d: not the same model"
                                         % (vocab, model_dir, cfg_vocab))
        self.profile = {"enable_dynamic_shape": dyn, "use_kv_cache": kv, "max_seq_len": msl,
                        "max_context_len": mcl, "vocab_size": vocab}

        # the number of inputs decides, as in TextDecoderRunner::step, whether a position goes in
        mm = self._method_meta()
        n_in = None
        if mm is not None:
            try:
                n_in = int(mm.num_inputs())
            except Exception:  # noqa: BLE001
                n_in = None
        if n_in is None:
            n_in = 2 if kv else 1
        if kv and n_in < 2:
            raise ExecuTorchAdapterError("use_kv_cache is true but \"forward\" takes %d input(s): "
                                         "no input_pos to pass" % n_in)
        if n_in > 2:
            raise ExecuTorchAdapterError("\"forward\" takes %d inputs; this adapter passes "
                                         "(tokens, input_pos) only" % n_in)
        self.n_inputs = n_in
        self.input_pos_form = None
        if n_in == 2:
            form = self.input_pos_opt
            if form == "auto":
                form = "scalar"
                try:  # populate_start_pos_or_cache_position: size of the second input
                    sizes = tuple(mm.input_tensor_meta(1).sizes()) if mm is not None else ()
                    if sizes and int(sizes[0]) > 1:
                        form = "vector"
                except Exception:  # noqa: BLE001 - no metadata: the [1] start form
                    pass
            self.input_pos_form = form

        self.mode = "nokv" if not kv else ("dynamic" if dyn else "static")
        self.max_tokens_per_call = 1 if self.mode == "static" else msl
        self.max_context_len = min(mcl, msl) if self.mode == "nokv" else mcl
        self.name = "executorch %s (%s, max_seq_len %d, max_context_len %d%s)" % (
            os.path.basename(self.pte), self.mode, msl, mcl,
            ", input_pos %s" % self.input_pos_form if self.input_pos_form else "")
        self.pos, self.history, self.stale = 0, [], False
        return None   # dims from config.json

    # ---- protocol operations -------------------------------------------------------------
    def reset(self):
        if self.program is None:
            raise ExecuTorchAdapterError("reset before open")
        self.method = None
        self._load()
        self.pos, self.history, self.stale = 0, [], False

    def _tensor(self, values, shape):
        a = np.asarray(values, dtype=np.int64).reshape(shape)
        t = _torch()
        return t.from_numpy(a.copy()) if t is not None else a

    def _positions(self, start, n):
        if self.input_pos_form == "vector":
            return self._tensor(np.arange(start, start + n), (n,))
        return self._tensor([start], (1,))

    def _execute(self, toks, start):
        """One execute of "forward" on toks at start; the logits rows it returned ([r, V])."""
        n = len(toks)
        inputs = [self._tensor(toks, (1, n))]
        if self.n_inputs == 2:
            inputs.append(self._positions(start, n))
        self.stale = True   # until the call and its output check succeed
        out = self.method.execute(inputs)
        if isinstance(out, (list, tuple)):
            if not out:
                raise ExecuTorchAdapterError("\"forward\" returned no outputs")
            out = out[0]
        a = _as_f32(out)
        if a.ndim == 3 and a.shape[0] == 1:
            rows = a[0]
        elif a.ndim == 2:
            rows = a
        elif a.ndim == 1:
            rows = a[None]
        else:
            raise ExecuTorchAdapterError("\"forward\" returned logits of shape %s; expected "
                                         "[1, n, V], [n, V] or [1, V]" % (tuple(a.shape),))
        return rows

    def _rows_for(self, rows, n, total, what):
        """This call's n logits rows out of the rows a call of `total` tokens returned (all of
        them, or the last position only); an error when the program gave fewer."""
        r = rows.shape[0]
        if r == total or (r == 1 and n == 1):
            return rows[r - n:]
        if r == 1:
            raise LastPositionOnly(
                "%s: the program returned logits for the last position only (1 row for %d "
                "tokens); qwen-conform compares the logits of every position, so this export "
                "can be checked one token per call only. Re-export with logits for all "
                "positions (ExecuTorch's LLM export calls this generate_full_logits)"
                % (what, total))
        raise ExecuTorchAdapterError("%s: the program returned %d logits rows for %d tokens"
                                     % (what, r, total))

    def forward(self, tokens, start_pos):
        if self.method is None:
            raise ExecuTorchAdapterError("forward before open")
        if self.stale:
            raise ExecuTorchAdapterError("a previous call failed part-way; the program's state "
                                         "is unknown until the next reset")
        toks = [int(t) for t in np.asarray(tokens).reshape(-1)]
        n = len(toks)
        if n < 1:
            raise ExecuTorchAdapterError("empty token list")
        if start_pos != self.pos:
            raise ExecuTorchAdapterError("start_pos %d, but the program has consumed %d "
                                         "positions since the last reset" % (start_pos, self.pos))
        if start_pos + n > self.max_context_len:
            raise ExecuTorchAdapterError("positions up to %d exceed max_context_len %d"
                                         % (start_pos + n, self.max_context_len))
        msl = self.profile["max_seq_len"]
        out = []
        if self.mode == "static":
            for i, t in enumerate(toks):   # TextPrefiller sequential prefill
                rows = self._execute([t], start_pos + i)
                out.append(self._rows_for(rows, 1, 1, "static call at input_pos %d"
                                          % (start_pos + i)))
                self.stale = False
        elif self.mode == "dynamic":
            for c0 in range(0, n, msl):    # TextPrefiller: chunks of at most max_seq_len
                chunk = toks[c0:c0 + msl]
                rows = self._execute(chunk, start_pos + c0)
                what = "dynamic call of %d tokens at input_pos %d" % (len(chunk), start_pos + c0)
                out.append(self._rows_for(rows, len(chunk), len(chunk), what))
                self.stale = False
        else:                              # no KV cache: the whole sequence from position 0
            seq = self.history + toks
            if len(seq) > msl:
                raise ExecuTorchAdapterError("no-KV program: the whole sequence (%d tokens) "
                                             "exceeds max_seq_len %d" % (len(seq), msl))
            rows = self._execute(seq, 0)
            out.append(self._rows_for(rows, n, len(seq), "no-KV call of %d tokens (%d new)"
                                      % (len(seq), n)))
            self.stale = False
            self.history = seq
        self.pos = start_pos + n
        return np.concatenate(out, axis=0)

    def close(self):
        self.method = None
        self.program = None


def main(argv=None):
    ap = argparse.ArgumentParser(description="An ExecuTorch .pte program as a qwen-conform "
                                 "exec adapter (stdin/stdout: the adapter protocol v1).")
    ap.add_argument("--pte", help="the .pte program (or the open option pte=PATH)")
    ap.add_argument("--input-pos", choices=INPUT_POS_FORMS, default="auto",
                    help="input_pos of a dynamic call: [n] cache positions (vector) or [1] "
                    "start (scalar); auto: by the size of forward's second input, as the runner")
    ap.add_argument("--max-seq-len", type=int, default=None,
                    help="only for a program without get_max_seq_len metadata")
    args = ap.parse_args(argv)
    if not HAVE_HELPER:
        sys.stderr.write("qc_executorch_adapter: the helper package adapters/python/"
                         "qwen_conform_adapter is missing\n")
        return 2
    from qwen_conform_adapter import serve
    return serve(ExecuTorchRuntime(args.pte, args.input_pos, args.max_seq_len))


if __name__ == "__main__":
    raise SystemExit(main())
