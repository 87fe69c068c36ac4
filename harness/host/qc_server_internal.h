/* qc_server_internal.h — what qc_server.c (connection, detection, the request loop) and
 * qc_server_dialect.c (request bodies and answer parsing per dialect) share. Host-private. */
#ifndef QC_SERVER_INTERNAL_H
#define QC_SERVER_INTERNAL_H

#include <cjson/cJSON.h>

#include "qc_http.h"
#include "qc_server.h"

struct qc_server {
    qc_server_opts o;
    qc_http *http;
    qc_api api;          /* the dialect in use (never AUTO) */
    int vocab;           /* ids must be in [0, vocab) */
    char describe[512];  /* what was chosen and why */
    long cold_counter;   /* makes each cold request's cache_salt unique */
    int model_ctx;       /* the golden's max_position_embeddings (qc_server_set_model_ctx) */
    int anchor;          /* llama-server: a token id whose text is complete UTF-8, biased to be
                            the sampled token of scoring requests (-1: none) — llama-server
                            omits the log-probabilities of a generated token whose text ends
                            in a cut UTF-8 sequence (docs/llama-server.md); the bias acts in
                            the sampler only, the reported log-probabilities stay raw */
};

/* The endpoint and JSON body of a scoring request (body malloc'd; NULL on OOM). */
const char *qcs_path(const qc_server *s);
char *qcs_body(qc_server *s, const qc_score *sc);
/* Read a 2xx answer's JSON into sc (rows, ids, lps, gen, cached). 0, or -1 with sc->fail set
 * (the field that is wrong; the caller adds URL, status and the body's first bytes). */
int qcs_parse(const qc_server *s, const cJSON *root, qc_score *sc);
/* Allocate sc's result arrays for `rows` rows of s->o.k entries (-1 / 0 filled). 0 or -1. */
int qcs_alloc(const qc_server *s, qc_score *sc, int rows);
/* Store one entry (id, lp) into row r at slot j after validating it; 0, or -1 with fail set. */
int qcs_put(const qc_server *s, qc_score *sc, int r, int j, double id, double lp,
            const char *field);
/* Sort each row's entries by descending log-probability (ties: lower id first). */
void qcs_sort_rows(qc_score *sc);

#endif /* QC_SERVER_INTERNAL_H */
