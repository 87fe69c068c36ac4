"""`simulate` and `measure-tiers`: the reduced-precision simulations (docs/tolerance-tiers.md).

  python3 golden/qcgolden simulate --sim int8 [--bug norm-offset] [--cases REGEX] GOLDEN.h5
          --out ACTUAL.h5
  python3 golden/qcgolden measure-tiers [--golden fixtures] [--sims f16-kv,int8]
          [--out fixtures/tolerance-tiers-measurements.json]
  python3 golden/qcgolden measure-topk [--golden fixtures] [--sims fp32,int8] [--cases REGEX]
          [--out fixtures/tolerance-tiers-measurements.json | --from F.json]
          [--c-table qc_tier_topk.c] [--doc docs/tolerance-tiers.md]
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
    t = sub.add_parser("measure-topk", allow_abbrev=False, prog=PROG + " measure-topk",
                       help="measure the top-k log-probability metrics (servers) on the "
                       "simulations and fp32, derive their limits (qcgolden/topk.py)")
    t.add_argument("--golden", default="fixtures", metavar="DIR|FILE")
    t.add_argument("--sims", default=",".join(("fp32",) + tuple(SIMS)), metavar="A,B",
                   help="fp32 and / or simulations (default: all)")
    t.add_argument("--cases", metavar="REGEX")
    t.add_argument("--out", metavar="F.json", help="add a \"topk\" object per simulation to "
                   "this measurement file (every other key kept)")
    t.add_argument("--from", dest="from_json", metavar="F.json",
                   help="do not measure: read the topk objects of an earlier --out")
    t.add_argument("--c-table", metavar="qc_tier_topk.c", help="write this generated C file "
                   "and qc_tier_topk.h next to it")
    t.add_argument("--doc", metavar="tolerance-tiers.md", help="rewrite the table of this "
                   "file between its BEGIN / END TOPK NUMBERS markers")
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
        if a.cmd == "measure-topk":
            return measure_topk_cmd(a)
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
            if "limits" not in v:       # "fp32": only the topk object of measure-topk
                continue
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


def measure_topk_cmd(a):
    """measure-topk: measure (or --from), add to --out, write --c-table / --doc."""
    import json
    import time
    from . import topk as tk
    if a.from_json:
        with open(a.from_json) as f:
            res = tk.topk_of(json.load(f))
        if not res:
            raise ValueError("%s: no topk object (run measure-topk --out first)" % a.from_json)
    else:
        rts = [s for s in a.sims.split(",") if s]
        bad = [s for s in rts if s not in tk.RUNTIMES]
        if bad:
            raise ValueError("--sims: unknown runtime %s (one of %s)" % (
                bad[0], ", ".join(tk.RUNTIMES)))
        if not a.out and not a.c_table and not a.doc:
            print("(no --out, --c-table or --doc: measuring only)", file=sys.stderr)
        t0 = time.time()
        res = tk.measure(a.golden, rts, a.cases, log=lambda t: print(t, file=sys.stderr))
        res = {rt: tk.pr._round4(v) for rt, v in res.items()}
        print("measured in %.1f s" % (time.time() - t0), file=sys.stderr)
    for rt, v in res.items():
        print("%-8s %s" % (rt, "; ".join("k=%s: lp <= %s, tie delta %s, overlap >= %s" % (
            k[1:], lim["lp_max_abs"], lim["tie_delta"], lim["overlap_min"])
            for k, lim in sorted(v["limits"].items(), key=lambda x: int(x[0][1:])))))
    if a.out and not a.from_json:
        tk.add_to_file(a.out, res)
    if a.c_table:
        tk.write_c(a.c_table, res)
    if a.doc:
        write_between(a.doc, "<!-- BEGIN TOPK NUMBERS -->\n", "<!-- END TOPK NUMBERS -->",
                      tk.md_table(res))
    return 0


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
