/* qc_check.c — the command lines qwen-conform [check] and qwen-conform policy --print. */

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
int qc_cmd_check(int argc, char **argv) {
    const char *prog = "qwen-conform check";
    qc_check_opts o;
    ckcli_opts_init(&o);
    o.quiet = QC_QUIET_DEFAULT; /* check's console: failures, grouped skips, verdict, summary */
    check_cli x;
    ckcli_check_cli_init(&x);
    int rc = ckcli_parse_common(argc, argv, prog, &o, NULL, NULL, NULL, NULL, &x);
    if (rc >= 0) {
        if (rc == QC_EXIT_PASS) fputs(qc_outpath_help, stdout); /* after --help */
        ckcli_opts_free(&o);
        return rc;
    }
    qc_err err;
    qc_err_clear(&err);
    qc_policy *pol = NULL;
    rerun_set rs;
    memset(&rs, 0, sizeof rs);
    /* usage errors before any work: the runtime under test, the policy, --model, the report
     * to rerun */
    if (o.has_ext && qc_registry_preflight(&o.ext, &err)) goto fail;
    if (ckcli_load_policy(&o, &pol, &err) || ckcli_apply_tol_flags(&x, pol, &err)) goto fail;
    if (ckcli_check_model_dir(&o, &err)) goto fail;
    if (x.rerun) {
        if (ckcli_rerun_load(x.rerun, &rs, &err)) goto fail;
        if (rs.n == 0) {
            fprintf(stderr, "%s: --rerun-failed %s: no check FAILED or ERRORED in that report: "
                    "nothing to rerun (exit %d)\n", prog, x.rerun, QC_EXIT_NOTHING);
            qc_policy_free(pol);
            ckcli_opts_free(&o);
            return QC_EXIT_NOTHING;
        }
        o.select = ckcli_rerun_select;
        o.select_user = &rs;
    }
    /* before any work: every output valid, none an input (a golden, a golden's model file,
     * the policy, --model's files, the report to rerun) or another output; --dump-actual not
     * where goldens are read (qc_outpath) */
    qc_outpath_reset();
    qc_outpath_add_goldens(o.golden, 1);
    if (strcmp(qc_policy_source(pol), "built-in") != 0)
        qc_outpath_add_input(qc_policy_source(pol), o.policy_path ? "--policy" : "policy");
    if (o.model_dir) qc_outpath_add_model_dir(o.model_dir, "--model");
    if (x.rerun) qc_outpath_add_input(x.rerun, "--rerun-failed");
    qc_outpath_add_output(o.json_path, "--json", QC_OUT_TEXT);
    qc_outpath_add_output(o.junit_path, "--junit", QC_OUT_TEXT);
    qc_outpath_add_output(x.html, "--html", QC_OUT_TEXT);
    qc_outpath_add_dump_dir(o.dump_dir, "--dump-actual");
    if (qc_outpath_verify(&err)) goto fail;
    qc_results res;
    qc_results_init(&res);
    qc_results_fill_provenance(&res);
    snprintf(res.tool_version, sizeof res.tool_version, "%s (%s)", QC_VERSION, QC_GIT_COMMIT);
    snprintf(res.policy, sizeof res.policy, "%s", qc_policy_describe(pol));
    if (!o.quiet && !o.list)
        fprintf(stderr, "qwen-conform %s: policy %s\n", res.tool_version, res.policy);
    if (x.rerun && !o.list)
        fprintf(stderr, "qwen-conform: --rerun-failed %s: %d failing check%s (report of "
                "qwen-conform %s) -> %d <stem>/<case>/<backend>/<mode> selection%s\n", x.rerun,
                rs.n_rows, rs.n_rows == 1 ? "" : "s", rs.tool_version[0] ? rs.tool_version : "?",
                rs.n, rs.n == 1 ? "" : "s");
    if (!o.list) {
        ckcli_policy_scope_warnings(pol, o.golden, &res);
        qc_report_console_warnings(stderr, &res, "qwen-conform");
    }
    rc = qc_check_run(&o, pol, &res);
    if (!o.list) {
        res.exit_code = rc;
        res.stopped_early = o.stopped;
        res.maxfail = o.maxfail;
        if (rc == QC_EXIT_NOTHING && !x.rerun) ckcli_filter_hint(&o);
        if (rc == QC_EXIT_NOTHING && x.rerun)
            fprintf(stderr, "qwen-conform: --rerun-failed %s: none of its combinations is among "
                    "the goldens of this run (--golden %s)\n", x.rerun, o.golden);
        if (res.n > 0) qc_report_console_failures(stdout, &res);
        if (x.durations >= 0) qc_report_console_durations(stdout, &res, x.durations);
        ckcli_verdict(&res, x.min_coverage); /* before the summary: it may raise the exit */
        qc_report_console_summary(stdout, &res); /* always: "0 passed, ..." when nothing ran */
        rc = ckcli_write_reports(prog, &o, &res, qc_results_exit_code(&res));
        rc = ckcli_write_html(prog, x.html, &res, rc);
    }
    qc_results_free(&res);
    free(rs.k);
    qc_policy_free(pol);
    ckcli_opts_free(&o);
    return rc;
fail:
    free(rs.k);
    qc_policy_free(pol);
    ckcli_opts_free(&o);
    return qc_cli_fail(prog, &err);
}

/* ===================================================================================== */
/* command line: qwen-conform policy --print                                             */
/* ===================================================================================== */

static const char policy_usage[] =
    "usage: qwen-conform policy --print [--policy F.json] [--golden DIR|FILE]\n"
    "                                   [--tier NAME] [--atol CLASS=V] [--rtol CLASS=V]\n"
    "  Prints the effective tolerance policy as JSON (loadable again with --policy): the file\n"
    "  merged over the built-in defaults, with --atol / --rtol applied, every class default in\n"
    "  full, the effective tie_margin, the backend sections and the overrides.\n"
    "  --policy F.json  the policy file (default: the one check would use for --golden:\n"
    "                   tolerances.json beside the goldens, DIR/ or its parent; else built-in)\n"
    "  --golden DIR     where check would look for tolerances.json; also warns (stderr) about\n"
    "                   overrides that can never match a case x tensor of those goldens\n"
    "  --tier NAME      as for check: the tier's floors applied first (docs/tolerance-tiers.md)\n"
    "  --atol / --rtol CLASS=V   as for check\n"
    "exit: 0 printed, 2 usage / I/O / format error\n";

int qc_cmd_policy(int argc, char **argv) {
    const char *prog = "qwen-conform policy";
    qc_check_opts o;
    ckcli_opts_init(&o);
    check_cli x;
    ckcli_check_cli_init(&x);
    int print = 0;
    qc_argp a;
    qc_err err;
    qc_err_clear(&err);
    qc_argp_init(&a, prog, argc, argv);
    qc_status st = QC_OK;
    while (!st && qc_argp_next(&a)) {
        const char *v = NULL;
        if (a.positional) {
            st = qc_argp_unknown(&a, &err);
        } else if (qc_argp_is(&a, "--help") || qc_argp_is(&a, "-h")) {
            fputs(policy_usage, stdout);
            return QC_EXIT_PASS;
        } else if (qc_argp_is(&a, "--print")) {
            st = qc_argp_bool(&a, &err);
            print = 1;
        } else if (qc_argp_is(&a, "--policy")) {
            st = qc_argp_value(&a, &o.policy_path, &err);
        } else if (qc_argp_is(&a, "--golden")) {
            st = qc_argp_value(&a, &o.golden, &err);
        } else if (qc_argp_is(&a, "--atol") || qc_argp_is(&a, "--rtol")) {
            if (!(st = qc_argp_value(&a, &v, &err))) st = ckcli_parse_tol_flag(a.flag, v, &x, &err);
        } else if (qc_argp_is(&a, "--tier")) {
            st = qc_argp_value(&a, &x.tier, &err);
        } else {
            st = qc_argp_unknown(&a, &err);
        }
    }
    if (!st && !print) st = qc_errf(&err, QC_ERR_ARG, "nothing to do: --print (see --help)");
    if (st) {
        int rc = qc_cli_fail(prog, &err);
        fputs(policy_usage, stderr);
        return rc;
    }
    qc_policy *pol = NULL;
    if (o.golden)
        st = ckcli_load_policy(&o, &pol, &err);
    else if (o.policy_path)
        st = qc_policy_load(o.policy_path, &pol, &err);
    else
        st = qc_policy_builtin(&pol, &err);
    if (!st) st = ckcli_apply_tol_flags(&x, pol, &err);
    if (st) {
        qc_policy_free(pol);
        return qc_cli_fail(prog, &err);
    }
    char *text = qc_policy_to_json(pol);
    if (!text) {
        qc_policy_free(pol);
        qc_errf(&err, QC_ERR_OOM, "out of memory");
        return qc_cli_fail(prog, &err);
    }
    printf("%s\n", text);
    fflush(stdout);
    cJSON_free(text);
    if (o.golden) {
        qc_results res;
        qc_results_init(&res);
        ckcli_policy_scope_warnings(pol, o.golden, &res);
        qc_report_console_warnings(stderr, &res, "qwen-conform");
        qc_results_free(&res);
    }
    qc_policy_free(pol);
    return QC_EXIT_PASS;
}
