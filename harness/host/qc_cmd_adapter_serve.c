/* qc_cmd_adapter_serve.c — `qwen-conform adapter-serve PLUGIN.so[,k=v...]`: the child side of
 * the adapter protocol v1 (docs/adapter-protocol.md), serving any runtime plugin (the ABI in
 * include/qc/qc_runtime_plugin.h) over stdin/stdout, so that a plugin that aborts or crashes
 * takes down this child and not the harness. The registry starts it for
 * `--backend isolate:plugin:PATH.so[,opts]` (and for `llamacpp` by default).
 *
 * Every request is forwarded to the loaded plugin, one frame answered per request:
 *   open        plugin open(model_dir, spec options + "," + request options); model_dir's
 *               config.json is also read here (qc_config_load) for the layer kinds and state
 *               dims that get_state needs (the ABI does not tell them)
 *   reset, fill_state, set_option   the plugin call
 *   snapshot, restore, select_sequence, trim   the plugin call (state lifecycle)
 *   forward     logits [n, V] ([1, V] when all_logits is false), + hidden [L+1, n, H] when
 *               "hidden" is true (get_hidden 0..L); with "topk": K (a topk_only plugin: QC_CAP_TOPK_ONLY and
 *               forward_topk within its struct_size) forward_topk's topk_ids (int32) and
 *               topk_logprobs [n, K] instead
 *   get_state   every layer in order: layer_NN/k_cache, layer_NN/v_cache [n_kv, n_pos, hd]
 *               (full attention), layer_NN/conv_state [C, K], layer_NN/recurrent_state
 *               [nv, dk, dv] (Gated DeltaNet)
 *   close       answer ok, close the plugin, exit 0 (EOF on stdin: close the plugin, exit 0)
 * A plugin error becomes {"type":"error","message": last_error}, with "unsupported": true when
 * the plugin answered QC_PLUGIN_UNSUPPORTED (or lacks the entry). A malformed request (bad
 * JSON, unknown op, bad fields) gets an error frame and the child keeps serving; a broken
 * framing (bad magic, header_len out of range, truncated frame) cannot be resynchronised: an
 * error frame, then exit 1.
 *
 * Isolation: frames go to a private duplicate of fd 1 and requests come from a private
 * duplicate of fd 0; fd 1 itself then points at stderr (a plugin's printf cannot corrupt the
 * protocol) and fd 0 at /dev/null (a plugin cannot swallow requests).
 *
 * Exit codes: 0 after close or EOF, 1 protocol violation by the host / stdout gone, 2 the plugin
 * cannot be loaded (no hello is sent: the host reports that the adapter cannot start).
 *
 * This file holds the command and the request loop; the framing / I/O and the request handlers
 * live beside it (qc_cmd_adapter_serve_internal.h names them).
 */
#include "qc_cmd_adapter_serve_internal.h"
#include "qc/qc_file.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qc_cli.h"
#include "qc/qc_status.h"
#include "qc_cli_common.h"
#include "qc_registry.h"

static const char usage[] =
    "usage: qwen-conform adapter-serve PLUGIN.so[,k=v...]\n"
    "Serve a runtime plugin (the ABI in include/qc/qc_runtime_plugin.h) over the adapter\n"
    "protocol v1 (docs/adapter-protocol.md) on stdin/stdout: the child side of\n"
    "`--backend isolate:plugin:PLUGIN.so[,k=v...]`. The text after the first ',' is passed to\n"
    "the plugin's open (before any options of the open request). stdout carries only frames;\n"
    "whatever the plugin prints goes to stderr.\n"
    "Exit codes: 0 after close or EOF on stdin, 1 protocol violation by the host,\n"
    "            2 usage error or the plugin cannot be loaded (no hello is sent).\n";

/* ===================================================================================== */
/* the loop                                                                              */
/* ===================================================================================== */

static const char *file_name(const char *p) {
    const char *sl = strrchr(p, '/');
    return sl ? sl + 1 : p;
}

/* Set up the private protocol descriptors; fd 1 -> stderr, fd 0 -> /dev/null. */
static int isolate_fds(as_server *s) {
    fflush(stdout);
    s->out_fd = fcntl(1, F_DUPFD_CLOEXEC, 3);
    s->in_fd = fcntl(0, F_DUPFD_CLOEXEC, 3);
    if (s->out_fd < 0 || s->in_fd < 0) {
        fprintf(stderr, "%s: cannot duplicate stdin/stdout: %s\n", AS_PROG, strerror(errno));
        return -1;
    }
    if (dup2(2, 1) < 0) {
        fprintf(stderr, "%s: cannot point stdout at stderr: %s\n", AS_PROG, strerror(errno));
        return -1;
    }
    int dn = open("/dev/null", O_RDONLY);
    if (dn >= 0) {
        if (dn != 0) {
            dup2(dn, 0);
            close(dn);
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    return 0;
}

static int send_hello(as_server *s, const char *path) {
    cJSON *h = cJSON_CreateObject();
    if (!h) return -1;
    char name[600];
    snprintf(name, sizeof name, "adapter-serve %s", file_name(path));
    as_utf8_sanitize(name);
    cJSON_AddStringToObject(h, "type", "hello");
    cJSON_AddStringToObject(h, "protocol", AS_PROTOCOL);
    cJSON_AddNumberToObject(h, "version", AS_VERSION);
    cJSON_AddStringToObject(h, "name", name);
    return as_send_frame(s, h, NULL, 0);
}

/* Serve until close / EOF. Returns the exit code. */
static int serve(as_server *s) {
    for (;;) {
        unsigned char pre[16];
        int r = qc_fd_read_all(s->in_fd, pre, sizeof pre);
        if (r == 0) { /* EOF: the host is done */
            as_close_plugin(s);
            return QC_EXIT_PASS;
        }
        as_fail f;
        memset(&f, 0, sizeof f);
        if (r < 0) {
            fprintf(stderr, "%s: protocol violation from the host: truncated frame prefix\n",
                    AS_PROG);
            as_close_plugin(s);
            return 1;
        }
        uint32_t hlen = as_get_u32le(pre + 4);
        uint64_t plen = as_get_u64le(pre + 8);
        if (memcmp(pre, "QCAP", 4) != 0 || hlen < 1 || hlen > AS_MAX_HEADER) {
            if (memcmp(pre, "QCAP", 4) != 0)
                as_failf(&f, 0, "protocol violation: bad magic 0x%02x%02x%02x%02x (expected QCAP)",
                         pre[0], pre[1], pre[2], pre[3]);
            else
                as_failf(&f, 0, "protocol violation: header_len %u outside 1 .. %u", hlen,
                         AS_MAX_HEADER);
            as_send_error(s, &f); /* the framing is lost: cannot resynchronise */
            as_close_plugin(s);
            return 1;
        }
        char *text = malloc(hlen);
        if (!text || qc_fd_read_all(s->in_fd, text, hlen) != 1 ||
            (plen && as_skip_bytes(s->in_fd, plen))) {
            free(text);
            if (!text) as_failf(&f, 0, "out of memory for a %u-byte header", hlen);
            else as_failf(&f, 0, "protocol violation: truncated frame");
            as_send_error(s, &f);
            as_close_plugin(s);
            return 1;
        }
        cJSON *req = cJSON_ParseWithLength(text, hlen);
        free(text);
        const cJSON *opj = cJSON_IsObject(req) ? cJSON_GetObjectItemCaseSensitive(req, "op")
                                               : NULL;
        const char *op = cJSON_IsString(opj) ? opj->valuestring : NULL;
        int rc;
        if (!cJSON_IsObject(req)) {
            rc = as_failf(&f, 0, "malformed request: the header is not a JSON object");
        } else if (!op) {
            rc = as_failf(&f, 0, "malformed request: no \"op\" string");
        } else if (!strcmp(op, "close")) {
            int w = as_send_ok(s, NULL, NULL, 0);
            cJSON_Delete(req);
            as_close_plugin(s);
            return w ? 1 : QC_EXIT_PASS;
        } else if (!strcmp(op, "open")) {
            rc = as_op_open(s, req, &f);
        } else if (strcmp(op, "reset") && strcmp(op, "forward") && strcmp(op, "get_state") &&
                   strcmp(op, "fill_state") && strcmp(op, "set_option") &&
                   strcmp(op, "snapshot") && strcmp(op, "restore") &&
                   strcmp(op, "select_sequence") && strcmp(op, "trim")) {
            rc = as_failf(&f, 0, "unknown op '%.100s'", op);
        } else if (!s->opened) {
            rc = as_failf(&f, 0, "%s before open", op);
        } else if (!strcmp(op, "reset")) {
            rc = as_op_reset(s, req, &f);
        } else if (!strcmp(op, "forward")) {
            rc = as_op_forward(s, req, &f);
        } else if (!strcmp(op, "get_state")) {
            rc = as_op_get_state(s, req, &f);
        } else if (!strcmp(op, "fill_state")) {
            rc = as_op_fill_state(s, req, &f);
        } else if (strcmp(op, "set_option")) {
            rc = as_op_lifecycle(s, op, req, &f);
        } else {
            rc = as_op_set_option(s, req, &f);
        }
        /* rc: 0 answered ok; -1 from a handler: f says why (unless the write itself failed) */
        int w = rc;
        if (rc < 0 && f.msg[0]) w = as_send_error(s, &f);
        cJSON_Delete(req);
        if (w < 0) {
            fprintf(stderr, "%s: cannot write to stdout (the host is gone): %s\n", AS_PROG,
                    strerror(errno));
            as_close_plugin(s);
            return 1;
        }
    }
}

int qc_cmd_adapter_serve(int argc, char **argv) {
    const char *spec = NULL;
    qc_err err;
    qc_err_clear(&err);
    qc_argp a;
    qc_argp_init(&a, AS_PROG, argc, argv);
    while (qc_argp_next(&a)) {
        qc_status st = QC_OK;
        if (a.positional) {
            if (spec) st = qc_errf(&err, QC_ERR_ARG, "one plugin spec only ('%s' and '%s')",
                                   spec, a.arg);
            else spec = a.arg;
        } else if (qc_argp_is(&a, "--help") || qc_argp_is(&a, "-h")) {
            fputs(usage, stdout);
            return QC_EXIT_PASS;
        } else {
            st = qc_argp_unknown(&a, &err);
        }
        if (st) {
            fprintf(stderr, "%s: %s\n%s", AS_PROG, err.msg, usage);
            return QC_EXIT_ERROR;
        }
    }
    if (!spec || !spec[0]) {
        fprintf(stderr, "%s: needs a plugin spec PLUGIN.so[,k=v...]\n%s", AS_PROG, usage);
        return QC_EXIT_ERROR;
    }

    /* PATH[,options] */
    const char *comma = strchr(spec, ',');
    size_t plen = comma ? (size_t)(comma - spec) : strlen(spec);
    char *path = malloc(plen + 1);
    if (!path) return QC_EXIT_ERROR;
    memcpy(path, spec, plen);
    path[plen] = 0;

    as_server s;
    memset(&s, 0, sizeof s);
    s.spec_opts = comma ? comma + 1 : "";
    s.in_fd = s.out_fd = -1;
    /* isolate first: a plugin's constructors (run by dlopen) may print too */
    if (isolate_fds(&s)) {
        free(path);
        return QC_EXIT_ERROR;
    }
    if (!path[0]) {
        fprintf(stderr, "%s: the plugin spec '%s' has no path\n", AS_PROG, spec);
        free(path);
        return QC_EXIT_ERROR;
    }
    if (qc_plugin_load(path, &s.api, &s.dl, &err) != QC_OK) {
        fprintf(stderr, "%s: %s\n", AS_PROG, err.msg);
        free(path);
        return QC_EXIT_ERROR; /* no hello: the host reports that the adapter cannot start */
    }
    /* the host gone mid-write is an EPIPE, not a signal death */
    signal(SIGPIPE, SIG_IGN);
    if (send_hello(&s, path)) {
        fprintf(stderr, "%s: cannot write the hello frame: %s\n", AS_PROG, strerror(errno));
        free(path);
        return 1;
    }
    free(path);
    int rc = serve(&s);
    close(s.out_fd);
    close(s.in_fd);
    /* the library stays loaded (as in-process: handles' threads may outlive close) */
    return rc;
}
