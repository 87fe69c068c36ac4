/* qc_cmd_adapter_serve_internal.h — what the files of `qwen-conform adapter-serve` share
 * (harness-private).
 *
 * The command (the child side of docs/adapter-protocol.md) is split by concern:
 *   qc_cmd_adapter_serve_io.c   framing and I/O: read / write frames on the private protocol
 *                               descriptors, the ok / error answers
 *   qc_cmd_adapter_serve_ops.c  the request handlers: open, reset, forward, get_state,
 *                               fill_state, set_option (each forwarded to the loaded plugin)
 *   qc_cmd_adapter_serve.c      the command: arguments, fd isolation, hello, the request loop
 *
 * Return convention of the handlers and senders: 0 answered ok / sent; -1 failed: either the
 * request was refused (the as_fail says why and the caller sends it as an error frame) or the
 * write itself failed (the as_fail is left empty: the host is gone).
 */
#ifndef QC_CMD_ADAPTER_SERVE_INTERNAL_H
#define QC_CMD_ADAPTER_SERVE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "qc/qc_config.h"
#include "qc/qc_runtime_plugin.h"

#define AS_PROG "qwen-conform adapter-serve"

#define AS_PROTOCOL "qwen-conform-adapter"
#define AS_VERSION 1
#define AS_MAX_HEADER ((uint32_t)1 << 20)
#define AS_MAX_TENSORS (2 * QC_MAX_LAYERS + 2)

/* ===================================================================================== */
/* server state                                                                          */
/* ===================================================================================== */

typedef struct {
    const qc_runtime_plugin *api;
    void *dl;
    void *h;                 /* the plugin handle (NULL until open) */
    int opened;              /* 1 after a successful open */
    qc_plugin_info info;     /* what open reported */
    unsigned caps;           /* announced caps, masked by the entries present */
    qc_config cfg;           /* model_dir/config.json, for get_state */
    int cfg_ok;
    char cfg_err[1024];
    const char *spec_opts;   /* options from the command line ("" = none) */
    int in_fd, out_fd;       /* private protocol descriptors */
} as_server;

/* A response tensor: name, shape, data (float32, host order; converted on the wire). */
typedef struct {
    char name[48];
    int rank;
    int64_t shape[3];
    float *data;
    size_t count;
} as_tensor;

/* A failed request: the message and whether it is an "unsupported" refusal. */
typedef struct {
    char msg[1200];
    int unsupported;
    int from_plugin; /* the plugin's own failure (its last_error): not echoed on stderr */
} as_fail;

/* ---- qc_cmd_adapter_serve_io.c ----------------------------------------------------------- */

/* Fill *f (message, unsupported flag); returns -1 (a handler's "refused"). */
int as_failf(as_fail *f, int unsupported, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Read and drop n bytes. 0 on success, -1 on EOF / error. */
int as_skip_bytes(int fd, uint64_t n);
uint32_t as_get_u32le(const unsigned char *p);
uint64_t as_get_u64le(const unsigned char *p);
/* Replace bytes that are not valid UTF-8 with '?' (in place). */
void as_utf8_sanitize(char *s);
/* Send one frame: header (tensors listed in it when nt > 0), payload = the tensors. Consumes
 * hdr (NULL: out of memory, a fixed error frame is sent). 0 on success, -1 when stdout is
 * gone. */
int as_send_frame(as_server *s, cJSON *hdr, const as_tensor *t, int nt);
/* {"type":"ok"[, "info": extra_info (consumed)]} + the tensors t[0..nt). 0 / -1 (gone). */
int as_send_ok(as_server *s, cJSON *extra_info, const as_tensor *t, int nt);
/* The error frame of *f (its message sanitised in place; logged on stderr unless it is the
 * plugin's own). 0 / -1 (gone). */
int as_send_error(as_server *s, as_fail *f);

/* ---- qc_cmd_adapter_serve_ops.c ---------------------------------------------------------- */

/* Close the plugin handle if open (idempotent). */
void as_close_plugin(as_server *s);
/* The handlers of the requests of that op (req: the request header; the answer is sent).
 * Every one but open needs s->opened (the loop checks). */
int as_op_open(as_server *s, const cJSON *req, as_fail *f);
int as_op_reset(as_server *s, const cJSON *req, as_fail *f);
int as_op_forward(as_server *s, const cJSON *req, as_fail *f);
int as_op_get_state(as_server *s, const cJSON *req, as_fail *f);
int as_op_fill_state(as_server *s, const cJSON *req, as_fail *f);
int as_op_set_option(as_server *s, const cJSON *req, as_fail *f);
/* snapshot {slot}, restore {slot}, select_sequence {seq}, trim {n_pos}. */
int as_op_lifecycle(as_server *s, const char *op, const cJSON *req, as_fail *f);

#endif /* QC_CMD_ADAPTER_SERVE_INTERNAL_H */
