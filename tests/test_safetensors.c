/* test_safetensors.c — safetensors header validation (every malformed class), scalar dtype
 * conversions against independently known bit patterns, and SHA-256 against the FIPS 180-2
 * test vectors. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qc/qc_model.h"
#include "qc/qc_safetensors.h"
#include "qc/qc_sha256.h"
#include "qc_testmodel.h"

/* ==== Buffers ==== */

/* u64le(len) + header + data_len bytes (value i & 0xff); len = strlen(header) unless override. */
static uint8_t *mkfile(const char *header, size_t data_len, int64_t len_override, size_t *total) {
    size_t hl = strlen(header);
    *total = 8 + hl + data_len;
    uint8_t *b = malloc(*total);
    uint64_t n = len_override >= 0 ? (uint64_t)len_override : hl;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
    memcpy(b + 8, header, hl);
    for (size_t i = 0; i < data_len; i++) b[8 + hl + i] = (uint8_t)i;
    return b;
}

static qc_status parse_hdr(const char *header, size_t data_len, int64_t len_override, qc_err *e) {
    size_t n;
    uint8_t *b = mkfile(header, data_len, len_override, &n);
    qc_st_file f;
    qc_err_clear(e);
    qc_status st = qc_st_parse(b, n, "d/x.safetensors", &f, e);
    if (st == QC_OK) qc_st_close(&f);
    free(b);
    return st;
}

#define EXPECT_ST(header, data_len, code, want)                                            \
    do {                                                                                   \
        qc_err e_;                                                                         \
        qc_status st_ = parse_hdr(header, data_len, -1, &e_);                              \
        ck_assert_msg(st_ == (code), "status %s != %s for %s (msg: %s)", qc_status_str(st_), \
                      qc_status_str(code), header, e_.msg);                                \
        ck_assert_msg(strstr(e_.msg, want) != NULL, "message \"%s\" lacks \"%s\"", e_.msg, \
                      want);                                                               \
    } while (0)

/* ==== Valid files ==== */

START_TEST(test_valid_header) {
    const char *h =
        "{\"__metadata__\":{\"format\":\"pt\",\"k\":\"v\"},"
        "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[8,32]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]},"
        "\"s\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[32,34]},"
        "\"z\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[34,34]}}   ";
    size_t n;
    uint8_t *buf = mkfile(h, 34, -1, &n);
    qc_st_file f;
    qc_err e;
    ck_assert_int_eq(qc_st_parse(buf, n, "d/x.safetensors", &f, &e), QC_OK);
    ck_assert_int_eq(f.n_tensors, 4);
    ck_assert_int_eq(f.n_metadata, 2);
    ck_assert_uint_eq(f.data_len, 34);
    const qc_st_tensor *w = qc_st_find(&f, "w");
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(w->dtype, QC_F32);
    ck_assert_int_eq(w->ndim, 2);
    ck_assert_int_eq(w->shape[0], 2);
    ck_assert_int_eq(w->shape[1], 3);
    ck_assert_uint_eq(w->numel, 6);
    ck_assert_ptr_eq(w->data, buf + 8 + strlen(h) + 8);
    const qc_st_tensor *s = qc_st_find(&f, "s");
    ck_assert_int_eq(s->ndim, 0);
    ck_assert_uint_eq(s->numel, 1);
    ck_assert_uint_eq(qc_st_find(&f, "z")->numel, 0);
    ck_assert_int_eq(qc_st_find(&f, "b")->dtype, QC_BF16);
    ck_assert_ptr_null(qc_st_find(&f, "nope"));
    qc_st_close(&f);
    free(buf);
    /* an empty checkpoint is well-formed */
    EXPECT_ST("{}", 0, QC_OK, "");
}
END_TEST

START_TEST(test_open_mmap) {
    char dir[512], path[600];
    qc_err e;
    ck_assert_int_eq(qc_testmodel_mkdtemp(dir, sizeof dir, "st", &e), QC_OK);
    float v[3] = {1.5f, -2.0f, 0.25f};
    qc_testmodel_tensor t = {"a.weight", QC_F32, 1, {3, 0, 0, 0}, v};
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    ck_assert_int_eq(qc_testmodel_write_safetensors(path, &t, 1, &e), QC_OK);
    qc_st_file f;
    ck_assert_int_eq(qc_st_open(path, &f, &e), QC_OK);
    ck_assert_ptr_nonnull(f.map);
    const qc_st_tensor *a = qc_st_find(&f, "a.weight");
    ck_assert_ptr_nonnull(a);
    float g[3];
    memcpy(g, a->data, sizeof g);
    ck_assert(g[0] == 1.5f && g[1] == -2.0f && g[2] == 0.25f);
    qc_st_close(&f);
    /* read-only file can be opened (O_RDONLY) */
    chmod(path, 0444);
    ck_assert_int_eq(qc_st_open(path, &f, &e), QC_OK);
    qc_st_close(&f);
    /* errors: missing file, a directory, an empty file, a 5-byte file */
    snprintf(path, sizeof path, "%s/none.safetensors", dir);
    ck_assert_int_eq(qc_st_open(path, &f, &e), QC_ERR_IO);
    ck_assert_ptr_nonnull(strstr(e.msg, "none.safetensors: cannot open"));
    ck_assert_int_eq(qc_st_open(dir, &f, &e), QC_ERR_IO);
    ck_assert_ptr_nonnull(strstr(e.msg, "not a regular file"));
    snprintf(path, sizeof path, "%s/empty.safetensors", dir);
    ck_assert_int_eq(qc_testmodel_write_file(path, "", 0, &e), QC_OK);
    ck_assert_int_eq(qc_st_open(path, &f, &e), QC_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "empty.safetensors: file is 0 bytes"));
    ck_assert_int_eq(qc_testmodel_write_file(path, "\x02\0\0\0\0", 5, &e), QC_OK);
    ck_assert_int_eq(qc_st_open(path, &f, &e), QC_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "file is 5 bytes"));
    qc_testmodel_rmtree(dir);
}
END_TEST

/* A file whose tensors sit at odd offsets (6, 20, 34 bytes): qc_st_open places each at a
 * 64-byte boundary with its bytes unchanged; the digest of qc_st_hash_update is the file's,
 * read or parsed from a buffer; a lying header length still fails before any allocation. */
/* The layout stored at open: file_order lists the tensors by data offset (here not the name
 * order: b, c, a), copy_off is where each tensor's bytes are (in the copy of qc_st_open: the
 * next 64-byte boundary after the previous tensor; in a parsed buffer: 8 + N + begin), and
 * qc_st_hash_update reads those places, not the data pointers: repointed data (the Q8_0
 * loader does it) leaves the digest the file's. */
START_TEST(test_file_order_and_copy_offsets) {
    char dir[512], path[600];
    qc_err e;
    ck_assert_int_eq(qc_testmodel_mkdtemp(dir, sizeof dir, "st", &e), QC_OK);
    const char *h = "{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[54,60]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[0,20]},"
                    "\"c\":{\"dtype\":\"F16\",\"shape\":[17],\"data_offsets\":[20,54]}}";
    size_t n;
    uint8_t *b = mkfile(h, 60, -1, &n);
    snprintf(path, sizeof path, "%s/order.safetensors", dir);
    ck_assert_int_eq(qc_testmodel_write_file(path, b, n, &e), QC_OK);
    qc_st_file f, g;
    ck_assert_int_eq(qc_st_open(path, &f, &e), QC_OK);
    ck_assert_int_eq(qc_st_parse(b, n, path, &g, &e), QC_OK);
    const uint64_t data0 = 8 + strlen(h);
    ck_assert_uint_ne(data0 % 64, 0);
    static const int want_order[3] = {1, 2, 0}; /* b [0,20), c [20,54), a [54,60) */
    uint64_t want_off = data0;                   /* the copy: header, then 64-byte steps */
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(f.file_order[k], want_order[k]);
        ck_assert_int_eq(g.file_order[k], want_order[k]);
        const qc_st_tensor *t = &f.tensors[f.file_order[k]];
        want_off = (want_off + 63) / 64 * 64;
        ck_assert_uint_eq(t->copy_off, want_off);
        ck_assert_ptr_eq(t->data, f.bytes + t->copy_off);
        want_off += t->end - t->begin;
        const qc_st_tensor *u = &g.tensors[g.file_order[k]];
        ck_assert_uint_eq(u->copy_off, data0 + u->begin);
    }
    ck_assert_uint_eq(f.map_len, want_off);
    uint8_t d1[32], d2[32];
    qc_sha256_ctx c;
    qc_sha256_init(&c);
    qc_sha256_update(&c, b, n);
    qc_sha256_final(&c, d1);
    static const uint8_t other[64] = {0xff};
    for (int i = 0; i < f.n_tensors; i++) f.tensors[i].data = other; /* repointed */
    qc_sha256_init(&c);
    ck_assert_int_eq(qc_st_hash_update(&f, &c), QC_OK);
    qc_sha256_final(&c, d2);
    ck_assert_int_eq(memcmp(d1, d2, 32), 0);
    qc_st_close(&f);
    ck_assert_ptr_null(f.file_order);
    qc_st_close(&g);
    free(b);
    qc_testmodel_rmtree(dir);
}
END_TEST

START_TEST(test_open_aligned) {
    char dir[512], path[600];
    qc_err e;
    ck_assert_int_eq(qc_testmodel_mkdtemp(dir, sizeof dir, "st", &e), QC_OK);
    const char *h = "{\"c\":{\"dtype\":\"F16\",\"shape\":[17],\"data_offsets\":[26,60]},"
                    "\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[6,26]}} ";
    size_t n;
    uint8_t *b = mkfile(h, 60, -1, &n);
    snprintf(path, sizeof path, "%s/odd.safetensors", dir);
    ck_assert_int_eq(qc_testmodel_write_file(path, b, n, &e), QC_OK);
    qc_st_file f, g;
    ck_assert_int_eq(qc_st_open(path, &f, &e), QC_OK);
    ck_assert_int_eq(qc_st_parse(b, n, path, &g, &e), QC_OK);
    const size_t data0 = 8 + strlen(h);
    ck_assert_uint_ne(data0 % 64, 0); /* the file itself is not aligned */
    for (int i = 0; i < f.n_tensors; i++) {
        const qc_st_tensor *t = &f.tensors[i];
        ck_assert_uint_eq((uintptr_t)t->data % 64, 0);
        ck_assert_int_eq(memcmp(t->data, b + data0 + t->begin, (size_t)(t->end - t->begin)), 0);
        ck_assert_ptr_eq(g.tensors[i].data, b + data0 + t->begin);
    }
    uint8_t d1[32], d2[32], d3[32];
    qc_sha256_ctx c;
    qc_sha256_init(&c);
    qc_sha256_update(&c, b, n);
    qc_sha256_final(&c, d1);
    qc_sha256_init(&c);
    ck_assert_int_eq(qc_st_hash_update(&f, &c), QC_OK);
    qc_sha256_final(&c, d2);
    qc_sha256_init(&c);
    ck_assert_int_eq(qc_st_hash_update(&g, &c), QC_OK);
    qc_sha256_final(&c, d3);
    ck_assert_int_eq(memcmp(d1, d2, 32), 0);
    ck_assert_int_eq(memcmp(d1, d3, 32), 0);
    qc_st_close(&f);
    qc_st_close(&g);
    free(b);
    /* a header length beyond the file: the message of qc_st_parse, from the 8 bytes alone */
    b = mkfile(h, 60, 1 << 20, &n);
    ck_assert_int_eq(qc_testmodel_write_file(path, b, n, &e), QC_OK);
    ck_assert_int_eq(qc_st_open(path, &f, &e), QC_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "exceeds the"));
    free(b);
    /* a data region shorter than the header says: tiling, before any tensor is read */
    b = mkfile(h, 50, -1, &n);
    ck_assert_int_eq(qc_testmodel_write_file(path, b, n, &e), QC_OK);
    ck_assert_int_eq(qc_st_open(path, &f, &e), QC_ERR_FORMAT);
    free(b);
    qc_testmodel_rmtree(dir);
}
END_TEST

/* ==== Malformed classes ==== */

START_TEST(test_truncated_and_length) {
    qc_st_file f;
    qc_err e;
    uint8_t small[7] = {2, 0, 0, 0, 0, 0, 0};
    ck_assert_int_eq(qc_st_parse(small, 7, "d/x.safetensors", &f, &e), QC_ERR_FORMAT);
    ck_assert_str_eq(e.msg, "d/x.safetensors: file is 7 bytes, shorter than the 8-byte header length");
    ck_assert_int_eq(qc_st_parse(NULL, 0, "d/x.safetensors", &f, &e), QC_ERR_FORMAT);
    /* header length beyond the file */
    ck_assert_int_eq(parse_hdr("{}", 0, 1000, &e), QC_ERR_FORMAT);
    ck_assert_str_eq(e.msg, "d/x.safetensors: header length 1000 exceeds the 2 bytes after the length field");
    ck_assert_int_eq(parse_hdr("{}", 0, INT64_MAX, &e), QC_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "header length 9223372036854775807 exceeds"));
    /* length 0 / 1: no room for an object */
    ck_assert_int_eq(parse_hdr("{}", 0, 0, &e), QC_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "header length 0 is too small"));
    /* a valid file truncated inside its data region: the span check catches it */
    const char *h = "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    size_t n;
    uint8_t *b = mkfile(h, 16, -1, &n);
    ck_assert_int_eq(qc_st_parse(b, n - 3, "d/x.safetensors", &f, &e), QC_ERR_FORMAT);
    ck_assert_str_eq(e.msg, "d/x.safetensors: t: data_offsets [0, 16] outside the 13-byte data region");
    free(b);
}
END_TEST

START_TEST(test_bad_json_and_types) {
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",", 0, QC_ERR_FORMAT,
              "d/x.safetensors: header is not well-formed JSON");
    EXPECT_ST("[1, 2, 3]", 0, QC_ERR_FORMAT, "d/x.safetensors: header is not a JSON object");
    EXPECT_ST("\"str\"", 0, QC_ERR_FORMAT, "header is not a JSON object");
    EXPECT_ST("{} trailing", 0, QC_ERR_FORMAT, "not well-formed JSON");
    EXPECT_ST("{\"t\":[1]}", 0, QC_ERR_FORMAT, "d/x.safetensors: t: header entry is not an object");
    EXPECT_ST("{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, QC_ERR_FORMAT,
              "d/x.safetensors: t: missing \"dtype\"");
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, QC_ERR_FORMAT,
              "d/x.safetensors: t: missing \"shape\"");
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, QC_ERR_FORMAT,
              "d/x.safetensors: t: missing \"data_offsets\"");
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4, QC_ERR_FORMAT,
              "t: shape is not an array");
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, QC_ERR_FORMAT,
              "t: shape[0] is not a non-negative integer");
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, QC_ERR_FORMAT,
              "t: data_offsets is not a [begin, end] pair");
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, QC_ERR_FORMAT,
              "t: data_offsets must be non-negative integers");
    EXPECT_ST("{\"__metadata__\":{\"format\":1}}", 0, QC_ERR_FORMAT,
              "d/x.safetensors: __metadata__.format: value is not a string");
    EXPECT_ST("{\"__metadata__\":[]}", 0, QC_ERR_FORMAT, "__metadata__: not an object");
    /* a NUL byte inside the header */
    size_t n;
    uint8_t *b = mkfile("{\"a\":1}", 0, -1, &n);
    b[10] = 0;
    qc_st_file f;
    qc_err e;
    ck_assert_int_eq(qc_st_parse(b, n, "d/x.safetensors", &f, &e), QC_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "NUL"));
    free(b);
}
END_TEST

START_TEST(test_dtypes) {
    EXPECT_ST("{\"t\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16,
              QC_ERR_UNSUPPORTED, "d/x.safetensors: t: dtype I64 is not supported");
    EXPECT_ST("{\"t\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16,
              QC_ERR_UNSUPPORTED, "d/x.safetensors: t: dtype F64 is not supported");
    EXPECT_ST("{\"t\":{\"dtype\":\"Q4_K\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16,
              QC_ERR_FORMAT, "d/x.safetensors: t: unknown dtype \"Q4_K\"");
    EXPECT_ST("{\"t\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,16]}}", 16, QC_ERR_FORMAT,
              "t: dtype is not a string");
}
END_TEST

START_TEST(test_shapes) {
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,0]}}", 0,
              QC_ERR_FORMAT, "d/x.safetensors: t: shape[1] is negative (-3)");
    /* 2^32 * 2^32 = 2^64 overflows the element count */
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}",
              0, QC_ERR_FORMAT, "d/x.safetensors: t: shape product overflows 64 bits at shape[1]");
    /* 2^62 elements fit, 2^62 * 4 bytes does not */
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,0]}}",
              0, QC_ERR_FORMAT, "d/x.safetensors: t: byte size (4611686018427387904 x 4) overflows");
    /* a dim beyond 2^53 cannot be held exactly by a JSON double */
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}",
              0, QC_ERR_FORMAT, "d/x.safetensors: t: shape[0] = 4611686018427387904 is too large");
    /* a zero dim after a huge one is fine (product 0) */
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[9007199254740992,0],\"data_offsets\":[0,0]}}", 0,
              QC_OK, "");
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
              QC_ERR_UNSUPPORTED, "t: 9 dimensions");
}
END_TEST

START_TEST(test_spans) {
    /* shape x itemsize != span */
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, QC_ERR_FORMAT,
              "d/x.safetensors: t: span of 4 bytes != 2 elements x 4 bytes (F32)");
    EXPECT_ST("{\"t\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, QC_ERR_FORMAT,
              "t: span of 8 bytes != 2 elements x 2 bytes (BF16)");
    /* outside the data region */
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, QC_ERR_FORMAT,
              "d/x.safetensors: t: data_offsets [0, 16] outside the 8-byte data region");
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", 8, QC_ERR_FORMAT,
              "t: data_offsets [4, 0] has begin > end");
    /* overlap */
    EXPECT_ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
              12, QC_ERR_FORMAT, "d/x.safetensors: b: data_offsets [4, 12] overlap tensor a");
    /* identical spans also overlap */
    EXPECT_ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
              8, QC_ERR_FORMAT, "overlap tensor a");
    /* gap between tensors, gap at the start, bytes after the last tensor */
    EXPECT_ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
              12, QC_ERR_FORMAT, "d/x.safetensors: b: gap of 4 bytes before data_offsets [8, 12]");
    EXPECT_ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, QC_ERR_FORMAT,
              "d/x.safetensors: a: gap of 4 bytes");
    EXPECT_ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 12, QC_ERR_FORMAT,
              "d/x.safetensors: a: 8 bytes after the last tensor are not covered");
    /* duplicate names */
    EXPECT_ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
              8, QC_ERR_FORMAT, "d/x.safetensors: a: duplicate tensor name");
}
END_TEST

/* Never crash: every truncation and many random byte mutations of a valid file. */
START_TEST(test_fuzz_no_crash) {
    const char *h =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]}}";
    size_t n;
    uint8_t *orig = mkfile(h, 32, -1, &n);
    uint8_t *b = malloc(n);
    qc_st_file f;
    qc_err e;
    int ok = 0;
    for (size_t len = 0; len <= n; len++) {
        memcpy(b, orig, n);
        if (qc_st_parse(b, len, "f", &f, &e) == QC_OK) ok++, qc_st_close(&f);
    }
    ck_assert_int_eq(ok, 1); /* only the whole file is valid */
    uint64_t s = 12345;
    static const char alphabet[] = "{}[]\":,-0123456789eE. FBI";
    for (int it = 0; it < 20000; it++) {
        memcpy(b, orig, n);
        int nmut = 1 + (int)(s % 4);
        for (int k = 0; k < nmut; k++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t pos = (size_t)(s >> 33) % n;
            b[pos] = (s & 1) ? (uint8_t)(s >> 20) : (uint8_t)alphabet[(s >> 24) % (sizeof alphabet - 1)];
        }
        if (qc_st_parse(b, n, "f", &f, &e) == QC_OK) {
            /* accepted: every view must lie inside the buffer */
            for (int i = 0; i < f.n_tensors; i++) {
                const qc_st_tensor *t = &f.tensors[i];
                ck_assert(t->data >= b + 8 && t->data + (t->end - t->begin) <= b + n);
            }
            qc_st_close(&f);
        } else {
            ck_assert(e.msg[0] != '\0');
        }
    }
    free(b);
    free(orig);
}
END_TEST

/* ==== dtype conversions ==== */

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

START_TEST(test_bf16) {
    ck_assert(qc_bf16_to_f32(0x3F80) == 1.0f);
    ck_assert(qc_bf16_to_f32(0xC000) == -2.0f);
    ck_assert(qc_bf16_to_f32(0x3E80) == 0.25f);
    ck_assert(qc_bf16_to_f32(0x0001) == ldexpf(1.0f, -133)); /* smallest bf16 subnormal */
    ck_assert(isinf(qc_bf16_to_f32(0x7F80)) && qc_bf16_to_f32(0x7F80) > 0);
    ck_assert(isinf(qc_bf16_to_f32(0xFF80)) && qc_bf16_to_f32(0xFF80) < 0);
    ck_assert(isnan(qc_bf16_to_f32(0x7FC0)));
    ck_assert_uint_eq(qc_f32_to_bf16(1.0f), 0x3F80);
    ck_assert_uint_eq(qc_f32_to_bf16(-2.0f), 0xC000);
    /* ties to even: 1 + 2^-8 sits halfway between 0x3F80 and 0x3F81 -> 0x3F80 */
    ck_assert_uint_eq(qc_f32_to_bf16(bitsf(0x3F808000)), 0x3F80);
    /* halfway between 0x3F81 and 0x3F82 -> 0x3F82 (even) */
    ck_assert_uint_eq(qc_f32_to_bf16(bitsf(0x3F818000)), 0x3F82);
    ck_assert_uint_eq(qc_f32_to_bf16(bitsf(0x3F808001)), 0x3F81); /* above half */
    ck_assert_uint_eq(qc_f32_to_bf16(bitsf(0x3F807FFF)), 0x3F80); /* below half */
    ck_assert_uint_eq(qc_f32_to_bf16(bitsf(0x7F7FFFFF)), 0x7F80); /* FLT_MAX rounds to Inf */
    ck_assert_uint_eq(qc_f32_to_bf16(INFINITY), 0x7F80);
    ck_assert_uint_eq(qc_f32_to_bf16(-0.0f), 0x8000);
    /* a NaN whose payload lives only in the low bits must stay NaN, not become Inf */
    uint16_t q = qc_f32_to_bf16(bitsf(0x7F800001));
    ck_assert((q & 0x7F80) == 0x7F80 && (q & 0x007F) != 0);
    /* every bf16 value survives the round trip */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = qc_bf16_to_f32((uint16_t)h);
        ck_assert_uint_eq(fbits(f), h << 16);
        if (!isnan(f)) ck_assert_uint_eq(qc_f32_to_bf16(f), h);
        else ck_assert(isnan(qc_bf16_to_f32(qc_f32_to_bf16(f))));
    }
}
END_TEST

START_TEST(test_f16) {
    ck_assert(qc_f16_to_f32(0x3C00) == 1.0f);
    ck_assert(qc_f16_to_f32(0xC000) == -2.0f);
    ck_assert(qc_f16_to_f32(0x7BFF) == 65504.0f);
    ck_assert(qc_f16_to_f32(0x0001) == ldexpf(1.0f, -24)); /* smallest subnormal */
    ck_assert(qc_f16_to_f32(0x03FF) == 1023.0f * ldexpf(1.0f, -24));
    ck_assert(qc_f16_to_f32(0x0400) == ldexpf(1.0f, -14));
    ck_assert(qc_f16_to_f32(0x3555) == 0.333251953125f); /* 0.25 * (1 + 0x155/1024) */
    ck_assert(isinf(qc_f16_to_f32(0x7C00)) && qc_f16_to_f32(0xFC00) < 0);
    ck_assert(isnan(qc_f16_to_f32(0x7E00)) && isnan(qc_f16_to_f32(0x7C01)));
    ck_assert(signbit(qc_f16_to_f32(0x8000)) && qc_f16_to_f32(0x8000) == 0.0f);
    ck_assert_uint_eq(qc_f32_to_f16(1.0f), 0x3C00);
    ck_assert_uint_eq(qc_f32_to_f16(65504.0f), 0x7BFF);
    ck_assert_uint_eq(qc_f32_to_f16(65519.99f), 0x7BFF);
    ck_assert_uint_eq(qc_f32_to_f16(65520.0f), 0x7C00); /* tie, 0x7BFF odd -> Inf */
    ck_assert_uint_eq(qc_f32_to_f16(1e6f), 0x7C00);
    ck_assert_uint_eq(qc_f32_to_f16(-INFINITY), 0xFC00);
    ck_assert_uint_eq(qc_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    ck_assert_uint_eq(qc_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);        /* tie -> even 0 */
    ck_assert_uint_eq(qc_f32_to_f16(ldexpf(1.5f, -25)), 0x0001);        /* above half */
    ck_assert_uint_eq(qc_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);        /* 1.5 ulp: tie -> 2 */
    ck_assert_uint_eq(qc_f32_to_f16(ldexpf(5.0f, -25)), 0x0002);        /* 2.5 ulp: tie -> 2 */
    ck_assert_uint_eq(qc_f32_to_f16(ldexpf(1023.5f, -24)), 0x0400);     /* rounds up to normal */
    ck_assert_uint_eq(qc_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3C00); /* tie -> even */
    ck_assert_uint_eq(qc_f32_to_f16(1.0f + ldexpf(3.0f, -11)), 0x3C02); /* tie -> even */
    ck_assert_uint_eq(qc_f32_to_f16(1.0f + ldexpf(1.0f, -11) + ldexpf(1.0f, -20)), 0x3C01);
    ck_assert_uint_eq(qc_f32_to_f16(-0.0f), 0x8000);
    ck_assert_uint_eq(qc_f32_to_f16(1e-10f), 0x0000);
    ck_assert_uint_eq(qc_f32_to_f16(bitsf(0x00000001)), 0x0000); /* f32 subnormal */
    uint16_t q = qc_f32_to_f16(NAN);
    ck_assert((q & 0x7C00) == 0x7C00 && (q & 0x03FF) != 0);
    ck_assert(isnan(qc_f16_to_f32(qc_f32_to_f16(bitsf(0x7F800001)))));
    /* exhaustive: decode against an independent ldexp formula, and round trip */
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t e = (h >> 10) & 31, m = h & 1023;
        float f = qc_f16_to_f32((uint16_t)h);
        if (e == 31) {
            ck_assert(m ? isnan(f) : isinf(f));
            continue;
        }
        double want = e ? ldexp(1024.0 + m, (int)e - 25) : ldexp((double)m, -24);
        if (h & 0x8000) want = -want;
        ck_assert_msg((double)f == want, "f16 0x%04x -> %.9g != %.9g", h, f, want);
        ck_assert_uint_eq(qc_f32_to_f16(f), h);
    }
}
END_TEST

START_TEST(test_tensor_views) {
    ck_assert_str_eq(qc_dtype_str(QC_F32), "F32");
    ck_assert_str_eq(qc_dtype_str(QC_BF16), "BF16");
    ck_assert_str_eq(qc_dtype_str(QC_F16), "F16");
    ck_assert_uint_eq(qc_dtype_size(QC_F32), 4);
    ck_assert_uint_eq(qc_dtype_size(QC_BF16), 2);
    ck_assert_uint_eq(qc_dtype_size(QC_F16), 2);
    /* unaligned storage: data starts at an odd address */
    uint8_t raw[1 + 6 * 4];
    uint16_t bf[3] = {0x3F80, 0xC040, 0x0000}; /* 1, -3, 0 */
    memcpy(raw + 1, bf, sizeof bf);
    qc_tensor t = {QC_BF16, 2, {1, 3, 0, 0}, raw + 1};
    ck_assert_uint_eq(qc_tensor_numel(&t), 3);
    ck_assert(qc_tensor_get(&t, 1) == -3.0f);
    float out[3];
    qc_tensor_to_f32(&t, out);
    ck_assert(out[0] == 1.0f && out[1] == -3.0f && out[2] == 0.0f);
    uint16_t hf[2] = {0x3800, 0xB400}; /* 0.5, -0.25 */
    memcpy(raw + 1, hf, sizeof hf);
    qc_tensor th = {QC_F16, 1, {2, 0, 0, 0}, raw + 1};
    qc_tensor_to_f32(&th, out);
    ck_assert(out[0] == 0.5f && out[1] == -0.25f);
    float ff[2] = {3.5f, -7.0f};
    memcpy(raw + 1, ff, sizeof ff);
    qc_tensor tf = {QC_F32, 1, {2, 0, 0, 0}, raw + 1};
    ck_assert(qc_tensor_get(&tf, 1) == -7.0f);
    qc_tensor none = {QC_F32, 0, {0, 0, 0, 0}, NULL};
    ck_assert_uint_eq(qc_tensor_numel(&none), 0);
}
END_TEST

/* ==== SHA-256 (FIPS 180-2 appendix B vectors) ==== */

static void check_vectors(void) {
    char hex[65];
    qc_sha256_buf_hex("abc", 3, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    qc_sha256_buf_hex("", 0, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *v448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    ck_assert_uint_eq(strlen(v448), 56);
    qc_sha256_buf_hex(v448, 56, hex);
    ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* one million 'a', streamed in uneven pieces */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    qc_sha256_ctx c;
    uint8_t d[32];
    qc_sha256_init(&c);
    size_t pos = 0, step = 1;
    while (pos < 1000000) {
        size_t k = step < 1000000 - pos ? step : 1000000 - pos;
        qc_sha256_update(&c, a + pos, k);
        pos += k;
        step = step * 3 % 1031 + 1;
    }
    qc_sha256_final(&c, d);
    qc_sha256_to_hex(d, hex);
    ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);
}

START_TEST(test_sha256_vectors) {
    check_vectors(); /* accelerated path where the CPU has it */
    setenv("QC_SHA256_PORTABLE", "1", 1);
    ck_assert_int_eq(qc_sha256_accelerated(), 0);
    check_vectors(); /* portable C path */
    unsetenv("QC_SHA256_PORTABLE");
    if (!qc_sha256_accelerated()) printf("note: no SHA extensions here; portable path only\n");
}
END_TEST

START_TEST(test_sha256_file) {
    char dir[512], path[600], hex[65];
    qc_err e;
    ck_assert_int_eq(qc_testmodel_mkdtemp(dir, sizeof dir, "sha", &e), QC_OK);
    snprintf(path, sizeof path, "%s/f", dir);
    ck_assert_int_eq(qc_testmodel_write_file(path, "abc", 3, &e), QC_OK);
    ck_assert_int_eq(qc_sha256_file_hex(path, hex, &e), QC_OK);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    snprintf(path, sizeof path, "%s/none", dir);
    ck_assert_int_eq(qc_sha256_file_hex(path, hex, &e), QC_ERR_IO);
    ck_assert_ptr_nonnull(strstr(e.msg, "/none: cannot open"));
    qc_testmodel_rmtree(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("safetensors");
    TCase *p = tcase_create("parser");
    tcase_add_test(p, test_valid_header);
    tcase_add_test(p, test_open_mmap);
    tcase_add_test(p, test_open_aligned);
    tcase_add_test(p, test_file_order_and_copy_offsets);
    tcase_add_test(p, test_truncated_and_length);
    tcase_add_test(p, test_bad_json_and_types);
    tcase_add_test(p, test_dtypes);
    tcase_add_test(p, test_shapes);
    tcase_add_test(p, test_spans);
    tcase_add_test(p, test_fuzz_no_crash);
    suite_add_tcase(s, p);
    TCase *d = tcase_create("dtype");
    tcase_add_test(d, test_bf16);
    tcase_add_test(d, test_f16);
    tcase_add_test(d, test_tensor_views);
    suite_add_tcase(s, d);
    TCase *h = tcase_create("sha256");
    tcase_add_test(h, test_sha256_vectors);
    tcase_add_test(h, test_sha256_file);
    suite_add_tcase(s, h);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
