/* qc_cli_common.c — argv walker, profile flags, token lists, atomic writes, exit codes. */
#include "qc_cli_common.h"
#include "qc_outpath.h"

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

int qc_argp_is(const qc_argp *a, const char *name) {
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
        qc_status st = qc_cli_read_file(pf->profile_path, &text, &len, err);
        if (st) return st;
        st = qc_profile_parse(text, len, pf->profile_path, &p, err);
        if (st == QC_OK) {
            /* qc_profile_parse defaults max_context_len to max_seq_len; we need to know whether
             * the file fixed it, so that --max-seq-len can move an implicit one. */
            cJSON *root = cJSON_ParseWithLength(text, len);
            if (root && cJSON_GetObjectItemCaseSensitive(root, "max_context_len")) ctx_given = 1;
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

qc_status qc_cli_parse_tokens(const char *text, const char *what, int32_t **out, int *n,
                              qc_err *err) {
    *out = NULL;
    *n = 0;
    int cap = 0, count = 0;
    int32_t *ids = NULL;
    const char *p = text;
    for (;;) {
        while (*p && (isspace((unsigned char)*p) || *p == ',')) p++;
        if (!*p) break;
        const char *start = p;
        while (*p && !isspace((unsigned char)*p) && *p != ',') p++;
        size_t len = (size_t)(p - start);
        char item[32];
        int item_no = count + 1;
        if (len >= sizeof item) {
            free(ids);
            return qc_errf(err, QC_ERR_ARG, "%s: item %d: '%.20s...' is not a token id", what,
                           item_no, start);
        }
        memcpy(item, start, len);
        item[len] = '\0';
        char *end = NULL;
        errno = 0;
        long long v = strtoll(item, &end, 10);
        if (end == item || *end != '\0') {
            free(ids);
            return qc_errf(err, QC_ERR_ARG, "%s: item %d: '%s' is not an integer", what,
                           item_no, item);
        }
        if (v < 0 || v > INT32_MAX || errno == ERANGE) {
            free(ids);
            return qc_errf(err, QC_ERR_RANGE, "%s: item %d: token id %s outside [0, %d]", what,
                           item_no, item, INT32_MAX);
        }
        if (count == cap) {
            int ncap = cap ? cap * 2 : 64;
            int32_t *nids = realloc(ids, (size_t)ncap * sizeof *nids);
            if (!nids) {
                free(ids);
                return qc_errf(err, QC_ERR_OOM, "%s: out of memory at item %d", what, item_no);
            }
            ids = nids;
            cap = ncap;
        }
        ids[count++] = (int32_t)v;
    }
    *out = ids;
    *n = count;
    return QC_OK;
}

qc_status qc_cli_read_tokens_file(const char *path, int32_t **out, int *n, qc_err *err) {
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    *n = 0;
    qc_status st = qc_cli_read_file(path, &text, &len, err);
    if (st) return st;
    if (strlen(text) != len) {
        free(text);
        return qc_errf(err, QC_ERR_FORMAT, "%s: contains a NUL byte (not a text file of ids)",
                       path);
    }
    st = qc_cli_parse_tokens(text, path, out, n, err);
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
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return qc_errf(err, QC_ERR_IO, "%s: not a regular file", path);
    }
    size_t cap = (size_t)sb.st_size + 1;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return qc_errf(err, QC_ERR_OOM, "%s: out of memory (%zu bytes)", path, cap);
    }
    size_t got = fread(buf, 1, cap - 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return qc_errf(err, QC_ERR_IO, "%s: read error", path);
    }
    buf[got] = '\0';
    *data = buf;
    *len = got;
    return QC_OK;
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
