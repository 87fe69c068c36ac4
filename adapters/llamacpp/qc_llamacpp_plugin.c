/* qc_llamacpp_plugin.c — llama.cpp (v0.5.0, the npm node-llama-cpp@3.22.1 build) as a
 * qwen-conform runtime plugin, ABI v1 (include/qc/qc_runtime_plugin.h).
 *
 * Built by ci/llamacpp against the bundle's include/llama.h + ggml/include and linked with the
 * npm package's prebuilt libllama / libggml (rpath to their directory). Compile-time paths
 * (-D, all strings): QC_LLAMACPP_BINS (the npm bins dir, for ggml_backend_load_all_from_path),
 * QC_LLAMACPP_SRC (llama.cpp source: the converter), QC_LLAMACPP_CONVERT (qc_convert.py),
 * QC_LLAMACPP_CACHE (default cache dir), QC_LLAMACPP_PYTHON (/usr/bin/python3).
 *
 * open(model_dir, options): options (comma-separated k=v)
 *   gguf=PATH         use an existing GGUF instead of converting model_dir
 *   outtype=f32|bf16|f16   conversion output type (default f32)
 *   mtp=auto|keep|drop     MTP tensors in the conversion (default auto: drop when absent)
 *   kv=f32|f16        KV cache type (default f32)
 *   flash_attn=0|1    (default 0)
 *   threads=N         (default 1)
 *   n_ctx=N           (default 4096)
 *   hidden=0|1        capture hidden states through cb_eval (default 1)
 *   guard=0|1         refuse models that v0.5.0 is known to abort on in-process (default 1;
 *                     guard=0 lets the abort happen, to observe it)
 *   reconvert=1       ignore a cached conversion (success or failure) and convert again
 *   fix_mrope=1       convert with qc_convert.py --mrope-section auto (a workaround, off by
 *                     default: rope sections summing to rotary_dim/2 when config.json has none)
 * Conversion: QC_LLAMACPP_PYTHON qc_convert.py into <cache>/gguf/<key>/ where key hashes the
 * model files, qc_convert.py, the llama.cpp tag, outtype and mtp; later opens reuse it (a
 * failed conversion is cached too, with its log, so a battery does not re-run it per case).
 *
 * Everything llama.cpp logs goes to a ring buffer (llama_log_set), never to stdout; its last
 * lines are appended to error messages. See adapters/llamacpp/README.md for the state layouts.
 */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wformat-truncation" /* paths are bounded by PATH_MAX_ */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include "ggml.h"
#include "ggml-backend.h"
#include "gguf.h"
#include "llama.h"

#include "qc/qc_runtime_plugin.h"

#ifndef QC_LLAMACPP_BINS
#error "QC_LLAMACPP_BINS (the npm package's bins/linux-x64 directory) must be defined"
#endif
#ifndef QC_LLAMACPP_SRC
#error "QC_LLAMACPP_SRC (the llama.cpp source tree) must be defined"
#endif
#ifndef QC_LLAMACPP_CONVERT
#error "QC_LLAMACPP_CONVERT (adapters/llamacpp/qc_convert.py) must be defined"
#endif
#ifndef QC_LLAMACPP_CACHE
#define QC_LLAMACPP_CACHE ""
#endif
#ifndef QC_LLAMACPP_PYTHON
#define QC_LLAMACPP_PYTHON "/usr/bin/python3"
#endif
#define QC_LLAMACPP_TAG "v0.5.0"

#define ERR_MAX 4096
#define PATH_MAX_ 4096
#define MAX_LAYERS 1024

/* ===================================================================================== */
/* log ring (llama.cpp's and ggml's log, process-wide)                                   */
/* ===================================================================================== */

#define RING_SIZE 32768
static char g_ring[RING_SIZE];
static size_t g_ring_pos;   /* next write position */
static int g_ring_full;
static pthread_mutex_t g_ring_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_debug;         /* QC_LLAMACPP_DEBUG=1: also copy the log to stderr */

static void ring_put(const char *s) {
    pthread_mutex_lock(&g_ring_mu);
    for (; *s; s++) {
        g_ring[g_ring_pos++] = *s;
        if (g_ring_pos == RING_SIZE) {
            g_ring_pos = 0;
            g_ring_full = 1;
        }
    }
    pthread_mutex_unlock(&g_ring_mu);
}

static void log_cb(enum ggml_log_level level, const char *text, void *ud) {
    (void)level;
    (void)ud;
    if (!text) return;
    ring_put(text);
    if (g_debug) fputs(text, stderr);
}

/* The last `nlines` non-empty lines of the ring, joined with " | ", into out. */
static void ring_tail(char *out, size_t n, int nlines) {
    static char lin[RING_SIZE + 1];
    pthread_mutex_lock(&g_ring_mu);
    size_t len = g_ring_full ? RING_SIZE : g_ring_pos;
    size_t start = g_ring_full ? g_ring_pos : 0;
    for (size_t i = 0; i < len; i++) lin[i] = g_ring[(start + i) % RING_SIZE];
    lin[len] = 0;
    pthread_mutex_unlock(&g_ring_mu);
    /* walk back nlines lines */
    out[0] = 0;
    size_t end = len;
    while (end > 0 && (lin[end - 1] == '\n' || lin[end - 1] == ' ')) end--;
    size_t b = end;
    int got = 0;
    while (b > 0 && got < nlines) {
        size_t e = b;
        while (b > 0 && lin[b - 1] != '\n') b--;
        if (e > b) got++;
        if (b > 0 && got < nlines) b--;
    }
    size_t o = 0;
    for (size_t i = b; i < end && o + 4 < n; i++) {
        if (lin[i] == '\n') {
            if (o > 0 && out[o - 1] != ' ') {
                out[o++] = ' ';
                out[o++] = '|';
                out[o++] = ' ';
            }
        } else {
            out[o++] = lin[i];
        }
    }
    out[o] = 0;
}

/* The last line of the ring containing `pat`, from just after `pat` (skip_pat) or whole. */
static int ring_find(const char *pat, int skip_pat, char *out, size_t n) {
    static char lin[RING_SIZE + 1];
    pthread_mutex_lock(&g_ring_mu);
    size_t len = g_ring_full ? RING_SIZE : g_ring_pos;
    size_t start = g_ring_full ? g_ring_pos : 0;
    for (size_t i = 0; i < len; i++) lin[i] = g_ring[(start + i) % RING_SIZE];
    lin[len] = 0;
    pthread_mutex_unlock(&g_ring_mu);
    const char *hit = NULL;
    for (const char *p = strstr(lin, pat); p; p = strstr(p + 1, pat)) hit = p;
    if (!hit) return 0;
    const char *b = hit;
    if (skip_pat) b = hit + strlen(pat);
    else
        while (b > lin && b[-1] != '\n') b--;
    while (*b == ' ') b++;
    size_t k = strcspn(b, "\n");
    if (k >= n) k = n - 1;
    memcpy(out, b, k);
    out[k] = 0;
    return 1;
}

/* ggml_abort's default handler forks gdb to print a backtrace, and gdb writes to the
 * process's stdout -- the protocol channel when the plugin is served out of process. This
 * handler writes the assertion message to stderr instead (one line, with a prefix the host's
 * stderr tail shows) and returns; ggml_abort then calls abort() as before. */
static void abort_cb(const char *msg) {
    char line[2300];
    int n = snprintf(line, sizeof line, "qc_llamacpp: llama.cpp aborted: %s\n", msg ? msg : "");
    if (n > 0) {
        ssize_t w = write(2, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1));
        (void)w;
    }
}

static void ring_clear(void) {
    pthread_mutex_lock(&g_ring_mu);
    g_ring_pos = 0;
    g_ring_full = 0;
    pthread_mutex_unlock(&g_ring_mu);
}

/* ===================================================================================== */
/* the handle                                                                            */
/* ===================================================================================== */

typedef struct {
    /* options */
    char gguf[PATH_MAX_];
    char outtype[8];
    char mtp[8];
    int kv_f16;
    int flash;
    int threads;
    int n_ctx;
    int want_hidden;
    int guard;
    int reconvert;
    int fix_mrope;
    int raw_layout;               /* QC_LLAMACPP_LAYOUT=raw: no head reorder / transpose */

    /* llama.cpp */
    struct llama_model *model;
    struct llama_context *ctx;
    ggml_threadpool_t tp;         /* persistent CPU threadpool when threads > 1 */

    /* dims as the runtime sees them (from the GGUF) */
    int V, H, L;
    int n_head_kv, head_dim;      /* full-attention layers */
    int is_recr[MAX_LAYERS];
    int n_recr, n_full;
    int n_nextn;                  /* MTP (NextN) blocks after the main layers (kept in the GGUF) */
    int K, C;                     /* conv taps, conv channels */
    int nk, nv, dk, dv;           /* linear-attention heads and head dims */
    int file_type;                /* general.file_type */

    /* sequence */
    int32_t pos;                  /* positions consumed */

    /* hidden capture of the last forward: hidden[i] = [n_out, H], i = 0..L */
    float *hidden;                /* [(L+1) * cap_tokens * H] */
    int cap_tokens;               /* tokens of the last forward */
    int hid_rows[MAX_LAYERS + 1]; /* rows captured per index in the last forward */
    int hid_ok;                   /* the last forward captured every index fully */
    int capturing;

    /* conv window capture: per layer, the last K columns of the graph's conv_input [C][K]
     * (llama.cpp channel order); valid when conv_win_ok[il] */
    float *conv_win;              /* [L * C * K] */
    int conv_win_ok[MAX_LAYERS];
    float *conv_scratch;          /* one conv_input tensor */
    size_t conv_scratch_n;

    /* parsed state blob, memoised until the next forward / reset */
    uint8_t *blob;
    size_t blob_n;
    int blob_valid;
    /* attention part */
    int kv_cells;
    int32_t *kv_pos;              /* [kv_cells] */
    int kv_vtrans;
    int kv_n_layer;
    const uint8_t *kv_k[MAX_LAYERS]; int32_t kv_ktype[MAX_LAYERS]; uint64_t kv_krow[MAX_LAYERS];
    const uint8_t *kv_v[MAX_LAYERS]; int32_t kv_vtype[MAX_LAYERS]; uint64_t kv_vrow[MAX_LAYERS];
    uint32_t kv_vel[MAX_LAYERS]; uint32_t kv_vgqa[MAX_LAYERS];
    /* recurrent part */
    int rs_cells;
    int rs_n_layer;
    const uint8_t *rs_r[MAX_LAYERS]; int32_t rs_rtype[MAX_LAYERS]; uint64_t rs_rrow[MAX_LAYERS];
    const uint8_t *rs_s[MAX_LAYERS]; int32_t rs_stype[MAX_LAYERS]; uint64_t rs_srow[MAX_LAYERS];

    char name[128];
    char err[ERR_MAX];
} qc_llama;

static char g_open_err[ERR_MAX];
static int g_backend_ready;

static int set_err(qc_llama *h, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_err(qc_llama *h, int code, const char *fmt, ...) {
    char *dst = h ? h->err : g_open_err;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, ERR_MAX, fmt, ap);
    va_end(ap);
    /* one line, runs of blanks squeezed (llama.cpp pads its shapes; reports cut long text) */
    char *o = dst;
    for (const char *i = dst; *i; i++) {
        char c = (*i == '\n' || *i == '\t' || *i == '\r') ? ' ' : *i;
        if (c == ' ' && o > dst && o[-1] == ' ') continue;
        *o++ = c;
    }
    *o = 0;
    return code;
}

/* message + " (llama.cpp: <last log lines>)" */
static int set_err_log(qc_llama *h, int code, const char *what) {
    char tail[2048];
    ring_tail(tail, sizeof tail, 6);
    if (tail[0])
        return set_err(h, code, "%s (llama.cpp log: %s)", what, tail);
    return set_err(h, code, "%s", what);
}

/* ===================================================================================== */
/* options                                                                               */
/* ===================================================================================== */

static int parse_int(const char *v, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return -1;
    *out = (int)x;
    return 0;
}

static int parse_options(qc_llama *h, const char *options) {
    snprintf(h->outtype, sizeof h->outtype, "f32");
    snprintf(h->mtp, sizeof h->mtp, "auto");
    h->kv_f16 = 0;
    h->flash = 0;
    /* 1 thread by default: ggml's CPU threads spin-wait at every graph barrier, and on a
     * loaded 2-vCPU machine 2 threads ran a tiny model ~300x slower than 1 (measured) */
    h->threads = 1;
    h->n_ctx = 4096;
    h->want_hidden = 1;
    h->guard = 1;
    h->reconvert = 0;
    if (!options || !options[0]) return QC_PLUGIN_OK;
    char buf[8192];
    if (strlen(options) >= sizeof buf) return set_err(NULL, QC_PLUGIN_ERROR, "options too long");
    snprintf(buf, sizeof buf, "%s", options);
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) return set_err(NULL, QC_PLUGIN_UNSUPPORTED, "option '%s': expected key=value", kv);
        *eq = 0;
        const char *k = kv, *v = eq + 1;
        int bad = 0;
        if (!strcmp(k, "gguf")) {
            if (!v[0] || strlen(v) >= sizeof h->gguf) bad = 1;
            else snprintf(h->gguf, sizeof h->gguf, "%s", v);
        } else if (!strcmp(k, "outtype")) {
            if (strcmp(v, "f32") && strcmp(v, "bf16") && strcmp(v, "f16")) bad = 1;
            else snprintf(h->outtype, sizeof h->outtype, "%s", v);
        } else if (!strcmp(k, "mtp")) {
            if (strcmp(v, "auto") && strcmp(v, "keep") && strcmp(v, "drop")) bad = 1;
            else snprintf(h->mtp, sizeof h->mtp, "%s", v);
        } else if (!strcmp(k, "kv")) {
            if (!strcmp(v, "f32")) h->kv_f16 = 0;
            else if (!strcmp(v, "f16")) h->kv_f16 = 1;
            else bad = 1;
        } else if (!strcmp(k, "flash_attn")) {
            bad = parse_int(v, 0, 1, &h->flash);
        } else if (!strcmp(k, "threads")) {
            bad = parse_int(v, 1, 512, &h->threads);
        } else if (!strcmp(k, "n_ctx")) {
            bad = parse_int(v, 16, 1 << 20, &h->n_ctx);
        } else if (!strcmp(k, "hidden")) {
            bad = parse_int(v, 0, 1, &h->want_hidden);
        } else if (!strcmp(k, "guard")) {
            bad = parse_int(v, 0, 1, &h->guard);
        } else if (!strcmp(k, "reconvert")) {
            bad = parse_int(v, 0, 1, &h->reconvert);
        } else if (!strcmp(k, "fix_mrope")) {
            bad = parse_int(v, 0, 1, &h->fix_mrope);
        } else {
            return set_err(NULL, QC_PLUGIN_UNSUPPORTED,
                           "unknown option '%s' (gguf, outtype, mtp, kv, flash_attn, threads, "
                           "n_ctx, hidden, guard, reconvert, fix_mrope)", k);
        }
        if (bad) return set_err(NULL, QC_PLUGIN_UNSUPPORTED, "option %s=%s: invalid value", k, v);
    }
    return QC_PLUGIN_OK;
}

/* ===================================================================================== */
/* conversion cache                                                                      */
/* ===================================================================================== */

typedef struct { uint64_t h; } fnv;
static void fnv_init(fnv *f) { f->h = 1469598103934665603ULL; }
static void fnv_add(fnv *f, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        f->h ^= b[i];
        f->h *= 1099511628211ULL;
    }
}
static void fnv_str(fnv *f, const char *s) { fnv_add(f, s, strlen(s) + 1); }

/* Hash a file's bytes (and its length); -1 when it cannot be read. */
static int fnv_file(fnv *f, const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    static uint8_t buf[1 << 16];
    size_t k;
    uint64_t total = 0;
    while ((k = fread(buf, 1, sizeof buf, fp)) > 0) {
        fnv_add(f, buf, k);
        total += k;
    }
    int e = ferror(fp);
    fclose(fp);
    fnv_add(f, &total, sizeof total);
    return e ? -1 : 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* key = hash(model files: config.json, *.safetensors, *.index.json, sorted; qc_convert.py;
 * tag; outtype; mtp) */
static int model_key(qc_llama *h, const char *model_dir, char *key, size_t n) {
    DIR *d = opendir(model_dir);
    if (!d) return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: %s: %s", model_dir, strerror(errno));
    char *names[4096];
    int nn = 0;
    struct dirent *e;
    while ((e = readdir(d)) && nn < 4096) {
        if (!strcmp(e->d_name, "config.json") || ends_with(e->d_name, ".safetensors") ||
            ends_with(e->d_name, ".index.json"))
            names[nn++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)nn, sizeof names[0], cmp_str);
    fnv f;
    fnv_init(&f);
    int rc = QC_PLUGIN_OK;
    char path[PATH_MAX_];
    for (int i = 0; i < nn; i++) {
        fnv_str(&f, names[i]);
        snprintf(path, sizeof path, "%s/%s", model_dir, names[i]);
        if (fnv_file(&f, path) != 0 && rc == QC_PLUGIN_OK)
            rc = set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: cannot read %s", path);
    }
    for (int i = 0; i < nn; i++) free(names[i]);
    if (rc) return rc;
    if (nn == 0) return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: %s has no config.json / *.safetensors", model_dir);
    const char *conv = getenv("QC_LLAMACPP_CONVERT");
    if (!conv || !conv[0]) conv = QC_LLAMACPP_CONVERT;
    if (fnv_file(&f, conv) != 0)
        return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: cannot read the converter wrapper %s", conv);
    fnv_str(&f, QC_LLAMACPP_TAG);
    fnv_str(&f, h->outtype);
    fnv_str(&f, h->mtp);
    fnv_str(&f, h->fix_mrope ? "mrope=auto" : "mrope=stock");
    snprintf(key, n, "%016llx-%s%s", (unsigned long long)f.h, h->outtype, h->fix_mrope ? "-mrope" : "");
    return QC_PLUGIN_OK;
}

static void cache_dir(char *out, size_t n) {
    const char *c = getenv("QC_CACHE");
    const char *x = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (c && c[0]) snprintf(out, n, "%s/llamacpp", c);
    else if (x && x[0]) snprintf(out, n, "%s/qwen-conform/llamacpp", x);
    else if (QC_LLAMACPP_CACHE[0]) snprintf(out, n, "%s", QC_LLAMACPP_CACHE);
    else snprintf(out, n, "%s/.cache/qwen-conform/llamacpp", home ? home : "/tmp");
}

static int mkdir_p(const char *path) {
    char tmp[PATH_MAX_];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* The last `nlines` non-empty lines of a text file, joined with " | ". */
static void file_tail(const char *path, char *out, size_t n, int nlines) {
    out[0] = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return;
    static char buf[1 << 16];
    if (fseek(fp, 0, SEEK_END) == 0) {
        long sz = ftell(fp);
        long off = sz > (long)sizeof buf - 1 ? sz - (long)sizeof buf + 1 : 0;
        fseek(fp, off, SEEK_SET);
    }
    size_t k = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[k] = 0;
    /* the converter's progress bars use \r: treat as newlines */
    for (size_t i = 0; i < k; i++)
        if (buf[i] == '\r') buf[i] = '\n';
    size_t end = k;
    while (end > 0 && (buf[end - 1] == '\n' || buf[end - 1] == ' ')) end--;
    size_t b = end;
    int got = 0;
    while (b > 0 && got < nlines) {
        size_t e = b;
        while (b > 0 && buf[b - 1] != '\n') b--;
        if (e > b) got++;
        if (b > 0 && got < nlines) b--;
    }
    size_t o = 0;
    for (size_t i = b; i < end && o + 4 < n; i++) {
        if (buf[i] == '\n') {
            if (o > 0 && out[o - 1] != ' ') {
                out[o++] = ' ';
                out[o++] = '|';
                out[o++] = ' ';
            }
        } else {
            out[o++] = buf[i];
        }
    }
    out[o] = 0;
}

/* The converter's reason: the last Python exception line ("ValueError: ...") or logged
 * error ("ERROR:hf-to-gguf:..."), else the last line. */
static void file_reason(const char *path, char *out, size_t n) {
    out[0] = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return;
    char line[4096];
    char last[4096] = "";
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\r\n")] = 0;
        const char *c = strstr(line, ": ");
        int exc = 0;
        if (c && c > line && line[0] != ' ') {
            /* a dotted identifier ending in Error / Exception / Interrupt before ": " */
            size_t k = (size_t)(c - line);
            int ident = 1;
            for (size_t i = 0; i < k; i++)
                if (!(line[i] == '.' || line[i] == '_' || (line[i] >= 'a' && line[i] <= 'z') ||
                      (line[i] >= 'A' && line[i] <= 'Z') || (line[i] >= '0' && line[i] <= '9'))) ident = 0;
            if (ident && ((k >= 5 && !strncmp(c - 5, "Error", 5)) || (k >= 9 && !strncmp(c - 9, "Exception", 9))))
                exc = 1;
        }
        if (exc || !strncmp(line, "ERROR:", 6)) snprintf(out, n, "%s", line);
        if (line[0]) snprintf(last, sizeof last, "%s", line);
    }
    fclose(fp);
    if (!out[0]) snprintf(out, n, "%s", last);
}

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Convert model_dir (or reuse the cache) -> gguf path in out. */
static int convert_model(qc_llama *h, const char *model_dir, char *out, size_t n) {
    char key[64], dir[PATH_MAX_], cdir[PATH_MAX_];
    int rc = model_key(h, model_dir, key, sizeof key);
    if (rc) return rc;
    cache_dir(cdir, sizeof cdir);
    snprintf(dir, sizeof dir, "%s/gguf/%s", cdir, key);
    char gguf[PATH_MAX_], failed[PATH_MAX_], logp[PATH_MAX_];
    snprintf(gguf, sizeof gguf, "%s/model.gguf", dir);
    snprintf(failed, sizeof failed, "%s/convert.failed", dir);
    snprintf(logp, sizeof logp, "%s/convert.log", dir);
    if (!h->reconvert && file_exists(gguf)) {
        snprintf(out, n, "%s", gguf);
        return QC_PLUGIN_OK;
    }
    if (!h->reconvert && file_exists(failed)) {
        char why[2048] = "";
        FILE *fp = fopen(failed, "r");
        if (fp) {
            if (!fgets(why, sizeof why, fp)) why[0] = 0;
            fclose(fp);
        }
        why[strcspn(why, "\n")] = 0;
        return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: %s (cached failure %s, converter log "
                       "%s; reconvert=1 to retry)", why, failed, logp);
    }
    if (mkdir_p(dir) != 0)
        return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: cannot create %s: %s", dir, strerror(errno));
    char tmp[PATH_MAX_], tmplog[PATH_MAX_];
    snprintf(tmp, sizeof tmp, "%s/model.gguf.tmp.%ld", dir, (long)getpid());
    snprintf(tmplog, sizeof tmplog, "%s/convert.log.tmp.%ld", dir, (long)getpid());
    const char *conv = getenv("QC_LLAMACPP_CONVERT");
    if (!conv || !conv[0]) conv = QC_LLAMACPP_CONVERT;
    const char *src = getenv("QC_LLAMACPP_SRC");
    if (!src || !src[0]) src = QC_LLAMACPP_SRC;
    const char *py = QC_LLAMACPP_PYTHON;

    pid_t pid = fork();
    if (pid < 0) return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: fork: %s", strerror(errno));
    if (pid == 0) {
        /* child: stdin </dev/null, stdout and stderr > the log (never the host's stdout: in
         * exec mode that is the protocol channel) */
        int fd = open(tmplog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int nul = open("/dev/null", O_RDONLY);
        if (fd < 0 || nul < 0) _exit(127);
        dup2(nul, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        if (fd > 2) close(fd);
        if (nul > 2) close(nul);
        execl(py, py, conv, "--llama-src", src, "--outtype", h->outtype, "--mtp", h->mtp,
              "--mrope-section", h->fix_mrope ? "auto" : "stock", model_dir, tmp, (char *)NULL);
        dprintf(2, "qc_llamacpp: cannot run %s: %s\n", py, strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            status = -1;
            break;
        }
    }
    rename(tmplog, logp);
    int ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0 && file_exists(tmp);
    if (!ok) {
        unlink(tmp);
        char tail[2048], why[2048];
        file_tail(logp, tail, sizeof tail, 4);
        file_reason(logp, why, sizeof why);
        /* cache the failure (only a real converter failure, not "cannot run python"):
         * line 1 the reason, then the exit status and the log's last lines */
        if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) != 127) {
            char ftmp[PATH_MAX_];
            snprintf(ftmp, sizeof ftmp, "%s.tmp.%ld", failed, (long)getpid());
            FILE *fp = fopen(ftmp, "w");
            if (fp) {
                fprintf(fp, "%s\nexit status %d\n%s\n", why, WEXITSTATUS(status), tail);
                fclose(fp);
                rename(ftmp, failed);
            }
        }
        if (status != -1 && WIFSIGNALED(status))
            return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: the converter died (signal %d): %s (log: %s)",
                           WTERMSIG(status), why, logp);
        return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: %s (converter exit status %d, log: %s)", why,
                       status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1, logp);
    }
    if (rename(tmp, gguf) != 0) {
        unlink(tmp);
        return set_err(NULL, QC_PLUGIN_ERROR, "cannot convert: rename to %s: %s", gguf, strerror(errno));
    }
    unlink(failed);
    snprintf(out, n, "%s", gguf);
    return QC_PLUGIN_OK;
}

/* ===================================================================================== */
/* GGUF metadata: the dims as llama.cpp will see them, and the known-abort guard           */
/* ===================================================================================== */

static int gguf_u32(struct gguf_context *g, const char *key, uint32_t *out) {
    int64_t id = gguf_find_key(g, key);
    if (id < 0) return -1;
    enum gguf_type t = gguf_get_kv_type(g, id);
    if (t == GGUF_TYPE_UINT32) *out = gguf_get_val_u32(g, id);
    else if (t == GGUF_TYPE_INT32) *out = (uint32_t)gguf_get_val_i32(g, id);
    else return -1;
    return 0;
}

static int read_meta(qc_llama *h, const char *path) {
    struct gguf_init_params gp = {.no_alloc = true, .ctx = NULL};
    struct gguf_context *g = gguf_init_from_file(path, gp);
    if (!g) return set_err_log(NULL, QC_PLUGIN_ERROR, "cannot load: not a readable GGUF file");
    char arch[64] = "";
    int64_t id = gguf_find_key(g, "general.architecture");
    if (id >= 0 && gguf_get_kv_type(g, id) == GGUF_TYPE_STRING)
        snprintf(arch, sizeof arch, "%s", gguf_get_val_str(g, id));
    if (strcmp(arch, "qwen35")) {
        gguf_free(g);
        return set_err(NULL, QC_PLUGIN_ERROR, "cannot load: %s: architecture '%s', not qwen35", path, arch);
    }
    uint32_t nl = 0, kvh = 0, kl = 0, vl = 0, ck = 0, ss = 0, gc = 0, tsr = 0, inner = 0, fai = 4, ft = 0;
    int miss = gguf_u32(g, "qwen35.block_count", &nl) | gguf_u32(g, "qwen35.attention.head_count_kv", &kvh) |
               gguf_u32(g, "qwen35.attention.key_length", &kl) | gguf_u32(g, "qwen35.attention.value_length", &vl) |
               gguf_u32(g, "qwen35.ssm.conv_kernel", &ck) | gguf_u32(g, "qwen35.ssm.state_size", &ss) |
               gguf_u32(g, "qwen35.ssm.group_count", &gc) | gguf_u32(g, "qwen35.ssm.time_step_rank", &tsr) |
               gguf_u32(g, "qwen35.ssm.inner_size", &inner);
    gguf_u32(g, "qwen35.full_attention_interval", &fai);
    gguf_u32(g, "general.file_type", &ft);
    uint32_t nextn = 0;
    gguf_u32(g, "qwen35.nextn_predict_layers", &nextn);
    if (miss || nl == 0 || nl > MAX_LAYERS || gc == 0 || tsr == 0 || ck < 2 || fai == 0) {
        gguf_free(g);
        return set_err(NULL, QC_PLUGIN_ERROR, "cannot load: %s: missing or invalid qwen35 hyperparameters", path);
    }
    int n_main = (int)nl - (int)nextn;
    if (n_main <= 0) n_main = (int)nl;
    h->L = n_main;
    h->n_nextn = (int)nl - n_main;
    h->n_head_kv = (int)kvh;
    h->head_dim = (int)kl;
    h->K = (int)ck;
    h->nk = (int)gc;
    h->nv = (int)tsr;
    h->dk = (int)ss;
    h->dv = (int)(inner / tsr);
    h->C = 2 * h->nk * h->dk + h->nv * h->dv;
    h->file_type = (int)ft;
    id = gguf_find_key(g, "qwen35.attention.recurrent_layers");
    if (id >= 0 && gguf_get_kv_type(g, id) == GGUF_TYPE_ARRAY && gguf_get_arr_type(g, id) == GGUF_TYPE_BOOL &&
        gguf_get_arr_n(g, id) >= (size_t)n_main) {
        const int8_t *b = gguf_get_arr_data(g, id);
        for (int i = 0; i < n_main; i++) h->is_recr[i] = b[i] != 0;
    } else {
        for (int i = 0; i < n_main; i++) h->is_recr[i] = ((i + 1) % (int)fai) != 0;
    }
    h->n_recr = h->n_full = 0;
    for (int i = 0; i < n_main; i++) {
        if (h->is_recr[i]) h->n_recr++;
        else h->n_full++;
    }

    /* The known abort (v0.5.0): ggml's CPU rope_multi asserts sum(sections) <= head dim
     * (GGML_ASSERT(sect_dims <= ne0), ops.cpp); the converter writes [11,11,10,0] when the
     * config has no mrope_section, so every model with a head dim < 32 aborts at its first
     * llama_decode. */
    int rc = QC_PLUGIN_OK;
    id = gguf_find_key(g, "qwen35.rope.dimension_sections");
    if (h->guard && h->n_full > 0 && id >= 0 && gguf_get_kv_type(g, id) == GGUF_TYPE_ARRAY &&
        gguf_get_arr_type(g, id) == GGUF_TYPE_INT32 && gguf_get_arr_n(g, id) >= 4) {
        const int32_t *s = gguf_get_arr_data(g, id);
        long sum = (long)s[0] + s[1] + s[2] + s[3];
        if (sum > (long)kl) {
            uint32_t nrot = 0;
            gguf_u32(g, "qwen35.rope.dimension_count", &nrot);
            rc = set_err(NULL, QC_PLUGIN_ERROR,
                         "cannot load: refused: llama.cpp " QC_LLAMACPP_TAG " would abort (SIGABRT) at the "
                         "first llama_decode: GGML_ASSERT(sect_dims <= ne0) in ggml_rope_multi; "
                         "qwen35.rope.dimension_sections = [%d,%d,%d,%d] (sum %ld) > head dim %u "
                         "(rotary dim %u; the converter writes [11,11,10,0] when config.json has no "
                         "mrope_section). guard=0 runs it anyway",
                         s[0], s[1], s[2], s[3], sum, kl, nrot);
        }
    }
    gguf_free(g);
    (void)vl;
    return rc;
}

/* ===================================================================================== */
/* cb_eval: hidden states and conv windows                                               */
/* ===================================================================================== */

/* Copy a 2-D (ne0 x ne1, ne2 = ne3 = 1) F32 tensor into dst (row-major [ne1][ne0]). */
static int tensor_rows(const struct ggml_tensor *t, float *dst) {
    if (t->type != GGML_TYPE_F32 || t->ne[2] != 1 || t->ne[3] != 1) return -1;
    const int64_t ne0 = t->ne[0], ne1 = t->ne[1];
    if (ggml_is_contiguous(t)) {
        ggml_backend_tensor_get((struct ggml_tensor *)t, dst, 0, (size_t)(ne0 * ne1) * sizeof(float));
        return 0;
    }
    if (!t->buffer || !ggml_backend_buffer_is_host(t->buffer) || !t->data) return -1;
    for (int64_t i1 = 0; i1 < ne1; i1++)
        for (int64_t i0 = 0; i0 < ne0; i0++)
            dst[i1 * ne0 + i0] = *(const float *)((const char *)t->data + i1 * t->nb[1] + i0 * t->nb[0]);
    return 0;
}

/* hidden index of a tensor name, or -1; *conv_layer the layer of a conv_input-N tensor */
static int classify(const qc_llama *h, const char *name, int *conv_layer) {
    *conv_layer = -1;
    if (!strcmp(name, "model.input_embed")) return 0;
    if (!strcmp(name, "result_norm")) return h->L;
    int il;
    char tail;
    if (sscanf(name, "l_out-%d%c", &il, &tail) == 1 && il >= 0 && il < h->L - 1) return il + 1;
    if (sscanf(name, "conv_input-%d%c", &il, &tail) == 1 && il >= 0 && il < h->L) *conv_layer = il;
    return -1;
}

static bool eval_cb(struct ggml_tensor *t, bool ask, void *ud) {
    qc_llama *h = ud;
    if (!h->capturing) return ask ? false : true;
    int cl;
    int idx = classify(h, t->name, &cl);
    if (ask) return idx >= 0 || cl >= 0;
    if (idx >= 0 && h->hidden) {
        if (t->ne[0] != h->H || t->ne[2] != 1 || t->ne[3] != 1) return true;
        int rows = (int)t->ne[1];
        if (h->hid_rows[idx] + rows > h->cap_tokens) return true; /* more than expected: ignore */
        float *dst = h->hidden + ((size_t)idx * h->cap_tokens + h->hid_rows[idx]) * h->H;
        if (tensor_rows(t, dst) == 0) h->hid_rows[idx] += rows;
    } else if (cl >= 0 && h->is_recr[cl]) {
        /* conv_input: [K-1+n, C, 1]: keep the last K columns */
        if (t->ne[1] != h->C || t->ne[0] < h->K || t->ne[2] != 1) return true;
        size_t need = (size_t)t->ne[0] * t->ne[1];
        if (need > h->conv_scratch_n) {
            float *p = realloc(h->conv_scratch, need * sizeof(float));
            if (!p) return true;
            h->conv_scratch = p;
            h->conv_scratch_n = need;
        }
        if (tensor_rows(t, h->conv_scratch) != 0) return true;
        int T = (int)t->ne[0];
        float *w = h->conv_win + (size_t)cl * h->C * h->K;
        for (int c = 0; c < h->C; c++)
            for (int k = 0; k < h->K; k++) w[c * h->K + k] = h->conv_scratch[(size_t)c * T + (T - h->K + k)];
        h->conv_win_ok[cl] = 1;
    }
    return true;
}

/* ===================================================================================== */
/* plugin entries                                                                        */
/* ===================================================================================== */

static void invalidate_state(qc_llama *h) { h->blob_valid = 0; }

static const char *ftype_name(int ft) {
    switch (ft) {
    case 0: return "F32";
    case 1: return "F16";
    case 32: return "BF16";
    case 7: return "Q8_0";
    default: return "quantized";
    }
}

/* Threads: with more than one, attach a persistent ggml threadpool with polling off. Without
 * one, ggml's CPU backend makes a fresh pool for every graph compute -- and the cb_eval
 * captures split each llama_decode into ~2L+3 computes -- whose threads spin-wait at the
 * barriers: on a loaded 2-vCPU machine that ran a tiny model hundreds of times slower than
 * one thread (measured: 31-60 s vs 0.14 s for 128 tokens). */
typedef ggml_threadpool_t (*tp_new_fn)(struct ggml_threadpool_params *);
typedef void (*tp_free_fn)(ggml_threadpool_t);

static int apply_threads(qc_llama *h, int n) {
    ggml_backend_reg_t reg = ggml_backend_reg_by_name("CPU");
    tp_new_fn tp_new = reg ? (tp_new_fn)ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new") : NULL;
    tp_free_fn tp_free = reg ? (tp_free_fn)ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free") : NULL;
    ggml_threadpool_t tp = NULL;
    if (n > 1 && tp_new && tp_free) {
        struct ggml_threadpool_params tpp = ggml_threadpool_params_default(n);
        tpp.poll = 0;
        tp = tp_new(&tpp);
    }
    llama_detach_threadpool(h->ctx);
    if (h->tp && tp_free) tp_free(h->tp);
    h->tp = tp;
    if (tp) llama_attach_threadpool(h->ctx, tp, tp);
    llama_set_n_threads(h->ctx, n, n);
    h->threads = n;
    return QC_PLUGIN_OK;
}

static void p_close(void *handle) {
    qc_llama *h = handle;
    if (!h) return;
    if (h->ctx) llama_detach_threadpool(h->ctx);
    if (h->tp) {
        ggml_backend_reg_t reg = ggml_backend_reg_by_name("CPU");
        tp_free_fn tp_free = reg ? (tp_free_fn)ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free") : NULL;
        if (tp_free) tp_free(h->tp);
        h->tp = NULL;
    }
    if (h->ctx) llama_free(h->ctx);
    if (h->model) llama_model_free(h->model);
    free(h->hidden);
    free(h->conv_win);
    free(h->conv_scratch);
    free(h->blob);
    free(h->kv_pos);
    free(h);
}

static int p_open(const char *model_dir, const char *options, qc_plugin_info *info, void **handle) {
    *handle = NULL;
    g_open_err[0] = 0;
    const char *dbg = getenv("QC_LLAMACPP_DEBUG");
    g_debug = dbg && !strcmp(dbg, "1");
    qc_llama *h = calloc(1, sizeof *h);
    if (!h) return set_err(NULL, QC_PLUGIN_ERROR, "out of memory");
    int rc = parse_options(h, options);
    if (rc) {
        free(h);
        return rc;
    }
    /* negative control for the layout mapping (README): llama.cpp's own head order and S^T */
    const char *lay = getenv("QC_LLAMACPP_LAYOUT");
    h->raw_layout = lay && !strcmp(lay, "raw");
    char gguf[PATH_MAX_];
    if (h->gguf[0]) {
        snprintf(gguf, sizeof gguf, "%s", h->gguf);
    } else {
        rc = convert_model(h, model_dir, gguf, sizeof gguf);
        if (rc) {
            free(h);
            return rc;
        }
    }
    if (!g_backend_ready) {
        llama_log_set(log_cb, NULL);
        ggml_set_abort_callback(abort_cb);
        const char *bins = getenv("QC_LLAMACPP_BINS");
        ggml_backend_load_all_from_path(bins && bins[0] ? bins : QC_LLAMACPP_BINS);
        llama_backend_init();
        g_backend_ready = 1;
    }
    ring_clear();
    rc = read_meta(h, gguf);
    if (rc) {
        free(h);
        return rc;
    }

    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    h->model = llama_model_load_from_file(gguf, mp);
    if (!h->model) {
        /* the loader's own reason first (reports cut long messages) */
        char key[1024] = "";
        if (ring_find("error loading model:", 1, key, sizeof key)) {
            set_err(NULL, QC_PLUGIN_ERROR, "cannot load: %s [llama.cpp " QC_LLAMACPP_TAG ", %s]", key, gguf);
        } else {
            char what[PATH_MAX_ + 200];
            snprintf(what, sizeof what, "cannot load: llama_model_load_from_file failed [llama.cpp "
                     QC_LLAMACPP_TAG ", %s]", gguf);
            set_err_log(NULL, QC_PLUGIN_ERROR, what);
        }
        free(h);
        return QC_PLUGIN_ERROR;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(h->model);
    h->V = llama_vocab_n_tokens(vocab);
    h->H = llama_model_n_embd(h->model);
    int L = llama_model_n_layer(h->model);
    if (L != h->L) {
        set_err(NULL, QC_PLUGIN_ERROR, "cannot load: llama.cpp reports %d layers, the GGUF metadata %d", L, h->L);
        p_close(h);
        return QC_PLUGIN_ERROR;
    }

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)h->n_ctx;
    cp.n_batch = (uint32_t)h->n_ctx;
    cp.n_ubatch = 512;
    cp.n_seq_max = 1;
    cp.n_threads = h->threads;
    cp.n_threads_batch = h->threads;
    cp.flash_attn_type = h->flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = h->kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.type_v = h->kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.embeddings = false;
    cp.no_perf = true;
    cp.cb_eval = eval_cb;
    cp.cb_eval_user_data = h;
    h->ctx = llama_init_from_model(h->model, cp);
    if (!h->ctx) {
        set_err_log(NULL, QC_PLUGIN_ERROR, "cannot load: llama_init_from_model failed");
        p_close(h);
        return QC_PLUGIN_ERROR;
    }
    apply_threads(h, h->threads);
    h->conv_win = calloc((size_t)h->L * h->C * h->K, sizeof(float));
    if (!h->conv_win) {
        set_err(NULL, QC_PLUGIN_ERROR, "out of memory");
        p_close(h);
        return QC_PLUGIN_ERROR;
    }
    snprintf(h->name, sizeof h->name, "llama.cpp " QC_LLAMACPP_TAG " (%s GGUF, %s KV, flash attn %s)",
             ftype_name(h->file_type), h->kv_f16 ? "F16" : "F32", h->flash ? "on" : "off");
    memset(info, 0, sizeof *info);
    info->vocab_size = h->V;
    info->hidden_size = h->H;
    info->n_layers = h->L;
    info->max_tokens_per_call = 0;
    info->max_context_len = (int32_t)llama_n_ctx(h->ctx);
    info->caps = QC_CAP_STATE_READ | QC_CAP_THREADS | (h->want_hidden ? QC_CAP_HIDDEN : 0);
    snprintf(info->name, sizeof info->name, "%s", h->name);
    *handle = h;
    return QC_PLUGIN_OK;
}

static int p_reset(void *handle) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    llama_memory_clear(llama_get_memory(h->ctx), true);
    h->pos = 0;
    h->cap_tokens = 0;
    h->hid_ok = 0;
    memset(h->hid_rows, 0, sizeof h->hid_rows);
    memset(h->conv_win_ok, 0, sizeof h->conv_win_ok);
    memset(h->conv_win, 0, (size_t)h->L * h->C * h->K * sizeof(float));
    invalidate_state(h);
    return QC_PLUGIN_OK;
}

static int p_forward(void *handle, const int32_t *tokens, int32_t n, int32_t start_pos,
                     int32_t all_logits, float *logits) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    h->err[0] = 0;
    if (n <= 0) return set_err(h, QC_PLUGIN_ERROR, "forward: n = %d", n);
    if (start_pos == 0 && h->pos != 0) p_reset(h); /* a new sequence from position 0 */
    if (start_pos != h->pos)
        return set_err(h, QC_PLUGIN_ERROR, "forward: start_pos %d, but the runtime holds %d positions "
                       "(llama.cpp's recurrent memory cannot be rewound)", start_pos, h->pos);
    if ((int64_t)start_pos + n > (int64_t)llama_n_ctx(h->ctx))
        return set_err(h, QC_PLUGIN_ERROR, "forward: positions up to %d exceed n_ctx %u (option n_ctx=N)",
                       start_pos + n, llama_n_ctx(h->ctx));
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= h->V)
            return set_err(h, QC_PLUGIN_ERROR, "forward: token %d at index %d outside [0, %d)", tokens[i], i, h->V);

    /* outputs: every row when all logits or hidden states are wanted (result_norm keeps only
     * the output rows) */
    int out_all = all_logits || h->want_hidden;
    if (h->want_hidden) {
        size_t need = (size_t)(h->L + 1) * (size_t)n * (size_t)h->H;
        float *p = realloc(h->hidden, need * sizeof(float));
        if (!p) return set_err(h, QC_PLUGIN_ERROR, "out of memory (hidden capture)");
        h->hidden = p;
    }
    h->cap_tokens = n;
    h->hid_ok = 0;
    memset(h->hid_rows, 0, sizeof h->hid_rows);
    memset(h->conv_win_ok, 0, sizeof h->conv_win_ok);
    invalidate_state(h);

    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int32_t i = 0; i < n; i++) {
        b.token[i] = tokens[i];
        b.pos[i] = start_pos + i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = (int8_t)(out_all || i == n - 1);
    }
    b.n_tokens = n;
    ring_clear();
    h->capturing = 1;
    int32_t r = llama_decode(h->ctx, b);
    h->capturing = 0;
    llama_batch_free(b);
    if (r != 0) {
        char what[128];
        snprintf(what, sizeof what, "forward: llama_decode returned %d", r);
        /* the memory may be partially updated: the sequence is no longer usable */
        h->pos = -1;
        return set_err_log(h, QC_PLUGIN_ERROR, what);
    }
    h->pos = start_pos + n;
    for (int32_t i = all_logits ? 0 : n - 1, o = 0; i < n; i++, o++) {
        const float *row = llama_get_logits_ith(h->ctx, i);
        if (!row) return set_err_log(h, QC_PLUGIN_ERROR, "forward: no logits for a row");
        memcpy(logits + (size_t)o * h->V, row, (size_t)h->V * sizeof(float));
    }
    if (h->want_hidden) {
        h->hid_ok = 1;
        for (int i = 0; i <= h->L; i++)
            if (h->hid_rows[i] != n) h->hid_ok = 0;
    }
    return QC_PLUGIN_OK;
}

static int p_get_hidden(void *handle, int32_t index, float *dst) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    if (!h->want_hidden) return set_err(h, QC_PLUGIN_UNSUPPORTED, "hidden capture is off (hidden=0)");
    if (index < 0 || index > h->L) return set_err(h, QC_PLUGIN_ERROR, "get_hidden: index %d outside 0..%d", index, h->L);
    if (h->cap_tokens <= 0) return set_err(h, QC_PLUGIN_ERROR, "get_hidden: no forward since open/reset");
    if (h->hid_rows[index] != h->cap_tokens)
        return set_err(h, QC_PLUGIN_ERROR, "get_hidden: index %d: captured %d of %d rows from the graph "
                       "(tensor %s)", index, h->hid_rows[index], h->cap_tokens,
                       index == 0 ? "model.input_embed" : index == h->L ? "result_norm" : "l_out-N");
    memcpy(dst, h->hidden + (size_t)index * h->cap_tokens * h->H, (size_t)h->cap_tokens * h->H * sizeof(float));
    return QC_PLUGIN_OK;
}

/* ---- the state blob ------------------------------------------------------------------ */

typedef struct {
    const uint8_t *p, *end;
    int bad;
} rd;

static int rd_take(rd *r, void *dst, size_t n) {
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = 1;
        return -1;
    }
    if (dst) memcpy(dst, r->p, n);
    r->p += n;
    return 0;
}
static const uint8_t *rd_span(rd *r, uint64_t n) {
    if (r->bad || (uint64_t)(r->end - r->p) < n) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *s = r->p;
    r->p += n;
    return s;
}

static size_t type_size(int32_t t) {
    if (t == GGML_TYPE_F32) return 4;
    if (t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) return 2;
    return 0;
}

static float elem(const uint8_t *base, int32_t type, size_t i) {
    if (type == GGML_TYPE_F32) {
        float f;
        memcpy(&f, base + 4 * i, 4);
        return f;
    }
    uint16_t u;
    memcpy(&u, base + 2 * i, 2);
    if (type == GGML_TYPE_F16) {
        ggml_fp16_t x;
        memcpy(&x, &u, 2);
        return ggml_fp16_to_fp32(x);
    }
    ggml_bf16_t x;
    memcpy(&x, &u, 2);
    return ggml_bf16_to_fp32(x);
}

/* Parse the attention (KV cache) section with `ext` bytes of cell extension per cell.
 * 0 ok, -1 not consistent. */
static int parse_kv(qc_llama *h, rd *r, size_t ext, char *why, size_t nw) {
    uint32_t n_stream = 0, cells = 0;
    if (rd_take(r, &n_stream, 4) || n_stream != 1) {
        snprintf(why, nw, "kv: n_stream %u (expected 1)", r->bad ? 0 : n_stream);
        return -1;
    }
    if (rd_take(r, &cells, 4) || cells > (uint32_t)h->n_ctx) {
        snprintf(why, nw, "kv: cell count %u", cells);
        return -1;
    }
    h->kv_cells = (int)cells;
    free(h->kv_pos);
    h->kv_pos = calloc(cells ? cells : 1, sizeof(int32_t));
    if (!h->kv_pos) return -1;
    h->kv_n_layer = 0;
    if (cells == 0) return 0;
    for (uint32_t c = 0; c < cells; c++) {
        int32_t pos;
        uint32_t nsid;
        if (rd_take(r, &pos, 4) || rd_take(r, &nsid, 4) || nsid > 64) {
            snprintf(why, nw, "kv: cell %u meta", c);
            return -1;
        }
        if (ext && !rd_span(r, ext)) return -1;
        for (uint32_t s = 0; s < nsid; s++) {
            int32_t sid;
            if (rd_take(r, &sid, 4) || sid != 0) {
                snprintf(why, nw, "kv: cell %u seq id", c);
                return -1;
            }
        }
        h->kv_pos[c] = pos;
    }
    uint32_t vtrans = 0, nl = 0;
    if (rd_take(r, &vtrans, 4) || rd_take(r, &nl, 4) || vtrans > 1 || nl > MAX_LAYERS) {
        snprintf(why, nw, "kv: v_trans %u / n_layer %u", vtrans, nl);
        return -1;
    }
    h->kv_vtrans = (int)vtrans;
    h->kv_n_layer = (int)nl;
    const uint64_t gqa = (uint64_t)h->n_head_kv * h->head_dim;
    for (uint32_t l = 0; l < nl; l++) {
        int32_t t = 0;
        uint64_t row = 0;
        if (rd_take(r, &t, 4) || rd_take(r, &row, 8) || !type_size(t) || row != gqa * type_size(t)) {
            snprintf(why, nw, "kv: K layer %u type %d row %llu (expected %llu floats)", l, t,
                     (unsigned long long)row, (unsigned long long)gqa);
            return -1;
        }
        h->kv_ktype[l] = t;
        h->kv_krow[l] = row;
        if (!(h->kv_k[l] = rd_span(r, row * cells))) return -1;
    }
    for (uint32_t l = 0; l < nl; l++) {
        int32_t t = 0;
        if (rd_take(r, &t, 4) || !type_size(t)) return -1;
        h->kv_vtype[l] = t;
        if (!vtrans) {
            uint64_t row = 0;
            if (rd_take(r, &row, 8) || row != gqa * type_size(t)) {
                snprintf(why, nw, "kv: V layer %u row %llu", l, (unsigned long long)row);
                return -1;
            }
            h->kv_vrow[l] = row;
            if (!(h->kv_v[l] = rd_span(r, row * cells))) return -1;
        } else {
            uint32_t el = 0, ng = 0;
            if (rd_take(r, &el, 4) || rd_take(r, &ng, 4) || el != type_size(t) || ng != gqa) {
                snprintf(why, nw, "kv: V^T layer %u el %u gqa %u", l, el, ng);
                return -1;
            }
            h->kv_vel[l] = el;
            h->kv_vgqa[l] = ng;
            if (!(h->kv_v[l] = rd_span(r, (uint64_t)el * ng * cells))) return -1;
        }
    }
    return r->bad ? -1 : 0;
}

static int parse_rs(qc_llama *h, rd *r, char *why, size_t nw) {
    uint32_t cells = 0;
    if (rd_take(r, &cells, 4) || cells > 1) {
        snprintf(why, nw, "recurrent: cell count %u (expected 0 or 1)", cells);
        return -1;
    }
    h->rs_cells = (int)cells;
    h->rs_n_layer = 0;
    for (uint32_t c = 0; c < cells; c++) {
        int32_t pos;
        uint32_t nsid;
        if (rd_take(r, &pos, 4) || rd_take(r, &nsid, 4) || nsid > 64) return -1;
        for (uint32_t s = 0; s < nsid; s++)
            if (rd_take(r, NULL, 4)) return -1;
    }
    /* the data section is written even for 0 cells */
    uint32_t strans = 0, nl = 0;
    if (rd_take(r, &strans, 4) || rd_take(r, &nl, 4) || strans != 0) {
        snprintf(why, nw, "recurrent: s_trans %u", strans);
        return -1;
    }
    (void)nl; /* hparams.n_layer(): every layer, but only recurrent ones have records */
    const uint64_t r_floats = (uint64_t)(h->K - 1) * h->C;
    const uint64_t s_floats = (uint64_t)h->dk * h->dv * h->nv;
    for (int l = 0; l < h->n_recr; l++) {
        int32_t t = 0;
        uint64_t row = 0;
        if (rd_take(r, &t, 4) || rd_take(r, &row, 8) || !type_size(t) || row != r_floats * type_size(t)) {
            snprintf(why, nw, "recurrent: conv record %d type %d row %llu (expected %llu floats)", l, t,
                     (unsigned long long)row, (unsigned long long)r_floats);
            return -1;
        }
        h->rs_rtype[l] = t;
        h->rs_rrow[l] = row;
        if (!(h->rs_r[l] = rd_span(r, row * cells))) return -1;
    }
    for (int l = 0; l < h->n_recr; l++) {
        int32_t t = 0;
        uint64_t row = 0;
        if (rd_take(r, &t, 4) || rd_take(r, &row, 8) || !type_size(t) || row != s_floats * type_size(t)) {
            snprintf(why, nw, "recurrent: ssm record %d type %d row %llu (expected %llu floats)", l, t,
                     (unsigned long long)row, (unsigned long long)s_floats);
            return -1;
        }
        h->rs_stype[l] = t;
        h->rs_srow[l] = row;
        if (!(h->rs_s[l] = rd_span(r, row * cells))) return -1;
    }
    h->rs_n_layer = h->n_recr;
    return r->bad ? -1 : 0;
}

static int load_state(qc_llama *h) {
    if (h->blob_valid) return QC_PLUGIN_OK;
    if (h->pos < 0) return set_err(h, QC_PLUGIN_ERROR, "get_state: the last forward failed");
    size_t n = llama_state_seq_get_size(h->ctx, 0);
    if (n < 8) return set_err_log(h, QC_PLUGIN_ERROR, "get_state: llama_state_seq_get_size returned < 8");
    uint8_t *b = realloc(h->blob, n);
    if (!b) return set_err(h, QC_PLUGIN_ERROR, "out of memory (state blob)");
    h->blob = b;
    size_t got = llama_state_seq_get_data(h->ctx, b, n, 0);
    if (got != n) return set_err_log(h, QC_PLUGIN_ERROR, "get_state: llama_state_seq_get_data size mismatch");
    h->blob_n = n;
    /* magic, seq id, then the hybrid memory: attention KV cache, then the recurrent memory.
     * The per-cell extension of the KV cache (M-RoPE: llama_kv_cell_ext, 12 bytes in v0.5.0)
     * is not announced in the blob: try 12 and 0 and accept only a parse that ends exactly
     * at the end of the blob. */
    static const size_t exts[] = {12, 0, 8, 16};
    char why[512] = "";
    for (size_t e = 0; e < sizeof exts / sizeof exts[0]; e++) {
        rd r = {b, b + n, 0};
        uint32_t magic;
        int32_t sid;
        if (rd_take(&r, &magic, 4) || rd_take(&r, &sid, 4) || magic != 0xaf143cd8u || sid != 0)
            return set_err(h, QC_PLUGIN_ERROR, "get_state: unexpected blob header (magic %08x, seq %d)", magic, sid);
        if (h->n_full > 0) {
            if (parse_kv(h, &r, exts[e], why, sizeof why) != 0) continue;
        } else {
            h->kv_cells = 0;
            h->kv_n_layer = 0;
        }
        if (h->n_recr > 0) {
            if (parse_rs(h, &r, why, sizeof why) != 0) continue;
        }
        if (r.bad || r.p != r.end) {
            snprintf(why, sizeof why, "%zu bytes left over", (size_t)(r.end - r.p));
            continue;
        }
        /* the main model's full-attention layers come first; MTP blocks (full attention)
         * kept in the GGUF may add their own records after them */
        if (h->kv_cells > 0 && h->kv_n_layer != h->n_full && h->kv_n_layer != h->n_full + h->n_nextn) {
            snprintf(why, sizeof why, "kv: %d layer records for %d full-attention layers (+%d MTP)",
                     h->kv_n_layer, h->n_full, h->n_nextn);
            continue;
        }
        h->blob_valid = 1;
        return QC_PLUGIN_OK;
    }
    return set_err(h, QC_PLUGIN_ERROR, "get_state: cannot parse llama_state_seq_get_data's %zu bytes "
                   "consistently (%s)", n, why);
}

/* index of layer `layer` among the full-attention (or recurrent) layers */
static int sub_index(const qc_llama *h, int layer, int recr) {
    int k = 0;
    for (int i = 0; i < layer; i++)
        if (h->is_recr[i] == recr) k++;
    return k;
}

/* HF value head j -> llama.cpp's tiled head l (value heads reordered by the converter) */
static int v_head_llama(const qc_llama *h, int j) {
    if (h->raw_layout) return j;
    int r = h->nv / h->nk;
    return (j % r) * h->nk + j / r;
}

/* HF conv channel -> llama.cpp channel */
static int conv_chan_llama(const qc_llama *h, int c) {
    int qk = 2 * h->nk * h->dk;
    if (c < qk) return c;
    int j = (c - qk) / h->dv, e = (c - qk) % h->dv;
    return qk + v_head_llama(h, j) * h->dv + e;
}

static int p_get_state(void *handle, int32_t layer, int32_t kind, int32_t n_pos, float *dst) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    if (layer < 0 || layer >= h->L) return set_err(h, QC_PLUGIN_ERROR, "get_state: layer %d outside 0..%d", layer, h->L - 1);
    int rc = load_state(h);
    if (rc) return rc;
    if (kind == QC_STATE_K_CACHE || kind == QC_STATE_V_CACHE) {
        if (h->is_recr[layer]) return set_err(h, QC_PLUGIN_ERROR, "get_state: layer %d is a linear-attention layer", layer);
        if (n_pos < 0) return set_err(h, QC_PLUGIN_ERROR, "get_state: n_pos %d", n_pos);
        if (n_pos > h->pos)
            return set_err(h, QC_PLUGIN_UNSUPPORTED, "get_state: n_pos %d > %d used positions: llama.cpp's "
                           "state API exposes only the used KV cells", n_pos, h->pos);
        const int nkv = h->n_head_kv, hd = h->head_dim;
        memset(dst, 0, (size_t)nkv * n_pos * hd * sizeof(float));
        if (h->kv_cells == 0) {
            if (n_pos > 0) return set_err(h, QC_PLUGIN_ERROR, "get_state: the KV cache holds no cells");
            return QC_PLUGIN_OK;
        }
        int fl = sub_index(h, layer, 0);
        /* cell of each position */
        int *cell_of = malloc((size_t)(n_pos ? n_pos : 1) * sizeof(int));
        if (!cell_of) return set_err(h, QC_PLUGIN_ERROR, "out of memory");
        for (int p = 0; p < n_pos; p++) cell_of[p] = -1;
        for (int c = 0; c < h->kv_cells; c++) {
            int32_t p = h->kv_pos[c];
            if (p < 0 || p >= h->pos) {
                free(cell_of);
                return set_err(h, QC_PLUGIN_ERROR, "get_state: KV cell %d holds position %d outside 0..%d", c, p, h->pos - 1);
            }
            if (p < n_pos) {
                if (cell_of[p] >= 0) {
                    free(cell_of);
                    return set_err(h, QC_PLUGIN_ERROR, "get_state: position %d in two KV cells", p);
                }
                cell_of[p] = c;
            }
        }
        for (int p = 0; p < n_pos; p++)
            if (cell_of[p] < 0) {
                free(cell_of);
                return set_err(h, QC_PLUGIN_ERROR, "get_state: position %d is in no KV cell", p);
            }
        const size_t gqa = (size_t)nkv * hd;
        for (int p = 0; p < n_pos; p++) {
            int c = cell_of[p];
            for (int kh = 0; kh < nkv; kh++)
                for (int d = 0; d < hd; d++) {
                    size_t j = (size_t)kh * hd + d;
                    float v;
                    if (kind == QC_STATE_K_CACHE)
                        v = elem(h->kv_k[fl], h->kv_ktype[fl], (size_t)c * gqa + j);
                    else if (!h->kv_vtrans)
                        v = elem(h->kv_v[fl], h->kv_vtype[fl], (size_t)c * gqa + j);
                    else /* transposed: [n_embd_v_gqa][cells] */
                        v = elem(h->kv_v[fl], h->kv_vtype[fl], j * (size_t)h->kv_cells + c);
                    dst[((size_t)kh * n_pos + p) * hd + d] = v;
                }
        }
        free(cell_of);
        return QC_PLUGIN_OK;
    }
    if (kind == QC_STATE_CONV || kind == QC_STATE_RECURRENT) {
        if (!h->is_recr[layer]) return set_err(h, QC_PLUGIN_ERROR, "get_state: layer %d is a full-attention layer", layer);
        int rl = sub_index(h, layer, 1);
        if (kind == QC_STATE_CONV) {
            const int C = h->C, K = h->K;
            memset(dst, 0, (size_t)C * K * sizeof(float));
            if (h->rs_cells == 0) return QC_PLUGIN_OK; /* fresh: zeros */
            const float *win = h->conv_win_ok[layer] ? h->conv_win + (size_t)layer * C * K : NULL;
            for (int c = 0; c < C; c++) {
                int lc = conv_chan_llama(h, c);
                /* llama.cpp's record: [C][K-1], oldest first: canonical columns 1..K-1 */
                for (int k = 0; k < K - 1; k++) {
                    float v = elem(h->rs_r[rl], h->rs_rtype[rl], (size_t)lc * (K - 1) + k);
                    dst[(size_t)c * K + 1 + k] = v;
                    if (win && win[(size_t)lc * K + 1 + k] != v) {
                        return set_err(h, QC_PLUGIN_ERROR, "get_state: layer %d conv channel %d column %d: "
                                       "state %g != graph conv_input %g", layer, c, k + 1, v,
                                       win[(size_t)lc * K + 1 + k]);
                    }
                }
                /* column 0 (the oldest), which llama.cpp does not keep: from the graph's
                 * conv_input of the last forward; zero when not captured */
                dst[(size_t)c * K] = win ? win[(size_t)lc * K] : 0.0f;
            }
            return QC_PLUGIN_OK;
        }
        const int nv = h->nv, dk = h->dk, dv = h->dv;
        memset(dst, 0, (size_t)nv * dk * dv * sizeof(float));
        if (h->rs_cells == 0) return QC_PLUGIN_OK;
        /* llama.cpp per head l: [dv][dk] (dk fastest), i.e. S^T; heads in tiled order */
        for (int j = 0; j < nv; j++) {
            int l = v_head_llama(h, j);
            for (int a = 0; a < dk; a++)
                for (int bb = 0; bb < dv; bb++)
                    dst[((size_t)j * dk + a) * dv + bb] =
                        elem(h->rs_s[rl], h->rs_stype[rl],
                             h->raw_layout ? ((size_t)l * dk + a) * dv + bb : ((size_t)l * dv + bb) * dk + a);
        }
        return QC_PLUGIN_OK;
    }
    return set_err(h, QC_PLUGIN_ERROR, "get_state: unknown kind %d", kind);
}

static int p_set_option(void *handle, const char *key, const char *value) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    if (key && !strcmp(key, "threads")) {
        int t;
        if (!value || parse_int(value, 1, 512, &t)) return set_err(h, QC_PLUGIN_ERROR, "threads=%s: invalid", value ? value : "");
        return apply_threads(h, t);
    }
    return set_err(h, QC_PLUGIN_UNSUPPORTED, "set_option: '%s' is not supported by llama.cpp (threads only)", key ? key : "");
}

static const char *p_last_error(void *handle) {
    qc_llama *h = handle;
    return h ? h->err : g_open_err;
}

static const qc_runtime_plugin g_plugin = {
    .abi_version = QC_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(qc_runtime_plugin),
    .open = p_open,
    .reset = p_reset,
    .forward = p_forward,
    .close = p_close,
    .last_error = p_last_error,
    .get_hidden = p_get_hidden,
    .get_state = p_get_state,
    .fill_state = NULL,
    .set_option = p_set_option,
};

__attribute__((visibility("default"))) const qc_runtime_plugin *qc_runtime_plugin_entry(void) {
    return &g_plugin;
}
