"""qcgolden.config type-checks every field (one ConfigError naming the file and the field) and
goldens.prefill_and_decode handles n_decode = 0 (hardening issue #13, item 2)."""
import copy
import json
import os

import numpy as np
import pytest

from conftest import FIXTURES
from qcgolden import config as qconfig
from qcgolden import goldens

MODEL = os.path.join(FIXTURES, "tiny-f32-tied-flat", "model")


def base():
    with open(os.path.join(MODEL, "config.json")) as f:
        return json.load(f)


def text(cfg):
    return cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg


def test_base_config_parses():
    c = qconfig.parse(base(), "x/config.json")
    assert c.num_hidden_layers == len(c.layer_types) > 0


# (field, bad value): every one must be refused with a message naming the field
BAD = [
    ("hidden_size", "64"), ("hidden_size", True), ("hidden_size", -8), ("hidden_size", 0),
    ("hidden_size", 64.5), ("hidden_size", float("nan")), ("hidden_size", float("inf")),
    ("hidden_size", 1 << 40), ("vocab_size", None), ("vocab_size", [1]),
    ("num_hidden_layers", "2"), ("head_dim", False), ("linear_conv_kernel_dim", "4"),
    ("full_attention_interval", "4"), ("full_attention_interval", 0),
    ("rms_norm_eps", "1e-6"), ("rms_norm_eps", float("nan")), ("rms_norm_eps", -1e-6),
    ("rms_norm_eps", True), ("rope_theta", float("inf")), ("rope_theta", "1e4"),
    ("partial_rotary_factor", 2.0), ("partial_rotary_factor", "0.25"),
    ("tie_word_embeddings", 1), ("tie_word_embeddings", "yes"), ("attention_bias", "no"),
    ("layer_types", "linear_attention"), ("layer_types", [1, 2]), ("hidden_act", ["silu"]),
]


@pytest.mark.parametrize("field,value", BAD, ids=["%s=%r" % fv for fv in BAD])
def test_bad_field_is_refused(field, value):
    cfg = copy.deepcopy(base())
    tc = text(cfg)
    if field in ("rope_theta", "partial_rotary_factor") and isinstance(tc.get("rope_parameters"), dict):
        tc["rope_parameters"][field] = value
    else:
        tc[field] = value
    if field == "full_attention_interval":
        tc.pop("layer_types", None)
    with pytest.raises(qconfig.ConfigError) as e:
        qconfig.parse(cfg, "some/dir/config.json")
    msg = str(e.value)
    assert "some/dir/config.json" in msg and field in msg, msg
    assert "\n" not in msg


@pytest.mark.parametrize("field", ["hidden_size", "vocab_size", "num_attention_heads"])
def test_missing_field_is_named(field):
    cfg = copy.deepcopy(base())
    del text(cfg)[field]
    with pytest.raises(qconfig.ConfigError, match="missing field %s" % field):
        qconfig.parse(cfg, "m/config.json")


def test_prefill_and_decode_zero_decode_steps():
    from qcgolden.model import Model
    model = Model.from_dir(MODEL)
    state = model.new_state()
    r = goldens.prefill_and_decode(model, state, [1, 2, 3], 0)
    V = r["logits"].shape[-1]
    assert r["decode_logits"].shape == (0, V)
    assert r["decode_tokens"].shape == (0,) and r["margins"].shape == (0,)
    # the decode state is the prefill state (no step ran)
    def same(a, b):
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return np.array_equal(np.asarray(a), np.asarray(b))
    assert same(r["state"], r["decode_state"])
    r2 = goldens.prefill_and_decode(model, model.new_state(), [1, 2, 3], 2)
    assert r2["decode_logits"].shape == (2, V)
    assert np.array_equal(r2["logits"], r["logits"])
