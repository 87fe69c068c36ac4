/* qc_backend.c — backend options defaults and creation by name. */
#include "qc/qc_backend.h"

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

qc_status qc_backend_create(const char *name, const qc_model *m, const qc_backend_opts *o,
                            qc_backend **out, qc_err *err) {
    *out = NULL;
    if (!name || strcmp(name, "reference") == 0) return qc_reference_create(m, o, out, err);
    if (strcmp(name, "optimized") == 0) return qc_optimized_create(m, o, out, err);
    return qc_errf(err, QC_ERR_ARG, "unknown backend '%s' (expected reference or optimized)",
                   name);
}

void qc_backend_destroy(qc_backend *be) {
    if (be && be->destroy) be->destroy(be);
}
