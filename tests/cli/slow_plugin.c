/* slow_plugin.c — a runtime plugin that is the built-in optimized plugin made slower in its
 * decode steps, for tests/cli/test_bench_gate.sh (a build that is really slower, without any
 * test hook in the product). Built by the test:
 *     $CC -shared -fPIC -DSLOW_INNER='"<build>/libqc_plugin_optimized.so"' slow_plugin.c -ldl
 * It dlopens SLOW_INNER and hands its entries through unchanged (same handles, same
 * struct_size, same capabilities), except that forward / forward_topk of one token (a decode
 * step, or a static prefill step) first sleep QC_SLOW_PLUGIN_DECODE_US microseconds when that
 * env var (read at open) is set and > 0. Unset: a pure pass-through.
 * When SLOW_INNER cannot be loaded, open fails and last_error(NULL) says why. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qc/qc_runtime_plugin.h"

#ifndef SLOW_INNER
#error "build with -DSLOW_INNER='\"path/to/libqc_plugin_optimized.so\"'"
#endif

static const qc_runtime_plugin *inner; /* the wrapped plugin's entries (NULL: not loaded) */
static qc_runtime_plugin api;          /* ours: a copy of inner's with forward* replaced */
static long decode_us;                 /* the sleep of a one-token call (0: none) */
static char load_err[1024] = "no error"; /* why SLOW_INNER could not be loaded */

static void nap(int32_t n) {
    if (n != 1 || decode_us <= 0) return;
    struct timespec ts = {decode_us / 1000000, (decode_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static int slow_open(const char *model_dir, const char *options, qc_plugin_info *info,
                     void **handle) {
    const char *e = getenv("QC_SLOW_PLUGIN_DECODE_US");
    decode_us = e && *e ? atol(e) : 0;
    if (!inner) {
        *handle = NULL;
        return QC_PLUGIN_ERROR;
    }
    return inner->open(model_dir, options, info, handle);
}

static const char *slow_last_error(void *handle) {
    return inner ? inner->last_error(handle) : load_err;
}

static int slow_forward(void *handle, const int32_t *tokens, int32_t n, int32_t start_pos,
                        int32_t all_logits, float *logits) {
    nap(n);
    return inner->forward(handle, tokens, n, start_pos, all_logits, logits);
}

static int slow_forward_topk(void *handle, const int32_t *tokens, int32_t n, int32_t start_pos,
                             int32_t k, int32_t *ids, float *logprobs) {
    nap(n);
    return inner->forward_topk(handle, tokens, n, start_pos, k, ids, logprobs);
}

/* the mandatory entries while SLOW_INNER is not loaded (open fails first: never called) */
static int none_reset(void *handle) {
    (void)handle;
    return QC_PLUGIN_ERROR;
}
static int none_forward(void *handle, const int32_t *tokens, int32_t n, int32_t start_pos,
                        int32_t all_logits, float *logits) {
    (void)handle, (void)tokens, (void)n, (void)start_pos, (void)all_logits, (void)logits;
    return QC_PLUGIN_ERROR;
}
static void none_close(void *handle) { (void)handle; }

static void load_inner(void) {
    void *dl = dlopen(SLOW_INNER, RTLD_NOW | RTLD_LOCAL);
    void *sym = dl ? dlsym(dl, QC_PLUGIN_ENTRY_SYMBOL) : NULL;
    qc_runtime_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);
    const qc_runtime_plugin *p = sym ? entry() : NULL;
    if (!p || p->struct_size > sizeof api) {
        snprintf(load_err, sizeof load_err, "slow_plugin: cannot load %s: %s", SLOW_INNER,
                 !dl || !sym ? dlerror() : !p ? "its entry returned NULL"
                                             : "its struct is newer than this wrapper's");
        return;
    }
    memcpy(&api, p, p->struct_size);
    inner = p;
}

__attribute__((visibility("default"))) const qc_runtime_plugin *qc_runtime_plugin_entry(void) {
    static int tried;
    if (!tried) {
        tried = 1;
        load_inner();
        if (!inner) {
            api.abi_version = QC_PLUGIN_ABI_VERSION;
            api.struct_size = (uint32_t)QC_PLUGIN_V1_SIZE;
            api.reset = none_reset;
            api.forward = none_forward;
            api.close = none_close;
        }
        api.open = slow_open;
        api.last_error = slow_last_error;
        if (inner) {
            api.forward = slow_forward;
            if (api.forward_topk && api.struct_size >= QC_PLUGIN_TOPK_SIZE)
                api.forward_topk = slow_forward_topk;
        }
    }
    return &api;
}
