/* qc_cmd_calibrate.c — qwen-conform calibrate: measure float32-vs-float64 noise and suggest a
 * tolerance policy. */

#include "qc_check_cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qc_cli.h"
#include "qc/qc_memplan.h"
#include "qc_cli_common.h"
#include "qc_remote.h"
#include "qc_report_console.h"
#include "qc_report_json.h"
#include "qc_report_junit.h"

#include <cjson/cJSON.h>
/* ===================================================================================== */
/* command line: qwen-conform calibrate                                                  */
/* ===================================================================================== */

static void cell_json(cJSON *o, const char *cls, const calib_cell *c) {
    cJSON *j = cJSON_AddObjectToObject(o, cls);
    if (!j) return;
    cJSON_AddNumberToObject(j, "max_abs", c->max_abs);
    cJSON_AddNumberToObject(j, "max_rel", c->max_rel);
    if (!strcmp(cls, "logits")) cJSON_AddNumberToObject(j, "kl_max", c->kl_max);
    cJSON_AddNumberToObject(j, "elements", c->n);
    cJSON_AddStringToObject(j, "max_abs_at", c->where);
}

static const char *const calib_kinds[2] = {"vs_golden", "consistency"};

/* ---- running the cases ---- */

/* Runs the check engine `runs` times over o->golden into *res (calibrate mode, filling o->calib).
 * Returns the check engine's last exit code; *bad = 1 when a row was an ERROR (printed). */
static int calib_run(qc_check_opts *o, qc_policy *pol, int runs, qc_results *res, int *bad,
                     const char *prog) {
    int rc = QC_EXIT_PASS;
    *bad = 0;
    for (int r = 0; r < runs; r++) {
        fprintf(stderr, "%s: run %d/%d over %s\n", prog, r + 1, runs, o->golden);
        rc = qc_check_run(o, pol, res);
        for (int i = 0; i < res->n; i++)
            if (res->rows[i].verdict == QC_VERDICT_ERROR) {
                fprintf(stderr, "%s: %s/%s %s %s: %s\n", prog, res->rows[i].stem,
                        res->rows[i].case_name, res->rows[i].backend, res->rows[i].check,
                        res->rows[i].keyline);
                *bad = 1;
            }
        if (rc == QC_EXIT_NOTHING || *bad) break;
        if (r + 1 < runs) {
            qc_results_free(res);
            qc_results_init(res);
        }
    }
    return rc;
}

/* ---- the measurements document ---- */

/* A new cJSON object (caller deletes) with the provenance, the procedure and the measured cells
 * of every slot; NULL-safe in cJSON's way (a failed allocation drops members). */
static cJSON *calib_measurements_json(const calib_sink *cs, const qc_results *res,
                                      const qc_check_opts *o, int runs, double factor) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "schema_version", 1);
    cJSON_AddStringToObject(root, "tool_version", res->tool_version);
    cJSON_AddStringToObject(root, "machine", res->machine);
    cJSON_AddStringToObject(root, "isa", res->isa);
    cJSON_AddStringToObject(root, "date", res->started);
    cJSON_AddStringToObject(root, "golden", o->golden);
    cJSON_AddNumberToObject(root, "runs", runs);
    cJSON_AddNumberToObject(root, "factor", factor);
    cJSON_AddNumberToObject(root, "optimized_threads_main", o->threads);
    cJSON_AddStringToObject(
        root, "procedure",
        "Every golden case, every backend (optimized with the main thread count and with 1 "
        "thread), every prefill mode (static, dynamic, nokv), the chunk-size sweep, run "
        "teacher-forced in float32 and compared with the float64 golden (vs_golden), plus the "
        "float32-vs-float32 invariants static_eq_dynamic, chunked_eq_recurrent, opt_eq_ref "
        "(consistency). max_abs = max |actual - expected|; max_rel = max |actual - expected| / "
        "|expected| over the large elements of each tensor (|expected| >= 1/4 of its max); "
        "per_case_max_abs gives max_abs per case. Defaults come from the cases within 4 x the "
        "median case; a case above that gets its own override whose reason carries its numbers. kl_max = max per-row KL(softmax(expected) || "
        "softmax(actual)) in nats. Suggested tolerance = factor x max (factor^2 for KL), "
        "rounded up to a 1-2-5 step.");
    cJSON *meas = cJSON_AddObjectToObject(root, "measurements");
    for (int b = 0; b < cs->n_slots; b++) { /* the engine's slots: registry names, "external" */
        cJSON *bj = cJSON_AddObjectToObject(meas, cs->slot[b].name);
        for (int k = 0; k < 2; k++) {
            cJSON *kj = cJSON_AddObjectToObject(bj, calib_kinds[k]);
            for (int cl = 0; cl < QC_TC_COUNT; cl++)
                if (cs->slot[b].c[k][cl].n > 0)
                    cell_json(kj, qc_tclass_str((qc_tclass)cl), &cs->slot[b].c[k][cl]);
        }
    }
    return root;
}

/* ---- the suggested policy ---- */

/* One tensor class: the default (from the cases within 4 x the median case) into dj and an
 * override per outlier case into ovj. vals: scratch for n_case doubles (owned by the caller). */
static void calib_suggest_class(const calib_sink *cs, int cl, double factor, double *vals,
                                cJSON *dj, cJSON *ovj) {
    /* median of the per-case maxima; a case above 4 x the median is an outlier that gets
     * its own override (with the numbers as the reason) instead of widening the default */
    int nv = 0;
    for (int i = 0; i < cs->n_case; i++)
        if (cs->cases[i].max_abs[cl] > 0) vals[nv++] = cs->cases[i].max_abs[cl];
    if (nv == 0) return;
    for (int i = 1; i < nv; i++)
        for (int j = i; j > 0 && vals[j - 1] > vals[j]; j--) {
            double t = vals[j];
            vals[j] = vals[j - 1];
            vals[j - 1] = t;
        }
    double med = vals[nv / 2], lim = 4.0 * med;
    double ma = 0, mr = 0, kl = 0;
    for (int i = 0; i < cs->n_case; i++) {
        const struct calib_case *cc = &cs->cases[i];
        if (cc->max_abs[cl] <= 0 || cc->max_abs[cl] > lim) continue;
        if (cc->max_abs[cl] > ma) ma = cc->max_abs[cl];
        if (cc->max_rel[cl] > mr) mr = cc->max_rel[cl];
        if (cc->kl_max > kl) kl = cc->kl_max;
    }
    const char *cn = qc_tclass_str((qc_tclass)cl);
    cJSON *j = cJSON_AddObjectToObject(dj, cn);
    double atol = qc_round_125(factor * ma), rtol = qc_round_125(factor * mr);
    cJSON_AddNumberToObject(j, "atol", atol > 0 ? atol : 1e-7);
    cJSON_AddNumberToObject(j, "rtol", rtol > 0 ? rtol : 1e-7);
    if (cl == QC_TC_LOGITS)
        cJSON_AddNumberToObject(j, "max_kl", kl > 0 ? qc_round_125(factor * factor * kl) : 1e-12);
    for (int i = 0; i < cs->n_case; i++) {
        const struct calib_case *cc = &cs->cases[i];
        if (cc->max_abs[cl] <= lim) continue;
        double oa = qc_round_125(factor * cc->max_abs[cl]);
        double orl = qc_round_125(factor * cc->max_rel[cl]);
        int kl_more = cl == QC_TC_LOGITS &&
                      qc_round_125(factor * factor * cc->kl_max) >
                          (kl > 0 ? qc_round_125(factor * factor * kl) : 1e-12);
        if (oa <= atol && orl <= rtol && !kl_more) continue; /* the default covers it */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "case", cc->id);
        cJSON_AddStringToObject(o, "tensor", cn);
        if (oa > atol) cJSON_AddNumberToObject(o, "atol", oa);
        if (orl > rtol) cJSON_AddNumberToObject(o, "rtol", orl);
        if (kl_more)
            cJSON_AddNumberToObject(o, "max_kl", qc_round_125(factor * factor * cc->kl_max));
        char why[400];
        snprintf(why, sizeof why, "measured float32-vs-float64 %s noise %.3g in this case is "
                 "%.1f x the median case (%.3g); tolerance = %g x its own max",
                 cn, cc->max_abs[cl], cc->max_abs[cl] / med, med, factor);
        cJSON_AddStringToObject(o, "reason", why);
        cJSON_AddItemToArray(ovj, o);
    }
}

/* A new cJSON policy object (caller deletes); also adds per_case_max_abs to root. */
static cJSON *calib_suggest_policy(const calib_sink *cs, cJSON *root, const char *golden,
                                   int runs, const char *started, double factor) {
    cJSON *pj = cJSON_CreateObject();
    cJSON_AddNumberToObject(pj, "schema_version", 1);
    char desc[512];
    snprintf(desc, sizeof desc, "Derived by `qwen-conform calibrate --golden %s --runs %d` on %s: "
             "%g x measured max noise, rounded up to 1-2-5 steps (KL: %g x)", golden, runs,
             started, factor, factor * factor);
    cJSON_AddStringToObject(pj, "description", desc);
    cJSON_AddStringToObject(pj, "measurements", "tolerances-measurements.json");
    cJSON *dj = cJSON_AddObjectToObject(pj, "defaults");
    cJSON *ovj = cJSON_AddArrayToObject(pj, "overrides");
    cJSON *cases_j = cJSON_AddObjectToObject(root, "per_case_max_abs");
    for (int i = 0; i < cs->n_case; i++) {
        cJSON *cj = cJSON_AddObjectToObject(cases_j, cs->cases[i].id);
        for (int cl = 0; cl < QC_TC_COUNT; cl++)
            if (cs->cases[i].max_abs[cl] > 0)
                cJSON_AddNumberToObject(cj, qc_tclass_str((qc_tclass)cl), cs->cases[i].max_abs[cl]);
    }
    double *vals = malloc((size_t)(cs->n_case > 0 ? cs->n_case : 1) * sizeof *vals);
    for (int cl = 0; vals && cl < QC_TC_COUNT; cl++) calib_suggest_class(cs, cl, factor, vals, dj, ovj);
    free(vals);
    return pj;
}

/* ---- output ---- */

/* Prints the policy, writes --out / --policy-out, and the human summary on stderr.
 * Returns QC_EXIT_PASS, or the CLI failure code (message printed). */
static int calib_write(const calib_sink *cs, cJSON *root, cJSON *pj, const char *out,
                       const char *policy_out, const char *prog) {
    qc_err err;
    qc_err_clear(&err);
    char *mtext = cJSON_Print(root);
    char *ptext = cJSON_Print(pj);
    int rc = QC_EXIT_PASS;
    if (mtext && ptext) {
        printf("%s\n", ptext);
        if (out && qc_cli_write_atomic(out, mtext, strlen(mtext), &err)) rc = qc_cli_fail(prog, &err);
        if (policy_out && qc_cli_write_atomic(policy_out, ptext, strlen(ptext), &err))
            rc = qc_cli_fail(prog, &err);
        /* human summary on stderr */
        fprintf(stderr, "%s: measured noise (max_abs / max_rel) per class:\n", prog);
        for (int b = 0; b < cs->n_slots; b++)
            for (int k = 0; k < 2; k++)
                for (int cl = 0; cl < QC_TC_COUNT; cl++) {
                    const calib_cell *ce = &cs->slot[b].c[k][cl];
                    if (ce->n == 0) continue;
                    fprintf(stderr, "  %-9s %-11s %-15s max_abs %.3g max_rel %.3g%s (at %s)\n",
                            cs->slot[b].name, calib_kinds[k], qc_tclass_str((qc_tclass)cl),
                            ce->max_abs, ce->max_rel, "", ce->where);
                }
    } else {
        rc = QC_EXIT_ERROR;
    }
    cJSON_free(mtext);
    cJSON_free(ptext);
    return rc;
}

/* ---- the command ---- */

/* Validates the inputs and outputs before any work (both outputs valid, neither an input, a
 * golden's model file, nor the other output: qc_outpath). 0 or nonzero with err set. */
static int calib_verify_paths(const qc_check_opts *o, const char *out, const char *policy_out,
                              qc_err *err) {
    if (ckcli_check_model_dir(o, err)) return 1;
    qc_outpath_reset();
    qc_outpath_add_goldens(o->golden, 1);
    if (o->model_dir) qc_outpath_add_model_dir(o->model_dir, "--model");
    qc_outpath_add_output(out, "--out", QC_OUT_TEXT);
    qc_outpath_add_output(policy_out, "--policy-out", QC_OUT_TEXT);
    return qc_outpath_verify(err) ? 1 : 0;
}

int qc_cmd_calibrate(int argc, char **argv) {
    const char *prog = "qwen-conform calibrate";
    qc_check_opts o;
    ckcli_opts_init(&o);
    int runs = 1;
    const char *out = NULL, *policy_out = NULL;
    double factor = 4.0;
    int rc = ckcli_parse_common(argc, argv, prog, &o, &runs, &out, &factor, &policy_out, NULL);
    if (rc >= 0) {
        if (rc == QC_EXIT_PASS) fputs(qc_outpath_help, stdout); /* after --help */
        ckcli_opts_free(&o);
        return rc;
    }
    qc_err err;
    qc_err_clear(&err);
    qc_policy *pol = NULL;
    if (calib_verify_paths(&o, out, policy_out, &err) || qc_policy_builtin(&pol, &err)) {
        ckcli_opts_free(&o);
        return qc_cli_fail(prog, &err);
    }
    calib_sink *cs = calloc(1, sizeof *cs);
    if (!cs) {
        qc_policy_free(pol);
        ckcli_opts_free(&o);
        return QC_EXIT_ERROR;
    }
    o.calibrate = 1;
    o.calib = cs;
    o.quiet = 1;
    qc_results res;
    qc_results_init(&res);
    qc_results_fill_provenance(&res);
    snprintf(res.tool_version, sizeof res.tool_version, "%s (%s)", QC_VERSION, QC_GIT_COMMIT);
    int bad = 0;
    rc = calib_run(&o, pol, runs, &res, &bad, prog);
    if (rc == QC_EXIT_NOTHING || bad || cs->tensors == 0) {
        fprintf(stderr, "%s: %s\n", prog, bad ? "errors while running the cases" : "nothing measured");
        rc = bad ? QC_EXIT_ERROR : QC_EXIT_NOTHING;
    } else {
        cJSON *root = calib_measurements_json(cs, &res, &o, runs, factor);
        cJSON *pj = calib_suggest_policy(cs, root, o.golden, runs, res.started, factor);
        cJSON_AddItemReferenceToObject(root, "suggested_policy", pj);
        rc = calib_write(cs, root, pj, out, policy_out, prog);
        cJSON_Delete(root);
        cJSON_Delete(pj);
    }
    qc_results_free(&res);
    free(cs->slot);
    free(cs);
    qc_policy_free(pol);
    ckcli_opts_free(&o);
    return rc;
}
