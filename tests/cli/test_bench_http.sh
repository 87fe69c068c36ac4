#!/usr/bin/env bash
# test_bench_http.sh <qwen-conform> <source-dir> — `bench --backend http:URL`: a server timed per
# request beside an in-process backend, on the test-double server (tests/servers/qc_fake_server.py,
# vLLM dialect, 127.0.0.1, stopped by PID):
#   * the report has the server's dynamic-prefill and decode figures (tok/s > 0, as many samples
#     as repetitions) and no static figure (a server decides how it prefills), beside the
#     optimized backend's three;
#   * an unreachable server is a usage error (exit 2) naming the URL.
set -u
QC="$1"
SRC="$2"
PY=/usr/bin/python3
TMP="$(mktemp -d)"
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT INT TERM
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }
FIX="$SRC/fixtures/tiny-f32-tied-flat"

"$PY" "$SRC/tests/servers/qc_fake_server.py" --fixture "$FIX" --dialect vllm > "$TMP/srv.out" \
  2> "$TMP/srv.err" &
PID=$!
for _ in $(seq 300); do grep -q LISTENING "$TMP/srv.out" 2>/dev/null && break; sleep 0.1; done
URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$TMP/srv.out" | head -1)
[ -n "$URL" ] || { echo "FAIL - the fake server did not start"; cat "$TMP/srv.err"; exit 1; }

"$QC" bench --model "$FIX/model" --backend optimized --backend "http:$URL,api=vllm" --prompt 16 \
  --decode 4 --threads 1 --reps 2 --json "$TMP/b.json" > "$TMP/b.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "bench optimized + http: exit 0" || { bad "bench: exit $rc"; tail -5 "$TMP/b.out"; }
"$PY" - "$TMP/b.json" <<'PYEOF' && ok "http figures: pp16 and tg4, tok/s > 0, no static" || bad "http figures"
import json, sys
d = json.load(open(sys.argv[1]))
h = [r for r in d["results"] if r["backend"].startswith("http:")]
o = [r for r in d["results"] if r["backend"] == "optimized"]
assert sorted(r["mode"] for r in h) == ["decode", "dynamic"], [r["mode"] for r in h]
assert sorted(r["mode"] for r in o) == ["decode", "dynamic", "static"], [r["mode"] for r in o]
for r in h:
    assert r["tok_s_median"] > 0 and len(r["tok_s_samples"]) >= 2, r
    assert "vllm" in r["describe"], r["describe"]
print({r["mode"]: round(r["tok_s_median"], 1) for r in h})
PYEOF
kill "$PID"; wait "$PID" 2>/dev/null; PID=""

"$QC" bench --model "$FIX/model" --backend "$(echo "http:$URL" | sed 's/:[0-9]*$/:1/')" --prompt 8 \
  --decode 2 --reps 1 > "$TMP/u.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "127.0.0.1:1" "$TMP/u.out" && ok "unreachable server: exit 2 naming the URL" \
  || bad "unreachable server: exit $rc"
echo "$fails failed"
[ $fails -eq 0 ]
