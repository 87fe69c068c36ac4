#!/usr/bin/python3
"""make_extra.py -- the extra, not-committed fixtures of the llama.cpp gate.

    /usr/bin/python3 make_extra.py OUT_DIR

1. tiny-f32-gva-tiled: one llama.cpp CAN load with n_v = 2 n_k.

Every shipped fixture with n_k > 1 and n_v > n_k also has d_k != d_v or the packed layout, so
llama.cpp v0.5.0 cannot load or convert any of them -- and the value-head mapping from
llama.cpp's tiled order back to Hugging Face's grouped order (l = (j mod r) * n_k + j div r)
would stay untested (with n_k = 1, as in tiny-rope-legacy-8layer, the two orders coincide).
This writes OUT_DIR/tiny-f32-gva-tiled/{model/, golden.h5} with the project's own golden
generator (golden/qcgolden, float64 PyTorch): 2 key heads, 4 value heads, d_k = d_v = 16,
F32, mrope_section present, and four of the standard cases (len005, len065, cont, longseq).
Deterministic (seed 909); skipped when the golden already exists with the same spec hash.

2. tiny-f32-nomtp-key: a checkpoint whose config.json has NO mtp_num_hidden_layers (nor
mtp_use_dedicated_embeddings) and no mtp.* tensor, as a Qwen3.5 export without MTP may be:
the stock v0.5.0 converter then stops with `assert self.opt_num_mtp_layers != 0` unless
--no-mtp is passed (FINDINGS.md); the adapter's mtp=auto passes it (the gate: default run
pass, variant mtp=keep cannot_convert). n_k = n_v = 2, d_k = d_v = 8, F32, seed 910, cases
len005 and longseq. The MTP keys are removed from config.json before the golden is written.
"""
import hashlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "golden"))

from qcgolden import setup_torch  # noqa: E402

MTP_KEYS = ("mtp_num_hidden_layers", "mtp_use_dedicated_embeddings")


def strip_mtp_keys(model_dir):
    """Remove the MTP keys from config.json (and its text_config); the weights are unchanged."""
    p = os.path.join(model_dir, "config.json")
    with open(p) as f:
        cfg = json.load(f)
    for c in (cfg, cfg.get("text_config", {})):
        for k in MTP_KEYS:
            c.pop(k, None)
    with open(p, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def make(out_dir, spec, case_names, post=None):
    from qcgolden import goldens, init
    key = hashlib.sha256((repr(spec) + repr(case_names) + repr(post and post.__name__)).encode()).hexdigest()[:16]
    d = os.path.join(out_dir, spec.name)
    stamp = os.path.join(d, "spec.sha")
    if os.path.isfile(os.path.join(d, "golden.h5")) and os.path.isfile(stamp) and open(stamp).read().strip() == key:
        print(os.path.join(d, "golden.h5"))
        return
    os.makedirs(d, exist_ok=True)
    init.write_checkpoint(spec, os.path.join(d, "model"))
    if post:
        post(os.path.join(d, "model"))
    cases = [c for c in goldens.default_cases() if c.name in case_names]
    goldens.generate(os.path.join(d, "model"), os.path.join(d, "golden.h5"), spec.seed, cases=cases)
    with open(stamp, "w") as f:
        f.write(key + "\n")
    with open(os.path.join(d, "README"), "w") as f:
        f.write(json.dumps({"written_by": "adapters/llamacpp/tests/make_extra.py", "spec": repr(spec),
                            "post": post.__name__ if post else None}) + "\n")
    print(os.path.join(d, "golden.h5"))


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    setup_torch()
    from qcgolden.init import ModelSpec

    L, F = "linear_attention", "full_attention"
    make(argv[0], ModelSpec(
        name="tiny-f32-gva-tiled", seed=909, vocab_size=192, hidden_size=32, intermediate_size=64,
        layer_types=[L, L, F, L], num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=16,
        partial_rotary_factor=0.5, rope_theta=10000.0, tie_word_embeddings=False, dtype="F32",
        description="n_v = 2 n_k with d_k = d_v (adapters/llamacpp/tests/make_extra.py)"),
        ("len005", "len065", "cont", "longseq"))
    make(argv[0], ModelSpec(
        name="tiny-f32-nomtp-key", seed=910, vocab_size=160, hidden_size=32, intermediate_size=64,
        layer_types=[L, F], num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=2,
        linear_key_head_dim=8, linear_value_head_dim=8,
        partial_rotary_factor=0.5, rope_theta=10000.0, tie_word_embeddings=False, dtype="F32",
        description="config.json without mtp_num_hidden_layers, no mtp tensors (make_extra.py)"),
        ("len005", "longseq"), post=strip_mtp_keys)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
