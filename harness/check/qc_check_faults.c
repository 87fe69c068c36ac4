/* qc_check_faults.c — test-only fault wrappers for the self-test (hidden --inject-fault): a
 * model copy with wrong norm offsets, a backend whose conv state goes stale. The runtime and
 * the backends themselves are never modified. */

#include "qc_check_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================================== */
/* fault wrappers (test-only; the runtime and backends are not modified)                 */
/* ===================================================================================== */

static int fault_norm_buf(fault_model *fm, qc_tensor *t) {
    size_t n = qc_tensor_numel(t);
    float *b = malloc((n ? n : 1) * sizeof *b);
    if (!b) return -1;
    for (size_t i = 0; i < n; i++) b[i] = qc_tensor_get(t, i) - 1.0f;
    fm->bufs[fm->n_bufs++] = b;
    t->dtype = QC_F32;
    t->data = b;
    return 0;
}

qc_status ck_fault_model_make(const qc_model *src, int layer, fault_model **out, qc_err *err) {
    const int L = src->cfg.n_layers;
    fault_model *fm = calloc(1, sizeof *fm);
    if (!fm) return qc_errf(err, QC_ERR_OOM, "fault model: out of memory");
    fm->m = *src;
    fm->layers = malloc((size_t)L * sizeof *fm->layers);
    fm->bufs = calloc((size_t)(2 * L + 2), sizeof *fm->bufs);
    if (!fm->layers || !fm->bufs) {
        free(fm->layers), free(fm->bufs), free(fm);
        return qc_errf(err, QC_ERR_OOM, "fault model: out of memory");
    }
    memcpy(fm->layers, src->layers, (size_t)L * sizeof *fm->layers);
    fm->m.layers = fm->layers;
    int bad = 0;
    if (layer >= 0) {
        bad |= fault_norm_buf(fm, &fm->layers[layer].input_norm);
    } else {
        for (int l = 0; l < L; l++) {
            bad |= fault_norm_buf(fm, &fm->layers[l].input_norm);
            bad |= fault_norm_buf(fm, &fm->layers[l].post_norm);
        }
        bad |= fault_norm_buf(fm, &fm->m.final_norm);
    }
    *out = fm;
    return bad ? qc_errf(err, QC_ERR_OOM, "fault model: out of memory") : QC_OK;
}

void ck_fault_model_free(fault_model *fm) {
    if (!fm) return;
    for (int i = 0; i < fm->n_bufs; i++) free(fm->bufs[i]);
    free(fm->bufs);
    free(fm->layers);
    free(fm);
}

/* (d) a backend wrapper: the first forward of a sequence (start_pos 0, right after a reset)
 * finds stale non-zero columns in every conv_state, as if reset had skipped them. */
typedef struct {
    qc_backend *inner;  /* the real backend (owned) */
} stale_impl;

static qc_status stale_forward(qc_backend *be, const qc_call *call, const int32_t *tokens, int n,
                               int start_pos, qc_state *st, float *logits, int all_logits,
                               qc_err *err) {
    stale_impl *si = be->impl;
    if (start_pos == 0) {
        for (int l = 0; l < st->n_layers; l++) {
            if (!st->conv_state[l]) continue;
            size_t nn = (size_t)st->conv_dim * (size_t)st->conv_kernel;
            for (size_t i = 0; i < nn; i++)
                st->conv_state[l][i] = 0.25f * (float)(1 + (int)(i % 7)) - 1.0f;
        }
    }
    return si->inner->forward(si->inner, call, tokens, n, start_pos, st, logits, all_logits, err);
}

static void stale_destroy(qc_backend *be) {
    stale_impl *si = be->impl;
    qc_backend_destroy(si->inner);
    free(si);
    free(be);
}

static const char *stale_describe(const qc_backend *be) {
    stale_impl *si = be->impl;
    return si->inner->describe ? si->inner->describe(si->inner) : si->inner->name;
}

qc_status ck_stale_wrap(qc_backend *inner, qc_backend **out, qc_err *err) {
    qc_backend *be = calloc(1, sizeof *be);
    stale_impl *si = calloc(1, sizeof *si);
    if (!be || !si) {
        free(be), free(si);
        qc_backend_destroy(inner);
        return qc_errf(err, QC_ERR_OOM, "fault wrapper: out of memory");
    }
    si->inner = inner;
    *be = *inner;
    be->impl = si;
    be->forward = stale_forward;
    be->destroy = stale_destroy;
    be->describe = stale_describe;
    *out = be;
    return QC_OK;
}

