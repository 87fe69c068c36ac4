#!/usr/bin/python3
"""exec_child.py -- a scriptable child of the qwen-conform adapter protocol (docs/adapter-protocol.md),
used by tests/test_exec.c. stdlib + numpy only; run with /usr/bin/python3.

    exec_child.py BEHAVIOUR [--at N] [--once FILE] [--log FILE] [--caps a,b,c]

It implements a deterministic fake model whose every float is a hash of its coordinates, so the
test recomputes every tensor bit for bit (tests/test_exec.c: fake_bits() is the same function):
    F(tag, a, b, c, d) = float32 with bits from mix32(tag, a, b, c, d)  (never NaN / Inf / subnormal)
    logits[i][v]            = F(1, token_i, pos_i, v, 0)
    hidden[l][i][h]         = F(2, token_i, pos_i, l, h)         l = 0..L
    k_cache[l][g][p][d]     = F(3, l * 100 + g, p, d, token_p)   written when position p is consumed
    v_cache[l][g][p][d]     = F(4, l * 100 + g, p, d, token_p)
    conv_state[l][c][k]     = F(5, l * 100 + c, k, pos, tsum)    pos = positions consumed,
    recurrent[l][h][i][j]   = F(6, l * 100 + h, i * 100 + j, pos, tsum)   tsum = sum of their tokens
Dims: V 24, H 8, L 4 (linear, linear, linear, full), n_kv 2, head_dim 4, conv_dim 10, conv_kernel 4,
n_v 2, d_k 3, d_v 2; max_context_len 64 (get_state with n_pos > 64 answers "unsupported").

BEHAVIOUR (misbehaves on the --at'th forward, 1-based, default 1; with --once FILE only when FILE
does not exist yet, creating it, so a restarted child behaves):
    good              the fake model, correctly
    crash-in-forward  os.kill(self, SIGSEGV)          hang-in-forward  sleeps forever
    stray-print       text on stdout, then the frame  bad-shape        logits [n, V+1]
    bad-payload-size  payload 4 bytes short           error-response   {"type": "error", ...}
    exit-mid-case     exit status 3                   NaN-logits       logits[0][5] and [n-1][0] NaN
    bad-json          a header that is not JSON       bad-state        a wrong state tensor name
    chatty-stderr     256 KiB of stderr per forward (more than a pipe holds)
    close-stdin       closes stdin after open and sleeps (the host's next write gets EPIPE;
                      run it as `exec python3 ...`, else /bin/sh keeps the pipe open)
    no-read           stops reading stdin after open (a large request fills the pipe)
    double-answer     answers the first reset twice (output nobody asked for)
    hang-in-close     answers close but never exits
  startup behaviours (no forward needed):
    no-hello          never sends hello               wrong-version    hello with version 2
    exit-before-hello writes to stderr, exits 5       open-error       open answered with an error
    bad-hello         hello that is not a JSON object bad-info         open info without vocab_size
--log FILE appends one line per request ("hello", "open OPTS", "reset", "forward N P",
"get_state N", "fill_state X", "set_option K V", "close"), and at start "pid PID" and
"extra-fds LIST" (the fds >= 3 it inherited, "none" when the host closed them all).
--caps: the capability strings announced in open (default: all six), passed verbatim.
"""
import json
import os
import resource
import signal
import struct
import sys
import time

import numpy as np

V, H, L = 24, 8, 4
KINDS = [0, 0, 0, 1]  # 1 = full attention
NKV, HD = 2, 4
CONV_DIM, CONV_K = 10, 4
NV, DK, DV = 2, 3, 2
MAX_CTX = 64
M32 = np.uint64(0xFFFFFFFF)
ALL_CAPS = "hidden,state_read,state_fill,threads,dn_kernel,chunk_size"


def mix32(tag, a, b, c, d):
    """The hash of tests/test_exec.c fake_bits(), vectorised over numpy uint64 arrays."""
    args = [np.asarray(t, dtype=np.int64).astype(np.uint64) & M32 for t in (tag, a, b, c, d)]
    k = [0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1]
    x = np.zeros(np.broadcast(*args).shape, dtype=np.uint64)
    for t, kk in zip(args, k):
        x = (x + ((t * np.uint64(kk)) & M32)) & M32
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x2C1B3C6D)) & M32
    x ^= x >> np.uint64(12)
    x = (x * np.uint64(0x297A2D39)) & M32
    x ^= x >> np.uint64(15)
    return x


def fake(tag, a, b, c, d):
    x = mix32(tag, a, b, c, d)
    expo = np.uint64(120) + ((x >> np.uint64(23)) & np.uint64(15))
    bits = (x & np.uint64(0x807FFFFF)) | (expo << np.uint64(23))
    return bits.astype(np.uint32).view(np.float32)


def log(msg):
    sys.stderr.write("exec_child: %s\n" % msg)
    sys.stderr.flush()


class Child:
    def __init__(self, argv):
        self.behaviour = argv[1] if len(argv) > 1 else "good"
        self.at, self.once, self.logf, self.caps = 1, None, None, ALL_CAPS
        i = 2
        while i < len(argv):
            if argv[i] == "--at":
                self.at = int(argv[i + 1])
            elif argv[i] == "--once":
                self.once = argv[i + 1]
            elif argv[i] == "--log":
                self.logf = argv[i + 1]
            elif argv[i] == "--caps":
                self.caps = argv[i + 1]
            else:
                raise SystemExit("exec_child: unknown argument " + argv[i])
            i += 2
        self.inp = sys.stdin.buffer
        self.out = sys.stdout.buffer
        self.n_forward = 0
        self.options = {}
        self.reset()

    # ---- bookkeeping ----
    def note(self, line):
        if self.logf:
            with open(self.logf, "a") as f:
                f.write(line + "\n")

    def misbehave(self, name):
        if self.behaviour != name:
            return False
        if self.n_forward != self.at:
            return False
        if self.once:
            if os.path.exists(self.once):
                return False
            open(self.once, "w").close()
        return True

    def reset(self):
        self.pos = 0
        self.toks = np.zeros(MAX_CTX, dtype=np.int64)
        self.k = {l: np.zeros((NKV, MAX_CTX, HD), np.float32) for l in range(L) if KINDS[l]}
        self.v = {l: np.zeros((NKV, MAX_CTX, HD), np.float32) for l in range(L) if KINDS[l]}
        self.conv = {l: np.zeros((CONV_DIM, CONV_K), np.float32) for l in range(L) if not KINDS[l]}
        self.rec = {l: np.zeros((NV, DK, DV), np.float32) for l in range(L) if not KINDS[l]}

    # ---- framing ----
    def read_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.inp.read(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def recv(self):
        pre = self.read_exact(16)
        if pre is None:
            return None
        if pre[:4] != b"QCAP":
            raise SystemExit("exec_child: bad magic from host: %r" % pre[:4])
        hlen, plen = struct.unpack("<IQ", pre[4:])
        hdr = json.loads(self.read_exact(hlen).decode("utf-8"))
        if plen:
            self.read_exact(plen)
        return hdr

    def send(self, hdr, tensors=(), raw_header=None, payload_delta=0):
        names = []
        payload = b""
        for name, arr in tensors:
            arr = np.ascontiguousarray(arr, dtype="<f4")
            names.append({"name": name, "shape": list(arr.shape)})
            payload += arr.tobytes()
        if names:
            hdr = dict(hdr, tensors=names)
        h = raw_header if raw_header is not None else json.dumps(hdr).encode("utf-8")
        if payload_delta < 0:
            payload = payload[:payload_delta]
        self.out.write(b"QCAP" + struct.pack("<IQ", len(h), len(payload)) + h + payload)
        self.out.flush()

    def ok(self, **kw):
        self.send(dict(type="ok", **kw))

    # ---- requests ----
    def forward(self, req):
        self.n_forward += 1
        toks = np.asarray(req["tokens"], dtype=np.int64)
        p0, n = int(req["start_pos"]), len(toks)
        self.note("forward %d %d" % (n, p0))
        if self.misbehave("crash-in-forward"):
            log("about to crash in forward")
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.misbehave("hang-in-forward"):
            log("hanging in forward")
            time.sleep(3600)
        if self.misbehave("exit-mid-case"):
            log("exiting with status 3 mid-case")
            sys.stdout.flush()
            os._exit(3)
        if self.misbehave("error-response"):
            self.send({"type": "error", "message": "fake runtime refuses forward %d" % self.n_forward})
            return
        if self.misbehave("bad-json"):
            self.send({}, raw_header=b"{\"type\": \"ok\", \"tensors\": [")
            return
        if self.misbehave("chatty-stderr"):
            line = "exec_child: chatter " + "x" * 100 + "\n"
            for _ in range(256 * 1024 // len(line) + 1):
                sys.stderr.write(line)
            sys.stderr.flush()
        if p0 < 0 or p0 + n > MAX_CTX or (p0 != self.pos and p0 != 0):
            self.send({"type": "error", "message": "bad start_pos %d (pos %d)" % (p0, self.pos)})
            return
        pos = np.arange(p0, p0 + n)
        self.toks[p0:p0 + n] = toks
        for l in self.k:
            for g in range(NKV):
                self.k[l][g, p0:p0 + n, :] = fake(3, l * 100 + g, pos[:, None], np.arange(HD)[None, :], toks[:, None])
                self.v[l][g, p0:p0 + n, :] = fake(4, l * 100 + g, pos[:, None], np.arange(HD)[None, :], toks[:, None])
        self.pos = p0 + n
        tsum = int(self.toks[:self.pos].sum())
        for l in self.conv:
            self.conv[l][:] = fake(5, l * 100 + np.arange(CONV_DIM)[:, None], np.arange(CONV_K)[None, :], self.pos, tsum)
            hh = np.arange(NV)[:, None, None]
            ij = np.arange(DK)[None, :, None] * 100 + np.arange(DV)[None, None, :]
            self.rec[l][:] = fake(6, l * 100 + hh, ij, self.pos, tsum)
        logits = fake(1, toks[:, None], pos[:, None], np.arange(V)[None, :], 0)
        if not req["all_logits"]:
            logits = logits[-1:]
        if self.misbehave("NaN-logits"):
            logits = logits.copy()
            logits[0, 5] = np.nan
            logits[-1, 0] = np.nan
        if self.misbehave("bad-shape"):
            logits = np.zeros((logits.shape[0], V + 1), np.float32)
        if self.misbehave("stray-print"):
            self.out.write(b"hello from a stray print\n")
            self.out.flush()
        tensors = [("logits", logits)]
        if req.get("hidden"):
            lidx = np.arange(L + 1)[:, None, None]
            tensors.append(("hidden", fake(2, toks[None, :, None], pos[None, :, None], lidx,
                                           np.arange(H)[None, None, :])))
        self.send({"type": "ok"}, tensors,
                  payload_delta=-4 if self.misbehave("bad-payload-size") else 0)

    def get_state(self, req):
        n = int(req["n_pos"])
        self.note("get_state %d" % n)
        if n > MAX_CTX:
            self.send({"type": "error", "unsupported": True,
                       "message": "n_pos %d > max_context_len %d" % (n, MAX_CTX)})
            return
        tensors = []
        for l in range(L):
            if KINDS[l]:
                tensors.append(("layer_%02d/k_cache" % l, self.k[l][:, :n, :]))
                tensors.append(("layer_%02d/v_cache" % l, self.v[l][:, :n, :]))
            else:
                tensors.append(("layer_%02d/conv_state" % l, self.conv[l]))
                tensors.append(("layer_%02d/recurrent_state" % l, self.rec[l]))
        if self.behaviour == "bad-state":
            tensors[1] = ("layer_00/k_cache", tensors[1][1])
        self.send({"type": "ok"}, tensors)

    def fill_state(self, req):
        x = req["value"]
        self.note("fill_state %s" % x)
        val = float(x) if not isinstance(x, str) else {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}[x]
        for d in (self.k, self.v, self.conv, self.rec):
            for a in d.values():
                a[...] = val
        self.ok()

    def set_option(self, req):
        k, v = req["key"], req["value"]
        self.note("set_option %s %s" % (k, v))
        if k == "dn_kernel" and v not in ("chunked", "recurrent"):
            self.send({"type": "error", "message": "dn_kernel must be chunked or recurrent, not %r" % v})
            return
        if k in ("threads", "chunk_size") and not (v.isdigit() and int(v) > 0):
            self.send({"type": "error", "message": "%s must be a positive integer" % k})
            return
        self.options[k] = v
        self.ok()

    def run(self):
        extra = []
        for fd in range(3, 1024):  # before the log is opened: what the host let through
            try:
                os.fstat(fd)
                extra.append(str(fd))
            except OSError:
                pass
        self.note("pid %d" % os.getpid())
        self.note("extra-fds %s" % (",".join(extra) or "none"))
        log("starting, behaviour %s" % self.behaviour)
        b = self.behaviour
        if b == "no-hello":
            log("not sending hello")
            time.sleep(3600)
        if b == "exit-before-hello":
            log("cannot load the runtime library: libfake.so: no such file")
            sys.exit(5)
        if b == "bad-hello":
            self.send({}, raw_header=b"[1, 2, 3]")
        else:
            self.send({"type": "hello", "protocol": "qwen-conform-adapter",
                       "version": 2 if b == "wrong-version" else 1, "name": "exec_child " + b})
        self.note("hello")
        while True:
            req = self.recv()
            if req is None:
                log("EOF on stdin, exiting")
                return 0
            op = req.get("op")
            if op == "open":
                self.note("open %s" % req.get("options", ""))
                if b == "open-error":
                    log("open failed")
                    self.send({"type": "error", "message": "cannot open %s: no weights" % req["model_dir"]})
                    continue
                info = {"vocab_size": V, "hidden_size": H, "n_layers": L, "max_tokens_per_call": 0,
                        "max_context_len": MAX_CTX,
                        "capabilities": [c for c in self.caps.split(",") if c],
                        "name": "fake-runtime (%s)" % b}
                if b == "bad-info":
                    del info["vocab_size"]
                self.ok(info=info)
                if b == "close-stdin":
                    os.close(0)
                    log("closed stdin")
                    time.sleep(3600)
                if b == "no-read":
                    log("not reading stdin any more")
                    time.sleep(3600)
            elif op == "reset":
                self.note("reset")
                self.reset()
                if b == "double-answer" and not getattr(self, "doubled", False):
                    self.doubled = True  # both frames in one write: the second is there at once
                    h = json.dumps({"type": "ok"}).encode("utf-8")
                    frame = b"QCAP" + struct.pack("<IQ", len(h), 0) + h
                    self.out.write(frame + frame)
                    self.out.flush()
                else:
                    self.ok()
            elif op == "forward":
                self.forward(req)
            elif op == "get_state":
                self.get_state(req)
            elif op == "fill_state":
                self.fill_state(req)
            elif op == "set_option":
                self.set_option(req)
            elif op == "close":
                self.note("close")
                self.ok()
                if b == "hang-in-close":
                    log("ignoring close")
                    time.sleep(3600)
                return 0
            else:
                self.send({"type": "error", "message": "unknown op %r" % op})


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the crash test must not write a core
    sys.exit(Child(sys.argv).run())
