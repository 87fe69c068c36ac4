#!/usr/bin/env bash
# test_bench_sweep.sh — llama-bench-style sweeps, peers and ratios of `qwen-conform bench`.
#   bash tests/cli/test_bench_sweep.sh <path-to-qwen-conform> <source-dir>
# On a tiny checkpoint: --prompt / --depth / --threads lists give one figure per test and
# thread count (decode at depth D really starts at D); --backend takes a comma list;
# --ratio-to NAME gives every figure's ratio to NAME's (with an interval); --peer-json imports
# a hand-written llama-bench -o json file matched by test (pp N, tg N at depth D, threads),
# and a bad one exits 2 naming the file and the field; the memory plan refuses a context that
# will not fit before allocating (exit 2 naming the numbers); the warnings (threads > cores,
# weights in cache, reps < 3) and the machine are in every report; the SVG title fits.
set -u
. "$(dirname "$0")/bench_common.sh" test_bench_sweep "$@"
QUICK=(--reps 3 --min-time 0 --warmup 0)

# ---- sweeps ----------------------------------------------------------------------------------
"$QC" bench --model "$MODEL" --backend optimized --prompt 8,16 --depth 0,8,24 --threads 1,2 --decode 4 \
  --static-prompt 4 "${QUICK[@]}" --json "$TMP/sweep.json" --markdown "$TMP/sweep.md" --svg "$TMP/sweep.svg" \
  >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 0 ] && ok "a sweep of 2 prompts x 3 depths x 2 thread counts exits 0" || bad "sweep: exit $rc $(tail -2 "$TMP/stderr")"
"$PY" - "$TMP/sweep.json" <<'PYEOF' && ok "sweep JSON: one figure per test and thread count" || bad "sweep JSON"
import json, sys
d = json.load(open(sys.argv[1]))
got = sorted((r["mode"], r["tokens"], r["depth"], r["threads"], r["test"]) for r in d["results"])
want = sorted([(m, n, dp, t, name) for t in (1, 2) for (m, n, dp, name) in
               [("static", 4, 0, "static4"), ("dynamic", 8, 0, "pp8"), ("dynamic", 16, 0, "pp16"),
                ("decode", 4, 0, "tg4@d0"), ("decode", 4, 8, "tg4@d8"), ("decode", 4, 24, "tg4@d24")]])
assert got == want, got
assert d["config"]["prompts"] == [8, 16] and d["config"]["depths"] == [0, 8, 24], d["config"]
assert d["machine"]["threads_list"] == [1, 2], d["machine"]
assert [p["threads"] for p in d["probes"]["per_threads"]] == [1, 2]
assert all(len(r["tok_s_samples"]) == 3 and r["tok_s_median"] > 0 for r in d["results"])
# each figure is labelled with the backend as opened for its own thread count
for r in d["results"]:
    want = "1 thread)" if r["threads"] == 1 else "2 threads)"
    assert r["describe"].endswith(want), (r["threads"], r["describe"])
PYEOF
[ "$(grep -c '^| optimized' "$TMP/sweep.md")" = 12 ] && ok "12 rows in the Markdown" || bad "Markdown rows: $(grep -c '^| optimized' "$TMP/sweep.md")"
grep -q 'memory plan at 28 positions' "$TMP/stderr" && ok "the memory plan covers the longest context (depth 24 + decode 4)" \
  || bad "memory plan line: $(grep 'memory plan' "$TMP/stderr")"

# ---- the machine and the warnings in every report ----------------------------------------------
NCPU=$(nproc)
"$QC" bench --model "$MODEL" --backend optimized --prompt 8 --decode 2 --threads $((NCPU + 1)) --reps 2 \
  --min-time 0 --warmup 0 --json "$TMP/w.json" --markdown "$TMP/w.md" --svg "$TMP/w.svg" >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 0 ] && ok "threads > cores still runs" || bad "threads > cores: exit $rc"
for f in w.json w.md w.svg; do
  grep -q "threads $((NCPU + 1)) \(>\|&gt;\) $NCPU cores" "$TMP/$f" && grep -q 'reps 2 \(<\|&lt;\) 3' "$TMP/$f" \
    && ok "$f warns: threads > cores, reps < 3" || bad "$f warnings"
done
"$PY" - "$TMP/w.json" "$TMP/w.md" "$TMP/w.svg" <<'PYEOF' && ok "machine (vendor, family/model/stepping, flags, cores, memory) in JSON, Markdown and SVG; SVG title fits" || bad "machine identification / SVG title"
import json, re, sys
d = json.load(open(sys.argv[1]))
m = d["machine"]
for k in ("vendor", "cpu", "family", "model", "stepping", "flags", "cores", "memory_gib", "isa"):
    assert k in m, k
md, svg = open(sys.argv[2]).read(), open(sys.argv[3]).read()
fam = "family %d model %d stepping %d" % (m["family"], m["model"], m["stepping"])
assert fam in md and fam in svg, fam
assert m["vendor"] in md and m["vendor"] in svg
w = int(re.search(r'<svg [^>]*width="(\d+)"', svg).group(1))
title = re.search(r'font-weight="bold">([^<]*)</text>', svg).group(1)
assert w >= 9.5 * len(title), (w, len(title))
if m["largest_cache_bytes"] > 1e6:
    assert any("fit in the" in x for x in d["warnings"]), d["warnings"]
PYEOF

# ---- --backend comma list, --ratio-to -----------------------------------------------------------
"$QC" bench --model "$MODEL" --backend optimized,reference --prompt 8 --decode 2 --ref-prompt 8 --ref-decode 2 \
  --static-prompt 4 --threads 1 "${QUICK[@]}" --ratio-to optimized --json "$TMP/r.json" --markdown "$TMP/r.md" \
  >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 0 ] && ok "--backend optimized,reference --ratio-to optimized exits 0" || bad "comma list: exit $rc $(tail -2 "$TMP/stderr")"
"$PY" - "$TMP/r.json" <<'PYEOF' && ok "ratios to optimized (median / median, interval around it)" || bad "ratios"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["config"]["ratio_to"] == "optimized"
by = {(r["backend"], r["mode"]): r for r in d["results"]}
assert {b for b, _ in by} == {"optimized", "reference"}, by.keys()
for mode in ("static", "dynamic", "decode"):
    o, r = by[("optimized", mode)], by[("reference", mode)]
    assert o["ratio"] == 1.0 and r["ratio_to"] == "optimized"
    want = r["tok_s_median"] / o["tok_s_median"]
    assert abs(r["ratio"] - want) < 1e-9 * want, (r["ratio"], want)
    assert r["ratio_lo"] <= r["ratio"] <= r["ratio_hi"], r
PYEOF
grep -q '| vs optimized |' "$TMP/r.md" && ok "Markdown column vs optimized" || bad "Markdown ratio column"
"$QC" bench --model "$MODEL" --backend optimized --ratio-to llamacpp >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q "ratio-to: 'llamacpp' is not one of this run's backends" "$TMP/stderr" \
  && ok "--ratio-to an absent backend exits 2" || bad "--ratio-to absent: exit $rc"

# ---- --peer-json: a llama-bench -o json file ------------------------------------------------------
cat >"$TMP/llama-bench.json" <<'JSON'
[
  {"build_commit": "abc1234", "build_number": 5000, "cpu_info": "Test CPU", "gpu_info": "",
   "backends": "CPU", "model_filename": "tiny.gguf", "model_type": "qwen35 tiny F32",
   "model_size": 460000, "model_n_params": 115000, "n_batch": 2048, "n_ubatch": 512,
   "n_threads": 1, "cpu_mask": "0x0", "cpu_strict": false, "poll": 50, "type_k": "f16",
   "type_v": "f16", "n_gpu_layers": 0, "split_mode": "layer", "main_gpu": 0,
   "no_kv_offload": false, "flash_attn": true, "tensor_split": "0.00", "use_mmap": true,
   "embeddings": false, "n_prompt": 8, "n_gen": 0, "n_depth": 0,
   "test_time": "2026-12-03T12:00:00Z", "avg_ns": 800000, "stddev_ns": 10000,
   "avg_ts": 10000.0, "stddev_ts": 100.0, "samples_ns": [790000, 800000, 810000],
   "samples_ts": [10100.0, 10000.0, 9900.0]},
  {"build_commit": "abc1234", "n_threads": 1, "type_k": "f16", "type_v": "f16", "flash_attn": true,
   "n_prompt": 0, "n_gen": 2, "n_depth": 8, "avg_ns": 400000, "avg_ts": 5000.0, "stddev_ts": 0,
   "samples_ts": [5000.0]},
  {"n_threads": 1, "n_prompt": 0, "n_gen": 2, "n_depth": 0, "avg_ts": 6000.0},
  {"n_threads": 1, "n_prompt": 512, "n_gen": 0, "avg_ts": 900.0},
  {"n_threads": 1, "n_prompt": 8, "n_gen": 2, "avg_ts": 700.0}
]
JSON
"$QC" bench --model "$MODEL" --backend optimized --prompt 8 --depth 8 --decode 2 --static-prompt 4 --threads 1 \
  "${QUICK[@]}" --peer-json "$TMP/llama-bench.json" --ratio-to llama-bench --json "$TMP/p.json" \
  --markdown "$TMP/p.md" --svg "$TMP/p.svg" >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 0 ] && ok "--peer-json --ratio-to llama-bench exits 0" || bad "peer: exit $rc $(tail -2 "$TMP/stderr")"
"$PY" - "$TMP/p.json" <<'PYEOF' && ok "peer tests matched by test (pp8, tg2@d8 at 1 thread), ratios to them" || bad "peer JSON"
import json, sys
d = json.load(open(sys.argv[1]))
peer = [r for r in d["results"] if r["backend"] == "llama-bench"]
assert sorted(r["test"] for r in peer) == ["pp8", "tg2@d8"], peer
pp = [r for r in peer if r["test"] == "pp8"][0]
assert pp["imported"] is True and pp["tok_s_samples"] == [10100.0, 10000.0, 9900.0] and pp["tok_s_median"] == 10000.0
assert d["peer"]["unmatched_tests"] == 3, d["peer"]
assert "KV f16/f16" in d["peer"]["describe"] and "flash attn on" in d["peer"]["describe"], d["peer"]
ours = {r["test"]: r for r in d["results"] if r["backend"] == "optimized"}
assert abs(ours["pp8"]["ratio"] - ours["pp8"]["tok_s_median"] / 10000.0) < 1e-9 * ours["pp8"]["ratio"]
assert abs(ours["tg2@d8"]["ratio"] - ours["tg2@d8"]["tok_s_median"] / 5000.0) < 1e-9 * ours["tg2@d8"]["ratio"]
assert "ratio" not in ours["static4"], ours["static4"]   # llama-bench has no static test
PYEOF
grep -q 'llama-bench (imported: qwen35 tiny F32, KV f16/f16, flash attn on, build abc1234)' "$TMP/p.md" \
  && ok "Markdown states what the llama-bench run used" || bad "peer description in Markdown"
peer_bad() { # name json expected-message
  printf '%s\n' "$2" >"$TMP/$1.json"
  "$QC" bench --model "$MODEL" --backend optimized --prompt 8 --decode 2 --threads 1 "${QUICK[@]}" \
    --peer-json "$TMP/$1.json" >"$TMP/stdout" 2>"$TMP/stderr"
  local rc=$?
  if [ $rc = 2 ] && grep -qF "$1.json: $3" "$TMP/stderr" && ! grep -q 'rep 1' "$TMP/stderr"; then
    ok "bad peer JSON ($1) exits 2 before measuring: $3"
  else
    bad "bad peer JSON ($1): exit $rc: $(tail -1 "$TMP/stderr")"
  fi
}
peer_bad notjson '[{"n_prompt": 8,' "not valid JSON"
peer_bad object '{"n_prompt": 8}' "not a non-empty JSON array of llama-bench tests"
peer_bad nogen '[{"n_prompt": 8, "n_threads": 1, "avg_ts": 5}]' "[0].n_gen: missing"
peer_bad badthr '[{"n_prompt": 8, "n_gen": 0, "n_threads": 1.5, "avg_ts": 5}]' "[0].n_threads: not a non-negative integer"
peer_bad badts '[{"n_prompt": 8, "n_gen": 0, "n_threads": 1, "avg_ts": 5}, {"n_prompt": 8, "n_gen": 0, "n_threads": 2, "avg_ts": 5, "samples_ts": [1, "x"]}]' "[1].samples_ts[1]: not a positive number"
peer_bad noavg '[{"n_prompt": 8, "n_gen": 0, "n_threads": 1}]' "[0].avg_ts: missing or not a positive number"

# ---- the memory plan at long context --------------------------------------------------------------
"$QC" bench --synthetic 0.8b --prompt 512 --depth 1000000 --decode 32 --max-memory 4G >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q 'bench at a context of 1000032 positions (longest prompt / depth 1000000 + decode 32' "$TMP/stderr" \
  && grep -q 'needs .* GiB > limit 4.00 GiB' "$TMP/stderr" && grep -q 'state' "$TMP/stderr" \
  && ! grep -q 'building synthetic' "$TMP/stderr" \
  && ok "a 1M-position context is refused before building anything, naming the numbers" \
  || bad "long-context memory refusal: exit $rc $(cat "$TMP/stderr")"
"$QC" bench --model "$MODEL" --prompt 8 --depth 900000 --max-memory 64M >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q 'context of 900032 positions' "$TMP/stderr" && ! grep -q 'rep 1' "$TMP/stderr" \
  && ok "--model DIR: a context over --max-memory is refused before the backends" || bad "--model refusal: exit $rc $(tail -1 "$TMP/stderr")"
"$QC" bench --model "$MODEL" --prompt 8,abc >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q -- "--prompt: '8,abc' is not a comma list" "$TMP/stderr" && ok "a bad list exits 2" || bad "bad list: exit $rc"
"$QC" bench --model "$MODEL" --depth 8,8 >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q -- "--depth: 8 is listed twice" "$TMP/stderr" && ok "a duplicate in a list exits 2" || bad "duplicate: exit $rc"

bench_done
