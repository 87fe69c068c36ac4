/* qc_golden.h — golden files (HDF5 schema v1, golden/SCHEMA.md) in memory: read, write, find.
 *
 * Ownership: qc_golden_open returns a qc_golden that owns every array; qc_golden_free frees it.
 * Files are opened read-only (H5F_ACC_RDONLY) and never modified. qc_golden_write writes to
 * "<path>.tmp.<pid>" then renames, so a failed write leaves no partial file.
 */
#ifndef QC_GOLDEN_H
#define QC_GOLDEN_H

#include <stdint.h>

#include "qc/qc_config.h"
#include "qc/qc_state.h"
#include "qc/qc_status.h"

#define QC_GOLDEN_SCHEMA_VERSION 1

/* The state buffers of one point in time, canonical layout, caches trimmed to n_pos positions. */
typedef struct {
    int present;              /* 0 when the group is absent */
    int n_pos;                /* positions held in k/v caches */
    float **k_cache;          /* [L] -> [n_kv_heads, n_pos, head_dim] (NULL on linear layers) */
    float **v_cache;          /* [L] -> [n_kv_heads, n_pos, head_dim] */
    float **conv_state;       /* [L] -> [conv_dim, K] (NULL on full layers) */
    float **recurrent_state;  /* [L] -> [n_v_heads, d_k, d_v] */
} qc_golden_state;

typedef struct {
    char name[64];            /* group name under /cases */
    char description[256];
    int start_pos;            /* position of tokens[0] */
    int max_seq_len;          /* export max_seq_len for this case; 0 = harness default */
    int n_history;            /* P = start_pos when > 0 */
    int32_t *history;         /* [P] tokens at positions 0..P-1, replayed before the case */
    int n_tokens;             /* T */
    int32_t *tokens;          /* [T] */
    float *prefill_logits;    /* [T, V] */
    float *prefill_hidden;    /* [L+1, T, H] (NULL if absent) */
    qc_golden_state prefill_state;
    int n_decode;             /* S (0 = no decode) */
    int32_t *decode_tokens;   /* [S] fed one per step */
    float *decode_logits;     /* [S, V] */
    float *decode_margins;    /* [S] (NULL if absent) */
    qc_golden_state decode_state;
} qc_golden_case;

typedef struct {
    char path[1024];          /* the .h5 file */
    int schema_version;
    char generator[256];
    char torch_version[64];
    char compute_dtype[32];
    int64_t seed;
    char model_path[1024];    /* as stored (relative to the file's directory) */
    char model_dir[2048];     /* resolved: dirname(path)/model_path (or model_path if absolute) */
    char config_sha256[65];
    char weights_sha256[65];
    char *config_json;        /* owned, NUL-terminated */
    qc_config cfg;            /* parsed from config_json */
    int n_cases;
    qc_golden_case *cases;    /* [n_cases], sorted by name */
} qc_golden;

/* Read and validate a whole golden file: schema_version, required attributes, every dataset's
 * presence, dtype class and shape (against cfg), and that every float is finite (a NaN / Inf
 * in a golden is a format error naming the dataset and the first bad index). */
qc_status qc_golden_open(const char *path, qc_golden **out, qc_err *err);
void qc_golden_free(qc_golden *g);

/* 1 once the HDF5 library has faulted (SIGSEGV/SIGBUS) reading a corrupt file: the error was
 * reported as QC_ERR_HDF5, but the library's state is unusable; leave with _exit(). */
int qc_golden_hdf5_faulted(void);

/* Write g to path in schema v1 (temp file + rename). g->path and model_dir are ignored. */
qc_status qc_golden_write(const char *path, const qc_golden *g, qc_err *err);

/* Every *.h5 under a directory (recursive, sorted), or the file itself. *paths is a malloc'd
 * array of malloc'd strings; free with qc_golden_paths_free. n == 0 is not an error. */
qc_status qc_golden_find(const char *dir_or_file, char ***paths, int *n, qc_err *err);
void qc_golden_paths_free(char **paths, int n);

/* Allocate gs for cfg with n_pos cache positions and copy st's buffers into it (caches trimmed
 * to the first n_pos positions). */
qc_status qc_golden_state_from(const qc_config *cfg, const qc_state *st, int n_pos,
                               qc_golden_state *gs, qc_err *err);
void qc_golden_state_free(const qc_config *cfg, qc_golden_state *gs);

#endif /* QC_GOLDEN_H */
