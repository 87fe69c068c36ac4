/* qc_exec.h — the host side of the subprocess adapter protocol (docs/adapter-protocol.md): a
 * child process started from a command line, driven over its stdin/stdout, offered to the rest
 * of qwen-conform as a provider of the runtime plugin ABI vtable (qc/qc_runtime_plugin.h).
 *
 *   qc_plugin_info info; void *h; qc_err e;
 *   if (qc_exec_open("python3 my_adapter.py", 60, model_dir, "", &info, &h, &e)) -> e.msg
 *   qc_exec_set_dims(h, &dims);              // from the model's config.json, right after open
 *   const qc_runtime_plugin *api = qc_exec_api();
 *   api->reset(h); api->forward(h, toks, n, 0, 1, logits); ... api->close(h);
 *
 * Every failure of the child (crash, exit, timeout, protocol violation, EOF / EPIPE) makes the
 * call return QC_PLUGIN_ERROR with last_error(h) =
 *   "exec adapter '<cmd>': <what>, in <op> (last stderr: <line> | <line> ...)"
 * kills the child (SIGKILL to its process group, reaped) and leaves the handle "dead": the next
 * reset() starts a fresh child (hello, open with the same model_dir / options, the set_option
 * values set so far, then reset); any other call on a dead handle fails with "adapter is not
 * running (it failed earlier: ...)". An error response from a live child fails only that call.
 * Never blocks longer than the timeout per request. Not thread-safe per handle (as the ABI).
 * SIGPIPE never kills the host: it is blocked around every write and a pending one consumed.
 */
#ifndef QC_EXEC_H
#define QC_EXEC_H

#include "qc/qc_runtime_plugin.h"
#include "qc/qc_status.h"

#define QC_EXEC_MAX_LAYERS 256          /* = QC_MAX_LAYERS (qc/qc_config.h) */
#define QC_EXEC_DEFAULT_TIMEOUT_S 60.0  /* used when timeout_s <= 0 or not finite */

/* The model dims the host expects the child's tensors to have (from config.json). */
typedef struct {
    int n_layers;                         /* L */
    int vocab;                            /* V: logits [n, V] */
    int hidden;                           /* H: hidden [L+1, n, H] */
    int layer_full[QC_EXEC_MAX_LAYERS];   /* [n_layers]: 1 full attention, 0 Gated DeltaNet */
    int n_kv_heads, head_dim;             /* k_cache / v_cache [n_kv_heads, n_pos, head_dim] */
    int conv_dim, conv_kernel;            /* conv_state [conv_dim, conv_kernel] */
    int n_v_heads, k_dim, v_dim;          /* recurrent_state [n_v_heads, k_dim, v_dim] (per head) */
    int n_experts_per_tok;                /* k of a MoE model: router_ids / router_weights
                                             [n_layers, n, k]; 0 dense (no router) */
} qc_exec_dims;

/* Start CMD via /bin/sh -c, read its hello, send open(model_dir, options), fill *info.
 * Startup failures (cannot start, exits or times out before hello, wrong protocol/version,
 * open answered with an error, malformed hello/open answer) -> QC_ERR_ARG with a message
 * naming the command and the child's last stderr lines; nothing left running.
 * On QC_OK the caller owns *handle (free with qc_exec_api()->close); options NULL = "". */
/* (an open answered with an error is QC_ERR_RUNTIME: the runtime cannot load that model) */
qc_status qc_exec_open(const char *cmd, double timeout_s, const char *model_dir,
                       const char *options, qc_plugin_info *info, void **handle, qc_err *err);

/* The ABI vtable whose functions operate on a handle from qc_exec_open (its `open` is NULL;
 * abi_version/struct_size set; caps-dependent optional entries are non-NULL). Static; never
 * NULL. An optional entry whose capability the child did not announce returns
 * QC_PLUGIN_UNSUPPORTED without asking the child. */
const qc_runtime_plugin *qc_exec_api(void);

/* on != 0: every later forward asks for hidden states (when the child announced "hidden"), so
 * get_hidden can serve the last forward's [L+1, n, H] tensor, which the handle keeps. */
void qc_exec_want_hidden(void *handle, int on);
/* on != 0: every later forward asks for the router choices (when the child announced "router"
 * and the dims say MoE), so get_router can serve the last forward's [L, n, k] ids / weights. */
void qc_exec_want_router(void *handle, int on);

/* Copy *d into the handle (call right after open): the shapes every state tensor is validated
 * against, and V / H / L for logits and hidden (before this call the child's info is used).
 * get_state fails until it has been called. */
void qc_exec_set_dims(void *handle, const qc_exec_dims *d);

#endif /* QC_EXEC_H */
