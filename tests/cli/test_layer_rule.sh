#!/usr/bin/env bash
# test_layer_rule.sh <qwen-conform> <source-dir> — the layer rule enforces itself (issue #14):
#   1. the source tree passes tests/check_layers.py (runtime/ includes no backend or harness
#      header, no backend includes the other's, the harness and the adapters include no
#      backend's private header: only include/qc/; the adapters include no harness header;
#      each harness/X/ folder includes only itself and the folders below it, issue #28);
#   2. the rule can fail: on a scratch copy of the folders, each forbidden arrow (runtime ->
#      reference, optimized -> reference, harness -> optimized private header, an adapter ->
#      runtime private header, an adapter -> harness, and an upward include between each
#      adjacent pair of harness folders io < host < report < check < diff < record < bench <
#      cli) is exit 1 naming the file, the line and the target; a source file directly in
#      harness/ is refused; a folder that is not a source tree is exit 2.
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
expect 1 "harness -> a private optimized header is caught" "harness/bench/qc_cmd_bench.c:1: harness/bench includes optimized/qc_opt_internal.h" -- "$PY" "$RULE" "$TMP/t"
fresh; inject adapters/builtin/qc_builtin_plugin.c ../../runtime/qc_model_priv.h
expect 1 "adapter -> a private runtime header is caught" "adapters/builtin includes runtime/qc_model_priv.h" -- "$PY" "$RULE" "$TMP/t"
fresh; inject adapters/builtin/qc_builtin_plugin.c ../../harness/io/qc_golden.h
expect 1 "adapter -> harness is caught" "adapters/builtin includes harness/io/qc_golden.h" -- "$PY" "$RULE" "$TMP/t"

# harness/X/: an upward include between each adjacent pair of folders (the name resolves through
# the folders as CMake's include path would; a relative ../X/ spelling too)
up() { # up FILE HEADER FROM TO
    fresh; [ -e "$TMP/t/harness/$4/$2" ] || echo "/* scratch */" > "$TMP/t/harness/$4/$2"
    inject "harness/$3/$1" "$2"
    expect 1 "harness $3 -> $4 is caught" "harness/$3/$1:1: harness/$3 includes harness/$4/$2" -- "$PY" "$RULE" "$TMP/t"
}
up qc_golden_io.c qc_registry.h io host
up qc_runcase.c qc_report_results.h host report
up qc_report_json.c qc_check.h report check
up qc_check_engine.c qc_diff_internal.h check diff
up qc_diff_file.c qc_record_moe.h diff record
up qc_cmd_record.c qc_bench_internal.h record bench
up qc_cmd_bench.c qc_cli_scratch.h bench cli
fresh; inject harness/io/qc_policy.c ../check/qc_check.h
expect 1 "harness io -> check through ../check/ is caught" "harness/io/qc_policy.c:1: harness/io includes harness/check/qc_check.h" -- "$PY" "$RULE" "$TMP/t"
fresh; inject harness/cli/qc_cmd_inspect.c qc_check_cli.h; inject harness/host/qc_registry.c qc_golden.h
expect 0 "harness downward includes (cli -> check, host -> io) are fine" "0 forbidden" -- "$PY" "$RULE" "$TMP/t"
fresh; echo "int qc_flat;" > "$TMP/t/harness/qc_flat.c"
expect 1 "a source file directly in harness/ is refused" "harness/qc_flat.c: not in a harness layer folder" -- "$PY" "$RULE" "$TMP/t"
fresh; inject harness/bench/qc_cmd_bench.c qc/qc_optimized.h
expect 0 "harness -> the public include/qc/ is fine" "0 forbidden" -- "$PY" "$RULE" "$TMP/t"
expect 2 "not a source tree" "no runtime/ folder" -- "$PY" "$RULE" "$TMP"

echo "$fails failed"
[ "$fails" = 0 ]
