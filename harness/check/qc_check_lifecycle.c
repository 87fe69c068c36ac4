/* qc_check_lifecycle.c — the state lifecycle checks (snapshot / restore / fork, rollback, prefix
 * reuse) and the entry (see qc_check_lifecycle.h); their driver is qc_check_lifecycle_driver.c,
 * multi_sequence / batch_invariance are in qc_check_lifecycle_seq.c.
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
/* the checks                                                                            */
/* ===================================================================================== */

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
void ck_check_lifecycle(ck_ctx *c, qc_backend *be, const char *bname, const qc_golden_case *gc,
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
