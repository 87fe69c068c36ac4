#!/usr/bin/env bash
# test_plugin_faults.sh QC SRC — the runtime-under-test paths of `check`:
#   * plugin:<built-in plugin> equals the built-in backend: same checks, same verdicts, same
#     numbers (tests/cli/compare_reports.py), for reference and optimized;
#   * a plugin that cannot be used (missing, not a plugin, wrong ABI version, no forward) and an
#     exec command that cannot start: exit 2 naming the file / command, no report;
#   * a runtime that misbehaves (open fails, forward errors, NaN logits, a crash in a child
#     process): FAIL (exit 1) with the evidence, every case still reported;
#   * missing capabilities: SKIPPED with the reason, and --require turns them into a FAIL.
set -u
QC="$1"; SRC="$2"
BIN="$(cd "$(dirname "$QC")" && pwd)"
PY=/usr/bin/python3
TMP="$(mktemp -d /tmp/qc_test_plugin_faults.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
FIX="$SRC/fixtures/tiny-f32-tied-flat"
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }

# run LABEL ARGS... -> $TMP/LABEL.{out,err,json}, exit code in $rc
run() {
  local label="$1"; shift
  "$QC" check --golden "$FIX" --quiet --json "$TMP/$label.json" "$@" >"$TMP/$label.out" 2>"$TMP/$label.err"
  rc=$?
}
expect() { # LABEL RC TEXT: exit code and a text in stdout+stderr
  if [ "$rc" -eq "$2" ] && grep -qF -- "$3" "$TMP/$1.out" "$TMP/$1.err"; then ok "$1: exit $rc, says '$3'"
  else bad "$1: exit $rc (expected $2), wanted '$3'"; tail -n 5 "$TMP/$1.err" "$TMP/$1.out"; fi
}
rows() { # FILE VERDICT CHECK_REGEX -> count
  $PY - "$@" <<'PYEOF'
import json, re, sys
try: rows = json.load(open(sys.argv[1]))["checks"]
except Exception: print(-1); sys.exit(0)
print(sum(1 for r in rows if r["verdict"] == sys.argv[2] and re.fullmatch(sys.argv[3], r["check"])))
PYEOF
}

# ---- the ABI's own proof: plugin:<built-in> == built-in --------------------------------------
for be in reference optimized; do
  so="$BIN/libqc_plugin_$be.so"
  if [ ! -f "$so" ]; then bad "$so not built"; continue; fi
  run "builtin-$be" --backend "$be" --filter 'len00[15]|len065|cont'
  r1=$rc
  run "plugin-$be" --backend "plugin:$so" --filter 'len00[15]|len065|cont'
  if [ "$r1" -eq 0 ] && [ "$rc" -eq 0 ] && \
     $PY "$SRC/tests/cli/compare_reports.py" "$TMP/builtin-$be.json" "$TMP/plugin-$be.json" > "$TMP/cmp-$be.txt"; then
    ok "plugin:libqc_plugin_$be.so == $be: $(tail -n 1 "$TMP/cmp-$be.txt")"
  else bad "plugin:$be differs (exit $r1 / $rc)"; tail -n 8 "$TMP/cmp-$be.txt"; fi
done

# ---- unusable plugins and commands: exit 2, nothing checked ------------------------------------
CC="${CC:-cc}"
build() { # NAME DEFINE
  "$CC" -shared -fPIC -O1 -I"$SRC/include" ${2:+-D$2} -o "$TMP/$1.so" "$SRC/tests/cli/fault_plugin.c" -lm
}
build good "" && build abi FAULT_ABI_VERSION && build nofwd FAULT_NO_FORWARD && build open FAULT_OPEN \
  && build fwd FAULT_FORWARD && build nan FAULT_NAN && build crash FAULT_CRASH \
  || { bad "cannot compile tests/cli/fault_plugin.c"; echo "test_plugin_faults: $fails failure(s)"; exit 1; }
DIMS="$($PY -c "import json,sys; c=json.load(open(sys.argv[1])); c=c.get('text_config',c); print('vocab=%d,hidden=%d,layers=%d' % (c['vocab_size'], c['hidden_size'], c['num_hidden_layers']))" "$FIX/model/config.json")"

run missing --backend "plugin:$TMP/nope.so";        expect missing 2 "nope.so: plugin file does not exist"
cp "$FIX/model/config.json" "$TMP/notaplugin.so"
run notso --backend "plugin:$TMP/notaplugin.so";   expect notso 2 "notaplugin.so: cannot load the plugin"
run abi --backend "plugin:$TMP/abi.so,$DIMS";       expect abi 2 "abi.so: plugin ABI version 99, this qwen-conform speaks 1"
run nofwd --backend "plugin:$TMP/nofwd.so,$DIMS";   expect nofwd 2 "lacks the mandatory entry 'forward'"
run noexec --backend "exec:$TMP/no/such/adapter";   expect noexec 2 "exec adapter '$TMP/no/such/adapter'"
for l in missing abi nofwd; do
  [ ! -s "$TMP/$l.json" ] || [ "$(rows "$TMP/$l.json" PASS '.*')" -le 0 ] && ok "$l: no check was run" || bad "$l: checks ran"
done

# ---- misbehaving runtimes: FAIL with the evidence, the run goes on ----------------------------
run open --backend "plugin:$TMP/open.so,$DIMS"
expect open 1 "cannot load $FIX/model: unsupported tensor layout (fault)"
run fwd --backend "plugin:$TMP/fwd.so,$DIMS" --filter 'len00[15]'
expect fwd 1 "forward failed: the fault plugin's injected error"
n=$(rows "$TMP/fwd.json" FAIL run)
[ "$n" -eq 6 ] && ok "forward errors: a FAIL 'run' row for each of 2 cases x 3 modes" || bad "forward errors: $n FAIL run rows (expected 6)"
run nan --backend "plugin:$TMP/nan.so,$DIMS" --filter 'len005'
expect nan 1 "First non-finite actual value: nan at prefill/logits"
n=$(rows "$TMP/nan.json" FAIL 'prefill\.logits')
[ "$n" -eq 3 ] && ok "NaN logits: prefill.logits FAILS in every mode" || bad "NaN logits: $n FAIL rows"
grep -q "non-finite\|NaN at prefill/logits" "$TMP/nan.out" && ok "NaN logits: the first bad location is named" || bad "NaN location not named"
run crash --backend "isolate:plugin:$TMP/crash.so,$DIMS" --filter 'len00[15]' --adapter-timeout 20
expect crash 1 "adapter died (signal 11)"
n=$(rows "$TMP/crash.json" FAIL run)
[ "$n" -eq 6 ] && ok "a crashing runtime (out of process): every case still reported ($n FAIL run rows)" || bad "crash: $n FAIL run rows (expected 6)"

# ---- capabilities: SKIPPED with the reason, --require makes them a FAIL -----------------------
run caps --backend "plugin:$TMP/good.so,$DIMS" --filter 'len001'
n=$(rows "$TMP/caps.json" SKIP 'prefill\.hidden|prefill\.(k_cache|v_cache|conv_state|recurrent_state)|garbage_reset|unused_slots|threads_bitwise')
[ "$n" -ge 15 ] && ok "missing capabilities: $n checks SKIPPED" || bad "missing capabilities: $n SKIP rows"
grep -q "capability 'hidden' not announced by plugin:good.so" "$TMP/caps.json" && ok "SKIP names the capability and the runtime" || bad "SKIP reason"
run req --backend "plugin:$TMP/good.so,$DIMS" --filter 'len001' --require hidden,state_read --junit "$TMP/req.xml"
expect req 1 "lacks the required capabilities: hidden, state_read"
grep -q '<skipped message="capability' "$TMP/req.xml" && ok "JUnit carries <skipped message=...>" || bad "JUnit skipped"
run reqbad --backend "plugin:$TMP/good.so,$DIMS" --require telepathy
expect reqbad 2 "unknown capability 'telepathy'"

echo "test_plugin_faults: $fails failure(s)"
[ "$fails" -eq 0 ]
