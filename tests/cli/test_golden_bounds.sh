#!/usr/bin/env bash
# test_golden_bounds.sh — reading goldens at scale and hostile goldens (hardening items 9-11):
#   * --list on a 2000-case golden reads metadata only: < 3 s of CPU and < 100 MB peak RSS;
#   * --shard 1/200 --max-memory 100M runs its 10 cases, one case's tensors in memory at a
#     time, and the memory plan counts the golden bytes;
#   * a symlink loop and a second name of a golden under --golden are skipped with a note,
#     and the run passes;
#   * a ~10 KB golden declaring tokens [2^22] and logits [2^22, 256] is refused with exit 2
#     and a message naming the dataset and both shapes, in well under a second;
#   * a bad value in one case is an ERROR row for that case; the other cases still run.
# Goldens are made with /usr/bin/python3 + h5py from a fixture's cases (golden/SCHEMA.md);
# time and peak RSS of each run are measured with python's resource module (RUSAGE_CHILDREN);
# CPU time (user + sys) is bounded rather than wall time, so that a loaded CI machine does not
# fail the run (the wall time is printed beside it).
#   bash tests/cli/test_golden_bounds.sh <path-to-qwen-conform> <source-dir>
set -u
QC="${1:?usage: test_golden_bounds.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: test_golden_bounds.sh <qwen-conform> <source-dir>}"
PY=/usr/bin/python3
fail=0
pass=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }
skp() { echo "skip - $*"; }
if ! $PY -c "import h5py, numpy" 2>/dev/null; then echo "SKIP: /usr/bin/python3 lacks h5py"; exit 0; fi

FX="$SRC/fixtures/tiny-f32-tied-flat"
[ -f "$FX/golden.h5" ] && [ -d "$FX/model" ] || { echo "SKIP: no fixture at $FX"; exit 0; }
TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_golden_bounds.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

# measure OUT ERR CMD...: run CMD (stdout > OUT, stderr > ERR); print "rc wall_s cpu_s maxrss_kb"
measure() {
  $PY - "$@" <<'PYEOF'
import resource, subprocess, sys, time
out, err, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
t0 = time.time()
with open(out, "wb") as o, open(err, "wb") as e:
    rc = subprocess.call(cmd, stdout=o, stderr=e)
wall = time.time() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(rc, "%.2f" % wall, "%.2f" % (ru.ru_utime + ru.ru_stime), ru.ru_maxrss)
PYEOF
}
lt() { $PY -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$1" "$2"; }
# Under AddressSanitizer (ci/sanitize, ci/fuzz builds) time and RSS mean nothing (shadow
# memory, a 256 MB quarantine of freed blocks): the resource bounds are then skipped, every
# functional check still runs.
SANITIZED=0
grep -qa __asan_init "$QC" && SANITIZED=1
# bound WHAT VALUE LIMIT OKTEXT BADTEXT: VALUE < LIMIT (skipped under a sanitizer)
bound() {
  if [ $SANITIZED = 1 ]; then skp "$1 (sanitizer build: $2, not bounded)"
  elif lt "$2" "$3"; then ok "$4"
  else bad "$5"; fi
}

# mkgolden OUT CASE N [EDIT]: a golden whose N cases c0000.. are copies of the fixture's CASE
# (datasets and attributes), root attributes as the fixture's, the model linked beside it;
# EDIT is python run with `f` (the new file) open
mkgolden() {
  mkdir -p "$(dirname "$1")"
  ln -sfn "$FX/model" "$(dirname "$1")/model"
  $PY - "$FX/golden.h5" "$@" <<'PYEOF'
import sys, h5py, numpy as np
src, out, case, n = h5py.File(sys.argv[1], "r"), sys.argv[2], sys.argv[3], int(sys.argv[4])
with h5py.File(out, "w") as f:
    for k, v in src.attrs.items():
        f.attrs[k] = v
    cases = f.create_group("cases")
    for i in range(n):
        src.copy(src["cases/" + case], cases, name="c%04d" % i)
    if len(sys.argv) > 5:
        exec(sys.argv[5])
PYEOF
}

# ---- --list and --shard on a 2000-case golden ------------------------------------------------
BIG="$TMP/big/golden.h5"
mkgolden "$BIG" len001 2000 || bad "could not make the 2000-case golden"
read -r rc wall cpu rss < <(measure "$TMP/list.out" "$TMP/list.err" "$QC" --golden "$TMP/big" --list)
n=$(wc -l < "$TMP/list.out")
[ "$rc" = 0 ] && [ "$n" = 12000 ] && ok "--list on 2000 cases: exit 0, 12000 checks listed" ||
  bad "--list: exit $rc, $n lines: $(head -c 300 "$TMP/list.err")"
head -1 "$TMP/list.out" | grep -qx "big/c0000/reference/static" && ok "--list names stem/case/backend/mode" ||
  bad "--list first line: $(head -1 "$TMP/list.out")"
bound "--list CPU" "$cpu" 3 "--list on 2000 cases: ${cpu} s CPU < 3 s (wall ${wall} s)" \
  "--list on 2000 cases: ${cpu} s CPU (wall ${wall} s), want < 3 s"
bound "--list RSS" "$rss" 102400 "--list on 2000 cases: peak RSS $((rss / 1024)) MB < 100 MB (no tensor read)" \
  "--list on 2000 cases: peak RSS $((rss / 1024)) MB, want < 100 MB"

read -r rc wall cpu rss < <(measure "$TMP/shard.out" "$TMP/shard.err" "$QC" -v --golden "$TMP/big" \
  --shard 1/200 --max-memory 100M)
ncase=$(grep -c '^\[big\] case c[0-9]* done' "$TMP/shard.err")
[ "$rc" = 0 ] && [ "$ncase" = 10 ] && ok "--shard 1/200 --max-memory 100M: exit 0, 10 cases run (${cpu} s CPU, wall ${wall} s)" ||
  bad "--shard 1/200 --max-memory 100M: exit $rc, $ncase cases: $(grep -m3 -E 'qwen-conform:|FAIL|ERROR' "$TMP/shard.out" "$TMP/shard.err")"
grep -q '^\[big\] case c0000 done' "$TMP/shard.err" && grep -q '^\[big\] case c1800 done' "$TMP/shard.err" &&
  ok "--shard 1/200 picks every 200th case (c0000 ... c1800)" || bad "--shard 1/200: wrong cases: $(grep -m3 'case c' "$TMP/shard.err")"
bound "--shard RSS" "$rss" 102400 "--shard 1/200: peak RSS $((rss / 1024)) MB < 100 MB (one case loaded at a time)" \
  "--shard 1/200: peak RSS $((rss / 1024)) MB, want < 100 MB"
# the plan includes the golden bytes: a limit below the plan names them
"$QC" --golden "$TMP/big" --shard 1/200 --max-memory 64M --quiet >"$TMP/mem.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "needs .* GiB > limit .*: golden .* GiB (metadata + the largest selected case)" "$TMP/mem.out" &&
  ok "--max-memory below the plan: exit 2, the message counts the golden bytes" ||
  bad "--max-memory 64M: exit $rc: $(grep -m2 -E 'memory|needs' "$TMP/mem.out")"

# ---- symlinks under --golden: a loop and a second name are skipped, the run passes ------------
LD="$TMP/loop/g"
mkgolden "$LD/golden.h5" len005 1
mkdir -p "$LD/sub"
ln -s .. "$LD/sub/loop"
ln -s golden.h5 "$LD/alias.h5"
read -r rc wall cpu rss < <(measure "$TMP/loop.out" "$TMP/loop.err" "$QC" -v --golden "$LD" \
  --backend reference --mode dynamic)
[ "$rc" = 0 ] && ok "a symlink loop and an alias under --golden: exit 0 (${wall} s)" ||
  bad "symlink loop: exit $rc: $(grep -m3 'qwen-conform:' "$TMP/loop.err")"
[ "$(grep -c "^qwen-conform: note: skipping $LD/sub/loop: directory loop" "$TMP/loop.err")" = 1 ] &&
  ok "the loop is skipped with one note" || bad "loop note: $(grep note "$TMP/loop.err")"
[ "$(grep -c "^qwen-conform: note: skipping $LD/alias.h5: same file as $LD/golden.h5" "$TMP/loop.err")" = 1 ] &&
  ok "the second name of the golden is skipped with one note" || bad "alias note: $(grep note "$TMP/loop.err")"
grep -q '^\[file 1/1\]' "$TMP/loop.err" && ok "the golden is checked once" ||
  bad "files checked: $(grep '^\[file' "$TMP/loop.err")"

# ---- a lying golden: huge declared shapes, refused before anything is read --------------------
LIE="$TMP/lie"
mkgolden "$LIE/lying.h5" len001 0 '
c = f.create_group("cases/huge"); c.attrs["start_pos"] = np.int32(0)
c.create_dataset("tokens", shape=(2**22,), dtype=np.int32, chunks=(65536,))
c.create_dataset("prefill/logits", shape=(2**22, 256), dtype=np.float32, chunks=(1024, 256))'
mkgolden "$LIE/lying2.h5" len001 0 '
c = f.create_group("cases/huge"); c.attrs["start_pos"] = np.int32(0)
c["tokens"] = np.arange(5, dtype=np.int32)
c.create_dataset("prefill/logits", shape=(2**22, 256), dtype=np.float32, chunks=(1024, 256))'
sz=$(stat -c %s "$LIE/lying.h5")
[ "$sz" -lt 65536 ] && ok "the lying golden is $sz bytes on disk and declares 4 GiB" || bad "lying golden is $sz bytes"
read -r rc wall cpu rss < <(measure "$TMP/lie.out" "$TMP/lie.err" "$QC" --golden "$LIE/lying.h5")
msg=$(grep -m1 '^qwen-conform: ' "$TMP/lie.err")
[ "$rc" = 2 ] && printf '%s' "$msg" | grep -qF "$LIE/lying.h5: /cases/huge/tokens: shape [4194304] != [<=4096]" &&
  ok "tokens [2^22]: exit 2: ${msg#qwen-conform: }" || bad "lying golden: exit $rc: $msg"
bound "lying golden time" "$wall" 1 "refused in ${wall} s (${cpu} s CPU)" "lying golden: refused in ${wall} s, want < 1 s"
bound "lying golden RSS" "$rss" 102400 "refused with a peak RSS of $((rss / 1024)) MB (nothing read)" \
  "lying golden: peak RSS $((rss / 1024)) MB, want < 100 MB"
read -r rc wall cpu rss < <(measure "$TMP/lie2.out" "$TMP/lie2.err" "$QC" --golden "$LIE/lying2.h5")
msg=$(grep -m1 '^qwen-conform: ' "$TMP/lie2.err")
[ "$rc" = 2 ] && printf '%s' "$msg" | grep -qF "/cases/huge/prefill/logits: shape [4194304,256] != [5,256]" &&
  ok "logits [2^22, 256] for 5 tokens: exit 2: ${msg#qwen-conform: }" || bad "lying logits: exit $rc: $msg"
bound "lying logits time" "$wall" 1 "refused in ${wall} s" "lying logits: refused in ${wall} s, want < 1 s"
read -r rc wall cpu rss < <(measure "$TMP/lie3.out" "$TMP/lie3.err" "$QC" inspect "$LIE/lying.h5")
[ "$rc" = 2 ] && grep -qF "/cases/huge/tokens: shape [4194304]" "$TMP/lie3.err" &&
  ok "inspect (whole-file reader) refuses it too: exit 2" ||
  bad "inspect lying golden: exit $rc: $(head -c 300 "$TMP/lie3.err")"
bound "inspect lying golden time" "$wall" 1 "inspect refused it in ${wall} s" "inspect: refused in ${wall} s, want < 1 s"

# ---- a bad value found when a case is loaded: that case errors, the others run ---------------
mkgolden "$TMP/nan/golden.h5" len005 3 '
d = f["cases/c0001/prefill/logits"]; a = d[...]; a[2, 7] = np.nan; d[...] = a'
"$QC" -v --golden "$TMP/nan" --backend reference --mode dynamic >"$TMP/nan.out" 2>"$TMP/nan.err"
rc=$?
[ $rc = 2 ] && ok "a NaN in one case: exit 2" || bad "NaN case: exit $rc"
grep -E "c0001 .*load .*ERROR" "$TMP/nan.out" | grep -qF "/cases/c0001/prefill/logits: NaN at [2,7]" &&
  ok "that case is an ERROR row naming the file and dataset" ||
  bad "no ERROR row: $(grep -m2 -E 'ERROR|c0001' "$TMP/nan.out")"
grep -q "c0000 .*prefill.logits *PASS" "$TMP/nan.out" && grep -q "c0002 .*prefill.logits *PASS" "$TMP/nan.out" &&
  ok "the other cases still run and pass" || bad "other cases: $(grep -m4 -E 'c000[02]' "$TMP/nan.out")"
[ "$(grep -c '^qwen-conform: ' "$TMP/nan.err")" = 1 ] && ok "one error message on stderr" ||
  bad "stderr messages: $(grep '^qwen-conform: ' "$TMP/nan.err")"

echo "# $pass passed, $fail failed"
[ $fail = 0 ]
