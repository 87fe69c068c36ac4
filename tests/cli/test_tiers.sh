#!/bin/bash
# test_tiers.sh — the tolerance tiers (#12 item 6, docs/tolerance-tiers.md): simulated f16-KV and
# int8 runs of a correct model pass their tiers through `diff --tier`; the same simulated runs
# with an injected porting bug fail them (dense: tiny-rope-legacy-8layer / tiny-f32-tied-flat;
# MoE: tiny-moe-bf16-flat with moe-no-renorm); the fp32 tier rejects the f16-KV run; an unknown tier
# is a usage error naming the accepted ones. ACTUAL files: golden/qcgolden simulate (the float64
# golden model with the precision's storage roundings).
#   test_tiers.sh QWEN_CONFORM REPO_ROOT
set -u
QC=$1
ROOT=$2
PY=/usr/bin/python3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# f16-KV: the fixture whose f16-KV noise the fp32 policy rejects (partial rotary 0.75, 8 layers);
# int8: the baseline fixture
G16=$ROOT/fixtures/tiny-rope-legacy-8layer/golden.h5
G8=$ROOT/fixtures/tiny-f32-tied-flat/golden.h5
# MoE: f16-KV and int8 of a correct MoE model pass; the MoE porting bug moe-no-renorm (top-k
# router weights not renormalised) fails both
GM=$ROOT/fixtures/tiny-moe-bf16-flat/golden.h5
MCASES='len001|len005|len064|cont'   # len001: the int8 row moe-no-renorm fails by 2x (docs)
CASES='len005|len064|cont'
fails=0

sim() { # GOLDEN OUT SIM [BUG]
    local g=$1 out=$2 s=$3 bug=${4:-}
    $PY "$ROOT/golden/qcgolden" simulate "$g" --sim "$s" ${bug:+--bug "$bug"} --cases "$CASES" \
        --out "$T/$out" >/dev/null || { echo "FAIL: simulate $s $bug"; exit 1; }
}
expect() { # WANT_RC LABEL ARGS...
    local want=$1 label=$2
    shift 2
    "$QC" diff "$@" --cases "$CASES" --quiet --json "$T/$label.json" >"$T/$label.out" 2>&1
    local rc=$?
    if [ "$rc" != "$want" ]; then
        echo "FAIL: $label: exit $rc, expected $want"
        tail -30 "$T/$label.out"
        fails=$((fails + 1))
    else
        echo "ok: $label (exit $rc)"
    fi
}
# the verdict of the rows named CHECK (a regex on the check column) in a JSON report
rows() { # REPORT CHECK_REGEX VERDICT -> count
    $PY - "$1" "$2" "$3" <<'PYEOF'
import json, re, sys
r = json.load(open(sys.argv[1]))
rows = r["checks"]
print(sum(1 for x in rows if re.fullmatch(sys.argv[2], x.get("check", ""))
          and x.get("verdict", x.get("status", "")).upper() == sys.argv[3]))
PYEOF
}
need() { # LABEL COUNT_EXPR MIN
    if [ "$2" -lt "$3" ]; then echo "FAIL: $1: $2 < $3"; fails=$((fails + 1)); else echo "ok: $1 ($2)"; fi
}

sim "$G16" f16kv.h5 f16-kv
sim "$G16" f16kv_rot.h5 f16-kv rotary-dim
sim "$G8" int8.h5 int8
sim "$G8" int8_norm.h5 int8 norm-offset
CASES=$MCASES sim "$GM" moe_f16kv.h5 f16-kv
CASES=$MCASES sim "$GM" moe_f16kv_bug.h5 f16-kv moe-no-renorm
CASES=$MCASES sim "$GM" moe_int8.h5 int8
CASES=$MCASES sim "$GM" moe_int8_bug.h5 int8 moe-no-renorm

expect 0 f16kv_tier --tier f16-kv "$G16" "$T/f16kv.h5"
expect 1 f16kv_fp32 "$G16" "$T/f16kv.h5"
expect 1 f16kv_fp32_explicit --tier fp32 "$G16" "$T/f16kv.h5"
expect 1 f16kv_bug --tier f16-kv "$G16" "$T/f16kv_rot.h5"
expect 0 int8_tier --tier int8 "$G8" "$T/int8.h5"
expect 1 int8_bug --tier int8 "$G8" "$T/int8_norm.h5"
expect 1 int8_under_f16kv --tier f16-kv "$G8" "$T/int8.h5"
CASES=$MCASES expect 0 moe_f16kv_tier --tier f16-kv "$GM" "$T/moe_f16kv.h5"
CASES=$MCASES expect 1 moe_f16kv_bug --tier f16-kv "$GM" "$T/moe_f16kv_bug.h5"
CASES=$MCASES expect 0 moe_int8_tier --tier int8 "$GM" "$T/moe_int8.h5"
CASES=$MCASES expect 1 moe_int8_bug --tier int8 "$GM" "$T/moe_int8_bug.h5"

# the tier rows exist (one per metric and logits check) and carry the verdicts
need "f16-kv: kl rows PASS" "$(rows "$T/f16kv_tier.json" '(prefill|decode)\.logits\.(kl_mean|kl_p99|kl_max|top1|topk)' PASS)" 30
need "int8: kl rows PASS" "$(rows "$T/int8_tier.json" '(prefill|decode)\.logits\.(kl_mean|kl_p99|kl_max|top1|topk)' PASS)" 30
need "int8 + bug: a KL row FAILS" "$(rows "$T/int8_bug.json" '(prefill|decode)\.logits\.kl_(mean|p99|max)' FAIL)" 1
need "int8 + bug: an NMSE-gated state row FAILS" "$(rows "$T/int8_bug.json" '(prefill|decode)\.(k_cache|v_cache|conv_state|recurrent_state)' FAIL)" 4
need "int8: the NMSE-gated state rows PASS" "$(rows "$T/int8_tier.json" '(prefill|decode)\.(k_cache|v_cache|conv_state|recurrent_state)' PASS)" 24
need "f16-kv + bug: a KL row FAILS" "$(rows "$T/f16kv_bug.json" '(prefill|decode)\.logits\.kl_(mean|p99|max)' FAIL)" 1
need "MoE f16-kv: kl rows PASS" "$(rows "$T/moe_f16kv_tier.json" '(prefill|decode)\.logits\.(kl_mean|kl_p99|kl_max|top1|topk)' PASS)" 30
need "MoE f16-kv + moe-no-renorm: a KL row FAILS" "$(rows "$T/moe_f16kv_bug.json" '(prefill|decode)\.logits\.kl_(mean|p99|max)' FAIL)" 1
need "MoE int8: kl rows PASS" "$(rows "$T/moe_int8_tier.json" '(prefill|decode)\.logits\.(kl_mean|kl_p99|kl_max|top1|topk)' PASS)" 30
need "MoE int8: the NMSE-gated state rows PASS" "$(rows "$T/moe_int8_tier.json" '(prefill|decode)\.(k_cache|v_cache|conv_state|recurrent_state)' PASS)" 24
need "MoE int8 + moe-no-renorm: NMSE-gated rows FAIL (len001 prefill k_cache, len064 decode conv_state)" "$(rows "$T/moe_int8_bug.json" '(prefill|decode)\.(logits|k_cache|v_cache|conv_state|recurrent_state)' FAIL)" 2
need "fp32 rejects f16-KV: a logits row FAILS" "$(rows "$T/f16kv_fp32.json" '(prefill|decode)\.(logits|k_cache|v_cache)' FAIL)" 1
need "fp32: no tier rows" "$((1 - $(rows "$T/f16kv_fp32.json" '.*\.kl_mean' PASS) - $(rows "$T/f16kv_fp32.json" '.*\.kl_mean' FAIL)))" 1

# an unknown tier: exit 2 naming the accepted values
"$QC" diff --tier fp8 "$G8" "$T/int8.h5" >"$T/bad.out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "fp32, f16-kv, bf16-kv, bf16, int8, int4" "$T/bad.out"; then
    echo "ok: unknown tier (exit 2, accepted values named)"
else
    echo "FAIL: unknown tier: exit $rc"; cat "$T/bad.out"; fails=$((fails + 1))
fi
# the shipped tier table (harness/io/qc_tier.c) and the docs' numbers are what the committed
# measurements give
cp "$ROOT/harness/io/qc_tier.c" "$T/qc_tier.c"
cp "$ROOT/docs/tolerance-tiers.md" "$T/tiers.md"
$PY "$ROOT/golden/qcgolden" measure-tiers --from "$ROOT/fixtures/tolerance-tiers-measurements.json" \
    --c-table "$T/qc_tier.c" --doc "$T/tiers.md" >/dev/null
if cmp -s "$T/qc_tier.c" "$ROOT/harness/io/qc_tier.c" && cmp -s "$T/tiers.md" "$ROOT/docs/tolerance-tiers.md"; then
    echo "ok: tier table and docs numbers match fixtures/tolerance-tiers-measurements.json"
else
    echo "FAIL: harness/io/qc_tier.c or docs/tolerance-tiers.md differ from the measurements:"
    diff "$ROOT/harness/io/qc_tier.c" "$T/qc_tier.c" | head -10
    diff "$ROOT/docs/tolerance-tiers.md" "$T/tiers.md" | head -10
    fails=$((fails + 1))
fi
# policy --print --tier: the tier's floors in the printed policy, an unknown tier refused
if "$QC" policy --print --tier f16-kv >"$T/pol.json" 2>/dev/null \
   && grep -q '"built-in + --tier f16-kv"' "$T/pol.json" \
   && ! "$QC" policy --print --tier fp9 >/dev/null 2>&1; then
    echo "ok: policy --print --tier f16-kv shows the tier; --tier fp9 refused"
else
    echo "FAIL: policy --print --tier"; fails=$((fails + 1))
fi
# simulate --out onto the golden's model files or through a symlink to the golden: refused
cp "$ROOT/fixtures/tiny-f32-tied-flat/model/config.json" "$T/config.before"
ln -s "$ROOT/fixtures/tiny-f32-tied-flat/golden.h5" "$T/link.h5"
if ! /usr/bin/python3 "$ROOT/golden/qcgolden" simulate --sim f16-kv --cases len001 \
       "$ROOT/fixtures/tiny-f32-tied-flat/golden.h5" --out "$ROOT/fixtures/tiny-f32-tied-flat/model/config.json" 2>/dev/null \
   && ! /usr/bin/python3 "$ROOT/golden/qcgolden" simulate --sim f16-kv --cases len001 \
       "$ROOT/fixtures/tiny-f32-tied-flat/golden.h5" --out "$T/link.h5" 2>/dev/null \
   && cmp -s "$T/config.before" "$ROOT/fixtures/tiny-f32-tied-flat/model/config.json"; then
    echo "ok: simulate refuses --out onto a model file and through a symlink to the golden"
else
    echo "FAIL: simulate --out onto an input"; fails=$((fails + 1))
fi
[ $fails = 0 ] && echo "test_tiers: all passed" || { echo "test_tiers: $fails failed"; exit 1; }
