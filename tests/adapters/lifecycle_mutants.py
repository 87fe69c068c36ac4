#!/usr/bin/python3
"""Exec adapters with a state lifecycle, for tests/cli/test_lifecycle.sh: the float32 golden
adapter plus snapshots, sequences and a trim, correct or with ONE injected bug.

    /usr/bin/python3 tests/adapters/lifecycle_mutants.py NAME

NAME              the bug                                            what must catch it
good              none                                               (everything passes)
restore-noop      snapshot() saves only the position: restore()      snapshot_restore,
                  brings no state back                                restore_after_garbage, ...
restore-keeps-conv  restore() brings back everything but the conv     rollback, snapshot_restore
                  states (a rollback that forgets the conv state)
seq-off-by-one    sequence i > 0 lives in slot i - 1                  multi_sequence,
                                                                      batch_invariance
trim-keeps-state  trim() moves the position back but keeps the        rollback_trim
                  recurrent state of the rejected tokens
"""
import copy
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "adapters", "golden"))

from qc_golden_adapter import GoldenF32  # noqa: E402  (puts adapters/python on sys.path)
from qwen_conform_adapter import serve  # noqa: E402

N_SEQ, N_SNAP = 3, 8


class Lifecycle(GoldenF32):
    """GoldenF32 with snapshots (deep copies), three sequences and a trim that re-prefills the
    kept tokens (a DeltaNet state cannot be cut: it is recomputed)."""

    def open(self, model_dir, options):
        info = super().open(model_dir, options)
        self.seqs = [None] * N_SEQ       # the caches of the sequences not current
        self.toks = [[] for _ in range(N_SEQ)]
        self.cur, self.snaps = 0, {}
        return info

    def slot(self, seq):
        return seq

    def reset(self):
        super().reset()
        if hasattr(self, "toks"):
            self.toks[self.slot(self.cur)] = []

    def forward(self, tokens, start_pos):
        if start_pos == 0 and self.cache.pos != 0:
            self.toks[self.slot(self.cur)] = []
        out = super().forward(tokens, start_pos)
        self.toks[self.slot(self.cur)] = self.toks[self.slot(self.cur)][:start_pos] + \
            [int(t) for t in tokens]
        return out

    def snapshot(self, slot):
        if not 0 <= slot < N_SNAP:
            raise ValueError("snapshot slot %d outside 0..%d" % (slot, N_SNAP - 1))
        self.snaps[slot] = (copy.deepcopy(self.cache), list(self.toks[self.slot(self.cur)]))

    def restore(self, slot):
        if slot not in self.snaps:
            raise ValueError("snapshot slot %d was never written" % slot)
        cache, toks = self.snaps[slot]
        self.cache = copy.deepcopy(cache)
        self.toks[self.slot(self.cur)] = list(toks)
        self.last_hidden = None

    def select_sequence(self, seq):
        if not 0 <= seq < N_SEQ:
            raise ValueError("sequence %d outside 0..%d" % (seq, N_SEQ - 1))
        old, new = self.slot(self.cur), self.slot(seq)
        if new != old:
            self.seqs[old] = self.cache
            if self.seqs[new] is None:
                GoldenF32.reset(self)
            else:
                self.cache = self.seqs[new]
        self.cur = seq
        self.last_hidden = None

    def trim(self, n_pos):
        keep = self.toks[self.slot(self.cur)][:n_pos]
        if n_pos > len(self.toks[self.slot(self.cur)]):
            raise ValueError("trim to %d > %d positions" % (n_pos, self.cache.pos))
        GoldenF32.reset(self)
        self.toks[self.slot(self.cur)] = []
        if keep:
            self.forward(keep, 0)


def cut_kv(cache, n_pos):
    """Truncate the KV caches to n_pos positions (they grow by concatenation) and set pos: what
    a KV-only runtime does to roll back; the DeltaNet buffers are left as they are."""
    for d in cache.layers:
        for name in ("k_cache", "v_cache"):
            if name in d:
                d[name] = d[name][:, :n_pos].contiguous()
    cache.pos = n_pos


class RestoreNoop(Lifecycle):
    def restore(self, slot):
        cache, toks = self.snaps[slot]
        cut_kv(self.cache, cache.pos)       # the KV cache and position only
        self.toks[self.slot(self.cur)] = list(toks)


class RestoreKeepsConv(Lifecycle):
    def restore(self, slot):
        convs = [d.get("conv_state") for d in self.cache.layers]
        super().restore(slot)
        for d, c in zip(self.cache.layers, convs):
            if c is not None:
                d["conv_state"] = c


class SeqOffByOne(Lifecycle):
    def slot(self, seq):
        return seq - 1 if seq > 0 else 0


class TrimKeepsState(Lifecycle):
    def trim(self, n_pos):
        cut_kv(self.cache, n_pos)           # a KV cache can be cut; DeltaNet state cannot
        self.toks[self.slot(self.cur)] = self.toks[self.slot(self.cur)][:n_pos]


MUTANTS = {"good": Lifecycle, "restore-noop": RestoreNoop, "restore-keeps-conv": RestoreKeepsConv,
           "seq-off-by-one": SeqOffByOne, "trim-keeps-state": TrimKeepsState}


def main(argv):
    if len(argv) != 2 or argv[1] not in MUTANTS:
        sys.stderr.write("usage: lifecycle_mutants.py %s\n" % "|".join(MUTANTS))
        return 2
    rt = MUTANTS[argv[1]]()
    rt.name = "golden-f32 lifecycle %s" % argv[1]
    return serve(rt)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
