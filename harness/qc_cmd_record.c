/* qc_cmd_record.c — `qwen-conform record`: run one case through a C backend and write it as a
 * schema-v1 golden file, so that any runtime's output can be diffed against any other.
 *
 *   qwen-conform record --model DIR (--tokens 1,2,3 | --tokens-file F) [--decode N]
 *       [--history 1,2,3 | --history-file F]   (a continuation: replayed at positions 0..P-1)
 *       [--backend reference|optimized] [--threads T] [--dn-kernel chunked|recurrent]
 *       [--chunk-size N] [--case NAME] [--description TEXT] [--max-memory SIZE] [--no-hidden]
 *       [--profile F.json] [--static|--dynamic] [--no-kv-cache] [--max-seq-len N]
 *       [--max-context-len N] --out F.h5 [--force]
 *
 * Every error is one line "qwen-conform record: <file or flag>: <field>: ..." and exit code 2;
 * the output is written to a temp file and renamed (qc_outpath), so a failure never leaves a
 * partial file. Before any work the output is validated and refused when it is an input (a
 * model file, the tokens / history file, the profile) or, without --force, an existing file.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qc/qc_backend.h"
#include "qc/qc_memplan.h"
#include "qc/qc_model.h"
#include "qc/qc_prefill.h"
#include "qc/qc_sha256.h"
#include "qc_cli.h"
#include "qc_cli_common.h"
#include "qc_golden.h"
#include "qc_outpath.h"
#include "qc_registry.h"
#include "qc_runcase.h"

#ifndef QC_VERSION
#define QC_VERSION "0.0.0"
#endif

static const char *PROG = "qwen-conform record";

static void record_usage(FILE *f) {
    fprintf(f,
            "usage: qwen-conform record --model DIR (--tokens 1,2,3 | --tokens-file F) --out F.h5\n"
            "       qwen-conform record --synthetic 0.8b|2b|4b|9b [--dtype bf16|f32|f16] [--seed S] ...\n"
            "                                   (real Qwen3.5 dimensions, seeded random weights made\n"
            "                                   in memory; model_path \"synthetic:...\" in the output)\n"
            "         [--decode N]              greedy decode steps after the prompt (default 0)\n"
            "         [--decode-tokens 1,2,3]   teacher-forced decode: feed these tokens instead\n"
            "                                   of the greedy choices (sets N; e.g. a golden's\n"
            "                                   decode/tokens, for `qwen-conform diff`)\n"
            "         [--history 1,2,3 | --history-file F]  tokens already consumed at positions\n"
            "                                   0..P-1 (the case then starts at start_pos P)\n"
            "         [--backend reference|optimized] [--threads T]\n"
            "         [--dn-kernel chunked|recurrent] [--chunk-size N]\n"
            "         [--case NAME] [--description TEXT] [--max-memory SIZE]\n"
            "         [--no-hidden]             skip prefill/hidden (backends without a trace hook)\n"
            "         [--profile F.json] [--static | --dynamic] [--no-kv-cache]\n"
            "         [--max-seq-len N] [--max-context-len N]\n"
            "         [--force]                 replace an existing --out file (without it an\n"
            "                                   existing file, e.g. a golden, is refused)\n"
            "Writes a golden (HDF5 schema v1): the prompt's logits at every position, per-layer\n"
            "hidden states, the state after prefill, N greedy decode steps and the state after\n"
            "them. max_context_len defaults to prompt + decode when neither the flags nor the\n"
            "profile set it.\n%s", qc_outpath_help);
}

/* Parsed command line. */
typedef struct {
    const char *model;       /* --model DIR */
    const char *synthetic;   /* --synthetic 0.8b|2b|4b|9b (instead of --model), or NULL */
    const char *dtype;       /* --dtype bf16|f32|f16 for --synthetic (default bf16) */
    long seed;               /* --seed for --synthetic (default 1) */
    const char *tokens;      /* --tokens list, or NULL */
    const char *tokens_file; /* --tokens-file F, or NULL */
    const char *history;     /* --history list, or NULL */
    const char *history_file; /* --history-file F, or NULL */
    const char *decode_tokens; /* --decode-tokens list (teacher-forced decode), or NULL */
    const char *out;         /* --out F.h5 */
    const char *backend;     /* --backend (default "reference") */
    const char *case_name;   /* --case (default "case0") */
    const char *description; /* --description, or NULL */
    const char *max_memory;  /* --max-memory SIZE, or NULL (machine's available memory) */
    int n_decode;            /* --decode N */
    int threads;             /* --threads T (0 = OpenMP default) */
    int chunk_size;          /* --chunk-size N (0 = backend default) */
    int dn_kernel;           /* -1 default, else qc_dn_kernel */
    int no_hidden;           /* --no-hidden: do not capture prefill/hidden */
    int force;               /* --force: an existing --out may be replaced */
    qc_cli_profile pf;       /* profile flags */
} record_args;

static qc_status parse_args(int argc, char **argv, record_args *a, int *help, qc_err *err) {
    memset(a, 0, sizeof *a);
    a->backend = "reference";
    a->case_name = "case0";
    a->dn_kernel = -1;
    a->dtype = "bf16";
    a->seed = 1;
    qc_cli_profile_init(&a->pf);
    qc_argp p;
    qc_argp_init(&p, PROG, argc, argv);
    qc_status st = QC_OK;
    while (st == QC_OK && qc_argp_next(&p)) {
        if (qc_cli_profile_flag(&p, &a->pf, &st, err)) continue;
        if (qc_argp_is(&p, "--help") || qc_argp_is(&p, "-h")) {
            *help = 1;
            return QC_OK;
        } else if (qc_argp_is(&p, "--model")) {
            st = qc_argp_value(&p, &a->model, err);
        } else if (qc_argp_is(&p, "--synthetic")) {
            st = qc_argp_value(&p, &a->synthetic, err);
        } else if (qc_argp_is(&p, "--dtype")) {
            st = qc_argp_value(&p, &a->dtype, err);
        } else if (qc_argp_is(&p, "--seed")) {
            int sd = 0;
            st = qc_argp_int(&p, 0, 1 << 30, &sd, err);
            a->seed = sd;
        } else if (qc_argp_is(&p, "--tokens")) {
            st = qc_argp_value(&p, &a->tokens, err);
        } else if (qc_argp_is(&p, "--tokens-file")) {
            st = qc_argp_value(&p, &a->tokens_file, err);
        } else if (qc_argp_is(&p, "--history")) {
            st = qc_argp_value(&p, &a->history, err);
        } else if (qc_argp_is(&p, "--decode-tokens")) {
            st = qc_argp_value(&p, &a->decode_tokens, err);
        } else if (qc_argp_is(&p, "--history-file")) {
            st = qc_argp_value(&p, &a->history_file, err);
        } else if (qc_argp_is(&p, "--out")) {
            st = qc_argp_value(&p, &a->out, err);
        } else if (qc_argp_is(&p, "--backend")) {
            st = qc_argp_value(&p, &a->backend, err);
            if (!st && strcmp(a->backend, "reference") && strcmp(a->backend, "optimized"))
                st = qc_errf(err, QC_ERR_ARG,
                             "--backend: '%s' is not a backend (reference or optimized)",
                             a->backend);
        } else if (qc_argp_is(&p, "--case")) {
            st = qc_argp_value(&p, &a->case_name, err);
        } else if (qc_argp_is(&p, "--description")) {
            st = qc_argp_value(&p, &a->description, err);
        } else if (qc_argp_is(&p, "--max-memory")) {
            st = qc_argp_value(&p, &a->max_memory, err);
        } else if (qc_argp_is(&p, "--no-hidden")) {
            st = qc_argp_bool(&p, err);
            a->no_hidden = 1;
        } else if (qc_argp_is(&p, "--force")) {
            st = qc_argp_bool(&p, err);
            a->force = 1;
        } else if (qc_argp_is(&p, "--decode")) {
            st = qc_argp_int(&p, 0, 1 << 24, &a->n_decode, err);
        } else if (qc_argp_is(&p, "--threads")) {
            st = qc_argp_int(&p, 0, 4096, &a->threads, err);
        } else if (qc_argp_is(&p, "--chunk-size")) {
            st = qc_argp_int(&p, 1, 1 << 20, &a->chunk_size, err);
        } else if (qc_argp_is(&p, "--dn-kernel")) {
            const char *k = NULL;
            st = qc_argp_value(&p, &k, err);
            if (!st) {
                if (strcmp(k, "chunked") == 0)
                    a->dn_kernel = QC_DN_CHUNKED;
                else if (strcmp(k, "recurrent") == 0)
                    a->dn_kernel = QC_DN_RECURRENT;
                else
                    st = qc_errf(err, QC_ERR_ARG,
                                 "--dn-kernel: '%s' is not a kernel (chunked or recurrent)", k);
            }
        } else {
            st = qc_argp_unknown(&p, err);
        }
    }
    if (st) return st;
    if (!a->model == !a->synthetic)
        return qc_errf(err, QC_ERR_ARG,
                       "--model: give exactly one of --model DIR and --synthetic 0.8b|2b|4b|9b");
    if (!a->tokens == !a->tokens_file)
        return qc_errf(err, QC_ERR_ARG, "--tokens: give exactly one of --tokens and --tokens-file");
    if (a->history && a->history_file)
        return qc_errf(err, QC_ERR_ARG, "--history: give at most one of --history and --history-file");
    if (!a->out) return qc_errf(err, QC_ERR_ARG, "--out: required (the golden .h5 to write)");
    size_t cl = strlen(a->case_name);
    int ok = cl > 0 && cl < 64;
    for (size_t i = 0; ok && i < cl; i++) {
        char ch = a->case_name[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             ch == '_' || ch == '-';
    }
    if (!ok)
        return qc_errf(err, QC_ERR_ARG, "--case: '%s' is not a case name ([A-Za-z0-9_-]+, < 64)",
                       a->case_name);
    return QC_OK;
}

/* The model's config.json text, exactly as stored (for the config_json attribute). */
static qc_status read_config_text(const qc_model *m, char **text, qc_err *err) {
    char path[1200];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/config.json", m->dir);
    return qc_cli_read_file(path, text, &len, err);
}

int qc_cmd_record(int argc, char **argv) {
    qc_err err;
    qc_err_clear(&err);
    record_args a;
    int help = 0;
    qc_status st = parse_args(argc, argv, &a, &help, &err);
    if (help) {
        record_usage(stdout);
        return QC_EXIT_PASS;
    }
    if (st) {
        int rc = qc_cli_fail(PROG, &err);
        fprintf(stderr, "(run 'qwen-conform record --help' for usage)\n");
        return rc;
    }

    int32_t *tokens = NULL, *history = NULL, *forced = NULL;
    int n_tokens = 0, n_history = 0, n_forced = 0;
    qc_model *model = NULL;
    qc_backend *be = NULL;
    char *config_text = NULL;
    qc_golden_case gc;
    memset(&gc, 0, sizeof gc);
    int have_case = 0;
    const char *tok_src = a.tokens_file ? a.tokens_file : "--tokens";
    const char *hist_src = a.history_file ? a.history_file : "--history";

    /* Cheap checks first: the output (valid, not an input, not an existing file unless
     * --force), the prompt, the profile. */
    qc_outpath_reset();
    if (a.model) qc_outpath_add_model_dir(a.model, "--model");
    qc_outpath_add_input(a.tokens_file, "--tokens-file");
    qc_outpath_add_input(a.history_file, "--history-file");
    qc_outpath_add_input(a.pf.profile_path, "--profile");
    qc_outpath_add_output(a.out, "--out",
                          QC_OUT_REGULAR | QC_OUT_NO_CLOBBER | (a.force ? QC_OUT_FORCE : 0));
    if ((st = qc_outpath_verify(&err))) goto done;
    st = a.tokens_file ? qc_cli_read_tokens_file(a.tokens_file, &tokens, &n_tokens, &err)
                       : qc_cli_parse_tokens(a.tokens, "--tokens", &tokens, &n_tokens, &err);
    if (st) goto done;
    if (n_tokens == 0) {
        st = qc_errf(&err, QC_ERR_ARG, "%s: empty prompt (no token ids)", tok_src);
        goto done;
    }
    if (a.history || a.history_file) {
        st = a.history_file
                 ? qc_cli_read_tokens_file(a.history_file, &history, &n_history, &err)
                 : qc_cli_parse_tokens(a.history, "--history", &history, &n_history, &err);
        if (st) goto done;
        if (n_history == 0) {
            st = qc_errf(&err, QC_ERR_ARG, "%s: empty history (no token ids)", hist_src);
            goto done;
        }
    }
    if (a.decode_tokens) {
        if ((st = qc_cli_parse_tokens(a.decode_tokens, "--decode-tokens", &forced, &n_forced,
                                      &err)))
            goto done;
        if (n_forced == 0) {
            st = qc_errf(&err, QC_ERR_ARG, "--decode-tokens: empty list");
            goto done;
        }
        a.n_decode = n_forced;
    }
    qc_profile prof;
    int ctx_given = 0;
    if ((st = qc_cli_profile_finish(&a.pf, &prof, &ctx_given, &err))) goto done;
    long need = (long)n_history + n_tokens + a.n_decode;
    char hist_txt[64] = "";
    if (n_history > 0) snprintf(hist_txt, sizeof hist_txt, "history %d + ", n_history);
    if (!ctx_given) {
        if (need > (1L << 24)) {
            st = qc_errf(&err, QC_ERR_RANGE, "%s: %sprompt %d + decode %d positions: too many",
                         tok_src, hist_txt, n_tokens, a.n_decode);
            goto done;
        }
        prof.max_context_len = (int)need;
    } else if (need > prof.max_context_len) {
        const char *where = a.pf.max_context_len > 0 ? "--max-context-len" : a.pf.profile_path;
        st = qc_errf(&err, QC_ERR_RANGE,
                     "%s: max_context_len: %sprompt %d + decode %d = %ld positions exceed %d",
                     where, hist_txt, n_tokens, a.n_decode, need, prof.max_context_len);
        goto done;
    }

    /* Config before weights: token ids and the memory plan need only the config. */
    qc_config cfg;
    qc_dtype syn_dtype = QC_BF16;
    if (a.synthetic) {
        if ((st = qc_config_preset(a.synthetic, &cfg, &err))) {
            qc_err_prefix(&err, st, "--synthetic");
            goto done;
        }
        if ((st = qc_dtype_parse(a.dtype, "--dtype", &syn_dtype, &err))) goto done;
    } else {
        struct stat sb;
        if (stat(a.model, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            st = qc_errf(&err, QC_ERR_IO, "%s: model directory: %s", a.model,
                         stat(a.model, &sb) != 0 ? strerror(errno) : "not a directory");
            goto done;
        }
        if ((st = qc_config_load(a.model, &cfg, &err))) goto done;
    }
    if ((st = qc_cli_check_tokens(tokens, n_tokens, cfg.vocab_size, tok_src, &err))) goto done;
    if ((st = qc_cli_check_tokens(history, n_history, cfg.vocab_size, hist_src, &err))) goto done;
    if ((st = qc_cli_check_tokens(forced, n_forced, cfg.vocab_size, "--decode-tokens", &err)))
        goto done;
    if (a.synthetic) {
        /* plan before building the weights in memory */
        qc_memplan_req rq0;
        qc_memplan_req_init(&rq0, &cfg, syn_dtype, prof.max_context_len, 1);
        if ((st = qc_registry_memplan(a.backend, &rq0, &err)) ||
            (st = qc_memplan_enforce(&rq0, a.max_memory, "memory", NULL, &err))) goto done;
        if ((st = qc_model_synthetic(&cfg, syn_dtype, (uint64_t)a.seed, &model, &err))) goto done;
    } else if ((st = qc_model_load(a.model, &model, &err))) {
        goto done;
    }

    qc_backend_opts o;
    qc_backend_opts_default(&o);
    qc_mode mode = qc_profile_mode(&prof);
    int max_tokens = mode == QC_MODE_NOKV ? prof.max_context_len
                     : mode == QC_MODE_DYNAMIC
                         ? (prof.max_seq_len < prof.max_context_len ? prof.max_seq_len
                                                                    : prof.max_context_len)
                         : 1;
    o.max_tokens = max_tokens;
    o.n_threads = a.threads;
    if (a.chunk_size > 0) o.chunk_size = a.chunk_size;
    if (a.dn_kernel >= 0) o.dn_kernel = (qc_dn_kernel)a.dn_kernel;

    /* Refuse cleanly instead of being killed: weights + backend + state + what we keep. */
    qc_memplan plan;
    memset(&plan, 0, sizeof plan);
    {
        qc_memplan_req rq;
        qc_memplan_req_init(&rq, &model->cfg, model->embed.dtype, prof.max_context_len,
                            max_tokens);
        if ((st = qc_registry_memplan(a.backend, &rq, &err))) goto done;
        rq.weight_bytes = qc_model_weight_bytes(model);
        rq.n_logit_rows = n_tokens + a.n_decode;
        rq.nokv = mode == QC_MODE_NOKV;
        rq.n_hidden_tokens = a.no_hidden ? 0 : n_tokens;
        rq.n_state_copies = a.n_decode > 0 ? 2 : 1;
        if ((st = qc_memplan_enforce(&rq, a.max_memory, "memory", &plan, &err))) goto done;
    }
    qc_runtime_spec rs;
    if ((st = qc_registry_parse(a.backend, 0, &rs, &err)) ||
        (st = qc_registry_create(&rs, a.model, model, &o, &be, &err))) {
        qc_err_prefix(&err, st, "--backend %s", a.backend);
        goto done;
    }
    if (a.synthetic) {
        if ((st = qc_config_to_json(&model->cfg, &config_text, &err))) goto done;
    } else if ((st = read_config_text(model, &config_text, &err))) {
        goto done;
    }

    qc_case_input in;
    memset(&in, 0, sizeof in);
    in.history = history;
    in.n_history = n_history;
    in.tokens = tokens;
    in.n_tokens = n_tokens;
    in.n_decode = a.n_decode;
    in.forced = forced;
    in.capture_hidden = !a.no_hidden;
    if ((st = qc_run_case(be, &prof, a.case_name, &in, &gc, &err))) goto done;
    have_case = 1;
    char pstr[128];
    if (a.description)
        snprintf(gc.description, sizeof gc.description, "%s", a.description);
    else
        snprintf(gc.description, sizeof gc.description,
                 "recorded by qwen-conform record: %s%d prompt tokens, %d greedy decode steps, %s "
                 "prefill, %s backend", hist_txt, n_tokens, a.n_decode,
                 qc_cli_profile_str(&prof, pstr, sizeof pstr), a.backend);

    /* Provenance + the one case. */
    qc_golden g;
    memset(&g, 0, sizeof g);
    g.schema_version = QC_GOLDEN_SCHEMA_VERSION;
    snprintf(g.generator, sizeof g.generator, "qwen-conform record %s (%s)", QC_VERSION,
             a.backend);
    g.torch_version[0] = '\0';
    snprintf(g.compute_dtype, sizeof g.compute_dtype, "float32");
    g.seed = -1;
    char outdir[4096];
    qc_cli_dirname(a.out, outdir, sizeof outdir);
    if (a.synthetic) {
        /* no files: the config hash is of the config_json written here; the "weights hash"
         * identifies the generator and its seed (qc_model_synthetic is deterministic) */
        char ident[160];
        snprintf(g.model_path, sizeof g.model_path, "synthetic:%s:%s:seed%ld", a.synthetic,
                 a.dtype, a.seed);
        snprintf(ident, sizeof ident, "qc_model_synthetic:%s:%s:seed%ld", a.synthetic, a.dtype,
                 a.seed);
        qc_sha256_buf_hex(config_text, strlen(config_text), g.config_sha256);
        qc_sha256_buf_hex(ident, strlen(ident), g.weights_sha256);
    } else {
        if ((st = qc_cli_relpath(model->dir, outdir, g.model_path, sizeof g.model_path, &err)))
            goto done;
        snprintf(g.config_sha256, sizeof g.config_sha256, "%s", model->config_sha256);
        snprintf(g.weights_sha256, sizeof g.weights_sha256, "%s", model->weights_sha256);
    }
    g.config_json = config_text;
    g.cfg = model->cfg;
    g.n_cases = 1;
    g.cases = &gc;
    if ((st = qc_golden_write(a.out, &g, &err))) goto done;

    float min_margin = 0;
    for (int s = 0; s < gc.n_decode; s++)
        if (s == 0 || gc.decode_margins[s] < min_margin) min_margin = gc.decode_margins[s];
    printf("%s: wrote %s: case %s, %s%d prompt tokens, %d decode steps", PROG, a.out,
           gc.name, hist_txt, n_tokens, a.n_decode);
    if (gc.n_decode > 0) printf(" (min top1-top2 margin %.4g)", (double)min_margin);
    printf(", %s, %s\n", qc_cli_profile_str(&prof, pstr, sizeof pstr),
           be->describe ? be->describe(be) : be->name);
    printf("%s: memory: peak resident %.2f GiB (planned %.2f GiB)\n", PROG,
           qc_memplan_gib(qc_memplan_peak_rss()), qc_memplan_gib(plan.total));

done:
    if (have_case) qc_case_free(&model->cfg, &gc);
    free(config_text);
    qc_backend_destroy(be);
    qc_model_free(model);
    free(tokens);
    free(history);
    free(forced);
    qc_outpath_reset();
    if (st) return qc_cli_fail(PROG, &err);
    return QC_EXIT_PASS;
}
