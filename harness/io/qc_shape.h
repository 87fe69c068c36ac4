/* qc_shape.h — a tensor shape (or an index into one) as message text, "[7,512]", for every
 * harness folder. (runtime/ has its own copy, runtime/qc_text.h: a runtime-private header is
 * not on the harness's include path and the shape text is no part of the public API.)
 */
#ifndef QC_SHAPE_H
#define QC_SHAPE_H

#include <stddef.h>
#include <stdint.h>

/* "[a,b,c]": the n extents d[0..n) into buf (cap: its size; cut at cap). wild: NULL prints
 * every extent as a number; otherwise a negative extent (a wanted shape's "any extent") is
 * printed as wild ("[*,16]", "[N,248320]"). Returns buf. */
const char *qc_shape_str(char *buf, size_t cap, const int64_t *d, int n, const char *wild);

#endif /* QC_SHAPE_H */
