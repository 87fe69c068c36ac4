/* fuzz_common.h — invariants shared by the libFuzzer targets in fuzz/fuzz_*.c.
 *
 * Every target feeds one input to one parser and then checks the contract every parser of
 * qwen-conform owes its callers, trapping (a "crash" libFuzzer reports and saves) when:
 *   - an error status comes with an empty message, or a message that does not name the file
 *     (or the source) it was given ("<path>: <field>: ...");
 *   - a success leaves results that break the documented invariants (checked per target).
 * ASan + UBSan (the QC_FUZZ build) catch out-of-bounds reads, leaks and undefined behaviour.
 */
#ifndef QC_FUZZ_COMMON_H
#define QC_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_status.h"

/* Abort with a readable reason (libFuzzer then saves the input as crash-<sha1>). */
#define FZ_REQUIRE(cond, ...)                                                        \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "fuzz invariant violated (%s:%d): %s: ", __FILE__, __LINE__, \
                    #cond);                                                          \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
            abort();                                                                 \
        }                                                                            \
    } while (0)

/* The error contract: a status other than QC_OK carries err->code == st and a one-line
 * message that names `source` (the file or flag the parser was given). */
static inline void fz_check_error(qc_status st, const qc_err *err, const char *source) {
    static int verbose = -1; /* QC_FUZZ_VERBOSE=1: print every outcome (replaying an input) */
    if (verbose < 0) verbose = getenv("QC_FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "[%s] %s\n", qc_status_str(st), st ? err->msg : "accepted");
    if (st == QC_OK) return;
    FZ_REQUIRE(err->code == st, "err->code %d != returned status %d (msg '%s')", (int)err->code,
               (int)st, err->msg);
    FZ_REQUIRE(err->msg[0] != '\0', "status %s with an empty message", qc_status_str(st));
    FZ_REQUIRE(strstr(err->msg, source) != NULL, "message does not name '%s': %s", source,
               err->msg);
}

/* A NUL-terminated copy of the input (parsers that take C strings). Caller frees. */
static inline char *fz_cstr(const uint8_t *data, size_t size) {
    char *s = (char *)malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* An exact-size heap copy (ASan then flags any read past the end of the input). */
static inline uint8_t *fz_copy(const uint8_t *data, size_t size) {
    uint8_t *b = (uint8_t *)malloc(size ? size : 1);
    if (!b) abort();
    if (size) memcpy(b, data, size);
    return b;
}

#endif /* QC_FUZZ_COMMON_H */
