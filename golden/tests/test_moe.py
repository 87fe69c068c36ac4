"""The golden generator's MoE block (qcgolden/moe.py) against a second implementation written
differently (numpy, per token, argsort, explicit loops over the selected experts), the router
record, both checkpoint layouts, the MoE goldens, and bad MoE configs / checkpoints. The
faulted variants of the numpy block (renormalisation dropped, the shared gate on the sum, the
(k+1)-th expert instead of the k-th) must differ from the golden: the comparison can fail."""
import copy
import dataclasses
import json
import os

import h5py
import numpy as np
import pytest
import torch

from conftest import FIXTURES
from qcgolden import checkpoint, config as qconfig, fixtures, goldens, init, moe, safetensors
from qcgolden.model import Model, rms_norm_1p

F32_SPEC, BF16_SPEC = fixtures.MOE


# ------------------------------------------------------------------------------------------------
# The second implementation (numpy)
# ------------------------------------------------------------------------------------------------

def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def numpy_moe(x, W, p, k, fault=None):
    """The MoE block of every row of x [T, H], token by token. fault: None | "no_renorm" |
    "gate_on_sum" | "wrong_topk" (the (k+1)-th most probable expert replaces the k-th)."""
    Wr = W[p + "gate.weight"].numpy()
    gu, dn = W[p + "experts.gate_up_proj"].numpy(), W[p + "experts.down_proj"].numpy()
    sg, su = W[p + "shared_expert.gate_proj.weight"].numpy(), W[p + "shared_expert.up_proj.weight"].numpy()
    sd, sgate = W[p + "shared_expert.down_proj.weight"].numpy(), W[p + "shared_expert_gate.weight"].numpy()
    Ie = gu.shape[1] // 2
    out, ids, wts, margins = [], [], [], []
    for xt in np.asarray(x):
        logits = Wr @ xt
        e = np.exp(logits - logits.max())
        prob = e / e.sum()
        order = np.argsort(-prob, kind="stable")
        sel = list(order[:k])
        if fault == "wrong_topk":
            sel[-1] = order[k]
        w = prob[sel] if fault == "no_renorm" else prob[sel] / prob[sel].sum()
        routed = np.zeros_like(xt)
        for j in range(k):
            g = gu[sel[j], :Ie] @ xt
            u = gu[sel[j], Ie:] @ xt
            routed += w[j] * (dn[sel[j]] @ (g * _sigmoid(g) * u))
        a = sg @ xt
        shared = sd @ (a * _sigmoid(a) * (su @ xt))
        gate = _sigmoid(float(sgate[0] @ xt))
        out.append((routed + shared) * gate if fault == "gate_on_sum" else routed + gate * shared)
        ids.append(sel)
        wts.append(w)
        margins.append(prob[order[k - 1]] - prob[order[k]])
    return np.array(out), np.array(ids), np.array(wts), np.array(margins)


# ------------------------------------------------------------------------------------------------
# Models
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """{name: (model dir, Model)} for both MoE fixture specs and the F32 spec in the per-expert
    layout (written fresh: independent of the committed fixtures)."""
    root = tmp_path_factory.mktemp("moe")
    out = {}
    for spec in (F32_SPEC, BF16_SPEC, dataclasses.replace(F32_SPEC, name="f32-per-expert",
                                                          expert_layout="per_expert", shards=3)):
        d = str(root / spec.name)
        init.write_checkpoint(spec, d)
        out[spec.name] = (d, Model.from_dir(d))
    return out


def _x(model, layer, T=40, seed=5):
    """Post-norm rows of a real forward (the MoE block's input) for layer `layer`."""
    tr = {}
    toks = np.random.RandomState(seed).randint(0, model.cfg.vocab_size, T)
    model.forward(toks, model.new_state(), moe_trace=tr)
    h = torch.from_numpy(tr["moe_in"][layer])
    W = model.W["layers.%d.post_attention_layernorm.weight" % layer]
    return rms_norm_1p(h, W, model.cfg.rms_norm_eps), tr


@pytest.mark.parametrize("name", [F32_SPEC.name, BF16_SPEC.name])
@pytest.mark.parametrize("layer", [0, 3])
def test_block_matches_numpy(models, name, layer):
    _, m = models[name]
    x, _ = _x(m, layer)
    p = "layers.%d.mlp." % layer
    got, rec = moe.moe_block(x, m.W, p, m.cfg)
    want, ids, w, margins = numpy_moe(x.numpy(), m.W, p, m.cfg.num_experts_per_tok)
    assert np.abs(got.numpy() - want).max() < 1e-12 * max(1.0, np.abs(want).max())
    assert np.array_equal(rec["ids"].numpy(), ids)
    assert np.abs(rec["weights"].numpy() - w).max() < 1e-14
    assert np.abs(rec["margins"].numpy() - margins).max() < 1e-14
    assert np.abs(want).max() > 0.1   # not a degenerate (all-zero) block


@pytest.mark.parametrize("fault", ["no_renorm", "gate_on_sum", "wrong_topk"])
def test_faults_change_the_output(models, fault):
    _, m = models[F32_SPEC.name]
    x, _ = _x(m, 1)
    got, _ = moe.moe_block(x, m.W, "layers.1.mlp.", m.cfg)
    bad, _, _, _ = numpy_moe(x.numpy(), m.W, "layers.1.mlp.", 2, fault=fault)
    # far above the 1e-12 agreement of the faithful implementation (and a float32 runtime's noise)
    assert np.abs(got.numpy() - bad).max() > 1e-2


def test_renormalisation_and_spread(models):
    _, m = models[F32_SPEC.name]
    x, _ = _x(m, 2, T=200)
    ids, w, margins, probs = moe.route(x, m.W["layers.2.mlp.gate.weight"], 2)
    assert torch.allclose(w.sum(-1), torch.ones(200, dtype=torch.float64), atol=1e-15)
    # = a softmax over the selected logits only (the spec's equivalent form)
    logits = x @ m.W["layers.2.mlp.gate.weight"].T
    assert torch.allclose(w, torch.softmax(logits.gather(1, ids), -1), atol=1e-15)
    assert bool((w[:, 0] >= w[:, 1]).all())          # descending probability
    assert bool((probs.gather(1, ids)[:, 0] < 0.999).all())  # no expert takes everything ...
    assert len(set(ids.flatten().tolist())) == 8      # ... and every expert is used
    assert float((w[:, 0] / probs.gather(1, ids)[:, 0]).min()) > 1.0 + 1e-3  # renorm matters


def test_shared_gate_on_the_shared_expert_only(models):
    _, m = models[F32_SPEC.name]
    x, _ = _x(m, 0)
    p = "layers.0.mlp."
    out, rec = moe.moe_block(x, m.W, p, m.cfg)
    routed = moe.routed_experts(x, rec["ids"], rec["weights"], m.W[p + "experts.gate_up_proj"],
                                m.W[p + "experts.down_proj"])
    s = moe.swiglu(x, m.W[p + "shared_expert.gate_proj.weight"],
                   m.W[p + "shared_expert.up_proj.weight"], m.W[p + "shared_expert.down_proj.weight"])
    gate = torch.sigmoid(x @ m.W[p + "shared_expert_gate.weight"].T)
    assert torch.allclose(out - routed, s * gate, atol=1e-13)
    assert 0.05 < float(gate.min()) and float(gate.max()) < 0.95 and float(gate.std()) > 0.02


def test_both_layouts_load_the_same_model(models):
    d1, m1 = models[F32_SPEC.name]
    d2, m2 = models["f32-per-expert"]
    names = set()
    for path in checkpoint.weight_files(d2):
        names |= set(safetensors.read(path))
    assert "model.language_model.layers.0.mlp.experts.7.down_proj.weight" in names
    assert not any(n.endswith("experts.gate_up_proj") for n in names)
    assert sorted(m1.W) == sorted(m2.W)
    for n in m1.W:
        assert torch.equal(m1.W[n], m2.W[n]), n
    fused = [n for n in safetensors.read(os.path.join(d1, "model.safetensors"))
             if "layers.0.mlp." in n]
    assert "model.language_model.layers.0.mlp.experts.gate_up_proj" in fused
    assert m1.W["layers.0.mlp.experts.gate_up_proj"].shape == (8, 32, 32)
    assert m1.W["layers.0.mlp.experts.down_proj"].shape == (8, 32, 16)


def test_router_record_of_a_forward(models):
    _, m = models[BF16_SPEC.name]
    x3, tr = _x(m, 3, T=30)
    L, T, k = 4, 30, 2
    assert tr["moe_in"].shape == (L, T, 32) and tr["topk_ids"].shape == (L, T, k)
    assert tr["topk_weights"].shape == (L, T, k) and tr["router_margins"].shape == (L, T)
    _, ids, w, margins = numpy_moe(x3.numpy(), m.W, "layers.3.mlp.", k)
    assert np.array_equal(tr["topk_ids"][3], ids)
    assert np.abs(tr["topk_weights"][3] - w).max() < 1e-14
    assert np.abs(tr["router_margins"][3] - margins).max() < 1e-14
    # decode (one token at a time) records the same decisions as the prefill of the same tokens
    toks = np.random.RandomState(5).randint(0, 256, T)
    st = m.new_state()
    m.forward(toks[:20], st)
    one = {}
    m.forward(toks[20:21], st, moe_trace=one)
    assert np.array_equal(one["topk_ids"][:, 0], tr["topk_ids"][:, 20])


# ------------------------------------------------------------------------------------------------
# Goldens
# ------------------------------------------------------------------------------------------------

_GOLDENS = {}


def _golden(name, tmp_path_factory, models):
    """The committed golden when the fixture is committed, else a freshly generated one."""
    path = os.path.join(FIXTURES, name, "golden.h5")
    if os.path.exists(path):
        return path
    if name not in _GOLDENS:
        d = models[name][0]
        _GOLDENS[name] = str(tmp_path_factory.mktemp("g") / "golden.h5")
        seed = [s.seed for s in fixtures.MOE if s.name == name][0]
        goldens.generate(d, _GOLDENS[name], seed, model=models[name][1])
    return _GOLDENS[name]


@pytest.mark.parametrize("name", [F32_SPEC.name, BF16_SPEC.name])
def test_golden_router_datasets(models, tmp_path_factory, name):
    """Shapes, the threshold, every margin >= it, and the stored ids / weights / margins
    recomputed (numpy) from the stored float32 moe_in: the margins make them robust."""
    path = _golden(name, tmp_path_factory, models)
    m = models[name][1]
    with h5py.File(path, "r") as f:
        thr = float(f.attrs["router_margin_threshold"])
        assert thr == goldens.ROUTER_MARGIN_THRESHOLD
        assert sorted(f["cases"]) == sorted(c.name for c in goldens.default_cases())
        for c in goldens.default_cases():
            g = f["cases/" + c.name]
            for ph, n in (("prefill", c.n_tokens), ("decode", c.n_decode)):
                ids = g[ph + "/router/topk_ids"][()]
                w = g[ph + "/router/topk_weights"][()]
                mg = g[ph + "/router/margins"][()]
                mi = g[ph + "/moe_in"][()]
                assert ids.dtype == np.int32 and w.dtype == mg.dtype == mi.dtype == np.float32
                assert ids.shape == w.shape == (4, n, 2) and mg.shape == (4, n)
                assert mi.shape == (4, n, 32)
                assert mg.min() >= thr
                for layer in (0, 3):
                    x = rms_norm_1p(torch.from_numpy(mi[layer].astype(np.float64)),
                                    m.W["layers.%d.post_attention_layernorm.weight" % layer],
                                    m.cfg.rms_norm_eps)
                    _, i2, w2, m2 = numpy_moe(x.numpy(), m.W, "layers.%d.mlp." % layer, 2)
                    assert np.array_equal(ids[layer], i2), (c.name, ph, layer)
                    assert np.abs(w[layer] - w2).max() < 1e-4
                    assert np.abs(mg[layer] - m2).max() < 1e-4
            # moe_in is the residual after the mixer: layer 0's differs from the embedding
            assert np.abs(g["prefill/moe_in"][0] - g["prefill/hidden"][0]).max() > 1e-3


def test_dense_golden_has_no_moe_datasets():
    with h5py.File(os.path.join(FIXTURES, "tiny-f32-tied-flat", "golden.h5"), "r") as f:
        assert "router_margin_threshold" not in f.attrs
        assert "router" not in f["cases/len005/prefill"] and "moe_in" not in f["cases/len005/prefill"]


# ------------------------------------------------------------------------------------------------
# Bad MoE configs and checkpoints
# ------------------------------------------------------------------------------------------------

def _cfg(spec=F32_SPEC):
    return json.loads(init.config_text(spec))


@pytest.mark.parametrize("field,value,needle", [
    ("num_experts_per_tok", 9, "num_experts_per_tok = 9 is more than num_experts = 8"),
    ("num_experts", 0, "num_experts = 0"),
    ("num_experts", None, "missing field num_experts"),
    ("moe_intermediate_size", -4, "moe_intermediate_size = -4"),
    ("shared_expert_intermediate_size", "24", "shared_expert_intermediate_size = '24'"),
    ("norm_topk_prob", False, "norm_topk_prob"),
    ("mlp_only_layers", [1], "mlp_only_layers"),
])
def test_bad_moe_config(field, value, needle):
    c = _cfg()
    tc = c["text_config"]
    if value is None:
        del tc[field]
    else:
        tc[field] = value
    with pytest.raises(qconfig.ConfigError) as e:
        qconfig.parse(c, "m/config.json")
    assert needle in str(e.value) and "m/config.json: text_config" in str(e.value)


def test_moe_config_fields():
    c = qconfig.parse(_cfg(), "x")
    assert (c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size,
            c.shared_expert_intermediate_size, c.intermediate_size) == (8, 2, 16, 24, 0)
    assert c.is_moe and not qconfig.parse(_cfg(fixtures.FIXTURES[0]), "x").is_moe
    flat = qconfig.parse(_cfg(BF16_SPEC), "x")
    assert flat.is_moe and not flat.nested


def _rewrite(src, dst, edit):
    """Copy a single-file checkpoint with edit({name: (dtype, array)}) applied."""
    os.makedirs(dst)
    with open(os.path.join(src, "config.json"), "rb") as f:
        cfg = f.read()
    with open(os.path.join(dst, "config.json"), "wb") as f:
        f.write(cfg)
    t = safetensors.read(os.path.join(src, "model.safetensors"))
    edit(t)
    safetensors.write(os.path.join(dst, "model.safetensors"),
                      [(n, d, a) for n, (d, a) in t.items()])
    return dst


P0 = "model.language_model.layers.0.mlp."


@pytest.mark.parametrize("what,edit,needle", [
    ("router E", lambda t: t.__setitem__(P0 + "gate.weight", ("F32", t[P0 + "gate.weight"][1][:7])),
     "layers.0.mlp.gate.weight: shape [7, 32] != [8, 32]"),
    ("shared gate", lambda t: t.__setitem__(P0 + "shared_expert_gate.weight",
                                            ("F32", np.zeros((2, 32), np.float32))),
     "layers.0.mlp.shared_expert_gate.weight: shape [2, 32] != [1, 32]"),
    ("missing fused", lambda t: t.pop(P0 + "experts.down_proj"),
     "missing tensor layers.0.mlp.experts.down_proj"),
    ("both layouts", lambda t: t.__setitem__(P0 + "experts.3.up_proj.weight",
                                             ("F32", np.zeros((16, 32), np.float32))),
     "the per-expert layout"),
    ("dense tensor", lambda t: t.__setitem__(P0 + "up_proj.weight",
                                             ("F32", np.zeros((16, 32), np.float32))),
     "layers.0.mlp.up_proj.weight: unknown tensor"),
])
def test_bad_fused_checkpoint(models, tmp_path, what, edit, needle):
    d = _rewrite(models[F32_SPEC.name][0], str(tmp_path / "m"), edit)
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.load(d)
    assert needle in str(e.value), what


def test_bad_per_expert_checkpoint(models, tmp_path):
    src = models["f32-per-expert"][0]
    tensors = {}
    for path in checkpoint.weight_files(src):
        tensors.update(safetensors.read(path))
    P = P0
    for edit, needle in [
            (lambda t: t.pop(P + "experts.5.gate_proj.weight"),
             "missing tensor layers.0.mlp.experts.5.gate_proj.weight (per-expert layout, 8 experts)"),
            (lambda t: t.__setitem__(P + "experts.8.gate_proj.weight", t[P + "experts.0.gate_proj.weight"]),
             "layers.0.mlp.experts.8.gate_proj.weight: unknown tensor (num_experts is 8)"),
            (lambda t: t.__setitem__(P + "experts.2.down_proj.weight",
                                     ("F32", np.zeros((16, 32), np.float32))),
             "layers.0.mlp.experts.2.down_proj.weight: shape [16, 32] != [32, 16]")]:
        d = str(tmp_path / ("m%d" % len(os.listdir(str(tmp_path)))))
        os.makedirs(d)
        with open(os.path.join(src, "config.json"), "rb") as f:
            cb = f.read()
        with open(os.path.join(d, "config.json"), "wb") as f:
            f.write(cb)
        t = copy.copy(tensors)
        edit(t)
        safetensors.write(os.path.join(d, "model.safetensors"), [(n, dt, a) for n, (dt, a) in t.items()])
        with pytest.raises(checkpoint.CheckpointError) as e:
            checkpoint.load(d)
        assert needle in str(e.value)


def test_dense_config_with_moe_tensors(tmp_path):
    spec = fixtures.FIXTURES[0]
    d = str(tmp_path / "dense")
    init.write_checkpoint(spec, d)
    t = safetensors.read(os.path.join(d, "model.safetensors"))
    t["model.layers.0.mlp.gate.weight"] = ("F32", np.zeros((8, 64), np.float32))
    safetensors.write(os.path.join(d, "model.safetensors"), [(n, dt, a) for n, (dt, a) in t.items()])
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.load(d)
    assert "layers.0.mlp.gate.weight: unknown tensor" in str(e.value)


# ------------------------------------------------------------------------------------------------
# validate.py on MoE goldens
# ------------------------------------------------------------------------------------------------

def test_validate_checks_the_router_datasets(models, tmp_path_factory, tmp_path):
    import shutil
    import validate
    src = _golden(F32_SPEC.name, tmp_path_factory, models)
    assert validate.validate(src, check_model=False) == []
    edits = [
        (lambda f: f["cases/len005/prefill/router/topk_ids"].__setitem__((1, 2, 1), 8),
         "prefill/router/topk_ids: expert id outside [0, 8)"),
        (lambda f: f["cases/len005/decode/router/topk_ids"].__setitem__(
            (0, 3, 1), f["cases/len005/decode/router/topk_ids"][0, 3, 0]),
         "decode/router/topk_ids: an expert chosen twice"),
        (lambda f: f["cases/len002/prefill/router/topk_weights"].__setitem__((0, 0, 0), 0.3),
         "topk_weights: rows are not positive weights summing to 1"),
        (lambda f: f["cases/cont/decode/router/margins"].__setitem__((2, 2), 1e-5),
         "cont/decode/router/margins: min 1e-05 < the root attribute router_margin_threshold"),
        (lambda f: f.__delitem__("cases/len001/prefill/moe_in"), "len001/prefill/moe_in: missing"),
    ]
    for i, (edit, needle) in enumerate(edits):
        p = str(tmp_path / ("g%d.h5" % i))
        shutil.copy(src, p)
        with h5py.File(p, "r+") as f:
            edit(f)
        errs = validate.validate(p, check_model=False)
        assert len(errs) == 1 and needle in errs[0], (needle, errs)
