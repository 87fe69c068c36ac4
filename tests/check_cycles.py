#!/usr/bin/python3
"""The call-cycle rule (issue #28): no two source files of the product call each other.

For the object files of the harness's targets (HARNESS_TARGETS: the folders io, host, report,
check, diff, record, bench, cli and the CLI's main.c; with --core also CORE_TARGETS: the runtime
and both backends), read each object's defined and undefined symbols with `nm` and build the
graph "file A calls a function defined in file B" (an undefined symbol of A's object that B's
object defines as a function: nm type T, W or i; a static function is not visible, which is
fine: it cannot be called from another file). A strongly connected component of that graph
with more than one file is a call circle: its files cannot be read, tested or moved one
without the others. Each circle is printed as `cycle: a.c -> b.c -> a.c`, followed by one
indented line per arrow with the symbols it stands for (`  a.c -> b.c: f, g`); enough cycles
are printed that every arrow inside the circle is shown once. A summary line ends the output.

The objects are found where CMake puts them: BUILD_DIR/CMakeFiles/<target>.dir/<path>.o, the
file named by <path> (CMake spells a source of the tree relative to the source directory). A
name that is not a file of SOURCE_DIR (default: this script's parent) is a generated source and
printed as `<build>/<path>`. A target whose folder is missing is skipped, but finding no object
at all is a usage error.

Exit codes: 0 no cycle, 1 at least one cycle, 2 bad usage (no build directory, no objects,
nm missing or failing). Usage: check_cycles.py [--core] BUILD_DIR [SOURCE_DIR]
"""
import os
import subprocess
import sys
from collections import deque

HARNESS_TARGETS = ("qc_h_io", "qc_h_host", "qc_h_report", "qc_h_check", "qc_h_diff",
                   "qc_h_record", "qc_h_bench", "qc_h_cli", "qwen-conform")
CORE_TARGETS = ("qc_runtime", "qc_reference", "qc_optimized")
FUNC_TYPES = set("TWi")  # nm -P types of a defined function (global, weak, indirect)
MAX_SYMS = 4             # symbols printed per arrow before "+N more"


def usage(msg):
    if msg:
        print("check_cycles.py: " + msg, file=sys.stderr)
    print("usage:" + __doc__.strip().split("Usage:")[-1], file=sys.stderr)
    return 2


def find_objects(build, targets):
    """[(target, object path, file name)] for every object of targets under build/CMakeFiles."""
    out = []
    for tgt in targets:
        root = os.path.join(build, "CMakeFiles", tgt + ".dir")
        for dirpath, dirnames, files in os.walk(root):
            dirnames.sort()
            for f in sorted(files):
                if f.endswith(".o"):
                    p = os.path.join(dirpath, f)
                    out.append((tgt, p, os.path.relpath(p, root)[:-2]))
    return out


def read_symbols(objs):
    """{object path: (defined functions, undefined symbols)} from one nm run per batch."""
    syms = {p: (set(), set()) for _, p, _ in objs}
    paths = [p for _, p, _ in objs]
    for i in range(0, len(paths), 200):
        batch = paths[i:i + 200]
        r = subprocess.run(["nm", "-P", "-A"] + batch, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("nm failed: " + r.stderr.strip().splitlines()[0]
                               if r.stderr.strip() else "nm failed (exit %d)" % r.returncode)
        for line in r.stdout.splitlines():
            # "path.o: name type [value size]" (the path may hold ':' only before ": ")
            head, _, rest = line.rpartition(": ")
            f = rest.split()
            if not head or len(f) < 2 or head not in syms:
                continue
            name, typ = f[0], f[1]
            if typ == "U":
                syms[head][1].add(name)
            elif typ in FUNC_TYPES:
                syms[head][0].add(name)
    return syms


def build_graph(objs, syms):
    """edges[a][b] = sorted symbols a calls that b defines (a != b)."""
    definer = {}
    for _, p, name in objs:
        for s in syms[p][0]:
            definer.setdefault(s, set()).add(name)
    edges = {name: {} for _, _, name in objs}
    for _, p, name in objs:
        for s in syms[p][1]:
            for d in definer.get(s, ()):
                if d != name:
                    edges[name].setdefault(d, set()).add(s)
    return {a: {b: sorted(v) for b, v in bs.items()} for a, bs in edges.items()}


def sccs(edges):
    """Tarjan's algorithm, iterative: the strongly connected components, each sorted."""
    index, low, on, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))
    return comps


def shortest_path(edges, comp, src, dst):
    """The shortest path src -> ... -> dst inside comp (a list of files), by BFS."""
    prev = {src: None}
    q = deque([src])
    while q:
        v = q.popleft()
        if v == dst:
            break
        for w in sorted(edges[v]):
            if w in comp and w not in prev:
                prev[w] = v
                q.append(w)
    path, v = [], dst
    while v is not None:
        path.append(v)
        v = prev[v]
    return path[::-1]


def cycles_of(edges, comp):
    """Cycles covering every arrow inside comp: for each arrow a->b not yet shown, a->b and
    then the shortest way back from b to a."""
    members = set(comp)
    shown, out = set(), []
    for a in comp:
        for b in sorted(edges[a]):
            if b not in members or (a, b) in shown:
                continue
            cyc = [a] + shortest_path(edges, members, b, a)
            for x, y in zip(cyc, cyc[1:]):
                shown.add((x, y))
            out.append(cyc)
    return out


def fmt_syms(s):
    more = " (+%d more)" % (len(s) - MAX_SYMS) if len(s) > MAX_SYMS else ""
    return ", ".join(s[:MAX_SYMS]) + more


def main(argv):
    targets = HARNESS_TARGETS
    if len(argv) > 1 and argv[1] == "--core":
        targets = HARNESS_TARGETS + CORE_TARGETS
        argv = argv[:1] + argv[2:]
    if len(argv) not in (2, 3) or argv[1].startswith("-"):
        return usage(None)
    build = os.path.abspath(argv[1])
    if not os.path.isdir(os.path.join(build, "CMakeFiles")):
        return usage("%s: not a CMake build directory (no CMakeFiles/)" % argv[1])
    src = argv[2] if len(argv) == 3 else os.path.join(os.path.dirname(__file__), "..")
    if not os.path.isdir(src):
        return usage("%s: no such source directory" % src)
    objs = [(t, p, n if os.path.isfile(os.path.join(src, n)) else "<build>/" + n)
            for t, p, n in find_objects(build, targets)]
    if not objs:
        return usage("%s: no object files of %s" % (argv[1], ", ".join(targets)))
    try:
        syms = read_symbols(objs)
    except (OSError, RuntimeError) as e:
        return usage(str(e))
    edges = build_graph(objs, syms)
    n_arrows = sum(len(v) for v in edges.values())
    comps = [c for c in sccs(edges) if len(c) > 1]
    n_cycles = 0
    for comp in sorted(comps):
        for cyc in cycles_of(edges, comp):
            n_cycles += 1
            print("cycle: " + " -> ".join(cyc))
            for x, y in zip(cyc, cyc[1:]):
                print("  %s -> %s: %s" % (x, y, fmt_syms(edges[x][y])))
    print("check_cycles.py: %d files, %d call arrows, %d circle(s) (%d file(s) in them), "
          "%d cycle(s) shown" % (len(edges), n_arrows, len(comps), sum(map(len, comps)),
                                  n_cycles))
    return 1 if comps else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
