"""compare_reports.py A.json B.json — two qwen-conform JSON reports of the same goldens, run on
two backends that must be equivalent (e.g. `reference` and `plugin:libqc_plugin_reference.so`):
the same checks with the same verdicts and the same numbers. Rows are matched by
(stem, case, mode, check); the backend name, timings and the texts that name the backend are
ignored. Rows present in only one report are listed; the per-file `capabilities` row (which only
a runtime under test gets) is the one allowed extra. Exit 0 when equivalent, 1 otherwise."""
import json
import sys

IGNORED = {"seconds", "backend", "golden"}
ALLOWED_EXTRA = {"capabilities"}
# The state lifecycle checks are bitwise for a built-in backend and within tolerance for a
# runtime under test (a plugin, even of a built-in backend): their tolerance, keyline and detail
# differ by design; the verdict and every metric must still be the same.
LIFECYCLE = {"snapshot_restore", "snapshot_copy", "restore_after_garbage",
             "snapshot_chunk_boundary", "rollback", "rollback_trim", "prefix_reuse",
             "multi_sequence", "batch_invariance"}


def rows(path):
    r = json.load(open(path))
    out = {}
    for c in r["checks"]:
        k = (c["stem"], c["case"], c["mode"], c["check"])
        if k in out:
            raise SystemExit("%s: duplicate row %s" % (path, k))
        out[k] = c
    return out


def normal(c, names):
    d = {k: v for k, v in c.items() if k not in IGNORED}
    if c.get("check") in LIFECYCLE and c.get("verdict") != "SKIP":
        d = {k: v for k, v in d.items() if k not in ("tolerance", "message", "detail")}
    for key in ("message", "detail"):
        if key in d:
            for n in names:
                d[key] = d[key].replace(n, "<backend>")
    return json.dumps(d, sort_keys=True)


def main():
    a, b = rows(sys.argv[1]), rows(sys.argv[2])
    na = {c["backend"] for c in a.values()} - {"-"}
    nb = {c["backend"] for c in b.values()} - {"-"}
    names = sorted(na | nb, key=len, reverse=True)
    bad = 0
    for k in sorted(set(a) ^ set(b)):
        if k[3] in ALLOWED_EXTRA:
            continue
        print("only in %s: %s" % (sys.argv[1] if k in a else sys.argv[2], "/".join(k)))
        bad += 1
    same = 0
    for k in sorted(set(a) & set(b)):
        if normal(a[k], names) != normal(b[k], names):
            print("differs: %s\n  %s\n  %s" % ("/".join(k), normal(a[k], names)[:400],
                                                normal(b[k], names)[:400]))
            bad += 1
        else:
            same += 1
    print("%d rows identical, %d differences" % (same, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
