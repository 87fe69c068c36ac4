/* qc_exec_frame.c — the exec adapter's frames (docs/adapter-protocol.md): every byte moved is
 * bounded by the per-request deadline (non-blocking fds + poll, the child's stderr drained
 * meanwhile; SIGPIPE blocked around every write); every response is validated (magic,
 * header_len, JSON, type, tensor names and shapes, payload_len) before its payload is read
 * into the destination buffers. See qc_exec_internal.h.
 */
#define _GNU_SOURCE

#include "qc_exec_internal.h"
#include "qc_shape.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ===================================================================================== */
/* small helpers                                                                         */
/* ===================================================================================== */

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
        int r = poll(p, (nfds_t)np, ex_ms_until(deadline));
        if (r < 0) {
            if (errno == EINTR) continue;
            return 1;
        }
        if (np == 2 && p[1].revents) ex_drain_stderr(x);
        if (p[0].revents) return 1;
        if (ex_now_s() >= deadline) return 0;
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
    if (rc == IO_TIMEOUT)
        return ex_fail(x, op, "adapter timed out after %g s%s", x->timeout_s, where);
    if (rc == IO_EOF) return ex_child_gone(x, op, "closed its stdout");
    return ex_fail(x, op, "reading its stdout failed: %s%s", strerror(errno), where);
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
                return ex_fail(x, op, "adapter timed out after %g s (it does not read its stdin)",
                               x->timeout_s);
            continue;
        }
        if (w < 0 && errno == EPIPE) return ex_child_gone(x, op, "closed its stdin (EPIPE)");
        return ex_fail(x, op, "writing to its stdin failed: %s", strerror(errno));
    }
    return QC_PLUGIN_OK;
}

/* ===================================================================================== */
/* frames                                                                                */
/* ===================================================================================== */

/* Before a request: the child must be silent on stdout (a frame it wrote unasked, text printed
 * after its last answer) and alive. */
static int check_quiet(qc_exec *x, const char *op) {
    ex_drain_stderr(x);
    struct pollfd p = {x->fd_out, POLLIN, 0};
    int r;
    while ((r = poll(&p, 1, 0)) < 0 && errno == EINTR) {}
    if (r <= 0 || !p.revents) return QC_PLUGIN_OK;
    unsigned char b[64];
    ssize_t n = read(x->fd_out, b, sizeof b);
    if (n == 0) return ex_child_gone(x, op, "closed its stdout");
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return QC_PLUGIN_OK;
        return ex_fail(x, op, "reading its stdout failed: %s", strerror(errno));
    }
    char q[300];
    quote_bytes(b, (size_t)n, q, sizeof q);
    return ex_fail(x, op, "protocol violation: unsolicited output on stdout before the request: %s",
                   q);
}

/* Send one request frame (header only: the host's requests carry no payload). */
static int send_request(qc_exec *x, const char *op, const char *hdr, size_t len, double deadline) {
    if (len < 1 || len > MAX_HEADER)
        return ex_local_err(x, QC_PLUGIN_ERROR, op, "request header of %zu bytes exceeds the "
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
int ex_recv_header(qc_exec *x, const char *op, double deadline, cJSON **root,
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
            double dl = ex_now_s() + 0.05;
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
            return ex_fail(x, op, "protocol violation: bad magic: stdout has %s where a frame "
                           "(\"QCAP\") must start (text printed on stdout?)", q);
        }
    }
    uint32_t hl = get_le32(pre + 4);
    uint64_t pl = get_le64(pre + 8);
    if (hl < 1 || hl > MAX_HEADER)
        return ex_fail(x, op, "protocol violation: header_len %u is not in 1 .. %u", hl,
                       MAX_HEADER);
    if (ex_grow((void **)&x->hdr, &x->hdr_cap, (size_t)hl + 1))
        return ex_fail(x, op, "out of memory for a %u-byte header", hl);
    int rc = read_exact(x, x->hdr, hl, deadline, op, " (header incomplete)");
    if (rc) return rc;
    x->hdr[hl] = '\0';
    cJSON *j = cJSON_ParseWithLength(x->hdr, hl);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        char q[200];
        quote_bytes((const unsigned char *)x->hdr, hl < 120 ? hl : 120, q, sizeof q);
        return ex_fail(x, op, "protocol violation: the header is not a JSON object: %s%s", q,
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
int ex_transact(qc_exec *x, const char *op, const char *hdr, size_t len, double deadline,
                cJSON **root, uint64_t *payload_len) {
    *root = NULL;
    int rc = send_request(x, op, hdr, len, deadline);
    if (rc) return rc;
    cJSON *j;
    uint64_t pl;
    rc = ex_recv_header(x, op, deadline, &j, &pl);
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
        if (pl) return ex_fail(x, op, "protocol violation: an error answer with a payload of %llu "
                               "bytes", (unsigned long long)pl);
        ex_drain_stderr(x);
        snprintf(x->what, sizeof x->what, "%s: %s", unsup ? "unsupported" : "error response", m);
        snprintf(x->op, sizeof x->op, "%s", op);
        x->with_stderr = !unsup;
        ex_format_msg(x, x->err, sizeof x->err);
        return unsup ? QC_PLUGIN_UNSUPPORTED : QC_PLUGIN_ERROR;
    }
    char q[120];
    if (cJSON_IsString(type)) quote_bytes((const unsigned char *)type->valuestring,
                                          strlen(type->valuestring), q, sizeof q);
    else snprintf(q, sizeof q, "%s", type ? "(not a string)" : "(missing)");
    cJSON_Delete(j);
    return ex_fail(x, op, "protocol violation: answer type %s, expected \"ok\" or \"error\"", q);
}

/* An "ok" answer that must carry nothing: no tensors, payload_len 0. Frees root. */
int ex_expect_empty(qc_exec *x, const char *op, cJSON *root, uint64_t pl) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    int nt = t ? (cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1) : 0;
    cJSON_Delete(root);
    if (nt != 0 || pl != 0)
        return ex_fail(x, op, "protocol violation: the answer to %s must carry no tensors, it "
                       "lists %d and payload_len is %llu", op, nt, (unsigned long long)pl);
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

uint64_t ex_spec_numel(const tspec *s) {
    uint64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= (uint64_t)s->dims[i];
    return n;
}

/* The answer's tensors must be exactly specs[0..ns) (names, shapes, order) and payload_len
 * 4 x their elements; then the payload is read into each spec's dst. Frees root. */
int ex_recv_tensors(qc_exec *x, const char *op, cJSON *root, uint64_t pl, const tspec *specs,
                    int ns, double deadline) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    char got[200], want[200], sh[80];
    int nt = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1;
    if (nt != ns) {
        qc_shape_str(sh, sizeof sh, specs[0].dims, specs[0].ndim, NULL);
        cJSON_Delete(root);
        if (nt < 0)
            return ex_fail(x, op, "protocol violation: the answer has no \"tensors\" list "
                           "(expected %d tensors, the first '%s' %s)", ns, specs[0].name, sh);
        return ex_fail(x, op, "protocol violation: the answer lists %d tensors, expected %d (the "
                       "first '%s' %s)", nt, ns, specs[0].name, sh);
    }
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, t) {
        if (!listed_matches(e, &specs[i])) {
            listed_str(e, got, sizeof got);
            qc_shape_str(sh, sizeof sh, specs[i].dims, specs[i].ndim, NULL);
            snprintf(want, sizeof want, "'%s' %s", specs[i].name, sh);
            cJSON_Delete(root);
            return ex_fail(x, op, "protocol violation: tensor %d is %s, expected %s", i, got, want);
        }
        i++;
    }
    cJSON_Delete(root);
    uint64_t total = 0;
    for (i = 0; i < ns; i++) total += ex_spec_numel(&specs[i]);
    if (pl / 4 != total || pl % 4)
        return ex_fail(x, op, "protocol violation: payload_len %llu != 4 x %llu elements = %llu "
                       "bytes of the tensors listed", (unsigned long long)pl,
                       (unsigned long long)total, (unsigned long long)(4 * total));
    for (i = 0; i < ns; i++) {
        size_t n = (size_t)ex_spec_numel(&specs[i]);
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
int ex_simple_request(qc_exec *x, const char *op, cJSON *req) {
    char *s = req ? cJSON_PrintUnformatted(req) : NULL;
    cJSON_Delete(req);
    if (!s) return ex_local_err(x, QC_PLUGIN_ERROR, op, "out of memory building the request");
    cJSON *root;
    uint64_t pl;
    int rc = ex_transact(x, op, s, strlen(s), ex_now_s() + x->timeout_s, &root, &pl);
    free(s);
    if (rc) return rc;
    return ex_expect_empty(x, op, root, pl);
}

cJSON *ex_op_object(const char *op) {
    cJSON *j = cJSON_CreateObject();
    if (j && !cJSON_AddStringToObject(j, "op", op)) { cJSON_Delete(j); return NULL; }
    return j;
}
