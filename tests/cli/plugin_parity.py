"""plugin_parity.py QC PLUGIN.so FIXTURES_DIR TMP — the built-in reference as a runtime plugin
against `--backend reference` on every fixture directory (each holding a golden.h5; enumerated,
so a new fixture is covered): the same rows (stem, case, mode, check), the same verdicts and the
same numbers, timings and backend names aside (tests/cli/compare_reports.py's normalisation).

The reference runs once per fixture. The plugin runs once per fixture too (its verdicts must
equal the reference's, row for row) and once per case (`--filter '^stem/case/'`, a fresh
process): those rows must equal the reference's number for number. Why per case: `check` hands
dn_kernel / chunk_size to a runtime under test only inside chunked_eq_recurrent / chunk_sweep and
never sends them back (harness/check/qc_check_dn.c), so within one process a case that follows a
chunk_sweep runs at the chunk size the sweep left in force (its verdicts are the same, its
numbers not bit-identical to the built-in backend, which always runs its default 64); a case
started in a fresh process runs on the plugin's own defaults, the built-in backend's. Inside a
case the state lifecycle checks (compare_reports.LIFECYCLE) run after chunk_sweep, so in a case
that has chunk_sweep rows their numbers are compared for the verdict only (counted and printed
as "after chunk_sweep"); every other row number for number.
File-level rows (case "_model", and the runtime's `capabilities`) appear in every per-case run:
they must agree with each other and are kept once. Exit 0 when every fixture agrees."""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_reports  # noqa: E402  (its row normalisation)


def run(qc, golden_dir, backend, out, flt=None):
    cmd = [qc, "check", "--golden", golden_dir, "--backend", backend, "--quiet", "--json", out]
    if flt:
        cmd += ["--filter", flt]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode >= 2 or not os.path.exists(out):
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stdout[-400:]))
    return p.returncode


def rows(path):
    return {(c["stem"], c["case"], c["mode"], c["check"]): c for c in json.load(open(path))["checks"]}


def one_fixture(qc, so, d, fx, tmp):
    """[problems] of fixture directory d."""
    bad = []
    rc_ref = run(qc, d, "reference", os.path.join(tmp, "ref-%s.json" % fx))
    rc_plug = run(qc, d, "plugin:" + so, os.path.join(tmp, "plug-%s.json" % fx))
    a = rows(os.path.join(tmp, "ref-%s.json" % fx))
    b = rows(os.path.join(tmp, "plug-%s.json" % fx))
    if rc_ref != rc_plug:
        bad.append("exit %d (reference) vs %d (plugin)" % (rc_ref, rc_plug))
    extra = {k for k in set(a) ^ set(b) if k[3] not in compare_reports.ALLOWED_EXTRA}
    bad += ["row only in %s: %s" % ("reference" if k in a else "plugin", "/".join(k))
            for k in sorted(extra)[:5]]
    vdiff = [k for k in set(a) & set(b) if a[k]["verdict"] != b[k]["verdict"]]
    bad += ["verdict %s (reference) vs %s (plugin): %s" % (a[k]["verdict"], b[k]["verdict"],
                                                          "/".join(k)) for k in sorted(vdiff)[:5]]
    # numbers: one fresh plugin process per case
    cases = sorted({k[1] for k in a if k[1] not in ("_model", "-")})
    merged = {k: r for k, r in b.items() if k[1] not in cases}   # the file-level rows
    for i, case in enumerate(cases):
        out = os.path.join(tmp, "case-%s-%d.json" % (fx, i))
        run(qc, d, "plugin:" + so, out, "^%s/%s/" % (re.escape(fx), re.escape(case)))
        for k, r in rows(out).items():
            if k[1] == case:
                merged[k] = r
            elif k[1] in cases:
                bad.append("the run of case %s reported case %s" % (case, k[1]))
    swept = {k[1] for k in merged if k[3].startswith("chunk_sweep")}
    after_sweep = 0
    names = sorted({r["backend"] for r in list(a.values()) + list(merged.values())} - {"-"},
                   key=len, reverse=True)
    for k in sorted(set(a) | set(merged)):
        if k[3] in compare_reports.ALLOWED_EXTRA:
            continue
        if k not in a or k not in merged:
            bad.append("row only in %s (per case): %s" % ("reference" if k in a else "plugin",
                                                          "/".join(k)))
        elif k[1] in swept and k[3] in compare_reports.LIFECYCLE:
            after_sweep += 1
            if a[k]["verdict"] != merged[k]["verdict"]:
                bad.append("verdict %s (reference) vs %s (plugin, per case): %s"
                           % (a[k]["verdict"], merged[k]["verdict"], "/".join(k)))
        elif compare_reports.normal(a[k], names) != compare_reports.normal(merged[k], names):
            bad.append("differs: %s\n    %s\n    %s" % ("/".join(k),
                       compare_reports.normal(a[k], names)[:300],
                       compare_reports.normal(merged[k], names)[:300]))
    router = [r for k, r in merged.items() if k[3] == "router_topk"]
    skipped = [r for r in router if r["verdict"] == "SKIP" and "dense model" not in r["message"]]
    if skipped:
        bad.append("router_topk SKIPPED on the plugin: %s" % skipped[0]["message"])
    print("%s %s: %d rows, %d cases, %d differing verdicts (whole-file runs), %d router_topk "
          "compared, %d lifecycle rows after chunk_sweep (verdict only)"
          % ("FAIL" if bad else "ok  ", fx, len(a), len(cases), len(vdiff),
             sum(r["verdict"] != "SKIP" for r in router), after_sweep))
    return bad


def main():
    qc, so, fixtures, tmp = sys.argv[1:5]
    dirs = sorted(e for e in os.listdir(fixtures)
                  if os.path.isfile(os.path.join(fixtures, e, "golden.h5")))
    if not dirs:
        print("no fixture directory with a golden.h5 under %s" % fixtures)
        return 1
    failed = 0
    for fx in dirs:
        try:
            bad = one_fixture(qc, so, os.path.join(fixtures, fx), fx, tmp)
        except RuntimeError as e:
            bad = [str(e)]
            print("FAIL %s" % fx)
        for b in bad[:8]:
            print("    " + b)
        failed += bool(bad)
    print("plugin_parity: %d fixture(s), %d differ" % (len(dirs), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
