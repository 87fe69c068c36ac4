/* qc_cmd_record_like.c — `qwen-conform record --like GOLDEN.h5 --out ACTUAL.h5`: every case of
 * a golden run on a backend with the golden's own inputs, written as one ACTUAL file with the
 * same case names, so `qwen-conform diff GOLDEN.h5 ACTUAL.h5` pairs every case.
 *
 * Per case: the history (replayed first), the prompt at start_pos, the golden's decode/tokens
 * fed teacher-forced, and the case's prefill profile: dynamic (the default; chunks of the
 * case's max_seq_len, 128 when absent), --static or --no-kv-cache, max_context_len = what the
 * case needs (at least its max_seq_len), as `check` runs it. The model is the golden's
 * model_path unless --model names another directory. A backend without the hidden capability
 * writes no prefill/hidden, one without state_read no state groups (diff then SKIPs those);
 * a MoE model's router choices (prefill/router, decode/router: ids and weights) are written
 * when the backend traces them (qc_record_moe.c), for diff's router_topk. The output's provenance is the model's
 * (its hashes and config.json), so diff also compares them with the golden's.
 *
 * A server (--backend http:URL) is asked for top-k log-probabilities instead and the file is
 * a top-k ACTUAL (qc_record_http.c); so is a plugin / exec runtime that announces topk_only
 * (its forward_topk rows, k = QC_RUNCASE_TOPK_DEFAULT; qc_runcase_topk.c).
 *
 * Errors: usage / I/O / format → exit 2 naming the file and the field; a runtime under test
 * that fails a case → exit 1 naming the case. Nothing is written unless every case ran (one
 * qc_golden_write at the end: temp file + rename).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qc/qc_model.h"
#include "qc_cli.h"
#include "qc_cmd_record_internal.h"
#include "qc_outpath.h"
#include "qc_record_moe.h"
#include "qc_record_stream.h"
#include "qc_registry.h"
#include "qc_runcase.h"

#define PROG QC_RECORD_PROG

typedef struct {
    qc_golden *g;           /* the golden, metadata only; one case loaded at a time */
    const char *model_dir;  /* --model or the golden's model directory */
    qc_model *model;
    qc_backend *be;
    char *config_text;
    qc_golden_case *cases;  /* [g->n_cases] the results */
    int n_done;             /* results filled */
    qc_mode mode;
    qc_memplan plan;
    int streamed;           /* layer-major over all cases (qc_record_stream.h) */
    qc_stream_stats sstats;
} like_run;

/* ===================================================================================== */
/* setup                                                                                 */
/* ===================================================================================== */

/* The case's profile in the chosen mode (as the checker: context = max(need, max_seq_len)). */
static void case_profile(const qc_golden_case *gc, qc_mode mode, qc_profile *p) {
    int msl = gc->max_seq_len > 0 ? gc->max_seq_len : 128;
    int need = gc->start_pos + gc->n_tokens + gc->n_decode;
    qc_profile_for_mode(p, mode, msl, need > msl ? need : msl);
}

/* Inputs and output registered, the output validated: before any work. */
static qc_status like_verify(const record_args *a, qc_err *err) {
    struct stat sb;
    if (stat(a->like, &sb) == 0 && S_ISDIR(sb.st_mode))
        return qc_errf(err, QC_ERR_ARG,
                       "--like: %s: is a directory (give one golden .h5; for the inputs of a "
                       "whole directory see `qwen-conform export-inputs`)", a->like);
    qc_outpath_reset();
    qc_outpath_add_input(a->like, "--like golden");
    qc_outpath_add_goldens(a->like, 1);
    if (a->model) qc_outpath_add_model_dir(a->model, "--model");
    qc_outpath_add_output(a->out, "--out",
                          QC_OUT_REGULAR | QC_OUT_NO_CLOBBER | (a->force ? QC_OUT_FORCE : 0));
    return qc_outpath_verify(err);
}

/* What a layer-major run of every case keeps besides the layer (qc_record_stream.h). */
static uint64_t like_stream_extra(const record_args *a, const like_run *r) {
    uint64_t total = 0;
    for (int i = 0; i < r->g->n_cases; i++) {
        const qc_golden_case *gc = &r->g->cases[i];
        qc_profile p;
        case_profile(gc, r->mode, &p);
        qc_stream_case sc;
        memset(&sc, 0, sizeof sc);
        sc.profile = &p;
        sc.in.n_history = gc->n_history, sc.in.n_tokens = gc->n_tokens;
        sc.in.n_decode = gc->n_decode, sc.in.capture_hidden = !a->no_hidden;
        total += qc_record_stream_extra_bytes(&r->model->cfg, &sc, 1, NULL);
    }
    return total;
}

/* The memory request of every case, filled here only, for the streaming decision (m NULL:
 * before loading, the golden's config) and for the backend's create (m the loaded model), so
 * the two cannot count different things: the backend options create uses (*o: threads, chunk
 * size, max_tokens = the largest context), the built-in backend's own report, the weights (m
 * NULL: the checkpoint's files, what loading reads; else the loaded bytes, or a streamed
 * model's resident layer + head block), what the run keeps (every case's logit rows, the no-KV
 * recomputation, prefill/hidden + the mixer outputs moe_in / mlp_in [L, T + S, H], state
 * copies) and, layer-major, the activations and live states of every case. */
static qc_status like_request(const record_args *a, const like_run *r, const qc_model *m,
                              int streamed, qc_memplan_req *rq, qc_backend_opts *o,
                              qc_err *err) {
    const qc_golden *g = r->g;
    int maxctx = 1;
    long rows = 0, hidden = 0, copies = 0;
    for (int i = 0; i < g->n_cases; i++) {
        qc_profile p;
        case_profile(&g->cases[i], QC_MODE_NOKV, &p);
        if (p.max_context_len > maxctx) maxctx = p.max_context_len;
        rows += g->cases[i].n_tokens + g->cases[i].n_decode;
        hidden += g->cases[i].n_tokens;
        copies += g->cases[i].n_decode > 0 ? 2 : 1;
    }
    qc_record_backend_opts(a, maxctx, o);
    qc_memplan_req_init(rq, m ? &m->cfg : &g->cfg, m ? m->embed.dtype : QC_BF16, maxctx, maxctx);
    qc_memplan_req_set_opts(rq, o); /* the threads and chunk size create will use */
    qc_status st;
    if (qc_registry_is_builtin(a->backend) && (st = qc_registry_memplan(a->backend, rq, err)))
        return st;
    rq->weight_bytes = !m        ? qc_record_checkpoint_bytes(r->model_dir)
                       : streamed ? qc_record_stream_weight_bytes(m)
                                  : qc_model_weight_bytes(m);
    if (m && streamed) rq->extra_bytes = like_stream_extra(a, r);
    rq->n_logit_rows = rows;
    rq->nokv = r->mode == QC_MODE_NOKV;
    rq->n_hidden_tokens = a->no_hidden ? 0 : hidden;
    if (!a->no_hidden) /* moe_in (MoE) / mlp_in (dense) [L, T + S, H] */
        rq->n_hidden_tokens += rows;
    rq->n_state_copies = copies;
    return QC_OK;
}

/* Does the in-memory record fit the budget (like_request before loading)? A backend whose
 * report fails: yes here, the real plan (like_setup) says why. */
static int like_fits_in_memory(const record_args *a, const like_run *r) {
    qc_memplan_req rq;
    qc_backend_opts o;
    qc_err e2;
    qc_err_clear(&e2);
    if (like_request(a, r, NULL, 0, &rq, &o, &e2)) return 1;
    return qc_memplan_enforce(&rq, a->max_memory, "memory", NULL, &e2) == QC_OK;
}

/* Open the golden, load the model, plan the memory, create the backend. */
static qc_status like_setup(const record_args *a, like_run *r, qc_err *err) {
    qc_status st = qc_golden_open_lazy(a->like, &r->g, err);
    if (st) return st;
    const qc_golden *g = r->g;
    r->model_dir = a->model ? a->model : g->model_dir;
    uint64_t limit;
    if ((st = qc_memplan_limit(a->max_memory, &limit, err))) return st; /* a bad size: now */
    r->streamed = a->stream || (qc_registry_is_builtin(a->backend) &&
                                !like_fits_in_memory(a, r));
    if ((st = (r->streamed ? qc_model_load_streamed : qc_model_load)(r->model_dir, &r->model, err))) {
        if (!a->model) qc_err_prefix(err, st, "%s: model_path '%s'", g->path, g->model_path);
        return st;
    }
    if (r->model->cfg.vocab_size != g->cfg.vocab_size)
        return qc_errf(err, QC_ERR_ARG, "--model %s: vocab_size %d != the golden's %d (%s)",
                       r->model_dir, r->model->cfg.vocab_size, g->cfg.vocab_size, g->path);
    qc_backend_opts o;
    qc_memplan_req rq;
    if ((st = like_request(a, r, r->model, r->streamed, &rq, &o, err))) return st;
    if ((st = qc_memplan_enforce(&rq, a->max_memory, r->streamed ? "memory (layer-major)"
                                 : "memory", &r->plan, err)))
        return st;
    if (r->streamed && !a->stream)
        fprintf(stderr, "%s: %s: the checkpoint does not fit %s in memory: recording "
                "layer-major in %.2f GiB, one layer's weights at a time (--stream)\n", PROG,
                r->model_dir, a->max_memory ? a->max_memory : "the available memory",
                qc_memplan_gib(r->plan.total));
    if ((st = qc_record_make_backend(a, r->model_dir, r->model, &o, &r->be, err))) return st;
    if ((st = qc_record_config_text(r->model, &r->config_text, err))) return st;
    r->cases = calloc((size_t)g->n_cases, sizeof *r->cases);
    if (!r->cases) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", g->path);
    return QC_OK;
}

/* ===================================================================================== */
/* running                                                                               */
/* ===================================================================================== */

static void like_finish_case(const record_args *a, like_run *r, int i);

/* Case i of the golden on the backend, into r->cases[i]. */
static qc_status like_run_case(const record_args *a, like_run *r, int i, qc_err *err) {
    qc_status st = qc_golden_load_case(r->g, i, err);
    if (st) return st;
    const qc_golden_case *gc = &r->g->cases[i];
    qc_case_input in;
    memset(&in, 0, sizeof in);
    in.history = gc->n_history > 0 ? gc->history : NULL;
    in.n_history = gc->n_history;
    in.tokens = gc->tokens;
    in.n_tokens = gc->n_tokens;
    in.n_decode = gc->n_decode;
    in.forced = gc->n_decode > 0 ? gc->decode_tokens : NULL;
    in.capture_hidden = !a->no_hidden && (r->be->caps & QC_BE_CAP_HIDDEN);
    /* a top-k-only runtime: top-k rows instead of logits, a top-k ACTUAL (qc_runcase_topk.c) */
    in.topk = (r->be->caps & QC_BE_CAP_TOPK_ONLY) ? QC_RUNCASE_TOPK_DEFAULT : 0;
    qc_profile p;
    case_profile(gc, r->mode, &p);
    qc_golden_case *out = &r->cases[i];
    st = qc_record_run_case(r->be, &p, gc->name, &in, in.capture_hidden, out, err);
    if (st) {
        qc_err_prefix(err, st, "%s: case %s (%s prefill)", a->like, gc->name,
                      qc_mode_str(r->mode));
    } else {
        r->n_done = i + 1;
        like_finish_case(a, r, i);
    }
    qc_golden_unload_case(r->g, i);
    return st;
}

/* Case i's result, finished as every recorded case (states, lengths, description). */
static void like_finish_case(const record_args *a, like_run *r, int i) {
    const qc_golden_case *gc = &r->g->cases[i];
    qc_golden_case *out = &r->cases[i];
    if (!(r->be->caps & QC_BE_CAP_STATE_READ)) { /* not the runtime's state: leave it out */
        qc_golden_state_free(&r->model->cfg, &out->prefill_state);
        qc_golden_state_free(&r->model->cfg, &out->decode_state);
    }
    out->max_seq_len = gc->max_seq_len;
    snprintf(out->description, sizeof out->description,
             "record --like, %.40s backend, %s prefill: %.160s", a->backend,
             qc_mode_str(r->mode), gc->description);
}

/* Every case layer-major: the inputs copied out of the golden, one run of them all. */
static qc_status like_run_streamed(const record_args *a, like_run *r, qc_err *err) {
    const int n = r->g->n_cases;
    qc_stream_case *sc = calloc((size_t)n, sizeof *sc);
    qc_profile *pr = calloc((size_t)n, sizeof *pr);
    int32_t **ids = calloc((size_t)n * 3, sizeof *ids);
    qc_status st = sc && pr && ids ? QC_OK : qc_errf(err, QC_ERR_OOM, "%s: out of memory", a->like);
    for (int i = 0; i < n && !st; i++) {
        if ((st = qc_golden_load_case(r->g, i, err))) break;
        const qc_golden_case *gc = &r->g->cases[i];
        const int32_t *src[3] = {gc->history, gc->tokens, gc->decode_tokens};
        const int cnt[3] = {gc->n_history, gc->n_tokens, gc->n_decode};
        for (int k = 0; k < 3 && !st; k++) {
            if (cnt[k] <= 0 || !src[k]) continue;
            ids[3 * i + k] = malloc((size_t)cnt[k] * sizeof(int32_t));
            if (!ids[3 * i + k]) st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", a->like);
            else memcpy(ids[3 * i + k], src[k], (size_t)cnt[k] * sizeof(int32_t));
        }
        case_profile(gc, r->mode, &pr[i]);
        sc[i].name = gc->name;
        sc[i].profile = &pr[i];
        sc[i].in.history = ids[3 * i], sc[i].in.n_history = gc->n_history;
        sc[i].in.tokens = ids[3 * i + 1], sc[i].in.n_tokens = gc->n_tokens;
        sc[i].in.n_decode = gc->n_decode, sc[i].in.forced = ids[3 * i + 2];
        sc[i].in.capture_hidden = sc[i].with_in = !a->no_hidden;
        sc[i].out = &r->cases[i];
        qc_golden_unload_case(r->g, i);
    }
    qc_stream_opts so = {isatty(2), 0, a->resume ? a->resume_dir : NULL};
    if (!st) st = qc_record_stream_run(r->be, r->model, sc, n, &so, &r->sstats, err);
    if (!st) {
        r->n_done = n;
        for (int i = 0; i < n; i++) like_finish_case(a, r, i);
    }
    for (int i = 0; ids && i < 3 * n; i++) free(ids[i]);
    free(ids);
    free(pr);
    free(sc);
    return st;
}

static void like_free(like_run *r) {
    for (int i = 0; i < r->n_done; i++) qc_case_free(&r->model->cfg, &r->cases[i]);
    free(r->cases);
    free(r->config_text);
    qc_backend_destroy(r->be);
    qc_model_free(r->model);
    qc_golden_free(r->g);
}

/* ===================================================================================== */
/* entry                                                                                 */
/* ===================================================================================== */

/* record --like (see qc_cmd_record_internal.h): exit code; prints errors and the summary. */
int qc_record_like(const record_args *a) {
    qc_err err;
    qc_err_clear(&err);
    like_run r;
    memset(&r, 0, sizeof r);
    r.mode = a->pf.no_kv_cache ? QC_MODE_NOKV : a->pf.dynamic == 0 ? QC_MODE_STATIC
                                                                   : QC_MODE_DYNAMIC;
    qc_status st = like_verify(a, &err);
    if (!st && qc_record_is_http(a->backend)) { /* a server: top-k only (qc_record_http.c) */
        st = qc_record_like_http(a, &err);
        qc_outpath_reset();
        return st ? qc_record_fail(&err) : QC_EXIT_PASS;
    }
    if (!st) st = like_setup(a, &r, &err);
    if (!st && r.streamed) st = like_run_streamed(a, &r, &err);
    for (int i = 0; !st && !r.streamed && i < r.g->n_cases; i++) st = like_run_case(a, &r, i, &err);
    if (!st) {
        qc_golden og;
        st = qc_record_provenance(a, r.model, r.config_text, &og, &err);
        og.n_cases = r.g->n_cases;
        og.cases = r.cases;
        if (!st) st = qc_golden_write(a->out, &og, &err);
    }
    if (!st) {
        int hid = !a->no_hidden && (r.be->caps & QC_BE_CAP_HIDDEN);
        const char *moe = !qc_cfg_is_moe(&r.model->cfg) ? ""
                          : r.g->n_cases > 0 && qc_record_has_router(&r.cases[0])
                              ? ", router choices" : ", no router choices (no router_topk trace)";
        printf("%s: wrote %s: %d case%s of %s on their inputs (%s prefill, teacher-forced "
               "decode%s%s%s%s), %s\n", PROG, a->out, r.g->n_cases, r.g->n_cases == 1 ? "" : "s",
               a->like, qc_mode_str(r.mode),
               r.be->caps & QC_BE_CAP_TOPK_ONLY ? ", top-k log-probabilities only" : "",
               hid ? "" : ", no hidden states",
               r.be->caps & QC_BE_CAP_STATE_READ ? "" : ", no states (no state_read)", moe,
               r.be->describe ? r.be->describe(r.be) : r.be->name);
        printf("%s: memory: peak resident %.2f GiB (planned %.2f GiB)\n", PROG,
               qc_memplan_gib(qc_memplan_peak_rss()), qc_memplan_gib(r.plan.total));
        if (r.streamed)
            printf("%s: layer-major: %d pass%s over the weights, %.2f GiB read from the files "
                   "in %.1f s\n", PROG, r.sstats.passes, r.sstats.passes == 1 ? "" : "es",
                   (double)r.sstats.bytes_read / (double)(1u << 30), r.sstats.seconds);
        printf("%s: compare with: qwen-conform diff %s %s\n", PROG, a->like, a->out);
    }
    like_free(&r);
    qc_outpath_reset();
    return st ? qc_record_fail(&err) : QC_EXIT_PASS;
}
