/* topk_plugin.c — a runtime plugin that returns top-k log-probabilities only
 * (QC_CAP_TOPK_ONLY, forward_topk), for tests/cli/test_topk_runtime.sh. It wraps another plugin
 * (option inner=PATH, e.g. libqc_plugin_reference.so): its logits -> log_softmax -> top k. Its
 * own forward answers QC_PLUGIN_UNSUPPORTED (full logits are never offered).
 * Options (the --backend text after the first ','): inner=PATH[,mutant=M], M one of
 *   shift    each position answers the previous position's row (off by one)
 *   badid    position 2's first id is V (out of range)
 *   nan      position 2's second log-probability is NaN
 *   ascend   position 2's row in ascending order
 * -DTOPK_OLD_STRUCT: struct_size = QC_PLUGIN_LIFECYCLE_SIZE (a plugin built before forward_topk:
 * the harness ignores the bit and the entry). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_runtime_plugin.h"

typedef struct {
    void *dl;
    const qc_runtime_plugin *in;
    void *ih;
    int V;
    char mutant[16];
    float *logits;     /* [n, V] */
    int32_t prev_ids[QC_PLUGIN_MAX_TOPK];
    float prev_lps[QC_PLUGIN_MAX_TOPK];
    int have_prev;
    char err[512];
} tp;

static char open_err[512] = "no error";

static void opt_str(const char *opts, const char *key, char *out, size_t cap) {
    out[0] = 0;
    const char *p = strstr(opts, key);
    if (!p) return;
    p += strlen(key);
    size_t n = strcspn(p, ",");
    if (n >= cap) n = cap - 1;
    memcpy(out, p, n);
    out[n] = 0;
}

static int tp_open(const char *dir, const char *opts, qc_plugin_info *info, void **h) {
    *h = NULL;
    char path[1024];
    opt_str(opts, "inner=", path, sizeof path);
    tp *t = calloc(1, sizeof *t);
    if (!t) return QC_PLUGIN_ERROR;
    opt_str(opts, "mutant=", t->mutant, sizeof t->mutant);
    t->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    qc_runtime_plugin_entry_fn fn = t->dl ? (qc_runtime_plugin_entry_fn)(void (*)(void))dlsym(
                                                t->dl, QC_PLUGIN_ENTRY_SYMBOL)
                                          : NULL;
    if (!fn) {
        snprintf(open_err, sizeof open_err, "topk plugin: cannot load inner=%s", path);
        if (t->dl) dlclose(t->dl);
        free(t);
        return QC_PLUGIN_ERROR;
    }
    t->in = fn();
    if (t->in->open(dir, "", info, &t->ih) != QC_PLUGIN_OK) {
        snprintf(open_err, sizeof open_err, "topk plugin: inner open: %s", t->in->last_error(NULL));
        dlclose(t->dl);
        free(t);
        return QC_PLUGIN_ERROR;
    }
    t->V = info->vocab_size;
    info->caps = QC_CAP_TOPK_ONLY;
    snprintf(info->name, sizeof info->name, "topk-only plugin (%s)%s%s", path,
             t->mutant[0] ? ", mutant " : "", t->mutant);
    *h = t;
    return QC_PLUGIN_OK;
}

static int tp_reset(void *h) {
    tp *t = h;
    t->have_prev = 0;
    return t->in->reset(t->ih);
}

static int tp_forward(void *h, const int32_t *tokens, int32_t n, int32_t start_pos,
                      int32_t all_logits, float *logits) {
    tp *t = h;
    (void)tokens, (void)n, (void)start_pos, (void)all_logits, (void)logits;
    snprintf(t->err, sizeof t->err, "full logits are not offered (top-k only)");
    return QC_PLUGIN_UNSUPPORTED;
}

/* The top k of one logits row (log-softmax in double). */
static void row_topk(const float *z, int V, int k, int32_t *ids, float *lps) {
    double mx = z[0], s = 0;
    for (int i = 1; i < V; i++) mx = z[i] > mx ? z[i] : mx;
    for (int i = 0; i < V; i++) s += exp((double)z[i] - mx);
    double lse = mx + log(s);
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < V; i++) {
            int taken = 0;
            for (int q = 0; q < j && !taken; q++) taken = ids[q] == i;
            if (!taken && (best < 0 || z[i] > z[best])) best = i;
        }
        ids[j] = best;
        lps[j] = (float)((double)z[best] - lse);
    }
}

static int tp_forward_topk(void *h, const int32_t *tokens, int32_t n, int32_t start_pos, int32_t k,
                           int32_t *ids, float *lps) {
    tp *t = h;
    float *z = realloc(t->logits, (size_t)n * (size_t)t->V * sizeof(float));
    if (!z) return snprintf(t->err, sizeof t->err, "out of memory"), QC_PLUGIN_ERROR;
    t->logits = z;
    if (t->in->forward(t->ih, tokens, n, start_pos, 1, z) != QC_PLUGIN_OK) {
        snprintf(t->err, sizeof t->err, "inner forward: %s", t->in->last_error(t->ih));
        return QC_PLUGIN_ERROR;
    }
    for (int r = 0; r < n; r++) {
        int32_t *id = ids + (size_t)r * (size_t)k;
        float *lp = lps + (size_t)r * (size_t)k;
        row_topk(z + (size_t)r * (size_t)t->V, t->V, k, id, lp);
        if (!strcmp(t->mutant, "shift")) { /* answer the previous position's row */
            int32_t ci[QC_PLUGIN_MAX_TOPK];
            float cl[QC_PLUGIN_MAX_TOPK];
            memcpy(ci, id, (size_t)k * sizeof *id), memcpy(cl, lp, (size_t)k * sizeof *lp);
            if (t->have_prev)
                memcpy(id, t->prev_ids, (size_t)k * sizeof *id),
                    memcpy(lp, t->prev_lps, (size_t)k * sizeof *lp);
            memcpy(t->prev_ids, ci, sizeof ci), memcpy(t->prev_lps, cl, sizeof cl);
            t->have_prev = 1;
        }
        if (start_pos + r != 2) continue;
        if (!strcmp(t->mutant, "badid")) id[0] = t->V;
        if (!strcmp(t->mutant, "nan") && k > 1) lp[1] = NAN;
        if (!strcmp(t->mutant, "ascend"))
            for (int j = 0; j < k / 2; j++) {
                float f = lp[j];
                int32_t i = id[j];
                lp[j] = lp[k - 1 - j], id[j] = id[k - 1 - j];
                lp[k - 1 - j] = f, id[k - 1 - j] = i;
            }
    }
    return QC_PLUGIN_OK;
}

static void tp_close(void *h) {
    tp *t = h;
    if (!t) return;
    t->in->close(t->ih);
    dlclose(t->dl);
    free(t->logits);
    free(t);
}

static const char *tp_last_error(void *h) { return h ? ((tp *)h)->err : open_err; }

static const qc_runtime_plugin api = {
    .abi_version = QC_PLUGIN_ABI_VERSION,
#ifdef TOPK_OLD_STRUCT /* built before forward_topk: the harness must never read the entry */
    .struct_size = QC_PLUGIN_LIFECYCLE_SIZE,
#else
    .struct_size = sizeof(qc_runtime_plugin),
#endif
    .open = tp_open,
    .reset = tp_reset,
    .forward = tp_forward,
    .close = tp_close,
    .last_error = tp_last_error,
    .forward_topk = tp_forward_topk,
};

const qc_runtime_plugin *qc_runtime_plugin_entry(void) { return &api; }
