/* qc_golden_io.c — golden files (HDF5 schema v1) in memory: open + validate, write, find.
 *
 * The layout is the binding list in golden/SCHEMA.md. Reading checks every dataset's presence,
 * type class (float / integer), rank and shape against the config parsed from the file's own
 * config_json attribute, and that every float is finite. Every message names the file and the
 * dataset or attribute path ("g.h5: /cases/len005/prefill/logits: NaN at [3,17]").
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

/* H5I type of the object at rel under loc (H5I_BADID when it cannot be opened). */
static H5I_type_t object_type(hid_t loc, const char *rel) {
    hid_t o = H5Oopen(loc, rel, H5P_DEFAULT);
    if (o < 0) {
        H5Eclear2(H5E_DEFAULT);
        return H5I_BADID;
    }
    H5I_type_t t = H5Iget_type(o);
    H5Oclose(o);
    return t;
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

/* Read dataset `rel` under loc (loc's path is locpath) as float32 (is_float) or int32 into a
 * malloc'd array. want[d] < 0 accepts any extent in that dimension; got (may be NULL)
 * receives the actual dims. Floats must be finite. */
static qc_status read_dataset(const rd_ctx *c, hid_t loc, const char *locpath, const char *rel,
                              int is_float, int rank, const long long *want, hsize_t *got,
                              void **out) {
    qc_status st = QC_OK;
    hid_t d = H5I_INVALID_HID, ft = H5I_INVALID_HID, sp = H5I_INVALID_HID;
    char path[512], h5msg[300];
    void *buf = NULL;
    snprintf(path, sizeof path, "%s/%s", locpath, rel);
    *out = NULL;
    if (!path_exists(loc, rel))
        return qc_errf(c->err, QC_ERR_MISSING, "%s: %s: missing dataset", c->file, path);
    if (object_type(loc, rel) != H5I_DATASET) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: not a dataset", c->file, path);
        goto done;
    }
    d = H5Dopen2(loc, rel, H5P_DEFAULT);
    if (d < 0) goto h5fail;
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
    hsize_t dims[8] = {0};
    if (r < 0 || r > 8) goto h5fail;
    H5Sget_simple_extent_dims(sp, dims, NULL);
    int shape_ok = r == rank;
    for (int i = 0; shape_ok && i < rank; i++)
        if (want[i] >= 0 && dims[i] != (hsize_t)want[i]) shape_ok = 0;
    if (!shape_ok) {
        char have_s[128], want_s[128];
        fmt_dims(r, dims, have_s, sizeof have_s);
        size_t o = (size_t)snprintf(want_s, sizeof want_s, "[");
        for (int i = 0; i < rank && o < sizeof want_s; i++) {
            if (want[i] >= 0)
                o += (size_t)snprintf(want_s + o, sizeof want_s - o, "%s%lld", i ? "," : "", want[i]);
            else
                o += (size_t)snprintf(want_s + o, sizeof want_s - o, "%s*", i ? "," : "");
        }
        if (o < sizeof want_s) snprintf(want_s + o, sizeof want_s - o, "]");
        st = qc_errf(c->err, QC_ERR_SHAPE, "%s: %s: shape %s != %s", c->file, path, have_s,
                     want_s);
        goto done;
    }
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
                         H5P_DEFAULT, buf) < 0)
        goto h5fail;
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
    if (got)
        for (int i = 0; i < rank; i++) got[i] = dims[i];
    *out = buf;
    buf = NULL;
    goto done;
h5fail:
    st = qc_errf(c->err, QC_ERR_HDF5, "%s: %s: cannot read: %s", c->file, path,
                 h5_errdesc(h5msg, sizeof h5msg));
done:
    free(buf);
    CLOSE_T(ft);
    CLOSE_S(sp);
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

/* Read <casepath>/<which>/state (which = "prefill" or "decode") into gs; absent group ->
 * present = 0. */
static qc_status read_state(const rd_ctx *c, const qc_config *cfg, hid_t case_g,
                            const char *casepath, const char *which, int n_pos,
                            qc_golden_state *gs) {
    char rel[128];
    snprintf(rel, sizeof rel, "%s/state", which);
    memset(gs, 0, sizeof *gs);
    if (!path_exists(case_g, rel)) return QC_OK;
    if (state_alloc_ptrs(cfg, gs))
        return qc_errf(c->err, QC_ERR_OOM, "%s: %s/%s: out of memory", c->file, casepath, rel);
    gs->present = 1;
    gs->n_pos = n_pos;
    for (int l = 0; l < cfg->n_layers; l++) {
        char ds[192];
        qc_status st;
        if (cfg->layer_types[l] == QC_LAYER_FULL) {
            long long kv[3] = {cfg->n_kv_heads, n_pos, cfg->head_dim};
            snprintf(ds, sizeof ds, "%s/layer_%02d/k_cache", rel, l);
            st = read_dataset(c, case_g, casepath, ds, 1, 3, kv, NULL, (void **)&gs->k_cache[l]);
            if (st) return st;
            snprintf(ds, sizeof ds, "%s/layer_%02d/v_cache", rel, l);
            st = read_dataset(c, case_g, casepath, ds, 1, 3, kv, NULL, (void **)&gs->v_cache[l]);
            if (st) return st;
        } else {
            long long cv[2] = {qc_cfg_conv_dim(cfg), cfg->conv_kernel};
            long long rs[3] = {cfg->lin_n_v_heads, cfg->lin_k_dim, cfg->lin_v_dim};
            snprintf(ds, sizeof ds, "%s/layer_%02d/conv_state", rel, l);
            st = read_dataset(c, case_g, casepath, ds, 1, 2, cv, NULL,
                              (void **)&gs->conv_state[l]);
            if (st) return st;
            snprintf(ds, sizeof ds, "%s/layer_%02d/recurrent_state", rel, l);
            st = read_dataset(c, case_g, casepath, ds, 1, 3, rs, NULL,
                              (void **)&gs->recurrent_state[l]);
            if (st) return st;
        }
    }
    return QC_OK;
}

/* ===================================================================================== */
/* reading: cases                                                                        */
/* ===================================================================================== */

static qc_status read_case(const rd_ctx *c, const qc_config *cfg, hid_t cases_g,
                           const char *name, qc_golden_case *gc) {
    qc_status st = QC_OK;
    hid_t g = H5I_INVALID_HID;
    char casepath[160], path[256], h5msg[300];
    const int V = cfg->vocab_size, L = cfg->n_layers, H = cfg->hidden_size;
    snprintf(casepath, sizeof casepath, "/cases/%s", name);
    if (strlen(name) >= sizeof gc->name || !valid_case_name(name))
        return qc_errf(c->err, QC_ERR_FORMAT,
                       "%s: %s: invalid case name (want [A-Za-z0-9_-]+, at most %zu chars)",
                       c->file, casepath, sizeof gc->name - 1);
    snprintf(gc->name, sizeof gc->name, "%s", name);
    if (object_type(cases_g, name) != H5I_GROUP)
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: not a group", c->file, casepath);
    g = H5Gopen2(cases_g, name, H5P_DEFAULT);
    if (g < 0) goto h5fail;

    /* attributes */
    int64_t v = 0;
    int present = 0;
    if ((st = attr_int(c, g, casepath, "start_pos", 1, &v, NULL))) goto done;
    if (v < 0 || v > INT_MAX / 2) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/start_pos: %lld is out of range", c->file,
                     casepath, (long long)v);
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

    /* history and prompt */
    const int P = gc->start_pos;
    hsize_t got[3];
    if (P > 0) {
        long long w[1] = {P};
        if ((st = read_dataset(c, g, casepath, "history_tokens", 0, 1, w, NULL,
                               (void **)&gc->history)))
            goto done;
        gc->n_history = P;
        snprintf(path, sizeof path, "%s/history_tokens", casepath);
        if ((st = check_ids(c, path, gc->history, P, V))) goto done;
    }
    long long any1[1] = {-1};
    if ((st = read_dataset(c, g, casepath, "tokens", 0, 1, any1, got, (void **)&gc->tokens)))
        goto done;
    gc->n_tokens = (int)got[0];
    snprintf(path, sizeof path, "%s/tokens", casepath);
    if (gc->n_tokens < 1) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: empty prompt", c->file, path);
        goto done;
    }
    if ((st = check_ids(c, path, gc->tokens, gc->n_tokens, V))) goto done;
    const int T = gc->n_tokens;

    /* prefill */
    long long wl[2] = {T, V};
    if ((st = read_dataset(c, g, casepath, "prefill/logits", 1, 2, wl, NULL,
                           (void **)&gc->prefill_logits)))
        goto done;
    if (path_exists(g, "prefill/hidden")) {
        long long wh[3] = {L + 1, T, H};
        if ((st = read_dataset(c, g, casepath, "prefill/hidden", 1, 3, wh, NULL,
                               (void **)&gc->prefill_hidden)))
            goto done;
    }
    if ((st = read_state(c, cfg, g, casepath, "prefill", P + T, &gc->prefill_state))) goto done;

    /* decode */
    if (path_exists(g, "decode")) {
        if ((st = read_dataset(c, g, casepath, "decode/tokens", 0, 1, any1, got,
                               (void **)&gc->decode_tokens)))
            goto done;
        const int S = (int)got[0];
        gc->n_decode = S;
        snprintf(path, sizeof path, "%s/decode/tokens", casepath);
        if ((st = check_ids(c, path, gc->decode_tokens, S, V))) goto done;
        long long wd[2] = {S, V};
        if ((st = read_dataset(c, g, casepath, "decode/logits", 1, 2, wd, NULL,
                               (void **)&gc->decode_logits)))
            goto done;
        if (path_exists(g, "decode/margins")) {
            long long wm[1] = {S};
            if ((st = read_dataset(c, g, casepath, "decode/margins", 1, 1, wm, NULL,
                                   (void **)&gc->decode_margins)))
                goto done;
        }
        if ((st = read_state(c, cfg, g, casepath, "decode", P + T + S, &gc->decode_state)))
            goto done;
    }
    goto done;
h5fail:
    st = qc_errf(c->err, QC_ERR_HDF5, "%s: %s: cannot open: %s", c->file, casepath,
                 h5_errdesc(h5msg, sizeof h5msg));
done:
    CLOSE_G(g);
    return st;
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
/* public: open / free                                                                   */
/* ===================================================================================== */

qc_status qc_golden_open(const char *path, qc_golden **out, qc_err *err) {
    qc_status st = QC_OK;
    hid_t f = H5I_INVALID_HID, root = H5I_INVALID_HID, cases = H5I_INVALID_HID;
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

    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
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

    /* cases, sorted by name */
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
    g->cases = calloc(nl.n ? (size_t)nl.n : 1, sizeof *g->cases);
    if (!g->cases) {
        st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
        goto done;
    }
    g->n_cases = nl.n;
    for (int i = 0; i < nl.n; i++)
        if ((st = read_case(&c, &g->cfg, cases, nl.names[i], &g->cases[i]))) goto done;
    goto done;
h5fail:
    st = qc_errf(err, QC_ERR_HDF5, "%s: %s", path, h5_errdesc(h5msg, sizeof h5msg));
done:
    for (int i = 0; i < nl.n; i++) free(nl.names[i]);
    free(nl.names);
    CLOSE_G(cases);
    CLOSE_G(root);
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

void qc_golden_free(qc_golden *g) {
    if (!g) return;
    if (g->cases) {
        for (int i = 0; i < g->n_cases; i++) qc_case_free(&g->cfg, &g->cases[i]);
        /* cases beyond n_cases were never filled (calloc'd) */
    }
    free(g->cases);
    free(g->config_json);
    free(g);
}

/* qc_case_free lives here (not in qc_runcase.c) so that a reader-only program does not pull
 * in the runner; it frees either kind of case. */
void qc_case_free(const qc_config *cfg, qc_golden_case *c) {
    if (!c) return;
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

typedef struct {
    char **paths; /* [n] malloc'd */
    int n, cap;
} path_list;

static int path_push(path_list *pl, const char *p) {
    if (pl->n == pl->cap) {
        int ncap = pl->cap ? pl->cap * 2 : 16;
        char **np = realloc(pl->paths, (size_t)ncap * sizeof *np);
        if (!np) return -1;
        pl->paths = np;
        pl->cap = ncap;
    }
    pl->paths[pl->n] = strdup(p);
    if (!pl->paths[pl->n]) return -1;
    pl->n++;
    return 0;
}

static qc_status find_rec(const char *dir, path_list *pl, int depth, qc_err *err) {
    if (depth > 32) return qc_errf(err, QC_ERR_IO, "%s: directories nested too deeply", dir);
    DIR *d = opendir(dir);
    if (!d) return qc_errf(err, QC_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    qc_status st = QC_OK;
    struct dirent *e;
    while (!st && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue; /* ".", "..", hidden temp dirs and files */
        char p[PATH_MAX];
        int n = snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (n < 0 || (size_t)n >= sizeof p) continue;
        struct stat sb;
        if (stat(p, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) {
            st = find_rec(p, pl, depth + 1, err);
        } else if (S_ISREG(sb.st_mode)) {
            size_t len = strlen(e->d_name);
            if (len > 3 && strcmp(e->d_name + len - 3, ".h5") == 0 && path_push(pl, p))
                st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", dir);
        }
    }
    closedir(d);
    return st;
}

qc_status qc_golden_find(const char *dir_or_file, char ***paths, int *n, qc_err *err) {
    path_list pl = {0};
    *paths = NULL;
    *n = 0;
    struct stat sb;
    if (stat(dir_or_file, &sb) != 0)
        return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", dir_or_file, strerror(errno));
    qc_status st = QC_OK;
    if (S_ISDIR(sb.st_mode)) {
        char base[PATH_MAX];
        snprintf(base, sizeof base, "%s", dir_or_file);
        size_t bl = strlen(base);
        while (bl > 1 && base[bl - 1] == '/') base[--bl] = '\0';
        st = find_rec(base, &pl, 0, err);
    } else if (path_push(&pl, dir_or_file)) {
        st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", dir_or_file);
    }
    if (st) {
        qc_golden_paths_free(pl.paths, pl.n);
        return st;
    }
    if (pl.n > 1) qsort(pl.paths, (size_t)pl.n, sizeof *pl.paths, cmp_str);
    *paths = pl.paths;
    *n = pl.n;
    return QC_OK;
}

void qc_golden_paths_free(char **paths, int n) {
    if (!paths) return;
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}
