/* qc_optimized.h — the SIMD + OpenMP backend (optimized/): kernels per ISA (scalar / AVX2 /
 * AVX-512, chosen at run time, QC_ISA lowers the choice), bit-identical results for any thread
 * count.
 *
 * Link: qwen_conform::optimized (CMake) / qwen-conform (pkg-config), on top of the runtime; it
 * needs OpenMP. The machine probes that share its kernels are in qc_probe.h.
 */
#ifndef QC_OPTIMIZED_H
#define QC_OPTIMIZED_H

#include "qc/qc_backend.h"
#include "qc/qc_model.h"
#include "qc/qc_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An optimized backend for m (borrowed; must outlive it). o may be NULL
 * (qc_backend_opts_default); o->n_threads 0 = the OpenMP default. be->name is "optimized";
 * describe() gives e.g. "optimized (AVX-512, 2 threads)". Free with qc_backend_destroy. */
qc_status qc_optimized_create(const qc_model *m, const qc_backend_opts *o, qc_backend **out,
                              qc_err *err);

/* Every byte qc_optimized_create(m, o) allocates for a model of config c (o may be NULL:
 * defaults): the fp32 small weights, the activations for o->max_tokens tokens, the packed token
 * strips, and per thread (o->n_threads; 0 = the OpenMP default, omp_get_max_threads()) a GEMM
 * weight panel and a DeltaNet chunk scratch for chunks of min(max(o->chunk_size, 256),
 * o->max_tokens) tokens, plus the backend's own structs and job board — computed by the
 * counting pass of the same layout code create allocates with. SIZE_MAX when the config is not
 * plannable (qc_memplan_check_config), max_tokens < 1, or the size overflows. */
size_t qc_optimized_scratch_bytes(const qc_config *c, const qc_backend_opts *o);

#ifdef __cplusplus
}
#endif

#endif /* QC_OPTIMIZED_H */
