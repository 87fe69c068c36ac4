#!/usr/bin/env bash
# test_config_gates.sh — config.json's output gates through the CLI (issue #27 item 4,
# docs/qwen35-model.md 2.2 "Gates").
#   bash tests/cli/test_config_gates.sh <path-to-qwen-conform> <source-dir>
# A copy of a fixture's model directory with output_gate_type "sigmoid" (the gate of another
# architecture, qwen4_exp): `record --model DIR` and `check --model DIR` exit 2 with one message
# naming the file, the field and the value, and write nothing; the same for a nested config
# (text_config.output_gate_type) and for attn_output_gate false. "swish" and "silu" (what
# Qwen3.5-family configs carry) load and reproduce the fixture's golden: they are today's gated
# RMSNorm. Fails if the field is ignored.
set -u
QC="${1:?usage: test_config_gates.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: test_config_gates.sh <qwen-conform> <source-dir>}"

fail=0
pass=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }

FLAT="$SRC/fixtures/tiny-f32-tied-flat"
NESTED="$SRC/fixtures/tiny-bf16-gva-nested"
for f in "$FLAT" "$NESTED"; do
  if [ ! -f "$f/model/config.json" ] || [ ! -f "$f/golden.h5" ]; then
    echo "SKIP: no fixture $f"
    exit 0
  fi
done
TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_gates.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

# copy FIXTURE NAME EDIT: FIXTURE's model directory as $TMP/NAME with one config edit, given as
# "key=json" (a dotted key goes into the object it names, e.g. text_config.output_gate_type)
copy() {
  cp -r "$1/model" "$TMP/$2"
  /usr/bin/python3 - "$TMP/$2/config.json" "$3" <<'EOF'
import json, sys
path, edit = sys.argv[1], sys.argv[2]
key, value = edit.split("=", 1)
c = json.load(open(path))
obj, *rest = key.split(".")
tgt, name = (c[obj], rest[0]) if rest else (c, obj)
tgt[name] = json.loads(value)
json.dump(c, open(path, "w"), indent=2)
EOF
}

# refused NAME WANT: record and check on $TMP/NAME exit 2 with WANT (after the file name) on
# stderr, one line, nothing written
refused() {
  local d="$TMP/$1" want="$TMP/$1/config.json: $2" rc
  "$QC" record --model "$d" --tokens 1,2,3 --out "$TMP/$1.h5" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  if [ $rc = 2 ] && grep -qF -- "$want" "$TMP/err" && [ "$(wc -l <"$TMP/err")" = 1 ] \
     && [ ! -e "$TMP/$1.h5" ] && [ -z "$(ls "$TMP" | grep -F "$1.h5")" ]; then
    ok "record --model ($1): exit 2, '$2'"
  else
    bad "record --model ($1): exit $rc, expected 2 with '$want'; stderr: $(cat "$TMP/err")"
  fi
  "$QC" check --model "$d" --golden "$3" --backend reference --mode static --filter len005 \
    --quiet >"$TMP/out" 2>"$TMP/err"
  rc=$?
  if [ $rc = 2 ] && grep -qF -- "$want" "$TMP/out" "$TMP/err"; then
    ok "check --model ($1): exit 2, '$2'"
  else
    bad "check --model ($1): exit $rc, expected 2 with '$want'; $(cat "$TMP/out" "$TMP/err")"
  fi
}

# loads NAME GOLDEN: record exits 0, and check against the fixture's golden passes (the model
# hash differs: the config's bytes changed, not its math)
loads() {
  local d="$TMP/$1" rc
  "$QC" record --model "$d" --tokens 1,2,3 --decode 1 --out "$TMP/$1.h5" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 0 ] && [ -s "$TMP/$1.h5" ] && ok "record --model ($1): exit 0" \
    || bad "record --model ($1): exit $rc; $(cat "$TMP/err")"
  "$QC" check --model "$d" --golden "$2" --backend reference --mode static --filter len005 \
    --no-hash-check --quiet >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 0 ] && ok "check --model ($1) against the unedited fixture's golden: exit 0" \
    || bad "check --model ($1): exit $rc; $(tail -5 "$TMP/out") $(cat "$TMP/err")"
}

copy "$FLAT" sigmoid 'output_gate_type="sigmoid"'
refused sigmoid "output_gate_type: 'sigmoid' is not supported (swish, silu)" "$FLAT/golden.h5"
copy "$FLAT" gelu 'output_gate_type="gelu"'
refused gelu "output_gate_type: 'gelu' is not supported (swish, silu)" "$FLAT/golden.h5"
copy "$NESTED" nested_sigmoid 'text_config.output_gate_type="sigmoid"'
refused nested_sigmoid "text_config.output_gate_type: 'sigmoid' is not supported (swish, silu)" \
  "$NESTED/golden.h5"
copy "$FLAT" nogate 'attn_output_gate=false'
refused nogate "attn_output_gate: false is not supported" "$FLAT/golden.h5"
copy "$NESTED" nested_nogate 'text_config.attn_output_gate=false'
refused nested_nogate "text_config.attn_output_gate: false is not supported" "$NESTED/golden.h5"

copy "$FLAT" swish 'output_gate_type="swish"'
loads swish "$FLAT/golden.h5"
copy "$FLAT" silu 'output_gate_type="silu"'
loads silu "$FLAT/golden.h5"
copy "$NESTED" nested_swish 'text_config.output_gate_type="swish"'
loads nested_swish "$NESTED/golden.h5"

echo "# $pass passed, $fail failed"
[ "$fail" = 0 ]
