"""The output gates of config.json (docs/qwen35-model.md 2.2, "Gates"), issue #27 item 4.

`output_gate_type` (Qwen3.5-family configs carry "swish"): absent, "swish" or "silu" are the
gated RMSNorm this generator computes (silu(z)); any other value ("sigmoid" is the gate of
Qwen3.8-Flash-Next's qwen4_exp architecture) is refused naming the file, the field and the
value. `attn_output_gate`: absent or true (the sigmoid gate after attention); false would drop
the gate, and is refused the same way. Every test here fails if the field is ignored.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, GOLDEN
from qcgolden import checkpoint, fixtures, init
from qcgolden import config as qconfig


def base(nested=False):
    """A real-style config.json object (the fixture writer's), flat or nested."""
    s = fixtures.by_name("tiny-bf16-gva-nested" if nested else "tiny-f32-tied-flat")
    return init.config_json(s)


def text(c):
    return c["text_config"] if "text_config" in c else c


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("value", [None, "swish", "silu", "absent"])
def test_swish_silu_absent_load(nested, value):
    c = base(nested)
    if value == "absent":
        text(c).pop("output_gate_type", None)
    else:
        text(c)["output_gate_type"] = value
    cfg = qconfig.parse(c, "m/config.json")
    assert cfg.num_hidden_layers == len(text(c)["layer_types"])


@pytest.mark.parametrize("nested,where", [(False, "m/config.json: "),
                                          (True, "m/config.json: text_config: ")])
@pytest.mark.parametrize("value", ["sigmoid", "Swish", "gelu", ""])
def test_other_output_gate_types_are_refused(nested, where, value):
    c = base(nested)
    text(c)["output_gate_type"] = value
    with pytest.raises(qconfig.ConfigError) as e:
        qconfig.parse(c, "m/config.json")
    assert str(e.value) == "%soutput_gate_type: %r is not supported (swish, silu)" % (where, value)


@pytest.mark.parametrize("value", [1, True, ["swish"]])
def test_a_non_string_output_gate_type_is_refused(value):
    c = base()
    c["output_gate_type"] = value
    with pytest.raises(qconfig.ConfigError, match="output_gate_type: .* is not supported"):
        qconfig.parse(c, "m/config.json")


def test_attn_output_gate():
    c = base(True)
    for v in (True, None):
        text(c)["attn_output_gate"] = v
        qconfig.parse(c, "m/config.json")
    text(c)["attn_output_gate"] = False
    with pytest.raises(qconfig.ConfigError) as e:
        qconfig.parse(c, "m/config.json")
    assert str(e.value).startswith("m/config.json: text_config: attn_output_gate: false is not "
                                   "supported")
    text(c)["attn_output_gate"] = "yes"
    with pytest.raises(qconfig.ConfigError, match="field attn_output_gate = 'yes' is not true/false"):
        qconfig.parse(c, "m/config.json")


def test_moe_config_is_checked_too():
    """Qwen3.8-2.4T-A95B is a qwen3_5_moe_text config: the same rule."""
    c = init.config_json(fixtures.by_name("tiny-moe-bf16-flat"))
    qconfig.parse(c, "m/config.json")
    c["output_gate_type"] = "sigmoid"
    with pytest.raises(qconfig.ConfigError, match="output_gate_type: 'sigmoid' is not supported"):
        qconfig.parse(c, "m/config.json")


# ------------------------------------------------------------------------------------------------
# Through the loaders and the command line
# ------------------------------------------------------------------------------------------------

def model_copy(tmp_path, **fields):
    d = tmp_path / "m"
    shutil.copytree(os.path.join(FIXTURES, "tiny-f32-tied-flat", "model"), d)
    p = d / "config.json"
    c = json.loads(p.read_text())
    c.update(fields)
    p.write_text(json.dumps(c, indent=2))
    return d


def test_checkpoint_loader(tmp_path):
    d = model_copy(tmp_path, output_gate_type="swish")
    cfg, w, _ = checkpoint.load(str(d))
    assert cfg.num_hidden_layers > 0 and w
    d2 = tmp_path / "n"
    shutil.copytree(d, d2)
    c = json.loads((d2 / "config.json").read_text())
    c["output_gate_type"] = "sigmoid"
    (d2 / "config.json").write_text(json.dumps(c))
    with pytest.raises(qconfig.ConfigError, match=r"n/config.json: output_gate_type: 'sigmoid'"):
        checkpoint.load(str(d2))


@pytest.mark.parametrize("fields,msg", [
    ({"output_gate_type": "sigmoid"}, "output_gate_type: 'sigmoid' is not supported (swish, silu)"),
    ({"attn_output_gate": False}, "attn_output_gate: false is not supported"),
])
def test_generate_exits_2_naming_file_field_value(tmp_path, fields, msg):
    d = model_copy(tmp_path, **fields)
    out = tmp_path / "g.h5"
    r = subprocess.run([sys.executable, os.path.join(GOLDEN, "qcgolden"), "generate", "--model",
                        str(d), "--tokens", "1,2,3", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert "%s: %s" % (d / "config.json", msg) in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and not out.exists()
