#!/usr/bin/env bash
# test_bench_profile_ops.sh — `qwen-conform bench --profile-ops` (issue #16 item 4).
#   bash tests/cli/test_bench_profile_ops.sh <path-to-qwen-conform> <source-dir>
# On a tiny checkpoint: the JSON gets "profile_ops" with the three phases (prefill with the
# last logits, decode per step, prefill with every position's logits), every op class with
# seconds >= 0, the projections and the lm_head timed (> 0) with a rate, the classes' seconds
# within the phase's wall time; the lm_head over all rows costs more than over the last; the
# Markdown (stdout and --markdown) has the section; without the flag there is neither.
set -u
. "$(dirname "$0")/bench_common.sh" test_bench_profile_ops "$@"
QUICK=(--reps 3 --min-time 0 --warmup 0 --backend optimized --static-prompt 2 --threads 2)

"$QC" bench --model "$MODEL" --prompt 96 --max-seq-len 32 --decode 4 "${QUICK[@]}" --profile-ops \
  --json "$TMP/p.json" --markdown "$TMP/p.md" >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 0 ] && ok "--profile-ops exits 0" || bad "--profile-ops: exit $rc $(tail -2 "$TMP/stderr")"
"$PY" - "$TMP/p.json" <<'PYEOF' && ok "JSON profile_ops: 3 phases, every class, rates, sums" || bad "JSON profile_ops"
import json, sys
d = json.load(open(sys.argv[1]))["profile_ops"]
assert d["prompt"] == 96 and d["chunk"] == 32 and d["decode_steps"] == 4 and d["threads"] == 2, d
classes = ["proj", "deltanet", "attention", "conv", "norms", "elementwise", "lm_head", "moe"]
for ph in ("prefill", "decode", "prefill_all_logits"):
    p = d[ph]
    assert p["seconds"] > 0, (ph, p)
    for c in classes:
        assert p[c]["seconds"] >= 0, (ph, c)
    assert p["proj"]["seconds"] > 0 and p["lm_head"]["seconds"] > 0, ph
    assert p["attention"]["seconds"] > 0 and p["deltanet"]["seconds"] > 0, ph
    s = sum(p[c]["seconds"] for c in classes)
    assert s <= 1.5 * p["seconds"], (ph, s, p["seconds"])
    key = "gbs" if ph == "decode" else "gflops"
    assert p["proj"][key] > 0 and p["lm_head"][key] > 0, (ph, p["proj"], p["lm_head"])
assert d["prefill_all_logits"]["lm_head"]["seconds"] > d["prefill"]["lm_head"]["seconds"], d
assert all(d[ph]["moe"]["seconds"] == 0 for ph in ("prefill", "decode")), "dense model: no moe time"
PYEOF
for f in "$TMP/stdout" "$TMP/p.md"; do
  grep -q "### Time per op class" "$f" && grep -q "| lm_head |" "$f" && grep -q "decode (per step)" "$f" \
    && ok "Markdown section in $(basename "$f")" || bad "no op-class section in $(basename "$f")"
done

"$QC" bench --model "$MODEL" --prompt 16 --decode 2 "${QUICK[@]}" --json "$TMP/n.json" >"$TMP/stdout2" 2>"$TMP/stderr2"
rc=$?
[ $rc = 0 ] && ! grep -q "Time per op class" "$TMP/stdout2" && \
  "$PY" -c 'import json,sys; assert "profile_ops" not in json.load(open(sys.argv[1]))' "$TMP/n.json" \
  && ok "without --profile-ops: no section, no profile_ops" || bad "profile section without the flag (exit $rc)"

# A MoE checkpoint: the router / experts / shared expert jobs are attributed to "moe" (> 0).
MOE="$SRC/fixtures/tiny-moe-f32-nested/model"
if [ -f "$MOE/config.json" ]; then
  "$QC" bench --model "$MOE" --prompt 16 --decode 2 "${QUICK[@]}" --profile-ops --json "$TMP/m.json" \
    >"$TMP/stdout3" 2>"$TMP/stderr3"
  rc=$?
  [ $rc = 0 ] && grep -q "| moe |" "$TMP/stdout3" && "$PY" - "$TMP/m.json" <<'PYEOF' \
    && ok "MoE model: moe class timed in prefill and decode" || bad "MoE profile (exit $rc)"
import json, sys
d = json.load(open(sys.argv[1]))["profile_ops"]
for ph in ("prefill", "decode"):
    assert d[ph]["moe"]["seconds"] > 0, (ph, d[ph]["moe"])
    assert d[ph]["moe"]["seconds"] <= 1.5 * d[ph]["seconds"], (ph, d[ph])
PYEOF
fi

bench_done
