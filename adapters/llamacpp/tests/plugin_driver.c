/* plugin_driver.c — drive any qwen-conform runtime plugin (ABI v1) without the harness.
 *
 *     plugin_driver PLUGIN.so OUTDIR < PLAN
 *
 * dlopens PLUGIN.so, checks abi_version / struct_size / mandatory entries like the harness,
 * then executes PLAN, one command per line:
 *
 *   open MODEL_DIR OPTIONS        OPTIONS "-" for none; prints "info V H L maxtok maxctx caps NAME"
 *   reset
 *   forward START ALL SAVE N t1 .. tN   ALL 1: [N,V] logits, 0: [1,V]; SAVE "-" or a file name
 *                                       (raw float32 written to OUTDIR/SAVE)
 *   hidden SAVE N                 every index 0..L of the last forward, [L+1, N, H]
 *   state SAVE LAYER KIND NPOS COUNT    get_state into COUNT floats
 *   option KEY VALUE              set_option
 *   fill VALUE                    fill_state (a float, nan, or 0xXXXXXXXX: the bits, e.g. 0x3e3e3e3e)
 *   snapshot SLOT | restore SLOT | select SEQ | trim NPOS   the lifecycle entries (ABI v1 additions)
 *   close
 *
 * After each command it prints one line to stdout: "ok ..." or "err RC MESSAGE" (RC 1 error,
 * 2 unsupported). A command after a failed open is answered "err 1 not open". The driver
 * itself never aborts on a runtime error; if the runtime aborts the process, the caller sees
 * the signal (tests/driver.py reports it as a crash). Used by tests/driver.py, which writes the
 * PLAN from a golden file and compares the outputs with h5py.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_runtime_plugin.h"

static const qc_runtime_plugin *api;
static void *handle;
static qc_plugin_info info;
static int opened;
static int32_t last_n;

static int save(const char *outdir, const char *name, const float *p, size_t n) {
    if (!strcmp(name, "-")) return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", outdir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, sizeof(float), n, f);
    int e = fclose(f);
    return (w == n && e == 0) ? 0 : -1;
}

static void reply(int rc, const char *ok_text) {
    if (rc == QC_PLUGIN_OK) {
        printf("ok%s%s\n", ok_text && ok_text[0] ? " " : "", ok_text ? ok_text : "");
    } else {
        const char *m = api->last_error(opened ? handle : NULL);
        printf("err %d %s\n", rc, m && m[0] ? m : "(no error text)");
    }
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PLUGIN.so OUTDIR < PLAN\n", argv[0]);
        return 2;
    }
    const char *outdir = argv[2];
    char full[4096];
    snprintf(full, sizeof full, "%s%s", strchr(argv[1], '/') ? "" : "./", argv[1]);
    void *dl = dlopen(full, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        fprintf(stderr, "plugin_driver: %s: %s\n", argv[1], dlerror());
        return 2;
    }
    void *sym = dlsym(dl, QC_PLUGIN_ENTRY_SYMBOL);
    if (!sym) {
        fprintf(stderr, "plugin_driver: %s: no symbol %s\n", argv[1], QC_PLUGIN_ENTRY_SYMBOL);
        return 2;
    }
    qc_runtime_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);
    api = entry();
    if (!api || api->abi_version != QC_PLUGIN_ABI_VERSION || api->struct_size < QC_PLUGIN_V1_SIZE ||
        !api->open || !api->reset || !api->forward || !api->close || !api->last_error) {
        fprintf(stderr, "plugin_driver: %s: not an ABI v1 plugin\n", argv[1]);
        return 2;
    }

    char *line = NULL;
    size_t cap = 0;
    float *buf = NULL;
    size_t buf_n = 0;
    int32_t *toks = NULL;
    size_t toks_n = 0;
    while (getline(&line, &cap, stdin) > 0) {
        char *save_ptr = NULL;
        char *cmd = strtok_r(line, " \t\r\n", &save_ptr);
        if (!cmd || cmd[0] == '#') continue;
        if (!strcmp(cmd, "open")) {
            char *dir = strtok_r(NULL, " \t\r\n", &save_ptr);
            char *opts = strtok_r(NULL, " \t\r\n", &save_ptr);
            if (!dir) {
                printf("err 1 open: no model dir\n");
                continue;
            }
            if (!opts || !strcmp(opts, "-")) opts = "";
            memset(&info, 0, sizeof info);
            int rc = api->open(dir, opts, &info, &handle);
            if (rc == QC_PLUGIN_OK) {
                opened = 1;
                char t[512];
                snprintf(t, sizeof t, "info %d %d %d %d %d %u %s", info.vocab_size, info.hidden_size,
                         info.n_layers, info.max_tokens_per_call, info.max_context_len, info.caps,
                         info.name);
                reply(rc, t);
            } else {
                opened = 0;
                const char *m = api->last_error(handle);
                printf("err %d %s\n", rc, m && m[0] ? m : "(no error text)");
                fflush(stdout);
                if (handle) api->close(handle);
                handle = NULL;
            }
            continue;
        }
        if (!opened) {
            printf("err 1 not open\n");
            fflush(stdout);
            continue;
        }
        if (!strcmp(cmd, "reset")) {
            reply(api->reset(handle), NULL);
        } else if (!strcmp(cmd, "forward")) {
            char *a = strtok_r(NULL, " \t\r\n", &save_ptr), *b = strtok_r(NULL, " \t\r\n", &save_ptr);
            char *s = strtok_r(NULL, " \t\r\n", &save_ptr), *c = strtok_r(NULL, " \t\r\n", &save_ptr);
            if (!a || !b || !s || !c) {
                printf("err 1 forward: bad command\n");
                fflush(stdout);
                continue;
            }
            int32_t start = atoi(a), all = atoi(b), n = atoi(c);
            if (n <= 0) {
                printf("err 1 forward: n %d\n", n);
                fflush(stdout);
                continue;
            }
            if ((size_t)n > toks_n) {
                toks = realloc(toks, (size_t)n * sizeof *toks);
                toks_n = (size_t)n;
            }
            for (int32_t i = 0; i < n; i++) {
                char *t = strtok_r(NULL, " \t\r\n", &save_ptr);
                toks[i] = t ? atoi(t) : -1;
            }
            size_t need = (size_t)(all ? n : 1) * (size_t)info.vocab_size;
            if (need > buf_n) {
                buf = realloc(buf, need * sizeof(float));
                buf_n = need;
            }
            int rc = api->forward(handle, toks, n, start, all, buf);
            if (rc == QC_PLUGIN_OK) {
                last_n = n;
                if (save(outdir, s, buf, need)) {
                    printf("err 1 cannot write %s/%s\n", outdir, s);
                    fflush(stdout);
                    continue;
                }
            }
            reply(rc, NULL);
        } else if (!strcmp(cmd, "hidden")) {
            char *s = strtok_r(NULL, " \t\r\n", &save_ptr);
            if (!s) continue;
            if (!(info.caps & QC_CAP_HIDDEN) || !api->get_hidden) {
                printf("err 2 hidden not announced\n");
                fflush(stdout);
                continue;
            }
            size_t per = (size_t)last_n * info.hidden_size;
            size_t need = per * (size_t)(info.n_layers + 1);
            if (need > buf_n) {
                buf = realloc(buf, need * sizeof(float));
                buf_n = need;
            }
            int rc = QC_PLUGIN_OK;
            for (int i = 0; i <= info.n_layers && rc == QC_PLUGIN_OK; i++)
                rc = api->get_hidden(handle, i, buf + (size_t)i * per);
            if (rc == QC_PLUGIN_OK && save(outdir, s, buf, need)) {
                printf("err 1 cannot write\n");
                fflush(stdout);
                continue;
            }
            reply(rc, NULL);
        } else if (!strcmp(cmd, "state")) {
            char *s = strtok_r(NULL, " \t\r\n", &save_ptr);
            char *l = strtok_r(NULL, " \t\r\n", &save_ptr), *k = strtok_r(NULL, " \t\r\n", &save_ptr);
            char *np = strtok_r(NULL, " \t\r\n", &save_ptr), *cnt = strtok_r(NULL, " \t\r\n", &save_ptr);
            if (!s || !l || !k || !np || !cnt) continue;
            if (!(info.caps & QC_CAP_STATE_READ) || !api->get_state) {
                printf("err 2 state_read not announced\n");
                fflush(stdout);
                continue;
            }
            size_t need = (size_t)atol(cnt);
            if (need > buf_n) {
                buf = realloc(buf, (need ? need : 1) * sizeof(float));
                buf_n = need;
            }
            int rc = api->get_state(handle, atoi(l), atoi(k), atoi(np), buf);
            if (rc == QC_PLUGIN_OK && save(outdir, s, buf, need)) {
                printf("err 1 cannot write\n");
                fflush(stdout);
                continue;
            }
            reply(rc, NULL);
        } else if (!strcmp(cmd, "option")) {
            char *k = strtok_r(NULL, " \t\r\n", &save_ptr), *v = strtok_r(NULL, " \t\r\n", &save_ptr);
            if (!api->set_option) {
                printf("err 2 no set_option\n");
                fflush(stdout);
                continue;
            }
            reply(api->set_option(handle, k ? k : "", v ? v : ""), NULL);
        } else if (!strcmp(cmd, "fill") || !strcmp(cmd, "snapshot") || !strcmp(cmd, "restore") ||
                   !strcmp(cmd, "select") || !strcmp(cmd, "trim")) {
            char *a = strtok_r(NULL, " \t\r\n", &save_ptr);
            if (!a) {
                printf("err 1 %s: no argument\n", cmd);
                fflush(stdout);
                continue;
            }
            int life = api->struct_size >= QC_PLUGIN_LIFECYCLE_SIZE;
            int (*fn)(void *, int32_t) = !life ? NULL
                : !strcmp(cmd, "snapshot") ? api->snapshot : !strcmp(cmd, "restore") ? api->restore
                : !strcmp(cmd, "select") ? api->select_sequence : !strcmp(cmd, "trim") ? api->trim : NULL;
            if (!strcmp(cmd, "fill")) {
                /* a float, "nan", or 0xXXXXXXXX: the bit pattern (0x3e3e3e3e) */
                float v;
                if (!strncmp(a, "0x", 2)) {
                    uint32_t bits = (uint32_t)strtoul(a, NULL, 16);
                    memcpy(&v, &bits, sizeof v);
                } else {
                    v = strtof(a, NULL);
                }
                if (!api->fill_state) printf("err 2 no fill_state\n");
                else reply(api->fill_state(handle, v), NULL);
            } else if (!fn) {
                printf("err 2 no %s entry\n", cmd);
            } else {
                reply(fn(handle, (int32_t)atoi(a)), NULL);
            }
            fflush(stdout);
        } else if (!strcmp(cmd, "close")) {
            api->close(handle);
            handle = NULL;
            opened = 0;
            printf("ok\n");
            fflush(stdout);
        } else {
            printf("err 1 unknown command %s\n", cmd);
            fflush(stdout);
        }
    }
    if (opened) api->close(handle);
    free(line);
    free(buf);
    free(toks);
    return 0;
}
