/* fuzz_index.c — libFuzzer target for the sharded-checkpoint index
 * (model.safetensors.index.json), parsed and cross-checked inside qc_model_load.
 *
 * Once per process: a temp model directory (under $TMPDIR, /dev/shm preferred) with the tiny
 * model's config.json and its two shards (fuzz/tiny_model.h); no model.safetensors, so the
 * loader takes the sharded path. Per input: the index file's bytes are written there and
 * qc_model_load runs on the directory.
 * Checks: no crash / leak / UB / hang; errors name a file inside the directory; a success
 * is the complete tiny model (27 text tensors, nothing skipped).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "qc/qc_model.h"
#include "tiny_model.h"

static char g_dir[512];

static void cleanup(void) {
    if (!g_dir[0]) return;
    const char *names[] = {"config.json", TM_SHARD1, TM_SHARD2, "model.safetensors.index.json"};
    char p[1024];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, names[i]);
        unlink(p);
    }
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    struct stat sb;
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = stat("/dev/shm", &sb) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/qc-fuzz-index-XXXXXX", base);
    if (!mkdtemp(g_dir) || tm_write_sharded(g_dir, 0) != 0) {
        fprintf(stderr, "fuzz_index: cannot create the model directory %s\n", g_dir);
        abort();
    }
    atexit(cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (tm_write_file(g_dir, "model.safetensors.index.json", data, size) != 0) abort();
    qc_model *m = NULL;
    qc_err err;
    qc_err_clear(&err);
    qc_status st = qc_model_load(g_dir, &m, &err);
    fz_check_error(st, &err, g_dir);
    if (st == QC_OK) {
        FZ_REQUIRE(m != NULL, "OK without a model");
        FZ_REQUIRE(m->n_tensors_loaded == 27 && m->n_tensors_skipped == 0,
                   "loaded %d skipped %d", m->n_tensors_loaded, m->n_tensors_skipped);
        FZ_REQUIRE(m->cfg.n_layers == TM_L && m->layers != NULL, "layers");
        qc_model_free(m);
    } else {
        FZ_REQUIRE(m == NULL, "error left a model behind");
    }
    return 0;
}
