/* test_contract.c — one call contract and one model check, enforced in the runtime for every
 * backend (qc_backend.h): each violation of the forward contract gives the SAME status and the
 * SAME message for the reference and the optimized backend (qc_backend_forward validates; the
 * backends keep only their math), and touches nothing; each bad model or create option gives the
 * same status and message from both creates (qc_backend_check_create -> qc_model_validate).
 * Also: the prefill controller goes through the contract; an out-of-range decode token with
 * err == NULL is an error status; the optimized backend's own chunk-scratch capacity is the one
 * backend-specific refusal, with a clear message. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_model.h"
#include "qc/qc_optimized.h"
#include "qc/qc_prefill.h"
#include "qc/qc_reference.h"
#include "qc/qc_state.h"
#include "qc_testmodel.h"

typedef qc_status (*create_fn)(const qc_model *, const qc_backend_opts *, qc_backend **, qc_err *);

static const struct {
    const char *name;
    create_fn create;
} BACKENDS[2] = {{"reference", qc_reference_create}, {"optimized", qc_optimized_create}};

enum { MAXTOK = 8, CAP = 10 };

static qc_model *tiny_model(void) {
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o); /* 4 layers (L,L,L,F), V 64 */
    qc_model *m = NULL;
    qc_err e;
    ck_assert_msg(qc_model_synthetic(&o.cfg, QC_F32, 5, &m, &e) == QC_OK, "%s", e.msg);
    return m;
}

static qc_backend *make(int b, const qc_model *m) {
    qc_backend_opts o;
    qc_backend_opts_default(&o);
    o.max_tokens = MAXTOK;
    o.n_threads = 2;
    qc_backend *be = NULL;
    qc_err e;
    ck_assert_msg(BACKENDS[b].create(m, &o, &be, &e) == QC_OK, "%s: %s", BACKENDS[b].name, e.msg);
    return be;
}

static int states_equal(const qc_state *a, const qc_state *b) {
    if (a->pos != b->pos) return 0;
    for (int l = 0; l < a->n_layers; l++) {
        size_t n;
        if (a->k_cache[l]) {
            n = (size_t)a->n_kv_heads * a->max_context_len * a->head_dim * sizeof(float);
            if (memcmp(a->k_cache[l], b->k_cache[l], n) || memcmp(a->v_cache[l], b->v_cache[l], n))
                return 0;
        } else {
            n = (size_t)a->conv_dim * a->conv_kernel * sizeof(float);
            if (memcmp(a->conv_state[l], b->conv_state[l], n)) return 0;
            n = (size_t)a->n_v_heads * a->k_dim * a->v_dim * sizeof(float);
            if (memcmp(a->recurrent_state[l], b->recurrent_state[l], n)) return 0;
        }
    }
    return 1;
}

/* ===================================================================================== */
/* The forward contract                                                                   */
/* ===================================================================================== */

typedef enum { TOK_OK, TOK_NULL, TOK_BIG, TOK_NEG } tok_kind;
typedef enum { ST_OK, ST_NULL, ST_GEOMETRY, ST_LAYERS } st_kind;

typedef struct {
    const char *what;
    tok_kind tok;
    st_kind st;
    int n, start_pos;
    int dn_kernel, chunk_size;
    qc_status want;
    const char *msg_has; /* a piece of the one wording */
} violation;

static const violation VIOLATIONS[] = {
    {"tokens NULL", TOK_NULL, ST_OK, 3, 0, QC_DN_CHUNKED, 64, QC_ERR_ARG, "tokens or state is NULL"},
    {"state NULL", TOK_OK, ST_NULL, 3, 0, QC_DN_CHUNKED, 64, QC_ERR_ARG, "tokens or state is NULL"},
    {"n = 0", TOK_OK, ST_OK, 0, 0, QC_DN_CHUNKED, 64, QC_ERR_RANGE, "n = 0 tokens outside [1, max_tokens 8]"},
    {"n < 0", TOK_OK, ST_OK, -2, 0, QC_DN_CHUNKED, 64, QC_ERR_RANGE, "outside [1, max_tokens 8]"},
    {"n > max_tokens", TOK_OK, ST_OK, MAXTOK + 1, 0, QC_DN_CHUNKED, 64, QC_ERR_RANGE, "n = 9 tokens"},
    {"start_pos < 0", TOK_OK, ST_OK, 1, -1, QC_DN_CHUNKED, 64, QC_ERR_RANGE, "start_pos -1 < 0"},
    {"beyond the capacity", TOK_OK, ST_OK, 4, CAP - 3, QC_DN_CHUNKED, 64, QC_ERR_RANGE,
     "positions 7..10 exceed the state capacity of 10 positions"},
    {"token id = V", TOK_BIG, ST_OK, 3, 0, QC_DN_CHUNKED, 64, QC_ERR_RANGE,
     "token 64 (index 1) outside the vocabulary [0, 64)"},
    {"token id < 0", TOK_NEG, ST_OK, 3, 0, QC_DN_RECURRENT, 64, QC_ERR_RANGE, "token -3 (index 1)"},
    {"state geometry", TOK_OK, ST_GEOMETRY, 2, 0, QC_DN_CHUNKED, 64, QC_ERR_ARG,
     "the state does not match the model config (conv_dim 52 != 56)"},
    {"state layers", TOK_OK, ST_LAYERS, 2, 0, QC_DN_CHUNKED, 64, QC_ERR_ARG,
     "the state does not match the model config (n_layers 3 != 4)"},
    {"dn_kernel 7", TOK_OK, ST_OK, 2, 0, 7, 64, QC_ERR_ARG, "dn_kernel 7 is neither chunked"},
    {"dn_kernel -1", TOK_OK, ST_OK, 1, 0, -1, 64, QC_ERR_ARG, "dn_kernel -1 is neither chunked"},
    {"chunk_size 0", TOK_OK, ST_OK, 4, 0, QC_DN_CHUNKED, 0, QC_ERR_ARG, "chunk_size 0 < 1"},
    {"chunk_size < 0", TOK_OK, ST_OK, 1, 0, QC_DN_CHUNKED, -5, QC_ERR_ARG, "chunk_size -5 < 1"},
    {"chunk_size 0, recurrent", TOK_OK, ST_OK, 4, 0, QC_DN_RECURRENT, 0, QC_ERR_ARG, "chunk_size 0 < 1"},
};
#define N_VIOLATIONS ((int)(sizeof VIOLATIONS / sizeof VIOLATIONS[0]))

START_TEST(every_violation_same_status_and_message) {
    qc_model *m = tiny_model();
    const qc_config *c = &m->cfg;
    qc_backend *be[2] = {make(0, m), make(1, m)};
    /* a non-trivial state to guard: 5 tokens in, then a copy */
    int32_t good[MAXTOK + 2], big[3] = {1, c->vocab_size, 2}, neg[3] = {4, -3, 1};
    for (int i = 0; i < MAXTOK + 2; i++) good[i] = (i * 11 + 3) % c->vocab_size;
    qc_state *st[2], *copy[2], *geo = NULL, *layers = NULL;
    qc_err e;
    for (int b = 0; b < 2; b++) {
        ck_assert_int_eq(qc_state_create(c, CAP, &st[b], NULL), QC_OK);
        ck_assert_int_eq(qc_state_create(c, CAP, &copy[b], NULL), QC_OK);
        ck_assert_msg(qc_backend_forward(be[b], good, 5, 0, st[b], NULL, 0, &e) == QC_OK, "%s",
                      e.msg);
        st[b]->pos = 5;
        qc_state_copy(copy[b], st[b]);
    }
    qc_config other = *c;
    other.lin_v_dim = 5;
    ck_assert_int_eq(qc_state_create(&other, CAP, &geo, NULL), QC_OK);
    other = *c;
    other.n_layers = 3;
    ck_assert_int_eq(qc_state_create(&other, CAP, &layers, NULL), QC_OK);
    float *logits = calloc((size_t)(MAXTOK + 2) * c->vocab_size, sizeof(float));

    for (int v = 0; v < N_VIOLATIONS; v++) {
        const violation *x = &VIOLATIONS[v];
        qc_status got[2];
        char msg[2][sizeof e.msg];
        for (int b = 0; b < 2; b++) {
            qc_call call;
            qc_call_default(&call);
            call.dn_kernel = (qc_dn_kernel)x->dn_kernel;
            call.chunk_size = x->chunk_size;
            const int32_t *toks = x->tok == TOK_NULL ? NULL
                                  : x->tok == TOK_BIG ? big
                                  : x->tok == TOK_NEG ? neg
                                                      : good;
            qc_state *s = x->st == ST_NULL       ? NULL
                          : x->st == ST_GEOMETRY ? geo
                          : x->st == ST_LAYERS   ? layers
                                                 : st[b];
            qc_err_clear(&e);
            got[b] =
                qc_backend_forward_call(be[b], &call, toks, x->n, x->start_pos, s, logits, 1, &e);
            snprintf(msg[b], sizeof msg[b], "%s", e.msg);
            ck_assert_msg(got[b] == x->want, "%s, %s: status %s, want %s (%s)", x->what,
                          BACKENDS[b].name, qc_status_str(got[b]), qc_status_str(x->want), e.msg);
            ck_assert_int_eq(e.code, got[b]);
            ck_assert_msg(strncmp(e.msg, "forward: ", 9) == 0 && strstr(e.msg, x->msg_has),
                          "%s, %s: message '%s' lacks '%s'", x->what, BACKENDS[b].name, e.msg,
                          x->msg_has);
            ck_assert_msg(states_equal(st[b], copy[b]), "%s, %s: the state was touched", x->what,
                          BACKENDS[b].name);
            /* err == NULL: the same status */
            ck_assert_int_eq(
                qc_backend_forward_call(be[b], &call, toks, x->n, x->start_pos, s, logits, 1, NULL),
                got[b]);
        }
        ck_assert_int_eq(got[0], got[1]);
        ck_assert_msg(strcmp(msg[0], msg[1]) == 0, "%s: reference '%s' != optimized '%s'", x->what,
                      msg[0], msg[1]);
    }
    /* the same calls within the contract pass on both: the edges are included */
    for (int b = 0; b < 2; b++) {
        ck_assert_msg(qc_backend_forward(be[b], good, CAP - 5, 5, st[b], logits, 1, &e) == QC_OK,
                      "%s: filling the capacity exactly: %s", BACKENDS[b].name, e.msg);
        qc_call one;
        qc_call_default(&one);
        one.chunk_size = 1;
        qc_state_reset(st[b]);
        ck_assert_msg(qc_backend_forward_call(be[b], &one, good, MAXTOK, 0, st[b], NULL, 0, &e) ==
                          QC_OK,
                      "%s: n = max_tokens, chunk_size 1: %s", BACKENDS[b].name, e.msg);
    }
    free(logits);
    qc_state_destroy(geo);
    qc_state_destroy(layers);
    for (int b = 0; b < 2; b++) {
        qc_state_destroy(st[b]);
        qc_state_destroy(copy[b]);
        qc_backend_destroy(be[b]);
    }
    qc_model_free(m);
}
END_TEST

/* The prefill controller calls the backends through the contract: a bad option set on the
 * backend is refused, by both, with the same status and message, before any position moves. */
START_TEST(prefill_controller_goes_through_the_contract) {
    qc_model *m = tiny_model();
    const qc_config *c = &m->cfg;
    char msg[2][1024];
    qc_status got[2];
    const int32_t prompt[4] = {1, 2, 3, 4};
    for (int b = 0; b < 2; b++) {
        qc_backend *be = make(b, m);
        qc_state *st = NULL;
        ck_assert_int_eq(qc_state_create(c, CAP, &st, NULL), QC_OK);
        qc_profile p;
        qc_profile_for_mode(&p, QC_MODE_DYNAMIC, MAXTOK, CAP);
        qc_runner *r = NULL;
        qc_err e;
        ck_assert_int_eq(qc_runner_create(be, &p, st, &r, &e), QC_OK);
        qc_call call;
        qc_call_default(&call);
        call.dn_kernel = (qc_dn_kernel)7;
        qc_runner_set_call(r, &call); /* per-call options through the runner */
        got[b] = qc_runner_prefill(r, prompt, 4, 0, NULL, NULL, NULL, &e);
        snprintf(msg[b], sizeof msg[b], "%s", e.msg);
        ck_assert_int_eq(got[b], QC_ERR_ARG);
        ck_assert_int_eq(qc_runner_calls(r), 1);
        call.dn_kernel = QC_DN_CHUNKED;
        call.chunk_size = 0;
        qc_runner_set_call(r, &call);
        ck_assert_int_eq(qc_runner_reset(r, &e), QC_OK);
        ck_assert_int_eq(qc_runner_prefill(r, prompt, 4, 0, NULL, NULL, NULL, &e), QC_ERR_ARG);
        ck_assert_msg(strstr(e.msg, "forward: chunk_size 0 < 1"), "%s", e.msg);
        qc_runner_set_call(r, NULL); /* back to the backend's defaults */
        ck_assert_int_eq(qc_runner_reset(r, &e), QC_OK);
        ck_assert_msg(qc_runner_prefill(r, prompt, 4, 0, NULL, NULL, NULL, &e) == QC_OK, "%s",
                      e.msg);
        /* the hole: an out-of-range decode token with err == NULL is an error status */
        ck_assert_int_ne(qc_runner_decode(r, 999, NULL, NULL), QC_OK);
        ck_assert_int_eq(qc_runner_decode(r, 999, NULL, &e), QC_ERR_RANGE);
        ck_assert_int_eq(qc_runner_pos(r), 4);
        ck_assert_int_eq(qc_runner_decode(r, 5, NULL, &e), QC_OK);
        qc_runner_destroy(r);
        qc_state_destroy(st);
        qc_backend_destroy(be);
    }
    ck_assert_str_eq(msg[0], msg[1]);
    ck_assert_msg(strstr(msg[0], "forward: dn_kernel 7 is neither chunked"), "%s", msg[0]);
    qc_model_free(m);
}
END_TEST

/* The optimized backend's one backend-specific refusal: chunks beyond the chunk scratch it
 * sized at create (min(max(chunk_size, 256), max_tokens) tokens), announced as
 * be->max_chunk_tokens and checked by the contract; the reference holds any chunk. */
START_TEST(optimized_chunk_scratch_capacity) {
    qc_model *m = tiny_model();
    const qc_config *c = &m->cfg;
    qc_backend_opts o;
    qc_backend_opts_default(&o);
    o.max_tokens = 300;
    o.n_threads = 1;
    int32_t *toks = malloc(300 * sizeof *toks);
    for (int i = 0; i < 300; i++) toks[i] = (i * 7 + 1) % c->vocab_size;
    for (int b = 0; b < 2; b++) {
        qc_backend *be = NULL;
        qc_err e;
        ck_assert_int_eq(BACKENDS[b].create(m, &o, &be, &e), QC_OK);
        ck_assert_int_eq(be->max_chunk_tokens, b == 0 ? 0 : 256);
        qc_state *st = NULL;
        ck_assert_int_eq(qc_state_create(c, 300, &st, NULL), QC_OK);
        qc_call call;
        qc_call_default(&call);
        call.chunk_size = 300;
        qc_status s = qc_backend_forward_call(be, &call, toks, 300, 0, st, NULL, 0, &e);
        if (b == 0) {
            ck_assert_msg(s == QC_OK, "%s", e.msg);
        } else {
            ck_assert_int_eq(s, QC_ERR_ARG);
            ck_assert_msg(strstr(e.msg, "chunks of 300 tokens") &&
                              strstr(e.msg, "256-token DeltaNet chunk scratch that optimized") &&
                              strstr(e.msg, "chunk_size >= 300"),
                          "%s", e.msg);
            /* recurrent: no chunk scratch involved */
            call.dn_kernel = QC_DN_RECURRENT;
            ck_assert_msg(qc_backend_forward_call(be, &call, toks, 300, 0, st, NULL, 0, &e) ==
                              QC_OK,
                          "%s", e.msg);
            /* the backend's own defaults did not change: chunked 64 refuses nothing here */
            ck_assert_int_eq(be->opts.chunk_size, 64);
            ck_assert_int_eq(be->opts.dn_kernel, QC_DN_CHUNKED);
        }
        qc_state_destroy(st);
        qc_backend_destroy(be);
    }
    free(toks);
    qc_model_free(m);
}
END_TEST

/* ===================================================================================== */
/* The model check                                                                        */
/* ===================================================================================== */

/* Both creates on m with o: the same status and message; returns the status. */
static qc_status create_both(const qc_model *m, const qc_backend_opts *o, const char *what,
                             char *msg_out) {
    qc_status got[2];
    char msg[2][1024];
    for (int b = 0; b < 2; b++) {
        qc_backend *be = (qc_backend *)1;
        qc_err e;
        qc_err_clear(&e);
        got[b] = BACKENDS[b].create(m, o, &be, &e);
        snprintf(msg[b], sizeof msg[b], "%s", e.msg);
        if (got[b] == QC_OK) qc_backend_destroy(be);
        else ck_assert_ptr_null(be);
        qc_backend *be2 = NULL;
        ck_assert_int_eq(BACKENDS[b].create(m, o, &be2, NULL), got[b]); /* err NULL */
        qc_backend_destroy(be2);
    }
    ck_assert_msg(got[0] == got[1], "%s: reference %s, optimized %s", what,
                  qc_status_str(got[0]), qc_status_str(got[1]));
    ck_assert_msg(strcmp(msg[0], msg[1]) == 0, "%s: reference '%s' != optimized '%s'", what,
                  msg[0], msg[1]);
    strcpy(msg_out, msg[0]);
    return got[0];
}

START_TEST(every_bad_model_same_status_and_message) {
    qc_model *m = tiny_model();
    qc_backend_opts o;
    qc_backend_opts_default(&o);
    o.max_tokens = 4;
    char msg[1024];
    ck_assert_int_eq(qc_model_validate(m, NULL), QC_OK);
    ck_assert_int_eq(create_both(m, &o, "good model", msg), QC_OK);

    /* a shape off by one */
    qc_tensor saved = m->layers[3].q_proj;
    m->layers[3].q_proj.shape[0] += 1;
    ck_assert_int_eq(create_both(m, &o, "q_proj shape", msg), QC_ERR_SHAPE);
    ck_assert_str_eq(msg, "model: layers.3.self_attn.q_proj.weight: shape [65,32] != [64,32]");
    m->layers[3].q_proj = saved;
    /* conv1d is [C, 1, K] */
    saved = m->layers[0].conv1d;
    m->layers[0].conv1d.ndim = 2;
    m->layers[0].conv1d.shape[1] = m->layers[0].conv1d.shape[2];
    ck_assert_int_eq(create_both(m, &o, "conv1d 2-D", msg), QC_ERR_SHAPE);
    ck_assert_msg(strstr(msg, "model: layers.0.linear_attn.conv1d.weight: shape [56,4] != [56,1,4]"),
                  "%s", msg);
    m->layers[0].conv1d = saved;
    /* missing tensors */
    saved = m->layers[1].A_log;
    m->layers[1].A_log.ndim = 0;
    ck_assert_int_eq(create_both(m, &o, "A_log missing", msg), QC_ERR_MISSING);
    ck_assert_str_eq(msg, "model: layers.1.linear_attn.A_log: missing");
    m->layers[1].A_log = saved;
    saved = m->lm_head;
    m->lm_head.data = NULL;
    ck_assert_int_eq(create_both(m, &o, "lm_head NULL", msg), QC_ERR_MISSING);
    ck_assert_str_eq(msg, "model: lm_head.weight: missing");
    m->lm_head = saved;
    /* an unsupported dtype */
    saved = m->final_norm;
    m->final_norm.dtype = (qc_dtype)9;
    ck_assert_int_eq(create_both(m, &o, "dtype", msg), QC_ERR_UNSUPPORTED);
    ck_assert_str_eq(msg, "model: norm.weight: unsupported dtype 9");
    m->final_norm = saved;
    /* config geometry */
    qc_config keep = m->cfg;
    m->cfg.n_kv_heads = 3; /* 4 heads are not a multiple of 3 */
    ck_assert_int_eq(create_both(m, &o, "attention geometry", msg), QC_ERR_ARG);
    ck_assert_msg(strstr(msg, "model: config: bad attention geometry (heads 4, kv heads 3"), "%s",
                  msg);
    m->cfg = keep;
    m->cfg.lin_n_v_heads = 3; /* not a multiple of 2 key heads */
    ck_assert_int_eq(create_both(m, &o, "DeltaNet geometry", msg), QC_ERR_ARG);
    ck_assert_msg(strstr(msg, "model: config: bad DeltaNet geometry"), "%s", msg);
    m->cfg = keep;
    m->cfg.rotary_dim = 3;
    ck_assert_int_eq(create_both(m, &o, "odd rotary_dim", msg), QC_ERR_ARG);
    m->cfg = keep;
    m->cfg.n_layers = 0;
    ck_assert_int_eq(create_both(m, &o, "no layers", msg), QC_ERR_ARG);
    ck_assert_msg(strstr(msg, "model: config: bad sizes (L 0"), "%s", msg);
    m->cfg = keep;
    /* create options and arguments */
    o.max_tokens = 0;
    ck_assert_int_eq(create_both(m, &o, "max_tokens 0", msg), QC_ERR_ARG);
    ck_assert_str_eq(msg, "create: max_tokens 0 < 1");
    o.max_tokens = 4;
    ck_assert_int_eq(create_both(NULL, &o, "model NULL", msg), QC_ERR_ARG);
    ck_assert_str_eq(msg, "create: model is NULL");
    /* NULL options: the defaults */
    ck_assert_int_eq(create_both(m, NULL, "default options", msg), QC_OK);
    ck_assert_int_eq(qc_model_validate(NULL, NULL), QC_ERR_ARG);
    qc_model_free(m);
}
END_TEST

/* A loaded checkpoint and a synthetic one pass the same check (the loader and
 * qc_model_synthetic run it too). */
START_TEST(loaded_and_synthetic_models_validate) {
    qc_model *m = NULL;
    qc_err e;
    ck_assert_msg(qc_model_load(QC_SOURCE_DIR "/fixtures/tiny-f32-tied-flat/model", &m, &e) == QC_OK,
                  "%s", e.msg);
    ck_assert_int_eq(qc_model_validate(m, &e), QC_OK);
    qc_model_free(m);
    ck_assert_msg(qc_model_load(QC_SOURCE_DIR "/fixtures/tiny-legacy-packed/model", &m, &e) == QC_OK,
                  "%s", e.msg);
    ck_assert_int_eq(qc_model_validate(m, &e), QC_OK);
    qc_model_free(m);
    qc_config c;
    ck_assert_int_eq(qc_config_preset("0.8b", &c, &e), QC_OK);
    c.n_layers = 4; /* the 0.8b layer geometry, few layers, a smaller vocabulary */
    c.vocab_size = 512;
    ck_assert_msg(qc_model_synthetic(&c, QC_BF16, 1, &m, &e) == QC_OK, "%s", e.msg);
    ck_assert_int_eq(qc_model_validate(m, &e), QC_OK);
    qc_model_free(m);
}
END_TEST

/* set_option (qc_backend.h): for each backend an unknown key is QC_ERR_NO_OPTION and a bad
 * value of a key it has QC_ERR_ARG, each message naming the key / value; a backend without
 * set_option refuses every key with QC_ERR_NO_OPTION. */
START_TEST(unknown_option_and_bad_value_two_statuses) {
    static const struct {
        const char *key, *bad; /* a key of the backend and a value it refuses */
    } KNOWN[2] = {{"fault.unguarded_exp", "2"}, {"gemm_min", "0"}};
    qc_model *m = tiny_model();
    for (int b = 0; b < 2; b++) {
        qc_backend_opts bo;
        qc_backend_opts_default(&bo);
        bo.max_tokens = MAXTOK;
        qc_backend *be = NULL;
        qc_err e;
        ck_assert_msg(BACKENDS[b].create(m, &bo, &be, &e) == QC_OK, "%s", e.msg);
        qc_err_clear(&e);
        ck_assert_int_eq(qc_backend_set_option(be, "no_such_key", "1", &e), QC_ERR_NO_OPTION);
        ck_assert_int_eq(e.code, QC_ERR_NO_OPTION);
        ck_assert_msg(strstr(e.msg, "unknown option 'no_such_key'"), "%s: %s", BACKENDS[b].name,
                      e.msg);
        /* the other backend's key is unknown here, whatever its value */
        ck_assert_int_eq(qc_backend_set_option(be, KNOWN[1 - b].key, KNOWN[1 - b].bad, &e),
                         QC_ERR_NO_OPTION);
        qc_err_clear(&e);
        ck_assert_int_eq(qc_backend_set_option(be, KNOWN[b].key, KNOWN[b].bad, &e), QC_ERR_ARG);
        ck_assert_int_eq(e.code, QC_ERR_ARG);
        char want[64];
        snprintf(want, sizeof want, "'%s' is not", KNOWN[b].bad);
        ck_assert_msg(strstr(e.msg, KNOWN[b].key) && strstr(e.msg, want), "%s: %s",
                      BACKENDS[b].name, e.msg);
        qc_backend_destroy(be);
    }
    qc_model_free(m);
    qc_backend none; /* no set_option: only name and set_option are read */
    memset(&none, 0, sizeof none);
    none.name = "optionless";
    qc_err e;
    ck_assert_int_eq(qc_backend_set_option(&none, "k", "v", &e), QC_ERR_NO_OPTION);
    ck_assert_str_eq(e.msg, "optionless: has no option 'k'");
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("contract");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, every_violation_same_status_and_message);
    tcase_add_test(tc, prefill_controller_goes_through_the_contract);
    tcase_add_test(tc, optimized_chunk_scratch_capacity);
    tcase_add_test(tc, every_bad_model_same_status_and_message);
    tcase_add_test(tc, loaded_and_synthetic_models_validate);
    tcase_add_test(tc, unknown_option_and_bad_value_two_statuses);
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
