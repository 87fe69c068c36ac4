/* qc_outpath.c — output-file safety: the run's input / output registry, path validation,
 * atomic and direct writes, temp-file cleanup on signals. See qc_outpath.h. */
#include "qc_outpath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hdf5.h>

#include "qc_golden.h"

/* Room kept for the temp suffix ".tmp.<pid>.<k>" in a file name and a path. */
#define TMP_SUFFIX_MAX 32
#define MAX_LINKS 40

const char qc_outpath_help[] =
    "Output files (every report and --out; --dump-actual files when written):\n"
    "  written to a temp file beside the target, fsync'ed and renamed over it: an interrupted\n"
    "  run (error, disk full, SIGINT / SIGTERM) leaves no partial file. A symlink is followed\n"
    "  and its target replaced (the link stays). '-' writes a text report (JSON, JUnit,\n"
    "  Markdown, SVG) to stdout; /dev/stdout, /dev/stderr, /dev/fd/N, character devices such\n"
    "  as /dev/null and FIFOs are written directly, never replaced. Refused with exit 2 before\n"
    "  any work: an output that is an input of the run (a golden, a model file, the policy,\n"
    "  the tokens file, the profile, the baseline, ...) or another output (also through a\n"
    "  hard link, a symlink or another spelling of the path), a read-only file (even as\n"
    "  root), a directory, a path whose directory does not exist, an empty or over-long path,\n"
    "  and --dump-actual into (or below) the --golden directory or beside a golden checked.\n";

/* ===================================================================================== */
/* small path helpers                                                                    */
/* ===================================================================================== */

/* dirname / basename without modifying path: "a/b" -> "a" "b"; "b" -> "." "b"; "/b" -> "/"
 * "b"; "a/" -> "a" "". Returns -1 when a part does not fit. */
static int split_path(const char *path, char *dir, size_t dn, char *base, size_t bn) {
    const char *slash = strrchr(path, '/');
    int w1, w2;
    if (!slash) {
        w1 = snprintf(dir, dn, ".");
        w2 = snprintf(base, bn, "%s", path);
    } else {
        size_t dl = (size_t)(slash - path);
        while (dl > 0 && path[dl - 1] == '/') dl--; /* "a//b" */
        if (dl == 0)
            w1 = snprintf(dir, dn, "/");
        else
            w1 = snprintf(dir, dn, "%.*s", (int)dl, path);
        w2 = snprintf(base, bn, "%s", slash + 1);
    }
    return (w1 < 0 || (size_t)w1 >= dn || w2 < 0 || (size_t)w2 >= bn) ? -1 : 0;
}

/* realpath(dirname(path)) + "/" + basename(path) into out. On failure returns -1 with errno
 * set and dir_out holding the directory that failed. */
static int canon_parent(const char *path, char *out, size_t n, char *dir_out, size_t dn) {
    char dir[PATH_MAX], base[PATH_MAX], rd[PATH_MAX];
    if (split_path(path, dir, sizeof dir, base, sizeof base)) {
        errno = ENAMETOOLONG;
        if (dir_out) snprintf(dir_out, dn, "%s", path);
        return -1;
    }
    if (dir_out) snprintf(dir_out, dn, "%s", dir);
    if (!realpath(dir, rd)) return -1;
    struct stat sb;
    if (stat(rd, &sb) != 0) return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    int w = snprintf(out, n, "%s%s%s", rd, strcmp(rd, "/") == 0 ? "" : "/", base);
    if (w < 0 || (size_t)w >= n) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

static int all_digits(const char *s) {
    if (!*s || strlen(s) > 9) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

/* The descriptor a path names: "-" -> 1; /dev/stdout, /dev/stderr, /dev/stdin; /dev/fd/N,
 * /proc/self/fd/N and anything whose directory resolves to this process's fd directory.
 * -1 otherwise. */
static int fd_number(const char *p) {
    if (strcmp(p, "-") == 0 || strcmp(p, "/dev/stdout") == 0) return 1;
    if (strcmp(p, "/dev/stderr") == 0) return 2;
    if (strcmp(p, "/dev/stdin") == 0) return 0;
    static const char *const pre[] = {"/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"};
    for (size_t i = 0; i < sizeof pre / sizeof *pre; i++) {
        size_t L = strlen(pre[i]);
        if (strncmp(p, pre[i], L) == 0 && all_digits(p + L)) return atoi(p + L);
    }
    char dir[PATH_MAX], base[PATH_MAX], rd[PATH_MAX], fdd[PATH_MAX];
    if (split_path(p, dir, sizeof dir, base, sizeof base) || !all_digits(base)) return -1;
    if (!realpath(dir, rd) || !realpath("/proc/self/fd", fdd)) return -1;
    return strcmp(rd, fdd) == 0 ? atoi(base) : -1;
}

/* ===================================================================================== */
/* resolving an output path                                                              */
/* ===================================================================================== */

typedef enum { PK_NONE, PK_REG, PK_STREAM, PK_FD } pkind;

typedef struct {
    pkind kind;             /* not yet existing, regular, device / FIFO, descriptor */
    int fd;                 /* PK_FD */
    int has_id;             /* dev / ino / mode valid */
    dev_t dev;
    ino_t ino;
    mode_t mode;
    char target[PATH_MAX];  /* the file written (symlinks followed); "" for PK_FD */
    char dir[PATH_MAX];     /* its directory (as spelled) */
    char canon[PATH_MAX];   /* realpath(dir) + "/" + basename ("" for PK_FD) */
} pinfo;

/* Resolve path into pi. 0, or -1 with why[] describing the problem (no path prefix) and *code
 * the status. */
static int resolve_output(const char *path, pinfo *pi, char *why, size_t wn, qc_status *code) {
    memset(pi, 0, sizeof *pi);
    pi->fd = -1;
    *code = QC_ERR_ARG;
    if (!path || !*path) {
        snprintf(why, wn, "empty path");
        return -1;
    }
    size_t L = strlen(path);
    if (L >= PATH_MAX - TMP_SUFFIX_MAX) {
        snprintf(why, wn, "path too long (%zu bytes, at most %d)", L, PATH_MAX - TMP_SUFFIX_MAX - 1);
        return -1;
    }
    char cur[PATH_MAX];
    snprintf(cur, sizeof cur, "%s", path);
    *code = QC_ERR_IO;
    for (int depth = 0;; depth++) {
        if (depth > MAX_LINKS) {
            snprintf(why, wn, "too many levels of symbolic links");
            return -1;
        }
        int fdn = fd_number(cur);
        if (fdn >= 0) {
            struct stat sb;
            if (fcntl(fdn, F_GETFD) == -1 || fstat(fdn, &sb) != 0) {
                snprintf(why, wn, "file descriptor %d is not open", fdn);
                return -1;
            }
            pi->kind = PK_FD;
            pi->fd = fdn;
            pi->has_id = 1;
            pi->dev = sb.st_dev;
            pi->ino = sb.st_ino;
            pi->mode = sb.st_mode;
            return 0;
        }
        char dir[PATH_MAX], base[PATH_MAX];
        if (split_path(cur, dir, sizeof dir, base, sizeof base)) {
            snprintf(why, wn, "path too long");
            *code = QC_ERR_ARG;
            return -1;
        }
        if (!base[0] || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
            snprintf(why, wn, "names a directory, not a file");
            return -1;
        }
        struct stat sb;
        if (lstat(cur, &sb) != 0) {
            int e = errno;
            if (e != ENOENT) {
                if (e == ENOTDIR) {
                    snprintf(why, wn, "directory %s is not a directory", dir);
                } else if (e == ENAMETOOLONG) {
                    snprintf(why, wn, "path too long");
                    *code = QC_ERR_ARG;
                } else {
                    snprintf(why, wn, "%s", strerror(e));
                }
                return -1;
            }
            pi->kind = PK_NONE;
        } else if (S_ISLNK(sb.st_mode)) {
            char link[PATH_MAX];
            ssize_t k = readlink(cur, link, sizeof link - 1);
            if (k < 0 || (size_t)k >= sizeof link - 1) {
                snprintf(why, wn, "cannot read the symbolic link %s", cur);
                return -1;
            }
            link[k] = '\0';
            char next[PATH_MAX];
            int w = link[0] == '/' ? snprintf(next, sizeof next, "%s", link)
                                   : snprintf(next, sizeof next, "%s/%s", dir, link);
            if (w < 0 || (size_t)w >= sizeof next - TMP_SUFFIX_MAX) {
                snprintf(why, wn, "path too long (through the symbolic link %s)", cur);
                *code = QC_ERR_ARG;
                return -1;
            }
            snprintf(cur, sizeof cur, "%s", next);
            continue;
        } else if (S_ISDIR(sb.st_mode)) {
            snprintf(why, wn, "is a directory");
            return -1;
        } else if (S_ISREG(sb.st_mode)) {
            pi->kind = PK_REG;
        } else if (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode)) {
            pi->kind = PK_STREAM;
        } else if (S_ISBLK(sb.st_mode)) {
            snprintf(why, wn, "is a block device: refusing to write to it");
            return -1;
        } else {
            snprintf(why, wn, "is not a regular file, device or FIFO");
            return -1;
        }
        if (pi->kind != PK_NONE) {
            pi->has_id = 1;
            pi->dev = sb.st_dev;
            pi->ino = sb.st_ino;
            pi->mode = sb.st_mode;
        }
        snprintf(pi->target, sizeof pi->target, "%s", cur);
        snprintf(pi->dir, sizeof pi->dir, "%s", dir);
        char faildir[PATH_MAX];
        if (canon_parent(cur, pi->canon, sizeof pi->canon, faildir, sizeof faildir) != 0) {
            int e = errno;
            if (e == ENOENT)
                snprintf(why, wn, "directory %s does not exist", faildir);
            else if (e == ENOTDIR)
                snprintf(why, wn, "%s is not a directory", faildir);
            else if (e == ENAMETOOLONG) {
                snprintf(why, wn, "path too long");
                *code = QC_ERR_ARG;
            } else
                snprintf(why, wn, "directory %s: %s", faildir, strerror(e));
            return -1;
        }
        if (strlen(base) + TMP_SUFFIX_MAX > NAME_MAX) {
            snprintf(why, wn, "file name too long (%zu bytes, at most %d)", strlen(base),
                     NAME_MAX - TMP_SUFFIX_MAX);
            *code = QC_ERR_ARG;
            return -1;
        }
        if (strlen(pi->canon) + TMP_SUFFIX_MAX >= PATH_MAX) {
            snprintf(why, wn, "path too long (%zu bytes resolved)", strlen(pi->canon));
            *code = QC_ERR_ARG;
            return -1;
        }
        return 0;
    }
}

/* The checks on a resolved output; 0 or -1 with why. */
static int check_output(const pinfo *pi, unsigned flags, char *why, size_t wn, qc_status *code) {
    *code = QC_ERR_IO;
    if ((flags & QC_OUT_REGULAR) && (pi->kind == PK_FD || pi->kind == PK_STREAM)) {
        snprintf(why, wn, "is not a regular file (%s): this output must be a regular file",
                 pi->kind == PK_FD ? "a file descriptor"
                 : S_ISFIFO(pi->mode) ? "a FIFO" : "a character device");
        *code = QC_ERR_ARG;
        return -1;
    }
    if ((pi->kind == PK_REG || pi->kind == PK_STREAM) && (pi->mode & 0222) == 0) {
        snprintf(why, wn, "is read-only (mode %04o): refusing to replace it",
                 (unsigned)(pi->mode & 07777));
        return -1;
    }
    if (pi->kind == PK_REG || pi->kind == PK_NONE) {
        if (access(pi->dir, W_OK | X_OK) != 0) {
            snprintf(why, wn, "directory %s is not writable: %s", pi->dir, strerror(errno));
            return -1;
        }
    } else if (pi->kind == PK_STREAM && access(pi->target, W_OK) != 0) {
        snprintf(why, wn, "not writable: %s", strerror(errno));
        return -1;
    }
    if (pi->kind == PK_REG && (flags & QC_OUT_NO_CLOBBER) && !(flags & QC_OUT_FORCE)) {
        int schema = -1;
        if (qc_outpath_is_golden(pi->target, &schema))
            snprintf(why, wn, "exists and is a golden file (schema_version %d): pass --force to "
                     "replace it", schema);
        else
            snprintf(why, wn, "exists: pass --force to replace it");
        *code = QC_ERR_ARG;
        return -1;
    }
    return 0;
}

static qc_status out_err(qc_err *err, qc_status code, const char *option, const char *path,
                         const char *why) {
    char shortp[160];
    if (path && strlen(path) > 300) { /* an over-long path: its start is enough */
        snprintf(shortp, sizeof shortp, "%.120s...", path);
        path = shortp;
    }
    /* "<path>: <why> (<option>)": the file first (as every message of the CLI), then the
     * option that named it */
    if (option && (!path || !*path)) return qc_errf(err, code, "%s: %s", option, why);
    if (option) return qc_errf(err, code, "%s: %s (%s)", path, why, option);
    if (!path || !*path) return qc_errf(err, code, "output: %s", why);
    return qc_errf(err, code, "%s: %s", path, why);
}

qc_status qc_outpath_validate(const char *path, const char *option, unsigned flags,
                              qc_err *err) {
    pinfo pi;
    char why[PATH_MAX + 200];
    qc_status code;
    if (resolve_output(path, &pi, why, sizeof why, &code) ||
        check_output(&pi, flags, why, sizeof why, &code))
        return out_err(err, code, option, path, why);
    return QC_OK;
}

/* ===================================================================================== */
/* reading golden attributes in a child process                                          */
/* ===================================================================================== */

/* schema_version (-1 when absent / not an HDF5 file) and /model_path ("" when absent). */
static void peek_one(const char *path, int *schema, char *mp, size_t n) {
    *schema = -1;
    mp[0] = '\0';
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (H5Fis_hdf5(path) <= 0) return;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return;
    hid_t g = H5Gopen2(f, "/", H5P_DEFAULT);
    if (g >= 0) {
        if (H5Aexists(g, "schema_version") > 0) {
            hid_t a = H5Aopen(g, "schema_version", H5P_DEFAULT);
            hid_t t = a >= 0 ? H5Aget_type(a) : -1, s = a >= 0 ? H5Aget_space(a) : -1;
            long long v = 0;
            if (t >= 0 && s >= 0 && H5Tget_class(t) == H5T_INTEGER &&
                H5Sget_simple_extent_npoints(s) == 1 && H5Aread(a, H5T_NATIVE_LLONG, &v) >= 0 &&
                v >= 0 && v < INT_MAX)
                *schema = (int)v;
            if (s >= 0) H5Sclose(s);
            if (t >= 0) H5Tclose(t);
            if (a >= 0) H5Aclose(a);
        }
        if (H5Aexists(g, "model_path") > 0) {
            hid_t a = H5Aopen(g, "model_path", H5P_DEFAULT);
            hid_t t = a >= 0 ? H5Aget_type(a) : -1, s = a >= 0 ? H5Aget_space(a) : -1;
            if (t >= 0 && s >= 0 && H5Tget_class(t) == H5T_STRING &&
                H5Sget_simple_extent_npoints(s) == 1) {
                hid_t mt = H5Tcopy(H5T_C_S1);
                H5Tset_cset(mt, H5Tget_cset(t)); /* ASCII <-> UTF-8 does not convert */
                if (H5Tis_variable_str(t) > 0) {
                    char *vl = NULL;
                    if (H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Aread(a, mt, &vl) >= 0 && vl)
                        snprintf(mp, n, "%s", vl);
                    if (vl) H5free_memory(vl);
                } else {
                    size_t sz = H5Tget_size(t);
                    char *buf = sz > 0 && sz < (1u << 20) ? calloc(sz + 1, 1) : NULL;
                    if (buf && H5Tset_size(mt, sz) >= 0 &&
                        H5Tset_strpad(mt, H5T_STR_NULLPAD) >= 0 && H5Aread(a, mt, buf) >= 0)
                        snprintf(mp, n, "%s", buf);
                    free(buf);
                }
                H5Tclose(mt);
            }
            if (s >= 0) H5Sclose(s);
            if (t >= 0) H5Tclose(t);
            if (a >= 0) H5Aclose(a);
        }
        H5Gclose(g);
    }
    H5Fclose(f);
}

static int write_full(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_full(int fd, void *p, size_t n) {
    char *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Peek every path; schema[i] / model_path[i] (malloc'd, NULL when absent). A child that
 * crashes on a corrupt file is replaced by a new one starting after that file. */
static void peek_all(char *const *paths, int n, int *schema, char **model_path) {
    for (int i = 0; i < n; i++) {
        schema[i] = -1;
        model_path[i] = NULL;
    }
    int from = 0;
    while (from < n) {
        int pfd[2];
        if (pipe(pfd) != 0) return;
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            close(pfd[0]);
            close(pfd[1]);
            return;
        }
        if (pid == 0) {
            close(pfd[0]);
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            signal(SIGHUP, SIG_DFL);
            static char mp[PATH_MAX];
            for (int i = from; i < n; i++) {
                int sc = -1;
                peek_one(paths[i], &sc, mp, sizeof mp);
                int32_t hdr[3] = {i, sc, (int32_t)strlen(mp)};
                if (write_full(pfd[1], hdr, sizeof hdr) || write_full(pfd[1], mp, (size_t)hdr[2]))
                    _exit(1);
            }
            _exit(0);
        }
        close(pfd[1]);
        int last = from - 1;
        int32_t hdr[3];
        while (read_full(pfd[0], hdr, sizeof hdr) == 0) {
            if (hdr[0] < from || hdr[0] >= n || hdr[2] < 0 || hdr[2] >= PATH_MAX) break;
            char *s = malloc((size_t)hdr[2] + 1);
            if (!s || read_full(pfd[0], s, (size_t)hdr[2])) {
                free(s);
                break;
            }
            s[hdr[2]] = '\0';
            schema[hdr[0]] = hdr[1];
            free(model_path[hdr[0]]);
            model_path[hdr[0]] = s[0] ? s : (free(s), NULL);
            last = hdr[0];
        }
        close(pfd[0]);
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (last >= n - 1) return;
        from = last + 2; /* last + 1 crashed the child (or could not be reported): skip it */
    }
}

int qc_outpath_is_golden(const char *path, int *schema) {
    char *paths[1] = {(char *)path};
    int sc = -1;
    char *mp = NULL;
    struct stat sb;
    if (!path || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    peek_all(paths, 1, &sc, &mp);
    free(mp);
    if (schema) *schema = sc;
    return sc >= 0;
}

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
            peek_all(paths, n, schema, mp);
            for (int i = 0; i < n; i++) {
                if (!mp[i]) continue;
                char dir[PATH_MAX], base[PATH_MAX], md[PATH_MAX * 2];
                if (mp[i][0] == '/') {
                    snprintf(md, sizeof md, "%s", mp[i]);
                } else {
                    if (split_path(paths[i], dir, sizeof dir, base, sizeof base)) continue;
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
    } else if (canon_parent(e->path, buf, sizeof buf, NULL, 0) == 0) {
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
    return out_err(err, QC_ERR_ARG, option, path, why);
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
        if (canon_parent(p, canon, sizeof canon, faildir, sizeof faildir) != 0)
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
            if (split_path(g->canon, gd, sizeof gd, gb, sizeof gb) == 0 && strcmp(gd, canon) == 0)
                return qc_errf(err, QC_ERR_ARG,
                               "%s: contains the golden %s checked by this run: the dumps "
                               "would sit beside it and be read as goldens; choose another "
                               "directory (%s)", e->path, g->path, opt);
        }
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
        /* (--force / no-clobber last: a clash with an input says more than "exists") */
        if (resolve_output(e->path, &pi, why, sizeof why, &code) ||
            check_output(&pi, e->flags & ~(unsigned)QC_OUT_NO_CLOBBER, why, sizeof why, &code))
            return out_err(err, code, e->role, e->path, why);
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
                return out_err(err, QC_ERR_ARG, o->role, o->path, why);
            }
        }
    }
    for (int i = 0; i < nreg_; i++) {
        const entry *e = &reg_[i];
        if (e->kind != E_OUTPUT || !(e->flags & QC_OUT_NO_CLOBBER)) continue;
        pinfo pi;
        char why[PATH_MAX + 200];
        qc_status code;
        if (resolve_output(e->path, &pi, why, sizeof why, &code) ||
            check_output(&pi, e->flags, why, sizeof why, &code))
            return out_err(err, code, e->role, e->path, why);
    }
    for (int i = 0; i < nreg_; i++) {
        if (reg_[i].kind != E_DUMP) continue;
        qc_status st = verify_dump_dir(&reg_[i], err);
        if (st) return st;
    }
    reg_verified_ = 1;
    return QC_OK;
}

/* ===================================================================================== */
/* the temp-file table and the signal handlers                                           */
/* ===================================================================================== */

#define N_SLOTS 32

static struct {
    volatile sig_atomic_t active; /* 1: path is a temp file to remove on a signal */
    char path[PATH_MAX];
} slots_[N_SLOTS];

static int slot_claim(const char *path) {
    for (int i = 0; i < N_SLOTS; i++) {
        if (slots_[i].active) continue;
        snprintf(slots_[i].path, sizeof slots_[i].path, "%s", path);
        atomic_signal_fence(memory_order_seq_cst);
        slots_[i].active = 1;
        return i;
    }
    return -1; /* table full: still written atomically, just not removed on a signal */
}

static void slot_release(int i) {
    if (i < 0 || i >= N_SLOTS) return;
    slots_[i].active = 0;
    atomic_signal_fence(memory_order_seq_cst);
}

int qc_outpath_active_temps(void) {
    int k = 0;
    for (int i = 0; i < N_SLOTS; i++) k += slots_[i].active != 0;
    return k;
}

static void unlink_active(void) {
    for (int i = 0; i < N_SLOTS; i++)
        if (slots_[i].active) unlink(slots_[i].path);
}

/* Async-signal-safe: unlink + raise. SA_RESETHAND | SA_NODEFER: the re-raised signal takes
 * its default action at once (the process ends with status 128 + sig). */
static void on_fatal_signal(int sig) {
    int saved = errno;
    unlink_active();
    signal(sig, SIG_DFL);
    raise(sig);
    errno = saved;
}

static void at_exit_cleanup(void) { unlink_active(); }

void qc_outpath_install_signal_handlers(void) {
    static int done;
    if (done) return;
    done = 1;
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND | SA_NODEFER;
        sigaction(sigs[i], &sa, NULL);
    }
    signal(SIGPIPE, SIG_IGN);
    atexit(at_exit_cleanup);
}

/* ===================================================================================== */
/* writing                                                                               */
/* ===================================================================================== */

static void out_init(qc_out *o, const char *path) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    o->slot = -1;
    snprintf(o->path, sizeof o->path, "%s", path ? path : "");
}

qc_status qc_out_open(qc_out *o, const char *path, unsigned flags, qc_err *err) {
    out_init(o, path);
    pinfo pi;
    char why[PATH_MAX + 200];
    qc_status code;
    if (resolve_output(path, &pi, why, sizeof why, &code) ||
        check_output(&pi, flags, why, sizeof why, &code))
        return out_err(err, code, NULL, path, why);
    /* the last line of defence: never replace an input of the verified run */
    if (reg_verified_)
        for (int j = 0; j < nreg_; j++) {
            const entry *x = &reg_[j];
            if (x->kind == E_INPUT && !x->golden_root && !x->stream &&
                same_file(pi.has_id, pi.dev, pi.ino, pi.canon, x->has_id, x->dev, x->ino,
                          x->canon))
                return input_clash(err, NULL, path, x);
        }
    if (pi.kind == PK_FD) {
        if (pi.fd == 1) fflush(stdout);
        if (pi.fd == 2) fflush(stderr);
        o->fd = fcntl(pi.fd, F_DUPFD_CLOEXEC, 3);
        if (o->fd < 0)
            return qc_errf(err, QC_ERR_IO, "%s: cannot use file descriptor %d: %s", path, pi.fd,
                           strerror(errno));
        o->direct = 1;
        o->is_std = pi.fd == 1 || pi.fd == 2;
        return QC_OK;
    }
    snprintf(o->target, sizeof o->target, "%s", pi.target);
    if (pi.kind == PK_STREAM) {
        o->fd = open(pi.target, O_WRONLY | O_NOCTTY | O_CLOEXEC);
        if (o->fd < 0)
            return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        struct stat sb;
        if (fstat(o->fd, &sb) != 0 || !(S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode))) {
            close(o->fd);
            o->fd = -1;
            return qc_errf(err, QC_ERR_IO, "%s: changed while being opened (no longer a device "
                           "or FIFO)", path);
        }
        o->direct = 1;
        return QC_OK;
    }
    /* atomic: a fresh temp file in the target's directory */
    static unsigned seq;
    for (int attempt = 0; attempt < 100; attempt++) {
        int w = snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld.%u", pi.target, (long)getpid(),
                         seq++ % 1000u);
        if (w < 0 || (size_t)w >= sizeof o->tmp) {
            o->tmp[0] = '\0';
            return qc_errf(err, QC_ERR_ARG, "%s: path too long", path);
        }
        o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (o->fd >= 0 || errno != EEXIST) break;
    }
    if (o->fd < 0) {
        int e = errno;
        char t[sizeof o->tmp];
        snprintf(t, sizeof t, "%s", o->tmp);
        o->tmp[0] = '\0';
        return qc_errf(err, QC_ERR_IO, "%s: cannot create %s: %s", path, t, strerror(e));
    }
    o->slot = slot_claim(o->tmp);
    if (pi.kind == PK_REG) {
        /* the replacement keeps the file's permissions (never set-id bits) and, when we run
         * as root next to a user's files, its owner */
        struct stat sb;
        if (geteuid() == 0 && stat(pi.target, &sb) == 0) (void)fchown(o->fd, sb.st_uid, sb.st_gid);
        (void)fchmod(o->fd, pi.mode & 0777);
    }
    return QC_OK;
}

qc_status qc_out_write(qc_out *o, const void *data, size_t n, qc_err *err) {
    if (o->fd < 0 && !o->broken)
        return qc_errf(err, QC_ERR_IO, "%s: not open for writing", o->path);
    if (o->broken) return QC_OK;
    if (o->failed) return qc_errf(err, QC_ERR_IO, "%s: an earlier write failed", o->path);
    const char *c = data;
    while (n > 0) {
        ssize_t w = write(o->fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EPIPE && o->is_std) {
            o->broken = 1; /* the reader went away (`| head`): the output just ends */
            return QC_OK;
        }
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            o->failed = 1;
            return qc_errf(err, QC_ERR_IO, "%s: write failed: %s", o->path, strerror(e));
        }
        c += w;
        n -= (size_t)w;
    }
    return QC_OK;
}

void qc_out_abort(qc_out *o) {
    if (o->fd >= 0) close(o->fd);
    o->fd = -1;
    if (o->tmp[0]) unlink(o->tmp);
    o->tmp[0] = '\0';
    slot_release(o->slot);
    o->slot = -1;
}

qc_status qc_out_commit(qc_out *o, qc_err *err) {
    if (o->failed) {
        qc_out_abort(o);
        return qc_errf(err, QC_ERR_IO, "%s: not written (a write failed)", o->path);
    }
    if (o->direct) {
        int rc = o->fd >= 0 ? close(o->fd) : 0;
        int e = errno;
        o->fd = -1;
        if (rc != 0 && !(o->is_std && e == EPIPE))
            return qc_errf(err, QC_ERR_IO, "%s: write failed: %s", o->path, strerror(e));
        return QC_OK;
    }
    if (o->fd < 0 || !o->tmp[0]) return qc_errf(err, QC_ERR_IO, "%s: not open", o->path);
    if (fsync(o->fd) != 0 && errno != EINVAL && errno != EROFS && errno != ENOTSUP) {
        int e = errno;
        qc_out_abort(o);
        return qc_errf(err, QC_ERR_IO, "%s: write failed (fsync): %s", o->path, strerror(e));
    }
    int rc = close(o->fd);
    o->fd = -1;
    if (rc != 0) {
        int e = errno;
        qc_out_abort(o);
        return qc_errf(err, QC_ERR_IO, "%s: write failed (close): %s", o->path, strerror(e));
    }
    if (rename(o->tmp, o->target) != 0) {
        int e = errno;
        char t[sizeof o->tmp];
        snprintf(t, sizeof t, "%s", o->tmp);
        qc_out_abort(o);
        return qc_errf(err, QC_ERR_IO, "%s: cannot rename %s onto it: %s", o->path, t,
                       strerror(e));
    }
    o->tmp[0] = '\0';
    slot_release(o->slot);
    o->slot = -1;
    /* make the rename durable (best effort) */
    char dir[PATH_MAX], base[PATH_MAX];
    if (split_path(o->target, dir, sizeof dir, base, sizeof base) == 0) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    return QC_OK;
}

qc_status qc_out_write_file(const char *path, const void *data, size_t n, unsigned flags,
                            qc_err *err) {
    qc_out o;
    qc_status st = qc_out_open(&o, path, flags, err);
    if (st) return st;
    if ((st = qc_out_write(&o, data, n, err))) {
        qc_out_abort(&o);
        return st;
    }
    return qc_out_commit(&o, err);
}
