#!/usr/bin/env bash
# test_diff.sh — `qwen-conform diff GOLDEN ACTUAL`: another runtime's outputs checked against
# the golden (golden/SCHEMA.md "Required and optional"). The correct runtime is the reference backend
# through `record` (every case of a golden, teacher-forced: tests/cli/diff_make_actual.py);
# variants and faults are made from copies of its output with h5py. Covers the Done-when
# bullets 1-4 of issue #12 (optional tensors SKIPPED on every fixture, NaN at one position,
# one case of nine, HF layout = canonical layout) and the bad-input cases.
#   bash tests/cli/test_diff.sh <path-to-qwen-conform> <source-dir>
set -u
QC="${1:?usage: test_diff.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: test_diff.sh <qwen-conform> <source-dir>}"
PY=/usr/bin/python3
MK="$SRC/tests/cli/diff_make_actual.py"
fail=0
pass=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }
if ! $PY -c "import h5py" 2>/dev/null; then echo "SKIP: /usr/bin/python3 lacks h5py"; exit 0; fi

FX="$SRC/fixtures/tiny-bf16-gva-nested"
G="$FX/golden.h5"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_diff.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
# run diff; rc in $rc, console in $TMP/out
# (every run: diff never gives advice it rejects itself, such as --dump-actual)
advice=0
run() { "$QC" diff "$@" >"$TMP/out" 2>&1; rc=$?; grep -q -- "--dump-actual" "$TMP/out" && advice=$((advice + 1)); }
noadvice() { ! grep -q -- "--dump-actual" "$TMP/out"; }

# ---- the correct runtime's ACTUAL: every case ------------------------------------------------
$PY "$MK" "$QC" "$G" "$TMP/act.h5" 2>"$TMP/err" && ok "record every case into one ACTUAL" \
  || { bad "record: $(cat "$TMP/err")"; [ $advice = 0 ] && ok "no diff output suggests --dump-actual (which diff rejects)" || bad "$advice diff runs suggested --dump-actual"
echo "# $pass passed, $fail failed"; exit 1; }
run "$G" "$TMP/act.h5" --json "$TMP/r.json" --junit "$TMP/r.xml"
[ $rc = 0 ] && ok "a correct ACTUAL: exit 0" || bad "correct ACTUAL: exit $rc $(tail -3 "$TMP/out")"
grep -q "len005 .*actual *file *prefill.logits *PASS" "$TMP/out" && grep -q "model_hash *PASS" "$TMP/out" \
  && grep -q "coverage *PASS *9 of 9" "$TMP/out" && ok "prefill.logits, model_hash and coverage rows PASS" \
  || bad "rows: $(head -5 "$TMP/out")"
grep -q "layout *PASS *layout auto -> canonical" "$TMP/out" && ok "the layout row says what auto decided (canonical)" \
  || bad "layout row: $(grep layout "$TMP/out")"
$PY -c "import json;r=json.load(open('$TMP/r.json'));assert r['summary']['failed']==0" && ok "--json parses" || bad "--json"
$PY -c "import xml.etree.ElementTree as E;E.parse('$TMP/r.xml')" && ok "--junit parses" || bad "--junit"

# ---- Done-when 1: logits-only and no-hidden ACTUALs pass on every fixture, absent = SKIPPED ---
for fx in "$SRC"/fixtures/*/golden.h5; do
  name="$(basename "$(dirname "$fx")")"
  $PY "$MK" "$QC" "$fx" "$TMP/$name.h5" 2>"$TMP/err" || { bad "$name: record: $(tail -2 "$TMP/err")"; continue; }
  for v in logits_only no_hidden; do
    $PY "$MK" --variant $v "$TMP/$name.h5" "$TMP/$name.$v.h5"
    run "$fx" "$TMP/$name.$v.h5"
    want="prefill.hidden *SKIP *the ACTUAL has no prefill/hidden"
    [ $v = logits_only ] && want="prefill.k_cache *SKIP *the ACTUAL has no prefill/state"
    [ $rc = 0 ] && grep -q "$want" "$TMP/out" && grep -q "prefill.logits *PASS" "$TMP/out" \
      && ok "$name $v: exit 0, absent checks SKIPPED with the reason" \
      || bad "$name $v: exit $rc $(grep -m3 -E 'FAIL|ERROR' "$TMP/out")"
  done
done
run "$G" "$TMP/tiny-bf16-gva-nested.logits_only.h5"
grep -q "model_hash *SKIP *the ACTUAL carries no config_sha256" "$TMP/out" \
  && ok "no provenance in the ACTUAL: model_hash SKIPPED" || bad "provenance skip: $(grep model_hash "$TMP/out")"
for v in minimal prefill_only last_row; do
  $PY "$MK" --variant $v "$TMP/act.h5" "$TMP/$v.h5"
  run "$G" "$TMP/$v.h5"
  [ $rc = 0 ] && ok "$v ACTUAL: exit 0" || bad "$v: exit $rc $(grep -m3 -E 'FAIL|ERROR' "$TMP/out")"
done
grep -q "decode.logits *SKIP" "$TMP/out" || true
run "$G" "$TMP/prefill_only.h5"
grep -q "decode.logits *SKIP *prefill-only ACTUAL" "$TMP/out" && ok "prefill-only: decode checks SKIPPED" \
  || bad "prefill-only skip rows"

# ---- Done-when 2: NaN logits at one position: exit 1 naming it, the rest still runs ---------
cp "$TMP/act.h5" "$TMP/nan.h5"
$PY -c "
import h5py,numpy as np; f=h5py.File('$TMP/nan.h5','r+'); d=f['cases/len005/prefill/logits']; a=d[...]; a[3,:]=np.nan; d[...]=a"
run "$G" "$TMP/nan.h5"
[ $rc = 1 ] && grep -q "First non-finite actual value: nan at prefill/logits (3, 0) \[position 3, vocab 0\]" "$TMP/out" \
  && grep -q "len130 .*prefill.logits *PASS" "$TMP/out" \
  && ok "NaN at position 3: exit 1 naming position 3; other cases still compared" \
  || bad "NaN: exit $rc $(grep -m2 -E 'non-finite|FAIL' "$TMP/out")"
noadvice && ok "no advice diff rejects (--dump-actual)" || bad "diff suggests --dump-actual"
cp "$TMP/act.h5" "$TMP/inf.h5"
$PY -c "
import h5py,numpy as np; f=h5py.File('$TMP/inf.h5','r+'); d=f['cases/cont/prefill/state/layer_03/k_cache']; a=d[...]; a[0,7,2]=np.inf; d[...]=a"
run "$G" "$TMP/inf.h5"
[ $rc = 1 ] && grep -q "prefill.k_cache *FAIL" "$TMP/out" && grep -q "layer 3, kv head 0, position 7" "$TMP/out" \
  && ok "Inf in a k_cache: exit 1 with its meaning (layer, head, position)" || bad "Inf: exit $rc $(grep -m2 non-finite "$TMP/out")"

# ---- Done-when 3: coverage ------------------------------------------------------------------
cp "$TMP/act.h5" "$TMP/one.h5"
$PY -c "
import h5py; f=h5py.File('$TMP/one.h5','r+')
[f['cases'].__delitem__(c) for c in list(f['cases']) if c != 'len005']"
run "$G" "$TMP/one.h5"
[ $rc = 1 ] && grep -q "coverage *FAIL *8 of 9 golden cases missing from the ACTUAL: cont, len001, len002, len063, len064, len065, len130, longseq" "$TMP/out" \
  && ok "one case of nine: exit 1 naming the eight missing" || bad "partial: exit $rc $(grep -m1 coverage "$TMP/out")"
run "$G" "$TMP/one.h5" --cases '^len005$'
[ $rc = 0 ] && ok "--cases selects the subset on purpose: exit 0" || bad "--cases: exit $rc"
run "$G" "$TMP/one.h5" --cases 'nomatch'
[ $rc = 3 ] && ok "--cases matching nothing: exit 3" || bad "--cases nothing: exit $rc"
cp "$TMP/act.h5" "$TMP/extra.h5"
$PY -c "
import h5py; f=h5py.File('$TMP/extra.h5','r+'); f.copy(f['cases/len005'], f['cases'], 'len005_mine')"
run "$G" "$TMP/extra.h5"
[ $rc = 2 ] && grep -q "1 ACTUAL case with no golden counterpart: len005_mine" "$TMP/out" \
  && ok "an ACTUAL case with no golden counterpart: exit 2 naming it" || bad "extra case: exit $rc"

# ---- Done-when 4: HF layout and canonical layout give the same verdicts and numbers ----------
cp "$TMP/act.h5" "$TMP/bug.h5"
$PY -c "
import h5py; f=h5py.File('$TMP/bug.h5','r+')
for p in ['cases/len065/prefill/logits','cases/len065/prefill/state/layer_03/v_cache','cases/cont/decode/logits','cases/len002/prefill/hidden']:
    d=f[p]; a=d[...]; a[(0,)*(a.ndim-1)+(5,)]+=0.05; d[...]=a"
for src in act bug; do
  $PY "$MK" --variant hf "$TMP/$src.h5" "$TMP/$src.hf.h5"
  "$QC" diff "$G" "$TMP/$src.h5" --json "$TMP/$src.c.json" >/dev/null 2>&1; rc1=$?
  "$QC" diff "$G" "$TMP/$src.hf.h5" --json "$TMP/$src.h.json" >"$TMP/out" 2>&1; rc2=$?
  $PY - "$TMP/$src.c.json" "$TMP/$src.h.json" >"$TMP/cmp" 2>&1 <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
def rows(r):
    out = {}
    for x in r["checks"]:
        if x["check"] == "layout":
            continue
        x = {k: v for k, v in x.items() if k not in ("seconds", "golden", "detail", "h5diff")}
        out[(x["case"], x["check"])] = x
    return out
ra, rb = rows(a), rows(b)
assert ra.keys() == rb.keys(), sorted(set(ra) ^ set(rb))
for k in ra:
    assert ra[k] == rb[k], (k, ra[k], rb[k])
print(len(ra), "rows identical;", sum(1 for v in ra.values() if v["verdict"] == "FAIL"), "FAIL")
EOF
  [ $? = 0 ] && [ $rc1 = $rc2 ] && grep -q "layout auto -> hf" "$TMP/out" \
    && ok "$src: HF-layout and canonical ACTUAL: same exit ($rc1) and rows ($(cat "$TMP/cmp"))" \
    || bad "$src: hf vs canonical: exit $rc1 / $rc2 $(tail -3 "$TMP/cmp")"
done
run "$G" "$TMP/act.hf.h5" --layout canonical
[ $rc = 2 ] && grep -q "fits no canonical layout" "$TMP/out" && ok "--layout canonical refuses HF shapes (exit 2)" \
  || bad "--layout canonical: exit $rc"
run "$G" "$TMP/act.hf.h5" --layout hf
[ $rc = 0 ] && ok "--layout hf accepts them" || bad "--layout hf: exit $rc"
$PY "$MK" --variant llamacpp_conv "$TMP/act.h5" "$TMP/k1.h5"
run "$G" "$TMP/k1.h5"
[ $rc = 0 ] && grep -q "conv states with K-1 columns" "$TMP/out" && ok "llama.cpp K-1-column conv state: exit 0, said in the layout row" \
  || bad "K-1 conv: exit $rc"
$PY -c "
import h5py; f=h5py.File('$TMP/k1.h5','r+'); d=f['cases/len064/prefill/state/layer_01/conv_state']; a=d[...]; a[7,2]+=0.05; d[...]=a"
run "$G" "$TMP/k1.h5"
[ $rc = 1 ] && grep -q "column 2 of 3" "$TMP/out" && ok "a fault in a K-1-column conv state: exit 1 (column 2 of 3)" \
  || bad "K-1 conv fault: exit $rc $(grep -m1 conv_state "$TMP/out")"

# ---- other faults and messages ----------------------------------------------------------------
cp "$TMP/act.h5" "$TMP/tok.h5"
$PY -c "
import h5py; f=h5py.File('$TMP/tok.h5','r+'); d=f['cases/len005/tokens']; a=d[...]; a[2]=(a[2]+1)%64; d[...]=a"
run "$G" "$TMP/tok.h5"
want="$($PY -c "import h5py;a=h5py.File('$G','r')['cases/len005/tokens'][...];print('ACTUAL %d, golden %d'%((a[2]+1)%64,a[2]))")"
[ $rc = 2 ] && grep -q "input mismatch: $TMP/tok.h5: /cases/len005/tokens\[2\]: $want" "$TMP/out" \
  && ok "other inputs: exit 2 naming the input, index and both values" || bad "inputs: exit $rc $(grep -m1 mismatch "$TMP/out")"
cp "$TMP/act.h5" "$TMP/dec.h5"
$PY -c "
import h5py; f=h5py.File('$TMP/dec.h5','r+'); d=f['cases/len005/decode/tokens']; a=d[...]; a[4]=(a[4]+1)%64; d[...]=a"
run "$G" "$TMP/dec.h5"
[ $rc = 1 ] && grep -q "decode.tokens *FAIL */cases/len005/decode/tokens\[4\]" "$TMP/out" \
  && ok "a greedy run that left the golden's decode path: decode.tokens FAIL (exit 1)" || bad "decode tokens: exit $rc"
cp "$TMP/act.h5" "$TMP/hash.h5"
$PY -c "import h5py; f=h5py.File('$TMP/hash.h5','r+'); f.attrs['weights_sha256']='ab'*32"
run "$G" "$TMP/hash.h5"
[ $rc = 1 ] && grep -q "ACTUAL was computed from a different model: weights sha256 abab" "$TMP/out" \
  && ok "another model's weights hash: FAIL (exit 1)" || bad "hash: exit $rc"
cp "$TMP/act.h5" "$TMP/logit.h5"
$PY -c "
import h5py; f=h5py.File('$TMP/logit.h5','r+'); d=f['cases/len005/prefill/logits']; a=d[...]; a[3,11]+=1e-2; d[...]=a"
run "$G" "$TMP/logit.h5"
[ $rc = 1 ] && grep -q "prefill.logits *FAIL" "$TMP/out" && grep -q "index (3, 11)" "$TMP/out" \
  && grep -q "h5diff -r -d" "$TMP/out" && ok "a logit off by 1e-2: exit 1 at (3, 11), with an h5diff line" \
  || bad "logit fault: exit $rc"
$PY "$MK" --variant last_row "$TMP/logit.h5" "$TMP/logit_last.h5"
run "$G" "$TMP/logit_last.h5"
[ $rc = 0 ] && ok "last-row-only ACTUAL: compared on its row only (the fault at row 3 of 5 is not in it)" || bad "last row: exit $rc"
$PY -c "
import h5py; f=h5py.File('$TMP/logit_last.h5','r+'); d=f['cases/len005/prefill/logits']; a=d[...]; a[9]+=1e-2; d[...]=a"
run "$G" "$TMP/logit_last.h5"
[ $rc = 1 ] && grep -q "\[position 4, vocab 9\]" "$TMP/out" && noadvice \
  && ok "a fault in a last-row-only ACTUAL: exit 1 at position 4 (no h5diff / --dump-actual advice)" || bad "last-row fault: exit $rc"

# ---- bad input: exit 2 naming the file and the dataset ----------------------------------------
cp "$TMP/act.h5" "$TMP/int.h5"
$PY -c "
import h5py,numpy as np; f=h5py.File('$TMP/int.h5','r+'); a=f['cases/len005/prefill/logits'][...]; del f['cases/len005/prefill/logits']; f['cases/len005/prefill/logits']=a.astype(np.int32)"
run "$G" "$TMP/int.h5"
[ $rc = 2 ] && grep -q "int.h5: /cases/len005/prefill/logits: not a float dataset" "$TMP/out" && ok "int logits: exit 2 naming file and dataset" || bad "int logits: exit $rc"
cp "$TMP/act.h5" "$TMP/shape.h5"
$PY -c "
import h5py; f=h5py.File('$TMP/shape.h5','r+'); a=f['cases/len005/prefill/state/layer_03/k_cache'][...]; del f['cases/len005/prefill/state/layer_03/k_cache']; f['cases/len005/prefill/state/layer_03/k_cache']=a[:, :, :8]"
run "$G" "$TMP/shape.h5"
[ $rc = 2 ] && grep -q "shape.h5: /cases/len005/prefill/state/layer_03/k_cache: shape \[1,5,8\] fits no layout" "$TMP/out" \
  && ok "a shape that fits no layout: exit 2 naming file and dataset" || bad "shape: exit $rc $(grep -m1 fits "$TMP/out")"
cp "$TMP/act.h5" "$TMP/dup.h5"
$PY -c "import h5py; f=h5py.File('$TMP/dup.h5','r+'); f['cases/len005_again']=f['cases/len005']"
run "$G" "$TMP/dup.h5"
[ $rc = 2 ] && grep -q "/cases/len005 and /cases/len005_again: duplicated case" "$TMP/out" && ok "a duplicated case: exit 2" || bad "dup: exit $rc"
run "$TMP/act.h5" "$G"
[ $rc = 2 ] && grep -q "this is a golden, not a runtime's output" "$TMP/out" && grep -q "arguments look swapped" "$TMP/out" \
  && ok "golden and ACTUAL swapped: exit 2, said so" || bad "swapped: exit $rc"
run "$G" "$SRC/fixtures/tiny-f32-tied-flat/golden.h5"
[ $rc = 2 ] && grep -q "this is a golden" "$TMP/out" && ok "a golden passed as ACTUAL: exit 2" || bad "golden as actual: exit $rc"
run "$TMP/minimal.h5" "$TMP/act.h5"
[ $rc = 2 ] && grep -q "reads as an ACTUAL file, not a golden" "$TMP/out" && ok "an ACTUAL passed as GOLDEN: exit 2, said so" || bad "actual as golden: exit $rc"
run "$G" "$G"
[ $rc = 2 ] && grep -q "are the same file" "$TMP/out" && ok "the golden twice: exit 2" || bad "same file: exit $rc"
head -c 40000 "$TMP/act.h5" >"$TMP/trunc.h5"
run "$G" "$TMP/trunc.h5"
[ $rc = 2 ] && grep -q "trunc.h5: cannot open" "$TMP/out" && ok "a truncated ACTUAL: exit 2 naming it" || bad "truncated: exit $rc"
cp "$TMP/act.h5" "$TMP/other.h5"
$PY -c "
import h5py,json; f=h5py.File('$TMP/other.h5','r+'); c=json.loads(f.attrs['config_json']); c.setdefault('text_config',c)['vocab_size']=512; f.attrs['config_json']=json.dumps(c)"
run "$G" "$TMP/other.h5"
[ $rc = 1 ] && grep -q "ACTUAL was computed from a different model: its config_json differs" "$TMP/out" \
  && ok "another model's config_json: FAIL" || bad "other config: exit $rc $(grep -m1 -E 'FAIL|ERROR' "$TMP/out")"
run "$G"
[ $rc = 2 ] && ok "one file only: exit 2" || bad "one file: exit $rc"
run "$G" "$TMP/missing.h5"
[ $rc = 2 ] && grep -q "$TMP/missing.h5" "$TMP/out" && ok "missing ACTUAL: exit 2 naming it" || bad "missing file: exit $rc"
run "$G" "$TMP/act.h5" --layout square
[ $rc = 2 ] && ok "--layout square: exit 2" || bad "--layout square: exit $rc"
cp "$TMP/act.h5" "$TMP/keep.h5"
run "$G" "$TMP/keep.h5" --json "$TMP/keep.h5"
[ $rc = 2 ] && cmp -s "$TMP/act.h5" "$TMP/keep.h5" && ok "--json onto the ACTUAL: refused, the file untouched" || bad "--json onto input: exit $rc"

# ---- directories: paired by relative path, one report ------------------------------------------
mkdir -p "$TMP/gd/x" "$TMP/ad/x"
cp "$G" "$TMP/gd/a.h5"; cp "$G" "$TMP/gd/x/b.h5"
cp "$TMP/act.h5" "$TMP/ad/a.h5"; cp "$TMP/act.hf.h5" "$TMP/ad/x/b.h5"
run "$TMP/gd" "$TMP/ad" --json "$TMP/dir.json"
[ $rc = 0 ] && $PY -c "
import json; r=json.load(open('$TMP/dir.json')); g=sorted({x['golden'] for x in r['checks']}); assert len(g)==2, g" \
  && ok "GOLDEN_DIR ACTUAL_DIR: both pairs in one report, exit 0" || bad "dirs: exit $rc"
cp "$TMP/act.h5" "$TMP/ad/c.h5"
run "$TMP/gd" "$TMP/ad"
[ $rc = 2 ] && grep -q "1 ACTUAL file with no golden at the same relative path" "$TMP/out" && ok "an ACTUAL file with no golden: exit 2 naming it" || bad "extra file: exit $rc"
rm "$TMP/ad/c.h5" "$TMP/ad/x/b.h5"
run "$TMP/gd" "$TMP/ad"
[ $rc = 1 ] && grep -q "no ACTUAL file for this golden: $TMP/ad/x/b.h5" "$TMP/out" && ok "a golden with no ACTUAL file: exit 1" || bad "missing actual file: exit $rc"
run "$TMP/gd" "$TMP/act.h5"
[ $rc = 2 ] && ok "a directory and a file: exit 2" || bad "dir + file: exit $rc"

[ $advice = 0 ] && ok "no diff output suggests --dump-actual (which diff rejects)" || bad "$advice diff runs suggested --dump-actual"
echo "# $pass passed, $fail failed"
[ $fail = 0 ]
