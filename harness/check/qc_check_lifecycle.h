/* qc_check_lifecycle.h — the state-lifecycle checks' driver (harness-private; the files
 * qc_check_lifecycle*.c share it).
 *
 * One lc_rt drives one backend under test through sequences and snapshots:
 *   built-in backend (no be->reset): its state IS the qc_state passed to forward, so a sequence
 *     is one qc_state of ours and a snapshot a qc_state_copy;
 *   runtime under test: the runtime keeps the state; sequences and snapshots are its own
 *     (be->select_seq, be->snapshot / be->restore, be->trim), the mirror is read through
 *     qc_backend_sync_state when it announces state_read.
 * Positions are tracked here per sequence and per snapshot (a snapshot carries its position).
 * Every lc_* call returns QC_OK or the failing status with err set (QC_ERR_RUNTIME: the
 * runtime failed, a FAIL; QC_ERR_UNSUPPORTED: a SKIP; else an ERROR).
 */
#ifndef QC_CHECK_LIFECYCLE_H
#define QC_CHECK_LIFECYCLE_H

#include "qc_check_internal.h"

#define LC_SEQ 3  /* sequences of the multi-sequence checks */
#define LC_SNAP 8 /* snapshot slots */
#define LC_MAX_DECODE 16 /* decode steps of the case used (a long-decode golden stays fast) */

typedef struct {
    ck_ctx *c;
    qc_backend *be;
    const qc_golden_case *gc;
    const char *bname, *mname;
    qc_mode mode;
    int native;              /* 1: a built-in backend (our states) */
    int call_max;            /* tokens per prefill call (the mode's chunk: max_seq_len or 1) */
    int cap;                 /* state capacity in positions */
    int V;
    qc_state *seq[LC_SEQ];   /* native: every sequence; remote: [0] is the mirror */
    qc_state *snap[LC_SNAP]; /* native snapshots (allocated on first use) */
    int pos[LC_SEQ];         /* positions consumed per sequence */
    int snap_pos[LC_SNAP];   /* the position each snapshot holds (-1: never written) */
    int cur;                 /* current sequence */
    int rollback_scope;      /* the fault rollback-keeps-conv applies to restores in it */
    int32_t *toks;           /* history ++ prompt ++ decode tokens of the case */
    int n_pre, n_all;        /* prefill positions (history + prompt), + n_dec decode steps */
    int n_dec;               /* the case's decode tokens used (at most LC_MAX_DECODE) */
} lc_rt;

/* Logits rows recorded by lc_feed, and a state read with lc_read_state. */
typedef struct {
    float *logits; /* [cap_rows, V] */
    int rows, cap_rows;
    int pos0;      /* position of row 0 (-1 until the first row) */
    qc_golden_state st;
} lc_rec;

/* ---- qc_check_lifecycle_driver.c: the driver ---- */
/* Open the driver for be on case gc in mode (static or dynamic). */
qc_status lc_open(lc_rt *lc, ck_ctx *c, qc_backend *be, const char *bname,
                  const qc_golden_case *gc, qc_mode mode, qc_err *err);
void lc_close(lc_rt *lc);
qc_status lc_rec_init(lc_rt *lc, lc_rec *r, qc_err *err);
void lc_rec_free(lc_rt *lc, lc_rec *r);
/* Make sequence `seq` current. */
qc_status lc_select(lc_rt *lc, int seq, qc_err *err);
/* Reset the current sequence (zeros, position 0). */
qc_status lc_reset(lc_rt *lc, qc_err *err);
/* Feed n tokens to the current sequence in calls of at most `call` tokens (0: lc->call_max),
 * appending every logits row to rec (may be NULL). */
qc_status lc_feed(lc_rt *lc, const int32_t *t, int n, int call, lc_rec *rec, qc_err *err);
qc_status lc_snapshot(lc_rt *lc, int slot, qc_err *err);
qc_status lc_restore(lc_rt *lc, int slot, qc_err *err);
/* Every state element of the current sequence := v. */
qc_status lc_fill(lc_rt *lc, float v, qc_err *err);
/* Roll the current sequence back to n_pos positions (the runtime's trim). */
qc_status lc_trim(lc_rt *lc, int n_pos, qc_err *err);
/* The current sequence's state (positions consumed) into r->st; absent (present 0) for a
 * runtime without state_read. */
qc_status lc_read_state(lc_rt *lc, lc_rec *r, qc_err *err);
/* Token t moved by k (mod V): a different token for the alternative continuations. */
int32_t lc_alt(const lc_rt *lc, int32_t t, int k);
/* Compare actual recs a[i] with expected b[i] (logits rows and states) as one row. */
void lc_compare(lc_rt *lc, const char *check, const lc_rec *a, const lc_rec *b, int n,
                const char *const *labels, const char *extra);
/* 1 when the backend can run `check` (a built-in backend always can); else a SKIP row naming
 * the first of caps (QC_BE_CAP_*) it does not announce, and 0. */
int lc_can(lc_rt *lc, const char *check, unsigned caps);
/* A row for a failed driver call (FAIL / SKIP / ERROR by the status). */
void lc_emit_failed(lc_rt *lc, const char *check, qc_status s, const char *msg);

/* ---- qc_check_lifecycle_seq.c ---- */
/* multi_sequence and batch_invariance. */
void lc_check_sequences(lc_rt *lc);

/* ---- qc_check_lifecycle.c: the entry ---- */
/* Every lifecycle check of one backend on one case (the cases and checks chosen in the file's
 * table); have[m]: the main run of mode m succeeded. */
void ck_check_lifecycle(ck_ctx *c, qc_backend *be, const char *bname, const qc_golden_case *gc,
                        const int *have);

#endif /* QC_CHECK_LIFECYCLE_H */
