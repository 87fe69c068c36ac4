#!/usr/bin/python3
"""lifecycle_cases.py -- the cases of a golden on which qwen-conform runs its lifecycle checks,
as a --filter regex, so that ci/llamacpp's lifecycle variants run only those cases.

    lifecycle_cases.py GOLDEN.h5      prints  /(case1|case2|...)/   (nothing when none)

The rule mirrors harness/check/qc_check_lifecycle.c (ck_check_lifecycle): no history, and
  short     4 <= prompt tokens <= 8 and >= 4 decode steps
  boundary  60 <= prompt tokens <= 63 and >= 4 decode steps
  chunked   a case attribute max_seq_len > 0 smaller than the prompt
Should the harness change its rule, a variant still runs (every check of the cases listed
here); the gate then notices lifecycle checks that went missing (expectations "checks").
"""
import sys

import h5py


def cases(path: str) -> list[str]:
    out = []
    with h5py.File(path, "r") as f:
        for name, g in f["cases"].items():
            if "history_tokens" in g and g["history_tokens"].shape[0] > 0:
                continue
            T = g["tokens"].shape[0]
            S = g["decode"]["tokens"].shape[0] if "decode" in g and "tokens" in g["decode"] else 0
            msl = int(g.attrs.get("max_seq_len", 0))
            if (4 <= T <= 8 and S >= 4) or (60 <= T <= 63 and S >= 4) or (0 < msl < T):
                out.append(name)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    c = cases(sys.argv[1])
    if c:
        print("/(" + "|".join(c) + ")/")
