/* qc_cmd_diff.c — qwen-conform diff GOLDEN ACTUAL: another runtime's outputs (an ACTUAL file,
 * golden/SCHEMA.md "Required and optional") checked against the golden; two files, or two
 * directories whose files are paired by relative path, into one report (console, JSON, JUnit). */

#include "qc_check_cli.h"
#include "qc_diff_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qc_cli.h"
#include "qc_cli_common.h"
#include "qc_outpath.h"
#include "qc_report_console.h"

/* ===================================================================================== */
/* usage                                                                                 */
/* ===================================================================================== */

static const char diff_usage[] =
    "usage: qwen-conform diff GOLDEN.h5 ACTUAL.h5 [options]\n"
    "       qwen-conform diff GOLDEN_DIR ACTUAL_DIR [options]\n"
    "  Compares an ACTUAL file — any runtime's outputs for the golden's cases (golden/SCHEMA.md\n"
    "  \"Required and optional\": only /schema_version and each case's prefill/logits are\n"
    "  required) — with the golden, case by case: logits (on the positions the ACTUAL has), argmax, hidden\n"
    "  states (first divergent layer), state buffers, decode logits. Absent optional tensors are\n"
    "  SKIPPED with the reason; a NaN / Inf is a failure; every golden case must be in the ACTUAL.\n"
    "  A case with top-k log-probabilities instead of logits (prefill/topk, decode/topk: what\n"
    "  `record --like GOLDEN --backend http:URL` writes) gets check's topk.* rows.\n"
    "  Directories: every golden *.h5 under GOLDEN_DIR is paired with ACTUAL_DIR/<same relative\n"
    "  path>; one report.\n"
    "  --cases REGEX     check only the golden cases whose name matches (POSIX extended); the\n"
    "                    others may be absent from the ACTUAL\n"
    "  --layout auto|canonical|hf   the ACTUAL's shapes (default auto: decided per dataset from\n"
    "                    its shape and said in the report's layout row)\n"
    "  --policy F.json   tolerance policy (default: tolerances.json beside GOLDEN or its parent\n"
    "                    directory, else built-in)\n"
    "  --label NAME      the name of the runtime in reports (default \"actual\")\n"
    "  --tier NAME       tolerance tier: fp32 (default), f16-kv, bf16-kv, bf16, int8, int4\n"
    "                    (docs/tolerance-tiers.md: looser tolerances plus KL / top-1 / top-k rows)\n"
    "  --json F  --junit F  --quiet  --atol / --rtol CLASS=V  --durations N   as for check\n"
    "exit: 0 all passed, 1 a conformance failure (incl. a NaN / Inf, a missing golden case, a\n"
    "      different model's hashes), 2 usage / I/O / format error (incl. a case run on other\n"
    "      inputs, an ACTUAL case with no golden counterpart), 3 nothing compared\n";

/* ===================================================================================== */
/* directories                                                                           */
/* ===================================================================================== */

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* path relative to root (root a directory prefix of path). */
static const char *rel_of(const char *path, const char *root) {
    size_t n = strlen(root);
    if (strncmp(path, root, n)) return path;
    path += n;
    while (*path == '/') path++;
    return path;
}

/* Every golden under gdir paired with adir/<relative path>; ACTUAL files with no golden and
 * golden files with no ACTUAL are reported (ERROR / FAIL rows). */
static void diff_dirs(ck_ctx *c, diff_opts *d, const char *gdir, const char *adir) {
    char **gp = NULL, **ap = NULL;
    int ng = 0, na = 0;
    qc_err err;
    qc_err_clear(&err);
    c->stem = "_dir";
    if (qc_golden_find(gdir, &gp, &ng, &err) || qc_golden_find(adir, &ap, &na, &err)) {
        ck_emit_simple(c, "_dir", d->label, "file", "read", QC_VERDICT_ERROR, err.msg, NULL);
        goto out;
    }
    for (int i = 0; i < ng; i++) {
        const char *rel = rel_of(gp[i], gdir);
        char apath[4096], stem[128];
        snprintf(apath, sizeof apath, "%s/%s", adir, rel);
        ck_make_stem(gp[i], gdir, stem, sizeof stem);
        struct stat sb;
        if (stat(apath, &sb) != 0) {
            c->stem = stem;
            char key[320];
            snprintf(key, sizeof key, "no ACTUAL file for this golden: %s does not exist", apath);
            ck_emit_simple(c, "_file", d->label, "file", "coverage", QC_VERDICT_FAIL, key,
                           qc_strdup_printf("%s (golden %s; files are paired by their path "
                                            "relative to the two directories)", key, gp[i]));
            continue;
        }
        qd_file(c, d, gp[i], apath, stem);
    }
    char names[1200] = "";
    size_t o = 0;
    int extra = 0;
    for (int j = 0; j < na; j++) {
        const char *rel = rel_of(ap[j], adir);
        int found = 0;
        for (int i = 0; i < ng && !found; i++) found = !strcmp(rel, rel_of(gp[i], gdir));
        if (found) continue;
        extra++;
        if (o < sizeof names)
            o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", o ? ", " : "", ap[j]);
    }
    if (extra) {
        char key[320];
        c->stem = "_dir";
        snprintf(key, sizeof key, "%d ACTUAL file%s with no golden at the same relative path "
                 "under %s: %s", extra, extra == 1 ? "" : "s", gdir, names);
        ck_emit_simple(c, "_dir", d->label, "file", "coverage", QC_VERDICT_ERROR, key, NULL);
    }
out:
    qc_golden_paths_free(gp, ng);
    qc_golden_paths_free(ap, na);
}

/* ===================================================================================== */
/* command line                                                                          */
/* ===================================================================================== */

typedef struct {
    const char *files[2];
    int nfiles;
    const char *layout;
    const char *cases;
} diff_args;

/* Options into o / x / d / da; -1 to go on, else the exit code. */
static int diff_parse(int argc, char **argv, const char *prog, qc_check_opts *o, check_cli *x,
                      diff_opts *d, diff_args *da) {
    qc_err err;
    qc_err_clear(&err);
    qc_argp a;
    qc_argp_init(&a, prog, argc, argv);
    qc_status st = QC_OK;
    while (!st && qc_argp_next(&a)) {
        if (a.positional) {
            if (da->nfiles < 2) da->files[da->nfiles++] = a.arg;
            else st = qc_argp_unknown(&a, &err);
        } else if (qc_argp_is(&a, "--help") || qc_argp_is(&a, "-h")) {
            fputs(diff_usage, stdout);
            fputs(qc_outpath_help, stdout);
            return QC_EXIT_PASS;
        } else if (qc_argp_is(&a, "--policy")) st = qc_argp_value(&a, &o->policy_path, &err);
        else if (qc_argp_is(&a, "--label")) st = qc_argp_value(&a, &d->label, &err);
        else if (qc_argp_is(&a, "--json")) st = qc_argp_value(&a, &o->json_path, &err);
        else if (qc_argp_is(&a, "--junit")) st = qc_argp_value(&a, &o->junit_path, &err);
        else if (qc_argp_is(&a, "--layout")) st = qc_argp_value(&a, &da->layout, &err);
        else if (qc_argp_is(&a, "--cases")) st = qc_argp_value(&a, &da->cases, &err);
        else if (qc_argp_is(&a, "--tier")) st = qc_argp_value(&a, &x->tier, &err);
        else if (qc_argp_is(&a, "--atol") || qc_argp_is(&a, "--rtol")) {
            const char *v = NULL;
            if (!(st = qc_argp_value(&a, &v, &err))) st = ckcli_parse_tol_flag(a.flag, v, x, &err);
        } else if (qc_argp_is(&a, "--durations")) {
            st = qc_argp_int(&a, 0, 1 << 30, &x->durations, &err);
        } else if (qc_argp_is(&a, "--quiet") || qc_argp_is(&a, "-q")) {
            st = qc_argp_bool(&a, &err);
            o->quiet = 1;
        } else st = qc_argp_unknown(&a, &err);
    }
    if (!st && da->nfiles != 2)
        st = qc_errf(&err, QC_ERR_ARG, "expected two files (GOLDEN.h5 ACTUAL.h5) or two "
                     "directories (GOLDEN_DIR ACTUAL_DIR)");
    if (!st && da->layout && qc_layout_parse(da->layout, &d->layout))
        st = qc_errf(&err, QC_ERR_ARG, "--layout %s: not auto, canonical or hf", da->layout);
    if (!st && da->cases) {
        int rc = regcomp(&d->cases, da->cases, REG_EXTENDED | REG_NOSUB);
        if (rc) {
            char eb[200];
            regerror(rc, &d->cases, eb, sizeof eb);
            st = qc_errf(&err, QC_ERR_ARG, "--cases %s: not a regular expression: %s", da->cases,
                         eb);
        } else {
            d->has_cases = 1;
        }
    }
    if (!st && is_dir(da->files[0]) != is_dir(da->files[1]))
        st = qc_errf(&err, QC_ERR_ARG, "%s and %s: give two files or two directories",
                     da->files[0], da->files[1]);
    if (st) {
        int rc = qc_cli_fail(prog, &err);
        fputs(diff_usage, stderr);
        return rc;
    }
    return -1;
}

int qc_cmd_diff(int argc, char **argv) {
    const char *prog = "qwen-conform diff";
    qc_err err;
    qc_err_clear(&err);
    qc_check_opts o;
    ckcli_opts_init(&o);
    check_cli x;
    ckcli_check_cli_init(&x);
    diff_opts d;
    memset(&d, 0, sizeof d);
    d.label = "actual";
    diff_args da = {{NULL, NULL}, 0, NULL, NULL};
    int rc = diff_parse(argc, argv, prog, &o, &x, &d, &da);
    if (rc >= 0) {
        if (d.has_cases) regfree(&d.cases);
        return rc;
    }
    o.golden = da.files[0];
    qc_policy *pol = NULL;
    if (ckcli_load_policy(&o, &pol, &err) || ckcli_apply_tol_flags(&x, pol, &err)) {
        rc = qc_cli_fail(prog, &err);
        goto out;
    }
    /* before any work: every output valid, none an input or another output (qc_outpath) */
    qc_outpath_reset();
    if (!is_dir(da.files[0])) {
        qc_outpath_add_input(da.files[0], "GOLDEN.h5");
        qc_outpath_add_input(da.files[1], "ACTUAL.h5");
    } else {
        qc_outpath_add_goldens(da.files[0], 0);
        qc_outpath_add_goldens(da.files[1], 0);
    }
    if (strcmp(qc_policy_source(pol), "built-in") != 0)
        qc_outpath_add_input(qc_policy_source(pol), o.policy_path ? "--policy" : "policy");
    qc_outpath_add_output(o.json_path, "--json", QC_OUT_TEXT);
    qc_outpath_add_output(o.junit_path, "--junit", QC_OUT_TEXT);
    if (qc_outpath_verify(&err)) {
        rc = qc_cli_fail(prog, &err);
        goto out;
    }
    qc_results res;
    qc_results_init(&res);
    qc_results_fill_provenance(&res);
    snprintf(res.tool_version, sizeof res.tool_version, "%s (%s)", QC_VERSION, QC_GIT_COMMIT);
    snprintf(res.policy, sizeof res.policy, "%s", qc_policy_describe(pol));
    ckcli_policy_scope_warnings(pol, da.files[0], &res);
    qc_report_console_warnings(stderr, &res, "qwen-conform");
    ck_ctx c;
    memset(&c, 0, sizeof c);
    c.o = &o;
    c.pol = pol;
    c.res = &res;
    double t0 = ck_wall();
    if (!o.quiet) fprintf(stderr, "qwen-conform %s: policy %s\n", res.tool_version, res.policy);
    qc_report_console_header(stdout);
    if (is_dir(da.files[0])) {
        diff_dirs(&c, &d, da.files[0], da.files[1]);
    } else {
        char stem[128];
        ck_make_stem(da.files[0], da.files[0], stem, sizeof stem);
        qd_file(&c, &d, da.files[0], da.files[1], stem);
    }
    res.seconds = ck_wall() - t0;
    /* no case compared is "nothing checked", whatever file-level rows passed */
    res.exit_code = d.compared == 0 ? QC_EXIT_NOTHING : -1;
    qc_report_console_failures(stdout, &res);
    if (x.durations >= 0) qc_report_console_durations(stdout, &res, x.durations);
    qc_report_console_summary(stdout, &res);
    rc = ckcli_write_reports(prog, &o, &res, qc_results_exit_code(&res));
    qc_results_free(&res);
out:
    if (d.has_cases) regfree(&d.cases);
    qc_policy_free(pol);
    return rc;
}
