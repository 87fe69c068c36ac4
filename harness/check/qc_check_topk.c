/* qc_check_topk.c — a case's teacher-forced top-k distributions from a server, and their tally
 * against the golden (qc_check_topk.h). */
#include "qc_check_topk.h"

#include "qc_check_http.h"
#include "qc_runcase.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ck_tf_rows_free(ck_tf_rows *r) {
    free(r->ids);
    free(r->lps);
    free(r->have);
    r->ids = NULL, r->lps = NULL, r->have = NULL;
}

/* One scoring request; its rows copied into out. 0, or -1 with out->fail set. */
static int tf_request(qc_server *srv, qc_score *sc, ck_tf_rows *out, int pos) {
    qc_err err;
    qc_err_clear(&err);
    if (qc_server_score(srv, sc, 1, &err) != QC_OK) {
        snprintf(out->fail, sizeof out->fail, "%s", err.msg);
        return -1;
    }
    out->requests++;
    out->seconds += sc->seconds;
    if (sc->fail[0]) {
        snprintf(out->fail, sizeof out->fail, "request for position %d: %s", pos, sc->fail);
        return -1;
    }
    if (!out->ids) { /* the first answer gives k */
        size_t ne = (size_t)(out->rows > 0 ? out->rows : 1) * (size_t)(sc->k > 0 ? sc->k : 1);
        out->k = sc->k;
        out->ids = malloc(ne * sizeof *out->ids);
        out->lps = malloc(ne * sizeof *out->lps);
        if (!out->ids || !out->lps) {
            snprintf(out->fail, sizeof out->fail, "out of memory");
            return -1;
        }
        for (size_t i = 0; i < ne; i++) out->ids[i] = -1, out->lps[i] = 0;
    }
    if (sc->k != out->k) {
        snprintf(out->fail, sizeof out->fail, "request for position %d: %d entries per "
                 "position, an earlier answer had %d", pos, sc->k, out->k);
        return -1;
    }
    for (int r = 0; r < sc->rows; r++) {
        int i = sc->from + r - out->from;
        if (i < 0 || i >= out->rows) continue;
        memcpy(out->ids + (size_t)i * (size_t)out->k, sc->ids + (size_t)r * (size_t)sc->k,
               (size_t)sc->k * sizeof *out->ids);
        memcpy(out->lps + (size_t)i * (size_t)out->k, sc->lps + (size_t)r * (size_t)sc->k,
               (size_t)sc->k * sizeof *out->lps);
        if (!out->have[i]) out->n_have++;
        out->have[i] = 1;
    }
    return 0;
}

void ck_tf_rows_get(qc_server *srv, const qc_golden_case *gc, ck_tf_rows *out) {
    int n;
    memset(out, 0, sizeof *out);
    int32_t *seq = ck_case_seq(gc, &n);
    int P = gc->start_pos;
    out->from = P;
    out->rows = n - P;
    out->have = calloc((size_t)(out->rows > 0 ? out->rows : 1), 1);
    if (!seq || !out->have) {
        snprintf(out->fail, sizeof out->fail, "out of memory");
        free(seq);
        return;
    }
    qc_score sc;
    memset(&sc, 0, sizeof sc);
    sc.seq = seq;
    sc.n_gen = 1;
    /* a request holds its prompt and one generated token: a case that fills the server's
     * context scores the positions below it (the rows say how many of them) */
    int ctx = qc_server_ctx(srv), reach = ctx > 1 && n + 1 > ctx ? ctx - 1 - P : out->rows;
    if (reach < 1) {
        snprintf(out->fail, sizeof out->fail, "the case starts at position %d, beyond what the "
                 "server's context of %d tokens can score", P, ctx);
        free(seq);
        return;
    }
    if (qc_server_prompt_logprobs(srv)) {
        sc.n = P + reach;
        sc.from = P;
        tf_request(srv, &sc, out, P);
    } else {
        int m = qc_server_max_positions(srv);
        int cnt = (m > 0 && m < reach) ? m : reach;
        int last = -1;
        for (int i = 0; i < cnt; i++) {
            /* evenly spread, first and last included, strictly increasing (the cache path) */
            int p = P + (cnt > 1 ? (int)((long)i * (reach - 1) / (cnt - 1)) : reach - 1);
            if (p <= last) continue;
            last = p;
            sc.n = p + 1;
            sc.from = p;
            int bad = tf_request(srv, &sc, out, p);
            qc_score_clear(&sc);
            if (bad) break;
        }
    }
    qc_score_clear(&sc);
    free(seq);
}

void ck_tf_tally_rows(const qc_golden_case *gc, int V, const qc_topk_lim *lim, int pos0, int rows,
                      int k, const int32_t *ids, const float *lps, const unsigned char *have,
                      ck_tf_result *res) {
    for (int r = 0; r < rows; r++) {
        if (have && !have[r]) continue;
        int p = pos0 + r;
        const float *g = ck_golden_row(gc, V, p);
        if (!g) continue;
        qc_topk_tally_row(&res->t, lim, g, V, ids + (size_t)r * (size_t)k,
                          lps + (size_t)r * (size_t)k, k, p);
        res->scored++;
    }
}

void ck_tf_tally(const qc_golden_case *gc, int V, const qc_topk_lim *lim, const ck_tf_rows *tr,
                 ck_tf_result *res) {
    memset(res, 0, sizeof *res);
    qc_topk_tally_init(&res->t);
    res->requests = tr->requests;
    res->seconds = tr->seconds;
    res->total = tr->rows;
    snprintf(res->fail, sizeof res->fail, "%s", tr->fail);
    if (tr->ids)
        ck_tf_tally_rows(gc, V, lim, tr->from, tr->rows, tr->k, tr->ids, tr->lps, tr->have, res);
}

/* The checks a top-k-only runtime cannot take: SKIPPED with the reason. */
static void topk_only_skips(ck_ctx *c, const qc_golden_case *gc, const char *bname, qc_mode mode) {
    static const char *const names[] = {
        "prefill.logits",        "decode.logits",           "prefill.hidden",
        "prefill.k_cache",       "prefill.v_cache",         "prefill.conv_state",
        "prefill.recurrent_state", "decode.k_cache",        "decode.v_cache",
        "decode.conv_state",     "decode.recurrent_state",  "garbage_reset",
        "unused_slots",          "threads_bitwise"};
    const char *mname = qc_mode_str(mode);
    char why[300];
    snprintf(why, sizeof why, "capability 'topk_only': %s returns top-k log-probabilities only; "
             "full logits not offered (nor hidden states or state)", bname);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!strncmp(names[i], "decode.", 7) && gc->n_decode < 1) continue;
        if (!strcmp(names[i], "prefill.hidden") && !gc->prefill_hidden) continue;
        ck_emit_simple(c, gc->name, bname, mname, names[i], QC_VERDICT_SKIP, why, NULL);
    }
    if (mode == QC_MODE_DYNAMIC) {
        ck_emit_simple(c, gc->name, bname, mname, "static_eq_dynamic", QC_VERDICT_SKIP, why, NULL);
        ck_emit_simple(c, gc->name, bname, mname, "chunked_eq_recurrent", QC_VERDICT_SKIP, why,
                       NULL);
    }
}

int ck_topk_runtime_mode(ck_ctx *c, qc_backend *be, const qc_golden_case *gc, qc_mode mode,
                         const char *bname, qc_golden_case *act) {
    static const char *const rows[4] = {"topk.argmax", "topk.logprob", "topk.top1_in_k",
                                        "topk.overlap"};
    const int V = c->cfg->vocab_size, T = gc->n_tokens, S = gc->n_decode;
    const char *mname = qc_mode_str(mode);
    qc_profile p;
    ck_case_profile(gc, mode, 0, &p);
    qc_case_input in;
    memset(&in, 0, sizeof in);
    in.history = gc->n_history > 0 ? gc->history : NULL;
    in.n_history = gc->n_history;
    in.tokens = gc->tokens;
    in.n_tokens = T;
    in.n_decode = S;
    in.forced = S > 0 ? gc->decode_tokens : NULL;
    in.topk = c->o->topk > 0 ? c->o->topk : CK_TOPK_DEFAULT;
    qc_err err;
    qc_err_clear(&err);
    qc_status s = qc_run_case(be, &p, gc->name, &in, act, &err);
    int ok = s == QC_OK;
    if (!ok) {
        qc_verdict v = ck_failed_run_verdict(s);
        for (int i = 0; i < 4; i++)
            ck_emit_simple(c, gc->name, bname, mname, rows[i], v, err.msg,
                           qc_strdup_printf("%s", err.msg));
    } else {
        qc_topk_lim lim;
        ck_topk_limits(c, gc->name, act->tk_k, &lim);
        ck_tf_result r;
        memset(&r, 0, sizeof r);
        qc_topk_tally_init(&r.t);
        r.total = T + S;
        ck_tf_tally_rows(gc, V, &lim, gc->start_pos, T, act->tk_k, act->prefill_tk_ids,
                         act->prefill_tk_lps, NULL, &r);
        if (S > 0 && act->decode_tk_ids)
            ck_tf_tally_rows(gc, V, &lim, gc->start_pos + T, S, act->tk_k, act->decode_tk_ids,
                             act->decode_tk_lps, NULL, &r);
        ck_topk_emit_rows(c, gc, &lim, &r, bname, mname);
    }
    topk_only_skips(c, gc, bname, mode);
    return ok;
}
