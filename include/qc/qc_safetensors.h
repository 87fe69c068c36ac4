/* qc_safetensors.h — validating safetensors reader (header parse over the whole file bytes,
 * a file read into read-only anonymous memory).
 *
 * File layout: u64 little-endian header length N, N bytes of JSON header, data region.
 * The header is an object {name: {"dtype","shape","data_offsets":[begin,end]}, ...} plus an
 * optional "__metadata__" object of string values. Validation (each failure is one message
 * naming the file and the tensor / field):
 *   - file >= 8 bytes; 2 <= N <= QC_ST_MAX_HEADER and N <= file_len - 8      (QC_ERR_FORMAT)
 *   - header is well-formed JSON, an object; entries are objects             (QC_ERR_FORMAT)
 *   - dtype F32 / BF16 / F16; other safetensors dtypes -> QC_ERR_UNSUPPORTED;
 *     an unknown dtype string -> QC_ERR_FORMAT
 *   - shape: array of integers >= 0, at most QC_ST_MAX_DIMS; product and byte size
 *     without 64-bit overflow                                                (QC_ERR_FORMAT)
 *   - shape * itemsize == end - begin; 0 <= begin <= end <= data size        (QC_ERR_FORMAT)
 *   - the spans tile the data region exactly: no overlap, no gap, nothing
 *     after the last tensor; names unique                                    (QC_ERR_FORMAT)
 */
#ifndef QC_SAFETENSORS_H
#define QC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "qc/qc_model.h"
#include "qc/qc_sha256.h"
#include "qc/qc_status.h"

#define QC_ST_MAX_DIMS 8
#define QC_ST_MAX_HEADER ((uint64_t)100000000) /* 100 MB, as the reference implementation */

typedef struct {
    char *name;                      /* tensor name (owned, NUL-terminated) */
    qc_dtype dtype;                  /* storage type */
    int ndim;                        /* 0..QC_ST_MAX_DIMS (0 = scalar) */
    int64_t shape[QC_ST_MAX_DIMS];   /* [ndim] */
    uint64_t numel;                  /* product of shape (1 for a scalar) */
    uint64_t begin, end;             /* byte span relative to the data region (its offset in
                                        the file is 8 + header_len + begin) */
    uint64_t copy_off;               /* where the open put the bytes: offset in the file's
                                        `bytes` (8 + header_len + begin when parsed from a
                                        buffer or mapped; the 64-byte-aligned place in the copy
                                        of qc_st_open). Fixed at open: a loader may repoint
                                        `data` (Q8_0 pairs), never this */
    const uint8_t *data;             /* the tensor's bytes: 64-byte aligned in a file read by
                                        qc_st_open; file bytes + 8 + header_len + begin when
                                        parsed from a buffer or mapped (any alignment) */
} qc_st_tensor;

typedef struct {
    char path[1024];          /* file path as given (for messages) */
    const uint8_t *bytes;     /* the whole file (the caller's buffer, or the lazy mapping); a
                                 file read by qc_st_open: our read-only copy, the 8 + N header
                                 bytes then each tensor at a 64-byte boundary */
    size_t file_len;          /* bytes in the file */
    uint64_t header_len;      /* N */
    const uint8_t *data;      /* the data region when contiguous (buffer, lazy), else NULL */
    uint64_t data_len;        /* file_len - 8 - N */
    int n_tensors;            /* entries (metadata excluded) */
    qc_st_tensor *tensors;    /* [n_tensors], sorted by name */
    int *file_order;          /* [n_tensors] (owned): indices into tensors in file order
                                 (ascending begin; the spans tile the data region) */
    int n_metadata;           /* string entries in __metadata__ */
    void *map;                /* base of our copy (NULL when parsed from a caller buffer) */
    size_t map_len;           /* its length (munmap) */
    int lazy;                 /* 1: `map` is the file itself, mapped read-only (qc_st_open_lazy):
                                 data pages are read on first touch and may be dropped again */
} qc_st_file;

/* Parse and validate a whole safetensors file held in memory (buf[file_len]); `path` is used
 * in messages only. The tensor views point into buf, which must outlive `out`. On error `out`
 * is left empty (nothing to free, but qc_st_close is harmless). Never reads outside buf. */
qc_status qc_st_parse(const uint8_t *buf, size_t file_len, const char *path, qc_st_file *out,
                      qc_err *err);

/* open(O_RDONLY), the header parsed and checked as by qc_st_parse, then the header and every
 * tensor read into anonymous memory (then PROT_READ), each tensor at a 64-byte boundary. */
qc_status qc_st_open(const char *path, qc_st_file *out, qc_err *err);

/* The same checks, but the file is mapped read-only instead of read: nothing but the header is
 * read now; a tensor's bytes are read from the page cache when first touched (the streamed
 * model, qc_model_load_streamed, populates and drops them a layer at a time). */
qc_status qc_st_open_lazy(const char *path, qc_st_file *out, qc_err *err);

/* Feed the file's bytes, in file order, to hc (the same digest whichever way it was opened):
 * the 8 + N header bytes, then each tensor's bytes at its copy_off in file_order (the layout
 * the open stored; tensor data pointers are not read). QC_OK always (the status is kept for
 * callers; nothing is allocated). */
qc_status qc_st_hash_update(const qc_st_file *f, qc_sha256_ctx *hc);

/* Tensor by exact name (binary search), or NULL. */
const qc_st_tensor *qc_st_find(const qc_st_file *f, const char *name);

/* Free the tensor table and unmap (if mapped). Leaves *f zeroed. */
void qc_st_close(qc_st_file *f);

#endif /* QC_SAFETENSORS_H */
