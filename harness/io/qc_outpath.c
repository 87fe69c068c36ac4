/* qc_outpath.c — output-file safety (qc_outpath.h): path helpers, resolving one output path
 * (symlinks followed; descriptors, devices and FIFOs recognised) and validating it; the
 * "Output files" --help paragraph. The registry, the golden peek and the writer live beside
 * it (qc_outpath_internal.h names them). */
#include "qc_outpath_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

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
int outp_split_path(const char *path, char *dir, size_t dn, char *base, size_t bn) {
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
int outp_canon_parent(const char *path, char *out, size_t n, char *dir_out, size_t dn) {
    char dir[PATH_MAX], base[PATH_MAX], rd[PATH_MAX];
    if (outp_split_path(path, dir, sizeof dir, base, sizeof base)) {
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
    if (outp_split_path(p, dir, sizeof dir, base, sizeof base) || !all_digits(base)) return -1;
    if (!realpath(dir, rd) || !realpath("/proc/self/fd", fdd)) return -1;
    return strcmp(rd, fdd) == 0 ? atoi(base) : -1;
}

/* ===================================================================================== */
/* resolving an output path                                                              */
/* ===================================================================================== */

/* A path naming descriptor fdn (see fd_number): it must be open. 0, or -1 with why. */
static int resolve_fd(int fdn, pinfo *pi, char *why, size_t wn) {
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

/* What cur (in directory dir) is: pi->kind (and its identity when it exists) -> 0; a symbolic
 * link -> 1 with the path it points to in next[nn]; a problem -> -1 with why (and *code). */
static int classify(const char *cur, const char *dir, pinfo *pi, char *next, size_t nn,
                    char *why, size_t wn, qc_status *code) {
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
        int w = link[0] == '/' ? snprintf(next, nn, "%s", link)
                               : snprintf(next, nn, "%s/%s", dir, link);
        if (w < 0 || (size_t)w >= nn - TMP_SUFFIX_MAX) {
            snprintf(why, wn, "path too long (through the symbolic link %s)", cur);
            *code = QC_ERR_ARG;
            return -1;
        }
        return 1;
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
    return 0;
}

/* The file cur (no symlink; basename base) is the target: its directory, canonical name and
 * the length limits of the temp file's name. 0, or -1 with why (and *code). */
static int finish_target(const char *cur, const char *dir, const char *base, pinfo *pi,
                         char *why, size_t wn, qc_status *code) {
    snprintf(pi->target, sizeof pi->target, "%s", cur);
    snprintf(pi->dir, sizeof pi->dir, "%s", dir);
    char faildir[PATH_MAX];
    if (outp_canon_parent(cur, pi->canon, sizeof pi->canon, faildir, sizeof faildir) != 0) {
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

/* Resolve path into pi. 0, or -1 with why[] describing the problem (no path prefix) and *code
 * the status. */
int outp_resolve_output(const char *path, pinfo *pi, char *why, size_t wn, qc_status *code) {
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
        if (fdn >= 0) return resolve_fd(fdn, pi, why, wn);
        char dir[PATH_MAX], base[PATH_MAX];
        if (outp_split_path(cur, dir, sizeof dir, base, sizeof base)) {
            snprintf(why, wn, "path too long");
            *code = QC_ERR_ARG;
            return -1;
        }
        if (!base[0] || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
            snprintf(why, wn, "names a directory, not a file");
            return -1;
        }
        char next[PATH_MAX];
        int k = classify(cur, dir, pi, next, sizeof next, why, wn, code);
        if (k < 0) return -1;
        if (k > 0) { /* a symbolic link: resolve what it points to */
            snprintf(cur, sizeof cur, "%s", next);
            continue;
        }
        return finish_target(cur, dir, base, pi, why, wn, code);
    }
}

/* The checks on a resolved output; 0 or -1 with why. */
int outp_check_output(const pinfo *pi, unsigned flags, char *why, size_t wn, qc_status *code) {
    *code = QC_ERR_IO;
    if ((flags & QC_OUT_REGULAR) && (pi->kind == PK_FD || pi->kind == PK_STREAM)) {
        snprintf(why, wn, "is not a regular file (%s): this output must be a regular file",
                 pi->kind == PK_FD ? "a file descriptor"
                 : S_ISFIFO(pi->mode) ? "a FIFO" : "a character device");
        *code = QC_ERR_ARG;
        return -1;
    }
    /* needs --force before the permission checks: the user is told what to pass first */
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
    return 0;
}

qc_status outp_out_err(qc_err *err, qc_status code, const char *option, const char *path,
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
    if (outp_resolve_output(path, &pi, why, sizeof why, &code) ||
        outp_check_output(&pi, flags, why, sizeof why, &code))
        return outp_out_err(err, code, option, path, why);
    return QC_OK;
}
