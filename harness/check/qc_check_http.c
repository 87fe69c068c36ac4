/* qc_check_http.c — the top-k checks of a server against the golden cases (qc_check_http.h). */
#include "qc_check_http.h"
#include "qc_check_topk.h"
#include "qc_tier_topk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The teacher-forced distributions of a case (ck_tf_rows_get, qc_check_topk.c), tallied
 * against the golden. */
typedef ck_tf_result tf_result;

static void teacher_force(ck_ctx *c, qc_server *srv, const qc_golden_case *gc,
                          const qc_topk_lim *lim, tf_result *res) {
    ck_tf_rows tr;
    ck_tf_rows_get(srv, gc, &tr);
    ck_tf_tally(gc, c->cfg->vocab_size, lim, &tr, res);
    ck_tf_rows_free(&tr);
}

/* The golden top1 - top2 margin of the distribution at position p. */
static double golden_margin(const float *g, int V) {
    double a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < V; i++) {
        if (g[i] > a) { b = a; a = g[i]; }
        else if (g[i] > b) b = g[i];
    }
    return a - b;
}

/* topk.greedy: the greedy continuation of history + prompt vs the golden's decode tokens. */
static void check_greedy(ck_ctx *c, qc_server *srv, const qc_golden_case *gc,
                         const qc_topk_lim *lim) {
    const char *be = c->o->ext.name;
    if (gc->n_decode < 1) return;
    int V = c->cfg->vocab_size, n;
    int32_t *seq = ck_case_seq(gc, &n);
    if (!seq) return;
    qc_score sc;
    memset(&sc, 0, sizeof sc);
    sc.seq = seq;
    sc.n = gc->start_pos + gc->n_tokens;
    sc.from = sc.n - 1;
    sc.n_gen = gc->n_decode;
    sc.ids_only = 1;
    int ctx = qc_server_ctx(srv);
    if (ctx > 0 && sc.n + sc.n_gen > ctx) sc.n_gen = ctx - sc.n; /* what the context holds */
    if (sc.n_gen < 1) {
        ck_emit_simple(c, gc->name, be, CK_SERVED, "topk.greedy", QC_VERDICT_SKIP,
                       "the prompt fills the server's context: no token to generate", NULL);
        goto out;
    }
    qc_err err;
    qc_err_clear(&err);
    char kl[sizeof ((qc_check_row *)0)->keyline];
    if (qc_server_score(srv, &sc, 1, &err) != QC_OK || sc.fail[0]) {
        ck_emit_simple(c, gc->name, be, CK_SERVED, "topk.greedy", QC_VERDICT_FAIL,
                       "the server's answer is not valid: see detail",
                       qc_strdup_printf("%s", sc.fail[0] ? sc.fail : err.msg));
        goto out;
    }
    int s = 0;
    while (s < sc.n_gen_got && sc.gen[s] == gc->decode_tokens[s]) s++;
    if (s == sc.n_gen_got) {
        if (s == gc->n_decode || sc.n_gen < gc->n_decode)
            snprintf(kl, sizeof kl, "%d greedy tokens equal the golden's%s (1 request, %.2f s)",
                     s, sc.n_gen < gc->n_decode ? " (all the server's context holds)" : "",
                     sc.seconds);
        else
            snprintf(kl, sizeof kl, "the server stopped after %d of %d greedy tokens (an "
                     "end-of-sequence token, last %d, or its context); those equal the golden's "
                     "(1 request, %.2f s)",
                     s, gc->n_decode, s > 0 ? (int)sc.gen[s - 1] : -1, sc.seconds);
        ck_emit_simple(c, gc->name, be, CK_SERVED, "topk.greedy", QC_VERDICT_PASS, kl, NULL);
        goto out;
    }
    const float *g = ck_golden_row(gc, V, gc->start_pos + gc->n_tokens - 1 + s);
    double m = g ? golden_margin(g, V) : INFINITY;
    int tie = m <= lim->tie;
    snprintf(kl, sizeof kl, "greedy token %d of %d: server %d, golden %d (golden margin %.3g %s "
             "tie %.3g)%s", s, gc->n_decode, (int)sc.gen[s], (int)gc->decode_tokens[s], m,
             tie ? "<=" : ">", lim->tie,
             tie ? ": a near-tie, the rest is not compared" : "");
    ck_emit_simple(c, gc->name, be, CK_SERVED, "topk.greedy",
                   tie ? QC_VERDICT_PASS : QC_VERDICT_FAIL, kl, NULL);
out:
    qc_score_clear(&sc);
    free(seq);
}

int ck_http_open(ck_ctx *c) {
    const qc_check_opts *o = c->o;
    if (!o->has_ext || o->ext.kind != QC_RT_HTTP || o->list) return 0;
    qc_server_opts so;
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_server_parse(o->ext.target, &so, &err);
    if (o->insecure) so.insecure = 1; /* --insecure */
    if (st != QC_OK || qc_server_open(&so, 1 << 30, &c->srv, &err) != QC_OK) {
        fprintf(stderr, "qwen-conform: %s\n", err.msg);
        return -1;
    }
    if (o->quiet < QC_QUIET_ALL) fprintf(stderr, "qwen-conform: %s: %s\n", o->ext.name,
                           qc_server_describe(c->srv));
    return 0;
}

void ck_http_file(ck_ctx *c, qc_server *srv, qc_golden *g, const int *sel) {
    qc_err err;
    qc_server_set_vocab(srv, g->cfg.vocab_size);
    qc_server_set_model_ctx(srv, g->cfg.max_position_embeddings);
    for (int i = 0; i < g->n_cases; i++) {
        if (!sel[i]) continue;
        if (ck_stop_now(c)) break;
        const qc_golden_case *gc = &g->cases[i];
        qc_err_clear(&err);
        c->t_row = ck_wall();
        double t0 = c->t_row;
        if (qc_golden_load_case(g, i, &err) != QC_OK) {
            ck_emit_simple(c, gc->name, "-", "-", "load", QC_VERDICT_ERROR, err.msg, NULL);
            continue;
        }
        qc_topk_lim lim;
        ck_topk_limits(c, gc->name, qc_server_k(srv), &lim);
        tf_result r;
        teacher_force(c, srv, gc, &lim, &r);
        ck_topk_emit_rows(c, gc, &lim, &r, c->o->ext.name, CK_SERVED);
        check_greedy(c, srv, gc, &lim);
        qc_golden_unload_case(g, i);
        if (!c->o->quiet)
            fprintf(stderr, "[%s] case %s done (%d requests, %.2f s)\n", c->stem, gc->name,
                    r.requests, ck_wall() - t0);
    }
    if (!ck_stop_now(c)) ck_serving_battery(c, srv, g, sel);
}

/* The top-k of one logits row: ids / lps [k] descending (log-softmax in double). */
static void row_topk(const float *z, int V, int k, int32_t *ids, float *lps) {
    int am = 0;
    for (int i = 1; i < V; i++)
        if (z[i] > z[am]) am = i;
    double s = 0;
    for (int i = 0; i < V; i++) s += exp((double)z[i] - (double)z[am]);
    double lse = (double)z[am] + log(s);
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < V; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= ids[q] == i;
            if (!taken && (best < 0 || z[i] > z[best])) best = i;
        }
        ids[j] = best;
        lps[j] = (float)((double)z[best] - lse);
    }
}

void ck_topk_view_rows(ck_ctx *c, const qc_golden_case *gc, const qc_golden_case *act,
                       const char *bname, const char *mname, int k) {
    int V = c->cfg->vocab_size;
    if (k > V) k = V;
    qc_topk_lim lim;
    ck_topk_limits(c, gc->name, k, &lim);
    tf_result r;
    memset(&r, 0, sizeof r);
    qc_topk_tally_init(&r.t);
    int32_t ids[100];
    float lps[100];
    int rows = gc->n_tokens + (act->decode_logits ? gc->n_decode : 0);
    r.total = gc->n_tokens + gc->n_decode;
    for (int i = 0; i < rows; i++) {
        const float *z = i < gc->n_tokens
                             ? act->prefill_logits + (size_t)i * (size_t)V
                             : act->decode_logits + (size_t)(i - gc->n_tokens) * (size_t)V;
        int p = gc->start_pos + i;
        const float *g = ck_golden_row(gc, V, p);
        if (!z || !g) continue;
        row_topk(z, V, k, ids, lps);
        qc_topk_tally_row(&r.t, &lim, g, V, ids, lps, k, p);
        r.scored++;
    }
    ck_topk_emit_rows(c, gc, &lim, &r, bname, mname);
}
