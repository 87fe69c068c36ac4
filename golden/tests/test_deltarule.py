"""The gated delta rule: chunked (chunk 64) == token recurrence in float64, and both against
values computed by hand from the equations of docs/qwen35-model.md 8.6 - 8.7."""
import math

import pytest
import torch
import torch.nn.functional as F

from qcgolden import deltarule


def make_inputs(T, nv=4, dk=16, dv=8, seed=0, decay_scale=1.0):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(T, nv, dk, generator=g), dim=-1) * dk ** -0.5
    k = F.normalize(torch.randn(T, nv, dk, generator=g), dim=-1)
    v = torch.randn(T, nv, dv, generator=g)
    beta = torch.sigmoid(torch.randn(T, nv, generator=g))
    # log-decays from very slow (-0.005) to very fast (-8) per step
    gl = -decay_scale * torch.exp(torch.linspace(math.log(0.005), math.log(8.0), nv))[None, :] \
        * torch.rand(T, nv, generator=g) * 2
    S0 = torch.randn(nv, dk, dv, generator=g)
    return q, k, v, gl, beta, S0


@pytest.mark.parametrize("T", [1, 2, 63, 64, 65, 127, 128, 130])
def test_chunked_equals_recurrent_from_nonzero_state(T):
    q, k, v, g, beta, S0 = make_inputs(T, seed=T)
    o_r, S_r = deltarule.recurrent(q, k, v, g, beta, S0)
    o_c, S_c = deltarule.chunked(q, k, v, g, beta, S0)
    assert o_r.shape == (T, 4, 8) and S_r.shape == (4, 16, 8)
    assert (o_r - o_c).abs().max().item() <= 1e-12
    assert (S_r - S_c).abs().max().item() <= 1e-12
    assert o_r.abs().max().item() > 1e-2  # not a trivially zero output


@pytest.mark.parametrize("chunk", [1, 3, 7, 16])
def test_chunk_size_does_not_change_the_result(chunk):
    q, k, v, g, beta, S0 = make_inputs(37, seed=5)
    o_r, S_r = deltarule.recurrent(q, k, v, g, beta, S0)
    o_c, S_c = deltarule.chunked(q, k, v, g, beta, S0, chunk=chunk)
    assert (o_r - o_c).abs().max().item() <= 1e-12
    assert (S_r - S_c).abs().max().item() <= 1e-12


def test_split_calls_continue_the_state():
    q, k, v, g, beta, S0 = make_inputs(100, seed=9)
    o_all, S_all = deltarule.chunked(q, k, v, g, beta, S0)
    o1, S1 = deltarule.chunked(q[:70], k[:70], v[:70], g[:70], beta[:70], S0)
    o2, S2 = deltarule.chunked(q[70:], k[70:], v[70:], g[70:], beta[70:], S1)
    assert (torch.cat([o1, o2]) - o_all).abs().max().item() <= 1e-12
    assert (S2 - S_all).abs().max().item() <= 1e-12


def test_recurrence_by_hand_decay_before_update():
    # one head, dk = 2, dv = 1: S' = e^g S; S = S' + k beta (v - S'^T k); o = S^T q
    S0 = torch.tensor([[[1.0], [2.0]]])
    k = torch.tensor([[[0.6, 0.8]]])
    q = torch.tensor([[[1.0, -1.0]]])
    v = torch.tensor([[[3.0]]])
    g = torch.tensor([[math.log(0.5)]])
    beta = torch.tensor([[0.25]])
    # by hand: S' = [0.5, 1]; S'^T k = 0.3 + 0.8 = 1.1; d = 0.25 * (3 - 1.1) = 0.475
    # S = [0.5 + 0.6*0.475, 1 + 0.8*0.475] = [0.785, 1.38]; o = 0.785 - 1.38 = -0.595
    for rule in (deltarule.recurrent, deltarule.chunked):
        o, S = rule(q, k, v, g, beta, S0)
        assert abs(S[0, 0, 0].item() - 0.785) < 1e-15
        assert abs(S[0, 1, 0].item() - 1.38) < 1e-15
        assert abs(o[0, 0, 0].item() + 0.595) < 1e-15


def test_inputs_not_modified():
    q, k, v, g, beta, S0 = make_inputs(70, seed=3)
    before = [x.clone() for x in (q, k, v, g, beta, S0)]
    deltarule.chunked(q, k, v, g, beta, S0)
    deltarule.recurrent(q, k, v, g, beta, S0)
    for a, b in zip(before, (q, k, v, g, beta, S0)):
        assert torch.equal(a, b)
