/* test_golden_lazy.c — lazy golden cases (open_lazy / load_case / unload_case, a load error
 * per case), goldens declaring huge shapes or more than the memory refused fast, bounded
 * writes, and links, loops and duplicates in qc_golden_find's walk; no HDF5 handle left open
 * after any call. The shared fixture: support/qc_test_golden_fixture.h. */
#include "qc_test_golden_fixture.h"

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

static Suite *golden_lazy_suite(void) {
    Suite *s = suite_create("golden_lazy");
    TCase *tc = tcase_create("lazy_and_bounds");
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
    SRunner *sr = srunner_create(golden_lazy_suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
