#!/usr/bin/env bash
# test_badinput.sh — every bad-input class through the CLI (issue 6):
#   bash tests/cli/test_badinput.sh <path-to-qwen-conform> <source-dir>
# Inputs are generated at test time under a temp dir from the committed fixtures (a model copy
# mutated with python3's struct/json; goldens mutated with h5py when /usr/bin/python3 has it).
# For each class: exit code exactly 2; exactly one error message on stderr (a line
# "qwen-conform[ sub]: ..."; check's progress lines are not messages), naming the file and
# the field / tensor / dataset; no output left behind: the --out target and any temp file are
# absent afterwards (check's --json / --junit reports may stay only when complete and recording
# the error). Then: every input is byte-identical afterwards
# (sha256sum), the fixtures too, and read-only (chmod a-w) copies of a golden and its model
# check exactly as the originals do.
set -u
QC="${1:?usage: test_badinput.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: test_badinput.sh <qwen-conform> <source-dir>}"

fail=0
pass=0
skip=0
ok()   { pass=$((pass + 1)); echo "ok   - $*"; }
bad()  { fail=$((fail + 1)); echo "FAIL - $*"; }
skp()  { skip=$((skip + 1)); echo "skip - $*"; }

PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
HAVE_H5PY=0
"$PY" -c "import h5py, numpy" 2>/dev/null && HAVE_H5PY=1

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

TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_badinput.XXXXXX")"
trap 'chmod -R u+w "$TMP" 2>/dev/null; rm -rf "$TMP"' EXIT
IN="$TMP/in"     # every generated input (checked unmodified at the end)
OUTS="$TMP/outs" # one empty output directory per case
mkdir -p "$IN" "$OUTS"
fixsum_before="$(cd "$SRC/fixtures" && find . -type f -print0 | sort -z | xargs -0 sha256sum)"

# ---- helpers --------------------------------------------------------------------------------

# model_copy NAME [SOURCE_FIXTURE] -> prints the new model dir
model_copy() {
  local dst="$IN/$1"
  cp -r "${2:-$FIX}/model" "$dst"
  echo "$dst"
}

# st_edit FILE PYTHON-BODY: rewrite a safetensors file. The body sees `hdr` (dict, insertion
# ordered, __metadata__ removed), `data` (bytes of the data region), `names` (tensor names in
# file order) and may set `raw_header` (str) or `extra` (bytes appended) to lie on purpose.
st_edit() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, struct, sys
path, body = sys.argv[1], sys.argv[2]
b = open(path, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hdr = json.loads(b[8:8 + n])
meta = hdr.pop("__metadata__", None)
data = b[8 + n:]
names = sorted(hdr, key=lambda k: hdr[k]["data_offsets"][0])
env = dict(hdr=hdr, data=data, names=names, raw_header=None, extra=b"", json=json, struct=struct)
exec(body, env)
hdr, data = env["hdr"], env["data"]
if env["raw_header"] is not None:
    h = env["raw_header"].encode()
else:
    if meta is not None:
        hdr = dict([("__metadata__", meta)] + list(hdr.items()))
    h = json.dumps(hdr, separators=(",", ":")).encode()
length = env.get("length", len(h))
open(path, "wb").write(struct.pack("<Q", length) + h + data + env["extra"])
PYEOF
}

# repack FILE PYTHON-BODY: rebuild a safetensors file from a list `ts` of [name, dtype, shape,
# bytes] (file order) after the body edits it; offsets are recomputed (a consistent file).
repack() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, struct, sys
path, body = sys.argv[1], sys.argv[2]
b = open(path, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hdr = json.loads(b[8:8 + n])
hdr.pop("__metadata__", None)
data = b[8 + n:]
ts = [[k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]]
      for k, v in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0])]
env = dict(ts=ts)
exec(body, env)
out, off, blob = {}, 0, b""
for name, dt, shape, raw in env["ts"]:
    out[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
    off += len(raw)
    blob += raw
h = json.dumps(out, separators=(",", ":")).encode()
open(path, "wb").write(struct.pack("<Q", len(h)) + h + blob)
PYEOF
}

# json_edit FILE PYTHON-BODY: edit a JSON file (`j` is the parsed document).
json_edit() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
path, body = sys.argv[1], sys.argv[2]
j = json.load(open(path))
env = dict(j=j)
exec(body, env)
json.dump(env["j"], open(path, "w"), indent=1)
PYEOF
}

# expect2 NAME KIND NEEDLE1 NEEDLE2 -- ARGS...
#   KIND record: appends --out OUTDIR/r.h5;  check: appends --json OUTDIR/r.json --junit
#   OUTDIR/r.xml;  none: nothing. Asserts exit 2, one stderr line holding both needles,
#   and an empty OUTDIR afterwards.
expect2() {
  local name="$1" kind="$2" n1="$3" n2="$4"
  shift 5
  local od="$OUTS/$name"
  mkdir -p "$od"
  local extra=()
  case "$kind" in
    record) extra=(--out "$od/r.h5") ;;
    check) extra=(--json "$od/r.json" --junit "$od/r.xml") ;;
  esac
  "$QC" "$@" "${extra[@]}" >"$TMP/$name.stdout" 2>"$TMP/$name.stderr"
  local rc=$?
  # error messages are "qwen-conform[ sub]: ..." lines; check's progress lines ("[file 1/2]",
  # the version banner) are not messages
  local lines
  lines=$(grep -cE '^qwen-conform( [a-z]+)?: ' "$TMP/$name.stderr")
  local msg
  msg=$(grep -E '^qwen-conform( [a-z]+)?: ' "$TMP/$name.stderr" | head -c 600)
  [ -n "$msg" ] || msg=$(head -c 600 "$TMP/$name.stderr")
  if [ $rc -ne 2 ]; then
    bad "$name: exit $rc, want 2 (stderr: $msg)"
    return
  fi
  if [ "$lines" -ne 1 ]; then
    bad "$name: $lines error messages on stderr, want exactly one: $(head -c 600 "$TMP/$name.stderr")"
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
  if [ "$kind" = check ]; then
    # check may keep its reports of a run that ended in an error, but only complete ones that
    # record the error (JSON summary.errors >= 1; JUnit errors >= 1) and nothing else
    local other
    other=$(ls -A "$od" | grep -vxE 'r\.json|r\.xml')
    if [ -n "$other" ]; then
      bad "$name: temp / partial output left behind: $other"
      return
    fi
    if ! "$PY" - "$od" <<'PYEOF'
import json, os, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
if os.path.exists(os.path.join(d, "r.json")):
    j = json.load(open(os.path.join(d, "r.json")))
    assert j["summary"]["errors"] >= 1, "json report records no error"
if os.path.exists(os.path.join(d, "r.xml")):
    r = ET.parse(os.path.join(d, "r.xml")).getroot()
    assert int(r.get("errors", "0")) >= 1, "junit report records no error"
PYEOF
    then
      bad "$name: a report left behind is incomplete or does not record the error"
      return
    fi
  elif [ -n "$(ls -A "$od")" ]; then
    bad "$name: output left behind: $(ls -A "$od" | tr '\n' ' ')"
    return
  fi
  ok "$name: exit 2, one message ($msg)"
}

TOK="1,2,3,4,5"

# ---- config.json -----------------------------------------------------------------------------
M=$(model_copy cfg_json); head -c 100 "$FIX/model/config.json" >"$M/config.json"
expect2 cfg_malformed_json record "$M/config.json" "" -- record --model "$M" --tokens $TOK
M=$(model_copy cfg_type)
json_edit "$M/config.json" 't = j.get("text_config", j); t["hidden_size"] = str(t["hidden_size"])'
expect2 cfg_wrong_type record "$M/config.json" "hidden_size" -- record --model "$M" --tokens $TOK
M=$(model_copy cfg_neg)
json_edit "$M/config.json" 't = j.get("text_config", j); t["num_hidden_layers"] = -2'
expect2 cfg_negative record "$M/config.json" "num_hidden_layers" -- record --model "$M" --tokens $TOK
M=$(model_copy cfg_missing)
json_edit "$M/config.json" 't = j.get("text_config", j); del t["vocab_size"]'
expect2 cfg_missing_field record "$M/config.json" "vocab_size" -- record --model "$M" --tokens $TOK
M=$(model_copy cfg_absent); rm "$M/config.json"
expect2 cfg_absent record "config.json" "" -- record --model "$M" --tokens $TOK
expect2 model_dir_absent record "$IN/no-such-model" "" -- record --model "$IN/no-such-model" --tokens $TOK

# ---- safetensors -----------------------------------------------------------------------------
ST=model.safetensors
first_tensor() { "$PY" - "$1" <<'PYEOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
print(min(h, key=lambda k: h[k]["data_offsets"][0]))
PYEOF
}
M=$(model_copy st_trunc); sz=$(stat -c %s "$M/$ST"); truncate -s $((sz - 100)) "$M/$ST"
expect2 st_truncated record "$M/$ST" "data_offsets" -- record --model "$M" --tokens $TOK
M=$(model_copy st_short); printf 'abc' >"$M/$ST"
expect2 st_shorter_than_8 record "$M/$ST" "" -- record --model "$M" --tokens $TOK
M=$(model_copy st_hdrlen); st_edit "$M/$ST" 'length = 1 << 40'
expect2 st_header_beyond_file record "$M/$ST" "header length" -- record --model "$M" --tokens $TOK
M=$(model_copy st_lying); T0=$(first_tensor "$M/$ST")
st_edit "$M/$ST" 'hdr[names[-1]]["data_offsets"][1] += 4096; hdr[names[-1]]["shape"] = [(hdr[names[-1]]["data_offsets"][1] - hdr[names[-1]]["data_offsets"][0]) // (4 if hdr[names[-1]]["dtype"] == "F32" else 2)]'
expect2 st_lying_span record "$M/$ST" "data_offsets" -- record --model "$M" --tokens $TOK
M=$(model_copy st_overflow)
st_edit "$M/$ST" 'hdr[names[0]]["shape"] = [4294967296, 4294967296, 16]'
expect2 st_shape_overflow record "$T0" "overflow" -- record --model "$M" --tokens $TOK
M=$(model_copy st_negdim)
st_edit "$M/$ST" 'hdr[names[0]]["shape"] = [-1] + hdr[names[0]]["shape"][1:]'
expect2 st_negative_dim record "$T0" "negative" -- record --model "$M" --tokens $TOK
M=$(model_copy st_overlap)
st_edit "$M/$ST" 'b = hdr[names[1]]; b["data_offsets"] = [b["data_offsets"][0] - 2, b["data_offsets"][1] - 2]'
expect2 st_overlap record "$M/$ST" "overlap" -- record --model "$M" --tokens $TOK
M=$(model_copy st_gap)
st_edit "$M/$ST" 'del hdr[names[1]]'
expect2 st_gap record "$M/$ST" "gap" -- record --model "$M" --tokens $TOK
M=$(model_copy st_tail); st_edit "$M/$ST" 'extra = bytes(64)'
expect2 st_trailing_bytes record "$M/$ST" "not covered" -- record --model "$M" --tokens $TOK
M=$(model_copy st_dup)
st_edit "$M/$ST" 'raw_header = json.dumps(hdr, separators=(",", ":")).replace(json.dumps(names[1]), json.dumps(names[0]))'
expect2 st_duplicate_name record "$T0" "duplicate" -- record --model "$M" --tokens $TOK
M=$(model_copy st_i64); st_edit "$M/$ST" 'hdr[names[0]]["dtype"] = "I64"'
expect2 st_dtype_i64 record "$T0" "I64" -- record --model "$M" --tokens $TOK
M=$(model_copy st_f64); st_edit "$M/$ST" 'hdr[names[0]]["dtype"] = "F64"'
expect2 st_dtype_f64 record "$T0" "F64" -- record --model "$M" --tokens $TOK
M=$(model_copy st_notjson); st_edit "$M/$ST" 'raw_header = "{\"a\": [1, 2,"'
expect2 st_header_not_json record "$M/$ST" "" -- record --model "$M" --tokens $TOK

# ---- model directory -------------------------------------------------------------------------
M=$(model_copy md_missing)
GONE=$("$PY" - "$M/$ST" <<'PYEOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); print([k for k in h if k.endswith("layers.0.mlp.up_proj.weight")][0])
PYEOF
)
repack "$M/$ST" "ts[:] = [t for t in ts if t[0] != '$GONE']"
expect2 md_missing_tensor record "$GONE" "" -- record --model "$M" --tokens $TOK
M=$(model_copy md_unknown)
repack "$M/$ST" "ts.append(['${GONE%up_proj.weight}bogus.weight', 'F32', [4], bytes(16)])"
expect2 md_unknown_tensor record "${GONE%up_proj.weight}bogus.weight" "" -- record --model "$M" --tokens $TOK
M=$(model_copy md_shape)
repack "$M/$ST" "ts[:] = [[t[0], t[1], t[2][::-1], t[3]] if t[0] == '$GONE' else t for t in ts]"
expect2 md_wrong_shape record "$GONE" "shape" -- record --model "$M" --tokens $TOK
if [ -n "$SHARDED" ]; then
  M=$(model_copy md_noshard "$SHARDED")
  LAST=$(ls "$M" | grep -E '^model-.*\.safetensors$' | sort | tail -1)
  rm "$M/$LAST"
  expect2 md_missing_shard record "$LAST" "" -- record --model "$M" --tokens $TOK
  M=$(model_copy md_ixabsent "$SHARDED")
  FIRST=$(ls "$M" | grep -E '^model-.*\.safetensors$' | sort | head -1)
  json_edit "$M/model.safetensors.index.json" "j['weight_map']['model.language_model.layers.0.mlp.ghost.weight'] = '$FIRST'"
  expect2 md_index_absent_tensor record "ghost.weight" "$FIRST" -- record --model "$M" --tokens $TOK
  M=$(model_copy md_ixjson "$SHARDED"); printf '{"weight_map": {' >"$M/model.safetensors.index.json"
  expect2 md_index_malformed record "model.safetensors.index.json" "" -- record --model "$M" --tokens $TOK
else
  skp "sharded model classes: no sharded fixture"
fi

# ---- token lists, prompts, profiles, memory --------------------------------------------------
M=$(model_copy tok_model)
expect2 tok_junk record "--tokens" "x7" -- record --model "$M" --tokens 1,x7,3
expect2 tok_negative record "--tokens" "-4" -- record --model "$M" --tokens 1,-4
printf '1 2\n3 junk 5\n' >"$IN/prompt_junk.txt"
expect2 tok_file_junk record "$IN/prompt_junk.txt" "junk" -- record --model "$M" --tokens-file "$IN/prompt_junk.txt"
expect2 tok_file_absent record "$IN/absent.txt" "" -- record --model "$M" --tokens-file "$IN/absent.txt"
expect2 tok_out_of_vocab record "999999" "vocab" -- record --model "$M" --tokens 1,999999,3
expect2 tok_empty record "--tokens" "" -- record --model "$M" --tokens ","
expect2 prompt_beyond_context record "max_context_len" "" -- record --model "$M" --tokens 1,2,3,4,5,6,7,8,9,10 --max-context-len 4
printf '{"max_seq_len": 16,' >"$IN/profile_bad.json"
expect2 profile_malformed record "$IN/profile_bad.json" "" -- record --model "$M" --tokens $TOK --profile "$IN/profile_bad.json"
printf '{"max_seq_len": "16"}' >"$IN/profile_type.json"
expect2 profile_wrong_type record "$IN/profile_type.json" "max_seq_len" -- record --model "$M" --tokens $TOK --profile "$IN/profile_type.json"
printf '{"max_context_len": -8}' >"$IN/profile_neg.json"
expect2 profile_negative record "$IN/profile_neg.json" "max_context_len" -- record --model "$M" --tokens $TOK --profile "$IN/profile_neg.json"
expect2 max_memory_refused record "--max-memory" "needs" -- record --model "$M" --tokens $TOK --max-memory 1M
expect2 max_memory_junk record "--max-memory" "8Q" -- record --model "$M" --tokens $TOK --max-memory 8Q

# ---- goldens and policies (check) ------------------------------------------------------------
GD="$IN/golden_dirs"
mkdir -p "$GD"
golden_copy() { # NAME -> a copy of the fixture golden beside a link to its model
  mkdir -p "$GD/$1"
  cp "$FIX/golden.h5" "$GD/$1/golden.h5"
  ln -s "$FIX/model" "$GD/$1/model"
  echo "$GD/$1/golden.h5"
}
printf 'not an HDF5 file\n' >"$IN/not_hdf5.h5"
expect2 golden_not_hdf5 check "$IN/not_hdf5.h5" "" -- --golden "$IN/not_hdf5.h5"
G=$(golden_copy trunc); sz=$(stat -c %s "$G"); truncate -s $((sz / 2)) "$G"
expect2 golden_truncated check "$G" "" -- --golden "$G"
: >"$IN/empty.h5"
expect2 golden_empty_file check "$IN/empty.h5" "" -- --golden "$IN/empty.h5"
if [ $HAVE_H5PY = 1 ]; then
  h5edit() { "$PY" - "$1" "$2" <<'PYEOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    case = sorted(f["cases"].keys())[0]
    c = f["cases"][case]
    exec(sys.argv[2])
print(case)
PYEOF
  }
  G=$(golden_copy nan); C=$(h5edit "$G" 'd = c["prefill/logits"]; a = d[...]; a[0, 3] = np.nan; d[...] = a')
  expect2 golden_nan check "/cases/$C/prefill/logits" "NaN" -- --golden "$G"
  G=$(golden_copy shape); C=$(h5edit "$G" 'a = c["prefill/logits"][...]; del c["prefill/logits"]; c.create_dataset("prefill/logits", data=a[:, :-1])')
  expect2 golden_wrong_shape check "/cases/$C/prefill/logits" "shape" -- --golden "$G"
  G=$(golden_copy missing); C=$(h5edit "$G" 'del c["prefill/logits"]')
  expect2 golden_missing_dataset check "/cases/$C/prefill/logits" "missing" -- --golden "$G"
  G=$(golden_copy vocab); C=$(h5edit "$G" 't = c["tokens"]; a = t[...]; a[0] = 10**6; t[...] = a')
  expect2 golden_token_out_of_vocab check "/cases/$C/tokens" "1000000" -- --golden "$G"
else
  skp "golden NaN / shape / missing dataset / token classes: h5py not available to $PY"
fi
printf '{"schema_version": 1, "defaults": {' >"$IN/policy_bad.json"
expect2 policy_malformed check "$IN/policy_bad.json" "" -- --golden "$FIX/golden.h5" --policy "$IN/policy_bad.json"
cat >"$IN/policy_noreason.json" <<'EOF'
{"schema_version": 1, "defaults": {
 "logits": {"atol": 1e-4, "rtol": 1e-3}, "hidden": {"atol": 1e-4, "rtol": 1e-3},
 "k_cache": {"atol": 1e-4, "rtol": 1e-3}, "v_cache": {"atol": 1e-4, "rtol": 1e-3},
 "conv_state": {"atol": 1e-4, "rtol": 1e-3}, "recurrent_state": {"atol": 1e-4, "rtol": 1e-3}},
 "overrides": [{"case": "len130", "atol": 1e-3}]}
EOF
expect2 policy_no_reason check "$IN/policy_noreason.json" "reason" -- --golden "$FIX/golden.h5" --policy "$IN/policy_noreason.json"
sed 's/"logits": {"atol": 1e-4/"logits": {"atol": -1/; s/, "atol": 1e-3}/, "atol": 1e-3, "reason": "r"}/' \
  "$IN/policy_noreason.json" >"$IN/policy_negative.json"
expect2 policy_negative_atol check "$IN/policy_negative.json" "atol" -- --golden "$FIX/golden.h5" --policy "$IN/policy_negative.json"
expect2 policy_absent check "$IN/policy_absent.json" "" -- --golden "$FIX/golden.h5" --policy "$IN/policy_absent.json"

# ---- nothing touched: inputs and fixtures byte-identical --------------------------------------
# every generated input is hashed, a few of the commands above run again, and hashed again
sum1="$(cd "$IN" && find . -type f -print0 | sort -z | xargs -0 sha256sum)"
"$QC" record --model "$IN/st_lying" --tokens $TOK --out "$OUTS/x.h5" >/dev/null 2>&1
"$QC" record --model "$IN/md_shape" --tokens $TOK --out "$OUTS/x.h5" >/dev/null 2>&1
"$QC" --golden "$IN/not_hdf5.h5" >/dev/null 2>&1
[ $HAVE_H5PY = 1 ] && "$QC" --golden "$GD/nan/golden.h5" >/dev/null 2>&1
sum2="$(cd "$IN" && find . -type f -print0 | sort -z | xargs -0 sha256sum)"
[ "$sum1" = "$sum2" ] && ok "bad inputs unmodified by the runs (sha256sum)" ||
  bad "an input changed: $(diff <(echo "$sum1") <(echo "$sum2") | head -5)"

# ---- read-only goldens and models check as the originals ---------------------------------------
RO="$TMP/ro"
cp -r "$FIX" "$RO"
[ -f "$SRC/fixtures/tolerances.json" ] && cp "$SRC/fixtures/tolerances.json" "$TMP/tolerances.json"
chmod -R a-w "$RO"
"$QC" --golden "$FIX/golden.h5" --backend reference --mode dynamic --quiet >"$TMP/orig.out" 2>&1
rc_orig=$?
"$QC" --golden "$RO/golden.h5" --backend reference --mode dynamic --quiet >"$TMP/ro.out" 2>&1
rc_ro=$?
if [ $rc_ro -ne 2 ] && [ $rc_ro -eq $rc_orig ]; then
  ok "read-only golden + model check like the originals (exit $rc_ro)"
else
  bad "read-only copy: exit $rc_ro, original: exit $rc_orig ($(tail -3 "$TMP/ro.out"))"
fi
mkdir -p "$OUTS/ro_record"
if "$QC" record --model "$RO/model" --tokens $TOK --decode 1 --out "$OUTS/ro_record/r.h5" >/dev/null 2>"$TMP/ro_record.err" &&
   [ -s "$OUTS/ro_record/r.h5" ]; then
  ok "record from a read-only model writes its output"
else
  bad "record from a read-only model: $(cat "$TMP/ro_record.err")"
fi
if [ -z "$(find "$RO" -newer "$TMP/orig.out" -print -quit)" ]; then
  ok "read-only fixture copy untouched (no file newer than the run)"
else
  bad "files changed under the read-only copy: $(find "$RO" -newer "$TMP/orig.out" | head -3)"
fi
fixsum_after="$(cd "$SRC/fixtures" && find . -type f -print0 | sort -z | xargs -0 sha256sum)"
[ "$fixsum_before" = "$fixsum_after" ] && ok "fixtures/ unmodified (sha256sum)" || bad "fixtures/ changed"

echo "# $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
