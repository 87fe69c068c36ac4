/* qc_backend.c — backend options defaults, allocation, and the state lifecycle calls that
 * reach a runtime keeping its own state. No backend is named here: the backends depend on the
 * runtime, never the other way round (creation by name is the harness's registry). */
#include "qc/qc_backend.h"

#include <stdlib.h>
#include <string.h>

void qc_backend_opts_default(qc_backend_opts *o) {
    memset(o, 0, sizeof *o);
    o->dn_kernel = QC_DN_CHUNKED;
    o->chunk_size = 64;
    o->n_threads = 0;
    o->max_tokens = 128;
    o->trace = NULL;
    o->trace_user = NULL;
}

qc_backend *qc_backend_alloc(void) {
    qc_backend *be = calloc(1, sizeof *be);
    if (be) be->caps = QC_BE_CAP_ALL;
    return be;
}

void qc_backend_destroy(qc_backend *be) {
    if (be && be->destroy) be->destroy(be);
}

qc_status qc_backend_reset(qc_backend *be, qc_state *st, qc_err *err) {
    if (st) qc_state_reset(st);
    return be && be->reset ? be->reset(be, err) : QC_OK;
}

qc_status qc_backend_fill_state(qc_backend *be, qc_state *st, float v, qc_err *err) {
    if (!(be->caps & QC_BE_CAP_STATE_FILL))
        return qc_errf(err, QC_ERR_UNSUPPORTED, "%s: cannot fill its state buffers", be->name);
    if (st) qc_state_fill(st, v);
    return be->fill_state ? be->fill_state(be, v, err) : QC_OK;
}

qc_status qc_backend_sync_state(qc_backend *be, qc_state *st, int n_pos, qc_err *err) {
    if (!(be->caps & QC_BE_CAP_STATE_READ))
        return qc_errf(err, QC_ERR_UNSUPPORTED, "%s: does not expose its state buffers",
                       be->name);
    return be->sync_state ? be->sync_state(be, st, n_pos, err) : QC_OK;
}
