#!/usr/bin/python3
"""lifecycle_repro.py -- the llama.cpp lifecycle findings (FINDINGS.md), reproduced through the
plugin alone (tests/plugin_driver, no harness): each scenario compares a managed run with a
fresh run of the same tokens and prints the max |diff| of the logits.

    lifecycle_repro.py --driver D --plugin P [--model DIR] [--options k=v,...] SCENARIO...

SCENARIO:
  trim       prefill P tokens, then k draft tokens in ONE call, trim the last j, feed the
             accepted k-j tokens' successors one per step: vs the same tokens never drafted;
             for k in (1, 3, 4), j in 1..k (rs_seq=4 is added to the options)
  trim-step  the same, but the k draft tokens fed one per call (the rollback then crosses
             llama_decode calls)
  nan-reset  prefill 10 tokens, fill_state(NaN), reset, prefill 5 tokens: vs a fresh 5-token
             prefill (a NaN in a freed cell must not reach a later sequence)
  fill-3e    the same with the 0x3e3e3e3e fill (llama.cpp's own test pattern, finite)
Exit 0 when every scenario ran (the numbers are the result), 2 when the driver failed.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def run(driver: str, plugin: str, lines: list[str], out: str) -> list[str]:
    p = subprocess.run([driver, plugin, out], input="\n".join(lines) + "\n", capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"driver exit {p.returncode}: {p.stderr[-500:]}")
    replies = p.stdout.splitlines()
    for ln, rep in zip(lines, replies):
        if rep.startswith("err"):
            raise RuntimeError(f"{ln.split()[0]}: {rep}")
    return replies


def fwd(start: int, toks: list[int], save: str = "-") -> str:
    return f"forward {start} 1 {save} {len(toks)} " + " ".join(map(str, toks))


def logits(out: str, name: str, V: int) -> np.ndarray:
    return np.fromfile(os.path.join(out, name), np.float32).reshape(-1, V)


def trim_case(a, out: str, V: int, k: int, j: int, one_call: bool) -> float:
    P, S = 5, 6
    pre = [(7 * i + 3) % V for i in range(P)]
    dec = [(11 * i + 5) % V for i in range(S)]
    acc = k - j
    draft = dec[:acc] + [(t + 1) % V for t in dec[acc:k]]
    opts = ",".join(x for x in (a.options, "rs_seq=4") if x)
    lines = [f"open {a.model} {opts}", fwd(0, pre)]
    # expected: the accepted tokens, then the rest one per call
    pos = P
    if acc:
        lines.append(fwd(pos, dec[:acc]))
        pos += acc
    for i in range(acc, S):
        lines.append(fwd(pos, [dec[i]], f"e{i}.bin"))
        pos += 1
    lines += ["reset", fwd(0, pre)]
    if one_call:
        lines.append(fwd(P, draft))
    else:
        lines += [fwd(P + i, [t]) for i, t in enumerate(draft)]
    lines.append(f"trim {P + acc}")
    pos = P + acc
    for i in range(acc, S):
        lines.append(fwd(pos, [dec[i]], f"a{i}.bin"))
        pos += 1
    try:
        run(a.driver, a.plugin, lines, out)
    except RuntimeError as e:
        print(f"    k={k} j={j}: {e}")
        return float("nan")
    d = max(float(np.max(np.abs(logits(out, f"a{i}.bin", V) - logits(out, f"e{i}.bin", V))))
            for i in range(acc, S))
    return d


def fill_case(a, out: str, V: int, value: str) -> tuple[int, float]:
    t10 = [(5 * i + 1) % V for i in range(10)]
    lines = [f"open {a.model} {a.options or '-'}", fwd(0, t10), f"fill {value}", "reset",
             fwd(0, t10[:5], "g.bin"), "close", f"open {a.model} {a.options or '-'}",
             fwd(0, t10[:5], "f.bin")]
    run(a.driver, a.plugin, lines, out)
    g, f = logits(out, "g.bin", V), logits(out, "f.bin", V)
    return int(np.isnan(g).sum()), float(np.nanmax(np.abs(g - f))) if not np.isnan(g).all() else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--model", default=os.path.join(ROOT, "fixtures", "tiny-f32-tied-flat", "model"))
    ap.add_argument("--options", default="")
    ap.add_argument("scenarios", nargs="+", choices=["trim", "trim-step", "nan-reset", "fill-3e"])
    a = ap.parse_args()
    out = tempfile.mkdtemp(prefix="qc_lc_repro.")
    try:
        info = run(a.driver, a.plugin, [f"open {a.model} {a.options or '-'}"], out)[0].split()
        V = int(info[2])
    except (RuntimeError, IndexError, ValueError) as e:
        print(f"lifecycle_repro: open failed: {e}", file=sys.stderr)
        return 2
    for sc in a.scenarios:
        if sc in ("trim", "trim-step"):
            print(f"{sc}: max |logits diff| of the continuation after trim (k drafted, j rejected), "
                  f"options {a.options or '-'} + rs_seq=4")
            for k in (1, 3, 4):
                row = [f"j={j}: {trim_case(a, out, V, k, j, sc == 'trim'):.3g}" for j in range(1, k + 1)]
                print(f"  k={k}  " + "  ".join(row))
        else:
            n, d = fill_case(a, out, V, "nan" if sc == "nan-reset" else "0x3e3e3e3e")
            print(f"{sc}: options {a.options or '-'}: NaN logits after fill + reset: {n} / {5 * V}; "
                  f"max |diff| vs a fresh process: {d:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
