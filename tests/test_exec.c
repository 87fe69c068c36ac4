/* test_exec.c — the exec adapter client (harness/host/qc_exec.c) against a scriptable protocol child,
 * tests/support/exec_child.py: a deterministic fake model whose every float is a hash of its
 * coordinates (fake() below is the child's function), so logits, hidden states and state
 * buffers are compared bit for bit; then every misbehaviour of a child (crash, hang, stray
 * print, bad shape / payload / JSON, error answers, exits, EPIPE, startup failures) must give
 * QC_PLUGIN_ERROR (QC_ERR_ARG at startup) with the right text within bounded time, a dead child
 * must come back on reset, and no test may leak an fd or leave a child unreaped (checked after
 * every test by the fixture). QC_TEST_VERBOSE=1 prints the failure messages, QC_TEST_TIMES=1
 * each test's duration (the whole file runs in about 17 s; the slowest test is the 5 s close).
 */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../harness/host/qc_exec.h"

#define CHILD_PY QC_SOURCE_DIR "/tests/support/exec_child.py"

/* the child's fake model */
enum { V = 24, H = 8, L = 4, NKV = 2, HD = 4, CONV_DIM = 10, CONV_K = 4, NV = 2, DK = 3, DV = 2,
       MAX_CTX = 64 };
static const int kinds[L] = {0, 0, 0, 1};

static const qc_runtime_plugin *api;
static char tmpdir[64];
static int fds_before;

/* ===================================================================================== */
/* the fake model (= exec_child.py mix32 / fake)                                         */
/* ===================================================================================== */

static uint32_t mix32(int64_t tag, int64_t a, int64_t b, int64_t c, int64_t d) {
    static const uint32_t k[5] = {0x9E3779B1u, 0x85EBCA77u, 0xC2B2AE3Du, 0x27D4EB2Fu,
                                  0x165667B1u};
    const int64_t v[5] = {tag, a, b, c, d};
    uint32_t x = 0;
    for (int i = 0; i < 5; i++) x += (uint32_t)v[i] * k[i];
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    x *= 0x297A2D39u;
    x ^= x >> 15;
    return x;
}

static float fake(int64_t tag, int64_t a, int64_t b, int64_t c, int64_t d) {
    uint32_t x = mix32(tag, a, b, c, d);
    uint32_t bits = (x & 0x807FFFFFu) | ((120u + ((x >> 23) & 15u)) << 23);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static int same_bits(float a, float b) { return !memcmp(&a, &b, sizeof a); }

/* logits rows of the call: row r is for token toks[r] at position pos0 + r */
static void check_logits(const float *lg, const int32_t *toks, int rows, int pos0) {
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < V; v++)
            ck_assert_msg(same_bits(lg[r * V + v], fake(1, toks[r], pos0 + r, v, 0)),
                          "logits[%d][%d] = %.9g, want %.9g", r, v, lg[r * V + v],
                          fake(1, toks[r], pos0 + r, v, 0));
}

/* ===================================================================================== */
/* helpers                                                                               */
/* ===================================================================================== */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void cmd_for(char *buf, size_t n, const char *behaviour, const char *extra) {
    snprintf(buf, n, "/usr/bin/python3 %s %s%s%s", CHILD_PY, behaviour, extra ? " " : "",
             extra ? extra : "");
}

/* a path in the test's temporary directory (the file removed first) */
static const char *tmp_path(const char *name) {
    static char p[4][128];
    static int k;
    char *s = p[k++ & 3];
    snprintf(s, 128, "%s/%s", tmpdir, name);
    unlink(s);
    return s;
}

#define ASSERT_HAS(msg, sub) \
    ck_assert_msg(strstr((msg), (sub)) != NULL, "expected '%s' in: %s", (sub), (msg))

static qc_exec_dims fake_dims(void) {
    qc_exec_dims d;
    memset(&d, 0, sizeof d);
    d.n_layers = L;
    d.vocab = V;
    d.hidden = H;
    for (int l = 0; l < L; l++) d.layer_full[l] = kinds[l];
    d.n_kv_heads = NKV;
    d.head_dim = HD;
    d.conv_dim = CONV_DIM;
    d.conv_kernel = CONV_K;
    d.n_v_heads = NV;
    d.k_dim = DK;
    d.v_dim = DV;
    return d;
}

static void *open_ok(const char *behaviour, const char *extra, double timeout,
                     qc_plugin_info *info_out) {
    char cmd[512];
    cmd_for(cmd, sizeof cmd, behaviour, extra);
    qc_plugin_info info;
    void *h = NULL;
    qc_err e = {0};
    qc_status s = qc_exec_open(cmd, timeout, "/models/fake", "k=v", &info, &h, &e);
    ck_assert_msg(s == QC_OK, "open %s: %s", behaviour, e.msg);
    ck_assert_ptr_nonnull(h);
    qc_exec_dims d = fake_dims();
    qc_exec_set_dims(h, &d);
    if (info_out) *info_out = info;
    return h;
}

/* open must fail at startup: QC_ERR_ARG, *handle NULL, the message naming the command */
static void open_fails(const char *behaviour, const char *cmd_override, double timeout,
                       qc_err *e, double *secs) {
    char cmd[512];
    if (cmd_override) snprintf(cmd, sizeof cmd, "%s", cmd_override);
    else cmd_for(cmd, sizeof cmd, behaviour, NULL);
    qc_plugin_info info;
    void *h = (void *)1;
    double t0 = now_s();
    qc_status s = qc_exec_open(cmd, timeout, "/models/fake", "", &info, &h, e);
    *secs = now_s() - t0;
    if (getenv("QC_TEST_VERBOSE")) fprintf(stderr, "%s: %s\n", cmd, e->msg);
    /* an adapter that answered open with an error started fine: its runtime cannot load the
     * model (a FAIL of that runtime); every other startup failure is a usage error */
    qc_status want_st = behaviour && !strcmp(behaviour, "open-error") ? QC_ERR_RUNTIME : QC_ERR_ARG;
    ck_assert_msg(s == want_st, "open %s: status %d (%s)", cmd, s, e->msg);
    ck_assert_ptr_null(h);
    char want[600];
    snprintf(want, sizeof want, "exec adapter '%s", cmd);
    ASSERT_HAS(e->msg, want);
    ck_assert_str_eq(api->last_error(NULL), e->msg);
}

/* the log file's lines, joined with '|' */
static void read_log(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    size_t o = 0;
    buf[0] = '\0';
    if (!f) return;
    for (int c; (c = fgetc(f)) != EOF && o + 1 < n;) buf[o++] = c == '\n' ? '|' : (char)c;
    buf[o] = '\0';
    fclose(f);
}

/* the pid of the (last) python child, from its log */
static int log_pid(const char *log) {
    char b[4096];
    read_log(log, b, sizeof b);
    int pid = -1;
    for (const char *p = b; (p = strstr(p, "pid ")); p += 4) pid = atoi(p + 4);
    return pid;
}

/* the process is gone (absent, or a zombie waiting for init) within a second */
static int process_gone(int pid) {
    char path[64], st[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    for (int i = 0; i < 100; i++) {
        FILE *f = fopen(path, "r");
        if (!f) return 1;
        size_t n = fread(st, 1, sizeof st - 1, f);
        fclose(f);
        st[n] = '\0';
        const char *rp = strrchr(st, ')');
        if (rp && (rp[2] == 'Z' || rp[2] == 'X')) return 1;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static int count_substr(const char *s, const char *sub) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, sub)); p += strlen(sub)) n++;
    return n;
}

static const int32_t toks5[5] = {3, 17, 0, 23, 9};

/* ===================================================================================== */
/* fixture: no fd leak, no unreaped child after any test                                 */
/* ===================================================================================== */

static double t_setup;
static void setup(void) { fds_before = count_fds(); t_setup = now_s(); }

static void teardown(void) {
    if (getenv("QC_TEST_TIMES")) fprintf(stderr, "test took %.2f s\n", now_s() - t_setup);
    ck_assert_int_eq(count_fds(), fds_before);
    int st;
    errno = 0;
    ck_assert_int_eq(waitpid(-1, &st, WNOHANG), -1); /* no child left, not even a zombie */
    ck_assert_int_eq(errno, ECHILD);
}

/* ===================================================================================== */
/* a good child                                                                          */
/* ===================================================================================== */

START_TEST(good_forward_exact) {
    qc_plugin_info info;
    void *h = open_ok("good", NULL, 10, &info);
    ck_assert_int_eq(info.vocab_size, V);
    ck_assert_int_eq(info.hidden_size, H);
    ck_assert_int_eq(info.n_layers, L);
    ck_assert_int_eq(info.max_tokens_per_call, 0);
    ck_assert_int_eq(info.max_context_len, MAX_CTX);
    ck_assert_uint_eq(info.caps, QC_CAP_HIDDEN | QC_CAP_STATE_READ | QC_CAP_STATE_FILL |
                                     QC_CAP_THREADS | QC_CAP_DN_KERNEL | QC_CAP_CHUNK_SIZE);
    ck_assert_str_eq(info.name, "fake-runtime (good)");
    const qc_runtime_plugin *p = qc_exec_api();
    ck_assert_uint_eq(p->abi_version, QC_PLUGIN_ABI_VERSION);
    ck_assert_uint_ge(p->struct_size, QC_PLUGIN_V1_SIZE);
    ck_assert(p->open == NULL);
    ck_assert(p->get_hidden && p->get_state && p->fill_state && p->set_option);

    float lg[5 * V], last[V];
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    ck_assert_int_eq(api->forward(h, toks5, 5, 0, 1, lg), QC_PLUGIN_OK);
    check_logits(lg, toks5, 5, 0);
    const int32_t t1[1] = {11};
    ck_assert_int_eq(api->forward(h, t1, 1, 5, 1, last), QC_PLUGIN_OK);
    check_logits(last, t1, 1, 5);
    const int32_t t3[3] = {1, 2, 22};
    ck_assert_int_eq(api->forward(h, t3, 3, 6, 0, last), QC_PLUGIN_OK); /* last row only */
    check_logits(last, t3 + 2, 1, 8);
    /* no-KV recompute from position 0 right after reset */
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    ck_assert_int_eq(api->forward(h, toks5, 5, 0, 1, lg), QC_PLUGIN_OK);
    check_logits(lg, toks5, 5, 0);
    /* a bad call is refused locally, the child is fine */
    ck_assert_int_eq(api->forward(h, toks5, 0, 0, 1, lg), QC_PLUGIN_ERROR);
    ASSERT_HAS(api->last_error(h), "bad arguments");
    ck_assert_int_eq(api->forward(h, t1, 1, 5, 1, last), QC_PLUGIN_OK);
    check_logits(last, t1, 1, 5);
    api->close(h);
    api->close(NULL);
}
END_TEST

START_TEST(hidden_roundtrip) {
    void *h = open_ok("good", NULL, 10, NULL);
    float lg[5 * V], hid[5 * H];
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    ck_assert_int_eq(api->forward(h, toks5, 5, 0, 1, lg), QC_PLUGIN_OK);
    ck_assert_int_eq(api->get_hidden(h, 0, hid), QC_PLUGIN_ERROR); /* not asked for */
    ASSERT_HAS(api->last_error(h), "no hidden states");
    qc_exec_want_hidden(h, 1);
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    ck_assert_int_eq(api->forward(h, toks5, 4, 0, 0, lg), QC_PLUGIN_OK);
    check_logits(lg, toks5 + 3, 1, 3);
    for (int l = 0; l <= L; l++) {
        memset(hid, 0xff, sizeof hid);
        ck_assert_int_eq(api->get_hidden(h, l, hid), QC_PLUGIN_OK);
        for (int i = 0; i < 4; i++)
            for (int k = 0; k < H; k++)
                ck_assert_msg(same_bits(hid[i * H + k], fake(2, toks5[i], i, l, k)),
                              "hidden[%d][%d][%d]", l, i, k);
    }
    ck_assert_int_eq(api->get_hidden(h, L + 1, hid), QC_PLUGIN_ERROR);
    /* the next forward replaces them ([1, H] now) */
    ck_assert_int_eq(api->forward(h, toks5 + 4, 1, 4, 1, lg), QC_PLUGIN_OK);
    ck_assert_int_eq(api->get_hidden(h, L, hid), QC_PLUGIN_OK);
    for (int k = 0; k < H; k++) ck_assert(same_bits(hid[k], fake(2, toks5[4], 4, L, k)));
    qc_exec_want_hidden(h, 0);
    ck_assert_int_eq(api->forward(h, toks5, 1, 5, 1, lg), QC_PLUGIN_OK);
    ck_assert_int_eq(api->get_hidden(h, 0, hid), QC_PLUGIN_ERROR);
    api->close(h);

    /* a child without the capability: hidden is never asked for, get_hidden unsupported */
    h = open_ok("good", "--caps state_read", 10, NULL);
    qc_exec_want_hidden(h, 1);
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    ck_assert_int_eq(api->forward(h, toks5, 5, 0, 1, lg), QC_PLUGIN_OK);
    check_logits(lg, toks5, 5, 0);
    ck_assert_int_eq(api->get_hidden(h, 0, hid), QC_PLUGIN_UNSUPPORTED);
    ASSERT_HAS(api->last_error(h), "'hidden' capability");
    api->close(h);
}
END_TEST

/* every state tensor after 7 positions, read with n_pos 9: two unused slots */
START_TEST(state_roundtrip) {
    const char *log = tmp_path("state.log");
    char extra[256], lb[8192];
    snprintf(extra, sizeof extra, "--log %s", log);
    int leak = open("/dev/null", O_RDONLY); /* no O_CLOEXEC: the child must not inherit it */
    ck_assert_int_ge(leak, 3);
    void *h = open_ok("good", extra, 10, NULL);
    close(leak);
    read_log(log, lb, sizeof lb);
    ASSERT_HAS(lb, "|extra-fds none|");
    float lg[5 * V];
    const int32_t t2[2] = {5, 6};
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    ck_assert_int_eq(api->forward(h, toks5, 5, 0, 1, lg), QC_PLUGIN_OK);
    ck_assert_int_eq(api->forward(h, t2, 2, 5, 1, lg), QC_PLUGIN_OK);
    int32_t all[7] = {3, 17, 0, 23, 9, 5, 6};
    int pos = 7, tsum = 0;
    for (int i = 0; i < pos; i++) tsum += all[i];
    const int np = 9;
    float buf[NKV * np * HD + CONV_DIM * CONV_K + NV * DK * DV];
    for (int l = 0; l < L; l++) {
        if (kinds[l]) {
            for (int kind = 0; kind < 2; kind++) {
                ck_assert_int_eq(api->get_state(h, l, kind, np, buf), QC_PLUGIN_OK);
                for (int g = 0; g < NKV; g++)
                    for (int p = 0; p < np; p++)
                        for (int d = 0; d < HD; d++) {
                            float want = p < pos ? fake(3 + kind, l * 100 + g, p, d, all[p]) : 0.0f;
                            ck_assert_msg(same_bits(buf[(g * np + p) * HD + d], want),
                                          "layer %d kind %d [%d][%d][%d]", l, kind, g, p, d);
                        }
            }
        } else {
            ck_assert_int_eq(api->get_state(h, l, QC_STATE_CONV, np, buf), QC_PLUGIN_OK);
            for (int c = 0; c < CONV_DIM; c++)
                for (int k = 0; k < CONV_K; k++)
                    ck_assert(same_bits(buf[c * CONV_K + k], fake(5, l * 100 + c, k, pos, tsum)));
            ck_assert_int_eq(api->get_state(h, l, QC_STATE_RECURRENT, np, buf), QC_PLUGIN_OK);
            for (int g = 0; g < NV; g++)
                for (int i = 0; i < DK; i++)
                    for (int j = 0; j < DV; j++)
                        ck_assert(same_bits(buf[(g * DK + i) * DV + j],
                                            fake(6, l * 100 + g, i * 100 + j, pos, tsum)));
        }
    }
    read_log(log, lb, sizeof lb);
    ck_assert_msg(count_substr(lb, "get_state 9") == 1, "one request serves every layer: %s", lb);
    /* a kind the layer does not have; beyond what the child can expose */
    ck_assert_int_eq(api->get_state(h, 0, QC_STATE_K_CACHE, np, buf), QC_PLUGIN_ERROR);
    ASSERT_HAS(api->last_error(h), "layer 0 is a linear attention");
    static float big[NKV * 65 * HD];
    ck_assert_int_eq(api->get_state(h, 3, QC_STATE_K_CACHE, 65, big), QC_PLUGIN_UNSUPPORTED);
    ASSERT_HAS(api->last_error(h), "unsupported: n_pos 65 > max_context_len 64");
    /* fill: NaN, Inf, -Inf and a number travel exactly; reset gives zeros */
    const float fills[4] = {NAN, INFINITY, -INFINITY, -2.5f};
    for (int f = 0; f < 4; f++) {
        ck_assert_int_eq(api->fill_state(h, fills[f]), QC_PLUGIN_OK);
        ck_assert_int_eq(api->get_state(h, 3, QC_STATE_V_CACHE, MAX_CTX, big), QC_PLUGIN_OK);
        for (int i = 0; i < NKV * MAX_CTX * HD; i++)
            ck_assert(isnan(fills[f]) ? isnan(big[i]) : same_bits(big[i], fills[f]));
        ck_assert_int_eq(api->get_state(h, 1, QC_STATE_RECURRENT, MAX_CTX, buf), QC_PLUGIN_OK);
        for (int i = 0; i < NV * DK * DV; i++)
            ck_assert(isnan(fills[f]) ? isnan(buf[i]) : same_bits(buf[i], fills[f]));
    }
    read_log(log, lb, sizeof lb);
    ASSERT_HAS(lb, "fill_state nan|");
    ASSERT_HAS(lb, "fill_state inf|");
    ASSERT_HAS(lb, "fill_state -inf|");
    ASSERT_HAS(lb, "fill_state -2.5|");
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    ck_assert_int_eq(api->get_state(h, 3, QC_STATE_K_CACHE, MAX_CTX, big), QC_PLUGIN_OK);
    for (int i = 0; i < NKV * MAX_CTX * HD; i++) ck_assert(same_bits(big[i], 0.0f));
    api->close(h);
}
END_TEST

START_TEST(options_and_caps) {
    void *h = open_ok("good", NULL, 10, NULL);
    float lg[V];
    ck_assert_int_eq(api->set_option(h, "threads", "2"), QC_PLUGIN_OK);
    ck_assert_int_eq(api->set_option(h, "dn_kernel", "recurrent"), QC_PLUGIN_OK);
    ck_assert_int_eq(api->set_option(h, "bogus", "1"), QC_PLUGIN_UNSUPPORTED);
    ASSERT_HAS(api->last_error(h), "unknown option 'bogus'");
    ck_assert_int_eq(api->set_option(h, "dn_kernel", "sideways"), QC_PLUGIN_ERROR);
    ASSERT_HAS(api->last_error(h), "error response: dn_kernel must be chunked or recurrent");
    ASSERT_HAS(api->last_error(h), "in set_option");
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK); /* the child is still up */
    ck_assert_int_eq(api->forward(h, toks5, 1, 0, 1, lg), QC_PLUGIN_OK);
    check_logits(lg, toks5, 1, 0);
    api->close(h);

    /* only what is announced is asked for; unknown capability strings warned about */
    fflush(stderr);
    int saved = dup(2);
    const char *cap = tmp_path("stderr.txt");
    int fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    qc_plugin_info info;
    h = open_ok("good", "--caps hidden,teleport", 10, &info);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char txt[4096];
    read_log(cap, txt, sizeof txt);
    ASSERT_HAS(txt, "unknown capability 'teleport' ignored");
    ck_assert_uint_eq(info.caps, QC_CAP_HIDDEN);
    float buf[64];
    ck_assert_int_eq(api->get_state(h, 0, QC_STATE_CONV, 1, buf), QC_PLUGIN_UNSUPPORTED);
    ck_assert_int_eq(api->fill_state(h, 0.0f), QC_PLUGIN_UNSUPPORTED);
    ck_assert_int_eq(api->set_option(h, "threads", "2"), QC_PLUGIN_UNSUPPORTED);
    ASSERT_HAS(api->last_error(h), "'threads' capability");
    api->close(h);

    /* get_state before the dims are known */
    char cmd[512];
    cmd_for(cmd, sizeof cmd, "good", NULL);
    qc_err e = {0};
    ck_assert_int_eq(qc_exec_open(cmd, 10, "/m", NULL, &info, &h, &e), QC_OK);
    ck_assert_int_eq(api->get_state(h, 0, QC_STATE_CONV, 1, buf), QC_PLUGIN_ERROR);
    ASSERT_HAS(api->last_error(h), "qc_exec_set_dims was not called");
    api->close(h);
}
END_TEST

/* 256 KiB of stderr during one forward (4 pipe buffers): no deadlock, the answer arrives */
START_TEST(chatty_stderr) {
    void *h = open_ok("chatty-stderr", NULL, 10, NULL);
    float lg[5 * V];
    double t0 = now_s();
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    ck_assert_int_eq(api->forward(h, toks5, 5, 0, 1, lg), QC_PLUGIN_OK);
    check_logits(lg, toks5, 5, 0);
    ck_assert(now_s() - t0 < 5);
    api->close(h);
}
END_TEST

/* ===================================================================================== */
/* a child failing mid-run                                                               */
/* ===================================================================================== */

/* forward on a child that misbehaves: QC_PLUGIN_ERROR within max_s, message with `what` */
static void *forward_fails(const char *behaviour, const char *extra, double timeout,
                           double max_s, const char *what) {
    void *h = open_ok(behaviour, extra, timeout, NULL);
    float lg[5 * V];
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    double t0 = now_s();
    ck_assert_int_eq(api->forward(h, toks5, 5, 0, 1, lg), QC_PLUGIN_ERROR);
    double dt = now_s() - t0;
    ck_assert_msg(dt < max_s, "%s: took %.2f s", behaviour, dt);
    const char *m = api->last_error(h);
    if (getenv("QC_TEST_VERBOSE")) fprintf(stderr, "%s: %s\n", behaviour, m);
    char want[600];
    snprintf(want, sizeof want, "exec adapter '/usr/bin/python3 %s %s", CHILD_PY, behaviour);
    ASSERT_HAS(m, want);
    ASSERT_HAS(m, what);
    ASSERT_HAS(m, ", in forward");
    return h;
}

START_TEST(crash_then_restart) {
    const char *log = tmp_path("crash.log"), *once = tmp_path("crash.once");
    char extra[300], lb[8192];
    snprintf(extra, sizeof extra, "--log %s --once %s", log, once);
    void *h = open_ok("crash-in-forward", extra, 10, NULL);
    ck_assert_int_eq(api->set_option(h, "chunk_size", "3"), QC_PLUGIN_OK);
    ck_assert_int_eq(api->set_option(h, "threads", "2"), QC_PLUGIN_OK);
    ck_assert_int_eq(api->set_option(h, "chunk_size", "5"), QC_PLUGIN_OK);
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    float lg[5 * V], buf[64];
    double t0 = now_s();
    ck_assert_int_eq(api->forward(h, toks5, 5, 0, 1, lg), QC_PLUGIN_ERROR);
    ck_assert(now_s() - t0 < 5);
    const char *m = api->last_error(h);
    char want[600];
    snprintf(want, sizeof want, "exec adapter '/usr/bin/python3 %s crash-in-forward --log", CHILD_PY);
    ASSERT_HAS(m, want);
    ASSERT_HAS(m, "adapter died (signal 11)");
    ASSERT_HAS(m, ", in forward (last stderr: ");
    ASSERT_HAS(m, "exec_child: about to crash in forward");
    int pid1 = log_pid(log);
    ck_assert(process_gone(pid1));
    /* dead: everything but reset / close refuses */
    ck_assert_int_eq(api->forward(h, toks5, 5, 0, 1, lg), QC_PLUGIN_ERROR);
    ASSERT_HAS(api->last_error(h), "adapter is not running (it failed earlier: adapter died "
                                   "(signal 11)");
    ck_assert_int_eq(api->get_state(h, 0, QC_STATE_CONV, 1, buf), QC_PLUGIN_ERROR);
    ASSERT_HAS(api->last_error(h), "adapter is not running");
    ck_assert_int_eq(api->set_option(h, "threads", "1"), QC_PLUGIN_ERROR);
    /* reset restarts it: hello, open, the options set so far, reset */
    ck_assert_int_eq(truncate(log, 0), 0);
    ck_assert_int_eq(api->set_option(h, "chunk_size", "3"), QC_PLUGIN_ERROR); /* still dead */
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    read_log(log, lb, sizeof lb);
    ASSERT_HAS(lb, "|hello|open k=v|set_option chunk_size 5|set_option threads 2|reset|");
    ck_assert_int_ne(log_pid(log), pid1);
    ck_assert_int_eq(api->forward(h, toks5, 5, 0, 1, lg), QC_PLUGIN_OK);
    check_logits(lg, toks5, 5, 0);
    api->close(h);

    /* without a shell in between the signal is seen directly */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "exec /usr/bin/python3 %s crash-in-forward", CHILD_PY);
    qc_plugin_info info;
    qc_err e = {0};
    ck_assert_msg(qc_exec_open(cmd, 10, "/m", "", &info, &h, &e) == QC_OK, "%s", e.msg);
    ck_assert_int_eq(api->forward(h, toks5, 5, 0, 1, lg), QC_PLUGIN_ERROR);
    ASSERT_HAS(api->last_error(h), "': adapter died (signal 11), in forward (last stderr: ");
    api->close(h);
}
END_TEST

START_TEST(hang_times_out) {
    const char *log = tmp_path("hang.log"), *once = tmp_path("hang.once");
    char extra[300];
    snprintf(extra, sizeof extra, "--log %s --once %s", log, once);
    void *h = forward_fails("hang-in-forward", extra, 3, 5, "adapter timed out after 3 s");
    ASSERT_HAS(api->last_error(h), "exec_child: hanging in forward");
    ck_assert(process_gone(log_pid(log))); /* the python under /bin/sh too: the group is killed */
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    float lg[5 * V];
    ck_assert_int_eq(api->forward(h, toks5, 5, 0, 1, lg), QC_PLUGIN_OK);
    check_logits(lg, toks5, 5, 0);
    api->close(h);
}
END_TEST

START_TEST(protocol_violations) {
    void *h = forward_fails("stray-print", NULL, 10, 5, "protocol violation: bad magic");
    ASSERT_HAS(api->last_error(h), "hello from a stray print");
    api->close(h);
    h = forward_fails("bad-shape", NULL, 10, 5,
                      "protocol violation: tensor 0 is 'logits' [5,25], expected 'logits' [5,24]");
    api->close(h);
    h = forward_fails("bad-payload-size", NULL, 10, 5,
                      "protocol violation: payload_len 476 != 4 x 120 elements = 480 bytes");
    api->close(h);
    h = forward_fails("bad-json", NULL, 10, 5,
                      "protocol violation: the header is not a JSON object");
    api->close(h);
    h = open_ok("bad-state", NULL, 10, NULL);
    float buf[64], lg[V];
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    ck_assert_int_eq(api->forward(h, toks5, 1, 0, 1, lg), QC_PLUGIN_OK);
    ck_assert_int_eq(api->get_state(h, 0, QC_STATE_CONV, 1, buf), QC_PLUGIN_ERROR);
    ASSERT_HAS(api->last_error(h), "protocol violation: tensor 1 is 'layer_00/k_cache' [2,3,2], "
                                   "expected 'layer_00/recurrent_state' [2,3,2], in get_state");
    api->close(h);
}
END_TEST

START_TEST(error_response_keeps_child) {
    const char *log = tmp_path("err.log");
    char extra[300], lb[4096];
    snprintf(extra, sizeof extra, "--log %s", log);
    void *h = forward_fails("error-response", extra, 10, 5,
                            "error response: fake runtime refuses forward 1");
    float lg[5 * V];
    ck_assert_int_eq(api->forward(h, toks5, 5, 0, 1, lg), QC_PLUGIN_OK); /* the second works */
    check_logits(lg, toks5, 5, 0);
    read_log(log, lb, sizeof lb);
    ck_assert_int_eq(count_substr(lb, "pid "), 1); /* never restarted */
    api->close(h);
}
END_TEST

START_TEST(exit_mid_case) {
    void *h = open_ok("exit-mid-case", "--at 2", 10, NULL);
    float lg[5 * V];
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    ck_assert_int_eq(api->forward(h, toks5, 3, 0, 1, lg), QC_PLUGIN_OK);
    check_logits(lg, toks5, 3, 0);
    ck_assert_int_eq(api->forward(h, toks5 + 3, 2, 3, 1, lg), QC_PLUGIN_ERROR);
    ASSERT_HAS(api->last_error(h), "adapter exited with status 3, in forward");
    ASSERT_HAS(api->last_error(h), "exec_child: exiting with status 3 mid-case");
    api->close(h);
}
END_TEST

/* NaN logits are not a protocol matter: they arrive exactly where the child put them */
START_TEST(nan_logits_pass_through) {
    void *h = open_ok("NaN-logits", NULL, 10, NULL);
    float lg[5 * V];
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    ck_assert_int_eq(api->forward(h, toks5, 5, 0, 1, lg), QC_PLUGIN_OK);
    for (int r = 0; r < 5; r++)
        for (int v = 0; v < V; v++) {
            if ((r == 0 && v == 5) || (r == 4 && v == 0)) ck_assert(isnan(lg[r * V + v]));
            else ck_assert(same_bits(lg[r * V + v], fake(1, toks5[r], r, v, 0)));
        }
    api->close(h);
}
END_TEST

/* the child closes its stdin: the host's write gets EPIPE, SIGPIPE must not kill us */
START_TEST(epipe_no_sigpipe) {
    signal(SIGPIPE, SIG_DFL);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "exec /usr/bin/python3 %s close-stdin", CHILD_PY); /* no sh between */
    qc_plugin_info info;
    void *h = NULL;
    qc_err e = {0};
    ck_assert_msg(qc_exec_open(cmd, 10, "/m", "", &info, &h, &e) == QC_OK, "%s", e.msg);
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    double t0 = now_s();
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_ERROR);
    ck_assert(now_s() - t0 < 5);
    ASSERT_HAS(api->last_error(h), "adapter closed its stdin (EPIPE) (still running: killed), "
                                   "in reset");
    ASSERT_HAS(api->last_error(h), "exec_child: closed stdin");
    sigset_t pend;
    sigpending(&pend);
    ck_assert(!sigismember(&pend, SIGPIPE));
    api->close(h);
}
END_TEST

/* a child that stops reading: a request larger than the pipe cannot block the host */
START_TEST(write_times_out) {
    void *h = open_ok("no-read", NULL, 3, NULL);
    enum { N = 40000 }; /* ~240 KB of header */
    static int32_t toks[N];
    static float lg[V];
    for (int i = 0; i < N; i++) toks[i] = i % V;
    double t0 = now_s();
    ck_assert_int_eq(api->forward(h, toks, N, 0, 0, lg), QC_PLUGIN_ERROR);
    ck_assert(now_s() - t0 < 8);
    ASSERT_HAS(api->last_error(h), "adapter timed out after 3 s (it does not read its stdin), "
                                   "in forward");
    api->close(h);
}
END_TEST

/* output nobody asked for is caught before the next request */
START_TEST(unsolicited_output) {
    void *h = open_ok("double-answer", NULL, 10, NULL);
    float lg[V];
    ck_assert_int_eq(api->reset(h), QC_PLUGIN_OK);
    ck_assert_int_eq(api->forward(h, toks5, 1, 0, 1, lg), QC_PLUGIN_ERROR);
    ASSERT_HAS(api->last_error(h), "protocol violation: unsolicited output on stdout before the "
                                   "request: \"QCAP");
    ASSERT_HAS(api->last_error(h), ", in forward");
    api->close(h);
}
END_TEST

START_TEST(close_kills_a_lingering_child) {
    void *h = open_ok("hang-in-close", NULL, 10, NULL);
    double t0 = now_s();
    api->close(h);
    double dt = now_s() - t0;
    ck_assert_msg(dt > 4.5 && dt < 8, "close took %.2f s", dt);
}
END_TEST

/* ===================================================================================== */
/* startup failures                                                                      */
/* ===================================================================================== */

START_TEST(startup_failures) {
    qc_err e;
    double dt;
    /* 5 s, not 1: a Python child on a loaded 2-core machine can take seconds to start */
    open_fails("no-hello", NULL, 5, &e, &dt);
    ck_assert_msg(dt < 10, "no-hello took %.2f s", dt);
    ASSERT_HAS(e.msg, "adapter timed out after 5 s, in hello");
    ASSERT_HAS(e.msg, "exec_child: not sending hello");
    open_fails("wrong-version", NULL, 10, &e, &dt);
    ASSERT_HAS(e.msg, "protocol mismatch: the adapter speaks 'qwen-conform-adapter' version 2");
    open_fails("exit-before-hello", NULL, 10, &e, &dt);
    ASSERT_HAS(e.msg, "adapter exited with status 5, in hello");
    ASSERT_HAS(e.msg, "cannot load the runtime library: libfake.so");
    open_fails("open-error", NULL, 10, &e, &dt);
    ASSERT_HAS(e.msg, "open failed: error response: cannot open /models/fake: no weights, in open");
    open_fails("bad-hello", NULL, 10, &e, &dt);
    ASSERT_HAS(e.msg, "protocol violation: the header is not a JSON object: \"[1, 2, 3]\"");
    open_fails("bad-info", NULL, 10, &e, &dt);
    ASSERT_HAS(e.msg, "malformed open answer: info.vocab_size is missing");
    open_fails(NULL, "/nonexistent/adapter --flag", 10, &e, &dt);
    ASSERT_HAS(e.msg, "adapter exited with status 127 (command not found?), in hello");
    ASSERT_HAS(e.msg, "/nonexistent/adapter: not found");
    open_fails(NULL, "echo 'not a frame'; sleep 30", 10, &e, &dt);
    ck_assert_msg(dt < 5, "stray text took %.2f s", dt);
    ASSERT_HAS(e.msg, "bad magic: stdout has \"not a frame\\n\"");
    /* the stderr tail keeps the last 10 lines */
    open_fails(NULL, "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo line$i >&2; done; exit 9", 10,
               &e, &dt);
    ASSERT_HAS(e.msg, "adapter exited with status 9, in hello (last stderr: line3 | line4 |");
    ASSERT_HAS(e.msg, "| line12)");
    ck_assert(!strstr(e.msg, "line2 "));
    /* a tail longer than the room is cut at a line boundary, never inside a line */
    open_fails(NULL, "for i in 1 2 3 4 5 6 7 8 9 10; do printf 'L%02d_%0150d\\n' $i 0 >&2; done; "
               "exit 9", 10, &e, &dt);
    const char *tl = strstr(e.msg, "(last stderr: ");
    ck_assert_msg(tl != NULL, "%s", e.msg);
    ck_assert_msg(!strncmp(tl, "(last stderr: ... | L", 21), "cut inside a line: %s", tl);
    ASSERT_HAS(e.msg, "L10_");
    qc_plugin_info info;
    void *h = NULL;
    ck_assert_int_eq(qc_exec_open("", 10, "/m", "", &info, &h, &e), QC_ERR_ARG);
}
END_TEST

int main(void) {
    api = qc_exec_api();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_exec.XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    Suite *su = suite_create("exec");
    TCase *tc = tcase_create("adapter");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, good_forward_exact);
    tcase_add_test(tc, hidden_roundtrip);
    tcase_add_test(tc, state_roundtrip);
    tcase_add_test(tc, options_and_caps);
    tcase_add_test(tc, chatty_stderr);
    tcase_add_test(tc, crash_then_restart);
    tcase_add_test(tc, hang_times_out);
    tcase_add_test(tc, protocol_violations);
    tcase_add_test(tc, error_response_keeps_child);
    tcase_add_test(tc, exit_mid_case);
    tcase_add_test(tc, nan_logits_pass_through);
    tcase_add_test(tc, epipe_no_sigpipe);
    tcase_add_test(tc, write_times_out);
    tcase_add_test(tc, unsolicited_output);
    tcase_add_test(tc, close_kills_a_lingering_child);
    tcase_add_test(tc, startup_failures);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    /* the temporary directory: logs and markers only */
    DIR *d = opendir(tmpdir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(tmpdir);
    return nf ? 1 : 0;
}
