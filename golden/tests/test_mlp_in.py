"""The dense goldens' mixer outputs, prefill/mlp_in [L, T, H] and decode/mlp_in [L, S, H]
(golden/SCHEMA.md "Mixer outputs (dense)"): in every committed dense golden with the right
shapes (never in a MoE one, which keeps moe_in); in float64 each mlp_in[l] is the residual after
layer l's mixer — recomputed here from hidden[l] through the mixer, and hidden[l+1] from it
through an MLP and norms written in numpy — to 1e-12; decode rows and a continuation's prefill
match a teacher-forced re-run of the whole sequence; the precision / top-k model variants fill
it; validate.py checks its shape and refuses it in a MoE golden. Each comparison is also run on
a wrong input (hidden[l] for mlp_in[l], a neighbouring step) and must fail there."""
import json
import os
import shutil

import h5py
import numpy as np
import pytest
import torch

from conftest import FIXTURES
from qcgolden import checkpoint, config as qconfig, fixtures, goldens, precision, topk
from qcgolden import model as qmodel
from qcgolden.goldens import CaseSpec
import validate

NAMES = sorted(d for d in os.listdir(FIXTURES) if os.path.exists(os.path.join(FIXTURES, d, "golden.h5")))
MOE_NAMES = {s.name for s in fixtures.MOE + fixtures.MOE_GVA}
DENSE = "tiny-f32-tied-flat"


def _cfg(f):
    return qconfig.parse(json.loads(f.attrs["config_json"]))


def _model(name=DENSE):
    return qmodel.Model.from_dir(os.path.join(FIXTURES, name, "model"))


# ------------------------------------------------------------------------------------------------
# numpy MLP / norm (a second implementation of model.mlp and model.rms_norm_1p)
# ------------------------------------------------------------------------------------------------

def np_norm(x, w, eps):
    x = np.asarray(x, np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1.0 + w.numpy())


def np_mlp(x, W, p):
    g = x @ W[p + "gate_proj.weight"].numpy().T
    u = x @ W[p + "up_proj.weight"].numpy().T
    return (g / (1.0 + np.exp(-g)) * u) @ W[p + "down_proj.weight"].numpy().T


def layer_out(mi, m, layer):
    """hidden[layer + 1] from mlp_in[layer] (numpy; the last layer through the final norm)."""
    cfg, W, p = m.cfg, m.W, "layers.%d." % layer
    h = mi + np_mlp(np_norm(mi, W[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps), W, p + "mlp.")
    if layer == cfg.num_hidden_layers - 1:
        h = np_norm(h, W["norm.weight"], cfg.rms_norm_eps)
    return h


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


# ------------------------------------------------------------------------------------------------
# The committed goldens
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_fixture_shapes(name):
    """Dense: mlp_in in both phases of every case, [L, T, H] / [L, S, H] float32; MoE: moe_in,
    no mlp_in anywhere."""
    with h5py.File(os.path.join(FIXTURES, name, "golden.h5"), "r") as f:
        cfg = _cfg(f)
        L, H = cfg.num_hidden_layers, cfg.hidden_size
        assert cfg.is_moe == (name in MOE_NAMES)
        mine, other = ("moe_in", "mlp_in") if cfg.is_moe else ("mlp_in", "moe_in")
        seen = []
        f.visit(lambda n: seen.append(n) if n.endswith("/" + other) else None)
        assert seen == []
        for c in f["cases"]:
            g = f["cases/" + c]
            T = g["tokens"].shape[0]
            assert g["prefill/" + mine].dtype == np.float32
            assert g["prefill/" + mine].shape == (L, T, H), (c, g["prefill/" + mine].shape)
            if "decode" in g:
                S = g["decode/tokens"].shape[0]
                assert g["decode/" + mine].dtype == np.float32
                assert g["decode/" + mine].shape == (L, S, H), c


@pytest.mark.parametrize("name", sorted(set(NAMES) - MOE_NAMES))
def test_fixture_mlp_in_feeds_the_mlp(name):
    """hidden[l+1] = mlp_in[l] + mlp(norm(mlp_in[l])) on the stored float32 values (to float32
    rounding, amplified by one MLP); hidden[l] in place of mlp_in[l] is far off."""
    m = _model(name)
    L = m.cfg.num_hidden_layers
    with h5py.File(os.path.join(FIXTURES, name, "golden.h5"), "r") as f:
        for c in list(f["cases"])[:3]:
            hid = f["cases/%s/prefill/hidden" % c][()].astype(np.float64)
            mi = f["cases/%s/prefill/mlp_in" % c][()].astype(np.float64)
            for layer in range(L):
                assert rel(layer_out(mi[layer], m, layer), hid[layer + 1]) < 1e-5, (c, layer)
                assert rel(layer_out(hid[layer], m, layer), hid[layer + 1]) > 1e-3, (c, layer)


# ------------------------------------------------------------------------------------------------
# float64, in memory
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dense():
    return _model()


def test_prefill_mlp_in_float64(dense):
    """mlp_in[l] = hidden[l] + mixer(input_layernorm(hidden[l])) and hidden[l+1] =
    mlp_in[l] + mlp(post_attention_layernorm(mlp_in[l])), both to 1e-12 (relative)."""
    m, cfg = dense, dense.cfg
    toks = np.random.RandomState(7).randint(0, cfg.vocab_size, 20)
    r = goldens.prefill_and_decode(m, m.new_state(), toks, 3)
    assert "moe" not in r and sorted(r["mlp"]) == ["decode", "prefill"]
    hid, mi = r["hidden"], r["mlp"]["prefill"]["mlp_in"]
    L, H = cfg.num_hidden_layers, cfg.hidden_size
    assert mi.dtype == np.float64 and mi.shape == (L, 20, H)
    assert r["mlp"]["decode"]["mlp_in"].shape == (L, 3, H)
    fresh = m.new_state()
    for layer in range(L):
        p = "layers.%d." % layer
        h = torch.from_numpy(hid[layer])
        u = qmodel.rms_norm_1p(h, m.W[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        if cfg.layer_types[layer] == qconfig.LINEAR:
            u = qmodel.gated_deltanet(u, m.W, p + "linear_attn.", cfg, fresh.layers[layer], "auto")
        else:
            u = qmodel.gated_attention(u, m.W, p + "self_attn.", cfg, fresh.layers[layer],
                                       torch.arange(20))
        assert rel(mi[layer], (h + u).numpy()) <= 1e-12, layer
        assert rel(layer_out(mi[layer], m, layer), hid[layer + 1]) <= 1e-12, layer
        # the comparisons can fail: the layer input is not the MLP input
        assert rel(mi[layer], hid[layer]) > 1e-3
        assert rel(layer_out(hid[layer], m, layer), hid[layer + 1]) > 1e-3


def _one_prefill(m, tokens):
    """mlp_in of the whole sequence in one prefill (float64)."""
    tr = {}
    m.forward(tokens, m.new_state(), moe_trace=tr)
    return tr["mlp_in"]


def test_decode_rows_are_the_decode_steps(dense):
    """decode/mlp_in[:, s] is the mixer output of the call that fed decode/tokens[s]: the last
    row of one teacher-forced prefill of prompt + tokens[:s+1] (chunked vs recurrent: 1e-10)."""
    m = dense
    toks = list(np.random.RandomState(8).randint(0, m.cfg.vocab_size, 9))
    r = goldens.prefill_and_decode(m, m.new_state(), toks, 4)
    dec = r["mlp"]["decode"]["mlp_in"]
    assert dec.shape == (m.cfg.num_hidden_layers, 4, m.cfg.hidden_size)
    for s in range(4):
        ref = _one_prefill(m, toks + [int(t) for t in r["decode_tokens"][:s + 1]])
        assert rel(dec[:, s], ref[:, -1]) < 1e-10, s
        assert rel(dec[:, s], ref[:, -2]) > 1e-3, s
    assert rel(r["mlp"]["prefill"]["mlp_in"], _one_prefill(m, toks)) < 1e-10


def test_continuation_and_no_decode(dense, tmp_path):
    """A continuation's prefill/mlp_in covers the prompt only (not the history), at its
    positions; a case with S = 0 has a decode trace [L, 0, H] and no decode group in the file."""
    m, cfg = dense, dense.cfg
    L, H = cfg.num_hidden_layers, cfg.hidden_size
    cont = CaseSpec("c", 7, n_decode=2, history_prompt=10, history_decode=2, description="c")
    rs = np.random.RandomState(9)
    hist, toks = rs.randint(0, cfg.vocab_size, 10), rs.randint(0, cfg.vocab_size, 7)
    r = goldens.run_case(m, cont, toks, hist)
    mi = r["mlp"]["prefill"]["mlp_in"]
    assert r["start_pos"] == 12 and mi.shape == (L, 7, H)
    ref = _one_prefill(m, list(r["history_tokens"]) + list(toks))
    assert ref.shape == (L, 19, H)
    assert rel(mi, ref[:, 12:]) < 1e-10
    assert rel(mi, ref[:, 11:18]) > 1e-3
    none = CaseSpec("p", 4, n_decode=0, description="p")
    r0 = goldens.run_case(m, none, toks[:4])
    assert r0["mlp"]["decode"]["mlp_in"].shape == (L, 0, H)
    out = str(tmp_path / "g.h5")
    goldens.write_golden(out, os.path.join(FIXTURES, DENSE, "model"), [(cont, r), (none, r0)], 1)
    with h5py.File(out, "r") as f:
        assert f["cases/c/prefill/mlp_in"].shape == (L, 7, H)
        assert f["cases/c/decode/mlp_in"].shape == (L, 2, H)
        assert np.array_equal(f["cases/c/prefill/mlp_in"][()], mi.astype(np.float32))
        assert f["cases/p/prefill/mlp_in"].shape == (L, 4, H) and "decode" not in f["cases/p"]
        assert "router_margin_threshold" not in f.attrs
    assert validate.validate(out) == []


def test_moe_keeps_moe_in():
    """A MoE model's trace is still moe_in and the router record, no mlp_in."""
    m = _model(fixtures.MOE[0].name)
    r = goldens.prefill_and_decode(m, m.new_state(), [1, 2, 3], 2)
    assert "mlp" not in r
    assert sorted(r["moe"]["prefill"]) == ["moe_in", "router_margins", "topk_ids", "topk_weights"]
    assert r["moe"]["decode"]["moe_in"].shape == (4, 2, m.cfg.hidden_size)


# ------------------------------------------------------------------------------------------------
# The precision / top-k model variants pass the trace through
# ------------------------------------------------------------------------------------------------

def test_variants_trace_mlp_in(dense):
    cfg, W, _ = checkpoint.load(os.path.join(FIXTURES, DENSE, "model"))
    toks = [5, 17, 3, 200, 9]
    ref = _one_prefill(dense, toks)
    for m in (precision.SimModel(cfg, W, "bf16"), topk.F32Model(cfg, W)):
        tr = {}
        m.forward(toks, m.new_state(), moe_trace=tr)
        assert sorted(tr) == ["mlp_in"] and tr["mlp_in"].shape == ref.shape
        assert 0 < rel(tr["mlp_in"], ref) < 0.25, type(m).__name__  # (bf16: ~8%)


# ------------------------------------------------------------------------------------------------
# validate.py
# ------------------------------------------------------------------------------------------------

def _copy(tmp_path, name):
    d = str(tmp_path / name)
    shutil.copytree(os.path.join(FIXTURES, name), d)
    return os.path.join(d, "golden.h5")


def test_validate_mlp_in(tmp_path):
    g = _copy(tmp_path, DENSE)
    with h5py.File(g, "r+") as f:
        del f["cases/len005/decode/mlp_in"]
        f["cases/len005/decode/mlp_in"] = np.zeros((4, 7, 64), np.float32)
        f["cases/len002/prefill/mlp_in"][1, 0, 3] = np.nan
    errs = validate.validate(g)
    assert len(errs) == 2, errs
    assert "/cases/len002/prefill/mlp_in: non-finite value nan at index (1, 0, 3)" in errs[0]
    assert "/cases/len005/decode/mlp_in: shape (4, 7, 64) != expected (4, 8, 64)" in errs[1]
    with h5py.File(g, "r+") as f:        # optional: a golden without it is valid
        for c in f["cases"]:
            for ph in ("prefill", "decode"):
                if ph + "/mlp_in" in f["cases/" + c]:
                    del f["cases/%s/%s/mlp_in" % (c, ph)]
    assert validate.validate(g) == []
    moe = _copy(tmp_path, fixtures.MOE[0].name)
    with h5py.File(moe, "r+") as f:
        f["cases/len001/prefill/mlp_in"] = f["cases/len001/prefill/moe_in"][()]
    errs = validate.validate(moe)
    assert len(errs) == 1 and "/cases/len001/prefill/mlp_in: dense dataset in the golden of " \
        "a MoE model" in errs[0], errs
