/* qc_report_buf.h — the growing text buffer every report writer builds its text in (HTML, SVG,
 * JUnit). Ownership: the caller frees b->s; after an allocation failure b->oom is set and
 * nothing more is added (the writer then reports out of memory). */
#ifndef QC_REPORT_BUF_H
#define QC_REPORT_BUF_H

#include <stddef.h>

typedef struct {
    char *s;     /* [cap] NUL-terminated text (NULL until the first append) */
    size_t n;    /* length */
    size_t cap;  /* capacity */
    int oom;     /* 1 after an allocation failure */
} qc_sbuf;

/* Append printf-formatted text. */
void qc_sbuf_printf(qc_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* QC_REPORT_BUF_H */
