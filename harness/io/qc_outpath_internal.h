/* qc_outpath_internal.h — what the output-safety files share (harness-private).
 *
 * qc_outpath.h is implemented by concern:
 *   qc_outpath.c           path helpers, resolving one output path (symlinks followed,
 *                          descriptors, devices, FIFOs) and validating it; the --help text
 *   qc_outpath_golden.c    reading a golden's attributes in a child process (a corrupt file can
 *                          crash libhdf5)
 *   qc_outpath_registry.c  the run's registry of inputs / outputs / dump directories, identity
 *                          of every file and the collision checks (qc_outpath_verify)
 *   qc_outpath_write.c     the atomic writer (temp file + fsync + rename, or direct), the
 *                          temp-file table and the signal handlers that empty it
 *
 * Return convention: int functions 0 ok / -1 failed (with why[] or errno as stated);
 * qc_status functions QC_OK or the error with err filled.
 */
#ifndef QC_OUTPATH_INTERNAL_H
#define QC_OUTPATH_INTERNAL_H

#include "qc_outpath.h"

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

/* ===================================================================================== */
/* a resolved output path                                                                */
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

/* ---- qc_outpath.c ---------------------------------------------------------------------- */

/* dirname / basename without modifying path: "a/b" -> "a" "b"; "b" -> "." "b"; "/b" -> "/"
 * "b"; "a/" -> "a" "". 0, or -1 when a part does not fit. */
int outp_split_path(const char *path, char *dir, size_t dn, char *base, size_t bn);
/* realpath(dirname(path)) + "/" + basename(path) into out. 0, or -1 with errno set and
 * dir_out (may be NULL) holding the directory that failed. */
int outp_canon_parent(const char *path, char *out, size_t n, char *dir_out, size_t dn);
/* Resolve path into *pi (symlinks followed). 0, or -1 with why[] describing the problem (no
 * path prefix) and *code the status. */
int outp_resolve_output(const char *path, pinfo *pi, char *why, size_t wn, qc_status *code);
/* The checks on a resolved output for flags QC_OUT_*; 0, or -1 with why and *code. */
int outp_check_output(const pinfo *pi, unsigned flags, char *why, size_t wn, qc_status *code);
/* err = "<path>: <why> (<option>)" (option / path may be NULL or ""); returns code. */
qc_status outp_out_err(qc_err *err, qc_status code, const char *option, const char *path,
                       const char *why);

/* ---- qc_outpath_golden.c --------------------------------------------------------------- */

/* schema[i] (-1 when absent / not a golden) and model_path[i] (malloc'd, caller frees; NULL
 * when absent) of every paths[i], read in child processes (one that crashes on a corrupt file
 * is replaced by a new one starting after that file). */
void outp_peek_all(char *const *paths, int n, int *schema, char **model_path);

/* ---- qc_outpath_registry.c ------------------------------------------------------------- */

/* qc_out_open's last line of defence: after a successful qc_outpath_verify, refuse (QC_ERR_ARG,
 * "is the same file as ... an input of this run") an output that is a registered input;
 * QC_OK otherwise (and always before verify). */
qc_status outp_refuse_input(const pinfo *pi, const char *path, qc_err *err);

#endif /* QC_OUTPATH_INTERNAL_H */
