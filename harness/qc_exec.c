/* qc_exec.c — the exec adapter client: starts a runtime under test as a child process
 * (`/bin/sh -c CMD`, its own process group), speaks docs/adapter-protocol.md to it over pipes
 * and offers it through the runtime plugin ABI vtable (qc/qc_runtime_plugin.h).
 *
 * Every byte moved is bounded by the per-request deadline (non-blocking fds + poll); the child's
 * stderr is drained into a ring buffer whenever the host waits, so a chatty child never blocks
 * on a full pipe. Every response is validated (magic, header_len, JSON, type, tensor names and
 * shapes, payload_len) before its payload is read into the destination buffers.
 */
#define _GNU_SOURCE
/* Messages are cut to their buffers on purpose (snprintf); GCC's truncation warning is noise. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "qc_exec.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "qc/qc_config.h"

_Static_assert(QC_EXEC_MAX_LAYERS == QC_MAX_LAYERS, "qc_exec_dims.layer_full must hold a config");

extern char **environ;

#define PROTO_NAME "qwen-conform-adapter"
#define PROTO_VERSION 1
#define MAX_HEADER (1u << 20)   /* header_len limit of the protocol */
#define RING_SIZE 16384         /* bytes of the child's stderr kept */
#define TAIL_LINES 10           /* stderr lines quoted in messages */
#define TAIL_CHARS 1500         /* ... at most this many characters of them */
#define CLOSE_WAIT_S 5.0        /* close: answer + exit within this, else SIGKILL */
#define GONE_WAIT_S 2.0         /* stdout EOF / EPIPE: wait this long for the exit status */
#define DRAIN_WAIT_S 0.2        /* after the child is gone: read its last stderr this long */
#define REAP_WAIT_S 10.0        /* SIGKILL'd child: reap within this (never blocks for ever) */
#define MAX_OPTS 8              /* set_option keys remembered for a restart */

/* ===================================================================================== */
/* types                                                                                 */
/* ===================================================================================== */

/* One tensor a response must carry: name, shape, where its payload goes. */
typedef struct {
    char name[40];
    int ndim;
    int64_t dims[3];
    float *dst;
} tspec;

typedef struct {
    char *key, *value;
} opt_kv;

typedef struct {
    char *cmd, *model_dir, *options;
    char cmdq[224];            /* cmd as quoted in messages (cut to 200 characters) */
    double timeout_s;          /* per request */
    pid_t pid;                 /* the /bin/sh child (and process group id); -1 when none */
    int fd_in, fd_out, fd_err; /* host ends: child's stdin (write), stdout, stderr (read) */
    int dead;                  /* the child failed: only reset (restart) and close work */
    int open_refused;          /* the child answered open with an error (the runtime cannot
                                  load the model: QC_ERR_RUNTIME, not a usage error) */
    char dead_why[1200];       /* "<what>, in <op>" of that failure */
    int warned_caps;           /* unknown capability warning printed once */
    qc_plugin_info info;       /* from the first open */

    int have_dims;             /* qc_exec_set_dims called with valid dims */
    char dims_error[160];      /* why the dims given were refused */
    qc_exec_dims dims;
    tspec *specs;              /* [2 * n_layers]: the get_state response, in order */

    int want_hidden;           /* qc_exec_want_hidden */
    float *hidden;             /* last forward's [L+1, n, H] when hidden_valid */
    size_t hidden_cap;         /* floats allocated */
    int32_t hidden_n;
    int hidden_valid;

    float *state;              /* cached get_state response (every layer), for state_npos */
    size_t state_cap;          /* floats allocated */
    int32_t state_npos;        /* -1: no cache */

    opt_kv opts[MAX_OPTS];     /* set_option values accepted so far (re-applied on restart) */
    int n_opts;

    char *req;                 /* request header being built */
    size_t req_cap;
    char *hdr;                 /* response header being read */
    size_t hdr_cap;

    char ring[RING_SIZE];      /* the child's last stderr bytes */
    size_t ring_start, ring_len;

    /* the last failure: "exec adapter '<cmd>': <what>, in <op>[ (last stderr: ...)]" */
    char what[700];
    char op[48];
    int with_stderr;
    char err[4096];
} qc_exec;

/* The last failed qc_exec_open (last_error(NULL)). */
static _Thread_local char g_open_err[1024] = "no error";

/* ===================================================================================== */
/* small helpers                                                                         */
/* ===================================================================================== */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Milliseconds from now to deadline for poll(), rounded up, >= 0. */
static int ms_until(double deadline) {
    double r = deadline - now_s();
    if (r <= 0) return 0;
    if (r > 1e6) r = 1e6;
    return (int)(r * 1000.0) + 1;
}

static void put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_le32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Grow *buf to at least need bytes (contents kept). 0 ok, -1 out of memory. */
static int grow(void **buf, size_t *cap, size_t need) {
    if (*cap >= need) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c = c > SIZE_MAX / 2 ? need : c * 2;
    void *p = realloc(*buf, c);
    if (!p) return -1;
    *buf = p;
    *cap = c;
    return 0;
}

/* bytes as a quoted C-style string ("abc\n\x01"), cut to fit cap. */
static void quote_bytes(const unsigned char *b, size_t n, char *dst, size_t cap) {
    size_t o = 0;
    if (cap < 8) { if (cap) dst[0] = '\0'; return; }
    dst[o++] = '"';
    for (size_t i = 0; i < n && o + 6 < cap; i++) {
        unsigned char c = b[i];
        if (c == '\n') { dst[o++] = '\\'; dst[o++] = 'n'; }
        else if (c == '"' || c == '\\') { dst[o++] = '\\'; dst[o++] = (char)c; }
        else if (c >= 0x20 && c < 0x7f) dst[o++] = (char)c;
        else o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
    }
    dst[o++] = '"';
    dst[o] = '\0';
}

/* The shape [a,b,c] of n dims into buf. */
static void shape_str(const int64_t *d, int n, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, i ? ",%lld" : "%lld", (long long)d[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* ===================================================================================== */
/* the child's stderr: ring buffer and its last lines                                    */
/* ===================================================================================== */

static void ring_put(qc_exec *x, const char *p, size_t n) {
    if (n >= RING_SIZE) {
        p += n - RING_SIZE;
        n = RING_SIZE;
        x->ring_start = 0;
        x->ring_len = 0;
    }
    size_t end = (x->ring_start + x->ring_len) % RING_SIZE;
    size_t first = RING_SIZE - end < n ? RING_SIZE - end : n;
    memcpy(x->ring + end, p, first);
    memcpy(x->ring, p + first, n - first);
    x->ring_len += n;
    if (x->ring_len > RING_SIZE) {
        x->ring_start = (x->ring_start + x->ring_len - RING_SIZE) % RING_SIZE;
        x->ring_len = RING_SIZE;
    }
}

/* Read whatever the child has written to stderr (non-blocking; at most 256 KiB per call so a
 * child writing without pause cannot keep the host here). Closes fd_err at EOF. */
static void drain_stderr(qc_exec *x) {
    char b[4096];
    for (int i = 0; i < 64 && x->fd_err >= 0; i++) {
        ssize_t r = read(x->fd_err, b, sizeof b);
        if (r > 0) { ring_put(x, b, (size_t)r); continue; }
        if (r < 0 && errno == EINTR) continue;
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            close(x->fd_err);
            x->fd_err = -1;
        }
        return;
    }
}

/* The last TAIL_LINES non-empty stderr lines joined with " | ", control characters replaced,
 * cut from the front to at most cap - 1 characters; "none" when there are none. */
static void stderr_tail(const qc_exec *x, char *dst, size_t cap) {
    char *lin = malloc(2 * RING_SIZE + 64), *out = lin ? lin + RING_SIZE : NULL;
    if (!lin) { snprintf(dst, cap, "(out of memory)"); return; }
    size_t n = x->ring_len;
    for (size_t i = 0; i < n; i++) lin[i] = x->ring[(x->ring_start + i) % RING_SIZE];
    while (n && (lin[n - 1] == '\n' || lin[n - 1] == '\r' || lin[n - 1] == ' ')) n--;
    size_t s = n;
    for (int lines = 0; s > 0; s--)
        if (lin[s - 1] == '\n' && ++lines == TAIL_LINES) break;
    size_t o = 0;
    int at_line_start = 1, any = 0;
    for (size_t i = s; i < n; i++) {
        unsigned char c = (unsigned char)lin[i];
        if (c == '\n') { at_line_start = 1; continue; }
        if (c == '\r') continue;
        if (at_line_start) {
            if (any) { memcpy(out + o, " | ", 3); o += 3; }
            at_line_start = 0;
            any = 1;
        }
        out[o++] = (c == '\t') ? ' ' : (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    out[o] = '\0';
    if (!any) snprintf(dst, cap, "none");
    else if (o + 1 <= cap) memcpy(dst, out, o + 1);
    else if (cap < 8) dst[0] = '\0';
    else snprintf(dst, cap, "...%s", out + o - (cap - 4));
    free(lin);
}

/* ===================================================================================== */
/* messages                                                                              */
/* ===================================================================================== */

/* The failure message into dst: the stderr tail gets what room is left in cap. */
static void format_msg(const qc_exec *x, char *dst, size_t cap) {
    int n = snprintf(dst, cap, "exec adapter '%s': %s, in %s", x->cmdq, x->what, x->op);
    if (!x->with_stderr || n < 0 || (size_t)n >= cap) return;
    size_t room = cap - (size_t)n - sizeof " (last stderr: )";
    if (room < 40) return;
    char tail[TAIL_CHARS + 1];
    stderr_tail(x, tail, room < sizeof tail ? room : sizeof tail);
    snprintf(dst + n, cap - (size_t)n, " (last stderr: %s)", tail);
}

static void set_msgv(qc_exec *x, const char *op, int with_stderr, const char *fmt, va_list ap) {
    vsnprintf(x->what, sizeof x->what, fmt, ap);
    snprintf(x->op, sizeof x->op, "%s", op);
    x->with_stderr = with_stderr;
    format_msg(x, x->err, sizeof x->err);
}

/* A failure of the host side or of the caller (the child is fine): no stderr quoted. */
static int local_err(qc_exec *x, int rc, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int local_err(qc_exec *x, int rc, const char *op, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_msgv(x, op, 0, fmt, ap);
    va_end(ap);
    return rc;
}

static int not_running(qc_exec *x, const char *op) {
    return local_err(x, QC_PLUGIN_ERROR, op,
                     "adapter is not running (it failed earlier: %s); reset() restarts it",
                     x->dead_why);
}

/* ===================================================================================== */
/* the child process: spawn, kill, reap                                                  */
/* ===================================================================================== */

/* pipe2(O_CLOEXEC) with both fds >= 3 (so the child's dup2 onto 0..2 never aliases). */
static int pipe_high(int p[2]) {
    if (pipe2(p, O_CLOEXEC)) return -1;
    for (int i = 0; i < 2; i++) {
        if (p[i] >= 3) continue;
        int f = fcntl(p[i], F_DUPFD_CLOEXEC, 3);
        if (f < 0) { int e = errno; close(p[0]); close(p[1]); errno = e; return -1; }
        close(p[i]);
        p[i] = f;
    }
    return 0;
}

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

static void set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Start /bin/sh -c cmd in its own process group with the three pipes. 0 ok, else errno. */
static int spawn_child(qc_exec *x) {
    int in[2] = {-1, -1}, out[2] = {-1, -1}, er[2] = {-1, -1};
    if (pipe_high(in) || pipe_high(out) || pipe_high(er)) {
        int e = errno;
        close_fd(&in[0]); close_fd(&in[1]); close_fd(&out[0]); close_fd(&out[1]);
        close_fd(&er[0]); close_fd(&er[1]);
        return e;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, er[1], 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    /* every other fd of the host (files opened without O_CLOEXEC by any library included) */
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
    posix_spawnattr_init(&at);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);   /* the host may block SIGPIPE etc. */
    posix_spawnattr_setsigdefault(&at, &all); /* ... or ignore them: the child gets defaults */
    posix_spawnattr_setpgroup(&at, 0);        /* own group: a timeout kills sh and its command */
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
    char *argv[] = {(char *)"/bin/sh", (char *)"-c", x->cmd, NULL};
    pid_t pid = -1;
    int e = posix_spawn(&pid, "/bin/sh", &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close_fd(&in[0]);
    close_fd(&out[1]);
    close_fd(&er[1]);
    if (e) {
        close_fd(&in[1]); close_fd(&out[0]); close_fd(&er[0]);
        return e;
    }
    x->pid = pid;
    x->fd_in = in[1];
    x->fd_out = out[0];
    x->fd_err = er[0];
    set_nonblock(x->fd_in);
    set_nonblock(x->fd_out);
    set_nonblock(x->fd_err);
    x->ring_start = x->ring_len = 0;
    return 0;
}

/* Read the child's stderr until EOF or `seconds` have passed. */
static void drain_until_eof(qc_exec *x, double seconds) {
    double dl = now_s() + seconds;
    while (x->fd_err >= 0) {
        struct pollfd p = {x->fd_err, POLLIN, 0};
        int r = poll(&p, 1, ms_until(dl));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        drain_stderr(x);
        if (now_s() >= dl) break;
    }
}

/* SIGKILL the child's process group, reap the child, read its last stderr, close the fds. */
static void kill_child(qc_exec *x) {
    if (x->pid > 0) {
        /* the group id stays reserved while the (maybe zombie) leader is unreaped */
        kill(-x->pid, SIGKILL);
        kill(x->pid, SIGKILL);
        double dl = now_s() + REAP_WAIT_S;
        for (;;) {
            int st;
            pid_t r = waitpid(x->pid, &st, WNOHANG);
            if (r == x->pid || (r < 0 && errno != EINTR)) break;
            if (now_s() >= dl) {
                fprintf(stderr, "qwen-conform: exec adapter '%s': pid %d not reaped %g s after "
                        "SIGKILL\n", x->cmdq, (int)x->pid, REAP_WAIT_S);
                break;
            }
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
        x->pid = -1;
    }
    drain_until_eof(x, DRAIN_WAIT_S);
    close_fd(&x->fd_in);
    close_fd(&x->fd_out);
    close_fd(&x->fd_err);
}

/* A failure of the child: kill it, mark the handle dead, message with the stderr tail. */
static int fail(qc_exec *x, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(qc_exec *x, const char *op, const char *fmt, ...) {
    char what[sizeof x->what];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    kill_child(x);
    x->dead = 1;
    x->hidden_valid = 0;
    x->state_npos = -1;
    snprintf(x->dead_why, sizeof x->dead_why, "%s, in %s", what, op);
    snprintf(x->what, sizeof x->what, "%s", what);
    snprintf(x->op, sizeof x->op, "%s", op);
    x->with_stderr = 1;
    format_msg(x, x->err, sizeof x->err);
    return QC_PLUGIN_ERROR;
}

/* How the child ended, from waitid. */
static void exit_text(const siginfo_t *si, char *buf, size_t cap) {
    if (si->si_code == CLD_EXITED) {
        int s = si->si_status;
        if (s > 128 && s < 128 + 65)
            snprintf(buf, cap, "adapter died (signal %d) (reported by /bin/sh as exit status %d)",
                     s - 128, s);
        else if (s == 127)
            snprintf(buf, cap, "adapter exited with status 127 (command not found?)");
        else if (s == 126)
            snprintf(buf, cap, "adapter exited with status 126 (command not executable?)");
        else
            snprintf(buf, cap, "adapter exited with status %d", s);
    } else {
        snprintf(buf, cap, "adapter died (signal %d)", si->si_status);
    }
}

/* The child closed its stdout (EOF) or stdin (EPIPE): wait a little for its exit status and
 * report that ("adapter died (signal 11)", "adapter exited with status 3"), or `how` when it
 * is still running; either way it is killed. */
static int child_gone(qc_exec *x, const char *op, const char *how) {
    double dl = now_s() + GONE_WAIT_S;
    char what[256];
    snprintf(what, sizeof what, "adapter %s (still running: killed)", how);
    while (x->pid > 0) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        int r = waitid(P_PID, (id_t)x->pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if (r == 0 && si.si_pid == x->pid) { exit_text(&si, what, sizeof what); break; }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            snprintf(what, sizeof what, "adapter %s (its exit status is unavailable: %s)", how,
                     strerror(errno));
            break;
        }
        if (now_s() >= dl) break;
        struct pollfd p = {x->fd_err, POLLIN, 0};
        if (poll(&p, x->fd_err >= 0 ? 1 : 0, 5) > 0) drain_stderr(x);
    }
    return fail(x, op, "%s", what);
}

/* ===================================================================================== */
/* bounded I/O                                                                           */
/* ===================================================================================== */

enum { IO_OK = 0, IO_EOF = -1, IO_TIMEOUT = -2, IO_ERR = -3 };

/* Wait until fd is ready for ev or the deadline passes, draining stderr meanwhile.
 * 1: ready (or hung up: the next read / write tells), 0: timed out. */
static int io_wait(qc_exec *x, int fd, short ev, double deadline) {
    for (;;) {
        struct pollfd p[2] = {{fd, ev, 0}, {x->fd_err, POLLIN, 0}};
        int np = x->fd_err >= 0 ? 2 : 1;
        int r = poll(p, (nfds_t)np, ms_until(deadline));
        if (r < 0) {
            if (errno == EINTR) continue;
            return 1;
        }
        if (np == 2 && p[1].revents) drain_stderr(x);
        if (p[0].revents) return 1;
        if (now_s() >= deadline) return 0;
    }
}

/* Up to n bytes from the child's stdout: > 0 read, IO_EOF, IO_TIMEOUT, IO_ERR (errno). */
static ssize_t read_some(qc_exec *x, void *buf, size_t n, double deadline) {
    for (;;) {
        ssize_t r = read(x->fd_out, buf, n);
        if (r > 0) return r;
        if (r == 0) return IO_EOF;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return IO_ERR;
        if (!io_wait(x, x->fd_out, POLLIN, deadline)) return IO_TIMEOUT;
    }
}

/* Turn a failed read into the failure it means. `where`: "" or " (... incomplete)". */
static int io_fail(qc_exec *x, const char *op, ssize_t rc, const char *where) {
    if (rc == IO_TIMEOUT) return fail(x, op, "adapter timed out after %g s%s", x->timeout_s, where);
    if (rc == IO_EOF) return child_gone(x, op, "closed its stdout");
    return fail(x, op, "reading its stdout failed: %s%s", strerror(errno), where);
}

/* Exactly n bytes into buf, or the failure (child killed). */
static int read_exact(qc_exec *x, void *buf, size_t n, double deadline, const char *op,
                      const char *where) {
    char *p = buf;
    while (n) {
        ssize_t r = read_some(x, p, n > (1u << 30) ? (1u << 30) : n, deadline);
        if (r < 0) return io_fail(x, op, r, where);
        p += r;
        n -= (size_t)r;
    }
    return QC_PLUGIN_OK;
}

/* write() with SIGPIPE blocked for this thread; a SIGPIPE it raised is consumed. */
static ssize_t write_nosigpipe(int fd, const void *buf, size_t n) {
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE);
    ssize_t w = write(fd, buf, n);
    int e = errno;
    if (w < 0 && e == EPIPE && !was_pending) {
        const struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {}
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return w;
}

static int write_all(qc_exec *x, const void *buf, size_t n, double deadline, const char *op) {
    const char *p = buf;
    while (n) {
        ssize_t w = write_nosigpipe(x->fd_in, p, n);
        if (w > 0) { p += w; n -= (size_t)w; continue; }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!io_wait(x, x->fd_in, POLLOUT, deadline))
                return fail(x, op, "adapter timed out after %g s (it does not read its stdin)",
                            x->timeout_s);
            continue;
        }
        if (w < 0 && errno == EPIPE) return child_gone(x, op, "closed its stdin (EPIPE)");
        return fail(x, op, "writing to its stdin failed: %s", strerror(errno));
    }
    return QC_PLUGIN_OK;
}

/* ===================================================================================== */
/* frames                                                                                */
/* ===================================================================================== */

/* Before a request: the child must be silent on stdout (a frame it wrote unasked, text printed
 * after its last answer) and alive. */
static int check_quiet(qc_exec *x, const char *op) {
    drain_stderr(x);
    struct pollfd p = {x->fd_out, POLLIN, 0};
    int r;
    while ((r = poll(&p, 1, 0)) < 0 && errno == EINTR) {}
    if (r <= 0 || !p.revents) return QC_PLUGIN_OK;
    unsigned char b[64];
    ssize_t n = read(x->fd_out, b, sizeof b);
    if (n == 0) return child_gone(x, op, "closed its stdout");
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return QC_PLUGIN_OK;
        return fail(x, op, "reading its stdout failed: %s", strerror(errno));
    }
    char q[300];
    quote_bytes(b, (size_t)n, q, sizeof q);
    return fail(x, op, "protocol violation: unsolicited output on stdout before the request: %s",
                q);
}

/* Send one request frame (header only: the host's requests carry no payload). */
static int send_request(qc_exec *x, const char *op, const char *hdr, size_t len, double deadline) {
    if (len < 1 || len > MAX_HEADER)
        return local_err(x, QC_PLUGIN_ERROR, op, "request header of %zu bytes exceeds the "
                         "protocol's 1 MiB", len);
    int rc = check_quiet(x, op);
    if (rc) return rc;
    unsigned char pre[16];
    memcpy(pre, "QCAP", 4);
    put_le32(pre + 4, (uint32_t)len);
    put_le64(pre + 8, 0);
    rc = write_all(x, pre, sizeof pre, deadline, op);
    if (!rc) rc = write_all(x, hdr, len, deadline, op);
    return rc;
}

/* Read one frame's prefix and JSON header. OK: *root (caller frees), *payload_len. */
static int recv_header(qc_exec *x, const char *op, double deadline, cJSON **root,
                       uint64_t *payload_len) {
    unsigned char pre[80];
    size_t got = 0;
    *root = NULL;
    while (got < 16) {
        ssize_t r = read_some(x, pre + got, 16 - got, deadline);
        if (r < 0) {
            if (got == 0) return io_fail(x, op, r, "");
            char q[120], where[160];
            quote_bytes(pre, got, q, sizeof q);
            snprintf(where, sizeof where, " (frame prefix incomplete: %zu of 16 bytes: %s)",
                     got, q);
            return io_fail(x, op, r, where);
        }
        got += (size_t)r;
        if (memcmp(pre, "QCAP", got < 4 ? got : 4)) {
            /* evidence: what else is there right now (a stray print is usually a line) */
            double dl = now_s() + 0.05;
            while (got < sizeof pre) {
                ssize_t m = read_some(x, pre + got, sizeof pre - got, dl);
                if (m <= 0) break;
                got += (size_t)m;
            }
            size_t show = 0; /* up to the end of the first line, if it is one */
            while (show < got && pre[show] != '\n') show++;
            show = show < got ? show + 1 : got;
            char q[300];
            quote_bytes(pre, show, q, sizeof q);
            return fail(x, op, "protocol violation: bad magic: stdout has %s where a frame "
                        "(\"QCAP\") must start (text printed on stdout?)", q);
        }
    }
    uint32_t hl = get_le32(pre + 4);
    uint64_t pl = get_le64(pre + 8);
    if (hl < 1 || hl > MAX_HEADER)
        return fail(x, op, "protocol violation: header_len %u is not in 1 .. %u", hl, MAX_HEADER);
    if (grow((void **)&x->hdr, &x->hdr_cap, (size_t)hl + 1))
        return fail(x, op, "out of memory for a %u-byte header", hl);
    int rc = read_exact(x, x->hdr, hl, deadline, op, " (header incomplete)");
    if (rc) return rc;
    x->hdr[hl] = '\0';
    cJSON *j = cJSON_ParseWithLength(x->hdr, hl);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        char q[200];
        quote_bytes((const unsigned char *)x->hdr, hl < 120 ? hl : 120, q, sizeof q);
        return fail(x, op, "protocol violation: the header is not a JSON object: %s%s", q,
                    hl > 120 ? "..." : "");
    }
    *root = j;
    *payload_len = pl;
    return QC_PLUGIN_OK;
}

/* Send a request and read the answer's header, both by deadline (the caller reads any payload
 * by the same deadline). OK: an "ok" answer, *root to free. An "error" answer: QC_PLUGIN_ERROR,
 * or QC_PLUGIN_UNSUPPORTED when it says "unsupported": true (the child stays up). Anything
 * else: QC_PLUGIN_ERROR, child killed. */
static int transact(qc_exec *x, const char *op, const char *hdr, size_t len, double deadline,
                    cJSON **root, uint64_t *payload_len) {
    *root = NULL;
    int rc = send_request(x, op, hdr, len, deadline);
    if (rc) return rc;
    cJSON *j;
    uint64_t pl;
    rc = recv_header(x, op, deadline, &j, &pl);
    if (rc) return rc;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "ok")) {
        *root = j;
        *payload_len = pl;
        return QC_PLUGIN_OK;
    }
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "error")) {
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(j, "message");
        int unsup = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "unsupported"));
        char m[600];
        snprintf(m, sizeof m, "%s", cJSON_IsString(msg) ? msg->valuestring : "(no message)");
        for (char *c = m; *c; c++) /* one line */
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = ' ';
        cJSON_Delete(j);
        if (pl) return fail(x, op, "protocol violation: an error answer with a payload of %llu "
                            "bytes", (unsigned long long)pl);
        drain_stderr(x);
        snprintf(x->what, sizeof x->what, "%s: %s", unsup ? "unsupported" : "error response", m);
        snprintf(x->op, sizeof x->op, "%s", op);
        x->with_stderr = !unsup;
        format_msg(x, x->err, sizeof x->err);
        return unsup ? QC_PLUGIN_UNSUPPORTED : QC_PLUGIN_ERROR;
    }
    char q[120];
    if (cJSON_IsString(type)) quote_bytes((const unsigned char *)type->valuestring,
                                          strlen(type->valuestring), q, sizeof q);
    else snprintf(q, sizeof q, "%s", type ? "(not a string)" : "(missing)");
    cJSON_Delete(j);
    return fail(x, op, "protocol violation: answer type %s, expected \"ok\" or \"error\"", q);
}

/* An "ok" answer that must carry nothing: no tensors, payload_len 0. Frees root. */
static int expect_empty(qc_exec *x, const char *op, cJSON *root, uint64_t pl) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    int nt = t ? (cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1) : 0;
    cJSON_Delete(root);
    if (nt != 0 || pl != 0)
        return fail(x, op, "protocol violation: the answer to %s must carry no tensors, it lists "
                    "%d and payload_len is %llu", op, nt, (unsigned long long)pl);
    return QC_PLUGIN_OK;
}

/* "name" [shape] of a listed tensor, for messages. */
static void listed_str(const cJSON *e, char *buf, size_t cap) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    size_t o = (size_t)snprintf(buf, cap, "'%.60s' ", cJSON_IsString(nm) ? nm->valuestring
                                                                         : "(no name)");
    if (!cJSON_IsArray(sh)) { if (o < cap) snprintf(buf + o, cap - o, "(no shape)"); return; }
    o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, "[");
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
        if (o >= cap) return;
        if (cJSON_IsNumber(d)) o += (size_t)snprintf(buf + o, cap - o, i ? ",%.17g" : "%.17g",
                                                     d->valuedouble);
        else o += (size_t)snprintf(buf + o, cap - o, i ? ",?" : "?");
        i++;
    }
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static int listed_matches(const cJSON *e, const tspec *s) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsObject(e) || !cJSON_IsString(nm) || strcmp(nm->valuestring, s->name)) return 0;
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) != s->ndim) return 0;
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
        if (!cJSON_IsNumber(d) || d->valuedouble != (double)s->dims[i]) return 0;
        i++;
    }
    return 1;
}

static uint64_t spec_numel(const tspec *s) {
    uint64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= (uint64_t)s->dims[i];
    return n;
}

/* The answer's tensors must be exactly specs[0..ns) (names, shapes, order) and payload_len
 * 4 x their elements; then the payload is read into each spec's dst. Frees root. */
static int recv_tensors(qc_exec *x, const char *op, cJSON *root, uint64_t pl, const tspec *specs,
                        int ns, double deadline) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    char got[200], want[200], sh[80];
    int nt = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1;
    if (nt != ns) {
        shape_str(specs[0].dims, specs[0].ndim, sh, sizeof sh);
        cJSON_Delete(root);
        if (nt < 0) return fail(x, op, "protocol violation: the answer has no \"tensors\" list "
                                "(expected %d tensors, the first '%s' %s)", ns, specs[0].name, sh);
        return fail(x, op, "protocol violation: the answer lists %d tensors, expected %d (the "
                    "first '%s' %s)", nt, ns, specs[0].name, sh);
    }
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, t) {
        if (!listed_matches(e, &specs[i])) {
            listed_str(e, got, sizeof got);
            shape_str(specs[i].dims, specs[i].ndim, sh, sizeof sh);
            snprintf(want, sizeof want, "'%s' %s", specs[i].name, sh);
            cJSON_Delete(root);
            return fail(x, op, "protocol violation: tensor %d is %s, expected %s", i, got, want);
        }
        i++;
    }
    cJSON_Delete(root);
    uint64_t total = 0;
    for (i = 0; i < ns; i++) total += spec_numel(&specs[i]);
    if (pl / 4 != total || pl % 4)
        return fail(x, op, "protocol violation: payload_len %llu != 4 x %llu elements = %llu "
                    "bytes of the tensors listed", (unsigned long long)pl,
                    (unsigned long long)total, (unsigned long long)(4 * total));
    for (i = 0; i < ns; i++) {
        size_t n = (size_t)spec_numel(&specs[i]);
        char where[80];
        snprintf(where, sizeof where, " (payload incomplete: tensor '%s')", specs[i].name);
        int rc = read_exact(x, specs[i].dst, n * sizeof(float), deadline, op, where);
        if (rc) return rc;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        uint32_t *u = (uint32_t *)specs[i].dst;
        for (size_t k = 0; k < n; k++) u[k] = __builtin_bswap32(u[k]);
#endif
    }
    return QC_PLUGIN_OK;
}

/* Send a cJSON request; the answer must be an empty "ok". Frees req. */
static int simple_request(qc_exec *x, const char *op, cJSON *req) {
    char *s = req ? cJSON_PrintUnformatted(req) : NULL;
    cJSON_Delete(req);
    if (!s) return local_err(x, QC_PLUGIN_ERROR, op, "out of memory building the request");
    cJSON *root;
    uint64_t pl;
    int rc = transact(x, op, s, strlen(s), now_s() + x->timeout_s, &root, &pl);
    free(s);
    if (rc) return rc;
    return expect_empty(x, op, root, pl);
}

static cJSON *op_object(const char *op) {
    cJSON *j = cJSON_CreateObject();
    if (j && !cJSON_AddStringToObject(j, "op", op)) { cJSON_Delete(j); return NULL; }
    return j;
}

/* ===================================================================================== */
/* startup: spawn, hello, open                                                           */
/* ===================================================================================== */

static const struct {
    const char *name;
    uint32_t bit;
} cap_table[] = {
    {"hidden", QC_CAP_HIDDEN},       {"state_read", QC_CAP_STATE_READ},
    {"state_fill", QC_CAP_STATE_FILL}, {"threads", QC_CAP_THREADS},
    {"dn_kernel", QC_CAP_DN_KERNEL}, {"chunk_size", QC_CAP_CHUNK_SIZE},
};

/* obj[key] as an int32 in [lo, INT32_MAX]; absent -> def (or an error when def < lo). */
static int get_int(const cJSON *obj, const char *key, int32_t lo, int32_t def, int32_t *out,
                   char *why, size_t cap) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) {
        if (def < lo) { snprintf(why, cap, "info.%s is missing", key); return -1; }
        *out = def;
        return 0;
    }
    double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!isfinite(v) || v != floor(v) || v < lo || v > INT32_MAX) {
        snprintf(why, cap, "info.%s must be an integer >= %d", key, (int)lo);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

/* Capability strings -> bits (unknown ones warned about once, ignored). */
static int parse_caps(qc_exec *x, const cJSON *arr, uint32_t *caps, char *why, size_t cap) {
    *caps = 0;
    if (!cJSON_IsArray(arr)) { snprintf(why, cap, "capabilities must be a list of strings"); return -1; }
    const cJSON *c;
    cJSON_ArrayForEach(c, arr) {
        if (!cJSON_IsString(c)) { snprintf(why, cap, "capabilities must be a list of strings"); return -1; }
        size_t k = 0;
        while (k < sizeof cap_table / sizeof cap_table[0] && strcmp(cap_table[k].name, c->valuestring))
            k++;
        if (k < sizeof cap_table / sizeof cap_table[0]) *caps |= cap_table[k].bit;
        else if (!x->warned_caps)
            fprintf(stderr, "qwen-conform: warning: exec adapter '%s': unknown capability '%s' "
                    "ignored\n", x->cmdq, c->valuestring);
    }
    return 0;
}

/* Start the child, read its hello, send open, parse the info into *info. On failure the child
 * is gone and x->err says why (QC_PLUGIN_ERROR). tag: "" or " (restart)" for messages. */
static int start_child(qc_exec *x, qc_plugin_info *info, const char *tag) {
    char op_hello[48], op_open[48], why[200];
    snprintf(op_hello, sizeof op_hello, "hello%s", tag);
    snprintf(op_open, sizeof op_open, "open%s", tag);
    memset(info, 0, sizeof *info);
    int e = spawn_child(x);
    if (e) {
        x->dead = 1;
        snprintf(x->dead_why, sizeof x->dead_why, "cannot start /bin/sh: %s", strerror(e));
        return local_err(x, QC_PLUGIN_ERROR, op_hello, "cannot start /bin/sh -c: %s",
                         strerror(e));
    }
    /* hello */
    cJSON *h;
    uint64_t pl;
    int rc = recv_header(x, op_hello, now_s() + x->timeout_s, &h, &pl);
    if (rc) return rc;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(h, "type");
    const cJSON *proto = cJSON_GetObjectItemCaseSensitive(h, "protocol");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(h, "version");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "hello")) {
        cJSON_Delete(h);
        return fail(x, op_hello, "protocol violation: the first frame is not a hello (\"type\": "
                    "\"hello\")");
    }
    if (!cJSON_IsString(proto) || strcmp(proto->valuestring, PROTO_NAME) ||
        !cJSON_IsNumber(ver) || ver->valuedouble != PROTO_VERSION) {
        char pv[160];
        snprintf(pv, sizeof pv, "'%.60s' version %.6g",
                 cJSON_IsString(proto) ? proto->valuestring : "(none)",
                 cJSON_IsNumber(ver) ? ver->valuedouble : -1.0);
        cJSON_Delete(h);
        return fail(x, op_hello, "protocol mismatch: the adapter speaks %s, qwen-conform speaks '"
                    PROTO_NAME "' version %d", pv, PROTO_VERSION);
    }
    if (pl) {
        cJSON_Delete(h);
        return fail(x, op_hello, "protocol violation: a hello with a payload of %llu bytes",
                    (unsigned long long)pl);
    }
    char hello_name[128] = "";
    const cJSON *hn = cJSON_GetObjectItemCaseSensitive(h, "name");
    if (cJSON_IsString(hn)) snprintf(hello_name, sizeof hello_name, "%s", hn->valuestring);
    uint32_t hello_caps = 0;
    int hello_has_caps = 0;
    const cJSON *hc = cJSON_GetObjectItemCaseSensitive(h, "capabilities");
    if (hc) {
        if (parse_caps(x, hc, &hello_caps, why, sizeof why)) {
            cJSON_Delete(h);
            return fail(x, op_hello, "malformed hello: %s", why);
        }
        hello_has_caps = 1;
    }
    cJSON_Delete(h);

    /* open */
    cJSON *req = op_object("open");
    if (req && (!cJSON_AddStringToObject(req, "model_dir", x->model_dir) ||
                !cJSON_AddStringToObject(req, "options", x->options))) {
        cJSON_Delete(req);
        req = NULL;
    }
    char *s = req ? cJSON_PrintUnformatted(req) : NULL;
    cJSON_Delete(req);
    if (!s) return fail(x, op_open, "out of memory building the open request");
    cJSON *root;
    rc = transact(x, op_open, s, strlen(s), now_s() + x->timeout_s, &root, &pl);
    free(s);
    if (rc) {
        if (x->pid > 0) { /* an error answer: the runtime cannot open this model */
            x->open_refused = 1;
            char what[sizeof x->what];
            snprintf(what, sizeof what, "open failed: %s", x->what);
            return fail(x, op_open, "%s", what);
        }
        return rc;
    }
    const cJSON *inf = cJSON_GetObjectItemCaseSensitive(root, "info");
    int bad = 0;
    if (!cJSON_IsObject(inf)) { snprintf(why, sizeof why, "no \"info\" object"); bad = 1; }
    if (!bad) bad = get_int(inf, "vocab_size", 1, 0, &info->vocab_size, why, sizeof why) ||
                    get_int(inf, "hidden_size", 1, 0, &info->hidden_size, why, sizeof why) ||
                    get_int(inf, "n_layers", 1, 0, &info->n_layers, why, sizeof why) ||
                    get_int(inf, "max_tokens_per_call", 0, 0, &info->max_tokens_per_call, why,
                            sizeof why) ||
                    get_int(inf, "max_context_len", 0, 0, &info->max_context_len, why,
                            sizeof why);
    if (!bad) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(inf, "capabilities");
        if (c) bad = parse_caps(x, c, &info->caps, why, sizeof why);
        else info->caps = hello_has_caps ? hello_caps : 0;
    }
    if (!bad) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(inf, "name");
        if (nm && !cJSON_IsString(nm)) { snprintf(why, sizeof why, "info.name must be a string"); bad = 1; }
        else if (nm && nm->valuestring[0]) snprintf(info->name, sizeof info->name, "%s", nm->valuestring);
        else if (hello_name[0]) snprintf(info->name, sizeof info->name, "%s", hello_name);
        else snprintf(info->name, sizeof info->name, "exec:%s", x->cmdq);
    }
    if (bad) {
        cJSON_Delete(root);
        return fail(x, op_open, "malformed open answer: %s", why);
    }
    x->warned_caps = 1;
    rc = expect_empty(x, op_open, root, pl);
    if (rc) return rc;
    x->dead = 0;
    return QC_PLUGIN_OK;
}

/* A dead handle's restart: a fresh child with the same open and options. */
static int respawn(qc_exec *x) {
    qc_plugin_info inf;
    int rc = start_child(x, &inf, " (restart)");
    if (rc) return rc;
    if (inf.vocab_size != x->info.vocab_size || inf.hidden_size != x->info.hidden_size ||
        inf.n_layers != x->info.n_layers || inf.caps != x->info.caps ||
        inf.max_tokens_per_call != x->info.max_tokens_per_call ||
        inf.max_context_len != x->info.max_context_len)
        return fail(x, "open (restart)", "the restarted adapter reports different info (vocab "
                    "%d, hidden %d, layers %d, caps 0x%x; first: %d, %d, %d, 0x%x)",
                    inf.vocab_size, inf.hidden_size, inf.n_layers, inf.caps, x->info.vocab_size,
                    x->info.hidden_size, x->info.n_layers, x->info.caps);
    for (int i = 0; i < x->n_opts; i++) {
        cJSON *req = op_object("set_option");
        if (req && (!cJSON_AddStringToObject(req, "key", x->opts[i].key) ||
                    !cJSON_AddStringToObject(req, "value", x->opts[i].value))) {
            cJSON_Delete(req);
            req = NULL;
        }
        rc = simple_request(x, "set_option (restart)", req);
        if (rc) {
            if (x->pid > 0) {
                char what[sizeof x->what];
                snprintf(what, sizeof what, "the restarted adapter refused %s=%s: %s",
                         x->opts[i].key, x->opts[i].value, x->what);
                return fail(x, "set_option (restart)", "%s", what);
            }
            return QC_PLUGIN_ERROR;
        }
    }
    return QC_PLUGIN_OK;
}

/* ===================================================================================== */
/* the vtable                                                                            */
/* ===================================================================================== */

static int dim_vocab(const qc_exec *x) { return x->have_dims ? x->dims.vocab : x->info.vocab_size; }
static int dim_hidden(const qc_exec *x) { return x->have_dims ? x->dims.hidden : x->info.hidden_size; }
static int dim_layers(const qc_exec *x) { return x->have_dims ? x->dims.n_layers : x->info.n_layers; }

static int x_reset(void *h) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    x->hidden_valid = 0;
    x->state_npos = -1;
    if (x->dead) {
        int rc = respawn(x);
        if (rc) return rc;
    }
    return simple_request(x, "reset", op_object("reset"));
}

static int x_forward(void *h, const int32_t *tokens, int32_t n, int32_t start_pos,
                     int32_t all_logits, float *logits) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    if (x->dead) return not_running(x, "forward");
    x->hidden_valid = 0;
    x->state_npos = -1;
    if (!tokens || !logits || n < 1 || start_pos < 0)
        return local_err(x, QC_PLUGIN_ERROR, "forward", "bad arguments (n %d, start_pos %d%s%s)",
                         (int)n, (int)start_pos, tokens ? "" : ", tokens NULL",
                         logits ? "" : ", logits NULL");
    if (x->info.max_tokens_per_call > 0 && n > x->info.max_tokens_per_call)
        return local_err(x, QC_PLUGIN_ERROR, "forward", "%d tokens in one call, the adapter "
                         "announced max_tokens_per_call %d", (int)n,
                         (int)x->info.max_tokens_per_call);
    if ((size_t)n > MAX_HEADER / 2)
        return local_err(x, QC_PLUGIN_ERROR, "forward", "%d tokens do not fit in one request "
                         "header (1 MiB)", (int)n);
    int64_t V = dim_vocab(x), H = dim_hidden(x), L = dim_layers(x);
    int want_h = x->want_hidden && (x->info.caps & QC_CAP_HIDDEN);
    tspec sp[2];
    memset(sp, 0, sizeof sp);
    snprintf(sp[0].name, sizeof sp[0].name, "logits");
    sp[0].ndim = 2;
    sp[0].dims[0] = all_logits ? n : 1;
    sp[0].dims[1] = V;
    sp[0].dst = logits;
    if (want_h) { /* allocated before the request: a failure here leaves the stream in step */
        size_t need = (size_t)(L + 1) * (size_t)n * (size_t)H;
        if (grow((void **)&x->hidden, &x->hidden_cap, need * sizeof(float)))
            return local_err(x, QC_PLUGIN_ERROR, "forward", "out of memory for hidden states "
                             "[%lld, %d, %lld]", (long long)(L + 1), (int)n, (long long)H);
        snprintf(sp[1].name, sizeof sp[1].name, "hidden");
        sp[1].ndim = 3;
        sp[1].dims[0] = L + 1;
        sp[1].dims[1] = n;
        sp[1].dims[2] = H;
        sp[1].dst = x->hidden;
    }
    size_t need = 128 + (size_t)n * 12;
    if (grow((void **)&x->req, &x->req_cap, need))
        return local_err(x, QC_PLUGIN_ERROR, "forward", "out of memory for the request");
    char *p = x->req;
    p += sprintf(p, "{\"op\":\"forward\",\"tokens\":[");
    for (int32_t i = 0; i < n; i++) p += sprintf(p, i ? ",%d" : "%d", (int)tokens[i]);
    p += sprintf(p, "],\"start_pos\":%d,\"all_logits\":%s,\"hidden\":%s}", (int)start_pos,
                 all_logits ? "true" : "false", want_h ? "true" : "false");
    cJSON *root;
    uint64_t pl;
    double deadline = now_s() + x->timeout_s;
    int rc = transact(x, "forward", x->req, (size_t)(p - x->req), deadline, &root, &pl);
    if (rc) return rc;
    rc = recv_tensors(x, "forward", root, pl, sp, want_h ? 2 : 1, deadline);
    if (rc) return rc;
    if (want_h) {
        x->hidden_valid = 1;
        x->hidden_n = n;
    }
    return QC_PLUGIN_OK;
}

static void x_close(void *h) {
    qc_exec *x = h;
    if (!x) return;
    if (!x->dead && x->pid > 0) {
        double dl = now_s() + CLOSE_WAIT_S;
        const char *req = "{\"op\":\"close\"}";
        cJSON *root = NULL;
        uint64_t pl;
        if (!transact(x, "close", req, strlen(req), dl, &root, &pl))
            cJSON_Delete(root);
        while (x->pid > 0) { /* its answer does not matter: wait for the exit, or kill */
            siginfo_t si;
            memset(&si, 0, sizeof si);
            int r = waitid(P_PID, (id_t)x->pid, &si, WEXITED | WNOHANG | WNOWAIT);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0 || si.si_pid == x->pid || now_s() >= dl) break;
            struct pollfd p = {x->fd_err, POLLIN, 0};
            if (poll(&p, x->fd_err >= 0 ? 1 : 0, 10) > 0) drain_stderr(x);
        }
    }
    kill_child(x);
    free(x->cmd);
    free(x->model_dir);
    free(x->options);
    free(x->specs);
    free(x->hidden);
    free(x->state);
    free(x->req);
    free(x->hdr);
    for (int i = 0; i < x->n_opts; i++) {
        free(x->opts[i].key);
        free(x->opts[i].value);
    }
    free(x);
}

static const char *x_last_error(void *h) {
    qc_exec *x = h;
    return x ? x->err : g_open_err;
}

static int x_get_hidden(void *h, int32_t index, float *dst) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    if (!(x->info.caps & QC_CAP_HIDDEN))
        return local_err(x, QC_PLUGIN_UNSUPPORTED, "get_hidden", "the adapter did not announce "
                         "the 'hidden' capability");
    if (x->dead) return not_running(x, "get_hidden");
    int L = dim_layers(x), H = dim_hidden(x);
    if (!x->hidden_valid)
        return local_err(x, QC_PLUGIN_ERROR, "get_hidden", "no hidden states: the last forward "
                         "did not return any (not asked for: qc_exec_want_hidden off, or the "
                         "forward failed)");
    if (index < 0 || index > L || !dst)
        return local_err(x, QC_PLUGIN_ERROR, "get_hidden", "bad arguments (index %d of 0..%d%s)",
                         (int)index, L, dst ? "" : ", dst NULL");
    size_t blk = (size_t)x->hidden_n * (size_t)H;
    memcpy(dst, x->hidden + (size_t)index * blk, blk * sizeof(float));
    return QC_PLUGIN_OK;
}

static const char *const state_kind_name[4] = {"k_cache", "v_cache", "conv_state",
                                               "recurrent_state"};

/* One get_state request: every layer's tensors into the cache, for n_pos. */
static int fetch_state(qc_exec *x, int32_t n_pos) {
    const qc_exec_dims *d = &x->dims;
    size_t total = 0;
    x->state_npos = -1;
    for (int l = 0; l < d->n_layers; l++) {
        tspec *s = &x->specs[2 * l];
        if (d->layer_full[l]) {
            for (int k = 0; k < 2; k++) {
                s[k].ndim = 3;
                s[k].dims[0] = d->n_kv_heads;
                s[k].dims[1] = n_pos;
                s[k].dims[2] = d->head_dim;
            }
        } else {
            s[0].ndim = 2;
            s[0].dims[0] = d->conv_dim;
            s[0].dims[1] = d->conv_kernel;
            s[1].ndim = 3;
            s[1].dims[0] = d->n_v_heads;
            s[1].dims[1] = d->k_dim;
            s[1].dims[2] = d->v_dim;
        }
        total += (size_t)spec_numel(&s[0]) + (size_t)spec_numel(&s[1]);
    }
    if (grow((void **)&x->state, &x->state_cap, (total ? total : 1) * sizeof(float)))
        return local_err(x, QC_PLUGIN_ERROR, "get_state", "out of memory for the state "
                         "(%zu floats)", total);
    size_t off = 0;
    for (int i = 0; i < 2 * d->n_layers; i++) {
        x->specs[i].dst = x->state + off;
        off += (size_t)spec_numel(&x->specs[i]);
    }
    char req[64];
    int len = snprintf(req, sizeof req, "{\"op\":\"get_state\",\"n_pos\":%d}", (int)n_pos);
    cJSON *root;
    uint64_t pl;
    double deadline = now_s() + x->timeout_s;
    int rc = transact(x, "get_state", req, (size_t)len, deadline, &root, &pl);
    if (rc) return rc;
    rc = recv_tensors(x, "get_state", root, pl, x->specs, 2 * d->n_layers, deadline);
    if (rc) return rc;
    x->state_npos = n_pos;
    return QC_PLUGIN_OK;
}

static int x_get_state(void *h, int32_t layer, int32_t kind, int32_t n_pos, float *dst) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    if (!(x->info.caps & QC_CAP_STATE_READ))
        return local_err(x, QC_PLUGIN_UNSUPPORTED, "get_state", "the adapter did not announce "
                         "the 'state_read' capability");
    if (x->dead) return not_running(x, "get_state");
    if (!x->have_dims)
        return local_err(x, QC_PLUGIN_ERROR, "get_state", "the model dims are unknown (%s)",
                         x->dims_error[0] ? x->dims_error : "qc_exec_set_dims was not called");
    const qc_exec_dims *d = &x->dims;
    if (layer < 0 || layer >= d->n_layers || kind < 0 || kind > 3 || n_pos < 0 || !dst)
        return local_err(x, QC_PLUGIN_ERROR, "get_state", "bad arguments (layer %d of %d, kind "
                         "%d, n_pos %d%s)", (int)layer, d->n_layers, (int)kind, (int)n_pos,
                         dst ? "" : ", dst NULL");
    int full = d->layer_full[layer] != 0, cache_kind = kind <= QC_STATE_V_CACHE;
    if (full != cache_kind)
        return local_err(x, QC_PLUGIN_ERROR, "get_state", "layer %d is a %s layer: it has no %s",
                         (int)layer, full ? "full attention" : "linear attention (Gated DeltaNet)",
                         state_kind_name[kind]);
    /* conv / recurrent do not depend on n_pos: any cached answer serves */
    if (x->state_npos < 0 || (cache_kind && x->state_npos != n_pos)) {
        int rc = fetch_state(x, n_pos);
        if (rc) return rc;
    }
    const tspec *s = &x->specs[2 * layer + (cache_kind ? kind : kind - 2)];
    memcpy(dst, s->dst, (size_t)spec_numel(s) * sizeof(float));
    return QC_PLUGIN_OK;
}

static int x_fill_state(void *h, float value) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    if (!(x->info.caps & QC_CAP_STATE_FILL))
        return local_err(x, QC_PLUGIN_UNSUPPORTED, "fill_state", "the adapter did not announce "
                         "the 'state_fill' capability");
    if (x->dead) return not_running(x, "fill_state");
    x->state_npos = -1;
    cJSON *req = op_object("fill_state");
    cJSON *v = isnan(value) ? cJSON_CreateString("nan")
               : isinf(value) ? cJSON_CreateString(value > 0 ? "inf" : "-inf")
               : cJSON_CreateNumber((double)value); /* %.17g: the float comes back exact */
    if (req && v) cJSON_AddItemToObject(req, "value", v);
    else { cJSON_Delete(v); cJSON_Delete(req); req = NULL; }
    return simple_request(x, "fill_state", req);
}

static int x_set_option(void *h, const char *key, const char *value) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    if (!key || !value)
        return local_err(x, QC_PLUGIN_ERROR, "set_option", "bad arguments (key or value NULL)");
    uint32_t bit = !strcmp(key, "threads") ? QC_CAP_THREADS
                   : !strcmp(key, "dn_kernel") ? QC_CAP_DN_KERNEL
                   : !strcmp(key, "chunk_size") ? QC_CAP_CHUNK_SIZE : 0;
    if (!bit)
        return local_err(x, QC_PLUGIN_UNSUPPORTED, "set_option", "unknown option '%.60s' "
                         "(threads, dn_kernel, chunk_size)", key);
    if (!(x->info.caps & bit))
        return local_err(x, QC_PLUGIN_UNSUPPORTED, "set_option", "the adapter did not announce "
                         "the '%s' capability", key);
    if (x->dead) return not_running(x, "set_option");
    x->state_npos = -1;
    cJSON *req = op_object("set_option");
    if (req && (!cJSON_AddStringToObject(req, "key", key) ||
                !cJSON_AddStringToObject(req, "value", value))) {
        cJSON_Delete(req);
        req = NULL;
    }
    int rc = simple_request(x, "set_option", req);
    if (rc) return rc;
    int i = 0;
    while (i < x->n_opts && strcmp(x->opts[i].key, key)) i++;
    char *nv = strdup(value);
    if (!nv || (i == x->n_opts && i == MAX_OPTS)) {
        free(nv);
        return local_err(x, QC_PLUGIN_ERROR, "set_option", "cannot remember %s=%s for a restart",
                         key, value);
    }
    if (i == x->n_opts) {
        x->opts[i].key = strdup(key);
        if (!x->opts[i].key) { free(nv); return local_err(x, QC_PLUGIN_ERROR, "set_option", "out of memory"); }
        x->n_opts++;
    } else {
        free(x->opts[i].value);
    }
    x->opts[i].value = nv;
    return QC_PLUGIN_OK;
}

static const qc_runtime_plugin exec_api = {
    .abi_version = QC_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(qc_runtime_plugin),
    .open = NULL,
    .reset = x_reset,
    .forward = x_forward,
    .close = x_close,
    .last_error = x_last_error,
    .get_hidden = x_get_hidden,
    .get_state = x_get_state,
    .fill_state = x_fill_state,
    .set_option = x_set_option,
};

/* ===================================================================================== */
/* public entry points                                                                   */
/* ===================================================================================== */

const qc_runtime_plugin *qc_exec_api(void) { return &exec_api; }

void qc_exec_want_hidden(void *handle, int on) {
    qc_exec *x = handle;
    if (x) x->want_hidden = on != 0;
}

void qc_exec_set_dims(void *handle, const qc_exec_dims *d) {
    qc_exec *x = handle;
    if (!x || !d) return;
    x->have_dims = 0;
    x->state_npos = -1;
    const char *bad = NULL;
    if (d->n_layers < 1 || d->n_layers > QC_EXEC_MAX_LAYERS) bad = "n_layers";
    else if (d->vocab < 1) bad = "vocab";
    else if (d->hidden < 1) bad = "hidden";
    else if (d->n_kv_heads < 0 || d->head_dim < 0 || d->conv_dim < 0 || d->conv_kernel < 0 ||
             d->n_v_heads < 0 || d->k_dim < 0 || d->v_dim < 0) bad = "a state dim";
    if (bad) {
        snprintf(x->dims_error, sizeof x->dims_error, "qc_exec_set_dims was given an invalid "
                 "%s", bad);
        return;
    }
    tspec *s = realloc(x->specs, sizeof(tspec) * 2 * (size_t)d->n_layers);
    if (!s) {
        snprintf(x->dims_error, sizeof x->dims_error, "out of memory in qc_exec_set_dims");
        return;
    }
    x->specs = s;
    memset(s, 0, sizeof(tspec) * 2 * (size_t)d->n_layers);
    for (int l = 0; l < d->n_layers; l++) {
        int full = d->layer_full[l] != 0;
        snprintf(s[2 * l].name, sizeof s[0].name, "layer_%02d/%s", l,
                 state_kind_name[full ? 0 : 2]);
        snprintf(s[2 * l + 1].name, sizeof s[0].name, "layer_%02d/%s", l,
                 state_kind_name[full ? 1 : 3]);
    }
    x->dims = *d;
    x->dims_error[0] = '\0';
    x->have_dims = 1;
}

qc_status qc_exec_open(const char *cmd, double timeout_s, const char *model_dir,
                       const char *options, qc_plugin_info *info, void **handle, qc_err *err) {
    if (handle) *handle = NULL;
    if (!cmd || !cmd[0] || !model_dir || !info || !handle) {
        snprintf(g_open_err, sizeof g_open_err, "exec adapter: %s",
                 !cmd || !cmd[0] ? "empty command" : "bad arguments to qc_exec_open");
        return qc_errf(err, QC_ERR_ARG, "%s", g_open_err);
    }
    qc_exec *x = calloc(1, sizeof *x);
    if (x) {
        x->cmd = strdup(cmd);
        x->model_dir = strdup(model_dir);
        x->options = strdup(options ? options : "");
    }
    if (!x || !x->cmd || !x->model_dir || !x->options) {
        if (x) { free(x->cmd); free(x->model_dir); free(x->options); free(x); }
        snprintf(g_open_err, sizeof g_open_err, "exec adapter '%.200s': out of memory", cmd);
        return qc_errf(err, QC_ERR_OOM, "%s", g_open_err);
    }
    if (strlen(cmd) > 200) snprintf(x->cmdq, sizeof x->cmdq, "%.200s...", cmd);
    else snprintf(x->cmdq, sizeof x->cmdq, "%s", cmd);
    x->timeout_s = (timeout_s > 0 && isfinite(timeout_s)) ? timeout_s : QC_EXEC_DEFAULT_TIMEOUT_S;
    x->pid = -1;
    x->fd_in = x->fd_out = x->fd_err = -1;
    x->state_npos = -1;
    snprintf(x->err, sizeof x->err, "no error");
    if (start_child(x, &x->info, "")) {
        /* the adapter did not start: a usage problem (exit 2); it started and answered open
         * with an error: the runtime under test cannot load the model (a FAIL of it) */
        qc_status st = x->open_refused ? QC_ERR_RUNTIME : QC_ERR_ARG;
        format_msg(x, g_open_err, sizeof g_open_err); /* the stderr tail cut to fit qc_err */
        qc_errf(err, st, "%s", g_open_err);
        x->dead = 1;
        x_close(x);
        return st;
    }
    *info = x->info;
    *handle = x;
    return QC_OK;
}
