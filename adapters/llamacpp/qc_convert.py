#!/usr/bin/python3
"""qc_convert.py -- run llama.cpp's STOCK convert_hf_to_gguf.py, unmodified and in-process, on a
Hugging Face-format Qwen3.5 checkpoint, on a machine that lacks what it expects.

    /usr/bin/python3 qc_convert.py --llama-src DIR MODEL_DIR OUT.gguf [--outtype f32|bf16|f16|q8_0]
                                   [--mtp auto|keep|drop] [--mrope-section stock|auto]

DIR is llama.cpp's source tree (v0.5.0, cloned from node-llama-cpp's llama/gitRelease.bundle by
ci/llamacpp): convert_hf_to_gguf.py, its conversion/ package and gguf-py/ are used as they are.
Nothing in DIR is edited; every workaround below is a patch applied in this process only, before
the converter's own main() runs (via runpy, with sys.argv set as its command line).

Workarounds, each for a thing this machine or the fixtures lack:

1. `transformers` is not installed (Debian has no package for it), but conversion/base.py imports
   `from transformers import AutoConfig` at top level. A stub module is registered in
   sys.modules. Its AutoConfig.from_pretrained raises, which makes ModelBase.load_hparams fall
   back to reading config.json itself (its own documented fallback; it logs a warning). The
   converter then normalises the raw config itself (text_config hoisted to the root, legacy
   top-level rope_theta / partial_rotary_factor mirrored into rope_parameters). AutoTokenizer
   also raises: nothing on the Qwen3.5 path needs it once (2) is in place.
2. The fixtures ship no tokenizer, and the converter's Qwen3.5 path (TextModel.set_vocab ->
   _set_vocab_gpt2) needs one through AutoTokenizer. _set_vocab_gpt2 is replaced by one that
   writes a dummy byte-level BPE vocabulary of exactly vocab_size tokens (tokenizer model "gpt2",
   pre-tokenizer "default", GPT-2 byte symbols first -- "\\n" and " " among the first ones, as
   llama.cpp tokenizes "\\n" while loading -- then "<dummy_N>" fillers past 256; one merge), so
   llama.cpp's vocabulary loader accepts the file and n_vocab matches the lm_head. Token ids are
   what the harness feeds; the strings are never used.
3. torch 1.13 has no float8 dtypes, but conversion/base.py names torch.float8_e4m3fn /
   torch.float8_e5m2 in class-level dicts (evaluated at import). They are set to distinct
   placeholder objects (not an existing dtype: an F8 checkpoint then fails loudly instead of
   being read as uint8).
4. torch 1.13 has no `exp` for Half on the CPU, and the converter computes -exp(A_log) on the
   stored dtype. The F16 tensors of an F16 checkpoint are upcast to F32 when read (exact);
   --outtype decides the stored type afterwards as usual.
5. MTP: with --mtp auto (default) the converter's own `--no-mtp` flag is passed whenever the
   checkpoint has no `mtp.*` tensor, whatever config.json says: a config that declares
   `mtp_num_hidden_layers` makes the converter expect MTP blocks that are not there, and a
   config WITHOUT `mtp_num_hidden_layers` (and no mtp tensors) stops the stock v0.5.0
   converter with a bare AssertionError (`assert self.opt_num_mtp_layers != 0`,
   conversion/qwen.py, _QwenMtpMixin.__init__: it falls back to counting mtp tensors, which
   are not counted yet when __init__ runs; FINDINGS.md). keep / drop force it. (The plugin
   never runs the MTP head.)
6. Opt-in only (--mrope-section auto; the plugin's fix_mrope=1): when config.json has no
   mrope_section, the converter writes Qwen's default [11, 11, 10, 0], which sums to 32 -- more
   than the head dim of a small model, and llama.cpp v0.5.0 then aborts at its first decode
   (GGML_ASSERT(sect_dims <= ne0)). `auto` writes sections summing to rotary_dim / 2 instead
   (split like [11, 11, 10]: text positions are equal in every section, so any split of the
   rotary pairs computes the same RoPE). Off by default: the stock behaviour is what is tested.
7. Output type f32 by default (`--outtype f32` of the converter), so llama.cpp computes in
   float32 and is compared with the fp32 tolerance tier; bf16 / f16 on request.
8. --outtype q8_0 on a checkpoint with Q8_0 pairs (qwen-conform's convention, docs/qwen35-
   model.md 3.3: I8 `X.weight` [out, in] + F16 `X.weight_scale` [out, in/32]): the stock
   converter knows no such pair (no quantization_config), so each pair is joined in
   ModelBase.dequant_model into the float32 weight d * q (exact: 7 + 11 bits) and forced to
   Q8_0 through tensor_force_quant -- the converter's own `--fp8-as-q8` mechanism -- while the
   converter runs with the checkpoint's float type as --outtype (config.json dtype: bfloat16
   -> bf16, float16 -> f16, float32 -> f32), so every other tensor (embedding, tied output,
   norms, conv1d) is what that float conversion writes; general.file_type says MOSTLY_Q8_0.
   The converter's Q8_0 (gguf-py quants.Q8_0, "bit-exact with ggml-quants.c") of a block
   d * q with max|q| = 127 gives back d (= 127 d / 127, exact in float32) and q (q d * fl(1/d)
   is within 2^-22 |q| of q): the GGUF holds the checkpoint's own 34-byte blocks {f16 d;
   int8 q[32]} (ci/bench-llamacpp checks it, ci/q8_blocks.py). A checkpoint without pairs and
   --outtype q8_0 is the stock Q8_0 conversion (the converter quantizes every 2-D weight,
   embedding included, with its formula: d = f16(amax / 127), q = round-half-away(x / (amax /
   127)) -- not qcgolden's round-half-even of x / f16(d), so not the same blocks).

Exit status: the converter's (0 on success); its log goes to stderr. Nothing is written except
OUT.gguf (the converter writes it; on failure a partial file is removed).
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import struct
import sys
import types

CONVERTER_VERSION = "qc_convert 1"


def _safetensors_names(model_dir: str) -> list[str]:
    """Tensor names of every *.safetensors file in model_dir (from the headers only)."""
    names: list[str] = []
    for fn in sorted(os.listdir(model_dir)):
        if not fn.endswith(".safetensors"):
            continue
        with open(os.path.join(model_dir, fn), "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                continue
            (n,) = struct.unpack("<Q", raw)
            if n > 100 * 1024 * 1024:
                continue
            try:
                hdr = json.loads(f.read(n))
            except ValueError:
                continue
        names.extend(k for k in hdr if k != "__metadata__")
    return names


def mtp_tensors_present(model_dir: str) -> bool:
    """Whether any safetensors file of model_dir holds an mtp.* (or model.mtp.*) tensor."""
    return any(n.startswith(("mtp.", "model.mtp.")) for n in _safetensors_names(model_dir))


def _install_transformers_stub() -> None:
    mod = types.ModuleType("transformers")

    class _Unavailable:
        @classmethod
        def from_pretrained(cls, *args, **kwargs):
            raise OSError("transformers is not installed here (qc_convert stub); "
                          "reading config.json directly")

    class AutoConfig(_Unavailable):
        pass

    class AutoTokenizer(_Unavailable):
        pass

    mod.AutoConfig = AutoConfig
    mod.AutoTokenizer = AutoTokenizer
    mod.__qc_stub__ = True
    sys.modules["transformers"] = mod


def _install_float8_aliases(torch) -> None:
    class _MissingDtype:
        def __init__(self, name: str):
            self.name = name

        def __repr__(self) -> str:
            return f"<{self.name}: not available in torch {torch.__version__} (qc_convert placeholder)>"

    for name in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, name):
            setattr(torch, name, _MissingDtype(name))


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable-symbol table (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def dummy_vocab(vocab_size: int) -> tuple[list[str], list[str]]:
    """Exactly vocab_size distinct byte-level BPE tokens and one merge."""
    b2u = _bytes_to_unicode()
    order = [ord("\n"), ord(" ")] + [b for b in range(256) if b not in (ord("\n"), ord(" "))]
    tokens = [b2u[b] for b in order][:vocab_size]
    i = 0
    while len(tokens) < vocab_size:
        tokens.append(f"<dummy_{i}>")
        i += 1
    merges = [f"{tokens[1]} {tokens[1]}"] if vocab_size >= 2 else []
    return tokens, merges


Q8_SCALE = ".weight_scale"   # X.weight (I8) + X.weight_scale (F16): qwen-conform's Q8_0 pair
FLOAT_OUTTYPE = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}


def q8_pairs(model_dir: str) -> list[str]:
    """The weight names (as in the files) that have an X.weight_scale next to them."""
    names = set(_safetensors_names(model_dir))
    return sorted(n[:-len("_scale")] for n in names
                  if n.endswith(Q8_SCALE) and n[:-len("_scale")] in names)


def _patch_q8_pairs(torch, gguf, conversion_base) -> None:
    """Workaround 8: the pairs dequantized (exact) and forced back to Q8_0."""
    ModelBase = conversion_base.ModelBase
    orig_dequant = ModelBase.dequant_model
    orig_force = ModelBase.tensor_force_quant

    def dequant_q8_pairs(self):
        self._qc_q8 = set()
        for sname in [n for n in self.model_tensors if n.endswith(Q8_SCALE)]:
            wname = sname[:-len("_scale")]
            if wname not in self.model_tensors:
                continue
            w, s = self.model_tensors[wname], self.model_tensors.pop(sname)

            def joined(w=w, s=s, wname=wname):
                q, d = w(), s()
                if q.dtype != torch.int8 or d.dtype != torch.float16 or q.ndim != 2 \
                        or tuple(d.shape) != (q.shape[0], q.shape[1] // 32) or q.shape[1] % 32:
                    raise ValueError(f"qc_convert: {wname}: a Q8_0 pair is I8 [out, in] + F16 "
                                     f"[out, in/32], not {q.dtype} {list(q.shape)} + "
                                     f"{d.dtype} {list(d.shape)}")
                rows, nb = q.shape[0], q.shape[1] // 32   # (reshape: the lazy meta tensors
                return (q.float().reshape(rows, nb, 32)   # have no repeat_interleave)
                        * d.float().reshape(rows, nb, 1)).reshape(rows, nb * 32)
            self.model_tensors[wname] = joined
            self._qc_q8.add(wname)
        conversion_base.logger.info(f"qc_convert: {len(self._qc_q8)} Q8_0 pairs (I8 + F16 "
                                    "scale) dequantized, written as Q8_0")
        return orig_dequant(self)

    def force_q8(self, name, new_name, bid, n_dims):
        if name in getattr(self, "_qc_q8", ()) and n_dims == 2:
            return gguf.GGMLQuantizationType.Q8_0
        return orig_force(self, name, new_name, bid, n_dims)

    ModelBase.dequant_model = dequant_q8_pairs
    ModelBase.tensor_force_quant = force_q8
    orig_file_type = gguf.GGUFWriter.add_file_type
    gguf.GGUFWriter.add_file_type = \
        lambda self, ftype: orig_file_type(self, gguf.LlamaFileType.MOSTLY_Q8_0)


def _patch_converter(torch, gguf, conversion_base) -> None:
    TextModel = conversion_base.TextModel

    def _set_vocab_dummy(self) -> None:
        vocab_size = int(self.hparams["vocab_size"])
        tokens, merges = dummy_vocab(vocab_size)
        self.gguf_writer.add_tokenizer_model("gpt2")
        self.gguf_writer.add_tokenizer_pre("default")
        self.gguf_writer.add_token_list(tokens)
        self.gguf_writer.add_token_types([gguf.TokenType.NORMAL] * vocab_size)
        if merges:
            self.gguf_writer.add_token_merges(merges)
        conversion_base.logger.info(f"qc_convert: dummy BPE vocabulary of {vocab_size} tokens")

    TextModel._set_vocab_gpt2 = _set_vocab_dummy

    # F16 -> F32 on read (torch 1.13 CPU has no exp for Half): every path reads the checkpoint
    # through ModelBase.get_tensors.
    orig_get_tensors = conversion_base.ModelBase.get_tensors

    def get_tensors_upcast(self):
        for name, data in orig_get_tensors(self):
            if getattr(data, "dtype", None) == torch.float16:
                data = data.to(torch.float32)
            yield name, data

    conversion_base.ModelBase.get_tensors = get_tensors_upcast


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-src", required=True, help="llama.cpp source tree (v0.5.0)")
    ap.add_argument("--outtype", choices=["f32", "bf16", "f16", "q8_0"], default="f32")
    ap.add_argument("--mtp", choices=["auto", "keep", "drop"], default="auto")
    ap.add_argument("--mrope-section", choices=["stock", "auto"], default="stock")
    ap.add_argument("--version", action="version", version=CONVERTER_VERSION)
    ap.add_argument("model_dir")
    ap.add_argument("outfile")
    args = ap.parse_args(argv)

    src = os.path.abspath(args.llama_src)
    script = os.path.join(src, "convert_hf_to_gguf.py")
    if not os.path.isfile(script):
        print(f"qc_convert: {script}: not found (run ci/llamacpp setup)", file=sys.stderr)
        return 2
    cfg_path = os.path.join(args.model_dir, "config.json")
    try:
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        print(f"qc_convert: {cfg_path}: {e}", file=sys.stderr)
        return 2
    text_cfg = {**cfg, **cfg.get("text_config", {})}

    import torch  # noqa: E402  (after argument checks: slow import)

    _install_transformers_stub()
    _install_float8_aliases(torch)
    sys.path.insert(0, src)
    sys.path.insert(1, os.path.join(src, "gguf-py"))
    import gguf  # noqa: E402
    import conversion.base as conversion_base  # noqa: E402

    _patch_converter(torch, gguf, conversion_base)
    outtype = args.outtype
    if outtype == "q8_0" and q8_pairs(args.model_dir):
        dt = str(text_cfg.get("dtype") or text_cfg.get("torch_dtype") or "bfloat16")
        outtype = FLOAT_OUTTYPE.get(dt, "bf16")
        _patch_q8_pairs(torch, gguf, conversion_base)
        print(f"qc_convert: {len(q8_pairs(args.model_dir))} Q8_0 pairs: kept as Q8_0 blocks, "
              f"every other tensor as --outtype {outtype} (config.json dtype {dt})", file=sys.stderr)
    if args.mrope_section == "auto":
        rp = text_cfg.get("rope_parameters") or {}
        if "mrope_section" not in rp:
            hd = text_cfg.get("head_dim") or text_cfg["hidden_size"] // text_cfg["num_attention_heads"]
            prf = rp.get("partial_rotary_factor", text_cfg.get("partial_rotary_factor", 0.25))
            half = int(hd * prf) // 2
            a = -(-half // 3)
            b = -(-(half - a) // 2)
            sections = [a, b, half - a - b, 0]
            import conversion.qwen as conversion_qwen  # noqa: E402
            conversion_qwen._Qwen35MRopeMixin._QWEN35_DEFAULT_MROPE_SECTION = sections
            print(f"qc_convert: no mrope_section in config.json: writing {sections} "
                  f"(sum = rotary dim {2 * half} / 2) instead of the stock [11, 11, 10, 0]",
                  file=sys.stderr)

    conv_argv = [script, args.model_dir, "--outfile", args.outfile, "--outtype", outtype]
    if args.mtp == "drop":
        conv_argv.append("--no-mtp")
    elif args.mtp == "auto" and not mtp_tensors_present(args.model_dir):
        declares = int(text_cfg.get("mtp_num_hidden_layers", 0) or 0)
        print("qc_convert: the checkpoint has no mtp.* tensor (config.json "
              + (f"declares mtp_num_hidden_layers {declares}" if declares else "has no mtp_num_hidden_layers")
              + "): --no-mtp", file=sys.stderr)
        conv_argv.append("--no-mtp")
    print("qc_convert: " + " ".join(conv_argv[1:]), file=sys.stderr)

    sys.argv = conv_argv
    rc = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # the converter's own exception: show it, fail
        import traceback
        traceback.print_exc()
        rc = 1
    if rc != 0 and os.path.exists(args.outfile):
        try:
            os.remove(args.outfile)
        except OSError:
            pass
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
