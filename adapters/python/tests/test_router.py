"""The 'router' capability of the helper (docs/adapter-protocol.md "Router choices"): announced
for a MoE model when the runtime overrides router(), encoded as router_ids (int32) and
router_weights [L, n, k] after the logits, refused with a message naming the shapes when the
runtime answers another shape; golden.ActualWriter writes the golden's router layout."""
import os
import sys

import numpy as np
import pytest

from qca_testutil import FIXTURES, ROOT

from qwen_conform_adapter import Runtime, golden
from qwen_conform_adapter.client import AdapterError, Client

MOE = "tiny-moe-f32-nested"
DENSE = "tiny-f32-tied-flat"
ADAPTER = os.path.join(ROOT, "adapters/golden/qc_golden_adapter.py")
MUTANTS = os.path.join(ROOT, "tests/adapters/router_mutants.py")


def _cfg(name):
    import json
    c = json.load(open(os.path.join(FIXTURES, name, "model", "config.json")))
    return c.get("text_config", c)


def test_golden_adapter_sends_its_router_choices():
    cfg = _cfg(MOE)
    L, k, E = cfg["num_hidden_layers"], cfg["num_experts_per_tok"], cfg["num_experts"]
    c = Client.spawn([sys.executable, ADAPTER])
    try:
        info = c.open(os.path.join(FIXTURES, MOE, "model"))
        assert "router" in info["capabilities"]
        c.reset()
        out = c.forward([1, 2, 3, 4, 5], 0, router=True)
        assert list(out) == ["logits", "router_ids", "router_weights"]
        ids, w = out["router_ids"], out["router_weights"]
        assert ids.dtype == np.int32 and ids.shape == (L, 5, k) and w.shape == (L, 5, k)
        assert ids.min() >= 0 and ids.max() < E
        assert all(len(set(r)) == k for r in ids.reshape(-1, k).tolist())
        assert np.allclose(w.sum(axis=2), 1.0, atol=1e-5)
        assert np.all(w[:, :, :-1] >= w[:, :, 1:])          # descending probability
        # not asked: not sent
        assert list(c.forward([6], 5)) == ["logits"]
    finally:
        c.close()


def test_dense_model_announces_no_router():
    c = Client.spawn([sys.executable, ADAPTER])
    try:
        info = c.open(os.path.join(FIXTURES, DENSE, "model"))
        assert "router" not in info["capabilities"]
        c.reset()
        with pytest.raises(AdapterError, match="router choices asked for but not announced"):
            c.forward([1, 2], 0, router=True)
    finally:
        c.close()


def test_wrong_router_shape_is_refused_naming_it():
    c = Client.spawn([sys.executable, MUTANTS, "shape"])
    try:
        c.open(os.path.join(FIXTURES, MOE, "model"))
        c.reset()
        with pytest.raises(AdapterError, match=r"router\(\) returned ids \(4, 3, 3\) and weights "
                                               r"\(4, 3, 3\), expected \(4, 3, 2\) each"):
            c.forward([1, 2, 3], 0, router=True)
    finally:
        c.close()


def test_router_not_overridden_not_announced():
    from qwen_conform_adapter.runtime import capabilities

    class Plain(Runtime):
        def reset(self):
            pass

    class Routed(Plain):
        def router(self):
            return None

    assert "router" not in capabilities(Plain())
    assert "router" in capabilities(Routed())


def test_actual_writer_router_layout(tmp_path):
    g = golden.read(os.path.join(FIXTURES, MOE, "golden.h5"))
    c = g.cases[0]
    L, T, S, k = g.shape.n_layers, len(c.tokens), len(c.decode_tokens), g.shape.experts_per_tok
    V = g.shape.vocab_size
    ids = np.tile(np.arange(k, dtype=np.int64), (L, T, 1))
    w = np.full((L, T, k), 1.0 / k, np.float32)
    out = str(tmp_path / "a.h5")
    with golden.ActualWriter(out, g) as wr:
        wr.add(c, prefill_logits=np.zeros((T, V), np.float32),
               decode_logits=np.zeros((S, V), np.float32) if S else None,
               prefill_router=(ids, w), decode_router=(ids[:, :S], w[:, :S]) if S else None)
        with pytest.raises(ValueError, match="router/topk_ids: shape"):
            c1 = g.cases[1]
            wr.add(c1, prefill_logits=np.zeros((len(c1.tokens), V), np.float32),
                   prefill_router=(ids[:, :, :1], None))
    import h5py
    with h5py.File(out) as f:
        grp = f["cases/%s/prefill/router" % c.name]
        assert grp["topk_ids"].dtype == np.int32 and grp["topk_ids"].shape == (L, T, k)
        assert grp["topk_weights"].dtype == np.float32
