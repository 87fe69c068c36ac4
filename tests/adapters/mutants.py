#!/usr/bin/python3
"""Mutant exec adapters for the CLI tests: the float32 golden adapter with ONE injected bug.

    /usr/bin/python3 tests/adapters/mutants.py NAME

NAME              the bug                                            what must catch it
good              none                                               (everything passes)
conv-not-reset    reset() keeps the conv_state of the previous        garbage_reset, conv_state
                  sequence
static-rope-p1    single-token calls apply RoPE at position p+1       static_eq_dynamic, k_cache,
                  (a static [1,1] export fed the wrong position)      decode.logits
kv-slots-written  state(n_pos) shows non-zero KV slots past the       unused_slots
                  used positions (a runtime writing past the end)
fill-lies         fill_state also writes a shadow conv buffer that    garbage_reset
                  forward adds in and reset() never clears
decode-drift      a one-token call leaves the DeltaNet state 5 %      decode.logits in dynamic
                  too large (a decode-only state bug: the chunked     mode, localised to decode
                  multi-token prefill is right)                       step 0 and layer 0
decode-state-quiet  decode steps scale layer 1's recurrent state by   decode.recurrent_state in
                  1.0002 (the logits stay inside their tolerance)      dynamic mode, localised to
                                                                      layer 1 (not "after norm")
conv-short-chunk  a prefill call of 2 .. K-1 tokens writes its conv    prefill.conv_state (and the
                  state from the chunk alone: the K - n columns the    decode rows after a 2-token
                  previous chunk left are zeroed (the vLLM #56196      chunk) in dynamic mode on
                  class; right from position 0, wrong after a long     the chunk-hazard cases,
                  first chunk)                                         layer 0; static and nokv
                                                                      pass (tests/cli/
                                                                      test_chunk_hazards.sh)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "adapters", "golden"))

from qc_golden_adapter import GoldenF32  # noqa: E402  (puts adapters/python on sys.path)
from qwen_conform_adapter import serve  # noqa: E402


class ConvNotReset(GoldenF32):
    """reset() forgets to clear the DeltaNet conv buffers."""

    def reset(self):
        old = getattr(self, "cache", None)
        super().reset()
        for new, prev in zip(self.cache.layers, old.layers if old else []):
            if "conv_state" in prev:
                new["conv_state"] = prev["conv_state"]


class StaticRopeP1(GoldenF32):
    """A one-token call rotates q and k as if it sat one position later."""

    def _run(self, tokens):
        if len(tokens) != 1:
            return super()._run(tokens)
        self.cache.pos += 1            # the model derives the RoPE positions from pos
        try:
            return super()._run(tokens)
        finally:
            self.cache.pos -= 1


class KvSlotsWritten(GoldenF32):
    """KV slots past the used positions hold garbage instead of zeros."""

    def state(self, n_pos):
        s = super().state(n_pos)
        for name, buf in s.items():
            if name.endswith(("k_cache", "v_cache")):
                buf[:, self.cache.pos:] = 0.25
        return s


class FillLies(GoldenF32):
    """fill_state reaches a shadow conv buffer that forward adds in and reset() ignores."""

    shadow = 0.0

    def fill_state(self, value):
        super().fill_state(value)
        self.shadow = value

    def _run(self, tokens):
        if self.shadow != 0.0:         # NaN != 0.0 too
            for d in self.cache.layers:
                if "conv_state" in d:
                    d["conv_state"] += self.shadow
        return super()._run(tokens)


class DecodeDrift(GoldenF32):
    """One-token calls (decode, and static prefill) scale the recurrent state by 1.05."""

    def _run(self, tokens):
        out = super()._run(tokens)
        if len(tokens) == 1:
            for d in self.cache.layers:
                if "recurrent_state" in d:
                    d["recurrent_state"] *= 1.05
        return out


class DecodeStateQuiet(GoldenF32):
    """Decode steps (one-token calls after a multi-token prefill) scale layer 1's recurrent
    state by 1.0002: too small to move the logits past their tolerance, large enough for the
    decode state check (a state bug the logits do not show yet)."""

    def _run(self, tokens):
        out = super()._run(tokens)
        if len(tokens) == 1 and getattr(self, "_prefilled", False):
            d = self.cache.layers[1]
            if "recurrent_state" in d:
                d["recurrent_state"] *= float(os.environ.get("QC_MUTANT_SCALE", "1.0002"))
        self._prefilled = len(tokens) > 1 or getattr(self, "_prefilled", False)
        return out

    def reset(self):
        super().reset()
        self._prefilled = False


class ConvShortChunk(GoldenF32):
    """A multi-token call shorter than the conv window writes the conv state from the chunk
    only. The state holds the last K input columns; after a call of n < K tokens K - n of them
    come from before the call, and this runtime zeroes them (the chunk's own outputs are right:
    the bug is in the state it leaves). One-token calls are left alone: through exec: a
    one-token prefill chunk is the same call as a decode step, whose path is right here.
    QC_MUTANT_LAYER=i: only layer i has the bug (default: every linear-attention layer)."""

    def _run(self, tokens):
        out = super()._run(tokens)
        n, K = len(tokens), self.model.cfg.linear_conv_kernel_dim
        only = os.environ.get("QC_MUTANT_LAYER")
        if 1 < n < K:
            for i, d in enumerate(self.cache.layers):
                if "conv_state" in d and (only is None or i == int(only)):
                    d["conv_state"][:, :K - n] = 0.0
        return out


MUTANTS = {"good": GoldenF32, "conv-not-reset": ConvNotReset, "static-rope-p1": StaticRopeP1,
           "kv-slots-written": KvSlotsWritten, "fill-lies": FillLies,
           "decode-drift": DecodeDrift, "decode-state-quiet": DecodeStateQuiet,
           "conv-short-chunk": ConvShortChunk}


def main(argv):
    if len(argv) != 2 or argv[1] not in MUTANTS:
        sys.stderr.write("usage: mutants.py %s\n" % "|".join(MUTANTS))
        return 2
    rt = MUTANTS[argv[1]]()
    rt.name = "golden-f32 mutant %s" % argv[1]
    return serve(rt)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
