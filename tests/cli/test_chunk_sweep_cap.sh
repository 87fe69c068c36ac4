#!/usr/bin/env bash
# chunk_sweep on a golden whose max_seq_len (512) exceeds the optimized backend's chunk scratch
# (256 tokens, announced as be->max_chunk_tokens): the sweep's "whole prompt in one chunk" size
# is capped at what the backend holds (chunk_sweep.c256), never an ERROR row.
set -u
QC="${1:?usage: test_chunk_sweep_cap.sh <qwen-conform> <source-dir>}"
SRC="${2:?}"
PY=/usr/bin/python3
G="$SRC/fixtures/tiny-long-context"
[ -f "$G/golden.h5" ] || { echo "SKIP: no $G"; exit 0; }
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
cp -r "$G/model" "$TMP/model" && cp "$G/golden.h5" "$TMP/golden.h5" && chmod u+w "$TMP/golden.h5"
"$PY" - "$TMP/golden.h5" <<'PYEOF' || exit 1
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    for c in f["cases"]:
        f["cases"][c].attrs["max_seq_len"] = 512
PYEOF
"$QC" check --golden "$TMP/golden.h5" --backend optimized --json "$TMP/r.json" --quiet >/dev/null 2>"$TMP/err"
rc=$?
"$PY" - "$TMP/r.json" "$rc" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1])); rc = int(sys.argv[2])
sweep = {r["check"]: r["verdict"] for r in d["checks"] if r["check"].startswith("chunk_sweep")}
bad = [r for r in d["checks"] if r["verdict"] not in ("PASS", "SKIP")]
ok = rc == 0 and sweep.get("chunk_sweep.c256") == "PASS" and "chunk_sweep.c512" not in sweep and not bad
print(("ok   - " if ok else "FAIL - ") + f"exit {rc}, sweep {sweep}, {len(bad)} non-pass rows")
sys.exit(0 if ok else 1)
PYEOF
