/* qc_registry.c — the backend registry (see qc_registry.h): the built-in table, plugin
 * loading, exec adapters and the shipped llama.cpp plugin. */

#include "qc_registry.h"
#include "qc_server.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qc/qc_memplan.h"
#include "qc/qc_optimized.h"
#include "qc/qc_reference.h"
#include "qc/qc_runtime_plugin.h"
#include "qc_cli_common.h"
#include "qc_exec.h"
#include "qc_kv.h"
#include "qc_remote.h"

/* ===================================================================================== */
/* built-in backends                                                                     */
/* ===================================================================================== */

typedef struct {
    qc_builtin_info info; /* what the check engine enumerates (qc_registry.h) */
    qc_status (*create)(const qc_model *m, const qc_backend_opts *o, qc_backend **out,
                        qc_err *err);
    /* memory plan: every byte create allocates for these options, from the backend's own
     * layout code (the counting pass of what create allocates) */
    size_t (*scratch_bytes)(const qc_config *c, const qc_backend_opts *o);
} builtin_entry;

/* The built-in backends, in the order they are checked and reported. */
static const builtin_entry builtins[] = {
    {{"reference", QC_BE_CAP_ALL & ~QC_BE_CAP_THREADS, QC_BUILTIN_REFERENCE, NULL},
     qc_reference_create, qc_reference_scratch_bytes},
    {{"optimized", QC_BE_CAP_ALL, QC_BUILTIN_NAMES_ISA, "opt_eq_ref"}, qc_optimized_create,
     qc_optimized_scratch_bytes},
};
#define N_BUILTINS (sizeof builtins / sizeof builtins[0])

int qc_registry_n_builtins(void) { return (int)N_BUILTINS; }

const qc_builtin_info *qc_registry_builtin(int i) {
    return i >= 0 && i < (int)N_BUILTINS ? &builtins[i].info : NULL;
}

int qc_registry_builtin_index(const char *name) {
    for (size_t i = 0; name && i < N_BUILTINS; i++)
        if (!strcmp(builtins[i].info.name, name)) return (int)i;
    return -1;
}

const qc_builtin_info *qc_registry_reference(void) {
    for (size_t i = 0; i < N_BUILTINS; i++)
        if (builtins[i].info.roles & QC_BUILTIN_REFERENCE) return &builtins[i].info;
    return NULL;
}

static const builtin_entry *builtin_find(const char *name) {
    int i = qc_registry_builtin_index(name);
    return i < 0 ? NULL : &builtins[i];
}

int qc_registry_is_builtin(const char *name) { return builtin_find(name) != NULL; }

unsigned qc_registry_builtin_caps(const char *name) {
    const builtin_entry *b = builtin_find(name);
    return b ? b->info.caps : 0;
}

/* One built-in backend into the plan: what it reports for the request's options. */
static qc_status memplan_add(const builtin_entry *b, qc_memplan_req *rq, qc_err *err) {
    qc_backend_opts o;
    qc_backend_opts_default(&o);
    o.max_tokens = rq->max_tokens;
    o.n_threads = rq->n_threads;
    o.chunk_size = rq->chunk_size;
    char what[64];
    snprintf(what, sizeof what, "the %s backend", b->info.name);
    return qc_memplan_add_backend(rq, what, (uint64_t)b->scratch_bytes(rq->cfg, &o), err);
}

qc_status qc_registry_memplan(const char *name, qc_memplan_req *rq, qc_err *err) {
    const builtin_entry *b = name && strcmp(name, "all") ? builtin_find(name) : NULL;
    if (!name || (strcmp(name, "all") && !b))
        return qc_errf(err, QC_ERR_ARG, "memory plan: unknown backend '%s'",
                       name ? name : "(null)");
    if (!rq->cfg) return qc_errf(err, QC_ERR_ARG, "memory plan: no config");
    rq->n_backends = 0;
    qc_status st = QC_OK;
    for (size_t i = 0; i < N_BUILTINS && !st; i++)
        if (!b || b == &builtins[i]) st = memplan_add(&builtins[i], rq, err);
    return st;
}

/* ===================================================================================== */
/* parsing                                                                               */
/* ===================================================================================== */

/* Where the llama.cpp plugin is: $QC_LLAMACPP_PLUGIN, else the cache ci/llamacpp fills. */
static void llamacpp_plugin_path(char *out, size_t n) {
    const char *env = getenv("QC_LLAMACPP_PLUGIN");
    if (env && env[0]) {
        snprintf(out, n, "%s", env);
        return;
    }
    const char *cache = getenv("QC_CACHE");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (cache && cache[0])
        snprintf(out, n, "%s/llamacpp/libqc_plugin_llamacpp.so", cache);
    else if (xdg && xdg[0])
        snprintf(out, n, "%s/qwen-conform/llamacpp/libqc_plugin_llamacpp.so", xdg);
    else
        snprintf(out, n, "%s/.cache/qwen-conform/llamacpp/libqc_plugin_llamacpp.so",
                 home ? home : "");
}

/* "PATH[,options]" -> path, options. */
static void split_options(const char *v, char *path, size_t np, char *opts, size_t no) {
    const char *comma = strchr(v, ',');
    if (comma) {
        snprintf(path, np, "%.*s", (int)(comma - v), v);
        snprintf(opts, no, "%s", comma + 1);
    } else {
        snprintf(path, np, "%s", v);
        opts[0] = 0;
    }
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* "exec:<the adapter's file name>": the last word of the command that looks like a path
 * ("python3 adapters/golden/qc_golden_adapter.py --x" -> "exec:qc_golden_adapter.py"), else
 * the program's name. */
static void exec_short_name(const char *cmd, char *out, size_t n) {
    char buf[2048], pick[512] = "";
    snprintf(buf, sizeof buf, "%s", cmd);
    char *save = NULL;
    int first = 1;
    for (char *t = strtok_r(buf, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
        for (char *q = t; *q; q++)
            if (*q == '"' || *q == '\'') *q = ' ';
        while (*t == ' ') t++;
        size_t L = strlen(t);
        while (L && t[L - 1] == ' ') t[--L] = 0;
        if (!L || t[0] == '-') continue;
        if (first || strchr(t, '/') || strchr(t, '.')) snprintf(pick, sizeof pick, "%s", base_name(t));
        first = 0;
    }
    snprintf(out, n, "exec:%s", pick[0] ? pick : "adapter");
}

/* The command that serves plugin `spec` (PATH[,opts]) in a child process: this very binary
 * through /proc/PID/exe, which still runs it when the file was rebuilt or deleted meanwhile
 * (a long bench or check while `build/` is rebuilt must not start another version). */
static qc_status isolate_cmd(const char *spec, char *cmd, size_t n, qc_err *err) {
    char self[64];
    snprintf(self, sizeof self, "/proc/%ld/exe", (long)getpid());
    if (access(self, X_OK)) return qc_errf(err, QC_ERR_IO, "isolate: cannot find the qwen-conform binary (%s)", self);
    if (strchr(spec, '\''))
        return qc_errf(err, QC_ERR_ARG, "isolate: a path with a single quote is not supported");
    snprintf(cmd, n, "'%s' adapter-serve '%s'", self, spec);
    return QC_OK;
}

qc_status qc_registry_parse(const char *spec, double timeout_s, qc_runtime_spec *out,
                            qc_err *err) {
    memset(out, 0, sizeof *out);
    out->timeout_s = timeout_s > 0 ? timeout_s : 60.0;
    if (!spec || !spec[0]) return qc_errf(err, QC_ERR_ARG, "--backend: empty value");
    if (builtin_find(spec)) {
        out->kind = QC_RT_BUILTIN;
        snprintf(out->name, sizeof out->name, "%s", spec);
        snprintf(out->target, sizeof out->target, "%s", spec);
        return QC_OK;
    }
    { /* a built-in with its own options: "optimized,bf16_dot=1" (set_option at create) */
        const char *comma = strchr(spec, ',');
        char base[64];
        if (comma && (size_t)(comma - spec) < sizeof base) {
            snprintf(base, sizeof base, "%.*s", (int)(comma - spec), spec);
            if (builtin_find(base)) {
                if (!comma[1] || !strchr(comma + 1, '='))
                    return qc_errf(err, QC_ERR_ARG, "--backend %s: options are key=value[,...]",
                                   spec);
                out->kind = QC_RT_BUILTIN;
                snprintf(out->name, sizeof out->name, "%s", spec);
                snprintf(out->target, sizeof out->target, "%s", base);
                snprintf(out->options, sizeof out->options, "%s", comma + 1);
                return QC_OK;
            }
        }
    }
    if (!strncmp(spec, "plugin:", 7)) {
        out->kind = QC_RT_PLUGIN;
        split_options(spec + 7, out->target, sizeof out->target, out->options, sizeof out->options);
        if (!out->target[0]) return qc_errf(err, QC_ERR_ARG, "--backend plugin: needs a path");
        snprintf(out->plugin, sizeof out->plugin, "%s", out->target);
        snprintf(out->name, sizeof out->name, "plugin:%s", base_name(out->target));
        return QC_OK;
    }
    if (!strncmp(spec, "exec:", 5)) {
        out->kind = QC_RT_EXEC;
        snprintf(out->target, sizeof out->target, "%s", spec + 5);
        if (!out->target[0]) return qc_errf(err, QC_ERR_ARG, "--backend exec: needs a command");
        exec_short_name(out->target, out->name, sizeof out->name);
        return QC_OK;
    }
    if (!strncmp(spec, "isolate:plugin:", 15)) {
        out->kind = QC_RT_EXEC;
        qc_status s = isolate_cmd(spec + 15, out->target, sizeof out->target, err);
        if (s) return s;
        char path[1024], opts[1024];
        split_options(spec + 15, path, sizeof path, opts, sizeof opts);
        snprintf(out->name, sizeof out->name, "plugin:%s", base_name(path));
        snprintf(out->plugin, sizeof out->plugin, "%s", path);
        return QC_OK;
    }
    if (!strncmp(spec, "http:", 5)) { /* qc_server_parse names a URL that is not http(s) */
        qc_server_opts so;
        qc_status s = qc_server_parse(spec + 5, &so, err); /* usage errors first */
        if (s) return s;
        out->kind = QC_RT_HTTP;
        snprintf(out->target, sizeof out->target, "%s", spec + 5);
        /* the name in reports: http:host:port (no path, no options, never a key) */
        const char *h = strstr(so.url, "://") + 3;
        size_t hl = strcspn(h, "/?#");
        snprintf(out->name, sizeof out->name, "http:%.*s", (int)(hl < 200 ? hl : 200), h);
        return QC_OK;
    }
    if (!strcmp(spec, "llamacpp") || !strncmp(spec, "llamacpp,", 9)) {
        char path[1024], spec2[2100];
        llamacpp_plugin_path(path, sizeof path);
        snprintf(spec2, sizeof spec2, "%s%s", path, spec + 8);
        struct stat sb;
        if (stat(path, &sb) != 0)
            return qc_errf(err, QC_ERR_ARG, "--backend llamacpp: the llama.cpp plugin %s does not "
                           "exist: build it with `ci/llamacpp setup` (or set QC_LLAMACPP_PLUGIN)",
                           path);
        const char *inproc = getenv("QC_LLAMACPP_INPROCESS");
        if (inproc && !strcmp(inproc, "1")) {
            out->kind = QC_RT_PLUGIN;
            split_options(spec2, out->target, sizeof out->target, out->options,
                          sizeof out->options);
        } else {
            /* out of process: llama.cpp aborts (GGML_ASSERT) on some models */
            out->kind = QC_RT_EXEC;
            qc_status s = isolate_cmd(spec2, out->target, sizeof out->target, err);
            if (s) return s;
        }
        snprintf(out->name, sizeof out->name, "llamacpp");
        snprintf(out->plugin, sizeof out->plugin, "%s", path);
        return QC_OK;
    }
    static const char *const known[] = {"reference", "optimized", "all", "llamacpp"};
    const char *near = qc_cli_nearest(spec, known, 4);
    if (near) return qc_errf(err, QC_ERR_ARG, "--backend: '%s' is not a backend (did you mean "
                             "'%s'?)", spec, near);
    return qc_errf(err, QC_ERR_ARG, "--backend: '%s' is not reference, optimized, all, "
                   "plugin:PATH.so[,k=v...], exec:\"CMD ARGS\", isolate:plugin:PATH.so, "
                   "llamacpp[,k=v...] or http:URL[,k=v...]", spec);
}

/* ===================================================================================== */
/* plugins                                                                               */
/* ===================================================================================== */

qc_status qc_plugin_load(const char *path, const qc_runtime_plugin **api, void **dl,
                         qc_err *err) {
    *api = NULL;
    *dl = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return qc_errf(err, QC_ERR_ARG, "%s: plugin file does not exist", path);
    /* dlopen searches the library path for names without a '/' */
    char full[2100];
    snprintf(full, sizeof full, "%s%s", strchr(path, '/') ? "" : "./", path);
    void *h = dlopen(full, RTLD_NOW | RTLD_LOCAL);
    if (!h) return qc_errf(err, QC_ERR_ARG, "%s: cannot load the plugin: %s", path, dlerror());
    qc_runtime_plugin_entry_fn entry;
    void *sym = dlsym(h, QC_PLUGIN_ENTRY_SYMBOL);
    memcpy(&entry, &sym, sizeof entry);
    if (!sym) {
        dlclose(h);
        return qc_errf(err, QC_ERR_ARG, "%s: not a qwen-conform plugin (no symbol %s)", path,
                       QC_PLUGIN_ENTRY_SYMBOL);
    }
    const qc_runtime_plugin *p = entry();
    if (!p) {
        dlclose(h);
        return qc_errf(err, QC_ERR_ARG, "%s: %s() returned NULL", path, QC_PLUGIN_ENTRY_SYMBOL);
    }
    if (p->abi_version != QC_PLUGIN_ABI_VERSION) {
        unsigned v = p->abi_version;
        dlclose(h);
        return qc_errf(err, QC_ERR_ARG, "%s: plugin ABI version %u, this qwen-conform speaks %u",
                       path, v, QC_PLUGIN_ABI_VERSION);
    }
    if (p->struct_size < QC_PLUGIN_V1_SIZE) {
        unsigned sz = p->struct_size;
        dlclose(h);
        return qc_errf(err, QC_ERR_ARG, "%s: plugin struct_size %u < %zu (the v1 struct)", path,
                       sz, (size_t)QC_PLUGIN_V1_SIZE);
    }
    const char *missing = !p->open ? "open" : !p->reset ? "reset" : !p->forward ? "forward"
                          : !p->close ? "close" : !p->last_error ? "last_error" : NULL;
    if (missing) {
        dlclose(h);
        return qc_errf(err, QC_ERR_ARG, "%s: the plugin lacks the mandatory entry '%s'", path,
                       missing);
    }
    *api = p;
    *dl = h;
    return QC_OK;
}

qc_status qc_registry_preflight(const qc_runtime_spec *rs, qc_err *err) {
    if (!rs->plugin[0]) return QC_OK;
    const qc_runtime_plugin *api = NULL;
    void *dl = NULL;
    return qc_plugin_load(rs->plugin, &api, &dl, err); /* stays loaded: it is used next */
}

/* ===================================================================================== */
/* exec adapters: the dims hook                                                          */
/* ===================================================================================== */

static void exec_set_dims(void *handle, const qc_config *cfg) {
    qc_exec_dims d;
    memset(&d, 0, sizeof d);
    d.n_layers = cfg->n_layers;
    d.vocab = cfg->vocab_size;
    d.hidden = cfg->hidden_size;
    for (int l = 0; l < cfg->n_layers && l < QC_MAX_LAYERS; l++)
        d.layer_full[l] = cfg->layer_types[l] == QC_LAYER_FULL;
    d.n_kv_heads = cfg->n_kv_heads;
    d.head_dim = cfg->head_dim;
    d.conv_dim = qc_cfg_conv_dim(cfg);
    d.conv_kernel = cfg->conv_kernel;
    d.n_v_heads = cfg->lin_n_v_heads;
    d.k_dim = cfg->lin_k_dim;
    d.v_dim = cfg->lin_v_dim;
    d.n_experts_per_tok = qc_cfg_is_moe(cfg) ? cfg->n_experts_per_tok : 0;
    qc_exec_set_dims(handle, &d);
}

/* ===================================================================================== */
/* create                                                                                */
/* ===================================================================================== */

/* The options of "NAME,k=v[,k=v...]" (split by qc_kv.h) through the backend's set_option; on
 * an error the backend is destroyed (*out NULL) and the message names the spec. */
static qc_status builtin_options(const qc_runtime_spec *rs, qc_backend *be, qc_backend **out,
                                 qc_err *err) {
    char what[sizeof rs->name + 16];
    snprintf(what, sizeof what, "--backend %s", rs->name);
    qc_kv kv;
    char *k, *v;
    qc_status s = qc_kv_init(&kv, rs->options, what, err);
    while (!s && !(s = qc_kv_pair(&kv, &k, &v, err)) && k) {
        qc_err e;
        qc_err_clear(&e);
        if (qc_backend_set_option(be, k, v, &e) != QC_OK)
            s = qc_errf(err, QC_ERR_ARG, "%s: %s", what, e.msg);
    }
    if (s) {
        qc_backend_destroy(be);
        *out = NULL;
    }
    return s;
}

qc_status qc_registry_create(const qc_runtime_spec *rs, const char *model_dir, const qc_model *m,
                             const qc_backend_opts *o, qc_backend **out, qc_err *err) {
    *out = NULL;
    if (rs->kind == QC_RT_HTTP)
        return qc_errf(err, QC_ERR_ARG, "%s: a server is checked by `check` (top-k log-probabilities)"
                       " and timed by `bench`; it is not a runtime this command can drive call by "
                       "call", rs->name);
    if (rs->kind == QC_RT_BUILTIN) {
        const builtin_entry *b = builtin_find(rs->target);
        if (!b) return qc_errf(err, QC_ERR_ARG, "unknown built-in backend '%s'", rs->target);
        qc_status s = b->create(m, o, out, err);
        if (s || !rs->options[0]) return s;
        return builtin_options(rs, *out, out, err);
    }
    qc_plugin_info info;
    memset(&info, 0, sizeof info);
    void *handle = NULL;
    const qc_runtime_plugin *api = NULL;
    qc_remote_hooks hooks = {0};
    if (rs->kind == QC_RT_PLUGIN) {
        void *dl = NULL;
        qc_status s = qc_plugin_load(rs->target, &api, &dl, err);
        if (s) return s;
        /* the library stays loaded for the life of the process (handles may outlive us) */
        if (api->open(model_dir, rs->options, &info, &handle) != QC_PLUGIN_OK) {
            const char *le = api->last_error(handle);
            qc_errf(err, QC_ERR_RUNTIME, "%s: open(%s) failed: %s", rs->name, model_dir,
                    le && le[0] ? le : "(no error text)");
            if (handle) api->close(handle);
            return QC_ERR_RUNTIME;
        }
    } else {
        qc_status s = qc_exec_open(rs->target, rs->timeout_s, model_dir, rs->options, &info,
                                   &handle, err);
        if (s) return s;
        api = qc_exec_api();
        hooks.want_hidden = qc_exec_want_hidden;
        hooks.want_router = qc_exec_want_router;
        hooks.set_dims = exec_set_dims;
    }
    return qc_remote_backend_create(rs->name, api, handle, &info, &hooks, m, o, out, err);
}
