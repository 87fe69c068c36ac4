/* qc_policy.c — tolerance policy: parse (cJSON), built-in defaults, lookup. */
#include "qc_policy.h"

#include "qc_cli_common.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Built-in defaults                                                                         */
/* ---------------------------------------------------------------------------------------- */

/* The same numbers as fixtures/tolerances.json (derived there from measured noise; see
 * fixtures/tolerances-measurements.json). Used when no policy file applies. */
static const char builtin_json[] =
    "{\"schema_version\": 1,"
    " \"description\": \"built-in defaults (= fixtures/tolerances.json)\","
    " \"defaults\": {"
    "  \"logits\":           {\"atol\": 0.001, \"rtol\": 0.001, \"max_kl\": 5e-08},"
    "  \"hidden\":           {\"atol\": 0.0005, \"rtol\": 0.0005},"
    "  \"k_cache\":          {\"atol\": 0.0005, \"rtol\": 0.001},"
    "  \"v_cache\":          {\"atol\": 0.0005, \"rtol\": 0.0005},"
    "  \"conv_state\":       {\"atol\": 0.0002, \"rtol\": 0.0002},"
    "  \"recurrent_state\":  {\"atol\": 0.0001, \"rtol\": 0.0005}"
    " }}";

/* ---------------------------------------------------------------------------------------- */
/* Types                                                                                     */
/* ---------------------------------------------------------------------------------------- */

typedef struct {
    int has_atol, has_rtol, has_kl; /* which fields the entry sets */
    qc_tol t;
} tol_entry;

typedef struct {
    char *name;                    /* backend name */
    tol_entry cls[QC_TC_COUNT];    /* per class (has_* 0 when not given) */
} backend_entry;

enum { SEL_CASE, SEL_TENSOR, SEL_BACKEND, SEL_MODE, SEL_CHECK, SEL_N };
static const char *const sel_names[SEL_N] = {"case", "tensor", "backend", "mode", "check"};

typedef struct {
    char *sel[SEL_N];     /* selector strings (NULL = any) */
    regex_t re[SEL_N];    /* compiled ^(sel)$ */
    int re_ok[SEL_N];     /* 1 when re[] compiled */
    tol_entry tol;        /* fields set */
    char *reason;         /* required */
} override_entry;

struct qc_policy {
    char source[1024];           /* file path or "built-in" */
    char notes[1024];            /* command-line changes ("--atol logits=0.01, ...") */
    char described[2100];        /* source + notes (qc_policy_describe) */
    char *description;           /* the file's "description" (NULL: none) */
    char *measurements;          /* the file's "measurements" (NULL: none) */
    qc_tol defaults[QC_TC_COUNT];
    int n_backends;
    backend_entry *backends;     /* [n_backends] */
    int n_overrides;
    override_entry *overrides;   /* [n_overrides] */
    double tie_margin;           /* < 0: 2 x logits atol */
    int has_tier;                /* 1: tier in force (qc_policy_set_tier) */
    qc_tier_gate tier;
};

/* ---------------------------------------------------------------------------------------- */
/* Parsing                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static qc_status get_num(const cJSON *obj, const char *key, const char *path, const char *ctx,
                         int *has, double *out, int allow_negative, qc_err *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    *has = 0;
    if (!it) return QC_OK;
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) ||
        (!allow_negative && it->valuedouble < 0.0))
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s.%s: must be a %snumber", path, ctx, key,
                       allow_negative ? "" : "non-negative ");
    *has = 1;
    *out = it->valuedouble;
    return QC_OK;
}

static qc_status parse_tol(const cJSON *obj, const char *path, const char *ctx, tol_entry *e,
                           qc_err *err) {
    memset(e, 0, sizeof *e);
    e->t.max_kl = -1.0;
    if (!cJSON_IsObject(obj)) return qc_errf(err, QC_ERR_FORMAT, "%s: %s: must be an object", path, ctx);
    qc_status s;
    if ((s = get_num(obj, "atol", path, ctx, &e->has_atol, &e->t.atol, 0, err))) return s;
    if ((s = get_num(obj, "rtol", path, ctx, &e->has_rtol, &e->t.rtol, 0, err))) return s;
    if ((s = get_num(obj, "max_kl", path, ctx, &e->has_kl, &e->t.max_kl, 1, err))) return s;
    return QC_OK;
}

static void apply(qc_tol *t, const tol_entry *e) {
    if (e->has_atol) t->atol = e->t.atol;
    if (e->has_rtol) t->rtol = e->t.rtol;
    if (e->has_kl) t->max_kl = e->t.max_kl;
}

/* A class-keyed object: every key must be a class name, every entry's keys atol / rtol /
 * max_kl (with defaults merged over the built-in ones, a typo'd field would otherwise be a
 * silent no-op). */
static qc_status parse_class_map(const cJSON *obj, const char *path, const char *ctx,
                                 tol_entry *out, int require_all, qc_err *err) {
    if (!cJSON_IsObject(obj)) return qc_errf(err, QC_ERR_FORMAT, "%s: %s: must be an object", path, ctx);
    for (int c = 0; c < QC_TC_COUNT; c++) memset(&out[c], 0, sizeof out[c]);
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        qc_tclass c;
        char sub[256];
        if (qc_tclass_parse(it->string, &c) != 0)
            return qc_errf(err, QC_ERR_FORMAT,
                           "%s: %s: unknown tensor class \"%s\" (logits, hidden, k_cache, "
                           "v_cache, conv_state, recurrent_state)", path, ctx, it->string);
        snprintf(sub, sizeof sub, "%s.%s", ctx, it->string);
        qc_status s = parse_tol(it, path, sub, &out[c], err);
        if (s) return s;
        const cJSON *f;
        cJSON_ArrayForEach(f, it) {
            if (strcmp(f->string, "atol") && strcmp(f->string, "rtol") &&
                strcmp(f->string, "max_kl"))
                return qc_errf(err, QC_ERR_FORMAT, "%s: %s: unknown key \"%s\" (atol, rtol, "
                               "max_kl)", path, sub, f->string);
        }
        if (require_all && !(out[c].has_atol && out[c].has_rtol))
            return qc_errf(err, QC_ERR_FORMAT, "%s: %s: needs both atol and rtol", path, sub);
    }
    if (require_all)
        for (int c = 0; c < QC_TC_COUNT; c++)
            if (!out[c].has_atol)
                return qc_errf(err, QC_ERR_FORMAT, "%s: %s: missing class \"%s\"", path, ctx,
                               qc_tclass_str((qc_tclass)c));
    return QC_OK;
}

static qc_status parse_override(const cJSON *o, int idx, const char *path, override_entry *e,
                                qc_err *err) {
    char ctx[64];
    snprintf(ctx, sizeof ctx, "overrides[%d]", idx);
    if (!cJSON_IsObject(o)) return qc_errf(err, QC_ERR_FORMAT, "%s: %s: must be an object", path, ctx);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "reason");
    if (!cJSON_IsString(r) || !r->valuestring || !r->valuestring[0])
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s: \"reason\" (a non-empty string) is required",
                       path, ctx);
    e->reason = strdup(r->valuestring);
    if (!e->reason) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    for (int k = 0; k < SEL_N; k++) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, sel_names[k]);
        if (!s) continue;
        if (!cJSON_IsString(s) || !s->valuestring)
            return qc_errf(err, QC_ERR_FORMAT, "%s: %s.%s: must be a string", path, ctx,
                           sel_names[k]);
        /* glibc's regcomp is exponential on stacked repeat operators ("a++++..."): bound the
         * selector before compiling it (a tensor / case selector never needs more). */
        size_t n_rep = 0, slen = strlen(s->valuestring);
        for (const char *q = s->valuestring; *q; q++) n_rep += strchr("*+?{", *q) != NULL;
        if (slen > 256 || n_rep > 8)
            return qc_errf(err, QC_ERR_FORMAT,
                           "%s: %s.%s: selector too complex (%zu bytes, %zu repeat operators; "
                           "at most 256 and 8)", path, ctx, sel_names[k], slen, n_rep);
        e->sel[k] = strdup(s->valuestring);
        if (!e->sel[k]) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
        size_t L = strlen(s->valuestring) + 8;
        char *pat = malloc(L);
        if (!pat) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
        snprintf(pat, L, "^(%s)$", s->valuestring);
        int rc = regcomp(&e->re[k], pat, REG_EXTENDED | REG_NOSUB);
        free(pat);
        if (rc != 0) {
            char m[256];
            regerror(rc, &e->re[k], m, sizeof m);
            return qc_errf(err, QC_ERR_FORMAT, "%s: %s.%s: bad regex \"%s\": %s", path, ctx,
                           sel_names[k], s->valuestring, m);
        }
        e->re_ok[k] = 1;
    }
    /* known keys only: a typo ("tensr") would silently widen the override */
    const cJSON *it;
    cJSON_ArrayForEach(it, o) {
        int known = !strcmp(it->string, "reason") || !strcmp(it->string, "atol") ||
                    !strcmp(it->string, "rtol") || !strcmp(it->string, "max_kl");
        for (int k = 0; k < SEL_N; k++) known |= !strcmp(it->string, sel_names[k]);
        if (!known)
            return qc_errf(err, QC_ERR_FORMAT, "%s: %s: unknown key \"%s\"", path, ctx,
                           it->string);
    }
    qc_status s = parse_tol(o, path, ctx, &e->tol, err);
    if (s) return s;
    if (!e->tol.has_atol && !e->tol.has_rtol && !e->tol.has_kl)
        return qc_errf(err, QC_ERR_FORMAT, "%s: %s: sets none of atol, rtol, max_kl", path, ctx);
    return QC_OK;
}

/* The top level of a policy document: an object, schema_version 1, only known keys; the
 * free texts (description, measurements: copied into p; source) must be strings. */
static qc_status parse_top_level(const cJSON *root, const char *path, qc_policy *p,
                                 qc_err *err) {
    if (!cJSON_IsObject(root))
        return qc_errf(err, QC_ERR_FORMAT, "%s: top level must be an object", path);
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(root, "schema_version");
    if (!cJSON_IsNumber(sv) || sv->valuedouble != 1.0)
        return qc_errf(err, QC_ERR_FORMAT, "%s: schema_version must be 1", path);
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        static const char *const known[] = {"schema_version", "description", "measurements",
                                            "defaults",       "backends",    "overrides",
                                            "tie_margin",     "comment",     "source"};
        int ok = 0;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) ok |= !strcmp(it->string, known[k]);
        if (!ok)
            return qc_errf(err, QC_ERR_FORMAT, "%s: unknown top-level key \"%s\"", path,
                           it->string);
    }
    static const char *const texts[] = {"description", "measurements", "source"};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, texts[k]);
        if (t && !cJSON_IsString(t))
            return qc_errf(err, QC_ERR_FORMAT, "%s: %s: must be a string", path, texts[k]);
        if (t && k < 2 && !(*(k == 0 ? &p->description : &p->measurements) = strdup(t->valuestring)))
            return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    }
    return QC_OK;
}

/* "defaults" (required without a base policy; on top of base's when given) and "tie_margin". */
static qc_status parse_defaults(const cJSON *root, const char *path, const qc_policy *base,
                                qc_policy *p, qc_err *err) {
    qc_status s;
    tol_entry tmp[QC_TC_COUNT];
    const cJSON *def = cJSON_GetObjectItemCaseSensitive(root, "defaults");
    for (int c = 0; c < QC_TC_COUNT; c++) {
        if (base) {
            p->defaults[c] = base->defaults[c];
        } else {
            memset(&p->defaults[c], 0, sizeof p->defaults[c]);
            p->defaults[c].max_kl = -1.0;
        }
    }
    if (!def && !base)
        return qc_errf(err, QC_ERR_FORMAT, "%s: \"defaults\" is required", path);
    if (def) {
        if ((s = parse_class_map(def, path, "defaults", tmp, base == NULL, err))) return s;
        for (int c = 0; c < QC_TC_COUNT; c++) apply(&p->defaults[c], &tmp[c]);
    }
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(root, "tie_margin");
    if (tm) {
        if (!cJSON_IsNumber(tm) || !(tm->valuedouble >= 0.0))
            return qc_errf(err, QC_ERR_FORMAT, "%s: tie_margin must be a non-negative number",
                           path);
        p->tie_margin = tm->valuedouble;
    }
    return QC_OK;
}

/* "backends" (optional): an object of per-backend class maps. */
static qc_status parse_backends(const cJSON *root, const char *path, qc_policy *p,
                                qc_err *err) {
    qc_status s;
    const cJSON *it;
    const cJSON *be = cJSON_GetObjectItemCaseSensitive(root, "backends");
    if (!be) return QC_OK;
    if (!cJSON_IsObject(be))
        return qc_errf(err, QC_ERR_FORMAT, "%s: backends: must be an object", path);
    int n = cJSON_GetArraySize(be);
    p->backends = calloc((size_t)(n > 0 ? n : 1), sizeof *p->backends);
    if (!p->backends) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    cJSON_ArrayForEach(it, be) {
        backend_entry *b = &p->backends[p->n_backends++];
        b->name = strdup(it->string);
        char ctx[160];
        snprintf(ctx, sizeof ctx, "backends.%s", it->string);
        if (!b->name) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
        if ((s = parse_class_map(it, path, ctx, b->cls, 0, err))) return s;
    }
    return QC_OK;
}

/* "overrides" (optional): an array of overrides. */
static qc_status parse_overrides(const cJSON *root, const char *path, qc_policy *p,
                                 qc_err *err) {
    qc_status s;
    const cJSON *it;
    const cJSON *ov = cJSON_GetObjectItemCaseSensitive(root, "overrides");
    if (!ov) return QC_OK;
    if (!cJSON_IsArray(ov))
        return qc_errf(err, QC_ERR_FORMAT, "%s: overrides: must be an array", path);
    int n = cJSON_GetArraySize(ov);
    p->overrides = calloc((size_t)(n > 0 ? n : 1), sizeof *p->overrides);
    if (!p->overrides) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    int i = 0;
    cJSON_ArrayForEach(it, ov) {
        p->n_overrides = i + 1;
        if ((s = parse_override(it, i, path, &p->overrides[i], err))) return s;
        i++;
    }
    return QC_OK;
}

/* base == NULL: the built-in policy itself (every class required); else a file merged over
 * base's defaults. */
static qc_status parse_impl(const char *json, size_t len, const char *path,
                            const qc_policy *base, qc_policy **out, qc_err *err) {
    *out = NULL;
    qc_policy *p = calloc(1, sizeof *p);
    if (!p) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    snprintf(p->source, sizeof p->source, "%s", path);
    snprintf(p->described, sizeof p->described, "%s", path);
    p->tie_margin = -1.0;
    char *text = malloc(len + 1);
    if (!text) {
        free(p);
        return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    }
    memcpy(text, json, len);
    text[len] = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 0);
    qc_status s = QC_OK;
    if (!root)
        s = qc_errf(err, QC_ERR_FORMAT, "%s: JSON parse error at byte %ld", path,
                    end ? (long)(end - text) : -1L);
    else if (!(s = parse_top_level(root, path, p, err)) &&
             !(s = parse_defaults(root, path, base, p, err)) &&
             !(s = parse_backends(root, path, p, err)))
        s = parse_overrides(root, path, p, err);
    cJSON_Delete(root);
    free(text);
    if (s != QC_OK) {
        qc_policy_free(p);
        return s;
    }
    *out = p;
    return QC_OK;
}

qc_status qc_policy_parse(const char *json, size_t len, const char *path, qc_policy **out,
                          qc_err *err) {
    *out = NULL;
    qc_policy *base = NULL;
    qc_status s = qc_policy_builtin(&base, err);
    if (s) return s;
    s = parse_impl(json, len, path, base, out, err);
    qc_policy_free(base);
    return s;
}

qc_status qc_policy_load(const char *path, qc_policy **out, qc_err *err) {
    *out = NULL;
    char *buf = NULL;
    size_t n = 0;
    qc_status s = qc_cli_read_file(path, &buf, &n, err);
    if (s) return s;
    s = qc_policy_parse(buf, n, path, out, err);
    free(buf);
    return s;
}

qc_status qc_policy_builtin(qc_policy **out, qc_err *err) {
    return parse_impl(builtin_json, sizeof builtin_json - 1, "built-in", NULL, out, err);
}

void qc_policy_free(qc_policy *p) {
    if (!p) return;
    for (int i = 0; i < p->n_backends; i++) free(p->backends[i].name);
    free(p->backends);
    for (int i = 0; i < p->n_overrides; i++) {
        override_entry *e = &p->overrides[i];
        for (int k = 0; k < SEL_N; k++) {
            free(e->sel[k]);
            if (e->re_ok[k]) regfree(&e->re[k]);
        }
        free(e->reason);
    }
    free(p->overrides);
    free(p->description);
    free(p->measurements);
    free(p);
}

/* ---------------------------------------------------------------------------------------- */
/* Lookup                                                                                    */
/* ---------------------------------------------------------------------------------------- */

const char *qc_policy_source(const qc_policy *p) { return p->source; }
int qc_policy_n_overrides(const qc_policy *p) { return p->n_overrides; }

double qc_policy_tie_margin(const qc_policy *p) {
    return p->tie_margin >= 0.0 ? p->tie_margin : 2.0 * p->defaults[QC_TC_LOGITS].atol;
}

static int sel_match(const override_entry *e, int k, const char *subject) {
    if (!e->sel[k]) return 1;
    if (!subject) return 0;
    if (strcmp(e->sel[k], subject) == 0) return 1;
    return e->re_ok[k] && regexec(&e->re[k], subject, 0, NULL, 0) == 0;
}

void qc_policy_lookup(const qc_policy *p, qc_tclass cls, const char *backend, const char *mode,
                      const char *check, const char *case_id, const char *tensor, qc_tol *out,
                      const char **reason) {
    *out = p->defaults[cls];
    if (reason) *reason = NULL;
    for (int i = 0; backend && i < p->n_backends; i++)
        if (strcmp(p->backends[i].name, backend) == 0) apply(out, &p->backends[i].cls[cls]);
    /* bare case name: the part after the last '/' of "<stem>/<case>" */
    const char *bare = NULL;
    if (case_id) {
        const char *sl = strrchr(case_id, '/');
        bare = sl ? sl + 1 : case_id;
    }
    for (int i = 0; i < p->n_overrides; i++) {
        const override_entry *e = &p->overrides[i];
        if (!(sel_match(e, SEL_CASE, case_id) || sel_match(e, SEL_CASE, bare))) continue;
        if (!(sel_match(e, SEL_TENSOR, tensor) || sel_match(e, SEL_TENSOR, qc_tclass_str(cls))))
            continue;
        if (!sel_match(e, SEL_BACKEND, backend) || !sel_match(e, SEL_MODE, mode) ||
            !sel_match(e, SEL_CHECK, check))
            continue;
        apply(out, &e->tol);
        if (reason) *reason = e->reason;
    }
    if (p->has_tier) {
        const qc_tol *f = &p->tier.floor[cls];
        if (out->atol < f->atol) out->atol = f->atol;
        if (out->rtol < f->rtol) out->rtol = f->rtol;
        if (f->max_kl >= 0.0 && out->max_kl >= 0.0 && out->max_kl < f->max_kl)
            out->max_kl = f->max_kl;
    }
}

void qc_policy_set_tier(qc_policy *p, const qc_tier_gate *g, double tie) {
    double cur = qc_policy_tie_margin(p);
    p->tier = *g;
    p->has_tier = 1;
    for (int c = 0; c < QC_TC_COUNT; c++) {     /* the defaults too: what --print shows */
        qc_tol *d = &p->defaults[c];
        const qc_tol *f = &g->floor[c];
        if (d->atol < f->atol) d->atol = f->atol;
        if (d->rtol < f->rtol) d->rtol = f->rtol;
        if (f->max_kl >= 0.0 && d->max_kl >= 0.0 && d->max_kl < f->max_kl) d->max_kl = f->max_kl;
    }
    p->tie_margin = tie > cur ? tie : cur;
}

const qc_tier_gate *qc_policy_tier(const qc_policy *p) { return p->has_tier ? &p->tier : NULL; }

/* ---------------------------------------------------------------------------------------- */
/* Command-line changes, introspection, --print                                              */
/* ---------------------------------------------------------------------------------------- */

qc_tol qc_policy_default(const qc_policy *p, qc_tclass cls) { return p->defaults[cls]; }

qc_status qc_policy_set_default(qc_policy *p, qc_tclass cls, const char *field, double value,
                                qc_err *err) {
    if (!strcmp(field, "max_kl")) {
        if (!isfinite(value)) return qc_errf(err, QC_ERR_ARG, "max_kl: must be a finite number");
        p->defaults[cls].max_kl = value;
        return QC_OK;
    }
    int a = !strcmp(field, "atol");
    if (!a && strcmp(field, "rtol"))
        return qc_errf(err, QC_ERR_ARG, "unknown tolerance field '%s' (atol, rtol, max_kl)", field);
    if (!isfinite(value) || value < 0.0)
        return qc_errf(err, QC_ERR_ARG, "%s: must be a non-negative number", field);
    if (a)
        p->defaults[cls].atol = value;
    else
        p->defaults[cls].rtol = value;
    return QC_OK;
}

void qc_policy_note(qc_policy *p, const char *note) {
    size_t k = strlen(p->notes);
    snprintf(p->notes + k, sizeof p->notes - k, "%s%s", k ? " " : "", note);
    snprintf(p->described, sizeof p->described, "%s + %s", p->source, p->notes);
}

const char *qc_policy_describe(const qc_policy *p) { return p->described; }

int qc_policy_override_matches(const qc_policy *p, int i, const char *case_id,
                               const char *tensor, qc_tclass cls) {
    if (i < 0 || i >= p->n_overrides) return 0;
    const override_entry *e = &p->overrides[i];
    const char *bare = NULL;
    if (case_id) {
        const char *sl = strrchr(case_id, '/');
        bare = sl ? sl + 1 : case_id;
    }
    if (!(sel_match(e, SEL_CASE, case_id) || sel_match(e, SEL_CASE, bare))) return 0;
    return sel_match(e, SEL_TENSOR, tensor) || sel_match(e, SEL_TENSOR, qc_tclass_str(cls));
}

void qc_policy_override_describe(const qc_policy *p, int i, char *buf, size_t n) {
    if (i < 0 || i >= p->n_overrides) {
        snprintf(buf, n, "overrides[%d]", i);
        return;
    }
    const override_entry *e = &p->overrides[i];
    size_t k = (size_t)snprintf(buf, n, "overrides[%d] {", i);
    int first = 1;
    for (int j = 0; j < SEL_N && k < n; j++) {
        if (!e->sel[j]) continue;
        k += (size_t)snprintf(buf + k, n - k, "%s%s \"%s\"", first ? "" : ", ", sel_names[j],
                              e->sel[j]);
        first = 0;
    }
    if (k < n) snprintf(buf + k, n - k, "%s}", first ? "every tensor" : "");
}

static void tol_json(cJSON *o, const char *key, const tol_entry *e, int all) {
    cJSON *j = key ? cJSON_AddObjectToObject(o, key) : o;
    if (!j) return;
    if (all || e->has_atol) cJSON_AddNumberToObject(j, "atol", e->t.atol);
    if (all || e->has_rtol) cJSON_AddNumberToObject(j, "rtol", e->t.rtol);
    if (all || e->has_kl) cJSON_AddNumberToObject(j, "max_kl", e->t.max_kl);
}

char *qc_policy_to_json(const qc_policy *p) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON_AddNumberToObject(root, "schema_version", 1);
    char src[2400];
    snprintf(src, sizeof src, "%s%s", qc_policy_describe(p),
             strcmp(p->source, "built-in") ? " (merged over the built-in defaults)" : "");
    cJSON_AddStringToObject(root, "source", src);
    if (p->description) cJSON_AddStringToObject(root, "description", p->description);
    if (p->measurements) cJSON_AddStringToObject(root, "measurements", p->measurements);
    cJSON *d = cJSON_AddObjectToObject(root, "defaults");
    for (int c = 0; d && c < QC_TC_COUNT; c++) {
        tol_entry e = {.has_atol = 1, .has_rtol = 1, .has_kl = 1, .t = p->defaults[c]};
        tol_json(d, qc_tclass_str((qc_tclass)c), &e, 1);
    }
    cJSON_AddNumberToObject(root, "tie_margin", qc_policy_tie_margin(p));
    if (p->n_backends > 0) {
        cJSON *b = cJSON_AddObjectToObject(root, "backends");
        for (int i = 0; b && i < p->n_backends; i++) {
            cJSON *bj = cJSON_AddObjectToObject(b, p->backends[i].name);
            for (int c = 0; bj && c < QC_TC_COUNT; c++) {
                const tol_entry *e = &p->backends[i].cls[c];
                if (e->has_atol || e->has_rtol || e->has_kl)
                    tol_json(bj, qc_tclass_str((qc_tclass)c), e, 0);
            }
        }
    }
    cJSON *ov = cJSON_AddArrayToObject(root, "overrides");
    for (int i = 0; ov && i < p->n_overrides; i++) {
        const override_entry *e = &p->overrides[i];
        cJSON *o = cJSON_CreateObject();
        if (!o) break;
        for (int k = 0; k < SEL_N; k++)
            if (e->sel[k]) cJSON_AddStringToObject(o, sel_names[k], e->sel[k]);
        tol_json(o, NULL, &e->tol, 0);
        cJSON_AddStringToObject(o, "reason", e->reason);
        cJSON_AddItemToArray(ov, o);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}
