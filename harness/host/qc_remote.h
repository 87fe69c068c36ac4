/* qc_remote.h — a runtime under test (anything behind the plugin ABI vtable: a loaded plugin, or
 * the exec adapter client) seen as a qc_backend, so the whole battery runs on it unchanged.
 *
 * The runtime keeps its own state; the qc_state the runner passes is a mirror that
 * qc_backend_sync_state fills from get_state. Every failure of the runtime is QC_ERR_RUNTIME
 * (a conformance FAIL of that runtime), with its last_error text.
 */
#ifndef QC_REMOTE_H
#define QC_REMOTE_H

#include "qc/qc_backend.h"
#include "qc/qc_runtime_plugin.h"

/* Extra calls a provider may offer (all optional; NULL = none). */
typedef struct {
    void (*want_hidden)(void *handle, int on); /* ask for hidden states with each forward */
    void (*want_router)(void *handle, int on); /* ask for router choices with each forward */
    void (*set_dims)(void *handle, const qc_config *cfg); /* tell the provider the model dims */
} qc_remote_hooks;

/* Wrap an opened runtime (api + handle + the info its open returned). Takes the handle over
 * (closed by the backend's destroy, or here on error). name: shown in reports (copied).
 * Checks the runtime's dims against m's config (QC_ERR_RUNTIME on a mismatch), applies
 * o->n_threads through set_option when the runtime announces threads. */
qc_status qc_remote_backend_create(const char *name, const qc_runtime_plugin *api, void *handle,
                                   const qc_plugin_info *info, const qc_remote_hooks *hooks,
                                   const qc_model *m, const qc_backend_opts *o, qc_backend **out,
                                   qc_err *err);

/* Who decides the multi-token DeltaNet settings dn_kernel / chunk_size of a runtime that
 * announces them (docs/adapter-protocol.md, "dn_kernel and chunk_size"). */
typedef enum {
    QC_REMOTE_KOPTS_PUSH = 0, /* the default (record, bench): every forward first sends the
                                 call's dn_kernel / chunk_size (qc_call) that differ from the values
                                 last sent (all of them again after a reset) */
    QC_REMOTE_KOPTS_OWN,      /* check: nothing is sent until a kernel check has sent a key
                                 (the runtime runs on its own defaults); a key sent once is
                                 then kept at the host's value (chunk_size back to 64 after a
                                 chunk_sweep), so every later run computes as the built-ins */
    QC_REMOTE_KOPTS_ASK       /* check, inside chunked_eq_recurrent / chunk_sweep: every forward
                                 sends the be->opts values that differ from the last sent */
} qc_remote_kopts;
/* Set be's mode; returns 1, or 0 (nothing done) when be is not a remote backend. */
int qc_remote_kernel_opts(qc_backend *be, qc_remote_kopts mode);

/* Capability names ("hidden", "state_read", ...) <-> QC_CAP_* bits: the one table, shared by
 * --require, the exec client (what a child announces) and adapter-serve (what it announces). */
const char *qc_cap_name(unsigned bit);  /* "?" for no capability */
unsigned qc_cap_bit(const char *name);  /* a protocol capability's bit; 0: unknown name */
/* Parse "hidden,state_read" into bits; unknown names -> QC_ERR_ARG naming them and the list.
 * The pseudo-capability "dynamic" (more than one token per call) is QC_REMOTE_CAP_DYNAMIC. */
#define QC_REMOTE_CAP_DYNAMIC (1u << 16)
qc_status qc_cap_parse(const char *list, unsigned *bits, qc_err *err);
/* "hidden, state_read, ..." of bits into buf. */
void qc_cap_list(unsigned bits, char *buf, size_t n);

#endif /* QC_REMOTE_H */
