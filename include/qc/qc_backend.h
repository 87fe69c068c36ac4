/* qc_backend.h — the backend interface: a whole-model forward pass behind function pointers.
 *
 * A backend owns its forward pass (and any repacked weights / scratch, allocated once at
 * create); it shares the loader (qc_model), the state (qc_state) and the prefill controller.
 *
 * The call contract — checked ONCE, for every backend, by qc_backend_forward_call (runtime),
 * which then calls be->forward; the prefill controller and every other caller go through it:
 *   qc_backend_forward_call(be, call, tokens[n], start_pos, st, logits, all_logits, err)
 *   processes tokens at positions start_pos .. start_pos+n-1 against `st` and updates it
 *   (k/v cache slots start_pos.., conv_state, recurrent_state). It never resets the state; it
 *   never changes st->pos (the controller does). n > 1 is a parallel prefill (projections
 *   over all n tokens, causal attention within the call against the cache, DeltaNet by the
 *   chunked algorithm or the recurrence per call->dn_kernel).
 *   logits: NULL (skip the lm_head), or [n, V] when all_logits, or [1, V] (last position).
 * Refused before anything is touched, with one wording whatever the backend (messages start
 * with "forward: "):
 *   QC_ERR_ARG    tokens or st NULL; st's geometry differs from the model config (layers,
 *                 kv heads, head_dim, conv dim / kernel, DeltaNet heads and dims, or a missing
 *                 buffer of a layer); call->dn_kernel not QC_DN_CHUNKED / QC_DN_RECURRENT;
 *                 call->chunk_size < 1; a chunked call whose chunk min(chunk_size, n) exceeds
 *                 be->max_chunk_tokens (when > 0: the backend's chunk scratch, sized at create)
 *   QC_ERR_RANGE  n < 1 or n > opts.max_tokens; start_pos < 0; start_pos + n > the state
 *                 capacity (st->max_context_len); a token id outside [0, V)
 * be->forward is the backend's math only: it may assume the contract holds (it keeps only the
 * checks about its own internals). Errors raised after validation (a runtime under test failing)
 * may leave the state partially updated.
 *
 * Options of one call (qc_call: the DeltaNet kernel, its chunk size, the trace hook that captures
 * hidden states / mixer outputs / router choices) are an argument of the call, never a field the
 * caller pokes and restores; qc_backend_forward is the call with the backend's defaults
 * (be->opts.dn_kernel, chunk_size, trace, trace_user, fixed at create like n_threads,
 * max_tokens and profile).
 */
#ifndef QC_BACKEND_H
#define QC_BACKEND_H

#include <stdint.h>

#include "qc/qc_model.h"
#include "qc/qc_state.h"
#include "qc/qc_status.h"

typedef enum { QC_DN_CHUNKED = 0, QC_DN_RECURRENT = 1 } qc_dn_kernel;

/* Trace hook: called once per forward for each hidden-state checkpoint `index` in 0..L:
 *   index 0 = embeddings, index i (1..L-1) = output of layer i-1, index L = after the final
 *   norm (Hugging Face's hidden_states convention). data is [n_tokens, dim] for positions
 *   start_pos .. start_pos+n_tokens-1. `name` is "hidden". The data is only valid during the
 *   call. */
/* Two more trace names tell the mixer from the MLP (a consumer of hidden states must check
 * name == "hidden"):
 *   "moe_in"      (MoE models) index = layer i (0..L-1), dim = H: the residual stream after
 *                 layer i's mixer (attention or DeltaNet) and before its MoE block.
 *   "mlp_in"      (dense models) the same for the MLP block.
 * MoE models add:
 *   "router_topk" index = layer i, dim = 2k: per token, the k chosen expert ids (as floats, in
 *                 descending router probability) followed by their k renormalised weights. */
typedef void (*qc_trace_fn)(void *user, int index, const char *name, int start_pos,
                            int n_tokens, int dim, const float *data);

/* What one forward call computes besides the logits: passed with the call, read only during it. */
typedef struct {
    qc_dn_kernel dn_kernel; /* multi-token DeltaNet: chunked (default) or token recurrence */
    int chunk_size;         /* chunked DeltaNet chunk size (default 64) */
    qc_trace_fn trace;      /* what to capture: hidden / mlp_in / moe_in / router_topk rows
                               (NULL = nothing) */
    void *trace_user;       /* trace's first argument */
} qc_call;

/* dn_kernel chunked, chunk_size 64, no trace. */
void qc_call_default(qc_call *c);

/* A backend's create-time options. dn_kernel .. trace_user are the qc_call that
 * qc_backend_forward uses (qc_backend_call_defaults); every other caller passes its own. */
typedef struct {
    qc_dn_kernel dn_kernel; /* default call: multi-token DeltaNet kernel (default chunked) */
    int chunk_size;         /* default call: chunked DeltaNet chunk size (default 64) */
    int n_threads;          /* optimized backend threads (0 = OpenMP default); ignored by ref */
    int max_tokens;         /* largest n accepted by forward (scratch is sized for it) */
    qc_trace_fn trace;      /* default call: hidden-state hook (NULL = none) */
    void *trace_user;
    struct qc_opt_profile *profile; /* optimized backend: the per-op timer (`bench --profile-ops`,
                                     * qc/qc_optimized_profile.h), caller-owned, outliving the
                                     * backend; NULL off; fixed at create; the reference ignores it */
} qc_backend_opts;

/* dn_kernel chunked, chunk_size 64, n_threads 0, max_tokens 128, no trace. */
void qc_backend_opts_default(qc_backend_opts *o);
/* The qc_call of qc_backend_forward: o's dn_kernel, chunk_size, trace, trace_user. */
qc_call qc_backend_call_defaults(const qc_backend_opts *o);

/* Capability bits: the same values as the plugin ABI's QC_CAP_* (qc_runtime_plugin.h). A
 * built-in backend has all of them but THREADS (reference) ; a runtime under test announces
 * its own. The check engine plans the battery from them: a check whose capability is missing is
 * reported SKIPPED with the reason. */
#define QC_BE_CAP_HIDDEN     (1u << 0) /* call->trace is called with every hidden state */
#define QC_BE_CAP_STATE_READ (1u << 1) /* st holds the runtime's state (native, or sync_state) */
#define QC_BE_CAP_STATE_FILL (1u << 2) /* qc_backend_fill_state reaches the runtime's buffers */
#define QC_BE_CAP_THREADS    (1u << 3) /* opts.n_threads is honoured (bit-identical results) */
#define QC_BE_CAP_DN_KERNEL  (1u << 4) /* call->dn_kernel is honoured */
#define QC_BE_CAP_CHUNK_SIZE (1u << 5) /* call->chunk_size is honoured */
/* A MoE model's router choices: call->trace is called with "router_topk" rows (every layer, every
 * position of each call). The built-in backends have it; a runtime under test announces it
 * (plugin QC_CAP_ROUTER + get_router, exec 'router'). */
#define QC_BE_CAP_ROUTER     (1u << 10)
/* Each layer's mixer output: call->trace is called with "mlp_in" (dense) / "moe_in" (MoE) rows
 * beside the hidden states. The built-in backends have it; a runtime under test announces it
 * (plugin QC_CAP_MLP_IN + get_mlp_in, exec 'mlp_in'). */
#define QC_BE_CAP_MLP_IN     (1u << 11)
#define QC_BE_CAP_ALL (0x3fu | QC_BE_CAP_ROUTER | QC_BE_CAP_MLP_IN)
/* State lifecycle (a runtime under test: its own entries below; the built-in backends need none:
 * their state is the qc_state the caller passes, so the caller copies it and keeps one per
 * sequence). Not in QC_BE_CAP_ALL. */
#define QC_BE_CAP_SNAPSHOT   (1u << 6) /* be->snapshot / be->restore */
#define QC_BE_CAP_SEQUENCES  (1u << 7) /* be->select_seq */
#define QC_BE_CAP_TRIM       (1u << 8) /* be->trim */
/* A runtime that returns top-k log-probabilities only (be->forward_topk; its be->forward may
 * fail). The case runner asks it for top-k rows (qc_case_input.topk) instead of logits; the
 * check engine checks those rows (topk.*) and SKIPs every check that needs the logits, the
 * hidden states or the state. Not in QC_BE_CAP_ALL. */
#define QC_BE_CAP_TOPK_ONLY  (1u << 9) /* be->forward_topk */

/* Kernels a backend runs that change what limits its speed (be->kernels; 0 for a runtime under
 * test, which reports none). Set at create, changed by set_option; read, e.g., by `bench` to
 * pick a figure's limit. */
#define QC_BE_KERNEL_BF16_DOT (1u << 0) /* the packed GEMM of BF16 weights rounds the activations
                                           to bf16 and multiplies with a BF16 dot instruction
                                           (the optimized backend's bf16_dot=1): its prefill
                                           limit is the BF16 dot peak, not the FP32 FMA peak */
#define QC_BE_KERNEL_AMX      (1u << 1) /* the packed GEMM of BF16 and Q8_0 weights runs on AMX tiles,
                                           three bf16 terms per activation (the optimized
                                           backend's default where the CPU has AMX, amx=0 off):
                                           its prefill limit is the AMX peak / 3 */

typedef struct qc_backend qc_backend;
struct qc_backend {
    const char *name;        /* "reference", "optimized", "plugin:<file>", "exec:<cmd>", ... */
    const qc_model *model;   /* borrowed; must outlive the backend */
    qc_backend_opts opts;
    void *impl;              /* backend-private */
    unsigned caps;           /* QC_BE_CAP_* */
    int max_tokens_per_call; /* largest n the runtime accepts per call (1: a static [1,1] export;
                                0: opts.max_tokens) */
    int max_context_len;     /* positions the runtime holds (0: no limit of its own) */
    int max_chunk_tokens;    /* largest chunked-DeltaNet chunk, min(call->chunk_size, n), the
                                backend's scratch holds (0: any; see the call contract) */
    unsigned kernels;        /* QC_BE_KERNEL_*: what it runs now (0: none of them) */
    /* the math of one call; validated arguments only: call qc_backend_forward */
    qc_status (*forward)(qc_backend *be, const qc_call *call, const int32_t *tokens, int n,
                         int start_pos, qc_state *st, float *logits, int all_logits, qc_err *err);
    void (*destroy)(qc_backend *be); /* frees impl and be itself */
    const char *(*describe)(const qc_backend *be); /* e.g. "optimized (AVX-512, 2 threads)" */
    /* ---- optional (NULL for the built-in backends, whose state IS st) ---- */
    /* A runtime that keeps its own state: start a new sequence (zeros, position 0). */
    qc_status (*reset)(qc_backend *be, qc_err *err);
    /* Every element of the runtime's state buffers := v. */
    qc_status (*fill_state)(qc_backend *be, float v, qc_err *err);
    /* Copy the runtime's state into st (caches: positions 0..n_pos-1; the slots beyond stay as
     * st has them). QC_ERR_UNSUPPORTED when n_pos exceeds what the runtime can expose. */
    qc_status (*sync_state)(qc_backend *be, qc_state *st, int n_pos, qc_err *err);
    /* ---- optional state lifecycle of a runtime with its own state (NULL: not offered) ---- */
    /* Save the current sequence's whole state into snapshot slot `slot` / make it that copy. */
    qc_status (*snapshot)(qc_backend *be, int slot, qc_err *err);
    qc_status (*restore)(qc_backend *be, int slot, qc_err *err);
    /* Make sequence `seq` the current one (every later call acts on it alone). */
    qc_status (*select_seq)(qc_backend *be, int seq, qc_err *err);
    /* Drop positions n_pos.. of the current sequence (rollback). */
    qc_status (*trim)(qc_backend *be, int n_pos, qc_err *err);
    /* ---- optional: a top-k-only runtime (QC_BE_CAP_TOPK_ONLY; NULL: not offered) ---- */
    /* forward's call (same tokens, positions, state update; the caller checks the contract),
     * with, per position of the call, the k ids of highest log-probability, descending, into
     * ids [n, k] and their log-probabilities into lps [n, k] — validated (ids in [0, V) and
     * distinct, finite, <= 1e-3, non-increasing): a bad answer is QC_ERR_RUNTIME naming it. */
    qc_status (*forward_topk)(qc_backend *be, const int32_t *tokens, int n, int start_pos,
                              int k, int32_t *ids, float *lps, qc_err *err);
    /* ---- optional: the same pass in steps, for layer-major execution (NULL: not offered) ----
     * forward(tokens, n, start_pos, st) is, bit for bit (the built-in backends' forward is made
     * of these very steps):
     *   h [n, H] = the tokens' rows of model->embed widened to fp32 (exact)   trace "hidden" 0
     *   step_layer(l, h) for l = 0 .. L-1, in place, updating layer l of st    its traces
     *   step_norm(h) -> xn [n, H]                                              trace "hidden" L
     *   step_logits(xn, rows) for the output head's rows, in any blocks of rows.
     * The calls of one forward may be interleaved with other calls' steps on other states (a
     * streamed record runs layer l of every call before layer l + 1): a step depends only on
     * its arguments (call included), the layer's weights. n <= opts.max_tokens; the chunk
     * contract of forward applies to step_layer. Traces are emitted as forward emits them. */
    qc_status (*step_layer)(qc_backend *be, const qc_call *call, int l, float *h, int n,
                            int start_pos, qc_state *st, qc_err *err);
    qc_status (*step_norm)(qc_backend *be, const qc_call *call, const float *h, float *xn, int n,
                           int start_pos, qc_err *err);
    /* logits[t * ld + r] = xn[t] . rows[r] for r < rows->shape[0] (rows: a block of lm_head) */
    qc_status (*step_logits)(qc_backend *be, const float *xn, int n, const qc_tensor *rows,
                             float *logits, long ld, qc_err *err);
    /* ---- optional: named options of this backend (NULL: none); call qc_backend_set_option ----
     * key = value, effective from the next call. An unknown key is QC_ERR_NO_OPTION (and only
     * that: a caller tells "no such option" from the status alone), a bad value of a known key
     * QC_ERR_ARG, both with a message naming the key or value. The
     * reference backend's keys are the self-test's variants (reference/qc_ref_faults.c:
     * fault.unguarded_exp, fault.moe); the optimized backend's are its work thresholds
     * (optimized/qc_opt_options.c: gemm_min, par_min). */
    qc_status (*set_option)(qc_backend *be, const char *key, const char *value, qc_err *err);
};

/* The one entry point of a forward pass: validates the call contract above (status and message
 * the same for every backend), then returns be->forward(be, call, ...). call NULL: the backend's
 * defaults (qc_backend_call_defaults(&be->opts)). err may be NULL. */
qc_status qc_backend_forward_call(qc_backend *be, const qc_call *call, const int32_t *tokens,
                                  int n, int start_pos, qc_state *st, float *logits,
                                  int all_logits, qc_err *err);
/* qc_backend_forward_call(be, NULL, ...): the call with the backend's default options. */
qc_status qc_backend_forward(qc_backend *be, const int32_t *tokens, int n, int start_pos,
                             qc_state *st, float *logits, int all_logits, qc_err *err);

/* Reset a sequence on both sides: st to exact zeros (pos 0) and, for a runtime with its own
 * state, be->reset. */
qc_status qc_backend_reset(qc_backend *be, qc_state *st, qc_err *err);
/* Fill st with v and, for a runtime with its own state, the runtime's buffers
 * (QC_ERR_UNSUPPORTED without QC_BE_CAP_STATE_FILL). */
qc_status qc_backend_fill_state(qc_backend *be, qc_state *st, float v, qc_err *err);
/* Make st hold the runtime's state for positions 0..n_pos-1 (no-op for built-in backends;
 * QC_ERR_UNSUPPORTED without QC_BE_CAP_STATE_READ). */
qc_status qc_backend_sync_state(qc_backend *be, qc_state *st, int n_pos, qc_err *err);
/* be->set_option(key, value); QC_ERR_NO_OPTION (naming the backend and the key) when the
 * backend has no options. */
qc_status qc_backend_set_option(qc_backend *be, const char *key, const char *value, qc_err *err);

/* Making a backend is not the runtime's business (it never names one): qc_reference_create
 * (qc/qc_reference.h) and qc_optimized_create (qc/qc_optimized.h) make the built-in ones; the
 * harness maps `--backend` names to them, to plugins and to adapters (harness/host/qc_registry.h). */
void qc_backend_destroy(qc_backend *be); /* NULL-safe */
/* What every backend's create checks first, one wording for all: m non-NULL, o non-NULL,
 * o->max_tokens >= 1 (QC_ERR_ARG "create: ..."), then qc_model_validate(m) (the one model
 * check: config geometry, every tensor present, supported dtype, expected shape). */
qc_status qc_backend_check_create(const qc_model *m, const qc_backend_opts *o, qc_err *err);
/* Allocate a zeroed qc_backend with caps = QC_BE_CAP_ALL (what every backend's create starts
 * from); NULL when out of memory. */
qc_backend *qc_backend_alloc(void);

#endif /* QC_BACKEND_H */
