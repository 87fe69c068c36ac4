/* qc_bench_measure.c — the measuring of `qwen-conform bench`: the figures of a run (every
 * backend x static prefill, dynamic prefill per --prompt, decode per --depth, at every
 * --threads count), the backends under test with their states, warm-up and the interleaved
 * repetitions (rep 1 of every backend and figure, then rep 2, ...; so ratios come from one run
 * under the same machine load), in tokens/s. A sample that would take less than
 * --min-time / reps seconds repeats its run until it does (tokens / seconds over the
 * repeats), so tiny figures are not clock noise. Each sample also records its fastest run
 * (the gate's location: host load only ever slows a run down) and the share of its time the
 * process waited for a CPU (bench_rq_wait_s, diagnostics). See qc_bench_internal.h.
 */
#define _GNU_SOURCE 1 /* sched_setaffinity */
#include "qc_bench_internal.h"
#include "qc_server.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_cli.h"
#include "qc/qc_config.h"
#include "qc/qc_prefill.h"
#include "qc_cli_common.h"
#include "qc_registry.h"

/* ===================================================================================== */
/* Figures                                                                                */
/* ===================================================================================== */

int bench_find_fig(const bench_report *R, int backend, int mode, int tokens, int depth,
                   int threads) {
    for (int i = 0; i < R->n_fig; i++) {
        const bench_fig *f = &R->fig[i];
        if (f->backend == backend && f->mode == mode && f->tokens == tokens && f->depth == depth &&
            f->threads == threads)
            return i;
    }
    return -1;
}

int bench_add_fig(bench_report *R, int backend, int mode, int tokens, int depth, int threads,
                  int ti) {
    if (R->n_fig == MAX_FIGS) return -1;
    bench_fig *f = &R->fig[R->n_fig];
    memset(f, 0, sizeof *f);
    f->backend = backend;
    f->mode = mode;
    f->tokens = tokens;
    f->depth = depth;
    f->threads = threads;
    f->ti = ti;
    f->base = -1;
    return R->n_fig++;
}

static int in_list(const int *v, int n, int x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return 1;
    return 0;
}

/* every figure of every measured backend and thread count. Exit code (2: too many). */
static int plan_figures(const bench_opts *o, bench_report *R, qc_err *err) {
    for (int ti = 0; ti < o->n_threads; ti++) {
        const int t = R->probe[ti].threads;
        for (int b = 0; b < R->n_be; b++) {
            const bench_backend *bb = &R->be[b];
            int bad = 0;
            if (bb->peer) continue;
            if (bb->isref) {
                bad |= bench_add_fig(R, b, BM_STATIC, o->ref_prompt, 0, t, ti) < 0;
                bad |= bench_add_fig(R, b, BM_DYNAMIC, o->ref_prompt, 0, t, ti) < 0;
                if (o->ref_decode > 0)
                    bad |= bench_add_fig(R, b, BM_DECODE, o->ref_decode, o->ref_prompt, t, ti) < 0;
            } else {
                if (!bb->http) /* a server decides how it prefills: no static figure */
                    bad |= bench_add_fig(R, b, BM_STATIC, o->static_prompt, 0, t, ti) < 0;
                for (int i = 0; i < o->n_prompts; i++)
                    bad |= bench_add_fig(R, b, BM_DYNAMIC, o->prompts[i], 0, t, ti) < 0;
                for (int i = 0; i < o->n_depths && o->decode > 0; i++)
                    bad |= bench_add_fig(R, b, BM_DECODE, o->decode, o->depths[i], t, ti) < 0;
            }
            if (bad) {
                qc_errf(err, QC_ERR_ARG, "more than %d figures: shorten the --prompt / --depth / "
                        "--threads lists or the backends", MAX_FIGS);
                return qc_cli_fail(PROG, err);
            }
        }
    }
    return QC_EXIT_PASS;
}

int bench_name_backends(const bench_opts *o, bench_report *R, qc_err *err) {
    R->n_be = o->n_backends;
    for (int b = 0; b < o->n_backends; b++) {
        qc_runtime_spec rs;
        if (qc_registry_parse(o->backends[b], 0, &rs, err)) return qc_cli_fail(PROG, err);
        bench_backend *bb = &R->be[b];
        snprintf(bb->name, sizeof bb->name, "%.127s", rs.name);
        snprintf(bb->desc, sizeof bb->desc, "%s", rs.name);
        bb->isref = qc_registry_reference() && !strcmp(o->backends[b], qc_registry_reference()->name);
        bb->http = rs.kind == QC_RT_HTTP;
    }
    return plan_figures(o, R, err);
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

int bench_alloc_prompts(const bench_opts *o, const qc_model *m, bench_run *run) {
    const qc_config *c = &m->cfg;
    int big = bench_list_max(o->prompts, o->n_prompts), d = bench_list_max(o->depths, o->n_depths);
    big = d > big ? d : big;
    big = o->static_prompt > big ? o->static_prompt : big;
    big = o->ref_prompt > big ? o->ref_prompt : big;
    run->ntoks = big + (o->decode > o->ref_decode ? o->decode : o->ref_decode) + 8;
    run->toks = malloc((size_t)run->ntoks * sizeof *run->toks);
    run->logits = malloc((size_t)c->vocab_size * sizeof *run->logits);
    if (!run->toks || !run->logits) {
        bench_close(run);
        return -1;
    }
    make_prompt(run->toks, run->ntoks, c->vocab_size, (unsigned)o->seed);
    return 0;
}

/* One run: reset, prefill n tokens (mode static: one call per token; dynamic: chunks of msl),
 * then dec decode steps. t[0] / t[1] receive the seconds of each part. */
static qc_status run_one(qc_backend *be, qc_state *st, qc_mode mode, const int32_t *toks, int n,
                         int msl, int dec, double t[2], float *logits, qc_err *err) {
    qc_profile p;
    qc_profile_for_mode(&p, mode, mode == QC_MODE_DYNAMIC ? (msl > 0 ? msl : 1) : (n > 0 ? n : 1),
                        st->max_context_len);
    qc_runner *r = NULL;
    qc_status s = qc_runner_create(be, &p, st, &r, err);
    if (s) return s;
    if ((s = qc_runner_reset(r, err))) {
        qc_runner_destroy(r);
        return s;
    }
    int32_t first = 0;
    double t0 = bench_now_s();
    if (n > 0) s = qc_runner_prefill(r, toks, n, 0, NULL, NULL, &first, err);
    t[0] = bench_now_s() - t0;
    t[1] = 0;
    if (!s && dec > 0) {
        /* each step computes its logits (a real decode needs them to pick the next token) */
        t0 = bench_now_s();
        for (int i = 0; i < dec && !s; i++) s = qc_runner_decode(r, toks[n + i], logits, err);
        t[1] = bench_now_s() - t0;
    }
    qc_runner_destroy(r);
    return s;
}

/* A server's run: a cold request of n prompt tokens (t[0]: its latency, one token generated),
 * then, for dec decode steps, two warm requests of the same prompt generating dec + 1 and 1
 * tokens (t[1]: the difference: the decode steps alone). */
static qc_status http_run_one(qc_server *srv, const int32_t *toks, int n, int dec, double t[2],
                              qc_err *err) {
    qc_score sc[3];
    int gens[3] = {1, dec + 1, 1}, m = dec > 0 ? 3 : 1;
    t[0] = t[1] = 0;
    for (int i = 0; i < m; i++) {
        memset(&sc[i], 0, sizeof sc[i]);
        sc[i].seq = toks;
        sc[i].n = n;
        sc[i].from = n - 1;
        sc[i].n_gen = gens[i];
        sc[i].cold = i == 0;
        qc_status s = qc_server_score(srv, &sc[i], 1, err);
        if (!s && sc[i].fail[0]) s = qc_errf(err, QC_ERR_RUNTIME, "%s", sc[i].fail);
        if (s) {
            for (int j = 0; j <= i; j++) qc_score_clear(&sc[j]);
            return s;
        }
    }
    t[0] = sc[0].seconds;
    if (dec > 0) t[1] = sc[1].seconds > sc[2].seconds ? sc[1].seconds - sc[2].seconds : 1e-9;
    for (int i = 0; i < m; i++) qc_score_clear(&sc[i]);
    return QC_OK;
}

/* One sample of a prefill figure (fp, -1: untimed) and / or a decode figure after it (fd, -1:
 * none): the run repeated until each timed part took `target` seconds. rep < 0: warm-up (not
 * recorded). */
static qc_status sample(const bench_opts *o, bench_report *R, bench_run *run, int b, qc_mode mode,
                        int n, int msl, int fp, int fd, int rep, double target, qc_err *err) {
    const int dec = fd >= 0 ? R->fig[fd].tokens : 0, thr = R->fig[fp >= 0 ? fp : fd].threads;
    double pre = 0, dcs = 0, fast[2] = {0, 0};
    long np = 0, nd = 0;
    /* run-queue wait over the sample's runs (outside the timed parts: diagnostics only) */
    const double w0 = bench_now_s(), q0 = bench_rq_wait_s(thr);
    for (int k = 0; k < (1 << 20); k++) {
        /* a part that has its time stops: the decode steps once they took target seconds */
        const int dk = k == 0 || dcs < target ? dec : 0;
        double t[2] = {0, 0};
        qc_status s = run->srv[b] ? http_run_one(run->srv[b], run->toks, n, dk, t, err)
                                  : run_one(run->bes[b], run->sts[b], mode, run->toks, n, msl,
                                            dk, t, run->logits, err);
        if (s) return s;
        pre += t[0];
        dcs += t[1];
        for (int i = 0; i < 2; i++) { /* the fastest run of the sample */
            const int nt = i ? dk : n;
            if (nt > 0 && t[i] > 0 && nt / t[i] > fast[i]) fast[i] = nt / t[i];
        }
        np += n;
        nd += dk;
        if (rep < 0 || ((fp < 0 || pre >= target) && (fd < 0 || dcs >= target))) break;
    }
    if (rep < 0) return QC_OK;
    const double wall = bench_now_s() - w0, qw = bench_rq_wait_s(thr) - q0;
    const double wfrac = wall > 0 && qw > 0 ? (qw < wall ? qw / wall : 1.0) : 0.0;
    const int pi = R->probe[R->fig[fp >= 0 ? fp : fd].ti].n - 1;
    int ids[2] = {fp, fd};
    double secs[2] = {pre, dcs};
    long toks[2] = {np, nd};
    for (int i = 0; i < 2; i++) {
        if (ids[i] < 0 || secs[i] <= 0) continue;
        bench_fig *f = &R->fig[ids[i]];
        if (f->n >= MAX_REPS) continue;
        f->rep[f->n] = pi;
        f->fast[f->n] = fast[i];
        f->samples[f->n++] = (double)toks[i] / secs[i];
        f->secs += secs[i];
        f->wait_secs += wfrac * secs[i];
        fprintf(stderr, "%s: rep %d: %-12s %-7s %6d tok @ %5d, %2d thr: %10.2f tok/s (fastest run "
                "%.2f; %.0f%% run-queue wait)\n", PROG, rep + 1, R->be[b].name,
                bench_mode_names[f->mode], f->tokens, f->depth, f->threads, f->samples[f->n - 1],
                fast[i], 100 * wfrac);
    }
    (void)o;
    return QC_OK;
}

/* Repetition rep (< 0: warm-up) of backend b at thread index ti: every figure of it. */
static qc_status measure_backend(const bench_opts *o, bench_report *R, bench_run *run, int b,
                                 int ti, int rep, double target, qc_err *err) {
    const int t = R->probe[ti].threads;
    const bench_backend *bb = &R->be[b];
    const int sp = bb->isref ? o->ref_prompt : o->static_prompt;
    qc_status s = bb->http ? QC_OK
                           : sample(o, R, run, b, QC_MODE_STATIC, sp, 0,
                                    bench_find_fig(R, b, BM_STATIC, sp, 0, t), -1, rep, target, err);
    if (s) return s;
    if (bb->isref) {
        int fd = o->ref_decode > 0 ? bench_find_fig(R, b, BM_DECODE, o->ref_decode, o->ref_prompt, t) : -1;
        return sample(o, R, run, b, QC_MODE_DYNAMIC, o->ref_prompt, o->ref_prompt,
                      bench_find_fig(R, b, BM_DYNAMIC, o->ref_prompt, 0, t), fd, rep, target, err);
    }
    /* a prompt that is also a depth times its decode after it; other depths prefill untimed */
    for (int i = 0; i < o->n_prompts && !s; i++) {
        const int p = o->prompts[i], msl = o->max_seq_len && o->max_seq_len < p ? o->max_seq_len : p;
        int fd = o->decode > 0 && in_list(o->depths, o->n_depths, p)
                     ? bench_find_fig(R, b, BM_DECODE, o->decode, p, t) : -1;
        s = sample(o, R, run, b, QC_MODE_DYNAMIC, p, msl, bench_find_fig(R, b, BM_DYNAMIC, p, 0, t),
                   fd, rep, target, err);
    }
    for (int i = 0; i < o->n_depths && o->decode > 0 && !s; i++) {
        const int d = o->depths[i], msl = o->max_seq_len && o->max_seq_len < d ? o->max_seq_len : d;
        if (in_list(o->prompts, o->n_prompts, d)) continue;
        s = sample(o, R, run, b, QC_MODE_DYNAMIC, d, msl, -1,
                   bench_find_fig(R, b, BM_DECODE, o->decode, d, t), rep, target, err);
    }
    return s;
}

/* ===================================================================================== */
/* The backends of one thread count, and the repetitions                                  */
/* ===================================================================================== */

static void close_backends(const bench_report *R, bench_run *run) {
    for (int b = 0; b < R->n_be; b++) {
        qc_server_close(run->srv[b]);
        run->srv[b] = NULL;
        qc_backend_destroy(run->bes[b]);
        qc_state_destroy(run->sts[b]);
        run->bes[b] = NULL;
        run->sts[b] = NULL;
    }
}

const char *bench_fig_desc(const bench_report *R, const bench_fig *f) {
    const bench_backend *bb = &R->be[f->backend];
    if (f->ti >= 0 && f->ti < MAX_LIST && bb->tdesc[f->ti][0]) return bb->tdesc[f->ti];
    return bb->desc;
}

static int open_backends(const bench_opts *o, qc_model *m, bench_report *R, bench_run *run,
                         int threads, int ti, qc_err *err) {
    const qc_config *c = &m->cfg;
    int maxlen = bench_list_max(o->prompts, o->n_prompts), d = bench_list_max(o->depths, o->n_depths);
    maxlen = d > maxlen ? d : maxlen;
    const int ctx = maxlen + o->decode > o->static_prompt ? maxlen + o->decode : o->static_prompt;
    for (int b = 0; b < R->n_be; b++) {
        bench_backend *bb = &R->be[b];
        if (bb->peer) continue;
        qc_backend_opts bo;
        qc_backend_opts_default(&bo);
        bo.n_threads = threads;
        bo.max_tokens = bb->isref ? o->ref_prompt
                                  : (o->max_seq_len && o->max_seq_len < maxlen ? o->max_seq_len : maxlen);
        qc_runtime_spec rs;
        qc_status s;
        if (bb->http) { /* a server: connect (it loads its own model) */
            qc_server_opts so;
            if (qc_registry_parse(o->backends[b], 0, &rs, err) ||
                qc_server_parse(rs.target, &so, err) ||
                qc_server_open(&so, c->vocab_size, &run->srv[b], err)) {
                close_backends(R, run);
                return qc_cli_fail(PROG, err);
            }
            snprintf(bb->desc, sizeof bb->desc, "%s: %s", rs.name, qc_server_describe(run->srv[b]));
            if (ti >= 0 && ti < MAX_LIST) snprintf(bb->tdesc[ti], sizeof bb->tdesc[ti], "%s", bb->desc);
            continue;
        }
        if ((s = qc_registry_parse(o->backends[b], o->adapter_timeout, &rs, err)) ||
            (s = qc_registry_create(&rs, o->model_dir, m, &bo, &run->bes[b], err)) ||
            (s = qc_state_create(c, bb->isref ? o->ref_prompt + o->ref_decode : ctx, &run->sts[b], err))) {
            close_backends(R, run);
            return qc_cli_fail(PROG, err);
        }
        qc_backend *be = run->bes[b];
        bb->bf16_dot = (be->kernels & QC_BE_KERNEL_BF16_DOT) != 0;
        bb->amx = (be->kernels & QC_BE_KERNEL_AMX) != 0;
        snprintf(bb->desc, sizeof bb->desc, "%s", be->describe ? be->describe(be) : be->name);
        if (ti >= 0 && ti < MAX_LIST) snprintf(bb->tdesc[ti], sizeof bb->tdesc[ti], "%s", bb->desc);
    }
    return QC_EXIT_PASS;
}

/* every measured figure of thread index ti has min_time seconds */
static int enough_time(const bench_opts *o, const bench_report *R, int ti) {
    for (int i = 0; i < R->n_fig; i++)
        if (R->fig[i].ti == ti && !R->be[R->fig[i].backend].peer && R->fig[i].secs < o->min_time)
            return 0;
    return 1;
}

/* Single-threaded figures: repetition rep runs pinned to the rep-th CPU the process may use
 * (restored after), so every figure is measured on every CPU: virtual CPUs of one machine can
 * differ by 30 % and more (a host sibling busy), and the gate's location, the fastest run, is
 * then the fastest CPU's on both sides of a comparison. Returns 1 when it pinned. */
static int pin_rep(int threads, int rep, cpu_set_t *saved) {
    if (threads != 1 || sched_getaffinity(0, sizeof *saved, saved)) return 0;
    const int n = CPU_COUNT(saved);
    if (n < 2) return 0;
    int k = rep % n, cpu = 0;
    for (; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, saved) && k-- == 0) break;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return !sched_setaffinity(0, sizeof one, &one);
}

int bench_measure_all(const bench_opts *o, qc_model *m, bench_report *R, bench_run *run,
                      qc_err *err) {
    const double target = o->min_time / (o->reps > 0 ? o->reps : 1);
    for (int ti = 0; ti < o->n_threads; ti++) {
        int rc = open_backends(o, m, R, run, o->threads_list[ti], ti, err);
        if (rc) return rc;
        qc_status s = QC_OK;
        for (int w = 0; w < o->warmup && !s; w++)
            for (int b = 0; b < R->n_be && !s; b++)
                if (!R->be[b].peer) s = measure_backend(o, R, run, b, ti, -1, target, err);
        for (int rep = 0; !s; rep++) {
            if (rep >= o->reps && (enough_time(o, R, ti) || rep >= MAX_REPS)) break;
            cpu_set_t saved;
            const int pinned = pin_rep(R->probe[ti].threads, rep, &saved);
            bench_probe_sample(R, run, ti, rep, o->reps);
            for (int b = 0; b < R->n_be && !s; b++)
                if (!R->be[b].peer) s = measure_backend(o, R, run, b, ti, rep, target, err);
            if (pinned) sched_setaffinity(0, sizeof saved, &saved);
        }
        close_backends(R, run);
        if (s) return qc_cli_fail(PROG, err);
    }
    return QC_EXIT_PASS;
}

int bench_remeasure(const bench_opts *o, qc_model *m, bench_report *R, bench_run *run,
                    qc_err *err) {
    /* the second look: twice the repetitions and time, its samples (and probes) appended to
     * the first look's (a slowdown by host load only ever lowers samples, so more of them give
     * the fastest a better chance to be clean; a real regression lowers all of them) */
    bench_opts o2 = *o;
    o2.reps = 2 * o->reps < MAX_REPS ? 2 * o->reps : MAX_REPS;
    o2.min_time = 2 * o->min_time;
    double secs[MAX_FIGS];
    for (int i = 0; i < R->n_fig; i++) {
        secs[i] = R->fig[i].secs;
        R->fig[i].secs = 0; /* enough_time counts the second look's time */
    }
    const int rc = bench_measure_all(&o2, m, R, run, err);
    for (int i = 0; i < R->n_fig; i++) R->fig[i].secs += secs[i];
    return rc;
}

void bench_close(bench_run *run) {
    free(run->toks);
    free(run->logits);
    run->toks = NULL;
    run->logits = NULL;
}
