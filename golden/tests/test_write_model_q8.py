"""`qcgolden write-model --preset P --dtype q8_0` (qcgolden/preset.py): a synthetic checkpoint
whose dense projections are Q8_0 (I8 X.weight + F16 X.weight_scale, qcgolden/q8_0.py) and the
rest BF16 -- the checkpoint ci/bench-llamacpp times with `--dtypes q8_0`.

- the streaming writer writes the fixture writer's bytes (init.write_checkpoint with
  weight_type "q8_0"), the quantization done block of rows by block of rows equal to the
  whole tensor's;
- the golden loader reads it back: projections Q8_0 (= the dequantized quantization of the
  float64 values), embeddings and norms BF16 / F32;
- the CLI accepts --dtype q8_0 and names it in its --dtype error.
"""
import os
import subprocess
import sys

import numpy as np

from conftest import GOLDEN
from qcgolden import checkpoint, init, preset, q8_0


def test_spec_and_entries():
    s = preset.spec("0.8b", "q8_0", layers=4, vocab_size=64)
    assert s.dtype == "BF16" and s.weight_type == "q8_0"
    ents = {c: (d, sh) for _, c, d, sh in preset.entries(s)}
    assert ents["layers.0.linear_attn.in_proj_qkv.weight"] == ("I8", (6144, 1024))
    assert ents["layers.0.linear_attn.in_proj_qkv.weight_scale"] == ("F16", (6144, 32))
    assert ents["layers.3.self_attn.q_proj.weight"] == ("I8", (4096, 1024))
    assert ents["layers.0.mlp.down_proj.weight_scale"] == ("F16", (1024, 3584 // 32))
    assert ents["embed_tokens.weight"] == ("BF16", (64, 1024))
    assert ents["layers.0.linear_attn.A_log"][0] == "F32"
    assert ents["layers.0.linear_attn.conv1d.weight"][0] == "BF16"
    n_i8 = sum(d == "I8" for d, _ in ents.values())
    assert n_i8 == 3 * 5 + 1 * 4 + 4 * 3  # DeltaNet qkv/z/b/a/out x 3, attention q/k/v/o, 4 MLPs
    assert n_i8 == sum(c.endswith(".weight_scale") for c in ents)
    # file order: every scale right after its weight
    names = [f for f, _, _, _ in preset.entries(s)]
    for i, f in enumerate(names):
        if f.endswith(".weight_scale"):
            assert names[i - 1] == f[:-len("_scale")]


def test_blocks_quantize_as_the_whole_tensor():
    s = preset.spec("0.8b", "q8_0", vocab_size=64)
    name, shape = "layers.0.mlp.down_proj.weight", (1024, 3584)
    scales = {}
    q = np.concatenate(list(preset.entry_blocks(s, name, "I8", shape, scales, chunk=100003)))
    want_q, want_d = q8_0.quantize(init.init_tensor(s, name, shape))
    assert q.dtype == np.int8 and np.array_equal(q, want_q)
    assert len(scales[name]) > 1  # several blocks of rows
    sname, sshape = name + "_scale", (1024, 112)
    d = np.concatenate(list(preset.entry_blocks(s, sname, "F16", sshape, scales, chunk=100003)))
    assert d.dtype == np.float16 and np.array_equal(d, want_d) and name not in scales
    # the scale alone (no quants written through the dict): computed again, the same
    d2 = np.concatenate(list(preset.entry_blocks(s, sname, "F16", sshape, {}, chunk=77777)))
    assert np.array_equal(d2, want_d)
    assert int(np.abs(want_q).max()) == 127 and float(want_d.min()) > 0


def test_streaming_writer_writes_the_fixture_writers_bytes(tmp_path):
    s = preset.spec("0.8b", "q8_0", layers=4, vocab_size=64)
    a = init.write_checkpoint(s, str(tmp_path / "a"))
    b = preset.write(s, str(tmp_path / "b"), config_bytes=init.config_text(s))
    assert a == b == ["config.json", "model.safetensors"]
    for f in a:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    cfg, w, info = checkpoint.load(str(tmp_path / "b"))
    assert cfg.num_hidden_layers == 4
    assert info["dtypes"]["layers.0.mlp.up_proj.weight"] == "Q8_0"
    assert info["dtypes"]["embed_tokens.weight"] == "BF16"
    up = init.init_tensor(s, "layers.0.mlp.up_proj.weight", (3584, 1024))
    deq = q8_0.dequantize(*q8_0.quantize(up))
    assert np.array_equal(w["layers.0.mlp.up_proj.weight"].double().numpy(), deq)
    assert 0 < np.abs(deq - up).max() <= np.abs(up).max() / 127 / 2 * 1.01


def test_cli_q8_0(tmp_path):
    d = tmp_path / "m"
    r = subprocess.run([sys.executable, os.path.join(GOLDEN, "qcgolden"), "write-model",
                        "--preset", "0.8b", "--dtype", "q8_0", "--layers", "1", "--out", str(d)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["config.json", "model.safetensors"]
    s = preset.spec("0.8b", "q8_0", layers=1)
    assert os.path.getsize(d / "model.safetensors") == len(preset.header(
        preset.entries(s), {"format": "pt"})) + sum(
        int(np.prod(sh)) * {"I8": 1, "F16": 2, "BF16": 2, "F32": 4}[dt] for _, _, dt, sh in preset.entries(s))
    r = subprocess.run([sys.executable, os.path.join(GOLDEN, "qcgolden"), "write-model",
                        "--preset", "0.8b", "--dtype", "q4_0", "--out", str(tmp_path / "x")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "bf16, f32, f16 or q8_0" in r.stderr, r.stderr
