"""The documented offline-checking example, run verbatim, and golden.read on export-inputs JSON.

The code block under "## Offline checking" in docs/runtimes.md (where the README's details
live; the README links to it) is extracted and executed as it
stands in a temporary directory holding `inputs/` (qwen-conform export-inputs of the small
fixture); the ACTUAL it writes must pass `qwen-conform diff` with exit 0. The JSON reader must
give the same cases as the HDF5 reader on every fixture, without importing h5py.
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from qca_testutil import FIXTURES, FIXTURE_NAMES, ROOT
from qwen_conform_adapter import golden

QC = os.environ.get("QC_BIN", os.path.join(ROOT, "build", "qwen-conform"))
SMALL = os.path.join(FIXTURES, "tiny-f32-tied-flat", "golden.h5")


def _need_qc():
    if not os.access(QC, os.X_OK):
        pytest.skip("no qwen-conform binary at %s (build it, or set QC_BIN)" % QC)


def _export(src, out):
    p = subprocess.run([QC, "export-inputs", src, "--out", out], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    assert p.returncode == 0, p.stderr
    return out


DOC = os.path.join(ROOT, "docs", "runtimes.md")


def readme_block():
    """The python code block of the "Offline checking" section of docs/runtimes.md."""
    text = open(DOC, encoding="utf-8").read()
    sec = text.split("## Offline checking", 1)
    assert len(sec) == 2, "docs/runtimes.md has no '## Offline checking' section"
    body = re.split(r"\n#{2,3} ", sec[1], maxsplit=1)[0]
    blocks = re.findall(r"```python\n(.*?)```", body, re.S)
    assert len(blocks) == 1, "expected one python block in the section, found %d" % len(blocks)
    return blocks[0]


def test_readme_example_runs_and_diff_passes(tmp_path, monkeypatch):
    _need_qc()
    _export(SMALL, str(tmp_path / "inputs"))
    code = readme_block()
    assert len([l for l in code.splitlines() if l.strip()]) <= 14   # "ten lines" and imports
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/runtimes.md (Offline checking)", "exec"), {"__name__": "readme"})
    assert os.path.isfile(tmp_path / "actual.h5")
    assert not [n for n in os.listdir(tmp_path) if ".tmp." in n]
    p = subprocess.run([QC, "diff", SMALL, str(tmp_path / "actual.h5"), "--quiet"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert " 0 failed" in p.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    _need_qc()
    return _export(FIXTURES, str(tmp_path_factory.mktemp("exp") / "all"))


def test_json_inputs_equal_the_goldens(exported):
    gs = golden.read_all(exported)
    assert [g.attrs["golden"] for g in gs] == ["%s/golden.h5" % n for n in FIXTURE_NAMES]
    for g in gs:
        h = golden.read(os.path.join(FIXTURES, g.attrs["golden"]))
        assert [c.name for c in g.cases] == [c.name for c in h.cases]
        assert os.path.samefile(g.model_dir, h.model_dir) and os.path.samefile(g.path, h.path)
        for k in ("config_json", "config_sha256", "weights_sha256", "model_path"):
            assert g.attrs[k] == h.attrs[k], k
        for a, b in zip(g.cases, h.cases):
            assert a.start_pos == b.start_pos and a.max_seq_len == b.max_seq_len
            for f in ("history_tokens", "tokens", "decode_tokens"):
                x, y = getattr(a, f), getattr(b, f)
                assert x.dtype == np.int32 and np.array_equal(x, y), (g.path, a.name, f)
            msl = a.max_seq_len or 128
            assert sum(a.prefill["prompt_chunks"]) == len(a.tokens)
            assert max(a.prefill["prompt_chunks"]) <= msl
            assert sum(a.prefill["history_chunks"]) == a.start_pos


def test_json_reader_needs_no_h5py(exported):
    """golden.read on the JSON works in a Python where h5py cannot be imported."""
    code = ("import sys; sys.modules['h5py'] = None\n"
            "sys.path.insert(0, %r)\n"
            "from qwen_conform_adapter import golden\n"
            "g = golden.read(%r)\n"
            "print(len(g.cases), g.cases[0].tokens.sum())\n"
            % (os.path.join(ROOT, "adapters", "python"),
               os.path.join(exported, "tiny-f32-tied-flat", "golden")))
    p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    assert p.returncode == 0, p.stderr
    h = golden.read(SMALL)
    assert p.stdout.split() == [str(len(h.cases)), str(int(h.cases[0].tokens.sum()))]


def test_read_refuses_a_multi_golden_export_and_bad_json(exported, tmp_path):
    with pytest.raises(ValueError, match="use golden.read_all"):
        golden.read(exported)
    bad = tmp_path / "index.json"
    bad.write_text('{"format": "qwen-conform-inputs", "format_version": 2}')
    with pytest.raises(ValueError, match="format_version 2 is not 1"):
        golden.read(str(tmp_path))
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read export-inputs JSON"):
        golden.read(str(bad))


def test_one_case_file_alone(exported):
    f = os.path.join(exported, "tiny-f32-tied-flat", "golden", "cases", "cont.json")
    g = golden.read(f)
    assert [c.name for c in g.cases] == ["cont"] and g.cases[0].start_pos == 48
    assert g.shape.vocab_size == 256


def test_writer_from_json_refuses_the_golden_itself(exported):
    """A Golden read from the JSON still knows its .h5 and model files: never overwritten."""
    g = golden.read(os.path.join(exported, "tiny-f32-tied-flat", "golden"))
    for target in (SMALL, os.path.join(FIXTURES, "tiny-f32-tied-flat", "model", "config.json")):
        with pytest.raises(ValueError, match="refusing to overwrite"):
            golden.ActualWriter(target, g)
