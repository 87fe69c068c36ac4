#!/usr/bin/env bash
# test_check.sh <qwen-conform> <source-dir> — CLI behaviour of `qwen-conform [check]`:
# exit codes (0 / 1 / 2 / 3), --list / --filter / --shard, JSON + JUnit reports (parsed with
# python, JUnit validated against tests/data/junit.xsd with xmllint when installed), the
# console summary line, --version, and a small real run on one fixture.
set -u
QC="$1"
SRC="$2"
FIX="$SRC/fixtures"
ONE="$FIX/tiny-f32-tied-flat"
POL="$FIX/tolerances.json"
PY=/usr/bin/python3
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fails=0

ok()   { echo "ok   - $*"; }
bad()  { echo "FAIL - $*"; fails=$((fails + 1)); }
# expect_rc CODE DESCRIPTION -- command...
expect_rc() {
  local want="$1" what="$2"; shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok "$what (exit $rc)"; else
    bad "$what: exit $rc, expected $want"; tail -n 20 "$TMP/out" "$TMP/err"; fi
}

# ---- usage / I/O errors: exit 2 -------------------------------------------------------------
expect_rc 2 "no arguments" -- "$QC"
expect_rc 2 "unknown command" -- "$QC" frobnicate
expect_rc 2 "misspelt command" -- "$QC" chek
grep -q "unknown command 'chek' (did you mean 'check'?)" "$TMP/err" && ok "did you mean 'check'" \
  || bad "no did-you-mean for 'chek'"
expect_rc 2 "misspelt backend" -- "$QC" --golden "$ONE" --backend optimised
grep -q "did you mean 'optimized'" "$TMP/err" && ok "did you mean 'optimized'" \
  || bad "no did-you-mean for 'optimised'"
expect_rc 2 "check without --golden" -- "$QC" check
expect_rc 2 "unknown option" -- "$QC" --golden "$ONE" --frobnicate
expect_rc 2 "a misspelt option" -- "$QC" --goldne "$ONE"
grep -q "unknown option '--goldne' (did you mean '--golden'?)" "$TMP/err" &&
  ok "--goldne: did you mean '--golden'" || bad "--goldne: $(cat "$TMP/err")"
expect_rc 2 "bad --backend" -- "$QC" --golden "$ONE" --backend gpu
expect_rc 2 "bad --mode" -- "$QC" --golden "$ONE" --mode fast
expect_rc 2 "bad --shard" -- "$QC" --golden "$ONE" --shard 3/2
expect_rc 2 "bad --filter regex" -- "$QC" --golden "$ONE" --filter '('
grep -q "bad regex" "$TMP/err" && ok "bad regex is named" || bad "bad regex message"
# (a partial policy is merged over the built-in defaults; an unknown class is still an error)
echo '{"schema_version": 1, "defaults": {"logit": {"atol": 0.01}}}' > "$TMP/badpol.json"
expect_rc 2 "invalid policy file" -- "$QC" --golden "$ONE" --policy "$TMP/badpol.json"
grep -q "badpol.json" "$TMP/err" && ok "policy error names the file" || bad "policy error message"
expect_rc 2 "missing golden path" -- "$QC" --golden "$TMP/nope"
mkdir -p "$TMP/corrupt"; echo "not hdf5" > "$TMP/corrupt/x.h5"
expect_rc 2 "corrupt golden file" -- "$QC" --golden "$TMP/corrupt" --policy "$POL"
grep -q "x.h5" "$TMP/out" "$TMP/err" && ok "corrupt file is named" || bad "corrupt file not named"
expect_rc 2 "unwritable --json" -- "$QC" --golden "$ONE" --json /nonexistent-dir/r.json

# ---- nothing to check: exit 3 ---------------------------------------------------------------
mkdir -p "$TMP/empty"
expect_rc 3 "empty directory never passes" -- "$QC" --golden "$TMP/empty"
expect_rc 3 "filter matching nothing" -- "$QC" --golden "$ONE" --filter 'no-such-case' --policy "$POL"
expect_rc 3 "--list with a filter matching nothing" -- "$QC" --golden "$ONE" --list --filter 'zzz'

# ---- --version / --help ---------------------------------------------------------------------
expect_rc 0 "--version" -- "$QC" --version
grep -q "^qwen-conform [0-9]" "$TMP/out" && grep -q "optimized backend:" "$TMP/out" \
  && ok "--version names the version and the optimized backend's ISA" || bad "--version output"
expect_rc 0 "--help" -- "$QC" --help
expect_rc 0 "check --help" -- "$QC" check --help
grep -q -- "--dump-actual" "$TMP/out" && ok "check --help lists options" || bad "check --help"

# ---- --list / --filter / --shard ------------------------------------------------------------
expect_rc 0 "--list" -- "$QC" --golden "$ONE" --list --backend reference
n=$(wc -l < "$TMP/out")
ncases=$($PY -c "import h5py,sys; print(len(h5py.File(sys.argv[1],'r')['cases']))" "$ONE/golden.h5")
[ "$n" -eq $((ncases * 3)) ] && ok "--list: $n ids = $ncases cases x 3 modes" || bad "--list printed $n ids, expected $((ncases * 3))"
grep -qx "tiny-f32-tied-flat/len005/reference/dynamic" "$TMP/out" && ok "--list id format" || bad "--list id format"
"$QC" --golden "$ONE" --list --backend reference --shard 1/2 > "$TMP/s1"
"$QC" --golden "$ONE" --list --backend reference --shard 2/2 > "$TMP/s2"
if [ -s "$TMP/s1" ] && [ -s "$TMP/s2" ] && [ -z "$(comm -12 <(sort "$TMP/s1") <(sort "$TMP/s2"))" ] \
   && diff -q <(sort "$TMP/s1" "$TMP/s2") <(sort "$TMP/out") >/dev/null; then
  ok "--shard 1/2 + 2/2 partition the ids"; else bad "--shard does not partition"; fi
"$QC" --golden "$ONE" --list --filter '/len00[12]/optimized/nokv$' > "$TMP/f"
[ "$(wc -l < "$TMP/f")" -eq 2 ] && ok "--filter selects backend and mode" || { bad "--filter"; cat "$TMP/f"; }

# ---- a small real run with every report ---------------------------------------------------------
expect_rc 0 "real run (len001, len005; all backends and modes)" -- \
  "$QC" -v --golden "$ONE" --filter '/len00[15]/' --json "$TMP/r.json" --junit "$TMP/r.xml"
last=$(tail -n 1 "$TMP/out")
if echo "$last" | grep -qE '^[0-9]+ passed, 0 failed(, [0-9]+ skipped)?$'; then ok "summary line: $last"; else bad "summary line: '$last'"; fi
[ "$(grep -cE '^[0-9]+ passed, [0-9]+ failed' "$TMP/out")" -eq 1 ] && ok "one summary line" || bad "more than one summary line"
for c in prefill.logits prefill.hidden argmax decode.logits prefill.recurrent_state decode.k_cache \
         static_eq_dynamic chunked_eq_recurrent garbage_reset unused_slots model_hash; do
  grep -q " $c " "$TMP/out" && ok "table has $c" || bad "table lacks $c"
done
if grep -q "optimized" "$TMP/out"; then
  for c in opt_eq_ref threads_bitwise; do grep -q " $c " "$TMP/out" && ok "table has $c" || bad "table lacks $c"; done
fi
grep -q "policy $POL" "$TMP/err" && ok "fixtures/tolerances.json picked by default" || bad "default policy not the fixture file"
$PY - "$TMP/r.json" <<'EOF' && ok "JSON report parses (schema_version, checks, metrics)" || bad "JSON report"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["schema_version"] == 1 and r["tool"] == "qwen-conform" and r["isa"]
assert r["summary"]["failed"] == 0 and r["summary"]["passed"] == len([c for c in r["checks"] if c["verdict"] == "PASS"])
lg = [c for c in r["checks"] if c["check"] == "prefill.logits"]
assert lg and all("max_abs" in c["metrics"] and "kl_max" in c["metrics"]["logits"] for c in lg)
assert all(c["tolerance"]["atol"] > 0 for c in lg)
EOF
if command -v xmllint >/dev/null 2>&1; then
  xmllint --noout --schema "$SRC/tests/data/junit.xsd" "$TMP/r.xml" 2>"$TMP/xerr" \
    && ok "JUnit validates against tests/data/junit.xsd" || { bad "JUnit schema"; cat "$TMP/xerr"; }
  xmllint --noout --schema "$SRC/tests/data/junit-jenkins.xsd" "$TMP/r.xml" 2>"$TMP/xerr" \
    && ok "JUnit validates against tests/data/junit-jenkins.xsd (Jenkins xunit plugin)" \
    || { bad "JUnit Jenkins schema"; cat "$TMP/xerr"; }
else
  echo "note - xmllint not installed (libxml2-utils): JUnit schema check skipped"
fi
$PY - "$TMP/r.xml" "$TMP/r.json" <<'EOF' && ok "JUnit parses; one testcase per check" || bad "JUnit structure"
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
cases = root.findall(".//testcase")
n = len(json.load(open(sys.argv[2]))["checks"])
assert len(cases) == n, (len(cases), n)
names = {(c.get("classname"), c.get("name")) for c in cases}
assert len(names) == n, "duplicate classname+name"
assert ("tiny-f32-tied-flat.len005", "reference.dynamic.prefill.logits") in names
EOF
# reports are not left behind as temp files
ls "$TMP" | grep -q '\.tmp\.' && bad "temp report files left" || ok "no temp files left"

# ---- conformance failure: exit 1 (a policy too strict for float32 noise) ---------------------
cat > "$TMP/strict.json" <<'EOF'
{"schema_version": 1, "defaults": {
 "logits": {"atol": 0, "rtol": 0}, "hidden": {"atol": 0, "rtol": 0},
 "k_cache": {"atol": 0, "rtol": 0}, "v_cache": {"atol": 0, "rtol": 0},
 "conv_state": {"atol": 0, "rtol": 0}, "recurrent_state": {"atol": 0, "rtol": 0}}}
EOF
expect_rc 1 "zero tolerance fails" -- "$QC" --golden "$ONE" --policy "$TMP/strict.json" \
  --filter '/len001/reference/dynamic$' --quiet
grep -q "Mismatched elements:" "$TMP/out" && ok "torch-style summary printed" || bad "no torch-style summary"
grep -q " PASS " "$TMP/out" && bad "--quiet printed PASS rows" || ok "--quiet hides PASS rows"
# a --filter that names a check selects nothing: exit 3, and it says what --filter selects
expect_rc 3 "--filter with a check name" -- "$QC" check --golden "$ONE" --filter garbage_reset
grep -q "names a check (garbage_reset): --filter selects cases, backends and modes" "$TMP/err" \
  && grep -q "^0 passed, 0 failed, 0 skipped" "$TMP/out" && ok "--filter garbage_reset: the hint and the summary" \
  || bad "--filter garbage_reset: no hint: $(cat "$TMP/err")"
# the default console: the failing rows, no PASS / SKIP row, the verdict and the summary; -v: every row
expect_rc 1 "default console" -- "$QC" check --golden "$ONE" --policy "$TMP/strict.json" \
  --filter '/len00[15]/reference/dynamic$'
grep -qE " (PASS|SKIP) " "$TMP/out" && bad "the default console printed PASS / SKIP rows" \
  || ok "the default console hides PASS and SKIP rows"
grep -qE "^tiny-f32-tied-flat/len001 +reference +dynamic +prefill.logits +FAIL" "$TMP/out" \
  && grep -q "^verdict reference: FAIL" "$TMP/out" && grep -qE "^[0-9]+ passed, [1-9][0-9]* failed" "$TMP/out" \
  && ok "the default console: the FAIL row, the verdict, the summary" || bad "default console: $(tail -3 "$TMP/out")"
expect_rc 1 "-v console" -- "$QC" check -v --golden "$ONE" --policy "$TMP/strict.json" \
  --filter '/len00[15]/reference/dynamic$'
grep -q " PASS " "$TMP/out" && grep -q " FAIL " "$TMP/out" && grep -q "case len005 done" "$TMP/err" \
  && ok "-v prints every row and a line per case" || bad "-v: no PASS rows / case lines"
# an override with a reason relaxes exactly what it names
cat > "$TMP/ovr.json" <<'EOF'
{"schema_version": 1, "defaults": {
 "logits": {"atol": 0, "rtol": 0}, "hidden": {"atol": 1, "rtol": 0},
 "k_cache": {"atol": 1, "rtol": 0}, "v_cache": {"atol": 1, "rtol": 0},
 "conv_state": {"atol": 1, "rtol": 0}, "recurrent_state": {"atol": 1, "rtol": 0}},
 "overrides": [{"tensor": "logits", "atol": 1, "reason": "test: relax logits"}]}
EOF
expect_rc 0 "override with reason relaxes logits" -- "$QC" --golden "$ONE" --policy "$TMP/ovr.json" \
  --filter '/len001/reference/dynamic$' --quiet

# ---- console: no header above nothing; the summary line even when nothing ran -------------
expect_rc 0 "--quiet passing run" -- "$QC" --golden "$ONE" --filter '/len001/reference/dynamic$' --quiet
grep -q "KEY NUMBERS" "$TMP/out" && bad "--quiet printed a column header above no row" ||
  ok "--quiet: no column header when no row is printed"
tail -1 "$TMP/out" | grep -Eq "^[1-9][0-9]* passed, 0 failed, [0-9]+ skipped$" &&
  ok "--quiet: the summary line ends the output" || bad "--quiet: last line '$(tail -1 "$TMP/out")'"
expect_rc 3 "a filter that matches nothing" -- "$QC" --golden "$ONE" --filter 'no-such-case-xyz'
tail -1 "$TMP/out" | grep -q "^0 passed, 0 failed, 0 skipped$" &&
  ok "nothing selected: '0 passed, 0 failed, 0 skipped' still ends the output" ||
  bad "nothing selected: last line '$(tail -1 "$TMP/out")'"
grep -q "KEY NUMBERS" "$TMP/out" && bad "nothing selected: a column header above no row" ||
  ok "nothing selected: no column header"

# ---- console: a progress line on a terminal only ----------------------------------------------
if command -v script > /dev/null 2>&1; then
  script -qc "'$QC' --golden '$ONE' --filter '/len001/reference/dynamic\$' --quiet" /dev/null \
    > "$TMP/tty.out" 2>&1
  grep -q "check: file 1/1 tiny-f32-tied-flat/golden.h5" "$TMP/tty.out" &&
    ok "a terminal: the progress line (file, elapsed)" || bad "a terminal: no progress line: $(head -c 300 "$TMP/tty.out")"
fi
"$QC" --golden "$ONE" --filter '/len001/reference/dynamic$' --quiet > /dev/null 2> "$TMP/err"
grep -q "check: file" "$TMP/err" && bad "not a terminal: a progress line" ||
  ok "not a terminal: no progress line"

# ---- console: the BACKEND column fits a long runtime name -----------------------------------
expect_rc 0 "an exec runtime's rows" -- "$QC" -v --golden "$ONE" --filter '/len001/' --mode static \
  --backend "exec:/usr/bin/python3 $SRC/tests/adapters/minimal_adapter.py"
/usr/bin/python3 - "$TMP/out" <<'EOF' && ok "exec:minimal_adapter.py rows keep the MODE column in line" || bad "the MODE column moved: $(grep -m2 'exec:' "$TMP/out")"
import sys
lines = open(sys.argv[1]).read().splitlines()
head = next(l for l in lines if l.startswith("CASE "))
col = head.index(" MODE ") + 1
rows = [l for l in lines if " exec:minimal_adapter.py " in l]
assert rows, "no exec rows"
for l in rows:
    word = l[col:].split(" ")[0]
    assert word in ("static", "dynamic", "nokv", "-"), (col, l)
EOF

echo "test_check.sh: $fails failure(s)"
[ "$fails" -eq 0 ]
