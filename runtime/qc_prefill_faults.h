/* qc_prefill_faults.h — runtime-private: the prefill controller's self-test variants, reached
 * only through qc_runner_set_option (include/qc/qc_prefill.h). The controller's own code holds
 * no fault branch: it calls its static-mode position step through a pointer these set. */
#ifndef QC_PREFILL_FAULTS_H
#define QC_PREFILL_FAULTS_H

#include "qc/qc_status.h"

/* The position of token i of a static-mode chunk that starts at pos. */
typedef int (*qc_static_pos_fn)(int pos, int i);

/* The correct step: pos + i. */
int qc_static_pos_advance(int pos, int i);

/* key = value of qc_runner_set_option: on QC_OK *pos_fn is the variant to use. Keys:
 *   fault.static_no_advance = 0|1   1: every token of a static prefill at the chunk's start
 *                                   position (bug (e) of docs/checks.md); 0: correct again.
 * QC_ERR_ARG naming the unknown key or value (err may be NULL). */
qc_status qc_prefill_fault_option(const char *key, const char *value, qc_static_pos_fn *pos_fn,
                                  qc_err *err);

#endif /* QC_PREFILL_FAULTS_H */
