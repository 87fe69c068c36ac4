/* qc_golden_internal.h — what the golden reader (qc_golden_io.c) shares with the writer
 * (qc_golden_write.c): HDF5 error handling and handle-closing helpers (harness-private). */
#ifndef QC_GOLDEN_INTERNAL_H
#define QC_GOLDEN_INTERNAL_H

#include <stddef.h>

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
/* Allocate the per-layer pointer arrays of gs (all NULL). */
qc_status gio_state_alloc_ptrs(const qc_config *cfg, qc_golden_state *gs);
/* What bounds the positions of a case, for messages. */
const char *gio_positions_what(const qc_config *cfg);
/* Mark the HDF5 library as unusable (qc_golden_hdf5_faulted): the caller must leave with _exit. */
void gio_set_faulted(void);
/* H5Aread of a variable-length string with SIGSEGV / SIGBUS turned into an error (libhdf5 1.10
 * can crash on a corrupt global heap; the fault is remembered, see qc_golden_hdf5_faulted).
 * Returns 0, -1 (HDF5 error) or -2 (the library faulted). One guard for every reader. */
int gio_guarded_vl_read(hid_t a, hid_t mt, char **vl);

#endif /* QC_GOLDEN_INTERNAL_H */
