#!/usr/bin/python3
"""A mutant exec adapter for test_drift_hazard.sh: the float32 golden adapter whose DeltaNet
recurrent state is stored in bf16 (rounded after every call), as in ollama/ollama#15865 ("1-2
sane tokens then repetition"). long_decode_drift must fail on it through exec:, naming the
first step over tolerance; the unmodified adapter (`good`) passes.

    /usr/bin/python3 tests/adapters/mutant_state_bf16.py good|state-bf16
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "adapters", "golden"))

from qc_golden_adapter import GoldenF32  # noqa: E402  (puts adapters/python on sys.path)
from qwen_conform_adapter import serve  # noqa: E402


class StateBf16(GoldenF32):
    """Every call ends with the recurrent state rounded to bf16 (and widened back)."""

    def _run(self, tokens):
        out = super()._run(tokens)
        for d in self.cache.layers:
            if "recurrent_state" in d:
                d["recurrent_state"] = d["recurrent_state"].to(torch.bfloat16).to(
                    d["recurrent_state"].dtype)
        return out


def main(argv):
    kinds = {"good": GoldenF32, "state-bf16": StateBf16}
    if len(argv) != 2 or argv[1] not in kinds:
        sys.stderr.write("usage: mutant_state_bf16.py good|state-bf16\n")
        return 2
    rt = kinds[argv[1]]()
    rt.name = "golden-f32 %s" % argv[1]
    return serve(rt)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
