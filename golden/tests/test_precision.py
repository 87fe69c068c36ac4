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


@pytest.mark.parametrize("bug", sorted(P.BUGS))
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
