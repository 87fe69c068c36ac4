/* consumer.c — a program outside the tree that uses an INSTALLED qwen-conform (tests/install):
 * load a Hugging Face checkpoint, run one reference forward over a fixed prompt (and the same on
 * the optimized backend), print checksums of the logits.
 *
 *   qc_consumer MODEL_DIR
 *   -> "reference logits [13 x V]: sum <%.17g> fnv1a <hex>"  (and the same for optimized)
 *
 * Only the public API: qc/ headers, linked through find_package(qwen_conform) or
 * `pkg-config qwen-conform`. The same source is built in-tree (qc_install_consumer_intree) and
 * its output is what the installed builds must print, byte for byte.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_model.h"
#include "qc/qc_optimized.h"
#include "qc/qc_probe.h"
#include "qc/qc_reference.h"
#include "qc/qc_state.h"
#include "qc/qc_status.h"

#define N_TOKENS 13

typedef qc_status (*create_fn)(const qc_model *, const qc_backend_opts *, qc_backend **,
                               qc_err *);

/* one forward of N_TOKENS tokens at position 0 on a fresh state, all logits; prints checksums */
static int run(const char *label, create_fn create, const qc_model *m) {
    const int V = m->cfg.vocab_size;
    int32_t toks[N_TOKENS];
    for (int i = 0; i < N_TOKENS; i++) toks[i] = (int32_t)((i * 37 + 11) % V);
    qc_err e;
    qc_err_clear(&e);
    qc_backend_opts o;
    qc_backend_opts_default(&o);
    o.max_tokens = N_TOKENS;
    qc_backend *be = NULL;
    qc_state *st = NULL;
    float *logits = malloc((size_t)N_TOKENS * (size_t)V * sizeof *logits);
    if (!logits) return 1;
    if (create(m, &o, &be, &e) != QC_OK || qc_state_create(&m->cfg, N_TOKENS, &st, &e) != QC_OK ||
        qc_backend_forward(be, toks, N_TOKENS, 0, st, logits, 1, &e) != QC_OK) {
        fprintf(stderr, "qc_consumer: %s: %s\n", label, e.msg);
        return 1;
    }
    double sum = 0;
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the logits' bytes */
    const unsigned char *b = (const unsigned char *)logits;
    for (size_t i = 0; i < (size_t)N_TOKENS * (size_t)V; i++) sum += logits[i];
    for (size_t i = 0; i < (size_t)N_TOKENS * (size_t)V * sizeof *logits; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    printf("%s logits [%d x %d]: sum %.17g fnv1a %016llx\n", label, N_TOKENS, V, sum,
           (unsigned long long)h);
    free(logits);
    qc_state_destroy(st);
    qc_backend_destroy(be);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: qc_consumer MODEL_DIR\n");
        return 2;
    }
    qc_err e;
    qc_err_clear(&e);
    qc_model *m = NULL;
    if (qc_model_load(argv[1], &m, &e) != QC_OK) {
        fprintf(stderr, "qc_consumer: %s\n", e.msg);
        return 1;
    }
    printf("model: %d layers, hidden %d, vocab %d, weights sha256 %s\n", m->cfg.n_layers,
           m->cfg.hidden_size, m->cfg.vocab_size, m->weights_sha256);
    int rc = run("reference", qc_reference_create, m) || run("optimized", qc_optimized_create, m);
    fprintf(stderr, "qc_consumer: optimized kernels %s\n", qc_probe_isa());
    qc_model_free(m);
    return rc;
}
