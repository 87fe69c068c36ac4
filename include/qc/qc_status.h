/* qc_status.h — status codes and the error message buffer used by every fallible call.
 *
 * Convention: a fallible function returns qc_status (QC_OK == 0) and takes a `qc_err *err`
 * (may be NULL) that it fills with one human message carrying context, e.g.
 *   "fixtures/x.h5: /cases/c1/logits: shape [7,512] != [7,256]".
 * A numerical mismatch is a *result*, never an error. QC_ASSERT is for programmer errors only.
 */
#ifndef QC_STATUS_H
#define QC_STATUS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum {
    QC_OK = 0,
    QC_ERR_ARG,         /* bad argument / usage */
    QC_ERR_IO,          /* cannot open / read / write / mmap a file */
    QC_ERR_FORMAT,      /* malformed file contents (JSON, safetensors header, HDF5 layout) */
    QC_ERR_SHAPE,       /* tensor shape disagrees with the config or the schema */
    QC_ERR_OOM,         /* allocation failed or would exceed a memory limit */
    QC_ERR_HDF5,        /* the HDF5 library reported an error */
    QC_ERR_UNSUPPORTED, /* valid input we do not handle (dtype, layer kind, ...) */
    QC_ERR_RANGE,       /* value out of range: token id, position, context length */
    QC_ERR_MISSING,     /* a required tensor / field / dataset is absent */
    QC_ERR_UNKNOWN,     /* an unexpected tensor / field is present */
    QC_ERR_RUNTIME,     /* the runtime under test (plugin / adapter) failed: crashed, timed
                           out, broke the protocol or returned an error. A conformance FAIL of
                           that runtime, not an error of qwen-conform */
    QC_ERR_NO_OPTION    /* a named option (set_option key) the component does not have; a bad
                           value for a key it has is QC_ERR_ARG */
} qc_status;

#define QC_STATUS_COUNT (QC_ERR_NO_OPTION + 1)

typedef struct {
    qc_status code;   /* last error code (QC_OK if none) */
    char msg[1024];   /* one-line message with context */
} qc_err;

/* Short stable name of a status ("QC_ERR_FORMAT"). Never NULL. */
const char *qc_status_str(qc_status s);
/* One-line description of a status ("malformed file contents"). Never NULL. */
const char *qc_status_desc(qc_status s);

/* Fill err (if non-NULL) with code and a printf-style message; returns code. */
qc_status qc_errf(qc_err *err, qc_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepend "<prefix>: " to err->msg when st != QC_OK and err is non-NULL. Returns st, always:
 * the status is the truth, the message never changes it (err may be NULL). */
qc_status qc_err_prefix(qc_err *err, qc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clear err to QC_OK / empty message. */
void qc_err_clear(qc_err *err);

#define QC_ASSERT(cond)                                                              \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: internal error: assertion '%s' failed\n", __FILE__, \
                    __LINE__, #cond);                                                \
            abort();                                                                 \
        }                                                                            \
    } while (0)

#endif /* QC_STATUS_H */
