#!/usr/bin/env bash
# test_size_rule.sh <qwen-conform> <source-dir> — the size rule enforces itself (issue #14):
#   1. the source tree passes tests/check_sizes.py (files <= 800 lines, C functions <= 120 lines
#      or a "long:" reason directly above, known exceptions in tests/size_exceptions.txt);
#   2. the rule can fail: on a scratch tree, a 130-line function fails (exit 1, naming the file,
#      the line and the function), the same function with a "long:" comment passes, an 801-line
#      file fails, an exception listed in size_exceptions.txt passes, tests/ files never fail,
#      a directory that is not a source tree is exit 2.
. "$(dirname "$0")/rule_common.sh" sizerule "$@"
RULE="$SRC/tests/check_sizes.py"
long_fn() { # long_fn NAME BODY_LINES
    echo "int $1(int x) {"
    for ((i = 0; i < $2; i++)); do echo "    x += $i;"; done
    echo "    return x;"
    echo "}"
}

expect 0 "the source tree passes" "0 over the limits" -- "$PY" "$RULE" "$SRC"

T="$TMP/tree"; mkdir -p "$T/harness" "$T/tests" "$T/runtime"
long_fn short_one 20 > "$T/harness/a.c"
expect 0 "a short function passes" "0 over the limits" -- "$PY" "$RULE" "$T"
{ echo "/* a comment with { braces } and \"}\" */"; long_fn too_long 130; } > "$T/harness/b.c"
expect 1 "a 133-line function fails" "harness/b.c:2: function too_long is 133 lines" -- \
    "$PY" "$RULE" "$T"
{ echo "/* long: one table, kept whole to read it at once */"; long_fn too_long 130; } > "$T/harness/b.c"
expect 0 "the same function with a long: reason passes" "0 over the limits" -- "$PY" "$RULE" "$T"
for ((i = 0; i < 801; i++)); do echo "/* $i */"; done > "$T/runtime/big.c"
expect 1 "an 801-line file fails" "runtime/big.c: 801 lines" -- "$PY" "$RULE" "$T"
echo "runtime/big.c   # test" > "$T/tests/size_exceptions.txt"
expect 0 "a listed exception passes" "1 known exceptions" -- "$PY" "$RULE" "$T"
long_fn in_tests 200 > "$T/tests/test_x.c"
expect 0 "tests/ is exempt (but counted)" "2 in exempt tests/|1 in exempt tests/" -- "$PY" "$RULE" "$T"
expect 2 "not a source tree" "no harness/ directory" -- "$PY" "$RULE" "$TMP/nowhere"

if [ "$fails" -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all size-rule checks passed"
