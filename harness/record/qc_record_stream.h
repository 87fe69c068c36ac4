/* qc_record_stream.h — `record` layer-major: every case's forward calls through layer 0, then
 * layer 1, ..., so that a streamed model (qc_model_load_streamed) holds one layer's weights at a
 * time, and the output is bit-identical to running the cases one after another in memory.
 *
 * How (qc_record_stream.c, qc_record_tape.c): each case is first run through the unchanged case
 * runner (qc_record_run_case) against a *tape* backend that records the forward calls, resets and
 * state snapshots the runner makes; the recorded calls are then executed layer-major on the real
 * backend's steps (qc_backend.h: step_layer / step_norm / step_logits), and the case is run once
 * more against the tape, which now plays the results back (logits, traces, snapshots). A greedy
 * decode step depends on the previous step's logits, so greedy cases go in rounds: the prompt
 * first, then one more decode step per round (one pass over the weights for all cases per step);
 * teacher-forced cases need one pass in all.
 *
 * Ownership: the caller owns the cases' inputs and results (qc_case_free); everything else is
 * freed before return.
 */
#ifndef QC_RECORD_STREAM_H
#define QC_RECORD_STREAM_H

#include <stdint.h>

#include "qc/qc_backend.h"
#include "qc/qc_model.h"
#include "qc/qc_prefill.h"
#include "qc_golden.h"
#include "qc_runcase.h"

typedef struct {
    const char *name;          /* case name */
    const qc_profile *profile; /* its prefill strategy and context (borrowed) */
    qc_case_input in;          /* as for qc_record_run_case */
    int with_in;               /* MoE: keep moe_in rows (qc_record_run_case) */
    qc_golden_case *out;       /* the result (filled on success) */
} qc_stream_case;

typedef struct {
    int progress;             /* 1: a progress line on stderr (a terminal) */
    int64_t head_block_rows;  /* rows of the output head per block (0: 4096) */
    const char *resume_dir;   /* a checkpoint after every layer in this directory, and a run
                                 found there continued (qc_record_resume.c); removed on success.
                                 NULL: no checkpoints */
} qc_stream_opts;

/* What a run read and how long it took (for the summary). */
typedef struct {
    int passes;               /* passes over the weights (1 + greedy decode steps) */
    int resumed_pass;         /* -1, or the pass a --resume run continued ... */
    int resumed_layer;        /* ... from this layer */
    uint64_t bytes_read;      /* weight bytes populated (a streamed model) */
    double seconds;
} qc_stream_stats;

/* Run every case layer-major on be (which must offer the steps: QC_ERR_UNSUPPORTED naming it
 * otherwise), whose model is m (streamed or in memory). QC_OK, or the error of the case / call
 * that failed (nothing of any case kept). */
qc_status qc_record_stream_run(qc_backend *be, qc_model *m, qc_stream_case *cases, int n_cases,
                               const qc_stream_opts *opts, qc_stream_stats *stats, qc_err *err);

/* Bytes a layer-major run keeps besides the resident layer, the backend and the results: per
 * call its activations ([n, H] twice) and, when traces are kept, its hidden / MoE rows; per
 * case its live state and snapshots; an output head block. For the memory plan. */
uint64_t qc_record_stream_extra_bytes(const qc_config *c, const qc_stream_case *cases,
                                      int n_cases, const qc_stream_opts *opts);

#endif /* QC_RECORD_STREAM_H */
