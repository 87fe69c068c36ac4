"""The float64 model: blocks against naive per-token / per-head loops written from the doc,
decode with a cache == one full forward, kernel choice, legacy packed == split twin."""
import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import FIXTURES
from qcgolden import checkpoint, init
from qcgolden import config as qconfig
from qcgolden import fixtures
from qcgolden import model as M

FIXTURE_NAMES = [s.name for s in fixtures.FIXTURES]


def load(name):
    return M.Model.from_dir(os.path.join(FIXTURES, name, "model"))


def tokens(model, n, seed=0):
    return np.random.RandomState(seed).randint(0, model.cfg.vocab_size, size=n)


# ------------------------------------------------------------------------------------------------
# Blocks, checked against hand computations
# ------------------------------------------------------------------------------------------------

def test_rms_norm_zero_centred_and_gated():
    x = torch.tensor([3.0, 4.0])                       # mean(x^2) = 12.5
    w = torch.tensor([0.5, -0.25])
    r = 1.0 / math.sqrt(12.5 + 1e-6)
    y = M.rms_norm_1p(x, w, 1e-6)
    assert torch.allclose(y, torch.tensor([3 * r * 1.5, 4 * r * 0.75]), rtol=0, atol=1e-15)
    z = torch.tensor([1.0, -2.0])
    silu = z / (1 + torch.exp(-z))
    yg = M.rms_norm_gated(x, w, z, 1e-6)              # plain w, no +1
    assert torch.allclose(yg, torch.tensor([3 * r * 0.5, 4 * r * -0.25]) * silu, rtol=0, atol=1e-15)


def test_l2norm_fixed_eps():
    x = torch.tensor([3.0, 4.0])
    assert torch.allclose(M.l2norm(x), x / math.sqrt(25 + 1e-6), rtol=0, atol=1e-16)


def test_rope_rotate_half_pairs_partial():
    hd, rd, theta, pos = 8, 4, 10000.0, 3
    x = torch.arange(1.0, hd + 1).view(1, 1, hd)
    cos, sin = M.rope_cos_sin(torch.tensor([pos]), rd, theta)
    y = M.apply_rope(x, cos, sin)[0, 0]
    want = x[0, 0].clone()
    for i in range(rd // 2):                           # pairs (i, i + rd/2), angle pos * theta^(-2i/rd)
        a = pos * theta ** (-2.0 * i / rd)
        x1, x2 = x[0, 0, i].item(), x[0, 0, i + rd // 2].item()
        want[i] = x1 * math.cos(a) - x2 * math.sin(a)
        want[i + rd // 2] = x2 * math.cos(a) + x1 * math.sin(a)
    assert torch.allclose(y, want, rtol=0, atol=1e-14)
    assert torch.equal(y[rd:], x[0, 0, rd:])           # the rest passes through


def test_causal_conv_matches_conv1d_and_continues_state():
    C, K, T = 5, 4, 9
    g = torch.Generator().manual_seed(1)
    x = torch.randn(T, C, generator=g)
    w = torch.randn(C, 1, K, generator=g)
    ref = F.conv1d(x.T[None], w, padding=K - 1, groups=C)[0, :, :T].T   # zero left padding
    y, st = M.causal_conv(x, w, torch.zeros(C, K))
    assert torch.allclose(y, ref, rtol=0, atol=1e-14)
    assert torch.equal(st, x[-K:].T)                   # last K raw columns, oldest first
    y1, s1 = M.causal_conv(x[:2], w, torch.zeros(C, K))
    assert torch.equal(s1[:, :2], torch.zeros(C, 2)) and torch.equal(s1[:, 2:], x[:2].T)
    y2, s2 = M.causal_conv(x[2:], w, s1)
    assert torch.allclose(torch.cat([y1, y2]), ref, rtol=0, atol=1e-14)
    assert torch.equal(s2, st)


# ------------------------------------------------------------------------------------------------
# Whole layers against naive loops (explicit head mapping, per-token recurrence)
# ------------------------------------------------------------------------------------------------

def naive_deltanet(u, W, p, cfg):
    """Per token, per value head, written from docs/qwen35-model.md 8 with explicit loops."""
    T = u.shape[0]
    nk, nv, dk, dv, K = (cfg.linear_num_key_heads, cfg.linear_num_value_heads,
                         cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.linear_conv_kernel_dim)
    mixed = u @ W[p + "in_proj_qkv.weight"].T
    cw = W[p + "conv1d.weight"][:, 0, :]
    conv = torch.zeros_like(mixed)
    for t in range(T):
        for j in range(K):
            src = t - (K - 1) + j
            if src >= 0:
                conv[t] += cw[:, j] * mixed[src]
    y = conv * torch.sigmoid(conv)
    S = torch.zeros(nv, dk, dv)
    out = torch.zeros(T, nv * dv)
    for t in range(T):
        b = u[t] @ W[p + "in_proj_b.weight"].T
        a = u[t] @ W[p + "in_proj_a.weight"].T
        z = u[t] @ W[p + "in_proj_z.weight"].T
        for j in range(nv):
            kh = j // (nv // nk)                                   # value head j -> key head j div r
            q = y[t, kh * dk:(kh + 1) * dk]
            k = y[t, nk * dk + kh * dk: nk * dk + (kh + 1) * dk]
            v = y[t, 2 * nk * dk + j * dv: 2 * nk * dk + (j + 1) * dv]
            q = q / torch.sqrt((q * q).sum() + 1e-6) / math.sqrt(dk)
            k = k / torch.sqrt((k * k).sum() + 1e-6)
            x = a[j] + W[p + "dt_bias"][j]
            sp = x if x > 20 else torch.log(1 + torch.exp(x))
            gj = -torch.exp(W[p + "A_log"][j]) * sp
            beta = 1 / (1 + torch.exp(-b[j]))
            S[j] = torch.exp(gj) * S[j]
            d = beta * (v - S[j].T @ k)
            S[j] = S[j] + torch.outer(k, d)
            o = S[j].T @ q
            o = o / torch.sqrt((o * o).mean() + cfg.rms_norm_eps) * W[p + "norm.weight"]
            zj = z[j * dv:(j + 1) * dv]
            out[t, j * dv:(j + 1) * dv] = o * zj * torch.sigmoid(zj)
    return out @ W[p + "out_proj.weight"].T, S


def naive_attention(u, W, p, cfg):
    """Per query head, per position, written from docs/qwen35-model.md 7 with explicit loops."""
    T = u.shape[0]
    nh, nkv, hd, rd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.rotary_dim
    qg = u @ W[p + "q_proj.weight"].T
    kk = u @ W[p + "k_proj.weight"].T
    vv = u @ W[p + "v_proj.weight"].T

    def norm1p(x, w):
        return x / torch.sqrt((x * x).mean() + cfg.rms_norm_eps) * (1 + w)

    def rope(x, pos):
        y = x.clone()
        for i in range(rd // 2):
            ang = pos * cfg.rope_theta ** (-2.0 * i / rd)
            y[i] = x[i] * math.cos(ang) - x[i + rd // 2] * math.sin(ang)
            y[i + rd // 2] = x[i + rd // 2] * math.cos(ang) + x[i] * math.sin(ang)
        return y

    keys = [[rope(norm1p(kk[t, h * hd:(h + 1) * hd], W[p + "k_norm.weight"]), t) for t in range(T)]
            for h in range(nkv)]
    out = torch.zeros(T, nh * hd)
    for h in range(nh):
        kvh = h // (nh // nkv)
        for t in range(T):
            q = rope(norm1p(qg[t, h * 2 * hd: h * 2 * hd + hd], W[p + "q_norm.weight"]), t)
            gate = qg[t, h * 2 * hd + hd: (h + 1) * 2 * hd]
            s = torch.stack([q @ keys[kvh][j] / math.sqrt(hd) for j in range(t + 1)])
            pr = torch.softmax(s, 0)
            o = sum(pr[j] * vv[j, kvh * hd:(kvh + 1) * hd] for j in range(t + 1))
            out[t, h * hd:(h + 1) * hd] = o * torch.sigmoid(gate)
    return out @ W[p + "o_proj.weight"].T


@pytest.mark.parametrize("name", ["tiny-bf16-gva-nested", "tiny-rope-legacy-8layer", "tiny-f16-sharded"])
def test_layers_against_naive_loops(name):
    m = load(name)
    cfg = m.cfg
    u = torch.randn(7, cfg.hidden_size, generator=torch.Generator().manual_seed(4))
    for i, kind in enumerate(cfg.layer_types[:4]):
        st = m.new_state().layers[i]
        if kind == qconfig.LINEAR:
            p = "layers.%d.linear_attn." % i
            ref, S = naive_deltanet(u, m.W, p, cfg)
            got = M.gated_deltanet(u, m.W, p, cfg, st, "auto")
            assert (st["recurrent_state"] - S).abs().max().item() <= 1e-12
        else:
            p = "layers.%d.self_attn." % i
            ref = naive_attention(u, m.W, p, cfg)
            got = M.gated_attention(u, m.W, p, cfg, st, torch.arange(7))
        assert (got - ref).abs().max().item() <= 1e-12, (name, i, kind)


# ------------------------------------------------------------------------------------------------
# Cache semantics
# ------------------------------------------------------------------------------------------------

def state_diff(a, b):
    d = 0.0
    for la, lb in zip(a.layers, b.layers):
        for k in la:
            if torch.is_tensor(la[k]):
                assert la[k].shape == lb[k].shape, k
                d = max(d, (la[k] - lb[k]).abs().max().item())
    return d


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_decode_with_cache_equals_full_forward(name):
    m = load(name)
    ids = tokens(m, 75, seed=1)
    full_state = m.new_state()
    full, _ = m.forward(ids, full_state)
    st = m.new_state()
    parts = [m.forward(ids[:66], st)[0]]              # prefill (chunked, 2 chunks)
    for t in ids[66:]:                                # decode, one token at a time (recurrent)
        parts.append(m.forward([t], st)[0])
    assert st.pos == 75
    assert (torch.cat(parts) - full).abs().max().item() <= 1e-12
    assert state_diff(st, full_state) <= 1e-12


def test_continuation_prefill_equals_full_forward():
    m = load("tiny-f32-tied-flat")
    ids = tokens(m, 140, seed=2)
    full, _ = m.forward(ids, m.new_state())
    st = m.new_state()
    a, _ = m.forward(ids[:45], st)
    b, _ = m.forward(ids[45:], st)                     # start_pos 45, from the cached state
    assert (torch.cat([a, b]) - full).abs().max().item() <= 1e-12


def test_recurrent_everywhere_equals_chunked():
    m = load("tiny-bf16-gva-nested")
    ids = tokens(m, 130, seed=3)
    s1, s2 = m.new_state(), m.new_state()
    a, h1 = m.forward(ids, s1, kernel="chunk", collect_hidden=True)
    b, h2 = m.forward(ids, s2, kernel="recurrent", collect_hidden=True)
    assert (a - b).abs().max().item() <= 1e-12
    assert (h1 - h2).abs().max().item() <= 1e-12
    assert state_diff(s1, s2) <= 1e-12


def test_hidden_states_convention():
    m = load("tiny-f32-tied-flat")
    ids = tokens(m, 5)
    logits, hidden = m.forward(ids, m.new_state(), collect_hidden=True)
    L = m.cfg.num_hidden_layers
    assert hidden.shape == (L + 1, 5, m.cfg.hidden_size)
    assert torch.equal(hidden[0], m.W["embed_tokens.weight"][torch.as_tensor(ids)])
    # [L] is the final-norm output: unit RMS before the (1 + w) scale, and logits = hidden[L] E^T
    assert torch.allclose(logits, hidden[L] @ m.W["embed_tokens.weight"].T, rtol=0, atol=1e-12)
    unscaled = hidden[L] / (1 + m.W["norm.weight"])
    assert torch.allclose(unscaled.pow(2).mean(-1), torch.ones(5), atol=1e-5)


def test_forward_rejects_bad_tokens():
    m = load("tiny-f32-tied-flat")
    with pytest.raises(ValueError):
        m.forward([m.cfg.vocab_size], m.new_state())
    with pytest.raises(ValueError):
        m.forward([], m.new_state())


# ------------------------------------------------------------------------------------------------
# Legacy packed layout
# ------------------------------------------------------------------------------------------------

def test_pack_split_roundtrip_grouped_layout():
    cfg = fixtures.by_name("tiny-legacy-packed").text_config()
    r = cfg.linear_num_value_heads // cfg.linear_num_key_heads
    assert r == 2
    H = 3
    qkv = np.arange(cfg.conv_dim * H, dtype=np.float64).reshape(cfg.conv_dim, H)
    z = -np.arange(cfg.value_dim * H, dtype=np.float64).reshape(cfg.value_dim, H)
    packed = checkpoint.pack_qkvz(qkv, z, cfg)
    # group g = 1 starts with q rows of key head 1, then its k rows, then value heads 2 and 3
    dk, dv, kd = cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.key_dim
    g1 = packed[(2 * dk + 2 * r * dv):]
    assert np.array_equal(g1[:dk], qkv[dk:2 * dk])
    assert np.array_equal(g1[dk:2 * dk], qkv[kd + dk:kd + 2 * dk])
    assert np.array_equal(g1[2 * dk:2 * dk + r * dv], qkv[2 * kd + 2 * dv:2 * kd + 4 * dv])
    assert np.array_equal(g1[2 * dk + r * dv:], z[2 * dv:4 * dv])
    q2, z2 = checkpoint.split_qkvz(packed, cfg)
    assert np.array_equal(q2, qkv) and np.array_equal(z2, z)
    b = np.arange(4 * H, dtype=np.float64).reshape(4, H)
    a = -b
    ba = checkpoint.pack_ba(b, a, cfg)
    assert np.array_equal(ba[:2], b[:2]) and np.array_equal(ba[2:4], a[:2])
    b2, a2 = checkpoint.split_ba(ba, cfg)
    assert np.array_equal(b2, b) and np.array_equal(a2, a)


def test_legacy_packed_equals_split_twin(tmp_path):
    spec = fixtures.by_name("tiny-legacy-packed")
    twin = init.ModelSpec(**{**spec.__dict__, "legacy_packed": False, "name": "twin"})
    init.write_checkpoint(twin, str(tmp_path))
    packed_dir = os.path.join(FIXTURES, spec.name, "model")
    names = checkpoint.safetensors.read(os.path.join(packed_dir, "model.safetensors"))
    assert any(n.endswith("in_proj_qkvz.weight") for n in names)
    assert not any(n.endswith("in_proj_qkv.weight") for n in names)
    a, b = M.Model.from_dir(packed_dir), M.Model.from_dir(str(tmp_path))
    assert sorted(a.W) == sorted(b.W)
    for n in a.W:
        assert torch.equal(a.W[n], b.W[n]), n
    ids = tokens(a, 70, seed=7)
    la, _ = a.forward(ids, a.new_state())
    lb, _ = b.forward(ids, b.new_state())
    assert torch.equal(la, lb)
