/* qc_text.h — private to runtime/: the text helpers the runtime's messages share (a tensor
 * shape). Not installed; the harness has its own shape text (harness/io/qc_shape.h), as
 * runtime/ headers are not on its include path.
 */
#ifndef QC_TEXT_H
#define QC_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* "[a,b,c]": the nd extents sh[0..nd) into buf (n: its size; cut at n). */
void qc_text_shape(char *buf, size_t n, const int64_t *sh, int nd);

#endif /* QC_TEXT_H */
