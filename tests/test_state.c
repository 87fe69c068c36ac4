/* test_state.c — canonical state: zeroed at creation, reset assigns exact zeros, copy, sizes. */
#include <check.h>
#include <math.h>
#include <string.h>

#include "qc/qc_state.h"

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

static int all_bits_zero(const float *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned u; memcpy(&u, &p[i], 4);
        if (u != 0) return 0;   /* also rejects -0.0f */
    }
    return 1;
}

START_TEST(created_zero_and_shaped) {
    qc_config c = small_cfg();
    qc_state *s = NULL; qc_err e = {0};
    ck_assert_int_eq(qc_state_create(&c, 10, &s, &e), QC_OK);
    ck_assert_int_eq(s->conv_dim, 2 * 4 + 6);
    ck_assert_int_eq(s->pos, 0);
    for (int l = 0; l < 3; l++) {
        ck_assert_ptr_null(s->k_cache[l]);
        ck_assert(all_bits_zero(s->conv_state[l], 14 * 4));
        ck_assert(all_bits_zero(s->recurrent_state[l], 2 * 4 * 3));
    }
    ck_assert_ptr_null(s->conv_state[3]);
    ck_assert(all_bits_zero(s->k_cache[3], 1 * 10 * 4));
    ck_assert(all_bits_zero(s->v_cache[3], 1 * 10 * 4));
    /* bytes: 3 linear layers * (14*4 + 24) floats + 1 full layer * 2 * 40 floats */
    ck_assert_uint_ge(qc_state_bytes(&c, 10), (size_t)(3 * (56 + 24) + 80) * 4);
    qc_state_destroy(s);
}
END_TEST

START_TEST(reset_clears_nan_garbage) {
    qc_config c = small_cfg();
    qc_state *s = NULL;
    ck_assert_int_eq(qc_state_create(&c, 6, &s, NULL), QC_OK);
    qc_state_fill(s, NAN);
    s->pos = 5;
    ck_assert(isnan(s->recurrent_state[0][3]));
    qc_state_reset(s);
    ck_assert_int_eq(s->pos, 0);
    for (int l = 0; l < 3; l++) {
        ck_assert(all_bits_zero(s->conv_state[l], 56));
        ck_assert(all_bits_zero(s->recurrent_state[l], 24));
    }
    ck_assert(all_bits_zero(s->k_cache[3], 24));
    ck_assert(all_bits_zero(s->v_cache[3], 24));
    qc_state_destroy(s);
}
END_TEST

START_TEST(copy_is_exact) {
    qc_config c = small_cfg();
    qc_state *a = NULL, *b = NULL;
    ck_assert_int_eq(qc_state_create(&c, 5, &a, NULL), QC_OK);
    ck_assert_int_eq(qc_state_create(&c, 5, &b, NULL), QC_OK);
    for (int i = 0; i < 24; i++) a->recurrent_state[1][i] = (float)i * 0.25f - 1.0f;
    a->k_cache[3][7] = 3.5f;
    a->pos = 4;
    qc_state_copy(b, a);
    ck_assert_int_eq(b->pos, 4);
    ck_assert_mem_eq(b->recurrent_state[1], a->recurrent_state[1], 24 * sizeof(float));
    ck_assert_float_eq(b->k_cache[3][7], 3.5f);
    qc_state_destroy(a);
    qc_state_destroy(b);
}
END_TEST

START_TEST(bad_capacity_rejected) {
    qc_config c = small_cfg();
    qc_state *s = (qc_state *)1; qc_err e = {0};
    ck_assert_int_eq(qc_state_create(&c, 0, &s, &e), QC_ERR_RANGE);
    ck_assert_ptr_null(s);
    ck_assert(strstr(e.msg, "max_context_len") != NULL);
}
END_TEST

int main(void) {
    Suite *su = suite_create("state");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, created_zero_and_shaped);
    tcase_add_test(tc, reset_clears_nan_garbage);
    tcase_add_test(tc, copy_is_exact);
    tcase_add_test(tc, bad_capacity_rejected);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
