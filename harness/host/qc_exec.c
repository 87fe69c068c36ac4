/* qc_exec.c — the exec adapter client: starts a runtime under test as a child process
 * (`/bin/sh -c CMD`, its own process group), speaks docs/adapter-protocol.md to it over pipes
 * and offers it through the runtime plugin ABI vtable (qc/qc_runtime_plugin.h).
 *
 * This file holds the vtable operations and the public entry points (qc_exec.h); the child
 * process, the frames and the startup live beside it (qc_exec_internal.h names them).
 */
#define _GNU_SOURCE

#include "qc_exec_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_config.h"

_Static_assert(QC_EXEC_MAX_LAYERS == QC_MAX_LAYERS, "qc_exec_dims.layer_full must hold a config");

/* The last failed qc_exec_open (last_error(NULL)). */
static _Thread_local char g_open_err[1024] = "no error";

/* ===================================================================================== */
/* the vtable                                                                            */
/* ===================================================================================== */

static int dim_vocab(const qc_exec *x) { return x->have_dims ? x->dims.vocab : x->info.vocab_size; }
static int dim_hidden(const qc_exec *x) { return x->have_dims ? x->dims.hidden : x->info.hidden_size; }
static int dim_layers(const qc_exec *x) { return x->have_dims ? x->dims.n_layers : x->info.n_layers; }

static int x_reset(void *h) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    x->hidden_valid = x->router_valid = 0;
    x->state_npos = -1;
    if (x->dead) {
        int rc = ex_respawn(x);
        if (rc) return rc;
    }
    return ex_simple_request(x, "reset", ex_op_object("reset"));
}

static int x_forward(void *h, const int32_t *tokens, int32_t n, int32_t start_pos,
                     int32_t all_logits, float *logits) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    if (x->dead) return ex_not_running(x, "forward");
    x->hidden_valid = x->router_valid = 0;
    x->state_npos = -1;
    if (!tokens || !logits || n < 1 || start_pos < 0)
        return ex_local_err(x, QC_PLUGIN_ERROR, "forward", "bad arguments (n %d, start_pos %d%s%s)",
                            (int)n, (int)start_pos, tokens ? "" : ", tokens NULL",
                            logits ? "" : ", logits NULL");
    if (x->info.max_tokens_per_call > 0 && n > x->info.max_tokens_per_call)
        return ex_local_err(x, QC_PLUGIN_ERROR, "forward", "%d tokens in one call, the adapter "
                            "announced max_tokens_per_call %d", (int)n,
                            (int)x->info.max_tokens_per_call);
    if ((size_t)n > MAX_HEADER / 2)
        return ex_local_err(x, QC_PLUGIN_ERROR, "forward", "%d tokens do not fit in one request "
                            "header (1 MiB)", (int)n);
    int64_t V = dim_vocab(x), H = dim_hidden(x), L = dim_layers(x);
    int want_h = x->want_hidden && (x->info.caps & QC_CAP_HIDDEN);
    int K = x->have_dims ? x->dims.n_experts_per_tok : 0;
    int want_r = x->want_router && (x->info.caps & QC_CAP_ROUTER) && K > 0;
    int want_m = want_h && (x->info.caps & QC_CAP_MLP_IN); /* mlp_in [L, n, H] after hidden */
    tspec sp[5];
    int ns = want_h ? 2 : 1;
    memset(sp, 0, sizeof sp);
    snprintf(sp[0].name, sizeof sp[0].name, "logits");
    sp[0].ndim = 2;
    sp[0].dims[0] = all_logits ? n : 1;
    sp[0].dims[1] = V;
    sp[0].dst = logits;
    if (want_h) { /* allocated before the request: a failure here leaves the stream in step */
        size_t need = (size_t)(L + 1 + (want_m ? L : 0)) * (size_t)n * (size_t)H;
        if (ex_grow((void **)&x->hidden, &x->hidden_cap, need * sizeof(float)))
            return ex_local_err(x, QC_PLUGIN_ERROR, "forward", "out of memory for hidden states "
                                "[%lld, %d, %lld]", (long long)(L + 1), (int)n, (long long)H);
        snprintf(sp[1].name, sizeof sp[1].name, "hidden");
        sp[1].ndim = 3;
        sp[1].dims[0] = L + 1;
        sp[1].dims[1] = n;
        sp[1].dims[2] = H;
        sp[1].dst = x->hidden;
    }
    if (want_m) { /* stored after the hidden states in the same buffer */
        snprintf(sp[ns].name, sizeof sp[ns].name, "mlp_in");
        sp[ns].ndim = 3;
        sp[ns].dims[0] = L;
        sp[ns].dims[1] = n;
        sp[ns].dims[2] = H;
        sp[ns].dst = x->hidden + (size_t)(L + 1) * (size_t)n * (size_t)H;
        ns++;
    }
    if (want_r) { /* router_ids (int32) then router_weights, both [L, n, k] */
        size_t bytes = (size_t)L * (size_t)n * (size_t)K * 4;
        if (ex_grow((void **)&x->router_ids, &x->router_cap, bytes) ||
            ex_grow((void **)&x->router_w, &x->router_w_cap, bytes))
            return ex_local_err(x, QC_PLUGIN_ERROR, "forward", "out of memory for router "
                                "choices [%lld, %d, %d]", (long long)L, (int)n, K);
        for (int i = 0; i < 2; i++, ns++) {
            snprintf(sp[ns].name, sizeof sp[ns].name, i ? "router_weights" : "router_ids");
            sp[ns].ndim = 3;
            sp[ns].dims[0] = L;
            sp[ns].dims[1] = n;
            sp[ns].dims[2] = K;
            sp[ns].dst = i ? x->router_w : (float *)(void *)x->router_ids; /* 4-byte elements */
        }
    }
    size_t need = 128 + (size_t)n * 12;
    if (ex_grow((void **)&x->req, &x->req_cap, need))
        return ex_local_err(x, QC_PLUGIN_ERROR, "forward", "out of memory for the request");
    char *p = x->req;
    p += sprintf(p, "{\"op\":\"forward\",\"tokens\":[");
    for (int32_t i = 0; i < n; i++) p += sprintf(p, i ? ",%d" : "%d", (int)tokens[i]);
    p += sprintf(p, "],\"start_pos\":%d,\"all_logits\":%s,\"hidden\":%s%s}", (int)start_pos,
                 all_logits ? "true" : "false", want_h ? "true" : "false",
                 want_r ? ",\"router\":true" : "");
    cJSON *root;
    uint64_t pl;
    double deadline = ex_now_s() + x->timeout_s;
    int rc = ex_transact(x, "forward", x->req, (size_t)(p - x->req), deadline, &root, &pl);
    if (rc) return rc;
    rc = ex_recv_tensors(x, "forward", root, pl, sp, ns, deadline);
    if (rc) return rc;
    if (want_h) {
        x->hidden_valid = 1;
        x->hidden_n = n;
        x->hidden_has_mlp_in = want_m;
    }
    if (want_r) {
        x->router_valid = 1;
        x->router_n = n;
    }
    return QC_PLUGIN_OK;
}

/* {"op":"forward", ..., "topk": K} to a child that announced topk_only: tensors topk_ids
 * (int32) and topk_logprobs (float32), both [n, K] (docs/adapter-protocol.md). The values are
 * validated by the backend (qc_remote.c), the shapes here. */
static int x_forward_topk(void *h, const int32_t *tokens, int32_t n, int32_t start_pos, int32_t k,
                          int32_t *ids, float *logprobs) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    if (x->dead) return ex_not_running(x, "forward");
    x->hidden_valid = 0;
    x->state_npos = -1;
    if (!(x->info.caps & QC_CAP_TOPK_ONLY))
        return ex_local_err(x, QC_PLUGIN_ERROR, "forward", "top-k asked of an adapter that did "
                            "not announce topk_only");
    if (!tokens || !ids || !logprobs || n < 1 || start_pos < 0 || k < 1 ||
        (size_t)n > MAX_HEADER / 2)
        return ex_local_err(x, QC_PLUGIN_ERROR, "forward", "bad arguments (n %d, start_pos %d, "
                            "k %d)", (int)n, (int)start_pos, (int)k);
    if (x->info.max_tokens_per_call > 0 && n > x->info.max_tokens_per_call)
        return ex_local_err(x, QC_PLUGIN_ERROR, "forward", "%d tokens in one call, the adapter "
                            "announced max_tokens_per_call %d", (int)n,
                            (int)x->info.max_tokens_per_call);
    tspec sp[2];
    memset(sp, 0, sizeof sp);
    snprintf(sp[0].name, sizeof sp[0].name, "topk_ids");
    snprintf(sp[1].name, sizeof sp[1].name, "topk_logprobs");
    for (int i = 0; i < 2; i++) sp[i].ndim = 2, sp[i].dims[0] = n, sp[i].dims[1] = k;
    sp[0].dst = (float *)(void *)ids; /* 4-byte little-endian elements, read as they are */
    sp[1].dst = logprobs;
    size_t need = 160 + (size_t)n * 12;
    if (ex_grow((void **)&x->req, &x->req_cap, need))
        return ex_local_err(x, QC_PLUGIN_ERROR, "forward", "out of memory for the request");
    char *p = x->req;
    p += sprintf(p, "{\"op\":\"forward\",\"tokens\":[");
    for (int32_t i = 0; i < n; i++) p += sprintf(p, i ? ",%d" : "%d", (int)tokens[i]);
    p += sprintf(p, "],\"start_pos\":%d,\"all_logits\":true,\"hidden\":false,\"topk\":%d}",
                 (int)start_pos, (int)k);
    cJSON *root;
    uint64_t pl;
    double deadline = ex_now_s() + x->timeout_s;
    int rc = ex_transact(x, "forward", x->req, (size_t)(p - x->req), deadline, &root, &pl);
    if (rc) return rc;
    return ex_recv_tensors(x, "forward", root, pl, sp, 2, deadline);
}

static void x_close(void *h) {
    qc_exec *x = h;
    if (!x) return;
    if (!x->dead && x->pid > 0) {
        double dl = ex_now_s() + CLOSE_WAIT_S;
        const char *req = "{\"op\":\"close\"}";
        cJSON *root = NULL;
        uint64_t pl;
        if (!ex_transact(x, "close", req, strlen(req), dl, &root, &pl))
            cJSON_Delete(root);
        ex_wait_exit(x, dl); /* its answer does not matter: wait for the exit, or kill */
    }
    ex_kill_child(x);
    free(x->cmd);
    free(x->model_dir);
    free(x->options);
    free(x->specs);
    free(x->hidden);
    free(x->router_ids);
    free(x->router_w);
    free(x->state);
    free(x->req);
    free(x->hdr);
    for (int i = 0; i < x->n_opts; i++) {
        free(x->opts[i].key);
        free(x->opts[i].value);
    }
    free(x);
}

static const char *x_last_error(void *h) {
    qc_exec *x = h;
    return x ? x->err : g_open_err;
}

/* What every capture getter checks first: the capability announced, the child running, the
 * last forward's capture present (`valid`, else `missing` says why), `what` idx in 0..hi and
 * the destination given. QC_PLUGIN_OK to go on, else the status to return. */
static int x_capture_check(qc_exec *x, const char *fn, unsigned cap, const char *cap_name,
                           int valid, const char *missing, const char *what, int idx, int hi,
                           int dst_ok) {
    if (!(x->info.caps & cap))
        return ex_local_err(x, QC_PLUGIN_UNSUPPORTED, fn, "the adapter did not announce the '%s' "
                            "capability", cap_name);
    if (x->dead) return ex_not_running(x, fn);
    if (!valid) return ex_local_err(x, QC_PLUGIN_ERROR, fn, "%s", missing);
    if (idx < 0 || idx > hi || !dst_ok)
        return ex_local_err(x, QC_PLUGIN_ERROR, fn, "bad arguments (%s %d of 0..%d%s)", what, idx,
                            hi, dst_ok ? "" : ", dst NULL");
    return QC_PLUGIN_OK;
}

/* Hidden checkpoint `index` [n, H] of the last forward. */
static int x_get_hidden(void *h, int32_t index, float *dst) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    int L = dim_layers(x);
    int rc = x_capture_check(x, "get_hidden", QC_CAP_HIDDEN, "hidden", x->hidden_valid,
                             "no hidden states: the last forward did not return any (not asked "
                             "for: qc_exec_want_hidden off, or the forward failed)",
                             "index", (int)index, L, dst != NULL);
    if (rc != QC_PLUGIN_OK) return rc;
    size_t blk = (size_t)x->hidden_n * (size_t)dim_hidden(x);
    memcpy(dst, x->hidden + (size_t)index * blk, blk * sizeof(float));
    return QC_PLUGIN_OK;
}

/* Layer `layer`'s mlp_in [n, H] of the last forward (sent with its hidden states). */
static int x_get_mlp_in(void *h, int32_t layer, float *dst) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    int L = dim_layers(x);
    int rc = x_capture_check(x, "get_mlp_in", QC_CAP_MLP_IN, "mlp_in",
                             x->hidden_valid && x->hidden_has_mlp_in,
                             "no mlp_in: the last forward did not return it (hidden states not "
                             "asked for, or the forward failed)",
                             "layer", (int)layer, L - 1, dst != NULL);
    if (rc != QC_PLUGIN_OK) return rc;
    size_t blk = (size_t)x->hidden_n * (size_t)dim_hidden(x);
    memcpy(dst, x->hidden + (size_t)(L + 1 + layer) * blk, blk * sizeof(float));
    return QC_PLUGIN_OK;
}

/* Layer `layer` of the last forward's router choices: ids / weights [n, k] (the values as the
 * child sent them: router_topk judges them). */
static int x_get_router(void *h, int32_t layer, int32_t *ids, float *weights) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    int L = dim_layers(x);
    int rc = x_capture_check(x, "get_router", QC_CAP_ROUTER, "router", x->router_valid,
                             "no router choices: the last forward did not return any (not asked "
                             "for: qc_exec_want_router off, a dense model, or the forward failed)",
                             "layer", (int)layer, L - 1, ids && weights);
    if (rc != QC_PLUGIN_OK) return rc;
    int K = x->have_dims ? x->dims.n_experts_per_tok : 0;
    size_t blk = (size_t)x->router_n * (size_t)K;
    memcpy(ids, x->router_ids + (size_t)layer * blk, blk * sizeof(int32_t));
    memcpy(weights, x->router_w + (size_t)layer * blk, blk * sizeof(float));
    return QC_PLUGIN_OK;
}

static const char *const state_kind_name[4] = {"k_cache", "v_cache", "conv_state",
                                               "recurrent_state"};

/* One get_state request: every layer's tensors into the cache, for n_pos. */
static int fetch_state(qc_exec *x, int32_t n_pos) {
    const qc_exec_dims *d = &x->dims;
    size_t total = 0;
    x->state_npos = -1;
    for (int l = 0; l < d->n_layers; l++) {
        tspec *s = &x->specs[2 * l];
        if (d->layer_full[l]) {
            for (int k = 0; k < 2; k++) {
                s[k].ndim = 3;
                s[k].dims[0] = d->n_kv_heads;
                s[k].dims[1] = n_pos;
                s[k].dims[2] = d->head_dim;
            }
        } else {
            s[0].ndim = 2;
            s[0].dims[0] = d->conv_dim;
            s[0].dims[1] = d->conv_kernel;
            s[1].ndim = 3;
            s[1].dims[0] = d->n_v_heads;
            s[1].dims[1] = d->k_dim;
            s[1].dims[2] = d->v_dim;
        }
        total += (size_t)ex_spec_numel(&s[0]) + (size_t)ex_spec_numel(&s[1]);
    }
    if (ex_grow((void **)&x->state, &x->state_cap, (total ? total : 1) * sizeof(float)))
        return ex_local_err(x, QC_PLUGIN_ERROR, "get_state", "out of memory for the state "
                            "(%zu floats)", total);
    size_t off = 0;
    for (int i = 0; i < 2 * d->n_layers; i++) {
        x->specs[i].dst = x->state + off;
        off += (size_t)ex_spec_numel(&x->specs[i]);
    }
    char req[64];
    int len = snprintf(req, sizeof req, "{\"op\":\"get_state\",\"n_pos\":%d}", (int)n_pos);
    cJSON *root;
    uint64_t pl;
    double deadline = ex_now_s() + x->timeout_s;
    int rc = ex_transact(x, "get_state", req, (size_t)len, deadline, &root, &pl);
    if (rc) return rc;
    rc = ex_recv_tensors(x, "get_state", root, pl, x->specs, 2 * d->n_layers, deadline);
    if (rc) return rc;
    x->state_npos = n_pos;
    return QC_PLUGIN_OK;
}

static int x_get_state(void *h, int32_t layer, int32_t kind, int32_t n_pos, float *dst) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    if (!(x->info.caps & QC_CAP_STATE_READ))
        return ex_local_err(x, QC_PLUGIN_UNSUPPORTED, "get_state", "the adapter did not announce "
                            "the 'state_read' capability");
    if (x->dead) return ex_not_running(x, "get_state");
    if (!x->have_dims)
        return ex_local_err(x, QC_PLUGIN_ERROR, "get_state", "the model dims are unknown (%s)",
                            x->dims_error[0] ? x->dims_error : "qc_exec_set_dims was not called");
    const qc_exec_dims *d = &x->dims;
    if (layer < 0 || layer >= d->n_layers || kind < 0 || kind > 3 || n_pos < 0 || !dst)
        return ex_local_err(x, QC_PLUGIN_ERROR, "get_state", "bad arguments (layer %d of %d, kind "
                            "%d, n_pos %d%s)", (int)layer, d->n_layers, (int)kind, (int)n_pos,
                            dst ? "" : ", dst NULL");
    int full = d->layer_full[layer] != 0, cache_kind = kind <= QC_STATE_V_CACHE;
    if (full != cache_kind)
        return ex_local_err(x, QC_PLUGIN_ERROR, "get_state", "layer %d is a %s layer: it has no %s",
                            (int)layer,
                            full ? "full attention" : "linear attention (Gated DeltaNet)",
                            state_kind_name[kind]);
    /* conv / recurrent do not depend on n_pos: any cached answer serves */
    if (x->state_npos < 0 || (cache_kind && x->state_npos != n_pos)) {
        int rc = fetch_state(x, n_pos);
        if (rc) return rc;
    }
    const tspec *s = &x->specs[2 * layer + (cache_kind ? kind : kind - 2)];
    memcpy(dst, s->dst, (size_t)ex_spec_numel(s) * sizeof(float));
    return QC_PLUGIN_OK;
}

static int x_fill_state(void *h, float value) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    if (!(x->info.caps & QC_CAP_STATE_FILL))
        return ex_local_err(x, QC_PLUGIN_UNSUPPORTED, "fill_state", "the adapter did not announce "
                            "the 'state_fill' capability");
    if (x->dead) return ex_not_running(x, "fill_state");
    x->state_npos = -1;
    cJSON *req = ex_op_object("fill_state");
    cJSON *v = isnan(value) ? cJSON_CreateString("nan")
               : isinf(value) ? cJSON_CreateString(value > 0 ? "inf" : "-inf")
               : cJSON_CreateNumber((double)value); /* %.17g: the float comes back exact */
    if (req && v) cJSON_AddItemToObject(req, "value", v);
    else { cJSON_Delete(v); cJSON_Delete(req); req = NULL; }
    return ex_simple_request(x, "fill_state", req);
}

static int x_set_option(void *h, const char *key, const char *value) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    if (!key || !value)
        return ex_local_err(x, QC_PLUGIN_ERROR, "set_option", "bad arguments (key or value NULL)");
    uint32_t bit = !strcmp(key, "threads") ? QC_CAP_THREADS
                   : !strcmp(key, "dn_kernel") ? QC_CAP_DN_KERNEL
                   : !strcmp(key, "chunk_size") ? QC_CAP_CHUNK_SIZE : 0;
    if (!bit)
        return ex_local_err(x, QC_PLUGIN_UNSUPPORTED, "set_option", "unknown option '%.60s' "
                            "(threads, dn_kernel, chunk_size)", key);
    if (!(x->info.caps & bit))
        return ex_local_err(x, QC_PLUGIN_UNSUPPORTED, "set_option", "the adapter did not announce "
                            "the '%s' capability", key);
    if (x->dead) return ex_not_running(x, "set_option");
    x->state_npos = -1;
    cJSON *req = ex_op_object("set_option");
    if (req && (!cJSON_AddStringToObject(req, "key", key) ||
                !cJSON_AddStringToObject(req, "value", value))) {
        cJSON_Delete(req);
        req = NULL;
    }
    int rc = ex_simple_request(x, "set_option", req);
    if (rc) return rc;
    int i = 0;
    while (i < x->n_opts && strcmp(x->opts[i].key, key)) i++;
    char *nv = strdup(value);
    if (!nv || (i == x->n_opts && i == MAX_OPTS)) {
        free(nv);
        return ex_local_err(x, QC_PLUGIN_ERROR, "set_option", "cannot remember %s=%s for a restart",
                            key, value);
    }
    if (i == x->n_opts) {
        x->opts[i].key = strdup(key);
        if (!x->opts[i].key) {
            free(nv);
            return ex_local_err(x, QC_PLUGIN_ERROR, "set_option", "out of memory");
        }
        x->n_opts++;
    } else {
        free(x->opts[i].value);
    }
    x->opts[i].value = nv;
    return QC_PLUGIN_OK;
}

/* The state lifecycle requests: {"op": OP, KEY: v}, answered "ok" (no tensors). */
static int x_int_request(void *h, const char *op, const char *key, int32_t v, uint32_t bit,
                         const char *capname) {
    qc_exec *x = h;
    if (!x) return QC_PLUGIN_ERROR;
    if (!(x->info.caps & bit))
        return ex_local_err(x, QC_PLUGIN_UNSUPPORTED, op, "the adapter did not announce the '%s' "
                            "capability", capname);
    if (x->dead) return ex_not_running(x, op);
    x->state_npos = -1;
    cJSON *req = ex_op_object(op);
    if (req && !cJSON_AddNumberToObject(req, key, (double)v)) {
        cJSON_Delete(req);
        req = NULL;
    }
    return ex_simple_request(x, op, req);
}
static int x_snapshot(void *h, int32_t slot) {
    return x_int_request(h, "snapshot", "slot", slot, QC_CAP_SNAPSHOT, "snapshot");
}
static int x_restore(void *h, int32_t slot) {
    return x_int_request(h, "restore", "slot", slot, QC_CAP_SNAPSHOT, "snapshot");
}
static int x_select_sequence(void *h, int32_t seq) {
    return x_int_request(h, "select_sequence", "seq", seq, QC_CAP_SEQUENCES, "sequences");
}
static int x_trim(void *h, int32_t n_pos) {
    return x_int_request(h, "trim", "n_pos", n_pos, QC_CAP_TRIM, "trim");
}

static const qc_runtime_plugin exec_api = {
    .abi_version = QC_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(qc_runtime_plugin),
    .open = NULL,
    .reset = x_reset,
    .forward = x_forward,
    .close = x_close,
    .last_error = x_last_error,
    .get_hidden = x_get_hidden,
    .get_state = x_get_state,
    .fill_state = x_fill_state,
    .set_option = x_set_option,
    .snapshot = x_snapshot,
    .restore = x_restore,
    .select_sequence = x_select_sequence,
    .trim = x_trim,
    .forward_topk = x_forward_topk,
    .get_router = x_get_router,
    .get_mlp_in = x_get_mlp_in,
};

/* ===================================================================================== */
/* public entry points                                                                   */
/* ===================================================================================== */

const qc_runtime_plugin *qc_exec_api(void) { return &exec_api; }

void qc_exec_want_hidden(void *handle, int on) {
    qc_exec *x = handle;
    if (x) x->want_hidden = on != 0;
}

void qc_exec_want_router(void *handle, int on) {
    qc_exec *x = handle;
    if (x) x->want_router = on != 0;
}

void qc_exec_set_dims(void *handle, const qc_exec_dims *d) {
    qc_exec *x = handle;
    if (!x || !d) return;
    x->have_dims = 0;
    x->state_npos = -1;
    const char *bad = NULL;
    if (d->n_layers < 1 || d->n_layers > QC_EXEC_MAX_LAYERS) bad = "n_layers";
    else if (d->vocab < 1) bad = "vocab";
    else if (d->hidden < 1) bad = "hidden";
    else if (d->n_kv_heads < 0 || d->head_dim < 0 || d->conv_dim < 0 || d->conv_kernel < 0 ||
             d->n_v_heads < 0 || d->k_dim < 0 || d->v_dim < 0) bad = "a state dim";
    else if (d->n_experts_per_tok < 0) bad = "n_experts_per_tok";
    if (bad) {
        snprintf(x->dims_error, sizeof x->dims_error, "qc_exec_set_dims was given an invalid "
                 "%s", bad);
        return;
    }
    tspec *s = realloc(x->specs, sizeof(tspec) * 2 * (size_t)d->n_layers);
    if (!s) {
        snprintf(x->dims_error, sizeof x->dims_error, "out of memory in qc_exec_set_dims");
        return;
    }
    x->specs = s;
    memset(s, 0, sizeof(tspec) * 2 * (size_t)d->n_layers);
    for (int l = 0; l < d->n_layers; l++) {
        int full = d->layer_full[l] != 0;
        snprintf(s[2 * l].name, sizeof s[0].name, "layer_%02d/%s", l,
                 state_kind_name[full ? 0 : 2]);
        snprintf(s[2 * l + 1].name, sizeof s[0].name, "layer_%02d/%s", l,
                 state_kind_name[full ? 1 : 3]);
    }
    x->dims = *d;
    x->dims_error[0] = '\0';
    x->have_dims = 1;
}

qc_status qc_exec_open(const char *cmd, double timeout_s, const char *model_dir,
                       const char *options, qc_plugin_info *info, void **handle, qc_err *err) {
    if (handle) *handle = NULL;
    if (!cmd || !cmd[0] || !model_dir || !info || !handle) {
        snprintf(g_open_err, sizeof g_open_err, "exec adapter: %s",
                 !cmd || !cmd[0] ? "empty command" : "bad arguments to qc_exec_open");
        return qc_errf(err, QC_ERR_ARG, "%s", g_open_err);
    }
    qc_exec *x = calloc(1, sizeof *x);
    if (x) {
        x->cmd = strdup(cmd);
        x->model_dir = strdup(model_dir);
        x->options = strdup(options ? options : "");
    }
    if (!x || !x->cmd || !x->model_dir || !x->options) {
        if (x) { free(x->cmd); free(x->model_dir); free(x->options); free(x); }
        snprintf(g_open_err, sizeof g_open_err, "exec adapter '%.200s': out of memory", cmd);
        return qc_errf(err, QC_ERR_OOM, "%s", g_open_err);
    }
    if (strlen(cmd) > 200) snprintf(x->cmdq, sizeof x->cmdq, "%.200s...", cmd);
    else snprintf(x->cmdq, sizeof x->cmdq, "%s", cmd);
    x->timeout_s = (timeout_s > 0 && isfinite(timeout_s)) ? timeout_s : QC_EXEC_DEFAULT_TIMEOUT_S;
    x->pid = -1;
    x->fd_in = x->fd_out = x->fd_err = -1;
    x->state_npos = -1;
    snprintf(x->err, sizeof x->err, "no error");
    if (ex_start_child(x, &x->info, "")) {
        /* the adapter did not start: a usage problem (exit 2); it started and answered open
         * with an error: the runtime under test cannot load the model (a FAIL of it) */
        qc_status st = x->open_refused ? QC_ERR_RUNTIME : QC_ERR_ARG;
        ex_format_msg(x, g_open_err, sizeof g_open_err); /* the stderr tail cut to fit qc_err */
        qc_errf(err, st, "%s", g_open_err);
        x->dead = 1;
        x_close(x);
        return st;
    }
    *info = x->info;
    *handle = x;
    return QC_OK;
}
