#!/usr/bin/env bash
# test_drift_hazard.sh <qwen-conform> <source-dir> — issue 17 items 5 and 6:
#   long_decode_drift on fixtures/tiny-long-decode (2048 teacher-forced decode steps): a float32
#     run passes with its curves in the JSON report; the self-test fault recurrent-bf16 (the
#     recurrent state rounded to bf16 after every call) fails it and names the first step;
#     drift-svg draws the curves; a corrupt trace is an error naming the file and dataset; a
#     Python-helper runtime with a bf16 recurrent state (tests/adapters/mutant_state_bf16.py) is
#     caught through exec: on a 256-step decode;
#   fixtures/tiny-hazard-decay (decays near 0 and near 1, gate inputs far beyond softplus's guard,
#     prompts of up to 300 tokens): both backends in every mode pass, every value finite; the
#     self-test fault unguarded-exp (pytorch/executorch#21417's exp(gamma_r) * exp(-gamma_c)) is
#     caught as a NaN with its first location and layer, in the chunked modes only.
set -u
QC="$1"
SRC="$2"
FIX="$SRC/fixtures"
POL="$FIX/tolerances.json"
LD="$FIX/tiny-long-decode"
HZ="$FIX/tiny-hazard-decay"
PY=/usr/bin/python3
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }

# run RC-EXPECTED DESCRIPTION args... ; output in $TMP/out (stdout + stderr)
run() {
  local want="$1" what="$2"; shift 2
  "$QC" "$@" >"$TMP/out" 2>&1
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok "$what (exit $rc)"; else
    bad "$what: exit $rc, expected $want"; grep -E "FAIL|ERROR|error" "$TMP/out" | head -n 20; fi
}
has() { if grep -qE -- "$1" "$TMP/out"; then ok "$2"; else bad "$2 (no match for '$1')"; grep -E "FAIL|drift|error" "$TMP/out" | head -n 12; fi; }
hasnt() { if grep -qE -- "$1" "$TMP/out"; then bad "$2"; grep -E -- "$1" "$TMP/out" | head -n 5; else ok "$2"; fi; }
# pycheck DESCRIPTION FILE <<'EOF' ... EOF: python asserts on a JSON report (sys.argv[1])
pycheck() {
  local what="$1" file="$2"
  if $PY - "$file" >"$TMP/py" 2>&1; then ok "$what"; else bad "$what"; head -n 12 "$TMP/py"; fi
}

# ---- long decode, float32: passes, curves in the JSON ---------------------------------------
run 0 "long decode (reference, static + dynamic) passes" -v --golden "$LD" --policy "$POL" \
    --filter "/reference/(static|dynamic)$" --json "$TMP/ld.json"
has "decode2k +reference static +long_decode_drift +PASS +2048 steps: logits max [0-9.e-]+, states max [0-9.e-]+ at 23 traced steps; never over tolerance" \
    "static long_decode_drift PASS with 2048 steps and 23 traced states"
has "decode2k +reference dynamic +long_decode_drift +PASS" "dynamic long_decode_drift PASS"
pycheck "JSON drift: 2048-point logits curve, 6 state curves of 23 points, all below tolerance" "$TMP/ld.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
rows = [x for x in r["checks"] if x["check"] == "long_decode_drift"]
assert len(rows) == 2, len(rows)
for x in rows:
    d = x["drift"]
    assert x["verdict"] == "PASS" and d["first_over"] is None, x["message"]
    assert d["decode_steps"] == 2048 and len(d["trace_steps"]) == 23, d["trace_steps"]
    cv = {c["tensor"]: c for c in d["curves"]}
    assert len(cv["decode/logits"]["max_abs"]) == 2048
    states = [c for c in d["curves"] if c["tensor"] != "decode/logits"]
    assert len(states) == 6, [c["tensor"] for c in states]
    for c in d["curves"]:
        assert c["first_over_step"] is None, c["tensor"]
        assert all(isinstance(v, (int, float)) and 0 <= v < c["atol"] for v in c["max_abs"]), c["tensor"]
    # a real comparison: float32 vs the float64 golden is not exactly zero
    assert max(cv["decode/logits"]["max_abs"]) > 1e-7
    assert max(max(c["max_abs"]) for c in states) > 1e-8
EOF
run 0 "nokv row listed as SKIP" -v --golden "$LD" --policy "$POL" --filter "/reference/nokv$"
has "decode2k +reference nokv +run +SKIP +a long decode: nokv recomputes" "nokv SKIP reason"

# ---- long decode, the recurrent state in bf16: fails, names the first step ------------------
run 1 "recurrent-bf16 fault fails long_decode_drift" -v --golden "$LD" --policy "$POL" \
    --filter "/reference/static$" --inject-fault recurrent-bf16 --json "$TMP/bf.json"
has "decode2k +reference static +long_decode_drift +FAIL +2048 steps: first over tolerance at step 0" \
    "bf16: first step over tolerance named (step 0)"
has "layer_0[0-2]/recurrent_state +max \|diff\| [0-9.e-]+ at step [0-9]+ \(atol 0.0001, rtol 0.0005\); first over tolerance at step 0" \
    "bf16: a recurrent_state curve crosses at the first traced step"
pycheck "bf16 JSON: first_over step 0, recurrent_state curves over tolerance" "$TMP/bf.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
x = [x for x in r["checks"] if x["check"] == "long_decode_drift"][0]
d = x["drift"]
assert x["verdict"] == "FAIL" and d["first_over"]["step"] == 0, d["first_over"]
rec = [c for c in d["curves"] if c["class"] == "recurrent_state"]
assert rec and all(c["first_over_step"] == 0 for c in rec), [c["first_over_step"] for c in rec]
assert max(max(c["max_abs"]) for c in rec) > 10 * rec[0]["atol"]
assert r["summary"]["exit_code"] == 1
EOF

# ---- drift-svg --------------------------------------------------------------------------------
run 0 "drift-svg draws the curves" drift-svg "$TMP/ld.json" --out "$TMP/ld.svg"
if [ -s "$TMP/ld.svg" ] && [ "$(grep -c '<polyline' "$TMP/ld.svg")" -eq 14 ] && \
   grep -q "reference static: long_decode_drift PASS" "$TMP/ld.svg"; then
  ok "svg: 2 panels x 7 curves"; else bad "svg content"; head -c 600 "$TMP/ld.svg"; fi
if command -v xmllint >/dev/null 2>&1; then
  xmllint --noout "$TMP/ld.svg" && ok "svg is well-formed XML" || bad "svg is not well-formed"
fi
run 0 "drift-svg of the bf16 report" drift-svg "$TMP/bf.json" --out "$TMP/bf.svg"
grep -q "first over tolerance: step 0" "$TMP/bf.svg" && ok "svg marks the first crossing" \
  || bad "svg: no first-crossing mark"
cp "$TMP/ld.json" "$TMP/ld.keep"
run 2 "drift-svg refuses to write onto its report" drift-svg "$TMP/ld.json" --out "$TMP/ld.json"
cmp -s "$TMP/ld.json" "$TMP/ld.keep" && ok "the report is untouched" || bad "the report was modified"
run 0 "a report without long decodes" -v --golden "$FIX/tiny-f32-tied-flat" --policy "$POL" \
    --filter "/len001/reference/static$" --json "$TMP/short.json"
run 2 "drift-svg: no long_decode_drift row is an error naming the file" drift-svg "$TMP/short.json" --out "$TMP/s.svg"
has "short.json: no long_decode_drift row" "names the report"
echo '{"checks": [' > "$TMP/broken.json"
run 2 "drift-svg: malformed JSON" drift-svg "$TMP/broken.json" --out "$TMP/s.svg"
has "broken.json: not valid JSON" "names the malformed report"
[ ! -e "$TMP/s.svg" ] && ok "no partial SVG" || bad "an SVG was left behind"

# ---- a corrupt trace is an error (exit 2) naming the file and the dataset --------------------
mkdir -p "$TMP/c"
cp "$LD/golden.h5" "$TMP/c/golden.h5"
chmod u+w "$TMP/c/golden.h5"
$PY - "$TMP/c/golden.h5" "$(cd "$LD/model" && pwd)" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f.attrs["model_path"] = sys.argv[2]
    d = f["cases/decode2k/decode/trace/steps"]
    x = d[...]
    x[3] = x[2]
    d[...] = x
EOF
run 2 "non-increasing trace steps: ERROR" --golden "$TMP/c" --policy "$POL" --filter "/reference/static$"
has "long_decode_drift +ERROR .*golden.h5: cases/decode2k/decode/trace/steps: entry 3" \
    "names the file, the dataset and the entry"

# ---- hazard fixture: both backends, every mode, finite and within tolerance ------------------
run 0 "hazard fixture passes on both backends in every mode" -v --golden "$HZ" --policy "$POL" \
    --json "$TMP/hz.json"
pycheck "hazard: every row passed or skipped, no non-finite value, chunked modes checked" "$TMP/hz.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["checks"]
assert all(x["verdict"] in ("PASS", "SKIP") for x in rows)
assert all(x.get("metrics", {}).get("n_nonfinite", 0) == 0 for x in rows)
seen = {(x["backend"], x["mode"]) for x in rows if x["check"] == "prefill.logits" and x["case"] == "len300"}
assert seen == {(b, m) for b in ("reference", "optimized") for m in ("static", "dynamic", "nokv")}, seen
assert any(x["check"] == "chunk_sweep.c64" and x["case"] == "len300" for x in rows)
hz = [x for x in rows if x["check"] == "hazard_finite"]
assert len(hz) == 6 * 2 * 3 and all(x["verdict"] == "PASS" for x in hz), len(hz)
assert all(x["message"].startswith("all ") and "values finite" in x["message"] for x in hz)
EOF

# ---- the executorch#21417 fault: NaN with its first location, chunked modes only -------------
run 1 "unguarded-exp fault is caught" -v --golden "$HZ" --policy "$POL" \
    --filter "/len065/reference/dynamic$" --inject-fault unguarded-exp
has "First non-finite actual value: -?nan at prefill/logits \(0, 0\) \[position 0, vocab 0\]" \
    "names the first non-finite value and its location"
has "First divergent layer: layer 0 \(linear_attention\)" "localised to the first DeltaNet layer"
has "len065 +reference dynamic +prefill.recurrent_state +FAIL .*nonfinite" "the state is non-finite too"
has "len065 +reference dynamic +hazard_finite +FAIL +[0-9]+ of [0-9]+ values not finite; first -?nan at prefill/logits \\(0, 0\\) \\[position 0, vocab 0\\]" \
    "hazard_finite names the first NaN"
run 0 "unguarded-exp: the token recurrence (static) is not affected" -v --golden "$HZ" --policy "$POL" \
    --filter "/len065/reference/static$" --inject-fault unguarded-exp

# ---- through exec: a Python-helper runtime with a bf16 recurrent state -----------------------
# (a 256-step decode recorded from the reference backend keeps this fast; logits curve only)
"$QC" record --model "$LD/model" --tokens 5,17,99,3,42,7,64,1 --decode 256 --out "$TMP/rec.h5" \
    >"$TMP/out" 2>&1 && ok "record a 256-step decode" || { bad "record"; cat "$TMP/out"; }
MUT="$SRC/tests/adapters/mutant_state_bf16.py"
run 0 "exec: the float32 golden adapter passes the long decode" -v --golden "$TMP/rec.h5" \
    --model "$LD/model" --backend "exec:$PY $MUT good" --mode static
has "case0 +exec:mutant_state_bf16.py static +long_decode_drift +PASS +256 steps" "exec good: drift PASS"
run 1 "exec: a bf16 recurrent state is caught" -v --golden "$TMP/rec.h5" \
    --model "$LD/model" --backend "exec:$PY $MUT state-bf16" --mode static
has "case0 +exec:mutant_state_bf16.py static +long_decode_drift +FAIL +256 steps: first over tolerance at step [0-9]+ \\(decode/logits\\)" \
    "exec bf16: drift FAIL names the first step"

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
