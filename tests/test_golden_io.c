/* test_golden_io.c — golden HDF5 I/O: write -> open round trip (every field, exact), the
 * reader's rejections (each message naming the file and the dataset / attribute), h5py
 * interop (a golden written by /usr/bin/python3 + h5py opens), qc_golden_find and
 * qc_golden_state_from. Lazy cases and bounded reading: test_golden_lazy.c; the shared
 * fixture: support/qc_test_golden_fixture.h. */
#include "qc_test_golden_fixture.h"


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
