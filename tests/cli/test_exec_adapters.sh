#!/usr/bin/env bash
# test_exec_adapters.sh <qwen-conform> <source-dir> — the exec: backend end to end with Python
# adapters built on adapters/python/qwen_conform_adapter:
#   * the float32 golden adapter (adapters/golden/qc_golden_adapter.py) passes the battery on a
#     small fixture: exit 0, PASS rows for prefill.logits, decode.logits, prefill.hidden, the
#     state buffers, garbage_reset, unused_slots, static_eq_dynamic, and no FAIL row;
#   * each mutant of tests/adapters/mutants.py (the same adapter with ONE injected bug) fails
#     with exit 1 and the check that must catch it FAILs.
# Skips (exit 0, "SKIP: ...") when this qwen-conform has no exec: backend (check --help does not
# mention it) or /usr/bin/python3 lacks torch / numpy.
set -u
QC="$1"
SRC="$2"
PY=/usr/bin/python3
FIX="$SRC/fixtures/tiny-f32-tied-flat"
POL="$SRC/fixtures/tolerances.json"
ADAPTER="$PY '$SRC/adapters/golden/qc_golden_adapter.py'"
MUTANTS="$PY '$SRC/tests/adapters/mutants.py'"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fails=0

ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }

if ! "$QC" check --help 2>&1 | grep -q 'exec:'; then
  echo "SKIP: $QC has no exec: backend (check --help does not mention exec:)"
  exit 0
fi
if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
  echo "SKIP: $PY cannot import torch and numpy (Debian python3-torch python3-numpy)"
  exit 0
fi

# count FILE VERDICT CHECK_REGEX [MODE] -> the number of JSON report rows that match
count() {
  "$PY" - "$@" <<'PYEOF'
import json, re, sys
path, verdict, check = sys.argv[1:4]
mode = sys.argv[4] if len(sys.argv) > 4 else None
try:
    rows = json.load(open(path))["checks"]
except (OSError, ValueError, KeyError):
    print(-1)
    sys.exit(0)
print(sum(1 for r in rows if r.get("verdict") == verdict and re.fullmatch(check, r.get("check", ""))
          and (mode is None or r.get("mode") == mode)))
PYEOF
}

# failed FILE -> "mode check" of every FAIL / ERROR row, unique, for diagnostics
failed() {
  "$PY" - "$1" <<'PYEOF'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))["checks"]
except (OSError, ValueError, KeyError) as e:
    print("(no JSON report: %s)" % e)
    sys.exit(0)
seen = sorted({"%s %s %s" % (r["verdict"], r["mode"], r["check"]) for r in rows
               if r["verdict"] in ("FAIL", "ERROR")})
print(", ".join(seen) or "(none)")
PYEOF
}

# run LABEL FILTER COMMAND -> $TMP/LABEL.{json,out,err}; exit code in $rc
run() {
  local label="$1" filter="$2" cmd="$3"
  "$QC" check --golden "$FIX" --policy "$POL" --filter "$filter" --backend "exec:$cmd" \
    --quiet --json "$TMP/$label.json" >"$TMP/$label.out" 2>"$TMP/$label.err"
  rc=$?
}

# expect_pass JSON CHECK_REGEX [MODE]: at least one PASS row
expect_pass() {
  local n
  n=$(count "$1" PASS "$2" ${3:+"$3"})
  if [ "$n" -gt 0 ]; then ok "$(basename "$1" .json): $n PASS rows for $2${3:+ ($3)}"
  else bad "$(basename "$1" .json): no PASS row for $2${3:+ ($3)}"; fi
}

# expect_fail LABEL DESCRIPTION CHECK_REGEX [MODE]: exit 1 and at least one FAIL row
expect_fail() {
  local label="$1" what="$2" n
  n=$(count "$TMP/$label.json" FAIL "$3" ${4:+"$4"})
  if [ "$rc" -eq 1 ] && [ "$n" -gt 0 ]; then
    ok "$label: exit 1, $n FAIL rows for $what"
  else
    bad "$label: exit $rc (expected 1), $n FAIL rows for $what; failing: $(failed "$TMP/$label.json")"
    tail -n 15 "$TMP/$label.out" "$TMP/$label.err"
  fi
}

# ---- the float32 golden adapter passes -------------------------------------------------------
run golden '/(len005|cont)/' "$ADAPTER"
J="$TMP/golden.json"
if [ "$rc" -eq 0 ]; then ok "golden adapter: exit 0"; else
  bad "golden adapter: exit $rc; failing: $(failed "$J")"; tail -n 30 "$TMP/golden.out" "$TMP/golden.err"; fi
for c in prefill.logits decode.logits prefill.hidden argmax \
         prefill.k_cache prefill.v_cache prefill.conv_state prefill.recurrent_state \
         decode.k_cache decode.v_cache decode.conv_state decode.recurrent_state \
         garbage_reset unused_slots static_eq_dynamic chunked_eq_recurrent; do
  expect_pass "$J" "$c"
done
for m in static dynamic nokv; do expect_pass "$J" prefill.logits "$m"; done
n=$(count "$J" FAIL '.*')
[ "$n" -eq 0 ] && ok "golden adapter: no FAIL row" || bad "golden adapter: $n FAIL rows: $(failed "$J")"

# ---- the mutants ---------------------------------------------------------------------------
SMALL='/len00[25]/'
run good "$SMALL" "$MUTANTS good"
if [ "$rc" -eq 0 ]; then ok "mutants.py good: exit 0 (the mutant launcher itself is clean)"; else
  bad "mutants.py good: exit $rc; failing: $(failed "$TMP/good.json")"; tail -n 15 "$TMP/good.err"; fi

run conv-not-reset "$SMALL" "$MUTANTS conv-not-reset"
expect_fail conv-not-reset "garbage_reset or *.conv_state" '(garbage_reset|(prefill|decode)\.conv_state)'

run static-rope-p1 "$SMALL" "$MUTANTS static-rope-p1"
expect_fail static-rope-p1 "static_eq_dynamic" 'static_eq_dynamic'
n=$(count "$TMP/static-rope-p1.json" FAIL '(prefill|decode)\.(logits|k_cache)')
[ "$n" -gt 0 ] && ok "static-rope-p1: $n FAIL rows for logits / k_cache against the golden" \
  || bad "static-rope-p1: no logits / k_cache failure against the golden"

run kv-slots-written "$SMALL" "$MUTANTS kv-slots-written"
expect_fail kv-slots-written "unused_slots" 'unused_slots'
n=$(count "$TMP/kv-slots-written.json" FAIL '(?!unused_slots$).*')
[ "$n" -eq 0 ] && ok "kv-slots-written: unused_slots is the only failing check" \
  || bad "kv-slots-written: other checks fail too: $(failed "$TMP/kv-slots-written.json")"

run fill-lies "$SMALL" "$MUTANTS fill-lies"
expect_fail fill-lies "garbage_reset" 'garbage_reset'

# decode-only localisation: the dynamic prefill is right, one-token calls drift the state
run decode-drift 'len005/.*/dynamic' "$MUTANTS decode-drift"
expect_fail decode-drift "decode.logits (dynamic)" 'decode\.logits' dynamic
n=$(count "$TMP/decode-drift.json" FAIL 'prefill\.logits' dynamic)
[ "$n" -eq 0 ] && ok "decode-drift: dynamic prefill.logits passes" || bad "decode-drift: prefill fails too"
"$PY" - "$TMP/decode-drift.json" <<'PYEOF' && ok "decode-drift: localised to decode step 1, layer 0 (from the decode state)" || bad "decode-drift: localisation text"
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["checks"]
        if r["check"] == "decode.logits" and r["mode"] == "dynamic" and r["verdict"] == "FAIL"]
d = rows[0]["detail"]
assert "the divergence starts in decode: first failing step 1 (position 6" in d, d
assert "First layer whose state diverges after decode: layer 0 (linear_attention, recurrent_state)" in d, d
assert rows[0]["first_divergent_layer"] == {"kind": "layer", "layer": 0, "decode_step": 1,
                                           "source": "decode_hidden"}, rows[0]
assert ("At decode step 1 the first divergent layer (vs the reference backend on the same inputs) "
        "is layer 0 (linear_attention)") in d, d
PYEOF

echo "test_exec_adapters: $fails failure(s)"
[ "$fails" -eq 0 ]
