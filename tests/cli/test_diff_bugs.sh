#!/usr/bin/env bash
# test_diff_bugs.sh — `qwen-conform diff` on runtimes with real porting bugs and on correct
# runtimes, in the full, no-hidden and logits-only ACTUAL variants: every bug fails (exit 1),
# every clean run passes (exit 0), and the localisation says only what the data supports
# (the first divergent layer from hidden states; without them an interval from the state
# buffers; with neither, no layer).
# The buggy runtimes: the reference backend on a model copy whose weights reproduce a porting
# bug (a zero-centred norm applied as w instead of 1 + w, in one place), recorded with
# `record`, then given the golden's model hashes (what a runtime loading the real checkpoint
# would report). The correct runtimes: the reference and optimized backends, and the golden
# model's float32 exec adapter through qwen_conform_adapter.golden (when torch is installed).
#   bash tests/cli/test_diff_bugs.sh <path-to-qwen-conform> <source-dir>
set -u
QC="${1:?usage: test_diff_bugs.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: test_diff_bugs.sh <qwen-conform> <source-dir>}"
PY=/usr/bin/python3
MK="$SRC/tests/cli/diff_make_actual.py"
fail=0
pass=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }
if ! $PY -c "import h5py" 2>/dev/null; then echo "SKIP: /usr/bin/python3 lacks h5py"; exit 0; fi

FX="$SRC/fixtures/tiny-f32-tied-flat"   # 4 layers: 0-2 Gated DeltaNet, 3 full attention
G="$FX/golden.h5"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_diff_bugs.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
run() { "$QC" diff "$@" >"$TMP/out" 2>&1; rc=$?; }

# A copy of the model whose tensor NAME has 1 subtracted (a correct (1 + w) norm on it computes
# what a buggy "w" norm computes on the real weights); an ACTUAL of every case from it, with
# the golden's hashes.
buggy() { # name tensor
  local d="$TMP/model.$1"
  mkdir -p "$d" && cp "$FX/model/config.json" "$d/"
  $PY - "$FX/model/model.safetensors" "$d/model.safetensors" "$2" <<'EOF'
import json, struct, sys
import numpy as np
src, dst, name = sys.argv[1:4]
b = bytearray(open(src, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
e = h[name]
assert e["dtype"] == "F32", e
lo, hi = (8 + n + o for o in e["data_offsets"])
w = np.frombuffer(bytes(b[lo:hi]), dtype="<f4") - 1.0
b[lo:hi] = w.astype("<f4").tobytes()
open(dst, "wb").write(bytes(b))
EOF
  cp "$G" "$TMP/g.$1.h5"
  $PY -c "
import h5py; f=h5py.File('$TMP/g.$1.h5','r+'); f.attrs['model_path']='$d'"
  $PY "$MK" "$QC" "$TMP/g.$1.h5" "$TMP/$1.h5" >/dev/null 2>"$TMP/err" || { echo "record $1: $(cat "$TMP/err")"; return 1; }
  $PY -c "
import h5py; a=h5py.File('$TMP/$1.h5','r+'); g=h5py.File('$G','r')
for k in ('config_sha256','weights_sha256'): a.attrs[k]=g.attrs[k]"
  for v in no_hidden logits_only; do $PY "$MK" --variant $v "$TMP/$1.h5" "$TMP/$1.$v.h5"; done
}

# ---- correct runtimes: exit 0 in every variant --------------------------------------------------
for be in reference optimized; do
  $PY "$MK" "$QC" "$G" "$TMP/ok.$be.h5" --backend $be 2>"$TMP/err" || bad "record $be: $(cat "$TMP/err")"
  for v in no_hidden logits_only; do $PY "$MK" --variant $v "$TMP/ok.$be.h5" "$TMP/ok.$be.$v.h5"; done
  for f in "$TMP/ok.$be.h5" "$TMP/ok.$be.no_hidden.h5" "$TMP/ok.$be.logits_only.h5"; do
    run "$G" "$f"
    [ $rc = 0 ] && ok "correct $be, $(basename "$f"): exit 0" || bad "correct $(basename "$f"): exit $rc $(grep -m2 -E 'FAIL|ERROR' "$TMP/out")"
  done
done
if $PY -c "import torch" 2>/dev/null; then
  $PY - "$SRC" "$G" "$TMP/ok.golden32.h5" <<'EOF' 2>"$TMP/err"
import sys
src, golden_path, out = sys.argv[1:4]
sys.path[:0] = [src + "/adapters/golden", src + "/adapters/python", src + "/golden"]
from qc_golden_adapter import GoldenF32
from qwen_conform_adapter import golden
golden.record(GoldenF32(), golden_path, out, generator="qcgolden float32 (test_diff_bugs)")
EOF
  if [ -f "$TMP/ok.golden32.h5" ]; then
    for v in no_hidden logits_only; do $PY "$MK" --variant $v "$TMP/ok.golden32.h5" "$TMP/ok.golden32.$v.h5"; done
    for f in "$TMP/ok.golden32.h5" "$TMP/ok.golden32.no_hidden.h5" "$TMP/ok.golden32.logits_only.h5"; do
      run "$G" "$f"
      [ $rc = 0 ] && ok "the golden model in float32 (exec adapter), $(basename "$f"): exit 0" \
        || bad "golden32 $(basename "$f"): exit $rc $(grep -m2 -E 'FAIL|ERROR' "$TMP/out")"
    done
  else
    bad "golden float32 adapter record: $(tail -3 "$TMP/err")"
  fi
else
  echo "# (no torch: the golden float32 adapter is not run)"
fi

# ---- porting bugs: exit 1 in every variant, localised only as far as the data goes -------------
# bug      tensor                                              hidden says           states say
# norm1    layer 1's input norm (before its states)            layer 1               at or before 1, after 0
# post2    layer 2's post-attention norm (after its states)    layer 2               at or before 3, after 2
# knorm3   layer 3's k_norm (the full-attention layer)         layer 3 or final norm at or before 3, after 2
for spec in "norm1 model.layers.1.input_layernorm.weight 1 linear_attention 1 0" \
            "post2 model.layers.2.post_attention_layernorm.weight 2 linear_attention 3 2" \
            "knorm3 model.layers.3.self_attn.k_norm.weight 3 full_attention 3 2"; do
  set -- $spec
  name=$1 tensor=$2 hl=$3 kind=$4 sl=$5 below=$6
  buggy "$name" "$tensor" || { bad "$name: could not make the buggy runtime"; continue; }
  run "$G" "$TMP/$name.h5"
  if [ "$name" = knorm3 ]; then want="First divergent layer: layer 3 (full_attention) or the final norm"
  else want="First divergent layer: layer $hl ($kind)"; fi
  [ $rc = 1 ] && grep -q "$want" "$TMP/out" && ok "$name full ACTUAL: exit 1, $want" \
    || bad "$name full: exit $rc $(grep -m2 'First divergent' "$TMP/out")"
  run "$G" "$TMP/$name.no_hidden.h5"
  want="the divergence began at or before layer $sl, after layer $below whose state passes"
  [ $rc = 1 ] && grep -q "$want" "$TMP/out" && ! grep -q "First divergent layer: layer" "$TMP/out" \
    && ok "$name no-hidden ACTUAL: exit 1, an interval ($want), no single layer" \
    || bad "$name no-hidden: exit $rc $(grep -m2 -E 'diverge|First divergent' "$TMP/out")"
  run "$G" "$TMP/$name.logits_only.h5"
  [ $rc = 1 ] && grep -q "First divergent layer: unknown (the ACTUAL has no prefill/hidden and no prefill/state" "$TMP/out" \
    && ! grep -q "First divergent layer: layer\|at or before layer" "$TMP/out" \
    && ok "$name logits-only ACTUAL: exit 1, no layer named" \
    || bad "$name logits-only: exit $rc $(grep -m2 -E 'diverge|First divergent' "$TMP/out")"
done
# check's own localisation from the states keeps the same wording (the shared code)
grep -rq "whose state passes" "$SRC/harness/check/qc_check_localise.c" && ok "check and diff share the state localisation" || bad "shared localisation text"

echo "# $pass passed, $fail failed"
[ $fail = 0 ]
