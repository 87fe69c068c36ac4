/* qc_opt_attention.c — the causal softmax core of the optimized gated full attention, tiled
 * for long contexts (issue #16 item 2).
 *
 * Work item = one tile: a block of query tokens x the query heads of one KV head (GQA group),
 * or, when there are too few tiles to keep the threads busy (decode), a block of tokens x ONE
 * head. A tile walks the keys in blocks of QC_OPT_ATT_KB (16): each block of K and V (16 x hd
 * floats each, L1-resident) is used by every query of the tile before the next block is
 * touched, so a long context is streamed from memory once per tile instead of once per
 * (token, head).
 *
 * Numbers: every query runs exactly the sequence of the untiled online softmax it replaced
 * (scores of a block, block max, rescale of the running output and sum by exp(m - m_new) when
 * the max grows, exp of the shifted scores, the running sum in key order, out += p * v in key
 * order; then out / sum, * sigmoid(gate)). Only the interleaving of different queries changes,
 * never an operation of one query: the results are bit-identical to the per-(token, head)
 * loop, whatever the tile shape, the item order or the thread that runs it. The AVX-512 table
 * has fused kernels for the two inner loops (attn_scores, attn_pv: the same per-element
 * operations as dot / axpy); the other tables use dot / axpy directly.
 */
#include <math.h>
#include <string.h>

#include "qc_opt_internal.h"

#define QC_ATT_KB QC_OPT_ATT_KB /* keys per block (qc_opt_internal.h; the scratch holds 64) */
#define QC_ATT_QMAX 64 /* queries per tile at most (per-query m / sum live on the stack) */

typedef struct {
    qc_opt *o;
    const float *kc, *vc; /* this layer's caches [nkv, max_ctx, hd] */
    int max_ctx, n, start_pos, nh, nkv, hd, grp;
    int tb;               /* tokens per tile */
    int hq;               /* heads per tile (grp, or 1 when the tiles are split by head) */
    long nt;              /* token blocks */
    long ntiles;
    float scale;
} att_job;

/* the scores of one query against nb keys (row stride hd), times scale */
static void scores(const qc_opt_kernels *K, float *sc, const float *q, const float *Kb, int nb,
                   int hd, float scale) {
    if (K->attn_scores) {
        K->attn_scores(sc, q, Kb, hd, nb, hd, scale);
        return;
    }
    for (int i = 0; i < nb; i++) sc[i] = K->dot(q, Kb + (size_t)i * hd, hd) * scale;
}

/* out += sum_i p[i] * V[i], in key order */
static void accumulate(const qc_opt_kernels *K, float *out, const float *p, const float *Vb, int nb,
                       int hd) {
    if (K->attn_pv) {
        K->attn_pv(out, p, Vb, hd, nb, hd);
        return;
    }
    for (int i = 0; i < nb; i++) K->axpy(out, p[i], Vb + (size_t)i * hd, hd);
}

/* One query's online-softmax step for a block of nb scores (in sc, made the block's weights
 * p): the block max, the rescale of the running output and sum by exp(m - m_new) when the max
 * grows, exp of the shifted scores, the running sum in key order. The caller then adds p * V
 * to out. */
static void online_softmax(const qc_opt_kernels *K, float *sc, int nb, float *m, float *lsum,
                           float *out, int hd) {
    float mb = -INFINITY;
    for (int i = 0; i < nb; i++)
        if (sc[i] > mb) mb = sc[i];
    const float mnew = mb > *m ? mb : *m;
    if (mnew > *m && *m != -INFINITY) {
        const float corr = expf(*m - mnew);
        K->scale(out, corr, hd);
        *lsum *= corr;
    }
    *m = mnew;
    for (int i = 0; i < nb; i++) sc[i] = sc[i] - mnew;
    K->vexp(sc, sc, nb);
    for (int i = 0; i < nb; i++) *lsum += sc[i];
}

/* item -> tile, zig-zag over the token blocks (0, last, 1, last - 1, ...): the contiguous
 * per-thread ranges of qc_opt_pool.c then hold a similar amount of causal work */
static void tile_of(const att_job *j, long it, long *tblk, int *h0) {
    const long per_t = j->ntiles / j->nt; /* head groups (or heads) per token block */
    const long z = it / per_t, r = it % per_t;
    *tblk = (z % 2 == 0) ? z / 2 : j->nt - 1 - z / 2;
    *h0 = (int)(r * j->hq);
}

/* query qi of a tile (token t0 + qi / hq, head h0 + qi % hq): where its q is, where its
 * output goes, and how many keys it sees */
typedef struct {
    const float *q;    /* [hd] in o->act */
    float *out;        /* [hd] in o->ob */
    const float *gate; /* [hd] the output gate in o->mix */
    int npos;          /* keys it sees: start_pos + t + 1 */
} att_query;

/* keys of the block starting at p0 that a query seeing npos keys uses (npos > p0) */
static int keys_in_block(int npos, int p0) { return npos - p0 < QC_ATT_KB ? npos - p0 : QC_ATT_KB; }

static att_query query_of(const att_job *j, int t0, int h0, int qi) {
    const qc_opt *o = j->o;
    const int hd = j->hd, nh = j->nh, t = t0 + qi / j->hq, h = h0 + qi % j->hq;
    const size_t at = (size_t)t * nh * hd + (size_t)h * hd;
    return (att_query){.q = o->act + at, .out = o->ob + at,
                       .gate = o->mix + (size_t)t * 2 * nh * hd + (size_t)h * 2 * hd + hd,
                       .npos = j->start_pos + t + 1};
}

static void tile_item(void *ctx, long it, int tid) {
    const att_job *j = ctx;
    qc_opt *o = j->o;
    const qc_opt_kernels *K = o->k;
    const int hd = j->hd;
    const int pair = K->attn_scores2 && K->attn_pv2; /* the two-query kernels (AVX-512) */
    long tblk;
    int h0;
    tile_of(j, it, &tblk, &h0);
    const int t0 = (int)tblk * j->tb, t1 = t0 + j->tb < j->n ? t0 + j->tb : j->n;
    const int g = h0 / j->grp, nq = (t1 - t0) * j->hq;
    const float *Kc = j->kc + (size_t)g * j->max_ctx * hd, *Vc = j->vc + (size_t)g * j->max_ctx * hd;
    float m[QC_ATT_QMAX], lsum[QC_ATT_QMAX];
    float *sc = o->th[tid].sc, *sc2 = sc + QC_ATT_KB;
    for (int qi = 0; qi < nq; qi++) {
        m[qi] = -INFINITY;
        lsum[qi] = 0.0f;
        memset(query_of(j, t0, h0, qi).out, 0, (size_t)hd * sizeof(float));
    }
    const int npos_max = j->start_pos + t1; /* keys seen by the tile's last token */
    for (int p0 = 0; p0 < npos_max; p0 += QC_ATT_KB) {
        const float *Kb = Kc + (size_t)p0 * hd, *Vb = Vc + (size_t)p0 * hd;
        for (int qi = 0; qi < nq;) {
            const att_query a = query_of(j, t0, h0, qi);
            if (p0 >= a.npos) {
                qi++;
                continue;
            }
            const int nb = keys_in_block(a.npos, p0);
            /* the next query too when it sees the same keys of this block (a head of the same
             * token; a later token past the diagonal block): the two-query kernels */
            if (pair && qi + 1 < nq) {
                const att_query b = query_of(j, t0, h0, qi + 1);
                if (keys_in_block(b.npos, p0) == nb) {
                    K->attn_scores2(sc, sc2, a.q, b.q, Kb, hd, nb, hd, j->scale);
                    online_softmax(K, sc, nb, &m[qi], &lsum[qi], a.out, hd);
                    online_softmax(K, sc2, nb, &m[qi + 1], &lsum[qi + 1], b.out, hd);
                    K->attn_pv2(a.out, b.out, sc, sc2, Vb, hd, nb, hd);
                    qi += 2;
                    continue;
                }
            }
            scores(K, sc, a.q, Kb, nb, hd, j->scale);
            online_softmax(K, sc, nb, &m[qi], &lsum[qi], a.out, hd);
            accumulate(K, a.out, sc, Vb, nb, hd);
            qi++;
        }
    }
    for (int qi = 0; qi < nq; qi++) {
        const att_query a = query_of(j, t0, h0, qi);
        K->scale(a.out, 1.0f / lsum[qi], hd);
        K->sigmoid_mul(a.out, a.gate, hd);
    }
}

void qc_opt_attend(qc_opt *o, const float *kc, const float *vc, int max_ctx, int n, int start_pos,
                   int nh, int nkv, int hd, float scale) {
    att_job j = {.o = o, .kc = kc, .vc = vc, .max_ctx = max_ctx, .n = n, .start_pos = start_pos,
                 .nh = nh, .nkv = nkv, .hd = hd, .grp = nh / nkv, .scale = scale};
    /* tokens per tile: the tile's queries fit QC_ATT_QMAX (16 tokens x 4 heads for 0.8B) */
    j.hq = j.grp <= QC_ATT_QMAX ? j.grp : 1;
    j.tb = QC_ATT_QMAX / j.hq;
    if (j.tb > 16) j.tb = 16;
    j.nt = (n + j.tb - 1) / j.tb;
    /* fewer group tiles than threads (decode, short prompts, few KV heads): one head per
     * tile. As long as every thread gets a group, a tile keeps the whole group: its K and V
     * blocks are then read once for the group's heads instead of once per head (decode at
     * depth 8192, 2 threads, 0.8B: the caches are 192 MB a token, per head 768 MB) */
    if (j.nt * nkv < (long)o->nthreads) j.hq = 1;
    j.ntiles = j.nt * (nh / j.hq);
    const double work = (double)n * nh * hd * (start_pos + n);
    QC_OPT_PROF_CLASS(o, QC_OP_ATTN);
    qc_opt_run(o, j.ntiles, QC_OPT_PAR(o, work), tile_item, &j);
}
