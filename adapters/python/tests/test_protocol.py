"""The child side of the protocol: framing, the conversation, isolation of stray output,
errors, shape validation and capability announcement. Runtimes here are numpy toys."""
import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from qca_testutil import ROOT, TOY_CONFIG
from qwen_conform_adapter import Runtime, Unsupported, serve
from qwen_conform_adapter import framing
from qwen_conform_adapter.client import AdapterError, Client
from qwen_conform_adapter.runtime import capabilities

V, H, L = 8, 4, 2


@pytest.fixture
def toy_model_dir(tmp_path):
    """A directory with only a flat config.json (V 8, H 4, L 2; C 6, K 4)."""
    (tmp_path / "config.json").write_text(json.dumps(TOY_CONFIG))
    return str(tmp_path)


class Toy(Runtime):
    """Logits = a function of (token, position); a position counter as its only state."""
    name = "toy 0.1"

    def reset(self):
        self.pos = 0

    def forward(self, tokens, start_pos):
        pos = start_pos + np.arange(len(tokens))
        self.pos = start_pos + len(tokens)
        return (tokens[:, None] * 10.0 + pos[:, None] + np.arange(V)[None] / 8.0)


class ToyFull(Toy):
    """Every optional method, correct shapes."""
    options_supported = ("threads",)

    def forward(self, tokens, start_pos):
        self.n = len(tokens)
        return super().forward(tokens, start_pos)

    def hidden(self):
        return np.ones((L + 1, self.n, H))

    def state(self, n_pos):
        if n_pos > 100:
            raise Unsupported("only 100 positions")
        return {"layer_00/conv_state": np.zeros((6, 4)),
                "layer_00/recurrent_state": np.zeros((1, 2, 2)),
                "layer_01/k_cache": np.full((1, n_pos, 2), 2.0),
                "layer_01/v_cache": np.full((1, n_pos, 2), 3.0)}

    def fill_state(self, value):
        self.filled = value

    def set_option(self, key, value):
        self.threads = int(value)


def converse(runtime, requests):
    """Run serve() over in-memory streams; returns (exit code, [(header, tensors)]) of every
    frame it wrote (the hello first)."""
    rd = io.BytesIO(b"".join(framing.encode_frame(r) for r in requests))
    wr = io.BytesIO()
    rc = serve(runtime, rd, wr)
    wr.seek(0)
    frames = []
    while True:
        f = framing.read_frame(wr)
        if f is None:
            return rc, frames
        frames.append((f[0], framing.decode_tensors(*f)))


def opened(model_dir, *requests):
    return [{"op": "open", "model_dir": model_dir, "options": ""}, {"op": "reset"}] + list(requests)


# ---- framing ------------------------------------------------------------------------------------

def test_frame_round_trip():
    a = np.arange(6, dtype=np.float64).reshape(2, 3) / 3
    b = np.array([[np.nan, np.inf, -0.0]])
    raw = framing.encode_frame({"type": "ok", "x": [1, 2]}, [("a", a), ("b", b)])
    assert raw[:4] == b"QCAP"
    hlen = int.from_bytes(raw[4:8], "little")
    plen = int.from_bytes(raw[8:16], "little")
    assert plen == 4 * (6 + 3) and len(raw) == 16 + hlen + plen
    h, payload = framing.read_frame(io.BytesIO(raw))
    assert h["x"] == [1, 2] and h["tensors"] == [{"name": "a", "shape": [2, 3]},
                                                 {"name": "b", "shape": [1, 3]}]
    t = framing.decode_tensors(h, payload)
    assert t["a"].dtype == np.dtype("<f4") and np.array_equal(t["a"], a.astype(np.float32))
    assert np.isnan(t["b"][0, 0]) and t["b"][0, 1] == np.inf and np.signbit(t["b"][0, 2])
    # little-endian float32 on the wire, whatever the machine
    assert payload[:8] == np.array([0, 1 / 3], dtype="<f4").tobytes()


def test_frame_errors():
    good = framing.encode_frame({"op": "reset"})
    assert framing.read_frame(io.BytesIO(b"")) is None                       # clean EOF
    for bad, what in ((b"XCAP" + good[4:], "bad magic"), (good[:10], "truncated"),
                      (good[:-1], "truncated"),
                      (framing.PREFIX.pack(b"QCAP", 2, 0) + b"[]", "not a JSON object"),
                      (framing.PREFIX.pack(b"QCAP", 0, 0), "header_len")):
        with pytest.raises(framing.ProtocolError, match=what):
            framing.read_frame(io.BytesIO(bad))
    h = {"tensors": [{"name": "x", "shape": [2]}]}
    with pytest.raises(framing.ProtocolError, match="shorter"):
        framing.decode_tensors(h, b"\0" * 4)
    with pytest.raises(framing.ProtocolError, match="payload_len"):
        framing.decode_tensors(h, b"\0" * 12)


# ---- the conversation ---------------------------------------------------------------------------

def test_hello_open_forward_close(toy_model_dir):
    rc, frames = converse(Toy(), opened(toy_model_dir,
                                        {"op": "forward", "tokens": [3, 1, 4], "start_pos": 0,
                                         "all_logits": True, "hidden": False},
                                        {"op": "forward", "tokens": [5], "start_pos": 3,
                                         "all_logits": False},
                                        {"op": "close"}))
    assert rc == 0
    (hello, _), (op, _), (rs, _), (f1, t1), (f2, t2), (cl, _) = frames
    assert hello == {"type": "hello", "protocol": "qwen-conform-adapter", "version": 1,
                     "name": "toy 0.1"}
    assert op["type"] == "ok" and op["info"] == {
        "vocab_size": V, "hidden_size": H, "n_layers": L, "max_tokens_per_call": 0,
        "max_context_len": 0, "capabilities": [], "name": "toy 0.1"}
    assert rs == {"type": "ok"} and cl == {"type": "ok"}
    assert t1["logits"].shape == (3, V) and t1["logits"][2, 0] == 42.0
    assert t2["logits"].shape == (1, V) and t2["logits"][0, 1] == 53.125   # last row only


def test_eof_without_close_and_bad_host_frame(toy_model_dir):
    assert converse(Toy(), opened(toy_model_dir))[0] == 0
    rc = serve(Toy(), io.BytesIO(b"garbage that is not a frame"), io.BytesIO())
    assert rc == 1


def test_open_reads_nested_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"text_config": TOY_CONFIG,
                                                      "architectures": ["X"]}))
    _, frames = converse(Toy(), opened(str(tmp_path)))
    assert frames[1][0]["info"]["vocab_size"] == V and frames[1][0]["info"]["n_layers"] == L


def test_open_dims_from_runtime_without_config(tmp_path):
    class Dims(Toy):
        def open(self, model_dir, options):
            self.options = options
            return {"vocab_size": V, "hidden_size": H, "n_layers": L}
    rt = Dims()
    _, frames = converse(rt, [{"op": "open", "model_dir": str(tmp_path), "options": "a=1,b=x=y"}])
    assert frames[1][0]["info"]["hidden_size"] == H
    assert rt.options == {"a": "1", "b": "x=y"}


def test_requests_before_open_and_unknown_ops(toy_model_dir):
    _, frames = converse(Toy(), [{"op": "reset"}, {"op": "frobnicate"}, {"nothing": 1}])
    assert [f[0]["type"] for f in frames[1:]] == ["error"] * 3
    assert "before open" in frames[1][0]["message"]


# ---- isolation ----------------------------------------------------------------------------------

class Chatty(Toy):
    def reset(self):
        print("hello from reset")        # would corrupt a naive adapter's stdout
        super().reset()


def test_stray_print_goes_to_stderr(toy_model_dir, capsys):
    before = sys.stdout
    rc, frames = converse(Chatty(), opened(toy_model_dir, {"op": "close"}))
    assert rc == 0 and [f[0]["type"] for f in frames] == ["hello", "ok", "ok", "ok"]
    assert "hello from reset" in capsys.readouterr().err
    assert sys.stdout is before                                   # restored


def test_stray_output_in_a_real_process(toy_model_dir):
    """print() and a native write to fd 1 both land on stderr; the frames stay clean."""
    script = textwrap.dedent("""
        import os, sys
        sys.path.insert(0, %r)
        from qwen_conform_adapter import Runtime, serve
        class R(Runtime):
            def reset(self):
                print("python print")
                os.write(1, b"native write\\n")
            def forward(self, tokens, start_pos):
                return [[0.0] * 8] * len(tokens)
        print("before serve")            # before serve(): goes to the real stdout
        raise SystemExit(serve(R()))
    """) % os.path.join(ROOT, "adapters", "python")
    p = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline() == b"before serve\n"
    c = Client(p.stdout, p.stdin, p)
    c.open(toy_model_dir)
    c.reset()
    assert c.forward([1, 2], 0)["logits"].shape == (2, V)
    assert c.close() == 0
    err = p.stderr.read().decode()
    assert "python print" in err and "native write" in err


# ---- errors -------------------------------------------------------------------------------------

class Broken(Toy):
    def forward(self, tokens, start_pos):
        raise ValueError("the kernel exploded at position %d" % start_pos)


def test_exception_becomes_error_frame(toy_model_dir, capsys):
    rc, frames = converse(Broken(), opened(toy_model_dir,
                                           {"op": "forward", "tokens": [1], "start_pos": 7},
                                           {"op": "reset"}))
    assert rc == 0
    err = frames[3][0]
    assert err == {"type": "error", "message": "ValueError: the kernel exploded at position 7"}
    assert frames[4][0] == {"type": "ok"}              # the session goes on
    stderr = capsys.readouterr().err
    assert "Traceback (most recent call last)" in stderr and "in forward" in stderr


def test_bad_arguments_are_refused(toy_model_dir):
    bad = [{"op": "forward", "tokens": [], "start_pos": 0},
           {"op": "forward", "tokens": [8], "start_pos": 0},
           {"op": "forward", "tokens": [1.5], "start_pos": 0},
           {"op": "forward", "tokens": [1], "start_pos": -1},
           {"op": "forward", "tokens": [1], "start_pos": 0, "hidden": True}]
    _, frames = converse(Toy(), opened(toy_model_dir, *bad))
    assert all(f[0]["type"] == "error" for f in frames[3:]) and len(frames) == 3 + len(bad)


def test_static_runtime_limits(toy_model_dir):
    class Static(Toy):
        max_tokens_per_call = 1
        max_context_len = 4
    _, frames = converse(Static(), opened(toy_model_dir,
                                          {"op": "forward", "tokens": [1, 2], "start_pos": 0},
                                          {"op": "forward", "tokens": [1], "start_pos": 4}))
    info = frames[1][0]["info"]
    assert info["max_tokens_per_call"] == 1 and info["max_context_len"] == 4
    assert "at most 1" in frames[3][0]["message"] and "holds 4" in frames[4][0]["message"]


# ---- shape validation ---------------------------------------------------------------------------

@pytest.mark.parametrize("bad, what", [
    (lambda n: np.zeros((n - 1, V)), "logits of shape"),
    (lambda n: np.zeros((n, V + 1)), "logits of shape"),
    (lambda n: np.zeros((1, V)), "logits of shape"),
    (lambda n: np.zeros(n * V), "logits of shape"),
    (lambda n: "nope", "not a float array")])
def test_logits_shape_validated(toy_model_dir, bad, what):
    class Wrong(Toy):
        def forward(self, tokens, start_pos):
            return bad(len(tokens))
    _, frames = converse(Wrong(), opened(toy_model_dir,
                                         {"op": "forward", "tokens": [1, 2, 3], "start_pos": 0}))
    assert frames[3][0]["type"] == "error" and what in frames[3][0]["message"]


def test_hidden_and_state_validated(toy_model_dir):
    class WrongHidden(ToyFull):
        def hidden(self):
            return np.zeros((L, self.n, H))          # forgot the final-norm entry

    class WrongState(ToyFull):
        def state(self, n_pos):
            s = super().state(n_pos)
            s["layer_01/k_cache"] = s["layer_01/k_cache"][:, :, :-1]   # head_dim 1, not 2
            return s

    class MissingState(ToyFull):
        def state(self, n_pos):
            s = super().state(n_pos)
            del s["layer_00/conv_state"]
            return s

    fwd = {"op": "forward", "tokens": [1, 2], "start_pos": 0, "hidden": True}
    _, f = converse(WrongHidden(), opened(toy_model_dir, fwd))
    assert "hidden() returned shape (2, 2, 4), expected (3, 2, 4)" in f[3][0]["message"]
    _, f = converse(WrongState(), opened(toy_model_dir, {"op": "get_state", "n_pos": 5}))
    assert ("layer_01/k_cache has shape [1, 5, 1], fits no layout: expected [1, N, 2] "
            "(canonical) or [1, 1, N, 2] (HF, batch 1)") in f[3][0]["message"]
    _, f = converse(MissingState(), opened(toy_model_dir, {"op": "get_state", "n_pos": 5}))
    assert "lacks layer_00/conv_state" in f[3][0]["message"]


def test_full_runtime_every_op(toy_model_dir):
    rt = ToyFull()
    _, f = converse(rt, opened(toy_model_dir,
                               {"op": "forward", "tokens": [1, 2], "start_pos": 0, "hidden": True,
                                "all_logits": False},
                               {"op": "get_state", "n_pos": 3},
                               {"op": "get_state", "n_pos": 101},
                               {"op": "fill_state", "value": "nan"},
                               {"op": "set_option", "key": "threads", "value": "2"},
                               {"op": "set_option", "key": "dn_kernel", "value": "chunked"}))
    assert f[1][0]["info"]["capabilities"] == ["hidden", "state_read", "state_fill", "threads"]
    fwd = f[3]
    assert [t["name"] for t in fwd[0]["tensors"]] == ["logits", "hidden"]
    assert fwd[1]["logits"].shape == (1, V) and fwd[1]["hidden"].shape == (L + 1, 2, H)
    st = f[4]
    assert [t["name"] for t in st[0]["tensors"]] == [          # protocol (layer) order
        "layer_00/conv_state", "layer_00/recurrent_state", "layer_01/k_cache", "layer_01/v_cache"]
    assert st[1]["layer_01/v_cache"].shape == (1, 3, 2) and st[1]["layer_01/v_cache"][0, 2, 1] == 3
    assert f[5][0] == {"type": "error", "unsupported": True, "message": "only 100 positions"}
    assert f[6][0] == {"type": "ok"} and np.isnan(rt.filled)
    assert f[7][0] == {"type": "ok"} and rt.threads == 2
    assert f[8][0]["type"] == "error" and f[8][0]["unsupported"] is True


# ---- capabilities -------------------------------------------------------------------------------

def test_capabilities_only_for_overridden_methods():
    assert capabilities(Toy()) == []
    assert capabilities(ToyFull()) == ["hidden", "state_read", "state_fill", "threads"]

    class OnlyState(Toy):
        def state(self, n_pos):
            return {}

    class Inherits(OnlyState):
        pass
    assert capabilities(OnlyState()) == ["state_read"] == capabilities(Inherits())

    class OptsWithoutSetter(Toy):
        options_supported = ("dn_kernel",)
    with pytest.raises(ValueError, match="set_option"):
        capabilities(OptsWithoutSetter())

    class UnknownOpt(ToyFull):
        options_supported = ("turbo",)
    with pytest.raises(ValueError, match="turbo"):
        capabilities(UnknownOpt())


def test_unannounced_requests_are_unsupported(toy_model_dir):
    _, f = converse(Toy(), opened(toy_model_dir, {"op": "get_state", "n_pos": 1},
                                  {"op": "fill_state", "value": 0},
                                  {"op": "set_option", "key": "threads", "value": "1"}))
    assert all(x[0]["type"] == "error" and x[0].get("unsupported") for x in f[3:])


def test_serve_needs_a_runtime():
    with pytest.raises(TypeError):
        serve(object(), io.BytesIO(), io.BytesIO())


def test_client_against_a_spawned_child(toy_model_dir):
    script = ("import sys; sys.path.insert(0, %r)\n"
              "from test_protocol import ToyFull; from qwen_conform_adapter import serve\n"
              "raise SystemExit(serve(ToyFull()))\n"
              % os.path.join(ROOT, "adapters", "python"))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))
    c = Client.spawn([sys.executable, "-c", script], env=env)
    c.open(toy_model_dir)
    c.reset()
    c.fill_state(float("nan"))
    with pytest.raises(AdapterError) as e:
        c.get_state(500)
    assert e.value.unsupported
    assert c.close() == 0


def test_host_gone_mid_answer(toy_model_dir):
    class Gone(io.BytesIO):
        def write(self, b):
            raise BrokenPipeError(32, "Broken pipe")
    rd = io.BytesIO(b"".join(framing.encode_frame(r) for r in opened(toy_model_dir)))
    assert serve(Toy(), rd, Gone()) == 1


class ToyTopk(Runtime):
    """Top-k only: forward_topk, no forward; mode 'bad' answers an id out of range."""
    def __init__(self, mode=None):
        self.mode = mode

    def reset(self):
        pass

    def forward_topk(self, tokens, start_pos, k):
        z = Toy().forward(tokens, start_pos)
        lp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        ids = np.argsort(-lp, axis=1)[:, :k]
        lps = np.take_along_axis(lp, ids, axis=1)
        if self.mode == "bad":
            ids[0, 0] = V
        return ids, lps


def test_topk_only(toy_model_dir):
    assert capabilities(ToyTopk()) == ["topk_only"]
    fwd = {"op": "forward", "tokens": [1, 2], "start_pos": 0, "all_logits": True,
           "hidden": False, "topk": 3}
    rc, fr = converse(ToyTopk(), [{"op": "open", "model_dir": toy_model_dir}, fwd,
                                  dict(fwd, topk=V + 1), {"op": "close"}])
    assert rc == 0 and fr[1][0]["info"]["capabilities"] == ["topk_only"]
    h, t = fr[2]
    assert h["type"] == "ok" and [e["name"] for e in h["tensors"]] == ["topk_ids", "topk_logprobs"]
    assert t["topk_ids"].dtype == np.int32 and t["topk_ids"].shape == (2, 3)
    assert t["topk_ids"][0].tolist() == [7, 6, 5] and np.all(np.diff(t["topk_logprobs"]) <= 0)
    assert fr[3][0]["type"] == "error" and "topk 9 outside" in fr[3][0]["message"]
    rc, fr = converse(ToyTopk("bad"), [{"op": "open", "model_dir": toy_model_dir}, fwd])
    assert fr[2][0]["type"] == "error" and "token id out of range at position 0" in fr[2][0]["message"]
    # topk to a runtime that did not announce it: refused
    rc, fr = converse(Toy(), [{"op": "open", "model_dir": toy_model_dir}, fwd])
    assert fr[2][0]["type"] == "error" and "topk_only not announced" in fr[2][0]["message"]


def test_client_topk_against_a_spawned_child(toy_model_dir):
    script = ("import sys; sys.path.insert(0, %r)\n"
              "from test_protocol import ToyTopk; from qwen_conform_adapter import serve\n"
              "raise SystemExit(serve(ToyTopk()))\n"
              % os.path.join(ROOT, "adapters", "python"))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))
    c = Client.spawn([sys.executable, "-c", script], env=env)
    c.open(toy_model_dir)
    c.reset()
    t = c.forward_topk([3, 1, 4], 0, 4)
    assert t["topk_ids"].dtype == np.int32 and t["topk_ids"].shape == (3, 4)
    assert t["topk_logprobs"].shape == (3, 4) and np.all(t["topk_logprobs"] <= 0)
    assert c.close() == 0
