/* qc_remote.c — a runtime behind the plugin ABI vtable as a qc_backend (see qc_remote.h).
 *
 * forward: pushes changed settings (dn_kernel, chunk_size) through set_option, calls the
 * runtime, then feeds the trace hook from get_hidden ("hidden"), from get_mlp_in ("mlp_in" /
 * "moe_in", with the hidden states, when announced) and, for a MoE model whose
 * runtime announces 'router', from get_router ("router_topk": per position the k ids as floats,
 * then the k weights, exactly what the built-in backends trace; the values go on unchanged, the
 * router_topk check judges them). sync_state: copies get_state's canonical
 * [nkv, n_pos, hd] caches into the mirror's [nkv, capacity, hd] buffers. reset / fill_state go
 * to the runtime; the mirror is reset / filled by qc_backend_reset / qc_backend_fill_state.
 */

#include "qc_remote.h"
#include "qc_kv.h"
#include "qc_topk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================================== */
/* capability names                                                                      */
/* ===================================================================================== */

static const struct {
    unsigned bit;
    const char *name;
} cap_names[] = {
    {QC_CAP_HIDDEN, "hidden"},         {QC_CAP_STATE_READ, "state_read"},
    {QC_CAP_STATE_FILL, "state_fill"}, {QC_CAP_THREADS, "threads"},
    {QC_CAP_DN_KERNEL, "dn_kernel"},   {QC_CAP_CHUNK_SIZE, "chunk_size"},
    {QC_CAP_SNAPSHOT, "snapshot"},     {QC_CAP_SEQUENCES, "sequences"},
    {QC_CAP_TRIM, "trim"},             {QC_REMOTE_CAP_DYNAMIC, "dynamic"},
    {QC_CAP_TOPK_ONLY, "topk_only"},   {QC_CAP_ROUTER, "router"},
    {QC_CAP_MLP_IN, "mlp_in"},
};
#define N_CAP_NAMES (sizeof cap_names / sizeof cap_names[0])

const char *qc_cap_name(unsigned bit) {
    for (size_t i = 0; i < N_CAP_NAMES; i++)
        if (cap_names[i].bit == bit) return cap_names[i].name;
    return "?";
}

unsigned qc_cap_bit(const char *name) {
    for (size_t i = 0; i < N_CAP_NAMES; i++)
        if (!strcmp(cap_names[i].name, name) && cap_names[i].bit != QC_REMOTE_CAP_DYNAMIC)
            return cap_names[i].bit;
    return 0;
}

void qc_cap_list(unsigned bits, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < N_CAP_NAMES && o < n; i++)
        if (bits & cap_names[i].bit)
            o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? ", " : "", cap_names[i].name);
    if (!buf[0]) snprintf(buf, n, "none");
}

qc_status qc_cap_parse(const char *list, unsigned *bits, qc_err *err) {
    *bits = 0;
    qc_kv kv; /* name[,name...] (qc_kv.h) */
    qc_status s = qc_kv_init(&kv, list, "--require", err);
    if (s) return s;
    for (char *t = qc_kv_item(&kv); t; t = qc_kv_item(&kv)) {
        size_t i = 0;
        while (i < N_CAP_NAMES && strcmp(cap_names[i].name, t)) i++;
        if (i < N_CAP_NAMES && cap_names[i].bit == QC_CAP_TOPK_ONLY)
            return qc_errf(err, QC_ERR_ARG, "--require: 'topk_only' is not a capability to "
                           "require (a top-k-only runtime offers less than full logits)");
        if (i == N_CAP_NAMES)
            return qc_errf(err, QC_ERR_ARG, "--require: unknown capability '%s' (hidden, "
                           "state_read, state_fill, threads, dn_kernel, chunk_size, snapshot, "
                           "sequences, trim, router, mlp_in, dynamic)", t);
        *bits |= cap_names[i].bit;
    }
    return QC_OK;
}

/* ===================================================================================== */
/* the backend                                                                           */
/* ===================================================================================== */

typedef struct {
    const qc_runtime_plugin *api;
    void *h;                  /* the runtime's handle (owned) */
    qc_plugin_info info;
    qc_remote_hooks hooks;
    char name[512];           /* "plugin:libx.so", "exec:..." */
    char desc[700];           /* name + the runtime's own name */
    float *logits_scratch;    /* [max_tokens, V] when the caller wants no logits */
    float *hidden_buf;        /* [max_tokens, H] one hidden index at a time */
    float *state_buf;         /* one state buffer: [max(nkv * n_pos * hd, C*K, nv*dk*dv)],
                                 grown to the largest n_pos asked for */
    size_t state_buf_n;       /* floats in state_buf */
    int32_t *router_ids;      /* [max_tokens, k] one layer's router ids (QC_CAP_ROUTER) */
    float *router_w;          /* [max_tokens, k] their weights */
    float *router_row;        /* [max_tokens, 2k] the "router_topk" trace rows */
    int sent_dn_kernel;       /* last dn_kernel pushed (-1 none) */
    int sent_chunk_size;      /* last chunk_size pushed (-1 none) */
    qc_remote_kopts kopts;    /* who decides dn_kernel / chunk_size (qc_remote.h) */
} remote;

static qc_status rt_fail(remote *R, qc_err *err, const char *what) {
    const char *le = R->api->last_error ? R->api->last_error(R->h) : NULL;
    return qc_errf(err, QC_ERR_RUNTIME, "%s: %s failed: %s", R->name, what,
                   le && le[0] ? le : "(no error text)");
}

static qc_status rt_option(remote *R, const char *key, const char *value, qc_err *err) {
    if (!R->api->set_option) return qc_errf(err, QC_ERR_RUNTIME, "%s: no set_option", R->name);
    if (R->api->set_option(R->h, key, value) != QC_PLUGIN_OK) {
        char what[160];
        snprintf(what, sizeof what, "set_option(%s=%s)", key, value);
        return rt_fail(R, err, what);
    }
    return QC_OK;
}

/* Push the settings the check engine changes between calls: in PUSH and ASK mode the ones that
 * differ from the last values sent; in OWN mode only a key a kernel check has already sent, back
 * to the host's value (chunk_size 64 after a chunk_sweep), and none before (the runtime's own
 * defaults). */
static qc_status rt_sync_opts(qc_backend *be, const qc_call *k, remote *R, qc_err *err) {
    qc_status s = QC_OK;
    const int own = R->kopts == QC_REMOTE_KOPTS_OWN;
    if ((be->caps & QC_BE_CAP_DN_KERNEL) && (int)k->dn_kernel != R->sent_dn_kernel &&
        !(own && R->sent_dn_kernel < 0)) {
        s = rt_option(R, "dn_kernel", k->dn_kernel == QC_DN_RECURRENT ? "recurrent" : "chunked",
                      err);
        if (!s) R->sent_dn_kernel = (int)k->dn_kernel;
    }
    if (!s && (be->caps & QC_BE_CAP_CHUNK_SIZE) && k->chunk_size != R->sent_chunk_size &&
        !(own && R->sent_chunk_size < 0)) {
        char v[32];
        snprintf(v, sizeof v, "%d", k->chunk_size);
        s = rt_option(R, "chunk_size", v, err);
        if (!s) R->sent_chunk_size = k->chunk_size;
    }
    return s;
}

/* After a forward of n tokens: every layer's router choices as "router_topk" trace rows
 * [n, 2k] (ids as floats, then weights), as the built-in backends trace them. The values are
 * passed on as the runtime gave them (router_topk judges them); entries it leaves unwritten are
 * -1 / NaN, never stale. */
static qc_status rt_router_trace(qc_backend *be, const qc_call *k, remote *R, int n, int start_pos,
                                 qc_err *err) {
    const qc_config *cfg = &be->model->cfg;
    const int K = cfg->n_experts_per_tok;
    for (int l = 0; l < cfg->n_layers; l++) {
        for (size_t i = 0; i < (size_t)n * K; i++) R->router_ids[i] = -1, R->router_w[i] = NAN;
        if (R->api->get_router(R->h, l, R->router_ids, R->router_w) != QC_PLUGIN_OK) {
            char what[64];
            snprintf(what, sizeof what, "get_router(layer %d)", l);
            return rt_fail(R, err, what);
        }
        for (int t = 0; t < n; t++)
            for (int j = 0; j < K; j++) {
                R->router_row[(size_t)t * 2 * K + j] = (float)R->router_ids[(size_t)t * K + j];
                R->router_row[(size_t)t * 2 * K + K + j] = R->router_w[(size_t)t * K + j];
            }
        k->trace(k->trace_user, l, "router_topk", start_pos, n, 2 * K, R->router_row);
    }
    return QC_OK;
}

static qc_status rm_forward(qc_backend *be, const qc_call *k, const int32_t *tokens, int n,
                            int start_pos, qc_state *st, float *logits, int all_logits,
                            qc_err *err) {
    remote *R = be->impl;
    const qc_config *cfg = &be->model->cfg;
    (void)st;
    /* n in [1, max_tokens] and every token in [0, vocab_size): checked by qc_backend_forward,
     * the one entry point (the fault wrappers pass its checked call on unchanged) */
    qc_status s = rt_sync_opts(be, k, R, err);
    if (s) return s;
    int want_hidden = k->trace && (be->caps & QC_BE_CAP_HIDDEN);
    int want_router = k->trace && (be->caps & QC_BE_CAP_ROUTER);
    if (R->hooks.want_hidden) R->hooks.want_hidden(R->h, want_hidden);
    if (R->hooks.want_router) R->hooks.want_router(R->h, want_router);
    float *dst = logits ? logits : R->logits_scratch;
    int all = logits ? all_logits : 0;
    if (R->api->forward(R->h, tokens, n, start_pos, all, dst) != QC_PLUGIN_OK) {
        char what[96];
        snprintf(what, sizeof what, "forward(n=%d, start_pos=%d)", n, start_pos);
        return rt_fail(R, err, what);
    }
    if (want_router && (s = rt_router_trace(be, k, R, n, start_pos, err))) return s;
    if (want_hidden) {
        for (int i = 0; i <= cfg->n_layers; i++) {
            if (R->api->get_hidden(R->h, i, R->hidden_buf) != QC_PLUGIN_OK) {
                char what[64];
                snprintf(what, sizeof what, "get_hidden(%d)", i);
                return rt_fail(R, err, what);
            }
            k->trace(k->trace_user, i, "hidden", start_pos, n, cfg->hidden_size, R->hidden_buf);
        }
    }
    /* the mixer outputs: "moe_in" / "mlp_in" rows, as the built-in backends trace them */
    for (int l = 0; want_hidden && (be->caps & QC_BE_CAP_MLP_IN) && l < cfg->n_layers; l++) {
        if (R->api->get_mlp_in(R->h, l, R->hidden_buf) != QC_PLUGIN_OK) {
            char what[64];
            snprintf(what, sizeof what, "get_mlp_in(%d)", l);
            return rt_fail(R, err, what);
        }
        k->trace(k->trace_user, l, qc_cfg_is_moe(cfg) ? "moe_in" : "mlp_in", start_pos, n,
                 cfg->hidden_size, R->hidden_buf);
    }
    return QC_OK;
}

/* A top-k-only runtime's forward: its answer validated (qc_runtime_plugin.h forward_topk). */
static qc_status rm_forward_topk(qc_backend *be, const int32_t *tokens, int n, int start_pos,
                                 int k, int32_t *ids, float *lps, qc_err *err) {
    remote *R = be->impl;
    const int V = be->model->cfg.vocab_size;
    if (k < 1 || k > V || k > QC_PLUGIN_MAX_TOPK)
        return qc_errf(err, QC_ERR_ARG, "%s: forward_topk: k = %d outside 1..%d", R->name, k,
                       V < QC_PLUGIN_MAX_TOPK ? V : QC_PLUGIN_MAX_TOPK);
    const qc_call defaults = qc_backend_call_defaults(&be->opts); /* top-k calls carry none */
    qc_status s = rt_sync_opts(be, &defaults, R, err);
    if (s) return s;
    if (R->hooks.want_hidden) R->hooks.want_hidden(R->h, 0);
    /* sentinels: an entry the runtime leaves unwritten is out of range / NaN, never stale */
    for (size_t i = 0; i < (size_t)n * (size_t)k; i++) ids[i] = -1, lps[i] = NAN;
    char what[112];
    snprintf(what, sizeof what, "forward_topk(n=%d, start_pos=%d, k=%d)", n, start_pos, k);
    if (R->api->forward_topk(R->h, tokens, n, start_pos, k, ids, lps) != QC_PLUGIN_OK)
        return rt_fail(R, err, what);
    char why[300];
    if (qc_topk_check_answer(ids, lps, n, k, V, 1e-3, start_pos, why, sizeof why))
        return qc_errf(err, QC_ERR_RUNTIME, "%s: %s answered a malformed top-k: %s", R->name,
                       what, why);
    return QC_OK;
}

static qc_status rm_reset(qc_backend *be, qc_err *err) {
    remote *R = be->impl;
    if (R->api->reset(R->h) != QC_PLUGIN_OK) return rt_fail(R, err, "reset");
    /* PUSH: everything is sent again after a reset (as before). OWN / ASK: the values sent stay
     * in force across a reset (a restarted exec child gets the accepted set_option values
     * replayed), so an ASK run sends only what changes */
    if (R->kopts == QC_REMOTE_KOPTS_PUSH) R->sent_dn_kernel = R->sent_chunk_size = -1;
    return QC_OK;
}

int qc_remote_kernel_opts(qc_backend *be, qc_remote_kopts mode) {
    if (!be || be->forward != rm_forward || !be->impl) return 0;
    ((remote *)be->impl)->kopts = mode;
    return 1;
}

static qc_status rm_fill(qc_backend *be, float v, qc_err *err) {
    remote *R = be->impl;
    if (!R->api->fill_state) return qc_errf(err, QC_ERR_UNSUPPORTED, "%s: no fill_state", R->name);
    if (R->api->fill_state(R->h, v) != QC_PLUGIN_OK) return rt_fail(R, err, "fill_state");
    return QC_OK;
}

/* One buffer of layer l into the mirror. */
static qc_status sync_one(remote *R, const qc_config *cfg, qc_state *st, int l, int kind,
                          int n_pos, qc_err *err) {
    float *dst;
    size_t n;
    if (kind == QC_STATE_K_CACHE || kind == QC_STATE_V_CACHE) {
        dst = kind == QC_STATE_K_CACHE ? st->k_cache[l] : st->v_cache[l];
        n = (size_t)cfg->n_kv_heads * n_pos * cfg->head_dim;
    } else if (kind == QC_STATE_CONV) {
        dst = st->conv_state[l];
        n = (size_t)qc_cfg_conv_dim(cfg) * cfg->conv_kernel;
    } else {
        dst = st->recurrent_state[l];
        n = (size_t)cfg->lin_n_v_heads * cfg->lin_k_dim * cfg->lin_v_dim;
    }
    if (n > R->state_buf_n) { /* a longer cache than asked for so far */
        float *nb = realloc(R->state_buf, n * sizeof(float));
        if (!nb)
            return qc_errf(err, QC_ERR_OOM, "%s: out of memory for a state buffer of %zu floats",
                           R->name, n);
        R->state_buf = nb;
        R->state_buf_n = n;
    }
    int rc = R->api->get_state(R->h, l, kind, n_pos, R->state_buf);
    if (rc == QC_PLUGIN_UNSUPPORTED) {
        const char *le = R->api->last_error(R->h);
        return qc_errf(err, QC_ERR_UNSUPPORTED, "%s: cannot expose %d cache positions: %s",
                       R->name, n_pos, le ? le : "");
    }
    if (rc != QC_PLUGIN_OK) {
        static const char *const kn[] = {"k_cache", "v_cache", "conv_state", "recurrent_state"};
        char what[96];
        snprintf(what, sizeof what, "get_state(layer %d, %s, n_pos %d)", l, kn[kind], n_pos);
        return rt_fail(R, err, what);
    }
    if (kind == QC_STATE_K_CACHE || kind == QC_STATE_V_CACHE) {
        const size_t row = (size_t)cfg->head_dim;
        for (int h = 0; h < cfg->n_kv_heads; h++)
            memcpy(dst + (size_t)h * st->max_context_len * row,
                   R->state_buf + (size_t)h * n_pos * row, (size_t)n_pos * row * sizeof(float));
    } else {
        memcpy(dst, R->state_buf, n * sizeof(float));
    }
    return QC_OK;
}

static qc_status rm_sync(qc_backend *be, qc_state *st, int n_pos, qc_err *err) {
    remote *R = be->impl;
    const qc_config *cfg = &be->model->cfg;
    if (n_pos < 0 || n_pos > st->max_context_len)
        return qc_errf(err, QC_ERR_RANGE, "%s: sync of %d positions > mirror capacity %d",
                       R->name, n_pos, st->max_context_len);
    for (int l = 0; l < cfg->n_layers; l++) {
        int full = cfg->layer_types[l] == QC_LAYER_FULL;
        for (int k = full ? QC_STATE_K_CACHE : QC_STATE_CONV;
             k <= (full ? QC_STATE_V_CACHE : QC_STATE_RECURRENT); k++) {
            qc_status s = sync_one(R, cfg, st, l, k, n_pos, err);
            if (s) return s;
        }
    }
    return QC_OK;
}

/* The lifecycle entries (snapshot, restore, select_sequence, trim): one int argument each. */
static qc_status rm_int_call(qc_backend *be, int (*fn)(void *, int32_t), const char *what, int v,
                             qc_err *err) {
    remote *R = be->impl;
    int rc = fn(R->h, (int32_t)v);
    if (rc == QC_PLUGIN_OK) return QC_OK;
    char w[96];
    snprintf(w, sizeof w, "%s(%d)", what, v);
    if (rc == QC_PLUGIN_UNSUPPORTED) {
        const char *le = R->api->last_error(R->h);
        return qc_errf(err, QC_ERR_UNSUPPORTED, "%s: %s unsupported: %s", R->name, w,
                       le ? le : "");
    }
    return rt_fail(R, err, w);
}
static qc_status rm_snapshot(qc_backend *be, int slot, qc_err *err) {
    return rm_int_call(be, ((remote *)be->impl)->api->snapshot, "snapshot", slot, err);
}
static qc_status rm_restore(qc_backend *be, int slot, qc_err *err) {
    return rm_int_call(be, ((remote *)be->impl)->api->restore, "restore", slot, err);
}
static qc_status rm_select(qc_backend *be, int seq, qc_err *err) {
    return rm_int_call(be, ((remote *)be->impl)->api->select_sequence, "select_sequence", seq, err);
}
static qc_status rm_trim(qc_backend *be, int n_pos, qc_err *err) {
    return rm_int_call(be, ((remote *)be->impl)->api->trim, "trim", n_pos, err);
}

static void rm_destroy(qc_backend *be) {
    remote *R = be->impl;
    if (R) {
        if (R->api && R->api->close) R->api->close(R->h);
        free(R->logits_scratch);
        free(R->hidden_buf);
        free(R->state_buf);
        free(R->router_ids), free(R->router_w), free(R->router_row);
        free(R);
    }
    free(be);
}

static const char *rm_describe(const qc_backend *be) {
    const remote *R = be->impl;
    return R->desc;
}

/* ===================================================================================== */
/* create                                                                                */
/* ===================================================================================== */

qc_status qc_remote_backend_create(const char *name, const qc_runtime_plugin *api, void *handle,
                                   const qc_plugin_info *info, const qc_remote_hooks *hooks,
                                   const qc_model *m, const qc_backend_opts *o, qc_backend **out,
                                   qc_err *err) {
    *out = NULL;
    const qc_config *cfg = &m->cfg;
    if (info->vocab_size != cfg->vocab_size || info->hidden_size != cfg->hidden_size ||
        info->n_layers != cfg->n_layers) {
        qc_status s = qc_errf(err, QC_ERR_RUNTIME,
                              "%s: the runtime reports vocab_size %d, hidden_size %d, n_layers %d;"
                              " config.json says %d, %d, %d", name, info->vocab_size,
                              info->hidden_size, info->n_layers, cfg->vocab_size,
                              cfg->hidden_size, cfg->n_layers);
        api->close(handle);
        return s;
    }
    qc_backend *be = qc_backend_alloc();
    remote *R = calloc(1, sizeof *R);
    int cap = 0;
    for (int l = 0; l < cfg->n_layers; l++) cap |= cfg->layer_types[l] == QC_LAYER_FULL;
    int max_ctx = o->max_tokens; /* the mirror holds at most what a call can carry, and more */
    size_t kv = (size_t)cfg->n_kv_heads * (size_t)(max_ctx > 4096 ? max_ctx : 4096) * cfg->head_dim;
    size_t conv = (size_t)qc_cfg_conv_dim(cfg) * cfg->conv_kernel;
    size_t rec = (size_t)cfg->lin_n_v_heads * cfg->lin_k_dim * cfg->lin_v_dim;
    size_t sb = kv > conv ? kv : conv;
    sb = sb > rec ? sb : rec;
    (void)cap;
    if (R) {
        R->logits_scratch = malloc((size_t)o->max_tokens * cfg->vocab_size * sizeof(float));
        R->hidden_buf = malloc((size_t)o->max_tokens * cfg->hidden_size * sizeof(float));
        R->state_buf = malloc(sb * sizeof(float));
        R->state_buf_n = sb;
    }
    if (!be || !R || !R->logits_scratch || !R->hidden_buf || !R->state_buf) {
        if (R) free(R->logits_scratch), free(R->hidden_buf), free(R->state_buf);
        free(R);
        free(be);
        api->close(handle);
        return qc_errf(err, QC_ERR_OOM, "%s: out of memory", name);
    }
    R->api = api;
    R->h = handle;
    R->info = *info;
    if (hooks) R->hooks = *hooks;
    R->sent_dn_kernel = R->sent_chunk_size = -1;
    snprintf(R->name, sizeof R->name, "%s", name);
    snprintf(R->desc, sizeof R->desc, "%s (%s)", name, info->name[0] ? info->name : "runtime");
    be->name = R->name;
    be->model = m;
    be->opts = *o;
    be->impl = R;
    /* the optional entries must exist for what the runtime announces */
    unsigned caps = info->caps & (QC_CAP_HIDDEN | QC_CAP_STATE_READ | QC_CAP_STATE_FILL |
                                  QC_CAP_THREADS | QC_CAP_DN_KERNEL | QC_CAP_CHUNK_SIZE);
    if (!api->get_hidden) caps &= ~QC_CAP_HIDDEN;
    if (!api->get_state) caps &= ~QC_CAP_STATE_READ;
    if (!api->fill_state) caps &= ~QC_CAP_STATE_FILL;
    if (!api->set_option) caps &= ~(QC_CAP_THREADS | QC_CAP_DN_KERNEL | QC_CAP_CHUNK_SIZE);
    /* the lifecycle entries exist only when struct_size covers them */
    if (api->struct_size >= QC_PLUGIN_LIFECYCLE_SIZE) {
        if (api->snapshot && api->restore) caps |= info->caps & QC_CAP_SNAPSHOT;
        if (api->select_sequence) caps |= info->caps & QC_CAP_SEQUENCES;
        if (api->trim) caps |= info->caps & QC_CAP_TRIM;
    }
    if (api->struct_size >= QC_PLUGIN_TOPK_SIZE && api->forward_topk)
        caps |= info->caps & QC_CAP_TOPK_ONLY;
    if (api->struct_size >= QC_PLUGIN_MLP_IN_SIZE && api->get_mlp_in && (caps & QC_CAP_HIDDEN))
        caps |= info->caps & QC_CAP_MLP_IN; /* asked for beside the hidden states */
    /* the router: a MoE model, get_router covered by struct_size, and its buffers */
    if (api->struct_size >= QC_PLUGIN_ROUTER_SIZE && api->get_router && qc_cfg_is_moe(cfg) &&
        cfg->n_experts_per_tok > 0 && (info->caps & QC_CAP_ROUTER)) {
        size_t nk = (size_t)o->max_tokens * cfg->n_experts_per_tok;
        R->router_ids = malloc(nk * sizeof(int32_t));
        R->router_w = malloc(nk * sizeof(float));
        R->router_row = malloc(2 * nk * sizeof(float));
        if (!R->router_ids || !R->router_w || !R->router_row) {
            rm_destroy(be);
            return qc_errf(err, QC_ERR_OOM, "%s: out of memory (router rows)", name);
        }
        caps |= QC_CAP_ROUTER;
    }
    be->caps = caps; /* QC_CAP_* == QC_BE_CAP_* bit for bit */
    be->max_tokens_per_call = info->max_tokens_per_call > 0 ? info->max_tokens_per_call : 0;
    be->max_context_len = info->max_context_len > 0 ? info->max_context_len : 0;
    be->forward = rm_forward;
    be->destroy = rm_destroy;
    be->describe = rm_describe;
    be->reset = rm_reset;
    be->fill_state = (caps & QC_CAP_STATE_FILL) ? rm_fill : NULL;
    be->sync_state = (caps & QC_CAP_STATE_READ) ? rm_sync : NULL;
    be->snapshot = (caps & QC_CAP_SNAPSHOT) ? rm_snapshot : NULL;
    be->restore = (caps & QC_CAP_SNAPSHOT) ? rm_restore : NULL;
    be->select_seq = (caps & QC_CAP_SEQUENCES) ? rm_select : NULL;
    be->trim = (caps & QC_CAP_TRIM) ? rm_trim : NULL;
    be->forward_topk = (caps & QC_CAP_TOPK_ONLY) ? rm_forward_topk : NULL;
    if (R->hooks.set_dims) R->hooks.set_dims(R->h, cfg);
    if ((caps & QC_CAP_THREADS) && o->n_threads > 0) {
        char v[32];
        snprintf(v, sizeof v, "%d", o->n_threads);
        qc_status s = rt_option(R, "threads", v, err);
        if (s) {
            rm_destroy(be);
            return s;
        }
    }
    *out = be;
    return QC_OK;
}

_Static_assert(QC_CAP_HIDDEN == QC_BE_CAP_HIDDEN && QC_CAP_STATE_READ == QC_BE_CAP_STATE_READ &&
                   QC_CAP_STATE_FILL == QC_BE_CAP_STATE_FILL && QC_CAP_THREADS == QC_BE_CAP_THREADS &&
                   QC_CAP_DN_KERNEL == QC_BE_CAP_DN_KERNEL && QC_CAP_CHUNK_SIZE == QC_BE_CAP_CHUNK_SIZE &&
                   QC_CAP_SNAPSHOT == QC_BE_CAP_SNAPSHOT &&
                   QC_CAP_SEQUENCES == QC_BE_CAP_SEQUENCES && QC_CAP_TRIM == QC_BE_CAP_TRIM &&
                   QC_CAP_TOPK_ONLY == QC_BE_CAP_TOPK_ONLY && QC_CAP_ROUTER == QC_BE_CAP_ROUTER &&
                   QC_CAP_MLP_IN == QC_BE_CAP_MLP_IN,
               "plugin ABI capability bits must equal the backend capability bits");
