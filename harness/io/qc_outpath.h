/* qc_outpath.h — output-file safety for the `qwen-conform` subcommands: an output never
 * replaces an input or another output, every output path is validated before the work, and
 * every file is written atomically (or, for devices / FIFOs / stdout, directly).
 *
 * 1. The run's file registry (process-global, one command at a time):
 *
 *      qc_outpath_reset();
 *      qc_outpath_add_goldens(o.golden, 1);           every golden found + its model's files
 *      qc_outpath_add_input(o.policy_path, "--policy");
 *      qc_outpath_add_output(o.json_path, "--json", QC_OUT_TEXT);
 *      qc_outpath_add_output(o.junit_path, "--junit", QC_OUT_TEXT);
 *      qc_outpath_add_dump_dir(o.dump_dir, "--dump-actual");
 *      if (qc_outpath_verify(&err)) return qc_cli_fail(prog, &err);     exit 2, before any work
 *
 *    NULL paths are ignored, so optional options can be registered unconditionally. verify()
 *    validates every output (empty path, missing or non-directory parent, over-long path or
 *    file name, a directory, a read-only file (even as root), a block device or socket, an
 *    existing file for QC_OUT_NO_CLOBBER without QC_OUT_FORCE) and then refuses an output
 *    that is the same file as an input or as another output: same device + inode for existing
 *    files (so hard links and symlinks are caught), realpath(parent) + "/" + basename for
 *    files not yet created (so "./a/../a/x" == "a/x"). Streams (character devices, FIFOs,
 *    stdout / stderr) may be shared by several outputs: they are appended to, never replaced.
 *    Every message names the option, both paths and the role of the other file, e.g.
 *      "/t/r.json: is the same file as /t/fx/golden.h5 (golden, an input of this run):
 *       refusing to overwrite it (--json)".
 *    After verify() succeeds the inputs stay registered: qc_out_open() refuses to replace any
 *    of them (a last line of defence for outputs whose names are made during the run, such as
 *    --dump-actual files). qc_outpath_reset() clears everything.
 *
 * 2. Writing (every atomic write of the harness goes through here):
 *
 *      qc_out o;
 *      if (qc_out_open(&o, path, QC_OUT_TEXT, err)) return ...;
 *      qc_out_write(&o, buf, n, err) ...;         (or hand o.tmp to a library, e.g. H5Fcreate)
 *      if (failed) qc_out_abort(&o); else st = qc_out_commit(&o, err);
 *
 *    A regular (or not yet existing) target is written to "<target>.tmp.<pid>.<k>" in the
 *    target's directory (created O_EXCL, mode copied from the file it replaces), fsync'ed and
 *    renamed onto the target; the temp file is removed on every error path (write error,
 *    ENOSPC, EFBIG, fsync / rename failure) and by the signal handlers below. A symlink is
 *    followed: its final target is replaced in the target's own directory, the link stays.
 *    "-" (stdout), /dev/stdout, /dev/stderr, /dev/fd/N, character devices (/dev/null) and
 *    FIFOs are written directly, never renamed over. On stdout / stderr a broken pipe (EPIPE)
 *    just ends the output (the run goes on, `... | head` is fine).
 *
 * 3. qc_outpath_install_signal_handlers() (once, from main): SIGINT / SIGTERM / SIGHUP unlink
 *    every active temp file and re-raise the signal (exit status 128 + signo: 130 / 143 /
 *    129); signals the process was started with ignored stay ignored. SIGPIPE is ignored.
 *    The temp-file table is a fixed array read by the handler with async-signal-safe calls
 *    only (unlink, signal, raise). Single-threaded use (the writers run outside OpenMP).
 */
#ifndef QC_OUTPATH_H
#define QC_OUTPATH_H

#include <stddef.h>

#include "qc/qc_status.h"

/* Output flags. */
enum {
    QC_OUT_TEXT = 0,           /* a text report: "-", devices, FIFOs allowed (written directly) */
    QC_OUT_REGULAR = 1u << 0,  /* a regular file only (HDF5): "-", devices, FIFOs refused */
    QC_OUT_NO_CLOBBER = 1u << 1, /* an existing file is refused unless QC_OUT_FORCE */
    QC_OUT_FORCE = 1u << 2     /* with QC_OUT_NO_CLOBBER: replacing an existing file is fine */
};

/* ---- the run's registry ------------------------------------------------------------------ */

/* Forget every registered input, output and dump directory. */
void qc_outpath_reset(void);
/* A file the run reads; role names it in messages ("--policy", "golden", "--tokens-file").
 * A path that does not exist is still registered (by its would-be name). */
void qc_outpath_add_input(const char *path, const char *role);
/* Every regular file directly inside a model directory (config.json, *.safetensors, the
 * index, ...); role e.g. "--model" ("model file of --model" in messages). */
void qc_outpath_add_model_dir(const char *dir, const char *role);
/* Every golden (*.h5) qc_golden_find() finds under dir_or_file (role "golden"), and with
 * with_models each golden's model directory (its /model_path attribute, resolved like the
 * checker does). The attributes are read in a child process, so a corrupt golden (which can
 * crash libhdf5) is skipped here and reported by the run itself. */
void qc_outpath_add_goldens(const char *dir_or_file, int with_models);
/* An output of the run (option names it: "--json"); flags QC_OUT_*. */
void qc_outpath_add_output(const char *path, const char *option, unsigned flags);
/* --dump-actual DIR: refused when DIR is a registered golden directory, inside one, or the
 * directory of a registered golden file; DIR must be a directory or creatable (parent
 * exists). */
void qc_outpath_add_dump_dir(const char *dir, const char *option);
/* Validate every output and refuse collisions (see above). QC_OK or the first problem
 * (QC_ERR_ARG / QC_ERR_IO; the CLI exits 2). */
qc_status qc_outpath_verify(qc_err *err);

/* Validate one output path on its own (no registry): the checks of verify() for a single
 * output. option may be NULL (messages then start with the path). */
qc_status qc_outpath_validate(const char *path, const char *option, unsigned flags,
                              qc_err *err);

/* 1 when path is an existing HDF5 file with an integer /schema_version attribute (a golden);
 * *schema receives its value (may be NULL). Read in a child process. */
int qc_outpath_is_golden(const char *path, int *schema);

/* ---- writing ------------------------------------------------------------------------------ */

typedef struct {
    char path[4096];    /* as given (messages) */
    char target[4096];  /* the file replaced (symlinks followed); "" for a descriptor */
    char tmp[4096];     /* the temp file ("" when written directly) */
    int fd;             /* open descriptor (-1 when closed) */
    int direct;         /* 1: written in place (device, FIFO, stdout, /dev/fd/N) */
    int is_std;         /* 1: stdout or stderr (EPIPE ends the output quietly) */
    int broken;         /* 1: EPIPE seen on stdout / stderr */
    int failed;         /* 1: a write failed (commit refuses, removes the temp file) */
    int slot;           /* signal-table slot of tmp, -1 */
} qc_out;

/* Open an output (see above). Validates the path like qc_outpath_validate() and refuses a
 * registered input of the run. */
qc_status qc_out_open(qc_out *o, const char *path, unsigned flags, qc_err *err);
/* Write all n bytes (retries short writes and EINTR). On failure o->failed is set; the caller
 * calls qc_out_abort (qc_out_commit also refuses). */
qc_status qc_out_write(qc_out *o, const void *data, size_t n, qc_err *err);
/* Finish: direct -> close; atomic -> fsync, close, rename onto the target (and fsync the
 * directory). Any failure removes the temp file and leaves the target untouched. */
qc_status qc_out_commit(qc_out *o, qc_err *err);
/* Close and remove the temp file (safe to call twice, and after commit). */
void qc_out_abort(qc_out *o);
/* open + write + commit (abort on any error). */
qc_status qc_out_write_file(const char *path, const void *data, size_t n, unsigned flags,
                            qc_err *err);

/* ---- signals ------------------------------------------------------------------------------ */

/* See 3. above. Idempotent. */
void qc_outpath_install_signal_handlers(void);
/* Deferred signals, for writers of what a handler cannot remove (a temp directory tree):
 * between defer_signals(1) and (0) a SIGINT/SIGTERM/SIGHUP is only recorded; the writer polls
 * signal_pending() (the signal number, 0 if none) between files, removes its temp tree and calls
 * reraise(sig), which removes the registered temp files and ends the process with sig. */
void qc_outpath_defer_signals(int on);
int qc_outpath_signal_pending(void);
void qc_outpath_reraise(int sig);
/* Number of temp files currently registered for removal on a signal (tests). */
int qc_outpath_active_temps(void);

/* The "Output files" paragraph of every command's --help. */
extern const char qc_outpath_help[];

#endif /* QC_OUTPATH_H */
