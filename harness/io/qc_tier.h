/* qc_tier.h — named tolerance tiers for reduced-precision runtimes (docs/tolerance-tiers.md).
 *
 *   fp32     the policy as loaded (fixtures/tolerances.json or --policy): today's gates
 *   f16-kv   float32 compute, KV cache stored in f16
 *   bf16-kv  float32 compute, KV cache stored in bf16
 *   bf16     bf16 weights, activations and KV cache (DeltaNet states float32)
 *   int8     Q8_0 weights (group 32, symmetric), f16 KV cache
 *   int4     Q4_0 weights (group 32, symmetric), f16 KV cache
 * Every limit of a tier was derived from the float64 golden model with that precision
 * simulated on the fixtures (golden/qcgolden/precision.py; numbers and margins in
 * fixtures/tolerance-tiers-measurements.json and the docs). A tier only loosens: each
 * tolerance is the larger of the policy's and the tier's.
 */
#ifndef QC_TIER_H
#define QC_TIER_H

#include "qc_policy.h"

/* "fp32, f16-kv, bf16-kv, bf16, int8, int4" (static). */
const char *qc_tier_names(void);
/* One line on what tier `name` is for (static), or NULL for an unknown name. */
const char *qc_tier_describe(const char *name);
/* The gate of tier `name` (*out; tie margin in *tie). Returns 0, or -1 for an unknown name;
 * fp32 gives out->name "fp32" with dist 0 and zero floors. */
int qc_tier_gate_of(const char *name, qc_tier_gate *out, double *tie);
/* Put tier `tier` in force on p and note "--tier NAME" in its description. fp32 leaves the
 * policy's numbers unchanged. Returns QC_OK, or QC_ERR_ARG naming the accepted values. */
qc_status qc_tier_apply(qc_policy *p, const char *tier, qc_err *err);

/* The NMSE gate of class cls under g for the golden `stem` (its own measured limit when the
 * tier has one, else the tier's); 0: the class is compared element-wise. */
double qc_tier_nmse_limit(const qc_tier_gate *g, const char *stem, qc_tclass cls);

#endif /* QC_TIER_H */
