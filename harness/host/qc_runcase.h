/* qc_runcase.h — run one golden-shaped case through a backend and a prefill strategy, and
 * collect everything the golden schema holds (logits, hidden states, state buffers, decode).
 *
 * Used by `record` (greedy decode: the runtime picks each token) and by the checker
 * (teacher-forced decode: the golden's tokens are fed). Ownership: the result `out` owns its
 * arrays; free with qc_case_free.
 */
#ifndef QC_RUNCASE_H
#define QC_RUNCASE_H

#include <stdint.h>

#include "qc/qc_backend.h"
#include "qc_golden.h"
#include "qc/qc_prefill.h"

typedef struct {
    const int32_t *history;   /* [n_history] replayed first (one prefill), or NULL */
    int n_history;
    const int32_t *tokens;    /* [n_tokens] the prompt, at position n_history */
    int n_tokens;
    int n_decode;             /* S decode steps */
    const int32_t *forced;    /* [S] teacher-forced decode tokens, or NULL = greedy */
    int capture_hidden;       /* 1: fill out->prefill_hidden via the trace hook (the prompt's
                                 call then traces into the case's capture, not call.trace) */
    const qc_call *call;      /* every forward's options (kernel, chunk size, trace); NULL: the
                                 backend's defaults */
    int static_no_advance;    /* self-test (check --inject-fault): 1 sets the runner's option
                                 fault.static_no_advance (qc_runner_set_option); 0 normally */
    int garbage_state;        /* 1: fill the state with NaN, then reset, before running */
    int topk;                 /* k > 0 and a QC_BE_CAP_TOPK_ONLY backend: top-k rows instead of
                                 logits (qc_run_case_topk; check --topk K, else
                                 QC_RUNCASE_TOPK_DEFAULT); 0: logits */
} qc_case_input;

/* The k a top-k-only runtime is asked for when nothing says otherwise (check, record --like). */
#define QC_RUNCASE_TOPK_DEFAULT 20

/* Run the case on a fresh state of capacity profile->max_context_len. Fills out->name (copied
 * from `name`), start_pos, tokens, history, prefill_logits [T,V], prefill_hidden [L+1,T,H]
 * (when asked), prefill_state (trimmed to start_pos+T), decode_tokens / decode_logits /
 * decode_margins [S] and decode_state (trimmed to start_pos+T+S). */
qc_status qc_run_case(qc_backend *be, const qc_profile *profile, const char *name,
                      const qc_case_input *in, qc_golden_case *out, qc_err *err);

/* The case on a top-k-only runtime (qc_runcase_topk.c): out->tk_k = min(in->topk, V, 100),
 * prefill_tk_ids / _lps [T, tk_k], decode_tk_ids / _lps [S, tk_k] (each position's ids of
 * highest log-probability, descending, validated by the backend), decode_tokens (forced, or the
 * top id of the previous row), decode_margins (lp[0] - lp[1]); no logits, hidden or state.
 * qc_run_case calls it when in->topk > 0 and be has QC_BE_CAP_TOPK_ONLY. */
qc_status qc_run_case_topk(qc_backend *be, const qc_profile *profile, const char *name,
                           const qc_case_input *in, qc_golden_case *out, qc_err *err);

/* qc_case_free (qc_golden.h, harness/io/) frees the arrays of a case produced here. */

#endif /* QC_RUNCASE_H */
