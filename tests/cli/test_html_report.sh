#!/usr/bin/env bash
# test_html_report.sh <qwen-conform> <source-dir> — check --html FILE (#26 item 3):
#   * the page of a passing run (PARTIAL verdicts), of a run with an injected porting bug
#     (FAIL: the per-layer curve of the hidden states, the drift curves of a long decode) and
#     of a golden under a directory named like an HTML injection: self-contained (no external
#     reference, a CSP forbidding any load; tests/html/check_html.py static), its counts those
#     of the JSON report, every row in the table, all text escaped;
#   * written like the JSON: refused (exit 2, before any work) when it is an input (a golden)
#     or another output, no temp file left behind;
#   * in a REAL headless browser (Debian's chromium; tests/html/chromium.sh): the script runs
#     without an error or any console message (<html data-qc-script="ok">), the ?v=&q= filter
#     and the ?rows= selection (a cause's link) show exactly the rows they select, escaped
#     text makes no element, and a screenshot of the failing run's page is kept as
#     $BUILD/html-report.png. Without chromium the browser part is SKIPPED (exit 0, a "SKIP:"
#     line) — unless QC_REQUIRE_CHROMIUM=1 (ci/test sets it): then it FAILS. 20-35 s (3
#     browser starts) on 2 loaded cores.
set -u
QC="$1"
SRC="$2"
BUILD="$(cd "$(dirname "$QC")" && pwd)"
PY=/usr/bin/python3
CH="$PY $SRC/tests/html/check_html.py"
G="$SRC/fixtures/tiny-f32-tied-flat/golden.h5"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
t0=$(date +%s)
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }
# shellcheck source=../html/chromium.sh
. "$SRC/tests/html/chromium.sh"

# ---- the pages ----------------------------------------------------------------------------
"$QC" check --golden "$G" --quiet --filter len005 --json "$TMP/ok.json" --html "$TMP/ok.html" \
  > "$TMP/ok.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ -s "$TMP/ok.html" ] && ok "passing run: exit 0, the page written" \
  || bad "passing run: exit $rc ($(tail -2 "$TMP/ok.out"))"
# a porting bug seen on a short case (the per-layer curve) and on a long decode (drift curves)
mkdir -p "$TMP/two" && ln -s "$SRC/fixtures/tiny-f32-tied-flat" "$SRC/fixtures/tiny-long-decode" "$TMP/two/"
"$QC" check --golden "$TMP/two" --quiet --inject-fault norm-no-offset \
  --filter '^(tiny-f32-tied-flat/len005/|tiny-long-decode/[^/]*/reference/dynamic$)' \
  --json "$TMP/bad.json" --html "$TMP/bad.html" > "$TMP/bad.out" 2>&1
rc=$?
[ $rc -eq 1 ] && [ -s "$TMP/bad.html" ] && ok "norm-no-offset (a short case + a long decode): exit 1, the page" \
  || bad "norm-no-offset: exit $rc ($(tail -2 "$TMP/bad.out"))"
# a golden under a directory whose name is markup: every piece of row text is escaped
EVIL="x<img src=x onerror=alert(1)>&\"q'"
mkdir -p "$TMP/esc" && ln -s "$SRC/fixtures/tiny-f32-tied-flat" "$TMP/esc/$EVIL"
"$QC" check --golden "$TMP/esc/$EVIL/golden.h5" --quiet --filter len005 \
  --inject-fault norm-no-offset:1 --html "$TMP/esc.html" > "$TMP/esc.out" 2>&1
rc=$?
[ $rc -eq 1 ] && ok "markup in the golden's path: exit 1" || bad "markup in the path: exit $rc"

# ---- the files as written -----------------------------------------------------------------
for p in ok bad esc; do
  $CH static "$TMP/$p.html" --no-tag img > "$TMP/$p.static" 2>&1 \
    && ok "$p.html is self-contained: $(cat "$TMP/$p.static")" \
    || bad "$p.html: $(cat "$TMP/$p.static")"
done
grep -Eiq '(src|href)[[:space:]]*=[[:space:]]*["'\'']?[[:space:]]*(https?:)?//' "$TMP"/*.html \
  && bad "an http(s):// or //host URL in a src / href" || ok "no http(s):// URL in any src / href"
$CH static "$TMP/esc.html" --text "$EVIL/len005" > "$TMP/esc.t" 2>&1 \
  && ! grep -qF "<img src=x" "$TMP/esc.html" && grep -qF 'x&lt;img src=x onerror=alert(1)&gt;&amp;&quot;q&#39;' "$TMP/esc.html" \
  && ok "the markup in the path is escaped (& < > \" ') and reads back as text" \
  || bad "escaping: $(cat "$TMP/esc.t")"
"$PY" - "$TMP/ok.json" "$TMP/ok.html" "$TMP/bad.json" "$TMP/bad.html" <<'PYEOF' \
  && ok "the pages hold the JSON's counts, verdicts, causes and every row" || bad "pages vs the JSON reports"
import json, re, sys
for js, page in ((sys.argv[1], sys.argv[2]), (sys.argv[3], sys.argv[4])):
    d, h = json.load(open(js)), open(page, encoding="utf-8").read()
    s = d["summary"]
    tiles = dict((k, int(v)) for v, k in re.findall(r'<div class="tile[^"]*"><b>(\d+)</b>([a-z ]+)</div>', h))
    want = {"checks": s["checks"], "passed": s["passed"], "failed": s["failed"],
            "skipped": s["skipped"], "errors": s["errors"], "exit code": s["exit_code"]}
    assert tiles == want, (page, tiles, want)
    assert len(re.findall(r'<tr id="r\d+"', h)) == len(d["checks"]), page
    for be, v in d["verdict"].items():
        assert re.search(r'<span class="badge">%s</span>%s</h3>' % (v, re.escape(be)), h), (be, v)
        req = d["coverage"][be]["require"]
        assert not req or "<code>%s</code>" % req in h, req
    links = re.findall(r'data-rows="([^"]*)">its (\d+) rows?</a>', h)
    assert [[int(x[1:]) for x in ids.split()] for ids, _ in links] == \
        [c["rows"] for c in d.get("causes", [])], page   # the likely causes, each with its rows
    print(page.split("/")[-1], tiles, d["verdict"], len(links), "cause(s)")
PYEOF
grep -q '<svg class="chart layers"' "$TMP/bad.html" && grep -q 'hidden\[i\] vs golden' "$TMP/bad.html" \
  && ok "norm-no-offset: the per-layer curve of the hidden states" || bad "no per-layer curve"
grep -q '<svg class="chart drift"' "$TMP/bad.html" && grep -q 'layer_00/recurrent_state' "$TMP/bad.html" \
  && ok "long decode: the drift curves (logits + state buffers per layer)" || bad "no drift chart"
grep -q '<svg class="chart bars"' "$TMP/ok.html" && ok "the tolerance-ratio chart" || bad "no ratio chart"

# ---- written like the JSON ----------------------------------------------------------------
cp -r "$SRC/fixtures/tiny-f32-tied-flat" "$TMP/fx"
sum0=$(sha256sum "$TMP/fx/golden.h5")
"$QC" check --golden "$TMP/fx/golden.h5" --filter len005 --quiet --html "$TMP/fx/golden.h5" \
  > "$TMP/in.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q -- "--html" "$TMP/in.out" && [ "$(sha256sum "$TMP/fx/golden.h5")" = "$sum0" ] \
  && ok "--html = the golden: exit 2, the golden untouched" || bad "--html = the golden: exit $rc"
"$QC" check --golden "$G" --filter len005 --quiet --json "$TMP/same" --html "$TMP/same" \
  > "$TMP/same.out" 2>&1
rc=$?
[ $rc -eq 2 ] && [ ! -e "$TMP/same" ] && ok "--html = --json: exit 2 before any work" \
  || bad "--html = --json: exit $rc"
"$QC" check --golden "$G" --filter len005 --quiet --html "$TMP/nodir/r.html" > "$TMP/nd.out" 2>&1
rc=$?
[ $rc -eq 2 ] && ! grep -q "^verdict" "$TMP/nd.out" && ok "--html in a missing directory: exit 2 first" \
  || bad "--html in a missing directory: exit $rc"
ls -a "$TMP" | grep -q '\.tmp\.' && bad "a temp file left behind" || ok "no temp file left behind"

# ---- the browser --------------------------------------------------------------------------
QC_CHROMIUM="$(qc_chromium_find)"
if [ -z "$QC_CHROMIUM" ]; then
  if [ "${QC_REQUIRE_CHROMIUM:-0}" = 1 ]; then
    bad "chromium not installed, and QC_REQUIRE_CHROMIUM=1 (ci/deps installs it)"
  else
    echo "SKIP: chromium not installed (the browser checks; QC_REQUIRE_CHROMIUM=1 makes this a failure)"
  fi
else
  QC_CHROMIUM_PROFILE="$TMP/profile"
  U="file://$TMP"
  # dom NAME URL check_html.py-dom-args...: load, dump the DOM, no console message, the checks
  dom() {
    local name="$1" url="$2"
    shift 2
    if ! qc_chromium "$TMP/$name.log" --dump-dom "$url" > "$TMP/$name.dom"; then
      bad "chromium --dump-dom $name: failed ($(grep -v dbus "$TMP/$name.log" | tail -2))"
      return
    fi
    if qc_console_errors "$TMP/$name.log" > "$TMP/$name.console"; then
      bad "$name: console messages: $(head -3 "$TMP/$name.console")"
    fi
    $CH dom "$TMP/$name.dom" --script-ok "$@" > "$TMP/$name.chk" 2>&1 \
      && ok "chromium $name: $(cat "$TMP/$name.chk")" || bad "chromium $name: $(cat "$TMP/$name.chk")"
  }
  nrows=$(grep -c '<tr id="r' "$TMP/ok.html")
  dom ok "$U/ok.html?rows=r0+r5+r9" --shown 3 --text "3 of $nrows rows shown (a cause)" \
    --text "PARTIAL" --text "CI can insist: --require "
  dom filter "$U/esc.html?v=FAIL&q=prefill.hidden" --shown 6 --visible-verdicts FAIL \
    --visible-text prefill.hidden --text "6 of $nrows rows shown" --text "FAIL" --no-tag img \
    --text "$EVIL/len005"
  png="$BUILD/html-report.png"
  rm -f "$png"
  qc_chromium "$TMP/shot.log" --window-size=1200,2000 --screenshot="$png" "$U/bad.html" > /dev/null
  $CH png "$png" 1200 2000 > "$TMP/png.chk" 2>&1 && ! qc_console_errors "$TMP/shot.log" > /dev/null \
    && ok "screenshot of the failing run's page: $png ($(cat "$TMP/png.chk"))" \
    || bad "screenshot: $(cat "$TMP/png.chk")"
fi

echo "test_html_report: $fails failure(s) in $(( $(date +%s) - t0 )) s"
[ $fails -eq 0 ]
