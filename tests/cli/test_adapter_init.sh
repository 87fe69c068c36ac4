#!/usr/bin/env bash
# test_adapter_init.sh <qwen-conform> <source-dir> — `qwen-conform adapter-init python|c DIR`:
#   * python: the skeleton (adapter.py wrapping the float32 golden model) runs green out of the
#     box: check on tiny-f32-tied-flat exits 0, verdict PARTIAL, PASS rows and not one FAIL;
#     with its commented stubs uncommented (hidden, state, set_option, snapshot/restore,
#     select_sequence; NOT fill_state: the helper's default fill through state()'s torch views
#     must give garbage_reset / unused_slots) it still has no FAIL and runs > 400 checks;
#   * c: the skeleton builds (cmake; the Makefile too) against this build's tree and passes with
#     --backend plugin: (PARTIAL, no FAIL); with -DWITH_ALL=1 no FAIL and > 400 checks; the quick
#     subset of docs/runtimes.md runs every check family it promises (router_topk: its row;
#     the skeleton has no router), in seconds;
#   * refusals, exit 2 and nothing written: an existing non-empty DIR (the user's file intact),
#     a file as DIR, a missing parent, an unknown kind, a --source that is no source tree.
set -u
QC="$1"
SRC="$2"
ONE="$SRC/fixtures/tiny-f32-tied-flat"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fails=0
QUICK='^(tiny-f32-tied-flat/(_model|len005|len063|longseq)|tiny-moe-f32-gva8/(_model|len005))/'

ok()   { echo "ok   - $*"; }
bad()  { echo "FAIL - $*"; fails=$((fails + 1)); }
# expect_rc CODE DESCRIPTION -- command...
expect_rc() {
  local want="$1" what="$2"; shift 3
  "$@" </dev/null >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok "$what (exit $rc)"; else
    bad "$what: exit $rc, expected $want"; tail -n 20 "$TMP/out" "$TMP/err"; fi
}
# rows KIND: from the last check's JSON report ($TMP/r.json): "verdicts" -> the runtime's
# verdicts, "npass" / "nfail" -> PASS / FAIL+ERROR rows, "pass" -> the stem/case check of each
# PASS row, one a line
rows() {
  "$PY" - "$TMP/r.json" "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["checks"]
k = sys.argv[2]
if k == "verdicts":
    print(" ".join(sorted(set(v for b, v in r["verdict"].items() if b != "-"))))
elif k == "npass":
    print(sum(c["verdict"] == "PASS" for c in rows))
elif k == "nfail":
    print(sum(c["verdict"] in ("FAIL", "ERROR") for c in rows))
else:
    for c in rows:
        if c["verdict"] == "PASS":
            print("%s/%s %s" % (c["stem"], c["case"], c["check"]))
EOF
}
# verdict_ok WHAT MIN_PASS: the last check has >= MIN_PASS PASS rows, no FAIL / ERROR row, and
# the runtime's verdict is PARTIAL (some capability left out) or PASS
verdict_ok() {
  local what="$1" min="$2" npass nfail v
  npass=$(rows npass) nfail=$(rows nfail) v=$(rows verdicts)
  if [ "$npass" -ge "$min" ] && [ "$nfail" -eq 0 ] && { [ "$v" = PARTIAL ] || [ "$v" = PASS ]; }; then
    ok "$what: $npass PASS rows (>= $min), 0 FAIL, verdict $v"
  else
    bad "$what: $npass PASS rows (want >= $min), $nfail FAIL/ERROR rows, verdict '$v'"
    tail -n 8 "$TMP/out" "$TMP/err"
  fi
}

# ---- python --------------------------------------------------------------------------------
expect_rc 0 "adapter-init python" -- "$QC" adapter-init python "$TMP/py"
files=$(cd "$TMP/py" && ls -A | tr '\n' ' ')
[ "$files" = "README.md adapter.py " ] && ok "python: exactly README.md adapter.py written (no temp left)" \
  || bad "python: files written: '$files'"
[ -x "$TMP/py/adapter.py" ] && ok "adapter.py is executable" || bad "adapter.py is not executable"
grep -q '@QC_' "$TMP/py/adapter.py" "$TMP/py/README.md" && bad "python: a placeholder left" \
  || ok "python: placeholders replaced"
grep -qF "QC_ROOT = os.environ.get(\"QWEN_CONFORM_ROOT\", \"$(cd "$SRC" && pwd -P)\")" "$TMP/py/adapter.py" \
  && ok "python: the source tree is the default QC_ROOT" || bad "python: QC_ROOT is not $SRC"
expect_rc 0 "python skeleton as is: check" -- "$QC" check --golden "$ONE" --backend exec:"$PY $TMP/py/adapter.py" --json "$TMP/r.json"
verdict_ok "python skeleton as is" 80
[ "$(rows verdicts)" = PARTIAL ] && ok "python skeleton as is: PARTIAL, not FAIL" \
  || bad "python skeleton as is: not PARTIAL"

# every stub uncommented but trim, forward_topk, fill_state, close
cp "$TMP/py/adapter.py" "$TMP/py/full.py"
"$PY" - "$TMP/py/full.py" hidden state set_option snapshot restore select_sequence <<'EOF'
import re, sys
path, names = sys.argv[1], set(sys.argv[2:])
out, on = [], False
for line in open(path).read().split("\n"):
    m = re.match(r"^    # def (\w+)\(", line)
    if m:
        on = m.group(1) in names
    elif on and not (line.startswith("    #     ") or line == "    #"):
        on = False
    if on:
        line = "" if line == "    #" else "    " + line[6:]
    if line.startswith("    # options_supported = "):
        line = "    " + line[6:]
    out.append(line)
open(path, "w").write("\n".join(out))
EOF
expect_rc 0 "python skeleton, stubs uncommented: check" -- "$QC" check --golden "$ONE" --backend exec:"$PY $TMP/py/full.py" --json "$TMP/r.json"
verdict_ok "python skeleton, stubs uncommented" 400
rows pass > "$TMP/pass"
grep -q ' garbage_reset$' "$TMP/pass" && grep -q ' unused_slots$' "$TMP/pass" \
  && ok "python: the helper's default fill_state (views of the golden's tensors): garbage_reset, unused_slots PASS" \
  || bad "python: no garbage_reset / unused_slots PASS from the default fill_state"

# ---- c -------------------------------------------------------------------------------------
expect_rc 0 "adapter-init c" -- "$QC" adapter-init c "$TMP/c"
files=$(cd "$TMP/c" && ls -A | tr '\n' ' ')
[ "$files" = "CMakeLists.txt Makefile README.md my_runtime.c " ] && ok "c: the four files written" \
  || bad "c: files written: '$files'"
if command -v cmake >/dev/null && command -v cc >/dev/null; then
  expect_rc 0 "c skeleton: cmake configure" -- cmake -S "$TMP/c" -B "$TMP/c/build" -DCMAKE_BUILD_TYPE=Release
  expect_rc 0 "c skeleton: cmake build" -- cmake --build "$TMP/c/build"
  expect_rc 0 "c skeleton as is: check" -- "$QC" check --golden "$ONE" --backend plugin:"$TMP/c/build/libmy_runtime.so" --json "$TMP/r.json"
  verdict_ok "c skeleton as is" 80
  [ "$(rows verdicts)" = PARTIAL ] && ok "c skeleton as is: PARTIAL, not FAIL" \
    || bad "c skeleton as is: not PARTIAL"
  expect_rc 0 "c skeleton: make WITH_ALL=1" -- make -C "$TMP/c" CFLAGS="-O2 -Wall -Wextra -Werror -DWITH_ALL=1"
  expect_rc 0 "c skeleton WITH_ALL: check" -- "$QC" check --golden "$ONE" --backend plugin:"$TMP/c/libmy_runtime.so" --json "$TMP/r.json"
  verdict_ok "c skeleton WITH_ALL" 400
  # the quick subset (docs/runtimes.md): every check family it promises, in seconds
  t0=$(date +%s)
  expect_rc 0 "quick subset on the c skeleton WITH_ALL" -- "$QC" check --golden "$SRC/fixtures" --filter "$QUICK" --backend plugin:"$TMP/c/libmy_runtime.so" --json "$TMP/r.json"
  t1=$(date +%s)
  verdict_ok "quick subset" 150
  rows pass > "$TMP/pass"
  missing=""
  for c in model_hash prefill.logits decode.logits prefill.hidden prefill.k_cache decode.recurrent_state \
           argmax static_eq_dynamic chunked_eq_recurrent chunk_sweep.c3 garbage_reset unused_slots \
           snapshot_restore snapshot_copy restore_after_garbage snapshot_chunk_boundary rollback \
           prefix_reuse multi_sequence batch_invariance; do
    grep -q " $c\$" "$TMP/pass" || missing="$missing $c"
  done
  [ -z "$missing" ] && ok "quick subset: every check family passes once at least ($((t1 - t0)) s)" \
    || bad "quick subset: no PASS row for:$missing"
  [ $((t1 - t0)) -lt 60 ] && ok "quick subset: $((t1 - t0)) s (< 60)" \
    || bad "quick subset: $((t1 - t0)) s, not seconds (the whole battery takes ~2 min)"
  grep -q '"router_topk"' "$TMP/r.json" && ok "quick subset: the MoE case has its router_topk row" \
    || bad "quick subset: no router_topk row (the skeleton has no router: SKIPPED, but present)"
  grep -q '^tiny-moe-f32-gva8/len005 ' "$TMP/pass" && ! grep -q '^tiny-f32-tied-flat/len001 ' "$TMP/pass" \
    && ok "quick subset: the MoE case in, the other cases out" || bad "quick subset: wrong cases"
  for doc in docs/runtimes.md adapters/python/README.md adapters/templates/python/README.md; do
    grep -qF -- "$QUICK" "$SRC/$doc" && ok "$doc names the quick subset" || bad "$doc lacks the quick subset's --filter"
  done
else
  echo "SKIP: no cmake / cc: the C skeleton is not built"
fi

# ---- refusals: exit 2, nothing written -----------------------------------------------------
mkdir "$TMP/mine" && echo "my notes" > "$TMP/mine/notes.txt"
expect_rc 2 "existing non-empty DIR refused" -- "$QC" adapter-init python "$TMP/mine"
grep -q "not empty" "$TMP/err" && grep -qF "$TMP/mine" "$TMP/err" && ok "the message names the directory" \
  || bad "refusal message: $(cat "$TMP/err")"
[ "$(ls -A "$TMP/mine")" = "notes.txt" ] && [ "$(cat "$TMP/mine/notes.txt")" = "my notes" ] \
  && ok "the user's directory untouched" || bad "the user's directory changed: $(ls -A "$TMP/mine")"
echo "a file" > "$TMP/afile"
expect_rc 2 "a file as DIR refused" -- "$QC" adapter-init c "$TMP/afile"
[ "$(cat "$TMP/afile")" = "a file" ] && ok "the file untouched" || bad "the file changed"
expect_rc 2 "a missing parent refused" -- "$QC" adapter-init python "$TMP/no/such/dir"
[ -e "$TMP/no" ] && bad "a missing parent: something was created" || ok "a missing parent: nothing created"
expect_rc 2 "unknown kind refused" -- "$QC" adapter-init rust "$TMP/rs"
[ -e "$TMP/rs" ] && bad "unknown kind: DIR created" || ok "unknown kind: nothing created"
expect_rc 2 "a --source that is no source tree refused" -- "$QC" adapter-init python "$TMP/ns" --source "$TMP"
grep -q "not a qwen-conform source tree" "$TMP/err" && [ ! -e "$TMP/ns" ] \
  && ok "bad --source: named, nothing created" || bad "bad --source: $(cat "$TMP/err")"
mkdir "$TMP/empty"
expect_rc 0 "an existing empty DIR accepted" -- "$QC" adapter-init python "$TMP/empty"

if [ "$fails" -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all adapter-init tests passed"
