/* qc_llamacpp_plugin.c — llama.cpp (v0.5.0, the npm node-llama-cpp@3.22.1 build) as a
 * qwen-conform runtime plugin, ABI v1 (include/qc/qc_runtime_plugin.h).
 *
 * Built by ci/llamacpp against the bundle's include/llama.h + ggml/include and linked with the
 * npm package's prebuilt libllama / libggml (rpath to their directory). Compile-time paths
 * (-D, all strings): QC_LLAMACPP_BINS (the npm bins dir, for ggml_backend_load_all_from_path),
 * QC_LLAMACPP_SRC (llama.cpp source: the converter), QC_LLAMACPP_CONVERT (qc_convert.py),
 * QC_LLAMACPP_CACHE (default cache dir), QC_LLAMACPP_PYTHON (/usr/bin/python3).
 *
 * open(model_dir, options): options (comma-separated k=v)
 *   gguf=PATH         use an existing GGUF instead of converting model_dir
 *   outtype=f32|bf16|f16   conversion output type (default f32)
 *   mtp=auto|keep|drop     MTP tensors in the conversion (default auto: drop when absent)
 *   kv=f32|f16        KV cache type (default f32)
 *   flash_attn=0|1    (default 0)
 *   threads=N         (default 1)
 *   n_ctx=N           (default 4096)
 *   hidden=0|1        capture hidden states through cb_eval (default 1)
 *   state=0|1         read the state and snapshot it (default 1: the conv windows are captured
 *                     through cb_eval). state=0 with hidden=0 installs no cb_eval at all, so
 *                     llama.cpp runs each decode as one graph, as llama-bench does (for bench)
 *   poll=N            the threadpool's polling level 0..100 (default 0: threads sleep at the
 *                     barriers; llama-bench's default is 50)
 *   guard=0|1         refuse models that v0.5.0 is known to abort on in-process (default 1;
 *                     guard=0 lets the abort happen, to observe it)
 *   reconvert=1       ignore a cached conversion (success or failure) and convert again
 *   seqs=N            llama.cpp sequences (n_seq_max, unified KV; default 1). With N >= 3 the
 *                     plugin announces QC_CAP_SEQUENCES (select_sequence)
 *   rs_seq=N          llama_context_params.n_rs_seq = N recurrent-state snapshots per sequence
 *                     (default 0). N >= 1 announces QC_CAP_TRIM: trim = llama_memory_seq_rm of
 *                     the trailing positions, which llama.cpp serves for the recurrent state
 *                     only from these snapshots (rollback of up to N positions of the last call)
 *   snap=full|partial snapshot / restore through llama_state_seq_{get,set}_data_ext: flags 0
 *                     (the whole sequence, default) or LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY (the
 *                     recurrent part only, the KV cells past the snapshot dropped on restore:
 *                     llama-server's context checkpoints; see README for what it measures)
 *   fill=0|1          announce QC_CAP_STATE_FILL (default 1; fill_state writes the value into
 *                     every element of the sequence's state blob and sets it back)
 *   fix_mrope=1       convert with qc_convert.py --mrope-section auto (a workaround, off by
 *                     default: rope sections summing to rotary_dim/2 when config.json has none)
 * Conversion: QC_LLAMACPP_PYTHON qc_convert.py into <cache>/gguf/<key>/ where key hashes the
 * model files, qc_convert.py, the llama.cpp tag, outtype and mtp; later opens reuse it (a
 * failed conversion is cached too, with its log, so a battery does not re-run it per case).
 *
 * Everything llama.cpp logs goes to a ring buffer (llama_log_set), never to stdout; its last
 * lines are appended to error messages. See adapters/llamacpp/README.md for the state layouts.
 */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wformat-truncation" /* paths are bounded by PATH_MAX_ */
#include "qc_llamacpp_internal.h"

static int g_backend_ready; /* llama_backend_init done (process-wide) */

/* ===================================================================================== */
/* plugin entries                                                                        */
/* ===================================================================================== */


static const char *ftype_name(int ft) {
    switch (ft) {
    case 0: return "F32";
    case 1: return "F16";
    case 32: return "BF16";
    case 7: return "Q8_0";
    default: return "quantized";
    }
}

/* Threads: with more than one, attach a persistent ggml threadpool with polling off. Without
 * one, ggml's CPU backend makes a fresh pool for every graph compute -- and the cb_eval
 * captures split each llama_decode into ~2L+3 computes -- whose threads spin-wait at the
 * barriers: on a loaded 2-vCPU machine that ran a tiny model hundreds of times slower than
 * one thread (measured: 31-60 s vs 0.14 s for 128 tokens). */
typedef ggml_threadpool_t (*tp_new_fn)(struct ggml_threadpool_params *);
typedef void (*tp_free_fn)(ggml_threadpool_t);

static int apply_threads(qc_llama *h, int n) {
    ggml_backend_reg_t reg = ggml_backend_reg_by_name("CPU");
    tp_new_fn tp_new = reg ? (tp_new_fn)ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new") : NULL;
    tp_free_fn tp_free = reg ? (tp_free_fn)ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free") : NULL;
    ggml_threadpool_t tp = NULL;
    if (n > 1 && tp_new && tp_free) {
        struct ggml_threadpool_params tpp = ggml_threadpool_params_default(n);
        tpp.poll = (uint32_t)h->poll;
        tp = tp_new(&tpp);
    }
    llama_detach_threadpool(h->ctx);
    if (h->tp && tp_free) tp_free(h->tp);
    h->tp = tp;
    if (tp) llama_attach_threadpool(h->ctx, tp, tp);
    llama_set_n_threads(h->ctx, n, n);
    h->threads = n;
    return QC_PLUGIN_OK;
}

static void p_close(void *handle) {
    qc_llama *h = handle;
    if (!h) return;
    if (h->ctx) llama_detach_threadpool(h->ctx);
    if (h->tp) {
        ggml_backend_reg_t reg = ggml_backend_reg_by_name("CPU");
        tp_free_fn tp_free = reg ? (tp_free_fn)ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free") : NULL;
        if (tp_free) tp_free(h->tp);
        h->tp = NULL;
    }
    if (h->ctx) llama_free(h->ctx);
    if (h->model) llama_model_free(h->model);
    free(h->hidden);
    free(h->conv_win);
    free(h->conv_scratch);
    free(h->blob);
    free(h->kv_pos);
    free_snapshots(h);
    free(h);
}

/* The context for the options: one n_ctx-token batch, sequences (unified KV), rollback
 * snapshots, threads, KV type, flash attention, the cb_eval captures. */
static struct llama_context_params context_params(qc_llama *h) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)h->n_ctx;
    cp.n_batch = (uint32_t)h->n_ctx;
    cp.n_ubatch = 512;
    cp.n_seq_max = (uint32_t)h->n_seqs;     /* independent sequences (select_sequence) */
    cp.n_rs_seq = (uint32_t)h->rs_seq;      /* recurrent snapshots for a rollback (trim) */
    if (h->n_seqs > 1) cp.kv_unified = true; /* ... sharing one n_ctx-cell KV buffer */
    cp.n_threads = h->threads;
    cp.n_threads_batch = h->threads;
    cp.flash_attn_type = h->flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = h->kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.type_v = h->kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.embeddings = false;
    cp.no_perf = true;
    /* the captures split every llama_decode into a graph run per captured tensor: none when
     * neither hidden states nor the state are wanted */
    cp.cb_eval = h->want_hidden || h->want_state ? eval_cb : NULL;
    cp.cb_eval_user_data = h->want_hidden || h->want_state ? h : NULL;
    return cp;
}

static int p_open(const char *model_dir, const char *options, qc_plugin_info *info, void **handle) {
    *handle = NULL;
    g_open_err[0] = 0;
    const char *dbg = getenv("QC_LLAMACPP_DEBUG");
    g_debug = dbg && !strcmp(dbg, "1");
    qc_llama *h = calloc(1, sizeof *h);
    if (!h) return set_err(NULL, QC_PLUGIN_ERROR, "out of memory");
    int rc = parse_options(h, options);
    if (rc) {
        free(h);
        return rc;
    }
    /* negative control for the layout mapping (README): llama.cpp's own head order and S^T */
    const char *lay = getenv("QC_LLAMACPP_LAYOUT");
    h->raw_layout = lay && !strcmp(lay, "raw");
    char gguf[PATH_MAX_];
    if (h->gguf[0]) {
        snprintf(gguf, sizeof gguf, "%s", h->gguf);
    } else {
        rc = convert_model(h, model_dir, gguf, sizeof gguf);
        if (rc) {
            free(h);
            return rc;
        }
    }
    if (!g_backend_ready) {
        llama_log_set(log_cb, NULL);
        ggml_set_abort_callback(abort_cb);
        const char *bins = getenv("QC_LLAMACPP_BINS");
        ggml_backend_load_all_from_path(bins && bins[0] ? bins : QC_LLAMACPP_BINS);
        llama_backend_init();
        g_backend_ready = 1;
    }
    ring_clear();
    rc = read_meta(h, gguf);
    if (rc) {
        free(h);
        return rc;
    }
    h->W = h->K + h->rs_seq;
    if (h->W > 128) {
        set_err(NULL, QC_PLUGIN_UNSUPPORTED, "rs_seq=%d: conv kernel %d + rs_seq must be <= 128", h->rs_seq, h->K);
        free(h);
        return QC_PLUGIN_UNSUPPORTED;
    }

    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    h->model = llama_model_load_from_file(gguf, mp);
    if (!h->model) {
        /* the loader's own reason first (reports cut long messages) */
        char key[1024] = "";
        if (ring_find("error loading model:", 1, key, sizeof key)) {
            set_err(NULL, QC_PLUGIN_ERROR, "cannot load: %s [llama.cpp " QC_LLAMACPP_TAG ", %s]", key, gguf);
        } else {
            char what[PATH_MAX_ + 200];
            snprintf(what, sizeof what, "cannot load: llama_model_load_from_file failed [llama.cpp "
                     QC_LLAMACPP_TAG ", %s]", gguf);
            set_err_log(NULL, QC_PLUGIN_ERROR, what);
        }
        free(h);
        return QC_PLUGIN_ERROR;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(h->model);
    h->V = llama_vocab_n_tokens(vocab);
    h->H = llama_model_n_embd(h->model);
    int L = llama_model_n_layer(h->model);
    if (L != h->L) {
        set_err(NULL, QC_PLUGIN_ERROR, "cannot load: llama.cpp reports %d layers, the GGUF metadata %d", L, h->L);
        p_close(h);
        return QC_PLUGIN_ERROR;
    }

    struct llama_context_params cp = context_params(h);
    h->ctx = llama_init_from_model(h->model, cp);
    if (!h->ctx) {
        set_err_log(NULL, QC_PLUGIN_ERROR, "cannot load: llama_init_from_model failed");
        p_close(h);
        return QC_PLUGIN_ERROR;
    }
    apply_threads(h, h->threads);
    h->conv_win = calloc(conv_win_floats(h), sizeof(float));
    int seqs_ok = 1;
    for (int q = 0; q < h->n_seqs; q++)
        seqs_ok &= (h->seqs[q].conv_win = calloc(conv_win_floats(h), sizeof(float))) != NULL;
    if (!h->conv_win || !seqs_ok) {
        set_err(NULL, QC_PLUGIN_ERROR, "out of memory");
        p_close(h);
        return QC_PLUGIN_ERROR;
    }
    snprintf(h->name, sizeof h->name, "llama.cpp " QC_LLAMACPP_TAG " (%s GGUF, %s KV, flash attn %s)",
             ftype_name(h->file_type), h->kv_f16 ? "F16" : "F32", h->flash ? "on" : "off");
    memset(info, 0, sizeof *info);
    info->vocab_size = h->V;
    info->hidden_size = h->H;
    info->n_layers = h->L;
    info->max_tokens_per_call = 0;
    info->max_context_len = (int32_t)llama_n_ctx(h->ctx);
    if (h->rs_seq > 0 && llama_n_rs_seq(h->ctx) != (uint32_t)h->rs_seq) {
        set_err(NULL, QC_PLUGIN_ERROR, "cannot load: llama_n_rs_seq returned %u for rs_seq=%d",
                llama_n_rs_seq(h->ctx), h->rs_seq);
        p_close(h);
        return QC_PLUGIN_ERROR;
    }
    info->caps = (h->want_state ? QC_CAP_STATE_READ | QC_CAP_SNAPSHOT : 0) | QC_CAP_THREADS |
                 (h->want_state && h->want_fill ? QC_CAP_STATE_FILL : 0) |
                 (h->rs_seq > 0 ? QC_CAP_TRIM : 0) |
                 (h->n_seqs >= QC_PLUGIN_MIN_SEQUENCES ? QC_CAP_SEQUENCES : 0) | (h->want_hidden ? QC_CAP_HIDDEN : 0);
    snprintf(info->name, sizeof info->name, "%s", h->name);
    *handle = h;
    return QC_PLUGIN_OK;
}

static int p_reset(void *handle) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    /* One sequence: llama_memory_clear(data = true) zeroes the KV and recurrent buffers (the
     * ABI's "every state buffer to exact zeros"). Several: only this sequence's cells can go
     * (llama_memory_seq_rm), their data stays -- and llama.cpp "zeroes" a reused recurrent cell
     * by scaling it by 0 and masks a stale KV cell by adding -inf, so a NaN left there
     * survives (FINDINGS.md: garbage_reset with seqs >= 2) */
    if (h->n_seqs == 1) llama_memory_clear(llama_get_memory(h->ctx), true);
    else llama_memory_seq_rm(llama_get_memory(h->ctx), h->seq, -1, -1);
    h->pos = 0;
    h->cap_tokens = 0;
    h->hid_ok = 0;
    memset(h->hid_rows, 0, sizeof h->hid_rows);
    memset(h->conv_win_ok, 0, sizeof h->conv_win_ok);
    memset(h->conv_win, 0, conv_win_floats(h) * sizeof(float));
    invalidate_state(h);
    return QC_PLUGIN_OK;
}

static int p_forward(void *handle, const int32_t *tokens, int32_t n, int32_t start_pos,
                     int32_t all_logits, float *logits) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    h->err[0] = 0;
    if (n <= 0) return set_err(h, QC_PLUGIN_ERROR, "forward: n = %d", n);
    if (start_pos == 0 && h->pos != 0) p_reset(h); /* a new sequence from position 0 */
    if (start_pos != h->pos)
        return set_err(h, QC_PLUGIN_ERROR, "forward: start_pos %d, but the runtime holds %d positions "
                       "(llama.cpp's recurrent memory cannot be rewound)", start_pos, h->pos);
    if ((int64_t)start_pos + n > (int64_t)llama_n_ctx(h->ctx))
        return set_err(h, QC_PLUGIN_ERROR, "forward: positions up to %d exceed n_ctx %u (option n_ctx=N)",
                       start_pos + n, llama_n_ctx(h->ctx));
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= h->V)
            return set_err(h, QC_PLUGIN_ERROR, "forward: token %d at index %d outside [0, %d)", tokens[i], i, h->V);

    /* outputs: every row when all logits or hidden states are wanted (result_norm keeps only
     * the output rows) */
    int out_all = all_logits || h->want_hidden;
    if (h->want_hidden) {
        size_t need = (size_t)(h->L + 1) * (size_t)n * (size_t)h->H;
        float *p = realloc(h->hidden, need * sizeof(float));
        if (!p) return set_err(h, QC_PLUGIN_ERROR, "out of memory (hidden capture)");
        h->hidden = p;
    }
    h->cap_tokens = n;
    h->hid_ok = 0;
    memset(h->hid_rows, 0, sizeof h->hid_rows);
    memset(h->conv_win_ok, 0, sizeof h->conv_win_ok);
    invalidate_state(h);

    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int32_t i = 0; i < n; i++) {
        b.token[i] = tokens[i];
        b.pos[i] = start_pos + i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = h->seq;
        b.logits[i] = (int8_t)(out_all || i == n - 1);
    }
    b.n_tokens = n;
    ring_clear();
    h->capturing = 1;
    int32_t r = llama_decode(h->ctx, b);
    h->capturing = 0;
    llama_batch_free(b);
    if (r != 0) {
        char what[128];
        snprintf(what, sizeof what, "forward: llama_decode returned %d", r);
        /* the memory may be partially updated: the sequence is no longer usable */
        h->pos = -1;
        return set_err_log(h, QC_PLUGIN_ERROR, what);
    }
    h->pos = start_pos + n;
    for (int32_t i = all_logits ? 0 : n - 1, o = 0; i < n; i++, o++) {
        const float *row = llama_get_logits_ith(h->ctx, i);
        if (!row) return set_err_log(h, QC_PLUGIN_ERROR, "forward: no logits for a row");
        memcpy(logits + (size_t)o * h->V, row, (size_t)h->V * sizeof(float));
    }
    if (h->want_hidden) {
        h->hid_ok = 1;
        for (int i = 0; i <= h->L; i++)
            if (h->hid_rows[i] != n) h->hid_ok = 0;
    }
    return QC_PLUGIN_OK;
}

static int p_get_hidden(void *handle, int32_t index, float *dst) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    if (!h->want_hidden) return set_err(h, QC_PLUGIN_UNSUPPORTED, "hidden capture is off (hidden=0)");
    if (index < 0 || index > h->L) return set_err(h, QC_PLUGIN_ERROR, "get_hidden: index %d outside 0..%d", index, h->L);
    if (h->cap_tokens <= 0) return set_err(h, QC_PLUGIN_ERROR, "get_hidden: no forward since open/reset");
    if (h->hid_rows[index] != h->cap_tokens)
        return set_err(h, QC_PLUGIN_ERROR, "get_hidden: index %d: captured %d of %d rows from the graph "
                       "(tensor %s)", index, h->hid_rows[index], h->cap_tokens,
                       index == 0 ? "model.input_embed" : index == h->L ? "result_norm" : "l_out-N");
    memcpy(dst, h->hidden + (size_t)index * h->cap_tokens * h->H, (size_t)h->cap_tokens * h->H * sizeof(float));
    return QC_PLUGIN_OK;
}

static int p_set_option(void *handle, const char *key, const char *value) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    if (key && !strcmp(key, "threads")) {
        int t;
        if (!value || parse_int(value, 1, 512, &t)) return set_err(h, QC_PLUGIN_ERROR, "threads=%s: invalid", value ? value : "");
        return apply_threads(h, t);
    }
    return set_err(h, QC_PLUGIN_UNSUPPORTED, "set_option: '%s' is not supported by llama.cpp (threads only)", key ? key : "");
}

static const char *p_last_error(void *handle) {
    qc_llama *h = handle;
    return h ? h->err : g_open_err;
}

static const qc_runtime_plugin g_plugin = {
    .abi_version = QC_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(qc_runtime_plugin),
    .open = p_open,
    .reset = p_reset,
    .forward = p_forward,
    .close = p_close,
    .last_error = p_last_error,
    .get_hidden = p_get_hidden,
    .get_state = p_get_state,
    .fill_state = p_fill_state,
    .set_option = p_set_option,
    .snapshot = p_snapshot,
    .restore = p_restore,
    .select_sequence = p_select_sequence,
    .trim = p_trim,          /* announced with rs_seq >= 1 (llama.cpp's rollback snapshots) */
};

__attribute__((visibility("default"))) const qc_runtime_plugin *qc_runtime_plugin_entry(void) {
    return &g_plugin;
}

