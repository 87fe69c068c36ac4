/* qc_check_hazard.c — hazard_finite: on a golden case marked as a numerical hazard (case
 * attribute `hazards`, written by the golden generator for fixtures/tiny-hazard-decay: decays
 * near 0 and near 1, gate inputs beyond softplus's guard, many chunks), one row per (backend,
 * mode) saying whether every value the run produced (logits of the prompt and of the decode,
 * the state buffers after both) is finite, and naming the first NaN / Inf with its meaning.
 * The tolerance checks of the same run say whether the finite values are also close. */

#include "qc_check_internal.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The `hazards` attribute of case cname into buf ("" when absent or unreadable). */
static void hazard_attr(const char *file, const char *cname, char *buf, size_t n) {
    buf[0] = 0;
    H5E_auto2_t fn;
    void *fd;
    H5Eget_auto2(H5E_DEFAULT, &fn, &fd);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    char grp[160];
    snprintf(grp, sizeof grp, "cases/%s", cname);
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f >= 0 && H5Lexists(f, "cases", H5P_DEFAULT) > 0 && H5Lexists(f, grp, H5P_DEFAULT) > 0 &&
        H5Aexists_by_name(f, grp, "hazards", H5P_DEFAULT) > 0) {
        hid_t a = H5Aopen_by_name(f, grp, "hazards", H5P_DEFAULT, H5P_DEFAULT);
        hid_t t = a >= 0 ? H5Aget_type(a) : -1;
        if (t >= 0 && H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) > 0) {
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, H5T_VARIABLE);
            H5Tset_cset(mt, H5T_CSET_UTF8);
            char *s = NULL;
            if (H5Aread(a, mt, &s) >= 0 && s) {
                snprintf(buf, n, "%s", s);
                H5free_memory(s);
            }
            H5Tclose(mt);
        }
        if (t >= 0) H5Tclose(t);
        if (a >= 0) H5Aclose(a);
    }
    if (f >= 0) H5Fclose(f);
    H5Eset_auto2(H5E_DEFAULT, fn, fd);
}

void ck_check_hazard(ck_ctx *c, const qc_golden_case *gc, const qc_golden_case *act,
                     const char *bname, const char *mname) {
    char what[200];
    hazard_attr(c->g->path, gc->name, what, sizeof what);
    if (!what[0]) return;
    ck_partlist *pl = calloc(1, sizeof *pl);
    if (!pl) {
        ck_emit_simple(c, gc->name, bname, mname, "hazard_finite", QC_VERDICT_ERROR,
                       "out of memory", NULL);
        return;
    }
    ck_add_all_parts(pl, c->cfg, act, gc);
    qc_metrics m;
    qc_metrics_init(&m, 0);
    for (int i = 0; i < pl->n; i++) {
        qc_tdesc d = pl->p[i].d;
        d.atol = INFINITY; /* finiteness only: closeness is the tolerance checks' business */
        d.rtol = 0.0;
        qc_metrics_add(&m, &d, pl->p[i].a, pl->p[i].g);
    }
    free(pl);
    qc_check_row row;
    ck_row_init(&row, c->stem, gc->name, bname, mname, "hazard_finite");
    if (m.n_nonfinite == 0) {
        row.verdict = QC_VERDICT_PASS;
        snprintf(row.keyline, sizeof row.keyline, "all %zu values finite (logits, states; %s)", m.n,
                 what);
    } else {
        const qc_loc *l = &m.first_nonfinite;
        char idx[64], mean[160];
        qc_tdesc_index_str(&l->desc, l->idx, idx, sizeof idx);
        qc_tdesc_meaning(&l->desc, l->idx, mean, sizeof mean);
        row.verdict = QC_VERDICT_FAIL;
        snprintf(row.keyline, sizeof row.keyline, "%zu of %zu values not finite; first %g at %s "
                 "%s [%s]", m.n_nonfinite, m.n, (double)l->actual, l->desc.path, idx, mean);
        row.detail = qc_strdup_printf("First non-finite value: %g at %s %s [%s] (expected %.9g)\n"
                                      "Hazards of this case: %s", (double)l->actual, l->desc.path,
                                      idx, mean, (double)l->golden, what);
    }
    ck_emit(c, &row);
}
