/* qc_http.c — libcurl multi transport (qc_http.h). */
#include "qc_http.h"

#include <curl/curl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

struct qc_http {
    qc_http_opts o;
    CURLM *multi;
    struct curl_slist *headers; /* Content-Type, Accept, [Authorization]: holds the key */
};

/* One transfer in flight: the request it fills and its growing body. */
typedef struct {
    qc_http_req *r;
    CURL *e;
    char *buf;
    size_t len, cap, max;
    int too_large;
    double t0;
} xfer;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void qc_http_opts_default(qc_http_opts *o) {
    memset(o, 0, sizeof *o);
    o->timeout_s = 60.0;
    o->max_inflight = 8;
    o->max_body = (size_t)256 << 20;
}

static int curl_ready(void) {
    static int done, ok;
    if (!done) {
        ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
        done = 1;
    }
    return ok;
}

qc_status qc_http_open(const qc_http_opts *o, qc_http **out, qc_err *err) {
    *out = NULL;
    if (strncasecmp(o->base, "http://", 7) && strncasecmp(o->base, "https://", 8))
        return qc_errf(err, QC_ERR_ARG, "--backend http: '%s' is not an http:// or https:// URL",
                       o->base);
    if (!curl_ready()) return qc_errf(err, QC_ERR_RUNTIME, "http: libcurl failed to initialise");
    qc_http *h = calloc(1, sizeof *h);
    if (!h) return qc_errf(err, QC_ERR_OOM, "http: out of memory");
    h->o = *o;
    size_t bl = strlen(h->o.base);
    while (bl > 0 && h->o.base[bl - 1] == '/') h->o.base[--bl] = '\0';
    if (h->o.timeout_s <= 0) h->o.timeout_s = 60.0;
    if (h->o.max_inflight < 1) h->o.max_inflight = 1;
    if (h->o.max_body == 0) h->o.max_body = (size_t)256 << 20;
    h->headers = curl_slist_append(NULL, "Content-Type: application/json");
    h->headers = curl_slist_append(h->headers, "Accept: application/json");
    h->headers = curl_slist_append(h->headers, "Expect:"); /* no 100-continue round trip */
    if (o->key_env[0]) {
        const char *key = getenv(o->key_env);
        if (!key || !key[0]) {
            qc_http_close(h);
            return qc_errf(err, QC_ERR_ARG, "--backend http: key_env=%s: the environment variable "
                           "%s is not set (or empty)", o->key_env, o->key_env);
        }
        size_t n = strlen(key) + 32;
        char *line = malloc(n);
        if (line) {
            snprintf(line, n, "Authorization: Bearer %s", key);
            h->headers = curl_slist_append(h->headers, line);
            memset(line, 0, n); /* the slist holds its own copy */
            free(line);
        }
    }
    h->multi = curl_multi_init();
    if (!h->headers || !h->multi) {
        qc_http_close(h);
        return qc_errf(err, QC_ERR_OOM, "http: out of memory");
    }
    *out = h;
    return QC_OK;
}

void qc_http_close(qc_http *h) {
    if (!h) return;
    if (h->multi) curl_multi_cleanup(h->multi);
    curl_slist_free_all(h->headers);
    free(h);
}

void qc_http_req_clear(qc_http_req *r) {
    free(r->resp);
    r->resp = NULL;
    r->resp_len = 0;
    r->status = 0;
    r->ctype[0] = r->err[0] = '\0';
    r->seconds = 0;
}

void qc_http_url(const qc_http *h, const char *path, char *buf, size_t n) {
    snprintf(buf, n, "%s%s", h->o.base, path);
}

static size_t on_body(char *p, size_t sz, size_t nm, void *user) {
    xfer *x = user;
    size_t n = sz * nm;
    if (x->len + n > x->max) {
        x->too_large = 1;
        return 0; /* abort the transfer: CURLE_WRITE_ERROR */
    }
    if (x->len + n + 1 > x->cap) {
        size_t cap = x->cap ? x->cap : 16384;
        while (cap < x->len + n + 1) cap *= 2;
        char *nb = realloc(x->buf, cap);
        if (!nb) return 0;
        x->buf = nb;
        x->cap = cap;
    }
    memcpy(x->buf + x->len, p, n);
    x->len += n;
    x->buf[x->len] = '\0';
    return n;
}

static qc_status xfer_start(qc_http *h, xfer *x, qc_http_req *r) {
    memset(x, 0, sizeof *x);
    x->r = r;
    x->max = h->o.max_body;
    x->t0 = now_s();
    qc_http_req_clear(r);
    CURL *e = curl_easy_init();
    if (!e) return QC_ERR_OOM;
    char url[1400];
    qc_http_url(h, r->path, url, sizeof url);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h->headers);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(h->o.timeout_s * 1000.0));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(h->o.timeout_s < 10 ? h->o.timeout_s * 1000.0 : 10000.0));
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)h->o.max_body);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, ""); /* whatever libcurl can decode */
    if (h->o.insecure) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (r->method && !strcmp(r->method, "POST")) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body ? r->body : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)(r->body ? strlen(r->body) : 0));
    } else {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    }
    x->e = e;
    if (curl_multi_add_handle(h->multi, e) != CURLM_OK) {
        curl_easy_cleanup(e);
        x->e = NULL;
        return QC_ERR_RUNTIME;
    }
    return QC_OK;
}

/* A finished transfer: its result into the request. */
static void xfer_finish(qc_http *h, xfer *x, CURLcode rc) {
    qc_http_req *r = x->r;
    long st = 0;
    curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &st);
    r->status = st;
    char *ct = NULL;
    if (curl_easy_getinfo(x->e, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct)
        snprintf(r->ctype, sizeof r->ctype, "%s", ct);
    if (x->too_large || rc == CURLE_FILESIZE_EXCEEDED) {
        snprintf(r->err, sizeof r->err, "response body over the %zu-byte limit", x->max);
    } else if (rc != CURLE_OK) {
        snprintf(r->err, sizeof r->err, "%s", curl_easy_strerror(rc));
        if (rc == CURLE_OPERATION_TIMEDOUT)
            snprintf(r->err, sizeof r->err, "no complete response within %.0f s (timeout)",
                     h->o.timeout_s);
    } else if (st >= 300 && st < 400) {
        char *loc = NULL;
        curl_easy_getinfo(x->e, CURLINFO_REDIRECT_URL, &loc);
        snprintf(r->err, sizeof r->err, "HTTP %ld redirect to %.300s: not followed", st,
                 loc ? loc : "(no Location)");
    }
    if (x->buf) {
        r->resp = x->buf;
        r->resp_len = x->len;
        x->buf = NULL;
    }
    r->seconds = now_s() - x->t0;
    curl_multi_remove_handle(h->multi, x->e);
    curl_easy_cleanup(x->e);
    x->e = NULL;
}

qc_status qc_http_perform(qc_http *h, qc_http_req *reqs, int n, qc_err *err) {
    if (n <= 0) return QC_OK;
    int cap = h->o.max_inflight < n ? h->o.max_inflight : n;
    xfer *xs = calloc((size_t)cap, sizeof *xs);
    if (!xs) return qc_errf(err, QC_ERR_OOM, "http: out of memory");
    int next = 0, running = 0, done = 0;
    qc_status st = QC_OK;
    while (done < n && st == QC_OK) {
        for (int i = 0; i < cap && next < n; i++) {
            if (xs[i].e) continue;
            if (xfer_start(h, &xs[i], &reqs[next]) != QC_OK) {
                snprintf(reqs[next].err, sizeof reqs[next].err, "cannot start the request");
                done++;
            }
            next++;
        }
        if (curl_multi_perform(h->multi, &running) != CURLM_OK) {
            st = qc_errf(err, QC_ERR_RUNTIME, "http: curl_multi_perform failed");
            break;
        }
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(h->multi, &left))) {
            if (m->msg != CURLMSG_DONE) continue;
            xfer *x = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            if (x) {
                xfer_finish(h, x, m->data.result);
                done++;
            }
        }
        if (done < n && running > 0) curl_multi_poll(h->multi, NULL, 0, 100, NULL);
    }
    for (int i = 0; i < cap; i++) {
        if (xs[i].e) {
            curl_multi_remove_handle(h->multi, xs[i].e);
            curl_easy_cleanup(xs[i].e);
        }
        free(xs[i].buf);
    }
    free(xs);
    return st;
}

void qc_http_snippet(const qc_http_req *r, size_t n, char *buf, size_t cap) {
    size_t o = 0;
    if (cap == 0) return;
    buf[0] = '\0';
    if (!r->resp) {
        snprintf(buf, cap, "(no body)");
        return;
    }
    for (size_t i = 0; i < r->resp_len && i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)r->resp[i];
        if (c == '\n') { buf[o++] = '\\'; buf[o++] = 'n'; }
        else if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else buf[o++] = (char)c;
    }
    buf[o] = '\0';
    if (r->resp_len > n && o + 4 < cap) strcat(buf, "...");
}
