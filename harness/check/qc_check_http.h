/* qc_check_http.h — a running server as the runtime under test (`--backend http:URL,...`).
 *
 * Per golden case (mode column "served"), from top-k log-probabilities only:
 *   topk.argmax, topk.logprob, topk.top1_in_k, topk.overlap   every prompt and decode position
 *       of the case, teacher-forced: one request with prompt log-probabilities (vllm, sglang),
 *       or one request per prefix, in order, with the server's prompt cache on (llama-server,
 *       openai) — the keyline says how many requests and seconds it cost;
 *   topk.greedy   the greedy continuation of history + prompt equals the golden's decode tokens
 *       (a divergence at a golden near-tie is reported, not failed).
 * Per golden file (case "_serving"), the serving battery (qc_check_serving.c):
 *   repeat_determinism, concurrent_isolation, prefix_cache, long_prompt_chunks.
 * Every verdict is against the golden or the server's own solo / cold answers; a server that
 * answers wrongly (HTTP error, bad JSON, missing fields, ids out of range, NaN) FAILS the
 * check with the evidence and the run goes on.
 */
#ifndef QC_CHECK_HTTP_H
#define QC_CHECK_HTTP_H

#include "qc_check_internal.h"
#include "qc_server.h"
#include "qc_topk.h"

#define CK_SERVED "served" /* the mode column of the http: rows */

/* Open the server when the runtime under test is http: (c->srv; no-op otherwise or with
 * --list). 0, or -1 after printing why (unreachable, not a known dialect, a bad option). */
int ck_http_open(ck_ctx *c);
/* The cases of one golden file g (sel[i]: case i selected) against the server. */
void ck_http_file(ck_ctx *c, qc_server *srv, qc_golden *g, const int *sel);

/* The limits of a top-k comparison of case `case_name` at top-k: without a tier the policy's
 * logits tolerance (|d lp| <= 2 (atol + rtol max|g|)) and tie margin, overlap 1; with a tier
 * its measured top-k limits (qc_tier_topk.h; the golden's own when it is a fixture). */
void ck_topk_limits(const ck_ctx *c, const char *case_name, int k, qc_topk_lim *lim);
/* The golden logits row of absolute position p of gc (NULL when p has none). */
const float *ck_golden_row(const qc_golden_case *gc, int V, int p);
/* The token sequence history + prompt + decode of gc (malloc'd; *n its length). */
int32_t *ck_case_seq(const qc_golden_case *gc, int *n);

/* --topk K: the topk.* rows of a run act of any runtime (its logits seen as top-k only). */
void ck_topk_view_rows(ck_ctx *c, const qc_golden_case *gc, const qc_golden_case *act,
                       const char *bname, const char *mname, int k);

/* ---- qc_check_serving.c ---- */
void ck_serving_battery(ck_ctx *c, qc_server *srv, qc_golden *g, const int *sel);

#endif /* QC_CHECK_HTTP_H */
