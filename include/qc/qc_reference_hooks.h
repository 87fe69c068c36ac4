/* qc/qc_reference_hooks.h — test-only hooks of the reference backend, public so that the
 * harness does not reach into reference/ (its self-test, --inject-fault, is their only user).
 * Normal use never calls them. */
#ifndef QC_REF_TESTHOOKS_H
#define QC_REF_TESTHOOKS_H

#include "qc/qc_backend.h"

/* on = 1: the chunked DeltaNet computes its decay ratios exp(gamma_r - gamma_c) in the factored
 * form exp(gamma_r) * exp(-gamma_c) that pytorch/executorch#21417 used: exp(-gamma_c)
 * overflows to Inf once a chunk's cumulative log-decay passes -88.7, and Inf * 0 is NaN.
 * Returns QC_ERR_ARG (and changes nothing) when be is not a reference backend. */
qc_status qc_ref_test_unguarded_exp(qc_backend *be, int on, qc_err *err);

/* The MoE block's known port bugs (docs/qwen35-model.md "MoE", pitfalls), one at a time. */
typedef enum {
    QC_REF_MOE_FAULT_NONE = 0,
    QC_REF_MOE_FAULT_NO_RENORM = 1,  /* top-k weights = the raw softmax probabilities (the
                                        renormalisation dropped, as with norm_topk_prob=false) */
    QC_REF_MOE_FAULT_GATE_ALL = 2,   /* the shared-expert sigmoid gate applied to routed + shared
                                        (ik_llama.cpp#1368) instead of the shared expert only */
    QC_REF_MOE_FAULT_TOPK_NEXT = 3,  /* the k-th choice replaced by the (k+1)-th most probable
                                        expert (a wrong top-k; no effect when k == E) */
    QC_REF_MOE_FAULT_GATE_DROP = 4   /* the shared-expert sigmoid gate dropped (taken as 1):
                                        the shared expert added ungated */
} qc_ref_moe_fault;

/* Make every MoE layer of the reference backend commit `fault` (QC_REF_MOE_FAULT_NONE
 * restores it); the router_topk trace reports the ids / weights really used. Returns QC_ERR_ARG
 * (and changes nothing) when be is not a reference backend, its model is dense, or fault is not
 * a qc_ref_moe_fault. */
qc_status qc_ref_test_moe_fault(qc_backend *be, int fault, qc_err *err);

#endif /* QC_REF_TESTHOOKS_H */
