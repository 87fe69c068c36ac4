#!/usr/bin/env bash
# test_datasafety.sh <qwen-conform> <source-dir> — "never damage a user's files" (qc_outpath):
#   1. an output onto an input (the golden, a model file, the policy, the tokens file, the
#      profile, the baseline, diff's two files) or onto another output (also through a hard
#      link, a symlink, another spelling) is refused with exit 2 before any work;
#      record --out onto an existing golden needs --force;
#   2. special targets: /dev/stdout, /dev/null, '-', a FIFO are written directly and stay what
#      they are; a symlink is written through; a read-only output is refused (even as root);
#   3. every output path is validated first (empty, missing directory, over-long, directory)
#      for check, diff, calibrate, record and bench;
#   4. --dump-actual into a directory the run reads goldens from is refused;
#   5. SIGTERM while writing (a FIFO that is not drained) leaves no temp file; SIGPIPE on
#      stdout (`| true`) does not kill the run.
# Every case asserts the exit code, a message naming the file, that every input's sha256 is
# unchanged and that no *.tmp.* file is left. Runs on a copy of fixtures/tiny-f32-tied-flat.
set -u
QC="$1"
SRC="$2"
PY=/usr/bin/python3
TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_datasafety.XXXXXX")"
HOLDER_PID=""
trap '[ -n "$HOLDER_PID" ] && kill "$HOLDER_PID" 2>/dev/null; rm -rf "$TMP"' EXIT
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }

IN="$TMP/in"     # every input of the runs below (hashed)
OUT="$TMP/out"   # outputs, links
mkdir -p "$IN" "$OUT"
cp -r "$SRC/fixtures/tiny-f32-tied-flat" "$IN/"
FX="$IN/tiny-f32-tied-flat"
G="$FX/golden.h5"
M="$FX/model"
cp "$SRC/fixtures/tolerances.json" "$IN/policy.json"
echo "1,2,3" >"$IN/tokens.txt"
echo '{"max_seq_len": 4}' >"$IN/profile.json"
echo '{"results": []}' >"$IN/baseline.json"
ONE='len001/reference/static'                 # one case, one backend, one mode: fast
CHECK=("$QC" --golden "$FX" --policy "$IN/policy.json" --filter "$ONE" --quiet)

manifest() { (cd "$IN" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
SUM0="$(manifest)"

# common assertions after a case: inputs untouched, no temp file anywhere
after() {
  local name="$1"
  [ "$(manifest)" = "$SUM0" ] || bad "$name: an input changed (sha256)"
  local left
  left="$(find "$TMP" -name '*.tmp.*' 2>/dev/null)"
  [ -z "$left" ] || { bad "$name: temp file left: $left"; find "$TMP" -name '*.tmp.*' -delete; }
}

# refuse NAME NEEDLE... -- command...: exit 2, an error line holding every needle, nothing done
# (no progress line, no output written)
refuse() {
  local name="$1"
  shift
  local needles=()
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  "$@" >"$TMP/stdout" 2>"$TMP/stderr"
  local rc=$?
  local msg n missing=""
  msg="$(grep -E '^qwen-conform( [a-z]+)?: ' "$TMP/stderr" | head -c 800)"
  for n in "${needles[@]}"; do
    printf '%s' "$msg" | grep -qF -- "$n" || missing="$n"
  done
  if [ $rc -ne 2 ]; then
    bad "$name: exit $rc, want 2 ($(head -c 400 "$TMP/stderr"))"
  elif [ -n "$missing" ]; then
    bad "$name: message lacks '$missing': $msg"
  elif grep -qE '^\[file |model ready|: wrote |case .* done' "$TMP/stderr" "$TMP/stdout"; then
    bad "$name: refused only after doing work: $(head -c 400 "$TMP/stderr")"
  else
    ok "$name (exit 2: ${msg:0:160})"
  fi
  after "$name"
}

# ---- 1. an output never replaces an input or another output ---------------------------------
refuse "check --json onto the golden" "$G: is the same file as $G" "golden, an input" "(--json)" -- "${CHECK[@]}" --json "$G"
refuse "check --junit onto the model's config.json" "$M/config.json: is the same file" "model file of golden $G" "(--junit)" -- \
  "${CHECK[@]}" --junit "$M/config.json"
refuse "check --json onto the weights" "$M/model.safetensors: is the same file" "model file" "(--json)" -- \
  "${CHECK[@]}" --json "$M/model.safetensors"
refuse "check --json onto --policy" "$IN/policy.json: is the same file" "--policy, an input" "(--json)" -- \
  "${CHECK[@]}" --json "$IN/policy.json"
refuse "check --json F --junit F" "$OUT/r: is the same file as --json $OUT/r" "another output" "(--junit)" -- \
  "${CHECK[@]}" --json "$OUT/r" --junit "$OUT/r"
mkdir -p "$OUT/a"
refuse "check: the same new file spelled twice (./a/../a/x)" "$OUT/./a/../a/x.json: is the same" \
  "--json $OUT/a/x.json" "another output" "(--junit)" -- "${CHECK[@]}" --json "$OUT/a/x.json" --junit "$OUT/./a/../a/x.json"
ln "$G" "$OUT/hardlink.json"
refuse "check --json is a hard link to the golden" "$OUT/hardlink.json: is the same file as $G" "golden" "(--json)" -- \
  "${CHECK[@]}" --json "$OUT/hardlink.json"
rm -f "$OUT/hardlink.json"
ln -s "$M/config.json" "$OUT/symlink.xml"
refuse "check --junit is a symlink to config.json" "$OUT/symlink.xml: is the same file as $M/config.json" "(--junit)" -- \
  "${CHECK[@]}" --junit "$OUT/symlink.xml"
refuse "check --golden DIR: tolerances.json found beside it" "$IN/tolerances.json: is the same" "policy, an input" "(--json)" -- \
  bash -c 'cp "$1/policy.json" "$1/tolerances.json" && "$2" --golden "$1" --filter "$3" --quiet --json "$1/tolerances.json"; rc=$?; rm -f "$1/tolerances.json"; exit $rc' _ "$IN" "$QC" "$ONE"
"$QC" record --model "$M" --tokens 1,2,3 --out "$OUT/act.h5" >/dev/null 2>&1 || bad "record act.h5"
cp "$OUT/act.h5" "$IN/act.h5"
SUM0="$(manifest)"
refuse "diff --json onto ACTUAL.h5" "$IN/act.h5: is the same file" "ACTUAL.h5, an input" "(--json)" -- \
  "$QC" diff "$G" "$IN/act.h5" --json "$IN/act.h5"
refuse "diff --junit onto GOLDEN.h5" "$G: is the same file" "GOLDEN.h5, an input" "(--junit)" -- \
  "$QC" diff "$G" "$IN/act.h5" --junit "$G"
refuse "diff --json F --junit F" "$OUT/d: is the same file as --json $OUT/d" "(--junit)" -- \
  "$QC" diff "$G" "$IN/act.h5" --json "$OUT/d" --junit "$OUT/d"
refuse "record --out onto --tokens-file (even with --force)" "$IN/tokens.txt: is the same" "--tokens-file, an input" "(--out)" -- \
  "$QC" record --model "$M" --tokens-file "$IN/tokens.txt" --out "$IN/tokens.txt" --force
refuse "record --out onto --profile" "$IN/profile.json: is the same" "--profile, an input" "(--out)" -- \
  "$QC" record --model "$M" --tokens 1,2 --profile "$IN/profile.json" --out "$IN/profile.json"
refuse "record --out onto the model's weights" "$M/model.safetensors: is the same" "model file of --model" "(--out)" -- \
  "$QC" record --model "$M" --tokens 1,2 --out "$M/model.safetensors" --force
refuse "record --out onto an existing golden needs --force" "$G: exists" "--force" "(--out)" -- \
  "$QC" record --model "$M" --tokens 1,2 --out "$G"
grep -qF "golden file (schema_version 1)" "$TMP/stderr" && ok "record names the existing file a golden" \
  || bad "record does not say the file is a golden: $(cat "$TMP/stderr")"
cp "$G" "$OUT/old-golden.h5"
refuse "record --out onto an existing non-input golden without --force" "$OUT/old-golden.h5: exists" "--force" -- \
  "$QC" record --model "$M" --tokens 1,2 --out "$OUT/old-golden.h5"
cmp -s "$G" "$OUT/old-golden.h5" && ok "the refused golden is unchanged" || bad "the refused golden changed"
if "$QC" record --model "$M" --tokens 1,2 --out "$OUT/old-golden.h5" --force >/dev/null 2>"$TMP/stderr" &&
   ! cmp -s "$G" "$OUT/old-golden.h5" && "$QC" inspect "$OUT/old-golden.h5" >/dev/null 2>&1; then
  ok "record --force replaces an existing (non-input) golden"
else
  bad "record --force: $(cat "$TMP/stderr")"
fi
after "record --force"
refuse "calibrate --out F --policy-out F" "$OUT/c.json: is the same file as --out $OUT/c.json" "(--policy-out)" -- \
  "$QC" calibrate --golden "$FX" --filter "$ONE" --out "$OUT/c.json" --policy-out "$OUT/c.json"
refuse "calibrate --out onto the golden" "$G: is the same" "golden, an input" "(--out)" -- \
  "$QC" calibrate --golden "$FX" --filter "$ONE" --out "$G"
refuse "calibrate --policy-out onto config.json" "$M/config.json: is the same" "model file" "(--policy-out)" -- \
  "$QC" calibrate --golden "$FX" --filter "$ONE" --policy-out "$M/config.json"
BENCH=("$QC" bench --model "$M" --prompt 4 --decode 1 --reps 1 --ref-prompt 2 --ref-decode 1)
refuse "bench --json onto --baseline" "$IN/baseline.json: is the same" "--baseline, an input" "(--json)" -- \
  "${BENCH[@]}" --json "$IN/baseline.json" --baseline "$IN/baseline.json"
refuse "bench --markdown F --svg F" "$OUT/b: is the same file as --markdown $OUT/b" "(--svg)" -- \
  "${BENCH[@]}" --markdown "$OUT/b" --svg "$OUT/b"
refuse "bench --svg onto the weights" "$M/model.safetensors: is the same" "model file of --model" "(--svg)" -- \
  "${BENCH[@]}" --svg "$M/model.safetensors"

# ---- 2. special targets ----------------------------------------------------------------------
if [ "$(id -u)" = 0 ]; then
  "${CHECK[@]}" --json /dev/stdout --junit /dev/null >"$TMP/stdout" 2>"$TMP/stderr"
  rc=$?
  if [ $rc -eq 0 ] && [ -c /dev/null ] && [ -L /dev/stdout ] && grep -q '"schema_version"' "$TMP/stdout"; then
    ok "as root: --json /dev/stdout --junit /dev/null (written directly; /dev/null still a character device, /dev/stdout still a symlink)"
  else
    bad "as root: /dev/stdout + /dev/null: exit $rc, /dev/null $(stat -c %F /dev/null), /dev/stdout $(stat -c %F /dev/stdout)"
  fi
  after "/dev/stdout + /dev/null"
else
  echo "skip - /dev/stdout + /dev/null as root (not root)"
fi
"${CHECK[@]}" --json - >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
$PY - "$TMP/stdout" <<'PYEOF' && [ $rc -eq 0 ] && ok "--json - writes the JSON report to stdout" || bad "--json -: exit $rc"
import json, sys
t = open(sys.argv[1]).read()
j = json.loads(t[t.index("{\n"):])   # the console summary comes first
assert j["summary"]["passed"] > 0
PYEOF
"$QC" diff "$G" "$IN/act.h5" --junit - --quiet >"$TMP/stdout" 2>"$TMP/stderr"
grep -q '<testsuites' "$TMP/stdout" && ok "diff --junit - writes JUnit to stdout" || bad "diff --junit -: $(cat "$TMP/stderr")"
after "stdout reports"
mkfifo "$OUT/fifo"
cat "$OUT/fifo" >"$TMP/fifo.out" &
catpid=$!
"${CHECK[@]}" --json "$OUT/fifo" >/dev/null 2>"$TMP/stderr"
rc=$?
wait $catpid
if [ $rc -eq 0 ] && [ -p "$OUT/fifo" ] && $PY -c "import json,sys; json.load(open(sys.argv[1]))" "$TMP/fifo.out"; then
  ok "--json FIFO: written directly (valid JSON read from it), still a FIFO"
else
  bad "--json FIFO: exit $rc, $(stat -c %F "$OUT/fifo")"
fi
after "FIFO"
mkdir -p "$OUT/real"
echo "old" >"$OUT/real/r.json"
ln -s real/r.json "$OUT/link.json"
if "${CHECK[@]}" --json "$OUT/link.json" >/dev/null 2>"$TMP/stderr" && [ -L "$OUT/link.json" ] &&
   [ "$(readlink "$OUT/link.json")" = real/r.json ] &&
   $PY -c "import json,sys; json.load(open(sys.argv[1]))" "$OUT/real/r.json"; then
  ok "a symlink output is followed: the target replaced, the link kept"
else
  bad "symlink output: $(cat "$TMP/stderr")"
fi
after "symlink output"
echo "keep me" >"$OUT/ro.json"
chmod 0444 "$OUT/ro.json"
refuse "check: a read-only --json (even as root)" "$OUT/ro.json: is read-only" "(--json)" -- "${CHECK[@]}" --json "$OUT/ro.json"
refuse "record: a read-only --out with --force" "$OUT/ro.json: is read-only" "(--out)" -- \
  "$QC" record --model "$M" --tokens 1,2 --out "$OUT/ro.json" --force
[ "$(cat "$OUT/ro.json")" = "keep me" ] && ok "the read-only file is unchanged" || bad "the read-only file changed"
refuse "record --out /dev/null (HDF5 needs a regular file)" "/dev/null: is not a regular file" "(--out)" -- \
  "$QC" record --model "$M" --tokens 1,2 --out /dev/null
[ -c /dev/null ] || bad "/dev/null is no longer a character device"

# ---- 3. every output path validated before the work, per command ---------------------------
LONG="$OUT/$(printf 'x%.0s' $(seq 1 300))"
mkdir -p "$OUT/adir"
declare -A OPT=([check]=--json [diff]=--junit [calibrate]=--out [record]=--out [bench]=--svg)
for cmd in check diff calibrate record bench; do
  case $cmd in
    check) base=("${CHECK[@]}") ;;
    diff) base=("$QC" diff "$G" "$IN/act.h5" --quiet) ;;
    calibrate) base=("$QC" calibrate --golden "$FX" --filter "$ONE") ;;
    record) base=("$QC" record --model "$M" --tokens 1,2) ;;
    bench) base=("${BENCH[@]}") ;;
  esac
  o=${OPT[$cmd]}
  refuse "$cmd $o '': empty path" "$o: empty path" -- "${base[@]}" "$o" ""
  refuse "$cmd $o: missing directory" "$OUT/nodir/r: directory $OUT/nodir does not exist" "($o)" -- \
    "${base[@]}" "$o" "$OUT/nodir/r"
  refuse "$cmd $o: over-long path" "too long" "($o)" -- "${base[@]}" "$o" "$LONG"
  refuse "$cmd $o: a directory" "$OUT/adir: is a directory" "($o)" -- "${base[@]}" "$o" "$OUT/adir"
done

# ---- 4. --dump-actual never where the run reads goldens ---------------------------------------
refuse "--dump-actual = the --golden dir" "$FX: is the golden directory" "(--dump-actual)" -- \
  "${CHECK[@]}" --dump-actual "$FX"
refuse "--dump-actual inside the --golden dir" "$FX/dumps: is inside the golden directory $FX" "(--dump-actual)" -- \
  "${CHECK[@]}" --dump-actual "$FX/dumps"
refuse "--dump-actual = the directory of the --golden file" "$FX: contains the golden $G" "(--dump-actual)" -- \
  "$QC" --golden "$G" --policy "$IN/policy.json" --filter "$ONE" --quiet --dump-actual "$FX"
[ -d "$FX/dumps" ] && bad "--dump-actual created a directory among the goldens"
if "${CHECK[@]}" --dump-actual "$OUT/dumps" >/dev/null 2>&1 &&
   [ -s "$OUT/dumps/tiny-f32-tied-flat.reference.static.h5" ]; then
  ok "--dump-actual elsewhere writes the dump"
else
  bad "--dump-actual elsewhere: $(ls "$OUT/dumps" 2>&1)"
fi
after "--dump-actual elsewhere"

# ---- 5. signals ----------------------------------------------------------------------------
# SIGTERM while the report is being written: a FIFO whose 4 KiB pipe the holder never drains
# (the run blocks in write() with the pipe full), then SIGTERM: status 143, no temp file, the
# JUnit report (written after the JSON) absent, the FIFO still a FIFO.
mkfifo "$OUT/slow"
$PY - "$OUT/slow" "$TMP/ready" "$TMP/full" <<'PYEOF' &
import fcntl, os, struct, sys, termios, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)
fcntl.fcntl(fd, 1031, 4096)          # F_SETPIPE_SZ: the smallest pipe
open(sys.argv[2], "w").close()
deadline = time.time() + 60
while time.time() < deadline:
    n = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    if n >= 4096:
        open(sys.argv[3], "w").close()   # the writer is blocked on a full pipe
        break
    time.sleep(0.01)
time.sleep(60)
PYEOF
HOLDER_PID=$!
for _ in $(seq 500); do [ -e "$TMP/ready" ] && break; sleep 0.02; done
"${CHECK[@]}" --json "$OUT/slow" --junit "$OUT/slow.xml" >/dev/null 2>"$TMP/stderr" &
qcpid=$!
for _ in $(seq 1500); do [ -e "$TMP/full" ] && break; sleep 0.02; done
if [ -e "$TMP/full" ]; then
  kill -TERM $qcpid
  wait $qcpid
  rc=$?
  if [ $rc -eq 143 ] && [ -p "$OUT/slow" ] && [ ! -e "$OUT/slow.xml" ]; then
    ok "SIGTERM while writing: exit 143, FIFO intact, no partial report"
  else
    bad "SIGTERM while writing: exit $rc (want 143), $(ls "$OUT" | tr '\n' ' ')"
  fi
else
  bad "SIGTERM case: the writer never filled the pipe"
  kill $qcpid 2>/dev/null
  wait $qcpid 2>/dev/null
fi
kill "$HOLDER_PID" 2>/dev/null
wait "$HOLDER_PID" 2>/dev/null
HOLDER_PID=""
after "SIGTERM"
# SIGPIPE: the reader of stdout is gone before the console output is flushed
"${CHECK[@]}" --json "$OUT/p.json" --junit - 2>"$TMP/stderr" | true
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 0 ] && $PY -c "import json,sys; json.load(open(sys.argv[1]))" "$OUT/p.json"; then
  ok "stdout closed (| true): exit 0, the --json report still written"
else
  bad "SIGPIPE: exit $rc: $(cat "$TMP/stderr")"
fi
after "SIGPIPE"

[ "$(manifest)" = "$SUM0" ] && ok "every input byte-identical at the end" || bad "inputs changed"
if [ $fails -eq 0 ]; then echo "all data-safety tests passed"; exit 0; fi
echo "$fails data-safety test(s) failed"
exit 1
