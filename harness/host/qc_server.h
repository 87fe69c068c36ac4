/* qc_server.h — a running inference server as a runtime under test (`--backend http:URL,...`):
 * the dialects (what to send, how to read the answer), detection, and scoring requests.
 *
 * A server is asked for top-k log-probabilities, never full logits. One scoring request sends a
 * token-id prompt seq[0..n) and asks for
 *   - the top-k distribution at every position from..n-1 (the distribution at position p is
 *     the model's prediction of token p+1; the one at n-1 comes with the first generated
 *     token). Only dialects with prompt log-probabilities (vllm, sglang) can give from < n-1;
 *     the others score one position per request (teacher forcing = one request per prefix);
 *   - n_gen greedy tokens (temperature 0, end-of-sequence ignored), with the distribution at
 *     each generated position.
 * Dialects (docs/servers.md has the request and response shapes and their sources):
 *   openai        POST /v1/completions, logprobs=k (ids from `token_id:N` keys or content[].id)
 *   vllm          the same + prompt_logprobs=k, return_tokens_as_token_ids, cache_salt (cold)
 *   sglang        POST /generate with input_ids, return_logprob, logprob_start_len,
 *                 top_logprobs_num; POST /flush_cache (cold)
 *   llama-server  POST /completion with a token-array prompt, n_probs=k, cache_prompt (cold:
 *                 cache_prompt false)
 * Every answer is validated before use: HTTP status, JSON, each field's type, token ids in
 * [0, V), finite log-probabilities <= 0, the number of positions and generated tokens. A bad
 * answer is the request's `fail` text (the evidence: URL, status, field, first 200 bytes) — a
 * FAIL of the server, never a crash or a hang of ours. The API key stays in qc_http.
 */
#ifndef QC_SERVER_H
#define QC_SERVER_H

#include <stdint.h>

#include "qc/qc_status.h"

typedef enum {
    QC_API_AUTO = 0,
    QC_API_OPENAI,
    QC_API_VLLM,
    QC_API_SGLANG,
    QC_API_LLAMA
} qc_api;

const char *qc_api_name(qc_api a); /* "auto", "openai", "vllm", "sglang", "llama-server" */

typedef struct {
    char url[1024];     /* base URL: http(s)://host:port[/prefix] */
    qc_api api;         /* api=auto|openai|vllm|sglang|llama-server */
    char model[256];    /* model=ID ("" = the server's first /v1/models entry, or none) */
    int k;              /* k=N: top-k log-probabilities asked for (default 5) */
    double timeout_s;   /* timeout=S per request (default 60) */
    int inflight;       /* inflight=N requests at once (default 8) */
    char key_env[128];  /* key_env=VAR: the API key's environment variable */
    int insecure;       /* insecure=1 (or --insecure): accept self-signed TLS */
    int block;          /* block=N: the server's prefix-cache block size (0: dialect default) */
    int chunk;          /* chunk=N: the server's prefill chunk / batch size (0: ask, else 512) */
    int max_positions;  /* positions=N: per-prefix dialects score at most N positions per case
                           (0: every position) */
    int max_body_mb;    /* max_body=MB response limit (default 256) */
    int ctx;            /* ctx=N: tokens a request may hold, prompt + generated (0: what the
                           server tells: vLLM's max_model_len, llama-server's slot n_ctx) */
} qc_server_opts;

/* Parse the text after "http:" (URL[,k=v...]). QC_ERR_ARG naming the key or value. */
qc_status qc_server_parse(const char *spec, qc_server_opts *o, qc_err *err);

typedef struct qc_server qc_server;

/* Connect: the dialect (asked of the server when auto), the model id, the block and chunk
 * sizes where the server tells them. vocab: token ids must be below it. QC_ERR_ARG when the
 * server cannot be reached or is not one of the dialects (the message names the URL). */
qc_status qc_server_open(const qc_server_opts *o, int vocab, qc_server **out, qc_err *err);
void qc_server_close(qc_server *s); /* NULL-safe */
/* The vocabulary size answers are validated against (each golden file's config). */
void qc_server_set_vocab(qc_server *s, int vocab);
qc_api qc_server_api(const qc_server *s);
/* What was chosen and why (for the report): "vllm (GET /v1/models: owned_by vllm)". */
const char *qc_server_describe(const qc_server *s);
int qc_server_k(const qc_server *s);
int qc_server_block(const qc_server *s);   /* tokens per prefix-cache block */
int qc_server_chunk(const qc_server *s);   /* tokens per prefill chunk / batch */
int qc_server_max_positions(const qc_server *s);
int qc_server_inflight(const qc_server *s);
/* Tokens one request may hold (prompt + generated): ctx=N, else what the server told, else the
 * model's own limit set by qc_server_set_model_ctx; 0: unknown, no limit applied. */
int qc_server_ctx(const qc_server *s);
/* The model's max_position_embeddings (each golden file's config): the context when neither
 * ctx=N nor the server says (a server does not serve past its model's positions). */
void qc_server_set_model_ctx(qc_server *s, int n);
/* 1 when one request returns the distribution at every prompt position (vllm, sglang). */
int qc_server_prompt_logprobs(const qc_server *s);
/* 1 when a request can bypass the prefix cache on its own (vllm cache_salt, llama-server
 * cache_prompt false); sglang flushes the whole cache instead (qc_server_flush). */
int qc_server_cold_per_request(const qc_server *s);
/* sglang: POST /flush_cache. Other dialects: QC_ERR_UNSUPPORTED. A failure is QC_ERR_RUNTIME
 * with the evidence. */
qc_status qc_server_flush(qc_server *s, qc_err *err);

typedef struct {
    /* request */
    const int32_t *seq;  /* [n] prompt token ids (borrowed) */
    int n;
    int from;            /* first position whose distribution is wanted (n-1: the last only) */
    int n_gen;           /* greedy tokens to generate (>= 1) */
    int cold;            /* 1: bypass the prefix cache */
    int prompt_logprobs; /* vllm: 1 to ask prompt_logprobs even when from == n-1 (0: never
                            when from == n-1, so the request may read the prefix cache) */
    int ids_only;        /* 1: the generated ids are what is wanted (a free greedy run): the
                            generated positions' top-k are not required, and the server may
                            stop early at its end-of-sequence token (n_gen_got < n_gen) */
    /* result */
    int rows;            /* distributions for positions from .. from+rows-1 (with ids_only: the
                            prompt positions only) */
    int k;               /* entries per row */
    int32_t *ids;        /* [rows, k] token ids, descending log-probability (-1: absent) */
    float *lps;          /* [rows, k] log-probabilities */
    int32_t *gen;        /* [n_gen] generated ids */
    int n_gen_got;
    long cached;         /* prompt tokens the server says came from its cache (-1: unknown) */
    char fail[768];      /* "" when the answer was whole and valid; else the evidence */
    int transport;       /* 1: no whole HTTP answer arrived (refused, reset, timeout, too large,
                            a redirect): the server, not this answer, is the problem */
    double seconds;      /* wall time of the request */
} qc_score;

/* Run n scoring requests, at most the server's inflight at once (n == 1: a solo request).
 * Each request's result or fail text is set; QC_OK unless nothing could be sent (OOM). */
qc_status qc_server_score(qc_server *s, qc_score *sc, int n, qc_err *err);
/* Free a score's result arrays (the request part stays). */
void qc_score_clear(qc_score *sc);

#endif /* QC_SERVER_H */
