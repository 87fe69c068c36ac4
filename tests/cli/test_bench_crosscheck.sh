#!/usr/bin/env bash
# test_bench_crosscheck.sh — ci/bench-llamacpp's cross-check table (ci/bench_crosscheck.py)
# and its option checks, without llama.cpp:
#   bash tests/cli/test_bench_crosscheck.sh <path-to-qwen-conform> <source-dir>
# 1. a hand-written bench report (ours, the native adapter, the npm adapter) and llama-bench
#    file: every cell (median [min-max]) and ratio (ours / native, ours / npm, ours /
#    llama-bench, adapter / llama-bench) is the expected number; llama-bench's pp at depth is
#    not matched; a test llama-bench lacks shows "—"; --append appends the same text; the CPU
#    line, llama-bench's cpu_info and the probes' spread are there
# 2. a real `qwen-conform bench --peer-json` report on the tiny fixture goes through it (the
#    script reads bench's real field names: test, tok_s_samples, machine, probes)
# 3. bad input exits 2 naming the file and the field; ci/bench-llamacpp's bad options and
#    QC_BENCH_NATIVE values exit 2 before any setup
set -u
. "$(dirname "$0")/bench_common.sh" test_bench_crosscheck "$@"
CC=("$PY" "$SRC/ci/bench_crosscheck.py")

cat > "$TMP/bench.json" <<'EOF'
{"commit": "abc1234", "date": "2026-12-07T00:00:00Z",
 "machine": {"cpu": "Test CPU 9000", "vendor": "GenuineTest", "family": 6, "model": 143, "stepping": 8,
             "cores": 2, "isa": "AVX-512", "flags": "avx2 avx512f avx512_bf16"},
 "config": {"dtype": "BF16", "reps": 3, "warmup": 1},
 "probes": {"per_threads": [{"threads": 1, "bandwidth_gbs": [20, 30, 25], "fma_peak_gflops": [100, 110, 90]}]},
 "results": [
  {"backend": "optimized", "test": "pp512", "mode": "dynamic", "threads": 1, "tok_s_median": 200, "tok_s_samples": [190, 200, 230]},
  {"backend": "llamacpp", "test": "pp512", "mode": "dynamic", "threads": 1, "tok_s_median": 100, "tok_s_samples": [90, 100, 101]},
  {"backend": "plugin:libqc_plugin_llamacpp_npm.so", "test": "pp512", "mode": "dynamic", "threads": 1, "tok_s_median": 50, "tok_s_samples": [50, 50, 50]},
  {"backend": "optimized", "test": "tg32@d512", "mode": "decode", "threads": 1, "tok_s_median": 30, "tok_s_samples": [30]},
  {"backend": "llamacpp", "test": "tg32@d512", "mode": "decode", "threads": 1, "tok_s_median": 20, "tok_s_samples": [20]},
  {"backend": "plugin:libqc_plugin_llamacpp_npm.so", "test": "tg32@d512", "mode": "decode", "threads": 1, "tok_s_median": 15, "tok_s_samples": [15]},
  {"backend": "optimized", "test": "static64", "mode": "static", "threads": 1, "tok_s_median": 12, "tok_s_samples": [12]},
  {"backend": "llamacpp", "test": "static64", "mode": "static", "threads": 1, "tok_s_median": 10, "tok_s_samples": [10]}
 ]}
EOF
cat > "$TMP/lb.json" <<'EOF'
[{"n_prompt": 512, "n_gen": 0, "n_depth": 0, "n_threads": 1, "avg_ts": 120, "samples_ts": [110, 125, 125],
  "cpu_info": "Test CPU 9000", "build_commit": "de3ff81", "model_type": "qwen35 BF16", "type_k": "f16", "type_v": "f16", "flash_attn": true},
 {"n_prompt": 512, "n_gen": 0, "n_depth": 512, "n_threads": 1, "avg_ts": 999, "samples_ts": [999]},
 {"n_prompt": 0, "n_gen": 32, "n_depth": 512, "n_threads": 1, "avg_ts": 25, "samples_ts": [24, 25, 26]}]
EOF
cp /dev/null "$TMP/report.md"
"${CC[@]}" --bench "$TMP/bench.json" --llama-bench "$TMP/lb.json" --npm-name plugin:libqc_plugin_llamacpp_npm.so \
  --append "$TMP/report.md" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc = 0 ] && ok "the cross-check exits 0" || bad "cross-check: exit $rc $(tail -2 "$TMP/err")"
row() { grep -F "| 1 | $1 |" "$TMP/out"; }
want="| 1 | pp512 | 200 [190-230] | 100 [90-101] | 50 [50-50] | 125 [110-125] | 2.00x | 4.00x | 1.60x | 0.80x |"
[ "$(row pp512)" = "$want" ] && ok "pp512: medians [min-max] and ratios ours/native 2.00x, ours/npm 4.00x, ours/llama-bench 1.60x (its samples' median 125, not avg_ts), adapter/llama-bench 0.80x" \
  || bad "pp512 row: '$(row pp512)' (want '$want')"
want="| 1 | tg32@d512 | 30 [30-30] | 20 [20-20] | 15 [15-15] | 25 [24-26] | 1.50x | 2.00x | 1.20x | 0.80x |"
[ "$(row tg32@d512)" = "$want" ] && ok "tg32@d512: llama-bench's tg at depth 512 matched; ratios 1.50x 2.00x 1.20x 0.80x" \
  || bad "tg row: '$(row tg32@d512)' (want '$want')"
want="| 1 | static64 | 12 [12-12] | 10 [10-10] | — | — | 1.20x | — | — | — |"
[ "$(row static64)" = "$want" ] && ok "static64: no npm figure, no llama-bench equivalent: dashes" \
  || bad "static row: '$(row static64)' (want '$want')"
grep -q "999" "$TMP/out" && bad "llama-bench's pp512 at depth 512 leaked into the table" \
  || ok "llama-bench's pp at depth 512 is not matched to pp512"
grep -q "GenuineTest family 6 model 143 stepping 8 (Test CPU 9000).*flags: avx2 avx512f avx512_bf16" "$TMP/out" \
  && ok "the CPU line names vendor, family/model, name and flags" || bad "CPU line: $(grep CPU "$TMP/out")"
grep -q 'cpu_info "Test CPU 9000", build de3ff81' "$TMP/out" && ok "llama-bench's cpu_info and build" || bad "llama-bench line missing"
grep -q "bandwidth 25 \[20-30\] GB/s, FMA peak 100 \[90-110\] GFLOP/s" "$TMP/out" \
  && ok "the probes' median [min-max]" || bad "probes line: $(grep probes "$TMP/out")"
if [ "$(tail -c +2 "$TMP/report.md")" = "$(cat "$TMP/out")" ]; then ok "--append wrote the same section"
else bad "--append: the report differs from stdout"; fi

# --dot-name: ours with the BF16 dot GEMM, a column and its ratios beside ours'
"$PY" - "$TMP/bench.json" "$TMP/bench_dot.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
r["results"].append({"backend": "optimized,bf16_dot=1", "test": "pp512", "mode": "dynamic",
                     "threads": 1, "tok_s_median": 400, "tok_s_samples": [380, 400, 420]})
json.dump(r, open(sys.argv[2], "w"))
PYEOF
"${CC[@]}" --bench "$TMP/bench_dot.json" --llama-bench "$TMP/lb.json" --dot-name "optimized,bf16_dot=1" \
  >"$TMP/out3" 2>"$TMP/err"
want="| 1 | pp512 | 200 [190-230] | 400 [380-420] | 100 [90-101] | 125 [110-125] | 2.00x | 1.60x | 4.00x | 3.20x | 0.80x |"
[ "$(grep -F "| 1 | pp512 |" "$TMP/out3")" = "$want" ] && grep -q "ours (bf16_dot=1) / llama-bench" "$TMP/out3" \
  && ok "--dot-name: the bf16_dot column, its ratios to native (4.00x) and llama-bench (3.20x)" \
  || bad "dot table: '$(grep -F "| 1 | pp512 |" "$TMP/out3")' (want '$want')"

# without npm and llama-bench (--no-native's shape): the adapter column is the npm build
"${CC[@]}" --bench "$TMP/bench.json" --native 0 >"$TMP/out2" 2>"$TMP/err"
want="| 1 | pp512 | 200 [190-230] | 100 [90-101] | 2.00x |"
[ "$(grep -F "| 1 | pp512 |" "$TMP/out2")" = "$want" ] && grep -q "| llama.cpp npm via adapter |" "$TMP/out2" \
  && ok "--native 0 without llama-bench: one llama.cpp column, named npm" || bad "no-native table: $(grep -F "| 1 |" "$TMP/out2")"

# ---- 2. a real bench report ----------------------------------------------------------------
cat > "$TMP/lb_tiny.json" <<'EOF'
[{"n_prompt": 8, "n_gen": 0, "n_depth": 0, "n_threads": 1, "avg_ts": 1000, "samples_ts": [1000]},
 {"n_prompt": 0, "n_gen": 2, "n_depth": 8, "n_threads": 1, "avg_ts": 500, "samples_ts": [500]}]
EOF
"$QC" bench --model "$MODEL" --backend optimized --prompt 8 --decode 2 --depth 8 --threads 1 --reps 1 \
  --min-time 0 --warmup 0 --peer-json "$TMP/lb_tiny.json" --json "$TMP/real.json" >/dev/null 2>"$TMP/err"
rc=$?
[ $rc = 0 ] && ok "bench on the tiny fixture" || bad "bench: exit $rc $(tail -2 "$TMP/err")"
"${CC[@]}" --bench "$TMP/real.json" --llama-bench "$TMP/lb_tiny.json" --native 1 >"$TMP/out3" 2>"$TMP/err"
rc=$?
"$PY" - "$TMP/real.json" "$TMP/out3" <<'PYEOF' && ok "a real bench report: pp8 and tg2@d8 rows with ours / llama-bench = median / 1000 and / 500" || bad "real report: $(cat "$TMP/out3" "$TMP/err" | tail -5)"
import json, sys
d = json.load(open(sys.argv[1]))
med = {r["test"]: r["tok_s_median"] for r in d["results"] if r["backend"] == "optimized"}
rows = {l.split("|")[2].strip(): [c.strip() for c in l.split("|")[1:-1]] for l in open(sys.argv[2]) if l.startswith("| 1 |")}
# threads, test, ours, native via adapter, llama-bench, ours / native, ours / llama-bench, ...
assert rows["pp8"][6] == f"{med['pp8'] / 1000:.2f}x", rows["pp8"]
assert rows["tg2@d8"][6] == f"{med['tg2@d8'] / 500:.2f}x", rows["tg2@d8"]
assert rows["pp8"][4] == "1000 [1000-1000]", rows["pp8"]
PYEOF

# ---- 3. bad input --------------------------------------------------------------------------
echo '{"results": [{"backend": "optimized"}]}' > "$TMP/bad.json"
"${CC[@]}" --bench "$TMP/bad.json" >/dev/null 2>"$TMP/err"
rc=$?
[ $rc = 2 ] && grep -q "bad.json: results\[0\]: needs backend, test, threads, tok_s_median" "$TMP/err" \
  && ok "a bench result without its fields: exit 2 naming the file and results[0]" || bad "bad bench: exit $rc $(cat "$TMP/err")"
echo '[{"n_prompt": 8, "n_gen": 0}]' > "$TMP/badlb.json"
"${CC[@]}" --bench "$TMP/bench.json" --llama-bench "$TMP/badlb.json" >/dev/null 2>"$TMP/err"
rc=$?
[ $rc = 2 ] && grep -q "badlb.json: \[0\]: needs n_prompt, n_gen, n_threads, avg_ts" "$TMP/err" \
  && ok "a llama-bench test without n_threads / avg_ts: exit 2 naming the file and [0]" || bad "bad llama-bench: exit $rc $(cat "$TMP/err")"
"${CC[@]}" --bench "$TMP/missing.json" >/dev/null 2>"$TMP/err"
rc=$?
[ $rc = 2 ] && grep -q "missing.json: cannot read the bench report" "$TMP/err" && ok "a missing report: exit 2 naming it" \
  || bad "missing report: exit $rc $(cat "$TMP/err")"
"$SRC/ci/bench-llamacpp" --bogus >/dev/null 2>"$TMP/err"
rc=$?
[ $rc = 2 ] && grep -q "unknown option --bogus" "$TMP/err" && ok "ci/bench-llamacpp --bogus: exit 2" || bad "--bogus: exit $rc $(cat "$TMP/err")"
QC_BENCH_NATIVE=maybe "$SRC/ci/bench-llamacpp" >/dev/null 2>"$TMP/err"
rc=$?
[ $rc = 2 ] && grep -q "native=maybe: 0 or 1" "$TMP/err" && ok "QC_BENCH_NATIVE=maybe: exit 2 before any setup" \
  || bad "QC_BENCH_NATIVE=maybe: exit $rc $(cat "$TMP/err")"
"$SRC/ci/bench-llamacpp" --help | grep -q -- "--no-native" && ok "--help names --no-native" || bad "--help lacks --no-native"
"$SRC/ci/llamacpp-native" bogus >/dev/null 2>"$TMP/err"
rc=$?
[ $rc = 2 ] && ok "ci/llamacpp-native bogus: exit 2" || bad "ci/llamacpp-native bogus: exit $rc"

bench_done
