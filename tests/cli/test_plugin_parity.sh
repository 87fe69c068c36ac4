#!/usr/bin/env bash
# test_plugin_parity.sh QC SRC — the built-in reference backend as a runtime plugin
# (libqc_plugin_reference.so, next to qwen-conform in the build dir) equals `--backend
# reference` on EVERY fixture: each directory of fixtures/ holding a golden.h5 is enumerated (a
# new fixture is covered without touching this file) and checked on both backends with default
# options; tests/cli/compare_reports.py then asserts the same rows (stem, case, mode, check), the
# same verdicts and the same numbers, timings and backend names aside (the per-file
# `capabilities` row only the plugin gets is the one allowed extra). This covers what used to
# differ: router_topk (the plugin reports its router through get_router, QC_CAP_ROUTER) and
# tiny-long-context (4104 positions: the plugin's default capacity is sized from the model,
# adapters/builtin/qc_builtin_plugin.c). Each fixture must produce rows on both sides, and no
# router_topk row of a MoE fixture may be SKIPPED on the plugin.
# Run time: about 1 min (reference) + 1.5 min (plugin) on one idle core for the 13 fixtures.
set -u
QC="$1"; SRC="$2"
BIN="$(cd "$(dirname "$QC")" && pwd)"
PY=/usr/bin/python3
SO="$BIN/libqc_plugin_reference.so"
TMP="$(mktemp -d /tmp/qc_test_plugin_parity.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }
[ -f "$SO" ] || { echo "FAIL - $SO not built"; exit 1; }

n_fix=0
for dir in "$SRC"/fixtures/*/; do
  [ -f "$dir/golden.h5" ] || continue
  fx="$(basename "$dir")"
  n_fix=$((n_fix + 1))
  "$QC" check --golden "$dir" --backend reference --quiet --json "$TMP/ref-$fx.json" \
    >"$TMP/ref-$fx.out" 2>&1; r1=$?
  "$QC" check --golden "$dir" --backend "plugin:$SO" --quiet --json "$TMP/plug-$fx.json" \
    >"$TMP/plug-$fx.out" 2>&1; r2=$?
  if [ "$r1" -ne "$r2" ] || [ "$r1" -ge 2 ]; then
    bad "$fx: exit $r1 (reference) vs $r2 (plugin)"; tail -n 3 "$TMP/plug-$fx.out"; continue
  fi
  if ! $PY "$SRC/tests/cli/compare_reports.py" "$TMP/ref-$fx.json" "$TMP/plug-$fx.json" \
       >"$TMP/cmp-$fx.txt" 2>&1; then
    bad "$fx: the plugin differs from reference: $(tail -n 1 "$TMP/cmp-$fx.txt")"
    grep -E '^(differs|only in)' "$TMP/cmp-$fx.txt" | head -n 6
    continue
  fi
  # rows on both sides, and the MoE router really compared (not SKIPPED) on the plugin
  if ! $PY - "$TMP/ref-$fx.json" "$TMP/plug-$fx.json" "$fx" >"$TMP/sum-$fx.txt" 2>&1 <<'PYEOF'
import json, sys
a, b = (json.load(open(p))["checks"] for p in sys.argv[1:3])
fx = sys.argv[3]
ra = [r for r in a if r["stem"] == fx]
rb = [r for r in b if r["stem"] == fx and r["check"] != "capabilities"]
if not ra or len(ra) != len(rb):
    sys.exit("%d rows of %s (reference) vs %d (plugin)" % (len(ra), fx, len(rb)))
router = [r for r in rb if r["check"] == "router_topk"]
skipped = [r for r in router if r["verdict"] == "SKIP" and "dense model" not in r["message"]]
if skipped:
    sys.exit("router_topk SKIPPED on the plugin: %s" % skipped[0]["message"])
print("%d rows, %d router_topk compared" % (len(rb), len(router) - sum(
    r["verdict"] == "SKIP" for r in router)))
PYEOF
  then bad "$fx: $(cat "$TMP/sum-$fx.txt")"; continue; fi
  ok "$fx: plugin == reference ($(cat "$TMP/sum-$fx.txt"), exit $r1)"
done
[ "$n_fix" -ge 1 ] || bad "no fixture directory with a golden.h5 under $SRC/fixtures"
echo "test_plugin_parity: $n_fix fixture(s), $fails failure(s)"
[ "$fails" -eq 0 ]
