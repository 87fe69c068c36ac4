/* qc_golden_io.c — golden files (HDF5 schema v1) in memory: open + validate (lazily or whole),
 * load / unload cases, write, find.
 *
 * The layout is the binding list in golden/SCHEMA.md. Reading checks every dataset's presence,
 * type class (float / integer), rank and shape against the config parsed from the file's own
 * config_json attribute, and that every float is finite. Every message names the file and the
 * dataset or attribute path ("g.h5: /cases/len005/prefill/logits: NaN at [3,17]").
 *
 * Reading is bounded before it allocates: qc_golden_open_lazy probes every dataset (type,
 * rank, extents via H5Sget_simple_extent_dims) against the counts and the config without
 * reading it, and bounds the positions; qc_golden_load_case reads one case, probing each
 * dataset again against that metadata before allocating it.
 *
 * HDF5 hygiene (ecosystem notes 3.2): automatic error printing is switched off, presence is
 * probed with H5Lexists / H5Aexists before opening, every handle is closed on every path
 * (single cleanup label per function), numbers are read through native memory types, strings
 * are variable-length UTF-8 scalars on write and either VL or fixed-length on read.
 */
#include "qc_golden.h"
#include "qc_runcase.h" /* qc_case_free */

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "qc/qc_memplan.h"
#include "qc_outpath.h"

/* ===================================================================================== */
/* HDF5 error handling                                                                   */
/* ===================================================================================== */

/* Automatic error-stack printing off (per thread in thread-safe builds, so on every entry). */
static void h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

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
static const char *h5_errdesc(char *buf, size_t n) {
    h5_walk_data d;
    memset(&d, 0, sizeof d);
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_walk_cb, &d);
    snprintf(buf, n, "%s", d.got ? d.desc : "HDF5 error");
    H5Eclear2(H5E_DEFAULT);
    return buf;
}

#define CLOSE_D(h) do { if ((h) >= 0) H5Dclose(h); (h) = H5I_INVALID_HID; } while (0)
#define CLOSE_S(h) do { if ((h) >= 0) H5Sclose(h); (h) = H5I_INVALID_HID; } while (0)
#define CLOSE_T(h) do { if ((h) >= 0) H5Tclose(h); (h) = H5I_INVALID_HID; } while (0)
#define CLOSE_A(h) do { if ((h) >= 0) H5Aclose(h); (h) = H5I_INVALID_HID; } while (0)
#define CLOSE_G(h) do { if ((h) >= 0) H5Gclose(h); (h) = H5I_INVALID_HID; } while (0)
#define CLOSE_P(h) do { if ((h) >= 0) H5Pclose(h); (h) = H5I_INVALID_HID; } while (0)

/* ===================================================================================== */
/* small helpers                                                                         */
/* ===================================================================================== */

/* "[3,17]" from a flat index and dims. */
static void fmt_index(size_t flat, int rank, const hsize_t *dims, char *buf, size_t n) {
    size_t idx[8];
    for (int d = rank - 1; d >= 0; d--) {
        idx[d] = dims[d] ? flat % dims[d] : 0;
        flat = dims[d] ? flat / dims[d] : 0;
    }
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < rank && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%zu", d ? "," : "", idx[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* "[7,512]" */
static void fmt_dims(int rank, const hsize_t *dims, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < rank && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%llu", d ? "," : "", (unsigned long long)dims[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

static int valid_case_name(const char *s) {
    if (!s[0]) return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-') return 0;
    return 1;
}

static int valid_sha(const char *s) {
    size_t n = strlen(s);
    if (n == 0) return 1; /* synthetic models have no hash */
    if (n != 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return 1;
}

/* 1 when every component of `path` (relative to loc) exists as a link. */
static int path_exists(hid_t loc, const char *path) {
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

/* A file access property list for reading: a small metadata cache (1 MiB, at most 4 MiB)
 * instead of the default 2 / 32 MiB: a golden's metadata is read once, front to back, so a
 * large cache only holds memory (a 2000-case golden: ~40 MB less resident). H5P_DEFAULT
 * when the list cannot be made. The caller closes it (CLOSE_P). */
static hid_t read_fapl(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) {
        H5Eclear2(H5E_DEFAULT);
        return H5P_DEFAULT;
    }
    H5AC_cache_config_t cc;
    memset(&cc, 0, sizeof cc);
    cc.version = H5AC__CURR_CACHE_CONFIG_VERSION;
    if (H5Pget_mdc_config(fapl, &cc) >= 0) {
        cc.set_initial_size = 1;
        cc.initial_size = (size_t)1 << 20;
        cc.min_size = (size_t)1 << 20;
        cc.max_size = (size_t)4 << 20;
        if (H5Pset_mdc_config(fapl, &cc) < 0) H5Eclear2(H5E_DEFAULT);
    } else {
        H5Eclear2(H5E_DEFAULT);
    }
    return fapl;
}

/* ===================================================================================== */
/* reading: attributes                                                                   */
/* ===================================================================================== */

typedef struct {
    const char *file; /* the .h5 path, for messages */
    qc_err *err;
} rd_ctx;

/* libhdf5 1.10 can crash (SIGSEGV in H5HG_read) on a corrupted variable-length string in a
 * damaged file. A golden reader must not crash on bad input, so the one read that reaches the
 * global heap is guarded: a fault inside it becomes an error. Returns 0, -1 (HDF5 error) or -2
 * (the library faulted). */
static sigjmp_buf vl_jmp;
static volatile sig_atomic_t vl_armed;
static volatile sig_atomic_t vl_faulted;

int qc_golden_hdf5_faulted(void) { return vl_faulted; }

static void vl_fault(int sig) {
    if (vl_armed) siglongjmp(vl_jmp, sig);
    signal(sig, SIG_DFL);
    raise(sig);
}

static int guarded_vl_read(hid_t a, hid_t mt, char **vl) {
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

/* Open attribute `name` of obj (path objpath, for messages) and check that it is a scalar of
 * class `cls` ("not <cls_what>" / "not <scalar_what>" otherwise). *a and *ft are left
 * H5I_INVALID_HID and QC_OK returned when the attribute is absent and !required; on success
 * the caller closes both. */
static qc_status attr_open_scalar(const rd_ctx *c, hid_t obj, const char *objpath,
                                  const char *name, int required, H5T_class_t cls,
                                  const char *cls_what, const char *scalar_what, hid_t *a,
                                  hid_t *ft) {
    qc_status st = QC_OK;
    hid_t sp = H5I_INVALID_HID;
    char h5msg[300];
    const char *sep = strcmp(objpath, "/") == 0 ? "" : "/";
    *a = *ft = H5I_INVALID_HID;
    if (H5Aexists(obj, name) <= 0) {
        if (!required) return QC_OK;
        return qc_errf(c->err, QC_ERR_MISSING, "%s: %s%s%s: missing attribute", c->file, objpath,
                       sep, name);
    }
    *a = H5Aopen(obj, name, H5P_DEFAULT);
    if (*a < 0) goto h5fail;
    *ft = H5Aget_type(*a);
    sp = H5Aget_space(*a);
    if (*ft < 0 || sp < 0) goto h5fail;
    if (H5Tget_class(*ft) != cls)
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s%s%s: not %s", c->file, objpath, sep, name,
                     cls_what);
    else if (H5Sget_simple_extent_npoints(sp) != 1)
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s%s%s: not %s", c->file, objpath, sep, name,
                     scalar_what);
    goto done;
h5fail:
    st = qc_errf(c->err, QC_ERR_HDF5, "%s: %s%s%s: cannot read: %s", c->file, objpath, sep, name,
                 h5_errdesc(h5msg, sizeof h5msg));
done:
    CLOSE_S(sp);
    if (st) {
        CLOSE_T(*ft);
        CLOSE_A(*a);
    }
    return st;
}

/* Read a string attribute `name` of obj (whose path is objpath, for messages) into a malloc'd
 * string. *out = NULL and QC_OK when absent and !required. */
static qc_status attr_string(const rd_ctx *c, hid_t obj, const char *objpath, const char *name,
                             int required, char **out) {
    hid_t a, ft, mt = H5I_INVALID_HID;
    char *vl = NULL;
    char h5msg[300];
    const char *sep = strcmp(objpath, "/") == 0 ? "" : "/";
    *out = NULL;
    qc_status st = attr_open_scalar(c, obj, objpath, name, required, H5T_STRING,
                                    "a string attribute", "a scalar string", &a, &ft);
    if (st || a < 0) return st;
    htri_t is_vl = H5Tis_variable_str(ft);
    if (is_vl < 0) goto h5fail;
    mt = H5Tcopy(H5T_C_S1);
    if (mt < 0) goto h5fail;
    if (is_vl) {
        if (H5Tset_size(mt, H5T_VARIABLE) < 0) goto h5fail;
        H5Tset_cset(mt, H5Tget_cset(ft));
        int rc = guarded_vl_read(a, mt, &vl);
        if (rc == -2) {
            st = qc_errf(c->err, QC_ERR_HDF5,
                         "%s: %s%s%s: corrupt variable-length string (the HDF5 library crashed "
                         "reading it)", c->file, objpath, sep, name);
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
            st = qc_errf(c->err, QC_ERR_OOM, "%s: %s%s%s: out of memory", c->file, objpath, sep,
                         name);
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
    if (!*out) st = qc_errf(c->err, QC_ERR_OOM, "%s: %s: out of memory", c->file, name);
    goto done;
h5fail:
    st = qc_errf(c->err, QC_ERR_HDF5, "%s: %s%s%s: cannot read: %s", c->file, objpath, sep, name,
                 h5_errdesc(h5msg, sizeof h5msg));
done:
    CLOSE_T(mt);
    CLOSE_T(ft);
    CLOSE_A(a);
    return st;
}

/* Read a string attribute into a fixed buffer (error when it does not fit). */
static qc_status attr_string_buf(const rd_ctx *c, hid_t obj, const char *objpath,
                                 const char *name, int required, char *buf, size_t n) {
    char *s = NULL;
    qc_status st = attr_string(c, obj, objpath, name, required, &s);
    if (st) return st;
    buf[0] = '\0';
    if (!s) return QC_OK;
    size_t len = strlen(s);
    if (len >= n) {
        free(s);
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s%s%s: too long (%zu bytes, at most %zu)",
                       c->file, objpath, strcmp(objpath, "/") == 0 ? "" : "/", name, len, n - 1);
    }
    memcpy(buf, s, len + 1);
    free(s);
    return QC_OK;
}

/* Read an integer scalar attribute (any integer width) as int64. *present = 0 when absent
 * and !required. */
static qc_status attr_int(const rd_ctx *c, hid_t obj, const char *objpath, const char *name,
                          int required, int64_t *out, int *present) {
    hid_t a, ft;
    char h5msg[300];
    const char *sep = strcmp(objpath, "/") == 0 ? "" : "/";
    if (present) *present = 0;
    qc_status st = attr_open_scalar(c, obj, objpath, name, required, H5T_INTEGER,
                                    "an integer attribute", "a scalar", &a, &ft);
    if (st || a < 0) return st;
    int64_t v = 0;
    if (H5Aread(a, H5T_NATIVE_INT64, &v) < 0) goto h5fail;
    *out = v;
    if (present) *present = 1;
    goto done;
h5fail:
    st = qc_errf(c->err, QC_ERR_HDF5, "%s: %s%s%s: cannot read: %s", c->file, objpath, sep, name,
                 h5_errdesc(h5msg, sizeof h5msg));
done:
    CLOSE_T(ft);
    CLOSE_A(a);
    return st;
}

/* ===================================================================================== */
/* reading: datasets                                                                     */
/* ===================================================================================== */

/* "[*,16]" / "[5,16]" from a wanted shape (want[d] < 0: any extent). */
static void fmt_want(int rank, const long long *want, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && o < n; i++) {
        if (want[i] >= 0)
            o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? "," : "", want[i]);
        else
            o += (size_t)snprintf(buf + o, n - o, "%s*", i ? "," : "");
    }
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* Check dataset `rel` under loc (loc's path is locpath) WITHOUT reading it: present, a dataset,
 * float (is_float) or integer, of rank `rank` and of shape `want` (want[d] < 0 accepts any
 * extent in that dimension). dims receives the extents. On QC_OK *dout (when dout != NULL) is
 * the open dataset, for the caller to read and close. */
static qc_status probe_dataset(const rd_ctx *c, hid_t loc, const char *locpath, const char *rel,
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
    if (o < 0 && !path_exists(loc, rel))
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
        fmt_dims(r, have, have_s, sizeof have_s);
        fmt_want(rank, want, want_s, sizeof want_s);
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
                 h5_errdesc(h5msg, sizeof h5msg));
done:
    CLOSE_T(ft);
    CLOSE_S(sp);
    CLOSE_D(d);
    return st;
}

/* Read dataset `rel` under loc as float32 (is_float) or int32 into a malloc'd array, after
 * probe_dataset checked it against `want` (here every extent is known: the metadata pass
 * learnt them). Floats must be finite. */
static qc_status read_dataset(const rd_ctx *c, hid_t loc, const char *locpath, const char *rel,
                              int is_float, int rank, const long long *want, void **out) {
    hid_t d = H5I_INVALID_HID;
    hsize_t dims[8] = {0};
    char path[512], h5msg[300];
    void *buf = NULL;
    *out = NULL;
    qc_status st = probe_dataset(c, loc, locpath, rel, is_float, rank, want, dims, &d);
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
                     h5_errdesc(h5msg, sizeof h5msg));
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

/* Token ids in [0, V). */
static qc_status check_ids(const rd_ctx *c, const char *path, const int32_t *ids, int n, int V) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return qc_errf(c->err, QC_ERR_FORMAT,
                           "%s: %s: token id %d at [%d] outside the vocabulary [0, %d)", c->file,
                           path, (int)ids[i], i, V);
    return QC_OK;
}

/* Allocate the per-layer pointer arrays of gs (all NULL). */
static qc_status state_alloc_ptrs(const qc_config *cfg, qc_golden_state *gs) {
    int L = cfg->n_layers;
    gs->k_cache = calloc((size_t)L, sizeof(float *));
    gs->v_cache = calloc((size_t)L, sizeof(float *));
    gs->conv_state = calloc((size_t)L, sizeof(float *));
    gs->recurrent_state = calloc((size_t)L, sizeof(float *));
    if (!gs->k_cache || !gs->v_cache || !gs->conv_state || !gs->recurrent_state)
        return QC_ERR_OOM;
    return QC_OK;
}

/* The object `name` under loc opened as a group, or H5I_INVALID_HID when there is no such
 * link, it dangles, or it is not a group (the HDF5 error stack cleared). */
static hid_t group_if(hid_t loc, const char *name) {
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
static int link_exists(hid_t loc, const char *name) {
    if (loc < 0) return 0;
    htri_t e = H5Lexists(loc, name, H5P_DEFAULT);
    if (e < 0) H5Eclear2(H5E_DEFAULT);
    return e > 0;
}

static qc_status missing_dataset(const rd_ctx *c, const char *locpath, const char *rel) {
    return qc_errf(c->err, QC_ERR_MISSING, "%s: %s/%s: missing dataset", c->file, locpath, rel);
}

/* Probe (gs == NULL: no data read) or read (into gs) the datasets of <parentpath>/state, the
 * group `parent` being <parentpath> ("/cases/x/prefill" or "/cases/x/decode"), caches of
 * n_pos positions. The state group is opened once and the datasets looked up from it. */
static qc_status state_datasets(const rd_ctx *c, const qc_config *cfg, hid_t parent,
                                const char *parentpath, int n_pos, qc_golden_state *gs) {
    qc_status st = QC_OK;
    char spath[256];
    snprintf(spath, sizeof spath, "%s/state", parentpath);
    if (gs) {
        memset(gs, 0, sizeof *gs);
        if (state_alloc_ptrs(cfg, gs))
            return qc_errf(c->err, QC_ERR_OOM, "%s: %s: out of memory", c->file, spath);
        gs->present = 1;
        gs->n_pos = n_pos;
    }
    hid_t sg = group_if(parent, "state");
    for (int l = 0; !st && l < cfg->n_layers; l++) {
        const int full = cfg->layer_types[l] == QC_LAYER_FULL;
        long long kv[3] = {cfg->n_kv_heads, n_pos, cfg->head_dim};
        long long cv[2] = {qc_cfg_conv_dim(cfg), cfg->conv_kernel};
        long long rs[3] = {cfg->lin_n_v_heads, cfg->lin_k_dim, cfg->lin_v_dim};
        const char *names[2] = {full ? "k_cache" : "conv_state",
                                full ? "v_cache" : "recurrent_state"};
        const long long *want[2] = {full ? kv : cv, full ? kv : rs};
        const int ranks[2] = {full ? 3 : 2, 3};
        float **dst[2] = {NULL, NULL};
        if (gs) {
            dst[0] = full ? &gs->k_cache[l] : &gs->conv_state[l];
            dst[1] = full ? &gs->v_cache[l] : &gs->recurrent_state[l];
        }
        for (int k = 0; !st && k < 2; k++) {
            char rel[64];
            hsize_t dims[3];
            snprintf(rel, sizeof rel, "layer_%02d/%s", l, names[k]);
            if (sg < 0)
                st = missing_dataset(c, spath, rel);
            else if (gs)
                st = read_dataset(c, sg, spath, rel, 1, ranks[k], want[k], (void **)dst[k]);
            else
                st = probe_dataset(c, sg, spath, rel, 1, ranks[k], want[k], dims, NULL);
        }
    }
    CLOSE_G(sg);
    return st;
}

/* ===================================================================================== */
/* reading: cases                                                                        */
/* ===================================================================================== */

int qc_golden_max_positions(const qc_config *cfg) {
    int m = cfg ? cfg->max_position_embeddings : 0;
    return m > 0 && m < QC_GOLDEN_MAX_POSITIONS ? m : QC_GOLDEN_MAX_POSITIONS;
}

/* What bounds the positions, for messages. */
static const char *positions_what(const qc_config *cfg) {
    return cfg->max_position_embeddings > 0 &&
                   cfg->max_position_embeddings < QC_GOLDEN_MAX_POSITIONS
               ? "the config's max_position_embeddings"
               : "the reader's limit";
}

/* A token dataset of n tokens that would take the case past the position limit: QC_ERR_SHAPE
 * naming the dataset, its shape and the most it may hold. */
static qc_status positions_error(const rd_ctx *c, const qc_config *cfg, const char *path,
                                 unsigned long long n, long long before, const char *before_what) {
    const int lim = qc_golden_max_positions(cfg);
    long long room = lim - before > 0 ? lim - before : 0;
    return qc_errf(c->err, QC_ERR_SHAPE,
                   "%s: %s: shape [%llu] != [<=%lld]: %s %lld + %llu = %llu positions, more than "
                   "%d (%s)", c->file, path, n, room, before_what, before, n,
                   (unsigned long long)before + n, lim, positions_what(cfg));
}

/* Metadata of one case (the group /cases/<name>): attributes, counts, which optional groups
 * exist, and every dataset's type and shape, without reading any tensor. */
static qc_status read_case_meta(const rd_ctx *c, const qc_config *cfg, hid_t cases_g,
                                const char *name, qc_golden_case *gc, qc_golden_case_meta *m) {
    qc_status st = QC_OK;
    hid_t g = H5I_INVALID_HID, pg = H5I_INVALID_HID, dg = H5I_INVALID_HID;
    char casepath[160], ppath[200], dpath[200], path[256];
    const long long V = cfg->vocab_size, L = cfg->n_layers, H = cfg->hidden_size;
    const int lim = qc_golden_max_positions(cfg);
    memset(m, 0, sizeof *m);
    snprintf(casepath, sizeof casepath, "/cases/%s", name);
    if (strlen(name) >= sizeof gc->name || !valid_case_name(name))
        return qc_errf(c->err, QC_ERR_FORMAT,
                       "%s: %s: invalid case name (want [A-Za-z0-9_-]+, at most %zu chars)",
                       c->file, casepath, sizeof gc->name - 1);
    snprintf(gc->name, sizeof gc->name, "%s", name);
    g = group_if(cases_g, name);
    if (g < 0) return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: not a group", c->file, casepath);
    snprintf(ppath, sizeof ppath, "%s/prefill", casepath);
    snprintf(dpath, sizeof dpath, "%s/decode", casepath);

    /* attributes */
    int64_t v = 0;
    int present = 0;
    if ((st = attr_int(c, g, casepath, "start_pos", 1, &v, NULL))) goto done;
    if (v < 0 || v >= lim) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/start_pos: %lld is out of range [0, %d) "
                     "(%s)", c->file, casepath, (long long)v, lim, positions_what(cfg));
        goto done;
    }
    gc->start_pos = (int)v;
    if ((st = attr_int(c, g, casepath, "max_seq_len", 0, &v, &present))) goto done;
    if (present && (v < 1 || v > INT_MAX / 2)) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/max_seq_len: %lld is out of range", c->file,
                     casepath, (long long)v);
        goto done;
    }
    gc->max_seq_len = present ? (int)v : 0;
    if ((st = attr_string_buf(c, g, casepath, "description", 0, gc->description,
                              sizeof gc->description)))
        goto done;

    /* history and prompt: the counts, bounded before anything else is looked at */
    const int P = gc->start_pos;
    hsize_t dims[3];
    if (P > 0) {
        long long w[1] = {P};
        if ((st = probe_dataset(c, g, casepath, "history_tokens", 0, 1, w, dims, NULL))) goto done;
        gc->n_history = P;
    }
    long long any1[1] = {-1};
    if ((st = probe_dataset(c, g, casepath, "tokens", 0, 1, any1, dims, NULL))) goto done;
    snprintf(path, sizeof path, "%s/tokens", casepath);
    if (dims[0] < 1) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: empty prompt", c->file, path);
        goto done;
    }
    if (dims[0] > (hsize_t)(lim - P)) {
        st = positions_error(c, cfg, path, (unsigned long long)dims[0], P, "start_pos");
        goto done;
    }
    const int T = (int)dims[0];
    gc->n_tokens = T;

    /* prefill */
    long long wl[2] = {T, V};
    if ((pg = group_if(g, "prefill")) < 0) {
        st = missing_dataset(c, ppath, "logits");
        goto done;
    }
    if ((st = probe_dataset(c, pg, ppath, "logits", 1, 2, wl, dims, NULL))) goto done;
    if (link_exists(pg, "hidden")) {
        long long wh[3] = {L + 1, T, H};
        if ((st = probe_dataset(c, pg, ppath, "hidden", 1, 3, wh, dims, NULL))) goto done;
        m->has_hidden = 1;
    }
    if (link_exists(pg, "state")) {
        if ((st = state_datasets(c, cfg, pg, ppath, P + T, NULL))) goto done;
        m->has_prefill_state = 1;
    }

    /* decode */
    if (link_exists(g, "decode")) {
        m->has_decode = 1;
        if ((dg = group_if(g, "decode")) < 0) {
            st = missing_dataset(c, dpath, "tokens");
            goto done;
        }
        if ((st = probe_dataset(c, dg, dpath, "tokens", 0, 1, any1, dims, NULL))) goto done;
        snprintf(path, sizeof path, "%s/tokens", dpath);
        if (dims[0] > (hsize_t)(lim - P - T)) {
            st = positions_error(c, cfg, path, (unsigned long long)dims[0], (long long)P + T,
                                 "start_pos + prompt");
            goto done;
        }
        const int S = (int)dims[0];
        gc->n_decode = S;
        long long wd[2] = {S, V};
        if ((st = probe_dataset(c, dg, dpath, "logits", 1, 2, wd, dims, NULL))) goto done;
        if (link_exists(dg, "margins")) {
            long long wm[1] = {S};
            if ((st = probe_dataset(c, dg, dpath, "margins", 1, 1, wm, dims, NULL))) goto done;
            m->has_decode_margins = 1;
        }
        if (link_exists(dg, "state")) {
            if ((st = state_datasets(c, cfg, dg, dpath, P + T + S, NULL))) goto done;
            m->has_decode_state = 1;
        }
    }
    m->start_pos = gc->start_pos;
    m->n_tokens = gc->n_tokens;
    m->n_decode = gc->n_decode;
done:
    CLOSE_G(dg);
    CLOSE_G(pg);
    CLOSE_G(g);
    return st;
}

/* Free a case's tensors, keeping its scalars (name, counts). */
static void case_free_tensors(const qc_config *cfg, qc_golden_case *c) {
    free(c->history);
    free(c->tokens);
    free(c->prefill_logits);
    free(c->prefill_hidden);
    qc_golden_state_free(cfg, &c->prefill_state);
    free(c->decode_tokens);
    free(c->decode_logits);
    free(c->decode_margins);
    qc_golden_state_free(cfg, &c->decode_state);
    c->history = c->tokens = c->decode_tokens = NULL;
    c->prefill_logits = c->prefill_hidden = c->decode_logits = c->decode_margins = NULL;
}

/* Read the tensors of case gc (metadata m) from the open file f; every dataset is checked
 * against the metadata again before it is allocated. On error nothing stays allocated. */
static qc_status load_case_from(const rd_ctx *c, const qc_config *cfg, hid_t f,
                                qc_golden_case *gc, const qc_golden_case_meta *m) {
    qc_status st = QC_OK;
    hid_t cg = H5I_INVALID_HID, g = H5I_INVALID_HID, pg = H5I_INVALID_HID,
          dg = H5I_INVALID_HID;
    char casepath[170], ppath[200], dpath[200], path[256];
    const long long V = cfg->vocab_size, L = cfg->n_layers, H = cfg->hidden_size;
    const int P = m->start_pos, T = m->n_tokens, S = m->n_decode;
    snprintf(casepath, sizeof casepath, "/cases/%s", gc->name);
    snprintf(ppath, sizeof ppath, "%s/prefill", casepath);
    snprintf(dpath, sizeof dpath, "%s/decode", casepath);
    cg = group_if(f, "cases");
    g = group_if(cg, gc->name);
    if (g < 0) {
        st = qc_errf(c->err, QC_ERR_MISSING, "%s: %s: missing group", c->file, casepath);
        goto done;
    }
    if (P > 0) {
        long long w[1] = {P};
        if ((st = read_dataset(c, g, casepath, "history_tokens", 0, 1, w, (void **)&gc->history)))
            goto done;
        snprintf(path, sizeof path, "%s/history_tokens", casepath);
        if ((st = check_ids(c, path, gc->history, P, (int)V))) goto done;
    }
    long long wt[1] = {T};
    if ((st = read_dataset(c, g, casepath, "tokens", 0, 1, wt, (void **)&gc->tokens))) goto done;
    snprintf(path, sizeof path, "%s/tokens", casepath);
    if ((st = check_ids(c, path, gc->tokens, T, (int)V))) goto done;
    long long wl[2] = {T, V};
    if ((pg = group_if(g, "prefill")) < 0) {
        st = missing_dataset(c, ppath, "logits");
        goto done;
    }
    if ((st = read_dataset(c, pg, ppath, "logits", 1, 2, wl, (void **)&gc->prefill_logits)))
        goto done;
    if (m->has_hidden) {
        long long wh[3] = {L + 1, T, H};
        if ((st = read_dataset(c, pg, ppath, "hidden", 1, 3, wh, (void **)&gc->prefill_hidden)))
            goto done;
    }
    if (m->has_prefill_state &&
        (st = state_datasets(c, cfg, pg, ppath, P + T, &gc->prefill_state)))
        goto done;
    if (m->has_decode) {
        long long ws[1] = {S};
        if ((dg = group_if(g, "decode")) < 0) {
            st = missing_dataset(c, dpath, "tokens");
            goto done;
        }
        if ((st = read_dataset(c, dg, dpath, "tokens", 0, 1, ws, (void **)&gc->decode_tokens)))
            goto done;
        snprintf(path, sizeof path, "%s/tokens", dpath);
        if ((st = check_ids(c, path, gc->decode_tokens, S, (int)V))) goto done;
        long long wd[2] = {S, V};
        if ((st = read_dataset(c, dg, dpath, "logits", 1, 2, wd, (void **)&gc->decode_logits)))
            goto done;
        if (m->has_decode_margins &&
            (st = read_dataset(c, dg, dpath, "margins", 1, 1, ws, (void **)&gc->decode_margins)))
            goto done;
        if (m->has_decode_state &&
            (st = state_datasets(c, cfg, dg, dpath, P + T + S, &gc->decode_state)))
            goto done;
    }
done:
    CLOSE_G(dg);
    CLOSE_G(pg);
    CLOSE_G(g);
    CLOSE_G(cg);
    if (st) case_free_tensors(cfg, gc);
    return st;
}

/* a * b + c in 64 bits, saturating */
static uint64_t sat_madd(uint64_t a, uint64_t b, uint64_t c) {
    if (a && b > UINT64_MAX / a) return UINT64_MAX;
    uint64_t p = a * b;
    return p > UINT64_MAX - c ? UINT64_MAX : p + c;
}

/* Floats of one state snapshot with n_pos cache positions. */
static uint64_t state_floats(const qc_config *cfg, uint64_t n_pos) {
    uint64_t n = 0;
    const uint64_t conv = (uint64_t)qc_cfg_conv_dim(cfg) * (uint64_t)cfg->conv_kernel;
    const uint64_t rec =
        (uint64_t)cfg->lin_n_v_heads * (uint64_t)cfg->lin_k_dim * (uint64_t)cfg->lin_v_dim;
    for (int l = 0; l < cfg->n_layers; l++) {
        if (cfg->layer_types[l] == QC_LAYER_FULL)
            n = sat_madd(2 * (uint64_t)cfg->n_kv_heads * (uint64_t)cfg->head_dim, n_pos, n);
        else
            n = sat_madd(1, conv + rec, n);
    }
    return n;
}

size_t qc_golden_case_bytes(const qc_config *cfg, const qc_golden_case_meta *m) {
    const uint64_t V = (uint64_t)cfg->vocab_size, L = (uint64_t)cfg->n_layers,
                   H = (uint64_t)cfg->hidden_size;
    const uint64_t P = (uint64_t)m->start_pos, T = (uint64_t)m->n_tokens,
                   S = (uint64_t)m->n_decode;
    uint64_t n = P + T;                            /* history, tokens */
    n = sat_madd(T, V, n);                         /* prefill/logits */
    if (m->has_hidden) n = sat_madd((L + 1) * H, T, n);
    if (m->has_prefill_state) n = sat_madd(1, state_floats(cfg, P + T), n);
    if (m->has_decode) {
        n = sat_madd(S, V + 1 + (m->has_decode_margins ? 1 : 0), n); /* tokens, logits, margins */
        if (m->has_decode_state) n = sat_madd(1, state_floats(cfg, P + T + S), n);
    }
    uint64_t bytes = sat_madd(n, 4, 0);
    /* the per-layer pointer arrays of the state snapshots */
    int n_states = m->has_prefill_state + (m->has_decode && m->has_decode_state);
    bytes = sat_madd((uint64_t)n_states * 4 * L, sizeof(float *), bytes);
    return bytes > (uint64_t)SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}

typedef struct {
    char **names; /* [n] malloc'd */
    int n, cap;
    int oom;
} name_list;

static herr_t collect_names(hid_t g, const char *name, const H5L_info_t *info, void *user) {
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

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void resolve_model_dir(const char *file, const char *model_path, char *out, size_t n) {
    if (model_path[0] == '\0') {
        out[0] = '\0';
    } else if (model_path[0] == '/') {
        snprintf(out, n, "%s", model_path);
    } else {
        const char *slash = strrchr(file, '/');
        if (!slash)
            snprintf(out, n, "%s", model_path);
        else
            snprintf(out, n, "%.*s/%s", (int)(slash - file + (slash == file)), file,
                     model_path);
    }
}

/* ===================================================================================== */
/* public: open / load / free                                                            */
/* ===================================================================================== */

static int64_t mtime_ns(const struct stat *sb) {
    return (int64_t)sb->st_mtim.tv_sec * 1000000000 + (int64_t)sb->st_mtim.tv_nsec;
}

/* Load every case from the open file f, after checking that the tensors fit in memory. */
static qc_status load_all(const rd_ctx *c, qc_golden *g, hid_t f) {
    uint64_t total = 0;
    for (int i = 0; i < g->n_cases; i++)
        total = sat_madd(1, qc_golden_case_bytes(&g->cfg, &g->meta[i]), total);
    uint64_t avail = 0;
    qc_err ign;
    qc_err_clear(&ign);
    /* below 256 MiB always fine; above, refused before reading when the machine cannot give it */
    if (total > ((uint64_t)256 << 20) && qc_memplan_available(&avail, &ign) == QC_OK &&
        total > avail)
        return qc_errf(c->err, QC_ERR_OOM,
                       "%s: the golden's tensors need %.2f GiB, more than the %.2f GiB of memory "
                       "available", c->file, qc_memplan_gib(total), qc_memplan_gib(avail));
    for (int i = 0; i < g->n_cases; i++) {
        qc_status st = load_case_from(c, &g->cfg, f, &g->cases[i], &g->meta[i]);
        if (st) return st;
        g->loaded[i] = 1;
    }
    return QC_OK;
}

static qc_status open_impl(const char *path, int load, qc_golden **out, qc_err *err) {
    qc_status st = QC_OK;
    hid_t f = H5I_INVALID_HID, root = H5I_INVALID_HID, cases = H5I_INVALID_HID;
    hid_t fapl = H5I_INVALID_HID;
    name_list nl = {0};
    char h5msg[300];
    rd_ctx c = {path, err};
    *out = NULL;
    h5_quiet();

    struct stat sb;
    if (stat(path, &sb) != 0)
        return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return qc_errf(err, QC_ERR_IO, "%s: not a regular file", path);
    if (access(path, R_OK) != 0)
        return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return qc_errf(err, QC_ERR_FORMAT, "%s: not an HDF5 file", path);
    }

    qc_golden *g = calloc(1, sizeof *g);
    if (!g) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    snprintf(g->path, sizeof g->path, "%s", path);
    g->file_dev = (uint64_t)sb.st_dev;
    g->file_ino = (uint64_t)sb.st_ino;
    g->file_size = (uint64_t)sb.st_size;
    g->file_mtime_ns = mtime_ns(&sb);

    fapl = read_fapl();
    f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (f < 0) {
        st = qc_errf(err, QC_ERR_HDF5, "%s: cannot open: %s", path,
                     h5_errdesc(h5msg, sizeof h5msg));
        goto done;
    }
    root = H5Gopen2(f, "/", H5P_DEFAULT);
    if (root < 0) goto h5fail;

    /* provenance */
    int64_t v = 0;
    if ((st = attr_int(&c, root, "/", "schema_version", 1, &v, NULL))) goto done;
    if (v != QC_GOLDEN_SCHEMA_VERSION) {
        st = qc_errf(err, QC_ERR_FORMAT, "%s: /schema_version: %lld is not supported (this "
                     "reader handles schema %d)", path, (long long)v, QC_GOLDEN_SCHEMA_VERSION);
        goto done;
    }
    g->schema_version = (int)v;
    if ((st = attr_string_buf(&c, root, "/", "generator", 1, g->generator,
                              sizeof g->generator)))
        goto done;
    if ((st = attr_string_buf(&c, root, "/", "torch_version", 1, g->torch_version,
                              sizeof g->torch_version)))
        goto done;
    if ((st = attr_int(&c, root, "/", "seed", 1, &g->seed, NULL))) goto done;
    if ((st = attr_string_buf(&c, root, "/", "compute_dtype", 1, g->compute_dtype,
                              sizeof g->compute_dtype)))
        goto done;
    if ((st = attr_string_buf(&c, root, "/", "model_path", 1, g->model_path,
                              sizeof g->model_path)))
        goto done;
    if ((st = attr_string_buf(&c, root, "/", "config_sha256", 1, g->config_sha256,
                              sizeof g->config_sha256)))
        goto done;
    if ((st = attr_string_buf(&c, root, "/", "weights_sha256", 1, g->weights_sha256,
                              sizeof g->weights_sha256)))
        goto done;
    if (!valid_sha(g->config_sha256) || !valid_sha(g->weights_sha256)) {
        st = qc_errf(err, QC_ERR_FORMAT, "%s: /%s: not a hex SHA-256", path,
                     valid_sha(g->config_sha256) ? "weights_sha256" : "config_sha256");
        goto done;
    }
    if ((st = attr_string(&c, root, "/", "config_json", 1, &g->config_json))) goto done;
    {
        char where[1100];
        snprintf(where, sizeof where, "%s: /config_json", path);
        if ((st = qc_config_parse(g->config_json, strlen(g->config_json), where, &g->cfg, err)))
            goto done;
    }
    resolve_model_dir(path, g->model_path, g->model_dir, sizeof g->model_dir);

    /* cases, sorted by name: metadata only */
    if (!path_exists(f, "cases")) {
        st = qc_errf(err, QC_ERR_MISSING, "%s: /cases: missing group", path);
        goto done;
    }
    cases = H5Gopen2(f, "cases", H5P_DEFAULT);
    if (cases < 0) goto h5fail;
    hsize_t idx = 0;
    if (H5Literate(cases, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_names, &nl) < 0) {
        if (nl.oom) {
            st = qc_errf(err, QC_ERR_OOM, "%s: /cases: out of memory", path);
            goto done;
        }
        goto h5fail;
    }
    if (nl.n > 0) qsort(nl.names, (size_t)nl.n, sizeof *nl.names, cmp_str);
    size_t nc = nl.n ? (size_t)nl.n : 1;
    g->cases = calloc(nc, sizeof *g->cases);
    g->meta = calloc(nc, sizeof *g->meta);
    g->loaded = calloc(nc, 1);
    if (!g->cases || !g->meta || !g->loaded) {
        st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
        goto done;
    }
    g->n_cases = nl.n;
    for (int i = 0; i < nl.n; i++)
        if ((st = read_case_meta(&c, &g->cfg, cases, nl.names[i], &g->cases[i], &g->meta[i])))
            goto done;
    if (load) st = load_all(&c, g, f);
    goto done;
h5fail:
    st = qc_errf(err, QC_ERR_HDF5, "%s: %s", path, h5_errdesc(h5msg, sizeof h5msg));
done:
    for (int i = 0; i < nl.n; i++) free(nl.names[i]);
    free(nl.names);
    CLOSE_G(cases);
    CLOSE_G(root);
    if (fapl != H5P_DEFAULT) CLOSE_P(fapl);
    if (f >= 0) {
        /* every dataset / attribute / type / space handle was closed on every path */
        QC_ASSERT(H5Fget_obj_count(f, H5F_OBJ_ALL) == 1);
        H5Fclose(f);
    }
    if (st) {
        qc_golden_free(g);
        return st;
    }
    *out = g;
    return QC_OK;
}

qc_status qc_golden_open_lazy(const char *path, qc_golden **out, qc_err *err) {
    return open_impl(path, 0, out, err);
}

qc_status qc_golden_open(const char *path, qc_golden **out, qc_err *err) {
    return open_impl(path, 1, out, err);
}

qc_status qc_golden_load_case(qc_golden *g, int i, qc_err *err) {
    if (!g || i < 0 || i >= g->n_cases || !g->meta || !g->loaded)
        return qc_errf(err, QC_ERR_ARG, "%s: no case %d (of %d)", g ? g->path : "golden", i,
                       g ? g->n_cases : 0);
    if (g->loaded[i]) return QC_OK;
    rd_ctx c = {g->path, err};
    char h5msg[300];
    h5_quiet();
    struct stat sb;
    if (stat(g->path, &sb) != 0)
        return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", g->path, strerror(errno));
    if ((uint64_t)sb.st_dev != g->file_dev || (uint64_t)sb.st_ino != g->file_ino ||
        (uint64_t)sb.st_size != g->file_size || mtime_ns(&sb) != g->file_mtime_ns)
        return qc_errf(err, QC_ERR_IO, "%s: /cases/%s: the file changed since it was opened",
                       g->path, g->cases[i].name);
    hid_t fapl = read_fapl();
    hid_t f = H5Fopen(g->path, H5F_ACC_RDONLY, fapl);
    if (fapl != H5P_DEFAULT) CLOSE_P(fapl);
    if (f < 0)
        return qc_errf(err, QC_ERR_HDF5, "%s: cannot open: %s", g->path,
                       h5_errdesc(h5msg, sizeof h5msg));
    qc_status st = load_case_from(&c, &g->cfg, f, &g->cases[i], &g->meta[i]);
    QC_ASSERT(H5Fget_obj_count(f, H5F_OBJ_ALL) == 1);
    H5Fclose(f);
    if (!st) g->loaded[i] = 1;
    return st;
}

void qc_golden_unload_case(qc_golden *g, int i) {
    if (!g || i < 0 || i >= g->n_cases || !g->loaded || !g->loaded[i]) return;
    case_free_tensors(&g->cfg, &g->cases[i]);
    g->loaded[i] = 0;
}

void qc_golden_free(qc_golden *g) {
    if (!g) return;
    if (g->cases) {
        for (int i = 0; i < g->n_cases; i++) qc_case_free(&g->cfg, &g->cases[i]);
        /* cases beyond n_cases were never filled (calloc'd) */
    }
    free(g->cases);
    free(g->meta);
    free(g->loaded);
    free(g->config_json);
    free(g);
}

/* qc_case_free lives here (not in qc_runcase.c) so that a reader-only program does not pull
 * in the runner; it frees either kind of case. */
void qc_case_free(const qc_config *cfg, qc_golden_case *c) {
    if (!c) return;
    case_free_tensors(cfg, c);
    c->n_history = c->n_tokens = c->n_decode = 0;
}

/* ===================================================================================== */
/* state snapshots                                                                       */
/* ===================================================================================== */

qc_status qc_golden_state_from(const qc_config *cfg, const qc_state *st, int n_pos,
                               qc_golden_state *gs, qc_err *err) {
    memset(gs, 0, sizeof *gs);
    if (st->n_layers != cfg->n_layers || n_pos < 0 || n_pos > st->max_context_len)
        return qc_errf(err, QC_ERR_ARG,
                       "state snapshot: %d positions of a state with capacity %d (%d layers, "
                       "config %d)", n_pos, st->max_context_len, st->n_layers, cfg->n_layers);
    if (state_alloc_ptrs(cfg, gs)) goto oom;
    gs->present = 1;
    gs->n_pos = n_pos;
    const int nkv = cfg->n_kv_heads, hd = cfg->head_dim, cap = st->max_context_len;
    const size_t conv_n = (size_t)qc_cfg_conv_dim(cfg) * (size_t)cfg->conv_kernel;
    const size_t rec_n = (size_t)cfg->lin_n_v_heads * cfg->lin_k_dim * cfg->lin_v_dim;
    for (int l = 0; l < cfg->n_layers; l++) {
        if (cfg->layer_types[l] == QC_LAYER_FULL) {
            size_t n = (size_t)nkv * (size_t)n_pos * (size_t)hd;
            gs->k_cache[l] = malloc(n ? n * sizeof(float) : sizeof(float));
            gs->v_cache[l] = malloc(n ? n * sizeof(float) : sizeof(float));
            if (!gs->k_cache[l] || !gs->v_cache[l]) goto oom;
            for (int h = 0; h < nkv; h++) {
                size_t src = (size_t)h * cap * hd, dst = (size_t)h * n_pos * hd;
                memcpy(gs->k_cache[l] + dst, st->k_cache[l] + src, (size_t)n_pos * hd * sizeof(float));
                memcpy(gs->v_cache[l] + dst, st->v_cache[l] + src, (size_t)n_pos * hd * sizeof(float));
            }
        } else {
            gs->conv_state[l] = malloc(conv_n * sizeof(float));
            gs->recurrent_state[l] = malloc(rec_n * sizeof(float));
            if (!gs->conv_state[l] || !gs->recurrent_state[l]) goto oom;
            memcpy(gs->conv_state[l], st->conv_state[l], conv_n * sizeof(float));
            memcpy(gs->recurrent_state[l], st->recurrent_state[l], rec_n * sizeof(float));
        }
    }
    return QC_OK;
oom:
    qc_golden_state_free(cfg, gs);
    return qc_errf(err, QC_ERR_OOM, "state snapshot: out of memory");
}

void qc_golden_state_free(const qc_config *cfg, qc_golden_state *gs) {
    if (!gs) return;
    for (int l = 0; l < cfg->n_layers; l++) {
        if (gs->k_cache) free(gs->k_cache[l]);
        if (gs->v_cache) free(gs->v_cache[l]);
        if (gs->conv_state) free(gs->conv_state[l]);
        if (gs->recurrent_state) free(gs->recurrent_state[l]);
    }
    free(gs->k_cache);
    free(gs->v_cache);
    free(gs->conv_state);
    free(gs->recurrent_state);
    memset(gs, 0, sizeof *gs);
}

/* ===================================================================================== */
/* writing                                                                               */
/* ===================================================================================== */

typedef struct {
    const char *file; /* the final path, for messages */
    qc_err *err;
} wr_ctx;

static qc_status wr_fail(const wr_ctx *w, const char *what) {
    char h5msg[300];
    return qc_errf(w->err, QC_ERR_HDF5, "%s: %s: cannot write: %s", w->file, what,
                   h5_errdesc(h5msg, sizeof h5msg));
}

/* Scalar variable-length UTF-8 string attribute (what h5py writes for a Python str). */
static qc_status write_attr_string(const wr_ctx *w, hid_t obj, const char *objpath,
                                   const char *name, const char *value) {
    qc_status st = QC_OK;
    hid_t t = H5I_INVALID_HID, sp = H5I_INVALID_HID, a = H5I_INVALID_HID;
    char what[300];
    snprintf(what, sizeof what, "%s%s%s", objpath, strcmp(objpath, "/") ? "/" : "", name);
    t = H5Tcopy(H5T_C_S1);
    if (t < 0 || H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) goto fail;
    sp = H5Screate(H5S_SCALAR);
    if (sp < 0) goto fail;
    a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) goto fail;
    const char *v = value ? value : "";
    if (H5Awrite(a, t, &v) < 0) goto fail;
    goto done;
fail:
    st = wr_fail(w, what);
done:
    CLOSE_A(a);
    CLOSE_S(sp);
    CLOSE_T(t);
    return st;
}

/* Scalar integer attribute: int32 (is64 = 0) or int64. */
static qc_status write_attr_int(const wr_ctx *w, hid_t obj, const char *objpath,
                                const char *name, int64_t value, int is64) {
    qc_status st = QC_OK;
    hid_t sp = H5I_INVALID_HID, a = H5I_INVALID_HID;
    char what[300];
    snprintf(what, sizeof what, "%s%s%s", objpath, strcmp(objpath, "/") ? "/" : "", name);
    sp = H5Screate(H5S_SCALAR);
    if (sp < 0) goto fail;
    a = H5Acreate2(obj, name, is64 ? H5T_STD_I64LE : H5T_STD_I32LE, sp, H5P_DEFAULT,
                   H5P_DEFAULT);
    if (a < 0) goto fail;
    int32_t v32 = (int32_t)value;
    if (H5Awrite(a, is64 ? H5T_NATIVE_INT64 : H5T_NATIVE_INT32, is64 ? (void *)&value
                                                                       : (void *)&v32) < 0)
        goto fail;
    goto done;
fail:
    st = wr_fail(w, what);
done:
    CLOSE_A(a);
    CLOSE_S(sp);
    return st;
}

/* Plain contiguous dataset: float32 (is_float) or int32. */
static qc_status write_dataset(const wr_ctx *w, hid_t loc, const char *locpath, const char *name,
                               int is_float, int rank, const hsize_t *dims, const void *data) {
    qc_status st = QC_OK;
    hid_t sp = H5I_INVALID_HID, d = H5I_INVALID_HID;
    char what[300];
    snprintf(what, sizeof what, "%s/%s", locpath, name);
    size_t numel = 1;
    for (int i = 0; i < rank; i++) numel *= (size_t)dims[i];
    if (numel && !data)
        return qc_errf(w->err, QC_ERR_ARG, "%s: %s: no data", w->file, what);
    sp = H5Screate_simple(rank, dims, NULL);
    if (sp < 0) goto fail;
    d = H5Dcreate2(loc, name, is_float ? H5T_IEEE_F32LE : H5T_STD_I32LE, sp, H5P_DEFAULT,
                   H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0) goto fail;
    if (numel && H5Dwrite(d, is_float ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32, H5S_ALL, H5S_ALL,
                          H5P_DEFAULT, data) < 0)
        goto fail;
    goto done;
fail:
    st = wr_fail(w, what);
done:
    CLOSE_D(d);
    CLOSE_S(sp);
    return st;
}

static qc_status make_group(const wr_ctx *w, hid_t loc, const char *name, const char *path,
                            hid_t *out) {
    *out = H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (*out < 0) return wr_fail(w, path);
    return QC_OK;
}

static qc_status write_state(const wr_ctx *w, const qc_config *cfg, hid_t parent,
                             const char *parentpath, const qc_golden_state *gs) {
    qc_status st = QC_OK;
    hid_t sg = H5I_INVALID_HID, lg = H5I_INVALID_HID;
    char spath[256], lpath[300], lname[32];
    snprintf(spath, sizeof spath, "%s/state", parentpath);
    if ((st = make_group(w, parent, "state", spath, &sg))) return st;
    for (int l = 0; l < cfg->n_layers && !st; l++) {
        snprintf(lname, sizeof lname, "layer_%02d", l);
        snprintf(lpath, sizeof lpath, "%s/%s", spath, lname);
        if ((st = make_group(w, sg, lname, lpath, &lg))) break;
        if (cfg->layer_types[l] == QC_LAYER_FULL) {
            hsize_t kv[3] = {(hsize_t)cfg->n_kv_heads, (hsize_t)gs->n_pos, (hsize_t)cfg->head_dim};
            st = write_dataset(w, lg, lpath, "k_cache", 1, 3, kv, gs->k_cache[l]);
            if (!st) st = write_dataset(w, lg, lpath, "v_cache", 1, 3, kv, gs->v_cache[l]);
        } else {
            hsize_t cv[2] = {(hsize_t)qc_cfg_conv_dim(cfg), (hsize_t)cfg->conv_kernel};
            hsize_t rs[3] = {(hsize_t)cfg->lin_n_v_heads, (hsize_t)cfg->lin_k_dim,
                             (hsize_t)cfg->lin_v_dim};
            st = write_dataset(w, lg, lpath, "conv_state", 1, 2, cv, gs->conv_state[l]);
            if (!st)
                st = write_dataset(w, lg, lpath, "recurrent_state", 1, 3, rs,
                                   gs->recurrent_state[l]);
        }
        CLOSE_G(lg);
    }
    CLOSE_G(sg);
    return st;
}

static qc_status write_case(const wr_ctx *w, const qc_config *cfg, hid_t cases_g,
                            const qc_golden_case *gc) {
    qc_status st = QC_OK;
    hid_t g = H5I_INVALID_HID, pg = H5I_INVALID_HID, dg = H5I_INVALID_HID;
    char cpath[160], ppath[200], dpath[200];
    const hsize_t V = (hsize_t)cfg->vocab_size, L = (hsize_t)cfg->n_layers,
                  H = (hsize_t)cfg->hidden_size;
    snprintf(cpath, sizeof cpath, "/cases/%s", gc->name);
    if (!valid_case_name(gc->name))
        return qc_errf(w->err, QC_ERR_ARG, "%s: %s: invalid case name (want [A-Za-z0-9_-]+)",
                       w->file, cpath);
    if (gc->n_tokens < 1 || !gc->tokens || !gc->prefill_logits)
        return qc_errf(w->err, QC_ERR_ARG, "%s: %s: no prompt tokens / logits", w->file, cpath);
    if (gc->start_pos > 0 && (gc->n_history != gc->start_pos || !gc->history))
        return qc_errf(w->err, QC_ERR_ARG, "%s: %s: start_pos %d needs %d history tokens (have %d)",
                       w->file, cpath, gc->start_pos, gc->start_pos, gc->n_history);
    /* what is written must read back: the reader bounds the positions of a case */
    if ((long long)gc->start_pos + gc->n_tokens + gc->n_decode > qc_golden_max_positions(cfg))
        return qc_errf(w->err, QC_ERR_ARG, "%s: %s: start_pos %d + %d tokens + %d decode steps "
                       "= %lld positions, more than %d (%s)", w->file, cpath, gc->start_pos,
                       gc->n_tokens, gc->n_decode,
                       (long long)gc->start_pos + gc->n_tokens + gc->n_decode,
                       qc_golden_max_positions(cfg), positions_what(cfg));
    if ((st = make_group(w, cases_g, gc->name, cpath, &g))) return st;
    if ((st = write_attr_int(w, g, cpath, "start_pos", gc->start_pos, 0))) goto done;
    if (gc->max_seq_len > 0 &&
        (st = write_attr_int(w, g, cpath, "max_seq_len", gc->max_seq_len, 0)))
        goto done;
    if ((st = write_attr_string(w, g, cpath, "description", gc->description))) goto done;
    if (gc->start_pos > 0) {
        hsize_t dh[1] = {(hsize_t)gc->start_pos};
        if ((st = write_dataset(w, g, cpath, "history_tokens", 0, 1, dh, gc->history))) goto done;
    }
    const hsize_t T = (hsize_t)gc->n_tokens;
    hsize_t dt[1] = {T};
    if ((st = write_dataset(w, g, cpath, "tokens", 0, 1, dt, gc->tokens))) goto done;

    snprintf(ppath, sizeof ppath, "%s/prefill", cpath);
    if ((st = make_group(w, g, "prefill", ppath, &pg))) goto done;
    hsize_t dl[2] = {T, V};
    if ((st = write_dataset(w, pg, ppath, "logits", 1, 2, dl, gc->prefill_logits))) goto done;
    if (gc->prefill_hidden) {
        hsize_t dhid[3] = {L + 1, T, H};
        if ((st = write_dataset(w, pg, ppath, "hidden", 1, 3, dhid, gc->prefill_hidden)))
            goto done;
    }
    if (gc->prefill_state.present) {
        if (gc->prefill_state.n_pos != gc->start_pos + gc->n_tokens) {
            st = qc_errf(w->err, QC_ERR_ARG, "%s: %s/state: %d positions != start_pos + T = %d",
                         w->file, ppath, gc->prefill_state.n_pos, gc->start_pos + gc->n_tokens);
            goto done;
        }
        if ((st = write_state(w, cfg, pg, ppath, &gc->prefill_state))) goto done;
    }

    if (gc->n_decode > 0) {
        const hsize_t S = (hsize_t)gc->n_decode;
        snprintf(dpath, sizeof dpath, "%s/decode", cpath);
        if ((st = make_group(w, g, "decode", dpath, &dg))) goto done;
        hsize_t ds[1] = {S}, dsl[2] = {S, V};
        if ((st = write_dataset(w, dg, dpath, "tokens", 0, 1, ds, gc->decode_tokens))) goto done;
        if ((st = write_dataset(w, dg, dpath, "logits", 1, 2, dsl, gc->decode_logits))) goto done;
        if (gc->decode_margins &&
            (st = write_dataset(w, dg, dpath, "margins", 1, 1, ds, gc->decode_margins)))
            goto done;
        if (gc->decode_state.present) {
            if (gc->decode_state.n_pos != gc->start_pos + gc->n_tokens + gc->n_decode) {
                st = qc_errf(w->err, QC_ERR_ARG,
                             "%s: %s/state: %d positions != start_pos + T + S = %d", w->file,
                             dpath, gc->decode_state.n_pos,
                             gc->start_pos + gc->n_tokens + gc->n_decode);
                goto done;
            }
            if ((st = write_state(w, cfg, dg, dpath, &gc->decode_state))) goto done;
        }
    }
done:
    CLOSE_G(dg);
    CLOSE_G(pg);
    CLOSE_G(g);
    return st;
}

qc_status qc_golden_write(const char *path, const qc_golden *g, qc_err *err) {
    qc_status st = QC_OK;
    hid_t f = H5I_INVALID_HID, root = H5I_INVALID_HID, cases = H5I_INVALID_HID;
    wr_ctx w = {path, err};
    char h5msg[300];
    h5_quiet();
    if (!g->config_json)
        return qc_errf(err, QC_ERR_ARG, "%s: /config_json: no config text", path);
    for (int i = 0; i < g->n_cases; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(g->cases[i].name, g->cases[j].name) == 0)
                return qc_errf(err, QC_ERR_ARG, "%s: /cases/%s: duplicate case name", path,
                               g->cases[i].name);

    /* the temp file beside the target (qc_outpath: validated, never an input of the run,
     * removed on every error path and on SIGINT / SIGTERM); HDF5 writes it by name */
    qc_out out;
    if ((st = qc_out_open(&out, path, QC_OUT_REGULAR, err))) return st;
    f = H5Fcreate(out.tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        st = qc_errf(err, QC_ERR_IO, "%s: cannot create %s: %s", path, out.tmp,
                     h5_errdesc(h5msg, sizeof h5msg));
        qc_out_abort(&out);
        return st;
    }
    root = H5Gopen2(f, "/", H5P_DEFAULT);
    if (root < 0) {
        st = wr_fail(&w, "/");
        goto done;
    }
    if ((st = write_attr_int(&w, root, "/", "schema_version", QC_GOLDEN_SCHEMA_VERSION, 0)) ||
        (st = write_attr_string(&w, root, "/", "generator", g->generator)) ||
        (st = write_attr_string(&w, root, "/", "torch_version", g->torch_version)) ||
        (st = write_attr_int(&w, root, "/", "seed", g->seed, 1)) ||
        (st = write_attr_string(&w, root, "/", "compute_dtype", g->compute_dtype)) ||
        (st = write_attr_string(&w, root, "/", "model_path", g->model_path)) ||
        (st = write_attr_string(&w, root, "/", "config_sha256", g->config_sha256)) ||
        (st = write_attr_string(&w, root, "/", "weights_sha256", g->weights_sha256)) ||
        (st = write_attr_string(&w, root, "/", "config_json", g->config_json)))
        goto done;
    if ((st = make_group(&w, root, "cases", "/cases", &cases))) goto done;
    for (int i = 0; i < g->n_cases; i++)
        if ((st = write_case(&w, &g->cfg, cases, &g->cases[i]))) goto done;
done:
    CLOSE_G(cases);
    CLOSE_G(root);
    /* every dataset / attribute / type / space handle is closed on every path; but an I/O
     * error (disk full, file size limit) can make H5Dclose / H5Gclose fail (unchecked by the
     * CLOSE_* macros) and leave the object open: that is a failed write, not a crash. (Such
     * an object must not be closed again: libhdf5 1.10 can crash re-flushing it.) */
    int leaked = H5Fget_obj_count(f, H5F_OBJ_ALL | H5F_OBJ_LOCAL) != 1;
    if (!st && leaked) st = wr_fail(&w, "closing the file's objects (disk full?)");
    if (st) H5Eclear2(H5E_DEFAULT);
    herr_t closed = H5Fclose(f);
    if (closed < 0 && !st) st = wr_fail(&w, "closing the file");
    if (st) {
        /* after an I/O error libhdf5 may keep the file open and crash flushing it at exit:
         * mark the library unusable (main() then leaves with _exit, like after a fault) */
        if (leaked || closed < 0) vl_faulted = 1;
        H5Eclear2(H5E_DEFAULT);
        qc_out_abort(&out);
        return st;
    }
    return qc_out_commit(&out, err); /* fsync + rename onto path */
}

/* ===================================================================================== */
/* finding golden files                                                                  */
/* ===================================================================================== */

/* The walk follows symbolic links but takes every directory and every file once, by device +
 * inode. Real directories are walked first (depth first, names in byte order); a symlinked
 * directory is queued and walked after them (breadth of links: all one-link targets, then the
 * two-link ones, ...), so a directory reachable both ways is listed under its real path. A
 * directory reached again is skipped: a "directory loop" when it encloses the link, else a
 * duplicate. Of several names of one file, the one reached through the fewest symlinks, then
 * the first in byte order, is kept. Every skip is a note on stderr, never an error. */

typedef struct {
    dev_t dev;
    ino_t ino;
    char *path;
} seen_dir;

typedef struct {
    dev_t dev;
    ino_t ino;
    int links; /* symlinks followed to reach it */
    char *path;
    const char *same_as; /* set when skipped: the kept name */
} found_file;

typedef struct {
    char *path;
    int depth, links;
} pend_dir;

typedef struct {
    seen_dir *dirs;
    int nd, capd;
    found_file *files;
    int nf, capf;
    pend_dir *pend;
    int np, capp;
    qc_err *err;
} walker;

/* arr (elements of size elt, capacity *cap) with room for n + 1: arr itself, or a larger copy
 * (*cap updated); NULL when out of memory (arr unchanged). */
static void *grow(void *arr, int *cap, int n, size_t elt) {
    if (n < *cap) return arr;
    int nc = *cap ? *cap * 2 : 16;
    void *na = realloc(arr, (size_t)nc * elt);
    if (na) *cap = nc;
    return na;
}

/* Notes are printed once per process per skipped path: qc_outpath walks the --golden tree
 * too (to register the inputs) before the check walks it. */
static uint64_t noted_[512];
static int n_noted_;

static void note_skip(const char *path, const char *why, const char *other) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a of path, why */
    for (const char *s = path; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    for (const char *s = why; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    for (int i = 0; i < n_noted_; i++)
        if (noted_[i] == h) return;
    if (n_noted_ < (int)(sizeof noted_ / sizeof *noted_)) noted_[n_noted_++] = h;
    fprintf(stderr, "qwen-conform: note: skipping %s: %s%s\n", path, why, other);
}

/* 1 when path is dir or inside it. */
static int path_within(const char *path, const char *dir) {
    size_t n = strlen(dir);
    if (strncmp(path, dir, n) != 0) return 0;
    return path[n] == '\0' || path[n] == '/' || (n > 0 && dir[n - 1] == '/');
}

static qc_status walk_dir(walker *w, const char *dir, int depth, int links);

/* Walk the directory at p (stat sb) unless it was walked already. */
static qc_status visit_dir(walker *w, const char *p, const struct stat *sb, int depth,
                           int links) {
    for (int i = 0; i < w->nd; i++) {
        if (w->dirs[i].dev != sb->st_dev || w->dirs[i].ino != sb->st_ino) continue;
        if (path_within(p, w->dirs[i].path)) {
            char other[PATH_MAX + 64];
            snprintf(other, sizeof other, " (back to %s)", w->dirs[i].path);
            note_skip(p, "directory loop", other);
        } else {
            note_skip(p, "same file as ", w->dirs[i].path);
        }
        return QC_OK;
    }
    if (depth > 32) return qc_errf(w->err, QC_ERR_IO, "%s: directories nested too deeply", p);
    seen_dir *nd = grow(w->dirs, &w->capd, w->nd, sizeof *w->dirs);
    if (nd) w->dirs = nd;
    if (!nd || !(w->dirs[w->nd].path = strdup(p)))
        return qc_errf(w->err, QC_ERR_OOM, "%s: out of memory", p);
    w->dirs[w->nd].dev = sb->st_dev;
    w->dirs[w->nd].ino = sb->st_ino;
    w->nd++;
    return walk_dir(w, p, depth, links);
}

static qc_status walk_dir(walker *w, const char *dir, int depth, int links) {
    DIR *d = opendir(dir);
    if (!d)
        return qc_errf(w->err, QC_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    name_list nl = {0};
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue; /* ".", "..", hidden temp dirs and files */
        if (collect_names(0, e->d_name, NULL, &nl) < 0) break;
    }
    closedir(d);
    qc_status st = nl.oom ? qc_errf(w->err, QC_ERR_OOM, "%s: out of memory", dir) : QC_OK;
    if (!st && nl.n > 1) qsort(nl.names, (size_t)nl.n, sizeof *nl.names, cmp_str);
    for (int i = 0; !st && i < nl.n; i++) {
        char p[PATH_MAX];
        int n = snprintf(p, sizeof p, "%s/%s", dir, nl.names[i]);
        if (n < 0 || (size_t)n >= sizeof p) continue;
        struct stat lsb, sb;
        if (lstat(p, &lsb) != 0) continue;
        const int is_link = S_ISLNK(lsb.st_mode);
        if (is_link) {
            if (stat(p, &sb) != 0) continue; /* dangling */
        } else {
            sb = lsb;
        }
        if (S_ISDIR(sb.st_mode) && !is_link) {
            st = visit_dir(w, p, &sb, depth + 1, links);
        } else if (S_ISDIR(sb.st_mode)) { /* a symlinked directory: walked after the real ones */
            pend_dir *np = grow(w->pend, &w->capp, w->np, sizeof *w->pend);
            if (np) w->pend = np;
            if (!np || !(w->pend[w->np].path = strdup(p))) {
                st = qc_errf(w->err, QC_ERR_OOM, "%s: out of memory", dir);
                break;
            }
            w->pend[w->np].depth = depth + 1;
            w->pend[w->np].links = links + 1;
            w->np++;
        } else if (S_ISREG(sb.st_mode)) {
            size_t len = strlen(nl.names[i]);
            if (len <= 3 || strcmp(nl.names[i] + len - 3, ".h5") != 0) continue;
            found_file *nf = grow(w->files, &w->capf, w->nf, sizeof *w->files);
            if (nf) w->files = nf;
            if (!nf || !(w->files[w->nf].path = strdup(p))) {
                st = qc_errf(w->err, QC_ERR_OOM, "%s: out of memory", dir);
                break;
            }
            found_file *ff = &w->files[w->nf++];
            ff->dev = sb.st_dev;
            ff->ino = sb.st_ino;
            ff->links = links + is_link;
            ff->same_as = NULL;
        }
    }
    for (int i = 0; i < nl.n; i++) free(nl.names[i]);
    free(nl.names);
    return st;
}

/* Same file first, then the fewest links, then byte order. */
static int cmp_found(const void *a, const void *b) {
    const found_file *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    if (x->links != y->links) return x->links < y->links ? -1 : 1;
    return strcmp(x->path, y->path);
}

static int cmp_found_path(const void *a, const void *b) {
    return strcmp(((const found_file *)a)->path, ((const found_file *)b)->path);
}

static void walker_free(walker *w) {
    for (int i = 0; i < w->nd; i++) free(w->dirs[i].path);
    for (int i = 0; i < w->nf; i++) free(w->files[i].path);
    for (int i = 0; i < w->np; i++) free(w->pend[i].path);
    free(w->dirs);
    free(w->files);
    free(w->pend);
}

/* The walk of a directory: every *.h5 once, sorted, into pl (an array of malloc'd paths). */
static qc_status find_dir(const char *base, const struct stat *sb, char ***out, int *nout,
                          qc_err *err) {
    walker w;
    memset(&w, 0, sizeof w);
    w.err = err;
    qc_status st = visit_dir(&w, base, sb, 0, 0);
    /* then the symlinked directories, in the order met (the queue grows while walked) */
    for (int k = 0; !st && k < w.np; k++) {
        struct stat ps;
        const pend_dir pd = w.pend[k];
        if (stat(pd.path, &ps) == 0 && S_ISDIR(ps.st_mode))
            st = visit_dir(&w, pd.path, &ps, pd.depth, pd.links);
    }
    char **paths = NULL;
    int n = 0;
    if (!st && w.nf > 0) {
        qsort(w.files, (size_t)w.nf, sizeof *w.files, cmp_found);
        for (int i = 1; i < w.nf; i++) {
            found_file *prev = &w.files[i - 1];
            if (w.files[i].dev == prev->dev && w.files[i].ino == prev->ino)
                w.files[i].same_as = prev->same_as ? prev->same_as : prev->path;
        }
        qsort(w.files, (size_t)w.nf, sizeof *w.files, cmp_found_path);
        paths = malloc((size_t)w.nf * sizeof *paths);
        if (!paths) st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", base);
        for (int i = 0; !st && i < w.nf; i++) {
            if (w.files[i].same_as) {
                note_skip(w.files[i].path, "same file as ", w.files[i].same_as);
                continue;
            }
            paths[n++] = w.files[i].path;
            w.files[i].path = NULL; /* moved; kept names stay valid for same_as until freed */
        }
    }
    if (st) {
        qc_golden_paths_free(paths, n);
        paths = NULL;
        n = 0;
    }
    /* same_as points into kept paths (moved, still alive) or skipped ones (freed here, after
     * the notes were printed) */
    walker_free(&w);
    *out = paths;
    *nout = n;
    return st;
}

qc_status qc_golden_find(const char *dir_or_file, char ***paths, int *n, qc_err *err) {
    *paths = NULL;
    *n = 0;
    struct stat sb;
    if (stat(dir_or_file, &sb) != 0)
        return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", dir_or_file, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        char base[PATH_MAX];
        snprintf(base, sizeof base, "%s", dir_or_file);
        size_t bl = strlen(base);
        while (bl > 1 && base[bl - 1] == '/') base[--bl] = '\0';
        return find_dir(base, &sb, paths, n, err);
    }
    char **one = malloc(sizeof *one);
    if (!one || !(one[0] = strdup(dir_or_file))) {
        free(one);
        return qc_errf(err, QC_ERR_OOM, "%s: out of memory", dir_or_file);
    }
    *paths = one;
    *n = 1;
    return QC_OK;
}

void qc_golden_paths_free(char **paths, int n) {
    if (!paths) return;
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}
