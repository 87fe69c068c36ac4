/* qc_check_run.c — one run of a golden case on a backend (qc_check_internal.h): the profile of
 * a case in a mode, its inputs, the run with the kernel options of a call and the hidden-state
 * / MoE capture. Used by the engine and the checks that run a case again (kernels, drift,
 * invariants, top-k); it calls none of them back (tests/check_cycles.py). */

#include "qc_check_internal.h"

#include <string.h>

/* Profile for a case in a mode (context large enough for history + prompt + decode). */
void ck_case_profile(const qc_golden_case *gc, qc_mode mode, int extra, qc_profile *p) {
    int msl = gc->max_seq_len > 0 ? gc->max_seq_len : 128;
    int need = gc->start_pos + gc->n_tokens + gc->n_decode;
    int ctxlen = need > msl ? need : msl;
    qc_profile_for_mode(p, mode, msl, ctxlen + extra);
}

static void case_input(const qc_golden_case *gc, const qc_check_opts *o, qc_case_input *in) {
    memset(in, 0, sizeof *in);
    in->history = gc->n_history > 0 ? gc->history : NULL;
    in->n_history = gc->n_history;
    in->tokens = gc->tokens;
    in->n_tokens = gc->n_tokens;
    in->n_decode = gc->n_decode;
    in->forced = gc->n_decode > 0 ? gc->decode_tokens : NULL;
    in->static_no_advance = o->faults.static_no_advance;
}

/* Run with an optional hidden capture. hc may be NULL. */
qc_status ck_run_one(qc_backend *be, const qc_golden_case *gc, qc_mode mode,
                     const qc_check_opts *o, int garbage, ck_hcap *hc, qc_golden_case *out,
                     qc_err *err) {
    return ck_run_call(be, NULL, gc, mode, o, garbage, hc, out, err);
}

qc_status ck_run_call(qc_backend *be, const qc_call *call, const qc_golden_case *gc,
                      qc_mode mode, const qc_check_opts *o, int garbage, ck_hcap *hc,
                      qc_golden_case *out, qc_err *err) {
    qc_profile p;
    qc_case_input in;
    ck_case_profile(gc, mode, 0, &p);
    case_input(gc, o, &in);
    in.garbage_state = garbage;
    qc_call k = call ? *call : qc_backend_call_defaults(&be->opts);
    if (hc) {
        k.trace = ck_hcap_cb;
        k.trace_user = hc;
    }
    in.call = &k;
    return qc_run_case(be, &p, gc->name, &in, out, err);
}
