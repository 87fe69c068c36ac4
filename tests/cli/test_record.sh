#!/usr/bin/env bash
# test_record.sh — end-to-end test of `qwen-conform record` and `qwen-conform inspect`.
#   bash tests/cli/test_record.sh <path-to-qwen-conform> <source-dir>
# Records a tiny checkpoint (the first fixtures/*/model, else tests/data/hf-tiny-a) in each
# prefill mode, checks the output with h5dump -H, inspect and h5diff (static vs dynamic vs
# no-KV within 1e-4), then every bad-input class: exit 2, one message naming the file / field,
# and no output file (nor temp file) left behind.
set -u
QC="${1:?usage: test_record.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: test_record.sh <qwen-conform> <source-dir>}"

fail=0
pass=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }

MODEL=""
for d in "$SRC"/fixtures/*/model; do
  if [ -f "$d/config.json" ]; then MODEL="$d"; break; fi
done
if [ -z "$MODEL" ] && [ -f "$SRC/tests/data/hf-tiny-a/config.json" ]; then
  MODEL="$SRC/tests/data/hf-tiny-a"
fi
if [ -z "$MODEL" ]; then
  echo "SKIP: no tiny model (fixtures/*/model or tests/data/hf-tiny-a) to record"
  exit 0
fi
echo "# model: $MODEL"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_record.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
OUT="$TMP/out"
mkdir -p "$OUT"
TOKENS="1,2,3,4,5,6,7,8,9,10"

# ---- record in each mode -------------------------------------------------------------------
for mode in static dynamic no-kv-cache; do
  f="$OUT/$mode.h5"
  if "$QC" record --model "$MODEL" --tokens "$TOKENS" --decode 3 "--$mode" --max-seq-len 4 \
       --out "$f" >"$TMP/stdout" 2>"$TMP/stderr"; then
    ok "record --$mode exits 0"
  else
    bad "record --$mode exits $?: $(cat "$TMP/stderr")"
    continue
  fi
  [ -s "$f" ] && ok "record --$mode wrote $f" || bad "record --$mode: no output"
  if command -v h5dump >/dev/null; then
    if h5dump -H "$f" >"$TMP/h5dump" 2>&1 &&
       grep -q 'DATASET "logits"' "$TMP/h5dump" &&
       grep -q 'GROUP "layer_00"' "$TMP/h5dump"; then
      ok "h5dump -H reads the --$mode golden"
    else
      bad "h5dump -H on the --$mode golden: $(head -5 "$TMP/h5dump")"
    fi
  fi
  if "$QC" inspect "$f" >"$TMP/inspect" 2>&1; then
    ok "inspect --$mode exits 0"
  else
    bad "inspect --$mode exits $?: $(cat "$TMP/inspect")"
  fi
  for want in "schema_version: 1" "generator:      qwen-conform record" "compute_dtype:  float32" \
              "case0" "prefill/hidden" "decode/state" "sha256" "matches"; do
    grep -qF "$want" "$TMP/inspect" && ok "inspect --$mode shows '$want'" \
      || bad "inspect --$mode lacks '$want'"
  done
  grep -q MISMATCH "$TMP/inspect" && bad "inspect --$mode reports a hash MISMATCH"
done

# static == dynamic == no-KV within 1e-4 (h5diff: golden-style, dataset by dataset)
if command -v h5diff >/dev/null && [ -s "$OUT/static.h5" ] && [ -s "$OUT/dynamic.h5" ] &&
   [ -s "$OUT/no-kv-cache.h5" ]; then
  for other in dynamic no-kv-cache; do
    for obj in /cases/case0/prefill/logits /cases/case0/prefill/hidden \
               /cases/case0/decode/logits /cases/case0/decode/tokens \
               /cases/case0/prefill/state /cases/case0/decode/state; do
      if h5diff -d 1e-4 "$OUT/$other.h5" "$OUT/static.h5" "$obj" >"$TMP/h5diff" 2>&1; then
        ok "h5diff -d 1e-4 $other vs static $obj"
      else
        bad "h5diff $other vs static $obj: $(head -5 "$TMP/h5diff")"
      fi
    done
  done
fi

# --tokens-file, output in another directory: model_path relative, hashes still match
mkdir -p "$TMP/elsewhere/deeper"
printf '1 2 3\n4, 5\n' >"$TMP/prompt.txt"
if "$QC" record --model "$MODEL" --tokens-file "$TMP/prompt.txt" --decode 2 --dynamic \
     --case my-case --out "$TMP/elsewhere/deeper/g.h5" >/dev/null 2>"$TMP/stderr" &&
   "$QC" inspect "$TMP/elsewhere/deeper/g.h5" >"$TMP/inspect" 2>&1; then
  ok "record --tokens-file into another directory"
  grep -q "my-case" "$TMP/inspect" && ok "--case names the case" || bad "--case ignored"
  grep -q "^model_path:     \.\./" "$TMP/inspect" && ok "model_path is relative" \
    || bad "model_path not relative: $(grep model_path "$TMP/inspect")"
  [ "$(grep -c matches "$TMP/inspect")" = 2 ] && ok "both hashes match from another directory" \
    || bad "hashes do not match from another directory: $(grep -A2 '^model:' "$TMP/inspect")"
else
  bad "record --tokens-file: $(cat "$TMP/stderr")"
fi

# a continuation: --history replayed at positions 0..3, then the prompt at start_pos 4; its
# decode equals that of one prompt holding history + prompt
if "$QC" record --model "$MODEL" --history 1,2,3,4 --tokens 5,6,7 --decode 2 --static \
     --out "$OUT/cont.h5" >/dev/null 2>"$TMP/stderr" &&
   "$QC" record --model "$MODEL" --tokens 1,2,3,4,5,6,7 --decode 2 --static \
     --out "$OUT/whole.h5" >/dev/null 2>>"$TMP/stderr" &&
   "$QC" inspect "$OUT/cont.h5" >"$TMP/inspect" 2>&1; then
  ok "record --history"
  grep -qE "^  case0 +4 +4 +3 +2 " "$TMP/inspect" && ok "continuation: start_pos 4, history 4, T 3, S 2" \
    || bad "continuation row: $(grep case0 "$TMP/inspect")"
  if command -v h5diff >/dev/null; then
    for obj in /cases/case0/decode/tokens /cases/case0/decode/logits /cases/case0/decode/state; do
      h5diff -d 1e-5 "$OUT/cont.h5" "$OUT/whole.h5" "$obj" >"$TMP/h5diff" 2>&1 \
        && ok "history + prompt == one prompt: $obj" || bad "continuation $obj: $(head -3 "$TMP/h5diff")"
    done
  fi
  rm -f "$OUT/cont.h5" "$OUT/whole.h5"
else
  bad "record --history: $(cat "$TMP/stderr")"
fi

# --no-hidden: no prefill/hidden group; --help: exit 0
if "$QC" record --model "$MODEL" --tokens 1,2 --no-hidden --out "$OUT/nh.h5" >/dev/null 2>&1 &&
   "$QC" inspect "$OUT/nh.h5" >"$TMP/inspect" 2>&1; then
  grep -q "prefill/hidden" "$TMP/inspect" && bad "--no-hidden still wrote prefill/hidden" \
    || ok "--no-hidden leaves out prefill/hidden"
  rm -f "$OUT/nh.h5"
else
  bad "record --no-hidden failed"
fi
"$QC" record --help >"$TMP/stdout" 2>&1 && grep -q "usage: qwen-conform record" "$TMP/stdout" \
  && ok "record --help" || bad "record --help"

# ---- bad inputs: exit 2, message names the file / field, no output ---------------------------
# expect_error NAME NEEDLE -- ARGS...   (output goes to $OUT/err.h5)
expect_error() {
  local name="$1" needle="$2"
  shift 3
  rm -f "$OUT/err.h5"
  "$QC" record "$@" >"$TMP/stdout" 2>"$TMP/stderr"
  local rc=$?
  if [ "$rc" = 2 ]; then ok "$name: exit 2"; else bad "$name: exit $rc (want 2)"; fi
  if grep -qF "qwen-conform record: $needle" "$TMP/stderr"; then
    ok "$name: message names '$needle'"
  else
    bad "$name: message '$(cat "$TMP/stderr")' lacks 'qwen-conform record: $needle'"
  fi
  if [ -e "$OUT/err.h5" ] || ls "$OUT" | grep -q 'tmp'; then
    bad "$name: left an output or temp file: $(ls "$OUT")"
  else
    ok "$name: no output file"
  fi
}

mkdir -p "$TMP/badmodel" "$TMP/emptydir"
echo '{"vocab_size": 16,' >"$TMP/badmodel/config.json"
cp "$MODEL/config.json" "$TMP/emptydir/config.json"   # config but no weights
printf '  \n' >"$TMP/empty.txt"
printf '1 2 x3\n' >"$TMP/junk.txt"
echo '{"max_seq_len": 4, "max_context_len": 6}' >"$TMP/profile.json"

expect_error "missing model dir" "$TMP/nope" -- \
  --model "$TMP/nope" --tokens 1,2 --out "$OUT/err.h5"
expect_error "invalid config.json" "$TMP/badmodel/config.json" -- \
  --model "$TMP/badmodel" --tokens 1,2 --out "$OUT/err.h5"
expect_error "model without weights" "$TMP/emptydir" -- \
  --model "$TMP/emptydir" --tokens 1,2 --out "$OUT/err.h5"
expect_error "empty prompt" "--tokens: empty prompt" -- \
  --model "$MODEL" --tokens "" --out "$OUT/err.h5"
expect_error "empty tokens file" "$TMP/empty.txt: empty prompt" -- \
  --model "$MODEL" --tokens-file "$TMP/empty.txt" --out "$OUT/err.h5"
expect_error "junk in tokens file" "$TMP/junk.txt: item 3: 'x3'" -- \
  --model "$MODEL" --tokens-file "$TMP/junk.txt" --out "$OUT/err.h5"
expect_error "missing tokens file" "$TMP/none.txt: cannot open" -- \
  --model "$MODEL" --tokens-file "$TMP/none.txt" --out "$OUT/err.h5"
expect_error "token id out of range" "--tokens: item 2: token id 99999999 outside the vocabulary" -- \
  --model "$MODEL" --tokens 1,99999999,3 --out "$OUT/err.h5"
expect_error "beyond --max-context-len" "--max-context-len: max_context_len: prompt 3 + decode 5" -- \
  --model "$MODEL" --tokens 1,2,3 --decode 5 --max-context-len 7 --out "$OUT/err.h5"
expect_error "beyond the profile's max_context_len" "$TMP/profile.json: max_context_len" -- \
  --model "$MODEL" --tokens 1,2,3 --decode 4 --profile "$TMP/profile.json" --out "$OUT/err.h5"
expect_error "history token out of range" "--history: item 1: token id 99999999" -- \
  --model "$MODEL" --history 99999999 --tokens 1,2 --out "$OUT/err.h5"
expect_error "history beyond max_context_len" "--max-context-len: max_context_len: history 3 + prompt 2" -- \
  --model "$MODEL" --history 1,2,3 --tokens 1,2 --max-context-len 4 --out "$OUT/err.h5"
expect_error "unwritable output" "$TMP/no/such/dir/x.h5" -- \
  --model "$MODEL" --tokens 1,2,3 --out "$TMP/no/such/dir/x.h5"
expect_error "output is a directory" "$OUT: is a directory" -- \
  --model "$MODEL" --tokens 1,2,3 --out "$OUT"
expect_error "missing --out" "--out: required" -- --model "$MODEL" --tokens 1,2,3
expect_error "unknown option" "unknown option '--frobnicate'" -- \
  --model "$MODEL" --tokens 1,2,3 --frobnicate --out "$OUT/err.h5"
expect_error "bad --decode" "--decode: 'many' is not an integer" -- \
  --model "$MODEL" --tokens 1,2,3 --decode many --out "$OUT/err.h5"
if [ "$(id -u)" != 0 ]; then
  mkdir -p "$TMP/ro" && chmod 555 "$TMP/ro"
  expect_error "read-only directory" "$TMP/ro/x.h5" -- \
    --model "$MODEL" --tokens 1,2,3 --out "$TMP/ro/x.h5"
  chmod 755 "$TMP/ro"
fi
# an existing output is replaced only on success: a failing record leaves it intact
cp "$OUT/static.h5" "$OUT/keep.h5" 2>/dev/null
if [ -s "$OUT/keep.h5" ]; then
  sum_before="$(cksum <"$OUT/keep.h5")"
  "$QC" record --model "$MODEL" --tokens 1,99999999 --out "$OUT/keep.h5" >/dev/null 2>&1
  [ "$(cksum <"$OUT/keep.h5")" = "$sum_before" ] && ok "a failed record leaves an existing output intact" \
    || bad "a failed record changed an existing output"
fi

# ---- --synthetic: real 0.8b dimensions, weights made in memory -----------------------------
if "$QC" record --synthetic 0.8b --backend optimized --tokens 5,6 --decode 1 --dynamic \
     --out "$OUT/syn.h5" >"$TMP/stdout" 2>"$TMP/stderr"; then
  ok "record --synthetic 0.8b exits 0"
  grep -q "memory: peak resident" "$TMP/stdout" && ok "record reports its peak memory" \
    || bad "record --synthetic: no peak memory line: $(cat "$TMP/stdout")"
  "$QC" inspect "$OUT/syn.h5" >"$TMP/inspect" 2>&1
  grep -q "model_path: *synthetic:0.8b:bf16:seed1" "$TMP/inspect" &&
    grep -q "24 layers (18 linear, 6 full" "$TMP/inspect" &&
    grep -q "vocab 248320" "$TMP/inspect" \
    && ok "the synthetic golden records the 0.8b config" || bad "synthetic inspect: $(head -20 "$TMP/inspect")"
else
  bad "record --synthetic 0.8b exits $?: $(cat "$TMP/stderr")"
fi
"$QC" record --synthetic 7b --tokens 1 --out "$OUT/bad.h5" >/dev/null 2>"$TMP/stderr"
rc=$?
[ "$rc" = 2 ] && grep -q -- "--synthetic" "$TMP/stderr" && [ ! -e "$OUT/bad.h5" ] \
  && ok "record --synthetic 7b: exit 2 naming --synthetic" || bad "record --synthetic 7b: exit $rc $(cat "$TMP/stderr")"
"$QC" record --synthetic 0.8b --model "$MODEL" --tokens 1 --out "$OUT/bad.h5" >/dev/null 2>"$TMP/stderr"
rc=$?
[ "$rc" = 2 ] && [ ! -e "$OUT/bad.h5" ] && ok "--model with --synthetic: exit 2" || bad "--model with --synthetic: exit $rc"
"$QC" record --synthetic 0.8b --dtype q4 --tokens 1 --out "$OUT/bad.h5" >/dev/null 2>"$TMP/stderr"
rc=$?
[ "$rc" = 2 ] && grep -q -- "--dtype" "$TMP/stderr" && ok "--dtype q4: exit 2" || bad "--dtype q4: exit $rc"

# ---- record --like GOLDEN: every case on its inputs, then diff pairs every case ------------
# On every fixture and both built-in backends: exit 0, the same case names as the golden, the
# golden's inputs (tokens, history, decode/tokens) copied, and `diff GOLDEN ACTUAL` exit 0.
LIKE="$TMP/like"
mkdir -p "$LIKE"
n_like=0
for g in "$SRC"/fixtures/*/golden.h5; do
  [ -f "$g" ] || continue
  fx="$(basename "$(dirname "$g")")"
  for be in reference optimized; do
    a="$LIKE/$fx.$be.h5"
    if ! "$QC" record --like "$g" --backend "$be" --out "$a" >"$TMP/stdout" 2>"$TMP/stderr"; then
      bad "record --like $fx --backend $be: exit $?: $(cat "$TMP/stderr")"
      continue
    fi
    n_like=$((n_like + 1))
    if command -v /usr/bin/python3 >/dev/null && /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
      if /usr/bin/python3 - "$g" "$a" >"$TMP/py" 2>&1 <<'PY'
import sys, h5py, numpy as np
g, a = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert sorted(g["cases"]) == sorted(a["cases"]), (sorted(g["cases"]), sorted(a["cases"]))
for n in g["cases"]:
    G, A = g["cases"][n], a["cases"][n]
    assert int(G.attrs["start_pos"]) == int(A.attrs["start_pos"]), n
    for d in ("tokens", "history_tokens", "decode/tokens"):
        assert (d in G) == (d in A), (n, d)
        if d in G:
            assert np.array_equal(G[d][()], A[d][()]), (n, d)
    for d in ("prefill/logits", "decode/logits"):
        if d in G:
            assert A[d].shape == G[d].shape, (n, d)
print(len(g["cases"]))
PY
      then ok "record --like $fx ($be): $(cat "$TMP/py") cases, the golden's inputs"
      else bad "record --like $fx ($be): structure differs: $(tail -3 "$TMP/py")"
      fi
    fi
    "$QC" diff "$g" "$a" --quiet >"$TMP/diff" 2>&1
    rc=$?
    [ "$rc" = 0 ] && grep -q " 0 failed" "$TMP/diff" \
      && ok "diff $fx golden vs record --like ($be): exit 0 ($(tail -1 "$TMP/diff"))" \
      || bad "diff $fx golden vs record --like ($be): exit $rc: $(tail -5 "$TMP/diff")"
  done
done
[ "$n_like" -ge 2 ] && ok "record --like ran on $n_like fixture x backend pairs" || bad "record --like ran $n_like times"
G1="$(ls "$SRC"/fixtures/*/golden.h5 | head -1)"
if [ -n "$G1" ]; then
  # the static strategy, and an ACTUAL without hidden states (those checks SKIPPED)
  "$QC" record --like "$G1" --static --out "$LIKE/static.h5" >/dev/null 2>"$TMP/stderr" &&
    "$QC" diff "$G1" "$LIKE/static.h5" --quiet >/dev/null 2>&1 \
    && ok "record --like --static: diff exit 0" || bad "record --like --static: $(cat "$TMP/stderr")"
  "$QC" record --like "$G1" --no-hidden --out "$LIKE/nohidden.h5" >/dev/null 2>"$TMP/stderr" &&
    "$QC" diff "$G1" "$LIKE/nohidden.h5" --quiet >"$TMP/diff" 2>&1 \
    && ok "record --like --no-hidden: diff exit 0 ($(tail -1 "$TMP/diff"))" \
    || bad "record --like --no-hidden: $(cat "$TMP/stderr") $(tail -3 "$TMP/diff")"
  # bad input: exit 2 naming the flag / file, nothing written, the golden untouched
  sum_g="$(cksum <"$G1")"
  for args in "--tokens 1,2" "--case x" "--decode 2" "--max-seq-len 4" "--synthetic 0.8b"; do
    # shellcheck disable=SC2086
    "$QC" record --like "$G1" $args --out "$LIKE/bad.h5" >/dev/null 2>"$TMP/stderr"
    rc=$?
    flag="${args%% *}"
    [ "$rc" = 2 ] && grep -q -- "$flag: not with --like" "$TMP/stderr" && [ ! -e "$LIKE/bad.h5" ] \
      && ok "record --like with $flag: exit 2 naming it" || bad "record --like with $flag: exit $rc $(cat "$TMP/stderr")"
  done
  "$QC" record --like "$G1" --out "$G1" --force >/dev/null 2>"$TMP/stderr"
  rc=$?
  [ "$rc" = 2 ] && grep -q "refusing to overwrite" "$TMP/stderr" && [ "$(cksum <"$G1")" = "$sum_g" ] \
    && ok "record --like onto its own golden (even --force): refused, exit 2" \
    || bad "record --like onto its golden: exit $rc $(cat "$TMP/stderr")"
  "$QC" record --like "$G1" --out "$(dirname "$G1")/model/config.json" --force >/dev/null 2>"$TMP/stderr"
  rc=$?
  [ "$rc" = 2 ] && grep -q "refusing to overwrite" "$TMP/stderr" \
    && ok "record --like onto a model file: refused, exit 2" || bad "record --like onto config.json: exit $rc"
  "$QC" record --like "$(dirname "$G1")" --out "$LIKE/bad.h5" >/dev/null 2>"$TMP/stderr"
  rc=$?
  [ "$rc" = 2 ] && grep -q "is a directory" "$TMP/stderr" && [ ! -e "$LIKE/bad.h5" ] \
    && ok "record --like DIR: exit 2" || bad "record --like DIR: exit $rc $(cat "$TMP/stderr")"
  head -c 3000 "$G1" >"$LIKE/trunc.h5"
  "$QC" record --like "$LIKE/trunc.h5" --out "$LIKE/bad.h5" >/dev/null 2>"$TMP/stderr"
  rc=$?
  [ "$rc" = 2 ] && grep -qF "$LIKE/trunc.h5" "$TMP/stderr" && [ ! -e "$LIKE/bad.h5" ] \
    && ok "record --like on a truncated golden: exit 2 naming it" || bad "record --like truncated: exit $rc $(cat "$TMP/stderr")"
  cp "$G1" "$LIKE/nomodel.h5"   # its model_path "model" does not resolve beside the copy
  "$QC" record --like "$LIKE/nomodel.h5" --out "$LIKE/bad.h5" >/dev/null 2>"$TMP/stderr"
  rc=$?
  [ "$rc" = 2 ] && grep -q "model_path" "$TMP/stderr" && [ ! -e "$LIKE/bad.h5" ] \
    && ok "record --like, golden's model missing: exit 2 naming model_path" || bad "record --like no model: exit $rc $(cat "$TMP/stderr")"
  "$QC" record --like "$LIKE/nomodel.h5" --model "$(dirname "$G1")/model" --out "$LIKE/m.h5" >/dev/null 2>"$TMP/stderr" &&
    "$QC" diff "$G1" "$LIKE/m.h5" --quiet >/dev/null 2>&1 \
    && ok "record --like --model DIR: the model given, diff exit 0" || bad "record --like --model: $(cat "$TMP/stderr")"
  # runtimes under test through the registry (tests/cli/fault_plugin.c): a wrong one records
  # fine and diff FAILs it (exit 1, its missing hidden / states SKIPPED); one whose forward
  # errors is a FAIL of record itself (exit 1), nothing written
  CC="${CC:-cc}"
  DIMS="$(/usr/bin/python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c=c.get('text_config',c); print('vocab=%d,hidden=%d,layers=%d' % (c['vocab_size'], c['hidden_size'], c['num_hidden_layers']))" "$(dirname "$G1")/model/config.json" 2>/dev/null)"
  if command -v "$CC" >/dev/null && [ -n "$DIMS" ] &&
     "$CC" -shared -fPIC -O1 -I"$SRC/include" -o "$TMP/fp_wrong.so" "$SRC/tests/cli/fault_plugin.c" -lm &&
     "$CC" -shared -fPIC -O1 -I"$SRC/include" -DFAULT_FORWARD -o "$TMP/fp_fwd.so" "$SRC/tests/cli/fault_plugin.c" -lm; then
    "$QC" record --like "$G1" --backend "plugin:$TMP/fp_wrong.so,$DIMS" --out "$LIKE/wrong.h5" >"$TMP/stdout" 2>"$TMP/stderr"
    rc=$?
    [ "$rc" = 0 ] && grep -q "no hidden states, no states" "$TMP/stdout" \
      && ok "record --like --backend plugin: (a wrong runtime, no capabilities): exit 0, says what it left out" \
      || bad "record --like plugin: exit $rc $(cat "$TMP/stderr")"
    "$QC" diff "$G1" "$LIKE/wrong.h5" --quiet >"$TMP/diff" 2>&1
    rc=$?
    [ "$rc" = 1 ] && grep -q "skipped" "$TMP/diff" && ok "diff of the wrong runtime's ACTUAL: exit 1 ($(tail -1 "$TMP/diff"))" \
      || bad "diff of a wrong runtime: exit $rc $(tail -3 "$TMP/diff")"
    "$QC" record --like "$G1" --backend "plugin:$TMP/fp_fwd.so,$DIMS" --out "$LIKE/fwd.h5" >/dev/null 2>"$TMP/stderr"
    rc=$?
    [ "$rc" = 1 ] && grep -q "FAIL: .*case .*forward" "$TMP/stderr" && [ ! -e "$LIKE/fwd.h5" ] \
      && ok "record --like, the runtime's forward fails: exit 1 naming the case, nothing written" \
      || bad "record --like failing forward: exit $rc $(cat "$TMP/stderr")"
  else
    echo "# no C compiler / config: the plugin cases of record --like are not run"
  fi
  ls "$LIKE" | grep -q '\.tmp\.' && bad "record --like left a temp file" || ok "record --like left no temp file"
fi

# ---- inspect on bad files ---------------------------------------------------------------
echo "not hdf5" >"$TMP/text.h5"
"$QC" inspect "$TMP/text.h5" >/dev/null 2>"$TMP/stderr"
rc=$?
[ "$rc" = 2 ] && grep -qF "qwen-conform inspect: $TMP/text.h5: not an HDF5 file" "$TMP/stderr" \
  && ok "inspect on a non-HDF5 file: exit 2 naming the file" \
  || bad "inspect on a non-HDF5 file: exit $rc, $(cat "$TMP/stderr")"
"$QC" inspect "$TMP/missing.h5" >/dev/null 2>"$TMP/stderr"
rc=$?
[ "$rc" = 2 ] && grep -qF "$TMP/missing.h5" "$TMP/stderr" \
  && ok "inspect on a missing file: exit 2" || bad "inspect on a missing file: exit $rc"
"$QC" inspect >/dev/null 2>&1
rc=$?
[ "$rc" = 2 ] && ok "inspect without a file: exit 2" || bad "inspect without a file: exit $rc"

echo "# $pass passed, $fail failed"
[ "$fail" = 0 ]
