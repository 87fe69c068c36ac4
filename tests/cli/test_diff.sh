#!/usr/bin/env bash
# test_diff.sh — `qwen-conform diff GOLDEN.h5 ACTUAL.h5`: checking another runtime's output
# written in the golden layout. The "other runtime" here is `record` (teacher-forced with the
# golden's decode tokens); faults are injected into copies of its output with h5py.
#   bash tests/cli/test_diff.sh <path-to-qwen-conform> <source-dir>
set -u
QC="${1:?usage: test_diff.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: test_diff.sh <qwen-conform> <source-dir>}"
PY=/usr/bin/python3
fail=0
pass=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }
if ! $PY -c "import h5py" 2>/dev/null; then echo "SKIP: /usr/bin/python3 lacks h5py"; exit 0; fi

FX="$SRC/fixtures/tiny-bf16-gva-nested"
G="$FX/golden.h5"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_diff.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
get() { $PY -c "import h5py;f=h5py.File('$G','r');print(','.join(map(str,f['cases/$1/$2'][...])))"; }

# ---- the other runtime's output: case len005 and the continuation case, teacher-forced ------
"$QC" record --model "$FX/model" --case len005 --tokens "$(get len005 tokens)" \
  --decode-tokens "$(get len005 decode/tokens)" --dynamic --out "$TMP/act.h5" >/dev/null 2>"$TMP/err" \
  && ok "record --decode-tokens (teacher-forced) writes the actual file" || bad "record: $(cat "$TMP/err")"
"$QC" record --model "$FX/model" --case cont --history "$(get cont history_tokens)" \
  --tokens "$(get cont tokens)" --decode-tokens "$(get cont decode/tokens)" --static \
  --out "$TMP/cont.h5" >/dev/null 2>"$TMP/err" && ok "record the continuation case" \
  || bad "record cont: $(cat "$TMP/err")"

"$QC" diff "$G" "$TMP/act.h5" --json "$TMP/r.json" --junit "$TMP/r.xml" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc = 0 ] && ok "diff against a conformant actual: exit 0" || bad "diff conformant: exit $rc $(tail -5 "$TMP/out")"
grep -q "len005 .*actual *file *prefill.logits *PASS" "$TMP/out" && ok "prefill.logits row PASS" || bad "no PASS row: $(head -5 "$TMP/out")"
grep -q "len130 .*present *SKIP" "$TMP/out" && ok "cases absent from the actual file are reported as skipped" || bad "no SKIP row for len130"
$PY -c "import json;json.load(open('$TMP/r.json'))" && ok "--json parses" || bad "--json"
$PY -c "import xml.etree.ElementTree as E;E.parse('$TMP/r.xml')" && ok "--junit parses" || bad "--junit"
"$QC" diff "$G" "$TMP/cont.h5" --quiet >"$TMP/out" 2>&1
rc=$?
[ $rc = 0 ] && ok "continuation case (history + start_pos 48): exit 0" || bad "diff cont: exit $rc $(tail -5 "$TMP/out")"

# ---- faults -------------------------------------------------------------------------------
cp "$TMP/act.h5" "$TMP/logit.h5"
$PY -c "
import h5py; f=h5py.File('$TMP/logit.h5','r+'); d=f['cases/len005/prefill/logits']; a=d[...]; a[3,11]+=1e-2; d[...]=a"
"$QC" diff "$G" "$TMP/logit.h5" >"$TMP/out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "prefill.logits *FAIL" "$TMP/out" && grep -q "index (3, 11)" "$TMP/out" \
  && ok "a logit off by 1e-2: exit 1, prefill.logits at (3, 11)" || bad "logit fault: exit $rc $(grep -m3 FAIL "$TMP/out")"

cp "$TMP/act.h5" "$TMP/hidden.h5"
$PY -c "
import h5py; f=h5py.File('$TMP/hidden.h5','r+')
for name in ['prefill/hidden']:
    d=f['cases/len005/'+name]; a=d[...]; a[2:,:,:]+=0.05; d[...]=a"
"$QC" diff "$G" "$TMP/hidden.h5" >"$TMP/out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "First divergent layer: layer 1 (linear_attention)" "$TMP/out" \
  && ok "hidden states off from index 2 on: first divergent layer 1 named" || bad "hidden fault: exit $rc $(grep -m2 'First divergent' "$TMP/out")"

cp "$TMP/act.h5" "$TMP/tok.h5"
$PY -c "
import h5py; f=h5py.File('$TMP/tok.h5','r+'); d=f['cases/len005/tokens']; a=d[...]; a[0]=(a[0]+1)%64; d[...]=a"
"$QC" diff "$G" "$TMP/tok.h5" >"$TMP/out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "not run on the golden's inputs" "$TMP/out" && ok "other inputs: exit 2" || bad "other inputs: exit $rc"

cp "$TMP/act.h5" "$TMP/none.h5"
$PY -c "
import h5py; f=h5py.File('$TMP/none.h5','r+'); f.move('cases/len005','cases/other')"
"$QC" diff "$G" "$TMP/none.h5" >"$TMP/out" 2>&1
rc=$?
[ $rc = 3 ] && ok "no case in common: exit 3" || bad "no case in common: exit $rc"

"$QC" diff "$G" "$SRC/fixtures/tiny-f32-tied-flat/golden.h5" >"$TMP/out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "not the same model" "$TMP/out" && ok "another model's file: exit 2" || bad "other model: exit $rc"
"$QC" diff "$G" >"$TMP/out" 2>&1
rc=$?
[ $rc = 2 ] && ok "one file only: exit 2" || bad "one file: exit $rc"
"$QC" diff "$G" "$TMP/missing.h5" >"$TMP/out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "$TMP/missing.h5" "$TMP/out" && ok "missing actual file: exit 2 naming it" || bad "missing file: exit $rc"

echo "# $pass passed, $fail failed"
[ $fail = 0 ]
