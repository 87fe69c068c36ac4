#!/usr/bin/env bash
# test_export_inputs.sh — `qwen-conform export-inputs GOLDEN.h5|DIR --out DIR`.
#   bash tests/cli/test_export_inputs.sh <path-to-qwen-conform> <source-dir>
# On every fixture (each golden alone, and the whole fixtures/ directory): exit 0, every JSON
# file parses, the index lists every case, each case's token lists / start_pos / max_seq_len
# equal the golden's (read with h5py), the prefill chunks add up. Then the bad inputs (exit 2
# naming the file / dataset, nothing written, no temp directory left) and the output safety
# (an input or a golden's directory as --out refused; a non-empty --out only with --force).
set -u
QC="${1:?usage: test_export_inputs.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: test_export_inputs.sh <qwen-conform> <source-dir>}"
PY=/usr/bin/python3

fail=0
pass=0
ok()  { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }

if ! "$PY" -c 'import h5py, numpy' 2>/dev/null; then
  echo "SKIP: /usr/bin/python3 has no h5py / numpy to compare the JSON with the goldens"
  exit 0
fi
TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_export.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

# compare.py OUT GOLDEN... : every golden's cases against the export under OUT
cat >"$TMP/compare.py" <<'PY'
import json, os, sys
import h5py, numpy as np
out, goldens = sys.argv[1], sys.argv[2:]
index = json.load(open(os.path.join(out, "index.json")))
assert index["format"] == "qwen-conform-inputs" and index["format_version"] == 1, index.get("format")
assert len(index["goldens"]) == len(goldens), (len(index["goldens"]), len(goldens))
n = 0
for e, path in zip(index["goldens"], goldens):
    assert os.path.samefile(e["golden_file"], path), (e["golden_file"], path)
    with h5py.File(path, "r") as f:
        for k in ("config_sha256", "weights_sha256", "model_path"):
            assert e["model"][k] == f.attrs[k], k
        assert e["config_json"] == f.attrs["config_json"]
        assert os.path.isfile(os.path.join(e["model"]["dir"], "config.json"))
        assert [c["name"] for c in e["cases"]] == sorted(f["cases"]), "case list"
        V = json.loads(f.attrs["config_json"])
        for ce in e["cases"]:
            c = json.load(open(os.path.join(out, ce["file"])))
            g = f["cases"][ce["name"]]
            assert c["format"] == "qwen-conform-inputs/case" and c["case"] == ce["name"]
            P = int(g.attrs["start_pos"])
            assert c["start_pos"] == P == ce["start_pos"], "start_pos"
            hist = g["history_tokens"][()].tolist() if P > 0 else []
            dec = g["decode/tokens"][()].tolist() if "decode/tokens" in g else []
            assert c["history_tokens"] == hist, (ce["name"], "history_tokens")
            assert c["tokens"] == g["tokens"][()].tolist(), (ce["name"], "tokens")
            assert c["decode_tokens"] == dec, (ce["name"], "decode_tokens")
            msl = int(g.attrs["max_seq_len"]) if "max_seq_len" in g.attrs else None
            assert c["max_seq_len"] == msl, (ce["name"], "max_seq_len")
            pf, m = c["prefill"], msl or 128
            assert pf["max_seq_len"] == m and sum(pf["prompt_chunks"]) == len(c["tokens"])
            assert all(0 < k <= m for k in pf["prompt_chunks"] + pf["history_chunks"])
            assert sum(pf["history_chunks"]) == P
            assert pf["max_context_len"] >= P + len(c["tokens"]) + len(dec)
            assert c["outputs"]["prefill/logits"] == list(g["prefill/logits"].shape)
            if dec:
                assert c["outputs"]["decode/logits"] == list(g["decode/logits"].shape)
            assert c["model"] == e["model"]
            n += 1
print(n)
PY

# ---- every fixture alone, then the whole directory ------------------------------------------
all=()
for g in "$SRC"/fixtures/*/golden.h5; do
  [ -f "$g" ] || continue
  all+=("$g")
  fx="$(basename "$(dirname "$g")")"
  o="$TMP/one-$fx"
  if "$QC" export-inputs "$g" --out "$o" >"$TMP/stdout" 2>"$TMP/stderr"; then
    if r="$("$PY" "$TMP/compare.py" "$o" "$g" 2>&1)"; then
      ok "export-inputs $fx: $r cases, JSON = the golden's inputs"
    else
      bad "export-inputs $fx: JSON differs from the golden: $(echo "$r" | tail -3)"
    fi
  else
    bad "export-inputs $fx: exit $?: $(cat "$TMP/stderr")"
  fi
done
[ "${#all[@]}" -ge 1 ] || { echo "SKIP: no fixtures"; exit 0; }
if "$QC" export-inputs "$SRC/fixtures" --out "$TMP/all" >"$TMP/stdout" 2>"$TMP/stderr"; then
  r="$("$PY" "$TMP/compare.py" "$TMP/all" "${all[@]}" 2>&1)" \
    && ok "export-inputs fixtures/: $r cases of ${#all[@]} goldens" \
    || bad "export-inputs fixtures/: $(echo "$r" | tail -3)"
  fx="$(basename "$(dirname "${all[0]}")")"
  r="$("$PY" "$TMP/compare.py" "$TMP/all/$fx/golden" "${all[0]}" 2>&1)" \
    && ok "export-inputs fixtures/: $fx/golden/index.json stands alone ($r cases)" \
    || bad "per-golden index: $(echo "$r" | tail -3)"
  n_json="$(find "$TMP/all" -name '*.json' | wc -l)"
  n_bad=0
  for f in $(find "$TMP/all" -name '*.json'); do "$PY" -m json.tool "$f" >/dev/null 2>&1 || n_bad=$((n_bad + 1)); done
  [ "$n_bad" = 0 ] && ok "all $n_json JSON files parse" || bad "$n_bad of $n_json JSON files do not parse"
else
  bad "export-inputs fixtures/: exit $?: $(cat "$TMP/stderr")"
fi

# ---- bad input: exit 2 naming the file (and dataset), nothing written -----------------------
G="${all[0]}"
expect2() {  # expect2 NAME PATTERN ARGS...
  local name="$1" pat="$2"
  shift 2
  rm -rf "$TMP/bad-out"
  "$QC" export-inputs "$@" >"$TMP/stdout" 2>"$TMP/stderr"
  local rc=$?
  if [ "$rc" = 2 ] && grep -q -- "$pat" "$TMP/stderr" && [ ! -e "$TMP/bad-out" ] &&
     ! ls "$TMP" | grep -q '\.tmp\.'; then
    ok "$name: exit 2 ($(head -1 "$TMP/stderr" | cut -c1-110))"
  else
    bad "$name: exit $rc, stderr: $(cat "$TMP/stderr"), out: $(ls "$TMP/bad-out" 2>&1 | head -3)"
  fi
}
head -c 4000 "$G" >"$TMP/trunc.h5"
expect2 "a truncated golden" "$TMP/trunc.h5" "$TMP/trunc.h5" --out "$TMP/bad-out"
echo "not hdf5" >"$TMP/text.h5"
expect2 "a non-HDF5 file" "$TMP/text.h5: not an HDF5 file" "$TMP/text.h5" --out "$TMP/bad-out"
expect2 "a missing input" "$TMP/missing.h5" "$TMP/missing.h5" --out "$TMP/bad-out"
mkdir -p "$TMP/empty"
expect2 "a directory without goldens" "no golden" "$TMP/empty" --out "$TMP/bad-out"
expect2 "no --out" "--out: required" "$G"
expect2 "an unknown option" "--frobnicate" "$G" --frobnicate --out "$TMP/bad-out"
expect2 "two inputs" "one input only" "$G" "$G" --out "$TMP/bad-out"
# a golden whose tokens dataset has the wrong length: the message names the dataset
mkdir -p "$TMP/badshape"
cp "$G" "$TMP/badshape/golden.h5"
ln -s "$(dirname "$G")/model" "$TMP/badshape/model"
"$PY" - "$TMP/badshape/golden.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    c = f["cases"][sorted(f["cases"])[0]]
    t = c["tokens"][()]
    del c["tokens"]
    c["tokens"] = np.concatenate([t, t[:1]]).astype(np.int32)
PY
expect2 "a golden with a mis-shaped tokens dataset" "badshape/golden.h5: /cases/" "$TMP/badshape/golden.h5" --out "$TMP/bad-out"
cp "$G" "$TMP/badshape/golden.h5"
"$PY" - "$TMP/badshape/golden.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    c = f["cases"][sorted(f["cases"])[0]]
    t = c["tokens"][()]
    t[0] = 1 << 30
    c["tokens"][...] = t
PY
expect2 "a golden with a token id out of range" "badshape/golden.h5: .*tokens" "$TMP/badshape/golden.h5" --out "$TMP/bad-out"
# a directory with one good and one bad golden: all or nothing
mkdir -p "$TMP/mixed/a" "$TMP/mixed/b"
cp "$G" "$TMP/mixed/a/golden.h5"
ln -s "$(dirname "$G")/model" "$TMP/mixed/a/model"
cp "$TMP/trunc.h5" "$TMP/mixed/b/golden.h5"
expect2 "a directory with a truncated golden (all or nothing)" "mixed/b/golden.h5" "$TMP/mixed" --out "$TMP/bad-out"

# ---- output safety ------------------------------------------------------------------------
cp -r "$(dirname "$G")" "$TMP/fx"
sum_before="$(cd "$TMP/fx" && find . -type f | sort | xargs cksum)"
"$QC" export-inputs "$TMP/fx/golden.h5" --out "$TMP/fx" >/dev/null 2>"$TMP/stderr"
rc=$?
[ "$rc" = 2 ] && grep -q "golden" "$TMP/stderr" && ok "--out = the golden's directory: refused (exit 2)" \
  || bad "--out = the golden's directory: exit $rc $(cat "$TMP/stderr")"
"$QC" export-inputs "$TMP/fx/golden.h5" --out "$TMP/fx/golden.h5" >/dev/null 2>"$TMP/stderr"
rc=$?
[ "$rc" = 2 ] && ok "--out = the golden file: refused (exit 2: $(head -1 "$TMP/stderr" | cut -c1-90))" \
  || bad "--out = the golden file: exit $rc"
"$QC" export-inputs "$TMP/fx/golden.h5" --out "$TMP/fx/model" >/dev/null 2>"$TMP/stderr"
rc=$?
[ "$rc" = 2 ] && ok "--out = the model directory: refused (exit 2)" || bad "--out = model dir: exit $rc"
"$QC" export-inputs "$TMP/fx" --out "$TMP/fx/sub" >/dev/null 2>"$TMP/stderr"
rc=$?
[ "$rc" = 2 ] && [ ! -e "$TMP/fx/sub" ] && ok "--out inside the golden directory: refused (exit 2)" \
  || bad "--out inside the golden dir: exit $rc $(cat "$TMP/stderr")"
sum_after="$(cd "$TMP/fx" && find . -type f | sort | xargs cksum)"
[ "$sum_before" = "$sum_after" ] && ok "the inputs keep their bytes, nothing added beside them" \
  || bad "an input directory changed"
mkdir -p "$TMP/busy"
echo keep >"$TMP/busy/notes.txt"
"$QC" export-inputs "$G" --out "$TMP/busy" >/dev/null 2>"$TMP/stderr"
rc=$?
[ "$rc" = 2 ] && grep -q "not empty" "$TMP/stderr" && [ ! -e "$TMP/busy/index.json" ] \
  && ok "a non-empty --out without --force: refused (exit 2)" || bad "non-empty --out: exit $rc"
"$QC" export-inputs "$G" --out "$TMP/busy" --force >/dev/null 2>"$TMP/stderr"
rc=$?
[ "$rc" = 0 ] && [ "$(cat "$TMP/busy/notes.txt")" = keep ] && "$PY" "$TMP/compare.py" "$TMP/busy" "$G" >/dev/null 2>&1 \
  && ok "--force writes into a non-empty --out, other files kept" || bad "--force: exit $rc $(cat "$TMP/stderr")"
mkdir -p "$TMP/emptyout"
"$QC" export-inputs "$G" --out "$TMP/emptyout" >/dev/null 2>"$TMP/stderr" && [ -f "$TMP/emptyout/index.json" ] \
  && ok "an existing empty --out is filled" || bad "empty --out: $(cat "$TMP/stderr")"
"$QC" export-inputs "$G" --out "$TMP/no/such/dir" >/dev/null 2>"$TMP/stderr"
rc=$?
[ "$rc" = 2 ] && [ ! -e "$TMP/no" ] && ok "--out whose parent is missing: exit 2" || bad "missing parent: exit $rc"
# SIGINT / SIGTERM while the temp directory is being filled: nothing appears, no temp tree left.
# The export is slowed by tests/cli/slow_io.c (LD_PRELOAD: every file's fsync sleeps 0.3 s), so
# the signal comes while its files are being written; ASan (if any) may not come first then.
CC="${CC:-cc}"
"$CC" -shared -fPIC -O1 -o "$TMP/slow_io.so" "$SRC/tests/cli/slow_io.c" -ldl \
  || { bad "cannot compile tests/cli/slow_io.c"; echo "# $pass passed, $fail failed"; exit 1; }
mkdir -p "$TMP/slowcheck"
t0=$(date +%s%N)
QC_SLOW_IO_FSYNC_US=100000 LD_PRELOAD="$TMP/slow_io.so" \
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
  "$QC" export-inputs "$G" --out "$TMP/slowcheck/out" >/dev/null 2>"$TMP/stderr"
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
n_files=$(find "$TMP/slowcheck/out" -type f 2>/dev/null | wc -l)
[ "$rc" = 0 ] && [ "$n_files" -ge 2 ] && [ "$ms" -ge $((n_files * 100)) ] \
  && ok "the slow_io shim slows each file of the export (100 ms a file: $n_files files in $ms ms)" \
  || bad "slow_io shim: exit $rc, $n_files files in $ms ms (want >= 100 ms a file) $(cat "$TMP/stderr")"
for sig in INT TERM; do
  mkdir -p "$TMP/sig$sig"
  set -m  # job control: a background job keeps SIGINT (otherwise the shell ignores it for it)
  QC_SLOW_IO_FSYNC_US=300000 LD_PRELOAD="$TMP/slow_io.so" \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    "$QC" export-inputs "$G" --out "$TMP/sig$sig/out" >/dev/null 2>&1 &
  p=$!
  set +m
  for _ in $(seq 50); do ls "$TMP/sig$sig" | grep -q '\.tmp\.' && break; sleep 0.05; done
  seen=$(ls "$TMP/sig$sig")
  kill -"$sig" "$p"; wait "$p"; rc=$?
  left=$(ls -A "$TMP/sig$sig")
  case "$sig" in INT) want=130;; TERM) want=143;; esac
  echo "$seen" | grep -q '\.tmp\.' && [ "$rc" = "$want" ] && [ -z "$left" ] \
    && ok "SIG$sig during the write (temp directory seen): exit $rc, no --out, no temp directory" \
    || bad "SIG$sig during the write: exit $rc (want $want), seen '$seen', left '$left'"
done
ls "$TMP" | grep -q '\.tmp\.' && bad "a temp directory was left in $TMP" || ok "no temp directory left"

echo "# $pass passed, $fail failed"
[ "$fail" = 0 ]
