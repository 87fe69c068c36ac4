/* test_opt_backend.c — the optimized backend against the reference backend on tiny synthetic
 * models: static / dynamic / no-KV prefill + decode, F32 / BF16 / F16, nv = nk and nv = 2 nk,
 * dk != dv, odd sizes (SIMD tails), chunked (several chunk sizes) and recurrent DeltaNet, the
 * packed-GEMM and the matrix-vector projection paths, every ISA this CPU runs; bit-identical
 * results for 1, 2 and 3 threads; argument errors; the trace hook; the options gemm_min /
 * par_min (refusals, effective from the next call).
 *
 * Tolerance: max |opt - ref| <= 1e-4 * max(|ref|) + 1e-6 per compared buffer (logits of every
 * position, k/v caches, conv and recurrent states). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_model.h"
#include "qc/qc_optimized.h"
#include "qc/qc_prefill.h"
#include "qc/qc_state.h"
#include "qc_testmodel.h"
#include "../harness/host/qc_registry.h"
#include "../optimized/qc_opt_internal.h" /* the options' effect: qc_opt's xpack, pool_active */
#include "../optimized/qc_opt_kernels.h"

/* ===================================================================================== */
/* Models                                                                                 */
/* ===================================================================================== */

/* geometry 0: the qc_testmodel defaults (nv = 2 nk, dk 8 != dv 6);
 * geometry 1: nv = nk, odd sizes everywhere (H 36, I 52, hd 12, dk 12, dv 10, V 70);
 * geometry 2: sizes that are multiples of 16 plus a tail (H 48, I 80, dk 32, dv 24, hd 32) */
static qc_config tiny_cfg(int geom) {
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o);
    qc_config c = o.cfg;
    c.tie_word_embeddings = 1;
    if (geom == 1) {
        c.vocab_size = 70; c.hidden_size = 36; c.intermediate_size = 52;
        c.n_heads = 2; c.n_kv_heads = 1; c.head_dim = 12; c.rotary_dim = 6;
        c.lin_n_k_heads = 3; c.lin_n_v_heads = 3; c.lin_k_dim = 12; c.lin_v_dim = 10;
        c.n_layers = 5;
        for (int i = 0; i < 5; i++) c.layer_types[i] = (i == 1 || i == 4) ? QC_LAYER_FULL : QC_LAYER_LINEAR;
    } else if (geom == 2) {
        c.vocab_size = 100; c.hidden_size = 48; c.intermediate_size = 80;
        c.n_heads = 4; c.n_kv_heads = 2; c.head_dim = 32; c.rotary_dim = 16;
        c.lin_n_k_heads = 2; c.lin_n_v_heads = 4; c.lin_k_dim = 32; c.lin_v_dim = 24;
    }
    return c;
}

static qc_model *tiny_model(int geom, qc_dtype dt) {
    qc_config c = tiny_cfg(geom);
    qc_model *m = NULL;
    qc_err e = {0};
    qc_status s = qc_model_synthetic(&c, dt, 7 + geom, &m, &e);
    ck_assert_msg(s == QC_OK, "synthetic: %s", e.msg);
    return m;
}

/* ===================================================================================== */
/* Running a sequence                                                                     */
/* ===================================================================================== */

typedef struct {
    const char *backend;
    qc_mode mode;
    int max_seq_len;  /* tokens per call (dynamic / no-KV) */
    qc_dn_kernel dn;
    int chunk;
    int threads;
    const char *const *opt_kv; /* NULL, or key, value, ..., NULL: set_option of the optimized
                                  backend after its create (the reference gets none) */
} run_cfg;

/* The work thresholds of the optimized backend (qc_opt_options.c) the tests force: every step
 * on the threads however tiny the model, or the packed GEMM for every projection (decode too). */
static const char *const PAR0[] = {"par_min", "0", NULL};
static const char *const GEMM1[] = {"gemm_min", "1", NULL};

static void set_options(qc_backend *be, const char *const *kv) {
    qc_err e = {0};
    for (; kv && kv[0]; kv += 2)
        ck_assert_msg(qc_backend_set_option(be, kv[0], kv[1], &e) == QC_OK, "set_option %s=%s: %s",
                      kv[0], kv[1], e.msg);
}

typedef struct {
    float *logits;  /* [(n + S), V]: every prompt position, then each decode step */
    qc_state *st;   /* final state */
    char desc[160];
} run_out;

static void run_seq(const qc_model *m, const run_cfg *rc, const int32_t *toks, int n, int S,
                    run_out *out) {
    const int V = m->cfg.vocab_size, ctx = n + S;
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.dn_kernel = rc->dn;
    bo.chunk_size = rc->chunk;
    bo.n_threads = rc->threads;
    bo.max_tokens = ctx;
    qc_backend *be = NULL;
    qc_err e = {0};
    qc_runtime_spec rs;
    ck_assert_msg(qc_registry_parse(rc->backend, 0, &rs, &e) == QC_OK &&
                      qc_registry_create(&rs, NULL, m, &bo, &be, &e) == QC_OK,
                  "create: %s", e.msg);
    if (!strcmp(rc->backend, "optimized")) set_options(be, rc->opt_kv);
    snprintf(out->desc, sizeof out->desc, "%s", be->describe(be));
    ck_assert_int_eq(qc_state_create(&m->cfg, ctx, &out->st, &e), QC_OK);
    qc_profile p;
    qc_profile_for_mode(&p, rc->mode, rc->max_seq_len, ctx);
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

static void run_free(run_out *o) {
    free(o->logits);
    qc_state_destroy(o->st);
}

/* max |a - b| <= tol * max|b| + 1e-6 */
static void close_enough(const float *a, const float *b, size_t count, double tol, const char *what) {
    double mx = 0.0, md = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < count; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        ck_assert_msg(isfinite(a[i]), "%s: element %zu is not finite", what, i);
        if (fabs(b[i]) > mx) mx = fabs(b[i]);
        if (d > md) { md = d; at = i; }
    }
    if (getenv("QC_TEST_VERBOSE")) fprintf(stderr, "%s: max diff %.3g (rel %.3g)\n", what, md, md / (mx > 0 ? mx : 1));
    ck_assert_msg(md <= tol * mx + 1e-6, "%s: max |diff| %.3g at %zu (%.8g vs %.8g), max |ref| %.3g",
                  what, md, at, a[at], b[at], mx);
}

static void compare_states(const qc_config *c, const qc_state *a, const qc_state *b, double tol,
                           const char *tag) {
    char what[256];
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_types[l] == QC_LAYER_FULL) {
            size_t nkv = (size_t)a->n_kv_heads * a->max_context_len * a->head_dim;
            snprintf(what, sizeof what, "%s: layer %d k_cache", tag, l);
            close_enough(a->k_cache[l], b->k_cache[l], nkv, tol, what);
            snprintf(what, sizeof what, "%s: layer %d v_cache", tag, l);
            close_enough(a->v_cache[l], b->v_cache[l], nkv, tol, what);
        } else {
            snprintf(what, sizeof what, "%s: layer %d conv_state", tag, l);
            close_enough(a->conv_state[l], b->conv_state[l], (size_t)a->conv_dim * a->conv_kernel, tol, what);
            snprintf(what, sizeof what, "%s: layer %d recurrent_state", tag, l);
            close_enough(a->recurrent_state[l], b->recurrent_state[l],
                         (size_t)a->n_v_heads * a->k_dim * a->v_dim, tol, what);
        }
    }
}

static int states_identical(const qc_config *c, const qc_state *a, const qc_state *b) {
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_types[l] == QC_LAYER_FULL) {
            size_t nkv = (size_t)a->n_kv_heads * a->max_context_len * a->head_dim * 4;
            if (memcmp(a->k_cache[l], b->k_cache[l], nkv) || memcmp(a->v_cache[l], b->v_cache[l], nkv))
                return 0;
        } else {
            if (memcmp(a->conv_state[l], b->conv_state[l], (size_t)a->conv_dim * a->conv_kernel * 4) ||
                memcmp(a->recurrent_state[l], b->recurrent_state[l],
                       (size_t)a->n_v_heads * a->k_dim * a->v_dim * 4))
                return 0;
        }
    }
    return 1;
}

static void make_tokens(int32_t *t, int n, int V, unsigned seed) {
    unsigned x = seed * 2654435761u + 12345u;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        t[i] = (int32_t)((x >> 8) % (unsigned)V);
    }
}

/* one comparison: optimized vs reference with the same run configuration */
static void check_vs_ref(const qc_model *m, run_cfg rc, int n, int S, double tol, const char *tag) {
    int32_t toks[512];
    ck_assert_int_le(n + S, 512);
    make_tokens(toks, n + S, m->cfg.vocab_size, (unsigned)(n * 31 + S));
    run_out ro, oo;
    rc.backend = "reference";
    run_seq(m, &rc, toks, n, S, &ro);
    rc.backend = "optimized";
    run_seq(m, &rc, toks, n, S, &oo);
    char what[512];
    snprintf(what, sizeof what, "%s [%s] logits", tag, oo.desc);
    close_enough(oo.logits, ro.logits, (size_t)(n + S) * m->cfg.vocab_size, tol, what);
    snprintf(what, sizeof what, "%s [%s]", tag, oo.desc);
    compare_states(&m->cfg, oo.st, ro.st, tol, what);
    run_free(&ro);
    run_free(&oo);
}

/* ===================================================================================== */
/* Conformance                                                                            */
/* ===================================================================================== */

static const qc_dtype dtypes[3] = {QC_F32, QC_BF16, QC_F16};

/* loop index: dtype x geometry */
START_TEST(matches_reference_all_modes) {
    const qc_dtype dt = dtypes[_i % 3];
    const int geom = _i / 3;
    qc_model *m = tiny_model(geom, dt);
    char tag[128];
    const double tol = 1e-4;
    /* dynamic: 19 tokens in chunks of 11 (2nd call continues from a non-zero state),
     * DeltaNet chunks of 4 (several chunks + a tail) */
    run_cfg rc = {NULL, QC_MODE_DYNAMIC, 11, QC_DN_CHUNKED, 4, 2, NULL};
    snprintf(tag, sizeof tag, "%s geom %d dynamic chunk 4", qc_dtype_str(dt), geom);
    check_vs_ref(m, rc, 19, 3, tol, tag);
    /* dynamic, chunk 64 (> call length), and the recurrent kernel */
    rc.chunk = 64;
    snprintf(tag, sizeof tag, "%s geom %d dynamic chunk 64", qc_dtype_str(dt), geom);
    check_vs_ref(m, rc, 19, 3, tol, tag);
    rc.dn = QC_DN_RECURRENT;
    snprintf(tag, sizeof tag, "%s geom %d dynamic recurrent", qc_dtype_str(dt), geom);
    check_vs_ref(m, rc, 19, 3, tol, tag);
    /* few-token calls (matrix-vector path): chunks of 5 */
    rc.dn = QC_DN_CHUNKED; rc.chunk = 3; rc.max_seq_len = 5;
    snprintf(tag, sizeof tag, "%s geom %d dynamic 5-token calls", qc_dtype_str(dt), geom);
    check_vs_ref(m, rc, 13, 2, tol, tag);
    /* static: one token per call */
    rc.mode = QC_MODE_STATIC;
    snprintf(tag, sizeof tag, "%s geom %d static", qc_dtype_str(dt), geom);
    check_vs_ref(m, rc, 9, 3, tol, tag);
    /* no KV cache: every call recomputes the sequence */
    rc.mode = QC_MODE_NOKV; rc.max_seq_len = 6; rc.chunk = 4;
    snprintf(tag, sizeof tag, "%s geom %d nokv", qc_dtype_str(dt), geom);
    check_vs_ref(m, rc, 14, 2, tol, tag);
    qc_model_free(m);
}
END_TEST

/* every ISA this CPU supports, forced through QC_ISA (and the GEMM path for n = 1 via the
 * option gemm_min = 1) */
START_TEST(every_isa_matches_reference) {
    static const char *isas[3] = {"scalar", "avx2", "avx512"};
    qc_model *m = tiny_model(2, QC_BF16);
    for (int i = 0; i < 3; i++) {
        if (!qc_opt_kernels_by_name(isas[i])) continue;
        setenv("QC_ISA", isas[i], 1);
        for (int g = 0; g < 2; g++) {
            char tag[128];
            snprintf(tag, sizeof tag, "ISA %s gemm_min %s", isas[i], g ? "1" : "default");
            run_cfg rc = {NULL, QC_MODE_DYNAMIC, 40, QC_DN_CHUNKED, 16, 2, g ? GEMM1 : NULL};
            check_vs_ref(m, rc, 37, 2, 1e-4, tag);
            rc.mode = QC_MODE_STATIC;
            check_vs_ref(m, rc, 5, 2, 1e-4, tag);
        }
        /* describe() names the ISA */
        qc_backend *be = NULL;
        ck_assert_int_eq(qc_optimized_create(m, NULL, &be, NULL), QC_OK);
        const char *want = i == 0 ? "scalar" : i == 1 ? "AVX2" : "AVX-512";
        ck_assert_msg(strstr(be->describe(be), want), "describe '%s' lacks %s", be->describe(be), want);
        qc_backend_destroy(be);
        unsetenv("QC_ISA");
    }
    qc_model_free(m);
}
END_TEST

/* ===================================================================================== */
/* Thread-count invariance                                                                */
/* ===================================================================================== */

START_TEST(bit_identical_for_1_2_3_threads) {
    qc_model *m = tiny_model(_i == 0 ? 0 : 2, _i == 0 ? QC_BF16 : QC_F32);
    int32_t toks[64];
    make_tokens(toks, 45, m->cfg.vocab_size, 99);
    const int V = m->cfg.vocab_size;
    const qc_mode modes[2] = {QC_MODE_DYNAMIC, QC_MODE_STATIC};
    /* tiny models run serially by default (too little work per region); force every region
     * to use the threads (par_min 0) */
    for (int mi = 0; mi < 2; mi++)
        for (int dn = 0; dn < 2; dn++) {
            run_out r[3];
            for (int t = 0; t < 3; t++) {
                run_cfg rc = {"optimized", modes[mi], 40, dn ? QC_DN_RECURRENT : QC_DN_CHUNKED, 8, t + 1,
                              PAR0};
                run_seq(m, &rc, toks, mi ? 12 : 40, 3, &r[t]);
            }
            const int n = (mi ? 12 : 40) + 3;
            for (int t = 1; t < 3; t++) {
                ck_assert_msg(!memcmp(r[0].logits, r[t].logits, (size_t)n * V * 4),
                              "logits differ between 1 and %d threads (mode %d dn %d)", t + 1, mi, dn);
                ck_assert_msg(states_identical(&m->cfg, r[0].st, r[t].st),
                              "state differs between 1 and %d threads (mode %d dn %d)", t + 1, mi, dn);
            }
            for (int t = 0; t < 3; t++) run_free(&r[t]);
        }
    qc_model_free(m);
}
END_TEST

/* The shared body of the kernel-variant tests: the 43-token sequence of model m on 1, 2, 3
 * threads with `variant` (bit-identical required) and once on 1 thread with `base`; the variant
 * must change something and stay within `nmse_max` of the base (the NMSE of the logits). */
static void variant_thread_invariant_and_close(const qc_model *m, const char *const *variant,
                                               const char *const *base, unsigned seed,
                                               double nmse_max, const char *what) {
    int32_t toks[64];
    make_tokens(toks, 43, m->cfg.vocab_size, seed);
    const int V = m->cfg.vocab_size, n = 43;
    run_out r[4];
    for (int t = 0; t < 4; t++) {
        run_cfg rc = {"optimized", QC_MODE_DYNAMIC, 40, QC_DN_CHUNKED, 8, t < 3 ? t + 1 : 1,
                      t < 3 ? variant : base};
        run_seq(m, &rc, toks, 40, 3, &r[t]);
    }
    for (int t = 1; t < 3; t++)
        ck_assert_msg(!memcmp(r[0].logits, r[t].logits, (size_t)n * V * 4),
                      "%s: logits differ between 1 and %d threads", what, t + 1);
    ck_assert_msg(memcmp(r[0].logits, r[3].logits, (size_t)n * V * 4) != 0, "%s changed nothing",
                  what);
    double se = 0, sg = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) {
        const double d = (double)r[0].logits[i] - r[3].logits[i];
        se += d * d;
        sg += (double)r[3].logits[i] * r[3].logits[i];
    }
    ck_assert_msg(se / sg < nmse_max, "%s vs the base logits: nmse %g", what, se / sg);
    for (int t = 0; t < 4; t++) run_free(&r[t]);
}

static const char *const PAR0_FMA[] = {"par_min", "0", "amx", "0", NULL};
static const char *const PAR0_AMX[] = {"par_min", "0", "amx", "1", NULL};

/* amx: on by default where the CPU has AMX-BF16 (refused elsewhere, and a value not 0 / 1);
 * on, the BF16 GEMM is bit-identical for 1, 2, 3 threads, differs from the FMA GEMM (amx=0)
 * and is as close to it as two float32 orders of summation are (three bf16 terms per
 * activation: nothing of float32 lost) */
START_TEST(amx_default_thread_invariant_and_float32_close) {
    qc_model *m = tiny_model(0, QC_BF16);
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.max_tokens = 8;
    qc_backend *be = NULL;
    qc_err e = {0};
    ck_assert_int_eq(qc_optimized_create(m, &bo, &be, &e), QC_OK);
    ck_assert_int_eq(qc_backend_set_option(be, "amx", "yes", &e), QC_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "option amx: 'yes' is not 0 or 1"), "%s", e.msg);
    ck_assert_int_eq(qc_backend_set_option(be, "amx", "0", &e), QC_OK);
    ck_assert_uint_eq(be->kernels, 0u);
    ck_assert_msg(!strstr(be->describe(be), "AMX"), "%s", be->describe(be));
    if (!qc_opt_cpu_has_amx()) {
        ck_assert_int_eq(qc_backend_set_option(be, "amx", "1", &e), QC_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(e.msg, "AMX-BF16"), "%s", e.msg);
        qc_backend_destroy(be);
        qc_model_free(m);
        return;
    }
    ck_assert_int_eq(qc_backend_set_option(be, "amx", "1", &e), QC_OK);
    ck_assert_uint_eq(be->kernels, QC_BE_KERNEL_AMX);
    ck_assert_msg(strstr(be->describe(be), "+ AMX"), "%s", be->describe(be));
    if (qc_opt_cpu_has_bf16dot()) { /* bf16_dot takes precedence while it is on */
        ck_assert_int_eq(qc_backend_set_option(be, "bf16_dot", "1", &e), QC_OK);
        ck_assert_uint_eq(be->kernels, QC_BE_KERNEL_BF16_DOT);
        ck_assert_int_eq(qc_backend_set_option(be, "bf16_dot", "0", &e), QC_OK);
        ck_assert_uint_eq(be->kernels, QC_BE_KERNEL_AMX);
    }
    qc_backend_destroy(be);
    /* bf16_dot's rounded activations give ~1e-3 here; float32 reorderings ~1e-12 */
    variant_thread_invariant_and_close(m, PAR0_AMX, PAR0_FMA, 11, 1e-9, "amx");
    qc_model_free(m);
}
END_TEST

/* A call runs with FTZ/DAZ (qc_opt_backend.c run_call) and gives the caller's floating-point
 * mode back: MXCSR after a prefill and decode steps, serial and on threads, is what it was */
START_TEST(fp_mode_restored) {
#if defined(__x86_64__) || defined(__i386__)
    qc_model *m = tiny_model(0, QC_F32);
    int32_t toks[16];
    make_tokens(toks, 12, m->cfg.vocab_size, 5);
    const unsigned saved = __builtin_ia32_stmxcsr();
    const unsigned modes[2] = {0x1F80u, 0x1F80u | 0x8040u}; /* the default; FTZ + DAZ on */
    for (int mi = 0; mi < 2; mi++)
        for (int t = 1; t <= 2; t++) {
            __builtin_ia32_ldmxcsr(modes[mi]);
            run_cfg rc = {"optimized", QC_MODE_DYNAMIC, 10, QC_DN_CHUNKED, 4, t, t == 2 ? PAR0 : NULL};
            run_out r;
            run_seq(m, &rc, toks, 10, 2, &r);
            const unsigned now = __builtin_ia32_stmxcsr() & ~0x3Fu; /* less the sticky flags */
            __builtin_ia32_ldmxcsr(saved);
            ck_assert_msg(now == (modes[mi] & ~0x3Fu), "MXCSR %#x after the run, %#x before", now,
                          modes[mi]);
            run_free(&r);
        }
    qc_model_free(m);
#endif
}
END_TEST

/* bf16_dot: refused where the CPU lacks AVX512_BF16 and for a value not 0 / 1; on, the BF16
 * GEMM path is still bit-identical for 1, 2, 3 threads, differs from the float32 path (the
 * activations are rounded) and stays close to it */
static const char *const PAR0_BD[] = {"par_min", "0", "bf16_dot", "1", NULL};


START_TEST(bf16_dot_thread_invariant_and_close) {
    qc_model *m = tiny_model(0, QC_BF16);
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.max_tokens = 8;
    qc_backend *be = NULL;
    qc_err e = {0};
    ck_assert_int_eq(qc_optimized_create(m, &bo, &be, &e), QC_OK);
    /* off by default (the AMX GEMM where the CPU has it, else the FMA peak is bench's limit) */
    const unsigned dflt = qc_opt_cpu_has_amx() ? QC_BE_KERNEL_AMX : 0u;
    ck_assert_uint_eq(be->kernels, dflt);
    ck_assert_int_eq(qc_backend_set_option(be, "bf16_dot", "2", &e), QC_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "option bf16_dot: '2' is not 0 or 1"), "%s", e.msg);
    if (!qc_opt_cpu_has_bf16dot()) {
        ck_assert_int_eq(qc_backend_set_option(be, "bf16_dot", "1", &e), QC_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(e.msg, "AVX512_BF16"), "%s", e.msg);
        ck_assert_uint_eq(be->kernels, dflt);
        qc_backend_destroy(be);
        qc_model_free(m);
        return;
    }
    ck_assert_int_eq(qc_backend_set_option(be, "bf16_dot", "1", &e), QC_OK);
    ck_assert_ptr_nonnull(((const qc_opt *)be->impl)->bd);
    ck_assert_uint_eq(be->kernels, QC_BE_KERNEL_BF16_DOT); /* reported to bench (its limit) */
    ck_assert_int_eq(qc_backend_set_option(be, "bf16_dot", "7", &e), QC_ERR_ARG);
    ck_assert_uint_eq(be->kernels, QC_BE_KERNEL_BF16_DOT); /* a refused value changes nothing */
    ck_assert_int_eq(qc_backend_set_option(be, "bf16_dot", "0", &e), QC_OK);
    ck_assert_ptr_null(((const qc_opt *)be->impl)->bd);
    ck_assert_uint_eq(be->kernels, dflt);
    qc_backend_destroy(be);
    /* close: the NMSE of the logits (the bf16 tier's measure; on this tiny random model the
     * rounded activations move them by ~1e-3, as on the BF16 fixtures) */
    variant_thread_invariant_and_close(m, PAR0_BD, qc_opt_cpu_has_amx() ? PAR0_FMA : PAR0, 7,
                                       1e-2, "bf16_dot");
    qc_model_free(m);
}
END_TEST

/* ===================================================================================== */
/* Interface                                                                              */
/* ===================================================================================== */

typedef struct {
    int calls;
    int mlp_in;   /* "mlp_in" rows: one per layer and forward */
    int seen[16];
    int dim, n;
} trace_rec;

static void on_trace(void *user, int index, const char *name, int start_pos, int n_tokens, int dim,
                     const float *data) {
    trace_rec *t = user;
    (void)start_pos;
    if (!strcmp(name, "mlp_in")) { /* the mixer output of layer index (qc_backend.h) */
        ck_assert(index >= 0 && index < 16 && isfinite(data[0]));
        t->mlp_in++;
        return;
    }
    ck_assert_str_eq(name, "hidden");
    ck_assert(index >= 0 && index < 16);
    ck_assert(isfinite(data[0]) && isfinite(data[(size_t)n_tokens * dim - 1]));
    t->seen[index]++;
    t->calls++;
    t->dim = dim;
    t->n = n_tokens;
}

START_TEST(errors_and_trace) {
    qc_model *m = tiny_model(0, QC_F32);
    const qc_config *c = &m->cfg;
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.max_tokens = 8;
    qc_backend *be = NULL;
    qc_err e = {0};
    ck_assert_int_eq(qc_optimized_create(m, &bo, &be, &e), QC_OK);
    ck_assert_str_eq(be->name, "optimized");
    ck_assert_ptr_nonnull(strstr(be->describe(be), "thread"));
    qc_state *st = NULL;
    ck_assert_int_eq(qc_state_create(c, 10, &st, &e), QC_OK);
    int32_t toks[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    float *lg = calloc((size_t)12 * c->vocab_size, sizeof(float));
    /* n > max_tokens, n < 1, positions beyond the capacity, bad ids: QC_ERR_RANGE, no change */
    ck_assert_int_eq(qc_backend_forward(be, toks, 9, 0, st, lg, 1, &e), QC_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(e.msg, "max_tokens"));
    ck_assert_int_eq(qc_backend_forward(be, toks, 0, 0, st, lg, 1, &e), QC_ERR_RANGE);
    ck_assert_int_eq(qc_backend_forward(be, toks, 4, 7, st, lg, 1, &e), QC_ERR_RANGE);
    toks[2] = c->vocab_size;
    ck_assert_int_eq(qc_backend_forward(be, toks, 4, 0, st, lg, 1, &e), QC_ERR_RANGE);
    toks[2] = -1;
    ck_assert_int_eq(qc_backend_forward(be, toks, 4, 0, st, lg, 1, &e), QC_ERR_RANGE);
    toks[2] = 3;
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_types[l] == QC_LAYER_LINEAR) {
            for (int i = 0; i < st->conv_dim * st->conv_kernel; i++) ck_assert(st->conv_state[l][i] == 0.0f);
            ck_assert(st->recurrent_state[l][0] == 0.0f);
        }
    /* trace: L + 1 checkpoints per forward, [n, H] each */
    trace_rec tr = {0};
    qc_call call;
    qc_call_default(&call);
    call.trace = on_trace;
    call.trace_user = &tr;
    ck_assert_int_eq(qc_backend_forward_call(be, &call, toks, 5, 0, st, lg, 0, &e), QC_OK);
    ck_assert_int_eq(tr.calls, c->n_layers + 1);
    ck_assert_int_eq(tr.mlp_in, c->n_layers); /* one "mlp_in" row per layer */
    for (int i = 0; i <= c->n_layers; i++) ck_assert_int_eq(tr.seen[i], 1);
    ck_assert_int_eq(tr.dim, c->hidden_size);
    ck_assert_int_eq(tr.n, 5);
    /* logits NULL is allowed */
    ck_assert_int_eq(qc_backend_forward(be, toks + 5, 1, 5, st, NULL, 0, &e), QC_OK);
    free(lg);
    qc_state_destroy(st);
    qc_backend_destroy(be);
    qc_model_free(m);
}
END_TEST

/* the trace hook's view of the threads: was the pass running with helper threads? */
typedef struct {
    const qc_opt *o;
    int threaded, calls;
} par_rec;

static void on_trace_par(void *user, int index, const char *name, int start_pos, int n_tokens,
                         int dim, const float *data) {
    par_rec *p = user;
    (void)index, (void)name, (void)start_pos, (void)n_tokens, (void)dim, (void)data;
    p->threaded += p->o->pool_active;
    p->calls++;
}

/* one forward of n tokens at pos with the trace above: 1 if every trace call ran threaded, 0 if
 * none did (anything else fails) */
static int forward_threaded(qc_backend *be, const int32_t *toks, int n, int pos, qc_state *st) {
    par_rec pr = {be->impl, 0, 0};
    qc_call call;
    qc_call_default(&call);
    call.trace = on_trace_par;
    call.trace_user = &pr;
    qc_err e = {0};
    ck_assert_msg(qc_backend_forward_call(be, &call, toks, n, pos, st, NULL, 0, &e) == QC_OK, "%s", e.msg);
    ck_assert_int_gt(pr.calls, 0);
    ck_assert_msg(pr.threaded == 0 || pr.threaded == pr.calls, "%d of %d trace calls threaded",
                  pr.threaded, pr.calls);
    return pr.threaded > 0;
}

/* 1 if some float of the packed-token strips (written only by the GEMM path) is non-zero */
static int xpack_used(const qc_opt *o) {
    const size_t NR = (size_t)o->k->gemm_nr;
    const size_t count = ((size_t)o->max_tokens + NR - 1) / NR * (size_t)o->kp_max * NR;
    for (size_t i = 0; i < count; i++)
        if (o->xpack[i] != 0.0f) return 1;
    return 0;
}

/* set_option: unknown keys and bad values refused with a message naming them (the thresholds
 * unchanged); gemm_min and par_min take effect from the next call */
START_TEST(options_gemm_min_par_min) {
    qc_model *m = tiny_model(0, QC_F32);
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.max_tokens = 8;
    bo.n_threads = 2;
    qc_backend *be = NULL;
    qc_err e = {0};
    ck_assert_int_eq(qc_optimized_create(m, &bo, &be, &e), QC_OK);
    const qc_opt *o = be->impl;
    ck_assert_int_eq(o->gemm_min, 8);
    ck_assert(o->par_min == 65536.0);
    ck_assert_int_eq(qc_backend_set_option(be, "gemm_minimum", "1", &e), QC_ERR_NO_OPTION);
    ck_assert_msg(strstr(e.msg, "unknown option 'gemm_minimum'") && strstr(e.msg, "gemm_min, par_min"),
                  "%s", e.msg);
    ck_assert_int_eq(qc_backend_set_option(be, "fault.moe", "none", &e), QC_ERR_NO_OPTION);
    static const char *const bad_gemm[] = {"0", "-2", "", "1x", " 4x", "2.5", "99999999999"};
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(qc_backend_set_option(be, "gemm_min", bad_gemm[i], &e), QC_ERR_ARG);
        char want[96];
        snprintf(want, sizeof want, "option gemm_min: '%s' is not an integer >= 1", bad_gemm[i]);
        ck_assert_msg(strstr(e.msg, want), "'%s': %s", bad_gemm[i], e.msg);
    }
    static const char *const bad_par[] = {"-1", "", "x", "nan", "inf", "1e400", "3 "};
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(qc_backend_set_option(be, "par_min", bad_par[i], &e), QC_ERR_ARG);
        char want[96];
        snprintf(want, sizeof want, "option par_min: '%s' is not a finite number >= 0", bad_par[i]);
        ck_assert_msg(strstr(e.msg, want), "'%s': %s", bad_par[i], e.msg);
    }
    ck_assert_int_eq(o->gemm_min, 8);
    ck_assert(o->par_min == 65536.0);

    qc_state *st = NULL;
    ck_assert_int_eq(qc_state_create(&m->cfg, 16, &st, &e), QC_OK);
    const int32_t toks[8] = {3, 1, 4, 1, 5, 9, 2, 6};
    /* gemm_min: a one-token call packs tokens only once gemm_min is 1 */
    ck_assert(forward_threaded(be, toks, 1, 0, st) == 0);
    ck_assert_msg(!xpack_used(o), "a one-token call packed tokens with gemm_min 8");
    ck_assert_int_eq(qc_backend_set_option(be, "gemm_min", "1", &e), QC_OK);
    ck_assert_int_eq(o->gemm_min, 1);
    forward_threaded(be, toks + 1, 1, 1, st);
    ck_assert_msg(xpack_used(o), "a one-token call did not pack tokens with gemm_min 1");
    /* par_min: 5 tokens of this model (5 * 32 * 48 multiply-adds) run serially by default, on
     * the threads with 0, serially again with 1e6 */
    ck_assert(forward_threaded(be, toks, 5, 2, st) == 0);
    ck_assert_int_eq(qc_backend_set_option(be, "par_min", "0", &e), QC_OK);
    ck_assert(forward_threaded(be, toks, 5, 7, st) == 1);
    ck_assert_int_eq(qc_backend_set_option(be, "par_min", "1e6", &e), QC_OK);
    ck_assert(o->par_min == 1e6);
    ck_assert(forward_threaded(be, toks, 1, 12, st) == 0);
    qc_state_destroy(st);
    qc_backend_destroy(be);
    qc_model_free(m);
}
END_TEST

/* last-position logits of a dynamic call equal the last row of all_logits (same path) and
 * logits of the optimized backend match the reference for the real-size lm_head shapes of a
 * wider tiny model (lm_head rows not a multiple of the row block) */
START_TEST(last_logits_equal_last_row) {
    qc_model *m = tiny_model(1, QC_BF16);
    const qc_config *c = &m->cfg;
    qc_backend *be = NULL;
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.max_tokens = 16;
    ck_assert_int_eq(qc_optimized_create(m, &bo, &be, NULL), QC_OK);
    qc_state *s1 = NULL, *s2 = NULL;
    ck_assert_int_eq(qc_state_create(c, 16, &s1, NULL), QC_OK);
    ck_assert_int_eq(qc_state_create(c, 16, &s2, NULL), QC_OK);
    int32_t toks[16];
    make_tokens(toks, 16, c->vocab_size, 5);
    float *all = calloc((size_t)16 * c->vocab_size, 4), *last = calloc((size_t)c->vocab_size, 4);
    ck_assert_int_eq(qc_backend_forward(be, toks, 16, 0, s1, all, 1, NULL), QC_OK);
    ck_assert_int_eq(qc_backend_forward(be, toks, 16, 0, s2, last, 0, NULL), QC_OK);
    /* the last row is computed by the matrix-vector path when only it is asked: close, and the
     * states are bit-identical */
    close_enough(last, all + (size_t)15 * c->vocab_size, (size_t)c->vocab_size, 1e-5, "last logits");
    ck_assert(states_identical(c, s1, s2));
    free(all);
    free(last);
    qc_state_destroy(s1);
    qc_state_destroy(s2);
    qc_backend_destroy(be);
    qc_model_free(m);
}
END_TEST

/* A context above 128 positions: several 64-key blocks of the optimized attention's online
 * softmax, so a later block's score maximum exceeds an earlier one's and the running sum and
 * output must be rescaled (deleting that rescale fails here). rms_norm_eps is 1e-5, not the
 * default 1e-6, so the RMSNorm epsilon and the fixed L2-norm epsilon cannot be confused. */
START_TEST(long_context_matches_reference) {
    qc_config c = tiny_cfg(0);
    c.rms_eps = 1e-5;
    qc_model *m = NULL;
    qc_err e = {0};
    ck_assert_msg(qc_model_synthetic(&c, QC_F32, 11, &m, &e) == QC_OK, "synthetic: %s", e.msg);
    run_cfg rc = {NULL, QC_MODE_DYNAMIC, 300, QC_DN_CHUNKED, 64, 2, NULL};
    check_vs_ref(m, rc, 300, 4, 1e-4, "F32 geom 0 eps 1e-5 dynamic 300 tokens");
    rc.mode = QC_MODE_STATIC;
    check_vs_ref(m, rc, 160, 2, 1e-4, "F32 geom 0 eps 1e-5 static 160 tokens");
    qc_model_free(m);
}
END_TEST

Suite *opt_backend_suite(void) {
    Suite *s = suite_create("opt_backend");
    TCase *tc = tcase_create("conformance");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, matches_reference_all_modes, 0, 9);
    tcase_add_test(tc, every_isa_matches_reference);
    tcase_add_test(tc, long_context_matches_reference);
    suite_add_tcase(s, tc);
    TCase *tt = tcase_create("threads");
    tcase_set_timeout(tt, 300);
    tcase_add_loop_test(tt, bit_identical_for_1_2_3_threads, 0, 2);
    suite_add_tcase(s, tt);
    TCase *ti = tcase_create("interface");
    tcase_add_test(ti, errors_and_trace);
    tcase_add_test(ti, options_gemm_min_par_min);
    tcase_add_test(ti, bf16_dot_thread_invariant_and_close);
    tcase_add_test(ti, amx_default_thread_invariant_and_float32_close);
    tcase_add_test(ti, last_logits_equal_last_row);
    tcase_add_test(ti, fp_mode_restored);
    suite_add_tcase(s, ti);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(opt_backend_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
