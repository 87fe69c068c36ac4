#!/usr/bin/env bash
# test_chunk_hazards.sh <qwen-conform> <source-dir> — the chunk-hazard cases of the n_v/n_k = 3
# and 8 fixtures (#27 item 5; golden/qcgolden/hazards.py chunk_cases) through exec:, every
# strategy:
#   * the float32 golden adapter passes them on tiny-bf16-gva3 and tiny-moe-f32-gva8 (exit 0, no
#     FAIL row, PASS rows of prefill.logits / prefill.conv_state / decode.logits for every hazard
#     case in static, dynamic and nokv);
#   * tests/adapters/mutants.py conv-short-chunk (a prefill call of 2..K-1 tokens writes its conv
#     state from the chunk alone: the vLLM #56196 class) FAILS them: exit 1, FAIL rows only in
#     dynamic mode and exactly on the cases whose dynamic schedule has a 2- or 3-token call after
#     a long one; prefill.conv_state names layer 0, and after a 2-token chunk decode.logits is
#     localised to decode step 0, layer 0; with the bug in layer 2 only (QC_MUTANT_LAYER=2) the
#     same rows name layer 2. nokv (the whole sequence from position 0 in every call) passes;
#     static (one token per call) is not run for it: the bug never fires there.
# Skips (exit 0, "SKIP: ...") without an exec: backend or without torch / numpy.
set -u
QC="$1"
SRC="$2"
PY=/usr/bin/python3
POL="$SRC/fixtures/tolerances.json"
ADAPTER="$PY '$SRC/adapters/golden/qc_golden_adapter.py'"
MUTANT="$PY '$SRC/tests/adapters/mutants.py' conv-short-chunk"
# the hazard cases (hazards.CHUNK_CASES), and those with a 2- or 3-token call after a long one in
# the dynamic schedule (chunks of max_seq_len; the history replayed in one prefill)
HZ='split64-1 split64-2 split64-3 split128-3 len069 len133 hist054-len003 hist063-len001 hist065-len002 hist074-len069 hist118-len002 hist129-len003'
SHORT='split64-2 split64-3 split128-3 hist054-len003 hist065-len002 hist118-len002 hist129-len003'
FILTER="/($(echo $HZ | tr ' ' '|'))/"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }

if ! "$QC" check --help 2>&1 | grep -q 'exec:'; then
  echo "SKIP: $QC has no exec: backend"; exit 0
fi
if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
  echo "SKIP: $PY cannot import torch and numpy"; exit 0
fi

# the committed goldens hold the hazard cases (--list: no backend run)
for fx in tiny-bf16-gva3 tiny-moe-f32-gva8; do
  have=$("$QC" check --golden "$SRC/fixtures/$fx" --backend reference --list 2>/dev/null | cut -d/ -f2 | sort -u)
  miss=""
  for c in $HZ; do echo "$have" | grep -qx -- "$c" || miss="$miss $c"; done
  [ -z "$miss" ] && ok "$fx: the 12 chunk-hazard cases are in its golden" || bad "$fx: missing cases:$miss"
done

# run LABEL FIXTURE COMMAND [ARGS...] -> $TMP/LABEL.{json,out}; exit status in $rc
run() {
  local label="$1" fx="$2" cmd="$3"
  shift 3
  "$QC" check --golden "$SRC/fixtures/$fx" --policy "$POL" --filter "$FILTER" --backend "exec:$cmd" \
    --quiet --json "$TMP/$label.json" "$@" >"$TMP/$label.out" 2>&1
  rc=$?
}

# ---- the correct adapter passes every hazard case in every strategy -------------------------
for fx in tiny-bf16-gva3 tiny-moe-f32-gva8; do
  run "good-$fx" "$fx" "$ADAPTER"
  [ "$rc" -eq 0 ] && ok "golden adapter on $fx hazard cases: exit 0" \
    || { bad "golden adapter on $fx: exit $rc"; tail -n 20 "$TMP/good-$fx.out"; }
  "$PY" - "$TMP/good-$fx.json" "$HZ" <<'PYEOF' && ok "golden adapter on $fx: no FAIL; prefill.logits, prefill.conv_state, decode.logits PASS for every hazard case x static/dynamic/nokv" || fails=$((fails + 1))
import json, sys
rows = json.load(open(sys.argv[1]))["checks"]
bad = [(r["case"], r["mode"], r["check"]) for r in rows if r["verdict"] in ("FAIL", "ERROR")]
assert not bad, bad
ok = {(r["case"], r["mode"], r["check"]) for r in rows if r["verdict"] == "PASS"}
missing = [(c, m, k) for c in sys.argv[2].split() for m in ("static", "dynamic", "nokv")
           for k in ("prefill.logits", "prefill.conv_state", "decode.logits") if (c, m, k) not in ok]
assert not missing, missing
PYEOF
done

# ---- the mutant fails exactly where a short chunk follows a long one ------------------------
# check_mutant JSON LAYER: the assertions above, with the layer the reports must name
check_mutant() {
  "$PY" - "$1" "$2" "$HZ" "$SHORT" <<'PYEOF'
import json, sys
rows = json.load(open(sys.argv[1]))["checks"]
layer, hz, short = int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
failing = [r for r in rows if r["verdict"] in ("FAIL", "ERROR")]
assert all(r["verdict"] == "FAIL" for r in failing), [r for r in failing if r["verdict"] != "FAIL"]
modes = sorted({r["mode"] for r in failing})
assert modes == ["dynamic"], "FAIL rows in modes %s (nokv must pass)" % modes
cases = sorted({r["case"] for r in failing})
assert cases == sorted(short), "failing cases %s, expected %s" % (cases, sorted(short))
for c in hz if any(r["mode"] == "nokv" for r in rows) else []:
    # nokv (the whole sequence from position 0 in every call) ran every case and passed it
    assert any(r["case"] == c and r["mode"] == "nokv" and r["check"] == "prefill.conv_state"
               and r["verdict"] == "PASS" for r in rows), c
by = {(r["case"], r["check"]): r for r in rows if r["mode"] == "dynamic"}
for c in short:
    r = by[(c, "prefill.conv_state")]
    assert r["verdict"] == "FAIL", (c, r["verdict"])
    loc = r["first_divergent_layer"]
    assert loc["layer"] == layer and loc["kind"] == "at_or_before_layer", (c, loc)
    if c.endswith("-2") or c.endswith("len002"):   # a lost column the next token reads
        r = by[(c, "decode.logits")]
        assert r["verdict"] == "FAIL", (c, "decode.logits", r["verdict"])
        assert r["first_divergent_layer"] == {"kind": "layer", "layer": layer, "decode_step": 0,
                                              "source": "decode_hidden"}, (c, r["first_divergent_layer"])
    else:               # 3 tokens: only the oldest stored column, which no later token reads
        assert by[(c, "decode.logits")]["verdict"] == "PASS", (c, "decode.logits")
for c in set(hz) - set(short):
    assert by[(c, "prefill.conv_state")]["verdict"] == "PASS", (c, "prefill.conv_state")
print("%d FAIL rows, all dynamic, on %s" % (len(failing), ", ".join(cases)))
PYEOF
}

# (static mode is left out: one token per call, where this mutant's bug never fires)
run mutant tiny-bf16-gva3 "$MUTANT" --mode dynamic,nokv
[ "$rc" -eq 1 ] && ok "conv-short-chunk: exit 1" || { bad "conv-short-chunk: exit $rc (expected 1)"; tail -n 20 "$TMP/mutant.out"; }
if out=$(check_mutant "$TMP/mutant.json" 0 2>&1); then
  ok "conv-short-chunk: $out; prefill.conv_state names layer 0, decode.logits after a 2-token chunk: step 0, layer 0"
else bad "conv-short-chunk: $out"; fi

# the bug in layer 2 only: the reports name layer 2 (dynamic mode: where it shows)
QC_MUTANT_LAYER=2 run mutant-l2 tiny-bf16-gva3 "$MUTANT" --mode dynamic
[ "$rc" -eq 1 ] && ok "conv-short-chunk, layer 2 only: exit 1" || { bad "conv-short-chunk layer 2: exit $rc"; tail -n 20 "$TMP/mutant-l2.out"; }
if out=$(check_mutant "$TMP/mutant-l2.json" 2 2>&1); then
  ok "conv-short-chunk, layer 2 only: $out; the rows name layer 2"
else bad "conv-short-chunk, layer 2 only: $out"; fi

echo "test_chunk_hazards: $fails failure(s)"
[ "$fails" -eq 0 ]
