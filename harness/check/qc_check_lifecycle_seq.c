/* qc_check_lifecycle_seq.c — multi-sequence isolation and slot (batch) invariance.
 *
 * Three sequences with distinct prompts of different lengths (the case's tokens, and two
 * variants: 2 tokens longer, 2 tokens shorter), each a prefill in chunks then decode steps:
 *   multi_sequence    run interleaved through one runtime instance (one call of each sequence
 *                     per round); in round 2 sequence 1 is reset and starts again. Each
 *                     sequence's logits and final state equal its run alone (batch 1).
 *   batch_invariance  the same sequences in permuted slots (sequence i in slot (i + 2) % 3),
 *                     advanced in lockstep in slot order: each equals its batch-1 run.
 * The built-in backends: one qc_state per sequence through one backend instance; a runtime
 * under test: its own sequences (capability `sequences`).
 */

#include "qc_check_lifecycle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================================== */
/* the sequences' scripts                                                                */
/* ===================================================================================== */

typedef struct {
    int32_t *t;  /* prefill ++ decode tokens */
    int n_pre;   /* prefill tokens */
    int n;       /* all tokens */
    int next;    /* next token to feed */
} script;

/* The number of tokens of the script's next call (0: done). */
static int next_call(const lc_rt *lc, const script *sc) {
    if (sc->next >= sc->n) return 0;
    if (sc->next < sc->n_pre) {
        int k = sc->n_pre - sc->next;
        return k < lc->call_max ? k : lc->call_max;
    }
    return 1;
}

static qc_status make_scripts(lc_rt *lc, script sc[LC_SEQ], qc_err *err) {
    const int P = lc->n_pre, S = lc->n_dec;
    const int longer = P + 2 + S <= lc->cap ? P + 2 : P; /* within the runtime's context */
    const int pre[LC_SEQ] = {P, longer, P > 2 ? P - 2 : 1};
    for (int i = 0; i < LC_SEQ; i++) {
        sc[i].n_pre = pre[i];
        sc[i].n = pre[i] + S;
        sc[i].next = 0;
        sc[i].t = malloc((size_t)sc[i].n * sizeof(int32_t));
        if (!sc[i].t) return qc_errf(err, QC_ERR_OOM, "lifecycle: out of memory");
        for (int k = 0; k < sc[i].n; k++) {
            int32_t base = lc->toks[k % lc->n_all];
            sc[i].t[k] = i == 0 ? base : lc_alt(lc, base, 4 * i + k);
        }
    }
    return QC_OK;
}

/* One call of sequence i's script on the current sequence. */
static qc_status step(lc_rt *lc, script *sc, lc_rec *r, qc_err *err) {
    int k = next_call(lc, sc);
    qc_status s = lc_feed(lc, sc->t + sc->next, k, k, r, err);
    if (!s) sc->next += k;
    return s;
}

/* The script alone on sequence 0 (fresh), recording every row and the final state. */
static qc_status alone(lc_rt *lc, script *sc, lc_rec *r, qc_err *err) {
    sc->next = 0;
    qc_status s = lc_select(lc, 0, err);
    if (!s) s = lc_reset(lc, err);
    while (!s && next_call(lc, sc) > 0) s = step(lc, sc, r, err);
    if (!s) s = lc_read_state(lc, r, err);
    sc->next = 0;
    return s;
}

static void rec_restart(lc_rec *r) {
    r->rows = 0;
    r->pos0 = -1;
}

/* ===================================================================================== */
/* the two checks                                                                        */
/* ===================================================================================== */

/* The interleaved (with_reset: multi_sequence) or permuted lockstep run. slot_of[i]: the
 * runtime sequence that holds script i. */
static qc_status together(lc_rt *lc, script sc[LC_SEQ], lc_rec act[LC_SEQ], const int *slot_of,
                          int with_reset, qc_err *err) {
    qc_status s = QC_OK;
    int order[LC_SEQ]; /* scripts in the order their slots are visited */
    for (int i = 0; i < LC_SEQ; i++) order[slot_of[i]] = i;
    for (int i = 0; !s && i < LC_SEQ; i++) {
        sc[i].next = 0;
        s = lc_select(lc, slot_of[i], err);
        if (!s) s = lc_reset(lc, err);
    }
    for (int round = 0; !s; round++) {
        int any = 0;
        for (int o = 0; !s && o < LC_SEQ; o++) {
            int i = order[o];
            if (with_reset && round == 2 && i == 1) {
                s = lc_select(lc, slot_of[i], err);
                if (!s) s = lc_reset(lc, err);
                sc[i].next = 0;
                rec_restart(&act[i]);
            }
            if (s || next_call(lc, &sc[i]) == 0) continue;
            any = 1;
            s = lc_select(lc, slot_of[i], err);
            if (!s) s = step(lc, &sc[i], &act[i], err);
        }
        if (!any) break;
    }
    for (int i = 0; !s && i < LC_SEQ; i++) {
        s = lc_select(lc, slot_of[i], err);
        if (!s) s = lc_read_state(lc, &act[i], err);
    }
    return s;
}

void lc_check_sequences(lc_rt *lc) {
    static const char *const check[2] = {"multi_sequence", "batch_invariance"};
    int can0 = lc_can(lc, check[0], QC_BE_CAP_SEQUENCES); /* a SKIP row for each */
    int can1 = lc_can(lc, check[1], QC_BE_CAP_SEQUENCES);
    if (!can0 || !can1) return;
    script sc[LC_SEQ];
    lc_rec solo[LC_SEQ], act[LC_SEQ];
    memset(sc, 0, sizeof sc), memset(solo, 0, sizeof solo), memset(act, 0, sizeof act);
    qc_err err;
    qc_err_clear(&err);
    qc_status s = make_scripts(lc, sc, &err);
    for (int i = 0; !s && i < LC_SEQ; i++) {
        s = lc_rec_init(lc, &solo[i], &err);
        if (!s) s = lc_rec_init(lc, &act[i], &err);
        if (!s) s = alone(lc, &sc[i], &solo[i], &err);
    }
    static const char *const lab[LC_SEQ] = {"sequence_0", "sequence_1", "sequence_2"};
    for (int w = 0; w < 2; w++) {
        static const int ident[LC_SEQ] = {0, 1, 2}, perm[LC_SEQ] = {2, 0, 1};
        qc_status ws = s; /* a failed setup fails both rows with its message */
        if (!ws) {
            qc_err_clear(&err);
            for (int i = 0; i < LC_SEQ; i++) rec_restart(&act[i]);
            ws = together(lc, sc, act, w ? perm : ident, !w, &err);
        }
        if (ws) {
            lc_emit_failed(lc, check[w], ws, err.msg);
            continue;
        }
        char ex[300];
        snprintf(ex, sizeof ex, w ? "Sequences of %d, %d and %d prompt tokens in permuted slots "
                                    "(2, 0, 1), advanced in lockstep, vs each one alone"
                                  : "Sequences of %d, %d and %d prompt tokens interleaved through "
                                    "one instance, sequence 1 reset and restarted in round 2, vs "
                                    "each one alone",
                 sc[0].n_pre, sc[1].n_pre, sc[2].n_pre);
        lc_compare(lc, check[w], act, solo, LC_SEQ, lab, ex);
        for (int i = 0; i < LC_SEQ; i++) {
            qc_golden_state_free(lc->c->cfg, &act[i].st);
            memset(&act[i].st, 0, sizeof act[i].st);
        }
    }
    for (int i = 0; i < LC_SEQ; i++) {
        lc_rec_free(lc, &solo[i]);
        lc_rec_free(lc, &act[i]);
        free(sc[i].t);
    }
    if (!lc->native) {
        qc_err e;
        lc_select(lc, 0, &e);
    }
}
