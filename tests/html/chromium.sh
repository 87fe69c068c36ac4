# tests/html/chromium.sh — headless chromium for the HTML report test (sourced, bash). Installs
# nothing: ci/deps installs Debian's chromium.
#   qc_chromium_find          prints the browser's path (chromium, chromium-browser), or fails
#   qc_chromium LOG ARGS...   runs it headless on a throw-away profile, its log (stderr, with
#                             the page's console messages) to LOG; at most 60 s
#   qc_console_errors LOG     prints the console messages of LOG (any level: chromium logs a
#                             page's console.* and uncaught exceptions as "...:CONSOLE(...)")
#                             and CSP violations; fails (1) when there are none
# The caller sets QC_CHROMIUM_PROFILE (a fresh directory) before calling qc_chromium.

qc_chromium_find() {
  local c
  for c in chromium chromium-browser; do
    if command -v "$c" > /dev/null 2>&1; then command -v "$c"; return 0; fi
  done
  return 1
}

qc_chromium() {
  local log="$1"
  shift
  timeout 60 "$QC_CHROMIUM" --headless=new --disable-gpu --no-sandbox --disable-dev-shm-usage \
    --no-first-run --no-default-browser-check --disable-extensions --disable-sync \
    --hide-scrollbars --user-data-dir="$QC_CHROMIUM_PROFILE" --enable-logging=stderr --v=0 \
    "$@" 2> "$log"
}

qc_console_errors() {
  grep -E ':CONSOLE|Uncaught|Content Security Policy|Refused to' "$1"
}
