#!/usr/bin/env bash
# test_topk_offline.sh <qwen-conform> <source-dir> — a server's top-k log-probabilities saved and
# checked offline (issue #25): `record --like GOLDEN --backend http:URL` writes a top-k ACTUAL
# (golden/SCHEMA.md "Top-k ACTUAL"), `diff GOLDEN ACTUAL` reads it, on the test-double server
# (tests/servers/qc_fake_server.py, vLLM dialect, 127.0.0.1, stopped by PID):
#   * record writes prefill/topk and decode/topk of every case (no logits, hidden, state);
#     golden/validate.py --actual accepts the file; diff exits 0 with the topk.* rows PASS;
#   * diff gives the same verdicts (and the same max |d logprob|) as `check --backend http:`
#     of the live server, for the good server and for --mutant logprob-shift, where diff exits
#     1 naming topk.argmax;
#   * a hand-corrupted ACTUAL — an id out of range, a NaN, a wrong shape, a list without its
#     logprobs, an ascending row, a repeated id — is a format error: diff exits 2 naming the
#     file and the dataset, validate.py --actual exits 1;
#   * an ACTUAL with logits keeps its logits checks (the top-k lists beside them are validated,
#     not compared); record through an unreachable server exits 2, through one that answers
#     wrongly exits 1; --model / --static with http: are usage errors.
set -u
QC="$1"
SRC="$2"
PY=/usr/bin/python3
TMP="$(mktemp -d)"
PID=""
stop() { [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; PID=""; }
cleanup() { stop; rm -rf "$TMP"; }
trap cleanup EXIT INT TERM
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }
FIX="$SRC/fixtures/tiny-f32-tied-flat"
G="$FIX/golden.h5"

# start_server NAME [ARGS...]: the fake server in the background; URL= its address
start_server() {
  local name="$1"; shift
  "$PY" "$SRC/tests/servers/qc_fake_server.py" --fixture "$FIX" --dialect vllm --port 0 "$@" \
    > "$TMP/$name.srv.out" 2> "$TMP/$name.srv.err" &
  PID=$!
  for _ in $(seq 300); do grep -q LISTENING "$TMP/$name.srv.out" 2>/dev/null && break; sleep 0.1; done
  URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$TMP/$name.srv.out" | head -1)
  [ -n "$URL" ] || { echo "FAIL - the fake server ($name) did not start"; cat "$TMP/$name.srv.err"; exit 1; }
}

# same_verdicts CHECK.json DIFF.json: the topk.argmax/logprob/top1_in_k/overlap rows agree
same_verdicts() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, re, sys
def rows(p):
    d = json.load(open(p))
    return {(r["case"], r["check"]): r for r in d["checks"]
            if r["check"] in ("topk.argmax", "topk.logprob", "topk.top1_in_k", "topk.overlap")}
c, d = rows(sys.argv[1]), rows(sys.argv[2])
assert len(c) == 36 and set(c) == set(d), (len(c), sorted(set(c) ^ set(d)))
diff = [k for k in c if c[k]["verdict"] != d[k]["verdict"]]
assert not diff, [(k, c[k]["verdict"], d[k]["verdict"]) for k in diff]
num = lambda r: re.search(r"(max \|d logprob\| \S+|over its limit at \d+ of \d+)", r["message"]).group(1)
lp = [k for k in c if k[1] == "topk.logprob" and num(c[k]) != num(d[k])]
assert not lp, [(c[k]["message"], d[k]["message"]) for k in lp]
print("verdicts", sorted({r["verdict"] for r in c.values()}), "of", len(c), "rows agree")
PYEOF
}

# ---- a good server: record, validate, diff, and the same verdicts as check ----
start_server good
"$QC" record --like "$G" --backend "http:$URL" --out "$TMP/good.h5" > "$TMP/rec.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "record --like through http: exit 0" || { bad "record: exit $rc"; cat "$TMP/rec.out"; }
"$PY" - "$TMP/good.h5" <<'PYEOF' && ok "top-k datasets of every case, no logits / hidden / state" || bad "recorded datasets"
import h5py, sys
with h5py.File(sys.argv[1], "r") as f:
    assert len(f["cases"]) == 9
    for name, c in f["cases"].items():
        T, S = c["tokens"].shape[0], c["decode/tokens"].shape[0]
        assert c["prefill/topk/ids"].shape == (T, 5) and c["prefill/topk/ids"].dtype == "int32"
        assert c["prefill/topk/logprobs"].shape == (T, 5) and c["prefill/topk/logprobs"].dtype == "float32"
        assert c["decode/topk/ids"].shape == (S, 5) and c["decode/topk/logprobs"].shape == (S, 5)
        for x in ("prefill/logits", "prefill/hidden", "prefill/state", "decode/logits", "decode/state"):
            assert x not in c, (name, x)
    assert "weights_sha256" not in f.attrs or f.attrs["weights_sha256"] == ""
PYEOF
"$PY" "$SRC/golden/validate.py" --actual "$G" "$TMP/good.h5" > "$TMP/val.out" 2>&1 \
  && ok "validate.py --actual accepts it" || { bad "validate.py --actual"; cat "$TMP/val.out"; }
"$QC" diff "$G" "$TMP/good.h5" --json "$TMP/good.diff.json" > "$TMP/good.diff.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "diff: exit 0" || { bad "diff: exit $rc"; tail -5 "$TMP/good.diff.out"; }
"$PY" - "$TMP/good.diff.json" <<'PYEOF' && ok "diff: 4 topk rows per case, all PASS" || bad "diff rows"
import json, collections, sys
d = json.load(open(sys.argv[1]))
c = collections.Counter(r["check"] for r in d["checks"] if r["case"] != "_file")
assert c == {k: 9 for k in ("topk.argmax", "topk.logprob", "topk.top1_in_k", "topk.overlap")}, c
assert all(r["verdict"] == "PASS" for r in d["checks"] if r["check"].startswith("topk."))
ms = [r for r in d["checks"] if r["check"] == "model_hash"]
assert ms and ms[0]["verdict"] == "SKIP", ms
PYEOF
"$QC" check --golden "$G" --backend "http:$URL" --quiet --json "$TMP/good.check.json" \
  > "$TMP/good.check.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "check of the live server: exit 0" || bad "check: exit $rc"
same_verdicts "$TMP/good.check.json" "$TMP/good.diff.json" \
  && ok "diff of the recording = check of the server (verdicts, max |d logprob|)" || bad "diff vs check"

# usage errors (the server is up: they are refused before any request)
for flag in "--model $FIX/model" "--static" "--no-kv-cache"; do
  "$QC" record --like "$G" --backend "http:$URL" $flag --out "$TMP/u.h5" > "$TMP/u.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "${flag%% *}: not with --backend http:" "$TMP/u.out" && [ ! -e "$TMP/u.h5" ] \
    && ok "record http: $flag: exit 2" || { bad "record http: $flag: exit $rc"; cat "$TMP/u.out"; }
done
stop

# ---- a buggy server: the same failing verdicts offline ----
start_server shift --mutant logprob-shift
"$QC" record --like "$G" --backend "http:$URL" --out "$TMP/shift.h5" > "$TMP/rec2.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "record of a buggy server: exit 0 (its answers are well-formed)" || bad "record shift: exit $rc"
"$QC" diff "$G" "$TMP/shift.h5" --json "$TMP/shift.diff.json" > "$TMP/shift.diff.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "topk.argmax.*FAIL" "$TMP/shift.diff.out" \
  && ok "diff of logprob-shift: exit 1, topk.argmax FAIL" || { bad "diff shift: exit $rc"; tail -5 "$TMP/shift.diff.out"; }
"$QC" check --golden "$G" --backend "http:$URL" --quiet --json "$TMP/shift.check.json" \
  > "$TMP/shift.check.out" 2>&1
rc=$?
[ $rc -eq 1 ] && ok "check of the buggy server: exit 1" || bad "check shift: exit $rc"
same_verdicts "$TMP/shift.check.json" "$TMP/shift.diff.json" \
  && ok "logprob-shift: diff verdicts = check verdicts" || bad "shift: diff vs check"
stop

# ---- a server that cannot be reached: exit 2 naming it ----
"$QC" record --like "$G" --backend "http:http://127.0.0.1:1" --out "$TMP/x.h5" > "$TMP/x.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "127.0.0.1:1" "$TMP/x.out" && [ ! -e "$TMP/x.h5" ] \
  && ok "unreachable server: exit 2 naming the URL, nothing written" || { bad "unreachable: exit $rc"; cat "$TMP/x.out"; }

# ---- a server whose scoring answers are errors: the runtime fails (exit 1), nothing written ----
"$PY" -u - > "$TMP/stub.out" 2> "$TMP/stub.err" <<'PYEOF' &
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def reply(self, code, obj):
        b = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_GET(self):
        if self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": "m", "owned_by": "vllm"}]})
        else:
            self.reply(404, {"error": "not found"})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.reply(500, {"error": "EngineCore encountered an issue"})
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print("LISTENING http://127.0.0.1:%d" % s.server_address[1], flush=True)
s.serve_forever()
PYEOF
PID=$!
for _ in $(seq 100); do grep -q LISTENING "$TMP/stub.out" 2>/dev/null && break; sleep 0.1; done
URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$TMP/stub.out" | head -1)
"$QC" record --like "$G" --backend "http:$URL,api=vllm" --out "$TMP/e.h5" > "$TMP/e.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "FAIL: http:.*case cont: the server's answer is not valid" "$TMP/e.out" \
  && [ ! -e "$TMP/e.h5" ] && ok "a server answering 500: record exit 1 naming the case, nothing written" \
  || { bad "server answering 500: exit $rc"; cat "$TMP/e.out"; }
stop

# ---- hand-corrupted ACTUALs: format errors naming the dataset ----
"$PY" - "$TMP/good.h5" "$TMP" <<'PYEOF' || bad "making the corrupted files"
import shutil, sys, h5py, numpy as np
src, tmp = sys.argv[1], sys.argv[2]
def make(name, fn):
    p = "%s/%s.h5" % (tmp, name)
    shutil.copy(src, p)
    with h5py.File(p, "r+") as f:
        fn(f["cases/len005"])
def setv(path, idx, v):
    def fn(c):
        a = c[path][()]
        a[idx] = v
        c[path][...] = a
    return fn
def reshape(c):
    a = c["prefill/topk/ids"][()]
    del c["prefill/topk/ids"]
    c["prefill/topk/ids"] = a[:-1]
def drop(c):
    del c["decode/topk/logprobs"]
def asc(c):
    a = c["prefill/topk/logprobs"][()]
    a[2, :] = a[2, ::-1]
    c["prefill/topk/logprobs"][...] = a
make("id_range", setv("prefill/topk/ids", (3, 1), 256))
make("nan", setv("decode/topk/logprobs", (2, 0), np.nan))
make("shape", reshape)
make("alone", drop)
make("ascending", asc)
make("dup", lambda c: setv("prefill/topk/ids", (0, 1), int(c["prefill/topk/ids"][0, 0]))(c))
PYEOF
for x in "id_range:prefill/topk/ids: \[3, 1\] = 256: not a token id" \
         "nan:decode/topk/logprobs: \[2, 0\] = nan: not a finite" \
         "shape:prefill/topk/ids: shape \[4,5\] fits no layout" \
         "alone:decode/topk/logprobs: missing dataset" \
         "ascending:prefill/topk/logprobs: row 2: not in descending order" \
         "dup:prefill/topk/ids: row 0: token"; do
  name="${x%%:*}"; want="${x#*:}"
  "$QC" diff "$G" "$TMP/$name.h5" > "$TMP/$name.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] && grep -q "$TMP/$name.h5: /cases/len005/$want" "$TMP/$name.out" \
    && ok "corrupted ($name): diff exit 2 naming the dataset" \
    || { bad "corrupted ($name): exit $rc"; grep -m2 "len005" "$TMP/$name.out"; }
  "$PY" "$SRC/golden/validate.py" --actual "$G" "$TMP/$name.h5" > "$TMP/$name.val" 2>&1
  rc=$?
  [ $rc -eq 1 ] && grep -q "INVALID.*/cases/len005/${want%%:*}" "$TMP/$name.val" \
    && ok "corrupted ($name): validate.py --actual exit 1 naming it" \
    || { bad "corrupted ($name): validate.py exit $rc"; cat "$TMP/$name.val"; }
done

# ---- an ACTUAL with logits: unchanged, its top-k lists validated only ----
"$QC" record --like "$G" --backend reference --no-hidden --out "$TMP/ref.h5" > /dev/null 2>&1 \
  || bad "record --like reference"
"$QC" diff "$G" "$TMP/ref.h5" --json "$TMP/ref.json" > /dev/null 2>&1
rc_plain=$?
"$PY" - "$TMP/ref.h5" "$TMP/good.h5" "$TMP/both.h5" "$TMP/both_bad.h5" <<'PYEOF' || bad "making logits + top-k"
import shutil, sys, h5py
ref, topk, both, bad = sys.argv[1:5]
for out, corrupt in ((both, False), (bad, True)):
    shutil.copy(ref, out)
    with h5py.File(out, "r+") as f, h5py.File(topk, "r") as t:
        for name in f["cases"]:
            for ph in ("prefill", "decode"):
                t.copy("cases/%s/%s/topk" % (name, ph), f["cases/%s/%s" % (name, ph)])
        if corrupt:
            f["cases/len001/prefill/topk/ids"][0, 0] = -1
PYEOF
"$QC" diff "$G" "$TMP/both.h5" --json "$TMP/both.json" > "$TMP/both.out" 2>&1
rc=$?
"$PY" - "$TMP/ref.json" "$TMP/both.json" <<'PYEOF' && [ $rc -eq $rc_plain ] && [ $rc -eq 0 ] \
  && ok "logits + top-k: the logits rows, unchanged (exit 0)" || bad "logits + top-k: exit $rc / $rc_plain"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
key = lambda d: sorted((r["case"], r["check"], r["verdict"]) for r in d["checks"])
assert key(a) == key(b), set(key(a)) ^ set(key(b))
assert not any(r["check"].startswith("topk.") for r in b["checks"])
PYEOF
"$QC" diff "$G" "$TMP/both_bad.h5" > "$TMP/both_bad.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "len001/prefill/topk/ids: \[0, 0\] = -1" "$TMP/both_bad.out" \
  && ok "logits + a bad top-k list: exit 2 naming it" || bad "logits + bad top-k: exit $rc"

echo "$fails failed"
[ $fails -eq 0 ]
