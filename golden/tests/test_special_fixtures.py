"""The fixtures with their own cases (qcgolden.fixtures.SPECIAL): tiny-long-decode (2048 decode
steps with a state trace) and tiny-hazard-decay (extreme DeltaNet gates). Regeneration
reproduces them, the trace is consistent with the decode, and the hazards are really reached."""
import math
import os

import h5py
import numpy as np
import pytest

from conftest import FIXTURES
from qcgolden import fixtures, hazards, longdecode, regen


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("special"))
    fixtures.build_special(root)
    return root


@pytest.mark.parametrize("name", [m.SPEC.name for m in fixtures.SPECIAL])
def test_regenerated_identically(fresh, name):
    a, b = os.path.join(FIXTURES, name, "model"), os.path.join(fresh, name, "model")
    assert sorted(os.listdir(a)) == sorted(os.listdir(b))
    for n in os.listdir(a):
        assert open(os.path.join(a, n), "rb").read() == open(os.path.join(b, n), "rb").read(), n
    rows = regen.diff_golden(os.path.join(FIXTURES, name, "golden.h5"),
                             os.path.join(fresh, name, "golden.h5"))
    for key, status, changed in rows:
        if key == "/ (attr torch_version)":
            continue
        if status.startswith("max abs diff"):
            assert float(status.split()[-1]) <= 1e-12, key
        else:
            assert not changed, (key, status)


def test_long_decode_trace():
    with h5py.File(os.path.join(FIXTURES, longdecode.SPEC.name, "golden.h5"), "r") as f:
        g = f["cases/decode2k"]
        assert g["tokens"].shape == (longdecode.N_PROMPT,)
        assert g["decode/logits"].shape == (longdecode.N_DECODE, longdecode.SPEC.vocab_size)
        steps = g["decode/trace/steps"][()]
        assert list(steps) == longdecode.TRACE_STEPS and steps[-1] == longdecode.N_DECODE - 1
        linear = [i for i, t in enumerate(longdecode.SPEC.layer_types) if t == longdecode.L]
        assert sorted(g["decode/trace"]) == sorted(["steps"] + ["layer_%02d" % i for i in linear])
        for i in linear:
            for name in ("conv_state", "recurrent_state"):
                tr = g["decode/trace/layer_%02d/%s" % (i, name)][()]
                final = g["decode/state/layer_%02d/%s" % (i, name)][()]
                assert tr.shape == (len(steps),) + final.shape
                # the last traced step is the last decode step: the same state as decode/state
                assert np.array_equal(tr[-1], final)
                assert np.all(np.isfinite(tr))
            # the state keeps changing over the decode (not a fixed point after a few steps)
            rec = g["decode/trace/layer_%02d/recurrent_state" % i][()]
            assert np.abs(rec[-1] - rec[-2]).max() > 1e-4


def test_hazards_are_reached():
    model = os.path.join(FIXTURES, hazards.SPEC.name, "model")
    r = hazards.gate_ranges(model)
    assert sorted(r) == [0, 1, 2]
    for layer, heads in r.items():
        g0, g1, g2 = heads[0], heads[1], heads[2]
        assert g0[1] <= math.log(1e-5), (layer, g0)          # head 0: every decay <= 1e-5
        assert -1e-6 < g1[0] and g1[1] < 0.0, (layer, g1)    # head 1: decay > 1 - 1e-6
        assert g2[0] < -1000.0 and g2[1] > -1e-9, (layer, g2)  # head 2: both ends, one head
        assert g2[3] > 88.8 and g2[2] < -88.8, (layer, g2)    # beyond float32 exp's range
    assert r[0][0][0] < math.log(6.5e-12) < r[0][0][1]    # executorch#21417's decay, layer 0
    with h5py.File(os.path.join(FIXTURES, hazards.SPEC.name, "golden.h5"), "r") as f:
        assert sorted(f["cases"]) == sorted(c.name for c in hazards.cases())
        assert f["cases/len300/tokens"].shape == (300,)

        def finite(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.dtype.kind == "f":
                assert np.all(np.isfinite(obj[()])), name
        f.visititems(finite)
