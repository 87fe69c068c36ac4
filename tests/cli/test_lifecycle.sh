#!/usr/bin/env bash
# test_lifecycle.sh <qwen-conform> <source-dir> — the state lifecycle checks (snapshot_restore,
# snapshot_copy, restore_after_garbage, snapshot_chunk_boundary, rollback, rollback_trim,
# prefix_reuse, multi_sequence, batch_invariance) end to end:
#   * both built-in backends PASS every one of them on the cases they run on, bit for bit
#     (max_abs 0), and rollback_trim is SKIPPED with its reason (no trim: a DeltaNet state
#     cannot be cut);
#   * each self-test fault is caught by its check and only by the checks it concerns:
#     snapshot-noop, rollback-keeps-conv, slot-off-by-one;
#   * the built-in backends as plugins (snapshot + sequences through the ABI) PASS them, and
#     isolate: (the same over the exec protocol through adapter-serve) too;
#   * exec adapters on the Python helper (tests/adapters/lifecycle_mutants.py): the correct one
#     PASSes all (rollback_trim included, by its trim); each mutant FAILs its check; the golden
#     adapter, which announces no lifecycle capability, gets SKIP rows naming it, and
#     --require snapshot turns that into a FAIL.
set -u
QC="$1"
SRC="$2"
PY=/usr/bin/python3
FIX="$SRC/fixtures/tiny-f32-tied-flat"
POL="$SRC/fixtures/tolerances.json"
BIN="$(cd "$(dirname "$QC")" && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }

LIFE="snapshot_restore|snapshot_copy|restore_after_garbage|snapshot_chunk_boundary|rollback|prefix_reuse|multi_sequence|batch_invariance"
CASES="/(len005|len063|longseq)/"

# rows FILE VERDICT CHECK_REGEX [BACKEND_REGEX] [MAX_ABS] -> the number of matching JSON rows
# (MAX_ABS given: only rows whose metrics.max_abs equals it)
rows() {
  "$PY" - "$@" <<'PYEOF'
import json, re, sys
path, verdict, check = sys.argv[1:4]
be = sys.argv[4] if len(sys.argv) > 4 else ".*"
mx = float(sys.argv[5]) if len(sys.argv) > 5 else None
try:
    rs = json.load(open(path))["checks"]
except (OSError, ValueError, KeyError):
    print(-1); sys.exit(0)
print(sum(1 for r in rs if r.get("verdict") == verdict and re.fullmatch(check, r.get("check", ""))
          and re.fullmatch(be, r.get("backend", ""))
          and (mx is None or r.get("metrics", {}).get("max_abs") == mx)))
PYEOF
}
# failing FILE -> "check" names of the FAIL / ERROR rows, unique
failing() {
  "$PY" - "$1" <<'PYEOF'
import json, sys
try:
    rs = json.load(open(sys.argv[1]))["checks"]
except (OSError, ValueError, KeyError) as e:
    print("(no report: %s)" % e); sys.exit(0)
print(" ".join(sorted({r["check"] for r in rs if r["verdict"] in ("FAIL", "ERROR")})) or "(none)")
PYEOF
}
# run LABEL ARGS... -> $TMP/LABEL.json / .out, exit code in $rc
run() {
  local label="$1"; shift
  "$QC" check --golden "$FIX" --policy "$POL" --quiet --json "$TMP/$label.json" "$@" \
    >"$TMP/$label.out" 2>&1
  rc=$?
}
expect_rc() { # LABEL WANT
  if [ "$rc" -eq "$2" ]; then ok "$1: exit $rc"; else
    bad "$1: exit $rc, expected $2; failing: $(failing "$TMP/$1.json")"; tail -n 8 "$TMP/$1.out"; fi
}
expect_rows() { # LABEL WANT_MIN VERDICT CHECK [BACKEND] [MAX_ABS]
  local label="$1" want="$2"; shift 2
  local n; n=$(rows "$TMP/$label.json" "$@")
  if [ "$n" -ge "$want" ]; then ok "$label: $n $1 rows of $2"; else
    bad "$label: $n $1 rows of $2, expected >= $want"; fi
}
expect_none() { # LABEL VERDICT CHECK
  local n; n=$(rows "$TMP/$1.json" "$2" "$3")
  if [ "$n" -eq 0 ]; then ok "$1: no $2 row of $3"; else bad "$1: $n $2 rows of $3"; fi
}

# ---- the built-in backends ------------------------------------------------------------------
run builtin --filter "$CASES"
expect_rc builtin 0
for be in reference optimized; do
  # len005: 3 snapshot checks + rollback + 2 sequence checks; len063: rollback, prefix_reuse;
  # longseq: snapshot_chunk_boundary, prefix_reuse -> 10 rows, every one exactly equal
  expect_rows builtin 10 PASS "$LIFE" "$be" 0
  for ck in snapshot_restore snapshot_copy restore_after_garbage snapshot_chunk_boundary rollback \
            prefix_reuse multi_sequence batch_invariance; do
    expect_rows builtin 1 PASS "$ck" "$be" 0
  done
done
expect_rows builtin 4 SKIP rollback_trim
grep -q "capability 'trim' not announced by reference" "$TMP/builtin.json" &&
  ok "rollback_trim SKIP names the missing capability" || bad "rollback_trim SKIP reason"

# ---- self-test faults -----------------------------------------------------------------------
# fault  checks that must FAIL  a check that must still PASS
while read -r fault must keep; do
  run "fault-$fault" --filter "$CASES" --backend reference --inject-fault "$fault"
  expect_rc "fault-$fault" 1
  for ck in ${must//,/ }; do expect_rows "fault-$fault" 1 FAIL "$ck" reference; done
  expect_rows "fault-$fault" 1 PASS "$keep" reference
  # the fault touches nothing but the lifecycle: every other check still passes
  other=$(failing "$TMP/fault-$fault.json" | tr ' ' '\n' | grep -vE "^($LIFE)$" | tr '\n' ' ')
  [ -z "$other" ] && ok "fault-$fault: only lifecycle checks fail" || bad "fault-$fault: also $other"
done <<'EOF'
snapshot-noop snapshot_restore,snapshot_copy,restore_after_garbage,snapshot_chunk_boundary,rollback,prefix_reuse multi_sequence
rollback-keeps-conv rollback snapshot_restore
slot-off-by-one multi_sequence,batch_invariance snapshot_copy
EOF

# ---- the built-in backends as plugins, in process and isolated --------------------------------
for spec in "plugin:$BIN/libqc_plugin_reference.so" "isolate:plugin:$BIN/libqc_plugin_optimized.so"; do
  label="plugin-$(echo "$spec" | tr -c 'a-z\n' '_' | cut -c1-20)"
  if [ ! -f "${spec##*plugin:}" ]; then echo "SKIP: ${spec##*plugin:} not built"; continue; fi
  run "$label" --filter "$CASES" --mode dynamic --backend "$spec" --require snapshot,sequences
  expect_rc "$label" 0
  expect_rows "$label" 10 PASS "$LIFE" "plugin:.*" 0
  expect_rows "$label" 1 PASS capabilities
done

# ---- exec adapters on the Python helper -------------------------------------------------------
if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
  echo "SKIP: $PY cannot import torch and numpy: the exec part is not run"
else
  M="$PY '$SRC/tests/adapters/lifecycle_mutants.py'"
  run exec-good --filter "/len005/" --mode dynamic --backend "exec:$M good"
  expect_rc exec-good 0
  for ck in snapshot_restore snapshot_copy restore_after_garbage rollback rollback_trim \
            multi_sequence batch_invariance; do
    expect_rows exec-good 1 PASS "$ck" "exec:.*"
  done
  while read -r mutant must; do
    run "exec-$mutant" --filter "/len005/" --mode dynamic --backend "exec:$M $mutant"
    expect_rc "exec-$mutant" 1
    for ck in ${must//,/ }; do expect_rows "exec-$mutant" 1 FAIL "$ck" "exec:.*"; done
  done <<'EOF'
restore-noop snapshot_restore,restore_after_garbage,rollback
restore-keeps-conv rollback,snapshot_restore
seq-off-by-one multi_sequence,batch_invariance
trim-keeps-state rollback_trim
EOF
  expect_none exec-trim-keeps-state FAIL rollback
  # a runtime without the capabilities: SKIPPED with the reason; --require makes it a FAIL
  G="$PY '$SRC/adapters/golden/qc_golden_adapter.py'"
  run exec-plain --filter "/len005/" --mode dynamic --backend "exec:$G" --require snapshot
  expect_rc exec-plain 1
  expect_rows exec-plain 1 FAIL capabilities
  expect_rows exec-plain 7 SKIP "$LIFE|rollback_trim" "exec:.*"
  grep -q "capability 'snapshot' not announced" "$TMP/exec-plain.json" &&
    ok "exec-plain: the SKIP names the snapshot capability" || bad "exec-plain: SKIP reason"
  [ "$(failing "$TMP/exec-plain.json")" = capabilities ] &&
    ok "exec-plain: only the capabilities row fails (--require snapshot)" ||
    bad "exec-plain: failing $(failing "$TMP/exec-plain.json")"
fi

if [ "$fails" -eq 0 ]; then echo "all lifecycle tests passed"; exit 0; fi
echo "$fails lifecycle test(s) failed"
exit 1
