#!/usr/bin/env bash
# test_presets_27b_2_4t.sh — the 27b (Qwen3.5/3.6/3.8-27B) and 2.4t-a95b (Qwen3.8-2.4T-A95B)
# presets through `bench` (issue #27 item 6; the dimensions and their sources:
# docs/qwen35-model.md 2.6).
#   bash tests/cli/test_presets_27b_2_4t.sh <path-to-qwen-conform> <source-dir>
# 1. `bench --synthetic 27b --layers 2 --prompt 8 --decode 2 --reps 1` runs (6.6 GB of BF16
#    weights: the 248320 x 5120 embedding and untied head are 5.1 GB of it; ~40 s on 2 cores,
#    most of it building the weights), and reports the whole model's 64 layers and size.
# 2. 2.4t-a95b does not fit this machine even at one layer (one layer's 512 experts of width
#    2048 at hidden 8192 are 51.5 GB in BF16): `bench --synthetic 2.4t-a95b --layers 2` is
#    refused by the memory plan before anything is allocated (exit 2, "not even --layers 1",
#    well under a second, no report); --layers 93 is refused naming the preset's 92 layers.
# Skipped (exit 0) when the machine has less than 10 GiB available for part 1.
set -u
QC="${1:?usage: test_presets_27b_2_4t.sh <qwen-conform> <source-dir>}"

fail=0
pass=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_presets.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

# ---- 2.4t-a95b: refused by the plan, never allocated -----------------------------------------
start=$(date +%s)
"$QC" bench --synthetic 2.4t-a95b --layers 2 --prompt 8 --decode 2 --reps 1 --backends optimized \
  --max-memory 20G --json "$TMP/t.json" >"$TMP/out" 2>"$TMP/err"
rc=$?
secs=$(( $(date +%s) - start ))
if [ $rc = 2 ] && grep -q "not even --layers 1" "$TMP/err" && grep -q "MoE:" "$TMP/err" \
   && [ ! -e "$TMP/t.json" ] && [ $secs -le 5 ]; then
  ok "bench --synthetic 2.4t-a95b --layers 2: refused by the memory plan in ${secs} s, no report"
else
  bad "2.4t-a95b --layers 2: exit $rc in ${secs} s; $(cat "$TMP/err")"
fi
# the plan's weights for 2 layers: 2 x (512 experts x 3 x 2048 x 8192 + the rest) + embedding
# and head (2 x 248320 x 8192), BF16 -- between 100 and 110 GiB
gib=$(sed -n 's/.*: weights \([0-9.]*\) GiB.*/\1/p' "$TMP/err" | head -1)
if [ -n "$gib" ] && awk -v g="$gib" 'BEGIN { exit !(g > 100 && g < 110) }'; then
  ok "2.4t-a95b 2-layer plan: $gib GiB of weights"
else
  bad "2.4t-a95b 2-layer plan weights '$gib' GiB not in (100, 110): $(cat "$TMP/err")"
fi
"$QC" bench --synthetic 2.4t-a95b --layers 93 --backends optimized >/dev/null 2>"$TMP/err"
rc=$?
[ $rc = 2 ] && grep -q "93 exceeds the 2.4t-a95b preset's 92 layers" "$TMP/err" \
  && ok "--layers 93 refused naming the preset's 92 layers" \
  || bad "2.4t-a95b --layers 93: exit $rc; $(cat "$TMP/err")"

# ---- 27b --layers 2 runs --------------------------------------------------------------------
avail_kb=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo 2>/dev/null)
if [ -n "$avail_kb" ] && [ "$avail_kb" -lt $((10 * 1024 * 1024)) ]; then
  echo "SKIP: 27b --layers 2 needs ~6.3 GiB; only $((avail_kb / 1024)) MiB available"
else
  "$QC" bench --synthetic 27b --layers 2 --prompt 8 --decode 2 --reps 1 --backends optimized \
    --warmup 0 --min-time 0 --json "$TMP/b.json" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  if [ $rc = 0 ] && [ -s "$TMP/b.json" ]; then
    ok "bench --synthetic 27b --layers 2 --prompt 8 --decode 2 --reps 1: exit 0"
  else
    bad "bench --synthetic 27b --layers 2: exit $rc; $(tail -5 "$TMP/err")"
  fi
  /usr/bin/python3 - "$TMP/b.json" <<'EOF' && ok "27b report: 2 of 64 layers, whole model 50-56 GB BF16, figures finite" \
    || bad "27b report contents"
import json, math, sys
d = json.load(open(sys.argv[1]))
c = d["config"]
w = c["weights"]
assert "synthetic 27b" in c["model"], c["model"]
assert (w["layers_measured"], w["layers_model"], w["truncated"]) == (2, 64, True), w
assert 50e9 < w["whole_model"]["total_bytes"] < 56e9, w  # 26.9 B parameters in BF16
assert not w["moe"]
assert d["results"] and all(r["tok_s_median"] > 0 and math.isfinite(r["tok_s_median"])
                            for r in d["results"])
EOF
fi

echo "# $pass passed, $fail failed"
[ "$fail" = 0 ]
