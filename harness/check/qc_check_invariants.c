/* qc_check_invariants.c — the garbage_reset and unused_slots checks: a NaN-filled state,
 * reset, must give the fresh result exactly, and the KV slots past the used positions stay 0. */

#include "qc_check_internal.h"

#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qc/qc_state.h"
#include "qc_remote.h"

/* One run on a state filled with NaN and then reset (through the runner, as a runtime would
 * reuse its buffers), checked twice:
 *   garbage_reset  its logits and states are bit-identical to the fresh run `act`;
 *   unused_slots   the KV-cache slots beyond the used positions (capacity + 8 spare) are
 *                  exactly +0. */
void ck_check_garbage_and_slots(ck_ctx *c, qc_backend *be, const qc_golden_case *gc,
                                    qc_mode mode, const qc_golden_case *act) {
    const qc_config *cfg = c->cfg;
    const int V = cfg->vocab_size, T = gc->n_tokens, S = gc->n_decode, P = gc->start_pos;
    qc_err err;
    qc_err_clear(&err);
    const int extra = 8;
    qc_profile p;
    ck_case_profile(gc, mode, extra, &p);
    qc_state *st = NULL;
    qc_runner *r = NULL;
    const char *mname = qc_mode_str(mode);
    qc_golden_case gb;
    memset(&gb, 0, sizeof gb);
    gb.n_tokens = T, gb.n_decode = S, gb.start_pos = P;
    gb.prefill_logits = malloc((size_t)T * V * sizeof(float));
    gb.decode_logits = malloc(((size_t)S * V + 1) * sizeof(float));
    const int has_state = (be->caps & QC_BE_CAP_STATE_READ) != 0;
    qc_status s = (!gb.prefill_logits || !gb.decode_logits)
                      ? qc_errf(&err, QC_ERR_OOM, "garbage run: out of memory")
                      : qc_state_create(cfg, p.max_context_len, &st, &err);
    if (!s) s = qc_runner_create(be, &p, st, &r, &err);
    if (!s) {
        if (c->o->faults.static_no_advance)
            s = qc_runner_set_option(r, "fault.static_no_advance", "1", &err);
        if (!s) s = qc_backend_fill_state(be, st, NAN, &err);
        if (!s) s = qc_runner_reset(r, &err);
        if (!s && gc->n_history > 0)
            s = qc_runner_prefill(r, gc->history, gc->n_history, 0, NULL, NULL, NULL, &err);
        if (!s) s = qc_runner_prefill(r, gc->tokens, T, P, gb.prefill_logits, NULL, NULL, &err);
        if (!s && has_state) s = qc_backend_sync_state(be, st, P + T, &err);
        if (!s && has_state) s = qc_golden_state_from(cfg, st, P + T, &gb.prefill_state, &err);
        for (int k = 0; !s && k < S; k++)
            s = qc_runner_decode(r, gc->decode_tokens[k], gb.decode_logits + (size_t)k * V, &err);
        if (!s && S > 0 && has_state) s = qc_backend_sync_state(be, st, P + T + S, &err);
        if (!s && S > 0 && has_state)
            s = qc_golden_state_from(cfg, st, P + T + S, &gb.decode_state, &err);
    }
    if (s) {
        qc_verdict v = ck_failed_run_verdict(s);
        ck_emit_simple(c, gc->name, be->name, mname, "garbage_reset", v, err.msg, NULL);
        ck_emit_simple(c, gc->name, be->name, mname, "unused_slots", v, err.msg, NULL);
        goto done;
    }
    /* garbage_reset */
    {
        ck_partlist *pl = calloc(1, sizeof *pl);
        if (pl) {
            ck_add_all_parts(pl, cfg, &gb, act);
            cmp_spec cs = {.case_name = gc->name, .backend = be->name, .mode = mname,
                           .check = "garbage_reset", .bitwise = 1,
                           .extra = "A state filled with NaN and then reset must give exactly "
                                    "the fresh result"};
            ck_compare_parts(c, &cs, pl);
            free(pl);
        }
    }
    /* unused_slots: the runtime's KV slots beyond the used positions */
    int used = P + T + S;
    if (!has_state) {
        ck_emit_cap_skip(c, gc->name, be->name, mname, "unused_slots", QC_BE_CAP_STATE_READ);
        goto done;
    }
    qc_err_clear(&err);
    s = qc_backend_sync_state(be, st, p.max_context_len, &err);
    if (s) {
        ck_emit_simple(c, gc->name, be->name, mname, "unused_slots", ck_failed_run_verdict(s),
                       err.msg, NULL);
        goto done;
    }
    size_t n = 0, bad = 0;
    char first[256] = "";
    for (int l = 0; l < cfg->n_layers; l++) {
        if (cfg->layer_types[l] != QC_LAYER_FULL) continue;
        for (int kv = 0; kv < 2; kv++) {
            const float *buf = kv ? st->v_cache[l] : st->k_cache[l];
            for (int h = 0; h < cfg->n_kv_heads; h++)
                for (int pos = used; pos < p.max_context_len; pos++)
                    for (int ch = 0; ch < cfg->head_dim; ch++) {
                        float v = buf[((size_t)h * p.max_context_len + pos) * cfg->head_dim + ch];
                        uint32_t bits;
                        memcpy(&bits, &v, sizeof bits);
                        n++;
                        if (bits != 0) {
                            if (!bad)
                                snprintf(first, sizeof first,
                                         "layer %d %s, kv head %d, position %d, channel %d = %g",
                                         l, kv ? "v_cache" : "k_cache", h, pos, ch, (double)v);
                            bad++;
                        }
                    }
        }
    }
    char key[320];
    if (n == 0) {
        ck_emit_simple(c, gc->name, be->name, mname, "unused_slots", QC_VERDICT_SKIP,
                    "no full-attention layer: no KV cache to inspect", NULL);
    } else if (bad == 0) {
        snprintf(key, sizeof key, "%zu unused slot values beyond position %d all exactly 0", n, used);
        ck_emit_simple(c, gc->name, be->name, mname, "unused_slots", QC_VERDICT_PASS, key, NULL);
    } else {
        snprintf(key, sizeof key, "%zu / %zu unused KV-cache values are non-zero; first: %s", bad, n,
                 first);
        ck_emit_simple(c, gc->name, be->name, mname, "unused_slots", QC_VERDICT_FAIL, key,
                    qc_strdup_printf("KV-cache slots beyond the %d used positions must stay "
                                     "exactly 0 (after a NaN fill and reset)\nFirst non-zero: %s",
                                     used, first));
    }
done:
    qc_runner_destroy(r);
    qc_state_destroy(st);
    qc_golden_state_free(cfg, &gb.prefill_state);
    qc_golden_state_free(cfg, &gb.decode_state);
    free(gb.prefill_logits);
    free(gb.decode_logits);
}
