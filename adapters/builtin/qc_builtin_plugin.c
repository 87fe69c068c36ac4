/* qc_builtin_plugin.c — a built-in backend (reference or optimized) exposed through the runtime
 * plugin ABI v1 (include/qc/qc_runtime_plugin.h): the ABI's own proof.
 *
 * Compiled twice (CMakeLists.txt, "shipped adapters"): -DQC_PLUGIN_BACKEND="reference"
 * -DQC_PLUGIN_CREATE=qc_reference_create into libqc_plugin_reference.so and
 * -DQC_PLUGIN_BACKEND="optimized" -DQC_PLUGIN_CREATE=qc_optimized_create into
 * libqc_plugin_optimized.so, each linking privately the static runtime and that one backend
 * (qc_runtime + qc_reference / qc_optimized: no harness, no other backend) and exporting nothing
 * but qc_runtime_plugin_entry. `qwen-conform check --backend plugin:<that .so>` must then give the
 * same verdicts and bit-identical numbers as `--backend reference` / `--backend optimized`:
 * the plugin runs the very same forward pass on its own qc_state (canonical layout), so every
 * buffer the harness reads back is the backend's own.
 *
 * Open options ("k=v,k=v"):
 *   max_context=N  state capacity in positions. Default: QCB_DEFAULT_CONTEXT (4096) positions,
 *                  lowered so that the state stays within QCB_STATE_BUDGET (1 GiB, as computed
 *                  by qc_state_bytes: a large model keeps what it had), and raised up to
 *                  QCB_MAX_CONTEXT (32768) while the state stays within QCB_SMALL_STATE
 *                  (64 MiB). Why: the cap exists so that one state (and each of the up to 8
 *                  snapshots + 3 sequences the lifecycle checks create, full copies) stays
 *                  within a memory budget; but a small model's state costs a few KiB per
 *                  position, and a fixed 4096 made the plugin refuse what `--backend reference`
 *                  runs (tiny-long-context needs 4104 positions, past max_position_embeddings
 *                  on purpose). Sized from the model (qc_state_bytes of config.json), not from
 *                  a golden the plugin never sees: the tiny fixtures get 32768 positions
 *                  (< 10 MiB of state each), the real 0.8B-9B stay at 4096.
 *   max_tokens=N   largest n per forward call (default max_context, lowered so that the hidden
 *                  capture [2L+1, N, H], hidden states and mlp_in, stays within
 *                  QCB_HIDDEN_BUDGET bytes); <= max_context
 *   threads=N      optimized only: OpenMP threads (0 = the OpenMP default)
 *   dn_kernel=chunked|recurrent, chunk_size=N  as set_option
 *   any other key=value: the backend's own option (qc_backend_set_option; the optimized
 *                  backend's gemm_min, par_min, bf16_dot), kept across a re-created backend
 *
 * Positions: the backend never advances state->pos (qc_backend.h); forward does it here, as the
 * prefill controller (runtime/qc_prefill.c) does: pos = start_pos + n after a successful call.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_model.h"
#include "qc/qc_optimized.h"
#include "qc/qc_reference.h"
#include "qc/qc_runtime_plugin.h"
#include "qc/qc_state.h"

#ifndef QC_PLUGIN_BACKEND
#error "build with -DQC_PLUGIN_BACKEND=\"reference\" or \"optimized\""
#endif
#ifndef QC_PLUGIN_CREATE
#error "build with -DQC_PLUGIN_CREATE=qc_reference_create or qc_optimized_create"
#endif

#define QCB_EXPORT __attribute__((visibility("default")))

#define QCB_DEFAULT_CONTEXT 4096
#define QCB_MAX_CONTEXT 32768
#define QCB_STATE_BUDGET ((size_t)1 << 30)  /* default capacity: state <= 1 GiB */
#define QCB_SMALL_STATE ((size_t)64 << 20)  /* above 4096 positions only while state <= 64 MiB */
#define QCB_HIDDEN_BUDGET ((size_t)1 << 30) /* default max_tokens: hidden capture <= 1 GiB */

static int is_optimized(void) { return strcmp(QC_PLUGIN_BACKEND, "optimized") == 0; }

/* ===================================================================================== */
/* handle                                                                                 */
/* ===================================================================================== */

typedef struct {
    qc_model *model;
    qc_backend *be;
    qc_state *st;          /* the current sequence (one of seq[]) */
    qc_state *seq[QC_PLUGIN_MIN_SEQUENCES];  /* sequences (created on first select; [0] = st) */
    qc_state *snap[QC_PLUGIN_MIN_SNAPSHOTS]; /* snapshots (created on first use) */
    int cur;               /* the current sequence */
    qc_backend_opts opts;  /* what the backend was (or will be re-) created with */
    char bkeys[8][64], bvals[8][64]; /* the backend's own options set so far (set_option of
                                        any other key, e.g. the optimized bf16_dot), re-applied
                                        when the backend is re-created */
    int nb;                /* entries of bkeys / bvals */
    int capacity;          /* state positions */
    int max_tokens;        /* largest n per call */
    int L1, H, V;          /* L + 1, hidden size, vocabulary */
    float *hidden;         /* [2L+1, max_tokens, H]: the hidden states of the last forward
                              (rows 0..L), then its mlp_in (rows L+1+l: the trace's "mlp_in" /
                              "moe_in" of layer l) */
    unsigned char *seen;   /* [2L+1]: row written by the last forward */
    int hidden_n;          /* tokens of the last successful forward (0: none) */
    int hidden_bad;        /* the trace reported an unexpected index / width / length */
    int cur_n;             /* n of the forward in progress (for the trace hook) */
    int K;                 /* experts per token (0: a dense model, no router) */
    float *router;         /* [L, max_tokens, 2K]: the "router_topk" rows of the last forward
                              (per position K ids as floats, then K weights) */
    unsigned char *rseen;  /* [L]: layer traced by the last forward */
    char err[1024];
} qcb_handle;

static char g_open_err[1024] = "no error";

static int seterr(qcb_handle *h, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int seterr(qcb_handle *h, int code, const char *fmt, ...) {
    char *buf = h ? h->err : g_open_err;
    size_t cap = h ? sizeof h->err : sizeof g_open_err;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return code;
}

static void clear_err(qcb_handle *h) { snprintf(h->err, sizeof h->err, "no error"); }

/* The trace hook: copy hidden checkpoint `index` ([n, H]) of the call in progress. */
static void qcb_trace(void *user, int index, const char *name, int start_pos, int n_tokens,
                      int dim, const float *data) {
    qcb_handle *h = user;
    (void)start_pos;
    if (name && !strcmp(name, "router_topk")) { /* MoE: kept for get_router */
        int L = h->L1 - 1;
        if (!h->router || index < 0 || index >= L || dim != 2 * h->K || n_tokens != h->cur_n ||
            n_tokens > h->max_tokens) {
            h->hidden_bad = 1;
            return;
        }
        memcpy(h->router + (size_t)index * h->max_tokens * dim, data,
               (size_t)n_tokens * dim * sizeof(float));
        h->rseen[index] = 1;
        return;
    }
    if (name && (!strcmp(name, "mlp_in") || !strcmp(name, "moe_in"))) {
        if (index < 0 || index >= h->L1 - 1) {
            h->hidden_bad = 1;
            return;
        }
        index += h->L1; /* kept for get_mlp_in, after the hidden rows */
    } else if (name && strcmp(name, "hidden")) {
        return;
    } else if (index >= h->L1) {
        h->hidden_bad = 1;
        return;
    }
    if (index < 0 || dim != h->H || n_tokens != h->cur_n ||
        n_tokens > h->max_tokens) {
        h->hidden_bad = 1;
        return;
    }
    memcpy(h->hidden + (size_t)index * h->max_tokens * h->H, data,
           (size_t)n_tokens * h->H * sizeof(float));
    h->seen[index] = 1;
}

/* A refused backend option as the plugin's code and message, by the status alone
 * (qc_backend.h, set_option): an unknown key (QC_ERR_NO_OPTION) is QC_PLUGIN_UNSUPPORTED naming
 * every key known (the plugin's, then the backend's message with its own); a value the backend
 * cannot do (QC_ERR_UNSUPPORTED) QC_PLUGIN_UNSUPPORTED; any other refusal QC_PLUGIN_ERROR. */
static int option_error(qcb_handle *h, const char *key, qc_status s, const qc_err *e) {
    if (s == QC_ERR_NO_OPTION)
        return seterr(h, QC_PLUGIN_UNSUPPORTED,
                      "unknown option '%s' (known: max_context, max_tokens, threads, dn_kernel, "
                      "chunk_size; %s)", key, e->msg);
    return seterr(h, s == QC_ERR_UNSUPPORTED ? QC_PLUGIN_UNSUPPORTED : QC_PLUGIN_ERROR, "%s",
                  e->msg);
}

/* (Re)create the backend from h->opts (the trace hook installed). */
static int make_backend(qcb_handle *h) {
    qc_backend_opts o = h->opts;
    o.trace = qcb_trace;
    o.trace_user = h;
    qc_backend *be = NULL;
    qc_err e;
    qc_err_clear(&e);
    qc_status s = QC_PLUGIN_CREATE(h->model, &o, &be, &e);
    if (s != QC_OK)
        return seterr(h, QC_PLUGIN_ERROR, "%s backend: %s (%s)", QC_PLUGIN_BACKEND, e.msg,
                      qc_status_str(s));
    for (int i = 0; i < h->nb; i++)
        if ((s = qc_backend_set_option(be, h->bkeys[i], h->bvals[i], &e)) != QC_OK) {
            qc_backend_destroy(be);
            return option_error(h, h->bkeys[i], s, &e);
        }
    qc_backend_destroy(h->be);
    h->be = be;
    return QC_PLUGIN_OK;
}

/* Any other key: the backend's own set_option, kept for a re-created backend (before the
 * backend exists, at open: kept, and checked when it is created). */
static int backend_option(qcb_handle *h, const char *key, const char *value) {
    if (h->be) {
        qc_err e;
        qc_err_clear(&e);
        qc_status s = qc_backend_set_option(h->be, key, value, &e);
        if (s != QC_OK) return option_error(h, key, s, &e);
    }
    int i = 0;
    while (i < h->nb && strcmp(h->bkeys[i], key)) i++;
    if (i == h->nb) {
        if (h->nb == 8 || strlen(key) >= 64 || strlen(value) >= 64)
            return seterr(h, QC_PLUGIN_ERROR, "%s: too many or too long backend options", key);
        h->nb++;
    }
    snprintf(h->bkeys[i], sizeof h->bkeys[i], "%s", key);
    snprintf(h->bvals[i], sizeof h->bvals[i], "%s", value);
    return QC_PLUGIN_OK;
}

/* ===================================================================================== */
/* option parsing                                                                         */
/* ===================================================================================== */

/* A whole-string decimal integer in [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, int *out) {
    if (!s || !*s) return -1;
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* The run-time options (set_option and open). h->be may be NULL (open, before create): then
 * only h->opts changes. */
static int apply_option(qcb_handle *h, const char *key, const char *value) {
    if (!key) return seterr(h, QC_PLUGIN_ERROR, "set_option: NULL key");
    if (!value) return seterr(h, QC_PLUGIN_ERROR, "set_option %s: NULL value", key);
    if (strcmp(key, "threads") == 0) {
        if (!is_optimized())
            return seterr(h, QC_PLUGIN_UNSUPPORTED,
                          "threads: the reference backend is single-threaded (no THREADS cap)");
        int n;
        if (parse_int(value, 0, 4096, &n))
            return seterr(h, QC_PLUGIN_ERROR, "threads: '%s' is not an integer in [0, 4096]",
                          value);
        int old = h->opts.n_threads;
        h->opts.n_threads = n;
        if (h->be) { /* fixed at create: a new backend with that thread count */
            int rc = make_backend(h);
            if (rc != QC_PLUGIN_OK) h->opts.n_threads = old;
            return rc;
        }
        return QC_PLUGIN_OK;
    }
    if (strcmp(key, "dn_kernel") == 0) {
        qc_dn_kernel k;
        if (strcmp(value, "chunked") == 0) k = QC_DN_CHUNKED;
        else if (strcmp(value, "recurrent") == 0) k = QC_DN_RECURRENT;
        else
            return seterr(h, QC_PLUGIN_ERROR, "dn_kernel: '%s' is not chunked or recurrent",
                          value);
        h->opts.dn_kernel = k; /* the next forward's call */
        return QC_PLUGIN_OK;
    }
    if (strcmp(key, "chunk_size") == 0) {
        int n;
        if (parse_int(value, 1, INT_MAX, &n))
            return seterr(h, QC_PLUGIN_ERROR, "chunk_size: '%s' is not a positive integer",
                          value);
        /* The optimized backend sizes its chunk scratch at create for at least
         * min(chunk_size, max_tokens) tokens: a larger chunk needs a new backend. */
        if (h->be && is_optimized() && n > h->opts.chunk_size) {
            int old = h->opts.chunk_size;
            h->opts.chunk_size = n;
            int rc = make_backend(h);
            if (rc != QC_PLUGIN_OK) {
                h->opts.chunk_size = old;
                return rc;
            }
        }
        h->opts.chunk_size = n; /* the next forward's call */
        return QC_PLUGIN_OK;
    }
    return backend_option(h, key, value);
}

/* Largest capacity <= want whose qc_state_bytes stays within budget (at least 1). */
static int fit_context(const qc_config *cfg, int want, size_t budget) {
    size_t fixed = qc_state_bytes(cfg, 0);
    size_t per = qc_state_bytes(cfg, 1) - fixed;
    if (per == 0 || fixed >= budget) return per == 0 ? want : 1;
    size_t n = (budget - fixed) / per;
    if (n < 1) n = 1;
    return n < (size_t)want ? (int)n : want;
}

/* ===================================================================================== */
/* the ABI entries                                                                        */
/* ===================================================================================== */

static void qcb_close(void *handle);

/* The options string of open, parsed: max_context / max_tokens (-1 when not given) and the
 * run-time options to apply after the load. */
typedef struct {
    int want_ctx, want_tok;
    char keys[16][64], vals[16][256];
    int n;
} qcb_open_opts;

/* Parse "k=v,k=v" into o; an error is set in g_open_err (the return code). */
static int parse_open_options(const char *options, qcb_open_opts *o) {
    int rc = QC_PLUGIN_OK;
    o->want_ctx = -1;
    o->want_tok = -1;
    o->n = 0;
    if (!options || !*options) return QC_PLUGIN_OK;
    char *buf = strdup(options);
    if (!buf) return seterr(NULL, QC_PLUGIN_ERROR, "open: out of memory");
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok) {
            rc = seterr(NULL, QC_PLUGIN_ERROR, "open: option '%s' is not key=value", tok);
            break;
        }
        *eq = '\0';
        const char *k = tok, *v = eq + 1;
        if (strcmp(k, "max_context") == 0 || strcmp(k, "max_tokens") == 0) {
            int n;
            if (parse_int(v, 1, 1 << 30, &n)) {
                rc = seterr(NULL, QC_PLUGIN_ERROR,
                            "open: %s: '%s' is not a positive integer <= 2^30", k, v);
                break;
            }
            if (strcmp(k, "max_context") == 0) o->want_ctx = n;
            else o->want_tok = n;
        } else { /* threads, dn_kernel, chunk_size, or the backend's own (checked at create) */
            if (o->n == 16 || strlen(k) >= sizeof o->keys[0] || strlen(v) >= sizeof o->vals[0]) {
                rc = seterr(NULL, QC_PLUGIN_ERROR, "open: too many or too long options");
                break;
            }
            snprintf(o->keys[o->n], sizeof o->keys[0], "%s", k);
            snprintf(o->vals[o->n], sizeof o->vals[0], "%s", v);
            o->n++;
        }
    }
    free(buf);
    return rc;
}

/* After the load: the capacity and tokens per call (from o, else fitted to the budgets), the
 * state and the hidden capture. An error is set in g_open_err (the return code); the caller
 * closes h. */
static int size_handle(qcb_handle *h, const char *model_dir, const qcb_open_opts *o) {
    const qc_config *cfg = &h->model->cfg;
    qc_err e;
    qc_err_clear(&e);
    if (o->want_ctx > 0) {
        h->capacity = o->want_ctx;
    } else {
        h->capacity = fit_context(cfg, QCB_DEFAULT_CONTEXT, QCB_STATE_BUDGET);
        int small = fit_context(cfg, QCB_MAX_CONTEXT, QCB_SMALL_STATE);
        if (small > h->capacity) h->capacity = small;
    }
    if (o->want_tok > 0) {
        if (o->want_tok > h->capacity)
            return seterr(NULL, QC_PLUGIN_ERROR, "open %s: max_tokens %d > max_context %d",
                          model_dir, o->want_tok, h->capacity);
        h->max_tokens = o->want_tok;
    } else {
        size_t per_tok = (size_t)(2 * h->L1 - 1) * h->H * sizeof(float);
        size_t fit = QCB_HIDDEN_BUDGET / (per_tok ? per_tok : 1);
        h->max_tokens = fit < (size_t)h->capacity ? (fit > 0 ? (int)fit : 1) : h->capacity;
    }
    h->opts.max_tokens = h->max_tokens;

    qc_status s = qc_state_create(cfg, h->capacity, &h->st, &e);
    h->seq[0] = h->st;
    if (s != QC_OK)
        return seterr(NULL, QC_PLUGIN_ERROR, "open %s: max_context %d: %s", model_dir,
                      o->want_ctx > 0 ? o->want_ctx : QCB_DEFAULT_CONTEXT, e.msg);
    h->hidden = malloc((size_t)(2 * h->L1 - 1) * h->max_tokens * h->H * sizeof(float));
    h->seen = calloc((size_t)(2 * h->L1 - 1), 1);
    if (!h->hidden || !h->seen)
        return seterr(NULL, QC_PLUGIN_ERROR,
                      "open %s: out of memory for the hidden capture (%d x %d x %d floats)",
                      model_dir, 2 * cfg->n_layers + 1, o->want_tok > 0 ? o->want_tok : h->capacity,
                      cfg->hidden_size);
    if (h->K > 0) {
        h->router = malloc((size_t)cfg->n_layers * h->max_tokens * 2 * h->K * sizeof(float));
        h->rseen = calloc((size_t)cfg->n_layers, 1);
        if (!h->router || !h->rseen)
            return seterr(NULL, QC_PLUGIN_ERROR, "open %s: out of memory for the router capture",
                          model_dir);
    }
    return QC_PLUGIN_OK;
}

/* What open announces. */
static void fill_info(const qcb_handle *h, qc_plugin_info *info) {
    const qc_config *cfg = &h->model->cfg;
    memset(info, 0, sizeof *info);
    info->vocab_size = cfg->vocab_size;
    info->hidden_size = cfg->hidden_size;
    info->n_layers = cfg->n_layers;
    info->max_tokens_per_call = h->max_tokens;
    info->max_context_len = h->capacity;
    info->caps = QC_CAP_HIDDEN | QC_CAP_STATE_READ | QC_CAP_STATE_FILL | QC_CAP_DN_KERNEL |
                 QC_CAP_CHUNK_SIZE | (is_optimized() ? QC_CAP_THREADS : 0u) | QC_CAP_SNAPSHOT |
                 QC_CAP_SEQUENCES | QC_CAP_MLP_IN | (h->K > 0 ? QC_CAP_ROUTER : 0u);
    snprintf(info->name, sizeof info->name, "qwen-conform %s (as plugin): %s", QC_PLUGIN_BACKEND,
             h->be->describe ? h->be->describe(h->be) : h->be->name);
}

static int qcb_open(const char *model_dir, const char *options, qc_plugin_info *info,
                    void **handle) {
    if (handle) *handle = NULL;
    if (!model_dir || !info || !handle)
        return seterr(NULL, QC_PLUGIN_ERROR, "open: NULL model_dir, info or handle");
    qcb_handle *h = calloc(1, sizeof *h);
    if (!h) return seterr(NULL, QC_PLUGIN_ERROR, "open: out of memory");
    clear_err(h);
    qc_backend_opts_default(&h->opts);

    /* options first (cheap to reject), applied after the load */
    qcb_open_opts o;
    int rc = parse_open_options(options, &o);
    if (rc != QC_PLUGIN_OK) {
        qcb_close(h);
        return rc;
    }
    for (int i = 0; i < o.n; i++) {
        rc = apply_option(h, o.keys[i], o.vals[i]); /* h->be is NULL: opts only */
        if (rc != QC_PLUGIN_OK) {
            seterr(NULL, rc, "open: %s", h->err);
            qcb_close(h);
            return rc;
        }
    }

    /* the model */
    qc_err e;
    qc_err_clear(&e);
    qc_status s = qc_model_load(model_dir, &h->model, &e);
    if (s != QC_OK) {
        qcb_close(h);
        return seterr(NULL, QC_PLUGIN_ERROR, "open %s: %s (%s)", model_dir, e.msg,
                      qc_status_str(s));
    }
    const qc_config *cfg = &h->model->cfg;
    h->L1 = cfg->n_layers + 1;
    h->H = cfg->hidden_size;
    h->V = cfg->vocab_size;
    h->K = qc_cfg_is_moe(cfg) ? cfg->n_experts_per_tok : 0;

    /* capacity and tokens per call, state, hidden capture */
    rc = size_handle(h, model_dir, &o);
    if (rc == QC_PLUGIN_OK) {
        rc = make_backend(h);
        if (rc != QC_PLUGIN_OK) seterr(NULL, rc, "open %s: %s", model_dir, h->err);
    }
    if (rc != QC_PLUGIN_OK) {
        qcb_close(h);
        return rc;
    }
    fill_info(h, info);
    *handle = h;
    return QC_PLUGIN_OK;
}

static int qcb_reset(void *handle) {
    qcb_handle *h = handle;
    if (!h) return seterr(NULL, QC_PLUGIN_ERROR, "reset: NULL handle");
    clear_err(h);
    qc_state_reset(h->st);
    h->hidden_n = 0;
    return QC_PLUGIN_OK;
}

static int qcb_forward(void *handle, const int32_t *tokens, int32_t n, int32_t start_pos,
                       int32_t all_logits, float *logits) {
    qcb_handle *h = handle;
    if (!h) return seterr(NULL, QC_PLUGIN_ERROR, "forward: NULL handle");
    clear_err(h);
    /* validation: nothing is touched (not even the last hidden states) before it passes */
    if (!tokens) return seterr(h, QC_PLUGIN_ERROR, "forward: NULL tokens");
    if (n < 1) return seterr(h, QC_PLUGIN_ERROR, "forward: n = %d tokens (need >= 1)", (int)n);
    if (n > h->max_tokens)
        return seterr(h, QC_PLUGIN_ERROR, "forward: n = %d tokens > max_tokens_per_call %d",
                      (int)n, h->max_tokens);
    if (start_pos < 0 || (int64_t)start_pos + n > h->capacity)
        return seterr(h, QC_PLUGIN_ERROR,
                      "forward: positions %d..%lld outside the capacity of %d positions",
                      (int)start_pos, (long long)start_pos + n - 1, h->capacity);
    /* start_pos 0 at any position: the caller reset first (no-KV recomputation) */
    if (start_pos != h->st->pos && start_pos != 0)
        return seterr(h, QC_PLUGIN_ERROR,
                      "forward: start_pos %d != the %d positions consumed so far (and != 0)",
                      (int)start_pos, h->st->pos);
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= h->V)
            return seterr(h, QC_PLUGIN_ERROR,
                          "forward: token %d (index %d) outside the vocabulary [0, %d)",
                          (int)tokens[i], (int)i, h->V);

    h->hidden_n = 0;
    h->hidden_bad = 0;
    memset(h->seen, 0, (size_t)(2 * h->L1 - 1));
    if (h->rseen) memset(h->rseen, 0, (size_t)h->L1 - 1);
    h->cur_n = n;
    qc_err e;
    qc_err_clear(&e);
    qc_call call = qc_backend_call_defaults(&h->opts); /* the kernel options set_option made */
    call.trace = qcb_trace;
    call.trace_user = h;
    qc_status s = qc_backend_forward_call(h->be, &call, tokens, n, start_pos, h->st, logits,
                                          all_logits ? 1 : 0, &e);
    h->cur_n = 0;
    if (s != QC_OK)
        return seterr(h, QC_PLUGIN_ERROR, "forward: %s (%s)", e.msg, qc_status_str(s));
    h->st->pos = start_pos + n; /* the backend never advances pos; the controller does */
    h->hidden_n = n;
    return QC_PLUGIN_OK;
}

static void qcb_close(void *handle) {
    qcb_handle *h = handle;
    if (!h) return;
    qc_backend_destroy(h->be);
    for (int i = 0; i < QC_PLUGIN_MIN_SEQUENCES; i++)
        if (h->seq[i] != h->st) qc_state_destroy(h->seq[i]);
    qc_state_destroy(h->st);
    for (int i = 0; i < QC_PLUGIN_MIN_SNAPSHOTS; i++) qc_state_destroy(h->snap[i]);
    qc_model_free(h->model);
    free(h->hidden);
    free(h->seen);
    free(h->router);
    free(h->rseen);
    free(h);
}

static const char *qcb_last_error(void *handle) {
    qcb_handle *h = handle;
    return h ? h->err : g_open_err;
}

static int qcb_get_hidden(void *handle, int32_t index, float *dst) {
    qcb_handle *h = handle;
    if (!h) return seterr(NULL, QC_PLUGIN_ERROR, "get_hidden: NULL handle");
    clear_err(h);
    if (!dst) return seterr(h, QC_PLUGIN_ERROR, "get_hidden: NULL dst");
    if (index < 0 || index >= h->L1)
        return seterr(h, QC_PLUGIN_ERROR, "get_hidden: index %d outside [0, %d]", (int)index,
                      h->L1 - 1);
    if (h->hidden_n == 0)
        return seterr(h, QC_PLUGIN_ERROR, "get_hidden: no successful forward since open/reset");
    if (h->hidden_bad || !h->seen[index])
        return seterr(h, QC_PLUGIN_ERROR,
                      "get_hidden: the backend's trace did not report hidden %d of the last "
                      "forward",
                      (int)index);
    memcpy(dst, h->hidden + (size_t)index * h->max_tokens * h->H,
           (size_t)h->hidden_n * h->H * sizeof(float));
    return QC_PLUGIN_OK;
}

static int qcb_get_mlp_in(void *handle, int32_t layer, float *dst) {
    qcb_handle *h = handle;
    if (!h) return seterr(NULL, QC_PLUGIN_ERROR, "get_mlp_in: NULL handle");
    if (!dst) return seterr(h, QC_PLUGIN_ERROR, "get_mlp_in: NULL dst");
    if (layer < 0 || layer >= h->L1 - 1)
        return seterr(h, QC_PLUGIN_ERROR, "get_mlp_in: layer %d outside [0, %d)", (int)layer,
                      h->L1 - 1);
    if (h->hidden_n == 0)
        return seterr(h, QC_PLUGIN_ERROR, "get_mlp_in: no successful forward since open/reset");
    if (h->hidden_bad || !h->seen[h->L1 + layer])
        return seterr(h, QC_PLUGIN_ERROR, "get_mlp_in: the backend's trace did not report layer "
                      "%d's mlp_in in the last forward", (int)layer);
    memcpy(dst, h->hidden + (size_t)(h->L1 + layer) * h->max_tokens * h->H,
           (size_t)h->hidden_n * h->H * sizeof(float));
    return QC_PLUGIN_OK;
}

static int qcb_get_router(void *handle, int32_t layer, int32_t *ids, float *weights) {
    qcb_handle *h = handle;
    if (!h) return seterr(NULL, QC_PLUGIN_ERROR, "get_router: NULL handle");
    clear_err(h);
    if (h->K <= 0) return seterr(h, QC_PLUGIN_UNSUPPORTED, "get_router: a dense model (no router)");
    if (!ids || !weights) return seterr(h, QC_PLUGIN_ERROR, "get_router: NULL ids or weights");
    if (layer < 0 || layer >= h->L1 - 1)
        return seterr(h, QC_PLUGIN_ERROR, "get_router: layer %d outside [0, %d)", (int)layer,
                      h->L1 - 1);
    if (h->hidden_n == 0)
        return seterr(h, QC_PLUGIN_ERROR, "get_router: no successful forward since open/reset");
    if (h->hidden_bad || !h->rseen[layer])
        return seterr(h, QC_PLUGIN_ERROR, "get_router: the backend's trace did not report the "
                      "router of layer %d in the last forward", (int)layer);
    const float *src = h->router + (size_t)layer * h->max_tokens * 2 * h->K;
    for (int t = 0; t < h->hidden_n; t++)
        for (int j = 0; j < h->K; j++) {
            ids[(size_t)t * h->K + j] = (int32_t)src[(size_t)t * 2 * h->K + j];
            weights[(size_t)t * h->K + j] = src[(size_t)t * 2 * h->K + h->K + j];
        }
    return QC_PLUGIN_OK;
}

static int qcb_get_state(void *handle, int32_t layer, int32_t kind, int32_t n_pos, float *dst) {
    qcb_handle *h = handle;
    if (!h) return seterr(NULL, QC_PLUGIN_ERROR, "get_state: NULL handle");
    clear_err(h);
    const qc_state *st = h->st;
    if (!dst) return seterr(h, QC_PLUGIN_ERROR, "get_state: NULL dst");
    if (layer < 0 || layer >= st->n_layers)
        return seterr(h, QC_PLUGIN_ERROR, "get_state: layer %d outside [0, %d)", (int)layer,
                      st->n_layers);
    const int full = h->model->cfg.layer_types[layer] == QC_LAYER_FULL;
    switch (kind) {
    case QC_STATE_K_CACHE:
    case QC_STATE_V_CACHE: {
        if (!full)
            return seterr(h, QC_PLUGIN_ERROR,
                          "get_state: layer %d is a linear-attention layer (no %s)", (int)layer,
                          kind == QC_STATE_K_CACHE ? "k_cache" : "v_cache");
        if (n_pos < 0)
            return seterr(h, QC_PLUGIN_ERROR, "get_state: n_pos %d < 0", (int)n_pos);
        if (n_pos > st->max_context_len)
            return seterr(h, QC_PLUGIN_UNSUPPORTED,
                          "get_state: n_pos %d exceeds the capacity of %d positions", (int)n_pos,
                          st->max_context_len);
        const float *src = kind == QC_STATE_K_CACHE ? st->k_cache[layer] : st->v_cache[layer];
        const size_t hd = (size_t)st->head_dim, cap = (size_t)st->max_context_len;
        for (int g = 0; g < st->n_kv_heads; g++)
            memcpy(dst + (size_t)g * n_pos * hd, src + (size_t)g * cap * hd,
                   (size_t)n_pos * hd * sizeof(float));
        return QC_PLUGIN_OK;
    }
    case QC_STATE_CONV:
    case QC_STATE_RECURRENT:
        if (full)
            return seterr(h, QC_PLUGIN_ERROR,
                          "get_state: layer %d is a full-attention layer (no %s)", (int)layer,
                          kind == QC_STATE_CONV ? "conv_state" : "recurrent_state");
        if (kind == QC_STATE_CONV)
            memcpy(dst, st->conv_state[layer],
                   (size_t)st->conv_dim * st->conv_kernel * sizeof(float));
        else
            memcpy(dst, st->recurrent_state[layer],
                   (size_t)st->n_v_heads * st->k_dim * st->v_dim * sizeof(float));
        return QC_PLUGIN_OK;
    default:
        return seterr(h, QC_PLUGIN_ERROR, "get_state: unknown kind %d", (int)kind);
    }
}

static int qcb_fill_state(void *handle, float value) {
    qcb_handle *h = handle;
    if (!h) return seterr(NULL, QC_PLUGIN_ERROR, "fill_state: NULL handle");
    clear_err(h);
    qc_state_fill(h->st, value); /* position left as it is */
    return QC_PLUGIN_OK;
}

static int qcb_set_option(void *handle, const char *key, const char *value) {
    qcb_handle *h = handle;
    if (!h) return seterr(NULL, QC_PLUGIN_ERROR, "set_option: NULL handle");
    clear_err(h);
    return apply_option(h, key, value);
}

/* ===================================================================================== */
/* state lifecycle: snapshots and sequences are qc_state copies                           */
/* ===================================================================================== */

/* A state like h->st in *slot (created on first use). */
static int need_state(qcb_handle *h, qc_state **slot, const char *what) {
    if (*slot) return QC_PLUGIN_OK;
    qc_err e;
    qc_err_clear(&e);
    if (qc_state_create(&h->model->cfg, h->capacity, slot, &e) != QC_OK)
        return seterr(h, QC_PLUGIN_ERROR, "%s: %s", what, e.msg);
    return QC_PLUGIN_OK;
}

static int qcb_snapshot(void *handle, int32_t slot) {
    qcb_handle *h = handle;
    if (!h) return seterr(NULL, QC_PLUGIN_ERROR, "snapshot: NULL handle");
    clear_err(h);
    if (slot < 0 || slot >= QC_PLUGIN_MIN_SNAPSHOTS)
        return seterr(h, QC_PLUGIN_UNSUPPORTED, "snapshot: slot %d outside 0..%d", (int)slot,
                      QC_PLUGIN_MIN_SNAPSHOTS - 1);
    int rc = need_state(h, &h->snap[slot], "snapshot");
    if (rc == QC_PLUGIN_OK) qc_state_copy(h->snap[slot], h->st); /* pos included */
    return rc;
}

static int qcb_restore(void *handle, int32_t slot) {
    qcb_handle *h = handle;
    if (!h) return seterr(NULL, QC_PLUGIN_ERROR, "restore: NULL handle");
    clear_err(h);
    if (slot < 0 || slot >= QC_PLUGIN_MIN_SNAPSHOTS || !h->snap[slot])
        return seterr(h, QC_PLUGIN_ERROR, "restore: snapshot slot %d was never written",
                      (int)slot);
    qc_state_copy(h->st, h->snap[slot]);
    h->hidden_n = 0;
    return QC_PLUGIN_OK;
}

static int qcb_select_sequence(void *handle, int32_t seq) {
    qcb_handle *h = handle;
    if (!h) return seterr(NULL, QC_PLUGIN_ERROR, "select_sequence: NULL handle");
    clear_err(h);
    if (seq < 0 || seq >= QC_PLUGIN_MIN_SEQUENCES)
        return seterr(h, QC_PLUGIN_UNSUPPORTED, "select_sequence: %d outside 0..%d", (int)seq,
                      QC_PLUGIN_MIN_SEQUENCES - 1);
    int rc = need_state(h, &h->seq[seq], "select_sequence"); /* a new one is fresh (zeros) */
    if (rc != QC_PLUGIN_OK) return rc;
    h->cur = seq;
    h->st = h->seq[seq];
    h->hidden_n = 0;
    return QC_PLUGIN_OK;
}

static const qc_runtime_plugin qcb_plugin = {
    .abi_version = QC_PLUGIN_ABI_VERSION,
    .struct_size = (uint32_t)sizeof(qc_runtime_plugin),
    .open = qcb_open,
    .reset = qcb_reset,
    .forward = qcb_forward,
    .close = qcb_close,
    .last_error = qcb_last_error,
    .get_hidden = qcb_get_hidden,
    .get_state = qcb_get_state,
    .fill_state = qcb_fill_state,
    .set_option = qcb_set_option,
    .snapshot = qcb_snapshot,
    .restore = qcb_restore,
    .select_sequence = qcb_select_sequence,
    .forward_topk = NULL,
    .get_router = qcb_get_router,
    .get_mlp_in = qcb_get_mlp_in,
};

QCB_EXPORT const qc_runtime_plugin *qc_runtime_plugin_entry(void);
QCB_EXPORT const qc_runtime_plugin *qc_runtime_plugin_entry(void) { return &qcb_plugin; }
