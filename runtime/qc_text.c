/* qc_text.c — the runtime's shared message text (qc_text.h): a tensor shape. */
#include "qc_text.h"

#include <stdio.h>

void qc_text_shape(char *buf, size_t n, const int64_t *sh, int nd) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)sh[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}
