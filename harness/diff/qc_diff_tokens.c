/* qc_diff_tokens.c — the decode.tokens row of one ACTUAL case against its golden case
 * (qc_diff_internal.h, qd_decode_tokens): which decode steps are comparable. Used by the
 * tensor checks (qc_diff_checks.c) and the top-k rows (qc_diff_topk.c); calls neither, so
 * they do not call each other back (tests/check_cycles.py). */

#include "qc_diff_internal.h"

#include <stdio.h>

/* The decode steps whose rows are comparable: S, or the first step where the ACTUAL fed
 * another token than the golden's teacher-forced one (a FAIL row: a greedy run left the
 * golden's path, which a correct runtime does not, the golden's margins being >= 0.05). */
int qd_decode_tokens(ck_ctx *c, const cmp_spec *s, const qc_golden_case *gc,
                     const qc_actual_case *ac) {
    /* decode rows to compare: the logits, or in a top-k case (no prefill/logits) the top-k */
    int rows = ac->prefill_logits ? ac->has_decode_logits : ac->decode_tk_ids != NULL;
    if (ac->n_decode_tokens < 0 || !rows) return gc->n_decode;
    for (int k = 0; k < gc->n_decode; k++) {
        if (ac->decode_tokens[k] == gc->decode_tokens[k]) continue;
        char key[320];
        snprintf(key, sizeof key, "/cases/%s/decode/tokens[%d]: ACTUAL fed %d, the golden %d "
                 "(position %d)", gc->name, k, (int)ac->decode_tokens[k],
                 (int)gc->decode_tokens[k], gc->start_pos + gc->n_tokens + k);
        ck_emit_simple(c, gc->name, s->backend, s->mode, "decode.tokens", QC_VERDICT_FAIL, key,
                       qc_strdup_printf("Decode token mismatch: %s.\nThe golden's decode is "
                                        "teacher-forced with its greedy tokens; a run that "
                                        "chose another token (a greedy decode that left the "
                                        "golden's path) diverged. Decode rows from step %d on "
                                        "are not compared.", key, k));
        return k;
    }
    return gc->n_decode;
}
