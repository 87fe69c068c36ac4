/* qc_adapter_templates.h — the skeleton files `qwen-conform adapter-init` writes: every file of
 * adapters/templates/<kind>/ embedded at build time (cmake/embed_templates.cmake generates the
 * table in the build tree). */
#ifndef QC_ADAPTER_TEMPLATES_H
#define QC_ADAPTER_TEMPLATES_H

#include <stddef.h>

typedef struct {
    const char *kind;          /* "python" | "c": the directory under adapters/templates/ */
    const char *name;          /* the file name written into the user's directory */
    const unsigned char *data; /* its bytes (placeholders @QC_SOURCE_DIR@, @QC_BUILD_DIR@) */
    size_t len;                /* number of bytes */
} qc_adapter_template;

extern const qc_adapter_template qc_adapter_templates[]; /* sorted by kind, then name */
extern const int qc_adapter_n_templates;

#endif
