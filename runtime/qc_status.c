/* qc_status.c — status names and the error message buffer. */
#include "qc/qc_status.h"

#include <string.h>

const char *qc_status_str(qc_status s) {
    switch (s) {
    case QC_OK: return "QC_OK";
    case QC_ERR_ARG: return "QC_ERR_ARG";
    case QC_ERR_IO: return "QC_ERR_IO";
    case QC_ERR_FORMAT: return "QC_ERR_FORMAT";
    case QC_ERR_SHAPE: return "QC_ERR_SHAPE";
    case QC_ERR_OOM: return "QC_ERR_OOM";
    case QC_ERR_HDF5: return "QC_ERR_HDF5";
    case QC_ERR_UNSUPPORTED: return "QC_ERR_UNSUPPORTED";
    case QC_ERR_RANGE: return "QC_ERR_RANGE";
    case QC_ERR_MISSING: return "QC_ERR_MISSING";
    case QC_ERR_UNKNOWN: return "QC_ERR_UNKNOWN";
    }
    return "QC_ERR_?";
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

qc_status qc_err_prefix(qc_err *err, const char *fmt, ...) {
    if (!err) return QC_OK;
    if (err->code == QC_OK) return QC_OK;
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
    return err->code;
}

void qc_err_clear(qc_err *err) {
    if (!err) return;
    err->code = QC_OK;
    err->msg[0] = '\0';
}
