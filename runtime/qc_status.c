/* qc_status.c — status names and the error message buffer. */
#include "qc/qc_status.h"

#include <string.h>

/* One table: name and description of every status. */
static const struct {
    const char *name, *desc;
} status_table[QC_STATUS_COUNT] = {
    [QC_OK] = {"QC_OK", "success"},
    [QC_ERR_ARG] = {"QC_ERR_ARG", "bad argument or usage"},
    [QC_ERR_IO] = {"QC_ERR_IO", "cannot open, read, write or map a file"},
    [QC_ERR_FORMAT] = {"QC_ERR_FORMAT", "malformed file contents"},
    [QC_ERR_SHAPE] = {"QC_ERR_SHAPE", "tensor shape disagrees with the config or the schema"},
    [QC_ERR_OOM] = {"QC_ERR_OOM", "out of memory or over the memory limit"},
    [QC_ERR_HDF5] = {"QC_ERR_HDF5", "the HDF5 library reported an error"},
    [QC_ERR_UNSUPPORTED] = {"QC_ERR_UNSUPPORTED", "valid input that is not supported"},
    [QC_ERR_RANGE] = {"QC_ERR_RANGE", "value out of range"},
    [QC_ERR_MISSING] = {"QC_ERR_MISSING", "a required tensor, field or dataset is absent"},
    [QC_ERR_UNKNOWN] = {"QC_ERR_UNKNOWN", "an unexpected tensor or field is present"},
    [QC_ERR_RUNTIME] = {"QC_ERR_RUNTIME", "the runtime under test failed"},
    [QC_ERR_NO_OPTION] = {"QC_ERR_NO_OPTION", "no option of that name"},
};

const char *qc_status_str(qc_status s) {
    return (unsigned)s < QC_STATUS_COUNT ? status_table[s].name : "QC_ERR_?";
}

const char *qc_status_desc(qc_status s) {
    return (unsigned)s < QC_STATUS_COUNT ? status_table[s].desc : "unknown status";
}

qc_status qc_errf(qc_err *err, qc_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

qc_status qc_err_prefix(qc_err *err, qc_status st, const char *fmt, ...) {
    if (!err || st == QC_OK) return st;
    err->code = st;
    char pre[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t np = strlen(pre);
    if (np > sizeof err->msg - 3) np = sizeof err->msg - 3;
    memcpy(err->msg, pre, np);
    memcpy(err->msg + np, ": ", 2);
    size_t room = sizeof err->msg - np - 3, no = strlen(old);
    if (no > room) no = room;
    memcpy(err->msg + np + 2, old, no);
    err->msg[np + 2 + no] = '\0';
    return st;
}

void qc_err_clear(qc_err *err) {
    if (!err) return;
    err->code = QC_OK;
    err->msg[0] = '\0';
}
