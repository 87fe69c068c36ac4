"""plugin_parity.py QC PLUGIN.so FIXTURES_DIR TMP — the built-in reference as a runtime plugin
against `--backend reference` on every fixture directory (each holding a golden.h5; enumerated,
so a new fixture is covered): the same rows (stem, case, mode, check), the same verdicts and the
same numbers, timings and backend names aside (tests/cli/compare_reports.py's normalisation),
one whole-file run each. `check` hands dn_kernel / chunk_size to a runtime under test only in
chunked_eq_recurrent / chunk_sweep and keeps a key it sent at the host's value afterwards
(chunk_size back to 64 after a sweep; harness/host/qc_remote.c), so every row after them is
computed as the built-in backend computes it. Exit 0 when every fixture agrees."""
import json
import os
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
    names = sorted({r["backend"] for r in list(a.values()) + list(b.values())} - {"-"},
                   key=len, reverse=True)
    ndiff = 0
    for k in sorted(set(a) & set(b)):
        if k[3] in compare_reports.ALLOWED_EXTRA:
            continue
        if compare_reports.normal(a[k], names) != compare_reports.normal(b[k], names):
            ndiff += 1
            if ndiff <= 5:
                bad.append("differs: %s\n    %s\n    %s" % ("/".join(k),
                           compare_reports.normal(a[k], names)[:300],
                           compare_reports.normal(b[k], names)[:300]))
    router = [r for k, r in b.items() if k[3] == "router_topk"]
    skipped = [r for r in router if r["verdict"] == "SKIP" and "dense model" not in r["message"]]
    if skipped:
        bad.append("router_topk SKIPPED on the plugin: %s" % skipped[0]["message"])
    print("%s %s: %d rows, %d differing verdicts, %d differing numbers, %d router_topk compared"
          % ("FAIL" if bad else "ok  ", fx, len(a), len(vdiff), ndiff,
             sum(r["verdict"] != "SKIP" for r in router)))
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
