/* test_moe_loader.c — Qwen3.5-MoE checkpoints through qc_model_load: the hub's fused expert
 * tensors (experts.gate_up_proj / experts.down_proj, no .weight) and the per-expert layout
 * (stacked at load), nested / flat configs, single file / sharded, F32 / BF16 — every loaded
 * tensor compared element for element with the values written; then every malformed MoE
 * checkpoint of issue #15 ("Bad input") refused with the file and the tensor / field named;
 * qc_model_validate and qc_model_weight_bytes on synthetic MoE models.
 *
 * The checkpoints are written here from a qc_model_synthetic MoE model with a test-local name
 * table (independent of the loader's). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_config.h"
#include "qc/qc_model.h"
#include "qc_testmodel.h"

/* ==== A tiny MoE config ==== */

static qc_config moe_cfg(void) {
    qc_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 64, c.hidden_size = 32, c.n_layers = 4;
    c.n_experts = 8, c.n_experts_per_tok = 2, c.moe_intermediate_size = 16;
    c.shared_expert_intermediate_size = 24;
    c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 8;
    c.lin_n_k_heads = 2, c.lin_n_v_heads = 4, c.lin_k_dim = 8, c.lin_v_dim = 6, c.conv_kernel = 4;
    c.rms_eps = 1e-6, c.rope_theta = 10000.0, c.partial_rotary_factor = 0.5, c.rotary_dim = 4;
    c.max_position_embeddings = 4096;
    for (int i = 0; i < 4; i++) c.layer_types[i] = i == 3 ? QC_LAYER_FULL : QC_LAYER_LINEAR;
    return c;
}

/* ==== Checkpoint writer ==== */

typedef struct {
    int nested;             /* qwen3_5_moe + text_config, prefix model.language_model. */
    int per_expert;         /* experts.{e}.{gate,up,down}_proj.weight instead of fused */
    int n_shards;           /* <= 1: model.safetensors; else index + shards */
    qc_dtype dtype;
    const char *omit;       /* name (after the prefix) not written */
    const char *bad_shape;  /* name whose first dim is written +1 */
    const char *extra;      /* name (after the prefix) of an extra [16, 32] tensor */
    const char *dup;        /* name also written into the next shard (and listed twice) */
    const char *bf16_one;   /* per-expert name written BF16 in an F32 model */
    const char *cfg_edit;   /* text inserted into the text config ("\"k\": v, ") */
    int dense_config;       /* write a dense config (intermediate_size 16, no MoE fields) */
} mo_opts;

typedef struct {
    qc_testmodel_tensor *t;
    char (*names)[128];
    void **owned;
    int n, cap;
} tlist;

static void tl_add(tlist *L, const mo_opts *o, const char *pfx, const char *name, qc_dtype dt,
                   int nd, const int64_t *sh, const void *data) {
    if (o->omit && !strcmp(o->omit, name)) return;
    if (L->n == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 256;
        L->t = realloc(L->t, (size_t)L->cap * sizeof *L->t);
        L->names = realloc(L->names, (size_t)L->cap * sizeof *L->names);
        L->owned = realloc(L->owned, (size_t)L->cap * sizeof *L->owned);
    }
    qc_testmodel_tensor *t = &L->t[L->n];
    snprintf(L->names[L->n], 128, "%s%s", strcmp(name, "lm_head.weight") ? pfx : "", name);
    t->name = L->names[L->n];
    t->dtype = dt, t->ndim = nd;
    for (int i = 0; i < 4; i++) t->shape[i] = i < nd ? sh[i] : 0;
    t->data = data;
    L->owned[L->n] = NULL;
    size_t numel = 1;
    for (int i = 0; i < nd; i++) numel *= (size_t)sh[i];
    if (o->bad_shape && !strcmp(o->bad_shape, name)) { /* first dim + 1: fresh zero data */
        t->shape[0]++;
        numel = numel / (size_t)sh[0] * (size_t)(sh[0] + 1);
        t->data = L->owned[L->n] = calloc(numel, qc_dtype_size(dt));
    }
    if (o->bf16_one && !strcmp(o->bf16_one, name) && dt == QC_F32) {
        uint16_t *b = malloc(numel * 2);
        for (size_t i = 0; i < numel; i++) b[i] = qc_f32_to_bf16(((const float *)data)[i]);
        t->dtype = QC_BF16;
        t->data = L->owned[L->n] = b;
    }
    L->n++;
}

static void add_view(tlist *L, const mo_opts *o, const char *pfx, const char *name,
                     const qc_tensor *v) {
    tl_add(L, o, pfx, name, v->dtype, v->ndim, v->shape, v->data);
}

/* Every tensor of m under the hub names. */
static void collect(tlist *L, const mo_opts *o, const qc_model *m, const char *pfx) {
    const qc_config *c = &m->cfg;
    char nm[128];
    add_view(L, o, pfx, "embed_tokens.weight", &m->embed);
    add_view(L, o, pfx, "norm.weight", &m->final_norm);
    add_view(L, o, pfx, "lm_head.weight", &m->lm_head);
    static const struct {
        const char *n;
        size_t off;
    } F[] = {
#define X(n, f) {n, offsetof(qc_layer_weights, f)}
        X("input_layernorm.weight", input_norm), X("post_attention_layernorm.weight", post_norm),
        X("self_attn.q_proj.weight", q_proj), X("self_attn.k_proj.weight", k_proj),
        X("self_attn.v_proj.weight", v_proj), X("self_attn.o_proj.weight", o_proj),
        X("self_attn.q_norm.weight", q_norm), X("self_attn.k_norm.weight", k_norm),
        X("linear_attn.in_proj_qkv.weight", in_proj_qkv), X("linear_attn.in_proj_z.weight", in_proj_z),
        X("linear_attn.in_proj_b.weight", in_proj_b), X("linear_attn.in_proj_a.weight", in_proj_a),
        X("linear_attn.conv1d.weight", conv1d), X("linear_attn.dt_bias", dt_bias),
        X("linear_attn.A_log", A_log), X("linear_attn.norm.weight", lin_norm),
        X("linear_attn.out_proj.weight", out_proj), X("mlp.gate.weight", router),
        X("mlp.shared_expert.gate_proj.weight", sh_gate), X("mlp.shared_expert.up_proj.weight", sh_up),
        X("mlp.shared_expert.down_proj.weight", sh_down),
        X("mlp.shared_expert_gate.weight", sh_expert_gate),
#undef X
    };
    for (int li = 0; li < c->n_layers; li++) {
        const qc_layer_weights *w = &m->layers[li];
        for (size_t k = 0; k < sizeof F / sizeof F[0]; k++) {
            const qc_tensor *v = (const qc_tensor *)((const char *)w + F[k].off);
            if (!v->ndim) continue; /* the other mixer kind */
            snprintf(nm, sizeof nm, "layers.%d.%s", li, F[k].n);
            add_view(L, o, pfx, nm, v);
        }
        if (!o->per_expert) {
            snprintf(nm, sizeof nm, "layers.%d.mlp.experts.gate_up_proj", li);
            add_view(L, o, pfx, nm, &w->exp_gate_up);
            snprintf(nm, sizeof nm, "layers.%d.mlp.experts.down_proj", li);
            add_view(L, o, pfx, nm, &w->exp_down);
            continue;
        }
        const int64_t Ie = c->moe_intermediate_size, H = c->hidden_size;
        const size_t es = qc_dtype_size(w->exp_gate_up.dtype), mat = (size_t)(Ie * H) * es;
        const int64_t sg[2] = {Ie, H}, sd[2] = {H, Ie};
        for (int e = 0; e < c->n_experts; e++) {
            const uint8_t *gu = (const uint8_t *)w->exp_gate_up.data + (size_t)e * 2 * mat;
            const uint8_t *dn = (const uint8_t *)w->exp_down.data + (size_t)e * mat;
            snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.gate_proj.weight", li, e);
            tl_add(L, o, pfx, nm, w->exp_gate_up.dtype, 2, sg, gu);
            snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.up_proj.weight", li, e);
            tl_add(L, o, pfx, nm, w->exp_gate_up.dtype, 2, sg, gu + mat);
            snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%d.down_proj.weight", li, e);
            tl_add(L, o, pfx, nm, w->exp_down.dtype, 2, sd, dn);
        }
    }
    if (o->extra) {
        static float zeros[16 * 32];
        const int64_t sh[2] = {16, 32};
        tl_add(L, o, pfx, o->extra, QC_F32, 2, sh, zeros);
    }
}

static void write_text(const char *path, const char *s) {
    qc_err e;
    ck_assert_int_eq(qc_testmodel_write_file(path, s, strlen(s), &e), QC_OK);
}

/* config.json: qc_config_to_json (flat), edited and nested as asked. */
static void write_config(const char *dir, const qc_config *cfg, const mo_opts *o) {
    qc_config c = *cfg;
    if (o->dense_config) c.n_experts = c.n_experts_per_tok = 0, c.intermediate_size = 16;
    if (o->dense_config) c.moe_intermediate_size = c.shared_expert_intermediate_size = 0;
    char *js = NULL, path[600], *buf = malloc(1 << 16);
    qc_err e;
    ck_assert_int_eq(qc_config_to_json(&c, &js, &e), QC_OK);
    const char *body = strchr(js, '{') + 1;
    const char *extra = o->cfg_edit ? o->cfg_edit : "";
    if (o->nested)
        snprintf(buf, 1 << 16,
                 "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"tie_word_embeddings\": "
                 "false, \"text_config\": {%s%s}",
                 o->dense_config ? "Qwen3_5ForConditionalGeneration"
                                 : "Qwen3_5MoeForConditionalGeneration",
                 o->dense_config ? "qwen3_5" : "qwen3_5_moe", extra, body);
    else
        snprintf(buf, 1 << 16, "{%s%s", extra, body);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, buf);
    free(js);
    free(buf);
}

static void write_moe(const char *dir, const qc_model *m, const mo_opts *o) {
    tlist L = {0};
    const char *pfx = o->nested ? "model.language_model." : "model.";
    collect(&L, o, m, pfx);
    write_config(dir, &m->cfg, o);
    char path[600];
    qc_err e;
    int ns = o->n_shards > 1 ? o->n_shards : 1;
    if (ns == 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        ck_assert_msg(qc_testmodel_write_safetensors(path, L.t, L.n, &e) == QC_OK, "%s", e.msg);
    } else {
        /* round-robin tensors over the shards; the index lists each in its shard */
        size_t cap = 1 << 20, k = 0;
        char *idx = malloc(cap);
        k += (size_t)snprintf(idx + k, cap - k, "{\"metadata\": {}, \"weight_map\": {");
        qc_testmodel_tensor *sub = malloc((size_t)(L.n + 1) * sizeof *sub);
        for (int s = 0; s < ns; s++) {
            int n = 0;
            for (int i = 0; i < L.n; i++) {
                int dup_here = o->dup && strstr(L.t[i].name, o->dup) &&
                               !strcmp(strstr(L.t[i].name, o->dup), o->dup) && s == (i + 1) % ns;
                if (i % ns != s && !dup_here) continue;
                sub[n++] = L.t[i];
                k += (size_t)snprintf(idx + k, cap - k, "%s\"%s\": \"model-%05d-of-%05d.safetensors\"",
                                      k > 40 ? ", " : "", L.t[i].name, s + 1, ns);
            }
            snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, s + 1, ns);
            ck_assert_msg(qc_testmodel_write_safetensors(path, sub, n, &e) == QC_OK, "%s", e.msg);
        }
        snprintf(idx + k, cap - k, "}}");
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        write_text(path, idx);
        free(idx);
        free(sub);
    }
    for (int i = 0; i < L.n; i++) free(L.owned[i]);
    free(L.t);
    free(L.names);
    free(L.owned);
}

/* ==== Fixture ==== */

static char g_dir[512];
static qc_model *g_src; /* the synthetic model written */

static void setup(void) {
    qc_err e;
    ck_assert_int_eq(qc_testmodel_mkdtemp(g_dir, sizeof g_dir, "moeload", &e), QC_OK);
    g_src = NULL;
}

static void teardown(void) {
    qc_model_free(g_src);
    qc_testmodel_rmtree(g_dir);
}

static void make(const mo_opts *o) {
    qc_config c = moe_cfg();
    qc_err e;
    ck_assert_msg(qc_model_synthetic(&c, o->dtype, 7, &g_src, &e) == QC_OK, "%s", e.msg);
    write_moe(g_dir, g_src, o);
}

static void expect_fail(const mo_opts *o, qc_status code, const char *w1, const char *w2) {
    make(o);
    qc_model *m = (qc_model *)0x1;
    qc_err e;
    qc_err_clear(&e);
    qc_status st = qc_model_load(g_dir, &m, &e);
    ck_assert_msg(st == code, "status %s != %s: %s", qc_status_str(st), qc_status_str(code), e.msg);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(e.msg, w1), "message \"%s\" lacks \"%s\"", e.msg, w1);
    if (w2) ck_assert_msg(strstr(e.msg, w2), "message \"%s\" lacks \"%s\"", e.msg, w2);
}

/* every tensor of the loaded model equals the one written */
static void compare_all(const qc_model *a, const qc_model *b) {
    ck_assert(qc_testmodel_tensor_equal(&a->embed, &b->embed, "embed"));
    ck_assert(qc_testmodel_tensor_equal(&a->lm_head, &b->lm_head, "lm_head"));
    ck_assert(qc_testmodel_tensor_equal(&a->final_norm, &b->final_norm, "norm"));
    for (int li = 0; li < a->cfg.n_layers; li++) {
        const qc_layer_weights *x = &a->layers[li], *y = &b->layers[li];
        ck_assert(qc_testmodel_tensor_equal(&x->router, &y->router, "router"));
        ck_assert(qc_testmodel_tensor_equal(&x->exp_gate_up, &y->exp_gate_up, "gate_up"));
        ck_assert(qc_testmodel_tensor_equal(&x->exp_down, &y->exp_down, "down"));
        ck_assert(qc_testmodel_tensor_equal(&x->sh_gate, &y->sh_gate, "sh_gate"));
        ck_assert(qc_testmodel_tensor_equal(&x->sh_up, &y->sh_up, "sh_up"));
        ck_assert(qc_testmodel_tensor_equal(&x->sh_down, &y->sh_down, "sh_down"));
        ck_assert(qc_testmodel_tensor_equal(&x->sh_expert_gate, &y->sh_expert_gate, "sh_eg"));
        ck_assert(qc_testmodel_tensor_equal(&x->input_norm, &y->input_norm, "input_norm"));
        ck_assert(qc_testmodel_tensor_equal(&x->post_norm, &y->post_norm, "post_norm"));
        ck_assert_int_eq(x->mlp_gate.ndim + x->mlp_up.ndim + x->mlp_down.ndim, 0);
        if (a->cfg.layer_types[li] == QC_LAYER_FULL)
            ck_assert(qc_testmodel_tensor_equal(&x->q_proj, &y->q_proj, "q_proj"));
        else
            ck_assert(qc_testmodel_tensor_equal(&x->in_proj_qkv, &y->in_proj_qkv, "qkv"));
    }
}

/* ==== Accepted layouts ==== */

START_TEST(test_fused_nested_f32) {
    mo_opts o = {.nested = 1, .dtype = QC_F32};
    make(&o);
    qc_model *m = NULL;
    qc_err e;
    ck_assert_msg(qc_model_load(g_dir, &m, &e) == QC_OK, "%s", e.msg);
    ck_assert_int_eq(m->cfg.n_experts, 8);
    ck_assert_int_eq(m->layers[2].exp_gate_up.ndim, 3);
    ck_assert_int_eq(m->layers[2].exp_gate_up.shape[1], 32); /* 2 * Ie */
    /* fused: views into the mapped file, not copies */
    ck_assert_ptr_ne(m->layers[0].exp_gate_up.data, g_src->layers[0].exp_gate_up.data);
    compare_all(m, g_src);
    /* 3 globals + per layer 2 norms + 7 MoE + mixer (9 DeltaNet x3, 6 attention) */
    ck_assert_int_eq(m->n_tensors_loaded, 3 + 4 * 9 + 3 * 9 + 6);
    qc_model_free(m);
}
END_TEST

START_TEST(test_per_expert_flat_bf16_sharded) {
    mo_opts o = {.per_expert = 1, .n_shards = 2, .dtype = QC_BF16};
    make(&o);
    qc_model *m = NULL;
    qc_err e;
    ck_assert_msg(qc_model_load(g_dir, &m, &e) == QC_OK, "%s", e.msg);
    ck_assert_int_eq(m->cfg.nested, 0);
    ck_assert_int_eq(m->layers[1].exp_gate_up.dtype, QC_BF16);
    compare_all(m, g_src); /* the stacked [E, 2Ie, H] / [E, H, Ie] equal the fused source */
    /* spot check by hand: expert 5's up row 3 is gate_up row Ie + 3 of expert 5 */
    const uint16_t *gu = m->layers[1].exp_gate_up.data;
    const uint16_t *src = g_src->layers[1].exp_gate_up.data;
    size_t off = ((size_t)5 * 32 + 16 + 3) * 32 + 7;
    ck_assert_uint_eq(gu[off], src[off]);
    ck_assert_int_eq(m->n_tensors_loaded, 3 + 4 * (2 + 5 + 24) + 3 * 9 + 6);
    qc_model_free(m);
}
END_TEST

START_TEST(test_fused_sharded_bf16_nested) {
    mo_opts o = {.nested = 1, .n_shards = 3, .dtype = QC_BF16};
    make(&o);
    qc_model *m = NULL;
    qc_err e;
    ck_assert_msg(qc_model_load(g_dir, &m, &e) == QC_OK, "%s", e.msg);
    compare_all(m, g_src);
    ck_assert_uint_eq(qc_model_weight_bytes(m), qc_model_weight_bytes(g_src));
    qc_model_free(m);
}
END_TEST

/* ==== Bad input (issue #15) ==== */

START_TEST(test_config_errors) {
    mo_opts o = {.dtype = QC_F32, .cfg_edit = ""};
    /* k > E: qc_config_to_json writes the config's k; edit it by writing it first */
    o.cfg_edit = "\"num_experts_per_tok\": 9, ";
    expect_fail(&o, QC_ERR_FORMAT, "/config.json: num_experts_per_tok: 9 is greater than num_experts 8", NULL);
}
END_TEST

START_TEST(test_router_wrong_experts) {
    mo_opts o = {.nested = 1, .dtype = QC_F32, .bad_shape = "layers.1.mlp.gate.weight"};
    expect_fail(&o, QC_ERR_SHAPE, "/model.safetensors: model.language_model.layers.1.mlp.gate.weight: shape [9,32] != [8,32]", NULL);
}
END_TEST

START_TEST(test_missing_expert) {
    mo_opts o = {.per_expert = 1, .dtype = QC_F32, .omit = "layers.2.mlp.experts.5.up_proj.weight"};
    expect_fail(&o, QC_ERR_MISSING, "/model.safetensors: model.layers.2.mlp.experts.5.up_proj.weight: missing", NULL);
    mo_opts f = {.dtype = QC_F32, .omit = "layers.0.mlp.experts.down_proj"};
    teardown(), setup();
    expect_fail(&f, QC_ERR_MISSING, "model.layers.0.mlp.experts.down_proj: missing", NULL);
    mo_opts r = {.dtype = QC_F32, .omit = "layers.3.mlp.gate.weight", .n_shards = 2};
    teardown(), setup();
    expect_fail(&r, QC_ERR_MISSING, "/model.safetensors.index.json: model.layers.3.mlp.gate.weight: missing", NULL);
}
END_TEST

START_TEST(test_shared_gate_shape) {
    mo_opts o = {.dtype = QC_BF16, .bad_shape = "layers.0.mlp.shared_expert_gate.weight"};
    expect_fail(&o, QC_ERR_SHAPE, "model.layers.0.mlp.shared_expert_gate.weight: shape [2,32] != [1,32]", NULL);
    mo_opts d = {.dtype = QC_BF16, .bad_shape = "layers.3.mlp.experts.down_proj"};
    teardown(), setup();
    expect_fail(&d, QC_ERR_SHAPE, "model.layers.3.mlp.experts.down_proj: shape [9,32,16] != [8,32,16]", NULL);
    mo_opts p = {.per_expert = 1, .dtype = QC_BF16, .bad_shape = "layers.1.mlp.experts.7.down_proj.weight"};
    teardown(), setup();
    expect_fail(&p, QC_ERR_SHAPE, "model.layers.1.mlp.experts.7.down_proj.weight: shape [33,16] != [32,16]", NULL);
}
END_TEST

START_TEST(test_duplicate_in_two_shards) {
    mo_opts o = {.per_expert = 1, .n_shards = 2, .dtype = QC_BF16,
                 .dup = "layers.1.mlp.experts.3.gate_proj.weight"};
    expect_fail(&o, QC_ERR_FORMAT, "model.layers.1.mlp.experts.3.gate_proj.weight", "listed twice");
}
END_TEST

START_TEST(test_both_layouts) {
    mo_opts o = {.dtype = QC_F32, .extra = "layers.2.mlp.experts.0.gate_proj.weight"};
    expect_fail(&o, QC_ERR_FORMAT, "model.layers.2.mlp.experts.0.gate_proj.weight: a per-expert tensor next to the fused", NULL);
}
END_TEST

START_TEST(test_dense_vs_moe) {
    /* a dense config with MoE tensors */
    mo_opts o = {.nested = 1, .dtype = QC_F32, .dense_config = 1};
    expect_fail(&o, QC_ERR_UNKNOWN, "model.language_model.layers.0.mlp.", "a mixture-of-experts tensor, but config.json describes a dense model");
    /* a MoE config with a dense MLP tensor */
    mo_opts r = {.dtype = QC_F32, .extra = "layers.1.mlp.gate_proj.weight"};
    teardown(), setup();
    expect_fail(&r, QC_ERR_UNKNOWN, "model.layers.1.mlp.gate_proj.weight: unknown tensor (a dense MLP tensor", "num_experts 8");
    /* an expert id out of range, a non-canonical id */
    mo_opts x = {.per_expert = 1, .dtype = QC_F32, .extra = "layers.1.mlp.experts.8.up_proj.weight"};
    teardown(), setup();
    expect_fail(&x, QC_ERR_UNKNOWN, "experts.8.up_proj.weight: unknown tensor (expert 8 >= num_experts 8)", NULL);
    mo_opts z = {.per_expert = 1, .dtype = QC_F32, .extra = "layers.1.mlp.experts.03.up_proj.weight"};
    teardown(), setup();
    expect_fail(&z, QC_ERR_UNKNOWN, "experts.03.up_proj.weight: unknown tensor", NULL);
    /* fused names with a .weight suffix are not the hub names */
    mo_opts w = {.dtype = QC_F32, .extra = "layers.0.mlp.experts.gate_up_proj.weight"};
    teardown(), setup();
    expect_fail(&w, QC_ERR_UNKNOWN, "experts.gate_up_proj.weight: unknown tensor", NULL);
}
END_TEST

START_TEST(test_mixed_expert_dtype) {
    mo_opts o = {.per_expert = 1, .dtype = QC_F32, .bf16_one = "layers.0.mlp.experts.6.gate_proj.weight"};
    expect_fail(&o, QC_ERR_FORMAT, "model.layers.0.mlp.experts.6.gate_proj.weight: dtype BF16 != F32", NULL);
}
END_TEST

/* ==== qc_model_synthetic / qc_model_validate / weight bytes ==== */

START_TEST(test_synthetic_validate) {
    qc_config c = moe_cfg();
    qc_model *m = NULL;
    qc_err e;
    ck_assert_msg(qc_model_synthetic(&c, QC_BF16, 3, &m, &e) == QC_OK, "%s", e.msg);
    /* bytes by hand: E=8 H=32 Ie=16 Is=24 V=64; per layer MoE 8*32 + 8*32*32 + 8*32*16 +
     * 3*24*32 + 32, norms 2*32; DeltaNet C=2*16+24=56: 56*32 + 24*32 + 2*4*32 + 56*4 + 4 +
     * 24*32 (bf16) + (4 + 6) f32; attention 64*32 + 2*16*32 + 32*32 + 2*8 */
    size_t moe = (size_t)(8 * 32 + 8 * 32 * 32 + 8 * 32 * 16 + 3 * 24 * 32 + 32) * 2;
    size_t dn = (size_t)(56 * 32 + 24 * 32 + 2 * 4 * 32 + 56 * 4 + 4 + 24 * 32) * 2 + 10 * 4;
    size_t at = (size_t)(64 * 32 + 2 * 16 * 32 + 32 * 32 + 2 * 8) * 2;
    size_t glob = (size_t)(64 * 32 * 2 + 32) * 2;
    ck_assert_uint_eq(qc_model_weight_bytes(m), glob + 4 * (moe + 64 * 2) + 3 * dn + at);
    ck_assert_int_eq(m->layers[0].router.shape[0], 8);
    ck_assert_int_eq(qc_model_validate(m, &e), QC_OK);
    /* tampered views are caught, named */
    qc_layer_weights *w = &m->layers[2];
    w->exp_down.shape[2] = 15;
    ck_assert_int_eq(qc_model_validate(m, &e), QC_ERR_SHAPE);
    ck_assert_str_eq(e.msg, "model: layers.2.mlp.experts.down_proj: shape [8,32,15] != [8,32,16]");
    w->exp_down.shape[2] = 16;
    qc_tensor keep = w->sh_expert_gate;
    memset(&w->sh_expert_gate, 0, sizeof keep);
    ck_assert_int_eq(qc_model_validate(m, &e), QC_ERR_MISSING);
    ck_assert_str_eq(e.msg, "model: layers.2.mlp.shared_expert_gate.weight: missing");
    w->sh_expert_gate = keep;
    w->mlp_gate = w->sh_gate;
    ck_assert_int_eq(qc_model_validate(m, &e), QC_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "layers.2.mlp.gate_proj.weight: present in a mixture-of-experts model"));
    memset(&w->mlp_gate, 0, sizeof w->mlp_gate);
    m->cfg.n_experts_per_tok = 9;
    ck_assert_int_eq(qc_model_validate(m, &e), QC_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "bad MoE geometry (experts 8, per token 9"));
    qc_model_free(m);
    /* k > E is refused by the generator too */
    c.n_experts_per_tok = 9;
    ck_assert_int_eq(qc_model_synthetic(&c, QC_F32, 3, &m, &e), QC_ERR_ARG);
    ck_assert_ptr_null(m);
}
END_TEST

/* The synthetic router spreads tokens over the experts: with random unit-RMS inputs every
 * expert wins top-1 for some token, and no expert wins more than half of them. */
START_TEST(test_synthetic_router_spread) {
    qc_config c = moe_cfg();
    c.hidden_size = 64;
    c.n_experts = 16;
    qc_model *m = NULL;
    qc_err e;
    ck_assert_msg(qc_model_synthetic(&c, QC_F32, 11, &m, &e) == QC_OK, "%s", e.msg);
    const float *W = m->layers[0].router.data;
    int wins[16] = {0};
    uint64_t s = 12345;
    double sum_sq = 0;
    for (int t = 0; t < 512; t++) {
        float x[64];
        for (int i = 0; i < 64; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            x[i] = ((float)(s >> 40) / (float)(1 << 24) - 0.5f) * 3.4641f; /* unit variance */
        }
        int best = 0;
        float bl = -1e30f;
        for (int j = 0; j < 16; j++) {
            float l = 0;
            for (int i = 0; i < 64; i++) l += W[j * 64 + i] * x[i];
            sum_sq += (double)l * l;
            if (l > bl) bl = l, best = j;
        }
        wins[best]++;
    }
    for (int j = 0; j < 16; j++) {
        ck_assert_msg(wins[j] > 0, "expert %d never chosen", j);
        ck_assert_msg(wins[j] < 256, "expert %d chosen %d / 512 times", j, wins[j]);
    }
    double rms = sqrt(sum_sq / (512.0 * 16));
    ck_assert_msg(rms > 0.6 && rms < 1.6, "router logit RMS %g is not ~1", rms);
    qc_model_free(m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("moe_loader");
    TCase *ok = tcase_create("accepted");
    tcase_add_checked_fixture(ok, setup, teardown);
    tcase_add_test(ok, test_fused_nested_f32);
    tcase_add_test(ok, test_per_expert_flat_bf16_sharded);
    tcase_add_test(ok, test_fused_sharded_bf16_nested);
    suite_add_tcase(s, ok);
    TCase *bad = tcase_create("bad_input");
    tcase_add_checked_fixture(bad, setup, teardown);
    tcase_add_test(bad, test_config_errors);
    tcase_add_test(bad, test_router_wrong_experts);
    tcase_add_test(bad, test_missing_expert);
    tcase_add_test(bad, test_shared_gate_shape);
    tcase_add_test(bad, test_duplicate_in_two_shards);
    tcase_add_test(bad, test_both_layouts);
    tcase_add_test(bad, test_dense_vs_moe);
    tcase_add_test(bad, test_mixed_expert_dtype);
    suite_add_tcase(s, bad);
    TCase *syn = tcase_create("synthetic");
    tcase_add_test(syn, test_synthetic_validate);
    tcase_add_test(syn, test_synthetic_router_spread);
    suite_add_tcase(s, syn);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int nf = srunner_ntests_failed(r);
    srunner_free(r);
    return nf ? 1 : 0;
}
