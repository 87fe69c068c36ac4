"""`qcgolden write-model --preset`: synthetic checkpoints with the real Qwen3.5 dimensions
(qcgolden/preset.py).

- the preset table is the C one (runtime/qc_config.c, qc_config_preset), field by field;
- the streaming writer writes the fixture writer's bytes (init.write_checkpoint), and its blocks
  are init.init_tensor's values;
- refusal without --force, --force replacing a checkpoint (stale shards removed), no temp file
  and no half checkpoint after an error;
- the C loader loads what it writes (`qwen-conform bench --model DIR`, skipped without a build),
  with the same weight bytes and FLOPs per token as `bench --synthetic 0.8b --layers N`.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import GOLDEN, REPO
from qcgolden import checkpoint, fixtures, init, preset
from qcgolden import config as qconfig

BIN = os.environ.get("QC_BIN", os.path.join(REPO, "build", "qwen-conform"))
if not os.path.isabs(BIN):
    BIN = os.path.join(REPO, BIN)
have_bin = pytest.mark.skipif(not os.access(BIN, os.X_OK), reason="no %s (build first)" % BIN)


def gen(*args):
    return subprocess.run([sys.executable, os.path.join(GOLDEN, "qcgolden")] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=600)


# ------------------------------------------------------------------------------------------------
# The table is the C one
# ------------------------------------------------------------------------------------------------

def c_presets():
    src = open(os.path.join(REPO, "runtime", "qc_config.c")).read()
    body = src[src.index("qc_status qc_config_preset("):]
    body = body[:body.index("\n}\n")]
    rows = re.findall(r'\{"([0-9a-z.-]+)",\s*([0-9,\s]+)\}', body)
    table = {n: tuple(int(v) for v in vals.replace(" ", "").strip(",").split(",")) for n, vals in rows}
    scal = dict(re.findall(r"cfg->(\w+)\s*=\s*([0-9.eE+-]+);", body))
    return table, scal


def test_presets_are_the_c_presets():
    table, scal = c_presets()
    assert table == preset.PRESETS
    c = preset.COMMON
    assert int(scal["vocab_size"]) == c["vocab_size"]
    assert int(scal["head_dim"]) == c["head_dim"]
    assert int(scal["lin_n_k_heads"]) == c["linear_num_key_heads"]
    assert int(scal["lin_k_dim"]) == c["linear_key_head_dim"]
    assert int(scal["lin_v_dim"]) == c["linear_value_head_dim"]
    assert int(scal["conv_kernel"]) == c["linear_conv_kernel_dim"]
    assert float(scal["rms_eps"]) == c["rms_norm_eps"]
    assert float(scal["rope_theta"]) == c["rope_theta"]
    assert float(scal["partial_rotary_factor"]) == c["partial_rotary_factor"]
    assert int(scal["rotary_dim"]) == int(c["head_dim"] * c["partial_rotary_factor"])
    assert int(scal["max_position_embeddings"]) == preset.MAX_POSITION_EMBEDDINGS
    assert int(scal["nested"]) == 1


@pytest.mark.parametrize("name", sorted(preset.PRESETS))
def test_config_parses_to_the_preset(name):
    s = preset.spec(name, "bf16")
    cfg = qconfig.parse(preset.config_json(s))
    H, I, L, nh, nkv, nv, tie, E, topk, Ie, Is = preset.PRESETS[name]
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.num_attention_heads,
            cfg.num_key_value_heads, cfg.linear_num_value_heads, int(cfg.tie_word_embeddings)) == \
        (H, I, L, nh, nkv, nv, tie)
    assert cfg.vocab_size == 248320 and cfg.head_dim == 256 and cfg.rotary_dim == 64
    assert cfg.layer_types == [qconfig.FULL if (i + 1) % 4 == 0 else qconfig.LINEAR
                               for i in range(L)]
    if E:
        assert (cfg.num_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size,
                cfg.shared_expert_intermediate_size) == (E, topk, Ie, Is)
    tc = preset.config_json(s)["text_config"]
    assert tc["max_position_embeddings"] == 262144
    assert tc["rope_parameters"]["mrope_section"] == [11, 11, 10]  # sums to rotary_dim / 2


def test_layers_truncates_keeping_the_pattern():
    s = preset.spec("0.8b", "f32", layers=5)
    assert s.layer_types == [qconfig.LINEAR] * 3 + [qconfig.FULL, qconfig.LINEAR]
    with pytest.raises(ValueError):
        preset.spec("0.8b", "f32", layers=25)


# ------------------------------------------------------------------------------------------------
# Same bytes / values as the fixture writer
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["tiny-f32-tied-flat", "tiny-f16-sharded", "tiny-bf16-gva-nested",
                                  "tiny-moe-f32-nested"])
def test_streaming_writer_writes_the_fixture_writers_bytes(tmp_path, name):
    s = fixtures.by_name(name)
    if s.extras or s.legacy_packed:
        s = init.ModelSpec(**{**s.__dict__, "extras": False})
    a = init.write_checkpoint(s, str(tmp_path / "a"))
    b = preset.write(s, str(tmp_path / "b"), config_bytes=init.config_text(s),
                     shards=s.shards if s.shards > 1 else None)
    assert a == b
    for f in a:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_blocks_are_init_tensor(monkeypatch):
    s = preset.spec("0.8b", "bf16", vocab_size=3000)
    for name, shape in (("embed_tokens.weight", (3000, 1024)),
                        ("layers.0.mlp.down_proj.weight", (1024, 3584)),
                        ("layers.0.linear_attn.in_proj_a.weight", (16, 1024))):
        blocks = list(preset.tensor_blocks(s, name, shape, chunk=100003))
        got = np.concatenate(blocks)
        assert got.shape == shape
        assert np.array_equal(got, init.init_tensor(s, name, shape)), name
    s = preset.spec("35b-a3b", "bf16", layers=1, vocab_size=64)
    shape = (256, 1024, 2048)
    blocks = preset.tensor_blocks(s, "layers.0.mlp.experts.gate_up_proj", shape, chunk=1 << 20)
    first = next(blocks)
    assert first.shape == (1, 1024, 2048)
    rs = init._rng(s.seed, "layers.0.mlp.experts.gate_up_proj")
    assert np.array_equal(first, rs.normal(0.0, 1.0 / np.sqrt(2048), (1, 1024, 2048)))


def test_small_preset_loads_in_the_golden_loader_and_is_sane(tmp_path):
    s = preset.spec("0.8b", "bf16", layers=4, vocab_size=512)
    names = preset.write(s, str(tmp_path / "m"), shards=2)
    assert names == ["config.json", "model-00001-of-00002.safetensors",
                     "model-00002-of-00002.safetensors", "model.safetensors.index.json"]
    cfg, w, info = checkpoint.load(str(tmp_path / "m"))
    assert cfg.hidden_size == 1024 and cfg.num_hidden_layers == 4 and cfg.vocab_size == 512
    assert info["dtypes"]["layers.0.linear_attn.A_log"] == "F32"
    assert info["dtypes"]["layers.0.linear_attn.in_proj_qkv.weight"] == "BF16"
    for n, t in w.items():
        assert bool(t.isfinite().all()), n
    # small variance: projections ~ 1/sqrt(fan_in)
    assert abs(float(w["layers.0.mlp.up_proj.weight"].std()) - 1 / 32) < 1e-3


# ------------------------------------------------------------------------------------------------
# Refusal, --force, atomicity
# ------------------------------------------------------------------------------------------------

def test_cli_refuses_an_existing_checkpoint_without_force(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    r = gen("write-model", "--preset", "0.8b", "--layers", "1", "--out", d)
    assert r.returncode == 2 and "--force" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert (d / "config.json").read_text() == "{}"
    assert sorted(os.listdir(d)) == ["config.json"]


@pytest.mark.parametrize("args,msg", [
    (["--preset", "1b"], "unknown"),
    (["--preset", "0.8b", "--dtype", "int8"], "--dtype"),
    (["--preset", "0.8b", "--layers", "25"], "24 layers"),
    (["--preset", "0.8b", "--shards", "2", "--max-shard-size", "1G"], "exclude"),
    (["--fixture", "tiny-f32-tied-flat", "--dtype", "f32"], "--preset only"),
    (["--fixture", "tiny-f32-tied-flat", "--preset", "0.8b"], "one of"),
    ([], "one of"),
])
def test_cli_argument_errors(tmp_path, args, msg):
    r = gen("write-model", *args, "--out", tmp_path / "m")
    assert r.returncode == 2 and msg in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "m").exists()


def test_force_replaces_and_removes_stale_shards(tmp_path):
    d = str(tmp_path / "m")
    s = preset.spec("0.8b", "f32", layers=1, vocab_size=64)
    preset.write(s, d, shards=3)
    open(os.path.join(d, "notes.txt"), "w").write("kept")
    assert preset.write(s, d) == ["config.json", "model.safetensors"]
    assert sorted(os.listdir(d)) == ["config.json", "model.safetensors", "notes.txt"]
    checkpoint.load(d)


def test_an_error_leaves_no_temp_and_the_old_checkpoint(tmp_path, monkeypatch):
    d = str(tmp_path / "m")
    s = preset.spec("0.8b", "f32", layers=1, vocab_size=64)
    preset.write(s, d)
    before = {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)}
    calls = [0]
    real = preset.safetensors.encode

    def failing(x, dtype):
        calls[0] += 1
        if calls[0] == 5:
            raise OSError(28, "No space left on device")
        return real(x, dtype)
    monkeypatch.setattr(preset.safetensors, "encode", failing)
    s2 = preset.spec("0.8b", "bf16", layers=1, vocab_size=64)
    with pytest.raises(OSError):
        preset.write(s2, d, shards=2)
    assert {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)} == before
    # a new directory: not left behind
    calls[0] = 0
    with pytest.raises(OSError):
        preset.write(s2, str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()


# ------------------------------------------------------------------------------------------------
# The C loader: `qwen-conform bench --model DIR`
# ------------------------------------------------------------------------------------------------

def bench_json(tmp_path, tag, *args):
    out = tmp_path / ("%s.json" % tag)
    r = subprocess.run([BIN, "bench", *args, "--backends", "optimized", "--prompt", "4",
                        "--decode", "2", "--reps", "1", "--warmup", "0", "--min-time", "0",
                        "--threads", "1", "--json", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.load(open(out))
    for x in d["results"]:
        assert x["tok_s_median"] > 0 and np.isfinite(x["tok_s_median"])
    return d


@have_bin
def test_c_loader_loads_a_small_preset_checkpoint(tmp_path):
    d = tmp_path / "m"
    s = preset.spec("0.8b", "bf16", layers=4, vocab_size=1024)
    preset.write(s, str(d), shards=2)
    bench_json(tmp_path, "small", "--model", d)


@have_bin
def test_cli_checkpoint_has_the_c_presets_size(tmp_path):
    """The real dimensions (vocabulary 248320) through the CLI, one layer, F32: the C loader
    reads it and counts the same FLOPs per token and the same weight bytes (up to the
    synthetic model's 64-byte alignment of each tensor) as `--synthetic 0.8b --layers 1`."""
    d = tmp_path / "m"
    r = gen("write-model", "--preset", "0.8b", "--dtype", "f32", "--layers", "1", "--out", d)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["config.json", "model.safetensors"]
    mine = bench_json(tmp_path, "model", "--model", d)["config"]
    syn = bench_json(tmp_path, "syn", "--synthetic", "0.8b", "--layers", "1", "--dtype", "f32")["config"]
    assert mine["flops_per_prefill_token"] == syn["flops_per_prefill_token"]
    ntensors = len(preset.entries(preset.spec("0.8b", "f32", layers=1)))
    file_bytes = sum(os.path.getsize(d / f) for f in os.listdir(d) if f.endswith(".safetensors"))
    assert mine["weights"]["total_bytes"] <= file_bytes
    assert abs(mine["weights"]["total_bytes"] - syn["weights"]["total_bytes"]) <= 64 * ntensors


# ------------------------------------------------------------------------------------------------
# Qwen3.5/3.6/3.8-27B and Qwen3.8-2.4T-A95B (issue #27 item 6; sources: docs/qwen35-model.md 2.6)
# ------------------------------------------------------------------------------------------------

def n_params(s):
    return sum(int(np.prod(shape)) for _, _, _, shape in preset.entries(s))


def test_new_presets_have_their_names_parameter_counts():
    """The dimensions, multiplied out, give the size in the model's name: 27B dense (the text
    model without the vision tower and the MTP head) and 2.4T total / ~95B active."""
    assert 26.5e9 < n_params(preset.spec("27b", "bf16")) < 27.5e9
    s = preset.spec("2.4t-a95b", "bf16")
    total = n_params(s)
    assert 2.35e12 < total < 2.45e12
    H, _, L, _, _, _, _, E, k, Ie, _ = preset.PRESETS["2.4t-a95b"]
    active = total - L * (E - k) * 3 * Ie * H          # the unchosen routed experts
    assert 88e9 < active < 96e9
    cfg = s.text_config()
    assert (cfg.linear_num_key_heads, cfg.linear_num_value_heads) == (16, 128)
    assert cfg.layer_types.count(qconfig.FULL) == 23 and cfg.conv_dim == 20480
    c27 = preset.spec("27b", "bf16").text_config()
    assert (c27.linear_num_key_heads, c27.linear_num_value_heads, c27.conv_dim) == (16, 48, 10240)


def test_new_presets_layers_bound(tmp_path):
    r = gen("write-model", "--preset", "2.4t-a95b", "--layers", "93", "--out", tmp_path / "m")
    assert r.returncode == 2 and "92 layers" in r.stderr, r.stderr
    r = gen("write-model", "--preset", "27b", "--layers", "65", "--out", tmp_path / "m")
    assert r.returncode == 2 and "64 layers" in r.stderr, r.stderr
    assert not (tmp_path / "m").exists()


@have_bin
def test_c_loader_loads_a_27b_preset_checkpoint(tmp_path):
    """`write-model --preset 27b --layers 2` with a test vocabulary (the full 248320 x 5120
    embedding and head are 5 GB more of the same two tensors): the C loader loads it (the
    bench runs on it) and holds every weight byte the preset's tensors have (BF16, A_log and
    the gated-norm weight F32; up to 64 bytes of alignment a tensor)."""
    d = tmp_path / "m"
    s = preset.spec("27b", "bf16", layers=2, vocab_size=512)
    assert preset.write(s, str(d)) == ["config.json", "model.safetensors"]
    cfg = json.loads((d / "config.json").read_text())["text_config"]
    assert (cfg["hidden_size"], cfg["intermediate_size"], cfg["linear_num_value_heads"],
            cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (5120, 17408, 48, 24, 4)
    mine = bench_json(tmp_path, "m27", "--model", d)["config"]
    ents = preset.entries(s)
    want = sum(preset._nbytes(dt, sh) for _, _, dt, sh in ents)
    assert want <= mine["weights"]["total_bytes"] <= want + 64 * len(ents)
