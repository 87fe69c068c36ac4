"""Lazy checkpoint reader for the streamed golden generation (stream.py): one layer at a time,
embedding rows by token id, lm_head rows in blocks — never a whole weight file in memory.

Why: checkpoint.load() holds every tensor in float64 (8 bytes per parameter); a real-size model
does not fit. Here only the headers are parsed up front (safetensors.read_header validates
framing, dtypes, spans and overlaps) and checked against the config on shapes alone: the same
canonical names, the same "unknown / missing / shape" errors as checkpoint.load, Q8_0 pairs,
the legacy packed layout and the per-expert MoE layout. Tensor bytes are then read with
os.preadv at their spans when needed, and turned into float64 by the very same steps as
checkpoint.load (safetensors.decode, q8_0.join_pairs, checkpoint.split_legacy,
checkpoint.fuse_experts, np.asarray(float64)), so every value is bit-identical to the
in-memory model's. A non-finite value is reported as cmd_generate reports it.
"""
import os
from collections import namedtuple

import numpy as np
import torch

from . import checkpoint
from . import q8_0
from . import safetensors

# A tensor of a weight file: canonical name, file path, file name, dtype, shape, absolute span.
Entry = namedtuple("Entry", "canonical path name dtype shape begin end")


class LazyWeights:
    """The tensors of a checkpoint by canonical name, read on demand (see the module doc).
    Raises checkpoint.CheckpointError / safetensors.SafetensorsError like checkpoint.load."""

    def __init__(self, model_dir, cfg):
        self.model_dir, self.cfg = model_dir, cfg
        self.entries = _entries(model_dir)
        self._check_shapes()
        self._fds = {}

    def close(self):
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}

    # --------------------------------------------------------------------------------------------
    # Reading bytes
    # --------------------------------------------------------------------------------------------

    def _read(self, e, offset=0, n=None):
        """n bytes of entry e from byte offset (default: all of it)."""
        fd = self._fds.get(e.path)
        if fd is None:
            fd = self._fds[e.path] = os.open(e.path, os.O_RDONLY)
        n = e.end - e.begin - offset if n is None else n
        buf = bytearray(n)
        mv, got = memoryview(buf), 0
        while got < n:
            k = os.preadv(fd, [mv[got:]], e.begin + offset + got)
            if k <= 0:
                raise safetensors.SafetensorsError("%s: %s: file ends inside the tensor data"
                                                   % (e.path, e.name))
            got += k
        return buf

    def _raw(self, c):
        """(dtype, float32 array) of a whole stored tensor (safetensors.read's values)."""
        e = self.entries[c]
        return e.dtype, safetensors.decode(self._read(e), e.dtype, e.shape)

    def _raw_rows(self, c, r0, r1):
        """float32 rows r0 .. r1-1 of a stored 2-D tensor."""
        e = self.entries[c]
        row = int(np.prod(e.shape[1:], dtype=np.int64)) * safetensors.DTYPE_SIZE[e.dtype]
        buf = self._read(e, r0 * row, (r1 - r0) * row)
        return safetensors.decode(buf, e.dtype, [r1 - r0] + list(e.shape[1:]))

    # --------------------------------------------------------------------------------------------
    # Tensors as the model uses them (float64 torch, checkpoint.load's values)
    # --------------------------------------------------------------------------------------------

    def layer(self, i):
        """{canonical name: float64 tensor} of layer i, through checkpoint.load's steps."""
        p = "layers.%d." % i
        raw, where, dtypes = {}, {}, {}
        for c in self.entries:
            if c.startswith(p):
                dtypes[c], raw[c] = self._raw(c)
                where[c] = self.entries[c].path
        try:
            q8_0.join_pairs(raw, where, dtypes)
        except ValueError as e:
            raise checkpoint.CheckpointError(str(e))
        checkpoint.split_legacy(raw, where, self.cfg)
        if self.cfg.is_moe:
            checkpoint.fuse_experts(raw, where, self.cfg, self.model_dir)
        expected = {c: s for c, s in checkpoint.expected_shapes(self.cfg).items()
                    if c.startswith(p)}
        _check_expected(raw, where, expected, self.model_dir)
        out = {}
        for c in sorted(raw):
            out[c] = torch.from_numpy(np.asarray(raw.pop(c), dtype=np.float64))
            self.check_finite(c, out[c])
        return out

    def small(self, c):
        """A whole non-layer tensor (norm.weight) as float64."""
        t = torch.from_numpy(np.asarray(self._raw(c)[1], dtype=np.float64))
        self.check_finite(c, t)
        return t

    def rows(self, c, r0, r1):
        """Rows r0 .. r1-1 of embed_tokens.weight / lm_head.weight as float64 (an untied Q8_0
        lm_head dequantized row-wise: the same products as q8_0.dequantize of the whole)."""
        stored = c
        if c == "lm_head.weight" and self.cfg.tie_word_embeddings:
            stored = "embed_tokens.weight"
        a = self._raw_rows(stored, r0, r1)
        scale = stored + q8_0.SCALE_SUFFIX
        if scale in self.entries:
            a = q8_0.dequantize(a, self._raw_rows(scale, r0, r1))
        t = torch.from_numpy(np.asarray(a, dtype=np.float64))
        self.check_finite(stored, t, r0)
        return t

    def gather_rows(self, c, ids):
        """(table float64 [n, H], index [T]) with table[index] == the rows ids of tensor c: the
        distinct ids ascending, read as runs of consecutive rows."""
        uniq, index = np.unique(np.asarray(ids, dtype=np.int64), return_inverse=True)
        parts, start = [], 0
        for k in range(1, len(uniq) + 1):
            if k == len(uniq) or uniq[k] != uniq[k - 1] + 1:
                parts.append(self.rows(c, int(uniq[start]), int(uniq[k - 1]) + 1))
                start = k
        return torch.cat(parts), torch.as_tensor(index.reshape(-1))

    def check_finite(self, name, t, row0=0):
        """cmd_generate's error for a non-finite weight value (row index offset by row0)."""
        bad = ~torch.isfinite(t)
        if bool(bad.any()):
            idx = [int(i) for i in bad.nonzero()[0]]
            idx[0] += row0
            raise checkpoint.CheckpointError(
                "%s: tensor %s has a non-finite value (%s) at index %s"
                % (self.model_dir, name, float(t[tuple(bad.nonzero()[0])]), tuple(idx)))

    # --------------------------------------------------------------------------------------------
    # Up-front check on the headers alone
    # --------------------------------------------------------------------------------------------

    def _check_shapes(self):
        """checkpoint.load's name and shape checks on header shapes (no tensor data read)."""
        cfg, ent = self.cfg, self.entries
        shapes = {c: tuple(e.shape) for c, e in ent.items()}
        where = {c: e.path for c, e in ent.items()}
        _q8_shapes(shapes, where, ent)
        for c in sorted(shapes):
            if c.endswith("linear_attn.in_proj_qkvz.weight"):
                want = (2 * cfg.key_dim + 2 * cfg.value_dim, cfg.hidden_size)
                new = {"in_proj_qkv.weight": (cfg.conv_dim, cfg.hidden_size),
                       "in_proj_z.weight": (cfg.value_dim, cfg.hidden_size)}
            elif c.endswith("linear_attn.in_proj_ba.weight"):
                want = (2 * cfg.linear_num_value_heads, cfg.hidden_size)
                new = {"in_proj_b.weight": (cfg.linear_num_value_heads, cfg.hidden_size),
                       "in_proj_a.weight": (cfg.linear_num_value_heads, cfg.hidden_size)}
            else:
                continue
            if shapes[c] != want:
                raise checkpoint.CheckpointError("%s: %s: shape %s != %s"
                                                 % (where[c], c, list(shapes[c]), list(want)))
            p = c[:c.rindex("in_proj_")]
            for n, s in new.items():
                shapes[p + n], where[p + n] = s, where[c]
            del shapes[c]
        if cfg.is_moe:
            _expert_shapes(shapes, where, cfg)
        if cfg.tie_word_embeddings:
            shapes.pop("lm_head.weight", None)
        _check_expected(shapes, where, checkpoint.expected_shapes(cfg), self.model_dir)


def _entries(model_dir):
    """{canonical name: Entry} of every text tensor of the checkpoint's weight files."""
    out = {}
    for path in checkpoint.weight_files(model_dir):
        header, data_start, _ = safetensors.read_header(path)
        for name, e in header.items():
            if name == "__metadata__":
                continue
            c = checkpoint.canonical_name(name)
            if c is None:
                continue
            if c in out:
                raise checkpoint.CheckpointError("%s: %s: duplicate tensor (also in %s)"
                                                 % (path, name, out[c].path))
            b, en = e["data_offsets"]
            out[c] = Entry(c, path, name, e["dtype"], [int(d) for d in e["shape"]],
                           data_start + b, data_start + en)
    return out


def _q8_shapes(shapes, where, ent):
    """q8_0.join_pairs on shapes: every X.weight_scale leaves (checked), a lone I8 is an error."""
    for c in sorted(n for n in shapes if n.endswith(".weight" + q8_0.SCALE_SUFFIX)):
        w = c[:-len(q8_0.SCALE_SUFFIX)]
        if w not in shapes:
            raise checkpoint.CheckpointError("%s: %s: a Q8_0 scale without its weight %s"
                                             % (where[c], c, w))
        if ent[w].dtype != "I8" or ent[c].dtype != "F16" or not q8_0.quantizable(w):
            raise checkpoint.CheckpointError("%s: %s: not a Q8_0 pair (I8 weight %s of a "
                                             "dense projection or an untied lm_head, F16 scale)"
                                             % (where[c], c, w))
        q, d = shapes[w], shapes.pop(c)
        if len(q) != 2 or q[1] % q8_0.BLOCK or d != (q[0], q[1] // q8_0.BLOCK):
            raise checkpoint.CheckpointError("%s: %s: Q8_0: scale shape %s does not fit weight "
                                             "shape %s" % (where[c], c, list(d), list(q)))
    for n in sorted(shapes):
        if ent[n].dtype == "I8" and n + q8_0.SCALE_SUFFIX not in ent:
            raise checkpoint.CheckpointError("%s: %s: dtype I8 without its %s%s"
                                             % (where[n], n, n, q8_0.SCALE_SUFFIX))


def _expert_shapes(shapes, where, cfg):
    """checkpoint.fuse_experts on shapes: a layer's complete per-expert set becomes the fused
    tensors (an incomplete or mixed set is left to the expected-shape check and, in detail, to
    fuse_experts when the layer is read)."""
    E, H, Ie = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
    for i in range(cfg.num_hidden_layers):
        p = "layers.%d.mlp." % i
        names = [checkpoint.per_expert_name(p, e, w) for e in range(E)
                 for w in checkpoint.PER_EXPERT]
        if not all(n in shapes for n in names):
            continue
        fused = checkpoint.moe_shapes(cfg, p)
        if any(n in shapes for n in (p + "experts.gate_up_proj", p + "experts.down_proj")):
            continue
        src = where[names[0]]
        for n in names:
            want = (H, Ie) if n.endswith("down_proj.weight") else (Ie, H)
            if shapes[n] != want:
                raise checkpoint.CheckpointError("%s: %s: shape %s != %s"
                                                 % (where[n], n, list(shapes[n]), list(want)))
            del shapes[n], where[n]
        for n in (p + "experts.gate_up_proj", p + "experts.down_proj"):
            shapes[n], where[n] = fused[n], src


def _check_expected(have, where, expected, model_dir):
    """checkpoint.load's final check: unknown tensors, shapes, missing tensors (have: canonical
    name -> array or shape tuple)."""
    for c in sorted(have):
        shape = tuple(have[c]) if isinstance(have[c], tuple) else tuple(have[c].shape)
        if c not in expected:
            raise checkpoint.CheckpointError("%s: %s: unknown tensor" % (where[c], c))
        if shape != expected[c]:
            raise checkpoint.CheckpointError("%s: %s: shape %s != %s"
                                             % (where[c], c, list(shape), list(expected[c])))
    missing = sorted(set(expected) - set(have))
    if missing:
        raise checkpoint.CheckpointError(
            "%s: missing tensor %s%s" % (model_dir, missing[0], " (and %d more)"
                                         % (len(missing) - 1) if len(missing) > 1 else ""))
