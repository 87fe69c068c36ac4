#!/usr/bin/python3
"""A fake inference server: the golden model (float32) behind vLLM's or SGLang's HTTP API.

    /usr/bin/python3 tests/servers/qc_fake_server.py --fixture fixtures/tiny-f32-tied-flat \
        --dialect vllm --port 0 [--mutant NAME] [--log requests.jsonl]

A TEST DOUBLE for qwen-conform's HTTP backend: it answers token-id prompts with the log-
probabilities of the golden model (golden/qcgolden, computed in float32 the way
adapters/golden/qc_golden_adapter.py does it), in the request and response shapes of the real
servers, and behaves like a serving engine where the serving battery probes it: a block prefix
cache that stores the whole model state (KV caches, DeltaNet conv and recurrent states), a pool
of slots for concurrent requests, prefills split into chunks. --mutant NAME injects one realistic
server bug (see MUTANTS below). Stdlib + the repository's golden model only (torch, numpy).

The first line on stdout is `LISTENING http://127.0.0.1:PORT` (flushed); everything else goes to
stderr. SIGTERM / SIGINT stop it cleanly (exit 0). tests/servers/README.md documents the options.

----------------------------------------------------------------------------------------------
Facts about the real servers this file reproduces, and where they were read (public sources,
vllm-project/vllm and sgl-project/sglang as stored in the search index, 2025-2026; versions
differ in message texts and in extra null fields, never in the fields used here):

vLLM (OpenAI-compatible server)
  * CompletionRequest fields and defaults: prompt list[int] | list[list[int]], max_tokens 16
    (null -> 16), temperature unset -> 1.0, n 1, logprobs, prompt_logprobs (-1 = whole vocab),
    echo (prompt_logprobs := logprobs when unset), ignore_eos, stop_token_ids, seed,
    return_tokens_as_token_ids, return_token_ids, cache_salt (1..1024 chars); unknown fields are
    ignored.                      vllm/entrypoints/openai/completion/protocol.py (CompletionRequest,
                                  to_sampling_params, check_logprobs, normalize_null_max_tokens)
  * Response: CompletionResponse{id "cmpl-...", object "text_completion", created, model,
    choices, system_fingerprint, usage}; choice {index, text, logprobs, finish_reason,
    stop_reason, token_ids, prompt_logprobs, prompt_token_ids} (token ids only with
    return_token_ids); logprobs {text_offset, token_logprobs, tokens, top_logprobs}.
                                  same protocol.py (CompletionLogProbs, CompletionResponseChoice);
                                  vllm/entrypoints/openai/completion/serving.py
                                  (request_output_to_completion_response)
  * top_logprobs per position: the dict {sampled token, then the top-k in descending order},
    keeping entries i <= k (so k or k+1 entries), values max(logprob, -9999.0); a token is
    "token_id:N" when return_tokens_as_token_ids (format_token_id_placeholder); without it and
    without a tokenizer vLLM raises "Unable to get tokenizer because `skip_tokenizer_init=True`".
                                  completion/serving.py (_create_completion_logprobs);
                                  vllm/entrypoints/generate/base/serving.py (_get_decoded_token,
                                  format_token_id_placeholder, clamp_prompt_logprobs)
  * prompt_logprobs: a list, null first ("logprob of first prompt token is None"), then per
    position a dict keyed by the token id (a JSON string) -> {"logprob", "rank",
    "decoded_token"}: the actual prompt token first with its own rank, then the top-k with
    ranks 1..k (a token in both is written twice into the dict: one entry). decoded_token is
    null without a tokenizer; -inf clamped to -9999.0.
                                  vllm/logprobs.py (create_prompt_logprobs,
                                  append_logprobs_for_next_position); vllm/v1/engine/logprobs.py
  * rank = number of vocabulary entries whose logprob >= the token's.
                                  vllm/v1/sample/ops/logprobs.py (batched_count_greater_than)
  * A request with prompt_logprobs does not READ the prefix cache
    (skip_reading_prefix_cache = prompt_logprobs is not None); it still writes it. A hit never
    covers the whole prompt (at most num_tokens - 1, block aligned); cache_salt partitions it.
                                  vllm/sampling_params.py; vllm/v1/core/kv_cache_manager.py
  * usage {prompt_tokens, total_tokens, completion_tokens, prompt_tokens_details
    {cached_tokens}}; prompt_tokens_details is null unless the server runs with
    --enable-prompt-tokens-details (here: on; --no-prompt-tokens-details gives null).
                                  vllm/entrypoints/serve/engine/protocol.py (UsageInfo,
                                  PromptTokenUsageInfo); completion/serving.py
  * Errors: {"error": {"message", "type", "param", "code"}}: 400 "BadRequestError" (a
    VLLMValidationError's str() appends " (parameter=P, value=V)"), 404 "NotFoundError" with
    "The model `X` does not exist." (param "model"); request-validation errors 400
    "Bad Request".                vllm/entrypoints/serve/utils/error_response.py;
                                  vllm/entrypoints/serve/engine/serving.py (_check_model);
                                  vllm/entrypoints/openai/server_utils.py (handlers);
                                  vllm/exceptions.py (VLLMValidationError.__str__)
  * "Requested sample logprobs of N, which is greater than max allowed: M" (param logprobs),
    "Requested prompt logprobs of N, ..." (param prompt_logprobs); --max-logprobs default 20.
                                  vllm/sampling_params.py (_validate_logprobs)
  * A NaN anywhere in a non-streaming answer: Starlette's JSONResponse refuses it
    (allow_nan=False) and the client gets HTTP 500, text/plain "Internal Server Error".
                                  vllm/entrypoints/openai/completion/api_router.py (JSONResponse);
                                  vllm-project/vllm#19661, sgl-project/sglang#5984
  * Without a tokenizer the model's EOS id is None (get_eos_token_id), but the generation
    config, built from config.json when there is no generation_config.json
    (GenerationConfig.from_model_config), carries eos_token_id, and update_from_generation_config
    adds it to stop_token_ids unless ignore_eos: greedy decoding stops there with finish_reason
    "stop" and stop_reason = that id (check_stop sets stop_reason for a stop token; it stays
    null only for the tokenizer's EOS).
                                  vllm/renderers/base.py (get_eos_token_id);
                                  vllm/transformers_utils/config.py (try_get_generation_config);
                                  vllm/sampling_params.py (update_from_generation_config);
                                  vllm/v1/core/sched/utils.py (check_stop)
  * GET /health -> 200, empty body; GET /version -> {"version": ...}; GET /v1/models ->
    ModelList{object "list", data [ModelCard{id, object "model", created, owned_by "vllm",
    root, parent, max_model_len, permission}]}.
                                  vllm/entrypoints/openai/api_server.py;
                                  serve/engine/protocol.py (ModelCard, ModelList)
  * --api-key: paths starting with /v1 need "Authorization: Bearer KEY", else 401
    {"error": "Unauthorized"}; /health, /version are open.
                                  vllm/entrypoints/openai/server_utils.py (AuthenticationMiddleware)

SGLang (native API)
  * POST /generate (GenerateReqInput): input_ids list[int] | list[list[int]] (a batch answers a
    list), sampling_params {max_new_tokens 128, temperature 1.0, ignore_eos, stop_token_ids},
    return_logprob, logprob_start_len (-1 = only the last prompt token), top_logprobs_num,
    return_text_in_logprobs, rid.
                                  python/sglang/srt/managers/io_struct.py (GenerateReqInput)
  * logprob_start_len: -1 (or return_logprob false) -> len(input_ids) - 1; >= len(input_ids)
    is refused. The input logprobs cover input_ids[start:]; the first entry is ALWAYS null
    ("Always pad the first one with None"): input_token_logprobs_val = [None] + raw[:-1], where
    raw[j] is the logprob, under the row at position start+j, of the token after it; the last
    raw row belongs to the first output token. input_top_logprobs the same, null first.
                                  python/sglang/srt/managers/scheduler.py (handle_generate_request),
                                  python/sglang/srt/managers/
                                  scheduler_output_processor_mixin.py
                                  (_process_input_token_logprobs)
  * The prefix-cache match is capped at len(input_ids) - 1 and, with return_logprob, at
    logprob_start_len (cached positions have no logits).
                                  python/sglang/srt/managers/schedule_batch.py
                                  (init_next_round_input / _compute_max_prefix_len)
  * Logprob entries are tuples (logprob, token_id, text) -> JSON [logprob, id, null] when
    return_text_in_logprobs is false; a top-k position with no values is null.
                                  python/sglang/srt/managers/tokenizer_manager.py
                                  (detokenize_logprob_tokens, detokenize_top_logprobs_tokens)
  * Response {"text", "output_ids", "meta_info"} ({"output_ids", "meta_info"}, no "text", with
    --skip-tokenizer-init, which a fixture without a tokenizer needs); meta_info {id,
    finish_reason, prompt_tokens, weight_version, total_retractions, [input_token_logprobs,
    output_token_logprobs, input_top_logprobs, output_top_logprobs,] completion_tokens,
    cached_tokens, e2e_latency}; finish_reason {"type": "length", "length": N} or
    {"type": "stop", "matched": id}.
                                  tokenizer_manager.py (_handle_batch_output);
                                  python/sglang/srt/managers/schedule_batch.py (FINISH_LENGTH,
                                  FINISH_MATCHED_TOKEN)
  * GET /health (and /health_generate) -> 200 empty; GET /get_model_info -> {model_path,
    tokenizer_path, is_generation, preferred_sampling_params, weight_version};
    GET|POST /flush_cache -> 200 text "Cache flushed.\n..." (400 while requests run);
    errors 400 {"error": {"message": ...}}.
                                  python/sglang/srt/entrypoints/http_server.py
  * --api-key: every path but /health* and /metrics needs the Bearer key, else 401
    {"error": "Unauthorized"}.    python/sglang/srt/utils (add_api_key_middleware)
----------------------------------------------------------------------------------------------

What is NOT reproduced (the HTTP backend does not use it): streaming (400 here), text prompts
(no tokenizer: 400), top_p / top_k / penalties (ignored), speculative decoding, SGLang's
OpenAI-compatible routes, vLLM's /tokenize and chat routes.
"""
import argparse
import hashlib
import hmac
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# One intra-op thread in every thread (set before torch loads its OpenMP runtime): the
# arithmetic of a request must not depend on how many others run at the same time.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "adapters", "golden"))

# qc_golden_adapter puts adapters/python and golden/ on sys.path and wraps qcgolden's RoPE table
# so that it follows the default dtype (float64 angles rounded to float32): importing it is what
# makes the golden model a float32 model here. golden/ and the adapter are not modified.
import qc_golden_adapter  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from qcgolden import model as qmodel  # noqa: E402

MUTANTS = {
    "none": "the correct server",
    "cache-kv-only": "a prefix-cache hit restores the KV caches but not the DeltaNet conv / "
                     "recurrent states (they restart from zeros): sglang#29368's class",
    "slot-mix": "with >= 2 requests in flight, a request's DeltaNet state at its first prefill "
                "chunk is another slot's stale state (solo requests are correct)",
    "logprob-shift": "prompt log-probabilities of position p+1 are reported at position p",
    "bf16": "logits rounded to bfloat16 before the log-softmax (and the greedy choice)",
    "drop-last": "the last prompt token is silently dropped (the model runs on prompt[:-1]; "
                 "usage and prompt_token_ids still show the whole prompt)",
    "short-chunk-conv": "after a cache hit, a prefill chunk shorter than K-1 (the conv window) "
                        "starts from a zero conv state: vllm#56196's class",
    "nan-hit": "after a cache hit with 4..10 tokens left to prefill, the logits are NaN "
               "(vllm#55766's class): vLLM then answers 500",
}

VLLM_VERSION = "0.0.0+qc.fake"      # what GET /version reports
SGLANG_TEXT_FLUSH = ("Cache flushed.\nPlease check backend logs for more details. "
                     "(When there are running or waiting requests, the operation will not be "
                     "performed.)\n")


class ApiError(Exception):
    """A request the server refuses: HTTP status + the dialect's JSON error body."""

    def __init__(self, status, body):
        super().__init__(str(body))
        self.status, self.body = status, body


# ================================================================================================
# The model: qcgolden on float32 weights, its state, the prefix cache, the slots
# ================================================================================================

def read_config(model_dir):
    """(eos token ids as a set, max_position_embeddings) from config.json (flat or nested)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    text = cfg.get("text_config") or {}
    eos = cfg.get("eos_token_id", text.get("eos_token_id"))
    eos = set() if eos is None else set(eos if isinstance(eos, list) else [eos])
    max_len = cfg.get("max_position_embeddings", text.get("max_position_embeddings", 4096))
    return eos, int(max_len)


def dn_layers(state):
    """The DeltaNet (linear-attention) layer dicts of a qcgolden State."""
    return [d for d in state.layers if "recurrent_state" in d]


def zero_dn_states(state, conv=True, recurrent=True):
    for d in dn_layers(state):
        if conv:
            d["conv_state"] = torch.zeros_like(d["conv_state"])
        if recurrent:
            d["recurrent_state"] = torch.zeros_like(d["recurrent_state"])


class PrefixCache:
    """Block prefix cache: the whole model state after every block-aligned prefix of a prompt.

    An entry is keyed by a chained hash of the blocks (the salt hashed into the first one, as
    vLLM does) and holds a private copy of the qcgolden State (KV caches of every position,
    conv and recurrent states, position). LRU eviction beyond `capacity` entries."""

    def __init__(self, block, capacity):
        self.block, self.capacity = block, capacity
        self.lock = threading.Lock()
        self.entries = OrderedDict()

    def keys(self, salt, tokens):
        """[(b, key) for every block boundary b <= len(tokens)]."""
        h = hashlib.sha256(b"salt:" + (salt or "").encode()).digest()
        out = []
        for b in range(self.block, len(tokens) + 1, self.block):
            blk = np.asarray(tokens[b - self.block:b], dtype="<i8").tobytes()
            h = hashlib.sha256(h + blk).digest()
            out.append((b, h))
        return out

    def lookup(self, salt, tokens, limit):
        """(b, State copy) for the longest cached prefix b <= limit, or (0, None)."""
        with self.lock:
            for b, key in reversed(self.keys(salt, tokens[:limit])):
                st = self.entries.get(key)
                if st is not None:
                    self.entries.move_to_end(key)
                    return b, st.clone()
        return 0, None

    def get(self, key):
        with self.lock:
            st = self.entries.get(key)
            if st is not None:
                self.entries.move_to_end(key)
                return st.clone()
        return None

    def put(self, key, state):
        with self.lock:
            self.entries[key] = state.clone()
            self.entries.move_to_end(key)
            while len(self.entries) > self.capacity:
                self.entries.popitem(last=False)

    def flush(self):
        with self.lock:
            n = len(self.entries)
            self.entries.clear()
        return n


class Slot:
    def __init__(self, index):
        self.index = index
        self.busy = False
        self.stale = None      # the final State of this slot's previous request (never cleared)


class SlotPool:
    """N slots; a request holds one from the start of its prefill to its last decode step and
    waits when all are busy. `active` = requests holding a slot (= in flight)."""

    def __init__(self, n):
        self.slots = [Slot(i) for i in range(n)]
        self.cond = threading.Condition()

    def acquire(self):
        with self.cond:
            while all(s.busy for s in self.slots):
                self.cond.wait()
            slot = next(s for s in self.slots if not s.busy)   # the lowest free slot
            slot.busy = True
            return slot

    def release(self, slot, final_state):
        with self.cond:
            if final_state is not None:
                slot.stale = final_state
            slot.busy = False
            self.cond.notify()

    def active(self):
        with self.cond:
            return sum(s.busy for s in self.slots)

    def other_stale(self, me):
        """Another slot's stale state (the lowest index that has one), or None."""
        with self.cond:
            for s in self.slots:
                if s is not me and s.stale is not None:
                    return s.stale
        return None


class Engine:
    """The serving engine: prefix cache + slots + chunked prefill + decode, one mutant."""

    def __init__(self, model_dir, block, max_chunk, slots, cache_entries, mutant, step_delay):
        torch.set_num_threads(1)
        # Process-wide: every tensor qcgolden creates without a dtype (State buffers, masks) is
        # float32. Set once, never restored (qc_golden_adapter's per-call context manager swaps
        # a global and would race between request threads).
        torch.set_default_dtype(torch.float32)
        if qmodel.rope_cos_sin is not qc_golden_adapter._rope_default_dtype:
            raise RuntimeError("qcgolden's RoPE table is not the float32-following wrapper")
        self.model = qmodel.Model.from_dir(model_dir)
        self.model.W = {k: v.to(torch.float32) for k, v in self.model.W.items()}
        self.cfg = self.model.cfg
        self.vocab = self.cfg.vocab_size
        self.conv_k = self.cfg.linear_conv_kernel_dim
        self.eos, self.max_model_len = read_config(model_dir)
        self.cache = PrefixCache(block, cache_entries)
        self.pool = SlotPool(slots)
        self.block, self.max_chunk = block, max_chunk
        self.mutant = mutant
        self.step_delay = step_delay
        self.in_flight = 0                      # requests inside run() (SGLang's flush check)
        self.in_flight_lock = threading.Lock()

    # -- numerics --------------------------------------------------------------------------------
    def forward(self, tokens, state):
        """Logits [n, V] float32 of `tokens` continuing `state` (updated in place)."""
        torch.set_num_threads(1)
        logits, _ = self.model.forward([int(t) for t in tokens], state)
        if logits.dtype != torch.float32:
            raise AssertionError("computed in %s, not float32" % logits.dtype)
        if self.step_delay:
            time.sleep(self.step_delay)
        return logits

    def logprobs(self, logits):
        """log_softmax in float32 of logits rows (bf16 mutant: rounded to bfloat16 first)."""
        if self.mutant == "bf16":
            logits = logits.to(torch.bfloat16).to(torch.float32)
        return torch.log_softmax(logits, dim=-1)

    # -- one request -----------------------------------------------------------------------------
    def run(self, prompt, *, salt=None, read_cache=True, cache_limit=None, max_new=16,
            temperature=1.0, seed=None, ignore_eos=False, stop_ids=(), n=1):
        """Prefill `prompt` (resuming from the prefix cache) and decode n sequences.

        Returns a dict: tokens (what the model actually ran on), cached (prefix length served
        from the cache), prompt_lp (float32 [len(tokens) - cached, V] log-probs of the rows at
        positions cached..len-1), seqs [{ids, lp [len(ids), V] (the row each id was chosen
        from), finish, stop_reason}] and a `log` dict."""
        with self.in_flight_lock:
            self.in_flight += 1
        try:
            return self._run(prompt, salt, read_cache, cache_limit, max_new, temperature, seed,
                             ignore_eos, stop_ids, n)
        finally:
            with self.in_flight_lock:
                self.in_flight -= 1

    def _run(self, prompt, salt, read_cache, cache_limit, max_new, temperature, seed,
             ignore_eos, stop_ids, n):
        tokens = list(prompt)
        applied = []
        if self.mutant == "drop-last" and len(tokens) > 1:
            tokens = tokens[:-1]
            applied.append("drop-last")
        T = len(tokens)
        limit = T - 1 if cache_limit is None else max(0, min(T - 1, cache_limit))
        slot = self.pool.acquire()
        state = None
        try:
            # 1. resume from the longest cached block-aligned prefix (strictly shorter than T)
            h, state = self.cache.lookup(salt, tokens, limit) if read_cache else (0, None)
            if state is None:
                h, state = 0, self.model.new_state()
            if h and self.mutant == "cache-kv-only":
                zero_dn_states(state)
                applied.append("cache-kv-only")
            # 2. the bug of a shared slot: at the first chunk another slot's state leaks in
            in_flight = self.pool.active()
            if self.mutant == "slot-mix" and in_flight >= 2:
                other = self.pool.other_stale(slot)
                if other is not None:
                    for mine, theirs in zip(dn_layers(state), dn_layers(other)):
                        mine["conv_state"] = theirs["conv_state"].clone()
                        mine["recurrent_state"] = theirs["recurrent_state"].clone()
                        mine["has_previous"] = True
                    applied.append("slot-mix")
            start = state.clone()           # where the cache writer (step 5) starts
            # 3. prefill the rest in chunks of at most max_chunk tokens
            chunks, rows = [], []
            pos = h
            while pos < T:
                piece = tokens[pos:pos + self.max_chunk]
                if (self.mutant == "short-chunk-conv" and h and len(piece) < self.conv_k - 1):
                    zero_dn_states(state, recurrent=False)
                    applied.append("short-chunk-conv")
                logits = self.forward(piece, state)
                if self.mutant == "nan-hit" and h and 4 <= T - h <= 10:
                    logits = torch.full_like(logits, float("nan"))
                    applied.append("nan-hit")
                rows.append(logits)
                chunks.append(len(piece))
                pos += len(piece)
            prompt_lp = self.logprobs(torch.cat(rows))
            # 4. decode
            stops = set(int(s) for s in stop_ids)
            eos = set() if ignore_eos else self.eos
            seqs = []
            for i in range(n):
                st = state if n == 1 else state.clone()
                rng = np.random.default_rng(None if seed is None else [int(seed) & (2**63 - 1), i])
                seqs.append(self._decode(st, prompt_lp[-1], max_new, temperature, rng, eos,
                                         stops))
            # 5. store the state at every block boundary of the prompt past the hit
            stored = self._write_cache(salt, tokens, h, start)
        finally:
            self.pool.release(slot, state)
        log = {"prompt_len": len(prompt), "computed_len": T, "cached_tokens": h,
               "read_cache": bool(read_cache), "cache_limit": limit, "chunks": chunks,
               "stored_boundaries": stored, "slot": slot.index, "in_flight": in_flight,
               "mutations": sorted(set(applied)),
               "salt_sha256_8": hashlib.sha256(salt.encode()).hexdigest()[:8] if salt else None}
        return {"tokens": tokens, "cached": h, "prompt_lp": prompt_lp, "seqs": seqs, "log": log}

    def _decode(self, state, lp_row, max_new, temperature, rng, eos, stops):
        """Greedy (temperature < 1e-5, vLLM's _SAMPLING_EPS) or sampled decode from lp_row."""
        ids, lps, finish, stop_reason = [], [], "length", None
        for step in range(max_new):
            if temperature < 1e-5:
                tok = int(torch.argmax(lp_row))               # first maximum: lowest id
            else:
                z = lp_row.double().numpy() / temperature
                p = np.exp(z - z.max())
                tok = int(rng.choice(len(p), p=p / p.sum()))
            ids.append(tok)
            lps.append(lp_row)
            if tok in stops:
                finish, stop_reason = "stop", tok
                break
            if tok in eos:
                finish = "stop"
                break
            if step + 1 < max_new:
                lp_row = self.logprobs(self.forward([tok], state))[-1]
        return {"ids": ids, "lp": torch.stack(lps) if lps else torch.zeros(0, self.vocab),
                "finish": finish, "stop_reason": stop_reason}

    def _write_cache(self, salt, tokens, h, start):
        """Store the State after every block boundary b (h < b <= len(tokens)), computing it
        block by block from `start` (the request's state at h). A boundary already cached is
        kept and continued from (cached blocks are immutable, as in vLLM). Block-by-block is
        how a block-aligned engine produces these states; the request itself ran its remainder
        as one chunk (or --max-chunk pieces), so a later hit resumes from differently rounded
        float32 state than a cold run: see the README for how much."""
        stored = []
        st, pos = start, h
        for b, key in self.cache.keys(salt, tokens):
            if b <= h:
                continue
            have = self.cache.get(key)
            if have is not None:
                st, pos = have, b
                continue
            st = st.clone()
            self.forward_quiet(tokens[pos:b], st)
            self.cache.put(key, st)
            stored.append(b)
            pos = b
        return stored

    def forward_quiet(self, tokens, state):
        """forward() without --step-delay (the cache writer is not a request step)."""
        torch.set_num_threads(1)
        self.model.forward([int(t) for t in tokens], state)


# ================================================================================================
# Log-probability helpers (float32 tensors in, Python floats out)
# ================================================================================================

def top_k(lp_row, k):
    """[(id, logprob)] of the k largest, descending, ties to the lower id; k = -1: all."""
    if k == 0:
        return []
    vals, idx = torch.sort(lp_row, descending=True, stable=True)
    if k > 0:
        vals, idx = vals[:k], idx[:k]
    return list(zip(idx.tolist(), vals.tolist()))


def rank_of(lp_row, tok):
    """vLLM's rank: how many entries have a logprob >= the token's (1 = the largest)."""
    return int((lp_row >= lp_row[tok]).sum())


# ================================================================================================
# vLLM dialect
# ================================================================================================

def vllm_error(status, message, err_type, param=None):
    return ApiError(status, {"error": {"message": message, "type": err_type, "param": param,
                                       "code": status}})


def vllm_validation(message, param=None, value=None):
    """A VLLMValidationError as vLLM renders it: str() appends the parameter and value."""
    extras = []
    if param is not None:
        extras.append("parameter=%s" % param)
    if value is not None:
        extras.append("value=%s" % value)
    if extras:
        message = "%s (%s)" % (message, ", ".join(extras))
    return vllm_error(400, message, "BadRequestError", param)


def vllm_bad_request(message):
    """A request-body validation error (FastAPI RequestValidationError -> 400 "Bad Request")."""
    return vllm_error(400, message, "Bad Request")


def _int_field(body, name, default=None, allow_none=True):
    """An integer field as pydantic reads it (lax: 8.0 is 8); a wrong type is a 400."""
    v = body.get(name, default)
    if v is None and allow_none:
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise vllm_bad_request("%s: Input should be a valid integer, got %r" % (name, v))
    return v


def _float_field(body, name, default):
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise vllm_bad_request("%s: Input should be a valid number, got %r" % (name, v))
    return float(v)


class VllmApi:
    def __init__(self, engine, args):
        self.engine, self.args = engine, args
        self.model_name = args.served_model_name or args.model_path
        self.created = int(time.time())

    def models(self):
        return {"object": "list", "data": [{
            "id": self.model_name, "object": "model", "created": self.created,
            "owned_by": "vllm", "root": self.args.model_path, "parent": None,
            "max_model_len": self.engine.max_model_len,
            "permission": [{
                "id": "modelperm-" + uuid.uuid4().hex, "object": "model_permission",
                "created": self.created, "allow_create_engine": False, "allow_sampling": True,
                "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                "allow_fine_tuning": False, "organization": "*", "group": None,
                "is_blocking": False}]}]}

    def parse(self, body):
        """Validate a CompletionRequest body; returns the normalised request dict."""
        if not isinstance(body, dict):
            raise vllm_bad_request("Input should be a valid dictionary or object")
        model = body.get("model")
        if model and model != self.model_name:
            raise vllm_error(404, "The model `%s` does not exist." % model, "NotFoundError",
                             "model")
        prompt = body.get("prompt")
        if prompt is None or prompt == "" or isinstance(prompt, str) or (
                isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt)):
            if prompt is None or prompt == "":
                raise vllm_validation("Either prompt or prompt_embeds must be provided and "
                                      "non-empty.", "prompt")
            raise vllm_error(400, "Unable to tokenize a text prompt: this server runs without a "
                             "tokenizer (skip_tokenizer_init); send token ids", "BadRequestError")
        if not isinstance(prompt, list):
            raise vllm_bad_request("prompt: Input should be a valid list")
        prompts = prompt if prompt and isinstance(prompt[0], list) else [prompt]
        for p in prompts:
            if not isinstance(p, list) or not all(
                    isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in p):
                raise vllm_bad_request("prompt: Input should be a list of integers >= 0")
            if not p:
                raise vllm_validation("The decoder prompt cannot be empty", "prompt")
            if max(p) >= self.engine.vocab:
                raise vllm_validation("Token id %d is out of vocabulary" % max(p), "prompt")
        if body.get("stream"):
            raise vllm_error(400, "stream=true is not supported by the fake server",
                             "BadRequestError", "stream")
        logprobs = _int_field(body, "logprobs")
        prompt_logprobs = _int_field(body, "prompt_logprobs")
        for name, v in (("prompt_logprobs", prompt_logprobs), ("logprobs", logprobs)):
            if v is not None and v < 0 and v != -1:
                raise vllm_validation("`%s` must be a positive value or -1." % name, name, v)
        echo = bool(body.get("echo", False))
        if prompt_logprobs is None and echo:
            prompt_logprobs = logprobs
        max_lp = self.engine.vocab if self.args.max_logprobs == -1 else self.args.max_logprobs
        for what, name, v in (("sample", "logprobs", logprobs),
                              ("prompt", "prompt_logprobs", prompt_logprobs)):
            if v:
                v = self.engine.vocab if v == -1 else v
                if v > max_lp:
                    raise vllm_validation("Requested %s logprobs of %d, which is greater than max "
                                          "allowed: %d" % (what, v, max_lp), name, v)
        max_tokens = body.get("max_tokens")
        max_tokens = 16 if max_tokens is None else _int_field(body, "max_tokens")
        if max_tokens < 0 or (max_tokens == 0 and not echo):
            raise vllm_validation("max_tokens must be at least 1, got %d." % max_tokens,
                                  "max_tokens", max_tokens)
        n = _int_field(body, "n", 1, allow_none=False)
        if n < 1:
            raise vllm_validation("n must be at least 1, got %d." % n, "n", n)
        temperature = _float_field(body, "temperature", 1.0)
        if temperature < 0:
            raise vllm_validation("temperature must be non-negative, got %s." % temperature,
                                  "temperature", temperature)
        salt = body.get("cache_salt")
        if salt is not None and (not isinstance(salt, str) or not 1 <= len(salt) <= 1024):
            raise vllm_bad_request("cache_salt: String should have 1 to 1024 characters")
        as_ids = body.get("return_tokens_as_token_ids")
        as_ids = self.args.return_tokens_as_token_ids if as_ids is None else bool(as_ids)
        if echo and not body.get("return_token_ids"):
            raise vllm_error(400, "echo needs a tokenizer to detokenize the prompt; send "
                             "return_token_ids: true", "BadRequestError", "echo")
        for p in prompts:
            if len(p) >= self.engine.max_model_len:
                raise vllm_validation(
                    "This model's maximum context length is %d tokens. However, your request "
                    "has %d input tokens. Please reduce the length of the input messages."
                    % (self.engine.max_model_len, len(p)), "input_tokens", len(p))
        stop_ids = body.get("stop_token_ids") or []
        if not isinstance(stop_ids, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
            raise vllm_bad_request("stop_token_ids: Input should be a list of integers")
        return {"prompts": prompts, "logprobs": logprobs, "prompt_logprobs": prompt_logprobs,
                "echo": echo, "max_tokens": max_tokens, "n": n, "temperature": temperature,
                "seed": _int_field(body, "seed"),
                "ignore_eos": bool(body.get("ignore_eos", False)),
                "stop_token_ids": stop_ids, "salt": salt,
                "as_ids": as_ids, "return_token_ids": bool(body.get("return_token_ids"))}

    def token_str(self, tok, as_ids):
        if as_ids:
            return "token_id:%d" % tok
        # a plain ValueError in vLLM's _get_decoded_token: 400, no param
        raise vllm_error(400, "Unable to get tokenizer because `skip_tokenizer_init=True`",
                         "BadRequestError")

    def completion(self, body, log):
        r = self.parse(body)
        choices, n_prompt, n_gen, cached = [], 0, 0, None
        for prompt in r["prompts"]:
            max_new = 1 if (r["echo"] and r["max_tokens"] == 0) else \
                min(r["max_tokens"], self.engine.max_model_len - len(prompt))
            # no tokenizer: the config's EOS is one of the stop_token_ids (see the top comment)
            stops = list(r["stop_token_ids"]) + ([] if r["ignore_eos"] else
                                                 sorted(self.engine.eos))
            res = self.engine.run(
                prompt, salt=r["salt"], read_cache=r["prompt_logprobs"] is None,
                max_new=max_new, temperature=r["temperature"], seed=r["seed"],
                ignore_eos=True, stop_ids=stops, n=r["n"])
            log.append(res["log"])
            cached = res["cached"]
            plp = None
            if r["prompt_logprobs"] is not None:
                plp = self.prompt_logprobs(prompt, res, r["prompt_logprobs"])
            for seq in res["seqs"]:
                choices.append(self.choice(len(choices), prompt, plp, seq, r))
                n_gen += len(seq["ids"])
            n_prompt += len(prompt)
        usage = {"prompt_tokens": n_prompt, "total_tokens": n_prompt + n_gen,
                 "completion_tokens": n_gen,
                 "prompt_tokens_details": (None if self.args.no_prompt_tokens_details
                                           else {"cached_tokens": cached})}
        return {"id": "cmpl-" + uuid.uuid4().hex, "object": "text_completion",
                "created": int(time.time()), "model": self.model_name, "choices": choices,
                "service_tier": None, "system_fingerprint": None, "usage": usage,
                "kv_transfer_params": None}

    def _row(self, res, p):
        """The log-prob row that predicts prompt position p (row p-1; the mutant: row p)."""
        row = p if self.engine.mutant == "logprob-shift" else p - 1
        return res["prompt_lp"][row - res["cached"]]

    def prompt_logprobs(self, prompt, res, k):
        """vLLM's prompt_logprobs: [None, {id: {logprob, rank, decoded_token}}, ...]."""
        out = [None]
        for p in range(1, len(prompt)):
            lp = self._row(res, p)
            tok = prompt[p]
            d = {str(tok): {"logprob": max(float(lp[tok]), -9999.0), "rank": rank_of(lp, tok),
                            "decoded_token": None}}
            for rank, (i, v) in enumerate(top_k(lp, k), start=1):
                d[str(i)] = {"logprob": max(v, -9999.0), "rank": rank, "decoded_token": None}
            out.append(d)
        return out

    def choice(self, index, prompt, plp, seq, r):
        ids = seq["ids"]
        echo_only = r["echo"] and r["max_tokens"] == 0
        logprobs = None
        if r["logprobs"] is not None:
            k = r["logprobs"]
            toks, tlps, tops, offs = [], [], [], []
            entries = []                 # (token id, its logprob dict or None)
            if r["echo"]:
                entries += [(prompt[0], None)]
                entries += [(t, d) for t, d in zip(prompt[1:], plp[1:])]
            if not echo_only:
                for step, tok in enumerate(ids):
                    lp = seq["lp"][step]
                    d = {tok: float(lp[tok])}                 # the sampled token first
                    for i, v in top_k(lp, k):
                        d[i] = v
                    entries.append((tok, d))
            for tok, d in entries:
                s = self.token_str(tok, r["as_ids"])
                offs.append(0 if not offs else offs[-1] + len(toks[-1]))
                toks.append(s)
                if d is None:
                    tlps.append(None)
                    tops.append(None)
                    continue
                if isinstance(next(iter(d.values())), dict):      # a prompt_logprobs entry
                    d = {int(key): v["logprob"] for key, v in d.items()}
                tlps.append(max(d[tok], -9999.0))
                tops.append({self.token_str(i, r["as_ids"]): max(v, -9999.0)
                             for j, (i, v) in enumerate(d.items()) if k >= j})
            logprobs = {"text_offset": offs, "token_logprobs": tlps, "tokens": toks,
                        "top_logprobs": tops}
        return {"index": index, "text": "", "logprobs": logprobs,
                "finish_reason": seq["finish"], "stop_reason": seq["stop_reason"],
                "token_ids": ids if r["return_token_ids"] else None,
                "prompt_logprobs": plp,
                "prompt_token_ids": list(prompt) if r["return_token_ids"] else None}


# ================================================================================================
# SGLang dialect
# ================================================================================================

def sglang_error(message):
    return ApiError(400, {"error": {"message": message}})


class SglangApi:
    def __init__(self, engine, args):
        self.engine, self.args = engine, args

    def model_info(self):
        return {"model_path": self.args.model_path, "tokenizer_path": self.args.model_path,
                "is_generation": True, "preferred_sampling_params": None,
                "weight_version": "default"}

    def generate(self, body, log):
        if not isinstance(body, dict):
            raise sglang_error("the request body must be a JSON object")
        ids = body.get("input_ids")
        if ids is None:
            if body.get("text") is not None:
                raise sglang_error("text prompts need a tokenizer; this server runs with "
                                   "--skip-tokenizer-init: send input_ids")
            raise sglang_error("Either text, input_ids or input_embeds should be provided.")
        if body.get("stream"):
            raise sglang_error("stream=true is not supported by the fake server")
        batch = bool(ids) and isinstance(ids[0], list)
        prompts = ids if batch else [ids]
        outs = []
        for i, p in enumerate(prompts):
            if not isinstance(p, list) or not p or not all(
                    isinstance(t, int) and not isinstance(t, bool) for t in p):
                raise sglang_error("input_ids must be a non-empty list of integers")
            if min(p) < 0 or max(p) >= self.engine.vocab:
                raise sglang_error("The input_ids %d is out of the vocabulary range [0, %d)"
                                   % (max(p) if max(p) >= self.engine.vocab else min(p),
                                      self.engine.vocab))
            rid = body.get("rid")
            rid = (rid[i] if isinstance(rid, list) else rid) or uuid.uuid4().hex
            outs.append(self.one(p, body, rid, log))
        return outs if batch else outs[0]

    @staticmethod
    def params(body):
        """(max_new_tokens, temperature, ignore_eos, stop ids, seed, return_logprob,
        logprob_start_len, top_logprobs_num) with SGLang's defaults; a wrong type is a 400."""
        sp = body.get("sampling_params") or {}
        try:
            if not isinstance(sp, dict):
                raise TypeError("sampling_params must be an object")
            max_new = sp.get("max_new_tokens")
            start = body.get("logprob_start_len")
            stops = [int(t) for t in (sp.get("stop_token_ids") or [])]
            seed = sp.get("sampling_seed")
            return (128 if max_new is None else int(max_new),
                    float(1.0 if sp.get("temperature") is None else sp["temperature"]),
                    bool(sp.get("ignore_eos", False)), stops,
                    None if seed is None else int(seed),
                    bool(body.get("return_logprob", False)),
                    -1 if start is None else int(start),
                    int(body.get("top_logprobs_num") or 0))
        except (TypeError, ValueError) as e:
            raise sglang_error("invalid request: %s" % e)

    def one(self, prompt, body, rid, log):
        t0 = time.time()
        max_new, temperature, ignore_eos, stops, seed, want_lp, start, topn = self.params(body)
        T = len(prompt)
        if start < -1:
            raise sglang_error("logprob_start_len must be >= -1, got %d" % start)
        if start == -1 or not want_lp:
            start = T - 1                # "By default, only return the logprobs for output tokens"
        if start >= T:
            raise sglang_error("req.logprob_start_len=%d is higher than the number of input "
                               "tokens len(req.origin_input_ids)=%d. Please use a smaller "
                               "logprob_start_len." % (start, T))
        max_new = max(0, min(max_new, self.engine.max_model_len - T - 1))
        salt = body.get("extra_key")
        res = self.engine.run(
            prompt, salt=salt if isinstance(salt, str) and salt else None, read_cache=True,
            cache_limit=start if want_lp else None, max_new=max_new, temperature=temperature,
            seed=seed, ignore_eos=ignore_eos, stop_ids=stops, n=1)
        log.append(res["log"])
        seq = res["seqs"][0]
        if seq["finish"] == "length":
            finish = {"type": "length", "length": max_new}
        else:
            finish = {"type": "stop", "matched": seq["ids"][-1]}
        meta = {"id": rid, "finish_reason": finish, "prompt_tokens": T,
                "weight_version": "default", "total_retractions": 0}
        if want_lp:
            in_lp, in_top = [[None, prompt[start], None]], [None]
            for p in range(start + 1, T):
                row = p if self.engine.mutant == "logprob-shift" else p - 1
                lp = res["prompt_lp"][row - res["cached"]]
                in_lp.append([float(lp[prompt[p]]), prompt[p], None])
                in_top.append([[v, i, None] for i, v in top_k(lp, topn)] or None)
            out_lp, out_top = [], []
            for step, tok in enumerate(seq["ids"]):
                lp = seq["lp"][step]
                out_lp.append([float(lp[tok]), tok, None])
                out_top.append([[v, i, None] for i, v in top_k(lp, topn)] or None)
            meta["input_token_logprobs"] = in_lp
            meta["output_token_logprobs"] = out_lp
            if topn > 0:
                meta["input_top_logprobs"] = in_top
                meta["output_top_logprobs"] = out_top
        meta["completion_tokens"] = len(seq["ids"])
        meta["cached_tokens"] = res["cached"]
        meta["e2e_latency"] = time.time() - t0
        out = {} if self.args.skip_tokenizer_init else {"text": ""}
        out["output_ids"] = seq["ids"]
        out["meta_info"] = meta
        return out


# ================================================================================================
# HTTP
# ================================================================================================

TEXT = "text/plain; charset=utf-8"
INTERNAL_ERROR = (500, b"Internal Server Error", TEXT)    # what Starlette answers on a crash


def json_response(status, obj):
    """(status, body, content type) like Starlette's JSONResponse: compact UTF-8 JSON. A NaN
    or Inf cannot be encoded (allow_nan=False) and becomes what the client of a real server
    then gets: 500, text/plain "Internal Server Error"."""
    try:
        data = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return INTERNAL_ERROR
    return status, data.encode("utf-8"), "application/json"


def empty_response(status=200):
    return status, b"", None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"        # keep-alive; every answer has a Content-Length
    server_version = "qc-fake-server/1.0"
    sys_version = ""

    def log_message(self, fmt, *args):   # no access log on stderr (the --log file has it all)
        pass

    def send(self, status, body, ctype):
        self.send_response(status)
        if ctype:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def authorized(self, path):
        """The dialect's protected paths need "Authorization: Bearer KEY" (--api-key-env)."""
        key = self.server.api_key
        if key is None:
            return True
        if self.server.dialect == "vllm" and not path.startswith("/v1"):
            return True
        if self.server.dialect == "sglang" and path.startswith(("/health", "/metrics")):
            return True
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            token.encode("utf-8"), key.encode("utf-8"))

    def route(self, method):
        """Dispatch, write the --log line, then answer (a harness that reads the log after
        the answer finds the line there)."""
        path = self.path.split("?", 1)[0]
        body = self.read_body() if method in ("POST", "PUT") else b""
        t0 = time.time()
        entry = {"t": round(t0, 3), "method": method, "path": path}
        log = []                         # the engine's record of each request it ran
        try:
            if not self.authorized(path):
                response = json_response(401, {"error": "Unauthorized"})
            elif (method, path) in self.server.routes:
                response = self.server.routes[(method, path)](self, body, log)
            elif any(p == path for _, p in self.server.routes):
                response = json_response(405, {"detail": "Method Not Allowed"})
            else:
                response = json_response(404, {"detail": "Not Found"})
        except ApiError as e:
            response = json_response(e.status, e.body)
            entry["error"] = e.body
        except Exception as e:                       # a bug of ours: 500 like an ASGI crash
            import traceback
            traceback.print_exc()
            response = INTERNAL_ERROR
            entry["error"] = "%s: %s" % (type(e).__name__, e)
        entry["status"] = response[0]
        entry["ms"] = round(1000 * (time.time() - t0), 1)
        if log:
            entry["requests"] = log
        self.server.write_log(entry)
        self.send(*response)

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_PUT(self):
        self.route("PUT")


def json_body(raw, error):
    try:
        return json.loads(raw.decode("utf-8") or "null")
    except (ValueError, UnicodeDecodeError) as e:
        raise error("JSON decode error: %s" % e)


def build_routes(dialect, engine, args):
    """{(method, path): fn(handler, raw body, log list) -> (status, body, content type)}."""
    if dialect == "vllm":
        api = VllmApi(engine, args)

        def completions(h, raw, log):
            ctype = (h.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            if ctype != "application/json":
                raise vllm_bad_request("Unsupported Media Type: Only 'application/json' is "
                                       "allowed")
            return json_response(200, api.completion(json_body(raw, vllm_bad_request), log))

        return {
            ("GET", "/health"): lambda h, raw, log: empty_response(),
            ("GET", "/version"): lambda h, raw, log: json_response(200,
                                                                   {"version": VLLM_VERSION}),
            ("GET", "/v1/models"): lambda h, raw, log: json_response(200, api.models()),
            ("POST", "/v1/completions"): completions,
        }

    api = SglangApi(engine, args)

    def generate(h, raw, log):
        return json_response(200, api.generate(json_body(raw, sglang_error), log))

    def flush(h, raw, log):
        if engine.in_flight:             # SGLang refuses while requests run
            return 400, SGLANG_TEXT_FLUSH.encode(), TEXT
        log.append({"flushed_entries": engine.cache.flush()})
        return 200, SGLANG_TEXT_FLUSH.encode(), TEXT

    return {
        ("GET", "/health"): lambda h, raw, log: empty_response(),
        ("GET", "/health_generate"): lambda h, raw, log: empty_response(),
        ("GET", "/get_model_info"): lambda h, raw, log: json_response(200, api.model_info()),
        ("POST", "/generate"): generate,
        ("PUT", "/generate"): generate,
        ("GET", "/flush_cache"): flush,
        ("POST", "/flush_cache"): flush,
    }


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True                # a client holding a connection never blocks exit
    allow_reuse_address = True

    def __init__(self, addr, dialect, engine, args, api_key, log_path):
        super().__init__(addr, Handler)
        self.dialect, self.api_key = dialect, api_key
        self.routes = build_routes(dialect, engine, args)
        self.log_lock = threading.Lock()
        self.log_file = open(log_path, "a", buffering=1) if log_path else None

    def write_log(self, entry):
        if self.log_file is None:
            return
        line = json.dumps(entry, default=str, allow_nan=True)
        with self.log_lock:
            self.log_file.write(line + "\n")


# ================================================================================================
# main
# ================================================================================================

def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="A fake vLLM / SGLang server around the float32 golden model (a test "
                    "double for qwen-conform's HTTP backend).",
        epilog="mutants: " + "; ".join("%s = %s" % kv for kv in MUTANTS.items()))
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--fixture", help="a fixture directory (its model/ is served)")
    src.add_argument("--model", help="a Hugging Face checkpoint directory")
    ap.add_argument("--dialect", choices=("vllm", "sglang"), default="vllm")
    ap.add_argument("--host", default="127.0.0.1", help="only 127.0.0.1 is accepted")
    ap.add_argument("--port", type=int, default=0, help="0: pick a free port (default)")
    ap.add_argument("--served-model-name", help="vllm: the model id (default: the model path)")
    ap.add_argument("--max-logprobs", type=int, default=20,
                    help="vllm: largest logprobs / prompt_logprobs accepted (20; -1: the vocab)")
    ap.add_argument("--api-key-env", metavar="VAR",
                    help="require 'Authorization: Bearer $VAR' (the dialect's protected paths)")
    ap.add_argument("--block-size", type=int, default=16, help="prefix-cache block (16)")
    ap.add_argument("--max-chunk", type=int, default=64, help="longest prefill chunk (64)")
    ap.add_argument("--slots", type=int, default=4, help="concurrent requests (4)")
    ap.add_argument("--cache-entries", type=int, default=4096,
                    help="prefix-cache capacity in block states, LRU (4096)")
    ap.add_argument("--mutant", choices=sorted(MUTANTS), default="none")
    ap.add_argument("--step-delay-ms", type=float, default=0.0,
                    help="sleep after every model call of a request (a slow engine, so that "
                         "concurrent requests overlap); default 0")
    ap.add_argument("--log", metavar="FILE", help="append one JSON line per HTTP request")
    ap.add_argument("--return-tokens-as-token-ids", action="store_true",
                    help="vllm: the server flag (the request field overrides it)")
    ap.add_argument("--no-prompt-tokens-details", action="store_true",
                    help="vllm: usage.prompt_tokens_details null (vLLM's default without "
                         "--enable-prompt-tokens-details)")
    ap.add_argument("--skip-tokenizer-init", action="store_true",
                    help="sglang: answers without the \"text\" field, as SGLang does with this "
                         "flag")
    args = ap.parse_args(argv)
    if args.host != "127.0.0.1":
        ap.error("--host %r refused: the fake server listens on 127.0.0.1 only" % args.host)
    for name in ("block_size", "max_chunk", "slots", "cache_entries"):
        if getattr(args, name) < 1:
            ap.error("--%s must be >= 1" % name.replace("_", "-"))
    args.model_path = args.model or os.path.join(args.fixture, "model")
    if not os.path.isfile(os.path.join(args.model_path, "config.json")):
        ap.error("%s: no config.json" % args.model_path)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            print("qc_fake_server: --api-key-env %s: the variable is unset or empty"
                  % args.api_key_env, file=sys.stderr)
            return 2
    engine = Engine(args.model_path, args.block_size, args.max_chunk, args.slots,
                    args.cache_entries, args.mutant, args.step_delay_ms / 1000.0)
    server = FakeServer((args.host, args.port), args.dialect, engine, args, api_key, args.log)

    def stop(signum, frame):            # serve_forever runs here: shut down from another thread
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    port = server.server_address[1]
    sys.stdout.write("LISTENING http://127.0.0.1:%d\n" % port)
    sys.stdout.flush()
    print("qc_fake_server: %s dialect, %s, mutant %s, block %d, max chunk %d, %d slots%s"
          % (args.dialect, args.model_path, args.mutant, args.block_size, args.max_chunk,
             args.slots, ", API key required" if api_key else ""), file=sys.stderr)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
        if server.log_file:
            server.log_file.close()
    return 0


if __name__ == "__main__":
    rc = main()
    # Everything is closed (socket, log file); skip the interpreter's teardown of torch, which
    # takes 0.4 s on a quiet machine and seconds on a loaded one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
