"""`simulate` and `measure-tiers`: the reduced-precision simulations (docs/tolerance-tiers.md).

  python3 golden/qcgolden simulate --sim int8 [--bug norm-offset] [--cases REGEX] GOLDEN.h5
          --out ACTUAL.h5
  python3 golden/qcgolden measure-tiers [--golden fixtures] [--sims f16-kv,int8]
          [--out fixtures/tolerance-tiers-measurements.json]
Exit 0 on success, 2 on bad input (a message naming the file).
"""
import argparse
import os
import sys

PROG = "python3 golden/qcgolden"


def _parser():
    from .precision import BUGS, SIMS
    ap = argparse.ArgumentParser(prog=PROG, allow_abbrev=False)
    sub = ap.add_subparsers(dest="cmd")
    sub.required = True
    s = sub.add_parser("simulate", allow_abbrev=False, prog=PROG + " simulate",
                       help="an ACTUAL file of a simulated reduced-precision runtime")
    s.add_argument("golden", metavar="GOLDEN.h5")
    s.add_argument("--sim", required=True, choices=sorted(SIMS))
    s.add_argument("--bug", choices=sorted(BUGS), help="inject this porting bug")
    s.add_argument("--cases", metavar="REGEX", help="only the cases matching (anchored)")
    s.add_argument("--hidden", action="store_true", help="also write prefill/hidden")
    s.add_argument("--out", required=True, metavar="ACTUAL.h5")
    m = sub.add_parser("measure-tiers", allow_abbrev=False, prog=PROG + " measure-tiers",
                       help="measure the simulations on the fixtures, derive the tier limits")
    m.add_argument("--golden", default="fixtures", metavar="DIR|FILE")
    m.add_argument("--sims", default=",".join(SIMS), metavar="A,B")
    m.add_argument("--cases", metavar="REGEX")
    m.add_argument("--out", metavar="F.json", help="write the measurements here")
    m.add_argument("--from", dest="from_json", metavar="F.json",
                   help="do not measure: read an earlier --out (for --c-table)")
    m.add_argument("--c-table", metavar="qc_tier.c", help="rewrite the tier table of this "
                   "file (between its BEGIN / END TIER TABLE markers) from the limits")
    m.add_argument("--doc", metavar="tolerance-tiers.md", help="rewrite the numbers table of "
                   "this file (between its BEGIN / END TIER NUMBERS markers)")
    return ap


from .outfile import InputError  # noqa: E402


def main(argv):
    a = _parser().parse_args(argv)
    from .precision import SIMS
    try:
        if a.cmd == "simulate":
            if not os.path.isfile(a.golden):
                raise ValueError("%s: no such golden file" % a.golden)
            n = simulate_cmd(a)
            print("%s: %d cases of simulation %s%s" % (a.out, n, a.sim,
                                                        " + bug " + a.bug if a.bug else ""))
            return 0
        sims = [s for s in a.sims.split(",") if s]
        bad = [s for s in sims if s not in SIMS]
        if bad:
            raise ValueError("--sims: unknown simulation %s (one of %s)" % (bad[0], ", ".join(SIMS)))
        from . import precision_run as pr
        if a.from_json:
            import json
            with open(a.from_json) as f:
                res = json.load(f)
        else:
            res = pr.measure(a.golden, sims, a.cases, log=lambda t: print(t, file=sys.stderr))
            # the tables from the numbers as written (4 significant digits), so that --from
            # the written file regenerates them exactly
            res = pr._round4(res)
        for s, v in res["sims"].items():
            print("%-8s limits %s" % (s, {k: v["limits"][k] for k in (
                "kl_mean", "kl_p99", "kl_max", "tie_delta", "topk_min")}))
        if a.out and not a.from_json:
            pr.write_json(a.out, res)
        if a.c_table:
            write_between(a.c_table, "/* BEGIN TIER TABLE */\n", "/* END TIER TABLE */",
                          pr.c_table(res))
        if a.doc:
            write_between(a.doc, "<!-- BEGIN TIER NUMBERS -->\n", "<!-- END TIER NUMBERS -->",
                          pr.md_table(res))
        return 0
    except (ValueError, OSError, KeyError, InputError) as e:
        print("%s %s: %s" % (PROG, a.cmd, e), file=sys.stderr)
        return 2


def simulate_cmd(a):
    from . import precision_run as pr
    from .outfile import check_output_file, model_inputs
    inputs = [(a.golden, "the golden")] + model_inputs(
        os.path.join(os.path.dirname(os.path.abspath(a.golden)), "model"))
    out = check_output_file(a.out, inputs)
    return pr.simulate(a.golden, a.sim, out, a.bug, a.cases, a.hidden)


def write_between(path, b, e, table):
    """Replace the text between the markers b and e of `path` (temp file + rename)."""
    with open(path) as f:
        text = f.read()
    i, j = text.find(b), text.find(e)
    if i < 0 or j < i:
        raise ValueError("%s: no %s / %s markers" % (path, b.strip(), e))
    new = text[:i + len(b)] + table + text[j:]
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "w") as f:
        f.write(new)
    os.replace(tmp, path)
