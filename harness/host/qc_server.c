/* qc_server.c — the http: backend's connection: options, dialect detection, scoring requests
 * (qc_server.h). The bodies and parsers of each dialect are in qc_server_dialect.c. */
#include "qc_server_internal.h"
#include "qc_kv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const API_NAMES[] = {"auto", "openai", "vllm", "sglang", "llama-server"};

const char *qc_api_name(qc_api a) {
    return (unsigned)a < sizeof API_NAMES / sizeof *API_NAMES ? API_NAMES[a] : "?";
}

static int parse_int(const char *v, int lo, int hi, int *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) return -1;
    *out = (int)x;
    return 0;
}

/* One k=v option of the spec (split by qc_kv_pair). */
static qc_status parse_opt(const char *k, const char *v, qc_server_opts *o, qc_err *err) {
    int bad = 0;
    if (!strcmp(k, "api")) {
        int found = 0;
        for (int i = 0; i < (int)(sizeof API_NAMES / sizeof *API_NAMES); i++)
            if (!strcmp(v, API_NAMES[i])) { o->api = (qc_api)i; found = 1; }
        if (!strcmp(v, "llama.cpp") || !strcmp(v, "llamacpp")) { o->api = QC_API_LLAMA; found = 1; }
        if (!found)
            return qc_errf(err, QC_ERR_ARG, "--backend http: api=%s: not one of auto, openai, "
                           "vllm, sglang, llama-server", v);
    } else if (!strcmp(k, "model")) {
        snprintf(o->model, sizeof o->model, "%s", v);
    } else if (!strcmp(k, "k")) {
        bad = parse_int(v, 1, 100, &o->k);
    } else if (!strcmp(k, "timeout")) {
        char *end;
        o->timeout_s = strtod(v, &end);
        bad = !*v || *end || !(o->timeout_s > 0 && o->timeout_s <= 86400);
    } else if (!strcmp(k, "inflight")) {
        bad = parse_int(v, 1, 256, &o->inflight);
    } else if (!strcmp(k, "key_env")) {
        snprintf(o->key_env, sizeof o->key_env, "%s", v);
        for (const char *p = v; *p; p++)
            if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                  (*p >= '0' && *p <= '9') || *p == '_'))
                bad = 1;
        bad |= !*v;
    } else if (!strcmp(k, "insecure")) {
        bad = parse_int(v, 0, 1, &o->insecure);
    } else if (!strcmp(k, "block")) {
        bad = parse_int(v, 1, 1 << 20, &o->block);
    } else if (!strcmp(k, "chunk")) {
        bad = parse_int(v, 1, 1 << 24, &o->chunk);
    } else if (!strcmp(k, "positions")) {
        bad = parse_int(v, 0, 1 << 24, &o->max_positions);
    } else if (!strcmp(k, "ctx")) {
        bad = parse_int(v, 2, 1 << 30, &o->ctx);
    } else if (!strcmp(k, "max_body")) {
        bad = parse_int(v, 1, 4096, &o->max_body_mb);
    } else if (!strcmp(k, "key")) {
        return qc_errf(err, QC_ERR_ARG, "--backend http: an API key is never given on the command "
                       "line: put it in an environment variable and name it with key_env=VAR");
    } else {
        return qc_errf(err, QC_ERR_ARG, "--backend http: unknown option '%s' (api, model, k, "
                       "timeout, inflight, key_env, insecure, block, chunk, positions, ctx, max_body)",
                       k);
    }
    if (bad) return qc_errf(err, QC_ERR_ARG, "--backend http: %s=%s: invalid value", k, v);
    return QC_OK;
}

qc_status qc_server_parse(const char *spec, qc_server_opts *o, qc_err *err) {
    memset(o, 0, sizeof *o);
    o->k = 5;
    o->timeout_s = 60;
    o->inflight = 8;
    o->max_body_mb = 256;
    qc_kv kv; /* URL[,k=v...]: the first item whole, then key=value items */
    qc_status st = qc_kv_init(&kv, spec, "--backend http", err);
    if (st) return st;
    const char *url = qc_kv_item(&kv);
    if (!url || (strncasecmp(url, "http://", 7) && strncasecmp(url, "https://", 8)))
        return qc_errf(err, QC_ERR_ARG, "--backend http:URL[,k=v...]: '%s' does not start with "
                       "http:// or https://", url ? url : "");
    snprintf(o->url, sizeof o->url, "%s", url);
    char *k, *v;
    while (!(st = qc_kv_pair(&kv, &k, &v, err)) && k)
        if ((st = parse_opt(k, v, o, err))) return st;
    return st;
}

/* ---- detection ----------------------------------------------------------------------- */

/* GET path: the parsed JSON of a 200 answer (caller frees), or NULL; *status the HTTP status
 * (0: no answer, with the transport error in why). */
static cJSON *get_json(qc_server *s, const char *path, long *status, char *why, size_t n) {
    qc_http_req r;
    memset(&r, 0, sizeof r);
    r.method = "GET";
    snprintf(r.path, sizeof r.path, "%s", path);
    qc_err e;
    cJSON *j = NULL;
    *status = 0;
    if (qc_http_perform(s->http, &r, 1, &e) == QC_OK) {
        *status = r.status;
        if (why) snprintf(why, n, "%s", r.err);
        if (!r.err[0] && r.status == 200 && r.resp) j = cJSON_ParseWithLength(r.resp, r.resp_len);
    }
    qc_http_req_clear(&r);
    return j;
}

static int json_int(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble < 1e9 ? (int)v->valuedouble
                                                                            : 0;
}

/* llama-server: the id of "!" (POST /tokenize), a token whose text is whole UTF-8, as the
 * anchor of scoring requests (qc_server_internal.h); -1 when the server cannot tell. */
static void find_anchor(qc_server *s) {
    s->anchor = -1;
    qc_http_req r;
    memset(&r, 0, sizeof r);
    r.method = "POST";
    snprintf(r.path, sizeof r.path, "/tokenize");
    r.body = "{\"content\":\"!\"}";
    qc_err e;
    if (qc_http_perform(s->http, &r, 1, &e) == QC_OK && !r.err[0] && r.status == 200 && r.resp) {
        cJSON *j = cJSON_ParseWithLength(r.resp, r.resp_len);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens");
        const cJSON *t0 = cJSON_GetArrayItem(t, 0);
        if (cJSON_GetArraySize(t) == 1 && cJSON_IsNumber(t0) && t0->valuedouble >= 0 &&
            t0->valuedouble < 1e9)
            s->anchor = (int)t0->valuedouble;
        cJSON_Delete(j);
    }
    qc_http_req_clear(&r);
}

/* The dialect (when auto), the model id, and what the server tells of its block / chunk. */
static qc_status detect(qc_server *s, qc_err *err) {
    long st = 0;
    char why[512] = "";
    char url[1400];
    cJSON *j = NULL;
    const char *how = "given";
    qc_api api = s->o.api;
    long auth = 0;             /* a 401 / 403 to a detection GET: the API key is missing or wrong */
    const char *auth_path = "";
    if (api == QC_API_AUTO || api == QC_API_SGLANG) {
        if ((j = get_json(s, "/get_model_info", &st, why, sizeof why)) &&
            cJSON_GetObjectItemCaseSensitive(j, "model_path")) {
            if (api == QC_API_AUTO) { api = QC_API_SGLANG; how = "GET /get_model_info answers"; }
        }
        if ((st == 401 || st == 403) && !auth) { auth = st; auth_path = "/get_model_info"; }
        cJSON_Delete(j);
        j = NULL;
    }
    if (st == 0 && why[0] && api == QC_API_AUTO) {
        qc_http_url(s->http, "", url, sizeof url);
        return qc_errf(err, QC_ERR_ARG, "--backend http: cannot reach %s: %s", url, why);
    }
    if (api == QC_API_AUTO || api == QC_API_LLAMA) {
        if ((j = get_json(s, "/props", &st, NULL, 0)) &&
            (cJSON_GetObjectItemCaseSensitive(j, "default_generation_settings") ||
             cJSON_GetObjectItemCaseSensitive(j, "total_slots"))) {
            if (api == QC_API_AUTO) { api = QC_API_LLAMA; how = "GET /props answers"; }
            const cJSON *dgs = cJSON_GetObjectItemCaseSensitive(j, "default_generation_settings");
            int nb = json_int(j, "n_batch");
            if (!nb) nb = json_int(dgs, "n_batch");
            if (!nb) nb = json_int(j, "n_ubatch");
            if (!s->o.chunk && nb) s->o.chunk = nb;
            if (!s->o.ctx) s->o.ctx = json_int(dgs, "n_ctx"); /* a slot's context */
        }
        if ((st == 401 || st == 403) && !auth) { auth = st; auth_path = "/props"; }
        cJSON_Delete(j);
        j = NULL;
    }
    /* /v1/models: the model id, and vLLM's owned_by */
    if ((j = get_json(s, "/v1/models", &st, why, sizeof why))) {
        const cJSON *m0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m0, "id");
        const cJSON *ow = cJSON_GetObjectItemCaseSensitive(m0, "owned_by");
        if (!s->o.model[0] && cJSON_IsString(id))
            snprintf(s->o.model, sizeof s->o.model, "%s", id->valuestring);
        if (!s->o.ctx) s->o.ctx = json_int(m0, "max_model_len"); /* vLLM */
        if (api == QC_API_AUTO) {
            int vllm = cJSON_IsString(ow) && !strcmp(ow->valuestring, "vllm");
            api = vllm ? QC_API_VLLM : QC_API_OPENAI;
            how = vllm ? "GET /v1/models: owned_by vllm" : "GET /v1/models answers";
        }
        cJSON_Delete(j);
    }
    if ((st == 401 || st == 403) && !auth) { auth = st; auth_path = "/v1/models"; }
    if (api == QC_API_AUTO && auth) {
        qc_http_url(s->http, "", url, sizeof url);
        if (s->o.key_env[0])
            return qc_errf(err, QC_ERR_ARG, "--backend http: %s refuses GET %s with HTTP %ld: the "
                           "API key in $%s is not accepted", url, auth_path, auth, s->o.key_env);
        return qc_errf(err, QC_ERR_ARG, "--backend http: %s refuses GET %s with HTTP %ld: the "
                       "server wants an API key: put it in an environment variable and name it "
                       "with key_env=VAR", url, auth_path, auth);
    }
    if (api == QC_API_AUTO) {
        qc_http_url(s->http, "", url, sizeof url);
        return qc_errf(err, QC_ERR_ARG, "--backend http: %s answers none of GET /get_model_info "
                       "(SGLang), /props (llama-server), /v1/models (vLLM, OpenAI-compatible)%s%s"
                       ": name the dialect with api=", url, why[0] ? ": " : "", why);
    }
    s->api = api;
    if (api == QC_API_LLAMA) find_anchor(s);
    if (!s->o.block) s->o.block = api == QC_API_SGLANG ? 1 : 16;
    if (!s->o.chunk) s->o.chunk = 512;
    char anchor[64] = "";
    if (api == QC_API_LLAMA && s->anchor >= 0)
        snprintf(anchor, sizeof anchor, "; scoring requests sample token %d", s->anchor);
    snprintf(s->describe, sizeof s->describe, "%s (%s)%s%.200s; top-%d%s", qc_api_name(api),
             how, s->o.model[0] ? "; model " : "", s->o.model, s->o.k, anchor);
    return QC_OK;
}

qc_status qc_server_open(const qc_server_opts *o, int vocab, qc_server **out, qc_err *err) {
    *out = NULL;
    qc_server *s = calloc(1, sizeof *s);
    if (!s) return qc_errf(err, QC_ERR_OOM, "http: out of memory");
    s->o = *o;
    s->vocab = vocab;
    qc_http_opts ho;
    qc_http_opts_default(&ho);
    snprintf(ho.base, sizeof ho.base, "%s", o->url);
    ho.timeout_s = o->timeout_s;
    ho.max_inflight = o->inflight;
    ho.max_body = (size_t)o->max_body_mb << 20;
    snprintf(ho.key_env, sizeof ho.key_env, "%s", o->key_env);
    ho.insecure = o->insecure;
    qc_status st = qc_http_open(&ho, &s->http, err);
    if (!st) st = detect(s, err);
    if (st) {
        qc_server_close(s);
        return st;
    }
    *out = s;
    return QC_OK;
}

void qc_server_close(qc_server *s) {
    if (!s) return;
    qc_http_close(s->http);
    free(s);
}

void qc_server_set_vocab(qc_server *s, int vocab) { s->vocab = vocab; }
qc_api qc_server_api(const qc_server *s) { return s->api; }
const char *qc_server_describe(const qc_server *s) { return s->describe; }
int qc_server_k(const qc_server *s) { return s->o.k; }
int qc_server_block(const qc_server *s) { return s->o.block; }
int qc_server_chunk(const qc_server *s) { return s->o.chunk; }
int qc_server_max_positions(const qc_server *s) { return s->o.max_positions; }
int qc_server_inflight(const qc_server *s) { return s->o.inflight; }
int qc_server_ctx(const qc_server *s) {
    int c = s->o.ctx > 0 ? s->o.ctx : s->model_ctx;
    /* SGLang generates at most context - prompt - 1 tokens (the test double caps the same way):
     * one position less for a request that must generate */
    return s->api == QC_API_SGLANG && c > 2 ? c - 1 : c;
}
void qc_server_set_model_ctx(qc_server *s, int n) { s->model_ctx = n > 1 ? n : 0; }
int qc_server_prompt_logprobs(const qc_server *s) {
    return s->api == QC_API_VLLM || s->api == QC_API_SGLANG;
}
int qc_server_cold_per_request(const qc_server *s) {
    return s->api == QC_API_VLLM || s->api == QC_API_LLAMA;
}

qc_status qc_server_flush(qc_server *s, qc_err *err) {
    if (s->api != QC_API_SGLANG)
        return qc_errf(err, QC_ERR_UNSUPPORTED, "%s has no cache flush", qc_api_name(s->api));
    qc_http_req r;
    memset(&r, 0, sizeof r);
    r.method = "POST";
    snprintf(r.path, sizeof r.path, "/flush_cache");
    r.body = "{}";
    qc_status st = qc_http_perform(s->http, &r, 1, err);
    if (!st && (r.err[0] || r.status < 200 || r.status >= 300)) {
        char url[1400], snip[300];
        qc_http_url(s->http, r.path, url, sizeof url);
        qc_http_snippet(&r, 200, snip, sizeof snip);
        st = qc_errf(err, QC_ERR_RUNTIME, "POST %.300s: %s (HTTP %ld): %s", url,
                     r.err[0] ? r.err : "refused", r.status, snip);
    }
    qc_http_req_clear(&r);
    return st;
}

void qc_score_clear(qc_score *sc) {
    free(sc->ids);
    free(sc->lps);
    free(sc->gen);
    sc->ids = sc->gen = NULL;
    sc->lps = NULL;
    sc->rows = sc->n_gen_got = 0;
    sc->cached = -1;
    sc->transport = 0;
    sc->fail[0] = '\0';
    sc->seconds = 0;
}

/* One answer into its score: status, JSON, then the dialect's fields. */
static void read_answer(qc_server *s, qc_http_req *r, qc_score *sc) {
    char url[1400], snip[300];
    qc_http_url(s->http, r->path, url, sizeof url);
    sc->seconds = r->seconds;
    if (r->err[0]) {
        sc->transport = 1;
        qc_http_snippet(r, 200, snip, sizeof snip);
        snprintf(sc->fail, sizeof sc->fail, "POST %.300s: %s%s%s", url, r->err,
                 r->resp ? "; body: " : "", r->resp ? snip : "");
        return;
    }
    if (r->status < 200 || r->status >= 300) {
        qc_http_snippet(r, 200, snip, sizeof snip);
        snprintf(sc->fail, sizeof sc->fail, "POST %.300s: HTTP %ld (%s): %s", url, r->status,
                 r->ctype[0] ? r->ctype : "no content type", snip);
        return;
    }
    cJSON *root = r->resp ? cJSON_ParseWithLength(r->resp, r->resp_len) : NULL;
    if (!root) {
        qc_http_snippet(r, 200, snip, sizeof snip);
        snprintf(sc->fail, sizeof sc->fail, "POST %.300s: HTTP %ld but the body is not JSON "
                 "(malformed, truncated, or NaN written as a bare literal): %s", url, r->status,
                 snip);
        return;
    }
    if (qcs_parse(s, root, sc)) {
        char field[768];
        snprintf(field, sizeof field, "%s", sc->fail);
        qc_http_snippet(r, 200, snip, sizeof snip);
        snprintf(sc->fail, sizeof sc->fail, "POST %.300s: %.400s; body: %s", url, field, snip);
    }
    cJSON_Delete(root);
}

qc_status qc_server_score(qc_server *s, qc_score *sc, int n, qc_err *err) {
    qc_http_req *rq = calloc((size_t)(n > 0 ? n : 1), sizeof *rq);
    if (!rq) return qc_errf(err, QC_ERR_OOM, "http: out of memory");
    qc_status st = QC_OK;
    for (int i = 0; i < n; i++) {
        qc_score_clear(&sc[i]);
        if (sc[i].n < 1 || sc[i].from < 0 || sc[i].from > sc[i].n - 1 || sc[i].n_gen < 1 ||
            (sc[i].from < sc[i].n - 1 && !qc_server_prompt_logprobs(s))) {
            st = qc_errf(err, QC_ERR_ARG, "http: internal: bad scoring request");
            goto out;
        }
        rq[i].method = "POST";
        snprintf(rq[i].path, sizeof rq[i].path, "%s", qcs_path(s));
        if (!(rq[i].body = qcs_body(s, &sc[i]))) {
            st = qc_errf(err, QC_ERR_OOM, "http: out of memory");
            goto out;
        }
    }
    st = qc_http_perform(s->http, rq, n, err);
    for (int i = 0; !st && i < n; i++) read_answer(s, &rq[i], &sc[i]);
out:
    for (int i = 0; i < n; i++) {
        free(rq[i].body);
        qc_http_req_clear(&rq[i]);
    }
    free(rq);
    return st;
}
