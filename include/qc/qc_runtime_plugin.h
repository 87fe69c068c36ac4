/* qc_runtime_plugin.h — the runtime plugin ABI, version 1: how a runtime under test (a shared
 * library the user builds) plugs into `qwen-conform check --backend plugin:PATH.so[,k=v...]`.
 *
 * Plain C, no qwen-conform types, no allocation across the boundary: the harness allocates every
 * buffer at the size it computes from the model's config.json and the plugin fills it.
 *
 * The library exports one symbol, QC_PLUGIN_ENTRY_SYMBOL:
 *     const qc_runtime_plugin *qc_runtime_plugin_entry(void);
 * The harness reads abi_version and struct_size first and refuses (exit 2, naming the file) a
 * plugin whose abi_version != QC_PLUGIN_ABI_VERSION, whose struct_size is smaller than the v1
 * struct, or that lacks a mandatory entry. Later minor additions append fields at the end and
 * keep abi_version: a harness reads only the fields that struct_size covers.
 *
 * Return convention: every int-returning call returns QC_PLUGIN_OK (0) on success, or
 * QC_PLUGIN_ERROR / QC_PLUGIN_UNSUPPORTED with a message available from last_error(handle).
 * A plugin never calls exit(), never prints to stdout, and must be callable from one thread at
 * a time (the harness never calls one handle concurrently).
 *
 * Canonical layouts (golden/SCHEMA.md): float32, row-major, batch 1, Hugging Face head order.
 *   logits           [n, V] (all_logits) or [1, V] (last position only)
 *   hidden index i   [n, H]: i = 0 embeddings, 1..L-1 output of layer i-1, L after final norm
 *   k_cache, v_cache [n_kv_heads, n_pos, head_dim]  keys after q/k-norm and RoPE; raw values
 *   conv_state       [conv_dim, conv_kernel]  the last K pre-activation in_proj_qkv columns,
 *                    oldest first, zero-padded on the left
 *   recurrent_state  [n_v_heads, k_head_dim, v_head_dim]  the Gated DeltaNet state S
 *   router ids       [n, k] int32: per position the k = num_experts_per_tok chosen experts of
 *                    one layer, in descending router probability (golden/SCHEMA.md "MoE")
 *   router weights   [n, k] float32: their weights, the top-k probabilities renormalised to
 *                    sum 1 (what the MoE block multiplies the experts' outputs by)
 *   mlp_in layer l   [n, H]: the residual stream after layer l's mixer (attention or DeltaNet)
 *                    and its residual add, before post_attention_layernorm: the input of the
 *                    layer's MLP (MoE block) — golden/SCHEMA.md mlp_in / moe_in
 */
#ifndef QC_RUNTIME_PLUGIN_H
#define QC_RUNTIME_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QC_PLUGIN_ABI_VERSION 1u
#define QC_PLUGIN_ENTRY_SYMBOL "qc_runtime_plugin_entry"

enum {
    QC_PLUGIN_OK = 0,
    QC_PLUGIN_ERROR = 1,       /* the call failed; last_error() says why */
    QC_PLUGIN_UNSUPPORTED = 2  /* valid request the runtime cannot serve (e.g. an option) */
};

/* Capability bits (qc_plugin_info.caps). A check that needs a capability the runtime does not
 * announce is reported SKIPPED with the reason (`--require CAP` turns that into a failure). */
#define QC_CAP_HIDDEN      (1u << 0) /* get_hidden: hidden states of the last forward */
#define QC_CAP_STATE_READ  (1u << 1) /* get_state: KV cache, conv and recurrent state */
#define QC_CAP_STATE_FILL  (1u << 2) /* fill_state: every state element := a value (garbage) */
#define QC_CAP_THREADS     (1u << 3) /* set_option("threads", "N") */
#define QC_CAP_DN_KERNEL   (1u << 4) /* set_option("dn_kernel", "chunked"|"recurrent") */
#define QC_CAP_CHUNK_SIZE  (1u << 5) /* set_option("chunk_size", "N") */
/* v1 minor additions (the entries after set_option; a harness uses them only when struct_size
 * covers them and the bit is announced): */
#define QC_CAP_SNAPSHOT    (1u << 6) /* snapshot / restore: the whole state of the sequence */
#define QC_CAP_SEQUENCES   (1u << 7) /* select_sequence: several independent sequences */
#define QC_CAP_TRIM        (1u << 8) /* trim: roll the sequence back to fewer positions */
/* v1 minor addition (forward_topk, after trim; used only when struct_size covers it and the
 * bit is announced): */
#define QC_CAP_TOPK_ONLY   (1u << 9) /* forward_topk: top-k log-probabilities, no full logits */
/* v1 minor addition (get_router, after forward_topk; used only when struct_size covers it and
 * the bit is announced): */
#define QC_CAP_ROUTER      (1u << 10) /* get_router: a MoE model's router choices */
/* v1 minor addition (get_mlp_in, after get_router; used only when struct_size covers it and
 * the bit is announced): */
#define QC_CAP_MLP_IN      (1u << 11) /* get_mlp_in: each layer's mixer output (mixer or MLP?) */

/* At least this many snapshot slots (0..QC_PLUGIN_MIN_SNAPSHOTS-1) with QC_CAP_SNAPSHOT, and
 * sequences (0..QC_PLUGIN_MIN_SEQUENCES-1) with QC_CAP_SEQUENCES. */
#define QC_PLUGIN_MIN_SNAPSHOTS 8
#define QC_PLUGIN_MIN_SEQUENCES 3
/* forward_topk is asked for 1 <= k <= QC_PLUGIN_MAX_TOPK entries per position (k <= V). */
#define QC_PLUGIN_MAX_TOPK 100

/* State buffer kinds for get_state. */
enum { QC_STATE_K_CACHE = 0, QC_STATE_V_CACHE = 1, QC_STATE_CONV = 2, QC_STATE_RECURRENT = 3 };

/* What the runtime reports after open (the harness checks the dims against config.json). */
typedef struct {
    int32_t vocab_size;          /* V as the runtime sees it */
    int32_t hidden_size;         /* H */
    int32_t n_layers;            /* L */
    int32_t max_tokens_per_call; /* largest n forward accepts; 1 = a static [1,1] export (the
                                    harness then drives prefill one token per call); 0 = any */
    int32_t max_context_len;     /* positions the runtime holds; 0 = no limit */
    uint32_t caps;               /* QC_CAP_* bits */
    char name[128];              /* for reports, e.g. "llama.cpp v0.5.0 (F32 KV, no flash attn)" */
} qc_plugin_info;

typedef struct qc_runtime_plugin {
    uint32_t abi_version; /* QC_PLUGIN_ABI_VERSION */
    uint32_t struct_size; /* sizeof(qc_runtime_plugin) the plugin was built with */

    /* ---- mandatory ---- */
    /* Load the Hugging Face model directory. options: the text after the first ',' of the
     * --backend value ("k=v,k=v", "" when none). Fills info. On failure *handle may be NULL;
     * last_error(NULL) then gives the reason. The state starts fresh (as after reset). */
    int (*open)(const char *model_dir, const char *options, qc_plugin_info *info, void **handle);
    /* Start a new sequence: every state buffer to exact zeros, position 0. */
    int (*reset)(void *handle);
    /* Process tokens[0..n) at positions start_pos..start_pos+n-1 against the state and update it.
     * logits: [n, V] when all_logits, else [1, V] (the last position). The harness calls with
     * start_pos = the positions consumed so far, except that it may call start_pos = 0 right after
     * reset (the no-KV-cache strategy recomputes the whole sequence). */
    int (*forward)(void *handle, const int32_t *tokens, int32_t n, int32_t start_pos,
                   int32_t all_logits, float *logits);
    void (*close)(void *handle); /* NULL-safe; frees everything */
    /* Text of the last failure on this handle (or of the last failed open when handle is NULL).
     * Owned by the plugin, valid until the next call. Never NULL. */
    const char *(*last_error)(void *handle);

    /* ---- optional: NULL, or announced in info.caps ---- */
    /* QC_CAP_HIDDEN: hidden state `index` (0..L) of the last forward call into dst [n, H]. */
    int (*get_hidden)(void *handle, int32_t index, float *dst);
    /* QC_CAP_STATE_READ: layer `layer`'s buffer `kind` (QC_STATE_*) into dst, canonical layout.
     * For the caches, n_pos positions 0..n_pos-1 ([nkv, n_pos, hd]); n_pos may exceed the
     * positions used so far (the unused_slots check reads those slots: they must be exactly 0);
     * return QC_PLUGIN_UNSUPPORTED when n_pos exceeds what the runtime can expose. */
    int (*get_state)(void *handle, int32_t layer, int32_t kind, int32_t n_pos, float *dst);
    /* QC_CAP_STATE_FILL: set every element of every state buffer (unused slots included) to
     * value (NaN in the garbage_reset check). The position is left as it is. */
    int (*fill_state)(void *handle, float value);
    /* QC_CAP_THREADS / DN_KERNEL / CHUNK_SIZE: change a setting between calls. Unknown key:
     * QC_PLUGIN_UNSUPPORTED. "dn_kernel" ("chunked" | "recurrent") and "chunk_size" ("N")
     * concern calls of n > 1 tokens only: a one-token call always runs the token recurrence.
     * `check` sets them only for the runs of chunked_eq_recurrent (recurrent, then chunked, at
     * chunk_size 64) and chunk_sweep (chunked at chunk_size 1, 3, 64, the whole prompt), each
     * value right after that run's reset and only when it differs from the last one set; it
     * never sets a value back: every run before the first of them uses the plugin's own
     * defaults, later ones the last values set (docs/adapter-protocol.md, "dn_kernel and
     * chunk_size"). `record` sets --dn-kernel / --chunk-size (chunked / 64) before every run. */
    int (*set_option)(void *handle, const char *key, const char *value);

    /* ---- optional v1 additions (state lifecycle): present when struct_size covers them ---- */
    /* QC_CAP_SNAPSHOT: copy the whole state of the current sequence (every KV position, conv
     * and recurrent state, the position count) into snapshot slot `slot` (0..7), replacing what
     * the slot held. A copy: later forwards must not change it. */
    int (*snapshot)(void *handle, int32_t slot);
    /* QC_CAP_SNAPSHOT: make the current sequence's state exactly what snapshot(slot) saved
     * (whatever the sequence held before, NaN garbage included); the slot keeps its copy.
     * QC_PLUGIN_ERROR for a slot never written. */
    int (*restore)(void *handle, int32_t slot);
    /* QC_CAP_SEQUENCES: make sequence `seq` (0..2 at least) the current one: every later
     * reset / forward / get_state / fill_state / snapshot / restore / trim acts on it alone.
     * Sequences start fresh; open selects 0. UNSUPPORTED beyond what the runtime holds. */
    int (*select_sequence)(void *handle, int32_t seq);
    /* QC_CAP_TRIM: drop the positions n_pos.. of the current sequence (n_pos <= the positions
     * consumed), so that the next forward starts at n_pos exactly as if they had never been
     * processed (speculative-decoding rollback; the recurrent state must come back too). */
    int (*trim)(void *handle, int32_t n_pos);

    /* ---- optional v1 addition (top-k only): present when struct_size covers it ---- */
    /* QC_CAP_TOPK_ONLY: a runtime that cannot return full logits (a served or fused-sampling
     * runtime). Like forward (same tokens, positions and state update), but instead of the
     * logits, per position i of the call (every position, all n of them) the k token ids of the
     * highest log-probability in descending order, ids [n, k] (each in [0, V), distinct), and
     * their log-probabilities log_softmax(logits)[id], logprobs [n, k] (finite, <= 0, non-
     * increasing). 1 <= k <= min(V, QC_PLUGIN_MAX_TOPK). The harness validates the answer: a
     * bad one (an id out of range, NaN, ascending values) FAILs the runtime. With this bit the
     * harness calls forward_topk where it would call forward; forward (still mandatory) may
     * answer QC_PLUGIN_UNSUPPORTED, and the checks that need full logits, hidden states or the
     * state are SKIPPED ("capability 'topk_only'"). */
    int (*forward_topk)(void *handle, const int32_t *tokens, int32_t n, int32_t start_pos,
                        int32_t k, int32_t *ids, float *logprobs);

    /* ---- optional v1 addition (MoE router choices): present when struct_size covers it ---- */
    /* QC_CAP_ROUTER (a MoE model: config.json num_experts > 0; every layer has a router): the
     * router's choices in layer `layer` (0..L-1) during the last successful forward call, for
     * each of its n positions: the k = num_experts_per_tok chosen expert ids in descending router
     * probability into ids [n, k] (each in [0, num_experts), distinct) and their renormalised
     * weights into weights [n, k] (canonical layouts above). The harness calls it after a
     * forward, once per layer, only when a check needs the router (router_topk) or `record`
     * writes it; QC_PLUGIN_ERROR when there was no successful forward since open / reset. The
     * values are compared as they are: an id out of range or repeated, a NaN weight FAILs
     * router_topk with the evidence. */
    int (*get_router)(void *handle, int32_t layer, int32_t *ids, float *weights);

    /* ---- optional v1 addition (the mixer / MLP split): present when struct_size covers it ----
     * QC_CAP_MLP_IN: layer `layer`'s (0..L-1) mlp_in (canonical layouts above) of the last
     * successful forward call into dst [n, H]. The harness calls it beside get_hidden, when a
     * check localises a divergence: with it, a layer that diverges is split into its mixer
     * (mlp_in already differs) or its MLP / MoE block (mlp_in agrees, the layer output does not);
     * without it the localisation names the layer only. QC_PLUGIN_ERROR when there was no
     * successful forward since open / reset. */
    int (*get_mlp_in)(void *handle, int32_t layer, float *dst);
} qc_runtime_plugin;

typedef const qc_runtime_plugin *(*qc_runtime_plugin_entry_fn)(void);

/* The v1 struct size; a plugin whose struct_size is smaller is refused. */
#define QC_PLUGIN_V1_SIZE (offsetof(qc_runtime_plugin, set_option) + sizeof(void *))
/* The size that covers the lifecycle entries (snapshot .. trim). */
#define QC_PLUGIN_LIFECYCLE_SIZE (offsetof(qc_runtime_plugin, trim) + sizeof(void *))
/* The size that covers forward_topk (a plugin built before it has a smaller struct_size: the
 * harness never reads the field, whatever the bit says). */
#define QC_PLUGIN_TOPK_SIZE (offsetof(qc_runtime_plugin, forward_topk) + sizeof(void *))
/* The size that covers get_router (a plugin built before it: the field is never read). */
#define QC_PLUGIN_ROUTER_SIZE (offsetof(qc_runtime_plugin, get_router) + sizeof(void *))
/* The size that covers get_mlp_in (a plugin built before it: the field is never read). */
#define QC_PLUGIN_MLP_IN_SIZE (offsetof(qc_runtime_plugin, get_mlp_in) + sizeof(void *))

#ifdef __cplusplus
}
#endif

#endif /* QC_RUNTIME_PLUGIN_H */
