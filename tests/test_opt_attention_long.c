/* test_opt_attention_long.c — the tiled attention of the optimized backend at long contexts
 * (issue #16 item 2).
 *
 *  1. tiled_equals_untiled: qc_opt_attend (query blocks x key blocks, the fused AVX-512 inner
 *     loops) equals, bit for bit, the per-(token, head) online softmax it replaced (written out
 *     here with the same kernel table's dot / axpy / scale / vexp / sigmoid_mul), for every ISA
 *     this CPU runs, at contexts of several thousand positions, prefill blocks and single-token
 *     decode, GQA groups of 1, 2 and 4, head dims with SIMD tails; the keys are built so that
 *     later key blocks have larger score maxima than earlier ones (the running output and sum
 *     must be rescaled: dropping that rescale fails here).
 *  2. backend_long_context: the whole optimized backend against the reference backend on a
 *     tiny model at 3000 + 4 positions (chunked dynamic prefill, then decode), within the
 *     optimized-vs-reference tolerance of test_opt_backend (1e-4 relative), and 1 vs 2 threads
 *     bit-identical (logits and every state buffer).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_model.h"
#include "qc/qc_prefill.h"
#include "qc/qc_state.h"
#include "qc_testmodel.h"
#include "../harness/host/qc_registry.h"
#include "../optimized/qc_opt_internal.h"
#include "support/qc_test_attention_untiled.h"

static const char *const isa_names[3] = {"scalar", "avx2", "avx512"};

static unsigned rng_state = 4242u;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* ===================================================================================== */
/* 1. tiled == untiled                                                                    */
/* ===================================================================================== */


typedef struct {
    int n, start_pos, nh, nkv, hd;
} att_case;

static void one_case(const qc_opt_kernels *K, const att_case *c) {
    const int n = c->n, nh = c->nh, nkv = c->nkv, hd = c->hd, ctx = c->start_pos + n;
    float *act = malloc((size_t)n * nh * hd * 4), *mix = malloc((size_t)n * 2 * nh * hd * 4);
    float *kc = malloc((size_t)nkv * ctx * hd * 4), *vc = malloc((size_t)nkv * ctx * hd * 4);
    float *ob1 = calloc((size_t)n * nh * hd, 4), *ob2 = calloc((size_t)n * nh * hd, 4);
    ck_assert(act && mix && kc && vc && ob1 && ob2);
    /* queries share a direction d; key p = growth(p) * d + noise: the scores of later blocks
     * exceed the earlier maxima, so every query rescales (several times) */
    float d[512];
    for (int e = 0; e < hd; e++) d[e] = frand();
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++)
            for (int e = 0; e < hd; e++) act[((size_t)t * nh + h) * hd + e] = d[e] + 0.3f * frand();
    for (size_t i = 0; i < (size_t)n * 2 * nh * hd; i++) mix[i] = 2.0f * frand();
    for (int g = 0; g < nkv; g++)
        for (int p = 0; p < ctx; p++) {
            const float grow = 6.0f * (float)p / (float)ctx + 0.5f * sinf(0.05f * (float)p);
            for (int e = 0; e < hd; e++) {
                kc[((size_t)g * ctx + p) * hd + e] = grow * d[e] + 0.2f * frand();
                vc[((size_t)g * ctx + p) * hd + e] = frand();
            }
        }
    const float scale = 1.0f / sqrtf((float)hd);
    qc_test_attention_untiled(K, ob1, act, mix, kc, vc, ctx, n, c->start_pos, nh, nkv, hd, scale);

    qc_opt o;
    memset(&o, 0, sizeof o);
    qc_opt_thread th;
    memset(&th, 0, sizeof th);
    float sc[64];
    th.sc = sc;
    o.k = K;
    o.nthreads = 1;
    o.par_min = 1e300;
    o.th = &th;
    o.act = act;
    o.mix = mix;
    o.ob = ob2;
    qc_opt_attend(&o, kc, vc, ctx, n, c->start_pos, nh, nkv, hd, scale);
    for (size_t i = 0; i < (size_t)n * nh * hd; i++)
        ck_assert_msg(memcmp(&ob1[i], &ob2[i], 4) == 0,
                      "%s n %d start %d nh %d nkv %d hd %d: element %zu tiled %.9g != untiled %.9g",
                      K->isa, n, c->start_pos, nh, nkv, hd, i, ob2[i], ob1[i]);
    /* the case really rescales: for the last token, a score of the last key block beats the
     * first block's maximum */
    if (ctx > 64) {
        const float *q = act + (size_t)(n - 1) * nh * hd;
        float m0 = -INFINITY, ml = -INFINITY;
        for (int p = 0; p < 64; p++) m0 = fmaxf(m0, K->dot(q, kc + (size_t)p * hd, hd));
        for (int p = (ctx - 1) / 64 * 64; p < ctx; p++) ml = fmaxf(ml, K->dot(q, kc + (size_t)p * hd, hd));
        ck_assert_msg(ml > m0, "case n %d start %d: no later block maximum above the first (%g <= %g)",
                      n, c->start_pos, ml, m0);
    }
    free(act); free(mix); free(kc); free(vc); free(ob1); free(ob2);
}

START_TEST(tiled_equals_untiled) {
    const qc_opt_kernels *K = qc_opt_kernels_by_name(isa_names[_i]);
    if (!K) return;
    const att_case cases[] = {
        {70, 0, 8, 2, 32},      /* prefill, several token blocks, GQA 4 */
        {33, 3000, 4, 2, 24},   /* a chunk at depth 3000 (tails: hd 24) */
        {1, 4100, 8, 2, 256},   /* decode at depth 4100, the 0.8B head dim */
        {3, 2047, 2, 1, 40},    /* few tokens: tiles split by head */
        {300, 0, 2, 2, 130},    /* no GQA, hd > 128 with a tail */
        {17, 64, 16, 1, 8},     /* a large group */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) one_case(K, &cases[i]);
}
END_TEST

/* ===================================================================================== */
/* 2. the backend at 3000 positions                                                       */
/* ===================================================================================== */

typedef struct {
    float *logits; /* [(n + S), V] */
    qc_state *st;
} run_out;

/* the optimized backend runs with par_min 0 (qc_opt_options.c): every step shared by its
 * threads, however little work it holds */
static void run_seq(const qc_model *m, const char *backend, int threads, const int32_t *toks, int n,
                    int S, int chunk_tokens, run_out *out) {
    const int V = m->cfg.vocab_size, ctx = n + S;
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.dn_kernel = QC_DN_CHUNKED;
    bo.chunk_size = 64;
    bo.n_threads = threads;
    bo.max_tokens = chunk_tokens;
    qc_backend *be = NULL;
    qc_err e = {0};
    qc_runtime_spec rs;
    ck_assert_msg(qc_registry_parse(backend, 0, &rs, &e) == QC_OK &&
                      qc_registry_create(&rs, NULL, m, &bo, &be, &e) == QC_OK,
                  "create: %s", e.msg);
    if (!strcmp(backend, "optimized"))
        ck_assert_msg(qc_backend_set_option(be, "par_min", "0", &e) == QC_OK, "%s", e.msg);
    ck_assert_int_eq(qc_state_create(&m->cfg, ctx, &out->st, &e), QC_OK);
    qc_profile p;
    qc_profile_for_mode(&p, QC_MODE_DYNAMIC, chunk_tokens, ctx);
    qc_runner *r = NULL;
    ck_assert_msg(qc_runner_create(be, &p, out->st, &r, &e) == QC_OK, "runner: %s", e.msg);
    ck_assert_int_eq(qc_runner_reset(r, &e), QC_OK);
    out->logits = calloc((size_t)ctx * V, sizeof(float));
    ck_assert_msg(qc_runner_prefill(r, toks, n, 0, out->logits, NULL, NULL, &e) == QC_OK,
                  "prefill: %s", e.msg);
    for (int s = 0; s < S; s++)
        ck_assert_msg(qc_runner_decode(r, toks[n + s], out->logits + (size_t)(n + s) * V, &e) == QC_OK,
                      "decode: %s", e.msg);
    qc_runner_destroy(r);
    qc_backend_destroy(be);
}

static double max_rel(const float *a, const float *b, size_t count) {
    double mx = 0, md = 0;
    for (size_t i = 0; i < count; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (d > md) md = d;
        if (fabs((double)b[i]) > mx) mx = fabs((double)b[i]);
    }
    return md / (mx + 1e-30);
}

START_TEST(backend_long_context) {
    qc_testmodel_opts to;
    qc_testmodel_defaults(&to);
    qc_config c = to.cfg;
    c.tie_word_embeddings = 1;
    qc_model *m = NULL;
    qc_err e = {0};
    ck_assert_msg(qc_model_synthetic(&c, QC_F32, 19, &m, &e) == QC_OK, "synthetic: %s", e.msg);
    const int n = 3000, S = 4, V = c.vocab_size;
    int32_t *toks = malloc((size_t)(n + S) * sizeof *toks);
    for (int i = 0; i < n + S; i++) toks[i] = (int32_t)((i * 7 + (i / 64) * 13 + 1) % V);
    run_out ref, o1, o2;
    run_seq(m, "reference", 1, toks, n, S, 512, &ref);
    run_seq(m, "optimized", 1, toks, n, S, 512, &o1);
    run_seq(m, "optimized", 2, toks, n, S, 512, &o2);
    const size_t nl = (size_t)(n + S) * V;
    ck_assert_msg(memcmp(o1.logits, o2.logits, nl * 4) == 0, "1 vs 2 threads: logits differ");
    for (int l = 0; l < c.n_layers; l++) {
        if (c.layer_types[l] != QC_LAYER_FULL) continue;
        const size_t kv = (size_t)c.n_kv_heads * o1.st->max_context_len * c.head_dim * 4;
        ck_assert_msg(memcmp(o1.st->k_cache[l], o2.st->k_cache[l], kv) == 0, "layer %d k_cache", l);
        ck_assert_msg(memcmp(o1.st->v_cache[l], o2.st->v_cache[l], kv) == 0, "layer %d v_cache", l);
    }
    /* every position's logits against the reference, the decode steps at depth 3000 included */
    const double rel = max_rel(o1.logits, ref.logits, nl);
    const double rel_dec = max_rel(o1.logits + (size_t)n * V, ref.logits + (size_t)n * V, (size_t)S * V);
    ck_assert_msg(rel <= 1e-4, "optimized vs reference at 3004 positions: max rel %.3g", rel);
    ck_assert_msg(rel_dec <= 1e-4, "decode at depth 3000: max rel %.3g", rel_dec);
    free(ref.logits); free(o1.logits); free(o2.logits);
    qc_state_destroy(ref.st); qc_state_destroy(o1.st); qc_state_destroy(o2.st);
    free(toks);
    qc_model_free(m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("opt_attention_long");
    TCase *tc = tcase_create("tiles");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, tiled_equals_untiled, 0, 3);
    tcase_add_test(tc, backend_long_context);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
