/* qc_bench_moe.h — `bench` for the Qwen3.5 MoE models and truncated presets (harness-private,
 * used by the bench files through qc_bench_internal.h).
 *
 *   --synthetic 35b-a3b|122b-a10b|397b-a17b (and the dense presets) --layers N: the preset's
 *   real per-layer dimensions with only the first N layers (the layer pattern kept: full
 *   attention at i % 4 == 3). The report says the model is truncated, gives the measured
 *   N-layer figures and, labelled as such, what they imply for the whole model.
 *
 * Decode limits of a MoE model use the ACTIVE weight bytes per token (router, k of the E routed
 * experts, shared expert + gate, mixers, norms, lm_head), not the resident total.
 *
 * Return convention: qc_status functions return QC_OK or the error in err.
 */
#ifndef QC_BENCH_MOE_H
#define QC_BENCH_MOE_H

#include "qc/qc_config.h"
#include "qc/qc_memplan.h"
#include "qc/qc_model.h"
#include "qc/qc_status.h"

typedef struct cJSON cJSON;

typedef struct {
    int valid;               /* 1 once bench_moe_fill ran */
    int moe;                 /* 1: a mixture-of-experts model */
    int n_experts, k;        /* E, experts per token */
    int layers_run;          /* layers of the model measured */
    int layers_full;         /* layers of the whole model (the preset's; = layers_run unless
                                --layers truncated it) */
    int truncated;           /* 1: layers_run < layers_full */
    double weight_bytes;     /* measured model: resident weight bytes (its tensors) */
    double active_bytes;     /* measured model: weight bytes read per decode token */
    double full_weight_bytes;  /* whole model: resident weight bytes (from its config) */
    double full_active_bytes;  /* whole model: weight bytes per decode token (config) */
} bench_moe_info;

/* --layers N applied to a preset's config *cfg (N = 0: unchanged). *full_layers receives the
 * preset's layer count. QC_ERR_ARG "--layers: N exceeds the NAME preset's L layers". */
qc_status bench_moe_truncate(const char *preset, int layers, qc_config *cfg, int *full_layers,
                             qc_err *err);

/* When the memory plan refused a synthetic preset (err holds the message): append the largest
 * --layers N that fits the same plan (rq as built for the refusal; backends re-planned with
 * qc_registry_memplan(backends)). */
void bench_moe_refusal_hint(const qc_memplan_req *rq, const char *backends,
                            const char *max_memory, qc_err *err);

/* The bytes of m (its tensors) and of the whole model (its config with full_layers layers,
 * weight dtype dt) into *mi. */
void bench_moe_fill(const qc_model *m, int full_layers, qc_dtype dt, bench_moe_info *mi);

/* One line of Markdown (no newline) describing mi, with the implied whole-model decode
 * figure for a measured decode of tok_s at bandwidth bw_gbs (GB/s, 0: unknown). Returns buf. */
const char *bench_moe_markdown(const bench_moe_info *mi, double bw_gbs, char *buf, size_t n);

/* The "weights" object of the JSON config: total / active bytes of the measured model and of
 * the whole model, layers, experts. */
void bench_moe_json(cJSON *config, const bench_moe_info *mi, double bw_gbs);

/* For a decode figure of tok_s: the implied whole-model decode rate, assuming the same fraction
 * of the bandwidth roofline (tok_s * active_bytes / full_active_bytes). */
double bench_moe_implied_tok_s(const bench_moe_info *mi, double tok_s);

#endif /* QC_BENCH_MOE_H */
