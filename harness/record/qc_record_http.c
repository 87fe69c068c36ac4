/* qc_record_http.c — `record --like GOLDEN.h5 --backend http:URL[,k=v...] --out ACTUAL.h5`: every
 * case of a golden asked of a running server, teacher-forced exactly as `check --backend
 * http:` asks it (ck_tf_rows_get, qc_check_topk.c: history + prompt + the golden's decode
 * tokens, the top-k distribution at every position), written as a top-k ACTUAL
 * (golden/SCHEMA.md "Top-k ACTUAL": prefill/topk and decode/topk, no logits, no hidden
 * states, no state), so that `qwen-conform diff GOLDEN ACTUAL` later gives check's topk.*
 * verdicts without the server.
 *
 * The server loads its own model: the ACTUAL carries the golden's config_json (the cases'
 * shapes) and no hashes (diff's model_hash is SKIPPED). --model and the prefill flags are
 * refused (the server decides how it prefills). A server that answers wrongly (HTTP error,
 * bad JSON, an id out of range, NaN) is a FAIL of the runtime (exit 1) naming the case and
 * the request; an unreachable server or a bad option exit 2. Nothing is written unless every
 * case was answered at every position (positions=N, a subset, is refused).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_check_topk.h"
#include "qc_cli.h"
#include "qc_cmd_record_internal.h"
#include "qc_registry.h"
#include "qc_server.h"

#define PROG QC_RECORD_PROG

int qc_record_is_http(const char *backend) {
    return backend && !strncmp(backend, "http:", 5);
}

/* The flags that mean nothing for a server: refused. */
static qc_status http_args(const record_args *a, qc_err *err) {
    const char *clash = a->model ? "--model" : a->pf.dynamic == 0 ? "--static"
                        : a->pf.no_kv_cache ? "--no-kv-cache" : a->threads ? "--threads"
                        : a->chunk_size ? "--chunk-size" : a->dn_kernel >= 0 ? "--dn-kernel"
                        : NULL;
    if (clash)
        return qc_errf(err, QC_ERR_ARG, "%s: not with --backend http: (the server loads its own "
                       "model and decides how it prefills)", clash);
    return QC_OK;
}

static int32_t *dup_ids(const int32_t *src, int n) {
    int32_t *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    if (d && n > 0) memcpy(d, src, (size_t)n * sizeof *d);
    return d;
}

/* The golden case gc's inputs and the server's rows tr as a top-k case out. */
static qc_status http_case_out(const qc_golden_case *gc, const ck_tf_rows *tr,
                               const char *backend, qc_golden_case *out, qc_err *err) {
    const int T = gc->n_tokens, S = gc->n_decode, k = tr->k;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", gc->name);
    snprintf(out->description, sizeof out->description, "record --like through %.60s, top-%d "
             "log-probabilities: %.160s", backend, k, gc->description);
    out->start_pos = gc->start_pos;
    out->max_seq_len = gc->max_seq_len;
    out->n_history = gc->n_history;
    out->n_tokens = T;
    out->n_decode = S;
    out->tk_k = k;
    const size_t pk = (size_t)T * (size_t)k, dk = (size_t)S * (size_t)k;
    out->history = gc->n_history > 0 ? dup_ids(gc->history, gc->n_history) : NULL;
    out->tokens = dup_ids(gc->tokens, T);
    out->decode_tokens = S > 0 ? dup_ids(gc->decode_tokens, S) : NULL;
    out->prefill_tk_ids = dup_ids(tr->ids, (int)pk);
    out->prefill_tk_lps = malloc((pk ? pk : 1) * sizeof *out->prefill_tk_lps);
    if (S > 0) {
        out->decode_tk_ids = dup_ids(tr->ids + pk, (int)dk);
        out->decode_tk_lps = malloc(dk * sizeof *out->decode_tk_lps);
    }
    if ((gc->n_history > 0 && !out->history) || !out->tokens || !out->prefill_tk_ids ||
        !out->prefill_tk_lps ||
        (S > 0 && (!out->decode_tokens || !out->decode_tk_ids || !out->decode_tk_lps)))
        return qc_errf(err, QC_ERR_OOM, "case %s: out of memory", gc->name);
    memcpy(out->prefill_tk_lps, tr->lps, pk * sizeof *out->prefill_tk_lps);
    if (S > 0) memcpy(out->decode_tk_lps, tr->lps + pk, dk * sizeof *out->decode_tk_lps);
    return QC_OK;
}

typedef struct {
    qc_golden *g;
    qc_server *srv;
    qc_golden_case *cases;  /* [g->n_cases] */
    int n_done;
    int requests;
    double seconds;
    int k;
} http_run;

/* Case i asked of the server, into r->cases[i]. */
static qc_status http_run_case(const record_args *a, http_run *r, int i, qc_err *err) {
    qc_status st = qc_golden_load_case(r->g, i, err);
    if (st) return st;
    const qc_golden_case *gc = &r->g->cases[i];
    ck_tf_rows tr;
    ck_tf_rows_get(r->srv, gc, &tr);
    r->requests += tr.requests;
    r->seconds += tr.seconds;
    if (tr.fail[0])
        st = qc_errf(err, QC_ERR_RUNTIME, "%s: case %s: the server's answer is not valid: %s",
                     a->backend, gc->name, tr.fail);
    else if (tr.n_have < tr.rows)
        st = qc_errf(err, QC_ERR_ARG, "%s: case %s: %d of %d positions scored (the positions= "
                     "option): record writes every position, drop it", a->backend, gc->name,
                     tr.n_have, tr.rows);
    else if (!(st = http_case_out(gc, &tr, a->backend, &r->cases[i], err)))
        r->n_done = i + 1;
    else
        qc_case_free(&r->g->cfg, &r->cases[i]);
    r->k = tr.k;
    ck_tf_rows_free(&tr);
    qc_golden_unload_case(r->g, i);
    return st;
}

/* Open the golden and the server. */
static qc_status http_setup(const record_args *a, http_run *r, qc_err *err) {
    qc_status st = qc_golden_open_lazy(a->like, &r->g, err);
    if (st) return st;
    qc_runtime_spec rs;
    qc_server_opts so;
    if ((st = qc_registry_parse(a->backend, 0, &rs, err)) ||
        (st = qc_server_parse(rs.target, &so, err)) ||
        (st = qc_server_open(&so, r->g->cfg.vocab_size, &r->srv, err))) {
        qc_err_prefix(err, st, "--backend %s", a->backend);
        return st;
    }
    r->cases = calloc((size_t)r->g->n_cases, sizeof *r->cases);
    if (!r->cases) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", a->like);
    return QC_OK;
}

/* The ACTUAL's root: the golden's config (the server's model is not known here), no hashes. */
static void http_provenance(const record_args *a, const http_run *r, qc_golden *og) {
    memset(og, 0, sizeof *og);
    og->schema_version = QC_GOLDEN_SCHEMA_VERSION;
    snprintf(og->generator, sizeof og->generator, "qwen-conform record %s (%s)", QC_VERSION,
             a->backend);
    og->seed = -1;
    og->config_json = r->g->config_json;
    og->cfg = r->g->cfg;
    og->n_cases = r->g->n_cases;
    og->cases = r->cases;
}

qc_status qc_record_like_http(const record_args *a, qc_err *err) {
    http_run r;
    memset(&r, 0, sizeof r);
    qc_status st = http_args(a, err);
    if (!st) st = http_setup(a, &r, err);
    if (!st)
        fprintf(stderr, "%s: %s: %s\n", PROG, a->backend, qc_server_describe(r.srv));
    for (int i = 0; !st && i < r.g->n_cases; i++) st = http_run_case(a, &r, i, err);
    if (!st) {
        qc_golden og;
        http_provenance(a, &r, &og);
        st = qc_golden_write(a->out, &og, err);
    }
    if (!st) {
        printf("%s: wrote %s: %d case%s of %s asked of the server (top-%d log-probabilities at "
               "every position, teacher-forced; no logits, hidden states or state), %d "
               "request%s, %.2f s: %s\n", PROG, a->out, r.g->n_cases,
               r.g->n_cases == 1 ? "" : "s", a->like, r.k, r.requests,
               r.requests == 1 ? "" : "s", r.seconds, qc_server_describe(r.srv));
        printf("%s: compare with: qwen-conform diff %s %s\n", PROG, a->like, a->out);
    }
    for (int i = 0; r.g && i < r.n_done; i++) qc_case_free(&r.g->cfg, &r.cases[i]);
    free(r.cases);
    qc_server_close(r.srv);
    qc_golden_free(r.g);
    return st;
}
