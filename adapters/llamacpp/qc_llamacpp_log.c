/* qc_llamacpp_log.c — the log ring (llama.cpp's and ggml's log, process-wide) and error text
 * (part of the llama.cpp plugin: see qc_llamacpp_internal.h) */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wformat-truncation" /* paths are bounded by PATH_MAX_ */
#include "qc_llamacpp_internal.h"

/* ===================================================================================== */
/* log ring (llama.cpp's and ggml's log, process-wide)                                   */
/* ===================================================================================== */

#define RING_SIZE 32768
static char g_ring[RING_SIZE];
static size_t g_ring_pos;   /* next write position */
static int g_ring_full;
static pthread_mutex_t g_ring_mu = PTHREAD_MUTEX_INITIALIZER;
int g_debug;         /* QC_LLAMACPP_DEBUG=1: also copy the log to stderr */

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

void log_cb(enum ggml_log_level level, const char *text, void *ud) {
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
int ring_find(const char *pat, int skip_pat, char *out, size_t n) {
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
void abort_cb(const char *msg) {
    char line[2300];
    int n = snprintf(line, sizeof line, "qc_llamacpp: llama.cpp aborted: %s\n", msg ? msg : "");
    if (n > 0) {
        ssize_t w = write(2, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1));
        (void)w;
    }
}

void ring_clear(void) {
    pthread_mutex_lock(&g_ring_mu);
    g_ring_pos = 0;
    g_ring_full = 0;
    pthread_mutex_unlock(&g_ring_mu);
}


char g_open_err[ERR_MAX];

int set_err(qc_llama *h, int code, const char *fmt, ...) {
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
int set_err_log(qc_llama *h, int code, const char *what) {
    char tail[2048];
    ring_tail(tail, sizeof tail, 6);
    if (tail[0])
        return set_err(h, code, "%s (llama.cpp log: %s)", what, tail);
    return set_err(h, code, "%s", what);
}

