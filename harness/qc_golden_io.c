/* qc_golden_io.c — golden files (HDF5 schema v1) in memory: open + validate (lazily or whole),
 * load / unload cases (writing: qc_golden_write.c; finding files: qc_golden_find.c).
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
#include "qc_golden_internal.h"

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

int gio_valid_case_name(const char *s) {
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
                 gio_h5_errdesc(h5msg, sizeof h5msg));
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
        int rc = gio_guarded_vl_read(a, mt, &vl);
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
                 gio_h5_errdesc(h5msg, sizeof h5msg));
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
                 gio_h5_errdesc(h5msg, sizeof h5msg));
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
                 gio_h5_errdesc(h5msg, sizeof h5msg));
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
qc_status gio_state_alloc_ptrs(const qc_config *cfg, qc_golden_state *gs) {
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
        if (gio_state_alloc_ptrs(cfg, gs))
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
const char *gio_positions_what(const qc_config *cfg) {
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
                   (unsigned long long)before + n, lim, gio_positions_what(cfg));
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
    if (strlen(name) >= sizeof gc->name || !gio_valid_case_name(name))
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
                     "(%s)", c->file, casepath, (long long)v, lim, gio_positions_what(cfg));
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
    gio_h5_quiet();

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
                     gio_h5_errdesc(h5msg, sizeof h5msg));
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
    if (H5Literate(cases, H5_INDEX_NAME, H5_ITER_INC, &idx, gio_collect_names, &nl) < 0) {
        if (nl.oom) {
            st = qc_errf(err, QC_ERR_OOM, "%s: /cases: out of memory", path);
            goto done;
        }
        goto h5fail;
    }
    if (nl.n > 0) qsort(nl.names, (size_t)nl.n, sizeof *nl.names, gio_cmp_str);
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
    st = qc_errf(err, QC_ERR_HDF5, "%s: %s", path, gio_h5_errdesc(h5msg, sizeof h5msg));
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
    gio_h5_quiet();
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
                       gio_h5_errdesc(h5msg, sizeof h5msg));
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

