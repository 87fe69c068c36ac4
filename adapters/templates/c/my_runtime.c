/* my_runtime.c — a qwen-conform runtime plugin skeleton (written by `qwen-conform adapter-init c`).
 *
 * The plugin ABI v1 is include/qc/qc_runtime_plugin.h. Out of the box this plugin delegates to
 * qwen-conform's own reference backend (as adapters/builtin/qc_builtin_plugin.c does), so it
 * builds and passes at once:
 *
 *   cmake -S . -B build && cmake --build build        (or: make)
 *   qwen-conform check --golden FIXTURE_DIR --backend plugin:$PWD/build/libmy_runtime.so
 *
 * Replace the parts marked YOUR RUNTIME with calls into your runtime, one at a time, and re-run.
 * With only the mandatory entries (open, reset, forward, close, last_error) the verdict is
 * PARTIAL: the checks needing a capability are SKIPPED and the report says how many each would
 * unlock. Each optional capability below is behind a WITH_* switch: set it to 1 (-DWITH_X=1 or
 * edit the #define) and implement it to unlock its checks (the counts are those of
 * fixtures/tiny-f32-tied-flat; -DWITH_ALL=1 turns on every one this skeleton implements).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_model.h"
#include "qc/qc_reference.h"
#include "qc/qc_runtime_plugin.h"
#include "qc/qc_state.h"

#ifndef WITH_ALL
#define WITH_ALL 0
#endif
/* hidden: prefill.hidden names the first divergent layer (27 checks) */
#ifndef WITH_HIDDEN
#define WITH_HIDDEN WITH_ALL
#endif
/* state_read: KV cache, conv and recurrent state after prefill and decode, unused_slots,
 * per-layer state localisation (216 checks) */
#ifndef WITH_STATE_READ
#define WITH_STATE_READ WITH_ALL
#endif
/* state_fill: garbage_reset, restore_after_garbage (54 checks; unused_slots with state_read) */
#ifndef WITH_STATE_FILL
#define WITH_STATE_FILL WITH_ALL
#endif
/* dn_kernel + chunk_size: chunked_eq_recurrent (9 checks), chunk_sweep (5 checks) */
#ifndef WITH_OPTIONS
#define WITH_OPTIONS WITH_ALL
#endif
/* snapshot: snapshot_restore, snapshot_chunk_boundary, rollback, prefix_reuse (8 checks) */
#ifndef WITH_SNAPSHOT
#define WITH_SNAPSHOT WITH_ALL
#endif
/* sequences: multi_sequence, batch_invariance, snapshot_copy (2 checks) */
#ifndef WITH_SEQUENCES
#define WITH_SEQUENCES WITH_ALL
#endif
/* Not in this skeleton (the reference backend has no such thing; see qc_runtime_plugin.h):
 *   threads (threads_bitwise, 27 checks): set_option("threads", "N"), results bit-identical;
 *   trim (rollback_trim, 2 checks): trim(n_pos) drops positions, the DeltaNet state included;
 *   topk_only: forward_topk instead of full logits (a served runtime; topk.* checks). */

#define N_SNAP 8 /* QC_PLUGIN_MIN_SNAPSHOTS */
#define N_SEQ 3  /* QC_PLUGIN_MIN_SEQUENCES */
#define CONTEXT 8192 /* positions the state holds (tiny-long-context needs 4104) */

/* One open model. YOUR RUNTIME: replace the backend and state by your own objects. */
typedef struct {
    qc_model *model;       /* the loaded weights */
    qc_backend *be;        /* the reference backend (the stand-in runtime) */
    qc_backend_opts opts;  /* what the backend was created with; dn_kernel / chunk_size: the
                              next forward's (set_option) */
    qc_state *st;          /* the current sequence (one of seq[]) */
    qc_state *seq[N_SEQ];  /* sequences (created on first use; [0] is the first) */
    qc_state *snap[N_SNAP]; /* snapshots (created on first use) */
    int L1, H, V;          /* L + 1 hidden checkpoints, hidden size, vocabulary */
    float *hidden;         /* [L+1, CONTEXT, H]: hidden states of the last forward */
    int hidden_n;          /* tokens of the last forward (0: none) */
    char err[512];         /* the last failure */
} my_rt;

static char g_err[512] = "no error";

static int fail(my_rt *h, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(my_rt *h, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h ? h->err : g_err, h ? sizeof h->err : sizeof g_err, fmt, ap);
    va_end(ap);
    return code;
}

/* The backend's trace hook: hidden checkpoint `index` ([n, H]) of the call in progress. */
static void on_trace(void *user, int index, const char *name, int start_pos, int n, int dim,
                     const float *data) {
    my_rt *h = user;
    (void)start_pos;
    if (!h->hidden || (name && strcmp(name, "hidden")) || index < 0 || index >= h->L1 ||
        dim != h->H || n > CONTEXT)
        return;
    memcpy(h->hidden + (size_t)index * CONTEXT * h->H, data, (size_t)n * dim * sizeof(float));
}

static void my_close(void *handle) {
    my_rt *h = handle;
    if (!h) return;
    qc_backend_destroy(h->be);
    for (int i = 0; i < N_SEQ; i++) qc_state_destroy(h->seq[i]);
    for (int i = 0; i < N_SNAP; i++) qc_state_destroy(h->snap[i]);
    qc_model_free(h->model);
    free(h->hidden);
    free(h);
}

static int my_open(const char *model_dir, const char *options, qc_plugin_info *info,
                   void **handle) {
    (void)options; /* "k=v,..." after the plugin path in --backend plugin:PATH.so,k=v */
    *handle = NULL;
    my_rt *h = calloc(1, sizeof *h);
    if (!h) return fail(NULL, QC_PLUGIN_ERROR, "open: out of memory");
    qc_err e;
    qc_err_clear(&e);
    /* YOUR RUNTIME: load model_dir here */
    if (qc_model_load(model_dir, &h->model, &e) != QC_OK) {
        my_close(h);
        return fail(NULL, QC_PLUGIN_ERROR, "open %s: %s", model_dir, e.msg);
    }
    const qc_config *cfg = &h->model->cfg;
    h->L1 = cfg->n_layers + 1, h->H = cfg->hidden_size, h->V = cfg->vocab_size;
    qc_backend_opts_default(&h->opts);
    h->opts.max_tokens = CONTEXT;
    if (WITH_HIDDEN) {
        h->hidden = malloc((size_t)h->L1 * CONTEXT * h->H * sizeof(float));
        h->opts.trace = on_trace, h->opts.trace_user = h;
    }
    if ((WITH_HIDDEN && !h->hidden) || qc_state_create(cfg, CONTEXT, &h->seq[0], &e) != QC_OK ||
        qc_reference_create(h->model, &h->opts, &h->be, &e) != QC_OK) {
        my_close(h);
        return fail(NULL, QC_PLUGIN_ERROR, "open %s: %s", model_dir, e.msg[0] ? e.msg : "no memory");
    }
    h->st = h->seq[0];
    memset(info, 0, sizeof *info);
    info->vocab_size = cfg->vocab_size;
    info->hidden_size = cfg->hidden_size;
    info->n_layers = cfg->n_layers;
    info->max_tokens_per_call = CONTEXT; /* 1 for a static [1,1] export */
    info->max_context_len = CONTEXT;
    info->caps = (WITH_HIDDEN ? QC_CAP_HIDDEN : 0u) | (WITH_STATE_READ ? QC_CAP_STATE_READ : 0u) |
                 (WITH_STATE_FILL ? QC_CAP_STATE_FILL : 0u) |
                 (WITH_OPTIONS ? QC_CAP_DN_KERNEL | QC_CAP_CHUNK_SIZE : 0u) |
                 (WITH_SNAPSHOT ? QC_CAP_SNAPSHOT : 0u) | (WITH_SEQUENCES ? QC_CAP_SEQUENCES : 0u);
    snprintf(info->name, sizeof info->name, "my-runtime 0.1 (skeleton on the reference backend)");
    *handle = h;
    return QC_PLUGIN_OK;
}

static int my_reset(void *handle) {
    my_rt *h = handle;
    qc_state_reset(h->st); /* YOUR RUNTIME: every state buffer exact zeros, position 0 */
    h->hidden_n = 0;
    return QC_PLUGIN_OK;
}

static int my_forward(void *handle, const int32_t *tokens, int32_t n, int32_t start_pos,
                      int32_t all_logits, float *logits) {
    my_rt *h = handle;
    if (n < 1 || n > CONTEXT || start_pos < 0 || start_pos + n > CONTEXT)
        return fail(h, QC_PLUGIN_ERROR, "forward: %d tokens at %d: outside %d positions", (int)n,
                    (int)start_pos, CONTEXT);
    if (start_pos != h->st->pos && start_pos != 0) /* 0: the caller reset (no-KV strategy) */
        return fail(h, QC_PLUGIN_ERROR, "forward: start_pos %d, %d positions cached",
                    (int)start_pos, h->st->pos);
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= h->V)
            return fail(h, QC_PLUGIN_ERROR, "forward: token %d outside [0, %d)", (int)tokens[i],
                        h->V);
    qc_err e;
    qc_err_clear(&e);
    h->hidden_n = 0;
    /* YOUR RUNTIME: run tokens at start_pos.., logits [n, V] (or [1, V] when !all_logits) */
    const qc_call call = qc_backend_call_defaults(&h->opts); /* kernel options, trace hook */
    if (qc_backend_forward_call(h->be, &call, tokens, n, start_pos, h->st, logits, all_logits,
                                &e) != QC_OK)
        return fail(h, QC_PLUGIN_ERROR, "forward: %s", e.msg);
    h->st->pos = start_pos + n; /* the backend never advances pos itself */
    h->hidden_n = n;
    return QC_PLUGIN_OK;
}

static const char *my_last_error(void *handle) {
    my_rt *h = handle;
    return h ? h->err : g_err;
}

#if WITH_HIDDEN
/* Hidden state `index` (0 embeddings .. L after the final norm) of the last forward: [n, H]. */
static int my_get_hidden(void *handle, int32_t index, float *dst) {
    my_rt *h = handle;
    if (!h->hidden_n || index < 0 || index >= h->L1)
        return fail(h, QC_PLUGIN_ERROR, "get_hidden %d: no forward or bad index", (int)index);
    memcpy(dst, h->hidden + (size_t)index * CONTEXT * h->H,
           (size_t)h->hidden_n * h->H * sizeof(float));
    return QC_PLUGIN_OK;
}
#endif

#if WITH_STATE_READ
/* Layer `layer`'s buffer `kind` in the canonical layout (k/v: [nkv, n_pos, hd], the slots past
 * the used positions included: they must be exactly 0; conv [C, K]; recurrent [nv, dk, dv]). */
static int my_get_state(void *handle, int32_t layer, int32_t kind, int32_t n_pos, float *dst) {
    my_rt *h = handle;
    const qc_state *st = h->st;
    if (layer < 0 || layer >= st->n_layers || n_pos < 0)
        return fail(h, QC_PLUGIN_ERROR, "get_state: layer %d, n_pos %d", (int)layer, (int)n_pos);
    if (n_pos > st->max_context_len)
        return fail(h, QC_PLUGIN_UNSUPPORTED, "get_state: n_pos %d > %d", (int)n_pos,
                    st->max_context_len);
    const int full = h->model->cfg.layer_types[layer] == QC_LAYER_FULL;
    if (full != (kind == QC_STATE_K_CACHE || kind == QC_STATE_V_CACHE))
        return fail(h, QC_PLUGIN_ERROR, "get_state: layer %d has no buffer kind %d", (int)layer,
                    (int)kind);
    if (full) {
        const float *src = kind == QC_STATE_K_CACHE ? st->k_cache[layer] : st->v_cache[layer];
        const size_t hd = (size_t)st->head_dim, cap = (size_t)st->max_context_len;
        for (int g = 0; g < st->n_kv_heads; g++)
            memcpy(dst + g * n_pos * hd, src + g * cap * hd, (size_t)n_pos * hd * sizeof(float));
    } else if (kind == QC_STATE_CONV) {
        memcpy(dst, st->conv_state[layer], (size_t)st->conv_dim * st->conv_kernel * sizeof(float));
    } else {
        memcpy(dst, st->recurrent_state[layer],
               (size_t)st->n_v_heads * st->k_dim * st->v_dim * sizeof(float));
    }
    return QC_PLUGIN_OK;
}
#endif

#if WITH_STATE_FILL
/* Every element of every state buffer := value (NaN in garbage_reset); the position kept. */
static int my_fill_state(void *handle, float value) {
    qc_state_fill(((my_rt *)handle)->st, value);
    return QC_PLUGIN_OK;
}
#endif

#if WITH_OPTIONS
/* dn_kernel = chunked | recurrent, chunk_size = N: how a multi-token call runs its DeltaNet. */
static int my_set_option(void *handle, const char *key, const char *value) {
    my_rt *h = handle;
    if (!strcmp(key, "dn_kernel") && (!strcmp(value, "chunked") || !strcmp(value, "recurrent"))) {
        h->opts.dn_kernel = !strcmp(value, "chunked") ? QC_DN_CHUNKED : QC_DN_RECURRENT;
        return QC_PLUGIN_OK;
    }
    if (!strcmp(key, "chunk_size") && atoi(value) >= 1) {
        h->opts.chunk_size = atoi(value);
        return QC_PLUGIN_OK;
    }
    return fail(h, QC_PLUGIN_UNSUPPORTED, "option %s=%s not supported", key, value);
}
#endif

#if WITH_SNAPSHOT || WITH_SEQUENCES
/* A state like the current one in *slot (created on first use, fresh). */
static int need_state(my_rt *h, qc_state **slot) {
    qc_err e;
    qc_err_clear(&e);
    if (!*slot && qc_state_create(&h->model->cfg, CONTEXT, slot, &e) != QC_OK)
        return fail(h, QC_PLUGIN_ERROR, "state: %s", e.msg);
    return QC_PLUGIN_OK;
}
#endif

#if WITH_SNAPSHOT
/* Copy the whole state of the current sequence (KV, conv, recurrent, position) into a slot. */
static int my_snapshot(void *handle, int32_t slot) {
    my_rt *h = handle;
    if (slot < 0 || slot >= N_SNAP) return fail(h, QC_PLUGIN_UNSUPPORTED, "slot %d", (int)slot);
    int rc = need_state(h, &h->snap[slot]);
    if (rc == QC_PLUGIN_OK) qc_state_copy(h->snap[slot], h->st);
    return rc;
}

/* Make the current sequence exactly what snapshot(slot) saved. */
static int my_restore(void *handle, int32_t slot) {
    my_rt *h = handle;
    if (slot < 0 || slot >= N_SNAP || !h->snap[slot])
        return fail(h, QC_PLUGIN_ERROR, "restore: slot %d never written", (int)slot);
    qc_state_copy(h->st, h->snap[slot]);
    h->hidden_n = 0;
    return QC_PLUGIN_OK;
}
#endif

#if WITH_SEQUENCES
/* Sequence `seq` becomes current: later calls act on it alone. */
static int my_select_sequence(void *handle, int32_t seq) {
    my_rt *h = handle;
    if (seq < 0 || seq >= N_SEQ) return fail(h, QC_PLUGIN_UNSUPPORTED, "sequence %d", (int)seq);
    int rc = need_state(h, &h->seq[seq]);
    if (rc == QC_PLUGIN_OK) h->st = h->seq[seq], h->hidden_n = 0;
    return rc;
}
#endif

static const qc_runtime_plugin my_plugin = {
    .abi_version = QC_PLUGIN_ABI_VERSION,
    .struct_size = (uint32_t)sizeof(qc_runtime_plugin),
    .open = my_open,
    .reset = my_reset,
    .forward = my_forward,
    .close = my_close,
    .last_error = my_last_error,
#if WITH_HIDDEN
    .get_hidden = my_get_hidden,
#endif
#if WITH_STATE_READ
    .get_state = my_get_state,
#endif
#if WITH_STATE_FILL
    .fill_state = my_fill_state,
#endif
#if WITH_OPTIONS
    .set_option = my_set_option,
#endif
#if WITH_SNAPSHOT
    .snapshot = my_snapshot,
    .restore = my_restore,
#endif
#if WITH_SEQUENCES
    .select_sequence = my_select_sequence,
#endif
};

__attribute__((visibility("default"))) const qc_runtime_plugin *qc_runtime_plugin_entry(void);
__attribute__((visibility("default"))) const qc_runtime_plugin *qc_runtime_plugin_entry(void) {
    return &my_plugin;
}
