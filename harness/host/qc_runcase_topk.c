/* qc_runcase_topk.c — qc_run_case for a runtime that returns top-k log-probabilities only
 * (QC_BE_CAP_TOPK_ONLY, qc_case_input.topk > 0): the same order of work as qc_runcase.c (fresh
 * sequence, history replay, prompt, decode teacher-forced or greedy), each call a forward_topk
 * where qc_runcase.c asks for logits:
 *   static   one token per call;
 *   dynamic  calls of min(max_seq_len, the runtime's max_tokens_per_call) tokens;
 *   nokv     the whole sequence recomputed from position 0 after a reset (prompt once, then per
 *            decode step), the last rows kept.
 * The output holds the top-k rows of the prompt and decode positions (tk_k, prefill_tk_ids /
 * _lps [T, k], decode_tk_ids / _lps [S, k]), the decode tokens and margins (lp[0] - lp[1] of
 * the row that chose each token: the logits margin); no logits, hidden states or state.
 */
#include "qc_runcase.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_runtime_plugin.h"

typedef struct {
    qc_backend *be;
    int k, V, N;          /* entries per row, vocab, positions P + T + S */
    int chunk;            /* tokens per call (kv modes) */
    int nokv;
    int32_t *seq;         /* [N] history + prompt + decode tokens (decode filled as they run) */
    int32_t *ids;         /* [N, k] the row of every position */
    float *lps;           /* [N, k] */
    int32_t *sids;        /* [N, k] nokv scratch */
    float *slps;
    const char *name;
} tk_run;

/* One call over seq[from .. from+n) into rows (ids, lps of position from). */
static qc_status tk_call(tk_run *t, int from, int n, int32_t *ids, float *lps, qc_err *err) {
    const qc_backend *be = t->be;
    if (be->max_context_len > 0 && from + n > be->max_context_len)
        return qc_errf(err, QC_ERR_RANGE, "forward: positions up to %d exceed the runtime's "
                       "max_context_len %d", from + n, be->max_context_len);
    for (int i = 0; i < n; i++)
        if (t->seq[from + i] < 0 || t->seq[from + i] >= t->V)
            return qc_errf(err, QC_ERR_RANGE, "forward: token id %d outside [0, %d)",
                           (int)t->seq[from + i], t->V);
    return t->be->forward_topk(t->be, t->seq + from, n, from, t->k, ids, lps, err);
}

/* Positions from .. from+n-1 processed (kv modes: in calls of t->chunk; nokv: one call of the
 * whole prefix 0 .. from+n-1 after a reset, rows from.. kept). */
static qc_status tk_span(tk_run *t, int from, int n, qc_err *err) {
    const size_t k = (size_t)t->k;
    if (t->nokv) {
        qc_status st = t->be->reset ? t->be->reset(t->be, err) : QC_OK;
        if (!st) st = tk_call(t, 0, from + n, t->sids, t->slps, err);
        if (st) return st;
        memcpy(t->ids + (size_t)from * k, t->sids + (size_t)from * k, (size_t)n * k * sizeof(int32_t));
        memcpy(t->lps + (size_t)from * k, t->slps + (size_t)from * k, (size_t)n * k * sizeof(float));
        return QC_OK;
    }
    for (int o = 0; o < n;) {
        int m = n - o < t->chunk ? n - o : t->chunk;
        qc_status st = tk_call(t, from + o, m, t->ids + (size_t)(from + o) * k,
                               t->lps + (size_t)(from + o) * k, err);
        if (st) return st;
        o += m;
    }
    return QC_OK;
}

static qc_status tk_alloc(tk_run *t, const qc_case_input *in, qc_golden_case *out, int P, int T,
                          int S, qc_err *err) {
    const size_t k = (size_t)t->k, N = (size_t)t->N;
    t->seq = malloc(N * sizeof *t->seq);
    t->ids = malloc(N * k * sizeof *t->ids);
    t->lps = malloc(N * k * sizeof *t->lps);
    if (t->nokv) t->sids = malloc(N * k * sizeof *t->sids), t->slps = malloc(N * k * sizeof *t->slps);
    out->tokens = malloc((size_t)T * sizeof(int32_t));
    out->prefill_tk_ids = malloc((size_t)T * k * sizeof(int32_t));
    out->prefill_tk_lps = malloc((size_t)T * k * sizeof(float));
    if (P > 0) out->history = malloc((size_t)P * sizeof(int32_t));
    if (S > 0) {
        out->decode_tokens = malloc((size_t)S * sizeof(int32_t));
        out->decode_margins = malloc((size_t)S * sizeof(float));
        out->decode_tk_ids = malloc((size_t)S * k * sizeof(int32_t));
        out->decode_tk_lps = malloc((size_t)S * k * sizeof(float));
    }
    if (!t->seq || !t->ids || !t->lps || (t->nokv && (!t->sids || !t->slps)) || !out->tokens ||
        !out->prefill_tk_ids || !out->prefill_tk_lps || (P > 0 && !out->history) ||
        (S > 0 && (!out->decode_tokens || !out->decode_margins || !out->decode_tk_ids ||
                   !out->decode_tk_lps)))
        return qc_errf(err, QC_ERR_OOM, "case %s: out of memory (top-k [%d, %d])", t->name,
                       t->N, t->k);
    if (P > 0) memcpy(t->seq, in->history, (size_t)P * sizeof(int32_t));
    memcpy(t->seq + P, in->tokens, (size_t)T * sizeof(int32_t));
    if (P > 0) memcpy(out->history, in->history, (size_t)P * sizeof(int32_t));
    memcpy(out->tokens, in->tokens, (size_t)T * sizeof(int32_t));
    return QC_OK;
}

/* history, prompt, decode; then the rows copied out */
static qc_status tk_steps(tk_run *t, const qc_case_input *in, qc_golden_case *out, int P, int T,
                          int S, qc_err *err) {
    const size_t k = (size_t)t->k;
    qc_status st = t->be->reset ? t->be->reset(t->be, err) : QC_OK;
    if (st) return st;
    if (P > 0 && !t->nokv && (st = tk_span(t, 0, P, err))) {
        qc_err_prefix(err, st, "case %s: history", t->name);
        return st;
    }
    if ((st = tk_span(t, P, T, err))) {
        qc_err_prefix(err, st, "case %s: prefill", t->name);
        return st;
    }
    for (int s = 0; s < S; s++) {
        const int32_t *pid = t->ids + (size_t)(P + T + s - 1) * k;
        const float *plp = t->lps + (size_t)(P + T + s - 1) * k;
        int32_t tok = in->forced ? in->forced[s] : pid[0];
        out->decode_tokens[s] = tok;
        out->decode_margins[s] = t->k > 1 ? plp[0] - plp[1] : 0.0f;
        t->seq[P + T + s] = tok;
        if ((st = tk_span(t, P + T + s, 1, err))) {
            qc_err_prefix(err, st, "case %s: decode step %d", t->name, s);
            return st;
        }
    }
    memcpy(out->prefill_tk_ids, t->ids + (size_t)P * k, (size_t)T * k * sizeof(int32_t));
    memcpy(out->prefill_tk_lps, t->lps + (size_t)P * k, (size_t)T * k * sizeof(float));
    if (S > 0) {
        memcpy(out->decode_tk_ids, t->ids + (size_t)(P + T) * k, (size_t)S * k * sizeof(int32_t));
        memcpy(out->decode_tk_lps, t->lps + (size_t)(P + T) * k, (size_t)S * k * sizeof(float));
    }
    return QC_OK;
}

qc_status qc_run_case_topk(qc_backend *be, const qc_profile *profile, const char *name,
                           const qc_case_input *in, qc_golden_case *out, qc_err *err) {
    const qc_config *cfg = &be->model->cfg;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name ? name : "case");
    const int P = in->n_history > 0 ? in->n_history : 0, T = in->n_tokens, S = in->n_decode;
    if (!be->forward_topk || !(be->caps & QC_BE_CAP_TOPK_ONLY))
        return qc_errf(err, QC_ERR_UNSUPPORTED, "case %s: backend %s returns no top-k rows",
                       out->name, be->name);
    if (T < 1 || !in->tokens || S < 0 || (P > 0 && !in->history))
        return qc_errf(err, QC_ERR_ARG, "case %s: bad case input", out->name);
    if ((long)P + T + S > profile->max_context_len)
        return qc_errf(err, QC_ERR_RANGE, "case %s: %ld positions exceed max_context_len %d",
                       out->name, (long)P + T + S, profile->max_context_len);
    tk_run t;
    memset(&t, 0, sizeof t);
    t.be = be;
    t.V = cfg->vocab_size;
    t.k = in->topk < t.V ? in->topk : t.V;
    if (t.k > QC_PLUGIN_MAX_TOPK) t.k = QC_PLUGIN_MAX_TOPK;
    t.N = P + T + S;
    t.name = out->name;
    qc_mode mode = qc_profile_mode(profile);
    t.nokv = mode == QC_MODE_NOKV;
    int cap = be->max_tokens_per_call > 0 ? be->max_tokens_per_call : be->opts.max_tokens;
    t.chunk = mode == QC_MODE_STATIC ? 1 : profile->max_seq_len < cap ? profile->max_seq_len : cap;
    if (t.chunk < 1) t.chunk = 1;
    if (t.nokv && t.N > cap) {
        return qc_errf(err, QC_ERR_UNSUPPORTED, "case %s: nokv recomputes %d positions in one "
                       "call; the runtime takes %d per call", out->name, t.N, cap);
    }
    out->start_pos = P;
    out->max_seq_len = profile->max_seq_len;
    out->n_history = P;
    out->n_tokens = T;
    out->n_decode = S;
    out->tk_k = t.k;
    qc_status st = tk_alloc(&t, in, out, P, T, S, err);
    if (!st) st = tk_steps(&t, in, out, P, T, S, err);
    free(t.seq), free(t.ids), free(t.lps), free(t.sids), free(t.slps);
    if (st) qc_case_free(cfg, out);
    return st;
}
