/* qc_check_topk.h — top-k log-probabilities of a case, shared by the three commands that see a
 * runtime through them:
 *   check   a server (qc_check_http.c): teacher-forced distributions asked of it, tallied
 *           against the golden, the topk.* rows;
 *   record  `record --like GOLDEN --backend http:URL`: the same distributions, written as a
 *           top-k ACTUAL (golden/SCHEMA.md "Top-k ACTUAL");
 *   diff    such an ACTUAL tallied and reported with the same rows, limits and verdicts.
 */
#ifndef QC_CHECK_TOPK_H
#define QC_CHECK_TOPK_H

#include <stdint.h>

#include "qc_check_internal.h"
#include "qc_server.h"
#include "qc_runcase.h"
#include "qc_topk.h"

/* One case's tally and what it cost (the keylines of the topk.* rows). */
typedef struct {
    qc_topk_tally t;
    int requests;
    double seconds;
    int scored;          /* positions scored */
    int total;           /* positions the case has */
    char fail[900];      /* the first invalid answer, with its position ("" = none) */
} ck_tf_result;

/* The teacher-forced top-k distributions of one case, as a server gave them: every position
 * start_pos .. start_pos + T + S - 1 (history + prompt + decode tokens fed, the distribution
 * at position p predicting token p + 1), in one request with prompt log-probabilities (vllm,
 * sglang), else one request per prefix in order (a spread of positions=N of them when the
 * server options say so). */
typedef struct {
    int from;            /* absolute position of row 0 (the case's start_pos) */
    int rows;            /* T + S */
    int k;               /* entries per row (the server's k; 0 before any answer) */
    int32_t *ids;        /* [rows, k] descending log-probability (-1 where not scored) */
    float *lps;          /* [rows, k] */
    unsigned char *have; /* [rows] 1 where the server answered */
    int n_have;
    int requests;
    double seconds;
    char fail[900];      /* the first invalid answer or transport failure ("" = none) */
} ck_tf_rows;

/* Ask srv for gc's distributions (gc loaded). Never fails: out->fail says what went wrong
 * (the rows answered before it are kept). Free with ck_tf_rows_free. */
void ck_tf_rows_get(qc_server *srv, const qc_golden_case *gc, ck_tf_rows *out);
void ck_tf_rows_free(ck_tf_rows *r);

/* res := the tally of tr against the golden case gc (V: vocabulary) under lim, with tr's cost
 * and failure. */
void ck_tf_tally(const qc_golden_case *gc, int V, const qc_topk_lim *lim, const ck_tf_rows *tr,
                 ck_tf_result *res);
/* Add rows [rows, k] at absolute positions pos0.. to res (have: NULL, or 1 per row to take);
 * a position without a golden row is skipped. */
void ck_tf_tally_rows(const qc_golden_case *gc, int V, const qc_topk_lim *lim, int pos0, int rows,
                      int k, const int32_t *ids, const float *lps, const unsigned char *have,
                      ck_tf_result *res);

/* qc_check_http.c: the rows topk.argmax, topk.logprob, topk.top1_in_k, topk.overlap of one
 * case from its tally (all four FAIL with res->fail when it is set). */
void ck_topk_emit_rows(ck_ctx *c, const qc_golden_case *gc, const qc_topk_lim *lim,
                       const ck_tf_result *r, const char *be, const char *mode);

/* A runtime that returns top-k log-probabilities only (QC_BE_CAP_TOPK_ONLY: a plugin's or an
 * exec adapter's forward_topk) in one mode: the case run with qc_case_input.topk (k = --topk,
 * else CK_TOPK_DEFAULT; teacher-forced decode), into act; its rows tallied against the golden
 * and reported as topk.argmax / logprob / top1_in_k / overlap (ck_topk_emit_rows; a failed or
 * malformed answer FAILs all four with the runtime's message); every check that needs the
 * logits, hidden states or the state SKIPPED ("capability 'topk_only' ..."). 1 when act holds
 * the run (free with qc_case_free), 0 otherwise. */
#define CK_TOPK_DEFAULT QC_RUNCASE_TOPK_DEFAULT
int ck_topk_runtime_mode(ck_ctx *c, qc_backend *be, const qc_golden_case *gc, qc_mode mode,
                         const char *bname, qc_golden_case *act);

#endif /* QC_CHECK_TOPK_H */
