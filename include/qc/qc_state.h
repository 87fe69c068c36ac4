/* qc_state.h — the mutable state of one sequence, in the canonical layout (batch 1, fp32).
 *
 * Ownership: qc_state_create allocates everything zeroed (calloc); qc_state_destroy frees it.
 * qc_state_reset assigns exact zeros (never multiplies: 0 * NaN is NaN). Unused cache slots
 * stay zero. Both backends read and write these buffers directly, so the harness can compare
 * them against goldens.
 */
#ifndef QC_STATE_H
#define QC_STATE_H

#include <stddef.h>

#include "qc/qc_config.h"
#include "qc/qc_status.h"

typedef struct {
    int n_layers;            /* L */
    int max_context_len;     /* cache capacity in positions */
    int n_kv_heads, head_dim;                 /* full attention cache geometry */
    int conv_dim, conv_kernel;                /* C, K */
    int n_v_heads, k_dim, v_dim;              /* nv, dk, dv */
    float **k_cache;         /* [L] -> [n_kv_heads, max_context_len, head_dim] (NULL on linear
                                layers); keys after q/k-norm and RoPE */
    float **v_cache;         /* [L] -> [n_kv_heads, max_context_len, head_dim] raw values */
    float **conv_state;      /* [L] -> [C, K] (NULL on full layers): the last K pre-activation
                                in_proj_qkv columns, oldest first */
    float **recurrent_state; /* [L] -> [nv, dk, dv] the DeltaNet state S */
    int pos;                 /* number of positions consumed (next position to write) */
} qc_state;

/* Bytes qc_state_create would allocate (for memory planning). */
size_t qc_state_bytes(const qc_config *cfg, int max_context_len);

qc_status qc_state_create(const qc_config *cfg, int max_context_len, qc_state **out,
                          qc_err *err);
void qc_state_destroy(qc_state *st);

/* Exact zeros everywhere, pos = 0. */
void qc_state_reset(qc_state *st);

/* Fill every buffer with v (e.g. NAN) — a test helper that simulates garbage. pos untouched. */
void qc_state_fill(qc_state *st, float v);

/* Copy all buffers and pos from src to dst (same geometry; programmer error otherwise). */
void qc_state_copy(qc_state *dst, const qc_state *src);

/* Snapshot: a new state with src's geometry and an exact copy of its buffers and pos (a deep
 * copy: later changes to either never reach the other). *out owned by the caller
 * (qc_state_destroy); QC_ERR_OOM leaves *out NULL. */
qc_status qc_state_clone(const qc_state *src, qc_state **out, qc_err *err);

/* Layer l of dst := layer l of src: the caches' positions 0..n_pos-1 of every kv head (the
 * rest of dst's slots untouched; n_pos <= both capacities), the conv and recurrent states whole.
 * Same layer geometry (programmer error otherwise). */
void qc_state_copy_layer(qc_state *dst, const qc_state *src, int l, int n_pos);

/* Layer l := exact zeros (pos untouched). */
void qc_state_reset_layer(qc_state *st, int l);

/* 1 when a and b have the same geometry, pos and bit-identical buffers (cache slots beyond pos
 * included), else 0. */
int qc_state_equal(const qc_state *a, const qc_state *b);

#endif /* QC_STATE_H */
