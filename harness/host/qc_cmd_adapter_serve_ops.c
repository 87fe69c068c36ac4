/* qc_cmd_adapter_serve_ops.c — the request handlers of `qwen-conform adapter-serve`: each
 * request (open, reset, forward, get_state, fill_state, set_option) checked field by field
 * and forwarded to the loaded plugin, its results answered as tensors; a plugin failure
 * becomes the request's error (its last_error). See qc_cmd_adapter_serve_internal.h.
 */
#include "qc_cmd_adapter_serve_internal.h"
#include "qc_remote.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "qc/qc_status.h"

/* ===================================================================================== */
/* request fields                                                                        */
/* ===================================================================================== */

/* A JSON number that is an integer in [lo, hi]. */
static int json_int(const cJSON *v, long long lo, long long hi, long long *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < (double)lo || d > (double)hi) return 0;
    *out = (long long)d;
    return 1;
}

/* An optional boolean field: absent -> dflt; present and not a boolean -> -1. */
static int json_bool(const cJSON *h, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h, key);
    if (!v || cJSON_IsNull(v)) return dflt;
    if (!cJSON_IsBool(v)) return -1;
    return cJSON_IsTrue(v) ? 1 : 0;
}

/* Element count of a product of dims, or 0 with *ovf = 1 on overflow. */
static size_t mul_count(size_t a, size_t b, int *ovf) {
    if (a && b > SIZE_MAX / 4 / a) {
        *ovf = 1;
        return 0;
    }
    return a * b;
}


/* ===================================================================================== */
/* ops                                                                                   */
/* ===================================================================================== */


/* A plugin call returned rc != OK: the plugin's last_error (after "what: " when what is not
 * NULL: the sub-call of a request that makes several), flagged unsupported when it said so. */
static int plugin_fail(as_server *s, as_fail *f, int rc, const char *what) {
    const char *le = s->api->last_error(s->h);
    if (!le || !le[0]) le = "(the plugin gave no error text)";
    if (what) as_failf(f, rc == QC_PLUGIN_UNSUPPORTED, "%s: %s", what, le);
    else as_failf(f, rc == QC_PLUGIN_UNSUPPORTED, "%s", le);
    f->from_plugin = 1;
    return -1;
}

void as_close_plugin(as_server *s) {
    if (s->opened || s->h) s->api->close(s->h);
    s->h = NULL;
    s->opened = 0;
}

int as_op_open(as_server *s, const cJSON *req, as_fail *f) {
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(req, "model_dir");
    if (!cJSON_IsString(md) || !md->valuestring[0])
        return as_failf(f, 0, "open: model_dir must be a non-empty string");
    const cJSON *ro = cJSON_GetObjectItemCaseSensitive(req, "options");
    const char *req_opts = "";
    if (ro && !cJSON_IsNull(ro)) {
        if (!cJSON_IsString(ro)) return as_failf(f, 0, "open: options must be a string");
        req_opts = ro->valuestring;
    }
    size_t n = strlen(s->spec_opts) + strlen(req_opts) + 2;
    char *opts = malloc(n);
    if (!opts) return as_failf(f, 0, "open: out of memory");
    snprintf(opts, n, "%s%s%s", s->spec_opts, s->spec_opts[0] && req_opts[0] ? "," : "",
             req_opts);

    as_close_plugin(s); /* a second open starts over */
    memset(&s->info, 0, sizeof s->info);
    void *h = NULL;
    int rc = s->api->open(md->valuestring, opts, &s->info, &h);
    free(opts);
    if (rc != QC_PLUGIN_OK) {
        s->h = h;
        plugin_fail(s, f, rc, NULL);
        if (h) s->api->close(h);
        s->h = NULL;
        return -1;
    }
    s->h = h;
    s->opened = 1;
    s->info.name[sizeof s->info.name - 1] = 0;

    /* the layer kinds and state dims get_state needs (the ABI does not carry them) */
    qc_err e;
    qc_err_clear(&e);
    s->cfg_ok = qc_config_load(md->valuestring, &s->cfg, &e) == QC_OK;
    if (!s->cfg_ok) {
        snprintf(s->cfg_err, sizeof s->cfg_err, "%s", e.msg);
        fprintf(stderr, "%s: open: cannot read the model's config.json (get_state will fail): "
                "%s\n", AS_PROG, e.msg);
    }

    const qc_runtime_plugin *a = s->api;
    unsigned caps = s->info.caps;
    if (!a->get_hidden) caps &= ~QC_CAP_HIDDEN;
    if (!a->get_state) caps &= ~QC_CAP_STATE_READ;
    if (!a->fill_state) caps &= ~QC_CAP_STATE_FILL;
    if (!a->set_option) caps &= ~(QC_CAP_THREADS | QC_CAP_DN_KERNEL | QC_CAP_CHUNK_SIZE);
    int lifecycle = a->struct_size >= QC_PLUGIN_LIFECYCLE_SIZE; /* the entries exist */
    if (!lifecycle || !a->snapshot || !a->restore) caps &= ~QC_CAP_SNAPSHOT;
    if (!lifecycle || !a->select_sequence) caps &= ~QC_CAP_SEQUENCES;
    if (!lifecycle || !a->trim) caps &= ~QC_CAP_TRIM;
    if (a->struct_size < QC_PLUGIN_TOPK_SIZE || !a->forward_topk) caps &= ~QC_CAP_TOPK_ONLY;
    if (a->struct_size < QC_PLUGIN_MLP_IN_SIZE || !a->get_mlp_in || !(caps & QC_CAP_HIDDEN))
        caps &= ~QC_CAP_MLP_IN; /* sent with the hidden states */
    /* the router's [L, n, k] needs k from config.json */
    if (a->struct_size < QC_PLUGIN_ROUTER_SIZE || !a->get_router || !s->cfg_ok ||
        !qc_cfg_is_moe(&s->cfg) || s->cfg.n_layers != s->info.n_layers)
        caps &= ~QC_CAP_ROUTER;
    s->caps = caps;

    cJSON *info = cJSON_CreateObject();
    cJSON *capl = cJSON_CreateArray();
    if (!info || !capl) {
        cJSON_Delete(info);
        cJSON_Delete(capl);
        return as_failf(f, 0, "open: out of memory");
    }
    cJSON_AddNumberToObject(info, "vocab_size", s->info.vocab_size);
    cJSON_AddNumberToObject(info, "hidden_size", s->info.hidden_size);
    cJSON_AddNumberToObject(info, "n_layers", s->info.n_layers);
    cJSON_AddNumberToObject(info, "max_tokens_per_call", s->info.max_tokens_per_call);
    cJSON_AddNumberToObject(info, "max_context_len", s->info.max_context_len);
    for (unsigned bit = 1; bit < QC_REMOTE_CAP_DYNAMIC; bit <<= 1) /* in bit order */
        if ((caps & bit) && strcmp(qc_cap_name(bit), "?"))
            cJSON_AddItemToArray(capl, cJSON_CreateString(qc_cap_name(bit)));
    cJSON_AddItemToObject(info, "capabilities", capl);
    char name[sizeof s->info.name];
    snprintf(name, sizeof name, "%s", s->info.name);
    as_utf8_sanitize(name);
    cJSON_AddStringToObject(info, "name", name);
    return as_send_ok(s, info, NULL, 0);
}

int as_op_reset(as_server *s, const cJSON *req, as_fail *f) {
    (void)req;
    int rc = s->api->reset(s->h);
    if (rc != QC_PLUGIN_OK) return plugin_fail(s, f, rc, NULL);
    return as_send_ok(s, NULL, NULL, 0);
}

/* forward with "topk": K (a topk_only plugin): forward_topk's rows as topk_ids (int32: the
 * same 4 bytes per element on the wire) and topk_logprobs, [n, K] each. Frees ids. */
static int forward_topk_op(as_server *s, const cJSON *kj, int32_t *ids, int n, long long sp,
                           as_fail *f) {
    const int V = s->info.vocab_size;
    long long k;
    if (!(s->caps & QC_CAP_TOPK_ONLY)) {
        free(ids);
        return as_failf(f, 0, "forward: topk asked for, but the plugin has no topk_only "
                        "capability");
    }
    if (!json_int(kj, 1, V < QC_PLUGIN_MAX_TOPK ? V : QC_PLUGIN_MAX_TOPK, &k)) {
        free(ids);
        return as_failf(f, 0, "forward: topk must be an integer in [1, %d]",
                        V < QC_PLUGIN_MAX_TOPK ? V : QC_PLUGIN_MAX_TOPK);
    }
    size_t ne = (size_t)n * (size_t)k;
    int32_t *ti = malloc(ne * sizeof *ti);
    float *tl = malloc(ne * sizeof *tl);
    if (!ti || !tl) {
        free(ids), free(ti), free(tl);
        return as_failf(f, 0, "forward: out of memory for the top-k of %d tokens", n);
    }
    int rc = s->api->forward_topk(s->h, ids, (int32_t)n, (int32_t)sp, (int32_t)k, ti, tl);
    free(ids);
    if (rc != QC_PLUGIN_OK) {
        free(ti), free(tl);
        return plugin_fail(s, f, rc, NULL);
    }
    as_tensor out[2];
    memset(out, 0, sizeof out);
    snprintf(out[0].name, sizeof out[0].name, "topk_ids");
    snprintf(out[1].name, sizeof out[1].name, "topk_logprobs");
    out[0].data = (float *)(void *)ti;
    out[1].data = tl;
    for (int i = 0; i < 2; i++)
        out[i].rank = 2, out[i].shape[0] = n, out[i].shape[1] = k, out[i].count = ne;
    int w = as_send_ok(s, NULL, out, 2);
    free(ti), free(tl);
    return w;
}

/* After a forward of n tokens asked for "hidden": true by a plugin with QC_CAP_MLP_IN: every
 * layer's get_mlp_in into dst [L, n, H] and the tensor "mlp_in" at *out (dst stays the
 * caller's). */
static int mlp_in_out(as_server *s, int n, float *dst, as_tensor *out, as_fail *f) {
    const int L = s->info.n_layers, H = s->info.hidden_size;
    for (int l = 0; l < L; l++) {
        int rc = s->api->get_mlp_in(s->h, l, dst + (size_t)l * n * H);
        if (rc != QC_PLUGIN_OK) {
            char what[48];
            snprintf(what, sizeof what, "get_mlp_in(%d)", l);
            return plugin_fail(s, f, rc, what);
        }
    }
    snprintf(out->name, sizeof out->name, "mlp_in");
    out->rank = 3;
    out->shape[0] = L;
    out->shape[1] = n;
    out->shape[2] = H;
    out->data = dst;
    out->count = (size_t)L * n * H;
    return 0;
}

/* After a forward of n tokens asked for "router": true: every layer's get_router into two
 * [L, n, k] tensors, router_ids (int32: 4 bytes per element on the wire, like topk_ids) and
 * router_weights, at out[0..2); the caller frees out[0].data (one block for both). */
static int router_out(as_server *s, int n, as_tensor *out, as_fail *f) {
    const int L = s->cfg.n_layers, K = s->cfg.n_experts_per_tok;
    size_t blk = (size_t)n * (size_t)K, all = (size_t)L * blk;
    float *buf = malloc(2 * all * sizeof(float) + 4);
    if (!buf) return as_failf(f, 0, "forward: out of memory for the router choices");
    int32_t *ids = (int32_t *)(void *)buf;
    float *w = buf + all;
    for (int l = 0; l < L; l++) {
        int rc = s->api->get_router(s->h, l, ids + (size_t)l * blk, w + (size_t)l * blk);
        if (rc != QC_PLUGIN_OK) {
            free(buf);
            char what[48];
            snprintf(what, sizeof what, "get_router(%d)", l);
            return plugin_fail(s, f, rc, what);
        }
    }
    for (int i = 0; i < 2; i++) {
        snprintf(out[i].name, sizeof out[i].name, i ? "router_weights" : "router_ids");
        out[i].rank = 3;
        out[i].shape[0] = L;
        out[i].shape[1] = n;
        out[i].shape[2] = K;
        out[i].data = i ? w : buf;
        out[i].count = all;
    }
    return 0;
}

int as_op_forward(as_server *s, const cJSON *req, as_fail *f) {
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(req, "tokens");
    if (!cJSON_IsArray(toks)) return as_failf(f, 0, "forward: tokens must be an array of integers");
    int n = cJSON_GetArraySize(toks);
    if (n < 1) return as_failf(f, 0, "forward: tokens is empty (at least one token per call)");
    long long sp;
    if (!json_int(cJSON_GetObjectItemCaseSensitive(req, "start_pos"), 0, INT32_MAX, &sp))
        return as_failf(f, 0, "forward: start_pos must be an integer in [0, %d]", INT32_MAX);
    if (sp > (long long)INT32_MAX - n)
        return as_failf(f, 0, "forward: start_pos %lld + %d tokens overflows int32", sp, n);
    int all_logits = json_bool(req, "all_logits", 1);
    int want_hidden = json_bool(req, "hidden", 0);
    int want_router = json_bool(req, "router", 0);
    if (want_router < 0) return as_failf(f, 0, "forward: router must be true or false");
    if (want_router && !(s->caps & QC_CAP_ROUTER))
        return as_failf(f, 1, "forward: router choices asked for, but the plugin has no router "
                        "capability");
    if (all_logits < 0) return as_failf(f, 0, "forward: all_logits must be true or false");
    if (want_hidden < 0) return as_failf(f, 0, "forward: hidden must be true or false");
    if (want_hidden && !(s->caps & QC_CAP_HIDDEN))
        return as_failf(f, 1, "forward: hidden states asked for, but the plugin has no hidden "
                        "capability");
    const int V = s->info.vocab_size, H = s->info.hidden_size, L = s->info.n_layers;
    if (V <= 0) return as_failf(f, 0, "forward: the plugin reported vocab_size %d", V);
    if (want_hidden && (H <= 0 || L < 0))
        return as_failf(f, 0, "forward: the plugin reported hidden_size %d, n_layers %d", H, L);

    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return as_failf(f, 0, "forward: out of memory for %d tokens", n);
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, toks) {
        long long v;
        if (!json_int(t, INT32_MIN, INT32_MAX, &v)) {
            free(ids);
            return as_failf(f, 0, "forward: tokens[%d] is not an integer that fits int32", i);
        }
        ids[i++] = (int32_t)v;
    }
    const cJSON *kj = cJSON_GetObjectItemCaseSensitive(req, "topk");
    if (kj && !cJSON_IsNull(kj)) return forward_topk_op(s, kj, ids, n, sp, f);

    int ovf = 0;
    size_t rows = all_logits ? (size_t)n : 1;
    size_t nlog = mul_count(rows, (size_t)V, &ovf);
    const int want_mlp_in = want_hidden && (s->caps & QC_CAP_MLP_IN); /* after the hidden */
    size_t nhid = want_hidden ? mul_count(mul_count((size_t)L + 1, (size_t)n, &ovf), (size_t)H,
                                          &ovf) : 0;
    size_t nmlp = want_mlp_in ? mul_count(mul_count((size_t)L, (size_t)n, &ovf), (size_t)H, &ovf)
                              : 0;
    if (ovf) {
        free(ids);
        return as_failf(f, 0, "forward: %d tokens: the output does not fit in memory", n);
    }
    float *logits = malloc(nlog * sizeof(float));
    float *hidden = want_hidden ? malloc((nhid + nmlp) * sizeof(float) + 4) : NULL;
    if (!logits || (want_hidden && !hidden)) {
        free(ids), free(logits), free(hidden);
        return as_failf(f, 0, "forward: out of memory for the outputs of %d tokens", n);
    }
    int rc = s->api->forward(s->h, ids, (int32_t)n, (int32_t)sp, all_logits, logits);
    free(ids);
    if (rc != QC_PLUGIN_OK) {
        free(logits), free(hidden);
        return plugin_fail(s, f, rc, NULL);
    }
    for (int l = 0; want_hidden && l <= L; l++) {
        rc = s->api->get_hidden(s->h, l, hidden + (size_t)l * n * H);
        if (rc != QC_PLUGIN_OK) {
            free(logits), free(hidden);
            char what[48];
            snprintf(what, sizeof what, "get_hidden(%d)", l);
            return plugin_fail(s, f, rc, what);
        }
    }
    as_tensor out[5];
    memset(out, 0, sizeof out);
    int nt = want_hidden ? 2 : 1;
    if (want_mlp_in && (rc = mlp_in_out(s, n, hidden + nhid, out + nt++, f)) != 0) {
        free(logits), free(hidden);
        return rc;
    }
    if (want_router && (rc = router_out(s, n, out + nt, f)) != 0) {
        free(logits), free(hidden);
        return rc;
    }
    snprintf(out[0].name, sizeof out[0].name, "logits");
    out[0].rank = 2;
    out[0].shape[0] = (int64_t)rows;
    out[0].shape[1] = V;
    out[0].data = logits;
    out[0].count = nlog;
    if (want_hidden) {
        snprintf(out[1].name, sizeof out[1].name, "hidden");
        out[1].rank = 3;
        out[1].shape[0] = L + 1;
        out[1].shape[1] = n;
        out[1].shape[2] = H;
        out[1].data = hidden;
        out[1].count = nhid;
    }
    int w = as_send_ok(s, NULL, out, want_router ? nt + 2 : nt);
    free(logits);
    free(hidden);
    if (want_router) free(out[nt].data);
    return w;
}

int as_op_get_state(as_server *s, const cJSON *req, as_fail *f) {
    if (!(s->caps & QC_CAP_STATE_READ))
        return as_failf(f, 1, "get_state: the plugin has no state_read capability");
    long long np;
    if (!json_int(cJSON_GetObjectItemCaseSensitive(req, "n_pos"), 0, INT32_MAX, &np))
        return as_failf(f, 0, "get_state: n_pos must be an integer in [0, %d]", INT32_MAX);
    if (!s->cfg_ok)
        return as_failf(f, 0, "get_state: the model's config.json could not be read at open, so "
                        "the state dims are unknown: %s", s->cfg_err);
    const qc_config *c = &s->cfg;
    int ovf = 0;
    const size_t kv = mul_count(mul_count((size_t)c->n_kv_heads, (size_t)np, &ovf),
                                (size_t)c->head_dim, &ovf);
    const size_t conv = mul_count((size_t)qc_cfg_conv_dim(c), (size_t)c->conv_kernel, &ovf);
    const size_t rec = mul_count(mul_count((size_t)c->lin_n_v_heads, (size_t)c->lin_k_dim, &ovf),
                                 (size_t)c->lin_v_dim, &ovf);
    static as_tensor out[AS_MAX_TENSORS];
    int nt = 0;
    size_t total = 0;
    for (int l = 0; l < c->n_layers && !ovf; l++) {
        int full = c->layer_types[l] == QC_LAYER_FULL;
        for (int j = 0; j < 2; j++) {
            as_tensor *t = &out[nt++];
            memset(t, 0, sizeof *t);
            if (full) {
                snprintf(t->name, sizeof t->name, "layer_%02d/%s", l, j ? "v_cache" : "k_cache");
                t->rank = 3;
                t->shape[0] = c->n_kv_heads;
                t->shape[1] = np;
                t->shape[2] = c->head_dim;
                t->count = kv;
            } else if (j == 0) {
                snprintf(t->name, sizeof t->name, "layer_%02d/conv_state", l);
                t->rank = 2;
                t->shape[0] = qc_cfg_conv_dim(c);
                t->shape[1] = c->conv_kernel;
                t->count = conv;
            } else {
                snprintf(t->name, sizeof t->name, "layer_%02d/recurrent_state", l);
                t->rank = 3;
                t->shape[0] = c->lin_n_v_heads;
                t->shape[1] = c->lin_k_dim;
                t->shape[2] = c->lin_v_dim;
                t->count = rec;
            }
            if (t->count > SIZE_MAX / 4 - total) ovf = 1;
            total += t->count;
        }
    }
    if (ovf) return as_failf(f, 0, "get_state: n_pos %lld: the state does not fit in memory", np);
    float *buf = malloc(total * sizeof(float) + 4);
    if (!buf)
        return as_failf(f, 0, "get_state: out of memory for %zu state elements (n_pos %lld)", total,
                        np);
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        out[i].data = buf + off;
        off += out[i].count;
        int l = i / 2, full = c->layer_types[l] == QC_LAYER_FULL;
        int kind = full ? (i % 2 ? QC_STATE_V_CACHE : QC_STATE_K_CACHE)
                        : (i % 2 ? QC_STATE_RECURRENT : QC_STATE_CONV);
        int rc = s->api->get_state(s->h, l, kind, (int32_t)np, out[i].data);
        if (rc != QC_PLUGIN_OK) {
            free(buf);
            char what[96];
            snprintf(what, sizeof what, "get_state(layer %d, %s, n_pos %lld)", l,
                     strchr(out[i].name, '/') + 1, np);
            return plugin_fail(s, f, rc, what);
        }
    }
    int w = as_send_ok(s, NULL, out, nt);
    free(buf);
    return w;
}

int as_op_fill_state(as_server *s, const cJSON *req, as_fail *f) {
    if (!(s->caps & QC_CAP_STATE_FILL))
        return as_failf(f, 1, "fill_state: the plugin has no state_fill capability");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, "value");
    double x;
    if (cJSON_IsNumber(v)) {
        x = v->valuedouble;
    } else if (cJSON_IsString(v)) {
        const char *t = v->valuestring;
        if (!strcasecmp(t, "nan")) x = NAN;
        else if (!strcasecmp(t, "inf") || !strcasecmp(t, "+inf") || !strcasecmp(t, "infinity"))
            x = INFINITY;
        else if (!strcasecmp(t, "-inf") || !strcasecmp(t, "-infinity")) x = -INFINITY;
        else
            return as_failf(f, 0, "fill_state: value must be a number or \"nan\", \"inf\", "
                            "\"-inf\"");
    } else {
        return as_failf(f, 0, "fill_state: value must be a number or \"nan\", \"inf\", \"-inf\"");
    }
    int rc = s->api->fill_state(s->h, (float)x);
    if (rc != QC_PLUGIN_OK) return plugin_fail(s, f, rc, NULL);
    return as_send_ok(s, NULL, NULL, 0);
}

int as_op_lifecycle(as_server *s, const char *op, const cJSON *req, as_fail *f) {
    static const struct {
        const char *op, *key;
        unsigned bit;
    } ops[] = {{"snapshot", "slot", QC_CAP_SNAPSHOT}, {"restore", "slot", QC_CAP_SNAPSHOT},
               {"select_sequence", "seq", QC_CAP_SEQUENCES}, {"trim", "n_pos", QC_CAP_TRIM}};
    size_t i = 0;
    while (i < sizeof ops / sizeof ops[0] && strcmp(ops[i].op, op)) i++;
    if (i == sizeof ops / sizeof ops[0]) return as_failf(f, 0, "unknown op '%.100s'", op);
    if (!(s->caps & ops[i].bit))
        return as_failf(f, 1, "%s: the plugin has no %s entry", op, op);
    long long v;
    if (!json_int(cJSON_GetObjectItemCaseSensitive(req, ops[i].key), 0, INT32_MAX, &v))
        return as_failf(f, 0, "%s: %s must be an integer in [0, 2^31 - 1]", op, ops[i].key);
    const qc_runtime_plugin *a = s->api;
    int (*fn)(void *, int32_t) = i == 0 ? a->snapshot : i == 1 ? a->restore
                                 : i == 2 ? a->select_sequence : a->trim;
    int rc = fn(s->h, (int32_t)v);
    if (rc != QC_PLUGIN_OK) return plugin_fail(s, f, rc, NULL);
    return as_send_ok(s, NULL, NULL, 0);
}

int as_op_set_option(as_server *s, const cJSON *req, as_fail *f) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(req, "key");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, "value");
    if (!cJSON_IsString(k) || !k->valuestring[0])
        return as_failf(f, 0, "set_option: key must be a non-empty string");
    char num[64];
    const char *val;
    long long iv;
    if (cJSON_IsString(v)) {
        val = v->valuestring;
    } else if (json_int(v, LLONG_MIN / 2, LLONG_MAX / 2, &iv)) {
        snprintf(num, sizeof num, "%lld", iv);
        val = num;
    } else if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
        snprintf(num, sizeof num, "%.17g", v->valuedouble);
        val = num;
    } else {
        return as_failf(f, 0, "set_option: value must be a string");
    }
    if (!s->api->set_option)
        return as_failf(f, 1, "set_option(%s): the plugin has no set_option entry", k->valuestring);
    int rc = s->api->set_option(s->h, k->valuestring, val);
    if (rc != QC_PLUGIN_OK) return plugin_fail(s, f, rc, NULL);
    return as_send_ok(s, NULL, NULL, 0);
}
