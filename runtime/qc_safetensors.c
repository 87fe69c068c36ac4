/* qc_safetensors.c — validating safetensors header parser and the read of a file into read-only memory.
 * Contract and the list of checks: include/qc/qc_safetensors.h. */
#include "qc/qc_safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ==== Small helpers ==== */

/* A JSON number that is an exact non-negative integer <= 2^53. Returns 1 and sets *out;
 * 0 if not a number / not integral; -1 if a negative integer; -2 if above 2^53 (a double
 * cannot hold it exactly). */
static int json_u64(const cJSON *n, uint64_t *out) {
    if (!cJSON_IsNumber(n)) return 0;
    double v = n->valuedouble;
    if (!isfinite(v) || v != floor(v)) return 0;
    if (v < 0) return -1;
    if (v > 9007199254740992.0) return -2;
    *out = (uint64_t)v;
    return 1;
}

/* dtype name -> qc_dtype. Returns 1 ok, 0 a known safetensors dtype we do not support,
 * -1 not a safetensors dtype at all. */
static int parse_dtype(const char *s, qc_dtype *t) {
    if (!strcmp(s, "F32")) return *t = QC_F32, 1;
    if (!strcmp(s, "BF16")) return *t = QC_BF16, 1;
    if (!strcmp(s, "F16")) return *t = QC_F16, 1;
    if (!strcmp(s, "I8")) return *t = QC_I8, 1; /* Q8_0 quants (qc_model_q8.c pairs them) */
    static const char *known[] = {"BOOL", "U8",  "I8",  "I16", "U16",     "I32",     "U32",
                                  "I64",  "U64", "F64", "F8_E4M3", "F8_E5M2", "F8_E8M0",
                                  "F4",   "F6_E2M3", "F6_E3M2", "C64"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(s, known[i])) return 0;
    return -1;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const qc_st_tensor *)a)->name, ((const qc_st_tensor *)b)->name);
}

typedef struct {
    uint64_t begin, end; /* byte span */
    int idx;             /* tensor index */
} st_span;

static int cmp_span(const void *a, const void *b) {
    const st_span *x = (const st_span *)a, *y = (const st_span *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->idx - y->idx;
}

static void free_tensors(qc_st_tensor *ts, int n) {
    if (!ts) return;
    for (int i = 0; i < n; i++) free(ts[i].name);
    free(ts);
}

/* ==== One header entry ==== */

static qc_status parse_entry(const cJSON *e, const char *path, uint64_t data_len,
                             qc_st_tensor *t, qc_err *err) {
    const char *nm = e->string;
    if (!cJSON_IsObject(e))
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s: header entry is not an object", path, nm);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!jd) return qc_errf(err, QC_ERR_FORMAT, "%s: %s: missing \"dtype\"", path, nm);
    if (!js) return qc_errf(err, QC_ERR_FORMAT, "%s: %s: missing \"shape\"", path, nm);
    if (!jo) return qc_errf(err, QC_ERR_FORMAT, "%s: %s: missing \"data_offsets\"", path, nm);
    if (!cJSON_IsString(jd))
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s: dtype is not a string", path, nm);
    int dk = parse_dtype(jd->valuestring, &t->dtype);
    if (dk == 0)
        return qc_errf(err, QC_ERR_UNSUPPORTED,
                       "%s: %s: dtype %s is not supported (F32, BF16 or F16 only)", path, nm,
                       jd->valuestring);
    if (dk < 0)
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s: unknown dtype \"%s\"", path, nm,
                       jd->valuestring);

    if (!cJSON_IsArray(js))
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s: shape is not an array", path, nm);
    int nd = cJSON_GetArraySize(js);
    if (nd > QC_ST_MAX_DIMS)
        return qc_errf(err, QC_ERR_UNSUPPORTED, "%s: %s: %d dimensions (at most %d supported)",
                       path, nm, nd, QC_ST_MAX_DIMS);
    t->ndim = nd;
    uint64_t numel = 1;
    int i = 0;
    for (const cJSON *d = js->child; d; d = d->next, i++) {
        uint64_t v;
        int r = json_u64(d, &v);
        if (r == -1)
            return qc_errf(err, QC_ERR_FORMAT, "%s: %s: shape[%d] is negative (%.0f)", path, nm,
                           i, d->valuedouble);
        if (r == -2)
            return qc_errf(err, QC_ERR_FORMAT, "%s: %s: shape[%d] = %.0f is too large", path, nm,
                           i, d->valuedouble);
        if (r == 0)
            return qc_errf(err, QC_ERR_FORMAT,
                           "%s: %s: shape[%d] is not a non-negative integer", path, nm, i);
        t->shape[i] = (int64_t)v;
        if (__builtin_mul_overflow(numel, v, &numel))
            return qc_errf(err, QC_ERR_FORMAT,
                           "%s: %s: shape product overflows 64 bits at shape[%d]", path, nm, i);
    }
    t->numel = numel;
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, (uint64_t)qc_dtype_size(t->dtype), &nbytes))
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s: byte size (%llu x %zu) overflows 64 bits",
                       path, nm, (unsigned long long)numel, qc_dtype_size(t->dtype));

    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2)
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s: data_offsets is not a [begin, end] pair",
                       path, nm);
    uint64_t b, en;
    if (json_u64(jo->child, &b) != 1 || json_u64(jo->child->next, &en) != 1)
        return qc_errf(err, QC_ERR_FORMAT,
                       "%s: %s: data_offsets must be non-negative integers", path, nm);
    if (b > en)
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s: data_offsets [%llu, %llu] has begin > end",
                       path, nm, (unsigned long long)b, (unsigned long long)en);
    if (en > data_len)
        return qc_errf(err, QC_ERR_FORMAT,
                       "%s: %s: data_offsets [%llu, %llu] outside the %llu-byte data region",
                       path, nm, (unsigned long long)b, (unsigned long long)en,
                       (unsigned long long)data_len);
    if (en - b != nbytes)
        return qc_errf(err, QC_ERR_FORMAT,
                       "%s: %s: span of %llu bytes != %llu elements x %zu bytes (%s)", path, nm,
                       (unsigned long long)(en - b), (unsigned long long)numel,
                       qc_dtype_size(t->dtype), qc_dtype_str(t->dtype));
    t->begin = b;
    t->end = en;
    return QC_OK;
}

/* ==== Whole header ==== */

/* The 8-byte header length n and the header itself: bounded by the file and QC_ST_MAX_HEADER,
 * no NUL byte, well-formed JSON, an object (*root, the caller deletes it). */
static qc_status parse_header(const uint8_t *buf, size_t file_len, const char *path,
                              uint64_t *hdr_len, cJSON **root_out, qc_err *err) {
    if (file_len < 8)
        return qc_errf(err, QC_ERR_FORMAT,
                       "%s: file is %zu bytes, shorter than the 8-byte header length", path,
                       file_len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | buf[i];
    if (n > (uint64_t)file_len - 8)
        return qc_errf(err, QC_ERR_FORMAT,
                       "%s: header length %llu exceeds the %zu bytes after the length field",
                       path, (unsigned long long)n, file_len - 8);
    if (n > QC_ST_MAX_HEADER)
        return qc_errf(err, QC_ERR_FORMAT, "%s: header length %llu exceeds the %llu-byte limit",
                       path, (unsigned long long)n, (unsigned long long)QC_ST_MAX_HEADER);
    if (n < 2)
        return qc_errf(err, QC_ERR_FORMAT, "%s: header length %llu is too small for a JSON object",
                       path, (unsigned long long)n);
    const char *hdr = (const char *)buf + 8;
    if (memchr(hdr, '\0', n))
        return qc_errf(err, QC_ERR_FORMAT, "%s: header contains a NUL byte", path);
    char *text = malloc(n + 1);
    if (!text) return qc_errf(err, QC_ERR_OOM, "%s: out of memory for the header", path);
    memcpy(text, hdr, n);
    text[n] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        size_t off = end ? (size_t)(end - text) : 0;
        free(text);
        return qc_errf(err, QC_ERR_FORMAT, "%s: header is not well-formed JSON (near byte %zu)",
                       path, off);
    }
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return qc_errf(err, QC_ERR_FORMAT, "%s: header is not a JSON object", path);
    }
    *hdr_len = n;
    *root_out = root;
    return QC_OK;
}

/* The __metadata__ entry e: at most one, an object of strings; *nmeta counts its entries. */
static qc_status check_metadata(const cJSON *e, const char *path, int *seen_meta, int *nmeta,
                                qc_err *err) {
    if ((*seen_meta)++)
        return qc_errf(err, QC_ERR_FORMAT, "%s: __metadata__: duplicate entry", path);
    if (!cJSON_IsObject(e))
        return qc_errf(err, QC_ERR_FORMAT, "%s: __metadata__: not an object", path);
    for (const cJSON *m = e->child; m; m = m->next, (*nmeta)++)
        if (!cJSON_IsString(m))
            return qc_errf(err, QC_ERR_FORMAT, "%s: __metadata__.%s: value is not a string",
                           path, m->string ? m->string : "");
    return QC_OK;
}

/* Sort ts[0..nt) by name; two with the same name: an error. */
static qc_status check_unique_names(qc_st_tensor *ts, int nt, const char *path, qc_err *err) {
    if (nt <= 1) return QC_OK;
    qsort(ts, (size_t)nt, sizeof *ts, cmp_tensor_name);
    for (int i = 1; i < nt; i++)
        if (!strcmp(ts[i].name, ts[i - 1].name))
            return qc_errf(err, QC_ERR_FORMAT, "%s: %s: duplicate tensor name", path,
                           ts[i].name);
    return QC_OK;
}

/* The spans of ts[0..nt) tile the data region [0, data_len) exactly (order: nt scratch). */
static qc_status check_tiling(const qc_st_tensor *ts, int nt, st_span *order, uint64_t data_len,
                              const char *path, qc_err *err) {
    qc_status st = QC_OK;
    for (int i = 0; i < nt; i++) order[i] = (st_span){ts[i].begin, ts[i].end, i};
    qsort(order, (size_t)nt, sizeof *order, cmp_span);
    uint64_t pos = 0;
    const char *prev = NULL;
    for (int k = 0; k < nt && !st; k++) {
        const qc_st_tensor *t = &ts[order[k].idx];
        if (t->begin < pos)
            st = qc_errf(err, QC_ERR_FORMAT,
                         "%s: %s: data_offsets [%llu, %llu] overlap tensor %s (ends at %llu)",
                         path, t->name, (unsigned long long)t->begin,
                         (unsigned long long)t->end, prev ? prev : "?",
                         (unsigned long long)pos);
        else if (t->begin > pos)
            st = qc_errf(err, QC_ERR_FORMAT,
                         "%s: %s: gap of %llu bytes before data_offsets [%llu, %llu]", path,
                         t->name, (unsigned long long)(t->begin - pos),
                         (unsigned long long)t->begin, (unsigned long long)t->end);
        pos = t->end;
        prev = t->name;
    }
    if (!st && pos != data_len)
        st = qc_errf(err, QC_ERR_FORMAT,
                     "%s: %s: %llu bytes after the last tensor are not covered by any tensor",
                     path, prev ? prev : "(no tensors)", (unsigned long long)(data_len - pos));
    return st;
}

/* The whole parse; buf holds the file (data: the views point into it) or, data 0, at least its
 * 8 + N header bytes (the views' data stay NULL, `bytes` and `data` too). */
static qc_status parse_impl(const uint8_t *buf, size_t file_len, int data, const char *path,
                            qc_st_file *out, qc_err *err) {
    QC_ASSERT(out && path);
    memset(out, 0, sizeof *out);
    uint64_t n = 0;
    cJSON *root = NULL;
    qc_status st = parse_header(buf, file_len, path, &n, &root, err);
    if (st) return st;

    uint64_t data_len = (uint64_t)file_len - 8 - n;
    int cap = cJSON_GetArraySize(root);
    qc_st_tensor *ts = calloc(cap > 0 ? (size_t)cap : 1, sizeof *ts);
    st_span *order = malloc((cap > 0 ? (size_t)cap : 1) * sizeof *order);
    if (!ts || !order) {
        free(ts);
        free(order);
        cJSON_Delete(root);
        return qc_errf(err, QC_ERR_OOM, "%s: out of memory for %d header entries", path, cap);
    }
    int nt = 0, nmeta = 0, seen_meta = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        const char *nm = e->string ? e->string : "";
        if (!strcmp(nm, "__metadata__")) {
            if ((st = check_metadata(e, path, &seen_meta, &nmeta, err))) break;
            continue;
        }
        qc_st_tensor *t = &ts[nt];
        st = parse_entry(e, path, data_len, t, err);
        if (st) break;
        t->name = strdup(nm);
        if (!t->name) {
            st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
            break;
        }
        if (data) t->data = buf + 8 + n + t->begin;
        nt++;
    }
    cJSON_Delete(root);

    if (!st) st = check_unique_names(ts, nt, path, err);
    if (!st) st = check_tiling(ts, nt, order, data_len, path, err);
    /* the file order check_tiling sorted, kept (open_read lays the copy out in it, the hash
     * reads it back in it); the bytes' place as the buffer has them */
    int *file_order = st ? NULL : malloc((nt > 0 ? (size_t)nt : 1) * sizeof *file_order);
    if (!st && !file_order) st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    for (int k = 0; !st && k < nt; k++) {
        file_order[k] = order[k].idx;
        ts[k].copy_off = 8 + n + ts[k].begin;
    }
    free(order);
    if (st) {
        free_tensors(ts, nt);
        return st;
    }
    snprintf(out->path, sizeof out->path, "%s", path);
    out->bytes = data ? buf : NULL;
    out->file_len = file_len;
    out->header_len = n;
    out->data = data ? buf + 8 + n : NULL;
    out->data_len = data_len;
    out->n_tensors = nt;
    out->tensors = ts;
    out->file_order = file_order;
    out->n_metadata = nmeta;
    return QC_OK;
}

qc_status qc_st_parse(const uint8_t *buf, size_t file_len, const char *path, qc_st_file *out,
                      qc_err *err) {
    return parse_impl(buf, file_len, 1, path, out, err);
}

/* ==== Files ==== */

/* Parse our mapping of the file; on success `out` owns it, else it is unmapped. */
static qc_status parse_mapped(void *map, size_t len, const char *path, int lazy, qc_st_file *out,
                              qc_err *err) {
    qc_status st = qc_st_parse((const uint8_t *)map, len, path, out, err);
    if (st) {
        munmap(map, len);
        memset(out, 0, sizeof *out);
        return st;
    }
    out->map = map;
    out->map_len = len;
    out->lazy = lazy;
    return QC_OK;
}

/* The file mapped read-only and shared with the page cache (pages read on first touch, dropped
 * with madvise): the streamed model's weights (qc_model_load_streamed). */
static qc_status open_mapped(int fd, const char *path, size_t len, qc_st_file *out, qc_err *err) {
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED)
        return qc_errf(err, QC_ERR_IO, "%s: cannot map %zu bytes: %s", path, len, strerror(e));
    return parse_mapped(map, len, path, 1, out, err);
}

/* pread exactly `len` bytes at `off` (EINTR retried): 0, or the bytes missing (errno set, or
 * 0 when the file ended early) */
static size_t pread_all(int fd, uint8_t *dst, size_t len, uint64_t off) {
    size_t got = 0;
    while (got < len) {
        const size_t want = len - got > ((size_t)1 << 30) ? (size_t)1 << 30 : len - got;
        ssize_t r = pread(fd, dst + got, want, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = 0;
            return len - got;
        }
        got += (size_t)r;
    }
    return 0;
}

#define ST_ALIGN 64 /* every tensor of a read file starts at a multiple of this */

/* The file READ into anonymous memory (huge pages where the kernel grants them), not mapped:
 * decode streams every weight once per token, and from the page cache of an mmapped 3 GB
 * checkpoint it ran at 5.6 tok/s where the same bytes in anonymous memory ran at 8.8 (0.8B
 * F32, 1 thread, depth 512; `bench --model`); a file truncated by another process meanwhile can
 * no longer SIGBUS us either. The header is parsed first; then the header and every tensor, in
 * file order, are read each to a 64-byte boundary of the copy (a file's tensors follow each
 * other at any byte offset: a 512-bit load of a row must not split a cache line, see
 * qc_model_priv_weights). Read-only once filled. fd stays open (the caller closes it). */
static qc_status open_read(int fd, const char *path, size_t len, qc_st_file *out, qc_err *err) {
    uint8_t len8[8];
    if (pread_all(fd, len8, 8, 0)) return qc_errf(err, QC_ERR_IO, "%s: read error", path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | len8[i];
    /* a header length out of bounds: parse_header says so from the 8 bytes alone */
    const size_t hb = n <= (uint64_t)len - 8 && n <= QC_ST_MAX_HEADER ? (size_t)(8 + n) : 8;
    uint8_t *hdr = malloc(hb);
    if (!hdr) return qc_errf(err, QC_ERR_OOM, "%s: out of memory for the header", path);
    memcpy(hdr, len8, 8);
    if (hb > 8 && pread_all(fd, hdr + 8, hb - 8, 8)) {
        int e = errno;
        free(hdr);
        return qc_errf(err, QC_ERR_IO, "%s: read error in the header%s%s", path,
                       e ? ": " : " (the file shrank)", e ? strerror(e) : "");
    }
    qc_status st = parse_impl(hdr, len, 0, path, out, err);
    if (st) {
        free(hdr);
        return st;
    }
    /* the layout, stored once in each tensor's copy_off: the header, then each tensor (file
     * order, as parsed) at the next 64-byte boundary */
    const int nt = out->n_tensors;
    size_t total = hb;
    for (int k = 0; k < nt; k++) {
        qc_st_tensor *t = &out->tensors[out->file_order[k]];
        t->copy_off = (total + ST_ALIGN - 1) / ST_ALIGN * ST_ALIGN;
        total = (size_t)t->copy_off + (size_t)(t->end - t->begin);
    }
    void *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int e = errno;
    if (map == MAP_FAILED) {
        free(hdr);
        qc_st_close(out);
        return qc_errf(err, QC_ERR_OOM, "%s: cannot allocate %zu bytes: %s", path, total, strerror(e));
    }
    (void)madvise(map, total, MADV_HUGEPAGE);
    uint8_t *base = map;
    memcpy(base, hdr, hb);
    free(hdr);
    size_t missing = 0;
    uint64_t done = 0; /* data bytes read */
    for (int k = 0; k < nt && !missing; k++) {
        qc_st_tensor *t = &out->tensors[out->file_order[k]];
        missing = pread_all(fd, base + t->copy_off, (size_t)(t->end - t->begin), 8 + n + t->begin);
        t->data = base + t->copy_off;
        done += (t->end - t->begin) - missing;
    }
    if (missing) {
        e = errno;
        munmap(map, total);
        qc_st_close(out);
        return qc_errf(err, QC_ERR_IO, "%s: read error after %llu of %zu bytes%s%s", path,
                       (unsigned long long)(8 + n + done), len, e ? ": " : " (the file shrank)",
                       e ? strerror(e) : "");
    }
    (void)mprotect(map, total, PROT_READ);
    out->bytes = base;
    out->map = map;
    out->map_len = total;
    return QC_OK;
}

qc_status qc_st_hash_update(const qc_st_file *f, qc_sha256_ctx *hc) {
    qc_sha256_update(hc, f->bytes, (size_t)(8 + f->header_len));
    if (f->data) { /* one contiguous copy */
        qc_sha256_update(hc, f->data, (size_t)f->data_len);
        return QC_OK;
    }
    /* the tensors tile the data region (checked): their bytes in file order are the region,
     * each where open_read put it (copy_off; the loader may repoint a tensor's data at a
     * repacked buffer, Q8_0 pairs, so data is not read) */
    for (int k = 0; k < f->n_tensors; k++) {
        const qc_st_tensor *t = &f->tensors[f->file_order[k]];
        qc_sha256_update(hc, f->bytes + t->copy_off, (size_t)(t->end - t->begin));
    }
    return QC_OK;
}

static qc_status open_impl(const char *path, int lazy, qc_st_file *out, qc_err *err);

qc_status qc_st_open(const char *path, qc_st_file *out, qc_err *err) {
    return open_impl(path, 0, out, err);
}

qc_status qc_st_open_lazy(const char *path, qc_st_file *out, qc_err *err) {
    return open_impl(path, 1, out, err);
}

static qc_status open_impl(const char *path, int lazy, qc_st_file *out, qc_err *err) {
    QC_ASSERT(out && path);
    memset(out, 0, sizeof *out);
    /* O_NONBLOCK: a FIFO in place of a weights file must not hang the open (refused below) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return qc_errf(err, QC_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return qc_errf(err, QC_ERR_IO, "%s: not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    if (len < 8) {
        uint8_t small[8] = {0};
        ssize_t got = len ? read(fd, small, len) : 0;
        close(fd);
        if (got < 0 || (size_t)got != len)
            return qc_errf(err, QC_ERR_IO, "%s: read error", path);
        return qc_st_parse(small, len, path, out, err);
    }
    if (lazy) return open_mapped(fd, path, len, out, err);
    qc_status st = open_read(fd, path, len, out, err);
    close(fd);
    return st;
}

const qc_st_tensor *qc_st_find(const qc_st_file *f, const char *name) {
    int lo = 0, hi = f->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(f->tensors[mid].name, name);
        if (c == 0) return &f->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

void qc_st_close(qc_st_file *f) {
    if (!f) return;
    free_tensors(f->tensors, f->n_tensors);
    free(f->file_order);
    if (f->map) munmap(f->map, f->map_len);
    memset(f, 0, sizeof *f);
}
