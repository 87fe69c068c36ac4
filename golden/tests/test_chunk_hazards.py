"""The chunk-hazard cases (hazards.chunk_cases, issue 27 item 5) hold what the issue asks for, and
the n_v/n_k = 3 and 8 fixtures (fixtures.GVA, MOE_GVA) carry them with the ratios they claim."""
import os

import h5py
import pytest

from conftest import FIXTURES
from qcgolden import fixtures, goldens, hazards

K = 4                                   # linear_conv_kernel_dim of every fixture
NAMES = [s.name for s in fixtures.GVA + fixtures.MOE_GVA]


def dynamic_calls(case):
    """The forward calls of the dynamic strategy (qc_prefill.h): the history replayed in one
    prefill, then the prompt, each cut into chunks of max_seq_len (128 when absent)."""
    m = case.max_seq_len or 128
    calls = []
    for n in (case.history_prompt + case.history_decode, case.n_tokens):
        calls += [m] * (n // m) + ([n % m] if n % m else [])
    return calls


def test_short_chunks_after_a_long_one():
    """A call of 1, 2 and 3 tokens (<= K - 1) right after a call of at least 64 tokens."""
    seen = set()
    for c in hazards.chunk_cases():
        calls = dynamic_calls(c)
        seen |= {b for a, b in zip(calls, calls[1:]) if a >= 64 and b <= K - 1}
    assert seen == {1, 2, 3}


def test_prompts_5_mod_64():
    t = [c.n_tokens for c in hazards.chunk_cases() if c.n_tokens % 64 == 5]
    assert len(t) >= 2 and min(t) > 64 and max(t) > 128


def test_start_pos_near_64n():
    """History lengths at 64 n - d and 64 n + d (d in 1..10) on both sides of 64 and 128, at
    both ends of the range (1 and 10)."""
    off = {}
    for c in hazards.chunk_cases():
        p = c.history_prompt + c.history_decode
        if p:
            n = round(p / 64)
            assert n >= 1 and 1 <= abs(p - 64 * n) <= 10, (c.name, p)
            off.setdefault(n, set()).add(p - 64 * n)
    for n in (1, 2):
        assert any(d < 0 for d in off[n]) and any(d > 0 for d in off[n]), (n, off[n])
    assert {-10, -1, 1, 10} <= set().union(*off.values())


def test_names_unique_and_not_standard():
    names = [c.name for c in hazards.chunk_cases()]
    assert len(set(names)) == len(names)
    assert not set(names) & {c.name for c in goldens.default_cases()}


@pytest.mark.parametrize("name,ratio", [("tiny-bf16-gva3", 3), ("tiny-moe-f32-gva8", 8)])
def test_value_head_ratio(name, ratio):
    cfg = fixtures.by_name(name).text_config()
    assert cfg.linear_num_value_heads == ratio * cfg.linear_num_key_heads
    assert cfg.linear_num_key_heads > 1          # so grouped (j // r) != tiled (j % n_k)
    assert cfg.linear_key_head_dim == cfg.linear_value_head_dim
    assert cfg.linear_conv_kernel_dim == K
    assert cfg.is_moe == name.startswith("tiny-moe-")


@pytest.mark.parametrize("name", NAMES)
def test_committed_goldens_hold_the_schedule(name):
    """start_pos, max_seq_len and the prompt length of every hazard case as specified."""
    with h5py.File(os.path.join(FIXTURES, name, "golden.h5"), "r") as f:
        for c in hazards.chunk_cases():
            g = f["cases/" + c.name]
            assert int(g.attrs["start_pos"]) == c.history_prompt + c.history_decode
            assert int(g.attrs.get("max_seq_len", 0)) == (c.max_seq_len or 0)
            assert g["tokens"].shape == (c.n_tokens,)
            assert g["prefill/logits"].shape[0] == c.n_tokens
