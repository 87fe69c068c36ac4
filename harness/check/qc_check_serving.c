/* qc_check_serving.c — the serving battery of an http: runtime (qc_check_http.h): what a plain
 * replay of the golden cases never reaches — the prefix cache, concurrent slots, the server's
 * own prefill chunking, repeatability. Goldens come from the fixture's cases, never from the
 * server; where no golden exists for a request (a generated continuation), the server's own
 * cold or solo answer is the reference.
 *
 * Requests here never ask prompt log-probabilities (vLLM serves such requests without reading
 * its prefix cache): each reads the top-k of the last prompt position and of a few greedy
 * tokens after it.
 */
#include "qc_check_http.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_GEN 4       /* generated tokens compared per battery request */
#define KL_LEN sizeof ((qc_check_row *)0)->keyline

/* A battery request: seq[0..n), the last position's top-k and N_GEN greedy tokens. */
static void req_init(qc_score *sc, const int32_t *seq, int n, int n_gen, int cold) {
    memset(sc, 0, sizeof *sc);
    sc->seq = seq;
    sc->n = n;
    sc->from = n - 1;
    sc->n_gen = n_gen;
    sc->cold = cold;
    sc->cached = -1;
}

/* Run n requests at once (or one at a time when solo); the first failure's evidence into
 * why. Returns 0 when every answer is valid. */
static int run(qc_server *srv, qc_score *sc, int n, int solo, char *why, size_t wn) {
    qc_err err;
    qc_err_clear(&err);
    for (int i = 0; i < n; i += solo ? 1 : n) {
        if (sc[i].cold && !qc_server_cold_per_request(srv) && qc_server_flush(srv, &err)) {
            snprintf(why, wn, "%s", err.msg);
            return -1;
        }
        if (qc_server_score(srv, sc + i, solo ? 1 : n, &err)) {
            snprintf(why, wn, "%s", err.msg);
            return -1;
        }
        if (solo && sc[i].fail[0]) break; /* the rest would only repeat it (or its timeout) */
    }
    for (int i = 0; i < n; i++)
        if (sc[i].fail[0]) {
            snprintf(why, wn, "%s", sc[i].fail);
            return -1;
        }
    return 0;
}

/* b against a (same request): every row within lim_lp (near-ties of tie excused), same
 * generated ids. 1 when they agree; *bit: bitwise; *maxd: max |d lp|; what: the first
 * difference. */
static int same_answer(const qc_score *a, const qc_score *b, double lim_lp, double tie, int *bit,
                       double *maxd, char *what, size_t wn) {
    *bit = 1;
    *maxd = 0;
    int ok = 1;
    for (int r = 0; r < a->rows && r < b->rows; r++) {
        int bw;
        double d;
        size_t o = (size_t)r * (size_t)a->k;
        int ag = qc_topk_agree(a->ids + o, a->lps + o, b->ids + o, b->lps + o, a->k, lim_lp, tie,
                               &bw, &d);
        *bit &= bw;
        if (d > *maxd) *maxd = d;
        if (!ag && ok) {
            snprintf(what, wn, "position %d: top-1 %d (%.6g) vs %d (%.6g), max |d logprob| %.3g",
                     a->from + r, (int)a->ids[o], a->lps[o], (int)b->ids[o], b->lps[o], d);
            ok = 0;
        }
    }
    for (int s = 0; s < a->n_gen_got && s < b->n_gen_got; s++)
        if (a->gen[s] != b->gen[s]) {
            if (ok) snprintf(what, wn, "generated token %d: %d vs %d", s, (int)a->gen[s],
                             (int)b->gen[s]);
            *bit = 0;
            ok = 0;
            break;
        }
    return ok;
}

/* The selected, loadable case with start_pos 0 and the most prompt tokens <= max_t (-1). */
static int pick_case(qc_golden *g, const int *sel, int max_t, int exclude) {
    int best = -1;
    for (int i = 0; i < g->n_cases; i++) {
        const qc_golden_case *gc = &g->cases[i];
        if (!sel[i] || i == exclude || gc->start_pos != 0 || gc->n_tokens > max_t) continue;
        if (best < 0 || gc->n_tokens > g->cases[best].n_tokens) best = i;
    }
    return best;
}

/* The |d lp| limit and tie of a case at its last prompt position. */
static double case_limit(ck_ctx *c, qc_server *srv, const qc_golden_case *gc,
                         qc_topk_lim *lim) {
    ck_topk_limits(c, gc->name, qc_server_k(srv), lim);
    const float *g = ck_golden_row(gc, c->cfg->vocab_size, gc->start_pos + gc->n_tokens - 1);
    return g ? qc_topk_lp_limit(lim, g, c->cfg->vocab_size) : 2 * lim->lp_atol;
}

static void repeat_determinism(ck_ctx *c, qc_server *srv, const qc_golden_case *gc, int n) {
    const char *be = c->o->ext.name;
    qc_topk_lim lim;
    double ll = case_limit(c, srv, gc, &lim);
    qc_score sc[3];
    char why[900] = "", kl[KL_LEN];
    for (int i = 0; i < 3; i++) req_init(&sc[i], gc->tokens, n, N_GEN, 0);
    if (run(srv, sc, 3, 1, why, sizeof why)) {
        ck_emit_simple(c, "_serving", be, CK_SERVED, "repeat_determinism", QC_VERDICT_FAIL,
                       "the server's answer is not valid: see detail", qc_strdup_printf("%s", why));
    } else {
        int bit = 1, ok = 1;
        double maxd = 0;
        for (int i = 1; i < 3; i++) {
            int b;
            double d;
            char w[300] = "";
            int a = same_answer(&sc[0], &sc[i], ll, lim.tie, &b, &d, w, sizeof w);
            if (!a && ok) snprintf(why, sizeof why, "repeat %d: %s", i + 1, w);
            ok &= a;
            bit &= b;
            if (d > maxd) maxd = d;
        }
        if (ok)
            snprintf(kl, sizeof kl, "case %s (%d tokens) x 3: %s", gc->name, n,
                     bit ? "bitwise identical" : "");
        if (ok && !bit)
            snprintf(kl, sizeof kl, "case %s (%d tokens) x 3: identical within the tier (max "
                     "|d logprob| %.3g <= %.3g), not bitwise", gc->name, n, maxd, ll);
        if (!ok)
            snprintf(kl, sizeof kl, "case %s (%d tokens) x 3 differ beyond the tier (%.3g): %s",
                     gc->name, n, ll, why);
        ck_emit_simple(c, "_serving", be, CK_SERVED, "repeat_determinism",
                       ok ? QC_VERDICT_PASS : QC_VERDICT_FAIL, kl, NULL);
    }
    for (int i = 0; i < 3; i++) qc_score_clear(&sc[i]);
}

/* A (case a), B (case b), C (the first 2/3 of A then B's tokens: shares A's prefix), and three
 * copies of A, all in flight at once, each against its solo answer. */
static void concurrent_isolation(ck_ctx *c, qc_server *srv, const qc_golden_case *ga, int na,
                                 const qc_golden_case *gb, int nb) {
    const char *be = c->o->ext.name;
    qc_topk_lim lim;
    double ll = case_limit(c, srv, ga, &lim);
    int pa = (2 * na + 2) / 3, nc = pa + nb;
    int32_t *cseq = malloc((size_t)nc * sizeof *cseq);
    if (!cseq) return;
    memcpy(cseq, ga->tokens, (size_t)pa * sizeof *cseq);
    memcpy(cseq + pa, gb->tokens, (size_t)nb * sizeof *cseq);
    const int32_t *seqs[3] = {ga->tokens, gb->tokens, cseq};
    const int lens[3] = {na, nb, nc};
    const char *names[3] = {"A", "B", "C"};
    qc_score solo[3], con[6];
    char why[900] = "", kl[KL_LEN];
    for (int i = 0; i < 3; i++) req_init(&solo[i], seqs[i], lens[i], N_GEN, 1);
    for (int i = 0; i < 6; i++) req_init(&con[i], seqs[i < 3 ? i : 0], lens[i < 3 ? i : 0], N_GEN, 1);
    int inflight = qc_server_inflight(srv) < 6 ? qc_server_inflight(srv) : 6;
    int ok = 0, bit = 1, distinct = 1;
    double maxd = 0;
    if (run(srv, solo, 3, 1, why, sizeof why) || run(srv, con, 6, 0, why, sizeof why)) {
        ck_emit_simple(c, "_serving", be, CK_SERVED, "concurrent_isolation", QC_VERDICT_FAIL,
                       "the server's answer is not valid: see detail", qc_strdup_printf("%s", why));
        goto out;
    }
    ok = 1;
    for (int i = 0; i < 6; i++) {
        int b;
        double d;
        char w[300] = "";
        int a = same_answer(&solo[i < 3 ? i : 0], &con[i], ll, lim.tie, &b, &d, w, sizeof w);
        if (!a && ok)
            snprintf(why, sizeof why, "%s%s in flight with %d others differs from its solo "
                     "answer: %s", names[i < 3 ? i : 0], i < 3 ? "" : " (a copy)", 5, w);
        ok &= a;
        bit &= b;
        if (d > maxd) maxd = d;
        if (i >= 3) {
            int b2;
            double d2;
            char w2[8];
            same_answer(&con[0], &con[i], ll, lim.tie, &b2, &d2, w2, sizeof w2);
            distinct += !b2;
        }
    }
    if (ok)
        snprintf(kl, sizeof kl, "6 requests in flight (A %d, B %d, C %d tokens sharing %d with "
                 "A, 3 copies of A; client inflight %d): each equals its solo answer %s (max "
                 "|d logprob| %.3g); the 4 copies of A: %d distinct bitwise", na, nb, nc, pa,
                 inflight, bit ? "bitwise" : "within the tier", maxd, distinct);
    else
        snprintf(kl, sizeof kl, "%s (tier %.3g)", why, ll);
    ck_emit_simple(c, "_serving", be, CK_SERVED, "concurrent_isolation",
                   ok ? QC_VERDICT_PASS : QC_VERDICT_FAIL, kl, NULL);
out:
    for (int i = 0; i < 3; i++) qc_score_clear(&solo[i]);
    for (int i = 0; i < 6; i++) qc_score_clear(&con[i]);
    free(cseq);
}

/* |P| values: the block and chunk sizes (and twice the block) -1, +1, +4, +10. */
static int prefix_lengths(int block, int chunk, int max_p, int *out, int cap) {
    int bases[3] = {block, 2 * block, chunk}, offs[4] = {-1, 1, 4, 10}, n = 0;
    for (int b = 0; b < 3; b++)
        for (int o = 0; o < 4; o++) {
            int p = bases[b] + offs[o], dup = 0;
            if (p < 1 || p > max_p) continue;
            for (int i = 0; i < n; i++) dup |= out[i] == p;
            if (!dup && n < cap) out[n++] = p;
        }
    return n;
}

/* One (P, Q): P warm, then P+Q (the cache hit) against the golden and against a cold P+Q.
 * Returns 1 when it passes; fills what on failure; *hit: cached tokens of P+Q (-1: unknown). */
static int prefix_pair(ck_ctx *c, qc_server *srv, const qc_golden_case *gc, int P, int Q,
                       const qc_topk_lim *lim, double ll, long *hit, int *gone, char *what,
                       size_t wn) {
    qc_score sc[3];
    req_init(&sc[0], gc->tokens, P, 1, 0);
    req_init(&sc[1], gc->tokens, P + Q, N_GEN, 0);
    req_init(&sc[2], gc->tokens, P + Q, N_GEN, 1);
    char why[900] = "";
    int ok = 0;
    *hit = -1;
    if (run(srv, sc, 3, 1, why, sizeof why)) {
        snprintf(what, wn, "P=%d, Q=%d: invalid answer: %s", P, Q, why);
        *gone = sc[0].transport || sc[1].transport || sc[2].transport;
        goto out;
    }
    *hit = sc[1].cached;
    int V = c->cfg->vocab_size;
    qc_topk_tally t;
    qc_topk_tally_init(&t);
    qc_topk_tally_row(&t, lim, ck_golden_row(gc, V, P + Q - 1), V, sc[1].ids, sc[1].lps,
                      sc[1].k, P + Q - 1);
    if (t.flips || t.lp_bad || t.missing) {
        snprintf(what, wn, "P=%d then P+Q=%d (server says %ld cached): position %d vs the golden: "
                 "server top-1 %d (%.6g), golden top-1 %s%d; token %d logprob %.6g vs golden %.6g "
                 "(limit %.3g)", P, P + Q, sc[1].cached, P + Q - 1, (int)sc[1].ids[0],
                 sc[1].lps[0], t.flips ? "" : "agrees, ", t.flips ? (int)t.flip_exp :
                 (int)sc[1].ids[0], (int)t.lp_tok, t.lp_got, t.lp_exp, t.lp_lim);
        goto out;
    }
    int bit;
    double d;
    char w[300] = "";
    if (!same_answer(&sc[2], &sc[1], ll, lim->tie, &bit, &d, w, sizeof w)) {
        snprintf(what, wn, "P=%d then P+Q=%d (server says %ld cached) differs from a cold P+Q: %s",
                 P, P + Q, sc[1].cached, w);
        goto out;
    }
    ok = 1;
out:
    for (int i = 0; i < 3; i++) qc_score_clear(&sc[i]);
    return ok;
}

static void prefix_cache(ck_ctx *c, qc_server *srv, const qc_golden_case *gc) {
    const char *be = c->o->ext.name;
    qc_topk_lim lim;
    double ll = case_limit(c, srv, gc, &lim);
    int ps[12];
    int np = prefix_lengths(qc_server_block(srv), qc_server_chunk(srv), gc->n_tokens - 3, ps, 12);
    char kl[KL_LEN], what[900] = "";
    if (np == 0) {
        snprintf(kl, sizeof kl, "case %s has %d tokens: too short for a prefix at the block size "
                 "%d +- 1..10", gc->name, gc->n_tokens, qc_server_block(srv));
        ck_emit_simple(c, "_serving", be, CK_SERVED, "prefix_cache", QC_VERDICT_SKIP, kl, NULL);
        return;
    }
    int pairs = 0, bad = 0, hits = 0, known = 0, gone = 0;
    char list[160] = "";
    for (int i = 0; i < np && !gone; i++) {
        size_t o = strlen(list);
        snprintf(list + o, sizeof list - o, "%s%d", i ? "," : "", ps[i]);
        for (int q = 1; q <= 3 && !gone; q++) {
            long hit;
            char w[900] = "";
            pairs++;
            if (!prefix_pair(c, srv, gc, ps[i], q, &lim, ll, &hit, &gone, w, sizeof w)) {
                if (!bad++) snprintf(what, sizeof what, "%s", w);
            }
            if (hit >= 0) known++;
            if (hit > 0) hits++;
        }
    }
    qc_verdict v = bad ? QC_VERDICT_FAIL : QC_VERDICT_PASS;
    if (bad)
        snprintf(kl, sizeof kl, "%d of %d (P, Q) pairs fail%s; first: %s", bad, pairs,
                 gone ? " (the server stopped answering: the other pairs were not sent)" : "",
                 what);
    else if (known == pairs && hits == 0)
        v = QC_VERDICT_SKIP;
    if (!bad)
        snprintf(kl, sizeof kl, "%s%d (P, Q) pairs of case %s, |P| in {%s} (block %d, chunk %d), "
                 "|Q| 1..3: cached P+Q equals the golden and a cold P+Q; cache hits reported: "
                 "%d%s", v == QC_VERDICT_SKIP ? "the cache was never hit: " : "", pairs,
                 gc->name, list, qc_server_block(srv), qc_server_chunk(srv), hits,
                 known < pairs ? " (the server does not report them all)" : "");
    ck_emit_simple(c, "_serving", be, CK_SERVED, "prefix_cache", v, kl, NULL);
}

static void long_prompt_chunks(ck_ctx *c, qc_server *srv, const qc_golden_case *gc) {
    const char *be = c->o->ext.name;
    int chunk = qc_server_chunk(srv), n = gc->start_pos + gc->n_tokens;
    char kl[KL_LEN], why[900] = "";
    if (n <= chunk) {
        snprintf(kl, sizeof kl, "the longest prompt (case %s, %d tokens) fits one prefill chunk "
                 "of %d: give chunk=N (the server's batch) or a golden with a longer case",
                 gc->name, n, chunk);
        ck_emit_simple(c, "_serving", be, CK_SERVED, "long_prompt_chunks", QC_VERDICT_SKIP, kl,
                       NULL);
        return;
    }
    int len;
    int32_t *seq = ck_case_seq(gc, &len);
    if (!seq) return;
    qc_topk_lim lim;
    ck_topk_limits(c, gc->name, qc_server_k(srv), &lim);
    qc_score sc;
    req_init(&sc, seq, n, 1, 1);
    if (run(srv, &sc, 1, 1, why, sizeof why)) {
        ck_emit_simple(c, "_serving", be, CK_SERVED, "long_prompt_chunks", QC_VERDICT_FAIL,
                       "the server's answer is not valid: see detail", qc_strdup_printf("%s", why));
    } else {
        int V = c->cfg->vocab_size;
        qc_topk_tally t;
        qc_topk_tally_init(&t);
        qc_topk_tally_row(&t, &lim, ck_golden_row(gc, V, n - 1), V, sc.ids, sc.lps, sc.k, n - 1);
        int bad = t.flips || t.lp_bad || t.missing;
        snprintf(kl, sizeof kl, "case %s: %d tokens in one cold request (> chunk %d): last "
                 "position %s the golden (top-1 %d vs %d, max |d logprob| %.3g, limit %.3g; "
                 "%.2f s)", gc->name, n, chunk, bad ? "DIFFERS from" : "equals",
                 (int)sc.ids[0], t.flips ? (int)t.flip_exp : (int)sc.ids[0], t.lp_max, t.lp_lim,
                 sc.seconds);
        ck_emit_simple(c, "_serving", be, CK_SERVED, "long_prompt_chunks",
                       bad ? QC_VERDICT_FAIL : QC_VERDICT_PASS, kl, NULL);
    }
    qc_score_clear(&sc);
    free(seq);
}

void ck_serving_battery(ck_ctx *c, qc_server *srv, qc_golden *g, const int *sel) {
    qc_err err;
    /* A: the longest case of at most 300 tokens from position 0, else the first 300 tokens of a
     * longer one; B: a shorter case, else A's first half (a different length) */
    int a = pick_case(g, sel, 300, -1);
    if (a < 0) a = pick_case(g, sel, 1 << 30, -1);
    int na = a >= 0 ? (g->cases[a].n_tokens < 300 ? g->cases[a].n_tokens : 300) : 0;
    int b = a >= 0 ? pick_case(g, sel, na - 1, a) : -1;
    int nb = b >= 0 ? g->cases[b].n_tokens : na / 2;
    int longest = -1;
    for (int i = 0; i < g->n_cases; i++)
        if (sel[i] && (longest < 0 || g->cases[i].start_pos + g->cases[i].n_tokens >
                                          g->cases[longest].start_pos + g->cases[longest].n_tokens))
            longest = i;
    int need[3] = {a, b, longest};
    for (int i = 0; i < 3; i++) {
        qc_err_clear(&err);
        if (need[i] >= 0 && qc_golden_load_case(g, need[i], &err) != QC_OK) {
            ck_emit_simple(c, "_serving", "-", "-", "load", QC_VERDICT_ERROR, err.msg, NULL);
            return;
        }
    }
    c->t_row = ck_wall();
    const char *be = c->o->ext.name;
    if (a < 0) {
        const char *why = "no selected case starts at position 0";
        ck_emit_simple(c, "_serving", be, CK_SERVED, "repeat_determinism", QC_VERDICT_SKIP, why,
                       NULL);
        ck_emit_simple(c, "_serving", be, CK_SERVED, "prefix_cache", QC_VERDICT_SKIP, why, NULL);
    } else {
        repeat_determinism(c, srv, &g->cases[a], na);
        prefix_cache(c, srv, &g->cases[a]);
    }
    if (a < 0 || nb < 1)
        ck_emit_simple(c, "_serving", be, CK_SERVED, "concurrent_isolation", QC_VERDICT_SKIP,
                       "needs a selected case of at least 2 tokens that starts at position 0",
                       NULL);
    else
        concurrent_isolation(c, srv, &g->cases[a], na, &g->cases[b >= 0 ? b : a], nb);
    if (longest >= 0) long_prompt_chunks(c, srv, &g->cases[longest]);
    for (int i = 0; i < 3; i++)
        if (need[i] >= 0) qc_golden_unload_case(g, need[i]);
}
