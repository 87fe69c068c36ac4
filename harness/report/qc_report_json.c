/* qc_report_json.c — JSON report (cJSON). */
#include "qc_report_json.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qc_outpath.h"
#include "qc_report_causes.h"
#include "qc_report_verdict.h"

/* A number, or its name as a string when non-finite. */
static void add_num(cJSON *o, const char *key, double v) {
    if (isnan(v))
        cJSON_AddStringToObject(o, key, "NaN");
    else if (isinf(v))
        cJSON_AddStringToObject(o, key, v > 0 ? "Infinity" : "-Infinity");
    else
        cJSON_AddNumberToObject(o, key, v);
}

static void add_loc(cJSON *o, const char *key, const qc_loc *l) {
    if (!l->valid) return;
    cJSON *j = cJSON_AddObjectToObject(o, key);
    if (!j) return;
    int64_t ix[4] = {0};
    size_t flat = l->idx;
    for (int i = l->desc.ndim - 1; i >= 0; i--) {
        int64_t s = l->desc.shape[i] > 0 ? l->desc.shape[i] : 1;
        ix[i] = (int64_t)(flat % (size_t)s);
        flat /= (size_t)s;
    }
    char mean[256];
    qc_tdesc_meaning(&l->desc, l->idx, mean, sizeof mean);
    cJSON_AddStringToObject(j, "tensor", l->desc.path);
    cJSON_AddStringToObject(j, "class", qc_tclass_str(l->desc.cls));
    cJSON *arr = cJSON_AddArrayToObject(j, "index");
    for (int i = 0; arr && i < l->desc.ndim; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)ix[i]));
    if (l->desc.layer >= 0) cJSON_AddNumberToObject(j, "layer", l->desc.layer);
    cJSON_AddStringToObject(j, "meaning", mean);
    add_num(j, "actual", l->actual);
    add_num(j, "expected", l->golden);
}

static cJSON *row_json(const qc_check_row *w) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "golden", w->golden);
    cJSON_AddStringToObject(o, "stem", w->stem);
    cJSON_AddStringToObject(o, "case", w->case_name);
    cJSON_AddStringToObject(o, "backend", w->backend);
    cJSON_AddStringToObject(o, "mode", w->mode);
    cJSON_AddStringToObject(o, "check", w->check);
    cJSON_AddStringToObject(o, "verdict", qc_verdict_str(w->verdict));
    add_num(o, "seconds", w->seconds);
    cJSON_AddStringToObject(o, "message", w->keyline);
    if (w->has_metrics) {
        const qc_metrics *m = &w->m;
        cJSON *t = cJSON_AddObjectToObject(o, "tolerance");
        if (t) {
            if (m->bitwise) {
                cJSON_AddStringToObject(t, "kind", "bitwise");
            } else {
                cJSON_AddStringToObject(t, "kind", "allclose");
                add_num(t, "atol", w->tol.atol);
                add_num(t, "rtol", w->tol.rtol);
                if (w->tol.max_kl >= 0) add_num(t, "max_kl", w->tol.max_kl);
            }
            if (w->tol_reason[0]) cJSON_AddStringToObject(t, "reason", w->tol_reason);
        }
        cJSON *j = cJSON_AddObjectToObject(o, "metrics");
        if (j) {
            add_num(j, "n", (double)m->n);
            add_num(j, "n_mismatch", (double)m->n_mismatch);
            add_num(j, "pct_mismatch", m->n ? 100.0 * (double)m->n_mismatch / (double)m->n : 0.0);
            add_num(j, "n_nonfinite", (double)m->n_nonfinite);
            add_num(j, "max_abs", m->max_abs);
            add_num(j, "max_rel", m->max_rel);
            add_num(j, "cosine", m->cosine);
            add_num(j, "nmse", m->nmse);
            add_loc(j, "max_abs_at", &m->at_max_abs);
            add_loc(j, "max_rel_at", &m->at_max_rel);
            add_loc(j, "worst", &m->worst);
            add_loc(j, "first_nonfinite", &m->first_nonfinite);
            add_loc(j, "first_mismatch", &m->first_mismatch);
            if (m->has_logits) {
                cJSON *lg = cJSON_AddObjectToObject(j, "logits");
                if (lg) {
                    add_num(lg, "rows", (double)m->rows);
                    add_num(lg, "top1_agree", (double)m->top1_agree);
                    add_num(lg, "top1_near_tie", (double)m->top1_near_tie);
                    add_num(lg, "kl_mean", m->kl_mean);
                    add_num(lg, "kl_max", m->kl_max);
                }
            }
        }
    }
    if (w->loc.kind != QC_LOC_NONE) {
        cJSON *l = cJSON_AddObjectToObject(o, "first_divergent_layer");
        if (l) {
            cJSON_AddStringToObject(l, "kind", qc_loc_kind_str(w->loc.kind));
            if (w->loc.layer >= 0) cJSON_AddNumberToObject(l, "layer", w->loc.layer);
            if (w->loc.kind == QC_LOC_AT_OR_BEFORE && w->loc.layer_lo >= 0)
                cJSON_AddNumberToObject(l, "after_layer", w->loc.layer_lo);
            if (w->loc.step >= 0) cJSON_AddNumberToObject(l, "decode_step", w->loc.step);
            cJSON_AddStringToObject(l, "source", w->loc.source);
            if (w->loc.block[0]) cJSON_AddStringToObject(l, "block", w->loc.block);
            if (w->loc.has_expert) {
                cJSON_AddNumberToObject(l, "expert_expected", w->loc.expert_expected);
                if (w->loc.expert_got >= 0)
                    cJSON_AddNumberToObject(l, "expert_got", w->loc.expert_got);
            }
        }
    }
    if (w->detail) cJSON_AddStringToObject(o, "detail", w->detail);
    if (w->drift_json) {
        cJSON *d = cJSON_Parse(w->drift_json);
        if (d) cJSON_AddItemToObject(o, "drift", d);
    }
    return o;
}

/* "verdict": {backend: "PASS" | "PARTIAL" | "FAIL"}, "coverage": {backend: {ratio, run,
 * skipped_for_capabilities, unlock: {capability: {checks, gives}}, require}} */
static void add_verdicts(cJSON *root, const qc_results *r) {
    qc_verdicts v;
    if (qc_verdicts_compute(r, &v)) return;
    cJSON *vj = cJSON_AddObjectToObject(root, "verdict");
    cJSON *cj = cJSON_AddObjectToObject(root, "coverage");
    for (int i = 0; vj && cj && i < v.n; i++) {
        const qc_rt_verdict *x = &v.v[i];
        cJSON_AddStringToObject(vj, x->backend, x->verdict);
        cJSON *o = cJSON_AddObjectToObject(cj, x->backend);
        if (!o) break;
        add_num(o, "ratio", x->coverage);
        cJSON_AddNumberToObject(o, "run", x->pass + x->fail + x->error);
        cJSON_AddNumberToObject(o, "skipped_for_capabilities", x->cap_skip);
        cJSON *u = cJSON_AddObjectToObject(o, "unlock");
        char req[256] = "";
        for (int c = 0; u && c < x->n_caps; c++) {
            cJSON *e = cJSON_AddObjectToObject(u, x->caps[c].name);
            cJSON_AddNumberToObject(e, "checks", x->caps[c].n);
            cJSON_AddStringToObject(e, "gives", qc_capability_gives(x->caps[c].name));
            size_t n = strlen(req);
            if (strcmp(x->caps[c].name, "topk_only")) /* not a capability one can require */
                snprintf(req + n, sizeof req - n, "%s%s", n ? "," : "--require ",
                         x->caps[c].name);
        }
        cJSON_AddStringToObject(o, "require", req);
    }
    qc_verdicts_free(&v);
}

/* "causes": [{cause, rule, rows: [indices into checks], n_rows, backend, layer, step, block,
 * kind[, after_layer]}] (qc_report_causes.h); null for no layer / step / block. */
static void add_causes(cJSON *root, const qc_results *r) {
    qc_causes cz;
    cJSON *arr = cJSON_AddArrayToObject(root, "causes");
    if (!arr || qc_causes_compute(r, &cz)) return;
    for (int i = 0; i < cz.n; i++) {
        const qc_cause *c = &cz.c[i];
        cJSON *o = cJSON_CreateObject();
        if (!o) break;
        cJSON_AddItemToArray(arr, o);
        cJSON_AddStringToObject(o, "cause", c->text);
        cJSON_AddStringToObject(o, "rule", c->rule);
        cJSON *rows = cJSON_AddArrayToObject(o, "rows");
        for (int k = 0; rows && k < c->n_rows; k++)
            cJSON_AddItemToArray(rows, cJSON_CreateNumber(c->rows[k]));
        cJSON_AddNumberToObject(o, "n_rows", c->n_rows);
        cJSON_AddStringToObject(o, "backend", c->backend);
        cJSON_AddItemToObject(o, "layer", c->layer >= 0 ? cJSON_CreateNumber(c->layer)
                                                         : cJSON_CreateNull());
        cJSON_AddItemToObject(o, "step", c->step >= 0 ? cJSON_CreateNumber(c->step)
                                                       : cJSON_CreateNull());
        cJSON_AddItemToObject(o, "block", c->block[0] ? cJSON_CreateString(c->block)
                                                       : cJSON_CreateNull());
        cJSON_AddStringToObject(o, "kind", qc_loc_kind_str(c->kind));
        if (c->layer_lo >= 0) cJSON_AddNumberToObject(o, "after_layer", c->layer_lo);
    }
    qc_causes_free(&cz);
}

char *qc_report_json_string(const qc_results *r) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON_AddNumberToObject(root, "schema_version", QC_REPORT_JSON_SCHEMA_VERSION);
    cJSON_AddStringToObject(root, "tool", "qwen-conform");
    cJSON_AddStringToObject(root, "tool_version", r->tool_version);
    cJSON_AddStringToObject(root, "machine", r->machine);
    cJSON_AddStringToObject(root, "isa", r->isa);
    cJSON_AddStringToObject(root, "policy", r->policy);
    cJSON_AddStringToObject(root, "started", r->started);
    add_num(root, "seconds", r->seconds);
    cJSON *s = cJSON_AddObjectToObject(root, "summary");
    if (s) {
        cJSON_AddNumberToObject(s, "checks", r->n);
        cJSON_AddNumberToObject(s, "passed", r->n_pass);
        cJSON_AddNumberToObject(s, "failed", r->n_fail);
        cJSON_AddNumberToObject(s, "skipped", r->n_skip);
        cJSON_AddNumberToObject(s, "errors", r->n_error);
        cJSON_AddNumberToObject(s, "exit_code", qc_results_exit_code(r));
        cJSON_AddBoolToObject(s, "stopped_early", r->stopped_early != 0);
        if (r->stopped_early) cJSON_AddNumberToObject(s, "maxfail", r->maxfail);
    }
    add_verdicts(root, r);
    add_causes(root, r);
    cJSON *wa = cJSON_AddArrayToObject(root, "warnings");
    for (int i = 0; wa && i < r->n_warnings; i++)
        cJSON_AddItemToArray(wa, cJSON_CreateString(r->warnings[i]));
    cJSON *arr = cJSON_AddArrayToObject(root, "checks");
    for (int i = 0; arr && i < r->n; i++) {
        cJSON *o = row_json(&r->rows[i]);
        if (o) cJSON_AddItemToArray(arr, o);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

qc_status qc_report_json_write(const char *path, const qc_results *r, qc_err *err) {
    char *text = qc_report_json_string(r);
    if (!text) return qc_errf(err, QC_ERR_OOM, "%s: out of memory building the JSON report", path);
    size_t n = strlen(text);
    /* with the final newline a text file (and `--json -` on a terminal) should have */
    qc_out o;
    qc_status s = qc_out_open(&o, path, QC_OUT_TEXT, err);
    if (!s) s = qc_out_write(&o, text, n, err);
    if (!s) s = qc_out_write(&o, "\n", 1, err);
    if (s)
        qc_out_abort(&o);
    else
        s = qc_out_commit(&o, err);
    cJSON_free(text);
    return s;
}
