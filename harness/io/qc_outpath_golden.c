/* qc_outpath_golden.c — reading a golden's /schema_version and /model_path attributes for the
 * output registry, in child processes: a corrupt file (which can crash libhdf5) only takes
 * down the child, which is replaced by a new one starting after that file. See
 * qc_outpath_internal.h. */
#include "qc_outpath_internal.h"
#include "qc/qc_file.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hdf5.h>

/* ===================================================================================== */
/* reading golden attributes in a child process                                          */
/* ===================================================================================== */

/* schema_version (-1 when absent / not an HDF5 file) and /model_path ("" when absent). */
static void peek_one(const char *path, int *schema, char *mp, size_t n) {
    *schema = -1;
    mp[0] = '\0';
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (H5Fis_hdf5(path) <= 0) return;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return;
    hid_t g = H5Gopen2(f, "/", H5P_DEFAULT);
    if (g >= 0) {
        if (H5Aexists(g, "schema_version") > 0) {
            hid_t a = H5Aopen(g, "schema_version", H5P_DEFAULT);
            hid_t t = a >= 0 ? H5Aget_type(a) : -1, s = a >= 0 ? H5Aget_space(a) : -1;
            long long v = 0;
            if (t >= 0 && s >= 0 && H5Tget_class(t) == H5T_INTEGER &&
                H5Sget_simple_extent_npoints(s) == 1 && H5Aread(a, H5T_NATIVE_LLONG, &v) >= 0 &&
                v >= 0 && v < INT_MAX)
                *schema = (int)v;
            if (s >= 0) H5Sclose(s);
            if (t >= 0) H5Tclose(t);
            if (a >= 0) H5Aclose(a);
        }
        if (H5Aexists(g, "model_path") > 0) {
            hid_t a = H5Aopen(g, "model_path", H5P_DEFAULT);
            hid_t t = a >= 0 ? H5Aget_type(a) : -1, s = a >= 0 ? H5Aget_space(a) : -1;
            if (t >= 0 && s >= 0 && H5Tget_class(t) == H5T_STRING &&
                H5Sget_simple_extent_npoints(s) == 1) {
                hid_t mt = H5Tcopy(H5T_C_S1);
                H5Tset_cset(mt, H5Tget_cset(t)); /* ASCII <-> UTF-8 does not convert */
                if (H5Tis_variable_str(t) > 0) {
                    char *vl = NULL;
                    if (H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Aread(a, mt, &vl) >= 0 && vl)
                        snprintf(mp, n, "%s", vl);
                    if (vl) H5free_memory(vl);
                } else {
                    size_t sz = H5Tget_size(t);
                    char *buf = sz > 0 && sz < (1u << 20) ? calloc(sz + 1, 1) : NULL;
                    if (buf && H5Tset_size(mt, sz) >= 0 &&
                        H5Tset_strpad(mt, H5T_STR_NULLPAD) >= 0 && H5Aread(a, mt, buf) >= 0)
                        snprintf(mp, n, "%s", buf);
                    free(buf);
                }
                H5Tclose(mt);
            }
            if (s >= 0) H5Sclose(s);
            if (t >= 0) H5Tclose(t);
            if (a >= 0) H5Aclose(a);
        }
        H5Gclose(g);
    }
    H5Fclose(f);
}

/* Peek every path; schema[i] / model_path[i] (malloc'd, NULL when absent). A child that
 * crashes on a corrupt file is replaced by a new one starting after that file. */
void outp_peek_all(char *const *paths, int n, int *schema, char **model_path) {
    for (int i = 0; i < n; i++) {
        schema[i] = -1;
        model_path[i] = NULL;
    }
    int from = 0;
    while (from < n) {
        int pfd[2];
        if (pipe(pfd) != 0) return;
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            close(pfd[0]);
            close(pfd[1]);
            return;
        }
        if (pid == 0) {
            close(pfd[0]);
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            signal(SIGHUP, SIG_DFL);
            static char mp[PATH_MAX];
            for (int i = from; i < n; i++) {
                int sc = -1;
                peek_one(paths[i], &sc, mp, sizeof mp);
                int32_t hdr[3] = {i, sc, (int32_t)strlen(mp)};
                if (qc_fd_write_all(pfd[1], hdr, sizeof hdr) || qc_fd_write_all(pfd[1], mp, (size_t)hdr[2]))
                    _exit(1);
            }
            _exit(0);
        }
        close(pfd[1]);
        int last = from - 1;
        int32_t hdr[3];
        while (qc_fd_read_all(pfd[0], hdr, sizeof hdr) == 1) {
            if (hdr[0] < from || hdr[0] >= n || hdr[2] < 0 || hdr[2] >= PATH_MAX) break;
            char *s = malloc((size_t)hdr[2] + 1);
            if (!s || qc_fd_read_all(pfd[0], s, (size_t)hdr[2]) != 1) {
                free(s);
                break;
            }
            s[hdr[2]] = '\0';
            schema[hdr[0]] = hdr[1];
            free(model_path[hdr[0]]);
            model_path[hdr[0]] = s[0] ? s : (free(s), NULL);
            last = hdr[0];
        }
        close(pfd[0]);
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (last >= n - 1) return;
        from = last + 2; /* last + 1 crashed the child (or could not be reported): skip it */
    }
}

int qc_outpath_is_golden(const char *path, int *schema) {
    char *paths[1] = {(char *)path};
    int sc = -1;
    char *mp = NULL;
    struct stat sb;
    if (!path || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    outp_peek_all(paths, 1, &sc, &mp);
    free(mp);
    if (schema) *schema = sc;
    return sc >= 0;
}
