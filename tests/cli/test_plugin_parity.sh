#!/usr/bin/env bash
# test_plugin_parity.sh QC SRC — the built-in reference backend as a runtime plugin
# (libqc_plugin_reference.so, next to qwen-conform in the build dir) equals `--backend
# reference` on EVERY fixture: each directory of fixtures/ holding a golden.h5 is enumerated (a
# new fixture is covered without touching this file) and checked on both backends with default
# options; tests/cli/plugin_parity.py asserts the same rows (stem, case, mode, check), the same
# verdicts and the same numbers, timings and backend names aside (the per-file `capabilities`
# row only the plugin gets is the one allowed extra), from one whole-file run of each (after a
# chunk_sweep the host sets chunk_size back to 64: every later row is computed as the built-in
# computes it). This covers what used to differ: router_topk (the plugin
# reports its router through get_router, QC_CAP_ROUTER) and tiny-long-context (4104 positions:
# the plugin's default capacity is sized from the model, adapters/builtin/qc_builtin_plugin.c).
# No router_topk row of a MoE fixture may be SKIPPED on the plugin.
# Run time: about 1 min (reference) + 2 x 1.5 min (plugin) of one core for the 13 fixtures.
set -u
QC="$1"; SRC="$2"
BIN="$(cd "$(dirname "$QC")" && pwd)"
SO="$BIN/libqc_plugin_reference.so"
TMP="$(mktemp -d /tmp/qc_test_plugin_parity.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
[ -f "$SO" ] || { echo "FAIL - $SO not built"; exit 1; }
/usr/bin/python3 "$SRC/tests/cli/plugin_parity.py" "$QC" "$SO" "$SRC/fixtures" "$TMP"
