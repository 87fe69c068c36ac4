"""What the helper does with state() for the adapter author (qwen_conform_adapter/state.py):
KV caches padded to n_pos, Hugging Face cache layouts converted (batch 1 or none, flat, nested or
HF-style per-layer lists), a clear error for a shape that fits nothing, and the default
fill_state announced only when state() returns writable views of the runtime's own buffers."""
import json

import numpy as np
import pytest
import torch

import qca_testutil  # noqa: F401 - puts the helper package on sys.path

from qwen_conform_adapter import Runtime
from test_protocol import converse, opened

# layer 0 Gated DeltaNet, layer 1 full attention; every dim distinct enough to tell layouts apart:
# KV [nkv 2, N, hd 3]; conv [C 10, K 4] (C = 2*nk*dk + nv*dv = 2*1*2 + 2*3); recurrent [2, 2, 3]
CFG = {"vocab_size": 8, "hidden_size": 4, "num_hidden_layers": 2,
       "layer_types": ["linear_attention", "full_attention"], "num_key_value_heads": 2,
       "head_dim": 3, "linear_num_key_heads": 1, "linear_key_head_dim": 2,
       "linear_num_value_heads": 2, "linear_value_head_dim": 3, "linear_conv_kernel_dim": 4}
NAMES = ["layer_00/conv_state", "layer_00/recurrent_state", "layer_01/k_cache", "layer_01/v_cache"]


@pytest.fixture
def mdir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CFG))
    return str(tmp_path)


class Buffers(Runtime):
    """A runtime with real buffers: KV of capacity 16 filled up to self.pos, conv, recurrent.
    `layout(name, array, filled)` decides what state() shows of each (override per test)."""
    name = "buffers"

    def reset(self):
        self.k = np.zeros((2, 16, 3), np.float32)
        self.v = np.zeros((2, 16, 3), np.float32)
        self.conv = np.zeros((10, 4), np.float32)
        self.rec = np.zeros((2, 2, 3), np.float32)
        self.pos = 0

    def forward(self, tokens, start_pos):
        n = len(tokens)
        for p in range(start_pos, start_pos + n):     # recognisable values per position
            self.k[:, p] = 1 + p + np.arange(6, dtype=np.float32).reshape(2, 3) / 8
            self.v[:, p] = -1 - p - np.arange(6, dtype=np.float32).reshape(2, 3) / 8
        self.conv += n
        self.rec -= 2 * n
        self.pos = start_pos + n
        return np.zeros((n, 8))

    def layout(self, name, a, filled):
        return a[:, :filled] if name.endswith("cache") else a

    def state(self, n_pos):
        bufs = {"layer_00/conv_state": self.conv, "layer_00/recurrent_state": self.rec,
                "layer_01/k_cache": self.k, "layer_01/v_cache": self.v}
        return {k: self.layout(k, a, self.pos) for k, a in bufs.items()}


FWD = {"op": "forward", "tokens": [1, 2, 3], "start_pos": 0}


def got_state(rt, mdir, n_pos=7, *more):
    """(capabilities, get_state answer header, tensors) after a 3-token forward."""
    _, f = converse(rt, opened(mdir, FWD, {"op": "get_state", "n_pos": n_pos}, *more))
    return f[1][0]["info"]["capabilities"], f[4][0], f[4][1], f


def check_canonical(hdr, t, n_pos=7):
    """The answer is the canonical state of Buffers after 3 tokens, padded to n_pos with +0."""
    assert hdr["type"] == "ok", hdr
    assert [x["name"] for x in hdr["tensors"]] == NAMES
    k, v = t["layer_01/k_cache"], t["layer_01/v_cache"]
    assert k.shape == v.shape == (2, n_pos, 3)
    assert k[1, 2, 2] == 1 + 2 + 5 / 8 and v[0, 0, 1] == -1 - 1 / 8
    assert not np.signbit(k[:, 3:]).any() and (k[:, 3:] == 0).all() and (v[:, 3:] == 0).all()
    assert t["layer_00/conv_state"].shape == (10, 4) and (t["layer_00/conv_state"] == 3).all()
    assert t["layer_00/recurrent_state"].shape == (2, 2, 3)
    assert (t["layer_00/recurrent_state"] == -6).all()


# ---- padding ------------------------------------------------------------------------------------

def test_kv_of_filled_positions_padded_with_zeros(mdir):
    _, hdr, t, _ = got_state(Buffers(), mdir, 7)
    check_canonical(hdr, t, 7)


def test_kv_larger_than_n_pos_cut(mdir):
    class Whole(Buffers):   # the whole static buffer (16 positions), whatever n_pos says
        def layout(self, name, a, filled):
            return a
    _, hdr, t, _ = got_state(Whole(), mdir, 5)
    check_canonical(hdr, t, 5)
    _, hdr, t, _ = got_state(Whole(), mdir, 16)
    check_canonical(hdr, t, 16)


def test_padding_keeps_a_runtime_bug_visible(mdir):
    """Garbage in the runtime's own unused slots is reported as is, not hidden by padding."""
    class Dirty(Buffers):
        def layout(self, name, a, filled):
            if name.endswith("cache"):
                a[:, filled] = 5.0      # writes one slot past the used positions
                return a[:, :filled + 1]
            return a
    _, hdr, t, _ = got_state(Dirty(), mdir, 7)
    assert (t["layer_01/k_cache"][:, 3] == 5).all() and (t["layer_01/k_cache"][:, 4:] == 0).all()


# ---- HF layouts ---------------------------------------------------------------------------------

@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("kind", ["numpy", "torch", "torch-bf16-safe", "nested", "hf-lists",
                                  "hf-object"])
def test_hf_layouts(mdir, batch, kind):
    """Each layout (canonical / HF batch 1), each container, numpy or torch (float64 too)."""
    class HF(Buffers):
        def layout(self, name, a, filled):
            a = a[:, :filled] if name.endswith("cache") else a
            a = a[None] if batch else a
            if kind == "torch":
                return torch.from_numpy(a)
            if kind == "torch-bf16-safe":                  # a float64 tensor: converted exactly
                return torch.from_numpy(a.astype(np.float64))
            return a

        def state(self, n_pos):
            s = super().state(n_pos)
            if kind == "nested":
                return {"layer_00": {"conv_state": s["layer_00/conv_state"],
                                     "recurrent_state": s["layer_00/recurrent_state"]},
                        "layer_01": {"k_cache": s["layer_01/k_cache"],
                                     "v_cache": s["layer_01/v_cache"]}}
            if kind in ("hf-lists", "hf-object"):   # transformers' hybrid cache attributes
                d = {"key_cache": [torch.tensor([]), s["layer_01/k_cache"]],
                     "value_cache": [None, s["layer_01/v_cache"]],
                     "conv_states": [s["layer_00/conv_state"], None],
                     "recurrent_states": [s["layer_00/recurrent_state"], torch.tensor([])]}
                return d if kind == "hf-lists" else type("Cache", (), d)()
            return s
    _, hdr, t, _ = got_state(HF(), mdir, 7)
    check_canonical(hdr, t, 7)


def test_hf_cache_before_its_first_call_gives_zero_kv(mdir):
    class Empty(Buffers):
        def state(self, n_pos):
            return {"key_cache": [], "value_cache": [], "conv_states": [self.conv[None]],
                    "recurrent_states": [self.rec[None]]}
    _, f = converse(Empty(), opened(mdir, {"op": "get_state", "n_pos": 4}))
    assert f[3][0]["type"] == "ok" and f[3][1]["layer_01/k_cache"].shape == (2, 4, 3)
    assert (f[3][1]["layer_01/k_cache"] == 0).all()


@pytest.mark.parametrize("name,shape,msg", [
    ("layer_01/k_cache", (2, 3, 3, 2),
     "layer_01/k_cache has shape [2, 3, 3, 2], fits no layout: expected [2, N, 3] (canonical) "
     "or [1, 2, N, 3] (HF, batch 1)"),
    ("layer_01/v_cache", (1, 3, 2, 3),       # [batch, seq, heads, dim]: not a layout we guess
     "layer_01/v_cache has shape [1, 3, 2, 3], fits no layout"),
    ("layer_01/k_cache", (2, 2, 3, 3),
     "layer_01/k_cache has shape [2, 2, 3, 3]: batch 2, the protocol is batch 1"),
    ("layer_00/conv_state", (1, 10, 3),
     "layer_00/conv_state has shape [1, 10, 3], fits no layout: expected [10, 4] (canonical) or "
     "[1, 10, 4] (HF, batch 1); K-1 columns (llama.cpp keeps only the newest K-1)"),
    ("layer_00/recurrent_state", (2, 3, 2),
     "layer_00/recurrent_state has shape [2, 3, 2], fits no layout: expected [2, 2, 3] "
     "(canonical) or [1, 2, 2, 3] (HF, batch 1)"),
    ("layer_00/recurrent_state", (3, 2, 2, 3),
     "layer_00/recurrent_state has shape [3, 2, 2, 3]: batch 3"),
])
def test_bad_shape_names_buffer_and_shape(mdir, name, shape, msg):
    class Bad(Buffers):
        def state(self, n_pos):
            s = super().state(n_pos)
            s[name] = np.zeros(shape)
            return s
    _, hdr, _, f = got_state(Bad(), mdir, 7, FWD)
    assert hdr["type"] == "error" and "unsupported" not in hdr
    assert msg in hdr["message"], hdr["message"]
    assert f[5][0]["type"] == "ok"          # the session goes on


def test_unknown_buffer_named(mdir):
    class Extra(Buffers):
        def state(self, n_pos):
            s = super().state(n_pos)
            s["layer_00/k_cache"] = s["layer_01/k_cache"]
            return s
    _, hdr, _, _ = got_state(Extra(), mdir)
    assert ("unknown buffer layer_00/k_cache (layer 00 is not a layer of that kind in "
            "config.json)") in hdr["message"]


# ---- default fill_state -------------------------------------------------------------------------

def fill_run(rt, mdir, value="nan"):
    """Capabilities, the fill answer, and the state read after the fill."""
    _, f = converse(rt, opened(mdir, FWD, {"op": "fill_state", "value": value},
                               {"op": "get_state", "n_pos": 16}))
    return f[1][0]["info"]["capabilities"], f[4][0], f[5][1]


@pytest.mark.parametrize("view", ["numpy-filled", "numpy-whole", "torch"])
def test_default_fill_state_through_views(mdir, view):
    class Views(Buffers):
        max_context_len = 16

        def layout(self, name, a, filled):
            if view == "numpy-filled":
                return a[:, :filled] if name.endswith("cache") else a
            return torch.from_numpy(a) if view == "torch" else a
    rt = Views()
    caps, ans, st = fill_run(rt, mdir)
    assert caps == ["state_read", "state_fill"]
    assert ans == {"type": "ok"}
    assert np.isnan(rt.conv).all() and np.isnan(rt.rec).all()
    assert np.isnan(rt.k[:, :3]).all() and np.isnan(st["layer_00/recurrent_state"]).all()
    if view != "numpy-filled":    # the whole buffer was shown, so the whole buffer is filled
        assert np.isnan(rt.k).all() and np.isnan(rt.v).all()
    caps, ans, st = fill_run(Views(), mdir, 2.5)
    assert (st["layer_00/conv_state"] == 2.5).all() and (st["layer_01/v_cache"][:, :3] == 2.5).all()


@pytest.mark.parametrize("copy", ["copy", "astype", "readonly", "float64-torch-copy", "list",
                                  "opt-out"])
def test_default_fill_state_not_announced_for_copies(mdir, copy):
    class Copies(Buffers):
        auto_fill_state = copy != "opt-out"

        def layout(self, name, a, filled):
            if copy == "copy" and name == "layer_00/recurrent_state":
                return a.copy()                   # one copy is enough to refuse
            if copy == "astype":
                return a.astype(np.float64)
            if copy == "readonly":
                r = a.view()
                r.flags.writeable = False
                return r
            if copy == "float64-torch-copy":
                return torch.tensor(a, dtype=torch.float64)
            if copy == "list":
                return a.tolist()
            return a
    caps, ans, _ = fill_run(Copies(), mdir)
    assert caps == ["state_read"]
    assert ans == {"type": "error", "unsupported": True, "message": "state_fill was not announced"}


def test_own_fill_state_wins(mdir):
    class Own(Buffers):
        def fill_state(self, value):
            self.filled = value
    rt = Own()
    caps, ans, _ = fill_run(rt, mdir, 7)
    assert caps == ["state_read", "state_fill"] and rt.filled == 7 and (rt.conv == 3).all()
