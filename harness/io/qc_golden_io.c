/* qc_golden_io.c — golden files (HDF5 schema v1) in memory: open + validate (lazily or whole),
 * load / unload cases (writing: qc_golden_write.c; finding files: qc_golden_find.c). A case's
 * metadata and tensors: qc_golden_case.c; the HDF5 primitives: qc_golden_h5.c.
 *
 * The layout is the binding list in golden/SCHEMA.md. Reading checks every dataset's presence,
 * type class (float / integer), rank and shape against the config parsed from the file's own
 * config_json attribute, and that every float is finite. Every message names the file and the
 * dataset or attribute path ("g.h5: /cases/len005/prefill/logits: NaN at [3,17]").
 *
 * Reading is bounded before it allocates: qc_golden_open_lazy probes every dataset (type,
 * rank, extents via H5Sget_simple_extent_dims) against the counts and the config without
 * reading it, and bounds the positions; qc_golden_load_case reads one case, probing each
 * dataset again against that metadata before allocating it.
 *
 * HDF5 hygiene (ecosystem notes 3.2): automatic error printing is switched off, presence is
 * probed with H5Lexists / H5Aexists before opening, every handle is closed on every path
 * (single cleanup label per function), numbers are read through native memory types, strings
 * are variable-length UTF-8 scalars on write and either VL or fixed-length on read.
 */
#include "qc_golden.h"

#include <ctype.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "qc/qc_memplan.h"
#include "qc_golden_internal.h"

/* ===================================================================================== */
/* small helpers                                                                         */
/* ===================================================================================== */

static int valid_sha(const char *s) {
    size_t n = strlen(s);
    if (n == 0) return 1; /* synthetic models have no hash */
    if (n != 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return 1;
}

/* A file access property list for reading: a small metadata cache (1 MiB, at most 4 MiB)
 * instead of the default 2 / 32 MiB: a golden's metadata is read once, front to back, so a
 * large cache only holds memory (a 2000-case golden: ~40 MB less resident). H5P_DEFAULT
 * when the list cannot be made. The caller closes it (CLOSE_P). */
static hid_t read_fapl(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) {
        H5Eclear2(H5E_DEFAULT);
        return H5P_DEFAULT;
    }
    H5AC_cache_config_t cc;
    memset(&cc, 0, sizeof cc);
    cc.version = H5AC__CURR_CACHE_CONFIG_VERSION;
    if (H5Pget_mdc_config(fapl, &cc) >= 0) {
        cc.set_initial_size = 1;
        cc.initial_size = (size_t)1 << 20;
        cc.min_size = (size_t)1 << 20;
        cc.max_size = (size_t)4 << 20;
        if (H5Pset_mdc_config(fapl, &cc) < 0) H5Eclear2(H5E_DEFAULT);
    } else {
        H5Eclear2(H5E_DEFAULT);
    }
    return fapl;
}

static void resolve_model_dir(const char *file, const char *model_path, char *out, size_t n) {
    if (model_path[0] == '\0') {
        out[0] = '\0';
    } else if (model_path[0] == '/') {
        snprintf(out, n, "%s", model_path);
    } else {
        const char *slash = strrchr(file, '/');
        if (!slash)
            snprintf(out, n, "%s", model_path);
        else
            snprintf(out, n, "%.*s/%s", (int)(slash - file + (slash == file)), file,
                     model_path);
    }
}

/* ===================================================================================== */
/* public: open / load / free                                                            */
/* ===================================================================================== */

static int64_t mtime_ns(const struct stat *sb) {
    return (int64_t)sb->st_mtim.tv_sec * 1000000000 + (int64_t)sb->st_mtim.tv_nsec;
}

/* Load every case from the open file f, after checking that the tensors fit in memory. */
static qc_status load_all(const gio_ctx *c, qc_golden *g, hid_t f) {
    uint64_t total = 0;
    for (int i = 0; i < g->n_cases; i++)
        total = gio_sat_madd(1, qc_golden_case_bytes(&g->cfg, &g->meta[i]), total);
    uint64_t avail = 0;
    qc_err ign;
    qc_err_clear(&ign);
    /* below 256 MiB always fine; above, refused before reading when the machine cannot give it */
    if (total > ((uint64_t)256 << 20) && qc_memplan_available(&avail, &ign) == QC_OK &&
        total > avail)
        return qc_errf(c->err, QC_ERR_OOM,
                       "%s: the golden's tensors need %.2f GiB, more than the %.2f GiB of memory "
                       "available", c->file, qc_memplan_gib(total), qc_memplan_gib(avail));
    for (int i = 0; i < g->n_cases; i++) {
        qc_status st = gio_load_case_from(c, &g->cfg, f, &g->cases[i], &g->meta[i]);
        if (st) return st;
        g->loaded[i] = 1;
    }
    return QC_OK;
}

/* The file checks before HDF5 opens it: present, a regular readable file, HDF5. sb receives
 * its stat. */
static qc_status check_file(const char *path, struct stat *sb, qc_err *err) {
    if (stat(path, sb) != 0)
        return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb->st_mode))
        return qc_errf(err, QC_ERR_IO, "%s: not a regular file", path);
    if (access(path, R_OK) != 0)
        return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return qc_errf(err, QC_ERR_FORMAT, "%s: not an HDF5 file", path);
    }
    return QC_OK;
}

/* The provenance attributes of the root group (path c->file) into g: schema version,
 * generator, hashes, the config (parsed), the model directory, the MoE root attribute. */
static qc_status read_provenance(const gio_ctx *c, qc_golden *g, hid_t root) {
    const char *path = c->file;
    qc_err *err = c->err;
    qc_status st;
    int64_t v = 0;
    if ((st = gio_attr_int(c, root, "/", "schema_version", 1, &v, NULL))) return st;
    if (v != QC_GOLDEN_SCHEMA_VERSION)
        return qc_errf(err, QC_ERR_FORMAT, "%s: /schema_version: %lld is not supported (this "
                       "reader handles schema %d)", path, (long long)v, QC_GOLDEN_SCHEMA_VERSION);
    g->schema_version = (int)v;
    if ((st = gio_attr_buf(c, root, "/", "generator", 1, g->generator,
                              sizeof g->generator)))
        return st;
    if ((st = gio_attr_buf(c, root, "/", "torch_version", 1, g->torch_version,
                              sizeof g->torch_version)))
        return st;
    if ((st = gio_attr_int(c, root, "/", "seed", 1, &g->seed, NULL))) return st;
    if ((st = gio_attr_buf(c, root, "/", "compute_dtype", 1, g->compute_dtype,
                              sizeof g->compute_dtype)))
        return st;
    if ((st = gio_attr_buf(c, root, "/", "model_path", 1, g->model_path,
                              sizeof g->model_path)))
        return st;
    if ((st = gio_attr_buf(c, root, "/", "config_sha256", 1, g->config_sha256,
                              sizeof g->config_sha256)))
        return st;
    if ((st = gio_attr_buf(c, root, "/", "weights_sha256", 1, g->weights_sha256,
                              sizeof g->weights_sha256)))
        return st;
    if (!valid_sha(g->config_sha256) || !valid_sha(g->weights_sha256))
        return qc_errf(err, QC_ERR_FORMAT, "%s: /%s: not a hex SHA-256", path,
                       valid_sha(g->config_sha256) ? "weights_sha256" : "config_sha256");
    if ((st = gio_attr_str(c, root, "/", "config_json", 1, &g->config_json))) return st;
    {
        char where[1100];
        snprintf(where, sizeof where, "%s: /config_json", path);
        if ((st = qc_config_parse(g->config_json, strlen(g->config_json), where, &g->cfg, err)))
            return st;
    }
    resolve_model_dir(path, g->model_path, g->model_dir, sizeof g->model_dir);
    /* MoE: optional (qc_golden_moe.c) */
    return gio_moe_root(c, root, &g->router_margin_threshold);
}

/* The cases of the open file f, sorted by name: metadata only, into g (its arrays allocated,
 * n_cases set). */
static qc_status read_cases(const gio_ctx *c, qc_golden *g, hid_t f) {
    const char *path = c->file;
    qc_err *err = c->err;
    qc_status st = QC_OK;
    hid_t cases = H5I_INVALID_HID;
    name_list nl = {0};
    char h5msg[300];
    if (!gio_path_exists(f, "cases"))
        return qc_errf(err, QC_ERR_MISSING, "%s: /cases: missing group", path);
    cases = H5Gopen2(f, "cases", H5P_DEFAULT);
    if (cases < 0) goto h5fail;
    hsize_t idx = 0;
    if (H5Literate(cases, H5_INDEX_NAME, H5_ITER_INC, &idx, gio_collect_names, &nl) < 0) {
        if (nl.oom) {
            st = qc_errf(err, QC_ERR_OOM, "%s: /cases: out of memory", path);
            goto done;
        }
        goto h5fail;
    }
    if (nl.n > 0) qsort(nl.names, (size_t)nl.n, sizeof *nl.names, gio_cmp_str);
    size_t nc = nl.n ? (size_t)nl.n : 1;
    g->cases = calloc(nc, sizeof *g->cases);
    g->meta = calloc(nc, sizeof *g->meta);
    g->loaded = calloc(nc, 1);
    if (!g->cases || !g->meta || !g->loaded) {
        st = qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
        goto done;
    }
    g->n_cases = nl.n;
    for (int i = 0; i < nl.n; i++)
        if ((st = gio_read_case_meta(c, &g->cfg, cases, nl.names[i], &g->cases[i], &g->meta[i])))
            goto done;
    goto done;
h5fail:
    st = qc_errf(err, QC_ERR_HDF5, "%s: %s", path, gio_h5_errdesc(h5msg, sizeof h5msg));
done:
    for (int i = 0; i < nl.n; i++) free(nl.names[i]);
    free(nl.names);
    CLOSE_G(cases);
    return st;
}

static qc_status open_impl(const char *path, int load, qc_golden **out, qc_err *err) {
    qc_status st = QC_OK;
    hid_t f = H5I_INVALID_HID, root = H5I_INVALID_HID;
    hid_t fapl = H5I_INVALID_HID;
    char h5msg[300];
    gio_ctx c = {path, err, GIO_ATTR_PATH};
    *out = NULL;
    gio_h5_quiet();

    struct stat sb;
    if ((st = check_file(path, &sb, err))) return st;

    qc_golden *g = calloc(1, sizeof *g);
    if (!g) return qc_errf(err, QC_ERR_OOM, "%s: out of memory", path);
    snprintf(g->path, sizeof g->path, "%s", path);
    g->file_dev = (uint64_t)sb.st_dev;
    g->file_ino = (uint64_t)sb.st_ino;
    g->file_size = (uint64_t)sb.st_size;
    g->file_mtime_ns = mtime_ns(&sb);

    fapl = read_fapl();
    f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (f < 0) {
        st = qc_errf(err, QC_ERR_HDF5, "%s: cannot open: %s", path,
                     gio_h5_errdesc(h5msg, sizeof h5msg));
        goto done;
    }
    root = H5Gopen2(f, "/", H5P_DEFAULT);
    if (root < 0) {
        st = qc_errf(err, QC_ERR_HDF5, "%s: %s", path, gio_h5_errdesc(h5msg, sizeof h5msg));
        goto done;
    }
    if ((st = read_provenance(&c, g, root))) goto done;
    if ((st = read_cases(&c, g, f))) goto done;
    if (load) st = load_all(&c, g, f);
done:
    CLOSE_G(root);
    if (fapl != H5P_DEFAULT) CLOSE_P(fapl);
    if (f >= 0) {
        /* every dataset / attribute / type / space handle was closed on every path */
        QC_ASSERT(H5Fget_obj_count(f, H5F_OBJ_ALL) == 1);
        H5Fclose(f);
    }
    if (st) {
        qc_golden_free(g);
        return st;
    }
    *out = g;
    return QC_OK;
}

qc_status qc_golden_open_lazy(const char *path, qc_golden **out, qc_err *err) {
    return open_impl(path, 0, out, err);
}

qc_status qc_golden_open(const char *path, qc_golden **out, qc_err *err) {
    return open_impl(path, 1, out, err);
}

qc_status qc_golden_load_case(qc_golden *g, int i, qc_err *err) {
    if (!g || i < 0 || i >= g->n_cases || !g->meta || !g->loaded)
        return qc_errf(err, QC_ERR_ARG, "%s: no case %d (of %d)", g ? g->path : "golden", i,
                       g ? g->n_cases : 0);
    if (g->loaded[i]) return QC_OK;
    gio_ctx c = {g->path, err, GIO_ATTR_PATH};
    char h5msg[300];
    gio_h5_quiet();
    struct stat sb;
    if (stat(g->path, &sb) != 0)
        return qc_errf(err, QC_ERR_IO, "%s: cannot open: %s", g->path, strerror(errno));
    if ((uint64_t)sb.st_dev != g->file_dev || (uint64_t)sb.st_ino != g->file_ino ||
        (uint64_t)sb.st_size != g->file_size || mtime_ns(&sb) != g->file_mtime_ns)
        return qc_errf(err, QC_ERR_IO, "%s: /cases/%s: the file changed since it was opened",
                       g->path, g->cases[i].name);
    hid_t fapl = read_fapl();
    hid_t f = H5Fopen(g->path, H5F_ACC_RDONLY, fapl);
    if (fapl != H5P_DEFAULT) CLOSE_P(fapl);
    if (f < 0)
        return qc_errf(err, QC_ERR_HDF5, "%s: cannot open: %s", g->path,
                       gio_h5_errdesc(h5msg, sizeof h5msg));
    qc_status st = gio_load_case_from(&c, &g->cfg, f, &g->cases[i], &g->meta[i]);
    QC_ASSERT(H5Fget_obj_count(f, H5F_OBJ_ALL) == 1);
    H5Fclose(f);
    if (!st) g->loaded[i] = 1;
    return st;
}

void qc_golden_unload_case(qc_golden *g, int i) {
    if (!g || i < 0 || i >= g->n_cases || !g->loaded || !g->loaded[i]) return;
    gio_case_free_tensors(&g->cfg, &g->cases[i]);
    g->loaded[i] = 0;
}

void qc_golden_free(qc_golden *g) {
    if (!g) return;
    if (g->cases) {
        for (int i = 0; i < g->n_cases; i++) qc_case_free(&g->cfg, &g->cases[i]);
        /* cases beyond n_cases were never filled (calloc'd) */
    }
    free(g->cases);
    free(g->meta);
    free(g->loaded);
    free(g->config_json);
    free(g);
}
