/* qc_cli_common.h — helpers shared by the `qwen-conform` subcommands: a small argv walker,
 * export-profile flags, token lists, file helpers and the qc_status -> exit code map. Output
 * safety (input / output collisions, atomic and direct writes) is in qc_outpath.h.
 *
 * Every fallible helper returns qc_status and fills `qc_err` with one message that names the
 * flag or the file and the offending item, e.g. "--tokens: item 3: 'x7' is not an integer" or
 * "prompt.txt: item 12: -4 is negative". The caller prints it with qc_cli_fail(), which
 * prefixes the program name ("qwen-conform record: ...") and returns QC_EXIT_ERROR.
 */
#ifndef QC_CLI_COMMON_H
#define QC_CLI_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "qc_cli.h"
#include "qc/qc_prefill.h"
#include "qc/qc_status.h"
#include "qc_outpath.h" /* output safety: registry of a run's inputs / outputs, qc_out_* */

/* ===================================================================================== */
/* argv walker                                                                           */
/* ===================================================================================== */

/* Walks argv[1..argc-1]. Flags are "--name VALUE" or "--name=VALUE"; anything not starting
 * with "-" (or a lone "-") is a positional argument; "--" ends flag parsing.
 *
 *   qc_argp a; qc_argp_init(&a, "qwen-conform record", argc, argv);
 *   while (qc_argp_next(&a)) {
 *       if (a.positional) ...a.arg...
 *       else if (qc_argp_is(&a, "--out")) st = qc_argp_value(&a, &out, err);
 *       else if (qc_argp_is(&a, "--decode")) st = qc_argp_int(&a, 0, 1 << 20, &n, err);
 *       else st = qc_argp_unknown(&a, err);
 *   }
 */
typedef struct {
    const char *prog;       /* program name for messages, e.g. "qwen-conform record" */
    int argc;               /* argv count */
    char **argv;            /* [argc] borrowed */
    int i;                  /* index of the current argument */
    const char *arg;        /* the current argument (as written) */
    char flag[64];          /* the flag name without "=VALUE" ("" for positionals) */
    const char *inline_val; /* the text after '=' in "--flag=VALUE", or NULL */
    int positional;         /* 1: the current argument is positional */
    int no_more_flags;      /* 1 after "--" */
    const char *asked[128]; /* the flags qc_argp_is was asked about for the current argument:
                               the command's options, for "did you mean" */
    int n_asked;
} qc_argp;

void qc_argp_init(qc_argp *a, const char *prog, int argc, char **argv);
/* Advance to the next argument; 0 at the end. */
int qc_argp_next(qc_argp *a);
/* 1 when the current argument is the flag `name` ("--out" matches "--out" and "--out=x"). */
int qc_argp_is(qc_argp *a, const char *name);
/* The flag's value (inline or the next argument). QC_ERR_ARG "--out: missing value". */
qc_status qc_argp_value(qc_argp *a, const char **val, qc_err *err);
/* The flag's value as an int in [min, max]. QC_ERR_ARG "--decode: 'x' is not an integer". */
qc_status qc_argp_int(qc_argp *a, long min, long max, int *out, qc_err *err);
/* A boolean flag must not carry "=VALUE". */
qc_status qc_argp_bool(qc_argp *a, qc_err *err);
/* QC_ERR_ARG "unknown option '--frobnicate'" / "unexpected argument 'x'". */
/* "unknown option '--goldne' (did you mean '--golden'?)": the nearest of the flags asked
 * about for this argument, when at most 2 edits away. */
qc_status qc_argp_unknown(const qc_argp *a, qc_err *err);

/* Parse a whole string as a decimal integer in [min, max]; `what` names it in messages. */
qc_status qc_cli_parse_long(const char *s, const char *what, long min, long max, long *out,
                            qc_err *err);

/* ===================================================================================== */
/* export profile flags                                                                  */
/* ===================================================================================== */

/* Collects `--profile F.json --static --dynamic --no-kv-cache --max-seq-len N
 * --max-context-len N`. The JSON file (if any) is applied first, then the flags override it;
 * fields given nowhere keep ExecuTorch's defaults (static shape, KV cache, max_seq_len 128,
 * max_context_len = max_seq_len). */
typedef struct {
    const char *profile_path;  /* --profile F.json, or NULL */
    int dynamic;               /* -1 not given, 0 --static, 1 --dynamic */
    int no_kv_cache;           /* 1: --no-kv-cache given */
    int max_seq_len;           /* 0: not given */
    int max_context_len;       /* 0: not given */
} qc_cli_profile;

void qc_cli_profile_init(qc_cli_profile *pf);
/* If the current argument is a profile flag, consume it (and its value) and return 1 with
 * *st set (QC_OK or the parse error); otherwise return 0 and leave *st alone. */
int qc_cli_profile_flag(qc_argp *a, qc_cli_profile *pf, qc_status *st, qc_err *err);
/* Resolve the collected flags into a profile. *context_given (may be NULL) is set to 1 when
 * max_context_len came from the flags or the JSON file, 0 when it is the default. */
qc_status qc_cli_profile_finish(const qc_cli_profile *pf, qc_profile *out, int *context_given,
                                qc_err *err);
/* "static", "dynamic" or "nokv", max_seq_len, max_context_len in one line, e.g.
 * "dynamic (max_seq_len 128, max_context_len 256)". Returns buf. */
const char *qc_cli_profile_str(const qc_profile *p, char *buf, size_t n);

/* ===================================================================================== */
/* token lists                                                                           */
/* ===================================================================================== */

/* At most this many ids in one list (the largest context qwen-conform runs). */
#define QC_CLI_MAX_TOKENS (1 << 24)
/* The largest --tokens-file / --history-file read. */
#define QC_CLI_MAX_TOKENS_FILE_BYTES ((size_t)256 << 20)

/* Parse a list of token ids: "1,2,3", "1, 2, 3", "1 2 3", one id per line, or lines of
 * comma-separated ids. Items are separated by ONE comma (whitespace, newlines included, may
 * surround it) or by whitespace alone; whitespace before the first and after the last item is
 * ignored. Every item must be plain decimal digits with a value in [0, INT32_MAX]. Refused,
 * naming the item (numbered from 1 over the whole text):
 *   an empty item        "--tokens: item 2 is empty: two commas in a row" ("1,,3"; also
 *                        "1, ,3", a leading ",1" or a trailing "1," comma), QC_ERR_ARG
 *   a sign               "--tokens: item 1: '+5' has a sign ..." ("+5", "-0"), QC_ERR_ARG
 *   a negative id        "--tokens: item 2: token id -4 outside [0, 2147483647] (negative)",
 *                        QC_ERR_RANGE
 *   hexadecimal          "--tokens: item 1: '0x1f' is hexadecimal ...", QC_ERR_ARG
 *   anything else        "--tokens: item 3: 'x3' is not an integer", QC_ERR_ARG
 *   overflow             "--tokens: item 1: token id 99999999999 outside [0, 2147483647]",
 *                        QC_ERR_RANGE
 *   > QC_CLI_MAX_TOKENS  QC_ERR_RANGE
 * `what` names the source in messages ("--tokens" or the file name). An empty or
 * whitespace-only text gives *n = 0 and *out = NULL (the caller decides whether that is an
 * error). *out is malloc'd. */
qc_status qc_cli_parse_tokens(const char *text, const char *what, int32_t **out, int *n,
                              qc_err *err);
/* Read a file and parse it as above; messages name the file and end with the line, e.g.
 * "prompt.txt: item 4: 'abc' is not an integer (line 2)". Only a regular file is read: a FIFO
 * or a device is refused without blocking ("prompt.txt: not a regular file (a FIFO)"); a NUL
 * byte is QC_ERR_FORMAT. */
qc_status qc_cli_read_tokens_file(const char *path, int32_t **out, int *n, qc_err *err);
/* Every id < vocab, else QC_ERR_RANGE "<what>: item 4: token id 600 outside the vocabulary
 * [0, 512)". */
qc_status qc_cli_check_tokens(const int32_t *ids, int n, int vocab, const char *what,
                              qc_err *err);

/* ===================================================================================== */
/* files                                                                                 */
/* ===================================================================================== */

/* The largest input file qc_cli_read_file reads (a policy, a bench baseline, config.json). */
#define QC_CLI_MAX_INPUT_BYTES ((size_t)256 << 20)
/* Read a whole file into a NUL-terminated malloc'd buffer (*len excludes the NUL) through
 * qc_read_small_file (include/qc/qc_file.h): a regular file of at most QC_CLI_MAX_INPUT_BYTES;
 * a FIFO, a device or a directory is refused without blocking, e.g.
 * "pol.json: not a regular file (a FIFO)". */
qc_status qc_cli_read_file(const char *path, char **data, size_t *len, qc_err *err);
/* Write data atomically through qc_out_write_file (harness/io/qc_outpath.h): a temp file in the
 * target's directory, fsync, rename; "-", devices and FIFOs are written directly; on any
 * failure the temp file is removed and path is untouched. */
qc_status qc_cli_write_atomic(const char *path, const void *data, size_t n, qc_err *err);
/* QC_OK when `path` is acceptable as an output (qc_outpath_validate: not empty, its directory
 * exists and is writable, not a directory, not read-only, not over-long), checked before a
 * long computation so that it fails early. Messages start with the path. */
qc_status qc_cli_check_writable(const char *path, qc_err *err);
/* The directory part of path ("." when none) into buf. Returns buf. */
char *qc_cli_dirname(const char *path, char *buf, size_t n);
/* `target` expressed relative to directory `from_dir` (both resolved with realpath; target
 * must exist). Falls back to target's absolute path if resolution fails. */
qc_status qc_cli_relpath(const char *target, const char *from_dir, char *buf, size_t n,
                         qc_err *err);

/* ===================================================================================== */
/* exit codes                                                                            */
/* ===================================================================================== */

/* QC_OK -> QC_EXIT_PASS; every error status (usage, I/O, format, shape, range, ...) ->
 * QC_EXIT_ERROR. */
int qc_cli_exit_code(qc_status s);
/* Print "<prog>: <err->msg>" on stderr and return qc_cli_exit_code(err->code). */
int qc_cli_fail(const char *prog, const qc_err *err);

/* "Did you mean": the name among names[0..n) nearest to s by edit distance (Levenshtein), when
 * at most 2 edits away (and s is not one of them), else NULL. */
const char *qc_cli_nearest(const char *s, const char *const *names, int n);

#endif /* QC_CLI_COMMON_H */
