#!/usr/bin/python3
"""outcome_tables.py -- the outcome tables of the llama.cpp gate (ci/llamacpp check, gate.py) and
the llama-server gate (ci/llama-server check, server_gate.py), rendered from what the gates
record, never written by hand.

    outcome_tables.py llamacpp [--check] [--expect FILE] [--doc FILE]
    outcome_tables.py server   [--check] [--expect FILE] [--doc FILE]

llamacpp renders adapters/llamacpp/expectations.json (per fixture, variant and extra fixture:
outcome, the passed / failed / skipped counts quoted in "evidence", the gated reason text
"reason_contains", "evidence", the "meaning" note, and the lifecycle verdicts "checks") into
adapters/llamacpp/README.md; server renders adapters/llamacpp/server-expectations.json into
docs/llama-server.md. The table goes between the document's marker comments

    <!-- BEGIN llamacpp-outcomes (...) -->   ...   <!-- END llamacpp-outcomes -->
    <!-- BEGIN llama-server-outcomes (...) -->   ...   <!-- END llama-server-outcomes -->

(one pair per document; everything outside them is left byte for byte). Without --check the
document is rewritten when the table differs; with --check nothing is written and the exit is 1
when the committed table differs from the rendered one (the first differing lines are shown).
Reads only the JSON and the document: no llama.cpp, no build. gate.py --update-checks calls
write() after recording new verdicts, so the table follows in the same step.
Exit 0 (up to date / written), 1 (--check: differs), 2 (bad input: the file and field named).
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTER = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(ADAPTER))

LIFECYCLE = ("garbage_reset", "restore_after_garbage", "snapshot_restore", "snapshot_copy",
             "snapshot_chunk_boundary", "rollback", "rollback_trim", "prefix_reuse",
             "multi_sequence", "batch_invariance")  # the lifecycle checks gate.py gates (its LIFECYCLE)
VERDICTS = ("PASS", "FAIL", "SKIP", "ERROR")


class BadInput(Exception):
    """Input the renderer cannot use: the message names the file and the field."""


# what each kind renders: its default expectations file, document, marker name and command
KINDS = {
    "llamacpp": (os.path.join(ADAPTER, "expectations.json"), os.path.join(ADAPTER, "README.md"),
                 "llamacpp-outcomes", "ci/llamacpp table", "adapters/llamacpp/expectations.json"),
    "server": (os.path.join(ADAPTER, "server-expectations.json"), os.path.join(ROOT, "docs", "llama-server.md"),
               "llama-server-outcomes", "ci/llama-server table", "adapters/llamacpp/server-expectations.json"),
}


def cell(t: str) -> str:
    """One table cell: blanks squeezed, pipes escaped."""
    return re.sub(r"\s+", " ", t or "").strip().replace("|", "\\|")


def counts(evidence: str) -> str:
    """The passed / failed / skipped counts the evidence quotes first ("390 checks passed, 0
    failed, 46 skipped"; "8 of 356 checks fail"), "?" for a count it does not give, "—" none."""
    m = re.search(r"(\d+) (?:checks )?passed(?:, (\d+) failed)?(?:, (\d+) skipped)?", evidence or "")
    if m:
        return " / ".join(g if g is not None else "?" for g in m.groups())
    m = re.search(r"(\d+) of (\d+) checks fail", evidence or "")
    if m:
        return f"{m.group(1)} of {m.group(2)} failed"
    return "—"


def outcome_cell(o: str) -> str:
    return o if o == "pass" else f"**{o}**"


def need(e: dict, field: str, where: str) -> str:
    v = e.get(field)
    if not isinstance(v, str) or not v:
        raise BadInput(f"{where}: field \"{field}\" missing or not a string")
    return v


def entries(exp: dict, src: str):
    """(label, full label, where, entry) of every run in the file's order: fixtures, their
    variants (label "↳ `variant`", full label "`fixture` `variant`"), the extra fixtures."""
    for group, prefix in (("fixtures", ""), ("extra", "extra ")):
        g = exp.get(group, {})
        if not isinstance(g, dict):
            raise BadInput(f"{src}: \"{group}\" is not an object")
        for fx, e in g.items():
            if not isinstance(e, dict):
                raise BadInput(f"{src}: {group}.{fx} is not an object")
            yield f"{prefix}`{fx}`", f"{prefix}`{fx}`", f"{src}: {group}.{fx}", e
            for var, ve in (e.get("variants") or {}).items():
                if not isinstance(ve, dict):
                    raise BadInput(f"{src}: {group}.{fx}.variants.{var} is not an object")
                yield f"↳ `{var}`", f"{prefix}`{fx}` `{var}`", f"{src}: {group}.{fx}.variants.{var}", ve


def outcome_rows(exp: dict, src: str) -> list[str]:
    rows = ["| run | outcome | passed / failed / skipped | evidence (gated reason first) | what it means |",
            "|---|---|---|---|---|"]
    for label, _, where, e in entries(exp, src):
        ev = need(e, "evidence", where)
        rc_ = e.get("reason_contains")
        evc = (f"reason contains `{cell(rc_)}`; " if rc_ else "") + cell(ev)
        rows.append(f"| {label} | {outcome_cell(need(e, 'outcome', where))} | {counts(ev)} | {evc} | "
                    f"{cell(e.get('meaning', '')) or '—'} |")
    return rows


def lifecycle_rows(exp: dict, src: str) -> list[str]:
    rows = ["| run | " + " | ".join(f"`{k}`" for k in LIFECYCLE) + " |", "|---" * (len(LIFECYCLE) + 1) + "|"]
    for _, label, where, e in entries(exp, src):
        ch = e.get("checks")
        if ch is None or ch == {}:
            continue
        if not isinstance(ch, dict):
            raise BadInput(f"{where}.checks: not an object")
        for k, v in ch.items():
            if k not in LIFECYCLE or v not in VERDICTS:
                raise BadInput(f"{where}.checks.{k}: {v!r} (checks: {', '.join(LIFECYCLE)}; "
                               f"verdicts: {', '.join(VERDICTS)})")
        shown = {"PASS": "pass", "SKIP": "skip", "FAIL": "**FAIL**", "ERROR": "**ERROR**"}
        rows.append(f"| {label} | " + " | ".join(shown[ch[k]] if k in ch else "not run" for k in LIFECYCLE) + " |")
    return rows


def render_llamacpp(exp: dict, src: str) -> str:
    """The llama.cpp gate's table (ci/llamacpp table)."""
    out = [f"Runtime: {cell(need(exp, 'runtime', src))}. Defaults: {cell(need(exp, 'defaults', src))}. "
           "A variant (↳) adds its backend options to the fixture's run; `extra` fixtures are generated "
           "at check time (`tests/make_extra.py`). Counts are the ones the evidence quotes.", ""]
    out += outcome_rows(exp, src)
    out += ["", "Lifecycle verdicts per run (`checks`: each check's verdict over the run's rows; gated, "
            "written by `ci/llamacpp check --update-checks`). Runs that record none (they do not load or "
            "convert, or crash) are left out.", ""]
    out += lifecycle_rows(exp, src)
    return "\n".join(out)


def render_server(exp: dict, src: str) -> str:
    """The llama-server gate's table (ci/llama-server table)."""
    out = [f"Runtime: {cell(need(exp, 'runtime', src))}. Settings: {cell(need(exp, 'defaults', src))}. "
           f"Measured: {cell(need(exp, 'measured', src))}.", "",
           "| fixture | outcome | passed / failed / skipped | evidence (gated reason first) | what it means |",
           "|---|---|---|---|---|"]
    fx = exp.get("fixtures")
    if not isinstance(fx, dict):
        raise BadInput(f"{src}: \"fixtures\" missing or not an object")
    for name, e in fx.items():
        where = f"{src}: fixtures.{name}"
        if not isinstance(e, dict):
            raise BadInput(f"{where} is not an object")
        ev = e.get("evidence", "") if e.get("outcome") == "pending" else need(e, "evidence", where)
        rc_ = e.get("reason_contains")
        evc = (f"reason contains `{cell(rc_)}`; " if rc_ else "") + cell(ev)
        out.append(f"| `{name}` | {outcome_cell(need(e, 'outcome', where))} | {counts(ev)} | {evc or '—'} | "
                   f"{cell(e.get('meaning', '')) or '—'} |")
    return "\n".join(out)


RENDER = {"llamacpp": render_llamacpp, "server": render_server}


def load(path: str) -> dict:
    try:
        with open(path) as f:
            exp = json.load(f)
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: {e}") from e
    if not isinstance(exp, dict):
        raise BadInput(f"{path}: not a JSON object")
    return exp


def split_doc(text: str, name: str, doc: str) -> tuple[str, str, str, str]:
    """(before + BEGIN line, the current table, END line + after, the BEGIN line)."""
    begin = re.compile(r"^<!-- BEGIN " + re.escape(name) + r"\b.*-->[ \t]*$", re.M)
    end = re.compile(r"^<!-- END " + re.escape(name) + r" -->[ \t]*$", re.M)
    b, e = list(begin.finditer(text)), list(end.finditer(text))
    if len(b) != 1 or len(e) != 1 or e[0].start() < b[0].end():
        raise BadInput(f"{doc}: needs exactly one '<!-- BEGIN {name} ... -->' line followed by one "
                       f"'<!-- END {name} -->' line (found {len(b)} and {len(e)})")
    return text[:b[0].end()] + "\n", text[b[0].end():e[0].start()].strip("\n"), text[e[0].start():], b[0].group(0)


def write(kind: str, expect: str | None = None, doc: str | None = None, check: bool = False,
          out=None) -> int:
    """Render kind's table from expect into doc (check: compare only). Exit status (0, 1, 2)."""
    out = out or sys.stdout
    d_exp, d_doc, name, cmd, shown = KINDS[kind]
    expect, doc = expect or d_exp, doc or d_doc
    try:
        table = RENDER[kind](load(expect), os.path.relpath(expect, ROOT) if expect == d_exp else expect)
        try:
            text = open(doc, encoding="utf-8").read()
        except OSError as e:
            raise BadInput(f"{doc}: {e}") from e
        head, cur, tail, _ = split_doc(text, name, doc)
    except BadInput as e:
        print(f"outcome_tables: {e}", file=sys.stderr)
        return 2
    if cur == table:
        print(f"outcome_tables: {doc}: the {name} table is up to date with {expect}", file=out)
        return 0
    if check:
        diff = list(difflib.unified_diff(cur.splitlines(), table.splitlines(), "committed", "rendered", lineterm="", n=0))
        print(f"outcome_tables: {doc}: the {name} table differs from what {expect} renders "
              f"(run `{cmd}` and commit): {sum(1 for x in diff if x[:1] in '+-') - 2} lines", file=out)
        for line in diff[2:14]:
            print("  " + (line[:200] + "..." if len(line) > 200 else line), file=out)
        return 1
    with open(doc + ".tmp", "w", encoding="utf-8") as f:
        f.write(head + table + "\n" + tail)
    os.replace(doc + ".tmp", doc)
    print(f"outcome_tables: {doc}: the {name} table rewritten from {shown if expect == d_exp else expect}", file=out)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=sorted(KINDS))
    ap.add_argument("--check", action="store_true", help="compare only: exit 1 when the committed table differs")
    ap.add_argument("--expect", help="the expectations file (default: the gate's own)")
    ap.add_argument("--doc", help="the document holding the markers (default: the gate's own)")
    a = ap.parse_args()
    return write(a.kind, a.expect, a.doc, a.check)


if __name__ == "__main__":
    sys.exit(main())
