/* qc_policy.h — the tolerance policy: which (atol, rtol[, max_kl]) a compared tensor is held to.
 *
 * JSON (cJSON), fixtures/tolerances.json is the committed one:
 * {
 *   "schema_version": 1,
 *   "description": "...",                                  (optional, free text)
 *   "measurements": "tolerances-measurements.json",       (optional: where the numbers came from)
 *   "defaults": { "<class>": {"atol": A, "rtol": R, "max_kl": K}, ... },   every class required
 *   "backends": { "<backend>": { "<class>": {...} } },     (optional, per-backend defaults)
 *   "tie_margin": M,                                       (optional: golden top1-top2 at or
 *                                                           below which an argmax flip is a
 *                                                           near-tie, not a failure; default
 *                                                           = 2 x logits atol)
 *   "overrides": [ { "case": "regex|exact", "tensor": "regex|exact", "backend": "...",
 *                    "mode": "...", "check": "...", "atol": A, "rtol": R, "max_kl": K,
 *                    "reason": "why (required)" }, ... ]
 * }
 * <class> is one of logits, hidden, k_cache, v_cache, conv_state, recurrent_state.
 * Lookup: defaults[class], then backends[backend][class] (fields present replace), then every
 * matching override in file order (later ones win). An override's selectors are all optional;
 * a string selector matches when it equals the subject or when the POSIX extended regex
 * ^(selector)$ matches it. Subjects: case = "<file-stem>/<case>" (the bare case name is tried
 * too), tensor = the golden path below the case ("prefill/logits",
 * "decode/state/layer_03/k_cache") or the class name, backend, mode, check = the check name.
 * max_kl < 0 (or absent) means no KL bound.
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

/* Resolve the tolerance for one compared tensor. Any subject may be NULL (does not match a
 * selector that names it). *reason (may be NULL) receives the reason of the last override that
 * applied, or NULL. */
void qc_policy_lookup(const qc_policy *p, qc_tclass cls, const char *backend, const char *mode,
                      const char *check, const char *case_id, const char *tensor, qc_tol *out,
                      const char **reason);

#endif /* QC_POLICY_H */
