/* qc_check.c — the command lines of the check engine: qwen-conform [check], diff, calibrate. */
/* Messages are cut to their buffers on purpose (snprintf); GCC's truncation warning is noise. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "qc_check_internal.h"

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
    "  --model DIR           check every golden against the model in DIR instead of its\n"
    "                        model_path (a golden copied away from its model)\n"
    "  --atol CLASS=V, --rtol CLASS=V   replace the policy's default atol / rtol of a class\n"
    "                        (logits, hidden, k_cache, v_cache, conv_state, recurrent_state;\n"
    "                        repeatable; per-backend sections and overrides still apply)\n"
    "CI:\n"
    "  --maxfail N, -x       stop once N checks FAILED or ERRORED (-x: 1); the run in progress\n"
    "                        finishes, every report holds what ran, exit 1 (2 on an error)\n"
    "  --durations N         print the N slowest <stem>/<case>/<backend>/<mode> runs (0: all)\n"
    "  --rerun-failed R.json run only the <stem>/<case>/<backend>/<mode> combinations that\n"
    "                        FAILED or ERRORED in an earlier --json report (any tool version of\n"
    "                        the same report schema_version); ANDed with --filter / --shard\n"
    "exit (highest first): 2 usage / I/O / format error (the run is incomplete), 1 a\n"
    "      conformance failure, 3 nothing was checked, 0 all passed\n";

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

/* What the command line of check (and diff, policy --print) holds beyond qc_check_opts. */
#define MAX_TOL_FLAGS 64
typedef struct {
    int durations;              /* --durations N; -1: not given; 0: all */
    const char *rerun;          /* --rerun-failed REPORT.json */
    struct {
        qc_tclass cls;
        const char *field;      /* "atol" / "rtol" */
        double v;
        const char *text;       /* as given: "logits=0.01" */
    } tol[MAX_TOL_FLAGS];       /* --atol / --rtol in command-line order (later wins) */
    int n_tol;
} check_cli;

static void check_cli_init(check_cli *x) {
    memset(x, 0, sizeof *x);
    x->durations = -1;
}

/* --atol / --rtol CLASS=V */
static qc_status parse_tol_flag(const char *flag, const char *v, check_cli *x, qc_err *err) {
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
static qc_status apply_tol_flags(const check_cli *x, qc_policy *pol, qc_err *err) {
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
static int parse_common(int argc, char **argv, const char *prog, qc_check_opts *o, int *runs,
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
            fputs(runs ? "usage: qwen-conform calibrate --golden DIR [--runs N] [--factor K] "
                         "[--out measurements.json] [--policy-out tolerances.json] "
                         "[--model DIR]\n"
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
        } else if (x && (qc_argp_is(&a, "--atol") || qc_argp_is(&a, "--rtol"))) {
            if (!(st = qc_argp_value(&a, &v, &err))) st = parse_tol_flag(a.flag, v, x, &err);
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

/* ===================================================================================== */
/* --rerun-failed: the (stem, case, backend, mode) combinations a JSON report failed      */
/* ===================================================================================== */

/* One combination; "*" in a field matches anything (a file-level row: case "_model" or
 * "_file", backend / mode "-"). */
typedef struct {
    char stem[128], case_name[64], backend[128], mode[32];
} rerun_key;

typedef struct {
    rerun_key *k;
    int n, cap;
    int n_rows;               /* FAIL / ERROR rows read */
    char tool_version[64];    /* of the report */
} rerun_set;

static int rerun_add(rerun_set *rs, const char *stem, const char *cname, const char *backend,
                     const char *mode) {
    rerun_key k;
    memset(&k, 0, sizeof k); /* compared with memcmp */
    snprintf(k.stem, sizeof k.stem, "%s", stem);
    snprintf(k.case_name, sizeof k.case_name, "%s",
             !strcmp(cname, "_model") || !strcmp(cname, "_file") ? "*" : cname);
    snprintf(k.backend, sizeof k.backend, "%s", !strcmp(backend, "-") ? "*" : backend);
    snprintf(k.mode, sizeof k.mode, "%s", !strcmp(mode, "-") ? "*" : mode);
    for (int i = 0; i < rs->n; i++)
        if (!memcmp(&rs->k[i], &k, sizeof k)) return 0;
    if (rs->n == rs->cap) {
        int nc = rs->cap ? 2 * rs->cap : 32;
        rerun_key *nk = realloc(rs->k, (size_t)nc * sizeof *nk);
        if (!nk) return -1;
        rs->k = nk;
        rs->cap = nc;
    }
    rs->k[rs->n++] = k;
    return 0;
}

static int rerun_field(const char *want, const char *have) {
    return !strcmp(want, "*") || !strcmp(want, have);
}

static int rerun_select(void *user, const char *stem, const char *cname, const char *backend,
                        const char *mode) {
    const rerun_set *rs = user;
    for (int i = 0; i < rs->n; i++) {
        const rerun_key *k = &rs->k[i];
        if (!strcmp(k->stem, stem) && rerun_field(k->case_name, cname) &&
            rerun_field(k->backend, backend) && rerun_field(k->mode, mode))
            return 1;
    }
    return 0;
}

/* Read the FAIL / ERROR rows of an earlier `--json` report. Its schema_version must be this
 * tool's (QC_REPORT_JSON_SCHEMA_VERSION); its tool_version may differ. A check that compares
 * two runs brings the other run along: static_eq_dynamic (mode dynamic) also reruns static,
 * opt_eq_ref (backend optimized) also reruns the reference backend in that mode. */
static qc_status rerun_load(const char *path, rerun_set *rs, qc_err *err) {
    memset(rs, 0, sizeof *rs);
    char *text = NULL;
    size_t len = 0;
    qc_status s = qc_cli_read_file(path, &text, &len, err);
    if (s) return qc_err_prefix(err, s, "--rerun-failed");
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return qc_errf(err, QC_ERR_FORMAT, "--rerun-failed: %s: not a JSON object", path);
    }
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(root, "schema_version");
    const cJSON *checks = cJSON_GetObjectItemCaseSensitive(root, "checks");
    const cJSON *tv = cJSON_GetObjectItemCaseSensitive(root, "tool_version");
    if (cJSON_IsString(tv)) snprintf(rs->tool_version, sizeof rs->tool_version, "%s", tv->valuestring);
    s = QC_OK;
    if (!cJSON_IsNumber(sv) || sv->valuedouble != (double)QC_REPORT_JSON_SCHEMA_VERSION) {
        char have[64] = "none";
        if (cJSON_IsNumber(sv)) snprintf(have, sizeof have, "%g", sv->valuedouble);
        s = qc_errf(err, QC_ERR_FORMAT, "--rerun-failed: %s: schema_version %s; this qwen-conform "
                    "reads check reports of schema_version %d", path, have,
                    QC_REPORT_JSON_SCHEMA_VERSION);
    } else if (!cJSON_IsArray(checks)) {
        s = qc_errf(err, QC_ERR_FORMAT, "--rerun-failed: %s: not a qwen-conform check report (no "
                    "\"checks\" array)", path);
    }
    int idx = 0;
    const cJSON *c;
    const cJSON *list = s ? NULL : checks;
    cJSON_ArrayForEach(c, list) {
        const char *f[5] = {"stem", "case", "backend", "mode", "verdict"};
        const char *v[5];
        for (int i = 0; i < 5 && !s; i++) {
            const cJSON *it = cJSON_GetObjectItemCaseSensitive(c, f[i]);
            if (!cJSON_IsString(it))
                s = qc_errf(err, QC_ERR_FORMAT, "--rerun-failed: %s: checks[%d].%s: missing or "
                            "not a string", path, idx, f[i]);
            else
                v[i] = it->valuestring;
        }
        if (s) break;
        idx++;
        if (strcmp(v[4], "FAIL") && strcmp(v[4], "ERROR")) continue;
        rs->n_rows++;
        const cJSON *ck = cJSON_GetObjectItemCaseSensitive(c, "check");
        const char *check = cJSON_IsString(ck) ? ck->valuestring : "";
        int bad = rerun_add(rs, v[0], v[1], v[2], v[3]);
        if (!bad && !strcmp(check, "static_eq_dynamic")) bad = rerun_add(rs, v[0], v[1], v[2], "static");
        if (!bad && !strcmp(check, "opt_eq_ref")) bad = rerun_add(rs, v[0], v[1], "reference", v[3]);
        if (bad) s = qc_errf(err, QC_ERR_OOM, "--rerun-failed: out of memory");
    }
    cJSON_Delete(root);
    if (s) {
        free(rs->k);
        memset(rs, 0, sizeof *rs);
    }
    return s;
}

/* ===================================================================================== */
/* policy overrides that can never match a case x tensor of the run                      */
/* ===================================================================================== */

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* The tensor subjects the engine looks tolerances up for, on a golden of this config. */
static int override_matches_golden(const qc_policy *pol, int i, const qc_golden *g,
                                   const char *stem) {
    static const char *const fixed[] = {"prefill/logits", "decode/logits", "prefill/hidden",
                                        "decode/hidden"};
    static const qc_tclass fixed_cls[] = {QC_TC_LOGITS, QC_TC_LOGITS, QC_TC_HIDDEN, QC_TC_HIDDEN};
    for (int ci = 0; ci < g->n_cases; ci++) {
        char case_id[256];
        snprintf(case_id, sizeof case_id, "%s/%s", stem, g->cases[ci].name);
        for (int t = 0; t < 4; t++)
            if (qc_policy_override_matches(pol, i, case_id, fixed[t], fixed_cls[t])) return 1;
        for (int w = 0; w < 2; w++)
            for (int l = 0; l < g->cfg.n_layers; l++)
                for (int k = QC_TC_K_CACHE; k <= QC_TC_RECURRENT_STATE; k++) {
                    int full = k == QC_TC_K_CACHE || k == QC_TC_V_CACHE;
                    if ((g->cfg.layer_types[l] == QC_LAYER_FULL) != full) continue;
                    char path[96];
                    snprintf(path, sizeof path, "%s/state/layer_%02d/%s", w ? "decode" : "prefill",
                             l, qc_tclass_str((qc_tclass)k));
                    if (qc_policy_override_matches(pol, i, case_id, path, (qc_tclass)k)) return 1;
                }
    }
    return 0;
}

/* The goldens of a scope: every *.h5 under root, stems relative to root (as the run names
 * them). Marks matched[i] for every override that some case x tensor matches; appends the
 * stems to stems. Returns the goldens opened. */
static int scope_scan(const qc_policy *pol, const char *root, unsigned char *matched,
                      char *stems, size_t stems_len) {
    char **paths = NULL;
    int n = 0, opened = 0;
    qc_err err;
    qc_err_clear(&err);
    if (qc_golden_find(root, &paths, &n, &err) != QC_OK) return 0;
    for (int f = 0; f < n; f++) {
        qc_golden *g = NULL;
        if (qc_golden_open_lazy(paths[f], &g, &err) != QC_OK) continue;
        opened++;
        char stem[128];
        ck_make_stem(paths[f], root, stem, sizeof stem);
        size_t k = strlen(stems);
        if (k + strlen(stem) + 3 < stems_len && !strstr(stems, stem))
            snprintf(stems + k, stems_len - k, "%s%s", k ? ", " : "", stem);
        for (int i = 0; i < qc_policy_n_overrides(pol); i++)
            if (!matched[i]) matched[i] = (unsigned char)override_matches_golden(pol, i, g, stem);
        qc_golden_free(g);
    }
    qc_golden_paths_free(paths, n);
    return opened;
}

/* 1 when dir (a real path) is a strict ancestor of path (a real path). */
static int is_ancestor(const char *dir, const char *path) {
    size_t L = strlen(dir);
    if (L == 1 && dir[0] == '/') return path[0] == '/' && path[1] != 0;
    return strncmp(dir, path, L) == 0 && path[L] == '/';
}

/* Warn (res) about every override whose case and tensor selectors match no case x tensor of
 * the goldens in scope: those under golden_root, and when the policy file's directory holds
 * golden_root (a policy shared by sibling goldens, as fixtures/tolerances.json is), every
 * golden under that directory too. The goldens are read in a child process: a corrupt one
 * (which can crash libhdf5) leaves the warnings out, the run reports the file itself. */
static void policy_scope_warnings(const qc_policy *pol, const char *golden_root,
                                  qc_results *res) {
    int n_ov = qc_policy_n_overrides(pol);
    if (n_ov <= 0 || !golden_root) return;
    char scope2[PATH_MAX] = "";
    const char *src = qc_policy_source(pol);
    if (strcmp(src, "built-in") != 0) {
        char d[PATH_MAX], rd[PATH_MAX], rg[PATH_MAX];
        qc_cli_dirname(src, d, sizeof d);
        if (realpath(d, rd) && realpath(golden_root, rg) && is_ancestor(rd, rg))
            snprintf(scope2, sizeof scope2, "%s", d);
    }
    unsigned char *matched = calloc((size_t)n_ov, 1);
    if (!matched) return;
    int pfd[2];
    if (pipe(pfd) != 0) {
        free(matched);
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        free(matched);
        return;
    }
    if (pid == 0) {
        close(pfd[0]);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        int dn = open("/dev/null", O_WRONLY);
        if (dn >= 0) dup2(dn, 2); /* the golden finder's notes were printed by the run */
        static char stems[4096];
        int opened = scope_scan(pol, golden_root, matched, stems, sizeof stems);
        if (scope2[0]) opened += scope_scan(pol, scope2, matched, stems, sizeof stems);
        int32_t hdr[2] = {opened, (int32_t)strlen(stems)};
        int bad = write_all(pfd[1], hdr, sizeof hdr) || write_all(pfd[1], matched, (size_t)n_ov) ||
                  write_all(pfd[1], stems, (size_t)hdr[1]);
        free(matched);
        _exit(bad ? 1 : 0);
    }
    close(pfd[1]);
    static char stems[4096];
    int32_t hdr[2] = {0, 0};
    size_t want = sizeof hdr, got = 0;
    char *buf = (char *)hdr;
    int ok = 1;
    for (int part = 0; part < 3 && ok; part++) {
        if (part == 1) buf = (char *)matched, want = (size_t)n_ov, got = 0;
        if (part == 2) {
            if (hdr[1] < 0 || hdr[1] >= (int32_t)sizeof stems) { ok = 0; break; }
            buf = stems, want = (size_t)hdr[1], got = 0;
        }
        while (got < want) {
            ssize_t k = read(pfd[0], buf + got, want - got);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) { ok = 0; break; }
            got += (size_t)k;
        }
    }
    close(pfd[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (ok && WIFEXITED(st) && WEXITSTATUS(st) == 0 && hdr[0] > 0) {
        stems[hdr[1]] = 0;
        for (int i = 0; i < n_ov; i++) {
            if (matched[i]) continue;
            char d[700];
            qc_policy_override_describe(pol, i, d, sizeof d);
            qc_results_warn(res, "policy %s: %s can never match: no case x tensor of the %d "
                            "golden file%s in scope (%s%s%s) matches its case / tensor selectors "
                            "(a typo?)", src, d, hdr[0], hdr[0] == 1 ? "" : "s", stems,
                            scope2[0] ? "; scope widened to the policy's directory " : "",
                            scope2);
        }
    }
    free(matched);
}

static void opts_free(qc_check_opts *o) {
    if (o->has_filter) regfree(&o->filter);
    o->has_filter = 0;
}

/* --model DIR: a directory with a config.json (checked before any work). */
static qc_status check_model_dir(const qc_check_opts *o, qc_err *err) {
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
static int write_reports(const char *prog, const qc_check_opts *o, qc_results *res, int rc) {
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

int qc_cmd_check(int argc, char **argv) {
    const char *prog = "qwen-conform check";
    qc_check_opts o;
    opts_init(&o);
    check_cli x;
    check_cli_init(&x);
    int rc = parse_common(argc, argv, prog, &o, NULL, NULL, NULL, NULL, &x);
    if (rc >= 0) {
        if (rc == QC_EXIT_PASS) fputs(qc_outpath_help, stdout); /* after --help */
        opts_free(&o);
        return rc;
    }
    qc_err err;
    qc_err_clear(&err);
    qc_policy *pol = NULL;
    rerun_set rs;
    memset(&rs, 0, sizeof rs);
    /* usage errors before any work: the runtime under test, the policy, --model, the report
     * to rerun */
    if ((o.backends & QC_BACKEND_EXT) && qc_registry_preflight(&o.ext, &err)) goto fail;
    if (load_policy(&o, &pol, &err) || apply_tol_flags(&x, pol, &err)) goto fail;
    if (check_model_dir(&o, &err)) goto fail;
    if (x.rerun) {
        if (rerun_load(x.rerun, &rs, &err)) goto fail;
        if (rs.n == 0) {
            fprintf(stderr, "%s: --rerun-failed %s: no check FAILED or ERRORED in that report: "
                    "nothing to rerun (exit %d)\n", prog, x.rerun, QC_EXIT_NOTHING);
            qc_policy_free(pol);
            opts_free(&o);
            return QC_EXIT_NOTHING;
        }
        o.select = rerun_select;
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
        policy_scope_warnings(pol, o.golden, &res);
        qc_report_console_warnings(stderr, &res, "qwen-conform");
    }
    rc = qc_check_run(&o, pol, &res);
    if (!o.list) {
        res.exit_code = rc;
        res.stopped_early = o.stopped;
        res.maxfail = o.maxfail;
        if (rc == QC_EXIT_NOTHING && x.rerun)
            fprintf(stderr, "qwen-conform: --rerun-failed %s: none of its combinations is among "
                    "the goldens of this run (--golden %s)\n", x.rerun, o.golden);
        if (res.n > 0) qc_report_console_failures(stdout, &res);
        if (x.durations >= 0) qc_report_console_durations(stdout, &res, x.durations);
        if (res.n > 0 || rc != QC_EXIT_NOTHING) qc_report_console_summary(stdout, &res);
        rc = write_reports(prog, &o, &res, qc_results_exit_code(&res));
    }
    qc_results_free(&res);
    free(rs.k);
    qc_policy_free(pol);
    opts_free(&o);
    return rc;
fail:
    free(rs.k);
    qc_policy_free(pol);
    opts_free(&o);
    return qc_cli_fail(prog, &err);
}

/* ===================================================================================== */
/* command line: qwen-conform policy --print                                             */
/* ===================================================================================== */

static const char policy_usage[] =
    "usage: qwen-conform policy --print [--policy F.json] [--golden DIR|FILE]\n"
    "                                   [--atol CLASS=V] [--rtol CLASS=V]\n"
    "  Prints the effective tolerance policy as JSON (loadable again with --policy): the file\n"
    "  merged over the built-in defaults, with --atol / --rtol applied, every class default in\n"
    "  full, the effective tie_margin, the backend sections and the overrides.\n"
    "  --policy F.json  the policy file (default: the one check would use for --golden:\n"
    "                   tolerances.json beside the goldens, DIR/ or its parent; else built-in)\n"
    "  --golden DIR     where check would look for tolerances.json; also warns (stderr) about\n"
    "                   overrides that can never match a case x tensor of those goldens\n"
    "  --atol / --rtol CLASS=V   as for check\n"
    "exit: 0 printed, 2 usage / I/O / format error\n";

int qc_cmd_policy(int argc, char **argv) {
    const char *prog = "qwen-conform policy";
    qc_check_opts o;
    opts_init(&o);
    check_cli x;
    check_cli_init(&x);
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
            if (!(st = qc_argp_value(&a, &v, &err))) st = parse_tol_flag(a.flag, v, &x, &err);
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
        st = load_policy(&o, &pol, &err);
    else if (o.policy_path)
        st = qc_policy_load(o.policy_path, &pol, &err);
    else
        st = qc_policy_builtin(&pol, &err);
    if (!st) st = apply_tol_flags(&x, pol, &err);
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
        policy_scope_warnings(pol, o.golden, &res);
        qc_report_console_warnings(stderr, &res, "qwen-conform");
        qc_results_free(&res);
    }
    qc_policy_free(pol);
    return QC_EXIT_PASS;
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
    "  --json F  --junit F  --quiet  --atol / --rtol CLASS=V  --durations N   as for check\n"
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
    check_cli x;
    check_cli_init(&x);
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
            if (!(st = qc_argp_value(&a, &v, &err))) st = parse_tol_flag(a.flag, v, &x, &err);
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
    if (load_policy(&o, &pol, &err) || apply_tol_flags(&x, pol, &err)) {
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
    policy_scope_warnings(pol, files[0], &res);
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
    rc = write_reports(prog, &o, &res, qc_results_exit_code(&res));
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
    int rc = parse_common(argc, argv, prog, &o, &runs, &out, &factor, &policy_out, NULL);
    if (rc >= 0) {
        if (rc == QC_EXIT_PASS) fputs(qc_outpath_help, stdout); /* after --help */
        opts_free(&o);
        return rc;
    }
    qc_err err;
    qc_err_clear(&err);
    /* before any work: both outputs valid, neither an input (a golden, a golden's model file)
     * nor the other output (qc_outpath) */
    if (check_model_dir(&o, &err)) {
        opts_free(&o);
        return qc_cli_fail(prog, &err);
    }
    qc_outpath_reset();
    qc_outpath_add_goldens(o.golden, 1);
    if (o.model_dir) qc_outpath_add_model_dir(o.model_dir, "--model");
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

