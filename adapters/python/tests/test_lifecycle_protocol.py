"""The state lifecycle requests of the protocol (snapshot, restore, select_sequence, trim) on the
child side: announced only when overridden, dispatched with their integer argument, refused
when not announced or malformed."""
import json
import os
import sys

import numpy as np
import pytest

from qca_testutil import ROOT, TOY_CONFIG
from qwen_conform_adapter import Runtime
from qwen_conform_adapter.client import AdapterError, Client
from qwen_conform_adapter.runtime import capabilities

TOY = '''
import sys; sys.path.insert(0, %r)
import numpy as np
from qwen_conform_adapter import Runtime, serve
V = 8
class Seq(Runtime):
    """State = (position, running sum of the tokens) per sequence; logits reveal both."""
    def open(self, model_dir, options):
        self.seqs, self.cur, self.snaps = [[0, 0.0] for _ in range(3)], 0, {}
    def reset(self):
        self.seqs[self.cur] = [0, 0.0]
    def forward(self, tokens, start_pos):
        s = self.seqs[self.cur]
        out = []
        for t in tokens:
            s[1] += float(t); s[0] += 1
            out.append(np.full(V, s[1] * 100 + s[0], np.float32))
        return np.stack(out)
    def snapshot(self, slot):
        self.snaps[slot] = list(self.seqs[self.cur])
    def restore(self, slot):
        self.seqs[self.cur] = list(self.snaps[slot])
    def select_sequence(self, seq):
        if seq > 2:
            raise ValueError("no sequence %%d" %% seq)
        self.cur = seq
%s
raise SystemExit(serve(Seq()))
'''


@pytest.fixture
def toy_model_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TOY_CONFIG))
    return str(tmp_path)


def spawn(extra=""):
    return Client.spawn([sys.executable, "-c", TOY % (os.path.join(ROOT, "adapters", "python"),
                                                      extra)])


def test_capabilities_of_the_lifecycle_methods():
    class Snap(Runtime):
        def snapshot(self, slot):
            pass

    class SnapRestore(Snap):
        def restore(self, slot):
            pass

    class All(SnapRestore):
        def select_sequence(self, seq):
            pass

        def trim(self, n_pos):
            pass
    assert capabilities(Snap()) == []                # restore missing: no snapshot capability
    assert capabilities(SnapRestore()) == ["snapshot"]
    assert capabilities(All()) == ["snapshot", "sequences", "trim"]


def test_snapshot_restore_and_sequences_round_trip(toy_model_dir):
    c = spawn()
    info = c.open(toy_model_dir)
    assert info["capabilities"] == ["snapshot", "sequences"]
    c.reset()
    a = c.forward([1, 2], 0)["logits"][-1, 0]       # pos 2, sum 3
    c.request({"op": "snapshot", "slot": 0})
    c.forward([5], 2)
    c.request({"op": "restore", "slot": 0})
    assert c.forward([4], 2)["logits"][0, 0] == 7 * 100 + 3
    c.request({"op": "select_sequence", "seq": 1})
    c.reset()
    assert c.forward([1], 0)["logits"][0, 0] == 1 * 100 + 1   # sequence 1 is its own
    c.request({"op": "restore", "slot": 0})                   # a copy into another sequence
    assert c.forward([0], 2)["logits"][0, 0] == a + 1
    c.request({"op": "select_sequence", "seq": 0})
    assert c.forward([0], 3)["logits"][0, 0] == 7 * 100 + 4   # sequence 0 untouched
    assert c.close() == 0


def test_refusals(toy_model_dir):
    c = spawn()
    c.open(toy_model_dir)
    with pytest.raises(AdapterError) as e:                    # not announced: unsupported
        c.request({"op": "trim", "n_pos": 0})
    assert e.value.unsupported
    with pytest.raises(AdapterError) as e:                    # malformed argument
        c.request({"op": "snapshot", "slot": "zero"})
    assert not e.value.unsupported and "slot" in str(e.value)
    with pytest.raises(AdapterError) as e:                    # the runtime's own failure
        c.request({"op": "select_sequence", "seq": 7})
    assert "no sequence 7" in str(e.value)
    c.reset()                                                 # and the child keeps serving
    assert np.all(c.forward([3], 0)["logits"] == 301)
    assert c.close() == 0
