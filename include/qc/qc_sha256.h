/* qc_sha256.h — a small self-contained SHA-256 (FIPS 180-4) with a streaming API.
 *
 * Used for the provenance hashes of a loaded model (config.json bytes, weight files) and by
 * anything that records what it was run on. Uses the x86 SHA extensions when the CPU has them
 * (checked at run time), else portable C; both give identical digests.
 */
#ifndef QC_SHA256_H
#define QC_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "qc/qc_status.h"

typedef struct {
    uint32_t h[8];       /* chaining state */
    uint64_t nbytes;     /* total bytes absorbed */
    uint8_t buf[64];     /* pending partial block */
    size_t buflen;       /* bytes pending in buf, 0..63 */
} qc_sha256_ctx;

void qc_sha256_init(qc_sha256_ctx *c);
void qc_sha256_update(qc_sha256_ctx *c, const void *data, size_t len);
void qc_sha256_final(qc_sha256_ctx *c, uint8_t digest[32]);

/* 1 if the x86 SHA extensions are used (QC_SHA256_PORTABLE=1 in the environment forces the
 * portable C path; read at every call). */
int qc_sha256_accelerated(void);

/* digest -> 64 lowercase hex chars + NUL. */
void qc_sha256_to_hex(const uint8_t digest[32], char hex[65]);

/* One-shot helpers. */
void qc_sha256_buf_hex(const void *data, size_t len, char hex[65]);
/* Hash a whole file (read in blocks). QC_ERR_IO naming the file on failure. */
qc_status qc_sha256_file_hex(const char *path, char hex[65], qc_err *err);

#endif /* QC_SHA256_H */
