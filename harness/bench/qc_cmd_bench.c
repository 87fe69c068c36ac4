/* qc_cmd_bench.c — `qwen-conform bench`: the performance comparison report.
 *
 *   qwen-conform bench --model DIR
 *                      | --synthetic 0.8b|2b|4b|9b|27b|35b-a3b|122b-a10b|397b-a17b|2.4t-a95b
 *       [--layers N] [--dtype bf16|f32|f16|q8_0]
 *       [--prompt N,...] [--depth D,...] [--threads T,...] [--static-prompt N] [--decode M]
 *       [--max-seq-len L] [--ref-prompt N] [--ref-decode M] [--reps R] [--warmup W]
 *       [--min-time S] [--backends optimized,reference] [--backend SPEC[,SPEC...]]...
 *       [--peer-json llama-bench.json] [--ratio-to NAME] [--seed S]
 *       [--json F] [--markdown F] [--svg F] [--baseline old.json --max-regression PCT]
 *
 * For each thread count, backend and repetition (runs interleaved: rep 1 of every backend and
 * figure, then rep 2, ...; so ratios come from one run under the same machine load) it
 * measures, in tokens/s, llama-bench style:
 *   static  : prefill of the static prompt, one [1,1] call per token (ExecuTorch static shape)
 *   dynamic : prefill of each --prompt length, one call per max_seq_len chunk (pp N)
 *   decode  : M single-token steps at each --depth (tg M @ d D: the depth prefilled first)
 * after a warm-up pass, and in the same run two machine probes on the figure's threads (best
 * of 3 passes per repetition): a streaming read over the model's weight bytes (memory
 * bandwidth) and an FMA loop (FP32 FMA peak). Each figure gets median, min / max, MAD and a
 * bootstrap 95 % interval of the median, its ratio to the --ratio-to backend (default: the
 * reference backend when present) and how far it is from its limit (static / decode vs weight
 * bytes per token / bandwidth; dynamic vs model flops per token / FMA peak). --peer-json adds
 * the matching tests of a llama-bench -o json file as backend "llama-bench". The reference
 * backend is slow, so it runs a shorter prompt and fewer decode steps (--ref-prompt /
 * --ref-decode, stated in the report). The memory plan (weights, backends, the states / KV
 * cache at the longest context) refuses a run that will not fit before allocating it.
 *
 * Outputs: a Markdown table on stdout (and --markdown F), JSON (--json F: schema_version,
 * machine, ISA, threads, commit, date, config, probes, raw samples, warnings, gate) and an SVG
 * bar chart (--svg F), each written through qc_outpath (temp file + fsync + rename; "-",
 * devices and FIFOs directly), validated before the run and refused when one is an input (a
 * model file, the baseline, the peer file) or another output. Progress goes to stderr.
 * --baseline old.json compares every figure present in both (same backend, model, dtype,
 * mode, tokens, depth, threads) with a noise model (qc_bench_gate.c: the fastest run of each
 * figure, robust to host load): a suspected regression is re-measured once (twice the
 * repetitions, pooled); a confirmed one exits 1; no common figure exits 3. The verdict and the
 * warnings are in every report.
 *
 * This file holds the command's steps; the rest lives beside it (qc_bench_internal.h).
 */
#include "qc_bench_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_cli.h"
#include "qc/qc_memplan.h"
#include "qc/qc_config.h"
#include "qc_cli_common.h"
#include "qc_outpath.h"
#include "qc_registry.h"

/* ===================================================================================== */
/* Steps                                                                                  */
/* ===================================================================================== */

/* Register the run's files: every output valid, none an input (the model's files, the
 * baseline, the peer file) or another output. QC_OK or the problem. */
static qc_status register_files(const bench_opts *o, qc_err *err) {
    qc_outpath_reset();
    if (o->model_dir) qc_outpath_add_model_dir(o->model_dir, "--model");
    qc_outpath_add_input(o->baseline, "--baseline");
    qc_outpath_add_input(o->peer_json, "--peer-json");
    qc_outpath_add_output(o->json, "--json", QC_OUT_TEXT);
    qc_outpath_add_output(o->markdown, "--markdown", QC_OUT_TEXT);
    qc_outpath_add_output(o->svg, "--svg", QC_OUT_TEXT);
    return qc_outpath_verify(err);
}

/* The memory the run will hold at once: the weights (weight_bytes 0: from cfg + dtype), every
 * built-in backend's scratch for the longest chunk at the largest thread count, one state per
 * backend at the longest context (the KV cache of the full-attention layers grows with it).
 * QC_OK, or QC_ERR_OOM naming the numbers. */
static qc_status plan_memory(const bench_opts *o, const qc_config *cfg, qc_dtype dtype,
                             uint64_t weight_bytes, qc_err *err) {
    int longest = bench_list_max(o->prompts, o->n_prompts), d = bench_list_max(o->depths, o->n_depths);
    longest = d > longest ? d : longest;
    int ctx = longest + o->decode > o->static_prompt ? longest + o->decode : o->static_prompt;
    int mt = o->max_seq_len && o->max_seq_len < longest ? o->max_seq_len : longest;
    qc_memplan_req rq;
    /* the reference is opened for --ref-prompt tokens, the others for mt (open_backends) */
    qc_memplan_req_init(&rq, cfg, dtype, ctx, mt > o->ref_prompt ? mt : o->ref_prompt);
    rq.weight_bytes = weight_bytes;
    /* every thread count the run opens the backends with (0: the OpenMP default, which the
     * backends resolve themselves): each backend's term is its largest one */
    qc_status s = QC_OK;
    for (int ti = 0; ti < (o->n_threads > 0 ? o->n_threads : 1) && !s; ti++) {
        qc_memplan_req one = rq;
        one.n_threads = o->n_threads > 0 ? o->threads_list[ti] : 0;
        if ((s = qc_registry_memplan("all", &one, err))) break;
        if (ti == 0) rq.n_backends = one.n_backends;
        for (int b = 0; b < one.n_backends; b++)
            if (ti == 0 || one.backend_bytes[b] > rq.backend_bytes[b])
                rq.backend_bytes[b] = one.backend_bytes[b];
        if (ti == 0 || one.n_threads == 0) rq.n_threads = one.n_threads;
    }
    if (s) return s;
    rq.n_logit_rows = 1;
    rq.n_state_copies = o->n_backends > 1 ? o->n_backends - 1 : 0;
    char what[192];
    snprintf(what, sizeof what, "bench at a context of %d positions (longest prompt / depth %d + "
             "decode %d; %d backend state%s)", ctx, longest, o->decode, o->n_backends,
             o->n_backends == 1 ? "" : "s");
    qc_memplan plan;
    if ((s = qc_memplan_enforce(&rq, o->max_memory, what, &plan, err))) {
        if (s == QC_ERR_OOM && o->synthetic) bench_moe_refusal_hint(&rq, "all", o->max_memory, err);
        return s;
    }
    char buf[256];
    fprintf(stderr, "%s: memory plan at %d positions: %s\n", PROG, ctx, qc_memplan_str(&plan, buf, sizeof buf));
    return QC_OK;
}

/* The model: a synthetic preset (refused before its weights are built when the planned memory
 * exceeds --max-memory) or --model DIR (planned once mapped, before any backend or state);
 * its name and dtype into R. QC_OK or the problem. */
static qc_status load_model(const bench_opts *o, bench_report *R, qc_model **mp, qc_err *err) {
    qc_model *m = NULL;
    qc_status s;
    double t0 = bench_now_s();
    if (o->synthetic) {
        qc_config cfg;
        if ((s = qc_config_preset(o->synthetic, &cfg, err))) return s;
        /* --layers N: the real per-layer dims, N layers (qc_bench_moe.c) */
        if ((s = bench_moe_truncate(o->synthetic, o->layers, &cfg, &R->wt.layers_full, err)))
            return s;
        if ((s = plan_memory(o, &cfg, o->dtype, 0, err))) return s;
        fprintf(stderr, "%s: building synthetic %s (%s) ...\n", PROG, o->synthetic,
                qc_dtype_str(o->dtype));
        if ((s = qc_model_synthetic(&cfg, o->dtype, (uint64_t)o->seed, &m, err))) return s;
        if (cfg.n_layers < R->wt.layers_full)
            snprintf(R->model_name, sizeof R->model_name, "synthetic %s (TRUNCATED: %d of %d layers)",
                     o->synthetic, cfg.n_layers, R->wt.layers_full);
        else
            snprintf(R->model_name, sizeof R->model_name, "synthetic %s", o->synthetic);
    } else {
        if ((s = qc_model_load(o->model_dir, &m, err))) return s;
        if ((s = plan_memory(o, &m->cfg, m->lm_head.dtype, qc_model_weight_bytes(m), err))) {
            qc_model_free(m);
            return s;
        }
        snprintf(R->model_name, sizeof R->model_name, "%s", o->model_dir);
    }
    fprintf(stderr, "%s: model ready in %.1f s (%.1f MB of weights)\n", PROG,
            bench_now_s() - t0, qc_model_weight_bytes(m) / 1e6);
    const qc_config *c = &m->cfg;
    /* the run's weight type: a projection's (a Q8_0 model keeps its tied embedding BF16) */
    R->dtype = m->cfg.n_layers > 0 && m->layers[0].out_proj.data ? m->layers[0].out_proj.dtype
               : m->cfg.n_layers > 0 && m->layers[0].o_proj.data ? m->layers[0].o_proj.dtype
                                                                  : m->lm_head.dtype;
    int longest = bench_list_max(o->prompts, o->n_prompts), d = bench_list_max(o->depths, o->n_depths);
    longest = (d > longest ? d : longest) + o->decode;
    if (longest > c->max_position_embeddings && c->max_position_embeddings > 0)
        fprintf(stderr, "%s: note: %d positions exceed max_position_embeddings %d\n", PROG, longest,
                c->max_position_embeddings);
    *mp = m;
    return QC_OK;
}

/* Measure, gate (a suspected regression re-measured once), finish. Exit code. */
static int measure_and_gate(const bench_opts *o, qc_model *m, bench_report *R, bench_run *run,
                            qc_err *err) {
    int rc = bench_measure_all(o, m, R, run, err);
    if (rc) return rc;
    bench_finish(R, o);
    int suspects = 0;
    if ((rc = bench_gate(o, R, &suspects, err))) return rc;
    if (suspects && !o->no_remeasure) {
        fprintf(stderr, "%s: %d suspected regression%s against %s: re-measuring once\n", PROG,
                suspects, suspects == 1 ? "" : "s", o->baseline);
        if ((rc = bench_remeasure(o, m, R, run, err))) return rc;
        bench_finish(R, o);
        if ((rc = bench_gate(o, R, &suspects, err))) return rc;
        R->gate_remeasured = 1;
    }
    bench_gate_print(o, R);
    return QC_EXIT_PASS;
}

int qc_cmd_bench(int argc, char **argv) {
    qc_err err;
    qc_err_clear(&err);
    static bench_opts o;
    int help = 0;
    if (bench_parse_args(argc, argv, &o, &help, &err)) {
        fprintf(stderr, "%s: %s\n%s", PROG, err.msg, bench_usage);
        return QC_EXIT_ERROR;
    }
    if (help) {
        fputs(bench_usage, stdout);
        fputs(qc_outpath_help, stdout);
        return QC_EXIT_PASS;
    }
    if (register_files(&o, &err)) return qc_cli_fail(PROG, &err);

    /* ---- model, machine, figures, peer ---- */
    static bench_report R;
    static bench_run run;
    memset(&R, 0, sizeof R);
    memset(&run, 0, sizeof run);
    qc_model *m = NULL;
    if (load_model(&o, &R, &m, &err)) return qc_cli_fail(PROG, &err);
    bench_machine(&o, m, &R, &run);
    bench_moe_fill(m, R.wt.layers_full, R.dtype, &R.wt); /* total vs active weight bytes */
    int rc = bench_name_backends(&o, &R, &err);
    if (!rc) rc = bench_import_peer(&o, &R, &err);
    if (!rc && bench_alloc_prompts(&o, m, &run)) {
        qc_errf(&err, QC_ERR_OOM, "out of memory");
        rc = qc_cli_fail(PROG, &err);
    }

    /* ---- interleaved repetitions, the gate, the reports ---- */
    if (!rc) rc = measure_and_gate(&o, m, &R, &run, &err);
    if (!rc && o.profile_ops) rc = bench_profile_ops(&o, m, &R, &err); /* qc_bench_profile.c */
    bench_close(&run);
    if (!rc) rc = bench_write_reports(&R, &o, &err);
    if (!rc) rc = bench_gate_exit(&R);
    qc_model_free(m);
    qc_outpath_reset();
    return rc;
}
