"""Shared by the adapter tests (no conftest.py: golden/tests imports its own conftest by name): the
helper package, golden/ (qcgolden, validate.py), the golden adapter and the mutants importable
without installing anything; paths and a toy config."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
for p in ("adapters/python", "adapters/golden", "golden", "tests/adapters"):
    if os.path.join(ROOT, p) not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, p))

FIXTURES = os.path.join(ROOT, "fixtures")
FIXTURE_NAMES = sorted(d for d in os.listdir(FIXTURES)
                       if os.path.exists(os.path.join(FIXTURES, d, "golden.h5")))

# A tiny Qwen3.5-shaped config: layer 0 Gated DeltaNet, layer 1 full attention.
TOY_CONFIG = {"vocab_size": 8, "hidden_size": 4, "num_hidden_layers": 2,
              "layer_types": ["linear_attention", "full_attention"],
              "num_key_value_heads": 1, "head_dim": 2, "linear_num_key_heads": 1,
              "linear_key_head_dim": 2, "linear_num_value_heads": 1, "linear_value_head_dim": 2,
              "linear_conv_kernel_dim": 4}
