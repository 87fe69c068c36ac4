/* qc_golden_internal.h — what the files of the golden reader share (qc_golden_io.c the file,
 * qc_golden_case.c a case, qc_golden_h5.c the HDF5 primitives, qc_golden_base.c the state
 * arrays, position bound and size arithmetic every other one uses), with the writer
 * (qc_golden_write.c) and the ACTUAL reader (qc_actual_h5.c): HDF5 error handling, attribute
 * and dataset readers, handle-closing helpers (harness-private). Readers return QC_OK or an
 * error naming the file and the dataset / attribute path; nothing stays allocated on error. */
#ifndef QC_GOLDEN_INTERNAL_H
#define QC_GOLDEN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>

#include "qc_golden.h"

/* A growing list of names (HDF5 link names or directory entries). */
typedef struct {
    char **names; /* [n] malloc'd */
    int n, cap;
    int oom;
} name_list;

/* Append name to the name_list `user` (an H5Literate callback; also called directly with
 * g = 0, info = NULL). 0, or -1 with oom set. */
herr_t gio_collect_names(hid_t g, const char *name, const H5L_info_t *info, void *user);
/* qsort comparator of char* by strcmp. */
int gio_cmp_str(const void *a, const void *b);

#define CLOSE_D(h) do { if ((h) >= 0) H5Dclose(h); (h) = H5I_INVALID_HID; } while (0)
#define CLOSE_S(h) do { if ((h) >= 0) H5Sclose(h); (h) = H5I_INVALID_HID; } while (0)
#define CLOSE_T(h) do { if ((h) >= 0) H5Tclose(h); (h) = H5I_INVALID_HID; } while (0)
#define CLOSE_A(h) do { if ((h) >= 0) H5Aclose(h); (h) = H5I_INVALID_HID; } while (0)
#define CLOSE_G(h) do { if ((h) >= 0) H5Gclose(h); (h) = H5I_INVALID_HID; } while (0)
#define CLOSE_P(h) do { if ((h) >= 0) H5Pclose(h); (h) = H5I_INVALID_HID; } while (0)

/* Switch HDF5's automatic error printing off (call on every entry). */
void gio_h5_quiet(void);
/* One short text for the current HDF5 error stack into buf ("" when empty); returns buf. */
const char *gio_h5_errdesc(char *buf, size_t n);
/* 1 when s matches [A-Za-z0-9_-]+ (and fits a case name). */
int gio_valid_case_name(const char *s);
/* Mark the HDF5 library as unusable (qc_golden_hdf5_faulted): the caller must leave with _exit. */
void gio_set_faulted(void);
/* H5Aread of a variable-length string with SIGSEGV / SIGBUS turned into an error (libhdf5 1.10
 * can crash on a corrupt global heap; the fault is remembered, see qc_golden_hdf5_faulted).
 * Returns 0, -1 (HDF5 error) or -2 (the library faulted). One guard for every reader. */
int gio_guarded_vl_read(hid_t a, hid_t mt, char **vl);

/* ---- the bottom: state arrays, positions, sizes (qc_golden_base.c) ---- */

/* Allocate the per-layer pointer arrays of gs (all NULL). */
qc_status gio_state_alloc_ptrs(const qc_config *cfg, qc_golden_state *gs);
/* What bounds the positions of a case, for messages. */
const char *gio_positions_what(const qc_config *cfg);
/* a * b + c in 64 bits, saturating. */
uint64_t gio_sat_madd(uint64_t a, uint64_t b, uint64_t c);

/* ---- reading context and primitives (qc_golden_h5.c) ---- */

/* How messages name an attribute: GIO_ATTR_PATH "/cases/x/start_pos" (the golden reader),
 * GIO_ATTR_PAREN "/cases/x (attr start_pos)" (the ACTUAL reader). */
typedef enum { GIO_ATTR_PATH = 0, GIO_ATTR_PAREN = 1 } gio_attr_style;

typedef struct {
    const char *file; /* the .h5 path, for messages */
    qc_err *err;
    gio_attr_style style;
} gio_ctx;

/* A scalar string attribute `name` of obj (path objpath) into a malloc'd *out (the caller
 * frees it); *out = NULL and QC_OK when absent and !required. VL and fixed-length strings. */
qc_status gio_attr_str(const gio_ctx *c, hid_t obj, const char *objpath, const char *name,
                       int required, char **out);
/* The same into buf[n] (longer: QC_ERR_FORMAT); buf = "" when absent and !required. */
qc_status gio_attr_buf(const gio_ctx *c, hid_t obj, const char *objpath, const char *name,
                       int required, char *buf, size_t n);
/* An integer scalar attribute (any width) as int64 into *out; *present (may be NULL) = 0 when
 * absent and !required, 1 when read. */
qc_status gio_attr_int(const gio_ctx *c, hid_t obj, const char *objpath, const char *name,
                       int required, int64_t *out, int *present);
/* Check dataset `rel` under loc (whose path is locpath) WITHOUT reading it: present, a dataset,
 * float (is_float) or integer, of rank `rank` and shape `want` (want[d] < 0: any extent);
 * dims receives the extents; on QC_OK *dout (when dout != NULL) is the open dataset, which
 * the caller reads and closes. */
qc_status gio_probe_dataset(const gio_ctx *c, hid_t loc, const char *locpath, const char *rel,
                            int is_float, int rank, const long long *want, hsize_t *dims,
                            hid_t *dout);
/* Probe, then read it as float32 (is_float; every value finite) or int32 into a malloc'd *out
 * (the caller frees it). */
qc_status gio_read_dataset(const gio_ctx *c, hid_t loc, const char *locpath, const char *rel,
                           int is_float, int rank, const long long *want, void **out);
/* The object `name` under loc opened as a group (the caller closes it), or H5I_INVALID_HID
 * (no such link, dangling, not a group; the HDF5 error stack cleared). */
hid_t gio_group_if(hid_t loc, const char *name);
/* 1 when loc has a link `name` (one path component). */
int gio_link_exists(hid_t loc, const char *name);
/* 1 when every component of `path` (relative to loc) exists as a link. */
int gio_path_exists(hid_t loc, const char *path);
/* "[7,512]" into buf (qc_shape_str of HDF5 extents). */
void gio_fmt_dims(int rank, const hsize_t *dims, char *buf, size_t n);

/* ---- cases (qc_golden_case.c) ---- */

/* Metadata of case `name` of the group /cases (cases_g) into gc (scalars) and m, every
 * dataset probed, no tensor read. */
qc_status gio_read_case_meta(const gio_ctx *c, const qc_config *cfg, hid_t cases_g,
                             const char *name, qc_golden_case *gc, qc_golden_case_meta *m);
/* Read the tensors of case gc (metadata m) from the open file f; on error nothing stays
 * allocated. */
qc_status gio_load_case_from(const gio_ctx *c, const qc_config *cfg, hid_t f,
                             qc_golden_case *gc, const qc_golden_case_meta *m);
/* Free a case's tensors, keeping its scalars (name, counts). */
void gio_case_free_tensors(const qc_config *cfg, qc_golden_case *c);

/* ---- MoE datasets (qc_golden_moe.c; golden/SCHEMA.md "MoE") ---- */

/* The root attribute router_margin_threshold of the open file f into *thr (-1 when absent). */
qc_status gio_moe_root(const gio_ctx *c, hid_t f, double *thr);
/* Presence and shapes of grp's (prefill / decode, path gpath) router/{topk_ids, topk_weights,
 * margins} ([L, rows, k], [L, rows, k], [L, rows]) and moe_in ([L, rows, H]); none of them may
 * appear in a dense model's golden. */
qc_status gio_moe_meta(const gio_ctx *c, const qc_config *cfg, hid_t grp, const char *gpath,
                       int rows, int *has_router, int *has_moe_in);
/* Read them (value-checked: ids in [0, E), distinct per row; margins >= 0); on error every
 * output is NULL. */
qc_status gio_moe_load(const gio_ctx *c, const qc_config *cfg, hid_t grp, const char *gpath,
                       int rows, int has_router, int has_moe_in, int32_t **ids, float **w,
                       float **margins, float **moe_in);
/* Elements (4 bytes each) the MoE datasets of a case hold. */
uint64_t gio_moe_elems(const qc_config *cfg, const qc_golden_case_meta *m);
/* Free a case's MoE arrays (NULL after). */
void gio_moe_free(qc_golden_case *gc);

#endif /* QC_GOLDEN_INTERNAL_H */
