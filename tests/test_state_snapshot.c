/* test_state_snapshot.c — qc_state_clone / qc_state_equal (the snapshot API of the built-in
 * backends' state) and what the state lifecycle checks rely on: a snapshot restored with
 * qc_state_copy continues bit for bit like the run that never left, on the reference and
 * optimized backends, and several states through one backend instance stay independent. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_optimized.h"
#include "qc/qc_reference.h"
#include "qc/qc_state.h"
#include "qc_testmodel.h"

/* ===================================================================================== */
/* clone / equal on a bare state                                                         */
/* ===================================================================================== */

static qc_config small_cfg(void) {
    qc_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 32; c.hidden_size = 8; c.intermediate_size = 16; c.n_layers = 4;
    c.n_heads = 2; c.n_kv_heads = 1; c.head_dim = 4;
    c.lin_n_k_heads = 1; c.lin_n_v_heads = 2; c.lin_k_dim = 4; c.lin_v_dim = 3;
    c.conv_kernel = 4; c.rms_eps = 1e-6; c.rope_theta = 1e4; c.partial_rotary_factor = 0.5;
    c.rotary_dim = 2;
    for (int l = 0; l < 4; l++) c.layer_types[l] = l == 3 ? QC_LAYER_FULL : QC_LAYER_LINEAR;
    return c;
}

START_TEST(clone_is_a_deep_exact_copy) {
    qc_config c = small_cfg();
    qc_state *s = NULL, *k = NULL;
    ck_assert_int_eq(qc_state_create(&c, 7, &s, NULL), QC_OK);
    for (int l = 0; l < 3; l++) {
        for (int i = 0; i < 14 * 4; i++) s->conv_state[l][i] = (float)(l * 100 + i) * 0.5f;
        for (int i = 0; i < 24; i++) s->recurrent_state[l][i] = -(float)i / 3.0f;
    }
    for (int i = 0; i < 28; i++) s->k_cache[3][i] = (float)i, s->v_cache[3][i] = -(float)i;
    s->recurrent_state[1][5] = -0.0f; /* the sign of zero is part of the bits */
    s->pos = 5;
    ck_assert_int_eq(qc_state_clone(s, &k, NULL), QC_OK);
    ck_assert_ptr_nonnull(k);
    ck_assert(qc_state_equal(s, k));
    ck_assert_int_eq(k->pos, 5);
    ck_assert_int_eq(k->max_context_len, 7);
    ck_assert_ptr_null(k->conv_state[3]);
    ck_assert_ptr_null(k->k_cache[0]);
    ck_assert_ptr_ne(k->conv_state[0], s->conv_state[0]); /* not aliased */
    /* later changes to the original never reach the snapshot */
    s->conv_state[2][3] = 99.0f;
    ck_assert(!qc_state_equal(s, k));
    ck_assert(k->conv_state[2][3] == (float)(200 + 3) * 0.5f);
    /* restore: copy back, equal again */
    qc_state_copy(s, k);
    ck_assert(qc_state_equal(s, k));
    /* -0.0 vs +0.0, NaN, a KV slot beyond pos, pos itself: each makes them differ */
    k->recurrent_state[1][5] = 0.0f;
    ck_assert(!qc_state_equal(s, k));
    qc_state_copy(k, s);
    k->k_cache[3][27] = 1e-30f;
    ck_assert(!qc_state_equal(s, k));
    qc_state_copy(k, s);
    k->pos = 4;
    ck_assert(!qc_state_equal(s, k));
    qc_state_fill(k, NAN);
    k->pos = 5;
    ck_assert(!qc_state_equal(s, k));
    qc_state_destroy(s);
    qc_state_destroy(k);
}
END_TEST

/* ===================================================================================== */
/* snapshot / restore / several states through a real backend                            */
/* ===================================================================================== */

static qc_model *g_model;

static void model_setup(void) {
    qc_testmodel_opts o;
    qc_testmodel_defaults(&o);
    o.dtype = QC_F32;
    qc_err e;
    qc_err_clear(&e);
    ck_assert_msg(qc_testmodel_reference(&o, &g_model, &e) == QC_OK, "%s", e.msg);
}

static void model_teardown(void) { qc_model_free(g_model); }

/* n tokens in calls of `call`, logits of every row into lg (may be NULL). */
static void feed(qc_backend *be, qc_state *st, const int32_t *t, int n, int call, float *lg) {
    const int V = g_model->cfg.vocab_size;
    for (int o = 0; o < n; o += call) {
        int k = n - o < call ? n - o : call;
        qc_err e;
        qc_err_clear(&e);
        ck_assert_msg(qc_backend_forward(be, t + o, k, st->pos, st, lg ? lg + (size_t)o * V : NULL,
                                         1, &e) == QC_OK, "%s", e.msg);
        st->pos += k;
    }
}

static void snapshot_continues_bitwise(int optimized) {
    const int V = g_model->cfg.vocab_size;
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.max_tokens = 64;
    bo.n_threads = 1;
    qc_backend *be = NULL;
    qc_err e;
    qc_err_clear(&e);
    qc_status s = optimized ? qc_optimized_create(g_model, &bo, &be, &e)
                            : qc_reference_create(g_model, &bo, &be, &e);
    ck_assert_msg(s == QC_OK, "%s", e.msg);
    int32_t prompt[20], cont_a[6], cont_b[6];
    for (int i = 0; i < 20; i++) prompt[i] = (int32_t)((i * 7 + 3) % V);
    for (int i = 0; i < 6; i++) {
        cont_a[i] = (int32_t)((i * 5 + 1) % V);
        cont_b[i] = (int32_t)((i * 11 + 2) % V);
    }
    qc_state *st = NULL, *fresh = NULL, *other = NULL, *snap = NULL;
    ck_assert_int_eq(qc_state_create(&g_model->cfg, 40, &st, NULL), QC_OK);
    ck_assert_int_eq(qc_state_create(&g_model->cfg, 40, &fresh, NULL), QC_OK);
    ck_assert_int_eq(qc_state_create(&g_model->cfg, 40, &other, NULL), QC_OK);
    float *la = malloc(6 * (size_t)V * sizeof(float)), *lb = malloc(6 * (size_t)V * sizeof(float));
    float *ra = malloc(6 * (size_t)V * sizeof(float)), *rb = malloc(6 * (size_t)V * sizeof(float));
    ck_assert(la && lb && ra && rb);
    /* expected: fresh P+A and P+B */
    feed(be, fresh, prompt, 20, 16, NULL);
    feed(be, fresh, cont_a, 6, 1, ra);
    qc_state_reset(fresh);
    feed(be, fresh, prompt, 20, 16, NULL);
    feed(be, fresh, cont_b, 6, 1, rb);
    /* P, snapshot, A, restore, B — with a second state interleaved through the same backend */
    feed(be, st, prompt, 20, 16, NULL);
    ck_assert_int_eq(qc_state_clone(st, &snap, NULL), QC_OK);
    for (int i = 0; i < 6; i++) {
        feed(be, st, cont_a + i, 1, 1, la + (size_t)i * V);
        feed(be, other, cont_b + i, 1, 1, NULL); /* another sequence in between */
    }
    ck_assert_int_eq(memcmp(la, ra, 6 * (size_t)V * sizeof(float)), 0);
    qc_state_copy(st, snap);
    ck_assert_int_eq(st->pos, 20);
    feed(be, st, cont_b, 6, 1, lb);
    ck_assert_int_eq(memcmp(lb, rb, 6 * (size_t)V * sizeof(float)), 0);
    ck_assert(qc_state_equal(st, fresh)); /* the whole state, bit for bit */
    /* the snapshot was not touched by anything after it */
    qc_state_reset(fresh);
    feed(be, fresh, prompt, 20, 16, NULL);
    ck_assert(qc_state_equal(snap, fresh));
    /* the interleaved sequence equals its run alone */
    qc_state_reset(fresh);
    feed(be, fresh, cont_b, 6, 1, NULL);
    ck_assert(qc_state_equal(other, fresh));
    free(la), free(lb), free(ra), free(rb);
    qc_state_destroy(st), qc_state_destroy(fresh), qc_state_destroy(other), qc_state_destroy(snap);
    qc_backend_destroy(be);
}

START_TEST(reference_snapshot_continues_bitwise) { snapshot_continues_bitwise(0); }
END_TEST

START_TEST(optimized_snapshot_continues_bitwise) { snapshot_continues_bitwise(1); }
END_TEST

int main(void) {
    Suite *su = suite_create("state_snapshot");
    TCase *tc = tcase_create("clone");
    tcase_add_test(tc, clone_is_a_deep_exact_copy);
    suite_add_tcase(su, tc);
    TCase *tb = tcase_create("backends");
    tcase_add_checked_fixture(tb, model_setup, model_teardown);
    tcase_add_test(tb, reference_snapshot_continues_bitwise);
    tcase_add_test(tb, optimized_snapshot_continues_bitwise);
    suite_add_tcase(su, tb);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
