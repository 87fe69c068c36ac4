/* qc_cmd_bench.c — `qwen-conform bench`: the performance comparison report.
 *
 *   qwen-conform bench --model DIR | --synthetic 0.8b|2b|4b|9b [--dtype bf16|f32|f16]
 *       [--prompt N] [--static-prompt N] [--decode M] [--max-seq-len L]
 *       [--ref-prompt N] [--ref-decode M] [--threads T] [--reps R]
 *       [--backends optimized,reference] [--seed S]
 *       [--json F] [--markdown F] [--svg F] [--baseline old.json --max-regression PCT]
 *
 * For each backend and repetition (runs interleaved: rep 1 of every backend and mode, then
 * rep 2, ...; so ratios come from one run under the same machine load) it measures
 *   static  : prefill of the static prompt, one [1,1] call per token (ExecuTorch static shape)
 *   dynamic : prefill of the prompt, one call per max_seq_len chunk (dynamic shape)
 *   decode  : M single-token steps after the dynamic prefill
 * in tokens/s, and in the same run two machine probes on the benchmark's threads (best of 3
 * passes per repetition): a streaming read over the model's weight bytes (memory bandwidth) and
 * an FMA loop (FP32 FMA peak). The
 * report gives median and min over the repetitions, the ratio to the reference backend, and how
 * far each figure is from its limit: static / decode vs weight bytes per token / bandwidth;
 * dynamic vs model flops per token / FMA peak. The reference backend is slow, so it runs a
 * shorter prompt and fewer decode steps (--ref-prompt / --ref-decode, stated in the report).
 *
 * Outputs: a Markdown table on stdout (and --markdown F), JSON (--json F: machine, ISA,
 * threads, commit, date, config, probes, raw samples) and an SVG bar chart (--svg F), each
 * written through qc_outpath (temp file + fsync + rename; "-", devices and FIFOs directly),
 * validated before the run and refused when one is an input (a model file, the baseline) or
 * another output. Progress goes to stderr. --baseline old.json compares
 * every metric present in both (same backend, model, dtype, mode, tokens): a median slower than
 * the baseline's by more than PCT percent (default 10) exits 1; no common metric exits 3.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "qc/qc_backend.h"
#include "qc_cli.h"
#include "qc/qc_memplan.h"
#include "qc/qc_config.h"
#include "qc/qc_model.h"
#include "qc/qc_prefill.h"
#include "qc/qc_probe.h"
#include "qc/qc_state.h"
#include "qc_cli_common.h"
#include "qc_outpath.h"
#include "qc_registry.h"

#ifndef QC_GIT_COMMIT
#define QC_GIT_COMMIT "unknown" /* normally defined by CMake */
#endif
#ifndef QC_VERSION
#define QC_VERSION "unknown"
#endif

#define PROG "qwen-conform bench"
#define MAX_BACKENDS 4
#define MAX_REPS 64
#define N_MODES 3

static const char *const mode_names[N_MODES] = {"static", "dynamic", "decode"};

/* ===================================================================================== */
/* Options and results                                                                    */
/* ===================================================================================== */

typedef struct {
    const char *model_dir;   /* --model DIR, or NULL */
    const char *synthetic;   /* --synthetic NAME, or NULL */
    qc_dtype dtype;          /* synthetic weight dtype */
    int prompt;              /* dynamic prefill tokens */
    int static_prompt;       /* static prefill tokens (0: min(prompt, 64)) */
    int decode;              /* decode steps */
    int max_seq_len;         /* dynamic chunk (0: = prompt) */
    int ref_prompt;          /* reference backend: prompt (static and dynamic) */
    int ref_decode;          /* reference backend: decode steps */
    int threads;             /* optimized backend threads (0: OpenMP default) */
    int reps;                /* repetitions */
    char backends[MAX_BACKENDS][2100]; /* backend specs (registry names: qc_registry.h) */
    int n_backends;
    int n_external;          /* how many are runtimes under test (plugin / exec) */
    long seed;               /* synthetic weights seed */
    const char *json, *markdown, *svg, *baseline;
    const char *max_memory;   /* --max-memory SIZE, or NULL (available memory) */
    double max_regression;   /* percent */
} bench_opts;

typedef struct {
    int tokens;                 /* tokens per sample */
    double samples[MAX_REPS];   /* tokens/s per repetition */
    int n;
    double median, min;
    double ratio;               /* median / reference median (0: no reference) */
    double limit;               /* tokens/s the limit allows (0: unknown) */
} bench_metric;

typedef struct {
    char name[128];     /* "optimized", "plugin:libx.so", "exec:x.py", "llamacpp" */
    char desc[768];     /* describe() */
    bench_metric m[N_MODES];
} bench_backend;

typedef struct {
    char model_name[256];   /* "synthetic 0.8b" or the directory */
    qc_dtype dtype;         /* weight dtype (of the lm_head) */
    char cpu[256];          /* /proc/cpuinfo model name */
    int cores;              /* online CPUs */
    const char *isa;        /* optimized kernel table chosen at run time */
    int threads;            /* threads used by the probes and the optimized backend */
    char date[64];          /* UTC ISO 8601 */
    double bw[MAX_REPS], peak[MAX_REPS]; /* probe samples: GB/s, GFLOP/s */
    int n_probe;
    double bw_med, bw_max, peak_med, peak_max;
    double bytes_per_token;  /* weight bytes read per decoded token */
    double flops_per_token;  /* model flops per prefill token (dynamic) */
    int static_prompt, prompt, decode, max_seq_len, ref_prompt, ref_decode;
    bench_backend be[MAX_BACKENDS];
    int n_be;
} bench_report;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(const double *v, int n) {
    if (n <= 0) return 0.0;
    double tmp[MAX_REPS];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

static double min_of(const double *v, int n) {
    double m = n ? v[0] : 0.0;
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

static double max_of(const double *v, int n) {
    double m = n ? v[0] : 0.0;
    for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
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
    double t0 = now_s();
    s = qc_runner_prefill(r, toks, n, 0, NULL, NULL, &first, err);
    double t1 = now_s();
    if (!s) *tps = n / (t1 - t0);
    if (!s && dec > 0 && dec_tps) {
        /* each step computes its logits (a real decode needs them to pick the next token) */
        t0 = now_s();
        for (int i = 0; i < dec && !s; i++) s = qc_runner_decode(r, toks[n + i], logits, err);
        t1 = now_s();
        if (!s) *dec_tps = dec / (t1 - t0);
    }
    qc_runner_destroy(r);
    return s;
}

/* ===================================================================================== */
/* Reports                                                                                */
/* ===================================================================================== */

static const char *mode_label(int mi) {
    return mi == 0 ? "static prefill" : mi == 1 ? "dynamic prefill" : "decode";
}

static bench_metric *ref_metric(bench_report *R, int mi) {
    for (int b = 0; b < R->n_be; b++)
        if (!strcmp(R->be[b].name, "reference")) return &R->be[b].m[mi];
    return NULL;
}

static void finish(bench_report *R) {
    R->bw_med = median_of(R->bw, R->n_probe);
    R->bw_max = max_of(R->bw, R->n_probe);
    R->peak_med = median_of(R->peak, R->n_probe);
    R->peak_max = max_of(R->peak, R->n_probe);
    for (int b = 0; b < R->n_be; b++)
        for (int mi = 0; mi < N_MODES; mi++) {
            bench_metric *m = &R->be[b].m[mi];
            m->median = median_of(m->samples, m->n);
            m->min = min_of(m->samples, m->n);
            m->limit = mi == 1 ? R->peak_med * 1e9 / R->flops_per_token
                               : R->bw_med * 1e9 / R->bytes_per_token;
        }
    for (int b = 0; b < R->n_be; b++)
        for (int mi = 0; mi < N_MODES; mi++) {
            bench_metric *ref = ref_metric(R, mi), *m = &R->be[b].m[mi];
            if (ref) ref->median = median_of(ref->samples, ref->n);
            m->ratio = (ref && ref->median > 0 && m->n) ? m->median / ref->median : 0.0;
        }
}

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) return;
        if (b->p && b->n + (size_t)w < b->cap) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)w;
        char *np = realloc(b->p, cap);
        if (!np) return;
        b->p = np;
        b->cap = cap;
    }
}

static void markdown(const bench_report *R, const bench_opts *o, sbuf *b) {
    sb_printf(b, "## qwen-conform bench: %s (%s), %d thread%s, %s\n\n", R->model_name,
              qc_dtype_str(R->dtype), R->threads, R->threads == 1 ? "" : "s", R->isa);
    sb_printf(b, "- machine: %s, %d cores; commit %s; %s\n", R->cpu, R->cores, QC_GIT_COMMIT, R->date);
    sb_printf(b, "- probes (same run, %d threads): streaming read of the %.0f MB of weights %.1f GB/s "
                 "median (max %.1f); FP32 FMA loop %.0f GFLOP/s median (max %.0f)\n",
              R->threads, R->bytes_per_token / 1e6, R->bw_med, R->bw_max, R->peak_med, R->peak_max);
    sb_printf(b, "- workload: static prefill %d tokens (one call per token), dynamic prefill %d tokens "
                 "(one call per max_seq_len %d chunk), decode %d steps; reference backend: %d-token "
                 "prompts, %d decode steps; %d repetitions, interleaved\n",
              R->static_prompt, R->prompt, R->max_seq_len, R->decode, R->ref_prompt, R->ref_decode, o->reps);
    sb_printf(b, "- limits: static / decode = bandwidth / %.1f MB of weights per token; dynamic = FMA "
                 "peak / %.2f GFLOP per token\n\n",
              R->bytes_per_token / 1e6, R->flops_per_token / 1e9);
    sb_printf(b, "| backend | dtype | mode | tokens | tok/s median | tok/s min | vs reference | limit tok/s | %% of limit |\n");
    sb_printf(b, "|---|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (int bi = 0; bi < R->n_be; bi++)
        for (int mi = 0; mi < N_MODES; mi++) {
            const bench_metric *m = &R->be[bi].m[mi];
            if (!m->n) continue;
            char ratio[32] = "-";
            if (m->ratio > 0 && strcmp(R->be[bi].name, "reference")) snprintf(ratio, sizeof ratio, "%.1fx", m->ratio);
            else if (!strcmp(R->be[bi].name, "reference")) snprintf(ratio, sizeof ratio, "1.0x");
            sb_printf(b, "| %s | %s | %s | %d | %.2f | %.2f | %s | %.1f (%s) | %.0f%% |\n", R->be[bi].desc,
                      qc_dtype_str(R->dtype), mode_label(mi), m->tokens, m->median, m->min, ratio,
                      m->limit, mi == 1 ? "FMA peak" : "bandwidth",
                      m->limit > 0 ? 100.0 * m->median / m->limit : 0.0);
        }
    sb_printf(b, "\n");
}

static cJSON *json_report(const bench_report *R, const bench_opts *o) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "tool", "qwen-conform bench");
    cJSON_AddStringToObject(j, "version", QC_VERSION);
    cJSON_AddStringToObject(j, "commit", QC_GIT_COMMIT);
    cJSON_AddStringToObject(j, "date", R->date);
    cJSON *mc = cJSON_AddObjectToObject(j, "machine");
    cJSON_AddStringToObject(mc, "cpu", R->cpu);
    cJSON_AddNumberToObject(mc, "cores", R->cores);
    cJSON_AddStringToObject(mc, "isa", R->isa);
    cJSON_AddNumberToObject(mc, "threads", R->threads);
    cJSON *cf = cJSON_AddObjectToObject(j, "config");
    cJSON_AddStringToObject(cf, "model", R->model_name);
    cJSON_AddStringToObject(cf, "dtype", qc_dtype_str(R->dtype));
    cJSON_AddNumberToObject(cf, "static_prompt", R->static_prompt);
    cJSON_AddNumberToObject(cf, "prompt", R->prompt);
    cJSON_AddNumberToObject(cf, "max_seq_len", R->max_seq_len);
    cJSON_AddNumberToObject(cf, "decode", R->decode);
    cJSON_AddNumberToObject(cf, "ref_prompt", R->ref_prompt);
    cJSON_AddNumberToObject(cf, "ref_decode", R->ref_decode);
    cJSON_AddNumberToObject(cf, "reps", o->reps);
    cJSON_AddNumberToObject(cf, "weight_bytes_per_token", R->bytes_per_token);
    cJSON_AddNumberToObject(cf, "flops_per_prefill_token", R->flops_per_token);
    cJSON *pr = cJSON_AddObjectToObject(j, "probes");
    cJSON_AddItemToObject(pr, "bandwidth_gbs", cJSON_CreateDoubleArray(R->bw, R->n_probe));
    cJSON_AddItemToObject(pr, "fma_peak_gflops", cJSON_CreateDoubleArray(R->peak, R->n_probe));
    cJSON_AddNumberToObject(pr, "bandwidth_gbs_median", R->bw_med);
    cJSON_AddNumberToObject(pr, "fma_peak_gflops_median", R->peak_med);
    cJSON *res = cJSON_AddArrayToObject(j, "results");
    for (int bi = 0; bi < R->n_be; bi++)
        for (int mi = 0; mi < N_MODES; mi++) {
            const bench_metric *m = &R->be[bi].m[mi];
            if (!m->n) continue;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "backend", R->be[bi].name);
            cJSON_AddStringToObject(e, "describe", R->be[bi].desc);
            cJSON_AddStringToObject(e, "model", R->model_name);
            cJSON_AddStringToObject(e, "dtype", qc_dtype_str(R->dtype));
            cJSON_AddStringToObject(e, "mode", mode_names[mi]);
            cJSON_AddNumberToObject(e, "tokens", m->tokens);
            cJSON_AddNumberToObject(e, "threads", R->threads);
            cJSON_AddNumberToObject(e, "tok_s_median", m->median);
            cJSON_AddNumberToObject(e, "tok_s_min", m->min);
            cJSON_AddItemToObject(e, "tok_s_samples", cJSON_CreateDoubleArray(m->samples, m->n));
            if (m->ratio > 0) cJSON_AddNumberToObject(e, "ratio_vs_reference", m->ratio);
            cJSON_AddStringToObject(e, "limit", mi == 1 ? "fma_peak" : "bandwidth");
            cJSON_AddNumberToObject(e, "limit_tok_s", m->limit);
            cJSON_AddNumberToObject(e, "pct_of_limit", m->limit > 0 ? 100.0 * m->median / m->limit : 0);
            cJSON_AddItemToArray(res, e);
        }
    return j;
}

static void svg_escape(sbuf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '<') sb_printf(b, "&lt;");
        else if (*s == '>') sb_printf(b, "&gt;");
        else if (*s == '&') sb_printf(b, "&amp;");
        else sb_printf(b, "%c", *s);
    }
}

/* horizontal bars (log scale) of the median tokens/s per backend and mode; a tick at the min */
static void svg_chart(const bench_report *R, sbuf *b) {
    int rows = 0;
    double vmax = 1, vmin = 1e30;
    for (int bi = 0; bi < R->n_be; bi++)
        for (int mi = 0; mi < N_MODES; mi++)
            if (R->be[bi].m[mi].n) {
                rows++;
                if (R->be[bi].m[mi].median > vmax) vmax = R->be[bi].m[mi].median;
                if (R->be[bi].m[mi].min > 0 && R->be[bi].m[mi].min < vmin) vmin = R->be[bi].m[mi].min;
            }
    if (vmin > vmax) vmin = 1;
    const double lo = floor(log10(vmin > 0 ? vmin : 0.01)), hi = ceil(log10(vmax)) + (vmax == 1);
    const int W = 900, left = 330, right = 60, bar = 22, gap = 10, top = 60;
    const int H = top + rows * (bar + gap) + 50;
    const double span = (double)(W - left - right);
#define XPOS(v) (left + span * (log10(v) - lo) / (hi - lo))
    sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                 "font-family=\"sans-serif\" font-size=\"13\">\n", W, H);
    sb_printf(b, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    sb_printf(b, "<text x=\"10\" y=\"22\" font-size=\"16\" font-weight=\"bold\">qwen-conform bench: ");
    svg_escape(b, R->model_name);
    sb_printf(b, " (%s), %d threads, %s: tokens/s (log scale, median; tick = min)</text>\n",
              qc_dtype_str(R->dtype), R->threads, R->isa);
    sb_printf(b, "<text x=\"10\" y=\"42\" fill=\"#555\">");
    svg_escape(b, R->cpu);
    sb_printf(b, "; commit %s; %s</text>\n", QC_GIT_COMMIT, R->date);
    for (double d = lo; d <= hi + 1e-9; d += 1) {
        double x = left + span * (d - lo) / (hi - lo);
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n", x, top - 5, x,
                  H - 40);
        sb_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%g</text>\n", x, H - 22,
                  pow(10, d));
    }
    static const char *colors[N_MODES] = {"#8da0cb", "#66c2a5", "#fc8d62"};
    int row = 0;
    for (int bi = 0; bi < R->n_be; bi++)
        for (int mi = 0; mi < N_MODES; mi++) {
            const bench_metric *m = &R->be[bi].m[mi];
            if (!m->n) continue;
            int y = top + row * (bar + gap);
            double x1 = m->median > 0 ? XPOS(m->median) : left;
            if (x1 < left) x1 = left;
            sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s %s (%d tok)</text>\n", left - 8,
                      y + bar - 6, R->be[bi].name, mode_label(mi), m->tokens);
            sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", left, y,
                      x1 - left, bar, colors[mi]);
            if (m->min > 0) {
                double xm = XPOS(m->min);
                if (xm < left) xm = left;
                sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\" "
                             "stroke-width=\"2\"/>\n", xm, y, xm, y + bar);
            }
            sb_printf(b, "<text x=\"%.1f\" y=\"%d\">%.2f</text>\n", x1 + 4, y + bar - 6, m->median);
            row++;
        }
#undef XPOS
    sb_printf(b, "</svg>\n");
}

/* ===================================================================================== */
/* Baseline gating                                                                        */
/* ===================================================================================== */

/* 0 pass, 1 regression, 3 nothing compared; <0 error (err filled) */
static int compare_baseline(const bench_report *R, const bench_opts *o, qc_err *err) {
    char *text = NULL;
    size_t len = 0;
    if (qc_cli_read_file(o->baseline, &text, &len, err)) return -1;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) {
        qc_errf(err, QC_ERR_FORMAT, "%s: not valid JSON", o->baseline);
        return -1;
    }
    cJSON *res = cJSON_GetObjectItemCaseSensitive(j, "results");
    if (!cJSON_IsArray(res)) {
        cJSON_Delete(j);
        qc_errf(err, QC_ERR_FORMAT, "%s: no \"results\" array", o->baseline);
        return -1;
    }
    int compared = 0, regressions = 0, idx = 0;
    cJSON *e;
    fprintf(stderr, "%s: baseline %s (max regression %.1f%%)\n", PROG, o->baseline, o->max_regression);
    cJSON_ArrayForEach(e, res) {
        idx++;
        const cJSON *jb = cJSON_GetObjectItemCaseSensitive(e, "backend");
        const cJSON *jm = cJSON_GetObjectItemCaseSensitive(e, "mode");
        const cJSON *jmod = cJSON_GetObjectItemCaseSensitive(e, "model");
        const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *jt = cJSON_GetObjectItemCaseSensitive(e, "tokens");
        const cJSON *jv = cJSON_GetObjectItemCaseSensitive(e, "tok_s_median");
        if (!cJSON_IsString(jb) || !cJSON_IsString(jm) || !cJSON_IsString(jmod) || !cJSON_IsString(jd) ||
            !cJSON_IsNumber(jt) || !cJSON_IsNumber(jv)) {
            cJSON_Delete(j);
            qc_errf(err, QC_ERR_FORMAT,
                    "%s: results[%d]: needs backend, model, dtype, mode (strings), tokens and "
                    "tok_s_median (numbers)", o->baseline, idx - 1);
            return -1;
        }
        for (int bi = 0; bi < R->n_be; bi++)
            for (int mi = 0; mi < N_MODES; mi++) {
                const bench_metric *m = &R->be[bi].m[mi];
                if (!m->n || strcmp(R->be[bi].name, jb->valuestring) || strcmp(mode_names[mi], jm->valuestring) ||
                    strcmp(R->model_name, jmod->valuestring) || strcmp(qc_dtype_str(R->dtype), jd->valuestring) ||
                    m->tokens != (int)jt->valuedouble)
                    continue;
                compared++;
                double base = jv->valuedouble, change = base > 0 ? 100.0 * (m->median - base) / base : 0;
                int bad = m->median < base * (1.0 - o->max_regression / 100.0);
                regressions += bad;
                fprintf(stderr, "  %-10s %-8s %6d tok: %10.2f tok/s vs baseline %10.2f (%+.1f%%)%s\n",
                        R->be[bi].name, mode_names[mi], m->tokens, m->median, base, change,
                        bad ? "  REGRESSION" : "");
            }
    }
    cJSON_Delete(j);
    if (!compared) {
        fprintf(stderr, "%s: the baseline %s has no metric matching this run (backend, model, dtype, "
                        "mode, tokens)\n", PROG, o->baseline);
        return 3;
    }
    fprintf(stderr, "%s: %d metric%s compared, %d regression%s\n", PROG, compared, compared == 1 ? "" : "s",
            regressions, regressions == 1 ? "" : "s");
    return regressions ? 1 : 0;
}

/* ===================================================================================== */
/* Command                                                                                */
/* ===================================================================================== */

static const char bench_usage[] =
    "usage: qwen-conform bench --model DIR | --synthetic 0.8b|2b|4b|9b [options]\n"
    "  --dtype bf16|f32|f16     synthetic weight dtype (default bf16)\n"
    "  --prompt N               dynamic prefill tokens (default 512)\n"
    "  --static-prompt N        static prefill tokens, one call each (default min(prompt, 64))\n"
    "  --decode M               decode steps after the prefill (default 32)\n"
    "  --max-seq-len L          dynamic prefill chunk (default: the prompt length)\n"
    "  --ref-prompt N           reference backend prompt (default 8)\n"
    "  --ref-decode M           reference backend decode steps (default 2)\n"
    "  --threads T              optimized backend and probe threads (default: OpenMP default)\n"
    "  --reps R                 repetitions, interleaved (default 3)\n"
    "  --backends LIST          comma list of built-in backends (default optimized,reference)\n"
    "  --backend SPEC           add one backend (repeatable; replaces the default list):\n"
    "                           reference, optimized, plugin:PATH.so[,k=v...], exec:\"CMD\",\n"
    "                           isolate:plugin:PATH.so, llamacpp[,k=v...] -- a runtime under\n"
    "                           test loads the checkpoint itself, so it needs --model DIR\n"
    "  --seed S                 synthetic weights seed (default 1)\n"
    "  --json F  --markdown F  --svg F   report files (written atomically; '-' = stdout)\n"
    "  --baseline F.json --max-regression PCT   exit 1 if a metric is > PCT% slower (default 10)\n"
    "  --max-memory SIZE        refuse (exit 2) when the planned memory exceeds SIZE\n"
    "                           (default: the machine's available memory)\n";

static qc_status parse_args(int argc, char **argv, bench_opts *o, int *help, qc_err *err) {
    memset(o, 0, sizeof *o);
    o->dtype = QC_BF16;
    o->prompt = 512;
    o->decode = 32;
    o->ref_prompt = 8;
    o->ref_decode = 2;
    o->reps = 3;
    o->seed = 1;
    o->max_regression = 10.0;
    const char *backends = "optimized,reference";
    qc_argp a;
    qc_argp_init(&a, PROG, argc, argv);
    qc_status s = QC_OK;
    while (!s && qc_argp_next(&a)) {
        const char *v = NULL;
        if (qc_argp_is(&a, "--help") || qc_argp_is(&a, "-h")) {
            *help = 1;
            return QC_OK;
        } else if (qc_argp_is(&a, "--model")) s = qc_argp_value(&a, &o->model_dir, err);
        else if (qc_argp_is(&a, "--synthetic")) s = qc_argp_value(&a, &o->synthetic, err);
        else if (qc_argp_is(&a, "--dtype")) {
            if (!(s = qc_argp_value(&a, &v, err))) s = qc_dtype_parse(v, "--dtype", &o->dtype, err);
        } else if (qc_argp_is(&a, "--prompt")) s = qc_argp_int(&a, 1, 1 << 20, &o->prompt, err);
        else if (qc_argp_is(&a, "--static-prompt")) s = qc_argp_int(&a, 1, 1 << 20, &o->static_prompt, err);
        else if (qc_argp_is(&a, "--decode")) s = qc_argp_int(&a, 0, 1 << 20, &o->decode, err);
        else if (qc_argp_is(&a, "--max-seq-len")) s = qc_argp_int(&a, 1, 1 << 20, &o->max_seq_len, err);
        else if (qc_argp_is(&a, "--ref-prompt")) s = qc_argp_int(&a, 1, 1 << 20, &o->ref_prompt, err);
        else if (qc_argp_is(&a, "--ref-decode")) s = qc_argp_int(&a, 0, 1 << 20, &o->ref_decode, err);
        else if (qc_argp_is(&a, "--threads")) s = qc_argp_int(&a, 0, 1024, &o->threads, err);
        else if (qc_argp_is(&a, "--reps")) s = qc_argp_int(&a, 1, MAX_REPS, &o->reps, err);
        else if (qc_argp_is(&a, "--backends")) s = qc_argp_value(&a, &backends, err);
        else if (qc_argp_is(&a, "--backend")) {
            qc_runtime_spec rs;
            if (!(s = qc_argp_value(&a, &v, err)) && !(s = qc_registry_parse(v, 0, &rs, err))) {
                if (o->n_backends == MAX_BACKENDS)
                    s = qc_errf(err, QC_ERR_ARG, "--backend: at most %d backends", MAX_BACKENDS);
                else
                    snprintf(o->backends[o->n_backends++], sizeof o->backends[0], "%s", v);
                if (!s && rs.kind != QC_RT_BUILTIN) o->n_external++;
                if (!s) s = qc_registry_preflight(&rs, err);
            }
        }
        else if (qc_argp_is(&a, "--seed")) {
            if (!(s = qc_argp_value(&a, &v, err))) s = qc_cli_parse_long(v, "--seed", 0, 1L << 62, &o->seed, err);
        } else if (qc_argp_is(&a, "--json")) s = qc_argp_value(&a, &o->json, err);
        else if (qc_argp_is(&a, "--markdown")) s = qc_argp_value(&a, &o->markdown, err);
        else if (qc_argp_is(&a, "--svg")) s = qc_argp_value(&a, &o->svg, err);
        else if (qc_argp_is(&a, "--baseline")) s = qc_argp_value(&a, &o->baseline, err);
        else if (qc_argp_is(&a, "--max-memory")) {
            uint64_t bytes;
            if (!(s = qc_argp_value(&a, &o->max_memory, err)))
                s = qc_memplan_parse_size(o->max_memory, "--max-memory", &bytes, err);
        }
        else if (qc_argp_is(&a, "--max-regression")) {
            if (!(s = qc_argp_value(&a, &v, err))) {
                char *end = NULL;
                o->max_regression = strtod(v, &end);
                if (!end || *end || end == v || !(o->max_regression >= 0) || o->max_regression > 100)
                    s = qc_errf(err, QC_ERR_ARG, "--max-regression: '%s' is not a percentage in [0, 100]", v);
            }
        } else s = qc_argp_unknown(&a, err);
    }
    if (s) return s;
    if (!!o->model_dir == !!o->synthetic)
        return qc_errf(err, QC_ERR_ARG, "exactly one of --model DIR and --synthetic NAME is required");
    if (!o->static_prompt) o->static_prompt = o->prompt < 64 ? o->prompt : 64;
    if (!o->max_seq_len) o->max_seq_len = o->prompt;
    if (o->n_external && !o->model_dir)
        return qc_errf(err, QC_ERR_ARG, "--backend: a runtime under test loads the checkpoint "
                       "itself: use --model DIR (not --synthetic)");
    /* backends: --backend SPEC replaces the default list */
    if (o->n_backends) return QC_OK;
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", backends);
    for (char *save = NULL, *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "optimized") && strcmp(tok, "reference"))
            return qc_errf(err, QC_ERR_ARG, "--backends: unknown backend '%s' (optimized, reference)", tok);
        if (o->n_backends == MAX_BACKENDS) return qc_errf(err, QC_ERR_ARG, "--backends: too many");
        snprintf(o->backends[o->n_backends++], sizeof o->backends[0], "%s", tok);
    }
    if (!o->n_backends) return qc_errf(err, QC_ERR_ARG, "--backends: empty list");
    return QC_OK;
}

int qc_cmd_bench(int argc, char **argv) {
    qc_err err;
    qc_err_clear(&err);
    bench_opts o;
    int help = 0;
    if (parse_args(argc, argv, &o, &help, &err)) {
        fprintf(stderr, "%s: %s\n%s", PROG, err.msg, bench_usage);
        return QC_EXIT_ERROR;
    }
    if (help) {
        fputs(bench_usage, stdout);
        fputs(qc_outpath_help, stdout);
        return QC_EXIT_PASS;
    }
    /* every output valid, none an input (the model's files, the baseline) or another output */
    qc_outpath_reset();
    if (o.model_dir) qc_outpath_add_model_dir(o.model_dir, "--model");
    qc_outpath_add_input(o.baseline, "--baseline");
    qc_outpath_add_output(o.json, "--json", QC_OUT_TEXT);
    qc_outpath_add_output(o.markdown, "--markdown", QC_OUT_TEXT);
    qc_outpath_add_output(o.svg, "--svg", QC_OUT_TEXT);
    if (qc_outpath_verify(&err)) return qc_cli_fail(PROG, &err);

    /* ---- model ---- */
    static bench_report R;
    memset(&R, 0, sizeof R);
    qc_model *m = NULL;
    qc_status s;
    double t0 = now_s();
    if (o.synthetic) {
        qc_config cfg;
        if ((s = qc_config_preset(o.synthetic, &cfg, &err))) return qc_cli_fail(PROG, &err);
        /* refuse cleanly before building the weights: both backends, the longest run */
        int ctx = o.prompt + o.decode, mt = o.max_seq_len > o.prompt ? o.prompt : o.max_seq_len;
        qc_memplan_req rq;
        qc_memplan_req_init(&rq, &cfg, o.dtype, ctx, mt);
        qc_registry_memplan("all", &rq, NULL);
        rq.n_logit_rows = 1;
        if ((s = qc_memplan_enforce(&rq, o.max_memory, "memory", NULL, &err)))
            return qc_cli_fail(PROG, &err);
        fprintf(stderr, "%s: building synthetic %s (%s) ...\n", PROG, o.synthetic, qc_dtype_str(o.dtype));
        if ((s = qc_model_synthetic(&cfg, o.dtype, (uint64_t)o.seed, &m, &err))) return qc_cli_fail(PROG, &err);
        snprintf(R.model_name, sizeof R.model_name, "synthetic %s", o.synthetic);
    } else {
        if ((s = qc_model_load(o.model_dir, &m, &err))) return qc_cli_fail(PROG, &err);
        snprintf(R.model_name, sizeof R.model_name, "%s", o.model_dir);
    }
    fprintf(stderr, "%s: model ready in %.1f s (%.1f MB of weights)\n", PROG, now_s() - t0,
            qc_model_weight_bytes(m) / 1e6);
    const qc_config *c = &m->cfg;
    R.dtype = m->lm_head.dtype;
    if (o.prompt + o.decode > c->max_position_embeddings && c->max_position_embeddings > 0)
        fprintf(stderr, "%s: note: %d positions exceed max_position_embeddings %d\n", PROG,
                o.prompt + o.decode, c->max_position_embeddings);

    /* ---- machine ---- */
    cpu_model(R.cpu, sizeof R.cpu);
    R.cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    R.isa = qc_probe_isa();
    R.threads = o.threads > 0 ? o.threads : qc_probe_max_threads();
    time_t tt = time(NULL);
    struct tm tmv;
    gmtime_r(&tt, &tmv);
    strftime(R.date, sizeof R.date, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    const void *seg_p[4096];
    size_t seg_n[4096];
    double total = 0;
    int nseg = weight_segments(m, seg_p, seg_n, 4096, &total);
    R.bytes_per_token = total;
    R.flops_per_token = flops_per_token(m, o.prompt);
    R.static_prompt = o.static_prompt;
    R.prompt = o.prompt;
    R.decode = o.decode;
    R.max_seq_len = o.max_seq_len;
    R.ref_prompt = o.ref_prompt;
    R.ref_decode = o.ref_decode;

    /* ---- backends, states, prompts ---- */
    qc_backend *bes[MAX_BACKENDS] = {0};
    qc_state *sts[MAX_BACKENDS] = {0};
    int big = o.prompt > o.static_prompt ? o.prompt : o.static_prompt;
    int32_t *toks = malloc((size_t)(big + o.decode + o.ref_prompt + o.ref_decode + 8) * sizeof *toks);
    float *logits = malloc((size_t)c->vocab_size * sizeof *logits);
    if (!toks || !logits) {
        free(toks);
        free(logits);
        qc_model_free(m);
        qc_errf(&err, QC_ERR_OOM, "out of memory");
        return qc_cli_fail(PROG, &err);
    }
    make_prompt(toks, big + o.decode + o.ref_prompt + o.ref_decode + 8, c->vocab_size, (unsigned)o.seed);
    int rc = QC_EXIT_PASS;
    R.n_be = o.n_backends;
    for (int b = 0; b < o.n_backends && !rc; b++) {
        const int isref = !strcmp(o.backends[b], "reference");
        qc_backend_opts bo;
        qc_backend_opts_default(&bo);
        bo.n_threads = o.threads;
        bo.max_tokens = isref ? o.ref_prompt : (o.max_seq_len < o.prompt ? o.max_seq_len : o.prompt);
        int ctx = isref ? o.ref_prompt + o.ref_decode : big + o.decode;
        qc_runtime_spec rs;
        if ((s = qc_registry_parse(o.backends[b], 0, &rs, &err)) ||
            (s = qc_registry_create(&rs, o.model_dir, m, &bo, &bes[b], &err)) ||
            (s = qc_state_create(c, ctx, &sts[b], &err))) {
            rc = qc_cli_fail(PROG, &err);
            break;
        }
        bench_backend *bb = &R.be[b];
        snprintf(bb->name, sizeof bb->name, "%.127s", rs.name);
        snprintf(bb->desc, sizeof bb->desc, "%s", bes[b]->describe ? bes[b]->describe(bes[b]) : bes[b]->name);
        bb->m[0].tokens = isref ? o.ref_prompt : o.static_prompt;
        bb->m[1].tokens = isref ? o.ref_prompt : o.prompt;
        bb->m[2].tokens = isref ? o.ref_decode : o.decode;
    }

    /* ---- interleaved repetitions ---- */
    for (int rep = 0; rep < o.reps && !rc; rep++) {
        /* each probe sample is the best of 3 passes: a pass that lost its CPU to another
         * process says nothing about the machine's limit */
        R.bw[R.n_probe] = R.peak[R.n_probe] = 0;
        for (int pass = 0; pass < 3; pass++) {
            double bw = qc_probe_bandwidth_gbs(seg_p, seg_n, nseg, R.threads),
                   pk = qc_probe_fma_gflops(R.threads);
            if (bw > R.bw[R.n_probe]) R.bw[R.n_probe] = bw;
            if (pk > R.peak[R.n_probe]) R.peak[R.n_probe] = pk;
        }
        fprintf(stderr, "%s: rep %d/%d: bandwidth %.1f GB/s, FMA peak %.0f GFLOP/s\n", PROG, rep + 1, o.reps,
                R.bw[R.n_probe], R.peak[R.n_probe]);
        R.n_probe++;
        for (int b = 0; b < o.n_backends && !rc; b++) {
            const int isref = !strcmp(o.backends[b], "reference");
            bench_backend *bb = &R.be[b];
            double tps = 0, dtps = 0;
            /* static */
            s = run_one(bes[b], sts[b], QC_MODE_STATIC, toks, bb->m[0].tokens, 0, 0, &tps, NULL, logits, &err);
            if (!s) {
                bb->m[0].samples[bb->m[0].n++] = tps;
                fprintf(stderr, "%s: rep %d/%d: %-9s static  %5d tok: %9.2f tok/s\n", PROG, rep + 1, o.reps,
                        bb->name, bb->m[0].tokens, tps);
                /* dynamic + decode */
                int msl = isref ? o.ref_prompt : o.max_seq_len;
                s = run_one(bes[b], sts[b], QC_MODE_DYNAMIC, toks, bb->m[1].tokens, msl, bb->m[2].tokens, &tps,
                            &dtps, logits, &err);
            }
            if (s) {
                rc = qc_cli_fail(PROG, &err);
                break;
            }
            bb->m[1].samples[bb->m[1].n++] = tps;
            if (bb->m[2].tokens > 0) bb->m[2].samples[bb->m[2].n++] = dtps;
            fprintf(stderr, "%s: rep %d/%d: %-9s dynamic %5d tok: %9.2f tok/s; decode %d: %.2f tok/s\n", PROG,
                    rep + 1, o.reps, bb->name, bb->m[1].tokens, tps, bb->m[2].tokens, dtps);
        }
    }
    for (int b = 0; b < o.n_backends; b++) {
        qc_backend_destroy(bes[b]);
        qc_state_destroy(sts[b]);
    }
    free(toks);
    free(logits);
    if (rc) {
        qc_model_free(m);
        return rc;
    }

    /* ---- reports ---- */
    finish(&R);
    sbuf md = {0};
    markdown(&R, &o, &md);
    fwrite(md.p, 1, md.n, stdout);
    fflush(stdout);
    if (o.markdown && (s = qc_out_write_file(o.markdown, md.p, md.n, QC_OUT_TEXT, &err)))
        rc = qc_cli_fail(PROG, &err);
    free(md.p);
    if (!rc && o.json) {
        cJSON *j = json_report(&R, &o);
        char *txt = cJSON_Print(j);
        cJSON_Delete(j);
        if (!txt) {
            qc_errf(&err, QC_ERR_OOM, "%s: cannot render JSON", o.json);
            rc = qc_cli_fail(PROG, &err);
        } else {
            size_t n = strlen(txt);
            txt[n] = '\0';
            char *nl = malloc(n + 2);
            if (nl) {
                memcpy(nl, txt, n);
                nl[n] = '\n';
                if ((s = qc_out_write_file(o.json, nl, n + 1, QC_OUT_TEXT, &err)))
                    rc = qc_cli_fail(PROG, &err);
                free(nl);
            }
            free(txt);
        }
    }
    if (!rc && o.svg) {
        sbuf sv = {0};
        svg_chart(&R, &sv);
        if ((s = qc_out_write_file(o.svg, sv.p, sv.n, QC_OUT_TEXT, &err))) rc = qc_cli_fail(PROG, &err);
        free(sv.p);
    }
    if (!rc && o.baseline) {
        int g = compare_baseline(&R, &o, &err);
        if (g < 0) rc = qc_cli_fail(PROG, &err);
        else rc = g == 1 ? QC_EXIT_FAIL : g == 3 ? QC_EXIT_NOTHING : QC_EXIT_PASS;
    }
    qc_model_free(m);
    qc_outpath_reset();
    return rc;
}
