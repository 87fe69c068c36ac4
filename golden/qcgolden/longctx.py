"""The long-context fixture (tiny-long-context): one case at the config's whole position range.

One case, `ctx4k`: a 4092-token prompt at position 0 with the export attribute max_seq_len 256
(a runtime prefills it in 16 chunks: 15 of 256 tokens and one of 252; in 64-token chunks of the
chunked DeltaNet inside each), then 4 greedy decode steps, so the last step attends over all
4096 positions (the config's max_position_embeddings) -- 64 key blocks of 64 of a tiled
attention (issue #16). The model is small where the golden grows with the context (vocabulary
64, hidden size 8, one KV head of dimension 16) so the golden stays under 3.5 MB while holding
every dataset the schema requires of a golden (prefill logits and hidden states at every
position, the states after prefill and after decode: golden/SCHEMA.md "Required and
optional"). The prompt is drawn like every other case's (goldens.choose_case: seeds until every
greedy margin >= goldens.MIN_MARGIN).
"""
import os

from . import goldens, init
from .goldens import CaseSpec
from .init import ModelSpec

L, F = "linear_attention", "full_attention"
N_PROMPT, N_DECODE, MAX_SEQ_LEN = 4092, 4, 256

SPEC = ModelSpec(
    name="tiny-long-context", seed=708,
    vocab_size=64, hidden_size=8, intermediate_size=32, layer_types=[L, L, L, F],
    num_attention_heads=2, num_key_value_heads=1, head_dim=16,
    linear_num_key_heads=1, linear_num_value_heads=2,
    linear_key_head_dim=8, linear_value_head_dim=8,
    partial_rotary_factor=0.25, rope_theta=1e7, tie_word_embeddings=True, dtype="F32",
    nested=False,
    description="Long context (F32, tied, flat, 4 layers with layer 3 full attention, V 64, "
    "H 8, 2 query heads on 1 KV head of dimension 16, n_k = 1, n_v = 2, d_k = d_v = 8): one "
    "case `ctx4k`, a 4092-token prompt prefilled in chunks of max_seq_len 256, then 4 greedy "
    "decode steps, 4096 positions in all (the config's max_position_embeddings): the attention "
    "at several thousand positions (64 key blocks of 64).")

CASE = CaseSpec("ctx4k", N_PROMPT, n_decode=N_DECODE, max_seq_len=MAX_SEQ_LEN,
                description="a 4092-token prompt at position 0, prefilled in chunks of 256 "
                "(max_seq_len), then 4 greedy decode steps: 4096 positions")


def build(root):
    """root/tiny-long-context/{model, golden.h5}; returns {case name: case dict}."""
    d = os.path.join(root, SPEC.name)
    model_dir = os.path.join(d, "model")
    init.write_checkpoint(SPEC, model_dir)
    return goldens.generate(model_dir, os.path.join(d, "golden.h5"), SPEC.seed, cases=[CASE])
