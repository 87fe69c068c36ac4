/* fuzz_config.c — libFuzzer target for the config.json parser (qc_config_parse), followed by
 * the memory planner on every config the parser accepts (qc_memplan_estimate must never
 * overflow silently or crash on extreme but valid dimensions).
 * Input: the config file's bytes.
 * Checks: no crash / leak / UB; errors name the file; on success the config satisfies the
 * invariants every consumer relies on (positive dims, layer kinds, rotary_dim even and within
 * head_dim, head divisibility, finite positive eps / theta). */
#include <math.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "qc/qc_config.h"
#include "qc/qc_memplan.h"
#include "qc/qc_optimized.h"
#include "qc/qc_reference.h"

#define FZ_PATH "fuzz/config.json"

static void check_config(const qc_config *c) {
    const int dims[] = {c->vocab_size,   c->hidden_size,   c->intermediate_size, c->n_layers,
                        c->n_heads,      c->n_kv_heads,    c->head_dim,          c->lin_n_k_heads,
                        c->lin_n_v_heads, c->lin_k_dim,    c->lin_v_dim,         c->conv_kernel};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        FZ_REQUIRE(dims[i] >= 1, "dimension #%zu is %d", i, dims[i]);
    FZ_REQUIRE(c->n_layers <= QC_MAX_LAYERS, "n_layers %d", c->n_layers);
    for (int l = 0; l < c->n_layers; l++)
        FZ_REQUIRE(c->layer_types[l] == QC_LAYER_LINEAR || c->layer_types[l] == QC_LAYER_FULL,
                   "layer %d kind %d", l, (int)c->layer_types[l]);
    FZ_REQUIRE(c->rotary_dim >= 2 && c->rotary_dim % 2 == 0 && c->rotary_dim <= c->head_dim,
               "rotary_dim %d (head_dim %d)", c->rotary_dim, c->head_dim);
    FZ_REQUIRE(c->lin_n_v_heads % c->lin_n_k_heads == 0, "nv %% nk");
    FZ_REQUIRE(c->n_heads % c->n_kv_heads == 0, "nh %% nkv");
    FZ_REQUIRE(isfinite(c->rms_eps) && c->rms_eps > 0, "rms_eps %g", c->rms_eps);
    FZ_REQUIRE(isfinite(c->rope_theta) && c->rope_theta > 0, "rope_theta %g", c->rope_theta);
    FZ_REQUIRE(c->partial_rotary_factor > 0 && c->partial_rotary_factor <= 1, "prf %g",
               c->partial_rotary_factor);
    FZ_REQUIRE(c->tie_word_embeddings == 0 || c->tie_word_embeddings == 1, "tie");
    FZ_REQUIRE(qc_cfg_conv_dim(c) >= 1, "conv_dim overflow");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = fz_copy(data, size);
    qc_config cfg;
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_config_parse((const char *)buf, size, FZ_PATH, &cfg, &err);
    fz_check_error(st, &err, FZ_PATH);
    if (st == QC_OK) {
        check_config(&cfg);
        /* the planner on the accepted config: either an estimate or a clean range error */
        qc_memplan_req rq;
        qc_memplan_req_init(&rq, &cfg, QC_BF16, 32768, 128);
        /* both built-ins at once, as they report themselves (their counting layout code runs
         * on every accepted config: a clean size or SIZE_MAX, never a crash) */
        qc_backend_opts bo;
        qc_backend_opts_default(&bo);
        bo.max_tokens = rq.max_tokens;
        bo.n_threads = 2;
        qc_err e1;
        qc_err_clear(&e1);
        qc_status bs =
            qc_memplan_add_backend(&rq, "reference", qc_reference_scratch_bytes(&cfg, &bo), &e1);
        if (!bs)
            bs = qc_memplan_add_backend(&rq, "optimized", qc_optimized_scratch_bytes(&cfg, &bo),
                                        &e1);
        fz_check_error(bs, &e1, "memory plan");
        if (bs) {
            free(buf);
            return 0;
        }
        rq.n_logit_rows = 16;
        rq.n_hidden_tokens = 16;
        rq.n_state_copies = 2;
        qc_memplan plan;
        qc_err e2;
        qc_err_clear(&e2);
        qc_status ps = qc_memplan_estimate(&rq, &plan, &e2);
        fz_check_error(ps, &e2, "memory plan");
        if (ps == QC_OK)
            FZ_REQUIRE(plan.total >= plan.weights && plan.total >= plan.state &&
                           plan.weights > 0 && plan.state > 0,
                       "plan totals");
    }
    free(buf);
    return 0;
}
