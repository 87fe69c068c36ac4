"""Frames of the qwen-conform adapter protocol v1 (docs/adapter-protocol.md), both directions.

A frame is: magic b"QCAP", u32 LE header_len (1 .. 1 MiB), u64 LE payload_len, the JSON header
(UTF-8 object), then the payload: the tensors the header lists under "tensors"
([{"name", "shape"}, ...]), float32 little-endian, row-major, concatenated.
"""
import json
import struct

import numpy as np

MAGIC = b"QCAP"
PREFIX = struct.Struct("<4sIQ")          # magic, header_len, payload_len
MAX_HEADER = 1 << 20
MAX_PAYLOAD = 1 << 40                    # sanity bound on what a reader will try to read
F32 = np.dtype("<f4")
I32 = np.dtype("<i4")


def _is_i32(a):
    return isinstance(a, np.ndarray) and a.dtype.kind == "i" and a.dtype.itemsize == 4


class ProtocolError(Exception):
    """A frame that breaks the framing rules (bad magic, bad JSON, truncated, size mismatch)."""


def _read_exact(stream, n):
    """n bytes from stream; b"" at a clean EOF before the first byte; ProtocolError if cut."""
    chunks, got = [], 0
    while got < n:
        b = stream.read(n - got)
        if not b:
            if got == 0:
                return b""
            raise ProtocolError("truncated frame: got %d of %d bytes" % (got, n))
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def read_frame(stream):
    """(header dict, payload bytes) of the next frame, or None at a clean EOF."""
    prefix = _read_exact(stream, PREFIX.size)
    if not prefix:
        return None
    if len(prefix) != PREFIX.size:
        raise ProtocolError("truncated frame prefix")
    magic, hlen, plen = PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise ProtocolError("bad magic %r (expected %r)" % (magic, MAGIC))
    if not 1 <= hlen <= MAX_HEADER:
        raise ProtocolError("header_len %d outside 1 .. %d" % (hlen, MAX_HEADER))
    if plen > MAX_PAYLOAD:
        raise ProtocolError("payload_len %d is absurd" % plen)
    raw = _read_exact(stream, hlen)
    if len(raw) != hlen:
        raise ProtocolError("truncated header")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError("header is not UTF-8 JSON: %s" % e)
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    payload = _read_exact(stream, plen) if plen else b""
    if len(payload) != plen:
        raise ProtocolError("truncated payload")
    return header, payload


def encode_frame(header, tensors=()):
    """The bytes of one frame. tensors: [(name, array)], sent as float32 LE in that order (an
    int32 numpy array as int32 LE: the top-k ids of a topk_only answer); their
    names and shapes are added to the header as "tensors" (the header dict is not modified)."""
    header = dict(header)
    arrays = [(name, np.ascontiguousarray(a, dtype=I32 if _is_i32(a) else F32))
              for name, a in tensors]
    if arrays:
        header["tensors"] = [{"name": n, "shape": [int(d) for d in a.shape]} for n, a in arrays]
    raw = json.dumps(header, allow_nan=False, separators=(",", ":")).encode("utf-8")
    payload = b"".join(a.tobytes() for _, a in arrays)
    return PREFIX.pack(MAGIC, len(raw), len(payload)) + raw + payload


def write_frame(stream, header, tensors=()):
    """Write one frame and flush."""
    stream.write(encode_frame(header, tensors))
    stream.flush()


def decode_tensors(header, payload):
    """{name: float32 array (topk_ids, router_ids: int32)} from a frame's header "tensors" list and payload
    (in order);
    ProtocolError when payload_len is not 4 x the listed element count."""
    specs = header.get("tensors", [])
    if not isinstance(specs, list):
        raise ProtocolError("\"tensors\" is not a list")
    out, off = {}, 0
    for s in specs:
        try:
            name, shape = s["name"], tuple(int(d) for d in s["shape"])
        except (TypeError, KeyError, ValueError):
            raise ProtocolError("bad tensor entry %r" % (s,))
        if any(d < 0 for d in shape):
            raise ProtocolError("tensor %s: negative dimension in %s" % (name, shape))
        n = 4 * int(np.prod(shape, dtype=np.int64))
        if off + n > len(payload):
            raise ProtocolError("payload of %d bytes is shorter than the tensors listed"
                                % len(payload))
        dt = I32 if name in ("topk_ids", "router_ids") else F32   # the int32 tensors
        out[name] = (np.frombuffer(payload, dtype=dt, count=n // 4, offset=off).reshape(shape)
                     if n else np.zeros(shape, dtype=dt))
        off += n
    if off != len(payload):
        raise ProtocolError("payload_len %d != %d bytes of the tensors listed" % (len(payload), off))
    return out
