"""Streamed golden generation: the model run layer by layer over every case at once, for a
checkpoint whose float64 weights do not fit in memory (`generate --stream`, or automatically
when the in-memory estimate exceeds the limit; golden/README.md "Streaming").

How. The cases run unchanged — goldens.choose_case / run_case / prefill_and_decode (or the
--tokens job of __main__) — each in its own worker thread, against a StreamModel instead of a
model.Model. StreamModel.forward does not compute: it hands the call (tokens, state, options)
to the driver and waits. When every live case waits on a call (or has finished), the driver
runs one *pass* over the weights for all those calls: the embedding rows of their tokens, then
layer by layer (read one layer with lazyweights.LazyWeights, run every call through it with
model.decoder_layer, drop it), the final norm, and the logits block by block of lm_head rows.
Then it wakes the cases, which pick their greedy tokens (a decode step needs the logits of the
previous one: one pass per decode step) or their next prompt try, and call again.

Why it is bit-identical to the in-memory model: each call goes through the same functions as
Model.forward (model.token_ids, model.decoder_layer, model.store_moe_trace, model.rms_norm_1p,
the lm_head product) with the same inputs — the weights are the same float64 values
(lazyweights.py), each case keeps its own State, and a logits block is the product with a
block of lm_head rows, whose entries are the same dot products as the full product's (the
reference BLAS computes every output entry on its own; tests/test_stream.py checks it with
blocks of a few rows). Only the driver thread computes with torch.
"""
import threading

import numpy as np
import torch

from . import checkpoint
from . import memory
from . import model as qmodel
from .lazyweights import LazyWeights

LM_BLOCK_BYTES = 64 * 2 ** 20        # float64 bytes of one block of lm_head rows


class _Aborted(BaseException):
    """Raised in a waiting case when the driver stopped (an error elsewhere)."""


class _Call:
    """One forward call of a case, as the driver runs it."""

    def __init__(self, tokens, state, kernel, collect_hidden, moe_trace, cfg):
        self.ids = qmodel.token_ids(tokens, cfg)
        self.state, self.kernel = state, kernel
        self.collect_hidden, self.moe_trace = collect_hidden, moe_trace
        self.layers = [] if moe_trace is not None else None
        self.positions = state.pos + torch.arange(self.ids.numel())
        self.h = self.hidden = self.logits = None
        self.done = False


class StreamModel:
    """model.Model's interface (cfg, new_state, forward) for cases run by run_jobs."""

    def __init__(self, model_dir, cfg, block_bytes=LM_BLOCK_BYTES):
        self.cfg = cfg
        self.weights = LazyWeights(model_dir, cfg)
        self.block_rows = max(1, block_bytes // (8 * cfg.hidden_size))
        self._sched = None

    def close(self):
        self.weights.close()

    def new_state(self):
        return qmodel.State(self.cfg)

    def forward(self, tokens, state, kernel="auto", collect_hidden=False, moe_trace=None):
        """Model.forward, computed by the driver in the next pass (called from a case job)."""
        sched = self._sched
        if sched is None or getattr(_local, "sched", None) is not sched:
            raise RuntimeError("StreamModel.forward outside a case job of run_jobs")
        call = _Call(tokens, state, kernel, collect_hidden, moe_trace, self.cfg)
        with sched.cond:
            sched.pending[_local.index] = call
            sched.cond.notify_all()
            while not call.done and not sched.aborted:
                sched.cond.wait()
            if not call.done:
                raise _Aborted()
        return call.logits, (torch.stack(call.hidden) if collect_hidden else None)

    # --------------------------------------------------------------------------------------------
    # One pass over the weights
    # --------------------------------------------------------------------------------------------

    def run_pass(self, calls):
        """Model.forward for every call, layer-major (see the module doc)."""
        cfg, W = self.cfg, self.weights
        table, index = W.gather_rows("embed_tokens.weight",
                                     np.concatenate([c.ids.numpy() for c in calls]))
        o = 0
        for c in calls:
            n = c.ids.numel()
            c.h = table[index[o:o + n]]
            c.hidden = [c.h] if c.collect_hidden else None
            o += n
        del table
        for i in range(cfg.num_hidden_layers):
            layer = W.layer(i)
            for c in calls:
                c.h = qmodel.decoder_layer(c.h, i, layer, cfg, c.state.layers[i], c.positions,
                                           c.kernel, c.layers)
                if c.collect_hidden:
                    c.hidden.append(c.h)
            del layer
        norm = W.small("norm.weight")
        for c in calls:
            if c.layers is not None:
                qmodel.store_moe_trace(c.layers, c.moe_trace)
                c.layers = None
            c.h = qmodel.rms_norm_1p(c.h, norm, cfg.rms_norm_eps)
            if c.collect_hidden:
                c.hidden[-1] = c.h
            c.state.pos += c.ids.numel()
            c.logits = torch.empty(c.ids.numel(), cfg.vocab_size)
        for r0 in range(0, cfg.vocab_size, self.block_rows):
            r1 = min(r0 + self.block_rows, cfg.vocab_size)
            block = W.rows("lm_head.weight", r0, r1)
            for c in calls:
                c.logits[:, r0:r1] = c.h @ block.T
            del block

    def check_embedding(self):
        """The non-finite check of the embedding rows no pass reads (untied models)."""
        if not self.cfg.tie_word_embeddings:
            for r0 in range(0, self.cfg.vocab_size, self.block_rows):
                self.weights.rows("embed_tokens.weight", r0,
                                  min(r0 + self.block_rows, self.cfg.vocab_size))


# ------------------------------------------------------------------------------------------------
# The driver: case jobs in threads, one pass per round of calls
# ------------------------------------------------------------------------------------------------

_local = threading.local()


class _Sched:
    def __init__(self, n):
        self.cond = threading.Condition()
        self.pending = {}                 # job index -> _Call waiting for the next pass
        self.finished = 0
        self.results = [None] * n
        self.errors = {}                  # job index -> exception
        self.aborted = False


def _worker(sched, k, job, model):
    torch.set_num_threads(1)              # (per thread under OpenMP; the jobs barely compute)
    _local.sched, _local.index = sched, k
    try:
        sched.results[k] = job(model)
    except _Aborted:
        pass
    except BaseException as e:            # noqa: BLE001 - re-raised by run_jobs
        with sched.cond:
            sched.errors[k] = e
    finally:
        with sched.cond:
            sched.finished += 1
            sched.cond.notify_all()


def run_jobs(model, jobs):
    """[job(model) for job in jobs], the jobs run concurrently against the StreamModel and
    their forward calls computed in passes over the weights. A job's exception (the lowest
    job index among those failing in one round) or a pass's is raised here."""
    sched = model._sched = _Sched(len(jobs))
    threads = [threading.Thread(target=_worker, args=(sched, k, job, model), daemon=True,
                                name="qcgolden-case-%d" % k) for k, job in enumerate(jobs)]
    try:
        for t in threads:
            t.start()
        model.check_embedding()
        while True:
            with sched.cond:
                while len(sched.pending) + sched.finished < len(jobs) and not sched.errors:
                    sched.cond.wait()
                if sched.errors:
                    raise sched.errors[min(sched.errors)]
                if not sched.pending:
                    break
                calls = [sched.pending[k] for k in sorted(sched.pending)]
            model.run_pass(calls)
            with sched.cond:
                for c in calls:
                    c.done = True
                sched.pending.clear()
                sched.cond.notify_all()
    finally:
        with sched.cond:
            sched.aborted = True
            sched.cond.notify_all()
        for t in threads:
            t.join(timeout=10)
        model._sched = None
    return sched.results


# ------------------------------------------------------------------------------------------------
# Memory estimate
# ------------------------------------------------------------------------------------------------

def layer_params(cfg):
    """Parameters of every layer (float64 elements of lazyweights' layer(i))."""
    n = [0] * cfg.num_hidden_layers
    for name, shape in checkpoint.expected_shapes(cfg).items():
        if name.startswith("layers."):
            n[int(name.split(".")[1])] += int(np.prod(shape, dtype=object))
    return n


def estimate(cfg, cases, block_bytes=LM_BLOCK_BYTES):
    """What a streamed run holds at its peak, in bytes: the largest layer in float64 (+4 bytes a
    parameter of float32 staging while it is read), an lm_head block or the embedding rows of
    the tokens, every case's state and activations at once, and the results (memory.estimate's).
    cases: [(name, history_prompt, history_decode, n_tokens, n_decode)]."""
    H = cfg.hidden_size
    big = max(layer_params(cfg) or [0])
    rows = max(1, block_bytes // (8 * H))
    tokens = sum(hp + T for _, hp, _, T, _ in cases)
    rows_bytes = 12 * H * max(min(rows, cfg.vocab_size), min(tokens, cfg.vocab_size))
    states = acts = 0
    for _, hp, hd, T, S in cases:
        states += memory.state_floats(cfg, hp + hd + T + S)
        a = memory.forward_floats(cfg, T, hp + hd)
        if hp:
            a = max(a, memory.forward_floats(cfg, hp, 0, hidden=False))
        acts += a
    results = memory.estimate(cfg, cases)["results"]
    run = 8 * (states + acts) + results
    return {"layer_params": big, "layer": 8 * big, "staging": 4 * big, "rows": rows_bytes,
            "states": 8 * states, "activations": 8 * acts, "results": results,
            "total": memory._with_margin(12 * big + rows_bytes + run)}
