/* test_q8_0.c — Q8_0 weights (llama.cpp blocks of 34 bytes: f16 d + 32 int8):
 *   - the dtype helpers and the quantizer (round trip <= d/2, d * q exact);
 *   - every ISA's matvec and GEMM packing against a naive double loop, and bit for bit against
 *     the same ISA on the dequantized F32 matrix (d * q is exact, the accumulation the same);
 *   - the loader on fixtures/tiny-q8_0 and its faults (a scale without weight, I8 without
 *     scale, a scale of the wrong shape / dtype, in % 32 != 0, a scale on a float tensor);
 *   - both backends on a Q8_0 model: bit for bit the F32 model with the dequantized weights,
 *     optimized close to reference, optimized bit-identical for 1, 2 and 3 threads. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_model.h"
#include "qc/qc_optimized.h"
#include "qc/qc_reference.h"
#include "qc/qc_safetensors.h"
#include "qc/qc_state.h"
#include "qc_testmodel.h"
#include "../optimized/qc_opt_kernels.h"

static const char *const isa_names[3] = {"scalar", "avx2", "avx512"};
#define FIX QC_SOURCE_DIR "/fixtures/tiny-q8_0/model"

static unsigned rng_state = 777u;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* rows x K (K % 32 == 0) random values quantized to Q8_0 (blocks) and dequantized (exact) */
static unsigned char *make_q8(int rows, int K, float *deq) {
    const size_t nb = (size_t)rows * K / 32;
    unsigned char *w = malloc(nb * 34 + 64);
    for (size_t b = 0; b < nb; b++) {
        float v[32];
        float sc = (b % 7 == 3) ? 0.05f : 1.0f; /* some small blocks (d still a normal f16) */
        for (int i = 0; i < 32; i++) v[i] = sc * frand();
        if (b % 11 == 5) memset(v, 0, sizeof v); /* an all-zero block: d = 0 */
        qc_q8_0_quantize_block(v, w + b * 34);
        uint16_t dh;
        memcpy(&dh, w + b * 34, 2);
        const float d = qc_f16_to_f32(dh);
        for (int i = 0; i < 32; i++) {
            const int8_t q = (int8_t)w[b * 34 + 2 + i];
            ck_assert(q != -128);
            deq[b * 32 + i] = d * (float)q;
            ck_assert_msg((double)d * q == (double)deq[b * 32 + i], "d*q not exact in fp32");
            ck_assert_msg(fabs((double)v[i] - (double)d * q) <= 0.5 * d * (1 + 1e-6),
                          "round trip error above d/2");
        }
    }
    return w;
}

START_TEST(dtype_helpers) {
    ck_assert_str_eq(qc_dtype_str(QC_Q8_0), "Q8_0");
    ck_assert_str_eq(qc_dtype_str(QC_I8), "I8");
    ck_assert_uint_eq(qc_dtype_row_bytes(QC_Q8_0, 96), 3 * 34);
    ck_assert_uint_eq(qc_dtype_row_bytes(QC_F32, 5), 20);
    qc_dtype dt;
    qc_err e = {0};
    ck_assert_int_eq(qc_dtype_parse("Q8_0", "--dtype", &dt, &e), QC_OK);
    ck_assert_int_eq(dt, QC_Q8_0);
    ck_assert_int_eq(qc_dtype_parse("q4_0", "--dtype", &dt, &e), QC_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "q8_0"));
    float deq[2 * 64], got[2 * 64];
    unsigned char *w = make_q8(2, 64, deq);
    qc_tensor t = {QC_Q8_0, 2, {2, 64, 0, 0}, w};
    ck_assert_uint_eq(qc_tensor_bytes(&t), 4 * 34);
    qc_tensor_to_f32(&t, got);
    for (int i = 0; i < 128; i++) {
        ck_assert(got[i] == deq[i]);
        ck_assert(qc_tensor_get(&t, (size_t)i) == deq[i]);
    }
    free(w);
}
END_TEST

/* y[t*ldy + r] = sum_k W[r,k] x[t,k] in double */
static double naive(const float *W, const float *x, int r, int K, int t) {
    double s = 0.0;
    for (int k = 0; k < K; k++) s += (double)W[(size_t)r * K + k] * x[(size_t)t * K + k];
    return s;
}

START_TEST(kernels_every_isa) {
    static const int Ks[] = {32, 64, 96, 160, 224, 1024};
    for (int ii = 0; ii < 3; ii++) {
        const qc_opt_kernels *kt = qc_opt_kernels_by_name(isa_names[ii]);
        if (!kt) continue;
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
            const int K = Ks[ki], rows = 37, n = 3;
            float *deq = malloc((size_t)rows * K * 4), *x = malloc((size_t)n * K * 4);
            unsigned char *w = make_q8(rows, K, deq);
            for (int i = 0; i < n * K; i++) x[i] = frand();
            float yq[3 * 37], yf[3 * 37], y1[3];
            kt->matvec(yq, rows, w, QC_Q8_0, rows, K, x, K, n);
            kt->matvec(yf, rows, deq, QC_F32, rows, K, x, K, n);
            ck_assert_msg(!memcmp(yq, yf, sizeof yq), "%s K %d: Q8_0 matvec != F32 matvec on the "
                          "dequantized matrix", kt->isa, K);
            for (int r = 0; r < rows; r++) {
                /* one row alone (rows are split over threads): the same bits */
                kt->matvec(y1, 1, w + (size_t)r * (K / 32) * 34, QC_Q8_0, 1, K, x, K, n);
                for (int t = 0; t < n; t++) {
                    ck_assert(y1[t] == yq[t * rows + r]);
                    const double ref = naive(deq, x, r, K, t);
                    ck_assert_msg(fabs(yq[t * rows + r] - ref) <= 1e-5 * (1.0 + sqrt((double)K)),
                                  "%s K %d row %d: %.9g vs %.9g", kt->isa, K, r, yq[t * rows + r], ref);
                }
            }
            /* GEMM panels: the dequantized values, as from the F32 matrix */
            const int Kp = qc_opt_kpad(K), mr = kt->gemm_mr;
            float *pq = calloc((size_t)Kp * mr, 4), *pf = calloc((size_t)Kp * mr, 4);
            kt->pack_w(pq, w + (size_t)5 * (K / 32) * 34, QC_Q8_0, K, mr - 1);
            kt->pack_w(pf, deq + (size_t)5 * K, QC_F32, K, mr - 1);
            ck_assert_msg(!memcmp(pq, pf, (size_t)Kp * mr * 4), "%s K %d: pack_w", kt->isa, K);
            free(pq), free(pf), free(w), free(deq), free(x);
        }
    }
}
END_TEST

/* ==== Loader ==== */

typedef struct {
    qc_st_file f;
    qc_testmodel_tensor ts[128];
    int n;
    char dir[512];
} fault_ctx;

static void fault_begin(fault_ctx *F) {
    qc_err e = {0};
    ck_assert_msg(qc_st_open(FIX "/model.safetensors", &F->f, &e) == QC_OK, "%s", e.msg);
    ck_assert(F->f.n_tensors <= 128);
    F->n = F->f.n_tensors;
    for (int i = 0; i < F->n; i++) {
        const qc_st_tensor *t = &F->f.tensors[i];
        F->ts[i] = (qc_testmodel_tensor){t->name, t->dtype, t->ndim, {0}, t->data};
        for (int d = 0; d < t->ndim; d++) F->ts[i].shape[d] = t->shape[d];
    }
    ck_assert_int_eq(qc_testmodel_mkdtemp(F->dir, sizeof F->dir, "q8", &e), QC_OK);
    char *cfg = NULL;
    FILE *fp = fopen(FIX "/config.json", "rb");
    ck_assert_ptr_nonnull(fp);
    cfg = malloc(65536);
    size_t len = fread(cfg, 1, 65536, fp);
    fclose(fp);
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", F->dir);
    ck_assert_int_eq(qc_testmodel_write_file(p, cfg, len, &e), QC_OK);
    free(cfg);
}

static qc_testmodel_tensor *fault_find(fault_ctx *F, const char *name) {
    for (int i = 0; i < F->n; i++)
        if (!strcmp(F->ts[i].name, name)) return &F->ts[i];
    ck_abort_msg("no tensor %s", name);
    return NULL;
}

static void fault_drop(fault_ctx *F, const char *name) {
    qc_testmodel_tensor *t = fault_find(F, name);
    *t = F->ts[--F->n];
}

/* write, load, expect status `want` and every needle in the message */
static void fault_expect(fault_ctx *F, qc_status want, const char *n1, const char *n2) {
    qc_err e = {0};
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", F->dir);
    ck_assert_int_eq(qc_testmodel_write_safetensors(p, F->ts, F->n, &e), QC_OK);
    qc_model *m = NULL;
    qc_status s = qc_model_load(F->dir, &m, &e);
    ck_assert_msg(s == want, "status %d != %d: %s", (int)s, (int)want, e.msg);
    ck_assert_msg(strstr(e.msg, "model.safetensors") && strstr(e.msg, n1) &&
                      (!n2 || strstr(e.msg, n2)),
                  "message '%s' lacks the file, '%s' or '%s'", e.msg, n1, n2 ? n2 : "");
    qc_model_free(m);
    qc_st_close(&F->f);
    qc_testmodel_rmtree(F->dir);
}

#define UP "model.layers.0.mlp.up_proj.weight"
START_TEST(loader_faults) {
    fault_ctx F;
    fault_begin(&F); /* I8 without its scale */
    fault_drop(&F, UP "_scale");
    fault_expect(&F, QC_ERR_MISSING, UP, "weight_scale");
    fault_begin(&F); /* a scale without its weight */
    fault_drop(&F, UP);
    fault_expect(&F, QC_ERR_MISSING, UP "_scale", "without its weight");
    fault_begin(&F); /* the scale's shape: [64, 1] -> [32, 2] */
    qc_testmodel_tensor *t = fault_find(&F, UP "_scale");
    t->shape[0] = 32, t->shape[1] = 2;
    fault_expect(&F, QC_ERR_SHAPE, UP "_scale", "[32,2] != [64,1]");
    fault_begin(&F); /* the scale's dtype */
    fault_find(&F, UP "_scale")->dtype = QC_BF16;
    fault_expect(&F, QC_ERR_FORMAT, UP "_scale", "F16");
    fault_begin(&F); /* in % 32 != 0: [64, 32] -> [128, 16] */
    t = fault_find(&F, UP);
    t->shape[0] = 128, t->shape[1] = 16;
    fault_expect(&F, QC_ERR_SHAPE, UP, "multiple of 32");
    fault_begin(&F); /* the I8 weight of a config-mismatched shape: the usual message */
    t = fault_find(&F, UP);
    t->shape[0] = 32, t->shape[1] = 64;
    fault_find(&F, UP "_scale")->shape[0] = 32, fault_find(&F, UP "_scale")->shape[1] = 2;
    fault_expect(&F, QC_ERR_SHAPE, UP, "[32,64] != [64,32]");
    fault_begin(&F); /* a scale next to a float weight (the embedding stays float) */
    uint16_t one[96] = {0};
    F.ts[F.n++] = (qc_testmodel_tensor){"model.embed_tokens.weight_scale", QC_F16, 2, {96, 1}, one};
    fault_expect(&F, QC_ERR_UNSUPPORTED, "embed_tokens.weight_scale", "projection");
    fault_begin(&F); /* a scale next to an F32 projection */
    static float up32[64 * 32];
    t = fault_find(&F, UP);
    t->dtype = QC_F32, t->data = up32;
    fault_expect(&F, QC_ERR_FORMAT, UP, "I8");
}
END_TEST

START_TEST(loader_fixture) {
    qc_model *m = NULL;
    qc_err e = {0};
    ck_assert_msg(qc_model_load(FIX, &m, &e) == QC_OK, "%s", e.msg);
    ck_assert_int_eq(m->lm_head.dtype, QC_Q8_0);
    ck_assert_int_eq(m->embed.dtype, QC_F32);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const qc_layer_weights *w = &m->layers[l];
        ck_assert_int_eq(w->mlp_down.dtype, QC_Q8_0);
        ck_assert_int_eq(w->input_norm.dtype, QC_F32);
        if (m->cfg.layer_types[l] == QC_LAYER_FULL) ck_assert_int_eq(w->o_proj.dtype, QC_Q8_0);
        else {
            ck_assert_int_eq(w->in_proj_b.dtype, QC_Q8_0);
            ck_assert_int_eq(w->conv1d.dtype, QC_F32);
        }
    }
    /* n_tensors_loaded counts weights, not scales; the byte count is the Q8_0 one */
    ck_assert_uint_eq(qc_tensor_bytes(&m->lm_head), (size_t)96 * 34);
    qc_model_free(m);
}
END_TEST

/* ==== Backends ==== */

/* a shallow copy of m with every Q8_0 view replaced by its dequantized F32 values */
static qc_model *dequant_copy(const qc_model *m, float **bufs, int *nb) {
    qc_model *c = malloc(sizeof *c);
    *c = *m;
    c->layers = malloc((size_t)m->cfg.n_layers * sizeof *c->layers);
    memcpy(c->layers, m->layers, (size_t)m->cfg.n_layers * sizeof *c->layers);
    const int per = (int)(sizeof(qc_layer_weights) / sizeof(qc_tensor));
    for (int l = -1; l < m->cfg.n_layers; l++) {
        qc_tensor *ts = l < 0 ? &c->lm_head : (qc_tensor *)(void *)&c->layers[l];
        for (int i = 0; i < (l < 0 ? 1 : per); i++)
            if (ts[i].ndim && ts[i].dtype == QC_Q8_0) {
                float *b = malloc(qc_tensor_numel(&ts[i]) * 4);
                qc_tensor_to_f32(&ts[i], b);
                ts[i].dtype = QC_F32, ts[i].data = b;
                bufs[(*nb)++] = b;
            }
    }
    return c;
}

/* logits [(n + S), V] of a prefill of n tokens then S decode steps; opt 0: the reference, 1: the
 * optimized backend's FMA kernels (amx=0), 2: its defaults (the AMX GEMM where the CPU has it);
 * optimized with par_min 0 (qc_opt_options.c: every step on the threads, however tiny) */
static float *run(const qc_model *m, int opt, int threads, const int32_t *toks, int n, int S) {
    const int V = m->cfg.vocab_size;
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.n_threads = threads;
    bo.max_tokens = n + S;
    qc_backend *be = NULL;
    qc_err e = {0};
    qc_status s = opt ? qc_optimized_create(m, &bo, &be, &e) : qc_reference_create(m, &bo, &be, &e);
    ck_assert_msg(s == QC_OK, "create: %s", e.msg);
    if (opt) ck_assert_msg(qc_backend_set_option(be, "par_min", "0", &e) == QC_OK, "%s", e.msg);
    if (opt == 1) ck_assert_msg(qc_backend_set_option(be, "amx", "0", &e) == QC_OK, "%s", e.msg);
    qc_state *st = NULL;
    ck_assert_int_eq(qc_state_create(&m->cfg, n + S, &st, &e), QC_OK);
    ck_assert_int_eq(qc_backend_reset(be, st, &e), QC_OK);
    float *lg = calloc((size_t)(n + S) * V, 4);
    ck_assert_msg(qc_backend_forward(be, toks, n, 0, st, lg, 1, &e) == QC_OK, "%s", e.msg);
    for (int i = 0; i < S; i++)
        ck_assert_msg(qc_backend_forward(be, toks + n + i, 1, n + i, st, lg + (size_t)(n + i) * V, 0, &e) == QC_OK,
                      "%s", e.msg);
    qc_state_destroy(st);
    qc_backend_destroy(be);
    return lg;
}

static qc_model *backend_model(int which) {
    qc_model *m = NULL;
    qc_err e = {0};
    if (which == 0) {
        ck_assert_msg(qc_model_load(FIX, &m, &e) == QC_OK, "%s", e.msg);
        return m;
    }
    qc_testmodel_opts o; /* a synthetic Q8_0 model: sizes multiples of 32, untied */
    qc_testmodel_defaults(&o);
    qc_config c = o.cfg;
    c.vocab_size = 70, c.hidden_size = 64, c.intermediate_size = 96, c.tie_word_embeddings = 0;
    c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 32, c.rotary_dim = 8;
    c.lin_n_k_heads = 2, c.lin_n_v_heads = 4, c.lin_k_dim = 16, c.lin_v_dim = 16;
    ck_assert_msg(qc_model_synthetic(&c, QC_Q8_0, 5, &m, &e) == QC_OK, "%s", e.msg);
    ck_assert_int_eq(m->layers[0].in_proj_qkv.dtype, QC_Q8_0);
    ck_assert_int_eq(m->embed.dtype, QC_BF16);
    return m;
}

START_TEST(backends_on_q8_0) {
    qc_model *m = backend_model(_i);
    const int V = m->cfg.vocab_size, n = 40, S = 3;
    int32_t toks[43];
    for (int i = 0; i < n + S; i++) toks[i] = (int32_t)((i * 37 + 11) % V);
    float *bufs[256];
    int nb = 0;
    qc_model *f = dequant_copy(m, bufs, &nb);
    const size_t cnt = (size_t)(n + S) * V;
    float *rq = run(m, 0, 1, toks, n, S), *rf = run(f, 0, 1, toks, n, S);
    ck_assert_msg(!memcmp(rq, rf, cnt * 4), "reference: Q8_0 != F32 dequantized");
    /* the FMA kernels widen d * q exactly: bit for bit the dequantized model's run */
    float *o[6];
    for (int t = 0; t < 6; t++) o[t] = run(m, t < 3 ? 1 : 2, t % 3 + 1, toks, n, S);
    float *of = run(f, 1, 1, toks, n, S);
    ck_assert_msg(!memcmp(o[0], of, cnt * 4), "optimized: Q8_0 != F32 dequantized");
    for (int t = 1; t < 6; t++)
        if (t != 3)
            ck_assert_msg(!memcmp(o[t < 3 ? 0 : 3], o[t], cnt * 4), "optimized (%s): 1 vs %d threads differ",
                          t < 3 ? "amx=0" : "default", t % 3 + 1);
    /* both (the default: the AMX GEMM's per-block sums, where the CPU has AMX) near the reference */
    for (int v = 0; v < 2; v++) {
        double md = 0, mx = 0;
        for (size_t i = 0; i < cnt; i++) {
            md = fmax(md, fabs((double)o[3 * v][i] - rq[i]));
            mx = fmax(mx, fabs((double)rq[i]));
        }
        fprintf(stderr, "q8_0 model %d: optimized (%s) vs reference max |diff| %.3g (max |logit| %.3g)\n",
                _i, v ? "default" : "amx=0", md, mx);
        ck_assert_msg(md <= 1e-4 * (1 + mx), "optimized vs reference: %.3g", md);
    }
    for (int t = 0; t < 6; t++) free(o[t]);
    free(of), free(rq), free(rf);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(f->layers), free(f);
    qc_model_free(m);
}
END_TEST

static Suite *q8_suite(void) {
    Suite *s = suite_create("q8_0");
    TCase *tc = tcase_create("q8_0");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, dtype_helpers);
    tcase_add_test(tc, kernels_every_isa);
    tcase_add_test(tc, loader_fixture);
    tcase_add_test(tc, loader_faults);
    tcase_add_loop_test(tc, backends_on_q8_0, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(q8_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
