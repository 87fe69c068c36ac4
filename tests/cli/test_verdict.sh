#!/usr/bin/env bash
# test_verdict.sh <qwen-conform> <source-dir> — the verdict per runtime under test (#26):
#   * the minimal exec adapter (open / reset / forward only) is PARTIAL, not a bare "0 failed":
#     the console names its coverage and what each missing capability would unlock; the JSON
#     "verdict" / "coverage" objects hold the same numbers (unlock counts sum to the skips);
#     --min-coverage turns a coverage below it into exit 1, and passes above it;
#   * a built-in backend with an injected porting bug is FAIL; the JUnit report carries the
#     verdict as a property.
set -u
QC="$1"
SRC="$2"
PY=/usr/bin/python3
G="$SRC/fixtures/tiny-f32-tied-flat/golden.h5"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }
MIN="exec:$PY $SRC/tests/adapters/minimal_adapter.py"

"$QC" check --golden "$G" --filter '/(len005|len064)/' --backend "$MIN" \
  --json "$TMP/min.json" --junit "$TMP/min.xml" > "$TMP/min.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "minimal adapter: exit 0 (nothing failed)" || bad "minimal adapter: exit $rc"
grep -q "^verdict exec:minimal_adapter.py: PARTIAL" "$TMP/min.out" \
  && ok "console: PARTIAL" || bad "console: no PARTIAL line"; 
# the default console: no row at all (nothing failed), and the summary in at most 10 lines
n=$(sed -n '/^verdict /,$p' "$TMP/min.out" | wc -l)
[ "$n" -le 10 ] && [ "$(wc -l < "$TMP/min.out")" -eq "$n" ] \
  && ok "console: the whole output is the $n-line summary (<= 10)" \
  || { bad "console: $(wc -l < "$TMP/min.out") lines, summary $n"; cat "$TMP/min.out"; }
grep -qE "^  \+ [0-9] more: .* checks" "$TMP/min.out" && ok "console: the smaller unlocks in one line" \
  || bad "console: no '+ N more' line"
grep -q "+ state_read .* checks: state checks" "$TMP/min.out" \
  && ok "console: state_read's unlock line" || bad "console: no state_read unlock line"
grep -q "CI can insist: --require state_read" "$TMP/min.out" \
  && ok "console: the --require line" || bad "console: no --require line"
# the JSON numbers agree with the rows
"$PY" - "$TMP/min.json" "$TMP/min.out" <<'PYEOF' && ok "JSON verdict / coverage == the rows" || bad "JSON verdict / coverage"
import json, re, sys
d = json.load(open(sys.argv[1]))
be = "exec:minimal_adapter.py"
rows = [r for r in d["checks"] if r["backend"] == be]
run = sum(r["verdict"] in ("PASS", "FAIL", "ERROR") for r in rows)
cap = [r for r in rows if r["verdict"] == "SKIP" and "not announced" in r["message"]]
c = d["coverage"][be]
assert d["verdict"][be] == "PARTIAL", d["verdict"]
assert c["run"] == run and c["skipped_for_capabilities"] == len(cap), (c, run, len(cap))
assert abs(c["ratio"] - run / (run + len(cap))) < 1e-12
assert sum(u["checks"] for u in c["unlock"].values()) == len(cap)
assert c["unlock"]["state_read"]["checks"] == sum("'state_read'" in r["message"] for r in cap)
assert c["ratio"] < 0.5, c["ratio"]        # most of the battery needs a capability
pct = round(100 * c["ratio"])
assert re.search(r"coverage %d %%" % pct, open(sys.argv[2]).read()), pct
print("coverage", c["ratio"], "run", run, "capability skips", len(cap))
PYEOF
grep -q 'property name="verdict:exec:minimal_adapter.py" value="PARTIAL, coverage' "$TMP/min.xml" \
  && ok "JUnit: the verdict property" || bad "JUnit: no verdict property"

"$QC" check --golden "$G" --quiet --filter '/len005/' --backend "$MIN" --min-coverage 90 \
  > "$TMP/mc.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "min-coverage 90" "$TMP/mc.out" && ok "--min-coverage 90: exit 1" \
  || bad "--min-coverage 90: exit $rc"
"$QC" check --golden "$G" --quiet --filter '/len005/' --backend "$MIN" --min-coverage 5 \
  > "$TMP/mc5.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "--min-coverage 5: exit 0" || bad "--min-coverage 5: exit $rc"
"$QC" check --golden "$G" --quiet --filter '/len005/' --backend reference --min-coverage 101 \
  > "$TMP/mc101.out" 2>&1
[ $? -eq 2 ] && ok "--min-coverage 101: usage error" || bad "--min-coverage 101 accepted"

# a porting bug in a built-in backend: FAIL
"$QC" check --golden "$G" --quiet --filter '/len005/' --backend reference \
  --inject-fault norm-no-offset --json "$TMP/f.json" > "$TMP/f.out" 2>&1
rc=$?
"$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d['verdict'].get('reference') != 'FAIL')" "$TMP/f.json" \
  && [ $rc -eq 1 ] && grep -q "^verdict reference: FAIL" "$TMP/f.out" \
  && ok "injected norm bug: verdict FAIL, exit 1" || bad "injected norm bug: exit $rc"

echo "$fails failed"
[ $fails -eq 0 ]
