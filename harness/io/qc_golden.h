/* qc_golden.h — golden files (HDF5 schema v1, golden/SCHEMA.md) in memory: read, write, find.
 *
 * Two ways to read a golden:
 *   qc_golden_open_lazy   the root attributes and every case's metadata (name, attributes,
 *                         counts, which optional groups exist) with every dataset's type and
 *                         shape validated, but no tensor data; then qc_golden_load_case(g, i)
 *                         reads (and value-checks) one case's tensors and
 *                         qc_golden_unload_case(g, i) frees them again (check, --list, --shard);
 *   qc_golden_open        the same, then every case loaded (inspect, diff, tests, fuzzing).
 * Every declared shape is checked against the case's token counts and the config BEFORE
 * anything is read or allocated, and the positions a case needs (start_pos + prompt + decode)
 * are bounded (qc_golden_max_positions), so a small file declaring huge datasets is refused at
 * once (QC_ERR_SHAPE) instead of being read; qc_golden_case_bytes tells what loading a case
 * will allocate (for the memory plan).
 *
 * Ownership: a qc_golden owns every array; qc_golden_free frees it (loaded cases included).
 * Files are opened read-only (H5F_ACC_RDONLY) and never modified; no HDF5 handle stays open
 * between calls (a lazy golden reopens its file in qc_golden_load_case, and refuses a file
 * that changed since qc_golden_open_lazy). qc_golden_write writes to a temp file beside the
 * target then renames, so a failed write leaves no partial file.
 */
#ifndef QC_GOLDEN_H
#define QC_GOLDEN_H

#include <stddef.h>
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
    /* MoE goldens (golden/SCHEMA.md "MoE"; each NULL when absent, always absent for a dense
     * model): the router's choices per layer and position, k = cfg.n_experts_per_tok, ids in
     * descending probability, weights renormalised, margins p_k - p_(k+1); moe_in = the residual
     * after layer l's mixer, before its MoE block. */
    int32_t *prefill_topk_ids;      /* [L, T, k] */
    float *prefill_topk_weights;    /* [L, T, k] */
    float *prefill_router_margins;  /* [L, T] */
    float *prefill_moe_in;          /* [L, T, H]: moe_in (MoE) or mlp_in (dense), the mixer output */
    int32_t *decode_topk_ids;       /* [L, S, k] */
    float *decode_topk_weights;     /* [L, S, k] */
    float *decode_router_margins;   /* [L, S] */
    float *decode_moe_in;           /* [L, S, H] */
    /* A top-k-only run (`record --like` through a server; golden/SCHEMA.md "Top-k ACTUAL"):
     * per position the tk_k token ids of the highest log-probability, descending, and their
     * log-probabilities, written instead of the logits (prefill_logits / decode_logits NULL).
     * Never read from a golden; NULL / 0 otherwise. */
    int tk_k;
    int32_t *prefill_tk_ids;        /* [T, tk_k] */
    float *prefill_tk_lps;          /* [T, tk_k] */
    int32_t *decode_tk_ids;         /* [S, tk_k] */
    float *decode_tk_lps;           /* [S, tk_k] */
} qc_golden_case;

/* What qc_golden_open_lazy knows of a case without reading its tensors (every dataset named
 * here was found with the right type class and shape). The counts are also in the case. */
typedef struct {
    int start_pos;            /* P */
    int n_tokens;             /* T */
    int n_decode;             /* S (0 also when there is no decode group) */
    int has_hidden;           /* prefill/hidden present */
    int has_prefill_state;    /* prefill/state present */
    int has_decode;           /* the decode group present */
    int has_decode_margins;   /* decode/margins present */
    int has_decode_state;     /* decode/state present */
    int has_prefill_router;   /* prefill/router/{topk_ids,topk_weights,margins} present (MoE) */
    int has_prefill_moe_in;   /* prefill/moe_in (MoE) or prefill/mlp_in (dense) present */
    int has_decode_router;    /* decode/router/... present (MoE) */
    int has_decode_moe_in;    /* decode/moe_in (MoE) or decode/mlp_in (dense) present */
} qc_golden_case_meta;

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
    double router_margin_threshold; /* MoE: a router flip whose golden margin is below it is
                                       reported, not failed (root attribute; -1 when absent) */
    int n_cases;
    qc_golden_case *cases;    /* [n_cases], sorted by name; the scalars (name, description,
                                 start_pos, max_seq_len, n_history, n_tokens, n_decode) always
                                 set, the tensors only while the case is loaded */
    /* set by the reader (NULL / 0 in a qc_golden built by hand for qc_golden_write) */
    qc_golden_case_meta *meta; /* [n_cases] */
    unsigned char *loaded;    /* [n_cases] 1 while cases[i]'s tensors are in memory */
    uint64_t file_dev, file_ino, file_size; /* the file opened (qc_golden_load_case checks */
    int64_t file_mtime_ns;                  /* that it is still the same file) */
} qc_golden;

/* At most this many positions (start_pos + prompt + decode steps) in one case. */
#define QC_GOLDEN_MAX_POSITIONS (1 << 20)

/* The positions a case of a golden for cfg may use: the config's max_position_embeddings,
 * capped at QC_GOLDEN_MAX_POSITIONS. */
int qc_golden_max_positions(const qc_config *cfg);

/* Read and validate a golden's metadata, no tensor data: schema_version, the required
 * attributes, config_json, and per case its attributes and every dataset's presence, dtype
 * class and shape (against the counts and cfg; positions bounded by qc_golden_max_positions).
 * A shape that disagrees is QC_ERR_SHAPE "<file>: <dataset>: shape [..] != [..]". Every case
 * is unloaded (tensor pointers NULL, states not present). */
qc_status qc_golden_open_lazy(const char *path, qc_golden **out, qc_err *err);

/* Read case i's tensors into g->cases[i] (no-op when loaded): every dataset again checked
 * against the metadata before it is allocated, every float finite (a NaN / Inf is
 * QC_ERR_FORMAT naming the dataset and the first bad index), every token id in [0, V). On
 * error the case stays unloaded and the message names the file and the dataset. */
qc_status qc_golden_load_case(qc_golden *g, int i, qc_err *err);

/* Free case i's tensors (its metadata stays). No-op when not loaded. */
void qc_golden_unload_case(qc_golden *g, int i);

/* Bytes qc_golden_load_case allocates for a case with this metadata (saturates at SIZE_MAX). */
size_t qc_golden_case_bytes(const qc_config *cfg, const qc_golden_case_meta *m);

/* qc_golden_open_lazy + qc_golden_load_case for every case: the whole golden validated and in
 * memory (refused with QC_ERR_OOM, before reading, when its tensors exceed the memory
 * available). */
qc_status qc_golden_open(const char *path, qc_golden **out, qc_err *err);
void qc_golden_free(qc_golden *g);

/* Free the arrays of a case produced by qc_run_case (harness/host/qc_runcase.h) or
 * qc_golden_open (not the struct). */
void qc_case_free(const qc_config *cfg, qc_golden_case *c);

/* 1 once the HDF5 library has faulted (SIGSEGV/SIGBUS) reading a corrupt file: the error was
 * reported as QC_ERR_HDF5, but the library's state is unusable; leave with _exit(). */
int qc_golden_hdf5_faulted(void);

/* Write g to path in schema v1 (temp file + rename). g->path and model_dir are ignored. */
qc_status qc_golden_write(const char *path, const qc_golden *g, qc_err *err);

/* Every *.h5 under a directory (recursive, sorted), or the file itself. *paths is a malloc'd
 * array of malloc'd strings; free with qc_golden_paths_free. n == 0 is not an error.
 * Symbolic links are followed, but every directory and every file is taken once (by device +
 * inode): a directory reached again (a loop such as sub/loop -> .., or a second link to a
 * directory) and a second name of a file (symlink or hard link) are skipped with a note on
 * stderr ("qwen-conform: note: skipping <path>: same file as <other>" / "...: directory
 * loop ..."), printed once per process. Of several names of one file the one reached through
 * the fewest symlinks, then the first in byte order, is kept; real directories are walked
 * before symlinked ones. */
qc_status qc_golden_find(const char *dir_or_file, char ***paths, int *n, qc_err *err);
void qc_golden_paths_free(char **paths, int n);

/* Allocate gs for cfg with n_pos cache positions and copy st's buffers into it (caches trimmed
 * to the first n_pos positions). */
qc_status qc_golden_state_from(const qc_config *cfg, const qc_state *st, int n_pos,
                               qc_golden_state *gs, qc_err *err);
void qc_golden_state_free(const qc_config *cfg, qc_golden_state *gs);

#endif /* QC_GOLDEN_H */
