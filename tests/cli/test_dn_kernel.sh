#!/usr/bin/env bash
# test_dn_kernel.sh <qwen-conform> <source-dir> — dn_kernel / chunk_size reach a runtime under
# test only for the checks that compare kernels, and chunked_eq_recurrent names the layer
# (#26 item 7; docs/adapter-protocol.md "dn_kernel and chunk_size"). Through exec:, on
# tiny-f32-tied-flat cases len005 (no chunk_sweep) and len065 (chunk_sweep), with the mutants of
# tests/adapters/dn_kernel_mutants.py (the bug in layer 1 unless QC_MUTANT_LAYER says otherwise):
#   * good (the golden adapter, logging every call): exit 0; its set_option calls are exactly,
#     in order, dn_kernel=recurrent, chunk_size=64, dn_kernel=chunked (len005's
#     chunked_eq_recurrent), dn_kernel=recurrent, dn_kernel=chunked (len065's), chunk_size=1, 3,
#     64, 128 (len065's chunk_sweep), each right after a reset, each followed by one run; every
#     run of len005 before them (static, dynamic, nokv, ...) was told nothing: its multi-token
#     calls ran the runtime's own default ("auto");
#   * decode-kernel (dn_kernel applied to one-token calls + a recurrence bug): the decode rows
#     FAIL naming layer 1 (static and dynamic decode.logits, decode_hidden / hidden), not only
#     chunked_eq_recurrent; with QC_MUTANT_LAYER=2 they name layer 2;
#   * chunk-end-decay (the chunked kernel loses the decay at each chunk end): chunked_eq_recurrent
#     FAILS on both cases with first_divergent_layer {layer, 1, hidden} and the per-layer texts
#     (hidden curve, the first layer whose state differs: recurrent_state), and the triage's
#     cause names layer 1's DeltaNet kernel; static mode passes;
#     without 'hidden' it is localised by the states (at_or_before layer 1) and says to announce
#     'hidden'; with neither 'hidden' nor 'state_read' it names no layer and says what to announce.
# Skips (exit 0, "SKIP: ...") without an exec: backend or without torch / numpy.
set -u
QC="$1"
SRC="$2"
PY=/usr/bin/python3
FIX="$SRC/fixtures/tiny-f32-tied-flat"
POL="$SRC/fixtures/tolerances.json"
MUT="$PY '$SRC/tests/adapters/dn_kernel_mutants.py'"
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

# run LABEL FILTER MUTANT -> $TMP/LABEL.{json,out,log}; exit status in $rc (env passes through)
run() {
  local label="$1" filter="$2" m="$3"
  QC_DN_LOG="$TMP/$label.log" "$QC" check --golden "$FIX" --policy "$POL" --filter "$filter" \
    --backend "exec:$MUT $m" --quiet --json "$TMP/$label.json" >"$TMP/$label.out" 2>&1
  rc=$?
}

# ---- good: told dn_kernel / chunk_size only for chunked_eq_recurrent and chunk_sweep -----------
run good '/(len005|len065)/' good
[ "$rc" -eq 0 ] && ok "good: exit 0" || { bad "good: exit $rc"; tail -n 20 "$TMP/good.out"; }
"$PY" - "$TMP/good.log" "$TMP/good.json" <<'PYEOF' && ok "good: set_option only for the kernel checks, in the documented order; the other runs kept the runtime's own default" || fails=$((fails + 1))
import json, sys
lines = [l.split() for l in open(sys.argv[1]).read().splitlines()]
rows = json.load(open(sys.argv[2]))["checks"]
cer = [r for r in rows if r["check"] == "chunked_eq_recurrent" and r["verdict"] == "PASS"]
sweep = sorted(r["check"] for r in rows if r["check"].startswith("chunk_sweep") and r["verdict"] == "PASS")
assert len(cer) == 2 and sweep == ["chunk_sweep.c1", "chunk_sweep.c128", "chunk_sweep.c3", "chunk_sweep.c64"], (cer, sweep)
sets = [(l[1], l[2]) for l in lines if l[0] == "set_option"]
want = [("dn_kernel", "recurrent"), ("chunk_size", "64"), ("dn_kernel", "chunked"),
        ("dn_kernel", "recurrent"), ("dn_kernel", "chunked"),
        ("chunk_size", "1"), ("chunk_size", "3"), ("chunk_size", "64"), ("chunk_size", "128")]
assert sets == want, sets
# runs: a reset and what follows it; every set_option comes right after a reset, before forwards
runs, cur = [], None
for l in lines:
    if l[0] == "reset":
        cur = {"set": [], "fwd": []}
        runs.append(cur)
    elif cur is None:
        raise AssertionError("a call before the first reset: %s" % l)
    elif l[0] == "set_option":
        assert not cur["fwd"], "set_option in the middle of a run: %s" % l
        cur["set"].append((l[1], l[2]))
    else:
        cur["fwd"].append((int(l[1]), int(l[2]), l[3]))
told = [i for i, r in enumerate(runs) if r["set"]]
assert len(told) == 8 and all(runs[i]["fwd"] for i in told), [runs[i] for i in told]
# before the first: len005's static, dynamic and nokv runs (one-token decode steps, multi-token
# prefills on the runtime's own default "auto")
first = told[0]
before = [f for r in runs[:first] for f in r["fwd"]]
assert first >= 3 and any(n == 1 and k == "recurrent" for n, _, k in before), runs[:first]
assert any(n > 1 and k == "auto" for n, _, k in before), before
assert not any(n > 1 and k != "auto" for n, _, k in before), before
# the kernel runs ran what they were told
assert runs[told[0]]["fwd"][0][2] == "recurrent" and runs[told[1]]["fwd"][0][2] == "chunk"
PYEOF

# ---- decode-kernel: the decode rows fail and name the layer ------------------------------------
# check_decode JSON LAYER
check_decode() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
rows = json.load(open(sys.argv[1]))["checks"]
layer = int(sys.argv[2])
def named(r):
    f = r.get("first_divergent_layer") or {}
    return f.get("kind") == "layer" and f.get("layer") == layer
dec = [r for r in rows if r["check"] == "decode.logits" and r["verdict"] == "FAIL"]
modes = {r["mode"] for r in dec if named(r)}
assert {"static", "dynamic"} <= modes, [(r["mode"], r.get("first_divergent_layer")) for r in dec]
dyn = [r for r in dec if r["mode"] == "dynamic" and r["case"] == "len005"]
assert dyn and dyn[0]["first_divergent_layer"]["source"] == "decode_hidden", dyn
assert "layer %d (linear_attention)" % layer in dyn[0]["detail"], dyn[0]["detail"]
cer = [r for r in rows if r["check"] == "chunked_eq_recurrent" and r["verdict"] == "FAIL"]
assert cer and all(named(r) for r in cer), [(r["case"], r.get("first_divergent_layer")) for r in cer]
n = sum(1 for r in rows if r["verdict"] == "FAIL" and r["check"].startswith("decode.") and named(r))
assert n >= 5, n
print("  %d decode.* FAIL rows name layer %d (modes %s)" % (n, layer, ", ".join(sorted(modes))))
PYEOF
}
run decode-kernel '/(len005|len065)/' decode-kernel
[ "$rc" -eq 1 ] && ok "decode-kernel: exit 1" || bad "decode-kernel: exit $rc (expected 1)"
check_decode "$TMP/decode-kernel.json" 1 && ok "decode-kernel: decode.logits FAILs in static and dynamic naming layer 1, chunked_eq_recurrent names it too" \
  || fails=$((fails + 1))
QC_MUTANT_LAYER=2 run decode-kernel-l2 '/len005/' decode-kernel
check_decode "$TMP/decode-kernel-l2.json" 2 && ok "decode-kernel, bug in layer 2: the rows name layer 2" \
  || fails=$((fails + 1))

# ---- chunk-end-decay: chunked_eq_recurrent names the first divergent layer ---------------------
run chunk-end-decay '/(len005|len065)/' chunk-end-decay
[ "$rc" -eq 1 ] && ok "chunk-end-decay: exit 1" || bad "chunk-end-decay: exit $rc (expected 1)"
"$PY" - "$TMP/chunk-end-decay.json" <<'PYEOF' && ok "chunk-end-decay: chunked_eq_recurrent FAILs on len005 and len065 naming layer 1 (hidden curve, recurrent_state, the cause: layer 1's kernel); static passes" || fails=$((fails + 1))
import json, sys
rows = json.load(open(sys.argv[1]))["checks"]
cer = {r["case"]: r for r in rows if r["check"] == "chunked_eq_recurrent"}
assert set(cer) == {"len005", "len065"}, cer.keys()
for r in cer.values():
    assert r["verdict"] == "FAIL", r["verdict"]
    assert r["first_divergent_layer"] == {"kind": "layer", "layer": 1, "source": "hidden"}, r
    d = r["detail"]
    for want in ("First divergent layer: layer 1 (linear_attention) (hidden[2] is its output",
                 "Per-layer max |chunked - recurrent| of hidden[i]",
                 "First layer whose state differs between the chunked and recurrent runs after "
                 "prefill: layer 1 (linear_attention, recurrent_state",
                 "dn_kernel=chunked"):
        assert want in d, (want, d)
    assert "[1] " in d and "!" not in d.split("[1] ")[1].split(",")[0], d   # hidden[1] agrees
st = [r for r in rows if r["mode"] == "static" and r["verdict"] != "PASS" and r["verdict"] != "SKIP"]
assert not st, [(r["case"], r["check"]) for r in st]
# the triage's cause of those rows: layer 1's kernel (the runs differ only in the kernel)
causes = [c for c in json.load(open(sys.argv[1]))["causes"] if "chunked_eq_recurrent" in c["cause"]]
assert len(causes) == 1 and causes[0]["layer"] == 1 and causes[0]["kind"] == "layer", causes
assert "layer 1, its DeltaNet kernel" in causes[0]["cause"], causes[0]["cause"]
PYEOF

QC_MUTANT_HIDE=hidden run no-hidden '/len005/' chunk-end-decay
"$PY" - "$TMP/no-hidden.json" <<'PYEOF' && ok "chunk-end-decay without 'hidden': localised by the states (at or before layer 1, recurrent_state) and says to announce 'hidden'" || fails=$((fails + 1))
import json, sys
r = [r for r in json.load(open(sys.argv[1]))["checks"] if r["check"] == "chunked_eq_recurrent"][0]
assert r["verdict"] == "FAIL", r
f = r["first_divergent_layer"]
assert f["kind"] == "at_or_before_layer" and f["layer"] == 1 and f["source"] == "state" and f.get("after_layer") == 0, f
assert "layer 1 (linear_attention, recurrent_state" in r["detail"] and "does not announce 'hidden'" in r["detail"], r["detail"]
PYEOF

QC_MUTANT_HIDE=hidden,state_read run blind '/len005/' chunk-end-decay
"$PY" - "$TMP/blind.json" <<'PYEOF' && ok "chunk-end-decay without 'hidden' and 'state_read': no layer named; the row says to announce them" || fails=$((fails + 1))
import json, sys
r = [r for r in json.load(open(sys.argv[1]))["checks"] if r["check"] == "chunked_eq_recurrent"][0]
assert r["verdict"] == "FAIL" and "first_divergent_layer" not in r, r
assert "announces neither 'hidden' nor 'state_read'" in r["detail"], r["detail"]
assert "Announce 'hidden'" in r["detail"], r["detail"]
PYEOF

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
