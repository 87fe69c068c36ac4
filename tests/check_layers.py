#!/usr/bin/python3
"""The layer rule (issue #14): which folder may include a header of which.

    include/qc/   the public API: anyone may include it
    runtime/      the shared core: includes only include/qc/ and runtime/
    reference/    a backend: include/qc/ and reference/
    optimized/    a backend: include/qc/ and optimized/
    harness/      the CLI: include/qc/ and harness/ (never a backend's private header)
    adapters/X/   a shipped adapter: include/qc/, its own folder and harness/ (adapter-serve)

An `#include "..."` is resolved as the compiler would (next to the including file, then
include/); a system include (<...>) is not checked. Prints each forbidden arrow as
`FILE:LINE: LAYER includes TARGET (LAYER)` and exits 1 when there is one, 0 otherwise, 2 on
bad usage. Usage: check_layers.py [SOURCE_DIR]
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
LAYERS = ("runtime", "reference", "optimized", "harness", "adapters", "include")
# what each layer may include besides itself and include/
ALLOWED = {
    "runtime": set(),
    "reference": set(),
    "optimized": set(),
    "harness": set(),
    "adapters": {"harness"},
}
SOURCE_EXT = (".c", ".h", ".cpp")


def layer_of(root, path):
    rel = os.path.relpath(path, root)
    top = rel.split(os.sep)[0]
    if top == "adapters":
        parts = rel.split(os.sep)
        return "adapters/" + parts[1] if len(parts) > 2 else "adapters"
    return top if top in LAYERS else None


def resolve(root, src, name):
    for base in (os.path.dirname(src), os.path.join(root, "include")):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(p):
            return p
    return None


def check(root):
    bad = []
    n_files = 0
    for top in ("runtime", "reference", "optimized", "harness", "adapters"):
        for dirpath, dirnames, files in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if d != "tests"]  # test drivers may reach in
            for f in sorted(files):
                if not f.endswith(SOURCE_EXT):
                    continue
                src = os.path.join(dirpath, f)
                n_files += 1
                me = layer_of(root, src)
                with open(src, encoding="utf-8", errors="replace") as fh:
                    for ln, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        tgt = resolve(root, src, m.group(1))
                        if tgt is None:
                            continue  # a generated or external header: not ours to judge
                        them = layer_of(root, tgt)
                        if them in (None, "include", me):
                            continue
                        mine = me.split("/")[0]
                        if them.split("/")[0] in ALLOWED.get(mine, set()):
                            continue
                        bad.append("%s:%d: %s includes %s (%s)" % (
                            os.path.relpath(src, root), ln, me, os.path.relpath(tgt, root), them))
    return bad, n_files


def main(argv):
    if len(argv) > 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root = os.path.abspath(argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(__file__), ".."))
    if not os.path.isdir(os.path.join(root, "runtime")):
        print("check_layers.py: %s: no runtime/ folder" % root, file=sys.stderr)
        return 2
    bad, n = check(root)
    for b in bad:
        print(b)
    print("check_layers.py: %d source files, %d forbidden include(s)" % (n, len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
