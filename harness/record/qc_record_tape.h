/* qc_record_tape.h — the tape of a layer-major record (qc_record_stream.h): what the case runner
 * asked of the backend, in order, and what the layer-major execution answered.
 *
 * A tape backend stands in for the real one while the case runner runs: each forward call either
 * matches the next recorded, executed call (its logits and trace rows are played back) or is
 * appended as a new call (zeros answered; executed later); each reset is recorded the same way;
 * each state read (the runner's snapshots) is served from a snapshot taken during execution, or
 * requested. Internal to `record`.
 */
#ifndef QC_RECORD_TAPE_H
#define QC_RECORD_TAPE_H

#include <stdint.h>

#include "qc/qc_backend.h"
#include "qc/qc_state.h"

typedef struct {
    char name[16];       /* "hidden", "moe_in", "router_topk" */
    int index, start_pos, n, dim;
    float *data;         /* [n, dim] owned */
} tape_event;

typedef enum { TAPE_CALL = 0, TAPE_RESET = 1 } tape_kind;

typedef struct {
    tape_kind kind;
    int32_t *tokens;     /* [n] owned (CALL) */
    int n, start_pos;
    int want_logits;     /* the runner passed a logits buffer */
    int all_logits;      /* ... of n rows (else the last row) */
    float *logits;       /* [all_logits ? n : 1, V] owned, after execution */
    float *h;            /* [n, H] the residual stream during execution (then the final norm) */
    tape_event *ev;      /* [n_ev] trace rows, in the order forward emits them */
    int n_ev, cap_ev;
} tape_op;

typedef struct {
    int boundary;        /* taken after this many ops */
    int n_pos;           /* positions of the caches copied */
    qc_state *st;        /* capacity n_pos (at least 1), filled layer by layer; owned */
    int done;            /* taken (every layer) */
    int wanted;          /* read during the current runner pass */
} tape_snap;

typedef struct {
    tape_op *ops;
    int n_ops, cap_ops;
    int n_done;          /* ops executed (their results held) */
    tape_snap *snaps;
    int n_snaps, cap_snaps;
    qc_state *live;      /* the case's state during execution (capacity: its context) */
    int cursor;          /* ops passed during the current runner pass */
    int n_new;           /* ops / snapshots added during the current runner pass */
    int diverged;        /* a call did not match its recorded twin (an internal error) */
    char why[200];
} tape_case;

/* The tape backend: name, describe, caps and options as `real` (plus STATE_READ for the
 * snapshots), forward / reset / sync_state on the tape of *cur. Freed with qc_backend_destroy. */
qc_status tape_backend_create(qc_backend *real, tape_case **cur, qc_backend **out, qc_err *err);

/* Free the snapshots taken but not read during the last runner pass. */
void tape_case_drop_unwanted(tape_case *t);

/* Free a case's tape (ops, events, snapshots, live state); leaves it zeroed. */
void tape_case_free(tape_case *t);

/* Append a trace row to op (for the execution's trace hook). QC_ERR_OOM. */
qc_status tape_op_add_event(tape_op *op, int index, const char *name, int start_pos, int n, int dim,
                            const float *data);

#endif /* QC_RECORD_TAPE_H */
