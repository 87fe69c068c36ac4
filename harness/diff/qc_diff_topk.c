/* qc_diff_topk.c — a top-k case of an ACTUAL (golden/SCHEMA.md "Top-k ACTUAL": prefill/topk and
 * decode/topk instead of the logits, what `record --like GOLDEN --backend http:URL` writes)
 * against its golden case: the same rows as `check --backend http:` (topk.argmax,
 * topk.logprob, topk.top1_in_k, topk.overlap), from the same tally and the same limits
 * (qc_check_topk.h, ck_topk_limits), so that diff of a recorded server and check of the live
 * server give the same verdicts. */

#include "qc_diff_internal.h"

#include <stdio.h>
#include <string.h>

#include "qc_check_http.h"
#include "qc_check_topk.h"

/* The tensors a top-k case carries besides its top-k lists: named in one warning. */
static void qd_topk_ignored(ck_ctx *c, const qc_actual *a, const qc_golden_case *gc,
                            const qc_actual_case *ac) {
    const char *what[4];
    int n = 0;
    if (ac->prefill_hidden) what[n++] = "prefill/hidden";
    if (ac->prefill_state.present) what[n++] = "prefill/state";
    if (ac->decode_logits) what[n++] = "decode/logits";
    if (ac->decode_state.present) what[n++] = "decode/state";
    if (!n) return;
    char list[200] = "";
    size_t o = 0;
    for (int i = 0; i < n && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", what[i]);
    qc_results_warn(c->res, "%s: /cases/%s: %s: not compared (a top-k case, without "
                    "prefill/logits, is compared by its top-k lists only)", a->path, gc->name,
                    list);
    fprintf(stderr, "qwen-conform: warning: %s: /cases/%s: %s: not compared (a top-k case, "
            "without prefill/logits, is compared by its top-k lists only)\n", a->path, gc->name,
            list);
}

void qd_topk(ck_ctx *c, const diff_opts *d, const qc_actual *a, const qc_golden_case *gc,
             const qc_actual_case *ac) {
    const int V = c->cfg->vocab_size, T = gc->n_tokens, k = ac->tk_k;
    qd_topk_ignored(c, a, gc, ac);
    cmp_spec s = {.case_name = gc->name, .backend = d->label, .mode = "file"};
    int n_dec = gc->n_decode > 0 ? qd_decode_tokens(c, &s, gc, ac) : 0;
    qc_topk_lim lim;
    ck_topk_limits(c, gc->name, k, &lim);
    ck_tf_result r;
    memset(&r, 0, sizeof r);
    qc_topk_tally_init(&r.t);
    r.total = T + gc->n_decode;
    ck_tf_tally_rows(gc, V, &lim, gc->start_pos, T, k, ac->prefill_tk_ids, ac->prefill_tk_lps,
                     NULL, &r);
    if (ac->decode_tk_ids)
        ck_tf_tally_rows(gc, V, &lim, gc->start_pos + T, n_dec, k, ac->decode_tk_ids,
                         ac->decode_tk_lps, NULL, &r);
    ck_topk_emit_rows(c, gc, &lim, &r, d->label, "file");
}
