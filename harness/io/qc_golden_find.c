/* qc_golden_find.c — finding golden files: every *.h5 under a directory once (device + inode),
 * sorted; directory loops and duplicate links are skipped with a note. */
#include "qc_golden.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "qc/qc_memplan.h"
#include "qc_outpath.h"
#include "qc_golden_internal.h"

/* ===================================================================================== */
/* finding golden files                                                                  */
/* ===================================================================================== */

/* The walk follows symbolic links but takes every directory and every file once, by device +
 * inode. Real directories are walked first (depth first, names in byte order); a symlinked
 * directory is queued and walked after them (breadth of links: all one-link targets, then the
 * two-link ones, ...), so a directory reachable both ways is listed under its real path. A
 * directory reached again is skipped: a "directory loop" when it encloses the link, else a
 * duplicate. Of several names of one file, the one reached through the fewest symlinks, then
 * the first in byte order, is kept. Every skip is a note on stderr, never an error. */

typedef struct {
    dev_t dev;
    ino_t ino;
    char *path;
} seen_dir;

typedef struct {
    dev_t dev;
    ino_t ino;
    int links; /* symlinks followed to reach it */
    char *path;
    const char *same_as; /* set when skipped: the kept name */
} found_file;

typedef struct {
    char *path;
    int depth, links;
} pend_dir;

typedef struct {
    seen_dir *dirs;
    int nd, capd;
    found_file *files;
    int nf, capf;
    pend_dir *pend;
    int np, capp;
    qc_err *err;
} walker;

/* arr (elements of size elt, capacity *cap) with room for n + 1: arr itself, or a larger copy
 * (*cap updated); NULL when out of memory (arr unchanged). */
static void *grow(void *arr, int *cap, int n, size_t elt) {
    if (n < *cap) return arr;
    int nc = *cap ? *cap * 2 : 16;
    void *na = realloc(arr, (size_t)nc * elt);
    if (na) *cap = nc;
    return na;
}

/* Notes are printed once per process per skipped path: qc_outpath walks the --golden tree
 * too (to register the inputs) before the check walks it. */
static uint64_t noted_[512];
static int n_noted_;

static void note_skip(const char *path, const char *why, const char *other) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a of path, why */
    for (const char *s = path; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    for (const char *s = why; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    for (int i = 0; i < n_noted_; i++)
        if (noted_[i] == h) return;
    if (n_noted_ < (int)(sizeof noted_ / sizeof *noted_)) noted_[n_noted_++] = h;
    fprintf(stderr, "qwen-conform: note: skipping %s: %s%s\n", path, why, other);
}

/* 1 when path is dir or inside it. */
static int path_within(const char *path, const char *dir) {
    size_t n = strlen(dir);
    if (strncmp(path, dir, n) != 0) return 0;
    return path[n] == '\0' || path[n] == '/' || (n > 0 && dir[n - 1] == '/');
}

static qc_status walk_dir(walker *w, const char *dir, int depth, int links);

/* Walk the directory at p (stat sb) unless it was walked already. */
static qc_status visit_dir(walker *w, const char *p, const struct stat *sb, int depth,
                           int links) {
    for (int i = 0; i < w->nd; i++) {
        if (w->dirs[i].dev != sb->st_dev || w->dirs[i].ino != sb->st_ino) continue;
        if (path_within(p, w->dirs[i].path)) {
            char other[PATH_MAX + 64];
            snprintf(other, sizeof other, " (back to %s)", w->dirs[i].path);
            note_skip(p, "directory loop", other);
        } else {
            note_skip(p, "same file as ", w->dirs[i].path);
        }
        return QC_OK;
    }
    if (depth > 32) return qc_errf(w->err, QC_ERR_IO, "%s: directories nested too deeply", p);
    seen_dir *nd = grow(w->dirs, &w->capd, w->nd, sizeof *w->dirs);
    if (nd) w->dirs = nd;
    if (!nd || !(w->dirs[w->nd].path = strdup(p)))
        return qc_errf(w->err, QC_ERR_OOM, "%s: out of memory", p);
    w->dirs[w->nd].dev = sb->st_dev;
    w->dirs[w->nd].ino = sb->st_ino;
    w->nd++;
    return walk_dir(w, p, depth, links);
}

static qc_status walk_dir(walker *w, const char *dir, int depth, int links) {
    DIR *d = opendir(dir);
    if (!d)
        return qc_errf(w->err, QC_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    name_list nl = {0};
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue; /* ".", "..", hidden temp dirs and files */
        if (gio_collect_names(0, e->d_name, NULL, &nl) < 0) break;
    }
    closedir(d);
    qc_status st = nl.oom ? qc_errf(w->err, QC_ERR_OOM, "%s: out of memory", dir) : QC_OK;
    if (!st && nl.n > 1) qsort(nl.names, (size_t)nl.n, sizeof *nl.names, gio_cmp_str);
    for (int i = 0; !st && i < nl.n; i++) {
        char p[PATH_MAX];
        int n = snprintf(p, sizeof p, "%s/%s", dir, nl.names[i]);
        if (n < 0 || (size_t)n >= sizeof p) continue;
        struct stat lsb, sb;
        if (lstat(p, &lsb) != 0) continue;
        const int is_link = S_ISLNK(lsb.st_mode);
        if (is_link) {
            if (stat(p, &sb) != 0) continue; /* dangling */
        } else {
            sb = lsb;
        }
        if (S_ISDIR(sb.st_mode) && !is_link) {
            st = visit_dir(w, p, &sb, depth + 1, links);
        } else if (S_ISDIR(sb.st_mode)) { /* a symlinked directory: walked after the real ones */
            pend_dir *np = grow(w->pend, &w->capp, w->np, sizeof *w->pend);
            if (np) w->pend = np;
            if (!np || !(w->pend[w->np].path = strdup(p))) {
                st = qc_errf(w->err, QC_ERR_OOM, "%s: out of memory", dir);
                break;
            }
            w->pend[w->np].depth = depth + 1;
            w->pend[w->np].links = links + 1;
            w->np++;
        } else if (S_ISREG(sb.st_mode)) {
            size_t len = strlen(nl.names[i]);
            if (len <= 3 || strcmp(nl.names[i] + len - 3, ".h5") != 0) continue;
            found_file *nf = grow(w->files, &w->capf, w->nf, sizeof *w->files);
            if (nf) w->files = nf;
            if (!nf || !(w->files[w->nf].path = strdup(p))) {
                st = qc_errf(w->err, QC_ERR_OOM, "%s: out of memory", dir);
                break;
            }
            found_file *ff = &w->files[w->nf++];
            ff->dev = sb.st_dev;
            ff->ino = sb.st_ino;
            ff->links = links + is_link;
            ff->same_as = NULL;
        }
    }
    for (int i = 0; i < nl.n; i++) free(nl.names[i]);
    free(nl.names);
    return st;
}

/* Same file first, then the fewest links, then byte order. */
static int cmp_found(const void *a, const void *b) {
    const found_file *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    if (x->links != y->links) return x->links < y->links ? -1 : 1;
    return strcmp(x->path, y->path);
}

static int cmp_found_path(const void *a, const void *b) {
    return strcmp(((const found_file *)a)->path, ((const found_file *)b)->path);
}

static void walker_free(walker *w) {
    for (int i = 0; i < w->nd; i++) free(w->dirs[i].path);
    for (int i = 0; i < w->nf; i++) free(w->files[i].path);
    for (int i = 0; i < w->np; i++) free(w->pend[i].path);
    free(w->dirs);
    free(w->files);
    free(w->pend);
}

/* The walk of a directory: every *.h5 once, sorted, into pl (an array of malloc'd paths). */
static qc_status find_dir(const char *base, const struct stat *sb, char ***out, int *nout,
                          qc_err *err) {
    walker w;
    memset(&w, 0, sizeof w);
    w.err = err;
    qc_status st = visit_dir(&w, base, sb, 0, 0);
    /* then the symlinked directories, in the order met (the queue grows while walked) */
    for (int k = 0; !st && k < w.np; k++) {
        struct stat ps;
        const pend_dir pd = w.pend[k];
        if (stat(pd.path, &ps) == 0 && S_ISDIR(ps.st_mode))
            st = visit_dir(&w, pd.path, &ps, pd.depth, pd.links);
    }
    char **paths = NULL;
    int n = 0;
    if (!st && w.nf > 0) {
        qsort(w.files, (size_t)w.nf, sizeof *w.files, cmp_found);
        for (int i = 1; i < w.nf; i++) {
            found_file *prev = &w.files[i - 1];
            if (w.files[i].dev == prev->dev && w.files[i].ino == prev->ino)
                w.files[i].same_as = prev->same_as ? prev->same_as : prev->path;
        }
        qsort(w.files, (size_t)w.nf, sizeof *w.files, cmp_found_path);
        paths = malloc((size_t)w.nf * sizeof *paths);
        if (!paths) st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", base);
        for (int i = 0; !st && i < w.nf; i++) {
            if (w.files[i].same_as) {
                note_skip(w.files[i].path, "same file as ", w.files[i].same_as);
                continue;
            }
            paths[n++] = w.files[i].path;
            w.files[i].path = NULL; /* moved; kept names stay valid for same_as until freed */
        }
    }
    if (st) {
        qc_golden_paths_free(paths, n);
        paths = NULL;
        n = 0;
    }
    /* same_as points into kept paths (moved, still alive) or skipped ones (freed here, after
     * the notes were printed) */
    walker_free(&w);
    *out = paths;
    *nout = n;
    return st;
}

qc_status qc_golden_find(const char *dir_or_file, char ***paths, int *n, qc_err *err) {
    *paths = NULL;
    *n = 0;
    struct stat sb;
    if (stat(dir_or_file, &sb) != 0)
        return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", dir_or_file, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        char base[PATH_MAX];
        snprintf(base, sizeof base, "%s", dir_or_file);
        size_t bl = strlen(base);
        while (bl > 1 && base[bl - 1] == '/') base[--bl] = '\0';
        return find_dir(base, &sb, paths, n, err);
    }
    char **one = malloc(sizeof *one);
    if (!one || !(one[0] = strdup(dir_or_file))) {
        free(one);
        return qc_errf(err, QC_ERR_OOM, "%s: out of memory", dir_or_file);
    }
    *paths = one;
    *n = 1;
    return QC_OK;
}

void qc_golden_paths_free(char **paths, int n) {
    if (!paths) return;
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

