#!/usr/bin/env python3
"""ci/q8_blocks.py — are a GGUF's Q8_0 tensors made of a checkpoint's own Q8_0 blocks?

  q8_blocks.py --gguf-py DIR CKPT_DIR MODEL.gguf

CKPT_DIR is a safetensors checkpoint in qwen-conform's Q8_0 convention (docs/qwen35-model.md
3.3: I8 `X.weight` [out, in] + F16 `X.weight_scale` [out, in/32]); MODEL.gguf its conversion
(adapters/llamacpp/qc_convert.py --outtype q8_0); DIR llama.cpp's gguf-py (the pinned source's,
<cache>/llamacpp/src/gguf-py), whose GGUFReader reads the GGUF.

Each checkpoint pair gives rows of llama.cpp blocks, 34 bytes each: f16 d (little-endian)
then int8 q[32] -- the layout of ggml's block_q8_0 -- built from the two tensors' bytes. Each
Q8_0 tensor of the GGUF gives its rows as stored. The converter renames tensors, may fuse
q/k/v and reorders value heads by whole rows or by 128-column head blocks, so the comparison
is by rows, not by name: the multiset of the GGUF's Q8_0 rows must be the multiset of the
checkpoint's rows, byte for byte (every block identical, none missing, none extra). Printed:
one line per GGUF Q8_0 tensor (its rows found in which checkpoint tensor) and a summary.

Exit 0: identical. 1: a row differs / is missing / is extra (the first ones are named, with
the blocks that differ from the nearest checkpoint row of the same tensor). 2: bad input
(named: a file, a header, a pair that is not I8 + F16 [out, in/32]).
"""
import argparse
import collections
import hashlib
import json
import os
import struct
import sys

import numpy as np

BLOCK = 32
BLOCK_BYTES = 2 + BLOCK


def die(msg):
    print(f"ci/q8_blocks.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def st_tensors(ckpt):
    """{name: (dtype, shape, memmap of its bytes)} over every *.safetensors of ckpt"""
    out = {}
    files = sorted(f for f in os.listdir(ckpt) if f.endswith(".safetensors"))
    if not files:
        die(f"{ckpt}: no *.safetensors file")
    for fn in files:
        path = os.path.join(ckpt, fn)
        try:
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                hdr = json.loads(f.read(n))
        except (OSError, ValueError, struct.error) as e:
            die(f"{path}: unreadable safetensors header: {e}")
        data = np.memmap(path, dtype=np.uint8, mode="r")
        for name, e in hdr.items():
            if name == "__metadata__":
                continue
            a, b = e["data_offsets"]
            out[name] = (e["dtype"], tuple(e["shape"]), data[8 + n + a:8 + n + b])
    return out


def pair_blocks(wb, sb, rows, nb):
    """uint8 [rows, nb, 34]: the pair's llama.cpp blocks {f16 d; int8 q[32]}"""
    blocks = np.empty((rows, nb, BLOCK_BYTES), dtype=np.uint8)
    blocks[:, :, :2] = np.asarray(sb).reshape(rows, nb, 2)
    blocks[:, :, 2:] = np.asarray(wb).reshape(rows, nb, BLOCK)
    return blocks


def ckpt_rows(ckpt):
    """{row digest: [tensor name, ...]} and {tensor name: (I8 bytes, F16 bytes, rows, blocks
    per row)} of the Q8_0 pairs (the blocks are built one tensor at a time: 0.8B holds 0.5 GB)"""
    ts = st_tensors(ckpt)
    rows = collections.defaultdict(list)
    pairs = {}
    for sname in sorted(n for n in ts if n.endswith(".weight_scale")):
        wname = sname[:-len("_scale")]
        if wname not in ts:
            die(f"{ckpt}: {sname}: a scale without its weight {wname}")
        (wdt, wsh, wb), (sdt, ssh, sb) = ts[wname], ts[sname]
        if wdt != "I8" or sdt != "F16" or len(wsh) != 2 or wsh[1] % BLOCK \
                or ssh != (wsh[0], wsh[1] // BLOCK):
            die(f"{ckpt}: {wname}: {wdt} {list(wsh)} + {sdt} {list(ssh)} is not a Q8_0 pair "
                f"(I8 [out, in] + F16 [out, in/32])")
        nb = wsh[1] // BLOCK
        blocks = pair_blocks(wb, sb, wsh[0], nb)
        for r in range(wsh[0]):
            rows[hashlib.blake2b(blocks[r].tobytes(), digest_size=16).digest()].append(wname)
        pairs[wname] = (wb, sb, wsh[0], nb)
    if not pairs:
        die(f"{ckpt}: no Q8_0 pair (X.weight I8 + X.weight_scale F16)")
    return rows, pairs


def gguf_q8(gguf_py, path):
    """[(name, uint8 [rows, row bytes])] of the GGUF's Q8_0 tensors, and {name: type} of the others"""
    sys.path.insert(0, gguf_py)
    try:
        import gguf
    except ImportError as e:
        die(f"--gguf-py {gguf_py}: cannot import gguf: {e}")
    try:
        rd = gguf.GGUFReader(path)
    except (OSError, ValueError) as e:
        die(f"{path}: not a readable GGUF: {e}")
    q8, other = [], {}
    for t in rd.tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.Q8_0:
            a = np.asarray(t.data, dtype=np.uint8)
            q8.append((t.name, a.reshape(-1, a.shape[-1])))
        else:
            other[t.name] = t.tensor_type.name
    return q8, other


def nearest(pairs, row):
    """(tensor, row index, blocks that differ, bytes that differ) of the checkpoint row of the
    same length with the fewest differing bytes"""
    best = None
    nb = row.size // BLOCK_BYTES
    r = row.reshape(nb, BLOCK_BYTES)
    for name, (wb, sb, rows, n) in pairs.items():
        if n != nb:
            continue
        ne = pair_blocks(wb, sb, rows, n) != r[None]
        nbytes = ne.sum(axis=(1, 2))
        i = int(nbytes.argmin())
        if best is None or nbytes[i] < best[3]:
            best = (name, i, int(ne[i].any(axis=1).sum()), int(nbytes[i]))
    return best


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py directory")
    ap.add_argument("ckpt")
    ap.add_argument("gguf")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.ckpt):
        die(f"{a.ckpt}: not a directory")
    rows, pairs = ckpt_rows(a.ckpt)
    q8, other = gguf_q8(a.gguf_py, a.gguf)
    if not q8:
        die(f"{a.gguf}: no Q8_0 tensor")
    left = collections.Counter({k: len(v) for k, v in rows.items()})
    bad, nrows, nblocks = [], 0, 0
    for name, t in q8:
        srcs = collections.Counter()
        for i in range(t.shape[0]):
            k = hashlib.blake2b(t[i].tobytes(), digest_size=16).digest()
            if left[k] > 0:
                left[k] -= 1
                srcs[rows[k][0]] += 1
            else:
                bad.append((name, i, t[i]))
        nrows += t.shape[0]
        nblocks += t.size // BLOCK_BYTES
        print(f"  {name:28s} Q8_0 {t.shape[0]} rows x {t.shape[1] // BLOCK_BYTES} blocks <- "
              + (", ".join(f"{n} ({c})" for n, c in sorted(srcs.items())) or "none"))
    extra = sum(left.values())
    ck_rows = sum(p[2] for p in pairs.values())
    print(f"  other GGUF tensors: " + ", ".join(f"{t} x{c}" for t, c in
                                               sorted(collections.Counter(other.values()).items())))
    if bad or extra:
        for name, i, row in bad[:5]:
            n = nearest(pairs, row)
            print(f"DIFFER: {a.gguf}: {name} row {i}: not a checkpoint row"
                  + (f" (nearest: {n[0]} row {n[1]}, {n[2]} of {row.size // BLOCK_BYTES} blocks "
                     f"differ, {n[3]} bytes)" if n else ""))
        print(f"q8_blocks: NOT identical: {len(bad)} of {nrows} GGUF Q8_0 rows are not checkpoint rows, "
              f"{extra} of {ck_rows} checkpoint rows not in the GGUF")
        return 1
    print(f"q8_blocks: identical: {len(q8)} GGUF Q8_0 tensors = the checkpoint's {len(pairs)} pairs, "
          f"{nrows} rows, {nblocks} blocks of {BLOCK_BYTES} bytes, byte for byte")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
