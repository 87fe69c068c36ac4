/* test_memplan_backends.c — the memory plan asks the backends: what each built-in backend
 * reports (qc_reference_scratch_bytes / qc_optimized_scratch_bytes, the counting pass of its own
 * layout code) against what its create REALLY allocates, measured by counting the bytes that
 * reach malloc / calloc / realloc / aligned_alloc / posix_memalign during create (this test is
 * linked with -Wl,--wrap for them, CMakeLists.txt: every call from the runtime and both backends
 * goes through the counters below).
 *
 * Required: estimate >= real allocation and estimate <= 1.10 x real, for 1, 2 and 3 threads, on
 * tiny synthetic configs and on the real 0.8b preset dims. The 0.8b backends are created on a
 * "shell" model: every tensor has its real shape, the small vectors create reads (norms, conv
 * taps, A_log, dt_bias) are real zeroed buffers, the big matrices point to one dummy byte
 * buffer create never reads — so no 0.8b weights are allocated. Sizes that would be big to
 * allocate (0.8b at 4096 tokens) are checked through the size functions only. And the
 * registry's built-in table feeds the plan: qc_registry_memplan's backend terms are exactly what
 * the backends report, and qc_memplan_estimate only sums them. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_config.h"
#include "qc/qc_memplan.h"
#include "qc/qc_model.h"
#include "qc/qc_optimized.h"
#include "qc/qc_reference.h"
#include "qc_testmodel.h"
#include "../harness/host/qc_registry.h"

/* ===================================================================================== */
/* Counting allocator (-Wl,--wrap=malloc,... for this executable)                         */
/* ===================================================================================== */

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__real_aligned_alloc(size_t al, size_t n);
int __real_posix_memalign(void **out, size_t al, size_t n);

#define MAX_LIVE 65536
static struct {
    void *p;
    size_t n;
} live[MAX_LIVE];                   /* blocks allocated while counting and not yet freed */
static int n_live;
static long long counted;           /* net bytes requested while counting */
static int table_full;
static atomic_int counting;         /* 1 inside a measured window */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void note_alloc(void *p, size_t n) {
    if (!p || !atomic_load(&counting)) return;
    pthread_mutex_lock(&mu);
    if (n_live < MAX_LIVE) live[n_live].p = p, live[n_live++].n = n;
    else table_full = 1;
    counted += (long long)n;
    pthread_mutex_unlock(&mu);
}

static void note_free(void *p) {
    if (!p || !atomic_load(&counting)) return;
    pthread_mutex_lock(&mu);
    for (int i = n_live - 1; i >= 0; i--)
        if (live[i].p == p) { /* a block of this window: no longer allocated */
            counted -= (long long)live[i].n;
            live[i] = live[--n_live];
            break;
        }
    pthread_mutex_unlock(&mu);
}

void *__wrap_malloc(size_t n) {
    void *p = __real_malloc(n);
    note_alloc(p, n);
    return p;
}
void *__wrap_calloc(size_t k, size_t n) {
    void *p = __real_calloc(k, n);
    note_alloc(p, k * n);
    return p;
}
void *__wrap_realloc(void *old, size_t n) {
    note_free(old);
    void *p = __real_realloc(old, n);
    note_alloc(p, n);
    return p;
}
void __wrap_free(void *p) {
    note_free(p);
    __real_free(p);
}
void *__wrap_aligned_alloc(size_t al, size_t n) {
    void *p = __real_aligned_alloc(al, n);
    note_alloc(p, n);
    return p;
}
int __wrap_posix_memalign(void **out, size_t al, size_t n) {
    int rc = __real_posix_memalign(out, al, n);
    if (rc == 0) note_alloc(*out, n);
    return rc;
}

typedef qc_status (*create_fn)(const qc_model *, const qc_backend_opts *, qc_backend **, qc_err *);

/* The bytes create allocates and keeps (net of anything it frees again). */
static size_t measure_create(create_fn create, const qc_model *m, const qc_backend_opts *o,
                             qc_backend **be) {
    qc_err e;
    qc_err_clear(&e);
    pthread_mutex_lock(&mu);
    n_live = 0, counted = 0, table_full = 0;
    pthread_mutex_unlock(&mu);
    atomic_store(&counting, 1);
    qc_status s = create(m, o, be, &e);
    atomic_store(&counting, 0);
    ck_assert_msg(s == QC_OK, "create: %s", e.msg);
    ck_assert_msg(!table_full, "more than %d blocks during create", MAX_LIVE);
    ck_assert_msg(counted > 0, "nothing counted: is the test linked with -Wl,--wrap=malloc,...?");
    return (size_t)counted;
}

/* ===================================================================================== */
/* Checking one backend x config x options                                                */
/* ===================================================================================== */

static int n_checked;

static void check_one(const char *name, const qc_model *m, const qc_backend_opts *o,
                      const char *what) {
    const int ref = !strcmp(name, "reference");
    create_fn create = ref ? qc_reference_create : qc_optimized_create;
    const size_t est = ref ? qc_reference_scratch_bytes(&m->cfg, o)
                           : qc_optimized_scratch_bytes(&m->cfg, o);
    qc_backend *be = NULL;
    const size_t real = measure_create(create, m, o, &be);
    if (getenv("QC_TEST_VERBOSE"))
        fprintf(stderr, "%-9s %-40s threads %d max_tokens %4d chunk %3d: estimate %zu, real %zu\n",
                name, what, o->n_threads, o->max_tokens, o->chunk_size, est, real);
    ck_assert_msg(est >= real, "%s %s (threads %d, max_tokens %d): estimate %zu < real %zu", name,
                  what, o->n_threads, o->max_tokens, est, real);
    ck_assert_msg((double)est <= 1.10 * (double)real,
                  "%s %s (threads %d, max_tokens %d): estimate %zu > 1.10 x real %zu", name, what,
                  o->n_threads, o->max_tokens, est, real);
    /* the registry's built-in table reports the same number to the plan */
    qc_memplan_req rq;
    qc_memplan_req_init(&rq, &m->cfg, QC_F32, 8, o->max_tokens);
    rq.n_threads = o->n_threads;
    rq.chunk_size = o->chunk_size;
    qc_err e;
    ck_assert_int_eq(qc_registry_memplan(name, &rq, &e), QC_OK);
    ck_assert_int_eq(rq.n_backends, 1);
    ck_assert_uint_eq(rq.backend_bytes[0], est);
    qc_backend_destroy(be);
    n_checked++;
}

/* every built-in backend (the optimized one with 1, 2 and 3 threads) */
static void check_all(const qc_model *m, int max_tokens, int chunk, const char *what) {
    qc_backend_opts o;
    qc_backend_opts_default(&o);
    o.max_tokens = max_tokens;
    o.chunk_size = chunk;
    for (int t = 1; t <= 3; t++) {
        o.n_threads = t;
        check_one("reference", m, &o, what); /* (ignores the thread count) */
        check_one("optimized", m, &o, what);
    }
}

/* ===================================================================================== */
/* Tiny synthetic configs                                                                 */
/* ===================================================================================== */

static qc_config tiny_cfg(int geom) {
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o); /* V 64, H 32, I 48, L 4 (L,L,L,F), nv = 2 nk, dk 8 != dv 6 */
    qc_config c = o.cfg;
    if (geom == 1) { /* odd sizes, nv = nk, untied */
        c.vocab_size = 70, c.hidden_size = 36, c.intermediate_size = 52;
        c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 12, c.rotary_dim = 6;
        c.lin_n_k_heads = 3, c.lin_n_v_heads = 3, c.lin_k_dim = 12, c.lin_v_dim = 10;
        c.n_layers = 5, c.tie_word_embeddings = 0;
        for (int i = 0; i < 5; i++)
            c.layer_types[i] = (i == 1 || i == 4) ? QC_LAYER_FULL : QC_LAYER_LINEAR;
    } else if (geom == 2) { /* multiples of 16 plus tails, more layers */
        c.vocab_size = 100, c.hidden_size = 48, c.intermediate_size = 80;
        c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 32, c.rotary_dim = 16;
        c.lin_n_k_heads = 2, c.lin_n_v_heads = 4, c.lin_k_dim = 32, c.lin_v_dim = 24;
        c.n_layers = 8;
        for (int i = 0; i < 8; i++) c.layer_types[i] = i % 4 == 3 ? QC_LAYER_FULL : QC_LAYER_LINEAR;
    } else if (geom == 3) { /* full attention only */
        c.n_layers = 2;
        c.layer_types[0] = c.layer_types[1] = QC_LAYER_FULL;
    } else if (geom == 4) { /* MoE: 8 routed experts (k 2) + a shared expert, no dense MLP */
        c.tie_word_embeddings = 0;
        c.intermediate_size = 0;
        c.n_experts = 8, c.n_experts_per_tok = 2;
        c.moe_intermediate_size = 16, c.shared_expert_intermediate_size = 24;
    }
    return c;
}

START_TEST(tiny_configs_estimate_is_the_allocation) {
    static const struct {
        int max_tokens, chunk;
    } runs[] = {{1, 64}, {16, 64}, {70, 3}, {300, 64}, {300, 300}};
    for (int g = 0; g < 5; g++) {
        qc_config c = tiny_cfg(g);
        qc_model *m = NULL;
        qc_err e;
        ck_assert_msg(qc_model_synthetic(&c, g == 1 ? QC_F16 : QC_BF16, 3, &m, &e) == QC_OK, "%s",
                      e.msg);
        for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
            char what[64];
            snprintf(what, sizeof what, "tiny geometry %d", g);
            check_all(m, runs[r].max_tokens, runs[r].chunk, what);
        }
        qc_model_free(m);
    }
}
END_TEST

/* The weight bytes the plan counts are the synthetic model's, for every weight dtype (Q8_0:
 * 34-byte blocks for the dense projections and an untied lm_head, BF16 for the rest), dense
 * and MoE, tied and untied; the active bytes are at most the total. */
START_TEST(weight_bytes_every_dtype) {
    const qc_dtype dts[] = {QC_F32, QC_BF16, QC_F16, QC_Q8_0};
    int n_q8 = 0;
    for (int g = 0; g < 5; g++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (int tie = 0; tie < 2; tie++) {
                qc_config c = tiny_cfg(g);
                if (dts[d] == QC_Q8_0) { /* every projection's input a multiple of 32 */
                    if (qc_cfg_is_moe(&c) || g == 1 || g == 2) continue;
                    c.intermediate_size = 64, c.lin_v_dim = 16;
                    n_q8++;
                }
                c.tie_word_embeddings = tie;
                qc_model *m = NULL;
                qc_err e;
                ck_assert_msg(qc_model_synthetic(&c, dts[d], 3, &m, &e) == QC_OK, "%s", e.msg);
                uint64_t tot = 0, act = 0;
                ck_assert_int_eq(qc_memplan_weight_bytes(&c, dts[d], &tot, &e), QC_OK);
                ck_assert_int_eq(qc_memplan_active_weight_bytes(&c, dts[d], &act, &e), QC_OK);
                ck_assert_msg(tot == qc_model_weight_bytes(m),
                              "geometry %d %s tie %d: plan %llu != model %zu", g,
                              qc_dtype_str(dts[d]), tie, (unsigned long long)tot,
                              qc_model_weight_bytes(m));
                ck_assert_uint_le(act, tot);
                qc_model_free(m);
            }
    ck_assert_int_eq(n_q8, 4); /* geometries 0 and 3, tied and untied */
}
END_TEST

/* ===================================================================================== */
/* The real 0.8b dims, on a shell model                                                   */
/* ===================================================================================== */

typedef struct {
    qc_model m;
    void *bufs[QC_MAX_LAYERS * 8 + 8];
    int n_bufs;
} shell_model;

static unsigned char dummy[64]; /* what every big matrix points to: never read at create */

static void shell_tensor(shell_model *s, qc_tensor *t, qc_dtype dt, int nd, int64_t d0, int64_t d1,
                         int64_t d2, int real) {
    t->dtype = dt;
    t->ndim = nd;
    t->shape[0] = d0, t->shape[1] = d1, t->shape[2] = d2;
    if (real) {
        void *b = calloc(qc_tensor_numel(t), qc_dtype_size(dt));
        ck_assert_ptr_nonnull(b);
        s->bufs[s->n_bufs++] = b;
        t->data = b;
    } else {
        t->data = dummy;
    }
}

/* Every tensor of cfg with its real shape (qc_model.h), BF16 (A_log and the gated-norm weight
 * F32, as checkpoints store them). */
static shell_model *shell_make(const qc_config *c) {
    shell_model *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    s->m.cfg = *c;
    s->m.layers = calloc((size_t)c->n_layers, sizeof *s->m.layers);
    ck_assert_ptr_nonnull(s->m.layers);
    const int64_t V = c->vocab_size, H = c->hidden_size, I = c->intermediate_size;
    const int64_t nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim;
    const int64_t nv = c->lin_n_v_heads, dv = c->lin_v_dim, C = qc_cfg_conv_dim(c);
    const qc_dtype B = QC_BF16;
    shell_tensor(s, &s->m.embed, B, 2, V, H, 0, 0);
    s->m.lm_head = s->m.embed; /* tied */
    shell_tensor(s, &s->m.final_norm, B, 1, H, 0, 0, 1);
    for (int l = 0; l < c->n_layers; l++) {
        qc_layer_weights *w = &s->m.layers[l];
        shell_tensor(s, &w->input_norm, B, 1, H, 0, 0, 1);
        shell_tensor(s, &w->post_norm, B, 1, H, 0, 0, 1);
        shell_tensor(s, &w->mlp_gate, B, 2, I, H, 0, 0);
        shell_tensor(s, &w->mlp_up, B, 2, I, H, 0, 0);
        shell_tensor(s, &w->mlp_down, B, 2, H, I, 0, 0);
        if (c->layer_types[l] == QC_LAYER_FULL) {
            shell_tensor(s, &w->q_proj, B, 2, 2 * nh * hd, H, 0, 0);
            shell_tensor(s, &w->k_proj, B, 2, nkv * hd, H, 0, 0);
            shell_tensor(s, &w->v_proj, B, 2, nkv * hd, H, 0, 0);
            shell_tensor(s, &w->o_proj, B, 2, H, nh * hd, 0, 0);
            shell_tensor(s, &w->q_norm, B, 1, hd, 0, 0, 1);
            shell_tensor(s, &w->k_norm, B, 1, hd, 0, 0, 1);
        } else {
            shell_tensor(s, &w->in_proj_qkv, B, 2, C, H, 0, 0);
            shell_tensor(s, &w->in_proj_z, B, 2, nv * dv, H, 0, 0);
            shell_tensor(s, &w->in_proj_b, B, 2, nv, H, 0, 0);
            shell_tensor(s, &w->in_proj_a, B, 2, nv, H, 0, 0);
            shell_tensor(s, &w->conv1d, B, 3, C, 1, c->conv_kernel, 1);
            shell_tensor(s, &w->dt_bias, B, 1, nv, 0, 0, 1);
            shell_tensor(s, &w->A_log, QC_F32, 1, nv, 0, 0, 1);
            shell_tensor(s, &w->lin_norm, QC_F32, 1, dv, 0, 0, 1);
            shell_tensor(s, &w->out_proj, B, 2, H, nv * dv, 0, 0);
        }
    }
    qc_err e;
    ck_assert_msg(qc_model_validate(&s->m, &e) == QC_OK, "shell model: %s", e.msg);
    return s;
}

static void shell_free(shell_model *s) {
    for (int i = 0; i < s->n_bufs; i++) free(s->bufs[i]);
    free(s->m.layers);
    free(s);
}

START_TEST(preset_08b_estimate_is_the_allocation) {
    qc_config c;
    qc_err e;
    ck_assert_int_eq(qc_config_preset("0.8b", &c, &e), QC_OK);
    shell_model *s = shell_make(&c);
    check_all(&s->m, 1, 64, "0.8b dims");
    check_all(&s->m, 64, 64, "0.8b dims");
    check_all(&s->m, 300, 64, "0.8b dims"); /* optimized chunk scratch 256 < max_tokens */
    shell_free(s);
}
END_TEST

/* Where allocating would be big: the size functions alone, on the 0.8b dims at 4096 tokens. */
START_TEST(preset_08b_large_sizes_only) {
    qc_config c;
    qc_err e;
    ck_assert_int_eq(qc_config_preset("0.8b", &c, &e), QC_OK);
    qc_backend_opts o;
    qc_backend_opts_default(&o);
    o.max_tokens = 4096;
    o.n_threads = 1;
    const size_t ref = qc_reference_scratch_bytes(&c, &o);
    const size_t opt1 = qc_optimized_scratch_bytes(&c, &o);
    o.n_threads = 2;
    const size_t opt2 = qc_optimized_scratch_bytes(&c, &o);
    o.n_threads = 3;
    const size_t opt3 = qc_optimized_scratch_bytes(&c, &o);
    /* the reference holds one chunk of max_tokens: its [4096]^2 T matrix alone is 64 MiB */
    ck_assert_uint_gt(ref, (size_t)4096 * 4096 * 4);
    /* at least the residual stream, normed input and block output [4096, H] of each */
    ck_assert_uint_gt(opt1, (size_t)3 * 4096 * c.hidden_size * 4);
    /* per-thread scratch: every extra thread costs the same */
    ck_assert_uint_gt(opt2, opt1);
    ck_assert_uint_eq(opt3 - opt2, opt2 - opt1);
    /* more tokens never cost less */
    o.max_tokens = 8192;
    ck_assert_uint_gt(qc_reference_scratch_bytes(&c, &o), ref);
    ck_assert_uint_gt(qc_optimized_scratch_bytes(&c, &o), opt3);
    /* unplannable requests: SIZE_MAX, never a wrapped-around small number */
    o.max_tokens = 0;
    ck_assert_uint_eq(qc_reference_scratch_bytes(&c, &o), SIZE_MAX);
    ck_assert_uint_eq(qc_optimized_scratch_bytes(&c, &o), SIZE_MAX);
    o.max_tokens = 128;
    qc_config bad = c;
    bad.hidden_size = 1 << 25;
    ck_assert_uint_eq(qc_reference_scratch_bytes(&bad, &o), SIZE_MAX);
    ck_assert_uint_eq(qc_optimized_scratch_bytes(&bad, &o), SIZE_MAX);
    ck_assert_uint_eq(qc_reference_scratch_bytes(NULL, &o), SIZE_MAX);
    /* NULL options: the defaults */
    qc_backend_opts_default(&o);
    ck_assert_uint_eq(qc_reference_scratch_bytes(&c, NULL), qc_reference_scratch_bytes(&c, &o));
    ck_assert_uint_eq(qc_optimized_scratch_bytes(&c, NULL), qc_optimized_scratch_bytes(&c, &o));
}
END_TEST

/* ===================================================================================== */
/* The plan sums what the registry / backends report                                      */
/* ===================================================================================== */

START_TEST(plan_sums_what_the_backends_report) {
    qc_config c;
    qc_err e;
    ck_assert_int_eq(qc_config_preset("0.8b", &c, &e), QC_OK);
    for (int t = 1; t <= 3; t++) {
        qc_memplan_req rq;
        qc_memplan_req_init(&rq, &c, QC_BF16, 4096, 512);
        ck_assert_int_eq(rq.n_backends, 0);
        ck_assert_int_eq(rq.chunk_size, 64);
        rq.n_threads = t;
        ck_assert_int_eq(qc_registry_memplan("all", &rq, &e), QC_OK);
        ck_assert_int_eq(rq.n_backends, 2);
        qc_backend_opts o;
        qc_backend_opts_default(&o);
        o.max_tokens = 512;
        o.n_threads = t;
        ck_assert_uint_eq(rq.backend_bytes[0], qc_reference_scratch_bytes(&c, &o));
        ck_assert_uint_eq(rq.backend_bytes[1], qc_optimized_scratch_bytes(&c, &o));
        qc_memplan p;
        ck_assert_int_eq(qc_memplan_estimate(&rq, &p, &e), QC_OK);
        ck_assert_uint_eq(p.backend, rq.backend_bytes[0] + rq.backend_bytes[1]);
        /* one backend: only its own term */
        ck_assert_int_eq(qc_registry_memplan("optimized", &rq, &e), QC_OK);
        ck_assert_int_eq(rq.n_backends, 1);
        ck_assert_uint_eq(rq.backend_bytes[0], qc_optimized_scratch_bytes(&c, &o));
        qc_memplan p1;
        ck_assert_int_eq(qc_memplan_estimate(&rq, &p1, &e), QC_OK);
        ck_assert_uint_eq(p1.backend, rq.backend_bytes[0]);
        ck_assert_uint_eq(p1.total - p1.backend, p.total - p.backend);
    }
    /* the planner never re-derives a layout: whatever a backend reports is what it adds */
    qc_memplan_req rq;
    qc_memplan_req_init(&rq, &c, QC_BF16, 16, 16);
    qc_memplan p;
    ck_assert_int_eq(qc_memplan_estimate(&rq, &p, &e), QC_OK);
    ck_assert_uint_eq(p.backend, 0);
    ck_assert_int_eq(qc_memplan_add_backend(&rq, "plugin:x.so", 12345, &e), QC_OK);
    ck_assert_int_eq(qc_memplan_add_backend(&rq, "plugin:y.so", 1, &e), QC_OK);
    ck_assert_int_eq(qc_memplan_estimate(&rq, &p, &e), QC_OK);
    ck_assert_uint_eq(p.backend, 12346);
    for (int i = rq.n_backends; i < QC_MEMPLAN_MAX_BACKENDS; i++)
        ck_assert_int_eq(qc_memplan_add_backend(&rq, "more", 1, &e), QC_OK);
    ck_assert_int_eq(qc_memplan_add_backend(&rq, "one too many", 1, &e), QC_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "one too many"), "%s", e.msg);
    /* an unknown name */
    ck_assert_int_eq(qc_registry_memplan("gpu", &rq, &e), QC_ERR_ARG);
}
END_TEST

/* record and bench plan with the options the backend is REALLY created with
 * (qc_memplan_req_set_opts): threads 1 and 2, a chunk size above the optimized minimum chunk
 * scratch (1000 > 256: the plan at the default 64 would be too small), dense and MoE. */
START_TEST(plan_uses_the_create_options) {
    static const int geoms[2] = {0, 4};
    for (int gi = 0; gi < 2; gi++) {
        qc_config c = tiny_cfg(geoms[gi]);
        qc_model *m = NULL;
        qc_err e;
        ck_assert_msg(qc_model_synthetic(&c, QC_BF16, 5, &m, &e) == QC_OK, "%s", e.msg);
        for (int t = 1; t <= 2; t++) {
            qc_backend_opts o;
            qc_backend_opts_default(&o);
            o.max_tokens = 1200;
            o.n_threads = t;
            o.chunk_size = 1000;
            qc_memplan_req rq;
            qc_memplan_req_init(&rq, &m->cfg, QC_BF16, 1200, 1);
            qc_memplan_req_set_opts(&rq, &o);
            ck_assert_int_eq(rq.max_tokens, 1200);
            ck_assert_int_eq(rq.n_threads, t);
            ck_assert_int_eq(rq.chunk_size, 1000);
            ck_assert_int_eq(qc_registry_memplan("all", &rq, &e), QC_OK);
            ck_assert_int_eq(rq.n_backends, 2);
            qc_backend *be = NULL;
            const size_t real_ref = measure_create(qc_reference_create, m, &o, &be);
            qc_backend_destroy(be);
            be = NULL;
            const size_t real_opt = measure_create(qc_optimized_create, m, &o, &be);
            qc_backend_destroy(be);
            if (getenv("QC_TEST_VERBOSE"))
                fprintf(stderr, "plan-from-opts geom %d threads %d: ref %llu >= %zu, opt %llu >= %zu\n",
                        geoms[gi], t, (unsigned long long)rq.backend_bytes[0], real_ref,
                        (unsigned long long)rq.backend_bytes[1], real_opt);
            ck_assert_uint_ge(rq.backend_bytes[0], real_ref);
            ck_assert_uint_ge(rq.backend_bytes[1], real_opt);
            /* the default-options plan would not have covered this optimized create */
            qc_memplan_req d;
            qc_memplan_req_init(&d, &m->cfg, QC_BF16, 1200, 1200);
            d.n_threads = t;
            ck_assert_int_eq(qc_registry_memplan("all", &d, &e), QC_OK);
            ck_assert_uint_lt(d.backend_bytes[1], real_opt);
        }
        qc_model_free(m);
    }
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("memplan_backends");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, tiny_configs_estimate_is_the_allocation);
    tcase_add_test(tc, weight_bytes_every_dtype);
    tcase_add_test(tc, preset_08b_estimate_is_the_allocation);
    tcase_add_test(tc, preset_08b_large_sizes_only);
    tcase_add_test(tc, plan_sums_what_the_backends_report);
    tcase_add_test(tc, plan_uses_the_create_options);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
