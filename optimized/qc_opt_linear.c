/* qc_opt_linear.c — the optimized backend's projections (qc_opt_linear, qc_opt_internal.h):
 * y = x W^T for one to eight weight matrices sharing the input x [n, K]. n < gemm_min tokens:
 * matrix-vector kernels split by output rows (bandwidth bound, decode); else a packed GEMM: the
 * tokens packed once into strips [Kp, NR], the output rows split into panels of MR rows across
 * threads, each thread widening its panel into fp32 once per token block and running the
 * MR x NR micro tile over the block's strips. Every output BF16 with the option bf16_dot on:
 * the BF16 dot GEMM (qc_opt_kernels_bf16dot.c: strips of rounded bf16 pairs, panels copied
 * without widening); else every output BF16 or every output Q8_0 where the CPU has AMX: the
 * AMX GEMM (qc_opt_kernels_amx.c: strips of three bf16 terms, panels of bf16 pairs). A bottom file of the backend: the forward pass,
 * DeltaNet and the MoE block call it; it calls only the kernels and the pool.
 */
#include "qc_opt_internal.h"
#include <stdlib.h>

static size_t rows_of(const qc_tensor *t) { return (size_t)t->shape[0]; }

/* Work is handed out dynamically (qc_opt_pool.c: a helper preempted on a busy machine does
 * less of it); which thread computes a row / panel never changes its value. */
#define MV_CHUNK_ROWS 64 /* matrix-vector rows per work item */
#define GEMM_PANELS 2    /* GEMM panels per work item */
#define SBLK_BYTES (3L << 19) /* token strips per block: ~1.5 MiB (in a 2 MiB L2 with the panel;
                                 Zen 5's 1 MiB L2: 0.75 and 0.375 MiB measured no faster) */

typedef struct {
    qc_opt *o;
    const float *x;          /* [n, K] input, row stride ldx */
    long ldx;
    int n, K, Kp, ns, sblk;  /* tokens, input dim, padded, token strips, strips per block */
    int mr, nr;              /* GEMM: rows per panel, tokens per strip (the table's or bd's) */
    const qc_opt_lin *outs;
    long end[8];             /* cumulative work items per output */
    long ngrp;               /* GEMM: panel groups over all outputs */
    const qc_opt_bf16dot *bd; /* GEMM: the BF16 weight kernels (every output BF16, o->bd or
                                 o->amx, Kp a multiple of their kstep), else NULL */
} lin_job;

static int out_of_item(const lin_job *j, long it, long *first) {
    int wi = 0;
    while (it >= j->end[wi]) wi++;
    *first = wi ? j->end[wi - 1] : 0;
    return wi;
}

static void mv_item(void *ctx, long it, int tid) {
    const lin_job *j = ctx;
    (void)tid;
    long first;
    const int wi = out_of_item(j, it, &first);
    const qc_tensor *w = j->outs[wi].w;
    const long r0 = (it - first) * MV_CHUNK_ROWS, rows = (long)rows_of(w);
    const int cnt = (int)(rows - r0 < MV_CHUNK_ROWS ? rows - r0 : MV_CHUNK_ROWS);
    j->o->k->matvec(j->outs[wi].y + r0, j->outs[wi].ldy,
                    (const char *)w->data + (size_t)r0 * qc_dtype_row_bytes(w->dtype, j->K),
                    w->dtype, cnt, j->K, j->x, j->ldx, j->n);
}

static void pack_item(void *ctx, long s, int tid) {
    const lin_job *j = ctx;
    (void)tid;
    const int NR = j->o->k->gemm_nr, t0 = (int)s * NR, cnt = j->n - t0 < NR ? j->n - t0 : NR;
    j->o->k->pack_x(j->o->xpack + (size_t)s * j->Kp * NR, j->x + (size_t)t0 * j->ldx, (int)j->ldx,
                    j->K, cnt);
}

/* uint32 of one token strip of the bf16-pair GEMM j->bd */
static size_t bd_strip_words(const lin_job *j) {
    return (size_t)(j->Kp / 2) * (size_t)j->bd->nr * (size_t)j->bd->x_terms;
}

/* the same over the bf16-pair GEMM (j->bd) */
static void pack_item_bd(void *ctx, long s, int tid) {
    const lin_job *j = ctx;
    (void)tid;
    const int NR = j->bd->nr, t0 = (int)s * NR, cnt = j->n - t0 < NR ? j->n - t0 : NR;
    j->bd->pack_x((uint32_t *)(void *)j->o->xpack + (size_t)s * bd_strip_words(j),
                  j->x + (size_t)t0 * j->ldx, (int)j->ldx, j->K, cnt);
}

/* item = (token block, group of GEMM_PANELS panels), token block major */
static void tile_item(void *ctx, long it, int tid) {
    const lin_job *j = ctx;
    const qc_opt_kernels *kt = j->o->k;
    const int MR = j->mr, NR = j->nr;
    const int sb = (int)(it / j->ngrp) * j->sblk, se = sb + j->sblk < j->ns ? sb + j->sblk : j->ns;
    long first;
    const long g = it % j->ngrp;
    const int wi = out_of_item(j, g, &first);
    const qc_tensor *w = j->outs[wi].w;
    const int rows = (int)rows_of(w);
    float *panel = j->o->panel[tid];
    const long p0 = (g - first) * GEMM_PANELS;
    const qc_opt_bf16dot *bd = j->bd;
    if (bd && bd->begin) bd->begin();
    for (long p = p0; p < p0 + GEMM_PANELS; p++) {
        const int row0 = (int)(p * MR);
        if (row0 >= rows) break;
        const int mr = rows - row0 < MR ? rows - row0 : MR;
        if (bd) {
            uint32_t *pb = (uint32_t *)(void *)panel;
            const uint32_t *xs = (const uint32_t *)(const void *)j->o->xpack;
            bd->pack_w(pb, (const char *)w->data + (size_t)row0 * qc_dtype_row_bytes(w->dtype, j->K),
                       j->K, mr);
            for (int s = sb; s < se; s++) {
                const int t0 = s * NR, cnt = j->n - t0 < NR ? j->n - t0 : NR;
                bd->gemm_tile(pb, xs + (size_t)s * bd_strip_words(j), j->Kp,
                              j->outs[wi].y + (long)t0 * j->outs[wi].ldy + row0, j->outs[wi].ldy,
                              mr, cnt);
            }
            continue;
        }
        kt->pack_w(panel, (const char *)w->data + (size_t)row0 * qc_dtype_row_bytes(w->dtype, j->K),
                   w->dtype, j->K, mr);
        for (int s = sb; s < se; s++) {
            const int t0 = s * NR, cnt = j->n - t0 < NR ? j->n - t0 : NR;
            kt->gemm_tile(panel, j->o->xpack + (size_t)s * j->Kp * NR, j->Kp,
                          j->outs[wi].y + (long)t0 * j->outs[wi].ldy + row0, j->outs[wi].ldy, mr, cnt);
        }
    }
    if (bd && bd->end) bd->end();
}

void qc_opt_linear(qc_opt *o, const float *x, long ldx, int n, int K, const qc_opt_lin *outs,
                   int nouts) {
    const qc_opt_kernels *kt = o->k;
    QC_ASSERT(nouts >= 1 && nouts <= 8);
    lin_job j = {.o = o, .x = x, .ldx = ldx, .n = n, .K = K, .outs = outs};
    long total = 0; /* output rows of all outputs */
    for (int i = 0; i < nouts; i++) total += (long)rows_of(outs[i].w);
    const int par = QC_OPT_PAR(o, (double)n * K * total);
    if (n < o->gemm_min) {
        /* matrix-vector: items of MV_CHUNK_ROWS rows of the concatenated outputs */
        long nitems = 0;
        for (int i = 0; i < nouts; i++) {
            nitems += ((long)rows_of(outs[i].w) + MV_CHUNK_ROWS - 1) / MV_CHUNK_ROWS;
            j.end[i] = nitems;
        }
        qc_opt_run(o, nitems, par, mv_item, &j);
        return;
    }
    /* packed GEMM: bf16_dot, AMX (BF16), AMX (Q8_0): the first whose weight type every output
     * has and whose k step divides Kp; else the table's */
    j.Kp = qc_opt_kpad(K);
    const qc_opt_bf16dot *cand[3] = {o->bd, o->amx, o->amx_q8}; /* the first that fits */
    for (int c = 0; c < 3 && !j.bd; c++) {
        j.bd = cand[c];
        for (int i = 0; i < nouts && j.bd; i++)
            if (outs[i].w->dtype != j.bd->wdtype) j.bd = NULL;
        if (j.bd && j.Kp % j.bd->kstep) j.bd = NULL;
    }
    const int MR = j.bd ? j.bd->mr : kt->gemm_mr, NR = j.bd ? j.bd->nr : kt->gemm_nr;
    j.mr = MR;
    j.nr = NR;
    j.ns = (n + NR - 1) / NR;
    for (int i = 0; i < nouts; i++) {
        long panels = ((long)rows_of(outs[i].w) + MR - 1) / MR;
        j.ngrp += (panels + GEMM_PANELS - 1) / GEMM_PANELS;
        j.end[i] = j.ngrp;
    }
    /* token block: as many strips as fit in SBLK_BYTES; every panel is widened once per
     * token block */
    const long strip_bytes = j.bd ? (long)bd_strip_words(&j) * 4 : (long)j.Kp * NR * 4;
    j.sblk = (int)(SBLK_BYTES / strip_bytes);
    if (j.sblk < 1) j.sblk = 1;
    const long nsb = (j.ns + j.sblk - 1) / j.sblk;
    qc_opt_run(o, j.ns, par, j.bd ? pack_item_bd : pack_item, &j);
    qc_opt_run(o, nsb * j.ngrp, par, tile_item, &j);
}
