#!/usr/bin/python3
"""The golden model (golden/qcgolden, float64 PyTorch) run in float32, as an exec adapter:

    qwen-conform check --golden fixtures/ --backend exec:"/usr/bin/python3 adapters/golden/qc_golden_adapter.py"

It is the same code as the golden generator, on float32 weights: a second, independent float32
runtime to check the harness (and the exec: backend) against. golden/ is not modified; what
keeps the computation in float32:
  * the weights dict is cast to float32 after Model.from_dir (the loader widens to float64);
  * every model call runs under torch.set_default_dtype(torch.float32) (State's buffers and
    any tensor the model creates without a dtype), restored afterwards;
  * qcgolden.model.rope_cos_sin hard-codes float64 (inv_freq, positions); it is wrapped to
    return cos/sin cast to the default dtype, so in float32 calls RoPE is float64-computed
    angles rounded to float32 (unchanged for float64 callers);
  * chunk_size: deltarule.chunked takes a chunk argument the model never passes, so while a
    call runs with chunk_size != 64 the module attribute is swapped for a partial (restored).
Capabilities: hidden, state_read (canonical layouts; KV caches zero-padded to n_pos),
state_fill, router (MoE models: the golden model's own top-k ids and renormalised weights of
every layer, its moe_trace, in float32), dn_kernel ("chunked"/"chunk", "recurrent"; default
"auto" = the golden's HF schedule; multi-token calls only: a one-token call always runs the
recurrence), chunk_size.
One torch thread (bit-reproducible results).
"""
import contextlib
import functools
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for p in (os.path.join(ROOT, "adapters", "python"), os.path.join(ROOT, "golden")):
    if p not in sys.path:
        sys.path.insert(0, p)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from qcgolden import deltarule  # noqa: E402
from qcgolden import model as qmodel  # noqa: E402
from qwen_conform_adapter import Runtime, Unsupported, serve  # noqa: E402

KERNELS = {"chunked": "chunk", "chunk": "chunk", "recurrent": "recurrent", "auto": "auto"}


def _rope_default_dtype(positions, rd, theta, _orig=qmodel.rope_cos_sin):
    """qcgolden's rope_cos_sin (float64) cast to the current default dtype."""
    return tuple(t.to(torch.get_default_dtype()) for t in _orig(positions, rd, theta))


if getattr(qmodel.rope_cos_sin, "__name__", "") != "_rope_default_dtype":
    qmodel.rope_cos_sin = _rope_default_dtype


@contextlib.contextmanager
def float32_calls(chunk=deltarule.CHUNK):
    """Default dtype float32 and the chunked kernel at `chunk`, for the duration of a call."""
    old_dtype, old_chunked = torch.get_default_dtype(), deltarule.chunked
    torch.set_default_dtype(torch.float32)
    if chunk != deltarule.CHUNK:
        deltarule.chunked = functools.partial(old_chunked, chunk=chunk)
    try:
        yield
    finally:
        deltarule.chunked = old_chunked
        torch.set_default_dtype(old_dtype)


class GoldenF32(Runtime):
    """qcgolden.model.Model on float32 weights."""

    name = "qcgolden float32 (PyTorch %s)" % torch.__version__
    options_supported = ("dn_kernel", "chunk_size")

    def open(self, model_dir, options):
        torch.set_num_threads(1)
        self.model = qmodel.Model.from_dir(model_dir)
        self.model.W = {k: v.to(torch.float32) for k, v in self.model.W.items()}
        self.kernel, self.chunk, self.last_hidden = "auto", deltarule.CHUNK, None
        self.last_router = self.moe_trace = self.last_mlp_in = None
        for k, v in options.items():
            self.set_option(k, v)
        self.reset()
        cfg = self.model.cfg
        return {"vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
                "n_layers": cfg.num_hidden_layers}

    def reset(self):
        with float32_calls():
            self.cache = self.model.new_state()
        self.last_hidden = self.last_router = self.last_mlp_in = None

    def _run(self, tokens):
        """One model call on self.cache: (logits [n, V], hidden [L+1, n, H]) float32 tensors;
        self.moe_trace (a dict, MoE models; None else) gets the router's choices (qcgolden
        Model.forward's moe_trace).
        dn_kernel concerns multi-token calls only (docs/adapter-protocol.md): a one-token call
        (decode, static prefill) always runs the token recurrence."""
        kernel = self.kernel if len(tokens) > 1 else "recurrent"
        with float32_calls(self.chunk):
            return self.model.forward(tokens, self.cache, kernel, collect_hidden=True,
                                      moe_trace=self.moe_trace)

    def forward(self, tokens, start_pos):
        if start_pos == 0 and self.cache.pos != 0:
            self.reset()    # the no-KV strategy: the caller restarts the sequence
        if start_pos != self.cache.pos:
            raise ValueError("start_pos %d but %d positions are cached" % (start_pos, self.cache.pos))
        trace = self.moe_trace = {}     # moe_in + the router (MoE) or mlp_in (dense)
        self.last_router = self.last_mlp_in = None
        try:
            logits, hidden = self._run([int(t) for t in tokens])
        finally:
            self.moe_trace = None
        if logits.dtype != torch.float32:
            raise AssertionError("computed in %s, not float32" % logits.dtype)
        self.last_hidden = hidden
        if "topk_ids" in trace:
            self.last_router = (trace["topk_ids"], trace["topk_weights"])
        self.last_mlp_in = trace.get("moe_in", trace.get("mlp_in"))
        return logits.numpy()

    def hidden(self):
        return self.last_hidden.numpy()

    def mlp_in(self):
        if self.last_mlp_in is None:
            raise ValueError("no mlp_in: no forward since reset")
        return self.last_mlp_in

    def router(self):
        if not self.model.cfg.is_moe:
            raise Unsupported("a dense model: no router")
        if self.last_router is None:
            raise ValueError("no router choices: no forward since reset")
        return self.last_router

    def state(self, n_pos):
        out = {}
        for i, d in enumerate(self.cache.layers):
            for name in ("k_cache", "v_cache"):
                if name in d:
                    have = d[name].numpy()
                    buf = np.zeros((have.shape[0], n_pos, have.shape[2]), np.float32)
                    m = min(n_pos, have.shape[1])
                    buf[:, :m] = have[:, :m]
                    out["layer_%02d/%s" % (i, name)] = buf
            for name in ("conv_state", "recurrent_state"):
                if name in d:
                    out["layer_%02d/%s" % (i, name)] = d[name].numpy().copy()
        return out

    def fill_state(self, value):
        for d in self.cache.layers:
            for v in d.values():
                if torch.is_tensor(v):
                    v.fill_(value)

    def set_option(self, key, value):
        if key == "dn_kernel":
            if value not in KERNELS:
                raise ValueError("dn_kernel %r: use chunked or recurrent" % value)
            self.kernel = KERNELS[value]
        elif key == "chunk_size":
            n = int(value)
            if n < 1:
                raise ValueError("chunk_size %r must be >= 1" % value)
            self.chunk = n
        else:
            raise ValueError("unknown option %r" % key)


def main():
    return serve(GoldenF32())


if __name__ == "__main__":
    sys.exit(main())
