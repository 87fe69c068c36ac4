#!/usr/bin/python3
"""server_gate.py -- the helper of ci/llama-server (llama.cpp's llama-server under
`qwen-conform check --backend http:URL,api=llama-server`).

    server_gate.py gguf --cache DIR MODEL_DIR
        print the path the llama.cpp plugin caches MODEL_DIR's F32 GGUF under
        (DIR/gguf/<key>/model.gguf, key exactly as qc_llamacpp_convert.c's model_key with the
        default options outtype=f32 mtp=auto mrope=stock). Exit 0 when it exists, 3 when not
        converted yet, 4 when a failed conversion is cached (its reason on stderr).
    server_gate.py info FIXTURE_DIR [--gguf FILE --gguf-py DIR]
        print "MAX_POSITIONS CONTEXT_LENGTH ARCH": the most positions any case of
        FIXTURE_DIR/golden.h5 uses (start_pos + prompt + decode steps), the model's training
        context (config max_position_embeddings; the GGUF's <arch>.context_length when --gguf
        is given) and the GGUF architecture ("-" without --gguf)
    server_gate.py runs --expect expectations.json --fixtures DIR
        print the fixtures llama.cpp loads (expectations.json outcome pass or fail) that have a
        DIR/<fixture>/golden.h5, one a line
    server_gate.py gate --expect server-expectations.json --reports DIR RUN...
        classify each run's report like gate.py (pass | fail | error | crash | ...) plus
        cannot_start (ci/llama-server wrote DIR/<run>.start: the server did not come up), compare
        with server-expectations.json and print the gate lines and a markdown table
        (fixture | outcome | passed/failed/skipped | notes), also written to DIR/table.md.
        A run whose expectation is missing or "pending" FAILS (record the measured outcome);
        so does an expectation for a fixture that was not run. Exit 0 all match, 1 any
        changed, 2 usage error.
  For ci/llama-server probe:
    server_gate.py tokens GOLDEN CASE [--decode N]
        the case's history + prompt token ids as a JSON array (+ its first N golden decode tokens)
    server_gate.py trim FILE [--keep K1,K2]
        a JSON response shortened for printing (long lists cut, "bytes" and
        "generation_settings" left out)
    server_gate.py compare GOLDEN CASE RESPONSE [--decode N]
        the log-probabilities of a /completion or /v1/completions response against
        log_softmax of the golden's float64 logits (the prompt: the case's history + prompt
        + its first N golden decode tokens)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gate as plugin_gate  # noqa: E402  (classify: the same outcome rules as ci/llamacpp check)

TAG = "v0.5.0"  # qc_llamacpp_internal.h QC_LLAMACPP_TAG


# ---- the plugin's conversion cache key (qc_llamacpp_convert.c, model_key) -------------------
class Fnv:
    def __init__(self) -> None:
        self.h = 1469598103934665603

    def add(self, b: bytes) -> None:
        h = self.h
        for x in b:
            h ^= x
            h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
        self.h = h

    def string(self, s: str) -> None:
        self.add(s.encode() + b"\0")

    def file(self, path: str) -> None:
        total = 0
        with open(path, "rb") as f:
            while True:
                b = f.read(1 << 16)
                if not b:
                    break
                self.add(b)
                total += len(b)
        self.add(total.to_bytes(8, "little"))


def model_key(model_dir: str, converter: str, outtype: str = "f32", mtp: str = "auto") -> str:
    names = sorted(n for n in os.listdir(model_dir)
                   if n == "config.json" or n.endswith(".safetensors") or n.endswith(".index.json"))
    if not names:
        raise ValueError(f"{model_dir} has no config.json / *.safetensors")
    f = Fnv()
    for n in names:
        f.string(n)
        f.file(os.path.join(model_dir, n))
    f.file(converter)
    f.string(TAG)
    f.string(outtype)
    f.string(mtp)
    f.string("mrope=stock")
    return f"{f.h:016x}-{outtype}"


def cmd_gguf(a: argparse.Namespace) -> int:
    conv = os.environ.get("QC_LLAMACPP_CONVERT") or os.path.join(os.path.dirname(HERE), "qc_convert.py")
    d = os.path.join(a.cache, "gguf", model_key(os.path.abspath(a.model_dir), conv))
    print(os.path.join(d, "model.gguf"))
    if os.path.isfile(os.path.join(d, "model.gguf")):
        return 0
    failed = os.path.join(d, "convert.failed")
    if os.path.isfile(failed):
        print(open(failed, errors="replace").readline().strip(), file=sys.stderr)
        return 4
    return 3


# ---- fixture facts ----------------------------------------------------------------------------
def cmd_info(a: argparse.Namespace) -> int:
    import h5py  # noqa: PLC0415
    mx = 0
    with h5py.File(os.path.join(a.fixture, "golden.h5"), "r") as g:
        for c in g["cases"].values():
            n = int(c.attrs.get("start_pos", 0)) + int(c["tokens"].shape[0])
            if "decode" in c and "tokens" in c["decode"]:
                n += int(c["decode"]["tokens"].shape[0])
            mx = max(mx, n)
    cfg = json.load(open(os.path.join(a.fixture, "model", "config.json")))
    ctx = (cfg.get("text_config") or cfg).get("max_position_embeddings", 0)
    arch = "-"
    if a.gguf:
        if a.gguf_py:
            sys.path.insert(0, a.gguf_py)
        from gguf import GGUFReader  # noqa: PLC0415
        r = GGUFReader(a.gguf)

        def field(name: str):
            fl = r.fields.get(name)
            if fl is None:
                return None
            v = fl.parts[fl.data[0]]
            return bytes(v).decode() if fl.types and fl.types[0].name == "STRING" else int(v[0])
        arch = field("general.architecture") or "-"
        ctx = field(f"{arch}.context_length") or ctx
    print(mx, ctx, arch)
    return 0


def cmd_runs(a: argparse.Namespace) -> int:
    exp = json.load(open(a.expect))
    for fx, e in sorted(exp.get("fixtures", {}).items()):
        if e.get("outcome") in ("pass", "fail") and os.path.isfile(os.path.join(a.fixtures, fx, "golden.h5")):
            print(fx)
    return 0


# ---- probe helpers (ci/llama-server probe) ---------------------------------------------------
def golden_case(golden: str, case: str):
    import h5py  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415
    with h5py.File(golden, "r") as g:
        c = g["cases"][case]
        hist = c["history_tokens"][()].tolist() if "history_tokens" in c else []
        toks = c["tokens"][()].tolist()
        pre = c["prefill"]["logits"][-1].astype(np.float64)
        dec = c["decode"]["logits"][()].astype(np.float64) if "decode" in c else np.zeros((0, pre.shape[0]))
        dtok = c["decode"]["tokens"][()].tolist() if "decode" in c else []
    return hist + toks, pre, dec, dtok


def log_softmax(x):
    import numpy as np  # noqa: PLC0415
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def cmd_tokens(a: argparse.Namespace) -> int:
    ids, _, _, dtok = golden_case(a.golden, a.case)
    if a.decode:
        ids = ids + dtok[:a.decode]
    print(json.dumps(ids, separators=(",", ":")))
    return 0


def trim(v, depth=0):
    if isinstance(v, dict):
        return {k: ("{...}" if k == "generation_settings" else trim(x, depth + 1))
                for k, x in v.items() if k != "bytes"}
    if isinstance(v, list):
        lim = 3 if depth > 3 else 8
        out = [trim(x, depth + 1) for x in v[:lim]]
        if len(v) > lim:
            out.append(f"... {len(v) - lim} more")
        return out
    if isinstance(v, str) and len(v) > 160:
        return v[:160] + f"... ({len(v)} chars)"
    return v


def cmd_trim(a: argparse.Namespace) -> int:
    raw = open(a.file, errors="replace").read()
    try:
        v = json.loads(raw)
    except ValueError:
        print(raw[:400])
        return 0
    if a.keep:
        v = {k: v[k] for k in a.keep.split(",") if isinstance(v, dict) and k in v}
    print(json.dumps(trim(v)))
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    """The returned log-probabilities against log_softmax(golden logits) (float64): row 0 =
    the last prompt position, row s = decode/logits[s-1] (the prompt must be the case's whole
    history + prompt). llama-server leaves out the entry of a generated token whose text ends
    in an incomplete UTF-8 sequence; with "return_tokens" the entries are aligned to the
    generated ids (a subsequence), else they are taken as steps 0, 1, ..."""
    _, pre, dec, dtok = golden_case(a.golden, a.case)
    r = json.load(open(a.response))
    if "choices" in r:
        steps = (r["choices"][0].get("logprobs") or {}).get("content") or []
        gen = None
    else:
        steps = r.get("completion_probabilities") or []
        gen = r.get("tokens") or None
    if not steps:
        print(f"no log-probabilities in the response (generated {gen if gen else '?'}: a token whose text "
              "is an incomplete UTF-8 sequence gets none)")
        return 0
    idx = list(range(len(steps)))
    if gen:
        idx, j = [], 0
        for s_, t in enumerate(gen):
            if j < len(steps) and steps[j]["id"] == t:
                idx.append(s_)
                j += 1
        if len(idx) < len(steps):
            print("entries do not align with the generated tokens")
            return 0
        if len(steps) < len(gen):
            print(f"{len(steps)} entries for {len(gen)} generated tokens {gen}: steps {sorted(set(range(len(gen))) - set(idx))} "
                  "have none (incomplete UTF-8)")
    worst = 0.0
    off = a.decode
    for st, s0 in zip(steps, idx):
        s = s0 + off  # the golden step: the prompt already holds `off` golden decode tokens
        if s > len(dec):
            break
        if gen and gen[:s0] != dtok[off:s]:
            print(f"step {s}: earlier generated tokens differ from the golden's greedy ones: not comparable")
            break
        row = pre if s == 0 else dec[s - 1]
        ls = log_softmax(row)
        order = [int(i) for i in (-row).argsort(kind="stable")]
        tops = st.get("top_logprobs", [])
        ids = [t["id"] for t in tops]
        d = max([abs(t["logprob"] - ls[t["id"]]) for t in tops] + [abs(st["logprob"] - ls[st["id"]])])
        worst = max(worst, d)
        same = ids == order[:len(ids)]
        gtok = dtok[s] if s < len(dtok) else None
        print(f"step {s}: token {st['id']} (golden greedy {gtok}); top-{len(ids)} ids {ids} "
              f"{'= golden order' if same else '!= golden ' + str(order[:len(ids)])}; "
              f"max |logprob - log_softmax(golden)| = {d:.3g}")
    print(f"max |diff| over {len(steps)} entr{'y' if len(steps) == 1 else 'ies'}: {worst:.3g}")
    return 0


# ---- the gate -----------------------------------------------------------------------------------
def classify(rdir: str, run: str) -> tuple[str, str]:
    start = os.path.join(rdir, run + ".start")
    if os.path.isfile(start):
        lines = open(start, errors="replace").read().strip().splitlines() or [""]
        return "cannot_start", " | ".join([lines[0]] + lines[1:][-2:])
    return plugin_gate.classify(rdir, run)


def counts(rdir: str, run: str) -> str:
    try:
        s = json.load(open(os.path.join(rdir, run + ".json")))["summary"]
        return f"{s['passed']}/{s['failed']}/{s['skipped']}" + (f" ({s['errors']} errors)" if s.get("errors") else "")
    except (OSError, ValueError, KeyError, TypeError):
        return "-"


def cell(t: str) -> str:
    t = re.sub(r"\s+", " ", t or "").replace("|", "\\|")
    return t[:160] + "..." if len(t) > 160 else t


def cmd_gate(a: argparse.Namespace) -> int:
    try:
        exp = json.load(open(a.expect))
    except (OSError, ValueError) as e:
        print(f"gate: {a.expect}: {e}", file=sys.stderr)
        return 2
    fixtures = exp.get("fixtures", {})
    squeeze = lambda t: re.sub(r"\s+", " ", t or "")  # noqa: E731
    ok = bad = 0
    rows = []
    for run in a.runs:
        outcome, reason = classify(a.reports, run)
        e = fixtures.get(run)
        want = e.get("outcome") if e else None
        rc_ = e.get("reason_contains") if e else None
        short = (reason[:300] + "...") if len(reason) > 300 else reason
        if want is None or want == "pending":
            bad += 1
            verdict = "NEW" if want is None else "PENDING"
            print(f"gate: {verdict:8} {run}: no expectation recorded in {a.expect}; measured {outcome}"
                  + (f" -- {short}" if short else "") + " (record it)")
        elif outcome == want and (not rc_ or squeeze(rc_) in squeeze(reason)):
            ok += 1
            verdict = "ok"
            print(f"gate: ok       {run}: {outcome}" + (f" -- {short}" if short else ""))
        else:
            bad += 1
            verdict = "CHANGED"
            print(f"gate: CHANGED  {run}: expected {want}" + (f" (reason containing {rc_!r})" if rc_ else "")
                  + f", got {outcome}" + (f" -- {short}" if short else ""))
        note = reason or (e or {}).get("evidence", "")
        if verdict != "ok":
            note = f"{verdict}" + (f" (expected {want})" if verdict == "CHANGED" else "") + (f": {note}" if note else "")
        rows.append((run, outcome, counts(a.reports, run), note))
    for fx in sorted(set(fixtures) - set(a.runs)):
        bad += 1
        print(f"gate: NOT RUN  {fx}: expected {fixtures[fx].get('outcome')}, but ci/llama-server did not run it "
              "(adapters/llamacpp/expectations.json no longer says llama.cpp loads it?)")
        rows.append((fx, "not run", "-", f"expected {fixtures[fx].get('outcome')}"))
    table = ["| fixture | outcome | passed/failed/skipped | notes |", "|---|---|---|---|"]
    table += [f"| {r[0]} | {r[1]} | {r[2]} | {cell(r[3])} |" for r in rows]
    print()
    print("\n".join(table))
    print()
    try:
        with open(os.path.join(a.reports, "table.md"), "w") as f:
            f.write("\n".join(table) + "\n")
    except OSError:
        pass
    print(f"gate: {ok} passed, {bad} failed")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("gguf")
    p.add_argument("--cache", required=True, help="the plugin's cache: <QC cache>/llamacpp")
    p.add_argument("model_dir")
    p = sub.add_parser("info")
    p.add_argument("fixture")
    p.add_argument("--gguf")
    p.add_argument("--gguf-py", help="llama.cpp's gguf-py directory")
    p = sub.add_parser("runs")
    p.add_argument("--expect", required=True)
    p.add_argument("--fixtures", required=True)
    p = sub.add_parser("tokens")
    p.add_argument("golden")
    p.add_argument("case")
    p.add_argument("--decode", type=int, default=0, help="append the first N golden decode tokens")
    p = sub.add_parser("trim")
    p.add_argument("file")
    p.add_argument("--keep", help="only these top-level keys, comma-separated")
    p = sub.add_parser("compare")
    p.add_argument("golden")
    p.add_argument("case")
    p.add_argument("response")
    p.add_argument("--decode", type=int, default=0, help="the prompt had the first N golden decode tokens appended")
    p = sub.add_parser("gate")
    p.add_argument("--expect", required=True)
    p.add_argument("--reports", required=True)
    p.add_argument("runs", nargs="*")
    a = ap.parse_args()
    try:
        return {"gguf": cmd_gguf, "info": cmd_info, "runs": cmd_runs, "gate": cmd_gate, "tokens": cmd_tokens,
                "trim": cmd_trim, "compare": cmd_compare}[a.cmd](a)
    except (OSError, ValueError, KeyError) as e:
        print(f"server_gate.py {a.cmd}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
