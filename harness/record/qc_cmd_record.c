/* qc_cmd_record.c — `qwen-conform record`: run one case through a C backend and write it as a
 * schema-v1 golden file, so that any runtime's output can be diffed against any other.
 *
 *   qwen-conform record --model DIR (--tokens 1,2,3 | --tokens-file F) [--decode N]
 *       [--history 1,2,3 | --history-file F]   (a continuation: replayed at positions 0..P-1)
 *       [--backend SPEC] [--threads T] [--dn-kernel chunked|recurrent]
 *       [--chunk-size N] [--case NAME] [--description TEXT] [--max-memory SIZE] [--no-hidden]
 *       [--profile F.json] [--static|--dynamic] [--no-kv-cache] [--max-seq-len N]
 *       [--max-context-len N] --out F.h5 [--force]
 *   qwen-conform record --like GOLDEN.h5 [--backend SPEC] [--static|--dynamic|--no-kv-cache]
 *       [--no-hidden] --out ACTUAL.h5      (every case of a golden; qc_cmd_record_like.c)
 *
 * Every error is one line "qwen-conform record: <file or flag>: <field>: ..." and exit code 2;
 * the output is written to a temp file and renamed (qc_outpath), so a failure never leaves a
 * partial file. Before any work the output is validated and refused when it is an input (a
 * model file, the tokens / history file, the profile) or, without --force, an existing file.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qc/qc_backend.h"
#include "qc/qc_memplan.h"
#include "qc/qc_model.h"
#include "qc/qc_prefill.h"
#include "qc/qc_sha256.h"
#include "qc_cli.h"
#include "qc_cli_common.h"
#include "qc_cmd_record_internal.h"
#include "qc_golden.h"
#include "qc_outpath.h"
#include "qc_record_moe.h"
#include "qc_registry.h"
#include "qc_record_stream.h"
#include "qc_runcase.h"

#define PROG QC_RECORD_PROG

/* ===================================================================================== */
/* usage                                                                                 */
/* ===================================================================================== */

static void record_usage(FILE *f) {
    fprintf(f,
            "usage: qwen-conform record --model DIR (--tokens 1,2,3 | --tokens-file F) --out F.h5\n"
            "       qwen-conform record --synthetic 0.8b|2b|4b|9b [--dtype bf16|f32|f16|q8_0] [--seed S] ...\n"
            "                                   (real Qwen3.5 dimensions, seeded random weights made\n"
            "                                   in memory; model_path \"synthetic:...\" in the output)\n"
            "       qwen-conform record --like GOLDEN.h5 --out ACTUAL.h5 [--backend SPEC]\n"
            "                                   every case of GOLDEN on its inputs (history, prompt,\n"
            "                                   teacher-forced decode/tokens, the case's max_seq_len;\n"
            "                                   dynamic prefill unless --static / --no-kv-cache), one\n"
            "                                   ACTUAL with the same cases: `qwen-conform diff GOLDEN\n"
            "                                   ACTUAL` pairs every case. The model: the golden's\n"
            "                                   model_path, or --model DIR. --backend http:URL[,k=v...]:\n"
            "                                   a running server, asked for its top-k log-probabilities\n"
            "                                   at every position (a top-k ACTUAL: no logits)\n"
            "         [--decode N]              greedy decode steps after the prompt (default 0)\n"
            "         [--decode-tokens 1,2,3]   teacher-forced decode: feed these tokens instead\n"
            "                                   of the greedy choices (sets N; e.g. a golden's\n"
            "                                   decode/tokens, for `qwen-conform diff`)\n"
            "         [--history 1,2,3 | --history-file F]  tokens already consumed at positions\n"
            "                                   0..P-1 (the case then starts at start_pos P)\n"
            "         [--backend SPEC] [--threads T]  reference (default), optimized, or any\n"
            "                                   --backend of `check` (plugin:..., exec:..., ...)\n"
            "         [--dn-kernel chunked|recurrent] [--chunk-size N]\n"
            "         [--case NAME] [--description TEXT] [--max-memory SIZE]\n"
            "         [--no-hidden]             skip prefill/hidden (backends without a trace hook)\n"
            "         [--profile F.json] [--static | --dynamic] [--no-kv-cache]\n"
            "         [--max-seq-len N] [--max-context-len N]\n"
            "         [--force]                 replace an existing --out file (without it an\n"
            "                                   existing file, e.g. a golden, is refused)\n"
            "         [--stream]                layer-major: one layer's weights in memory at a time\n"
            "                                   (read from the files as it goes; bit-identical output);\n"
            "                                   chosen by itself when the checkpoint does not fit\n"
            "                                   --max-memory (or the available memory)\n"
            "         [--resume]                --stream with a checkpoint after every layer in\n"
            "                                   OUT.resume/ (removed on success); a run killed at any\n"
            "                                   point continues from its last layer, same output\n"
            "Writes a golden (HDF5 schema v1): the prompt's logits at every position, per-layer\n"
            "hidden states, each layer's mixer output (prefill/mlp_in, decode/mlp_in; moe_in for\n"
            "a MoE model) when the backend traces it (the built-in backends; a runtime that\n"
            "announces mlp_in), the state after prefill, N greedy decode steps and the state\n"
            "after them; for a MoE model the router's choices (prefill/router, decode/router:\n"
            "top-k ids and weights, no margins), from the backend's trace hook. max_context_len\n"
            "defaults to prompt + decode when neither the flags nor the profile set it.\n%s",
            qc_outpath_help);
}

/* ===================================================================================== */
/* command line                                                                          */
/* ===================================================================================== */

static qc_status parse_kernel(qc_argp *p, record_args *a, qc_err *err) {
    const char *k = NULL;
    qc_status st = qc_argp_value(p, &k, err);
    if (st) return st;
    if (strcmp(k, "chunked") == 0) a->dn_kernel = QC_DN_CHUNKED;
    else if (strcmp(k, "recurrent") == 0) a->dn_kernel = QC_DN_RECURRENT;
    else
        return qc_errf(err, QC_ERR_ARG, "--dn-kernel: '%s' is not a kernel (chunked or recurrent)",
                       k);
    return QC_OK;
}

/* One argument (and its value). */
static qc_status parse_one(qc_argp *p, record_args *a, int *help, qc_err *err) {
    qc_status st = QC_OK;
    if (qc_cli_profile_flag(p, &a->pf, &st, err)) return st;
    if (qc_argp_is(p, "--help") || qc_argp_is(p, "-h")) *help = 1;
    else if (qc_argp_is(p, "--model")) st = qc_argp_value(p, &a->model, err);
    else if (qc_argp_is(p, "--synthetic")) st = qc_argp_value(p, &a->synthetic, err);
    else if (qc_argp_is(p, "--dtype")) st = qc_argp_value(p, &a->dtype, err);
    else if (qc_argp_is(p, "--like")) st = qc_argp_value(p, &a->like, err);
    else if (qc_argp_is(p, "--tokens")) st = qc_argp_value(p, &a->tokens, err);
    else if (qc_argp_is(p, "--tokens-file")) st = qc_argp_value(p, &a->tokens_file, err);
    else if (qc_argp_is(p, "--history")) st = qc_argp_value(p, &a->history, err);
    else if (qc_argp_is(p, "--history-file")) st = qc_argp_value(p, &a->history_file, err);
    else if (qc_argp_is(p, "--decode-tokens")) st = qc_argp_value(p, &a->decode_tokens, err);
    else if (qc_argp_is(p, "--out")) st = qc_argp_value(p, &a->out, err);
    else if (qc_argp_is(p, "--backend")) st = qc_argp_value(p, &a->backend, err);
    else if (qc_argp_is(p, "--description")) st = qc_argp_value(p, &a->description, err);
    else if (qc_argp_is(p, "--max-memory")) st = qc_argp_value(p, &a->max_memory, err);
    else if (qc_argp_is(p, "--case")) {
        st = qc_argp_value(p, &a->case_name, err);
        a->case_given = 1;
    } else if (qc_argp_is(p, "--seed")) {
        int sd = 0;
        st = qc_argp_int(p, 0, 1 << 30, &sd, err);
        a->seed = sd;
    } else if (qc_argp_is(p, "--no-hidden")) {
        st = qc_argp_bool(p, err);
        a->no_hidden = 1;
    } else if (qc_argp_is(p, "--force")) {
        st = qc_argp_bool(p, err);
        a->force = 1;
    } else if (qc_argp_is(p, "--stream")) {
        st = qc_argp_bool(p, err);
        a->stream = 1;
    } else if (qc_argp_is(p, "--resume")) {
        st = qc_argp_bool(p, err);
        a->resume = a->stream = 1;
    } else if (qc_argp_is(p, "--decode")) st = qc_argp_int(p, 0, 1 << 24, &a->n_decode, err);
    else if (qc_argp_is(p, "--threads")) st = qc_argp_int(p, 0, 4096, &a->threads, err);
    else if (qc_argp_is(p, "--chunk-size")) st = qc_argp_int(p, 1, 1 << 20, &a->chunk_size, err);
    else if (qc_argp_is(p, "--dn-kernel")) st = parse_kernel(p, a, err);
    else st = qc_argp_unknown(p, err);
    return st;
}

/* --like takes every input from the golden: the per-case flags are refused with it. */
static qc_status check_like_args(const record_args *a, qc_err *err) {
    const char *clash = a->synthetic ? "--synthetic" : a->tokens ? "--tokens"
                        : a->tokens_file ? "--tokens-file" : a->history ? "--history"
                        : a->history_file ? "--history-file"
                        : a->decode_tokens ? "--decode-tokens" : a->n_decode ? "--decode"
                        : a->case_given ? "--case" : a->description ? "--description"
                        : a->pf.profile_path ? "--profile" : a->pf.max_seq_len ? "--max-seq-len"
                        : a->pf.max_context_len ? "--max-context-len" : NULL;
    if (clash)
        return qc_errf(err, QC_ERR_ARG,
                       "%s: not with --like (the golden's cases give the model's inputs and "
                       "lengths; only --static / --dynamic / --no-kv-cache choose the prefill)",
                       clash);
    if (!a->out) return qc_errf(err, QC_ERR_ARG, "--out: required (the ACTUAL .h5 to write)");
    return QC_OK;
}

static qc_status check_args(record_args *a, qc_err *err) {
    qc_runtime_spec rs;
    qc_status st = qc_registry_parse(a->backend, 0, &rs, err);
    if (st) return st;
    if (!strcmp(a->backend, "all"))
        return qc_errf(err, QC_ERR_ARG, "--backend: 'all' is for check (record runs one backend)");
    if (a->resume && a->synthetic)
        return qc_errf(err, QC_ERR_ARG, "--resume: needs --model or --like (a checkpoint names "
                       "the weight files it was made from)");
    if (a->resume && a->out) snprintf(a->resume_dir, sizeof a->resume_dir, "%s.resume", a->out);
    if (a->stream && !qc_registry_is_builtin(a->backend))
        return qc_errf(err, QC_ERR_ARG, "--stream: --backend %s runs its own forward pass; a "
                       "layer-major record needs reference or optimized", a->backend);
    if (a->like) return check_like_args(a, err);
    if (!a->model == !a->synthetic)
        return qc_errf(err, QC_ERR_ARG,
                       "--model: give exactly one of --model DIR, --synthetic 0.8b|2b|4b|9b and "
                       "--like GOLDEN.h5");
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

static qc_status parse_args(int argc, char **argv, record_args *a, int *help, qc_err *err) {
    memset(a, 0, sizeof *a);
    a->backend = qc_registry_reference()->name; /* the default: the readable definition */
    a->case_name = "case0";
    a->dn_kernel = -1;
    a->dtype = "bf16";
    a->seed = 1;
    qc_cli_profile_init(&a->pf);
    qc_argp p;
    qc_argp_init(&p, PROG, argc, argv);
    qc_status st = QC_OK;
    while (st == QC_OK && !*help && qc_argp_next(&p)) st = parse_one(&p, a, help, err);
    if (st || *help) return st;
    return check_args(a, err);
}

/* ===================================================================================== */
/* one case from the command line                                                        */
/* ===================================================================================== */

typedef struct {
    int32_t *tokens, *history, *forced;
    int n_tokens, n_history, n_forced;
    const char *tok_src, *hist_src;  /* names of the token sources in messages */
    char hist_txt[64];               /* "history P + " or "" */
    qc_profile prof;
    qc_config cfg;
    qc_dtype syn_dtype;
    qc_model *model;
    qc_backend *be;
    char *config_text;
    qc_golden_case gc;
    int have_case;
    qc_memplan plan;
    int streamed;                    /* layer-major (qc_record_stream.h) */
    int auto_streamed;               /* ... chosen because the in-memory plan does not fit */
    uint64_t in_memory_need;         /* that plan's total */
    qc_stream_stats sstats;
} one_run;

/* The output (valid, not an input, not an existing file unless --force): before any work. */
static qc_status verify_outputs(const record_args *a, qc_err *err) {
    qc_outpath_reset();
    if (a->model) qc_outpath_add_model_dir(a->model, "--model");
    qc_outpath_add_input(a->tokens_file, "--tokens-file");
    qc_outpath_add_input(a->history_file, "--history-file");
    qc_outpath_add_input(a->pf.profile_path, "--profile");
    qc_outpath_add_output(a->out, "--out",
                          QC_OUT_REGULAR | QC_OUT_NO_CLOBBER | (a->force ? QC_OUT_FORCE : 0));
    return qc_outpath_verify(err);
}

/* The prompt, the history and the teacher-forced decode tokens. */
static qc_status read_inputs(record_args *a, one_run *r, qc_err *err) {
    qc_status st = a->tokens_file
                       ? qc_cli_read_tokens_file(a->tokens_file, &r->tokens, &r->n_tokens, err)
                       : qc_cli_parse_tokens(a->tokens, "--tokens", &r->tokens, &r->n_tokens, err);
    if (st) return st;
    if (r->n_tokens == 0) return qc_errf(err, QC_ERR_ARG, "%s: empty prompt (no token ids)", r->tok_src);
    if (a->history || a->history_file) {
        st = a->history_file
                 ? qc_cli_read_tokens_file(a->history_file, &r->history, &r->n_history, err)
                 : qc_cli_parse_tokens(a->history, "--history", &r->history, &r->n_history, err);
        if (st) return st;
        if (r->n_history == 0)
            return qc_errf(err, QC_ERR_ARG, "%s: empty history (no token ids)", r->hist_src);
        snprintf(r->hist_txt, sizeof r->hist_txt, "history %d + ", r->n_history);
    }
    if (a->decode_tokens) {
        if ((st = qc_cli_parse_tokens(a->decode_tokens, "--decode-tokens", &r->forced,
                                      &r->n_forced, err)))
            return st;
        if (r->n_forced == 0) return qc_errf(err, QC_ERR_ARG, "--decode-tokens: empty list");
        a->n_decode = r->n_forced;
    }
    return QC_OK;
}

/* The profile, max_context_len defaulting to what the case needs. */
static qc_status plan_context(const record_args *a, one_run *r, qc_err *err) {
    int ctx_given = 0;
    qc_status st = qc_cli_profile_finish(&a->pf, &r->prof, &ctx_given, err);
    if (st) return st;
    long need = (long)r->n_history + r->n_tokens + a->n_decode;
    if (!ctx_given) {
        if (need > (1L << 24))
            return qc_errf(err, QC_ERR_RANGE, "%s: %sprompt %d + decode %d positions: too many",
                           r->tok_src, r->hist_txt, r->n_tokens, a->n_decode);
        r->prof.max_context_len = (int)need;
    } else if (need > r->prof.max_context_len) {
        const char *where = a->pf.max_context_len > 0 ? "--max-context-len" : a->pf.profile_path;
        return qc_errf(err, QC_ERR_RANGE,
                       "%s: max_context_len: %sprompt %d + decode %d = %ld positions exceed %d",
                       where, r->hist_txt, r->n_tokens, a->n_decode, need,
                       r->prof.max_context_len);
    }
    return QC_OK;
}

/* The memory request of this case, filled here only, for the streaming decision (m NULL:
 * before loading) and for the backend's create (m the loaded model), so the two cannot count
 * different things: the config, the backend options create uses (*o: threads, chunk size,
 * max_tokens), the built-in backend's own report, the weights (m NULL: the checkpoint's files,
 * what loading reads; else the loaded bytes, or a streamed model's resident layer + head
 * block), what the run keeps (logit rows, the no-KV recomputation, prefill/hidden + the mixer
 * outputs moe_in / mlp_in [L, T + S, H], state copies) and, layer-major, its activations and
 * live states. */
static qc_status case_request(const record_args *a, const one_run *r, const qc_model *m,
                              int streamed, qc_memplan_req *rq, qc_backend_opts *o,
                              qc_err *err) {
    const int max_tokens = qc_record_max_tokens(&r->prof);
    qc_record_backend_opts(a, max_tokens, o);
    qc_memplan_req_init(rq, m ? &m->cfg : &r->cfg, m ? m->embed.dtype : QC_BF16,
                        r->prof.max_context_len, max_tokens);
    qc_memplan_req_set_opts(rq, o); /* the threads and chunk size create will use */
    qc_status st;
    if (qc_registry_is_builtin(a->backend) && (st = qc_registry_memplan(a->backend, rq, err)))
        return st;
    rq->weight_bytes = !m        ? qc_record_checkpoint_bytes(a->model)
                       : streamed ? qc_record_stream_weight_bytes(m)
                                  : qc_model_weight_bytes(m);
    rq->n_logit_rows = r->n_tokens + a->n_decode;
    rq->nokv = qc_profile_mode(&r->prof) == QC_MODE_NOKV;
    rq->n_hidden_tokens = a->no_hidden ? 0 : r->n_tokens;
    if (!a->no_hidden) /* moe_in (MoE) / mlp_in (dense) [L, T + S, H] */
        rq->n_hidden_tokens += r->n_tokens + a->n_decode;
    rq->n_state_copies = a->n_decode > 0 ? 2 : 1;
    if (m && streamed) {
        qc_stream_case sc;
        memset(&sc, 0, sizeof sc);
        sc.profile = &r->prof;
        sc.in.n_history = r->n_history, sc.in.n_tokens = r->n_tokens;
        sc.in.n_decode = a->n_decode, sc.in.capture_hidden = !a->no_hidden;
        rq->extra_bytes = qc_record_stream_extra_bytes(&m->cfg, &sc, 1, NULL);
    }
    return QC_OK;
}

/* In memory, or a layer at a time: --stream, or by itself when the checkpoint's files (what
 * loading reads) with the rest of the in-memory plan (case_request) exceed the budget. */
static qc_status choose_streaming(const record_args *a, one_run *r, qc_err *err) {
    r->streamed = a->stream;
    if (r->streamed || !qc_registry_is_builtin(a->backend)) return QC_OK;
    uint64_t limit;
    qc_status lst = qc_memplan_limit(a->max_memory, &limit, err); /* a bad size: said now */
    if (lst) return lst;
    qc_memplan_req rq;
    qc_backend_opts o;
    qc_status st = case_request(a, r, NULL, 0, &rq, &o, err);
    if (st) return st;
    qc_err e2;
    qc_err_clear(&e2);
    qc_memplan plan;
    if (qc_memplan_enforce(&rq, a->max_memory, "memory", &plan, &e2) == QC_OK) return QC_OK;
    r->streamed = r->auto_streamed = 1; /* said once the layer-major plan fits (make_backend) */
    r->in_memory_need = plan.total;
    return QC_OK;
}

/* Config before weights (token ids and the memory plan need only the config), then the
 * model: loaded from --model, or built in memory for --synthetic after its memory plan. */
static qc_status load_model(const record_args *a, one_run *r, qc_err *err) {
    qc_status st;
    r->syn_dtype = QC_BF16;
    if (a->synthetic) {
        if ((st = qc_config_preset(a->synthetic, &r->cfg, err)))
            return qc_err_prefix(err, st, "--synthetic");
        if ((st = qc_dtype_parse(a->dtype, "--dtype", &r->syn_dtype, err))) return st;
    } else {
        struct stat sb;
        if (stat(a->model, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return qc_errf(err, QC_ERR_IO, "%s: model directory: %s", a->model,
                           stat(a->model, &sb) != 0 ? strerror(errno) : "not a directory");
        if ((st = qc_config_load(a->model, &r->cfg, err))) return st;
    }
    int V = r->cfg.vocab_size;
    if ((st = qc_cli_check_tokens(r->tokens, r->n_tokens, V, r->tok_src, err)) ||
        (st = qc_cli_check_tokens(r->history, r->n_history, V, r->hist_src, err)) ||
        (st = qc_cli_check_tokens(r->forced, r->n_forced, V, "--decode-tokens", err)))
        return st;
    /* the position limit before any work: a huge token list is refused now, not after a run */
    long need = (long)r->n_history + r->n_tokens + a->n_decode;
    if (need > qc_golden_max_positions(&r->cfg))
        return qc_errf(err, QC_ERR_RANGE, "%s: %sprompt %d + decode %d = %ld positions, more "
                       "than %d (max_position_embeddings of the config, capped)", r->tok_src,
                       r->hist_txt, r->n_tokens, a->n_decode, need,
                       qc_golden_max_positions(&r->cfg));
    if (!a->synthetic) {
        if ((st = choose_streaming(a, r, err))) return st;
        return r->streamed ? qc_model_load_streamed(a->model, &r->model, err)
                           : qc_model_load(a->model, &r->model, err);
    }
    r->streamed = a->stream; /* layer-major on the model in memory (the same arithmetic) */
    qc_memplan_req rq0;
    qc_memplan_req_init(&rq0, &r->cfg, r->syn_dtype, r->prof.max_context_len, 1);
    qc_backend_opts o0;
    qc_record_backend_opts(a, 1, &o0);
    qc_memplan_req_set_opts(&rq0, &o0);
    if (qc_registry_is_builtin(a->backend) && (st = qc_registry_memplan(a->backend, &rq0, err)))
        return st;
    if ((st = qc_memplan_enforce(&rq0, a->max_memory, "memory", NULL, err))) return st;
    return qc_model_synthetic(&r->cfg, r->syn_dtype, (uint64_t)a->seed, &r->model, err);
}

/* Refuse cleanly instead of being killed (weights + backend + state + what we keep), then
 * create the backend. */
static qc_status make_backend(const record_args *a, one_run *r, qc_err *err) {
    qc_backend_opts o;
    qc_memplan_req rq;
    qc_status st = case_request(a, r, r->model, r->streamed, &rq, &o, err);
    if (st) return st;
    if ((st = qc_memplan_enforce(&rq, a->max_memory, r->streamed ? "memory (layer-major)" : "memory",
                                 &r->plan, err)))
        return st;
    if (r->auto_streamed)
        fprintf(stderr, "%s: %s: %.2f GiB in memory does not fit %s: recording layer-major in "
                "%.2f GiB, one layer's weights at a time (--stream)\n", PROG, a->model,
                qc_memplan_gib(r->in_memory_need),
                a->max_memory ? a->max_memory : "the available memory",
                qc_memplan_gib(r->plan.total));
    if ((st = qc_record_make_backend(a, a->model, r->model, &o, &r->be, err))) return st;
    if (a->synthetic) return qc_config_to_json(&r->model->cfg, &r->config_text, err);
    return qc_record_config_text(r->model, &r->config_text, err);
}

/* Run the case and write the one-case golden. */
static qc_status run_and_write(const record_args *a, one_run *r, qc_err *err) {
    qc_case_input in;
    memset(&in, 0, sizeof in);
    in.history = r->history;
    in.n_history = r->n_history;
    in.tokens = r->tokens;
    in.n_tokens = r->n_tokens;
    in.n_decode = a->n_decode;
    in.forced = r->forced;
    in.capture_hidden = !a->no_hidden;
    /* each layer's mixer output too (dense: mlp_in, when the backend traces it), and a MoE
     * model's router choices (prefill/router, decode/router, moe_in) */
    qc_status st;
    if (r->streamed) {
        qc_stream_case sc = {a->case_name, &r->prof, in, !a->no_hidden, &r->gc};
        qc_stream_opts so = {isatty(2), 0, a->resume ? a->resume_dir : NULL};
        st = qc_record_stream_run(r->be, r->model, &sc, 1, &so, &r->sstats, err);
    } else {
        st = qc_record_run_case(r->be, &r->prof, a->case_name, &in, !a->no_hidden, &r->gc, err);
    }
    if (st) return st;
    r->have_case = 1;
    char pstr[128];
    if (a->description)
        snprintf(r->gc.description, sizeof r->gc.description, "%s", a->description);
    else
        snprintf(r->gc.description, sizeof r->gc.description,
                 "recorded by qwen-conform record: %s%d prompt tokens, %d greedy decode steps, %s "
                 "prefill, %s backend", r->hist_txt, r->n_tokens, a->n_decode,
                 qc_cli_profile_str(&r->prof, pstr, sizeof pstr), a->backend);
    qc_golden g;
    if ((st = qc_record_provenance(a, r->model, r->config_text, &g, err))) return st;
    g.n_cases = 1;
    g.cases = &r->gc;
    return qc_golden_write(a->out, &g, err);
}

static void print_summary(const record_args *a, const one_run *r) {
    const qc_golden_case *gc = &r->gc;
    float min_margin = 0;
    for (int s = 0; s < gc->n_decode; s++)
        if (s == 0 || gc->decode_margins[s] < min_margin) min_margin = gc->decode_margins[s];
    char pstr[128];
    printf("%s: wrote %s: case %s, %s%d prompt tokens, %d decode steps", PROG, a->out,
           gc->name, r->hist_txt, r->n_tokens, a->n_decode);
    if (gc->n_decode > 0) printf(" (min top1-top2 margin %.4g)", (double)min_margin);
    if (qc_record_has_router(gc))
        printf(", router top-%d choices of %d layers", r->model->cfg.n_experts_per_tok,
               r->model->cfg.n_layers);
    printf(", %s, %s\n", qc_cli_profile_str(&r->prof, pstr, sizeof pstr),
           r->be->describe ? r->be->describe(r->be) : r->be->name);
    printf("%s: memory: peak resident %.2f GiB (planned %.2f GiB)\n", PROG,
           qc_memplan_gib(qc_memplan_peak_rss()), qc_memplan_gib(r->plan.total));
    if (r->streamed) {
        const qc_stream_stats *ss = &r->sstats;
        printf("%s: layer-major: %d pass%s over the weights, %.2f GiB read from the files in "
               "%.1f s (%.0f MiB/s)\n", PROG, ss->passes, ss->passes == 1 ? "" : "es",
               (double)ss->bytes_read / (double)(1u << 30), ss->seconds,
               ss->seconds > 0 ? (double)ss->bytes_read / (double)(1u << 20) / ss->seconds : 0.0);
    }
}

static void free_run(one_run *r) {
    if (r->have_case) qc_case_free(&r->model->cfg, &r->gc);
    free(r->config_text);
    qc_backend_destroy(r->be);
    qc_model_free(r->model);
    free(r->tokens);
    free(r->history);
    free(r->forced);
}

/* ===================================================================================== */
/* entry point                                                                           */
/* ===================================================================================== */

/* qwen-conform record ...: exit code (0 written, 2 usage / I/O / format error, 1 when a
 * runtime under test fails). */
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
    if (a.like) return qc_record_like(&a);
    one_run r;
    memset(&r, 0, sizeof r);
    r.tok_src = a.tokens_file ? a.tokens_file : "--tokens";
    r.hist_src = a.history_file ? a.history_file : "--history";
    if (!(st = verify_outputs(&a, &err)) && !(st = read_inputs(&a, &r, &err)) &&
        !(st = plan_context(&a, &r, &err)) && !(st = load_model(&a, &r, &err)) &&
        !(st = make_backend(&a, &r, &err)) && !(st = run_and_write(&a, &r, &err)))
        print_summary(&a, &r);
    free_run(&r);
    qc_outpath_reset();
    return st ? qc_record_fail(&err) : QC_EXIT_PASS;
}
