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
    if (name && strcmp(name, "hidden")) return; /* MoE traces ("moe_in", "router_topk") */
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
/* the steps of qc_run_case (numbered as in the comment at the top)                      */
/* ===================================================================================== */

/* One case being run: what every step uses. */
typedef struct {
    qc_backend *be;
    const qc_profile *profile;
    const qc_case_input *in;
    qc_golden_case *out;
    const qc_config *cfg;
    int V, L, H;            /* vocab, layers, hidden size */
    int P, T, S;            /* history, prompt, decode lengths */
    qc_state *state;        /* step 1 on (NULL before) */
    qc_runner *runner;      /* step 1 on (NULL before) */
    capture cap;            /* hidden-state capture (cap.seen allocated with the outputs) */
} case_run;

/* The input makes sense and fits the profile's context. */
static qc_status check_case(const case_run *r, qc_err *err) {
    const qc_case_input *in = r->in;
    const qc_golden_case *out = r->out;
    const int P = r->P, T = r->T, S = r->S;
    if (T < 1 || !in->tokens)
        return qc_errf(err, QC_ERR_ARG, "case %s: empty prompt", out->name);
    if (S < 0) return qc_errf(err, QC_ERR_ARG, "case %s: negative decode count", out->name);
    if (P > 0 && !in->history)
        return qc_errf(err, QC_ERR_ARG, "case %s: %d history tokens but no array", out->name, P);
    if ((long)P + T + S > r->profile->max_context_len)
        return qc_errf(err, QC_ERR_RANGE,
                       "case %s: history %d + prompt %d + decode %d = %ld positions exceed "
                       "max_context_len %d", out->name, P, T, S, (long)P + T + S,
                       r->profile->max_context_len);
    return QC_OK;
}

/* The output arrays (and the capture's row marks). */
static qc_status alloc_outputs(case_run *r, qc_err *err) {
    const qc_case_input *in = r->in;
    qc_golden_case *out = r->out;
    const int V = r->V, L = r->L, H = r->H, P = r->P, T = r->T, S = r->S;
    out->start_pos = P;
    out->max_seq_len = r->profile->max_seq_len;
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
        r->cap.seen = calloc((size_t)(L + 1) * T, 1);
    }
    if (!out->tokens || !out->prefill_logits || (P > 0 && !out->history) ||
        (S > 0 && (!out->decode_tokens || !out->decode_logits || !out->decode_margins)) ||
        (in->capture_hidden && (!out->prefill_hidden || !r->cap.seen)))
        return qc_errf(err, QC_ERR_OOM, "case %s: out of memory (logits [%d, %d])", out->name,
                       T + S, V);
    return QC_OK;
}

/* 1. state + runner */
static qc_status open_state(case_run *r, qc_err *err) {
    qc_status st;
    if ((st = qc_state_create(r->cfg, r->profile->max_context_len, &r->state, err))) return st;
    if ((st = qc_runner_create(r->be, r->profile, r->state, &r->runner, err))) return st;
    if (r->in->static_no_advance &&
        (st = qc_runner_set_option(r->runner, "fault.static_no_advance", "1", err)))
        return st;
    qc_runner_set_call(r->runner, r->in->call);
    /* A runtime with its own state carries the previous case's state: always start fresh. */
    if (r->in->garbage_state && (st = qc_backend_fill_state(r->be, r->state, NAN, err)))
        return st;
    return qc_runner_reset(r->runner, err);
}

/* 2. history replay */
static qc_status replay_history(case_run *r, qc_err *err) {
    qc_status st;
    if (r->P > 0 &&
        (st = qc_runner_prefill(r->runner, r->in->history, r->P, 0, NULL, NULL, NULL, err))) {
        qc_err_prefix(err, st, "case %s: history", r->out->name);
        return st;
    }
    return QC_OK;
}

/* After step 3: the trace hook must have reported every hidden row, each of width H. */
static qc_status check_capture(const case_run *r, qc_err *err) {
    const capture *cap = &r->cap;
    size_t n_seen = 0, n_all = (size_t)(r->L + 1) * r->T;
    for (size_t i = 0; i < n_all; i++) n_seen += cap->seen[i];
    if (cap->bad_dim || cap->bad_index || n_seen != n_all)
        return qc_errf(err, QC_ERR_UNSUPPORTED,
                       "case %s: backend %s: trace hook reported %zu of %zu hidden rows%s%s",
                       r->out->name, r->be->name, n_seen, n_all,
                       cap->bad_dim ? " (a row of the wrong width)" : "",
                       cap->bad_index ? " (an index outside 0..L)" : "");
    return QC_OK;
}

/* 3. prompt prefill with the hidden-state capture installed for this call only */
static qc_status prefill_prompt(case_run *r, qc_err *err) {
    qc_backend *be = r->be;
    const qc_case_input *in = r->in;
    qc_golden_case *out = r->out;
    qc_call call = in->call ? *in->call : qc_backend_call_defaults(&be->opts);
    if (in->capture_hidden) {
        r->cap.hidden = out->prefill_hidden;
        r->cap.n_index = r->L + 1;
        r->cap.T = r->T;
        r->cap.H = r->H;
        r->cap.start_pos = r->P;
        call.trace = capture_hidden_cb;
        call.trace_user = &r->cap;
    }
    qc_runner_set_call(r->runner, &call); /* this call only */
    qc_status st = qc_runner_prefill(r->runner, in->tokens, r->T, r->P, out->prefill_logits, NULL,
                                     NULL, err);
    qc_runner_set_call(r->runner, in->call);
    if (st) {
        qc_err_prefix(err, st, "case %s: prefill", out->name);
        return st;
    }
    return in->capture_hidden ? check_capture(r, err) : QC_OK;
}

/* 4. / 6. the state at n_pos positions into *dst (only from a backend that exposes it: else
 * absent, and the state checks are skipped) */
static qc_status snapshot_state(case_run *r, int n_pos, qc_golden_state *dst, qc_err *err) {
    qc_status st;
    const int has_state = (r->be->caps & QC_BE_CAP_STATE_READ) != 0;
    if (has_state && ((st = qc_backend_sync_state(r->be, r->state, n_pos, err)) ||
                      (st = qc_golden_state_from(r->cfg, r->state, n_pos, dst, err))))
        return st;
    return QC_OK;
}

/* 5. decode */
static qc_status decode_steps(case_run *r, qc_err *err) {
    const qc_case_input *in = r->in;
    qc_golden_case *out = r->out;
    const int V = r->V, T = r->T;
    qc_status st;
    for (int s = 0; s < r->S; s++) {
        const float *prev = s == 0 ? out->prefill_logits + (size_t)(T - 1) * V
                                   : out->decode_logits + (size_t)(s - 1) * V;
        int32_t tok = in->forced ? in->forced[s] : qc_argmax(prev, V);
        out->decode_tokens[s] = tok;
        out->decode_margins[s] = top_margin(prev, V);
        if ((st = qc_runner_decode(r->runner, tok, out->decode_logits + (size_t)s * V, err))) {
            qc_err_prefix(err, st, "case %s: decode step %d", out->name, s);
            return st;
        }
    }
    return QC_OK;
}

/* ===================================================================================== */
/* qc_run_case                                                                           */
/* ===================================================================================== */

qc_status qc_run_case(qc_backend *be, const qc_profile *profile, const char *name,
                      const qc_case_input *in, qc_golden_case *out, qc_err *err) {
    if (in->topk > 0 && (be->caps & QC_BE_CAP_TOPK_ONLY))
        return qc_run_case_topk(be, profile, name, in, out, err); /* qc_runcase_topk.c */
    case_run r;
    memset(&r, 0, sizeof r);
    r.be = be;
    r.profile = profile;
    r.in = in;
    r.out = out;
    r.cfg = &be->model->cfg;
    r.V = r.cfg->vocab_size, r.L = r.cfg->n_layers, r.H = r.cfg->hidden_size;
    r.P = in->n_history > 0 ? in->n_history : 0, r.T = in->n_tokens, r.S = in->n_decode;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name ? name : "case");

    qc_status st = check_case(&r, err);
    if (st) return st;
    if (!(st = alloc_outputs(&r, err)) &&
        !(st = open_state(&r, err)) &&                                        /* 1. */
        !(st = replay_history(&r, err)) &&                                    /* 2. */
        !(st = prefill_prompt(&r, err)) &&                                    /* 3. */
        !(st = snapshot_state(&r, r.P + r.T, &out->prefill_state, err)) &&    /* 4. */
        !(st = decode_steps(&r, err)) &&                                      /* 5. */
        r.S > 0)
        st = snapshot_state(&r, r.P + r.T + r.S, &out->decode_state, err);   /* 6. */

    free(r.cap.seen);
    qc_runner_destroy(r.runner);
    qc_state_destroy(r.state);
    if (st) qc_case_free(r.cfg, out);
    return st;
}
