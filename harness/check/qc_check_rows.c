/* qc_check_rows.c — the bottom of the check engine (qc_check_internal.h): a result row made,
 * filled and emitted (streamed to the console), the verdict of a run that could not be made,
 * the capability SKIP row, --maxfail, the wall clock, a slot's index by name and a layer's
 * kind. Every check family (compare, localise, router, tier, drift, invariants, lifecycle,
 * kernels, top-k, serving) and the engine call it; it calls none of them
 * (tests/check_cycles.py). */

#include "qc_check_internal.h"

#include "qc_remote.h"
#include "qc_report_console.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

double ck_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ck_stop_now(ck_ctx *c) {
    if (c->o->maxfail <= 0 || c->res->n_fail + c->res->n_error < c->o->maxfail) return 0;
    c->o->stopped = 1;
    return 1;
}

int ck_slot_of(const ck_ctx *c, const char *name) {
    for (int i = 0; i < c->n_slots; i++)
        if (c->slot[i].name && !strcmp(c->slot[i].name, name)) return i;
    return 0;
}

/* Add a row and stream it to the console. */
void ck_emit(ck_ctx *c, qc_check_row *row) {
    snprintf(row->golden, sizeof row->golden, "%s", c->g ? c->g->path : "");
    row->seconds = ck_wall() - c->t_row;
    c->t_row = ck_wall();
    qc_check_row *st = qc_results_add(c->res, row);
    if (st && !c->o->calibrate && !c->o->list) qc_report_console_row(stdout, st, c->o->quiet);
}

void ck_loc_init(qc_localisation *L) {
    memset(L, 0, sizeof *L);
    L->kind = QC_LOC_NONE;
    L->layer = L->layer_lo = L->step = -1;
}

void ck_row_init(qc_check_row *r, const char *stem, const char *case_name,
                     const char *backend, const char *mode, const char *check) {
    memset(r, 0, sizeof *r);
    snprintf(r->stem, sizeof r->stem, "%s", stem);
    snprintf(r->case_name, sizeof r->case_name, "%s", case_name);
    snprintf(r->backend, sizeof r->backend, "%s", backend);
    snprintf(r->mode, sizeof r->mode, "%s", mode);
    snprintf(r->check, sizeof r->check, "%s", check);
    ck_loc_init(&r->loc);
}

void ck_emit_simple(ck_ctx *c, const char *case_name, const char *backend, const char *mode,
                        const char *check, qc_verdict v, const char *keyline, char *detail) {
    qc_check_row r;
    ck_row_init(&r, c->stem, case_name, backend, mode, check);
    r.verdict = v;
    snprintf(r.keyline, sizeof r.keyline, "%s", keyline);
    r.detail = detail;
    ck_emit(c, &r);
}

/* The verdict of a run that could not be made: a runtime under test that fails is a FAIL of
 * that runtime, a capability it lacks a SKIP, anything else an ERROR of ours. */
qc_verdict ck_failed_run_verdict(qc_status s) {
    return s == QC_ERR_RUNTIME ? QC_VERDICT_FAIL
           : s == QC_ERR_UNSUPPORTED ? QC_VERDICT_SKIP : QC_VERDICT_ERROR;
}

/* "capability 'x' not announced by <backend>" */
void ck_emit_cap_skip(ck_ctx *c, const char *case_name, const char *bname, const char *mode,
                          const char *check, unsigned cap) {
    char k[400];
    snprintf(k, sizeof k, "capability '%s' not announced by %s", qc_cap_name(cap), bname);
    ck_emit_simple(c, case_name, bname, mode, check, QC_VERDICT_SKIP, k, NULL);
}

const char *ck_layer_kind(const qc_config *cfg, int l) {
    if (l < 0 || l >= cfg->n_layers) return "?";
    return cfg->layer_types[l] == QC_LAYER_FULL ? "full_attention" : "linear_attention";
}
