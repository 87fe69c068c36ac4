#!/usr/bin/env bash
# test_router_runtime.sh QC SRC — MoE router choices from a runtime under test (the 'router'
# capability: plugin QC_CAP_ROUTER + get_router, exec 'router' + router_ids / router_weights,
# the Python helper's Runtime.router(), golden.ActualWriter's prefill_router / decode_router):
#   * router_topk is PASS (not SKIP) for the built-in reference as a plugin (plugin: and
#     isolate:plugin:) and for the golden exec adapter, with the rows the built-in backend gets;
#   * a runtime that reports a wrong expert FAILs router_topk naming layer, position, both sets;
#   * malformed choices (an id out of range, an id twice, a NaN weight) FAIL router_topk with
#     the row as evidence; a get_router error / a router tensor of the wrong shape FAIL the run
#     of that case naming it; never a crash, never exit 2;
#   * a plugin built before get_router (struct_size = QC_PLUGIN_TOPK_SIZE): SKIP "capability
#     'router' not announced";
#   * `record --like` through the plugin and golden.record through the Python helper write the
#     router datasets, and `diff` passes them (a wrong expert written offline FAILs).
set -u
QC="$1"; SRC="$2"
BIN="$(cd "$(dirname "$QC")" && pwd)"
PY=/usr/bin/python3
TMP="$(mktemp -d /tmp/qc_test_router_runtime.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
FIX="$SRC/fixtures/tiny-moe-f32-nested"
REF="$BIN/libqc_plugin_reference.so"
MUT="$SRC/tests/adapters/router_mutants.py"
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }

# run LABEL FILTER ARGS... -> $TMP/LABEL.{out,err,json}, exit code in $rc
run() {
  local label="$1" filter="$2"; shift 2
  "$QC" check --golden "$FIX" --quiet --filter "$filter" --json "$TMP/$label.json" "$@" \
    >"$TMP/$label.out" 2>"$TMP/$label.err"
  rc=$?
}
# count FILE CHECK VERDICT [TEXT]: rows of that check and verdict (whose message + detail
# contain TEXT)
count() {
  $PY - "$@" <<'PYEOF'
import json, sys
try: rows = json.load(open(sys.argv[1]))["checks"]
except Exception: print(-1); sys.exit(0)
text = sys.argv[4] if len(sys.argv) > 4 else ""
print(sum(1 for r in rows if r["check"] == sys.argv[2] and r["verdict"] == sys.argv[3]
          and text in (r.get("message", "") + "\n" + (r.get("detail") or ""))))
PYEOF
}
# expect LABEL RC CHECK VERDICT N [TEXT]
expect() {
  local label="$1" want_rc="$2" check="$3" verdict="$4" n="$5" text="${6:-}"
  local got; got=$(count "$TMP/$label.json" "$check" "$verdict" "$text")
  if [ "$rc" -eq "$want_rc" ] && [ "$got" -eq "$n" ]; then
    ok "$label: exit $rc, $n $check $verdict${text:+ saying '$text'}"
  else
    bad "$label: exit $rc (expected $want_rc), $got $check $verdict rows (expected $n)${text:+ saying '$text'}"
    tail -n 4 "$TMP/$label.err"
  fi
}

[ -f "$REF" ] || { echo "FAIL - $REF not built"; exit 1; }
CC="${CC:-cc}"
"$CC" -shared -fPIC -O1 -I"$SRC/include" -o "$TMP/rp.so" "$SRC/tests/cli/router_plugin.c" -lm -ldl &&
"$CC" -shared -fPIC -O1 -I"$SRC/include" -DROUTER_OLD_STRUCT -o "$TMP/rp_old.so" \
  "$SRC/tests/cli/router_plugin.c" -lm -ldl || { echo "FAIL - cannot compile router_plugin.c"; exit 1; }

# ---- the right answers: PASS, the same rows as the built-in backend ----------------------------
run builtin 'len00[15]|cont' --backend reference
n_ref=$(count "$TMP/builtin.json" router_topk PASS)
[ "$rc" -eq 0 ] && [ "$n_ref" -eq 9 ] && ok "reference: 9 router_topk PASS (3 cases x 3 modes)" \
  || bad "reference: exit $rc, $n_ref router_topk PASS"
run plugin 'len00[15]|cont' --backend "plugin:$REF"
expect plugin 0 router_topk PASS "$n_ref"
expect plugin 0 router_topk SKIP 0
if $PY "$SRC/tests/cli/compare_reports.py" "$TMP/builtin.json" "$TMP/plugin.json" >"$TMP/cmp.txt"; then
  ok "plugin:reference == reference on the MoE fixture: $(tail -n 1 "$TMP/cmp.txt")"
else bad "plugin:reference differs from reference"; tail -n 6 "$TMP/cmp.txt"; fi
grep -q "capabilities .*router" "$TMP/plugin.json" && ok "the plugin announces 'router'" \
  || bad "the capabilities row does not list 'router'"
run isolate 'len005' --backend "isolate:plugin:$REF"
expect isolate 0 router_topk PASS 3
run golden 'len005' --backend "exec:$PY $SRC/adapters/golden/qc_golden_adapter.py"
expect golden 0 router_topk PASS 3
run wrapped 'len005' --backend "plugin:$TMP/rp.so,inner=$REF"
expect wrapped 0 router_topk PASS 3   # router only: no hidden, no state

# ---- wrong and malformed answers: FAIL with the evidence, exit 1 -------------------------------
for via in plugin exec; do
  for m in wrongid badid dup nan; do
    if [ $via = plugin ]; then run "$via-$m" len005 --backend "plugin:$TMP/rp.so,inner=$REF,mutant=$m"
    else run "$via-$m" len005 --backend "exec:$PY $MUT $m"; fi
    case $m in
      wrongid) txt="layer 1 (linear_attention), prefill position 2: expected experts" ;;
      badid)   txt="layer 1, prefill row 2 (position 2): expert id 1e+06 is not an integer in [0, 8)" ;;
      dup)     txt="chosen twice" ;;
      nan)     txt="weight of expert" ;;
    esac
    expect "$via-$m" 1 router_topk FAIL 3 "$txt"
  done
done
run plugin-fail len005 --backend "plugin:$TMP/rp.so,inner=$REF,mutant=fail"
expect plugin-fail 1 run FAIL 3 "get_router(layer 0) failed: the router plugin's injected get_router error"
run exec-shape len005 --backend "exec:$PY $MUT shape"
expect exec-shape 1 run FAIL 3 "error response: forward: router() returned ids (4, "

# ---- a plugin built before get_router: the bit is ignored, SKIP ----------------------------------
run old len005 --backend "plugin:$TMP/rp_old.so,inner=$REF"
expect old 0 router_topk SKIP 3 "capability 'router' not announced"

# ---- offline: record --like through the plugin, golden.record through the Python helper ---------
G="$FIX/golden.h5"
if "$QC" record --like "$G" --backend "plugin:$REF" --out "$TMP/rec.h5" >"$TMP/rec.out" 2>&1 &&
   "$QC" diff "$G" "$TMP/rec.h5" --quiet --json "$TMP/recdiff.json" >"$TMP/recdiff.out" 2>&1; then
  n=$(count "$TMP/recdiff.json" router_topk PASS)
  [ "$n" -ge 1 ] && [ "$(count "$TMP/recdiff.json" router_topk SKIP)" -eq 0 ] \
    && ok "record --like via plugin:reference: diff router_topk PASS x$n" \
    || bad "record --like via the plugin: $n router_topk PASS"
else bad "record --like / diff through the plugin failed"; tail -n 4 "$TMP/rec.out" "$TMP/recdiff.out"; fi
cat >"$TMP/offline.py" <<PYEOF
import sys
sys.path.insert(0, "$SRC/tests/adapters")
import router_mutants
from qwen_conform_adapter import golden
rt = router_mutants.RouterMutant()
rt.mutant = sys.argv[1]
golden.record(rt, "$G", sys.argv[2])
PYEOF
for m in good wrongid; do
  if $PY "$TMP/offline.py" $m "$TMP/off-$m.h5" >"$TMP/off-$m.out" 2>&1; then
    "$QC" diff "$G" "$TMP/off-$m.h5" --quiet --json "$TMP/off-$m.json" >/dev/null 2>&1; rc=$?
    if [ $m = good ]; then expect "off-$m" 0 router_topk PASS "$(count "$TMP/off-$m.json" router_topk PASS)"
      [ "$(count "$TMP/off-$m.json" router_topk PASS)" -ge 1 ] || bad "ActualWriter: no router_topk PASS"
    else # every case with a third position fails, the others pass
      nf=$(count "$TMP/off-$m.json" router_topk FAIL "expected experts")
      np=$(count "$TMP/off-$m.json" router_topk PASS)
      [ "$rc" -eq 1 ] && [ "$nf" -ge 1 ] && [ $((nf + np)) -eq "$(count "$TMP/off-good.json" router_topk PASS)" ] \
        && ok "ActualWriter with a wrong expert: diff exit 1, router_topk FAIL x$nf naming the flip" \
        || bad "ActualWriter wrongid: exit $rc, $nf FAIL, $np PASS"
    fi
  else bad "golden.record ($m) failed"; tail -n 4 "$TMP/off-$m.out"; fi
done

echo "test_router_runtime: $fails failure(s)"
[ "$fails" -eq 0 ]
