/* qc_check.c — the check engine: qwen-conform [check] and qwen-conform calibrate.
 *
 * Flow per golden file: open (read-only) -> select cases (--filter, --shard) -> load the model
 * the golden names -> model_hash -> create the backends (reference; optimized with N threads
 * and with 1 thread for the bitwise thread check) -> per case, per backend, per mode: run
 * (teacher-forced, hidden states captured through the trace hook), compare every tensor with
 * the golden under the policy, run the invariants -> cross-mode / cross-backend checks ->
 * optional dump of the actual tensors in the golden layout.
 */
/* Messages are cut to their buffers on purpose (snprintf); GCC's truncation warning is noise. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "qc_check.h"
#include "qc/qc_memplan.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "qc/qc_backend.h"
#include "qc/qc_cli.h"
#include "qc/qc_golden.h"
#include "qc/qc_model.h"
#include "qc/qc_runcase.h"
#include "qc/qc_state.h"
#include "qc_cli_common.h"
#include "qc_report_console.h"
#include "qc_report_json.h"
#include "qc_report_junit.h"

#include <cjson/cJSON.h>

#define N_MODES 3
#define N_BACKENDS 2
static const char *const backend_names[N_BACKENDS] = {"reference", "optimized"};

/* ===================================================================================== */
/* calibration sink                                                                      */
/* ===================================================================================== */

/* Measured noise of one (backend, class, check kind). */
typedef struct {
    double max_abs;      /* max |a - g| */
    double max_rel;      /* max |a - g| / |g| over the large elements of each tensor
                            (|g| >= 1/4 of that tensor's max |g|) */
    double kl_max;       /* logits: max KL per row */
    double n;            /* elements measured */
    char where[200];     /* where max_abs was seen */
} calib_cell;

#define CAL_KIND_GOLDEN 0  /* vs the float64 golden */
#define CAL_KIND_CONSIST 1 /* float32 vs float32 (static/dynamic, chunked/recurrent, opt/ref) */

typedef struct {
    calib_cell c[N_BACKENDS][2][QC_TC_COUNT];
    long tensors;          /* tensors measured */
    /* per (stem/case, class): max |a - g| over backends, modes, kinds (to find outliers) */
    int n_case, cap_case;
    struct calib_case {
        char id[200];                  /* "<stem>/<case>" */
        double max_abs[QC_TC_COUNT];   /* per class */
        double max_rel[QC_TC_COUNT];   /* per class, large elements (as calib_cell.max_rel) */
        double kl_max;                 /* logits */
    } *cases;
} calib_sink;

static struct calib_case *calib_case_get(calib_sink *cs, const char *stem, const char *cname) {
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

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ===================================================================================== */
/* engine context                                                                        */
/* ===================================================================================== */

typedef struct {
    qc_check_opts *o;
    qc_policy *pol;
    qc_results *res;
    calib_sink *cal;
    /* the file being checked */
    const qc_golden *g;
    const char *stem;
    const qc_config *cfg;
    char dump_path[N_BACKENDS][N_MODES][1400]; /* actual file per backend x mode ("" = none) */
    double t_row;                             /* start time of the current row */
    long listed;                              /* ids printed by --list */
} ctx;

static int backend_index(const char *name) { return strcmp(name, "optimized") == 0 ? 1 : 0; }

/* Add a row and stream it to the console. */
static void emit(ctx *c, qc_check_row *row) {
    snprintf(row->golden, sizeof row->golden, "%s", c->g ? c->g->path : "");
    row->seconds = wall() - c->t_row;
    c->t_row = wall();
    qc_check_row *st = qc_results_add(c->res, row);
    if (st && !c->o->calibrate && !c->o->list) qc_report_console_row(stdout, st, c->o->quiet);
}

static void row_init(qc_check_row *r, const char *stem, const char *case_name,
                     const char *backend, const char *mode, const char *check) {
    memset(r, 0, sizeof *r);
    snprintf(r->stem, sizeof r->stem, "%s", stem);
    snprintf(r->case_name, sizeof r->case_name, "%s", case_name);
    snprintf(r->backend, sizeof r->backend, "%s", backend);
    snprintf(r->mode, sizeof r->mode, "%s", mode);
    snprintf(r->check, sizeof r->check, "%s", check);
}

static void emit_simple(ctx *c, const char *case_name, const char *backend, const char *mode,
                        const char *check, qc_verdict v, const char *keyline, char *detail) {
    qc_check_row r;
    row_init(&r, c->stem, case_name, backend, mode, check);
    r.verdict = v;
    snprintf(r.keyline, sizeof r.keyline, "%s", keyline);
    r.detail = detail;
    emit(c, &r);
}

/* ===================================================================================== */
/* parts: what one check compares                                                        */
/* ===================================================================================== */

#define MAX_PARTS (4 * QC_MAX_LAYERS + 8)

typedef struct {
    qc_tdesc d;        /* shape, meaning, class (tolerance filled at compare time) */
    const float *a;    /* actual */
    const float *g;    /* golden / the other side */
} part;

typedef struct {
    part p[MAX_PARTS];
    int n;
    char problem[512]; /* a structural mismatch (shape, n_pos): the check fails with it */
} partlist;

static void pl_add(partlist *pl, const qc_tdesc *d, const float *a, const float *g) {
    if (pl->n >= MAX_PARTS) return;
    pl->p[pl->n].d = *d;
    pl->p[pl->n].a = a;
    pl->p[pl->n].g = g;
    pl->n++;
}

static void desc_logits(qc_tdesc *d, const char *path, int rows, int V, int pos0, int decode) {
    int64_t sh[2] = {rows, V};
    qc_tdesc_init(d, QC_TC_LOGITS, path, 2, sh);
    d->pos0 = pos0;
    d->decode = decode;
}

/* The state tensors of class cls (or every class when cls < 0) at "prefill" / "decode". */
static void add_state_parts(partlist *pl, const qc_config *cfg, const char *when, int cls,
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
            char path[160];
            snprintf(path, sizeof path, "%s/state/layer_%02d/%s", when, l,
                     qc_tclass_str((qc_tclass)k));
            qc_tdesc d;
            qc_tdesc_init(&d, (qc_tclass)k, path, nd, sh);
            d.layer = l;
            d.key_dim = qc_cfg_key_dim(cfg);
            d.dk = cfg->lin_k_dim;
            d.dv = cfg->lin_v_dim;
            pl_add(pl, &d, pa, pg);
        }
    }
}

/* Every tensor of a run: prefill + decode logits and both states. */
static void add_all_parts(partlist *pl, const qc_config *cfg, const qc_golden_case *a,
                          const qc_golden_case *g) {
    const int V = cfg->vocab_size;
    qc_tdesc d;
    desc_logits(&d, "prefill/logits", g->n_tokens, V, g->start_pos, 0);
    pl_add(pl, &d, a->prefill_logits, g->prefill_logits);
    if (g->n_decode > 0 && a->n_decode == g->n_decode) {
        desc_logits(&d, "decode/logits", g->n_decode, V, g->start_pos + g->n_tokens, 1);
        pl_add(pl, &d, a->decode_logits, g->decode_logits);
    }
    add_state_parts(pl, cfg, "prefill", -1, &a->prefill_state, &g->prefill_state);
    if (g->n_decode > 0) add_state_parts(pl, cfg, "decode", -1, &a->decode_state, &g->decode_state);
}

/* ===================================================================================== */
/* calibration measurement of one part                                                   */
/* ===================================================================================== */

static void calib_measure(ctx *c, int bi, int kind, const part *p, const char *case_name) {
    calib_sink *cs = c->cal;
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
    calib_cell *cell = &cs->c[bi][kind][p->d.cls];
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
    struct calib_case *cc = calib_case_get(cs, c->stem, case_name);
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

typedef struct {
    const char *case_name;  /* case */
    const char *backend;    /* backend under test */
    const char *mode;       /* mode column */
    const char *check;      /* check name */
    int bitwise;            /* exact comparison */
    int logits_stats;       /* top-1 / KL on logits parts */
    int vs_golden;          /* 1: g is the golden (h5diff line, calibration kind) */
    const char *dump_file;  /* actual file for the h5diff line (vs_golden) or NULL */
    const char *loc_text;   /* localisation to append on failure (may be NULL) */
    const char *extra;      /* extra detail line (may be NULL) */
} cmp_spec;

static qc_verdict compare_parts(ctx *c, const cmp_spec *s, partlist *pl) {
    qc_check_row row;
    row_init(&row, c->stem, s->case_name, s->backend, s->mode, s->check);
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, s->case_name);
    qc_metrics m;
    qc_metrics_init(&m, s->bitwise);
    const char *reason = NULL;
    int kl_fail = 0;
    double kl_bound = -1.0;
    for (int i = 0; i < pl->n; i++) {
        part *p = &pl->p[i];
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
            calib_measure(c, backend_index(s->backend),
                          s->vs_golden ? CAL_KIND_GOLDEN : CAL_KIND_CONSIST, p, s->case_name);
    }
    qc_metrics_finish(&m);
    row.has_metrics = 1;
    row.m = m;
    if (reason) snprintf(row.tol_reason, sizeof row.tol_reason, "%s", reason);
    int ok = qc_metrics_close(&m) && !kl_fail && !pl->problem[0];
    row.verdict = ok ? QC_VERDICT_PASS : QC_VERDICT_FAIL;
    qc_metrics_keyline(&m, row.keyline, sizeof row.keyline);
    if (pl->problem[0]) {
        size_t k = strlen(row.keyline);
        snprintf(row.keyline + k, sizeof row.keyline - k, "; %s", pl->problem);
    }
    if (!ok) {
        char summ[4096];
        qc_metrics_summary(&m, summ, sizeof summ);
        char kl_line[200] = "";
        if (kl_fail)
            snprintf(kl_line, sizeof kl_line, "\nKL bound exceeded: max %.3g > %.3g nats allowed",
                     m.kl_max, kl_bound);
        char h5[2048] = "";
        if (s->vs_golden) {
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
    emit(c, &row);
    return row.verdict;
}

/* ===================================================================================== */
/* hidden-state capture (our own trace hook, so that a runner that does not visit every    */
/* position is reported as a failure, not an error)                                      */
/* ===================================================================================== */

typedef struct {
    float *hidden;          /* [L+1, T, H] */
    unsigned char *seen;    /* [L+1, T] */
    int L1, T, H;           /* L+1, prompt length, hidden size */
    int lo;                 /* absolute position of prompt row 0 */
    int bad;                /* a call with an unexpected width / index */
} hcap;

static void hcap_cb(void *user, int index, const char *name, int start_pos, int n_tokens, int dim,
                    const float *data) {
    hcap *h = user;
    (void)name;
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

/* ===================================================================================== */
/* fault wrappers (test-only; the runtime and backends are not modified)                 */
/* ===================================================================================== */

/* (c) a model copy whose zero-centred norm weights w' satisfy 1 + w' = w, so a correct
 * (1 + w') norm computes what a buggy "w" norm would. */
typedef struct {
    qc_model m;                 /* the copy handed to the backend */
    qc_layer_weights *layers;   /* [L] copied views */
    float **bufs;               /* owned F32 buffers */
    int n_bufs;
} fault_model;

static int fault_norm_buf(fault_model *fm, qc_tensor *t) {
    size_t n = qc_tensor_numel(t);
    float *b = malloc((n ? n : 1) * sizeof *b);
    if (!b) return -1;
    for (size_t i = 0; i < n; i++) b[i] = qc_tensor_get(t, i) - 1.0f;
    fm->bufs[fm->n_bufs++] = b;
    t->dtype = QC_F32;
    t->data = b;
    return 0;
}

static qc_status fault_model_make(const qc_model *src, int layer, fault_model **out, qc_err *err) {
    const int L = src->cfg.n_layers;
    fault_model *fm = calloc(1, sizeof *fm);
    if (!fm) return qc_errf(err, QC_ERR_OOM, "fault model: out of memory");
    fm->m = *src;
    fm->layers = malloc((size_t)L * sizeof *fm->layers);
    fm->bufs = calloc((size_t)(2 * L + 2), sizeof *fm->bufs);
    if (!fm->layers || !fm->bufs) {
        free(fm->layers), free(fm->bufs), free(fm);
        return qc_errf(err, QC_ERR_OOM, "fault model: out of memory");
    }
    memcpy(fm->layers, src->layers, (size_t)L * sizeof *fm->layers);
    fm->m.layers = fm->layers;
    int bad = 0;
    if (layer >= 0) {
        bad |= fault_norm_buf(fm, &fm->layers[layer].input_norm);
    } else {
        for (int l = 0; l < L; l++) {
            bad |= fault_norm_buf(fm, &fm->layers[l].input_norm);
            bad |= fault_norm_buf(fm, &fm->layers[l].post_norm);
        }
        bad |= fault_norm_buf(fm, &fm->m.final_norm);
    }
    *out = fm;
    return bad ? qc_errf(err, QC_ERR_OOM, "fault model: out of memory") : QC_OK;
}

static void fault_model_free(fault_model *fm) {
    if (!fm) return;
    for (int i = 0; i < fm->n_bufs; i++) free(fm->bufs[i]);
    free(fm->bufs);
    free(fm->layers);
    free(fm);
}

/* (d) a backend wrapper: the first forward of a sequence (start_pos 0, right after a reset)
 * finds stale non-zero columns in every conv_state, as if reset had skipped them. */
typedef struct {
    qc_backend *inner;  /* the real backend (owned) */
} stale_impl;

static qc_status stale_forward(qc_backend *be, const int32_t *tokens, int n, int start_pos,
                               qc_state *st, float *logits, int all_logits, qc_err *err) {
    stale_impl *si = be->impl;
    si->inner->opts.dn_kernel = be->opts.dn_kernel;
    si->inner->opts.chunk_size = be->opts.chunk_size;
    si->inner->opts.trace = be->opts.trace;
    si->inner->opts.trace_user = be->opts.trace_user;
    if (start_pos == 0) {
        for (int l = 0; l < st->n_layers; l++) {
            if (!st->conv_state[l]) continue;
            size_t nn = (size_t)st->conv_dim * (size_t)st->conv_kernel;
            for (size_t i = 0; i < nn; i++)
                st->conv_state[l][i] = 0.25f * (float)(1 + (int)(i % 7)) - 1.0f;
        }
    }
    return si->inner->forward(si->inner, tokens, n, start_pos, st, logits, all_logits, err);
}

static void stale_destroy(qc_backend *be) {
    stale_impl *si = be->impl;
    qc_backend_destroy(si->inner);
    free(si);
    free(be);
}

static const char *stale_describe(const qc_backend *be) {
    stale_impl *si = be->impl;
    return si->inner->describe ? si->inner->describe(si->inner) : si->inner->name;
}

static qc_status stale_wrap(qc_backend *inner, qc_backend **out, qc_err *err) {
    qc_backend *be = calloc(1, sizeof *be);
    stale_impl *si = calloc(1, sizeof *si);
    if (!be || !si) {
        free(be), free(si);
        qc_backend_destroy(inner);
        return qc_errf(err, QC_ERR_OOM, "fault wrapper: out of memory");
    }
    si->inner = inner;
    *be = *inner;
    be->impl = si;
    be->forward = stale_forward;
    be->destroy = stale_destroy;
    be->describe = stale_describe;
    *out = be;
    return QC_OK;
}

/* ===================================================================================== */
/* running one case                                                                      */
/* ===================================================================================== */

typedef struct {
    qc_backend *be[N_BACKENDS];   /* main backends (NULL when not checked) */
    qc_backend *opt1;             /* optimized with the other thread count (2 when the main
                                     runs use 1, else 1) for the bitwise thread check */
    int max_tokens;
} backends;

/* Profile for a case in a mode (context large enough for history + prompt + decode). */
static void case_profile(const qc_golden_case *gc, qc_mode mode, int extra, qc_profile *p) {
    int msl = gc->max_seq_len > 0 ? gc->max_seq_len : 128;
    int need = gc->start_pos + gc->n_tokens + gc->n_decode;
    int ctxlen = need > msl ? need : msl;
    qc_profile_for_mode(p, mode, msl, ctxlen + extra);
}

static void case_input(const qc_golden_case *gc, const qc_check_opts *o, qc_case_input *in) {
    memset(in, 0, sizeof *in);
    in->history = gc->n_history > 0 ? gc->history : NULL;
    in->n_history = gc->n_history;
    in->tokens = gc->tokens;
    in->n_tokens = gc->n_tokens;
    in->n_decode = gc->n_decode;
    in->forced = gc->n_decode > 0 ? gc->decode_tokens : NULL;
    in->faults.static_no_advance = o->faults.static_no_advance;
}

/* Run with an optional hidden capture. hc may be NULL. */
static qc_status run_one(qc_backend *be, const qc_golden_case *gc, qc_mode mode,
                         const qc_check_opts *o, int garbage, hcap *hc, qc_golden_case *out,
                         qc_err *err) {
    qc_profile p;
    qc_case_input in;
    case_profile(gc, mode, 0, &p);
    case_input(gc, o, &in);
    in.garbage_state = garbage;
    qc_trace_fn sf = be->opts.trace;
    void *su = be->opts.trace_user;
    if (hc) {
        be->opts.trace = hcap_cb;
        be->opts.trace_user = hc;
    }
    qc_status s = qc_run_case(be, &p, gc->name, &in, out, err);
    be->opts.trace = sf;
    be->opts.trace_user = su;
    return s;
}

/* One run on a state filled with NaN and then reset (through the runner, as a runtime would
 * reuse its buffers), checked twice:
 *   garbage_reset  its logits and states are bit-identical to the fresh run `act`;
 *   unused_slots   the KV-cache slots beyond the used positions (capacity + 8 spare) are
 *                  exactly +0. */
static void check_garbage_and_slots(ctx *c, qc_backend *be, const qc_golden_case *gc,
                                    qc_mode mode, const qc_golden_case *act) {
    const qc_config *cfg = c->cfg;
    const int V = cfg->vocab_size, T = gc->n_tokens, S = gc->n_decode, P = gc->start_pos;
    qc_err err;
    qc_err_clear(&err);
    const int extra = 8;
    qc_profile p;
    case_profile(gc, mode, extra, &p);
    qc_state *st = NULL;
    qc_runner *r = NULL;
    const char *mname = qc_mode_str(mode);
    qc_golden_case gb;
    memset(&gb, 0, sizeof gb);
    gb.n_tokens = T, gb.n_decode = S, gb.start_pos = P;
    gb.prefill_logits = malloc((size_t)T * V * sizeof(float));
    gb.decode_logits = malloc(((size_t)S * V + 1) * sizeof(float));
    qc_status s = (!gb.prefill_logits || !gb.decode_logits)
                      ? qc_errf(&err, QC_ERR_OOM, "garbage run: out of memory")
                      : qc_state_create(cfg, p.max_context_len, &st, &err);
    if (!s) s = qc_runner_create(be, &p, st, &r, &err);
    if (!s) {
        qc_runner_faults f = {.static_no_advance = c->o->faults.static_no_advance};
        qc_runner_set_faults(r, &f);
        s = qc_backend_fill_state(be, st, NAN, &err);
        if (!s) s = qc_runner_reset(r, &err);
        if (!s && gc->n_history > 0)
            s = qc_runner_prefill(r, gc->history, gc->n_history, 0, NULL, NULL, NULL, &err);
        if (!s) s = qc_runner_prefill(r, gc->tokens, T, P, gb.prefill_logits, NULL, NULL, &err);
        if (!s) s = qc_golden_state_from(cfg, st, P + T, &gb.prefill_state, &err);
        for (int k = 0; !s && k < S; k++)
            s = qc_runner_decode(r, gc->decode_tokens[k], gb.decode_logits + (size_t)k * V, &err);
        if (!s && S > 0) s = qc_golden_state_from(cfg, st, P + T + S, &gb.decode_state, &err);
    }
    if (s) {
        emit_simple(c, gc->name, be->name, mname, "garbage_reset", QC_VERDICT_ERROR, err.msg, NULL);
        emit_simple(c, gc->name, be->name, mname, "unused_slots", QC_VERDICT_ERROR, err.msg, NULL);
        goto done;
    }
    /* garbage_reset */
    {
        partlist *pl = calloc(1, sizeof *pl);
        if (pl) {
            add_all_parts(pl, cfg, &gb, act);
            cmp_spec cs = {.case_name = gc->name, .backend = be->name, .mode = mname,
                           .check = "garbage_reset", .bitwise = 1,
                           .extra = "A state filled with NaN and then reset must give exactly "
                                    "the fresh result"};
            compare_parts(c, &cs, pl);
            free(pl);
        }
    }
    /* unused_slots */
    int used = P + T + S;
    size_t n = 0, bad = 0;
    char first[256] = "";
    for (int l = 0; l < cfg->n_layers; l++) {
        if (cfg->layer_types[l] != QC_LAYER_FULL) continue;
        for (int kv = 0; kv < 2; kv++) {
            const float *buf = kv ? st->v_cache[l] : st->k_cache[l];
            for (int h = 0; h < cfg->n_kv_heads; h++)
                for (int pos = used; pos < p.max_context_len; pos++)
                    for (int ch = 0; ch < cfg->head_dim; ch++) {
                        float v = buf[((size_t)h * p.max_context_len + pos) * cfg->head_dim + ch];
                        uint32_t bits;
                        memcpy(&bits, &v, sizeof bits);
                        n++;
                        if (bits != 0) {
                            if (!bad)
                                snprintf(first, sizeof first,
                                         "layer %d %s, kv head %d, position %d, channel %d = %g",
                                         l, kv ? "v_cache" : "k_cache", h, pos, ch, (double)v);
                            bad++;
                        }
                    }
        }
    }
    char key[320];
    if (n == 0) {
        emit_simple(c, gc->name, be->name, mname, "unused_slots", QC_VERDICT_SKIP,
                    "no full-attention layer: no KV cache to inspect", NULL);
    } else if (bad == 0) {
        snprintf(key, sizeof key, "%zu unused slot values beyond position %d all exactly 0", n, used);
        emit_simple(c, gc->name, be->name, mname, "unused_slots", QC_VERDICT_PASS, key, NULL);
    } else {
        snprintf(key, sizeof key, "%zu / %zu unused KV-cache values are non-zero; first: %s", bad, n,
                 first);
        emit_simple(c, gc->name, be->name, mname, "unused_slots", QC_VERDICT_FAIL, key,
                    qc_strdup_printf("KV-cache slots beyond the %d used positions must stay "
                                     "exactly 0 (after a NaN fill and reset)\nFirst non-zero: %s",
                                     used, first));
    }
done:
    qc_runner_destroy(r);
    qc_state_destroy(st);
    qc_golden_state_free(cfg, &gb.prefill_state);
    qc_golden_state_free(cfg, &gb.decode_state);
    free(gb.prefill_logits);
    free(gb.decode_logits);
}

/* ===================================================================================== */
/* localisation                                                                          */
/* ===================================================================================== */

static const char *layer_kind(const qc_config *cfg, int l) {
    if (l < 0 || l >= cfg->n_layers) return "?";
    return cfg->layer_types[l] == QC_LAYER_FULL ? "full_attention" : "linear_attention";
}

/* Hidden check + the localisation text for the (case, backend, mode) run. */
static void check_hidden(ctx *c, const cmp_spec *base, const qc_golden_case *gc, hcap *hc,
                         char *loc, size_t loclen) {
    const qc_config *cfg = c->cfg;
    const int L = cfg->n_layers, T = gc->n_tokens, H = cfg->hidden_size;
    loc[0] = 0;
    cmp_spec s = *base;
    s.check = "prefill.hidden";
    size_t n_seen = 0, n_all = (size_t)(L + 1) * T;
    for (size_t i = 0; i < n_all; i++) n_seen += hc->seen[i];
    if (n_seen == 0 && !hc->bad) {
        emit_simple(c, gc->name, base->backend, base->mode, s.check, QC_VERDICT_SKIP,
                    "the backend reports no hidden states (no trace hook)", NULL);
        snprintf(loc, loclen, "First divergent layer: unknown (no hidden states from the backend)");
        return;
    }
    if (n_seen != n_all || hc->bad) {
        int first_missing = -1;
        for (int t = 0; t < T && first_missing < 0; t++)
            for (int i = 0; i <= L; i++)
                if (!hc->seen[(size_t)i * T + t]) {
                    first_missing = t;
                    break;
                }
        char key[320];
        snprintf(key, sizeof key,
                 "hidden states seen for %zu of %zu (index, position) rows; first missing "
                 "position %d%s", n_seen, n_all, gc->start_pos + first_missing,
                 hc->bad ? "; a trace call had a wrong width or index" : "");
        emit_simple(c, gc->name, base->backend, base->mode, s.check, QC_VERDICT_FAIL, key,
                    qc_strdup_printf("The prefill did not produce a hidden state for every prompt "
                                     "position: %s.\nThe runner does not visit (or does not "
                                     "advance through) every position.", key));
        snprintf(loc, loclen, "First divergent layer: unknown (hidden states incomplete: %s)", key);
        return;
    }
    /* per-index verdicts (the error curve) */
    qc_tol t;
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, gc->name);
    qc_policy_lookup(c->pol, QC_TC_HIDDEN, base->backend, base->mode, s.check, case_id,
                     "prefill/hidden", &t, NULL);
    int first_bad = -1;
    char curve[2048];
    size_t o = 0;
    curve[0] = 0;
    for (int i = 0; i <= L; i++) {
        qc_metrics m;
        qc_metrics_init(&m, 0);
        qc_tdesc d;
        int64_t sh[3] = {1, T, H};
        qc_tdesc_init(&d, QC_TC_HIDDEN, "prefill/hidden", 3, sh);
        d.atol = t.atol;
        d.rtol = t.rtol;
        qc_metrics_add(&m, &d, hc->hidden + (size_t)i * T * H, gc->prefill_hidden + (size_t)i * T * H);
        int ok = qc_metrics_close(&m);
        if (!ok && first_bad < 0) first_bad = i;
        if (o < sizeof curve)
            o += (size_t)snprintf(curve + o, sizeof curve - o, "%s[%d] %.2g%s", i ? ", " : "", i,
                                  m.n_nonfinite ? INFINITY : m.max_abs, ok ? "" : "!");
    }
    if (first_bad < 0) {
        snprintf(loc, loclen,
                 "First divergent layer: none (every hidden state is within tolerance; the "
                 "divergence is after the final norm: lm_head / logits, or in the state "
                 "buffers)\nPer-layer max |diff| of hidden[i]: %s", curve);
    } else if (first_bad == 0) {
        snprintf(loc, loclen, "First divergent layer: embeddings (hidden[0])\nPer-layer max "
                 "|diff| of hidden[i] (! = over tolerance): %s", curve);
    } else if (first_bad == L) {
        snprintf(loc, loclen, "First divergent layer: layer %d (%s) or the final norm "
                 "(hidden[%d] is after the final norm)\nPer-layer max |diff| of hidden[i] "
                 "(! = over tolerance): %s", L - 1, layer_kind(cfg, L - 1), L, curve);
    } else {
        snprintf(loc, loclen, "First divergent layer: layer %d (%s) (hidden[%d] is its output)\n"
                 "Per-layer max |diff| of hidden[i] (! = over tolerance): %s", first_bad - 1,
                 layer_kind(cfg, first_bad - 1), first_bad, curve);
    }
    partlist *pl = calloc(1, sizeof *pl);
    if (!pl) return;
    qc_tdesc d;
    int64_t sh[3] = {L + 1, T, H};
    qc_tdesc_init(&d, QC_TC_HIDDEN, "prefill/hidden", 3, sh);
    d.n_layers = L;
    d.pos0 = gc->start_pos;
    pl_add(pl, &d, hc->hidden, gc->prefill_hidden);
    s.loc_text = loc;
    compare_parts(c, &s, pl);
    free(pl);
}

/* When no hidden states localise: the lowest layer whose state fails. */
static void state_localisation(ctx *c, const qc_golden_case *act, const qc_golden_case *gc,
                               const char *backend, const char *mode, char *loc, size_t loclen) {
    partlist *pl = calloc(1, sizeof *pl);
    if (!pl) return;
    add_state_parts(pl, c->cfg, "prefill", -1, &act->prefill_state, &gc->prefill_state);
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, gc->name);
    int best = -1;
    const char *what = "";
    for (int i = 0; i < pl->n; i++) {
        qc_tol t;
        qc_policy_lookup(c->pol, pl->p[i].d.cls, backend, mode, NULL, case_id, pl->p[i].d.path, &t,
                         NULL);
        pl->p[i].d.atol = t.atol, pl->p[i].d.rtol = t.rtol;
        qc_metrics m;
        qc_metrics_init(&m, 0);
        qc_metrics_add(&m, &pl->p[i].d, pl->p[i].a, pl->p[i].g);
        if (!qc_metrics_close(&m) && (best < 0 || pl->p[i].d.layer < best)) {
            best = pl->p[i].d.layer;
            what = qc_tclass_str(pl->p[i].d.cls);
        }
    }
    size_t k = strlen(loc);
    if (best >= 0)
        snprintf(loc + k, loclen - k, "%sFirst layer whose state diverges after prefill: layer %d "
                 "(%s, %s)", k ? "\n" : "", best, layer_kind(c->cfg, best), what);
    free(pl);
}

/* ===================================================================================== */
/* per case                                                                              */
/* ===================================================================================== */

static int mode_selected(ctx *c, const char *case_name, const char *backend, qc_mode m) {
    if (!(c->o->modes & (1 << m))) return 0;
    if (!c->o->has_filter) return 1;
    char id[512];
    snprintf(id, sizeof id, "%s/%s/%s/%s", c->stem, case_name, backend, qc_mode_str(m));
    return regexec(&c->o->filter, id, 0, NULL, 0) == 0;
}

static void vs_golden_checks(ctx *c, const qc_golden_case *gc, const qc_golden_case *act,
                             const char *backend, const char *mode, const char *dump_file,
                             const char *loc) {
    const qc_config *cfg = c->cfg;
    const int V = cfg->vocab_size;
    cmp_spec s = {.case_name = gc->name, .backend = backend, .mode = mode,
                  .vs_golden = 1, .loc_text = loc, .dump_file = dump_file};
    partlist *pl = calloc(1, sizeof *pl);
    if (!pl) return;
    qc_tdesc d;
    /* prefill logits */
    desc_logits(&d, "prefill/logits", gc->n_tokens, V, gc->start_pos, 0);
    pl_add(pl, &d, act->prefill_logits, gc->prefill_logits);
    s.check = "prefill.logits";
    s.logits_stats = 1;
    compare_parts(c, &s, pl);
    /* argmax agreement (prefill rows + teacher-forced decode rows) */
    {
        qc_metrics m;
        qc_metrics_init(&m, 0);
        qc_metrics_add_logits(&m, &d, act->prefill_logits, gc->prefill_logits,
                              qc_policy_tie_margin(c->pol));
        qc_tdesc dd;
        if (gc->n_decode > 0) {
            desc_logits(&dd, "decode/logits", gc->n_decode, V, gc->start_pos + gc->n_tokens, 1);
            qc_metrics_add_logits(&m, &dd, act->decode_logits, gc->decode_logits,
                                  qc_policy_tie_margin(c->pol));
        }
        qc_metrics_finish(&m);
        long hard = m.rows - m.top1_agree - m.top1_near_tie;
        qc_check_row row;
        row_init(&row, c->stem, gc->name, backend, mode, "argmax");
        row.verdict = hard == 0 ? QC_VERDICT_PASS : QC_VERDICT_FAIL;
        snprintf(row.keyline, sizeof row.keyline, "top1 %ld/%ld rows agree (%ld near-tie flips, "
                 "tie margin %g)", m.top1_agree, m.rows, m.top1_near_tie,
                 qc_policy_tie_margin(c->pol));
        if (hard) {
            char mean[256];
            qc_tdesc_meaning(&m.first_top1_flip.desc, m.first_top1_flip.idx, mean, sizeof mean);
            row.detail = qc_strdup_printf("Argmax disagrees on %ld row(s) outside near-ties\nFirst "
                                          "flip: %s: golden argmax %d, actual argmax at %s "
                                          "(golden top1-top2 margin %.4g)%s%s",
                                          hard, m.first_top1_flip.desc.path, m.flip_golden_arg,
                                          mean, m.first_top1_flip.value, loc ? "\n" : "",
                                          loc ? loc : "");
        }
        emit(c, &row);
    }
    /* prefill states */
    static const char *const pnames[] = {"prefill.k_cache", "prefill.v_cache", "prefill.conv_state",
                                         "prefill.recurrent_state"};
    static const char *const dnames[] = {"decode.k_cache", "decode.v_cache", "decode.conv_state",
                                         "decode.recurrent_state"};
    s.logits_stats = 0;
    for (int k = QC_TC_K_CACHE; k <= QC_TC_RECURRENT_STATE; k++) {
        memset(pl, 0, sizeof *pl);
        add_state_parts(pl, cfg, "prefill", k, &act->prefill_state, &gc->prefill_state);
        if (pl->n == 0 && !pl->problem[0]) continue;
        s.check = pnames[k - QC_TC_K_CACHE];
        compare_parts(c, &s, pl);
    }
    if (gc->n_decode > 0) {
        memset(pl, 0, sizeof *pl);
        desc_logits(&d, "decode/logits", gc->n_decode, V, gc->start_pos + gc->n_tokens, 1);
        pl_add(pl, &d, act->decode_logits, gc->decode_logits);
        s.check = "decode.logits";
        s.logits_stats = 1;
        compare_parts(c, &s, pl);
        s.logits_stats = 0;
        for (int k = QC_TC_K_CACHE; k <= QC_TC_RECURRENT_STATE; k++) {
            memset(pl, 0, sizeof *pl);
            add_state_parts(pl, cfg, "decode", k, &act->decode_state, &gc->decode_state);
            if (pl->n == 0 && !pl->problem[0]) continue;
            s.check = dnames[k - QC_TC_K_CACHE];
            compare_parts(c, &s, pl);
        }
    }
    free(pl);
}

/* A comparison of two complete runs (logits + states). */
static void compare_runs(ctx *c, const qc_golden_case *gc, const qc_golden_case *a,
                         const qc_golden_case *b, const char *backend, const char *mode,
                         const char *check, int bitwise, int vs_golden, const char *extra) {
    partlist *pl = calloc(1, sizeof *pl);
    if (!pl) return;
    add_all_parts(pl, c->cfg, a, b);
    cmp_spec s = {.case_name = gc->name, .backend = backend, .mode = mode, .check = check,
                  .bitwise = bitwise, .vs_golden = vs_golden, .extra = extra,
                  .logits_stats = vs_golden};
    int bi = backend_index(backend);
    qc_mode mm;
    if (vs_golden && qc_mode_parse(mode, &mm, NULL) == QC_OK) s.dump_file = c->dump_path[bi][mm];
    compare_parts(c, &s, pl);
    free(pl);
}

typedef struct {
    int have[N_BACKENDS][N_MODES];            /* 1: act filled */
    qc_golden_case act[N_BACKENDS][N_MODES];  /* main results */
} case_runs;

static void check_case(ctx *c, backends *bs, const qc_golden_case *gc, case_runs *cr) {
    const qc_config *cfg = c->cfg;
    const int L = cfg->n_layers, T = gc->n_tokens, H = cfg->hidden_size;
    qc_err err;
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        qc_backend *be = bs->be[bi];
        if (!be) continue;
        const char *bname = backend_names[bi];
        for (int mi = 0; mi < N_MODES; mi++) {
            qc_mode mode = (qc_mode)mi;
            if (!mode_selected(c, gc->name, bname, mode)) continue;
            const char *mname = qc_mode_str(mode);
            qc_err_clear(&err);
            hcap hc = {0};
            int want_hidden = gc->prefill_hidden != NULL;
            if (want_hidden) {
                hc.hidden = calloc((size_t)(L + 1) * T * H, sizeof(float));
                hc.seen = calloc((size_t)(L + 1) * T, 1);
                hc.L1 = L + 1, hc.T = T, hc.H = H, hc.lo = gc->start_pos;
            }
            qc_golden_case *act = &cr->act[bi][mi];
            qc_status s = run_one(be, gc, mode, c->o, 0, want_hidden ? &hc : NULL, act, &err);
            if (s) {
                emit_simple(c, gc->name, bname, mname, "run", QC_VERDICT_ERROR, err.msg, NULL);
                free(hc.hidden), free(hc.seen);
                continue;
            }
            cr->have[bi][mi] = 1;
            char loc[4096] = "";
            cmp_spec base = {.case_name = gc->name, .backend = bname, .mode = mname,
                             .vs_golden = 1, .dump_file = c->dump_path[bi][mi]};
            if (want_hidden) check_hidden(c, &base, gc, &hc, loc, sizeof loc);
            if (!want_hidden || strstr(loc, "unknown") || strstr(loc, "none (")) 
                state_localisation(c, act, gc, bname, mname, loc, sizeof loc);
            free(hc.hidden), free(hc.seen);
            vs_golden_checks(c, gc, act, bname, mname, c->dump_path[bi][mi], loc[0] ? loc : NULL);

            check_garbage_and_slots(c, be, gc, mode, act);

            /* optimized: 1 vs 2 threads, bitwise. Static prefill of long prompts is skipped:
             * it runs the same one-token kernels as decode and the short cases, and its many
             * small parallel regions are the slowest part of a run on a busy 2-core machine. */
            if (bi == 1 && bs->opt1 && (mode != QC_MODE_STATIC || T <= 8)) {
                qc_golden_case t1;
                qc_err_clear(&err);
                if (run_one(bs->opt1, gc, mode, c->o, 0, NULL, &t1, &err) == QC_OK) {
                    char extra[128];
                    snprintf(extra, sizeof extra, "Optimized backend, %d thread(s) (actual) vs %d "
                             "thread(s) (expected)", bs->opt1->opts.n_threads,
                             bs->be[1]->opts.n_threads);
                    compare_runs(c, gc, &t1, act, bname, mname, "threads_bitwise", 1, 0, extra);
                    if (c->cal) {
                        partlist *pl = calloc(1, sizeof *pl);
                        if (pl) {
                            add_all_parts(pl, cfg, &t1, gc);
                            for (int i = 0; i < pl->n; i++)
                                calib_measure(c, 1, CAL_KIND_GOLDEN, &pl->p[i], gc->name);
                            free(pl);
                        }
                    }
                    qc_case_free(cfg, &t1);
                } else {
                    emit_simple(c, gc->name, bname, mname, "threads_bitwise", QC_VERDICT_ERROR,
                                err.msg, NULL);
                }
            }
        }
        /* static == dynamic */
        if (cr->have[bi][QC_MODE_STATIC] && cr->have[bi][QC_MODE_DYNAMIC])
            compare_runs(c, gc, &cr->act[bi][QC_MODE_DYNAMIC], &cr->act[bi][QC_MODE_STATIC],
                         bname, "dynamic", "static_eq_dynamic", 0, 0,
                         "Dynamic-shape prefill (actual) vs static one-token-per-call prefill "
                         "(expected), same backend");
        if (cr->have[bi][QC_MODE_DYNAMIC]) {
            /* chunked == recurrent DeltaNet */
            qc_golden_case rec;
            qc_err_clear(&err);
            be->opts.dn_kernel = QC_DN_RECURRENT;
            qc_status s = run_one(be, gc, QC_MODE_DYNAMIC, c->o, 0, NULL, &rec, &err);
            be->opts.dn_kernel = QC_DN_CHUNKED;
            if (s == QC_OK) {
                compare_runs(c, gc, &cr->act[bi][QC_MODE_DYNAMIC], &rec, bname, "dynamic",
                             "chunked_eq_recurrent", 0, 0,
                             "Chunked DeltaNet (actual) vs token recurrence (expected), "
                             "dynamic prefill");
                qc_case_free(cfg, &rec);
            } else {
                emit_simple(c, gc->name, bname, "dynamic", "chunked_eq_recurrent",
                            QC_VERDICT_ERROR, err.msg, NULL);
            }
            /* chunk-size sweep around the 64 boundary */
            if (T >= 63) {
                int msl = gc->max_seq_len > 0 ? gc->max_seq_len : 128;
                int sizes[4] = {1, 3, 64, msl};
                for (int k = 0; k < 4; k++) {
                    int dup = 0;
                    for (int j = 0; j < k; j++) dup |= sizes[j] == sizes[k];
                    if (dup) continue;
                    char name[32];
                    snprintf(name, sizeof name, "chunk_sweep.c%d", sizes[k]);
                    qc_golden_case sw;
                    int saved = be->opts.chunk_size;
                    be->opts.chunk_size = sizes[k];
                    qc_err_clear(&err);
                    s = run_one(be, gc, QC_MODE_DYNAMIC, c->o, 0, NULL, &sw, &err);
                    be->opts.chunk_size = saved;
                    if (s == QC_OK) {
                        char extra[160];
                        snprintf(extra, sizeof extra, "Dynamic prefill with DeltaNet chunk size "
                                 "%d vs the golden", sizes[k]);
                        compare_runs(c, gc, &sw, gc, bname, "dynamic", name, 0, 1, extra);
                        qc_case_free(cfg, &sw);
                    } else {
                        emit_simple(c, gc->name, bname, "dynamic", name, QC_VERDICT_ERROR,
                                    err.msg, NULL);
                    }
                }
            }
        }
    }
    /* optimized == reference */
    for (int mi = 0; mi < N_MODES; mi++)
        if (cr->have[0][mi] && cr->have[1][mi])
            compare_runs(c, gc, &cr->act[1][mi], &cr->act[0][mi], "optimized",
                         qc_mode_str((qc_mode)mi), "opt_eq_ref", 0, 0,
                         "Optimized backend (actual) vs reference backend (expected), same mode");
}

/* ===================================================================================== */
/* per file                                                                              */
/* ===================================================================================== */

/* Report stem of a golden path: path relative to the --golden root without ".h5"; a final
 * "golden" component is dropped (fixtures/<name>/golden.h5 -> "<name>"); '/' -> '-'. */
static void make_stem(const char *path, const char *root, char *out, size_t n) {
    char rel[1024];
    size_t rl = strlen(root);
    struct stat sb;
    int root_is_dir = stat(root, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (root_is_dir && strncmp(path, root, rl) == 0) {
        const char *r = path + rl;
        while (*r == '/') r++;
        snprintf(rel, sizeof rel, "%s", r);
    } else {
        const char *b = strrchr(path, '/');
        snprintf(rel, sizeof rel, "%s", b ? b + 1 : path);
    }
    size_t L = strlen(rel);
    if (L > 3 && strcmp(rel + L - 3, ".h5") == 0) rel[L - 3] = 0;
    L = strlen(rel);
    if (strcmp(rel, "golden") == 0 || (L > 7 && strcmp(rel + L - 7, "/golden") == 0)) {
        if (L > 7) {
            rel[L - 7] = 0;
        } else {
            /* bare golden.h5: use its directory's name */
            char tmp[1024];
            snprintf(tmp, sizeof tmp, "%s", path);
            char *d = dirname(tmp);
            char tmp2[1024];
            snprintf(tmp2, sizeof tmp2, "%s", d);
            snprintf(rel, sizeof rel, "%s", basename(tmp2));
        }
    }
    for (char *p = rel; *p; p++)
        if (*p == '/') *p = '-';
    snprintf(out, n, "%s", rel);
}

static int case_selected(ctx *c, const char *case_name, int avail_backends) {
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        if (!(avail_backends & (1 << bi))) continue;
        for (int m = 0; m < N_MODES; m++)
            if (mode_selected(c, case_name, backend_names[bi], (qc_mode)m)) return 1;
    }
    return 0;
}

static int cfg_same(const qc_config *a, const qc_config *b) {
    if (a->vocab_size != b->vocab_size || a->hidden_size != b->hidden_size ||
        a->intermediate_size != b->intermediate_size || a->n_layers != b->n_layers ||
        a->n_heads != b->n_heads || a->n_kv_heads != b->n_kv_heads ||
        a->head_dim != b->head_dim || a->lin_n_k_heads != b->lin_n_k_heads ||
        a->lin_n_v_heads != b->lin_n_v_heads || a->lin_k_dim != b->lin_k_dim ||
        a->lin_v_dim != b->lin_v_dim || a->conv_kernel != b->conv_kernel)
        return 0;
    for (int l = 0; l < a->n_layers; l++)
        if (a->layer_types[l] != b->layer_types[l]) return 0;
    return 1;
}

/* Write the actual tensors of one backend x mode in the golden layout. */
static void dump_actual(ctx *c, const qc_golden *g, qc_golden_case *cases, int n, const char *path) {
    qc_golden *d = calloc(1, sizeof *d);
    if (!d) return;
    *d = *g;
    snprintf(d->generator, sizeof d->generator, "qwen-conform check %s (--dump-actual)", QC_VERSION);
    snprintf(d->compute_dtype, sizeof d->compute_dtype, "float32");
    snprintf(d->torch_version, sizeof d->torch_version, "%s", "");
    char *rp = realpath(g->model_dir, NULL);
    snprintf(d->model_path, sizeof d->model_path, "%s", rp ? rp : g->model_dir);
    free(rp);
    d->n_cases = n;
    d->cases = cases;
    qc_err err;
    qc_err_clear(&err);
    if (qc_golden_write(path, d, &err) != QC_OK)
        fprintf(stderr, "qwen-conform: --dump-actual: %s\n", err.msg);
    else if (!c->o->quiet)
        fprintf(stderr, "qwen-conform: wrote actual tensors to %s\n", path);
    free(d);
}

static void check_file(ctx *c, const char *path, long *case_counter) {
    qc_err err;
    qc_err_clear(&err);
    qc_golden *g = NULL;
    char stem[128];
    make_stem(path, c->o->golden, stem, sizeof stem);
    c->stem = stem;
    c->g = NULL;
    c->t_row = wall();
    if (qc_golden_open(path, &g, &err) != QC_OK) {
        qc_check_row r;
        row_init(&r, stem, "_file", "-", "-", "open");
        r.verdict = QC_VERDICT_ERROR;
        snprintf(r.keyline, sizeof r.keyline, "%s", err.msg);
        snprintf(r.golden, sizeof r.golden, "%s", path);
        r.seconds = 0;
        qc_check_row *st = qc_results_add(c->res, &r);
        if (st && !c->o->list && !c->o->calibrate) qc_report_console_row(stdout, st, c->o->quiet);
        fprintf(stderr, "qwen-conform: %s\n", err.msg);
        return;
    }
    c->g = g;
    c->cfg = &g->cfg;
    /* select cases */
    int *sel = calloc((size_t)(g->n_cases > 0 ? g->n_cases : 1), sizeof *sel);
    int n_sel = 0;
    int avail = c->o->backends ? c->o->backends : (QC_BACKEND_REF | QC_BACKEND_OPT);
    for (int i = 0; sel && i < g->n_cases; i++) {
        long k = (*case_counter)++;
        if (c->o->shard_n > 0 && (k % c->o->shard_n) != c->o->shard_i - 1) continue;
        if (!case_selected(c, g->cases[i].name, avail)) continue;
        sel[i] = 1;
        n_sel++;
        if (c->o->list) {
            for (int bi = 0; bi < N_BACKENDS; bi++)
                for (int m = 0; (avail & (1 << bi)) && m < N_MODES; m++)
                    if (mode_selected(c, g->cases[i].name, backend_names[bi], (qc_mode)m) &&
                        ++c->listed)
                        printf("%s/%s/%s/%s\n", stem, g->cases[i].name, backend_names[bi],
                               qc_mode_str((qc_mode)m));
        }
    }
    if (c->o->list || n_sel == 0) {
        free(sel);
        qc_golden_free(g);
        c->g = NULL;
        return;
    }
    /* model */
    qc_model *model = NULL;
    if (qc_model_load(g->model_dir, &model, &err) != QC_OK) {
        emit_simple(c, "_model", "-", "-", "load", QC_VERDICT_ERROR, err.msg, NULL);
        free(sel);
        qc_golden_free(g);
        c->g = NULL;
        return;
    }
    /* memory plan: refuse cleanly before the backends, states and captures are allocated */
    {
        int ctx = 1;
        for (int i = 0; i < g->n_cases; i++) {
            const qc_golden_case *gc = &g->cases[i];
            int need = gc->start_pos + gc->n_tokens + gc->n_decode;
            if (sel[i] && need > ctx) ctx = need;
        }
        qc_memplan_req rq;
        qc_memplan_req_init(&rq, &model->cfg, model->embed.dtype, "all", ctx, ctx);
        rq.weight_bytes = qc_model_weight_bytes(model);
        rq.nokv = 1;
        rq.n_logit_rows = 2 * ctx;
        rq.n_hidden_tokens = ctx;
        rq.n_state_copies = 4;
        if (qc_memplan_enforce(&rq, c->o->max_memory, path, NULL, &err) != QC_OK) {
            emit_simple(c, "_model", "-", "-", "memory", QC_VERDICT_ERROR, err.msg, NULL);
            qc_model_free(model);
            free(sel);
            qc_golden_free(g);
            c->g = NULL;
            return;
        }
    }
    /* model_hash */
    int cfg_ok = cfg_same(&model->cfg, &g->cfg);
    {
        int ch = strcmp(model->config_sha256, g->config_sha256) == 0;
        int wh = strcmp(model->weights_sha256, g->weights_sha256) == 0;
        if (c->o->no_hash_check) {
            char k[320];
            snprintf(k, sizeof k, "skipped (--no-hash-check)%s",
                     ch && wh ? "" : "; WARNING: the model's hashes differ from the golden's");
            emit_simple(c, "_model", "-", "-", "model_hash", QC_VERDICT_SKIP, k,
                        ch && wh ? NULL
                                 : qc_strdup_printf("config_sha256: golden %s, model %s\n"
                                                    "weights_sha256: golden %s, model %s",
                                                    g->config_sha256, model->config_sha256,
                                                    g->weights_sha256, model->weights_sha256));
            if (!(ch && wh))
                fprintf(stderr, "qwen-conform: warning: %s: model %s does not match the golden's "
                        "hashes (config %s vs %s, weights %s vs %s)\n", path, g->model_dir,
                        model->config_sha256, g->config_sha256, model->weights_sha256,
                        g->weights_sha256);
        } else if (ch && wh) {
            char k[320];
            snprintf(k, sizeof k, "config %.12s weights %.12s match the golden", g->config_sha256,
                     g->weights_sha256);
            emit_simple(c, "_model", "-", "-", "model_hash", QC_VERDICT_PASS, k, NULL);
        } else {
            char k[320];
            snprintf(k, sizeof k, "%s%s%s differs from the golden", ch ? "" : "config_sha256",
                     !ch && !wh ? " and " : "", wh ? "" : "weights_sha256");
            emit_simple(c, "_model", "-", "-", "model_hash", QC_VERDICT_FAIL, k,
                        qc_strdup_printf("The golden claims a different model than the one "
                                         "loaded from %s\nconfig_sha256:  golden %s\n"
                                         "                model  %s%s\nweights_sha256: golden %s\n"
                                         "                model  %s%s",
                                         g->model_dir, g->config_sha256, model->config_sha256,
                                         ch ? "  (same)" : "  (DIFFERENT)", g->weights_sha256,
                                         model->weights_sha256, wh ? "  (same)" : "  (DIFFERENT)"));
        }
    }
    if (!cfg_ok) {
        emit_simple(c, "_model", "-", "-", "model_config", QC_VERDICT_FAIL,
                    "the loaded model's config differs from the golden's config_json: "
                    "numerical checks skipped", NULL);
        qc_model_free(model);
        free(sel);
        qc_golden_free(g);
        c->g = NULL;
        return;
    }
    /* test-only model fault */
    fault_model *fm = NULL;
    const qc_model *use_model = model;
    if (c->o->faults.norm_no_offset) {
        if (c->o->faults.norm_layer >= model->cfg.n_layers) {
            emit_simple(c, "_model", "-", "-", "inject_fault", QC_VERDICT_ERROR,
                        "--inject-fault norm-no-offset: layer out of range", NULL);
        } else if (fault_model_make(model, c->o->faults.norm_layer, &fm, &err) == QC_OK) {
            use_model = &fm->m;
        }
    }
    /* backends */
    backends bs;
    memset(&bs, 0, sizeof bs);
    int maxctx = 0;
    for (int i = 0; i < g->n_cases; i++) {
        if (!sel[i]) continue;
        qc_profile p;
        case_profile(&g->cases[i], QC_MODE_NOKV, 8, &p);
        if (p.max_context_len > maxctx) maxctx = p.max_context_len;
        if (p.max_seq_len > maxctx) maxctx = p.max_seq_len;
    }
    bs.max_tokens = maxctx;
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        if (!(avail & (1 << bi))) continue;
        qc_backend_opts bo;
        qc_backend_opts_default(&bo);
        bo.max_tokens = maxctx;
        bo.n_threads = bi == 1 ? c->o->threads : 0;
        qc_err_clear(&err);
        qc_status s = qc_backend_create(backend_names[bi], use_model, &bo, &bs.be[bi], &err);
        if (s == QC_OK && c->o->faults.stale_conv_state)
            s = stale_wrap(bs.be[bi], &bs.be[bi], &err);
        if (s != QC_OK) {
            bs.be[bi] = NULL;
            if (c->o->backends & (1 << bi))
                emit_simple(c, "_model", backend_names[bi], "-", "create", QC_VERDICT_ERROR,
                            err.msg, NULL);
            else if (!c->o->quiet)
                fprintf(stderr, "qwen-conform: %s backend not available (%s); checking the "
                        "others\n", backend_names[bi], err.msg);
            continue;
        }
        if (bi == 1) {
            if (bs.be[1]->describe) snprintf(c->res->isa, sizeof c->res->isa, "%s",
                                             bs.be[1]->describe(bs.be[1]));
            bo.n_threads = c->o->threads == 1 ? 2 : 1;
            qc_err_clear(&err);
            if (qc_backend_create("optimized", use_model, &bo, &bs.opt1, &err) == QC_OK &&
                c->o->faults.stale_conv_state)
                stale_wrap(bs.opt1, &bs.opt1, &err);
            if (bs.opt1 && bs.opt1->describe && bs.opt1->opts.n_threads > 1)
                snprintf(c->res->isa, sizeof c->res->isa, "%s", bs.opt1->describe(bs.opt1));
        }
    }
    /* dump files */
    memset(c->dump_path, 0, sizeof c->dump_path);
    if (c->o->dump_dir)
        for (int bi = 0; bi < N_BACKENDS; bi++)
            for (int m = 0; bs.be[bi] && m < N_MODES; m++)
                snprintf(c->dump_path[bi][m], sizeof c->dump_path[bi][m], "%s/%s.%s.%s.h5",
                         c->o->dump_dir, stem, backend_names[bi], qc_mode_str((qc_mode)m));
    qc_golden_case *dump[N_BACKENDS][N_MODES] = {{0}};
    int n_dump[N_BACKENDS][N_MODES] = {{0}};
    if (c->o->dump_dir)
        for (int bi = 0; bi < N_BACKENDS; bi++)
            for (int m = 0; m < N_MODES; m++)
                dump[bi][m] = calloc((size_t)g->n_cases, sizeof(qc_golden_case));
    /* cases */
    int done = 0;
    for (int i = 0; i < g->n_cases; i++) {
        if (!sel[i]) continue;
        const qc_golden_case *gc = &g->cases[i];
        double t0 = wall();
        case_runs *cr = calloc(1, sizeof *cr);
        if (!cr) break;
        check_case(c, &bs, gc, cr);
        for (int bi = 0; bi < N_BACKENDS; bi++)
            for (int m = 0; m < N_MODES; m++) {
                if (!cr->have[bi][m]) continue;
                if (dump[bi][m])
                    dump[bi][m][n_dump[bi][m]++] = cr->act[bi][m];
                else
                    qc_case_free(&g->cfg, &cr->act[bi][m]);
            }
        free(cr);
        done++;
        if (!c->o->quiet)
            fprintf(stderr, "[%s] case %s done (%d/%d, %.2f s)\n", stem, gc->name, done, n_sel,
                    wall() - t0);
    }
    for (int bi = 0; bi < N_BACKENDS; bi++)
        for (int m = 0; m < N_MODES; m++) {
            if (!dump[bi][m]) continue;
            if (n_dump[bi][m] > 0) dump_actual(c, g, dump[bi][m], n_dump[bi][m], c->dump_path[bi][m]);
            for (int k = 0; k < n_dump[bi][m]; k++) qc_case_free(&g->cfg, &dump[bi][m][k]);
            free(dump[bi][m]);
        }
    for (int bi = 0; bi < N_BACKENDS; bi++) qc_backend_destroy(bs.be[bi]);
    qc_backend_destroy(bs.opt1);
    fault_model_free(fm);
    qc_model_free(model);
    free(sel);
    qc_golden_free(g);
    c->g = NULL;
}

/* ===================================================================================== */
/* engine entry                                                                          */
/* ===================================================================================== */

int qc_check_run(qc_check_opts *o, qc_policy *pol, qc_results *res) {
    ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.pol = pol;
    c.res = res;
    c.cal = o->calibrate ? (calib_sink *)o->calib : NULL;
    if (o->modes == 0) o->modes = (1 << N_MODES) - 1;
    if (o->threads <= 0) o->threads = 1;
    double t0 = wall();
    qc_err err;
    qc_err_clear(&err);
    char **paths = NULL;
    int n = 0;
    if (qc_golden_find(o->golden, &paths, &n, &err) != QC_OK) {
        fprintf(stderr, "qwen-conform: %s\n", err.msg);
        return QC_EXIT_ERROR;
    }
    if (n == 0) {
        fprintf(stderr, "qwen-conform: no golden files (*.h5) under %s: nothing to check\n",
                o->golden);
        qc_golden_paths_free(paths, n);
        return QC_EXIT_NOTHING;
    }
    if (o->dump_dir) {
        struct stat sb;
        if (stat(o->dump_dir, &sb) != 0 && mkdir(o->dump_dir, 0777) != 0) {
            fprintf(stderr, "qwen-conform: --dump-actual: cannot create %s: %s\n", o->dump_dir,
                    strerror(errno));
            qc_golden_paths_free(paths, n);
            return QC_EXIT_ERROR;
        }
    }
    if (!o->list && !o->calibrate) qc_report_console_header(stdout);
    long counter = 0;
    for (int i = 0; i < n; i++) {
        if (!o->quiet && !o->list) fprintf(stderr, "[file %d/%d] %s\n", i + 1, n, paths[i]);
        check_file(&c, paths[i], &counter);
    }
    qc_golden_paths_free(paths, n);
    res->seconds = wall() - t0;
    if (o->list) return res->n_error ? QC_EXIT_ERROR : c.listed ? QC_EXIT_PASS : QC_EXIT_NOTHING;
    if (res->n_error) return QC_EXIT_ERROR;
    if (res->n_fail) return QC_EXIT_FAIL;
    if (res->n_pass == 0) {
        fprintf(stderr, "qwen-conform: nothing was checked (filter / shard selected no case)\n");
        return QC_EXIT_NOTHING;
    }
    return QC_EXIT_PASS;
}

/* ===================================================================================== */
/* command line: qwen-conform [check]                                                    */
/* ===================================================================================== */

static const char check_usage[] =
    "usage: qwen-conform [check] --golden DIR|FILE [options]\n"
    "  --backend reference|optimized|all   backends to check (default: all available)\n"
    "  --mode static|dynamic|nokv|all      prefill strategies, comma-separated (default all)\n"
    "  --policy F.json       tolerance policy (default: tolerances.json beside the goldens,\n"
    "                        DIR/ or its parent, e.g. fixtures/tolerances.json; else built-in)\n"
    "  --json F              machine-readable report (schema-versioned)\n"
    "  --junit F             JUnit XML report (classname <stem>.<case>, name\n"
    "                        <backend>.<mode>.<check>)\n"
    "  --dump-actual DIR     write the actual tensors in the golden layout\n"
    "                        (DIR/<stem>.<backend>.<mode>.h5) and print h5diff lines\n"
    "  --list                print the selected <stem>/<case>/<backend>/<mode> ids; run nothing\n"
    "  --filter REGEX        POSIX extended regex on <stem>/<case>/<backend>/<mode>\n"
    "  --shard i/n           run the i-th (1-based) of n interleaved shards of the cases\n"
    "  --threads N           optimized backend threads for the main runs (default 1; the\n"
    "                        threads_bitwise check compares them with 2 threads)\n"
    "  --no-hash-check       do not fail when the model's SHA-256 differs from the golden's\n"
    "  --max-memory SIZE     refuse (exit 2) when the planned memory exceeds SIZE (e.g. 8G;\n"
    "                        default: the machine's available memory)\n"
    "  --quiet               print only failures and the summary\n"
    "exit: 0 all passed, 1 a conformance failure, 2 usage / I/O / format error,\n"
    "      3 nothing was checked\n";

static qc_status parse_backend(const char *v, int *mask, qc_err *err) {
    if (!strcmp(v, "reference")) *mask = QC_BACKEND_REF;
    else if (!strcmp(v, "optimized")) *mask = QC_BACKEND_OPT;
    else if (!strcmp(v, "all")) *mask = 0;
    else return qc_errf(err, QC_ERR_ARG, "--backend: '%s' is not reference, optimized or all", v);
    return QC_OK;
}

static qc_status parse_modes(const char *v, int *mask, qc_err *err) {
    *mask = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "all")) {
            *mask = (1 << N_MODES) - 1;
            continue;
        }
        qc_mode m;
        qc_status ms = qc_mode_parse(t, &m, err);
        if (ms != QC_OK) return qc_err_prefix(err, ms, "--mode");
        *mask |= 1 << m;
    }
    if (!*mask) return qc_errf(err, QC_ERR_ARG, "--mode: empty");
    return QC_OK;
}

static qc_status parse_shard(const char *v, int *i, int *n, qc_err *err) {
    char *e1 = NULL, *e2 = NULL;
    long a = strtol(v, &e1, 10);
    if (e1 == v || *e1 != '/') return qc_errf(err, QC_ERR_ARG, "--shard: '%s' is not i/n", v);
    long b = strtol(e1 + 1, &e2, 10);
    if (e2 == e1 + 1 || *e2 || b < 1 || a < 1 || a > b || b > 100000)
        return qc_errf(err, QC_ERR_ARG, "--shard: '%s': need 1 <= i <= n", v);
    *i = (int)a;
    *n = (int)b;
    return QC_OK;
}

static qc_status parse_fault(const char *v, qc_check_faults *f, qc_err *err) {
    if (!strncmp(v, "norm-no-offset", 14)) {
        f->norm_no_offset = 1;
        f->norm_layer = -1;
        if (v[14] == ':') {
            long l;
            if (qc_cli_parse_long(v + 15, "--inject-fault norm-no-offset:LAYER", 0, QC_MAX_LAYERS - 1,
                                  &l, err))
                return err ? err->code : QC_ERR_ARG;
            f->norm_layer = (int)l;
        } else if (v[14]) {
            return qc_errf(err, QC_ERR_ARG, "--inject-fault: unknown fault '%s'", v);
        }
    } else if (!strcmp(v, "stale-conv-state")) {
        f->stale_conv_state = 1;
    } else if (!strcmp(v, "static-no-advance")) {
        f->static_no_advance = 1;
    } else {
        return qc_errf(err, QC_ERR_ARG, "--inject-fault: unknown fault '%s' (norm-no-offset[:LAYER], "
                       "stale-conv-state, static-no-advance)", v);
    }
    return QC_OK;
}

/* Shared option parsing of check and calibrate. Returns -1 to continue, else an exit code. */
static int parse_common(int argc, char **argv, const char *prog, qc_check_opts *o, int *runs,
                        const char **out, double *factor, const char **policy_out) {
    qc_argp a;
    qc_err err;
    qc_err_clear(&err);
    qc_argp_init(&a, prog, argc, argv);
    qc_status st = QC_OK;
    while (!st && qc_argp_next(&a)) {
        const char *v = NULL;
        if (a.positional) {
            if (!o->golden) o->golden = a.arg;
            else st = qc_argp_unknown(&a, &err);
        } else if (qc_argp_is(&a, "--help") || qc_argp_is(&a, "-h")) {
            fputs(runs ? "usage: qwen-conform calibrate --golden DIR [--runs N] [--factor K] "
                         "[--out measurements.json] [--policy-out tolerances.json]\n"
                         "  measures float32 runtime vs float64 golden noise (max abs, max rel, "
                         "KL) per tensor class, backend, mode and thread count, and prints a "
                         "suggested policy (K x the measured max, rounded up to 1-2-5 steps; "
                         "K^2 for KL)\n"
                       : check_usage, stdout);
            return QC_EXIT_PASS;
        } else if (qc_argp_is(&a, "--golden")) {
            st = qc_argp_value(&a, &o->golden, &err);
        } else if (qc_argp_is(&a, "--backend")) {
            if (!(st = qc_argp_value(&a, &v, &err))) st = parse_backend(v, &o->backends, &err);
        } else if (qc_argp_is(&a, "--mode")) {
            if (!(st = qc_argp_value(&a, &v, &err))) st = parse_modes(v, &o->modes, &err);
        } else if (qc_argp_is(&a, "--filter")) {
            if (!(st = qc_argp_value(&a, &v, &err))) {
                if (o->has_filter) regfree(&o->filter), o->has_filter = 0;
                int rc = regcomp(&o->filter, v, REG_EXTENDED | REG_NOSUB);
                if (rc) {
                    char m[256];
                    regerror(rc, &o->filter, m, sizeof m);
                    st = qc_errf(&err, QC_ERR_ARG, "--filter: bad regex '%s': %s", v, m);
                } else {
                    o->has_filter = 1;
                }
            }
        } else if (qc_argp_is(&a, "--threads")) {
            st = qc_argp_int(&a, 1, 1024, &o->threads, &err);
        } else if (qc_argp_is(&a, "--quiet") || qc_argp_is(&a, "-q")) {
            st = qc_argp_bool(&a, &err);
            o->quiet = 1;
        } else if (qc_argp_is(&a, "--no-hash-check")) {
            st = qc_argp_bool(&a, &err);
            o->no_hash_check = 1;
        } else if (qc_argp_is(&a, "--max-memory")) {
            if (!(st = qc_argp_value(&a, &v, &err))) {
                uint64_t bytes;
                st = qc_memplan_parse_size(v, "--max-memory", &bytes, &err);
                o->max_memory = v;
            }
        } else if (qc_argp_is(&a, "--inject-fault")) {
            if (!(st = qc_argp_value(&a, &v, &err))) st = parse_fault(v, &o->faults, &err);
        } else if (runs && qc_argp_is(&a, "--runs")) {
            st = qc_argp_int(&a, 1, 1000, runs, &err);
        } else if (runs && qc_argp_is(&a, "--out")) {
            st = qc_argp_value(&a, out, &err);
        } else if (runs && qc_argp_is(&a, "--policy-out")) {
            st = qc_argp_value(&a, policy_out, &err);
        } else if (runs && qc_argp_is(&a, "--factor")) {
            int k = 4;
            st = qc_argp_int(&a, 1, 1000, &k, &err);
            *factor = k;
        } else if (!runs && qc_argp_is(&a, "--policy")) {
            st = qc_argp_value(&a, &o->policy_path, &err);
        } else if (!runs && qc_argp_is(&a, "--json")) {
            st = qc_argp_value(&a, &o->json_path, &err);
        } else if (!runs && qc_argp_is(&a, "--junit")) {
            st = qc_argp_value(&a, &o->junit_path, &err);
        } else if (!runs && qc_argp_is(&a, "--dump-actual")) {
            st = qc_argp_value(&a, &o->dump_dir, &err);
        } else if (!runs && qc_argp_is(&a, "--list")) {
            st = qc_argp_bool(&a, &err);
            o->list = 1;
        } else if (!runs && qc_argp_is(&a, "--shard")) {
            if (!(st = qc_argp_value(&a, &v, &err))) st = parse_shard(v, &o->shard_i, &o->shard_n, &err);
        } else {
            st = qc_argp_unknown(&a, &err);
        }
    }
    if (!st && !o->golden)
        st = qc_errf(&err, QC_ERR_ARG, "--golden DIR|FILE is required (see --help)");
    if (st) return qc_cli_fail(prog, &err);
    return -1;
}

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* --policy, else tolerances.json beside the goldens (DIR/, or the file's directory or its
 * parent), else built-in. */
static qc_status load_policy(const qc_check_opts *o, qc_policy **pol, qc_err *err) {
    if (o->policy_path) return qc_policy_load(o->policy_path, pol, err);
    char cand[3][2100];
    int nc = 0;
    struct stat sb;
    char g[1024];
    snprintf(g, sizeof g, "%s", o->golden);
    for (size_t L = strlen(g); L > 1 && g[L - 1] == '/'; L--) g[L - 1] = 0;
    if (stat(g, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char d[1024];
        snprintf(cand[nc++], sizeof cand[0], "%s/tolerances.json", g);
        qc_cli_dirname(g, d, sizeof d);
        snprintf(cand[nc++], sizeof cand[0], "%s/tolerances.json", d);
    } else {
        char d[1024], dd[1024];
        qc_cli_dirname(o->golden, d, sizeof d);
        qc_cli_dirname(d, dd, sizeof dd);
        snprintf(cand[nc++], sizeof cand[0], "%s/tolerances.json", d);
        snprintf(cand[nc++], sizeof cand[0], "%s/tolerances.json", dd);
    }
    for (int i = 0; i < nc; i++)
        if (file_exists(cand[i])) return qc_policy_load(cand[i], pol, err);
    return qc_policy_builtin(pol, err);
}

static void opts_init(qc_check_opts *o) {
    memset(o, 0, sizeof *o);
    o->threads = 1;
    o->faults.norm_layer = -1;
}

static void opts_free(qc_check_opts *o) {
    if (o->has_filter) regfree(&o->filter);
    o->has_filter = 0;
}

int qc_cmd_check(int argc, char **argv) {
    const char *prog = "qwen-conform check";
    qc_check_opts o;
    opts_init(&o);
    int rc = parse_common(argc, argv, prog, &o, NULL, NULL, NULL, NULL);
    if (rc >= 0) {
        opts_free(&o);
        return rc;
    }
    qc_err err;
    qc_err_clear(&err);
    if ((o.json_path && qc_cli_check_writable(o.json_path, &err)) ||
        (o.junit_path && qc_cli_check_writable(o.junit_path, &err))) {
        opts_free(&o);
        return qc_cli_fail(prog, &err);
    }
    qc_policy *pol = NULL;
    if (load_policy(&o, &pol, &err)) {
        opts_free(&o);
        return qc_cli_fail(prog, &err);
    }
    qc_results res;
    qc_results_init(&res);
    qc_results_fill_provenance(&res);
    snprintf(res.tool_version, sizeof res.tool_version, "%s (%s)", QC_VERSION, QC_GIT_COMMIT);
    snprintf(res.policy, sizeof res.policy, "%s", qc_policy_source(pol));
    if (!o.quiet && !o.list)
        fprintf(stderr, "qwen-conform %s: policy %s\n", res.tool_version, res.policy);
    rc = qc_check_run(&o, pol, &res);
    if (!o.list) {
        if (res.n > 0) qc_report_console_failures(stdout, &res);
        if (res.n > 0 || rc != QC_EXIT_NOTHING) qc_report_console_summary(stdout, &res);
        if (o.json_path && qc_report_json_write(o.json_path, &res, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            rc = QC_EXIT_ERROR;
        }
        if (o.junit_path && qc_report_junit_write(o.junit_path, &res, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            rc = QC_EXIT_ERROR;
        }
    }
    qc_results_free(&res);
    qc_policy_free(pol);
    opts_free(&o);
    return rc;
}

/* ===================================================================================== */
/* command line: qwen-conform diff GOLDEN.h5 ACTUAL.h5                                   */
/* ===================================================================================== */

/* The checks of one case whose actual results come from a file (another runtime's output
 * in the golden layout) instead of one of our backends. */
static void diff_case(ctx *c, const char *label, const qc_golden_case *gc,
                      const qc_golden_case *act) {
    const qc_config *cfg = c->cfg;
    const int L = cfg->n_layers, T = gc->n_tokens, H = cfg->hidden_size;
    /* the actual run must have been fed exactly the golden's inputs */
    int same = act->start_pos == gc->start_pos && act->n_tokens == T &&
               act->n_history == gc->n_history && act->n_decode == gc->n_decode &&
               !memcmp(act->tokens, gc->tokens, (size_t)T * sizeof(int32_t)) &&
               (gc->n_history == 0 ||
                !memcmp(act->history, gc->history, (size_t)gc->n_history * sizeof(int32_t))) &&
               (gc->n_decode == 0 || !memcmp(act->decode_tokens, gc->decode_tokens,
                                             (size_t)gc->n_decode * sizeof(int32_t)));
    if (!same) {
        emit_simple(c, gc->name, label, "file", "inputs", QC_VERDICT_ERROR,
                    "the actual case was not run on the golden's inputs (start_pos, history, "
                    "tokens and teacher-forced decode tokens must be identical)", NULL);
        return;
    }
    char loc[4096] = "";
    cmp_spec base = {.case_name = gc->name, .backend = label, .mode = "file", .vs_golden = 1};
    int hidden = gc->prefill_hidden && act->prefill_hidden;
    unsigned char *seen = NULL;
    if (hidden && (seen = malloc((size_t)(L + 1) * T)) != NULL) {
        memset(seen, 1, (size_t)(L + 1) * T);
        hcap hc = {.hidden = act->prefill_hidden, .seen = seen, .L1 = L + 1, .T = T, .H = H,
                   .lo = gc->start_pos};
        check_hidden(c, &base, gc, &hc, loc, sizeof loc);
        free(seen);
    } else if (gc->prefill_hidden) {
        emit_simple(c, gc->name, label, "file", "prefill.hidden", QC_VERDICT_SKIP,
                    "the actual file has no prefill/hidden", NULL);
    }
    if (!hidden || strstr(loc, "unknown") || strstr(loc, "none ("))
        state_localisation(c, act, gc, label, "file", loc, sizeof loc);
    vs_golden_checks(c, gc, act, label, "file", "", loc[0] ? loc : NULL);
}

static const char diff_usage[] =
    "usage: qwen-conform diff GOLDEN.h5 ACTUAL.h5 [options]\n"
    "  Compares ACTUAL.h5 — any runtime's output written in the golden layout (golden/SCHEMA.md;\n"
    "  e.g. by `qwen-conform record`, or by your own runtime) — with GOLDEN.h5, case by case:\n"
    "  logits, argmax, hidden states (first divergent layer), state buffers, decode logits.\n"
    "  --policy F.json   tolerance policy (default: tolerances.json beside GOLDEN.h5 or its\n"
    "                    parent directory, else built-in)\n"
    "  --label NAME      the name of the runtime in reports (default \"actual\")\n"
    "  --json F  --junit F  --quiet   as for check\n"
    "  Cases are matched by name; a golden case absent from ACTUAL.h5 is reported as skipped.\n"
    "exit: 0 all passed, 1 a conformance failure, 2 usage / I/O / format error (incl. a case\n"
    "      run on other inputs than the golden's), 3 no case in common\n";

int qc_cmd_diff(int argc, char **argv) {
    const char *prog = "qwen-conform diff";
    qc_err err;
    qc_err_clear(&err);
    qc_check_opts o;
    opts_init(&o);
    const char *files[2] = {NULL, NULL}, *label = "actual";
    int nfiles = 0;
    qc_argp a;
    qc_argp_init(&a, prog, argc, argv);
    qc_status st = QC_OK;
    while (!st && qc_argp_next(&a)) {
        if (a.positional) {
            if (nfiles < 2) files[nfiles++] = a.arg;
            else st = qc_argp_unknown(&a, &err);
        } else if (qc_argp_is(&a, "--help") || qc_argp_is(&a, "-h")) {
            fputs(diff_usage, stdout);
            return QC_EXIT_PASS;
        } else if (qc_argp_is(&a, "--policy")) st = qc_argp_value(&a, &o.policy_path, &err);
        else if (qc_argp_is(&a, "--label")) st = qc_argp_value(&a, &label, &err);
        else if (qc_argp_is(&a, "--json")) st = qc_argp_value(&a, &o.json_path, &err);
        else if (qc_argp_is(&a, "--junit")) st = qc_argp_value(&a, &o.junit_path, &err);
        else if (qc_argp_is(&a, "--quiet") || qc_argp_is(&a, "-q")) {
            st = qc_argp_bool(&a, &err);
            o.quiet = 1;
        } else st = qc_argp_unknown(&a, &err);
    }
    if (!st && nfiles != 2)
        st = qc_errf(&err, QC_ERR_ARG, "expected two files: GOLDEN.h5 ACTUAL.h5");
    if (!st && o.json_path) st = qc_cli_check_writable(o.json_path, &err);
    if (!st && o.junit_path) st = qc_cli_check_writable(o.junit_path, &err);
    if (st) {
        int rc = qc_cli_fail(prog, &err);
        fputs(diff_usage, stderr);
        return rc;
    }
    o.golden = files[0];
    qc_policy *pol = NULL;
    if (load_policy(&o, &pol, &err)) return qc_cli_fail(prog, &err);
    qc_golden *g = NULL, *act = NULL;
    if (qc_golden_open(files[0], &g, &err) || qc_golden_open(files[1], &act, &err)) {
        qc_golden_free(g);
        qc_policy_free(pol);
        return qc_cli_fail(prog, &err);
    }
    int rc = QC_EXIT_PASS;
    if (!cfg_same(&g->cfg, &act->cfg)) {
        qc_errf(&err, QC_ERR_FORMAT, "%s: config_json differs from %s's: not the same model",
                files[1], files[0]);
        rc = qc_cli_fail(prog, &err);
        goto out;
    }
    qc_results res;
    qc_results_init(&res);
    qc_results_fill_provenance(&res);
    snprintf(res.tool_version, sizeof res.tool_version, "%s (%s)", QC_VERSION, QC_GIT_COMMIT);
    snprintf(res.policy, sizeof res.policy, "%s", qc_policy_source(pol));
    ctx c;
    memset(&c, 0, sizeof c);
    c.o = &o;
    c.pol = pol;
    c.res = &res;
    c.g = g;
    c.cfg = &g->cfg;
    char stem[128];
    make_stem(files[0], files[0], stem, sizeof stem);
    c.stem = stem;
    double t0 = wall();
    if (!o.quiet) fprintf(stderr, "qwen-conform %s: policy %s\n", res.tool_version, res.policy);
    qc_report_console_header(stdout);
    int common = 0;
    for (int i = 0; i < g->n_cases; i++) {
        const qc_golden_case *gc = &g->cases[i], *ac = NULL;
        for (int j = 0; j < act->n_cases && !ac; j++)
            if (!strcmp(act->cases[j].name, gc->name)) ac = &act->cases[j];
        c.t_row = wall();
        if (!ac) { /* reported (a skipped row per case), so missing coverage stays visible */
            emit_simple(&c, gc->name, label, "file", "present", QC_VERDICT_SKIP,
                        "the case is not in the actual file", NULL);
            continue;
        }
        common++;
        diff_case(&c, label, gc, ac);
    }
    res.seconds = wall() - t0;
    qc_report_console_failures(stdout, &res);
    qc_report_console_summary(stdout, &res);
    if (o.json_path && qc_report_json_write(o.json_path, &res, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        res.n_error++;
    }
    if (o.junit_path && qc_report_junit_write(o.junit_path, &res, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        res.n_error++;
    }
    rc = res.n_error ? QC_EXIT_ERROR : res.n_fail ? QC_EXIT_FAIL
         : common == 0 ? QC_EXIT_NOTHING : QC_EXIT_PASS;
    qc_results_free(&res);
out:
    qc_golden_free(act);
    qc_golden_free(g);
    qc_policy_free(pol);
    return rc;
}

/* ===================================================================================== */
/* command line: qwen-conform calibrate                                                  */
/* ===================================================================================== */

static void cell_json(cJSON *o, const char *cls, const calib_cell *c) {
    cJSON *j = cJSON_AddObjectToObject(o, cls);
    if (!j) return;
    cJSON_AddNumberToObject(j, "max_abs", c->max_abs);
    cJSON_AddNumberToObject(j, "max_rel", c->max_rel);
    if (!strcmp(cls, "logits")) cJSON_AddNumberToObject(j, "kl_max", c->kl_max);
    cJSON_AddNumberToObject(j, "elements", c->n);
    cJSON_AddStringToObject(j, "max_abs_at", c->where);
}

int qc_cmd_calibrate(int argc, char **argv) {
    const char *prog = "qwen-conform calibrate";
    qc_check_opts o;
    opts_init(&o);
    int runs = 1;
    const char *out = NULL, *policy_out = NULL;
    double factor = 4.0;
    int rc = parse_common(argc, argv, prog, &o, &runs, &out, &factor, &policy_out);
    if (rc >= 0) {
        opts_free(&o);
        return rc;
    }
    qc_err err;
    qc_err_clear(&err);
    qc_policy *pol = NULL;
    if (qc_policy_builtin(&pol, &err)) {
        opts_free(&o);
        return qc_cli_fail(prog, &err);
    }
    calib_sink *cs = calloc(1, sizeof *cs);
    if (!cs) {
        qc_policy_free(pol);
        opts_free(&o);
        return QC_EXIT_ERROR;
    }
    o.calibrate = 1;
    o.calib = cs;
    o.quiet = 1;
    qc_results res;
    qc_results_init(&res);
    qc_results_fill_provenance(&res);
    snprintf(res.tool_version, sizeof res.tool_version, "%s (%s)", QC_VERSION, QC_GIT_COMMIT);
    int bad = 0;
    for (int r = 0; r < runs; r++) {
        fprintf(stderr, "%s: run %d/%d over %s\n", prog, r + 1, runs, o.golden);
        rc = qc_check_run(&o, pol, &res);
        for (int i = 0; i < res.n; i++)
            if (res.rows[i].verdict == QC_VERDICT_ERROR) {
                fprintf(stderr, "%s: %s/%s %s %s: %s\n", prog, res.rows[i].stem,
                        res.rows[i].case_name, res.rows[i].backend, res.rows[i].check,
                        res.rows[i].keyline);
                bad = 1;
            }
        if (rc == QC_EXIT_NOTHING || bad) break;
        if (r + 1 < runs) {
            qc_results_free(&res);
            qc_results_init(&res);
        }
    }
    if (rc == QC_EXIT_NOTHING || bad || cs->tensors == 0) {
        fprintf(stderr, "%s: %s\n", prog, bad ? "errors while running the cases" : "nothing measured");
        qc_results_free(&res);
        free(cs);
        qc_policy_free(pol);
        opts_free(&o);
        return bad ? QC_EXIT_ERROR : QC_EXIT_NOTHING;
    }
    /* measurements */
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "schema_version", 1);
    cJSON_AddStringToObject(root, "tool_version", res.tool_version);
    cJSON_AddStringToObject(root, "machine", res.machine);
    cJSON_AddStringToObject(root, "isa", res.isa);
    cJSON_AddStringToObject(root, "date", res.started);
    cJSON_AddStringToObject(root, "golden", o.golden);
    cJSON_AddNumberToObject(root, "runs", runs);
    cJSON_AddNumberToObject(root, "factor", factor);
    cJSON_AddNumberToObject(root, "optimized_threads_main", o.threads);
    cJSON_AddStringToObject(
        root, "procedure",
        "Every golden case, every backend (optimized with the main thread count and with 1 "
        "thread), every prefill mode (static, dynamic, nokv), the chunk-size sweep, run "
        "teacher-forced in float32 and compared with the float64 golden (vs_golden), plus the "
        "float32-vs-float32 invariants static_eq_dynamic, chunked_eq_recurrent, opt_eq_ref "
        "(consistency). max_abs = max |actual - expected|; max_rel = max |actual - expected| / "
        "|expected| over the large elements of each tensor (|expected| >= 1/4 of its max); "
        "per_case_max_abs gives max_abs per case. Defaults come from the cases within 4 x the "
        "median case; a case above that gets its own override whose reason carries its numbers. kl_max = max per-row KL(softmax(expected) || "
        "softmax(actual)) in nats. Suggested tolerance = factor x max (factor^2 for KL), "
        "rounded up to a 1-2-5 step.");
    cJSON *meas = cJSON_AddObjectToObject(root, "measurements");
    static const char *const kinds[2] = {"vs_golden", "consistency"};
    for (int b = 0; b < N_BACKENDS; b++) {
        cJSON *bj = cJSON_AddObjectToObject(meas, backend_names[b]);
        for (int k = 0; k < 2; k++) {
            cJSON *kj = cJSON_AddObjectToObject(bj, kinds[k]);
            for (int cl = 0; cl < QC_TC_COUNT; cl++)
                if (cs->c[b][k][cl].n > 0) cell_json(kj, qc_tclass_str((qc_tclass)cl), &cs->c[b][k][cl]);
        }
    }
    /* suggested policy */
    cJSON *pj = cJSON_CreateObject();
    cJSON_AddNumberToObject(pj, "schema_version", 1);
    char desc[512];
    snprintf(desc, sizeof desc, "Derived by `qwen-conform calibrate --golden %s --runs %d` on %s: "
             "%g x measured max noise, rounded up to 1-2-5 steps (KL: %g x)", o.golden, runs,
             res.started, factor, factor * factor);
    cJSON_AddStringToObject(pj, "description", desc);
    cJSON_AddStringToObject(pj, "measurements", "tolerances-measurements.json");
    cJSON *dj = cJSON_AddObjectToObject(pj, "defaults");
    cJSON *ovj = cJSON_AddArrayToObject(pj, "overrides");
    cJSON *cases_j = cJSON_AddObjectToObject(root, "per_case_max_abs");
    for (int i = 0; i < cs->n_case; i++) {
        cJSON *cj = cJSON_AddObjectToObject(cases_j, cs->cases[i].id);
        for (int cl = 0; cl < QC_TC_COUNT; cl++)
            if (cs->cases[i].max_abs[cl] > 0)
                cJSON_AddNumberToObject(cj, qc_tclass_str((qc_tclass)cl), cs->cases[i].max_abs[cl]);
    }
    double *vals = malloc((size_t)(cs->n_case > 0 ? cs->n_case : 1) * sizeof *vals);
    for (int cl = 0; vals && cl < QC_TC_COUNT; cl++) {
        /* median of the per-case maxima; a case above 4 x the median is an outlier that gets
         * its own override (with the numbers as the reason) instead of widening the default */
        int nv = 0;
        for (int i = 0; i < cs->n_case; i++)
            if (cs->cases[i].max_abs[cl] > 0) vals[nv++] = cs->cases[i].max_abs[cl];
        if (nv == 0) continue;
        for (int i = 1; i < nv; i++)
            for (int j = i; j > 0 && vals[j - 1] > vals[j]; j--) {
                double t = vals[j];
                vals[j] = vals[j - 1];
                vals[j - 1] = t;
            }
        double med = vals[nv / 2], lim = 4.0 * med;
        double ma = 0, mr = 0, kl = 0;
        for (int i = 0; i < cs->n_case; i++) {
            const struct calib_case *cc = &cs->cases[i];
            if (cc->max_abs[cl] <= 0 || cc->max_abs[cl] > lim) continue;
            if (cc->max_abs[cl] > ma) ma = cc->max_abs[cl];
            if (cc->max_rel[cl] > mr) mr = cc->max_rel[cl];
            if (cc->kl_max > kl) kl = cc->kl_max;
        }
        const char *cn = qc_tclass_str((qc_tclass)cl);
        cJSON *j = cJSON_AddObjectToObject(dj, cn);
        double atol = qc_round_125(factor * ma), rtol = qc_round_125(factor * mr);
        cJSON_AddNumberToObject(j, "atol", atol > 0 ? atol : 1e-7);
        cJSON_AddNumberToObject(j, "rtol", rtol > 0 ? rtol : 1e-7);
        if (cl == QC_TC_LOGITS)
            cJSON_AddNumberToObject(j, "max_kl", kl > 0 ? qc_round_125(factor * factor * kl) : 1e-12);
        for (int i = 0; i < cs->n_case; i++) {
            const struct calib_case *cc = &cs->cases[i];
            if (cc->max_abs[cl] <= lim) continue;
            double oa = qc_round_125(factor * cc->max_abs[cl]);
            double orl = qc_round_125(factor * cc->max_rel[cl]);
            int kl_more = cl == QC_TC_LOGITS &&
                          qc_round_125(factor * factor * cc->kl_max) >
                              (kl > 0 ? qc_round_125(factor * factor * kl) : 1e-12);
            if (oa <= atol && orl <= rtol && !kl_more) continue; /* the default covers it */
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "case", cc->id);
            cJSON_AddStringToObject(o, "tensor", cn);
            if (oa > atol) cJSON_AddNumberToObject(o, "atol", oa);
            if (orl > rtol) cJSON_AddNumberToObject(o, "rtol", orl);
            if (kl_more)
                cJSON_AddNumberToObject(o, "max_kl", qc_round_125(factor * factor * cc->kl_max));
            char why[400];
            snprintf(why, sizeof why, "measured float32-vs-float64 %s noise %.3g in this case is "
                     "%.1f x the median case (%.3g); tolerance = %g x its own max",
                     cn, cc->max_abs[cl], cc->max_abs[cl] / med, med, factor);
            cJSON_AddStringToObject(o, "reason", why);
            cJSON_AddItemToArray(ovj, o);
        }
    }
    free(vals);
    cJSON_AddItemReferenceToObject(root, "suggested_policy", pj);
    char *mtext = cJSON_Print(root);
    char *ptext = cJSON_Print(pj);
    rc = QC_EXIT_PASS;
    if (mtext && ptext) {
        printf("%s\n", ptext);
        if (out && qc_cli_write_atomic(out, mtext, strlen(mtext), &err)) rc = qc_cli_fail(prog, &err);
        if (policy_out && qc_cli_write_atomic(policy_out, ptext, strlen(ptext), &err))
            rc = qc_cli_fail(prog, &err);
        /* human summary on stderr */
        fprintf(stderr, "%s: measured noise (max_abs / max_rel) per class:\n", prog);
        for (int b = 0; b < N_BACKENDS; b++)
            for (int k = 0; k < 2; k++)
                for (int cl = 0; cl < QC_TC_COUNT; cl++) {
                    const calib_cell *ce = &cs->c[b][k][cl];
                    if (ce->n == 0) continue;
                    fprintf(stderr, "  %-9s %-11s %-15s max_abs %.3g max_rel %.3g%s (at %s)\n",
                            backend_names[b], kinds[k], qc_tclass_str((qc_tclass)cl), ce->max_abs,
                            ce->max_rel, "", ce->where);
                }
    } else {
        rc = QC_EXIT_ERROR;
    }
    cJSON_free(mtext);
    cJSON_free(ptext);
    cJSON_Delete(root);
    cJSON_Delete(pj);
    qc_results_free(&res);
    free(cs);
    qc_policy_free(pol);
    opts_free(&o);
    return rc;
}
