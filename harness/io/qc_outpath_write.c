/* qc_outpath_write.c — writing an output (qc_outpath.h, 2. and 3.): atomically through a temp
 * file beside the target (created O_EXCL, fsync'ed, renamed over it) or directly (stdout,
 * devices, FIFOs, /dev/fd/N); the fixed temp-file table the signal handlers empty before
 * re-raising SIGINT / SIGTERM / SIGHUP. See qc_outpath_internal.h. */
#include "qc_outpath_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ===================================================================================== */
/* the temp-file table and the signal handlers                                           */
/* ===================================================================================== */

#define N_SLOTS 32

static struct {
    volatile sig_atomic_t active; /* 1: path is a temp file to remove on a signal */
    char path[PATH_MAX];
} slots_[N_SLOTS];

static int slot_claim(const char *path) {
    for (int i = 0; i < N_SLOTS; i++) {
        if (slots_[i].active) continue;
        snprintf(slots_[i].path, sizeof slots_[i].path, "%s", path);
        atomic_signal_fence(memory_order_seq_cst);
        slots_[i].active = 1;
        return i;
    }
    return -1; /* table full: still written atomically, just not removed on a signal */
}

static void slot_release(int i) {
    if (i < 0 || i >= N_SLOTS) return;
    slots_[i].active = 0;
    atomic_signal_fence(memory_order_seq_cst);
}

int qc_outpath_active_temps(void) {
    int k = 0;
    for (int i = 0; i < N_SLOTS; i++) k += slots_[i].active != 0;
    return k;
}

static void unlink_active(void) {
    for (int i = 0; i < N_SLOTS; i++)
        if (slots_[i].active) unlink(slots_[i].path);
}

/* Deferred region (qc_outpath_defer_signals): a fatal signal is only recorded, and the code
 * that opened the region cleans up what cannot be removed from a handler (a directory tree)
 * and re-raises it. */
static volatile sig_atomic_t defer_, pending_;

/* Async-signal-safe: unlink + raise. SA_RESETHAND | SA_NODEFER: the re-raised signal takes
 * its default action at once (the process ends with status 128 + sig). */
static void on_fatal_signal(int sig) {
    int saved = errno;
    if (defer_) {
        pending_ = sig;
        /* SA_RESETHAND reset the disposition: take the signal again while deferring */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND | SA_NODEFER;
        sigaction(sig, &sa, NULL);
        errno = saved;
        return;
    }
    unlink_active();
    signal(sig, SIG_DFL);
    raise(sig);
    errno = saved;
}

void qc_outpath_defer_signals(int on) {
    if (on) pending_ = 0;
    defer_ = on != 0;
}

int qc_outpath_signal_pending(void) { return pending_; }

void qc_outpath_reraise(int sig) {
    defer_ = 0;
    unlink_active();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void at_exit_cleanup(void) { unlink_active(); }

void qc_outpath_install_signal_handlers(void) {
    static int done;
    if (done) return;
    done = 1;
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND | SA_NODEFER;
        sigaction(sigs[i], &sa, NULL);
    }
    signal(SIGPIPE, SIG_IGN);
    atexit(at_exit_cleanup);
}

/* ===================================================================================== */
/* writing                                                                               */
/* ===================================================================================== */

static void out_init(qc_out *o, const char *path) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    o->slot = -1;
    snprintf(o->path, sizeof o->path, "%s", path ? path : "");
}

qc_status qc_out_open(qc_out *o, const char *path, unsigned flags, qc_err *err) {
    out_init(o, path);
    pinfo pi;
    char why[PATH_MAX + 200];
    qc_status code;
    if (outp_resolve_output(path, &pi, why, sizeof why, &code) ||
        outp_check_output(&pi, flags, why, sizeof why, &code))
        return outp_out_err(err, code, NULL, path, why);
    /* the last line of defence: never replace an input of the verified run */
    if ((code = outp_refuse_input(&pi, path, err))) return code;
    if (pi.kind == PK_FD) {
        if (pi.fd == 1) fflush(stdout);
        if (pi.fd == 2) fflush(stderr);
        o->fd = fcntl(pi.fd, F_DUPFD_CLOEXEC, 3);
        if (o->fd < 0)
            return qc_errf(err, QC_ERR_IO, "%s: cannot use file descriptor %d: %s", path, pi.fd,
                           strerror(errno));
        o->direct = 1;
        o->is_std = pi.fd == 1 || pi.fd == 2;
        return QC_OK;
    }
    snprintf(o->target, sizeof o->target, "%s", pi.target);
    if (pi.kind == PK_STREAM) {
        o->fd = open(pi.target, O_WRONLY | O_NOCTTY | O_CLOEXEC);
        if (o->fd < 0)
            return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        struct stat sb;
        if (fstat(o->fd, &sb) != 0 || !(S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode))) {
            close(o->fd);
            o->fd = -1;
            return qc_errf(err, QC_ERR_IO, "%s: changed while being opened (no longer a device "
                           "or FIFO)", path);
        }
        o->direct = 1;
        return QC_OK;
    }
    /* atomic: a fresh temp file in the target's directory */
    static unsigned seq;
    for (int attempt = 0; attempt < 100; attempt++) {
        int w = snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld.%u", pi.target, (long)getpid(),
                         seq++ % 1000u);
        if (w < 0 || (size_t)w >= sizeof o->tmp) {
            o->tmp[0] = '\0';
            return qc_errf(err, QC_ERR_ARG, "%s: path too long", path);
        }
        o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (o->fd >= 0 || errno != EEXIST) break;
    }
    if (o->fd < 0) {
        int e = errno;
        char t[sizeof o->tmp];
        snprintf(t, sizeof t, "%s", o->tmp);
        o->tmp[0] = '\0';
        return qc_errf(err, QC_ERR_IO, "%s: cannot create %s: %s", path, t, strerror(e));
    }
    o->slot = slot_claim(o->tmp);
    if (pi.kind == PK_REG) {
        /* the replacement keeps the file's permissions (never set-id bits) and, when we run
         * as root next to a user's files, its owner */
        struct stat sb;
        if (geteuid() == 0 && stat(pi.target, &sb) == 0) (void)fchown(o->fd, sb.st_uid, sb.st_gid);
        (void)fchmod(o->fd, pi.mode & 0777);
    }
    return QC_OK;
}

qc_status qc_out_write(qc_out *o, const void *data, size_t n, qc_err *err) {
    if (o->fd < 0 && !o->broken)
        return qc_errf(err, QC_ERR_IO, "%s: not open for writing", o->path);
    if (o->broken) return QC_OK;
    if (o->failed) return qc_errf(err, QC_ERR_IO, "%s: an earlier write failed", o->path);
    const char *c = data;
    while (n > 0) {
        ssize_t w = write(o->fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EPIPE && o->is_std) {
            o->broken = 1; /* the reader went away (`| head`): the output just ends */
            return QC_OK;
        }
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            o->failed = 1;
            return qc_errf(err, QC_ERR_IO, "%s: write failed: %s", o->path, strerror(e));
        }
        c += w;
        n -= (size_t)w;
    }
    return QC_OK;
}

void qc_out_abort(qc_out *o) {
    if (o->fd >= 0) close(o->fd);
    o->fd = -1;
    if (o->tmp[0]) unlink(o->tmp);
    o->tmp[0] = '\0';
    slot_release(o->slot);
    o->slot = -1;
}

qc_status qc_out_commit(qc_out *o, qc_err *err) {
    if (o->failed) {
        qc_out_abort(o);
        return qc_errf(err, QC_ERR_IO, "%s: not written (a write failed)", o->path);
    }
    if (o->direct) {
        int rc = o->fd >= 0 ? close(o->fd) : 0;
        int e = errno;
        o->fd = -1;
        if (rc != 0 && !(o->is_std && e == EPIPE))
            return qc_errf(err, QC_ERR_IO, "%s: write failed: %s", o->path, strerror(e));
        return QC_OK;
    }
    if (o->fd < 0 || !o->tmp[0]) return qc_errf(err, QC_ERR_IO, "%s: not open", o->path);
    if (fsync(o->fd) != 0 && errno != EINVAL && errno != EROFS && errno != ENOTSUP) {
        int e = errno;
        qc_out_abort(o);
        return qc_errf(err, QC_ERR_IO, "%s: write failed (fsync): %s", o->path, strerror(e));
    }
    int rc = close(o->fd);
    o->fd = -1;
    if (rc != 0) {
        int e = errno;
        qc_out_abort(o);
        return qc_errf(err, QC_ERR_IO, "%s: write failed (close): %s", o->path, strerror(e));
    }
    if (rename(o->tmp, o->target) != 0) {
        int e = errno;
        char t[sizeof o->tmp];
        snprintf(t, sizeof t, "%s", o->tmp);
        qc_out_abort(o);
        return qc_errf(err, QC_ERR_IO, "%s: cannot rename %s onto it: %s", o->path, t,
                       strerror(e));
    }
    o->tmp[0] = '\0';
    slot_release(o->slot);
    o->slot = -1;
    /* make the rename durable (best effort) */
    char dir[PATH_MAX], base[PATH_MAX];
    if (outp_split_path(o->target, dir, sizeof dir, base, sizeof base) == 0) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    return QC_OK;
}

qc_status qc_out_write_file(const char *path, const void *data, size_t n, unsigned flags,
                            qc_err *err) {
    qc_out o;
    qc_status st = qc_out_open(&o, path, flags, err);
    if (st) return st;
    if ((st = qc_out_write(&o, data, n, err))) {
        qc_out_abort(&o);
        return st;
    }
    return qc_out_commit(&o, err);
}
