/* qc_opt_internal.h — private structures of the optimized backend (shared by
 * qc_opt_backend.c, qc_opt_deltanet.c, qc_opt_moe.c and qc_opt_options.c; not part of the
 * public API).
 *
 * Threading: every parallel step (a job of qc_opt_pool.c) splits work by output rows, tokens
 * or heads; each output element is computed entirely by one item, by whichever thread claims
 * it, in an order that does not depend on the split, so results are bit-identical for any
 * thread count.
 */
#ifndef QC_OPT_INTERNAL_H
#define QC_OPT_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>

#include "qc/qc_backend.h"
#include "qc/qc_optimized_profile.h"
#include "qc_opt_kernels.h"

/* fp32 copies of the small per-layer weights, made at create */
typedef struct {
    float *in_norm1p;   /* [H] 1 + input_layernorm.weight */
    float *post_norm1p; /* [H] 1 + post_attention_layernorm.weight */
    float *q_norm1p;    /* [hd] 1 + q_norm (full layers) */
    float *k_norm1p;    /* [hd] 1 + k_norm (full layers) */
    float *conv_wT;     /* [K, C] conv taps, transposed: conv_wT[j*C + c] = conv1d[c, 0, j] */
    float *neg_expA;    /* [nv] -exp(A_log) */
    float *dt_bias;     /* [nv] */
    float *lin_norm;    /* [dv] gated-norm weight (used as is) */
} qc_opt_layer;

/* per-thread DeltaNet chunk scratch (chunks of up to cmax tokens) */
typedef struct {
    double *gamd; /* [cmax] the same in double, for chunks of a huge total decay */
    float *gam;  /* [cmax] cumulative log-decay inside the chunk */
    float *eg;   /* [cmax] exp(gam) */
    float *tmp;  /* [cmax] */
    float *kb;   /* [cmax, dk] beta * k */
    float *KT;   /* [dk, cmax] k transposed */
    float *KdT;  /* [dk, cmax] (k * exp(gam_last - gam)) transposed */
    float *D;    /* [cmax, cmax] exp(gam_r - gam_s), s <= r */
    float *A;    /* [cmax, cmax] -(kb K^T * D), strictly lower */
    float *P;    /* [cmax, cmax] (Q K^T * D), lower incl. diagonal */
    float *T;    /* [cmax, cmax] (I - A)^{-1}, unit lower triangular */
    float *Vb;   /* [cmax, dv] beta * v */
    float *Wn;   /* [cmax, dk] -T (kb * exp(gam)) */
    float *Vn;   /* [cmax, dv] U, then the new values U - W S */
    float *Qg;   /* [cmax, dk] q * exp(gam) */
    float *vec;  /* [max(dk, dv, hd) + 64] small vectors (recurrence kv, attention acc) */
    float *sc;   /* [64] attention scores of two key blocks (2 * QC_OPT_ATT_KB <= 64) */
} qc_opt_thread;

/* one work item of a job: item index, executing thread id (0..nthreads-1, for scratch) */
typedef void (*qc_opt_job_fn)(void *ctx, long item, int tid);

/* one thread's share of the current job: (seq << 42) | (begin << 21) | end, items
 * [begin, end) unclaimed; the owner takes from begin, other threads steal from end */
typedef struct {
    _Alignas(64) _Atomic unsigned long long w;
    char pad[64 - sizeof(unsigned long long)];
} qc_opt_range;

/* the job board of one forward pass (qc_opt_pool.c) */
typedef struct {
    _Atomic long seq;               /* current job's sequence number; 0 = none yet */
    _Atomic long done;              /* items of the current job finished */
    _Atomic int quit;               /* 1: helpers leave */
    _Atomic(qc_opt_job_fn) fn;      /* current job */
    _Atomic(void *) ctx;
    _Atomic long base;              /* item index of the current job's first item */
    int cap;                        /* threads the items are split over (the backend's nthreads;
                                       a range whose thread did not start is stolen) */
    long last;                      /* last published job (poster only) */
    qc_opt_range *range;            /* [cap] each thread's contiguous share of the job */
} qc_opt_pool;

/* MoE block scratch (qc_opt_moe.c; N = max_tokens, zeroed views for a dense model).
 * "Expert-major" rows: expert e owns rows off[e] .. off[e+1]-1 of xg / gu / ye, one per
 * (token, slot) routed to it, tokens ascending. */
typedef struct {
    int E, k, Ie, Is, N; /* experts, chosen per token, expert / shared widths, max tokens */
    float *lg;    /* [N, E] router logits, then probabilities */
    float *topk;  /* [N, 2k] the "router_topk" trace: ids (as floats, descending p) | weights */
    float *selw;  /* [N, k] renormalised weights, ascending expert id (accumulation order) */
    int *sel;     /* [N, k] chosen expert ids, ascending */
    int *row;     /* [N, k] expert-major row of (token, slot) */
    int *tok;     /* [N k] token of each expert-major row */
    int *cnt;     /* [E] tokens per expert */
    int *fill;    /* [E] grouping cursor */
    int *off;     /* [E + 1] first expert-major row of each expert */
    int *small;   /* [E] experts of the batched matrix-vector job (fewer than gemm_min tokens) */
    int *iend;    /* [E] their cumulative work items */
    float *xg;    /* [N k, H] gathered inputs */
    float *gu;    /* [N k, 2 Ie] gate | up, then silu(gate) * up in the first Ie */
    float *ye;    /* [N k, H] expert outputs */
    float *sg;    /* [N, Is] shared gate, then silu(gate) * up */
    float *su;    /* [N, Is] shared up */
    float *sgt;   /* [N] shared expert gate logit */
    float *sd;    /* [N, H] shared expert output (before its sigmoid gate) */
} qc_opt_moe_scratch;

typedef struct {
    const qc_model *m;
    const qc_opt_kernels *k; /* the chosen ISA's kernel table */
    int nthreads;            /* threads of every parallel region */
    int gemm_min;            /* n >= gemm_min: packed GEMM, else matrix-vector (read per
                                call; option gemm_min, qc_opt_options.c) */
    double par_min;          /* a region runs threaded only with at least this much work
                                (multiply-adds; read per call; option par_min, tests: 0) */
    const qc_opt_bf16dot *bd; /* the BF16 dot GEMM when option bf16_dot is on (BF16 weights,
                                 GEMM path: activations rounded to bf16), else NULL */
    const qc_opt_bf16dot *amx; /* the AMX GEMM of BF16 weights (hi + lo activations, float32
                                  policy): at create where the CPU has AMX, option amx; bd
                                  comes first */
    const qc_opt_bf16dot *amx_q8; /* the same for Q8_0 weights (with amx) */
    int max_tokens;          /* largest n */
    int cmax;                /* DeltaNet chunk scratch capacity (tokens) */
    int kp_max;              /* largest padded GEMM input dim */
    char desc[160];          /* describe() text */

    qc_opt_layer *layers;    /* [L] */
    float *final_norm1p;     /* [H] */
    float *inv_freq;         /* [rotary_dim / 2] */

    /* activations, sized for max_tokens (N) */
    float *h;      /* [N, H] residual stream */
    float *xn;     /* [N, H] normed input of a block */
    float *u;      /* [N, H] block output */
    float *mix;    /* [N, max(C, 2 nh hd, I)] qkv / q_proj / mlp gate outputs */
    float *zb;     /* [N, max(nv dv, I)] z / mlp up */
    float *act;    /* [N, max(C, nh hd)] conv output / rotated queries */
    float *ob;     /* [N, max(nv dv, nh hd)] DeltaNet / attention output */
    float *kb;     /* [N, nkv hd] keys */
    float *vb;     /* [N, nkv hd] values */
    float *bab;    /* [N, 2 nv] b | a projections, then beta | g */
    float *rope;   /* [N, rotary_dim] cos | sin per token */
    float *est;    /* [K, C] conv state transposed */
    float *xpack;  /* [ceil(N / NR), Kp_max, NR] packed token strips */
    float **panel; /* [nthreads] -> [Kp_max / 16, MR, 16] packed weight panel */
    qc_opt_thread *th; /* [nthreads] */
    qc_opt_moe_scratch moe; /* MoE models only (views into the arena) */
    qc_opt_profile *prof; /* the per-op timer (qc_backend_opts.profile at create); NULL off */
    qc_opt_pool pool;  /* job board (valid while pool_active) */
    int pool_active;   /* 1 inside a forward running with helper threads */
    void *arena;   /* every float buffer above: one 64-byte-aligned allocation (create's layout) */
} qc_opt;

/* 1 when `work` (about one multiply-add per unit) is worth waking the other threads: on a busy
 * machine every region waits for its slowest (possibly preempted) thread. */
#define QC_OPT_PAR(o, work) ((o)->nthreads > 1 && (work) >= (o)->par_min)

/* ---- work distribution (qc_opt_pool.c) ---- */

/* at create: ranges for `cap` threads, no job; 0, or -1 when out of memory */
int qc_opt_pool_init(qc_opt_pool *p, int cap);
void qc_opt_pool_free(qc_opt_pool *p);
/* before a region: no job */
void qc_opt_pool_reset(qc_opt_pool *p);
/* helper threads: claim and run items until qc_opt_pool_quit */
void qc_opt_pool_helper(qc_opt_pool *p, int tid);
void qc_opt_pool_quit(qc_opt_pool *p);
/* Run fn(ctx, i, tid) for i in 0..n-1: on the helpers too when `parallel` and a pool is
 * active, else inline on the calling thread (tid 0). Returns when every item is done. */
/* Names the class of the jobs the forward pass posts next (the per-op timer; nothing when off). */
#define QC_OPT_PROF_CLASS(o, c)                                                                \
    do {                                                                                       \
        if ((o)->prof) (o)->prof->cur = (c);                                                   \
    } while (0)

void qc_opt_run(qc_opt *o, long n, int parallel, qc_opt_job_fn fn, void *ctx);

/* ---- DeltaNet (qc_opt_deltanet.c) ---- */

/* Floats of per-thread chunk scratch for chunks of cmax tokens. */
size_t qc_opt_dn_thread_floats(const qc_config *c, int cmax);
/* Carve the views out of buf. */
void qc_opt_dn_thread_init(qc_opt_thread *t, const qc_config *c, int cmax, float *buf);

/* The Gated DeltaNet mixer of layer l over n tokens (xn -> o->u), updating conv_state and
 * recurrent_state of `st`. chunk: effective chunk size (<= o->cmax) or 0 for the recurrence. */
void qc_opt_deltanet(qc_opt *o, int l, int n, qc_state *st, int chunk);

/* ---- MoE block (qc_opt_moe.c) ---- */

/* Floats of MoE scratch for max_tokens tokens (0 for a dense config; SIZE_MAX on overflow). */
size_t qc_opt_moe_floats(const qc_config *c, int max_tokens);
/* Carve the views out of buf (qc_opt_moe_floats(c, max_tokens) floats, 64-byte aligned). */
void qc_opt_moe_init(qc_opt_moe_scratch *s, const qc_config *c, int max_tokens, float *buf);
/* The MoE block of layer l over n tokens: o->xn (normed) -> o->u; the "router_topk" trace
 * through call->trace when set. */
void qc_opt_moe(qc_opt *o, int l, int n, int start_pos, const qc_call *call);

/* ---- gated attention core (qc_opt_attention.c) ---- */

/* o->ob[t, h] = softmax-weighted values of query o->act[t, h] over positions 0..start_pos+t
 * of this layer's caches kc / vc ([nkv, max_ctx, hd]), times sigmoid of the gate in
 * o->mix; t < n, h < nh. Tiled; bit-identical for any thread count and tile shape. */
void qc_opt_attend(qc_opt *o, const float *kc, const float *vc, int max_ctx, int n, int start_pos,
                   int nh, int nkv, int hd, float scale);

/* ---- shared helpers (qc_opt_backend.c) ---- */

typedef struct {
    const qc_tensor *w; /* weight [rows, K] */
    float *y;           /* output rows: y[t * ldy + r] */
    long ldy;
} qc_opt_lin;

/* y = x @ W^T for every output of outs (same input x [n, K], row stride ldx). */
void qc_opt_linear(qc_opt *o, const float *x, long ldx, int n, int K, const qc_opt_lin *outs,
                   int nouts);

/* ---- named options (qc_opt_options.c) ---- */

/* Keys per block of the attention's online softmax (qc_opt_attention.c; the untiled test
 * reference uses it too). 16: a block's K and V rows (2 x 16 KiB at head dim 256) stay in L1
 * while the tile's queries use them: prefill attention at 4096 tokens, one thread, 38.5 -> 54.7
 * GFLOP/s against 64-key blocks (bench --synthetic 0.8b --layers 4 --prompt 4096
 * --profile-ops). Part of the numbers: the block structure sets the rescales. */
#define QC_OPT_ATT_KB 16
_Static_assert(2 * QC_OPT_ATT_KB <= 64, "the attention score scratch holds two key blocks");

/* be's describe text (o->desc) and be->kernels from the ISA, the BF16 weight GEMM (bf16_dot,
 * else AMX) and the threads (create, set_option) */
void qc_opt_describe_set(qc_backend *be);

/* The backend's set_option: gemm_min = integer >= 1, par_min = number >= 0, bf16_dot = 0|1,
 * effective from the next call; QC_ERR_NO_OPTION naming an unknown key (and the keys known),
 * QC_ERR_ARG naming a bad value, QC_ERR_UNSUPPORTED for bf16_dot=1 without AVX512_BF16. */
qc_status qc_opt_set_option(qc_backend *be, const char *key, const char *value, qc_err *err);

#endif /* QC_OPT_INTERNAL_H */
