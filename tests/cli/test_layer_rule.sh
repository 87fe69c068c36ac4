#!/usr/bin/env bash
# test_layer_rule.sh <qwen-conform> <source-dir> — the layer rule enforces itself (issue #14):
#   1. the source tree passes tests/check_layers.py (runtime/ includes no backend or harness
#      header, no backend includes the other's, the harness and the adapters include no
#      backend's private header: only include/qc/);
#   2. the rule can fail: on a scratch copy of the folders, each forbidden arrow (runtime ->
#      reference, optimized -> reference, harness -> optimized private header, an adapter ->
#      runtime private header) is exit 1 naming the file, the line and the target; a folder
#      that is not a source tree is exit 2.
. "$(dirname "$0")/rule_common.sh" layerrule "$@"
RULE="$SRC/tests/check_layers.py"

expect 0 "the source tree keeps its layers" "0 forbidden" -- "$PY" "$RULE" "$SRC"

fresh() { rm -rf "$TMP/t"; mkdir -p "$TMP/t"; cp -r "$SRC"/{include,runtime,reference,optimized,harness,adapters} "$TMP/t/"; }
inject() { # inject FILE INCLUDE: a forbidden #include as the file's first line
    sed -i "1i #include \"$2\"" "$TMP/t/$1"
}
fresh; inject runtime/qc_state.c ../reference/qc_ref_blocks.h
expect 1 "runtime -> reference is caught" "runtime/qc_state.c:1: runtime includes reference/qc_ref_blocks.h" -- "$PY" "$RULE" "$TMP/t"
fresh; inject optimized/qc_opt_pool.c ../reference/qc_ref_moe.h
expect 1 "optimized -> reference is caught" "optimized/qc_opt_pool.c:1: optimized includes reference/qc_ref_moe.h" -- "$PY" "$RULE" "$TMP/t"
fresh; inject harness/bench/qc_cmd_bench.c ../../optimized/qc_opt_internal.h
expect 1 "harness -> a private optimized header is caught" "harness/bench/qc_cmd_bench.c:1: harness includes optimized/qc_opt_internal.h" -- "$PY" "$RULE" "$TMP/t"
fresh; inject adapters/builtin/qc_builtin_plugin.c ../../runtime/qc_model_priv.h
expect 1 "adapter -> a private runtime header is caught" "adapters/builtin includes runtime/qc_model_priv.h" -- "$PY" "$RULE" "$TMP/t"
fresh; inject harness/bench/qc_cmd_bench.c qc/qc_optimized.h
expect 0 "harness -> the public include/qc/ is fine" "0 forbidden" -- "$PY" "$RULE" "$TMP/t"
expect 2 "not a source tree" "no runtime/ folder" -- "$PY" "$RULE" "$TMP"

echo "$fails failed"
[ "$fails" = 0 ]
