/* qc_shape.c — a tensor shape as message text (qc_shape.h). */
#include "qc_shape.h"

#include <stdio.h>

const char *qc_shape_str(char *buf, size_t cap, const int64_t *d, int n, const char *wild) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && o < cap; i++) {
        if (wild && d[i] < 0)
            o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? "," : "", wild);
        else
            o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? "," : "", (long long)d[i]);
    }
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}
