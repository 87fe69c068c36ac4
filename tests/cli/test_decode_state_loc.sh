#!/usr/bin/env bash
# test_decode_state_loc.sh <qwen-conform> <source-dir> — a decode-only state bug whose logits
# stay inside their tolerance (#26 item 8): tests/adapters/mutants.py decode-state-quiet scales
# layer 1's recurrent state by 1.0002 at every decode step. The decode logits PASS; the decode
# state rows FAIL and name layer 1 (at or before, after layer 0) and the last decode step — not
# "after the final norm" as when only failing logits started the per-layer state localisation.
set -u
QC="$1"
SRC="$2"
PY=/usr/bin/python3
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$QC" check --golden "$SRC/fixtures/tiny-f32-tied-flat/golden.h5" --mode dynamic --filter '/len064/' \
  --backend "exec:$PY $SRC/tests/adapters/mutants.py decode-state-quiet" --json "$TMP/r.json" \
  > "$TMP/out" 2>&1
rc=$?
fails=0
[ $rc -eq 1 ] && echo "ok   - exit 1" || { echo "FAIL - exit $rc"; fails=1; }
"$PY" - "$TMP/r.json" <<'PYEOF' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
rows = {r["check"]: r for r in d["checks"] if r["case"] == "len064"}
assert rows["decode.logits"]["verdict"] == "PASS", rows["decode.logits"]["message"]
r = rows["decode.recurrent_state"]
assert r["verdict"] == "FAIL", r["verdict"]
loc = r["first_divergent_layer"]
assert loc["kind"] == "at_or_before_layer" and loc["layer"] == 1 and loc["after_layer"] == 0, loc
assert loc["decode_step"] == 7 and loc["source"] == "state", loc
assert "every decode step's logits pass" in r["detail"], r["detail"]
assert "after the final norm" not in r["detail"]
print("ok   - decode.logits PASS; decode.recurrent_state FAIL at or before layer 1 (after 0), step 7")
PYEOF
# the console: the summary (verdict, causes, counts) in at most 10 lines, one cause naming layer 1's
# recurrent state and the step; the JSON cause: rule decode_only, layer 1, step 7, every failing row
n=$(sed -n '/^verdict /,$p' "$TMP/out" | wc -l)
if [ "$n" -le 10 ] && grep -qE '^  - \[[0-9]+ rows\] decode only, from step 7 .*layer 1 recurrent_state' "$TMP/out"; then
  echo "ok   - console: a $n-line summary, one cause: decode only, from step 7, layer 1 recurrent_state"
else echo "FAIL - console summary ($n lines)"; sed -n '/^verdict /,$p' "$TMP/out"; fails=$((fails + 1)); fi
"$PY" - "$TMP/r.json" <<'PYEOF' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
fail = [i for i, r in enumerate(d["checks"]) if r["verdict"] in ("FAIL", "ERROR")]
cs = d["causes"]
assert d["verdict"] == {"exec:mutants.py": "FAIL"}, d["verdict"]
assert len(cs) == 1, [c["cause"] for c in cs]   # the chunk sweep repeats it: not a second cause
c = cs[0]
assert c["rule"] == "decode_only" and c["layer"] == 1 and c["step"] == 7, c
assert sorted(c["rows"]) == fail, (c["rows"], fail)
print("ok   - JSON: one cause, decode_only, layer 1, step 7, explaining all %d failing rows" % len(fail))
PYEOF
echo "$fails failed"
[ $fails -eq 0 ]
