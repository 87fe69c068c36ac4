/* test_moe_ref.c — the reference MoE block (reference/qc_ref_moe.c):
 *   1. a hand-computed case (H 2, E 3, k 2, Ie 1, Is 1): every logit, probability, choice,
 *      weight and output written as a closed form of e = exp(1) and sigmoids, and each of the
 *      three of the reference's fault variants (fault.moe, qc_ref_faults.h) changing the output exactly as its closed form says;
 *   2. the whole reference backend on synthetic MoE models (F32 and BF16, nv = nk and 2 nk):
 *      the "moe_in" / "router_topk" traces, and hidden[i+1] - moe_in[i] equal to this file's own
 *      float64 MoE block applied to RMSNorm(moe_in[i]) with the model's weights;
 *   3. the scratch is counted by qc_reference_scratch_bytes, the hook refuses dense models. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../reference/qc_ref_moe.h"
#include "../reference/qc_ref_faults.h"
#include "qc/qc_backend.h"
#include "qc/qc_model.h"
#include "qc/qc_reference.h"
#include "qc/qc_state.h"

/* ==== 1. The hand-computed block ==== */

static qc_tensor f32(int nd, int64_t a, int64_t b, int64_t c, const float *d) {
    qc_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = QC_F32, t.ndim = nd, t.shape[0] = a, t.shape[1] = b, t.shape[2] = c, t.data = d;
    return t;
}

static double sig(double v) { return 1.0 / (1.0 + exp(-v)); }

/* x = [1, 2]. Router rows e0 [1,0], e1 [0,1], e2 [0,0]: logits [1, 2, 0], so the top-2 are
 * e1 then e0. Experts (gate row, up row; down column):
 *   e0: gate [1,0] -> 1, up [0,1] -> 2: a = silu(1)*2;   down [1,-1]
 *   e1: gate [0,1] -> 2, up [1,0] -> 1: a = silu(2);     down [0.5, 2]
 *   e2: never chosen (large weights: using it shows)
 * Shared: gate [1,1] -> 3, up [1,-1] -> -1: a = -silu(3); down [1, 2]; gate [0.5,-0.5] -> -0.5. */
static const float X[2] = {1, 2};
static const float WR[3 * 2] = {1, 0, 0, 1, 0, 0};
static const float GU[3 * 2 * 2] = {1, 0, 0, 1, /* e0 */ 0, 1, 1, 0, /* e1 */ 3, 3, 1, 1};
static const float DN[3 * 2 * 1] = {1, -1, 0.5f, 2, 10, 10};
static const float SG[2] = {1, 1}, SU[2] = {1, -1}, SD[2] = {1, 2}, SEG[2] = {0.5f, -0.5f};

static void run_block(const char *fault, float out[2], float route[4]) {
    qc_tensor r = f32(2, 3, 2, 0, WR), gu = f32(3, 3, 2, 2, GU), dn = f32(3, 3, 2, 1, DN);
    qc_tensor sg = f32(2, 1, 2, 0, SG), su = f32(2, 1, 2, 0, SU), sd = f32(2, 2, 1, 0, SD);
    qc_tensor seg = f32(2, 1, 2, 0, SEG);
    qc_ref_moe_layer L = {2, 3, 2, 1, 1, &r, &gu, &dn, &sg, &su, &sd, &seg, qc_ref_fault_moe(fault)};
    size_t nf = qc_ref_moe_scratch_floats(2, 3, 2, 1, 1, 1);
    ck_assert_uint_lt(nf, 64);
    float *buf = malloc(nf * sizeof(float));
    for (size_t i = 0; i < nf; i++) buf[i] = NAN; /* the block must not read stale scratch */
    qc_ref_moe_scratch s;
    qc_ref_moe_scratch_init(&s, 2, 3, 2, 1, 1, 1, buf);
    qc_ref_moe(out, X, 1, &L, &s);
    memcpy(route, s.route, 4 * sizeof(float));
    free(buf);
}

#define NEAR(a, b) ck_assert_msg(fabs((double)(a) - (b)) <= 2e-6 * (1 + fabs(b)), "%.9g != %.9g", (double)(a), (double)(b))

START_TEST(test_hand_case) {
    const double e = exp(1.0);
    const double w1 = e / (e + 1), w0 = 1 / (e + 1);         /* renormalised top-2 */
    const double a0 = 1 * sig(1) * 2, a1 = 2 * sig(2);       /* silu(g) * u */
    const double y[2] = {w0 * a0 * 1 + w1 * a1 * 0.5, w0 * a0 * -1 + w1 * a1 * 2};
    const double as = 3 * sig(3) * -1, g = sig(-0.5);       /* shared: silu(3) * (-1) */
    const double sh[2] = {as * 1, as * 2};
    float out[2], route[4];

    run_block("none", out, route);
    ck_assert_float_eq(route[0], 1.0f); /* descending probability: e1, e0 */
    ck_assert_float_eq(route[1], 0.0f);
    NEAR(route[2], w1);
    NEAR(route[3], w0);
    NEAR(out[0], y[0] + g * sh[0]);
    NEAR(out[1], y[1] + g * sh[1]);

    /* renormalisation dropped: the raw softmax probabilities e^2/Z, e/Z, Z = e^2 + e + 1 */
    const double Z = e * e + e + 1, p1 = e * e / Z, p0 = e / Z;
    run_block("no_renorm", out, route);
    NEAR(route[2], p1);
    NEAR(route[3], p0);
    NEAR(out[0], p0 * a0 * 1 + p1 * a1 * 0.5 + g * sh[0]);
    NEAR(out[1], p0 * a0 * -1 + p1 * a1 * 2 + g * sh[1]);

    /* the shared gate applied to routed + shared */
    run_block("gate_all", out, route);
    NEAR(out[0], g * (y[0] + sh[0]));
    NEAR(out[1], g * (y[1] + sh[1]));

    /* the k-th choice replaced by the (k+1)-th: e1 and e2 (logit 0, p 1/Z) */
    run_block("topk_next", out, route);
    ck_assert_float_eq(route[0], 1.0f);
    ck_assert_float_eq(route[1], 2.0f);
    const double v1 = (e * e) / (e * e + 1), v2 = 1 / (e * e + 1);
    /* e2: gate 3*1 + 3*2 = 9, up 1 + 2 = 3, down [10, 10] */
    const double g2 = 1 * 3 + 2 * 3, u2 = 1 * 1 + 2 * 1, act2 = g2 * sig(g2) * u2;
    NEAR(route[2], v1);
    NEAR(route[3], v2);
    NEAR(out[0], v1 * a1 * 0.5 + v2 * act2 * 10 + g * sh[0]);
    NEAR(out[1], v1 * a1 * 2 + v2 * act2 * 10 + g * sh[1]);
}
END_TEST

/* ==== 2. The reference backend vs an independent float64 block ==== */

typedef struct {
    int L, H, k, n;
    double *moe_in;  /* [L, n, H] */
    double *hidden;  /* [L+1, n, H] */
    float *route;    /* [L, n, 2k] */
    int n_moe_in, n_route, n_hidden;
} rec_t;

static void rec_trace(void *user, int index, const char *name, int start_pos, int n, int dim,
                      const float *d) {
    rec_t *r = user;
    (void)start_pos;
    ck_assert_int_eq(n, r->n);
    if (!strcmp(name, "hidden")) {
        ck_assert_int_eq(dim, r->H);
        for (int i = 0; i < n * dim; i++) r->hidden[(size_t)index * n * dim + i] = d[i];
        r->n_hidden++;
    } else if (!strcmp(name, "moe_in")) {
        ck_assert_int_eq(dim, r->H);
        ck_assert(index >= 0 && index < r->L);
        for (int i = 0; i < n * dim; i++) r->moe_in[(size_t)index * n * dim + i] = d[i];
        r->n_moe_in++;
    } else if (!strcmp(name, "router_topk")) {
        ck_assert_int_eq(dim, 2 * r->k);
        memcpy(r->route + (size_t)index * n * dim, d, (size_t)n * dim * sizeof(float));
        r->n_route++;
    } else {
        ck_abort_msg("unexpected trace name %s", name);
    }
}

/* The MoE block in float64 from the model's tensors (widened with qc_tensor_get), applied to
 * RMSNorm_1p(h; post_norm) of one token. Writes out[H]; ids[k] descending; margin p_k - p_k+1. */
static void moe_f64(const qc_model *m, int li, const double *h, double *out, int *ids,
                    double *wts, double *margin) {
    const qc_config *c = &m->cfg;
    const int H = c->hidden_size, E = c->n_experts, k = c->n_experts_per_tok;
    const int Ie = c->moe_intermediate_size, Is = c->shared_expert_intermediate_size;
    const qc_layer_weights *w = &m->layers[li];
    double x[512], ss = 0, p[256], mx = -1e300, z = 0;
    for (int i = 0; i < H; i++) ss += h[i] * h[i];
    const double inv = 1.0 / sqrt(ss / H + c->rms_eps);
    for (int i = 0; i < H; i++) x[i] = h[i] * inv * (1.0 + qc_tensor_get(&w->post_norm, (size_t)i));
    for (int e = 0; e < E; e++) {
        double l = 0;
        for (int i = 0; i < H; i++) l += qc_tensor_get(&w->router, (size_t)e * H + i) * x[i];
        p[e] = l;
        mx = l > mx ? l : mx;
    }
    for (int e = 0; e < E; e++) z += (p[e] = exp(p[e] - mx));
    for (int e = 0; e < E; e++) p[e] /= z;
    int used[256] = {0};
    double psum = 0;
    for (int j = 0; j <= k && j < E; j++) {
        int b = -1;
        for (int e = 0; e < E; e++)
            if (!used[e] && (b < 0 || p[e] > p[b])) b = e;
        if (j == k) {
            *margin = p[ids[k - 1]] - p[b];
            break;
        }
        used[b] = 1, ids[j] = b, psum += p[b];
    }
    if (k == E) *margin = 1;
    for (int i = 0; i < H; i++) out[i] = 0;
    for (int j = 0; j < k; j++) {
        const int e = ids[j];
        wts[j] = p[e] / psum;
        for (int r = 0; r < Ie; r++) {
            double g = 0, u = 0;
            for (int i = 0; i < H; i++) {
                g += qc_tensor_get(&w->exp_gate_up, ((size_t)e * 2 * Ie + r) * H + i) * x[i];
                u += qc_tensor_get(&w->exp_gate_up, ((size_t)e * 2 * Ie + Ie + r) * H + i) * x[i];
            }
            const double a = g / (1 + exp(-g)) * u;
            for (int i = 0; i < H; i++)
                out[i] += wts[j] * a * qc_tensor_get(&w->exp_down, ((size_t)e * H + i) * Ie + r);
        }
    }
    double gl = 0;
    for (int i = 0; i < H; i++) gl += qc_tensor_get(&w->sh_expert_gate, (size_t)i) * x[i];
    const double gs = 1 / (1 + exp(-gl));
    for (int r = 0; r < Is; r++) {
        double g = 0, u = 0;
        for (int i = 0; i < H; i++) {
            g += qc_tensor_get(&w->sh_gate, (size_t)r * H + i) * x[i];
            u += qc_tensor_get(&w->sh_up, (size_t)r * H + i) * x[i];
        }
        const double a = g / (1 + exp(-g)) * u;
        for (int i = 0; i < H; i++) out[i] += gs * a * qc_tensor_get(&w->sh_down, (size_t)i * Is + r);
    }
}

static qc_config tiny_moe(int nv, int E, int k) {
    qc_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 64, c.hidden_size = 32, c.n_layers = 4;
    c.n_experts = E, c.n_experts_per_tok = k, c.moe_intermediate_size = 16;
    c.shared_expert_intermediate_size = 24;
    c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 8;
    c.lin_n_k_heads = 2, c.lin_n_v_heads = nv, c.lin_k_dim = 8, c.lin_v_dim = 8, c.conv_kernel = 4;
    c.rms_eps = 1e-6, c.rope_theta = 10000.0, c.partial_rotary_factor = 0.5, c.rotary_dim = 4;
    c.max_position_embeddings = 4096;
    for (int i = 0; i < 4; i++) c.layer_types[i] = i == 3 ? QC_LAYER_FULL : QC_LAYER_LINEAR;
    return c;
}

static void check_backend(qc_dtype dt, int nv, int E, int k, double tol) {
    qc_config c = tiny_moe(nv, E, k);
    qc_model *m = NULL;
    qc_err e;
    ck_assert_msg(qc_model_synthetic(&c, dt, 5, &m, &e) == QC_OK, "%s", e.msg);
    const int n = 9, H = c.hidden_size, L = c.n_layers;
    rec_t r = {L, H, k, n, calloc((size_t)L * n * H, sizeof(double)),
               calloc((size_t)(L + 1) * n * H, sizeof(double)),
               calloc((size_t)L * n * 2 * k, sizeof(float)), 0, 0, 0};
    qc_backend_opts o;
    qc_backend_opts_default(&o);
    o.max_tokens = 16;
    o.trace = rec_trace;
    o.trace_user = &r;
    qc_backend *be = NULL;
    ck_assert_msg(qc_reference_create(m, &o, &be, &e) == QC_OK, "%s", e.msg);
    qc_state *st = NULL;
    ck_assert_int_eq(qc_state_create(&m->cfg, 32, &st, &e), QC_OK);
    int32_t toks[9] = {3, 17, 42, 5, 63, 0, 8, 21, 33};
    float *logits = malloc(sizeof(float) * 64);
    ck_assert_msg(qc_backend_forward(be, toks, n, 0, st, logits, 0, &e) == QC_OK, "%s", e.msg);
    ck_assert_int_eq(r.n_moe_in, L);
    ck_assert_int_eq(r.n_route, L);
    ck_assert_int_eq(r.n_hidden, L + 1);
    int checked = 0, spread[64] = {0};
    for (int li = 0; li < L - 1; li++)
        for (int t = 0; t < n; t++) {
            const double *h = r.moe_in + ((size_t)li * n + t) * H;
            const double *next = r.hidden + ((size_t)(li + 1) * n + t) * H;
            double out[512], wts[64], margin = 1, err_max = 0, scale = 0;
            int ids[64];
            moe_f64(m, li, h, out, ids, wts, &margin);
            const float *rt = r.route + ((size_t)li * n + t) * 2 * k;
            double wsum = 0;
            for (int j = 0; j < k; j++) {
                ck_assert(rt[j] >= 0 && rt[j] < E && rt[j] == floorf(rt[j]));
                if (j) ck_assert(rt[k + j] <= rt[k + j - 1]); /* descending */
                wsum += rt[k + j];
                spread[(int)rt[j]]++;
            }
            ck_assert_msg(fabs(wsum - 1) < 1e-6, "weights sum to %.9g", wsum);
            if (margin < 1e-4) continue; /* a near-tie may legitimately differ */
            for (int j = 0; j < k; j++) {
                ck_assert_int_eq((int)rt[j], ids[j]);
                ck_assert_msg(fabs(rt[k + j] - wts[j]) < 1e-5, "weight %g vs %g", rt[k + j], wts[j]);
            }
            for (int i = 0; i < H; i++) {
                const double d = fabs((next[i] - h[i]) - out[i]);
                err_max = d > err_max ? d : err_max;
                scale = fabs(out[i]) > scale ? fabs(out[i]) : scale;
            }
            ck_assert_msg(scale > 1e-3, "MoE output is ~0 (scale %g)", scale);
            ck_assert_msg(err_max <= tol * (1 + scale), "layer %d token %d: |ref - f64| %g (scale %g)",
                          li, t, err_max, scale);
            checked++;
        }
    ck_assert_int_ge(checked, (L - 1) * n / 2);
    int distinct = 0;
    for (int x = 0; x < E; x++) distinct += spread[x] > 0;
    ck_assert_msg(distinct >= (E < 6 ? E : 6), "only %d experts ever chosen", distinct);

    /* the faults change the result (and the hook refuses junk) */
    float *base = malloc(sizeof(float) * 64);
    memcpy(base, logits, sizeof(float) * 64);
    static const char *const faults[] = {"no_renorm", "gate_all", "topk_next", "gate_drop"};
    for (int f = 0; f < 4; f++) {
        ck_assert_int_eq(qc_backend_set_option(be, "fault.moe", faults[f], &e), QC_OK);
        qc_state_reset(st);
        ck_assert(qc_backend_forward(be, toks, n, 0, st, logits, 0, &e) == QC_OK);
        double d = 0;
        for (int v = 0; v < 64; v++) d = fmax(d, fabs(logits[v] - base[v]));
        /* k == E: all probabilities are taken (they sum to 1: renormalising is a no-op up to
         * rounding) and there is no (k+1)-th expert */
        if (k == E && (f == 0 || f == 2))
            ck_assert_msg(d < 1e-4, "fault %s with k == E: max logit change %g", faults[f], d);
        else
            ck_assert_msg(d > 1e-3, "fault %s: max logit change %g", faults[f], d);
    }
    ck_assert_int_eq(qc_backend_set_option(be, "fault.moe", "none", &e), QC_OK);
    qc_state_reset(st);
    ck_assert(qc_backend_forward(be, toks, n, 0, st, logits, 0, &e) == QC_OK);
    ck_assert_int_eq(memcmp(logits, base, sizeof(float) * 64), 0);
    ck_assert_int_eq(qc_backend_set_option(be, "fault.moe", "gate_sometimes", &e), QC_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "unknown variant 'gate_sometimes'"));
    ck_assert_int_eq(qc_backend_set_option(be, "fault.typo", "1", &e), QC_ERR_NO_OPTION);
    ck_assert_ptr_nonnull(strstr(e.msg, "unknown option 'fault.typo'"));
    free(base);
    free(logits);
    qc_state_destroy(st);
    qc_backend_destroy(be);
    free(r.moe_in);
    free(r.hidden);
    free(r.route);
    qc_model_free(m);
}

START_TEST(test_backend_f32) { check_backend(QC_F32, 2, 8, 2, 2e-5); }
END_TEST
START_TEST(test_backend_bf16_nv2) { check_backend(QC_BF16, 4, 8, 3, 2e-5); }
END_TEST
START_TEST(test_backend_k_eq_e) { check_backend(QC_F32, 4, 4, 4, 2e-5); }
END_TEST

/* ==== 3. Scratch counted, hook on a dense model ==== */

START_TEST(test_scratch_and_dense) {
    qc_config c = tiny_moe(2, 8, 2);
    qc_backend_opts o;
    qc_backend_opts_default(&o);
    o.max_tokens = 100;
    qc_config d = c;
    d.n_experts = d.n_experts_per_tok = d.moe_intermediate_size = 0;
    d.shared_expert_intermediate_size = 0;
    d.intermediate_size = 16;
    const size_t moe = qc_reference_scratch_bytes(&c, &o), dense = qc_reference_scratch_bytes(&d, &o);
    ck_assert_uint_ne(moe, SIZE_MAX);
    /* the MoE scratch: route [100, 4] + E logits + E probs + k+1 + 2 Ie + max(Ie,Is) + H + 2 Is +
     * H + max(H, Ie, Is) floats; the dense MLP's [100, 16] x2 are gone */
    const size_t want = (size_t)(100 * 4 + 8 + 8 + 3 + 32 + 24 + 32 + 48 + 32 + 32) * 4;
    ck_assert_uint_eq(moe + (size_t)2 * 100 * 16 * 4, dense + want);
    qc_model *m = NULL;
    qc_err e;
    ck_assert_int_eq(qc_model_synthetic(&d, QC_F32, 1, &m, &e), QC_OK);
    qc_backend *be = NULL;
    ck_assert_int_eq(qc_reference_create(m, NULL, &be, &e), QC_OK);
    ck_assert_int_eq(qc_backend_set_option(be, "fault.moe", "no_renorm", &e), QC_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "not a mixture-of-experts model"));
    qc_backend_destroy(be);
    qc_model_free(m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("moe_ref");
    TCase *t = tcase_create("moe_ref");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_hand_case);
    tcase_add_test(t, test_backend_f32);
    tcase_add_test(t, test_backend_bf16_nv2);
    tcase_add_test(t, test_backend_k_eq_e);
    tcase_add_test(t, test_scratch_and_dense);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int nf = srunner_ntests_failed(r);
    srunner_free(r);
    return nf ? 1 : 0;
}
