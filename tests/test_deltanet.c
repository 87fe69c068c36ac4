/* test_deltanet.c — the reference gated delta rule kernels (reference/qc_ref_deltanet.c).
 *
 *  - one token by hand (numbers worked out on paper, see the comment in the test);
 *  - the fp32 recurrence against an independent float64 closed-form recurrence written here,
 *    with n_v = 2 n_k (and a check that the wrong j % n_k mapping would be caught);
 *  - chunked == recurrent for lengths 1, 63, 64, 65, 130, chunk sizes 1, 3, 64, from a zero
 *    and from a non-zero initial state, within 1e-5 absolute (maxima printed);
 *  - strong decays (g = -60) stay finite in the chunked kernel.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../reference/qc_ref_deltanet.h"

/* ---------------------------------------------------------------------------------------- */
/* helpers                                                                                  */
/* ---------------------------------------------------------------------------------------- */

static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s * 2654435761ull + 1; }
/* uniform in [-1, 1) (xorshift64*) */
static double urand(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 2685821657736338717ull;
    return (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

typedef struct {
    qc_ref_dn_dims d;
    int n;
    float *q, *k, *v, *g, *beta; /* kernel inputs */
    float *S0;                   /* [nv, dk, dv] initial state */
} dn_case;

/* Random prepared inputs: q, k unit vectors per head (q then scaled by 1/sqrt(dk)),
 * v in [-1,1), g in [-1.5, 0) (log decay), beta in (0, 1). */
static dn_case make_case(int nk, int nv, int dk, int dv, int n, int nonzero_state, uint64_t seed) {
    dn_case c;
    c.d.n_k_heads = nk; c.d.n_v_heads = nv; c.d.k_dim = dk; c.d.v_dim = dv;
    c.n = n;
    rng_seed(seed);
    c.q = malloc(sizeof(float) * n * nk * dk);
    c.k = malloc(sizeof(float) * n * nk * dk);
    c.v = malloc(sizeof(float) * n * nv * dv);
    c.g = malloc(sizeof(float) * n * nv);
    c.beta = malloc(sizeof(float) * n * nv);
    c.S0 = malloc(sizeof(float) * nv * dk * dv);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nk; h++) {
            float *qh = c.q + ((size_t)t * nk + h) * dk, *kh = c.k + ((size_t)t * nk + h) * dk;
            double sq = 0, sk = 0;
            for (int i = 0; i < dk; i++) {
                qh[i] = (float)urand(); kh[i] = (float)urand();
                sq += (double)qh[i] * qh[i]; sk += (double)kh[i] * kh[i];
            }
            for (int i = 0; i < dk; i++) {
                qh[i] = (float)(qh[i] / sqrt(sq) / sqrt((double)dk));
                kh[i] = (float)(kh[i] / sqrt(sk));
            }
        }
    for (int i = 0; i < n * nv * dv; i++) c.v[i] = (float)urand();
    for (int i = 0; i < n * nv; i++) {
        c.g[i] = (float)(-0.75 * (urand() + 1.0));
        c.beta[i] = (float)(0.5 + 0.49 * urand());
    }
    for (int i = 0; i < nv * dk * dv; i++) c.S0[i] = nonzero_state ? (float)(0.5 * urand()) : 0.0f;
    return c;
}

static void free_case(dn_case *c) {
    free(c->q); free(c->k); free(c->v); free(c->g); free(c->beta); free(c->S0);
}

/* Independent float64 recurrence in the closed form of the spec:
 *   S' = e^g S;  S = S' + k (beta (v - S'^T k))^T;  o = S^T q
 * key head of value head j = map_div ? j / (nv/nk) : j % nk (the wrong, tiled mapping). */
static void ref_double(const dn_case *c, int map_div, double *S, double *o) {
    const int nk = c->d.n_k_heads, nv = c->d.n_v_heads, dk = c->d.k_dim, dv = c->d.v_dim;
    for (int i = 0; i < nv * dk * dv; i++) S[i] = c->S0[i];
    double *pred = malloc(sizeof(double) * dv);
    for (int t = 0; t < c->n; t++)
        for (int j = 0; j < nv; j++) {
            const int kh = map_div ? j / (nv / nk) : j % nk;
            const float *q = c->q + ((size_t)t * nk + kh) * dk, *k = c->k + ((size_t)t * nk + kh) * dk;
            const float *v = c->v + ((size_t)t * nv + j) * dv;
            double a = exp((double)c->g[t * nv + j]), b = c->beta[t * nv + j];
            double *Sj = S + (size_t)j * dk * dv;
            for (int e = 0; e < dv; e++) {
                pred[e] = 0;
                for (int i = 0; i < dk; i++) pred[e] += a * Sj[i * dv + e] * k[i];
            }
            for (int i = 0; i < dk; i++)
                for (int e = 0; e < dv; e++)
                    Sj[i * dv + e] = a * Sj[i * dv + e] + k[i] * (b * (v[e] - pred[e]));
            for (int e = 0; e < dv; e++) {
                double acc = 0;
                for (int i = 0; i < dk; i++) acc += Sj[i * dv + e] * q[i];
                o[((size_t)t * nv + j) * dv + e] = acc;
            }
        }
    free(pred);
}

static double maxdiff_f(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates */
    }
    return m;
}

static double maxdiff_fd(const float *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

/* ---------------------------------------------------------------------------------------- */
/* tests                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/* dk = dv = 2, one head. S0 = [[1,2],[3,4]], k = [1,0], q = [0,1], v = [5,6], g = ln 0.5,
 * beta = 0.5. By hand: S' = 0.5 S0 = [[0.5,1],[1.5,2]]; S'^T k = [0.5, 1];
 * d = 0.5 ([5,6] - [0.5,1]) = [2.25, 2.5]; S1 = S' + k d^T = [[2.75,3.5],[1.5,2]];
 * o = S1^T q = [1.5, 2]. */
START_TEST(one_token_by_hand) {
    qc_ref_dn_dims d = {1, 1, 2, 2};
    float q[2] = {0, 1}, k[2] = {1, 0}, v[2] = {5, 6}, g[1] = {logf(0.5f)}, beta[1] = {0.5f};
    const float S1[4] = {2.75f, 3.5f, 1.5f, 2.0f}, o_want[2] = {1.5f, 2.0f};
    for (int kernel = 0; kernel < 2; kernel++) {
        float S[4] = {1, 2, 3, 4}, o[2];
        float buf[64];
        qc_ref_dn_scratch s;
        ck_assert_uint_le(qc_ref_dn_scratch_floats(&d, 1), 64);
        qc_ref_dn_scratch_init(&s, &d, 1, buf);
        if (kernel == 0) qc_ref_dn_recurrent(&d, 1, q, k, v, g, beta, S, o);
        else qc_ref_dn_chunked(&d, 1, q, k, v, g, beta, S, o, 64, &s);
        for (int i = 0; i < 4; i++) ck_assert_float_eq_tol(S[i], S1[i], 1e-6f);
        for (int i = 0; i < 2; i++) ck_assert_float_eq_tol(o[i], o_want[i], 1e-6f);
    }
}
END_TEST

/* n_v = 2 n_k: the fp32 recurrence matches the float64 closed form with j / (nv/nk), and the
 * tiled j % nk mapping would be far off (the test is sensitive to the mapping). */
START_TEST(recurrent_matches_double_gva) {
    dn_case c = make_case(2, 4, 8, 6, 20, 1, 11);
    const size_t no = (size_t)c.n * 4 * 6, ns = 4 * 8 * 6;
    float *S = malloc(sizeof(float) * ns), *o = malloc(sizeof(float) * no);
    double *Sd = malloc(sizeof(double) * ns), *od = malloc(sizeof(double) * no);
    double *Sw = malloc(sizeof(double) * ns), *ow = malloc(sizeof(double) * no);
    memcpy(S, c.S0, sizeof(float) * ns);
    qc_ref_dn_recurrent(&c.d, c.n, c.q, c.k, c.v, c.g, c.beta, S, o);
    ref_double(&c, 1, Sd, od);
    ref_double(&c, 0, Sw, ow);
    double eo = maxdiff_fd(o, od, no), es = maxdiff_fd(S, Sd, ns);
    double wo = maxdiff_fd(o, ow, no);
    printf("deltanet: recurrent fp32 vs float64 (nv=2nk, T=20): max|do| %.3g max|dS| %.3g; "
           "vs wrong j%%nk mapping: %.3g\n", eo, es, wo);
    ck_assert(eo < 1e-5 && es < 1e-5);
    ck_assert(wo > 1e-2);
    free(S); free(o); free(Sd); free(od); free(Sw); free(ow);
    free_case(&c);
}
END_TEST

/* chunked == recurrent, lengths x chunk sizes x initial state. */
static void chunk_vs_rec(int nonzero_state, double *worst) {
    const int lens[] = {1, 63, 64, 65, 130};
    const int chunks[] = {1, 3, 64};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        const int n = lens[li];
        dn_case c = make_case(2, 4, 8, 6, n, nonzero_state, 100 + n);
        const size_t no = (size_t)n * 4 * 6, ns = 4 * 8 * 6;
        float *Sr = malloc(sizeof(float) * ns), *orr = malloc(sizeof(float) * no);
        memcpy(Sr, c.S0, sizeof(float) * ns);
        qc_ref_dn_recurrent(&c.d, n, c.q, c.k, c.v, c.g, c.beta, Sr, orr);
        double *Sd = malloc(sizeof(double) * ns), *od = malloc(sizeof(double) * no);
        ref_double(&c, 1, Sd, od);
        ck_assert(maxdiff_fd(orr, od, no) < 1e-5);
        for (size_t ci = 0; ci < sizeof chunks / sizeof *chunks; ci++) {
            const int cs = chunks[ci];
            const int cap = cs < n ? cs : n;
            float *buf = malloc(sizeof(float) * qc_ref_dn_scratch_floats(&c.d, cap));
            qc_ref_dn_scratch s;
            qc_ref_dn_scratch_init(&s, &c.d, cap, buf);
            float *Sc = malloc(sizeof(float) * ns), *oc = malloc(sizeof(float) * no);
            memcpy(Sc, c.S0, sizeof(float) * ns);
            qc_ref_dn_chunked(&c.d, n, c.q, c.k, c.v, c.g, c.beta, Sc, oc, cs, &s);
            double eo = maxdiff_f(oc, orr, no), es = maxdiff_f(Sc, Sr, ns);
            if (eo > *worst) *worst = eo;
            if (es > *worst) *worst = es;
            if (!(eo <= 1e-5 && es <= 1e-5))
                ck_abort_msg("chunked vs recurrent: T=%d chunk=%d state0=%d: max|do| %g max|dS| %g",
                             n, cs, nonzero_state, eo, es);
            /* and against float64 */
            ck_assert(maxdiff_fd(oc, od, no) < 1e-5 && maxdiff_fd(Sc, Sd, ns) < 1e-5);
            free(buf); free(Sc); free(oc);
        }
        free(Sr); free(orr); free(Sd); free(od);
        free_case(&c);
    }
}

START_TEST(chunked_equals_recurrent_zero_state) {
    double worst = 0;
    chunk_vs_rec(0, &worst);
    printf("deltanet kernel: chunked vs recurrent, zero initial state, T in {1,63,64,65,130}, "
           "chunk in {1,3,64}: max abs diff %.3g\n", worst);
}
END_TEST

START_TEST(chunked_equals_recurrent_nonzero_state) {
    double worst = 0;
    chunk_vs_rec(1, &worst);
    printf("deltanet kernel: chunked vs recurrent, non-zero initial state: max abs diff %.3g\n",
           worst);
}
END_TEST

/* The chunk kernel continues from the state passed in: two calls (40 + 90 tokens) equal one. */
START_TEST(chunked_split_calls_continue_state) {
    dn_case c = make_case(1, 2, 4, 5, 130, 1, 7);
    const size_t ns = 2 * 4 * 5, no = 130 * 2 * 5;
    float *buf = malloc(sizeof(float) * qc_ref_dn_scratch_floats(&c.d, 64));
    qc_ref_dn_scratch s;
    qc_ref_dn_scratch_init(&s, &c.d, 64, buf);
    float S1[40], S2[40], o1[1300], o2[1300];
    memcpy(S1, c.S0, sizeof S1);
    memcpy(S2, c.S0, sizeof S2);
    qc_ref_dn_chunked(&c.d, 130, c.q, c.k, c.v, c.g, c.beta, S1, o1, 64, &s);
    qc_ref_dn_chunked(&c.d, 40, c.q, c.k, c.v, c.g, c.beta, S2, o2, 64, &s);
    qc_ref_dn_chunked(&c.d, 90, c.q + 40 * 4, c.k + 40 * 4, c.v + 40 * 10, c.g + 40 * 2,
                      c.beta + 40 * 2, S2, o2 + 40 * 10, 64, &s);
    ck_assert(maxdiff_f(S1, S2, ns) < 1e-5);
    ck_assert(maxdiff_f(o1, o2, no) < 1e-5);
    free(buf);
    free_case(&c);
}
END_TEST

/* Strong decays: exp(gamma) underflows to 0 inside a chunk; all exponents stay <= 0, so the
 * result is finite and equals the recurrence. */
START_TEST(chunked_strong_decay_finite) {
    dn_case c = make_case(1, 1, 4, 4, 64, 1, 5);
    for (int t = 0; t < 64; t++) c.g[t] = (t % 3 == 0) ? -60.0f : -0.1f;
    float Sr[16], Sc[16], orr[256], oc[256];
    memcpy(Sr, c.S0, sizeof Sr);
    memcpy(Sc, c.S0, sizeof Sc);
    float *buf = malloc(sizeof(float) * qc_ref_dn_scratch_floats(&c.d, 64));
    qc_ref_dn_scratch s;
    qc_ref_dn_scratch_init(&s, &c.d, 64, buf);
    qc_ref_dn_recurrent(&c.d, 64, c.q, c.k, c.v, c.g, c.beta, Sr, orr);
    qc_ref_dn_chunked(&c.d, 64, c.q, c.k, c.v, c.g, c.beta, Sc, oc, 64, &s);
    for (int i = 0; i < 256; i++) ck_assert(isfinite(oc[i]));
    ck_assert(maxdiff_f(oc, orr, 256) < 1e-5);
    ck_assert(maxdiff_f(Sc, Sr, 16) < 1e-5);
    free(buf);
    free_case(&c);
}
END_TEST

int main(void) {
    Suite *s = suite_create("deltanet");
    TCase *tc = tcase_create("kernels");
    tcase_add_test(tc, one_token_by_hand);
    tcase_add_test(tc, recurrent_matches_double_gva);
    tcase_add_test(tc, chunked_equals_recurrent_zero_state);
    tcase_add_test(tc, chunked_equals_recurrent_nonzero_state);
    tcase_add_test(tc, chunked_split_calls_continue_state);
    tcase_add_test(tc, chunked_strong_decay_finite);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
