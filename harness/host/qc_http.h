/* qc_http.h — the HTTP transport of the http: backend: JSON requests to one server, many in
 * flight at once, on libcurl's multi interface (no threads of our own, no hand-written HTTP).
 *
 * Safety, for a server under test that may be slow, wrong or hostile:
 *   - every request has a total timeout (opts.timeout_s) and a connect timeout;
 *   - a response body over opts.max_body bytes is cut off and reported, never buffered whole;
 *   - redirects are never followed (a 3xx is reported with its Location), and only the http
 *     and https schemes are allowed, so requests go only where the user pointed;
 *   - the API key is read from the environment variable opts.key_env at open and sent as
 *     `Authorization: Bearer ...`; it is never copied into a message, a report or a log.
 * Ownership: qc_http_open returns a client the caller frees with qc_http_close; a request's
 * response body (req->resp) is malloc'd by qc_http_perform and freed by qc_http_req_clear.
 * Returns: qc_status; transport failures of one request (refused, reset, timeout, too large)
 * are that request's result (req->err), not an error of the call.
 */
#ifndef QC_HTTP_H
#define QC_HTTP_H

#include <stddef.h>

#include "qc/qc_status.h"

typedef struct {
    char base[1024];    /* scheme://host[:port][/prefix], no trailing '/' */
    double timeout_s;   /* per request, total (default 60) */
    int max_inflight;   /* requests in flight at once (default 8) */
    size_t max_body;    /* response body limit in bytes (default 256 MiB) */
    char key_env[128];  /* environment variable holding the API key ("" = none) */
    int insecure;       /* 1: do not verify the TLS peer / host name (self-signed servers) */
} qc_http_opts;

typedef struct {
    /* request (set by the caller) */
    const char *method; /* "GET" or "POST" */
    char path[256];     /* "/v1/completions" (appended to base) */
    char *body;         /* POST: JSON text (owned by the caller) */
    /* result (set by qc_http_perform) */
    long status;        /* HTTP status; 0 when no response arrived */
    char *resp;         /* response body, NUL-terminated (malloc'd; NULL when none) */
    size_t resp_len;
    char ctype[96];     /* Content-Type of the response ("" when none) */
    char err[512];      /* transport failure ("" = the response arrived whole) */
    double seconds;     /* wall time of this request */
} qc_http_req;

typedef struct qc_http qc_http;

/* Defaults above; base empty. */
void qc_http_opts_default(qc_http_opts *o);
/* A client for o->base. QC_ERR_ARG: not an http(s) URL, or key_env names a variable that is
 * not set (the message names the variable, never its value). */
qc_status qc_http_open(const qc_http_opts *o, qc_http **out, qc_err *err);
void qc_http_close(qc_http *h); /* NULL-safe */
/* Perform reqs[0..n) with at most max_inflight at once; fills each result. QC_OK, or
 * QC_ERR_OOM / QC_ERR_RUNTIME when libcurl itself cannot run (not a request's failure). */
qc_status qc_http_perform(qc_http *h, qc_http_req *reqs, int n, qc_err *err);
/* Free a request's result (resp) and clear its result fields; the request part stays. */
void qc_http_req_clear(qc_http_req *r);
/* The URL a request goes to (for messages): base + path. */
void qc_http_url(const qc_http *h, const char *path, char *buf, size_t n);
/* The first n bytes of a response body, control characters escaped (evidence for a FAIL). */
void qc_http_snippet(const qc_http_req *r, size_t n, char *buf, size_t cap);

#endif /* QC_HTTP_H */
