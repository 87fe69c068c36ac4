/* qc_outpath_registry.c — the run's file registry (qc_outpath.h, 1.): inputs, outputs and
 * dump directories; the identity of every file (device + inode, or the canonical name of a
 * file not yet created) and the collision checks of qc_outpath_verify; the input check
 * qc_out_open makes after it. Process-global, one command at a time. See
 * qc_outpath_internal.h. */
#include "qc_outpath_internal.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "qc_golden.h"

/* ===================================================================================== */
/* the registry                                                                          */
/* ===================================================================================== */

enum { E_INPUT, E_OUTPUT, E_DUMP };

typedef struct {
    int kind;            /* E_* */
    char *path;          /* as given */
    char *role;          /* role (inputs) or option (outputs) */
    unsigned flags;      /* outputs */
    int golden_root;     /* input: a --golden directory */
    int golden_file;     /* input: a golden file */
    /* identity (computed by verify) */
    int has_id;
    dev_t dev;
    ino_t ino;
    int stream;          /* output: a device / FIFO / descriptor; input: not a regular file
                            (a device or FIFO read as input cannot be replaced by an output) */
    char *canon;         /* malloc'd canonical name, or NULL */
} entry;

static entry *reg_;
static int nreg_, capreg_;
static int reg_oom_;
static int reg_verified_;

void qc_outpath_reset(void) {
    for (int i = 0; i < nreg_; i++) {
        free(reg_[i].path);
        free(reg_[i].role);
        free(reg_[i].canon);
    }
    free(reg_);
    reg_ = NULL;
    nreg_ = capreg_ = 0;
    reg_oom_ = 0;
    reg_verified_ = 0;
}

static entry *reg_add(int kind, const char *path, const char *role) {
    if (nreg_ == capreg_) {
        int nc = capreg_ ? 2 * capreg_ : 32;
        entry *ne = realloc(reg_, (size_t)nc * sizeof *ne);
        if (!ne) {
            reg_oom_ = 1;
            return NULL;
        }
        reg_ = ne;
        capreg_ = nc;
    }
    entry *e = &reg_[nreg_];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->path = strdup(path);
    e->role = strdup(role ? role : "");
    if (!e->path || !e->role) {
        free(e->path);
        free(e->role);
        reg_oom_ = 1;
        return NULL;
    }
    nreg_++;
    reg_verified_ = 0;
    return e;
}

void qc_outpath_add_input(const char *path, const char *role) {
    if (path && *path && strcmp(path, "-") != 0) reg_add(E_INPUT, path, role ? role : "input");
}

void qc_outpath_add_model_dir(const char *dir, const char *role) {
    if (!dir || !*dir) return;
    DIR *d = opendir(dir);
    if (!d) return; /* the run reports a missing model */
    char r[512];
    snprintf(r, sizeof r, "model file of %s", role ? role : "the model");
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char p[PATH_MAX];
        int w = snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (w < 0 || (size_t)w >= sizeof p) continue;
        struct stat sb;
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) reg_add(E_INPUT, p, r);
    }
    closedir(d);
}

void qc_outpath_add_goldens(const char *dir_or_file, int with_models) {
    if (!dir_or_file || !*dir_or_file) return;
    struct stat sb;
    if (stat(dir_or_file, &sb) != 0) return; /* the run reports it */
    if (S_ISDIR(sb.st_mode)) {
        entry *e = reg_add(E_INPUT, dir_or_file, "--golden directory");
        if (e) e->golden_root = 1;
    }
    char **paths = NULL;
    int n = 0;
    qc_err err;
    qc_err_clear(&err);
    if (qc_golden_find(dir_or_file, &paths, &n, &err) != QC_OK) return;
    for (int i = 0; i < n; i++) {
        entry *e = reg_add(E_INPUT, paths[i], "golden");
        if (e) e->golden_file = 1;
    }
    if (with_models && n > 0) {
        int *schema = calloc((size_t)n, sizeof *schema);
        char **mp = calloc((size_t)n, sizeof *mp);
        if (!schema || !mp) {
            reg_oom_ = 1;
        } else {
            outp_peek_all(paths, n, schema, mp);
            for (int i = 0; i < n; i++) {
                if (!mp[i]) continue;
                char dir[PATH_MAX], base[PATH_MAX], md[PATH_MAX * 2];
                if (mp[i][0] == '/') {
                    snprintf(md, sizeof md, "%s", mp[i]);
                } else {
                    if (outp_split_path(paths[i], dir, sizeof dir, base, sizeof base)) continue;
                    snprintf(md, sizeof md, "%s/%s", dir, mp[i]);
                }
                char role[PATH_MAX + 32];
                snprintf(role, sizeof role, "golden %s", paths[i]);
                qc_outpath_add_model_dir(md, role);
            }
            for (int i = 0; i < n; i++) free(mp[i]);
        }
        free(schema);
        free(mp);
    }
    qc_golden_paths_free(paths, n);
}

void qc_outpath_add_output(const char *path, const char *option, unsigned flags) {
    if (!path) return;
    entry *e = reg_add(E_OUTPUT, path, option ? option : "output");
    if (e) e->flags = flags;
}

void qc_outpath_add_dump_dir(const char *dir, const char *option) {
    if (dir) reg_add(E_DUMP, dir, option ? option : "--dump-actual");
}

/* identity of an input */
static void input_identity(entry *e) {
    struct stat sb;
    char buf[PATH_MAX];
    free(e->canon);
    e->canon = NULL;
    e->has_id = 0;
    e->stream = 0;
    if (stat(e->path, &sb) == 0) {
        e->has_id = 1;
        e->dev = sb.st_dev;
        e->ino = sb.st_ino;
        e->stream = S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode);
        if (realpath(e->path, buf)) e->canon = strdup(buf);
    } else if (outp_canon_parent(e->path, buf, sizeof buf, NULL, 0) == 0) {
        e->canon = strdup(buf);
    }
}

static int same_file(int a_id, dev_t ad, ino_t ai, const char *ac, int b_id, dev_t bd, ino_t bi,
                     const char *bc) {
    if (a_id && b_id) return ad == bd && ai == bi;
    return ac && bc && ac[0] && strcmp(ac, bc) == 0;
}

/* "is the same file as <path> (<role>, an input of this run)" for an output hitting input e */
static qc_status input_clash(qc_err *err, const char *option, const char *path, const entry *e) {
    char why[2 * PATH_MAX + 300];
    snprintf(why, sizeof why, "is the same file as %s (%s, an input of this run): refusing to "
             "overwrite it", e->path, e->role);
    return outp_out_err(err, QC_ERR_ARG, option, path, why);
}

/* 1 when canonical directory d equals root or lies inside it */
static int dir_within(const char *d, const char *root) {
    size_t L = strlen(root);
    if (strcmp(root, "/") == 0) return 1;
    return strncmp(d, root, L) == 0 && (d[L] == '\0' || d[L] == '/');
}

static qc_status verify_dump_dir(const entry *e, qc_err *err) {
    const char *opt = e->role;
    if (!e->path[0]) return qc_errf(err, QC_ERR_ARG, "%s: empty path", opt);
    if (strlen(e->path) >= PATH_MAX - NAME_MAX - 1)
        return qc_errf(err, QC_ERR_ARG, "%.120s...: path too long (%zu bytes) (%s)", e->path,
                       strlen(e->path), opt);
    char canon[PATH_MAX], faildir[PATH_MAX];
    struct stat sb;
    if (stat(e->path, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return qc_errf(err, QC_ERR_ARG, "%s: not a directory (%s)", e->path, opt);
        if (!realpath(e->path, canon))
            return qc_errf(err, QC_ERR_IO, "%s: %s (%s)", e->path, strerror(errno), opt);
        if (access(e->path, W_OK | X_OK) != 0)
            return qc_errf(err, QC_ERR_IO, "%s: directory not writable: %s (%s)", e->path,
                           strerror(errno), opt);
    } else {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s", e->path);
        for (size_t L = strlen(p); L > 1 && p[L - 1] == '/'; L--) p[L - 1] = '\0';
        if (outp_canon_parent(p, canon, sizeof canon, faildir, sizeof faildir) != 0)
            return qc_errf(err, QC_ERR_IO, "%s: directory %s %s (%s)", e->path, faildir,
                           errno == ENOENT ? "does not exist" : strerror(errno), opt);
    }
    for (int i = 0; i < nreg_; i++) {
        const entry *g = &reg_[i];
        if (g->kind != E_INPUT || !g->canon) continue;
        if (g->golden_root && dir_within(canon, g->canon))
            return qc_errf(err, QC_ERR_ARG,
                           "%s: %s the golden directory %s read by this run (--golden): the "
                           "dumps would be read as goldens; choose another directory (%s)",
                           e->path, strcmp(canon, g->canon) == 0 ? "is" : "is inside",
                           g->path, opt);
        if (g->golden_file) {
            char gd[PATH_MAX], gb[PATH_MAX];
            if (outp_split_path(g->canon, gd, sizeof gd, gb, sizeof gb) == 0 &&
                strcmp(gd, canon) == 0)
                return qc_errf(err, QC_ERR_ARG,
                               "%s: contains the golden %s checked by this run: the dumps "
                               "would sit beside it and be read as goldens; choose another "
                               "directory (%s)", e->path, g->path, opt);
        }
    }
    return QC_OK;
}

qc_status outp_refuse_input(const pinfo *pi, const char *path, qc_err *err) {
    if (reg_verified_)
        for (int j = 0; j < nreg_; j++) {
            const entry *x = &reg_[j];
            if (x->kind == E_INPUT && !x->golden_root && !x->stream &&
                same_file(pi->has_id, pi->dev, pi->ino, pi->canon, x->has_id, x->dev, x->ino,
                          x->canon))
                return input_clash(err, NULL, path, x);
        }
    return QC_OK;
}

qc_status qc_outpath_verify(qc_err *err) {
    reg_verified_ = 0;
    if (reg_oom_) return qc_errf(err, QC_ERR_OOM, "out of memory registering the run's files");
    for (int i = 0; i < nreg_; i++)
        if (reg_[i].kind == E_INPUT) input_identity(&reg_[i]);
    /* every output on its own */
    for (int i = 0; i < nreg_; i++) {
        entry *e = &reg_[i];
        if (e->kind != E_OUTPUT) continue;
        pinfo pi;
        char why[PATH_MAX + 200];
        qc_status code;
        /* only resolved here: the permission and --force checks come after the collisions
         * (a clash with an input says more than "exists" or "directory is not writable") */
        if (outp_resolve_output(e->path, &pi, why, sizeof why, &code))
            return outp_out_err(err, code, e->role, e->path, why);
        free(e->canon);
        e->canon = pi.canon[0] ? strdup(pi.canon) : NULL;
        if (pi.canon[0] && !e->canon) return qc_errf(err, QC_ERR_OOM, "out of memory");
        e->has_id = pi.has_id;
        e->dev = pi.dev;
        e->ino = pi.ino;
        e->stream = pi.kind == PK_FD || pi.kind == PK_STREAM;
    }
    /* collisions */
    for (int i = 0; i < nreg_; i++) {
        const entry *o = &reg_[i];
        if (o->kind != E_OUTPUT) continue;
        for (int j = 0; j < nreg_; j++) {
            const entry *x = &reg_[j];
            if (x->kind == E_INPUT && !x->golden_root && !x->stream &&
                same_file(o->has_id, o->dev, o->ino, o->canon, x->has_id, x->dev, x->ino,
                          x->canon))
                return input_clash(err, o->role, o->path, x);
            if (x->kind == E_OUTPUT && j < i && !o->stream && !x->stream &&
                same_file(o->has_id, o->dev, o->ino, o->canon, x->has_id, x->dev, x->ino,
                          x->canon)) {
                char why[2 * PATH_MAX + 200];
                snprintf(why, sizeof why, "is the same file as %s %s (another output of this "
                         "run): refusing to write both", x->role, x->path);
                return outp_out_err(err, QC_ERR_ARG, o->role, o->path, why);
            }
        }
    }
    for (int i = 0; i < nreg_; i++) {
        const entry *e = &reg_[i];
        if (e->kind != E_OUTPUT) continue;
        pinfo pi;
        char why[PATH_MAX + 200];
        qc_status code;
        if (outp_resolve_output(e->path, &pi, why, sizeof why, &code) ||
            outp_check_output(&pi, e->flags, why, sizeof why, &code))
            return outp_out_err(err, code, e->role, e->path, why);
    }
    for (int i = 0; i < nreg_; i++) {
        if (reg_[i].kind != E_DUMP) continue;
        qc_status st = verify_dump_dir(&reg_[i], err);
        if (st) return st;
    }
    reg_verified_ = 1;
    return QC_OK;
}
