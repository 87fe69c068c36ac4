"""Command line of the golden generator.

From the repository root (or anywhere):
  /usr/bin/python3 golden/qcgolden generate --model DIR --out FILE.h5 [--seed N] [--max-memory SIZE]
      [--stream]
From golden/ (or with PYTHONPATH=golden), the same as a module:
  /usr/bin/python3 -m qcgolden generate ...

  generate --model DIR --out FILE.h5 [--seed N] [--max-memory SIZE] [--stream]
        the standard cases (len001 .. len130, cont, longseq) with prompt-seed search, for any
        HF-format Qwen3.5 checkpoint (tiny or real size; float64 needs 8 bytes per parameter)
  generate --model DIR --out FILE.h5 --tokens 1,2,3 [--history 4,5,6] [--decode 8] [--name custom]
        one case with the given prompt (history replayed first as one prefill; start_pos =
        len(history)); margins are recorded but not enforced (a warning below 0.05)
  write-model --fixture NAME --out DIR [--force]
        write one fixture checkpoint (see qcgolden/fixtures.py) somewhere else
  write-model --preset 0.8b|2b|4b|9b|27b|35b-a3b|122b-a10b|397b-a17b|2.4t-a95b
        --dtype bf16|f32|f16|q8_0 --out DIR
        [--seed N] [--layers N] [--shards N | --max-shard-size SIZE] [--force]
        a seeded synthetic checkpoint with a preset's real dimensions (the C presets of
        `qwen-conform bench --synthetic`), written tensor by tensor (qcgolden/preset.py)
  regen [--write] [--verbose] [--fixtures DIR]
        what golden/regen runs (qcgolden/regen.py)

Exit status: 0 done; 2 bad input — a missing or malformed config.json, checkpoint or argument,
another model family, an output that cannot or must not be written, a model that does not fit
in memory — with one line "qcgolden: error: <file>: <field>: <what>" on stderr; 1 an internal
error (with its Python traceback); 130 / 143 interrupted by SIGINT / SIGTERM (no temp file left).

Before it loads anything, `generate` checks every input (config.json, the weight files' headers,
the token lists, the output path) and estimates its memory: 8 bytes per parameter (the float64
weights) plus 4 during loading (the float32 staging copy), the results kept until the file is
written and the activations of the longest case. It refuses to start when that exceeds the
machine's available memory (MemAvailable of /proc/meminfo, or the cgroup limit when lower);
`--max-memory SIZE` (8G, 512M, 1.5GiB, bytes) sets the limit instead. A model whose float64
weights do not fit is streamed instead (qcgolden/stream.py: one layer in memory at a time, the
same values bit for bit), or refused when even that does not fit; --stream streams anyway.
"""
import os
import sys

if __package__ in (None, ""):
    # run as a directory or file (`python3 golden/qcgolden ...`): import the package properly,
    # without its own directory on sys.path (its modules would shadow top-level names)
    _PKG = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _PKG]
    sys.path.insert(0, os.path.dirname(_PKG))
    from qcgolden.__main__ import run as _run
    sys.exit(_run(sys.argv[1:]))

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402

from . import config as qconfig  # noqa: E402  (json/os only: no torch before the checks)
from . import safetensors  # noqa: E402        (numpy only)
from . import memory  # noqa: E402           (os only)
from .outfile import InputError, check_output_file  # noqa: E402,F401  (os only)

PROG = "qcgolden"
CASE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,63}$")
INT64_MAX = 2 ** 63 - 1
INT32_MAX = 2 ** 31 - 1
INT_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "linear_num_key_heads",
              "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
              "head_dim", "linear_conv_kernel_dim", "full_attention_interval",
              "num_experts", "num_experts_per_tok", "moe_intermediate_size",
              "shared_expert_intermediate_size")

# Qwen3.5 text models, dense and MoE (config.json "model_type" / "architectures"); anything
# else is another model family (Llama, Qwen3-Next, ...) and refused.
MODEL_TYPES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
TEXT_MODEL_TYPES = ("qwen3_5_text", "qwen3_5_moe_text")
ARCHITECTURES = ("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM",
                 "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM")
MAX_HEADER_BYTES = 100 * 2 ** 20   # a safetensors JSON header larger than this is malformed


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        sub = self.prog[len(PROG):].strip()
        raise InputError("%s%s (see %s --help)" % (sub + ": " if sub else "", message, self.prog))


# ------------------------------------------------------------------------------------------------
# Small parsers
# ------------------------------------------------------------------------------------------------

def parse_ids(text, flag):
    """A comma-separated list of decimal token ids; an empty item, a sign or anything else is
    an error naming the item number (1-based)."""
    if text is None:
        return []
    items = text.split(",")
    if not text.strip():
        raise InputError("%s: empty token list" % flag)
    out = []
    for i, it in enumerate(items, 1):
        s = it.strip()
        if not s:
            raise InputError("%s %r: item %d is empty" % (flag, text, i))
        if not s.isascii() or not s.isdigit():
            raise InputError("%s %r: item %d (%r) is not a non-negative decimal integer"
                             % (flag, text, i, s))
        out.append(int(s))
    return out


_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([kKmMgGtT]?)(i?[bB])?$")


def parse_size(text, flag="--max-memory"):
    """8G, 512M, 1.5GiB, 4096 (bytes); k/M/G/T are powers of 1024 (as qwen-conform's)."""
    m = _SIZE.match(text.strip()) if text else None
    if not m or (m.group(3) and m.group(3).lower() == "ib" and not m.group(2)):
        raise InputError("%s: %r is not a size (e.g. 8G, 512M)" % (flag, text))
    shift = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m.group(2).lower()]
    return int(float(m.group(1)) * (1 << shift))


def _int_arg(flag, lo, hi):
    def conv(s):
        try:
            v = int(s, 10)
        except ValueError:
            raise argparse.ArgumentTypeError("%r is not an integer" % s)
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError("%d is not in %d .. %d" % (v, lo, hi))
        return v
    conv.__name__ = flag
    return conv


def gib(n):
    """A byte count for messages (KiB / MiB / GiB)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return "%.2f %s" % (n / float(1 << shift), unit)
    return "%d bytes" % n


# ------------------------------------------------------------------------------------------------
# Input checks (before torch is imported: fast, and nothing is loaded yet)
# ------------------------------------------------------------------------------------------------

def _reject_constant(name):
    raise ValueError("%s is not valid JSON (not a finite number)" % name)


def read_json(path, what):
    """The parsed JSON of a small input file; every problem is an InputError naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise InputError("%s: missing (%s)" % (path, what))
    except OSError as e:
        raise InputError("%s: cannot read: %s" % (path, e.strerror or e))
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as e:
        raise InputError("%s: not UTF-8: %s" % (path, e))
    except ValueError as e:
        raise InputError("%s: not valid JSON: %s" % (path, e))


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_config_fields(cfg, path):
    """What qcgolden.config.parse relies on without checking it itself: the model family and
    the types of the optional fields. InputError naming file and field."""
    if not isinstance(cfg, dict):
        raise InputError("%s: not a JSON object" % path)
    mt = cfg.get("model_type")
    if mt is not None and mt not in MODEL_TYPES:
        raise InputError("%s: model_type %r is not a Qwen3.5 text model (accepted: %s)"
                         % (path, mt, ", ".join(MODEL_TYPES)))
    arch = cfg.get("architectures")
    if arch is not None:
        if not isinstance(arch, list) or not all(isinstance(a, str) for a in arch):
            raise InputError("%s: architectures must be a list of strings" % path)
        bad = [a for a in arch if a not in ARCHITECTURES]
        if bad:
            raise InputError("%s: architectures %r is not a Qwen3.5 text model (accepted: %s)"
                             % (path, bad[0], ", ".join(ARCHITECTURES)))
    tc, w = cfg, path
    if "text_config" in cfg:
        tc, w = cfg["text_config"], path + ": text_config"
        if not isinstance(tc, dict):
            raise InputError("%s: text_config is not a JSON object" % path)
        tmt = tc.get("model_type")
        if tmt is not None and tmt not in TEXT_MODEL_TYPES:
            raise InputError("%s: model_type %r is not a Qwen3.5 text model (accepted: %s)"
                             % (w, tmt, ", ".join(TEXT_MODEL_TYPES)))
    for obj, where in ((cfg, path), (tc, w)):
        if "tie_word_embeddings" in obj and not isinstance(obj["tie_word_embeddings"], bool):
            raise InputError("%s: field tie_word_embeddings = %r is not true/false"
                             % (where, obj["tie_word_embeddings"]))
    for name in INT_FIELDS:  # parse() takes 64.0 and 1e300; a dimension is a JSON integer
        v = tc.get(name)
        if v is not None and not isinstance(v, bool) and isinstance(v, (int, float)) and (
                not isinstance(v, int) or not 0 < v <= INT32_MAX):
            raise InputError("%s: field %s = %r is not a positive integer (at most %d)"
                             % (w, name, v, INT32_MAX))
    lt = tc.get("layer_types")
    if lt is not None and (not isinstance(lt, list) or not all(isinstance(t, str) for t in lt)):
        raise InputError("%s: field layer_types = %.60r is not a list of strings" % (w, lt))
    if lt is None and "full_attention_interval" in tc:
        v = tc["full_attention_interval"]
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise InputError("%s: field full_attention_interval = %r is not a positive integer"
                             % (w, v))
    for name in ("rope_parameters", "rope_scaling"):
        if tc.get(name) is not None and not isinstance(tc[name], dict):
            raise InputError("%s: field %s = %.60r is not a JSON object" % (w, name, tc[name]))
    rope = [(tc, w)]
    for name in ("rope_parameters", "rope_scaling"):
        if isinstance(tc.get(name), dict):
            rope.append((tc[name], "%s: %s" % (w, name)))
    for obj, where in rope:
        if "rope_theta" in obj and not (_is_num(obj["rope_theta"]) and obj["rope_theta"] > 0):
            raise InputError("%s: field rope_theta = %r is not a positive number"
                             % (where, obj["rope_theta"]))
        if "partial_rotary_factor" in obj and not (_is_num(obj["partial_rotary_factor"]) and
                                                   0 < obj["partial_rotary_factor"] <= 1):
            raise InputError("%s: field partial_rotary_factor = %r is not a number in (0, 1]"
                             % (where, obj["partial_rotary_factor"]))
    if "rms_norm_eps" in tc and not (_is_num(tc["rms_norm_eps"]) and tc["rms_norm_eps"] > 0):
        raise InputError("%s: field rms_norm_eps = %r is not a positive number"
                         % (w, tc["rms_norm_eps"]))
    if "hidden_act" in tc and not isinstance(tc["hidden_act"], str):
        raise InputError("%s: field hidden_act = %r is not a string" % (w, tc["hidden_act"]))
    if "attention_bias" in tc and not isinstance(tc["attention_bias"], bool):
        raise InputError("%s: field attention_bias = %r is not true/false"
                         % (w, tc["attention_bias"]))


def load_config(model_dir):
    """TextConfig of DIR/config.json (every problem an InputError naming file and field)."""
    path = os.path.join(model_dir, "config.json")
    obj = read_json(path, "every Hugging Face checkpoint directory has a config.json")
    check_config_fields(obj, path)
    try:
        return qconfig.parse(obj, path)
    except qconfig.ConfigError as e:
        raise InputError(str(e))


def weight_files(model_dir):
    """The weight files checkpoint.load will read (same rules), the index validated."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        obj = read_json(index, "the shard index")
        wm = obj.get("weight_map") if isinstance(obj, dict) else None
        if not isinstance(wm, dict) or not wm:
            raise InputError("%s: weight_map: missing, or not a non-empty JSON object" % index)
        for k, v in wm.items():
            if not isinstance(v, str) or not v or "/" in v or v in (".", ".."):
                raise InputError("%s: weight_map[%r] = %.60r is not a file name in the directory"
                                 % (index, k, v))
        names = sorted(set(wm.values()))
    elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
        names = ["model.safetensors"]
    else:
        try:
            names = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
        except OSError as e:
            raise InputError("%s: cannot list: %s" % (model_dir, e.strerror or e))
    if not names:
        raise InputError("%s: no *.safetensors weight files" % model_dir)
    paths = [os.path.join(model_dir, n) for n in names]
    for p in paths:
        if not os.path.isfile(p):
            raise InputError("%s: missing%s" % (p, " (listed in %s)" % index
                                                if os.path.exists(index) else ""))
    return paths


def _nonneg_int(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def check_safetensors_header(path):
    """The header of one weight file: framing, JSON, entry types, then the reader's own checks
    (spans, dtypes, overlaps). InputError naming file and tensor."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise InputError("%s: file shorter than the 8-byte header length" % path)
            (n,) = struct.unpack("<Q", head)
            if n > size - 8 or n > MAX_HEADER_BYTES:
                raise InputError("%s: header length %d exceeds the file size %d%s" % (
                    path, n, size, "" if n <= MAX_HEADER_BYTES else " or 100 MiB"))
            raw = f.read(n)
    except OSError as e:
        raise InputError("%s: cannot read: %s" % (path, e.strerror or e))
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as e:
        raise InputError("%s: header is not valid JSON: %s" % (path, e))
    if not isinstance(header, dict):
        raise InputError("%s: header is not a JSON object" % path)
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(e, dict) or not {"dtype", "shape", "data_offsets"} <= set(e):
            raise InputError("%s: %s: entry lacks dtype/shape/data_offsets" % (path, name))
        if not isinstance(e["dtype"], str):
            raise InputError("%s: %s: dtype %r is not a string" % (path, name, e["dtype"]))
        sh, off = e["shape"], e["data_offsets"]
        if not isinstance(sh, list) or len(sh) > 8 or not all(_nonneg_int(d) for d in sh):
            raise InputError("%s: %s: shape %.60r is not a list of non-negative integers"
                             % (path, name, sh))
        if (not isinstance(off, list) or len(off) != 2 or not all(_nonneg_int(o) for o in off)
                or off[0] > off[1]):
            raise InputError("%s: %s: data_offsets %.60r is not [begin, end] with 0 <= begin "
                             "<= end" % (path, name, off))
    try:
        safetensors.read_header(path)
    except safetensors.SafetensorsError as e:
        raise InputError(str(e))
    except OSError as e:
        raise InputError("%s: cannot read: %s" % (path, e.strerror or e))


# ------------------------------------------------------------------------------------------------
# Memory estimate (the arithmetic: qcgolden/memory.py)
# ------------------------------------------------------------------------------------------------

def check_memory(c, cases, max_memory, model_dir, stream=False):
    """True when the run must be streamed layer by layer (--stream, or the float64 model does
    not fit the limit but a streamed run does: qcgolden/stream.py); InputError when even a
    streamed run does not fit, naming what it needs."""
    est = memory.estimate(c, cases)
    if max_memory is not None:
        limit, src = parse_size(max_memory), "--max-memory %s" % max_memory
    else:
        try:
            limit, src = memory.available_memory()
        except memory.MemInfoError as e:
            raise InputError(str(e))
    if est["total"] <= limit and not stream:
        return False
    from .stream import estimate as stream_estimate
    st = stream_estimate(c, cases)
    if st["total"] > limit:
        raise InputError(
            "%s: needs about %s > %s %s even streamed layer by layer: the largest layer %d "
            "parameters x 8 bytes = %s, +%s float32 staging, lm_head / embedding rows %s, "
            "states %s, activations %s, results %s, +10%% and 64 MiB margin (in memory: about "
            "%s: %d parameters x 8 bytes (float64) = %s, +%s float32 staging while loading, "
            "results %s, activations of the longest case (%s) %s); pass --max-memory SIZE to "
            "set the limit" % (
                model_dir, gib(st["total"]), gib(limit), src, st["layer_params"],
                gib(st["layer"]), gib(st["staging"]), gib(st["rows"]), gib(st["states"]),
                gib(st["activations"]), gib(st["results"]), gib(est["total"]), est["params"],
                gib(est["weights"]), gib(est["staging"]), gib(est["results"]), est["longest"],
                gib(est["activations"])))
    sys.stderr.write("%s: note: streaming the weights layer by layer: about %s (in memory: "
                     "about %s; limit %s %s)\n" % (PROG, gib(st["total"]), gib(est["total"]),
                                                   gib(limit), src))
    return True


# ------------------------------------------------------------------------------------------------
# Commands
# ------------------------------------------------------------------------------------------------

def _remove_temps(directory, pid):
    """Remove every <name>.tmp.<pid> this process left in directory."""
    suffix = ".tmp.%d" % pid
    try:
        names = os.listdir(directory or os.curdir)
    except OSError:
        return
    for n in names:
        if n.endswith(suffix):
            try:
                os.unlink(os.path.join(directory, n))
            except OSError:
                pass


def _quiet_unraisable(unraisable):
    pass


def _abandon_write(e, out, out_dir):
    """A golden write that did not finish. After a failed HDF5 write, freeing h5py's objects of
    the broken file (when the exception unwinds) or libhdf5's atexit shutdown (H5_term_library
    -> H5F__close_cb) can crash, so this never returns: it removes the temp file, reports (one
    line; a bug keeps its traceback) and leaves with os._exit, as the C harness does."""
    _remove_temps(out_dir, os.getpid())
    if isinstance(e, (OSError, RuntimeError)):   # h5py: disk full, EFBIG, EIO, quota
        msg, code = "%s: error: --out %s: cannot write: %s\n" % (PROG, out, _h5_reason(e)), 2
    else:
        import traceback
        msg, code = "".join(traceback.format_exception(type(e), e, e.__traceback__)), 1
    try:
        sys.stdout.flush()
    except OSError:
        pass
    sys.stderr.write(msg)
    sys.stderr.flush()
    os._exit(code)


def _h5_reason(e):
    """The useful part of an h5py write error ("errno = 28, error message = 'No space left
    on device'"), on one line."""
    text = " ".join(str(e).split())
    m = re.search(r"errno = (\d+), error message = '([^']*)'", text)
    if m:
        return "[Errno %s] %s" % (m.group(1), m.group(2))
    return getattr(e, "strerror", None) or text[:300]


def _print(text):
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `| head`: the work is done, stdout is gone
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass


def _load_model(model_dir):
    """The float64 model in memory, every weight checked finite."""
    from . import checkpoint
    from .model import Model
    try:
        model = Model.from_dir(model_dir)
    except (checkpoint.CheckpointError, safetensors.SafetensorsError, qconfig.ConfigError) as e:
        raise InputError(str(e))
    import torch
    for name in sorted(model.W):
        w = model.W[name]
        bad = ~torch.isfinite(w)
        if bool(bad.any()):
            idx = tuple(int(i) for i in bad.nonzero()[0])
            raise InputError("%s: tensor %s has a non-finite value (%s) at index %s"
                             % (model_dir, name, float(w[idx]), idx))
    return model


def _run_streamed(model_dir, cfg, jobs):
    """The jobs' results with the weights streamed layer by layer (qcgolden/stream.py)."""
    from . import checkpoint, stream
    bad = (checkpoint.CheckpointError, safetensors.SafetensorsError, qconfig.ConfigError)
    model = None
    try:
        model = stream.StreamModel(model_dir, cfg)
        return stream.run_jobs(model, jobs)
    except bad as e:
        raise InputError(str(e))
    finally:
        if model is not None:
            model.close()


def _tokens_case(model, hist, toks, n_decode):
    """The --tokens case: history replayed as one prefill, the prompt, n_decode greedy steps."""
    import numpy as np
    from . import goldens
    state = model.new_state()
    if hist:
        model.forward(hist, state)
    if n_decode:
        r = goldens.prefill_and_decode(model, state, toks, n_decode)
    else:  # (goldens.prefill_and_decode cannot shape an empty decode_logits)
        logits, hidden = model.forward(toks, state, collect_hidden=True)
        r = {"logits": logits.numpy(), "hidden": hidden.numpy(), "state": state.arrays(),
             "margins": np.zeros(0)}
    r.update(tokens=np.array(toks), start_pos=len(hist),
             history_tokens=np.array(hist, dtype=np.int64), history_margins=np.zeros(0),
             prompt_seed=None)
    if r["margins"].size and r["margins"].min() < goldens.MIN_MARGIN:
        sys.stderr.write("%s: warning: a greedy choice has margin %.3g < %g (near-tie)\n"
                         % (PROG, r["margins"].min(), goldens.MIN_MARGIN))
    if goldens.router_margin_min(r) < goldens.ROUTER_MARGIN_THRESHOLD:
        sys.stderr.write("%s: warning: a router decision has margin %.3g < %g (near-tie)\n"
                         % (PROG, goldens.router_margin_min(r), goldens.ROUTER_MARGIN_THRESHOLD))
    return r


def _standard_case(model, c, seed, i, model_dir):
    """A standard case with its prompt-seed search (goldens.choose_case)."""
    from . import goldens
    try:
        return goldens.choose_case(model, c, seed, i)
    except RuntimeError as e:
        if "no prompt with all margins" not in str(e):
            raise
        raise InputError("%s: case %s: %s (degenerate logits?); give a prompt with "
                         "--tokens" % (model_dir, c.name, e))


def cmd_generate(a):
    model_dir = a.model
    if not os.path.isdir(model_dir):
        raise InputError("--model %s: %s" % (model_dir, "not a directory" if os.path.exists(model_dir)
                                              else "no such directory"))
    if a.tokens is None:
        for flag, v in (("--history", a.history), ("--decode", a.decode), ("--name", a.name)):
            if v is not None:
                raise InputError("%s is only used with --tokens (the standard cases choose their "
                                 "own prompts)" % flag)
    if a.name is not None and not CASE_NAME.match(a.name):
        raise InputError("--name %r: a case name is 1 to 63 of [A-Za-z0-9_-]" % a.name)
    hist, toks = parse_ids(a.history, "--history"), parse_ids(a.tokens, "--tokens")
    n_decode = 8 if a.decode is None else a.decode
    if a.max_memory is not None:
        parse_size(a.max_memory)
    cfg = load_config(model_dir)
    files = weight_files(model_dir)
    for p in files:
        check_safetensors_header(p)
    for flag, ids in (("--history", hist), ("--tokens", toks)):
        for i, t in enumerate(ids, 1):
            if t >= cfg.vocab_size:
                raise InputError("%s: item %d (%d) is not a token id of %s (vocab_size %d)"
                                 % (flag, i, t, os.path.join(model_dir, "config.json"),
                                    cfg.vocab_size))
    inputs = [(os.path.join(model_dir, "config.json"), "the model's config.json")]
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        inputs.append((index, "the model's shard index"))
    inputs += [(p, "a weight file of the model") for p in files]
    out = check_output_file(a.out, inputs)

    from . import setup_torch
    setup_torch()
    from . import goldens

    if toks:
        specs = [goldens.CaseSpec(a.name or "custom", len(toks), n_decode=n_decode,
                                  description="prompt given on the command line")]
        shape = [(specs[0].name, len(hist), 0, len(toks), n_decode)]
    else:
        specs = goldens.default_cases()
        shape = [(s.name, s.history_prompt, s.history_decode, s.n_tokens, s.n_decode)
                 for s in specs]
    streamed = check_memory(cfg, shape, a.max_memory, model_dir, a.stream)
    jobs = [lambda m: _tokens_case(m, hist, toks, n_decode)] if toks else [
        (lambda m, c=c, i=i: _standard_case(m, c, a.seed, i, model_dir))
        for i, c in enumerate(specs)]
    if streamed:
        results = _run_streamed(model_dir, cfg, jobs)
    else:
        model = _load_model(model_dir)
        results = [job(model) for job in jobs]
    done = list(zip(specs, results))
    # h5py prints a traceback from every object destructor that meets the broken file after a
    # failed write (Cython's unraisable report, straight to sys.stderr): held back, and shown
    # only when the write succeeds (then it is something else worth seeing)
    import io
    _TEMP_DIRS.append(os.path.dirname(os.path.abspath(out)))
    hook, sys.unraisablehook = sys.unraisablehook, _quiet_unraisable
    real_stderr, sys.stderr = sys.stderr, io.StringIO()
    try:
        goldens.write_golden(out, model_dir, done, a.seed)
    except BaseException as e:  # noqa: BLE001 - every way out of a write, see _abandon_write
        sys.stderr = real_stderr
        _abandon_write(e, a.out, os.path.dirname(os.path.abspath(out)))
    held, sys.stderr, sys.unraisablehook = sys.stderr.getvalue(), real_stderr, hook
    sys.stderr.write(held)
    _print("wrote %s" % a.out)
    return 0


def cmd_write_model(a):
    if (a.fixture is None) == (a.preset is None):
        raise InputError("write-model: give one of --fixture NAME or --preset NAME "
                         "(see %s write-model --help)" % PROG)
    if a.preset is not None:
        return cmd_write_preset(a)
    for flag, v in (("--dtype", a.dtype), ("--seed", a.seed), ("--layers", a.layers),
                    ("--shards", a.shards), ("--max-shard-size", a.max_shard_size)):
        if v is not None:
            raise InputError("write-model: %s is for --preset only" % flag)
    from . import fixtures
    try:
        spec = fixtures.by_name(a.fixture)
    except KeyError:
        raise InputError("--fixture %r: unknown (known: %s)"
                         % (a.fixture, ", ".join(s.name for s in fixtures.FIXTURES)))
    out = a.out
    _check_model_out(out, a.force)
    from . import setup_torch
    setup_torch()
    from . import init
    _TEMP_DIRS.append(out)
    try:
        names = init.write_checkpoint(spec, out)
    except OSError as e:
        raise InputError("--out %s: cannot write: %s%s" % (
            out, e.strerror or e, " (%s)" % e.filename if e.filename else ""))
    finally:
        _remove_temps(out, os.getpid())
    _print("\n".join(names))
    return 0


def _check_model_out(out, force):
    """--out DIR of write-model: a directory (or a new one in an existing directory) that holds
    no checkpoint unless force."""
    if not out:
        raise InputError("--out: empty path")
    if os.path.exists(out) and not os.path.isdir(out):
        raise InputError("--out %s: exists and is not a directory" % out)
    if os.path.isdir(out) and not force:
        have = sorted(n for n in os.listdir(out) if n == "config.json" or
                      n.endswith(".safetensors") or n == "model.safetensors.index.json")
        if have:
            raise InputError("--out %s: already holds a checkpoint (%s): refused without --force"
                             % (out, os.path.join(out, have[0])))
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise InputError("--out %s: directory %s does not exist" % (out, parent))


def cmd_write_preset(a):
    from . import preset
    if a.preset not in preset.PRESETS:
        raise InputError("--preset %r: unknown (known: %s)" % (a.preset, ", ".join(preset.PRESETS)))
    dtype = (a.dtype or "bf16").lower()
    if dtype not in preset.DTYPES:
        raise InputError("--dtype %r: bf16, f32, f16 or q8_0" % a.dtype)
    if a.shards is not None and a.max_shard_size is not None:
        raise InputError("write-model: --shards and --max-shard-size exclude each other")
    max_shard = preset.DEFAULT_MAX_SHARD
    if a.max_shard_size is not None:
        max_shard = parse_size(a.max_shard_size, "--max-shard-size")
        if max_shard < 1:
            raise InputError("--max-shard-size: must be positive")
    full_layers = preset.PRESETS[a.preset][2]
    if a.layers is not None and not 1 <= a.layers <= full_layers:
        raise InputError("--layers %d: %s has %d layers (1..%d)"
                         % (a.layers, a.preset, full_layers, full_layers))
    out = a.out
    _check_model_out(out, a.force)
    spec = preset.spec(a.preset, dtype, seed=1 if a.seed is None else a.seed, layers=a.layers)
    files, total = preset.layout(spec, a.shards, max_shard)
    need = total + (1 << 20)
    probe = out if os.path.isdir(out) else os.path.dirname(os.path.abspath(out))
    st = os.statvfs(probe)
    if st.f_bavail * st.f_frsize < need:
        raise InputError("--out %s: %.2f GB needed, %.2f GB free on its file system"
                         % (out, need / 1e9, st.f_bavail * st.f_frsize / 1e9))
    created = not os.path.isdir(out)
    _TEMP_DIRS.append(out)
    if created:
        _CREATED_DIRS.append(out)
    last = [-1]

    def progress(done, tot):
        pct = int(100 * done / tot) if tot else 100
        if pct // 10 != last[0] // 10:
            last[0] = pct
            sys.stderr.write("%s: write-model: %3d%% of %.2f GB\n" % (PROG, pct, tot / 1e9))
            sys.stderr.flush()
    try:
        names = preset.write(spec, out, shards=a.shards, max_shard_bytes=max_shard,
                             progress=progress if a.progress else None)
    except OSError as e:
        raise InputError("--out %s: cannot write: %s%s" % (
            out, e.strerror or e, " (%s)" % e.filename if e.filename else ""))
    finally:
        _remove_temps(out, os.getpid())
    _print("\n".join(names))
    return 0


def cmd_regen(argv):
    from . import regen
    return regen.main(argv)


def build_parser():
    ap = _Parser(prog=PROG, allow_abbrev=False,
                 description="The float64 Qwen3.5 golden generator (golden/README.md).")
    sub = ap.add_subparsers(dest="cmd", metavar="{generate,write-model,regen}",
                            parser_class=_Parser)
    sub.required = True
    g = sub.add_parser("generate", allow_abbrev=False, prog=PROG + " generate",
                       help="write a golden for a checkpoint")
    g.add_argument("--model", required=True, metavar="DIR",
                   help="Hugging Face checkpoint directory (config.json + *.safetensors)")
    g.add_argument("--out", required=True, metavar="F.h5",
                   help="the golden to write (temp file + rename; never an input)")
    g.add_argument("--seed", type=_int_arg("--seed", 0, INT64_MAX), default=0, metavar="N",
                   help="prompt-search seed (default 0)")
    g.add_argument("--tokens", metavar="1,2,3", help="one case with this prompt instead of "
                   "the standard cases")
    g.add_argument("--history", metavar="4,5,6", help="(--tokens) prefilled before the prompt")
    g.add_argument("--decode", type=_int_arg("--decode", 0, 100000), default=None, metavar="N",
                   help="(--tokens) greedy decode steps (default 8)")
    g.add_argument("--name", default=None, help="(--tokens) the case name (default custom)")
    g.add_argument("--max-memory", metavar="SIZE", help="refuse when the estimate exceeds SIZE "
                   "(e.g. 8G; default: the machine's available memory)")
    g.add_argument("--stream", action="store_true", help="read the weights layer by layer "
                   "(the default when the float64 model does not fit the memory limit)")
    w = sub.add_parser("write-model", allow_abbrev=False, prog=PROG + " write-model",
                       help="write a fixture checkpoint, or a synthetic one of a preset's size")
    w.add_argument("--fixture", help="a committed fixture's checkpoint (qcgolden/fixtures.py)")
    w.add_argument("--preset", help="a seeded synthetic checkpoint with this preset's real "
                   "dimensions (0.8b, 2b, 4b, 9b, 27b, 35b-a3b, 122b-a10b, 397b-a17b, "
                   "2.4t-a95b)")
    w.add_argument("--dtype", help="(--preset) storage dtype bf16 (default), f32, f16 or q8_0 "
                   "(the projections Q8_0: I8 + F16 scale, the rest BF16)")
    w.add_argument("--seed", type=_int_arg("--seed", 0, 2 ** 32 - 1), default=None,
                   metavar="N", help="(--preset) weights seed (default 1)")
    w.add_argument("--layers", type=_int_arg("--layers", 1, 1000), default=None, metavar="N",
                   help="(--preset) keep the first N layers (real per-layer dimensions)")
    w.add_argument("--shards", type=_int_arg("--shards", 1, 1000), default=None, metavar="N",
                   help="(--preset) N weight files + index (default: by --max-shard-size)")
    w.add_argument("--max-shard-size", metavar="SIZE", help="(--preset) shard when the weights "
                   "exceed SIZE (default 2 GB = 2e9 bytes)")
    w.add_argument("--progress", action="store_true", help="(--preset) progress on stderr")
    w.add_argument("--out", required=True, metavar="DIR")
    w.add_argument("--force", action="store_true",
                   help="write into a directory that already holds a checkpoint")
    sub.add_parser("regen", add_help=False, prog=PROG + " regen",
                   help="golden/regen [--write] [--verbose] [--fixtures DIR]")
    return ap


def main(argv):
    argv = list(argv)
    if argv[:1] == ["regen"]:  # its own argument rules (qcgolden/regen.py)
        return cmd_regen(argv[1:])
    if argv[:1] in (["simulate"], ["measure-tiers"], ["measure-topk"]):  # precision_cli.py
        from . import precision_cli
        return precision_cli.main(argv)
    a = build_parser().parse_args(argv)
    if a.cmd == "write-model":
        return cmd_write_model(a)
    return cmd_generate(a)


# Directories where this process may have a <name>.tmp.<pid> file (the outputs' directories).
_TEMP_DIRS = []
# Directories this process created for an output (removed on a signal when left empty).
_CREATED_DIRS = []


def _on_signal(signum, frame):
    """SIGINT / SIGTERM: remove this process's temp files and leave at once with 128 + signal
    (130 / 143). An exception raised here could be swallowed or re-wrapped by a C extension
    (torch's import turns it into a RuntimeError); there is nothing else to clean up."""
    for d in _TEMP_DIRS:
        _remove_temps(d, os.getpid())
    for d in _CREATED_DIRS:
        try:
            os.rmdir(d)
        except OSError:
            pass
    name = "SIGINT" if signum == signal.SIGINT else "SIGTERM"
    try:
        os.write(2, ("%s: interrupted (%s)%s\n" % (
            PROG, name, "; temp files removed" if _TEMP_DIRS else "")).encode())
    except OSError:
        pass
    os._exit(128 + signum)


def run(argv):
    """main() with the error policy: bad input -> one line on stderr, exit 2; interrupted ->
    130 / 143 (temp files removed, see _on_signal); any other exception propagates (a bug:
    Python prints the traceback, exit 1)."""
    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return main(argv)
    except InputError as e:
        sys.stderr.write("%s: error: %s\n" % (PROG, " ".join(str(e).split("\n"))))
        return 2
    except MemoryError:
        sys.stderr.write("%s: error: out of memory (see --max-memory)\n" % PROG)
        return 2
    except OSError as e:  # an I/O error the checks could not foresee (a disk, a permission)
        where = "%s: " % e.filename if e.filename else ""
        sys.stderr.write("%s: error: %s%s\n" % (PROG, where, e.strerror or e))
        return 2
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
