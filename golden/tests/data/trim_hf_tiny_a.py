#!/usr/bin/python3
"""Make hf-tiny-a/expected.npz: a trimmed copy of tests/data/hf-tiny-a/golden-hf.h5
(Hugging Face transformers, float32) for prompt lengths 1, 7 and 33, so the HF cross-check test
stays small. Run once from this directory:

    /usr/bin/python3 trim_hf_tiny_a.py ../../../tests/data/hf-tiny-a/golden-hf.h5

Arrays: lenTTT_input_ids [T] int64, lenTTT_full_logits [T, V] float32, lenTTT_decode_ids [8],
lenTTT_decode_logits [8, V] float32, lenTTT_final_<layer>_<tensor> (the cache after the 8 decode
steps, HF's batch dimension dropped).
"""
import sys

import h5py
import numpy as np

out = {}
with h5py.File(sys.argv[1], "r") as f:
    for case in ("len001", "len007", "len033"):
        g = f["cases"][case]
        out[case + "_input_ids"] = g["input_ids"][()]
        out[case + "_full_logits"] = g["full/logits"][()]
        out[case + "_decode_ids"] = g["decode/ids"][()]
        out[case + "_decode_logits"] = g["decode/logits"][()]
        for layer in g["final/state"]:
            for name, ds in g["final/state"][layer].items():
                out["%s_final_%s_%s" % (case, layer, name)] = ds[()][0]
np.savez("hf-tiny-a/expected.npz", **out)
