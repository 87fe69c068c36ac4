"""qwen_conform_adapter.golden: reading golden inputs and writing ACTUAL files that
golden/validate.py accepts and `qwen-conform diff` compares."""
import os
import subprocess

import h5py
import numpy as np
import pytest

from qca_testutil import FIXTURES, ROOT   # first: puts golden/ and the adapters on sys.path
import validate as golden_validate       # golden/validate.py
from qc_golden_adapter import GoldenF32
from qwen_conform_adapter import golden

SMALL = os.path.join(FIXTURES, "tiny-f32-tied-flat", "golden.h5")
QC = os.environ.get("QC_BIN", os.path.join(ROOT, "build", "qwen-conform"))


def test_read_golden_inputs():
    g = golden.read(SMALL)
    names = [c.name for c in g.cases]
    assert names == sorted(names) and "cont" in names and "len001" in names
    cont = next(c for c in g.cases if c.name == "cont")
    assert cont.start_pos == 48 and cont.history_tokens.shape == (48,)
    assert cont.tokens.dtype == np.int32 and cont.tokens.shape == (70,)
    assert cont.decode_tokens.shape == (8,) and cont.max_seq_len is None
    assert next(c for c in g.cases if c.name == "longseq").max_seq_len == 16
    assert (g.shape.vocab_size, g.shape.hidden_size, g.shape.n_layers) == (256, 64, 4)
    assert os.path.samefile(g.model_dir, os.path.join(FIXTURES, "tiny-f32-tied-flat", "model"))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """An ACTUAL file of every case of the small fixture, from the float32 golden adapter."""
    out = str(tmp_path_factory.mktemp("actual") / "actual.h5")
    golden.record(GoldenF32(), SMALL, out, generator="qcgolden float32 (test)")
    return out


def test_record_writes_a_valid_file(recorded):
    assert golden_validate.validate(recorded) == []       # the model hashes resolve too
    with h5py.File(recorded, "r") as f, h5py.File(SMALL, "r") as g:
        assert f.attrs["schema_version"] == 1 and f.attrs["schema_version"].dtype == np.int32
        assert f.attrs["compute_dtype"] == "float32"
        assert f.attrs["generator"] == "qcgolden float32 (test)"
        for k in ("config_json", "config_sha256", "weights_sha256"):
            assert f.attrs[k] == g.attrs[k]
        assert not os.path.isabs(f.attrs["model_path"])
        assert sorted(f["cases"]) == sorted(g["cases"])
        for name in g["cases"]:
            a, b = f["cases"][name], g["cases"][name]
            assert a.attrs["start_pos"] == b.attrs["start_pos"]
            for path in ("tokens", "prefill/logits", "prefill/hidden", "decode/tokens",
                         "decode/logits", "decode/margins", "decode/state/layer_03/k_cache",
                         "prefill/state/layer_00/conv_state"):
                assert a[path].shape == b[path].shape and a[path].dtype == b[path].dtype, path
            np.testing.assert_array_equal(a["decode/tokens"][()], b["decode/tokens"][()])
            np.testing.assert_allclose(a["decode/margins"][()], b["decode/margins"][()], atol=1e-3)


def test_recorded_round_trips(recorded):
    g = golden.read(recorded)
    src = golden.read(SMALL)
    for a, b in zip(g.cases, src.cases):
        assert a.name == b.name and a.start_pos == b.start_pos
        assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.history_tokens, b.history_tokens)


def test_minimal_actual_ten_lines(tmp_path):
    """The README's common case: logits only (prefill + teacher-forced decode)."""
    rt = GoldenF32()
    g = golden.read(SMALL)
    rt.open(g.model_dir, {})
    out = str(tmp_path / "mine.h5")
    with golden.ActualWriter(out, g, generator="my-runtime 1.2") as w:
        for c in g.cases[:3]:
            rt.reset()
            if c.start_pos:
                rt.forward(c.history_tokens, 0)
            pre = rt.forward(c.tokens, c.start_pos)
            dec = [rt.forward(c.decode_tokens[s:s + 1], c.start_pos + len(c.tokens) + s)[-1]
                   for s in range(len(c.decode_tokens))]
            w.add(c, prefill_logits=pre, decode_logits=np.stack(dec))
    with h5py.File(out, "r") as f:
        assert len(f["cases"]) == 3
        c0 = f["cases"][g.cases[0].name]
        assert "prefill/hidden" not in c0 and "prefill/state" not in c0
        assert c0["prefill/logits"].dtype == np.float32 and c0["tokens"].dtype == np.int32
    assert not [p for p in os.listdir(tmp_path) if ".tmp." in p]


def test_writer_rejects_wrong_shapes_and_leaves_nothing(tmp_path):
    g = golden.read(SMALL)
    c = g.cases[0]
    out = str(tmp_path / "bad.h5")
    with pytest.raises(ValueError, match="prefill/logits: shape"):
        with golden.ActualWriter(out, g) as w:
            w.add(c, prefill_logits=np.zeros((len(c.tokens) + 1, 256)))
    with pytest.raises(ValueError, match="state lacks"):
        with golden.ActualWriter(out, g) as w:
            w.add(c, prefill_logits=np.zeros((len(c.tokens), 256)), prefill_state={})
    assert os.listdir(tmp_path) == []


def test_nested_state_dict_accepted(tmp_path):
    g = golden.read(SMALL)
    rt = GoldenF32()
    rt.open(g.model_dir, {})
    c = g.cases[0]
    r = golden.run_case(rt, c)
    nested = {}
    for k, v in r["prefill_state"].items():
        layer, name = k.split("/")
        nested.setdefault(layer, {})[name] = v
    out = str(tmp_path / "n.h5")
    with golden.ActualWriter(out, g) as w:
        w.add(c, prefill_logits=r["prefill_logits"], prefill_state=nested)
    with h5py.File(out, "r") as f:
        assert f["cases/%s/prefill/state/layer_01/recurrent_state" % c.name].shape == (2, 16, 16)


def test_qwen_conform_diff_accepts_it(recorded, tmp_path):
    if not os.access(QC, os.X_OK):
        pytest.skip("no qwen-conform binary at %s (build it, or set QC_BIN)" % QC)
    p = subprocess.run([QC, "diff", SMALL, recorded, "--quiet", "--label", "golden-f32"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert " 0 failed" in p.stdout.strip().splitlines()[-1]


def test_writer_never_replaces_an_input(tmp_path):
    """An ACTUAL aimed at its golden or the model's files (also through a symlink) is refused
    before anything is written; the inputs keep their bytes."""
    import hashlib
    import shutil
    fx = tmp_path / "fx"
    shutil.copytree(os.path.dirname(SMALL), fx)
    gpath = str(fx / "golden.h5")
    before = {p: hashlib.sha256(open(p, "rb").read()).hexdigest()
              for p in [gpath, str(fx / "model" / "config.json")]}
    g = golden.read(gpath)
    os.symlink(gpath, str(tmp_path / "link.h5"))
    for target in [gpath, str(fx / "model" / "config.json"), str(tmp_path / "link.h5")]:
        with pytest.raises(ValueError, match="is the same file as .* refusing to overwrite"):
            golden.ActualWriter(target, g)
    after = {p: hashlib.sha256(open(p, "rb").read()).hexdigest() for p in before}
    assert before == after
    assert not [n for n in os.listdir(fx) if ".tmp." in n]
