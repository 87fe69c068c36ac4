#!/usr/bin/env bash
# test_causes.sh <qwen-conform> <source-dir> — root-cause triage (#26 item 2): the failing rows of
# a runtime grouped into a few likely causes, one console line each after the verdict, and the
# JSON report's "causes" [{cause, rule, rows, n_rows, backend, layer, step, block, kind}]:
#   (a) reset() that resets nothing (tests/adapters/causes_mutants.py reset-nothing, and
#       mutants.py conv-not-reset): one cause, "state not reset between sequences", naming
#       garbage_reset, explaining (nearly) every failing row, naming no layer
#   (b) layer 2's MLP 1 % off, hidden and mlp_in announced: "layer 2, MLP"; hidden alone: "layer 2 (mixer or MLP: the hidden states
#       cannot tell ...)"; the same with states only: the interval "at or before layer 3, after
#       layer 2"
#   (c) the same bug through the logits only: "no layer named: announce `hidden` to localise"
#   (d) a decode-only state bug (mutants.py decode-drift): "decode only, from step 1", layer 0's
#       recurrent_state; over every mode: "one-token calls only"
#   (e) --inject-fault static-no-advance: "static prefill only"
#   (f) MoE router (moe-topk-next), the state lifecycle (snapshot-noop) and a clean run (no
#       cause line, "causes": [])
# The exec: scenarios skip (with a note) when /usr/bin/python3 lacks torch / numpy.
set -u
QC="$1"
SRC="$2"
PY=/usr/bin/python3
FIX="$SRC/fixtures"
ONE="$FIX/tiny-f32-tied-flat"
POL="$FIX/tolerances.json"
CM="$PY $SRC/tests/adapters/causes_mutants.py"
MU="$PY $SRC/tests/adapters/mutants.py"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }

# run LABEL RC-EXPECTED args... -> $TMP/LABEL.{out,json}
run() {
  local label="$1" want="$2"; shift 2
  "$QC" check --policy "$POL" --json "$TMP/$label.json" "$@" >"$TMP/$label.out" 2>&1
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok "$label: exit $rc"; else
    bad "$label: exit $rc, expected $want"; tail -n 15 "$TMP/$label.out"; fi
}
# line LABEL FIXED-STRING DESCRIPTION: a console cause line ("  - [N rows] ...") holds it
line() {
  if grep -E '^  - \[[0-9]+ rows?\] ' "$TMP/$1.out" | grep -qF -- "$2"; then ok "$1: $3"; else
    bad "$1: $3 (no cause line with '$2')"; sed -n '/^likely causes/,/^$/p' "$TMP/$1.out"; fi
}
# summary LABEL: the default console's summary (from the first "verdict" line to the end: the
# verdict, the unlocks, the causes, the counts) holds at most 10 lines, and no PASS / SKIP row is
# printed anywhere
summary() {
  local n
  n=$(sed -n '/^verdict /,$p' "$TMP/$1.out" | wc -l)
  if [ "$n" -ge 3 ] && [ "$n" -le 10 ] && ! grep -qE '^[^ ]+ +[^ ]+ +[a-z-]+ +[a-z_.]+ +(PASS|SKIP) ' "$TMP/$1.out"
  then ok "$1: the console summary is $n lines (<= 10), no PASS / SKIP rows"; else
    bad "$1: the console summary is $n lines"; sed -n '/^verdict /,$p' "$TMP/$1.out"; fi
}
# causes LABEL DESCRIPTION <<'PY' ... : python over d (the report), cs (its causes), fail (the
# indices of the FAIL / ERROR rows); an AssertionError fails the test
causes() {
  local label="$1" what="$2" code
  code="$(cat)"
  if "$PY" - "$TMP/$label.json" "$code" > "$TMP/py.out" 2>&1 <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
cs = d["causes"]
fail = [i for i, r in enumerate(d["checks"]) if r["verdict"] in ("FAIL", "ERROR")]
for c in cs:   # the shape of every cause
    assert set(c) >= {"cause", "rule", "rows", "n_rows", "backend", "layer", "step", "block"}, c
    assert c["n_rows"] == len(c["rows"]) > 0 and c["rows"] == sorted(c["rows"]), c
    assert all(d["checks"][i]["backend"] == c["backend"] for i in c["rows"]), c
    assert all(i in fail for i in c["rows"]), c
seen = [i for c in cs for i in c["rows"]]
assert len(seen) == len(set(seen)), "a row in two causes"
assert sorted(seen) == [i for i in fail if d["checks"][i]["backend"] not in ("-", "")], \
    "every failing row of a runtime is in one cause"
exec(sys.argv[2])
PYEOF
  then ok "$label: $what"; else bad "$label: $what"; cat "$TMP/py.out"; fi
}

have_torch=1
"$PY" -c 'import torch, numpy' 2>/dev/null || have_torch=0
"$QC" check --help 2>&1 | grep -q 'exec:' || have_torch=0
[ $have_torch -eq 1 ] || echo "note: exec: scenarios skipped ($PY cannot import torch and numpy, or no exec: backend)"

if [ $have_torch -eq 1 ]; then
  # ---- (a) state not reset between sequences ----------------------------------------------
  for m in "reset-nothing:$CM reset-nothing" "conv-not-reset:$MU conv-not-reset"; do
    label="${m%%:*}"
    run "$label" 1 --golden "$ONE" --filter '/len00[25]/' --backend "exec:${m#*:}"
    line "$label" "state not reset between sequences: garbage_reset fails" "the cause names garbage_reset and the state"
    summary "$label"
    causes "$label" "one cause explains (nearly) every failing row, and names no layer" <<'PY'
top = cs[0]
assert top["rule"] == "state_not_reset", top
assert top["n_rows"] >= 0.9 * len(fail), (top["n_rows"], len(fail))
assert top["layer"] is None and top["step"] is None and top["block"] is None, top
assert "garbage_reset" in top["cause"] and "layer 0" not in top["cause"], top["cause"]
g = [i for i in fail if d["checks"][i]["check"] == "garbage_reset"]
assert g and set(g) <= set(top["rows"]), "every failing garbage_reset row in it"
for c in cs:   # rows failing from the NaN fill never name a layer
    if set(c["rows"]) & set(g):
        assert c["layer"] is None, c
PY
  done

  # ---- (b) layer 2's MLP, with the hidden states; then with the states only -----------------
  #      with mlp_in (the mixer output) the cause names the MLP; without it, only the layer
  run mlp-l2 1 --golden "$ONE" --filter '/len00[25]/' --backend "exec:$CM mlp-l2"
  line mlp-l2 "layer 2, MLP (mlp_in, the mixer output, agrees)" "names layer 2's MLP"
  summary mlp-l2
  causes mlp-l2 "one cause, layer 2, block mlp" <<'PY'
assert len(cs) == 1, [c["cause"] for c in cs]
c = cs[0]
assert c["rule"] == "layer" and c["layer"] == 2 and c["block"] == "mlp" and c["step"] is None, c
assert c["kind"] == "layer", c
assert d["verdict"] == {"exec:causes_mutants.py": "FAIL"}, d["verdict"]
assert sorted(c["rows"]) == fail, (len(c["rows"]), len(fail))   # it explains every failing row
PY
  run mlp-l2-nomlpin 1 --golden "$ONE" --filter '/len00[25]/' --backend "exec:$CM mlp-l2-nomlpin"
  line mlp-l2-nomlpin "layer 2 (mixer or MLP: the hidden states cannot tell; a mixer-output trace, mlp_in, would)" \
    "without mlp_in: names layer 2, not claiming the MLP"
  causes mlp-l2-nomlpin "one cause, layer 2, no block" <<'PY'
assert len(cs) == 1, [c["cause"] for c in cs]
c = cs[0]
assert c["rule"] == "layer" and c["layer"] == 2 and c["block"] is None and c["step"] is None, c
assert "MLP output" not in c["cause"], c["cause"]
PY
  run mlp-l2-states 1 --golden "$ONE" --filter '/len00[25]/' --backend "exec:$CM mlp-l2-states"
  line mlp-l2-states "no single layer: at or before layer 3, after layer 2 whose state passes" \
    "states only: the interval"
  line mlp-l2-states "announce \`hidden\` to name the layer" "states only: the hint"
  causes mlp-l2-states "kind at_or_before_layer, layer 3, after_layer 2" <<'PY'
assert len(cs) == 1, [c["cause"] for c in cs]
c = cs[0]
assert c["kind"] == "at_or_before_layer" and c["layer"] == 3 and c["after_layer"] == 2, c
PY

  # ---- (c) the same bug through the logits only --------------------------------------------
  run mlp-l2-logits 1 --golden "$ONE" --filter '/len00[25]/' --backend "exec:$CM mlp-l2-logits"
  line mlp-l2-logits "no layer named: announce \`hidden\` to localise" "logits only: the hint"
  summary mlp-l2-logits
  causes mlp-l2-logits "no layer" <<'PY'
assert len(cs) == 1, [c["cause"] for c in cs]
assert cs[0]["layer"] is None and cs[0]["kind"] == "none", cs[0]
assert "no layer named: announce `hidden` to localise" in cs[0]["cause"], cs[0]
PY

  # ---- (d) a decode-only state bug -----------------------------------------------------------
  run decode-drift 1 --golden "$ONE" --filter 'len005/.*/dynamic' --backend "exec:$MU decode-drift"
  line decode-drift "decode only, from step 1 (" "decode only, from step 1"
  line decode-drift "layer 0 at decode step 1" "layer 0 at the first failing step"
  summary decode-drift
  line decode-drift "its recurrent_state diverges while its input (hidden[0]) agrees" "layer 0's recurrent state"
  causes decode-drift "rule decode_only, step 1, layer 0, the mixer" <<'PY'
assert len(cs) == 1, [c["cause"] for c in cs]
c = cs[0]
assert c["rule"] == "decode_only" and c["step"] == 1 and c["layer"] == 0, c
assert c["block"] == "mixer", c
assert all(d["checks"][i]["check"].startswith("decode.") or d["checks"][i]["check"] == "argmax"
           for i in c["rows"]), c
PY
  run one-token 1 --golden "$ONE" --filter '/len00[25]/' --backend "exec:$MU decode-drift"
  line one-token "one-token calls only: static prefill (one token per call) and decode from step 1 diverge" \
    "over every mode: one-token calls"
  causes one-token "rule one_token, layer 0" <<'PY'
assert len(cs) == 1, [c["cause"] for c in cs]
assert cs[0]["rule"] == "one_token" and cs[0]["layer"] == 0 and cs[0]["step"] == 1, cs[0]
assert "recurrent_state" in cs[0]["cause"], cs[0]
PY
fi

# ---- (e) static prefill only -----------------------------------------------------------------
run static 1 --golden "$ONE" --filter '/len00[25]/reference/' --inject-fault static-no-advance
line static "static prefill only (one token per call): the other modes agree with the golden" "static only"
line static "from prompt position 1 on" "the first failing prompt position"
causes static "rule mode_only: static rows and static_eq_dynamic" <<'PY'
assert len(cs) == 1, [c["cause"] for c in cs]
c = cs[0]
assert c["rule"] == "mode_only" and c["kind"] == "at_or_before_layer" and c["layer"] == 3, c
assert all(d["checks"][i]["mode"] == "static" or d["checks"][i]["check"] == "static_eq_dynamic"
           for i in c["rows"]), c
PY

# ---- (f) MoE router, the state lifecycle, a clean run ----------------------------------------
MOE="$FIX/tiny-moe-f32-nested"
if [ -f "$MOE/golden.h5" ]; then
  run moe 1 --golden "$MOE" --filter '/len005/reference/' --inject-fault moe-topk-next
  line moe "layer 0, MoE block: the router chose expert" "MoE: the block and the router"
  causes moe "one cause, block moe, the router rows in it" <<'PY'
assert len(cs) == 1, [c["cause"] for c in cs]
assert cs[0]["layer"] == 0 and cs[0]["block"] == "moe", cs[0]
assert any(d["checks"][i]["check"] == "router_topk" for i in cs[0]["rows"]), cs[0]
PY
else
  bad "fixture tiny-moe-f32-nested missing"
fi
run snapshot 1 --golden "$ONE" --filter '/len005/reference/dynamic$' --inject-fault snapshot-noop
line snapshot "a snapshot, restore or rollback does not carry the whole state: snapshot_restore" \
  "the lifecycle checks: one cause"
causes snapshot "one cause, no layer" <<'PY'
assert len(cs) == 1 and cs[0]["layer"] is None and cs[0]["rule"] == "check", cs
PY
run clean 0 --golden "$ONE" --filter '/len005/reference/'
if grep -q "likely causes" "$TMP/clean.out"; then bad "clean: a cause line without a failure"; else
  ok "clean: no cause line"; fi
causes clean "\"causes\": []" <<'PY'
assert cs == [], cs
PY

echo "test_causes.sh: $fails failure(s)"
[ "$fails" -eq 0 ]
