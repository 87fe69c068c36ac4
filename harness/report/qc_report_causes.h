/* qc_report_causes.h — root-cause triage (#26): the failing rows of each runtime grouped by their
 * evidence into a few likely causes, each one sentence plus the rows it explains.
 *
 * Rules, applied in this order over the FAIL / ERROR rows of one backend; each claims the rows
 * it explains, the next rule sees only what is left:
 *   1 state_not_reset  garbage_reset fails, the first sequence of the process (golden file)
 *                      passes and the sequences after the first NaN fill diverge: every failing
 *                      row from that fill on (no layer: the NaN reaches every layer). Without a
 *                      garbage_reset row: the first sequence passes and every later one fails,
 *                      over two cases or more ("likely", announce state_fill to confirm).
 *   2 decode_only      the prefill agrees in every mode, decode diverges (from step S)
 *     one_token        static prefill (one token per call) and decode diverge, the multi-token
 *                      prefill agrees
 *     mode_only        one prefill mode alone diverges (static / dynamic / nokv), the others
 *                      ran and agree
 *   3 layer            the remaining rows against the golden (prefill.*, decode.*, argmax),
 *                      grouped by their first divergence (qc_localisation, or the run's)
 *   4 check            everything else, grouped by check family and layer, one generic
 *                      sentence per family (ERROR rows: "could not run")
 * The layer phrase says what the evidence supports: hidden states name a layer but cannot tell
 * its mixer from its MLP (a MoE moe_in trace can, and so can the layer's own state diverging
 * while its input agrees); states alone give an interval (at or before N, after M); logits
 * alone name no layer (the hint: announce `hidden`).
 * Ownership: qc_causes owns its array and each cause's rows; free with qc_causes_free.
 */
#ifndef QC_REPORT_CAUSES_H
#define QC_REPORT_CAUSES_H

#include <stdio.h>

#include "qc_report_results.h"

typedef struct {
    char rule[24];          /* "state_not_reset", "decode_only", "one_token", "mode_only",
                               "layer", "check" */
    char text[700];         /* one sentence */
    char backend[128];
    int *rows;              /* [n_rows] ascending indices into qc_results.rows */
    int n_rows;
    qc_loc_kind kind;       /* the localisation the sentence rests on (NONE: no layer) */
    int layer;              /* the layer named (AT_OR_BEFORE: the upper bound); -1: none */
    int layer_lo;           /* AT_OR_BEFORE: the layer below that passes; -1: none */
    int step;               /* first failing decode step; -1: none */
    char block[8];          /* "mixer", "moe", "mlp" or "" */
} qc_cause;

typedef struct {
    qc_cause *c;            /* [n], per backend in row order, biggest first within one */
    int n;
} qc_causes;

/* Compute the causes of r's failing rows (rows without a backend are left out). 0, or -1 when
 * out of memory (out is then empty). */
int qc_causes_compute(const qc_results *r, qc_causes *out);
void qc_causes_free(qc_causes *c);
/* The console block: per backend with a failure, a header and at most max_per_backend cause
 * lines with the cases and modes of their rows. */
void qc_report_causes_console(FILE *f, const qc_causes *c, const qc_results *r,
                              int max_per_backend);

#endif /* QC_REPORT_CAUSES_H */
