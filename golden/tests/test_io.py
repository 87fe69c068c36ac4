"""safetensors reader / writer, config parsing and checkpoint loading (errors included)."""
import json
import os
import shutil
import struct

import numpy as np
import pytest

from conftest import FIXTURES
from qcgolden import checkpoint, init
from qcgolden import config as qconfig
from qcgolden import fixtures
from qcgolden import safetensors as st


# ------------------------------------------------------------------------------------------------
# safetensors
# ------------------------------------------------------------------------------------------------

def test_bf16_round_to_nearest_even():
    x = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -2.5, 3.0e38],
                 dtype=np.float32)
    bits = st.f32_to_bf16_bits(x)
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even -> 1.0; 1 + 3*2^-8 -> 1 + 2^-6
    assert list(bits[:5]) == [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020]
    assert st.bf16_bits_to_f32(bits)[2] == np.float32(1 + 2 ** -6)
    assert np.isinf(st.bf16_bits_to_f32(bits)[5]) is np.False_  # 3e38 rounds to a finite bf16


@pytest.mark.parametrize("dtype", ["F32", "BF16", "F16"])
def test_roundtrip_and_determinism(tmp_path, dtype):
    rs = np.random.RandomState(0)
    tensors = [("b.weight", dtype, rs.normal(size=(3, 5))), ("a", "F32", rs.normal(size=(7,)))]
    p = str(tmp_path / "m.safetensors")
    st.write(p, tensors, {"format": "pt"})
    raw = open(p, "rb").read()
    assert raw == st.serialize(list(reversed(tensors)), {"format": "pt"})   # order-independent
    n = struct.unpack("<Q", raw[:8])[0]
    assert n % 8 == 0
    header = json.loads(raw[8:8 + n])
    assert list(header) == sorted(header)
    back = st.read(p)
    assert back["b.weight"][0] == dtype
    assert np.array_equal(back["b.weight"][1], st.round_to_dtype(tensors[0][2], dtype))
    assert np.array_equal(back["a"][1], tensors[1][2].astype(np.float32))


def _raw_file(tmp_path, header, data=b""):
    h = json.dumps(header).encode()
    p = str(tmp_path / "bad.safetensors")
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    return p


@pytest.mark.parametrize("header,data,msg", [
    ({"x": {"dtype": "I8", "shape": [2], "data_offsets": [0, 2]}}, b"ab", "x: unsupported dtype I8"),
    ({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"abcd", "x: byte span 4"),
    ({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"abcd", "x: data_offsets [0,8] outside"),
    ({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
      "y": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}}, b"abcdefgh", "y overlaps x"),
    ({"x": {"dtype": "F32", "shape": [1]}}, b"abcd", "x: entry lacks"),
])
def test_reader_rejects_malformed(tmp_path, header, data, msg):
    p = _raw_file(tmp_path, header, data)
    with pytest.raises(st.SafetensorsError) as e:
        st.read(p)
    assert msg in str(e.value) and "bad.safetensors" in str(e.value)


def test_reader_rejects_bad_header_length_and_json(tmp_path):
    p = str(tmp_path / "short.safetensors")
    open(p, "wb").write(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(st.SafetensorsError, match="header length 1000 exceeds"):
        st.read(p)
    open(p, "wb").write(struct.pack("<Q", 3) + b"{x}")
    with pytest.raises(st.SafetensorsError, match="not valid JSON"):
        st.read(p)


# ------------------------------------------------------------------------------------------------
# config
# ------------------------------------------------------------------------------------------------

def test_config_variants_parse_to_the_same_meaning():
    base = fixtures.by_name("tiny-f32-tied-flat")
    ref = base.text_config()
    for kw in ({"nested": True}, {"rope_style": "legacy"}, {"layer_style": "interval"}):
        c = init.ModelSpec(**{**base.__dict__, **kw}).text_config()
        assert c.layer_types == ref.layer_types and c.rotary_dim == ref.rotary_dim == 4
        assert c.rope_theta == ref.rope_theta and c.tie_word_embeddings == ref.tie_word_embeddings
    assert init.ModelSpec(**{**base.__dict__, "nested": True}).text_config().nested


def test_config_defaults_and_errors():
    tc = json.loads(init.config_text(fixtures.by_name("tiny-f32-tied-flat")))
    for k in ("rope_parameters", "layer_types", "full_attention_interval", "head_dim"):
        tc.pop(k)
    c = qconfig.parse(tc)
    assert c.partial_rotary_factor == 0.25 and c.rope_theta == 10000.0 and c.head_dim == 256
    assert c.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    bad = dict(tc, linear_num_value_heads=3)
    with pytest.raises(qconfig.ConfigError, match="not a multiple of linear_num_key_heads"):
        qconfig.parse(bad)
    bad = dict(tc)
    del bad["hidden_size"]
    with pytest.raises(qconfig.ConfigError, match="missing field hidden_size"):
        qconfig.parse(bad)
    with pytest.raises(qconfig.ConfigError, match="layer_types has 2 entries"):
        qconfig.parse(dict(tc, layer_types=["full_attention"] * 2))


def test_nested_tie_comes_from_the_top_level():
    cfg = json.loads(init.config_text(fixtures.by_name("tiny-bf16-gva-nested")))
    assert qconfig.parse(cfg).tie_word_embeddings is False
    cfg["tie_word_embeddings"] = True
    assert qconfig.parse(cfg).tie_word_embeddings is True


# ------------------------------------------------------------------------------------------------
# checkpoints
# ------------------------------------------------------------------------------------------------

def test_bf16_fixture_keeps_a_log_and_gated_norm_f32():
    d = os.path.join(FIXTURES, "tiny-bf16-gva-nested", "model")
    cfg, W, info = checkpoint.load(d)
    f32 = sorted(n for n, t in info["dtypes"].items() if t == "F32")
    assert f32 == sorted("layers.%d.linear_attn.%s" % (i, s) for i in range(3)
                         for s in ("A_log", "norm.weight"))
    assert info["skipped"] == len(init.extra_tensors(fixtures.by_name("tiny-bf16-gva-nested")))
    assert "lm_head.weight" in info["dtypes"]                    # untied


def test_sharded_fixture_index_matches_shards():
    d = os.path.join(FIXTURES, "tiny-f16-sharded", "model")
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    files = checkpoint.weight_files(d)
    assert len(files) == 3
    names = {}
    for f in files:
        for n, (dtype, a) in st.read(f).items():
            assert dtype == "F16"
            names[n] = os.path.basename(f)
    assert names == index["weight_map"]


def _copy_model(tmp_path, name="tiny-f32-tied-flat"):
    d = str(tmp_path / "m")
    shutil.copytree(os.path.join(FIXTURES, name, "model"), d)
    return d


def _rewrite(d, fn):
    p = os.path.join(d, "model.safetensors")
    t = [(n, dt, a) for n, (dt, a) in st.read(p).items()]
    st.write(p, fn(t))


def test_loader_rejects_unknown_missing_and_misshaped(tmp_path):
    d = _copy_model(tmp_path)
    _rewrite(d, lambda t: t + [("model.layers.0.bogus.weight", "F32", np.zeros(2))])
    with pytest.raises(checkpoint.CheckpointError, match="layers.0.bogus.weight: unknown tensor"):
        checkpoint.load(d)
    d = _copy_model(tmp_path / "b")
    _rewrite(d, lambda t: [x for x in t if x[0] != "model.layers.2.linear_attn.A_log"])
    with pytest.raises(checkpoint.CheckpointError, match="missing tensor layers.2.linear_attn.A_log"):
        checkpoint.load(d)
    d = _copy_model(tmp_path / "c")
    _rewrite(d, lambda t: [(n, dt, a[:, :-1] if n.endswith("up_proj.weight") else a) for n, dt, a in t])
    with pytest.raises(checkpoint.CheckpointError, match=r"mlp.up_proj.weight: shape \[64, 63\] != \[64, 64\]"):
        checkpoint.load(d)
    d = _copy_model(tmp_path / "d")
    _rewrite(d, lambda t: t + [("model.visual.x", "F32", np.zeros(2)), ("mtp.y", "F32", np.zeros(2))])
    assert checkpoint.load(d)[2]["skipped"] == 2
