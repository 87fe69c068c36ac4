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
 * Outputs: a Markdown table on stdout (and --markdown F), JSON (--json F: schema_version,
 * machine, ISA, threads, commit, date, config, probes, raw samples; a --baseline of another
 * schema_version is refused, one without it is read as version 1) and an SVG bar chart (--svg F), each
 * written through qc_outpath (temp file + fsync + rename; "-", devices and FIFOs directly),
 * validated before the run and refused when one is an input (a model file, the baseline) or
 * another output. Progress goes to stderr. --baseline old.json compares
 * every metric present in both (same backend, model, dtype, mode, tokens): a median slower than
 * the baseline's by more than PCT percent (default 10) exits 1; no common metric exits 3.
 *
 * This file holds the command line and its steps; the measuring and the reports live beside
 * it (qc_bench_internal.h names them).
 */
#include "qc_bench_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "qc_cli.h"
#include "qc/qc_memplan.h"
#include "qc/qc_config.h"
#include "qc_cli_common.h"
#include "qc_outpath.h"
#include "qc_registry.h"

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

/* Register the run's files: every output valid, none an input (the model's files, the
 * baseline) or another output. QC_OK or the problem. */
static qc_status register_files(const bench_opts *o, qc_err *err) {
    qc_outpath_reset();
    if (o->model_dir) qc_outpath_add_model_dir(o->model_dir, "--model");
    qc_outpath_add_input(o->baseline, "--baseline");
    qc_outpath_add_output(o->json, "--json", QC_OUT_TEXT);
    qc_outpath_add_output(o->markdown, "--markdown", QC_OUT_TEXT);
    qc_outpath_add_output(o->svg, "--svg", QC_OUT_TEXT);
    return qc_outpath_verify(err);
}

/* The model: a synthetic preset (refused before its weights are built when the planned memory
 * exceeds --max-memory) or --model DIR; its name and dtype into R. QC_OK or the problem. */
static qc_status load_model(const bench_opts *o, bench_report *R, qc_model **mp, qc_err *err) {
    qc_model *m = NULL;
    qc_status s;
    double t0 = bench_now_s();
    if (o->synthetic) {
        qc_config cfg;
        if ((s = qc_config_preset(o->synthetic, &cfg, err))) return s;
        /* refuse cleanly before building the weights: both backends, the longest run */
        int ctx = o->prompt + o->decode,
            mt = o->max_seq_len > o->prompt ? o->prompt : o->max_seq_len;
        qc_memplan_req rq;
        qc_memplan_req_init(&rq, &cfg, o->dtype, ctx, mt);
        qc_registry_memplan("all", &rq, NULL);
        rq.n_logit_rows = 1;
        if ((s = qc_memplan_enforce(&rq, o->max_memory, "memory", NULL, err))) return s;
        fprintf(stderr, "%s: building synthetic %s (%s) ...\n", PROG, o->synthetic,
                qc_dtype_str(o->dtype));
        if ((s = qc_model_synthetic(&cfg, o->dtype, (uint64_t)o->seed, &m, err))) return s;
        snprintf(R->model_name, sizeof R->model_name, "synthetic %s", o->synthetic);
    } else {
        if ((s = qc_model_load(o->model_dir, &m, err))) return s;
        snprintf(R->model_name, sizeof R->model_name, "%s", o->model_dir);
    }
    fprintf(stderr, "%s: model ready in %.1f s (%.1f MB of weights)\n", PROG,
            bench_now_s() - t0, qc_model_weight_bytes(m) / 1e6);
    const qc_config *c = &m->cfg;
    R->dtype = m->lm_head.dtype;
    if (o->prompt + o->decode > c->max_position_embeddings && c->max_position_embeddings > 0)
        fprintf(stderr, "%s: note: %d positions exceed max_position_embeddings %d\n", PROG,
                o->prompt + o->decode, c->max_position_embeddings);
    *mp = m;
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
    if (register_files(&o, &err)) return qc_cli_fail(PROG, &err);

    /* ---- model, machine ---- */
    static bench_report R;
    static bench_run run;
    memset(&R, 0, sizeof R);
    memset(&run, 0, sizeof run);
    qc_model *m = NULL;
    if (load_model(&o, &R, &m, &err)) return qc_cli_fail(PROG, &err);
    bench_machine(&o, m, &R, &run);

    /* ---- prompts, backends, interleaved repetitions ---- */
    if (bench_alloc_prompts(&o, m, &run)) {
        qc_model_free(m);
        qc_errf(&err, QC_ERR_OOM, "out of memory");
        return qc_cli_fail(PROG, &err);
    }
    int rc = bench_open_backends(&o, m, &R, &run, &err);
    if (!rc) rc = bench_run_reps(&o, &R, &run, &err);
    bench_close(&o, &run);
    if (rc) {
        qc_model_free(m);
        return rc;
    }

    /* ---- reports ---- */
    rc = bench_write_reports(&R, &o, &err);
    qc_model_free(m);
    qc_outpath_reset();
    return rc;
}
