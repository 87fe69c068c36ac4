#!/usr/bin/python3
"""A deliberately broken vLLM-like server, for the http: backend's fault handling.

    /usr/bin/python3 tests/servers/qc_hostile_server.py --mode MODE [--vocab V] [--port 0]
        [--delay S] [--log FILE]

It answers GET /v1/models like a vLLM server (owned_by "vllm", so `api=auto` picks vllm; GET
/get_model_info and /props are 404, as on vLLM) and every POST /v1/completions with the fault
MODE names. The baseline answer is a WELL-FORMED vLLM completion (CompletionResponse with
return_tokens_as_token_ids / return_token_ids): max_tokens generated ids, top_logprobs dicts
keyed "token_id:N", prompt_logprobs (null first, then one {id: {logprob, rank, decoded_token}}
dict per prompt token, the prompt token itself included) when asked. Its numbers are not a
model's (token j of the top-k has log-probability -1 - 0.1 j everywhere), so against a golden
it FAILS the topk.* rows on the numbers, never on the shape (mode `ok`). Each other mode breaks
exactly one thing of that answer:

    ok           the baseline: valid shapes, wrong numbers (a control)
    malformed    the body cut after 40 bytes (truncated JSON), HTTP 200
    nan500       HTTP 500, text/plain "Internal Server Error" (vLLM's answer to a NaN)
    nanjson      a bare NaN literal where a top log-probability belongs (not JSON), HTTP 200
    slow         sleeps --delay seconds (30) before answering (the client's timeout must fire)
    huge         streams an endless body, no Content-Length (the client's size limit must fire)
    redirect     HTTP 307 to http://192.0.2.1/v1/completions (must not be followed)
    badid        a token id outside the vocabulary (--vocab + 7) in top_logprobs[0]
    fewrows      prompt_logprobs one entry short (or no top_logprobs when none were asked)
    missing      no logprobs object at all
    reset        closes the connection without an answer (TCP RST: SO_LINGER 0)
    ok-but-string-keys  top_logprobs[0] keyed by token strings, not ids

--vocab V is the vocabulary the client validates against (give the golden's vocab_size: the
baseline's ids are 0..max(k, 1)-1, badid's is V + 7). Listens on 127.0.0.1 only and prints
`LISTENING http://127.0.0.1:PORT` first (flushed); nothing else on stdout. SIGTERM / SIGINT stop
it (exit 0). --log FILE appends one JSON line per request ({"method", "path", "mode",
"prompt_len", "max_tokens"}). stdlib only.
"""
import argparse
import http.server
import json
import os
import signal
import socket
import struct
import sys
import threading
import time

MODES = ("ok", "malformed", "nan500", "nanjson", "slow", "huge", "redirect", "badid", "fewrows",
         "missing", "reset", "ok-but-string-keys")


def lp_of(j):
    """The baseline log-probability of token j (descending in j, finite, < 0)."""
    return -1.0 - 0.1 * j


def good_answer(prompt, k, n_gen, prompt_lp):
    """A valid vLLM CompletionResponse: n_gen generated tokens (id 0), top-k = ids 0..k-1."""
    k = max(1, k)
    top = {"token_id:%d" % j: lp_of(j) for j in range(k)}
    # the fields a fault touches come first, so that the first 200 bytes of the body (the
    # evidence the client quotes) show them
    choice = {
        "logprobs": {"top_logprobs": [dict(top) for _ in range(n_gen)],
                     "tokens": ["token_id:0"] * n_gen,
                     "token_logprobs": [lp_of(0)] * n_gen, "text_offset": [0] * n_gen},
        "index": 0, "text": "", "finish_reason": "length", "stop_reason": None,
        "token_ids": [0] * n_gen, "prompt_logprobs": None, "prompt_token_ids": prompt,
    }
    if prompt_lp:
        rows = [None]
        for tok in prompt[1:]:
            row = {}
            if isinstance(tok, int) and tok >= k:  # the prompt token first, with its own rank
                row[str(tok)] = {"logprob": lp_of(tok), "rank": tok + 1, "decoded_token": None}
            for j in range(k):
                row[str(j)] = {"logprob": lp_of(j), "rank": j + 1, "decoded_token": None}
            rows.append(row)
        choice["prompt_logprobs"] = rows
    return {"choices": [choice], "id": "cmpl-hostile", "object": "text_completion",
            "created": int(time.time()), "model": "hostile",
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": n_gen,
                      "total_tokens": len(prompt) + n_gen,
                      "prompt_tokens_details": {"cached_tokens": 0}}}


class Handler(http.server.BaseHTTPRequestHandler):
    mode = "ok"
    vocab = 256
    delay = 30.0
    log_path = None
    log_lock = threading.Lock()

    def log_message(self, *a):  # quiet
        pass

    def log_request_line(self, **kv):
        if not self.log_path:
            return
        kv.update(method=self.command, path=self.path, mode=self.mode)
        with self.log_lock, open(self.log_path, "a") as f:
            f.write(json.dumps(kv) + "\n")

    def send(self, status, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.log_request_line()
        if self.path == "/v1/models":
            self.send(200, json.dumps({"object": "list", "data": [
                {"id": "hostile", "object": "model", "created": 0, "owned_by": "vllm",
                 "root": "hostile", "parent": None, "max_model_len": 4096,
                 "permission": []}]}))
        elif self.path in ("/health", "/ping"):
            self.send(200, b"", "text/plain")
        else:
            self.send(404, json.dumps({"detail": "Not Found"}))

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0") or 0)
        raw = self.rfile.read(n) if n > 0 else b""
        try:
            req = json.loads(raw or b"{}")
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except ValueError:
            self.log_request_line(error="bad json")
            self.send(400, json.dumps({"error": {"message": "bad JSON", "type": "BadRequestError",
                                                 "param": None, "code": 400}}))
            return
        if self.path != "/v1/completions":
            self.log_request_line()
            self.send(404, json.dumps({"detail": "Not Found"}))
            return
        prompt = req.get("prompt", [0])
        if not isinstance(prompt, list) or not prompt:
            prompt = [0]
        k = int(req.get("logprobs", 5) or 5)
        n_gen = max(1, int(req.get("max_tokens", 16) or 16))
        self.log_request_line(prompt_len=len(prompt), max_tokens=n_gen)
        ans = good_answer(prompt, k, n_gen, req.get("prompt_logprobs") is not None)
        ch = ans["choices"][0]
        m = self.mode
        if m == "ok":
            self.send(200, json.dumps(ans))
        elif m == "malformed":
            self.send(200, json.dumps(ans)[:40])
        elif m == "nan500":
            self.send(500, "Internal Server Error", "text/plain; charset=utf-8")
        elif m == "nanjson":
            ch["logprobs"]["top_logprobs"][0]["token_id:0"] = float("nan")
            self.send(200, json.dumps(ans, allow_nan=True))  # writes the bare literal NaN
        elif m == "slow":
            end = time.monotonic() + self.delay
            while time.monotonic() < end:
                time.sleep(0.05)
            try:
                self.send(200, json.dumps(ans))
            except OSError:  # the client gave up long ago
                pass
        elif m == "huge":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.close_connection = True
            try:
                self.wfile.write(b'{"choices": [')
                chunk = b" " * 65536
                for _ in range(1 << 16):  # up to 4 GiB: the client must stop first
                    self.wfile.write(chunk)
            except OSError:
                pass
        elif m == "redirect":
            self.send_response(307)
            self.send_header("Location", "http://192.0.2.1/v1/completions")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif m == "badid":
            ch["logprobs"]["top_logprobs"][0] = {"token_id:%d" % (self.vocab + 7): -0.5}
            self.send(200, json.dumps(ans))
        elif m == "fewrows":
            if ch["prompt_logprobs"]:
                ch["prompt_logprobs"] = ch["prompt_logprobs"][:-1]
            else:
                ch["logprobs"]["top_logprobs"] = []
            self.send(200, json.dumps(ans))
        elif m == "missing":
            del ch["logprobs"]
            self.send(200, json.dumps(ans))
        elif m == "reset":
            self.close_connection = True
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            # close the descriptor itself now (rfile / wfile hold the socket object open, and
            # socketserver's shutdown_request would send a FIN first): an RST, no answer
            os.close(self.connection.detach())
        elif m == "ok-but-string-keys":
            ch["logprobs"]["top_logprobs"][0] = {"hello": -0.5, "world": -1.5}
            self.send(200, json.dumps(ans))

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except OSError:  # a client that went away (timeouts, size limits): not our problem
            self.close_connection = True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--mode", choices=MODES, required=True)
    ap.add_argument("--vocab", type=int, default=256,
                    help="the vocabulary size the client checks ids against (256)")
    ap.add_argument("--host", default="127.0.0.1", help="only 127.0.0.1 is accepted")
    ap.add_argument("--port", type=int, default=0, help="0: a free port (default)")
    ap.add_argument("--delay", type=float, default=30.0, help="slow: seconds before answering")
    ap.add_argument("--log", metavar="FILE", help="append one JSON line per request")
    a = ap.parse_args()
    if a.host != "127.0.0.1":
        ap.error("--host: only 127.0.0.1 is served")
    if a.vocab < 1:
        ap.error("--vocab must be >= 1")
    Handler.mode, Handler.vocab, Handler.delay, Handler.log_path = a.mode, a.vocab, a.delay, a.log
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True

    def stop(*_):
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("LISTENING http://127.0.0.1:%d" % srv.server_address[1], flush=True)
    srv.serve_forever(poll_interval=0.1)
    srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
