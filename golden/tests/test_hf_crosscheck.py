"""The generator against Hugging Face transformers' own Qwen3.5 (float32, eager) on hf-tiny-a.

The reference data's README: a float64 implementation should sit within about 3e-4 of HF's
float32 logits (HF's own chunked-vs-recurrent float32 spread reaches 2.6e-4). Two sources:
  * golden/tests/data/hf-tiny-a (always present): config, weights and a trimmed float32
    expected-logits / final-state file for prompt lengths 1, 7, 33;
  * tests/data/hf-tiny-a/golden-hf.h5 (the full HF reference, in the repository): every case, every
    tensor (full / prefill / decode / stepwise logits, hidden states, all cache states).
Run with -s to see the measured maximum errors.
"""
import hashlib
import os

import h5py
import numpy as np
import pytest

from conftest import DATA, SHARED_HF_TINY_A
from qcgolden import model as M

TOL = 3e-4
LOCAL = os.path.join(DATA, "hf-tiny-a")
HF_NAME = {"k_cache": "key", "v_cache": "value"}


def max_state_err(state, get):
    e = 0.0
    for layer, tensors in state.arrays().items():
        for name, a in tensors.items():
            e = max(e, float(np.abs(a - get(layer, HF_NAME.get(name, name))).max()))
    return e


def test_local_copy_trimmed_logits_and_states():
    m = M.Model.from_dir(LOCAL)
    ref = np.load(os.path.join(LOCAL, "expected.npz"))
    errs = {"full/logits": 0.0, "decode/logits": 0.0, "final/state": 0.0}
    for case in ("len001", "len007", "len033"):
        st = m.new_state()
        logits, _ = m.forward(ref[case + "_input_ids"], st)
        errs["full/logits"] = max(errs["full/logits"],
                                  float(np.abs(logits.numpy() - ref[case + "_full_logits"]).max()))
        ids = ref[case + "_decode_ids"]
        assert int(np.argmax(logits[-1].numpy())) == int(ids[0])
        for s, t in enumerate(ids):
            row, _ = m.forward([t], st)
            errs["decode/logits"] = max(errs["decode/logits"],
                                        float(np.abs(row[0].numpy() - ref[case + "_decode_logits"][s]).max()))
        errs["final/state"] = max(errs["final/state"], max_state_err(
            st, lambda layer, name: ref["%s_final_%s_%s" % (case, layer, name)]))
    print("\nhf-tiny-a (local trimmed copy) max abs error vs HF float32:",
          ", ".join("%s %.3g" % kv for kv in errs.items()))
    for k, e in errs.items():
        assert e <= TOL, (k, e)


@pytest.mark.skipif(not os.path.exists(os.path.join(SHARED_HF_TINY_A, "golden-hf.h5")),
                    reason="tests/data/hf-tiny-a/golden-hf.h5 not present "
                           "(the local trimmed copy is still checked)")
def test_shared_full_reference():
    shared = SHARED_HF_TINY_A
    for n in ("config.json", "model.safetensors"):  # the local copy is the same model
        a = hashlib.sha256(open(os.path.join(shared, n), "rb").read()).hexdigest()
        b = hashlib.sha256(open(os.path.join(LOCAL, n), "rb").read()).hexdigest()
        assert a == b, n
    m = M.Model.from_dir(shared)
    errs = {}

    def upd(k, e):
        errs[k] = max(errs.get(k, 0.0), e)

    with h5py.File(os.path.join(shared, "golden-hf.h5"), "r") as f:
        for case in f["cases"]:
            g = f["cases"][case]
            ids = g["input_ids"][()]
            # full forward (no cache) and prefill through a fresh cache: the same call here
            st = m.new_state()
            logits, hidden = m.forward(ids, st, collect_hidden=True)
            upd("full/logits", float(np.abs(logits.numpy() - g["full/logits"][()]).max()))
            upd("full/hidden_states", float(np.abs(hidden.numpy() - g["full/hidden_states"][()]).max()))
            upd("prefill/logits", float(np.abs(logits.numpy() - g["prefill/logits"][()]).max()))
            upd("prefill/state", max_state_err(st, lambda l, n: g["prefill/state/%s/%s" % (l, n)][0]))
            dec = g["decode/ids"][()]
            assert int(np.argmax(logits[-1].numpy())) == int(dec[0])
            for s, t in enumerate(dec):
                row, _ = m.forward([t], st)
                upd("decode/logits", float(np.abs(row[0].numpy() - g["decode/logits"][s]).max()))
                if s + 1 < len(dec):
                    assert int(np.argmax(row[0].numpy())) == int(dec[s + 1])
            upd("final/state", max_state_err(st, lambda l, n: g["final/state/%s/%s" % (l, n)][0]))
            # stepwise: the prompt fed one token at a time (recurrent after the first)
            st = m.new_state()
            rows = [m.forward([t], st)[0] for t in ids]
            step = np.concatenate([r.numpy() for r in rows])
            upd("stepwise/logits", float(np.abs(step - g["stepwise/logits"][()]).max()))
            upd("stepwise/state", max_state_err(st, lambda l, n: g["stepwise/state/%s/%s" % (l, n)][0]))
    print("\nhf-tiny-a (shared, all cases) max abs error vs HF float32:",
          ", ".join("%s %.3g" % kv for kv in errs.items()))
    for k, e in errs.items():
        assert e <= TOL, (k, e)
