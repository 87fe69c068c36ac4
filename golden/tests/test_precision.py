"""The reduced-precision simulation (qcgolden/precision.py) and the tier metrics
(precision_run.py): llama.cpp's Q8_0 / Q4_0 round trips on hand-checked blocks, the storage
roundings, the injected bugs, and the metric definitions the harness shares."""
import numpy as np
import pytest
import torch

from conftest import FIXTURES
from qcgolden import checkpoint, precision as P, precision_run as pr


def test_q8_0_block():
    # one block: amax 127 -> d = 1, every value rounds to the nearest integer
    x = torch.tensor([[127.0] + [float(i) + 0.3 for i in range(31)]], dtype=torch.float64)
    q = P.quant_q8_0(x)
    assert q[0, 0] == 127.0 and q[0, 1] == 0.0 and q[0, 31] == 30.0
    # d = 2 / 127: error at most d / 2 (+ the f16 rounding of d)
    y = torch.linspace(-2, 2, 64, dtype=torch.float64).reshape(1, 64)
    err = (P.quant_q8_0(y) - y).abs().max().item()
    assert 0 < err <= (2 / 127) / 2 * 1.01


def test_q4_0_block():
    # the signed value of largest magnitude m = -8 -> d = 1: q = min(15, trunc(x + 8.5)) - 8
    x = torch.tensor([[-8.0, 7.0, 7.6, 0.4, -0.6] + [0.0] * 27], dtype=torch.float64)
    q = P.quant_q4_0(x)
    assert q[0, :5].tolist() == [-8.0, 7.0, 7.0, 0.0, -1.0]
    # m = +8 -> d = -1: 8 itself maps to q = 0 -> -8 * -1 = 8
    x2 = torch.tensor([[8.0, -7.0, 1.2] + [0.0] * 29], dtype=torch.float64)
    assert P.quant_q4_0(x2)[0, :3].tolist() == [8.0, -7.0, 1.0]


def test_round_weights_fallback_and_1d():
    W = {"a.weight": torch.randn(4, 64, dtype=torch.float64),
         "b.weight": torch.randn(4, 48, dtype=torch.float64),     # 48 % 32 != 0: f16
         "n.weight": torch.randn(64, dtype=torch.float64)}
    W2, fb = P.round_weights(W, "q8_0")
    assert fb == ["b.weight"]
    assert torch.equal(W2["b.weight"], W["b.weight"].half().double())
    assert torch.equal(W2["n.weight"], W["n.weight"].float().double())
    assert not torch.equal(W2["a.weight"], W["a.weight"].float().double())


def test_kv_cache_rounded_on_write():
    cfg, W, _ = checkpoint.load(FIXTURES + "/tiny-f32-tied-flat/model")
    m = P.SimModel(cfg, W, "f16-kv")
    st = m.new_state()
    m.forward([1, 2, 3], st)
    k = st.layers[3]["k_cache"]
    assert k.shape[1] == 3 and torch.equal(k, k.half().double())
    rs = st.layers[0]["recurrent_state"]
    assert torch.equal(rs, rs.float().double()) and not torch.equal(rs, rs.half().double())


@pytest.mark.parametrize("bug", sorted(b for b in P.BUGS if not b.startswith("moe-")))
def test_bugs_change_the_logits(bug):
    cfg, W, _ = checkpoint.load(FIXTURES + "/tiny-f32-tied-flat/model")
    ok = P.SimModel(cfg, W, "f16-kv").forward(list(range(8)), P.SimModel(cfg, W, "f16-kv")
                                              .new_state())[0]
    m = P.SimModel(cfg, W, "f16-kv", bug)
    bad = m.forward(list(range(8)), m.new_state())[0]
    assert (ok - bad).abs().max().item() > 1e-3


def test_metrics():
    g = np.array([[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]], np.float32)
    assert np.allclose(pr.kl_rows(g, g), 0.0)
    a = g.copy()
    a[0, 4], a[0, 5] = 5.0, 4.0          # row 0: argmax flips (golden margin 1)
    assert pr.top1_flips(g, a).tolist() == [1.0]
    assert pr.topk_overlap(g, a, 5).tolist() == [1.0, 1.0]
    assert pr.kl_rows(g, a)[0] > 0 and pr.kl_rows(g, a)[1] == 0
    assert pr.p99(list(range(1, 101))) == 99.0 and pr.p99([3.0]) == 3.0
    assert pr._r125(0.011) == 0.02 and pr._r125(0.2) == 0.2 and pr._r125(3) == 5


# ------------------------------------------------------------------------------------------------
# MoE: the expert stacks, router and shared expert; the moe-no-renorm bug
# ------------------------------------------------------------------------------------------------

MOE = FIXTURES + "/tiny-moe-f32-nested"


def test_round_weights_moe():
    cfg, W, _ = checkpoint.load(MOE + "/model")
    W8, fb = P.round_weights(W, "q8_0")
    gu, dn = "layers.0.mlp.experts.gate_up_proj", "layers.0.mlp.experts.down_proj"
    # gate_up [E, 2Ie, H=32]: Q8_0 per expert along H (each expert as its own matrix)
    assert torch.equal(W8[gu][3], P.quant_q8_0(W[gu][3]))
    assert not torch.equal(W8[gu], W[gu].float().double())
    # down [E, H, Ie=16]: 16 % 32 != 0 -> f16, as the shared expert's down (input 24)
    assert dn in fb and torch.equal(W8[dn], W[dn].half().double())
    assert "layers.0.mlp.shared_expert.down_proj.weight" in fb
    sg = "layers.0.mlp.shared_expert.gate_proj.weight"
    assert torch.equal(W8[sg], P.quant_q8_0(W[sg]))
    # the router and the shared-expert gate stay f32 under Q8_0 / Q4_0 (llama.cpp), bf16 under bf16
    for n in ("layers.0.mlp.gate.weight", "layers.0.mlp.shared_expert_gate.weight"):
        assert torch.equal(W8[n], W[n].float().double())
        assert torch.equal(P.round_weights(W, "bf16")[0][n], W[n].bfloat16().double())


def test_moe_no_renorm():
    cfg, W, _ = checkpoint.load(MOE + "/model")
    toks = list(range(1, 9))
    tr_ok, tr_bad = {}, {}
    ok = P.SimModel(cfg, W, "f16-kv")
    lo = ok.forward(toks, ok.new_state(), moe_trace=tr_ok)[0]
    bad = P.SimModel(cfg, W, "f16-kv", "moe-no-renorm")
    lb = bad.forward(toks, bad.new_state(), moe_trace=tr_bad)[0]
    assert np.allclose(tr_ok["topk_weights"].sum(-1), 1.0)
    s = tr_bad["topk_weights"].sum(-1)           # the selected experts' softmax mass
    assert (s < 0.999).all() and (s > 0).all()
    assert (tr_ok["topk_ids"][0] == tr_bad["topk_ids"][0]).all()   # layer 0: same inputs
    assert (lo - lb).abs().max().item() > 1e-2
    # the patch is scoped to the bug model's forward
    assert np.allclose(ok.forward(toks, ok.new_state())[0].numpy(), lo.numpy())
    with pytest.raises(ValueError, match="not a MoE model"):
        cfg2, W2, _ = checkpoint.load(FIXTURES + "/tiny-f32-tied-flat/model")
        P.SimModel(cfg2, W2, "int8", "moe-no-renorm")


def test_moe_bf16_rounds_the_moe_output():
    cfg, W, _ = checkpoint.load(MOE + "/model")
    seen = []
    m = P.SimModel(cfg, W, "bf16")
    real = P.qmoe.moe_block
    with P._rounded_activations("bf16"):
        out, _ = P.qmoe.moe_block(torch.randn(3, 32, dtype=torch.float64), m.W, "layers.0.mlp.",
                                  cfg)
        seen.append(out)
    assert P.qmoe.moe_block is real
    assert torch.equal(seen[0], seen[0].bfloat16().double())
