/* qc_diff_internal.h — what the parts of `qwen-conform diff` share (harness-private):
 *   qc_cmd_diff.c     the command line, file / directory pairing, the report
 *   qc_diff_file.c    one GOLDEN x ACTUAL pair: provenance, coverage, the cases
 *   qc_diff_checks.c  the checks of one case (inputs, logits, argmax, hidden, states, decode)
 *   qc_diff_router.c  router_topk of one case (MoE)
 *   qc_diff_topk.c    the topk.* rows of a top-k case (prefill/topk instead of prefill/logits)
 *   qc_diff_tokens.c  the decode.tokens row both of the last two start with
 *   qc_actual_read.c  reading the ACTUAL file (qc_actual.h)
 */
#ifndef QC_DIFF_INTERNAL_H
#define QC_DIFF_INTERNAL_H

#include <regex.h>

#include "qc_actual.h"
#include "qc_check_internal.h"

typedef struct {
    const char *label;     /* the runtime's name in the reports (--label) */
    qc_layout layout;      /* --layout */
    int has_cases;         /* --cases given */
    regex_t cases;         /* compiled --cases (POSIX extended) */
    int compared;          /* cases compared so far (0 at the end: nothing checked) */
} diff_opts;

/* One GOLDEN x ACTUAL pair: every row into c->res (c->g, c->cfg, c->stem are set here). */
void qd_file(ck_ctx *c, diff_opts *d, const char *golden_path, const char *actual_path,
             const char *stem);

/* The checks of one case: golden case gc (loaded) against ACTUAL case ac (loaded). */
void qd_case(ck_ctx *c, const diff_opts *d, const qc_actual *a, const qc_golden_case *gc,
             const qc_actual_case *ac);

/* qc_diff_router.c: the router_topk row of one case (a MoE model's router choices; decode
 * rows up to the first decode token that left the golden's path). SKIPPED with the reason
 * when either file has no router datasets (or the model is dense: qd_file, once per file). */
void qd_router(ck_ctx *c, const diff_opts *d, const qc_golden_case *gc, const qc_actual_case *ac);

/* qc_diff_tokens.c: the decode.tokens row of a case. Returns the decode steps whose rows are
 * comparable: S, or the first step where the ACTUAL fed another token than the golden (a FAIL
 * row). S without decode/tokens or without decode rows (logits, or top-k in a top-k case). */
int qd_decode_tokens(ck_ctx *c, const cmp_spec *s, const qc_golden_case *gc,
                     const qc_actual_case *ac);

/* qc_diff_topk.c: a top-k case (no prefill/logits; prefill/topk and maybe decode/topk,
 * golden/SCHEMA.md "Top-k ACTUAL"): decode.tokens, then the rows topk.argmax, topk.logprob,
 * topk.top1_in_k, topk.overlap, with check's limits and verdicts (qc_check_topk.h) on every
 * prompt position and the comparable decode steps. The case's other tensors are not compared
 * (a warning names them). */
void qd_topk(ck_ctx *c, const diff_opts *d, const qc_actual *a, const qc_golden_case *gc,
             const qc_actual_case *ac);

#endif /* QC_DIFF_INTERNAL_H */
