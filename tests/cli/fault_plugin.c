/* fault_plugin.c — a deliberately broken runtime plugin for tests/cli/test_plugin_faults.sh.
 * One source, one fault per build (-DFAULT_...):
 *   FAULT_ABI_VERSION   abi_version 99                FAULT_NO_FORWARD  forward entry NULL
 *   FAULT_OPEN          open fails ("cannot load")    FAULT_FORWARD     forward returns an error
 *   FAULT_NAN           logits are NaN                FAULT_CRASH       forward dereferences NULL
 *   (none)              a plausible but wrong runtime: logits 0, no capabilities
 * The dims come from the options ("vocab=V,hidden=H,layers=L"), so the harness's dims check
 * passes and the fault itself is what the checks see. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_runtime_plugin.h"

typedef struct {
    int V, H, L, pos;
} fp;

static char open_err[256] = "no error";

static int opt_int(const char *opts, const char *key) {
    const char *p = strstr(opts, key);
    return p ? atoi(p + strlen(key)) : 0;
}

static int fp_open(const char *dir, const char *opts, qc_plugin_info *info, void **h) {
    (void)dir;
    *h = NULL;
#ifdef FAULT_OPEN
    snprintf(open_err, sizeof open_err, "cannot load %s: unsupported tensor layout (fault)", dir);
    return QC_PLUGIN_ERROR;
#endif
    fp *f = calloc(1, sizeof *f);
    if (!f) return QC_PLUGIN_ERROR;
    f->V = opt_int(opts, "vocab="), f->H = opt_int(opts, "hidden="), f->L = opt_int(opts, "layers=");
    memset(info, 0, sizeof *info);
    info->vocab_size = f->V, info->hidden_size = f->H, info->n_layers = f->L;
    snprintf(info->name, sizeof info->name, "fault plugin");
    *h = f;
    return QC_PLUGIN_OK;
}

static int fp_reset(void *h) {
    ((fp *)h)->pos = 0;
    return QC_PLUGIN_OK;
}

static int fp_forward(void *h, const int32_t *tokens, int32_t n, int32_t start_pos,
                      int32_t all_logits, float *logits) {
    fp *f = h;
    (void)tokens;
    (void)start_pos;
#ifdef FAULT_FORWARD
    (void)all_logits, (void)logits, (void)n, (void)f;
    return QC_PLUGIN_ERROR;
#else
#ifdef FAULT_CRASH
    if (n > 0) {
        volatile int *p = NULL;
        *p = 1;
    }
#endif
    size_t rows = all_logits ? (size_t)n : 1;
    for (size_t i = 0; i < rows * (size_t)f->V; i++)
#ifdef FAULT_NAN
        logits[i] = NAN;
#else
        logits[i] = 0.0f;
#endif
    f->pos = start_pos + n;
    return QC_PLUGIN_OK;
#endif
}

static void fp_close(void *h) { free(h); }

static const char *fp_last_error(void *h) {
    return h ? "forward failed: the fault plugin's injected error" : open_err;
}

static const qc_runtime_plugin api = {
#ifdef FAULT_ABI_VERSION
    .abi_version = 99,
#else
    .abi_version = QC_PLUGIN_ABI_VERSION,
#endif
    .struct_size = sizeof(qc_runtime_plugin),
    .open = fp_open,
    .reset = fp_reset,
#ifndef FAULT_NO_FORWARD
    .forward = fp_forward,
#endif
    .close = fp_close,
    .last_error = fp_last_error,
};

__attribute__((visibility("default"))) const qc_runtime_plugin *qc_runtime_plugin_entry(void) {
    return &api;
}
