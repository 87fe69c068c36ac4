/* qc_cmd_record_internal.h — shared between qc_cmd_record.c (one case from the command line)
 * and qc_cmd_record_like.c (`record --like GOLDEN.h5`: every case of a golden, same inputs).
 * Internal to the `record` command; not installed.
 */
#ifndef QC_CMD_RECORD_INTERNAL_H
#define QC_CMD_RECORD_INTERNAL_H

#include "qc/qc_backend.h"
#include "qc/qc_memplan.h"
#include "qc/qc_model.h"
#include "qc/qc_prefill.h"
#include "qc_cli_common.h"
#include "qc_golden.h"

extern const char *const QC_RECORD_PROG; /* "qwen-conform record" */

/* Parsed command line. */
typedef struct {
    const char *model;       /* --model DIR */
    const char *synthetic;   /* --synthetic 0.8b|2b|4b|9b (instead of --model), or NULL */
    const char *dtype;       /* --dtype bf16|f32|f16 for --synthetic (default bf16) */
    long seed;               /* --seed for --synthetic (default 1) */
    const char *like;        /* --like GOLDEN.h5: every case of that golden, or NULL */
    const char *tokens;      /* --tokens list, or NULL */
    const char *tokens_file; /* --tokens-file F, or NULL */
    const char *history;     /* --history list, or NULL */
    const char *history_file; /* --history-file F, or NULL */
    const char *decode_tokens; /* --decode-tokens list (teacher-forced decode), or NULL */
    const char *out;         /* --out F.h5 */
    const char *backend;     /* --backend (default "reference"; any registry spec) */
    const char *case_name;   /* --case (default "case0") */
    const char *description; /* --description, or NULL */
    const char *max_memory;  /* --max-memory SIZE, or NULL (machine's available memory) */
    int case_given;          /* --case was given */
    int n_decode;            /* --decode N */
    int threads;             /* --threads T (0 = OpenMP default) */
    int chunk_size;          /* --chunk-size N (0 = backend default) */
    int dn_kernel;           /* -1 default, else qc_dn_kernel */
    int no_hidden;           /* --no-hidden: do not capture prefill/hidden */
    int force;               /* --force: an existing --out may be replaced */
    int stream;              /* --stream: layer-major, one layer's weights resident at a time
                                (chosen by itself when the checkpoint does not fit) */
    int resume;              /* --resume: checkpoints in <out>.resume/, a run found there
                                continued (implies --stream) */
    char resume_dir[4200];   /* <out>.resume when --resume */
    qc_cli_profile pf;       /* profile flags */
} record_args;

/* Tokens per forward call the profile's strategy uses (static 1, dynamic max_seq_len capped
 * at the context, no-KV the context). */
int qc_record_max_tokens(const qc_profile *prof);

/* Backend options from the command line (threads, chunk size, kernel) for max_tokens tokens
 * per call. */
void qc_record_backend_opts(const record_args *a, int max_tokens, qc_backend_opts *o);

/* Create the --backend runtime on model (loaded from model_dir, NULL for --synthetic).
 * Caller owns *be (qc_backend_destroy). QC_OK or the error prefixed with "--backend X". */
qc_status qc_record_make_backend(const record_args *a, const char *model_dir,
                                 const qc_model *model, const qc_backend_opts *o,
                                 qc_backend **be, qc_err *err);

/* Provenance of an output golden (schema, generator, dtype, model path relative to the
 * output's directory, hashes, config). config_text is borrowed (g->config_json points at it);
 * the caller sets g->n_cases / g->cases. QC_OK or QC_ERR_*. */
qc_status qc_record_provenance(const record_args *a, const qc_model *model,
                               char *config_text, qc_golden *g, qc_err *err);

/* The model's config.json text, exactly as stored; caller frees *text. */
qc_status qc_record_config_text(const qc_model *m, char **text, qc_err *err);

/* Print a failed run's error; the exit code: 1 (FAIL) when the runtime under test failed
 * (QC_ERR_RUNTIME), else 2. */
int qc_record_fail(const qc_err *err);

/* Weight bytes a layer-major run keeps resident: the largest layer and a block of the output
 * head's rows of a streamed model; all of them for a model in memory. */
uint64_t qc_record_stream_weight_bytes(const qc_model *m);

/* Sum of the sizes of the *.safetensors files in dir (what loading it in memory reads). */
uint64_t qc_record_checkpoint_bytes(const char *dir);

/* `record --like`: every case of a.like on the backend, written to a.out. Returns the exit
 * code (prints its own errors and summary). */
int qc_record_like(const record_args *a);

/* qc_record_http.c: 1 when --backend is a server (http:URL[,k=v...]). */
int qc_record_is_http(const char *backend);
/* `record --like` through a server (a.backend http:...): every case's teacher-forced top-k
 * log-probabilities written as a top-k ACTUAL (golden/SCHEMA.md "Top-k ACTUAL"). The outputs
 * are already verified (qc_outpath). Prints the summary; QC_OK or the error (QC_ERR_RUNTIME:
 * the server answered wrongly). */
qc_status qc_record_like_http(const record_args *a, qc_err *err);

#endif /* QC_CMD_RECORD_INTERNAL_H */
