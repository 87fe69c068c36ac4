/* qc_opt_moe.c — the optimized backend's Qwen3.5 MoE block (every layer of a MoE model, in
 * place of the dense SwiGLU MLP).
 *
 * Per token row x (the post-attention-normed residual, o->xn):
 *   logits = Wr x; p = softmax(logits) (fp32); the k largest p, descending (equal values: the
 *   lower expert id first); w = p_topk / sum(p_topk) (always renormalised);
 *   u = sum over the chosen experts in ASCENDING expert id of w_e * down_e(silu(gate_e x) * up_e x)
 *       + sh_down(silu(sh_gate x) * sh_up x) * sigmoid(sh_expert_gate . x)
 * (the reference's order: docs/qwen35-model.md, MoE section), into o->u; the caller adds it to
 * the residual.
 *
 * How it runs (every step a job of qc_opt_pool.c; see qc_opt_internal.h for thread invariance):
 *   1. one pass over xn for the router, the shared expert's gate / up rows and its scalar gate
 *      (qc_opt_linear with four outputs);
 *   2. per token: softmax, top-k, renormalisation; the "router_topk" trace;
 *   3. grouping (serial, deterministic): a counting sort of the (token, slot) pairs by expert,
 *      tokens ascending inside an expert: expert e owns the rows off[e] .. off[e+1]-1 of the
 *      expert-major buffers xg / gu / ye;
 *   4. gather: xg row r = xn row tok[r];
 *   5. gate | up: an expert with at least gemm_min tokens runs one packed GEMM over its rows
 *      (qc_opt_linear on a view of its [2 Ie, H] slab); the experts with fewer tokens (every
 *      expert of a decode step) share ONE matrix-vector job whose items are (expert, 64 rows):
 *      only the chosen experts' weights are read;
 *   6. silu(gate) * up for every expert row and every shared-expert row;
 *   7. down: the same split as 5 on the [H, Ie] slabs; the shared expert's down projection;
 *   8. per token: the weighted sum in ascending expert id, then the gated shared expert.
 * Which kernel computes a (token, expert) row depends only on the routing (a deterministic
 * function of the inputs), never on the thread count, so results are bit-identical for any
 * thread count. Scratch: one block carved at create (qc_opt_moe_floats / qc_opt_moe_init,
 * counted by qc_optimized_scratch_bytes).
 */
#include <math.h>
#include <string.h>

#include "qc_opt_internal.h"

/* ===================================================================================== */
/* Scratch layout                                                                         */
/* ===================================================================================== */

/* a * b (+ 15, rounded to 16 floats = 64 bytes), saturating at SIZE_MAX */
static size_t part(size_t a, size_t b) {
    size_t n;
    if (__builtin_mul_overflow(a, b, &n) || __builtin_add_overflow(n, (size_t)15, &n))
        return SIZE_MAX;
    return n / 16 * 16;
}

static size_t add_sat(size_t a, size_t b) {
    size_t s;
    return __builtin_add_overflow(a, b, &s) ? SIZE_MAX : s;
}

/* Every part in one order, for counting (buf NULL) and carving. Returns the floats used. */
static size_t moe_carve(qc_opt_moe_scratch *s, const qc_config *c, int max_tokens, float *buf) {
    const size_t N = (size_t)(max_tokens > 0 ? max_tokens : 1), H = (size_t)c->hidden_size;
    const size_t E = (size_t)c->n_experts, k = (size_t)c->n_experts_per_tok;
    const size_t Ie = (size_t)c->moe_intermediate_size, Is = (size_t)c->shared_expert_intermediate_size;
    size_t Nk, used = 0;
    if (__builtin_mul_overflow(N, k, &Nk)) return SIZE_MAX;
#define PART(field, type, a, b)                                                    \
    do {                                                                           \
        size_t n_ = part((a), (b));                                                \
        if (buf && used != SIZE_MAX) s->field = (type *)(void *)(buf + used);      \
        used = add_sat(used, n_);                                                  \
    } while (0)
    PART(lg, float, N, E);
    PART(topk, float, N, 2 * k);
    PART(selw, float, N, k);
    PART(sel, int, N, k);
    PART(row, int, N, k);
    PART(tok, int, Nk, 1);
    PART(cnt, int, E, 1);
    PART(fill, int, E, 1);
    PART(off, int, E + 1, 1);
    PART(small, int, E, 1);
    PART(iend, int, E, 1);
    PART(xg, float, Nk, H);
    PART(gu, float, Nk, 2 * Ie);
    PART(ye, float, Nk, H);
    PART(sg, float, N, Is);
    PART(su, float, N, Is);
    PART(sgt, float, N, 1);
    PART(sd, float, N, H);
#undef PART
    if (buf) {
        s->E = (int)E;
        s->k = (int)k;
        s->Ie = (int)Ie;
        s->Is = (int)Is;
        s->N = (int)N;
    }
    return used;
}

size_t qc_opt_moe_floats(const qc_config *c, int max_tokens) {
    if (!qc_cfg_is_moe(c)) return 0;
    qc_opt_moe_scratch s;
    return moe_carve(&s, c, max_tokens, NULL);
}

void qc_opt_moe_init(qc_opt_moe_scratch *s, const qc_config *c, int max_tokens, float *buf) {
    memset(s, 0, sizeof *s);
    if (qc_cfg_is_moe(c) && buf) moe_carve(s, c, max_tokens, buf);
}

/* ===================================================================================== */
/* Routing                                                                                */
/* ===================================================================================== */

typedef struct {
    qc_opt_moe_scratch *s;
} route_job;

/* token t: softmax over the E logits (fp32, max-subtracted, libm expf, sums left to right),
 * top-k by probability (descending; the lower id on equal values), weights renormalised over
 * the k; topk row = [ids as floats | weights]; sel / selw = the same pairs by ascending id */
static void route_item(void *ctx, long t, int tid) {
    qc_opt_moe_scratch *s = ((const route_job *)ctx)->s;
    (void)tid;
    const int E = s->E, k = s->k;
    float *p = s->lg + (size_t)t * E, *tk = s->topk + (size_t)t * 2 * k;
    float mx = p[0];
    for (int e = 1; e < E; e++)
        if (p[e] > mx) mx = p[e];
    float sum = 0.0f;
    for (int e = 0; e < E; e++) {
        p[e] = expf(p[e] - mx);
        sum += p[e];
    }
    for (int e = 0; e < E; e++) p[e] = p[e] / sum;
    /* selection: a chosen expert's probability becomes -1 (probabilities are >= 0) */
    float psum = 0.0f;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            if (p[e] == -1.0f) continue;
            if (best < 0 || p[e] > p[best]) best = e;
        }
        tk[j] = (float)best;
        tk[k + j] = p[best];
        psum += p[best];
        p[best] = -1.0f;
    }
    for (int j = 0; j < k; j++) tk[k + j] = tk[k + j] / psum;
    /* ascending expert id: the accumulation order */
    int *sel = s->sel + (size_t)t * k;
    float *selw = s->selw + (size_t)t * k;
    for (int j = 0; j < k; j++) {
        const int id = (int)tk[j];
        const float w = tk[k + j];
        int i = j;
        while (i > 0 && sel[i - 1] > id) {
            sel[i] = sel[i - 1];
            selw[i] = selw[i - 1];
            i--;
        }
        sel[i] = id;
        selw[i] = w;
    }
}

/* expert-major rows: counting sort of the (token, slot) pairs by expert, tokens ascending */
static void group_by_expert(qc_opt_moe_scratch *s, int n) {
    const int E = s->E, k = s->k;
    memset(s->cnt, 0, (size_t)E * sizeof *s->cnt);
    memset(s->fill, 0, (size_t)E * sizeof *s->fill);
    for (int i = 0; i < n * k; i++) s->cnt[s->sel[i]]++;
    s->off[0] = 0;
    for (int e = 0; e < E; e++) s->off[e + 1] = s->off[e] + s->cnt[e];
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            const int e = s->sel[t * k + j], r = s->off[e] + s->fill[e]++;
            s->tok[r] = t;
            s->row[t * k + j] = r;
        }
}

/* ===================================================================================== */
/* Expert projections                                                                     */
/* ===================================================================================== */

#define MOE_MV_ROWS 64   /* matrix-vector rows per work item */
#define MOE_ROW_CHUNK 16 /* gathered / activated rows per work item */

typedef struct {
    qc_opt *o;
    const qc_opt_moe_scratch *s;
    const float *xn;
    int H;
} gather_job;

static void gather_item(void *ctx, long it, int tid) {
    const gather_job *j = ctx;
    (void)tid;
    const int n = j->s->off[j->s->E];
    for (long r = it * MOE_ROW_CHUNK; r < (it + 1) * MOE_ROW_CHUNK && r < n; r++)
        memcpy(j->s->xg + (size_t)r * j->H, j->xn + (size_t)j->s->tok[r] * j->H,
               (size_t)j->H * sizeof(float));
}

/* one projection over the experts run by matrix-vector products: item = (small expert i,
 * MOE_MV_ROWS output rows); expert e's weight slab is W + e * rows * K elements */
typedef struct {
    qc_opt *o;
    const qc_opt_moe_scratch *s;
    const qc_tensor *w; /* [E, rows, K] */
    int rows, K;
    const float *x;     /* expert-major input rows, stride ldx */
    long ldx;
    float *y;           /* expert-major output rows, stride ldy */
    long ldy;
    int nsmall;
} mv_job;

static void mv_item(void *ctx, long it, int tid) {
    const mv_job *j = ctx;
    const qc_opt_moe_scratch *s = j->s;
    (void)tid;
    int lo = 0, hi = j->nsmall - 1; /* the first small expert whose items end after it */
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (s->iend[mid] > it) hi = mid;
        else lo = mid + 1;
    }
    const int e = s->small[lo], first = lo ? s->iend[lo - 1] : 0;
    const long r0 = (it - first) * MOE_MV_ROWS;
    const int cnt = (int)(j->rows - r0 < MOE_MV_ROWS ? j->rows - r0 : MOE_MV_ROWS);
    const size_t es = qc_dtype_size(j->w->dtype);
    const char *W = (const char *)j->w->data + ((size_t)e * j->rows + (size_t)r0) * j->K * es;
    const int row0 = s->off[e];
    j->o->k->matvec(j->y + (size_t)row0 * j->ldy + r0, j->ldy, W, j->w->dtype, cnt, j->K,
                    j->x + (size_t)row0 * j->ldx, j->ldx, s->cnt[e]);
}

/* y = x @ W_e^T for every expert with tokens: GEMM experts one by one (each a parallel
 * qc_opt_linear), the others in one matrix-vector job. w is [E, rows, K]. */
static void expert_proj(qc_opt *o, const qc_tensor *w, int rows, int K, const float *x, long ldx,
                        float *y, long ldy) {
    qc_opt_moe_scratch *s = &o->moe;
    const size_t es = qc_dtype_size(w->dtype);
    int ns = 0, items = 0;
    double mv_work = 0;
    for (int e = 0; e < s->E; e++) {
        const int c = s->cnt[e];
        if (!c) continue;
        if (c >= o->gemm_min) {
            qc_tensor v = *w;
            v.ndim = 2;
            v.shape[0] = rows;
            v.shape[1] = K;
            v.shape[2] = v.shape[3] = 0;
            v.data = (const char *)w->data + (size_t)e * rows * K * es;
            qc_opt_lin out = {&v, y + (size_t)s->off[e] * ldy, ldy};
            qc_opt_linear(o, x + (size_t)s->off[e] * ldx, ldx, c, K, &out, 1);
        } else {
            items += (rows + MOE_MV_ROWS - 1) / MOE_MV_ROWS;
            s->small[ns] = e;
            s->iend[ns++] = items;
            mv_work += (double)c * rows * K;
        }
    }
    if (!ns) return;
    mv_job j = {o, s, w, rows, K, x, ldx, y, ldy, ns};
    qc_opt_run(o, items, QC_OPT_PAR(o, mv_work), mv_item, &j);
}

typedef struct {
    qc_opt *o;
    const qc_opt_moe_scratch *s;
    int nrows, n; /* expert-major rows, tokens (shared expert rows) */
} act_job;

/* items: chunks of expert rows (gate | up -> silu(gate) * up in place), then shared rows */
static void act_item(void *ctx, long it, int tid) {
    const act_job *j = ctx;
    const qc_opt_moe_scratch *s = j->s;
    (void)tid;
    const long nexp = (j->nrows + MOE_ROW_CHUNK - 1) / MOE_ROW_CHUNK;
    if (it < nexp) {
        for (long r = it * MOE_ROW_CHUNK; r < (it + 1) * MOE_ROW_CHUNK && r < j->nrows; r++) {
            float *g = s->gu + (size_t)r * 2 * s->Ie;
            j->o->k->silu_mul(g, g + s->Ie, s->Ie);
        }
    } else {
        const long t0 = (it - nexp) * MOE_ROW_CHUNK;
        for (long t = t0; t < t0 + MOE_ROW_CHUNK && t < j->n; t++)
            j->o->k->silu_mul(s->sg + (size_t)t * s->Is, s->su + (size_t)t * s->Is, s->Is);
    }
}

/* ===================================================================================== */
/* Combination                                                                            */
/* ===================================================================================== */

typedef struct {
    const qc_opt_moe_scratch *s;
    float *u;
    int H;
} comb_job;

/* token t: u = sum_{chosen e ascending} w_e * ye[row] + sd * sigmoid(shared gate logit) */
static void comb_item(void *ctx, long t, int tid) {
    const comb_job *j = ctx;
    const qc_opt_moe_scratch *s = j->s;
    (void)tid;
    const int H = j->H, k = s->k;
    float *u = j->u + (size_t)t * H;
    for (int i = 0; i < H; i++) u[i] = 0.0f;
    for (int q = 0; q < k; q++) {
        const float w = s->selw[(size_t)t * k + q];
        const float *y = s->ye + (size_t)s->row[(size_t)t * k + q] * H;
        for (int i = 0; i < H; i++) u[i] = u[i] + w * y[i];
    }
    const float g = 1.0f / (1.0f + expf(-s->sgt[t]));
    const float *sd = s->sd + (size_t)t * H;
    for (int i = 0; i < H; i++) u[i] = u[i] + sd[i] * g;
}

/* ===================================================================================== */
/* The block                                                                              */
/* ===================================================================================== */

void qc_opt_moe(qc_opt *o, int l, int n, int start_pos, const qc_call *call) {
    const qc_config *c = &o->m->cfg;
    const qc_layer_weights *W = &o->m->layers[l];
    qc_opt_moe_scratch *s = &o->moe;
    const int H = c->hidden_size, E = s->E, k = s->k, Ie = s->Ie, Is = s->Is;
    QC_OPT_PROF_CLASS(o, QC_OP_MOE); /* every job below: the router, the experts, the shared expert */

    /* 1. router logits, shared gate / up, shared expert gate: one pass over xn */
    qc_opt_lin first[4] = {{&W->router, s->lg, E},
                           {&W->sh_gate, s->sg, Is},
                           {&W->sh_up, s->su, Is},
                           {&W->sh_expert_gate, s->sgt, 1}};
    qc_opt_linear(o, o->xn, H, n, H, first, 4);

    /* 2. routing */
    route_job rj = {s};
    qc_opt_run(o, n, QC_OPT_PAR(o, (double)n * E * (k + 4) * 4), route_item, &rj);
    if (call && call->trace)
        call->trace(call->trace_user, l, "router_topk", start_pos, n, 2 * k, s->topk);

    /* 3. grouping, 4. gather */
    group_by_expert(s, n);
    const int nrows = n * k;
    gather_job gj = {o, s, o->xn, H};
    qc_opt_run(o, (nrows + MOE_ROW_CHUNK - 1) / MOE_ROW_CHUNK, QC_OPT_PAR(o, (double)nrows * H),
               gather_item, &gj);

    /* 5. gate | up of the chosen experts */
    expert_proj(o, &W->exp_gate_up, 2 * Ie, H, s->xg, H, s->gu, 2 * Ie);

    /* 6. silu(gate) * up: expert rows, shared rows */
    act_job aj = {o, s, nrows, n};
    const long act_items = (nrows + MOE_ROW_CHUNK - 1) / MOE_ROW_CHUNK + (n + MOE_ROW_CHUNK - 1) / MOE_ROW_CHUNK;
    qc_opt_run(o, act_items, QC_OPT_PAR(o, (double)(nrows * Ie + n * Is) * 8), act_item, &aj);

    /* 7. down projections: experts (input = the first Ie of each gu row), shared expert */
    expert_proj(o, &W->exp_down, H, Ie, s->gu, 2 * Ie, s->ye, H);
    qc_opt_lin sdn = {&W->sh_down, s->sd, H};
    qc_opt_linear(o, s->sg, Is, n, Is, &sdn, 1);

    /* 8. weighted sum + gated shared expert -> o->u */
    comb_job cj = {s, o->u, H};
    qc_opt_run(o, n, QC_OPT_PAR(o, (double)n * H * (k + 1)), comb_item, &cj);
}
