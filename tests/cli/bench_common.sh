# bench_common.sh — the preamble the bench CLI tests share (sourced, not a test itself):
#   . "$(dirname "$0")/bench_common.sh" NAME "$@"
# sets QC, SRC, PY, MODEL (fixtures/tiny-f32-tied-flat/model; exits 0 with SKIP without it),
# TMP (removed on exit), the counters pass/fail with ok/bad, and bench_done (summary + status).
bc_name="$1"; shift
QC="${1:?usage: $bc_name.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: $bc_name.sh <qwen-conform> <source-dir>}"
fail=0
pass=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }
bench_done() { echo "# $pass passed, $fail failed"; [ "$fail" = 0 ]; }
MODEL="$SRC/fixtures/tiny-f32-tied-flat/model"
if [ ! -f "$MODEL/config.json" ]; then
  echo "SKIP: no fixtures/tiny-f32-tied-flat/model"
  exit 0
fi
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_$bc_name.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
