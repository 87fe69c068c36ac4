/* qc_record_resume.h — the checkpoint of a layer-major record (qc_record_resume.c): saved after
 * every layer of every pass, read back by `record --stream --resume`. Internal to `record`.
 */
#ifndef QC_RECORD_RESUME_H
#define QC_RECORD_RESUME_H

#include "qc/qc_config.h"
#include "qc/qc_status.h"
#include "qc_record_tape.h"

/* The directory (created 0700 if absent; anything but a directory there is QC_ERR_ARG). */
qc_status qc_resume_open_dir(const char *dir, qc_err *err);

/* Write everything the run holds after layer next_layer - 1 of pass `pass` (0-based) to
 * dir/checkpoint.bin, atomically. key: 64 hex digits naming the inputs. */
qc_status qc_resume_save(const char *dir, const char *key, const qc_config *cfg,
                         const tape_case *tapes, const int *complete, int n_cases, int pass,
                         int next_layer, qc_err *err);

/* Read dir/checkpoint.bin into the (empty) tapes: *found 0 when there is none (QC_OK).
 * case_ctx[c]: case c's context (bounds every position read). A checkpoint of another key is
 * QC_ERR_ARG naming it; a damaged one QC_ERR_FORMAT (the tapes are left empty). */
qc_status qc_resume_load(const char *dir, const char *key, const qc_config *cfg, tape_case *tapes,
                         int *complete, int n_cases, const int *case_ctx, int *pass,
                         int *next_layer, int *found, qc_err *err);

/* Remove dir/checkpoint.bin and dir itself (if it is then empty). */
void qc_resume_remove(const char *dir);

#endif /* QC_RECORD_RESUME_H */
