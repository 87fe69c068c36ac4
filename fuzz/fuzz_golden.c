/* fuzz_golden.c — libFuzzer target for the golden HDF5 reader (qc_golden_open).
 *
 * Structure-aware: mutating raw HDF5 bytes mostly exercises libhdf5's own superblock checks,
 * so the input is instead a program of 4-byte edits [op, item, a, b] applied to a valid golden
 * (schema v1, the tiny model of fuzz/tiny_model.h, two cases: "c1" with a 3-token prompt and
 * 2 decode steps, "c2" a continuation at start_pos 2 with no decode). Each item is one root /
 * case attribute or one dataset; the edits delete items, change ranks, extents, HDF5 types
 * (int32 / int64 / float32 / float64 / fixed or variable strings), inject NaN / +-Inf, change
 * integer attributes and token ids (negative, >= vocab, extremes), rewrite string attributes
 * (config_json included, so the embedded config parser is reached too), rename case groups,
 * add unknown objects, put a dataset where a group belongs, and truncate the written file.
 * The file is written with the HDF5 API to $TMPDIR (/dev/shm preferred) and read back.
 *
 * Checks: no crash / leak / UB / hang, no handle left open (the reader asserts it); errors name
 * the file; on success the in-memory golden agrees with what was written (case count, token
 * counts, finite floats).
 */
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "../harness/io/qc_golden.h"
#include "golden_builder.h"

/* ===================================================================================== */
/* Target                                                                                */
/* ===================================================================================== */

static char g_path[512];

static void cleanup(void) {
    if (g_path[0]) unlink(g_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    struct stat sb;
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = stat("/dev/shm", &sb) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_path, sizeof g_path, "%s/qc-fuzz-golden-%d.h5", base, (int)getpid());
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    atexit(cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4 * 64) return 0; /* at most 64 edits */
    golden_prog g;
    base_program(&g);
    for (size_t i = 0; i + 4 <= size; i += 4) apply_edit(&g, data + i);
    int wrote = write_program(&g, g_path);
    free_program(&g);
    if (wrote != 0) return 0;

    qc_golden *gd = NULL;
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_golden_open(g_path, &gd, &err);
    fz_check_error(st, &err, g_path);
    if (st == QC_OK) {
        FZ_REQUIRE(gd != NULL && gd->schema_version == 1, "golden");
        FZ_REQUIRE(gd->n_cases >= 0 && gd->n_cases <= 8, "n_cases %d", gd->n_cases);
        for (int c = 0; c < gd->n_cases; c++) {
            const qc_golden_case *k = &gd->cases[c];
            FZ_REQUIRE(k->n_tokens >= 1 && k->tokens, "case %s tokens", k->name);
            FZ_REQUIRE(k->n_history == k->start_pos, "case %s history", k->name);
            for (int t = 0; t < k->n_tokens; t++)
                FZ_REQUIRE(k->tokens[t] >= 0 && k->tokens[t] < gd->cfg.vocab_size, "token");
            size_t nl = (size_t)k->n_tokens * (size_t)gd->cfg.vocab_size;
            for (size_t i = 0; i < nl; i++)
                FZ_REQUIRE(isfinite(k->prefill_logits[i]), "non-finite logit accepted");
            FZ_REQUIRE(k->n_decode == 0 || (k->decode_tokens && k->decode_logits), "decode");
        }
        qc_golden_free(gd);
    } else {
        FZ_REQUIRE(gd == NULL, "error left a golden behind");
    }
    return 0;
}
