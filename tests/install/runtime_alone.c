/* runtime_alone.c — the runtime layer builds and links by itself (CTest `runtime_alone`).
 *
 * Linked against qc_runtime ONLY (plus cJSON, OpenMP, libm), as a whole archive: every object of
 * libqc_runtime.a is in the link, so a reference from any of them to a backend
 * (qc_reference_create, qc_optimized_create) or to the harness fails the build, not just a
 * reference from the objects this program happens to call. At run time: load a fixture model,
 * create a state, plan its memory, make and drop an empty backend, and run the prefill
 * controller's argument checks with no backend behind it.
 *
 *   qc_runtime_alone MODEL_DIR   exit 0 and "runtime_alone: ok ..." on success
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_backend.h"
#include "qc/qc_config.h"
#include "qc/qc_memplan.h"
#include "qc/qc_model.h"
#include "qc/qc_prefill.h"
#include "qc/qc_sha256.h"
#include "qc/qc_state.h"
#include "qc/qc_status.h"

static int fail(const char *what, const qc_err *e) {
    fprintf(stderr, "runtime_alone: %s: %s\n", what, e->msg[0] ? e->msg : "(no message)");
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: qc_runtime_alone MODEL_DIR\n");
        return 2;
    }
    qc_err e;
    qc_err_clear(&e);
    qc_model *m = NULL;
    if (qc_model_load(argv[1], &m, &e) != QC_OK) return fail("qc_model_load", &e);
    const qc_config *c = &m->cfg;
    if (c->n_layers < 1 || c->vocab_size < 1 || strlen(m->weights_sha256) != 64) {
        fprintf(stderr, "runtime_alone: implausible model (L %d, V %d)\n", c->n_layers,
                c->vocab_size);
        return 1;
    }
    const int ctx = 32;
    qc_state *st = NULL;
    if (qc_state_create(c, ctx, &st, &e) != QC_OK) return fail("qc_state_create", &e);
    qc_state_fill(st, 1.0f);
    qc_state_reset(st);
    if (st->pos != 0 || st->max_context_len != ctx) {
        fprintf(stderr, "runtime_alone: state geometry\n");
        return 1;
    }

    qc_memplan_req rq;
    qc_memplan_req_init(&rq, c, m->embed.dtype, ctx, 8);
    rq.weight_bytes = qc_model_weight_bytes(m);
    qc_memplan plan;
    if (qc_memplan_estimate(&rq, &plan, &e) != QC_OK) return fail("qc_memplan_estimate", &e);
    if (plan.state != (uint64_t)qc_state_bytes(c, ctx)) {
        fprintf(stderr, "runtime_alone: memplan state %llu != qc_state_bytes %zu\n",
                (unsigned long long)plan.state, qc_state_bytes(c, ctx));
        return 1;
    }

    /* the backend interface without a backend: allocate, reset through it, destroy */
    qc_backend_opts o;
    qc_backend_opts_default(&o);
    qc_backend *be = qc_backend_alloc();
    if (!be || be->caps != QC_BE_CAP_ALL) {
        fprintf(stderr, "runtime_alone: qc_backend_alloc\n");
        return 1;
    }
    be->name = "none";
    be->model = m;
    be->opts = o;
    if (qc_backend_reset(be, st, &e) != QC_OK) return fail("qc_backend_reset", &e);
    qc_runner *r = NULL;
    qc_profile p;
    qc_profile_default(&p);
    p.max_context_len = ctx;
    p.max_seq_len = 8;
    o.max_tokens = 8;
    be->opts = o;
    if (qc_runner_create(be, &p, st, &r, &e) != QC_OK) return fail("qc_runner_create", &e);
    int32_t bad = c->vocab_size; /* out of range: refused before any forward call */
    if (qc_runner_prefill(r, &bad, 1, 0, NULL, NULL, NULL, &e) != QC_ERR_RANGE) {
        fprintf(stderr, "runtime_alone: a bad token id was not refused\n");
        return 1;
    }
    qc_runner_destroy(r);
    free(be); /* no destroy hook: nothing behind it */

    printf("runtime_alone: ok (%d layers, V %d, state %zu bytes, weights %.12s..., sha256 %s)\n",
           c->n_layers, c->vocab_size, qc_state_bytes(c, ctx), m->weights_sha256,
           qc_sha256_accelerated() ? "accelerated" : "portable");
    qc_state_destroy(st);
    qc_model_free(m);
    return 0;
}
