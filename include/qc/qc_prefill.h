/* qc_prefill.h — the export profile and the prefill controller (ExecuTorch TextPrefiller
 * semantics).
 *
 * Profile (the .pte metadata): enable_dynamic_shape (absent = false), use_kv_cache (true),
 * max_seq_len (128), max_context_len (= max_seq_len when absent).
 *
 * prefill(prompt[n], start_pos): prompts longer than max_seq_len are cut into consecutive
 * chunks of at most max_seq_len tokens. Each chunk is
 *   - static shape + KV cache: one [1,1] call per token, position incremented;
 *   - dynamic shape (KV cache): one call with the whole chunk;
 *   - no KV cache: one call per chunk that recomputes the whole sequence so far from position
 *     0 on a reset state.
 * decode(token) is one [1,1] call (no KV cache: the whole sequence again).
 * Errors (no state change): empty prompt, start_pos != the runner's position, start_pos + n >
 * max_context_len, a token id outside the vocabulary.
 */
#ifndef QC_PREFILL_H
#define QC_PREFILL_H

#include <stdint.h>

#include "qc/qc_backend.h"
#include "qc/qc_state.h"
#include "qc/qc_status.h"

typedef struct {
    int enable_dynamic_shape; /* 0/1 */
    int use_kv_cache;         /* 0/1 */
    int max_seq_len;          /* tokens per call at most */
    int max_context_len;      /* positions at most */
} qc_profile;

typedef enum { QC_MODE_STATIC = 0, QC_MODE_DYNAMIC = 1, QC_MODE_NOKV = 2 } qc_mode;

const char *qc_mode_str(qc_mode m); /* "static", "dynamic", "nokv" */
qc_status qc_mode_parse(const char *s, qc_mode *m, qc_err *err);

/* enable_dynamic_shape 0, use_kv_cache 1, max_seq_len 128, max_context_len 128. */
void qc_profile_default(qc_profile *p);
/* Parse profile JSON; absent fields keep ExecuTorch's defaults; `path` for messages. Keys:
 * enable_dynamic_shape, use_kv_cache, max_seq_len, max_context_len and the ExecuTorch method
 * names get_max_seq_len, get_max_context_len (a short name and its method name may both appear
 * only with the same value). Any other key is QC_ERR_UNKNOWN naming it and the known keys,
 * with a "did you mean" when one is within edit distance 2; a repeated key is QC_ERR_FORMAT. */
qc_status qc_profile_parse(const char *json, size_t len, const char *path, qc_profile *p,
                           qc_err *err);
/* The largest profile file read (qc_profile_load, the CLI's --profile). */
#define QC_PROFILE_MAX_BYTES ((size_t)64 << 10)
/* Read and parse a profile file (a regular file only: a FIFO or a device is refused without
 * blocking, qc_read_small_file). */
qc_status qc_profile_load(const char *path, qc_profile *p, qc_err *err);
/* Which strategy the profile selects. */
qc_mode qc_profile_mode(const qc_profile *p);
/* A profile that selects `mode` with the given lengths. */
void qc_profile_for_mode(qc_profile *p, qc_mode mode, int max_seq_len, int max_context_len);

typedef struct qc_runner qc_runner;

/* The runner borrows be and st (both must outlive it); st must have capacity >=
 * max_context_len. The backend's opts.max_tokens must be >= max_seq_len (dynamic) or >=
 * max_context_len (no KV cache). */
qc_status qc_runner_create(qc_backend *be, const qc_profile *p, qc_state *st, qc_runner **out,
                           qc_err *err);
void qc_runner_destroy(qc_runner *r);
/* A named option of the runner: key = value, effective from the next call; QC_ERR_ARG naming an
 * unknown key or value (err may be NULL). The keys are the harness self-test's variants
 * (runtime/qc_prefill_faults.c): fault.static_no_advance = 0|1. */
qc_status qc_runner_set_option(qc_runner *r, const char *key, const char *value, qc_err *err);
/* The options of the runner's later forward calls (kernel, chunk size, trace: qc_backend.h's
 * qc_call; copied). NULL: the backend's defaults (what a new runner starts with). */
void qc_runner_set_call(qc_runner *r, const qc_call *call);

/* Start a new sequence: reset the state to exact zeros and position 0 (for a runtime with its
 * own state, through qc_backend_reset). */
qc_status qc_runner_reset(qc_runner *r, qc_err *err);
int qc_runner_pos(const qc_runner *r);
qc_mode qc_runner_mode(const qc_runner *r);
/* Number of backend forward calls made so far (for tests of the strategy). */
long qc_runner_calls(const qc_runner *r);

/* Prefill prompt[n] at start_pos (must equal qc_runner_pos). logits_all: NULL or [n, V] —
 * the logits of every prompt position; last_logits: NULL or [V]. *first_token (may be NULL):
 * argmax of the last logits (ties -> lowest id). */
qc_status qc_runner_prefill(qc_runner *r, const int32_t *prompt, int n, int start_pos,
                            float *logits_all, float *last_logits, int32_t *first_token,
                            qc_err *err);
/* Feed one token at the current position; logits: NULL or [V]. */
qc_status qc_runner_decode(qc_runner *r, int32_t token, float *logits, qc_err *err);

/* argmax over v[n]; ties -> lowest index. */
int32_t qc_argmax(const float *v, int n);

#endif /* QC_PREFILL_H */
