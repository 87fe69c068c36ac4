/* test_builtin_plugin.c — the built-in backends built as runtime plugins (adapters/builtin/):
 * libqc_plugin_reference.so and libqc_plugin_optimized.so, loaded with dlopen from the build dir.
 *
 * Asserted:
 *   - the ABI: entry symbol, abi_version, struct_size, every entry present; the library's own
 *     qwenconform symbols are not exported; info (dims, caps, name, capacity, max_tokens);
 *   - bit-identity (memcmp): prefill + 3 teacher-forced decode steps through the plugin give the
 *     same logits (every prompt position and every decode step), hidden states (every index,
 *     every position) and state buffers (every layer and kind, whole capacity: unused slots
 *     included; after prefill and after decode) as the built-in backend + qc_runner in the same
 *     process, on an F32 and a BF16 fixture, for both plugins, static / dynamic (two chunks) /
 *     no-KV strategies; with set_option dn_kernel=recurrent, chunk_size=3, chunk_size=300,
 *     threads (optimized); with the default open options (capacity 32768 for a tiny model:
 *     caches read trimmed);
 *     after a NaN fill + reset; the direct run both with and without a trace hook installed;
 *     a 300-token call with chunk_size 290 (the optimized backend recreated for its scratch);
 *     the default open sizes (max_tokens 32768) against backends sized 146 / 300 on 130 / 300
 *     tokens;
 *   - error paths: bad token id, n = 0, start_pos beyond the capacity, start_pos != position,
 *     unknown option, bad option value, threads on the reference, n_pos beyond the capacity, a
 *     missing model directory, a bad open option: the right return codes and a non-empty
 *     last_error (for open: last_error(NULL) naming the path), state untouched. */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_model.h"
#include "qc/qc_prefill.h"
#include "qc/qc_runtime_plugin.h"
#include "qc/qc_state.h"
#include "../harness/host/qc_registry.h"

#define F32_MODEL QC_SOURCE_DIR "/fixtures/tiny-f32-tied-flat/model"
#define BF16_MODEL QC_SOURCE_DIR "/fixtures/tiny-bf16-gva-nested/model"

#define CAP 40        /* state capacity of the comparisons */
#define NPROMPT 13    /* prompt tokens */
#define NDEC 3        /* decode steps */
#define MSL 8         /* max_seq_len of the dynamic strategy: chunks of 8 + 5 */

static const char *const BACKENDS[2] = {"reference", "optimized"};

/* ===================================================================================== */
/* loading                                                                                */
/* ===================================================================================== */

typedef struct {
    void *lib;
    const qc_runtime_plugin *p;
} plug;

static plug plug_load(const char *backend) {
    char path[4096];
    snprintf(path, sizeof path, "%s/libqc_plugin_%s.so", QC_BINARY_DIR, backend);
    plug pl;
    pl.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(pl.lib != NULL, "dlopen %s: %s", path, dlerror());
    qc_runtime_plugin_entry_fn fn;
    void *sym = dlsym(pl.lib, QC_PLUGIN_ENTRY_SYMBOL);
    ck_assert_msg(sym != NULL, "%s: no %s", path, QC_PLUGIN_ENTRY_SYMBOL);
    memcpy(&fn, &sym, sizeof fn);
    pl.p = fn();
    ck_assert_ptr_nonnull(pl.p);
    return pl;
}

static void plug_unload(plug *pl) {
    if (pl->lib) dlclose(pl->lib);
    pl->lib = NULL;
}

static qc_model *load_model(const char *dir) {
    qc_model *m = NULL;
    qc_err e;
    qc_err_clear(&e);
    qc_status s = qc_model_load(dir, &m, &e);
    ck_assert_msg(s == QC_OK, "load %s: %s", dir, e.msg);
    return m;
}

static void *plug_open(const plug *pl, const char *dir, const char *opts, qc_plugin_info *info) {
    void *h = NULL;
    int rc = pl->p->open(dir, opts, info, &h);
    ck_assert_msg(rc == QC_PLUGIN_OK, "open %s [%s]: %d %s", dir, opts, rc, pl->p->last_error(NULL));
    ck_assert_ptr_nonnull(h);
    return h;
}

/* ===================================================================================== */
/* one run: prefill + NDEC decode steps, everything recorded                              */
/* ===================================================================================== */

typedef struct {
    int V, H, L1, T;    /* T = NPROMPT + NDEC positions */
    float *logits;      /* [T, V]: every prompt position, then each decode step */
    float *hidden;      /* [L+1, T, H] by absolute position (last writer wins, as no-KV) */
    unsigned char *seen;/* [L+1, T] */
    qc_state *pre, *post; /* state after prefill / after decode, capacity CAP */
} run_out;

static void out_init(run_out *o, const qc_model *m) {
    memset(o, 0, sizeof *o);
    o->V = m->cfg.vocab_size;
    o->H = m->cfg.hidden_size;
    o->L1 = m->cfg.n_layers + 1;
    o->T = NPROMPT + NDEC;
    o->logits = calloc((size_t)o->T * o->V, sizeof(float));
    o->hidden = calloc((size_t)o->L1 * o->T * o->H, sizeof(float));
    o->seen = calloc((size_t)o->L1 * o->T, 1);
    ck_assert(o->logits && o->hidden && o->seen);
    ck_assert_int_eq(qc_state_create(&m->cfg, CAP, &o->pre, NULL), QC_OK);
    ck_assert_int_eq(qc_state_create(&m->cfg, CAP, &o->post, NULL), QC_OK);
}

static void out_free(run_out *o) {
    free(o->logits);
    free(o->hidden);
    free(o->seen);
    qc_state_destroy(o->pre);
    qc_state_destroy(o->post);
}

static void put_hidden(run_out *o, int index, int start_pos, int n, const float *data) {
    ck_assert(index >= 0 && index < o->L1);
    for (int i = 0; i < n; i++) {
        int row = start_pos + i;
        ck_assert(row >= 0 && row < o->T);
        memcpy(o->hidden + ((size_t)index * o->T + row) * o->H, data + (size_t)i * o->H,
               (size_t)o->H * sizeof(float));
        o->seen[(size_t)index * o->T + row] = 1;
    }
}

static void trace_cb(void *user, int index, const char *name, int start_pos, int n_tokens, int dim,
                     const float *data) {
    run_out *o = user;
    if (name && strcmp(name, "hidden")) return; /* "mlp_in" / "moe_in" / "router_topk" */
    ck_assert_int_eq(dim, o->H);
    put_hidden(o, index, start_pos, n_tokens, data);
}

typedef struct {
    qc_mode mode;
    qc_dn_kernel dn;
    int chunk;          /* chunk_size */
    int threads;        /* optimized n_threads (0 = OpenMP default) */
    int trace;          /* direct run: install the trace hook (hidden recorded) */
    int garbage;        /* plugin run: fill_state(NaN) + reset before the run */
    const char *open_opts; /* plugin open options (NULL: "max_context=CAP,max_tokens=CAP") */
} variant;

static void tokens_for(const qc_model *m, int32_t *toks) {
    const int V = m->cfg.vocab_size;
    for (int i = 0; i < NPROMPT + NDEC; i++) toks[i] = (int32_t)((i * 37 + 11) % V);
}

/* A built-in backend by name, through the harness's registry. */
static qc_status builtin_create(const char *name, const qc_model *m, const qc_backend_opts *o,
                                qc_backend **out, qc_err *e) {
    qc_runtime_spec rs;
    qc_status s = qc_registry_parse(name, 0, &rs, e);
    return s ? s : qc_registry_create(&rs, NULL, m, o, out, e);
}

/* Directly: the registry's built-in backend + qc_runner. */
static void run_direct(const qc_model *m, const char *backend, const variant *va, run_out *o) {
    out_init(o, m);
    int32_t toks[NPROMPT + NDEC];
    tokens_for(m, toks);
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.max_tokens = CAP;
    bo.dn_kernel = va->dn;
    bo.chunk_size = va->chunk;
    bo.n_threads = va->threads;
    if (va->trace) {
        bo.trace = trace_cb;
        bo.trace_user = o;
    }
    qc_backend *be = NULL;
    qc_err e;
    qc_err_clear(&e);
    ck_assert_msg(builtin_create(backend, m, &bo, &be, &e) == QC_OK, "%s", e.msg);
    qc_state *st = NULL;
    ck_assert_int_eq(qc_state_create(&m->cfg, CAP, &st, NULL), QC_OK);
    qc_profile p;
    qc_profile_for_mode(&p, va->mode, MSL, CAP);
    qc_runner *r = NULL;
    ck_assert_msg(qc_runner_create(be, &p, st, &r, &e) == QC_OK, "%s", e.msg);
    ck_assert_msg(qc_runner_prefill(r, toks, NPROMPT, 0, o->logits, NULL, NULL, &e) == QC_OK,
                  "%s", e.msg);
    qc_state_copy(o->pre, st);
    for (int s = 0; s < NDEC; s++)
        ck_assert_msg(qc_runner_decode(r, toks[NPROMPT + s], o->logits + (size_t)(NPROMPT + s) * o->V,
                                       &e) == QC_OK,
                      "%s", e.msg);
    qc_state_copy(o->post, st);
    qc_runner_destroy(r);
    qc_state_destroy(st);
    qc_backend_destroy(be);
}

/* Read every state buffer of the plugin into dst (capacity CAP: the first CAP positions). */
static void read_state(const plug *pl, void *h, qc_state *dst) {
    for (int l = 0; l < dst->n_layers; l++) {
        if (dst->k_cache[l]) {
            ck_assert_msg(pl->p->get_state(h, l, QC_STATE_K_CACHE, CAP, dst->k_cache[l]) == 0, "%s",
                          pl->p->last_error(h));
            ck_assert_msg(pl->p->get_state(h, l, QC_STATE_V_CACHE, CAP, dst->v_cache[l]) == 0, "%s",
                          pl->p->last_error(h));
            ck_assert_int_eq(pl->p->get_state(h, l, QC_STATE_CONV, CAP, dst->k_cache[l]),
                             QC_PLUGIN_ERROR);
        } else {
            ck_assert_msg(pl->p->get_state(h, l, QC_STATE_CONV, 0, dst->conv_state[l]) == 0, "%s",
                          pl->p->last_error(h));
            ck_assert_msg(pl->p->get_state(h, l, QC_STATE_RECURRENT, 0, dst->recurrent_state[l]) == 0,
                          "%s", pl->p->last_error(h));
            ck_assert_int_eq(pl->p->get_state(h, l, QC_STATE_K_CACHE, 1, dst->conv_state[l]),
                             QC_PLUGIN_ERROR);
        }
    }
}

/* One forward through the plugin; hidden states of the call recorded. */
static void pfwd(const plug *pl, void *h, run_out *o, const int32_t *toks, int n, int start_pos,
                 int all, float *logits) {
    int rc = pl->p->forward(h, toks, n, start_pos, all, logits);
    ck_assert_msg(rc == QC_PLUGIN_OK, "forward(n %d, start_pos %d): %s", n, start_pos,
                  pl->p->last_error(h));
    float *buf = malloc((size_t)n * o->H * sizeof(float));
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < o->L1; i++) {
        ck_assert_msg(pl->p->get_hidden(h, i, buf) == QC_PLUGIN_OK, "%s", pl->p->last_error(h));
        put_hidden(o, i, start_pos, n, buf);
    }
    free(buf);
}

/* The same sequence through the plugin, driven as the runner drives a backend. */
static void run_plugin(const plug *pl, const qc_model *m, const char *dir, const variant *va,
                       run_out *o) {
    out_init(o, m);
    const int V = o->V;
    int32_t toks[NPROMPT + NDEC];
    tokens_for(m, toks);
    char opts[128];
    snprintf(opts, sizeof opts, "max_context=%d,max_tokens=%d", CAP, CAP);
    qc_plugin_info info;
    void *h = plug_open(pl, dir, va->open_opts ? va->open_opts : opts, &info);
    char num[32];
    if (va->dn == QC_DN_RECURRENT) ck_assert_int_eq(pl->p->set_option(h, "dn_kernel", "recurrent"), 0);
    if (va->chunk != 64) {
        snprintf(num, sizeof num, "%d", va->chunk);
        ck_assert_msg(pl->p->set_option(h, "chunk_size", num) == 0, "%s", pl->p->last_error(h));
    }
    if (va->threads) {
        snprintf(num, sizeof num, "%d", va->threads);
        ck_assert_msg(pl->p->set_option(h, "threads", num) == 0, "%s", pl->p->last_error(h));
    }
    if (va->garbage) {
        ck_assert_int_eq(pl->p->fill_state(h, NAN), 0);
        float kv[64];
        ck_assert_int_eq(pl->p->get_state(h, m->cfg.n_layers - 1, QC_STATE_K_CACHE, 1, kv), 0);
        ck_assert(isnan(kv[0]));
        ck_assert_int_eq(pl->p->reset(h), 0);
    }
    switch (va->mode) {
    case QC_MODE_STATIC:
        for (int i = 0; i < NPROMPT; i++) pfwd(pl, h, o, toks + i, 1, i, 0, o->logits + (size_t)i * V);
        break;
    case QC_MODE_DYNAMIC:
        for (int done = 0; done < NPROMPT; done += MSL) {
            int len = NPROMPT - done < MSL ? NPROMPT - done : MSL;
            pfwd(pl, h, o, toks + done, len, done, 1, o->logits + (size_t)done * V);
        }
        break;
    case QC_MODE_NOKV: {
        /* prefill of MSL-chunks: each recomputes everything from position 0 after a reset */
        float *all = malloc((size_t)(NPROMPT + NDEC) * V * sizeof(float));
        ck_assert_ptr_nonnull(all);
        for (int done = 0; done < NPROMPT; done += MSL) {
            int len = NPROMPT - done < MSL ? NPROMPT - done : MSL;
            ck_assert_int_eq(pl->p->reset(h), 0);
            pfwd(pl, h, o, toks, done + len, 0, 1, all);
            memcpy(o->logits + (size_t)done * V, all + (size_t)done * V, (size_t)len * V * sizeof(float));
        }
        free(all);
        break;
    }
    }
    read_state(pl, h, o->pre);
    for (int s = 0; s < NDEC; s++) {
        int pos = NPROMPT + s;
        float *lg = o->logits + (size_t)pos * V;
        if (va->mode == QC_MODE_NOKV) {
            float *all = malloc((size_t)(pos + 1) * V * sizeof(float));
            ck_assert_ptr_nonnull(all);
            ck_assert_int_eq(pl->p->reset(h), 0);
            pfwd(pl, h, o, toks, pos + 1, 0, 1, all);
            memcpy(lg, all + (size_t)pos * V, (size_t)V * sizeof(float));
            free(all);
        } else {
            pfwd(pl, h, o, toks + pos, 1, pos, 0, lg);
        }
    }
    read_state(pl, h, o->post);
    pl->p->close(h);
}

/* ===================================================================================== */
/* comparison                                                                             */
/* ===================================================================================== */

static void same_buf(const char *what, const float *a, const float *b, size_t n, const char *ctx) {
    if (!a && !b) return;
    ck_assert_msg(a && b, "%s %s: one side missing", ctx, what);
    if (memcmp(a, b, n * sizeof(float)) == 0) return;
    size_t i = 0;
    while (i < n && memcmp(a + i, b + i, sizeof(float)) == 0) i++;
    ck_abort_msg("%s %s: not bit-identical at element %zu of %zu: %.9g vs %.9g", ctx, what, i, n,
                 (double)a[i], (double)b[i]);
}

static void same_state(const char *what, const qc_state *a, const qc_state *b, const char *ctx) {
    char name[96];
    const size_t kv = (size_t)a->n_kv_heads * a->max_context_len * a->head_dim;
    const size_t cv = (size_t)a->conv_dim * a->conv_kernel;
    const size_t rc = (size_t)a->n_v_heads * a->k_dim * a->v_dim;
    for (int l = 0; l < a->n_layers; l++) {
        snprintf(name, sizeof name, "%s layer %d k_cache", what, l);
        same_buf(name, a->k_cache[l], b->k_cache[l], kv, ctx);
        snprintf(name, sizeof name, "%s layer %d v_cache", what, l);
        same_buf(name, a->v_cache[l], b->v_cache[l], kv, ctx);
        snprintf(name, sizeof name, "%s layer %d conv_state", what, l);
        same_buf(name, a->conv_state[l], b->conv_state[l], cv, ctx);
        snprintf(name, sizeof name, "%s layer %d recurrent_state", what, l);
        same_buf(name, a->recurrent_state[l], b->recurrent_state[l], rc, ctx);
    }
}

/* logits and states always; hidden when the direct run traced. */
static void same_run(const run_out *d, const run_out *p, int hidden, const char *ctx) {
    same_buf("logits", d->logits, p->logits, (size_t)d->T * d->V, ctx);
    same_state("prefill", d->pre, p->pre, ctx);
    same_state("decode", d->post, p->post, ctx);
    if (hidden) {
        for (size_t i = 0; i < (size_t)d->L1 * d->T; i++) {
            ck_assert_msg(d->seen[i] && p->seen[i], "%s: hidden row %zu not seen (%d/%d)", ctx, i,
                          d->seen[i], p->seen[i]);
        }
        same_buf("hidden", d->hidden, p->hidden, (size_t)d->L1 * d->T * d->H, ctx);
    }
    /* the comparison is not vacuous: finite, non-zero logits */
    int nz = 0;
    for (size_t i = 0; i < (size_t)d->T * d->V; i++) {
        ck_assert_msg(isfinite(d->logits[i]), "%s: non-finite logit %zu", ctx, i);
        nz |= d->logits[i] != 0.0f;
    }
    ck_assert_msg(nz, "%s: all-zero logits", ctx);
}

static void check_variant(const char *backend, const char *dir, const variant *va) {
    char ctx[256];
    snprintf(ctx, sizeof ctx, "%s %s mode %s dn %s chunk %d threads %d garbage %d opts [%s]",
             backend, dir + strlen(QC_SOURCE_DIR) + 1, qc_mode_str(va->mode),
             va->dn == QC_DN_RECURRENT ? "recurrent" : "chunked", va->chunk, va->threads,
             va->garbage, va->open_opts ? va->open_opts : "default test opts");
    qc_model *m = load_model(dir);
    plug pl = plug_load(backend);
    run_out p, d, dn;
    run_plugin(&pl, m, dir, va, &p);
    variant traced = *va;
    traced.trace = 1;
    run_direct(m, backend, &traced, &d);
    same_run(&d, &p, 1, ctx);
    variant plain = *va;
    plain.trace = 0;
    run_direct(m, backend, &plain, &dn); /* the hook must not change a number */
    same_run(&dn, &p, 0, ctx);
    out_free(&p);
    out_free(&d);
    out_free(&dn);
    plug_unload(&pl);
    qc_model_free(m);
}

static variant base_variant(qc_mode mode) {
    variant v;
    memset(&v, 0, sizeof v);
    v.mode = mode;
    v.dn = QC_DN_CHUNKED;
    v.chunk = 64;
    return v;
}

/* ===================================================================================== */
/* tests                                                                                  */
/* ===================================================================================== */

START_TEST(abi_and_info) {
    const char *be = BACKENDS[_i];
    plug pl = plug_load(be);
    const qc_runtime_plugin *p = pl.p;
    ck_assert_uint_eq(p->abi_version, QC_PLUGIN_ABI_VERSION);
    ck_assert_uint_eq(p->struct_size, sizeof(qc_runtime_plugin));
    ck_assert_uint_ge(p->struct_size, QC_PLUGIN_V1_SIZE);
    ck_assert(p->open && p->reset && p->forward && p->close && p->last_error);
    ck_assert(p->get_hidden && p->get_state && p->fill_state && p->set_option);
    ck_assert_uint_ge(p->struct_size, QC_PLUGIN_LIFECYCLE_SIZE);
    ck_assert(p->snapshot && p->restore && p->select_sequence && !p->trim);
    /* only the entry is exported: the private qwenconform copy is invisible */
    ck_assert_ptr_null(dlsym(pl.lib, "qc_model_load"));
    ck_assert_ptr_null(dlsym(pl.lib, "qc_backend_alloc"));
    ck_assert_ptr_nonnull(p->last_error(NULL));

    qc_model *m = load_model(F32_MODEL);
    qc_plugin_info info;
    void *h = plug_open(&pl, F32_MODEL, "", &info);
    ck_assert_int_eq(info.vocab_size, m->cfg.vocab_size);
    ck_assert_int_eq(info.hidden_size, m->cfg.hidden_size);
    ck_assert_int_eq(info.n_layers, m->cfg.n_layers);
    /* tiny model: 4096 raised to 32768 (state <= 64 MiB), not the 1 GiB cap */
    ck_assert_int_eq(info.max_context_len, 32768);
    ck_assert_int_eq(info.max_tokens_per_call, 32768);
    ck_assert_uint_ge(pl.p->struct_size, QC_PLUGIN_ROUTER_SIZE); /* get_router: MoE only */
    ck_assert_ptr_nonnull(pl.p->get_router);
    unsigned want = QC_CAP_HIDDEN | QC_CAP_STATE_READ | QC_CAP_STATE_FILL | QC_CAP_DN_KERNEL |
                    QC_CAP_CHUNK_SIZE | (_i == 1 ? QC_CAP_THREADS : 0u) | QC_CAP_SNAPSHOT |
                    QC_CAP_SEQUENCES | QC_CAP_MLP_IN; /* no trim; no router (a dense model) */
    ck_assert_uint_eq(info.caps, want);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "qwen-conform %s (as plugin): %s", be, be);
    ck_assert_msg(strncmp(info.name, prefix, strlen(prefix)) == 0, "name '%s'", info.name);
    ck_assert_ptr_nonnull(memchr(info.name, '\0', sizeof info.name));
    /* get_hidden / get_mlp_in before any forward */
    float buf[4];
    ck_assert_int_eq(p->get_hidden(h, 0, buf), QC_PLUGIN_ERROR);
    ck_assert_str_ne(p->last_error(h), "");
    ck_assert_uint_ge(p->struct_size, QC_PLUGIN_MLP_IN_SIZE);
    ck_assert_int_eq(p->get_mlp_in(h, 0, buf), QC_PLUGIN_ERROR);
    /* after a forward: layer l's mlp_in lies between hidden[l] and hidden[l + 1] (the mixer
     * added to the one, the MLP not yet to it): equal to neither; a layer past L is refused */
    {
        const int L = m->cfg.n_layers, H = m->cfg.hidden_size;
        int32_t t3[3] = {1, 2, 3};
        float *lg = malloc(sizeof(float) * 3 * m->cfg.vocab_size);
        float *hb = malloc(sizeof(float) * 3 * H * (L + 1)), *mb = malloc(sizeof(float) * 3 * H);
        ck_assert(lg && hb && mb);
        ck_assert_int_eq(p->forward(h, t3, 3, 0, 1, lg), QC_PLUGIN_OK);
        for (int i = 0; i <= L; i++)
            ck_assert_int_eq(p->get_hidden(h, i, hb + (size_t)i * 3 * H), QC_PLUGIN_OK);
        for (int l = 0; l < L; l++) {
            ck_assert_msg(p->get_mlp_in(h, l, mb) == QC_PLUGIN_OK, "%s", p->last_error(h));
            ck_assert(memcmp(mb, hb + (size_t)l * 3 * H, sizeof(float) * 3 * H) != 0);
            ck_assert(memcmp(mb, hb + (size_t)(l + 1) * 3 * H, sizeof(float) * 3 * H) != 0);
            for (int k = 0; k < 3 * H; k++) ck_assert(isfinite(mb[k]));
        }
        ck_assert_int_eq(p->get_mlp_in(h, L, mb), QC_PLUGIN_ERROR);
        free(lg), free(hb), free(mb);
    }
    p->close(h);
    p->close(NULL);

    h = plug_open(&pl, BF16_MODEL, "max_context=100,max_tokens=7", &info);
    ck_assert_int_eq(info.max_context_len, 100);
    ck_assert_int_eq(info.max_tokens_per_call, 7);
    p->close(h);
    h = plug_open(&pl, BF16_MODEL, "max_context=50", &info);
    ck_assert_int_eq(info.max_context_len, 50);
    ck_assert_int_eq(info.max_tokens_per_call, 50);
    p->close(h);
    qc_model_free(m);
    plug_unload(&pl);
}
END_TEST

/* _i: backend (bit 0) x fixture (bit 1) */
START_TEST(bitwise_modes) {
    const char *be = BACKENDS[_i & 1];
    const char *dir = (_i & 2) ? BF16_MODEL : F32_MODEL;
    for (int mode = 0; mode < 3; mode++) {
        variant v = base_variant((qc_mode)mode);
        check_variant(be, dir, &v);
    }
    variant g = base_variant(QC_MODE_STATIC);
    g.garbage = 1;
    check_variant(be, dir, &g);
}
END_TEST

START_TEST(bitwise_options) {
    const char *be = BACKENDS[_i & 1];
    const char *dir = (_i & 2) ? BF16_MODEL : F32_MODEL;
    variant v = base_variant(QC_MODE_DYNAMIC);
    v.dn = QC_DN_RECURRENT;
    check_variant(be, dir, &v);
    v = base_variant(QC_MODE_DYNAMIC);
    v.chunk = 3;
    check_variant(be, dir, &v);
    v.chunk = 300; /* beyond the optimized backend's create-time chunk scratch: recreated */
    check_variant(be, dir, &v);
    v = base_variant(QC_MODE_DYNAMIC);
    v.open_opts = ""; /* capacity 32768, max_tokens 32768: caches read trimmed to CAP */
    check_variant(be, dir, &v);
    v.open_opts = "dn_kernel=recurrent,chunk_size=5";
    v.dn = QC_DN_RECURRENT;
    v.chunk = 5;
    check_variant(be, dir, &v);
    if ((_i & 1) == 1) {
        for (int t = 1; t <= 3; t++) {
            v = base_variant(t == 2 ? QC_MODE_STATIC : QC_MODE_DYNAMIC);
            v.threads = t;
            check_variant(be, dir, &v);
        }
    }
}
END_TEST

/* One long call (all logits) through the plugin opened with `opts` (chunk_size set to `chunk`
 * when > 0), against a backend created directly with max_tokens = state capacity = ctx. */
static void long_call(const char *be, const char *opts, int chunk, int ctx, int nt) {
    qc_model *m = load_model(F32_MODEL);
    const int V = m->cfg.vocab_size;
    int32_t *toks = malloc((size_t)nt * sizeof *toks);
    float *lp = malloc((size_t)nt * V * sizeof(float)), *ld = malloc((size_t)nt * V * sizeof(float));
    ck_assert(toks && lp && ld);
    for (int i = 0; i < nt; i++) toks[i] = (int32_t)((i * 53 + 7) % V);
    char num[32];
    snprintf(num, sizeof num, "%d", chunk);
    /* plugin */
    plug pl = plug_load(be);
    qc_plugin_info info;
    void *h = plug_open(&pl, F32_MODEL, opts, &info);
    if (chunk > 0) ck_assert_msg(pl.p->set_option(h, "chunk_size", num) == 0, "%s", pl.p->last_error(h));
    ck_assert_msg(pl.p->forward(h, toks, nt, 0, 1, lp) == 0, "%s", pl.p->last_error(h));
    qc_state *sp = NULL;
    ck_assert_int_eq(qc_state_create(&m->cfg, ctx, &sp, NULL), QC_OK);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        if (sp->k_cache[l]) {
            ck_assert_int_eq(pl.p->get_state(h, l, QC_STATE_K_CACHE, ctx, sp->k_cache[l]), 0);
            ck_assert_int_eq(pl.p->get_state(h, l, QC_STATE_V_CACHE, ctx, sp->v_cache[l]), 0);
        } else {
            ck_assert_int_eq(pl.p->get_state(h, l, QC_STATE_CONV, 0, sp->conv_state[l]), 0);
            ck_assert_int_eq(pl.p->get_state(h, l, QC_STATE_RECURRENT, 0, sp->recurrent_state[l]), 0);
        }
    }
    pl.p->close(h);
    plug_unload(&pl);
    /* directly */
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.max_tokens = ctx;
    if (chunk > 0) bo.chunk_size = chunk;
    qc_backend *b = NULL;
    qc_err e;
    qc_err_clear(&e);
    ck_assert_msg(builtin_create(be, m, &bo, &b, &e) == QC_OK, "%s", e.msg);
    qc_state *sd = NULL;
    ck_assert_int_eq(qc_state_create(&m->cfg, ctx, &sd, NULL), QC_OK);
    ck_assert_msg(qc_backend_forward(b, toks, nt, 0, sd, ld, 1, &e) == QC_OK, "%s", e.msg);
    sd->pos = nt;
    char what[128];
    snprintf(what, sizeof what, "%s [%s] chunk %d over %d tokens (direct max_tokens %d)", be, opts,
             chunk, nt, ctx);
    same_buf("logits", ld, lp, (size_t)nt * V, what);
    same_state("prefill", sd, sp, what);
    qc_state_destroy(sp);
    qc_state_destroy(sd);
    qc_backend_destroy(b);
    free(toks);
    free(lp);
    free(ld);
    qc_model_free(m);
}

/* A chunk size beyond the optimized backend's create-time chunk scratch (256 tokens) on a call
 * longer than that: the plugin must recreate the backend (set_option chunk_size) and still be
 * bit-identical to a backend created with that chunk size. */
START_TEST(large_chunk) { long_call(BACKENDS[_i], "max_context=320", 290, 320, 300); }
END_TEST

/* The plugin's default sizes (max_tokens 32768, so other scratch sizes) against a backend sized
 * as `check` sizes the built-in ones (max_tokens = the largest case context): 130 tokens, 3
 * chunks of 64, and 300 tokens (the optimized backend's chunk scratch 256 vs 300 wide). */
START_TEST(default_sizes) {
    long_call(BACKENDS[_i], "", 0, 146, 130);
    long_call(BACKENDS[_i], "", 0, 300, 300);
}
END_TEST

START_TEST(error_paths) {
    const char *be = BACKENDS[_i];
    plug pl = plug_load(be);
    const qc_runtime_plugin *p = pl.p;
    qc_model *m = load_model(F32_MODEL);
    const int V = m->cfg.vocab_size;
    qc_plugin_info info;
    char opts[64];
    snprintf(opts, sizeof opts, "max_context=%d,max_tokens=%d", CAP, CAP);
    void *h = plug_open(&pl, F32_MODEL, opts, &info);
    float *lg = malloc((size_t)CAP * V * sizeof(float));
    ck_assert_ptr_nonnull(lg);
    int32_t toks[CAP + 1];
    for (int i = 0; i <= CAP; i++) toks[i] = i % V;
    ck_assert_int_eq(p->forward(h, toks, 3, 0, 1, lg), QC_PLUGIN_OK);
    ck_assert_str_eq(p->last_error(h), "no error");
    float k_before[4096], k_after[4096];
    int lfull = -1;
    for (int l = 0; l < m->cfg.n_layers; l++)
        if (m->cfg.layer_types[l] == QC_LAYER_FULL) lfull = l;
    ck_assert_int_ge(lfull, 0);
    ck_assert_uint_le((size_t)m->cfg.n_kv_heads * 4 * m->cfg.head_dim, 4096);
    ck_assert_int_eq(p->get_state(h, lfull, QC_STATE_K_CACHE, 4, k_before), 0);

    /* bad token ids */
    int32_t bad[2] = {1, V};
    ck_assert_int_eq(p->forward(h, bad, 2, 3, 1, lg), QC_PLUGIN_ERROR);
    ck_assert_msg(strstr(p->last_error(h), "token"), "%s", p->last_error(h));
    bad[1] = -1;
    ck_assert_int_eq(p->forward(h, bad, 2, 3, 1, lg), QC_PLUGIN_ERROR);
    ck_assert_str_ne(p->last_error(h), "");
    /* n = 0 */
    ck_assert_int_eq(p->forward(h, toks, 0, 3, 1, lg), QC_PLUGIN_ERROR);
    ck_assert_str_ne(p->last_error(h), "");
    /* beyond the capacity */
    ck_assert_int_eq(p->forward(h, toks, 1, CAP, 0, lg), QC_PLUGIN_ERROR);
    ck_assert_msg(strstr(p->last_error(h), "capacity"), "%s", p->last_error(h));
    ck_assert_int_eq(p->forward(h, toks, 2, CAP - 1, 0, lg), QC_PLUGIN_ERROR);
    ck_assert_int_eq(p->forward(h, toks, 1, -1, 0, lg), QC_PLUGIN_ERROR);
    /* a gap: start_pos != the position and != 0 */
    ck_assert_int_eq(p->forward(h, toks, 1, 5, 0, lg), QC_PLUGIN_ERROR);
    ck_assert_msg(strstr(p->last_error(h), "start_pos 5"), "%s", p->last_error(h));
    /* state untouched by all of these; the sequence continues at 3 */
    ck_assert_int_eq(p->get_state(h, lfull, QC_STATE_K_CACHE, 4, k_after), 0);
    ck_assert_int_eq(memcmp(k_before, k_after, (size_t)m->cfg.n_kv_heads * 4 * m->cfg.head_dim * 4), 0);
    ck_assert_int_eq(p->forward(h, toks + 3, 1, 3, 0, lg), QC_PLUGIN_OK);
    /* the last position, then full */
    ck_assert_int_eq(p->forward(h, toks + 4, CAP - 4, 4, 0, lg), QC_PLUGIN_OK);
    ck_assert_int_eq(p->forward(h, toks, 1, CAP, 0, lg), QC_PLUGIN_ERROR);
    /* state reads */
    ck_assert_int_eq(p->get_state(h, lfull, QC_STATE_K_CACHE, CAP + 1, lg), QC_PLUGIN_UNSUPPORTED);
    ck_assert_str_ne(p->last_error(h), "");
    ck_assert_int_eq(p->get_state(h, m->cfg.n_layers, QC_STATE_CONV, 0, lg), QC_PLUGIN_ERROR);
    ck_assert_int_eq(p->get_state(h, 0, 9, 0, lg), QC_PLUGIN_ERROR);
    ck_assert_int_eq(p->get_hidden(h, m->cfg.n_layers + 1, lg), QC_PLUGIN_ERROR);
    /* options */
    ck_assert_int_eq(p->set_option(h, "flash_attention", "1"), QC_PLUGIN_UNSUPPORTED);
    ck_assert_msg(strstr(p->last_error(h), "unknown option 'flash_attention' (known: max_context") &&
                  strstr(p->last_error(h), _i == 1 ? "gemm_min, par_min" : "fault.unguarded_exp"),
                  "%s", p->last_error(h));
    /* the backend's status alone tells an unknown key (unsupported) from a bad value (error):
     * fault.unguarded_exp is the reference's own key, unknown to the optimized backend */
    ck_assert_int_eq(p->set_option(h, "fault.unguarded_exp", "2"),
                     _i == 1 ? QC_PLUGIN_UNSUPPORTED : QC_PLUGIN_ERROR);
    ck_assert_msg(strstr(p->last_error(h), _i == 1 ? "unknown option 'fault.unguarded_exp'"
                                                   : "'2' is not 0 or 1"), "%s", p->last_error(h));
    ck_assert_int_eq(p->set_option(h, "dn_kernel", "fast"), QC_PLUGIN_ERROR);
    ck_assert_str_ne(p->last_error(h), "");
    ck_assert_int_eq(p->set_option(h, "chunk_size", "0"), QC_PLUGIN_ERROR);
    ck_assert_int_eq(p->set_option(h, "chunk_size", "12x"), QC_PLUGIN_ERROR);
    ck_assert_int_eq(p->set_option(h, "threads", "2"),
                     _i == 1 ? QC_PLUGIN_OK : QC_PLUGIN_UNSUPPORTED);
    if (_i == 1) ck_assert_int_eq(p->set_option(h, "threads", "-1"), QC_PLUGIN_ERROR);
    ck_assert_str_ne(p->last_error(h), "");
    /* any other key is the backend's own: the optimized backend's thresholds pass through
     * (kept across the re-creation of a threads change), a bad value names the option */
    ck_assert_int_eq(p->set_option(h, "gemm_min", "1"), _i == 1 ? QC_PLUGIN_OK : QC_PLUGIN_UNSUPPORTED);
    ck_assert_int_eq(p->set_option(h, "gemm_min", "0"), _i == 1 ? QC_PLUGIN_ERROR : QC_PLUGIN_UNSUPPORTED);
    ck_assert_msg(strstr(p->last_error(h), "gemm_min"), "%s", p->last_error(h));
    ck_assert_int_eq(p->set_option(h, "bf16_dot", "7"), _i == 1 ? QC_PLUGIN_ERROR : QC_PLUGIN_UNSUPPORTED);
    if (_i == 1) {
        ck_assert_int_eq(p->set_option(h, "threads", "1"), QC_PLUGIN_OK); /* re-created */
        ck_assert_int_eq(p->set_option(h, "par_min", "x"), QC_PLUGIN_ERROR);
        ck_assert_msg(strstr(p->last_error(h), "par_min"), "%s", p->last_error(h));
    }
    /* reset: position 0 again; every cache slot zero */
    ck_assert_int_eq(p->reset(h), QC_PLUGIN_OK);
    ck_assert_int_eq(p->forward(h, toks, 1, 1, 0, lg), QC_PLUGIN_ERROR);
    ck_assert_int_eq(p->get_state(h, lfull, QC_STATE_K_CACHE, 4, k_after), 0);
    for (int i = 0; i < m->cfg.n_kv_heads * 4 * m->cfg.head_dim; i++) ck_assert(k_after[i] == 0.0f);
    ck_assert_int_eq(p->forward(h, toks, 1, 0, 0, lg), QC_PLUGIN_OK);
    /* fill_state leaves the position: the next call continues at 1 */
    ck_assert_int_eq(p->fill_state(h, 2.5f), QC_PLUGIN_OK);
    ck_assert_int_eq(p->get_state(h, lfull, QC_STATE_K_CACHE, 4, k_after), 0);
    ck_assert(k_after[0] == 2.5f);
    ck_assert_int_eq(p->forward(h, toks, 1, 2, 0, lg), QC_PLUGIN_ERROR);
    ck_assert_int_eq(p->forward(h, toks, 1, 1, 0, lg), QC_PLUGIN_OK);
    p->close(h);

    /* open failures: last_error(NULL) names the reason */
    void *hh = (void *)1;
    const char *missing = QC_SOURCE_DIR "/fixtures/no-such-model";
    ck_assert_int_eq(p->open(missing, "", &info, &hh), QC_PLUGIN_ERROR);
    ck_assert_ptr_null(hh);
    ck_assert_msg(strstr(p->last_error(NULL), missing), "%s", p->last_error(NULL));
    ck_assert_int_ne(p->open(F32_MODEL, "max_context=abc", &info, &hh), QC_PLUGIN_OK);
    ck_assert_msg(strstr(p->last_error(NULL), "max_context"), "%s", p->last_error(NULL));
    ck_assert_int_eq(p->open(F32_MODEL, "colour=blue", &info, &hh), QC_PLUGIN_UNSUPPORTED);
    ck_assert_msg(strstr(p->last_error(NULL), "colour"), "%s", p->last_error(NULL));
    ck_assert_int_ne(p->open(F32_MODEL, "max_context=8,max_tokens=9", &info, &hh), QC_PLUGIN_OK);
    ck_assert_str_ne(p->last_error(NULL), "");
    ck_assert_int_ne(p->open(F32_MODEL, "nonsense", &info, &hh), QC_PLUGIN_OK);
    /* the backend's own options at open: checked when the backend is created */
    ck_assert_int_eq(p->open(F32_MODEL, "gemm_min=0", &info, &hh), _i == 1 ? QC_PLUGIN_ERROR : QC_PLUGIN_UNSUPPORTED);
    ck_assert_msg(strstr(p->last_error(NULL), "gemm_min"), "%s", p->last_error(NULL));
    ck_assert_int_eq(p->open(F32_MODEL, "gemm_min=3", &info, &hh), _i == 1 ? QC_PLUGIN_OK : QC_PLUGIN_UNSUPPORTED);
    if (_i == 1) p->close(hh);
    ck_assert_int_eq(p->open(F32_MODEL, "threads=2", &info, &hh),
                     _i == 1 ? QC_PLUGIN_OK : QC_PLUGIN_UNSUPPORTED);
    if (_i == 1) p->close(hh);
    else ck_assert_msg(strstr(p->last_error(NULL), "threads"), "%s", p->last_error(NULL));
    free(lg);
    qc_model_free(m);
    plug_unload(&pl);
}
END_TEST

int main(void) {
    Suite *su = suite_create("builtin_plugin");
    TCase *tc = tcase_create("plugins");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, abi_and_info, 0, 2);
    tcase_add_loop_test(tc, bitwise_modes, 0, 4);
    tcase_add_loop_test(tc, bitwise_options, 0, 4);
    tcase_add_loop_test(tc, large_chunk, 0, 2);
    tcase_add_loop_test(tc, default_sizes, 0, 2);
    tcase_add_loop_test(tc, error_paths, 0, 2);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
