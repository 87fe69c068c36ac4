#!/usr/bin/python3
"""Exec adapters whose MoE router choices are wrong: the float32 golden adapter (which
announces 'router') with ONE injected router bug, for tests/cli/test_router_runtime.sh.

    /usr/bin/python3 tests/adapters/router_mutants.py NAME

NAME      router() answers                                   what must catch it
good      the golden model's own choices                     (router_topk PASS)
wrongid   layer 1, position 2: the first expert replaced     router_topk FAIL: the flip named
          by one the router did not choose                   (layer, position, both id sets)
badid     layer 1, position 2: first id 1000000              router_topk FAIL: malformed row
dup       layer 1, position 2: second id = first id          router_topk FAIL: malformed row
nan       layer 1, position 2: first weight NaN              router_topk FAIL: malformed row
shape     ids of shape [L, n, k + 1]                         the helper refuses to send it: the
                                                             forward fails (FAIL 'run', the
                                                             shape named), no crash, no exit 2
The logits, hidden states and state are the golden adapter's (right).
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "adapters", "golden"))

from qc_golden_adapter import GoldenF32  # noqa: E402  (puts adapters/python on sys.path)
from qwen_conform_adapter import serve  # noqa: E402


class RouterMutant(GoldenF32):
    """GoldenF32 whose router() answer is changed at layer 1, absolute position 2."""

    mutant = "good"

    def forward(self, tokens, start_pos):
        self.start = start_pos
        return super().forward(tokens, start_pos)

    def router(self):
        ids, w = (np.array(a) for a in super().router())
        r = 2 - self.start
        if self.mutant == "shape":
            return np.concatenate([ids, ids[:, :, :1]], axis=2), np.concatenate(
                [w, w[:, :, :1]], axis=2)
        if 0 <= r < ids.shape[1] and ids.shape[0] > 1:
            row, wrow = ids[1, r], w[1, r]
            if self.mutant == "wrongid":
                row[0] = min(set(range(ids.max() + 2)) - set(row.tolist()))
            elif self.mutant == "badid":
                row[0] = 1000000
            elif self.mutant == "dup" and len(row) > 1:
                row[1] = row[0]
            elif self.mutant == "nan":
                wrow[0] = np.nan
        return ids, w


def main():
    names = ("good", "wrongid", "badid", "dup", "nan", "shape")
    if len(sys.argv) != 2 or sys.argv[1] not in names:
        sys.stderr.write("usage: router_mutants.py %s\n" % "|".join(names))
        return 2
    rt = RouterMutant()
    rt.mutant = sys.argv[1]
    return serve(rt)


if __name__ == "__main__":
    sys.exit(main())
