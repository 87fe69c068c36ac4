/* qc_diff_file.c — one GOLDEN x ACTUAL pair for `qwen-conform diff`: the two files told apart
 * (a golden passed as ACTUAL, or the other way round, is said so), the provenance compared
 * when the ACTUAL carries it, the coverage of the golden's cases, every case, the layout the
 * ACTUAL was read in. */

#include "qc_diff_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* ===================================================================================== */
/* telling the two files apart                                                           */
/* ===================================================================================== */

static void qd_file_error(ck_ctx *c, const diff_opts *d, const char *msg) {
    ck_emit_simple(c, "_file", d->label, "file", "read", QC_VERDICT_ERROR, msg,
                   qc_strdup_printf("%s", msg));
}

static void qd_warn(ck_ctx *c, const char *msg) {
    qc_results_warn(c->res, "%s", msg);
    fprintf(stderr, "qwen-conform: warning: %s\n", msg);
}

/* 1 when the ACTUAL's root attributes are a golden's (the golden generator's signature). A
 * float64 compute_dtype alone is not: an independent float64 implementation is a runtime. */
static int qd_looks_golden(const qc_actual *a) {
    return !strncmp(a->generator, "qwen-conform-golden", 19);
}

/* 1 when the first golden case the ACTUAL has holds bit-identical prefill logits in both (the
 * golden itself, not a runtime's output). Read errors: 0 (the case loop reports them). */
static int qd_identical_logits(qc_golden *g, qc_actual *a) {
    qc_err err;
    qc_err_clear(&err);
    for (int i = 0; i < g->n_cases; i++) {
        int ai = qc_actual_find(a, g->cases[i].name);
        if (ai < 0) continue;
        int same = 0;
        qc_actual_case keep = a->cases[ai]; /* the layout counts of this look are not kept */
        if (!qc_golden_load_case(g, i, &err) &&
            !qc_actual_load_case(a, ai, &g->cfg, &g->cases[i], &err))
            same = a->cases[ai].n_rows == g->cases[i].n_tokens &&
                   !memcmp(a->cases[ai].prefill_logits, g->cases[i].prefill_logits,
                           (size_t)g->cases[i].n_tokens * g->cfg.vocab_size * sizeof(float));
        qc_actual_unload_case(a, ai, &g->cfg);
        a->cases[ai].n_canonical = keep.n_canonical;
        a->cases[ai].n_hf = keep.n_hf;
        a->cases[ai].n_conv_k1 = keep.n_conv_k1;
        a->cases[ai].n_static_kv = keep.n_static_kv;
        qc_golden_unload_case(g, i);
        return same;
    }
    return 0;
}

/* A golden passed as the ACTUAL (its generator's signature, and: its logits bit-identical to
 * the golden's, another model's config, or a float32 GOLDEN: the two swapped): an ERROR row,
 * returns 1. The signature alone (a golden copied and its tensors replaced) is a warning. */
static int qd_golden_as_actual(ck_ctx *c, const diff_opts *d, qc_golden *g, qc_actual *a) {
    if (!qd_looks_golden(a)) return 0;
    int swapped = strcmp(g->compute_dtype, "float64") != 0;
    int other = 0;
    qc_config ac;
    qc_err err;
    qc_err_clear(&err);
    if (a->config_json)
        other = qc_config_parse(a->config_json, strlen(a->config_json), a->path, &ac, &err) ||
                !ck_cfg_same(&ac, &g->cfg);
    int same = !swapped && !other && qd_identical_logits(g, a);
    if (swapped || other || same) {
        char msg[1600];
        snprintf(msg, sizeof msg, "%s: / (attr generator \"%s\"): this is a golden, not a "
                 "runtime's output (%s)", a->path, a->generator,
                 swapped ? "and GOLDEN is a float32 run: the arguments look swapped; the golden "
                           "comes first"
                 : other ? "of another model" : "its prefill/logits are the golden's, bit for bit");
        qd_file_error(c, d, msg);
        return 1;
    }
    char w[1400];
    snprintf(w, sizeof w, "%s: its root attributes are a golden's (generator \"%s\") but its "
             "tensors are not the golden's: compared as a runtime's output", a->path,
             a->generator);
    qd_warn(c, w);
    return 0;
}

/* The golden, opened lazily; an ERROR row (with a hint when it looks like an ACTUAL) else. */
static qc_golden *qd_open_golden(ck_ctx *c, const diff_opts *d, const char *gpath,
                                 const char *apath) {
    qc_golden *g = NULL;
    qc_err err;
    qc_err_clear(&err);
    if (!qc_golden_open_lazy(gpath, &g, &err)) return g;
    char msg[1400];
    const char *hint = "";
    qc_actual *probe = NULL;
    qc_err e2;
    qc_err_clear(&e2);
    if (err.code == QC_ERR_MISSING && !qc_actual_open(gpath, QC_LAYOUT_AUTO, &probe, &e2)) {
        qc_actual *other = NULL;
        if (!qc_actual_open(apath, QC_LAYOUT_AUTO, &other, &e2) && qd_looks_golden(other))
            hint = " (GOLDEN.h5 reads as an ACTUAL file and ACTUAL.h5 as a golden: the "
                   "arguments look swapped; the golden comes first)";
        else
            hint = " (it reads as an ACTUAL file, not a golden: the golden comes first, with "
                   "its provenance: golden/SCHEMA.md)";
        qc_actual_free(other, NULL);
    }
    qc_actual_free(probe, NULL);
    snprintf(msg, sizeof msg, "%s%s", err.msg, hint);
    qd_file_error(c, d, msg);
    return NULL;
}

/* ===================================================================================== */
/* provenance                                                                            */
/* ===================================================================================== */

/* The model_hash row: the ACTUAL's config_json / hashes (each optional) against the golden's.
 * Returns 0 when the ACTUAL's config is another model's (nothing else can be compared). */
static int qd_provenance(ck_ctx *c, const diff_opts *d, const qc_golden *g, const qc_actual *a) {
    char key[320], det[1200] = "";
    if (a->notes[0]) qd_warn(c, a->notes);
    if (a->config_json) {
        qc_config ac;
        qc_err err;
        qc_err_clear(&err);
        char where[1100];
        snprintf(where, sizeof where, "%s: / (attr config_json)", a->path);
        if (qc_config_parse(a->config_json, strlen(a->config_json), where, &ac, &err)) {
            /* optional: a config this reader cannot parse is not compared */
            char w[1300];
            snprintf(w, sizeof w, "%s: not compared", err.msg);
            qd_warn(c, w);
        } else if (!ck_cfg_same(&ac, &g->cfg)) {
            snprintf(key, sizeof key, "ACTUAL was computed from a different model: its "
                     "config_json differs from the golden's");
            ck_emit_simple(c, "_file", d->label, "file", "model_hash", QC_VERDICT_FAIL, key,
                           qc_strdup_printf("%s (%s vs %s): the tensors cannot be compared.",
                                            key, a->path, g->path));
            return 0;
        }
    }
    int have = 0, bad = 0;
    const char *names[2] = {"config", "weights"};
    const char *as[2] = {a->config_sha256, a->weights_sha256};
    const char *gs[2] = {g->config_sha256, g->weights_sha256};
    size_t o = 0;
    for (int k = 0; k < 2; k++) {
        if (!as[k][0] || !gs[k][0]) continue;
        have++;
        if (!strcasecmp(as[k], gs[k])) continue;
        bad++;
        o += (size_t)snprintf(det + o, sizeof det - o, "%s%s sha256 %s != %s", o ? "; " : "",
                              names[k], as[k], gs[k]);
    }
    if (bad) {
        snprintf(key, sizeof key, "ACTUAL was computed from a different model: %s", det);
        ck_emit_simple(c, "_file", d->label, "file", "model_hash", QC_VERDICT_FAIL, key,
                       qc_strdup_printf("%s\n(ACTUAL %s, golden %s; the tensors are still "
                                        "compared below)", key, a->path, g->path));
    } else if (have) {
        snprintf(key, sizeof key, "the ACTUAL's %s hash%s match%s the golden's",
                 have == 2 ? "config and weights" : as[0][0] ? "config" : "weights",
                 have == 2 ? "es" : "", have == 2 ? "" : "es");
        ck_emit_simple(c, "_file", d->label, "file", "model_hash", QC_VERDICT_PASS, key, NULL);
    } else {
        ck_emit_simple(c, "_file", d->label, "file", "model_hash", QC_VERDICT_SKIP,
                       "the ACTUAL carries no config_sha256 / weights_sha256 (optional): the "
                       "model is not compared", NULL);
    }
    return 1;
}

/* ===================================================================================== */
/* coverage and the cases                                                                */
/* ===================================================================================== */

static int qd_selected(const diff_opts *d, const char *name) {
    return !d->has_cases || regexec(&d->cases, name, 0, NULL, 0) == 0;
}

/* ACTUAL cases with no golden case: an ERROR row naming them. */
static void qd_unknown_cases(ck_ctx *c, const diff_opts *d, const qc_golden *g, const qc_actual *a) {
    char names[1200] = "";
    size_t o = 0;
    int n = 0;
    for (int i = 0; i < a->n_cases; i++) {
        int found = 0;
        for (int j = 0; j < g->n_cases && !found; j++) found = !strcmp(g->cases[j].name,
                                                                      a->cases[i].name);
        if (found) continue;
        n++;
        if (o < sizeof names)
            o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", o ? ", " : "",
                                  a->cases[i].name);
    }
    if (!n) return;
    char key[320];
    snprintf(key, sizeof key, "%d ACTUAL case%s with no golden counterpart: %s", n,
             n == 1 ? "" : "s", names);
    ck_emit_simple(c, "_file", d->label, "file", "coverage", QC_VERDICT_ERROR, key,
                   qc_strdup_printf("%s: /cases/{%s}: not in %s (a misnamed case, or an ACTUAL "
                                    "of another golden)", a->path, names, g->path));
}

/* The golden cases (selected by --cases) missing from the ACTUAL: one FAIL row naming them,
 * or a PASS row saying every one is there. */
static void qd_coverage(ck_ctx *c, const diff_opts *d, const qc_golden *g, const qc_actual *a) {
    char names[1200] = "";
    size_t o = 0;
    int n = 0, sel = 0;
    for (int i = 0; i < g->n_cases; i++) {
        if (!qd_selected(d, g->cases[i].name)) continue;
        sel++;
        if (qc_actual_find(a, g->cases[i].name) >= 0) continue;
        n++;
        if (o < sizeof names)
            o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", o ? ", " : "",
                                  g->cases[i].name);
    }
    if (!sel) return;
    char key[320];
    if (n) {
        snprintf(key, sizeof key, "%d of %d golden case%s missing from the ACTUAL: %s", n, sel,
                 sel == 1 ? "" : "s", names);
        ck_emit_simple(c, "_file", d->label, "file", "coverage", QC_VERDICT_FAIL, key,
                       qc_strdup_printf("%s\nEvery golden case must be in the ACTUAL; run the "
                                        "missing ones, or check a subset on purpose with "
                                        "--cases REGEX.", key));
    } else {
        snprintf(key, sizeof key, "%d of %d golden case%s in the ACTUAL%s", sel, g->n_cases,
                 g->n_cases == 1 ? "" : "s", d->has_cases ? " (--cases)" : "");
        ck_emit_simple(c, "_file", d->label, "file", "coverage", QC_VERDICT_PASS, key, NULL);
    }
}

void qd_file(ck_ctx *c, diff_opts *d, const char *gpath, const char *apath, const char *stem) {
    c->stem = stem;
    c->g = NULL;
    c->t_row = ck_wall();
    struct stat sg, sa;
    if (stat(gpath, &sg) == 0 && stat(apath, &sa) == 0 && sg.st_dev == sa.st_dev &&
        sg.st_ino == sa.st_ino) {
        char msg[2200];
        snprintf(msg, sizeof msg, "%s and %s are the same file: the second argument must be "
                 "the runtime's output (ACTUAL), not the golden", gpath, apath);
        qd_file_error(c, d, msg);
        return;
    }
    qc_golden *g = qd_open_golden(c, d, gpath, apath);
    if (!g) return;
    c->g = g;
    c->cfg = &g->cfg;
    qc_actual *a = NULL;
    qc_err err;
    qc_err_clear(&err);
    if (qc_actual_open(apath, d->layout, &a, &err)) {
        qd_file_error(c, d, err.msg);
        goto out;
    }
    if (qd_golden_as_actual(c, d, g, a)) goto out;
    if (!qd_provenance(c, d, g, a)) goto out;
    qd_unknown_cases(c, d, g, a);
    qd_coverage(c, d, g, a);
    int loaded = 0;
    for (int i = 0; i < g->n_cases; i++) {
        const qc_golden_case *gc = &g->cases[i];
        int ai = qc_actual_find(a, gc->name);
        if (!qd_selected(d, gc->name) || ai < 0) continue;
        c->t_row = ck_wall();
        if (qc_golden_load_case(g, i, &err) || qc_actual_load_case(a, ai, &g->cfg, gc, &err)) {
            ck_emit_simple(c, gc->name, d->label, "file", "read", QC_VERDICT_ERROR, err.msg,
                           qc_strdup_printf("%s", err.msg));
            qc_golden_unload_case(g, i);
            qc_err_clear(&err);
            if (qc_golden_hdf5_faulted()) break;
            continue;
        }
        loaded++;
        d->compared++;
        qd_case(c, d, a, gc, &a->cases[ai]);
        qc_actual_unload_case(a, ai, &g->cfg);
        qc_golden_unload_case(g, i);
    }
    if (loaded) {
        char lay[400];
        qc_actual_layout_str(a, lay, sizeof lay);
        char key[320];
        snprintf(key, sizeof key, "layout %s", lay);
        ck_emit_simple(c, "_file", d->label, "file", "layout", QC_VERDICT_PASS, key, NULL);
    }
    if (loaded && !qc_cfg_is_moe(&g->cfg)) /* a MoE model: one router_topk row per case */
        ck_emit_simple(c, "_file", d->label, "file", "router_topk", QC_VERDICT_SKIP,
                       "a dense model: no router", NULL);
out:
    qc_actual_free(a, &g->cfg);
    c->g = NULL;
    qc_golden_free(g);
}
