"""qcgolden — the qwen-conform golden generator.

An independent float64 PyTorch implementation of the Qwen3.5 dense text model written from
its definition (docs/qwen35-model.md), a byte-deterministic tiny-checkpoint writer, and the golden
HDF5 writer (schema v1, golden/SCHEMA.md).

Modules (one concern each):
  safetensors  hand-written safetensors reader / writer (F32, BF16, F16)
  config       Qwen3.5 text config from a Hugging Face config.json (nested or flat)
  checkpoint   weights by HF name -> float64 tensors (prefixes, sharding, legacy packed layout)
  model        the forward pass (RMSNorm, gated attention, Gated DeltaNet, MLP) and its state
  moe          the MoE block of the Qwen3.5 MoE models (router, top-k, experts, shared expert)
  deltarule    the gated delta rule: token recurrence and chunked (chunk 64) form
  init         deterministic realistic initialisation + checkpoint writer
  goldens      case construction (prompt seed search) and the HDF5 golden writer
  fixtures     the committed fixture set (specs + regeneration)
  longdecode   the long-decode fixture: 2048 decode steps with a DeltaNet state trace
  longctx      the long-context fixture: a 4092-token chunked prefill + 4 decode steps
  hazards      the hazard fixture: extreme but legal DeltaNet gates (decays, softplus inputs)
"""

VERSION = "1.0"
GENERATOR = "qwen-conform-golden %s (PyTorch float64)" % VERSION


def setup_torch():
    """Float64, one thread, deterministic algorithms: the generator's fixed numeric setting."""
    import torch
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    return torch
