#!/usr/bin/env bash
# test_ci_ergonomics.sh <qwen-conform> <source-dir> — the CI-facing behaviour of `check`, one
# block per feature, on fixtures/tiny-f32-tied-flat (reference backend, len001 / len005):
#   1 exit-code precedence (a failure and an error in one run: exit 2) and the one summary
#   2 JUnit valid against tests/data/junit.xsd and the Jenkins xunit plugin's schema
#   3 JSON: the structured first_divergent_layer of a failing row, summary.exit_code
#   4 --maxfail N / -x          5 --durations N          6 --rerun-failed REPORT.json
#   7 --model DIR (and the hint at it)                   8 --atol / --rtol CLASS=V
#   9 a partial policy merged over the built-in defaults
#  10 a policy override that can never match: a warning in every report
#  11 qwen-conform policy --print
# Failures are made with the hidden test flag --inject-fault norm-no-offset:1 (layer 1's input
# norm applied as w instead of 1 + w: layer 1 is the first divergent layer).
set -u
QC="$1"
SRC="$2"
ONE="$SRC/fixtures/tiny-f32-tied-flat"
PY=/usr/bin/python3
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }
SEL=(--golden "$ONE" --backend reference --filter 'len00[15]')
FAULT=(--inject-fault norm-no-offset:1)
HAVE_XMLLINT=0
command -v xmllint >/dev/null 2>&1 && HAVE_XMLLINT=1

# run NAME CMD...: stdout in $TMP/NAME.out, stderr in $TMP/NAME.err, exit code in $rc
run() {
  local name="$1"; shift
  "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
  rc=$?
}
expect_rc() { # want what
  if [ "$rc" -eq "$1" ]; then ok "$2 (exit $rc)"; else bad "$2: exit $rc, expected $1"; fi
}
last_line() { tail -n 1 "$TMP/$1.out"; }
both_schemas() { # file what
  if [ $HAVE_XMLLINT = 0 ]; then echo "note - xmllint not installed (libxml2-utils): $2 not validated"; return; fi
  xmllint --noout --schema "$SRC/tests/data/junit.xsd" "$1" 2>"$TMP/xerr" \
    && ok "$2: valid against tests/data/junit.xsd" || { bad "$2: junit.xsd"; cat "$TMP/xerr"; }
  xmllint --noout --schema "$SRC/tests/data/junit-jenkins.xsd" "$1" 2>"$TMP/xerr" \
    && ok "$2: valid against tests/data/junit-jenkins.xsd" || { bad "$2: junit-jenkins.xsd"; cat "$TMP/xerr"; }
}

# ---- 1. exit-code precedence: a conformance failure and an I/O error in one run --------------
# a directory with the fixture (golden + model, failing under the fault) and a corrupt golden
mkdir -p "$TMP/mix"
cp -r "$ONE" "$TMP/mix/good"
echo "not hdf5" > "$TMP/mix/broken.h5"
run mix "$QC" --golden "$TMP/mix" --backend reference --filter 'len001/reference/static' "${FAULT[@]}" \
  --quiet --json "$TMP/mix.json" --junit "$TMP/mix.xml"
expect_rc 2 "failure + error: the error wins"
n_sum=$(grep -cE '^[0-9]+ passed, [0-9]+ failed' "$TMP/mix.out")
[ "$n_sum" -eq 1 ] && ok "one summary line" || bad "$n_sum 'N passed, M failed' lines"
last_line mix | grep -qE '^[0-9]+ passed, [1-9][0-9]* failed, [0-9]+ skipped$' \
  && ok "last line: $(last_line mix)" || bad "last line: '$(last_line mix)'"
grep -qE '^[0-9]+ checks in .*: 1 error; exit 2' "$TMP/mix.out" \
  && ok "the error is counted on the first summary line" || { bad "first summary line"; tail -n 3 "$TMP/mix.out"; }
$PY - "$TMP/mix.json" "$(last_line mix)" <<'EOF' && ok "JSON keeps the failures (exit_code 2, failed = the summary's)" || bad "JSON of the mixed run"
import json, re, sys
r = json.load(open(sys.argv[1]))
s = r["summary"]
assert s["exit_code"] == 2 and s["errors"] == 1 and s["failed"] > 0, s
p, f, k = map(int, re.match(r"(\d+) passed, (\d+) failed, (\d+) skipped$", sys.argv[2]).groups())
assert (p, f, k) == (s["passed"], s["failed"], s["skipped"]), (sys.argv[2], s)
verdicts = {c["verdict"] for c in r["checks"]}
assert {"FAIL", "ERROR"} <= verdicts, verdicts
EOF
grep -q '<failure ' "$TMP/mix.xml" && grep -q '<error ' "$TMP/mix.xml" \
  && ok "JUnit keeps the failures next to the error" || bad "JUnit of the mixed run"
both_schemas "$TMP/mix.xml" "JUnit of the mixed run"

# ---- 2. JUnit: no testsuites@skipped, valid against both schemas ----------------------------
run ok "$QC" "${SEL[@]}" --quiet --json "$TMP/ok.json" --junit "$TMP/ok.xml"
expect_rc 0 "clean run"
$PY - "$TMP/ok.xml" <<'EOF' && ok "JUnit: skipped counted per testsuite, not on testsuites" || bad "JUnit skipped attributes"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "testsuites" and "skipped" not in root.attrib, root.attrib
s = root.find("testsuite")
assert int(s.get("skipped")) == len(s.findall("testcase/skipped")) > 0, s.attrib
EOF
both_schemas "$TMP/ok.xml" "JUnit of a clean run"
if [ $HAVE_XMLLINT = 1 ]; then
  sed 's/<testsuites \([^>]*\)>/<testsuites \1 skipped="1">/' "$TMP/ok.xml" > "$TMP/old.xml"
  xmllint --noout --schema "$SRC/tests/data/junit-jenkins.xsd" "$TMP/old.xml" 2>/dev/null \
    && bad "junit-jenkins.xsd accepts testsuites@skipped (vacuous)" \
    || ok "junit-jenkins.xsd rejects testsuites@skipped (the old output)"
fi

# ---- 3. JSON: structured first_divergent_layer -------------------------------------------------
run fdl "$QC" "${SEL[@]}" --filter 'len005/reference/dynamic' "${FAULT[@]}" --quiet --json "$TMP/fdl.json"
expect_rc 1 "injected fault fails"
$PY - "$TMP/fdl.json" <<'EOF' && ok "first_divergent_layer {kind: layer, layer: 1, source: hidden} on the failing rows" || bad "first_divergent_layer"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["schema_version"] == 1
rows = [c for c in r["checks"] if c["verdict"] == "FAIL" and c["check"] == "prefill.logits"]
assert rows, "no failing prefill.logits row"
for c in rows:
    l = c["first_divergent_layer"]
    assert l["kind"] == "layer" and l["layer"] == 1 and l["source"] == "hidden", l
assert all("first_divergent_layer" not in c for c in r["checks"] if c["verdict"] == "PASS")
EOF

# ---- 4. --maxfail N / -x ---------------------------------------------------------------------
run all "$QC" "${SEL[@]}" "${FAULT[@]}" --quiet --json "$TMP/all.json"
run x "$QC" "${SEL[@]}" "${FAULT[@]}" --quiet -x --json "$TMP/x.json" --junit "$TMP/x.xml"
expect_rc 1 "-x"
grep -q '^stopped early: --maxfail 1 reached' "$TMP/x.out" && ok "-x: the summary says it stopped early" \
  || bad "-x: no 'stopped early' line"
last_line x | grep -qE '^[0-9]+ passed, [1-9][0-9]* failed, [0-9]+ skipped$' && ok "-x: last line $(last_line x)" \
  || bad "-x: last line '$(last_line x)'"
$PY - "$TMP/x.json" "$TMP/all.json" <<'EOF' && ok "-x: the first run finished with every check, nothing after it ran; JSON says stopped_early" || bad "-x report"
import json, sys
x, a = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert x["summary"]["stopped_early"] is True and x["summary"]["maxfail"] == 1, x["summary"]
assert a["summary"]["stopped_early"] is False
runs = lambda r: sorted({(c["case"], c["backend"], c["mode"]) for c in r["checks"] if c["case"] != "_model"})
assert runs(x) == [("len001", "reference", "static")], runs(x)
first = lambda r: [c["check"] for c in r["checks"] if (c["case"], c["mode"]) == ("len001", "static")]
assert first(x) == first(a), (first(x), first(a))
assert len(runs(a)) > 1
EOF
grep -q 'name="stopped_early"' "$TMP/x.xml" && ok "-x: JUnit property stopped_early" || bad "-x: JUnit property"
run mf "$QC" "${SEL[@]}" "${FAULT[@]}" --quiet --maxfail 20 --json "$TMP/mf.json"
expect_rc 1 "--maxfail 20"
$PY - "$TMP/mf.json" <<'EOF' && ok "--maxfail 20: stops after the run that reached 20 failing checks" || bad "--maxfail 20"
import json, sys
r = json.load(open(sys.argv[1]))
s = r["summary"]
assert s["stopped_early"] and s["failed"] + s["errors"] >= 20, s
runs = sorted({(c["case"], c["mode"]) for c in r["checks"] if c["case"] != "_model"})
assert runs == [("len001", "dynamic"), ("len001", "static")], runs
EOF
run mfok "$QC" "${SEL[@]}" --quiet --maxfail 1
expect_rc 0 "--maxfail on a passing run"
grep -q 'stopped early' "$TMP/mfok.out" && bad "--maxfail on a passing run says it stopped" || ok "--maxfail: no stop when nothing fails"
run mfbad "$QC" "${SEL[@]}" --maxfail 0
expect_rc 2 "--maxfail 0 is a usage error"

# ---- 5. --durations N --------------------------------------------------------------------------
run dur "$QC" "${SEL[@]}" --quiet --durations 3
expect_rc 0 "--durations 3"
$PY - "$TMP/dur.out" <<'EOF' && ok "--durations 3: the 3 slowest runs, slowest first, before the summary" || { bad "--durations"; cat "$TMP/dur.out"; }
import re, sys
lines = open(sys.argv[1]).read().splitlines()
i = [k for k, l in enumerate(lines) if l.startswith("== slowest 3 durations")]
assert len(i) == 1, lines
rows = lines[i[0] + 1:i[0] + 4]
secs = []
for l in rows:
    m = re.match(r"^ *([0-9.]+)s  tiny-f32-tied-flat/[^/ ]+/[^/ ]+/[^/ ]+  \(\d+ checks?\)$", l)
    assert m, l
    secs.append(float(m.group(1)))
assert secs == sorted(secs, reverse=True), secs
assert re.match(r"^\d+ passed, 0 failed, \d+ skipped$", lines[-1]), lines[-1]
EOF
run dur0 "$QC" "${SEL[@]}" --quiet --durations 0
n=$(grep -cE '^ *[0-9.]+s  tiny-f32-tied-flat/' "$TMP/dur0.out")
# len001 + len005 x 3 modes + the file-level rows (_model/-/-)
[ "$n" -eq 7 ] && ok "--durations 0: every run ($n)" || bad "--durations 0: $n lines"

# ---- 6. --rerun-failed REPORT.json ----------------------------------------------------------------
run r1 "$QC" "${SEL[@]}" --filter 'len001/reference/static|len005/reference/nokv' "${FAULT[@]}" --quiet --json "$TMP/r1.json"
expect_rc 1 "a report with two failing runs"
# another tool version wrote it: still accepted (same schema_version)
$PY - "$TMP/r1.json" "$TMP/r1v.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
r["tool_version"] = "0.0.1 (someothercommit)"
json.dump(r, open(sys.argv[2], "w"))
EOF
run rr "$QC" "${SEL[@]}" --quiet --json "$TMP/rr.json" --rerun-failed "$TMP/r1v.json"
expect_rc 0 "--rerun-failed (without the fault: the reruns pass)"
$PY - "$TMP/rr.json" <<'EOF' && ok "--rerun-failed ran exactly the failing (stem, case, backend, mode)s" || bad "--rerun-failed selection"
import json, sys
r = json.load(open(sys.argv[1]))
runs = sorted({(c["stem"], c["case"], c["backend"], c["mode"]) for c in r["checks"] if c["case"] != "_model"})
assert runs == [("tiny-f32-tied-flat", "len001", "reference", "static"),
                ("tiny-f32-tied-flat", "len005", "reference", "nokv")], runs
EOF
grep -q 'report of qwen-conform 0.0.1 (someothercommit)' "$TMP/rr.err" && ok "--rerun-failed names the report's tool version" \
  || bad "--rerun-failed stderr: $(cat "$TMP/rr.err")"
run rl "$QC" "${SEL[@]}" --list --rerun-failed "$TMP/r1.json"
[ "$(cat "$TMP/rl.out")" = "$(printf 'tiny-f32-tied-flat/len001/reference/static\ntiny-f32-tied-flat/len005/reference/nokv')" ] \
  && ok "--list --rerun-failed lists the reruns" || bad "--list --rerun-failed: $(cat "$TMP/rl.out")"
run rnone "$QC" "${SEL[@]}" --rerun-failed "$TMP/ok.json"
expect_rc 3 "--rerun-failed of a report without failures: nothing to rerun"
$PY -c "import json,sys; r=json.load(open(sys.argv[1])); r['schema_version']=2; json.dump(r, open(sys.argv[2],'w'))" "$TMP/r1.json" "$TMP/r1s.json"
run rver "$QC" "${SEL[@]}" --rerun-failed "$TMP/r1s.json"
expect_rc 2 "--rerun-failed of another report schema_version"
grep -q 'schema_version 2; this qwen-conform reads check reports of schema_version 1' "$TMP/rver.err" \
  && ok "the schema_version mismatch is named" || bad "schema message: $(cat "$TMP/rver.err")"
run rself "$QC" "${SEL[@]}" --rerun-failed "$TMP/r1.json" --json "$TMP/r1.json"
expect_rc 2 "--json onto the report being rerun is refused"

# ---- 7. --model DIR ----------------------------------------------------------------------------
mkdir -p "$TMP/copied"
cp "$ONE/golden.h5" "$TMP/copied/golden.h5"
run nomodel "$QC" --golden "$TMP/copied/golden.h5" --backend reference --filter 'len001/reference/static' --quiet
expect_rc 2 "a copied golden: its model_path points nowhere"
grep -q 'pass --model DIR' "$TMP/nomodel.out" && ok "the 'model not found' error hints at --model" \
  || { bad "no --model hint"; cat "$TMP/nomodel.out"; }
run model "$QC" --golden "$TMP/copied/golden.h5" --backend reference --filter 'len001/reference/static' --quiet \
  --model "$ONE/model" --json "$TMP/model.json"
expect_rc 0 "--model DIR overrides the golden's model_path"
$PY -c "import json,sys; r=json.load(open(sys.argv[1])); assert [c['verdict'] for c in r['checks'] if c['check']=='model_hash'] == ['PASS']" "$TMP/model.json" \
  && ok "--model: model_hash still checked (PASS)" || bad "--model: model_hash"
run modelbad "$QC" --golden "$TMP/copied/golden.h5" --model "$TMP/copied"
expect_rc 2 "--model without config.json"

# ---- 8. --atol / --rtol CLASS=V ------------------------------------------------------------------
cat > "$TMP/zero.json" <<'EOF'
{"schema_version": 1, "defaults": {
 "logits": {"atol": 0, "rtol": 0}, "hidden": {"atol": 0, "rtol": 0},
 "k_cache": {"atol": 0, "rtol": 0}, "v_cache": {"atol": 0, "rtol": 0},
 "conv_state": {"atol": 0, "rtol": 0}, "recurrent_state": {"atol": 0, "rtol": 0}}}
EOF
Z=(--golden "$ONE" --backend reference --filter 'len005/reference/dynamic' --policy "$TMP/zero.json" --quiet)
run zero "$QC" "${Z[@]}"
expect_rc 1 "a zero-tolerance policy fails on float32 noise"
TOLS=()
for c in logits hidden k_cache v_cache conv_state recurrent_state; do TOLS+=(--atol "$c=0.01" --rtol "$c=0.01"); done
run tols "$QC" "${Z[@]}" "${TOLS[@]}" --rtol logits=0.02 --json "$TMP/tols.json"
expect_rc 0 "--atol / --rtol CLASS=V relax every class"
$PY - "$TMP/tols.json" <<'EOF' && ok "--atol / --rtol: the tolerances used and the policy named in the JSON (later wins)" || bad "--atol JSON"
import json, sys
r = json.load(open(sys.argv[1]))
lg = [c for c in r["checks"] if c["check"] == "prefill.logits"][0]["tolerance"]
assert lg["atol"] == 0.01 and lg["rtol"] == 0.02, lg
hd = [c for c in r["checks"] if c["check"] == "prefill.hidden"][0]["tolerance"]
assert hd["atol"] == 0.01 and hd["rtol"] == 0.01, hd
assert "--atol logits=0.01" in r["policy"] and "--rtol logits=0.02" in r["policy"], r["policy"]
EOF
run tolbad "$QC" "${Z[@]}" --atol logit=0.1
expect_rc 2 "--atol with an unknown class"
grep -q "unknown tensor class 'logit'" "$TMP/tolbad.err" && ok "the unknown class is named" || bad "tolbad: $(cat "$TMP/tolbad.err")"
run tolneg "$QC" "${Z[@]}" --rtol hidden=-1
expect_rc 2 "--rtol with a negative value"

# ---- 9. a partial policy file merged over the built-in defaults -----------------------------
echo '{"schema_version":1,"defaults":{"logits":{"atol":0.01}}}' > "$TMP/partial.json"
run partial "$QC" --golden "$ONE" --backend reference --filter 'len005/reference/dynamic' --policy "$TMP/partial.json" \
  --quiet --json "$TMP/partial.json.out"
expect_rc 0 "a partial policy (only logits atol) runs"
$PY - "$TMP/partial.json.out" <<'EOF' && ok "partial policy: logits atol 0.01, every other default built-in" || bad "partial policy merge"
import json, sys
r = json.load(open(sys.argv[1]))
tol = {c["check"]: c["tolerance"] for c in r["checks"] if "tolerance" in c and c["mode"] == "dynamic"}
assert tol["prefill.logits"] == {"kind": "allclose", "atol": 0.01, "rtol": 0.001, "max_kl": 5e-08}, tol["prefill.logits"]
assert tol["prefill.hidden"]["atol"] == 0.0005 and tol["prefill.hidden"]["rtol"] == 0.0005
assert tol["prefill.recurrent_state"]["atol"] == 0.0001, tol["prefill.recurrent_state"]
EOF

# ---- 10. an override that can never match: a warning in every report ------------------------
cat > "$TMP/typo.json" <<'EOF'
{"schema_version": 1,
 "overrides": [{"case": "len0005", "tensor": "logits", "atol": 1, "reason": "typo'd case name"},
               {"case": "len005", "tensor": "hidden", "atol": 1e-3, "reason": "matches"}]}
EOF
run typo "$QC" --golden "$ONE" --backend reference --filter 'len001/reference/static' --policy "$TMP/typo.json" \
  --quiet --json "$TMP/typo.json.out" --junit "$TMP/typo.xml"
expect_rc 0 "a typo'd override is a warning, not a failure"
grep -q 'warning: policy .*typo.json: overrides\[0\] {case "len0005", tensor "logits"} can never match' "$TMP/typo.err" \
  && ok "console: the warning on stderr" || { bad "no stderr warning"; cat "$TMP/typo.err"; }
grep -q 'overrides\[1\]' "$TMP/typo.err" && bad "the matching override (a case filtered out) warned" || ok "an override of a case the filter skips is no warning"
grep -qE ': 0 errors, 1 warning; exit 0' "$TMP/typo.out" && ok "the summary counts the warning" || bad "summary: $(tail -n 2 "$TMP/typo.out")"
$PY -c "import json,sys; w=json.load(open(sys.argv[1]))['warnings']; assert len(w)==1 and 'len0005' in w[0], w" "$TMP/typo.json.out" \
  && ok "JSON: the warnings array" || bad "JSON warnings"
grep -q '<system-err>warning: policy .*len0005' "$TMP/typo.xml" && ok "JUnit: <system-err>" || bad "JUnit system-err"
both_schemas "$TMP/typo.xml" "JUnit with warnings"
# the shared fixture policy (its overrides name the other fixtures) on one fixture: no warning
run shared "$QC" --golden "$ONE" --backend reference --filter 'len001/reference/static' --quiet --json "$TMP/shared.json"
$PY -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['warnings']==[] and r['policy'].endswith('fixtures/tolerances.json'), r['warnings']" "$TMP/shared.json" \
  && ok "fixtures/tolerances.json on one fixture: its overrides for the sibling fixtures are no warning" || bad "shared policy warnings"

# ---- 11. qwen-conform policy --print ---------------------------------------------------------------
run print "$QC" policy --print --policy "$TMP/partial.json" --rtol hidden=0.25
expect_rc 0 "policy --print"
$PY - "$TMP/print.out" <<'EOF' && ok "policy --print: every class in full, the merge and --rtol applied" || { bad "policy --print"; cat "$TMP/print.out"; }
import json, sys
p = json.load(open(sys.argv[1]))
d = p["defaults"]
assert sorted(d) == sorted(["logits", "hidden", "k_cache", "v_cache", "conv_state", "recurrent_state"]), d
assert d["logits"] == {"atol": 0.01, "rtol": 0.001, "max_kl": 5e-08}, d["logits"]
assert d["hidden"]["rtol"] == 0.25 and d["hidden"]["atol"] == 0.0005
assert "partial.json + --rtol hidden=0.25" in p["source"], p["source"]
assert p["tie_margin"] == 0.02 and p["overrides"] == []
EOF
cp "$TMP/print.out" "$TMP/printed.json"
run reprint "$QC" policy --print --policy "$TMP/printed.json"
$PY -c "
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
a.pop('source'); b.pop('source')
assert a == b, (a, b)" "$TMP/print.out" "$TMP/reprint.out" && ok "policy --print output loads again as --policy (same policy)" || bad "policy --print round trip"
run pgold "$QC" policy --print --golden "$ONE"
$PY -c "import json,sys; p=json.load(open(sys.argv[1])); assert p['source'].startswith(sys.argv[2]) and len(p['overrides']) > 0, p['source']" \
  "$TMP/pgold.out" "$SRC/fixtures/tolerances.json" && ok "policy --print --golden DIR: the policy check would pick" || bad "policy --print --golden: $(head -c 300 "$TMP/pgold.out")"
run ptypo "$QC" policy --print --policy "$TMP/typo.json" --golden "$ONE"
grep -q 'overrides\[0\] {case "len0005"' "$TMP/ptypo.err" && ok "policy --print --golden warns about the typo'd override" || bad "policy --print warning"
run pnone "$QC" policy
expect_rc 2 "policy without --print"

echo "test_ci_ergonomics.sh: $fails failure(s)"
[ "$fails" -eq 0 ]
