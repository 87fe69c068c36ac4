"""golden/validate.py accepts every committed golden and rejects broken ones with a message
naming the file and the dataset."""
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from conftest import FIXTURES, GOLDEN
import validate

NAMES = sorted(d for d in os.listdir(FIXTURES) if os.path.exists(os.path.join(FIXTURES, d, "golden.h5")))


@pytest.mark.parametrize("name", NAMES)
def test_committed_goldens_are_valid(name):
    assert validate.validate(os.path.join(FIXTURES, name, "golden.h5")) == []


@pytest.fixture
def broken(tmp_path):
    """A writable copy of one fixture (golden + model); returns the golden path."""
    d = str(tmp_path / "fx")
    shutil.copytree(os.path.join(FIXTURES, "tiny-f32-tied-flat"), d)
    return os.path.join(d, "golden.h5")


def one_error(path, **kw):
    errs = validate.validate(path, **kw)
    assert errs, "expected the golden to be rejected"
    assert all(e.startswith(path + ": ") for e in errs)
    return errs


def test_missing_dataset(broken):
    with h5py.File(broken, "r+") as f:
        del f["cases/len063/prefill/hidden"]
    assert one_error(broken) == ["%s: /cases/len063/prefill/hidden: missing dataset" % broken]


def test_wrong_shape(broken):
    with h5py.File(broken, "r+") as f:
        del f["cases/len005/prefill/logits"]
        f["cases/len005/prefill/logits"] = np.zeros((5, 255), np.float32)
    errs = one_error(broken)
    assert "/cases/len005/prefill/logits: shape (5, 255) != expected (5, 256)" in errs[0]


def test_wrong_state_shape_and_missing_layer(broken):
    with h5py.File(broken, "r+") as f:
        del f["cases/len002/decode/state/layer_03/k_cache"]
        f["cases/len002/decode/state/layer_03/k_cache"] = np.zeros((2, 9, 16), np.float32)
        del f["cases/len001/prefill/state/layer_01"]
    errs = " | ".join(one_error(broken))
    assert "/cases/len002/decode/state/layer_03/k_cache: shape (2, 9, 16) != expected (2, 10, 16)" in errs
    assert "/cases/len001/prefill/state/layer_01: missing group" in errs


def test_nan(broken):
    with h5py.File(broken, "r+") as f:
        f["cases/len064/decode/state/layer_00/recurrent_state"][1, 2, 3] = np.nan
    errs = one_error(broken)
    assert "/cases/len064/decode/state/layer_00/recurrent_state: non-finite value nan at index (1, 2, 3)" in errs[0]


def test_wrong_schema_version(broken):
    with h5py.File(broken, "r+") as f:
        f.attrs["schema_version"] = np.int32(2)
    assert "/ (attr schema_version): 2 is not 1" in one_error(broken)[0]


def test_wrong_dtype_and_missing_attribute(broken):
    with h5py.File(broken, "r+") as f:
        t = f["cases/len005/tokens"][()]
        del f["cases/len005/tokens"]
        f["cases/len005/tokens"] = t.astype(np.int64)
        del f["cases/cont"].attrs["start_pos"]
    errs = " | ".join(one_error(broken))
    assert "/cases/len005/tokens: dtype int64 != int32" in errs
    assert "/cases/cont (attr start_pos): missing" in errs


def test_greedy_and_history_consistency(broken):
    with h5py.File(broken, "r+") as f:
        f["cases/len065/decode/tokens"][3] = (f["cases/len065/decode/tokens"][3] + 1) % 256
        del f["cases/cont/history_tokens"]
    errs = " | ".join(one_error(broken))
    assert "/cases/len065/decode/tokens: tokens[3]" in errs and "greedy decode" in errs
    assert "/cases/cont/history_tokens: missing dataset" in errs


def test_provenance_hashes(broken):
    with h5py.File(broken, "r+") as f:
        f.attrs["config_json"] = f.attrs["config_json"] + " "
    assert "config_sha256): does not match the SHA-256 of attr config_json" in one_error(broken)[0]


def test_weights_hash_checked_against_model(broken):
    w = os.path.join(os.path.dirname(broken), "model", "model.safetensors")
    data = bytearray(open(w, "rb").read())
    data[-1] ^= 1
    open(w, "wb").write(bytes(data))
    assert "weights_sha256): does not match the weight files" in one_error(broken)[0]
    assert validate.validate(broken, check_model=False) == []


def test_cli_exit_codes(broken, tmp_path):
    cli = [sys.executable, os.path.join(GOLDEN, "validate.py")]
    ok = subprocess.run(cli + [FIXTURES], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "%d file(s) checked, 0 invalid" % len(NAMES) in ok.stdout
    with h5py.File(broken, "r+") as f:
        del f["cases/len001/tokens"]
    bad = subprocess.run(cli + [broken], capture_output=True, text=True)
    assert bad.returncode == 1 and "INVALID %s: /cases/len001/tokens: missing dataset" % broken in bad.stdout
    assert subprocess.run(cli, capture_output=True).returncode == 2
    assert subprocess.run(cli + [str(tmp_path / "empty")], capture_output=True).returncode in (1, 2)
