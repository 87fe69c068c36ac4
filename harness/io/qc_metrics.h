/* qc_metrics.h — comparison metrics between an actual tensor and a golden (or a second actual).
 *
 * A check compares one or more "parts" (e.g. the k_cache of every full-attention layer) and
 * accumulates one qc_metrics over all of them, so a row of the report covers a tensor class
 * while the worst element still names its layer. Each part carries a qc_tdesc that says what a
 * flat index means (case, step, layer, head, position, channel) and the tolerance it is held to.
 *
 * Rules (torch.testing.assert_close, relative to the GOLDEN):
 *   close(a, g)  <=>  |a - g| <= atol + rtol * |g|, a finite
 *   rel(a, g)    =   |a - g| / |g|   (0 when a == g, +inf when g == 0 and a != g)
 *   cosine       =   <a, g> / (|a| |g|)          (over every part, in double)
 *   NMSE         =   sum (a - g)^2 / sum g^2      (test-backend-ops' metric)
 * A NaN / Inf in the actual is a mismatch; the first one is recorded with its location.
 * Bitwise mode (thread-count invariance, garbage-then-reset) compares the float bit patterns.
 * Logit rows additionally get top-1 agreement and KL(softmax(golden) || softmax(actual)).
 */
#ifndef QC_METRICS_H
#define QC_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------------------------------- */
/* Tensor classes and descriptors                                                            */
/* ---------------------------------------------------------------------------------------- */

typedef enum {
    QC_TC_LOGITS = 0,
    QC_TC_HIDDEN,
    QC_TC_K_CACHE,
    QC_TC_V_CACHE,
    QC_TC_CONV_STATE,
    QC_TC_RECURRENT_STATE,
    QC_TC_COUNT
} qc_tclass;

/* "logits", "hidden", "k_cache", "v_cache", "conv_state", "recurrent_state". */
const char *qc_tclass_str(qc_tclass c);
/* Returns 0 and sets *c on a known name, -1 otherwise. */
int qc_tclass_parse(const char *s, qc_tclass *c);

/* What one compared tensor is, enough to turn a flat index into a meaning. */
typedef struct {
    qc_tclass cls;          /* tensor class */
    char path[160];         /* golden path below /cases/<case>/, e.g. "prefill/logits",
                               "decode/state/layer_03/k_cache" */
    int ndim;               /* 1..4 */
    int64_t shape[4];       /* [ndim] row-major shape */
    int layer;              /* layer index of a state tensor (-1: not a per-layer tensor) */
    int pos0;               /* logits / hidden: position of row 0 (start_pos, or start_pos+T for
                               decode logits); caches: 0 */
    int decode;             /* 1: logits rows are decode steps (row s = step s) */
    int n_layers;           /* hidden: L (index L is the final norm) */
    int key_dim, dk, dv;    /* conv_state channel decoding: q|k|v parts of width key_dim,
                               key_dim, nv*dv; head sizes dk, dv */
    double atol, rtol;      /* the tolerance this part is held to */
} qc_tdesc;

/* Fill the common fields; every other field zero / -1. */
void qc_tdesc_init(qc_tdesc *d, qc_tclass cls, const char *path, int ndim, const int64_t *shape);
size_t qc_tdesc_numel(const qc_tdesc *d);

/* "(2, 17)" — the multi-index of a flat index, torch style. */
void qc_tdesc_index_str(const qc_tdesc *d, size_t flat, char *buf, size_t len);
/* "position 2, vocab 17" / "layer 3, kv head 0, position 5, channel 2" / ... */
void qc_tdesc_meaning(const qc_tdesc *d, size_t flat, char *buf, size_t len);

/* ---------------------------------------------------------------------------------------- */
/* Accumulated metrics                                                                       */
/* ---------------------------------------------------------------------------------------- */

/* One located element. */
typedef struct {
    int valid;              /* 0 until set */
    qc_tdesc desc;          /* the part it lives in */
    size_t idx;             /* flat index inside that part */
    float actual, golden;   /* the two values */
    double value;           /* the metric value (abs diff, rel diff, ratio to allowed) */
} qc_loc;

typedef struct {
    int bitwise;            /* 1: exact bit comparison (tolerances ignored) */
    size_t n;               /* elements compared */
    size_t n_mismatch;      /* elements not close (bitwise: bits differ), incl. non-finite */
    size_t n_nonfinite;     /* NaN / Inf in the actual */
    int n_parts;            /* parts added */
    double max_abs;         /* max |a - g| over finite pairs */
    double max_rel;         /* max rel(a, g) over finite pairs */
    qc_loc at_max_abs;      /* where max_abs is */
    qc_loc at_max_rel;      /* where max_rel is */
    qc_loc worst;           /* largest |a - g| / (atol + rtol |g|); the first non-finite wins */
    qc_loc first_nonfinite; /* first NaN / Inf in the actual (in part order) */
    qc_loc first_mismatch;  /* first element not close (in part order) */
    double sum_ag, sum_aa, sum_gg, sum_dd; /* <a,g>, |a|^2, |g|^2, |a-g|^2 over finite pairs */
    double cosine;          /* set by qc_metrics_finish (1 when both are all zero) */
    double nmse;            /* set by qc_metrics_finish (0 when equal; inf when g == 0 != a) */
    /* logits only (QC_TC_LOGITS parts via qc_metrics_add_logits) */
    int has_logits;         /* 1 when logit rows were added */
    long rows;              /* logit rows compared */
    long top1_agree;        /* rows whose argmax agrees */
    long top1_near_tie;     /* disagreeing rows where the golden top1 - top2 <= tie_margin */
    qc_loc first_top1_flip; /* first disagreeing row: idx = row * V + actual argmax */
    int flip_golden_arg;    /* golden argmax of that row */
    double kl_sum;          /* sum over rows of KL(golden || actual), nats */
    double kl_max;          /* max over rows */
    long kl_max_row;        /* its row (in the part holding it) */
    qc_tdesc kl_max_desc;   /* its part */
    double kl_mean;         /* set by qc_metrics_finish */
} qc_metrics;

void qc_metrics_init(qc_metrics *m, int bitwise);

/* Compare n = qc_tdesc_numel(d) elements of actual vs golden under d->atol / d->rtol. */
void qc_metrics_add(qc_metrics *m, const qc_tdesc *d, const float *actual, const float *golden);

/* As qc_metrics_add for a [rows, V] logits tensor, plus per-row top-1 agreement and KL in
 * double. tie_margin: a top-1 disagreement where the golden's top1 - top2 <= tie_margin counts
 * as a near-tie (reported apart). */
void qc_metrics_add_logits(qc_metrics *m, const qc_tdesc *d, const float *actual,
                           const float *golden, double tie_margin);

/* Derive cosine, NMSE, mean KL. */
void qc_metrics_finish(qc_metrics *m);

/* Element-wise verdict: n > 0, no non-finite, no mismatch. */
int qc_metrics_close(const qc_metrics *m);

/* KL(softmax(g) || softmax(a)) of one row in double (nats). Non-finite input gives +inf. */
double qc_kl_row(const float *golden, const float *actual, int V);

/* Torch-style multi-line summary (no trailing newline):
 *   Mismatched elements: 3 / 65536 (0.0%)
 *   Greatest absolute difference: 0.0123 at prefill/logits index (2, 17) (up to 0.001 allowed)
 *   Greatest relative difference: ...
 *   Worst element: prefill/logits (2, 17) = position 2, vocab 17: actual 1.5 golden 1.4876
 * plus the first NaN / Inf and the logits lines when present. */
void qc_metrics_summary(const qc_metrics *m, char *buf, size_t len);

/* One line of key numbers for tables and JUnit messages, e.g.
 *   "max_abs 1.2e-05 max_rel 3.1e-04 mism 0/2048 cos 1.000000 nmse 2.1e-12" */
void qc_metrics_keyline(const qc_metrics *m, char *buf, size_t len);

/* A loc as "prefill/logits (2, 17) [position 2, vocab 17]". */
void qc_loc_str(const qc_loc *l, char *buf, size_t len);

/* Round x up to the next 1-2-5 step (1e-6, 2e-6, 5e-6, 1e-5, ...). x <= 0 gives 0. */
double qc_round_125(double x);

#endif /* QC_METRICS_H */
