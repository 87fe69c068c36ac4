"""Shared test setup: the golden/ directory on sys.path, the fixed torch setting, paths."""
import os
import sys

GOLDEN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(GOLDEN)
FIXTURES = os.path.join(REPO, "fixtures")
DATA = os.path.join(GOLDEN, "tests", "data")
SHARED_HF_TINY_A = os.path.join(REPO, "tests", "data", "hf-tiny-a")  # the full HF reference, in the repository

sys.path.insert(0, GOLDEN)

from qcgolden import setup_torch  # noqa: E402

setup_torch()
