/* qc_bench_measure.c — the measuring of `qwen-conform bench`: the machine facts and the two
 * probes (streaming read of the weights, FMA loop; best of 3 passes per repetition), the
 * backends under test with their states, and the interleaved repetitions (rep 1 of every
 * backend and mode, then rep 2, ...) of the static prefill, the dynamic prefill and the
 * decode steps after it, in tokens/s. See qc_bench_internal.h.
 */
#include "qc_bench_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qc_cli.h"
#include "qc/qc_config.h"
#include "qc/qc_prefill.h"
#include "qc/qc_probe.h"
#include "qc_cli_common.h"
#include "qc_registry.h"

double bench_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ===================================================================================== */
/* Machine facts and probes                                                               */
/* ===================================================================================== */

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ' || *c == '\t') c++;
                c[strcspn(c, "\n")] = '\0';
                snprintf(buf, n, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

/* the weight tensors a decode step streams: every layer tensor, final norm, lm_head, as
 * (bytes, length) segments for qc_probe_bandwidth_gbs */
static int weight_segments(const qc_model *m, const void **seg_p, size_t *seg_n, int cap,
                           double *total) {
    int k = 0;
    *total = 0;
#define ADD(t)                                                                       \
    do {                                                                             \
        if ((t).ndim > 0 && (t).data && k < cap) {                                   \
            seg_p[k] = (t).data;                                                     \
            seg_n[k] = qc_tensor_numel(&(t)) * qc_dtype_size((t).dtype);             \
            *total += (double)seg_n[k];                                              \
            k++;                                                                     \
        }                                                                            \
    } while (0)
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const qc_layer_weights *w = &m->layers[l];
        ADD(w->input_norm); ADD(w->post_norm); ADD(w->mlp_gate); ADD(w->mlp_up); ADD(w->mlp_down);
        ADD(w->q_proj); ADD(w->k_proj); ADD(w->v_proj); ADD(w->o_proj); ADD(w->q_norm); ADD(w->k_norm);
        ADD(w->in_proj_qkv); ADD(w->in_proj_z); ADD(w->in_proj_b); ADD(w->in_proj_a); ADD(w->conv1d);
        ADD(w->dt_bias); ADD(w->A_log); ADD(w->lin_norm); ADD(w->out_proj);
    }
    ADD(m->final_norm);
    ADD(m->lm_head);
#undef ADD
    return k;
}

/* model flops per token of a dynamic prefill of n tokens (last logits only): projections,
 * causal attention at the mean context, the chunked delta rule (chunk 64) */
static double flops_per_token(const qc_model *m, int n) {
    const qc_config *c = &m->cfg;
    double f = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const qc_layer_weights *w = &m->layers[l];
        const qc_tensor *mats[] = {&w->mlp_gate, &w->mlp_up, &w->mlp_down, &w->q_proj, &w->k_proj,
                                   &w->v_proj, &w->o_proj, &w->in_proj_qkv, &w->in_proj_z,
                                   &w->in_proj_b, &w->in_proj_a, &w->out_proj};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++)
            if (mats[i]->ndim > 0) f += 2.0 * (double)qc_tensor_numel(mats[i]);
        if (c->layer_types[l] == QC_LAYER_FULL) {
            f += 4.0 * c->n_heads * c->head_dim * (n + 1) / 2.0;
        } else {
            const double C = n < 64 ? n : 64, dk = c->lin_k_dim, dv = c->lin_v_dim;
            f += c->lin_n_v_heads * 2.0 * (2 * C * dk + C * dv + C * (dk + dv) / 2 + 3 * dk * dv);
        }
    }
    f += 2.0 * (double)c->vocab_size * c->hidden_size / n;
    return f;
}

/* ===================================================================================== */
/* One measurement                                                                        */
/* ===================================================================================== */

static void make_prompt(int32_t *t, int n, int V, unsigned seed) {
    unsigned x = seed * 2654435761u + 1u;
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        t[i] = (int32_t)((x >> 7) % (unsigned)V);
    }
}

/* static: tokens/s of a static prefill of n tokens. dynamic: tokens/s of the dynamic prefill
 * (*dec_tps receives the decode tokens/s of `dec` steps after it). */
static qc_status run_one(qc_backend *be, qc_state *st, qc_mode mode, const int32_t *toks, int n,
                         int msl, int dec, double *tps, double *dec_tps, float *logits, qc_err *err) {
    qc_profile p;
    qc_profile_for_mode(&p, mode, mode == QC_MODE_DYNAMIC ? msl : n, st->max_context_len);
    qc_runner *r = NULL;
    qc_status s = qc_runner_create(be, &p, st, &r, err);
    if (s) return s;
    if ((s = qc_runner_reset(r, err))) {
        qc_runner_destroy(r);
        return s;
    }
    int32_t first = 0;
    double t0 = bench_now_s();
    s = qc_runner_prefill(r, toks, n, 0, NULL, NULL, &first, err);
    double t1 = bench_now_s();
    if (!s) *tps = n / (t1 - t0);
    if (!s && dec > 0 && dec_tps) {
        /* each step computes its logits (a real decode needs them to pick the next token) */
        t0 = bench_now_s();
        for (int i = 0; i < dec && !s; i++) s = qc_runner_decode(r, toks[n + i], logits, err);
        t1 = bench_now_s();
        if (!s) *dec_tps = dec / (t1 - t0);
    }
    qc_runner_destroy(r);
    return s;
}

/* ===================================================================================== */
/* The steps of the command                                                               */
/* ===================================================================================== */

void bench_machine(const bench_opts *o, const qc_model *m, bench_report *R, bench_run *run) {
    cpu_model(R->cpu, sizeof R->cpu);
    R->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    R->isa = qc_probe_isa();
    R->threads = o->threads > 0 ? o->threads : qc_probe_max_threads();
    time_t tt = time(NULL);
    struct tm tmv;
    gmtime_r(&tt, &tmv);
    strftime(R->date, sizeof R->date, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    double total = 0;
    run->nseg = weight_segments(m, run->seg_p, run->seg_n, MAX_SEGMENTS, &total);
    R->bytes_per_token = total;
    R->flops_per_token = flops_per_token(m, o->prompt);
    R->static_prompt = o->static_prompt;
    R->prompt = o->prompt;
    R->decode = o->decode;
    R->max_seq_len = o->max_seq_len;
    R->ref_prompt = o->ref_prompt;
    R->ref_decode = o->ref_decode;
}

int bench_alloc_prompts(const bench_opts *o, const qc_model *m, bench_run *run) {
    const qc_config *c = &m->cfg;
    run->big = o->prompt > o->static_prompt ? o->prompt : o->static_prompt;
    const int big = run->big;
    run->toks = malloc((size_t)(big + o->decode + o->ref_prompt + o->ref_decode + 8) *
                       sizeof *run->toks);
    run->logits = malloc((size_t)c->vocab_size * sizeof *run->logits);
    if (!run->toks || !run->logits) {
        free(run->toks);
        free(run->logits);
        run->toks = NULL;
        run->logits = NULL;
        return -1;
    }
    make_prompt(run->toks, big + o->decode + o->ref_prompt + o->ref_decode + 8, c->vocab_size,
                (unsigned)o->seed);
    return 0;
}

int bench_open_backends(const bench_opts *o, qc_model *m, bench_report *R, bench_run *run,
                        qc_err *err) {
    const qc_config *c = &m->cfg;
    int rc = QC_EXIT_PASS;
    qc_status s;
    R->n_be = o->n_backends;
    for (int b = 0; b < o->n_backends && !rc; b++) {
        const int isref = !strcmp(o->backends[b], "reference");
        qc_backend_opts bo;
        qc_backend_opts_default(&bo);
        bo.n_threads = o->threads;
        bo.max_tokens = isref ? o->ref_prompt
                              : (o->max_seq_len < o->prompt ? o->max_seq_len : o->prompt);
        int ctx = isref ? o->ref_prompt + o->ref_decode : run->big + o->decode;
        qc_runtime_spec rs;
        if ((s = qc_registry_parse(o->backends[b], 0, &rs, err)) ||
            (s = qc_registry_create(&rs, o->model_dir, m, &bo, &run->bes[b], err)) ||
            (s = qc_state_create(c, ctx, &run->sts[b], err))) {
            rc = qc_cli_fail(PROG, err);
            break;
        }
        bench_backend *bb = &R->be[b];
        qc_backend *be = run->bes[b];
        snprintf(bb->name, sizeof bb->name, "%.127s", rs.name);
        snprintf(bb->desc, sizeof bb->desc, "%s", be->describe ? be->describe(be) : be->name);
        bb->m[0].tokens = isref ? o->ref_prompt : o->static_prompt;
        bb->m[1].tokens = isref ? o->ref_prompt : o->prompt;
        bb->m[2].tokens = isref ? o->ref_decode : o->decode;
    }
    return rc;
}

/* One probe sample of repetition rep: the best of 3 passes (a pass that lost its CPU to
 * another process says nothing about the machine's limit). */
static void probe_sample(const bench_opts *o, bench_report *R, const bench_run *run, int rep) {
    R->bw[R->n_probe] = R->peak[R->n_probe] = 0;
    for (int pass = 0; pass < 3; pass++) {
        double bw = qc_probe_bandwidth_gbs(run->seg_p, run->seg_n, run->nseg, R->threads),
               pk = qc_probe_fma_gflops(R->threads);
        if (bw > R->bw[R->n_probe]) R->bw[R->n_probe] = bw;
        if (pk > R->peak[R->n_probe]) R->peak[R->n_probe] = pk;
    }
    fprintf(stderr, "%s: rep %d/%d: bandwidth %.1f GB/s, FMA peak %.0f GFLOP/s\n", PROG, rep + 1,
            o->reps, R->bw[R->n_probe], R->peak[R->n_probe]);
    R->n_probe++;
}

/* Repetition rep of backend b: static, then dynamic + decode; the samples into R->be[b]. */
static qc_status measure_backend(const bench_opts *o, bench_report *R, bench_run *run, int b,
                                 int rep, qc_err *err) {
    const int isref = !strcmp(o->backends[b], "reference");
    bench_backend *bb = &R->be[b];
    double tps = 0, dtps = 0;
    /* static */
    qc_status s = run_one(run->bes[b], run->sts[b], QC_MODE_STATIC, run->toks, bb->m[0].tokens, 0,
                          0, &tps, NULL, run->logits, err);
    if (!s) {
        bb->m[0].samples[bb->m[0].n++] = tps;
        fprintf(stderr, "%s: rep %d/%d: %-9s static  %5d tok: %9.2f tok/s\n", PROG, rep + 1,
                o->reps, bb->name, bb->m[0].tokens, tps);
        /* dynamic + decode */
        int msl = isref ? o->ref_prompt : o->max_seq_len;
        s = run_one(run->bes[b], run->sts[b], QC_MODE_DYNAMIC, run->toks, bb->m[1].tokens, msl,
                    bb->m[2].tokens, &tps, &dtps, run->logits, err);
    }
    if (s) return s;
    bb->m[1].samples[bb->m[1].n++] = tps;
    if (bb->m[2].tokens > 0) bb->m[2].samples[bb->m[2].n++] = dtps;
    fprintf(stderr, "%s: rep %d/%d: %-9s dynamic %5d tok: %9.2f tok/s; decode %d: %.2f tok/s\n",
            PROG, rep + 1, o->reps, bb->name, bb->m[1].tokens, tps, bb->m[2].tokens, dtps);
    return QC_OK;
}

int bench_run_reps(const bench_opts *o, bench_report *R, bench_run *run, qc_err *err) {
    int rc = QC_EXIT_PASS;
    for (int rep = 0; rep < o->reps && !rc; rep++) {
        probe_sample(o, R, run, rep);
        for (int b = 0; b < o->n_backends && !rc; b++) {
            if (measure_backend(o, R, run, b, rep, err)) {
                rc = qc_cli_fail(PROG, err);
                break;
            }
        }
    }
    return rc;
}

void bench_close(const bench_opts *o, bench_run *run) {
    for (int b = 0; b < o->n_backends; b++) {
        qc_backend_destroy(run->bes[b]);
        qc_state_destroy(run->sts[b]);
    }
    free(run->toks);
    free(run->logits);
    run->toks = NULL;
    run->logits = NULL;
}
