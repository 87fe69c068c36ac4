#!/usr/bin/env bash
# test_record_mlp_in.sh — `record` of a dense model writes each layer's mixer output
# (prefill/mlp_in [L, T, H], decode/mlp_in [L, S, H]) like the golden generator does:
#   bash tests/cli/test_record_mlp_in.sh <path-to-qwen-conform> <source-dir>
#   (a) record --like fixtures/tiny-f32-tied-flat/golden.h5 --backend reference (and optimized):
#       every case carries prefill/mlp_in and decode/mlp_in of the golden's shapes, within the
#       policy's hidden tolerance (defaults + the case's overrides) of the golden's mlp_in; no
#       router datasets, no moe_in
#   (b) the layer-major path (--stream) writes the same mlp_in, bit for bit; --no-hidden none
#   (c) a single-case record (--tokens, greedy decode): prefill/mlp_in [4, 10, 64],
#       decode/mlp_in [4, 3, 64]
#   (d) a runtime under test (exec:, the float32 golden adapter) that announces mlp_in: its
#       recording carries mlp_in within tolerance; one that does not announce it: none
#   (e) check of a runtime whose layer 2 MLP is 1 % off against the RECORDED golden names
#       "layer 2, MLP (mlp_in, the mixer output, agrees)"; the same golden with mlp_in deleted
#       only "layer 2 (mixer or MLP ...)": the MLP is named thanks to the recorded mlp_in
# (d) and (e) skip with a note when /usr/bin/python3 lacks torch / numpy; h5py is required.
set -u
QC="${1:?usage: test_record_mlp_in.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: test_record_mlp_in.sh <qwen-conform> <source-dir>}"
PY=/usr/bin/python3
ONE="$SRC/fixtures/tiny-f32-tied-flat"
POL="$SRC/fixtures/tolerances.json"
CM="$PY $SRC/tests/adapters/causes_mutants.py"

fail=0
pass=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }

if ! "$PY" -c 'import h5py, numpy' 2>/dev/null; then
  echo "SKIP: $PY cannot import h5py and numpy"
  exit 0
fi
TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_record_mlp_in.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

# close LABEL RECORDED: every case of the fixture golden that has mlp_in has it in RECORDED with
# the same shape, within atol + rtol * |golden| of the policy's hidden class for that case
close() {
  if "$PY" - "$ONE/golden.h5" "$2" "$POL" > "$TMP/py.out" 2>&1 <<'PY'
import json, sys
import h5py, numpy as np
g, r, pol = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r"), json.load(open(sys.argv[3]))
fx = "tiny-f32-tied-flat"
n = 0
for c in g["cases"]:
    tol = dict(pol["defaults"]["hidden"])
    for o in pol.get("overrides", []):
        if o.get("case") == fx + "/" + c and o.get("tensor") == "hidden":
            tol.update({k: o[k] for k in ("atol", "rtol") if k in o})
    for part in ("prefill", "decode"):
        k = "cases/%s/%s/mlp_in" % (c, part)
        if k not in g:
            continue
        assert k in r, "%s missing from the recording" % k
        a, b = r[k][()], g[k][()]
        assert a.shape == b.shape, (k, a.shape, b.shape)
        assert np.isfinite(a).all(), k
        lim = tol["atol"] + tol["rtol"] * np.abs(b)
        worst = float((np.abs(a - b) / lim).max())
        assert worst <= 1.0, "%s: max |diff| / tolerance = %.3g" % (k, worst)
        n += 1
    for k in ("prefill/moe_in", "decode/moe_in", "prefill/router", "decode/router"):
        assert "cases/%s/%s" % (c, k) not in r, "a dense recording carries " + k
assert n == 18, "%d mlp_in datasets compared (want 9 cases x prefill + decode)" % n
print("%d mlp_in datasets within tolerance" % n)
PY
  then ok "$1: $(tail -1 "$TMP/py.out")"; else bad "$1"; cat "$TMP/py.out"; fi
}

# count FILE: the number of mlp_in datasets in FILE
count() { "$PY" -c '
import sys, h5py
n = []
h5py.File(sys.argv[1], "r").visit(lambda k: n.append(k) if k.endswith("/mlp_in") else None)
print(len(n))' "$1" 2>/dev/null; }

# ---- (a) record --like on the built-in backends ---------------------------------------------
for be in reference optimized; do
  if "$QC" record --like "$ONE/golden.h5" --model "$ONE/model" --backend $be \
       --out "$TMP/$be.h5" > "$TMP/rec.out" 2>&1; then
    ok "record --like --backend $be exits 0"
    close "record --like --backend $be: mlp_in equals the golden's" "$TMP/$be.h5"
  else
    bad "record --like --backend $be: $(tail -3 "$TMP/rec.out")"
  fi
done

# ---- (b) layer-major: the same mlp_in; --no-hidden: none ------------------------------------
if "$QC" record --like "$ONE/golden.h5" --model "$ONE/model" --stream --out "$TMP/st.h5" \
     > "$TMP/rec.out" 2>&1; then
  [ "$(count "$TMP/st.h5")" = 18 ] && ok "--stream: 18 mlp_in datasets" \
    || bad "--stream: $(count "$TMP/st.h5") mlp_in datasets, want 18"
  same=1
  for c in cont len001 len005 len130; do
    for part in prefill decode; do
      h5diff "$TMP/reference.h5" "$TMP/st.h5" "/cases/$c/$part/mlp_in" > /dev/null 2>&1 || same=0
    done
  done
  [ $same = 1 ] && ok "--stream: mlp_in identical to the in-memory record" \
    || bad "--stream: mlp_in differs from the in-memory record"
else
  bad "record --like --stream: $(tail -3 "$TMP/rec.out")"
fi
"$QC" record --like "$ONE/golden.h5" --model "$ONE/model" --no-hidden --out "$TMP/nh.h5" \
  > /dev/null 2>&1 && [ "$(count "$TMP/nh.h5")" = 0 ] && ok "--no-hidden: no mlp_in" \
  || bad "--no-hidden: $(count "$TMP/nh.h5") mlp_in datasets (or the record failed)"

# ---- (c) a single-case record with greedy decode --------------------------------------------
if "$QC" record --model "$ONE/model" --tokens 1,2,3,4,5,6,7,8,9,10 --decode 3 --dynamic \
     --max-seq-len 4 --out "$TMP/one.h5" > "$TMP/rec.out" 2>&1 &&
   "$PY" - "$TMP/one.h5" > "$TMP/py.out" 2>&1 <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
p, d = f["cases/case0/prefill/mlp_in"][()], f["cases/case0/decode/mlp_in"][()]
h = f["cases/case0/prefill/hidden"][()]
assert p.shape == (4, 10, 64) and d.shape == (4, 3, 64), (p.shape, d.shape)
assert np.isfinite(p).all() and np.isfinite(d).all()
# mlp_in[l] lies between hidden[l] (the layer's input) and hidden[l + 1] (its output): it is
# neither of them
for l in range(4):
    assert not np.array_equal(p[l], h[l]) and not np.array_equal(p[l], h[l + 1]), l
print("prefill/mlp_in %s, decode/mlp_in %s" % (p.shape, d.shape))
PY
then ok "record --tokens --decode 3: $(tail -1 "$TMP/py.out")"
else bad "record --tokens --decode 3: $(tail -3 "$TMP/rec.out") $(cat "$TMP/py.out" 2>/dev/null)"; fi

# ---- (d), (e) a runtime under test ----------------------------------------------------------
have_torch=1
"$PY" -c 'import torch, numpy' 2>/dev/null || have_torch=0
"$QC" check --help 2>&1 | grep -q 'exec:' || have_torch=0
if [ $have_torch = 0 ]; then
  echo "note: exec: scenarios skipped ($PY cannot import torch and numpy, or no exec: backend)"
else
  if "$QC" record --like "$ONE/golden.h5" --model "$ONE/model" --backend "exec:$CM good" \
       --out "$TMP/ex.h5" > "$TMP/rec.out" 2>&1; then
    close "exec: runtime announcing mlp_in: mlp_in equals the golden's" "$TMP/ex.h5"
  else
    bad "record --backend exec:good: $(tail -3 "$TMP/rec.out")"
  fi
  "$QC" record --like "$ONE/golden.h5" --model "$ONE/model" \
    --backend "exec:$CM mlp-l2-nomlpin" --out "$TMP/ex2.h5" > /dev/null 2>&1 &&
    [ "$(count "$TMP/ex2.h5")" = 0 ] && ok "exec: runtime without mlp_in: none recorded" \
    || bad "exec: runtime without mlp_in: $(count "$TMP/ex2.h5") mlp_in datasets"

  # check of the faulty runtime against the recorded golden, then against it without mlp_in
  cp "$TMP/reference.h5" "$TMP/strip.h5"
  "$PY" -c '
import sys, h5py
f = h5py.File(sys.argv[1], "r+")
ks = []
f.visit(lambda k: ks.append(k) if k.endswith("/mlp_in") else None)
for k in ks: del f[k]' "$TMP/strip.h5"
  for g in reference strip; do
    "$QC" check --golden "$TMP/$g.h5" --policy "$POL" --filter '/len00[25]/' \
      --backend "exec:$CM mlp-l2" > "$TMP/$g.check" 2>&1
    rc=$?
    [ $rc = 1 ] && ok "check mlp-l2 vs the $g golden: exit 1" \
      || { bad "check mlp-l2 vs the $g golden: exit $rc"; tail -5 "$TMP/$g.check"; }
  done
  cause() { grep -E '^  - \[[0-9]+ rows?\] ' "$TMP/$1.check" | grep -qF -- "$2"; }
  cause reference "layer 2, MLP (mlp_in, the mixer output, agrees)" \
    && ok "recorded golden: the cause names layer 2's MLP" \
    || { bad "recorded golden: no cause naming layer 2's MLP"; sed -n '/^likely causes/,/^$/p' "$TMP/reference.check"; }
  cause strip "layer 2 (mixer or MLP: the hidden states cannot tell" && ! cause strip "layer 2, MLP" \
    && ok "the recorded golden without mlp_in: layer 2, mixer or MLP (control)" \
    || { bad "control without mlp_in"; sed -n '/^likely causes/,/^$/p' "$TMP/strip.check"; }
fi

echo "# $pass passed, $fail failed"
[ "$fail" -eq 0 ]
