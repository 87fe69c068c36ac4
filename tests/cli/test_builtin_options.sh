#!/bin/bash
# test_builtin_options.sh — a built-in backend with its own options, `--backend NAME,k=v`
# (harness/host/qc_registry.c: set_option at create; #29 item 2, the optimized bf16_dot):
#   1. check: optimized,bf16_dot=1 on a BF16 fixture passes the `bf16` tier and FAILS the
#      float32 policy (the rounded activations are visible: the option does something); on a
#      CPU without AVX512_BF16 it is exit 2 naming the feature;
#   2. a bad value, a key the backend does not have, a spec that is not key=value: exit 2, the
#      message naming the spec and the option;
#   3. bench: the row of optimized,bf16_dot=1 is named apart ("+ BF16 dot") from optimized's.
#   test_builtin_options.sh QWEN_CONFORM REPO_ROOT
set -u
QC=$1
ROOT=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
G=$ROOT/fixtures/tiny-bf16-gva3
fails=0
expect() { # WANT_RC LABEL GREP_PATTERN ARGS...
    local want=$1 label=$2 pat=$3
    shift 3
    "$@" >"$T/out" 2>&1
    local rc=$?
    if [ "$rc" != "$want" ] || ! grep -qE -- "$pat" "$T/out"; then
        echo "FAIL: $label: exit $rc (want $want), pattern '$pat'"
        tail -5 "$T/out"
        fails=$((fails + 1))
    else
        echo "ok: $label (exit $rc)"
    fi
}

if grep -qw avx512_bf16 /proc/cpuinfo; then
    expect 0 "bf16_dot passes the bf16 tier" "exit 0" \
        "$QC" --golden "$G" --backend optimized,bf16_dot=1 --tier bf16
    expect 1 "bf16_dot fails the float32 policy" "prefill.logits +FAIL" \
        "$QC" --golden "$G" --backend optimized,bf16_dot=1
    expect 0 "bf16_dot=0 is the float32 path" "exit 0" \
        "$QC" --golden "$G" --backend optimized,bf16_dot=0
else
    expect 2 "no AVX512_BF16: refused" "has no AVX512_BF16" \
        "$QC" --golden "$G" --backend optimized,bf16_dot=1 --tier bf16
fi
expect 2 "a bad value" "optimized,bf16_dot=3: optimized: option bf16_dot: '3' is not 0 or 1" \
    "$QC" --golden "$G" --backend optimized,bf16_dot=3
expect 2 "a key the backend lacks" "reference,bf16_dot=1: reference: unknown option 'bf16_dot'" \
    "$QC" --golden "$G" --backend reference,bf16_dot=1
expect 2 "not key=value" "optimized,bogus: options are key=value" \
    "$QC" --golden "$G" --backend optimized,bogus

if grep -qw avx512_bf16 /proc/cpuinfo; then
    # amx=0: the FMA GEMM also where the CPU has AMX (the default there)
    "$QC" bench --synthetic 0.8b --layers 1 --backend optimized,amx=0 --backend optimized,bf16_dot=1 \
        --threads 1 --prompt 16 --static-prompt 2 --decode 2 --reps 1 --warmup 0 --min-time 0 \
        --markdown "$T/b.md" >"$T/bench.out" 2>&1
    rc=$?
    n_dot=$(grep -c "^| optimized (AVX-512 + BF16 dot, 1 thread) | BF16 | dynamic prefill.*BF16 dot peak" "$T/b.md" 2>/dev/null)
    n_f32=$(grep -c "^| optimized (AVX-512, 1 thread) | BF16 | dynamic prefill.*FMA peak" "$T/b.md" 2>/dev/null)
    if [ "$rc" = 0 ] && [ "$n_dot" -ge 1 ] && [ "$n_f32" -ge 1 ]; then
        echo "ok: bench names the bf16_dot row apart"
    else
        echo "FAIL: bench: exit $rc, rows dot $n_dot f32 $n_f32"
        tail -5 "$T/bench.out"
        fails=$((fails + 1))
    fi
fi

# AMX: the default where the CPU has it; its row's prefill limit is the AMX probe's third
if grep -qw amx_bf16 /proc/cpuinfo && grep -qw avx512_bf16 /proc/cpuinfo; then
    "$QC" bench --synthetic 0.8b --layers 1 --backend optimized \
        --threads 1 --prompt 16 --static-prompt 2 --decode 2 --reps 1 --warmup 0 --min-time 0 \
        --markdown "$T/a.md" >"$T/bencha.out" 2>&1
    rc=$?
    n_amx=$(grep -c "^| optimized (AVX-512 + AMX, 1 thread) | BF16 | dynamic prefill.*AMX peak / 3" "$T/a.md" 2>/dev/null)
    n_probe=$(grep -c "AMX tile loop (tdpbf16ps" "$T/a.md" 2>/dev/null)
    if [ "$rc" = 0 ] && [ "$n_amx" -ge 1 ] && [ "$n_probe" -ge 1 ]; then
        echo "ok: bench names the AMX row and its probe"
    else
        echo "FAIL: bench AMX: exit $rc, rows $n_amx probe lines $n_probe"
        tail -5 "$T/bencha.out"
        fails=$((fails + 1))
    fi
    expect 2 "amx: a bad value" "option amx: '2' is not 0 or 1" \
        "$QC" --golden "$G" --backend optimized,amx=2
else
    expect 2 "no AMX: refused" "has no AMX-BF16" "$QC" --golden "$G" --backend optimized,amx=1
fi
[ "$fails" = 0 ] && echo "all passed" || { echo "$fails failed"; exit 1; }
