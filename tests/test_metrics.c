/* test_metrics.c — comparison metrics: allclose counts, max abs / rel with locations, NaN,
 * cosine / NMSE, KL and top-1, index meanings, torch-style summary, 1-2-5 rounding.
 * Expected numbers are derived by hand in each test (not copied from the code). */
#include <check.h>
#include <math.h>
#include <string.h>

#include "../harness/io/qc_metrics.h"

static qc_tdesc desc2(qc_tclass cls, const char *path, int r, int c, double atol, double rtol) {
    qc_tdesc d;
    int64_t sh[2] = {r, c};
    qc_tdesc_init(&d, cls, path, 2, sh);
    d.atol = atol;
    d.rtol = rtol;
    return d;
}

START_TEST(allclose_counts_and_extremes) {
    /* golden g, actual a = g + delta. atol 0.01, rtol 0.1:
     *  i0: g 1,   d 0.05  -> allowed 0.11 -> close;  rel 0.05
     *  i1: g 1,   d 0.2   -> allowed 0.11 -> MISMATCH; rel 0.2
     *  i2: g 10,  d 0.5   -> allowed 1.01 -> close;  rel 0.05  (largest abs that is close)
     *  i3: g 0,   d 0.02  -> allowed 0.01 -> MISMATCH; rel inf
     *  i4: g -2,  d 0     -> close
     *  i5: g 100, d 3     -> allowed 10.01 -> close; abs 3 is the max abs */
    const float g[6] = {1, 1, 10, 0, -2, 100};
    const float a[6] = {1.05f, 1.2f, 10.5f, 0.02f, -2, 103};
    qc_tdesc d = desc2(QC_TC_LOGITS, "prefill/logits", 2, 3, 0.01, 0.1);
    qc_metrics m;
    qc_metrics_init(&m, 0);
    qc_metrics_add(&m, &d, a, g);
    qc_metrics_finish(&m);
    ck_assert_uint_eq(m.n, 6);
    ck_assert_uint_eq(m.n_mismatch, 2);
    ck_assert_uint_eq(m.n_nonfinite, 0);
    ck_assert(!qc_metrics_close(&m));
    ck_assert_double_eq_tol(m.max_abs, 3.0, 1e-5);
    ck_assert_uint_eq(m.at_max_abs.idx, 5);
    ck_assert(isinf(m.max_rel));
    ck_assert_uint_eq(m.at_max_rel.idx, 3);
    ck_assert_uint_eq(m.first_mismatch.idx, 1);
    /* worst = largest |d| / allowed: i3 0.02/0.01 = 2 vs i1 0.2/0.11 = 1.82 */
    ck_assert_uint_eq(m.worst.idx, 3);
    /* cosine / nmse by hand in double */
    double sag = 0, saa = 0, sgg = 0, sdd = 0;
    for (int i = 0; i < 6; i++) {
        sag += (double)a[i] * g[i], saa += (double)a[i] * a[i], sgg += (double)g[i] * g[i];
        sdd += ((double)a[i] - g[i]) * ((double)a[i] - g[i]);
    }
    ck_assert_double_eq_tol(m.cosine, sag / sqrt(saa * sgg), 1e-12);
    ck_assert_double_eq_tol(m.nmse, sdd / sgg, 1e-12);
}
END_TEST

START_TEST(equal_tensors_pass) {
    const float g[4] = {0, 1, -1, 5};
    qc_tdesc d = desc2(QC_TC_HIDDEN, "x", 1, 4, 0, 0);
    qc_metrics m;
    qc_metrics_init(&m, 0);
    qc_metrics_add(&m, &d, g, g);
    qc_metrics_finish(&m);
    ck_assert(qc_metrics_close(&m));
    ck_assert_double_eq(m.max_abs, 0.0);
    ck_assert_double_eq(m.max_rel, 0.0); /* 0/0 counts as 0, not NaN */
    ck_assert_double_eq(m.nmse, 0.0);
    ck_assert_double_eq_tol(m.cosine, 1.0, 1e-15);
}
END_TEST

START_TEST(zero_elements_fail) {
    qc_metrics m;
    qc_metrics_init(&m, 0);
    qc_metrics_finish(&m);
    ck_assert(!qc_metrics_close(&m));
    char buf[256];
    qc_metrics_summary(&m, buf, sizeof buf);
    ck_assert_ptr_nonnull(strstr(buf, "No elements were compared"));
}
END_TEST

START_TEST(nan_first_location) {
    const float g[6] = {1, 2, 3, 4, 5, 6};
    float a[6] = {1, 2, 3, 4, 5, 6};
    a[4] = NAN;
    a[5] = INFINITY;
    qc_tdesc d = desc2(QC_TC_LOGITS, "prefill/logits", 2, 3, 1.0, 1.0); /* huge tolerance */
    qc_metrics m;
    qc_metrics_init(&m, 0);
    qc_metrics_add(&m, &d, a, g);
    qc_metrics_finish(&m);
    ck_assert(!qc_metrics_close(&m));
    ck_assert_uint_eq(m.n_nonfinite, 2);
    ck_assert_uint_eq(m.n_mismatch, 2);
    ck_assert(m.first_nonfinite.valid);
    ck_assert_uint_eq(m.first_nonfinite.idx, 4);
    ck_assert(m.worst.valid && m.worst.idx == 4);
    char buf[2048];
    qc_metrics_summary(&m, buf, sizeof buf);
    /* flat 4 in [2,3] is (1, 1) = position 1, vocab 1 */
    ck_assert_ptr_nonnull(strstr(buf, "First non-finite actual value: nan at prefill/logits (1, 1)"));
    ck_assert_ptr_nonnull(strstr(buf, "position 1, vocab 1"));
    ck_assert(isnan(m.cosine));
}
END_TEST

/* A bit-exact comparison that fails only because both sides hold the same NaN says so. */
START_TEST(bitwise_nan_only_hint) {
    uint32_t qnan_bits = 0x7fc00001u;
    float qn;
    memcpy(&qn, &qnan_bits, sizeof qn);
    const float g[4] = {1, qn, 3, 4}, a[4] = {1, qn, 3, 4};
    qc_tdesc d = desc2(QC_TC_LOGITS, "prefill/logits", 2, 2, 0.0, 0.0);
    qc_metrics m;
    qc_metrics_init(&m, 1);
    qc_metrics_add(&m, &d, a, g);
    qc_metrics_finish(&m);
    ck_assert_int_eq((int)m.n_mismatch, 0);
    ck_assert(!qc_metrics_close(&m));
    char buf[2048];
    qc_metrics_summary(&m, buf, sizeof buf);
    ck_assert_msg(strstr(buf, "Bit-identical, but 1 / 4 values are non-finite (NaN / Inf) in both"),
                  "%s", buf);
    ck_assert_ptr_null(strstr(buf, "Mismatched elements"));
}
END_TEST

START_TEST(torch_style_summary) {
    /* 4 elements, one off by 0.5 at (1, 0) with atol 0.001 rtol 0 */
    const float g[4] = {1, 2, 3, 4};
    const float a[4] = {1, 2, 3.5f, 4};
    qc_tdesc d = desc2(QC_TC_LOGITS, "prefill/logits", 2, 2, 0.001, 0.0);
    qc_metrics m;
    qc_metrics_init(&m, 0);
    qc_metrics_add(&m, &d, a, g);
    qc_metrics_finish(&m);
    char buf[2048];
    qc_metrics_summary(&m, buf, sizeof buf);
    ck_assert_ptr_nonnull(strstr(buf, "Mismatched elements: 1 / 4 (25.0%)"));
    ck_assert_ptr_nonnull(strstr(buf, "Greatest absolute difference: 0.5 at prefill/logits index (1, 0) (up to 0.001 allowed)"));
    /* rel = 0.5 / 3 */
    ck_assert_ptr_nonnull(strstr(buf, "Greatest relative difference: 0.166667 at prefill/logits index (1, 0)"));
    char key[256];
    qc_metrics_keyline(&m, key, sizeof key);
    ck_assert_ptr_nonnull(strstr(key, "mism 1/4"));
}
END_TEST

START_TEST(bitwise_mode) {
    const float g[3] = {0.0f, 1.0f, 2.0f};
    const float a[3] = {-0.0f, 1.0f, nextafterf(2.0f, 3.0f)};
    qc_tdesc d = desc2(QC_TC_RECURRENT_STATE, "s", 1, 3, 1.0, 1.0);
    qc_metrics m;
    qc_metrics_init(&m, 1);
    qc_metrics_add(&m, &d, a, g);
    qc_metrics_finish(&m);
    /* -0 vs +0 and one ulp both differ bitwise, whatever the tolerance */
    ck_assert_uint_eq(m.n_mismatch, 2);
    ck_assert_uint_eq(m.first_mismatch.idx, 0);
    ck_assert(!qc_metrics_close(&m));
}
END_TEST

START_TEST(kl_and_top1) {
    /* two-token vocab: golden logits (0,0) -> p = (1/2, 1/2); actual (ln 3, 0) -> q = (3/4,
     * 1/4). KL(p||q) = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3). */
    const float g[2] = {0.0f, 0.0f};
    const float a[2] = {(float)log(3.0), 0.0f};
    double kl = qc_kl_row(g, a, 2);
    ck_assert_double_eq_tol(kl, 0.5 * log(4.0 / 3.0), 1e-7);
    ck_assert_double_eq_tol(qc_kl_row(g, g, 2), 0.0, 1e-15);
    /* rows: r0 argmax agrees (0), r1 flips 1->0 with golden margin 0.001 (near tie at 0.01),
     * r2 flips 2->0 with golden margin 1 (a real flip) */
    const float gl[9] = {5, 1, 0, 1, 1.001f, 0, 0, 0, 1};
    const float al[9] = {5, 1, 0, 1.01f, 1.0f, 0, 2, 0, 1};
    qc_tdesc d = desc2(QC_TC_LOGITS, "decode/logits", 3, 3, 10, 0);
    d.decode = 1;
    d.pos0 = 7;
    qc_metrics m;
    qc_metrics_init(&m, 0);
    qc_metrics_add_logits(&m, &d, al, gl, 0.01);
    qc_metrics_finish(&m);
    ck_assert_int_eq(m.rows, 3);
    ck_assert_int_eq(m.top1_agree, 1);
    ck_assert_int_eq(m.top1_near_tie, 1);
    ck_assert(m.first_top1_flip.valid);
    ck_assert_uint_eq(m.first_top1_flip.idx, 3); /* row 1, actual argmax 0 */
    ck_assert_int_eq(m.flip_golden_arg, 1);
    char mean[128];
    qc_tdesc_meaning(&m.first_top1_flip.desc, m.first_top1_flip.idx, mean, sizeof mean);
    ck_assert_str_eq(mean, "decode step 1 (position 8), vocab 0");
    ck_assert_int_eq(m.kl_max_row, 2);
}
END_TEST

START_TEST(meanings) {
    char b[256];
    qc_tdesc d;
    int64_t kv[3] = {2, 5, 4};
    qc_tdesc_init(&d, QC_TC_K_CACHE, "prefill/state/layer_03/k_cache", 3, kv);
    d.layer = 3;
    /* flat = (1*5 + 2)*4 + 3 = 31 */
    qc_tdesc_meaning(&d, 31, b, sizeof b);
    ck_assert_str_eq(b, "layer 3, kv head 1, position 2, channel 3");
    qc_tdesc_index_str(&d, 31, b, sizeof b);
    ck_assert_str_eq(b, "(1, 2, 3)");
    int64_t hs[3] = {5, 2, 3}; /* L = 4 -> indices 0..4 */
    qc_tdesc_init(&d, QC_TC_HIDDEN, "prefill/hidden", 3, hs);
    d.n_layers = 4;
    d.pos0 = 10;
    qc_tdesc_meaning(&d, 4 * 6 + 1 * 3 + 2, b, sizeof b);
    ck_assert_str_eq(b, "hidden[4] (final norm after layer 3), position 11, channel 2");
    qc_tdesc_meaning(&d, 2 * 6, b, sizeof b);
    ck_assert_str_eq(b, "hidden[2] (output of layer 1), position 10, channel 0");
    /* conv: key_dim 4 (dk 2), value dim 6 (dv 3): channels 0-3 q, 4-7 k, 8-13 v */
    int64_t cs[2] = {14, 4};
    qc_tdesc_init(&d, QC_TC_CONV_STATE, "c", 2, cs);
    d.layer = 0, d.key_dim = 4, d.dk = 2, d.dv = 3;
    qc_tdesc_meaning(&d, 12 * 4 + 1, b, sizeof b); /* channel 12 = v head 1 dim 1 */
    ck_assert_str_eq(b, "layer 0, conv channel 12 (v head 1 dim 1), column 1 of 4 (oldest first)");
    qc_tdesc_meaning(&d, 5 * 4, b, sizeof b);
    ck_assert_ptr_nonnull(strstr(b, "k head 0 dim 1"));
    int64_t rs[3] = {2, 3, 4};
    qc_tdesc_init(&d, QC_TC_RECURRENT_STATE, "r", 3, rs);
    d.layer = 2;
    qc_tdesc_meaning(&d, 1 * 12 + 2 * 4 + 3, b, sizeof b);
    ck_assert_str_eq(b, "layer 2, v head 1, key dim 2, value dim 3");
}
END_TEST

START_TEST(multi_part_worst_names_layer) {
    /* two layers; only layer 7's part has a mismatch */
    const float g[4] = {1, 1, 1, 1};
    const float a0[4] = {1, 1, 1, 1};
    const float a1[4] = {1, 1, 1.5f, 1};
    int64_t sh[3] = {1, 2, 2};
    qc_tdesc d0, d1;
    qc_tdesc_init(&d0, QC_TC_V_CACHE, "decode/state/layer_03/v_cache", 3, sh);
    qc_tdesc_init(&d1, QC_TC_V_CACHE, "decode/state/layer_07/v_cache", 3, sh);
    d0.layer = 3, d1.layer = 7;
    d0.atol = d1.atol = 1e-3;
    qc_metrics m;
    qc_metrics_init(&m, 0);
    qc_metrics_add(&m, &d0, a0, g);
    qc_metrics_add(&m, &d1, a1, g);
    qc_metrics_finish(&m);
    ck_assert_uint_eq(m.n, 8);
    ck_assert_uint_eq(m.n_mismatch, 1);
    ck_assert_int_eq(m.first_mismatch.desc.layer, 7);
    char b[512];
    qc_loc_str(&m.worst, b, sizeof b);
    ck_assert_str_eq(b, "decode/state/layer_07/v_cache (0, 1, 0) [layer 7, kv head 0, position 1, channel 0]");
}
END_TEST

START_TEST(round_125) {
    ck_assert_double_eq_tol(qc_round_125(3e-6), 5e-6, 1e-18);
    ck_assert_double_eq_tol(qc_round_125(1e-5), 1e-5, 1e-18);
    ck_assert_double_eq_tol(qc_round_125(1.1e-5), 2e-5, 1e-18);
    ck_assert_double_eq_tol(qc_round_125(2.5e-4), 5e-4, 1e-16);
    ck_assert_double_eq_tol(qc_round_125(7e-4), 1e-3, 1e-16);
    ck_assert_double_eq_tol(qc_round_125(0.15), 0.2, 1e-15);
    ck_assert_double_eq(qc_round_125(0.0), 0.0);
}
END_TEST

START_TEST(class_names) {
    qc_tclass c;
    ck_assert_int_eq(qc_tclass_parse("recurrent_state", &c), 0);
    ck_assert_int_eq(c, QC_TC_RECURRENT_STATE);
    ck_assert_int_eq(qc_tclass_parse("kv", &c), -1);
    ck_assert_str_eq(qc_tclass_str(QC_TC_CONV_STATE), "conv_state");
}
END_TEST

int main(void) {
    Suite *s = suite_create("metrics");
    TCase *t = tcase_create("core");
    tcase_add_test(t, allclose_counts_and_extremes);
    tcase_add_test(t, equal_tensors_pass);
    tcase_add_test(t, zero_elements_fail);
    tcase_add_test(t, nan_first_location);
    tcase_add_test(t, torch_style_summary);
    tcase_add_test(t, bitwise_nan_only_hint);
    tcase_add_test(t, bitwise_mode);
    tcase_add_test(t, kl_and_top1);
    tcase_add_test(t, meanings);
    tcase_add_test(t, multi_part_worst_names_layer);
    tcase_add_test(t, round_125);
    tcase_add_test(t, class_names);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int nf = srunner_ntests_failed(r);
    srunner_free(r);
    return nf ? 1 : 0;
}
