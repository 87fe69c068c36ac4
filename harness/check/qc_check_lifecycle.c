/* qc_check_lifecycle.c — the state lifecycle checks (snapshot / restore / fork, rollback, prefix
 * reuse) and their driver (see qc_check_lifecycle.h); multi_sequence / batch_invariance are in
 * qc_check_lifecycle_seq.c.
 *
 * Every check compares a run that manages the state (snapshot, restore, fill, trim, switch
 * sequences) with a fresh run of the same tokens in the same calls: the built-in backends must
 * agree bit for bit (the same calls on the same state give the same bits), a runtime under test
 * within the case's tolerance. A check that needs a capability the runtime does not announce is
 * SKIPPED with the reason.
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

qc_status lc_open(lc_rt *lc, ctx *c, qc_backend *be, const char *bname,
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
    partlist *pl = calloc(1, sizeof *pl);
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

/* ===================================================================================== */
/* the checks                                                                            */
/* ===================================================================================== */

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

/* A fresh run: reset, the prefill (calls of call_max), then `n` tokens t (calls of `call`),
 * recording those n rows and the final state. */
static qc_status fresh_run(lc_rt *lc, int n_pre, const int32_t *t, int n, int call, lc_rec *r,
                           qc_err *err) {
    qc_status s = lc_reset(lc, err);
    if (!s) s = lc_feed(lc, lc->toks, n_pre, 0, NULL, err);
    if (!s) s = lc_feed(lc, t, n, call, r, err);
    if (!s) s = lc_read_state(lc, r, err);
    return s;
}

/* snapshot_restore: prefill P, snapshot, continue with A (the decode tokens); restore, continue
 * with B (other tokens): A and B each equal a fresh P+A / P+B.
 * snapshot_copy: the snapshot restored into another sequence (state object) continues as B.
 * restore_after_garbage: the snapshot restored over a NaN-filled state continues as A. */
static void check_snapshots(lc_rt *lc, int which) {
    const int S = lc->n_dec, P = lc->n_pre;
    const int32_t *A = lc->toks + P;
    lc_rec fa, fb, ra, rb;
    qc_err err;
    qc_err_clear(&err);
    static const char *const names[3] = {"snapshot_restore", "snapshot_copy",
                                         "restore_after_garbage"};
    const char *check = names[which];
    static const unsigned caps[3] = {QC_BE_CAP_SNAPSHOT, QC_BE_CAP_SNAPSHOT | QC_BE_CAP_SEQUENCES,
                                     QC_BE_CAP_SNAPSHOT | QC_BE_CAP_STATE_FILL};
    if (!lc_can(lc, check, caps[which])) return;
    int32_t *B = malloc((size_t)(S + 1) * sizeof *B);
    memset(&fa, 0, sizeof fa), memset(&fb, 0, sizeof fb);
    memset(&ra, 0, sizeof ra), memset(&rb, 0, sizeof rb);
    qc_status s = B ? QC_OK : qc_errf(&err, QC_ERR_OOM, "lifecycle: out of memory");
    for (int i = 0; !s && i < S; i++) B[i] = lc_alt(lc, A[i], 2);
    if (!s) s = lc_rec_init(lc, &fa, &err);
    if (!s) s = lc_rec_init(lc, &fb, &err);
    if (!s) s = lc_rec_init(lc, &ra, &err);
    if (!s) s = lc_rec_init(lc, &rb, &err);
    /* the expected runs (sequence 0) */
    if (!s) s = fresh_run(lc, P, A, S, 1, &fa, &err);
    if (!s && which != 2) s = fresh_run(lc, P, B, S, 1, &fb, &err);
    /* the managed run */
    if (!s) s = lc_reset(lc, &err);
    if (!s) s = lc_feed(lc, lc->toks, P, 0, NULL, &err);
    if (!s) s = lc_snapshot(lc, 0, &err);
    if (which == 0) {
        if (!s) s = lc_feed(lc, A, S, 1, &ra, &err);
        if (!s) s = lc_read_state(lc, &ra, &err);
        if (!s) s = lc_restore(lc, 0, &err);
        if (!s) s = lc_feed(lc, B, S, 1, &rb, &err);
        if (!s) s = lc_read_state(lc, &rb, &err);
    } else if (which == 1) {
        if (!s) s = lc_feed(lc, A, S, 1, NULL, &err); /* the original moves on */
        if (!s) s = lc_select(lc, 1, &err);
        if (!s) s = lc_reset(lc, &err);
        if (!s) s = lc_restore(lc, 0, &err);
        if (!s) s = lc_feed(lc, B, S, 1, &rb, &err);
        if (!s) s = lc_read_state(lc, &rb, &err);
        if (!s) s = lc_select(lc, 0, &err);
    } else {
        if (!s) s = lc_fill(lc, NAN, &err);
        if (!s) s = lc_restore(lc, 0, &err);
        if (!s) s = lc_feed(lc, A, S, 1, &ra, &err);
        if (!s) s = lc_read_state(lc, &ra, &err);
    }
    if (s) {
        lc_emit_failed(lc, check, s, err.msg);
    } else if (which == 0) {
        lc_rec act[2] = {ra, rb}, exp[2] = {fa, fb};
        static const char *const lab[2] = {"continuation_A", "continuation_B"};
        lc_compare(lc, check, act, exp, 2, lab, "Prefill, snapshot, continue with A; restore, "
                   "continue with B");
    } else if (which == 1) {
        static const char *const lab[1] = {"continuation_B"};
        lc_compare(lc, check, &rb, &fb, 1, lab, "Prefill on sequence 0, snapshot, continue; the "
                   "snapshot restored into sequence 1 continues with B");
    } else {
        static const char *const lab[1] = {"continuation_A"};
        lc_compare(lc, check, &ra, &fa, 1, lab, "Prefill, snapshot, every state element := NaN, "
                   "restore, continue with A");
    }
    lc_rec_free(lc, &fa), lc_rec_free(lc, &fb), lc_rec_free(lc, &ra), lc_rec_free(lc, &rb);
    free(B);
}

/* snapshot_chunk_boundary: a dynamic prefill in chunks of max_seq_len with a snapshot after
 * every chunk; each snapshot restored and the prefill finished from there equals the run that
 * never stopped (its remaining logits rows and the final state). */
static void check_chunk_boundaries(lc_rt *lc) {
    const int P = lc->n_pre, cm = lc->gc->max_seq_len > 0 ? lc->gc->max_seq_len : 128;
    int nb = (P - 1) / cm; /* boundaries strictly inside the prefill */
    if (nb > LC_SNAP - 1) nb = LC_SNAP - 1;
    if (nb < 1 || !lc_can(lc, "snapshot_chunk_boundary", QC_BE_CAP_SNAPSHOT)) return;
    qc_err err;
    qc_err_clear(&err);
    lc_rec full, act[LC_SNAP], exp[LC_SNAP];
    char lab_buf[LC_SNAP][48];
    const char *lab[LC_SNAP];
    memset(&full, 0, sizeof full), memset(act, 0, sizeof act), memset(exp, 0, sizeof exp);
    qc_status s = lc_rec_init(lc, &full, &err);
    if (!s) s = lc_reset(lc, &err);
    for (int k = 0; !s && k <= nb; k++) {
        int lo = k * cm, hi = k == nb ? P : lo + cm;
        s = lc_feed(lc, lc->toks + lo, hi - lo, cm, &full, &err);
        if (!s && k < nb) s = lc_snapshot(lc, k, &err);
    }
    if (!s) s = lc_read_state(lc, &full, &err);
    for (int k = 0; !s && k < nb; k++) {
        int lo = (k + 1) * cm;
        s = lc_rec_init(lc, &act[k], &err);
        if (!s) s = lc_rec_init(lc, &exp[k], &err);
        if (!s) s = lc_restore(lc, k, &err);
        if (!s) s = lc_feed(lc, lc->toks + lo, P - lo, cm, &act[k], &err);
        if (!s) s = lc_read_state(lc, &act[k], &err);
        if (s) break;
        /* expected: the uninterrupted run's rows from lo on, and its final state */
        exp[k].rows = P - lo, exp[k].pos0 = lo;
        memcpy(exp[k].logits, full.logits + (size_t)lo * lc->V, (size_t)(P - lo) * lc->V *
               sizeof(float));
        exp[k].st = full.st; /* borrowed: not freed through exp */
        snprintf(lab_buf[k], sizeof lab_buf[k], "restored_at_%d", lo);
        lab[k] = lab_buf[k];
    }
    if (s) {
        lc_emit_failed(lc, "snapshot_chunk_boundary", s, err.msg);
    } else {
        char ex[200];
        snprintf(ex, sizeof ex, "A %d-token prefill in chunks of %d, a snapshot after each of "
                 "the first %d chunks, each restored and the prefill finished", P, cm, nb);
        lc_compare(lc, "snapshot_chunk_boundary", act, exp, nb, lab, ex);
    }
    for (int k = 0; k < nb; k++) {
        lc_rec_free(lc, &act[k]);
        memset(&exp[k].st, 0, sizeof exp[k].st);
        lc_rec_free(lc, &exp[k]);
    }
    lc_rec_free(lc, &full);
}

/* rollback: after the prefill, k draft tokens verified in one call (the first k-j right, the
 * last j wrong), the j rejected by restoring the snapshot taken before them and re-feeding
 * the k-j accepted ones, then the decode goes on: equal to never having decoded the rejected
 * ones. With trim (a runtime that announces it) also rollback_trim: the same by trim. */
static void check_rollback(lc_rt *lc, const int *ks, int nk, int by_trim) {
    const int S = lc->n_dec, P = lc->n_pre;
    const char *check = by_trim ? "rollback_trim" : "rollback";
    if (!lc_can(lc, check, by_trim ? QC_BE_CAP_TRIM : QC_BE_CAP_SNAPSHOT)) return;
    const int32_t *D = lc->toks + P;
    lc_rec act[8], exp[8];
    char lab_buf[8][48];
    const char *lab[8];
    int n = 0;
    qc_err err;
    qc_err_clear(&err);
    qc_status s = QC_OK;
    int32_t draft[16];
    memset(act, 0, sizeof act), memset(exp, 0, sizeof exp);
    for (int ki = 0; !s && ki < nk; ki++) {
        int k = ks[ki];
        for (int j = 1; !s && j <= k && n < 8; j++, n++) {
            int acc = k - j;
            if (k > S || k > 16) break;
            for (int i = 0; i < k; i++) draft[i] = i < acc ? D[i] : lc_alt(lc, D[i], 1);
            snprintf(lab_buf[n], sizeof lab_buf[n], "k%d_reject%d", k, j);
            lab[n] = lab_buf[n];
            s = lc_rec_init(lc, &act[n], &err);
            if (!s) s = lc_rec_init(lc, &exp[n], &err);
            /* expected: the accepted tokens in one call, then one per step */
            if (!s) s = lc_reset(lc, &err);
            if (!s) s = lc_feed(lc, lc->toks, P, 0, NULL, &err);
            if (!s && acc > 0) s = lc_feed(lc, D, acc, acc, &exp[n], &err);
            if (!s) s = lc_feed(lc, D + acc, S - acc, 1, &exp[n], &err);
            if (!s) s = lc_read_state(lc, &exp[n], &err);
            /* actual */
            if (!s) s = lc_reset(lc, &err);
            if (!s) s = lc_feed(lc, lc->toks, P, 0, NULL, &err);
            if (!s && !by_trim) s = lc_snapshot(lc, 0, &err);
            if (!s) s = lc_feed(lc, draft, k, k, by_trim ? &act[n] : NULL, &err);
            if (by_trim) act[n].rows = acc; /* the accepted rows come from the draft call */
            lc->rollback_scope = 1;
            if (!s && by_trim) s = lc_trim(lc, P + acc, &err);
            if (!s && !by_trim) s = lc_restore(lc, 0, &err);
            lc->rollback_scope = 0;
            if (!s && acc > 0 && !by_trim) s = lc_feed(lc, D, acc, acc, &act[n], &err);
            if (!s) s = lc_feed(lc, D + acc, S - acc, 1, &act[n], &err);
            if (!s) s = lc_read_state(lc, &act[n], &err);
        }
    }
    if (s) {
        lc_emit_failed(lc, check, s, err.msg);
    } else if (n > 0) {
        char ex[240];
        snprintf(ex, sizeof ex, "Draft tokens from position %d verified in one call, the last j "
                 "rejected and rolled back by %s, then %d decode steps", P,
                 by_trim ? "the runtime's trim" : "restoring the snapshot taken before them", S);
        lc_compare(lc, check, act, exp, n, lab, ex);
    }
    for (int i = 0; i < 8; i++) lc_rec_free(lc, &act[i]), lc_rec_free(lc, &exp[i]);
}

/* prefix_reuse: prompt 1 prefilled with a snapshot after its first q tokens (q inside a
 * DeltaNet chunk); prompt 2 = the same q tokens + another suffix, prefilled from the restored
 * snapshot, equals its cold prefill. */
static void check_prefix_reuse(lc_rt *lc) {
    const int P = lc->n_pre, q = (P * 3) / 5 > 0 ? (P * 3) / 5 : 1, nx = P - q;
    if (nx < 1 || !lc_can(lc, "prefix_reuse", QC_BE_CAP_SNAPSHOT)) return;
    qc_err err;
    qc_err_clear(&err);
    int32_t *X = malloc((size_t)(nx + 1) * sizeof *X);
    lc_rec a, e;
    memset(&a, 0, sizeof a), memset(&e, 0, sizeof e);
    qc_status s = X ? QC_OK : qc_errf(&err, QC_ERR_OOM, "lifecycle: out of memory");
    for (int i = 0; !s && i < nx; i++) X[i] = lc_alt(lc, lc->toks[q + i], 3);
    if (!s) s = lc_rec_init(lc, &a, &err);
    if (!s) s = lc_rec_init(lc, &e, &err);
    if (!s) s = fresh_run(lc, q, X, nx, 0, &e, &err);
    if (!s) s = lc_reset(lc, &err);
    if (!s) s = lc_feed(lc, lc->toks, q, 0, NULL, &err);
    if (!s) s = lc_snapshot(lc, 0, &err);
    if (!s) s = lc_feed(lc, lc->toks + q, P - q, 0, NULL, &err);
    if (!s) s = lc_restore(lc, 0, &err);
    if (!s) s = lc_feed(lc, X, nx, 0, &a, &err);
    if (!s) s = lc_read_state(lc, &a, &err);
    if (s) {
        lc_emit_failed(lc, "prefix_reuse", s, err.msg);
    } else {
        char ex[240];
        static const char *const lab[1] = {"prompt_2"};
        snprintf(ex, sizeof ex, "Two %d-token prompts sharing their first %d tokens: the second "
                 "prefilled from the first's snapshot at %d", P, q, q);
        lc_compare(lc, "prefix_reuse", &a, &e, 1, lab, ex);
    }
    lc_rec_free(lc, &a), lc_rec_free(lc, &e);
    free(X);
}

/* ===================================================================================== */
/* the entry: which checks run on which case                                             */
/* ===================================================================================== */

/* The cases (a few per fixture, to keep ci/conform fast), by shape:
 *   short     no history, 4..8 prompt tokens, >= 4 decode steps (len005): snapshot_restore,
 *             snapshot_copy, restore_after_garbage, rollback (k = 1, 3), multi_sequence,
 *             batch_invariance
 *   boundary  no history, 60..63 prompt tokens (len063): rollback (k = 4: the drafts cross the
 *             64-position DeltaNet chunk boundary), prefix_reuse (the shared prefix ends inside
 *             the first chunk)
 *   chunked   no history, a prompt longer than its max_seq_len (longseq): snapshot_chunk_boundary,
 *             prefix_reuse */
void ck_check_lifecycle(ctx *c, qc_backend *be, const char *bname, const qc_golden_case *gc,
                        const int *have) {
    if (c->cal || gc->n_history > 0) return;
    const int T = gc->n_tokens, S = gc->n_decode;
    int kind_short = T >= 4 && T <= 8 && S >= 4;
    int kind_boundary = T >= 60 && T <= 63 && S >= 4;
    int kind_chunked = gc->max_seq_len > 0 && T > gc->max_seq_len;
    if (!kind_short && !kind_boundary && !kind_chunked) return;
    qc_mode mode = have[QC_MODE_DYNAMIC] && be->max_tokens_per_call != 1 ? QC_MODE_DYNAMIC
                   : have[QC_MODE_STATIC] ? QC_MODE_STATIC : QC_MODE_NOKV;
    if (mode == QC_MODE_NOKV) return;
    lc_rt lc;
    qc_err err;
    qc_err_clear(&err);
    qc_status s = lc_open(&lc, c, be, bname, gc, mode, &err);
    if (s) {
        lc_emit_failed(&lc, "lifecycle", s, err.msg);
        lc_close(&lc);
        return;
    }
    if (kind_short) {
        for (int w = 0; w < 3; w++) check_snapshots(&lc, w);
        static const int ks[2] = {1, 3};
        check_rollback(&lc, ks, 2, 0);
        check_rollback(&lc, ks, 2, 1);
        lc_check_sequences(&lc);
    }
    if (kind_boundary) {
        static const int ks[1] = {4};
        check_rollback(&lc, ks, 1, 0);
        check_rollback(&lc, ks, 1, 1);
        check_prefix_reuse(&lc);
    }
    if (kind_chunked) {
        check_chunk_boundaries(&lc);
        check_prefix_reuse(&lc);
    }
    lc_close(&lc);
}
