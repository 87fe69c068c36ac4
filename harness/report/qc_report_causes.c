/* qc_report_causes.c — root-cause triage: failing rows grouped into likely causes
 * (qc_report_causes.h has the rules). Deterministic: the rules only read the rows, in order. */

#include "qc_report_causes.h"

#include <stdlib.h>
#include <string.h>

/* ===================================================================================== */
/* rows                                                                                  */
/* ===================================================================================== */

static const char *const MODES[3] = {"static", "dynamic", "nokv"};

static int failing(const qc_check_row *w) {
    return w->verdict == QC_VERDICT_FAIL || w->verdict == QC_VERDICT_ERROR;
}

static int mode_ix(const char *m) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(m, MODES[i])) return i;
    return -1;
}

static int is_prefill(const char *c) { return !strncmp(c, "prefill.", 8); }
static int is_decode(const char *c) { return !strncmp(c, "decode.", 7); }

/* A check of one run against the golden's tensors. */
static int vs_golden(const qc_check_row *w) {
    return mode_ix(w->mode) >= 0 &&
           (is_prefill(w->check) || is_decode(w->check) || !strcmp(w->check, "argmax"));
}

static int is_state(const char *c) {
    const char *d = strchr(c, '.');
    return (is_prefill(c) || is_decode(c)) && d && strcmp(d + 1, "logits") &&
           strcmp(d + 1, "hidden");
}

static int same_run(const qc_check_row *a, const qc_check_row *b) {
    return !strcmp(a->stem, b->stem) && !strcmp(a->case_name, b->case_name) &&
           !strcmp(a->mode, b->mode);
}

/* The row of a logits tensor where the first mismatch is (prefill: prompt row, decode: step);
 * -1 when the row has no located mismatch. */
static int first_row(const qc_check_row *w) {
    const qc_loc *l = &w->m.first_mismatch;
    if (!w->has_metrics || !l->valid || l->desc.cls != QC_TC_LOGITS || l->desc.ndim < 1) return -1;
    int64_t v = l->desc.shape[l->desc.ndim - 1];
    return v > 0 ? (int)(l->idx / (size_t)v) : -1;
}

/* 1: a capability's check ran for this backend, 0: it was skipped as not announced, -1: no
 * such row (the golden has no such tensors). */
static int announced(const qc_results *r, const char *be, const char *check) {
    int got = -1;
    for (int i = 0; i < r->n; i++) {
        const qc_check_row *w = &r->rows[i];
        if (strcmp(w->backend, be) || strcmp(w->check, check)) continue;
        if (w->verdict != QC_VERDICT_SKIP) return 1;
        if (strstr(w->keyline, "not announced")) got = 0;
    }
    return got;
}

/* ===================================================================================== */
/* the work of one backend                                                               */
/* ===================================================================================== */

typedef struct {
    const qc_results *r;
    const char *be;
    int *f;          /* failing rows of be, ascending */
    int nf;
    char *cl;        /* [nf] claimed by a cause */
    char *sel;       /* [nf] the rows the rule at work selects */
    int hidden, state; /* announced(): prefill.hidden, prefill.k_cache / conv_state */
    qc_causes *out;
    int oom;
} work;

#define ROW(w, k) (&(w)->r->rows[(w)->f[k]])

/* What the selected rows say, for the sentence. */
typedef struct {
    qc_localisation loc;  /* the most frequent first divergence (kind NONE: none) */
    int st_layer;         /* the lowest layer whose state fails (-1: none) */
    char st_cls[48];      /* its state tensors ("recurrent_state", "conv_state/recurrent_state") */
    int step;             /* first failing decode step of a localisation (-1: none) */
    int dstep;            /* first failing decode.logits row (-1: none) */
    int pos;              /* first failing prompt row (-1: none) */
    int modes[3];         /* rows per mode */
    int has_prefill, has_decode;
    const char *mixer;    /* "mixer" when the layer's own state diverges, else NULL */
    const char *hid_miss; /* "first missing position N..." of an incomplete prefill.hidden */
    int hid_fail;         /* a prefill.hidden row fails */
} evid;

static int same_loc(const qc_localisation *a, const qc_localisation *b) {
    return a->kind == b->kind && a->layer == b->layer && a->layer_lo == b->layer_lo &&
           !strcmp(a->block, b->block) && a->has_expert == b->has_expert &&
           (!a->has_expert || (a->expert_expected == b->expert_expected &&
                               a->expert_got == b->expert_got));
}

static void note_state(evid *e, const qc_check_row *w) {
    const qc_loc *l = &w->m.first_mismatch;
    if (!is_state(w->check) || !w->has_metrics || !l->valid || l->desc.layer < 0) return;
    const char *cls = qc_tclass_str(l->desc.cls);
    if (e->st_layer < 0 || l->desc.layer < e->st_layer) {
        e->st_layer = l->desc.layer;
        snprintf(e->st_cls, sizeof e->st_cls, "%s", cls);
    } else if (l->desc.layer == e->st_layer && !strstr(e->st_cls, cls)) {
        size_t n = strlen(e->st_cls);
        snprintf(e->st_cls + n, sizeof e->st_cls - n, "/%s", cls);
    }
}

static void gather(const work *w, evid *e) {
    memset(e, 0, sizeof *e);
    e->loc.kind = QC_LOC_NONE;
    e->st_layer = e->step = e->dstep = e->pos = -1;
    qc_localisation keys[16];
    int cnt[16], nk = 0, best = -1;
    for (int k = 0; k < w->nf; k++) {
        if (!w->sel[k] || w->cl[k]) continue;
        const qc_check_row *x = ROW(w, k);
        int m = mode_ix(x->mode);
        if (m >= 0) e->modes[m]++;
        e->has_prefill |= is_prefill(x->check);
        e->has_decode |= is_decode(x->check);
        note_state(e, x);
        e->hid_fail |= !strcmp(x->check, "prefill.hidden");
        if (!e->hid_miss && !strcmp(x->check, "prefill.hidden"))
            e->hid_miss = strstr(x->keyline, "first missing position");
        if (x->loc.kind != QC_LOC_NONE && x->loc.step >= 0 &&
            (e->step < 0 || x->loc.step < e->step))
            e->step = x->loc.step;
        int fr = first_row(x);
        if (fr >= 0 && !strcmp(x->check, "prefill.logits") && (e->pos < 0 || fr < e->pos))
            e->pos = fr;
        if (fr >= 0 && !strcmp(x->check, "decode.logits") && (e->dstep < 0 || fr < e->dstep))
            e->dstep = fr;
        if (x->loc.kind == QC_LOC_NONE) continue;
        int j = 0;
        while (j < nk && !same_loc(&keys[j], &x->loc)) j++;
        if (j == nk && nk < 16) keys[nk] = x->loc, cnt[nk++] = 0;
        if (j < nk && ++cnt[j] > (best < 0 ? 0 : cnt[best])) best = j;
    }
    if (best >= 0) e->loc = keys[best];
    if (e->loc.kind == QC_LOC_LAYER && (!e->loc.block[0] || !strcmp(e->loc.block, "mixer")) &&
        e->st_layer == e->loc.layer)
        e->mixer = "mixer";
}

/* Where the evidence puts the divergence, as far as it supports it. */
static void loc_phrase(const work *w, const evid *e, char *b, size_t n) {
    const qc_localisation *L = &e->loc;
    char at[96] = "";
    if (!strcmp(L->source, "decode_hidden") && L->step >= 0)
        snprintf(at, sizeof at, " at decode step %d (vs the reference backend on the same inputs)",
                 L->step);
    switch (L->kind) {
    case QC_LOC_LAYER:
        if (!strcmp(L->block, "moe") && L->has_expert && L->expert_got >= 0)
            snprintf(b, n, "layer %d%s, MoE block: the router chose expert %d instead of %d",
                     L->layer, at, L->expert_got, L->expert_expected);
        else if (!strcmp(L->block, "moe") && L->has_expert)
            snprintf(b, n, "layer %d%s, MoE block: the router chose the same experts, expert %d "
                     "with another weight", L->layer, at, L->expert_expected);
        else if (!strcmp(L->block, "moe"))
            snprintf(b, n, "layer %d%s, MoE block (moe_in, the mixer output, agrees)", L->layer,
                     at);
        else if (!strcmp(L->block, "mlp"))
            snprintf(b, n, "layer %d%s, MLP (mlp_in, the mixer output, agrees)", L->layer, at);
        else if (!strcmp(L->block, "mixer") && e->mixer)
            snprintf(b, n, "layer %d%s, mixer (its output, moe_in / mlp_in, already differs; its "
                     "%s diverges while its input (hidden[%d]) agrees)", L->layer, at, e->st_cls,
                     L->layer);
        else if (!strcmp(L->block, "mixer"))
            snprintf(b, n, "layer %d%s, mixer (its output, moe_in / mlp_in, already differs)",
                     L->layer, at);
        else if (e->mixer)
            snprintf(b, n, "layer %d%s, mixer (its input norm or the mixer up to the state "
                     "update): its %s diverges while its input (hidden[%d]) agrees", L->layer, at,
                     e->st_cls, L->layer);
        else
            snprintf(b, n, "layer %d%s (mixer or MLP: the hidden states cannot tell; a "
                     "mixer-output trace, mlp_in, would)", L->layer, at);
        break;
    case QC_LOC_EMBEDDINGS:
        snprintf(b, n, "the embeddings%s (hidden[0] already differs)", at);
        break;
    case QC_LOC_LAST_OR_NORM:
        snprintf(b, n, "layer %d or the final norm%s (the last hidden state is after the norm)",
                 L->layer, at);
        break;
    case QC_LOC_AFTER_NORM:
        snprintf(b, n, "after the final norm%s: lm_head / the logits (every hidden state agrees)",
                 at);
        break;
    case QC_LOC_AT_OR_BEFORE:
        if (w->hidden == 1 && !e->hid_fail && e->st_layer >= 0)
            snprintf(b, n, "every hidden state agrees, the state buffers do not: the first to "
                     "diverge is layer %d %s (a state the layer's output does not show yet)",
                     e->st_layer, e->st_cls);
        else if (L->layer_lo >= 0)
            snprintf(b, n, "no single layer: at or before layer %d, after layer %d whose state "
                     "passes (states cannot pin it further%s)", L->layer, L->layer_lo,
                     w->hidden == 0 ? "; announce `hidden` to name the layer" : "");
        else
            snprintf(b, n, "no single layer: at or before layer %d, the embeddings included "
                     "(states cannot pin it further%s)", L->layer,
                     w->hidden == 0 ? "; announce `hidden` to name the layer" : "");
        break;
    default:
        snprintf(b, n, "no layer named%s%s", w->hidden == 0 ? ": announce `hidden` to localise"
                 : w->hidden < 0 ? " (the golden holds no hidden states)" : "",
                 w->hidden == 0 && w->state == 0 ? " (`state_read` gives an interval)" : "");
    }
    size_t k = strlen(b);
    if (e->st_layer >= 0 && !e->mixer && L->kind != QC_LOC_AT_OR_BEFORE &&
        (L->kind == QC_LOC_NONE || L->kind == QC_LOC_EMBEDDINGS || e->st_layer < L->layer))
        snprintf(b + k, n - k, "; the first state to diverge: layer %d %s", e->st_layer, e->st_cls);
    k = strlen(b);
    if (e->hid_miss) /* "first missing position 1" (up to the next ';') */
        snprintf(b + k, n - k, "; the hidden states are incomplete: %.*s",
                 (int)strcspn(e->hid_miss, ";"), e->hid_miss);
}

/* "every mode (static, dynamic, nokv)" / "static, nokv" */
static void modes_phrase(const work *w, const evid *e, char *b, size_t n) {
    int ran[3] = {0}, all = 1, k = 0;
    for (int i = 0; i < w->r->n; i++) {
        const qc_check_row *x = &w->r->rows[i];
        if (!strcmp(x->backend, w->be) && vs_golden(x) && x->verdict != QC_VERDICT_SKIP)
            ran[mode_ix(x->mode)] = 1;
    }
    b[0] = 0;
    size_t o = 0;
    for (int m = 0; m < 3; m++) {
        if (ran[m] && !e->modes[m]) all = 0;
        if (!e->modes[m]) continue;
        o += (size_t)snprintf(b + o, o < n ? n - o : 0, "%s%s", k++ ? ", " : "", MODES[m]);
    }
    if (all && k > 1 && o < n) {
        char t[64];
        snprintf(t, sizeof t, "%s", b);
        snprintf(b, n, "every mode (%s)", t);
    }
}

/* The selected, unclaimed rows become one cause. */
static qc_cause *take(work *w, const char *rule, const char *text, const evid *e) {
    int n = 0;
    for (int k = 0; k < w->nf; k++) n += w->sel[k] && !w->cl[k];
    if (!n) return NULL;
    qc_cause *nc = realloc(w->out->c, (size_t)(w->out->n + 1) * sizeof *nc);
    int *rows = malloc((size_t)n * sizeof *rows);
    if (nc) w->out->c = nc;
    if (!nc || !rows) {
        free(rows);
        w->oom = 1;
        return NULL;
    }
    qc_cause *c = &w->out->c[w->out->n++];
    memset(c, 0, sizeof *c);
    snprintf(c->rule, sizeof c->rule, "%s", rule);
    snprintf(c->text, sizeof c->text, "%s", text);
    snprintf(c->backend, sizeof c->backend, "%s", w->be);
    c->rows = rows;
    for (int k = 0; k < w->nf; k++)
        if (w->sel[k] && !w->cl[k]) rows[c->n_rows++] = w->f[k], w->cl[k] = 1;
    c->kind = QC_LOC_NONE;
    c->layer = c->layer_lo = c->step = -1;
    if (e) c->step = e->step;
    if (e && e->loc.kind != QC_LOC_NONE) {
        c->kind = e->loc.kind;
        c->layer = e->loc.layer;
        c->layer_lo = e->loc.kind == QC_LOC_AT_OR_BEFORE ? e->loc.layer_lo : -1;
        snprintf(c->block, sizeof c->block, "%s", e->loc.block[0] ? e->loc.block
                                                   : e->mixer ? e->mixer : "");
    }
    return c;
}

/* ===================================================================================== */
/* rule 1: state not reset between sequences                                             */
/* ===================================================================================== */

typedef struct {
    int first, last;      /* row indices */
    int failed;
} run;

/* The runs against the golden of one golden file (stem) in row order; returns the count. */
static int runs_of(const work *w, const char *stem, run *rs, int cap) {
    int n = 0;
    for (int i = 0; i < w->r->n; i++) {
        const qc_check_row *x = &w->r->rows[i];
        if (strcmp(x->backend, w->be) || strcmp(x->stem, stem) || !vs_golden(x)) continue;
        int j = n - 1;
        if (j < 0 || !same_run(&w->r->rows[rs[j].first], x))
            for (j = 0; j < n && !same_run(&w->r->rows[rs[j].first], x); j++) {}
        if (j == n) {
            if (n == cap) break;
            rs[n++] = (run){i, i, 0};
        }
        rs[j].last = i;
        rs[j].failed |= failing(x);
    }
    return n;
}

/* Select the failing rows of stem from row index `from` on when the order of the runs shows a
 * state carried over; 1 strong (garbage_reset), 2 likely (the order alone), 0 no. */
static int reset_stem(work *w, const char *stem, run *rs, int cap, int *n_after, int *n_fail) {
    int nr = runs_of(w, stem, rs, cap), g = -1, g_ran = 0;
    for (int i = 0; i < w->r->n && g < 0; i++) {
        const qc_check_row *x = &w->r->rows[i];
        if (strcmp(x->backend, w->be) || strcmp(x->stem, stem) || strcmp(x->check, "garbage_reset"))
            continue;
        g_ran |= x->verdict != QC_VERDICT_SKIP;
        if (failing(x)) g = i;
    }
    if (nr < 2 || rs[0].failed) return 0;
    int from = -1, kind = 0, after = 0, nfail = 0;
    if (g >= 0) {
        int onset = -1;   /* the first failing run: after the NaN fill, every run before passes */
        for (int j = 0; j < nr && onset < 0; j++)
            if (rs[j].failed) onset = j;
        if (onset < 0 || rs[onset].first < g) return 0;
        for (int j = onset; j < nr; j++) after++, nfail += rs[j].failed;
        if (2 * nfail < after) return 0;
        from = g, kind = 1;
    } else if (!g_ran && nr >= 3) {
        int cases2 = 0, same_mode = 0;
        const qc_check_row *r0 = &w->r->rows[rs[0].first];
        for (int j = 1; j < nr; j++) {
            const qc_check_row *x = &w->r->rows[rs[j].first];
            after++, nfail += rs[j].failed;
            cases2 |= strcmp(x->case_name, r0->case_name) != 0;
            same_mode |= rs[j].failed && !strcmp(x->mode, r0->mode);
        }
        if (nfail != after || !cases2 || !same_mode) return 0;
        from = rs[1].first, kind = 2;
    } else {
        return 0;
    }
    for (int k = 0; k < w->nf; k++)
        if (w->f[k] >= from && !strcmp(ROW(w, k)->stem, stem)) w->sel[k] = 1;
    *n_after += after, *n_fail += nfail;
    return kind;
}

static void rule_reset(work *w) {
    int cap = 4096, kind = 0, after = 0, nfail = 0;
    run *rs = malloc((size_t)cap * sizeof *rs);
    if (!rs) { w->oom = 1; return; }
    memset(w->sel, 0, (size_t)w->nf);
    for (int k = 0; k < w->nf; k++) {
        const char *stem = ROW(w, k)->stem;
        if (k && !strcmp(ROW(w, k - 1)->stem, stem)) continue; /* a file's rows are adjacent */
        int seen = 0;
        for (int j = 0; j < k && !seen; j++) seen = !strcmp(ROW(w, j)->stem, stem);
        if (seen) continue;
        int kd = reset_stem(w, stem, rs, cap, &after, &nfail);
        if (kd && (!kind || kd < kind)) kind = kd;
    }
    free(rs);
    char t[700], how[48];
    if (nfail == after) snprintf(how, sizeof how, "all %d", after);
    else snprintf(how, sizeof how, "%d of the %d", nfail, after);
    if (kind == 1)
        snprintf(t, sizeof t, "state not reset between sequences: garbage_reset fails (a "
                 "NaN-filled state survives reset()) and %s sequences after that fill diverge "
                 "while the first sequence of the process passes: reset() leaves the previous "
                 "sequence's state in place (no layer named: the carried-over state reaches every "
                 "layer)", how);
    else if (kind == 2)
        snprintf(t, sizeof t, "likely state not reset between sequences: the first sequence of "
                 "the process passes and all %d after it diverge, over several cases (announce "
                 "state_fill: garbage_reset would confirm; no layer named)", after);
    if (kind) take(w, "state_not_reset", t, NULL);
}

/* ===================================================================================== */
/* rule 2: the modes and decode                                                          */
/* ===================================================================================== */

/* Select the unclaimed rows against the golden that match: mode mask, prefill / decode. */
static int select_golden(work *w, int mode_mask, int prefill, int decode, int argmax) {
    int n = 0;
    for (int k = 0; k < w->nf; k++) {
        const qc_check_row *x = ROW(w, k);
        int m = mode_ix(x->mode);
        w->sel[k] = !w->cl[k] && vs_golden(x) && (mode_mask >> m & 1) &&
                    ((prefill && is_prefill(x->check)) || (decode && is_decode(x->check)) ||
                     (argmax && !strcmp(x->check, "argmax")));
        n += w->sel[k];
    }
    return n;
}

/* Also select the unclaimed cross-checks named (comma list) of the modes in mask. */
static void select_cross(work *w, const char *names, int mode_mask) {
    for (int k = 0; k < w->nf; k++) {
        const qc_check_row *x = ROW(w, k);
        const char *p = strstr(names, x->check);
        size_t L = strlen(x->check);
        int m = mode_ix(x->mode);
        if (!w->cl[k] && p && (p[L] == ',' || !p[L]) && (p == names || p[-1] == ',') && m >= 0 &&
            (mode_mask >> m & 1))
            w->sel[k] = 1;
    }
}

/* Also select the chunk_sweep rows of a selected case when no chunk size of it passes: the answer
 * then does not depend on the chunk size, the sweep repeats the selected rows' failure. */
static void select_uniform_sweep(work *w) {
    for (int k = 0; k < w->nf; k++) {
        const qc_check_row *x = ROW(w, k);
        if (w->cl[k] || w->sel[k] || strncmp(x->check, "chunk_sweep", 11)) continue;
        int pass = 0;
        for (int i = 0; i < w->r->n && !pass; i++) {
            const qc_check_row *y = &w->r->rows[i];
            pass = y->verdict == QC_VERDICT_PASS && !strcmp(y->backend, x->backend) &&
                   !strcmp(y->stem, x->stem) && !strcmp(y->case_name, x->case_name) &&
                   !strncmp(y->check, "chunk_sweep", 11);
        }
        for (int j = 0; j < w->nf && !pass && !w->sel[k]; j++) {
            const qc_check_row *y = ROW(w, j);
            w->sel[k] = w->sel[j] && vs_golden(y) && !strcmp(y->stem, x->stem) &&
                        !strcmp(y->case_name, x->case_name);
        }
    }
}

static void rule_modes(work *w) {
    int ran[3] = {0}, pf[3] = {0}, df[3] = {0};
    for (int i = 0; i < w->r->n; i++) {
        const qc_check_row *x = &w->r->rows[i];
        if (strcmp(x->backend, w->be) || !vs_golden(x) || x->verdict == QC_VERDICT_SKIP) continue;
        ran[mode_ix(x->mode)] = 1;
    }
    for (int k = 0; k < w->nf; k++) {
        const qc_check_row *x = ROW(w, k);
        if (w->cl[k] || !vs_golden(x)) continue;
        pf[mode_ix(x->mode)] |= is_prefill(x->check);
        df[mode_ix(x->mode)] |= is_decode(x->check);
    }
    int npf = 0, ndf = 0, only = -1, clean_other = 0;
    for (int m = 0; m < 3; m++) {
        npf += pf[m], ndf += df[m];
        if (pf[m] || df[m]) only = only == -1 ? m : -2;
    }
    for (int m = 0; m < 3; m++) clean_other |= ran[m] && m != only && !pf[m] && !df[m];
    evid e;
    char lp[400], md[96], t[700], st[40] = "";
    if (!npf && ndf) {                                   /* decode only */
        select_golden(w, 7, 0, 1, 1);
        select_uniform_sweep(w);
        gather(w, &e);
        if (e.step < 0) e.step = e.dstep;
        loc_phrase(w, &e, lp, sizeof lp);
        modes_phrase(w, &e, md, sizeof md);
        if (e.step >= 0) snprintf(st, sizeof st, ", from step %d", e.step);
        snprintf(t, sizeof t, "decode only%s (the prefill agrees with the golden in every mode "
                 "that ran; decode diverges in %s): %s", st, md, lp);
        take(w, "decode_only", t, &e);
    } else if (npf == 1 && pf[0] && (df[1] || df[2]) && !pf[1] && !pf[2]) {
        for (int k = 0; k < w->nf; k++) {               /* one-token calls */
            const qc_check_row *x = ROW(w, k);
            w->sel[k] = !w->cl[k] && vs_golden(x) &&
                        (is_decode(x->check) || mode_ix(x->mode) == 0 ||
                         !strcmp(x->check, "argmax"));
        }
        select_cross(w, "static_eq_dynamic", 7);
        select_uniform_sweep(w);
        gather(w, &e);
        if (e.step < 0) e.step = e.dstep;
        loc_phrase(w, &e, lp, sizeof lp);
        if (e.step >= 0) snprintf(st, sizeof st, " from step %d", e.step);
        snprintf(t, sizeof t, "one-token calls only: static prefill (one token per call) and "
                 "decode%s diverge while the multi-token prefill agrees (%s): %s", st,
                 ran[2] ? "dynamic, nokv" : "dynamic", lp);
        take(w, "one_token", t, &e);
    } else if (only >= 0 && clean_other) {              /* one mode alone */
        static const char *const what[3] = {
            "static prefill only (one token per call)", "dynamic prefill only (multi-token "
            "chunks)", "nokv only (every step recomputed without a cache)"};
        select_golden(w, 1 << only, 1, 1, 1);
        select_cross(w, only == 0 ? "static_eq_dynamic"
                        : only == 1 ? "static_eq_dynamic,chunked_eq_recurrent" : "", 7);
        if (only == 1)
            for (int k = 0; k < w->nf; k++)
                if (!w->cl[k] && !strncmp(ROW(w, k)->check, "chunk_sweep", 11)) w->sel[k] = 1;
        gather(w, &e);
        loc_phrase(w, &e, lp, sizeof lp);
        char pos[80] = "";
        if (e.pos > 0) snprintf(pos, sizeof pos, ", from prompt position %d on (the positions "
                                "before agree)", e.pos);
        snprintf(t, sizeof t, "%s: the other modes agree with the golden%s: %s", what[only], pos,
                 lp);
        take(w, "mode_only", t, &e);
    }
}

/* ===================================================================================== */
/* rules 3 and 4: by first divergence, then by check family                              */
/* ===================================================================================== */

/* The localisation of row k, else the first one of its run's failing rows. */
static const qc_localisation *run_loc(const work *w, int k) {
    const qc_check_row *x = ROW(w, k);
    if (x->loc.kind != QC_LOC_NONE) return &x->loc;
    for (int d = -1; d <= 1; d += 2)
        for (int j = k + d; j >= 0 && j < w->nf && same_run(ROW(w, j), x); j += d)
            if (vs_golden(ROW(w, j)) && ROW(w, j)->loc.kind != QC_LOC_NONE) return &ROW(w, j)->loc;
    return &x->loc;
}

static int loc_layer(const qc_check_row *x) {
    return x->loc.kind == QC_LOC_NONE ? -1 : x->loc.layer;
}

/* Also select what the selected runs' divergence explains: the router rows of the same run
 * at or after its layer, and the other comparisons with the golden of the same case (the
 * chunk-size sweep, the long decode). */
static void select_downstream(work *w, const qc_localisation *key) {
    for (int k = 0; k < w->nf; k++) {
        const qc_check_row *x = ROW(w, k);
        int router = !strcmp(x->check, "router_topk");
        int golden = router ? loc_layer(x) >= key->layer
                            : !strncmp(x->check, "chunk_sweep", 11) ||
                              !strcmp(x->check, "long_decode_drift");
        if (w->cl[k] || w->sel[k] || !golden) continue;
        for (int j = 0; j < w->nf && !w->sel[k]; j++) {
            const qc_check_row *y = ROW(w, j);
            w->sel[k] = w->sel[j] && vs_golden(y) && !strcmp(y->stem, x->stem) &&
                        !strcmp(y->case_name, x->case_name) &&
                        (!router || !strcmp(y->mode, x->mode));
        }
    }
}

static void rule_layers(work *w) {
    for (int k0 = 0; k0 < w->nf && !w->oom; k0++) {
        if (w->cl[k0] || !vs_golden(ROW(w, k0))) continue;
        const qc_localisation *key = run_loc(w, k0);
        for (int k = 0; k < w->nf; k++)
            w->sel[k] = !w->cl[k] && vs_golden(ROW(w, k)) && same_loc(run_loc(w, k), key);
        select_downstream(w, key);
        evid e;
        char lp[400], md[96], t[700];
        gather(w, &e);
        if (e.loc.kind == QC_LOC_NONE && key->kind != QC_LOC_NONE) e.loc = *key;
        loc_phrase(w, &e, lp, sizeof lp);
        modes_phrase(w, &e, md, sizeof md);
        const char *what = e.has_prefill && e.has_decode ? "prefill and decode"
                           : e.has_prefill ? "the prefill" : e.has_decode ? "decode"
                           : "the argmax";
        char pos[80] = "";
        if (e.pos > 0) snprintf(pos, sizeof pos, " from prompt position %d on", e.pos);
        snprintf(t, sizeof t, "%s diverge%s from the golden in %s%s: %s", what,
                 e.has_prefill || e.has_decode ? "" : "s", md, pos, lp);
        take(w, "layer", t, &e);
    }
}

static const struct {
    const char *family, *why;
} WHY[] = {
    {"garbage_reset", "reset() does not clear a NaN-filled state (a buffer it leaves "
                      "uninitialised is read)"},
    {"lifecycle", "a snapshot, restore or rollback does not carry the whole state"},
    {"sequences", "sequences leak into each other or depend on the batch"},
    {"unused_slots", "state slots past the used positions are not zero (the runtime writes "
                     "past the end)"},
    {"static_eq_dynamic", "static and dynamic prefill disagree with each other"},
    {"chunked_eq_recurrent", "the chunked and the recurrent DeltaNet kernels disagree"},
    {"chunk_sweep", "the answer depends on the prefill chunk size"},
    {"threads_bitwise", "the results depend on the thread count"},
    {"opt_eq_ref", "the optimized backend disagrees with the reference backend"},
    {"long_decode_drift", "the error grows over a long decode"},
    {"hazard_finite", "non-finite values on the hazard inputs"},
    {"router_topk", "the MoE router chooses other experts than the golden"},
    {"model_hash", "the golden was made from another model"},
    {"topk", "the top-k log-probabilities disagree with the golden"},
};

/* "chunk_sweep.c63" -> "chunk_sweep"; the state lifecycle and sequence checks -> one family. */
static void family(const char *check, char *b, size_t n) {
    static const char *const lifecycle[] = {"snapshot_restore", "snapshot_copy",
        "restore_after_garbage", "snapshot_chunk_boundary", "prefix_reuse", "prefix_cache",
        "rollback", "rollback_trim"};
    static const char *const sequences[] = {"multi_sequence", "batch_invariance",
                                            "concurrent_isolation"};
    for (size_t i = 0; i < sizeof lifecycle / sizeof *lifecycle; i++)
        if (!strcmp(check, lifecycle[i])) { snprintf(b, n, "lifecycle"); return; }
    for (size_t i = 0; i < sizeof sequences / sizeof *sequences; i++)
        if (!strcmp(check, sequences[i])) { snprintf(b, n, "sequences"); return; }
    snprintf(b, n, "%s", check);
    char *d = strchr(b, '.');
    if (d && !is_prefill(check) && !is_decode(check)) *d = 0;
}

/* The distinct checks of the selected rows, "a, b, c" (at most 5, then "..."); their count
 * (at most 6). */
static int check_list(const work *w, char *b, size_t n) {
    const char *d[6];
    int nd = 0;
    size_t o = 0;
    b[0] = 0;
    for (int k = 0; k < w->nf && nd < 6; k++) {
        if (!w->sel[k] || w->cl[k]) continue;
        const char *c = ROW(w, k)->check;
        int j = 0;
        while (j < nd && strcmp(d[j], c)) j++;
        if (j < nd) continue;
        d[nd] = c;
        if (o < n) o += (size_t)snprintf(b + o, n - o, "%s%s", nd ? ", " : "", nd < 5 ? c : "...");
        nd++;
    }
    return nd;
}

static void rule_checks(work *w) {
    for (int k0 = 0; k0 < w->nf && !w->oom; k0++) {
        if (w->cl[k0]) continue;
        const qc_check_row *x0 = ROW(w, k0);
        char fam[64], f[64], list[200];
        family(x0->check, fam, sizeof fam);
        int err = x0->verdict == QC_VERDICT_ERROR, rows = 0;
        for (int k = 0; k < w->nf; k++) {
            const qc_check_row *x = ROW(w, k);
            family(x->check, f, sizeof f);
            w->sel[k] = !w->cl[k] && !strcmp(f, fam) && (x->verdict == QC_VERDICT_ERROR) == err &&
                        loc_layer(x) == loc_layer(x0);
            rows += w->sel[k];
        }
        evid e;
        char lp[400] = "", t[700];
        gather(w, &e);
        if (e.loc.kind != QC_LOC_NONE) {
            lp[0] = ';', lp[1] = ' ';
            loc_phrase(w, &e, lp + 2, sizeof lp - 2);
        }
        /* the chunked and recurrent runs differ only in the DeltaNet kernel: a first divergent
         * layer is that layer's kernel, not "mixer or MLP" */
        if (!strcmp(fam, "chunked_eq_recurrent") && e.loc.kind == QC_LOC_LAYER && !e.loc.block[0])
            snprintf(lp, sizeof lp, "; layer %d, its DeltaNet kernel (the two runs differ only in "
                     "the kernel; its input, hidden[%d], agrees)", e.loc.layer, e.loc.layer);
        int nd = check_list(w, list, sizeof list);
        const char *why = NULL;
        for (size_t i = 0; i < sizeof WHY / sizeof *WHY && !err; i++)
            if (!strcmp(WHY[i].family, fam)) why = WHY[i].why;
        if (err)
            snprintf(t, sizeof t, "the runtime could not run %s (%d row%s): %.200s", list, rows,
                     rows == 1 ? "" : "s", x0->keyline);
        else if (why)
            snprintf(t, sizeof t, "%s: %s fail%s%s", why, list, nd == 1 ? "s" : "", lp);
        else
            snprintf(t, sizeof t, "%s fail%s (first: %.160s)%s", list, nd == 1 ? "s" : "",
                     x0->keyline, lp);
        take(w, err ? "error" : "check", t, &e);
    }
}

/* ===================================================================================== */
/* all backends                                                                          */
/* ===================================================================================== */

/* The causes of one backend, from w->out->n on, biggest first (stable). */
static void one_backend(work *w) {
    int base = w->out->n;
    memset(w->cl, 0, (size_t)w->nf);
    memset(w->sel, 0, (size_t)w->nf);
    w->hidden = announced(w->r, w->be, "prefill.hidden");
    w->state = announced(w->r, w->be, "prefill.k_cache");
    if (w->state < 0) w->state = announced(w->r, w->be, "prefill.conv_state");
    rule_reset(w);
    if (!w->oom) rule_modes(w);
    if (!w->oom) rule_layers(w);
    if (!w->oom) rule_checks(w);
    qc_cause *c = w->out->c;
    for (int a = base + 1; a < w->out->n; a++)
        for (int b = a; b > base && c[b].n_rows > c[b - 1].n_rows; b--) {
            qc_cause t = c[b];
            c[b] = c[b - 1];
            c[b - 1] = t;
        }
}

int qc_causes_compute(const qc_results *r, qc_causes *out) {
    memset(out, 0, sizeof *out);
    work w = {.r = r, .out = out};
    w.f = malloc((size_t)(r->n ? r->n : 1) * sizeof *w.f);
    w.cl = malloc((size_t)(r->n ? r->n : 1));
    w.sel = malloc((size_t)(r->n ? r->n : 1));
    if (!w.f || !w.cl || !w.sel) w.oom = 1;
    const char **done = malloc((size_t)(r->n ? r->n : 1) * sizeof *done); /* backends seen */
    int nd = 0;
    if (!done) w.oom = 1;
    for (int i = 0; i < r->n && !w.oom; i++) {
        const char *be = r->rows[i].backend;
        if (!failing(&r->rows[i]) || !be[0] || !strcmp(be, "-")) continue;
        int j = 0;
        while (j < nd && strcmp(done[j], be)) j++;
        if (j < nd) continue;
        done[nd++] = be;
        w.be = be;
        w.nf = 0;
        for (int j = i; j < r->n; j++)
            if (failing(&r->rows[j]) && !strcmp(r->rows[j].backend, be)) w.f[w.nf++] = j;
        one_backend(&w);
    }
    free(done);
    free(w.f);
    free(w.cl);
    free(w.sel);
    if (w.oom) {
        qc_causes_free(out);
        return -1;
    }
    return 0;
}

void qc_causes_free(qc_causes *c) {
    for (int i = 0; i < c->n; i++) free(c->c[i].rows);
    free(c->c);
    c->c = NULL;
    c->n = 0;
}

/* "len002, len005 +3 more; static, dynamic" of a cause's rows */
static void scope(const qc_results *r, const qc_cause *c, char *b, size_t n) {
    const char *cs[64], *st[2];
    int nc = 0, over = 0, modes[3] = {0}, ns = 0;
    for (int i = 0; i < c->n_rows; i++) {
        const qc_check_row *x = &r->rows[c->rows[i]];
        int m = mode_ix(x->mode), j = 0;
        if (m >= 0) modes[m] = 1;
        if (ns < 2 && (!ns || strcmp(st[0], x->stem))) st[ns++] = x->stem;
        while (j < nc && strcmp(cs[j], x->case_name)) j++;
        if (j < nc) continue;
        if (nc < 64) cs[nc++] = x->case_name;
        else over = 1;
    }
    size_t o = 0;
    if (ns > 1) o += (size_t)snprintf(b, n, "several golden files: ");
    for (int j = 0; j < nc && j < 3 && o < n; j++)
        o += (size_t)snprintf(b + o, n - o, "%s%s", j ? ", " : "", cs[j]);
    if (nc > 3 && o < n)
        o += (size_t)snprintf(b + o, n - o, " +%d%s more", nc - 3, over ? "+" : "");
    for (int m = 0, k = 0; m < 3 && o < n; m++)
        if (modes[m]) o += (size_t)snprintf(b + o, n - o, "%s%s", k++ ? ", " : "; ", MODES[m]);
}

void qc_report_causes_console(FILE *f, const qc_causes *c, const qc_results *r,
                              int max_per_backend) {
    for (int i = 0; i < c->n;) {
        int j = i, rows = 0;
        while (j < c->n && !strcmp(c->c[j].backend, c->c[i].backend)) rows += c->c[j++].n_rows;
        fprintf(f, "likely causes for %s (%d failing row%s; each cause with the rows it "
                   "explains in the JSON report's \"causes\"):\n", c->c[i].backend, rows,
                rows == 1 ? "" : "s");
        int shown = 0, rest = 0;
        for (int k = i; k < j; k++) {
            if (shown == max_per_backend) {
                rest += c->c[k].n_rows;
                continue;
            }
            char sc[200];
            scope(r, &c->c[k], sc, sizeof sc);
            fprintf(f, "  - [%d row%s] %s (%s)\n", c->c[k].n_rows, c->c[k].n_rows == 1 ? "" : "s",
                    c->c[k].text, sc);
            shown++;
        }
        if (j - i > shown)
            fprintf(f, "  - %d more cause%s (%d row%s)\n", j - i - shown,
                    j - i - shown == 1 ? "" : "s", rest, rest == 1 ? "" : "s");
        i = j;
    }
    fflush(f);
}
