#!/usr/bin/env bash
# test_bench_moe.sh — `qwen-conform bench` on the Qwen3.5 MoE presets.
#   bash tests/cli/test_bench_moe.sh <path-to-qwen-conform> <source-dir>
# 1. The whole 35b-a3b does not fit under --max-memory 8G: exit 2 before any weight is built,
#    the message suggests the largest --layers N that fits (N + 1 is refused under the same
#    limit), no report written. Bad --layers uses exit 2.
# 2. `bench --synthetic 35b-a3b --layers 1` (optimized backend, a few tokens, one repetition):
#    the JSON's total and active weight bytes equal the preset's arithmetic, computed here
#    independently from the dimensions (one DeltaNet layer + embedding + lm_head; active = k of
#    the E experts and the lm_head once); the decode limit is bandwidth / ACTIVE bytes; the
#    whole-model (40-layer) bytes match the same arithmetic and the spec's ~69.3 GB / ~5.9 GB;
#    the report says TRUNCATED and labels the implied whole-model decode rate.
# Building the 1-layer synthetic model (3.7 GB of BF16 weights) takes ~20 s on 2 cores.
set -u
QC="${1:?usage: test_bench_moe.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: test_bench_moe.sh <qwen-conform> <source-dir>}"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

fail=0
pass=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_bench_moe.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

# ---- 1. refusals -------------------------------------------------------------------------
"$QC" bench --synthetic 35b-a3b --backends optimized --prompt 4 --decode 2 --reps 1 \
  --max-memory 8G --json "$TMP/full.json" >"$TMP/full.out" 2>"$TMP/full.err"
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--layers N" "$TMP/full.err" && grep -q "does not fit" "$TMP/full.err" \
   && grep -q "at most [0-9]* of its 40 fit" "$TMP/full.err" && [ ! -e "$TMP/full.json" ]; then
  ok "whole 35b-a3b refused under --max-memory 8G, suggesting --layers"
else
  bad "whole 35b-a3b: rc $rc, expected 2 with a --layers hint and no report"; cat "$TMP/full.err"
fi
# the suggestion is the largest N the same plan accepts: N + 1 layers are refused under the limit
N="$(sed -n 's/.*at most \([0-9]*\) of its 40 fit.*/\1/p' "$TMP/full.err")"
if [ -n "$N" ] && [ "$N" -ge 1 ] && [ "$N" -lt 40 ]; then
  "$QC" bench --synthetic 35b-a3b --layers $((N + 1)) --backends optimized --prompt 4 --decode 2 \
    --reps 1 --max-memory 8G >/dev/null 2>"$TMP/n1.err"
  rc=$?
  if [ $rc -eq 2 ] && grep -q "needs .* > limit 8.00 GiB" "$TMP/n1.err"; then
    ok "--layers $((N + 1)) (one more than suggested) is refused under the same limit"
  else
    bad "--layers $((N + 1)): rc $rc"; cat "$TMP/n1.err"
  fi
else
  bad "no --layers suggestion parsed from: $(cat "$TMP/full.err")"
fi
"$QC" bench --synthetic 35b-a3b --layers 41 --backends optimized >/dev/null 2>"$TMP/l41.err"
rc=$?
if [ $rc -eq 2 ] && grep -q "41 exceeds the 35b-a3b preset's 40 layers" "$TMP/l41.err"; then
  ok "--layers 41 refused naming the preset's 40 layers"
else
  bad "--layers 41: rc $rc"; cat "$TMP/l41.err"
fi
mkdir -p "$TMP/m" && echo '{}' >"$TMP/m/config.json"
"$QC" bench --model "$TMP/m" --layers 1 >/dev/null 2>"$TMP/lm.err"
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--layers: only with --synthetic" "$TMP/lm.err"; then
  ok "--layers with --model refused"
else
  bad "--layers with --model: rc $rc"; cat "$TMP/lm.err"
fi

# ---- 2. one layer of 35b-a3b ---------------------------------------------------------------
"$QC" bench --synthetic 35b-a3b --layers 1 --backends optimized --prompt 4 --static-prompt 2 \
  --decode 2 --reps 1 --warmup 0 --min-time 0 --threads 2 --max-memory 8G \
  --json "$TMP/b.json" --markdown "$TMP/b.md" >"$TMP/b.out" 2>"$TMP/b.err"
rc=$?
if [ $rc -ne 0 ]; then
  bad "bench --synthetic 35b-a3b --layers 1: rc $rc"; cat "$TMP/b.err"
else
  ok "bench --synthetic 35b-a3b --layers 1 ran"
  "$PY" - "$TMP/b.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
cf = j["config"]; w = cf["weights"]
fails = []
def check(cond, what):
    print(("ok   - " if cond else "FAIL - ") + what)
    if not cond: fails.append(what)

# the 35B-A3B text config (hub config.json), computed independently of the tool
V, H, E, k, Ie, Is = 248320, 2048, 256, 8, 512, 512
nh, nkv, hd = 16, 2, 256
nk, dk, nv, dv, K = 16, 128, 32, 128, 4
BF, F32 = 2, 4
C = 2 * nk * dk + nv * dv                        # conv dim 8192
def layer(full, experts):
    b = 2 * H * BF                               # input / post-attention norms
    if full:
        b += (2 * nh * hd * H + 2 * nkv * hd * H + H * nh * hd + 2 * hd) * BF
    else:
        b += (C * H + nv * dv * H + 2 * nv * H + C * K + nv + H * nv * dv) * BF
        b += (nv + dv) * F32                     # A_log, linear_attn.norm (F32)
    b += (E * H + experts * 3 * Ie * H + 3 * Is * H + H) * BF   # router, experts, shared (+gate)
    return b
tot1 = 2 * V * H * BF + H * BF + layer(False, E)                 # untied: embedding + lm_head
act1 = V * H * BF + H * BF + layer(False, k)                     # lm_head once, k experts
check(w["moe"] is True and w["n_experts"] == E and w["n_experts_per_tok"] == k, "MoE geometry reported")
check(w["layers_measured"] == 1 and w["layers_model"] == 40 and w["truncated"] is True, "truncation reported")
check(w["total_bytes"] == tot1, "1-layer total bytes %d == %d" % (w["total_bytes"], tot1))
check(w["active_bytes_per_token"] == act1, "1-layer active bytes %d == %d" % (w["active_bytes_per_token"], act1))
check(cf["weight_bytes_per_token"] == act1, "decode limit bytes are the active bytes")
check(act1 < tot1 and abs(w["active_bytes_per_token"] / w["total_bytes"] - act1 / tot1) < 1e-12,
      "active / total = %.6f" % (act1 / tot1))
totL = 2 * V * H * BF + H * BF + sum(layer(i % 4 == 3, E) for i in range(40))
actL = V * H * BF + H * BF + sum(layer(i % 4 == 3, k) for i in range(40))
f = w["whole_model"]
check(f["layers"] == 40 and f["total_bytes"] == totL and f["active_bytes_per_token"] == actL,
      "whole model: %d / %d bytes" % (totL, actL))
check(abs(totL / 69.3e9 - 1) < 0.01 and abs(actL / 5.9e9 - 1) < 0.01, "whole model ~69.3 GB resident, ~5.9 GB per token")
bw = j["probes"]["bandwidth_gbs_median"]
dec = [r for r in j["results"] if r["mode"] == "decode"]
check(len(dec) == 1, "one decode figure")
if dec:
    r = dec[0]
    check(bw > 0 and abs(r["limit_tok_s"] - bw * 1e9 / act1) <= 1e-6 * r["limit_tok_s"],
          "decode limit = bandwidth / active bytes (%.3f tok/s)" % r["limit_tok_s"])
    check(abs(r["pct_of_limit"] - 100 * r["tok_s_median"] / r["limit_tok_s"]) < 1e-6, "decode % of roofline")
    imp = r.get("implied_whole_model_tok_s", -1)
    check(abs(imp - r["tok_s_median"] * act1 / actL) <= 1e-9 * max(imp, 1e-9), "implied whole-model decode labelled")
sys.exit(1 if fails else 0)
EOF
  if [ $? -eq 0 ]; then ok "JSON bytes match the preset's arithmetic"; else bad "JSON bytes"; fi
  if grep -q "TRUNCATED" "$TMP/b.md" && grep -q "implied -- NOT measured" "$TMP/b.md" \
     && grep -q "1 of 40 layers" "$TMP/b.md"; then
    ok "Markdown says TRUNCATED and labels the implied figures"
  else
    bad "Markdown lacks the truncation / implied labels"; cat "$TMP/b.md"
  fi
fi

echo "# $pass passed, $fail failed"
[ $fail -eq 0 ]
