/* qc_prefill_faults.c — the prefill controller's self-test variants (qc_prefill_faults.h):
 * what `check --inject-fault static_no_advance` makes the runner do, kept out of the
 * controller's code path. */
#include "qc_prefill_faults.h"

#include <string.h>

int qc_static_pos_advance(int pos, int i) { return pos + i; }

/* bug (e): a static export whose caller never advances the position */
static int static_pos_fixed(int pos, int i) {
    (void)i;
    return pos;
}

qc_status qc_prefill_fault_option(const char *key, const char *value, qc_static_pos_fn *pos_fn,
                                  qc_err *err) {
    if (!key || !value) return qc_errf(err, QC_ERR_ARG, "runner option: key or value is NULL");
    if (strcmp(key, "fault.static_no_advance") != 0)
        return qc_errf(err, QC_ERR_ARG,
                       "runner option '%s' unknown (known: fault.static_no_advance)", key);
    if (strcmp(value, "0") != 0 && strcmp(value, "1") != 0)
        return qc_errf(err, QC_ERR_ARG, "runner option %s: value '%s' is not 0 or 1", key,
                       value);
    *pos_fn = value[0] == '1' ? static_pos_fixed : qc_static_pos_advance;
    return QC_OK;
}
