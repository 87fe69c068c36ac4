/* qc_actual_read.c — reading an ACTUAL file (golden/SCHEMA.md "Required and optional")
 * against its golden: the optional groups, the layouts (canonical, Hugging Face, llama.cpp conv state),
 * non-finite values kept for the comparison to report.
 *
 * Every message names the file and the dataset or attribute ("a.h5: /cases/len005/prefill/
 * logits: shape [2,5,256] fits no layout: ..."). HDF5 hygiene as in qc_golden_io.c: automatic
 * error printing off, presence probed before opening, every handle closed on every path.
 */

#include "qc_actual_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "qc_golden_internal.h"

/* ===================================================================================== */
/* a case                                                                                */
/* ===================================================================================== */

/* prefill/logits (+ prefill/logits_positions): every row, the last row, or the rows named. */
static qc_status ac_logits(const ac_ctx *c, qc_actual_case *ac, qc_layout layout, hid_t pg,
                           const char *ppath, const qc_config *cfg, const qc_golden_case *gc) {
    const long long V = cfg->vocab_size, T = gc->n_tokens, P = gc->start_pos;
    char path[512];
    snprintf(path, sizeof path, "%s/logits", ppath);
    int32_t *pos = NULL;
    int npos = -1;
    qc_status st = ac_ids(c, ac, layout, pg, ppath, "logits_positions", &pos, &npos);
    if (st) return st;
    long long R = npos >= 0 ? npos : -1;
    if (npos > T) {
        free(pos);
        return qc_errf(c->err, QC_ERR_SHAPE, "%s: %s/logits_positions: %d positions, the prompt "
                       "has %lld", c->file, ppath, npos, T);
    }
    /* variant 0: every row; 1: the last row; 2: the rows of logits_positions */
    ac_shape cand[6];
    int n = 0;
    if (npos >= 0) {
        cand[n++] = (ac_shape){AC_CANON, 2, {R, V}, 2, "canonical (logits_positions rows)"};
        cand[n++] = (ac_shape){AC_HF, 3, {1, R, V}, 2, "hf (logits_positions rows)"};
    } else {
        cand[n++] = (ac_shape){AC_CANON, 2, {T, V}, 0, "canonical"};
        cand[n++] = (ac_shape){AC_HF, 3, {1, T, V}, 0, "hf"};
        cand[n++] = (ac_shape){AC_HF, 1, {V}, 1, "hf last row"};
        cand[n++] = (ac_shape){AC_HF, 2, {1, V}, 1, "hf last row"};
        cand[n++] = (ac_shape){AC_HF, 3, {1, 1, V}, 1, "hf last row"};
    }
    int variant = 0;
    if (!gio_link_exists(pg, "logits")) {
        free(pos);
        if (gio_link_exists(pg, "topk")) return QC_OK; /* a top-k case: ac_topk reads it */
        return qc_errf(c->err, QC_ERR_MISSING, "%s: %s: missing dataset (the one tensor every "
                       "ACTUAL case must have, or prefill/topk: golden/SCHEMA.md)", c->file,
                       path);
    }
    st = ac_tensor(c, ac, layout, pg, ppath, "logits", 1, cand, n, &ac->prefill_logits, &variant);
    if (!st) {
        ac->n_rows = variant == 0 ? (int)T : variant == 1 ? 1 : npos;
        ac->rows = malloc((size_t)(ac->n_rows ? ac->n_rows : 1) * sizeof *ac->rows);
        if (!ac->rows) st = qc_errf(c->err, QC_ERR_OOM, "%s: out of memory", c->file);
        for (int r = 0; !st && r < ac->n_rows; r++) {
            if (variant == 0) ac->rows[r] = r;
            else if (variant == 1) ac->rows[r] = (int)T - 1;
            else {
                long long row = (long long)pos[r] - P;
                if (row < 0 || row >= T || (r > 0 && row <= ac->rows[r - 1]))
                    st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/logits_positions: [%d] = %d: not "
                                 "a prompt position in [%lld, %lld) in ascending order", c->file,
                                 ppath, r, (int)pos[r], P, P + T);
                else ac->rows[r] = (int)row;
            }
        }
        if (!st && ac->n_rows == 0)
            st = qc_errf(c->err, QC_ERR_SHAPE, "%s: %s: no row", c->file, path);
    }
    free(pos);
    return st;
}

/* The state tensors of <parentpath>/state: each optional, layer kinds from cfg. */
static qc_status ac_state(const ac_ctx *c, qc_actual_case *ac, qc_layout layout, hid_t parent,
                          const char *parentpath, const qc_config *cfg, int n_pos,
                          qc_golden_state *gs) {
    char spath[300];
    snprintf(spath, sizeof spath, "%s/state", parentpath);
    memset(gs, 0, sizeof *gs);
    hid_t sg = gio_group_if(parent, "state");
    if (sg < 0) return QC_OK;
    qc_status st = gio_state_alloc_ptrs(cfg, gs);
    if (st) {
        CLOSE_G(sg);
        return qc_errf(c->err, QC_ERR_OOM, "%s: %s: out of memory", c->file, spath);
    }
    gs->n_pos = n_pos;
    const long long C = qc_cfg_conv_dim(cfg), K = cfg->conv_kernel, Hv = cfg->lin_n_v_heads,
                    Dk = cfg->lin_k_dim, Dv = cfg->lin_v_dim;
    const ac_shape cv[4] = {{AC_CANON, 2, {C, K}, 0, "canonical"},
                            {AC_HF, 3, {1, C, K}, 0, "hf"},
                            {AC_CANON, 2, {C, K - 1}, 1, "llama.cpp K-1 columns"},
                            {AC_HF, 3, {1, C, K - 1}, 1, "hf llama.cpp K-1 columns"}};
    const ac_shape rs[2] = {{AC_CANON, 3, {Hv, Dk, Dv}, 0, "canonical"},
                            {AC_HF, 4, {1, Hv, Dk, Dv}, 0, "hf"}};
    for (int l = 0; !st && l < cfg->n_layers; l++) {
        const int full = cfg->layer_types[l] == QC_LAYER_FULL;
        char lname[32], lpath[340];
        snprintf(lname, sizeof lname, "layer_%02d", l);
        snprintf(lpath, sizeof lpath, "%s/%s", spath, lname);
        hid_t lg = gio_group_if(sg, lname);
        if (lg < 0) continue;
        const char *wrong[2] = {full ? "conv_state" : "k_cache",
                                full ? "recurrent_state" : "v_cache"};
        for (int k = 0; k < 2; k++)
            if (gio_link_exists(lg, wrong[k]) && !ac->note[0])
                snprintf(ac->note, sizeof ac->note, "%s: %s/%s: ignored: layer %d is a %s layer "
                         "in the golden's config", c->file, lpath, wrong[k], l,
                         full ? "full_attention" : "linear_attention");
        int var = 0;
        if (!st && full) {
            st = ac_kv(c, ac, layout, lg, lpath, "k_cache", cfg, n_pos, &gs->k_cache[l]);
            if (!st) st = ac_kv(c, ac, layout, lg, lpath, "v_cache", cfg, n_pos, &gs->v_cache[l]);
        } else if (!st) {
            var = -1;
            st = ac_tensor(c, ac, layout, lg, lpath, "conv_state", 1, cv, 4, &gs->conv_state[l],
                           &var);
            if (!st && gs->conv_state[l]) {
                int cols = var == 1 ? (int)K - 1 : (int)K;
                if (ac->conv_cols && ac->conv_cols != cols)
                    st = qc_errf(c->err, QC_ERR_SHAPE, "%s: %s/conv_state: %d columns, another "
                                 "conv state of this case has %d", c->file, lpath, cols,
                                 ac->conv_cols);
                ac->conv_cols = cols;
                if (var == 1) ac->n_conv_k1++;
            }
            if (!st)
                st = ac_tensor(c, ac, layout, lg, lpath, "recurrent_state", 1, rs, 2,
                               &gs->recurrent_state[l], NULL);
        }
        if (gs->k_cache[l] || gs->v_cache[l] || gs->conv_state[l] || gs->recurrent_state[l])
            gs->present = 1;
        CLOSE_G(lg);
    }
    CLOSE_G(sg);
    return st;
}

static void ac_case_free(const qc_config *cfg, qc_actual_case *ac) {
    free(ac->history);
    free(ac->tokens);
    free(ac->decode_tokens);
    free(ac->rows);
    free(ac->prefill_logits);
    free(ac->prefill_hidden);
    free(ac->decode_logits);
    free(ac->prefill_topk_ids), free(ac->prefill_topk_weights);
    free(ac->decode_topk_ids), free(ac->decode_topk_weights);
    free(ac->prefill_tk_ids), free(ac->prefill_tk_lps);
    free(ac->decode_tk_ids), free(ac->decode_tk_lps);
    qc_golden_state_free(cfg, &ac->prefill_state);
    qc_golden_state_free(cfg, &ac->decode_state);
    qc_actual_case keep = *ac; /* the name and the layout counts stay */
    memset(ac, 0, sizeof *ac);
    memcpy(ac->name, keep.name, sizeof ac->name);
    ac->n_canonical = keep.n_canonical;
    ac->n_hf = keep.n_hf;
    ac->n_conv_k1 = keep.n_conv_k1;
    ac->n_static_kv = keep.n_static_kv;
    ac->n_history = ac->n_tokens = ac->n_decode_tokens = -1;
}

/* Case i's datasets from the open case group g. */
static qc_status ac_case_from(const ac_ctx *c, qc_actual *a, qc_actual_case *ac, hid_t g,
                              const char *casepath, const qc_config *cfg,
                              const qc_golden_case *gc) {
    qc_status st;
    hid_t pg = H5I_INVALID_HID, dg = H5I_INVALID_HID;
    char ppath[200], dpath[200];
    const long long L = cfg->n_layers, T = gc->n_tokens, H = cfg->hidden_size,
                    V = cfg->vocab_size, S = gc->n_decode, P = gc->start_pos;
    int64_t v = 0;
    int present = 0;
    snprintf(ppath, sizeof ppath, "%s/prefill", casepath);
    snprintf(dpath, sizeof dpath, "%s/decode", casepath);
    if ((st = ac_attr_int(c, g, casepath, "start_pos", &v, &present))) return st;
    ac->has_start_pos = present;
    ac->start_pos = !present ? 0 : v < 0 ? -1 : v > (1 << 30) ? (1 << 30) : (int)v;
    if ((st = ac_ids(c, ac, a->layout, g, casepath, "history_tokens", &ac->history,
                     &ac->n_history)) ||
        (st = ac_ids(c, ac, a->layout, g, casepath, "tokens", &ac->tokens, &ac->n_tokens)))
        return st;
    if ((pg = gio_group_if(g, "prefill")) < 0)
        return qc_errf(c->err, QC_ERR_MISSING, "%s: %s/logits: missing dataset (the one tensor "
                       "every ACTUAL case must have)", c->file, ppath);
    if ((st = ac_logits(c, ac, a->layout, pg, ppath, cfg, gc))) goto done;
    const ac_shape hid[3] = {{AC_CANON, 3, {L + 1, T, H}, 0, "canonical"},
                             {AC_HF, 4, {L + 1, 1, T, H}, 0, "hf stacked hidden_states"},
                             {AC_HF, 4, {1, L + 1, T, H}, 0, "hf"}};
    if ((st = ac_tensor(c, ac, a->layout, pg, ppath, "hidden", 1, hid, 3, &ac->prefill_hidden,
                        NULL)))
        goto done;
    if ((st = ac_state(c, ac, a->layout, pg, ppath, cfg, (int)(P + T), &ac->prefill_state)))
        goto done;
    if ((st = ac_router(c, pg, ppath, cfg, (int)T, &ac->prefill_topk_ids,
                        &ac->prefill_topk_weights)))
        goto done;
    if ((st = ac_topk(c, pg, ppath, cfg, (int)T, &ac->tk_k, &ac->prefill_tk_ids,
                      &ac->prefill_tk_lps)))
        goto done;
    if (!ac->prefill_logits && !ac->prefill_tk_ids) {
        st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/topk: not a group of ids and logprobs "
                     "(and no %s/logits)", c->file, ppath, ppath);
        goto done;
    }
    if ((dg = gio_group_if(g, "decode")) >= 0) {
        if ((st = ac_ids(c, ac, a->layout, dg, dpath, "tokens", &ac->decode_tokens,
                         &ac->n_decode_tokens)))
            goto done;
        const char *extra = gio_link_exists(dg, "logits") ? "logits"
                            : gio_link_exists(dg, "topk") ? "topk" : NULL;
        if (extra && S == 0) {
            st = qc_errf(c->err, QC_ERR_FORMAT, "%s: %s/%s: the golden case has no decode "
                         "steps", c->file, dpath, extra);
            goto done;
        }
        if (gio_link_exists(dg, "topk") && !ac->prefill_tk_ids) {
            st = qc_errf(c->err, QC_ERR_MISSING, "%s: %s/topk: top-k decode rows without "
                         "%s/topk (a top-k case has both; golden/SCHEMA.md)", c->file, dpath,
                         ppath);
            goto done;
        }
        if (S > 0 && (st = ac_topk(c, dg, dpath, cfg, (int)S, &ac->tk_k, &ac->decode_tk_ids,
                                   &ac->decode_tk_lps)))
            goto done;
        const ac_shape dl[3] = {{AC_CANON, 2, {S, V}, 0, "canonical"},
                                {AC_HF, 3, {1, S, V}, 0, "hf"},
                                {AC_HF, 3, {S, 1, V}, 0, "hf stacked scores"}};
        if (S > 0 && (st = ac_tensor(c, ac, a->layout, dg, dpath, "logits", 1, dl, 3,
                                     &ac->decode_logits, NULL)))
            goto done;
        ac->has_decode_logits = ac->decode_logits != NULL;
        if (S > 0 &&
            (st = ac_state(c, ac, a->layout, dg, dpath, cfg, (int)(P + T + S), &ac->decode_state)))
            goto done;
        if (S > 0 && (st = ac_router(c, dg, dpath, cfg, (int)S, &ac->decode_topk_ids,
                                     &ac->decode_topk_weights)))
            goto done;
    }
done:
    CLOSE_G(dg);
    CLOSE_G(pg);
    return st;
}

qc_status qc_actual_load_case(qc_actual *a, int i, const qc_config *cfg,
                              const qc_golden_case *gc, qc_err *err) {
    ac_ctx c = {a->path, err};
    char casepath[100], h5msg[300];
    qc_actual_case *ac = &a->cases[i];
    if (ac->loaded) return QC_OK;
    gio_h5_quiet();
    hid_t f = H5Fopen(a->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return qc_errf(err, QC_ERR_HDF5, "%s: cannot open: %s", a->path,
                       gio_h5_errdesc(h5msg, sizeof h5msg));
    snprintf(casepath, sizeof casepath, "/cases/%s", ac->name);
    hid_t cg = gio_group_if(f, "cases"), g = gio_group_if(cg, ac->name);
    qc_status st;
    if (g < 0) st = qc_errf(err, QC_ERR_FORMAT, "%s: %s: not a group", a->path, casepath);
    else st = ac_case_from(&c, a, ac, g, casepath, cfg, gc);
    CLOSE_G(g);
    CLOSE_G(cg);
    H5Fclose(f);
    if (st) ac_case_free(cfg, ac);
    else ac->loaded = 1;
    return st;
}

/* ===================================================================================== */
/* the file                                                                              */
/* ===================================================================================== */

/* 1 when case groups x and y are one object (two links to it). */
static int ac_same_object(hid_t cg, const char *x, const char *y) {
#if H5_VERSION_GE(1, 12, 0)
    H5O_info2_t ix, iy;
    if (H5Oget_info_by_name3(cg, x, &ix, H5O_INFO_BASIC, H5P_DEFAULT) < 0 ||
        H5Oget_info_by_name3(cg, y, &iy, H5O_INFO_BASIC, H5P_DEFAULT) < 0) {
        H5Eclear2(H5E_DEFAULT);
        return 0;
    }
    int cmp = 1;
    H5Otoken_cmp(cg, &ix.token, &iy.token, &cmp);
    return ix.fileno == iy.fileno && cmp == 0;
#else
    H5O_info_t ix, iy;
    if (H5Oget_info_by_name2(cg, x, &ix, H5O_INFO_BASIC, H5P_DEFAULT) < 0 ||
        H5Oget_info_by_name2(cg, y, &iy, H5O_INFO_BASIC, H5P_DEFAULT) < 0) {
        H5Eclear2(H5E_DEFAULT);
        return 0;
    }
    return ix.fileno == iy.fileno && ix.addr == iy.addr;
#endif
}

/* Case names: valid, each group once (no two links to one group, no names equal but for
 * case: both are duplicates of one case). */
static qc_status ac_case_names(const ac_ctx *c, qc_actual *a, hid_t cg, name_list *nl) {
    for (int i = 0; i < nl->n; i++) {
        const char *nm = nl->names[i];
        if (strlen(nm) >= sizeof a->cases[0].name || !gio_valid_case_name(nm))
            return qc_errf(c->err, QC_ERR_FORMAT, "%s: /cases/%s: invalid case name (want "
                           "[A-Za-z0-9_-]+, at most 63 chars)", c->file, nm);
        hid_t g = gio_group_if(cg, nm);
        if (g < 0)
            return qc_errf(c->err, QC_ERR_FORMAT, "%s: /cases/%s: not a group", c->file, nm);
        CLOSE_G(g);
    }
    for (int i = 0; i < nl->n; i++)
        for (int j = i + 1; j < nl->n; j++) {
            if (!strcasecmp(nl->names[i], nl->names[j]))
                return qc_errf(c->err, QC_ERR_FORMAT, "%s: /cases/%s and /cases/%s: duplicated "
                               "case (names that differ only in case)", c->file, nl->names[i],
                               nl->names[j]);
            if (ac_same_object(cg, nl->names[i], nl->names[j]))
                return qc_errf(c->err, QC_ERR_FORMAT, "%s: /cases/%s and /cases/%s: duplicated "
                               "case (two links to one group)", c->file, nl->names[i],
                               nl->names[j]);
        }
    return QC_OK;
}

static qc_status ac_root(const ac_ctx *c, qc_actual *a, hid_t root) {
    int64_t v = 0;
    int present = 0;
    qc_status st = ac_attr_int(c, root, "/", "schema_version", &v, &present);
    if (st) return st;
    if (!present)
        return qc_errf(c->err, QC_ERR_MISSING, "%s: / (attr schema_version): missing (an ACTUAL "
                       "file needs schema_version 1 and /cases; golden/SCHEMA.md)", c->file);
    if (v != QC_GOLDEN_SCHEMA_VERSION)
        return qc_errf(c->err, QC_ERR_FORMAT, "%s: / (attr schema_version): %lld is not supported "
                       "(this reader handles schema %d)", c->file, (long long)v,
                       QC_GOLDEN_SCHEMA_VERSION);
    a->schema_version = (int)v;
    /* the optional attributes: one of the wrong type, too long or not a hex SHA-256 is ignored
     * with a note (they are informational or compared; an unreadable one is an error) */
    struct { const char *name; char *buf; size_t n; } opt[4] = {
        {"generator", a->generator, sizeof a->generator},
        {"compute_dtype", a->compute_dtype, sizeof a->compute_dtype},
        {"config_sha256", a->config_sha256, sizeof a->config_sha256},
        {"weights_sha256", a->weights_sha256, sizeof a->weights_sha256}};
    for (int k = 0; k < 5; k++) {
        st = k < 4 ? ac_attr_buf(c, root, "/", opt[k].name, opt[k].buf, opt[k].n)
                   : ac_attr_str(c, root, "/", "config_json", &a->config_json);
        if (!st && k >= 2 && k < 4) {
            size_t n = strlen(opt[k].buf);
            int ok = n == 0 || n == 64;
            for (size_t i = 0; ok && i < n; i++) ok = isxdigit((unsigned char)opt[k].buf[i]) != 0;
            if (!ok) {
                st = qc_errf(c->err, QC_ERR_FORMAT, "%s: / (attr %s): not a hex SHA-256",
                             c->file, opt[k].name);
                opt[k].buf[0] = '\0';
            }
        }
        if (st == QC_ERR_FORMAT) {
            size_t o = strlen(a->notes);
            snprintf(a->notes + o, sizeof a->notes - o, "%s%s: ignored", o ? "; " : "",
                     c->err->msg);
            qc_err_clear(c->err);
            st = QC_OK;
        }
        if (st) return st;
    }
    return QC_OK;
}

qc_status qc_actual_open(const char *path, qc_layout layout, qc_actual **out, qc_err *err) {
    qc_status st = QC_OK;
    hid_t f = H5I_INVALID_HID, root = H5I_INVALID_HID, cg = H5I_INVALID_HID;
    name_list nl = {0};
    char h5msg[300];
    ac_ctx c = {path, err};
    *out = NULL;
    gio_h5_quiet();
    struct stat sb;
    if (stat(path, &sb) != 0 || access(path, R_OK) != 0)
        return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return qc_errf(err, QC_ERR_IO, "%s: not a regular file", path);
    if (H5Fis_hdf5(path) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return qc_errf(err, QC_ERR_FORMAT, "%s: not an HDF5 file (truncated?)", path);
    }
    qc_actual *a = calloc(1, sizeof *a);
    if (!a) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    snprintf(a->path, sizeof a->path, "%s", path);
    a->layout = layout;
    if ((f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0 ||
        (root = H5Gopen2(f, "/", H5P_DEFAULT)) < 0) {
        st = qc_errf(err, QC_ERR_HDF5, "%s: cannot open: %s", path,
                     gio_h5_errdesc(h5msg, sizeof h5msg));
        goto done;
    }
    if ((st = ac_root(&c, a, root))) goto done;
    if ((cg = gio_group_if(f, "cases")) < 0) {
        st = qc_errf(err, QC_ERR_MISSING, "%s: /cases: missing group", path);
        goto done;
    }
    hsize_t idx = 0;
    if (H5Literate(cg, H5_INDEX_NAME, H5_ITER_INC, &idx, gio_collect_names, &nl) < 0) {
        st = nl.oom ? qc_errf(err, QC_ERR_OOM, "%s: /cases: out of memory", path)
                    : qc_errf(err, QC_ERR_HDF5, "%s: /cases: %s", path,
                              gio_h5_errdesc(h5msg, sizeof h5msg));
        goto done;
    }
    if (nl.n == 0) {
        st = qc_errf(err, QC_ERR_MISSING, "%s: /cases: empty (no case)", path);
        goto done;
    }
    qsort(nl.names, (size_t)nl.n, sizeof *nl.names, gio_cmp_str);
    if ((st = ac_case_names(&c, a, cg, &nl))) goto done;
    if (!(a->cases = calloc((size_t)nl.n, sizeof *a->cases))) {
        st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
        goto done;
    }
    a->n_cases = nl.n;
    for (int i = 0; i < nl.n; i++) {
        snprintf(a->cases[i].name, sizeof a->cases[i].name, "%s", nl.names[i]);
        a->cases[i].n_history = a->cases[i].n_tokens = a->cases[i].n_decode_tokens = -1;
    }
done:
    for (int i = 0; i < nl.n; i++) free(nl.names[i]);
    free(nl.names);
    CLOSE_G(cg);
    CLOSE_G(root);
    if (f >= 0) H5Fclose(f);
    if (st) {
        qc_actual_free(a, NULL);
        return st;
    }
    *out = a;
    return QC_OK;
}

void qc_actual_unload_case(qc_actual *a, int i, const qc_config *cfg) {
    if (a && i >= 0 && i < a->n_cases) ac_case_free(cfg, &a->cases[i]);
}

int qc_actual_find(const qc_actual *a, const char *name) {
    for (int i = 0; a && i < a->n_cases; i++)
        if (!strcmp(a->cases[i].name, name)) return i;
    return -1;
}

const char *qc_actual_layout_str(const qc_actual *a, char *buf, size_t n) {
    int nc = 0, nh = 0, k1 = 0, sk = 0;
    for (int i = 0; i < a->n_cases; i++) {
        nc += a->cases[i].n_canonical;
        nh += a->cases[i].n_hf;
        k1 += a->cases[i].n_conv_k1;
        sk += a->cases[i].n_static_kv;
    }
    const char *asked = a->layout == QC_LAYOUT_AUTO ? "auto"
                        : a->layout == QC_LAYOUT_HF ? "hf"
                                                    : "canonical";
    char extra[300] = "";
    size_t o = 0;
    if (k1)
        o += (size_t)snprintf(extra, sizeof extra, "; %d conv states with K-1 columns (llama.cpp), "
                              "compared on their K-1 newest columns", k1);
    if (sk && o < sizeof extra)
        snprintf(extra + o, sizeof extra - o, "; %d k/v caches of a larger static cache, compared "
                 "on the case's positions", sk);
    if (nh == 0)
        snprintf(buf, n, "%s -> canonical (%d datasets in the golden's shapes%s)", asked, nc,
                 extra);
    else if (nc == 0)
        snprintf(buf, n, "%s -> hf (%d datasets in Hugging Face shapes: batch dim 1, last-row "
                 "logits%s)", asked, nh, extra);
    else
        snprintf(buf, n, "%s -> mixed (%d datasets in the golden's shapes, %d in Hugging Face "
                 "shapes%s)", asked, nc, nh, extra);
    return buf;
}

void qc_actual_free(qc_actual *a, const qc_config *cfg) {
    if (!a) return;
    for (int i = 0; i < a->n_cases; i++)
        if (cfg) ac_case_free(cfg, &a->cases[i]);
    free(a->cases);
    free(a->config_json);
    free(a);
}
