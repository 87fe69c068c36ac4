/* qc_record_tape.c — the tape backend of a layer-major record (qc_record_tape.h): records what
 * the case runner asks, plays back what the layer-major execution computed.
 */
#include "qc_record_tape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    qc_backend *real;  /* the backend whose steps execute the tape (borrowed) */
    tape_case **cur;   /* the case being run (set by the driver) */
} tape_impl;

static tape_case *current(const qc_backend *be) { return *((tape_impl *)be->impl)->cur; }

/* A runner pass that does not repeat what an earlier pass recorded (a bug, not bad input). */
static qc_status diverged(tape_case *t, qc_err *err, const char *what) {
    t->diverged = 1;
    snprintf(t->why, sizeof t->why, "op %d: %s", t->cursor, what);
    return qc_errf(err, QC_ERR_FORMAT, "layer-major record: the case runner's call %d differs "
                   "from its first run (%s)", t->cursor, what);
}

static int same_call(const tape_op *op, const int32_t *tokens, int n, int start_pos,
                     const float *logits, int all_logits) {
    return op->kind == TAPE_CALL && op->n == n && op->start_pos == start_pos &&
           !memcmp(op->tokens, tokens, (size_t)n * sizeof *tokens) &&
           op->want_logits == (logits != NULL) && (!logits || op->all_logits == all_logits);
}

/* Play an executed call back: its logits, its trace rows. */
static void play(qc_backend *be, const qc_call *call, const tape_op *op, float *logits) {
    const size_t V = (size_t)be->model->cfg.vocab_size;
    if (logits) memcpy(logits, op->logits, (op->all_logits ? (size_t)op->n : 1) * V * sizeof(float));
    if (!call->trace) return;
    for (int i = 0; i < op->n_ev; i++) {
        const tape_event *e = &op->ev[i];
        call->trace(call->trace_user, e->index, e->name, e->start_pos, e->n, e->dim, e->data);
    }
}

static qc_status grow_ops(tape_case *t, qc_err *err) {
    if (t->n_ops < t->cap_ops) return QC_OK;
    int nc = t->cap_ops ? 2 * t->cap_ops : 64;
    tape_op *no = realloc(t->ops, (size_t)nc * sizeof *no);
    if (!no) return qc_errf(err, QC_ERR_OOM, "layer-major record: out of memory (calls)");
    memset(no + t->cap_ops, 0, (size_t)(nc - t->cap_ops) * sizeof *no);
    t->ops = no;
    t->cap_ops = nc;
    return QC_OK;
}

static qc_status tape_forward(qc_backend *be, const qc_call *call, const int32_t *tokens, int n,
                              int start_pos, qc_state *st, float *logits, int all_logits,
                              qc_err *err) {
    (void)st;
    tape_case *t = current(be);
    if (t->cursor < t->n_done) {
        const tape_op *op = &t->ops[t->cursor];
        if (!same_call(op, tokens, n, start_pos, logits, all_logits))
            return diverged(t, err, "another forward call");
        play(be, call, op, logits);
        t->cursor++;
        return QC_OK;
    }
    if (t->cursor != t->n_ops) return diverged(t, err, "a call recorded but not executed");
    qc_status s = grow_ops(t, err);
    if (s) return s;
    tape_op *op = &t->ops[t->n_ops];
    memset(op, 0, sizeof *op);
    op->kind = TAPE_CALL;
    op->tokens = malloc((size_t)n * sizeof *tokens);
    if (!op->tokens) return qc_errf(err, QC_ERR_OOM, "layer-major record: out of memory (calls)");
    memcpy(op->tokens, tokens, (size_t)n * sizeof *tokens);
    op->n = n;
    op->start_pos = start_pos;
    op->want_logits = logits != NULL;
    op->all_logits = logits ? all_logits : 0;
    t->n_ops++;
    t->cursor++;
    t->n_new++;
    if (logits) /* answered later: zeros now (this runner pass is only recording) */
        memset(logits, 0, (all_logits ? (size_t)n : 1) * be->model->cfg.vocab_size * sizeof(float));
    return QC_OK;
}

static qc_status tape_reset(qc_backend *be, qc_err *err) {
    tape_case *t = current(be);
    if (t->cursor < t->n_done) {
        if (t->ops[t->cursor].kind != TAPE_RESET) return diverged(t, err, "a reset");
        t->cursor++;
        return QC_OK;
    }
    if (t->cursor != t->n_ops) return diverged(t, err, "a reset recorded but not executed");
    qc_status s = grow_ops(t, err);
    if (s) return s;
    memset(&t->ops[t->n_ops], 0, sizeof t->ops[0]);
    t->ops[t->n_ops].kind = TAPE_RESET;
    t->n_ops++;
    t->cursor++;
    t->n_new++;
    return QC_OK;
}

/* The runner's state read: a snapshot taken at this point of the tape, or a request for one. */
static qc_status tape_sync(qc_backend *be, qc_state *st, int n_pos, qc_err *err) {
    tape_case *t = current(be);
    for (int i = 0; i < t->n_snaps; i++) {
        tape_snap *sn = &t->snaps[i];
        if (sn->boundary != t->cursor || sn->n_pos != n_pos) continue;
        if (sn->done)
            for (int l = 0; l < st->n_layers; l++) qc_state_copy_layer(st, sn->st, l, n_pos);
        sn->wanted = 1;
        return QC_OK;
    }
    if (t->n_snaps == t->cap_snaps) {
        int nc = t->cap_snaps ? 2 * t->cap_snaps : 8;
        tape_snap *ns = realloc(t->snaps, (size_t)nc * sizeof *ns);
        if (!ns) return qc_errf(err, QC_ERR_OOM, "layer-major record: out of memory (snapshots)");
        t->snaps = ns;
        t->cap_snaps = nc;
    }
    tape_snap *sn = &t->snaps[t->n_snaps];
    memset(sn, 0, sizeof *sn);
    sn->boundary = t->cursor;
    sn->n_pos = n_pos;
    sn->wanted = 1;
    qc_status s = qc_state_create(&be->model->cfg, n_pos > 0 ? n_pos : 1, &sn->st, err);
    if (s) return s;
    t->n_snaps++;
    t->n_new++;
    return QC_OK;
}

static const char *tape_describe(const qc_backend *be) {
    const qc_backend *real = ((const tape_impl *)be->impl)->real;
    return real->describe ? real->describe(real) : real->name;
}

static void tape_destroy(qc_backend *be) {
    if (!be) return;
    free(be->impl);
    free(be);
}

qc_status tape_backend_create(qc_backend *real, tape_case **cur, qc_backend **out, qc_err *err) {
    *out = NULL;
    qc_backend *be = qc_backend_alloc();
    tape_impl *ti = calloc(1, sizeof *ti);
    if (!be || !ti) {
        free(be);
        free(ti);
        return qc_errf(err, QC_ERR_OOM, "layer-major record: out of memory");
    }
    ti->real = real;
    ti->cur = cur;
    be->name = real->name;
    be->model = real->model;
    qc_backend_opts o = real->opts; /* the defaults of the runner's calls: no trace */
    o.trace = NULL;
    o.trace_user = NULL;
    be->opts = o;
    be->impl = ti;
    be->caps = (real->caps | QC_BE_CAP_STATE_READ) & ~QC_BE_CAP_TOPK_ONLY;
    be->max_tokens_per_call = real->max_tokens_per_call;
    be->max_context_len = real->max_context_len;
    be->max_chunk_tokens = real->max_chunk_tokens;
    be->forward = tape_forward;
    be->reset = tape_reset;
    be->sync_state = tape_sync;
    be->describe = tape_describe;
    be->destroy = tape_destroy;
    *out = be;
    return QC_OK;
}

qc_status tape_op_add_event(tape_op *op, int index, const char *name, int start_pos, int n, int dim,
                            const float *data) {
    if (op->n_ev == op->cap_ev) {
        int nc = op->cap_ev ? 2 * op->cap_ev : 16;
        tape_event *ne = realloc(op->ev, (size_t)nc * sizeof *ne);
        if (!ne) return QC_ERR_OOM;
        op->ev = ne;
        op->cap_ev = nc;
    }
    tape_event *e = &op->ev[op->n_ev];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name ? name : "hidden");
    e->index = index;
    e->start_pos = start_pos;
    e->n = n;
    e->dim = dim;
    e->data = malloc((size_t)n * dim * sizeof(float));
    if (!e->data) return QC_ERR_OOM;
    memcpy(e->data, data, (size_t)n * dim * sizeof(float));
    op->n_ev++;
    return QC_OK;
}

void tape_case_drop_unwanted(tape_case *t) {
    int k = 0;
    for (int i = 0; i < t->n_snaps; i++) {
        if (t->snaps[i].done && !t->snaps[i].wanted) qc_state_destroy(t->snaps[i].st);
        else t->snaps[k++] = t->snaps[i];
    }
    t->n_snaps = k;
}

void tape_case_free(tape_case *t) {
    for (int i = 0; i < t->n_ops; i++) {
        tape_op *op = &t->ops[i];
        for (int e = 0; e < op->n_ev; e++) free(op->ev[e].data);
        free(op->ev);
        free(op->tokens);
        free(op->logits);
        free(op->h);
    }
    free(t->ops);
    for (int i = 0; i < t->n_snaps; i++) qc_state_destroy(t->snaps[i].st);
    free(t->snaps);
    qc_state_destroy(t->live);
    memset(t, 0, sizeof *t);
}
