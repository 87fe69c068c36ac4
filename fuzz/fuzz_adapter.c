/* fuzz_adapter.c — libFuzzer target for the host side of the adapter protocol
 * (docs/adapter-protocol.md, harness/host/qc_exec.c): arbitrary bytes as a child's answers.
 *
 * The real client runs unchanged, through its public API: qc_exec_open starts a real child
 * (`/bin/sh -c "exec <this binary> --qc-adapter-child <script>"`), and the conversation below
 * (hello, open, reset, forward with hidden states, get_hidden, get_state of every buffer,
 * fill_state, set_option, a second reset + forward, close) is driven with a short per-request
 * timeout. The child plays the fuzz input as its stdout, one record per answer: a small Perl
 * program (perl_child below; fast to start) or, without /usr/bin/perl, this same executable in
 * "child mode" (LLVMFuzzerInitialize sees the flag before libFuzzer does); both behave alike.
 *
 * Input: a sequence of records  [flags u8][length u16 LE][length bytes]. Record 0 is written
 * at once (the hello); each later record after the child has read the next request frame (so
 * the host's "nothing unsolicited" rule is not tripped by mere pacing). The bytes are written
 * as they are: the fuzzer builds (and breaks) the frames itself, magic "QCAP", header_len,
 * payload_len, the JSON header, the float payload (seeds: fuzz/corpus/fuzz_adapter/, written
 * by fuzz/make_corpus.py; dictionary: fuzz/fuzz_adapter.dict). flags, after the bytes:
 *   bits 0-1  0 wait for the next request; 1 exit with status flags >> 5; 2 hang (the host's
 *             timeout); 3 die by a signal (SIGKILL, or SIGTERM when bit 4 is set)
 *   bit 2     the bytes go to stderr too (the host quotes its last lines in messages)
 *   bit 3     written together with the record before it (one write(): a second,
 *             unsolicited answer already there when the host checks before its next request);
 *             the last record of such a group gives the action, any one bit 2
 * The child exits when its stdin ends, after answering `close`, when the records run out, and
 * when no request comes within CHILD_WAIT_MS (so a frame the host waits to complete ends in
 * EOF, not in the host's timeout).
 *
 * Checks: no crash / leak / UB / hang; every call returns OK, ERROR or UNSUPPORTED; every
 * failure message is "exec adapter '<cmd>': ..." naming the command; a startup failure leaves
 * no handle; info from a successful open is in range; an answer never writes outside the
 * buffers it was given (the buffers are exact-size heap blocks: ASan); the child is always
 * reaped (no zombie is left: waitpid finds nothing after close).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "../harness/host/qc_exec.h"

#define CHILD_FLAG "--qc-adapter-child"
#define HOST_TIMEOUT_S 0.3
#define CHILD_WAIT_MS 150
#define CHILD_WAIT_S_STR "0.15" /* the same, for the Perl child */
#define MAX_INPUT 65536
#define MAX_FAILURES 3 /* stop driving after this many timeouts (bounds the time per input) */

/* The model the host expects (fuzz/tiny_model.h's dims): layer 0 Gated DeltaNet, layer 1 full
 * attention, V 32, H 8, 1 KV head x 4, conv 16 x 4, 2 value heads x 4 x 4. */
enum { V = 32, H = 8, L = 2, NKV = 1, HD = 4, CONV = 16, KCONV = 4, NV = 2, DK = 4, DV = 4 };

/* ===================================================================================== */
/* child mode                                                                            */
/* ===================================================================================== */

static int write_all_fd(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_exact_fd(int fd, uint8_t *p, size_t n) {
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Wait for the next request frame on stdin; 1 read (*is_close set), 0 EOF / timeout / junk. */
static int read_request(int *is_close) {
    struct pollfd p = {0, POLLIN, 0};
    int r;
    while ((r = poll(&p, 1, CHILD_WAIT_MS)) < 0 && errno == EINTR) {}
    if (r <= 0) return 0;
    uint8_t pre[16];
    if (read_exact_fd(0, pre, 16) || memcmp(pre, "QCAP", 4)) return 0;
    uint32_t hl = (uint32_t)pre[4] | (uint32_t)pre[5] << 8 | (uint32_t)pre[6] << 16 |
                  (uint32_t)pre[7] << 24;
    if (hl < 1 || hl > (1u << 20)) return 0;
    char *h = malloc(hl + 1);
    if (!h || read_exact_fd(0, (uint8_t *)h, hl)) { free(h); return 0; }
    h[hl] = '\0';
    *is_close = strstr(h, "\"op\":\"close\"") != NULL;
    free(h);
    return 1;
}

static void child_main(const char *script) {
    static uint8_t buf[MAX_INPUT], out[MAX_INPUT];
    FILE *f = fopen(script, "rb");
    if (!f) _exit(97);
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    size_t at = 0;
    int first = 1, closing = 0;
    while (at + 3 <= n) {
        /* a group: this record and the following ones marked "unsolicited" (bit 3), written
         * in one write() so that the extra frames are there before the next request */
        uint8_t flags = buf[at], act = 0, to_err = 0;
        size_t o = 0;
        int lead = 1;
        while (at + 3 <= n && (lead || (buf[at] & 8))) {
            uint8_t fl = buf[at];
            size_t len = (size_t)buf[at + 1] | (size_t)buf[at + 2] << 8;
            at += 3;
            if (len > n - at) len = n - at;
            memcpy(out + o, buf + at, len);
            o += len;
            at += len;
            act = fl, to_err |= fl & 4, lead = 0;
        }
        if (!first && !(flags & 8)) {
            if (!read_request(&closing)) _exit(0);
        }
        first = 0;
        if (write_all_fd(1, out, o)) _exit(0);
        if (to_err) (void)write_all_fd(2, out, o);
        if (closing) _exit(0); /* answered close: exit, whatever the flags say */
        switch (act & 3) {
        case 1: _exit(act >> 5);
        case 2:
            for (;;) { /* until the host kills us, or our stdin ends */
                struct pollfd p = {0, POLLIN, 0};
                if (poll(&p, 1, 1000) > 0) {
                    char c[4096];
                    if (read(0, c, sizeof c) <= 0) _exit(0);
                }
            }
        case 3: kill(getpid(), (act & 16) ? SIGTERM : SIGKILL); _exit(98);
        default: break;
        }
    }
    _exit(0); /* out of records: stdout closes, the host sees EOF */
}

/* The same child in Perl (perl-base is part of every Debian system): it starts in ~2 ms where
 * this sanitizer-instrumented executable needs ~25, and the child's start is most of the cost
 * of an input. Used when /usr/bin/perl exists (QC_FUZZ_ADAPTER_CHILD=self forces the C one). */
static const char perl_child[] =
    "use strict;\n"
    "my ($script) = @ARGV;\n"
    "open(my $fh, '<:raw', $script) or exit 97;\n"
    "my $buf = do { local $/; <$fh> }; close $fh;\n"
    "binmode STDIN; binmode STDOUT; binmode STDERR;\n"
    "my ($n, $at, $first, $closing) = (length $buf, 0, 1, 0);\n"
    "sub rd { my ($len) = @_; my $o = '';\n"
    "  while (length($o) < $len) { my $r = sysread(STDIN, $o, $len - length($o), length($o));\n"
    "    return undef if !$r; } return $o; }\n"
    "sub request { my $rin = ''; vec($rin, 0, 1) = 1;\n"
    "  return 0 if select(my $ro = $rin, undef, undef, " CHILD_WAIT_S_STR ") <= 0;\n"
    "  my $pre = rd(16); return 0 if !defined $pre || substr($pre, 0, 4) ne 'QCAP';\n"
    "  my $hl = unpack('V', substr($pre, 4, 4)); return 0 if $hl < 1 || $hl > 1048576;\n"
    "  my $h = rd($hl); return 0 if !defined $h;\n"
    "  $closing = index($h, '\"op\":\"close\"') >= 0 ? 1 : 0; return 1; }\n"
    "sub wr { my ($fd, $d) = @_; my $off = 0;\n"
    "  while ($off < length $d) { my $w = syswrite($fd, $d, length($d) - $off, $off);\n"
    "    return 0 if !defined $w || $w <= 0; $off += $w; } return 1; }\n"
    "while ($at + 3 <= $n) {\n"
    "  my ($flags) = unpack('C', substr($buf, $at, 1));\n"
    "  my ($d, $act, $toerr, $lead) = ('', 0, 0, 1);\n"
    "  while ($at + 3 <= $n && ($lead || (unpack('C', substr($buf, $at, 1)) & 8))) {\n"
    "    my ($fl, $len) = unpack('Cv', substr($buf, $at, 3)); $at += 3;\n"
    "    $len = $n - $at if $len > $n - $at;\n"
    "    $d .= substr($buf, $at, $len); $at += $len;\n"
    "    ($act, $toerr, $lead) = ($fl, $toerr | ($fl & 4), 0); }\n"
    "  if (!$first && !($flags & 8)) { exit 0 unless request(); }\n"
    "  $first = 0;\n"
    "  exit 0 unless wr(\\*STDOUT, $d);\n"
    "  wr(\\*STDERR, $d) if $toerr;\n"
    "  exit 0 if $closing;\n"
    "  if (($act & 3) == 1) { exit($act >> 5); }\n"
    "  if (($act & 3) == 2) { while (1) { my $rin = ''; vec($rin, 0, 1) = 1;\n"
    "    if (select(my $ro = $rin, undef, undef, 1) > 0) { my $c; exit 0 if !sysread(STDIN, $c, 4096); } } }\n"
    "  if (($act & 3) == 3) { kill(($act & 16) ? 'TERM' : 'KILL', $$); exit 98; }\n"
    "}\n"
    "exit 0;\n";

/* ===================================================================================== */
/* host mode                                                                             */
/* ===================================================================================== */

static char g_self[1024], g_script[512], g_perl[512], g_cmd[1800];

static void cleanup(void) {
    if (g_script[0]) unlink(g_script);
    if (g_perl[0]) unlink(g_perl);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    if (*argc >= 3 && !strcmp((*argv)[1], CHILD_FLAG)) child_main((*argv)[2]);
    ssize_t k = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (k <= 0) abort();
    g_self[k] = '\0';
    struct stat sb;
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = stat("/dev/shm", &sb) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_script, sizeof g_script, "%s/qc-fuzz-adapter-%d.in", base, (int)getpid());
    const char *which = getenv("QC_FUZZ_ADAPTER_CHILD");
    if (access("/usr/bin/perl", X_OK) == 0 && !(which && !strcmp(which, "self"))) {
        snprintf(g_perl, sizeof g_perl, "%s/qc-fuzz-adapter-%d.pl", base, (int)getpid());
        FILE *f = fopen(g_perl, "w");
        if (!f || fputs(perl_child, f) < 0 || fclose(f) != 0) abort();
        snprintf(g_cmd, sizeof g_cmd, "exec /usr/bin/perl '%s' '%s'", g_perl, g_script);
    } else {
        snprintf(g_cmd, sizeof g_cmd, "exec '%s' " CHILD_FLAG " '%s'", g_self, g_script);
    }
    FZ_REQUIRE(strlen(g_cmd) <= 200, "command too long for the messages: %s", g_cmd);
    atexit(cleanup);
    return 0;
}

/* A call's result: OK / ERROR / UNSUPPORTED, and a failure message naming the command. */
static int check_call(const qc_runtime_plugin *api, void *h, int rc, const char *what,
                      int *failures) {
    FZ_REQUIRE(rc == QC_PLUGIN_OK || rc == QC_PLUGIN_ERROR || rc == QC_PLUGIN_UNSUPPORTED,
               "%s returned %d", what, rc);
    if (rc == QC_PLUGIN_OK) return rc;
    const char *m = api->last_error(h);
    FZ_REQUIRE(m && m[0], "%s failed with an empty message", what);
    FZ_REQUIRE(!strncmp(m, "exec adapter '", 14) && strstr(m, g_cmd),
               "%s: the message does not name the command: %s", what, m);
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("QC_FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "[%s rc %d] %s\n", what, rc, m);
    if (strstr(m, "timed out")) (*failures)++; /* the only failures that cost real time */
    return rc;
}

/* An exact-size heap buffer of n floats, filled with a marker (ASan sees any overflow). */
static float *fbuf(size_t n) {
    float *b = malloc(n * sizeof(float));
    if (!b) abort();
    for (size_t i = 0; i < n; i++) b[i] = -12345.0f;
    return b;
}

static void drive(const qc_runtime_plugin *api, void *h) {
    int failures = 0;
    float *logits3 = fbuf(3 * V), *logits1 = fbuf(V), *hid = fbuf(3 * H);
    float *conv = fbuf(CONV * KCONV), *rec = fbuf(NV * DK * DV);
    float *kv3 = fbuf(NKV * 3 * HD), *kv5 = fbuf(NKV * 5 * HD);
    const int32_t toks[3] = {1, 2, 3}, one[1] = {4};
    qc_exec_want_hidden(h, 1);
#define CALL(what, expr)                                                        \
    do {                                                                        \
        if (failures >= MAX_FAILURES) goto done;                                \
        check_call(api, h, (expr), what, &failures);                            \
    } while (0)
    CALL("reset", api->reset(h));
    CALL("forward", api->forward(h, toks, 3, 0, 1, logits3));
    for (int i = 0; i <= L; i++) CALL("get_hidden", api->get_hidden(h, i, hid));
    CALL("get_state conv", api->get_state(h, 0, QC_STATE_CONV, 3, conv));
    CALL("get_state recurrent", api->get_state(h, 0, QC_STATE_RECURRENT, 3, rec));
    CALL("get_state k", api->get_state(h, 1, QC_STATE_K_CACHE, 3, kv3));
    CALL("get_state v", api->get_state(h, 1, QC_STATE_V_CACHE, 3, kv3));
    CALL("get_state k unused slots", api->get_state(h, 1, QC_STATE_K_CACHE, 5, kv5));
    CALL("fill_state", api->fill_state(h, NAN));
    CALL("set_option", api->set_option(h, "threads", "2"));
    CALL("set_option", api->set_option(h, "dn_kernel", "recurrent"));
    CALL("reset", api->reset(h));
    CALL("forward", api->forward(h, one, 1, 0, 0, logits1));
    CALL("get_state conv", api->get_state(h, 0, QC_STATE_CONV, 1, conv));
#undef CALL
done:
    api->close(h);
    free(logits3), free(logits1), free(hid), free(conv), free(rec), free(kv3), free(kv5);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > MAX_INPUT) return 0;
    FILE *f = fopen(g_script, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);

    qc_plugin_info info;
    void *h = (void *)&info; /* must be reset to NULL on failure */
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_exec_open(g_cmd, HOST_TIMEOUT_S, "/qc-fuzz-model", "a=1", &info, &h, &err);
    if (st != QC_OK) {
        fz_check_error(st, &err, g_cmd);
        FZ_REQUIRE(h == NULL, "a failed open left a handle");
        FZ_REQUIRE(st == QC_ERR_ARG || st == QC_ERR_RUNTIME || st == QC_ERR_OOM,
                   "open failed with status %d", (int)st);
    } else {
        FZ_REQUIRE(h != NULL, "open succeeded without a handle");
        FZ_REQUIRE(info.vocab_size >= 1 && info.hidden_size >= 1 && info.n_layers >= 1 &&
                       info.max_tokens_per_call >= 0 && info.max_context_len >= 0,
                   "info out of range (V %d H %d L %d)", info.vocab_size, info.hidden_size,
                   info.n_layers);
        FZ_REQUIRE((info.caps & ~0x3Fu) == 0, "unknown capability bits 0x%x", info.caps);
        FZ_REQUIRE(memchr(info.name, '\0', sizeof info.name) != NULL, "info.name unterminated");
        qc_exec_dims d;
        memset(&d, 0, sizeof d);
        d.n_layers = L, d.vocab = V, d.hidden = H, d.layer_full[1] = 1;
        d.n_kv_heads = NKV, d.head_dim = HD, d.conv_dim = CONV, d.conv_kernel = KCONV;
        d.n_v_heads = NV, d.k_dim = DK, d.v_dim = DV;
        qc_exec_set_dims(h, &d);
        drive(qc_exec_api(), h);
    }
    /* every child reaped: none of ours is left, zombie or running */
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    FZ_REQUIRE(p <= 0, "child %d left unreaped", (int)p);
    return 0;
}
