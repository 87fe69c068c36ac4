/* test_loader.c — qc_model_load on every valid checkpoint variant written by qc_testmodel
 * (compared element for element with the values the writer stored), rejection of missing /
 * unknown / wrong-shape tensors and broken packaging with messages naming them, the external
 * hf-tiny-a checkpoint, and qc_model_synthetic. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qc/qc_model.h"
#include "qc/qc_sha256.h"
#include "qc_testmodel.h"

/* ==== Helpers ==== */

/* Test-local list of per-layer fields (independent of the loader's own table). */
typedef struct {
    const char *name;
    size_t off;
} field_t;
#define F(x) {#x, offsetof(qc_layer_weights, x)}
static const field_t FIELDS[] = {
    F(input_norm), F(post_norm), F(mlp_gate), F(mlp_up), F(mlp_down), F(q_proj), F(k_proj),
    F(v_proj), F(o_proj), F(q_norm), F(k_norm), F(in_proj_qkv), F(in_proj_z), F(in_proj_b),
    F(in_proj_a), F(conv1d), F(dt_bias), F(A_log), F(lin_norm), F(out_proj)};
#undef F
#define N_FIELDS ((int)(sizeof FIELDS / sizeof FIELDS[0]))

static const qc_tensor *fld(const qc_model *m, int li, int k) {
    return (const qc_tensor *)((const char *)&m->layers[li] + FIELDS[k].off);
}

static char g_dir[512];

static void setup(void) {
    qc_err e;
    ck_assert_int_eq(qc_testmodel_mkdtemp(g_dir, sizeof g_dir, "loader", &e), QC_OK);
}

static void teardown(void) { qc_testmodel_rmtree(g_dir); }

static void write_model(const char *dir, const qc_testmodel_opts *o) {
    qc_err e;
    qc_status st = qc_testmodel_write(dir, o, &e);
    ck_assert_msg(st == QC_OK, "write: %s", e.msg);
}

static qc_model *load_ok(const char *dir) {
    qc_model *m = (qc_model *)0x1;
    qc_err e;
    qc_err_clear(&e);
    qc_status st = qc_model_load(dir, &m, &e);
    ck_assert_msg(st == QC_OK, "load %s: %s", dir, e.msg);
    ck_assert_ptr_nonnull(m);
    return m;
}

/* Load must fail with `code` and a message containing each of the given substrings. */
static void load_fails(const char *dir, qc_status code, const char *want1, const char *want2) {
    qc_model *m = (qc_model *)0x1;
    qc_err e;
    qc_err_clear(&e);
    qc_status st = qc_model_load(dir, &m, &e);
    ck_assert_msg(st == code, "status %s != %s (msg: %s)", qc_status_str(st), qc_status_str(code),
                  e.msg);
    ck_assert_ptr_null(m);
    ck_assert_msg(want1 == NULL || strstr(e.msg, want1), "message \"%s\" lacks \"%s\"", e.msg, want1);
    ck_assert_msg(want2 == NULL || strstr(e.msg, want2), "message \"%s\" lacks \"%s\"", e.msg, want2);
}

/* Every text tensor of m equals the writer's values (reference rounded to the stored dtype). */
static void check_against_reference(const qc_model *m, const qc_testmodel_opts *o) {
    qc_model *ref = NULL;
    qc_err e;
    ck_assert_int_eq(qc_testmodel_reference(o, &ref, &e), QC_OK);
    ck_assert(qc_testmodel_tensor_equal(&m->embed, &ref->embed, "embed"));
    ck_assert(qc_testmodel_tensor_equal(&m->final_norm, &ref->final_norm, "final_norm"));
    if (o->cfg.tie_word_embeddings && !o->write_lm_head) {
        ck_assert_ptr_eq(m->lm_head.data, m->embed.data);
        ck_assert(qc_testmodel_tensor_equal(&m->lm_head, &ref->embed, "lm_head(tied)"));
    } else {
        ck_assert_ptr_ne(m->lm_head.data, m->embed.data);
        ck_assert(qc_testmodel_tensor_equal(&m->lm_head, &ref->lm_head, "lm_head"));
    }
    for (int li = 0; li < m->cfg.n_layers; li++)
        for (int k = 0; k < N_FIELDS; k++) {
            char what[96];
            snprintf(what, sizeof what, "layer %d %s", li, FIELDS[k].name);
            const qc_tensor *a = fld(m, li, k), *b = fld(ref, li, k);
            ck_assert_msg(a->ndim == b->ndim, "%s: ndim %d vs %d", what, a->ndim, b->ndim);
            if (a->ndim) ck_assert_msg(qc_testmodel_tensor_equal(a, b, what), "%s differs", what);
        }
    qc_model_free(ref);
}

/* SHA-256 of the named files concatenated (computed here by reading them). */
static void sha_files(const char *dir, const char *const *names, int n, char hex[65]) {
    qc_sha256_ctx c;
    qc_sha256_init(&c);
    for (int i = 0; i < n; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        FILE *f = fopen(p, "rb");
        ck_assert_ptr_nonnull(f);
        char buf[4096];
        size_t k;
        while ((k = fread(buf, 1, sizeof buf, f)) > 0) qc_sha256_update(&c, buf, k);
        fclose(f);
    }
    uint8_t d[32];
    qc_sha256_final(&c, d);
    qc_sha256_to_hex(d, hex);
}

static void replace_in_file(const char *path, const char *from, const char *to) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static char buf[1 << 20], out[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *hit = strstr(buf, from);
    ck_assert_msg(hit != NULL, "%s lacks %s", path, from);
    size_t pre = (size_t)(hit - buf);
    memcpy(out, buf, pre);
    strcpy(out + pre, to);
    strcat(out + pre, hit + strlen(from));
    qc_err e;
    ck_assert_int_eq(qc_testmodel_write_file(path, out, strlen(out), &e), QC_OK);
}

/* Tensors a checkpoint of cfg holds (split layout, untied head excluded). */
static int expected_count(const qc_config *c) {
    int n = 2;
    for (int i = 0; i < c->n_layers; i++) n += c->layer_types[i] == QC_LAYER_FULL ? 11 : 14;
    return n;
}

/* ==== Accepted variants ==== */

typedef struct {
    const char *what;
    void (*tweak)(qc_testmodel_opts *);
} variant;

static void v_default(qc_testmodel_opts *o) { (void)o; }
static void v_f32_flat_untied_legacy(qc_testmodel_opts *o) {
    o->dtype = QC_F32, o->nested = 0, o->cfg.tie_word_embeddings = 0, o->legacy_rope = 1;
    o->cfg.nested = 0;
}
static void v_f16_nv_eq_nk(qc_testmodel_opts *o) {
    o->dtype = QC_F16, o->cfg.lin_n_v_heads = 2, o->cfg.lin_v_dim = 8;
}
static void v_sharded_extras(qc_testmodel_opts *o) {
    o->n_shards = 3, o->n_visual = 5, o->n_mtp = 3, o->cfg.tie_word_embeddings = 0;
}
static void v_interval(qc_testmodel_opts *o) {
    o->use_interval = 1, o->interval = 2, o->cfg.n_layers = 5, o->seed = 7;
}
static void v_interval_default(qc_testmodel_opts *o) {
    o->use_interval = 1, o->interval = 0, o->cfg.n_layers = 8, o->dtype = QC_F32;
}
static void v_conv2d_plain_prefix(qc_testmodel_opts *o) { o->conv_2d = 1, o->prefix = "model."; }
static void v_tied_with_head(qc_testmodel_opts *o) { o->write_lm_head = 1; }
static void v_tie_top_only(qc_testmodel_opts *o) { o->tie_where = QC_TM_TIE_TOP; }
static void v_tie_omitted(qc_testmodel_opts *o) {
    o->tie_where = QC_TM_TIE_OMIT, o->cfg.tie_word_embeddings = 0; /* default false: head written */
}
static void v_bf16_special_rounded(qc_testmodel_opts *o) { o->f32_special = 0, o->omit_rope = 1; }
static void v_sharded_one(qc_testmodel_opts *o) { o->n_shards = 2, o->legacy_packed = 1; }

static const variant VARIANTS[] = {
    {"bf16 nested tied nv=2nk dk!=dv", v_default},
    {"f32 flat untied legacy-rope", v_f32_flat_untied_legacy},
    {"f16 nv=nk dk=dv", v_f16_nv_eq_nk},
    {"sharded x3 + visual + mtp, untied", v_sharded_extras},
    {"interval 2, 5 layers", v_interval},
    {"interval absent (4), 8 layers, f32", v_interval_default},
    {"conv1d [C,K], model.* prefix", v_conv2d_plain_prefix},
    {"tied with lm_head.weight present", v_tied_with_head},
    {"tie only at top level", v_tie_top_only},
    {"tie omitted (false)", v_tie_omitted},
    {"A_log/norm bf16, no rope fields", v_bf16_special_rounded},
    {"sharded x2 legacy packed", v_sharded_one},
};
#define N_VARIANTS ((int)(sizeof VARIANTS / sizeof VARIANTS[0]))

/* every weight of m starts at a 64-byte boundary (qc_st_open's layout, the owned buffers):
 * no 512-bit load of a row splits a cache line */
static void assert_aligned(const qc_model *m) {
    ck_assert_uint_eq((uintptr_t)m->embed.data % 64, 0);
    ck_assert_uint_eq((uintptr_t)m->lm_head.data % 64, 0);
    for (int li = 0; li < m->cfg.n_layers; li++)
        for (int k = 0; k < N_FIELDS; k++) {
            const qc_tensor *x = fld(m, li, k);
            if (x->ndim) ck_assert_msg((uintptr_t)x->data % 64 == 0, "layer %d field %d", li, k);
        }
}

START_TEST(test_variant) {
    const variant *v = &VARIANTS[_i];
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o);
    v->tweak(&o);
    write_model(g_dir, &o);
    qc_model *m = load_ok(g_dir);
    assert_aligned(m);
    /* config as written */
    qc_model *ref = NULL;
    qc_err e;
    ck_assert_int_eq(qc_testmodel_reference(&o, &ref, &e), QC_OK);
    const qc_config *c = &m->cfg, *r = &ref->cfg;
    ck_assert_int_eq(c->n_layers, o.cfg.n_layers);
    ck_assert_int_eq(c->nested, o.nested);
    ck_assert_int_eq(c->tie_word_embeddings, o.cfg.tie_word_embeddings);
    ck_assert_int_eq(c->lin_n_v_heads, o.cfg.lin_n_v_heads);
    ck_assert_double_eq(c->rope_theta, o.omit_rope ? 10000.0 : o.cfg.rope_theta);
    ck_assert_int_eq(c->rotary_dim, o.omit_rope ? o.cfg.head_dim / 4 : o.cfg.rotary_dim);
    for (int i = 0; i < c->n_layers; i++) ck_assert_int_eq(c->layer_types[i], r->layer_types[i]);
    if (o.use_interval) {
        int iv = o.interval ? o.interval : 4;
        for (int i = 0; i < c->n_layers; i++)
            ck_assert_int_eq(c->layer_types[i], (i + 1) % iv == 0); /* HF rule, by hand */
    }
    qc_model_free(ref);
    /* values */
    check_against_reference(m, &o);
    if (o.conv_2d)
        for (int li = 0; li < c->n_layers; li++)
            if (c->layer_types[li] == QC_LAYER_LINEAR) {
                ck_assert_int_eq(m->layers[li].conv1d.ndim, 3);
                ck_assert_int_eq(m->layers[li].conv1d.shape[1], 1);
            }
    if (!o.f32_special) ck_assert_int_eq(m->layers[0].A_log.dtype, o.dtype);
    else ck_assert_int_eq(m->layers[0].A_log.dtype, QC_F32);
    ck_assert_int_eq(m->layers[0].in_proj_qkv.dtype, o.dtype);
    /* counts */
    int nlin = 0;
    for (int i = 0; i < c->n_layers; i++) nlin += c->layer_types[i] == QC_LAYER_LINEAR;
    int want = expected_count(c) + ((!o.cfg.tie_word_embeddings || o.write_lm_head) ? 1 : 0) -
               (o.legacy_packed ? 2 * nlin : 0);
    ck_assert_int_eq(m->n_tensors_loaded, want);
    ck_assert_int_eq(m->n_tensors_skipped, o.n_visual + o.n_mtp);
    ck_assert_int_eq(m->legacy_packed, o.legacy_packed);
    /* provenance */
    char hex[65];
    const char *cfgname[] = {"config.json"};
    sha_files(g_dir, cfgname, 1, hex);
    ck_assert_str_eq(m->config_sha256, hex);
    if (o.n_shards <= 1) {
        const char *w[] = {"model.safetensors"};
        sha_files(g_dir, w, 1, hex);
    } else if (o.n_shards == 2) {
        const char *w[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
        sha_files(g_dir, w, 2, hex);
    } else {
        const char *w[] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                           "model-00003-of-00003.safetensors"};
        sha_files(g_dir, w, 3, hex);
    }
    ck_assert_str_eq(m->weights_sha256, hex);
    ck_assert_str_eq(m->dir, g_dir);
    qc_model_free(m);
}
END_TEST

/* Legacy packed: the split tensors equal the twin split checkpoint element for element. */
static void packed_twin(int nv, int dv, qc_dtype dt) {
    char d2[600];
    snprintf(d2, sizeof d2, "%s/split", g_dir);
    ck_assert_int_eq(mkdir(d2, 0700), 0);
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o);
    o.cfg.lin_n_v_heads = nv, o.cfg.lin_v_dim = dv, o.dtype = dt, o.seed = 99;
    write_model(d2, &o);
    o.legacy_packed = 1;
    write_model(g_dir, &o);
    qc_model *a = load_ok(g_dir), *b = load_ok(d2);
    ck_assert_int_eq(a->legacy_packed, 1);
    ck_assert_int_eq(b->legacy_packed, 0);
    for (int li = 0; li < a->cfg.n_layers; li++)
        for (int k = 0; k < N_FIELDS; k++) {
            char what[96];
            snprintf(what, sizeof what, "layer %d %s", li, FIELDS[k].name);
            const qc_tensor *x = fld(a, li, k), *y = fld(b, li, k);
            ck_assert_int_eq(x->ndim, y->ndim);
            if (x->ndim) ck_assert_msg(qc_testmodel_tensor_equal(x, y, what), "%s", what);
        }
    /* the packed copy lives in owned buffers, not in the mmap */
    ck_assert_ptr_ne(a->layers[0].in_proj_qkv.data, b->layers[0].in_proj_qkv.data);
    ck_assert_int_eq(a->n_tensors_loaded, b->n_tensors_loaded - 2 * 3);
    qc_model_free(a);
    qc_model_free(b);
    qc_testmodel_rmtree(d2);
}

START_TEST(test_packed_twin_nv2) { packed_twin(4, 6, QC_BF16); }
END_TEST
START_TEST(test_packed_twin_nv1) { packed_twin(2, 8, QC_F32); }
END_TEST
START_TEST(test_packed_twin_nv3) { packed_twin(6, 4, QC_F16); }
END_TEST

/* Packed layout checked against the spec 3.7 formula directly (not through the writer). */
START_TEST(test_packed_layout_by_hand) {
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o);
    o.dtype = QC_F32, o.legacy_packed = 1;
    write_model(g_dir, &o);
    qc_model *m = load_ok(g_dir);
    /* read the packed tensor straight from the file */
    char p[700];
    snprintf(p, sizeof p, "%s/model.safetensors", g_dir);
    FILE *f = fopen(p, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n);
    ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | buf[i];
    const char *key = "\"model.language_model.layers.1.linear_attn.in_proj_qkvz.weight\"";
    char *hdr = strndup((char *)buf + 8, hl);
    char *k = strstr(hdr, key);
    ck_assert_ptr_nonnull(k);
    char *offs = strstr(k, "data_offsets");
    long b0 = 0;
    ck_assert_int_eq(sscanf(offs, "data_offsets\":[%ld", &b0), 1);
    const float *qkvz = (const float *)(buf + 8 + hl + b0);
    /* nk 2, dk 8, r 2, dv 6, H 32: group rows = 2*8 + 2*2*6 = 40 */
    const qc_tensor *qkv = &m->layers[1].in_proj_qkv, *z = &m->layers[1].in_proj_z;
    for (int g = 0; g < 2; g++)
        for (int col = 0; col < 32; col += 7) {
            const float *G = qkvz + (size_t)g * 40 * 32;
            ck_assert(qc_tensor_get(qkv, (size_t)(g * 8 + 3) * 32 + col) == G[3 * 32 + col]);      /* q */
            ck_assert(qc_tensor_get(qkv, (size_t)(16 + g * 8 + 5) * 32 + col) == G[(8 + 5) * 32 + col]); /* k */
            ck_assert(qc_tensor_get(qkv, (size_t)(32 + g * 12 + 11) * 32 + col) ==
                      G[(16 + 11) * 32 + col]); /* v: last row of the group's r*dv block */
            ck_assert(qc_tensor_get(z, (size_t)(g * 12 + 0) * 32 + col) == G[(28 + 0) * 32 + col]);
        }
    free(hdr);
    free(buf);
    qc_model_free(m);
}
END_TEST

/* ==== Rejections ==== */

#define P "model.language_model."

static void write_fault(const char *omit, const char *extra, const char *bad, int untied) {
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o);
    o.omit = omit, o.extra = extra, o.bad_shape = bad;
    if (untied) o.cfg.tie_word_embeddings = 0;
    write_model(g_dir, &o);
}

START_TEST(test_missing) {
    char file[700];
    snprintf(file, sizeof file, "%s/model.safetensors", g_dir);
    write_fault(P "layers.1.linear_attn.A_log", NULL, NULL, 0);
    load_fails(g_dir, QC_ERR_MISSING, file, P "layers.1.linear_attn.A_log: missing");
    write_fault(P "embed_tokens.weight", NULL, NULL, 0);
    load_fails(g_dir, QC_ERR_MISSING, file, P "embed_tokens.weight: missing");
    write_fault(P "norm.weight", NULL, NULL, 0);
    load_fails(g_dir, QC_ERR_MISSING, P "norm.weight: missing", NULL);
    write_fault(P "layers.3.self_attn.k_norm.weight", NULL, NULL, 0);
    load_fails(g_dir, QC_ERR_MISSING, P "layers.3.self_attn.k_norm.weight: missing", NULL);
    write_fault("lm_head.weight", NULL, NULL, 1);
    load_fails(g_dir, QC_ERR_MISSING, "lm_head.weight: missing (tie_word_embeddings is false)", file);
}
END_TEST

START_TEST(test_unknown) {
    char file[700];
    snprintf(file, sizeof file, "%s/model.safetensors", g_dir);
    write_fault(NULL, P "layers.0.mlp.extra_proj.weight", NULL, 0);
    load_fails(g_dir, QC_ERR_UNKNOWN, file, P "layers.0.mlp.extra_proj.weight: unknown tensor");
    write_fault(NULL, "optimizer.state", NULL, 0);
    load_fails(g_dir, QC_ERR_UNKNOWN, "optimizer.state: unknown tensor", NULL);
    write_fault(NULL, P "layers.0.linear_attn.conv1d.bias", NULL, 0);
    load_fails(g_dir, QC_ERR_UNKNOWN, P "layers.0.linear_attn.conv1d.bias: unknown tensor", NULL);
    write_fault(NULL, P "layers.9.input_layernorm.weight", NULL, 0);
    load_fails(g_dir, QC_ERR_UNKNOWN, P "layers.9.input_layernorm.weight",
               "layer 9 >= num_hidden_layers 4");
    write_fault(NULL, P "layers.01.input_layernorm.weight", NULL, 0);
    load_fails(g_dir, QC_ERR_UNKNOWN, P "layers.01.input_layernorm.weight: unknown tensor", NULL);
    write_fault(NULL, P "layers.0.self_attn.q_norm.weight", NULL, 0);
    load_fails(g_dir, QC_ERR_UNKNOWN, P "layers.0.self_attn.q_norm.weight",
               "layer 0 is linear_attention");
    write_fault(NULL, P "layers.3.linear_attn.A_log", NULL, 0);
    load_fails(g_dir, QC_ERR_UNKNOWN, P "layers.3.linear_attn.A_log", "layer 3 is full_attention");
    /* mixed prefixes */
    write_fault(NULL, "model.layers.0.input_layernorm.weight", NULL, 0);
    load_fails(g_dir, QC_ERR_UNKNOWN, "model.layers.0.input_layernorm.weight: unknown tensor",
               "prefix model.language_model.");
    /* a split tensor next to the packed layout */
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o);
    o.legacy_packed = 1, o.extra = P "layers.2.linear_attn.in_proj_z.weight";
    write_model(g_dir, &o);
    load_fails(g_dir, QC_ERR_UNKNOWN, P "layers.2.linear_attn.in_proj_z.weight",
               "packed in_proj_qkvz");
    /* packed with one half missing */
    qc_testmodel_defaults(&o);
    o.legacy_packed = 1, o.omit = P "layers.0.linear_attn.in_proj_ba.weight";
    write_model(g_dir, &o);
    load_fails(g_dir, QC_ERR_MISSING, P "layers.0.linear_attn.in_proj_ba.weight: missing", NULL);
}
END_TEST

START_TEST(test_shape) {
    /* defaults: C = 2*2*8 + 4*6 = 56, H 32, V 64, I 48 */
    write_fault(NULL, NULL, P "layers.0.linear_attn.in_proj_qkv.weight", 0);
    load_fails(g_dir, QC_ERR_SHAPE, P "layers.0.linear_attn.in_proj_qkv.weight: shape [57,32] != [56,32]",
               "/model.safetensors");
    write_fault(NULL, NULL, P "norm.weight", 0);
    load_fails(g_dir, QC_ERR_SHAPE, P "norm.weight: shape [33] != [32]", NULL);
    write_fault(NULL, NULL, P "embed_tokens.weight", 0);
    load_fails(g_dir, QC_ERR_SHAPE, P "embed_tokens.weight: shape [65,32] != [64,32]", NULL);
    write_fault(NULL, NULL, "lm_head.weight", 1);
    load_fails(g_dir, QC_ERR_SHAPE, "lm_head.weight: shape [65,32] != [64,32]", NULL);
    write_fault(NULL, NULL, P "layers.2.linear_attn.conv1d.weight", 0);
    load_fails(g_dir, QC_ERR_SHAPE, P "layers.2.linear_attn.conv1d.weight: shape [57,1,4] != [56,1,4]", NULL);
    write_fault(NULL, NULL, P "layers.3.self_attn.q_proj.weight", 0);
    load_fails(g_dir, QC_ERR_SHAPE, P "layers.3.self_attn.q_proj.weight: shape [65,32] != [64,32]", NULL);
    write_fault(NULL, NULL, P "layers.1.linear_attn.A_log", 0);
    load_fails(g_dir, QC_ERR_SHAPE, P "layers.1.linear_attn.A_log: shape [5] != [4]", NULL);
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o);
    o.legacy_packed = 1, o.bad_shape = P "layers.1.linear_attn.in_proj_qkvz.weight";
    write_model(g_dir, &o);
    load_fails(g_dir, QC_ERR_SHAPE, P "layers.1.linear_attn.in_proj_qkvz.weight: shape [81,32] != [80,32]",
               NULL);
}
END_TEST

START_TEST(test_packaging) {
    char p[700], q[700];
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o);
    /* no config.json */
    write_model(g_dir, &o);
    snprintf(p, sizeof p, "%s/config.json", g_dir);
    unlink(p);
    load_fails(g_dir, QC_ERR_MISSING, "/config.json: cannot open", NULL);
    /* malformed config: the parser's message names config.json and the field */
    write_model(g_dir, &o);
    replace_in_file(p, "\"linear_num_value_heads\":\t4", "\"linear_num_value_heads\":\t3");
    load_fails(g_dir, QC_ERR_FORMAT, "/config.json: text_config.linear_num_value_heads: 3 is not a multiple",
               NULL);
    /* config dims disagree with the weights */
    write_model(g_dir, &o);
    replace_in_file(p, "\"hidden_size\":\t32", "\"hidden_size\":\t16");
    load_fails(g_dir, QC_ERR_SHAPE, "embed_tokens.weight: shape [64,32] != [64,16]", NULL);
    /* no weights */
    write_model(g_dir, &o);
    snprintf(q, sizeof q, "%s/model.safetensors", g_dir);
    unlink(q);
    load_fails(g_dir, QC_ERR_MISSING, "neither model.safetensors nor model.safetensors.index.json", NULL);
    /* truncated weights file */
    write_model(g_dir, &o);
    ck_assert_int_eq(truncate(q, 4000), 0);
    load_fails(g_dir, QC_ERR_FORMAT, "/model.safetensors: ", NULL);
    /* nonexistent directory / empty argument */
    load_fails("/nonexistent-qc-model", QC_ERR_MISSING, "/nonexistent-qc-model/config.json", NULL);
    load_fails("", QC_ERR_ARG, NULL, NULL);
    /* a trailing slash is fine */
    write_model(g_dir, &o);
    snprintf(p, sizeof p, "%s/", g_dir);
    qc_model *m = load_ok(p);
    ck_assert_str_eq(m->dir, g_dir);
    qc_model_free(m);
}
END_TEST

START_TEST(test_sharded_errors) {
    char idx[700], shard[700];
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o);
    o.n_shards = 2;
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", g_dir);
    snprintf(shard, sizeof shard, "%s/model-00002-of-00002.safetensors", g_dir);
#define T_IN_1 "\"" P "embed_tokens.weight\":\t\"model-00001-of-00002.safetensors\""
    const char *t_in_1 = T_IN_1;
    /* the index puts a tensor in the wrong shard */
    write_model(g_dir, &o);
    replace_in_file(idx, t_in_1, "\"" P "embed_tokens.weight\":\t\"model-00002-of-00002.safetensors\"");
    load_fails(g_dir, QC_ERR_MISSING, shard, P "embed_tokens.weight: listed in");
    /* a shard name that escapes the directory */
    write_model(g_dir, &o);
    replace_in_file(idx, t_in_1, "\"" P "embed_tokens.weight\":\t\"../model-00001-of-00002.safetensors\"");
    load_fails(g_dir, QC_ERR_FORMAT, "weight_map." P "embed_tokens.weight: shard \"../model", "plain file name");
    write_model(g_dir, &o);
    replace_in_file(idx, t_in_1, "\"" P "embed_tokens.weight\":\t\"sub/x.safetensors\"");
    load_fails(g_dir, QC_ERR_FORMAT, "not a plain file name", NULL);
    /* a listed shard that does not exist */
    write_model(g_dir, &o);
    replace_in_file(idx, t_in_1, "\"" P "embed_tokens.weight\":\t\"model-00009.safetensors\"");
    load_fails(g_dir, QC_ERR_IO, "/model-00009.safetensors: cannot open", NULL);
    /* a stored tensor the index does not list */
    write_model(g_dir, &o);
    replace_in_file(idx, t_in_1 , "\"zzz.unused\":\t\"model-00001-of-00002.safetensors\"");
    load_fails(g_dir, QC_ERR_MISSING, "zzz.unused: listed in", NULL);
    write_model(g_dir, &o);
    replace_in_file(idx, "\"weight_map\"", "\"weight_mop\"");
    load_fails(g_dir, QC_ERR_MISSING, "model.safetensors.index.json: weight_map: missing", NULL);
    write_model(g_dir, &o);
    replace_in_file(idx, "{", "[");
    load_fails(g_dir, QC_ERR_FORMAT, "model.safetensors.index.json: not well-formed JSON", NULL);
    /* the index omits a stored tensor */
    write_model(g_dir, &o);
    replace_in_file(idx, T_IN_1 ",", "");
    load_fails(g_dir, QC_ERR_FORMAT, P "embed_tokens.weight: not listed in the index weight_map", NULL);
    /* a missing tensor in a sharded checkpoint names the index */
    o.omit = P "layers.0.mlp.up_proj.weight";
    write_model(g_dir, &o);
    load_fails(g_dir, QC_ERR_MISSING, "model.safetensors.index.json: " P "layers.0.mlp.up_proj.weight: missing",
               NULL);
}
END_TEST

/* ==== External checkpoint: hf-tiny-a (written by HF transformers) ==== */

START_TEST(test_hf_tiny_a) {
    const char *dir = QC_SOURCE_DIR "/tests/data/hf-tiny-a";
    char p[1024];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (access(p, R_OK) != 0) {
        printf("note: %s absent; hf-tiny-a check skipped\n", dir);
        return;
    }
    qc_model *m = load_ok(dir);
    const qc_config *c = &m->cfg;
    /* values from its README / config.json */
    ck_assert_int_eq(c->nested, 1);
    ck_assert_int_eq(c->vocab_size, 512);
    ck_assert_int_eq(c->hidden_size, 64);
    ck_assert_int_eq(c->intermediate_size, 128);
    ck_assert_int_eq(c->n_layers, 4);
    ck_assert_int_eq(c->n_heads, 4);
    ck_assert_int_eq(c->n_kv_heads, 2);
    ck_assert_int_eq(c->head_dim, 16);
    ck_assert_int_eq(c->lin_n_k_heads, 2);
    ck_assert_int_eq(c->lin_n_v_heads, 2);
    ck_assert_int_eq(c->lin_k_dim, 16);
    ck_assert_int_eq(c->lin_v_dim, 16);
    ck_assert_int_eq(c->conv_kernel, 4);
    ck_assert_double_eq(c->rope_theta, 10000.0);
    ck_assert_double_eq(c->partial_rotary_factor, 0.5);
    ck_assert_int_eq(c->rotary_dim, 8);
    ck_assert_double_eq(c->rms_eps, 1e-6);
    ck_assert_int_eq(c->tie_word_embeddings, 1);
    ck_assert_int_eq(c->layer_types[0], QC_LAYER_LINEAR);
    ck_assert_int_eq(c->layer_types[2], QC_LAYER_LINEAR);
    ck_assert_int_eq(c->layer_types[3], QC_LAYER_FULL);
    ck_assert_int_eq(m->n_tensors_loaded, 55); /* 2 + 3 x 14 + 11 */
    ck_assert_int_eq(m->n_tensors_skipped, 0);
    ck_assert_ptr_eq(m->lm_head.data, m->embed.data);
    ck_assert_int_eq(m->embed.dtype, QC_F32);
    ck_assert_int_eq(m->layers[0].conv1d.shape[0], 96);
    ck_assert_int_eq(m->layers[0].conv1d.shape[2], 4);
    ck_assert_int_eq(m->layers[3].q_proj.shape[0], 128);
    ck_assert_uint_eq(qc_model_weight_bytes(m), 723056); /* the file's data region */
    /* first embedding value, read here from the file at 8 + header length */
    FILE *f = fopen(p, "rb");
    unsigned char h8[8];
    ck_assert_int_eq(fread(h8, 1, 8, f), 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | h8[i];
    fseek(f, (long)(8 + hl), SEEK_SET);
    float v0;
    ck_assert_int_eq(fread(&v0, 4, 1, f), 1);
    fclose(f);
    ck_assert(qc_tensor_get(&m->embed, 0) == v0);
    ck_assert_str_eq(m->config_sha256, "f489bdd89e7d8576d56ec1cd8e7e5d2799cea01c75390529cc09efe9d19e7ba6"); /* sha256sum of config.json */
    /* sha256sum (coreutils) of the file */
    ck_assert_str_eq(m->weights_sha256, "dc06e06c46d5663d2d19cef92df8a19cecd830b71330b40ad31e20d0d9c6ff05");
    qc_model_free(m);
}
END_TEST

/* ==== Synthetic ==== */

static double mean_of(const qc_tensor *t, double *sd) {
    size_t n = qc_tensor_numel(t);
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        double v = qc_tensor_get(t, i);
        s += v, s2 += v * v;
    }
    double m = s / (double)n;
    *sd = sqrt(s2 / (double)n - m * m);
    return m;
}

START_TEST(test_synthetic) {
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o);
    qc_config c = o.cfg;
    c.hidden_size = 256, c.intermediate_size = 512, c.vocab_size = 1000, c.lin_n_v_heads = 16,
    c.lin_n_k_heads = 8;
    qc_model *a, *b, *d;
    qc_err e;
    omp_set_num_threads(1);
    ck_assert_int_eq(qc_model_synthetic(&c, QC_BF16, 5, &a, &e), QC_OK);
    omp_set_num_threads(2);
    ck_assert_int_eq(qc_model_synthetic(&c, QC_BF16, 5, &b, &e), QC_OK);
    ck_assert_int_eq(qc_model_synthetic(&c, QC_BF16, 6, &d, &e), QC_OK);
    /* deterministic, independent of the thread count; another seed differs */
    for (int li = 0; li < c.n_layers; li++)
        for (int k = 0; k < N_FIELDS; k++) {
            const qc_tensor *x = fld(a, li, k), *y = fld(b, li, k);
            ck_assert_int_eq(x->ndim, y->ndim);
            if (!x->ndim) continue;
            ck_assert(memcmp(x->data, y->data, qc_tensor_numel(x) * qc_dtype_size(x->dtype)) == 0);
        }
    ck_assert(memcmp(a->embed.data, b->embed.data, 1000 * 256 * 2) == 0);
    ck_assert(memcmp(a->embed.data, d->embed.data, 1000 * 256 * 2) != 0);
    assert_aligned(a);
    /* dtypes and shapes */
    ck_assert_int_eq(a->embed.dtype, QC_BF16);
    ck_assert_int_eq(a->layers[0].A_log.dtype, QC_F32);
    ck_assert_int_eq(a->layers[0].lin_norm.dtype, QC_F32);
    ck_assert_int_eq(a->layers[0].dt_bias.dtype, QC_BF16);
    ck_assert_ptr_eq(a->lm_head.data, a->embed.data); /* tied */
    ck_assert_int_eq(a->layers[3].q_proj.shape[0], 2 * 4 * 8);
    ck_assert_int_eq(a->layers[0].conv1d.ndim, 3);
    ck_assert_int_eq(a->layers[3].in_proj_qkv.ndim, 0);
    ck_assert_int_eq(a->layers[0].q_proj.ndim, 0);
    /* scales */
    double sd, mu;
    mu = mean_of(&a->embed, &sd);
    ck_assert(fabs(mu) < 0.01 && fabs(sd - 1.0 / 16.0) < 0.003);
    mu = mean_of(&a->layers[0].mlp_down, &sd);
    ck_assert(fabs(sd - 1.0 / sqrt(512.0)) < 0.003);
    mu = mean_of(&a->layers[0].input_norm, &sd);
    ck_assert(fabs(mu) < 0.03 && fabs(sd - 0.1) < 0.03);
    mu = mean_of(&a->layers[0].lin_norm, &sd);
    ck_assert(fabs(mu - 1.0) < 0.1);
    mu = mean_of(&a->layers[0].dt_bias, &sd);
    ck_assert(sd > 0.25 && sd < 0.8);
    float lo = 1e9f, hi = -1e9f;
    for (int j = 0; j < 16; j++) {
        float A = expf(qc_tensor_get(&a->layers[0].A_log, (size_t)j));
        lo = fminf(lo, A), hi = fmaxf(hi, A);
    }
    ck_assert(lo >= 0.05f && lo < 0.1f && hi <= 8.0f && hi > 4.0f); /* fast to slow */
    /* weight bytes, counted by hand: embed + final norm + 3 linear + 1 full layer */
    size_t H = 256, I = 512, V = 1000, C = 2 * 8 * 8 + 16 * 6, vd = 16 * 6;
    size_t every = 2 * H + 3 * I * H;
    size_t lin2 = (C * H + vd * H + 2 * 16 * H + C * 4 + 16 + H * vd) * 2 + (16 + 6) * 4;
    size_t full2 = (64 * H + 2 * 16 * H + H * 32 + 2 * 8) * 2;
    size_t want = (V * H + H) * 2 + 3 * (every * 2 + lin2) + every * 2 + full2;
    ck_assert_uint_eq(qc_model_weight_bytes(a), want);
    qc_model_free(a);
    qc_model_free(b);
    qc_model_free(d);
    /* bad configs */
    c.lin_n_v_heads = 3;
    ck_assert_int_eq(qc_model_synthetic(&c, QC_F32, 1, &a, &e), QC_ERR_ARG);
    ck_assert_ptr_null(a);
    c.lin_n_v_heads = 16, c.n_layers = 0;
    ck_assert_int_eq(qc_model_synthetic(&c, QC_F32, 1, &a, &e), QC_ERR_ARG);
}
END_TEST

int main(void) {
    Suite *s = suite_create("loader");
    TCase *ok = tcase_create("accepted");
    tcase_add_checked_fixture(ok, setup, teardown);
    tcase_add_loop_test(ok, test_variant, 0, N_VARIANTS);
    tcase_add_test(ok, test_packed_twin_nv2);
    tcase_add_test(ok, test_packed_twin_nv1);
    tcase_add_test(ok, test_packed_twin_nv3);
    tcase_add_test(ok, test_packed_layout_by_hand);
    tcase_add_test(ok, test_hf_tiny_a);
    suite_add_tcase(s, ok);
    TCase *bad = tcase_create("rejected");
    tcase_add_checked_fixture(bad, setup, teardown);
    tcase_add_test(bad, test_missing);
    tcase_add_test(bad, test_unknown);
    tcase_add_test(bad, test_shape);
    tcase_add_test(bad, test_packaging);
    tcase_add_test(bad, test_sharded_errors);
    suite_add_tcase(s, bad);
    TCase *syn = tcase_create("synthetic");
    tcase_add_test(syn, test_synthetic);
    suite_add_tcase(s, syn);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
