#!/usr/bin/env bash
# test_inspect_moe.sh <qwen-conform> <source-dir> — `inspect` prints the MoE config of a MoE
# golden (experts, experts per token, expert and shared-expert widths) and no MoE line for a
# dense one (issue 15).
set -u
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
echo "test_inspect_moe.sh: $fails failure(s)"
[ "$fails" -eq 0 ]
