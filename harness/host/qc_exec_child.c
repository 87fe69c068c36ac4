/* qc_exec_child.c — the exec adapter's child process: spawn (`/bin/sh -c CMD`, its own
 * process group, three non-blocking pipes), kill (SIGKILL to the group) and reap; its stderr
 * drained into a ring buffer whenever the host waits, the last lines of it quoted in every
 * failure message; the failures themselves (ex_fail kills the child and marks the handle
 * dead). See qc_exec_internal.h.
 */
#define _GNU_SOURCE

#include "qc_exec_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ===================================================================================== */
/* small helpers                                                                         */
/* ===================================================================================== */

double ex_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Milliseconds from now to deadline for poll(), rounded up, >= 0. */
int ex_ms_until(double deadline) {
    double r = deadline - ex_now_s();
    if (r <= 0) return 0;
    if (r > 1e6) r = 1e6;
    return (int)(r * 1000.0) + 1;
}

/* Grow *buf to at least need bytes (contents kept). 0 ok, -1 out of memory. */
int ex_grow(void **buf, size_t *cap, size_t need) {
    if (*cap >= need) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c = c > SIZE_MAX / 2 ? need : c * 2;
    void *p = realloc(*buf, c);
    if (!p) return -1;
    *buf = p;
    *cap = c;
    return 0;
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
void ex_drain_stderr(qc_exec *x) {
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
 * cut from the front to at most cap - 1 characters at a line boundary ("... | " then whole
 * lines; only a single last line longer than the room is cut inside); "none" when there are
 * none. */
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
    else { /* cut at a line boundary when one is left: "... | " + the whole last lines */
        const char *cut = out + o - (cap - 4), *sep = strstr(cut, " | ");
        if (sep) snprintf(dst, cap, "... | %s", sep + 3);
        else snprintf(dst, cap, "...%s", cut); /* one line longer than the room: its end */
    }
    free(lin);
}

/* ===================================================================================== */
/* messages                                                                              */
/* ===================================================================================== */

/* The failure message into dst: the stderr tail gets what room is left in cap. */
void ex_format_msg(const qc_exec *x, char *dst, size_t cap) {
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
    ex_format_msg(x, x->err, sizeof x->err);
}

/* A failure of the host side or of the caller (the child is fine): no stderr quoted. */
int ex_local_err(qc_exec *x, int rc, const char *op, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_msgv(x, op, 0, fmt, ap);
    va_end(ap);
    return rc;
}

int ex_not_running(qc_exec *x, const char *op) {
    return ex_local_err(x, QC_PLUGIN_ERROR, op,
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
int ex_spawn_child(qc_exec *x) {
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
    double dl = ex_now_s() + seconds;
    while (x->fd_err >= 0) {
        struct pollfd p = {x->fd_err, POLLIN, 0};
        int r = poll(&p, 1, ex_ms_until(dl));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        ex_drain_stderr(x);
        if (ex_now_s() >= dl) break;
    }
}

/* SIGKILL the child's process group, reap the child, read its last stderr, close the fds. */
void ex_kill_child(qc_exec *x) {
    if (x->pid > 0) {
        /* the group id stays reserved while the (maybe zombie) leader is unreaped */
        kill(-x->pid, SIGKILL);
        kill(x->pid, SIGKILL);
        double dl = ex_now_s() + REAP_WAIT_S;
        for (;;) {
            int st;
            pid_t r = waitpid(x->pid, &st, WNOHANG);
            if (r == x->pid || (r < 0 && errno != EINTR)) break;
            if (ex_now_s() >= dl) {
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

/* close: wait for the child's exit (its answer does not matter) until deadline, draining its
 * stderr; not reaped here (ex_kill_child does that). */
void ex_wait_exit(qc_exec *x, double deadline) {
    while (x->pid > 0) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        int r = waitid(P_PID, (id_t)x->pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 || si.si_pid == x->pid || ex_now_s() >= deadline) break;
        struct pollfd p = {x->fd_err, POLLIN, 0};
        if (poll(&p, x->fd_err >= 0 ? 1 : 0, 10) > 0) ex_drain_stderr(x);
    }
}

/* A failure of the child: kill it, mark the handle dead, message with the stderr tail. */
int ex_fail(qc_exec *x, const char *op, const char *fmt, ...) {
    char what[sizeof x->what];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    ex_kill_child(x);
    x->dead = 1;
    x->hidden_valid = 0;
    x->state_npos = -1;
    snprintf(x->dead_why, sizeof x->dead_why, "%s, in %s", what, op);
    snprintf(x->what, sizeof x->what, "%s", what);
    snprintf(x->op, sizeof x->op, "%s", op);
    x->with_stderr = 1;
    ex_format_msg(x, x->err, sizeof x->err);
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
int ex_child_gone(qc_exec *x, const char *op, const char *how) {
    double dl = ex_now_s() + GONE_WAIT_S;
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
        if (ex_now_s() >= dl) break;
        struct pollfd p = {x->fd_err, POLLIN, 0};
        if (poll(&p, x->fd_err >= 0 ? 1 : 0, 5) > 0) ex_drain_stderr(x);
    }
    return ex_fail(x, op, "%s", what);
}
