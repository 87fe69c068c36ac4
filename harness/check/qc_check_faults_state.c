/* qc_check_faults_state.c — test-only faults of the self-test (hidden --inject-fault) for the
 * long-decode and hazard checks of issue 17:
 *   recurrent-bf16  a backend wrapper: after every forward call the DeltaNet recurrent state is
 *                   rounded to bf16 (a runtime that stores its state in bf16, ollama#15865);
 *                   long_decode_drift must fail on it, while the float32 state passes;
 *   unguarded-exp   the reference's chunked DeltaNet computes its decay ratios as
 *                   exp(gamma_r) * exp(-gamma_c) (pytorch/executorch#21417, the reference's
 *                   option fault.unguarded_exp): Inf * 0 = NaN in a chunk of strong decays,
 *                   which the checks must report as non-finite with its first location.
 *   moe-no-renorm, moe-gate-all, moe-topk-next, moe-gate-drop
 *                   the reference's MoE block drops the top-k renormalisation, applies the
 *                   shared-expert gate to routed + shared, takes the (k+1)-th expert instead
 *                   of the k-th, or drops the shared-expert gate (adds the shared expert
 *                   ungated) (the reference's option fault.moe); router_topk / the hidden states and
 *                   logits must fail on each, with the MoE block localised.
 * The backends' normal code paths are not changed by any of them. */
#include "qc_check_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>


/* ===================================================================================== */
/* recurrent-bf16: a backend wrapper                                                     */
/* ===================================================================================== */

typedef struct {
    qc_backend *inner; /* the real backend (owned) */
} bf16_impl;

/* x rounded to the nearest bf16 (ties to even), kept as a float; NaN stays NaN. */
static float round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return x; /* Inf / NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

static qc_status bf16_forward(qc_backend *be, const qc_call *call, const int32_t *tokens, int n,
                              int start_pos, qc_state *st, float *logits, int all_logits,
                              qc_err *err) {
    bf16_impl *bi = be->impl;
    qc_status s =
        bi->inner->forward(bi->inner, call, tokens, n, start_pos, st, logits, all_logits, err);
    if (s) return s;
    const size_t nn = (size_t)st->n_v_heads * st->k_dim * st->v_dim;
    for (int l = 0; l < st->n_layers; l++) {
        float *S = st->recurrent_state[l];
        if (!S) continue;
        for (size_t i = 0; i < nn; i++) S[i] = round_bf16(S[i]);
    }
    return QC_OK;
}

static void bf16_destroy(qc_backend *be) {
    bf16_impl *bi = be->impl;
    qc_backend_destroy(bi->inner);
    free(bi);
    free(be);
}

static const char *bf16_describe(const qc_backend *be) {
    bf16_impl *bi = be->impl;
    return bi->inner->describe ? bi->inner->describe(bi->inner) : bi->inner->name;
}

qc_status ck_bf16_state_wrap(qc_backend *inner, qc_backend **out, qc_err *err) {
    qc_backend *be = calloc(1, sizeof *be);
    bf16_impl *bi = calloc(1, sizeof *bi);
    if (!be || !bi) {
        free(be), free(bi);
        qc_backend_destroy(inner);
        *out = NULL;
        return qc_errf(err, QC_ERR_OOM, "fault wrapper: out of memory");
    }
    bi->inner = inner;
    *be = *inner;
    be->impl = bi;
    be->forward = bf16_forward;
    be->destroy = bf16_destroy;
    be->describe = bf16_describe;
    *out = be;
    return QC_OK;
}

/* ===================================================================================== */
/* applying them                                                                         */
/* ===================================================================================== */

/* 1 when be is the registry's reference built-in. */
static int is_reference(const qc_backend *be) {
    const qc_builtin_info *r = qc_registry_reference();
    return r && be->name && !strcmp(be->name, r->name);
}

qc_status ck_state_faults_apply(const qc_check_faults *f, qc_backend **be, qc_err *err) {
    if (f->unguarded_exp && is_reference(*be)) {
        qc_status s = qc_backend_set_option(*be, "fault.unguarded_exp", "1", err);
        if (s) {
            qc_backend_destroy(*be);
            *be = NULL;
            return s;
        }
    }
    /* the MoE block's port bugs: the reference of a MoE model only (dense goldens of the same
     * run are checked unbroken) */
    if (f->moe_fault && is_reference(*be) && (*be)->model &&
        qc_cfg_is_moe(&(*be)->model->cfg)) {
        qc_status s = qc_backend_set_option(*be, "fault.moe", f->moe_fault, err);
        if (s) {
            qc_backend_destroy(*be);
            *be = NULL;
            return s;
        }
    }
    if (f->recurrent_bf16) return ck_bf16_state_wrap(*be, be, err);
    return QC_OK;
}
