/* qc_ref_faults.h — the self-test's variants of the reference backend: known port bugs as
 * alternatives of the model's steps (qc_ref_faults.c). The reference backend installs them
 * through its set_option (qc_backend.h) under these keys; its kernels hold no fault branch:
 *   fault.unguarded_exp = 0 | 1
 *       1: the chunked DeltaNet computes its decay ratios exp(gamma_r - gamma_c) in the factored
 *       form exp(gamma_r) * exp(-gamma_c) that pytorch/executorch#21417 used: exp(-gamma_c)
 *       overflows to Inf once a chunk's cumulative log-decay passes -88.7, and Inf * 0 is NaN.
 *   fault.moe = none | no_renorm | gate_all | topk_next | gate_drop   (MoE models only)
 *       no_renorm  the top-k weights are the raw softmax probabilities (norm_topk_prob=false)
 *       gate_all   the shared-expert sigmoid gate applied to routed + shared (ik_llama.cpp#1368)
 *       topk_next  the k-th choice replaced by the (k+1)-th most probable expert (no effect
 *                  when k == E)
 *       gate_drop  the shared-expert gate dropped (taken as 1): the shared expert added ungated
 *     The router_topk trace reports the ids / weights really used.
 */
#ifndef QC_REF_FAULTS_H
#define QC_REF_FAULTS_H

#include "qc_ref_deltanet.h"
#include "qc_ref_moe.h"

/* The decay of fault.unguarded_exp = on (on = 0: qc_ref_dn_decay, the model's). */
qc_ref_dn_decay_fn qc_ref_fault_decay(int on);

/* The MoE steps of fault.moe = name ("none": &qc_ref_moe_spec); NULL for an unknown name. */
const qc_ref_moe_ops *qc_ref_fault_moe(const char *name);

/* "none, no_renorm, gate_all, topk_next, gate_drop" (for messages). */
const char *qc_ref_fault_moe_names(void);

#endif /* QC_REF_FAULTS_H */
