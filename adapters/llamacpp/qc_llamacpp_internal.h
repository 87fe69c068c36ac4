/* qc_llamacpp_internal.h — the llama.cpp plugin's handle and the entries its files share.
 *
 * One handle per open (qc_llama); files by concern: qc_llamacpp_log.c (log ring, errors),
 * qc_llamacpp_convert.c (options, the GGUF conversion cache), qc_llamacpp_gguf.c (GGUF
 * metadata, the known-abort guard, cb_eval captures), qc_llamacpp_state.c (the state blob
 * parsed into canonical layouts), qc_llamacpp_lifecycle.c (snapshot / restore, sequences,
 * trim, fill_state), qc_llamacpp_plugin.c (the ABI entries).
 * Return convention everywhere: QC_PLUGIN_OK (0) or a QC_PLUGIN_* code with h->err set.
 */
#ifndef QC_LLAMACPP_INTERNAL_H
#define QC_LLAMACPP_INTERNAL_H

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include "ggml.h"
#include "ggml-backend.h"
#include "gguf.h"
#include "llama.h"

#include "qc/qc_runtime_plugin.h"

#ifndef QC_LLAMACPP_BINS
#error "QC_LLAMACPP_BINS (the npm package's bins/linux-x64 directory) must be defined"
#endif
#ifndef QC_LLAMACPP_SRC
#error "QC_LLAMACPP_SRC (the llama.cpp source tree) must be defined"
#endif
#ifndef QC_LLAMACPP_CONVERT
#error "QC_LLAMACPP_CONVERT (adapters/llamacpp/qc_convert.py) must be defined"
#endif
#ifndef QC_LLAMACPP_CACHE
#define QC_LLAMACPP_CACHE ""
#endif
#ifndef QC_LLAMACPP_PYTHON
#define QC_LLAMACPP_PYTHON "/usr/bin/python3"
#endif
#define QC_LLAMACPP_TAG "v0.5.0"

#define ERR_MAX 4096
#define PATH_MAX_ 4096
#define MAX_LAYERS 1024
#define QC_LLAMACPP_MAX_SEQS 8


/* ===================================================================================== */
/* the handle                                                                            */
/* ===================================================================================== */

typedef struct {
    /* options */
    char gguf[PATH_MAX_];
    char outtype[8];
    char mtp[8];
    int kv_f16;
    int flash;
    int threads;
    int n_ctx;
    int want_hidden;
    int want_state;               /* state=0: no state read / snapshot, so no cb_eval when hidden=0 */
    int poll;                     /* poll=N: the threadpool's polling level (0 = sleep at barriers) */
    int guard;
    int reconvert;
    int fix_mrope;
    int n_seqs;                   /* seqs=N: llama.cpp sequences (n_seq_max), 1 = no SEQUENCES cap */
    int rs_seq;                   /* rs_seq=N: n_rs_seq recurrent snapshots per sequence; >= 1
                                     announces QC_CAP_TRIM (rollback of up to N positions) */
    int snap_partial;             /* snap=partial: snapshots with LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
                                     (recurrent part only; the KV cells trimmed on restore) */
    int want_fill;                /* fill=0|1: announce QC_CAP_STATE_FILL (default 1 with state=1) */
    int raw_layout;               /* QC_LLAMACPP_LAYOUT=raw: no head reorder / transpose */

    /* llama.cpp */
    struct llama_model *model;
    struct llama_context *ctx;
    ggml_threadpool_t tp;         /* persistent CPU threadpool when threads > 1 */

    /* dims as the runtime sees them (from the GGUF) */
    int V, H, L;
    int n_head_kv, head_dim;      /* full-attention layers */
    int is_recr[MAX_LAYERS];
    int n_recr, n_full;
    int n_nextn;                  /* MTP (NextN) blocks after the main layers (kept in the GGUF) */
    int K, C;                     /* conv taps, conv channels */
    int W;                        /* conv columns kept per channel: K + rs_seq (a trim by j <= rs_seq
                                     shifts the window back by j columns) */
    int nk, nv, dk, dv;           /* linear-attention heads and head dims */
    int file_type;                /* general.file_type */

    /* sequence: the current one's fields here; the others parked in seqs[] (select_sequence
     * swaps them), each a llama.cpp seq id of its own */
    int seq;                      /* current sequence id, 0..QC_PLUGIN_MIN_SEQUENCES-1 */
    int32_t pos;                  /* positions consumed */

    /* hidden capture of the last forward: hidden[i] = [n_out, H], i = 0..L */
    float *hidden;                /* [(L+1) * cap_tokens * H] */
    int cap_tokens;               /* tokens of the last forward */
    int hid_rows[MAX_LAYERS + 1]; /* rows captured per index in the last forward */
    int hid_ok;                   /* the last forward captured every index fully */
    int capturing;

    /* conv window capture: per layer, the last W columns of the graph's conv_input [C][W]
     * (llama.cpp channel order; the window of the last position is its last K columns, the
     * W - K older ones serve a trim); valid when conv_win_ok[il] */
    float *conv_win;              /* [L * C * W] */
    int conv_win_ok[MAX_LAYERS];
    float *conv_scratch;          /* one conv_input tensor */
    size_t conv_scratch_n;

    /* parsed state blob, memoised until the next forward / reset */
    uint8_t *blob;
    size_t blob_n;
    int blob_valid;
    /* attention part */
    int kv_cells;
    int32_t *kv_pos;              /* [kv_cells] */
    int kv_vtrans;
    int kv_n_layer;
    const uint8_t *kv_k[MAX_LAYERS]; int32_t kv_ktype[MAX_LAYERS]; uint64_t kv_krow[MAX_LAYERS];
    const uint8_t *kv_v[MAX_LAYERS]; int32_t kv_vtype[MAX_LAYERS]; uint64_t kv_vrow[MAX_LAYERS];
    uint32_t kv_vel[MAX_LAYERS]; uint32_t kv_vgqa[MAX_LAYERS];
    /* recurrent part */
    int rs_cells;
    int rs_n_layer;
    const uint8_t *rs_r[MAX_LAYERS]; int32_t rs_rtype[MAX_LAYERS]; uint64_t rs_rrow[MAX_LAYERS];
    const uint8_t *rs_s[MAX_LAYERS]; int32_t rs_stype[MAX_LAYERS]; uint64_t rs_srow[MAX_LAYERS];

    /* snapshots (QC_CAP_SNAPSHOT): slot s holds the sequence's llama_state_seq blob and what
     * the plugin keeps beside llama.cpp's memory (position count, conv windows) */
    struct {
        uint8_t *blob;            /* [n] llama_state_seq_get_data bytes */
        size_t n;
        int32_t pos;
        float *conv_win;          /* [L * C * W] */
        int conv_win_ok[MAX_LAYERS];
        int valid;
    } snap[QC_PLUGIN_MIN_SNAPSHOTS];

    struct {
        int32_t pos;
        float *conv_win;          /* [L * C * W] */
        int conv_win_ok[MAX_LAYERS];
    } seqs[QC_LLAMACPP_MAX_SEQS]; /* parked sequences (seqs[seq] unused while current) */

    char name[128];
    char err[ERR_MAX];
} qc_llama;

/* ---- log ring and errors (qc_llamacpp_log.c) ---- */
extern char g_open_err[ERR_MAX]; /* open's error (no handle yet) */
extern int g_debug;               /* QC_LLAMACPP_DEBUG=1: also copy the log to stderr */
void log_cb(enum ggml_log_level level, const char *text, void *ud); /* llama_log_set sink */
void abort_cb(const char *msg);                                     /* ggml abort hook */
void ring_clear(void);
/* 1 and the first log line containing pat (after pat when skip_pat) in out; 0 if none. */
int ring_find(const char *pat, int skip_pat, char *out, size_t n);
/* Format into h->err (g_open_err when h is NULL); returns code. */
int set_err(qc_llama *h, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* set_err with the last lines of llama.cpp's log appended; returns code. */
int set_err_log(qc_llama *h, int code, const char *what);

/* ---- options and conversion (qc_llamacpp_convert.c) ---- */
int parse_int(const char *v, int lo, int hi, int *out);   /* 0, or -1 outside [lo, hi] */
int parse_options(qc_llama *h, const char *options);      /* the open options into h */
/* The cached (or new) GGUF conversion of model_dir: its path in out. */
int convert_model(qc_llama *h, const char *model_dir, char *out, size_t n);

/* ---- GGUF metadata and graph captures (qc_llamacpp_gguf.c) ---- */
int read_meta(qc_llama *h, const char *path); /* the dims from the GGUF; the abort guard */
bool eval_cb(struct ggml_tensor *t, bool ask, void *ud); /* cb_eval: hidden + conv windows */

/* ---- state (qc_llamacpp_state.c; the lifecycle entries in qc_llamacpp_lifecycle.c) ---- */
static inline void invalidate_state(qc_llama *h) { h->blob_valid = 0; }
/* llama_state_seq_get_data of the current sequence into h->blob, parsed (memoised) */
int load_state(qc_llama *h);
int p_get_state(void *handle, int32_t layer, int32_t kind, int32_t n_pos, float *dst);
int p_snapshot(void *handle, int32_t slot);  /* QC_CAP_SNAPSHOT */
int p_restore(void *handle, int32_t slot);
int p_select_sequence(void *handle, int32_t seq); /* QC_CAP_SEQUENCES */
int p_trim(void *handle, int32_t n_pos);          /* QC_CAP_TRIM (rs_seq >= 1) */
int p_fill_state(void *handle, float value);      /* QC_CAP_STATE_FILL */
/* floats in one conv window copy (every layer) */
static inline size_t conv_win_floats(const qc_llama *h) { return (size_t)h->L * h->C * h->W; }
/* the window of layer il's last position: its last K of W columns, row stride W */
static inline float *conv_win_of(qc_llama *h, int il) { return h->conv_win + (size_t)il * h->C * h->W; }
void free_snapshots(qc_llama *h);

#endif /* QC_LLAMACPP_INTERNAL_H */
