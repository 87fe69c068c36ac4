/* qc_text.h — private to runtime/: the text helpers the runtime's messages share (a value
 * quoted from an input file, a tensor shape). Not installed; the harness has its own shape text (harness/io/qc_shape.h), as
 * runtime/ headers are not on its include path.
 */
#ifndef QC_TEXT_H
#define QC_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* A string from an input file (a config value, a profile key), safe to quote in a message: at
 * most its first 64 bytes, printable ASCII kept and any other byte as '?', "..." appended when
 * there is more. n (buf's size) must be at least 4; a shorter n cuts earlier. Returns buf. */
const char *qc_text_clean(const char *s, char *buf, size_t n);

/* "[a,b,c]": the nd extents sh[0..nd) into buf (n: its size; cut at n). */
void qc_text_shape(char *buf, size_t n, const int64_t *sh, int nd);

#endif /* QC_TEXT_H */
