/* qc_exec_start.c — the exec adapter's startup: spawn the child, read its hello (protocol
 * name and version, optional name and capabilities), send open(model_dir, options) and
 * check the info it answers; and the restart of a dead handle (the same open, then the
 * set_option values accepted so far). See qc_exec_internal.h.
 */
#define _GNU_SOURCE

#include "qc_exec_internal.h"
#include "qc_remote.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================================== */
/* startup: spawn, hello, open                                                           */
/* ===================================================================================== */


/* obj[key] as an int32 in [lo, INT32_MAX]; absent -> def (or an error when def < lo). */
static int get_int(const cJSON *obj, const char *key, int32_t lo, int32_t def, int32_t *out,
                   char *why, size_t cap) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) {
        if (def < lo) { snprintf(why, cap, "info.%s is missing", key); return -1; }
        *out = def;
        return 0;
    }
    double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!isfinite(v) || v != floor(v) || v < lo || v > INT32_MAX) {
        snprintf(why, cap, "info.%s must be an integer >= %d", key, (int)lo);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

/* Capability strings -> bits (unknown ones warned about once, ignored). */
static int parse_caps(qc_exec *x, const cJSON *arr, uint32_t *caps, char *why, size_t cap) {
    *caps = 0;
    if (!cJSON_IsArray(arr)) { snprintf(why, cap, "capabilities must be a list of strings"); return -1; }
    const cJSON *c;
    cJSON_ArrayForEach(c, arr) {
        if (!cJSON_IsString(c)) { snprintf(why, cap, "capabilities must be a list of strings"); return -1; }
        unsigned bit = qc_cap_bit(c->valuestring); /* qc_remote.c's table */
        if (bit) *caps |= bit;
        else if (!x->warned_caps)
            fprintf(stderr, "qwen-conform: warning: exec adapter '%s': unknown capability '%s' "
                    "ignored\n", x->cmdq, c->valuestring);
    }
    return 0;
}

/* What a hello may announce: a name and capabilities (the defaults of open's info). */
typedef struct {
    char name[128];     /* "" when none */
    uint32_t caps;
    int has_caps;       /* the hello listed capabilities */
} hello_info;

/* Read the child's hello (the first frame) into *hi. OK, or the failure (child killed). */
static int read_hello(qc_exec *x, const char *op_hello, hello_info *hi) {
    char why[200];
    cJSON *h;
    uint64_t pl;
    int rc = ex_recv_header(x, op_hello, ex_now_s() + x->timeout_s, &h, &pl);
    if (rc) return rc;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(h, "type");
    const cJSON *proto = cJSON_GetObjectItemCaseSensitive(h, "protocol");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(h, "version");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "hello")) {
        cJSON_Delete(h);
        return ex_fail(x, op_hello, "protocol violation: the first frame is not a hello (\"type\": "
                       "\"hello\")");
    }
    if (!cJSON_IsString(proto) || strcmp(proto->valuestring, PROTO_NAME) ||
        !cJSON_IsNumber(ver) || ver->valuedouble != PROTO_VERSION) {
        char pv[160];
        snprintf(pv, sizeof pv, "'%.60s' version %.6g",
                 cJSON_IsString(proto) ? proto->valuestring : "(none)",
                 cJSON_IsNumber(ver) ? ver->valuedouble : -1.0);
        cJSON_Delete(h);
        return ex_fail(x, op_hello, "protocol mismatch: the adapter speaks %s, qwen-conform "
                       "speaks '" PROTO_NAME "' version %d", pv, PROTO_VERSION);
    }
    if (pl) {
        cJSON_Delete(h);
        return ex_fail(x, op_hello, "protocol violation: a hello with a payload of %llu bytes",
                       (unsigned long long)pl);
    }
    const cJSON *hn = cJSON_GetObjectItemCaseSensitive(h, "name");
    if (cJSON_IsString(hn)) snprintf(hi->name, sizeof hi->name, "%s", hn->valuestring);
    const cJSON *hc = cJSON_GetObjectItemCaseSensitive(h, "capabilities");
    if (hc) {
        if (parse_caps(x, hc, &hi->caps, why, sizeof why)) {
            cJSON_Delete(h);
            return ex_fail(x, op_hello, "malformed hello: %s", why);
        }
        hi->has_caps = 1;
    }
    cJSON_Delete(h);
    return QC_PLUGIN_OK;
}

/* Send open(model_dir, options). OK: the "ok" answer in *root (caller frees), *pl its
 * payload_len; an error answer fails as "open failed: ..." (x->open_refused); else the
 * failure. The child is gone on every failure. */
static int send_open(qc_exec *x, const char *op_open, cJSON **root, uint64_t *pl) {
    cJSON *req = ex_op_object("open");
    if (req && (!cJSON_AddStringToObject(req, "model_dir", x->model_dir) ||
                !cJSON_AddStringToObject(req, "options", x->options))) {
        cJSON_Delete(req);
        req = NULL;
    }
    char *s = req ? cJSON_PrintUnformatted(req) : NULL;
    cJSON_Delete(req);
    if (!s) return ex_fail(x, op_open, "out of memory building the open request");
    int rc = ex_transact(x, op_open, s, strlen(s), ex_now_s() + x->timeout_s, root, pl);
    free(s);
    if (rc) {
        if (x->pid > 0) { /* an error answer: the runtime cannot open this model */
            x->open_refused = 1;
            char what[sizeof x->what];
            snprintf(what, sizeof what, "open failed: %s", x->what);
            return ex_fail(x, op_open, "%s", what);
        }
        return rc;
    }
    return QC_PLUGIN_OK;
}

/* The open answer's "info" into *info (the hello's name and capabilities as defaults).
 * 0, or -1 with why. */
static int parse_info(qc_exec *x, const cJSON *root, const hello_info *hi, qc_plugin_info *info,
                      char *why, size_t cap) {
    const cJSON *inf = cJSON_GetObjectItemCaseSensitive(root, "info");
    int bad = 0;
    if (!cJSON_IsObject(inf)) { snprintf(why, cap, "no \"info\" object"); bad = 1; }
    if (!bad) bad = get_int(inf, "vocab_size", 1, 0, &info->vocab_size, why, cap) ||
                    get_int(inf, "hidden_size", 1, 0, &info->hidden_size, why, cap) ||
                    get_int(inf, "n_layers", 1, 0, &info->n_layers, why, cap) ||
                    get_int(inf, "max_tokens_per_call", 0, 0, &info->max_tokens_per_call, why,
                            cap) ||
                    get_int(inf, "max_context_len", 0, 0, &info->max_context_len, why, cap);
    if (!bad) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(inf, "capabilities");
        if (c) bad = parse_caps(x, c, &info->caps, why, cap);
        else info->caps = hi->has_caps ? hi->caps : 0;
    }
    if (!bad) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(inf, "name");
        if (nm && !cJSON_IsString(nm)) { snprintf(why, cap, "info.name must be a string"); bad = 1; }
        else if (nm && nm->valuestring[0])
            snprintf(info->name, sizeof info->name, "%s", nm->valuestring);
        else if (hi->name[0]) snprintf(info->name, sizeof info->name, "%s", hi->name);
        else snprintf(info->name, sizeof info->name, "exec:%s", x->cmdq);
    }
    return bad ? -1 : 0;
}

/* Start the child, read its hello, send open, parse the info into *info. On failure the child
 * is gone and x->err says why (QC_PLUGIN_ERROR). tag: "" or " (restart)" for messages. */
int ex_start_child(qc_exec *x, qc_plugin_info *info, const char *tag) {
    char op_hello[48], op_open[48], why[200];
    snprintf(op_hello, sizeof op_hello, "hello%s", tag);
    snprintf(op_open, sizeof op_open, "open%s", tag);
    memset(info, 0, sizeof *info);
    int e = ex_spawn_child(x);
    if (e) {
        x->dead = 1;
        snprintf(x->dead_why, sizeof x->dead_why, "cannot start /bin/sh: %s", strerror(e));
        return ex_local_err(x, QC_PLUGIN_ERROR, op_hello, "cannot start /bin/sh -c: %s",
                            strerror(e));
    }
    hello_info hi;
    memset(&hi, 0, sizeof hi);
    int rc = read_hello(x, op_hello, &hi);
    if (rc) return rc;
    cJSON *root;
    uint64_t pl;
    rc = send_open(x, op_open, &root, &pl);
    if (rc) return rc;
    if (parse_info(x, root, &hi, info, why, sizeof why)) {
        cJSON_Delete(root);
        return ex_fail(x, op_open, "malformed open answer: %s", why);
    }
    x->warned_caps = 1;
    rc = ex_expect_empty(x, op_open, root, pl);
    if (rc) return rc;
    x->dead = 0;
    return QC_PLUGIN_OK;
}

/* A dead handle's restart: a fresh child with the same open and options. */
int ex_respawn(qc_exec *x) {
    qc_plugin_info inf;
    int rc = ex_start_child(x, &inf, " (restart)");
    if (rc) return rc;
    if (inf.vocab_size != x->info.vocab_size || inf.hidden_size != x->info.hidden_size ||
        inf.n_layers != x->info.n_layers || inf.caps != x->info.caps ||
        inf.max_tokens_per_call != x->info.max_tokens_per_call ||
        inf.max_context_len != x->info.max_context_len)
        return ex_fail(x, "open (restart)", "the restarted adapter reports different info (vocab "
                       "%d, hidden %d, layers %d, caps 0x%x; first: %d, %d, %d, 0x%x)",
                       inf.vocab_size, inf.hidden_size, inf.n_layers, inf.caps, x->info.vocab_size,
                       x->info.hidden_size, x->info.n_layers, x->info.caps);
    for (int i = 0; i < x->n_opts; i++) {
        cJSON *req = ex_op_object("set_option");
        if (req && (!cJSON_AddStringToObject(req, "key", x->opts[i].key) ||
                    !cJSON_AddStringToObject(req, "value", x->opts[i].value))) {
            cJSON_Delete(req);
            req = NULL;
        }
        rc = ex_simple_request(x, "set_option (restart)", req);
        if (rc) {
            if (x->pid > 0) {
                char what[sizeof x->what];
                snprintf(what, sizeof what, "the restarted adapter refused %s=%s: %s",
                         x->opts[i].key, x->opts[i].value, x->what);
                return ex_fail(x, "set_option (restart)", "%s", what);
            }
            return QC_PLUGIN_ERROR;
        }
    }
    return QC_PLUGIN_OK;
}
