/* qc_report_json.h — the machine-readable report (`--json FILE`), schema-versioned:
 *   schema_version, tool, tool_version, machine, isa, policy, started, seconds,
 *   summary {checks, passed, failed, skipped, errors, exit_code, stopped_early[, maxfail]},
 *   warnings [strings], checks [{golden, stem, case, backend, mode, check, verdict, seconds,
 *   message, tolerance, metrics, first_divergent_layer {kind, layer, after_layer,
 *   decode_step, source}, detail}], causes [{cause, rule, rows, n_rows, backend, layer, step,
 *   block, kind[, after_layer]}] (qc_report_causes.h). Fields are only ever added within a
 *   schema_version (readers ignore what they do not know); a renamed or removed field bumps it.
 * Non-finite numbers are written as the strings "NaN", "Infinity", "-Infinity" (cJSON would
 * write null). Written atomically (temp file + rename). */
#ifndef QC_REPORT_JSON_H
#define QC_REPORT_JSON_H

#include "qc/qc_status.h"
#include "qc_report_results.h"

#define QC_REPORT_JSON_SCHEMA_VERSION 1

/* The report as a malloc'd JSON string (NULL on OOM). */
char *qc_report_json_string(const qc_results *r);
qc_status qc_report_json_write(const char *path, const qc_results *r, qc_err *err);

#endif /* QC_REPORT_JSON_H */
