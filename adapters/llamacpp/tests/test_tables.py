"""test_tables.py -- the llama.cpp and llama-server outcome tables are the gates' own rendering of
their recorded expectations (tests/outcome_tables.py), checked without llama.cpp:

  * the committed tables (adapters/llamacpp/README.md, docs/llama-server.md) equal what
    `ci/llamacpp table --check` / `ci/llama-server table --check` render, and hold the recorded
    numbers (tiny-f32-tied-flat 390 / 0 / 46, the rollback_trim FAIL of the lifecycle variant);
  * --check can fail: an outcome, a lifecycle verdict or a server count altered in a temp copy
    makes it exit 1 naming the document; rendering the copy then makes it exit 0 again;
  * bad input is exit 2 naming the file and field (no markers, an unknown verdict);
  * gate.py --update-checks rewrites the table in the same step as the verdicts.

Run by tests/cli/test_llamacpp_tables.sh (CTest cli_test_llamacpp_tables) and directly with
`/usr/bin/python3 -m pytest -q adapters/llamacpp/tests/test_tables.py`.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTER = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(ADAPTER))
TABLES = os.path.join(HERE, "outcome_tables.py")
EXP = os.path.join(ADAPTER, "expectations.json")
SEXP = os.path.join(ADAPTER, "server-expectations.json")
README = os.path.join(ADAPTER, "README.md")
SDOC = os.path.join(ROOT, "docs", "llama-server.md")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60)


def tables(kind: str, *args: str) -> subprocess.CompletedProcess:
    return run(sys.executable, TABLES, kind, *args)


def copy(tmp, src: str, name: str) -> str:
    dst = os.path.join(str(tmp), name)
    shutil.copyfile(src, dst)
    return dst


def edit_json(path: str, fn) -> None:
    with open(path) as f:
        exp = json.load(f)
    fn(exp)
    with open(path, "w") as f:
        f.write(json.dumps(exp, indent=2, ensure_ascii=False) + "\n")


def block(path: str, name: str) -> str:
    text = open(path, encoding="utf-8").read()
    return text[text.index(f"<!-- BEGIN {name}"):text.index(f"<!-- END {name} -->")]


def test_committed_tables_are_current():
    for cmd in (("ci/llamacpp", "table", "--check"), ("ci/llama-server", "table", "--check")):
        r = run(os.path.join(ROOT, cmd[0]), *cmd[1:])
        assert r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}{r.stderr}"
        assert "up to date" in r.stdout


def test_tables_hold_the_recorded_numbers():
    t = block(README, "llamacpp-outcomes")
    assert "| `tiny-f32-tied-flat` | pass | 390 / 0 / 46 |" in t
    assert "| ↳ `flash_attn=1` | **fail** | 8 of 356 failed | reason contains `prefill.hidden`;" in t
    assert ("| `tiny-f32-tied-flat` `seqs=3,rs_seq=4,fill=0` | skip | skip | pass | pass | pass | pass "
            "| **FAIL** | pass | pass | pass |") in t
    s = block(SDOC, "llama-server-outcomes")
    assert "| `tiny-long-decode` | pass | 7 / 0 / 2 |" in s
    assert "| `tiny-bf16-gva3` | pass | 109 / 0 / 0 |" in s
    # every run of expectations.json has its row, and its meaning note when it has one
    exp = json.load(open(EXP))
    for fx, e in exp["fixtures"].items():
        assert f"| `{fx}` | " in t, fx
        for note in [e.get("meaning")] + [v.get("meaning") for v in e.get("variants", {}).values()]:
            if note:
                assert " ".join(note.split()).replace("|", "\\|") in t, note[:60]


def test_check_fails_on_a_changed_outcome(tmp_path):
    exp, doc = copy(tmp_path, EXP, "expectations.json"), copy(tmp_path, README, "README.md")
    assert tables("llamacpp", "--check", "--expect", exp, "--doc", doc).returncode == 0
    edit_json(exp, lambda x: x["fixtures"]["tiny-f32-tied-flat"].update(outcome="fail"))
    r = tables("llamacpp", "--check", "--expect", exp, "--doc", doc)
    assert r.returncode == 1, r.stdout + r.stderr
    assert doc in r.stdout and "differs" in r.stdout
    assert "+| `tiny-f32-tied-flat` | **fail** | 390 / 0 / 46 |" in r.stdout
    before = open(doc).read()
    assert before == open(README).read()  # --check writes nothing
    r = tables("llamacpp", "--expect", exp, "--doc", doc)
    assert r.returncode == 0 and "rewritten" in r.stdout
    assert tables("llamacpp", "--check", "--expect", exp, "--doc", doc).returncode == 0
    after = open(doc).read()
    assert "| `tiny-f32-tied-flat` | **fail** | 390 / 0 / 46 |" in after
    # only the block between the markers changed
    i = before.index("<!-- BEGIN llamacpp-outcomes")
    j = before.index("<!-- END llamacpp-outcomes -->")
    assert after[:i] == before[:i] and after.endswith(before[j:])


def test_check_fails_on_a_changed_verdict_and_server_count(tmp_path):
    exp, doc = copy(tmp_path, EXP, "expectations.json"), copy(tmp_path, README, "README.md")
    edit_json(exp, lambda x: x["extra"]["tiny-f32-gva-tiled"]["checks"].update(rollback="FAIL"))
    r = tables("llamacpp", "--check", "--expect", exp, "--doc", doc)
    assert r.returncode == 1 and "extra `tiny-f32-gva-tiled`" in r.stdout, r.stdout + r.stderr
    sexp, sdoc = copy(tmp_path, SEXP, "server-expectations.json"), copy(tmp_path, SDOC, "llama-server.md")
    assert tables("server", "--check", "--expect", sexp, "--doc", sdoc).returncode == 0
    edit_json(sexp, lambda x: x["fixtures"]["tiny-long-decode"].update(
        evidence=x["fixtures"]["tiny-long-decode"]["evidence"].replace("2 skipped", "3 skipped")))
    r = tables("server", "--check", "--expect", sexp, "--doc", sdoc)
    assert r.returncode == 1 and "+| `tiny-long-decode` | pass | 7 / 0 / 3 |" in r.stdout, r.stdout


def test_bad_input_is_exit_2_naming_it(tmp_path):
    doc = os.path.join(str(tmp_path), "nomarkers.md")
    open(doc, "w").write("# no markers\n")
    r = tables("llamacpp", "--check", "--doc", doc)
    assert r.returncode == 2 and doc in r.stderr and "llamacpp-outcomes" in r.stderr
    exp = copy(tmp_path, EXP, "expectations.json")
    edit_json(exp, lambda x: x["fixtures"]["tiny-hazard-decay"]["checks"].update(rollback="MAYBE"))
    r = tables("llamacpp", "--check", "--expect", exp, "--doc", README)
    assert r.returncode == 2 and "fixtures.tiny-hazard-decay.checks.rollback" in r.stderr, r.stderr
    edit_json(exp, lambda x: x["fixtures"]["tiny-hazard-decay"].pop("outcome"))
    r = tables("llamacpp", "--check", "--expect", exp, "--doc", README)
    assert r.returncode == 2 and "fixtures.tiny-hazard-decay" in r.stderr and '"outcome"' in r.stderr


def test_update_checks_rewrites_the_table(tmp_path):
    """gate.py --update-checks with one measured report (rollback_trim FAIL in kv=f16): the
    verdict goes into the JSON and the README table in the same run."""
    exp, doc = copy(tmp_path, EXP, "expectations.json"), copy(tmp_path, README, "README.md")
    rdir = tmp_path / "reports"
    rdir.mkdir()
    run_ = "tiny-f32-tied-flat@kv=f16"
    rows = [{"case": "len005", "mode": "dynamic", "check": k, "verdict": "PASS", "message": ""}
            for k in ("garbage_reset", "snapshot_restore")]
    rows.append({"case": "len005", "mode": "dynamic", "check": "rollback_trim", "verdict": "FAIL", "message": "x"})
    (rdir / f"{run_}.json").write_text(json.dumps({"checks": rows}))
    (rdir / f"{run_}.rc").write_text("1\n")
    r = run(sys.executable, os.path.join(HERE, "gate.py"), "--expect", exp, "--reports", str(rdir),
            "--update-checks")
    assert r.returncode == 1, r.stdout + r.stderr  # every other run has no report: CHANGED
    assert "table rewritten" in r.stdout, r.stdout
    assert json.load(open(exp))["fixtures"]["tiny-f32-tied-flat"]["variants"]["kv=f16"]["checks"] == {
        "garbage_reset": "PASS", "snapshot_restore": "PASS", "rollback_trim": "FAIL"}
    t = block(doc, "llamacpp-outcomes")
    assert ("| `tiny-f32-tied-flat` `kv=f16` | pass | not run | pass | not run | not run | not run "
            "| **FAIL** | not run | not run | not run |") in t
    assert tables("llamacpp", "--check", "--expect", exp, "--doc", doc).returncode == 0
