/* qc_ref_faults.c — the self-test's fault variants of the reference backend (qc_ref_faults.h):
 * each replaces one step of the model with the way a known port got it wrong. Reached only
 * through the backend's set_option; nothing here runs unless a test asks for it. */
#include "qc_ref_faults.h"

#include <math.h>
#include <string.h>

/* ---- fault.unguarded_exp: the factored decay ratio (pytorch/executorch#21417) ---- */

static float decay_factored(const qc_ref_dn_scratch *s, int r, int c, int exact) {
    (void)exact; /* the bug ignores the exact path too */
    return expf(s->gamma[r]) * expf(-s->gamma[c]);
}

qc_ref_dn_decay_fn qc_ref_fault_decay(int on) { return on ? decay_factored : qc_ref_dn_decay; }

/* ---- fault.moe ---- */

/* topk_next: the k + 1 most probable, the k-th dropped (slot k-1 holds the (k+1)-th) */
static void topk_next(const float *p, int E, int k, float *ids) {
    if (k >= E) {
        qc_ref_moe_topk(p, E, k, ids);
        return;
    }
    qc_ref_moe_topk(p, E, k + 1, ids); /* ids has room for k + 1 */
    ids[k - 1] = ids[k];
}

/* no_renorm: the raw probability */
static float raw_weight(float p, float psum) {
    (void)psum;
    return p;
}

/* gate_drop: the gate taken as 1 */
static float no_gate(float logit) {
    (void)logit;
    return 1.0f;
}

/* gate_all: out = g * (routed + shared) */
static void gate_everything(float *out, const float *s, float g, int H) {
    for (int i = 0; i < H; i++) out[i] = g * (out[i] + s[i]);
}

static const struct {
    const char *name;
    qc_ref_moe_ops ops; /* entries NULL: the model's step (filled in below) */
} MOE[] = {
    {"none", {NULL, NULL, NULL, NULL}},
    {"no_renorm", {NULL, raw_weight, NULL, NULL}},
    {"gate_all", {NULL, NULL, NULL, gate_everything}},
    {"topk_next", {topk_next, NULL, NULL, NULL}},
    {"gate_drop", {NULL, NULL, no_gate, NULL}},
};
#define N_MOE ((int)(sizeof MOE / sizeof *MOE))

const qc_ref_moe_ops *qc_ref_fault_moe(const char *name) {
    static qc_ref_moe_ops full[N_MOE]; /* each variant completed with the model's steps */
    for (int i = 0; i < N_MOE; i++) {
        if (strcmp(MOE[i].name, name)) continue;
        if (i == 0) return &qc_ref_moe_spec;
        const qc_ref_moe_ops *v = &MOE[i].ops, *m = &qc_ref_moe_spec;
        full[i].choose = v->choose ? v->choose : m->choose;
        full[i].weight = v->weight ? v->weight : m->weight;
        full[i].gate = v->gate ? v->gate : m->gate;
        full[i].combine = v->combine ? v->combine : m->combine;
        return &full[i];
    }
    return NULL;
}

const char *qc_ref_fault_moe_names(void) {
    return "none, no_renorm, gate_all, topk_next, gate_drop";
}
