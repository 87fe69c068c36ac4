/* qc_check.c — the command lines of the check engine: qwen-conform [check], diff, calibrate. */
/* Messages are cut to their buffers on purpose (snprintf); GCC's truncation warning is noise. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "qc_check_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>

#include "qc_cli.h"
#include "qc/qc_memplan.h"
#include "qc_cli_common.h"
#include "qc_remote.h"
#include "qc_report_console.h"
#include "qc_report_json.h"
#include "qc_report_junit.h"

#include <cjson/cJSON.h>

/* ===================================================================================== */
/* command line: qwen-conform [check]                                                    */
/* ===================================================================================== */

static const char check_usage[] =
    "usage: qwen-conform [check] --golden DIR|FILE [options]\n"
    "  --backend B           what to check (repeatable; default: reference and optimized):\n"
    "                        reference | optimized | all (both built-in backends)\n"
    "                        plugin:PATH.so[,k=v...]  your runtime as a plugin (the ABI in\n"
    "                          include/qc/qc_runtime_plugin.h), options passed to its open\n"
    "                        exec:\"CMD ARGS\"  your runtime as a child process speaking\n"
    "                          docs/adapter-protocol.md (e.g. on adapters/python's helper)\n"
    "                        isolate:plugin:PATH.so[,k=v...]  a plugin in a child process\n"
    "                        llamacpp[,k=v...]  the shipped llama.cpp adapter (ci/llamacpp)\n"
    "  --require CAPS        comma list (hidden, state_read, state_fill, threads, dn_kernel,\n"
    "                        chunk_size, dynamic): a runtime lacking one FAILS (default: the\n"
    "                        checks that need a missing capability are SKIPPED with the reason)\n"
    "  --adapter-timeout S   seconds an exec adapter may take per request (default 60)\n"
    "  --mode static|dynamic|nokv|all      prefill strategies, comma-separated (default all)\n"
    "  --policy F.json       tolerance policy (default: tolerances.json beside the goldens,\n"
    "                        DIR/ or its parent, e.g. fixtures/tolerances.json; else built-in)\n"
    "  --json F              machine-readable report (schema-versioned)\n"
    "  --junit F             JUnit XML report (classname <stem>.<case>, name\n"
    "                        <backend>.<mode>.<check>)\n"
    "  --dump-actual DIR     write the actual tensors in the golden layout\n"
    "                        (DIR/<stem>.<backend>.<mode>.h5) and print h5diff lines\n"
    "  --list                print the selected <stem>/<case>/<backend>/<mode> ids; run nothing\n"
    "  --filter REGEX        POSIX extended regex on <stem>/<case>/<backend>/<mode>\n"
    "  --shard i/n           run the i-th (1-based) of n interleaved shards of the cases\n"
    "  --threads N           optimized backend threads for the main runs (default 1; the\n"
    "                        threads_bitwise check compares them with 2 threads)\n"
    "  --no-hash-check       do not fail when the model's SHA-256 differs from the golden's\n"
    "  --max-memory SIZE     refuse (exit 2) when the planned memory exceeds SIZE (e.g. 8G;\n"
    "                        default: the machine's available memory)\n"
    "  --quiet               print only failures and the summary\n"
    "exit: 0 all passed, 1 a conformance failure, 2 usage / I/O / format error,\n"
    "      3 nothing was checked\n";

/* --backend may be given more than once: built-in names add to the set, any other value is
 * the one runtime under test (plugin / exec / llamacpp). */
static qc_status parse_backend(const char *v, qc_check_opts *o, qc_err *err) {
    if (!strcmp(v, "all")) {
        o->backends |= QC_BACKEND_REF | QC_BACKEND_OPT;
        return QC_OK;
    }
    if (!strcmp(v, "reference")) {
        o->backends |= QC_BACKEND_REF;
        return QC_OK;
    }
    if (!strcmp(v, "optimized")) {
        o->backends |= QC_BACKEND_OPT;
        return QC_OK;
    }
    if (o->backends & QC_BACKEND_EXT)
        return qc_errf(err, QC_ERR_ARG, "--backend: one runtime under test at a time ('%s' and "
                       "'%s')", o->ext.name, v);
    qc_status s = qc_registry_parse(v, o->adapter_timeout, &o->ext, err);
    if (s) return s;
    o->backends |= QC_BACKEND_EXT;
    return QC_OK;
}

static qc_status parse_modes(const char *v, int *mask, qc_err *err) {
    *mask = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "all")) {
            *mask = (1 << N_MODES) - 1;
            continue;
        }
        qc_mode m;
        qc_status ms = qc_mode_parse(t, &m, err);
        if (ms != QC_OK) return qc_err_prefix(err, ms, "--mode");
        *mask |= 1 << m;
    }
    if (!*mask) return qc_errf(err, QC_ERR_ARG, "--mode: empty");
    return QC_OK;
}

static qc_status parse_shard(const char *v, int *i, int *n, qc_err *err) {
    char *e1 = NULL, *e2 = NULL;
    long a = strtol(v, &e1, 10);
    if (e1 == v || *e1 != '/') return qc_errf(err, QC_ERR_ARG, "--shard: '%s' is not i/n", v);
    long b = strtol(e1 + 1, &e2, 10);
    if (e2 == e1 + 1 || *e2 || b < 1 || a < 1 || a > b || b > 100000)
        return qc_errf(err, QC_ERR_ARG, "--shard: '%s': need 1 <= i <= n", v);
    *i = (int)a;
    *n = (int)b;
    return QC_OK;
}

static qc_status parse_fault(const char *v, qc_check_faults *f, qc_err *err) {
    if (!strncmp(v, "norm-no-offset", 14)) {
        f->norm_no_offset = 1;
        f->norm_layer = -1;
        if (v[14] == ':') {
            long l;
            if (qc_cli_parse_long(v + 15, "--inject-fault norm-no-offset:LAYER", 0, QC_MAX_LAYERS - 1,
                                  &l, err))
                return err ? err->code : QC_ERR_ARG;
            f->norm_layer = (int)l;
        } else if (v[14]) {
            return qc_errf(err, QC_ERR_ARG, "--inject-fault: unknown fault '%s'", v);
        }
    } else if (!strcmp(v, "stale-conv-state")) {
        f->stale_conv_state = 1;
    } else if (!strcmp(v, "static-no-advance")) {
        f->static_no_advance = 1;
    } else {
        return qc_errf(err, QC_ERR_ARG, "--inject-fault: unknown fault '%s' (norm-no-offset[:LAYER], "
                       "stale-conv-state, static-no-advance)", v);
    }
    return QC_OK;
}

/* Shared option parsing of check and calibrate. Returns -1 to continue, else an exit code. */
static int parse_common(int argc, char **argv, const char *prog, qc_check_opts *o, int *runs,
                        const char **out, double *factor, const char **policy_out) {
    qc_argp a;
    qc_err err;
    qc_err_clear(&err);
    qc_argp_init(&a, prog, argc, argv);
    qc_status st = QC_OK;
    while (!st && qc_argp_next(&a)) {
        const char *v = NULL;
        if (a.positional) {
            if (!o->golden) o->golden = a.arg;
            else st = qc_argp_unknown(&a, &err);
        } else if (qc_argp_is(&a, "--help") || qc_argp_is(&a, "-h")) {
            fputs(runs ? "usage: qwen-conform calibrate --golden DIR [--runs N] [--factor K] "
                         "[--out measurements.json] [--policy-out tolerances.json]\n"
                         "  measures float32 runtime vs float64 golden noise (max abs, max rel, "
                         "KL) per tensor class, backend, mode and thread count, and prints a "
                         "suggested policy (K x the measured max, rounded up to 1-2-5 steps; "
                         "K^2 for KL)\n"
                       : check_usage, stdout);
            return QC_EXIT_PASS;
        } else if (qc_argp_is(&a, "--golden")) {
            st = qc_argp_value(&a, &o->golden, &err);
        } else if (qc_argp_is(&a, "--backend")) {
            if (!(st = qc_argp_value(&a, &v, &err))) st = parse_backend(v, o, &err);
        } else if (qc_argp_is(&a, "--require")) {
            if (!(st = qc_argp_value(&a, &v, &err))) st = qc_cap_parse(v, &o->require, &err);
        } else if (qc_argp_is(&a, "--adapter-timeout")) {
            int t = 60;
            st = qc_argp_int(&a, 1, 86400, &t, &err);
            o->adapter_timeout = t;
            o->ext.timeout_s = t;
        } else if (qc_argp_is(&a, "--mode")) {
            if (!(st = qc_argp_value(&a, &v, &err))) st = parse_modes(v, &o->modes, &err);
        } else if (qc_argp_is(&a, "--filter")) {
            if (!(st = qc_argp_value(&a, &v, &err))) {
                if (o->has_filter) regfree(&o->filter), o->has_filter = 0;
                int rc = regcomp(&o->filter, v, REG_EXTENDED | REG_NOSUB);
                if (rc) {
                    char m[256];
                    regerror(rc, &o->filter, m, sizeof m);
                    st = qc_errf(&err, QC_ERR_ARG, "--filter: bad regex '%s': %s", v, m);
                } else {
                    o->has_filter = 1;
                }
            }
        } else if (qc_argp_is(&a, "--threads")) {
            st = qc_argp_int(&a, 1, 1024, &o->threads, &err);
        } else if (qc_argp_is(&a, "--quiet") || qc_argp_is(&a, "-q")) {
            st = qc_argp_bool(&a, &err);
            o->quiet = 1;
        } else if (qc_argp_is(&a, "--no-hash-check")) {
            st = qc_argp_bool(&a, &err);
            o->no_hash_check = 1;
        } else if (qc_argp_is(&a, "--max-memory")) {
            if (!(st = qc_argp_value(&a, &v, &err))) {
                uint64_t bytes;
                st = qc_memplan_parse_size(v, "--max-memory", &bytes, &err);
                o->max_memory = v;
            }
        } else if (qc_argp_is(&a, "--inject-fault")) {
            if (!(st = qc_argp_value(&a, &v, &err))) st = parse_fault(v, &o->faults, &err);
        } else if (runs && qc_argp_is(&a, "--runs")) {
            st = qc_argp_int(&a, 1, 1000, runs, &err);
        } else if (runs && qc_argp_is(&a, "--out")) {
            st = qc_argp_value(&a, out, &err);
        } else if (runs && qc_argp_is(&a, "--policy-out")) {
            st = qc_argp_value(&a, policy_out, &err);
        } else if (runs && qc_argp_is(&a, "--factor")) {
            int k = 4;
            st = qc_argp_int(&a, 1, 1000, &k, &err);
            *factor = k;
        } else if (!runs && qc_argp_is(&a, "--policy")) {
            st = qc_argp_value(&a, &o->policy_path, &err);
        } else if (!runs && qc_argp_is(&a, "--json")) {
            st = qc_argp_value(&a, &o->json_path, &err);
        } else if (!runs && qc_argp_is(&a, "--junit")) {
            st = qc_argp_value(&a, &o->junit_path, &err);
        } else if (!runs && qc_argp_is(&a, "--dump-actual")) {
            st = qc_argp_value(&a, &o->dump_dir, &err);
        } else if (!runs && qc_argp_is(&a, "--list")) {
            st = qc_argp_bool(&a, &err);
            o->list = 1;
        } else if (!runs && qc_argp_is(&a, "--shard")) {
            if (!(st = qc_argp_value(&a, &v, &err))) st = parse_shard(v, &o->shard_i, &o->shard_n, &err);
        } else {
            st = qc_argp_unknown(&a, &err);
        }
    }
    if (!st && !o->golden)
        st = qc_errf(&err, QC_ERR_ARG, "--golden DIR|FILE is required (see --help)");
    if (st) return qc_cli_fail(prog, &err);
    return -1;
}

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* --policy, else tolerances.json beside the goldens (DIR/, or the file's directory or its
 * parent), else built-in. */
static qc_status load_policy(const qc_check_opts *o, qc_policy **pol, qc_err *err) {
    if (o->policy_path) return qc_policy_load(o->policy_path, pol, err);
    char cand[3][2100];
    int nc = 0;
    struct stat sb;
    char g[1024];
    snprintf(g, sizeof g, "%s", o->golden);
    for (size_t L = strlen(g); L > 1 && g[L - 1] == '/'; L--) g[L - 1] = 0;
    if (stat(g, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char d[1024];
        snprintf(cand[nc++], sizeof cand[0], "%s/tolerances.json", g);
        qc_cli_dirname(g, d, sizeof d);
        snprintf(cand[nc++], sizeof cand[0], "%s/tolerances.json", d);
    } else {
        char d[1024], dd[1024];
        qc_cli_dirname(o->golden, d, sizeof d);
        qc_cli_dirname(d, dd, sizeof dd);
        snprintf(cand[nc++], sizeof cand[0], "%s/tolerances.json", d);
        snprintf(cand[nc++], sizeof cand[0], "%s/tolerances.json", dd);
    }
    for (int i = 0; i < nc; i++)
        if (file_exists(cand[i])) return qc_policy_load(cand[i], pol, err);
    return qc_policy_builtin(pol, err);
}

static void opts_init(qc_check_opts *o) {
    memset(o, 0, sizeof *o);
    o->threads = 1;
    o->faults.norm_layer = -1;
}

static void opts_free(qc_check_opts *o) {
    if (o->has_filter) regfree(&o->filter);
    o->has_filter = 0;
}

int qc_cmd_check(int argc, char **argv) {
    const char *prog = "qwen-conform check";
    qc_check_opts o;
    opts_init(&o);
    int rc = parse_common(argc, argv, prog, &o, NULL, NULL, NULL, NULL);
    if (rc >= 0) {
        if (rc == QC_EXIT_PASS) fputs(qc_outpath_help, stdout); /* after --help */
        opts_free(&o);
        return rc;
    }
    qc_err err;
    qc_err_clear(&err);
    /* a runtime under test that cannot be used is a usage error before any work */
    if ((o.backends & QC_BACKEND_EXT) && qc_registry_preflight(&o.ext, &err)) {
        opts_free(&o);
        return qc_cli_fail(prog, &err);
    }
    qc_policy *pol = NULL;
    if (load_policy(&o, &pol, &err)) {
        opts_free(&o);
        return qc_cli_fail(prog, &err);
    }
    /* before any work: every output valid, none an input (a golden, a golden's model file,
     * the policy) or another output; --dump-actual not where goldens are read (qc_outpath) */
    qc_outpath_reset();
    qc_outpath_add_goldens(o.golden, 1);
    if (strcmp(qc_policy_source(pol), "built-in") != 0)
        qc_outpath_add_input(qc_policy_source(pol), o.policy_path ? "--policy" : "policy");
    qc_outpath_add_output(o.json_path, "--json", QC_OUT_TEXT);
    qc_outpath_add_output(o.junit_path, "--junit", QC_OUT_TEXT);
    qc_outpath_add_dump_dir(o.dump_dir, "--dump-actual");
    if (qc_outpath_verify(&err)) {
        qc_policy_free(pol);
        opts_free(&o);
        return qc_cli_fail(prog, &err);
    }
    qc_results res;
    qc_results_init(&res);
    qc_results_fill_provenance(&res);
    snprintf(res.tool_version, sizeof res.tool_version, "%s (%s)", QC_VERSION, QC_GIT_COMMIT);
    snprintf(res.policy, sizeof res.policy, "%s", qc_policy_source(pol));
    if (!o.quiet && !o.list)
        fprintf(stderr, "qwen-conform %s: policy %s\n", res.tool_version, res.policy);
    rc = qc_check_run(&o, pol, &res);
    if (!o.list) {
        if (res.n > 0) qc_report_console_failures(stdout, &res);
        if (res.n > 0 || rc != QC_EXIT_NOTHING) qc_report_console_summary(stdout, &res);
        if (o.json_path && qc_report_json_write(o.json_path, &res, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            rc = QC_EXIT_ERROR;
        }
        if (o.junit_path && qc_report_junit_write(o.junit_path, &res, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            rc = QC_EXIT_ERROR;
        }
    }
    qc_results_free(&res);
    qc_policy_free(pol);
    opts_free(&o);
    return rc;
}

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
    "  --json F  --junit F  --quiet   as for check\n"
    "  Cases are matched by name; a golden case absent from ACTUAL.h5 is reported as skipped.\n"
    "exit: 0 all passed, 1 a conformance failure, 2 usage / I/O / format error (incl. a case\n"
    "      run on other inputs than the golden's), 3 no case in common\n";

int qc_cmd_diff(int argc, char **argv) {
    const char *prog = "qwen-conform diff";
    qc_err err;
    qc_err_clear(&err);
    qc_check_opts o;
    opts_init(&o);
    const char *files[2] = {NULL, NULL}, *label = "actual";
    int nfiles = 0;
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
        else if (qc_argp_is(&a, "--quiet") || qc_argp_is(&a, "-q")) {
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
    if (load_policy(&o, &pol, &err)) return qc_cli_fail(prog, &err);
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
    snprintf(res.policy, sizeof res.policy, "%s", qc_policy_source(pol));
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
    qc_report_console_failures(stdout, &res);
    qc_report_console_summary(stdout, &res);
    if (o.json_path && qc_report_json_write(o.json_path, &res, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        res.n_error++;
    }
    if (o.junit_path && qc_report_junit_write(o.junit_path, &res, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        res.n_error++;
    }
    rc = res.n_error ? QC_EXIT_ERROR : res.n_fail ? QC_EXIT_FAIL
         : common == 0 ? QC_EXIT_NOTHING : QC_EXIT_PASS;
    qc_results_free(&res);
out:
    qc_golden_free(act);
    qc_golden_free(g);
    qc_policy_free(pol);
    return rc;
}

static const char *const calib_slot_names[QC_CK_SLOTS] = {"reference", "optimized", "external"};

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

int qc_cmd_calibrate(int argc, char **argv) {
    const char *prog = "qwen-conform calibrate";
    qc_check_opts o;
    opts_init(&o);
    int runs = 1;
    const char *out = NULL, *policy_out = NULL;
    double factor = 4.0;
    int rc = parse_common(argc, argv, prog, &o, &runs, &out, &factor, &policy_out);
    if (rc >= 0) {
        if (rc == QC_EXIT_PASS) fputs(qc_outpath_help, stdout); /* after --help */
        opts_free(&o);
        return rc;
    }
    qc_err err;
    qc_err_clear(&err);
    /* before any work: both outputs valid, neither an input (a golden, a golden's model file)
     * nor the other output (qc_outpath) */
    qc_outpath_reset();
    qc_outpath_add_goldens(o.golden, 1);
    qc_outpath_add_output(out, "--out", QC_OUT_TEXT);
    qc_outpath_add_output(policy_out, "--policy-out", QC_OUT_TEXT);
    if (qc_outpath_verify(&err)) {
        opts_free(&o);
        return qc_cli_fail(prog, &err);
    }
    qc_policy *pol = NULL;
    if (qc_policy_builtin(&pol, &err)) {
        opts_free(&o);
        return qc_cli_fail(prog, &err);
    }
    calib_sink *cs = calloc(1, sizeof *cs);
    if (!cs) {
        qc_policy_free(pol);
        opts_free(&o);
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
    for (int r = 0; r < runs; r++) {
        fprintf(stderr, "%s: run %d/%d over %s\n", prog, r + 1, runs, o.golden);
        rc = qc_check_run(&o, pol, &res);
        for (int i = 0; i < res.n; i++)
            if (res.rows[i].verdict == QC_VERDICT_ERROR) {
                fprintf(stderr, "%s: %s/%s %s %s: %s\n", prog, res.rows[i].stem,
                        res.rows[i].case_name, res.rows[i].backend, res.rows[i].check,
                        res.rows[i].keyline);
                bad = 1;
            }
        if (rc == QC_EXIT_NOTHING || bad) break;
        if (r + 1 < runs) {
            qc_results_free(&res);
            qc_results_init(&res);
        }
    }
    if (rc == QC_EXIT_NOTHING || bad || cs->tensors == 0) {
        fprintf(stderr, "%s: %s\n", prog, bad ? "errors while running the cases" : "nothing measured");
        qc_results_free(&res);
        free(cs);
        qc_policy_free(pol);
        opts_free(&o);
        return bad ? QC_EXIT_ERROR : QC_EXIT_NOTHING;
    }
    /* measurements */
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "schema_version", 1);
    cJSON_AddStringToObject(root, "tool_version", res.tool_version);
    cJSON_AddStringToObject(root, "machine", res.machine);
    cJSON_AddStringToObject(root, "isa", res.isa);
    cJSON_AddStringToObject(root, "date", res.started);
    cJSON_AddStringToObject(root, "golden", o.golden);
    cJSON_AddNumberToObject(root, "runs", runs);
    cJSON_AddNumberToObject(root, "factor", factor);
    cJSON_AddNumberToObject(root, "optimized_threads_main", o.threads);
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
    static const char *const kinds[2] = {"vs_golden", "consistency"};
    for (int b = 0; b < QC_CK_SLOTS; b++) {
        cJSON *bj = cJSON_AddObjectToObject(meas, calib_slot_names[b]);
        for (int k = 0; k < 2; k++) {
            cJSON *kj = cJSON_AddObjectToObject(bj, kinds[k]);
            for (int cl = 0; cl < QC_TC_COUNT; cl++)
                if (cs->c[b][k][cl].n > 0) cell_json(kj, qc_tclass_str((qc_tclass)cl), &cs->c[b][k][cl]);
        }
    }
    /* suggested policy */
    cJSON *pj = cJSON_CreateObject();
    cJSON_AddNumberToObject(pj, "schema_version", 1);
    char desc[512];
    snprintf(desc, sizeof desc, "Derived by `qwen-conform calibrate --golden %s --runs %d` on %s: "
             "%g x measured max noise, rounded up to 1-2-5 steps (KL: %g x)", o.golden, runs,
             res.started, factor, factor * factor);
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
    for (int cl = 0; vals && cl < QC_TC_COUNT; cl++) {
        /* median of the per-case maxima; a case above 4 x the median is an outlier that gets
         * its own override (with the numbers as the reason) instead of widening the default */
        int nv = 0;
        for (int i = 0; i < cs->n_case; i++)
            if (cs->cases[i].max_abs[cl] > 0) vals[nv++] = cs->cases[i].max_abs[cl];
        if (nv == 0) continue;
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
    free(vals);
    cJSON_AddItemReferenceToObject(root, "suggested_policy", pj);
    char *mtext = cJSON_Print(root);
    char *ptext = cJSON_Print(pj);
    rc = QC_EXIT_PASS;
    if (mtext && ptext) {
        printf("%s\n", ptext);
        if (out && qc_cli_write_atomic(out, mtext, strlen(mtext), &err)) rc = qc_cli_fail(prog, &err);
        if (policy_out && qc_cli_write_atomic(policy_out, ptext, strlen(ptext), &err))
            rc = qc_cli_fail(prog, &err);
        /* human summary on stderr */
        fprintf(stderr, "%s: measured noise (max_abs / max_rel) per class:\n", prog);
        for (int b = 0; b < QC_CK_SLOTS; b++)
            for (int k = 0; k < 2; k++)
                for (int cl = 0; cl < QC_TC_COUNT; cl++) {
                    const calib_cell *ce = &cs->c[b][k][cl];
                    if (ce->n == 0) continue;
                    fprintf(stderr, "  %-9s %-11s %-15s max_abs %.3g max_rel %.3g%s (at %s)\n",
                            calib_slot_names[b], kinds[k], qc_tclass_str((qc_tclass)cl), ce->max_abs,
                            ce->max_rel, "", ce->where);
                }
    } else {
        rc = QC_EXIT_ERROR;
    }
    cJSON_free(mtext);
    cJSON_free(ptext);
    cJSON_Delete(root);
    cJSON_Delete(pj);
    qc_results_free(&res);
    free(cs);
    qc_policy_free(pol);
    opts_free(&o);
    return rc;
}

