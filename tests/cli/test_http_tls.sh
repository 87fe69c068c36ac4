#!/usr/bin/env bash
# test_http_tls.sh <qwen-conform> <source-dir> — an https:// server with a self-signed
# certificate (tests/servers/qc_hostile_server.py behind Python's ssl, 127.0.0.1 only):
#   * without --insecure the certificate is refused: exit 2 naming the URL and the TLS problem;
#   * with --insecure (or insecure=1 in the spec) the run reaches the server: its answers are
#     checked (the hostile 'nan500' mode: a FAIL with HTTP 500, exit 1), never a usage error.
# Needs the openssl command (Debian: openssl); skipped with a note without it.
set -u
QC="$1"
SRC="$2"
PY=/usr/bin/python3
TMP="$(mktemp -d)"
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT INT TERM
command -v openssl >/dev/null 2>&1 || { echo "SKIP: openssl not installed"; exit 0; }
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$TMP/key.pem" -out "$TMP/cert.pem" -days 1 \
  -subj "/CN=127.0.0.1" >/dev/null 2>&1 || { echo "FAIL - openssl req"; exit 1; }
"$PY" - "$SRC/tests/servers" "$TMP" > "$TMP/srv.out" 2> "$TMP/srv.err" <<'PYEOF' &
import http.server, ssl, sys
sys.path.insert(0, sys.argv[1])
import qc_hostile_server as h
h.Handler.mode, h.Handler.vocab = "nan500", 256
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h.Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[2] + "/cert.pem", sys.argv[2] + "/key.pem")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("LISTENING https://127.0.0.1:%d" % srv.server_address[1], flush=True)
srv.serve_forever()
PYEOF
PID=$!
for _ in $(seq 100); do grep -q LISTENING "$TMP/srv.out" 2>/dev/null && break; sleep 0.1; done
URL=$(grep -o 'https://127.0.0.1:[0-9]*' "$TMP/srv.out" | head -1)
[ -n "$URL" ] || { echo "FAIL - the TLS server did not start"; cat "$TMP/srv.err"; exit 1; }
G="$SRC/fixtures/tiny-f32-tied-flat/golden.h5"

"$QC" check --golden "$G" --filter '/len005/' --backend "http:$URL" > "$TMP/a.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "cannot reach $URL" "$TMP/a.out" && grep -qi "certificate" "$TMP/a.out" \
  && ok "self-signed, no --insecure: exit 2 naming the URL and the certificate" \
  || { bad "self-signed without --insecure: exit $rc"; tail -3 "$TMP/a.out"; }
for how in "--insecure" ",insecure=1"; do
  if [ "$how" = "--insecure" ]; then spec="http:$URL"; flag="--insecure"; else spec="http:$URL$how"; flag=""; fi
  "$QC" check --golden "$G" --filter '/len005/' --backend "$spec" $flag --json "$TMP/b.json" \
    > "$TMP/b.out" 2>&1
  rc=$?
  [ $rc -eq 1 ] && grep -q "HTTP 500" "$TMP/b.out" \
    && ok "$how: the server is reached (its HTTP 500 is a FAIL, exit 1)" \
    || { bad "$how: exit $rc"; tail -3 "$TMP/b.out"; }
done
echo "$fails failed"
[ $fails -eq 0 ]
