/* qc_exec_internal.h — what the exec adapter client's files share (harness-private).
 *
 * The client (qc_exec.h, docs/adapter-protocol.md) is split by concern:
 *   qc_exec_child.c  the child process: spawn, kill, reap; its stderr ring buffer; the failure
 *                    messages (a failure of the child kills it and marks the handle dead)
 *   qc_exec_frame.c  bounded I/O on the pipes, frames (write, read, validate the JSON header
 *                    and the tensor list), one request -> one answer
 *   qc_exec_start.c  startup: spawn, hello, open (and the restart of a dead handle)
 *   qc_exec.c        the ABI vtable operations and the public entry points
 *
 * Return convention of every int function below (unless it says otherwise): QC_PLUGIN_OK, or
 * QC_PLUGIN_ERROR / QC_PLUGIN_UNSUPPORTED with x->err set. "killed": that failure was the
 * child's (ex_fail): it is gone, the handle dead, the message quotes its last stderr lines.
 */
#ifndef QC_EXEC_INTERNAL_H
#define QC_EXEC_INTERNAL_H

#include "qc_exec.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

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
    int hidden_has_mlp_in;     /* the last forward's mlp_in [L, n, H] follows the hidden states */

    int want_router;           /* qc_exec_want_router */
    int32_t *router_ids;       /* last forward's [L, n, k] router ids when router_valid */
    float *router_w;           /* ... and their weights */
    size_t router_cap, router_w_cap; /* bytes allocated for each */
    int32_t router_n;
    int router_valid;

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

/* ---- qc_exec_child.c: small helpers -------------------------------------------------- */

/* CLOCK_MONOTONIC in seconds. */
double ex_now_s(void);
/* Milliseconds from now to deadline for poll(), rounded up, >= 0. */
int ex_ms_until(double deadline);
/* Grow *buf to at least need bytes (contents kept). 0 ok, -1 out of memory (*buf kept). */
int ex_grow(void **buf, size_t *cap, size_t need);

/* ---- qc_exec_child.c: the child's stderr and the messages ---------------------------- */

/* Read whatever the child has written to stderr into the ring (non-blocking, bounded);
 * closes fd_err at EOF. */
void ex_drain_stderr(qc_exec *x);
/* "exec adapter '<cmd>': <what>, in <op>[ (last stderr: ...)]" of x's last failure into dst
 * (the stderr tail gets what room is left in cap). */
void ex_format_msg(const qc_exec *x, char *dst, size_t cap);
/* A failure of the host side or of the caller (the child is fine, no stderr quoted): sets
 * x->err, returns rc. */
int ex_local_err(qc_exec *x, int rc, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A call on a dead handle: QC_PLUGIN_ERROR, "adapter is not running (it failed earlier ...)". */
int ex_not_running(qc_exec *x, const char *op);

/* ---- qc_exec_child.c: the child process ---------------------------------------------- */

/* Start /bin/sh -c x->cmd in its own process group with the three pipes (x->pid, x->fd_*,
 * ring emptied). 0 ok, else an errno (nothing left open). */
int ex_spawn_child(qc_exec *x);
/* SIGKILL the child's process group, reap the child (bounded), read its last stderr, close
 * the fds. Safe when there is no child. */
void ex_kill_child(qc_exec *x);
/* Wait until the child has exited or deadline passes (its stderr drained meanwhile); does
 * not reap it. */
void ex_wait_exit(qc_exec *x, double deadline);
/* A failure of the child: kill it, mark the handle dead, message with the stderr tail.
 * Returns QC_PLUGIN_ERROR. */
int ex_fail(qc_exec *x, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The child closed its stdout (EOF) or stdin (EPIPE): wait a little for its exit status and
 * fail with it ("adapter died (signal 11)"), or with `how` when it still runs. Killed. */
int ex_child_gone(qc_exec *x, const char *op, const char *how);

/* ---- qc_exec_frame.c: frames --------------------------------------------------------- */

/* Read one frame's prefix and JSON header by deadline. OK: *root (caller frees) and
 * *payload_len (the payload not read); else killed (*root NULL). */
int ex_recv_header(qc_exec *x, const char *op, double deadline, cJSON **root,
                   uint64_t *payload_len);
/* Send a request (hdr[0..len), no payload) and read the answer's header, both by deadline.
 * OK: an "ok" answer, *root to free. An "error" answer: QC_PLUGIN_ERROR (or
 * QC_PLUGIN_UNSUPPORTED when it says "unsupported": true), the child stays up. Anything else:
 * killed. */
int ex_transact(qc_exec *x, const char *op, const char *hdr, size_t len, double deadline,
                cJSON **root, uint64_t *payload_len);
/* An "ok" answer that must carry nothing (no tensors, payload_len 0), else killed. Frees
 * root. */
int ex_expect_empty(qc_exec *x, const char *op, cJSON *root, uint64_t pl);
/* Elements of a spec's shape. */
uint64_t ex_spec_numel(const tspec *s);
/* The answer's tensors must be exactly specs[0..ns) (names, shapes, order) and payload_len
 * 4 x their elements, else killed; then the payload is read into each spec's dst. Frees
 * root. */
int ex_recv_tensors(qc_exec *x, const char *op, cJSON *root, uint64_t pl, const tspec *specs,
                    int ns, double deadline);
/* Send a cJSON request (NULL: out of memory, a local error); the answer must be an empty
 * "ok". Frees req. */
int ex_simple_request(qc_exec *x, const char *op, cJSON *req);
/* {"op": op}, or NULL when out of memory (caller owns it). */
cJSON *ex_op_object(const char *op);

/* ---- qc_exec_start.c: startup -------------------------------------------------------- */

/* Start the child, read its hello, send open, parse the info into *info (x->dead cleared).
 * On failure the child is gone and x->err says why (QC_PLUGIN_ERROR; x->open_refused when
 * open was answered with an error). tag: "" or " (restart)" for messages. */
int ex_start_child(qc_exec *x, qc_plugin_info *info, const char *tag);
/* A dead handle's restart: a fresh child with the same open (its info must match the first)
 * and the set_option values remembered. */
int ex_respawn(qc_exec *x);

#endif /* QC_EXEC_INTERNAL_H */
