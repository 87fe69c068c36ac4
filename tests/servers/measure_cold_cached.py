#!/usr/bin/python3
"""How far a correct fake server's answers move with the prefix cache and with chunking.

    /usr/bin/python3 tests/servers/measure_cold_cached.py [--fixture DIR] [--block-size 16]

In-process (qc_fake_server.Engine, no HTTP), on the golden's len130 prompt: for |P| at the
block size and its multiples +-1..10 and |Q| = 1, 2, 3, the log-probabilities (whole
vocabulary) of the rows a cached P+Q computes (positions >= the hit) and of 4 greedy decode
steps, cached (P sent first) vs cold (P+Q alone). Then the same prompts cold, prefilled in
chunks of 64 vs in one call. Prints the maxima; tests/servers/README.md quotes them.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import h5py  # noqa: E402
import torch  # noqa: E402

import qc_fake_server as fs  # noqa: E402


def rows(res, start):
    """Prompt rows from position `start` on, then the decode rows: one [n, V] tensor."""
    pl = res["prompt_lp"][start - res["cached"]:]
    return torch.cat([pl, res["seqs"][0]["lp"][1:]])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixture", default=os.path.join(HERE, "..", "..", "fixtures",
                                                      "tiny-f32-tied-flat"))
    ap.add_argument("--block-size", type=int, default=16)
    args = ap.parse_args()
    with h5py.File(os.path.join(args.fixture, "golden.h5"), "r") as f:
        tokens = [int(t) for t in f["cases/len130/tokens"][()]]
    model = os.path.join(args.fixture, "model")
    B = args.block_size
    eng = fs.Engine(model, B, 64, 1, 100000, "none", 0.0)
    one_shot = fs.Engine(model, B, 10 ** 6, 1, 100000, "none", 0.0)
    kw = dict(max_new=5, temperature=0.0, ignore_eos=True)

    worst, where, n = 0.0, (0, 0, 0), 0
    for boundary in (B, 2 * B, 4 * B):
        for d in range(-10, 11):
            plen = boundary + d
            if plen < 1 or plen + 3 > len(tokens):
                continue
            for q in (1, 2, 3):
                pq = tokens[:plen + q]
                salt = "m%d-%d" % (plen, q)
                eng.run(pq[:plen], salt=salt + "w", **kw)
                warm = eng.run(pq, salt=salt + "w", **kw)
                cold = eng.run(pq, salt=salt + "c", read_cache=False, **kw)
                h = warm["cached"]
                if h == 0:
                    continue
                diff = float((rows(warm, h) - rows(cold, h)).abs().max())
                n += 1
                if diff > worst or n == 1:
                    worst, where = diff, (plen, q, h)
    print("block %d: cached vs cold over %d (|P|, |Q|) pairs with a hit: max |d logprob| = "
          "%.3g (at |P| = %d, |Q| = %d, hit %d)" % (B, n, worst, *where))

    worst, where = -1.0, None
    for t in (65, 66, 80, 100, 128, 130):
        a = eng.run(tokens[:t], read_cache=False, **kw)
        b = one_shot.run(tokens[:t], read_cache=False, **kw)
        diff = float((rows(a, 0) - rows(b, 0)).abs().max())
        if diff > worst:
            worst, where = diff, t
    print("chunks of 64 vs one call (cold, prompts of 65..130): max |d logprob| = %.3g "
          "(at %d tokens)" % (worst, where))


if __name__ == "__main__":
    main()
