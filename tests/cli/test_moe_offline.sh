#!/usr/bin/env bash
# test_moe_offline.sh — the offline path for MoE models (issue #15): `record` writes the router's
# choices (prefill/router/{topk_ids, topk_weights}, decode/router/...) on both backends, and
# `diff GOLDEN ACTUAL` compares them with the golden's (`router_topk`: the id sets per layer and
# position, a flip at a golden near-tie reported, not failed; SKIPPED when the ACTUAL has none).
# golden/validate.py --actual accepts the router datasets and refuses the shapes diff refuses.
#   bash tests/cli/test_moe_offline.sh <path-to-qwen-conform> <source-dir>
set -u
QC="${1:?usage: test_moe_offline.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: test_moe_offline.sh <qwen-conform> <source-dir>}"
PY=/usr/bin/python3
VAL="$SRC/golden/validate.py"
fail=0
pass=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }
if ! $PY -c "import h5py" 2>/dev/null; then echo "SKIP: /usr/bin/python3 lacks h5py"; exit 0; fi
TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_moe_offline.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
run() { "$QC" diff "$@" >"$TMP/out" 2>&1; rc=$?; }

# ---- record --like on both MoE fixtures and both backends: diff passes, router_topk PASS -------
for fx in tiny-moe-f32-nested tiny-moe-bf16-flat; do
  G="$SRC/fixtures/$fx/golden.h5"
  for be in reference optimized; do
    A="$TMP/$fx-$be.h5"
    if ! "$QC" record --like "$G" --backend $be --out "$A" >"$TMP/rec" 2>&1; then
      bad "$fx $be: record --like failed: $(tail -2 "$TMP/rec")"; continue
    fi
    grep -q "router choices" "$TMP/rec" && ok "$fx $be: record --like says it wrote the router choices" \
      || bad "$fx $be: record summary: $(head -1 "$TMP/rec")"
    run "$G" "$A"
    n=$(grep -c "router_topk *PASS *top-2 sets agree" "$TMP/out")
    [ $rc = 0 ] && [ "$n" = 9 ] && ok "$fx $be: diff exit 0, router_topk PASS on all 9 cases" \
      || bad "$fx $be: diff exit $rc, $n router_topk PASS rows: $(grep router_topk "$TMP/out" | head -3)"
    $PY "$VAL" --actual "$G" "$A" >"$TMP/val" 2>&1 && ok "$fx $be: validate.py --actual accepts it" \
      || bad "$fx $be: validate.py --actual: $(grep INVALID "$TMP/val" | head -3)"
  done
done

F="tiny-moe-f32-nested"
G="$SRC/fixtures/$F/golden.h5"
A="$TMP/$F-reference.h5"
[ -f "$A" ] || { echo "# $pass passed, $((fail + 1)) failed (no ACTUAL to edit)"; exit 1; }

# ---- the ACTUAL's router datasets in the golden's layout ------------------------------------
$PY - "$G" "$A" >"$TMP/lay" 2>&1 <<'EOF' && ok "ACTUAL router datasets: golden's shapes and dtypes, ids equal to the golden's as sets" || bad "ACTUAL layout: $(cat "$TMP/lay")"
import sys, h5py, numpy as np
g, a = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
for c in g["cases"]:
    for ph in ("prefill", "decode"):
        for n in ("topk_ids", "topk_weights"):
            p = "cases/%s/%s/router/%s" % (c, ph, n)
            assert a[p].shape == g[p].shape, (p, a[p].shape, g[p].shape)
            assert a[p].dtype == (np.int32 if n == "topk_ids" else np.float32), (p, a[p].dtype)
        p = "cases/%s/%s/router/topk_ids" % (c, ph)
        assert (np.sort(a[p][()], -1) == np.sort(g[p][()], -1)).all(), p
EOF

# ---- record --model --tokens on a MoE model writes router datasets ---------------------------
if "$QC" record --model "$SRC/fixtures/$F/model" --tokens 3,1,4,1,5,9 --decode 2 --backend optimized \
     --out "$TMP/one.h5" >"$TMP/rec" 2>&1; then
  $PY - "$TMP/one.h5" >"$TMP/one" 2>&1 <<'EOF' && ok "record --model --tokens: prefill/router [4,6,2], decode/router [4,2,2], moe_in, no margins" || bad "record --model: $(cat "$TMP/one")"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
c = f["cases/case0"]
assert c["prefill/router/topk_ids"].shape == (4, 6, 2) and c["prefill/router/topk_ids"].dtype == np.int32
assert c["prefill/router/topk_weights"].shape == (4, 6, 2)
assert c["decode/router/topk_ids"].shape == (4, 2, 2) and c["decode/router/topk_weights"].shape == (4, 2, 2)
assert c["prefill/moe_in"].shape == (4, 6, 32) and c["decode/moe_in"].shape == (4, 2, 32)
assert "margins" not in c["prefill/router"]
w = c["prefill/router/topk_weights"][()]
assert np.abs(w.sum(-1) - 1).max() < 1e-5, w
EOF
  $PY "$VAL" "$TMP/one.h5" >"$TMP/val" 2>&1 && ok "validate.py accepts record's output (no router margins from a C backend)" \
    || bad "validate.py record output: $(grep INVALID "$TMP/val" | head -3)"
  "$QC" check -v --golden "$TMP/one.h5" --backend reference --mode static >"$TMP/chk" 2>&1
  [ $? = 0 ] && grep -q "router_topk *PASS" "$TMP/chk" && ok "the recorded file checks as a golden: router_topk PASS" \
    || bad "check of the recorded file: $(grep -E 'router_topk|passed' "$TMP/chk" | head -3)"
else
  bad "record --model --tokens: $(tail -2 "$TMP/rec")"
fi

# ---- an edited router id at a large-margin position: exit 1 naming layer and position --------
$PY - "$G" "$A" "$TMP/flip.h5" >"$TMP/where" 2>"$TMP/err" <<'EOF'
import json, shutil, sys, h5py, numpy as np
g, src, dst = sys.argv[1:4]
shutil.copy(src, dst)
with h5py.File(g, "r") as gf, h5py.File(dst, "r+") as af:
    E = json.loads(gf.attrs["config_json"])
    E = (E.get("text_config") or E)["num_experts"]
    m = gf["cases/len005/prefill/router/margins"][()]
    l, t = np.unravel_index(int(np.argmax(m)), m.shape)
    ids = af["cases/len005/prefill/router/topk_ids"]
    row = ids[l, t]
    other = [e for e in range(E) if e not in row][0]
    row[0] = other
    ids[l, t] = row
    print(l, t, other)
EOF
read -r FL FT FO <"$TMP/where" || bad "editing the ACTUAL: $(cat "$TMP/err")"
run "$G" "$TMP/flip.h5"
[ $rc = 1 ] && grep -q "len005 .*router_topk *FAIL" "$TMP/out" \
  && grep -q "layer $FL (.*prefill position $FT: .*expert $FO chosen instead" "$TMP/out" \
  && ok "an edited router id (layer $FL, position $FT, expert $FO): exit 1, router_topk FAIL naming layer and position" \
  || bad "flip: exit $rc: $(grep -A3 router_topk "$TMP/out" | grep -m3 -E 'FAIL|layer')"
grep -q "len001 .*router_topk *PASS" "$TMP/out" && ok "the other cases' router_topk still PASS" || bad "other cases"
$PY "$VAL" --actual "$G" "$TMP/flip.h5" >/dev/null 2>&1 && ok "validate.py --actual: a flipped id is not a format error" \
  || bad "validate.py refuses the flipped ACTUAL"

# ---- the same flip at a golden near-tie: reported, not failed ---------------------------------
$PY - "$G" "$TMP/tie.h5" "$FL" "$FT" 2>"$TMP/err" <<'EOF' || bad "making the near-tie golden: $(cat "$TMP/err")"
import shutil, sys, h5py
g, dst, l, t = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
shutil.copy(g, dst)
with h5py.File(dst, "r+") as f:
    m = f["cases/len005/prefill/router/margins"]
    v = m[()]
    v[l, t] = 1e-5  # below router_margin_threshold 3e-4
    m[...] = v
EOF
run "$TMP/tie.h5" "$TMP/flip.h5" --cases len005
[ $rc = 0 ] && grep -q "len005 .*router_topk *PASS .*(1 near-tie flips" "$TMP/out" \
  && ok "a flip at a golden near-tie: router_topk PASS, reported as 1 near-tie flip" \
  || bad "near-tie: exit $rc: $(grep router_topk "$TMP/out")"

# ---- an ACTUAL without router datasets: router_topk SKIPPED, exit 0 --------------------------
$PY - "$A" "$TMP/norouter.h5" 2>"$TMP/err" <<'EOF' || bad "removing the router: $(cat "$TMP/err")"
import shutil, sys, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    for c in f["cases"]:
        for ph in ("prefill", "decode"):
            if ph + "/router" in f["cases"][c]:
                del f["cases"][c][ph + "/router"]
EOF
run "$G" "$TMP/norouter.h5"
n=$(grep -c "router_topk *SKIP *the ACTUAL has no router datasets" "$TMP/out")
[ $rc = 0 ] && [ "$n" = 9 ] && ok "an ACTUAL without router datasets: exit 0, router_topk SKIPPED (9 cases) with the reason" \
  || bad "no router: exit $rc, $n SKIP rows: $(grep router_topk "$TMP/out" | head -2)"
$PY "$VAL" --actual "$G" "$TMP/norouter.h5" >"$TMP/val" 2>&1 && grep -q "router/topk_ids: absent: router_topk is SKIPPED" "$TMP/val" \
  && ok "validate.py --actual: absent router noted as SKIPPED" || bad "validate.py no router: $(tail -2 "$TMP/val")"

# ---- a router dataset of the wrong shape: diff exit 2, validate.py exit 1 (the same contract) -
$PY - "$A" "$TMP/badshape.h5" 2>"$TMP/err" <<'EOF' || bad "reshaping: $(cat "$TMP/err")"
import shutil, sys, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    p = "cases/len002/prefill/router/topk_ids"
    v = f[p][()]
    del f[p]
    f[p] = v[:, :, :1]
EOF
run "$G" "$TMP/badshape.h5"
[ $rc = 2 ] && grep -q "prefill/router/topk_ids: shape \[4,2,1\] fits no" "$TMP/out" \
  && ok "router ids of the wrong shape: diff exit 2 naming the dataset" || bad "bad shape: exit $rc $(grep -m2 topk "$TMP/out")"
$PY "$VAL" --actual "$G" "$TMP/badshape.h5" >"$TMP/val" 2>&1
[ $? = 1 ] && grep -q "INVALID .*prefill/router/topk_ids" "$TMP/val" && ok "validate.py --actual refuses it too (exit 1)" \
  || bad "validate.py bad shape: $(tail -2 "$TMP/val")"

# ---- a dense model: router_topk SKIPPED once per file -----------------------------------------
D="$SRC/fixtures/tiny-f32-tied-flat/golden.h5"
if "$QC" record --like "$D" --out "$TMP/dense.h5" >"$TMP/rec" 2>&1; then
  run "$D" "$TMP/dense.h5"
  n=$(grep -c "router_topk" "$TMP/out")
  [ $rc = 0 ] && [ "$n" = 1 ] && grep -q "_file .*router_topk *SKIP *a dense model: no router" "$TMP/out" \
    && ok "a dense model: exit 0, one router_topk SKIP row (a dense model: no router)" \
    || bad "dense: exit $rc, $n router rows"
else
  bad "record --like dense: $(tail -2 "$TMP/rec")"
fi

echo "# $pass passed, $fail failed"
[ $fail = 0 ]
