/* qc_record_moe.h — `record` of the block-level evidence: the case run with each layer's mixer
 * output captured through the trace hook — a dense model's prefill/mlp_in, decode/mlp_in
 * (golden/SCHEMA.md "Mixer outputs (dense)") — and for a MoE model the router's choices
 * (issue 15): prefill/router/{topk_ids, topk_weights} (and decode/router/..., prefill/moe_in,
 * decode/moe_in) in the golden schema's layout (golden/SCHEMA.md "MoE"). Internal to the
 * `record` command; not installed.
 */
#ifndef QC_RECORD_MOE_H
#define QC_RECORD_MOE_H

#include "qc/qc_backend.h"
#include "qc/qc_prefill.h"
#include "qc_golden.h"
#include "qc_runcase.h"

/* qc_run_case, and for a MoE model on a backend that traces (capability hidden) the router
 * datasets of every prompt and decode position into out (moe_in too when with_in): nothing is
 * added when the backend traces no "router_topk" rows. A dense model on a backend with
 * capabilities hidden and mlp_in, with_in: every layer's "mlp_in" rows of every prompt and
 * decode position into out->prefill_moe_in / decode_moe_in (the writer names them mlp_in); a
 * row not traced, or of the wrong width, is QC_ERR_RUNTIME. The hidden states are captured as
 * qc_run_case would (in->capture_hidden). A malformed router trace (an id outside [0, E), an
 * expert chosen twice, a wrong width) is QC_ERR_RUNTIME naming the layer and position. On
 * error out holds nothing. */
qc_status qc_record_run_case(qc_backend *be, const qc_profile *profile, const char *name,
                             const qc_case_input *in, int with_in, qc_golden_case *out,
                             qc_err *err);

/* 1 when out carries router datasets (for the summary line). */
int qc_record_has_router(const qc_golden_case *out);

#endif /* QC_RECORD_MOE_H */
