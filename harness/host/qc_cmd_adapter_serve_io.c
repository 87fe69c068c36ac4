/* qc_cmd_adapter_serve_io.c — framing and I/O of `qwen-conform adapter-serve`: frames read
 * from and written to the private protocol descriptors (prefix "QCAP" + header_len +
 * payload_len, little-endian; float32 payloads little-endian on the wire), the ok and error
 * answers, UTF-8 sanitising of the texts they carry. See qc_cmd_adapter_serve_internal.h.
 */
#include "qc_cmd_adapter_serve_internal.h"
#include "qc/qc_file.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ===================================================================================== */
/* failed requests                                                                       */
/* ===================================================================================== */

int as_failf(as_fail *f, int unsupported, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int as_failf(as_fail *f, int unsupported, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    f->unsupported = unsupported;
    return -1;
}

/* ===================================================================================== */
/* I/O                                                                                   */
/* ===================================================================================== */

/* Read and drop n bytes. 0 on success. */
int as_skip_bytes(int fd, uint64_t n) {
    char buf[65536];
    while (n > 0) {
        size_t want = n < sizeof buf ? (size_t)n : sizeof buf;
        if (qc_fd_read_all(fd, buf, want) != 1) return -1;
        n -= want;
    }
    return 0;
}

static void put_u32le(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64le(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
uint32_t as_get_u32le(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
uint64_t as_get_u64le(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Write float32 data little-endian. */
static int write_f32le(int fd, const float *data, size_t count) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return qc_fd_write_all(fd, data, count * sizeof(float));
#else
    unsigned char buf[4096];
    size_t i = 0;
    while (i < count) {
        size_t m = 0;
        for (; i < count && m + 4 <= sizeof buf; i++, m += 4) {
            uint32_t u;
            memcpy(&u, &data[i], 4);
            put_u32le(buf + m, u);
        }
        if (qc_fd_write_all(fd, buf, m)) return -1;
    }
    return 0;
#endif
}

/* Replace bytes that are not valid UTF-8 with '?' (the header must be UTF-8 JSON; a plugin's
 * error text may be anything). In place. */
void as_utf8_sanitize(char *s) {
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        int len = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3
                  : (*p & 0xF8) == 0xF0 ? 4 : 0;
        int ok = len > 0 && !(len == 2 && *p < 0xC2) && !(len == 4 && *p > 0xF4);
        for (int i = 1; ok && i < len; i++)
            if ((p[i] & 0xC0) != 0x80) ok = 0;
        if (!ok) {
            *p++ = '?';
            continue;
        }
        p += len;
    }
}

/* Send one frame: header (tensors listed in it when nt > 0), payload = the tensors. Consumes
 * hdr. 0 on success, -1 when stdout is gone. */
int as_send_frame(as_server *s, cJSON *hdr, const as_tensor *t, int nt) {
    uint64_t payload = 0;
    if (nt > 0) {
        cJSON *arr = cJSON_AddArrayToObject(hdr, "tensors");
        for (int i = 0; arr && i < nt; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON *sh = cJSON_CreateArray();
            if (!e || !sh) {
                cJSON_Delete(e);
                cJSON_Delete(sh);
                arr = NULL;
                break;
            }
            cJSON_AddStringToObject(e, "name", t[i].name);
            for (int d = 0; d < t[i].rank; d++)
                cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
            cJSON_AddItemToObject(e, "shape", sh);
            cJSON_AddItemToArray(arr, e);
            payload += (uint64_t)t[i].count * 4u;
        }
        if (!arr) {
            cJSON_Delete(hdr);
            fprintf(stderr, "%s: out of memory building a response header\n", AS_PROG);
            hdr = cJSON_CreateObject();
            cJSON_AddStringToObject(hdr, "type", "error");
            cJSON_AddStringToObject(hdr, "message", "adapter-serve: out of memory");
            nt = 0;
            payload = 0;
        }
    }
    char *text = hdr ? cJSON_PrintUnformatted(hdr) : NULL;
    cJSON_Delete(hdr);
    if (!text) {
        /* cJSON itself out of memory: a fixed error frame */
        static const char fixed[] = "{\"type\":\"error\",\"message\":\"adapter-serve: out of memory\"}";
        unsigned char pre[16];
        memcpy(pre, "QCAP", 4);
        put_u32le(pre + 4, (uint32_t)(sizeof fixed - 1));
        put_u64le(pre + 8, 0);
        return qc_fd_write_all(s->out_fd, pre, 16) || qc_fd_write_all(s->out_fd, fixed, sizeof fixed - 1)
                   ? -1 : 0;
    }
    size_t hlen = strlen(text);
    unsigned char pre[16];
    memcpy(pre, "QCAP", 4);
    put_u32le(pre + 4, (uint32_t)hlen);
    put_u64le(pre + 8, payload);
    int rc = qc_fd_write_all(s->out_fd, pre, 16) || qc_fd_write_all(s->out_fd, text, hlen) ? -1 : 0;
    free(text);
    for (int i = 0; !rc && i < nt; i++)
        if (t[i].count && write_f32le(s->out_fd, t[i].data, t[i].count)) rc = -1;
    return rc;
}

int as_send_ok(as_server *s, cJSON *extra_info, const as_tensor *t, int nt) {
    cJSON *h = cJSON_CreateObject();
    if (h) {
        cJSON_AddStringToObject(h, "type", "ok");
        if (extra_info) cJSON_AddItemToObject(h, "info", extra_info);
    } else {
        cJSON_Delete(extra_info);
    }
    return as_send_frame(s, h, t, h ? nt : 0);
}

int as_send_error(as_server *s, as_fail *f) {
    as_utf8_sanitize(f->msg);
    /* our own refusals are logged; a plugin's failure travels in the frame only, so that the
     * last stderr lines the host shows stay the plugin's own */
    if (!f->from_plugin)
        fprintf(stderr, "%s: refused: %s\n", AS_PROG, f->msg);
    cJSON *h = cJSON_CreateObject();
    if (h) {
        cJSON_AddStringToObject(h, "type", "error");
        if (f->unsupported) cJSON_AddTrueToObject(h, "unsupported");
        cJSON_AddStringToObject(h, "message", f->msg);
    }
    return as_send_frame(s, h, NULL, 0);
}
