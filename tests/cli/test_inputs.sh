#!/usr/bin/env bash
# test_inputs.sh — inputs that used to be accepted (or hung) and must be refused, through the
# real CLI:
#   bash tests/cli/test_inputs.sh <path-to-qwen-conform> <source-dir>
# Classes: (1) a FIFO or another non-regular file as a small input (--tokens-file,
# --history-file, --profile, --policy, a model's config.json or index): refused at once (run
# under `timeout 10`; exit 124 = it blocked in open); (2) a config.json of another model
# family (Llama), or a Qwen3.5 / Qwen3-Next MoE one; (3) token lists with empty items, signs,
# hex, overflow, in --tokens / --history / --decode-tokens and in a tokens file (with the
# line); (4) an unknown key in a profile (with "did you mean").
# Each case: exit code exactly 2, exactly one error line "qwen-conform[ sub]: ..." on stderr
# holding the given needles (the file or flag and the field / item), and no output left
# behind (the --out target, any temp file). A few positive controls prove the cases fail for
# the reason tested, not because the copied inputs are broken.
set -u
QC="${1:?usage: test_inputs.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: test_inputs.sh <qwen-conform> <source-dir>}"

fail=0
pass=0
skip=0
ok()   { pass=$((pass + 1)); echo "ok   - $*"; }
bad()  { fail=$((fail + 1)); echo "FAIL - $*"; }
skp()  { skip=$((skip + 1)); echo "skip - $*"; }

PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

# a single-file fixture (model + golden) and a sharded one
FIX=""
SHARDED=""
for d in "$SRC"/fixtures/*/; do
  d="${d%/}"
  [ -f "$d/golden.h5" ] && [ -f "$d/model/config.json" ] || continue
  if [ -f "$d/model/model.safetensors" ] && [ -z "$FIX" ]; then FIX="$d"; fi
  if [ -f "$d/model/model.safetensors.index.json" ] && [ -z "$SHARDED" ]; then SHARDED="$d"; fi
done
if [ -z "$FIX" ]; then
  echo "SKIP: no fixture with model/model.safetensors and golden.h5 under $SRC/fixtures"
  exit 0
fi
echo "# fixture: $FIX${SHARDED:+, sharded: $SHARDED}"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_inputs.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
IN="$TMP/in"     # generated inputs
OUTS="$TMP/outs" # one empty output directory per case
mkdir -p "$IN" "$OUTS"

# model_copy NAME [SOURCE_FIXTURE] -> prints the new model dir
model_copy() {
  local dst="$IN/$1"
  cp -r "${2:-$FIX}/model" "$dst"
  echo "$dst"
}

# json_edit FILE PYTHON-BODY: edit a JSON file (`j` is the parsed document, `t` its text part).
json_edit() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
path, body = sys.argv[1], sys.argv[2]
j = json.load(open(path))
t = j["text_config"] if isinstance(j.get("text_config"), dict) else j
env = dict(j=j, t=t)
exec(body, env)
json.dump(env["j"], open(path, "w"), indent=1)
PYEOF
}

# expect2 NAME KIND NEEDLE1 NEEDLE2 -- ARGS...
#   KIND record: appends --out OUTDIR/r.h5;  check: appends --json OUTDIR/r.json (kept only
#   when it is complete and records the error);  checkrow: as check, for an error check
#   reports as an ERROR row of the golden (a golden's model that does not load: the message
#   is on that row, stdout, and the run goes on to the next golden);  none: nothing.
#   Runs under `timeout 10`. Asserts exit 2, one error line holding both needles, no output.
expect2() {
  local name="$1" kind="$2" n1="$3" n2="$4"
  shift 5
  local od="$OUTS/$name"
  mkdir -p "$od"
  local extra=()
  case "$kind" in
    record) extra=(--out "$od/r.h5") ;;
    check | checkrow) extra=(--json "$od/r.json") ;;
  esac
  local t0=$SECONDS
  timeout 10 "$QC" "$@" "${extra[@]}" >"$TMP/$name.stdout" 2>"$TMP/$name.stderr" </dev/null
  local rc=$? dt=$((SECONDS - t0))
  local lines msg
  lines=$(grep -cE '^qwen-conform( [a-z]+)?: ' "$TMP/$name.stderr")
  msg=$(grep -E '^qwen-conform( [a-z]+)?: ' "$TMP/$name.stderr" | head -c 700)
  if [ "$kind" = checkrow ]; then
    lines=$(grep -cE '^ERROR ' "$TMP/$name.stdout")
    msg=$(grep -E -A3 '^ERROR ' "$TMP/$name.stdout" | tr '\n' ' ' | head -c 700)
  fi
  [ -n "$msg" ] || msg=$(head -c 700 "$TMP/$name.stderr")
  if [ $rc -eq 124 ]; then
    bad "$name: hung (killed by timeout 10 after ${dt}s)"
    return
  fi
  if [ $rc -ne 2 ]; then
    bad "$name: exit $rc, want 2 (stderr: $msg)"
    return
  fi
  if [ $dt -gt 5 ]; then
    bad "$name: took ${dt}s to refuse (want a few seconds at most)"
    return
  fi
  if [ "$lines" -ne 1 ]; then
    bad "$name: $lines error messages, want exactly one: $(head -c 700 "$TMP/$name.stderr")"
    return
  fi
  if [ -n "$n1" ] && ! printf '%s' "$msg" | grep -qF -- "$n1"; then
    bad "$name: message lacks '$n1': $msg"
    return
  fi
  if [ -n "$n2" ] && ! printf '%s' "$msg" | grep -qF -- "$n2"; then
    bad "$name: message lacks '$n2': $msg"
    return
  fi
  if [ "$kind" = check ] || [ "$kind" = checkrow ]; then
    local other
    other=$(ls -A "$od" | grep -vx 'r\.json')
    if [ -n "$other" ]; then
      bad "$name: temp / partial output left behind: $other"
      return
    fi
    if [ -e "$od/r.json" ] && ! "$PY" -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["summary"]["errors"] >= 1' "$od/r.json" 2>/dev/null; then
      bad "$name: the JSON report left behind is incomplete or does not record the error"
      return
    fi
  elif [ -n "$(ls -A "$od")" ]; then
    bad "$name: output left behind: $(ls -A "$od" | tr '\n' ' ')"
    return
  fi
  ok "$name: exit 2 in ${dt}s, one message ($msg)"
}

# expect0 NAME -- ARGS... : a positive control (record must succeed and write its output)
expect0() {
  local name="$1"
  shift 2
  local od="$OUTS/$name"
  mkdir -p "$od"
  if timeout 60 "$QC" "$@" --out "$od/r.h5" >"$TMP/$name.stdout" 2>"$TMP/$name.stderr" </dev/null &&
     [ -s "$od/r.h5" ]; then
    ok "$name: accepted"
  else
    bad "$name: refused: $(head -c 600 "$TMP/$name.stderr")"
  fi
}

TOK="1,2,3,4,5"
M=$(model_copy good)

# ---- 1. FIFOs and other non-regular files as small inputs ------------------------------------
mkfifo "$IN/fifo.txt" "$IN/fifo.json"
expect2 fifo_tokens_file record "$IN/fifo.txt: not a regular file (a FIFO)" "" -- \
  record --model "$M" --tokens-file "$IN/fifo.txt"
expect2 fifo_history_file record "$IN/fifo.txt: not a regular file (a FIFO)" "" -- \
  record --model "$M" --tokens $TOK --history-file "$IN/fifo.txt"
expect2 fifo_profile record "$IN/fifo.json: not a regular file (a FIFO)" "" -- \
  record --model "$M" --tokens $TOK --profile "$IN/fifo.json"
expect2 fifo_policy check "$IN/fifo.json: not a regular file (a FIFO)" "" -- \
  --golden "$FIX/golden.h5" --policy "$IN/fifo.json" --backend reference --mode static
MF=$(model_copy fifo_config); rm "$MF/config.json"; mkfifo "$MF/config.json"
expect2 fifo_config_record record "$MF/config.json: not a regular file (a FIFO)" "" -- \
  record --model "$MF" --tokens $TOK
# check loads the golden's model through the loader (not qc_config_load): same refusal
mkdir -p "$IN/g_fifo"
cp "$FIX/golden.h5" "$IN/g_fifo/golden.h5"
ln -s "$MF" "$IN/g_fifo/model"
expect2 fifo_config_check checkrow "$IN/g_fifo/model/config.json: not a regular file (a FIFO)" "" -- \
  --golden "$IN/g_fifo/golden.h5" --backend reference --mode static
if [ -n "$SHARDED" ]; then
  MS=$(model_copy fifo_index "$SHARDED")
  rm "$MS/model.safetensors.index.json"; mkfifo "$MS/model.safetensors.index.json"
  expect2 fifo_index record "model.safetensors.index.json: not a regular file (a FIFO)" "" -- \
    record --model "$MS" --tokens $TOK
else
  skp "fifo_index: no sharded fixture"
fi
expect2 dir_tokens_file record "$IN: not a regular file (a directory)" "" -- \
  record --model "$M" --tokens-file "$IN"
expect2 chardev_tokens_file record "/dev/null: not a regular file (a character device)" "" -- \
  record --model "$M" --tokens-file /dev/null
expect2 chardev_profile record "/dev/zero: not a regular file (a character device)" "" -- \
  record --model "$M" --tokens $TOK --profile /dev/zero

# ---- 2. config.json of another model family ----------------------------------------------------
expect0 config_fixture_control -- record --model "$M" --tokens $TOK
MC=$(model_copy cfg_llama)
json_edit "$MC/config.json" 'j["model_type"] = "llama"; j["architectures"] = ["LlamaForCausalLM"]'
expect2 config_llama record "$MC/config.json: model_type 'llama' is not a Qwen3.5 text model (accepted: " \
  "qwen3_5_text" -- record --model "$MC" --tokens $TOK
MC=$(model_copy cfg_llama_arch)
json_edit "$MC/config.json" 'j["architectures"] = ["LlamaForCausalLM"]'
expect2 config_llama_architectures record "$MC/config.json: architectures[0] 'LlamaForCausalLM' is not a Qwen3.5 text model" \
  "Qwen3_5ForCausalLM" -- record --model "$MC" --tokens $TOK
MC=$(model_copy cfg_moe)
# a dense checkpoint relabelled Qwen3.5-MoE: the MoE fields it lacks are named
json_edit "$MC/config.json" 'n = "text_config" in j; j["model_type"] = "qwen3_5_moe" if n else "qwen3_5_moe_text"; j["architectures"] = ["Qwen3_5MoeForConditionalGeneration" if n else "Qwen3_5MoeForCausalLM"]; t["model_type"] = "qwen3_5_moe_text"'
expect2 config_qwen35_moe record "$MC/config.json: " "num_experts: missing (required by model_type qwen3_5_moe" -- \
  record --model "$MC" --tokens $TOK
MC=$(model_copy cfg_next_moe)
json_edit "$MC/config.json" 'j["model_type"] = "qwen3_next"; j["architectures"] = ["Qwen3NextForCausalLM"]; j.pop("text_config", None); j.update({k: v for k, v in t.items()}) if t is not j else None; j["num_experts"] = 512'
expect2 config_qwen3_next_moe record "$MC/config.json: num_experts: 512" "mixture-of-experts layers" -- \
  record --model "$MC" --tokens $TOK
# check: a golden whose model directory has the Llama config
mkdir -p "$IN/g_llama"
cp "$FIX/golden.h5" "$IN/g_llama/golden.h5"
ln -s "$IN/cfg_llama" "$IN/g_llama/model"
expect2 config_llama_check checkrow "$IN/g_llama/model/config.json: model_type 'llama' is not a Qwen3.5 text model" "" -- \
  --golden "$IN/g_llama/golden.h5" --backend reference --mode static
# the documented decision: a config with neither model_type nor architectures is read as a
# Qwen3.5 text config (HF always writes model_type; hand-written configs may not)
MC=$(model_copy cfg_bare)
json_edit "$MC/config.json" 'j.pop("model_type", None); j.pop("architectures", None); t.pop("model_type", None); t.pop("architectures", None)'
expect0 config_neither_field_accepted -- record --model "$MC" --tokens $TOK

# ---- 3. token lists ---------------------------------------------------------------------------
expect2 tok_empty_item record "--tokens: item 2 is empty" "" -- record --model "$M" --tokens 1,,3
expect2 tok_blank_item record "--tokens: item 2 is empty" "whitespace" -- record --model "$M" --tokens "1, ,3"
expect2 tok_leading_comma record "--tokens: item 1 is empty" "leading comma" -- record --model "$M" --tokens ,1,2
expect2 tok_trailing_comma record "--tokens: item 3 is empty" "trailing comma" -- record --model "$M" --tokens 1,2,
expect2 tok_plus record "--tokens: item 1: '+5'" "sign" -- record --model "$M" --tokens +5
expect2 tok_minus_zero record "--tokens: item 2: '-0'" "sign" -- record --model "$M" --tokens 1,-0
expect2 tok_hex record "--tokens: item 2: '0x10'" "hexadecimal" -- record --model "$M" --tokens 1,0x10
expect2 tok_overflow record "--tokens: item 1: token id 99999999999 outside [0, 2147483647]" "" -- \
  record --model "$M" --tokens 99999999999
expect2 history_empty_item record "--history: item 2 is empty" "" -- \
  record --model "$M" --history 1,,2 --tokens $TOK
expect2 decode_tokens_trailing record "--decode-tokens: item 2 is empty" "" -- \
  record --model "$M" --tokens $TOK --decode-tokens 1,
printf '1,2\n3,,4\n' >"$IN/tok_empty.txt"
expect2 tokfile_empty_item record "$IN/tok_empty.txt: item 4 is empty" "(line 2)" -- \
  record --model "$M" --tokens-file "$IN/tok_empty.txt"
printf '1\n2\n3\n+4\n' >"$IN/tok_sign.txt"
expect2 tokfile_sign record "$IN/tok_sign.txt: item 4: '+4'" "(line 4)" -- \
  record --model "$M" --tokens-file "$IN/tok_sign.txt"
printf '1 2 3\n4,\n' >"$IN/tok_trail.txt"
expect2 tokfile_trailing_comma record "$IN/tok_trail.txt: item 5 is empty" "(line 2)" -- \
  record --model "$M" --tokens-file "$IN/tok_trail.txt"
printf '1\n2\n0x3\n' >"$IN/tok_hex.txt"
expect2 tokfile_hex record "$IN/tok_hex.txt: item 3: '0x3'" "(line 3)" -- \
  record --model "$M" --tokens-file "$IN/tok_hex.txt"
printf '1\n2\n\n3\r\n4, 5,\n6\n' >"$IN/tok_good.txt"
expect0 tokfile_lines_control -- record --model "$M" --tokens-file "$IN/tok_good.txt"

# ---- 4. profiles ------------------------------------------------------------------------------
printf '{"enable_dynamic_shap": true, "max_seq_len": 4}' >"$IN/prof_typo.json"
expect2 profile_typo record "$IN/prof_typo.json: unknown key 'enable_dynamic_shap'" \
  "did you mean 'enable_dynamic_shape'?" -- record --model "$M" --tokens $TOK --profile "$IN/prof_typo.json"
printf '{"dynamic": true}' >"$IN/prof_unknown.json"
expect2 profile_unknown_key record "$IN/prof_unknown.json: unknown key 'dynamic'" \
  "known keys: enable_dynamic_shape, use_kv_cache, max_seq_len, max_context_len" -- \
  record --model "$M" --tokens $TOK --profile "$IN/prof_unknown.json"
printf '{"max_seq_len": 4, "get_max_seq_len": 8}' >"$IN/prof_disagree.json"
expect2 profile_disagree record "$IN/prof_disagree.json: max_seq_len 4 and get_max_seq_len 8 disagree" "" -- \
  record --model "$M" --tokens $TOK --profile "$IN/prof_disagree.json"
printf '{"enable_dynamic_shape": true, "get_max_seq_len": 4, "get_max_context_len": 16}' >"$IN/prof_good.json"
expect0 profile_executorch_names_control -- record --model "$M" --tokens $TOK --profile "$IN/prof_good.json"
if grep -q 'max_context_len 16' "$TMP/profile_executorch_names_control.stdout"; then
  ok "profile get_max_context_len is honoured (max_context_len 16)"
else
  bad "profile get_max_context_len not honoured: $(cat "$TMP/profile_executorch_names_control.stdout")"
fi

echo "# $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
