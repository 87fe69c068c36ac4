"""The host side of the protocol, minimal: for tests and for poking at an adapter by hand
(`Client.spawn(["python3", "mine.py"])`). qwen-conform itself is the real host.
"""
import subprocess

from . import framing
from .server import PROTOCOL, VERSION


class AdapterError(Exception):
    """An error response; .unsupported tells an Unsupported refusal from a failure."""

    def __init__(self, message, unsupported=False):
        Exception.__init__(self, message)
        self.unsupported = unsupported


class Client:
    """Requests over a pair of binary streams; reads the child's hello first."""

    def __init__(self, reader, writer, proc=None):
        self.rd, self.wr, self.proc = reader, writer, proc
        self.hello = self._read()[0]
        if self.hello.get("protocol") != PROTOCOL or self.hello.get("version") != VERSION:
            raise framing.ProtocolError("not a v%d adapter: %r" % (VERSION, self.hello))

    @classmethod
    def spawn(cls, argv, **popen_kw):
        """Start argv as a child speaking the protocol on its stdin/stdout."""
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, **popen_kw)
        return cls(p.stdout, p.stdin, p)

    def _read(self):
        frame = framing.read_frame(self.rd)
        if frame is None:
            raise framing.ProtocolError("the adapter closed its stdout")
        header, payload = frame
        return header, framing.decode_tensors(header, payload)

    def request(self, header):
        """(ok header, {name: float32 array}); AdapterError on an error response."""
        framing.write_frame(self.wr, header)
        h, tensors = self._read()
        if h.get("type") == "error":
            raise AdapterError(h.get("message", ""), bool(h.get("unsupported")))
        if h.get("type") != "ok":
            raise framing.ProtocolError("unexpected response %r" % (h,))
        return h, tensors

    # ---- conveniences ------------------------------------------------------------------------
    def open(self, model_dir, options=""):
        return self.request({"op": "open", "model_dir": model_dir, "options": options})[0]["info"]

    def reset(self):
        self.request({"op": "reset"})

    def forward(self, tokens, start_pos, all_logits=True, hidden=False, router=False):
        """{"logits", ["hidden", ["mlp_in"]], ["router_ids" (int32), "router_weights"]}."""
        req = {"op": "forward", "tokens": [int(t) for t in tokens], "start_pos": int(start_pos),
               "all_logits": all_logits, "hidden": hidden}
        if router:
            req["router"] = True
        return self.request(req)[1]

    def forward_topk(self, tokens, start_pos, k):
        """A topk_only child's forward: {"topk_ids": int32 [n, k], "topk_logprobs": [n, k]}."""
        return self.request({"op": "forward", "tokens": [int(t) for t in tokens],
                             "start_pos": int(start_pos), "all_logits": True, "hidden": False,
                             "topk": int(k)})[1]

    def get_state(self, n_pos):
        return self.request({"op": "get_state", "n_pos": int(n_pos)})[1]

    def fill_state(self, value):
        v = value if isinstance(value, str) else float(value)
        if isinstance(v, float) and v != v:
            v = "nan"
        elif isinstance(v, float) and v in (float("inf"), float("-inf")):
            v = "inf" if v > 0 else "-inf"
        self.request({"op": "fill_state", "value": v})

    def set_option(self, key, value):
        self.request({"op": "set_option", "key": key, "value": str(value)})

    def close(self, timeout=5):
        """Send close; returns the child's exit code when spawned (None otherwise)."""
        self.request({"op": "close"})
        if self.proc is None:
            return None
        self.proc.stdin.close()
        return self.proc.wait(timeout)
