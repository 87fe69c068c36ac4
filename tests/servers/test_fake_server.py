"""End-to-end tests of tests/servers/qc_fake_server.py (the vLLM / SGLang test double).

    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/servers

Every server runs as a subprocess on port 0 (its first stdout line names the port) and is
stopped with SIGTERM at the end of the session (killed if it does not exit). All of them start
at once when the first test needs one (startup is the import of torch: ~3 s each, in parallel).
The golden comparisons read fixtures/tiny-f32-tied-flat/golden.h5 (golden/SCHEMA.md).
"""
import http.client
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import h5py
import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SERVER = os.path.join(HERE, "qc_fake_server.py")
FIXTURE = os.path.join(ROOT, "fixtures", "tiny-f32-tied-flat")
GOLDEN = os.path.join(FIXTURE, "golden.h5")
KEY_ENV, KEY = "QC_FAKE_SERVER_TEST_KEY", "sk-test-" + uuid.uuid4().hex
AUTH = {"Authorization": "Bearer " + KEY}
EOS = 255                                 # the fixture's config eos_token_id
EOS_PROMPT = [151, 53, 51, 174]           # greedy: 229, 61, 255 (margin of the 255 choice: 0.71)
DELAY = "15"                              # --step-delay-ms of the servers used concurrently
TOL = 1e-4                                # float32 server vs float64 golden, log-probabilities


# ------------------------------------------------------------------------------------------------
# server processes
# ------------------------------------------------------------------------------------------------

class Server:
    """A running fake server: its port, its --log file, and an HTTP client."""

    def __init__(self, name, key):
        self.name, self.key, self.port = name, key, None
        self.log = tempfile.NamedTemporaryFile(prefix="qcfake-%s-" % name, suffix=".jsonl",
                                               delete=False).name

    def argv(self, args):
        argv = ["--fixture", FIXTURE, "--port", "0", "--log", self.log] + list(args)
        return argv + (["--api-key-env", KEY_ENV] if self.key else [])

    def request(self, method, path, body=None, headers=None, auth=True):
        """(status, headers dict (lower-case names), body bytes)."""
        h = {}
        if body is not None:
            h["Content-Type"] = "application/json"
            body = json.dumps(body) if not isinstance(body, bytes) else body
        if auth and self.key:
            h.update(AUTH)
        h.update(headers or {})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def json(self, method, path, body=None, status=200, **kw):
        st, hdrs, data = self.request(method, path, body, **kw)
        assert st == status, (st, data[:500])
        assert hdrs.get("content-type", "").startswith("application/json"), hdrs
        return json.loads(data)

    def log_lines(self):
        with open(self.log) as f:
            return [json.loads(line) for line in f]


class SubprocessServer(Server):
    """`python3 qc_fake_server.py ...` exactly as a user starts it; the port is read from the
    first stdout line."""

    def __init__(self, name, args, key=False):
        super().__init__(name, key)
        self.err = tempfile.TemporaryFile()
        env = dict(os.environ, **({KEY_ENV: KEY} if key else {}))
        self.proc = subprocess.Popen([sys.executable, SERVER] + self.argv(args),
                                     stdout=subprocess.PIPE, stderr=self.err, env=env)

    def wait_ready(self, deadline):
        while self.port is None:
            left = deadline - time.time()
            if left <= 0 or self.proc.poll() is not None:
                self.err.seek(0)
                raise RuntimeError("server %s did not start: %s"
                                   % (self.name, self.err.read().decode(errors="replace")))
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.5))
            if ready:
                line = self.proc.stdout.readline().decode()
                assert line.startswith("LISTENING http://127.0.0.1:"), line
                self.port = int(line.rsplit(":", 1)[1])

    def terminate(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self):
        """SIGTERM, then the exit code (killed after 10 s: -9)."""
        self.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.err.close()
        return self.proc.returncode


# The other servers are forked from ONE launcher process that imports the server module (and
# torch) once: nine `python3 qc_fake_server.py` starts cost ~40 s of wall time on a loaded
# 2-core machine, the launcher ~5 s. Each child runs the server's main(argv) with its own
# stdout / stderr files; the launcher prints {name: pid} and reaps them.
LAUNCHER = r"""
import json, os, sys, traceback
sys.path.insert(0, sys.argv[1])
import qc_fake_server                     # torch is imported here, once
pids = {}
for name, argv, out, err, env in json.loads(sys.argv[2]):
    pid = os.fork()
    if pid == 0:
        rc = 3
        try:
            os.environ.update(env)
            os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
            os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
            rc = qc_fake_server.main(argv)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    pids[name] = pid
print(json.dumps(pids), flush=True)
bad = 0
for name, pid in pids.items():
    bad |= os.waitpid(pid, 0)[1]
sys.exit(1 if bad else 0)
"""


class ForkedServer(Server):
    def __init__(self, name, args, key=False):
        super().__init__(name, key)
        self.args = args
        self.out = self.log + ".out"
        self.err = self.log + ".err"
        self.pid = None

    def spec(self):
        return [self.name, self.argv(self.args), self.out, self.err,
                {KEY_ENV: KEY} if self.key else {}]

    def wait_ready(self, deadline):
        while self.port is None:
            line = ""
            if os.path.exists(self.out):
                with open(self.out) as f:
                    line = f.readline()
            if line.endswith("\n"):
                assert line.startswith("LISTENING http://127.0.0.1:"), line
                self.port = int(line.rsplit(":", 1)[1])
            elif time.time() > deadline:
                with open(self.err) as f:
                    raise RuntimeError("server %s did not start: %s" % (self.name, f.read()))
            else:
                time.sleep(0.05)

    def terminate(self):
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


SUBPROCESS = {
    # name: (arguments, API key required)
    "sglang": (["--dialect", "sglang"], True),
}
FORKED = {
    "vllm": (["--dialect", "vllm", "--step-delay-ms", DELAY], True),
    "cache-kv-only": (["--mutant", "cache-kv-only"], False),
    "slot-mix": (["--mutant", "slot-mix", "--step-delay-ms", DELAY], False),
    "logprob-shift": (["--mutant", "logprob-shift"], False),
    "bf16": (["--mutant", "bf16"], False),
    "drop-last": (["--mutant", "drop-last"], False),
    "short-chunk-conv": (["--mutant", "short-chunk-conv"], False),
    "nan-hit": (["--mutant", "nan-hit"], False),
}


@pytest.fixture(scope="session")
def servers():
    plain = {n: SubprocessServer(n, a, k) for n, (a, k) in SUBPROCESS.items()}
    forked = {n: ForkedServer(n, a, k) for n, (a, k) in FORKED.items()}
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, HERE, json.dumps([f.spec() for f in forked.values()])],
        stdout=subprocess.PIPE)
    every = dict(plain, **forked)
    try:
        pids = json.loads(launcher.stdout.readline() or "{}")
        for name, pid in pids.items():
            forked[name].pid = pid
        assert set(pids) == set(forked), "the launcher did not start every server"
        deadline = time.time() + 120
        for s in every.values():
            s.wait_ready(deadline)
        yield every
    finally:
        for s in every.values():                 # SIGTERM to all, then wait
            if getattr(s, "pid", True) is not None:
                s.terminate()
        for s in plain.values():
            s.stop()
        try:
            launcher.wait(10)
        except subprocess.TimeoutExpired:
            for s in forked.values():
                if s.pid is not None:
                    try:
                        os.kill(s.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            launcher.kill()
            launcher.wait()
        launcher.stdout.close()
        for s in every.values():
            for path in (s.log, getattr(s, "out", None), getattr(s, "err", None)):
                if isinstance(path, str) and os.path.exists(path):
                    os.unlink(path)
        assert launcher.returncode == 0, "a forked server did not exit cleanly on SIGTERM"


# ------------------------------------------------------------------------------------------------
# golden and request helpers
# ------------------------------------------------------------------------------------------------

def log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def golden_case(name):
    """(the whole sequence fed as a prompt: history + tokens, its start_pos, the golden
    log-softmax of the prefill rows, the decode tokens, the golden log-softmax of the rows that
    chose each decode token)."""
    with h5py.File(GOLDEN, "r") as f:
        c = f["cases"][name]
        hist = [int(t) for t in c["history_tokens"][()]] if "history_tokens" in c else []
        toks = [int(t) for t in c["tokens"][()]]
        pre = log_softmax(c["prefill/logits"][()])
        dec_tokens = [int(t) for t in c["decode/tokens"][()]]
        dec = log_softmax(c["decode/logits"][()])
    choose = np.concatenate([pre[-1:], dec[:-1]])          # row s chose decode token s
    return hist + toks, len(hist), pre, dec_tokens, choose


def complete(srv, prompt, **kw):
    body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True,
            "logprobs": 1, "return_tokens_as_token_ids": True, "return_token_ids": True}
    body.update(kw)
    return srv.json("POST", "/v1/completions", body)


def vllm_prompt_lp(resp, prompt):
    """The actual prompt tokens' log-probs at positions 1.. from prompt_logprobs."""
    plp = resp["choices"][0]["prompt_logprobs"]
    assert plp[0] is None and len(plp) == len(prompt)
    return np.array([plp[p][str(prompt[p])]["logprob"] for p in range(1, len(prompt))])


def vllm_gen_lp(resp):
    return np.array(resp["choices"][0]["logprobs"]["token_logprobs"], np.float64)


def vllm_top_values(resp):
    """Every value of every top_logprobs dict, flattened in order (for exact comparisons)."""
    out = []
    for d in resp["choices"][0]["logprobs"]["top_logprobs"]:
        out += list(d.items())
    return out


def max_top_diff(a, b):
    """max |a - b| over the top_logprobs entries the two answers share, position by position."""
    worst = 0.0
    for da, db in zip(a["choices"][0]["logprobs"]["top_logprobs"],
                      b["choices"][0]["logprobs"]["top_logprobs"]):
        for k in set(da) & set(db):
            worst = max(worst, abs(da[k] - db[k]))
    return worst


def salt():
    return uuid.uuid4().hex


def golden_prompt(length, offset=0):
    """A prompt cut from the golden's len130 case (any token ids would do)."""
    return golden_case("len130")[0][offset:offset + length]


def cold_and_cached(srv, p, q_len, **kw):
    """(cold P+Q, P+Q after P): the cold one alone in its cache partition (a fresh salt), the
    cached one in another fresh partition where P was sent first."""
    pq = golden_prompt(len(p) + q_len)
    assert pq[:len(p)] == p
    cold = complete(srv, pq, logprobs=20, max_tokens=4, cache_salt=salt(), **kw)
    s = salt()
    complete(srv, p, logprobs=1, max_tokens=1, cache_salt=s, **kw)
    warm = complete(srv, pq, logprobs=20, max_tokens=4, cache_salt=s, **kw)
    return cold, warm


def cached_tokens(resp):
    return resp["usage"]["prompt_tokens_details"]["cached_tokens"]


# ------------------------------------------------------------------------------------------------
# vLLM dialect
# ------------------------------------------------------------------------------------------------

def test_vllm_endpoints_and_shapes(servers):
    srv = servers["vllm"]
    st, hdrs, body = srv.request("GET", "/health", auth=False)
    assert (st, body) == (200, b"")
    assert isinstance(srv.json("GET", "/version", auth=False)["version"], str)
    models = srv.json("GET", "/v1/models")
    assert models["object"] == "list" and len(models["data"]) == 1
    card = models["data"][0]
    assert card["object"] == "model" and card["owned_by"] == "vllm"
    assert card["id"] == os.path.join(FIXTURE, "model") and card["max_model_len"] == 4096

    prompt = golden_prompt(10)
    k = 3
    r = complete(srv, prompt, max_tokens=4, logprobs=k, prompt_logprobs=k)
    assert set(r) >= {"id", "object", "created", "model", "choices", "usage"}
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-")
    assert r["usage"] == {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14,
                          "prompt_tokens_details": {"cached_tokens": 0}}
    (c,) = r["choices"]
    assert set(c) == {"index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids",
                      "prompt_logprobs", "prompt_token_ids"}
    assert (c["index"], c["text"], c["finish_reason"], c["stop_reason"]) == (0, "", "length",
                                                                             None)
    assert c["prompt_token_ids"] == prompt and len(c["token_ids"]) == 4
    lp = c["logprobs"]
    assert set(lp) == {"text_offset", "token_logprobs", "tokens", "top_logprobs"}
    assert lp["tokens"] == ["token_id:%d" % t for t in c["token_ids"]]
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(4)]
    for tok, tlp, top in zip(c["token_ids"], lp["token_logprobs"], lp["top_logprobs"]):
        keys = list(top)
        assert keys[0] == "token_id:%d" % tok and top[keys[0]] == tlp    # the sampled token first
        assert len(top) in (k, k + 1) and all(key.startswith("token_id:") for key in keys)
        assert list(top.values())[1:] == sorted(list(top.values())[1:], reverse=True)
    # prompt_logprobs: null first, then {"<id>": {logprob, rank, decoded_token}} holding the
    # actual prompt token (its own rank) and the top-k with ranks 1..k
    plp = c["prompt_logprobs"]
    assert plp[0] is None and len(plp) == len(prompt)
    for p in range(1, len(prompt)):
        d = plp[p]
        first = next(iter(d))
        assert first == str(prompt[p]) and d[first]["rank"] >= 1
        assert all(set(v) == {"logprob", "rank", "decoded_token"} for v in d.values())
        assert all(v["decoded_token"] is None for v in d.values())
        vals = list(d.values())
        if len(d) == k + 1:              # the prompt token is not in the top-k
            assert [v["rank"] for v in vals[1:]] == list(range(1, k + 1))
            assert vals[0]["rank"] > k
        else:                            # it is: one entry, written twice
            assert len(d) == k and sorted(v["rank"] for v in vals) == list(range(1, k + 1))
        assert [v["logprob"] for v in vals[-k:]] == sorted([v["logprob"] for v in vals[-k:]],
                                                           reverse=True)

    # stop at the config's eos_token_id unless ignore_eos; stop_token_ids give stop_reason
    r = complete(srv, EOS_PROMPT, ignore_eos=False)
    c = r["choices"][0]
    assert (c["token_ids"], c["finish_reason"], c["stop_reason"]) == ([229, 61, EOS], "stop",
                                                                      EOS)
    assert len(complete(srv, EOS_PROMPT)["choices"][0]["token_ids"]) == 8       # ignore_eos
    c = complete(srv, EOS_PROMPT, stop_token_ids=[61])["choices"][0]
    assert (c["token_ids"], c["finish_reason"], c["stop_reason"]) == ([229, 61], "stop", 61)
    # echo (with return_token_ids): the prompt's entries come first, the first one null
    c = complete(srv, prompt, echo=True, max_tokens=2, logprobs=1)["choices"][0]
    assert c["logprobs"]["token_logprobs"][0] is None and len(c["logprobs"]["tokens"]) == 12
    assert c["prompt_logprobs"] is not None
    # n > 1 greedy choices are identical
    r = complete(srv, prompt, n=2, max_tokens=2)
    assert [ch["index"] for ch in r["choices"]] == [0, 1]
    assert r["choices"][0]["token_ids"] == r["choices"][1]["token_ids"]


def test_vllm_errors(servers):
    srv = servers["vllm"]

    def err(body, status=400, raw=None, headers=None):
        st, hdrs, data = srv.request("POST", "/v1/completions", raw if raw else body,
                                     headers=headers)
        assert st == status, (st, data)
        e = json.loads(data)["error"]
        assert set(e) == {"message", "type", "param", "code"} and e["code"] == status
        return e

    e = err({"model": "other", "prompt": [1]}, 404)
    assert (e["type"], e["param"], e["message"]) == ("NotFoundError", "model",
                                                     "The model `other` does not exist.")
    e = err({"prompt": [1], "logprobs": 21})
    assert e["message"].startswith("Requested sample logprobs of 21, which is greater than max "
                                   "allowed: 20") and e["param"] == "logprobs"
    e = err({"prompt": [1], "prompt_logprobs": 21})
    assert "prompt logprobs of 21" in e["message"] and e["param"] == "prompt_logprobs"
    assert err({"prompt": "some text"})["type"] == "BadRequestError"
    assert err({"prompt": [1, 256]})["message"].startswith("Token id 256 is out of vocabulary")
    assert err({"prompt": [1], "logprobs": 1})["message"].startswith("Unable to get tokenizer")
    assert err(None, raw=b"{not json")["type"] == "Bad Request"
    assert err({"prompt": [1]}, headers={"Content-Type": "text/plain"})["type"] == "Bad Request"
    st, _, data = srv.request("GET", "/v1/nothing")
    assert st == 404
    st, _, data = srv.request("POST", "/v1/completions", {"prompt": [1]}, auth=False)
    assert (st, json.loads(data)) == (401, {"error": "Unauthorized"})
    st, _, _ = srv.request("POST", "/v1/completions", {"prompt": [1]}, auth=False,
                           headers={"Authorization": "Bearer wrong"})
    assert st == 401


@pytest.mark.parametrize("case", ["len063", "len130", "cont"])
def test_vllm_logprobs_match_golden(servers, case):
    """prompt_logprobs = log_softmax of the golden's prefill logits (rows 0..T-2 predict
    positions 1..T-1 of the case's tokens); the greedy decode follows the golden's tokens with
    its log-probabilities. len130 is prefilled in chunks of 64, 64, 2; cont is history+tokens."""
    prompt, p0, pre, dec_tokens, choose = golden_case(case)
    r = complete(servers["vllm"], prompt, prompt_logprobs=1, cache_salt=salt())
    got = vllm_prompt_lp(r, prompt)[p0:]                   # positions p0+1 .. end
    want = [pre[i, prompt[p0 + 1 + i]] for i in range(len(prompt) - p0 - 1)]
    assert np.max(np.abs(got - want)) < TOL
    c = r["choices"][0]
    assert c["token_ids"] == dec_tokens
    want = [choose[s, t] for s, t in enumerate(dec_tokens)]
    assert np.max(np.abs(vllm_gen_lp(r) - want)) < TOL


def test_vllm_prefix_cache(servers):
    srv = servers["vllm"]
    s = salt()
    p = golden_prompt(20)
    assert cached_tokens(complete(srv, p, cache_salt=s, max_tokens=1)) == 0
    assert cached_tokens(complete(srv, p, cache_salt=s, max_tokens=1)) == 16   # block 16 < 20
    assert cached_tokens(complete(srv, golden_prompt(22), cache_salt=s, max_tokens=1)) == 16
    assert cached_tokens(complete(srv, golden_prompt(22), cache_salt=salt(), max_tokens=1)) == 0
    # a request with prompt_logprobs does not read the cache (but writes it)
    assert cached_tokens(complete(srv, golden_prompt(40), cache_salt=s, max_tokens=1,
                                  prompt_logprobs=0)) == 0
    assert cached_tokens(complete(srv, golden_prompt(40), cache_salt=s, max_tokens=1)) == 32
    # a hit is strictly shorter than the prompt: a 32-token prompt resumes at 16
    assert cached_tokens(complete(srv, golden_prompt(32), cache_salt=s, max_tokens=1)) == 16
    # cold vs cached: the same tokens, differently rounded float32 ([16][rest] vs one chunk)
    worst = 0.0
    for plen in (15, 16, 17, 26):        # |P| at the block size +- 1, and past it
        for q in (1, 3):
            cold, warm = cold_and_cached(srv, golden_prompt(plen), q)
            assert cold["choices"][0]["token_ids"] == warm["choices"][0]["token_ids"]
            worst = max(worst, max_top_diff(cold, warm))
    print("\ncorrect server: max |logprob cold - cached| = %.3g" % worst)
    assert worst < TOL
    # the --log file: chunks of at most --max-chunk 64, the stored block boundaries
    complete(srv, golden_prompt(130), cache_salt=salt(), max_tokens=1)
    req = [e for e in srv.log_lines() if e["path"] == "/v1/completions"][-1]["requests"][0]
    assert req["chunks"] == [64, 64, 2] and req["stored_boundaries"] == list(range(16, 129, 16))


def run_concurrently(fn, args):
    out = [None] * len(args)
    threads = [threading.Thread(target=lambda i=i, a=a: out.__setitem__(i, fn(*a)))
               for i, a in enumerate(args)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


PROMPTS = [golden_prompt(12, 0), golden_prompt(30, 40), golden_prompt(21, 90)]


def solo_and_concurrent(srv):
    """Each prompt alone, then all three at once; every request cold (its own cache salt).
    8 model calls of --step-delay-ms 15 each: a request lasts > 120 ms, the three overlap."""
    solo = [complete(srv, p, logprobs=5, cache_salt=salt()) for p in PROMPTS]
    conc = run_concurrently(lambda p: complete(srv, p, logprobs=5, cache_salt=salt()),
                            [(p,) for p in PROMPTS])
    return solo, conc


def test_concurrent_requests_are_isolated(servers):
    srv = servers["vllm"]
    solo, conc = solo_and_concurrent(srv)
    for a, b in zip(solo, conc):
        assert vllm_top_values(a) == vllm_top_values(b)           # bitwise
    reqs = [e["requests"][0] for e in srv.log_lines()[-3:]]
    assert max(r["in_flight"] for r in reqs) >= 2, reqs           # they did overlap


# ------------------------------------------------------------------------------------------------
# SGLang dialect
# ------------------------------------------------------------------------------------------------

def generate(srv, ids, **kw):
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 8, "temperature": 0,
                                                  "ignore_eos": True}}
    body.update(kw)
    return srv.json("POST", "/generate", body)


def test_sglang_endpoints_and_golden(servers):
    srv = servers["sglang"]
    st, _, body = srv.request("GET", "/health", auth=False)
    assert (st, body) == (200, b"")
    st, _, body = srv.request("GET", "/get_model_info", auth=False)
    assert (st, json.loads(body)) == (401, {"error": "Unauthorized"})
    info = srv.json("GET", "/get_model_info")
    assert info["is_generation"] is True and info["model_path"].endswith("model")
    assert {"tokenizer_path", "preferred_sampling_params", "weight_version"} <= set(info)

    prompt, _, pre, dec_tokens, choose = golden_case("len063")
    r = generate(srv, prompt, return_logprob=True, logprob_start_len=0, top_logprobs_num=3)
    assert set(r) == {"text", "output_ids", "meta_info"} and r["output_ids"] == dec_tokens
    m = r["meta_info"]
    assert {"id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens",
            "input_token_logprobs", "output_token_logprobs", "input_top_logprobs",
            "output_top_logprobs", "e2e_latency"} <= set(m)
    assert m["finish_reason"] == {"type": "length", "length": 8}
    assert (m["prompt_tokens"], m["completion_tokens"], m["cached_tokens"]) == (63, 8, 0)
    itl = m["input_token_logprobs"]
    assert len(itl) == 63 and itl[0] == [None, prompt[0], None]     # first entry always null
    assert [e[1] for e in itl] == prompt and all(e[2] is None for e in itl)
    got = np.array([e[0] for e in itl[1:]])
    assert np.max(np.abs(got - [pre[p - 1, prompt[p]] for p in range(1, 63)])) < TOL
    got = np.array([e[0] for e in m["output_token_logprobs"]])
    assert np.max(np.abs(got - [choose[s, t] for s, t in enumerate(dec_tokens)])) < TOL
    assert m["input_top_logprobs"][0] is None and len(m["input_top_logprobs"]) == 63
    for top in m["input_top_logprobs"][1:] + m["output_top_logprobs"]:
        assert len(top) == 3 and all(len(e) == 3 and e[2] is None for e in top)
        assert [e[0] for e in top] == sorted([e[0] for e in top], reverse=True)
    # logprob_start_len: -1 = the last prompt token only; s = entries from position s (null)
    r = generate(srv, prompt, return_logprob=True)
    assert r["meta_info"]["input_token_logprobs"] == [[None, prompt[-1], None]]
    assert "input_top_logprobs" not in r["meta_info"]
    itl = generate(srv, prompt, return_logprob=True, logprob_start_len=40)["meta_info"][
        "input_token_logprobs"]
    assert len(itl) == 23 and itl[0] == [None, prompt[40], None]
    assert abs(itl[1][0] - pre[40, prompt[41]]) < TOL
    st, _, body = srv.request("POST", "/generate", {"input_ids": prompt, "return_logprob": True,
                                                    "logprob_start_len": 63})
    assert st == 400 and "logprob_start_len" in json.loads(body)["error"]["message"]
    # eos, batches
    r = generate(srv, EOS_PROMPT, sampling_params={"max_new_tokens": 8, "temperature": 0})
    assert r["output_ids"] == [229, 61, EOS]
    assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": EOS}
    rs = generate(srv, [EOS_PROMPT, prompt[:5]])
    assert isinstance(rs, list) and len(rs) == 2 and rs[0]["output_ids"][:3] == [229, 61, EOS]


def test_sglang_prefix_cache_and_flush(servers):
    srv = servers["sglang"]
    st, hdrs, body = srv.request("POST", "/flush_cache")
    assert st == 200 and body.startswith(b"Cache flushed.")
    assert hdrs["content-type"].startswith("text/plain")
    p = golden_prompt(20, 7)
    assert generate(srv, p)["meta_info"]["cached_tokens"] == 0
    assert generate(srv, p)["meta_info"]["cached_tokens"] == 16
    # with return_logprob the match is capped at logprob_start_len
    m = generate(srv, p, return_logprob=True, logprob_start_len=5)["meta_info"]
    assert m["cached_tokens"] == 0 and len(m["input_token_logprobs"]) == 15
    assert generate(srv, p, return_logprob=True, logprob_start_len=17)["meta_info"][
        "cached_tokens"] == 16
    assert generate(srv, p, return_logprob=True)["meta_info"]["cached_tokens"] == 16
    srv.request("GET", "/flush_cache")
    assert generate(srv, p)["meta_info"]["cached_tokens"] == 0


# ------------------------------------------------------------------------------------------------
# mutants: each differs where it should, and only there
# ------------------------------------------------------------------------------------------------

def test_mutant_cache_kv_only(servers):
    srv = servers["cache-kv-only"]
    cold, warm = cold_and_cached(srv, golden_prompt(17), 3)
    assert cached_tokens(warm) == 16 and cached_tokens(cold) == 0
    assert max_top_diff(cold, warm) > 1e-2
    # a cold request is right
    prompt, _, pre, dec_tokens, _ = golden_case("len063")
    r = complete(srv, prompt, prompt_logprobs=0, cache_salt=salt())
    assert r["choices"][0]["token_ids"] == dec_tokens


def test_mutant_short_chunk_conv(servers):
    srv = servers["short-chunk-conv"]
    p = golden_prompt(16)
    for q in (1, 2):                     # a 1- or 2-token chunk after the hit: conv state lost
        cold, warm = cold_and_cached(srv, p, q)
        assert cached_tokens(warm) == 16 and max_top_diff(cold, warm) > 1e-3, q
    cold, warm = cold_and_cached(srv, p, 4)        # a 4-token chunk: the bug is not triggered
    assert cached_tokens(warm) == 16 and max_top_diff(cold, warm) < TOL


def test_mutant_slot_mix(servers):
    srv, good = servers["slot-mix"], servers["vllm"]
    solo, conc = solo_and_concurrent(srv)
    ref = [complete(good, p, logprobs=5, cache_salt=salt()) for p in PROMPTS]
    for a, b in zip(solo, ref):
        assert vllm_top_values(a) == vllm_top_values(b)            # solo: correct, bitwise
    worst = max(max_top_diff(a, b) for a, b in zip(solo, conc))
    assert worst > 1e-3, worst                                       # concurrent: broken


def test_mutant_logprob_shift(servers):
    prompt, _, pre, dec_tokens, choose = golden_case("len063")
    r = complete(servers["logprob-shift"], prompt, prompt_logprobs=0)
    want = [pre[p - 1, prompt[p]] for p in range(1, len(prompt))]
    assert np.max(np.abs(vllm_prompt_lp(r, prompt) - want)) > 0.5
    assert r["choices"][0]["token_ids"] == dec_tokens                # generation unaffected
    assert np.max(np.abs(vllm_gen_lp(r) - [choose[s, t] for s, t in enumerate(dec_tokens)])) \
        < TOL


def test_mutant_bf16(servers):
    prompt, _, pre, dec_tokens, _ = golden_case("len130")
    r = complete(servers["bf16"], prompt, prompt_logprobs=0)
    err = np.max(np.abs(vllm_prompt_lp(r, prompt) - [pre[p - 1, prompt[p]]
                                                     for p in range(1, len(prompt))]))
    print("\nbf16 mutant: max |prompt logprob - golden| = %.3g" % err)
    assert 10 * TOL < err < 0.05          # fails a float32 tolerance, passes a bf16-sized one
    assert r["choices"][0]["token_ids"] == dec_tokens


def test_mutant_drop_last(servers):
    prompt, _, pre, dec_tokens, choose = golden_case("len063")
    r = complete(servers["drop-last"], prompt, prompt_logprobs=0)
    want = [pre[p - 1, prompt[p]] for p in range(1, len(prompt))]
    assert np.max(np.abs(vllm_prompt_lp(r, prompt) - want)) < TOL    # prompt logprobs: right
    assert r["usage"]["prompt_tokens"] == len(prompt)                # silently
    assert r["choices"][0]["prompt_token_ids"] == prompt
    gen = vllm_gen_lp(r)[0]
    assert abs(gen - choose[0, r["choices"][0]["token_ids"][0]]) > 1e-2 or \
        r["choices"][0]["token_ids"][0] != dec_tokens[0]


def test_mutant_nan_hit_gives_500(servers):
    srv = servers["nan-hit"]
    s = salt()
    complete(srv, golden_prompt(16), cache_salt=s, max_tokens=1)
    st, hdrs, body = srv.request("POST", "/v1/completions", {
        "prompt": golden_prompt(21), "max_tokens": 2, "logprobs": 1, "cache_salt": s,
        "return_tokens_as_token_ids": True})
    assert (st, body) == (500, b"Internal Server Error")
    assert hdrs["content-type"].startswith("text/plain")
    assert cached_tokens(complete(srv, golden_prompt(17), cache_salt=s)) == 16   # 1 left: fine


def test_sigterm_exits_cleanly(servers):
    """The server started as `python3 qc_fake_server.py` exits 0 on SIGTERM (the forked ones
    are checked at teardown: the launcher exits 0 only if every child did)."""
    assert servers["sglang"].stop() == 0
