"""Q8_0 weights (qcgolden/q8_0.py): the quantizer, the I8 + F16-scale checkpoint convention,
the loader's dequantization and the committed fixtures/tiny-q8_0."""
import os
import shutil

import numpy as np
import pytest

from conftest import FIXTURES
from qcgolden import checkpoint, fixtures, init, q8_0
from qcgolden import safetensors as st


def _weights(seed=3, shape=(7, 96)):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 0.2, shape)
    x[1, 32:64] = 0.0                      # an all-zero block: d = 0, q = 0
    x[2, :32] *= 1e-2                      # a small block
    x[3, 5] = 3.0                          # an outlier dominating its block
    return x


def test_quantizer_shapes_and_range():
    x = _weights()
    q, d = q8_0.quantize(x)
    assert q.dtype == np.int8 and q.shape == (7, 96)
    assert d.dtype == np.float16 and d.shape == (7, 3)          # [out, in / 32]
    assert q.min() >= -127 and q.max() <= 127                   # never -128
    assert d[1, 1] == 0 and not q[1, 32:64].any()
    # the block maximum maps to +-127 (up to the f16 rounding of d)
    b = np.abs(x[3, :32]).argmax()
    assert abs(int(q[3, b])) == 127


def test_round_trip_error_at_most_half_a_step():
    x = _weights(seed=11, shape=(16, 256))
    q, d = q8_0.quantize(x)
    y = q8_0.dequantize(q, d)
    step = np.repeat(d.astype(np.float64), 32, axis=1)
    assert np.all(np.abs(x - y) <= step / 2 * (1 + 1e-12))


def test_dequantized_values_exact_in_float32():
    q, d = q8_0.quantize(_weights(seed=5, shape=(9, 64)))
    y64 = q8_0.dequantize(q, d)
    y32 = np.repeat(d.astype(np.float32), 32, axis=1) * q.astype(np.float32)
    assert y32.dtype == np.float32
    assert np.array_equal(y32.astype(np.float64), y64)          # d * q: no rounding in fp32


def test_quantize_rejects_bad_shapes():
    with pytest.raises(ValueError, match="multiple of 32"):
        q8_0.quantize(np.zeros((4, 48)))
    with pytest.raises(ValueError, match="scale shape"):
        q8_0.dequantize(np.zeros((4, 64), np.int8), np.zeros((4, 3), np.float16))


def test_quantizable_names():
    assert q8_0.quantizable("layers.0.linear_attn.in_proj_qkv.weight")
    assert q8_0.quantizable("layers.3.self_attn.o_proj.weight")
    assert q8_0.quantizable("lm_head.weight")
    for n in ("embed_tokens.weight", "layers.0.linear_attn.conv1d.weight", "layers.0.linear_attn.A_log",
              "layers.0.input_layernorm.weight", "layers.0.mlp.shared_expert.up_proj.weight",
              "layers.0.mlp.gate.weight"):
        assert not q8_0.quantizable(n), n


def test_fixture_checkpoint_pairs_and_golden_weights(tmp_path):
    spec = fixtures.by_name("tiny-q8_0")
    d = str(tmp_path / "m")
    init.write_checkpoint(spec, d)
    raw = st.read(os.path.join(d, "model.safetensors"))
    i8 = sorted(n for n, (dt, _) in raw.items() if dt == "I8")
    assert "lm_head.weight" in i8 and len(i8) == 3 * 8 + 7 + 1   # 3 DeltaNet layers (5 + 3 MLP), 1 attention (4 + 3), lm_head
    for n in i8:
        dt, s = raw[n + "_scale"]
        assert dt == "F16" and s.shape == (raw[n][1].shape[0], raw[n][1].shape[1] // 32)
    assert raw["model.embed_tokens.weight"][0] == "F32"
    # the loader dequantizes: the golden computes with d * q
    cfg, w, info = checkpoint.load(d)
    assert info["dtypes"]["lm_head.weight"] == "Q8_0"
    q, s = raw["lm_head.weight"][1], raw["lm_head.weight_scale"][1]
    assert np.array_equal(w["lm_head.weight"].numpy(), np.repeat(s.astype(np.float64), 32, 1) * q)
    # byte-identical to the committed fixture
    with open(os.path.join(d, "model.safetensors"), "rb") as a, \
            open(os.path.join(FIXTURES, "tiny-q8_0", "model", "model.safetensors"), "rb") as b:
        assert a.read() == b.read()


def _rewrite(src, dst, edit):
    os.makedirs(dst)
    shutil.copy(os.path.join(src, "config.json"), dst)
    t = [(n, dt, a) for n, (dt, a) in st.read(os.path.join(src, "model.safetensors")).items()]
    st.write(os.path.join(dst, "model.safetensors"), edit(t))
    return dst


UP = "model.layers.0.mlp.up_proj.weight"


@pytest.mark.parametrize("edit,msg", [
    (lambda t: [x for x in t if x[0] != UP + "_scale"], "unsupported dtype I8"),
    (lambda t: [x for x in t if x[0] != UP], "scale without its weight"),
    (lambda t: [(n, dt, a.reshape(32, 2) if n == UP + "_scale" else a) for n, dt, a in t],
     "scale shape"),
    (lambda t: [(n, "F32" if n == UP else dt, a) for n, dt, a in t], "a Q8_0 weight is I8"),
])
def test_loader_errors(tmp_path, edit, msg):
    src = os.path.join(FIXTURES, "tiny-q8_0", "model")
    d = _rewrite(src, str(tmp_path / "bad"), edit)
    with pytest.raises((checkpoint.CheckpointError, st.SafetensorsError), match=msg):
        checkpoint.load(d)
