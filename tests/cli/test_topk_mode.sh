#!/usr/bin/env bash
# test_topk_mode.sh <qwen-conform> <source-dir> — `check --topk K`: a logits runtime seen
# through its top-k log-probabilities only (what a server returns):
#   * the reference backend passes every fixture that way, and the report holds nothing but the
#     topk.* rows (and the file-level model_hash): 4 per case and mode;
#   * the optimized backend at k = 20 passes too;
#   * a porting bug (--inject-fault norm-no-offset) still fails topk.argmax / topk.logprob;
#   * --topk outside 1..100 is a usage error.
set -u
QC="$1"
SRC="$2"
PY=/usr/bin/python3
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }

"$QC" check --golden "$SRC/fixtures" --quiet --backend reference --mode dynamic --topk 5 \
  --json "$TMP/ref.json" > "$TMP/ref.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "reference --topk 5, every fixture: exit 0" || bad "reference --topk 5: exit $rc"
"$PY" - "$TMP/ref.json" <<'PYEOF' && ok "only topk rows, 4 per case, all PASS" || bad "topk rows"
import json, sys, collections
d = json.load(open(sys.argv[1]))
c = collections.Counter(r["check"] for r in d["checks"])
assert set(c) == {"topk.argmax", "topk.logprob", "topk.top1_in_k", "topk.overlap", "model_hash"}, c
n = c["topk.argmax"]
assert n >= 80 and all(c[k] == n for k in ("topk.logprob", "topk.top1_in_k", "topk.overlap")), c
assert all(r["verdict"] == "PASS" for r in d["checks"])
import re
lp = [float(re.search(r"max \|d logprob\| (\S+)", r["message"]).group(1)) for r in d["checks"] if r["check"] == "topk.logprob"]
assert 0 < max(lp) < 1e-3, max(lp)   # float32 vs float64: |d logprob| well inside the limit
print("cases x modes", n, "max |d logprob|", max(lp))
PYEOF

"$QC" check --golden "$SRC/fixtures/tiny-f32-tied-flat/golden.h5" --quiet --backend optimized \
  --topk 20 > "$TMP/opt.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "optimized --topk 20: exit 0" || bad "optimized --topk 20: exit $rc"

"$QC" check --golden "$SRC/fixtures/tiny-f32-tied-flat/golden.h5" --quiet --backend reference \
  --mode dynamic --topk 5 --inject-fault norm-no-offset --json "$TMP/bug.json" > "$TMP/bug.out" 2>&1
rc=$?
"$PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
f = {r["check"] for r in d["checks"] if r["verdict"] == "FAIL"}
sys.exit(not {"topk.argmax", "topk.logprob"} <= f)' "$TMP/bug.json" && [ $rc -eq 1 ] \
  && ok "norm-no-offset seen through top-k: topk.argmax and topk.logprob FAIL" \
  || bad "norm-no-offset through top-k: exit $rc"

for k in 0 101 x; do
  "$QC" check --golden "$SRC/fixtures/tiny-f32-tied-flat/golden.h5" --backend reference --topk $k \
    > "$TMP/u.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] && ok "--topk $k: exit 2" || bad "--topk $k: exit $rc"
done
echo "$fails failed"
[ $fails -eq 0 ]
