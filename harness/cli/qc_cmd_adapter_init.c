/* qc_cmd_adapter_init.c — `qwen-conform adapter-init python|c DIR [--source SRC] [--build BLD]`:
 * writes a working adapter skeleton into DIR, from the templates embedded at build time
 * (adapters/templates/<kind>/, qc_adapter_templates.h):
 *
 *   python  DIR/adapter.py (an exec adapter on the helper package, wrapping the float32 golden
 *           model of adapters/golden/qc_golden_adapter.py) + DIR/README.md
 *   c       DIR/my_runtime.c (a runtime plugin delegating to the reference backend),
 *           DIR/CMakeLists.txt, DIR/Makefile, DIR/README.md
 *
 * Each runs green out of the box on the fixtures (verdict PARTIAL: the optional capabilities
 * are commented stubs). The placeholders @QC_SOURCE_DIR@ / @QC_BUILD_DIR@ become the absolute
 * paths of the qwen-conform source tree (where the skeleton finds the helper package, the golden
 * model, the headers) and build tree (the static libraries): by default the trees this binary
 * was built from, else --source / --build.
 *
 * User files are sacred: DIR must not exist or be empty; each file is written to a temp name in
 * DIR and linked to its final name (link(2) never replaces a file), the temp removed; on any
 * failure everything written by this run is removed (DIR too when this run created it).
 * Exit 0 written, 2 usage / I/O error (the message names the path; nothing is left behind).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qc_adapter_templates.h"
#include "qc_cli.h"
#include "qc_cli_common.h"

#ifndef QC_TREE_SOURCE_DIR
#define QC_TREE_SOURCE_DIR ""
#endif
#ifndef QC_TREE_BUILD_DIR
#define QC_TREE_BUILD_DIR ""
#endif

#define AI_MAX_FILES 16

static const char *PROG = "qwen-conform adapter-init";

/* The command line and what was written so far (for the cleanup on failure). */
typedef struct {
    const char *kind;                /* "python" | "c" */
    const char *dir;                 /* DIR */
    const char *source;              /* --source, or the build's source tree */
    const char *build;               /* --build, or the build's build tree */
    char src_abs[PATH_MAX];          /* source, absolute */
    char bld_abs[PATH_MAX];          /* build, absolute ("" when it does not exist) */
    int made_dir;                    /* 1: this run created DIR */
    char *written[AI_MAX_FILES];     /* final paths written (malloc'd) */
    int n_written;
} ai_args;

static void ai_usage(FILE *f) {
    fprintf(f,
            "usage: qwen-conform adapter-init python|c DIR [--source SRC] [--build BLD]\n"
            "Writes a working adapter skeleton into DIR (new, or an empty directory):\n"
            "  python  adapter.py, README.md: an exec adapter (adapters/python helper) wrapping\n"
            "          the float32 golden model; run it with\n"
            "          qwen-conform check --golden FIXTURE --backend exec:\"python3 DIR/adapter.py\"\n"
            "  c       my_runtime.c, CMakeLists.txt, Makefile, README.md: a runtime plugin on\n"
            "          the reference backend; build it (cmake or make), then\n"
            "          qwen-conform check --golden FIXTURE --backend plugin:DIR/build/libmy_runtime.so\n"
            "Both pass out of the box (verdict PARTIAL); every optional capability is a\n"
            "commented stub naming the checks it unlocks. Never overwrites a file.\n"
            "  --source SRC  the qwen-conform source tree the skeleton uses (the helper package,\n"
            "                the golden model, include/qc; default %s)\n"
            "  --build BLD   its build tree (libqc_reference.a, libqc_runtime.a; default %s)\n"
            "exit: 0 written, 2 usage / I/O error (nothing written)\n",
            QC_TREE_SOURCE_DIR[0] ? QC_TREE_SOURCE_DIR : "none: give --source",
            QC_TREE_BUILD_DIR[0] ? QC_TREE_BUILD_DIR : "none");
}

static qc_status ai_parse(int argc, char **argv, ai_args *a, int *help, qc_err *err) {
    qc_argp p;
    qc_argp_init(&p, PROG, argc, argv);
    qc_status st = QC_OK;
    a->source = QC_TREE_SOURCE_DIR, a->build = QC_TREE_BUILD_DIR;
    while (!st && qc_argp_next(&p)) {
        if (p.positional) {
            if (!a->kind) a->kind = p.arg;
            else if (!a->dir) a->dir = p.arg;
            else st = qc_errf(err, QC_ERR_ARG, "%s: unexpected argument '%s' (one kind, one "
                              "DIR)", PROG, p.arg);
        } else if (qc_argp_is(&p, "--help") || qc_argp_is(&p, "-h")) {
            *help = 1;
            return QC_OK;
        } else if (qc_argp_is(&p, "--source")) {
            st = qc_argp_value(&p, &a->source, err);
        } else if (qc_argp_is(&p, "--build")) {
            st = qc_argp_value(&p, &a->build, err);
        } else {
            st = qc_argp_unknown(&p, err);
        }
    }
    if (st) return st;
    if (!a->kind || !a->dir)
        return qc_errf(err, QC_ERR_ARG, "%s: need a kind (python or c) and a directory", PROG);
    if (strcmp(a->kind, "python") && strcmp(a->kind, "c"))
        return qc_errf(err, QC_ERR_ARG, "%s: unknown kind '%s' (python or c)", PROG, a->kind);
    return QC_OK;
}

/* 1 when SRC/rel exists. */
static int ai_has(const char *root, const char *rel) {
    char p[PATH_MAX + 128];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    return access(p, F_OK) == 0;
}

/* The trees: absolute, a source tree that has what the kind needs, paths the templates can
 * quote (no quote, backslash, dollar or white space). */
static qc_status ai_trees(ai_args *a, qc_err *err) {
    if (!a->source[0])
        return qc_errf(err, QC_ERR_ARG, "%s: --source SRC needed (this binary was built without "
                       "a source tree)", PROG);
    if (!realpath(a->source, a->src_abs))
        return qc_errf(err, QC_ERR_IO, "%s: --source %s: %s", PROG, a->source, strerror(errno));
    const char *need = !strcmp(a->kind, "c") ? "include/qc/qc_runtime_plugin.h"
                                             : "adapters/golden/qc_golden_adapter.py";
    if (!ai_has(a->src_abs, need) || !ai_has(a->src_abs, "adapters/python/qwen_conform_adapter"))
        return qc_errf(err, QC_ERR_ARG, "%s: --source %s is not a qwen-conform source tree (no "
                       "%s)", PROG, a->src_abs, need);
    if (!a->build[0] || !realpath(a->build, a->bld_abs)) a->bld_abs[0] = '\0';
    for (int t = 0; t < 2; t++) {
        const char *p = t ? a->bld_abs : a->src_abs;
        if (strpbrk(p, "\"\\$' \t\n#"))
            return qc_errf(err, QC_ERR_ARG, "%s: %s: a path with quotes, '$', '#' or white space "
                           "cannot go into the skeleton (move or link the tree)", PROG, p);
    }
    if (!strcmp(a->kind, "c") && (!a->bld_abs[0] || !ai_has(a->bld_abs, "libqc_reference.a")))
        fprintf(stderr, "%s: note: no libqc_reference.a in the build tree '%s': the skeleton's "
                "CMakeLists.txt then needs an installed qwen-conform (find_package)\n", PROG,
                a->bld_abs[0] ? a->bld_abs : a->build);
    return QC_OK;
}

/* DIR: created (parent must exist) or an existing empty directory; anything else refused. */
static qc_status ai_dir(ai_args *a, qc_err *err) {
    struct stat sb;
    if (stat(a->dir, &sb) != 0) {
        if (errno != ENOENT || mkdir(a->dir, 0777) != 0)
            return qc_errf(err, QC_ERR_IO, "%s: cannot create %s: %s%s", PROG, a->dir,
                           strerror(errno), errno == ENOENT ? " (its parent must exist)" : "");
        a->made_dir = 1;
        return QC_OK;
    }
    if (!S_ISDIR(sb.st_mode))
        return qc_errf(err, QC_ERR_IO, "%s: %s exists and is not a directory (adapter-init "
                       "never overwrites a file)", PROG, a->dir);
    DIR *d = opendir(a->dir);
    if (!d) return qc_errf(err, QC_ERR_IO, "%s: %s: %s", PROG, a->dir, strerror(errno));
    struct dirent *e;
    const char *other = NULL;
    while (!other && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) other = e->d_name;
    qc_status st = other ? qc_errf(err, QC_ERR_IO, "%s: %s exists and is not empty (it holds "
                                   "'%s'): adapter-init writes only into a new or empty "
                                   "directory", PROG, a->dir, other)
                         : QC_OK;
    closedir(d);
    return st;
}

/* Append data[0..n) to f, with @QC_SOURCE_DIR@ / @QC_BUILD_DIR@ replaced. 0 on success. */
static int ai_emit(FILE *f, const ai_args *a, const unsigned char *data, size_t n) {
    static const char *keys[2] = {"@QC_SOURCE_DIR@", "@QC_BUILD_DIR@"};
    const char *vals[2] = {a->src_abs, a->bld_abs[0] ? a->bld_abs : a->build};
    size_t i = 0;
    while (i < n) {
        int hit = -1;
        for (int k = 0; k < 2 && hit < 0; k++) {
            size_t kl = strlen(keys[k]);
            if (n - i >= kl && !memcmp(data + i, keys[k], kl)) hit = k;
        }
        if (hit >= 0) {
            if (fputs(vals[hit], f) == EOF) return -1;
            i += strlen(keys[hit]);
        } else if (fputc(data[i++], f) == EOF) {
            return -1;
        }
    }
    return 0;
}

/* One template to DIR/name: a temp file (mkstemp) linked to the final name (never replacing an
 * existing file), the temp removed either way. */
static qc_status ai_write(ai_args *a, const qc_adapter_template *t, qc_err *err) {
    char tmp[PATH_MAX], dst[PATH_MAX];
    if (snprintf(dst, sizeof dst, "%s/%s", a->dir, t->name) >= (int)sizeof dst ||
        snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", a->dir, t->name) >= (int)sizeof tmp)
        return qc_errf(err, QC_ERR_IO, "%s: %s/%s: path too long", PROG, a->dir, t->name);
    int fd = mkstemp(tmp);
    if (fd < 0) return qc_errf(err, QC_ERR_IO, "%s: %s: %s", PROG, tmp, strerror(errno));
    FILE *f = fdopen(fd, "w");
    const size_t nl = strlen(t->name);
    const int exec = nl > 3 && !strcmp(t->name + nl - 3, ".py");
    int bad = !f || ai_emit(f, a, t->data, t->len) != 0 || fflush(f) != 0 ||
              fchmod(fd, exec ? 0755 : 0644) != 0;
    int e = errno;
    if (f ? fclose(f) != 0 : close(fd) != 0) bad = 1, e = errno;
    if (!bad && link(tmp, dst) != 0) bad = 1, e = errno;
    unlink(tmp);
    if (bad)
        return qc_errf(err, QC_ERR_IO, "%s: %s: %s%s", PROG, dst, strerror(e),
                       e == EEXIST ? " (adapter-init never overwrites a file)" : "");
    if (a->n_written < AI_MAX_FILES) a->written[a->n_written++] = strdup(dst);
    return QC_OK;
}

/* After a failure: every file this run wrote, then DIR when this run created it. */
static void ai_undo(ai_args *a) {
    for (int i = 0; i < a->n_written; i++) unlink(a->written[i]);
    if (a->made_dir) rmdir(a->dir);
}

static void ai_next_steps(const ai_args *a) {
    char dir[PATH_MAX];
    if (!realpath(a->dir, dir)) snprintf(dir, sizeof dir, "%s", a->dir);
    printf("next:\n");
    if (!strcmp(a->kind, "python")) {
        printf("  qwen-conform check --golden %s/fixtures/tiny-f32-tied-flat "
               "--backend exec:\"python3 %s/adapter.py\"\n", a->src_abs, dir);
    } else {
        printf("  cmake -S %s -B %s/build && cmake --build %s/build\n", dir, dir, dir);
        printf("  qwen-conform check --golden %s/fixtures/tiny-f32-tied-flat "
               "--backend plugin:%s/build/libmy_runtime.so\n", a->src_abs, dir);
    }
    printf("  (verdict PARTIAL, every check run PASSES; %s/README.md says what comes next)\n",
           dir);
}

int qc_cmd_adapter_init(int argc, char **argv) {
    ai_args a;
    memset(&a, 0, sizeof a);
    qc_err err;
    qc_err_clear(&err);
    int help = 0;
    qc_status st = ai_parse(argc, argv, &a, &help, &err);
    if (help) {
        ai_usage(stdout);
        return QC_EXIT_PASS;
    }
    if (!st) st = ai_trees(&a, &err);
    if (!st) st = ai_dir(&a, &err);
    for (int i = 0; !st && i < qc_adapter_n_templates; i++)
        if (!strcmp(qc_adapter_templates[i].kind, a.kind))
            st = ai_write(&a, &qc_adapter_templates[i], &err);
    if (st) {
        ai_undo(&a);
        fprintf(stderr, "%s\n", err.msg);
        if (st == QC_ERR_ARG) fprintf(stderr, "Run `%s --help` for the usage.\n", PROG);
    } else {
        for (int i = 0; i < a.n_written; i++) printf("wrote %s\n", a.written[i]);
        ai_next_steps(&a);
    }
    for (int i = 0; i < a.n_written; i++) free(a.written[i]);
    return st ? QC_EXIT_ERROR : QC_EXIT_PASS;
}
