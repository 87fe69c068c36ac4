"""Regeneration reproduces the committed fixtures (the MoE ones included): model files bit for
bit, goldens within 1e-12, and every greedy choice in them has a margin >= 0.05 (every router
decision of the MoE goldens one >= router_margin_threshold)."""
import io
import os
import shutil

import h5py
import numpy as np
import pytest

from conftest import FIXTURES
from qcgolden import fixtures, goldens, regen


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("regen"))
    regen.build_all(root)
    return root


@pytest.mark.parametrize("name", [s.name for s in fixtures.FIXTURES])
def test_models_bit_identical(fresh, name):
    a, b = os.path.join(FIXTURES, name, "model"), os.path.join(fresh, name, "model")
    assert sorted(os.listdir(a)) == sorted(os.listdir(b))
    for n in os.listdir(a):
        assert open(os.path.join(a, n), "rb").read() == open(os.path.join(b, n), "rb").read(), n


@pytest.mark.parametrize("name", [s.name for s in fixtures.FIXTURES])
def test_goldens_within_1e12(fresh, name):
    rows = regen.diff_golden(os.path.join(FIXTURES, name, "golden.h5"),
                             os.path.join(fresh, name, "golden.h5"))
    assert len(rows) > 100
    worst = 0.0
    for key, status, changed in rows:
        if key == "/ (attr torch_version)":
            continue  # informational: another torch build may regenerate the same numbers
        if status.startswith("max abs diff"):
            worst = max(worst, float(status.split()[-1]))
        else:
            assert not changed, (key, status)
    assert worst <= 1e-12


def test_readme_is_generated(fresh):
    assert open(os.path.join(FIXTURES, "README.md")).read() == \
        open(os.path.join(fresh, "README.md")).read()


@pytest.mark.parametrize("name", [s.name for s in fixtures.FIXTURES])
def test_cases_and_margins(name):
    cases = fixtures.case_list(fixtures.by_name(name))
    with h5py.File(os.path.join(FIXTURES, name, "golden.h5"), "r") as f:
        assert sorted(f["cases"]) == sorted(c.name for c in cases)
        for c in cases:
            g = f["cases"][c.name]
            assert g["tokens"].shape == (c.n_tokens,)
            assert g["decode/tokens"].shape == (8,)
            assert g["decode/margins"][()].min() >= goldens.MIN_MARGIN
            if c.history_prompt:
                assert g.attrs["start_pos"] == c.history_prompt + c.history_decode > 0
                assert g["history_tokens"].shape == (g.attrs["start_pos"],)
                if c.history_decode:
                    assert g["history_margins"].shape == (c.history_decode,)
                    assert g["history_margins"][()].min() >= goldens.MIN_MARGIN
                else:
                    assert "history_margins" not in g
            else:
                assert g.attrs["start_pos"] == 0 and "history_tokens" not in g
            if c.max_seq_len:
                assert g.attrs["max_seq_len"] == c.max_seq_len < c.n_tokens
            else:
                assert "max_seq_len" not in g.attrs
            if name.startswith("tiny-moe-"):  # every router decision clear of a near-tie
                thr = f.attrs["router_margin_threshold"]
                assert thr == goldens.ROUTER_MARGIN_THRESHOLD
                for ph in ("prefill", "decode"):
                    assert g[ph + "/router/margins"][()].min() >= thr


def test_compare_reports_a_changed_dataset(fresh, tmp_path):
    committed = str(tmp_path / "fixtures")
    shutil.copytree(FIXTURES, committed)
    name = fixtures.FIXTURES[0].name
    with h5py.File(os.path.join(committed, name, "golden.h5"), "r+") as f:
        d = f["cases/len005/prefill/logits"]
        d[0, 3] = d[0, 3] + np.float32(0.5)
    with open(os.path.join(committed, name, "model", "config.json"), "ab") as f:
        f.write(b" ")
    out = io.StringIO()
    assert regen.compare(committed, fresh, out=out) is False
    text = out.getvalue()
    assert "/cases/len005/prefill/logits" in text and "max abs diff 5.000e-01" in text
    assert "model/config.json" in text and "DIFFERS" in text
    out = io.StringIO()
    assert regen.compare(FIXTURES, fresh, out=out) is True
