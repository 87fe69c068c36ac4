/* qc_llamacpp_lifecycle.c — the state lifecycle entries of the llama.cpp plugin (part of it:
 * see qc_llamacpp_internal.h): snapshot / restore (llama_state_seq_{get,set}_data_ext),
 * select_sequence (llama.cpp seq ids), trim (llama_memory_seq_rm + n_rs_seq snapshots) and
 * fill_state (the sequence's state blob overwritten and set back).
 *
 * Every llama.cpp call that fails, or returns a size other than the one asked for, makes the
 * entry return QC_PLUGIN_ERROR with the function's name and its return value (the harness
 * reports it as a FAIL of the check that called it).
 */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wformat-truncation" /* messages are cut to ERR_MAX */
#include "qc_llamacpp_internal.h"

/* The plugin's own per-call captures go stale when the sequence changes under them. */
static void forget_captures(qc_llama *h) {
    invalidate_state(h);
    h->cap_tokens = 0; /* hidden states belong to the last forward */
    h->hid_ok = 0;
    memset(h->hid_rows, 0, sizeof h->hid_rows);
}

/* ===================================================================================== */
/* snapshots                                                                             */
/* ===================================================================================== */

/* Which llama_state_seq flags the snapshots use. The default is the FULL state (flags 0: the
 * attention KV cells and the recurrent cell): a snapshot must restore "whatever the sequence
 * held before" (ABI), and only the full blob carries the KV cells. snap=partial measures
 * LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY (what llama-server's context checkpoints use on hybrid
 * models): the blob holds only the recurrent cell (conv + SSM), and restore drops the KV cells
 * past the snapshot with llama_memory_seq_rm -- right only while the sequence still holds the
 * snapshot's KV prefix. Measured on tiny-f32-tied-flat (README, expectations.json variant
 * snap=partial): snapshot_restore, rollback, prefix_reuse and snapshot_chunk_boundary pass;
 * restore_after_garbage and snapshot_copy fail (the KV cells are not in the blob). */
static llama_state_seq_flags snap_flags(const qc_llama *h) {
    return h->snap_partial ? LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY : LLAMA_STATE_SEQ_FLAGS_NONE;
}

static int slot_ok(qc_llama *h, int32_t slot, const char *what) {
    if (slot < 0 || slot >= QC_PLUGIN_MIN_SNAPSHOTS)
        return set_err(h, QC_PLUGIN_ERROR, "%s: slot %d outside 0..%d", what, slot, QC_PLUGIN_MIN_SNAPSHOTS - 1);
    return QC_PLUGIN_OK;
}

int p_snapshot(void *handle, int32_t slot) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    if (!h->want_state) return set_err(h, QC_PLUGIN_UNSUPPORTED, "snapshot: the state is off (state=0)");
    if (slot_ok(h, slot, "snapshot")) return QC_PLUGIN_ERROR;
    if (h->pos < 0) return set_err(h, QC_PLUGIN_ERROR, "snapshot: the last forward failed");
    const llama_state_seq_flags fl = snap_flags(h);
    ring_clear();
    size_t n = llama_state_seq_get_size_ext(h->ctx, h->seq, fl);
    if (n < 8) {
        char what[160];
        snprintf(what, sizeof what, "snapshot: llama_state_seq_get_size_ext(seq %d, flags %u) returned %zu",
                 h->seq, (unsigned)fl, n);
        return set_err_log(h, QC_PLUGIN_ERROR, what);
    }
    size_t cw = conv_win_floats(h);
    uint8_t *b = malloc(n);
    float *w = malloc((cw ? cw : 1) * sizeof(float));
    if (!b || !w) {
        free(b);
        free(w);
        return set_err(h, QC_PLUGIN_ERROR, "snapshot: out of memory (%zu bytes)", n);
    }
    size_t got = llama_state_seq_get_data_ext(h->ctx, b, n, h->seq, fl);
    if (got != n) {
        free(b);
        free(w);
        char what[200];
        snprintf(what, sizeof what, "snapshot: llama_state_seq_get_data_ext(seq %d, flags %u) returned %zu, "
                 "llama_state_seq_get_size_ext %zu", h->seq, (unsigned)fl, got, n);
        return set_err_log(h, QC_PLUGIN_ERROR, what);
    }
    memcpy(w, h->conv_win, cw * sizeof(float));
    free(h->snap[slot].blob);
    free(h->snap[slot].conv_win);
    h->snap[slot].blob = b;
    h->snap[slot].n = n;
    h->snap[slot].conv_win = w;
    h->snap[slot].pos = h->pos;
    memcpy(h->snap[slot].conv_win_ok, h->conv_win_ok, sizeof h->conv_win_ok);
    h->snap[slot].valid = 1;
    return QC_PLUGIN_OK;
}

int p_restore(void *handle, int32_t slot) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    if (!h->want_state) return set_err(h, QC_PLUGIN_UNSUPPORTED, "restore: the state is off (state=0)");
    if (slot_ok(h, slot, "restore")) return QC_PLUGIN_ERROR;
    if (!h->snap[slot].valid) return set_err(h, QC_PLUGIN_ERROR, "restore: slot %d was never written", slot);
    const llama_state_seq_flags fl = snap_flags(h);
    llama_memory_t mem = llama_get_memory(h->ctx);
    ring_clear();
    forget_captures(h);
    char what[240];
    /* full: clear the sequence first so nothing of it (garbage included) survives; set_data
     * then puts the snapshot's cells back. partial: set_data_ext replaces the recurrent cell
     * (it clears the sequence's recurrent part itself), then the KV cells past the snapshot go */
    if (!h->snap_partial) llama_memory_seq_rm(mem, h->seq, -1, -1);
    size_t got = llama_state_seq_set_data_ext(h->ctx, h->snap[slot].blob, h->snap[slot].n, h->seq, fl);
    if (got != h->snap[slot].n) {
        h->pos = -1;
        snprintf(what, sizeof what, "restore: llama_state_seq_set_data_ext(seq %d, %zu bytes, flags %u) "
                 "returned %zu", h->seq, h->snap[slot].n, (unsigned)fl, got);
        return set_err_log(h, QC_PLUGIN_ERROR, what);
    }
    if (h->snap_partial && !llama_memory_seq_rm(mem, h->seq, h->snap[slot].pos, -1)) {
        h->pos = -1;
        snprintf(what, sizeof what, "restore: llama_memory_seq_rm(seq %d, p0 %d, p1 -1) returned false after "
                 "the partial-only restore", h->seq, h->snap[slot].pos);
        return set_err_log(h, QC_PLUGIN_ERROR, what);
    }
    h->pos = h->snap[slot].pos;
    memcpy(h->conv_win, h->snap[slot].conv_win, conv_win_floats(h) * sizeof(float));
    memcpy(h->conv_win_ok, h->snap[slot].conv_win_ok, sizeof h->conv_win_ok);
    return QC_PLUGIN_OK;
}

/* ===================================================================================== */
/* sequences                                                                             */
/* ===================================================================================== */

int p_select_sequence(void *handle, int32_t seq) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    if (seq < 0 || seq >= h->n_seqs)
        return set_err(h, QC_PLUGIN_UNSUPPORTED, "select_sequence: %d outside 0..%d (option seqs=%d)", seq,
                       h->n_seqs - 1, h->n_seqs);
    if (seq == h->seq) return QC_PLUGIN_OK;
    size_t cw = conv_win_floats(h) * sizeof(float);
    /* park the current sequence's plugin-side fields, take the other's */
    h->seqs[h->seq].pos = h->pos;
    memcpy(h->seqs[h->seq].conv_win, h->conv_win, cw);
    memcpy(h->seqs[h->seq].conv_win_ok, h->conv_win_ok, sizeof h->conv_win_ok);
    h->seq = seq;
    h->pos = h->seqs[seq].pos;
    memcpy(h->conv_win, h->seqs[seq].conv_win, cw);
    memcpy(h->conv_win_ok, h->seqs[seq].conv_win_ok, sizeof h->conv_win_ok);
    forget_captures(h);
    return QC_PLUGIN_OK;
}

/* ===================================================================================== */
/* trim                                                                                  */
/* ===================================================================================== */

/* trim(n_pos): llama_memory_seq_rm(seq, n_pos, -1). llama.cpp's hybrid memory asks the
 * recurrent part first: it can go back j = pos - n_pos positions only from the n_rs_seq
 * per-token snapshots the last llama_decode wrote (j <= rs_seq, once per decode), else it
 * returns false; then the attention part drops the KV cells. The plugin's conv windows keep
 * W = K + rs_seq columns, so the window of position n_pos - 1 is still known. */
int p_trim(void *handle, int32_t n_pos) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    if (h->rs_seq < 1)
        return set_err(h, QC_PLUGIN_UNSUPPORTED, "trim: needs rs_seq=N >= 1 (llama.cpp rolls the recurrent "
                       "state back only from its n_rs_seq snapshots)");
    if (h->pos < 0) return set_err(h, QC_PLUGIN_ERROR, "trim: the last forward failed");
    if (n_pos < 0 || n_pos > h->pos)
        return set_err(h, QC_PLUGIN_ERROR, "trim: n_pos %d outside 0..%d (the positions consumed)", n_pos, h->pos);
    if (n_pos == h->pos) return QC_PLUGIN_OK;
    const int j = h->pos - n_pos;
    ring_clear();
    forget_captures(h);
    if (!llama_memory_seq_rm(llama_get_memory(h->ctx), h->seq, n_pos, -1)) {
        char what[240];
        snprintf(what, sizeof what, "trim(%d): llama_memory_seq_rm(seq %d, p0 %d, p1 -1) returned false "
                 "(a rollback of %d positions from %d; rs_seq=%d)", n_pos, h->seq, n_pos, j, h->pos, h->rs_seq);
        return set_err_log(h, QC_PLUGIN_ERROR, what);
    }
    h->pos = n_pos;
    const int W = h->W;
    for (int il = 0; il < h->L; il++) {
        if (!h->is_recr[il]) continue;
        if (n_pos == 0 || j > W - h->K) { /* fresh, or a window the kept columns do not reach */
            memset(conv_win_of(h, il), 0, (size_t)h->C * W * sizeof(float));
            h->conv_win_ok[il] = n_pos == 0;
            continue;
        }
        for (int c = 0; c < h->C; c++) {
            float *row = conv_win_of(h, il) + (size_t)c * W;
            memmove(row + j, row, (size_t)(W - j) * sizeof(float));
            memset(row, 0, (size_t)j * sizeof(float));
        }
    }
    return QC_PLUGIN_OK;
}

/* ===================================================================================== */
/* fill_state                                                                            */
/* ===================================================================================== */

static void fill_span(const uint8_t *p, int32_t type, uint64_t bytes, float v) {
    uint8_t *d = (uint8_t *)p; /* a span of h->blob, which the plugin owns */
    if (type == GGML_TYPE_F32) {
        for (uint64_t i = 0; i + 4 <= bytes; i += 4) memcpy(d + i, &v, 4);
    } else if (type == GGML_TYPE_F16) {
        ggml_fp16_t x = ggml_fp32_to_fp16(v);
        for (uint64_t i = 0; i + 2 <= bytes; i += 2) memcpy(d + i, &x, 2);
    } else if (type == GGML_TYPE_BF16) {
        ggml_bf16_t x = ggml_fp32_to_bf16(v);
        for (uint64_t i = 0; i + 2 <= bytes; i += 2) memcpy(d + i, &x, 2);
    }
}

/* fill_state(v): every element the sequence holds in llama.cpp -- its KV cells (K and V of
 * every full-attention layer), its recurrent cell (conv and SSM records of every linear
 * layer) -- := v, by writing v into llama_state_seq_get_data's blob and setting it back with
 * llama_state_seq_set_data; the plugin's conv windows (the canonical column 0) := v too.
 * Cells the sequence does not hold are not reachable through llama.cpp's public API. */
int p_fill_state(void *handle, float value) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    if (!h->want_state || !h->want_fill)
        return set_err(h, QC_PLUGIN_UNSUPPORTED, "fill_state: off (state=0 or fill=0)");
    if (h->pos < 0) return set_err(h, QC_PLUGIN_ERROR, "fill_state: the last forward failed");
    invalidate_state(h);
    int rc = load_state(h);
    if (rc) return rc;
    /* diagnosis (README): QC_LLAMACPP_FILL_ONLY=kv|rs fills only the KV cells / the recurrent
     * cell, to tell which part of llama.cpp's memory a garbage finding comes from */
    const char *only = getenv("QC_LLAMACPP_FILL_ONLY");
    for (int l = 0; l < h->kv_n_layer && !(only && !strcmp(only, "rs")); l++) {
        fill_span(h->kv_k[l], h->kv_ktype[l], h->kv_krow[l] * (uint64_t)h->kv_cells, value);
        uint64_t vb = h->kv_vtrans ? (uint64_t)h->kv_vel[l] * h->kv_vgqa[l] * h->kv_cells
                                   : h->kv_vrow[l] * (uint64_t)h->kv_cells;
        fill_span(h->kv_v[l], h->kv_vtype[l], vb, value);
    }
    for (int l = 0; l < h->rs_n_layer && !(only && !strcmp(only, "kv")); l++) {
        fill_span(h->rs_r[l], h->rs_rtype[l], h->rs_rrow[l] * (uint64_t)h->rs_cells, value);
        fill_span(h->rs_s[l], h->rs_stype[l], h->rs_srow[l] * (uint64_t)h->rs_cells, value);
    }
    ring_clear();
    llama_memory_seq_rm(llama_get_memory(h->ctx), h->seq, -1, -1);
    size_t got = llama_state_seq_set_data(h->ctx, h->blob, h->blob_n, h->seq);
    size_t n = h->blob_n;
    forget_captures(h);
    if (got != n) {
        h->pos = -1;
        char what[200];
        snprintf(what, sizeof what, "fill_state: llama_state_seq_set_data(seq %d, %zu bytes) returned %zu",
                 h->seq, n, got);
        return set_err_log(h, QC_PLUGIN_ERROR, what);
    }
    size_t cw = conv_win_floats(h);
    for (size_t i = 0; i < cw; i++) h->conv_win[i] = value;
    for (int il = 0; il < h->L; il++) h->conv_win_ok[il] = h->is_recr[il];
    return QC_PLUGIN_OK;
}

void free_snapshots(qc_llama *h) {
    for (int s = 0; s < QC_LLAMACPP_MAX_SEQS; s++) {
        free(h->seqs[s].conv_win);
        h->seqs[s].conv_win = NULL;
    }
    for (int s = 0; s < QC_PLUGIN_MIN_SNAPSHOTS; s++) {
        free(h->snap[s].blob);
        free(h->snap[s].conv_win);
        h->snap[s].blob = NULL;
        h->snap[s].conv_win = NULL;
        h->snap[s].valid = 0;
    }
}
