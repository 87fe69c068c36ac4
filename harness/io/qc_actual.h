/* qc_actual.h — ACTUAL files (a runtime's outputs; golden/SCHEMA.md "Required and optional",
 * "ACTUAL layouts") in memory, read against the golden they answer, for `qwen-conform diff`.
 *
 * An ACTUAL needs only /schema_version and, per case, /cases/<case>/prefill/logits (or, from a
 * runtime that gives top-k log-probabilities only, prefill/topk/{ids,logprobs}); every other
 * attribute, input and tensor is optional. Shapes may be the canonical (golden) ones or the
 * Hugging Face ones (a batch dimension of 1, last-row logits, llama.cpp's K-1-column conv
 * state): the reader maps them onto the canonical layout (the memory order is the same, so no
 * element moves) and records which layout each dataset was in. Non-finite values are kept (a
 * NaN is a conformance failure, found by the comparison, not a format error); integer logits,
 * shapes that fit no layout, a case aliased under two names are format errors naming the
 * file and the dataset.
 *
 * Ownership: a qc_actual owns everything in it; qc_actual_free frees it. Files are opened
 * read-only and no HDF5 handle stays open between calls.
 */
#ifndef QC_ACTUAL_H
#define QC_ACTUAL_H

#include <stdint.h>

#include "qc_golden.h"

typedef enum {
    QC_LAYOUT_AUTO = 0,  /* decide per dataset from its shape */
    QC_LAYOUT_CANONICAL, /* the golden's shapes only */
    QC_LAYOUT_HF         /* Hugging Face shapes only (batch dim 1; last-row logits) */
} qc_layout;

/* "auto" / "canonical" / "hf" -> *out; 0, or -1 on an unknown name. */
int qc_layout_parse(const char *s, qc_layout *out);

/* One ACTUAL case: its inputs as found, its tensors in the canonical layout. */
typedef struct {
    char name[64];
    /* inputs (compared with the golden's when present) */
    int has_start_pos;
    int start_pos;
    int n_history, n_tokens, n_decode_tokens; /* -1: the dataset is absent */
    int32_t *history, *tokens, *decode_tokens;
    /* tensors, canonical layout, NULL when absent */
    int n_rows;               /* prefill/logits rows present (T: every prompt position; 0: no
                                 prefill/logits, a top-k case) */
    int *rows;                /* [n_rows] prompt row indices (0..T-1), ascending */
    float *prefill_logits;    /* [n_rows, V] */
    float *prefill_hidden;    /* [L+1, T, H] */
    qc_golden_state prefill_state; /* present: any prefill state tensor; a NULL layer tensor
                                      is absent */
    int has_decode_logits;
    float *decode_logits;     /* [S, V] */
    qc_golden_state decode_state;
    /* MoE router choices (golden/SCHEMA.md "MoE"; NULL when absent, always for a dense model):
     * ids [L, rows, k] in the order written, weights (NULL when absent) likewise; margins are
     * the golden's and not read */
    int32_t *prefill_topk_ids;    /* [L, T, k] */
    float *prefill_topk_weights;  /* [L, T, k] */
    int32_t *decode_topk_ids;     /* [L, S, k] */
    float *decode_topk_weights;   /* [L, S, k] */
    /* top-k log-probabilities (golden/SCHEMA.md "Top-k ACTUAL"; NULL when absent): per
     * position the tk_k ids in descending log-probability, and those log-probabilities;
     * validated on read (ids in [0, V) and distinct per row, values finite, <= 0, descending) */
    int tk_k;                     /* 0: no prefill/topk */
    int32_t *prefill_tk_ids;      /* [T, tk_k] */
    float *prefill_tk_lps;        /* [T, tk_k] */
    int32_t *decode_tk_ids;       /* [S, tk_k] (NULL: absent) */
    float *decode_tk_lps;         /* [S, tk_k] */
    int conv_cols;            /* columns of the conv states read: K, or K-1 (llama.cpp);
                                 0: none read */
    int n_conv_k1;            /* conv states read with K-1 columns */
    int n_static_kv;          /* k / v caches read from more positions than the case's */
    int n_canonical, n_hf;    /* datasets read in each layout */
    char note[512];           /* what was ignored (a state tensor of the other layer kind) */
    int loaded;
} qc_actual_case;

typedef struct {
    char path[1024];
    int schema_version;
    char generator[256];      /* "" when absent */
    char compute_dtype[32];
    char config_sha256[65];   /* "" when absent */
    char weights_sha256[65];
    char *config_json;        /* NULL when absent */
    char notes[1024];         /* optional root attributes ignored (wrong type, not a SHA-256) */
    int n_cases;
    qc_actual_case *cases;    /* [n_cases], sorted by name */
    qc_layout layout;         /* what was asked */
} qc_actual;

/* Read the root attributes and the case names of an ACTUAL file (no tensor). Errors
 * (QC_ERR_*) name the file and the attribute / group: not HDF5, schema_version missing or not
 * 1, /cases missing or empty, an invalid case name, two case names for one group. */
qc_status qc_actual_open(const char *path, qc_layout layout, qc_actual **out, qc_err *err);

/* Read case i's tensors against the golden case gc (its counts give the shapes; gc need not
 * be loaded) and the config. Returns QC_OK or an error naming the file and the dataset. */
qc_status qc_actual_load_case(qc_actual *a, int i, const qc_config *cfg,
                              const qc_golden_case *gc, qc_err *err);

/* Free case i's tensors (its name stays); loading it again reads it again. */
void qc_actual_unload_case(qc_actual *a, int i, const qc_config *cfg);

/* The case named name (-1: none). */
int qc_actual_find(const qc_actual *a, const char *name);

/* "canonical" / "hf" / "mixed (...)" over the cases read so far (the counts stay when a case
 * is unloaded), into buf; returns buf. */
const char *qc_actual_layout_str(const qc_actual *a, char *buf, size_t n);

void qc_actual_free(qc_actual *a, const qc_config *cfg);

#endif /* QC_ACTUAL_H */
