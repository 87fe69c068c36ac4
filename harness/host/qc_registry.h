/* qc_registry.h — the backend registry: every name `--backend` accepts, and how each is made.
 *
 *   reference, optimized        the built-in backends (table in qc_registry.c)
 *   plugin:PATH.so[,k=v...]     a shared library exporting the plugin ABI (qc_runtime_plugin.h),
 *                               loaded in-process; the text after the first ',' is its options
 *   exec:CMD ARGS               a child process speaking the adapter protocol
 *                               (docs/adapter-protocol.md), started with /bin/sh -c
 *   llamacpp[,k=v...]           the shipped llama.cpp plugin ($QC_LLAMACPP_PLUGIN, else the
 *                               cache that ci/llamacpp builds), run out of process by default
 *                               (a llama.cpp abort must not take the harness down)
 *   isolate:SPEC                run a plugin SPEC in a child `qwen-conform adapter-serve`
 *   http:URL[,k=v...]           a running server (vLLM, SGLang, llama-server, OpenAI-compatible)
 *                               checked through top-k log-probabilities (qc_server.h); not a
 *                               qc_backend: the check engine drives it (check/qc_check_http.c)
 *
 * Parsing never loads anything (usage errors first); creation loads and opens.
 */
#ifndef QC_REGISTRY_H
#define QC_REGISTRY_H

#include "qc/qc_backend.h"
#include "qc/qc_memplan.h"
#include "qc/qc_runtime_plugin.h"

typedef enum { QC_RT_BUILTIN = 0, QC_RT_PLUGIN = 1, QC_RT_EXEC = 2, QC_RT_HTTP = 3 } qc_rt_kind;

typedef struct {
    qc_rt_kind kind;
    char name[512];      /* in reports: "reference", "plugin:libx.so", "exec:python3 a.py",
                            "llamacpp" */
    char target[2048];   /* builtin name, plugin path or exec command */
    char options[1024];  /* plugin options ("" = none) */
    double timeout_s;    /* exec: per-request timeout */
    char plugin[2048];   /* the plugin library a plugin:, isolate: or llamacpp spec names ("" for
                            built-ins and exec:), checked by qc_registry_preflight */
} qc_runtime_spec;

/* Before any work: a plugin the spec names must load and pass the ABI checks (QC_ERR_ARG
 * naming the file otherwise). Built-ins and exec commands pass (a command is only known to
 * work once it has started). */
qc_status qc_registry_preflight(const qc_runtime_spec *rs, qc_err *err);

/* Parse a --backend value. QC_ERR_ARG naming the value and the accepted forms. */
qc_status qc_registry_parse(const char *spec, double timeout_s, qc_runtime_spec *out,
                            qc_err *err);
/* 1 for the built-in names. */
int qc_registry_is_builtin(const char *name);
/* Create (and, for plugins / exec, open the model directory). model_dir: the checkpoint the
 * runtime loads itself (m is the harness's own load of it, for the dims). Errors: QC_ERR_ARG
 * (cannot load the plugin / start the command: a usage problem, exit 2), QC_ERR_RUNTIME (the
 * runtime started but failed to open the model: a FAIL of that runtime). */
qc_status qc_registry_create(const qc_runtime_spec *rs, const char *model_dir, const qc_model *m,
                             const qc_backend_opts *o, qc_backend **out, qc_err *err);

/* ---- the built-in backends, enumerated (the table in qc_registry.c) ---- */

/* Roles of a built-in backend (qc_builtin_info.roles). */
enum {
    QC_BUILTIN_REFERENCE = 1, /* the comparison of the others: every other built-in is checked
                                 against it (its vs_reference row) and a runtime under test's
                                 decode-only failures are localised against its hidden states */
    QC_BUILTIN_NAMES_ISA = 2  /* its describe() names the machine's ISA in the reports */
};

/* One built-in backend as the check engine sees it. Whether it runs at the requested thread
 * count and is checked against a thread twin (threads_bitwise) follows from its capabilities:
 * QC_BE_CAP_THREADS. */
typedef struct {
    const char *name;         /* its --backend value and its name in reports */
    unsigned caps;            /* QC_BE_CAP_* it has, without building it */
    unsigned roles;           /* QC_BUILTIN_* */
    const char *vs_reference; /* the check comparing it with the reference backend, same mode
                                 ("opt_eq_ref"); NULL for none (the reference itself) */
} qc_builtin_info;

/* How many built-in backends there are; entry i (0 <= i < n, in table order; NULL outside). */
int qc_registry_n_builtins(void);
const qc_builtin_info *qc_registry_builtin(int i);
/* The index of a built-in name, -1 for any other (NULL too). */
int qc_registry_builtin_index(const char *name);
/* The built-in with the QC_BUILTIN_REFERENCE role (NULL: none). */
const qc_builtin_info *qc_registry_reference(void);

/* The capabilities a built-in backend has (QC_BE_CAP_*), without building it. */
unsigned qc_registry_builtin_caps(const char *name);

/* The memory a built-in backend needs, for the memory plan: replaces rq's backend list with
 * what `name` ("reference", "optimized") or "all" (every built-in at once) reports through its
 * table entry's scratch_bytes (qc_reference_scratch_bytes / qc_optimized_scratch_bytes: the
 * counting pass of the backend's own layout code) for the options rq->max_tokens, n_threads
 * and chunk_size — so set those first. QC_ERR_ARG "memory plan: unknown backend 'x'";
 * QC_ERR_RANGE when a backend's size overflows 64 bits. */
qc_status qc_registry_memplan(const char *name, qc_memplan_req *rq, qc_err *err);

/* Load a plugin library: dlopen, the entry symbol, ABI version / size / mandatory entries.
 * *dl receives the library handle (dlclose it after closing every runtime handle). */
qc_status qc_plugin_load(const char *path, const qc_runtime_plugin **api, void **dl,
                         qc_err *err);

#endif /* QC_REGISTRY_H */
