/* golden_builder.h — build golden HDF5 files (schema v1) item by item, valid or broken on
 * purpose: the structure-aware input of fuzz/fuzz_golden.c and the bad goldens of
 * tests/test_badinput.c (header only; needs hdf5.h and fuzz/tiny_model.h).
 *
 * A golden is a list of items (one root / case attribute or one dataset each) for the tiny
 * model of tiny_model.h: base_program() fills a valid file with two cases ("c1": 3 tokens +
 * 2 decode steps; "c2": a continuation at start_pos 2, no decode); edits change items
 * (gb_find() by path), apply_edit() applies one fuzz edit [op, item, a, b];
 * write_program() writes the file with the HDF5 API (datasets first, then attributes).
 */
#ifndef QC_GOLDEN_BUILDER_H
#define QC_GOLDEN_BUILDER_H

#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tiny_model.h"

/* ===================================================================================== */
/* Items                                                                                 */
/* ===================================================================================== */

enum { T_I32, T_I64, T_F32, T_F64, T_STR_VL, T_STR_FIX, T_COUNT };

#define MAX_ITEMS 96
#define MAX_STR 4096

typedef struct {
    char obj[160];      /* object path ("/", "/cases/c1", "/cases/c1/prefill/logits") */
    char attr[32];      /* attribute name, "" for a dataset */
    int type;           /* T_* */
    int rank;           /* 0 = scalar, else 1..4 */
    hsize_t dims[4];    /* extents */
    int64_t ival;       /* integer scalar attributes */
    char *sval;         /* string attributes (owned) */
    int64_t poke_at;    /* flat index given a special value (-1 none) */
    int poke_kind;      /* 0 NaN, 1 +Inf, 2 -Inf, 3 int value poke_ival */
    int64_t poke_ival;  /* integer poke */
    int deleted;        /* 1: not written */
} item;

typedef struct {
    item it[MAX_ITEMS];
    int n;
    long truncate_to;   /* > 0: truncate the written file to this many bytes */
} golden_prog;

static inline void add_attr_int(golden_prog *g, const char *obj, const char *name, int type, int64_t v) {
    item *x = &g->it[g->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->obj, sizeof x->obj, "%s", obj);
    snprintf(x->attr, sizeof x->attr, "%s", name);
    x->type = type;
    x->ival = v;
    x->poke_at = -1;
}

static inline void add_attr_str(golden_prog *g, const char *obj, const char *name, const char *s) {
    add_attr_int(g, obj, name, T_STR_VL, 0);
    g->it[g->n - 1].sval = strdup(s);
}

static inline void add_dset(golden_prog *g, const char *obj, int type, int rank, hsize_t d0, hsize_t d1,
                     hsize_t d2) {
    item *x = &g->it[g->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->obj, sizeof x->obj, "%s", obj);
    x->type = type;
    x->rank = rank;
    x->dims[0] = d0, x->dims[1] = d1, x->dims[2] = d2, x->dims[3] = 1;
    x->poke_at = -1;
}

static inline void add_state(golden_prog *g, const char *base, int n_pos) {
    char p[160];
    snprintf(p, sizeof p, "%s/layer_00/conv_state", base);
    add_dset(g, p, T_F32, 2, TM_C, TM_K, 0);
    snprintf(p, sizeof p, "%s/layer_00/recurrent_state", base);
    add_dset(g, p, T_F32, 3, TM_NV, TM_DK, TM_DV);
    snprintf(p, sizeof p, "%s/layer_01/k_cache", base);
    add_dset(g, p, T_F32, 3, TM_NKV, (hsize_t)n_pos, TM_HD);
    snprintf(p, sizeof p, "%s/layer_01/v_cache", base);
    add_dset(g, p, T_F32, 3, TM_NKV, (hsize_t)n_pos, TM_HD);
}

static inline void base_program(golden_prog *g) {
    memset(g, 0, sizeof *g);
    add_attr_int(g, "/", "schema_version", T_I32, 1);
    add_attr_str(g, "/", "generator", "qwen-conform fuzz 1.0");
    add_attr_str(g, "/", "torch_version", "");
    add_attr_int(g, "/", "seed", T_I64, 7);
    add_attr_str(g, "/", "compute_dtype", "float32");
    add_attr_str(g, "/", "model_path", "model");
    add_attr_str(g, "/", "config_sha256",
                 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    add_attr_str(g, "/", "weights_sha256", "");
    add_attr_str(g, "/", "config_json", TM_CONFIG);
    /* c1: T = 3, S = 2 */
    add_attr_int(g, "/cases/c1", "start_pos", T_I32, 0);
    add_attr_str(g, "/cases/c1", "description", "fuzz case 1");
    add_dset(g, "/cases/c1/tokens", T_I32, 1, 3, 0, 0);
    add_dset(g, "/cases/c1/prefill/logits", T_F32, 2, 3, TM_V, 0);
    add_dset(g, "/cases/c1/prefill/hidden", T_F32, 3, TM_L + 1, 3, TM_H);
    add_state(g, "/cases/c1/prefill/state", 3);
    add_dset(g, "/cases/c1/decode/tokens", T_I32, 1, 2, 0, 0);
    add_dset(g, "/cases/c1/decode/logits", T_F32, 2, 2, TM_V, 0);
    add_dset(g, "/cases/c1/decode/margins", T_F32, 1, 2, 0, 0);
    add_state(g, "/cases/c1/decode/state", 5);
    /* c2: continuation, P = 2, T = 1, no decode */
    add_attr_int(g, "/cases/c2", "start_pos", T_I32, 2);
    add_attr_int(g, "/cases/c2", "max_seq_len", T_I32, 16);
    add_dset(g, "/cases/c2/history_tokens", T_I32, 1, 2, 0, 0);
    add_dset(g, "/cases/c2/tokens", T_I32, 1, 1, 0, 0);
    add_dset(g, "/cases/c2/prefill/logits", T_F32, 2, 1, TM_V, 0);
    add_state(g, "/cases/c2/prefill/state", 3);
}

static inline void free_program(golden_prog *g) {
    for (int i = 0; i < g->n; i++) free(g->it[i].sval);
}

/* The item at object path obj (attribute attr, or "" / NULL for a dataset), or NULL. */
static inline item *gb_find(golden_prog *g, const char *obj, const char *attr) {
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->it[i].obj, obj) && !strcmp(g->it[i].attr, attr ? attr : ""))
            return &g->it[i];
    return NULL;
}

/* ===================================================================================== */
/* Edits                                                                                 */
/* ===================================================================================== */

static const int64_t EXTREMES[8] = {0, -1, 1, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, TM_V};

static inline void apply_edit(golden_prog *g, const uint8_t op[4]) {
    if (g->n == 0) return;
    item *x = &g->it[op[1] % g->n];
    uint8_t a = op[2], b = op[3];
    switch (op[0] % 12) {
    case 0: x->deleted = 1; break;
    case 1: /* extent */
        if (x->rank) x->dims[a % x->rank] = b % 64;
        break;
    case 2: /* rank */
        x->rank = a % 5;
        for (int d = 0; d < 4; d++)
            if (x->dims[d] == 0 && d < x->rank) x->dims[d] = 1 + b % 4;
        break;
    case 3: /* HDF5 type */
        x->type = a % T_COUNT;
        if ((x->type == T_STR_VL || x->type == T_STR_FIX) && !x->sval) x->sval = strdup("x");
        break;
    case 4: /* special float / int value at an index */
        x->poke_at = (int64_t)b;
        x->poke_kind = a % 4;
        x->poke_ival = (int64_t)((uint64_t)EXTREMES[(a >> 2) % 8] + (uint64_t)(int64_t)((int8_t)b % 3));
        break;
    case 5: /* integer attribute value */
        x->ival = (a & 1) ? EXTREMES[(a >> 1) % 8] : (int64_t)(int8_t)b;
        break;
    case 6: /* string: truncate or overwrite one byte */
        if (x->sval) {
            size_t len = strlen(x->sval);
            if (a & 1) {
                if (b < len) x->sval[b] = '\0';
            } else if (len) {
                x->sval[(size_t)a % len] = (char)(b ? b : ' ');
            }
        }
        break;
    case 7: /* rename the case group "c1" / "c2" of this item */
        if (!strncmp(x->obj, "/cases/c", 8)) {
            static const char *names[] = {"c 1", "..", "c1.", "zz", "c2", "c1", "a-b_9", "%"};
            char caseid[4] = {x->obj[7], x->obj[8], 0, 0};
            for (int i = 0; i < g->n; i++)
                if (!strncmp(g->it[i].obj, "/cases/", 7) && !strncmp(g->it[i].obj + 7, caseid, 2) &&
                    (g->it[i].obj[9] == '/' || g->it[i].obj[9] == 0)) {
                    char tail[140]; /* paths below the case are short (< 60 chars) */
                    snprintf(tail, sizeof tail, "%.139s", g->it[i].obj + 9);
                    snprintf(g->it[i].obj, sizeof g->it[i].obj, "/cases/%.8s%s", names[b % 8], tail);
                }
        }
        break;
    case 8: /* add an unknown dataset beside this item */
        if (g->n < MAX_ITEMS) {
            item *y = &g->it[g->n++];
            *y = *x;
            y->sval = x->sval ? strdup(x->sval) : NULL;
            y->deleted = 0;
            y->attr[0] = '\0';
            size_t l = strlen(y->obj);
            snprintf(y->obj + l, sizeof y->obj - l, "_x%u", b % 4);
            if (!y->rank) y->rank = 1, y->dims[0] = 1 + a % 8;
            if (y->type >= T_STR_VL) y->type = T_F32;
        }
        break;
    case 9: /* cut an object path at its k-th '/': a dataset where a group belongs */
        if (!x->attr[0]) {
            int k = 2 + a % 4, seen = 0;
            for (char *p = x->obj + 1; *p; p++)
                if (*p == '/' && ++seen == k) {
                    *p = '\0';
                    break;
                }
        }
        break;
    case 10: g->truncate_to = 512 + (long)a * 64 + b; break;
    case 11: /* attribute becomes an array of 2 */
        if (x->attr[0]) x->rank = 1, x->dims[0] = 1 + b % 3;
        break;
    }
}

/* ===================================================================================== */
/* Writing                                                                               */
/* ===================================================================================== */

static inline hid_t h5type(int t, const char *s) {
    switch (t) {
    case T_I32: return H5Tcopy(H5T_STD_I32LE);
    case T_I64: return H5Tcopy(H5T_STD_I64LE);
    case T_F32: return H5Tcopy(H5T_IEEE_F32LE);
    case T_F64: return H5Tcopy(H5T_IEEE_F64LE);
    default: {
        hid_t st = H5Tcopy(H5T_C_S1);
        H5Tset_size(st, t == T_STR_VL ? H5T_VARIABLE : (s && s[0] ? strlen(s) : 1));
        H5Tset_cset(st, H5T_CSET_UTF8);
        return st;
    }
    }
}

/* Make every group above `obj` (and obj itself when make_self). Returns the object's id
 * (opened) or a negative value when a component exists as a non-group. */
static inline hid_t ensure_groups(hid_t f, const char *obj, int make_self) {
    char p[160];
    size_t n = strlen(obj);
    if (n <= 1) return make_self ? H5Oopen(f, "/", H5P_DEFAULT) : 0;
    for (size_t i = 1; i <= n; i++) {
        if (obj[i] != '/' && obj[i] != '\0') continue;
        if (obj[i] == '\0' && !make_self) break;
        memcpy(p, obj, i);
        p[i] = '\0';
        htri_t ex = H5Lexists(f, p, H5P_DEFAULT);
        if (ex < 0) return -1;
        if (!ex) {
            hid_t gg = H5Gcreate2(f, p, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            if (gg < 0) return -1;
            H5Gclose(gg);
        }
    }
    return make_self ? H5Oopen(f, obj, H5P_DEFAULT) : 0;
}

static inline void fill_numeric(const item *x, void *buf, size_t numel) {
    for (size_t i = 0; i < numel; i++) {
        double v = (double)((i * 7 + 3) % TM_V); /* ids in [0, V); floats small */
        int poke = x->poke_at >= 0 && (size_t)x->poke_at == i;
        if (x->type == T_F32 || x->type == T_F64) {
            v = v / 16.0 - 1.0;
            if (poke) v = x->poke_kind == 0 ? NAN : x->poke_kind == 1 ? INFINITY
                          : x->poke_kind == 2 ? -INFINITY : (double)x->poke_ival;
            if (x->type == T_F32) ((float *)buf)[i] = (float)v;
            else ((double *)buf)[i] = v;
        } else {
            int64_t iv = poke ? x->poke_ival : (int64_t)v;
            if (x->type == T_I32) ((int32_t *)buf)[i] = (int32_t)iv;
            else ((int64_t *)buf)[i] = iv;
        }
    }
}

static inline void write_item(hid_t f, const item *x) {
    hsize_t dims[4];
    size_t numel = 1;
    for (int d = 0; d < x->rank; d++) dims[d] = x->dims[d], numel *= (size_t)x->dims[d];
    hid_t sp = x->rank ? H5Screate_simple(x->rank, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t ty = h5type(x->type, x->sval);
    const int is_str = x->type == T_STR_VL || x->type == T_STR_FIX;
    void *buf = NULL;
    const char **strs = NULL;
    if (is_str) {
        strs = (const char **)malloc((numel ? numel : 1) * sizeof *strs);
        for (size_t i = 0; i < numel; i++) strs[i] = x->sval ? x->sval : "";
        if (x->type == T_STR_FIX) {
            size_t sz = H5Tget_size(ty);
            buf = calloc(numel ? numel : 1, sz);
            for (size_t i = 0; i < numel; i++) memcpy((char *)buf + i * sz, strs[i], strlen(strs[i]) < sz ? strlen(strs[i]) : sz);
        }
    } else {
        buf = calloc(numel ? numel : 1, 8);
        if (x->attr[0] && x->rank == 0) {
            if (x->type == T_I32) *(int32_t *)buf = (int32_t)x->ival;
            else if (x->type == T_I64) *(int64_t *)buf = x->ival;
            else if (x->type == T_F32) *(float *)buf = (float)x->ival;
            else *(double *)buf = (double)x->ival;
        } else {
            fill_numeric(x, buf, numel);
            if (x->attr[0] && numel) /* arrays of an integer attribute repeat the value */
                for (size_t i = 0; i < numel; i++)
                    if (x->type == T_I32) ((int32_t *)buf)[i] = (int32_t)x->ival;
        }
    }
    const void *wbuf = (is_str && x->type == T_STR_VL) ? (const void *)strs : buf;
    if (x->attr[0]) {
        hid_t o = ensure_groups(f, x->obj, 1);
        if (o >= 0) {
            hid_t a = H5Acreate2(o, x->attr, ty, sp, H5P_DEFAULT, H5P_DEFAULT);
            if (a >= 0) {
                H5Awrite(a, ty, wbuf);
                H5Aclose(a);
            }
            H5Oclose(o);
        }
    } else if (ensure_groups(f, x->obj, 0) >= 0 && H5Lexists(f, x->obj, H5P_DEFAULT) == 0) {
        hid_t d = H5Dcreate2(f, x->obj, ty, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (d >= 0) {
            if (numel) H5Dwrite(d, ty, H5S_ALL, H5S_ALL, H5P_DEFAULT, wbuf);
            H5Dclose(d);
        }
    }
    free(buf);
    free(strs);
    H5Tclose(ty);
    H5Sclose(sp);
}

static inline int write_program(const golden_prog *g, const char *path) {
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return -1;
    /* datasets first so that a dataset put where a group belongs wins; then attributes */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < g->n; i++)
            if (!g->it[i].deleted && (pass == 0) == (g->it[i].attr[0] == '\0'))
                write_item(f, &g->it[i]);
    H5Fclose(f);
    if (g->truncate_to > 0) {
        struct stat sb;
        if (stat(path, &sb) == 0 && sb.st_size > g->truncate_to &&
            truncate(path, g->truncate_to) != 0)
            return -1;
    }
    return 0;
}

#endif /* QC_GOLDEN_BUILDER_H */
