#!/usr/bin/python3
"""Mutant exec adapters for tests/cli/test_causes.sh (root-cause triage, issue #26): the float32
golden adapter with ONE injected bug whose failure pattern the `causes` of a report must name.

    /usr/bin/python3 tests/adapters/causes_mutants.py NAME

NAME            the bug                                          the cause expected
reset-nothing   reset() does nothing: the positions restart       state not reset between
                (KV slots are overwritten) but the DeltaNet conv  sequences (garbage_reset and
                and recurrent states of the previous sequence     every sequence after the
                (and a NaN fill) carry over                       first fail)
mlp-l2          layer 2's MLP output is 1 % too large; hidden,    layer 2, MLP (mlp_in, the
                mlp_in, state_read and state_fill announced       mixer output, agrees)
mlp-l2-nomlpin  the same bug; hidden without mlp_in               layer 2 (mixer or MLP: the
                                                                  hidden states cannot tell)
mlp-l2-states   the same bug; state_read only (no hidden)         at or before layer 3, after
                                                                  layer 2 whose state passes
mlp-l2-logits   the same bug; logits only (no hidden, no state)   no layer named: announce
                                                                  `hidden` to localise
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "adapters", "golden"))

from qc_golden_adapter import GoldenF32, qmodel  # noqa: E402  (puts adapters/python on sys.path)
from qwen_conform_adapter import Runtime, serve  # noqa: E402

_mlp = qmodel.mlp


def _mlp_l2(x, W, p):
    """qcgolden.model.mlp with layer 2's output scaled by 1.01 (decoder_layer calls the module
    global, so replacing it reaches every layer)."""
    out = _mlp(x, W, p)
    return out * 1.01 if p == "layers.2.mlp." else out


class ResetNothing(GoldenF32):
    """reset() keeps every buffer; a sequence restarting at position 0 overwrites the KV slots
    (a slot cache indexed by position) but the DeltaNet states carry over."""

    def reset(self):
        if not hasattr(self, "cache"):
            super().reset()            # open() builds the state once
        self.last_hidden = None

    def forward(self, tokens, start_pos):
        if start_pos == 0 and self.cache.pos != 0:
            self.cache.pos = 0
            for d in self.cache.layers:
                for name in ("k_cache", "v_cache"):
                    if name in d:
                        d[name] = d[name][:, :0]
        return super().forward(tokens, start_pos)


class MlpL2(GoldenF32):
    """Layer 2's MLP output 1 % too large (hidden, state_read, state_fill announced)."""


class MlpL2NoMlpIn(MlpL2):
    """The same bug, hidden states without mlp_in (the mixer output)."""

    mlp_in = Runtime.mlp_in


class MlpL2States(MlpL2):
    """The same bug, without the hidden capability (state_read, state_fill only)."""

    hidden = Runtime.hidden


class MlpL2Logits(MlpL2):
    """The same bug seen through the logits only (no hidden, no state capability)."""

    hidden = Runtime.hidden
    state = Runtime.state
    fill_state = Runtime.fill_state


MUTANTS = {"good": GoldenF32, "reset-nothing": ResetNothing, "mlp-l2": MlpL2,
           "mlp-l2-nomlpin": MlpL2NoMlpIn,
           "mlp-l2-states": MlpL2States, "mlp-l2-logits": MlpL2Logits}


def main(argv):
    if len(argv) != 2 or argv[1] not in MUTANTS:
        sys.stderr.write("usage: causes_mutants.py %s\n" % "|".join(MUTANTS))
        return 2
    if argv[1].startswith("mlp-l2"):
        qmodel.mlp = _mlp_l2
    rt = MUTANTS[argv[1]]()
    rt.name = "golden-f32 mutant %s" % argv[1]
    return serve(rt)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
