#!/usr/bin/python3
"""gate.py -- compare the per-fixture outcomes of `qwen-conform check --backend llamacpp` with
adapters/llamacpp/expectations.json.

    gate.py --expect expectations.json --reports DIR

DIR holds, per run (ci/llamacpp check writes them), <run>.rc (exit status), <run>.json (the
--json report, absent when qwen-conform died), <run>.out and <run>.err, and <run>.open (the
plugin's own reply to open through tests/plugin_driver: reports shorten long runtime messages,
so the reason check of an open failure also reads it); <run> is the fixture
name ("extra.<name>" for the generated extra fixtures), or <run>@<variant> for a variant run
(expectations.json "variants": backend options such as guard=0). With --fixtures DIR, a
fixture in DIR that expectations.json does not list fails the gate (its outcome must be
measured and recorded).

The outcome of a run:
  pass            exit 0
  cannot_convert  the runtime's open failed with "cannot convert: ..."
  cannot_load     the runtime's open failed with "cannot load: ..." (but see crash)
  crash           the runtime process died (a signal: "adapter died (signal N)" out of
                  process, or qwen-conform itself killed in process), or the plugin refused a
                  model llama.cpp is known to abort on ("... would abort (SIGABRT) ...")
  fail            exit 1: a conformance check failed (the first failing check is the reason)
  error           anything else (usage / I/O error, nothing checked)
A run matches its expectation when the outcome is the same and, if the expectation has
"reason_contains", the reason contains that text (runs of blanks compared as one) (so a different defect behind the same outcome
is noticed), and, if it has "checks" ({lifecycle check: PASS | FAIL | SKIP | ERROR}), every
lifecycle check's verdict over the run's rows (FAIL if any row failed, else ERROR if any
errored, else PASS if any passed, else SKIP) is the recorded one and no other lifecycle
check ran. Each run's lifecycle verdicts are printed under it. --update-checks writes the
measured verdicts into "checks" (of every run that has a report), rewrites the file
(json, indent 2: the file's own format) and then the outcome table rendered from it
(tests/outcome_tables.py: the document --doc, default the README.md next to the expectations
file, between its llamacpp-outcomes markers); outcomes and reasons stay hand-recorded.
Exit 0 when every run matches, 1 when any outcome changed (listed), 2 on a usage
error. The last line is "gate: N passed, M failed".
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import outcome_tables  # noqa: E402  (the README table --update-checks rewrites)


def classify(rdir: str, run: str) -> tuple[str, str]:
    try:
        rc = int(open(os.path.join(rdir, run + ".rc")).read().strip())
    except (OSError, ValueError):
        return "error", "no exit status recorded (not run?)"
    rep = None
    try:
        with open(os.path.join(rdir, run + ".json")) as f:
            rep = json.load(f)
    except (OSError, ValueError):
        rep = None
    err_tail = ""
    try:
        err_tail = " | ".join(open(os.path.join(rdir, run + ".err"), errors="replace").read().strip().splitlines()[-3:])
    except OSError:
        pass
    if rc >= 128 or (rep is None and rc not in (0, 1, 2, 3)):
        return "crash", f"qwen-conform exit status {rc} (signal {rc - 128} in process): {err_tail}"
    if rep is None:
        if rc == 0:
            return "pass", ""
        return "error", f"exit status {rc}, no report: {err_tail}"
    checks = rep.get("checks", [])
    # open failures: the "create" check carries the runtime's message (its verdict is ERROR or
    # FAIL depending on the qwen-conform version); the markers are the plugin's own words
    for c in checks:
        if c.get("verdict") in ("ERROR", "FAIL"):
            m = c.get("message", "")
            if "would abort" in m:
                return "crash", m
            if "cannot convert" in m:
                return "cannot_convert", m
            if "cannot load" in m:
                return "cannot_load", m
    for c in checks:
        m = c.get("message", "")
        if c.get("verdict") in ("FAIL", "ERROR") and re.search(r"adapter died \(signal \d+\)", m):
            return "crash", f"{c.get('case')} {c.get('mode')} {c.get('check')}: {m}"
    if rc == 0:
        return "pass", ""
    for c in checks:
        if c.get("verdict") == "FAIL":
            fdl = re.search(r"First divergent layer: [^\n]*", c.get("detail", "") or "")
            return "fail", (f"{c.get('case')} {c.get('mode')} {c.get('check')}: {c.get('message', '')}"
                            + (f"; {fdl.group(0)}" if fdl else ""))
    for c in checks:
        if c.get("verdict") == "ERROR":
            return "error", f"{c.get('case')} {c.get('check')}: {c.get('message', '')}"
    return "error", f"exit status {rc}: {err_tail}"


LIFECYCLE = outcome_tables.LIFECYCLE  # the gated lifecycle checks (one list for the gate and its table)


def lifecycle_verdicts(rdir: str, run: str) -> dict | None:
    """{check: aggregated verdict} of the lifecycle checks in <run>.json (None: no report)."""
    try:
        with open(os.path.join(rdir, run + ".json")) as f:
            rep = json.load(f)
    except (OSError, ValueError):
        return None
    seen: dict[str, set] = {}
    for c in rep.get("checks", []):
        if c.get("check") in LIFECYCLE:
            seen.setdefault(c["check"], set()).add(c.get("verdict"))
    out = {}
    for k in LIFECYCLE:
        if k in seen:
            v = seen[k]
            out[k] = "FAIL" if "FAIL" in v else "ERROR" if "ERROR" in v else "PASS" if "PASS" in v else "SKIP"
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect", required=True)
    ap.add_argument("--reports", required=True)
    ap.add_argument("--fixtures", help="fixtures dir: a fixture there without an expectation fails")
    ap.add_argument("--update-checks", action="store_true",
                    help="write the measured lifecycle verdicts into expectations.json (and its table)")
    ap.add_argument("--doc", help="the document whose outcome table --update-checks rewrites "
                    "(default: README.md next to --expect)")
    args = ap.parse_args()
    try:
        with open(args.expect) as f:
            exp = json.load(f)
    except (OSError, ValueError) as e:
        print(f"gate: {args.expect}: {e}", file=sys.stderr)
        return 2
    runs = []
    for prefix, group in (("", "fixtures"), ("extra.", "extra")):
        for fx, e in sorted(exp.get(group, {}).items()):
            runs.append((prefix + fx, fx, e))
            for var, ve in sorted(e.get("variants", {}).items()):
                runs.append((f"{prefix}{fx}@{var}", fx, ve))
    ok = bad = 0
    updated = False
    if args.fixtures:
        for fx in sorted(os.listdir(args.fixtures)):
            if os.path.isfile(os.path.join(args.fixtures, fx, "golden.h5")) and fx not in exp.get("fixtures", {}):
                outcome, reason = classify(args.reports, fx)
                bad += 1
                print(f"gate: NEW      {fx}: no expectation in {args.expect}; measured {outcome}"
                      + (f" -- {reason[:300]}" if reason else "") + " (record it)")
    for run, fx, e in runs:
        outcome, reason = classify(args.reports, run)
        want = e.get("outcome")
        rc_ = e.get("reason_contains")
        squeeze = lambda t: re.sub(r"\s+", " ", t or "")  # noqa: E731
        full = shown = reason
        if outcome in ("cannot_convert", "cannot_load", "crash"):
            try:  # the plugin's own open message, untruncated (ci/llamacpp writes <run>.open)
                own = open(os.path.join(args.reports, run + ".open"), errors="replace").read().strip()
                full += " " + own
                if own.startswith("err "):
                    shown = "open: " + own.split(" ", 2)[-1]
            except OSError:
                pass
        match = outcome == want and (not rc_ or squeeze(rc_) in squeeze(full))
        lv = lifecycle_verdicts(args.reports, run)
        if args.update_checks and lv is not None:
            e["checks"] = lv
            updated = True
        diff = []
        if "checks" in e:
            got = lv or {}
            diff = [f"{k}: expected {e['checks'].get(k, 'not run')}, got {got.get(k, 'not run')}"
                    for k in LIFECYCLE if e["checks"].get(k) != got.get(k)]
        short = (shown[:300] + "...") if len(shown) > 300 else shown
        if match and not diff:
            ok += 1
            print(f"gate: ok       {run}: {outcome}" + (f" -- {short}" if short else ""))
        else:
            bad += 1
            print(f"gate: CHANGED  {run}: expected {want}" + (f" (reason containing {rc_!r})" if rc_ else "") +
                  f", got {outcome}" + (f" -- {short}" if short else "") +
                  ("; lifecycle " + "; ".join(diff) if diff else ""))
        if lv:
            print("gate:            lifecycle: " + ", ".join(f"{k} {v}" for k, v in lv.items()))
    if updated:
        with open(args.expect, "w") as f:
            f.write(json.dumps(exp, indent=2, ensure_ascii=False) + "\n")
        print(f"gate: lifecycle verdicts written into {args.expect}")
        doc = args.doc or os.path.join(os.path.dirname(os.path.abspath(args.expect)), "README.md")
        if outcome_tables.write("llamacpp", args.expect, doc) != 0:
            print(f"gate: the outcome table in {doc} could not be rewritten (above)", file=sys.stderr)
            bad += 1
    print(f"gate: {ok} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
