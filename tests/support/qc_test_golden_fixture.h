/* qc_test_golden_fixture.h — the golden I/O tests' shared fixture (test_golden_io.c,
 * test_golden_lazy.c): a tiny config, a golden of every field made in memory and written to a
 * per-process temporary directory, exact comparison, HDF5 handle accounting, raw HDF5 edits.
 * Header-only (static inline), one copy per test executable. */
#ifndef QC_TEST_GOLDEN_FIXTURE_H
#define QC_TEST_GOLDEN_FIXTURE_H
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "../harness/io/qc_golden.h"
#include "../harness/host/qc_runcase.h"
#include "qc/qc_state.h"

/* ===================================================================================== */
/* fixtures                                                                              */
/* ===================================================================================== */

/* A tiny flat config: V 16, H 8, L 3 (linear, full, linear), nh 2 x hd 4, nkv 1, nk 1 x dk 4,
 * nv 2 x dv 3, K 3 -> conv_dim 2*4 + 6 = 14. */
__attribute__((unused)) static const char *CONFIG_JSON =
    "{\"vocab_size\": 16, \"hidden_size\": 8, \"intermediate_size\": 12,"
    " \"num_hidden_layers\": 3, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
    " \"head_dim\": 4, \"linear_num_key_heads\": 1, \"linear_num_value_heads\": 2,"
    " \"linear_key_head_dim\": 4, \"linear_value_head_dim\": 3, \"linear_conv_kernel_dim\": 3,"
    " \"rms_norm_eps\": 1e-6, \"hidden_act\": \"silu\", \"tie_word_embeddings\": true,"
    " \"layer_types\": [\"linear_attention\", \"full_attention\", \"linear_attention\"],"
    " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0,"
    " \"partial_rotary_factor\": 0.5}}";

__attribute__((unused)) static char tmpdir_[256];

static inline void make_tmpdir(void) {
    snprintf(tmpdir_, sizeof tmpdir_, "%s/qc_golden_io_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir_));
}

static inline void rm_tmpdir(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir_);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmpdir_);
}

/* Deterministic values that differ in every element. */
static inline float val(int tag, size_t i) { return (float)sin(0.37 * (double)i + 1.3 * tag) * 3.0f; }

static inline float *farr(int tag, size_t n) {
    float *a = malloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = val(tag, i);
    return a;
}

static inline int32_t *iarr(int tag, int n, int V) {
    int32_t *a = malloc((size_t)n * sizeof *a);
    for (int i = 0; i < n; i++) a[i] = (int32_t)((i * 7 + tag * 3) % V);
    return a;
}

static inline void fill_state(const qc_config *cfg, qc_golden_state *gs, int n_pos, int tag) {
    int L = cfg->n_layers;
    gs->present = 1;
    gs->n_pos = n_pos;
    gs->k_cache = calloc((size_t)L, sizeof(float *));
    gs->v_cache = calloc((size_t)L, sizeof(float *));
    gs->conv_state = calloc((size_t)L, sizeof(float *));
    gs->recurrent_state = calloc((size_t)L, sizeof(float *));
    for (int l = 0; l < L; l++) {
        if (cfg->layer_types[l] == QC_LAYER_FULL) {
            size_t n = (size_t)cfg->n_kv_heads * n_pos * cfg->head_dim;
            gs->k_cache[l] = farr(tag * 10 + l, n);
            gs->v_cache[l] = farr(tag * 10 + l + 5, n);
        } else {
            gs->conv_state[l] = farr(tag * 10 + l, (size_t)qc_cfg_conv_dim(cfg) * cfg->conv_kernel);
            gs->recurrent_state[l] =
                farr(tag * 10 + l + 5,
                     (size_t)cfg->lin_n_v_heads * cfg->lin_k_dim * cfg->lin_v_dim);
        }
    }
}

/* Case "b_cont": start_pos 3 (history), T 4, S 2, all groups. Case "a_len5": T 5, no decode,
 * hidden present, max_seq_len 16. Written b first so that reading must sort. */
static inline qc_golden *make_golden(void) {
    qc_golden *g = calloc(1, sizeof *g);
    qc_err err;
    g->schema_version = 1;
    snprintf(g->generator, sizeof g->generator, "test_golden_io \xc3\xa9 (utf-8)");
    snprintf(g->torch_version, sizeof g->torch_version, "1.13.1");
    snprintf(g->compute_dtype, sizeof g->compute_dtype, "float64");
    g->seed = 1234567890123LL;
    snprintf(g->model_path, sizeof g->model_path, "model");
    snprintf(g->config_sha256, sizeof g->config_sha256, "%064d", 1);
    snprintf(g->weights_sha256, sizeof g->weights_sha256, "abcdef%058d", 7);
    g->config_json = strdup(CONFIG_JSON);
    ck_assert_int_eq(qc_config_parse(CONFIG_JSON, strlen(CONFIG_JSON), "cfg", &g->cfg, &err), QC_OK);
    const qc_config *c = &g->cfg;
    const int V = c->vocab_size, L = c->n_layers, H = c->hidden_size;
    g->n_cases = 2;
    g->cases = calloc(2, sizeof *g->cases);

    qc_golden_case *b = &g->cases[0];
    snprintf(b->name, sizeof b->name, "b_cont");
    snprintf(b->description, sizeof b->description, "continuation");
    b->start_pos = 3;
    b->n_history = 3;
    b->history = iarr(1, 3, V);
    b->n_tokens = 4;
    b->tokens = iarr(2, 4, V);
    b->prefill_logits = farr(3, (size_t)4 * V);
    b->prefill_hidden = farr(4, (size_t)(L + 1) * 4 * H);
    fill_state(c, &b->prefill_state, 3 + 4, 5);
    b->n_decode = 2;
    b->decode_tokens = iarr(6, 2, V);
    b->decode_logits = farr(7, (size_t)2 * V);
    b->decode_margins = farr(8, 2);
    fill_state(c, &b->decode_state, 3 + 4 + 2, 9);

    qc_golden_case *a = &g->cases[1];
    snprintf(a->name, sizeof a->name, "a_len5");
    a->max_seq_len = 16;
    a->n_tokens = 5;
    a->tokens = iarr(11, 5, V);
    a->prefill_logits = farr(12, (size_t)5 * V);
    a->prefill_hidden = farr(13, (size_t)(L + 1) * 5 * H);
    fill_state(c, &a->prefill_state, 5, 14);
    return g;
}

static inline void free_made(qc_golden *g) {
    for (int i = 0; i < g->n_cases; i++) qc_case_free(&g->cfg, &g->cases[i]);
    free(g->cases);
    free(g->config_json);
    free(g);
}

static inline void assert_no_open_handles(void) {
    ck_assert_int_eq((int)H5Fget_obj_count((hid_t)H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
}

#define ASSERT_FARR_EQ(a, b, n)                                                     \
    do {                                                                            \
        ck_assert_ptr_nonnull(a);                                                   \
        ck_assert_ptr_nonnull(b);                                                   \
        ck_assert_int_eq(memcmp((a), (b), (size_t)(n) * sizeof(float)), 0);         \
    } while (0)
#define ASSERT_IARR_EQ(a, b, n)                                                     \
    do {                                                                            \
        ck_assert_ptr_nonnull(a);                                                   \
        ck_assert_ptr_nonnull(b);                                                   \
        ck_assert_int_eq(memcmp((a), (b), (size_t)(n) * sizeof(int32_t)), 0);       \
    } while (0)

static inline void assert_state_eq(const qc_config *c, const qc_golden_state *x,
                            const qc_golden_state *y) {
    ck_assert_int_eq(x->present, y->present);
    if (!x->present) return;
    ck_assert_int_eq(x->n_pos, y->n_pos);
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_types[l] == QC_LAYER_FULL) {
            size_t n = (size_t)c->n_kv_heads * x->n_pos * c->head_dim;
            ASSERT_FARR_EQ(x->k_cache[l], y->k_cache[l], n);
            ASSERT_FARR_EQ(x->v_cache[l], y->v_cache[l], n);
            ck_assert_ptr_null(y->conv_state[l]);
        } else {
            ASSERT_FARR_EQ(x->conv_state[l], y->conv_state[l],
                           (size_t)qc_cfg_conv_dim(c) * c->conv_kernel);
            ASSERT_FARR_EQ(x->recurrent_state[l], y->recurrent_state[l],
                           (size_t)c->lin_n_v_heads * c->lin_k_dim * c->lin_v_dim);
            ck_assert_ptr_null(y->k_cache[l]);
        }
    }
}

static inline void assert_case_eq(const qc_config *c, const qc_golden_case *x, const qc_golden_case *y) {
    const int V = c->vocab_size, L = c->n_layers, H = c->hidden_size;
    ck_assert_str_eq(x->name, y->name);
    ck_assert_str_eq(x->description, y->description);
    ck_assert_int_eq(x->start_pos, y->start_pos);
    ck_assert_int_eq(x->max_seq_len, y->max_seq_len);
    ck_assert_int_eq(x->n_history, y->n_history);
    if (x->n_history) ASSERT_IARR_EQ(x->history, y->history, x->n_history);
    ck_assert_int_eq(x->n_tokens, y->n_tokens);
    ASSERT_IARR_EQ(x->tokens, y->tokens, x->n_tokens);
    ASSERT_FARR_EQ(x->prefill_logits, y->prefill_logits, (size_t)x->n_tokens * V);
    if (x->prefill_hidden)
        ASSERT_FARR_EQ(x->prefill_hidden, y->prefill_hidden, (size_t)(L + 1) * x->n_tokens * H);
    else
        ck_assert_ptr_null(y->prefill_hidden);
    assert_state_eq(c, &x->prefill_state, &y->prefill_state);
    ck_assert_int_eq(x->n_decode, y->n_decode);
    if (x->n_decode) {
        ASSERT_IARR_EQ(x->decode_tokens, y->decode_tokens, x->n_decode);
        ASSERT_FARR_EQ(x->decode_logits, y->decode_logits, (size_t)x->n_decode * V);
        ASSERT_FARR_EQ(x->decode_margins, y->decode_margins, x->n_decode);
    }
    assert_state_eq(c, &x->decode_state, &y->decode_state);
}

/* Write the standard golden to tmpdir/name and return its path (static buffer). */
static inline const char *write_std(const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir_, name);
    qc_golden *g = make_golden();
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_golden_write(path, g, &err);
    ck_assert_msg(st == QC_OK, "write: %s", err.msg);
    free_made(g);
    assert_no_open_handles();
    return path;
}

/* Open expecting failure with code `code` and a message containing the path and `needle`. */
static inline void expect_reject(const char *path, qc_status code, const char *needle) {
    qc_golden *g = (qc_golden *)0x1;
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_golden_open(path, &g, &err);
    ck_assert_msg(st == code, "expected %s, got %s: %s", qc_status_str(code), qc_status_str(st),
                  err.msg);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(err.msg, path) != NULL, "message does not name the file: %s", err.msg);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "message lacks '%s': %s", needle, err.msg);
    assert_no_open_handles();
}

/* Open a written file read-write for tampering. */
static inline hid_t open_rw(const char *path) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert_int_ge(f, 0);
    return f;
}

static inline void close_rw(hid_t f) {
    ck_assert_int_eq((int)H5Fget_obj_count(f, H5F_OBJ_ALL), 1);
    ck_assert_int_ge(H5Fclose(f), 0);
}

static inline void replace_float_dataset(hid_t f, const char *path, int rank, const hsize_t *dims) {
    ck_assert_int_ge(H5Ldelete(f, path, H5P_DEFAULT), 0);
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(f, path, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert_int_ge(d, 0);
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= dims[i];
    float *z = calloc(n, sizeof *z);
    ck_assert_int_ge(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, z), 0);
    free(z);
    H5Dclose(d);
    H5Sclose(sp);
}

#endif
