/* qc_text.c — the runtime's shared message text (qc_text.h): a quoted input string, a tensor
 * shape. */
#include "qc_text.h"

#include <stdio.h>

const char *qc_text_clean(const char *s, char *buf, size_t n) {
    size_t o = 0, i = 0;
    for (; s[i] && o + 4 < n && i < 64; i++)
        buf[o++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (s[i]) buf[o++] = '.', buf[o++] = '.', buf[o++] = '.';
    buf[o] = '\0';
    return buf;
}

void qc_text_shape(char *buf, size_t n, const int64_t *sh, int nd) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)sh[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}
