/* qc_model_stream.c — a streamed model: the checkpoint's files mapped, a layer's weights read
 * when it is acquired and dropped when it is released (qc_model.h, "Streamed models").
 *
 * The views of a streamed model point into read-only mappings of the weight files
 * (qc_st_open_lazy), so every tensor is addressable but nothing is resident until touched.
 * qc_model_layer_acquire populates the byte spans of one layer's tensors (MADV_POPULATE_READ,
 * or a touch per page on kernels without it) and repacks that layer's Q8_0 pairs into owned
 * buffers; qc_model_layer_release drops the spans from the process (MADV_DONTNEED: the pages
 * stay in the page cache, not in our resident set) and frees the buffers. Rows of the
 * embedding table and the output head are acquired in blocks the same way (qc_model_rows_*),
 * so no single tensor has to fit in memory. The bytes are the file's bytes either way: a
 * streamed model computes bit for bit what the same model loaded in memory computes.
 *
 * An in-memory model (qc_model_load, qc_model_synthetic) accepts every call as a no-op, so one
 * layer-major driver serves both.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "qc/qc_model.h"
#include "qc/qc_safetensors.h"
#include "qc/qc_sha256.h"
#include "qc_model_priv.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; older kernels answer EINVAL: touched instead */
#endif

/* One Q8_0 pair repacked on demand. */
struct qc_q8_defer {
    const uint8_t *quant; /* [out, in] I8, in the file mapping */
    const uint8_t *scale; /* [out, in/32] F16, in the file mapping */
    int64_t out, nb;      /* rows, blocks per row */
    qc_tensor *view;      /* the model's view (its guard until acquired), or NULL if unused */
    void *guard;          /* reserved inaccessible range of the view's size */
    size_t guard_len;
};

/* One per-expert MoE view stacked on demand. */
struct qc_stack_defer {
    qc_tensor *view;      /* exp_gate_up or exp_down of a layer */
    const void **src;     /* [n_src] the pieces in the file mapping, in order (the experts'
                             matrices; a legacy packed layer's row blocks) */
    size_t *len;          /* [n_src] bytes of each piece */
    int n_src;
    void *guard;
    size_t guard_len;
};

/* qc_layer_weights is a table of views: walked as an array. */
_Static_assert(sizeof(qc_layer_weights) % sizeof(qc_tensor) == 0, "qc_layer_weights: views only");
#define N_VIEWS ((int)(sizeof(qc_layer_weights) / sizeof(qc_tensor)))

static qc_tensor *layer_views(qc_model *m, int l) { return (qc_tensor *)&m->layers[l]; }
static qc_model_priv *priv(const qc_model *m) { return (qc_model_priv *)m->priv; }

int qc_model_is_streamed(const qc_model *m) { return m && priv(m) && priv(m)->streamed; }

uint64_t qc_model_bytes_read(const qc_model *m) { return qc_model_is_streamed(m) ? priv(m)->bytes_read : 0; }

/* ==== page spans ==== */

static size_t page_size(void) {
    long ps = sysconf(_SC_PAGESIZE);
    return ps > 0 ? (size_t)ps : 4096;
}

/* [p, p+n) widened to whole pages. */
static void page_span(const void *p, size_t n, uintptr_t *a, size_t *len) {
    const size_t ps = page_size();
    uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(ps - 1);
    uintptr_t hi = ((uintptr_t)p + n + ps - 1) & ~(uintptr_t)(ps - 1);
    *a = lo;
    *len = hi - lo;
}

/* Read the span into the page tables now (counted in bytes_read). */
static void populate(qc_model_priv *p, const void *data, size_t n) {
    if (!data || !n) return;
    uintptr_t a;
    size_t len;
    page_span(data, n, &a, &len);
    p->bytes_read += n;
    if (madvise((void *)a, len, MADV_POPULATE_READ) == 0) return;
    const size_t ps = page_size();
    volatile const uint8_t *b = (const uint8_t *)a;
    uint8_t sink = 0;
    for (size_t off = 0; off < len; off += ps) sink ^= b[off];
    (void)sink;
}

/* Drop the span from the process (the page cache keeps it). */
static void drop(const void *data, size_t n) {
    if (!data || !n) return;
    uintptr_t a;
    size_t len;
    page_span(data, n, &a, &len);
    (void)madvise((void *)a, len, MADV_DONTNEED);
}

/* Ask the kernel to read the span ahead (asynchronously, into the page cache). */
static void will_need(const void *data, size_t n) {
    if (!data || !n) return;
    uintptr_t a;
    size_t len;
    page_span(data, n, &a, &len);
    (void)madvise((void *)a, len, MADV_WILLNEED);
}

/* ==== loading (qc_model_priv.h) ==== */

qc_status qc_model_stream_hash(qc_model_priv *p, char hex[65], qc_err *err) {
    enum { BUF = 8 << 20 };
    uint8_t *buf = malloc(BUF);
    if (!buf) return qc_errf(err, QC_ERR_OOM, "weights hash: out of memory");
    qc_sha256_ctx c;
    qc_sha256_init(&c);
    qc_status st = QC_OK;
    for (int f = 0; f < p->n_files && !st; f++) {
        const char *path = p->files[f].path;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            st = qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
            break;
        }
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        size_t got = 0, len = p->files[f].file_len;
        while (got < len) {
            size_t want = len - got < BUF ? len - got : BUF;
            ssize_t r = pread(fd, buf, want, (off_t)got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                st = qc_errf(err, QC_ERR_IO, "%s: read error after %zu of %zu bytes%s%s", path,
                             got, len, r < 0 ? ": " : " (the file shrank)",
                             r < 0 ? strerror(errno) : "");
                break;
            }
            qc_sha256_update(&c, buf, (size_t)r);
            got += (size_t)r;
        }
        close(fd);
    }
    free(buf);
    if (st) return st;
    uint8_t d[32];
    qc_sha256_final(&c, d);
    qc_sha256_to_hex(d, hex);
    return QC_OK;
}

qc_status qc_model_stream_defer_q8(qc_model_priv *p, qc_st_tensor *w, const qc_st_tensor *scale,
                                   qc_err *err) {
    if (p->n_q8 == p->cap_q8) {
        int nc = p->cap_q8 ? 2 * p->cap_q8 : 16;
        struct qc_q8_defer *nq = realloc(p->q8, (size_t)nc * sizeof *nq);
        if (!nq) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", w->name);
        p->q8 = nq;
        p->cap_q8 = nc;
    }
    p->q8[p->n_q8++] = (struct qc_q8_defer){w->data, scale->data, w->shape[0],
                                            w->shape[1] / QC_Q8_0_BLOCK, NULL, NULL, 0};
    w->dtype = QC_Q8_0; /* the view keeps the quants' address until qc_model_stream_finish */
    return QC_OK;
}

qc_status qc_model_stream_defer_stack(qc_model_priv *p, qc_tensor *view, const void *const *src,
                                      const size_t *len, int n_src, size_t mat, qc_err *err) {
    if (p->n_stk == p->cap_stk) {
        int nc = p->cap_stk ? 2 * p->cap_stk : 16;
        struct qc_stack_defer *ns = realloc(p->stk, (size_t)nc * sizeof *ns);
        if (!ns) return qc_errf(err, QC_ERR_OOM, "streamed model: out of memory");
        p->stk = ns;
        p->cap_stk = nc;
    }
    const void **copy = malloc((size_t)n_src * sizeof *copy);
    size_t *lens = malloc((size_t)n_src * sizeof *lens);
    if (!copy || !lens) {
        free(copy);
        free(lens);
        return qc_errf(err, QC_ERR_OOM, "streamed model: out of memory");
    }
    memcpy(copy, src, (size_t)n_src * sizeof *copy);
    for (int k = 0; k < n_src; k++) lens[k] = len ? len[k] : mat;
    p->stk[p->n_stk++] = (struct qc_stack_defer){view, copy, lens, n_src, NULL, 0};
    return QC_OK;
}

/* An inaccessible range of n bytes (address space only): a deferred view's data until it is
 * acquired, so a read before acquire faults instead of reading something else. */
static void *reserve_guard(size_t n, size_t *len) {
    const size_t ps = page_size();
    *len = n ? (n + ps - 1) / ps * ps : ps;
    void *g = mmap(NULL, *len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return g == MAP_FAILED ? NULL : g;
}

static struct qc_q8_defer *q8_of(qc_model_priv *p, const void *quant) {
    for (int i = 0; i < p->n_q8; i++)
        if (p->q8[i].quant == quant) return &p->q8[i];
    return NULL;
}

static qc_status link_q8(qc_model_priv *p, qc_tensor *t, qc_err *err) {
    if (t->ndim == 0 || t->dtype != QC_Q8_0 || !t->data) return QC_OK;
    struct qc_q8_defer *d = q8_of(p, t->data);
    if (!d) return qc_errf(err, QC_ERR_FORMAT, "streamed model: a Q8_0 view without its pair");
    d->view = t;
    d->guard = reserve_guard(qc_tensor_bytes(t), &d->guard_len);
    if (!d->guard) return qc_errf(err, QC_ERR_OOM, "streamed model: cannot reserve address space");
    t->data = d->guard; /* repacked on acquire */
    return QC_OK;
}

qc_status qc_model_stream_finish(qc_model *m, qc_err *err) {
    qc_model_priv *p = priv(m);
    qc_status st = QC_OK;
    p->layer_bufs = calloc((size_t)m->cfg.n_layers * N_VIEWS, sizeof *p->layer_bufs);
    if (!p->layer_bufs) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", m->dir);
    if (m->lm_head.data != m->embed.data && (st = link_q8(p, &m->lm_head, err))) return st;
    for (int l = 0; l < m->cfg.n_layers && !st; l++)
        for (int v = 0; v < N_VIEWS && !st; v++) st = link_q8(p, &layer_views(m, l)[v], err);
    for (int i = 0; i < p->n_stk && !st; i++) {
        struct qc_stack_defer *d = &p->stk[i];
        d->guard = reserve_guard(qc_tensor_bytes(d->view), &d->guard_len);
        if (!d->guard) return qc_errf(err, QC_ERR_OOM, "streamed model: cannot reserve address space");
        d->view->data = d->guard;
    }
    return st;
}

void qc_model_stream_free(qc_model_priv *p, int n_layers) {
    if (p->layer_bufs)
        for (size_t i = 0; i < (size_t)n_layers * N_VIEWS; i++) free(p->layer_bufs[i]);
    free(p->layer_bufs);
    for (int i = 0; i < p->n_q8; i++)
        if (p->q8[i].guard) munmap(p->q8[i].guard, p->q8[i].guard_len);
    free(p->q8);
    for (int i = 0; i < p->n_stk; i++) {
        if (p->stk[i].guard) munmap(p->stk[i].guard, p->stk[i].guard_len);
        free(p->stk[i].src);
        free(p->stk[i].len);
    }
    free(p->stk);
}

/* ==== layers ==== */

static struct qc_q8_defer *deferred(qc_model_priv *p, const qc_tensor *t) {
    for (int i = 0; i < p->n_q8; i++)
        if (p->q8[i].view == t) return &p->q8[i];
    return NULL;
}

/* Rows [r0, r1) of a deferred pair as Q8_0 blocks into a new buffer (NULL: out of memory). */
static uint8_t *repack_rows(qc_model_priv *p, const struct qc_q8_defer *d, int64_t r0, int64_t r1) {
    const size_t nb = (size_t)d->nb, nblk = (size_t)(r1 - r0) * nb;
    const uint8_t *q = d->quant + (size_t)r0 * nb * QC_Q8_0_BLOCK;
    const uint8_t *s = d->scale + (size_t)r0 * nb * 2;
    uint8_t *buf = malloc(nblk * QC_Q8_0_BLOCK_BYTES + 1);
    if (!buf) return NULL;
    populate(p, q, nblk * QC_Q8_0_BLOCK);
    populate(p, s, nblk * 2);
    for (size_t b = 0; b < nblk; b++) {
        memcpy(buf + b * QC_Q8_0_BLOCK_BYTES, s + 2 * b, 2);
        memcpy(buf + b * QC_Q8_0_BLOCK_BYTES + 2, q + b * QC_Q8_0_BLOCK, QC_Q8_0_BLOCK);
    }
    drop(q, nblk * QC_Q8_0_BLOCK);
    drop(s, nblk * 2);
    return buf;
}

static struct qc_stack_defer *stacked(qc_model_priv *p, const qc_tensor *t) {
    for (int i = 0; i < p->n_stk; i++)
        if (p->stk[i].view == t) return &p->stk[i];
    return NULL;
}

/* The deferred view's bytes into a new buffer (NULL: out of memory). */
static uint8_t *stack_now(qc_model_priv *p, const struct qc_stack_defer *d) {
    size_t total = 0, off = 0;
    for (int k = 0; k < d->n_src; k++) total += d->len[k];
    uint8_t *buf = malloc(total + 1);
    if (!buf) return NULL;
    for (int k = 0; k < d->n_src; k++) {
        populate(p, d->src[k], d->len[k]);
        memcpy(buf + off, d->src[k], d->len[k]);
        drop(d->src[k], d->len[k]);
        off += d->len[k];
    }
    return buf;
}

/* The guard a deferred view shows while not acquired (NULL: the view is not deferred). */
static void *guard_of(qc_model_priv *p, const qc_tensor *t) {
    const struct qc_q8_defer *q = t->dtype == QC_Q8_0 ? deferred(p, t) : NULL;
    const struct qc_stack_defer *s = q ? NULL : stacked(p, t);
    return q ? q->guard : s ? s->guard : NULL;
}

qc_status qc_model_layer_acquire(qc_model *m, int l, qc_err *err) {
    if (!qc_model_is_streamed(m)) return QC_OK;
    qc_model_priv *p = priv(m);
    qc_tensor *v = layer_views(m, l);
    for (int i = 0; i < N_VIEWS; i++) {
        if (v[i].ndim == 0) continue;
        const struct qc_q8_defer *d = v[i].dtype == QC_Q8_0 ? deferred(p, &v[i]) : NULL;
        const struct qc_stack_defer *sd = d ? NULL : stacked(p, &v[i]);
        if (!d && !sd) {
            populate(p, v[i].data, qc_tensor_bytes(&v[i]));
            continue;
        }
        uint8_t *buf = d ? repack_rows(p, d, 0, d->out) : stack_now(p, sd);
        if (!buf) {
            qc_model_layer_release(m, l);
            return qc_errf(err, QC_ERR_OOM, "%s: layer %d: out of memory repacking Q8_0 weights",
                           m->dir, l);
        }
        p->layer_bufs[(size_t)l * N_VIEWS + i] = buf;
        v[i].data = buf;
    }
    return QC_OK;
}

void qc_model_layer_release(qc_model *m, int l) {
    if (!qc_model_is_streamed(m)) return;
    qc_model_priv *p = priv(m);
    qc_tensor *v = layer_views(m, l);
    for (int i = 0; i < N_VIEWS; i++) {
        void **b = &p->layer_bufs[(size_t)l * N_VIEWS + i];
        if (*b) {
            free(*b);
            *b = NULL;
            v[i].data = guard_of(p, &v[i]);
        } else if (v[i].ndim) {
            drop(v[i].data, qc_tensor_bytes(&v[i]));
        }
    }
}

void qc_model_layer_prefetch(qc_model *m, int l) {
    if (!qc_model_is_streamed(m) || l < 0 || l >= m->cfg.n_layers) return;
    qc_model_priv *p = priv(m);
    qc_tensor *v = layer_views(m, l);
    for (int i = 0; i < N_VIEWS; i++) {
        const struct qc_q8_defer *d = v[i].dtype == QC_Q8_0 ? deferred(p, &v[i]) : NULL;
        const struct qc_stack_defer *sd = d ? NULL : stacked(p, &v[i]);
        if (d) {
            will_need(d->quant, (size_t)d->out * d->nb * QC_Q8_0_BLOCK);
            will_need(d->scale, (size_t)d->out * d->nb * 2);
        } else if (sd) {
            for (int k = 0; k < sd->n_src; k++) will_need(sd->src[k], sd->len[k]);
        } else if (v[i].ndim) {
            will_need(v[i].data, qc_tensor_bytes(&v[i]));
        }
    }
}

size_t qc_model_layer_bytes(const qc_model *m, int l) {
    size_t n = 0;
    const qc_tensor *v = (const qc_tensor *)&m->layers[l];
    for (int i = 0; i < N_VIEWS; i++) n += qc_tensor_bytes(&v[i]);
    return n;
}

/* ==== rows of the embedding table / the output head ==== */

qc_status qc_model_rows_acquire(qc_model *m, const qc_tensor *t, int64_t r0, int64_t r1,
                                qc_model_rows *rows, qc_err *err) {
    memset(rows, 0, sizeof *rows);
    if (r0 < 0 || r1 > t->shape[0] || r0 >= r1)
        return qc_errf(err, QC_ERR_RANGE, "rows [%lld, %lld) of a [%lld, %lld] tensor",
                       (long long)r0, (long long)r1, (long long)t->shape[0],
                       (long long)t->shape[1]);
    const size_t rb = qc_dtype_row_bytes(t->dtype, t->shape[1]);
    rows->view = *t;
    rows->view.shape[0] = r1 - r0;
    const struct qc_q8_defer *d =
        qc_model_is_streamed(m) && t->dtype == QC_Q8_0 ? deferred(priv(m), t) : NULL;
    if (d) {
        rows->owned = repack_rows(priv(m), d, r0, r1);
        if (!rows->owned)
            return qc_errf(err, QC_ERR_OOM, "%s: out of memory repacking %lld Q8_0 rows", m->dir,
                           (long long)(r1 - r0));
        rows->view.data = rows->owned;
        return QC_OK;
    }
    rows->view.data = (const uint8_t *)t->data + (size_t)r0 * rb;
    if (qc_model_is_streamed(m)) {
        populate(priv(m), rows->view.data, (size_t)(r1 - r0) * rb);
        rows->span = rows->view.data;
        rows->span_len = (size_t)(r1 - r0) * rb;
    }
    return QC_OK;
}

void qc_model_rows_release(qc_model *m, qc_model_rows *rows) {
    (void)m;
    free(rows->owned);
    drop(rows->span, rows->span_len);
    memset(rows, 0, sizeof *rows);
}

void qc_model_tensor_drop(const qc_model *m, const qc_tensor *t) {
    if (qc_model_is_streamed(m) && t->data) drop(t->data, qc_tensor_bytes(t));
}
