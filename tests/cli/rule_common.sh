# rule_common.sh — sourced by the tests of the source-tree rules (test_size_rule.sh,
# test_layer_rule.sh) as `. rule_common.sh NAME "$@"` (their arguments: QC SRC): sets SRC, PY,
# TMP (removed on exit), fails, and expect().
set -u
SRC="$3"
PY=/usr/bin/python3
TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_$1.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
fails=0
expect() { # expect RC DESCRIPTION PATTERN -- CMD...
    local want="$1" what="$2" pat="$3"; shift 4
    local out rc
    out="$("$@" 2>&1)"; rc=$?
    if [ "$rc" != "$want" ]; then
        echo "FAIL: $what: exit $rc, want $want"; echo "$out" | tail -5; fails=$((fails + 1)); return
    fi
    if [ -n "$pat" ] && ! grep -qE -- "$pat" <<<"$out"; then
        echo "FAIL: $what: output lacks /$pat/"; echo "$out" | tail -5; fails=$((fails + 1)); return
    fi
    echo "ok: $what"
}
