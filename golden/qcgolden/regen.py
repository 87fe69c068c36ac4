"""golden/regen: regenerate every fixture into a temporary directory, compare it with the
committed fixtures/ and, only with --write, replace them.

    golden/regen [--write] [--verbose] [--fixtures DIR]

Prints, per fixture: each model file (bit-identical / differs / new / removed) and each golden
dataset or attribute that changed (max abs diff for floats, number of changed entries for ids);
--verbose also lists the unchanged datasets. Exit status: 0 identical (or written), 1 something
differs and --write was not given, 2 usage error. Nothing else writes fixtures/ (tolerances.json
there belongs to the harness and is never touched).
"""
import os
import shutil
import sys
import tempfile

import h5py
import numpy as np

from . import fixtures, setup_torch

GOLDEN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(GOLDEN_DIR)


def build_all(root):
    """Every fixture + README.md under root."""
    for spec in fixtures.FIXTURES:
        fixtures.build_one(spec, root)
    fixtures.build_special(root)
    with open(os.path.join(root, "README.md"), "w") as f:
        f.write(fixtures.readme_text())


# ------------------------------------------------------------------------------------------------
# Comparison
# ------------------------------------------------------------------------------------------------

def _h5_items(path):
    """{'/path': array} for datasets and {'/path (attr a)': value} for attributes."""
    out = {}
    with h5py.File(path, "r") as f:
        for k, v in f.attrs.items():
            out["/ (attr %s)" % k] = v

        def visit(name, obj):
            for k, v in obj.attrs.items():
                out["/%s (attr %s)" % (name, k)] = v
            if isinstance(obj, h5py.Dataset):
                out["/" + name] = obj[()]
        f.visititems(visit)
    return out


def diff_golden(old_path, new_path):
    """[(key, status string, changed?)] for every dataset / attribute of either file."""
    old, new = _h5_items(old_path), _h5_items(new_path)
    rows = []
    for k in sorted(set(old) | set(new)):
        if k not in old:
            rows.append((k, "new", True))
        elif k not in new:
            rows.append((k, "removed", True))
        else:
            a, b = old[k], new[k]
            if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape != () :
                if a.shape != b.shape or a.dtype != b.dtype:
                    rows.append((k, "shape/dtype %s %s -> %s %s" % (a.shape, a.dtype, b.shape, b.dtype), True))
                elif a.dtype.kind == "f":
                    d = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
                    rows.append((k, "max abs diff %.3e" % d, d != 0.0))
                else:
                    n = int(np.sum(a != b))
                    rows.append((k, "%d of %d entries changed" % (n, a.size), n != 0))
            else:
                same = bool(np.all(a == b)) if not isinstance(a, str) else a == b
                rows.append((k, "identical" if same else "changed: %r -> %r" % (_short(a), _short(b)), not same))
    return rows


def _short(v):
    s = str(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _files(d):
    out = []
    for root, _, files in os.walk(d):
        out += [os.path.relpath(os.path.join(root, n), d) for n in files]
    return sorted(out)


def compare(committed, fresh, verbose=False, out=sys.stdout):
    """Print the comparison; returns True when everything is identical."""
    same = True
    for name in fixtures.all_names():
        a, b = os.path.join(committed, name), os.path.join(fresh, name)
        print("== %s" % name, file=out)
        if not os.path.isdir(a):
            print("   new fixture (not committed yet)", file=out)
            same = False
            continue
        for rel in sorted(set(_files(a)) | set(_files(b))):
            pa, pb = os.path.join(a, rel), os.path.join(b, rel)
            if rel.endswith(".h5"):
                continue
            if not os.path.exists(pa):
                print("   %-48s new" % rel, file=out)
                same = False
            elif not os.path.exists(pb):
                print("   %-48s removed" % rel, file=out)
                same = False
            else:
                with open(pa, "rb") as fa, open(pb, "rb") as fb:
                    eq = fa.read() == fb.read()
                print("   %-48s %s" % (rel, "bit-identical" if eq else "DIFFERS"), file=out)
                same &= eq
        ga, gb = os.path.join(a, "golden.h5"), os.path.join(b, "golden.h5")
        if not os.path.exists(ga):
            print("   golden.h5 new", file=out)
            same = False
            continue
        with open(ga, "rb") as fa, open(gb, "rb") as fb:
            eq = fa.read() == fb.read()
        print("   %-48s %s" % ("golden.h5", "bit-identical" if eq else "bytes differ (datasets below)"),
              file=out)
        rows = diff_golden(ga, gb)
        changed = [r for r in rows if r[2]]
        for k, status, ch in rows:
            if ch or verbose:
                print("   golden.h5 %-60s %s" % (k, status), file=out)
        print("   golden.h5: %d of %d datasets/attributes changed" % (len(changed), len(rows)), file=out)
        same &= not changed
    ra, rb = os.path.join(committed, "README.md"), os.path.join(fresh, "README.md")
    eq = os.path.exists(ra) and open(ra).read() == open(rb).read()
    print("== README.md %s" % ("identical" if eq else "DIFFERS"), file=out)
    same &= eq
    names = set(fixtures.all_names())
    if os.path.isdir(committed):
        for n in sorted(os.listdir(committed)):
            if os.path.isdir(os.path.join(committed, n)) and n not in names:
                print("== %s: not generated by golden/regen (left alone)" % n, file=out)
    return same


def replace(committed, fresh):
    """Move the fresh fixtures into place (only the generated names + README.md)."""
    os.makedirs(committed, exist_ok=True)
    trash = tempfile.mkdtemp(prefix="old-", dir=os.path.dirname(fresh))
    for name in fixtures.all_names():
        dst = os.path.join(committed, name)
        if os.path.exists(dst):
            os.replace(dst, os.path.join(trash, name))
        os.replace(os.path.join(fresh, name), dst)
    os.replace(os.path.join(fresh, "README.md"), os.path.join(committed, "README.md"))
    shutil.rmtree(trash)


def main(argv):
    write = "--write" in argv
    verbose = "--verbose" in argv
    committed = os.path.join(REPO, "fixtures")
    rest = [a for a in argv if a not in ("--write", "--verbose")]
    if rest[:1] == ["--fixtures"] and len(rest) == 2:
        committed = os.path.abspath(rest[1])
    elif rest:
        sys.stderr.write("usage: golden/regen [--write] [--verbose] [--fixtures DIR]\n")
        return 2
    setup_torch()
    tmp_root = os.path.join(GOLDEN_DIR, ".regen-tmp")
    os.makedirs(tmp_root, exist_ok=True)
    work = tempfile.mkdtemp(prefix="regen-", dir=tmp_root)
    try:
        fresh = os.path.join(work, "fixtures")
        build_all(fresh)
        same = compare(committed, fresh, verbose)
        if write:
            replace(committed, fresh)
            print("regen: wrote %s" % committed)
            return 0
        print("regen: %s" % ("committed fixtures are up to date" if same else
                             "committed fixtures differ (run golden/regen --write to replace them)"))
        return 0 if same else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
        try:
            os.rmdir(tmp_root)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
