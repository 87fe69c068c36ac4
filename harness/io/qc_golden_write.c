/* qc_golden_write.c — writing a golden / ACTUAL file in schema v1 (atomically, through
 * qc_outpath) and the state snapshots taken from a qc_state. */
#include "qc_golden.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "qc/qc_memplan.h"
#include "qc_outpath.h"

#include "qc_golden_internal.h"

/* ===================================================================================== */
/* state snapshots                                                                       */
/* ===================================================================================== */

qc_status qc_golden_state_from(const qc_config *cfg, const qc_state *st, int n_pos,
                               qc_golden_state *gs, qc_err *err) {
    memset(gs, 0, sizeof *gs);
    if (st->n_layers != cfg->n_layers || n_pos < 0 || n_pos > st->max_context_len)
        return qc_errf(err, QC_ERR_ARG,
                       "state snapshot: %d positions of a state with capacity %d (%d layers, "
                       "config %d)", n_pos, st->max_context_len, st->n_layers, cfg->n_layers);
    if (gio_state_alloc_ptrs(cfg, gs)) goto oom;
    gs->present = 1;
    gs->n_pos = n_pos;
    const int nkv = cfg->n_kv_heads, hd = cfg->head_dim, cap = st->max_context_len;
    const size_t conv_n = (size_t)qc_cfg_conv_dim(cfg) * (size_t)cfg->conv_kernel;
    const size_t rec_n = (size_t)cfg->lin_n_v_heads * cfg->lin_k_dim * cfg->lin_v_dim;
    for (int l = 0; l < cfg->n_layers; l++) {
        if (cfg->layer_types[l] == QC_LAYER_FULL) {
            size_t n = (size_t)nkv * (size_t)n_pos * (size_t)hd;
            gs->k_cache[l] = malloc(n ? n * sizeof(float) : sizeof(float));
            gs->v_cache[l] = malloc(n ? n * sizeof(float) : sizeof(float));
            if (!gs->k_cache[l] || !gs->v_cache[l]) goto oom;
            for (int h = 0; h < nkv; h++) {
                size_t src = (size_t)h * cap * hd, dst = (size_t)h * n_pos * hd;
                memcpy(gs->k_cache[l] + dst, st->k_cache[l] + src, (size_t)n_pos * hd * sizeof(float));
                memcpy(gs->v_cache[l] + dst, st->v_cache[l] + src, (size_t)n_pos * hd * sizeof(float));
            }
        } else {
            gs->conv_state[l] = malloc(conv_n * sizeof(float));
            gs->recurrent_state[l] = malloc(rec_n * sizeof(float));
            if (!gs->conv_state[l] || !gs->recurrent_state[l]) goto oom;
            memcpy(gs->conv_state[l], st->conv_state[l], conv_n * sizeof(float));
            memcpy(gs->recurrent_state[l], st->recurrent_state[l], rec_n * sizeof(float));
        }
    }
    return QC_OK;
oom:
    qc_golden_state_free(cfg, gs);
    return qc_errf(err, QC_ERR_OOM, "state snapshot: out of memory");
}

/* ===================================================================================== */
/* writing                                                                               */
/* ===================================================================================== */

typedef struct {
    const char *file; /* the final path, for messages */
    qc_err *err;
} wr_ctx;

static qc_status wr_fail(const wr_ctx *w, const char *what) {
    char h5msg[300];
    return qc_errf(w->err, QC_ERR_HDF5, "%s: %s: cannot write: %s", w->file, what,
                   gio_h5_errdesc(h5msg, sizeof h5msg));
}

/* Scalar variable-length UTF-8 string attribute (what h5py writes for a Python str). */
static qc_status write_attr_string(const wr_ctx *w, hid_t obj, const char *objpath,
                                   const char *name, const char *value) {
    qc_status st = QC_OK;
    hid_t t = H5I_INVALID_HID, sp = H5I_INVALID_HID, a = H5I_INVALID_HID;
    char what[300];
    snprintf(what, sizeof what, "%s%s%s", objpath, strcmp(objpath, "/") ? "/" : "", name);
    t = H5Tcopy(H5T_C_S1);
    if (t < 0 || H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) goto fail;
    sp = H5Screate(H5S_SCALAR);
    if (sp < 0) goto fail;
    a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) goto fail;
    const char *v = value ? value : "";
    if (H5Awrite(a, t, &v) < 0) goto fail;
    goto done;
fail:
    st = wr_fail(w, what);
done:
    CLOSE_A(a);
    CLOSE_S(sp);
    CLOSE_T(t);
    return st;
}

/* Scalar integer attribute: int32 (is64 = 0) or int64. */
static qc_status write_attr_int(const wr_ctx *w, hid_t obj, const char *objpath,
                                const char *name, int64_t value, int is64) {
    qc_status st = QC_OK;
    hid_t sp = H5I_INVALID_HID, a = H5I_INVALID_HID;
    char what[300];
    snprintf(what, sizeof what, "%s%s%s", objpath, strcmp(objpath, "/") ? "/" : "", name);
    sp = H5Screate(H5S_SCALAR);
    if (sp < 0) goto fail;
    a = H5Acreate2(obj, name, is64 ? H5T_STD_I64LE : H5T_STD_I32LE, sp, H5P_DEFAULT,
                   H5P_DEFAULT);
    if (a < 0) goto fail;
    int32_t v32 = (int32_t)value;
    if (H5Awrite(a, is64 ? H5T_NATIVE_INT64 : H5T_NATIVE_INT32, is64 ? (void *)&value
                                                                       : (void *)&v32) < 0)
        goto fail;
    goto done;
fail:
    st = wr_fail(w, what);
done:
    CLOSE_A(a);
    CLOSE_S(sp);
    return st;
}

/* Plain contiguous dataset: float32 (is_float) or int32. */
static qc_status write_dataset(const wr_ctx *w, hid_t loc, const char *locpath, const char *name,
                               int is_float, int rank, const hsize_t *dims, const void *data) {
    qc_status st = QC_OK;
    hid_t sp = H5I_INVALID_HID, d = H5I_INVALID_HID;
    char what[300];
    snprintf(what, sizeof what, "%s/%s", locpath, name);
    size_t numel = 1;
    for (int i = 0; i < rank; i++) numel *= (size_t)dims[i];
    if (numel && !data)
        return qc_errf(w->err, QC_ERR_ARG, "%s: %s: no data", w->file, what);
    sp = H5Screate_simple(rank, dims, NULL);
    if (sp < 0) goto fail;
    /* no modification times in the object headers: the same golden twice is the same bytes */
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (dcpl < 0 || H5Pset_obj_track_times(dcpl, 0) < 0) {
        if (dcpl >= 0) H5Pclose(dcpl);
        goto fail;
    }
    d = H5Dcreate2(loc, name, is_float ? H5T_IEEE_F32LE : H5T_STD_I32LE, sp, H5P_DEFAULT, dcpl,
                   H5P_DEFAULT);
    H5Pclose(dcpl);
    if (d < 0) goto fail;
    if (numel && H5Dwrite(d, is_float ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32, H5S_ALL, H5S_ALL,
                          H5P_DEFAULT, data) < 0)
        goto fail;
    goto done;
fail:
    st = wr_fail(w, what);
done:
    CLOSE_D(d);
    CLOSE_S(sp);
    return st;
}

static qc_status make_group(const wr_ctx *w, hid_t loc, const char *name, const char *path,
                            hid_t *out) {
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    if (gcpl < 0 || H5Pset_obj_track_times(gcpl, 0) < 0) {
        if (gcpl >= 0) H5Pclose(gcpl);
        return wr_fail(w, path);
    }
    *out = H5Gcreate2(loc, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    if (*out < 0) return wr_fail(w, path);
    return QC_OK;
}

static qc_status write_state(const wr_ctx *w, const qc_config *cfg, hid_t parent,
                             const char *parentpath, const qc_golden_state *gs) {
    qc_status st = QC_OK;
    hid_t sg = H5I_INVALID_HID, lg = H5I_INVALID_HID;
    char spath[256], lpath[300], lname[32];
    snprintf(spath, sizeof spath, "%s/state", parentpath);
    if ((st = make_group(w, parent, "state", spath, &sg))) return st;
    for (int l = 0; l < cfg->n_layers && !st; l++) {
        snprintf(lname, sizeof lname, "layer_%02d", l);
        snprintf(lpath, sizeof lpath, "%s/%s", spath, lname);
        if ((st = make_group(w, sg, lname, lpath, &lg))) break;
        if (cfg->layer_types[l] == QC_LAYER_FULL) {
            hsize_t kv[3] = {(hsize_t)cfg->n_kv_heads, (hsize_t)gs->n_pos, (hsize_t)cfg->head_dim};
            st = write_dataset(w, lg, lpath, "k_cache", 1, 3, kv, gs->k_cache[l]);
            if (!st) st = write_dataset(w, lg, lpath, "v_cache", 1, 3, kv, gs->v_cache[l]);
        } else {
            hsize_t cv[2] = {(hsize_t)qc_cfg_conv_dim(cfg), (hsize_t)cfg->conv_kernel};
            hsize_t rs[3] = {(hsize_t)cfg->lin_n_v_heads, (hsize_t)cfg->lin_k_dim,
                             (hsize_t)cfg->lin_v_dim};
            st = write_dataset(w, lg, lpath, "conv_state", 1, 2, cv, gs->conv_state[l]);
            if (!st)
                st = write_dataset(w, lg, lpath, "recurrent_state", 1, 3, rs,
                                   gs->recurrent_state[l]);
        }
        CLOSE_G(lg);
    }
    CLOSE_G(sg);
    return st;
}

/* MoE (golden/SCHEMA.md "MoE"): <ppath>/router/{topk_ids, topk_weights, margins} [L, rows, k]
 * / [L, rows] and <ppath>/moe_in [L, rows, H], each only when present (a C backend traces no
 * router probabilities: no margins). A dense model: only the mixer output, named mlp_in (the
 * name the reader takes for a dense model, qc_golden_moe.c); router datasets are refused. */
static qc_status write_moe(const wr_ctx *w, const qc_config *cfg, hid_t parent,
                           const char *ppath, int rows, const int32_t *ids, const float *wts,
                           const float *margins, const float *moe_in) {
    qc_status st = QC_OK;
    const hsize_t L = (hsize_t)cfg->n_layers, R = (hsize_t)rows,
                  K = (hsize_t)cfg->n_experts_per_tok, H = (hsize_t)cfg->hidden_size;
    hsize_t dk[3] = {L, R, K}, dm[2] = {L, R}, di[3] = {L, R, H};
    if (!qc_cfg_is_moe(cfg)) {
        if (ids || wts || margins)
            return qc_errf(w->err, QC_ERR_ARG, "%s: %s/router: router datasets for a dense "
                           "model (no experts)", w->file, ppath);
        return moe_in ? write_dataset(w, parent, ppath, "mlp_in", 1, 3, di, moe_in) : QC_OK;
    }
    if (ids) {
        char rpath[300];
        hid_t rg = H5I_INVALID_HID;
        snprintf(rpath, sizeof rpath, "%s/router", ppath);
        if ((st = make_group(w, parent, "router", rpath, &rg))) return st;
        st = write_dataset(w, rg, rpath, "topk_ids", 0, 3, dk, ids);
        if (!st && wts) st = write_dataset(w, rg, rpath, "topk_weights", 1, 3, dk, wts);
        if (!st && margins) st = write_dataset(w, rg, rpath, "margins", 1, 2, dm, margins);
        CLOSE_G(rg);
    }
    if (!st && moe_in) st = write_dataset(w, parent, ppath, "moe_in", 1, 3, di, moe_in);
    return st;
}

/* A top-k-only run (golden/SCHEMA.md "Top-k ACTUAL"): <ppath>/topk/{ids, logprobs} [rows, k]. */
static qc_status write_topk(const wr_ctx *w, hid_t parent, const char *ppath, int rows, int k,
                            const int32_t *ids, const float *lps) {
    if (!ids) return QC_OK;
    if (k < 1 || !lps)
        return qc_errf(w->err, QC_ERR_ARG, "%s: %s/topk: k %d, logprobs %s", w->file, ppath, k,
                       lps ? "given" : "missing");
    char tpath[300];
    hid_t tg = H5I_INVALID_HID;
    hsize_t d[2] = {(hsize_t)rows, (hsize_t)k};
    snprintf(tpath, sizeof tpath, "%s/topk", ppath);
    qc_status st = make_group(w, parent, "topk", tpath, &tg);
    if (!st) st = write_dataset(w, tg, tpath, "ids", 0, 2, d, ids);
    if (!st) st = write_dataset(w, tg, tpath, "logprobs", 1, 2, d, lps);
    CLOSE_G(tg);
    return st;
}

static qc_status write_case(const wr_ctx *w, const qc_config *cfg, hid_t cases_g,
                            const qc_golden_case *gc) {
    qc_status st = QC_OK;
    hid_t g = H5I_INVALID_HID, pg = H5I_INVALID_HID, dg = H5I_INVALID_HID;
    char cpath[160], ppath[200], dpath[200];
    const hsize_t V = (hsize_t)cfg->vocab_size, L = (hsize_t)cfg->n_layers,
                  H = (hsize_t)cfg->hidden_size;
    snprintf(cpath, sizeof cpath, "/cases/%s", gc->name);
    if (!gio_valid_case_name(gc->name))
        return qc_errf(w->err, QC_ERR_ARG, "%s: %s: invalid case name (want [A-Za-z0-9_-]+)",
                       w->file, cpath);
    if (gc->n_tokens < 1 || !gc->tokens || (!gc->prefill_logits && !gc->prefill_tk_ids))
        return qc_errf(w->err, QC_ERR_ARG, "%s: %s: no prompt tokens / logits", w->file, cpath);
    if (gc->start_pos > 0 && (gc->n_history != gc->start_pos || !gc->history))
        return qc_errf(w->err, QC_ERR_ARG, "%s: %s: start_pos %d needs %d history tokens (have %d)",
                       w->file, cpath, gc->start_pos, gc->start_pos, gc->n_history);
    /* what is written must read back: the reader bounds the positions of a case */
    if ((long long)gc->start_pos + gc->n_tokens + gc->n_decode > qc_golden_max_positions(cfg))
        return qc_errf(w->err, QC_ERR_ARG, "%s: %s: start_pos %d + %d tokens + %d decode steps "
                       "= %lld positions, more than %d (%s)", w->file, cpath, gc->start_pos,
                       gc->n_tokens, gc->n_decode,
                       (long long)gc->start_pos + gc->n_tokens + gc->n_decode,
                       qc_golden_max_positions(cfg), gio_positions_what(cfg));
    if ((st = make_group(w, cases_g, gc->name, cpath, &g))) return st;
    if ((st = write_attr_int(w, g, cpath, "start_pos", gc->start_pos, 0))) goto done;
    if (gc->max_seq_len > 0 &&
        (st = write_attr_int(w, g, cpath, "max_seq_len", gc->max_seq_len, 0)))
        goto done;
    if ((st = write_attr_string(w, g, cpath, "description", gc->description))) goto done;
    if (gc->start_pos > 0) {
        hsize_t dh[1] = {(hsize_t)gc->start_pos};
        if ((st = write_dataset(w, g, cpath, "history_tokens", 0, 1, dh, gc->history))) goto done;
    }
    const hsize_t T = (hsize_t)gc->n_tokens;
    hsize_t dt[1] = {T};
    if ((st = write_dataset(w, g, cpath, "tokens", 0, 1, dt, gc->tokens))) goto done;

    snprintf(ppath, sizeof ppath, "%s/prefill", cpath);
    if ((st = make_group(w, g, "prefill", ppath, &pg))) goto done;
    hsize_t dl[2] = {T, V};
    if (gc->prefill_logits &&
        (st = write_dataset(w, pg, ppath, "logits", 1, 2, dl, gc->prefill_logits)))
        goto done;
    if ((st = write_topk(w, pg, ppath, gc->n_tokens, gc->tk_k, gc->prefill_tk_ids,
                         gc->prefill_tk_lps)))
        goto done;
    if (gc->prefill_hidden) {
        hsize_t dhid[3] = {L + 1, T, H};
        if ((st = write_dataset(w, pg, ppath, "hidden", 1, 3, dhid, gc->prefill_hidden)))
            goto done;
    }
    if (gc->prefill_state.present) {
        if (gc->prefill_state.n_pos != gc->start_pos + gc->n_tokens) {
            st = qc_errf(w->err, QC_ERR_ARG, "%s: %s/state: %d positions != start_pos + T = %d",
                         w->file, ppath, gc->prefill_state.n_pos, gc->start_pos + gc->n_tokens);
            goto done;
        }
        if ((st = write_state(w, cfg, pg, ppath, &gc->prefill_state))) goto done;
    }
    if ((st = write_moe(w, cfg, pg, ppath, gc->n_tokens, gc->prefill_topk_ids,
                        gc->prefill_topk_weights, gc->prefill_router_margins,
                        gc->prefill_moe_in)))
        goto done;

    if (gc->n_decode > 0) {
        const hsize_t S = (hsize_t)gc->n_decode;
        snprintf(dpath, sizeof dpath, "%s/decode", cpath);
        if ((st = make_group(w, g, "decode", dpath, &dg))) goto done;
        hsize_t ds[1] = {S}, dsl[2] = {S, V};
        if ((st = write_dataset(w, dg, dpath, "tokens", 0, 1, ds, gc->decode_tokens))) goto done;
        if (gc->decode_logits &&
            (st = write_dataset(w, dg, dpath, "logits", 1, 2, dsl, gc->decode_logits)))
            goto done;
        if ((st = write_topk(w, dg, dpath, gc->n_decode, gc->tk_k, gc->decode_tk_ids,
                             gc->decode_tk_lps)))
            goto done;
        if (gc->decode_margins &&
            (st = write_dataset(w, dg, dpath, "margins", 1, 1, ds, gc->decode_margins)))
            goto done;
        if (gc->decode_state.present) {
            if (gc->decode_state.n_pos != gc->start_pos + gc->n_tokens + gc->n_decode) {
                st = qc_errf(w->err, QC_ERR_ARG,
                             "%s: %s/state: %d positions != start_pos + T + S = %d", w->file,
                             dpath, gc->decode_state.n_pos,
                             gc->start_pos + gc->n_tokens + gc->n_decode);
                goto done;
            }
            if ((st = write_state(w, cfg, dg, dpath, &gc->decode_state))) goto done;
        }
        if ((st = write_moe(w, cfg, dg, dpath, gc->n_decode, gc->decode_topk_ids,
                            gc->decode_topk_weights, gc->decode_router_margins,
                            gc->decode_moe_in)))
            goto done;
    }
done:
    CLOSE_G(dg);
    CLOSE_G(pg);
    CLOSE_G(g);
    return st;
}

qc_status qc_golden_write(const char *path, const qc_golden *g, qc_err *err) {
    qc_status st = QC_OK;
    hid_t f = H5I_INVALID_HID, root = H5I_INVALID_HID, cases = H5I_INVALID_HID;
    wr_ctx w = {path, err};
    char h5msg[300];
    gio_h5_quiet();
    if (!g->config_json)
        return qc_errf(err, QC_ERR_ARG, "%s: /config_json: no config text", path);
    for (int i = 0; i < g->n_cases; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(g->cases[i].name, g->cases[j].name) == 0)
                return qc_errf(err, QC_ERR_ARG, "%s: /cases/%s: duplicate case name", path,
                               g->cases[i].name);

    /* the temp file beside the target (qc_outpath: validated, never an input of the run,
     * removed on every error path and on SIGINT / SIGTERM); HDF5 writes it by name */
    qc_out out;
    if ((st = qc_out_open(&out, path, QC_OUT_REGULAR, err))) return st;
    f = H5Fcreate(out.tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        st = qc_errf(err, QC_ERR_IO, "%s: cannot create %s: %s", path, out.tmp,
                     gio_h5_errdesc(h5msg, sizeof h5msg));
        qc_out_abort(&out);
        return st;
    }
    root = H5Gopen2(f, "/", H5P_DEFAULT);
    if (root < 0) {
        st = wr_fail(&w, "/");
        goto done;
    }
    if ((st = write_attr_int(&w, root, "/", "schema_version", QC_GOLDEN_SCHEMA_VERSION, 0)) ||
        (st = write_attr_string(&w, root, "/", "generator", g->generator)) ||
        (st = write_attr_string(&w, root, "/", "torch_version", g->torch_version)) ||
        (st = write_attr_int(&w, root, "/", "seed", g->seed, 1)) ||
        (st = write_attr_string(&w, root, "/", "compute_dtype", g->compute_dtype)) ||
        (st = write_attr_string(&w, root, "/", "model_path", g->model_path)) ||
        (st = write_attr_string(&w, root, "/", "config_sha256", g->config_sha256)) ||
        (st = write_attr_string(&w, root, "/", "weights_sha256", g->weights_sha256)) ||
        (st = write_attr_string(&w, root, "/", "config_json", g->config_json)))
        goto done;
    if ((st = make_group(&w, root, "cases", "/cases", &cases))) goto done;
    for (int i = 0; i < g->n_cases; i++)
        if ((st = write_case(&w, &g->cfg, cases, &g->cases[i]))) goto done;
done:
    CLOSE_G(cases);
    CLOSE_G(root);
    /* every dataset / attribute / type / space handle is closed on every path; but an I/O
     * error (disk full, file size limit) can make H5Dclose / H5Gclose fail (unchecked by the
     * CLOSE_* macros) and leave the object open: that is a failed write, not a crash. (Such
     * an object must not be closed again: libhdf5 1.10 can crash re-flushing it.) */
    int leaked = H5Fget_obj_count(f, H5F_OBJ_ALL | H5F_OBJ_LOCAL) != 1;
    if (!st && leaked) st = wr_fail(&w, "closing the file's objects (disk full?)");
    if (st) H5Eclear2(H5E_DEFAULT);
    herr_t closed = H5Fclose(f);
    if (closed < 0 && !st) st = wr_fail(&w, "closing the file");
    if (st) {
        /* after an I/O error libhdf5 may keep the file open and crash flushing it at exit:
         * mark the library unusable (main() then leaves with _exit, like after a fault) */
        if (leaked || closed < 0) gio_set_faulted();
        H5Eclear2(H5E_DEFAULT);
        qc_out_abort(&out);
        return st;
    }
    return qc_out_commit(&out, err); /* fsync + rename onto path */
}

