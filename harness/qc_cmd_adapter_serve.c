/* qc_cmd_adapter_serve.c — `qwen-conform adapter-serve PLUGIN.so[,k=v...]`: the child side of
 * the adapter protocol v1 (docs/adapter-protocol.md), serving any runtime plugin (the ABI in
 * include/qc/qc_runtime_plugin.h) over stdin/stdout, so that a plugin that aborts or crashes
 * takes down this child and not the harness. The registry starts it for
 * `--backend isolate:plugin:PATH.so[,opts]` (and for `llamacpp` by default).
 *
 * Every request is forwarded to the loaded plugin, one frame answered per request:
 *   open        plugin open(model_dir, spec options + "," + request options); model_dir's
 *               config.json is also read here (qc_config_load) for the layer kinds and state
 *               dims that get_state needs (the ABI does not tell them)
 *   reset, fill_state, set_option   the plugin call
 *   forward     logits [n, V] ([1, V] when all_logits is false), + hidden [L+1, n, H] when
 *               "hidden" is true (get_hidden 0..L)
 *   get_state   every layer in order: layer_NN/k_cache, layer_NN/v_cache [n_kv, n_pos, hd]
 *               (full attention), layer_NN/conv_state [C, K], layer_NN/recurrent_state
 *               [nv, dk, dv] (Gated DeltaNet)
 *   close       answer ok, close the plugin, exit 0 (EOF on stdin: close the plugin, exit 0)
 * A plugin error becomes {"type":"error","message": last_error}, with "unsupported": true when
 * the plugin answered QC_PLUGIN_UNSUPPORTED (or lacks the entry). A malformed request (bad
 * JSON, unknown op, bad fields) gets an error frame and the child keeps serving; a broken
 * framing (bad magic, header_len out of range, truncated frame) cannot be resynchronised: an
 * error frame, then exit 1.
 *
 * Isolation: frames go to a private duplicate of fd 1 and requests come from a private
 * duplicate of fd 0; fd 1 itself then points at stderr (a plugin's printf cannot corrupt the
 * protocol) and fd 0 at /dev/null (a plugin cannot swallow requests).
 *
 * Exit codes: 0 after close or EOF, 1 protocol violation by the host / stdout gone, 2 the plugin
 * cannot be loaded (no hello is sent: the host reports that the adapter cannot start).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "qc_cli.h"
#include "qc/qc_config.h"
#include "qc/qc_runtime_plugin.h"
#include "qc/qc_status.h"
#include "qc_cli_common.h"
#include "qc_registry.h"

static const char *PROG = "qwen-conform adapter-serve";

#define AS_PROTOCOL "qwen-conform-adapter"
#define AS_VERSION 1
#define AS_MAX_HEADER ((uint32_t)1 << 20)
#define AS_MAX_TENSORS (2 * QC_MAX_LAYERS + 2)

static const char usage[] =
    "usage: qwen-conform adapter-serve PLUGIN.so[,k=v...]\n"
    "Serve a runtime plugin (the ABI in include/qc/qc_runtime_plugin.h) over the adapter\n"
    "protocol v1 (docs/adapter-protocol.md) on stdin/stdout: the child side of\n"
    "`--backend isolate:plugin:PLUGIN.so[,k=v...]`. The text after the first ',' is passed to\n"
    "the plugin's open (before any options of the open request). stdout carries only frames;\n"
    "whatever the plugin prints goes to stderr.\n"
    "Exit codes: 0 after close or EOF on stdin, 1 protocol violation by the host,\n"
    "            2 usage error or the plugin cannot be loaded (no hello is sent).\n";

/* ===================================================================================== */
/* server state                                                                          */
/* ===================================================================================== */

typedef struct {
    const qc_runtime_plugin *api;
    void *dl;
    void *h;                 /* the plugin handle (NULL until open) */
    int opened;              /* 1 after a successful open */
    qc_plugin_info info;     /* what open reported */
    unsigned caps;           /* announced caps, masked by the entries present */
    qc_config cfg;           /* model_dir/config.json, for get_state */
    int cfg_ok;
    char cfg_err[1024];
    const char *spec_opts;   /* options from the command line ("" = none) */
    int in_fd, out_fd;       /* private protocol descriptors */
} as_server;

/* A response tensor: name, shape, data (float32, host order; converted on the wire). */
typedef struct {
    char name[48];
    int rank;
    int64_t shape[3];
    float *data;
    size_t count;
} as_tensor;

/* A failed request: the message and whether it is an "unsupported" refusal. */
typedef struct {
    char msg[1200];
    int unsupported;
    int from_plugin; /* the plugin's own failure (its last_error): not echoed on stderr */
} as_fail;

static int failf(as_fail *f, int unsupported, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int failf(as_fail *f, int unsupported, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    f->unsupported = unsupported;
    return -1;
}

/* A plugin call returned rc != OK: the plugin's last_error (after "what: " when what is not
 * NULL: the sub-call of a request that makes several), flagged unsupported when it said so. */
static int plugin_fail(as_server *s, as_fail *f, int rc, const char *what) {
    const char *le = s->api->last_error(s->h);
    if (!le || !le[0]) le = "(the plugin gave no error text)";
    if (what) failf(f, rc == QC_PLUGIN_UNSUPPORTED, "%s: %s", what, le);
    else failf(f, rc == QC_PLUGIN_UNSUPPORTED, "%s", le);
    f->from_plugin = 1;
    return -1;
}

/* ===================================================================================== */
/* I/O                                                                                   */
/* ===================================================================================== */

/* Read exactly n bytes. 1 = done, 0 = EOF before the first byte, -1 = EOF mid-way / error. */
static int read_full(int fd, void *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return got == 0 && k == 0 ? 0 : -1;
        got += (size_t)k;
    }
    return 1;
}

/* Read and drop n bytes. 0 on success. */
static int skip_bytes(int fd, uint64_t n) {
    char buf[65536];
    while (n > 0) {
        size_t want = n < sizeof buf ? (size_t)n : sizeof buf;
        if (read_full(fd, buf, want) != 1) return -1;
        n -= want;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
    size_t done = 0;
    while (done < n) {
        ssize_t k = write(fd, (const char *)buf + done, n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        done += (size_t)k;
    }
    return 0;
}

static void put_u32le(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64le(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32le(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64le(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Write float32 data little-endian. */
static int write_f32le(int fd, const float *data, size_t count) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return write_full(fd, data, count * sizeof(float));
#else
    unsigned char buf[4096];
    size_t i = 0;
    while (i < count) {
        size_t m = 0;
        for (; i < count && m + 4 <= sizeof buf; i++, m += 4) {
            uint32_t u;
            memcpy(&u, &data[i], 4);
            put_u32le(buf + m, u);
        }
        if (write_full(fd, buf, m)) return -1;
    }
    return 0;
#endif
}

/* Replace bytes that are not valid UTF-8 with '?' (the header must be UTF-8 JSON; a plugin's
 * error text may be anything). In place. */
static void utf8_sanitize(char *s) {
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        int len = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3
                  : (*p & 0xF8) == 0xF0 ? 4 : 0;
        int ok = len > 0 && !(len == 2 && *p < 0xC2) && !(len == 4 && *p > 0xF4);
        for (int i = 1; ok && i < len; i++)
            if ((p[i] & 0xC0) != 0x80) ok = 0;
        if (!ok) {
            *p++ = '?';
            continue;
        }
        p += len;
    }
}

/* Send one frame: header (tensors listed in it when nt > 0), payload = the tensors. Consumes
 * hdr. 0 on success, -1 when stdout is gone. */
static int send_frame(as_server *s, cJSON *hdr, const as_tensor *t, int nt) {
    uint64_t payload = 0;
    if (nt > 0) {
        cJSON *arr = cJSON_AddArrayToObject(hdr, "tensors");
        for (int i = 0; arr && i < nt; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON *sh = cJSON_CreateArray();
            if (!e || !sh) {
                cJSON_Delete(e);
                cJSON_Delete(sh);
                arr = NULL;
                break;
            }
            cJSON_AddStringToObject(e, "name", t[i].name);
            for (int d = 0; d < t[i].rank; d++)
                cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
            cJSON_AddItemToObject(e, "shape", sh);
            cJSON_AddItemToArray(arr, e);
            payload += (uint64_t)t[i].count * 4u;
        }
        if (!arr) {
            cJSON_Delete(hdr);
            fprintf(stderr, "%s: out of memory building a response header\n", PROG);
            hdr = cJSON_CreateObject();
            cJSON_AddStringToObject(hdr, "type", "error");
            cJSON_AddStringToObject(hdr, "message", "adapter-serve: out of memory");
            nt = 0;
            payload = 0;
        }
    }
    char *text = hdr ? cJSON_PrintUnformatted(hdr) : NULL;
    cJSON_Delete(hdr);
    if (!text) {
        /* cJSON itself out of memory: a fixed error frame */
        static const char fixed[] = "{\"type\":\"error\",\"message\":\"adapter-serve: out of memory\"}";
        unsigned char pre[16];
        memcpy(pre, "QCAP", 4);
        put_u32le(pre + 4, (uint32_t)(sizeof fixed - 1));
        put_u64le(pre + 8, 0);
        return write_full(s->out_fd, pre, 16) || write_full(s->out_fd, fixed, sizeof fixed - 1)
                   ? -1 : 0;
    }
    size_t hlen = strlen(text);
    unsigned char pre[16];
    memcpy(pre, "QCAP", 4);
    put_u32le(pre + 4, (uint32_t)hlen);
    put_u64le(pre + 8, payload);
    int rc = write_full(s->out_fd, pre, 16) || write_full(s->out_fd, text, hlen) ? -1 : 0;
    free(text);
    for (int i = 0; !rc && i < nt; i++)
        if (t[i].count && write_f32le(s->out_fd, t[i].data, t[i].count)) rc = -1;
    return rc;
}

static int send_ok(as_server *s, cJSON *extra_info, const as_tensor *t, int nt) {
    cJSON *h = cJSON_CreateObject();
    if (h) {
        cJSON_AddStringToObject(h, "type", "ok");
        if (extra_info) cJSON_AddItemToObject(h, "info", extra_info);
    } else {
        cJSON_Delete(extra_info);
    }
    return send_frame(s, h, t, h ? nt : 0);
}

static int send_error(as_server *s, as_fail *f) {
    utf8_sanitize(f->msg);
    /* our own refusals are logged; a plugin's failure travels in the frame only, so that the
     * last stderr lines the host shows stay the plugin's own */
    if (!f->from_plugin)
        fprintf(stderr, "%s: refused: %s\n", PROG, f->msg);
    cJSON *h = cJSON_CreateObject();
    if (h) {
        cJSON_AddStringToObject(h, "type", "error");
        if (f->unsupported) cJSON_AddTrueToObject(h, "unsupported");
        cJSON_AddStringToObject(h, "message", f->msg);
    }
    return send_frame(s, h, NULL, 0);
}

/* ===================================================================================== */
/* request fields                                                                        */
/* ===================================================================================== */

/* A JSON number that is an integer in [lo, hi]. */
static int json_int(const cJSON *v, long long lo, long long hi, long long *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < (double)lo || d > (double)hi) return 0;
    *out = (long long)d;
    return 1;
}

/* An optional boolean field: absent -> dflt; present and not a boolean -> -1. */
static int json_bool(const cJSON *h, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h, key);
    if (!v || cJSON_IsNull(v)) return dflt;
    if (!cJSON_IsBool(v)) return -1;
    return cJSON_IsTrue(v) ? 1 : 0;
}

/* Element count of a product of dims, or 0 with *ovf = 1 on overflow. */
static size_t mul_count(size_t a, size_t b, int *ovf) {
    if (a && b > SIZE_MAX / 4 / a) {
        *ovf = 1;
        return 0;
    }
    return a * b;
}

static const char *file_name(const char *p) {
    const char *sl = strrchr(p, '/');
    return sl ? sl + 1 : p;
}

/* ===================================================================================== */
/* ops                                                                                   */
/* ===================================================================================== */

static const struct {
    unsigned bit;
    const char *name;
} cap_names[] = {
    {QC_CAP_HIDDEN, "hidden"},       {QC_CAP_STATE_READ, "state_read"},
    {QC_CAP_STATE_FILL, "state_fill"}, {QC_CAP_THREADS, "threads"},
    {QC_CAP_DN_KERNEL, "dn_kernel"}, {QC_CAP_CHUNK_SIZE, "chunk_size"},
};

static void close_plugin(as_server *s) {
    if (s->opened || s->h) s->api->close(s->h);
    s->h = NULL;
    s->opened = 0;
}

static int op_open(as_server *s, const cJSON *req, as_fail *f) {
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(req, "model_dir");
    if (!cJSON_IsString(md) || !md->valuestring[0])
        return failf(f, 0, "open: model_dir must be a non-empty string");
    const cJSON *ro = cJSON_GetObjectItemCaseSensitive(req, "options");
    const char *req_opts = "";
    if (ro && !cJSON_IsNull(ro)) {
        if (!cJSON_IsString(ro)) return failf(f, 0, "open: options must be a string");
        req_opts = ro->valuestring;
    }
    size_t n = strlen(s->spec_opts) + strlen(req_opts) + 2;
    char *opts = malloc(n);
    if (!opts) return failf(f, 0, "open: out of memory");
    snprintf(opts, n, "%s%s%s", s->spec_opts, s->spec_opts[0] && req_opts[0] ? "," : "",
             req_opts);

    close_plugin(s); /* a second open starts over */
    memset(&s->info, 0, sizeof s->info);
    void *h = NULL;
    int rc = s->api->open(md->valuestring, opts, &s->info, &h);
    free(opts);
    if (rc != QC_PLUGIN_OK) {
        s->h = h;
        plugin_fail(s, f, rc, NULL);
        if (h) s->api->close(h);
        s->h = NULL;
        return -1;
    }
    s->h = h;
    s->opened = 1;
    s->info.name[sizeof s->info.name - 1] = 0;

    /* the layer kinds and state dims get_state needs (the ABI does not carry them) */
    qc_err e;
    qc_err_clear(&e);
    s->cfg_ok = qc_config_load(md->valuestring, &s->cfg, &e) == QC_OK;
    if (!s->cfg_ok) {
        snprintf(s->cfg_err, sizeof s->cfg_err, "%s", e.msg);
        fprintf(stderr, "%s: open: cannot read the model's config.json (get_state will fail): "
                "%s\n", PROG, e.msg);
    }

    const qc_runtime_plugin *a = s->api;
    unsigned caps = s->info.caps;
    if (!a->get_hidden) caps &= ~QC_CAP_HIDDEN;
    if (!a->get_state) caps &= ~QC_CAP_STATE_READ;
    if (!a->fill_state) caps &= ~QC_CAP_STATE_FILL;
    if (!a->set_option) caps &= ~(QC_CAP_THREADS | QC_CAP_DN_KERNEL | QC_CAP_CHUNK_SIZE);
    s->caps = caps;

    cJSON *info = cJSON_CreateObject();
    cJSON *capl = cJSON_CreateArray();
    if (!info || !capl) {
        cJSON_Delete(info);
        cJSON_Delete(capl);
        return failf(f, 0, "open: out of memory");
    }
    cJSON_AddNumberToObject(info, "vocab_size", s->info.vocab_size);
    cJSON_AddNumberToObject(info, "hidden_size", s->info.hidden_size);
    cJSON_AddNumberToObject(info, "n_layers", s->info.n_layers);
    cJSON_AddNumberToObject(info, "max_tokens_per_call", s->info.max_tokens_per_call);
    cJSON_AddNumberToObject(info, "max_context_len", s->info.max_context_len);
    for (size_t i = 0; i < sizeof cap_names / sizeof cap_names[0]; i++)
        if (caps & cap_names[i].bit)
            cJSON_AddItemToArray(capl, cJSON_CreateString(cap_names[i].name));
    cJSON_AddItemToObject(info, "capabilities", capl);
    char name[sizeof s->info.name];
    snprintf(name, sizeof name, "%s", s->info.name);
    utf8_sanitize(name);
    cJSON_AddStringToObject(info, "name", name);
    return send_ok(s, info, NULL, 0);
}

static int op_reset(as_server *s, const cJSON *req, as_fail *f) {
    (void)req;
    int rc = s->api->reset(s->h);
    if (rc != QC_PLUGIN_OK) return plugin_fail(s, f, rc, NULL);
    return send_ok(s, NULL, NULL, 0);
}

static int op_forward(as_server *s, const cJSON *req, as_fail *f) {
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(req, "tokens");
    if (!cJSON_IsArray(toks)) return failf(f, 0, "forward: tokens must be an array of integers");
    int n = cJSON_GetArraySize(toks);
    if (n < 1) return failf(f, 0, "forward: tokens is empty (at least one token per call)");
    long long sp;
    if (!json_int(cJSON_GetObjectItemCaseSensitive(req, "start_pos"), 0, INT32_MAX, &sp))
        return failf(f, 0, "forward: start_pos must be an integer in [0, %d]", INT32_MAX);
    if (sp > (long long)INT32_MAX - n)
        return failf(f, 0, "forward: start_pos %lld + %d tokens overflows int32", sp, n);
    int all_logits = json_bool(req, "all_logits", 1);
    int want_hidden = json_bool(req, "hidden", 0);
    if (all_logits < 0) return failf(f, 0, "forward: all_logits must be true or false");
    if (want_hidden < 0) return failf(f, 0, "forward: hidden must be true or false");
    if (want_hidden && !(s->caps & QC_CAP_HIDDEN))
        return failf(f, 1, "forward: hidden states asked for, but the plugin has no hidden "
                     "capability");
    const int V = s->info.vocab_size, H = s->info.hidden_size, L = s->info.n_layers;
    if (V <= 0) return failf(f, 0, "forward: the plugin reported vocab_size %d", V);
    if (want_hidden && (H <= 0 || L < 0))
        return failf(f, 0, "forward: the plugin reported hidden_size %d, n_layers %d", H, L);

    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return failf(f, 0, "forward: out of memory for %d tokens", n);
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, toks) {
        long long v;
        if (!json_int(t, INT32_MIN, INT32_MAX, &v)) {
            free(ids);
            return failf(f, 0, "forward: tokens[%d] is not an integer that fits int32", i);
        }
        ids[i++] = (int32_t)v;
    }

    int ovf = 0;
    size_t rows = all_logits ? (size_t)n : 1;
    size_t nlog = mul_count(rows, (size_t)V, &ovf);
    size_t nhid = want_hidden ? mul_count(mul_count((size_t)L + 1, (size_t)n, &ovf), (size_t)H,
                                          &ovf) : 0;
    if (ovf) {
        free(ids);
        return failf(f, 0, "forward: %d tokens: the output does not fit in memory", n);
    }
    float *logits = malloc(nlog * sizeof(float));
    float *hidden = want_hidden ? malloc(nhid * sizeof(float) + 4) : NULL;
    if (!logits || (want_hidden && !hidden)) {
        free(ids), free(logits), free(hidden);
        return failf(f, 0, "forward: out of memory for the outputs of %d tokens", n);
    }
    int rc = s->api->forward(s->h, ids, (int32_t)n, (int32_t)sp, all_logits, logits);
    free(ids);
    if (rc != QC_PLUGIN_OK) {
        free(logits), free(hidden);
        return plugin_fail(s, f, rc, NULL);
    }
    for (int l = 0; want_hidden && l <= L; l++) {
        rc = s->api->get_hidden(s->h, l, hidden + (size_t)l * n * H);
        if (rc != QC_PLUGIN_OK) {
            free(logits), free(hidden);
            char what[48];
            snprintf(what, sizeof what, "get_hidden(%d)", l);
            return plugin_fail(s, f, rc, what);
        }
    }
    as_tensor out[2];
    memset(out, 0, sizeof out);
    snprintf(out[0].name, sizeof out[0].name, "logits");
    out[0].rank = 2;
    out[0].shape[0] = (int64_t)rows;
    out[0].shape[1] = V;
    out[0].data = logits;
    out[0].count = nlog;
    if (want_hidden) {
        snprintf(out[1].name, sizeof out[1].name, "hidden");
        out[1].rank = 3;
        out[1].shape[0] = L + 1;
        out[1].shape[1] = n;
        out[1].shape[2] = H;
        out[1].data = hidden;
        out[1].count = nhid;
    }
    int w = send_ok(s, NULL, out, want_hidden ? 2 : 1);
    free(logits);
    free(hidden);
    return w;
}

static int op_get_state(as_server *s, const cJSON *req, as_fail *f) {
    if (!(s->caps & QC_CAP_STATE_READ))
        return failf(f, 1, "get_state: the plugin has no state_read capability");
    long long np;
    if (!json_int(cJSON_GetObjectItemCaseSensitive(req, "n_pos"), 0, INT32_MAX, &np))
        return failf(f, 0, "get_state: n_pos must be an integer in [0, %d]", INT32_MAX);
    if (!s->cfg_ok)
        return failf(f, 0, "get_state: the model's config.json could not be read at open, so the "
                     "state dims are unknown: %s", s->cfg_err);
    const qc_config *c = &s->cfg;
    int ovf = 0;
    const size_t kv = mul_count(mul_count((size_t)c->n_kv_heads, (size_t)np, &ovf),
                                (size_t)c->head_dim, &ovf);
    const size_t conv = mul_count((size_t)qc_cfg_conv_dim(c), (size_t)c->conv_kernel, &ovf);
    const size_t rec = mul_count(mul_count((size_t)c->lin_n_v_heads, (size_t)c->lin_k_dim, &ovf),
                                 (size_t)c->lin_v_dim, &ovf);
    static as_tensor out[AS_MAX_TENSORS];
    int nt = 0;
    size_t total = 0;
    for (int l = 0; l < c->n_layers && !ovf; l++) {
        int full = c->layer_types[l] == QC_LAYER_FULL;
        for (int j = 0; j < 2; j++) {
            as_tensor *t = &out[nt++];
            memset(t, 0, sizeof *t);
            if (full) {
                snprintf(t->name, sizeof t->name, "layer_%02d/%s", l, j ? "v_cache" : "k_cache");
                t->rank = 3;
                t->shape[0] = c->n_kv_heads;
                t->shape[1] = np;
                t->shape[2] = c->head_dim;
                t->count = kv;
            } else if (j == 0) {
                snprintf(t->name, sizeof t->name, "layer_%02d/conv_state", l);
                t->rank = 2;
                t->shape[0] = qc_cfg_conv_dim(c);
                t->shape[1] = c->conv_kernel;
                t->count = conv;
            } else {
                snprintf(t->name, sizeof t->name, "layer_%02d/recurrent_state", l);
                t->rank = 3;
                t->shape[0] = c->lin_n_v_heads;
                t->shape[1] = c->lin_k_dim;
                t->shape[2] = c->lin_v_dim;
                t->count = rec;
            }
            if (t->count > SIZE_MAX / 4 - total) ovf = 1;
            total += t->count;
        }
    }
    if (ovf) return failf(f, 0, "get_state: n_pos %lld: the state does not fit in memory", np);
    float *buf = malloc(total * sizeof(float) + 4);
    if (!buf)
        return failf(f, 0, "get_state: out of memory for %zu state elements (n_pos %lld)", total,
                     np);
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        out[i].data = buf + off;
        off += out[i].count;
        int l = i / 2, full = c->layer_types[l] == QC_LAYER_FULL;
        int kind = full ? (i % 2 ? QC_STATE_V_CACHE : QC_STATE_K_CACHE)
                        : (i % 2 ? QC_STATE_RECURRENT : QC_STATE_CONV);
        int rc = s->api->get_state(s->h, l, kind, (int32_t)np, out[i].data);
        if (rc != QC_PLUGIN_OK) {
            free(buf);
            char what[96];
            snprintf(what, sizeof what, "get_state(layer %d, %s, n_pos %lld)", l,
                     strchr(out[i].name, '/') + 1, np);
            return plugin_fail(s, f, rc, what);
        }
    }
    int w = send_ok(s, NULL, out, nt);
    free(buf);
    return w;
}

static int op_fill_state(as_server *s, const cJSON *req, as_fail *f) {
    if (!(s->caps & QC_CAP_STATE_FILL))
        return failf(f, 1, "fill_state: the plugin has no state_fill capability");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, "value");
    double x;
    if (cJSON_IsNumber(v)) {
        x = v->valuedouble;
    } else if (cJSON_IsString(v)) {
        const char *t = v->valuestring;
        if (!strcasecmp(t, "nan")) x = NAN;
        else if (!strcasecmp(t, "inf") || !strcasecmp(t, "+inf") || !strcasecmp(t, "infinity"))
            x = INFINITY;
        else if (!strcasecmp(t, "-inf") || !strcasecmp(t, "-infinity")) x = -INFINITY;
        else return failf(f, 0, "fill_state: value must be a number or \"nan\", \"inf\", \"-inf\"");
    } else {
        return failf(f, 0, "fill_state: value must be a number or \"nan\", \"inf\", \"-inf\"");
    }
    int rc = s->api->fill_state(s->h, (float)x);
    if (rc != QC_PLUGIN_OK) return plugin_fail(s, f, rc, NULL);
    return send_ok(s, NULL, NULL, 0);
}

static int op_set_option(as_server *s, const cJSON *req, as_fail *f) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(req, "key");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, "value");
    if (!cJSON_IsString(k) || !k->valuestring[0])
        return failf(f, 0, "set_option: key must be a non-empty string");
    char num[64];
    const char *val;
    long long iv;
    if (cJSON_IsString(v)) {
        val = v->valuestring;
    } else if (json_int(v, LLONG_MIN / 2, LLONG_MAX / 2, &iv)) {
        snprintf(num, sizeof num, "%lld", iv);
        val = num;
    } else if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
        snprintf(num, sizeof num, "%.17g", v->valuedouble);
        val = num;
    } else {
        return failf(f, 0, "set_option: value must be a string");
    }
    if (!s->api->set_option)
        return failf(f, 1, "set_option(%s): the plugin has no set_option entry", k->valuestring);
    int rc = s->api->set_option(s->h, k->valuestring, val);
    if (rc != QC_PLUGIN_OK) return plugin_fail(s, f, rc, NULL);
    return send_ok(s, NULL, NULL, 0);
}

/* ===================================================================================== */
/* the loop                                                                              */
/* ===================================================================================== */

/* Set up the private protocol descriptors; fd 1 -> stderr, fd 0 -> /dev/null. */
static int isolate_fds(as_server *s) {
    fflush(stdout);
    s->out_fd = fcntl(1, F_DUPFD_CLOEXEC, 3);
    s->in_fd = fcntl(0, F_DUPFD_CLOEXEC, 3);
    if (s->out_fd < 0 || s->in_fd < 0) {
        fprintf(stderr, "%s: cannot duplicate stdin/stdout: %s\n", PROG, strerror(errno));
        return -1;
    }
    if (dup2(2, 1) < 0) {
        fprintf(stderr, "%s: cannot point stdout at stderr: %s\n", PROG, strerror(errno));
        return -1;
    }
    int dn = open("/dev/null", O_RDONLY);
    if (dn >= 0) {
        if (dn != 0) {
            dup2(dn, 0);
            close(dn);
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    return 0;
}

static int send_hello(as_server *s, const char *path) {
    cJSON *h = cJSON_CreateObject();
    if (!h) return -1;
    char name[600];
    snprintf(name, sizeof name, "adapter-serve %s", file_name(path));
    utf8_sanitize(name);
    cJSON_AddStringToObject(h, "type", "hello");
    cJSON_AddStringToObject(h, "protocol", AS_PROTOCOL);
    cJSON_AddNumberToObject(h, "version", AS_VERSION);
    cJSON_AddStringToObject(h, "name", name);
    return send_frame(s, h, NULL, 0);
}

/* Serve until close / EOF. Returns the exit code. */
static int serve(as_server *s) {
    for (;;) {
        unsigned char pre[16];
        int r = read_full(s->in_fd, pre, sizeof pre);
        if (r == 0) { /* EOF: the host is done */
            close_plugin(s);
            return QC_EXIT_PASS;
        }
        as_fail f;
        memset(&f, 0, sizeof f);
        if (r < 0) {
            fprintf(stderr, "%s: protocol violation from the host: truncated frame prefix\n",
                    PROG);
            close_plugin(s);
            return 1;
        }
        uint32_t hlen = get_u32le(pre + 4);
        uint64_t plen = get_u64le(pre + 8);
        if (memcmp(pre, "QCAP", 4) != 0 || hlen < 1 || hlen > AS_MAX_HEADER) {
            if (memcmp(pre, "QCAP", 4) != 0)
                failf(&f, 0, "protocol violation: bad magic 0x%02x%02x%02x%02x (expected QCAP)",
                      pre[0], pre[1], pre[2], pre[3]);
            else
                failf(&f, 0, "protocol violation: header_len %u outside 1 .. %u", hlen,
                      AS_MAX_HEADER);
            send_error(s, &f); /* the framing is lost: cannot resynchronise */
            close_plugin(s);
            return 1;
        }
        char *text = malloc(hlen);
        if (!text || read_full(s->in_fd, text, hlen) != 1 ||
            (plen && skip_bytes(s->in_fd, plen))) {
            free(text);
            if (!text) failf(&f, 0, "out of memory for a %u-byte header", hlen);
            else failf(&f, 0, "protocol violation: truncated frame");
            send_error(s, &f);
            close_plugin(s);
            return 1;
        }
        cJSON *req = cJSON_ParseWithLength(text, hlen);
        free(text);
        const cJSON *opj = cJSON_IsObject(req) ? cJSON_GetObjectItemCaseSensitive(req, "op")
                                               : NULL;
        const char *op = cJSON_IsString(opj) ? opj->valuestring : NULL;
        int rc;
        if (!cJSON_IsObject(req)) {
            rc = failf(&f, 0, "malformed request: the header is not a JSON object");
        } else if (!op) {
            rc = failf(&f, 0, "malformed request: no \"op\" string");
        } else if (!strcmp(op, "close")) {
            int w = send_ok(s, NULL, NULL, 0);
            cJSON_Delete(req);
            close_plugin(s);
            return w ? 1 : QC_EXIT_PASS;
        } else if (!strcmp(op, "open")) {
            rc = op_open(s, req, &f);
        } else if (strcmp(op, "reset") && strcmp(op, "forward") && strcmp(op, "get_state") &&
                   strcmp(op, "fill_state") && strcmp(op, "set_option")) {
            rc = failf(&f, 0, "unknown op '%.100s'", op);
        } else if (!s->opened) {
            rc = failf(&f, 0, "%s before open", op);
        } else if (!strcmp(op, "reset")) {
            rc = op_reset(s, req, &f);
        } else if (!strcmp(op, "forward")) {
            rc = op_forward(s, req, &f);
        } else if (!strcmp(op, "get_state")) {
            rc = op_get_state(s, req, &f);
        } else if (!strcmp(op, "fill_state")) {
            rc = op_fill_state(s, req, &f);
        } else {
            rc = op_set_option(s, req, &f);
        }
        /* rc: 0 answered ok; -1 from a handler: f says why (unless the write itself failed) */
        int w = rc;
        if (rc < 0 && f.msg[0]) w = send_error(s, &f);
        cJSON_Delete(req);
        if (w < 0) {
            fprintf(stderr, "%s: cannot write to stdout (the host is gone): %s\n", PROG,
                    strerror(errno));
            close_plugin(s);
            return 1;
        }
    }
}

int qc_cmd_adapter_serve(int argc, char **argv) {
    const char *spec = NULL;
    qc_err err;
    qc_err_clear(&err);
    qc_argp a;
    qc_argp_init(&a, PROG, argc, argv);
    while (qc_argp_next(&a)) {
        qc_status st = QC_OK;
        if (a.positional) {
            if (spec) st = qc_errf(&err, QC_ERR_ARG, "one plugin spec only ('%s' and '%s')",
                                   spec, a.arg);
            else spec = a.arg;
        } else if (qc_argp_is(&a, "--help") || qc_argp_is(&a, "-h")) {
            fputs(usage, stdout);
            return QC_EXIT_PASS;
        } else {
            st = qc_argp_unknown(&a, &err);
        }
        if (st) {
            fprintf(stderr, "%s: %s\n%s", PROG, err.msg, usage);
            return QC_EXIT_ERROR;
        }
    }
    if (!spec || !spec[0]) {
        fprintf(stderr, "%s: needs a plugin spec PLUGIN.so[,k=v...]\n%s", PROG, usage);
        return QC_EXIT_ERROR;
    }

    /* PATH[,options] */
    const char *comma = strchr(spec, ',');
    size_t plen = comma ? (size_t)(comma - spec) : strlen(spec);
    char *path = malloc(plen + 1);
    if (!path) return QC_EXIT_ERROR;
    memcpy(path, spec, plen);
    path[plen] = 0;

    as_server s;
    memset(&s, 0, sizeof s);
    s.spec_opts = comma ? comma + 1 : "";
    s.in_fd = s.out_fd = -1;
    /* isolate first: a plugin's constructors (run by dlopen) may print too */
    if (isolate_fds(&s)) {
        free(path);
        return QC_EXIT_ERROR;
    }
    if (!path[0]) {
        fprintf(stderr, "%s: the plugin spec '%s' has no path\n", PROG, spec);
        free(path);
        return QC_EXIT_ERROR;
    }
    if (qc_plugin_load(path, &s.api, &s.dl, &err) != QC_OK) {
        fprintf(stderr, "%s: %s\n", PROG, err.msg);
        free(path);
        return QC_EXIT_ERROR; /* no hello: the host reports that the adapter cannot start */
    }
    /* the host gone mid-write is an EPIPE, not a signal death */
    signal(SIGPIPE, SIG_IGN);
    if (send_hello(&s, path)) {
        fprintf(stderr, "%s: cannot write the hello frame: %s\n", PROG, strerror(errno));
        free(path);
        return 1;
    }
    free(path);
    int rc = serve(&s);
    close(s.out_fd);
    close(s.in_fd);
    /* the library stays loaded (as in-process: handles' threads may outlive close) */
    return rc;
}
