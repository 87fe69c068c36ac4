/* qc_cmd_export_inputs.c — `qwen-conform export-inputs GOLDEN.h5|DIR --out DIR [--force]`:
 * every case's inputs as JSON a runtime can read without HDF5 (format: docs/export-inputs.md).
 *
 *   OUT/index.json                         every golden, its model, its cases (and their files)
 *   OUT/SUB/index.json                     (DIR input) the same for one golden, files from SUB
 *   OUT/[SUB/]cases/NAME.json              one case: history, prompt, start position, the
 *                                          teacher-forced decode tokens, the prefill profile
 *                                          and its chunks, the model and its hashes
 * SUB is the golden's path under DIR without ".h5" (e.g. tiny-f32-tied-flat/golden); none for
 * a single file. Exit 0 written; 2 on a usage / I/O / format error (the message names the file
 * and the dataset) — nothing is written then.
 *
 * Output safety (harness/io/qc_outpath.h): --out may not be a golden's directory or inside one,
 * no file written may be an input (a golden, a model file); an existing non-empty --out is
 * refused without --force. Everything is built in memory first; a new --out (or an empty
 * one) is then filled as a temp directory beside it and renamed into place, with --force the
 * files are replaced one by one, each atomically. No temp file or directory is left behind.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "qc_cli.h"
#include "qc_cli_common.h"
#include "qc_golden.h"
#include "qc_outpath.h"

#ifndef QC_VERSION
#define QC_VERSION "0.0.0"
#endif

static const char *PROG = "qwen-conform export-inputs";

#define EXPORT_FORMAT_VERSION 1

/* ===================================================================================== */
/* command line                                                                          */
/* ===================================================================================== */

typedef struct {
    const char *input;  /* GOLDEN.h5 or DIR */
    const char *out;    /* --out DIR */
    int force;          /* --force: an existing non-empty --out is written into */
} export_args;

static void export_usage(FILE *f) {
    fprintf(f,
            "usage: qwen-conform export-inputs GOLDEN.h5|DIR --out DIR [--force]\n"
            "Writes every case's inputs as JSON (no HDF5 needed to read them):\n"
            "  OUT/index.json            the goldens, their models (path, sha256), their cases\n"
            "  OUT/SUB/index.json        (DIR input) the same for the golden SUB alone\n"
            "  OUT/[SUB/]cases/NAME.json one case: history_tokens, start_pos, tokens,\n"
            "                            decode_tokens (teacher-forced), the prefill profile and\n"
            "                            its chunks, the model and its hashes\n"
            "SUB is a golden's path under DIR without .h5 (none for a single file): write the\n"
            "ACTUAL of OUT/SUB/ as ACTUAL_DIR/SUB.h5 and run `qwen-conform diff`.\n"
            "Format: docs/export-inputs.md.\n"
            "  --force    write into an existing non-empty --out (files of the same name are\n"
            "             replaced; others are left alone)\n%s", qc_outpath_help);
}

static qc_status parse_args(int argc, char **argv, export_args *a, int *help, qc_err *err) {
    memset(a, 0, sizeof *a);
    qc_status st = QC_OK;
    for (int i = 1; i < argc && st == QC_OK; i++) {
        if (argv[i][0] != '-' || !strcmp(argv[i], "-")) {
            if (a->input)
                return qc_errf(err, QC_ERR_ARG, "%s: one input only (a golden .h5 or a "
                               "directory; %s given first)", argv[i], a->input);
            a->input = argv[i];
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            *help = 1;
            return QC_OK;
        } else if (!strcmp(argv[i], "--force")) {
            a->force = 1;
        } else if (!strcmp(argv[i], "--out")) {
            if (i + 1 >= argc) return qc_errf(err, QC_ERR_ARG, "--out: needs a value (DIR)");
            a->out = argv[++i];
        } else if (!strncmp(argv[i], "--out=", 6)) {
            a->out = argv[i] + 6;
        } else {
            return qc_errf(err, QC_ERR_ARG, "%s: unknown option (run '%s --help')", argv[i],
                           PROG);
        }
    }
    if (!a->input) return qc_errf(err, QC_ERR_ARG, "GOLDEN.h5|DIR: required (what to export)");
    if (!a->out || !a->out[0])
        return qc_errf(err, QC_ERR_ARG, "--out: required (the directory to write)");
    return st;
}

/* ===================================================================================== */
/* the files, in memory                                                                  */
/* ===================================================================================== */

typedef struct {
    char rel[4096];   /* path under --out */
    char *text;       /* owned JSON text */
} out_file;

typedef struct {
    out_file *f;
    int n, cap;
} out_list;

static qc_status list_add(out_list *l, const char *rel, cJSON *j, qc_err *err) {
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text || (l->n == l->cap && !(l->f = realloc(l->f, (size_t)(l->cap = l->cap * 2 + 8) *
                                                              sizeof *l->f)))) {
        free(text);
        return qc_errf(err, QC_ERR_OOM, "%s: out of memory", rel);
    }
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->f[i].rel, rel)) {
            free(text);
            return qc_errf(err, QC_ERR_ARG, "%s: two outputs would have this name", rel);
        }
    snprintf(l->f[l->n].rel, sizeof l->f[l->n].rel, "%s", rel);
    l->f[l->n++].text = text;
    return QC_OK;
}

static void list_free(out_list *l) {
    for (int i = 0; i < l->n; i++) free(l->f[i].text);
    free(l->f);
}

/* A list of the lengths n is prefilled in: chunks of msl (the dynamic strategy). */
static cJSON *chunks(int n, int msl) {
    cJSON *a = cJSON_CreateArray();
    for (int done = 0; a && done < n; done += msl)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(n - done < msl ? n - done : msl));
    return a;
}

static cJSON *ids(const int32_t *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static cJSON *shape(int n, const int *d) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(d[i]));
    return a;
}

/* The model a golden names: where it is, how to recognise it. */
static cJSON *model_json(const qc_golden *g) {
    cJSON *m = cJSON_CreateObject();
    char abs[PATH_MAX];
    cJSON_AddStringToObject(m, "dir", realpath(g->model_dir, abs) ? abs : g->model_dir);
    cJSON_AddStringToObject(m, "model_path", g->model_path);
    cJSON_AddStringToObject(m, "config_sha256", g->config_sha256);
    cJSON_AddStringToObject(m, "weights_sha256", g->weights_sha256);
    return m;
}

/* The prefill profile the case is run with (as `check` runs its dynamic mode). */
static cJSON *prefill_json(const qc_golden_case *gc) {
    int msl = gc->max_seq_len > 0 ? gc->max_seq_len : 128;
    int need = gc->start_pos + gc->n_tokens + gc->n_decode;
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "mode", "dynamic");
    cJSON_AddBoolToObject(p, "enable_dynamic_shape", 1);
    cJSON_AddBoolToObject(p, "use_kv_cache", 1);
    cJSON_AddNumberToObject(p, "max_seq_len", msl);
    cJSON_AddNumberToObject(p, "max_context_len", need > msl ? need : msl);
    cJSON_AddItemToObject(p, "history_chunks", chunks(gc->start_pos, msl));
    cJSON_AddItemToObject(p, "prompt_chunks", chunks(gc->n_tokens, msl));
    return p;
}

/* The ACTUAL datasets this case asks for, with their shapes. */
static cJSON *outputs_json(const qc_golden *g, const qc_golden_case *gc) {
    const qc_config *c = &g->cfg;
    char grp[128];
    snprintf(grp, sizeof grp, "cases/%s", gc->name);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "group", grp);
    int pl[2] = {gc->n_tokens, c->vocab_size}, hd[3] = {c->n_layers + 1, gc->n_tokens,
                                                        c->hidden_size};
    cJSON_AddItemToObject(o, "prefill/logits", shape(2, pl));
    cJSON_AddItemToObject(o, "prefill/hidden", shape(3, hd));
    if (gc->n_decode > 0) {
        int dl[2] = {gc->n_decode, c->vocab_size};
        cJSON_AddItemToObject(o, "decode/logits", shape(2, dl));
    }
    return o;
}

/* One case's JSON. The case is loaded (tokens in memory). */
static cJSON *case_json(const qc_golden *g, const qc_golden_case *gc, const char *rel) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "qwen-conform-inputs/case");
    cJSON_AddNumberToObject(j, "format_version", EXPORT_FORMAT_VERSION);
    cJSON_AddStringToObject(j, "golden", rel);
    char abs[PATH_MAX];
    cJSON_AddStringToObject(j, "golden_file", realpath(g->path, abs) ? abs : g->path);
    cJSON_AddStringToObject(j, "case", gc->name);
    cJSON_AddStringToObject(j, "description", gc->description);
    cJSON_AddItemToObject(j, "model", model_json(g));
    cJSON_AddNumberToObject(j, "start_pos", gc->start_pos);
    cJSON_AddItemToObject(j, "history_tokens", ids(gc->history, gc->n_history));
    cJSON_AddItemToObject(j, "tokens", ids(gc->tokens, gc->n_tokens));
    cJSON_AddItemToObject(j, "decode_tokens", ids(gc->decode_tokens, gc->n_decode));
    if (gc->max_seq_len > 0) cJSON_AddNumberToObject(j, "max_seq_len", gc->max_seq_len);
    else cJSON_AddNullToObject(j, "max_seq_len");
    cJSON_AddItemToObject(j, "prefill", prefill_json(gc));
    cJSON_AddItemToObject(j, "outputs", outputs_json(g, gc));
    return j;
}

/* An index.json object around a goldens array (taken). */
static cJSON *index_json(cJSON *goldens) {
    cJSON *index = cJSON_CreateObject();
    cJSON_AddStringToObject(index, "format", "qwen-conform-inputs");
    cJSON_AddNumberToObject(index, "format_version", EXPORT_FORMAT_VERSION);
    cJSON_AddStringToObject(index, "generator", "qwen-conform export-inputs " QC_VERSION);
    cJSON_AddItemToObject(index, "goldens", goldens);
    return index;
}

/* The golden's path under the input directory ("golden.h5" for a single file). */
static void golden_rel(const char *input, const char *path, int is_dir, char *rel, size_t n) {
    size_t k = strlen(input);
    while (k > 1 && input[k - 1] == '/') k--;
    if (is_dir && !strncmp(path, input, k) && path[k] == '/') {
        const char *r = path + k;
        while (*r == '/') r++;
        snprintf(rel, n, "%s", r);
    } else {
        const char *b = strrchr(path, '/');
        snprintf(rel, n, "%s", b ? b + 1 : path);
    }
}

/* Every case of one golden into l; its index entry into goldens. */
static qc_status export_golden(const char *path, const char *rel, int is_dir, out_list *l,
                               cJSON *goldens, int *n_cases, qc_err *err) {
    qc_golden *g = NULL;
    qc_status st = qc_golden_open_lazy(path, &g, err);
    if (st) return st;
    char sub[4096] = "";
    if (is_dir) {
        snprintf(sub, sizeof sub, "%s", rel);
        size_t k = strlen(sub);
        if (k > 3 && !strcmp(sub + k - 3, ".h5")) sub[k - 3] = '\0';
        strncat(sub, "/", sizeof sub - strlen(sub) - 1);
    }
    cJSON *e = cJSON_CreateObject(), *cases = cJSON_CreateArray();
    char abs[PATH_MAX];
    cJSON_AddStringToObject(e, "golden", rel);
    cJSON_AddStringToObject(e, "golden_file", realpath(path, abs) ? abs : path);
    cJSON_AddStringToObject(e, "generator", g->generator);
    cJSON_AddItemToObject(e, "model", model_json(g));
    cJSON_AddStringToObject(e, "config_json", g->config_json);
    cJSON_AddNumberToObject(e, "schema_version", g->schema_version);
    cJSON *cfg = cJSON_Parse(g->config_json);
    cJSON_AddItemToObject(e, "config", cfg ? cfg : cJSON_CreateNull());
    cJSON_AddItemToObject(e, "cases", cases);
    cJSON_AddItemToArray(goldens, e);
    for (int i = 0; i < g->n_cases && !st; i++) {
        if ((st = qc_golden_load_case(g, i, err))) break;
        const qc_golden_case *gc = &g->cases[i];
        char file[4096 + 128];
        snprintf(file, sizeof file, "%scases/%s.json", sub, gc->name);
        cJSON *ce = cJSON_CreateObject();
        cJSON_AddStringToObject(ce, "name", gc->name);
        cJSON_AddStringToObject(ce, "file", file);
        cJSON_AddNumberToObject(ce, "start_pos", gc->start_pos);
        cJSON_AddNumberToObject(ce, "n_tokens", gc->n_tokens);
        cJSON_AddNumberToObject(ce, "n_decode", gc->n_decode);
        cJSON_AddItemToArray(cases, ce);
        st = list_add(l, file, case_json(g, gc, rel), err);
        qc_golden_unload_case(g, i);
        (*n_cases)++;
    }
    qc_golden_free(g);
    if (st || !is_dir) return st;
    /* SUB/index.json: this golden alone, its case files relative to SUB */
    cJSON *one = cJSON_CreateArray(), *ec = cJSON_Duplicate(e, 1);
    cJSON *ce = NULL;
    cJSON_ArrayForEach(ce, cJSON_GetObjectItem(ec, "cases")) {
        char file[256];
        snprintf(file, sizeof file, "cases/%s.json", cJSON_GetObjectItem(ce, "name")->valuestring);
        cJSON_ReplaceItemInObject(ce, "file", cJSON_CreateString(file));
    }
    cJSON_AddItemToArray(one, ec);
    char idx[4096 + 16];
    snprintf(idx, sizeof idx, "%sindex.json", sub);
    return list_add(l, idx, index_json(one), err);
}

/* ===================================================================================== */
/* writing                                                                               */
/* ===================================================================================== */

/* mkdir -p of the directories of rel under root. */
static qc_status make_parents(const char *root, const char *rel, qc_err *err) {
    char p[8192];
    int n = snprintf(p, sizeof p, "%s/%s", root, rel);
    if (n < 0 || (size_t)n >= sizeof p) return qc_errf(err, QC_ERR_ARG, "%s/%s: path too long", root, rel);
    for (char *s = p + strlen(root) + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return qc_errf(err, QC_ERR_IO, "%s: cannot create directory: %s", p, strerror(errno));
        *s = '/';
    }
    return QC_OK;
}

/* Every file of l under root (each atomically). Returns QC_ERR_IO "interrupted" when a
 * deferred signal arrived (the caller cleans up, re-raises). */
static qc_status write_all(const char *root, const out_list *l, qc_err *err) {
    for (int i = 0; i < l->n; i++) {
        if (qc_outpath_signal_pending())
            return qc_errf(err, QC_ERR_IO, "%s: interrupted by signal %d", root,
                           qc_outpath_signal_pending());
        char p[8192];
        qc_status st = make_parents(root, l->f[i].rel, err);
        if (st) return st;
        snprintf(p, sizeof p, "%s/%s", root, l->f[i].rel);
        if ((st = qc_out_write_file(p, l->f[i].text, strlen(l->f[i].text), QC_OUT_REGULAR, err))) return st;
    }
    return QC_OK;
}

/* rm -r of a directory this run created (only what is in it: our files and directories). */
static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[8192];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            struct stat sb;
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(p);
            else unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* 1 when dir exists and has an entry; *exists set. -1 when it exists but is not a directory. */
static int dir_state(const char *dir, int *exists) {
    struct stat sb;
    *exists = stat(dir, &sb) == 0;
    if (!*exists) return 0;
    if (!S_ISDIR(sb.st_mode)) return -1;
    DIR *d = opendir(dir);
    int full = 0;
    struct dirent *e;
    while (d && !full && (e = readdir(d))) full = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return full;
}

/* Write l to out: a new (or empty) directory appears complete (temp directory + rename);
 * with force into a non-empty one, file by file. */
static qc_status write_out(const char *out, int force, const out_list *l, qc_err *err) {
    int exists = 0, full = dir_state(out, &exists);
    if (full < 0) return qc_errf(err, QC_ERR_ARG, "--out: %s: exists and is not a directory", out);
    if (full && !force)
        return qc_errf(err, QC_ERR_ARG,
                       "--out: %s: exists and is not empty (--force writes into it, replacing "
                       "files of the same name)", out);
    if (full) return write_all(out, l, err);
    char tmp[4096];
    size_t k = strlen(out);
    while (k > 1 && out[k - 1] == '/') k--;
    if (snprintf(tmp, sizeof tmp, "%.*s.tmp.%ld", (int)k, out, (long)getpid()) >= (int)sizeof tmp)
        return qc_errf(err, QC_ERR_ARG, "--out: %s: path too long", out);
    if (mkdir(tmp, 0777) != 0)
        return qc_errf(err, QC_ERR_IO, "--out: %s: cannot create directory: %s", tmp,
                       strerror(errno));
    qc_outpath_defer_signals(1); /* a handler cannot remove a tree: poll, clean, re-raise */
    qc_status st = write_all(tmp, l, err);
    if (!st && !qc_outpath_signal_pending() && rename(tmp, out) != 0)
        st = qc_errf(err, QC_ERR_IO, "--out: %s: cannot rename %s into place: %s", out, tmp,
                     strerror(errno));
    int sig = qc_outpath_signal_pending();
    if (st || sig) remove_tree(tmp);
    qc_outpath_defer_signals(0);
    if (sig) qc_outpath_reraise(sig);
    return st;
}

/* ===================================================================================== */
/* entry                                                                                 */
/* ===================================================================================== */

static qc_status export_run(const export_args *a, qc_err *err) {
    struct stat sb;
    if (stat(a->input, &sb) != 0)
        return qc_errf(err, QC_ERR_IO, "%s: %s", a->input, strerror(errno));
    int is_dir = S_ISDIR(sb.st_mode);
    qc_outpath_reset();
    qc_outpath_add_goldens(a->input, 1);
    qc_outpath_add_input(a->input, "input");
    qc_outpath_add_dump_dir(a->out, "--out");
    qc_status st = qc_outpath_verify(err);
    if (st) return st;
    char **paths = NULL;
    int n = 0;
    if ((st = qc_golden_find(a->input, &paths, &n, err))) return st;
    if (n == 0) {
        qc_golden_paths_free(paths, n);
        return qc_errf(err, QC_ERR_ARG, "%s: no golden (*.h5) to export", a->input);
    }
    out_list l = {0};
    cJSON *goldens = cJSON_CreateArray(), *index = index_json(goldens);
    int n_cases = 0;
    for (int i = 0; i < n && !st; i++) {
        char rel[4096];
        golden_rel(a->input, paths[i], is_dir, rel, sizeof rel);
        st = export_golden(paths[i], rel, is_dir, &l, goldens, &n_cases, err);
    }
    if (!st) st = list_add(&l, "index.json", index, err);
    else cJSON_Delete(index);
    if (!st) st = write_out(a->out, a->force, &l, err);
    if (!st)
        printf("%s: wrote %s: %d golden%s, %d case%s (index.json + one file per case)\n", PROG,
               a->out, n, n == 1 ? "" : "s", n_cases, n_cases == 1 ? "" : "s");
    list_free(&l);
    qc_golden_paths_free(paths, n);
    return st;
}

/* qwen-conform export-inputs ...: exit code (0 written, 2 usage / I/O / format error). */
int qc_cmd_export_inputs(int argc, char **argv) {
    qc_err err;
    qc_err_clear(&err);
    export_args a;
    int help = 0;
    qc_status st = parse_args(argc, argv, &a, &help, &err);
    if (help) {
        export_usage(stdout);
        return QC_EXIT_PASS;
    }
    if (!st) st = export_run(&a, &err);
    qc_outpath_reset();
    return st ? qc_cli_fail(PROG, &err) : QC_EXIT_PASS;
}
