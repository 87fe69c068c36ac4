/* qc_bench_profile.c — `bench --profile-ops`: where the optimized backend's time goes, per op
 * class, for a dynamic prefill and for decode (issue #16 item 4).
 *
 * After the bench's figures, the optimized backend (the bench's first thread count) runs with
 * its timer hook on (include/qc/qc_optimized_profile.h): R reps of a dynamic prefill of the first
 * --prompt length (chunks of --max-seq-len), the last row's logits only; then --decode single-
 * token steps; then once more the prefill with the logits of EVERY position (the lm_head over
 * all rows, what a prefill that scores the prompt pays). Per class: the median over the reps
 * of its seconds, its share of the forward's (median) wall time ("other" = what the classes'
 * medians leave of it: the serial code between jobs, the parallel region's entry), and its rate against the bench's own probes of the same run: GFLOP/s and % of the FMA
 * peak for prefill (projections, lm_head, attention: exact flop counts; the chunked DeltaNet:
 * an estimate, marked ~), GB/s of weights and % of the bandwidth for decode (projections,
 * lm_head).
 *
 * Reported in the Markdown (stdout and --markdown: bench_profile_markdown) and the JSON
 * ("profile_ops": bench_profile_json). Off, the hook costs the backend one pointer load per op.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_bench_internal.h"
#include "qc_cli.h"
#include "qc_cli_common.h"
#include "qc/qc_optimized.h"
#include "qc/qc_state.h"
#include "qc/qc_optimized_profile.h"

#define PF_MAX_REPS 16
enum { PH_PREFILL, PH_DECODE, PH_PREFILL_ALL, PH_N };

typedef struct {
    int done;
    int prompt, decode, chunk, threads, reps;
    double sec[PH_N][QC_OP_N];   /* medians over the reps, per phase */
    double total[PH_N];          /* forward wall seconds (median) */
    double flops[PH_N][QC_OP_N]; /* flops per phase (0: not counted) */
    double bytes[QC_OP_N];       /* decode: weight bytes read per step per class */
    int approx[QC_OP_N];         /* flop count is an estimate */
    double peak, bw;             /* probes of the run: GFLOP/s, GB/s */
} pf_result;

static pf_result PF;

/* ===================================================================================== */
/* Counting                                                                               */
/* ===================================================================================== */

static double numel(const qc_tensor *t) {
    if (!t->data || t->ndim < 1) return 0;
    double n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (double)t->shape[i];
    return n;
}

static double bytes_of(const qc_tensor *t) { return t->data && t->ndim > 0 ? (double)qc_tensor_bytes(t) : 0; }

/* projection weights of every layer: elements and bytes (dense MLP and attention / DeltaNet) */
static void proj_size(const qc_model *m, double *elems, double *bytes) {
    *elems = *bytes = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const qc_layer_weights *w = &m->layers[l];
        const qc_tensor *t[] = {&w->q_proj, &w->k_proj, &w->v_proj, &w->o_proj, &w->in_proj_qkv,
                                &w->in_proj_z, &w->in_proj_b, &w->in_proj_a, &w->out_proj,
                                &w->mlp_gate, &w->mlp_up, &w->mlp_down};
        for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
            *elems += numel(t[i]);
            *bytes += bytes_of(t[i]);
        }
    }
}

static void count_flops(const qc_model *m, int n) {
    const qc_config *c = &m->cfg;
    double pe, pb;
    proj_size(m, &pe, &pb);
    int nfull = 0, nlin = 0;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_types[l] == QC_LAYER_FULL) nfull++;
        else nlin++;
    }
    const double H = c->hidden_size, V = c->vocab_size;
    const double attn = 4.0 * c->n_heads * c->head_dim * ((double)n * (n + 1) / 2) * nfull;
    /* chunked delta rule per token and value head, chunk 64: the chunk products (K K^T,
     * Q K^T, W, U: ~3 C dk + 2 C dv) and the state products (W S, Q S, update: 3 dk dv) */
    const double C = 64, dk = c->lin_k_dim, dv = c->lin_v_dim;
    const double dn = 2.0 * (3 * C * dk + 2 * C * dv + 3 * dk * dv) * c->lin_n_v_heads * nlin;
    PF.flops[PH_PREFILL][QC_OP_PROJ] = PF.flops[PH_PREFILL_ALL][QC_OP_PROJ] = 2.0 * n * pe;
    PF.flops[PH_PREFILL][QC_OP_ATTN] = PF.flops[PH_PREFILL_ALL][QC_OP_ATTN] = attn;
    PF.flops[PH_PREFILL][QC_OP_DELTANET] = PF.flops[PH_PREFILL_ALL][QC_OP_DELTANET] = dn * n;
    PF.flops[PH_PREFILL][QC_OP_LMHEAD] = 2.0 * H * V;
    PF.flops[PH_PREFILL_ALL][QC_OP_LMHEAD] = 2.0 * n * H * V;
    PF.approx[QC_OP_DELTANET] = 1;
    PF.bytes[QC_OP_PROJ] = pb;
    PF.bytes[QC_OP_LMHEAD] = bytes_of(&m->lm_head);
}

/* ===================================================================================== */
/* Measuring                                                                              */
/* ===================================================================================== */

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmpd);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* one phase: prefill (chunks) or decode steps from the state's position; timed per class */
static qc_status run_phase(qc_backend *be, qc_state *st, const int32_t *toks, int ph, int n,
                           int chunk, float *logits, qc_opt_profile *P, double *total, qc_err *err) {
    memset(P, 0, sizeof *P); /* the backend's timer (qc_backend_opts.profile) */
    const double t0 = bench_now_s();
    qc_status s = QC_OK;
    if (ph == PH_DECODE) {
        for (int i = 0; i < n && !s; i++)
            s = qc_backend_forward(be, toks + i, 1, st->pos, st, logits, 0, err);
    } else {
        for (int p = 0; p < n && !s; p += chunk) {
            const int c = n - p < chunk ? n - p : chunk;
            s = qc_backend_forward(be, toks + p, c, p, st, ph == PH_PREFILL_ALL ? logits + (size_t)p * be->model->cfg.vocab_size : logits,
                                   ph == PH_PREFILL_ALL, err);
        }
    }
    *total = bench_now_s() - t0;
    return s;
}

static qc_status measure(const qc_model *m, int threads, qc_err *err) {
    const qc_config *c = &m->cfg;
    const int n = PF.prompt, ctx = PF.prompt + PF.decode;
    qc_opt_profile P; /* every forward of the backend adds to it */
    qc_backend_opts bo;
    qc_backend_opts_default(&bo);
    bo.n_threads = threads;
    bo.max_tokens = PF.chunk;
    bo.profile = &P;
    qc_backend *be = NULL;
    qc_state *st = NULL;
    qc_status s = qc_optimized_create(m, &bo, &be, err);
    if (!s) s = qc_state_create(c, ctx, &st, err);
    const size_t all_bytes = (size_t)n * (size_t)c->vocab_size * sizeof(float);
    const int do_all = all_bytes <= ((size_t)1 << 30); /* the all-rows logits: at most 1 GiB */
    float *logits = s ? NULL : malloc(do_all ? all_bytes : (size_t)c->vocab_size * sizeof(float));
    int32_t *toks = s ? NULL : malloc((size_t)ctx * sizeof *toks);
    if (!s && (!logits || !toks)) s = qc_errf(err, QC_ERR_OOM, "--profile-ops: out of memory");
    for (int i = 0; !s && i < ctx; i++) toks[i] = (int32_t)((i * 2654435761u) % (unsigned)c->vocab_size);
    double sec[PH_N][QC_OP_N][PF_MAX_REPS], tot[PH_N][PF_MAX_REPS];
    int reps = 0;
    for (int r = -1; !s && r < PF.reps; r++) { /* r = -1: warm-up */
        for (int ph = 0; ph < PH_N && !s; ph++) {
            if (ph == PH_PREFILL_ALL && !do_all) continue;
            if (ph != PH_DECODE) qc_state_reset(st);
            double t = 0;
            s = run_phase(be, st, ph == PH_DECODE ? toks + n : toks, ph, ph == PH_DECODE ? PF.decode : n,
                          PF.chunk, logits, &P, &t, err);
            if (r < 0 || s) continue;
            tot[ph][r] = t / (ph == PH_DECODE ? PF.decode : 1);
            for (int k = 0; k < QC_OP_N; k++) sec[ph][k][r] = P.sec[k] / (ph == PH_DECODE ? PF.decode : 1);
        }
        if (r >= 0 && !s) reps++;
    }
    for (int ph = 0; !s && ph < PH_N; ph++) {
        if (ph == PH_PREFILL_ALL && !do_all) continue;
        PF.total[ph] = median(tot[ph], reps);
        for (int k = 0; k < QC_OP_N; k++) PF.sec[ph][k] = median(sec[ph][k], reps);
    }
    free(logits);
    free(toks);
    qc_state_destroy(st);
    qc_backend_destroy(be);
    return s;
}

int bench_profile_ops(const bench_opts *o, const qc_model *m, const bench_report *R, qc_err *err) {
    memset(&PF, 0, sizeof PF);
    PF.prompt = o->prompts[0] > 0 ? o->prompts[0] : 512;
    PF.decode = o->decode > 0 ? o->decode : 8;
    PF.chunk = o->max_seq_len > 0 && o->max_seq_len < PF.prompt ? o->max_seq_len : PF.prompt;
    PF.threads = o->n_threads > 0 ? o->threads_list[0] : 0;
    PF.reps = o->reps < 3 ? 3 : o->reps > PF_MAX_REPS ? PF_MAX_REPS : o->reps;
    PF.peak = R->n_probe > 0 ? R->probe[0].peak_med : 0;
    PF.bw = R->n_probe > 0 ? R->probe[0].bw_med : 0;
    fprintf(stderr, "%s: --profile-ops: optimized, pp%d (chunks of %d) and tg%d, %d reps ...\n", PROG,
            PF.prompt, PF.chunk, PF.decode, PF.reps);
    count_flops(m, PF.prompt);
    if (measure(m, PF.threads, err)) return qc_cli_fail(PROG, err);
    PF.done = 1;
    return QC_EXIT_PASS;
}

/* ===================================================================================== */
/* Reports                                                                                */
/* ===================================================================================== */

static const char *const ph_names[PH_N] = {"prefill (last logits)", "decode (per step)",
                                           "prefill (all logits)"};

/* rate column text of class k in phase ph */
static void rate(int ph, int k, char *buf, size_t cap) {
    const double s = PF.sec[ph][k];
    snprintf(buf, cap, "-");
    if (s <= 0) return;
    if (ph == PH_DECODE && PF.bytes[k] > 0) {
        const double gbs = PF.bytes[k] / s / 1e9;
        snprintf(buf, cap, "%.1f GB/s (%.0f%% of %.1f GB/s)", gbs, PF.bw > 0 ? 100 * gbs / PF.bw : 0, PF.bw);
    } else if (ph != PH_DECODE && PF.flops[ph][k] > 0) {
        const double gf = PF.flops[ph][k] / s / 1e9;
        snprintf(buf, cap, "%s%.1f GFLOP/s (%s%.0f%% of %.0f)", PF.approx[k] ? "~" : "", gf,
                 PF.approx[k] ? "~" : "", PF.peak > 0 ? 100 * gf / PF.peak : 0, PF.peak);
    }
}

char *bench_profile_markdown(void) {
    if (!PF.done) return NULL;
    size_t cap = 8192, n = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
#define OUT(...) n += (size_t)snprintf(b + n, n < cap ? cap - n : 0, __VA_ARGS__)
    char th[32];
    if (PF.threads) snprintf(th, sizeof th, "%d", PF.threads);
    else snprintf(th, sizeof th, "default");
    OUT("\n### Time per op class (--profile-ops: optimized, %s threads, pp%d in chunks of %d, tg%d; "
        "median of %d reps)\n\n", th, PF.prompt, PF.chunk, PF.decode, PF.reps);
    for (int ph = 0; ph < PH_N; ph++) {
        if (PF.total[ph] <= 0) continue;
        OUT("%s: %.4f s%s\n\n| op class | seconds | %% of the forward | rate vs the probes |\n|---|---:|---:|---|\n",
            ph_names[ph], PF.total[ph], ph == PH_DECODE ? " per step" : "");
        double sum = 0;
        for (int k = 0; k < QC_OP_N; k++) {
            char r[96];
            rate(ph, k, r, sizeof r);
            sum += PF.sec[ph][k];
            OUT("| %s | %.5f | %.1f%% | %s |\n", qc_opt_prof_name(k), PF.sec[ph][k],
                100 * PF.sec[ph][k] / PF.total[ph], r);
        }
        const double other = PF.total[ph] > sum ? PF.total[ph] - sum : 0; /* medians: may not add up */
        OUT("| other (serial: embeddings, RoPE, state copies, region entry) | %.5f | %.1f%% | - |\n\n",
            other, 100 * other / PF.total[ph]);
    }
#undef OUT
    if (n >= cap) b[cap - 1] = '\0';
    return b;
}

void bench_profile_json(cJSON *root) {
    if (!PF.done || !root) return;
    cJSON *j = cJSON_AddObjectToObject(root, "profile_ops");
    cJSON_AddStringToObject(j, "backend", "optimized");
    cJSON_AddNumberToObject(j, "threads", PF.threads);
    cJSON_AddNumberToObject(j, "prompt", PF.prompt);
    cJSON_AddNumberToObject(j, "chunk", PF.chunk);
    cJSON_AddNumberToObject(j, "decode_steps", PF.decode);
    cJSON_AddNumberToObject(j, "reps", PF.reps);
    cJSON_AddNumberToObject(j, "fma_peak_gflops", PF.peak);
    cJSON_AddNumberToObject(j, "bandwidth_gbs", PF.bw);
    static const char *const keys[PH_N] = {"prefill", "decode", "prefill_all_logits"};
    for (int ph = 0; ph < PH_N; ph++) {
        if (PF.total[ph] <= 0) continue;
        cJSON *p = cJSON_AddObjectToObject(j, keys[ph]);
        cJSON_AddNumberToObject(p, "seconds", PF.total[ph]);
        double sum = 0;
        for (int k = 0; k < QC_OP_N; k++) {
            cJSON *e = cJSON_AddObjectToObject(p, qc_opt_prof_name(k));
            cJSON_AddNumberToObject(e, "seconds", PF.sec[ph][k]);
            cJSON_AddNumberToObject(e, "pct", 100 * PF.sec[ph][k] / PF.total[ph]);
            sum += PF.sec[ph][k];
            if (ph == PH_DECODE && PF.bytes[k] > 0 && PF.sec[ph][k] > 0)
                cJSON_AddNumberToObject(e, "gbs", PF.bytes[k] / PF.sec[ph][k] / 1e9);
            if (ph != PH_DECODE && PF.flops[ph][k] > 0 && PF.sec[ph][k] > 0) {
                cJSON_AddNumberToObject(e, "gflops", PF.flops[ph][k] / PF.sec[ph][k] / 1e9);
                cJSON_AddBoolToObject(e, "gflops_estimated", PF.approx[k]);
            }
        }
        cJSON_AddNumberToObject(p, "other_seconds", PF.total[ph] > sum ? PF.total[ph] - sum : 0);
    }
}
