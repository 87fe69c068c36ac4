/* qc_memplan.h — memory planning: estimate what a run will allocate BEFORE allocating it, and
 * refuse cleanly (QC_ERR_OOM, exit code 2) instead of being killed by the OS.
 *
 * The estimate adds up, with 64-bit overflow checks:
 *   weights  the weight storage: every tensor of the config in `weight_dtype` (A_log and the
 *            gated-norm weight always F32, as real checkpoints and qc_model_synthetic store
 *            them); a loaded checkpoint is counted too (its files are read into memory);
 *   backend  the backends' private memory, per backend alive at once: what each backend REPORTS
 *            for its options (the built-in ones: qc_reference_scratch_bytes /
 *            qc_optimized_scratch_bytes, the counting pass of the very layout code their create
 *            allocates with — the fp32 small weights, the activations for max_tokens tokens,
 *            the chunk scratch, per-thread scratch...). The planner only sums
 *            rq->backend_bytes[]; it never re-derives a backend's layout. The runtime never
 *            names a backend: the harness's registry fills the list for a backend name
 *            (qc_registry_memplan in harness/host/qc_registry.h);
 *   state    qc_state for max_context_len positions (exactly qc_state_bytes' formula);
 *   runner   the prefill controller's own buffers (token history [max_context_len], last
 *            logits [V], and [max_context_len, V] logits for a no-KV-cache profile) and what
 *            the caller keeps: logits rows [n_logit_rows, V], captured hidden states
 *            [L+1, n_hidden_tokens, H], and n_state_copies extra states (golden prefill /
 *            decode states trimmed to max_context_len positions at most).
 * plus a fixed 64 MiB allowance for the process itself (libraries, HDF5 caches, stacks).
 *
 * The limit is `--max-memory SIZE` ("8G", "512M", "1.5GiB", "123456789") or, by default, the
 * memory the machine can still give: /proc/meminfo MemAvailable, lowered to the cgroup limit
 * (v2 memory.max - memory.current, or v1 memory.limit_in_bytes - memory.usage_in_bytes) when
 * one applies.
 *
 * Typical use (record / bench / check, before creating the model, the backend and the state):
 *   qc_memplan_req rq; qc_memplan_req_init(&rq, &cfg, QC_BF16, ctx, max_tokens);
 *   rq.n_threads = threads;           // the options the backends will be made with
 *   qc_registry_memplan(name, &rq, err);  // or qc_memplan_add_backend(&rq, bytes, err) per backend
 *   rq.n_logit_rows = T + S;
 *   if ((st = qc_memplan_enforce(&rq, max_memory_flag_or_NULL, "record", &plan, err))) fail;
 */
#ifndef QC_MEMPLAN_H
#define QC_MEMPLAN_H

#include <stddef.h>
#include <stdint.h>

#include "qc/qc_backend.h"
#include "qc/qc_config.h"
#include "qc/qc_model.h"
#include "qc/qc_status.h"

#define QC_MEMPLAN_OVERHEAD ((uint64_t)64 << 20) /* fixed process allowance: 64 MiB */
#define QC_MEMPLAN_MAX_BACKENDS 8                /* backends one request can hold */

typedef struct {
    const qc_config *cfg;    /* model dimensions (borrowed) */
    qc_dtype weight_dtype;   /* storage dtype of the weight matrices */
    uint64_t weight_bytes;   /* 0: computed from cfg + weight_dtype; else this exact count
                                (e.g. qc_model_weight_bytes of a loaded model) */
    int max_context_len;     /* state capacity in positions (>= 1) */
    int max_tokens;          /* backend opts.max_tokens (>= 1) */
    int n_threads;           /* backend opts.n_threads (0: the OpenMP default) */
    int chunk_size;          /* backend opts.chunk_size at create (default 64) */
    int n_backends;          /* backends alive at once (0..QC_MEMPLAN_MAX_BACKENDS) */
    uint64_t backend_bytes[QC_MEMPLAN_MAX_BACKENDS]; /* what each of them reports it allocates
                                for the options above (qc_registry_memplan fills them) */
    int n_logit_rows;        /* logits rows [rows, V] the caller keeps (>= 0) */
    int n_hidden_tokens;     /* tokens whose [L+1, ., H] hidden states are captured (>= 0) */
    int n_state_copies;      /* extra full states kept by the caller (>= 0) */
    int nokv;                /* 1: a no-KV-cache profile: the runner keeps the logits of a
                                whole recomputation, [max_context_len, V] */
    uint64_t extra_bytes;    /* anything else the caller keeps (a layer-major record's
                                activations and live states), counted with the runner */
} qc_memplan_req;

typedef struct {
    uint64_t weights;        /* bytes: weight storage */
    uint64_t weights_active; /* MoE only (0 for a dense model): bytes of weights one decode
                                token reads (qc_memplan_active_weight_bytes); not in total */
    uint64_t backend;        /* bytes: backend-private copies + scratch */
    uint64_t state;          /* bytes: one qc_state of max_context_len positions */
    uint64_t runner;         /* bytes: logits rows, hidden captures, state copies */
    uint64_t overhead;       /* bytes: QC_MEMPLAN_OVERHEAD */
    uint64_t total;          /* bytes: the sum */
} qc_memplan;

/* rq with the given fields, n_threads 0, chunk_size 64, no backend yet (n_backends 0: add them
 * with qc_registry_memplan or qc_memplan_add_backend) and n_logit_rows = n_hidden_tokens =
 * n_state_copies = nokv = 0. */
void qc_memplan_req_init(qc_memplan_req *rq, const qc_config *cfg, qc_dtype weight_dtype,
                         int max_context_len, int max_tokens);

/* The backend options a backend will REALLY be created with into rq (max_tokens, n_threads,
 * chunk_size: what its scratch size depends on), so that the plan and the create cannot
 * disagree (issue #14: record and bench plan with these). o NULL: the defaults. */
void qc_memplan_req_set_opts(qc_memplan_req *rq, const qc_backend_opts *o);

/* One more backend alive at once, with the private memory it reports (e.g.
 * qc_reference_scratch_bytes(cfg, &opts)). QC_ERR_RANGE when bytes is SIZE_MAX / UINT64_MAX
 * (the backend's size overflowed), QC_ERR_ARG when the request already holds
 * QC_MEMPLAN_MAX_BACKENDS. `what` names the backend in messages. */
qc_status qc_memplan_add_backend(qc_memplan_req *rq, const char *what, uint64_t bytes,
                                 qc_err *err);

/* The config sanity every estimate starts with (also what a backend's scratch-size function
 * requires): n_layers in [0, QC_MAX_LAYERS], every dimension in [0, 2^24], and the derived row
 * counts (conv dim, q_proj rows, k/v rows) below 2^30. QC_ERR_ARG / QC_ERR_RANGE naming the
 * field. */
qc_status qc_memplan_check_config(const qc_config *cfg, qc_err *err);

/* Estimate. QC_ERR_ARG for bad request fields; QC_ERR_RANGE when a product overflows 64
 * bits (the message names the term). */
qc_status qc_memplan_estimate(const qc_memplan_req *rq, qc_memplan *out, qc_err *err);

/* Bytes of weight storage of a config (see the header comment), overflow-checked. */
qc_status qc_memplan_weight_bytes(const qc_config *cfg, qc_dtype dtype, uint64_t *bytes,
                                  qc_err *err);
/* Bytes of weights one decode token reads (the bandwidth roofline's numerator): every layer's
 * norms, mixer and MLP — for a MoE layer the router, k of the E routed experts, the shared
 * expert and its gate —, the final norm and the [V, H] lm_head once (the embedding row is a
 * gather). Overflow-checked like qc_memplan_weight_bytes. */
qc_status qc_memplan_active_weight_bytes(const qc_config *cfg, qc_dtype dtype, uint64_t *bytes,
                                         qc_err *err);

/* Parse a size: decimal digits with an optional fraction, then an optional unit K, M, G, T
 * (powers of 1024; "KB"/"KiB"... accepted, case-insensitive) or B. "0", negative, junk or a
 * value >= 2^63 -> QC_ERR_ARG "--max-memory: '8Q' is not a size (e.g. 8G, 512M)". `what`
 * names the source ("--max-memory"). */
qc_status qc_memplan_parse_size(const char *s, const char *what, uint64_t *bytes, qc_err *err);

/* MemAvailable from meminfo text (the contents of /proc/meminfo). */
qc_status qc_memplan_parse_meminfo(const char *text, uint64_t *bytes, qc_err *err);

/* The memory this process can still get: MemAvailable, lowered to a cgroup limit if any. */
qc_status qc_memplan_available(uint64_t *bytes, qc_err *err);

/* The limit: qc_memplan_parse_size(max_memory) when non-NULL, else qc_memplan_available. */
qc_status qc_memplan_limit(const char *max_memory, uint64_t *limit, qc_err *err);

/* QC_OK when bytes_needed <= limit, else QC_ERR_OOM
 * "<what>: needs 12.34 GiB > limit 8.00 GiB (--max-memory)". */
qc_status qc_memplan_check(uint64_t bytes_needed, uint64_t limit, const char *what,
                           qc_err *err);

/* estimate + limit + check in one call; *plan (may be NULL) receives the estimate. On refusal
 * the message also carries the breakdown ("weights 1.50 GiB, backend ..., state ..."). */
qc_status qc_memplan_enforce(const qc_memplan_req *rq, const char *max_memory, const char *what,
                             qc_memplan *plan, qc_err *err);

/* "weights 1.50 GiB + backend 0.10 GiB + state 0.75 GiB + runner 0.01 GiB + overhead 0.06
 * GiB = 2.42 GiB". Returns buf. */
const char *qc_memplan_str(const qc_memplan *p, char *buf, size_t n);

/* Peak resident set size of this process so far (VmHWM of /proc/self/status), 0 if unknown. */
uint64_t qc_memplan_peak_rss(void);

/* bytes / 2^30 (for messages and reports). */
double qc_memplan_gib(uint64_t bytes);

#endif /* QC_MEMPLAN_H */
