/* qc_model_base.c — what the model files share (qc_model_priv.h), a bottom file of the loader:
 * the list of buffers a model owns and the one view check of qc_model_validate. qc_model.c,
 * qc_model_moe.c, qc_model_q8.c and qc_model_synth.c call it; it calls none of them. */
#include <stdlib.h>
#include <sys/mman.h>

#include "qc/qc_model.h"
#include "qc_model_priv.h"
#include "qc_text.h"

qc_status qc_model_priv_own(qc_model_priv *p, void *buf) {
    if (p->n_owned == p->cap_owned) {
        int nc = p->cap_owned ? 2 * p->cap_owned : 16;
        void **no = realloc(p->owned, (size_t)nc * sizeof *no);
        if (!no) return QC_ERR_OOM;
        p->owned = no;
        p->cap_owned = nc;
    }
    p->owned[p->n_owned++] = buf;
    return QC_OK;
}

/* Weight buffers are 64-byte aligned so that no 512-bit load of a row (rows are a multiple of
 * 64 bytes) splits a cache line: the 0.8B BF16 decode, one thread, ran at 11.9 tok/s from a
 * 16-byte aligned arena and at 17.6 from a 64-byte aligned one (`bench --synthetic 0.8b`, 67 ->
 * 96 % of the bandwidth probe). Large ones are 2 MiB aligned with transparent huge pages asked
 * for (fewer TLB misses where the kernel grants them). */
#define WEIGHTS_HUGE ((size_t)8 << 20)

void *qc_model_priv_weights(qc_model_priv *p, size_t bytes) {
    const size_t al = bytes >= WEIGHTS_HUGE ? (size_t)2 << 20 : 64;
    const size_t sz = ((bytes ? bytes : 1) + al - 1) / al * al;
    void *b = aligned_alloc(al, sz);
    if (!b) return NULL;
    if (al > 64) (void)madvise(b, sz, MADV_HUGEPAGE);
    if (qc_model_priv_own(p, b)) {
        free(b);
        return NULL;
    }
    return b;
}

/* t present, in a supported dtype, with exactly the expected shape. */
qc_status qc_model_check_view(const qc_tensor *t, const char *name, const int64_t *exp, int nd,
                              qc_err *err) {
    if (t->ndim == 0 || !t->data) return qc_errf(err, QC_ERR_MISSING, "model: %s: missing", name);
    if (t->dtype != QC_F32 && t->dtype != QC_BF16 && t->dtype != QC_F16)
        return qc_errf(err, QC_ERR_UNSUPPORTED, "model: %s: unsupported dtype %d", name,
                       (int)t->dtype);
    int ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == exp[i];
    if (!ok) {
        char g[160], e[160];
        qc_text_shape(g, sizeof g, t->shape, t->ndim > 0 && t->ndim <= 4 ? t->ndim : 0);
        qc_text_shape(e, sizeof e, exp, nd);
        if (t->ndim < 0 || t->ndim > 4)
            return qc_errf(err, QC_ERR_SHAPE, "model: %s: %d dimensions != %s", name, t->ndim, e);
        return qc_errf(err, QC_ERR_SHAPE, "model: %s: shape %s != %s", name, g, e);
    }
    return QC_OK;
}
