#!/usr/bin/env python3
"""ci/bench_crosscheck.py — ci/bench-llamacpp's cross-check table: one bench --json report
(ours, llama.cpp through the adapter: native and / or npm) beside llama.cpp's own llama-bench
(`llama-bench -o json`, the native build, the same GGUF and thread counts), so that any cost of
the adapter path shows.

  bench_crosscheck.py --bench B.json [--llama-bench L.json] [--npm-name NAME] [--native 0|1]
                      [--build-info DIR] [--weights TEXT] [--dot-name NAME]
                      [--append REPORT.md]

Prints a Markdown section (and appends it to REPORT.md when given): the CPU (vendor,
family/model, name, flags: bench's machine block; llama-bench's cpu_info), the run's probes
(bandwidth, FMA peak: median [min-max] per thread count), then per thread count and test
(static N, ppN, tgM@dD) the median tok/s [min-max] of: ours (optimized), llama.cpp via the
adapter (backend `llamacpp`: the native build with --native 1, the npm one with --native 0),
llama.cpp npm via the adapter (backend NPM-NAME, when given), llama-bench (native; median of
its samples_ts [min-max]) and the ratios ours / each, adapter native / llama-bench.
--dot-name NAME: ours with the BF16 dot GEMM as well (the bench backend NAME, e.g.
`optimized,bf16_dot=1`), a column and its ratios beside ours'.
--weights TEXT: a line "- weights: TEXT" under the CPU (ci/bench-llamacpp's Q8_0 run names both
weight files and ci/q8_blocks.py's verdict there); the title's weight type is then TEXT's
first word (before ':'), not bench's config.dtype.
Exit 0; 2 when a file or field is bad (named).
"""
import argparse
import json
import os
import statistics
import sys


def die(msg):
    print(f"ci/bench_crosscheck.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        die(f"{path}: cannot read {what}: {e}")


def spread(xs):
    """'median [min-max]' of a list of numbers"""
    if not xs:
        return "—"

    def num(x):
        return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.0f}"
    return f"{num(statistics.median(xs))} [{num(min(xs))}-{num(max(xs))}]"


def bench_figures(rep, path):
    """{(backend, test, threads): (median, [samples])} from bench's results"""
    res = rep.get("results")
    if not isinstance(res, list):
        die(f"{path}: results: missing or not an array")
    out = {}
    for i, r in enumerate(res):
        try:
            key = (r["backend"], r["test"], int(r["threads"]))
            med = float(r["tok_s_median"])
        except (KeyError, TypeError, ValueError):
            die(f"{path}: results[{i}]: needs backend, test, threads, tok_s_median")
        samples = [float(x) for x in r.get("tok_s_samples") or [] if isinstance(x, (int, float))]
        out[key] = (med, samples or [med], r.get("mode"))
    return out


def llama_bench_figures(lb, path):
    """{(test, threads): (median, [samples])}; test named as bench names it (ppN, tgM@dD)"""
    if not isinstance(lb, list):
        die(f"{path}: not a JSON array (llama-bench -o json)")
    out = {}
    for i, e in enumerate(lb):
        try:
            npr, ng, nt = int(e["n_prompt"]), int(e["n_gen"]), int(e["n_threads"])
            nd = int(e.get("n_depth", 0))
            avg = float(e["avg_ts"])
        except (KeyError, TypeError, ValueError):
            die(f"{path}: [{i}]: needs n_prompt, n_gen, n_threads, avg_ts")
        if npr > 0 and ng == 0 and nd == 0:
            test = f"pp{npr}"
        elif npr == 0 and ng > 0:
            test = f"tg{ng}@d{nd}"
        else:
            continue
        samples = [float(x) for x in e.get("samples_ts") or [] if isinstance(x, (int, float))]
        out[(test, nt)] = (statistics.median(samples) if samples else avg, samples or [avg])
    return out


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "—"


def machine_lines(rep, lb):
    m = rep.get("machine") or {}
    lines = [f"- CPU: {m.get('vendor', '?')} family {m.get('family', '?')} model {m.get('model', '?')}"
             f" stepping {m.get('stepping', '?')} ({m.get('cpu', '?')}), {m.get('cores', '?')} cores,"
             f" ISA {m.get('isa', '?')}; flags: {m.get('flags', '?')}"]
    if lb:
        e0 = lb[0]
        lines.append(f"- llama-bench: cpu_info \"{e0.get('cpu_info', '?')}\", build {e0.get('build_commit', '?')}"
                     f" ({e0.get('build_number', '?')}), backends {e0.get('backends', '?')}, model_type"
                     f" \"{e0.get('model_type', '?')}\", KV {e0.get('type_k', '?')}/{e0.get('type_v', '?')},"
                     f" flash_attn {e0.get('flash_attn', '?')}, poll {e0.get('poll', '?')},"
                     f" n_batch {e0.get('n_batch', '?')}, n_ubatch {e0.get('n_ubatch', '?')}")
    probes = rep.get("probes") or {}
    for p in probes.get("per_threads") or []:
        lines.append(f"- probes at {p.get('threads', '?')} thread(s): bandwidth "
                     f"{spread(p.get('bandwidth_gbs') or [])} GB/s, FMA peak "
                     f"{spread(p.get('fma_peak_gflops') or [])} GFLOP/s (median [min-max] of the run's probes)")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True)
    ap.add_argument("--llama-bench")
    ap.add_argument("--npm-name")
    ap.add_argument("--native", type=int, choices=(0, 1), default=1)
    ap.add_argument("--build-info")
    ap.add_argument("--weights")
    ap.add_argument("--dot-name")
    ap.add_argument("--append")
    a = ap.parse_args()

    rep = load(a.bench, "the bench report")
    figs = bench_figures(rep, a.bench)
    lb_raw = load(a.llama_bench, "llama-bench's report") if a.llama_bench else None
    lbf = llama_bench_figures(lb_raw, a.llama_bench) if lb_raw is not None else {}
    cfg = rep.get("config") or {}

    ll_name = "llama.cpp native via adapter" if a.native else "llama.cpp npm via adapter"
    ours = [("optimized", "ours (optimized)")]
    if a.dot_name:
        ours.append((a.dot_name, "ours (bf16_dot=1)"))
    cols = ours + [("llamacpp", ll_name)]
    if a.npm_name:
        cols.append((a.npm_name, "llama.cpp npm via adapter"))
    no = len(ours)
    wtype = a.weights.split(":")[0].strip() if a.weights and ":" in a.weights else cfg.get("dtype", "?")
    out = [f"## Cross-check: llama.cpp via the adapter vs llama-bench ({wtype})", ""]
    out += machine_lines(rep, lb_raw)
    if a.weights:
        out.append(f"- weights: {a.weights}")
    if a.native and a.build_info:
        secs = os.path.join(a.build_info, "build.seconds")
        took = open(secs).read().strip() + " s" if os.path.exists(secs) else "?"
        ccf = os.path.join(a.build_info, "build.compiler")
        cc = open(ccf).read().strip() if os.path.exists(ccf) else "compiler not recorded"
        out.append(f"- native build: {a.build_info}/build (Release, GGML_NATIVE=ON, shared,"
                   f" GGML_OPENMP=OFF; {cc}; built in {took}; ci/llamacpp-native)")
    out.append(f"- bench: commit {rep.get('commit', '?')}, {rep.get('date', '?')}, reps"
               f" {cfg.get('reps', '?')}, warm-up {cfg.get('warmup', '?')}"
               + ("; llama-bench ran just before bench (not interleaved with it)" if lb_raw is not None else ""))
    out.append("")
    hdr = ["threads", "test"] + [c[1] for c in cols]
    if lb_raw is not None:
        hdr.append("llama-bench (native)")
    for o in ours:
        tag = "ours" if o[0] == "optimized" else o[1]
        hdr += [f"{tag} / {c[1].replace(' via adapter', '')}" for c in cols[no:]]
        if lb_raw is not None:
            hdr.append(f"{tag} / llama-bench")
    if lb_raw is not None:
        hdr.append("adapter native / llama-bench" if a.native else "adapter npm / llama-bench")
    out.append("| " + " | ".join(hdr) + " |")
    out.append("|" + "|".join(["---:"] * len(hdr)) + "|")
    keys = sorted({(t, th) for (_, t, th) in figs}, key=lambda k: (k[1], k[0][0] != "s", k[0][0] != "p", k[0]))
    for test, th in keys:
        row = [str(th), test]
        meds = []
        for name, _ in cols:
            f = figs.get((name, test, th))
            row.append(spread(f[1]) if f else "—")
            meds.append(f[0] if f else None)
        lbv = lbf.get((test, th))
        if lb_raw is not None:
            row.append(spread(lbv[1]) if lbv else "—")
        for i in range(no):
            row += [ratio(meds[i], m) for m in meds[no:]]
            if lb_raw is not None:
                row.append(ratio(meds[i], lbv[0] if lbv else None))
        if lb_raw is not None:
            row.append(ratio(meds[no], lbv[0] if lbv else None))
        out.append("| " + " | ".join(row) + " |")
    out += ["", "tok/s, median [min-max] over the repetitions (llama-bench: its samples_ts);"
            " ratios of medians. static = bench's static prefill (no llama-bench equivalent)."]
    text = "\n".join(out) + "\n"
    print(text)
    if a.append:
        with open(a.append, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
