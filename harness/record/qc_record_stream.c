/* qc_record_stream.c — `record` layer-major (qc_record_stream.h): rounds of (run every case's
 * runner against the tape, execute what is new layer by layer), then one playback run per case.
 *
 * Execution of the new calls of every case (one pass over the weights):
 *   embed      h = the tokens' rows of the embedding table (acquired a row at a time)  trace 0
 *   layer l    acquire l (prefetch l+1); every case's new ops in order — a reset zeroes layer l
 *              of the case's live state, a call runs step_layer on its h, a snapshot due at
 *              this point copies layer l of the live state; release l
 *   norm       step_norm(h) -> h                                                        trace L
 *   head       the output head in blocks of rows: step_logits of every call per block
 * The arithmetic per call and layer is the backend's own (its forward is made of the same
 * steps), so the results are bit-identical to the cases run one after another in memory.
 */
#include "qc_record_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qc/qc_sha256.h"
#include "qc_record_moe.h"
#include "qc_record_resume.h"
#include "qc_record_tape.h"

typedef struct {
    qc_backend *be;           /* the real backend (its steps) */
    qc_model *m;
    qc_stream_case *cases;
    int n_cases;
    tape_case *tapes;         /* [n_cases] */
    tape_case *cur;           /* the tape the tape backend acts on */
    qc_backend *tape_be;
    const qc_stream_opts *o;
    qc_stream_stats *stats;
    int keep_trace;           /* store the trace rows of every call */
    int *complete;            /* [n_cases] nothing left to record */
    double t0;                /* start (seconds) */
    int pass;                 /* passes over the weights so far */
    qc_status trace_status;   /* QC_ERR_OOM from the trace hook */
    char key[65];             /* the inputs' key of a --resume checkpoint */
} srun;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ===================================================================================== */
/* progress                                                                              */
/* ===================================================================================== */

static void progress(const srun *R, const char *what, int done, int total, double pass_t0) {
    if (!R->o || !R->o->progress) return;
    const double t = now_s(), el = t - pass_t0;
    const double gib = (double)qc_model_bytes_read(R->m) / (double)(1u << 30);
    const double rate = t > R->t0 ? gib * 1024.0 / (t - R->t0) : 0.0;
    const double eta = done > 0 ? el * (double)(total - done) / (double)done : 0.0;
    fprintf(stderr, "\rrecord: pass %d: %s %d/%d, %.2f GiB read (%.0f MiB/s), ETA %.0f s   ",
            R->pass + 1, what, done, total, gib, rate, eta);
    fflush(stderr);
}

/* ===================================================================================== */
/* execution                                                                             */
/* ===================================================================================== */

/* The trace hook during execution: the rows go to the call being executed. */
static void keep_cb(void *user, int index, const char *name, int start_pos, int n, int dim,
                    const float *data) {
    void **u = user; /* {srun *, tape_op *} */
    srun *R = u[0];
    if (tape_op_add_event(u[1], index, name, start_pos, n, dim, data)) R->trace_status = QC_ERR_OOM;
}

/* h [n, H] := the embedding rows of op's tokens (exact widening). */
static qc_status embed_call(srun *R, tape_op *op, qc_err *err) {
    const int H = R->m->cfg.hidden_size;
    op->h = malloc((size_t)op->n * H * sizeof(float));
    if (!op->h) return qc_errf(err, QC_ERR_OOM, "layer-major record: out of memory (activations)");
    for (int t = 0; t < op->n; t++) {
        qc_model_rows rows;
        qc_status s = qc_model_rows_acquire(R->m, &R->m->embed, op->tokens[t], op->tokens[t] + 1,
                                            &rows, err);
        if (s) return s;
        qc_tensor_to_f32(&rows.view, op->h + (size_t)t * H);
        qc_model_rows_release(R->m, &rows);
    }
    if (R->keep_trace && tape_op_add_event(op, 0, "hidden", op->start_pos, op->n, H, op->h))
        return qc_errf(err, QC_ERR_OOM, "layer-major record: out of memory (trace rows)");
    return QC_OK;
}

/* Snapshots of case t due after op j: layer l of the live state into them. */
static void take_snaps(tape_case *t, int j, int l) {
    for (int i = 0; i < t->n_snaps; i++)
        if (!t->snaps[i].done && t->snaps[i].boundary == j)
            qc_state_copy_layer(t->snaps[i].st, t->live, l, t->snaps[i].n_pos);
}

/* The options of a step: the backend's kernel defaults, the trace rows kept into u's op. */
static qc_call step_call(const srun *R, void *u) {
    qc_call k = qc_backend_call_defaults(&R->be->opts);
    k.trace = R->keep_trace ? keep_cb : NULL;
    k.trace_user = u;
    return k;
}

/* Layer l of every case's new ops. */
static qc_status run_layer(srun *R, int l, qc_err *err) {
    qc_backend *be = R->be;
    for (int c = 0; c < R->n_cases; c++) {
        tape_case *t = &R->tapes[c];
        for (int j = t->n_done; j <= t->n_ops; j++) {
            take_snaps(t, j, l);
            if (j == t->n_ops) break;
            tape_op *op = &t->ops[j];
            if (op->kind == TAPE_RESET) {
                qc_state_reset_layer(t->live, l);
                continue;
            }
            void *u[2] = {R, op};
            const qc_call k = step_call(R, u);
            qc_status s = be->step_layer(be, &k, l, op->h, op->n, op->start_pos, t->live, err);
            if (s) return qc_err_prefix(err, s, "case %s: layer %d", R->cases[c].name, l);
            if (R->trace_status)
                return qc_errf(err, QC_ERR_OOM, "layer-major record: out of memory (trace rows)");
        }
    }
    return QC_OK;
}

/* The final norm of every new call, in place. */
static qc_status run_norm(srun *R, qc_err *err) {
    qc_backend *be = R->be;
    const int H = R->m->cfg.hidden_size;
    for (int c = 0; c < R->n_cases; c++) {
        tape_case *t = &R->tapes[c];
        for (int j = t->n_done; j < t->n_ops; j++) {
            tape_op *op = &t->ops[j];
            if (op->kind != TAPE_CALL) continue;
            float *xn = malloc((size_t)op->n * H * sizeof(float));
            if (!xn) return qc_errf(err, QC_ERR_OOM, "layer-major record: out of memory");
            void *u[2] = {R, op};
            const qc_call k = step_call(R, u);
            qc_status s = be->step_norm(be, &k, op->h, xn, op->n, op->start_pos, err);
            free(op->h);
            op->h = xn;
            if (s) return s;
            if (R->trace_status)
                return qc_errf(err, QC_ERR_OOM, "layer-major record: out of memory (trace rows)");
        }
    }
    return QC_OK;
}

/* The output head in blocks of rows, every new call that wants logits per block. */
static qc_status run_head(srun *R, double pass_t0, qc_err *err) {
    qc_backend *be = R->be;
    const int H = R->m->cfg.hidden_size, V = R->m->cfg.vocab_size;
    for (int c = 0; c < R->n_cases; c++)
        for (int j = R->tapes[c].n_done; j < R->tapes[c].n_ops; j++) {
            tape_op *op = &R->tapes[c].ops[j];
            if (op->kind != TAPE_CALL || !op->want_logits) continue;
            op->logits = malloc((op->all_logits ? (size_t)op->n : 1) * V * sizeof(float));
            if (!op->logits) return qc_errf(err, QC_ERR_OOM, "layer-major record: out of memory (logits)");
        }
    int64_t B = R->o && R->o->head_block_rows > 0 ? R->o->head_block_rows : 4096;
    const int nblk = (int)((V + B - 1) / B);
    for (int b = 0; b < nblk; b++) {
        const int64_t v0 = (int64_t)b * B, v1 = v0 + B < V ? v0 + B : V;
        qc_model_rows rows;
        qc_status s = qc_model_rows_acquire(R->m, &R->m->lm_head, v0, v1, &rows, err);
        if (s) return s;
        for (int c = 0; c < R->n_cases && !s; c++)
            for (int j = R->tapes[c].n_done; j < R->tapes[c].n_ops && !s; j++) {
                tape_op *op = &R->tapes[c].ops[j];
                if (op->kind != TAPE_CALL || !op->want_logits) continue;
                const int rows_n = op->all_logits ? op->n : 1;
                const float *x = op->h + (size_t)(op->n - rows_n) * H;
                s = be->step_logits(be, x, rows_n, &rows.view, op->logits + v0, V, err);
            }
        qc_model_rows_release(R->m, &rows);
        if (s) return s;
        progress(R, "output head block", b + 1, nblk, pass_t0);
    }
    return QC_OK;
}

/* After a layer: the checkpoint (--resume). */
static qc_status checkpoint(srun *R, int next_layer, qc_err *err) {
    if (!R->o || !R->o->resume_dir) return QC_OK;
    return qc_resume_save(R->o->resume_dir, R->key, &R->m->cfg, R->tapes, R->complete,
                          R->n_cases, R->pass, next_layer, err);
}

/* Everything recorded and not yet executed, in one pass over the weights, from layer `first`
 * (0; a resumed pass: the layer after its checkpoint, the embeddings and earlier layers done). */
static qc_status execute(srun *R, int first, qc_err *err) {
    const qc_config *cfg = &R->m->cfg;
    const double pass_t0 = now_s();
    qc_status s = QC_OK;
    for (int c = 0; c < R->n_cases && !s && first == 0; c++) {
        tape_case *t = &R->tapes[c];
        if (!t->live)
            s = qc_state_create(cfg, R->cases[c].profile->max_context_len, &t->live, err);
        for (int i = 0; i < t->n_snaps && !s; i++)
            if (!t->snaps[i].done && t->snaps[i].boundary < t->n_done)
                s = qc_errf(err, QC_ERR_FORMAT, "layer-major record: case %s: a state read at "
                            "a point already executed", R->cases[c].name);
        for (int j = t->n_done; j < t->n_ops && !s; j++)
            if (t->ops[j].kind == TAPE_CALL) s = embed_call(R, &t->ops[j], err);
    }
    qc_model_tensor_drop(R->m, &R->m->embed);
    for (int l = first; l < cfg->n_layers && !s; l++) {
        if ((s = qc_model_layer_acquire(R->m, l, err))) break;
        qc_model_layer_prefetch(R->m, l + 1);
        s = run_layer(R, l, err);
        qc_model_layer_release(R->m, l);
        if (!s) s = checkpoint(R, l + 1, err);
        progress(R, "layer", l + 1, cfg->n_layers, pass_t0);
    }
    if (!s) s = run_norm(R, err);
    if (!s) s = run_head(R, pass_t0, err);
    for (int c = 0; c < R->n_cases; c++) {
        tape_case *t = &R->tapes[c];
        for (int j = t->n_done; j < t->n_ops; j++) {
            free(t->ops[j].h);
            t->ops[j].h = NULL;
        }
        if (s) continue;
        for (int i = 0; i < t->n_snaps; i++)
            if (t->snaps[i].boundary >= t->n_done) t->snaps[i].done = 1;
        t->n_done = t->n_ops;
    }
    if (R->o && R->o->progress) fprintf(stderr, "\n");
    R->pass++;
    return s;
}

/* ===================================================================================== */
/* rounds                                                                                */
/* ===================================================================================== */

/* Case c's runner against the tape with n_decode steps and no capture: records what is new. */
static qc_status record_pass(srun *R, int c, int n_decode, qc_err *err) {
    qc_stream_case *sc = &R->cases[c];
    tape_case *t = &R->tapes[c];
    R->cur = t;
    t->cursor = 0;
    t->n_new = 0;
    qc_case_input in = sc->in;
    in.capture_hidden = 0;
    in.n_decode = n_decode;
    qc_golden_case tmp;
    for (int i = 0; i < t->n_snaps; i++) t->snaps[i].wanted = 0;
    qc_status s = qc_run_case(R->tape_be, sc->profile, sc->name, &in, &tmp, err);
    if (!s) qc_case_free(&R->m->cfg, &tmp);
    if (!s) tape_case_drop_unwanted(t); /* e.g. a greedy case's state after fewer steps */
    return s;
}

/* Decode steps of case c's runner pass in this round: a greedy case one more per round. */
static int decode_in_round(const qc_stream_case *sc, int round) {
    const int S = sc->in.n_decode > 0 ? sc->in.n_decode : 0;
    if (sc->in.forced || S == 0) return S;
    return round < S ? round : S;
}

static qc_status rounds(srun *R, int round, qc_err *err) {
    for (;; round++) {
        int any_new = 0;
        for (int c = 0; c < R->n_cases; c++) {
            if (R->complete[c]) continue;
            const int nd = decode_in_round(&R->cases[c], round);
            qc_status s = record_pass(R, c, nd, err);
            if (s) return s;
            if (R->tapes[c].n_new == 0 && nd == (R->cases[c].in.n_decode > 0 ? R->cases[c].in.n_decode : 0))
                R->complete[c] = 1;
            else
                any_new = 1;
        }
        if (!any_new) return QC_OK;
        qc_status s = execute(R, 0, err);
        if (s) return s;
    }
}

/* The real run of every case: everything is played back from the tape. */
static qc_status playback(srun *R, qc_err *err) {
    for (int c = 0; c < R->n_cases; c++) {
        qc_stream_case *sc = &R->cases[c];
        tape_case *t = &R->tapes[c];
        R->cur = t;
        t->cursor = 0;
        t->n_new = 0;
        qc_status s = qc_record_run_case(R->tape_be, sc->profile, sc->name, &sc->in, sc->with_in,
                                         sc->out, err);
        if (!s && t->n_new) {
            qc_case_free(&R->m->cfg, sc->out);
            s = qc_errf(err, QC_ERR_FORMAT, "layer-major record: case %s: the final run asked "
                        "for what no pass computed", sc->name);
        }
        if (s) { /* a failed run's own output is freed by the runner */
            for (int k = 0; k < c; k++) qc_case_free(&R->m->cfg, R->cases[k].out);
            return s;
        }
    }
    return QC_OK;
}

/* The inputs' key: what a checkpoint must have been made of. */
static void inputs_key(const srun *R, char hex[65]) {
    qc_sha256_ctx h;
    qc_sha256_init(&h);
    const qc_model *m = R->m;
    const qc_backend *be = R->be;
    qc_sha256_update(&h, m->weights_sha256, sizeof m->weights_sha256);
    qc_sha256_update(&h, m->config_sha256, sizeof m->config_sha256);
    qc_sha256_update(&h, be->name, strlen(be->name) + 1);
    const int64_t o[4] = {be->opts.dn_kernel, be->opts.chunk_size, be->opts.max_tokens,
                          R->o && R->o->head_block_rows > 0 ? R->o->head_block_rows : 4096};
    qc_sha256_update(&h, o, sizeof o);
    for (int c = 0; c < R->n_cases; c++) {
        const qc_stream_case *sc = &R->cases[c];
        const int v[9] = {sc->profile->enable_dynamic_shape, sc->profile->use_kv_cache,
                          sc->profile->max_seq_len, sc->profile->max_context_len,
                          sc->in.n_history, sc->in.n_tokens, sc->in.n_decode,
                          sc->in.capture_hidden, sc->with_in};
        qc_sha256_update(&h, sc->name, strlen(sc->name) + 1);
        qc_sha256_update(&h, v, sizeof v);
        if (sc->in.n_history > 0) qc_sha256_update(&h, sc->in.history, (size_t)sc->in.n_history * 4);
        qc_sha256_update(&h, sc->in.tokens, (size_t)sc->in.n_tokens * 4);
        if (sc->in.forced) qc_sha256_update(&h, sc->in.forced, (size_t)sc->in.n_decode * 4);
    }
    uint8_t d[32];
    qc_sha256_final(&h, d);
    qc_sha256_to_hex(d, hex);
}

/* --resume: continue the pass a checkpoint stopped in (then the next round), or start one. */
static qc_status resume(srun *R, int *round, qc_stream_stats *stats, qc_err *err) {
    inputs_key(R, R->key);
    qc_status s = qc_resume_open_dir(R->o->resume_dir, err);
    if (s) return s;
    int *ctx = malloc((size_t)R->n_cases * sizeof *ctx);
    if (!ctx) return qc_errf(err, QC_ERR_OOM, "layer-major record: out of memory");
    for (int c = 0; c < R->n_cases; c++) ctx[c] = R->cases[c].profile->max_context_len;
    int pass = 0, layer = 0, found = 0;
    s = qc_resume_load(R->o->resume_dir, R->key, &R->m->cfg, R->tapes, R->complete, R->n_cases,
                       ctx, &pass, &layer, &found, err);
    free(ctx);
    if (s || !found) return s;
    if (stats) stats->resumed_pass = pass, stats->resumed_layer = layer;
    fprintf(stderr, "record: --resume: continuing pass %d at layer %d of %d (%s)\n", pass + 1,
                layer, R->m->cfg.n_layers, R->o->resume_dir);
    R->pass = pass;
    s = execute(R, layer, err);
    *round = pass + 1;
    return s;
}

qc_status qc_record_stream_run(qc_backend *be, qc_model *m, qc_stream_case *cases, int n_cases,
                               const qc_stream_opts *opts, qc_stream_stats *stats, qc_err *err) {
    if (!be->step_layer || !be->step_norm || !be->step_logits)
        return qc_errf(err, QC_ERR_UNSUPPORTED, "--backend %s: no layer-major steps (a streamed "
                       "record needs the reference or optimized backend)", be->name);
    srun R;
    memset(&R, 0, sizeof R);
    R.be = be, R.m = m, R.cases = cases, R.n_cases = n_cases, R.o = opts, R.t0 = now_s();
    R.keep_trace = qc_cfg_is_moe(&m->cfg);
    for (int c = 0; c < n_cases; c++) R.keep_trace |= cases[c].in.capture_hidden;
    R.tapes = calloc((size_t)n_cases, sizeof *R.tapes);
    R.complete = calloc((size_t)n_cases, sizeof *R.complete);
    qc_status s = QC_OK;
    if (!R.tapes || !R.complete) s = qc_errf(err, QC_ERR_OOM, "layer-major record: out of memory");
    if (!s) s = tape_backend_create(be, &R.cur, &R.tape_be, err);
    int round = 0;
    if (stats) stats->resumed_pass = stats->resumed_layer = -1;
    if (!s && opts && opts->resume_dir) s = resume(&R, &round, stats, err);
    if (!s) s = rounds(&R, round, err);
    if (!s) s = playback(&R, err);
    if (!s && opts && opts->resume_dir) qc_resume_remove(opts->resume_dir);
    if (s && opts && opts->resume_dir) (void)rmdir(opts->resume_dir); /* only if no checkpoint */
    if (stats) {
        stats->passes = R.pass;
        stats->bytes_read = qc_model_bytes_read(m);
        stats->seconds = now_s() - R.t0;
    }
    for (int c = 0; R.tapes && c < n_cases; c++) tape_case_free(&R.tapes[c]);
    free(R.tapes);
    free(R.complete);
    qc_backend_destroy(R.tape_be);
    return s;
}

uint64_t qc_record_stream_extra_bytes(const qc_config *c, const qc_stream_case *cases,
                                      int n_cases, const qc_stream_opts *opts) {
    const uint64_t H = (uint64_t)c->hidden_size, L = (uint64_t)c->n_layers;
    const uint64_t B = opts && opts->head_block_rows > 0 ? (uint64_t)opts->head_block_rows : 4096;
    uint64_t total = B * H * 4; /* an output head block (at most fp32) */
    for (int i = 0; i < n_cases; i++) {
        const qc_stream_case *sc = &cases[i];
        const qc_profile *p = sc->profile;
        const uint64_t P = (uint64_t)(sc->in.n_history > 0 ? sc->in.n_history : 0);
        const uint64_t T = (uint64_t)sc->in.n_tokens, S = (uint64_t)(sc->in.n_decode > 0 ? sc->in.n_decode : 0);
        uint64_t tok = P + T + S; /* tokens of all calls */
        if (qc_profile_mode(p) == QC_MODE_NOKV) { /* every chunk and step recomputes it all */
            const uint64_t msl = (uint64_t)(p->max_seq_len > 0 ? p->max_seq_len : 1);
            tok *= (P + msl - 1) / msl + (T + msl - 1) / msl + S;
        }
        total += tok * H * 4 * 2;                     /* activations: h and the final norm */
        if (sc->in.capture_hidden || qc_cfg_is_moe(c)) total += tok * (L + 1) * H * 4 * 2;
        total += 3 * (uint64_t)qc_state_bytes(c, p->max_context_len); /* live + 2 snapshots */
    }
    return total;
}
