"""A STAND-IN for the `executorch` package, for adapters/executorch/tests only: it is not
ExecuTorch and runs no .pte file. See runtime.py."""
