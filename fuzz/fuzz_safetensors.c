/* fuzz_safetensors.c — libFuzzer target for the safetensors header parser (qc_st_parse).
 *
 * Input: byte 0 selects how the rest becomes a file.
 *   even: raw mode — bytes 1.. are the whole file (8-byte length, header, data);
 *   odd:  assembled mode — bytes 1..2 are a little-endian data-region size D, bytes 3.. are the
 *         header text; the file is u64le(len(header)) + header + D bytes. This keeps the length
 *         field consistent so the fuzzer explores the JSON validation (offsets, shapes, dtypes,
 *         overlaps, gaps, duplicates) instead of failing at the length check.
 * Checks: no crash / leak / UB / read outside the file; errors name the file; on success every
 * documented invariant of qc_st_file holds and every tensor's bytes are readable.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "qc/qc_safetensors.h"

#define FZ_PATH "fuzz/model.safetensors"

static void check_success(const qc_st_file *f, const uint8_t *buf, size_t len) {
    FZ_REQUIRE(f->bytes == buf && f->file_len == len, "file view");
    FZ_REQUIRE(f->header_len >= 2 && f->header_len <= len - 8, "header_len %llu",
               (unsigned long long)f->header_len);
    FZ_REQUIRE(f->data == buf + 8 + f->header_len, "data pointer");
    FZ_REQUIRE(f->data_len == len - 8 - f->header_len, "data_len");
    FZ_REQUIRE(f->n_tensors >= 0 && f->n_metadata >= 0, "counts");
    uint64_t covered = 0;
    volatile uint8_t sink = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        const qc_st_tensor *t = &f->tensors[i];
        FZ_REQUIRE(t->name != NULL, "tensor %d has no name", i);
        if (i) FZ_REQUIRE(strcmp(f->tensors[i - 1].name, t->name) < 0, "names not sorted/unique");
        FZ_REQUIRE(qc_st_find(f, t->name) == t, "qc_st_find(%s)", t->name);
        FZ_REQUIRE(t->ndim >= 0 && t->ndim <= QC_ST_MAX_DIMS, "ndim %d", t->ndim);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            FZ_REQUIRE(t->shape[d] >= 0, "%s: negative dim", t->name);
            FZ_REQUIRE(!__builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel),
                       "%s: shape product overflows but was accepted", t->name);
        }
        FZ_REQUIRE(numel == t->numel, "%s: numel", t->name);
        FZ_REQUIRE(t->begin <= t->end && t->end <= f->data_len, "%s: span", t->name);
        FZ_REQUIRE(t->end - t->begin == t->numel * qc_dtype_size(t->dtype), "%s: bytes", t->name);
        FZ_REQUIRE(t->data == f->data + t->begin, "%s: data pointer", t->name);
        if (t->end > t->begin) sink ^= t->data[0] ^ t->data[t->end - t->begin - 1];
        covered += t->end - t->begin;
    }
    (void)sink;
    FZ_REQUIRE(covered == f->data_len, "spans cover %llu of %llu data bytes",
               (unsigned long long)covered, (unsigned long long)f->data_len);
    FZ_REQUIRE(qc_st_find(f, "\x01no such tensor") == NULL, "find of an absent name");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t *buf;
    size_t len;
    if ((data[0] & 1) == 0) {
        len = size - 1;
        buf = fz_copy(data + 1, len);
    } else {
        if (size < 3) return 0;
        size_t dlen = (size_t)data[1] | (size_t)data[2] << 8;
        size_t hlen = size - 3;
        len = 8 + hlen + dlen;
        buf = (uint8_t *)malloc(len);
        if (!buf) abort();
        for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
        memcpy(buf + 8, data + 3, hlen);
        for (size_t i = 0; i < dlen; i++) buf[8 + hlen + i] = (uint8_t)(i * 31u + 7u);
    }
    qc_st_file f;
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_st_parse(buf, len, FZ_PATH, &f, &err);
    fz_check_error(st, &err, FZ_PATH);
    if (st == QC_OK) check_success(&f, buf, len);
    else FZ_REQUIRE(f.tensors == NULL && f.n_tensors == 0, "error left tensors behind");
    qc_st_close(&f);
    free(buf);
    return 0;
}
