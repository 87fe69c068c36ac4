/* qc_check_drift.c — long_decode_drift: the error of a long teacher-forced decode as a curve
 * over the steps, and the first step where a tolerance is crossed (issue 17 item 5).
 *
 * For a golden case with at least CK_DRIFT_MIN_STEPS decode steps (fixtures/tiny-long-decode:
 * 2048), one row per (backend, mode): the case is run again (history, prompt, then the golden's
 * decode tokens fed one per step) and after every step the logits row is compared with the
 * golden's (the logits tolerance of the policy, check "long_decode_drift"); after the steps of
 * the golden's decode/trace (golden/SCHEMA.md: DeltaNet conv_state / recurrent_state at a
 * subset of the steps) every state buffer is compared too (its class tolerance; capability
 * state_read). The row FAILs when any of them crosses its tolerance (or is not finite) and
 * names the first step and tensor; the curves go to the JSON report ("drift") and, through
 * `qwen-conform drift-svg`, to an SVG (qc_report_drift_svg.c).
 *
 * A recurrent state kept in bf16 (--inject-fault recurrent-bf16) fails at the first traced
 * step; a float32 one stays within tolerance over the 2048 steps.
 */

#include "qc_check_internal.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc/qc_state.h"
#include "qc_report_buf.h"

/* ===================================================================================== */
/* the golden's state trace (decode/trace)                                               */
/* ===================================================================================== */

typedef struct {
    int M;                               /* traced steps (0: no trace) */
    int *steps;                          /* [M] strictly increasing, in [0, S) */
    float *conv[QC_MAX_LAYERS];          /* linear layers: [M, C, K] */
    float *rec[QC_MAX_LAYERS];           /* linear layers: [M, nv, dk, dv] */
} drift_trace;

static void trace_free(drift_trace *t) {
    free(t->steps);
    for (int l = 0; l < QC_MAX_LAYERS; l++) free(t->conv[l]), free(t->rec[l]);
    memset(t, 0, sizeof *t);
}

/* Read dataset `name` of rank `rank` whose shape must be `want` into dst (memtype). */
static qc_status read_ds(hid_t f, const char *file, const char *name, hid_t memtype, int rank,
                         const hsize_t *want, void *dst, qc_err *err) {
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    if (d < 0) return qc_errf(err, QC_ERR_FORMAT, "%s: %s: missing", file, name);
    hid_t sp = H5Dget_space(d);
    hsize_t dims[8] = {0};
    int r = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    qc_status s = QC_OK;
    if (r != rank || r > 8 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0) {
        s = qc_errf(err, QC_ERR_SHAPE, "%s: %s: rank %d, expected %d", file, name, r, rank);
    } else {
        for (int i = 0; i < rank && !s; i++)
            if (dims[i] != want[i])
                s = qc_errf(err, QC_ERR_SHAPE, "%s: %s: dimension %d is %llu, expected %llu", file,
                            name, i, (unsigned long long)dims[i], (unsigned long long)want[i]);
    }
    if (!s && H5Dread(d, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
        s = qc_errf(err, QC_ERR_FORMAT, "%s: %s: cannot be read", file, name);
    if (sp >= 0) H5Sclose(sp);
    H5Dclose(d);
    return s;
}

static qc_status check_finite(const char *file, const char *name, const float *v, size_t n,
                              qc_err *err) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return qc_errf(err, QC_ERR_FORMAT, "%s: %s: element %zu is not finite", file, name, i);
    return QC_OK;
}

/* The trace of case `cname` (t->M = 0 when the golden has none). Every dataset checked. */
static qc_status trace_read(const char *file, const qc_config *cfg, const char *cname, int S,
                            drift_trace *t, qc_err *err) {
    memset(t, 0, sizeof *t);
    char base[256], name[320];
    snprintf(base, sizeof base, "cases/%s/decode/trace", cname);
    H5E_auto2_t fn;
    void *fd;
    H5Eget_auto2(H5E_DEFAULT, &fn, &fd);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    qc_status s = QC_OK;
    if (f < 0) {
        s = qc_errf(err, QC_ERR_IO, "%s: cannot open", file);
        goto out;
    }
    char dec[160];
    snprintf(dec, sizeof dec, "cases/%s/decode", cname);
    if (H5Lexists(f, dec, H5P_DEFAULT) <= 0 || H5Lexists(f, base, H5P_DEFAULT) <= 0) goto out;
    snprintf(name, sizeof name, "%s/steps", base);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t M = 0;
    int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    if (rank == 1) H5Sget_simple_extent_dims(sp, &M, NULL);
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    if (rank != 1 || M < 1 || M > (hsize_t)S) {
        s = qc_errf(err, QC_ERR_SHAPE, "%s: %s: expected 1 .. %d steps (rank 1)", file, name, S);
        goto out;
    }
    t->M = (int)M;
    t->steps = malloc(M * sizeof *t->steps);
    if (!t->steps) {
        s = qc_errf(err, QC_ERR_OOM, "%s: %s: out of memory", file, name);
        goto out;
    }
    if ((s = read_ds(f, file, name, H5T_NATIVE_INT, 1, &M, t->steps, err))) goto out;
    for (int m = 0; m < t->M; m++)
        if (t->steps[m] < 0 || t->steps[m] >= S || (m > 0 && t->steps[m] <= t->steps[m - 1])) {
            s = qc_errf(err, QC_ERR_FORMAT, "%s: %s: entry %d (%d) is not an increasing step in "
                        "0 .. %d", file, name, m, t->steps[m], S - 1);
            goto out;
        }
    const hsize_t C = (hsize_t)qc_cfg_conv_dim(cfg), K = (hsize_t)cfg->conv_kernel;
    const hsize_t nv = (hsize_t)cfg->lin_n_v_heads, dk = (hsize_t)cfg->lin_k_dim,
                  dv = (hsize_t)cfg->lin_v_dim;
    for (int l = 0; l < cfg->n_layers && !s; l++) {
        if (cfg->layer_types[l] != QC_LAYER_LINEAR) continue;
        hsize_t wc[3] = {M, C, K}, wr[4] = {M, nv, dk, dv};
        t->conv[l] = malloc(M * C * K * sizeof(float));
        t->rec[l] = malloc(M * nv * dk * dv * sizeof(float));
        if (!t->conv[l] || !t->rec[l]) {
            s = qc_errf(err, QC_ERR_OOM, "%s: %s: out of memory", file, base);
            break;
        }
        snprintf(name, sizeof name, "%s/layer_%02d/conv_state", base, l);
        if (!(s = read_ds(f, file, name, H5T_NATIVE_FLOAT, 3, wc, t->conv[l], err)))
            s = check_finite(file, name, t->conv[l], M * C * K, err);
        snprintf(name, sizeof name, "%s/layer_%02d/recurrent_state", base, l);
        if (!s && !(s = read_ds(f, file, name, H5T_NATIVE_FLOAT, 4, wr, t->rec[l], err)))
            s = check_finite(file, name, t->rec[l], M * nv * dk * dv, err);
    }
out:
    if (f >= 0) H5Fclose(f);
    H5Eset_auto2(H5E_DEFAULT, fn, fd);
    if (s) trace_free(t);
    return s;
}

/* ===================================================================================== */
/* curves                                                                                */
/* ===================================================================================== */

typedef struct {
    char name[48];      /* "decode/logits", "layer_00/recurrent_state" */
    qc_tclass cls;
    qc_tol tol;
    int n;              /* points */
    double *max_abs;    /* [n] (INFINITY for a non-finite point) */
    int first_over;     /* index of the first point over tolerance (-1: none) */
} curve;

typedef struct {
    curve c[1 + 2 * QC_MAX_LAYERS];
    int n;
} curves;

static void curves_free(curves *cv) {
    for (int i = 0; i < cv->n; i++) free(cv->c[i].max_abs);
}

/* max |a - g| of n elements into *max_abs; returns 1 when every element is allclose. */
static int block_close(const float *a, const float *g, size_t n, const qc_tol *t, double *max_abs) {
    double mx = 0.0;
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)g[i]);
        if (!isfinite(a[i])) {
            mx = INFINITY;
            ok = 0;
            continue;
        }
        if (d > mx) mx = d;
        if (d > t->atol + t->rtol * fabs((double)g[i])) ok = 0;
    }
    *max_abs = mx;
    return ok;
}

static curve *curve_add(curves *cv, const ck_ctx *c, const char *name, qc_tclass cls, int n,
                        const char *backend, const char *mode, const char *case_id,
                        const char *tensor) {
    curve *k = &cv->c[cv->n];
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%s", name);
    k->cls = cls;
    k->n = n;
    k->first_over = -1;
    k->max_abs = calloc((size_t)n, sizeof *k->max_abs);
    if (!k->max_abs) return NULL;
    qc_policy_lookup(c->pol, cls, backend, mode, "long_decode_drift", case_id, tensor, &k->tol,
                     NULL);
    cv->n++;
    return k;
}

/* ===================================================================================== */
/* the run                                                                               */
/* ===================================================================================== */

/* Run the case teacher-forced on be in mode, filling the logits curve (cv->c[0]) and, when t
 * has a trace and be exposes its state, one curve per linear-layer state buffer. */
static qc_status drift_run(ck_ctx *c, qc_backend *be, const qc_golden_case *gc, qc_mode mode,
                           const drift_trace *t, curves *cv, qc_err *err) {
    const qc_config *cfg = c->cfg;
    const int V = cfg->vocab_size, S = gc->n_decode;
    qc_profile p;
    ck_case_profile(gc, mode, 0, &p);
    qc_state *st = NULL;
    qc_runner *r = NULL;
    float *lg = malloc((size_t)V * sizeof *lg);
    qc_status s = lg ? QC_OK : qc_errf(err, QC_ERR_OOM, "long_decode_drift: out of memory");
    if (!s) s = qc_state_create(cfg, p.max_context_len, &st, err);
    if (!s) s = qc_runner_create(be, &p, st, &r, err);
    if (!s) {
        if (c->o->faults.static_no_advance)
            s = qc_runner_set_option(r, "fault.static_no_advance", "1", err);
        if (!s) s = qc_runner_reset(r, err);
    }
    if (!s && gc->n_history > 0)
        s = qc_runner_prefill(r, gc->history, gc->n_history, 0, NULL, NULL, NULL, err);
    if (!s) s = qc_runner_prefill(r, gc->tokens, gc->n_tokens, gc->start_pos, NULL, NULL, NULL, err);
    const size_t CK = (size_t)qc_cfg_conv_dim(cfg) * cfg->conv_kernel;
    const size_t NR = (size_t)cfg->lin_n_v_heads * cfg->lin_k_dim * cfg->lin_v_dim;
    int m = 0;
    for (int step = 0; step < S && !s; step++) {
        if ((s = qc_runner_decode(r, gc->decode_tokens[step], lg, err))) {
            qc_err_prefix(err, s, "case %s: decode step %d", gc->name, step);
            break;
        }
        curve *k = &cv->c[0];
        if (!block_close(lg, gc->decode_logits + (size_t)step * V, (size_t)V, &k->tol,
                         &k->max_abs[step]) && k->first_over < 0)
            k->first_over = step;
        if (cv->n == 1 || m >= t->M || t->steps[m] != step) continue;
        if ((s = qc_backend_sync_state(be, st, qc_runner_pos(r), err))) break;
        for (int i = 1; i < cv->n; i++) {
            curve *q = &cv->c[i];
            int l = atoi(q->name + 6); /* "layer_NN/..." */
            int is_rec = q->cls == QC_TC_RECURRENT_STATE;
            const float *a = is_rec ? st->recurrent_state[l] : st->conv_state[l];
            const float *g = is_rec ? t->rec[l] + (size_t)m * NR : t->conv[l] + (size_t)m * CK;
            if (!block_close(a, g, is_rec ? NR : CK, &q->tol, &q->max_abs[m]) && q->first_over < 0)
                q->first_over = m;
        }
        m++;
    }
    qc_runner_destroy(r);
    qc_state_destroy(st);
    free(lg);
    return s;
}

/* ===================================================================================== */
/* the row                                                                               */
/* ===================================================================================== */

static void sb_num(qc_sbuf *b, double v) {
    if (isinf(v)) qc_sbuf_printf(b, "\"Infinity\"");
    else if (isnan(v)) qc_sbuf_printf(b, "\"NaN\"");
    else qc_sbuf_printf(b, "%.3g", v);
}

/* b's text, or NULL (freed) after an allocation failure. */
static char *sb_take(qc_sbuf *b) {
    if (b->oom) free(b->s), b->s = NULL;
    return b->s;
}

/* The JSON object of the row ("drift"): malloc'd text or NULL. */
static char *drift_json(const curves *cv, const drift_trace *t, int S, int first_step,
                        const char *first_tensor) {
    qc_sbuf b = {0};
    qc_sbuf_printf(&b, "{\"decode_steps\":%d,\"trace_steps\":[", S);
    for (int m = 0; m < t->M; m++) qc_sbuf_printf(&b, "%s%d", m ? "," : "", t->steps[m]);
    qc_sbuf_printf(&b, "],\"curves\":[");
    for (int i = 0; i < cv->n; i++) {
        const curve *k = &cv->c[i];
        qc_sbuf_printf(&b, "%s{\"tensor\":\"%s\",\"class\":\"%s\",\"atol\":%.6g,\"rtol\":%.6g,"
               "\"steps\":\"%s\",\"first_over_step\":", i ? "," : "", k->name,
               qc_tclass_str(k->cls), k->tol.atol, k->tol.rtol, i ? "trace_steps" : "all");
        int fs = k->first_over < 0 ? -1 : i ? t->steps[k->first_over] : k->first_over;
        if (fs < 0) qc_sbuf_printf(&b, "null");
        else qc_sbuf_printf(&b, "%d", fs);
        qc_sbuf_printf(&b, ",\"max_abs\":[");
        for (int j = 0; j < k->n; j++) {
            if (j) qc_sbuf_printf(&b, ",");
            sb_num(&b, k->max_abs[j]);
        }
        qc_sbuf_printf(&b, "]}");
    }
    qc_sbuf_printf(&b, "],\"first_over\":");
    if (first_step < 0) qc_sbuf_printf(&b, "null}");
    else qc_sbuf_printf(&b, "{\"step\":%d,\"tensor\":\"%s\"}}", first_step, first_tensor);
    return sb_take(&b);
}

/* The detail text: each curve's maximum and first crossing, then the curves at the traced
 * steps (the logits as the max over the steps since the previous traced one). */
static char *drift_detail(const curves *cv, const drift_trace *t, int S) {
    qc_sbuf b = {0};
    qc_sbuf_printf(&b, "Error over %d teacher-forced decode steps (! = over tolerance):", S);
    for (int i = 0; i < cv->n; i++) {
        const curve *k = &cv->c[i];
        double mx = 0;
        int at = 0;
        for (int j = 0; j < k->n; j++)
            if (!(k->max_abs[j] <= mx)) mx = k->max_abs[j], at = j;
        int fs = k->first_over < 0 ? -1 : i ? t->steps[k->first_over] : k->first_over;
        qc_sbuf_printf(&b, "\n  %-26s max |diff| %.3g at step %d (atol %g, rtol %g); ", k->name,
               mx, i ? t->steps[at] : at, k->tol.atol, k->tol.rtol);
        if (fs < 0) qc_sbuf_printf(&b, "never over tolerance");
        else qc_sbuf_printf(&b, "first over tolerance at step %d", fs);
    }
    if (t->M > 0) {
        qc_sbuf_printf(&b, "\n  curve at the traced steps: step: logits (max since the "
               "previous), worst state buffer");
        int prev = 0;
        for (int m = 0; m < t->M; m++) {
            double lmax = 0, smax = 0;
            int bad = 0, sw = 1;
            for (int j = prev; j <= t->steps[m]; j++) {
                if (!(cv->c[0].max_abs[j] <= lmax)) lmax = cv->c[0].max_abs[j];
                if (cv->c[0].first_over >= 0 && j >= cv->c[0].first_over) bad = 1;
            }
            int sbad = 0;
            for (int i = 1; i < cv->n; i++) {
                if (!(cv->c[i].max_abs[m] <= smax)) smax = cv->c[i].max_abs[m], sw = i;
                if (cv->c[i].first_over >= 0 && m >= cv->c[i].first_over) sbad = 1;
            }
            qc_sbuf_printf(&b, "\n    %5d: %.2g%s, %s %.2g%s", t->steps[m], lmax, bad ? "!" : "",
                   cv->n > 1 ? cv->c[sw].name : "-", smax, sbad ? "!" : "");
            prev = t->steps[m] + 1;
        }
    }
    return sb_take(&b);
}

int ck_drift_is_long(const qc_golden_case *gc) { return gc->n_decode >= CK_DRIFT_MIN_STEPS; }

void ck_check_drift(ck_ctx *c, qc_backend *be, const char *bname, const qc_golden_case *gc,
                    qc_mode mode) {
    if (!ck_drift_is_long(gc)) return;
    const char *mname = qc_mode_str(mode);
    const qc_config *cfg = c->cfg;
    const int S = gc->n_decode;
    char case_id[256];
    snprintf(case_id, sizeof case_id, "%s/%s", c->stem, gc->name);
    qc_err err;
    qc_err_clear(&err);
    drift_trace t;
    qc_status s = trace_read(c->g->path, cfg, gc->name, S, &t, &err);
    if (s) {
        ck_emit_simple(c, gc->name, bname, mname, "long_decode_drift", QC_VERDICT_ERROR, err.msg,
                       NULL);
        return;
    }
    curves cv;
    memset(&cv, 0, sizeof cv);
    int ok = curve_add(&cv, c, "decode/logits", QC_TC_LOGITS, S, bname, mname, case_id,
                       "decode/logits") != NULL;
    const int has_state = (be->caps & QC_BE_CAP_STATE_READ) != 0;
    for (int l = 0; ok && t.M > 0 && has_state && l < cfg->n_layers; l++) {
        if (cfg->layer_types[l] != QC_LAYER_LINEAR) continue;
        char nm[48], tn[96];
        snprintf(nm, sizeof nm, "layer_%02d/conv_state", l);
        snprintf(tn, sizeof tn, "decode/state/%s", nm);
        ok &= curve_add(&cv, c, nm, QC_TC_CONV_STATE, t.M, bname, mname, case_id, tn) != NULL;
        snprintf(nm, sizeof nm, "layer_%02d/recurrent_state", l);
        snprintf(tn, sizeof tn, "decode/state/%s", nm);
        ok &= ok && curve_add(&cv, c, nm, QC_TC_RECURRENT_STATE, t.M, bname, mname, case_id, tn) != NULL;
    }
    if (!ok) s = qc_errf(&err, QC_ERR_OOM, "long_decode_drift: out of memory");
    if (!s) s = drift_run(c, be, gc, mode, &t, &cv, &err);
    if (s) {
        ck_emit_simple(c, gc->name, bname, mname, "long_decode_drift", ck_failed_run_verdict(s),
                       err.msg, NULL);
        curves_free(&cv);
        trace_free(&t);
        return;
    }
    /* the first crossing over every curve (a state curve by its traced step) */
    int first = -1, fi = -1;
    for (int i = 0; i < cv.n; i++) {
        int fs = cv.c[i].first_over < 0 ? -1 : i ? t.steps[cv.c[i].first_over] : cv.c[i].first_over;
        if (fs >= 0 && (first < 0 || fs < first)) first = fs, fi = i;
    }
    qc_check_row row;
    ck_row_init(&row, c->stem, gc->name, bname, mname, "long_decode_drift");
    row.verdict = first < 0 ? QC_VERDICT_PASS : QC_VERDICT_FAIL;
    row.tol = cv.c[0].tol;
    double lmax = 0, smax = 0;
    for (int j = 0; j < S; j++)
        if (!(cv.c[0].max_abs[j] <= lmax)) lmax = cv.c[0].max_abs[j];
    for (int i = 1; i < cv.n; i++)
        for (int j = 0; j < cv.c[i].n; j++)
            if (!(cv.c[i].max_abs[j] <= smax)) smax = cv.c[i].max_abs[j];
    char states[160];
    if (cv.n > 1) snprintf(states, sizeof states, "states max %.3g at %d traced steps", smax, t.M);
    else snprintf(states, sizeof states, "states not traced (%s)",
                  t.M == 0 ? "no decode/trace in the golden"
                           : "capability 'state_read' not announced");
    if (first < 0)
        snprintf(row.keyline, sizeof row.keyline, "%d steps: logits max %.3g, %s; never over "
                 "tolerance", S, lmax, states);
    else
        snprintf(row.keyline, sizeof row.keyline, "%d steps: first over tolerance at step %d "
                 "(%s); logits max %.3g, %s", S, first, cv.c[fi].name, lmax, states);
    row.detail = drift_detail(&cv, &t, S);
    row.drift_json = drift_json(&cv, &t, S, first, fi >= 0 ? cv.c[fi].name : "");
    ck_emit(c, &row);
    curves_free(&cv);
    trace_free(&t);
}
