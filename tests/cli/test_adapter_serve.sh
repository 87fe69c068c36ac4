#!/usr/bin/env bash
# test_adapter_serve.sh <qwen-conform> <source-dir> — `qwen-conform adapter-serve PLUGIN.so[,opts]`,
# the child side of the adapter protocol (docs/adapter-protocol.md) serving a runtime plugin:
#   * usage errors and unloadable plugins: exit 2 and not one byte on stdout (no hello);
#   * protocol handling, driven by a small python3 client (stdlib only): hello, error frames for
#     malformed requests while serving on, every op against the built-in reference plugin
#     (shapes, layer order of get_state from config.json, unsupported refusals, fill/reset,
#     option merging), stdout isolation (a plugin that printf()s / write(1)s / reads stdin, built
#     here with cc), a plugin abort() killing only the child, close / EOF -> exit 0, a broken
#     framing -> an error frame and exit 1;
#   * `check --backend isolate:plugin:libqc_plugin_reference.so` gives the same verdicts and the
#     same metric numbers as the in-process `--backend plugin:` (and the same for the optimized
#     plugin). The built-in plugins live next to the qwen-conform binary; when they are not
#     built, those parts print "SKIP: built-in plugins not built".
set -u
QC="$1"
SRC="$2"
BIN_DIR="$(cd "$(dirname "$QC")" && pwd)"
REF_SO="$BIN_DIR/libqc_plugin_reference.so"
OPT_SO="$BIN_DIR/libqc_plugin_optimized.so"
ONE="$SRC/fixtures/tiny-f32-tied-flat"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fails=0

ok()   { echo "ok   - $*"; }
bad()  { echo "FAIL - $*"; fails=$((fails + 1)); }
# expect_rc CODE DESCRIPTION -- command...   (stdin from /dev/null)
expect_rc() {
  local want="$1" what="$2"; shift 3
  "$@" </dev/null >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok "$what (exit $rc)"; else
    bad "$what: exit $rc, expected $want"; tail -n 20 "$TMP/out" "$TMP/err"; fi
}
no_stdout() { [ -s "$TMP/out" ] && bad "$1: wrote $(wc -c < "$TMP/out") bytes on stdout" || ok "$1: nothing on stdout (no hello)"; }

# ---- usage / load errors: exit 2, no hello ---------------------------------------------------
expect_rc 2 "adapter-serve without a plugin" -- "$QC" adapter-serve
no_stdout "no plugin"
expect_rc 0 "adapter-serve --help" -- "$QC" adapter-serve --help
grep -q "adapter-serve PLUGIN.so" "$TMP/out" && ok "--help names the usage" || bad "--help text"
"$QC" --help | grep -q "adapter-serve" && ok "qwen-conform --help lists adapter-serve" || bad "main usage lacks adapter-serve"
expect_rc 2 "a plugin that does not exist" -- "$QC" adapter-serve "$TMP/nope.so,threads=1"
no_stdout "missing plugin"
grep -q "nope.so" "$TMP/err" && ok "the missing plugin is named on stderr" || bad "missing plugin not named: $(cat "$TMP/err")"
echo "not an ELF file" > "$TMP/fake.so"
expect_rc 2 "a file that is not a shared library" -- "$QC" adapter-serve "$TMP/fake.so"
no_stdout "not a library"
grep -q "fake.so" "$TMP/err" && ok "the bad library is named on stderr" || bad "bad library not named"

# ---- small test plugins built here: noisy (prints on stdout, reads stdin, aborts on demand) ---
CC="${CC:-cc}"
NOISY=""
if command -v "$CC" >/dev/null 2>&1; then
  cat > "$TMP/noisy.c" <<'EOF'
/* A plugin that misbehaves the way real runtimes do: chatter on stdout, reads stdin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "qc/qc_runtime_plugin.h"
#define V 8
#define H 4
#define L 2
static char err_[256] = "no error";
typedef struct { int pos; int last_n; int32_t last_tok[64]; } noisy;
__attribute__((constructor)) static void chatter(void) { printf("NOISE from the constructor\n"); fflush(stdout); }
static int n_open(const char *dir, const char *opt, qc_plugin_info *info, void **h) {
    printf("NOISE open %s\n", opt); fflush(stdout);
    write(1, "NOISE raw write(1) in open\n", 27);
    char c; ssize_t k = read(0, &c, 1);           /* fd 0 must be /dev/null: EOF at once */
    if (strstr(opt, "fail")) { snprintf(err_, sizeof err_, "noisy: asked to fail (%s)", dir); *h = NULL; return QC_PLUGIN_ERROR; }
    if (strstr(opt, "weird")) { snprintf(err_, sizeof err_, "noisy: unknown option 'weird'"); *h = NULL; return QC_PLUGIN_UNSUPPORTED; }
    noisy *n = calloc(1, sizeof *n);
    info->vocab_size = V; info->hidden_size = H; info->n_layers = L;
    info->max_tokens_per_call = 64; info->max_context_len = 0;
    info->caps = QC_CAP_HIDDEN | QC_CAP_STATE_READ; /* state_read announced, get_state NULL */
    snprintf(info->name, sizeof info->name, "noisy opts=[%s] stdin=%d", opt, (int)k);
    *h = n; return QC_PLUGIN_OK;
}
static int n_reset(void *h) { ((noisy *)h)->pos = 0; return QC_PLUGIN_OK; }
static int n_forward(void *h, const int32_t *t, int32_t n, int32_t sp, int32_t all, float *lg) {
    noisy *x = h;
    printf("NOISE forward n=%d\n", (int)n); fflush(stdout);
    if (t[0] == 99) abort();                         /* a GGML_ASSERT */
    if (t[0] == 98) { snprintf(err_, sizeof err_, "noisy: token 98 refused"); return QC_PLUGIN_ERROR; }
    if (n > 64) { snprintf(err_, sizeof err_, "noisy: too many"); return QC_PLUGIN_ERROR; }
    int r0 = all ? 0 : n - 1;
    for (int i = r0; i < n; i++)
        for (int v = 0; v < V; v++) lg[(i - r0) * V + v] = (float)(t[i] * 1000 + (sp + i) * 10 + v) + 0.5f;
    memcpy(x->last_tok, t, (size_t)n * sizeof *t); x->last_n = n; x->pos = sp + n;
    return QC_PLUGIN_OK;
}
static int n_hidden(void *h, int32_t idx, float *dst) {
    noisy *x = h;
    for (int i = 0; i < x->last_n; i++)
        for (int c = 0; c < H; c++) dst[i * H + c] = (float)(idx * 100 + x->last_tok[i] + c) - 0.25f;
    return QC_PLUGIN_OK;
}
static void n_close(void *h) { free(h); }
static const char *n_err(void *h) { (void)h; return err_; }
static const qc_runtime_plugin api = {
#ifdef BAD_ABI
    .abi_version = 7,
#else
    .abi_version = QC_PLUGIN_ABI_VERSION,
#endif
    .struct_size = sizeof(qc_runtime_plugin), .open = n_open, .reset = n_reset,
    .forward = n_forward, .close = n_close, .last_error = n_err, .get_hidden = n_hidden};
__attribute__((visibility("default"))) const qc_runtime_plugin *qc_runtime_plugin_entry(void) { return &api; }
EOF
  if "$CC" -shared -fPIC -O1 -w -I"$SRC/include" -o "$TMP/libnoisy.so" "$TMP/noisy.c" 2>"$TMP/ccerr" &&
     "$CC" -shared -fPIC -O1 -w -DBAD_ABI -I"$SRC/include" -o "$TMP/libbadabi.so" "$TMP/noisy.c" 2>>"$TMP/ccerr"; then
    NOISY="$TMP/libnoisy.so"
    ok "built the noisy test plugin with $CC"
  else
    bad "cannot build the noisy test plugin"; cat "$TMP/ccerr"
  fi
else
  echo "note - no C compiler ($CC): the stdout-isolation and abort tests are skipped"
fi
if [ -n "$NOISY" ]; then
  expect_rc 2 "a plugin with the wrong ABI version" -- "$QC" adapter-serve "$TMP/libbadabi.so"
  no_stdout "wrong ABI version"
  grep -q "ABI version 7" "$TMP/err" && ok "the ABI mismatch is explained" || bad "ABI message: $(cat "$TMP/err")"
fi

# ---- the protocol client ---------------------------------------------------------------------
cat > "$TMP/client.py" <<'EOF'
"""A minimal host of the adapter protocol (stdlib only) driving `qwen-conform adapter-serve`."""
import json, math, os, select, struct, subprocess, sys, time
from array import array

QC, SRC, REF, NOISY, TMP = sys.argv[1:6]
fails = 0

def ok(m): print("ok   - " + m)
def bad(m):
    global fails
    fails += 1
    print("FAIL - " + m)
def check(cond, m):
    ok(m) if cond else bad(m)
    return cond

class Child:
    def __init__(self, spec, tag):
        self.err_path = os.path.join(TMP, "stderr-%s.txt" % tag)
        self.errf = open(self.err_path, "wb")
        self.p = subprocess.Popen([QC, "adapter-serve", spec], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.errf)
        self.out = self.p.stdout.fileno()
    def read_exact(self, n, timeout=60):
        buf, end = b"", time.time() + timeout
        while len(buf) < n:
            r, _, _ = select.select([self.out], [], [], max(0.0, end - time.time()))
            if not r: raise TimeoutError("no answer within %d s" % timeout)
            b = os.read(self.out, n - len(buf))
            if not b: raise EOFError("EOF after %d of %d bytes" % (len(buf), n))
            buf += b
        return buf
    def frame(self):
        magic, hl, pl = struct.unpack("<4sIQ", self.read_exact(16))
        if magic != b"QCAP": raise ValueError("bad magic %r: stdout is not only frames" % magic)
        h = json.loads(self.read_exact(hl).decode("utf-8"))
        payload = self.read_exact(pl) if pl else b""
        tensors, off = {}, 0
        for t in h.get("tensors", []):
            n = 1
            for d in t["shape"]: n *= d
            a = array("f"); a.frombytes(payload[off:off + 4 * n])
            if sys.byteorder != "little": a.byteswap()
            tensors[t["name"]] = (t["shape"], a)
            off += 4 * n
        if off != pl: raise ValueError("payload_len %d != %d listed" % (pl, off))
        return h, tensors, [t["name"] for t in h.get("tensors", [])]
    def send_raw(self, data):
        self.p.stdin.write(data); self.p.stdin.flush()
    def send(self, header, payload=b""):
        raw = header if isinstance(header, bytes) else json.dumps(header).encode()
        self.send_raw(struct.pack("<4sIQ", b"QCAP", len(raw), len(payload)) + raw + payload)
    def req(self, header, payload=b""):
        self.send(header, payload)
        return self.frame()
    def finish(self, timeout=10):
        try: rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill(); rc = self.p.wait()
        self.errf.close()
        return rc
    def stderr(self):
        if not self.errf.closed: self.errf.flush()
        return open(self.err_path, "rb").read().decode("utf-8", "replace")

def is_err(h, unsupported=None):
    if h.get("type") != "error" or not isinstance(h.get("message"), str): return False
    return unsupported is None or bool(h.get("unsupported")) == unsupported

def model_cfg(model_dir):
    """(V, H, L, [is full attention] per layer) from config.json."""
    c = json.load(open(os.path.join(model_dir, "config.json")))
    c = c.get("text_config", c)
    n = c["num_hidden_layers"]
    if "layer_types" in c: kinds = [t == "full_attention" for t in c["layer_types"]]
    else: kinds = [(i + 1) % c.get("full_attention_interval", 4) == 0 for i in range(n)]
    return c["vocab_size"], c["hidden_size"], n, kinds

CAPS = {"hidden", "state_read", "state_fill", "threads", "dn_kernel", "chunk_size", "snapshot",
        "sequences", "trim", "router", "mlp_in"}

# ---- against the built-in reference plugin -----------------------------------------------------
if REF:
    model = os.path.join(SRC, "fixtures", "tiny-rope-legacy-8layer", "model")
    V, H, L, kinds = model_cfg(model)
    c = Child(REF + ",max_context=16", "ref")
    h, _, _ = c.frame()
    check(h == {"type": "hello", "protocol": "qwen-conform-adapter", "version": 1,
                "name": "adapter-serve libqc_plugin_reference.so"}, "hello: %s" % h)
    # malformed requests: an error frame each, and the child serves on
    h, _, _ = c.req(b"this is not JSON")
    check(is_err(h), "header that is not JSON -> error frame")
    h, _, _ = c.req(b"[1, 2, 3]")
    check(is_err(h), "header that is a JSON array -> error frame")
    h, _, _ = c.req({"no_op": 1})
    check(is_err(h), "request without op -> error frame")
    h, _, _ = c.req({"op": "frobnicate"})
    check(is_err(h) and "frobnicate" in h["message"], "unknown op -> error frame naming it")
    h, _, _ = c.req({"op": "forward", "tokens": [1], "start_pos": 0})
    check(is_err(h), "forward before open -> error frame")
    h, _, _ = c.req({"op": "open"})
    check(is_err(h), "open without model_dir -> error frame")
    h, _, _ = c.req({"op": "open", "model_dir": os.path.join(TMP, "no-model")})
    check(is_err(h) and len(h["message"]) > 0, "open of a missing model -> the plugin's error: %s" % h.get("message"))
    h, _, _ = c.req({"op": "open", "model_dir": model, "options": "max_tokens=8"})
    info = h.get("info", {})
    check(h.get("type") == "ok", "open answered ok")
    check((info.get("vocab_size"), info.get("hidden_size"), info.get("n_layers")) == (V, H, L),
          "info dims = config.json's V %d, H %d, L %d: %s" % (V, H, L, info))
    check(info.get("max_context_len") == 16 and info.get("max_tokens_per_call") == 8,
          "spec options (max_context=16) and request options (max_tokens=8) both reach open")
    caps = info.get("capabilities")
    check(isinstance(caps, list) and set(caps) <= CAPS and {"hidden", "state_read", "state_fill"} <= set(caps),
          "capabilities are strings: %s" % caps)
    check(isinstance(info.get("name"), str) and "reference" in info["name"], "info name: %s" % info.get("name"))
    h, _, _ = c.req({"op": "reset"})
    check(h.get("type") == "ok", "reset ok")
    for bad_tokens, what in (([], "empty"), ([1, 1.5], "non-integer"), ([1, "x"], "string"),
                             ([2 ** 40], "beyond int32"), ([True], "boolean"), ("1,2", "not an array")):
        h, _, _ = c.req({"op": "forward", "tokens": bad_tokens, "start_pos": 0})
        check(is_err(h), "forward with %s tokens -> error frame" % what)
    h, _, _ = c.req({"op": "forward", "tokens": [1, 2], "start_pos": -1})
    check(is_err(h), "forward with a negative start_pos -> error frame")
    h, _, _ = c.req({"op": "forward", "tokens": [1, 2], "start_pos": 0, "all_logits": "yes"})
    check(is_err(h), "forward with a non-boolean all_logits -> error frame")
    h, t, names = c.req({"op": "forward", "tokens": [5, 6, 7], "start_pos": 0, "all_logits": True, "hidden": True})
    check(h.get("type") == "ok" and names == ["logits", "hidden", "mlp_in"], "forward: tensors %s" % names)
    check(t.get("logits", [None])[0] == [3, V] and t.get("hidden", [None])[0] == [L + 1, 3, H] and
          t.get("mlp_in", [None])[0] == [L, 3, H],
          "forward shapes logits [3, V], hidden [L+1, 3, H], mlp_in [L, 3, H] (the plugin's get_mlp_in)")
    full_rows = t["logits"][1] if "logits" in t else None
    hidden0 = t["hidden"][1][:3 * H] if "hidden" in t else None
    check(full_rows is not None and all(math.isfinite(x) for x in full_rows), "logits finite")
    h, t, names = c.req({"op": "forward", "tokens": [8], "start_pos": 3, "all_logits": False})
    check(h.get("type") == "ok" and names == ["logits"] and t["logits"][0] == [1, V],
          "forward all_logits false, no hidden: logits [1, V] only")
    # same sequence again from a reset, all_logits false: the last row of the first call
    c.req({"op": "reset"})
    h, t, _ = c.req({"op": "forward", "tokens": [5, 6, 7], "start_pos": 0, "all_logits": False, "hidden": True})
    check(h.get("type") == "ok" and list(t["logits"][1]) == list(full_rows[2 * V:]),
          "all_logits false gives exactly the last row of all_logits true")
    check(list(t["hidden"][1][:3 * H]) == list(hidden0), "hidden is deterministic after reset")
    # get_state: every layer in order, kinds from config.json (full_attention_interval here)
    want = []
    for i, full in enumerate(kinds):
        want += (["layer_%02d/k_cache" % i, "layer_%02d/v_cache" % i] if full else
                 ["layer_%02d/conv_state" % i, "layer_%02d/recurrent_state" % i])
    h, t, names = c.req({"op": "get_state", "n_pos": 5})
    check(h.get("type") == "ok" and names == want, "get_state: %d tensors in layer order (%d full layers)"
          % (len(names), sum(kinds)))
    if h.get("type") == "ok":
        k3 = t["layer_03/k_cache"]
        check(k3[0][1] == 5 and len(k3[0]) == 3, "k_cache [n_kv, n_pos=5, hd]: %s" % k3[0])
        per = k3[0][2]
        used = [k3[1][(g * 5 + p) * per + d] for g in range(k3[0][0]) for p in range(3) for d in range(per)]
        unused = [k3[1][(g * 5 + p) * per + d] for g in range(k3[0][0]) for p in range(3, 5) for d in range(per)]
        check(any(x != 0 for x in used) and all(x == 0 for x in unused),
              "k_cache: used positions written, unused slots exactly 0")
        check(len(t["layer_00/conv_state"][0]) == 2 and len(t["layer_00/recurrent_state"][0]) == 3,
              "conv_state [C, K], recurrent_state [nv, dk, dv]")
    h, _, _ = c.req({"op": "get_state", "n_pos": 17})
    check(is_err(h, unsupported=True), "get_state beyond the capacity -> unsupported error: %s" % h.get("message"))
    h, _, _ = c.req({"op": "get_state", "n_pos": "5"})
    check(is_err(h, unsupported=False), "get_state with a non-integer n_pos -> error frame")
    h, _, _ = c.req({"op": "fill_state", "value": "nan"})
    check(h.get("type") == "ok", "fill_state \"nan\" ok")
    h, t, _ = c.req({"op": "get_state", "n_pos": 16})
    check(h.get("type") == "ok" and all(all(math.isnan(x) for x in a) for _, a in t.values()),
          "after fill_state nan every state element (unused slots too) is NaN")
    h, _, _ = c.req({"op": "fill_state", "value": 2.5})
    h2, t, _ = c.req({"op": "get_state", "n_pos": 4})
    check(h.get("type") == "ok" and all(all(x == 2.5 for x in a) for _, a in t.values()), "fill_state 2.5")
    for v in ("inf", "-inf"):
        h, _, _ = c.req({"op": "fill_state", "value": v})
        check(h.get("type") == "ok", "fill_state \"%s\" ok" % v)
    h, _, _ = c.req({"op": "fill_state", "value": "lots"})
    check(is_err(h), "fill_state with a bad value -> error frame")
    c.req({"op": "reset"})
    h, t, _ = c.req({"op": "get_state", "n_pos": 16})
    check(h.get("type") == "ok" and all(all(x == 0 for x in a) for _, a in t.values()),
          "reset after the fill: every state element exactly 0")
    h, _, _ = c.req({"op": "set_option", "key": "bogus", "value": "1"})
    check(is_err(h, unsupported=True), "set_option of an unknown key -> unsupported error")
    h, _, _ = c.req({"op": "set_option", "key": "dn_kernel", "value": "recurrent"})
    check(h.get("type") == "ok", "set_option dn_kernel recurrent ok")
    h, _, _ = c.req({"op": "set_option", "key": "chunk_size", "value": 3})
    check(h.get("type") == "ok", "set_option with a numeric value ok")
    h, _, _ = c.req({"op": "reset"}, payload=b"\0" * 12)
    check(h.get("type") == "ok", "a request's payload is skipped (framing kept)")
    h, _, _ = c.req({"op": "close"})
    check(h == {"type": "ok"}, "close answered ok")
    check(c.finish() == 0, "exit 0 after close")

    # EOF on stdin: exit 0
    c = Child(REF, "ref-eof")
    c.frame()
    c.req({"op": "open", "model_dir": model})
    c.p.stdin.close()
    check(c.finish() == 0, "EOF on stdin: exit 0")

    # a broken framing: an error frame, then exit 1
    c = Child(REF, "ref-magic")
    c.frame()
    c.send_raw(b"XXXX" + struct.pack("<IQ", 2, 0) + b"{}")
    try:
        h, _, _ = c.frame()
        check(is_err(h) and "magic" in h["message"], "bad magic -> error frame: %s" % h.get("message"))
    except Exception as e:
        bad("bad magic: no error frame (%s)" % e)
    check(c.finish() == 1, "bad magic: exit 1")
    c = Child(REF, "ref-hlen")
    c.frame()
    c.send_raw(b"QCAP" + struct.pack("<IQ", (1 << 20) + 1, 0))
    try:
        h, _, _ = c.frame()
        check(is_err(h) and "header_len" in h["message"], "header_len > 1 MiB -> error frame")
    except Exception as e:
        bad("header_len > 1 MiB: no error frame (%s)" % e)
    check(c.finish() == 1, "header_len > 1 MiB: exit 1")
else:
    print("SKIP: built-in plugins not built (the reference-plugin protocol tests)")

# ---- stdout isolation and crashes: the noisy plugin ----------------------------------------------
if NOISY:
    c = Child(NOISY + ",a=1", "noisy")
    try:
        h, _, _ = c.frame()
        check(h.get("type") == "hello" and h.get("name") == "adapter-serve libnoisy.so",
              "hello despite a constructor printing on stdout")
        h, _, _ = c.req({"op": "open", "model_dir": TMP, "options": "fail=1"})
        check(is_err(h, unsupported=False) and "asked to fail" in h["message"],
              "open failure -> error frame with the plugin's last_error")
        h, _, _ = c.req({"op": "open", "model_dir": TMP, "options": "weird=1"})
        check(is_err(h, unsupported=True), "open answered QC_PLUGIN_UNSUPPORTED -> unsupported error")
        h, _, _ = c.req({"op": "open", "model_dir": TMP, "options": "b=2"})
        info = h.get("info", {})
        check(info.get("name") == "noisy opts=[a=1,b=2] stdin=0",
              "options merged spec-first ('a=1,b=2') and the plugin's stdin is /dev/null: %s" % info.get("name"))
        check(info.get("capabilities") == ["hidden"],
              "a capability whose entry is NULL is not announced: %s" % info.get("capabilities"))
        h, t, names = c.req({"op": "forward", "tokens": [3, 4], "start_pos": 2, "hidden": True})
        want = [4000 + 30 + v + 0.5 if i else 3000 + 20 + v + 0.5 for i in range(2) for v in range(8)]
        check(h.get("type") == "ok" and list(t["logits"][1]) == want, "logits cross the pipe bit for bit")
        wanth = [l * 100 + tok + ch - 0.25 for l in range(3) for tok in (3, 4) for ch in range(4)]
        check(t["hidden"][0] == [3, 2, 4] and list(t["hidden"][1]) == wanth,
              "hidden [L+1, n, H] from get_hidden(0..L), bit for bit")
        h, _, _ = c.req({"op": "forward", "tokens": [98], "start_pos": 0})
        check(is_err(h) and h["message"] == "noisy: token 98 refused", "a plugin error -> its last_error")
        h, _, _ = c.req({"op": "get_state", "n_pos": 1})
        check(is_err(h, unsupported=True), "get_state without the entry -> unsupported error")
        h, _, _ = c.req({"op": "fill_state", "value": 0})
        check(is_err(h, unsupported=True), "fill_state without the entry -> unsupported error")
        h, _, _ = c.req({"op": "set_option", "key": "threads", "value": "2"})
        check(is_err(h, unsupported=True), "set_option without the entry -> unsupported error")
        c.send({"op": "forward", "tokens": [99], "start_pos": 0})
        try:
            c.frame()
            bad("abort in forward: an answer came")
        except EOFError:
            ok("abort in forward: the child's stdout closes (the host sees the death)")
        rc = c.finish()
        check(rc == -6, "the child died of SIGABRT (returncode %s); only the child" % rc)
        err = c.stderr()
        check(err.count("NOISE") >= 5 and "NOISE raw write(1) in open" in err,
              "the plugin's stdout chatter went to stderr")
    except Exception as e:
        bad("noisy plugin conversation: %r; stderr: %s" % (e, c.stderr()[-400:]))
        c.p.kill()

print("client: %d failure(s)" % fails)
sys.exit(1 if fails else 0)
EOF
if [ -f "$REF_SO" ]; then REF_ARG="$REF_SO"; else REF_ARG=""; fi
timeout 300 "$PY" "$TMP/client.py" "$QC" "$SRC" "$REF_ARG" "$NOISY" "$TMP"
rc=$?
[ "$rc" -eq 0 ] && ok "protocol client" || bad "protocol client (exit $rc)"

# ---- isolate:plugin: vs in-process plugin: same verdicts, same numbers ------------------------
if [ ! -f "$REF_SO" ] || [ ! -f "$OPT_SO" ]; then
  echo "SKIP: built-in plugins not built"
  echo "test_adapter_serve.sh: $fails failure(s)"
  [ "$fails" -eq 0 ]
  exit
fi
for so in "$REF_SO" "$OPT_SO"; do
  b="$(basename "$so")"
  expect_rc 0 "check --backend isolate:plugin:$b" -- \
    "$QC" check --golden "$ONE" --backend "isolate:plugin:$so" --filter 'len00[15]' --json "$TMP/a.json"
  expect_rc 0 "check --backend plugin:$b" -- \
    "$QC" check --golden "$ONE" --backend "plugin:$so" --filter 'len00[15]' --json "$TMP/b.json"
  "$PY" - "$TMP/a.json" "$TMP/b.json" <<'EOF' && ok "$b: isolated and in-process give identical verdicts and metrics" || bad "$b: isolated != in-process"
import json, sys
def strip(x):
    if isinstance(x, dict): return {k: strip(v) for k, v in x.items() if k not in ("seconds", "backend")}
    if isinstance(x, list): return [strip(v) for v in x]
    return x
def rows(p):
    return [strip({k: r.get(k) for k in ("stem", "case", "mode", "check", "verdict", "tolerance", "metrics")})
            for r in json.load(open(p))["checks"]]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
if len(a) != len(b):
    sys.exit("%d rows isolated, %d in-process" % (len(a), len(b)))
diff = [(x, y) for x, y in zip(a, b) if x != y]
for x, y in diff[:3]:
    print("  isolated:   %s\n  in-process: %s" % (json.dumps(x)[:400], json.dumps(y)[:400]))
n_metrics = sum(1 for x in a if x.get("metrics"))
print("  %d rows compared, %d with metrics, %d differ" % (len(a), n_metrics, len(diff)))
sys.exit(1 if diff or not n_metrics else 0)
EOF
done

echo "test_adapter_serve.sh: $fails failure(s)"
[ "$fails" -eq 0 ]
