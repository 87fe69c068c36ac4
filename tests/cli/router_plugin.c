/* router_plugin.c — a runtime plugin that reports MoE router choices (QC_CAP_ROUTER,
 * get_router), right or wrong, for tests/cli/test_router_runtime.sh. It wraps another plugin
 * (option inner=PATH, e.g. libqc_plugin_reference.so) and passes every call on; get_router
 * answers the inner plugin's choices, changed by the mutant at layer 1, position 2 (the third
 * position of the sequence):
 *   inner=PATH[,mutant=M], M one of
 *     wrongid  the first chosen expert replaced by an expert the router did not choose
 *     badid    the first id is 1000000 (outside [0, num_experts))
 *     dup      the second id repeats the first
 *     nan      the first weight is NaN
 *     fail     get_router returns QC_PLUGIN_ERROR (with a message)
 * Only the entries that forward and the router need are wrapped (no hidden, no state): the
 * router is the only capability announced besides the inner plugin's none.
 * -DROUTER_OLD_STRUCT: struct_size = QC_PLUGIN_TOPK_SIZE (a plugin built before get_router: the
 * harness ignores the bit and the entry, router_topk is SKIPPED). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_runtime_plugin.h"

typedef struct {
    void *dl;                    /* the inner plugin's library */
    const qc_runtime_plugin *in; /* its vtable */
    void *ih;                    /* its handle */
    char mutant[16];             /* "" or one of the mutants above */
    int32_t last_start, last_n;  /* positions of the last successful forward */
    int k;                       /* num_experts_per_tok of config.json (the row width) */
    char err[512];
} rp;

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

/* num_experts_per_tok of DIR/config.json (0 when absent): a plain text search is enough here. */
static int config_k(const char *dir) {
    char path[1100], buf[16384];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strstr(buf, "\"num_experts_per_tok\"");
    return p && (p = strchr(p, ':')) ? atoi(p + 1) : 0;
}

static int rp_open(const char *dir, const char *opts, qc_plugin_info *info, void **h) {
    *h = NULL;
    char path[1024];
    opt_str(opts, "inner=", path, sizeof path);
    rp *t = calloc(1, sizeof *t);
    if (!t) return QC_PLUGIN_ERROR;
    opt_str(opts, "mutant=", t->mutant, sizeof t->mutant);
    t->k = config_k(dir);
    t->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    qc_runtime_plugin_entry_fn fn = t->dl ? (qc_runtime_plugin_entry_fn)(void (*)(void))dlsym(
                                                t->dl, QC_PLUGIN_ENTRY_SYMBOL)
                                          : NULL;
    if (!fn) {
        snprintf(open_err, sizeof open_err, "router plugin: cannot load inner=%s", path);
        if (t->dl) dlclose(t->dl);
        free(t);
        return QC_PLUGIN_ERROR;
    }
    t->in = fn();
    if (t->in->struct_size < QC_PLUGIN_ROUTER_SIZE || !t->in->get_router ||
        t->in->open(dir, "", info, &t->ih) != QC_PLUGIN_OK) {
        snprintf(open_err, sizeof open_err, "router plugin: inner open: %s",
                 t->in->last_error(NULL));
        dlclose(t->dl);
        free(t);
        return QC_PLUGIN_ERROR;
    }
    if (!(info->caps & QC_CAP_ROUTER)) {
        snprintf(open_err, sizeof open_err, "router plugin: the inner plugin has no router "
                 "(a dense model?)");
        t->in->close(t->ih);
        dlclose(t->dl);
        free(t);
        return QC_PLUGIN_ERROR;
    }
    info->caps = QC_CAP_ROUTER;
    snprintf(info->name, sizeof info->name, "router plugin%s%s", t->mutant[0] ? ", mutant " : "",
             t->mutant);
    *h = t;
    return QC_PLUGIN_OK;
}

static int rp_reset(void *h) {
    rp *t = h;
    t->last_n = 0;
    return t->in->reset(t->ih);
}

static int rp_forward(void *h, const int32_t *tokens, int32_t n, int32_t start_pos,
                      int32_t all_logits, float *logits) {
    rp *t = h;
    t->last_n = 0;
    t->err[0] = 0;
    int rc = t->in->forward(t->ih, tokens, n, start_pos, all_logits, logits);
    if (rc == QC_PLUGIN_OK) t->last_start = start_pos, t->last_n = n;
    return rc;
}

/* The inner plugin's choices, then the mutant (layer 1, absolute position 2). */
static int rp_get_router(void *h, int32_t layer, int32_t *ids, float *weights) {
    rp *t = h;
    t->err[0] = 0;
    if (!strcmp(t->mutant, "fail")) {
        snprintf(t->err, sizeof t->err, "the router plugin's injected get_router error");
        return QC_PLUGIN_ERROR;
    }
    int rc = t->in->get_router(t->ih, layer, ids, weights);
    if (rc != QC_PLUGIN_OK) {
        snprintf(t->err, sizeof t->err, "inner get_router: %s", t->in->last_error(t->ih));
        return rc;
    }
    int r = 2 - t->last_start;
    const int k = t->k;
    if (layer != 1 || r < 0 || r >= t->last_n || k < 1) return QC_PLUGIN_OK;
    int32_t *id = ids + (size_t)r * k;
    float *w = weights + (size_t)r * k;
    if (!strcmp(t->mutant, "wrongid")) {
        int32_t e = 0; /* the smallest expert the router did not choose */
        for (int again = 1; again;) {
            again = 0;
            for (int j = 0; j < k; j++)
                if (id[j] == e) e++, again = 1;
        }
        id[0] = e;
    } else if (!strcmp(t->mutant, "badid")) {
        id[0] = 1000000;
    } else if (!strcmp(t->mutant, "dup") && k > 1) {
        id[1] = id[0];
    } else if (!strcmp(t->mutant, "nan")) {
        w[0] = NAN;
    }
    return QC_PLUGIN_OK;
}

static void rp_close(void *h) {
    rp *t = h;
    if (!t) return;
    t->in->close(t->ih);
    dlclose(t->dl);
    free(t);
}

static const char *rp_last_error(void *h) {
    rp *t = h;
    if (!t) return open_err;
    return t->err[0] ? t->err : t->in->last_error(t->ih);
}

static const qc_runtime_plugin api = {
    .abi_version = QC_PLUGIN_ABI_VERSION,
#ifdef ROUTER_OLD_STRUCT /* built before get_router: the harness must never read the entry */
    .struct_size = QC_PLUGIN_TOPK_SIZE,
#else
    .struct_size = sizeof(qc_runtime_plugin),
#endif
    .open = rp_open,
    .reset = rp_reset,
    .forward = rp_forward,
    .close = rp_close,
    .last_error = rp_last_error,
    .get_router = rp_get_router,
};

const qc_runtime_plugin *qc_runtime_plugin_entry(void) { return &api; }
