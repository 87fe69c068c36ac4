/* qc_report_verdict.c — PASS / PARTIAL / FAIL per runtime with capability coverage
 * (qc_report_verdict.h). */
#include "qc_report_verdict.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *cap;
    const char *gives;
} GIVES[] = {
    {"hidden", "layer localisation: prefill.hidden names the first divergent layer"},
    {"state_read", "state checks (KV cache, conv, recurrent state after prefill and decode), "
                   "unused_slots, per-layer state localisation"},
    {"state_fill", "garbage_reset, restore_after_garbage: uninitialised state buffers"},
    {"threads", "threads_bitwise: results identical for any thread count"},
    {"dn_kernel", "chunked_eq_recurrent: the chunked and recurrent DeltaNet kernels agree"},
    {"chunk_size", "chunk_sweep: every chunk size gives the same answer"},
    {"snapshot", "snapshot_restore, snapshot_copy, rollback, prefix_reuse: state save/restore"},
    {"sequences", "multi_sequence, batch_invariance: sequences do not leak into each other"},
    {"trim", "rollback_trim: dropping positions"},
    {"router", "router_topk: MoE expert choices per layer and position"},
    {"topk_only", "(a top-k-only runtime offers no full logits) logits, hidden and state checks, "
                  "garbage_reset, unused_slots, threads_bitwise, static_eq_dynamic, ..."},
};

const char *qc_capability_gives(const char *cap) {
    for (size_t i = 0; i < sizeof GIVES / sizeof *GIVES; i++)
        if (!strcmp(GIVES[i].cap, cap)) return GIVES[i].gives;
    return "";
}

/* "capability 'x' not announced by ..." -> x (0), else -1. */
static int cap_of(const char *keyline, char *cap, size_t n) {
    const char *p = strstr(keyline, "capability '");
    if (!p) return -1;
    p += 12;
    const char *e = strchr(p, '\'');
    if (!e || (size_t)(e - p) >= n ||
        (!strstr(e, "not announced") && !strstr(e, "full logits not offered")))
        return -1; /* a top-k-only runtime's skips count as missing coverage too */
    memcpy(cap, p, (size_t)(e - p));
    cap[e - p] = '\0';
    return 0;
}

static qc_rt_verdict *find(qc_verdicts *v, const char *backend) {
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->v[i].backend, backend)) return &v->v[i];
    qc_rt_verdict *nv = realloc(v->v, (size_t)(v->n + 1) * sizeof *nv);
    if (!nv) return NULL;
    v->v = nv;
    qc_rt_verdict *x = &v->v[v->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->backend, sizeof x->backend, "%s", backend);
    return x;
}

static void count_skip(qc_rt_verdict *x, const char *keyline) {
    char cap[32];
    if (!cap_of(keyline, cap, sizeof cap)) {
        x->cap_skip++;
        for (int i = 0; i < x->n_caps; i++)
            if (!strcmp(x->caps[i].name, cap)) { x->caps[i].n++; return; }
        if (x->n_caps < 16) {
            snprintf(x->caps[x->n_caps].name, sizeof x->caps[0].name, "%s", cap);
            x->caps[x->n_caps++].n = 1;
        }
        return;
    }
    for (int i = 0; i < x->n_reasons; i++)
        if (!strcmp(x->reasons[i], keyline)) { x->reason_n[i]++; return; }
    if (x->n_reasons < 8) {
        snprintf(x->reasons[x->n_reasons], sizeof x->reasons[0], "%s", keyline);
        x->reason_n[x->n_reasons++] = 1;
    }
}

int qc_verdicts_compute(const qc_results *r, qc_verdicts *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < r->n; i++) {
        const qc_check_row *w = &r->rows[i];
        if (!strcmp(w->backend, "-") || !w->backend[0]) continue;
        qc_rt_verdict *x = find(out, w->backend);
        if (!x) return -1;
        switch (w->verdict) {
        case QC_VERDICT_PASS: x->pass++; break;
        case QC_VERDICT_FAIL: x->fail++; break;
        case QC_VERDICT_ERROR: x->error++; break;
        case QC_VERDICT_SKIP: x->skip++; count_skip(x, w->keyline); break;
        }
    }
    /* rows without a backend (a golden that cannot be read, a model that does not load) are
     * failures of every runtime: the run is incomplete */
    int orphan_err = 0, orphan_fail = 0;
    for (int i = 0; i < r->n; i++) {
        const qc_check_row *w = &r->rows[i];
        if (strcmp(w->backend, "-") && w->backend[0]) continue;
        orphan_err += w->verdict == QC_VERDICT_ERROR;
        orphan_fail += w->verdict == QC_VERDICT_FAIL;
    }
    for (int i = 0; i < out->n; i++) {
        qc_rt_verdict *x = &out->v[i];
        x->error += orphan_err;
        x->fail += orphan_fail;
        int run = x->pass + x->fail + x->error;
        x->coverage = run + x->cap_skip > 0 ? (double)run / (double)(run + x->cap_skip) : 0;
        x->verdict = x->fail + x->error ? "FAIL" : x->cap_skip ? "PARTIAL" : "PASS";
        /* the biggest unlock first */
        for (int a = 1; a < x->n_caps; a++)
            for (int b = a; b > 0 && x->caps[b].n > x->caps[b - 1].n; b--) {
                qc_verdict_count t = x->caps[b];
                x->caps[b] = x->caps[b - 1];
                x->caps[b - 1] = t;
            }
    }
    return 0;
}

void qc_verdicts_free(qc_verdicts *v) {
    free(v->v);
    v->v = NULL;
    v->n = 0;
}

int qc_verdicts_below(const qc_verdicts *v, double min_pct) {
    if (min_pct < 0) return 0;
    for (int i = 0; i < v->n; i++)
        if (100.0 * v->v[i].coverage < min_pct) return 1;
    return 0;
}

/* the console's unlock table: its largest rows (a sixth row becomes the "+ N more" line) */
#define VERDICT_TABLE_ROWS 4

/* the largest unlocks as a table, the rest in one line (all in the JSON "coverage"), then the
 * --require line */
static void unlock_table(FILE *f, const qc_rt_verdict *x, const char *req) {
    int rows = x->n_caps <= VERDICT_TABLE_ROWS + 1 ? x->n_caps : VERDICT_TABLE_ROWS;
    for (int c = 0; c < rows; c++)
        fprintf(f, "  + %-11s %5d checks: %s\n", x->caps[c].name, x->caps[c].n,
                qc_capability_gives(x->caps[c].name));
    if (rows < x->n_caps) {
        fprintf(f, "  + %d more:", x->n_caps - rows);
        for (int c = rows; c < x->n_caps; c++)
            fprintf(f, "%s %s %d", c > rows ? "," : "", x->caps[c].name, x->caps[c].n);
        fprintf(f, " checks (what each gives: the JSON report's \"coverage\", --html)\n");
    }
    if (req[0])
        fprintf(f, "  CI can insist: --require %s (a missing capability FAILS), or "
                   "--min-coverage PCT\n", req);
}

void qc_report_verdict_console(FILE *f, const qc_verdicts *v) {
    for (int i = 0; i < v->n; i++) {
        const qc_rt_verdict *x = &v->v[i];
        int run = x->pass + x->fail + x->error;
        fprintf(f, "verdict %s: %s — %d passed, %d failed%s", x->backend, x->verdict, x->pass,
                x->fail + x->error, x->error ? " (errors included)" : "");
        if (x->cap_skip)
            fprintf(f, "; coverage %.0f %% (%d of %d checks; %d skipped for capabilities it "
                       "does not announce)\n", 100.0 * x->coverage, run, run + x->cap_skip,
                    x->cap_skip);
        else
            fprintf(f, "; coverage 100 %%\n");
        char req[256] = "";
        for (int c = 0; c < x->n_caps; c++) {
            size_t o = strlen(req);
            if (strcmp(x->caps[c].name, "topk_only")) /* not a capability one can require */
                snprintf(req + o, sizeof req - o, "%s%s", o ? "," : "", x->caps[c].name);
        }
        if (!strcmp(x->verdict, "FAIL")) { /* the causes matter first: the unlocks in one line */
            if (x->n_caps) {
                fprintf(f, "  not run (capabilities not announced):");
                for (int c = 0; c < x->n_caps; c++)
                    fprintf(f, "%s %s %d", c ? "," : "", x->caps[c].name, x->caps[c].n);
                fprintf(f, "\n");
            }
        } else {
            unlock_table(f, x, req);
        }
        for (int s = 0; s < x->n_reasons; s++)
            fprintf(f, "  skipped %d: %s\n", x->reason_n[s], x->reasons[s]);
    }
    fflush(f);
}
