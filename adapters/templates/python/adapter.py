#!/usr/bin/env python3
"""my-runtime as a qwen-conform exec adapter (written by `qwen-conform adapter-init python`).

    qwen-conform check --golden FIXTURE_DIR --backend exec:"python3 adapter.py"

Out of the box it wraps the golden model computed in float32
(adapters/golden/qc_golden_adapter.py of the qwen-conform source tree), so it runs green at once:
verdict PARTIAL, every check it runs PASSES, the checks that need a capability are SKIPPED and
the report says how many each would unlock. Replace the parts marked YOUR RUNTIME with calls
into your runtime, one at a time, and re-run; then uncomment the optional methods below, each
unlocking its checks (the counts are those of fixtures/tiny-f32-tied-flat).

The qwen-conform source tree is found at $QWEN_CONFORM_ROOT, else at the path adapter-init was
run from (below); the helper package (adapters/python/qwen_conform_adapter, stdlib + numpy)
comes from there. Protocol: docs/adapter-protocol.md; helper API: adapters/python/README.md.
Quick subset while developing: docs/runtimes.md ("A quick subset").
"""
import os
import sys

QC_ROOT = os.environ.get("QWEN_CONFORM_ROOT", "@QC_SOURCE_DIR@")
for _p in ("adapters/python", "adapters/golden", "golden"):
    if os.path.join(QC_ROOT, _p) not in sys.path:
        sys.path.insert(0, os.path.join(QC_ROOT, _p))

from qwen_conform_adapter import Runtime, Unsupported, serve  # noqa: E402,F401

# The stand-in runtime (needs torch): YOUR RUNTIME replaces it.
from qc_golden_adapter import GoldenF32  # noqa: E402


class MyRuntime(Runtime):
    name = "my-runtime 0.1"     # shown in reports (read after open: may carry a version)
    max_tokens_per_call = 0     # 0 any; 1 = a static [1,1] export (prefill token by token)
    max_context_len = 0         # 0 = no limit
    # options_supported = ("dn_kernel", "chunk_size")   # needs set_option below; "threads" too

    def open(self, model_dir, options):
        """Load the model. Return None (dims read from config.json) or the dims dict."""
        self.m = GoldenF32()                    # YOUR RUNTIME: load model_dir
        return self.m.open(model_dir, options)

    def reset(self):
        """A new sequence: every state buffer exact zeros, position 0."""
        self.m.reset()                          # YOUR RUNTIME

    def forward(self, tokens, start_pos):
        """tokens int32 [n] at positions start_pos..: logits [n, V] of every position."""
        return self.m.forward(tokens, start_pos)   # YOUR RUNTIME

    # ---- optional capabilities: uncomment / implement to unlock their checks ------------------

    # hidden: uncomment to unlock 27 checks: prefill.hidden names the first divergent layer.
    # def hidden(self):
    #     """[L+1, n, H] of the last forward: [0] embeddings, [i] after layer i-1, [L] after the
    #     final norm. self.hidden_requested says whether the host will ask."""
    #     return self.m.hidden()

    # state_read: uncomment to unlock 216 checks: KV cache, conv and recurrent state after
    # prefill and decode, unused_slots, per-layer state localisation.
    # Return your buffers as they are: KV caches of the filled positions only are padded with
    # zeros to n_pos by the helper; HF cache layouts ([1, heads, seq, dim], [1, C, K],
    # [1, nv, dk, dv], or an object with key_cache / value_cache / conv_states /
    # recurrent_states lists) are converted. Writable views of your own buffers (numpy arrays,
    # CPU torch tensors) also give state_fill for free (below).
    # def state(self, n_pos):
    #     return {"layer_%02d/%s" % (i, k): v for i, d in enumerate(self.m.cache.layers)
    #             for k, v in d.items() if k.endswith(("_cache", "_state"))}

    # state_fill: 54 checks: garbage_reset, restore_after_garbage (unused_slots with state).
    # Not needed when state() returns views of your buffers (the helper fills them itself).
    # def fill_state(self, value):
    #     """Every element of every state buffer := value (NaN); the position kept."""
    #     self.m.fill_state(value)

    # dn_kernel (9 checks: chunked_eq_recurrent) and chunk_size (5 checks: chunk_sweep): with
    # options_supported above. threads (27 checks: threads_bitwise): "threads" in
    # options_supported, results bit-identical for any thread count.
    # def set_option(self, key, value):
    #     self.m.set_option(key, value)         # value is a string: "chunked", "64", "2"

    # snapshot: uncomment both to unlock 8 checks: snapshot_restore, snapshot_chunk_boundary,
    # rollback, prefix_reuse (restore_after_garbage with state_fill).
    # def snapshot(self, slot):
    #     """Copy the whole state of the current sequence into slot 0..7 (a real copy)."""
    #     import copy
    #     self.snaps = getattr(self, "snaps", {})
    #     self.snaps[slot] = copy.deepcopy(self.m.cache)
    #
    # def restore(self, slot):
    #     """The current sequence becomes exactly what snapshot(slot) saved."""
    #     import copy
    #     if slot not in getattr(self, "snaps", {}):
    #         raise ValueError("snapshot slot %d was never written" % slot)
    #     self.m.cache = copy.deepcopy(self.snaps[slot])

    # sequences: uncomment to unlock 2 checks: multi_sequence, batch_invariance (snapshot_copy
    # with snapshot): sequence 0..2 becomes current, each with its own state.
    # def select_sequence(self, seq):
    #     if not 0 <= seq <= 2:
    #         raise Unsupported("sequence %d" % seq)
    #     seqs = self.__dict__.setdefault("seqs", {})
    #     seqs[getattr(self, "cur", 0)] = self.m.cache
    #     if seq not in seqs:                   # a fresh sequence
    #         self.m.reset()
    #         seqs[seq] = self.m.cache
    #     self.m.cache, self.cur = seqs[seq], seq

    # trim: 2 checks: rollback_trim. Drop positions n_pos.. as if never processed, the DeltaNet
    # state included (the golden model cannot: leave it out unless your runtime can).
    # def trim(self, n_pos):
    #     raise Unsupported("trim")

    # topk_only: a runtime that cannot return full logits (a server) defines forward_topk
    # INSTEAD of forward; the topk.* checks run and the full-logit checks are SKIPPED.
    # def forward_topk(self, tokens, start_pos, k):
    #     """(ids [n, k], logprobs [n, k]): per position the k most likely ids, descending."""
    #     raise Unsupported("top-k")

    # close: release resources at the end of the session.
    # def close(self):
    #     pass


if __name__ == "__main__":
    raise SystemExit(serve(MyRuntime()))
