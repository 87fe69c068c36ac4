/* qc_check_cli.c — option parsing shared by check, diff, calibrate and policy --print; the
 * policy they load and the reports they write. */

#include "qc_check_cli.h"
#include "qc_tier.h"

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
#include "qc_report_causes.h"
#include "qc_report_console.h"
#include "qc_report_json.h"
#include "qc_report_junit.h"
#include "qc_report_html.h"
#include "qc_report_verdict.h"

#include <cjson/cJSON.h>
/* ===================================================================================== */
/* command line: qwen-conform [check]                                                    */
/* ===================================================================================== */

/* The usage in three parts around the lines naming the built-in backends, which come from the
 * registry's table (check_usage_print). */
static const char check_usage_a[] =
    "usage: qwen-conform [check] --golden DIR|FILE [options]\n";
static const char check_usage_b[] =
    "                        plugin:PATH.so[,k=v...]  your runtime as a plugin (the ABI in\n"
    "                          include/qc/qc_runtime_plugin.h), options passed to its open\n"
    "                        exec:\"CMD ARGS\"  your runtime as a child process speaking\n"
    "                          docs/adapter-protocol.md (e.g. on adapters/python's helper)\n"
    "                        isolate:plugin:PATH.so[,k=v...]  a plugin in a child process\n"
    "                        llamacpp[,k=v...]  the shipped llama.cpp adapter (ci/llamacpp)\n"
    "                        optimized,k=v[,...]  a built-in with its own options as the\n"
    "                          runtime under test (gemm_min, par_min, bf16_dot=1 with --tier\n"
    "                          bf16: docs/tolerance-tiers.md)\n"
    "                        http:URL[,api=auto|openai|vllm|sglang|llama-server][,k=N]\n"
    "                          [,model=ID][,timeout=S][,inflight=N][,key_env=VAR][,block=N]\n"
    "                          [,chunk=N][,positions=N][,insecure=1]  a running server, checked\n"
    "                          through top-k log-probabilities + the serving battery\n"
    "                          (docs/servers.md; the API key only from $VAR)\n"
    "  --require CAPS        comma list (hidden, state_read, state_fill, threads, dn_kernel,\n"
    "                        chunk_size, snapshot, sequences, trim, dynamic): a runtime\n"
    "                        lacking one FAILS (default: the checks that need a missing\n"
    "                        capability are SKIPPED with the reason)\n"
    "  --insecure            http: backends: do not verify an https:// server's certificate\n"
    "                        (self-signed; the same as insecure=1 in the spec)\n"
    "  --topk K              see each runtime through its top-k log-probabilities only\n"
    "                        (the rows a server gets: topk.argmax / logprob / top1_in_k /\n"
    "                        overlap) instead of the checks against the golden's tensors\n"
    "  --min-coverage PCT    exit 1 when a runtime under test ran less than PCT %% of the\n"
    "                        checks its capabilities would allow (the verdict's coverage)\n"
    "  --adapter-timeout S   seconds an exec adapter may take per request (default 60)\n"
    "  --mode static|dynamic|nokv|all      prefill strategies, comma-separated (default all)\n"
    "  --policy F.json       tolerance policy (default: tolerances.json beside the goldens,\n"
    "                        DIR/ or its parent, e.g. fixtures/tolerances.json; else built-in)\n"
    "  --json F              machine-readable report (schema-versioned)\n"
    "  --junit F             JUnit XML report (classname <stem>.<case>, name\n"
    "                        <backend>.<mode>.<check>)\n"
    "  --html F              one self-contained HTML page (no network): the verdicts, the\n"
    "                        error charts per case, every row filterable by text / verdict\n"
    "  --dump-actual DIR     write the actual tensors in the golden layout\n"
    "                        (DIR/<stem>.<backend>.<mode>.h5) and print h5diff lines\n"
    "  --list                print the selected <stem>/<case>/<backend>/<mode> ids; run nothing\n"
    "  --filter REGEX        POSIX extended regex on <stem>/<case>/<backend>/<mode>\n"
    "  --shard i/n           run the i-th (1-based) of n interleaved shards of the cases\n";
static const char check_usage_c[] =
    /* "  --threads N           <threaded built-ins> backend threads ..." before this */
    " threads for the main runs (default 1; the\n"
    "                        threads_bitwise check compares them with 2 threads)\n"
    "  --no-hash-check       do not fail when the model's SHA-256 differs from the golden's\n"
    "  --max-memory SIZE     refuse (exit 2) when the planned memory exceeds SIZE (e.g. 8G;\n"
    "                        default: the machine's available memory)\n"
    "  -v, --verbose         print every row (PASS and SKIP too) and a line per case; by\n"
    "                        default the console shows the failures, the skips grouped by\n"
    "                        reason, each runtime's verdict and the summary\n"
    "  --quiet               as the default, without the informational notes on stderr\n"
    "  --model DIR           check every golden against the model in DIR instead of its\n"
    "                        model_path (a golden copied away from its model)\n"
    "  --atol CLASS=V, --rtol CLASS=V   replace the policy's default atol / rtol of a class\n"
    "                        (logits, hidden, k_cache, v_cache, conv_state, recurrent_state;\n"
    "                        repeatable; per-backend sections and overrides still apply)\n"
    "  --tier NAME           tolerance tier of a reduced-precision runtime: fp32 (default:\n"
    "                        the policy as loaded), f16-kv, bf16-kv, bf16, int8, int4\n"
    "                        (docs/tolerance-tiers.md; applied before --atol / --rtol)\n"
    "CI:\n"
    "  --maxfail N, -x       stop once N checks FAILED or ERRORED (-x: 1); the run in progress\n"
    "                        finishes, every report holds what ran, exit 1 (2 on an error)\n"
    "  --durations N         print the N slowest <stem>/<case>/<backend>/<mode> runs (0: all)\n"
    "  --rerun-failed R.json run only the <stem>/<case>/<backend>/<mode> combinations that\n"
    "                        FAILED or ERRORED in an earlier --json report (any tool version of\n"
    "                        the same report schema_version); ANDed with --filter / --shard\n"
    "exit (highest first): 2 usage / I/O / format error (the run is incomplete), 1 a\n"
    "      conformance failure, 3 nothing was checked, 0 all passed\n";

/* The registry's built-in names joined: "a and b" / "a, b and c" (and = " and "), or
 * "a | b | c" (and = NULL, sep " | "); with caps, only the built-ins that have all of them. */
static void builtin_names(FILE *f, const char *and, unsigned caps) {
    int n = 0, k = 0;
    for (int i = 0; i < qc_registry_n_builtins(); i++)
        n += (qc_registry_builtin(i)->caps & caps) == caps;
    for (int i = 0; i < qc_registry_n_builtins(); i++) {
        const qc_builtin_info *b = qc_registry_builtin(i);
        if ((b->caps & caps) != caps) continue;
        fprintf(f, "%s%s", k == 0 ? "" : !and ? " | " : k == n - 1 ? and : ", ", b->name);
        k++;
    }
}

/* `check --help`: the text, the built-in backends named by the registry. */
static void check_usage_print(FILE *f) {
    const int n = qc_registry_n_builtins();
    fputs(check_usage_a, f);
    fputs("  --backend B           what to check (repeatable; default: ", f);
    builtin_names(f, " and ", 0);
    fputs("):\n                        ", f);
    builtin_names(f, NULL, 0);
    fprintf(f, " | all (%s built-in backend%s)\n", n == 2 ? "both" : "every", n == 2 ? "s" : "");
    fputs(check_usage_b, f);
    fputs("  --threads N           ", f);
    builtin_names(f, " and ", QC_BE_CAP_THREADS);
    fputs(" backend", f);
    fputs(check_usage_c, f);
}

/* --backend may be given more than once: built-in names (the registry's table) add to the set,
 * "all" is every one of them, any other value is the one runtime under test (plugin / exec /
 * llamacpp / http). */
static qc_status parse_backend(const char *v, qc_check_opts *o, qc_err *err) {
    const int n = qc_registry_n_builtins();
    if (!strcmp(v, "all")) {
        for (int i = 0; i < n && i < 32; i++) o->builtins |= 1u << i;
        return QC_OK;
    }
    const int i = qc_registry_builtin_index(v);
    if (i >= 32)
        return qc_errf(err, QC_ERR_ARG, "--backend %s: only the first 32 built-in backends can be "
                       "selected one by one", v);
    if (i >= 0) {
        o->builtins |= 1u << i;
        return QC_OK;
    }
    if (o->has_ext)
        return qc_errf(err, QC_ERR_ARG, "--backend: one runtime under test at a time ('%s' and "
                       "'%s')", o->ext.name, v);
    qc_status s = qc_registry_parse(v, o->adapter_timeout, &o->ext, err);
    if (s) return s;
    o->has_ext = 1;
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
    } else if (!strcmp(v, "snapshot-noop")) {
        f->snapshot_noop = 1;
    } else if (!strcmp(v, "rollback-keeps-conv")) {
        f->rollback_keeps_conv = 1;
    } else if (!strcmp(v, "slot-off-by-one")) {
        f->slot_off_by_one = 1;
    } else if (!strcmp(v, "recurrent-bf16")) {
        f->recurrent_bf16 = 1;
    } else if (!strcmp(v, "unguarded-exp")) {
        f->unguarded_exp = 1;
    } else if (!strcmp(v, "moe-no-renorm")) {
        f->moe_fault = "no_renorm"; /* the reference's fault.moe variants (qc_backend.h) */
    } else if (!strcmp(v, "moe-gate-all")) {
        f->moe_fault = "gate_all";
    } else if (!strcmp(v, "moe-topk-next")) {
        f->moe_fault = "topk_next";
    } else if (!strcmp(v, "moe-gate-drop")) {
        f->moe_fault = "gate_drop";
    } else {
        return qc_errf(err, QC_ERR_ARG, "--inject-fault: unknown fault '%s' (norm-no-offset[:LAYER], "
                       "stale-conv-state, static-no-advance, snapshot-noop, rollback-keeps-conv, "
                       "slot-off-by-one, recurrent-bf16, unguarded-exp, moe-no-renorm, "
                       "moe-gate-all, moe-topk-next, moe-gate-drop)", v);
    }
    return QC_OK;
}

void ckcli_verdict(qc_results *res, int min_coverage) {
    qc_verdicts v;
    if (res->n == 0 || qc_verdicts_compute(res, &v)) return;
    qc_report_verdict_console(stdout, &v);
    qc_causes cz; /* the likely causes of the failures, after the verdicts (none: no lines) */
    if (!qc_causes_compute(res, &cz)) {
        qc_report_causes_console(stdout, &cz, res, 5);
        qc_causes_free(&cz);
    }
    if (min_coverage >= 0 && qc_verdicts_below(&v, min_coverage)) {
        printf("--min-coverage %d: a runtime ran less than %d %% of its battery: exit 1\n",
               min_coverage, min_coverage);
        res->exit_code = qc_exit_precedence(qc_results_exit_code(res), QC_EXIT_FAIL);
    }
    qc_verdicts_free(&v);
}

void ckcli_check_cli_init(check_cli *x) {
    memset(x, 0, sizeof *x);
    x->min_coverage = -1;
    x->durations = -1;
}

/* --atol / --rtol CLASS=V */
qc_status ckcli_parse_tol_flag(const char *flag, const char *v, check_cli *x, qc_err *err) {
    const char *eq = strchr(v, '=');
    char cls[64];
    if (!eq || eq == v || (size_t)(eq - v) >= sizeof cls)
        return qc_errf(err, QC_ERR_ARG, "%s: '%s' is not CLASS=VALUE (e.g. logits=0.01)", flag, v);
    memcpy(cls, v, (size_t)(eq - v));
    cls[eq - v] = 0;
    qc_tclass c;
    if (qc_tclass_parse(cls, &c) != 0)
        return qc_errf(err, QC_ERR_ARG, "%s: unknown tensor class '%s' (logits, hidden, k_cache, "
                       "v_cache, conv_state, recurrent_state)", flag, cls);
    char *end = NULL;
    errno = 0;
    double d = strtod(eq + 1, &end);
    if (!eq[1] || !end || *end || errno == ERANGE || !isfinite(d) || d < 0.0)
        return qc_errf(err, QC_ERR_ARG, "%s: '%s' is not a non-negative number", flag, eq + 1);
    if (x->n_tol >= MAX_TOL_FLAGS)
        return qc_errf(err, QC_ERR_ARG, "%s: more than %d --atol / --rtol", flag, MAX_TOL_FLAGS);
    x->tol[x->n_tol].cls = c;
    x->tol[x->n_tol].field = !strcmp(flag, "--atol") ? "atol" : "rtol";
    x->tol[x->n_tol].v = d;
    x->tol[x->n_tol].text = v;
    x->n_tol++;
    return QC_OK;
}

/* Apply --atol / --rtol to the policy's defaults and name them in its description. */
qc_status ckcli_apply_tol_flags(const check_cli *x, qc_policy *pol, qc_err *err) {
    if (x->tier) {
        qc_status s = qc_tier_apply(pol, x->tier, err);
        if (s) return s;
    }
    for (int i = 0; i < x->n_tol; i++) {
        qc_status s = qc_policy_set_default(pol, x->tol[i].cls, x->tol[i].field, x->tol[i].v, err);
        if (s) return qc_err_prefix(err, s, x->tol[i].field[0] == 'a' ? "--atol" : "--rtol");
        char note[160];
        snprintf(note, sizeof note, "--%s %s", x->tol[i].field, x->tol[i].text);
        qc_policy_note(pol, note);
    }
    return QC_OK;
}

/* Shared option parsing of check and calibrate. Returns -1 to continue, else an exit code.
 * x: the check-only options (NULL for calibrate). */
/* --filter REGEX: compiled into o->filter (a later --filter replaces an earlier one). */
static qc_status parse_filter(const char *v, qc_check_opts *o, qc_err *err) {
    if (o->has_filter) regfree(&o->filter), o->has_filter = 0;
    int rc = regcomp(&o->filter, v, REG_EXTENDED | REG_NOSUB);
    if (rc) {
        char m[256];
        regerror(rc, &o->filter, m, sizeof m);
        return qc_errf(err, QC_ERR_ARG, "--filter: bad regex '%s': %s", v, m);
    }
    o->has_filter = 1;
    o->filter_src = v;
    return QC_OK;
}

int ckcli_parse_common(int argc, char **argv, const char *prog, qc_check_opts *o, int *runs,
                        const char **out, double *factor, const char **policy_out,
                        check_cli *x) {
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
            if (runs)
                fputs("usage: qwen-conform calibrate --golden DIR [--runs N] [--factor K] "
                      "[--out measurements.json] [--policy-out tolerances.json] "
                      "[--model DIR]\n"
                      "  measures float32 runtime vs float64 golden noise (max abs, max rel, "
                      "KL) per tensor class, backend, mode and thread count, and prints a "
                      "suggested policy (K x the measured max, rounded up to 1-2-5 steps; "
                      "K^2 for KL)\n", stdout);
            else
                check_usage_print(stdout);
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
            if (!(st = qc_argp_value(&a, &v, &err))) st = parse_filter(v, o, &err);
        } else if (qc_argp_is(&a, "--threads")) {
            st = qc_argp_int(&a, 1, 1024, &o->threads, &err);
        } else if (qc_argp_is(&a, "--quiet") || qc_argp_is(&a, "-q")) {
            st = qc_argp_bool(&a, &err);
            o->quiet = QC_QUIET_ALL;
        } else if (qc_argp_is(&a, "--verbose") || qc_argp_is(&a, "-v")) {
            st = qc_argp_bool(&a, &err);
            o->quiet = QC_QUIET_VERBOSE;
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
        } else if (qc_argp_is(&a, "--model")) { /* check and calibrate */
            st = qc_argp_value(&a, &o->model_dir, &err);
        } else if (x && qc_argp_is(&a, "--maxfail")) {
            st = qc_argp_int(&a, 1, 1 << 30, &o->maxfail, &err);
        } else if (x && qc_argp_is(&a, "-x")) {
            st = qc_argp_bool(&a, &err);
            o->maxfail = 1;
        } else if (x && qc_argp_is(&a, "--durations")) {
            st = qc_argp_int(&a, 0, 1 << 30, &x->durations, &err);
        } else if (x && qc_argp_is(&a, "--rerun-failed")) {
            st = qc_argp_value(&a, &x->rerun, &err);
        } else if (!runs && qc_argp_is(&a, "--insecure")) {
            st = qc_argp_bool(&a, &err);
            o->insecure = 1;
        } else if (!runs && qc_argp_is(&a, "--topk")) {
            st = qc_argp_int(&a, 1, 100, &o->topk, &err);
        } else if (x && qc_argp_is(&a, "--min-coverage")) {
            st = qc_argp_int(&a, 0, 100, &x->min_coverage, &err);
        } else if (x && qc_argp_is(&a, "--html")) {
            st = qc_argp_value(&a, &x->html, &err);
        } else if (x && qc_argp_is(&a, "--tier")) {
            st = qc_argp_value(&a, &x->tier, &err);
        } else if (x && (qc_argp_is(&a, "--atol") || qc_argp_is(&a, "--rtol"))) {
            if (!(st = qc_argp_value(&a, &v, &err))) st = ckcli_parse_tol_flag(a.flag, v, x, &err);
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
qc_status ckcli_load_policy(const qc_check_opts *o, qc_policy **pol, qc_err *err) {
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

void ckcli_opts_init(qc_check_opts *o) {
    memset(o, 0, sizeof *o);
    o->threads = 1;
    o->faults.norm_layer = -1;
}

void ckcli_opts_free(qc_check_opts *o) {
    if (o->has_filter) regfree(&o->filter);
    o->has_filter = 0;
}

/* --model DIR: a directory with a config.json (checked before any work). */
qc_status ckcli_check_model_dir(const qc_check_opts *o, qc_err *err) {
    if (!o->model_dir) return QC_OK;
    struct stat sb;
    char cfgp[2100];
    snprintf(cfgp, sizeof cfgp, "%s/config.json", o->model_dir);
    if (stat(o->model_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return qc_errf(err, QC_ERR_IO, "--model %s: not a directory", o->model_dir);
    if (stat(cfgp, &sb) != 0)
        return qc_errf(err, QC_ERR_IO, "--model %s: no config.json there (a Hugging Face model "
                       "directory: config.json + *.safetensors)", o->model_dir);
    return QC_OK;
}

/* Write the --json / --junit reports; a report that cannot be written makes the exit code 2. */
int ckcli_write_reports(const char *prog, const qc_check_opts *o, qc_results *res, int rc) {
    qc_err err;
    qc_err_clear(&err);
    if (o->json_path && qc_report_json_write(o->json_path, res, &err)) {
        fprintf(stderr, "%s: %s (exit %d)\n", prog, err.msg, QC_EXIT_ERROR);
        rc = qc_exit_precedence(rc, QC_EXIT_ERROR);
    }
    qc_err_clear(&err);
    if (o->junit_path && qc_report_junit_write(o->junit_path, res, &err)) {
        fprintf(stderr, "%s: %s (exit %d)\n", prog, err.msg, QC_EXIT_ERROR);
        rc = qc_exit_precedence(rc, QC_EXIT_ERROR);
    }
    return rc;
}

int ckcli_write_html(const char *prog, const char *path, const qc_results *res, int rc) {
    qc_err err;
    qc_err_clear(&err);
    if (path && qc_report_html_write(path, res, &err)) {
        fprintf(stderr, "%s: %s (exit %d)\n", prog, err.msg, QC_EXIT_ERROR);
        rc = qc_exit_precedence(rc, QC_EXIT_ERROR);
    }
    return rc;
}

/* The check names a --filter might be mistaken for (it selects <stem>/<case>/<backend>/<mode>). */
static const char *const CHECK_WORDS[] = {
    "prefill.", "decode.", "logits", "hidden", "k_cache", "v_cache", "conv_state",
    "recurrent_state", "argmax", "static_eq_dynamic", "chunked_eq_recurrent", "chunk_sweep",
    "garbage_reset", "restore_after_garbage", "unused_slots", "threads_bitwise", "opt_eq_ref",
    "model_hash", "snapshot_restore", "snapshot_copy", "rollback", "prefix_reuse",
    "multi_sequence", "batch_invariance", "router_topk", "long_decode_drift", "topk.",
};

void ckcli_filter_hint(const qc_check_opts *o) {
    if (!o->has_filter || !o->filter_src) return;
    const qc_builtin_info *b0 = qc_registry_builtin(0);
    fprintf(stderr, "qwen-conform: --filter '%s' matched none of the <stem>/<case>/<backend>/<mode> "
                    "ids (e.g. tiny-f32-tied-flat/len005/%s/dynamic; `check --list` prints "
                    "them)\n", o->filter_src, b0 ? b0->name : "BACKEND");
    for (size_t i = 0; i < sizeof CHECK_WORDS / sizeof *CHECK_WORDS; i++)
        if (strstr(o->filter_src, CHECK_WORDS[i])) {
            fprintf(stderr, "qwen-conform: '%s' names a check (%s): --filter selects cases, "
                            "backends and modes, not checks; every check of a selected case "
                            "runs (read one check's rows with grep or in the JSON report)\n",
                    o->filter_src, CHECK_WORDS[i]);
            break;
        }
}
