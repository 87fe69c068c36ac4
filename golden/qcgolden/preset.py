"""Seeded synthetic checkpoints with the REAL Qwen3.5 dimensions (`write-model --preset`).

`qwen-conform bench --synthetic 0.8b` builds its weights in memory; a runtime under test (the
llama.cpp adapter, an exec adapter) loads a checkpoint directory itself. This writes one, in the
real Hugging Face format, with the dimensions of the C presets (runtime/qc_config.c,
qc_config_preset: the same table, checked by golden/tests/test_write_model_preset.py):

  config.json          the fixture writer's config (init.config_json: nested `text_config`,
                       `Qwen3_5ForConditionalGeneration`, rope_parameters with mrope_section),
                       max_position_embeddings 262144 as the preset
  model.safetensors    or model-0000i-of-0000n.safetensors + model.safetensors.index.json when
                       the weights exceed --max-shard-size (default 2 GB) or --shards N is given

`--dtype q8_0`: the 2-D projections of the dense layers (q8_0.quantizable) stored as Q8_0 --
I8 `X.weight` [out, in] + F16 `X.weight_scale` [out, in/32], quantized from the float64 values
by q8_0.quantize block of rows by block of rows (a row is whole in a block, so the bytes are
init.make_weights' with weight_type "q8_0") -- and every other tensor BF16 as `--dtype bf16`
(docs/qwen35-model.md 3.3; the tied embedding, the lm_head of the small presets, stays BF16).

Tensor names, layouts, storage dtypes (BF16 keeps linear_attn.A_log / norm.weight in F32 as
the real checkpoints do) and values are the fixture writer's (init.py: N(0, 1/sqrt(fan_in))
projections, the per-name RandomState streams), generated and written tensor by tensor in
blocks of rows, so the memory stays at a few tens of MB whatever the model size (0.8B F32 is
3.0 GB on disk). For a model both writers can hold, the bytes equal init.write_checkpoint's.

Atomic: every file is first written as <name>.tmp.<pid> in the output directory (fsync'ed),
and only when all are complete renamed into place, config.json last; an error or a signal
leaves no temp file (and no directory that this call created).
"""
import json
import math
import os

import numpy as np

from . import checkpoint
from . import init
from . import q8_0
from . import safetensors

# runtime/qc_config.c qc_config_preset: name -> (H, I, L, nh, nkv, nv, tie, E, topk, Ie, Is)
PRESETS = {
    "0.8b": (1024, 3584, 24, 8, 2, 16, 1, 0, 0, 0, 0),
    "2b": (2048, 6144, 24, 8, 2, 16, 1, 0, 0, 0, 0),
    "4b": (2560, 9216, 32, 16, 4, 32, 1, 0, 0, 0, 0),
    "9b": (4096, 12288, 32, 16, 4, 32, 0, 0, 0, 0, 0),
    "35b-a3b": (2048, 0, 40, 16, 2, 32, 0, 256, 8, 512, 512),
    "122b-a10b": (3072, 0, 48, 32, 2, 64, 0, 256, 8, 1024, 1024),
    "397b-a17b": (4096, 0, 60, 32, 2, 64, 0, 512, 10, 1024, 1024),
    # Qwen3.5-27B (= Qwen3.6-27B = Qwen3.8-27B) and Qwen3.8-2.4T-A95B (docs/qwen35-model.md 2.6)
    "27b": (5120, 17408, 64, 24, 4, 48, 0, 0, 0, 0, 0),
    "2.4t-a95b": (8192, 0, 92, 64, 4, 128, 0, 512, 10, 2048, 2048),
}
# the fields every preset shares (qc_config_preset)
COMMON = dict(vocab_size=248320, head_dim=256, linear_num_key_heads=16, linear_key_head_dim=128,
              linear_value_head_dim=128, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
              rope_theta=1e7, partial_rotary_factor=0.25)
MAX_POSITION_EMBEDDINGS = 262144
# --dtype -> the storage dtype of the float tensors; q8_0 also sets weight_type "q8_0"
DTYPES = {"bf16": "BF16", "f32": "F32", "f16": "F16", "q8_0": "BF16"}
DEFAULT_MAX_SHARD = 2 * 10 ** 9           # bytes of tensor data per shard (2 GB)
CHUNK_ELEMS = 1 << 22                     # rows per block: about 4M values (32 MB float64)


def spec(preset, dtype="bf16", seed=1, layers=None, vocab_size=None):
    """The init.ModelSpec of a preset. layers: keep the first N layers (the real per-layer
    dimensions and pattern, as `bench --layers N`); vocab_size: a smaller vocabulary, for
    tests only (not the preset's dimensions)."""
    if preset not in PRESETS:
        raise KeyError(preset)
    H, I, L, nh, nkv, nv, tie, E, topk, Ie, Is = PRESETS[preset]
    if layers is not None:
        if not 1 <= layers <= L:
            raise ValueError("layers %d: the preset has %d (1..%d)" % (layers, L, L))
        L = layers
    types = [init.qconfig.FULL if (i + 1) % 4 == 0 else init.qconfig.LINEAR for i in range(L)]
    kw = dict(COMMON)
    if vocab_size is not None:
        kw["vocab_size"] = vocab_size
    return init.ModelSpec(
        name="preset-%s" % preset, seed=seed, hidden_size=H, intermediate_size=I,
        layer_types=types, num_attention_heads=nh, num_key_value_heads=nkv,
        linear_num_value_heads=nv, tie_word_embeddings=bool(tie), dtype=DTYPES[dtype],
        weight_type="q8_0" if dtype == "q8_0" else "float",
        nested=True, num_experts=E, num_experts_per_tok=topk, moe_intermediate_size=Ie,
        shared_expert_intermediate_size=Is,
        description="synthetic %s (seed %d)" % (preset, seed), **kw)


def config_json(s):
    """init.config_json with the preset's max_position_embeddings."""
    c = init.config_json(s)
    (c["text_config"] if "text_config" in c else c)["max_position_embeddings"] = \
        MAX_POSITION_EMBEDDINGS
    return c


def config_text(s):
    return (json.dumps(config_json(s), indent=2, sort_keys=True) + "\n").encode("utf-8")


# ------------------------------------------------------------------------------------------------
# Tensors, block by block
# ------------------------------------------------------------------------------------------------

def entries(s):
    """[(file tensor name, canonical name, dtype, shape)] in file order (sorted names), as
    init.make_weights names and stores them (split layout, fused experts, no extras). With
    weight_type "q8_0" a quantizable weight is two entries: (X.weight, n, "I8", [out, in]) and
    (X.weight_scale, n + "_scale", "F16", [out, in/32])."""
    wt = getattr(s, "weight_type", "float")
    if s.legacy_packed or s.extras or (s.num_experts and s.expert_layout != "fused") or \
            wt not in ("float", "q8_0"):
        raise ValueError("streaming writer: float or q8_0 weights, split layout, fused "
                         "experts, no extras only")
    prefix = "model.language_model." if s.nested else "model."
    out = []
    for n, shape in checkpoint.expected_shapes(s.text_config()).items():
        fname = "lm_head.weight" if n == "lm_head.weight" else prefix + n
        shape = tuple(int(d) for d in shape)
        if wt == "q8_0" and q8_0.quantizable(n):
            out.append((fname, n, "I8", shape))
            out.append((fname + q8_0.SCALE_SUFFIX, n + q8_0.SCALE_SUFFIX, "F16",
                        (shape[0], shape[1] // q8_0.BLOCK)))
        else:
            out.append((fname, n, init.storage_dtype(s, n), shape))
    return sorted(out)


def _normal_std(s, name, shape):
    """The standard deviation of init.init_tensor's N(0, std) for a large tensor (one
    rs.normal call over the whole shape), None for any other initialiser."""
    H = s.hidden_size
    if name in ("embed_tokens.weight", "lm_head.weight"):
        return 1.0 / np.sqrt(H)
    if name.endswith("norm.weight") or name.endswith(("conv1d.weight", "dt_bias", "A_log")):
        return None
    if name.endswith("in_proj_a.weight"):
        return 0.5 / np.sqrt(H)
    if name.endswith("mlp.gate.weight"):
        return init.ROUTER_SCALE / np.sqrt(H)
    if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
        return 1.0 / np.sqrt(shape[2])
    if len(shape) == 2:
        return 1.0 / np.sqrt(shape[1])
    return None


def tensor_blocks(s, name, shape, chunk=CHUNK_ELEMS):
    """init.init_tensor(s, name, shape) as consecutive blocks of rows (float64): the same
    values (one RandomState stream drawn in pieces), never the whole tensor in memory."""
    n = int(np.prod(shape))
    std = _normal_std(s, name, shape)
    if n <= chunk or std is None:
        yield init.init_tensor(s, name, shape)
        return
    rs = init._rng(s.seed, name)
    row = n // shape[0]
    step = max(1, chunk // row)
    for r0 in range(0, shape[0], step):
        yield rs.normal(0.0, std, (min(step, shape[0] - r0),) + tuple(shape[1:]))


def entry_blocks(s, name, dtype, shape, scales, chunk=CHUNK_ELEMS):
    """The blocks of rows to write for one entry of entries(s): tensor_blocks, or for a Q8_0
    pair the quants (I8 entry; its scales kept in `scales`, a dict, for the F16 entry that
    follows it in file order) and the scales (taken from `scales`, or computed again from the
    weight's values when its quants were not written through this dict)."""
    if dtype == "I8":
        ds = scales.setdefault(name, [])
        for block in tensor_blocks(s, name, shape, chunk):
            q, d = q8_0.quantize(block)
            ds.append(d)
            yield q
    elif name.endswith(".weight" + q8_0.SCALE_SUFFIX):
        w = name[:-len(q8_0.SCALE_SUFFIX)]
        if w in scales:
            yield from scales.pop(w)
        else:
            for block in tensor_blocks(s, w, (shape[0], shape[1] * q8_0.BLOCK), chunk):
                yield q8_0.quantize(block)[1]
    else:
        yield from tensor_blocks(s, name, shape, chunk)


def _nbytes(dtype, shape):
    return int(np.prod(shape)) * safetensors.DTYPE_SIZE[dtype]


def header(group, metadata):
    """The safetensors header bytes for [(file name, canonical, dtype, shape)] (sorted), the
    same bytes as safetensors.serialize writes for those tensors."""
    h, off = {}, 0
    for fname, _, dtype, shape in group:
        nb = _nbytes(dtype, shape)
        h[fname] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + nb]}
        off += nb
    if metadata is not None:
        h["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    raw = json.dumps(h, sort_keys=True, separators=(",", ":")).encode("utf-8")
    raw += b" " * ((8 - len(raw) % 8) % 8)
    return len(raw).to_bytes(8, "little") + raw


def split_shards(ents, n):
    """init._split_shards's grouping, from the byte sizes alone."""
    return init.group_by_size(ents, [_nbytes(d, sh) for _, _, d, sh in ents], n)


def layout(s, shards=None, max_shard_bytes=DEFAULT_MAX_SHARD):
    """[(file name, [entries])]: one model.safetensors, or n shards (shards, or as many as
    max_shard_bytes asks for)."""
    ents = entries(s)
    total = sum(_nbytes(d, sh) for _, _, d, sh in ents)
    n = shards if shards else max(1, math.ceil(total / max_shard_bytes))
    if n <= 1:
        return [("model.safetensors", ents)], total
    groups = split_shards(ents, n)
    return [("model-%05d-of-%05d.safetensors" % (i + 1, len(groups)), g)
            for i, g in enumerate(groups)], total


CHECKPOINT_FILE = ("config.json", "model.safetensors.index.json")


def is_checkpoint_file(n):
    return n in CHECKPOINT_FILE or n.endswith(".safetensors")


def write(s, out_dir, config_bytes=None, shards=None, max_shard_bytes=DEFAULT_MAX_SHARD,
          progress=None):
    """Write the checkpoint of spec s into out_dir (created when missing; the caller decides
    whether an existing checkpoint may be replaced). Old checkpoint files the new one does not
    have (other shards, an index) are removed. Returns the written file names."""
    files, total = layout(s, shards, max_shard_bytes)
    meta = {"format": "pt"}
    suffix = ".tmp.%d" % os.getpid()
    created = not os.path.isdir(out_dir)
    if created:
        os.makedirs(out_dir)
    written = []   # temp files, then renamed
    scales = {}    # Q8_0: weight name -> its scale blocks, until the scale entry is written
    try:
        done_bytes = 0
        for fname, group in files:
            tmp = os.path.join(out_dir, fname + suffix)
            written.append(tmp)
            with open(tmp, "wb") as f:
                f.write(header(group, meta))
                for tname, canon, dtype, shape in group:
                    for block in entry_blocks(s, canon, dtype, shape, scales):
                        f.write(safetensors.encode(block, dtype))
                    done_bytes += _nbytes(dtype, shape)
                    if progress:
                        progress(done_bytes, total)
                f.flush()
                os.fsync(f.fileno())
        names = [f for f, _ in files]
        extra = {}
        if len(files) > 1:
            wm = {t[0]: f for f, g in files for t in g}
            index = {"metadata": {"total_size": total}, "weight_map": wm}
            extra["model.safetensors.index.json"] = \
                (json.dumps(index, indent=2, sort_keys=True) + "\n").encode("utf-8")
        extra["config.json"] = config_bytes if config_bytes is not None else config_text(s)
        for fname in sorted(extra):
            tmp = os.path.join(out_dir, fname + suffix)
            written.append(tmp)
            with open(tmp, "wb") as f:
                f.write(extra[fname])
                f.flush()
                os.fsync(f.fileno())
        names += sorted(extra)
        # all complete: old checkpoint files out of the way, then the new ones in (config last)
        for n in sorted(os.listdir(out_dir)):
            if is_checkpoint_file(n) and n not in names:
                os.unlink(os.path.join(out_dir, n))
        for n in sorted(names, key=lambda n: n == "config.json"):
            os.replace(os.path.join(out_dir, n + suffix), os.path.join(out_dir, n))
        return sorted(names)
    except BaseException:
        for t in written:
            try:
                os.unlink(t)
            except OSError:
                pass
        if created:
            try:
                os.rmdir(out_dir)
            except OSError:
                pass
        raise
