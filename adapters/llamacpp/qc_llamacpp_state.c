/* qc_llamacpp_state.c — llama_state_seq_get_data parsed into the canonical state layouts
 * (part of the llama.cpp plugin: see qc_llamacpp_internal.h; snapshots, sequences, trim and
 * fill are in qc_llamacpp_lifecycle.c) */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wformat-truncation" /* paths are bounded by PATH_MAX_ */
#include "qc_llamacpp_internal.h"

/* ===================================================================================== */
/* the state blob                                                                        */
/* ===================================================================================== */
/* ---- the state blob ------------------------------------------------------------------ */

typedef struct {
    const uint8_t *p, *end;
    int bad;
} rd;

static int rd_take(rd *r, void *dst, size_t n) {
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = 1;
        return -1;
    }
    if (dst) memcpy(dst, r->p, n);
    r->p += n;
    return 0;
}
static const uint8_t *rd_span(rd *r, uint64_t n) {
    if (r->bad || (uint64_t)(r->end - r->p) < n) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *s = r->p;
    r->p += n;
    return s;
}

static size_t type_size(int32_t t) {
    if (t == GGML_TYPE_F32) return 4;
    if (t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) return 2;
    return 0;
}

static float elem(const uint8_t *base, int32_t type, size_t i) {
    if (type == GGML_TYPE_F32) {
        float f;
        memcpy(&f, base + 4 * i, 4);
        return f;
    }
    uint16_t u;
    memcpy(&u, base + 2 * i, 2);
    if (type == GGML_TYPE_F16) {
        ggml_fp16_t x;
        memcpy(&x, &u, 2);
        return ggml_fp16_to_fp32(x);
    }
    ggml_bf16_t x;
    memcpy(&x, &u, 2);
    return ggml_bf16_to_fp32(x);
}

/* Parse the attention (KV cache) section with `ext` bytes of cell extension per cell.
 * 0 ok, -1 not consistent. */
static int parse_kv(qc_llama *h, rd *r, size_t ext, char *why, size_t nw) {
    uint32_t n_stream = 0, cells = 0;
    if (rd_take(r, &n_stream, 4) || n_stream != 1) {
        snprintf(why, nw, "kv: n_stream %u (expected 1)", r->bad ? 0 : n_stream);
        return -1;
    }
    if (rd_take(r, &cells, 4) || cells > (uint32_t)h->n_ctx) {
        snprintf(why, nw, "kv: cell count %u", cells);
        return -1;
    }
    h->kv_cells = (int)cells;
    free(h->kv_pos);
    h->kv_pos = calloc(cells ? cells : 1, sizeof(int32_t));
    if (!h->kv_pos) return -1;
    h->kv_n_layer = 0;
    if (cells == 0) return 0;
    for (uint32_t c = 0; c < cells; c++) {
        int32_t pos;
        uint32_t nsid;
        if (rd_take(r, &pos, 4) || rd_take(r, &nsid, 4) || nsid > 64) {
            snprintf(why, nw, "kv: cell %u meta", c);
            return -1;
        }
        if (ext && !rd_span(r, ext)) return -1;
        for (uint32_t s = 0; s < nsid; s++) {
            int32_t sid;
            if (rd_take(r, &sid, 4) || sid != h->seq) {
                snprintf(why, nw, "kv: cell %u seq id", c);
                return -1;
            }
        }
        h->kv_pos[c] = pos;
    }
    uint32_t vtrans = 0, nl = 0;
    if (rd_take(r, &vtrans, 4) || rd_take(r, &nl, 4) || vtrans > 1 || nl > MAX_LAYERS) {
        snprintf(why, nw, "kv: v_trans %u / n_layer %u", vtrans, nl);
        return -1;
    }
    h->kv_vtrans = (int)vtrans;
    h->kv_n_layer = (int)nl;
    const uint64_t gqa = (uint64_t)h->n_head_kv * h->head_dim;
    for (uint32_t l = 0; l < nl; l++) {
        int32_t t = 0;
        uint64_t row = 0;
        if (rd_take(r, &t, 4) || rd_take(r, &row, 8) || !type_size(t) || row != gqa * type_size(t)) {
            snprintf(why, nw, "kv: K layer %u type %d row %llu (expected %llu floats)", l, t,
                     (unsigned long long)row, (unsigned long long)gqa);
            return -1;
        }
        h->kv_ktype[l] = t;
        h->kv_krow[l] = row;
        if (!(h->kv_k[l] = rd_span(r, row * cells))) return -1;
    }
    for (uint32_t l = 0; l < nl; l++) {
        int32_t t = 0;
        if (rd_take(r, &t, 4) || !type_size(t)) return -1;
        h->kv_vtype[l] = t;
        if (!vtrans) {
            uint64_t row = 0;
            if (rd_take(r, &row, 8) || row != gqa * type_size(t)) {
                snprintf(why, nw, "kv: V layer %u row %llu", l, (unsigned long long)row);
                return -1;
            }
            h->kv_vrow[l] = row;
            if (!(h->kv_v[l] = rd_span(r, row * cells))) return -1;
        } else {
            uint32_t el = 0, ng = 0;
            if (rd_take(r, &el, 4) || rd_take(r, &ng, 4) || el != type_size(t) || ng != gqa) {
                snprintf(why, nw, "kv: V^T layer %u el %u gqa %u", l, el, ng);
                return -1;
            }
            h->kv_vel[l] = el;
            h->kv_vgqa[l] = ng;
            if (!(h->kv_v[l] = rd_span(r, (uint64_t)el * ng * cells))) return -1;
        }
    }
    return r->bad ? -1 : 0;
}

static int parse_rs(qc_llama *h, rd *r, char *why, size_t nw) {
    uint32_t cells = 0;
    if (rd_take(r, &cells, 4) || cells > 1) {
        snprintf(why, nw, "recurrent: cell count %u (expected 0 or 1)", cells);
        return -1;
    }
    h->rs_cells = (int)cells;
    h->rs_n_layer = 0;
    for (uint32_t c = 0; c < cells; c++) {
        int32_t pos;
        uint32_t nsid;
        if (rd_take(r, &pos, 4) || rd_take(r, &nsid, 4) || nsid > 64) return -1;
        for (uint32_t s = 0; s < nsid; s++)
            if (rd_take(r, NULL, 4)) return -1;
    }
    /* the data section is written even for 0 cells */
    uint32_t strans = 0, nl = 0;
    if (rd_take(r, &strans, 4) || rd_take(r, &nl, 4) || strans != 0) {
        snprintf(why, nw, "recurrent: s_trans %u", strans);
        return -1;
    }
    (void)nl; /* hparams.n_layer(): every layer, but only recurrent ones have records */
    const uint64_t r_floats = (uint64_t)(h->K - 1) * h->C;
    const uint64_t s_floats = (uint64_t)h->dk * h->dv * h->nv;
    for (int l = 0; l < h->n_recr; l++) {
        int32_t t = 0;
        uint64_t row = 0;
        if (rd_take(r, &t, 4) || rd_take(r, &row, 8) || !type_size(t) || row != r_floats * type_size(t)) {
            snprintf(why, nw, "recurrent: conv record %d type %d row %llu (expected %llu floats)", l, t,
                     (unsigned long long)row, (unsigned long long)r_floats);
            return -1;
        }
        h->rs_rtype[l] = t;
        h->rs_rrow[l] = row;
        if (!(h->rs_r[l] = rd_span(r, row * cells))) return -1;
    }
    for (int l = 0; l < h->n_recr; l++) {
        int32_t t = 0;
        uint64_t row = 0;
        if (rd_take(r, &t, 4) || rd_take(r, &row, 8) || !type_size(t) || row != s_floats * type_size(t)) {
            snprintf(why, nw, "recurrent: ssm record %d type %d row %llu (expected %llu floats)", l, t,
                     (unsigned long long)row, (unsigned long long)s_floats);
            return -1;
        }
        h->rs_stype[l] = t;
        h->rs_srow[l] = row;
        if (!(h->rs_s[l] = rd_span(r, row * cells))) return -1;
    }
    h->rs_n_layer = h->n_recr;
    return r->bad ? -1 : 0;
}

int load_state(qc_llama *h) {
    if (h->blob_valid) return QC_PLUGIN_OK;
    if (h->pos < 0) return set_err(h, QC_PLUGIN_ERROR, "get_state: the last forward failed");
    size_t n = llama_state_seq_get_size(h->ctx, h->seq);
    char what[200];
    if (n < 8) {
        snprintf(what, sizeof what, "get_state: llama_state_seq_get_size(seq %d) returned %zu", h->seq, n);
        return set_err_log(h, QC_PLUGIN_ERROR, what);
    }
    uint8_t *b = realloc(h->blob, n);
    if (!b) return set_err(h, QC_PLUGIN_ERROR, "out of memory (state blob)");
    h->blob = b;
    size_t got = llama_state_seq_get_data(h->ctx, b, n, h->seq);
    if (got != n) {
        snprintf(what, sizeof what, "get_state: llama_state_seq_get_data(seq %d) returned %zu, "
                 "llama_state_seq_get_size %zu", h->seq, got, n);
        return set_err_log(h, QC_PLUGIN_ERROR, what);
    }
    h->blob_n = n;
    /* magic, seq id, then the hybrid memory: attention KV cache, then the recurrent memory.
     * The per-cell extension of the KV cache (M-RoPE: llama_kv_cell_ext, 12 bytes in v0.5.0)
     * is not announced in the blob: try 12 and 0 and accept only a parse that ends exactly
     * at the end of the blob. */
    static const size_t exts[] = {12, 0, 8, 16};
    char why[512] = "";
    for (size_t e = 0; e < sizeof exts / sizeof exts[0]; e++) {
        rd r = {b, b + n, 0};
        uint32_t magic;
        int32_t sid;
        if (rd_take(&r, &magic, 4) || rd_take(&r, &sid, 4) || magic != 0xaf143cd8u || sid != h->seq)
            return set_err(h, QC_PLUGIN_ERROR, "get_state: unexpected blob header (magic %08x, seq %d)", magic, sid);
        if (h->n_full > 0) {
            if (parse_kv(h, &r, exts[e], why, sizeof why) != 0) continue;
        } else {
            h->kv_cells = 0;
            h->kv_n_layer = 0;
        }
        if (h->n_recr > 0) {
            if (parse_rs(h, &r, why, sizeof why) != 0) continue;
        }
        if (r.bad || r.p != r.end) {
            snprintf(why, sizeof why, "%zu bytes left over", (size_t)(r.end - r.p));
            continue;
        }
        /* the main model's full-attention layers come first; MTP blocks (full attention)
         * kept in the GGUF may add their own records after them */
        if (h->kv_cells > 0 && h->kv_n_layer != h->n_full && h->kv_n_layer != h->n_full + h->n_nextn) {
            snprintf(why, sizeof why, "kv: %d layer records for %d full-attention layers (+%d MTP)",
                     h->kv_n_layer, h->n_full, h->n_nextn);
            continue;
        }
        h->blob_valid = 1;
        return QC_PLUGIN_OK;
    }
    return set_err(h, QC_PLUGIN_ERROR, "get_state: cannot parse llama_state_seq_get_data's %zu bytes "
                   "consistently (%s)", n, why);
}

/* index of layer `layer` among the full-attention (or recurrent) layers */
static int sub_index(const qc_llama *h, int layer, int recr) {
    int k = 0;
    for (int i = 0; i < layer; i++)
        if (h->is_recr[i] == recr) k++;
    return k;
}

/* HF value head j -> llama.cpp's tiled head l (value heads reordered by the converter) */
static int v_head_llama(const qc_llama *h, int j) {
    if (h->raw_layout) return j;
    int r = h->nv / h->nk;
    return (j % r) * h->nk + j / r;
}

/* HF conv channel -> llama.cpp channel */
static int conv_chan_llama(const qc_llama *h, int c) {
    int qk = 2 * h->nk * h->dk;
    if (c < qk) return c;
    int j = (c - qk) / h->dv, e = (c - qk) % h->dv;
    return qk + v_head_llama(h, j) * h->dv + e;
}

int p_get_state(void *handle, int32_t layer, int32_t kind, int32_t n_pos, float *dst) {
    qc_llama *h = handle;
    if (!h) return QC_PLUGIN_ERROR;
    if (!h->want_state) return set_err(h, QC_PLUGIN_UNSUPPORTED, "get_state: the state is off (state=0)");
    if (layer < 0 || layer >= h->L) return set_err(h, QC_PLUGIN_ERROR, "get_state: layer %d outside 0..%d", layer, h->L - 1);
    int rc = load_state(h);
    if (rc) return rc;
    if (kind == QC_STATE_K_CACHE || kind == QC_STATE_V_CACHE) {
        if (h->is_recr[layer]) return set_err(h, QC_PLUGIN_ERROR, "get_state: layer %d is a linear-attention layer", layer);
        if (n_pos < 0) return set_err(h, QC_PLUGIN_ERROR, "get_state: n_pos %d", n_pos);
        if (n_pos > h->pos)
            return set_err(h, QC_PLUGIN_UNSUPPORTED, "get_state: n_pos %d > %d used positions: llama.cpp's "
                           "state API exposes only the used KV cells", n_pos, h->pos);
        const int nkv = h->n_head_kv, hd = h->head_dim;
        memset(dst, 0, (size_t)nkv * n_pos * hd * sizeof(float));
        if (h->kv_cells == 0) {
            if (n_pos > 0) return set_err(h, QC_PLUGIN_ERROR, "get_state: the KV cache holds no cells");
            return QC_PLUGIN_OK;
        }
        int fl = sub_index(h, layer, 0);
        /* cell of each position */
        int *cell_of = malloc((size_t)(n_pos ? n_pos : 1) * sizeof(int));
        if (!cell_of) return set_err(h, QC_PLUGIN_ERROR, "out of memory");
        for (int p = 0; p < n_pos; p++) cell_of[p] = -1;
        for (int c = 0; c < h->kv_cells; c++) {
            int32_t p = h->kv_pos[c];
            if (p < 0 || p >= h->pos) {
                free(cell_of);
                return set_err(h, QC_PLUGIN_ERROR, "get_state: KV cell %d holds position %d outside 0..%d", c, p, h->pos - 1);
            }
            if (p < n_pos) {
                if (cell_of[p] >= 0) {
                    free(cell_of);
                    return set_err(h, QC_PLUGIN_ERROR, "get_state: position %d in two KV cells", p);
                }
                cell_of[p] = c;
            }
        }
        for (int p = 0; p < n_pos; p++)
            if (cell_of[p] < 0) {
                free(cell_of);
                return set_err(h, QC_PLUGIN_ERROR, "get_state: position %d is in no KV cell", p);
            }
        const size_t gqa = (size_t)nkv * hd;
        for (int p = 0; p < n_pos; p++) {
            int c = cell_of[p];
            for (int kh = 0; kh < nkv; kh++)
                for (int d = 0; d < hd; d++) {
                    size_t j = (size_t)kh * hd + d;
                    float v;
                    if (kind == QC_STATE_K_CACHE)
                        v = elem(h->kv_k[fl], h->kv_ktype[fl], (size_t)c * gqa + j);
                    else if (!h->kv_vtrans)
                        v = elem(h->kv_v[fl], h->kv_vtype[fl], (size_t)c * gqa + j);
                    else /* transposed: [n_embd_v_gqa][cells] */
                        v = elem(h->kv_v[fl], h->kv_vtype[fl], j * (size_t)h->kv_cells + c);
                    dst[((size_t)kh * n_pos + p) * hd + d] = v;
                }
        }
        free(cell_of);
        return QC_PLUGIN_OK;
    }
    if (kind == QC_STATE_CONV || kind == QC_STATE_RECURRENT) {
        if (!h->is_recr[layer]) return set_err(h, QC_PLUGIN_ERROR, "get_state: layer %d is a full-attention layer", layer);
        int rl = sub_index(h, layer, 1);
        if (kind == QC_STATE_CONV) {
            const int C = h->C, K = h->K, W = h->W;
            memset(dst, 0, (size_t)C * K * sizeof(float));
            if (h->rs_cells == 0) return QC_PLUGIN_OK; /* fresh: zeros */
            /* the last position's window: the last K of the W kept columns, row stride W */
            const float *win = h->conv_win_ok[layer] ? conv_win_of(h, layer) + (W - K) : NULL;
            for (int c = 0; c < C; c++) {
                int lc = conv_chan_llama(h, c);
                /* llama.cpp's record: [C][K-1], oldest first: canonical columns 1..K-1 */
                for (int k = 0; k < K - 1; k++) {
                    float v = elem(h->rs_r[rl], h->rs_rtype[rl], (size_t)lc * (K - 1) + k);
                    dst[(size_t)c * K + 1 + k] = v;
                    float g = win ? win[(size_t)lc * W + 1 + k] : 0.0f;
                    /* bit for bit (NaN after a fill included) */
                    if (win && memcmp(&g, &v, sizeof v) != 0) {
                        return set_err(h, QC_PLUGIN_ERROR, "get_state: layer %d conv channel %d column %d: "
                                       "state %g != graph conv_input %g", layer, c, k + 1, v, g);
                    }
                }
                /* column 0 (the oldest), which llama.cpp does not keep: from the graph's
                 * conv_input of the last forward; zero when not captured */
                dst[(size_t)c * K] = win ? win[(size_t)lc * W] : 0.0f;
            }
            return QC_PLUGIN_OK;
        }
        const int nv = h->nv, dk = h->dk, dv = h->dv;
        memset(dst, 0, (size_t)nv * dk * dv * sizeof(float));
        if (h->rs_cells == 0) return QC_PLUGIN_OK;
        /* llama.cpp per head l: [dv][dk] (dk fastest), i.e. S^T; heads in tiled order */
        for (int j = 0; j < nv; j++) {
            int l = v_head_llama(h, j);
            for (int a = 0; a < dk; a++)
                for (int bb = 0; bb < dv; bb++)
                    dst[((size_t)j * dk + a) * dv + bb] =
                        elem(h->rs_s[rl], h->rs_stype[rl],
                             h->raw_layout ? ((size_t)l * dk + a) * dv + bb : ((size_t)l * dv + bb) * dk + a);
        }
        return QC_PLUGIN_OK;
    }
    return set_err(h, QC_PLUGIN_ERROR, "get_state: unknown kind %d", kind);
}
