/* qc_reference.h — the scalar reference backend (reference/): the readable definition of the
 * Qwen3.5 forward pass, strictly without FMA contraction.
 *
 * Link: qwen_conform::reference (CMake) / qwen-conform (pkg-config), on top of the runtime.
 * The harness reaches it by name through its registry (harness/host/qc_registry.h); the runtime
 * itself never names a backend.
 */
#ifndef QC_REFERENCE_H
#define QC_REFERENCE_H

#include "qc/qc_backend.h"
#include "qc/qc_model.h"
#include "qc/qc_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A reference backend for m (borrowed; must outlive it). o may be NULL (qc_backend_opts_default).
 * Single-threaded: o->n_threads is ignored (no QC_BE_CAP_THREADS). be->name is "reference".
 * Errors: those of qc_backend_check_create (QC_ERR_ARG, QC_ERR_SHAPE / QC_ERR_MISSING naming the
 * tensor), QC_ERR_OOM. Free with qc_backend_destroy. */
qc_status qc_reference_create(const qc_model *m, const qc_backend_opts *o, qc_backend **out,
                              qc_err *err);

/* Every byte qc_reference_create(m, o) allocates for a model of config c (o may be NULL:
 * defaults; only o->max_tokens matters): the owned fp32 small weights, the activation scratch
 * for max_tokens tokens (one chunked-DeltaNet chunk of max_tokens included) and the backend's
 * own structs — computed by the counting pass of the same layout code create allocates with.
 * SIZE_MAX when the config is not plannable (qc_memplan_check_config), max_tokens < 1, or the
 * size overflows. For the memory plan (the harness's registry reports it). */
size_t qc_reference_scratch_bytes(const qc_config *c, const qc_backend_opts *o);

#ifdef __cplusplus
}
#endif

#endif /* QC_REFERENCE_H */
