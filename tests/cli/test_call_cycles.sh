#!/usr/bin/env bash
# test_call_cycles.sh <qwen-conform> <source-dir> — the call-cycle rule (issue #28) enforces
# itself (tests/check_cycles.py: no two files of the harness call each other, from nm):
#   1. the build the binary comes from (its directory holds CMakeFiles/) has no call circle,
#      in the harness nor (--core) in the runtime and the backends;
#   2. the rule can fail: two objects compiled here that call each other, placed where CMake
#      puts a harness target's objects, are exit 1 naming both files and the symbols of each
#      arrow; a three-file circle (a -> b -> c -> a) is reported as one circle; two files that
#      call one way only are exit 0;
#   3. bad usage (no arguments, a folder that is not a build directory, a build without any
#      harness object) is exit 2.
. "$(dirname "$0")/rule_common.sh" callcycles "$@"
RULE="$SRC/tests/check_cycles.py"
BUILD="$(cd "$(dirname "$1")" && pwd)"
CC="${CC:-cc}"

expect 0 "the build has no call circle" " 0 circle\(s\)" -- "$PY" "$RULE" "$BUILD" "$SRC"
expect 0 "nor the runtime and the backends (--core)" " 0 circle\(s\)" -- "$PY" "$RULE" --core "$BUILD" "$SRC"

# obj DIR NAME.c 'C SOURCE': NAME.c compiled to DIR/CMakeFiles/qc_h_io.dir/harness/io/NAME.c.o
obj() {
    local d="$1/CMakeFiles/qc_h_io.dir/harness/io"
    mkdir -p "$d" && printf '%s\n' "$3" > "$TMP/$2" && "$CC" -c "$TMP/$2" -o "$d/$2.o"
}
obj "$TMP/b1" cyc_a.c 'int cyc_b(int); int cyc_a(int n) { return n > 0 ? cyc_b(n - 1) : 0; }'
obj "$TMP/b1" cyc_b.c 'int cyc_a(int); int cyc_b(int n) { return n > 0 ? cyc_a(n - 1) : 1; }'
obj "$TMP/b1" cyc_leaf.c 'int cyc_a(int); int cyc_leaf(void) { return cyc_a(3); }'
expect 1 "a two-file circle is caught" \
    "^cycle: <build>/harness/io/cyc_a.c -> <build>/harness/io/cyc_b.c -> <build>/harness/io/cyc_a.c$" \
    -- "$PY" "$RULE" "$TMP/b1" "$SRC"
expect 1 "the arrows name their symbols" "^  <build>/harness/io/cyc_b.c -> <build>/harness/io/cyc_a.c: cyc_a$" \
    -- "$PY" "$RULE" "$TMP/b1" "$SRC"
expect 1 "a file that only calls into the circle is not in it" " 1 circle\(s\) \(2 file\(s\) in them\)" \
    -- "$PY" "$RULE" "$TMP/b1" "$SRC"

obj "$TMP/b3" tri_a.c 'int tri_b(void); int tri_a(void) { return tri_b() + 1; }'
obj "$TMP/b3" tri_b.c 'int tri_c(void); int tri_b(void) { return tri_c() + 1; }'
obj "$TMP/b3" tri_c.c 'int tri_a(void); int tri_c(void) { static int d; return d++ ? 0 : tri_a(); }'
expect 1 "a three-file circle is one circle" \
    "cycle: <build>/harness/io/tri_a.c -> <build>/harness/io/tri_b.c -> <build>/harness/io/tri_c.c -> <build>/harness/io/tri_a.c" \
    -- "$PY" "$RULE" "$TMP/b3" "$SRC"

obj "$TMP/b0" one_a.c 'int one_b(void); int one_a(void) { return one_b(); }'
obj "$TMP/b0" one_b.c 'int one_b(void) { return 2; }'
expect 0 "a one-way call is fine" " 1 call arrows, 0 circle\(s\)" -- "$PY" "$RULE" "$TMP/b0" "$SRC"

expect 2 "no arguments" "usage: check_cycles.py" -- "$PY" "$RULE"
expect 2 "not a build directory" "not a CMake build directory" -- "$PY" "$RULE" "$TMP" "$SRC"
mkdir -p "$TMP/empty/CMakeFiles"
expect 2 "a build without harness objects" "no object files of qc_h_io" -- "$PY" "$RULE" "$TMP/empty" "$SRC"

echo "$fails failed"
[ "$fails" = 0 ]
