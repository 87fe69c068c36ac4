/* qc_golden_case.c — one case of a golden file (qc_golden_io.c opens the file): its metadata
 * (attributes, counts, every dataset's type and shape, bounded positions) without reading a
 * tensor, its tensors read lazily and checked against that metadata again, its memory size. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "qc_golden_internal.h"

/* ===================================================================================== */
/* reading: a case's tensors and state                                                   */
/* ===================================================================================== */

/* Token ids in [0, V). */
static qc_status check_ids(const gio_ctx *c, const char *path, const int32_t *ids, int n, int V) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return qc_errf(c->err, QC_ERR_FORMAT,
                           "%s: %s: token id %d at [%d] outside the vocabulary [0, %d)", c->file,
                           path, (int)ids[i], i, V);
    return QC_OK;
}

static qc_status missing_dataset(const gio_ctx *c, const char *locpath, const char *rel) {
    return qc_errf(c->err, QC_ERR_MISSING, "%s: %s/%s: missing dataset", c->file, locpath, rel);

}

/* Probe (gs == NULL: no data read) or read (into gs) the datasets of <parentpath>/state, the
 * group `parent` being <parentpath> ("/cases/x/prefill" or "/cases/x/decode"), caches of
 * n_pos positions. The state group is opened once and the datasets looked up from it. */
static qc_status state_datasets(const gio_ctx *c, const qc_config *cfg, hid_t parent,
                                const char *parentpath, int n_pos, qc_golden_state *gs) {
    qc_status st = QC_OK;
    char spath[256];
    snprintf(spath, sizeof spath, "%s/state", parentpath);
    if (gs) {
        memset(gs, 0, sizeof *gs);
        if (gio_state_alloc_ptrs(cfg, gs))
            return qc_errf(c->err, QC_ERR_OOM, "%s: %s: out of memory", c->file, spath);
        gs->present = 1;
        gs->n_pos = n_pos;
    }
    hid_t sg = gio_group_if(parent, "state");
    for (int l = 0; !st && l < cfg->n_layers; l++) {
        const int full = cfg->layer_types[l] == QC_LAYER_FULL;
        long long kv[3] = {cfg->n_kv_heads, n_pos, cfg->head_dim};
        long long cv[2] = {qc_cfg_conv_dim(cfg), cfg->conv_kernel};
        long long rs[3] = {cfg->lin_n_v_heads, cfg->lin_k_dim, cfg->lin_v_dim};
        const char *names[2] = {full ? "k_cache" : "conv_state",
                                full ? "v_cache" : "recurrent_state"};
        const long long *want[2] = {full ? kv : cv, full ? kv : rs};
        const int ranks[2] = {full ? 3 : 2, 3};
        float **dst[2] = {NULL, NULL};
        if (gs) {
            dst[0] = full ? &gs->k_cache[l] : &gs->conv_state[l];
            dst[1] = full ? &gs->v_cache[l] : &gs->recurrent_state[l];
        }
        for (int k = 0; !st && k < 2; k++) {
            char rel[64];
            hsize_t dims[3];
            snprintf(rel, sizeof rel, "layer_%02d/%s", l, names[k]);
            if (sg < 0)
                st = missing_dataset(c, spath, rel);
            else if (gs)
                st = gio_read_dataset(c, sg, spath, rel, 1, ranks[k], want[k], (void **)dst[k]);
            else
                st = gio_probe_dataset(c, sg, spath, rel, 1, ranks[k], want[k], dims, NULL);
        }
    }
    CLOSE_G(sg);
    return st;
}

/* ===================================================================================== */
/* reading: cases                                                                        */
/* ===================================================================================== */

/* A token dataset of n tokens that would take the case past the position limit: QC_ERR_SHAPE
 * naming the dataset, its shape and the most it may hold. */
static qc_status positions_error(const gio_ctx *c, const qc_config *cfg, const char *path,
                                 unsigned long long n, long long before, const char *before_what) {
    const int lim = qc_golden_max_positions(cfg);
    long long room = lim - before > 0 ? lim - before : 0;
    return qc_errf(c->err, QC_ERR_SHAPE,
                   "%s: %s: shape [%llu] != [<=%lld]: %s %lld + %llu = %llu positions, more than "
                   "%d (%s)", c->file, path, n, room, before_what, before, n,
                   (unsigned long long)before + n, lim, gio_positions_what(cfg));
}

/* The optional decode group of a case (g = /cases/<name>, dpath its decode path): the step
 * count bounded by the positions left after start_pos + prompt (lim), then every dataset's shape.
 * Fills gc->n_decode and m->has_decode*; QC_OK when there is no decode group. */
static qc_status case_meta_decode(const gio_ctx *c, const qc_config *cfg, hid_t g,
                                  const char *dpath, int lim, qc_golden_case *gc,
                                  qc_golden_case_meta *m) {
    if (!gio_link_exists(g, "decode")) return QC_OK;
    qc_status st = QC_OK;
    const long long V = cfg->vocab_size;
    const int P = gc->start_pos, T = gc->n_tokens;
    hid_t dg = H5I_INVALID_HID;
    hsize_t dims[3];
    long long any1[1] = {-1};
    char path[256];
    m->has_decode = 1;
    if ((dg = gio_group_if(g, "decode")) < 0) {
        st = missing_dataset(c, dpath, "tokens");
        goto done;
    }
    if ((st = gio_probe_dataset(c, dg, dpath, "tokens", 0, 1, any1, dims, NULL))) goto done;
    snprintf(path, sizeof path, "%s/tokens", dpath);
    if (dims[0] > (hsize_t)(lim - P - T)) {
        st = positions_error(c, cfg, path, (unsigned long long)dims[0], (long long)P + T,
                             "start_pos + prompt");
        goto done;
    }
    const int S = (int)dims[0];
    gc->n_decode = S;
    long long wd[2] = {S, V};
    if ((st = gio_probe_dataset(c, dg, dpath, "logits", 1, 2, wd, dims, NULL))) goto done;
    if (gio_link_exists(dg, "margins")) {
        long long wm[1] = {S};
        if ((st = gio_probe_dataset(c, dg, dpath, "margins", 1, 1, wm, dims, NULL))) goto done;
        m->has_decode_margins = 1;
    }
    if (gio_link_exists(dg, "state")) {
        if ((st = state_datasets(c, cfg, dg, dpath, P + T + S, NULL))) goto done;
        m->has_decode_state = 1;
    }
    st = gio_moe_meta(c, cfg, dg, dpath, S, &m->has_decode_router, &m->has_decode_moe_in);
done:
    CLOSE_G(dg);
    return st;
}

/* Metadata of one case (the group /cases/<name>): attributes, counts, which optional groups
 * exist, and every dataset's type and shape, without reading any tensor. */
qc_status gio_read_case_meta(const gio_ctx *c, const qc_config *cfg, hid_t cases_g,
                                const char *name, qc_golden_case *gc, qc_golden_case_meta *m) {
    qc_status st = QC_OK;
    hid_t g = H5I_INVALID_HID, pg = H5I_INVALID_HID;
    char casepath[160], ppath[200], dpath[200], path[256];
    const long long V = cfg->vocab_size, L = cfg->n_layers, H = cfg->hidden_size;
    const int lim = qc_golden_max_positions(cfg);
    memset(m, 0, sizeof *m);
    snprintf(casepath, sizeof casepath, "/cases/%s", name);
    if (strlen(name) >= sizeof gc->name || !gio_valid_case_name(name))
        return qc_errf(c->err, QC_ERR_FORMAT,
                       "%s: %s: invalid case name (want [A-Za-z0-9_-]+, at most %zu chars)",
                       c->file, casepath, sizeof gc->name - 1);
    snprintf(gc->name, sizeof gc->name, "%s", name);
    g = gio_group_if(cases_g, name);
    if (g < 0) return qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: not a group", c->file, casepath);
    snprintf(ppath, sizeof ppath, "%s/prefill", casepath);
    snprintf(dpath, sizeof dpath, "%s/decode", casepath);

    /* attributes */
    int64_t v = 0;
    int present = 0;
    if ((st = gio_attr_int(c, g, casepath, "start_pos", 1, &v, NULL))) goto done;
    if (v < 0 || v >= lim) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/start_pos: %lld is out of range [0, %d) "
                     "(%s)", c->file, casepath, (long long)v, lim, gio_positions_what(cfg));
        goto done;
    }
    gc->start_pos = (int)v;
    if ((st = gio_attr_int(c, g, casepath, "max_seq_len", 0, &v, &present))) goto done;
    if (present && (v < 1 || v > INT_MAX / 2)) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/max_seq_len: %lld is out of range", c->file,
                     casepath, (long long)v);
        goto done;
    }
    gc->max_seq_len = present ? (int)v : 0;
    if ((st = gio_attr_buf(c, g, casepath, "description", 0, gc->description,
                              sizeof gc->description)))
        goto done;

    /* history and prompt: the counts, bounded before anything else is looked at */
    const int P = gc->start_pos;
    hsize_t dims[3];
    if (P > 0) {
        long long w[1] = {P};
        if ((st = gio_probe_dataset(c, g, casepath, "history_tokens", 0, 1, w, dims, NULL))) goto done;
        gc->n_history = P;
    }
    long long any1[1] = {-1};
    if ((st = gio_probe_dataset(c, g, casepath, "tokens", 0, 1, any1, dims, NULL))) goto done;
    snprintf(path, sizeof path, "%s/tokens", casepath);
    if (dims[0] < 1) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s: empty prompt", c->file, path);
        goto done;
    }
    if (dims[0] > (hsize_t)(lim - P)) {
        st = positions_error(c, cfg, path, (unsigned long long)dims[0], P, "start_pos");
        goto done;
    }
    const int T = (int)dims[0];
    gc->n_tokens = T;

    /* prefill */
    long long wl[2] = {T, V};
    if ((pg = gio_group_if(g, "prefill")) < 0) {
        st = missing_dataset(c, ppath, "logits");
        goto done;
    }
    if ((st = gio_probe_dataset(c, pg, ppath, "logits", 1, 2, wl, dims, NULL))) goto done;
    if (gio_link_exists(pg, "hidden")) {
        long long wh[3] = {L + 1, T, H};
        if ((st = gio_probe_dataset(c, pg, ppath, "hidden", 1, 3, wh, dims, NULL))) goto done;
        m->has_hidden = 1;
    }
    if (gio_link_exists(pg, "state")) {
        if ((st = state_datasets(c, cfg, pg, ppath, P + T, NULL))) goto done;
        m->has_prefill_state = 1;
    }
    if ((st = gio_moe_meta(c, cfg, pg, ppath, T, &m->has_prefill_router, &m->has_prefill_moe_in)))
        goto done;

    /* decode */
    if ((st = case_meta_decode(c, cfg, g, dpath, lim, gc, m))) goto done;
    m->start_pos = gc->start_pos;
    m->n_tokens = gc->n_tokens;
    m->n_decode = gc->n_decode;
done:
    CLOSE_G(pg);
    CLOSE_G(g);
    return st;
}

/* Free a case's tensors, keeping its scalars (name, counts). */
void gio_case_free_tensors(const qc_config *cfg, qc_golden_case *c) {
    free(c->history);
    free(c->tokens);
    free(c->prefill_logits);
    free(c->prefill_hidden);
    qc_golden_state_free(cfg, &c->prefill_state);
    free(c->decode_tokens);
    free(c->decode_logits);
    free(c->decode_margins);
    qc_golden_state_free(cfg, &c->decode_state);
    gio_moe_free(c);
    free(c->prefill_tk_ids), free(c->prefill_tk_lps);
    free(c->decode_tk_ids), free(c->decode_tk_lps);
    c->prefill_tk_ids = c->decode_tk_ids = NULL;
    c->prefill_tk_lps = c->decode_tk_lps = NULL;
    c->tk_k = 0;
    c->history = c->tokens = c->decode_tokens = NULL;
    c->prefill_logits = c->prefill_hidden = c->decode_logits = c->decode_margins = NULL;
}

/* Read the tensors of case gc (metadata m) from the open file f; every dataset is checked
 * against the metadata again before it is allocated. On error nothing stays allocated. */
qc_status gio_load_case_from(const gio_ctx *c, const qc_config *cfg, hid_t f,
                                qc_golden_case *gc, const qc_golden_case_meta *m) {
    qc_status st = QC_OK;
    hid_t cg = H5I_INVALID_HID, g = H5I_INVALID_HID, pg = H5I_INVALID_HID,
          dg = H5I_INVALID_HID;
    char casepath[170], ppath[200], dpath[200], path[256];
    const long long V = cfg->vocab_size, L = cfg->n_layers, H = cfg->hidden_size;
    const int P = m->start_pos, T = m->n_tokens, S = m->n_decode;
    snprintf(casepath, sizeof casepath, "/cases/%s", gc->name);
    snprintf(ppath, sizeof ppath, "%s/prefill", casepath);
    snprintf(dpath, sizeof dpath, "%s/decode", casepath);
    cg = gio_group_if(f, "cases");
    g = gio_group_if(cg, gc->name);
    if (g < 0) {
        st = qc_errf(c->err, QC_ERR_MISSING, "%s: %s: missing group", c->file, casepath);
        goto done;
    }
    if (P > 0) {
        long long w[1] = {P};
        if ((st = gio_read_dataset(c, g, casepath, "history_tokens", 0, 1, w, (void **)&gc->history)))
            goto done;
        snprintf(path, sizeof path, "%s/history_tokens", casepath);
        if ((st = check_ids(c, path, gc->history, P, (int)V))) goto done;
    }
    long long wt[1] = {T};
    if ((st = gio_read_dataset(c, g, casepath, "tokens", 0, 1, wt, (void **)&gc->tokens))) goto done;
    snprintf(path, sizeof path, "%s/tokens", casepath);
    if ((st = check_ids(c, path, gc->tokens, T, (int)V))) goto done;
    long long wl[2] = {T, V};
    if ((pg = gio_group_if(g, "prefill")) < 0) {
        st = missing_dataset(c, ppath, "logits");
        goto done;
    }
    if ((st = gio_read_dataset(c, pg, ppath, "logits", 1, 2, wl, (void **)&gc->prefill_logits)))
        goto done;
    if (m->has_hidden) {
        long long wh[3] = {L + 1, T, H};
        if ((st = gio_read_dataset(c, pg, ppath, "hidden", 1, 3, wh, (void **)&gc->prefill_hidden)))
            goto done;
    }
    if (m->has_prefill_state &&
        (st = state_datasets(c, cfg, pg, ppath, P + T, &gc->prefill_state)))
        goto done;
    if ((st = gio_moe_load(c, cfg, pg, ppath, T, m->has_prefill_router, m->has_prefill_moe_in,
                           &gc->prefill_topk_ids, &gc->prefill_topk_weights,
                           &gc->prefill_router_margins, &gc->prefill_moe_in)))
        goto done;
    if (m->has_decode) {
        long long ws[1] = {S};
        if ((dg = gio_group_if(g, "decode")) < 0) {
            st = missing_dataset(c, dpath, "tokens");
            goto done;
        }
        if ((st = gio_read_dataset(c, dg, dpath, "tokens", 0, 1, ws, (void **)&gc->decode_tokens)))
            goto done;
        snprintf(path, sizeof path, "%s/tokens", dpath);
        if ((st = check_ids(c, path, gc->decode_tokens, S, (int)V))) goto done;
        long long wd[2] = {S, V};
        if ((st = gio_read_dataset(c, dg, dpath, "logits", 1, 2, wd, (void **)&gc->decode_logits)))
            goto done;
        if (m->has_decode_margins &&
            (st = gio_read_dataset(c, dg, dpath, "margins", 1, 1, ws, (void **)&gc->decode_margins)))
            goto done;
        if (m->has_decode_state &&
            (st = state_datasets(c, cfg, dg, dpath, P + T + S, &gc->decode_state)))
            goto done;
        if ((st = gio_moe_load(c, cfg, dg, dpath, S, m->has_decode_router, m->has_decode_moe_in,
                               &gc->decode_topk_ids, &gc->decode_topk_weights,
                               &gc->decode_router_margins, &gc->decode_moe_in)))
            goto done;
    }
done:
    CLOSE_G(dg);
    CLOSE_G(pg);
    CLOSE_G(g);
    CLOSE_G(cg);
    if (st) gio_case_free_tensors(cfg, gc);
    return st;
}

/* Floats of one state snapshot with n_pos cache positions. */
static uint64_t state_floats(const qc_config *cfg, uint64_t n_pos) {
    uint64_t n = 0;
    const uint64_t conv = (uint64_t)qc_cfg_conv_dim(cfg) * (uint64_t)cfg->conv_kernel;
    const uint64_t rec =
        (uint64_t)cfg->lin_n_v_heads * (uint64_t)cfg->lin_k_dim * (uint64_t)cfg->lin_v_dim;
    for (int l = 0; l < cfg->n_layers; l++) {
        if (cfg->layer_types[l] == QC_LAYER_FULL)
            n = gio_sat_madd(2 * (uint64_t)cfg->n_kv_heads * (uint64_t)cfg->head_dim, n_pos, n);
        else
            n = gio_sat_madd(1, conv + rec, n);
    }
    return n;
}

size_t qc_golden_case_bytes(const qc_config *cfg, const qc_golden_case_meta *m) {
    const uint64_t V = (uint64_t)cfg->vocab_size, L = (uint64_t)cfg->n_layers,
                   H = (uint64_t)cfg->hidden_size;
    const uint64_t P = (uint64_t)m->start_pos, T = (uint64_t)m->n_tokens,
                   S = (uint64_t)m->n_decode;
    uint64_t n = P + T;                            /* history, tokens */
    n = gio_sat_madd(T, V, n);                         /* prefill/logits */
    if (m->has_hidden) n = gio_sat_madd((L + 1) * H, T, n);
    if (m->has_prefill_state) n = gio_sat_madd(1, state_floats(cfg, P + T), n);
    if (m->has_decode) {
        n = gio_sat_madd(S, V + 1 + (m->has_decode_margins ? 1 : 0), n); /* tokens, logits, margins */
        if (m->has_decode_state) n = gio_sat_madd(1, state_floats(cfg, P + T + S), n);
    }
    n = gio_sat_madd(1, gio_moe_elems(cfg, m), n); /* MoE router datasets, moe_in */
    uint64_t bytes = gio_sat_madd(n, 4, 0);
    /* the per-layer pointer arrays of the state snapshots */
    int n_states = m->has_prefill_state + (m->has_decode && m->has_decode_state);
    bytes = gio_sat_madd((uint64_t)n_states * 4 * L, sizeof(float *), bytes);
    return bytes > (uint64_t)SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}

/* qc_case_free lives here (not in qc_runcase.c) so that a reader-only program does not pull
 * in the runner; it frees either kind of case. */
void qc_case_free(const qc_config *cfg, qc_golden_case *c) {
    if (!c) return;
    gio_case_free_tensors(cfg, c);
    c->n_history = c->n_tokens = c->n_decode = 0;
}
