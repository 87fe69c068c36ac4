/* qc_golden_h5.c — the HDF5 reading primitives of the golden reader (qc_golden_io.c,
 * qc_golden_case.c), shared with the ACTUAL reader (qc_actual_h5.c): error texts, attributes
 * (string / integer scalars, VL reads guarded against a crashing libhdf5), datasets probed
 * against a wanted type and shape before they are read, groups and links. Every message names
 * the file and the dataset or attribute path. HDF5 hygiene: see qc_golden_io.c. */
#include <ctype.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "qc_golden_internal.h"
#include "qc_shape.h"

/* ===================================================================================== */
/* HDF5 error handling                                                                   */
/* ===================================================================================== */

/* Automatic error-stack printing off (per thread in thread-safe builds, so on every entry). */
void gio_h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

typedef struct {
    char desc[256]; /* the innermost error's description (where it was detected) */
    int got;
} h5_walk_data;

static herr_t h5_walk_cb(unsigned n, const H5E_error2_t *e, void *user) {
    h5_walk_data *d = user;
    (void)n;
    if (!d->got && e && e->desc) {
        snprintf(d->desc, sizeof d->desc, "%s (%s)", e->desc, e->func_name ? e->func_name : "?");
        d->got = 1;
    }
    return 0;
}

/* One short text describing the current HDF5 error stack ("" when empty). */
const char *gio_h5_errdesc(char *buf, size_t n) {
    h5_walk_data d;
    memset(&d, 0, sizeof d);
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_walk_cb, &d);
    snprintf(buf, n, "%s", d.got ? d.desc : "HDF5 error");
    /* one line: libhdf5's texts may carry newlines (a ctime() date) or tabs */
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t') *p = ' ';
    H5Eclear2(H5E_DEFAULT);
    return buf;
}


/* ===================================================================================== */
/* small helpers                                                                         */
/* ===================================================================================== */

/* "[3,17]" from a flat index and dims (rank <= 8). */
static void fmt_index(size_t flat, int rank, const hsize_t *dims, char *buf, size_t n) {
    int64_t idx[8];
    for (int d = rank - 1; d >= 0; d--) {
        idx[d] = (int64_t)(dims[d] ? flat % dims[d] : 0);
        flat = dims[d] ? flat / dims[d] : 0;
    }
    qc_shape_str(buf, n, idx, rank, NULL);
}

/* "[7,512]" (HDF5's extents through qc_shape_str) */
void gio_fmt_dims(int rank, const hsize_t *dims, char *buf, size_t n) {
    int64_t d[H5S_MAX_RANK];
    if (rank > H5S_MAX_RANK) rank = H5S_MAX_RANK;
    for (int i = 0; i < rank; i++) d[i] = (int64_t)dims[i];
    qc_shape_str(buf, n, d, rank, NULL);
}

int gio_valid_case_name(const char *s) {
    if (!s[0]) return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-') return 0;
    return 1;
}

/* 1 when every component of `path` (relative to loc) exists as a link. */
int gio_path_exists(hid_t loc, const char *path) {
    char buf[512];
    size_t n = strlen(path);
    if (n >= sizeof buf) return 0;
    for (size_t i = 0; i <= n; i++) {
        if (path[i] == '/' || path[i] == '\0') {
            if (i == 0) continue;
            memcpy(buf, path, i);
            buf[i] = '\0';
            if (H5Lexists(loc, buf, H5P_DEFAULT) <= 0) return 0;
        }
    }
    return 1;
}

/* ===================================================================================== */
/* reading: datasets                                                                     */
/* ===================================================================================== */

/* Check dataset `rel` under loc (loc's path is locpath) WITHOUT reading it: present, a dataset,
 * float (is_float) or integer, of rank `rank` and of shape `want` (want[d] < 0 accepts any
 * extent in that dimension). dims receives the extents. On QC_OK *dout (when dout != NULL) is
 * the open dataset, for the caller to read and close. */
qc_status gio_probe_dataset(const gio_ctx *c, hid_t loc, const char *locpath, const char *rel,
                               int is_float, int rank, const long long *want, hsize_t *dims,
                               hid_t *dout) {
    qc_status st = QC_OK;
    hid_t d = H5I_INVALID_HID, ft = H5I_INVALID_HID, sp = H5I_INVALID_HID;
    char path[512], h5msg[300];
    snprintf(path, sizeof path, "%s/%s", locpath, rel);
    if (dout) *dout = H5I_INVALID_HID;
    /* opened directly (the common case); the reason looked up only when that fails */
    hid_t o = H5Oopen(loc, rel, H5P_DEFAULT);
    if (o < 0) H5Eclear2(H5E_DEFAULT);
    if (o < 0 && !gio_path_exists(loc, rel))
        return qc_errf(c->err, QC_ERR_MISSING, "%s: %s: missing dataset", c->file, path);
    if (o < 0 || H5Iget_type(o) != H5I_DATASET) {
        if (o >= 0) H5Oclose(o);
        H5Eclear2(H5E_DEFAULT);
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: not a dataset", c->file, path);
    }
    d = o;
    ft = H5Dget_type(d);
    sp = H5Dget_space(d);
    if (ft < 0 || sp < 0) goto h5fail;
    H5T_class_t cls = H5Tget_class(ft);
    if (is_float && cls != H5T_FLOAT) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: not a float dataset (integer or other)",
                     c->file, path);
        goto done;
    }
    if (!is_float && cls != H5T_INTEGER) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: not an integer dataset", c->file, path);
        goto done;
    }
    int r = H5Sget_simple_extent_ndims(sp);
    hsize_t have[H5S_MAX_RANK] = {0};
    if (r < 0 || r > H5S_MAX_RANK || H5Sget_simple_extent_dims(sp, have, NULL) < 0) goto h5fail;
    int shape_ok = r == rank;
    for (int i = 0; shape_ok && i < rank; i++)
        if (want[i] >= 0 && have[i] != (hsize_t)want[i]) shape_ok = 0;
    if (!shape_ok) {
        char have_s[160], want_s[128];
        int64_t w[H5S_MAX_RANK]; /* "[*,16]": want[d] < 0 is any extent */
        int nw = rank < H5S_MAX_RANK ? rank : H5S_MAX_RANK;
        for (int i = 0; i < nw; i++) w[i] = want[i];
        gio_fmt_dims(r, have, have_s, sizeof have_s);
        qc_shape_str(want_s, sizeof want_s, w, nw, "*");
        st = qc_errf(c->err, QC_ERR_SHAPE, "%s: %s: shape %s != %s", c->file, path, have_s,
                     want_s);
        goto done;
    }
    for (int i = 0; i < rank; i++) dims[i] = have[i];
    if (dout) {
        *dout = d;
        d = H5I_INVALID_HID;
    }
    goto done;
h5fail:
    st = qc_errf(c->err, QC_ERR_HDF5, "%s: %s: cannot read: %s", c->file, path,
                 gio_h5_errdesc(h5msg, sizeof h5msg));
done:
    CLOSE_T(ft);
    CLOSE_S(sp);
    CLOSE_D(d);
    return st;
}

/* Read dataset `rel` under loc as float32 (is_float) or int32 into a malloc'd array, after
 * gio_probe_dataset checked it against `want` (here every extent is known: the metadata pass
 * learnt them). Floats must be finite. */
qc_status gio_read_dataset(const gio_ctx *c, hid_t loc, const char *locpath, const char *rel,
                              int is_float, int rank, const long long *want, void **out) {
    hid_t d = H5I_INVALID_HID;
    hsize_t dims[8] = {0};
    char path[512], h5msg[300];
    void *buf = NULL;
    *out = NULL;
    qc_status st = gio_probe_dataset(c, loc, locpath, rel, is_float, rank, want, dims, &d);
    if (st) return st;
    snprintf(path, sizeof path, "%s/%s", locpath, rel);
    size_t numel = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] && numel > SIZE_MAX / 4 / dims[i]) {
            st = qc_errf(c->err, QC_ERR_OOM, "%s: %s: too large", c->file, path);
            goto done;
        }
        numel *= (size_t)dims[i];
    }
    buf = malloc(numel ? numel * 4 : 4);
    if (!buf) {
        st = qc_errf(c->err, QC_ERR_OOM, "%s: %s: out of memory (%zu elements)", c->file, path,
                     numel);
        goto done;
    }
    if (numel && H5Dread(d, is_float ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32, H5S_ALL, H5S_ALL,
                         H5P_DEFAULT, buf) < 0) {
        st = qc_errf(c->err, QC_ERR_HDF5, "%s: %s: cannot read: %s", c->file, path,
                     gio_h5_errdesc(h5msg, sizeof h5msg));
        goto done;
    }
    if (is_float) {
        const float *f = buf;
        for (size_t i = 0; i < numel; i++) {
            if (!isfinite(f[i])) {
                char at[128];
                fmt_index(i, rank, dims, at, sizeof at);
                st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: %s at %s", c->file, path,
                             isnan(f[i]) ? "NaN" : (f[i] > 0 ? "+Inf" : "-Inf"), at);
                goto done;
            }
        }
    }
    *out = buf;
    buf = NULL;
done:
    free(buf);
    CLOSE_D(d);
    return st;
}

/* ===================================================================================== */
/* reading: groups, links, names                                                         */
/* ===================================================================================== */

/* The object `name` under loc opened as a group, or H5I_INVALID_HID when there is no such
 * link, it dangles, or it is not a group (the HDF5 error stack cleared). */
hid_t gio_group_if(hid_t loc, const char *name) {
    if (loc < 0) return H5I_INVALID_HID;
    if (H5Lexists(loc, name, H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return H5I_INVALID_HID;
    }
    hid_t o = H5Oopen(loc, name, H5P_DEFAULT);
    if (o < 0) {
        H5Eclear2(H5E_DEFAULT);
        return H5I_INVALID_HID;
    }
    if (H5Iget_type(o) != H5I_GROUP) {
        H5Oclose(o);
        return H5I_INVALID_HID;
    }
    return o;
}

/* 1 when loc has a link `name` (one path component). */
int gio_link_exists(hid_t loc, const char *name) {
    if (loc < 0) return 0;
    htri_t e = H5Lexists(loc, name, H5P_DEFAULT);
    if (e < 0) H5Eclear2(H5E_DEFAULT);
    return e > 0;
}

herr_t gio_collect_names(hid_t g, const char *name, const H5L_info_t *info, void *user) {
    name_list *nl = user;
    (void)g;
    (void)info;
    if (nl->n == nl->cap) {
        int ncap = nl->cap ? nl->cap * 2 : 16;
        char **nn = realloc(nl->names, (size_t)ncap * sizeof *nn);
        if (!nn) {
            nl->oom = 1;
            return -1;
        }
        nl->names = nn;
        nl->cap = ncap;
    }
    nl->names[nl->n] = strdup(name);
    if (!nl->names[nl->n]) {
        nl->oom = 1;
        return -1;
    }
    nl->n++;
    return 0;
}

int gio_cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ===================================================================================== */
/* reading: attributes (shared with the ACTUAL reader, qc_actual_h5.c)                   */
/* ===================================================================================== */

/* libhdf5 1.10 can crash (SIGSEGV in H5HG_read) on a corrupted variable-length string in a
 * damaged file. A golden reader must not crash on bad input, so the one read that reaches the
 * global heap is guarded: a fault inside it becomes an error. Returns 0, -1 (HDF5 error) or -2
 * (the library faulted). */
static sigjmp_buf vl_jmp;
static volatile sig_atomic_t vl_armed;
static volatile sig_atomic_t vl_faulted;

int qc_golden_hdf5_faulted(void) { return vl_faulted; }
void gio_set_faulted(void) { vl_faulted = 1; }

static void vl_fault(int sig) {
    if (vl_armed) siglongjmp(vl_jmp, sig);
    signal(sig, SIG_DFL);
    raise(sig);
}

int gio_guarded_vl_read(hid_t a, hid_t mt, char **vl) {
    struct sigaction sa, old_segv, old_bus;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = vl_fault;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
    volatile int rc = -2;
    if (sigsetjmp(vl_jmp, 1) == 0) {
        vl_armed = 1;
        rc = H5Aread(a, mt, vl) < 0 ? -1 : 0;
    }
    vl_armed = 0;
    if (rc == -2) vl_faulted = 1;
    sigaction(SIGSEGV, &old_segv, NULL);
    sigaction(SIGBUS, &old_bus, NULL);
    return rc;
}

/* How attribute `name` of objpath is named in messages: "/cases/x/start_pos" (golden) or
 * "/cases/x (attr start_pos)" (ACTUAL). */
static void attr_label(const gio_ctx *c, const char *objpath, const char *name, char *buf,
                       size_t n) {
    if (c->style == GIO_ATTR_PAREN)
        snprintf(buf, n, "%s (attr %s)", objpath, name);
    else
        snprintf(buf, n, "%s%s%s", objpath, strcmp(objpath, "/") == 0 ? "" : "/", name);
}

static qc_status attr_h5fail(const gio_ctx *c, const char *lab) {
    char h5msg[300];
    return qc_errf(c->err, QC_ERR_HDF5, "%s: %s: cannot read: %s", c->file, lab,
                   gio_h5_errdesc(h5msg, sizeof h5msg));
}

/* Open attribute `name` of obj and check that it is a scalar of class `cls` ("not <cls_what>"
 * / "not <scalar_what>" otherwise). *a and *ft are left H5I_INVALID_HID and QC_OK returned
 * when the attribute is absent and !required; on success the caller closes both. */
static qc_status attr_open_scalar(const gio_ctx *c, hid_t obj, const char *lab, const char *name,
                                  int required, H5T_class_t cls, const char *cls_what,
                                  const char *scalar_what, hid_t *a, hid_t *ft) {
    qc_status st = QC_OK;
    hid_t sp = H5I_INVALID_HID;
    *a = *ft = H5I_INVALID_HID;
    if (H5Aexists(obj, name) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        if (!required) return QC_OK;
        return qc_errf(c->err, QC_ERR_MISSING, "%s: %s: missing attribute", c->file, lab);
    }
    *a = H5Aopen(obj, name, H5P_DEFAULT);
    if (*a < 0) goto h5fail;
    *ft = H5Aget_type(*a);
    sp = H5Aget_space(*a);
    if (*ft < 0 || sp < 0) goto h5fail;
    if (H5Tget_class(*ft) != cls)
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: not %s", c->file, lab, cls_what);
    else if (H5Sget_simple_extent_npoints(sp) != 1)
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: not %s", c->file, lab, scalar_what);
    goto done;
h5fail:
    st = attr_h5fail(c, lab);
done:
    CLOSE_S(sp);
    if (st) {
        CLOSE_T(*ft);
        CLOSE_A(*a);
    }
    return st;
}

qc_status gio_attr_str(const gio_ctx *c, hid_t obj, const char *objpath, const char *name,
                       int required, char **out) {
    hid_t a, ft, mt = H5I_INVALID_HID;
    char *vl = NULL;
    char lab[600];
    const int paren = c->style == GIO_ATTR_PAREN;
    attr_label(c, objpath, name, lab, sizeof lab);
    *out = NULL;
    qc_status st = attr_open_scalar(c, obj, lab, name, required, H5T_STRING,
                                    paren ? "a scalar string" : "a string attribute",
                                    "a scalar string", &a, &ft);
    if (st || a < 0) return st;
    htri_t is_vl = H5Tis_variable_str(ft);
    if (is_vl < 0) goto h5fail;
    mt = H5Tcopy(H5T_C_S1);
    if (mt < 0) goto h5fail;
    if (is_vl) {
        if (H5Tset_size(mt, H5T_VARIABLE) < 0) goto h5fail;
        H5Tset_cset(mt, H5Tget_cset(ft));
        int rc = gio_guarded_vl_read(a, mt, &vl);
        if (rc == -2) {
            st = qc_errf(c->err, QC_ERR_HDF5,
                         "%s: %s: corrupt variable-length string (the HDF5 library crashed "
                         "reading it)", c->file, lab);
            goto done;
        }
        if (rc < 0) goto h5fail;
        *out = strdup(vl ? vl : "");
        H5free_memory(vl);
        vl = NULL;
    } else {
        size_t sz = H5Tget_size(ft);
        char *buf = calloc(sz + 1, 1);
        if (!buf) {
            st = qc_errf(c->err, QC_ERR_OOM, "%s: %s: out of memory", c->file, lab);
            goto done;
        }
        if (H5Tset_size(mt, sz) < 0 || H5Tset_strpad(mt, H5T_STR_NULLPAD) < 0) {
            free(buf);
            goto h5fail;
        }
        H5Tset_cset(mt, H5Tget_cset(ft));
        if (H5Aread(a, mt, buf) < 0) {
            free(buf);
            goto h5fail;
        }
        buf[sz] = '\0';
        *out = buf;
    }
    if (!*out) st = qc_errf(c->err, QC_ERR_OOM, "%s: %s: out of memory", c->file, lab);
    goto done;
h5fail:
    st = attr_h5fail(c, lab);
done:
    CLOSE_T(mt);
    CLOSE_T(ft);
    CLOSE_A(a);
    return st;
}

qc_status gio_attr_buf(const gio_ctx *c, hid_t obj, const char *objpath, const char *name,
                       int required, char *buf, size_t n) {
    char *s = NULL;
    char lab[600];
    qc_status st = gio_attr_str(c, obj, objpath, name, required, &s);
    buf[0] = '\0';
    if (st || !s) return st;
    size_t len = strlen(s);
    if (len >= n) {
        attr_label(c, objpath, name, lab, sizeof lab);
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: too long (%zu bytes, at most %zu)",
                     c->file, lab, len, n - 1);
    } else {
        memcpy(buf, s, len + 1);
    }
    free(s);
    return st;
}

qc_status gio_attr_int(const gio_ctx *c, hid_t obj, const char *objpath, const char *name,
                       int required, int64_t *out, int *present) {
    hid_t a, ft;
    char lab[600];
    const int paren = c->style == GIO_ATTR_PAREN;
    attr_label(c, objpath, name, lab, sizeof lab);
    if (present) *present = 0;
    qc_status st = attr_open_scalar(c, obj, lab, name, required, H5T_INTEGER,
                                    paren ? "an integer scalar" : "an integer attribute",
                                    paren ? "an integer scalar" : "a scalar", &a, &ft);
    if (st || a < 0) return st;
    int64_t v = 0;
    if (H5Aread(a, H5T_NATIVE_INT64, &v) < 0) {
        st = attr_h5fail(c, lab);
    } else {
        *out = v;
        if (present) *present = 1;
    }
    CLOSE_T(ft);
    CLOSE_A(a);
    return st;
}
