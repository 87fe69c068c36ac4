"""The generator's command line on bad input: exit 2 with ONE line naming the file and the field
(never a Python traceback); an internal bug still shows its traceback (exit 1); the memory
estimate refuses a model that does not fit; the documented invocations work from the repository
root (`/usr/bin/python3 golden/qcgolden ...`, `golden/regen`) and from golden/ (`-m qcgolden`)."""
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import h5py
import pytest

from conftest import FIXTURES, GOLDEN, REPO
from qcgolden import safetensors
import validate

PY = sys.executable
TINY = os.path.join(FIXTURES, "tiny-f32-tied-flat", "model")   # vocab 256, 4 layers, tied
ROOT_CLI = [PY, os.path.join(GOLDEN, "qcgolden")]               # from the repository root


def gen(*args, cwd=REPO, cli=None, **kw):
    """Run the generator (default: the root invocation, from the repository root)."""
    return subprocess.run((cli or ROOT_CLI) + [str(a) for a in args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, **kw)


def one_error(r, *needles):
    """Exit 2, exactly one stderr line "qcgolden: error: ..." holding every needle, no
    traceback, nothing on stdout. Returns the line."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("qcgolden: error: "), lines[0]
    for n in needles:
        assert str(n) in lines[0], (n, lines[0])
    assert r.stdout == "", r.stdout
    return lines[0]


def no_temp(d):
    left = [n for n in os.listdir(d) if ".tmp." in n]
    assert not left, left


@pytest.fixture
def model(tmp_path):
    """A writable copy of the tiny checkpoint."""
    d = str(tmp_path / "model")
    shutil.copytree(TINY, d)
    return d


def edit_config(model, fn):
    p = os.path.join(model, "config.json")
    cfg = json.load(open(p))
    fn(cfg)
    with open(p, "w") as f:
        json.dump(cfg, f)
    return p


def rewrite_weights(model, fn):
    """Apply fn to the {name: (dtype, array)} of model.safetensors and write it back."""
    p = os.path.join(model, "model.safetensors")
    t = safetensors.read(p)
    fn(t)
    safetensors.write(p, [(n, d, a) for n, (d, a) in t.items()])
    return p


# ------------------------------------------------------------------------------------------------
# The invocations that work
# ------------------------------------------------------------------------------------------------

def test_root_invocation_writes_a_valid_golden(tmp_path):
    out = tmp_path / "g.h5"
    r = gen("generate", "--model", os.path.relpath(TINY, REPO), "--out", out, "--tokens", "1,2,3",
            "--decode", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "wrote %s" % out
    assert validate.validate(str(out)) == []
    no_temp(str(tmp_path))


def test_module_invocation_from_golden_dir(tmp_path):
    out = tmp_path / "g.h5"
    r = gen("generate", "--model", TINY, "--out", out, "--tokens", "7", "--history", "1,2",
            "--decode", "0", "--name", "h2", cli=[PY, "-m", "qcgolden"], cwd=GOLDEN)
    assert r.returncode == 0, r.stderr
    with h5py.File(out, "r") as f:
        assert int(f["cases/h2"].attrs["start_pos"]) == 2
    assert validate.validate(str(out)) == []


def test_help_exits_0():
    r = gen("generate", "--help")
    assert r.returncode == 0 and "--max-memory" in r.stdout


def test_regen_runs_from_any_directory(tmp_path):
    r = subprocess.run([os.path.join(GOLDEN, "regen"), "--bogus"], cwd=str(tmp_path),
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("usage: golden/regen"), r.stderr
    assert "Traceback" not in r.stderr


# ------------------------------------------------------------------------------------------------
# config.json
# ------------------------------------------------------------------------------------------------

def test_missing_config(model, tmp_path):
    os.unlink(os.path.join(model, "config.json"))
    one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5"),
              os.path.join(model, "config.json"), "missing")


def test_malformed_config(model, tmp_path):
    p = os.path.join(model, "config.json")
    open(p, "w").write('{"vocab_size": 256, ')
    one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5"), p, "not valid JSON")


def test_config_not_an_object(model, tmp_path):
    p = os.path.join(model, "config.json")
    open(p, "w").write("[1, 2]")
    one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5"), p, "not a JSON object")


def test_config_nan(model, tmp_path):
    p = os.path.join(model, "config.json")
    text = open(p).read()
    assert '"rms_norm_eps": 1e-06' in text
    open(p, "w").write(text.replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": NaN'))
    one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5"), p, "NaN")


@pytest.mark.parametrize("field, value, needle", [
    ("vocab_size", None, "missing field vocab_size"),
    ("hidden_size", "64", "field hidden_size = '64' is not a positive integer"),
    ("num_hidden_layers", 4.5, "field num_hidden_layers = 4.5"),
    ("vocab_size", 1e300, "field vocab_size = 1e+300"),
    ("layer_types", 5, "field layer_types = 5 is not a list of strings"),
    ("layer_types", ["linear_attention"] * 3, "layer_types has 3 entries"),
    ("rope_parameters", {"rope_theta": "big"}, "rope_parameters: field rope_theta = 'big'"),
    ("rms_norm_eps", -1, "field rms_norm_eps = -1"),
    ("tie_word_embeddings", "yes", "field tie_word_embeddings = 'yes'"),
    ("hidden_act", "gelu", "hidden_act 'gelu'"),
])
def test_config_field(model, tmp_path, field, value, needle):
    def fn(c):
        if value is None:
            del c[field]
        else:
            c[field] = value
    p = edit_config(model, fn)
    one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5"), p, needle)


@pytest.mark.parametrize("field, value", [
    ("model_type", "llama"), ("model_type", "qwen3_moe"), ("model_type", "qwen3_next"),
    ("architectures", ["LlamaForCausalLM"]),
])
def test_other_model_family(model, tmp_path, field, value):
    p = edit_config(model, lambda c: c.__setitem__(field, value))
    line = one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5"), p, field,
                     "accepted:")
    assert "qwen3_5" in line.lower()


def test_not_a_directory(tmp_path):
    one_error(gen("generate", "--model", tmp_path / "nope", "--out", tmp_path / "g.h5"),
              tmp_path / "nope", "no such directory")


# ------------------------------------------------------------------------------------------------
# Weights
# ------------------------------------------------------------------------------------------------

def test_wrong_shape(model, tmp_path):
    name = "model.layers.0.mlp.up_proj.weight"
    p = rewrite_weights(model, lambda t: t.__setitem__(name, (t[name][0], t[name][1][:-1])))
    one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5", "--tokens", "1"),
              p, "layers.0.mlp.up_proj.weight", "shape [63, 64] != [64, 64]")
    assert not os.path.exists(tmp_path / "g.h5")


def test_missing_tensor(model, tmp_path):
    rewrite_weights(model, lambda t: t.pop("model.norm.weight"))
    one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5", "--tokens", "1"),
              model, "missing tensor norm.weight")


def test_unknown_tensor(model, tmp_path):
    p = rewrite_weights(model, lambda t: t.__setitem__("model.extra.weight",
                                                       t["model.norm.weight"]))
    one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5", "--tokens", "1"),
              p, "extra.weight: unknown tensor")


def test_nan_weight(model, tmp_path):
    def fn(t):
        d, a = t["model.layers.1.mlp.down_proj.weight"]
        a = a.copy()
        a[3, 5] = float("nan")
        t["model.layers.1.mlp.down_proj.weight"] = (d, a)
    rewrite_weights(model, fn)
    one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5", "--tokens", "1"),
              model, "layers.1.mlp.down_proj.weight", "non-finite", "(3, 5)")


@pytest.mark.parametrize("blob, needle", [
    (b"\x01\x02", "shorter than the 8-byte header length"),
    (b"\xff" * 8 + b"{}", "header length"),
    (b"\x04\x00\x00\x00\x00\x00\x00\x00{x}}", "header is not valid JSON"),
    (b"\x02\x00\x00\x00\x00\x00\x00\x00[]", "header is not a JSON object"),
])
def test_malformed_safetensors(model, tmp_path, blob, needle):
    p = os.path.join(model, "model.safetensors")
    open(p, "wb").write(blob)
    one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5"), p, needle)


@pytest.mark.parametrize("entry, needle", [
    ({"dtype": "F32", "shape": [2], "data_offsets": "0,8"}, "data_offsets"),
    ({"dtype": "F32", "shape": ["2"], "data_offsets": [0, 8]}, "shape"),
    ({"dtype": "F32", "shape": [-2, -1], "data_offsets": [0, 8]}, "shape"),
    ({"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}, "unsupported dtype I64"),
    ({"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}, "byte span 8"),
    ({"shape": [2]}, "entry lacks"),
])
def test_malformed_safetensors_entry(model, tmp_path, entry, needle):
    p = os.path.join(model, "model.safetensors")
    hdr = json.dumps({"model.norm.weight": entry}).encode()
    open(p, "wb").write(len(hdr).to_bytes(8, "little") + hdr + b"\0" * 8)
    one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5"), p,
              "model.norm.weight", needle)


def test_bad_shard_index(model, tmp_path):
    p = os.path.join(model, "model.safetensors.index.json")
    json.dump({"weight_map": ["model.safetensors"]}, open(p, "w"))
    one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5"), p, "weight_map")
    json.dump({"weight_map": {"a": "model-2.safetensors"}}, open(p, "w"))
    one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5"),
              os.path.join(model, "model-2.safetensors"), "missing")


# ------------------------------------------------------------------------------------------------
# Arguments
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, needle", [
    (["--tokens", "1,,3"], "item 2 is empty"),
    (["--tokens", "1,2,"], "item 3 is empty"),
    (["--tokens", "+5"], "item 1 ('+5')"),
    (["--tokens", "-0"], "item 1 ('-0')"),
    (["--tokens", "1,x"], "item 2 ('x')"),
    (["--tokens", ""], "empty token list"),
    (["--tokens", "1,256"], "item 2 (256) is not a token id"),
    (["--tokens", "1", "--history", "3,999"], "--history: item 2 (999)"),
    (["--history", "1,2"], "--history is only used with --tokens"),
    (["--decode", "3"], "--decode is only used with --tokens"),
    (["--tokens", "1", "--decode", "-1"], "argument --decode"),
    (["--tokens", "1", "--name", "a b"], "--name 'a b'"),
    (["--seed", "x"], "argument --seed: 'x' is not an integer"),
    (["--seed", "-1"], "argument --seed"),
    (["--max-memory", "lots"], "--max-memory: 'lots' is not a size"),
    (["--sed", "1"], "unrecognized arguments: --sed"),
])
def test_bad_arguments(tmp_path, args, needle):
    one_error(gen("generate", "--model", TINY, "--out", tmp_path / "g.h5", *args), needle)
    assert not os.path.exists(tmp_path / "g.h5")


def test_missing_required_and_unknown_command(tmp_path):
    one_error(gen("generate", "--model", TINY), "--out")
    one_error(gen("frobnicate"), "frobnicate")
    one_error(gen(), "required")


# ------------------------------------------------------------------------------------------------
# Outputs
# ------------------------------------------------------------------------------------------------

def test_output_directory_missing(tmp_path):
    out = tmp_path / "no" / "g.h5"
    one_error(gen("generate", "--model", TINY, "--out", out), out, "directory %s does not exist"
              % (tmp_path / "no"))


def test_output_is_a_directory(tmp_path):
    one_error(gen("generate", "--model", TINY, "--out", tmp_path), tmp_path, "is a directory")


@pytest.mark.parametrize("victim", ["config.json", "model.safetensors"])
def test_output_onto_an_input(model, tmp_path, victim):
    p = os.path.join(model, victim)
    before = open(p, "rb").read()
    one_error(gen("generate", "--model", model, "--out", p), p, "an input")
    link = tmp_path / "link.h5"
    os.symlink(p, link)
    one_error(gen("generate", "--model", model, "--out", link), link, "is the same file as", p)
    assert open(p, "rb").read() == before


def test_output_read_only(tmp_path):
    out = tmp_path / "ro.h5"
    out.write_text("keep")
    os.chmod(out, 0o444)
    one_error(gen("generate", "--model", TINY, "--out", out), out, "read-only")
    assert out.read_text() == "keep"


def test_output_not_regular():
    one_error(gen("generate", "--model", TINY, "--out", "/dev/null"), "/dev/null",
              "not a regular file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a 0555 directory")
def test_output_directory_not_writable(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    os.chmod(d, 0o555)
    try:
        one_error(gen("generate", "--model", TINY, "--out", d / "g.h5"), d, "cannot write")
    finally:
        os.chmod(d, 0o755)


def _small_file_limit():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG instead of death
    resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))


def test_disk_full_while_writing(tmp_path):
    """A write error in the middle of the golden (a 20 kB file-size limit stands in for a full
    disk): exit 2 naming the output, no temp file, no output."""
    out = tmp_path / "g.h5"
    r = gen("generate", "--model", TINY, "--out", out, "--tokens", ",".join(["5"] * 40),
            preexec_fn=_small_file_limit)
    one_error(r, out, "cannot write")
    assert not out.exists()
    no_temp(str(tmp_path))


def test_sigterm_leaves_no_temp(tmp_path):
    out = tmp_path / "g.h5"
    p = subprocess.Popen(ROOT_CLI + ["generate", "--model", TINY, "--out", str(out)], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    if p.returncode == 0:
        pytest.skip("finished before the signal")
    assert p.returncode == 143 and "Traceback" not in err, (p.returncode, err)
    assert not out.exists()
    no_temp(str(tmp_path))


# ------------------------------------------------------------------------------------------------
# Memory
# ------------------------------------------------------------------------------------------------

def test_max_memory_refuses_with_the_numbers(tmp_path):
    line = one_error(gen("generate", "--model", TINY, "--out", tmp_path / "g.h5",
                         "--max-memory", "1M"), TINY, "--max-memory 1M",
                     "parameters x 8 bytes (float64)", "activations of the longest case (len130")
    assert "needs about" in line
    assert not os.path.exists(tmp_path / "g.h5")


def test_model_larger_than_the_machine(model, tmp_path):
    """A config declaring ~10^12 parameters is refused on the estimate, before any weight is
    read (the weights do not even match it)."""
    p = edit_config(model, lambda c: c.update(vocab_size=2 ** 31 - 1, hidden_size=8192))
    one_error(gen("generate", "--model", model, "--out", tmp_path / "g.h5"), model,
              "MemAvailable of /proc/meminfo", "parameters x 8 bytes")
    assert os.path.exists(p)


def test_max_memory_override_allows(tmp_path):
    r = gen("generate", "--model", TINY, "--out", tmp_path / "g.h5", "--tokens", "3",
            "--decode", "1", "--max-memory", "64G")
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------------------------------------
# write-model
# ------------------------------------------------------------------------------------------------

def test_write_model_errors(tmp_path):
    one_error(gen("write-model", "--fixture", "nope", "--out", tmp_path / "m"), "'nope'",
              "tiny-f32-tied-flat")
    d = tmp_path / "m"
    r = gen("write-model", "--fixture", "tiny-f32-tied-flat", "--out", d)
    assert r.returncode == 0 and "config.json" in r.stdout, r.stderr
    before = (d / "config.json").read_bytes()
    one_error(gen("write-model", "--fixture", "tiny-legacy-packed", "--out", d), d, "--force")
    assert (d / "config.json").read_bytes() == before
    one_error(gen("write-model", "--fixture", "tiny-f32-tied-flat", "--out", d / "config.json"),
              "not a directory")


# ------------------------------------------------------------------------------------------------
# A bug is not an input error
# ------------------------------------------------------------------------------------------------

def test_internal_error_shows_the_traceback(tmp_path):
    code = ("import sys; sys.path.insert(0, %r)\n"
            "import qcgolden.goldens as g\n"
            "def boom(*a, **k): raise ZeroDivisionError('planted bug')\n"
            "g.prefill_and_decode = boom\n"
            "from qcgolden.__main__ import run\n"
            "sys.exit(run(sys.argv[1:]))\n" % GOLDEN)
    r = subprocess.run([PY, "-c", code, "generate", "--model", TINY, "--out",
                        str(tmp_path / "g.h5"), "--tokens", "1"], capture_output=True, text=True)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Traceback" in r.stderr and "ZeroDivisionError: planted bug" in r.stderr
    no_temp(str(tmp_path))


def test_validate_cli_missing_path(tmp_path):
    r = subprocess.run([PY, os.path.join(GOLDEN, "validate.py"), str(tmp_path / "nope.h5")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == "validate.py: %s: no such file or directory" % (tmp_path / "nope.h5")


def test_validate_unreadable_config_json(tmp_path):
    g = tmp_path / "g.h5"
    shutil.copy(os.path.join(FIXTURES, "tiny-f32-tied-flat", "golden.h5"), g)
    with h5py.File(g, "r+") as f:
        c = json.loads(f.attrs["config_json"])
        c["full_attention_interval"], c["model_type"] = 0, "llama"
        f.attrs["config_json"] = json.dumps(c)
    errs = validate.validate(str(g), check_model=False)
    assert any("model_type 'llama'" in e for e in errs), errs
