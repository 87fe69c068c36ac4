#!/usr/bin/env bash
# test_inspect_moe.sh <qwen-conform> <source-dir> — `inspect` prints the MoE config of a MoE
# golden (experts, experts per token, expert and shared-expert widths) and no MoE line for a
# dense one (issue 15); its groups column lists the mixer-output datasets of every case:
# prefill/router prefill/moe_in decode/router decode/moe_in for a MoE golden, prefill/mlp_in
# decode/mlp_in for a dense one (not the MoE names), and not when a copy of the dense golden
# has them removed from one case (h5py).
set -u
PY=${PYTHON:-/usr/bin/python3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
QC="$1"
FIX="$2/fixtures"
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }
out=$("$QC" inspect "$FIX/tiny-moe-f32-nested/golden.h5" 2>&1)
echo "$out" | grep -qE "^  moe: +8 experts, 2 per token, expert intermediate 16, shared expert intermediate 24$" \
  && ok "MoE golden: moe line with E=8, k=2, Ie=16, Is=24" || { bad "MoE golden: no/wrong moe line"; echo "$out" | head -n 12; }
out=$("$QC" inspect "$FIX/tiny-moe-bf16-flat/golden.h5" 2>&1)
echo "$out" | grep -qE "^  moe: +[0-9]+ experts, [0-9]+ per token" && ok "bf16-flat MoE golden: moe line" \
  || bad "bf16-flat MoE golden: no moe line"
out=$("$QC" inspect "$FIX/tiny-f32-tied-flat/golden.h5" 2>&1)
echo "$out" | grep -q "^config:" && ok "dense golden: config line" || bad "dense golden: no config line"
echo "$out" | grep -q "^  moe:" && bad "dense golden: a moe line" || ok "dense golden: no moe line"

# the case rows of an inspect output (name, start_pos, history, T, S, ...)
rows() { grep -E '^  [A-Za-z0-9_]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ '; }
# groups_check LABEL OUTPUT WANT... : every case row lists each WANT group (as a whole word)
groups_check() {
  local label="$1" text="$2" n miss; shift 2
  n=$(printf '%s\n' "$text" | rows | wc -l)
  [ "$n" -ge 1 ] || { bad "$label: no case rows"; return; }
  for g in "$@"; do
    miss=$(printf '%s\n' "$text" | rows | grep -cvE "(^| )$g( |\$)")
    [ "$miss" = 0 ] && ok "$label: all $n case rows list $g" || bad "$label: $miss of $n case rows lack $g"
  done
}
dense=$("$QC" inspect "$FIX/tiny-f32-tied-flat/golden.h5" 2>&1)
groups_check "dense golden" "$dense" prefill/mlp_in decode/mlp_in prefill/hidden decode/state
echo "$dense" | rows | grep -qE "moe_in|router" && bad "dense golden: a row lists moe_in / router" \
  || ok "dense golden: no row lists moe_in / router"
moe=$("$QC" inspect "$FIX/tiny-moe-f32-nested/golden.h5" 2>&1)
groups_check "MoE golden" "$moe" prefill/router prefill/moe_in decode/router decode/moe_in
echo "$moe" | rows | grep -q "mlp_in" && bad "MoE golden: a row lists mlp_in" || ok "MoE golden: no row lists mlp_in"

# control: the dense golden with case len005's mlp_in datasets removed
cp "$FIX/tiny-f32-tied-flat/golden.h5" "$TMP/g.h5"
"$PY" - "$TMP/g.h5" <<'PYEOF' || bad "could not strip mlp_in from the copy"
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    del f["cases/len005/prefill/mlp_in"]
    del f["cases/len005/decode/mlp_in"]
PYEOF
out=$("$QC" inspect "$TMP/g.h5" 2>&1); rc=$?
[ "$rc" = 0 ] && ok "stripped copy: inspect exits 0" || bad "stripped copy: inspect exits $rc: $(echo "$out" | tail -2)"
row=$(printf '%s\n' "$out" | rows | grep -E '^  len005 ')
[ -n "$row" ] && ! echo "$row" | grep -q mlp_in && ok "stripped copy: len005 lists no mlp_in" \
  || bad "stripped copy: len005 row: '$row'"
n_with=$(printf '%s\n' "$out" | rows | grep -c "prefill/mlp_in")
n_all=$(printf '%s\n' "$out" | rows | wc -l)
[ "$n_with" = $((n_all - 1)) ] && ok "stripped copy: the other $n_with cases still list mlp_in" \
  || bad "stripped copy: $n_with of $n_all rows list prefill/mlp_in"
echo "test_inspect_moe.sh: $fails failure(s)"
[ "$fails" -eq 0 ]
