"""Hand-written safetensors reader / writer (no `safetensors` package).

File format: 8-byte little-endian u64 N, then N bytes of JSON header
{name: {"dtype": D, "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}},
then the raw little-endian tensor bytes; offsets are relative to the end of the header.

Supported dtypes: F32, BF16, F16 (anything else is a clear error), and I8 only as the quants
of a Q8_0 weight `X.weight` next to its `X.weight_scale` in the same file (qcgolden/q8_0.py).
The reader returns numpy float32 arrays (BF16 / F16 / I8 widen exactly), so nothing is lost;
the writer takes float64 or float32 arrays and rounds to the target dtype (round to nearest
even, also for BF16; I8 takes integers in [-128, 127]).
"""
import json
import os
import struct

import numpy as np

DTYPE_SIZE = {"F32": 4, "BF16": 2, "F16": 2, "I8": 1}


class SafetensorsError(ValueError):
    """A malformed or unsupported safetensors file (message names file and tensor)."""


# ------------------------------------------------------------------------------------------------
# BF16 conversions (numpy has no bfloat16)
# ------------------------------------------------------------------------------------------------

def bf16_bits_to_f32(bits):
    """uint16 BF16 bit patterns -> float32 (exact)."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> uint16 BF16 bits, round to nearest even (NaN kept quiet)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounding = np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))
    out = ((u + rounding) >> np.uint64(16)).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = np.uint16(0x7FC0)
    return out


def round_to_dtype(x, dtype):
    """The float32 array of values exactly representable in `dtype` nearest to x."""
    x32 = np.asarray(x, dtype=np.float64).astype(np.float32)
    if dtype == "F32":
        return x32
    if dtype == "F16":
        return x32.astype(np.float16).astype(np.float32)
    if dtype == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(x32))
    raise SafetensorsError("unsupported dtype %r (F32, BF16, F16 only)" % dtype)


def encode(x, dtype):
    """Raw little-endian bytes of x stored as dtype."""
    if dtype == "I8":
        a = np.asarray(x)
        q = a.astype(np.int8)
        if not np.array_equal(q.astype(np.float64), np.asarray(a, dtype=np.float64)):
            raise SafetensorsError("I8: values are not integers in [-128, 127]")
        return q.tobytes()
    x32 = np.asarray(x, dtype=np.float64).astype(np.float32)
    if dtype == "F32":
        return x32.astype("<f4").tobytes()
    if dtype == "F16":
        return x32.astype("<f2").tobytes()
    if dtype == "BF16":
        return f32_to_bf16_bits(x32).astype("<u2").tobytes()
    raise SafetensorsError("unsupported dtype %r (F32, BF16, F16 only)" % dtype)


def decode(buf, dtype, shape):
    """float32 numpy array from raw bytes."""
    if dtype == "F32":
        a = np.frombuffer(buf, dtype="<f4").astype(np.float32)
    elif dtype == "F16":
        a = np.frombuffer(buf, dtype="<f2").astype(np.float32)
    elif dtype == "BF16":
        a = bf16_bits_to_f32(np.frombuffer(buf, dtype="<u2"))
    elif dtype == "I8":
        a = np.frombuffer(buf, dtype=np.int8).astype(np.float32)
    else:
        raise SafetensorsError("unsupported dtype %r" % dtype)
    return a.reshape(shape)


# ------------------------------------------------------------------------------------------------
# Reader
# ------------------------------------------------------------------------------------------------

def read_header(path):
    """(header dict, data offset, file size) with every entry validated."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise SafetensorsError("%s: file shorter than the 8-byte header length" % path)
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise SafetensorsError("%s: header length %d exceeds file size %d" % (path, n, size))
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError("%s: header is not valid JSON: %s" % (path, e))
    if not isinstance(header, dict):
        raise SafetensorsError("%s: header is not a JSON object" % path)
    data_start = 8 + n
    spans = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(e, dict) or not {"dtype", "shape", "data_offsets"} <= set(e):
            raise SafetensorsError("%s: %s: entry lacks dtype/shape/data_offsets" % (path, name))
        if e["dtype"] not in DTYPE_SIZE:
            raise SafetensorsError("%s: %s: unsupported dtype %s (F32, BF16, F16 only)"
                                   % (path, name, e["dtype"]))
        if e["dtype"] == "I8" and (not name.endswith(".weight") or name + "_scale" not in header):
            raise SafetensorsError("%s: %s: unsupported dtype I8 (only as a Q8_0 weight next to "
                                   "its %s_scale)" % (path, name, name))
        b, en = e["data_offsets"]
        count = 1
        for d in e["shape"]:
            count *= int(d)
        if en - b != count * DTYPE_SIZE[e["dtype"]]:
            raise SafetensorsError("%s: %s: byte span %d != shape %s x %d"
                                   % (path, name, en - b, e["shape"], DTYPE_SIZE[e["dtype"]]))
        if b < 0 or data_start + en > size:
            raise SafetensorsError("%s: %s: data_offsets [%d,%d] outside the file"
                                   % (path, name, b, en))
        spans.append((b, en, name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise SafetensorsError("%s: %s overlaps %s" % (path, n1, n0))
    return header, data_start, size


def read(path):
    """{name: (dtype string, float32 numpy array)} for every tensor of the file."""
    header, data_start, _ = read_header(path)
    out = {}
    with open(path, "rb") as f:
        for name, e in header.items():
            if name == "__metadata__":
                continue
            b, en = e["data_offsets"]
            f.seek(data_start + b)
            out[name] = (e["dtype"], decode(f.read(en - b), e["dtype"], e["shape"]))
    return out


# ------------------------------------------------------------------------------------------------
# Writer (byte-deterministic)
# ------------------------------------------------------------------------------------------------

def serialize(tensors, metadata=None):
    """bytes of a safetensors file. tensors: list of (name, dtype, array) in any order; the data
    region follows the sorted name order, the header JSON has sorted keys, no spaces, and is
    padded with spaces to a multiple of 8 bytes (as the reference implementation does)."""
    header = {}
    blobs = []
    offset = 0
    for name, dtype, arr in sorted(tensors, key=lambda t: t[0]):
        blob = encode(arr, dtype)
        header[name] = {"dtype": dtype, "shape": [int(d) for d in np.shape(arr)],
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    raw = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    raw += b" " * ((8 - len(raw) % 8) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"".join(blobs)


def write(path, tensors, metadata=None):
    """Write atomically (temp file + rename)."""
    data = serialize(tensors, metadata)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return len(data)
