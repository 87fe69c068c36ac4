/* qc_record_common.c — what `record` (qc_cmd_record.c, one case from the command line) and
 * `record --like` (qc_cmd_record_like.c, every case of a golden) share, declared in
 * qc_cmd_record_internal.h: the program name, the backend's options and creation, the output's
 * provenance, the checkpoint / resident-weight sizes and the exit code of a failed run. The
 * bottom of the record folder: it calls no other file of it, so neither command file calls
 * the other back (tests/check_cycles.py).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qc/qc_backend.h"
#include "qc/qc_model.h"
#include "qc/qc_prefill.h"
#include "qc/qc_sha256.h"
#include "qc_cli.h"
#include "qc_cli_common.h"
#include "qc_cmd_record_internal.h"
#include "qc_golden.h"
#include "qc_registry.h"

#ifndef QC_VERSION
#define QC_VERSION "0.0.0"
#endif

const char *const QC_RECORD_PROG = "qwen-conform record";
#define PROG QC_RECORD_PROG

/* Tokens per forward call the profile's strategy uses. */
int qc_record_max_tokens(const qc_profile *prof) {
    qc_mode mode = qc_profile_mode(prof);
    if (mode == QC_MODE_NOKV) return prof->max_context_len;
    if (mode == QC_MODE_DYNAMIC)
        return prof->max_seq_len < prof->max_context_len ? prof->max_seq_len
                                                         : prof->max_context_len;
    return 1;
}

void qc_record_backend_opts(const record_args *a, int max_tokens, qc_backend_opts *o) {
    qc_backend_opts_default(o);
    o->max_tokens = max_tokens;
    o->n_threads = a->threads;
    if (a->chunk_size > 0) o->chunk_size = a->chunk_size;
    if (a->dn_kernel >= 0) o->dn_kernel = (qc_dn_kernel)a->dn_kernel;
}

qc_status qc_record_make_backend(const record_args *a, const char *model_dir,
                                 const qc_model *model, const qc_backend_opts *o,
                                 qc_backend **be, qc_err *err) {
    qc_runtime_spec rs;
    qc_status st;
    if ((st = qc_registry_parse(a->backend, 0, &rs, err)) ||
        (st = qc_registry_preflight(&rs, err)) ||
        (st = qc_registry_create(&rs, model_dir, model, o, be, err)))
        qc_err_prefix(err, st, "--backend %s", a->backend);
    return st;
}

qc_status qc_record_config_text(const qc_model *m, char **text, qc_err *err) {
    char path[1200];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/config.json", m->dir);
    return qc_cli_read_file(path, text, &len, err);
}

qc_status qc_record_provenance(const record_args *a, const qc_model *model,
                               char *config_text, qc_golden *g, qc_err *err) {
    memset(g, 0, sizeof *g);
    g->schema_version = QC_GOLDEN_SCHEMA_VERSION;
    snprintf(g->generator, sizeof g->generator, "qwen-conform record %s (%s)", QC_VERSION,
             a->backend);
    snprintf(g->compute_dtype, sizeof g->compute_dtype, "float32");
    g->seed = -1;
    if (a->synthetic) {
        /* no files: the config hash is of the config_json written here; the "weights hash"
         * identifies the generator and its seed (qc_model_synthetic is deterministic) */
        char ident[160];
        snprintf(g->model_path, sizeof g->model_path, "synthetic:%s:%s:seed%ld", a->synthetic,
                 a->dtype, a->seed);
        snprintf(ident, sizeof ident, "qc_model_synthetic:%s:%s:seed%ld", a->synthetic,
                 a->dtype, a->seed);
        qc_sha256_buf_hex(config_text, strlen(config_text), g->config_sha256);
        qc_sha256_buf_hex(ident, strlen(ident), g->weights_sha256);
    } else {
        char outdir[4096];
        qc_cli_dirname(a->out, outdir, sizeof outdir);
        qc_status st = qc_cli_relpath(model->dir, outdir, g->model_path, sizeof g->model_path,
                                      err);
        if (st) return st;
        snprintf(g->config_sha256, sizeof g->config_sha256, "%s", model->config_sha256);
        snprintf(g->weights_sha256, sizeof g->weights_sha256, "%s", model->weights_sha256);
    }
    g->config_json = config_text;
    g->cfg = model->cfg;
    return QC_OK;
}

uint64_t qc_record_stream_weight_bytes(const qc_model *m) {
    if (!qc_model_is_streamed(m)) return qc_model_weight_bytes(m);
    uint64_t layer = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        uint64_t b = qc_model_layer_bytes(m, l);
        if (b > layer) layer = b;
    }
    /* an output head block (qc_record_stream.c: 4096 rows), the final norm */
    const uint64_t head = 4096 * (uint64_t)qc_dtype_row_bytes(m->lm_head.dtype == QC_Q8_0 ? QC_Q8_0
                                                              : m->lm_head.dtype,
                                                              m->cfg.hidden_size);
    return layer + head + qc_tensor_bytes(&m->final_norm);
}

uint64_t qc_record_checkpoint_bytes(const char *dir) {
    uint64_t total = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 12 || strcmp(e->d_name + n - 12, ".safetensors")) continue;
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) total += (uint64_t)sb.st_size;
    }
    closedir(d);
    return total;
}

/* The exit code of a failed run: 1 (a FAIL) when the runtime under test failed, else 2. */
int qc_record_fail(const qc_err *err) {
    if (err->code != QC_ERR_RUNTIME) return qc_cli_fail(PROG, err);
    fprintf(stderr, "%s: FAIL: %s\n", PROG, err->msg);
    return QC_EXIT_FAIL;
}
