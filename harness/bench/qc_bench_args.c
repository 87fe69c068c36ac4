/* qc_bench_args.c — the command line of `qwen-conform bench`: the usage text, the lists
 * (--prompt / --depth / --threads "512,4096,16384"), backend specs (--backend repeatable and
 * a comma list), the gate and report options. See qc_bench_internal.h.
 */
#include "qc_bench_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_cli.h"
#include "qc/qc_memplan.h"
#include "qc_cli_common.h"
#include "qc_registry.h"

/* ===================================================================================== */
/* Usage                                                                                  */
/* ===================================================================================== */

const char bench_usage[] =
    "usage: qwen-conform bench --model DIR\n"
    "       | --synthetic 0.8b|2b|4b|9b|27b|35b-a3b|122b-a10b|397b-a17b|2.4t-a95b [--layers N]\n"
    "       [options]\n"
    "  --dtype bf16|f32|f16|q8_0 synthetic weight dtype (default bf16; q8_0: projections Q8_0, the rest BF16)\n"
    "  --prompt N[,N...]        dynamic prefill lengths, llama-bench pp N (default 512)\n"
    "  --depth D[,D...]         decode at these depths (positions already in the cache),\n"
    "                           llama-bench tg M @ d D (default: the first prompt length)\n"
    "  --static-prompt N        static prefill tokens, one call each (default min(prompt, 64))\n"
    "  --decode M               decode steps per decode figure (default 32)\n"
    "  --max-seq-len L          dynamic prefill chunk (default: the whole prompt in one call)\n"
    "  --ref-prompt N           reference backend prompt (default 8)\n"
    "  --ref-decode M           reference backend decode steps (default 2)\n"
    "  --threads T[,T...]       thread counts, each measured in turn (default: OpenMP default)\n"
    "  --reps R                 repetitions at least, interleaved (default 5)\n"
    "  --warmup W               unmeasured warm-up passes per thread count (default 1)\n"
    "  --min-time S             seconds measured per figure at least: more repetitions, up to\n"
    "                           64 (default 0.2)\n"
    "  --adapter-timeout S      seconds an exec / isolate / llamacpp runtime may take per\n"
    "                           request (default 60; a long prompt on a slow runtime needs more)\n"
    "  --backends LIST          comma list of built-in backends (default optimized,reference)\n"
    "  --backend SPEC[,SPEC...] add backends (repeatable; replaces the default list):\n"
    "                           reference, optimized, optimized,k=v[,k=v...] (its own\n"
    "                           options: gemm_min, par_min, bf16_dot=1),\n"
    "                           plugin:PATH.so[,k=v...], exec:\"CMD\",\n"
    "                           isolate:plugin:PATH.so, llamacpp[,k=v...] -- a runtime under\n"
    "                           test loads the checkpoint itself, so it needs --model DIR\n"
    "  --peer-json F.json       import a `llama-bench -o json` file as backend llama-bench,\n"
    "                           matched by test (pp N, tg N at depth D, threads)\n"
    "  --ratio-to NAME          every figure's ratio to backend NAME's (default: reference)\n"
    "  --seed S                 synthetic weights seed (default 1)\n"
    "  --layers N               synthetic preset truncated to its first N layers (real per-layer\n"
    "                           dimensions, layer pattern kept; for a model that does not fit)\n"
    "  --json F  --markdown F  --svg F   report files (written atomically; '-' = stdout)\n"
    "  --baseline F.json --max-regression PCT   exit 1 when a figure regressed by more than PCT%\n"
    "                           (default 10). Noise model (host load only ever slows a run\n"
    "                           down): a figure's location is its fastest run (a repetition\n"
    "                           repeats its run to --min-time / reps; single-thread\n"
    "                           repetitions pinned to each CPU in turn), bounded below by the\n"
    "                           upper-quartile repetition's fastest run; a regression when the\n"
    "                           new fastest < the baseline's bound x (1 - PCT/100). A suspect is\n"
    "                           re-measured once, twice the repetitions, samples pooled\n"
    "                           (--no-remeasure: not). Median and interval stay in the report.\n"
    "                           On shared vCPUs the fastest run itself moves up to ~1.4x with\n"
    "                           the load of the sibling vCPU: gate there with PCT >= 40\n"
    "  --profile-ops            also time the optimized backend per op class (projections,\n"
    "                           DeltaNet, attention, conv, norms, lm_head last / all rows) for\n"
    "                           the first prompt and decode, with % of the probes' limits\n"
    "  --max-memory SIZE        refuse (exit 2) when the planned memory (weights, backends,\n"
    "                           the KV cache at the longest context) exceeds SIZE\n"
    "                           (default: the machine's available memory)\n";

/* ===================================================================================== */
/* Lists                                                                                  */
/* ===================================================================================== */

int bench_list_max(const int *v, int n) {
    int m = 0;
    for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

/* "512,4096" -> v[], each in [lo, hi], no duplicates. */
static qc_status parse_list(const char *s, const char *flag, int lo, int hi, int *v, int *n,
                            qc_err *err) {
    *n = 0;
    const char *p = s;
    for (;;) {
        char *end = NULL;
        long x = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || x < lo || x > hi)
            return qc_errf(err, QC_ERR_ARG, "%s: '%s' is not a comma list of integers in [%d, %d]",
                           flag, s, lo, hi);
        for (int i = 0; i < *n; i++)
            if (v[i] == (int)x) return qc_errf(err, QC_ERR_ARG, "%s: %ld is listed twice", flag, x);
        if (*n == MAX_LIST) return qc_errf(err, QC_ERR_ARG, "%s: at most %d values", flag, MAX_LIST);
        v[(*n)++] = (int)x;
        if (!*end) return QC_OK;
        p = end + 1;
    }
}

/* Does a comma-separated piece start a new backend spec (rather than being a k=v option of
 * the previous plugin / llamacpp spec)? */
static int starts_spec(const char *p) {
    static const char *const kinds[] = {"plugin:", "exec:", "isolate:", "llamacpp"};
    const int nb = qc_registry_n_builtins(), nk = (int)(sizeof kinds / sizeof *kinds);
    for (int i = 0; i < nb + nk; i++) { /* the built-in names (the registry's table), then the kinds */
        const char *k = i < nb ? qc_registry_builtin(i)->name : kinds[i - nb];
        size_t n = strlen(k);
        if (!strncmp(p, k, n) && (k[n - 1] == ':' || p[n] == ',' || p[n] == '\0')) return 1;
    }
    return 0;
}

/* One --backend value: one spec, or several joined by commas ("optimized,llamacpp"). */
static qc_status add_backends(bench_opts *o, const char *v, qc_err *err) {
    char buf[2100];
    const char *p = v;
    while (*p) {
        /* the spec runs to the next comma that starts another spec */
        const char *q = p;
        for (;;) {
            const char *c = strchr(q, ',');
            if (!c || starts_spec(c + 1)) {
                q = c ? c : p + strlen(p);
                break;
            }
            q = c + 1;
        }
        size_t len = (size_t)(q - p);
        if (!len || len >= sizeof buf)
            return qc_errf(err, QC_ERR_ARG, "--backend: '%s': an empty or too long spec", v);
        memcpy(buf, p, len);
        buf[len] = '\0';
        qc_runtime_spec rs;
        qc_status s = qc_registry_parse(buf, 0, &rs, err);
        if (s) return s;
        if (o->n_backends == MAX_BACKENDS - 1)
            return qc_errf(err, QC_ERR_ARG, "--backend: at most %d backends", MAX_BACKENDS - 1);
        for (int i = 0; i < o->n_backends; i++)
            if (!strcmp(o->backends[i], buf))
                return qc_errf(err, QC_ERR_ARG, "--backend: '%s' is listed twice", buf);
        snprintf(o->backends[o->n_backends++], sizeof o->backends[0], "%s", buf);
        if (rs.kind != QC_RT_BUILTIN) o->n_external++;
        if ((s = qc_registry_preflight(&rs, err))) return s;
        p = *q ? q + 1 : q;
    }
    return QC_OK;
}

static qc_status parse_double(const char *v, const char *flag, double lo, double hi, double *out,
                              qc_err *err) {
    char *end = NULL;
    double x = strtod(v, &end);
    if (!end || *end || end == v || !(x >= lo) || x > hi)
        return qc_errf(err, QC_ERR_ARG, "%s: '%s' is not a number in [%g, %g]", flag, v, lo, hi);
    *out = x;
    return QC_OK;
}

/* ===================================================================================== */
/* The command line                                                                       */
/* ===================================================================================== */

static void defaults(bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->dtype = QC_BF16;
    o->prompts[0] = 512;
    o->n_prompts = 1;
    o->threads_list[0] = 0;
    o->n_threads = 1;
    o->decode = 32;
    o->ref_prompt = 8;
    o->ref_decode = 2;
    o->reps = 5;
    o->warmup = 1;
    o->min_time = 0.2;
    o->seed = 1;
    o->max_regression = 10.0;
}

/* One option at a (v: its value when it takes one). QC_OK, or the problem. */
static qc_status one_option(qc_argp *a, bench_opts *o, const char **backends, qc_err *err) {
    const char *v = NULL;
    qc_status s = QC_OK;
    if (qc_argp_is(a, "--model")) s = qc_argp_value(a, &o->model_dir, err);
    else if (qc_argp_is(a, "--synthetic")) s = qc_argp_value(a, &o->synthetic, err);
    else if (qc_argp_is(a, "--dtype")) {
        if (!(s = qc_argp_value(a, &v, err))) s = qc_dtype_parse(v, "--dtype", &o->dtype, err);
    } else if (qc_argp_is(a, "--prompt")) {
        if (!(s = qc_argp_value(a, &v, err)))
            s = parse_list(v, "--prompt", 1, 1 << 20, o->prompts, &o->n_prompts, err);
    } else if (qc_argp_is(a, "--depth")) {
        if (!(s = qc_argp_value(a, &v, err)))
            s = parse_list(v, "--depth", 0, 1 << 20, o->depths, &o->n_depths, err);
    } else if (qc_argp_is(a, "--threads")) {
        if (!(s = qc_argp_value(a, &v, err)))
            s = parse_list(v, "--threads", 0, 1024, o->threads_list, &o->n_threads, err);
    } else if (qc_argp_is(a, "--static-prompt")) s = qc_argp_int(a, 1, 1 << 20, &o->static_prompt, err);
    else if (qc_argp_is(a, "--decode")) s = qc_argp_int(a, 0, 1 << 20, &o->decode, err);
    else if (qc_argp_is(a, "--max-seq-len")) s = qc_argp_int(a, 1, 1 << 20, &o->max_seq_len, err);
    else if (qc_argp_is(a, "--ref-prompt")) s = qc_argp_int(a, 1, 1 << 20, &o->ref_prompt, err);
    else if (qc_argp_is(a, "--ref-decode")) s = qc_argp_int(a, 0, 1 << 20, &o->ref_decode, err);
    else if (qc_argp_is(a, "--reps")) s = qc_argp_int(a, 1, MAX_REPS, &o->reps, err);
    else if (qc_argp_is(a, "--warmup")) s = qc_argp_int(a, 0, 100, &o->warmup, err);
    else if (qc_argp_is(a, "--min-time")) {
        if (!(s = qc_argp_value(a, &v, err))) s = parse_double(v, "--min-time", 0, 3600, &o->min_time, err);
    } else if (qc_argp_is(a, "--adapter-timeout")) {
        if (!(s = qc_argp_value(a, &v, err)))
            s = parse_double(v, "--adapter-timeout", 1, 86400, &o->adapter_timeout, err);
    } else if (qc_argp_is(a, "--backends")) s = qc_argp_value(a, backends, err);
    else if (qc_argp_is(a, "--backend")) {
        if (!(s = qc_argp_value(a, &v, err))) s = add_backends(o, v, err);
    } else if (qc_argp_is(a, "--seed")) {
        if (!(s = qc_argp_value(a, &v, err))) s = qc_cli_parse_long(v, "--seed", 0, 1L << 62, &o->seed, err);
    } else if (qc_argp_is(a, "--layers")) s = qc_argp_int(a, 1, QC_MAX_LAYERS, &o->layers, err);
    else if (qc_argp_is(a, "--json")) s = qc_argp_value(a, &o->json, err);
    else if (qc_argp_is(a, "--markdown")) s = qc_argp_value(a, &o->markdown, err);
    else if (qc_argp_is(a, "--svg")) s = qc_argp_value(a, &o->svg, err);
    else if (qc_argp_is(a, "--baseline")) s = qc_argp_value(a, &o->baseline, err);
    else if (qc_argp_is(a, "--peer-json")) s = qc_argp_value(a, &o->peer_json, err);
    else if (qc_argp_is(a, "--ratio-to")) s = qc_argp_value(a, &o->ratio_to, err);
    else if (qc_argp_is(a, "--no-remeasure")) o->no_remeasure = 1;
    else if (qc_argp_is(a, "--profile-ops")) o->profile_ops = 1;
    else if (qc_argp_is(a, "--max-memory")) {
        uint64_t bytes;
        if (!(s = qc_argp_value(a, &o->max_memory, err)))
            s = qc_memplan_parse_size(o->max_memory, "--max-memory", &bytes, err);
    } else if (qc_argp_is(a, "--max-regression")) {
        if (!(s = qc_argp_value(a, &v, err))) {
            s = parse_double(v, "--max-regression", 0, 100, &o->max_regression, err);
            if (s) s = qc_errf(err, QC_ERR_ARG, "--max-regression: '%s' is not a percentage in [0, 100]", v);
        }
    } else s = qc_argp_unknown(a, err);
    return s;
}

/* The default backend list (--backends, built-ins only) when no --backend was given. */
static qc_status builtin_list(bench_opts *o, const char *backends, qc_err *err) {
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", backends);
    for (char *save = NULL, *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!qc_registry_is_builtin(tok)) {
            char known[160] = "";
            for (int i = 0, o2 = 0; i < qc_registry_n_builtins() && o2 < (int)sizeof known; i++)
                o2 += snprintf(known + o2, sizeof known - (size_t)o2, "%s%s", i ? ", " : "",
                               qc_registry_builtin(i)->name);
            return qc_errf(err, QC_ERR_ARG, "--backends: unknown backend '%s' (%s)", tok, known);
        }
        if (o->n_backends == MAX_BACKENDS - 1) return qc_errf(err, QC_ERR_ARG, "--backends: too many");
        snprintf(o->backends[o->n_backends++], sizeof o->backends[0], "%s", tok);
    }
    if (!o->n_backends) return qc_errf(err, QC_ERR_ARG, "--backends: empty list");
    return QC_OK;
}

qc_status bench_parse_args(int argc, char **argv, bench_opts *o, int *help, qc_err *err) {
    defaults(o);
    const char *backends = "optimized,reference";
    qc_argp a;
    qc_argp_init(&a, PROG, argc, argv);
    qc_status s = QC_OK;
    while (!s && qc_argp_next(&a)) {
        if (qc_argp_is(&a, "--help") || qc_argp_is(&a, "-h")) {
            *help = 1;
            return QC_OK;
        }
        s = one_option(&a, o, &backends, err);
    }
    if (s) return s;
    if (!!o->model_dir == !!o->synthetic)
        return qc_errf(err, QC_ERR_ARG, "exactly one of --model DIR and --synthetic NAME is required");
    if (o->layers && !o->synthetic)
        return qc_errf(err, QC_ERR_ARG, "--layers: only with --synthetic (a checkpoint has its own layers)");
    if (!o->static_prompt) o->static_prompt = o->prompts[0] < 64 ? o->prompts[0] : 64;
    if (!o->n_depths) {
        o->depths[0] = o->prompts[0];
        o->n_depths = 1;
    }
    if (o->n_external && !o->model_dir)
        return qc_errf(err, QC_ERR_ARG, "--backend: a runtime under test loads the checkpoint "
                       "itself: use --model DIR (not --synthetic)");
    if (!o->n_backends && (s = builtin_list(o, backends, err))) return s;
    if (o->ratio_to) {
        int found = o->peer_json && !strcmp(o->ratio_to, "llama-bench");
        for (int i = 0; i < o->n_backends && !found; i++) {
            qc_runtime_spec rs;
            if (!qc_registry_parse(o->backends[i], 0, &rs, err) && !strcmp(rs.name, o->ratio_to)) found = 1;
        }
        if (!found)
            return qc_errf(err, QC_ERR_ARG, "--ratio-to: '%s' is not one of this run's backends%s",
                           o->ratio_to, o->peer_json ? " (or llama-bench, the --peer-json import)" : "");
    }
    return QC_OK;
}
