/* qc_policy.h — the tolerance policy: which (atol, rtol[, max_kl]) a compared tensor is held to.
 *
 * JSON (cJSON), fixtures/tolerances.json is the committed one:
 * {
 *   "schema_version": 1,
 *   "description": "...",                                  (optional, free text)
 *   "measurements": "tolerances-measurements.json",       (optional: where the numbers came from)
 *   "source": "...",                                       (optional, informational: written
 *                                                           by `qwen-conform policy --print`)
 *   "defaults": { "<class>": {"atol": A, "rtol": R, "max_kl": K}, ... },   (optional; merged
 *                                                           over the built-in defaults: a class
 *                                                           or field not given keeps its
 *                                                           built-in value)
 *   "backends": { "<backend>": { "<class>": {...} } },     (optional, per-backend defaults)
 *   "tie_margin": M,                                       (optional: golden top1-top2 at or
 *                                                           below which an argmax flip is a
 *                                                           near-tie, not a failure; default
 *                                                           = 2 x logits atol)
 *   "overrides": [ { "case": "regex|exact", "tensor": "regex|exact", "backend": "...",
 *                    "mode": "...", "check": "...", "atol": A, "rtol": R, "max_kl": K,
 *                    "reason": "why (required)" }, ... ]
 * }
 * <class> is one of logits, hidden, k_cache, v_cache, conv_state, recurrent_state; a class
 * entry takes only atol, rtol, max_kl (another key is a typo and refused).
 * Partial files: the built-in policy's defaults are the base, so
 *   {"schema_version": 1, "defaults": {"logits": {"atol": 0.01}}}
 * changes the logits atol and keeps every other default (logits rtol and max_kl included).
 * Lookup: defaults[class], then backends[backend][class] (fields present replace), then every
 * matching override in file order (later ones win). An override's selectors are all optional;
 * a string selector matches when it equals the subject or when the POSIX extended regex
 * ^(selector)$ matches it. Subjects: case = "<file-stem>/<case>" (the bare case name is tried
 * too), tensor = the golden path below the case ("prefill/logits",
 * "decode/state/layer_03/k_cache") or the class name, backend, mode, check = the check name.
 * max_kl < 0 means no KL bound; absent, a default keeps the built-in value (a logits bound,
 * none for the other classes) and an override or backend entry leaves it as it was.
 */
#ifndef QC_POLICY_H
#define QC_POLICY_H

#include "qc/qc_status.h"
#include "qc_metrics.h"

typedef struct {
    double atol;    /* absolute tolerance */
    double rtol;    /* relative tolerance (relative to the golden) */
    double max_kl;  /* logits: max KL(golden || actual) per row in nats; < 0 = unbounded */
} qc_tol;

typedef struct qc_policy qc_policy;

/* A reduced-precision tier in force (harness/io/qc_tier.c, docs/tolerance-tiers.md): the
 * distribution gates of the logits checks and the floors of every lookup. */
typedef struct {
    char name[32];          /* "f16-kv", ... */
    int dist;               /* 1: emit the distribution rows (kl_mean / kl_p99 / kl_max /
                               top1 / topk) after each logits comparison */
    double kl_mean, kl_p99, kl_max; /* per check, over its rows: limits on KL(golden || actual) */
    int topk;               /* k of the top-k overlap */
    double topk_min;        /* the mean top-k overlap of a check must be >= this */
    qc_tol floor[QC_TC_COUNT]; /* a lookup never returns less than these (max_kl < 0: none) */
    double tie_delta;       /* near-tie delta of the top1 rows (the tie margin of the tier) */
    double nmse[QC_TC_COUNT]; /* > 0: the class's comparisons against the golden are gated on
                               NMSE <= this instead of element-wise closeness */
    int n_stems;            /* per-golden limits (measured on that golden), by file stem */
    struct {
        char stem[64];
        double kl_mean, kl_p99, kl_max, tie_delta, topk_min;
        double nmse[QC_TC_COUNT];
    } stems[16];
} qc_tier_gate;

/* Put tier g in force (copied): every later lookup is raised to g's floors (an override of the
 * file can loosen further, never tighten below the tier), the tie margin to at least tie. */
void qc_policy_set_tier(qc_policy *p, const qc_tier_gate *g, double tie);
/* The tier in force, or NULL (the policy as loaded: the fp32 tier). */
const qc_tier_gate *qc_policy_tier(const qc_policy *p);

/* The built-in policy (the committed fixture defaults, used when no file applies). */
qc_status qc_policy_builtin(qc_policy **out, qc_err *err);
/* Parse JSON text; `path` names the source in messages. */
qc_status qc_policy_parse(const char *json, size_t len, const char *path, qc_policy **out,
                          qc_err *err);
qc_status qc_policy_load(const char *path, qc_policy **out, qc_err *err);
void qc_policy_free(qc_policy *p);

/* Where the policy came from ("built-in" or the file path). */
const char *qc_policy_source(const qc_policy *p);
double qc_policy_tie_margin(const qc_policy *p);
int qc_policy_n_overrides(const qc_policy *p);

/* The default tolerance of a class (after the merge over the built-in defaults). */
qc_tol qc_policy_default(const qc_policy *p, qc_tclass cls);
/* Replace one field of a class default (the command line's --atol / --rtol CLASS=V): field
 * "atol", "rtol" or "max_kl". Per-backend sections and overrides still apply on top of it.
 * Returns QC_ERR_ARG for an unknown field or a negative / non-finite atol / rtol. */
qc_status qc_policy_set_default(qc_policy *p, qc_tclass cls, const char *field, double value,
                                qc_err *err);
/* Record a command-line change for the reports and `policy --print` (appended to the
 * "source" text: "<file> + --atol logits=0.01"). */
void qc_policy_note(qc_policy *p, const char *note);
/* The source with the command-line changes ("fixtures/tolerances.json + --atol logits=0.01"). */
const char *qc_policy_describe(const qc_policy *p);

/* Override i (0-based, file order): 1 when its case and tensor selectors match the subjects
 * by the lookup's rules (the bare case name after the last '/' of case_id is tried too; the
 * class name of the tensor too). The backend / mode / check selectors are not consulted. */
int qc_policy_override_matches(const qc_policy *p, int i, const char *case_id,
                               const char *tensor, qc_tclass cls);
/* A one-line description of override i: overrides[2] {case "x", tensor "logits"}. */
void qc_policy_override_describe(const qc_policy *p, int i, char *buf, size_t n);

/* The effective policy as JSON (malloc'd, NULL on OOM), loadable again as a policy file: every
 * class default with atol, rtol and max_kl (-1 = no KL bound), the effective tie_margin, the
 * backend sections and the overrides in file order, "source" naming where it came from. */
char *qc_policy_to_json(const qc_policy *p);

/* Resolve the tolerance for one compared tensor. Any subject may be NULL (does not match a
 * selector that names it). *reason (may be NULL) receives the reason of the last override that
 * applied, or NULL. */
void qc_policy_lookup(const qc_policy *p, qc_tclass cls, const char *backend, const char *mode,
                      const char *check, const char *case_id, const char *tensor, qc_tol *out,
                      const char **reason);

#endif /* QC_POLICY_H */
