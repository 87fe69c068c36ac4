/* qc_runcase.c — run one golden-shaped case (history, prompt, decode) through a backend and a
 * prefill strategy, collecting everything the golden schema holds.
 *
 * Order of work (what a runtime under test does, ExecuTorch-style):
 *   1. fresh state of capacity profile->max_context_len (optionally filled with NaN garbage
 *      and reset, to prove that reset leaves nothing behind);
 *   2. history replay: one prefill of positions 0..P-1 (continuation cases);
 *   3. the prompt prefill at position P, logits of every prompt position, hidden states
 *      captured through the backend trace hook;
 *   4. snapshot of the state (caches trimmed to P+T positions);
 *   5. S decode steps: teacher-forced tokens if given, else greedy argmax of the previous
 *      logits row; margins = top1 - top2 of the row that chose each token;
 *   6. snapshot of the state (caches trimmed to P+T+S positions).
 */
#include "qc_runcase.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================================== */
/* hidden-state capture through the trace hook                                           */
/* ===================================================================================== */

typedef struct {
    float *hidden;          /* [L+1, T, H] destination */
    unsigned char *seen;    /* [L+1, T] 1 once a row was written */
    int n_index;            /* L+1 */
    int T, H;               /* prompt length, hidden size */
    int start_pos;          /* absolute position of prompt row 0 */
    int bad_dim;            /* a call reported dim != H */
    int bad_index;          /* a call reported index outside 0..L */
} capture;

/* Place rows by absolute position - start_pos; positions outside the prompt are ignored (the
 * history in no-KV recomputation). Later calls overwrite earlier ones (no-KV recomputes
 * the whole sequence for every chunk; the last recomputation wins). */
static void capture_hidden_cb(void *user, int index, const char *name, int start_pos,
                              int n_tokens, int dim, const float *data) {
    capture *c = user;
    (void)name;
    if (index < 0 || index >= c->n_index) {
        c->bad_index = 1;
        return;
    }
    if (dim != c->H) {
        c->bad_dim = 1;
        return;
    }
    for (int i = 0; i < n_tokens; i++) {
        int row = start_pos + i - c->start_pos;
        if (row < 0 || row >= c->T) continue;
        memcpy(c->hidden + ((size_t)index * c->T + row) * c->H, data + (size_t)i * dim,
               (size_t)dim * sizeof(float));
        c->seen[(size_t)index * c->T + row] = 1;
    }
}

/* ===================================================================================== */
/* decode helpers                                                                        */
/* ===================================================================================== */

/* top1 - top2 of v[n] (0 when n < 2). */
static float top_margin(const float *v, int n) {
    if (n < 2) return 0.0f;
    float a = v[0] > v[1] ? v[0] : v[1], b = v[0] > v[1] ? v[1] : v[0];
    for (int i = 2; i < n; i++) {
        if (v[i] > a) {
            b = a;
            a = v[i];
        } else if (v[i] > b) {
            b = v[i];
        }
    }
    return a - b;
}

static int32_t *dup_ids(const int32_t *src, int n) {
    int32_t *d = malloc((n > 0 ? (size_t)n : 1) * sizeof *d);
    if (d && n > 0) memcpy(d, src, (size_t)n * sizeof *d);
    return d;
}

/* ===================================================================================== */
/* qc_run_case                                                                           */
/* ===================================================================================== */

qc_status qc_run_case(qc_backend *be, const qc_profile *profile, const char *name,
                      const qc_case_input *in, qc_golden_case *out, qc_err *err) {
    const qc_config *cfg = &be->model->cfg;
    const int V = cfg->vocab_size, L = cfg->n_layers, H = cfg->hidden_size;
    const int P = in->n_history > 0 ? in->n_history : 0, T = in->n_tokens, S = in->n_decode;
    qc_status st = QC_OK;
    qc_state *state = NULL;
    qc_runner *runner = NULL;
    capture cap;
    memset(&cap, 0, sizeof cap);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name ? name : "case");

    if (T < 1 || !in->tokens)
        return qc_errf(err, QC_ERR_ARG, "case %s: empty prompt", out->name);
    if (S < 0) return qc_errf(err, QC_ERR_ARG, "case %s: negative decode count", out->name);
    if (P > 0 && !in->history)
        return qc_errf(err, QC_ERR_ARG, "case %s: %d history tokens but no array", out->name, P);
    if ((long)P + T + S > profile->max_context_len)
        return qc_errf(err, QC_ERR_RANGE,
                       "case %s: history %d + prompt %d + decode %d = %ld positions exceed "
                       "max_context_len %d", out->name, P, T, S, (long)P + T + S,
                       profile->max_context_len);

    /* outputs */
    out->start_pos = P;
    out->max_seq_len = profile->max_seq_len;
    out->n_history = P;
    out->n_tokens = T;
    out->n_decode = S;
    out->tokens = dup_ids(in->tokens, T);
    out->prefill_logits = malloc((size_t)T * V * sizeof(float));
    if (P > 0) out->history = dup_ids(in->history, P);
    if (S > 0) {
        out->decode_tokens = malloc((size_t)S * sizeof(int32_t));
        out->decode_logits = malloc((size_t)S * V * sizeof(float));
        out->decode_margins = malloc((size_t)S * sizeof(float));
    }
    if (in->capture_hidden) {
        out->prefill_hidden = calloc((size_t)(L + 1) * T * H, sizeof(float));
        cap.seen = calloc((size_t)(L + 1) * T, 1);
    }
    if (!out->tokens || !out->prefill_logits || (P > 0 && !out->history) ||
        (S > 0 && (!out->decode_tokens || !out->decode_logits || !out->decode_margins)) ||
        (in->capture_hidden && (!out->prefill_hidden || !cap.seen))) {
        st = qc_errf(err, QC_ERR_OOM, "case %s: out of memory (logits [%d, %d])", out->name,
                     T + S, V);
        goto fail;
    }

    /* 1. state + runner */
    if ((st = qc_state_create(cfg, profile->max_context_len, &state, err))) goto fail;
    if ((st = qc_runner_create(be, profile, state, &runner, err))) goto fail;
    qc_runner_set_faults(runner, &in->faults);
    /* A runtime with its own state carries the previous case's state: always start fresh. */
    if (in->garbage_state && (st = qc_backend_fill_state(be, state, NAN, err))) goto fail;
    if ((st = qc_runner_reset(runner, err))) goto fail;

    /* 2. history replay */
    if (P > 0 &&
        (st = qc_runner_prefill(runner, in->history, P, 0, NULL, NULL, NULL, err))) {
        qc_err_prefix(err, st, "case %s: history", out->name);
        goto fail;
    }

    /* 3. prompt prefill with the hidden-state capture installed for this call only */
    {
        qc_trace_fn saved_fn = be->opts.trace;
        void *saved_user = be->opts.trace_user;
        if (in->capture_hidden) {
            cap.hidden = out->prefill_hidden;
            cap.n_index = L + 1;
            cap.T = T;
            cap.H = H;
            cap.start_pos = P;
            be->opts.trace = capture_hidden_cb;
            be->opts.trace_user = &cap;
        }
        st = qc_runner_prefill(runner, in->tokens, T, P, out->prefill_logits, NULL, NULL, err);
        be->opts.trace = saved_fn;
        be->opts.trace_user = saved_user;
        if (st) {
            qc_err_prefix(err, st, "case %s: prefill", out->name);
            goto fail;
        }
    }
    if (in->capture_hidden) {
        size_t n_seen = 0, n_all = (size_t)(L + 1) * T;
        for (size_t i = 0; i < n_all; i++) n_seen += cap.seen[i];
        if (cap.bad_dim || cap.bad_index || n_seen != n_all) {
            st = qc_errf(err, QC_ERR_UNSUPPORTED,
                         "case %s: backend %s: trace hook reported %zu of %zu hidden rows%s%s",
                         out->name, be->name, n_seen, n_all,
                         cap.bad_dim ? " (a row of the wrong width)" : "",
                         cap.bad_index ? " (an index outside 0..L)" : "");
            goto fail;
        }
    }

    /* 4. state after prefill (only from a backend that exposes it: else absent, and the state
     * checks are skipped) */
    const int has_state = (be->caps & QC_BE_CAP_STATE_READ) != 0;
    if (has_state && ((st = qc_backend_sync_state(be, state, P + T, err)) ||
                      (st = qc_golden_state_from(cfg, state, P + T, &out->prefill_state, err))))
        goto fail;

    /* 5. decode */
    for (int s = 0; s < S; s++) {
        const float *prev = s == 0 ? out->prefill_logits + (size_t)(T - 1) * V
                                   : out->decode_logits + (size_t)(s - 1) * V;
        int32_t tok = in->forced ? in->forced[s] : qc_argmax(prev, V);
        out->decode_tokens[s] = tok;
        out->decode_margins[s] = top_margin(prev, V);
        if ((st = qc_runner_decode(runner, tok, out->decode_logits + (size_t)s * V, err))) {
            qc_err_prefix(err, st, "case %s: decode step %d", out->name, s);
            goto fail;
        }
    }

    /* 6. state after decode */
    if (S > 0 && has_state &&
        ((st = qc_backend_sync_state(be, state, P + T + S, err)) ||
         (st = qc_golden_state_from(cfg, state, P + T + S, &out->decode_state, err))))
        goto fail;

    free(cap.seen);
    qc_runner_destroy(runner);
    qc_state_destroy(state);
    return QC_OK;

fail:
    free(cap.seen);
    qc_runner_destroy(runner);
    qc_state_destroy(state);
    qc_case_free(cfg, out);
    return st;
}
