/* qc_check_compare.c — the check engine's comparisons: one comparison of a set of tensors
 * (parts) under the policy -> one result row (made and emitted by qc_check_rows.c); the
 * hidden-state / MoE trace capture; calibration measurements. */

#include "qc_check_internal.h"

#include "qc_remote.h"
#include "qc_report_console.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ===================================================================================== */
/* calibration sink                                                                      */
/* ===================================================================================== */

struct calib_case *ck_calib_case_get(calib_sink *cs, const char *stem, const char *cname) {
    char id[200];
    snprintf(id, sizeof id, "%s/%s", stem, cname);
    for (int i = 0; i < cs->n_case; i++)
        if (!strcmp(cs->cases[i].id, id)) return &cs->cases[i];
    if (cs->n_case == cs->cap_case) {
        int nc = cs->cap_case ? 2 * cs->cap_case : 64;
        struct calib_case *n = realloc(cs->cases, (size_t)nc * sizeof *n);
        if (!n) return NULL;
        cs->cases = n;
        cs->cap_case = nc;
    }
    struct calib_case *c = &cs->cases[cs->n_case++];
    memset(c, 0, sizeof *c);
    snprintf(c->id, sizeof c->id, "%s", id);
    return c;
}

/* ===================================================================================== */
/* engine context                                                                        */
/* ===================================================================================== */

char *ck_model_hint(const ck_ctx *c, const qc_golden *g, const char *msg) {
    char cfg[2100];
    struct stat sb;
    snprintf(cfg, sizeof cfg, "%s/config.json", g->model_dir);
    if (c->o->model_dir || stat(cfg, &sb) == 0) return NULL;
    return qc_strdup_printf("%s\nThe golden's model_path \"%s\" resolves to %s, which holds no "
                            "config.json (a golden copied away from its model?): pass --model DIR "
                            "to check it against the model in DIR", msg, g->model_path,
                            g->model_dir);
}

/* ===================================================================================== */
/* parts: what one check compares                                                        */
/* ===================================================================================== */

void ck_pl_add(ck_partlist *pl, const qc_tdesc *d, const float *a, const float *g) {
    if (pl->n >= MAX_PARTS) return;
    pl->p[pl->n].d = *d;
    pl->p[pl->n].a = a;
    pl->p[pl->n].g = g;
    pl->n++;
}

/* Add layer l's state buffer of class cls at `when` ("prefill"/"decode") to the plan, with
 * its path and the geometry the metrics need. */
void ck_pl_add_state(ck_partlist *pl, const qc_config *cfg, const char *when, int l, qc_tclass cls,
                     int nd, const int64_t *sh, const float *pa, const float *pg) {
    char path[160];
    snprintf(path, sizeof path, "%s/state/layer_%02d/%s", when, l, qc_tclass_str(cls));
    qc_tdesc d;
    qc_tdesc_init(&d, cls, path, nd, sh);
    d.layer = l;
    d.key_dim = qc_cfg_key_dim(cfg);
    d.dk = cfg->lin_k_dim;
    d.dv = cfg->lin_v_dim;
    ck_pl_add(pl, &d, pa, pg);
}

void ck_desc_logits(qc_tdesc *d, const char *path, int rows, int V, int pos0, int decode) {
    int64_t sh[2] = {rows, V};
    qc_tdesc_init(d, QC_TC_LOGITS, path, 2, sh);
    d->pos0 = pos0;
    d->decode = decode;
}

/* The state tensors of class cls (or every class when cls < 0) at "prefill" / "decode". */
void ck_add_state_parts(ck_partlist *pl, const qc_config *cfg, const char *when, int cls,
                            const qc_golden_state *a, const qc_golden_state *g) {
    if (!a->present || !g->present) {
        if (g->present && !a->present)
            snprintf(pl->problem, sizeof pl->problem, "%s state missing in the actual run", when);
        return;
    }
    if (a->n_pos != g->n_pos) {
        snprintf(pl->problem, sizeof pl->problem, "%s state: actual holds %d positions, golden %d",
                 when, a->n_pos, g->n_pos);
        return;
    }
    const int L = cfg->n_layers;
    for (int l = 0; l < L; l++) {
        for (int k = QC_TC_K_CACHE; k <= QC_TC_RECURRENT_STATE; k++) {
            if (cls >= 0 && k != cls) continue;
            const float *pa, *pg;
            int64_t sh[3];
            int nd = 3;
            if (k == QC_TC_K_CACHE || k == QC_TC_V_CACHE) {
                if (cfg->layer_types[l] != QC_LAYER_FULL) continue;
                pa = k == QC_TC_K_CACHE ? a->k_cache[l] : a->v_cache[l];
                pg = k == QC_TC_K_CACHE ? g->k_cache[l] : g->v_cache[l];
                sh[0] = cfg->n_kv_heads, sh[1] = g->n_pos, sh[2] = cfg->head_dim;
            } else if (k == QC_TC_CONV_STATE) {
                if (cfg->layer_types[l] != QC_LAYER_LINEAR) continue;
                pa = a->conv_state[l], pg = g->conv_state[l];
                sh[0] = qc_cfg_conv_dim(cfg), sh[1] = cfg->conv_kernel;
                nd = 2;
            } else {
                if (cfg->layer_types[l] != QC_LAYER_LINEAR) continue;
                pa = a->recurrent_state[l], pg = g->recurrent_state[l];
                sh[0] = cfg->lin_n_v_heads, sh[1] = cfg->lin_k_dim, sh[2] = cfg->lin_v_dim;
            }
            if (!pa || !pg) continue;
            ck_pl_add_state(pl, cfg, when, l, (qc_tclass)k, nd, sh, pa, pg);
        }
    }
}

/* Every tensor of a run: prefill + decode logits and both states. */
void ck_add_all_parts(ck_partlist *pl, const qc_config *cfg, const qc_golden_case *a,
                          const qc_golden_case *g) {
    const int V = cfg->vocab_size;
    qc_tdesc d;
    ck_desc_logits(&d, "prefill/logits", g->n_tokens, V, g->start_pos, 0);
    ck_pl_add(pl, &d, a->prefill_logits, g->prefill_logits);
    if (g->n_decode > 0 && a->n_decode == g->n_decode) {
        ck_desc_logits(&d, "decode/logits", g->n_decode, V, g->start_pos + g->n_tokens, 1);
        ck_pl_add(pl, &d, a->decode_logits, g->decode_logits);
    }
    ck_add_state_parts(pl, cfg, "prefill", -1, &a->prefill_state, &g->prefill_state);
    if (g->n_decode > 0) ck_add_state_parts(pl, cfg, "decode", -1, &a->decode_state, &g->decode_state);
}

/* ===================================================================================== */
/* calibration measurement of one part                                                   */
/* ===================================================================================== */

void ck_calib_measure(ck_ctx *c, int bi, int kind, const ck_part *p, const char *case_name) {
    calib_sink *cs = c->cal;
    if (bi < 0 || bi >= cs->n_slots) return; /* (the sink has one entry per engine slot) */
    size_t n = qc_tdesc_numel(&p->d);
    double ma = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)p->a[i] - (double)p->g[i]);
        if (d > ma || !isfinite(d)) ma = d, at = i;
    }
    double gmax = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)p->g[i]) > gmax) gmax = fabs((double)p->g[i]);
    for (size_t i = 0; i < n; i++) {
        double g = fabs((double)p->g[i]);
        if (g > 0.0 && g >= 0.25 * gmax) {
            double r = fabs((double)p->a[i] - (double)p->g[i]) / g;
            if (r > mr) mr = r;
        }
    }
    calib_cell *cell = &cs->slot[bi].c[kind][p->d.cls];
    if (ma > cell->max_abs || !isfinite(ma)) {
        cell->max_abs = ma;
        char ix[96];
        qc_tdesc_index_str(&p->d, at, ix, sizeof ix);
        snprintf(cell->where, sizeof cell->where, "%s/%s %s %s", c->stem, case_name, p->d.path, ix);
    }
    if (mr > cell->max_rel) cell->max_rel = mr;
    if (p->d.cls == QC_TC_LOGITS) {
        int V = (int)p->d.shape[1];
        for (int64_t r = 0; r < p->d.shape[0]; r++) {
            double kl = qc_kl_row(p->g + r * V, p->a + r * V, V);
            if (kl > cell->kl_max) cell->kl_max = kl;
        }
    }
    cell->n += (double)n;
    cs->tensors++;
    struct calib_case *cc = ck_calib_case_get(cs, c->stem, case_name);
    if (cc && ma > cc->max_abs[p->d.cls]) cc->max_abs[p->d.cls] = ma;
    if (cc && mr > cc->max_rel[p->d.cls]) cc->max_rel[p->d.cls] = mr;
    if (cc && p->d.cls == QC_TC_LOGITS && cell->kl_max > cc->kl_max) {
        int V = (int)p->d.shape[1];
        for (int64_t r = 0; r < p->d.shape[0]; r++) {
            double kl = qc_kl_row(p->g + r * V, p->a + r * V, V);
            if (kl > cc->kl_max) cc->kl_max = kl;
        }
    }
}

/* ===================================================================================== */
/* one comparison check -> one row                                                       */
/* ===================================================================================== */

qc_verdict ck_compare_parts(ck_ctx *c, const cmp_spec *s, ck_partlist *pl) {
    qc_check_row row;
    ck_row_init(&row, c->stem, s->case_name, s->backend, s->mode, s->check);
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, s->case_name);
    qc_metrics m;
    qc_metrics_init(&m, s->bitwise);
    const char *reason = NULL;
    int kl_fail = 0;
    double kl_bound = -1.0;
    for (int i = 0; i < pl->n; i++) {
        ck_part *p = &pl->p[i];
        qc_tol t;
        const char *r = NULL;
        qc_policy_lookup(c->pol, p->d.cls, s->backend, s->mode, s->check, case_id, p->d.path, &t,
                         &r);
        p->d.atol = t.atol;
        p->d.rtol = t.rtol;
        if (i == 0) row.tol = t;
        if (r) reason = r;
        if (s->logits_stats && p->d.cls == QC_TC_LOGITS) {
            qc_metrics_add_logits(&m, &p->d, p->a, p->g, qc_policy_tie_margin(c->pol));
            if (t.max_kl >= 0.0) {
                kl_bound = t.max_kl;
                for (int64_t r2 = 0; r2 < p->d.shape[0]; r2++) {
                    int V = (int)p->d.shape[1];
                    if (qc_kl_row(p->g + r2 * V, p->a + r2 * V, V) > t.max_kl) kl_fail = 1;
                }
            }
        } else {
            qc_metrics_add(&m, &p->d, p->a, p->g);
        }
        if (c->cal && !s->bitwise)
            ck_calib_measure(c, ck_slot_of(c, s->backend),
                          s->vs_golden ? CAL_KIND_GOLDEN : CAL_KIND_CONSIST, p, s->case_name);
    }
    qc_metrics_finish(&m);
    row.has_metrics = 1;
    row.m = m;
    if (reason) snprintf(row.tol_reason, sizeof row.tol_reason, "%s", reason);
    const double nmse_lim = ck_tier_nmse(c, s, pl);   /* a tier's NMSE gate, else 0 */
    int close = nmse_lim > 0.0 ? m.n > 0 && m.n_nonfinite == 0 && m.nmse <= nmse_lim
                               : qc_metrics_close(&m);
    int ok = close && !kl_fail && !pl->problem[0];
    row.verdict = ok ? QC_VERDICT_PASS : QC_VERDICT_FAIL;
    qc_metrics_keyline(&m, row.keyline, sizeof row.keyline);
    if (nmse_lim > 0.0) {
        size_t k = strlen(row.keyline);
        snprintf(row.keyline + k, sizeof row.keyline - k, "; tier %s: nmse <= %g",
                 qc_policy_tier(c->pol)->name, nmse_lim);
    }
    if (pl->problem[0]) {
        size_t k = strlen(row.keyline);
        snprintf(row.keyline + k, sizeof row.keyline - k, "; %s", pl->problem);
    }
    if (!ok) {
        char summ[4096];
        qc_metrics_summary(&m, summ, sizeof summ);
        char kl_line[200] = "";
        if (nmse_lim > 0.0 && !close)
            snprintf(kl_line, sizeof kl_line, "\nTier %s gates this class on NMSE: %.4g > %.4g "
                     "allowed (docs/tolerance-tiers.md)", qc_policy_tier(c->pol)->name, m.nmse,
                     nmse_lim);
        else if (kl_fail)
            snprintf(kl_line, sizeof kl_line, "\nKL bound exceeded: max %.3g > %.3g nats allowed",
                     m.kl_max, kl_bound);
        char h5[2048] = "";
        if (s->vs_golden && s->advice) {
            snprintf(h5, sizeof h5, "%s%s", s->advice[0] ? "\n" : "", s->advice);
        } else if (s->vs_golden) {
            const qc_loc *w = m.worst.valid ? &m.worst : &m.first_mismatch;
            const char *path = w->valid ? w->desc.path : (pl->n ? pl->p[0].d.path : "");
            if (s->dump_file && s->dump_file[0])
                snprintf(h5, sizeof h5, "\nh5diff -r -d %g %s %s /cases/%s/%s",
                         w->valid ? w->desc.atol : row.tol.atol, c->g->path, s->dump_file,
                         s->case_name, path);
            else
                snprintf(h5, sizeof h5,
                         "\n(re-run with --dump-actual DIR to get the actual tensors and a "
                         "ready h5diff line for /cases/%s/%s)", s->case_name, path);
        }
        const char *kind = m.bitwise ? "Tensors are not bit-identical!" : "Tensor-likes are not close!";
        row.detail = qc_strdup_printf(
            "%s (%s)%s%s\n%s%s%s%s%s%s%s", kind, s->check, pl->problem[0] ? "\n" : "",
            pl->problem, summ, kl_line, s->loc_text ? "\n" : "", s->loc_text ? s->loc_text : "",
            s->extra ? "\n" : "", s->extra ? s->extra : "", h5);
        if (reason && row.detail) {
            char *d2 = qc_strdup_printf("%s\nTolerance override applied: %s", row.detail, reason);
            if (d2) free(row.detail), row.detail = d2;
        }
    }
    if (!ok && s->loc) row.loc = *s->loc;
    ck_emit(c, &row);
    if (s->vs_golden && s->logits_stats && !s->bitwise) ck_tier_rows(c, s, pl);
    return row.verdict;
}

/* ===================================================================================== */
/* hidden-state capture (our own trace hook, so that a runner that does not visit every    */
/* position is reported as a failure, not an error)                                      */
/* ===================================================================================== */

void ck_hcap_cb(void *user, int index, const char *name, int start_pos, int n_tokens, int dim,
                    const float *data) {
    ck_hcap *h = user;
    if (name && strcmp(name, "hidden")) { /* MoE traces ("moe_in", "router_topk") */
        if (h->moe) ck_moecap_feed(h->moe, index, name, start_pos, n_tokens, dim, data);
        return;
    }
    if (!h->hidden) return;
    if (index < 0 || index >= h->L1 || dim != h->H) {
        h->bad = 1;
        return;
    }
    /* calls reaching past the prompt are decode steps (or no-KV recomputations for decode) */
    if (start_pos + n_tokens > h->lo + h->T) return;
    for (int i = 0; i < n_tokens; i++) {
        int row = start_pos + i - h->lo;
        if (row < 0 || row >= h->T) continue;
        memcpy(h->hidden + ((size_t)index * h->T + row) * h->H, data + (size_t)i * dim,
               (size_t)dim * sizeof(float));
        h->seen[(size_t)index * h->T + row] = 1;
    }
}
