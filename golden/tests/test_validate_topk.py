"""golden/validate.py --actual on top-k ACTUAL files (golden/SCHEMA.md "Top-k ACTUAL"): the
golden's own distributions as prefill/topk and decode/topk are accepted; every malformed list is
rejected with a message naming the file and the dataset, as `qwen-conform diff` refuses them."""
import os

import h5py
import numpy as np
import pytest

from conftest import FIXTURES
import validate

GOLDEN_H5 = os.path.join(FIXTURES, "tiny-f32-tied-flat", "golden.h5")
K = 5


def _topk(logits, k):
    z = logits.astype(np.float64)
    lp = z - z.max(axis=1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(axis=1, keepdims=True))
    ids = np.argsort(-lp, axis=1, kind="stable")[:, :k]
    return ids.astype(np.int32), np.take_along_axis(lp, ids, axis=1).astype(np.float32)


def _write(path, logits=False, decode=True):
    """An ACTUAL of the golden's inputs with its top-k lists (and its logits when asked)."""
    with h5py.File(GOLDEN_H5, "r") as g, h5py.File(path, "w") as f:
        f.attrs["schema_version"] = np.int32(1)
        for name, gc in g["cases"].items():
            c = f.create_group("cases/" + name)
            c.attrs["start_pos"] = gc.attrs["start_pos"]
            for rel in ("tokens", "history_tokens", "decode/tokens"):
                if rel in gc:
                    c[rel] = gc[rel][()]
            for ph in ("prefill", "decode") if decode else ("prefill",):
                z = gc[ph + "/logits"][()]
                ids, lps = _topk(z, K)
                c[ph + "/topk/ids"] = ids
                c[ph + "/topk/logprobs"] = lps
                if logits:
                    c[ph + "/logits"] = z
    return path


@pytest.fixture
def actual(tmp_path):
    return _write(str(tmp_path / "actual.h5"))


def _errors(path):
    errs, notes = validate.validate_actual(GOLDEN_H5, path)
    return errs, notes


def test_topk_actual_is_accepted(actual):
    errs, notes = _errors(actual)
    assert errs == []
    assert not any("prefill/logits" in n for n in notes)


def test_prefill_only_topk_is_accepted_with_a_note(tmp_path):
    p = _write(str(tmp_path / "a.h5"), decode=False)
    errs, notes = _errors(p)
    assert errs == []
    assert any("decode/topk: absent" in n for n in notes)


def test_logits_beside_topk_are_accepted(tmp_path):
    assert _errors(_write(str(tmp_path / "a.h5"), logits=True))[0] == []


def _one(actual, case_rel, fn):
    with h5py.File(actual, "r+") as f:
        fn(f["cases/len005"], case_rel)
    errs, _ = _errors(actual)
    assert len(errs) == 1, errs
    assert errs[0].startswith(actual + ": /cases/len005/" + case_rel), errs
    return errs[0]


def _set(idx, v):
    def fn(c, rel):
        a = c[rel][()]
        a[idx] = v
        c[rel][...] = a
    return fn


@pytest.mark.parametrize("rel, idx, v, what", [
    ("prefill/topk/ids", (3, 1), 256, "not a token id in [0, 256)"),
    ("prefill/topk/ids", (0, 4), -1, "not a token id"),
    ("decode/topk/logprobs", (2, 0), np.nan, "not a finite log-probability"),
    ("decode/topk/logprobs", (1, 0), np.inf, "not a finite log-probability"),
    ("prefill/topk/logprobs", (0, 0), 0.5, "not a finite log-probability <= 0"),
])
def test_bad_values(actual, rel, idx, v, what):
    assert what in _one(actual, rel, _set(idx, v))


def test_repeated_id_and_ascending_row(actual, tmp_path):
    def dup(c, rel):
        a = c[rel][()]
        a[1, 2] = a[1, 0]
        c[rel][...] = a
    assert "row 1: a token listed twice" in _one(actual, "prefill/topk/ids", dup)
    other = _write(str(tmp_path / "b.h5"))

    def asc(c, rel):
        a = c[rel][()]
        a[2] = a[2, ::-1]
        c[rel][...] = a
    assert "row 2: not in descending order" in _one(other, "prefill/topk/logprobs", asc)


def _replace(rel_new):
    def fn(c, rel):
        a = c[rel][()]
        del c[rel]
        c[rel] = rel_new(a)
    return fn


@pytest.mark.parametrize("rel, make, what", [
    ("prefill/topk/ids", lambda a: a[:-1], "is not [5, k]"),
    ("prefill/topk/ids", lambda a: a[:, :0], "is not [5, k]"),
    ("prefill/topk/logprobs", lambda a: a[:, :-1], "is not the ids'"),
    ("prefill/topk/ids", lambda a: a.astype(np.float32), "not an integer dataset"),
    ("decode/topk/ids", lambda a: a[:, :-1], "k = 4, the case's prefill/topk has k = 5"),
])
def test_bad_shapes_and_types(actual, rel, make, what):
    assert what in _one(actual, rel, _replace(make))


def test_a_list_without_its_logprobs(actual):
    def drop(c, rel):
        del c[rel]
    assert "missing dataset" in _one(actual, "decode/topk/logprobs", drop)


def test_no_logits_and_no_topk(actual):
    def drop(c, rel):
        del c["prefill/topk"]
    err = _one(actual, "prefill/logits", drop)
    assert "or prefill/topk" in err


def test_decode_topk_without_prefill_topk(tmp_path):
    p = _write(str(tmp_path / "a.h5"), logits=True)
    with h5py.File(p, "r+") as f:
        del f["cases/len005/prefill/topk"]
    errs, _ = _errors(p)
    assert len(errs) == 1 and "len005/decode/topk" in errs[0] and "without" in errs[0], errs


def test_other_tensors_of_a_topk_case_are_noted(actual):
    with h5py.File(actual, "r+") as f:
        f["cases/len005/decode/logits"] = np.zeros((8, 256), np.float32)
    errs, notes = _errors(actual)
    assert errs == []
    assert any("len005/decode/logits: not compared in a top-k case" in n for n in notes), notes
