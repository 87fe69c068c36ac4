/* qc_prefill.c — the export profile and the prefill controller (ExecuTorch TextPrefiller
 * semantics; see include/qc/qc_prefill.h). */
#include "qc/qc_prefill.h"
#include "qc/qc_file.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "qc_prefill_faults.h"
#include "qc_text.h"

/* ------------------------------------------------------------------------------------------ */
/* modes and profiles                                                                         */
/* ------------------------------------------------------------------------------------------ */

const char *qc_mode_str(qc_mode m) {
    switch (m) {
    case QC_MODE_STATIC: return "static";
    case QC_MODE_DYNAMIC: return "dynamic";
    case QC_MODE_NOKV: return "nokv";
    }
    return "?";
}

qc_status qc_mode_parse(const char *s, qc_mode *m, qc_err *err) {
    for (int i = 0; i < 3; i++)
        if (s && strcmp(s, qc_mode_str((qc_mode)i)) == 0) {
            *m = (qc_mode)i;
            return QC_OK;
        }
    return qc_errf(err, QC_ERR_ARG, "unknown mode '%s' (expected static, dynamic or nokv)",
                   s ? s : "(null)");
}

void qc_profile_default(qc_profile *p) {
    p->enable_dynamic_shape = 0; /* ExecuTorch: absent means false */
    p->use_kv_cache = 1;
    p->max_seq_len = 128;
    p->max_context_len = 128;
}

qc_mode qc_profile_mode(const qc_profile *p) {
    if (!p->use_kv_cache) return QC_MODE_NOKV;
    return p->enable_dynamic_shape ? QC_MODE_DYNAMIC : QC_MODE_STATIC;
}

void qc_profile_for_mode(qc_profile *p, qc_mode mode, int max_seq_len, int max_context_len) {
    p->enable_dynamic_shape = mode == QC_MODE_DYNAMIC;
    p->use_kv_cache = mode != QC_MODE_NOKV;
    p->max_seq_len = max_seq_len;
    p->max_context_len = max_context_len;
}

/* Read an optional boolean field (JSON true/false, or 0/1). */
static qc_status get_bool(const cJSON *root, const char *key, const char *path, int *out,
                          qc_err *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it) return QC_OK;
    if (cJSON_IsBool(it)) {
        *out = cJSON_IsTrue(it);
        return QC_OK;
    }
    if (cJSON_IsNumber(it) && (it->valuedouble == 0 || it->valuedouble == 1)) {
        *out = it->valuedouble != 0;
        return QC_OK;
    }
    return qc_errf(err, QC_ERR_FORMAT, "%s: %s: expected true or false", path, key);
}

/* Read an optional positive integer field; *present set when found. */
static qc_status get_pos_int(const cJSON *root, const char *key, const char *path, int *out,
                             int *present, qc_err *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    *present = 0;
    if (!it) return QC_OK;
    double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
    /* range first: casting an out-of-range double to an integer is undefined behaviour */
    if (!cJSON_IsNumber(it) || !(v >= 1 && v <= (double)(1 << 30)) || v != floor(v))
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s: expected a positive integer <= 2^30", path,
                       key);
    *out = (int)v;
    *present = 1;
    return QC_OK;
}

/* The keys a profile may hold: the short names and the ExecuTorch metadata method names. */
static const char *const PROFILE_KEYS[] = {"enable_dynamic_shape", "use_kv_cache",
                                           "max_seq_len",          "max_context_len",
                                           "get_max_seq_len",      "get_max_context_len"};
#define N_PROFILE_KEYS ((int)(sizeof PROFILE_KEYS / sizeof PROFILE_KEYS[0]))
#define PROFILE_KEYS_STR                                                                   \
    "enable_dynamic_shape, use_kv_cache, max_seq_len, max_context_len, get_max_seq_len, " \
    "get_max_context_len"

/* Optimal-string-alignment edit distance (a transposition counts 1), ignoring case (a key
 * that differs only in case is the closest match), capped: cap + 1 when it exceeds cap.
 * Strings longer than 63 are never close. */
static int edit_distance(const char *a0, const char *b0, int cap) {
    int la = (int)strlen(a0), lb = (int)strlen(b0);
    if (la > 63 || lb > 63 || la - lb > cap || lb - la > cap) return cap + 1;
    char a[64], b[64];
    for (int i = 0; i < la; i++) a[i] = (char)tolower((unsigned char)a0[i]);
    for (int j = 0; j < lb; j++) b[j] = (char)tolower((unsigned char)b0[j]);
    int d[64][64];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb] > cap ? cap + 1 : d[la][lb];
}

/* Every key must be a known one, and appear once. */
static qc_status check_keys(const cJSON *root, const char *path, qc_err *err) {
    int seen[N_PROFILE_KEYS] = {0};
    char kb[80];
    for (const cJSON *it = root->child; it; it = it->next) {
        const char *key = it->string ? it->string : "";
        int k = 0;
        while (k < N_PROFILE_KEYS && strcmp(key, PROFILE_KEYS[k]) != 0) k++;
        if (k < N_PROFILE_KEYS) {
            if (seen[k]++)
                return qc_errf(err, QC_ERR_FORMAT, "%s: key '%s' appears more than once", path,
                               key);
            continue;
        }
        int best = -1, best_d = 3;
        for (int j = 0; j < N_PROFILE_KEYS; j++) {
            int dist = edit_distance(key, PROFILE_KEYS[j], 2);
            if (dist < best_d) best_d = dist, best = j;
        }
        if (best >= 0)
            return qc_errf(err, QC_ERR_UNKNOWN,
                           "%s: unknown key '%s' (did you mean '%s'?); known keys: %s", path,
                           qc_text_clean(key, kb, sizeof kb), PROFILE_KEYS[best], PROFILE_KEYS_STR);
        return qc_errf(err, QC_ERR_UNKNOWN, "%s: unknown key '%s'; known keys: %s", path,
                       qc_text_clean(key, kb, sizeof kb), PROFILE_KEYS_STR);
    }
    return QC_OK;
}

/* A short name and its ExecuTorch method name (max_seq_len / get_max_seq_len): either, or both
 * with the same value. */
static qc_status get_len(const cJSON *root, const char *key, const char *et_key, const char *path,
                         int *out, int *present, qc_err *err) {
    int a = 0, b = 0, has_a = 0, has_b = 0;
    qc_status st;
    if ((st = get_pos_int(root, key, path, &a, &has_a, err)) ||
        (st = get_pos_int(root, et_key, path, &b, &has_b, err)))
        return st;
    if (has_a && has_b && a != b)
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s %d and %s %d disagree (give one)", path, key,
                       a, et_key, b);
    *present = has_a || has_b;
    if (*present) *out = has_a ? a : b;
    return QC_OK;
}

qc_status qc_profile_parse(const char *json, size_t len, const char *path, qc_profile *p,
                           qc_err *err) {
    qc_profile_default(p);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root)
        return qc_errf(err, QC_ERR_FORMAT, "%s: malformed JSON near byte %ld", path,
                       end ? (long)(end - json) : 0L);
    qc_status st = QC_OK;
    int has_seq = 0, has_ctx = 0;
    if (!cJSON_IsObject(root)) {
        st = qc_errf(err, QC_ERR_FORMAT, "%s: expected a JSON object", path);
        goto done;
    }
    /* a misspelt key would otherwise silently keep a default (e.g. static shape) */
    if ((st = check_keys(root, path, err))) goto done;
    /* Accept the ExecuTorch metadata method names as well as the short names. */
    if ((st = get_bool(root, "enable_dynamic_shape", path, &p->enable_dynamic_shape, err)) ||
        (st = get_bool(root, "use_kv_cache", path, &p->use_kv_cache, err)))
        goto done;
    if ((st = get_len(root, "max_seq_len", "get_max_seq_len", path, &p->max_seq_len, &has_seq,
                      err)))
        goto done;
    if ((st = get_len(root, "max_context_len", "get_max_context_len", path, &p->max_context_len,
                      &has_ctx, err)))
        goto done;
    if (!has_ctx) p->max_context_len = p->max_seq_len; /* ExecuTorch: context = seq if absent */
done:
    cJSON_Delete(root);
    if (st) qc_profile_default(p);
    return st;
}

qc_status qc_profile_load(const char *path, qc_profile *p, qc_err *err) {
    char *buf = NULL;
    size_t n = 0;
    /* regular files only, never blocking on a FIFO */
    qc_status st = qc_read_small_file(path, QC_PROFILE_MAX_BYTES, &buf, &n, err);
    if (st) {
        qc_profile_default(p);
        return st;
    }
    st = qc_profile_parse(buf, n, path, p, err);
    free(buf);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* the runner                                                                                 */
/* ------------------------------------------------------------------------------------------ */

struct qc_runner {
    qc_backend *be;          /* borrowed */
    qc_state *st;            /* borrowed */
    qc_profile prof;
    qc_mode mode;
    int vocab;               /* V */
    int32_t *history;        /* [max_context_len] every token consumed (no-KV replays it) */
    float *scratch_logits;   /* [max_context_len, V] no-KV: logits of a whole recomputation */
    long n_calls;            /* backend forward calls so far */
    qc_static_pos_fn static_pos; /* token i of a static chunk at pos: pos + i (a self-test
                                    variant through qc_runner_set_option) */
    qc_call call;            /* the options of every forward call (qc_runner_set_call) */
    int broken;              /* 1 after a failed forward call: the state may hold part of a
                                chunk, so prefill / decode refuse until qc_runner_reset */
};

qc_status qc_runner_create(qc_backend *be, const qc_profile *p, qc_state *st, qc_runner **out,
                           qc_err *err) {
    *out = NULL;
    if (p->max_seq_len < 1 || p->max_context_len < 1)
        return qc_errf(err, QC_ERR_ARG, "profile: max_seq_len and max_context_len must be >= 1");
    if (st->max_context_len < p->max_context_len)
        return qc_errf(err, QC_ERR_ARG, "state capacity %d < profile max_context_len %d",
                       st->max_context_len, p->max_context_len);
    qc_mode mode = qc_profile_mode(p);
    int need = mode == QC_MODE_NOKV ? p->max_context_len
               : mode == QC_MODE_DYNAMIC ? (p->max_seq_len < p->max_context_len ? p->max_seq_len
                                                                                : p->max_context_len)
                                         : 1;
    int cap = be->opts.max_tokens;
    if (be->max_tokens_per_call > 0 && be->max_tokens_per_call < cap) cap = be->max_tokens_per_call;
    if (cap < need)
        return qc_errf(err, QC_ERR_UNSUPPORTED,
                       "backend %s accepts %d tokens per call; %s mode needs %d", be->name, cap,
                       qc_mode_str(mode), need);
    if (be->max_context_len > 0 && be->max_context_len < p->max_context_len)
        return qc_errf(err, QC_ERR_UNSUPPORTED, "backend %s holds %d positions; the profile needs %d",
                       be->name, be->max_context_len, p->max_context_len);
    qc_runner *r = calloc(1, sizeof *r);
    if (!r) return qc_errf(err, QC_ERR_OOM, "runner: out of memory");
    r->be = be;
    r->call = qc_backend_call_defaults(&be->opts);
    r->static_pos = qc_static_pos_advance;
    r->st = st;
    r->prof = *p;
    r->mode = mode;
    r->vocab = be->model->cfg.vocab_size;
    r->history = calloc((size_t)p->max_context_len, sizeof(int32_t));
    if (mode == QC_MODE_NOKV)
        r->scratch_logits = malloc((size_t)p->max_context_len * r->vocab * sizeof(float));
    if (!r->history || (mode == QC_MODE_NOKV && !r->scratch_logits)) {
        qc_runner_destroy(r);
        return qc_errf(err, QC_ERR_OOM, "runner: out of memory");
    }
    *out = r;
    return QC_OK;
}

void qc_runner_destroy(qc_runner *r) {
    if (!r) return;
    free(r->history);
    free(r->scratch_logits);
    free(r);
}

qc_status qc_runner_set_option(qc_runner *r, const char *key, const char *value, qc_err *err) {
    if (!r) return qc_errf(err, QC_ERR_ARG, "runner option: no runner");
    return qc_prefill_fault_option(key, value, &r->static_pos, err);
}
void qc_runner_set_call(qc_runner *r, const qc_call *call) {
    r->call = call ? *call : qc_backend_call_defaults(&r->be->opts);
}
qc_status qc_runner_reset(qc_runner *r, qc_err *err) {
    qc_status st = qc_backend_reset(r->be, r->st, err);
    if (st == QC_OK) r->broken = 0;
    return st;
}
int qc_runner_pos(const qc_runner *r) { return r->st->pos; }
qc_mode qc_runner_mode(const qc_runner *r) { return r->mode; }
long qc_runner_calls(const qc_runner *r) { return r->n_calls; }

int32_t qc_argmax(const float *v, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* Validate a request before anything is touched. */
static qc_status check_request(const qc_runner *r, const int32_t *toks, int n, int start_pos,
                               qc_err *err) {
    if (n < 1 || !toks) return qc_errf(err, QC_ERR_ARG, "prefill: empty prompt");
    if (r->broken)
        return qc_errf(err, QC_ERR_ARG, "runner: a previous forward call failed at position %d; "
                       "qc_runner_reset before the next call", r->st->pos);
    if (start_pos != r->st->pos)
        return qc_errf(err, QC_ERR_ARG, "prefill: start_pos %d != current position %d",
                       start_pos, r->st->pos);
    if ((long)start_pos + n > r->prof.max_context_len)
        return qc_errf(err, QC_ERR_RANGE,
                       "prompt of %d tokens at start_pos %d exceeds max_context_len %d", n,
                       start_pos, r->prof.max_context_len);
    for (int i = 0; i < n; i++)
        if (toks[i] < 0 || toks[i] >= r->vocab)
            return qc_errf(err, QC_ERR_RANGE, "token %d (index %d) outside the vocabulary [0, %d)",
                           toks[i], i, r->vocab);
    return QC_OK;
}

static qc_status call(qc_runner *r, const int32_t *toks, int n, int pos, float *logits,
                      int all, qc_err *err) {
    r->n_calls++;
    return qc_backend_forward_call(r->be, &r->call, toks, n, pos, r->st, logits, all,
                                   err); /* the contract */
}

/* One chunk of at most max_seq_len tokens at position pos. logits_all: NULL or [n, V];
 * last: [V] (always written). */
static qc_status run_chunk(qc_runner *r, const int32_t *toks, int n, int pos, float *logits_all,
                           float *last, qc_err *err) {
    const size_t V = (size_t)r->vocab;
    qc_status st = QC_OK;
    switch (r->mode) {
    case QC_MODE_STATIC: /* one [1,1] call per token, position incremented */
        for (int i = 0; i < n && st == QC_OK; i++) {
            int p = r->static_pos(pos, i);
            float *dst = logits_all ? logits_all + (size_t)i * V : last;
            st = call(r, toks + i, 1, p, dst, 0, err);
            if (st == QC_OK && logits_all && i == n - 1) memcpy(last, dst, V * sizeof(float));
        }
        break;
    case QC_MODE_DYNAMIC: /* one call for the whole chunk */
        if (logits_all) {
            st = call(r, toks, n, pos, logits_all, 1, err);
            if (st == QC_OK) memcpy(last, logits_all + (size_t)(n - 1) * V, V * sizeof(float));
        } else {
            st = call(r, toks, n, pos, last, 0, err);
        }
        break;
    case QC_MODE_NOKV: { /* the whole sequence so far, from position 0 on a reset state */
        int total = pos + n;
        st = qc_backend_reset(r->be, r->st, err);
        if (st == QC_OK) st = call(r, r->history, total, 0, r->scratch_logits, 1, err);
        if (st == QC_OK) {
            if (logits_all)
                memcpy(logits_all, r->scratch_logits + (size_t)pos * V, (size_t)n * V * sizeof(float));
            memcpy(last, r->scratch_logits + (size_t)(total - 1) * V, V * sizeof(float));
        }
        break;
    }
    }
    return st;
}

qc_status qc_runner_prefill(qc_runner *r, const int32_t *prompt, int n, int start_pos,
                            float *logits_all, float *last_logits, int32_t *first_token,
                            qc_err *err) {
    qc_status st = check_request(r, prompt, n, start_pos, err);
    if (st) return st;
    const size_t V = (size_t)r->vocab;
    float *last = last_logits;
    float *own_last = NULL;
    if (!last) {
        own_last = malloc(V * sizeof(float));
        if (!own_last) return qc_errf(err, QC_ERR_OOM, "prefill: out of memory");
        last = own_last;
    }
    memcpy(r->history + start_pos, prompt, (size_t)n * sizeof(int32_t));
    /* Prompts longer than max_seq_len are cut into consecutive chunks (TextPrefiller). */
    for (int done = 0; done < n && st == QC_OK;) {
        int len = n - done < r->prof.max_seq_len ? n - done : r->prof.max_seq_len;
        float *la = logits_all ? logits_all + (size_t)done * V : NULL;
        st = run_chunk(r, prompt + done, len, start_pos + done, la, last, err);
        if (st != QC_OK) {
            /* the position stays after what was really consumed (the chunks before this
             * one); this chunk may have half-updated the state: no further call until reset */
            r->st->pos = start_pos + done;
            r->broken = 1;
            break;
        }
        done += len;
        r->st->pos = start_pos + done;
    }
    if (st == QC_OK && first_token) *first_token = qc_argmax(last, (int)V);
    free(own_last);
    return st;
}

qc_status qc_runner_decode(qc_runner *r, int32_t token, float *logits, qc_err *err) {
    int pos = r->st->pos;
    qc_status st = check_request(r, &token, 1, pos, err);
    if (st) return qc_err_prefix(err, st, "decode");
    r->history[pos] = token;
    if (r->mode == QC_MODE_NOKV) {
        st = qc_backend_reset(r->be, r->st, err);
        if (st == QC_OK) st = call(r, r->history, pos + 1, 0, r->scratch_logits, 1, err);
        if (st == QC_OK && logits)
            memcpy(logits, r->scratch_logits + (size_t)pos * r->vocab,
                   (size_t)r->vocab * sizeof(float));
    } else {
        st = call(r, &token, 1, pos, logits, 0, err);
    }
    if (st == QC_OK) r->st->pos = pos + 1;
    else r->broken = 1; /* the state may be half-updated: refuse until reset */
    return st;
}
