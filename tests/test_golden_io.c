/* test_golden_io.c — golden HDF5 I/O: write -> open round trip (every field, exact), the
 * reader's rejections (each message naming the file and the dataset / attribute), h5py
 * interop (a golden written by /usr/bin/python3 + h5py opens), qc_golden_find (symlinks:
 * loops and duplicates skipped) and qc_golden_state_from, lazy cases (open_lazy / load_case /
 * unload_case), goldens declaring huge shapes refused fast, and no HDF5 handle left open
 * after any call. */
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

#include "../harness/qc_golden.h"
#include "../harness/qc_runcase.h"
#include "qc/qc_state.h"

/* ===================================================================================== */
/* fixtures                                                                              */
/* ===================================================================================== */

/* A tiny flat config: V 16, H 8, L 3 (linear, full, linear), nh 2 x hd 4, nkv 1, nk 1 x dk 4,
 * nv 2 x dv 3, K 3 -> conv_dim 2*4 + 6 = 14. */
static const char *CONFIG_JSON =
    "{\"vocab_size\": 16, \"hidden_size\": 8, \"intermediate_size\": 12,"
    " \"num_hidden_layers\": 3, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
    " \"head_dim\": 4, \"linear_num_key_heads\": 1, \"linear_num_value_heads\": 2,"
    " \"linear_key_head_dim\": 4, \"linear_value_head_dim\": 3, \"linear_conv_kernel_dim\": 3,"
    " \"rms_norm_eps\": 1e-6, \"hidden_act\": \"silu\", \"tie_word_embeddings\": true,"
    " \"layer_types\": [\"linear_attention\", \"full_attention\", \"linear_attention\"],"
    " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0,"
    " \"partial_rotary_factor\": 0.5}}";

static char tmpdir_[256];

static void make_tmpdir(void) {
    snprintf(tmpdir_, sizeof tmpdir_, "%s/qc_golden_io_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir_));
}

static void rm_tmpdir(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir_);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmpdir_);
}

/* Deterministic values that differ in every element. */
static float val(int tag, size_t i) { return (float)sin(0.37 * (double)i + 1.3 * tag) * 3.0f; }

static float *farr(int tag, size_t n) {
    float *a = malloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = val(tag, i);
    return a;
}

static int32_t *iarr(int tag, int n, int V) {
    int32_t *a = malloc((size_t)n * sizeof *a);
    for (int i = 0; i < n; i++) a[i] = (int32_t)((i * 7 + tag * 3) % V);
    return a;
}

static void fill_state(const qc_config *cfg, qc_golden_state *gs, int n_pos, int tag) {
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
static qc_golden *make_golden(void) {
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

static void free_made(qc_golden *g) {
    for (int i = 0; i < g->n_cases; i++) qc_case_free(&g->cfg, &g->cases[i]);
    free(g->cases);
    free(g->config_json);
    free(g);
}

static void assert_no_open_handles(void) {
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

static void assert_state_eq(const qc_config *c, const qc_golden_state *x,
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

static void assert_case_eq(const qc_config *c, const qc_golden_case *x, const qc_golden_case *y) {
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
static const char *write_std(const char *name) {
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
static void expect_reject(const char *path, qc_status code, const char *needle) {
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
static hid_t open_rw(const char *path) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert_int_ge(f, 0);
    return f;
}

static void close_rw(hid_t f) {
    ck_assert_int_eq((int)H5Fget_obj_count(f, H5F_OBJ_ALL), 1);
    ck_assert_int_ge(H5Fclose(f), 0);
}

static void replace_float_dataset(hid_t f, const char *path, int rank, const hsize_t *dims) {
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

/* ===================================================================================== */
/* round trip                                                                            */
/* ===================================================================================== */

START_TEST(test_roundtrip_exact) {
    make_tmpdir();
    const char *path = write_std("g.h5");
    qc_golden *want = make_golden();
    qc_golden *g = NULL;
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_golden_open(path, &g, &err);
    ck_assert_msg(st == QC_OK, "open: %s", err.msg);
    assert_no_open_handles();
    ck_assert_str_eq(g->path, path);
    ck_assert_int_eq(g->schema_version, 1);
    ck_assert_str_eq(g->generator, want->generator);
    ck_assert_str_eq(g->torch_version, want->torch_version);
    ck_assert_str_eq(g->compute_dtype, want->compute_dtype);
    ck_assert(g->seed == want->seed);
    ck_assert_str_eq(g->model_path, "model");
    char md[600];
    snprintf(md, sizeof md, "%s/model", tmpdir_);
    ck_assert_str_eq(g->model_dir, md);
    ck_assert_str_eq(g->config_sha256, want->config_sha256);
    ck_assert_str_eq(g->weights_sha256, want->weights_sha256);
    ck_assert_str_eq(g->config_json, CONFIG_JSON);
    ck_assert_int_eq(memcmp(&g->cfg, &want->cfg, sizeof g->cfg), 0);
    ck_assert_int_eq(g->n_cases, 2);
    /* sorted by name: a_len5 (made second) first */
    assert_case_eq(&g->cfg, &want->cases[1], &g->cases[0]);
    assert_case_eq(&g->cfg, &want->cases[0], &g->cases[1]);
    qc_golden_free(g);
    free_made(want);
    rm_tmpdir();
}
END_TEST

/* Without prefill/hidden, without any state, S = 0: the reader reports absence. */
START_TEST(test_roundtrip_minimal) {
    make_tmpdir();
    qc_golden *want = make_golden();
    qc_case_free(&want->cfg, &want->cases[0]);
    want->n_cases = 1;
    qc_golden_case *a = &want->cases[1];
    free(a->prefill_hidden);
    a->prefill_hidden = NULL;
    qc_golden_state_free(&want->cfg, &a->prefill_state);
    want->cases[0] = *a;
    memset(a, 0, sizeof *a);
    char path[512];
    snprintf(path, sizeof path, "%s/min.h5", tmpdir_);
    qc_err err;
    qc_err_clear(&err);
    ck_assert_msg(qc_golden_write(path, want, &err) == QC_OK, "%s", err.msg);
    qc_golden *g = NULL;
    ck_assert_msg(qc_golden_open(path, &g, &err) == QC_OK, "%s", err.msg);
    ck_assert_int_eq(g->n_cases, 1);
    ck_assert_ptr_null(g->cases[0].prefill_hidden);
    ck_assert_int_eq(g->cases[0].prefill_state.present, 0);
    ck_assert_int_eq(g->cases[0].decode_state.present, 0);
    ck_assert_int_eq(g->cases[0].n_decode, 0);
    assert_case_eq(&g->cfg, &want->cases[0], &g->cases[0]);
    qc_golden_free(g);
    free_made(want);
    assert_no_open_handles();
    rm_tmpdir();
}
END_TEST

/* Absolute model_path stays absolute; the dataset types on disk are float32 / int32 and the
 * string attributes variable-length UTF-8 (the contract). */
START_TEST(test_written_types) {
    make_tmpdir();
    const char *path = write_std("t.h5");
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert_int_ge(f, 0);
    hid_t d = H5Dopen2(f, "/cases/a_len5/prefill/logits", H5P_DEFAULT);
    hid_t t = H5Dget_type(d);
    ck_assert(H5Tequal(t, H5T_IEEE_F32LE) > 0);
    H5Tclose(t);
    H5Dclose(d);
    d = H5Dopen2(f, "/cases/b_cont/decode/tokens", H5P_DEFAULT);
    t = H5Dget_type(d);
    ck_assert(H5Tequal(t, H5T_STD_I32LE) > 0);
    H5Tclose(t);
    H5Dclose(d);
    hid_t a = H5Aopen(f, "config_json", H5P_DEFAULT);
    t = H5Aget_type(a);
    ck_assert_int_eq(H5Tis_variable_str(t), 1);
    ck_assert_int_eq(H5Tget_cset(t), H5T_CSET_UTF8);
    hid_t s = H5Aget_space(a);
    ck_assert_int_eq(H5Sget_simple_extent_type(s), H5S_SCALAR);
    H5Sclose(s);
    H5Tclose(t);
    H5Aclose(a);
    a = H5Aopen(f, "schema_version", H5P_DEFAULT);
    t = H5Aget_type(a);
    ck_assert(H5Tequal(t, H5T_STD_I32LE) > 0);
    H5Tclose(t);
    H5Aclose(a);
    a = H5Aopen(f, "seed", H5P_DEFAULT);
    t = H5Aget_type(a);
    ck_assert(H5Tequal(t, H5T_STD_I64LE) > 0);
    H5Tclose(t);
    H5Aclose(a);
    ck_assert_int_eq((int)H5Fget_obj_count(f, H5F_OBJ_ALL), 1);
    H5Fclose(f);

    /* absolute model path */
    qc_golden *g = make_golden();
    snprintf(g->model_path, sizeof g->model_path, "/opt/models/qwen");
    char p2[512];
    snprintf(p2, sizeof p2, "%s/abs.h5", tmpdir_);
    qc_err err;
    qc_err_clear(&err);
    ck_assert_int_eq(qc_golden_write(p2, g, &err), QC_OK);
    free_made(g);
    ck_assert_int_eq(qc_golden_open(p2, &g, &err), QC_OK);
    ck_assert_str_eq(g->model_dir, "/opt/models/qwen");
    qc_golden_free(g);
    assert_no_open_handles();
    rm_tmpdir();
}
END_TEST

/* A failed write leaves neither the target nor a temp file. */
START_TEST(test_write_failure_leaves_nothing) {
    make_tmpdir();
    qc_golden *g = make_golden();
    char path[512];
    snprintf(path, sizeof path, "%s/bad.h5", tmpdir_);
    /* the second case's logits missing -> error in the middle of the write */
    free(g->cases[1].prefill_logits);
    g->cases[1].prefill_logits = NULL;
    qc_err err;
    qc_err_clear(&err);
    ck_assert_int_ne(qc_golden_write(path, g, &err), QC_OK);
    ck_assert_msg(strstr(err.msg, "/cases/a_len5") != NULL, "%s", err.msg);
    ck_assert_int_ne(access(path, F_OK), 0);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", tmpdir_);
    ck_assert_msg(system(cmd) == 0, "temp file left in %s", tmpdir_);
    /* unwritable directory */
    snprintf(path, sizeof path, "%s/no/such/dir/x.h5", tmpdir_);
    g->cases[1].prefill_logits = farr(12, (size_t)5 * g->cfg.vocab_size);
    qc_err_clear(&err);
    ck_assert_int_eq(qc_golden_write(path, g, &err), QC_ERR_IO);
    ck_assert_msg(strstr(err.msg, path) != NULL, "%s", err.msg);
    free_made(g);
    assert_no_open_handles();
    rm_tmpdir();
}
END_TEST

/* ===================================================================================== */
/* rejections                                                                            */
/* ===================================================================================== */

START_TEST(test_reject_missing_dataset) {
    make_tmpdir();
    const char *path = write_std("m.h5");
    hid_t f = open_rw(path);
    ck_assert_int_ge(H5Ldelete(f, "/cases/b_cont/prefill/state/layer_01/v_cache", H5P_DEFAULT), 0);
    close_rw(f);
    expect_reject(path, QC_ERR_MISSING, "/cases/b_cont/prefill/state/layer_01/v_cache: missing");
    f = open_rw(path);
    ck_assert_int_ge(H5Ldelete(f, "/cases/a_len5/prefill/logits", H5P_DEFAULT), 0);
    close_rw(f);
    expect_reject(path, QC_ERR_MISSING, "/cases/a_len5/prefill/logits: missing");
    rm_tmpdir();
}
END_TEST

START_TEST(test_reject_wrong_shape) {
    make_tmpdir();
    const char *path = write_std("s.h5");
    hid_t f = open_rw(path);
    hsize_t dims[2] = {5, 17}; /* V is 16 */
    replace_float_dataset(f, "/cases/a_len5/prefill/logits", 2, dims);
    close_rw(f);
    expect_reject(path, QC_ERR_SHAPE, "/cases/a_len5/prefill/logits: shape [5,17] != [5,16]");
    /* a cache trimmed to the wrong number of positions: start_pos + T = 7 */
    path = write_std("s2.h5");
    f = open_rw(path);
    hsize_t kv[3] = {1, 8, 4};
    replace_float_dataset(f, "/cases/b_cont/prefill/state/layer_01/k_cache", 3, kv);
    close_rw(f);
    expect_reject(path, QC_ERR_SHAPE, "layer_01/k_cache: shape [1,8,4] != [1,7,4]");
    /* wrong rank of hidden: [L+1, T, H] expected */
    path = write_std("s3.h5");
    f = open_rw(path);
    hsize_t hd[2] = {4, 8};
    replace_float_dataset(f, "/cases/b_cont/prefill/hidden", 2, hd);
    close_rw(f);
    expect_reject(path, QC_ERR_SHAPE, "/cases/b_cont/prefill/hidden: shape [4,8] != [4,4,8]");
    rm_tmpdir();
}
END_TEST

START_TEST(test_reject_nan_inf) {
    make_tmpdir();
    const char *path = write_std("n.h5");
    hid_t f = open_rw(path);
    hid_t d = H5Dopen2(f, "/cases/a_len5/prefill/logits", H5P_DEFAULT);
    float buf[5 * 16];
    ck_assert_int_ge(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), 0);
    buf[3 * 16 + 7] = NAN;
    ck_assert_int_ge(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), 0);
    H5Dclose(d);
    close_rw(f);
    expect_reject(path, QC_ERR_FORMAT, "/cases/a_len5/prefill/logits: NaN at [3,7]");

    path = write_std("n2.h5");
    f = open_rw(path);
    d = H5Dopen2(f, "/cases/b_cont/decode/state/layer_02/recurrent_state", H5P_DEFAULT);
    float rs[2 * 4 * 3];
    ck_assert_int_ge(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, rs), 0);
    rs[1 * 12 + 2 * 3 + 1] = -INFINITY;
    ck_assert_int_ge(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, rs), 0);
    H5Dclose(d);
    close_rw(f);
    expect_reject(path, QC_ERR_FORMAT, "layer_02/recurrent_state: -Inf at [1,2,1]");
    rm_tmpdir();
}
END_TEST

START_TEST(test_reject_attributes) {
    make_tmpdir();
    /* wrong schema version */
    const char *path = write_std("v.h5");
    hid_t f = open_rw(path);
    ck_assert_int_ge(H5Adelete(f, "schema_version"), 0);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "schema_version", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    int two = 2;
    H5Awrite(a, H5T_NATIVE_INT, &two);
    H5Aclose(a);
    H5Sclose(sp);
    close_rw(f);
    expect_reject(path, QC_ERR_FORMAT, "/schema_version: 2 is not supported");

    /* missing root attribute */
    path = write_std("a.h5");
    f = open_rw(path);
    ck_assert_int_ge(H5Adelete(f, "config_sha256"), 0);
    close_rw(f);
    expect_reject(path, QC_ERR_MISSING, "/config_sha256: missing attribute");

    /* missing case attribute */
    path = write_std("a2.h5");
    f = open_rw(path);
    ck_assert_int_ge(H5Adelete_by_name(f, "/cases/b_cont", "start_pos", H5P_DEFAULT), 0);
    close_rw(f);
    expect_reject(path, QC_ERR_MISSING, "/cases/b_cont/start_pos: missing attribute");

    /* config_json that is not a valid config */
    path = write_std("a3.h5");
    f = open_rw(path);
    ck_assert_int_ge(H5Adelete(f, "config_json"), 0);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    sp = H5Screate(H5S_SCALAR);
    a = H5Acreate2(f, "config_json", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    const char *broken = "{\"vocab_size\": 16,";
    H5Awrite(a, t, &broken);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    close_rw(f);
    expect_reject(path, QC_ERR_FORMAT, "/config_json");
    rm_tmpdir();
}
END_TEST

START_TEST(test_reject_types_and_ids) {
    make_tmpdir();
    /* float data where ids are expected */
    const char *path = write_std("i.h5");
    hid_t f = open_rw(path);
    hsize_t dt[1] = {4};
    replace_float_dataset(f, "/cases/b_cont/tokens", 1, dt);
    close_rw(f);
    expect_reject(path, QC_ERR_FORMAT, "/cases/b_cont/tokens: not an integer dataset");

    /* a token id outside the vocabulary */
    path = write_std("i2.h5");
    f = open_rw(path);
    hid_t d = H5Dopen2(f, "/cases/b_cont/decode/tokens", H5P_DEFAULT);
    int32_t ids[2] = {3, 16};
    H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids);
    H5Dclose(d);
    close_rw(f);
    expect_reject(path, QC_ERR_FORMAT, "/cases/b_cont/decode/tokens: token id 16 at [1]");

    /* history missing while start_pos > 0 */
    path = write_std("i3.h5");
    f = open_rw(path);
    ck_assert_int_ge(H5Ldelete(f, "/cases/b_cont/history_tokens", H5P_DEFAULT), 0);
    close_rw(f);
    expect_reject(path, QC_ERR_MISSING, "/cases/b_cont/history_tokens: missing");
    rm_tmpdir();
}
END_TEST

START_TEST(test_reject_not_hdf5_and_missing_file) {
    make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/text.h5", tmpdir_);
    FILE *fp = fopen(path, "w");
    fputs("this is not an HDF5 file\n", fp);
    fclose(fp);
    expect_reject(path, QC_ERR_FORMAT, "not an HDF5 file");
    snprintf(path, sizeof path, "%s/empty.h5", tmpdir_);
    fp = fopen(path, "w");
    fclose(fp);
    expect_reject(path, QC_ERR_FORMAT, "not an HDF5 file");
    snprintf(path, sizeof path, "%s/does-not-exist.h5", tmpdir_);
    expect_reject(path, QC_ERR_IO, "No such file");
    /* a directory */
    expect_reject(tmpdir_, QC_ERR_IO, "not a regular file");
    /* an HDF5 file without /cases */
    snprintf(path, sizeof path, "%s/nocases.h5", tmpdir_);
    const char *p = write_std("nocases.h5");
    hid_t f = open_rw(p);
    ck_assert_int_ge(H5Ldelete(f, "/cases", H5P_DEFAULT), 0);
    close_rw(f);
    expect_reject(p, QC_ERR_MISSING, "/cases: missing");
    rm_tmpdir();
}
END_TEST

/* ===================================================================================== */
/* h5py interop                                                                          */
/* ===================================================================================== */

static int have_h5py(void) {
    return access("/usr/bin/python3", X_OK) == 0 &&
           system("/usr/bin/python3 -c 'import h5py, numpy' >/dev/null 2>&1") == 0;
}

/* A golden written by h5py the way golden/ does it: Python str attributes (VL UTF-8), Python
 * ints (int64 attributes), int32 / float32 datasets; plus an int64 tokens dataset, one
 * fixed-length (np.bytes_) string attribute and an extra unknown dataset (readers ignore it).
 * Values are exact in float32. */
static const char *H5PY_SCRIPT =
    "import sys, json, h5py, numpy as np\n"
    "cfg = sys.argv[2]\n"
    "c = json.loads(cfg)\n"
    "V, H, L = c['vocab_size'], c['hidden_size'], c['num_hidden_layers']\n"
    "with h5py.File(sys.argv[1], 'w') as f:\n"
    "    f.attrs['schema_version'] = np.int32(1)\n"
    "    f.attrs['generator'] = 'qwen-conform-golden 1.0 (PyTorch float64)'\n"
    "    f.attrs['torch_version'] = '1.13.1'\n"
    "    f.attrs['seed'] = 42\n"
    "    f.attrs['compute_dtype'] = 'float64'\n"
    "    f.attrs['model_path'] = 'model'\n"
    "    f.attrs['config_sha256'] = '0' * 64\n"
    "    f.attrs['weights_sha256'] = 'f' * 64\n"
    "    f.attrs['config_json'] = cfg\n"
    "    g = f.create_group('cases/len002')\n"
    "    g.attrs['start_pos'] = np.int32(0)\n"
    "    g.attrs['max_seq_len'] = 16\n"
    "    g.attrs['description'] = np.bytes_(b'two tokens')  # fixed-length, NULLPAD, no NUL\n"
    "    g['tokens'] = np.array([5, 9], dtype=np.int64)\n"
    "    g['prefill/logits'] = (np.arange(2 * V, dtype=np.float32) * 0.25).reshape(2, V)\n"
    "    g['prefill/hidden'] = np.arange((L + 1) * 2 * H, dtype=np.float32).reshape(L + 1, 2, H)\n"
    "    g['prefill/extra_unknown'] = np.zeros(3, dtype=np.float32)\n"
    "    for l, kind in enumerate(c['layer_types']):\n"
    "        s = g.create_group('prefill/state/layer_%02d' % l)\n"
    "        if kind == 'full_attention':\n"
    "            s['k_cache'] = np.full((1, 2, 4), l + 0.5, dtype=np.float32)\n"
    "            s['v_cache'] = np.full((1, 2, 4), -l - 0.5, dtype=np.float32)\n"
    "        else:\n"
    "            s['conv_state'] = np.full((14, 3), l * 2.0, dtype=np.float32)\n"
    "            s['recurrent_state'] = np.full((2, 4, 3), l * 3.0, dtype=np.float32)\n"
    "    g['decode/tokens'] = np.array([1], dtype=np.int32)\n"
    "    g['decode/logits'] = np.full((1, V), 2.0, dtype=np.float32)\n"
    "    g['decode/margins'] = np.array([0.5], dtype=np.float32)\n";

START_TEST(test_h5py_interop) {
    if (!have_h5py()) {
        fprintf(stderr, "test_h5py_interop: SKIPPED (/usr/bin/python3 lacks h5py)\n");
        return;
    }
    make_tmpdir();
    char script[512], path[512], cmd[4096];
    snprintf(script, sizeof script, "%s/w.py", tmpdir_);
    snprintf(path, sizeof path, "%s/py.h5", tmpdir_);
    FILE *fp = fopen(script, "w");
    fputs(H5PY_SCRIPT, fp);
    fclose(fp);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s'", script, path, CONFIG_JSON);
    ck_assert_int_eq(system(cmd), 0);
    qc_golden *g = NULL;
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_golden_open(path, &g, &err);
    ck_assert_msg(st == QC_OK, "open h5py golden: %s", err.msg);
    assert_no_open_handles();
    ck_assert_str_eq(g->generator, "qwen-conform-golden 1.0 (PyTorch float64)");
    ck_assert_str_eq(g->torch_version, "1.13.1");
    ck_assert(g->seed == 42);
    ck_assert_str_eq(g->config_json, CONFIG_JSON);
    ck_assert_int_eq(g->cfg.vocab_size, 16);
    ck_assert_int_eq(g->n_cases, 1);
    const qc_golden_case *c = &g->cases[0];
    ck_assert_str_eq(c->name, "len002");
    ck_assert_str_eq(c->description, "two tokens");
    ck_assert_int_eq(c->max_seq_len, 16);
    ck_assert_int_eq(c->n_tokens, 2);
    ck_assert_int_eq(c->tokens[0], 5);
    ck_assert_int_eq(c->tokens[1], 9);
    for (int i = 0; i < 2 * 16; i++) ck_assert(c->prefill_logits[i] == 0.25f * (float)i);
    for (int i = 0; i < 4 * 2 * 8; i++) ck_assert(c->prefill_hidden[i] == (float)i);
    ck_assert_int_eq(c->prefill_state.present, 1);
    ck_assert(c->prefill_state.k_cache[1][7] == 1.5f);
    ck_assert(c->prefill_state.v_cache[1][0] == -1.5f);
    ck_assert(c->prefill_state.conv_state[2][41] == 4.0f);
    ck_assert(c->prefill_state.recurrent_state[0][0] == 0.0f);
    ck_assert(c->prefill_state.recurrent_state[2][23] == 6.0f);
    ck_assert_int_eq(c->n_decode, 1);
    ck_assert_int_eq(c->decode_tokens[0], 1);
    ck_assert(c->decode_logits[15] == 2.0f);
    ck_assert(c->decode_margins[0] == 0.5f);
    ck_assert_int_eq(c->decode_state.present, 0);
    qc_golden_free(g);

    /* and the C writer's output reads back in h5py as str / int / float32 */
    const char *cpath = write_std("c.h5");
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import h5py, numpy as np, sys\n"
             "f = h5py.File('%s', 'r')\n"
             "assert isinstance(f.attrs['config_json'], str), type(f.attrs['config_json'])\n"
             "assert isinstance(f.attrs['generator'], str)\n"
             "assert f.attrs['generator'].endswith('(utf-8)')\n"
             "assert f.attrs['schema_version'] == 1\n"
             "assert f.attrs['seed'] == 1234567890123\n"
             "assert f['cases/a_len5/prefill/logits'].dtype == np.float32\n"
             "assert f['cases/b_cont/tokens'].dtype == np.int32\n"
             "assert f['cases/b_cont'].attrs['description'] == 'continuation'\n"
             "assert f['cases/b_cont/prefill/state/layer_01/k_cache'].shape == (1, 7, 4)\n"
             "\"",
             cpath);
    ck_assert_int_eq(system(cmd), 0);
    rm_tmpdir();
}
END_TEST

/* ===================================================================================== */
/* find and state snapshots                                                              */
/* ===================================================================================== */

START_TEST(test_find) {
    make_tmpdir();
    char p[600];
    const char *files[] = {"b.h5", "sub/a.h5", "sub/deeper/c.h5", "note.txt", ".hidden/x.h5",
                           "a.h5x"};
    snprintf(p, sizeof p, "%s/sub/deeper", tmpdir_);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s/.hidden'", p, tmpdir_);
    ck_assert_int_eq(system(cmd), 0);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s/%s", tmpdir_, files[i]);
        FILE *fp = fopen(p, "w");
        ck_assert_ptr_nonnull(fp);
        fclose(fp);
    }
    char **paths = NULL;
    int n = -1;
    qc_err err;
    ck_assert_int_eq(qc_golden_find(tmpdir_, &paths, &n, &err), QC_OK);
    ck_assert_int_eq(n, 3);
    snprintf(p, sizeof p, "%s/b.h5", tmpdir_);
    ck_assert_str_eq(paths[0], p);
    snprintf(p, sizeof p, "%s/sub/a.h5", tmpdir_);
    ck_assert_str_eq(paths[1], p);
    snprintf(p, sizeof p, "%s/sub/deeper/c.h5", tmpdir_);
    ck_assert_str_eq(paths[2], p);
    qc_golden_paths_free(paths, n);
    /* a file is itself, whatever its name */
    snprintf(p, sizeof p, "%s/note.txt", tmpdir_);
    ck_assert_int_eq(qc_golden_find(p, &paths, &n, &err), QC_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(paths[0], p);
    qc_golden_paths_free(paths, n);
    /* empty directory: n = 0, not an error */
    snprintf(p, sizeof p, "%s/sub/deeper/empty", tmpdir_);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    ck_assert_int_eq(qc_golden_find(p, &paths, &n, &err), QC_OK);
    ck_assert_int_eq(n, 0);
    qc_golden_paths_free(paths, n);
    /* missing */
    snprintf(p, sizeof p, "%s/nope", tmpdir_);
    ck_assert_int_eq(qc_golden_find(p, &paths, &n, &err), QC_ERR_IO);
    ck_assert(strstr(err.msg, p) != NULL);
    rm_tmpdir();
}
END_TEST

START_TEST(test_state_from_trims) {
    qc_config cfg;
    qc_err err;
    ck_assert_int_eq(qc_config_parse(CONFIG_JSON, strlen(CONFIG_JSON), "cfg", &cfg, &err), QC_OK);
    qc_state *st = NULL;
    ck_assert_int_eq(qc_state_create(&cfg, 10, &st, &err), QC_OK);
    /* k[h, p, d] = 100 h + 10 p + d (+ 0.5 for v); conv / recurrent = index + layer */
    for (int l = 0; l < cfg.n_layers; l++) {
        if (cfg.layer_types[l] == QC_LAYER_FULL) {
            for (int h = 0; h < cfg.n_kv_heads; h++)
                for (int p = 0; p < 10; p++)
                    for (int d = 0; d < cfg.head_dim; d++) {
                        size_t i = ((size_t)h * 10 + p) * cfg.head_dim + d;
                        st->k_cache[l][i] = (float)(100 * h + 10 * p + d);
                        st->v_cache[l][i] = (float)(100 * h + 10 * p + d) + 0.5f;
                    }
        } else {
            for (int i = 0; i < qc_cfg_conv_dim(&cfg) * cfg.conv_kernel; i++)
                st->conv_state[l][i] = (float)(i + l);
            for (int i = 0; i < cfg.lin_n_v_heads * cfg.lin_k_dim * cfg.lin_v_dim; i++)
                st->recurrent_state[l][i] = (float)(-i - l);
        }
    }
    qc_golden_state gs;
    ck_assert_int_eq(qc_golden_state_from(&cfg, st, 6, &gs, &err), QC_OK);
    ck_assert_int_eq(gs.present, 1);
    ck_assert_int_eq(gs.n_pos, 6);
    for (int h = 0; h < cfg.n_kv_heads; h++)
        for (int p = 0; p < 6; p++)
            for (int d = 0; d < cfg.head_dim; d++) {
                size_t i = ((size_t)h * 6 + p) * cfg.head_dim + d;
                ck_assert(gs.k_cache[1][i] == (float)(100 * h + 10 * p + d));
                ck_assert(gs.v_cache[1][i] == (float)(100 * h + 10 * p + d) + 0.5f);
            }
    ck_assert_ptr_null(gs.k_cache[0]);
    ck_assert_ptr_null(gs.conv_state[1]);
    ck_assert(gs.conv_state[2][5] == 7.0f);
    ck_assert(gs.recurrent_state[0][23] == -23.0f);
    qc_golden_state_free(&cfg, &gs);
    ck_assert_ptr_null(gs.k_cache);
    /* more positions than the capacity: an argument error */
    ck_assert_int_eq(qc_golden_state_from(&cfg, st, 11, &gs, &err), QC_ERR_ARG);
    qc_state_destroy(st);
}
END_TEST

/* ===================================================================================== */
/* lazy cases, bounded reading, links in the walk (hardening items 9-11)                 */
/* ===================================================================================== */

/* Every tensor pointer of a case NULL and no state present: nothing was read. */
static void assert_unloaded(const qc_golden_case *c) {
    ck_assert_ptr_null(c->history);
    ck_assert_ptr_null(c->tokens);
    ck_assert_ptr_null(c->prefill_logits);
    ck_assert_ptr_null(c->prefill_hidden);
    ck_assert_int_eq(c->prefill_state.present, 0);
    ck_assert_ptr_null(c->prefill_state.k_cache);
    ck_assert_ptr_null(c->prefill_state.conv_state);
    ck_assert_ptr_null(c->decode_tokens);
    ck_assert_ptr_null(c->decode_logits);
    ck_assert_ptr_null(c->decode_margins);
    ck_assert_int_eq(c->decode_state.present, 0);
    ck_assert_ptr_null(c->decode_state.k_cache);
}

/* The bytes of a state snapshot: floats of every layer + the four [L] pointer arrays. */
static size_t state_bytes(const qc_config *c, int n_pos) {
    size_t n = 0;
    for (int l = 0; l < c->n_layers; l++)
        n += c->layer_types[l] == QC_LAYER_FULL
                 ? 2 * (size_t)c->n_kv_heads * n_pos * c->head_dim
                 : (size_t)qc_cfg_conv_dim(c) * c->conv_kernel +
                       (size_t)c->lin_n_v_heads * c->lin_k_dim * c->lin_v_dim;
    return n * sizeof(float) + 4 * (size_t)c->n_layers * sizeof(float *);
}

START_TEST(test_lazy_open_load_unload) {
    make_tmpdir();
    const char *path = write_std("lazy.h5");
    qc_golden *want = make_golden();
    qc_golden *g = NULL;
    qc_err err;
    qc_err_clear(&err);
    ck_assert_msg(qc_golden_open_lazy(path, &g, &err) == QC_OK, "%s", err.msg);
    assert_no_open_handles();
    ck_assert_int_eq(g->n_cases, 2);
    ck_assert_ptr_nonnull(g->meta);
    ck_assert_ptr_nonnull(g->loaded);
    /* metadata without tensors: names sorted, counts, attributes, optional groups */
    const qc_golden_case *a = &g->cases[0], *b = &g->cases[1];
    ck_assert_str_eq(a->name, "a_len5");
    ck_assert_str_eq(b->name, "b_cont");
    ck_assert_int_eq(a->n_tokens, 5);
    ck_assert_int_eq(a->max_seq_len, 16);
    ck_assert_int_eq(a->n_decode, 0);
    ck_assert_int_eq(b->start_pos, 3);
    ck_assert_int_eq(b->n_history, 3);
    ck_assert_int_eq(b->n_tokens, 4);
    ck_assert_int_eq(b->n_decode, 2);
    ck_assert_str_eq(b->description, "continuation");
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(g->loaded[i], 0);
        assert_unloaded(&g->cases[i]);
    }
    const qc_golden_case_meta *ma = &g->meta[0], *mb = &g->meta[1];
    ck_assert(ma->has_hidden && ma->has_prefill_state && !ma->has_decode);
    ck_assert(mb->has_hidden && mb->has_prefill_state && mb->has_decode &&
              mb->has_decode_margins && mb->has_decode_state);
    /* the bytes a load allocates */
    const qc_config *c = &g->cfg;
    const size_t V = 16, L = 3, H = 8;
    size_t want_a = (5 + 5 * V + (L + 1) * 5 * H) * 4 + state_bytes(c, 5);
    size_t want_b = (3 + 4 + 4 * V + (L + 1) * 4 * H + 2 * (V + 2)) * 4 + state_bytes(c, 7) +
                    state_bytes(c, 9);
    ck_assert_uint_eq(qc_golden_case_bytes(c, ma), want_a);
    ck_assert_uint_eq(qc_golden_case_bytes(c, mb), want_b);

    /* load one: exactly the written tensors; the other stays unloaded */
    ck_assert_msg(qc_golden_load_case(g, 1, &err) == QC_OK, "%s", err.msg);
    assert_no_open_handles();
    ck_assert_int_eq(g->loaded[1], 1);
    assert_case_eq(c, &want->cases[0], &g->cases[1]);
    assert_unloaded(&g->cases[0]);
    ck_assert_int_eq(qc_golden_load_case(g, 1, &err), QC_OK); /* loaded: no-op */
    /* unload: tensors freed, metadata kept; loads again */
    qc_golden_unload_case(g, 1);
    ck_assert_int_eq(g->loaded[1], 0);
    assert_unloaded(&g->cases[1]);
    ck_assert_int_eq(g->cases[1].n_tokens, 4);
    ck_assert_int_eq(g->cases[1].n_decode, 2);
    ck_assert_int_eq(qc_golden_load_case(g, 0, &err), QC_OK);
    ck_assert_int_eq(qc_golden_load_case(g, 1, &err), QC_OK);
    assert_case_eq(c, &want->cases[1], &g->cases[0]);
    assert_case_eq(c, &want->cases[0], &g->cases[1]);
    ck_assert_int_eq(qc_golden_load_case(g, 2, &err), QC_ERR_ARG);
    qc_golden_free(g); /* frees the loaded cases too */
    assert_no_open_handles();

    /* a file replaced after the lazy open is not read as if it were the same */
    ck_assert_int_eq(qc_golden_open_lazy(path, &g, &err), QC_OK);
    write_std("lazy.h5"); /* temp file + rename: a new inode */
    qc_err_clear(&err);
    ck_assert_int_eq(qc_golden_load_case(g, 0, &err), QC_ERR_IO);
    ck_assert_msg(strstr(err.msg, "changed since it was opened") != NULL, "%s", err.msg);
    assert_unloaded(&g->cases[0]);
    qc_golden_free(g);
    free_made(want);
    assert_no_open_handles();
    rm_tmpdir();
}
END_TEST

/* Bad values are found when a case is loaded: that case fails naming the file and dataset,
 * the others still load; qc_golden_open (everything) refuses the file as before. */
START_TEST(test_lazy_load_error_is_per_case) {
    make_tmpdir();
    const char *path = write_std("bad.h5");
    hid_t f = open_rw(path);
    hid_t d = H5Dopen2(f, "/cases/a_len5/prefill/hidden", H5P_DEFAULT);
    float *buf = calloc(4 * 5 * 8, sizeof *buf);
    buf[2 * 40 + 3 * 8 + 1] = INFINITY;
    ck_assert_int_ge(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), 0);
    free(buf);
    H5Dclose(d);
    d = H5Dopen2(f, "/cases/a_len5/tokens", H5P_DEFAULT);
    int32_t ids[5] = {1, 2, 3, 4, 5};
    ck_assert_int_ge(H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids), 0);
    H5Dclose(d);
    close_rw(f);
    qc_golden *g = NULL;
    qc_err err;
    qc_err_clear(&err);
    ck_assert_msg(qc_golden_open_lazy(path, &g, &err) == QC_OK, "%s", err.msg);
    ck_assert_int_eq(qc_golden_load_case(g, 0, &err), QC_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, "/cases/a_len5/prefill/hidden: +Inf "
                                                           "at [2,3,1]"), "%s", err.msg);
    ck_assert_int_eq(g->loaded[0], 0);
    assert_unloaded(&g->cases[0]);
    assert_no_open_handles();
    ck_assert_msg(qc_golden_load_case(g, 1, &err) == QC_OK, "%s", err.msg);
    ck_assert_ptr_nonnull(g->cases[1].decode_state.k_cache);
    qc_golden_free(g);
    expect_reject(path, QC_ERR_FORMAT, "/cases/a_len5/prefill/hidden: +Inf at [2,3,1]");
    rm_tmpdir();
}
END_TEST

/* Replace the dataset at path by a chunked one of the given extents whose chunks are never
 * written: a file of a few KB that declares gigabytes. */
static void replace_chunked(hid_t f, const char *path, int is_float, int rank,
                            const hsize_t *dims) {
    ck_assert_int_ge(H5Ldelete(f, path, H5P_DEFAULT), 0);
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t chunk[3];
    for (int i = 0; i < rank; i++) chunk[i] = dims[i] < 1024 ? dims[i] : 1024;
    ck_assert_int_ge(H5Pset_chunk(dcpl, rank, chunk), 0);
    hid_t d = H5Dcreate2(f, path, is_float ? H5T_IEEE_F32LE : H5T_STD_I32LE, sp, H5P_DEFAULT,
                         dcpl, H5P_DEFAULT);
    ck_assert_int_ge(d, 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
}

static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static long maxrss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Both readers refuse, fast and without allocating: assert < 2 s and a peak RSS growth
 * below 50 MB (reading what the file declares would take 16 MB of tokens and 256 MB+ of
 * logits, or 4 GB for a vocabulary of 256). */
static void expect_refused_fast(const char *path, const char *needle) {
    for (int lazy = 0; lazy < 2; lazy++) {
        long rss0 = maxrss_kb();
        double t0 = wall_s();
        qc_golden *g = (qc_golden *)0x1;
        qc_err err;
        qc_err_clear(&err);
        qc_status st = lazy ? qc_golden_open_lazy(path, &g, &err) : qc_golden_open(path, &g, &err);
        double dt = wall_s() - t0;
        long drss = maxrss_kb() - rss0;
        ck_assert_msg(st == QC_ERR_SHAPE, "%s: got %s: %s", lazy ? "lazy" : "open",
                      qc_status_str(st), err.msg);
        ck_assert_ptr_null(g);
        ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, needle), "lacks '%s': %s",
                      needle, err.msg);
        ck_assert_msg(dt < 2.0, "refusing took %.2f s", dt);
        ck_assert_msg(drss < 50 * 1024, "peak RSS grew by %ld KB", drss);
        assert_no_open_handles();
    }
}

START_TEST(test_reject_lying_shapes) {
    make_tmpdir();
    /* tokens [2^22]: more positions than a case may have (the config's default
     * max_position_embeddings 32768) */
    const char *path = write_std("lie1.h5");
    hid_t f = open_rw(path);
    hsize_t big1[1] = {(hsize_t)1 << 22}, big2[2] = {(hsize_t)1 << 22, 16};
    replace_chunked(f, "/cases/a_len5/tokens", 0, 1, big1);
    replace_chunked(f, "/cases/a_len5/prefill/logits", 1, 2, big2);
    close_rw(f);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_lt((int)sb.st_size, 64 * 1024);
    expect_refused_fast(path, "/cases/a_len5/tokens: shape [4194304] != [<=32768]");
    /* an honest prompt, lying logits */
    path = write_std("lie2.h5");
    f = open_rw(path);
    replace_chunked(f, "/cases/a_len5/prefill/logits", 1, 2, big2);
    close_rw(f);
    expect_refused_fast(path, "/cases/a_len5/prefill/logits: shape [4194304,16] != [5,16]");
    /* a lying decode: its steps count as positions too */
    path = write_std("lie3.h5");
    f = open_rw(path);
    replace_chunked(f, "/cases/b_cont/decode/tokens", 0, 1, big1);
    close_rw(f);
    expect_refused_fast(path, "/cases/b_cont/decode/tokens: shape [4194304] != [<=32761]");
    /* a lying state: k_cache positions disagree with start_pos + T */
    path = write_std("lie4.h5");
    f = open_rw(path);
    hsize_t kv[3] = {1, (hsize_t)1 << 24, 4};
    replace_chunked(f, "/cases/b_cont/prefill/state/layer_01/k_cache", 1, 3, kv);
    close_rw(f);
    expect_refused_fast(path, "layer_01/k_cache: shape [1,16777216,4] != [1,7,4]");
    rm_tmpdir();
}
END_TEST

/* Shapes that agree with the config but need more memory than the machine has: the lazy
 * reader opens it (metadata only) and says how much a load would take; the whole-file reader
 * refuses before reading (QC_ERR_OOM). The config claims V = 2^24 and the one case T = 32000:
 * logits [32000, 2^24], 2 TiB declared in a file of a few hundred KB. */
START_TEST(test_open_refuses_more_than_memory) {
    make_tmpdir();
    const char *path = write_std("huge.h5");
    hid_t f = open_rw(path);
    ck_assert_int_ge(H5Ldelete(f, "/cases/b_cont", H5P_DEFAULT), 0);
    ck_assert_int_ge(H5Ldelete(f, "/cases/a_len5/prefill/hidden", H5P_DEFAULT), 0);
    ck_assert_int_ge(H5Ldelete(f, "/cases/a_len5/prefill/state", H5P_DEFAULT), 0);
    hsize_t dt[1] = {32000}, dl[2] = {32000, (hsize_t)1 << 24};
    replace_chunked(f, "/cases/a_len5/tokens", 0, 1, dt);
    replace_chunked(f, "/cases/a_len5/prefill/logits", 1, 2, dl);
    /* config_json with vocab_size 2^24 */
    char *cfg = strdup(CONFIG_JSON);
    char *v = strstr(cfg, "\"vocab_size\": 16,");
    ck_assert_ptr_nonnull(v);
    char *big = malloc(strlen(cfg) + 16);
    sprintf(big, "%.*s\"vocab_size\": 16777216,%s", (int)(v - cfg), cfg,
            v + strlen("\"vocab_size\": 16,"));
    ck_assert_int_ge(H5Adelete(f, "config_json"), 0);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "config_json", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    const char *bp = big;
    ck_assert_int_ge(H5Awrite(a, t, &bp), 0);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    close_rw(f);
    free(cfg);
    free(big);

    qc_golden *g = NULL;
    qc_err err;
    qc_err_clear(&err);
    ck_assert_msg(qc_golden_open_lazy(path, &g, &err) == QC_OK, "%s", err.msg);
    ck_assert_int_eq(g->n_cases, 1);
    ck_assert_int_eq(g->cases[0].n_tokens, 32000);
    assert_unloaded(&g->cases[0]);
    size_t want = ((size_t)32000 + (size_t)32000 * ((size_t)1 << 24)) * sizeof(float);
    ck_assert_uint_eq(qc_golden_case_bytes(&g->cfg, &g->meta[0]), want);
    qc_golden_free(g);
    long rss0 = maxrss_kb();
    double t0 = wall_s();
    g = (qc_golden *)0x1;
    qc_err_clear(&err);
    ck_assert_int_eq(qc_golden_open(path, &g, &err), QC_ERR_OOM);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, "GiB"), "%s", err.msg);
    ck_assert_msg(wall_s() - t0 < 2.0, "refusing took %.2f s", wall_s() - t0);
    ck_assert_msg(maxrss_kb() - rss0 < 50 * 1024, "peak RSS grew by %ld KB", maxrss_kb() - rss0);
    assert_no_open_handles();
    rm_tmpdir();
}
END_TEST

/* The writer refuses what the reader would refuse: more positions than the limit. */
START_TEST(test_write_positions_bounded) {
    make_tmpdir();
    qc_golden *g = make_golden();
    g->cfg.max_position_embeddings = 8; /* b_cont needs 3 + 4 + 2 = 9 */
    ck_assert_int_eq(qc_golden_max_positions(&g->cfg), 8);
    char path[512];
    snprintf(path, sizeof path, "%s/w.h5", tmpdir_);
    qc_err err;
    qc_err_clear(&err);
    ck_assert_int_eq(qc_golden_write(path, g, &err), QC_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "/cases/b_cont") && strstr(err.msg, "9 positions, more than 8"),
                  "%s", err.msg);
    ck_assert_int_ne(access(path, F_OK), 0);
    g->cfg.max_position_embeddings = 0;
    ck_assert_int_eq(qc_golden_max_positions(&g->cfg), QC_GOLDEN_MAX_POSITIONS);
    g->cfg.max_position_embeddings = 1 << 30;
    ck_assert_int_eq(qc_golden_max_positions(&g->cfg), QC_GOLDEN_MAX_POSITIONS);
    free_made(g);
    rm_tmpdir();
}
END_TEST

/* Run qc_golden_find with stderr captured into *notes (malloc'd). */
static qc_status find_capturing(const char *dir, char ***paths, int *n, char **notes) {
    char np[600];
    snprintf(np, sizeof np, "%s/.notes", tmpdir_);
    fflush(stderr);
    int saved = dup(2);
    FILE *nf = fopen(np, "w+");
    ck_assert_ptr_nonnull(nf);
    dup2(fileno(nf), 2);
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_golden_find(dir, paths, n, &err);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fseek(nf, 0, SEEK_END);
    long len = ftell(nf);
    rewind(nf);
    *notes = calloc((size_t)len + 1, 1);
    ck_assert_int_eq((long)fread(*notes, 1, (size_t)len, nf), len);
    fclose(nf);
    unlink(np);
    return st;
}

START_TEST(test_find_links_loops_duplicates) {
    make_tmpdir();
    char root[600], cmd[4096];
    snprintf(root, sizeof root, "%s/g", tmpdir_);
    /* g/a.h5, g/sub/b.h5, g/sub/deeper/c.h5 real; g/sub/loop -> .. (a loop);
     * g/sub/deeper/up -> ../.. (a loop two levels up); g/alias.h5 -> a.h5 and the hard link
     * g/sub/hard.h5 (two more names of a.h5); g/asub -> sub (a second name of a directory,
     * sorted before it); g/dangling -> nowhere */
    snprintf(cmd, sizeof cmd,
             "set -e; cd '%s'; mkdir -p g/sub/deeper; : > g/a.h5; : > g/sub/b.h5;"
             " : > g/sub/deeper/c.h5; ln -s .. g/sub/loop; ln -s ../.. g/sub/deeper/up;"
             " ln -s a.h5 g/alias.h5; ln g/a.h5 g/sub/hard.h5; ln -s sub g/asub;"
             " ln -s nowhere g/dangling",
             tmpdir_);
    ck_assert_int_eq(system(cmd), 0);
    char **paths = NULL, *notes = NULL;
    int n = -1;
    ck_assert_int_eq(find_capturing(root, &paths, &n, &notes), QC_OK);
    ck_assert_msg(n == 3, "n = %d, notes: %s", n, notes);
    char p[700];
    snprintf(p, sizeof p, "%s/a.h5", root);
    ck_assert_str_eq(paths[0], p);
    snprintf(p, sizeof p, "%s/sub/b.h5", root);
    ck_assert_str_eq(paths[1], p);
    snprintf(p, sizeof p, "%s/sub/deeper/c.h5", root);
    ck_assert_str_eq(paths[2], p);
    qc_golden_paths_free(paths, n);
    /* one note per skip, naming both paths */
    char want[1600];
    snprintf(want, sizeof want, "qwen-conform: note: skipping %s/sub/loop: directory loop", root);
    ck_assert_msg(strstr(notes, want), "no loop note: %s", notes);
    snprintf(want, sizeof want, "qwen-conform: note: skipping %s/sub/deeper/up: directory loop",
             root);
    ck_assert_msg(strstr(notes, want), "no loop note (2 up): %s", notes);
    snprintf(want, sizeof want, "qwen-conform: note: skipping %s/asub: same file as %s/sub",
             root, root);
    ck_assert_msg(strstr(notes, want), "no directory duplicate note: %s", notes);
    snprintf(want, sizeof want, "qwen-conform: note: skipping %s/alias.h5: same file as %s/a.h5",
             root, root);
    ck_assert_msg(strstr(notes, want), "no symlink duplicate note: %s", notes);
    snprintf(want, sizeof want,
             "qwen-conform: note: skipping %s/sub/hard.h5: same file as %s/a.h5", root, root);
    ck_assert_msg(strstr(notes, want), "no hard-link duplicate note: %s", notes);
    int lines = 0;
    for (const char *s = notes; *s; s++) lines += *s == '\n';
    ck_assert_msg(lines == 5, "%d notes: %s", lines, notes);
    free(notes);
    /* deterministic, and each note printed once per process */
    ck_assert_int_eq(find_capturing(root, &paths, &n, &notes), QC_OK);
    ck_assert_int_eq(n, 3);
    snprintf(p, sizeof p, "%s/a.h5", root);
    ck_assert_str_eq(paths[0], p);
    ck_assert_msg(notes[0] == '\0', "notes repeated: %s", notes);
    qc_golden_paths_free(paths, n);
    free(notes);
    /* the root given through a link, with a trailing slash: the same three, under the link */
    snprintf(cmd, sizeof cmd, "ln -s g '%s/lg'", tmpdir_);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(p, sizeof p, "%s/lg/", tmpdir_);
    ck_assert_int_eq(find_capturing(p, &paths, &n, &notes), QC_OK);
    ck_assert_int_eq(n, 3);
    snprintf(p, sizeof p, "%s/lg/sub/b.h5", tmpdir_);
    ck_assert_str_eq(paths[1], p);
    qc_golden_paths_free(paths, n);
    free(notes);
    /* a golden reachable only through a symlinked directory is found (links are followed),
     * and the real name wins over a link name sorted before it */
    snprintf(cmd, sizeof cmd,
             "set -e; cd '%s'; mkdir -p h/z_real ext; : > h/z_real/r.h5; ln -s z_real h/a_link;"
             " : > ext/e.h5; ln -s ../ext h/outside",
             tmpdir_);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(p, sizeof p, "%s/h", tmpdir_);
    ck_assert_int_eq(find_capturing(p, &paths, &n, &notes), QC_OK);
    ck_assert_msg(n == 2, "n = %d: %s", n, notes);
    snprintf(p, sizeof p, "%s/h/outside/e.h5", tmpdir_);
    ck_assert_str_eq(paths[0], p);
    snprintf(p, sizeof p, "%s/h/z_real/r.h5", tmpdir_);
    ck_assert_str_eq(paths[1], p);
    snprintf(want, sizeof want, "skipping %s/h/a_link: same file as %s/h/z_real", tmpdir_,
             tmpdir_);
    ck_assert_msg(strstr(notes, want), "%s", notes);
    qc_golden_paths_free(paths, n);
    free(notes);
    rm_tmpdir();
}
END_TEST

/* ===================================================================================== */

static Suite *golden_io_suite(void) {
    Suite *s = suite_create("golden_io");
    TCase *tc = tcase_create("roundtrip");
    tcase_add_test(tc, test_roundtrip_exact);
    tcase_add_test(tc, test_roundtrip_minimal);
    tcase_add_test(tc, test_written_types);
    tcase_add_test(tc, test_write_failure_leaves_nothing);
    suite_add_tcase(s, tc);
    tc = tcase_create("reject");
    tcase_add_test(tc, test_reject_missing_dataset);
    tcase_add_test(tc, test_reject_wrong_shape);
    tcase_add_test(tc, test_reject_nan_inf);
    tcase_add_test(tc, test_reject_attributes);
    tcase_add_test(tc, test_reject_types_and_ids);
    tcase_add_test(tc, test_reject_not_hdf5_and_missing_file);
    suite_add_tcase(s, tc);
    tc = tcase_create("interop");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_h5py_interop);
    suite_add_tcase(s, tc);
    tc = tcase_create("misc");
    tcase_add_test(tc, test_find);
    tcase_add_test(tc, test_state_from_trims);
    suite_add_tcase(s, tc);
    tc = tcase_create("lazy_and_bounds");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_lazy_open_load_unload);
    tcase_add_test(tc, test_lazy_load_error_is_per_case);
    tcase_add_test(tc, test_reject_lying_shapes);
    tcase_add_test(tc, test_open_refuses_more_than_memory);
    tcase_add_test(tc, test_write_positions_bounded);
    tcase_add_test(tc, test_find_links_loops_duplicates);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    SRunner *sr = srunner_create(golden_io_suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
