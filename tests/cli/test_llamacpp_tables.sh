#!/usr/bin/env bash
# test_llamacpp_tables.sh <qwen-conform> <source-dir> — the llama.cpp and llama-server outcome
# tables are written by their gates, not by hand (issue #26 item 10, #30): without llama.cpp,
#   * `ci/llamacpp table --check` and `ci/llama-server table --check` pass on the committed
#     documents (adapters/llamacpp/README.md, docs/llama-server.md: the tables between their
#     marker comments equal what expectations.json / server-expectations.json render);
#   * adapters/llamacpp/tests/test_tables.py (pytest): the tables hold the recorded numbers,
#     --check exits 1 on an altered temp copy (outcome, lifecycle verdict, server count) and 2
#     on bad input naming it, gate.py --update-checks rewrites the table with the verdicts.
# The qwen-conform binary is not used (the renderer reads only JSON). A few seconds.
set -u
SRC="$2"
PY=/usr/bin/python3
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }

for c in llamacpp llama-server; do
  out="$("$SRC/ci/$c" table --check 2>&1)"; rc=$?
  if [ "$rc" -eq 0 ]; then ok "ci/$c table --check: $out"; else bad "ci/$c table --check exit $rc: $out"; fi
done

out="$(cd "$SRC" && "$PY" -m pytest -q -p no:cacheprovider adapters/llamacpp/tests/test_tables.py 2>&1)"; rc=$?
echo "$out" | tail -n 15
if [ "$rc" -eq 0 ]; then ok "adapters/llamacpp/tests/test_tables.py"; else bad "test_tables.py exit $rc"; fi

[ "$fails" -eq 0 ] && echo "test_llamacpp_tables: all passed" || echo "test_llamacpp_tables: $fails failed"
[ "$fails" -eq 0 ]
