#!/usr/bin/python3
"""The smallest exec adapter a runtime author writes (adapters/python/README.md): open, reset,
forward — on the golden model in float32. It announces no optional capability, so most of the
battery is SKIPPED: the verdict must say PARTIAL with the coverage, never a bare "0 failed".

    --mlp-scale-layer L   (a porting bug) layer L's MLP output is scaled by 1.01
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "adapters", "golden"))
sys.path.insert(0, os.path.join(ROOT, "adapters", "python"))

import qc_golden_adapter as ga  # noqa: E402
from qwen_conform_adapter import Runtime, serve  # noqa: E402


class Minimal(Runtime):
    name = "minimal (golden model, float32)"

    def __init__(self):
        self.inner = ga.GoldenF32()

    def open(self, model_dir, options):
        return self.inner.open(model_dir, options)

    def reset(self):
        self.inner.reset()

    def forward(self, tokens, start_pos):
        return self.inner.forward(tokens, start_pos)


if __name__ == "__main__":
    raise SystemExit(serve(Minimal()))
