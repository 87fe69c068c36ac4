#!/usr/bin/env bash
# test_record_stream.sh <qwen-conform> <source-dir> — `record --stream` (issue #27 item 1): a
# golden recorded layer-major, one layer's weights in memory at a time, is the same file, byte
# for byte, as the in-memory record:
#   * one case (--tokens, with --history; greedy and teacher-forced decode) on the fixtures of
#     every storage kind (F32 tied, BF16 nested, F16 sharded, Q8_0 pairs, MoE per-expert and
#     fused, legacy packed), both built-in backends, static / dynamic / no-KV prefill;
#   * record --like: every case of a golden in one layer-major run;
#   * memory: a checkpoint with the real 0.8B dimensions (3 layers, 0.6 GB) recorded with
#     --max-memory 300M: streaming is chosen by itself, the peak resident set stays under the
#     budget and under the checkpoint's size, the output is the in-memory record's bytes; a budget
#     too small even for one layer is refused (exit 2) with the number needed;
#   * --resume: a run killed by SIGKILL after a checkpoint continues from it to the same bytes;
#     a checkpoint of other inputs or a damaged one is refused (exit 2);
#   * the legacy packed DeltaNet layout (split a layer at a time);
#   * refused: --stream with a runtime that runs its own forward pass.
set -u
QC="$1"
SRC="$2"
PY=/usr/bin/python3
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT INT TERM
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }
F="$SRC/fixtures"
TOK=3,1,4,1,5,9,2,6,5,3,5

# same NAME ARGS...: record ARGS in memory and with --stream; the two files must be identical
same() {
  local name="$1"; shift
  if ! "$QC" record "$@" --out "$TMP/mem.h5" > "$TMP/mem.out" 2>&1; then
    bad "$name: in-memory record failed: $(tail -1 "$TMP/mem.out")"; return
  fi
  if ! "$QC" record "$@" --stream --out "$TMP/str.h5" > "$TMP/str.out" 2>&1; then
    bad "$name: streamed record failed: $(tail -1 "$TMP/str.out")"; rm -f "$TMP/mem.h5"; return
  fi
  if cmp -s "$TMP/mem.h5" "$TMP/str.h5"; then ok "$name: identical"
  else bad "$name: the streamed golden differs from the in-memory one"; fi
  rm -f "$TMP/mem.h5" "$TMP/str.h5"
}

n_same=0
for fx in tiny-f32-tied-flat tiny-bf16-gva-nested tiny-f16-sharded tiny-q8_0 tiny-moe-bf16-flat \
          tiny-moe-f32-nested; do
  for be in reference optimized; do
    for mode in "--static" "--dynamic --max-seq-len 4" "--no-kv-cache --max-seq-len 5"; do
      same "$fx $be $mode greedy+history" --model "$F/$fx/model" --tokens $TOK --history 7,7,8 \
        --decode 3 --backend $be $mode
      n_same=$((n_same + 1))
    done
    same "$fx $be teacher-forced" --model "$F/$fx/model" --tokens $TOK --decode-tokens 5,6,7 \
      --backend $be --dynamic --max-seq-len 4
  done
done
grep -q "layer-major: 4 passes over the weights" "$TMP/str.out" 2>/dev/null ||
  "$QC" record --model "$F/tiny-f32-tied-flat/model" --tokens $TOK --decode 3 --stream \
    --out "$TMP/p.h5" | grep -q "layer-major: 4 passes over the weights" &&
  ok "greedy decode of 3 steps: 4 passes over the weights" ||
  bad "greedy decode of 3 steps should take 4 passes over the weights"
rm -f "$TMP/p.h5"

# record --like: all cases of a golden in one run
for fx in tiny-f32-tied-flat tiny-moe-f32-nested tiny-q8_0; do
  for mode in "" --dynamic --no-kv-cache; do
    "$QC" record --like "$F/$fx/golden.h5" $mode --out "$TMP/a.h5" > /dev/null 2>&1 &&
    "$QC" record --like "$F/$fx/golden.h5" $mode --stream --out "$TMP/b.h5" > "$TMP/b.out" 2>&1 &&
    cmp -s "$TMP/a.h5" "$TMP/b.h5" && ok "--like $fx ${mode:---static}: identical" ||
      bad "--like $fx ${mode:---static}: streamed differs or failed: $(tail -1 "$TMP/b.out")"
    rm -f "$TMP/a.h5" "$TMP/b.h5"
  done
done

# memory: a checkpoint bigger than the budget
M="$TMP/m08"
if "$PY" "$SRC/golden/qcgolden" write-model --preset 0.8b --layers 3 --out "$M" > "$TMP/w.out" 2>&1; then
  ck=$(du -sb "$M" | cut -f1)
  "$QC" record --model "$M" --tokens $TOK --decode 2 --out "$TMP/mem.h5" > /dev/null 2>&1 ||
    bad "0.8b-dims: in-memory record failed"
  /usr/bin/time -f "%M" -o "$TMP/rss" "$QC" record --model "$M" --tokens $TOK --decode 2 \
    --max-memory 300M --out "$TMP/str.h5" > "$TMP/s.out" 2> "$TMP/s.err"
  rc=$?
  rss=$(( $(tail -1 "$TMP/rss") * 1024 ))
  [ $rc -eq 0 ] && grep -q "recording layer-major" "$TMP/s.err" &&
    ok "0.8b-dims (${ck} bytes) under --max-memory 300M: streaming chosen by itself" ||
    bad "0.8b-dims under --max-memory 300M: rc $rc, $(cat "$TMP/s.err")"
  [ "$rss" -gt 0 ] && [ "$rss" -lt $((300 << 20)) ] && [ "$rss" -lt "$ck" ] &&
    ok "peak RSS $rss bytes < budget $((300 << 20)) and < the checkpoint" ||
    bad "peak RSS $rss bytes: not under the budget / the checkpoint ($ck)"
  cmp -s "$TMP/mem.h5" "$TMP/str.h5" && ok "0.8b-dims: streamed = in-memory, byte for byte" ||
    bad "0.8b-dims: streamed golden differs"
  rm -f "$TMP/mem.h5" "$TMP/str.h5"
  # --resume: killed (SIGKILL) after its first checkpoint, continued: the same bytes
  R="$TMP/res.h5"
  "$QC" record --model "$M" --tokens $TOK --decode 12 --backend optimized --out "$TMP/mem12.h5" \
    > /dev/null 2>&1
  "$QC" record --model "$M" --tokens $TOK --decode 12 --backend optimized --resume --out "$R" \
    > /dev/null 2>&1 &
  rpid=$!
  for _ in $(seq 400); do [ -f "$R.resume/checkpoint.bin" ] && break; sleep 0.02; done
  kill -9 $rpid 2>/dev/null; wait $rpid 2>/dev/null
  if [ -f "$R.resume/checkpoint.bin" ] && [ ! -e "$R" ]; then
    ok "--resume: killed with a checkpoint in $(basename "$R").resume and no output"
    "$QC" record --model "$M" --tokens 9,9,9 --decode 12 --backend optimized --resume \
      --out "$R" > /dev/null 2> "$TMP/other.err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "made for other inputs" "$TMP/other.err" && [ ! -e "$R" ] &&
      ok "--resume with other inputs: exit 2, the checkpoint refused" ||
      bad "--resume with other inputs: rc $rc, $(cat "$TMP/other.err")"
    "$QC" record --model "$M" --tokens $TOK --decode 12 --backend optimized --resume --out "$R" \
      > /dev/null 2> "$TMP/res.err"
    rc=$?
    [ $rc -eq 0 ] && grep -q "continuing pass" "$TMP/res.err" && cmp -s "$TMP/mem12.h5" "$R" &&
      [ ! -e "$R.resume" ] && ok "--resume after SIGKILL: $(grep -o 'continuing pass [0-9]* at layer [0-9]*' "$TMP/res.err"), identical output, checkpoint removed" ||
      bad "--resume after SIGKILL: rc $rc, $(cat "$TMP/res.err")"
    mkdir -p "$R.resume" && printf 'QCRESUME1\nshort' > "$R.resume/checkpoint.bin" && rm -f "$R"
    "$QC" record --model "$M" --tokens $TOK --decode 12 --backend optimized --resume --out "$R" \
      > /dev/null 2> "$TMP/dmg.err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "checkpoint" "$TMP/dmg.err" && [ ! -e "$R" ] &&
      ok "a damaged checkpoint: exit 2 naming it" || bad "damaged checkpoint: rc $rc, $(cat "$TMP/dmg.err")"
  else
    bad "--resume: no checkpoint before the kill (or the run had finished)"
  fi
  "$QC" record --model "$M" --tokens $TOK --stream --max-memory 20M --out "$TMP/x.h5" \
    > /dev/null 2> "$TMP/x.err"
  rc=$?
  [ $rc -eq 2 ] && grep -q "memory (layer-major)" "$TMP/x.err" && grep -q "GiB" "$TMP/x.err" &&
    [ ! -e "$TMP/x.h5" ] && ok "a budget below one layer: exit 2 with the number needed" ||
    bad "a budget below one layer: rc $rc, $(cat "$TMP/x.err")"
else
  bad "write-model --preset 0.8b --layers 3: $(tail -1 "$TMP/w.out")"
fi

# the legacy packed layout: split a layer at a time
same "tiny-legacy-packed optimized dynamic" --model "$F/tiny-legacy-packed/model" --tokens $TOK \
  --history 7,7,8 --decode 3 --backend optimized --dynamic --max-seq-len 4

# refusals
"$QC" record --model "$F/tiny-f32-tied-flat/model" --tokens $TOK --stream \
  --backend "exec:$PY $SRC/adapters/golden/qc_golden_adapter.py" --out "$TMP/e.h5" > /dev/null 2> "$TMP/e.err"
rc=$?
[ $rc -eq 2 ] && grep -q -- "--stream" "$TMP/e.err" && ok "--stream with exec: exit 2" ||
  bad "--stream with exec: rc $rc, $(cat "$TMP/e.err")"

echo "$n_same greedy pairs and the rest; $fails failed"
[ $fails -eq 0 ]
