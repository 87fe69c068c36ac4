/* qc_ref_testhooks.h — test-only hooks of the reference backend (not installed; the harness's
 * self-test, --inject-fault, is their only user). Normal use never calls them. */
#ifndef QC_REF_TESTHOOKS_H
#define QC_REF_TESTHOOKS_H

#include "qc/qc_backend.h"

/* on = 1: the chunked DeltaNet computes its decay ratios exp(gamma_r - gamma_c) in the factored
 * form exp(gamma_r) * exp(-gamma_c) that pytorch/executorch#21417 used: exp(-gamma_c)
 * overflows to Inf once a chunk's cumulative log-decay passes -88.7, and Inf * 0 is NaN.
 * Returns QC_ERR_ARG (and changes nothing) when be is not a reference backend. */
qc_status qc_ref_test_unguarded_exp(qc_backend *be, int on, qc_err *err);

#endif /* QC_REF_TESTHOOKS_H */
