#!/usr/bin/python3
"""The layer rule (issue #14): which folder may include a header of which.

    include/qc/   the public API: anyone may include it
    runtime/      the shared core: includes only include/qc/ and runtime/
    reference/    a backend: include/qc/ and reference/
    optimized/    a backend: include/qc/ and optimized/
    harness/X/    the CLI, one folder per concern in layer order (HARNESS_ORDER, bottom first:
                  io, host, report, check, diff, record, bench, cli): include/qc/, its own
                  folder and the folders below it (never a backend's private header); a source
                  file directly in harness/ or in a folder not in the table is refused
    adapters/X/   a shipped adapter: include/qc/ and its own folder

An `#include "..."` is resolved as the compiler would (next to the including file, then
include/, then, for a harness file, the harness/X/ folders: CMake puts a folder on the include
path of the targets that link it); a system include (<...>) is not checked. Prints each forbidden arrow as
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
    "adapters": set(),
}
# harness/X/ sub-layers, bottom first: each may include itself and the ones before it (the same
# order as the CMake link chain qc_h_cli -> qc_h_bench -> ... -> qc_h_io, CMakeLists.txt)
HARNESS_ORDER = ("io", "host", "report", "check", "diff", "record", "bench", "cli")
SOURCE_EXT = (".c", ".h", ".cpp")


def layer_of(root, path):
    rel = os.path.relpath(path, root)
    parts = rel.split(os.sep)
    top = parts[0]
    if top in ("adapters", "harness"):
        return top + "/" + parts[1] if len(parts) > 2 else top
    return top if top in LAYERS else None


def resolve(root, src, name):
    bases = [os.path.dirname(src), os.path.join(root, "include")]
    if layer_of(root, src).startswith("harness"):
        bases += [os.path.join(root, "harness", h) for h in HARNESS_ORDER]
    for base in bases:
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(p):
            return p
    return None


def harness_ok(me, them):
    """me, them: harness/X layers. Only downward (or same-folder) arrows are allowed."""
    b = them.split("/")[1] if "/" in them else None
    if b not in HARNESS_ORDER:
        return False  # a header directly in harness/ or in a folder outside the table
    return HARNESS_ORDER.index(b) <= HARNESS_ORDER.index(me.split("/")[1])


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
                if me.split("/")[0] == "harness" and me[len("harness/"):] not in HARNESS_ORDER:
                    bad.append("%s: not in a harness layer folder (%s)" % (
                        os.path.relpath(src, root), ", ".join(HARNESS_ORDER)))
                    continue
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
                        if mine == "harness" and them.split("/")[0] == "harness" \
                                and harness_ok(me, them):
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
