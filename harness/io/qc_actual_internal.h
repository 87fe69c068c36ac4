/* qc_actual_internal.h — what the two halves of the ACTUAL reader share (harness-private):
 *   qc_actual_h5.c    attributes, datasets matched against the layouts' shapes, reads
 *   qc_actual_read.c  a case, the file (qc_actual.h)
 * Functions return QC_OK or an error naming the file and the dataset / attribute; an absent
 * optional object is QC_OK with the output NULL / -1 / not present. */
#ifndef QC_ACTUAL_INTERNAL_H
#define QC_ACTUAL_INTERNAL_H

#include <hdf5.h>

#include "qc_actual.h"
#include "qc_golden_internal.h"

typedef struct {
    const char *file; /* the ACTUAL path, for messages */
    qc_err *err;
} ac_ctx;

#define AC_CANON 0
#define AC_HF 1

/* One shape a dataset may have. */
typedef struct {
    int tag;          /* AC_CANON / AC_HF */
    int rank;
    int64_t d[5];     /* -1: any extent */
    int variant;      /* the caller's meaning (last row, K-1 columns, ...) */
    const char *what; /* "canonical", "hf", "hf last row", ... */
} ac_shape;

/* (groups and links: gio_group_if / gio_link_exists, qc_golden_internal.h)
 * Optional scalar attributes (gio_attr_* of the golden reader): a malloc'd string (*out NULL when absent), a string into buf,
 * an integer (*present 0 when absent). */
qc_status ac_attr_str(const ac_ctx *c, hid_t obj, const char *objpath, const char *name,
                      char **out);
qc_status ac_attr_buf(const ac_ctx *c, hid_t obj, const char *objpath, const char *name,
                      char *buf, size_t n);
qc_status ac_attr_int(const ac_ctx *c, hid_t obj, const char *objpath, const char *name,
                      int64_t *out, int *present);
/* An optional tensor in one of the shapes cand[0..n): *out malloc'd float32 (NULL when
 * absent), *variant the matched shape's; the case's layout counters bumped. */
qc_status ac_tensor(const ac_ctx *c, qc_actual_case *ac, qc_layout layout, hid_t loc,
                    const char *locpath, const char *rel, int is_float, const ac_shape *cand,
                    int n, float **out, int *variant);
/* An optional k / v cache of n_pos positions (a larger static cache: its first n_pos). */
qc_status ac_kv(const ac_ctx *c, qc_actual_case *ac, qc_layout layout, hid_t loc,
                const char *locpath, const char *rel, const qc_config *cfg, int n_pos,
                float **out);
/* An optional id list [n] / [1, n]: *out malloc'd int32, *n its length (-1 when absent). */
qc_status ac_ids(const ac_ctx *c, qc_actual_case *ac, qc_layout layout, hid_t loc,
                 const char *locpath, const char *rel, int32_t **out, int *n);

/* qc_actual_moe.c: the optional <gpath>/router/{topk_ids, topk_weights} of a MoE model's
 * prefill / decode group grp (rows = T or S) into *ids / *w (NULL when absent; the router
 * group of a dense model's ACTUAL is ignored). Layout-neutral: [L, rows, k] under any
 * --layout, not counted in the layout row. */
qc_status ac_router(const ac_ctx *c, hid_t grp, const char *gpath, const qc_config *cfg,
                    int rows, int32_t **ids, float **w);

/* qc_actual_topk.c: the optional <gpath>/topk/{ids, logprobs} of a prefill / decode group grp
 * (rows = T or S) into *ids / *lps (NULL when absent). Layout-neutral: [rows, k] under any
 * --layout, not counted in the layout row. *k: in, the k another group of the case has (0:
 * none yet); out, this group's k. A format error names the file, the dataset and the first
 * bad entry: a shape other than [rows, k] (1 <= k <= V), one of the two datasets alone, an id
 * outside [0, V) or twice in a row, a log-probability not finite or > 0, a row not in
 * descending order. */
qc_status ac_topk(const ac_ctx *c, hid_t grp, const char *gpath, const qc_config *cfg, int rows,
                  int *k, int32_t **ids, float **lps);

#endif /* QC_ACTUAL_INTERNAL_H */
