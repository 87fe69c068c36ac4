/* qc_record_resume.c — the checkpoint of a layer-major record (`record --stream --resume`):
 * after every layer, everything the run holds (each case's tape: calls, results, trace rows,
 * activations, snapshots, live state) is written to <out>.resume/checkpoint.bin (atomically:
 * temp file + rename, qc_out), so a run killed at any point resumes after its last completed
 * layer with the same result. The file starts with a key (the SHA-256 of the weights, the config,
 * the backend and its options, every case's inputs): a checkpoint of other inputs is refused.
 *
 * Format (native endianness; a checkpoint is read back on the machine that wrote it):
 *   "QCRESUME1\n" key[64] "\n" | i32 pass, next_layer, n_cases | per case: i32 complete, n_ops,
 *   n_done, n_snaps, has_live, live_ctx | ops | snapshots | live state
 * Every count is checked against the model and the case on reading: a damaged file is an
 * error naming it, never a crash.
 */
#include "qc_record_resume.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qc_outpath.h"

static const char MAGIC[] = "QCRESUME1\n";

/* ===================================================================================== */
/* writing: a buffered qc_out                                                            */
/* ===================================================================================== */

typedef struct {
    qc_out o;
    unsigned char *buf;
    size_t n, cap;
    qc_status st;
    qc_err *err;
} wbuf;

static void w_flush(wbuf *w) {
    if (!w->st && w->n) w->st = qc_out_write(&w->o, w->buf, w->n, w->err);
    w->n = 0;
}

static void w_bytes(wbuf *w, const void *p, size_t n) {
    if (w->st) return;
    if (n >= w->cap) {
        w_flush(w);
        if (!w->st) w->st = qc_out_write(&w->o, p, n, w->err);
        return;
    }
    if (w->n + n > w->cap) w_flush(w);
    memcpy(w->buf + w->n, p, n);
    w->n += n;
}


/* Every buffer of s in file order (per layer: k, v, conv, recurrent; absent ones skipped). */
static void each_state_buf(qc_state *s, void (*fn)(void *ctx, float *p, size_t n), void *ctx) {
    const size_t kv = (size_t)s->n_kv_heads * s->max_context_len * s->head_dim;
    const size_t conv = (size_t)s->conv_dim * s->conv_kernel;
    const size_t rec = (size_t)s->n_v_heads * s->k_dim * s->v_dim;
    for (int l = 0; l < s->n_layers; l++) {
        if (s->k_cache[l]) fn(ctx, s->k_cache[l], kv);
        if (s->v_cache[l]) fn(ctx, s->v_cache[l], kv);
        if (s->conv_state[l]) fn(ctx, s->conv_state[l], conv);
        if (s->recurrent_state[l]) fn(ctx, s->recurrent_state[l], rec);
    }
}

static void w_buf(void *w, float *p, size_t n) { w_bytes(w, p, n * sizeof(float)); }
static void w_state(wbuf *w, const qc_state *s) { each_state_buf((qc_state *)s, w_buf, w); }

static void w_op(wbuf *w, const tape_op *op, int V, int H) {
    const int has_logits = op->logits != NULL, has_h = op->h != NULL;
    const int ints[8] = {(int)op->kind, op->n, op->start_pos, op->want_logits, op->all_logits,
                         has_logits, has_h, op->n_ev};
    w_bytes(w, ints, sizeof ints);
    if (op->kind == TAPE_CALL) w_bytes(w, op->tokens, (size_t)op->n * sizeof(int32_t));
    if (has_logits) w_bytes(w, op->logits, (op->all_logits ? (size_t)op->n : 1) * V * sizeof(float));
    if (has_h) w_bytes(w, op->h, (size_t)op->n * H * sizeof(float));
    for (int e = 0; e < op->n_ev; e++) {
        const tape_event *ev = &op->ev[e];
        w_bytes(w, ev->name, sizeof ev->name);
        const int ei[4] = {ev->index, ev->start_pos, ev->n, ev->dim};
        w_bytes(w, ei, sizeof ei);
        w_bytes(w, ev->data, (size_t)ev->n * ev->dim * sizeof(float));
    }
}

qc_status qc_resume_save(const char *dir, const char *key, const qc_config *cfg,
                         const tape_case *tapes, const int *complete, int n_cases, int pass,
                         int next_layer, qc_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/checkpoint.bin", dir);
    wbuf w = {.cap = 1 << 20, .err = err};
    w.buf = malloc(w.cap);
    if (!w.buf) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    w.st = qc_out_open(&w.o, path, QC_OUT_REGULAR | QC_OUT_FORCE, err);
    if (w.st) {
        free(w.buf);
        return w.st;
    }
    w_bytes(&w, MAGIC, sizeof MAGIC - 1);
    w_bytes(&w, key, 64);
    w_bytes(&w, "\n", 1);
    const int head[3] = {pass, next_layer, n_cases};
    w_bytes(&w, head, sizeof head);
    for (int c = 0; c < n_cases; c++) {
        const tape_case *t = &tapes[c];
        const int ci[6] = {complete[c], t->n_ops, t->n_done, t->n_snaps, t->live != NULL,
                           t->live ? t->live->max_context_len : 0};
        w_bytes(&w, ci, sizeof ci);
        for (int j = 0; j < t->n_ops; j++) w_op(&w, &t->ops[j], cfg->vocab_size, cfg->hidden_size);
        for (int i = 0; i < t->n_snaps; i++) {
            const tape_snap *sn = &t->snaps[i];
            const int si[4] = {sn->boundary, sn->n_pos, sn->done, sn->wanted};
            w_bytes(&w, si, sizeof si);
            w_state(&w, sn->st);
        }
        if (t->live) w_state(&w, t->live);
    }
    w_flush(&w);
    qc_status st = w.st ? w.st : qc_out_commit(&w.o, err);
    if (st) qc_out_abort(&w.o);
    free(w.buf);
    return st ? qc_err_prefix(err, st, "--resume checkpoint") : QC_OK;
}

/* ===================================================================================== */
/* reading                                                                               */
/* ===================================================================================== */

typedef struct {
    FILE *f;
    const char *path;
    qc_err *err;
    qc_status st;
} rbuf;

static int r_bytes(rbuf *r, void *p, size_t n) {
    if (r->st) return 0;
    if (fread(p, 1, n, r->f) != n)
        r->st = qc_errf(r->err, QC_ERR_FORMAT, "%s: truncated checkpoint (at byte %ld)", r->path,
                        ftell(r->f));
    return !r->st;
}

/* An int in [lo, hi], else a format error naming `what`. */
static int r_int(rbuf *r, int lo, int hi, const char *what) {
    int v = 0;
    if (!r_bytes(r, &v, sizeof v)) return lo;
    if (v < lo || v > hi) {
        r->st = qc_errf(r->err, QC_ERR_FORMAT, "%s: %s %d outside [%d, %d]", r->path, what, v, lo, hi);
        return lo;
    }
    return v;
}

static float *r_floats(rbuf *r, size_t n) {
    if (r->st) return NULL;
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) {
        r->st = qc_errf(r->err, QC_ERR_OOM, "%s: out of memory", r->path);
        return NULL;
    }
    if (!r_bytes(r, p, n * sizeof(float))) {
        free(p);
        return NULL;
    }
    return p;
}

static void r_buf(void *r, float *p, size_t n) { r_bytes(r, p, n * sizeof(float)); }
static void r_state(rbuf *r, qc_state *s) { each_state_buf(s, r_buf, r); }

static void r_op(rbuf *r, tape_op *op, const qc_config *cfg, int max_ctx) {
    const int L = cfg->n_layers, V = cfg->vocab_size, H = cfg->hidden_size;
    op->kind = (tape_kind)r_int(r, 0, 1, "op kind");
    op->n = r_int(r, 0, max_ctx, "tokens of a call");
    op->start_pos = r_int(r, 0, max_ctx, "start position");
    op->want_logits = r_int(r, 0, 1, "logits flag");
    op->all_logits = r_int(r, 0, 1, "all-logits flag");
    const int has_logits = r_int(r, 0, 1, "logits present");
    const int has_h = r_int(r, 0, 1, "activations present");
    const int n_ev = r_int(r, 0, 3 * (L + 1), "trace rows");
    if (r->st) return;
    if (op->kind == TAPE_CALL) {
        op->tokens = malloc(((size_t)op->n + 1) * sizeof(int32_t));
        if (!op->tokens || !r_bytes(r, op->tokens, (size_t)op->n * sizeof(int32_t))) {
            if (!r->st) r->st = qc_errf(r->err, QC_ERR_OOM, "%s: out of memory", r->path);
            return;
        }
    }
    if (has_logits) op->logits = r_floats(r, (op->all_logits ? (size_t)op->n : 1) * V);
    if (has_h) op->h = r_floats(r, (size_t)op->n * H);
    for (int e = 0; e < n_ev && !r->st; e++) {
        char name[16];
        r_bytes(r, name, sizeof name);
        name[15] = '\0';
        const int idx = r_int(r, 0, L, "trace index");
        const int sp = r_int(r, 0, max_ctx, "trace position");
        const int n = r_int(r, 0, max_ctx, "trace rows");
        const int dim = r_int(r, 1, H > 2 * cfg->n_experts_per_tok ? H : 2 * cfg->n_experts_per_tok,
                              "trace width");
        float *d = r_floats(r, (size_t)n * dim);
        if (d && tape_op_add_event(op, idx, name, sp, n, dim, d))
            r->st = qc_errf(r->err, QC_ERR_OOM, "%s: out of memory", r->path);
        free(d);
    }
}

qc_status qc_resume_load(const char *dir, const char *key, const qc_config *cfg, tape_case *tapes,
                         int *complete, int n_cases, const int *case_ctx, int *pass,
                         int *next_layer, int *found, qc_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/checkpoint.bin", dir);
    *found = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return QC_OK;
        return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    rbuf r = {f, path, err, QC_OK};
    char head[sizeof MAGIC - 1 + 65];
    r_bytes(&r, head, sizeof head);
    if (!r.st && (memcmp(head, MAGIC, sizeof MAGIC - 1) || head[sizeof head - 1] != '\n'))
        r.st = qc_errf(err, QC_ERR_FORMAT, "%s: not a qwen-conform record checkpoint", path);
    if (!r.st && memcmp(head + sizeof MAGIC - 1, key, 64))
        r.st = qc_errf(err, QC_ERR_ARG, "%s: made for other inputs (weights, config, backend, "
                       "options or cases differ): remove %s or run without --resume", path, dir);
    *pass = r_int(&r, 0, 1 << 24, "pass");
    *next_layer = r_int(&r, 0, cfg->n_layers, "next layer");
    r_int(&r, n_cases, n_cases, "cases");
    for (int c = 0; c < n_cases && !r.st; c++) {
        tape_case *t = &tapes[c];
        const int ctx = case_ctx[c];
        complete[c] = r_int(&r, 0, 1, "complete flag");
        const int n_ops = r_int(&r, 0, 1 << 24, "calls");
        t->n_done = r_int(&r, 0, n_ops, "calls executed");
        const int n_snaps = r_int(&r, 0, 1 << 16, "snapshots");
        const int has_live = r_int(&r, 0, 1, "live state flag");
        const int live_ctx = r_int(&r, 0, ctx, "live state capacity");
        if (r.st) break;
        t->ops = calloc((size_t)n_ops + 1, sizeof *t->ops);
        t->snaps = calloc((size_t)n_snaps + 1, sizeof *t->snaps);
        if (!t->ops || !t->snaps) {
            r.st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
            break;
        }
        t->cap_ops = n_ops + 1;
        t->cap_snaps = n_snaps + 1;
        for (; t->n_ops < n_ops && !r.st; t->n_ops++) r_op(&r, &t->ops[t->n_ops], cfg, ctx);
        for (; t->n_snaps < n_snaps && !r.st; t->n_snaps++) {
            tape_snap *sn = &t->snaps[t->n_snaps];
            sn->boundary = r_int(&r, 0, n_ops, "snapshot point");
            sn->n_pos = r_int(&r, 0, ctx, "snapshot positions");
            sn->done = r_int(&r, 0, 1, "snapshot done");
            sn->wanted = r_int(&r, 0, 1, "snapshot wanted");
            if (!r.st) r.st = qc_state_create(cfg, sn->n_pos > 0 ? sn->n_pos : 1, &sn->st, err);
            if (!r.st) r_state(&r, sn->st);
        }
        if (has_live && !r.st && !(r.st = qc_state_create(cfg, live_ctx, &t->live, err)))
            r_state(&r, t->live);
    }
    if (!r.st && fgetc(f) != EOF)
        r.st = qc_errf(err, QC_ERR_FORMAT, "%s: bytes after the checkpoint's end", path);
    fclose(f);
    if (r.st) {
        for (int c = 0; c < n_cases; c++) tape_case_free(&tapes[c]);
        return r.st;
    }
    *found = 1;
    return QC_OK;
}

/* The temp files of checkpoints whose writer was killed mid-write (SIGKILL, power loss):
 * checkpoint.bin.tmp.<pid>.<n> (qc_out's naming); nothing else in the directory is touched. */
static void remove_stale_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "checkpoint.bin.tmp.", 19)) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        (void)unlink(path);
    }
    closedir(d);
}

qc_status qc_resume_open_dir(const char *dir, qc_err *err) {
    struct stat sb;
    if (lstat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return qc_errf(err, QC_ERR_ARG, "%s: exists and is not a directory (the --resume "
                           "checkpoint directory)", dir);
        remove_stale_temps(dir);
        return QC_OK;
    }
    if (mkdir(dir, 0700) != 0)
        return qc_errf(err, QC_ERR_IO, "%s: cannot create the --resume checkpoint directory: %s",
                       dir, strerror(errno));
    return QC_OK;
}

void qc_resume_remove(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/checkpoint.bin", dir);
    (void)unlink(path);
    remove_stale_temps(dir);
    (void)rmdir(dir); /* only if empty: nothing of anyone else's goes */
}
