/* qc_check_scope.c — --rerun-failed and the warnings for policy overrides that can never
 * match a case x tensor of the run. */

#include "qc_check_cli.h"
#include "qc/qc_file.h"

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
/* --rerun-failed: the (stem, case, backend, mode) combinations a JSON report failed      */
/* ===================================================================================== */

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

/* 1 when check compares a built-in with the reference built-in (qc_builtin_info.vs_reference:
 * the reference's run of that combination is rerun too). */
static int is_vs_reference(const char *check) {
    for (int i = 0; i < qc_registry_n_builtins(); i++) {
        const char *v = qc_registry_builtin(i)->vs_reference;
        if (v && !strcmp(v, check)) return 1;
    }
    return 0;
}

/* The reference built-in's name ("-": none, which matches no run). */
static const char *ref_name(void) {
    const qc_builtin_info *r = qc_registry_reference();
    return r ? r->name : "-";
}

static int rerun_field(const char *want, const char *have) {
    return !strcmp(want, "*") || !strcmp(want, have);
}

int ckcli_rerun_select(void *user, const char *stem, const char *cname, const char *backend,
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
qc_status ckcli_rerun_load(const char *path, rerun_set *rs, qc_err *err) {
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
        if (!bad && is_vs_reference(check)) bad = rerun_add(rs, v[0], v[1], ref_name(), v[3]);
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
void ckcli_policy_scope_warnings(const qc_policy *pol, const char *golden_root,
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
        int bad = qc_fd_write_all(pfd[1], hdr, sizeof hdr) || qc_fd_write_all(pfd[1], matched, (size_t)n_ov) ||
                  qc_fd_write_all(pfd[1], stems, (size_t)hdr[1]);
        free(matched);
        _exit(bad ? 1 : 0);
    }
    close(pfd[1]);
    static char stems[4096];
    int32_t hdr[2] = {0, 0};
    int ok = qc_fd_read_all(pfd[0], hdr, sizeof hdr) == 1 &&
             qc_fd_read_all(pfd[0], matched, (size_t)n_ov) == 1 && hdr[1] >= 0 &&
             hdr[1] < (int32_t)sizeof stems && qc_fd_read_all(pfd[0], stems, (size_t)hdr[1]) == 1;
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
