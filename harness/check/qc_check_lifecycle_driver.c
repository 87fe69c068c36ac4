/* qc_check_lifecycle_driver.c — the driver of the state lifecycle checks (qc_check_lifecycle.h):
 * a backend's sequences, snapshots, resets, fills, trims and fed tokens on a built-in backend
 * (our qc_state objects) or a runtime under test (through its capabilities), the recorded
 * logits and states, and their comparison as one row. The checks (qc_check_lifecycle.c,
 * qc_check_lifecycle_seq.c) call it; it calls neither back (tests/check_cycles.py).
 */

#include "qc_check_lifecycle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_remote.h"

/* ===================================================================================== */
/* the driver                                                                            */
/* ===================================================================================== */

static qc_state *cur_state(lc_rt *lc) {
    if (!lc->native) return lc->seq[0];
    int i = lc->cur;
    if (lc->c->o->faults.slot_off_by_one && i > 0) i--; /* fault: slot = seq - 1 */
    return lc->seq[i];
}

qc_status lc_open(lc_rt *lc, ck_ctx *c, qc_backend *be, const char *bname,
                  const qc_golden_case *gc, qc_mode mode, qc_err *err) {
    memset(lc, 0, sizeof *lc);
    lc->c = c, lc->be = be, lc->gc = gc, lc->bname = bname, lc->mode = mode;
    lc->mname = qc_mode_str(mode);
    lc->native = be->reset == NULL && be->sync_state == NULL;
    lc->V = c->cfg->vocab_size;
    int msl = gc->max_seq_len > 0 ? gc->max_seq_len : 128;
    int cm = mode == QC_MODE_STATIC ? 1 : msl;
    if (be->max_tokens_per_call > 0 && cm > be->max_tokens_per_call) cm = be->max_tokens_per_call;
    if (cm > be->opts.max_tokens) cm = be->opts.max_tokens;
    lc->call_max = cm < 1 ? 1 : cm;
    lc->n_pre = gc->n_history + gc->n_tokens;
    lc->n_dec = gc->n_decode < LC_MAX_DECODE ? gc->n_decode : LC_MAX_DECODE;
    lc->n_all = lc->n_pre + lc->n_dec;
    lc->cap = lc->n_all + 16;
    if (be->max_context_len > 0 && lc->cap > be->max_context_len) lc->cap = be->max_context_len;
    for (int i = 0; i < LC_SNAP; i++) lc->snap_pos[i] = -1;
    lc->toks = malloc((size_t)(lc->n_all + 1) * sizeof(int32_t));
    if (!lc->toks) return qc_errf(err, QC_ERR_OOM, "lifecycle: out of memory");
    if (gc->n_history > 0) memcpy(lc->toks, gc->history, (size_t)gc->n_history * sizeof(int32_t));
    memcpy(lc->toks + gc->n_history, gc->tokens, (size_t)gc->n_tokens * sizeof(int32_t));
    if (lc->n_dec > 0)
        memcpy(lc->toks + lc->n_pre, gc->decode_tokens, (size_t)lc->n_dec * sizeof(int32_t));
    for (int i = 0; i < (lc->native ? LC_SEQ : 1); i++) {
        qc_status s = qc_state_create(c->cfg, lc->cap, &lc->seq[i], err);
        if (s) return s;
    }
    return QC_OK;
}

void lc_close(lc_rt *lc) {
    for (int i = 0; i < LC_SEQ; i++) qc_state_destroy(lc->seq[i]);
    for (int i = 0; i < LC_SNAP; i++) qc_state_destroy(lc->snap[i]);
    free(lc->toks);
    if (!lc->native && lc->be->select_seq && lc->cur != 0) {
        qc_err e;
        lc->be->select_seq(lc->be, 0, &e); /* leave the runtime on its default sequence */
    }
    memset(lc, 0, sizeof *lc);
}

qc_status lc_rec_init(lc_rt *lc, lc_rec *r, qc_err *err) {
    memset(r, 0, sizeof *r);
    r->cap_rows = lc->cap;
    r->pos0 = -1;
    r->logits = malloc((size_t)r->cap_rows * lc->V * sizeof(float));
    return r->logits ? QC_OK : qc_errf(err, QC_ERR_OOM, "lifecycle: out of memory");
}

void lc_rec_free(lc_rt *lc, lc_rec *r) {
    free(r->logits);
    qc_golden_state_free(lc->c->cfg, &r->st);
    memset(r, 0, sizeof *r);
}

qc_status lc_select(lc_rt *lc, int seq, qc_err *err) {
    if (seq < 0 || seq >= LC_SEQ) return qc_errf(err, QC_ERR_ARG, "lifecycle: sequence %d", seq);
    if (!lc->native) {
        if (!lc->be->select_seq || !(lc->be->caps & QC_BE_CAP_SEQUENCES))
            return qc_errf(err, QC_ERR_UNSUPPORTED, "capability 'sequences' not announced by %s",
                           lc->bname);
        qc_status s = lc->be->select_seq(lc->be, seq, err);
        if (s) return s;
    }
    lc->cur = seq;
    return QC_OK;
}

qc_status lc_reset(lc_rt *lc, qc_err *err) {
    qc_state *st = cur_state(lc);
    qc_status s = lc->native ? (qc_state_reset(st), QC_OK) : qc_backend_reset(lc->be, st, err);
    if (!s) lc->pos[lc->cur] = 0;
    return s;
}

qc_status lc_feed(lc_rt *lc, const int32_t *t, int n, int call, lc_rec *rec, qc_err *err) {
    if (call <= 0 || call > lc->call_max) call = lc->call_max;
    for (int o = 0; o < n; o += call) {
        int k = n - o < call ? n - o : call;
        int start = lc->pos[lc->cur];
        if (rec && rec->rows + k > rec->cap_rows)
            return qc_errf(err, QC_ERR_RANGE, "lifecycle: %d logits rows > %d", rec->rows + k,
                           rec->cap_rows);
        float *dst = rec ? rec->logits + (size_t)rec->rows * lc->V : NULL;
        qc_state *st = cur_state(lc);
        qc_status s = qc_backend_forward(lc->be, t + o, k, start, st, dst, 1, err);
        if (s) return s;
        if (rec) {
            if (rec->pos0 < 0) rec->pos0 = start;
            rec->rows += k;
        }
        lc->pos[lc->cur] = start + k;
        st->pos = start + k;
    }
    return QC_OK;
}

static qc_status need(lc_rt *lc, unsigned cap, const char *name, qc_err *err) {
    if (lc->native || (lc->be->caps & cap)) return QC_OK;
    return qc_errf(err, QC_ERR_UNSUPPORTED, "capability '%s' not announced by %s", name, lc->bname);
}

qc_status lc_snapshot(lc_rt *lc, int slot, qc_err *err) {
    qc_status s = need(lc, QC_BE_CAP_SNAPSHOT, "snapshot", err);
    if (s) return s;
    if (lc->native) {
        if (!lc->snap[slot] && (s = qc_state_create(lc->c->cfg, lc->cap, &lc->snap[slot], err)))
            return s;
        if (!lc->c->o->faults.snapshot_noop) qc_state_copy(lc->snap[slot], cur_state(lc));
    } else if ((s = lc->be->snapshot(lc->be, slot, err))) {
        return s;
    }
    lc->snap_pos[slot] = lc->pos[lc->cur];
    return QC_OK;
}

qc_status lc_restore(lc_rt *lc, int slot, qc_err *err) {
    qc_status s = need(lc, QC_BE_CAP_SNAPSHOT, "snapshot", err);
    if (s) return s;
    if (lc->snap_pos[slot] < 0)
        return qc_errf(err, QC_ERR_ARG, "lifecycle: snapshot %d never written", slot);
    if (lc->native) {
        qc_state *st = cur_state(lc);
        if (lc->c->o->faults.snapshot_noop) {
            /* fault: nothing was saved, nothing comes back (only the position) */
        } else if (lc->rollback_scope && lc->c->o->faults.rollback_keeps_conv) {
            /* fault: the rollback restores everything but the conv states */
            float **keep = st->conv_state;
            qc_state tmp = *lc->snap[slot];
            tmp.conv_state = keep;
            qc_state_copy(st, &tmp);
        } else {
            qc_state_copy(st, lc->snap[slot]);
        }
        st->pos = lc->snap_pos[slot];
    } else if ((s = lc->be->restore(lc->be, slot, err))) {
        return s;
    }
    lc->pos[lc->cur] = lc->snap_pos[slot];
    return QC_OK;
}

qc_status lc_fill(lc_rt *lc, float v, qc_err *err) {
    qc_status s = need(lc, QC_BE_CAP_STATE_FILL, "state_fill", err);
    if (s) return s;
    if (lc->native) {
        qc_state_fill(cur_state(lc), v);
        return QC_OK;
    }
    return qc_backend_fill_state(lc->be, cur_state(lc), v, err);
}

qc_status lc_trim(lc_rt *lc, int n_pos, qc_err *err) {
    if (lc->native || !lc->be->trim || !(lc->be->caps & QC_BE_CAP_TRIM))
        return qc_errf(err, QC_ERR_UNSUPPORTED, "capability 'trim' not announced by %s",
                       lc->bname);
    qc_status s = lc->be->trim(lc->be, n_pos, err);
    if (!s) lc->pos[lc->cur] = n_pos;
    return s;
}

qc_status lc_read_state(lc_rt *lc, lc_rec *r, qc_err *err) {
    qc_golden_state_free(lc->c->cfg, &r->st);
    memset(&r->st, 0, sizeof r->st);
    if (!lc->native && !(lc->be->caps & QC_BE_CAP_STATE_READ)) return QC_OK; /* logits only */
    int n = lc->pos[lc->cur];
    qc_state *st = cur_state(lc);
    qc_status s = lc->native ? QC_OK : qc_backend_sync_state(lc->be, st, n, err);
    if (!s) s = qc_golden_state_from(lc->c->cfg, st, n, &r->st, err);
    return s;
}

int32_t lc_alt(const lc_rt *lc, int32_t t, int k) {
    return (int32_t)(((int64_t)t + 1 + k) % lc->V);
}

/* ===================================================================================== */
/* rows                                                                                  */
/* ===================================================================================== */

void lc_emit_failed(lc_rt *lc, const char *check, qc_status s, const char *msg) {
    ck_emit_simple(lc->c, lc->gc->name, lc->bname, lc->mname, check, ck_failed_run_verdict(s),
                   msg, NULL);
}

void lc_compare(lc_rt *lc, const char *check, const lc_rec *a, const lc_rec *b, int n,
                const char *const *labels, const char *extra) {
    const qc_config *cfg = lc->c->cfg;
    ck_partlist *pl = calloc(1, sizeof *pl);
    if (!pl) return;
    for (int i = 0; i < n; i++) {
        char path[160], when[96];
        if (a[i].rows != b[i].rows || a[i].pos0 != b[i].pos0) {
            snprintf(pl->problem, sizeof pl->problem, "%s: %d logits rows from position %d, "
                     "expected %d from %d", labels[i], a[i].rows, a[i].pos0, b[i].rows, b[i].pos0);
            break;
        }
        qc_tdesc d;
        snprintf(path, sizeof path, "%s/logits", labels[i]);
        if (a[i].rows > 0) {
            ck_desc_logits(&d, path, a[i].rows, lc->V, a[i].pos0, 0);
            ck_pl_add(pl, &d, a[i].logits, b[i].logits);
        }
        snprintf(when, sizeof when, "%s", labels[i]);
        ck_add_state_parts(pl, cfg, when, -1, &a[i].st, &b[i].st);
        if (pl->n >= MAX_PARTS) {
            snprintf(pl->problem, sizeof pl->problem, "too many tensors to compare in one row");
            break;
        }
    }
    int bitwise = lc->native;
    char ex[600];
    snprintf(ex, sizeof ex, "%s; %s (actual) vs a fresh run of the same tokens in the same calls "
             "(expected)%s", extra, lc->bname, bitwise ? ", bit for bit" : "");
    cmp_spec s = {.case_name = lc->gc->name, .backend = lc->bname, .mode = lc->mname,
                  .check = check, .bitwise = bitwise, .extra = ex};
    ck_compare_parts(lc->c, &s, pl);
    free(pl);
}


/* 1 when the backend can run the check; else a SKIP row naming the first missing capability. */
int lc_can(lc_rt *lc, const char *check, unsigned caps) {
    if (lc->native) caps &= QC_BE_CAP_TRIM; /* a built-in backend has all but trim */
    static const struct { unsigned bit; const char *name; } names[] = {
        {QC_BE_CAP_SNAPSHOT, "snapshot"}, {QC_BE_CAP_SEQUENCES, "sequences"},
        {QC_BE_CAP_TRIM, "trim"}, {QC_BE_CAP_STATE_FILL, "state_fill"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((caps & names[i].bit) && (lc->native || !(lc->be->caps & names[i].bit))) {
            char k[400];
            snprintf(k, sizeof k, "capability '%s' not announced by %s", names[i].name, lc->bname);
            ck_emit_simple(lc->c, lc->gc->name, lc->bname, lc->mname, check, QC_VERDICT_SKIP, k,
                           NULL);
            return 0;
        }
    return 1;
}
