/* qc_actual_h5.c — the HDF5 side of reading an ACTUAL file (qc_actual_read.c): attributes,
 * datasets matched against the shapes of the layouts, reads. Every message names the file and
 * the dataset or attribute. HDF5 hygiene as in qc_golden_io.c: automatic error printing off,
 * presence probed before opening, every handle closed on every path. */

#include "qc_actual_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_golden_internal.h"
#include "qc_shape.h"

/* ===================================================================================== */
/* small helpers                                                                         */
/* ===================================================================================== */

int qc_layout_parse(const char *s, qc_layout *out) {
    if (!strcmp(s, "auto")) *out = QC_LAYOUT_AUTO;
    else if (!strcmp(s, "canonical")) *out = QC_LAYOUT_CANONICAL;
    else if (!strcmp(s, "hf")) *out = QC_LAYOUT_HF;
    else return -1;
    return 0;
}

/* ===================================================================================== */
/* attributes                                                                            */
/* ===================================================================================== */

/* The optional attributes of an ACTUAL file through the golden reader's readers, their
 * messages naming "<objpath> (attr <name>)". */
qc_status ac_attr_str(const ac_ctx *c, hid_t obj, const char *objpath, const char *name,
                      char **out) {
    const gio_ctx g = {c->file, c->err, GIO_ATTR_PAREN};
    return gio_attr_str(&g, obj, objpath, name, 0, out);
}

qc_status ac_attr_buf(const ac_ctx *c, hid_t obj, const char *objpath, const char *name,
                      char *buf, size_t n) {
    const gio_ctx g = {c->file, c->err, GIO_ATTR_PAREN};
    return gio_attr_buf(&g, obj, objpath, name, 0, buf, n);
}

qc_status ac_attr_int(const ac_ctx *c, hid_t obj, const char *objpath, const char *name,
                      int64_t *out, int *present) {
    const gio_ctx g = {c->file, c->err, GIO_ATTR_PAREN};
    return gio_attr_int(&g, obj, objpath, name, 0, out, present);
}

/* ===================================================================================== */
/* datasets and layouts                                                                  */
/* ===================================================================================== */

/* Look dataset `rel` under loc up: *d the open dataset (caller closes) or H5I_INVALID_HID when
 * absent. Not a dataset, or of the wrong class (want_float 1: float, 0: integer): an error. */
static qc_status ac_open(const ac_ctx *c, hid_t loc, const char *locpath, const char *rel,
                         int want_float, hid_t *d, int *rank, hsize_t *dims) {
    qc_status st = QC_OK;
    hid_t ft = H5I_INVALID_HID, sp = H5I_INVALID_HID;
    char h5msg[300];
    *d = H5I_INVALID_HID;
    if (!gio_link_exists(loc, rel)) return QC_OK;
    hid_t o = H5Oopen(loc, rel, H5P_DEFAULT);
    if (o < 0 || H5Iget_type(o) != H5I_DATASET) {
        if (o >= 0) H5Oclose(o);
        H5Eclear2(H5E_DEFAULT);
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/%s: not a dataset", c->file, locpath, rel);
    }
    if ((ft = H5Dget_type(o)) < 0 || (sp = H5Dget_space(o)) < 0) goto h5fail;
    H5T_class_t cls = H5Tget_class(ft);
    if (want_float && cls != H5T_FLOAT) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/%s: not a float dataset (%s): a runtime's "
                     "outputs are float32 (golden/SCHEMA.md)", c->file, locpath, rel,
                     cls == H5T_INTEGER ? "integer" : "another type class");
        goto done;
    }
    if (!want_float && cls != H5T_INTEGER) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/%s: not an integer dataset (token ids are "
                     "int32)", c->file, locpath, rel);
        goto done;
    }
    int r = H5Sget_simple_extent_ndims(sp);
    if (r < 0 || r > 8 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0) {
        if (r > 8) {
            st = qc_errf(c->err, QC_ERR_SHAPE, "%s: %s/%s: rank %d", c->file, locpath, rel, r);
            goto done;
        }
        goto h5fail;
    }
    *rank = r;
    *d = o;
    o = H5I_INVALID_HID;
    goto done;
h5fail:
    st = qc_errf(c->err, QC_ERR_HDF5, "%s: %s/%s: cannot read: %s", c->file, locpath, rel,
                 gio_h5_errdesc(h5msg, sizeof h5msg));
done:
    if (o >= 0) H5Oclose(o);
    CLOSE_T(ft);
    CLOSE_S(sp);
    return st;
}

/* The first of cand[0..n) that (rank, dims) matches and the layout allows; -1 with an error
 * listing what would have fitted otherwise. */
static int ac_match(const ac_ctx *c, const char *path, qc_layout layout, int rank,
                    const hsize_t *dims, const ac_shape *cand, int n, qc_status *st) {
    for (int i = 0; i < n; i++) {
        if (cand[i].rank != rank) continue;
        int ok = 1;
        for (int k = 0; k < rank && ok; k++)
            if (cand[i].d[k] >= 0 && (long long)dims[k] != cand[i].d[k]) ok = 0;
        if (!ok) continue;
        if (layout == QC_LAYOUT_CANONICAL && cand[i].tag != AC_CANON) continue;
        if (layout == QC_LAYOUT_HF && cand[i].tag != AC_HF) continue;
        return i;
    }
    char have[160], list[900];
    size_t o = 0;
    gio_fmt_dims(rank, dims, have, sizeof have);
    list[0] = '\0';
    for (int i = 0; i < n && o < sizeof list; i++) {
        if (layout == QC_LAYOUT_CANONICAL && cand[i].tag != AC_CANON) continue;
        if (layout == QC_LAYOUT_HF && cand[i].tag != AC_HF) continue;
        char ws[160];
        qc_shape_str(ws, sizeof ws, cand[i].d, cand[i].rank, "N");
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s %s", o ? ", " : "", cand[i].what,
                              ws);
    }
    *st = qc_errf(c->err, QC_ERR_SHAPE, "%s: %s: shape %s fits no %slayout (%s%s)%s", c->file,
                  path,
                  have, layout == QC_LAYOUT_CANONICAL ? "canonical " : layout == QC_LAYOUT_HF ?
                  "hf " : "", list, layout == QC_LAYOUT_AUTO ? "; golden/SCHEMA.md, \"ACTUAL "
                  "layouts\"" : "; --layout auto accepts both",
                  strstr(path, "/prefill/logits") && !strstr(path, "positions")
                      ? "; a subset of the rows needs prefill/logits_positions" : "");
    return -1;
}

/* Read the whole open dataset d (numel elements) as float32 / int32 into a malloc'd *out. */
static qc_status ac_read(const ac_ctx *c, hid_t d, const char *path, int is_float, size_t numel,
                         void **out) {
    char h5msg[300];
    *out = malloc(numel ? numel * 4 : 4);
    if (!*out) return qc_errf(c->err, QC_ERR_OOM, "%s: %s: out of memory (%zu elements)", c->file,
                              path, numel);
    if (numel && H5Dread(d, is_float ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32, H5S_ALL, H5S_ALL,
                         H5P_DEFAULT, *out) < 0) {
        free(*out);
        *out = NULL;
        return qc_errf(c->err, QC_ERR_HDF5, "%s: %s: cannot read: %s", c->file, path,
                       gio_h5_errdesc(h5msg, sizeof h5msg));
    }
    return QC_OK;
}

/* An optional tensor `rel` under loc in one of the shapes cand: read into *out (NULL when
 * absent); *variant = the matched shape's variant, the case's layout counters bumped. */
qc_status ac_tensor(const ac_ctx *c, qc_actual_case *ac, qc_layout layout, hid_t loc,
                    const char *locpath, const char *rel, int is_float,
                    const ac_shape *cand, int n, float **out, int *variant) {
    hid_t d;
    int rank = 0;
    hsize_t dims[8];
    char path[512];
    *out = NULL;
    snprintf(path, sizeof path, "%s/%s", locpath, rel);
    qc_status st = ac_open(c, loc, locpath, rel, is_float, &d, &rank, dims);
    if (st || d < 0) return st;
    int k = ac_match(c, path, layout, rank, dims, cand, n, &st);
    if (k >= 0) {
        size_t numel = 1;
        for (int i = 0; i < rank; i++) numel *= (size_t)dims[i];
        st = ac_read(c, d, path, is_float, numel, (void **)out);
        if (!st) {
            if (variant) *variant = cand[k].variant;
            if (cand[k].tag == AC_HF) ac->n_hf++;
            else ac->n_canonical++;
        }
    }
    CLOSE_D(d);
    return st;
}

/* An optional k / v cache [nkv, N, hd] / [1, nkv, N, hd] with N >= n_pos: a static cache of
 * more positions (max_context_len) is accepted and its first n_pos positions kept. */
qc_status ac_kv(const ac_ctx *c, qc_actual_case *ac, qc_layout layout, hid_t loc,
                const char *locpath, const char *rel, const qc_config *cfg, int n_pos,
                float **out) {
    hid_t d;
    int rank = 0;
    hsize_t dims[8];
    char path[512];
    *out = NULL;
    snprintf(path, sizeof path, "%s/%s", locpath, rel);
    qc_status st = ac_open(c, loc, locpath, rel, 1, &d, &rank, dims);
    if (st || d < 0) return st;
    const long long nkv = cfg->n_kv_heads, hd = cfg->head_dim, lim = qc_golden_max_positions(cfg);
    const ac_shape cand[2] = {{AC_CANON, 3, {nkv, -1, hd}, 0, "canonical [nkv,N,hd]"},
                              {AC_HF, 4, {1, nkv, -1, hd}, 0, "hf DynamicCache [1,nkv,N,hd]"}};
    int k = ac_match(c, path, layout, rank, dims, cand, 2, &st);
    if (k >= 0) {
        long long N = (long long)dims[rank - 2];
        if (N < n_pos || N > lim) {
            st = qc_errf(c->err, QC_ERR_SHAPE, "%s: %s: holds %lld positions; the case needs %d "
                         "(a larger static cache is accepted, up to %lld)", c->file, path, N,
                         n_pos, lim);
        } else if (!(st = ac_read(c, d, path, 1, (size_t)(nkv * N * hd), (void **)out))) {
            if (N > n_pos) { /* keep positions 0..n_pos-1 of every head */
                for (long long h = 0; h < nkv; h++)
                    memmove(*out + h * n_pos * hd, *out + h * N * hd,
                            (size_t)(n_pos * hd) * sizeof **out);
                ac->n_static_kv++;
            }
            if (cand[k].tag == AC_HF) ac->n_hf++;
            else ac->n_canonical++;
        }
    }
    CLOSE_D(d);
    return st;
}

/* An optional 1-D token list ([n] or [1, n], any length): *n = -1 when absent. */
qc_status ac_ids(const ac_ctx *c, qc_actual_case *ac, qc_layout layout, hid_t loc,
                 const char *locpath, const char *rel, int32_t **out, int *n) {
    hid_t d;
    int rank = 0;
    hsize_t dims[8];
    char path[512];
    *out = NULL;
    *n = -1;
    snprintf(path, sizeof path, "%s/%s", locpath, rel);
    qc_status st = ac_open(c, loc, locpath, rel, 0, &d, &rank, dims);
    if (st || d < 0) return st;
    long long len = rank >= 1 ? (long long)dims[rank - 1] : -1;
    ac_shape cand[2] = {{AC_CANON, 1, {-1}, 0, "canonical"}, {AC_HF, 2, {1, -1}, 0, "hf"}};
    int k = ac_match(c, path, layout, rank, dims, cand, 2, &st);
    if (k >= 0 && len > QC_GOLDEN_MAX_POSITIONS) {
        st = qc_errf(c->err, QC_ERR_SHAPE, "%s: %s: %lld ids: more than the %d positions a case "
                     "may use", c->file, path, len, QC_GOLDEN_MAX_POSITIONS);
        k = -1;
    }
    if (k >= 0 && !(st = ac_read(c, d, path, 0, (size_t)len, (void **)out))) {
        *n = (int)len;
        if (cand[k].tag == AC_HF) ac->n_hf++;
        else ac->n_canonical++;
    }
    CLOSE_D(d);
    return st;
}

