#!/usr/bin/python3
"""A top-k-only exec adapter (adapters/python/README.md "Top-k only"): the golden model in
float32 (adapters/golden), its logits -> log_softmax -> the top k, through forward_topk; it
defines no forward, so it announces "topk_only" and nothing else.

    --mutant shift    each position answers the previous position's row (off by one)
    --mutant wrongk   k - 1 entries per position (a malformed answer)
    --mutant badid    position 2's first id is V (out of range)
    --mutant nan      position 2's second log-probability is NaN
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "adapters", "golden"))
sys.path.insert(0, os.path.join(ROOT, "adapters", "python"))

import qc_golden_adapter as ga  # noqa: E402
from qwen_conform_adapter import Runtime, serve  # noqa: E402


class TopkOnly(Runtime):
    name = "topk-only (golden model, float32)"

    def __init__(self, mutant=None):
        self.inner = ga.GoldenF32()
        self.mutant = mutant
        self.prev = None
        if mutant:
            self.name += ", mutant " + mutant

    def open(self, model_dir, options):
        return self.inner.open(model_dir, options)

    def reset(self):
        self.prev = None
        self.inner.reset()

    def forward_topk(self, tokens, start_pos, k):
        z = np.asarray(self.inner.forward(tokens, start_pos), dtype=np.float64)
        lp = z - z.max(axis=1, keepdims=True)
        lp -= np.log(np.exp(lp).sum(axis=1, keepdims=True))
        ids = np.argsort(-lp, axis=1, kind="stable")[:, :k].astype(np.int32)
        lps = np.take_along_axis(lp, ids, axis=1).astype(np.float32)
        if self.mutant == "shift":
            rows = [(ids[r].copy(), lps[r].copy()) for r in range(len(ids))]
            for r in range(len(ids)):
                if self.prev is not None:
                    ids[r], lps[r] = self.prev
                self.prev = rows[r]
        if self.mutant == "wrongk":
            ids, lps = ids[:, :k - 1], lps[:, :k - 1]
        for r in range(len(ids)):
            if start_pos + r == 2 and self.mutant == "badid":
                ids[r, 0] = z.shape[1]
            if start_pos + r == 2 and self.mutant == "nan":
                lps[r, 1] = np.nan
        return ids, lps


if __name__ == "__main__":
    mut = sys.argv[sys.argv.index("--mutant") + 1] if "--mutant" in sys.argv else None
    raise SystemExit(serve(TopkOnly(mut)))
