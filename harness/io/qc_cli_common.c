/* qc_cli_common.c — argv walker, profile flags, token lists, atomic writes, exit codes. */
#include "qc_cli_common.h"
#include "qc_outpath.h"
#include "qc/qc_file.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

/* ===================================================================================== */
/* argv walker                                                                           */
/* ===================================================================================== */

void qc_argp_init(qc_argp *a, const char *prog, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->prog = prog;
    a->argc = argc;
    a->argv = argv;
    a->i = 0;
}

int qc_argp_next(qc_argp *a) {
    a->i++;
    a->n_asked = 0;
    a->arg = NULL;
    a->flag[0] = '\0';
    a->inline_val = NULL;
    a->positional = 0;
    if (a->i >= a->argc) return 0;
    a->arg = a->argv[a->i];
    if (!a->no_more_flags && strcmp(a->arg, "--") == 0) {
        a->no_more_flags = 1;
        return qc_argp_next(a);
    }
    if (a->no_more_flags || a->arg[0] != '-' || a->arg[1] == '\0') {
        a->positional = 1;
        return 1;
    }
    const char *eq = strchr(a->arg, '=');
    size_t len = eq ? (size_t)(eq - a->arg) : strlen(a->arg);
    if (len >= sizeof a->flag) len = sizeof a->flag - 1;
    memcpy(a->flag, a->arg, len);
    a->flag[len] = '\0';
    if (eq) a->inline_val = eq + 1;
    return 1;
}

int qc_argp_is(qc_argp *a, const char *name) {
    if (a->n_asked < (int)(sizeof a->asked / sizeof a->asked[0])) a->asked[a->n_asked++] = name;
    return !a->positional && a->arg && strcmp(a->flag, name) == 0;
}

qc_status qc_argp_value(qc_argp *a, const char **val, qc_err *err) {
    if (a->inline_val) {
        *val = a->inline_val;
        return QC_OK;
    }
    if (a->i + 1 >= a->argc)
        return qc_errf(err, QC_ERR_ARG, "%s: missing value", a->flag);
    a->i++;
    *val = a->argv[a->i];
    return QC_OK;
}

qc_status qc_cli_parse_long(const char *s, const char *what, long min, long max, long *out,
                            qc_err *err) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (s[0] == '\0' || end == s || *end != '\0' || isspace((unsigned char)s[0]))
        return qc_errf(err, QC_ERR_ARG, "%s: '%s' is not an integer", what, s);
    if (errno == ERANGE || v < min || v > max)
        return qc_errf(err, QC_ERR_ARG, "%s: %s outside [%ld, %ld]", what, s, min, max);
    *out = v;
    return QC_OK;
}

qc_status qc_argp_int(qc_argp *a, long min, long max, int *out, qc_err *err) {
    const char *s = NULL;
    qc_status st = qc_argp_value(a, &s, err);
    if (st) return st;
    if (max > INT_MAX) max = INT_MAX;
    if (min < INT_MIN) min = INT_MIN;
    long v = 0;
    st = qc_cli_parse_long(s, a->flag, min, max, &v, err);
    if (st) return st;
    *out = (int)v;
    return QC_OK;
}

qc_status qc_argp_bool(qc_argp *a, qc_err *err) {
    if (a->inline_val)
        return qc_errf(err, QC_ERR_ARG, "%s: takes no value (got '%s')", a->flag, a->inline_val);
    return QC_OK;
}

qc_status qc_argp_unknown(const qc_argp *a, qc_err *err) {
    if (a->positional) return qc_errf(err, QC_ERR_ARG, "unexpected argument '%s'", a->arg);
    const char *near = qc_cli_nearest(a->flag, a->asked, a->n_asked);
    if (near) return qc_errf(err, QC_ERR_ARG, "unknown option '%s' (did you mean '%s'?)", a->arg, near);
    return qc_errf(err, QC_ERR_ARG, "unknown option '%s'", a->arg);
}

/* ===================================================================================== */
/* export profile flags                                                                  */
/* ===================================================================================== */

void qc_cli_profile_init(qc_cli_profile *pf) {
    memset(pf, 0, sizeof *pf);
    pf->dynamic = -1;
}

int qc_cli_profile_flag(qc_argp *a, qc_cli_profile *pf, qc_status *st, qc_err *err) {
    if (a->positional) return 0;
    if (qc_argp_is(a, "--profile")) {
        *st = qc_argp_value(a, &pf->profile_path, err);
    } else if (qc_argp_is(a, "--static") || qc_argp_is(a, "--dynamic")) {
        int want = qc_argp_is(a, "--dynamic");
        *st = qc_argp_bool(a, err);
        if (*st == QC_OK && pf->dynamic >= 0 && pf->dynamic != want)
            *st = qc_errf(err, QC_ERR_ARG, "--static and --dynamic are mutually exclusive");
        pf->dynamic = want;
    } else if (qc_argp_is(a, "--no-kv-cache")) {
        *st = qc_argp_bool(a, err);
        pf->no_kv_cache = 1;
    } else if (qc_argp_is(a, "--max-seq-len")) {
        *st = qc_argp_int(a, 1, 1 << 24, &pf->max_seq_len, err);
    } else if (qc_argp_is(a, "--max-context-len")) {
        *st = qc_argp_int(a, 1, 1 << 24, &pf->max_context_len, err);
    } else {
        return 0;
    }
    return 1;
}

qc_status qc_cli_profile_finish(const qc_cli_profile *pf, qc_profile *out, int *context_given,
                                qc_err *err) {
    qc_profile p;
    qc_profile_default(&p);
    int ctx_given = 0;
    if (pf->profile_path) {
        char *text = NULL;
        size_t len = 0;
        /* regular files only (a FIFO is refused, not waited on), at most 64 KiB */
        qc_status st = qc_read_small_file(pf->profile_path, QC_PROFILE_MAX_BYTES, &text, &len,
                                          err);
        if (st) return st;
        st = qc_profile_parse(text, len, pf->profile_path, &p, err);
        if (st == QC_OK) {
            /* qc_profile_parse defaults max_context_len to max_seq_len; we need to know whether
             * the file fixed it (either spelling), so that --max-seq-len can move an implicit
             * one. */
            cJSON *root = cJSON_ParseWithLength(text, len);
            if (root && (cJSON_GetObjectItemCaseSensitive(root, "max_context_len") ||
                         cJSON_GetObjectItemCaseSensitive(root, "get_max_context_len")))
                ctx_given = 1;
            cJSON_Delete(root);
        }
        free(text);
        if (st) return st;
    }
    if (pf->dynamic >= 0) p.enable_dynamic_shape = pf->dynamic;
    if (pf->no_kv_cache) p.use_kv_cache = 0;
    if (pf->max_seq_len > 0) p.max_seq_len = pf->max_seq_len;
    if (pf->max_context_len > 0) {
        p.max_context_len = pf->max_context_len;
        ctx_given = 1;
    }
    if (!ctx_given) p.max_context_len = p.max_seq_len;
    if (p.max_seq_len < 1)
        return qc_errf(err, QC_ERR_ARG, "%s: max_seq_len: %d < 1",
                       pf->profile_path ? pf->profile_path : "--max-seq-len", p.max_seq_len);
    if (p.max_context_len < 1)
        return qc_errf(err, QC_ERR_ARG, "%s: max_context_len: %d < 1",
                       pf->profile_path ? pf->profile_path : "--max-context-len",
                       p.max_context_len);
    *out = p;
    if (context_given) *context_given = ctx_given;
    return QC_OK;
}

const char *qc_cli_profile_str(const qc_profile *p, char *buf, size_t n) {
    snprintf(buf, n, "%s (max_seq_len %d, max_context_len %d)", qc_mode_str(qc_profile_mode(p)),
             p->max_seq_len, p->max_context_len);
    return buf;
}

/* ===================================================================================== */
/* token lists                                                                           */
/* ===================================================================================== */

/* An item for messages: at most 24 printable ASCII characters, others as '?'. */
static const char *clean_item(const char *s, size_t len, char *buf, size_t n) {
    size_t o = 0, i = 0;
    for (; i < len && o + 4 < n && i < 24; i++)
        buf[o++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (i < len) buf[o++] = '.', buf[o++] = '.', buf[o++] = '.';
    buf[o] = '\0';
    return buf;
}

static int all_digits(const char *s, size_t len, int hex) {
    if (len == 0) return 0;
    for (size_t i = 0; i < len; i++)
        if (!(hex ? isxdigit((unsigned char)s[i]) : isdigit((unsigned char)s[i]))) return 0;
    return 1;
}

/* One item (a maximal run of characters other than whitespace and ','): plain decimal digits
 * whose value is in [0, INT32_MAX]. `where` is "" or " (line L)". */
static qc_status parse_item(const char *s, size_t len, const char *what, int item_no,
                            const char *where, int32_t *out, qc_err *err) {
    char b[40];
    if (all_digits(s, len, 0)) {
        int64_t v = 0;
        for (size_t i = 0; i < len; i++) {
            v = v * 10 + (s[i] - '0');
            if (v > INT32_MAX)
                return qc_errf(err, QC_ERR_RANGE, "%s: item %d: token id %s outside [0, %d]%s",
                               what, item_no, clean_item(s, len, b, sizeof b), INT32_MAX, where);
        }
        *out = (int32_t)v;
        return QC_OK;
    }
    if ((s[0] == '+' || s[0] == '-') && all_digits(s + 1, len - 1, 0)) {
        int zero = 1;
        for (size_t i = 1; i < len; i++) zero &= s[i] == '0';
        if (s[0] == '-' && !zero)
            return qc_errf(err, QC_ERR_RANGE,
                           "%s: item %d: token id %s outside [0, %d] (negative)%s", what, item_no,
                           clean_item(s, len, b, sizeof b), INT32_MAX, where);
        return qc_errf(err, QC_ERR_ARG,
                       "%s: item %d: '%s' has a sign (token ids are plain decimal digits)%s", what,
                       item_no, clean_item(s, len, b, sizeof b), where);
    }
    if (len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && all_digits(s + 2, len - 2, 1))
        return qc_errf(err, QC_ERR_ARG,
                       "%s: item %d: '%s' is hexadecimal (token ids are decimal)%s", what, item_no,
                       clean_item(s, len, b, sizeof b), where);
    return qc_errf(err, QC_ERR_ARG, "%s: item %d: '%s' is not an integer%s", what, item_no,
                   clean_item(s, len, b, sizeof b), where);
}

/* The list grammar (qc_cli_common.h): items separated by one comma (whitespace, newlines
 * included, allowed around it) or by whitespace alone; leading / trailing whitespace is
 * ignored; an empty item (a leading or trailing comma, two commas with nothing or only
 * whitespace between them) is an error. with_lines: messages carry " (line L)". */
static qc_status parse_list(const char *text, const char *what, int with_lines, int32_t **out,
                            int *n, qc_err *err) {
    *out = NULL;
    *n = 0;
    int cap = 0, count = 0, line = 1;
    int32_t *ids = NULL;
    const char *p = text;
    char where[40] = "";
    qc_status st = QC_OK;
#define SET_WHERE(l) (with_lines ? (void)snprintf(where, sizeof where, " (line %d)", (l)) : (void)0)
#define SKIP_WS(any)                                                                       \
    do {                                                                                   \
        (any) = 0;                                                                         \
        while (*p && isspace((unsigned char)*p)) line += *p++ == '\n', (any) = 1;          \
    } while (0)
    int ws;
    SKIP_WS(ws);
    if (*p == ',') {
        SET_WHERE(line);
        st = qc_errf(err, QC_ERR_ARG, "%s: item 1 is empty: a leading comma%s", what, where);
        goto fail;
    }
    while (*p) {
        /* at the first character of an item */
        const char *start = p;
        int item_line = line;
        while (*p && !isspace((unsigned char)*p) && *p != ',') p++;
        size_t len = (size_t)(p - start);
        int item_no = count + 1;
        if (count >= QC_CLI_MAX_TOKENS) {
            st = qc_errf(err, QC_ERR_RANGE, "%s: more than %d token ids", what, QC_CLI_MAX_TOKENS);
            goto fail;
        }
        int32_t v = 0;
        SET_WHERE(item_line);
        if ((st = parse_item(start, len, what, item_no, where, &v, err))) goto fail;
        if (count == cap) {
            int ncap = cap ? cap * 2 : 64;
            int32_t *nids = realloc(ids, (size_t)ncap * sizeof *nids);
            if (!nids) {
                st = qc_errf(err, QC_ERR_OOM, "%s: out of memory at item %d", what, item_no);
                goto fail;
            }
            ids = nids;
            cap = ncap;
        }
        ids[count++] = v;
        /* the separator */
        SKIP_WS(ws);
        if (*p != ',') continue; /* whitespace-separated, or the end */
        int comma_line = line;
        p++;
        SKIP_WS(ws);
        if (!*p) {
            SET_WHERE(comma_line);
            st = qc_errf(err, QC_ERR_ARG, "%s: item %d is empty: a trailing comma%s", what,
                         count + 1, where);
            goto fail;
        }
        if (*p == ',') {
            SET_WHERE(line);
            st = qc_errf(err, QC_ERR_ARG, "%s: item %d is empty: %s%s", what, count + 1,
                         ws ? "only whitespace between two commas" : "two commas in a row",
                         where);
            goto fail;
        }
    }
#undef SKIP_WS
#undef SET_WHERE
    *out = ids;
    *n = count;
    return QC_OK;
fail:
    free(ids);
    return st;
}

qc_status qc_cli_parse_tokens(const char *text, const char *what, int32_t **out, int *n,
                              qc_err *err) {
    return parse_list(text, what, 0, out, n, err);
}

qc_status qc_cli_read_tokens_file(const char *path, int32_t **out, int *n, qc_err *err) {
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    *n = 0;
    /* regular files only: a FIFO is refused, never waited on */
    qc_status st = qc_read_small_file(path, QC_CLI_MAX_TOKENS_FILE_BYTES, &text, &len, err);
    if (st) return st;
    if (strlen(text) != len) {
        free(text);
        return qc_errf(err, QC_ERR_FORMAT, "%s: contains a NUL byte (not a text file of ids)",
                       path);
    }
    st = parse_list(text, path, 1, out, n, err);
    free(text);
    return st;
}

qc_status qc_cli_check_tokens(const int32_t *ids, int n, int vocab, const char *what,
                              qc_err *err) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return qc_errf(err, QC_ERR_RANGE,
                           "%s: item %d: token id %d outside the vocabulary [0, %d)", what, i + 1,
                           (int)ids[i], vocab);
    return QC_OK;
}

/* ===================================================================================== */
/* files                                                                                 */
/* ===================================================================================== */

qc_status qc_cli_read_file(const char *path, char **data, size_t *len, qc_err *err) {
    return qc_read_small_file(path, QC_CLI_MAX_INPUT_BYTES, data, len, err);
}

qc_status qc_cli_write_atomic(const char *path, const void *data, size_t n, qc_err *err) {
    return qc_out_write_file(path, data, n, QC_OUT_TEXT, err);
}

char *qc_cli_dirname(const char *path, char *buf, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(buf, n, ".");
    } else if (slash == path) {
        snprintf(buf, n, "/");
    } else {
        snprintf(buf, n, "%.*s", (int)(slash - path), path);
    }
    return buf;
}

qc_status qc_cli_check_writable(const char *path, qc_err *err) {
    return qc_outpath_validate(path, NULL, QC_OUT_TEXT, err);
}

/* Split an absolute path into components in place; returns the count (at most max). */
static int split_components(char *p, char **comp, int max) {
    int n = 0;
    for (char *s = strtok(p, "/"); s && n < max; s = strtok(NULL, "/")) comp[n++] = s;
    return n;
}

qc_status qc_cli_relpath(const char *target, const char *from_dir, char *buf, size_t n,
                         qc_err *err) {
    char t[PATH_MAX], f[PATH_MAX];
    if (!realpath(target, t))
        return qc_errf(err, QC_ERR_IO, "%s: cannot resolve: %s", target, strerror(errno));
    if (!realpath(from_dir, f)) {
        snprintf(buf, n, "%s", t); /* absolute when it cannot be made relative */
        return QC_OK;
    }
    char abs_t[PATH_MAX];
    snprintf(abs_t, sizeof abs_t, "%s", t);
    char *tc[512], *fc[512];
    int nt = split_components(t, tc, 512), nf = split_components(f, fc, 512);
    int common = 0;
    while (common < nt && common < nf && strcmp(tc[common], fc[common]) == 0) common++;
    char out[PATH_MAX];
    size_t o = 0;
    out[0] = '\0';
    for (int i = common; i < nf && o < sizeof out; i++)
        o += (size_t)snprintf(out + o, sizeof out - o, "%s..", o ? "/" : "");
    for (int i = common; i < nt && o < sizeof out; i++)
        o += (size_t)snprintf(out + o, sizeof out - o, "%s%s", o ? "/" : "", tc[i]);
    if (o == 0) snprintf(out, sizeof out, ".");
    if (o >= sizeof out || strlen(out) >= n) {
        if (strlen(abs_t) >= n)
            return qc_errf(err, QC_ERR_ARG, "%s: path too long", target);
        snprintf(buf, n, "%s", abs_t);
        return QC_OK;
    }
    snprintf(buf, n, "%s", out);
    return QC_OK;
}

/* ===================================================================================== */
/* exit codes                                                                            */
/* ===================================================================================== */

int qc_cli_exit_code(qc_status s) { return s == QC_OK ? QC_EXIT_PASS : QC_EXIT_ERROR; }

int qc_cli_fail(const char *prog, const qc_err *err) {
    if (err && err->code != QC_OK) {
        fprintf(stderr, "%s: %s\n", prog, err->msg);
        return qc_cli_exit_code(err->code);
    }
    fprintf(stderr, "%s: failed\n", prog);
    return QC_EXIT_ERROR;
}

/* Levenshtein distance of two short strings (99 past 32 characters). */
static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 32 || lb > 32) return 99;
    int d[33][33];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

const char *qc_cli_nearest(const char *s, const char *const *names, int n) {
    const char *best = NULL;
    int bd = 3;
    for (int i = 0; i < n; i++) {
        int d = edit_distance(s, names[i]);
        if (d == 0) return NULL;
        if (d < bd) bd = d, best = names[i];
    }
    return best;
}
