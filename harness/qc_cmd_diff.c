/* qc_cmd_diff.c — qwen-conform diff GOLDEN.h5 ACTUAL.h5: another runtime's output in the
 * golden layout checked against the golden. */
/* Messages are cut to their buffers on purpose (snprintf); GCC's truncation warning is noise. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

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
/* command line: qwen-conform diff GOLDEN.h5 ACTUAL.h5                                   */
/* ===================================================================================== */

/* The checks of one case whose actual results come from a file (another runtime's output
 * in the golden layout) instead of one of our backends. */
static void diff_case(ctx *c, const char *label, const qc_golden_case *gc,
                      const qc_golden_case *act) {
    const qc_config *cfg = c->cfg;
    const int L = cfg->n_layers, T = gc->n_tokens, H = cfg->hidden_size;
    /* the actual run must have been fed exactly the golden's inputs */
    int same = act->start_pos == gc->start_pos && act->n_tokens == T &&
               act->n_history == gc->n_history && act->n_decode == gc->n_decode &&
               !memcmp(act->tokens, gc->tokens, (size_t)T * sizeof(int32_t)) &&
               (gc->n_history == 0 ||
                !memcmp(act->history, gc->history, (size_t)gc->n_history * sizeof(int32_t))) &&
               (gc->n_decode == 0 || !memcmp(act->decode_tokens, gc->decode_tokens,
                                             (size_t)gc->n_decode * sizeof(int32_t)));
    if (!same) {
        ck_emit_simple(c, gc->name, label, "file", "inputs", QC_VERDICT_ERROR,
                    "the actual case was not run on the golden's inputs (start_pos, history, "
                    "tokens and teacher-forced decode tokens must be identical)", NULL);
        return;
    }
    char loc[4096] = "";
    cmp_spec base = {.case_name = gc->name, .backend = label, .mode = "file", .vs_golden = 1};
    int hidden = gc->prefill_hidden && act->prefill_hidden;
    int localised = 0;
    qc_localisation where;
    ck_loc_init(&where);
    unsigned char *seen = NULL;
    if (hidden && (seen = malloc((size_t)(L + 1) * T)) != NULL) {
        memset(seen, 1, (size_t)(L + 1) * T);
        hcap hc = {.hidden = act->prefill_hidden, .seen = seen, .L1 = L + 1, .T = T, .H = H,
                   .lo = gc->start_pos};
        localised = ck_check_hidden(c, &base, gc, &hc, loc, sizeof loc, &where);
        free(seen);
    } else if (gc->prefill_hidden) {
        ck_emit_simple(c, gc->name, label, "file", "prefill.hidden", QC_VERDICT_SKIP,
                    "the actual file has no prefill/hidden", NULL);
    }
    if (!localised)
        ck_state_localisation(c, act, gc, "prefill", label, "file", loc, sizeof loc, &where);
    ck_vs_golden_checks(c, gc, act, label, "file", "", loc[0] ? loc : NULL, &where, NULL, NULL,
                        NULL);
}

static const char diff_usage[] =
    "usage: qwen-conform diff GOLDEN.h5 ACTUAL.h5 [options]\n"
    "  Compares ACTUAL.h5 — any runtime's output written in the golden layout (golden/SCHEMA.md;\n"
    "  e.g. by `qwen-conform record`, or by your own runtime) — with GOLDEN.h5, case by case:\n"
    "  logits, argmax, hidden states (first divergent layer), state buffers, decode logits.\n"
    "  --policy F.json   tolerance policy (default: tolerances.json beside GOLDEN.h5 or its\n"
    "                    parent directory, else built-in)\n"
    "  --label NAME      the name of the runtime in reports (default \"actual\")\n"
    "  --json F  --junit F  --quiet  --atol / --rtol CLASS=V  --durations N   as for check\n"
    "  Cases are matched by name; a golden case absent from ACTUAL.h5 is reported as skipped.\n"
    "exit: 0 all passed, 1 a conformance failure, 2 usage / I/O / format error (incl. a case\n"
    "      run on other inputs than the golden's), 3 no case in common\n";

int qc_cmd_diff(int argc, char **argv) {
    const char *prog = "qwen-conform diff";
    qc_err err;
    qc_err_clear(&err);
    qc_check_opts o;
    ckcli_opts_init(&o);
    const char *files[2] = {NULL, NULL}, *label = "actual";
    int nfiles = 0;
    check_cli x;
    ckcli_check_cli_init(&x);
    qc_argp a;
    qc_argp_init(&a, prog, argc, argv);
    qc_status st = QC_OK;
    while (!st && qc_argp_next(&a)) {
        if (a.positional) {
            if (nfiles < 2) files[nfiles++] = a.arg;
            else st = qc_argp_unknown(&a, &err);
        } else if (qc_argp_is(&a, "--help") || qc_argp_is(&a, "-h")) {
            fputs(diff_usage, stdout);
            fputs(qc_outpath_help, stdout);
            return QC_EXIT_PASS;
        } else if (qc_argp_is(&a, "--policy")) st = qc_argp_value(&a, &o.policy_path, &err);
        else if (qc_argp_is(&a, "--label")) st = qc_argp_value(&a, &label, &err);
        else if (qc_argp_is(&a, "--json")) st = qc_argp_value(&a, &o.json_path, &err);
        else if (qc_argp_is(&a, "--junit")) st = qc_argp_value(&a, &o.junit_path, &err);
        else if (qc_argp_is(&a, "--atol") || qc_argp_is(&a, "--rtol")) {
            const char *v = NULL;
            if (!(st = qc_argp_value(&a, &v, &err))) st = ckcli_parse_tol_flag(a.flag, v, &x, &err);
        } else if (qc_argp_is(&a, "--durations")) {
            st = qc_argp_int(&a, 0, 1 << 30, &x.durations, &err);
        } else if (qc_argp_is(&a, "--quiet") || qc_argp_is(&a, "-q")) {
            st = qc_argp_bool(&a, &err);
            o.quiet = 1;
        } else st = qc_argp_unknown(&a, &err);
    }
    if (!st && nfiles != 2)
        st = qc_errf(&err, QC_ERR_ARG, "expected two files: GOLDEN.h5 ACTUAL.h5");
    if (st) {
        int rc = qc_cli_fail(prog, &err);
        fputs(diff_usage, stderr);
        return rc;
    }
    o.golden = files[0];
    qc_policy *pol = NULL;
    if (ckcli_load_policy(&o, &pol, &err) || ckcli_apply_tol_flags(&x, pol, &err)) {
        qc_policy_free(pol);
        return qc_cli_fail(prog, &err);
    }
    /* before any work: every output valid, none an input (the two files, the policy) or
     * another output (qc_outpath) */
    qc_outpath_reset();
    qc_outpath_add_input(files[0], "GOLDEN.h5");
    qc_outpath_add_input(files[1], "ACTUAL.h5");
    if (strcmp(qc_policy_source(pol), "built-in") != 0)
        qc_outpath_add_input(qc_policy_source(pol), o.policy_path ? "--policy" : "policy");
    qc_outpath_add_output(o.json_path, "--json", QC_OUT_TEXT);
    qc_outpath_add_output(o.junit_path, "--junit", QC_OUT_TEXT);
    if (qc_outpath_verify(&err)) {
        qc_policy_free(pol);
        return qc_cli_fail(prog, &err);
    }
    qc_golden *g = NULL, *act = NULL;
    if (qc_golden_open(files[0], &g, &err) || qc_golden_open(files[1], &act, &err)) {
        qc_golden_free(g);
        qc_policy_free(pol);
        return qc_cli_fail(prog, &err);
    }
    int rc = QC_EXIT_PASS;
    if (!ck_cfg_same(&g->cfg, &act->cfg)) {
        qc_errf(&err, QC_ERR_FORMAT, "%s: config_json differs from %s's: not the same model",
                files[1], files[0]);
        rc = qc_cli_fail(prog, &err);
        goto out;
    }
    qc_results res;
    qc_results_init(&res);
    qc_results_fill_provenance(&res);
    snprintf(res.tool_version, sizeof res.tool_version, "%s (%s)", QC_VERSION, QC_GIT_COMMIT);
    snprintf(res.policy, sizeof res.policy, "%s", qc_policy_describe(pol));
    ckcli_policy_scope_warnings(pol, files[0], &res);
    qc_report_console_warnings(stderr, &res, "qwen-conform");
    ctx c;
    memset(&c, 0, sizeof c);
    c.o = &o;
    c.pol = pol;
    c.res = &res;
    c.g = g;
    c.cfg = &g->cfg;
    char stem[128];
    ck_make_stem(files[0], files[0], stem, sizeof stem);
    c.stem = stem;
    double t0 = ck_wall();
    if (!o.quiet) fprintf(stderr, "qwen-conform %s: policy %s\n", res.tool_version, res.policy);
    qc_report_console_header(stdout);
    int common = 0;
    for (int i = 0; i < g->n_cases; i++) {
        const qc_golden_case *gc = &g->cases[i], *ac = NULL;
        for (int j = 0; j < act->n_cases && !ac; j++)
            if (!strcmp(act->cases[j].name, gc->name)) ac = &act->cases[j];
        c.t_row = ck_wall();
        if (!ac) { /* reported (a skipped row per case), so missing coverage stays visible */
            ck_emit_simple(&c, gc->name, label, "file", "present", QC_VERDICT_SKIP,
                        "the case is not in the actual file", NULL);
            continue;
        }
        common++;
        diff_case(&c, label, gc, ac);
    }
    res.seconds = ck_wall() - t0;
    /* no case in common is "nothing checked" even when skipped rows passed */
    res.exit_code = common == 0 ? QC_EXIT_NOTHING : -1;
    qc_report_console_failures(stdout, &res);
    if (x.durations >= 0) qc_report_console_durations(stdout, &res, x.durations);
    qc_report_console_summary(stdout, &res);
    rc = ckcli_write_reports(prog, &o, &res, qc_results_exit_code(&res));
    qc_results_free(&res);
out:
    qc_golden_free(act);
    qc_golden_free(g);
    qc_policy_free(pol);
    return rc;
}
