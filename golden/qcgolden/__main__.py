"""Command line of the golden generator (run from golden/, or with PYTHONPATH=golden):

  /usr/bin/python3 -m qcgolden generate --model DIR --out FILE.h5 [--seed N]
        the standard cases (len001 .. len130, cont, longseq) with prompt-seed search, for any
        HF-format Qwen3.5 checkpoint (tiny or real size; float64 needs 8 bytes per parameter)
  /usr/bin/python3 -m qcgolden generate --model DIR --out FILE.h5 --tokens 1,2,3
        [--history 4,5,6] [--decode 8] [--name custom]
        one case with the given prompt (history replayed first as one prefill; start_pos =
        len(history)); margins are recorded but not enforced (a warning below 0.05)
  /usr/bin/python3 -m qcgolden write-model --fixture NAME --out DIR
        write one fixture checkpoint (see qcgolden/fixtures.py) somewhere else
"""
import argparse
import sys

import numpy as np

from . import setup_torch


def _ids(text):
    return [int(t) for t in text.split(",") if t.strip()] if text else []


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m qcgolden")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--model", required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--tokens")
    g.add_argument("--history")
    g.add_argument("--decode", type=int, default=8)
    g.add_argument("--name", default="custom")
    w = sub.add_parser("write-model")
    w.add_argument("--fixture", required=True)
    w.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    setup_torch()
    from . import fixtures, goldens, init
    from .model import Model

    if a.cmd == "write-model":
        print("\n".join(init.write_checkpoint(fixtures.by_name(a.fixture), a.out)))
        return 0
    model = Model.from_dir(a.model)
    if not a.tokens:
        goldens.generate(a.model, a.out, a.seed, model=model)
        print("wrote %s" % a.out)
        return 0
    hist, toks = _ids(a.history), _ids(a.tokens)
    spec = goldens.CaseSpec(a.name, len(toks), n_decode=a.decode,
                            description="prompt given on the command line")
    state = model.new_state()
    if hist:
        model.forward(hist, state)
    r = goldens.prefill_and_decode(model, state, toks, a.decode)
    r.update(tokens=np.array(toks), start_pos=len(hist), history_tokens=np.array(hist, dtype=np.int64),
             history_margins=np.zeros(0), prompt_seed=None)
    if r["margins"].size and r["margins"].min() < goldens.MIN_MARGIN:
        sys.stderr.write("warning: a greedy choice has margin %.3g < %g (near-tie)\n"
                         % (r["margins"].min(), goldens.MIN_MARGIN))
    goldens.write_golden(a.out, a.model, [(spec, r)], a.seed)
    print("wrote %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
