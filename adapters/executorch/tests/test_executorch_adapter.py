"""qc_executorch_adapter against a stand-in executorch.runtime (tests/fake_executorch): how it
drives the program (calls, shapes, input_pos), the profile it reads, the logits it returns
(against a direct computation of the stand-in's tiny model), reset, errors, and the protocol
end to end through the helper's serve(). Real ExecuTorch is not involved anywhere here."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTER_DIR = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(ADAPTER_DIR))
FAKE = os.path.join(HERE, "fake_executorch")
ADAPTER = os.path.join(ADAPTER_DIR, "qc_executorch_adapter.py")
for p in (FAKE, ADAPTER_DIR):
    if p not in sys.path:
        sys.path.insert(0, p)

import qc_executorch_adapter as qea  # noqa: E402
from executorch import runtime as fake_rt  # noqa: E402  (the stand-in)

assert os.path.dirname(os.path.dirname(fake_rt.__file__)) == FAKE, "not the stand-in"

V = 11
META = {"get_max_seq_len": 8, "get_max_context_len": 24, "use_kv_cache": True,
        "enable_dynamic_shape": False, "get_vocab_size": V}
BASE = {"vocab": V, "dim": 6, "max_context": 32, "seed": 3, "kv": True, "dynamic": False,
        "max_seq_len": 8, "input_pos": "scalar", "logits": "3d"}
SEQ = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9]


def spec_of(meta=None, drop=(), **kw):
    s = dict(BASE, **kw)
    m = dict(META, **(meta or {}))
    for k in drop:
        m.pop(k, None)
    s["meta"] = m
    return s


def reference(spec, seq):
    """The stand-in's tiny model computed directly: every position of seq from a zero state."""
    w = fake_rt.make_weights(spec)
    cache = np.zeros((spec["max_context"], spec["dim"]))
    r = np.zeros(spec["dim"])
    out = []
    for p, t in enumerate(seq):
        h = w["E"][t] + w["P"][p]
        cache[p] = h
        r = 0.5 * r + h
        out.append(w["W"] @ np.tanh(h + cache[:p + 1].mean(axis=0) + r))
    return np.asarray(out)


def close(a, b):
    return np.allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"vocab_size": V, "hidden_size": 6,
                                               "num_hidden_layers": 2}))
    return str(d)


@pytest.fixture
def make(tmp_path, model_dir):
    """make(spec, **options) -> an opened ExecuTorchRuntime on that stand-in program."""
    count = [0]

    def _make(spec, **options):
        count[0] += 1
        pte = tmp_path / ("p%d.pte" % count[0])
        pte.write_text(json.dumps(spec))
        rt = qea.ExecuTorchRuntime(str(pte))
        rt.open(model_dir, {k: str(v) for k, v in options.items()})
        del fake_rt.LOG[:]
        return rt
    return _make


def fwd(rt, toks, start):
    return rt.forward(np.asarray(toks, dtype=np.int32), start)


# ---- static ----------------------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["absent", "false"])
@pytest.mark.parametrize("pos_form", ["scalar", "vector"])
def test_static_one_call_per_token(make, flag, pos_form):
    spec = spec_of(drop=("enable_dynamic_shape",) if flag == "absent" else (),
                   input_pos=pos_form)
    rt = make(spec)
    assert (rt.mode, rt.max_tokens_per_call, rt.max_context_len) == ("static", 1, 24)
    a = fwd(rt, SEQ[:5], 0)
    b = fwd(rt, SEQ[5:7], 5)
    log = fake_rt.LOG
    assert len(log) == 7
    assert [e["tokens_shape"] for e in log] == [(1, 1)] * 7
    assert [e["input_pos_shape"] for e in log] == [(1,)] * 7
    assert [e["input_pos"] for e in log] == [[p] for p in range(7)]
    assert [e["tokens"] for e in log] == [[t] for t in SEQ[:7]]
    assert a.shape == (5, V) and b.shape == (2, V) and a.dtype == np.float32
    assert close(np.concatenate([a, b]), reference(spec, SEQ[:7]))


def test_absent_dynamic_flag_means_static_even_if_the_program_takes_more(make):
    """enable_dynamic_shape absent -> static, as the C++ runner, though [1, n] would run."""
    spec = spec_of(drop=("enable_dynamic_shape",), dynamic=True)
    rt = make(spec)
    assert rt.mode == "static" and rt.max_tokens_per_call == 1
    out = fwd(rt, SEQ[:4], 0)
    assert [e["tokens_shape"] for e in fake_rt.LOG] == [(1, 1)] * 4
    assert close(out, reference(spec, SEQ[:4]))


@pytest.mark.parametrize("form", ["last2", "last3", "2d"])
def test_static_accepts_every_logits_shape(make, form):
    spec = spec_of(logits=form)
    rt = make(spec)
    assert close(fwd(rt, SEQ[:6], 0), reference(spec, SEQ[:6]))


# ---- dynamic ---------------------------------------------------------------------------------
@pytest.mark.parametrize("pos_form", ["scalar", "vector"])
@pytest.mark.parametrize("form", ["3d", "2d"])
def test_dynamic_chunks_of_max_seq_len(make, pos_form, form):
    spec = spec_of(meta={"enable_dynamic_shape": True, "get_max_seq_len": 4}, dynamic=True,
                   max_seq_len=4, input_pos=pos_form, logits=form)
    rt = make(spec)
    assert (rt.mode, rt.max_tokens_per_call, rt.input_pos_form) == ("dynamic", 4, pos_form)
    a = fwd(rt, SEQ[:10], 0)
    log = list(fake_rt.LOG)
    assert len(log) == 3 == -(-10 // 4)
    assert [e["tokens_shape"] for e in log] == [(1, 4), (1, 4), (1, 2)]
    assert [e["tokens"] for e in log] == [SEQ[0:4], SEQ[4:8], SEQ[8:10]]
    if pos_form == "scalar":
        assert [e["input_pos"] for e in log] == [[0], [4], [8]]
    else:
        assert [e["input_pos"] for e in log] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    b = fwd(rt, SEQ[10:13], 10)
    assert len(fake_rt.LOG) == 4
    assert fake_rt.LOG[-1]["input_pos"] == ([10] if pos_form == "scalar" else [10, 11, 12])
    assert close(np.concatenate([a, b]), reference(spec, SEQ[:13]))


@pytest.mark.parametrize("n", [1, 3, 4, 5, 8, 9])
def test_dynamic_call_count(make, n):
    spec = spec_of(meta={"enable_dynamic_shape": True, "get_max_seq_len": 4}, dynamic=True,
                   max_seq_len=4)
    rt = make(spec)
    out = fwd(rt, SEQ[:n], 0)
    assert len(fake_rt.LOG) == -(-n // 4)
    assert close(out, reference(spec, SEQ[:n]))


def test_input_pos_without_method_meta(make):
    """No MethodMeta: auto falls back on [1]; input_pos=vector serves a cache-position export."""
    spec = spec_of(meta={"enable_dynamic_shape": True}, dynamic=True, input_pos="vector",
                   method_meta=False)
    rt = make(spec)
    assert rt.input_pos_form == "scalar"
    with pytest.raises(RuntimeError, match=r"input_pos shape \(1,\), expected \[3\]"):
        fwd(rt, SEQ[:3], 0)
    rt = make(spec, input_pos="vector")
    assert rt.input_pos_form == "vector" and rt.n_inputs == 2
    assert close(fwd(rt, SEQ[:3], 0), reference(spec, SEQ[:3]))
    # the scalar override on a [1]-start export
    spec = spec_of(meta={"enable_dynamic_shape": True}, dynamic=True, input_pos="scalar",
                   method_meta=False)
    rt = make(spec, input_pos="scalar")
    assert close(fwd(rt, SEQ[:3], 0), reference(spec, SEQ[:3]))


@pytest.mark.parametrize("form", ["last2", "last3"])
def test_dynamic_last_position_only_is_an_error(make, form):
    spec = spec_of(meta={"enable_dynamic_shape": True}, dynamic=True, logits=form)
    rt = make(spec)
    with pytest.raises(qea.LastPositionOnly, match="last position only"):
        fwd(rt, SEQ[:3], 0)
    # the call ran: the program's state is unknown until a reset
    with pytest.raises(qea.ExecuTorchAdapterError, match="until the next reset"):
        fwd(rt, SEQ[3:4], 3)
    rt.reset()
    one = fwd(rt, SEQ[:1], 0)   # one token per call: the last position is all there is
    two = fwd(rt, SEQ[1:2], 1)
    assert close(np.concatenate([one, two]), reference(spec, SEQ[:2]))


# ---- no KV cache -----------------------------------------------------------------------------
def test_nokv_whole_sequence_from_zero(make):
    spec = spec_of(meta={"use_kv_cache": False, "enable_dynamic_shape": True}, kv=False,
                   dynamic=True)
    rt = make(spec)
    assert (rt.mode, rt.n_inputs, rt.max_tokens_per_call, rt.max_context_len) == \
        ("nokv", 1, 8, 8)
    a = fwd(rt, SEQ[:3], 0)
    b = fwd(rt, SEQ[3:5], 3)
    c = fwd(rt, SEQ[5:6], 5)
    log = fake_rt.LOG
    assert [e["tokens_shape"] for e in log] == [(1, 3), (1, 5), (1, 6)]
    assert [e["tokens"] for e in log] == [SEQ[:3], SEQ[:5], SEQ[:6]]
    assert all(e["input_pos"] is None for e in log)   # one input: no position
    assert close(np.concatenate([a, b, c]), reference(spec, SEQ[:6]))
    with pytest.raises(qea.ExecuTorchAdapterError, match="max_context_len 8"):
        fwd(rt, SEQ[6:9], 6)
    rt.reset()
    assert close(fwd(rt, SEQ[2:4], 0), reference(spec, SEQ[2:4]))
    assert fake_rt.LOG[-1]["tokens"] == SEQ[2:4]


def test_nokv_last_position_only(make):
    spec = spec_of(meta={"use_kv_cache": False}, kv=False, logits="last2")
    rt = make(spec)
    with pytest.raises(qea.LastPositionOnly):
        fwd(rt, SEQ[:2], 0)
    rt.reset()
    rows = [fwd(rt, [t], i) for i, t in enumerate(SEQ[:3])]
    assert close(np.concatenate(rows), reference(spec, SEQ[:3]))


def test_kv_metadata_with_one_input_is_refused(tmp_path, model_dir):
    pte = tmp_path / "bad.pte"
    pte.write_text(json.dumps(spec_of(kv=False)))   # use_kv_cache true, forward(tokens) only
    with pytest.raises(qea.ExecuTorchAdapterError, match="takes 1 input"):
        qea.ExecuTorchRuntime(str(pte)).open(model_dir, {})


# ---- reset -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dynamic", [False, True])
def test_reset_really_resets(make, dynamic):
    spec = spec_of(meta={"enable_dynamic_shape": dynamic}, dynamic=dynamic)
    rt = make(spec)
    loads = len(fake_rt.LOADS)
    first = fwd(rt, SEQ[:4], 0)
    rt.reset()
    assert len(fake_rt.LOADS) == loads + 1 and rt.pos == 0
    again = fwd(rt, SEQ[:4], 0)
    assert np.array_equal(first, again)
    rt.reset()
    other = fwd(rt, SEQ[6:9], 0)
    assert close(other, reference(spec, SEQ[6:9]))


def test_reloading_only_the_method_would_not_reset(make):
    """Why reset reloads the program: load_method returns the cached Method, buffers and all —
    and the stand-in is sensitive enough to show it."""
    spec = spec_of()
    rt = make(spec)
    fwd(rt, SEQ[:4], 0)
    assert rt.program.load_method("forward") is rt.method
    rt.method = rt.program.load_method("forward")   # a method-only "reset"
    rt.pos = 0
    stale = fwd(rt, SEQ[6:9], 0)
    assert not close(stale, reference(spec, SEQ[6:9]))


def test_standin_is_sensitive_to_input_pos():
    """A runner that does not advance input_pos gets different logits from the stand-in."""
    spec = spec_of()
    prog = fake_rt.Runtime.get().load_program
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".pte", delete=False) as f:
        json.dump(spec, f)
    try:
        m = prog(f.name).load_method("forward")
        import torch
        rows = [m.execute([torch.tensor([[t]]), torch.tensor([0])])[0][0, 0].numpy()
                for t in SEQ[:4]]
    finally:
        os.unlink(f.name)
    assert not close(np.asarray(rows), reference(spec, SEQ[:4]))


def test_uninitialised_buffers_show_as_wrong_logits(make):
    """Buffers that start as garbage (what PR #17801 was about): a reload cannot zero them, the
    adapter does not pretend to (no state_fill), and the logits show it."""
    spec = spec_of(initial_state="garbage")
    rt = make(spec)
    assert not close(fwd(rt, SEQ[:3], 0), reference(spec, SEQ[:3]))
    for m in ("state", "fill_state", "hidden", "set_option"):
        assert getattr(type(rt), m, None) is getattr(qea._Base, m, None)
    if qea.HAVE_HELPER:
        from qwen_conform_adapter.runtime import capabilities
        assert capabilities(rt) == []


# ---- position, profile, options --------------------------------------------------------------
def test_start_pos_must_be_the_consumed_positions(make):
    rt = make(spec_of())
    fwd(rt, SEQ[:2], 0)
    with pytest.raises(qea.ExecuTorchAdapterError, match="consumed 2"):
        fwd(rt, SEQ[2:3], 0)
    with pytest.raises(qea.ExecuTorchAdapterError, match="consumed 2"):
        fwd(rt, SEQ[2:3], 3)
    with pytest.raises(qea.ExecuTorchAdapterError, match="max_context_len 24"):
        fwd(rt, list(range(V)) * 3, 2)
    assert fwd(rt, SEQ[2:3], 2).shape == (1, V)


def test_metadata_defaults(make):
    rt = make(spec_of(drop=("enable_dynamic_shape", "use_kv_cache", "get_max_context_len",
                            "get_vocab_size")))
    assert rt.profile == {"enable_dynamic_shape": False, "use_kv_cache": True, "max_seq_len": 8,
                          "max_context_len": 8, "vocab_size": None}
    assert sorted(rt.absent) == ["enable_dynamic_shape", "get_max_context_len",
                                 "get_vocab_size", "use_kv_cache"]
    assert (rt.mode, rt.max_tokens_per_call, rt.max_context_len) == ("static", 1, 8)


def test_max_seq_len_absent(make):
    with pytest.raises(qea.ExecuTorchAdapterError, match="no get_max_seq_len"):
        make(spec_of(drop=("get_max_seq_len", "get_max_context_len")))
    rt = make(spec_of(drop=("get_max_seq_len", "get_max_context_len")), max_seq_len=6)
    assert rt.profile["max_seq_len"] == 6 and rt.max_context_len == 6


def test_vocab_must_match_config(make):
    with pytest.raises(qea.ExecuTorchAdapterError, match="get_vocab_size is 12"):
        make(spec_of(meta={"get_vocab_size": 12}))


def test_pte_option_and_errors(tmp_path, model_dir):
    pte = tmp_path / "m.pte"
    pte.write_text(json.dumps(spec_of()))
    rt = qea.ExecuTorchRuntime()
    assert rt.open(model_dir, {"pte": str(pte)}) is None
    assert rt.pte == str(pte) and rt.name.startswith("executorch m.pte (static")
    with pytest.raises(qea.ExecuTorchAdapterError, match="no program"):
        qea.ExecuTorchRuntime().open(model_dir, {})
    with pytest.raises(qea.ExecuTorchAdapterError, match="no such file"):
        qea.ExecuTorchRuntime(str(tmp_path / "nope.pte")).open(model_dir, {})
    with pytest.raises(qea.ExecuTorchAdapterError, match="unknown option threads"):
        qea.ExecuTorchRuntime(str(pte)).open(model_dir, {"threads": "2"})
    with pytest.raises(qea.ExecuTorchAdapterError, match="input_pos must be"):
        qea.ExecuTorchRuntime(str(pte)).open(model_dir, {"input_pos": "both"})
    with pytest.raises(qea.ExecuTorchAdapterError, match="reset before open"):
        qea.ExecuTorchRuntime(str(pte)).reset()


def test_imports_without_executorch(tmp_path):
    """The module imports with no executorch anywhere; open() then says what is missing."""
    pte = tmp_path / "m.pte"
    pte.write_text("{}")
    code = ("import importlib.util, sys\n"
            "sys.path.insert(0, %r)\n"
            "if importlib.util.find_spec('executorch'): print('SKIP'); raise SystemExit\n"
            "import qc_executorch_adapter as m\n"
            "try:\n"
            "    m.ExecuTorchRuntime(%r).open('.', {})\n"
            "except m.ExecuTorchAdapterError as e:\n"
            "    print('ERR', e)\n" % (ADAPTER_DIR, str(pte)))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    if out.stdout.startswith("SKIP"):
        pytest.skip("an executorch package is installed in this interpreter")
    assert out.stdout.startswith("ERR cannot import executorch.runtime")


# ---- end to end over the protocol ------------------------------------------------------------
def _client():
    try:
        sys.path.insert(0, os.path.join(ROOT, "adapters", "python"))
        from qwen_conform_adapter.client import AdapterError, Client
    except ImportError as e:
        pytest.skip("the helper package adapters/python/qwen_conform_adapter is absent (%s)" % e)
    return Client, AdapterError


def _spawn(Client, args, tmp_path):
    env = dict(os.environ, PYTHONPATH=FAKE)
    err = open(str(tmp_path / "stderr.txt"), "wb")
    return Client.spawn([sys.executable, ADAPTER] + args, env=env, stderr=err), err


def test_serve_end_to_end_static(tmp_path, model_dir):
    Client, AdapterError = _client()
    spec = spec_of(drop=("enable_dynamic_shape",))
    pte = tmp_path / "static.pte"
    pte.write_text(json.dumps(spec))
    c, err = _spawn(Client, ["--pte", str(pte)], tmp_path)
    try:
        info = c.open(model_dir)
        assert info["max_tokens_per_call"] == 1 and info["max_context_len"] == 24
        assert info["capabilities"] == [] and info["vocab_size"] == V
        assert info["name"].startswith("executorch static.pte (static")
        c.reset()
        rows = [c.forward([t], i)["logits"] for i, t in enumerate(SEQ[:5])]
        assert close(np.concatenate(rows), reference(spec, SEQ[:5]))
        with pytest.raises(AdapterError, match="at most 1"):
            c.forward(SEQ[5:7], 5)
        with pytest.raises(AdapterError, match="consumed 5"):
            c.forward([1], 0)
        with pytest.raises(AdapterError) as e:
            c.get_state(5)
        assert e.value.unsupported
        c.reset()
        assert close(c.forward([SEQ[0]], 0)["logits"], reference(spec, SEQ[:1]))
        assert c.close() == 0
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
        err.close()


def test_serve_end_to_end_dynamic_options(tmp_path, model_dir):
    Client, AdapterError = _client()
    spec = spec_of(meta={"enable_dynamic_shape": True, "get_max_seq_len": 4}, dynamic=True,
                   max_seq_len=4, input_pos="vector", method_meta=False)
    pte = tmp_path / "dyn.pte"
    pte.write_text(json.dumps(spec))
    c, err = _spawn(Client, [], tmp_path)
    try:
        info = c.open(model_dir, "pte=%s,input_pos=vector" % pte)
        assert info["max_tokens_per_call"] == 4 and info["capabilities"] == []
        c.reset()
        a = c.forward(SEQ[:4], 0)["logits"]
        b = c.forward(SEQ[4:7], 4, all_logits=False)["logits"]
        ref = reference(spec, SEQ[:7])
        assert a.shape == (4, V) and close(a, ref[:4])
        assert b.shape == (1, V) and close(b, ref[6:7])
        assert c.close() == 0
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
        err.close()


def test_serve_reports_a_missing_program(tmp_path, model_dir):
    Client, AdapterError = _client()
    c, err = _spawn(Client, [], tmp_path)
    try:
        with pytest.raises(AdapterError, match="no program"):
            c.open(model_dir)
        assert c.close() == 0
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
        err.close()
