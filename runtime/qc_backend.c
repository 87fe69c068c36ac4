/* qc_backend.c — backend options defaults, allocation, the call contract of a forward pass
 * (qc_backend_forward: validated here once for every backend), and the state lifecycle calls
 * that reach a runtime keeping its own state. No backend is named here: the backends depend on
 * the runtime, never the other way round (creation by name is the harness's registry). */
#include "qc/qc_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qc_backend_opts_default(qc_backend_opts *o) {
    memset(o, 0, sizeof *o);
    o->dn_kernel = QC_DN_CHUNKED;
    o->chunk_size = 64;
    o->n_threads = 0;
    o->max_tokens = 128;
    o->trace = NULL;
    o->trace_user = NULL;
    o->profile = NULL;
}

void qc_call_default(qc_call *c) {
    memset(c, 0, sizeof *c);
    c->dn_kernel = QC_DN_CHUNKED;
    c->chunk_size = 64;
}

qc_call qc_backend_call_defaults(const qc_backend_opts *o) {
    qc_call c = {o->dn_kernel, o->chunk_size, o->trace, o->trace_user};
    return c;
}

qc_status qc_backend_check_create(const qc_model *m, const qc_backend_opts *o, qc_err *err) {
    if (!m) return qc_errf(err, QC_ERR_ARG, "create: model is NULL");
    if (!o) return qc_errf(err, QC_ERR_ARG, "create: options are NULL");
    if (o->max_tokens < 1)
        return qc_errf(err, QC_ERR_ARG, "create: max_tokens %d < 1", o->max_tokens);
    return qc_model_validate(m, err);
}

qc_backend *qc_backend_alloc(void) {
    qc_backend *be = calloc(1, sizeof *be);
    if (be) be->caps = QC_BE_CAP_ALL;
    return be;
}

void qc_backend_destroy(qc_backend *be) {
    if (be && be->destroy) be->destroy(be);
}

qc_status qc_backend_reset(qc_backend *be, qc_state *st, qc_err *err) {
    if (st) qc_state_reset(st);
    return be && be->reset ? be->reset(be, err) : QC_OK;
}

qc_status qc_backend_fill_state(qc_backend *be, qc_state *st, float v, qc_err *err) {
    if (!(be->caps & QC_BE_CAP_STATE_FILL))
        return qc_errf(err, QC_ERR_UNSUPPORTED, "%s: cannot fill its state buffers", be->name);
    if (st) qc_state_fill(st, v);
    return be->fill_state ? be->fill_state(be, v, err) : QC_OK;
}

qc_status qc_backend_sync_state(qc_backend *be, qc_state *st, int n_pos, qc_err *err) {
    if (!(be->caps & QC_BE_CAP_STATE_READ))
        return qc_errf(err, QC_ERR_UNSUPPORTED, "%s: does not expose its state buffers",
                       be->name);
    return be->sync_state ? be->sync_state(be, st, n_pos, err) : QC_OK;
}

qc_status qc_backend_set_option(qc_backend *be, const char *key, const char *value, qc_err *err) {
    if (!be->set_option)
        return qc_errf(err, QC_ERR_NO_OPTION, "%s: has no option '%s'", be->name, key);
    return be->set_option(be, key, value, err);
}

/* ===================================================================================== */
/* The call contract (qc_backend.h): one check, one wording, every backend               */
/* ===================================================================================== */

/* st's geometry against the model config: QC_OK, or QC_ERR_ARG naming the first difference. */
static qc_status check_state(const qc_config *c, const qc_state *st, qc_err *err) {
    const char *what = NULL;
    int have = 0, want = 0;
#define GEO(field, value, name)                      \
    if (!what && st->field != (value)) {             \
        what = name, have = st->field, want = (value); \
    }
    GEO(n_layers, c->n_layers, "n_layers");
    GEO(n_kv_heads, c->n_kv_heads, "n_kv_heads");
    GEO(head_dim, c->head_dim, "head_dim");
    GEO(conv_dim, qc_cfg_conv_dim(c), "conv_dim");
    GEO(conv_kernel, c->conv_kernel, "conv_kernel");
    GEO(n_v_heads, c->lin_n_v_heads, "linear v heads");
    GEO(k_dim, c->lin_k_dim, "linear k_dim");
    GEO(v_dim, c->lin_v_dim, "linear v_dim");
#undef GEO
    if (what)
        return qc_errf(err, QC_ERR_ARG,
                       "forward: the state does not match the model config (%s %d != %d)", what,
                       have, want);
    for (int l = 0; l < c->n_layers; l++) {
        const int full = c->layer_types[l] == QC_LAYER_FULL;
        const int ok = full ? st->k_cache && st->v_cache && st->k_cache[l] && st->v_cache[l]
                            : st->conv_state && st->recurrent_state && st->conv_state[l] &&
                                  st->recurrent_state[l];
        if (!ok)
            return qc_errf(err, QC_ERR_ARG,
                           "forward: the state does not match the model config (layer %d has "
                           "no %s buffers)",
                           l, full ? "k/v cache" : "conv / recurrent state");
    }
    return QC_OK;
}

qc_status qc_backend_forward(qc_backend *be, const int32_t *tokens, int n, int start_pos,
                             qc_state *st, float *logits, int all_logits, qc_err *err) {
    return qc_backend_forward_call(be, NULL, tokens, n, start_pos, st, logits, all_logits, err);
}

qc_status qc_backend_forward_call(qc_backend *be, const qc_call *call, const int32_t *tokens,
                                  int n, int start_pos, qc_state *st, float *logits,
                                  int all_logits, qc_err *err) {
    if (!be || !be->forward || !be->model)
        return qc_errf(err, QC_ERR_ARG, "forward: no backend (or one without a model)");
    const qc_config *c = &be->model->cfg;
    const qc_backend_opts *o = &be->opts;
    const qc_call defaults = qc_backend_call_defaults(o);
    const qc_call *k = call ? call : &defaults;
    if (!tokens || !st) return qc_errf(err, QC_ERR_ARG, "forward: tokens or state is NULL");
    if (n < 1 || n > o->max_tokens)
        return qc_errf(err, QC_ERR_RANGE, "forward: n = %d tokens outside [1, max_tokens %d]", n,
                       o->max_tokens);
    if (start_pos < 0) return qc_errf(err, QC_ERR_RANGE, "forward: start_pos %d < 0", start_pos);
    if ((int64_t)start_pos + n > st->max_context_len)
        return qc_errf(err, QC_ERR_RANGE,
                       "forward: positions %d..%lld exceed the state capacity of %d positions",
                       start_pos, (long long)start_pos + n - 1, st->max_context_len);
    qc_status s = check_state(c, st, err);
    if (s) return s;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return qc_errf(err, QC_ERR_RANGE,
                           "forward: token %d (index %d) outside the vocabulary [0, %d)",
                           (int)tokens[i], i, c->vocab_size);
    if (k->dn_kernel != QC_DN_CHUNKED && k->dn_kernel != QC_DN_RECURRENT)
        return qc_errf(err, QC_ERR_ARG,
                       "forward: dn_kernel %d is neither chunked (%d) nor recurrent (%d)",
                       (int)k->dn_kernel, (int)QC_DN_CHUNKED, (int)QC_DN_RECURRENT);
    if (k->chunk_size < 1)
        return qc_errf(err, QC_ERR_ARG, "forward: chunk_size %d < 1", k->chunk_size);
    const int chunk = k->chunk_size < n ? k->chunk_size : n;
    if (k->dn_kernel == QC_DN_CHUNKED && be->max_chunk_tokens > 0 && chunk > be->max_chunk_tokens)
        return qc_errf(err, QC_ERR_ARG,
                       "forward: chunks of %d tokens (chunk_size %d, n %d) exceed the %d-token "
                       "DeltaNet chunk scratch that %s sized at create (create it with "
                       "chunk_size >= %d)",
                       chunk, k->chunk_size, n, be->max_chunk_tokens,
                       be->name ? be->name : "the backend", chunk);
    return be->forward(be, k, tokens, n, start_pos, st, logits, all_logits, err);
}
