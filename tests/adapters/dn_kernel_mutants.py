#!/usr/bin/python3
"""Mutant exec adapters for tests/cli/test_dn_kernel.sh: the float32 golden adapter with a bug
in one DeltaNet kernel of ONE layer (QC_MUTANT_LAYER, default 1).

    /usr/bin/python3 tests/adapters/dn_kernel_mutants.py NAME

NAME              the bug                                              what must catch it
good              none (the golden adapter, logging)                   (everything passes)
decode-kernel     dn_kernel is applied to one-token calls too (against  the decode rows (static,
                  docs/adapter-protocol.md), and the token recurrence   dynamic, nokv) naming the
                  predicts from the state before its decay (S^T k of    layer; chunked_eq_recurrent
                  the undecayed state): told nothing, every one-token   names it too
                  call runs the buggy recurrence; told dn_kernel=
                  chunked, decode hides the bug
chunk-end-decay   the chunked kernel loses the decay of the last token  chunked_eq_recurrent naming
                  of every chunk (a chunk-boundary bug); the recurrence the layer; the dynamic
                  is right                                              rows against the golden

QC_MUTANT_HIDE=hidden,state_read: the mutant does not announce those capabilities (the
localisation then has less to go on, and says what to announce).
QC_DN_LOG=FILE: every call is appended to FILE, one line each: "reset", "forward N START
KERNEL" (KERNEL: what the call ran: chunk / recurrent / auto) and "set_option KEY VALUE", so a
test can see which runs were told dn_kernel / chunk_size.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "adapters", "golden"))

from qc_golden_adapter import GoldenF32, float32_calls  # noqa: E402  (adapters/python on sys.path)
from qcgolden import deltarule  # noqa: E402
from qcgolden import model as qmodel  # noqa: E402
from qwen_conform_adapter import Runtime, serve  # noqa: E402

LAYER = int(os.environ.get("QC_MUTANT_LAYER", "1"))
_current = {"layer": -1}                       # the layer whose DeltaNet runs now
_orig_gdn, _orig_rec, _orig_chunked = qmodel.gated_deltanet, deltarule.recurrent, deltarule.chunked


def _gdn_tracking(u, W, p, cfg, st, kernel):
    """qcgolden's gated_deltanet, remembering the layer ("layers.3.linear_attn." -> 3)."""
    _current["layer"] = int(p.split(".")[1])
    try:
        return _orig_gdn(u, W, p, cfg, st, kernel)
    finally:
        _current["layer"] = -1


qmodel.gated_deltanet = _gdn_tracking


def recurrent_undecayed_prediction(q, k, v, g, beta, S0):
    """The token recurrence with the prediction S^T k taken before the decay (the right one
    decays first: qcgolden.deltarule.recurrent)."""
    S = S0.clone()
    out = []
    for t in range(q.shape[0]):
        kv = torch.einsum("hij,hi->hj", S, k[t])                # BUG: S not yet decayed
        S = S * torch.exp(g[t])[:, None, None]
        d = beta[t][:, None] * (v[t] - kv)
        S = S + k[t][:, :, None] * d[:, None, :]
        out.append(torch.einsum("hij,hi->hj", S, q[t]))
    return torch.stack(out), S


def _rec_buggy(q, k, v, g, beta, S0):
    if _current["layer"] == LAYER:
        return recurrent_undecayed_prediction(q, k, v, g, beta, S0)
    return _orig_rec(q, k, v, g, beta, S0)


def _chunked_end_decay_lost(q, k, v, g, beta, S0, chunk=deltarule.CHUNK):
    if _current["layer"] == LAYER:
        g = g.clone()
        T = g.shape[0]
        ends = list(range(chunk - 1, T, chunk))
        if not ends or ends[-1] != T - 1:
            ends.append(T - 1)
        g[ends] = 0.0                               # BUG: no decay at the chunk's last token
    return _orig_chunked(q, k, v, g, beta, S0, chunk=chunk)


class Logged(GoldenF32):
    """The golden adapter that logs every reset / forward / set_option to $QC_DN_LOG."""

    def _log(self, line):
        path = os.environ.get("QC_DN_LOG")
        if path:
            with open(path, "a") as f:
                f.write(line + "\n")

    def set_option(self, key, value):
        self._log("set_option %s %s" % (key, value))
        super().set_option(key, value)

    def reset(self):
        if getattr(self, "model", None) is not None and hasattr(self, "cache"):
            self._log("reset")
        super().reset()

    def _kernel(self, tokens):
        """The kernel a call runs (the golden adapter's rule: one-token calls recur)."""
        return self.kernel if len(tokens) > 1 else "recurrent"

    def _run(self, tokens, *trace):
        """GoldenF32._run with the kernel of _kernel (trace: the golden adapter's moe_trace dict,
        which receives mlp_in / moe_in and the router)."""
        kernel = self._kernel(tokens)
        self._log("forward %d %d %s" % (len(tokens), self.cache.pos, kernel))
        with float32_calls(self.chunk):
            return self.model.forward(tokens, self.cache, kernel, True,
                                      trace[0] if trace else self.moe_trace)


class DecodeKernel(Logged):
    """dn_kernel reaches one-token calls; the recurrence has the undecayed-prediction bug."""

    def _kernel(self, tokens):
        if self.kernel != "auto":
            return self.kernel                      # BUG: one-token calls follow dn_kernel
        return "recurrent" if len(tokens) == 1 else "auto"

    def _run(self, tokens, *trace):
        deltarule.recurrent = _rec_buggy
        try:
            return super()._run(tokens, *trace)
        finally:
            deltarule.recurrent = _orig_rec


class ChunkEndDecay(Logged):
    """The chunked kernel drops the decay at each chunk's last token."""

    def _run(self, tokens, *trace):
        # float32_calls swaps deltarule.chunked for a partial when chunk != 64: patch first
        deltarule.chunked = _chunked_end_decay_lost
        try:
            return super()._run(tokens, *trace)
        finally:
            deltarule.chunked = _orig_chunked


MUTANTS = {"good": Logged, "decode-kernel": DecodeKernel, "chunk-end-decay": ChunkEndDecay}


def main(argv):
    if len(argv) != 2 or argv[1] not in MUTANTS:
        sys.stderr.write("usage: dn_kernel_mutants.py %s\n" % "|".join(MUTANTS))
        return 2
    cls = MUTANTS[argv[1]]
    hide = [h for h in os.environ.get("QC_MUTANT_HIDE", "").split(",") if h]
    methods = {"hidden": "hidden", "state_read": "state"}
    if any(h not in methods for h in hide):
        sys.stderr.write("QC_MUTANT_HIDE: hidden and/or state_read\n")
        return 2
    if hide:   # the helper announces only what a subclass overrides: un-override them
        cls = type(cls.__name__ + "Hiding", (cls,),
                   {methods[h]: getattr(Runtime, methods[h]) for h in hide})
    rt = cls()
    rt.name = "golden-f32 dn-kernel mutant %s" % argv[1]
    return serve(rt)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
