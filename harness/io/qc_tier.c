/* qc_tier.c — the shipped tolerance tiers (qc_tier.h; numbers: docs/tolerance-tiers.md). */
#include "qc_tier.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* The tiers                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/* Per class {atol, rtol} in qc_tclass order: logits, hidden, k_cache, v_cache, conv_state,
 * recurrent_state. GENERATED from fixtures/tolerance-tiers-measurements.json ("limits") by
 * `python3 golden/qcgolden measure-tiers --c-table`; tests/cli/test_tiers.sh checks the two
 * agree. Every row initialises every field (no -Wmissing-field-initializers): a new field or
 * tensor class must be added to precision_run.c_table too. */
typedef struct {
    const char *name, *about;
    const char *stem;   /* NULL: the tier's limits over every golden; else one golden's */
    int dist;
    double kl_mean, kl_p99, kl_max, tie_delta, topk_min;
    double tol[QC_TC_COUNT][2];
    double nmse[QC_TC_COUNT];   /* > 0: NMSE gate of the class (tiers with rounded weights) */
} tier_row;

#define QC_TIER_TOPK 5

/* BEGIN TIER TABLE */
static const tier_row tiers[] = {
    {"fp32", "float32 runtimes: the policy as loaded (fixtures/tolerances.json)", NULL, 0,
     0, 0, 0, 0, 0, {{0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}},
     {0, 0, 0, 0, 0, 0}},
    {"f16-kv", "float32 compute, KV cache stored in f16", NULL, 1,
     5e-07, 1e-05, 1e-05, 0, 1,
     {{0.05, 0.02}, {0.05, 0.02}, {0.02, 0.01}, {0.02, 0.01}, {0.005, 0.005}, {0.002, 0.005}},
     {0, 0, 0, 0, 0, 0}},
    {"f16-kv", "float32 compute, KV cache stored in f16", "tiny-bf16-gva-nested", 1,
     5e-08, 5e-08, 5e-08, 0, 1,
     {{0.002, 0.002}, {0.002, 0.001}, {0.005, 0.002}, {0.005, 0.002}, {2e-05, 1e-05}, {5e-06, 2e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"f16-kv", "float32 compute, KV cache stored in f16", "tiny-f16-sharded", 1,
     2e-07, 1e-06, 1e-06, 0, 1,
     {{0.01, 0.01}, {0.01, 0.01}, {0.01, 0.005}, {0.01, 0.01}, {0.005, 0.005}, {0.002, 0.005}},
     {0, 0, 0, 0, 0, 0}},
    {"f16-kv", "float32 compute, KV cache stored in f16", "tiny-f32-tied-flat", 1,
     5e-08, 5e-08, 5e-08, 0, 1,
     {{0.002, 0.002}, {0.002, 0.001}, {0.005, 0.002}, {0.01, 0.002}, {2e-05, 2e-05}, {5e-06, 5e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"f16-kv", "float32 compute, KV cache stored in f16", "tiny-hazard-decay", 1,
     5e-08, 5e-08, 5e-08, 0, 1,
     {{0.002, 0.002}, {0.002, 0.001}, {0.005, 0.002}, {0.005, 0.002}, {1e-05, 1e-05}, {1e-05, 2e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"f16-kv", "float32 compute, KV cache stored in f16", "tiny-legacy-packed", 1,
     5e-08, 5e-08, 5e-08, 0, 1,
     {{0.002, 0.002}, {0.001, 0.002}, {0.005, 0.002}, {0.01, 0.002}, {1e-05, 1e-05}, {5e-06, 1e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"f16-kv", "float32 compute, KV cache stored in f16", "tiny-long-context", 1,
     5e-08, 5e-08, 5e-08, 0, 1,
     {{0.002, 0.001}, {0.001, 0.0001}, {0.01, 0.002}, {0.005, 0.002}, {2e-06, 2e-06}, {5e-06, 1e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"f16-kv", "float32 compute, KV cache stored in f16", "tiny-long-decode", 1,
     5e-08, 5e-08, 5e-08, 0, 1,
     {{0.001, 0.001}, {0.001, 0.001}, {0.005, 0.002}, {0.01, 0.002}, {5e-06, 5e-06}, {5e-06, 1e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"f16-kv", "float32 compute, KV cache stored in f16", "tiny-moe-bf16-flat", 1,
     5e-08, 5e-08, 5e-08, 0, 1,
     {{0.002, 0.002}, {0.002, 0.002}, {0.005, 0.002}, {0.005, 0.002}, {1e-05, 1e-05}, {5e-06, 2e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"f16-kv", "float32 compute, KV cache stored in f16", "tiny-moe-f32-nested", 1,
     5e-08, 2e-07, 2e-07, 0, 1,
     {{0.005, 0.002}, {0.002, 0.001}, {0.005, 0.002}, {0.005, 0.002}, {5e-05, 5e-05}, {1e-05, 2e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"f16-kv", "float32 compute, KV cache stored in f16", "tiny-rope-legacy-8layer", 1,
     5e-07, 1e-05, 1e-05, 0, 1,
     {{0.05, 0.02}, {0.05, 0.02}, {0.02, 0.01}, {0.02, 0.01}, {0.005, 0.005}, {0.002, 0.005}},
     {0, 0, 0, 0, 0, 0}},
    {"bf16-kv", "float32 compute, KV cache stored in bf16", NULL, 1,
     5e-05, 0.0005, 0.0005, 0.005, 0.89,
     {{0.2, 0.1}, {0.5, 0.1}, {0.1, 0.05}, {0.1, 0.1}, {0.05, 0.05}, {0.02, 0.05}},
     {0, 0, 0, 0, 0, 0}},
    {"bf16-kv", "float32 compute, KV cache stored in bf16", "tiny-bf16-gva-nested", 1,
     5e-06, 5e-06, 5e-06, 0, 1,
     {{0.02, 0.02}, {0.02, 0.01}, {0.05, 0.02}, {0.05, 0.02}, {2e-05, 1e-05}, {5e-06, 2e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"bf16-kv", "float32 compute, KV cache stored in bf16", "tiny-f16-sharded", 1,
     5e-05, 0.0002, 0.0002, 0.005, 0.97,
     {{0.1, 0.1}, {0.1, 0.05}, {0.1, 0.05}, {0.1, 0.1}, {0.05, 0.02}, {0.02, 0.05}},
     {0, 0, 0, 0, 0, 0}},
    {"bf16-kv", "float32 compute, KV cache stored in bf16", "tiny-f32-tied-flat", 1,
     1e-06, 2e-06, 2e-06, 0.002, 0.89,
     {{0.02, 0.01}, {0.02, 0.01}, {0.05, 0.02}, {0.05, 0.02}, {2e-05, 2e-05}, {5e-06, 5e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"bf16-kv", "float32 compute, KV cache stored in bf16", "tiny-hazard-decay", 1,
     2e-06, 2e-06, 5e-06, 0, 0.99,
     {{0.02, 0.01}, {0.01, 0.005}, {0.05, 0.02}, {0.05, 0.02}, {1e-05, 1e-05}, {1e-05, 2e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"bf16-kv", "float32 compute, KV cache stored in bf16", "tiny-legacy-packed", 1,
     2e-06, 2e-06, 2e-06, 0, 0.89,
     {{0.02, 0.02}, {0.02, 0.01}, {0.05, 0.02}, {0.1, 0.02}, {1e-05, 1e-05}, {5e-06, 1e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"bf16-kv", "float32 compute, KV cache stored in bf16", "tiny-long-context", 1,
     5e-08, 2e-07, 1e-06, 5e-05, 1,
     {{0.01, 0.005}, {0.01, 0.001}, {0.1, 0.02}, {0.05, 0.02}, {2e-06, 2e-06}, {5e-06, 1e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"bf16-kv", "float32 compute, KV cache stored in bf16", "tiny-long-decode", 1,
     5e-07, 1e-06, 1e-06, 0, 0.99,
     {{0.01, 0.01}, {0.01, 0.005}, {0.05, 0.02}, {0.05, 0.02}, {5e-06, 5e-06}, {5e-06, 1e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"bf16-kv", "float32 compute, KV cache stored in bf16", "tiny-moe-bf16-flat", 1,
     2e-06, 5e-06, 5e-06, 0, 1,
     {{0.02, 0.02}, {0.02, 0.02}, {0.05, 0.02}, {0.05, 0.02}, {1e-05, 1e-05}, {5e-06, 2e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"bf16-kv", "float32 compute, KV cache stored in bf16", "tiny-moe-f32-nested", 1,
     2e-06, 1e-05, 1e-05, 0.001, 1,
     {{0.05, 0.02}, {0.02, 0.01}, {0.05, 0.02}, {0.05, 0.02}, {5e-05, 5e-05}, {1e-05, 2e-05}},
     {0, 0, 0, 0, 0, 0}},
    {"bf16-kv", "float32 compute, KV cache stored in bf16", "tiny-rope-legacy-8layer", 1,
     1e-05, 0.0005, 0.0005, 0, 0.97,
     {{0.2, 0.1}, {0.5, 0.1}, {0.1, 0.05}, {0.1, 0.05}, {0.05, 0.05}, {0.02, 0.05}},
     {0, 0, 0, 0, 0, 0}},
    {"bf16", "bf16 weights, activations and KV cache; DeltaNet states float32", NULL, 1,
     0.5, 5, 5, 5, 0,
     {{20, 20}, {50, 10}, {20, 20}, {20, 10}, {10, 5}, {5, 5}},
     {1, 0.5, 1, 1, 0.2, 0.2}},
    {"bf16", "bf16 weights, activations and KV cache; DeltaNet states float32", "tiny-bf16-gva-nested", 1,
     0.005, 0.1, 0.1, 0.5, 0.74,
     {{5, 2}, {5, 2}, {5, 5}, {2, 2}, {0.5, 1}, {0.5, 1}},
     {0.02, 0.01, 0.02, 0.01, 0.002, 0.01}},
    {"bf16", "bf16 weights, activations and KV cache; DeltaNet states float32", "tiny-f16-sharded", 1,
     0.05, 0.2, 0.2, 1, 0.6,
     {{5, 5}, {5, 5}, {2, 2}, {5, 5}, {2, 2}, {0.5, 1}},
     {0.1, 0.02, 0.05, 0.02, 0.02, 0.02}},
    {"bf16", "bf16 weights, activations and KV cache; DeltaNet states float32", "tiny-f32-tied-flat", 1,
     0.5, 5, 5, 0.5, 0,
     {{20, 10}, {20, 5}, {10, 5}, {10, 10}, {5, 5}, {0.5, 5}},
     {1, 0.5, 0.5, 1, 0.1, 0.2}},
    {"bf16", "bf16 weights, activations and KV cache; DeltaNet states float32", "tiny-hazard-decay", 1,
     0.05, 1, 5, 2, 0.6,
     {{20, 10}, {20, 10}, {10, 10}, {10, 5}, {5, 5}, {1, 1}},
     {0.1, 0.05, 0.05, 0.05, 0.02, 0.05}},
    {"bf16", "bf16 weights, activations and KV cache; DeltaNet states float32", "tiny-legacy-packed", 1,
     0.02, 0.2, 2, 1, 0.5,
     {{10, 10}, {10, 5}, {10, 5}, {10, 10}, {2, 1}, {1, 5}},
     {0.05, 0.05, 0.05, 0.05, 0.01, 0.02}},
    {"bf16", "bf16 weights, activations and KV cache; DeltaNet states float32", "tiny-long-context", 1,
     0.01, 0.2, 5, 5, 0.88,
     {{20, 10}, {20, 5}, {20, 10}, {20, 10}, {0.2, 0.2}, {0.2, 0.5}},
     {0.02, 0.01, 0.02, 0.02, 0.0005, 0.002}},
    {"bf16", "bf16 weights, activations and KV cache; DeltaNet states float32", "tiny-long-decode", 1,
     0.005, 0.05, 1, 1, 0.84,
     {{10, 5}, {2, 1}, {10, 10}, {10, 5}, {0.5, 0.5}, {0.2, 0.5}},
     {0.01, 0.005, 0.01, 0.01, 0.001, 0.002}},
    {"bf16", "bf16 weights, activations and KV cache; DeltaNet states float32", "tiny-moe-bf16-flat", 1,
     0.2, 2, 2, 2, 0.37,
     {{20, 10}, {20, 10}, {10, 10}, {10, 10}, {5, 2}, {1, 5}},
     {0.5, 0.2, 0.5, 0.5, 0.02, 0.05}},
    {"bf16", "bf16 weights, activations and KV cache; DeltaNet states float32", "tiny-moe-f32-nested", 1,
     0.5, 5, 5, 2, 0,
     {{20, 20}, {50, 10}, {20, 20}, {20, 10}, {5, 5}, {2, 5}},
     {1, 0.5, 1, 1, 0.05, 0.2}},
    {"bf16", "bf16 weights, activations and KV cache; DeltaNet states float32", "tiny-rope-legacy-8layer", 1,
     0.5, 5, 5, 2, 0,
     {{20, 20}, {50, 10}, {20, 20}, {20, 10}, {10, 5}, {5, 5}},
     {1, 0.5, 0.5, 0.5, 0.2, 0.2}},
    {"int8", "Q8_0 weights (group 32, symmetric, f16 scales); f16 KV cache", NULL, 1,
     2, 5, 5, 5, 0,
     {{20, 20}, {50, 20}, {20, 20}, {20, 20}, {20, 10}, {5, 20}},
     {5, 2, 2, 2, 1, 1}},
    {"int8", "Q8_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-bf16-gva-nested", 1,
     0.2, 0.5, 0.5, 1, 0.2,
     {{10, 5}, {10, 5}, {5, 10}, {5, 5}, {2, 5}, {2, 5}},
     {0.5, 0.2, 1, 0.5, 0.05, 0.05}},
    {"int8", "Q8_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-f16-sharded", 1,
     0.02, 0.5, 0.5, 1, 0.2,
     {{10, 10}, {5, 5}, {10, 5}, {5, 5}, {1, 1}, {0.5, 1}},
     {0.05, 0.05, 0.05, 0.05, 0.01, 0.02}},
    {"int8", "Q8_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-f32-tied-flat", 1,
     0.2, 1, 1, 1, 0,
     {{10, 10}, {10, 5}, {5, 5}, {10, 5}, {5, 5}, {1, 2}},
     {0.5, 0.2, 0.2, 0.2, 0.05, 0.05}},
    {"int8", "Q8_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-hazard-decay", 1,
     1, 5, 5, 2, 0,
     {{20, 20}, {20, 10}, {20, 10}, {20, 10}, {2, 2}, {5, 5}},
     {2, 0.1, 1, 1, 0.02, 0.5}},
    {"int8", "Q8_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-legacy-packed", 1,
     0.5, 2, 2, 2, 0,
     {{10, 10}, {10, 10}, {10, 10}, {10, 10}, {5, 2}, {2, 5}},
     {1, 0.5, 1, 0.5, 0.05, 0.1}},
    {"int8", "Q8_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-long-context", 1,
     0.001, 0.01, 0.5, 0.5, 0.95,
     {{10, 5}, {5, 1}, {5, 2}, {2, 2}, {0.1, 0.1}, {0.1, 0.1}},
     {0.002, 0.001, 0.002, 0.001, 0.0001, 0.0002}},
    {"int8", "Q8_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-long-decode", 1,
     0.05, 0.5, 5, 2, 0.68,
     {{20, 10}, {2, 1}, {10, 10}, {10, 10}, {2, 1}, {0.5, 1}},
     {0.05, 0.01, 0.05, 0.05, 0.01, 0.02}},
    {"int8", "Q8_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-moe-bf16-flat", 1,
     1, 5, 5, 2, 0,
     {{20, 20}, {20, 10}, {10, 10}, {10, 10}, {5, 10}, {5, 5}},
     {2, 0.5, 0.5, 0.5, 0.1, 0.5}},
    {"int8", "Q8_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-moe-f32-nested", 1,
     0.5, 5, 5, 5, 0,
     {{20, 20}, {20, 20}, {20, 20}, {20, 10}, {10, 10}, {2, 5}},
     {1, 0.5, 0.5, 1, 0.5, 0.2}},
    {"int8", "Q8_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-rope-legacy-8layer", 1,
     2, 5, 5, 2, 0,
     {{20, 20}, {50, 20}, {20, 20}, {20, 20}, {20, 10}, {5, 20}},
     {5, 2, 2, 2, 1, 1}},
    {"int4", "Q4_0 weights (group 32, symmetric, f16 scales); f16 KV cache", NULL, 1,
     10, 10, 10, 5, 0,
     {{50, 20}, {50, 50}, {50, 20}, {50, 50}, {20, 50}, {20, 50}},
     {20, 20, 20, 20, 10, 10}},
    {"int4", "Q4_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-bf16-gva-nested", 1,
     5, 10, 10, 5, 0,
     {{50, 20}, {50, 20}, {20, 20}, {20, 50}, {20, 20}, {10, 20}},
     {10, 10, 10, 10, 5, 5}},
    {"int4", "Q4_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-f16-sharded", 1,
     5, 10, 10, 5, 0,
     {{50, 20}, {50, 20}, {20, 20}, {20, 20}, {20, 20}, {10, 20}},
     {5, 5, 5, 5, 2, 5}},
    {"int4", "Q4_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-f32-tied-flat", 1,
     5, 5, 5, 5, 0,
     {{50, 20}, {50, 20}, {50, 20}, {50, 20}, {20, 20}, {5, 20}},
     {10, 10, 5, 5, 5, 5}},
    {"int4", "Q4_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-hazard-decay", 1,
     5, 10, 10, 5, 0,
     {{50, 20}, {50, 20}, {20, 20}, {20, 20}, {20, 20}, {10, 20}},
     {5, 5, 5, 5, 5, 5}},
    {"int4", "Q4_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-legacy-packed", 1,
     5, 5, 5, 5, 0,
     {{50, 20}, {50, 50}, {20, 20}, {50, 20}, {20, 50}, {5, 20}},
     {20, 20, 10, 10, 5, 5}},
    {"int4", "Q4_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-long-context", 1,
     0.1, 1, 5, 5, 0.53,
     {{20, 10}, {20, 5}, {20, 10}, {20, 10}, {1, 1}, {1, 1}},
     {0.2, 0.1, 0.2, 0.2, 0.01, 0.05}},
    {"int4", "Q4_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-long-decode", 1,
     2, 5, 10, 5, 0,
     {{50, 20}, {20, 20}, {50, 20}, {50, 20}, {20, 10}, {5, 10}},
     {5, 5, 5, 5, 2, 2}},
    {"int4", "Q4_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-moe-bf16-flat", 1,
     5, 10, 10, 5, 0,
     {{50, 20}, {50, 20}, {20, 20}, {20, 20}, {20, 20}, {10, 20}},
     {5, 10, 10, 5, 5, 5}},
    {"int4", "Q4_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-moe-f32-nested", 1,
     5, 10, 10, 5, 0,
     {{50, 20}, {50, 20}, {50, 20}, {20, 20}, {20, 20}, {10, 50}},
     {10, 5, 10, 5, 2, 5}},
    {"int4", "Q4_0 weights (group 32, symmetric, f16 scales); f16 KV cache", "tiny-rope-legacy-8layer", 1,
     10, 10, 10, 5, 0,
     {{50, 20}, {50, 20}, {20, 20}, {50, 20}, {20, 20}, {20, 50}},
     {20, 20, 20, 20, 10, 10}},
};
/* END TIER TABLE */

static const int n_tiers = (int)(sizeof tiers / sizeof tiers[0]);

static const tier_row *find(const char *name) {
    for (int i = 0; name && i < n_tiers; i++)
        if (!strcmp(tiers[i].name, name) && !tiers[i].stem) return &tiers[i];
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* API                                                                                       */
/* ---------------------------------------------------------------------------------------- */

const char *qc_tier_names(void) {
    static char buf[256];
    if (!buf[0])
        for (int i = 0; i < n_tiers; i++)
            if (!tiers[i].stem)
                snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? ", " : "",
                         tiers[i].name);
    return buf;
}

const char *qc_tier_describe(const char *name) {
    const tier_row *t = find(name);
    return t ? t->about : NULL;
}

int qc_tier_gate_of(const char *name, qc_tier_gate *out, double *tie) {
    const tier_row *t = find(name);
    if (!t) return -1;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", t->name);
    out->dist = t->dist;
    out->kl_mean = t->kl_mean;
    out->kl_p99 = t->kl_p99;
    out->kl_max = t->kl_max;
    out->topk = QC_TIER_TOPK;
    out->topk_min = t->topk_min;
    for (int c = 0; c < QC_TC_COUNT; c++) {
        out->floor[c].atol = t->tol[c][0];
        out->floor[c].rtol = t->tol[c][1];
        out->floor[c].max_kl = c == QC_TC_LOGITS && t->dist ? t->kl_max : -1.0;
        out->nmse[c] = t->nmse[c];
    }
    out->tie_delta = t->tie_delta;
    for (int i = 0; i < n_tiers && out->n_stems < (int)(sizeof out->stems / sizeof out->stems[0]);
         i++) {
        const tier_row *r = &tiers[i];
        if (!r->stem || strcmp(r->name, t->name)) continue;
        snprintf(out->stems[out->n_stems].stem, sizeof out->stems[0].stem, "%s", r->stem);
        out->stems[out->n_stems].kl_mean = r->kl_mean;
        out->stems[out->n_stems].kl_p99 = r->kl_p99;
        out->stems[out->n_stems].kl_max = r->kl_max;
        out->stems[out->n_stems].tie_delta = r->tie_delta;
        out->stems[out->n_stems].topk_min = r->topk_min;
        memcpy(out->stems[out->n_stems].nmse, r->nmse, sizeof r->nmse);
        out->n_stems++;
    }
    *tie = t->tie_delta;
    return 0;
}

qc_status qc_tier_apply(qc_policy *p, const char *tier, qc_err *err) {
    qc_tier_gate g;
    double tie = 0.0;
    if (!tier || qc_tier_gate_of(tier, &g, &tie) != 0)
        return qc_errf(err, QC_ERR_ARG, "--tier %s: unknown tier (accepted: %s)",
                       tier ? tier : "(null)", qc_tier_names());
    char note[64];
    snprintf(note, sizeof note, "--tier %s", tier);
    qc_policy_note(p, note);
    if (!strcmp(tier, "fp32")) return QC_OK;
    qc_policy_set_tier(p, &g, tie);
    return QC_OK;
}

double qc_tier_nmse_limit(const qc_tier_gate *g, const char *stem, qc_tclass cls) {
    if (!g || (int)cls < 0 || cls >= QC_TC_COUNT) return 0.0;
    for (int i = 0; stem && i < g->n_stems; i++)
        if (!strcmp(g->stems[i].stem, stem)) return g->stems[i].nmse[cls];
    return g->nmse[cls];
}
