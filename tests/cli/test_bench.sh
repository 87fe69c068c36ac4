#!/usr/bin/env bash
# test_bench.sh — end-to-end test of `qwen-conform bench`.
#   bash tests/cli/test_bench.sh <path-to-qwen-conform> <source-dir>
# Runs the bench on a tiny checkpoint (fixtures/tiny-f32-tied-flat/model, else the first
# fixtures/*/model) with both backends: Markdown on stdout and in --markdown, JSON (machine,
# commit, config, probes, raw samples for every backend x mode) and an SVG, written without
# temp files left behind. Then --baseline gating: a fake FASTER baseline (every median x1000)
# must exit 1 naming the regressions; a slower baseline (x0.001) and the run's own JSON (with a
# 99 % allowance, so machine noise cannot fail it) must exit 0; a baseline with no matching
# metric exits 3; bad arguments and a malformed baseline exit 2.
set -u
QC="${1:?usage: test_bench.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: test_bench.sh <qwen-conform> <source-dir>}"

fail=0
pass=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }

MODEL="$SRC/fixtures/tiny-f32-tied-flat/model"
if [ ! -f "$MODEL/config.json" ]; then
  MODEL=""
  for d in "$SRC"/fixtures/*/model; do
    if [ -f "$d/config.json" ]; then MODEL="$d"; break; fi
  done
fi
if [ -z "$MODEL" ]; then
  echo "SKIP: no tiny model under fixtures/*/model"
  exit 0
fi
echo "# model: $MODEL"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_bench.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
OUT="$TMP/out"
mkdir -p "$OUT"
ARGS=(--model "$MODEL" --prompt 12 --static-prompt 6 --decode 3 --ref-prompt 5 --ref-decode 2 --reps 3 --threads 2 --min-time 0.05)

# ---- a full run ----------------------------------------------------------------------------
if "$QC" bench "${ARGS[@]}" --json "$OUT/b.json" --markdown "$OUT/b.md" --svg "$OUT/b.svg" \
     >"$TMP/stdout" 2>"$TMP/stderr"; then
  ok "bench exits 0"
else
  bad "bench exit code $? (stderr: $(tail -3 "$TMP/stderr"))"
fi
grep -q '^| backend | dtype | mode | tokens | depth | threads | tok/s median | tok/s min | tok/s max | MAD | 95% interval | vs reference' "$TMP/stdout" \
  && ok "Markdown table on stdout" || bad "no Markdown table on stdout"
cmp -s "$TMP/stdout" "$OUT/b.md" && ok "--markdown holds the same table" || bad "--markdown differs from stdout"
grep -q 'rep 3/3' "$TMP/stderr" && ok "progress on stderr" || bad "no progress on stderr"
[ "$(grep -c '^| optimized' "$TMP/stdout")" = 3 ] && [ "$(grep -c '^| reference' "$TMP/stdout")" = 3 ] \
  && ok "3 modes x 2 backends in the table" || bad "table rows: $(grep -c '^| ' "$TMP/stdout")"

if "$PY" - "$OUT/b.json" <<'EOF'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
assert d["machine"]["cores"] >= 1 and d["machine"]["cpu"] and d["machine"]["isa"], d["machine"]
assert d["machine"]["threads"] == 2
assert d["schema_version"] == 1, d.get("schema_version")
assert d["commit"] and d["date"].endswith("Z")
assert d["config"]["prompt"] == 12 and d["config"]["static_prompt"] == 6 and d["config"]["decode"] == 3
assert d["config"]["ref_prompt"] == 5 and d["config"]["ref_decode"] == 2 and d["config"]["reps"] == 3
assert len(d["probes"]["bandwidth_gbs"]) >= 3 and len(d["probes"]["fma_peak_gflops"]) >= 3
res = d["results"]
seen = {(r["backend"], r["mode"]) for r in res}
assert seen == {(b, m) for b in ("optimized", "reference") for m in ("static", "dynamic", "decode")}, seen
want = {("optimized", "static"): 6, ("optimized", "dynamic"): 12, ("optimized", "decode"): 3,
        ("reference", "static"): 5, ("reference", "dynamic"): 5, ("reference", "decode"): 2}
for r in res:
    s = r["tok_s_samples"]
    assert len(s) >= 3 and all(x > 0 for x in s), r
    assert abs(statistics.median(s) - r["tok_s_median"]) < 1e-9 * r["tok_s_median"], r
    assert r["tok_s_ci_lo"] <= r["tok_s_median"] <= r["tok_s_ci_hi"] and r["tok_s_max"] == max(s), r
    assert r["depth"] == (12 if r["mode"] == "decode" and r["backend"] == "optimized" else
                          5 if r["mode"] == "decode" else 0), r
    assert abs(min(s) - r["tok_s_min"]) < 1e-12 + 1e-9 * r["tok_s_min"], r
    assert r["tokens"] == want[(r["backend"], r["mode"])], r
    if r["backend"] == "optimized":
        ref = [x for x in res if x["backend"] == "reference" and x["mode"] == r["mode"]][0]
        assert abs(r["ratio_vs_reference"] - r["tok_s_median"] / ref["tok_s_median"]) < 1e-6 * r["ratio_vs_reference"]
    assert r["limit_tok_s"] > 0 and r["pct_of_limit"] > 0
EOF
then ok "JSON: machine, commit, config, probes, raw samples, medians, ratios"; else bad "JSON content"; fi
head -c 4 "$OUT/b.svg" | grep -q '<svg' && tail -c 8 "$OUT/b.svg" | grep -q '</svg>' \
  && [ "$(grep -c '<rect x=' "$OUT/b.svg")" = 6 ] && ok "SVG chart with 6 bars" || bad "SVG chart"
[ -z "$(ls "$OUT" | grep -v -x -e b.json -e b.md -e b.svg)" ] && ok "no temp files left" || bad "leftovers: $(ls "$OUT")"

# ---- baseline gating -----------------------------------------------------------------------
scale_json() { # in out factor [model]
  "$PY" - "$1" "$2" "$3" "${4:-}" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    for k in ("tok_s_median", "tok_s_ci_lo", "tok_s_ci_hi"):
        r[k] *= float(sys.argv[3])
    if sys.argv[4]:
        r["model"] = sys.argv[4]
json.dump(d, open(sys.argv[2], "w"))
EOF
}
scale_json "$OUT/b.json" "$TMP/faster.json" 1000
scale_json "$OUT/b.json" "$TMP/slower.json" 0.001
scale_json "$OUT/b.json" "$TMP/other.json" 1 "some other model"

"$QC" bench "${ARGS[@]}" --baseline "$TMP/faster.json" --max-regression 10 >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 1 ] && ok "a faster baseline exits 1" || bad "faster baseline: exit $rc"
[ "$(grep -c 'REGRESSION' "$TMP/stderr")" = 6 ] && ok "all 6 regressions named" || bad "regressions: $(grep -c REGRESSION "$TMP/stderr")"

"$QC" bench "${ARGS[@]}" --baseline "$TMP/slower.json" --max-regression 10 >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 0 ] && ok "a slower baseline exits 0" || bad "slower baseline: exit $rc"
grep -q '6 figures compared, 0 regressions' "$TMP/stderr" && ok "6 metrics compared" || bad "compare summary"

"$QC" bench "${ARGS[@]}" --baseline "$OUT/b.json" --max-regression 99 >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 0 ] && ok "an equal baseline exits 0" || bad "equal baseline: exit $rc"

"$QC" bench "${ARGS[@]}" --baseline "$TMP/other.json" >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 3 ] && grep -q 'no metric matching' "$TMP/stderr" && ok "no matching metric exits 3" || bad "no match: exit $rc"

# a baseline of another report schema_version is refused; one without (older reports) is read
"$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); d['schema_version']=99; json.dump(d, open(sys.argv[2],'w'))" "$OUT/b.json" "$TMP/v99.json"
"$QC" bench "${ARGS[@]}" --baseline "$TMP/v99.json" --max-regression 99 >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q 'v99.json: schema_version is not 1' "$TMP/stderr" && ok "a baseline of schema_version 99 exits 2" || bad "v99 baseline: exit $rc"
"$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); d.pop('schema_version'); json.dump(d, open(sys.argv[2],'w'))" "$OUT/b.json" "$TMP/v0.json"
"$QC" bench "${ARGS[@]}" --baseline "$TMP/v0.json" --max-regression 99 >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 0 ] && ok "a baseline without schema_version (older report) is read" || bad "unversioned baseline: exit $rc"

# ---- bad input -----------------------------------------------------------------------------
echo '{"results": [' >"$TMP/broken.json"
"$QC" bench "${ARGS[@]}" --baseline "$TMP/broken.json" >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q 'broken.json: not valid JSON' "$TMP/stderr" && ok "malformed baseline exits 2" || bad "broken baseline: exit $rc"
"$QC" bench --prompt 4 >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q 'exactly one of --model' "$TMP/stderr" && ok "no model exits 2" || bad "no model: exit $rc"
"$QC" bench --synthetic 0.8b --dtype int4 >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q -- "--dtype: 'int4'" "$TMP/stderr" && ok "bad --dtype exits 2" || bad "bad dtype: exit $rc"
"$QC" bench --synthetic 7b >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && ok "unknown preset exits 2" || bad "unknown preset: exit $rc"
"$QC" bench "${ARGS[@]}" --backends optimized,turbo >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q "unknown backend 'turbo'" "$TMP/stderr" && ok "unknown backend exits 2" || bad "unknown backend: exit $rc"
"$QC" bench "${ARGS[@]}" --json "$TMP/no/such/dir/b.json" >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && ok "unwritable --json exits 2 before running" || bad "unwritable json: exit $rc"
"$QC" bench --synthetic 9b --max-memory 8G >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q "needs .* GiB > limit 8.00 GiB (--max-memory)" "$TMP/stderr" \
  && ok "9b over --max-memory 8G is refused before allocating (exit 2)" || bad "9b --max-memory 8G: exit $rc $(cat "$TMP/stderr")"
"$QC" bench --synthetic 0.8b --max-memory lots >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q -- "--max-memory: 'lots'" "$TMP/stderr" && ok "bad --max-memory exits 2" || bad "bad --max-memory: exit $rc"
"$QC" bench --help >"$TMP/stdout" 2>&1 && grep -q -- '--max-regression' "$TMP/stdout" && ok "--help" || bad "--help"

# ---- runtimes under test beside ours, in one run (plugin, exec) --------------------------------
PLUG="$(dirname "$QC")/libqc_plugin_optimized.so"
if [ -f "$PLUG" ] && [ -n "${MODEL:-}" ]; then
  "$QC" bench --model "$MODEL" --prompt 16 --decode 4 --reps 2 --min-time 0 --backend optimized \
    --backend "plugin:$PLUG" --backend "exec:/usr/bin/python3 $SRC/adapters/golden/qc_golden_adapter.py" \
    --json "$TMP/peers.json" >"$TMP/stdout" 2>"$TMP/stderr"
  rc=$?
  if [ $rc = 0 ] && /usr/bin/python3 - "$TMP/peers.json" <<'PYEOF'; then ok "bench times a plugin and an exec adapter beside optimized in one run"; else bad "bench with peers: exit $rc $(tail -n 3 "$TMP/stderr")"; fi
import json, sys
r = json.load(open(sys.argv[1]))
names = {e["backend"] for e in r["results"]}
assert {"optimized", "plugin:libqc_plugin_optimized.so", "exec:qc_golden_adapter.py"} <= names, names
assert all(e["tok_s_median"] > 0 for e in r["results"]), r["results"]
PYEOF
fi
"$QC" bench --synthetic 0.8b --backend "exec:/bin/true" >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q "needs --model DIR" "$TMP/stderr" && ok "a runtime under test with --synthetic exits 2" || bad "exec with --synthetic: exit $rc"
"$QC" bench --synthetic 0.8b --backend "plugin:$TMP/none.so" >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q "none.so: plugin file does not exist" "$TMP/stderr" && ok "a missing plugin exits 2 before any work" || bad "missing plugin: exit $rc"
# --adapter-timeout reaches the hosted runtime: one that never answers is given up after 1 s
# (not the default 60), a bad value exits 2
t0=$SECONDS
timeout 30 "$QC" bench --model "$MODEL" --backend "exec:sleep 25" --adapter-timeout 1 --reps 1 \
  --warmup 0 --min-time 0 >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q "timed out after 1 s" "$TMP/stderr" && [ $((SECONDS - t0)) -lt 20 ] \
  && ok "--adapter-timeout 1: a silent runtime is given up after 1 s (exit 2)" \
  || bad "--adapter-timeout 1: exit $rc after $((SECONDS - t0)) s: $(tail -2 "$TMP/stderr")"
"$QC" bench --model "$MODEL" --adapter-timeout 0 >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
[ $rc = 2 ] && grep -q "adapter-timeout" "$TMP/stderr" && ok "--adapter-timeout 0 exits 2" || bad "--adapter-timeout 0: exit $rc"

echo "# $pass passed, $fail failed"
[ $fail = 0 ]
