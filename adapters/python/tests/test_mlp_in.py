"""The 'mlp_in' capability of the helper (docs/adapter-protocol.md "mlp_in"): announced when the
runtime overrides mlp_in() beside hidden(); sent as the tensor mlp_in [L, n, H] right after the
hidden states, only when the host asks for them; refused with a message naming the shape when
the runtime answers another one. The golden adapter sends the golden model's own residual
after each mixer (dense and MoE)."""
import os
import sys
import textwrap

import numpy as np
import pytest

from qca_testutil import FIXTURES, ROOT

from qwen_conform_adapter import Runtime
from qwen_conform_adapter.client import AdapterError, Client
from qwen_conform_adapter.runtime import capabilities

ADAPTER = os.path.join(ROOT, "adapters/golden/qc_golden_adapter.py")


def test_announced_only_beside_hidden():
    class Plain(Runtime):
        def reset(self):
            pass

    class OnlyMlpIn(Plain):
        def mlp_in(self):
            return None

    class Both(OnlyMlpIn):
        def hidden(self):
            return None

    assert "mlp_in" not in capabilities(Plain())
    assert "mlp_in" not in capabilities(OnlyMlpIn())   # it travels with the hidden states
    assert capabilities(Both())[:2] == ["hidden", "mlp_in"]


@pytest.mark.parametrize("name", ["tiny-f32-tied-flat", "tiny-moe-f32-nested"])
def test_golden_adapter_sends_the_mixer_outputs(name):
    c = Client.spawn([sys.executable, ADAPTER])
    try:
        info = c.open(os.path.join(FIXTURES, name, "model"))
        assert "mlp_in" in info["capabilities"]
        L, H = info["n_layers"], info["hidden_size"]
        c.reset()
        out = c.forward([3, 1, 4, 1, 5], 0, hidden=True)
        assert list(out)[:3] == ["logits", "hidden", "mlp_in"]
        mi, hid = out["mlp_in"], out["hidden"]
        assert mi.shape == (L, 5, H) and mi.dtype == np.float32 and np.all(np.isfinite(mi))
        # the residual after layer l's mixer: neither its input nor its output
        for l in range(L):
            assert not np.array_equal(mi[l], hid[l])
            assert l == L - 1 or not np.array_equal(mi[l], hid[l + 1])
        assert list(c.forward([9], 5)) == ["logits"]        # not asked: not sent
    finally:
        c.close()


def test_wrong_shape_is_refused_naming_it(tmp_path):
    script = tmp_path / "bad_mlp_in.py"
    script.write_text(textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        from qc_golden_adapter import GoldenF32
        from qwen_conform_adapter import serve

        class Bad(GoldenF32):
            def mlp_in(self):
                return super().mlp_in()[:-1]        # one layer short

        sys.exit(serve(Bad()))
    """ % os.path.join(ROOT, "adapters/golden")))
    c = Client.spawn([sys.executable, str(script)])
    try:
        c.open(os.path.join(FIXTURES, "tiny-f32-tied-flat", "model"))
        c.reset()
        with pytest.raises(AdapterError, match=r"mlp_in\(\) returned shape \(3, 2, 64\), "
                                               r"expected \(4, 2, 64\)"):
            c.forward([1, 2], 0, hidden=True)
    finally:
        c.close()
