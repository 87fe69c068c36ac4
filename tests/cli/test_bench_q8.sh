#!/usr/bin/env bash
# test_bench_q8.sh — ci/bench-llamacpp's Q8_0 weight type without the native build or a bench:
#   bash tests/cli/test_bench_q8.sh <path-to-qwen-conform> <source-dir>
# 1. ci/q8_blocks.py (the block check) on hand-made files: a GGUF whose Q8_0 rows are the
#    checkpoint's, reordered and split over two tensors, is "identical"; one flipped quant byte
#    is exit 1 naming the tensor, the row and the nearest checkpoint row (1 block, 1 byte); a
#    missing row is exit 1; a checkpoint without a pair / a bad pair is exit 2 naming it
# 2. (needs llama.cpp's source, <cache>/llamacpp/src from ci/llamacpp setup; SKIP without)
#    adapters/llamacpp/qc_convert.py --outtype q8_0 on fixtures/tiny-q8_0: every one of the 32
#    pairs becomes a Q8_0 tensor with the same 1260 rows / 1388 blocks (q8_blocks exit 0), the
#    24 other tensors stay F32 (the embedding is not quantized), general.file_type is
#    MOSTLY_Q8_0 (7); the stock Q8_0 conversion of the SAME float weights (no pairs) is not
#    (exit 1: its formula differs, and it quantizes the embedding: 1356 rows)
# 3. ci/bench-llamacpp --dtypes with an unknown type exits 2 naming q8_0 among the known ones;
#    bench_crosscheck.py --weights puts the weight line and the type in the title
set -u
. "$(dirname "$0")/bench_common.sh" test_bench_q8 "$@"
QB=("$PY" "$SRC/ci/q8_blocks.py")
cache_base="${QC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qwen-conform}"
LSRC="$cache_base/llamacpp/src"
GGUF_PY="$LSRC/gguf-py"

# ---- 1. the block check on hand-made files -----------------------------------------------
if [ -f "$GGUF_PY/gguf/__init__.py" ]; then
  "$PY" - "$TMP" "$GGUF_PY" <<'PYEOF' >"$TMP/mk.log" 2>&1
import json, os, struct, sys
import numpy as np
tmp, gpy = sys.argv[1], sys.argv[2]
sys.path.insert(0, gpy)
import gguf
rs = np.random.RandomState(7)
q = rs.randint(-127, 128, size=(6, 64)).astype(np.int8)
d = (rs.rand(6, 2) * 0.01 + 0.001).astype(np.float16)
def st(path, tensors):
    hdr, off, blobs = {}, 0, []
    for n, dt, a in tensors:
        b = a.tobytes()
        hdr[n] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    h = json.dumps(hdr).encode(); h += b" " * ((8 - len(h) % 8) % 8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
st(f"{tmp}/ck/model.safetensors", [("a.weight", "I8", q), ("a.weight_scale", "F16", d),
                                   ("e.weight", "F32", np.ones((4, 32), np.float32))])
st(f"{tmp}/nopair/model.safetensors", [("e.weight", "F32", np.ones((4, 32), np.float32))])
st(f"{tmp}/badpair/model.safetensors", [("a.weight", "I8", q), ("a.weight_scale", "F16", d[:, :1])])
blocks = np.concatenate([d.reshape(6, 2, 1).view(np.uint8).reshape(6, 2, 2),
                         q.reshape(6, 2, 32).view(np.uint8)], axis=2).reshape(6, 68)
def gg(path, parts):
    w = gguf.GGUFWriter(path, "qwen35")
    for name, rows in parts:
        w.add_tensor(name, np.ascontiguousarray(rows), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("token_embd.weight", np.ones((4, 32), np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
gg(f"{tmp}/same.gguf", [("x.weight", blocks[[4, 0, 2]]), ("y.weight", blocks[[5, 3, 1]])])
flip = blocks.copy(); flip[3, 34 + 2 + 5] ^= 1      # row 3, block 1, quant 5
gg(f"{tmp}/flip.gguf", [("x.weight", flip[:3]), ("y.weight", flip[3:])])
gg(f"{tmp}/short.gguf", [("x.weight", blocks[:5])])
PYEOF
  [ $? = 0 ] || bad "making the test files: $(tail -3 "$TMP/mk.log")"
  "${QB[@]}" --gguf-py "$GGUF_PY" "$TMP/ck" "$TMP/same.gguf" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 0 ] && grep -q "identical: 2 GGUF Q8_0 tensors = the checkpoint's 1 pairs, 6 rows, 12 blocks" "$TMP/out" \
    && grep -q "x.weight .*<- a.weight (3)" "$TMP/out" && grep -q "other GGUF tensors: F32 x1" "$TMP/out" \
    && ok "the checkpoint's 6 rows, reordered over 2 GGUF tensors: identical (12 blocks)" \
    || bad "same rows: exit $rc $(cat "$TMP/out" "$TMP/err" | tail -4)"
  "${QB[@]}" --gguf-py "$GGUF_PY" "$TMP/ck" "$TMP/flip.gguf" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 1 ] && grep -q "DIFFER: .*flip.gguf: y.weight row 0: not a checkpoint row (nearest: a.weight row 3, 1 of 2 blocks differ, 1 bytes)" "$TMP/out" \
    && grep -q "NOT identical: 1 of 6 GGUF Q8_0 rows are not checkpoint rows, 1 of 6 checkpoint rows not in the GGUF" "$TMP/out" \
    && ok "one flipped quant bit: exit 1 naming y.weight row 0, nearest a.weight row 3 (1 block, 1 byte)" \
    || bad "flipped bit: exit $rc $(cat "$TMP/out" "$TMP/err" | tail -4)"
  "${QB[@]}" --gguf-py "$GGUF_PY" "$TMP/ck" "$TMP/short.gguf" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 1 ] && grep -q "0 of 5 GGUF Q8_0 rows are not checkpoint rows, 1 of 6 checkpoint rows not in the GGUF" "$TMP/out" \
    && ok "a checkpoint row missing from the GGUF: exit 1" || bad "missing row: exit $rc $(tail -2 "$TMP/out")"
  "${QB[@]}" --gguf-py "$GGUF_PY" "$TMP/nopair" "$TMP/same.gguf" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 2 ] && grep -q "nopair: no Q8_0 pair" "$TMP/err" && ok "a checkpoint without a pair: exit 2 naming it" \
    || bad "no pair: exit $rc $(cat "$TMP/err")"
  "${QB[@]}" --gguf-py "$GGUF_PY" "$TMP/badpair" "$TMP/same.gguf" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 2 ] && grep -q "badpair: a.weight: I8 \[6, 64\] + F16 \[6, 1\] is not a Q8_0 pair" "$TMP/err" \
    && ok "a scale of the wrong shape: exit 2 naming the tensor and both shapes" || bad "bad pair: exit $rc $(cat "$TMP/err")"
else
  echo "SKIP: no $GGUF_PY (ci/llamacpp setup): the block check and the conversion are not tested"
fi

# ---- 2. the conversion of fixtures/tiny-q8_0 ------------------------------------------------
Q8="$SRC/fixtures/tiny-q8_0/model"
if [ -f "$LSRC/convert_hf_to_gguf.py" ] && [ -f "$Q8/config.json" ]; then
  "$PY" "$SRC/adapters/llamacpp/qc_convert.py" --llama-src "$LSRC" --outtype q8_0 "$Q8" "$TMP/q8.gguf" >"$TMP/conv.log" 2>&1
  rc=$?
  [ $rc = 0 ] && grep -q "32 Q8_0 pairs: kept as Q8_0 blocks, every other tensor as --outtype f32" "$TMP/conv.log" \
    && ok "qc_convert.py --outtype q8_0 on tiny-q8_0: 32 pairs, the rest f32" || bad "conversion: exit $rc $(tail -3 "$TMP/conv.log")"
  "${QB[@]}" --gguf-py "$GGUF_PY" "$Q8" "$TMP/q8.gguf" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 0 ] && grep -q "identical: 32 GGUF Q8_0 tensors = the checkpoint's 32 pairs, 1260 rows, 1388 blocks of 34 bytes" "$TMP/out" \
    && grep -q "other GGUF tensors: F32 x24$" "$TMP/out" && grep -q "output.weight .*<- lm_head.weight (96)" "$TMP/out" \
    && ok "its GGUF holds the checkpoint's blocks byte for byte (32 tensors, 1260 rows, 1388 blocks), 24 F32 others" \
    || bad "tiny-q8_0 blocks: exit $rc $(cat "$TMP/out" "$TMP/err" | tail -4)"
  ft="$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import gguf; r = gguf.GGUFReader(sys.argv[2]); f = r.fields["general.file_type"]; print(int(f.parts[f.data[0]][0]))' "$GGUF_PY" "$TMP/q8.gguf" 2>&1)"
  [ "$ft" = 7 ] && ok "general.file_type 7 (MOSTLY_Q8_0)" || bad "general.file_type: $ft (want 7)"
  # the same weights as floats, no pairs: the stock converter's own Q8_0
  (cd "$SRC/golden" && "$PY" -c '
import sys; sys.path.insert(0, ".")
from qcgolden import setup_torch; setup_torch()
from qcgolden import fixtures, init
s = fixtures.by_name("tiny-q8_0")
init.write_checkpoint(init.ModelSpec(**{**s.__dict__, "weight_type": "float"}), sys.argv[1])' "$TMP/f32") >"$TMP/w.log" 2>&1 \
    && "$PY" "$SRC/adapters/llamacpp/qc_convert.py" --llama-src "$LSRC" --outtype q8_0 "$TMP/f32" "$TMP/stock.gguf" >"$TMP/conv2.log" 2>&1
  rc=$?
  [ $rc = 0 ] || bad "the float copy / its stock conversion: exit $rc $(tail -3 "$TMP/w.log" "$TMP/conv2.log")"
  "${QB[@]}" --gguf-py "$GGUF_PY" "$Q8" "$TMP/stock.gguf" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 1 ] && grep -q "NOT identical: [1-9][0-9]* of 1356 GGUF Q8_0 rows are not checkpoint rows" "$TMP/out" \
    && grep -q "token_embd.weight .*Q8_0" "$TMP/out" \
    && ok "the stock Q8_0 of the same float weights is not the same blocks: $(grep -o 'NOT identical: [0-9]* of [0-9]*' "$TMP/out") rows (embedding quantized too)" \
    || bad "stock conversion: exit $rc $(cat "$TMP/out" "$TMP/err" | tail -3)"
else
  echo "SKIP: no llama.cpp source at $LSRC (ci/llamacpp setup): the Q8_0 conversion is not tested"
fi

# ---- 3. the script's options, the cross-check's weight line ---------------------------------
"$SRC/ci/bench-llamacpp" --dtypes "q8_0 q4_0" >/dev/null 2>"$TMP/err"
rc=$?
[ $rc = 2 ] && grep -q "'q4_0' is not bf16, f32, f16 or q8_0" "$TMP/err" && ok "--dtypes q4_0: exit 2, q8_0 among the known types" \
  || bad "--dtypes q4_0: exit $rc $(cat "$TMP/err")"
"$SRC/ci/bench-llamacpp" --help | grep -q -- "q8_0" && ok "--help names q8_0" || bad "--help lacks q8_0"
cat > "$TMP/b.json" <<'EOF'
{"config": {"dtype": "BF16"}, "results": [
 {"backend": "optimized", "test": "pp8", "threads": 1, "tok_s_median": 30, "tok_s_samples": [30]},
 {"backend": "llamacpp", "test": "pp8", "threads": 1, "tok_s_median": 20, "tok_s_samples": [20]}]}
EOF
"$PY" "$SRC/ci/bench_crosscheck.py" --bench "$TMP/b.json" --weights "Q8_0: ours A; llama.cpp B; q8_blocks: identical" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc = 0 ] && grep -q "^## Cross-check: llama.cpp via the adapter vs llama-bench (Q8_0)$" "$TMP/out" \
  && grep -q "^- weights: Q8_0: ours A; llama.cpp B; q8_blocks: identical$" "$TMP/out" \
  && grep -qF "| 1 | pp8 | 30 [30-30] | 20 [20-20] | 1.50x |" "$TMP/out" \
  && ok "bench_crosscheck --weights: the line, the title's type Q8_0 (not config.dtype BF16), ratio 1.50x" \
  || bad "--weights: exit $rc $(cat "$TMP/out" "$TMP/err" | head -8)"
# the native build's line names the compiler ci/llamacpp-native recorded (build.compiler)
mkdir -p "$TMP/nat"
echo 307 > "$TMP/nat/build.seconds"
echo "g++ (Debian 12.2.0-14) 12.2.0" > "$TMP/nat/build.compiler"
"$PY" "$SRC/ci/bench_crosscheck.py" --bench "$TMP/b.json" --native 1 --build-info "$TMP/nat" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc = 0 ] && grep -qF "GGML_OPENMP=OFF; g++ (Debian 12.2.0-14) 12.2.0; built in 307 s; ci/llamacpp-native)" "$TMP/out" \
  && ok "bench_crosscheck: the native build line names its compiler" \
  || bad "--build-info: exit $rc $(cat "$TMP/out" "$TMP/err" | head -8)"
rm "$TMP/nat/build.compiler"
"$PY" "$SRC/ci/bench_crosscheck.py" --bench "$TMP/b.json" --native 1 --build-info "$TMP/nat" >"$TMP/out" 2>"$TMP/err"
grep -qF "GGML_OPENMP=OFF; compiler not recorded; built in 307 s" "$TMP/out" \
  && ok "bench_crosscheck: a build without build.compiler says so" || bad "no build.compiler: $(head -8 "$TMP/out")"

bench_done
