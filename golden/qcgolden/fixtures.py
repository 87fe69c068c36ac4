"""The committed fixture set (described in fixtures/README.md, made by readme_text) and its regeneration.

Each fixture is fixtures/<name>/model/{config.json, *.safetensors[, index]} plus
fixtures/<name>/golden.h5 (model_path "model"). `build(root)` writes them all under root;
golden/regen compares such a build with the committed fixtures/ and replaces it on --write.
"""
import os

from . import goldens
from . import hazards
from . import init
from . import longctx
from . import longdecode
from .init import ModelSpec

L, F = "linear_attention", "full_attention"

FIXTURES = [
    ModelSpec(
        name="tiny-f32-tied-flat", seed=101,
        vocab_size=256, hidden_size=64, intermediate_size=64, layer_types=[L, L, L, F],
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=2,
        linear_key_head_dim=16, linear_value_head_dim=16,
        partial_rotary_factor=0.25, rope_theta=1e7, tie_word_embeddings=True, dtype="F32",
        nested=False,
        description="The baseline, shaped like the 0.8B/2B models: n_v = n_k = 2 (d_k = d_v = 16), "
        "tied lm_head, F32, flat text config (`Qwen3_5ForCausalLM`, names `model.*`), "
        "`rope_parameters` with partial_rotary_factor 0.25 (4 of 16 dims rotated), theta 1e7, "
        "4 layers with layer 3 full attention (4 query heads, 2 KV heads)."),
    ModelSpec(
        name="tiny-bf16-gva-nested", seed=202,
        vocab_size=256, hidden_size=32, intermediate_size=64, layer_types=[L, L, L, F],
        num_attention_heads=4, num_key_value_heads=1, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=8,
        partial_rotary_factor=0.5, rope_theta=10000.0, tie_word_embeddings=False, dtype="BF16",
        nested=True, extras=True,
        description="Shaped like the 4B/9B checkpoints as shipped: n_v = 2 n_k (4 value heads, "
        "2 key heads: value head j uses key head j // 2) with d_k = 16 != d_v = 8, untied "
        "lm_head, BF16 with `linear_attn.A_log` and `linear_attn.norm.weight` kept F32, the "
        "multimodal nesting (`text_config`, names `model.language_model.*`) with ignorable "
        "`model.visual.*` and `mtp.*` tensors, partial_rotary_factor 0.5, theta 1e4, GQA 4:1."),
    ModelSpec(
        name="tiny-rope-legacy-8layer", seed=303,
        vocab_size=192, hidden_size=32, intermediate_size=64, layer_types=[L, L, L, F] * 2,
        num_attention_heads=3, num_key_value_heads=1, head_dim=16,
        linear_num_key_heads=1, linear_num_value_heads=3,
        linear_key_head_dim=8, linear_value_head_dim=8,
        partial_rotary_factor=0.75, rope_theta=1e6, tie_word_embeddings=True, dtype="F32",
        nested=False, rope_style="legacy", layer_style="interval",
        description="partial_rotary_factor 0.75 (12 of 16 dims rotated; a hard-coded 0.25 or "
        "0.5 fails) and theta 1e6 given as legacy top-level `rope_theta` / "
        "`partial_rotary_factor` fields (no `rope_parameters`); no `layer_types`, only "
        "`full_attention_interval` 4 over 8 layers (full attention at layers 3 and 7); "
        "3 value heads on 1 key head (r = 3), 3 query heads on 1 KV head; F32, tied, flat."),
    ModelSpec(
        name="tiny-legacy-packed", seed=505,
        vocab_size=192, hidden_size=32, intermediate_size=64, layer_types=[L, L, L, F],
        num_attention_heads=2, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=8,
        partial_rotary_factor=0.25, rope_theta=1e7, tie_word_embeddings=True, dtype="F32",
        nested=False, legacy_packed=True,
        description="The legacy Qwen3-Next packed layout: `linear_attn.in_proj_qkvz` and "
        "`linear_attn.in_proj_ba` grouped by key head (rows [q_g, k_g, v_g (2 heads), "
        "z_g (2 heads)] and [b_g (2), a_g (2)] per key head g), with n_v = 2 n_k so the grouping "
        "matters; a loader must split them (spec section 3.7). 2 query heads = 2 KV heads (no "
        "GQA); F32, tied, flat."),
    ModelSpec(
        name="tiny-f16-sharded", seed=404,
        vocab_size=192, hidden_size=32, intermediate_size=64, layer_types=[L, F, L, F],
        num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=8, linear_value_head_dim=16,
        partial_rotary_factor=1.0, rope_theta=10000.0, tie_word_embeddings=False, dtype="F16",
        nested=True, shards=3,
        description="A sharded F16 checkpoint: `model.safetensors.index.json` + 3 shards "
        "(`model-0000i-of-00003.safetensors`), nested config without extra tensors, untied; "
        "n_v = 2 n_k with d_k = 8 < d_v = 16; partial_rotary_factor 1.0 (every one of the "
        "16 head dims rotated), 2 query heads on 1 KV head; alternating layer types "
        "(full attention at layers 1 and 3)."),
]

MOE = [
    ModelSpec(
        name="tiny-moe-f32-nested", seed=801,
        vocab_size=256, hidden_size=32, intermediate_size=0, layer_types=[L, L, L, F],
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=2,
        linear_key_head_dim=16, linear_value_head_dim=16,
        partial_rotary_factor=0.25, rope_theta=1e7, tie_word_embeddings=False, dtype="F32",
        nested=True, extras=True,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
        shared_expert_intermediate_size=24, expert_layout="fused",
        description="Qwen3.5-MoE as the hub stores it: config `model_type` `qwen3_5_moe` with "
        "`text_config` `qwen3_5_moe_text` (names `model.language_model.*`, ignorable "
        "`model.visual.*` / `mtp.*` tensors), every layer's MLP a MoE block of 8 routed experts "
        "(k = 2, `moe_intermediate_size` 16) plus a shared expert (width 24) with its sigmoid "
        "gate; the routed experts fused as 3-D `mlp.experts.gate_up_proj` [8, 32, 32] (rows "
        "[gate | up]) and `mlp.experts.down_proj` [8, 32, 16] without a `.weight` suffix, router "
        "`mlp.gate.weight` [8, 32], `mlp.shared_expert_gate.weight` [1, 32]. F32, untied, "
        "n_v = n_k = 2 (d_k = d_v = 16), 4 layers with layer 3 full attention (4 query heads, "
        "2 KV heads). The golden adds the router record and `moe_in` per case."),
    ModelSpec(
        name="tiny-moe-bf16-flat", seed=802,
        vocab_size=256, hidden_size=32, intermediate_size=0, layer_types=[L, L, L, F],
        num_attention_heads=4, num_key_value_heads=1, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=8,
        partial_rotary_factor=0.25, rope_theta=1e7, tie_word_embeddings=True, dtype="BF16",
        nested=False, shards=2,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
        shared_expert_intermediate_size=24, expert_layout="per_expert",
        description="Qwen3.5-MoE in the older per-expert layout that transformers still "
        "accepts: `mlp.experts.{e}.gate_proj.weight` / `up_proj.weight` [16, 32] and "
        "`down_proj.weight` [32, 16] for e = 0..7 (a loader stacks them into the fused "
        "tensors), flat `qwen3_5_moe_text` config (`Qwen3_5MoeForCausalLM`, names `model.*`), "
        "BF16 (router and shared-expert gate too; `linear_attn.A_log` / `norm.weight` F32), "
        "sharded into 2 files with `model.safetensors.index.json`, tied lm_head; k = 2 of 8 "
        "experts, shared expert width 24; n_v = 2 n_k (4 value heads on 2 key heads, d_k = 16, "
        "d_v = 8), 4 query heads on 1 KV head."),
]

Q8 = [
    ModelSpec(
        name="tiny-q8_0", seed=616,
        vocab_size=96, hidden_size=32, intermediate_size=64, layer_types=[L, L, L, F],
        num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        linear_num_key_heads=1, linear_num_value_heads=2,
        linear_key_head_dim=16, linear_value_head_dim=16,
        partial_rotary_factor=0.25, rope_theta=1e7, tie_word_embeddings=False, dtype="F32",
        nested=False, weight_type="q8_0",
        description="8-bit block-quantized weights in llama.cpp's Q8_0 layout (`golden/SCHEMA.md`, "
        "\"Q8_0 checkpoints\"): every 2-D projection (attention q/k/v/o, DeltaNet "
        "in_proj_qkv/z/b/a and out_proj, MLP gate/up/down) and the untied lm_head stored as I8 "
        "`X.weight` [out, in] plus F16 `X.weight_scale` [out, in/32] (blocks of 32 along a row, "
        "d = max|x| / 127, q = round(x / d)); embeddings, norms, conv1d, A_log, dt_bias F32. The "
        "golden computes with the dequantized weights d * q (exact in float32). Inputs of 32 "
        "(one block per row) and 64 (down_proj: two blocks); n_v = 2 n_k, GQA 2:1, flat config."),
]

# The value-head ratios of the big checkpoints (issue 27 item 4): n_v / n_k = 3 as in the 27B
# models (16 key / 48 value heads) and 8 as in Qwen3.8-2.4T-A95B (16 / 128), scaled down with
# d_k = d_v as shipped. Their cases: the standard ones + the chunk hazards (hazards.chunk_cases).
GVA = [
    ModelSpec(
        name="tiny-bf16-gva3", seed=903,
        vocab_size=256, hidden_size=32, intermediate_size=64, layer_types=[L, L, L, F],
        num_attention_heads=6, num_key_value_heads=1, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=6,
        linear_key_head_dim=16, linear_value_head_dim=16,
        partial_rotary_factor=0.25, rope_theta=1e7, tie_word_embeddings=False, dtype="BF16",
        nested=True,
        description="The 27B layout scaled down (Qwen3.5/3.6/3.8-27B: 16 key heads, 48 value "
        "heads, 24 query heads on 4 KV heads): n_v = 3 n_k (6 value heads on 2 key heads: value "
        "head j uses key head j // 3; a runtime that tiles the heads (j % 2) or assumes a ratio "
        "of 1 or 2 fails) with d_k = d_v = 16, 6 query heads on 1 KV head, BF16 (`A_log` / "
        "`linear_attn.norm.weight` F32), untied, nested config without extra tensors, 4 layers "
        "with layer 3 full attention. Its cases: the standard ones and the chunk hazards."),
]
MOE_GVA = [
    ModelSpec(
        name="tiny-moe-f32-gva8", seed=904,
        vocab_size=256, hidden_size=32, intermediate_size=0, layer_types=[L, L, L, F],
        num_attention_heads=8, num_key_value_heads=1, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=16,
        linear_key_head_dim=8, linear_value_head_dim=8,
        partial_rotary_factor=0.25, rope_theta=1e7, tie_word_embeddings=False, dtype="F32",
        nested=False,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=8,
        shared_expert_intermediate_size=16, expert_layout="fused",
        description="The Qwen3.8-2.4T-A95B layout scaled down (16 key heads, 128 value heads, "
        "64 query heads on 4 KV heads, 512 routed experts, k = 10): n_v = 8 n_k (16 value "
        "heads on 2 key heads: value head j uses key head j // 8) with d_k = d_v = 8, 8 query "
        "heads on 1 KV head, a MoE block of 8 routed experts (k = 2, `moe_intermediate_size` "
        "8, fused `mlp.experts.gate_up_proj` / `down_proj`) plus a shared expert (width 16) in "
        "every layer; F32, untied, flat `qwen3_5_moe_text` config (`Qwen3_5MoeForCausalLM`), "
        "4 layers with layer 3 full attention. Its cases: the standard ones and the chunk "
        "hazards; the golden adds the router record and `moe_in` per case."),
]

FIXTURES += MOE   # standard cases; their goldens add the router record (golden/SCHEMA.md "MoE")
FIXTURES += Q8    # standard cases; Q8_0 projections (qcgolden/q8_0.py)
FIXTURES += GVA + MOE_GVA   # standard cases + the chunk hazards (hazards.chunk_cases)
HAZARD_CASES = {s.name for s in GVA + MOE_GVA}


def case_list(spec):
    """The case list of a FIXTURES spec: the standard cases, plus the chunk hazards for GVA."""
    out = goldens.default_cases()
    if spec.name in HAZARD_CASES:
        out += hazards.chunk_cases()
    return out


# Fixtures with their own cases and builder (module with SPEC, build(root), cases or CASE):
# not in FIXTURES (whose cases are the standard ones, every margin >= 0.05).
SPECIAL = [longdecode, hazards, longctx]


def all_names():
    """Every generated fixture directory name."""
    return [s.name for s in FIXTURES] + [m.SPEC.name for m in SPECIAL]


def build_special(root):
    for m in SPECIAL:
        m.build(root)


def by_name(name):
    for s in FIXTURES:
        if s.name == name:
            return s
    raise KeyError(name)


def build_one(spec, root, cases=None):
    """Write root/<name>/model and root/<name>/golden.h5; returns the golden's case dict."""
    d = os.path.join(root, spec.name)
    model_dir = os.path.join(d, "model")
    init.write_checkpoint(spec, model_dir)
    return goldens.generate(model_dir, os.path.join(d, "golden.h5"), spec.seed,
                            cases=cases if cases is not None else case_list(spec))


def readme_text():
    """fixtures/README.md (generated, so it always matches the fixture set)."""
    cases = goldens.default_cases()
    lines = ["# fixtures/ — committed tiny Qwen3.5 checkpoints and their goldens", "",
             "Generated by `golden/regen --write` (never edit by hand; `golden/regen` without "
             "`--write` shows what would change). Each `<name>/model/` is a Hugging Face-format "
             "checkpoint with random, deterministic weights (seed below); `<name>/golden.h5` is the "
             "float64 PyTorch golden in schema v1 (`golden/SCHEMA.md`), `model_path` = \"model\". "
             "`tolerances.json` belongs to the harness.", "",
             "Cases in every golden (all but the special fixtures at the end, which have their "
             "own): " + ", ".join("`%s`" % c.name for c in cases) + ".", ""]
    for c in cases:
        lines.append("- `%s`: %s" % (c.name, c.description))
    lines += ["", "Every dense fixture's golden (the special fixtures' too) has, per case and "
              "phase, the residual stream entering each layer's MLP block (after the mixer and "
              "its residual add, before `post_attention_layernorm`: `prefill/mlp_in` [L, T, H], "
              "`decode/mlp_in` [L, S, H]); with `prefill/hidden` it splits a divergence at a "
              "layer into its mixer or its MLP (`golden/SCHEMA.md`, \"Mixer outputs (dense)\")."]
    lines += ["", "The MoE fixtures (`%s`) have the same cases; their goldens add, per case and "
              "phase, the router's top-k expert ids, renormalised weights and margins "
              "(`prefill/router/*`, `decode/router/*`) and the MoE block's input "
              "(`prefill/moe_in`, `decode/moe_in`, in place of `mlp_in`), with every router "
              "margin at least the root attribute `router_margin_threshold` = %g "
              "(`golden/SCHEMA.md`, \"MoE\")."
              % ("`, `".join(m.name for m in MOE + MOE_GVA), goldens.ROUTER_MARGIN_THRESHOLD)]
    hz = hazards.chunk_cases()
    lines += ["", "**Chunk hazards.** The fixtures with the big checkpoints' value-head ratios "
              "(`%s`) add the prefill schedules seen failing in the field "
              "(`golden/qcgolden/hazards.py`): a chunk of 1, 2 or 3 tokens (no longer than the "
              "conv window K - 1 = 3) right after a long first chunk, prompt lengths = 5 "
              "(mod 64), history lengths (start_pos) at 64 n +- 1..10. `check` runs them in "
              "every strategy (static: one token per call; dynamic: chunks of the case's "
              "max_seq_len, 128 when it has none, the history replayed in one prefill; nokv); "
              "`tests/cli/test_chunk_hazards.sh` runs them through `exec:` and shows that a "
              "runtime writing its conv state from a short chunk alone (the vLLM #56196 class, "
              "`tests/adapters/mutants.py conv-short-chunk`) fails them. Cases: "
              % "`, `".join(m.name for m in GVA + MOE_GVA)
              + ", ".join("`%s`" % c.name for c in hz) + ".", ""]
    for c in hz:
        lines.append("- `%s`: %s" % (c.name, c.description))
    lines.append("")
    for s in FIXTURES:
        lines += ["## %s (seed %d)" % (s.name, s.seed), "", s.description, ""]
    for m in SPECIAL:
        cs = m.cases() if hasattr(m, "cases") else [m.CASE]
        lines += ["## %s (seed %d)" % (m.SPEC.name, m.SPEC.seed), "", m.SPEC.description, "",
                  "Its cases (instead of the standard ones):", ""]
        lines += ["- `%s`: %s" % (c.name, c.description) for c in cs]
        lines.append("")
    return "\n".join(lines)
