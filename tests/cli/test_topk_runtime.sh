#!/usr/bin/env bash
# test_topk_runtime.sh QC SRC — a runtime under test that returns top-k log-probabilities only
# (#25 item 2): the plugin ABI's QC_CAP_TOPK_ONLY + forward_topk (tests/cli/topk_plugin.c, the
# reference plugin's logits -> top-k) and the exec protocol's topk_only (the Python helper's
# forward_topk, tests/adapters/topk_only_adapter.py, the golden model -> top-k):
#   * check passes the topk.* rows and SKIPs every logits / hidden / state check with the reason
#     (verdict PARTIAL, not PASS); --topk K sets k;
#   * a mutant (each position answers the previous one's row) FAILs topk.argmax / topk.logprob;
#   * a malformed answer (an id out of range, NaN, an ascending row, k - 1 entries) FAILs,
#     naming it;
#   * a plugin whose struct_size predates forward_topk is never asked for it; isolate:plugin:
#     (adapter-serve) carries forward_topk over the exec protocol;
#   * record --like of the Python adapter writes a top-k ACTUAL that diff reads back: the same
#     topk.* verdicts.
set -u
QC="$1"; SRC="$2"
BIN="$(cd "$(dirname "$QC")" && pwd)"
PY=/usr/bin/python3
CC="${CC:-cc}"
TMP="$(mktemp -d /tmp/qc_test_topk_runtime.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
FIX="$SRC/fixtures/tiny-f32-tied-flat"
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }

run() { # LABEL ARGS... -> $TMP/LABEL.{out,err,json}, exit code in $rc
  local label="$1"; shift
  "$QC" check --golden "$FIX" --quiet --json "$TMP/$label.json" "$@" >"$TMP/$label.out" 2>"$TMP/$label.err"
  rc=$?
}
rows() { # FILE VERDICT CHECK_REGEX [KEYLINE_REGEX] -> count
  $PY - "$@" <<'PYEOF'
import json, re, sys
try: rows = json.load(open(sys.argv[1]))["checks"]
except Exception: print(-1); sys.exit(0)
kr = sys.argv[4] if len(sys.argv) > 4 else ".*"
print(sum(1 for r in rows if r["verdict"] == sys.argv[2] and re.fullmatch(sys.argv[3], r["check"])
          and re.search(kr, r.get("message", "") + "\n" + (r.get("detail") or ""))))
PYEOF
}
expect_rows() { # LABEL VERDICT CHECK_REGEX MIN [KEYLINE_REGEX]
  local n; n="$(rows "$TMP/$1.json" "$2" "$3" "${5:-.*}")"
  if [ "$n" -ge "$4" ]; then ok "$1: $n $2 row(s) $3${5:+ ~ '$5'}"
  else bad "$1: $n $2 row(s) $3${5:+ ~ '$5'} (want >= $4)"; grep -E "$3" "$TMP/$1.out" | head -4; tail -3 "$TMP/$1.err"; fi
}
no_rows() { # LABEL VERDICT CHECK_REGEX
  local n; n="$(rows "$TMP/$1.json" "$2" "$3")"
  [ "$n" -eq 0 ] && ok "$1: no $2 row $3" || bad "$1: $n $2 row(s) $3"
}

# ---- the plugin ABI ------------------------------------------------------------------------------
REF="$BIN/libqc_plugin_reference.so"
[ -f "$REF" ] || { bad "$REF not built"; echo "test_topk_runtime: $fails failure(s)"; exit 1; }
"$CC" -shared -fPIC -O1 -I"$SRC/include" -o "$TMP/tp.so" "$SRC/tests/cli/topk_plugin.c" -lm -ldl &&
"$CC" -shared -fPIC -O1 -I"$SRC/include" -DTOPK_OLD_STRUCT -o "$TMP/tp_old.so" \
  "$SRC/tests/cli/topk_plugin.c" -lm -ldl ||
  { bad "cannot compile tests/cli/topk_plugin.c"; echo "test_topk_runtime: $fails failure(s)"; exit 1; }
P="plugin:$TMP/tp.so,inner=$REF"
SKIPWHY="capability 'topk_only'.*full logits not offered"

run plug --backend "$P" --filter 'len005|cont'
[ "$rc" -eq 0 ] && ok "plugin: exit 0" || { bad "plugin: exit $rc"; tail -5 "$TMP/plug.err"; }
expect_rows plug PASS 'topk\.(argmax|logprob|top1_in_k|overlap)' 24
no_rows plug FAIL '.*'
expect_rows plug SKIP 'prefill\.logits|decode\.logits|prefill\.k_cache|garbage_reset|threads_bitwise' 15 "$SKIPWHY"
no_rows plug PASS 'prefill\.logits|decode\.logits'
grep -q "verdict plugin:tp.so: PARTIAL" "$TMP/plug.out" && ok "plugin: verdict PARTIAL (coverage counts the skips)" \
  || { bad "plugin: verdict not PARTIAL"; grep verdict "$TMP/plug.out"; }

run plug_k5 --backend "$P" --filter 'len005' --mode dynamic --topk 5
expect_rows plug_k5 PASS 'topk\.logprob' 1 'over 65 entries'   # 13 positions x 5

run shift --backend "$P,mutant=shift" --filter 'len005' --mode dynamic
[ "$rc" -eq 1 ] && ok "plugin mutant shift: exit 1" || bad "plugin mutant shift: exit $rc"
expect_rows shift FAIL 'topk\.argmax' 1 'argmax differs'
expect_rows shift FAIL 'topk\.logprob' 1 'over its limit'
for m in "badid:token id out of range at position 2" "nan:log-probability not finite at position 2" \
         "ascend:log-probabilities not descending at position 2"; do
  run "m_${m%%:*}" --backend "$P,mutant=${m%%:*}" --filter 'len005' --mode static
  [ "$rc" -eq 1 ] && ok "plugin mutant ${m%%:*}: exit 1" || bad "plugin mutant ${m%%:*}: exit $rc"
  expect_rows "m_${m%%:*}" FAIL 'topk\.(argmax|logprob)' 2 "malformed top-k: ${m#*:}"
done

# the same plugin out of process (isolate:plugin: -> adapter-serve -> the exec protocol)
run iso --backend "isolate:$P" --filter 'len005' --mode dynamic
[ "$rc" -eq 0 ] && ok "isolate:plugin: exit 0" || bad "isolate:plugin: exit $rc"
expect_rows iso PASS 'topk\.(argmax|logprob|top1_in_k|overlap)' 4
run iso_bad --backend "isolate:$P,mutant=badid" --filter 'len005' --mode static
expect_rows iso_bad FAIL 'topk\.argmax' 1 'malformed top-k: token id out of range at position 2'

# a plugin built before forward_topk (struct_size = QC_PLUGIN_LIFECYCLE_SIZE): the bit is ignored,
# forward is called (and answers UNSUPPORTED): no top-k row, the run fails visibly
run old --backend "plugin:$TMP/tp_old.so,inner=$REF" --filter 'len005' --mode dynamic
no_rows old PASS 'topk\..*'
[ "$rc" -ne 0 ] && grep -q "full logits are not offered" "$TMP/old.out" "$TMP/old.json" \
  && ok "old struct_size: forward_topk never read (exit $rc, forward's refusal reported)" \
  || bad "old struct_size: exit $rc"

run req --backend "$P" --require topk_only
[ "$rc" -eq 2 ] && grep -q "'topk_only' is not a capability to require" "$TMP/req.err" \
  && ok "--require topk_only: refused (exit 2)" || bad "--require topk_only: exit $rc"

# ---- the exec protocol (Python helper) ----------------------------------------------------------
AD="$PY $SRC/tests/adapters/topk_only_adapter.py"
run py --backend "exec:$AD" --filter 'len005' --mode dynamic
[ "$rc" -eq 0 ] && ok "python: exit 0" || { bad "python: exit $rc"; tail -5 "$TMP/py.err"; }
expect_rows py PASS 'topk\.(argmax|logprob|top1_in_k|overlap)' 4
expect_rows py SKIP 'prefill\.logits' 1 "$SKIPWHY"

run py_shift --backend "exec:$AD --mutant shift" --filter 'len005' --mode dynamic
expect_rows py_shift FAIL 'topk\.argmax' 1 'argmax differs'
expect_rows py_shift FAIL 'topk\.logprob' 1 'over its limit'
run py_k --backend "exec:$AD --mutant wrongk" --filter 'len005' --mode dynamic
[ "$rc" -eq 1 ] && ok "python wrong k: exit 1" || bad "python wrong k: exit $rc"
expect_rows py_k FAIL 'topk\.argmax' 1 'forward_topk returned ids \(5, 19\).*expected \(5, 20\)'

# record --like + diff round trip
if "$QC" record --like "$FIX/golden.h5" --backend "exec:$AD" --out "$TMP/rl.h5" >"$TMP/rl.out" 2>&1 &&
   grep -q "top-k log-probabilities only" "$TMP/rl.out"; then ok "record --like: a top-k ACTUAL"
else bad "record --like failed"; tail -4 "$TMP/rl.out"; fi
"$QC" diff "$FIX/golden.h5" "$TMP/rl.h5" --json "$TMP/diff.json" >"$TMP/diff.out" 2>&1
drc=$?
[ "$drc" -eq 0 ] && ok "diff of the recording: exit 0" || { bad "diff: exit $drc"; tail -4 "$TMP/diff.out"; }
$PY - "$TMP/diff.json" "$TMP/py.json" <<'PYEOF' && ok "diff of the recording == check of the adapter (len005 topk.* verdicts, positions)" || bad "diff != check"
import json, sys
d = {r["check"]: r for r in json.load(open(sys.argv[1]))["checks"] if "len005" in r["case"] and r["check"].startswith("topk.")}
c = {r["check"]: r for r in json.load(open(sys.argv[2]))["checks"] if r["check"].startswith("topk.")}
assert len(d) == 4 and set(d) == set(c), (sorted(d), sorted(c))
for k in d:
    assert d[k]["verdict"] == c[k]["verdict"] == "PASS", (k, d[k]["verdict"], c[k]["verdict"])
assert "13 of 13 positions" in d["topk.argmax"]["message"] and "13 of 13 positions" in c["topk.argmax"]["message"]
PYEOF

echo "test_topk_runtime: $fails failure(s)"
[ "$fails" -eq 0 ]
