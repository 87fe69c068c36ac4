/* qc_opt_pool.c — the work distribution of one forward pass over OpenMP threads.
 *
 * A forward pass runs inside ONE `omp parallel` region: thread 0 executes the forward code and
 * posts jobs (a function over items 0..n-1); the other threads loop, claiming items of the
 * current job and executing them. The poster works on its own job too and continues as soon as
 * every item is DONE, without waiting for helpers that never claimed anything. So a helper
 * descheduled by the OS (a shared, busy machine) costs at most the item it holds, instead of
 * every barrier of every parallel loop (the cost of one `omp parallel for` per operation: ~120
 * regions per decoded token).
 *
 * Items are split into one contiguous range per thread; a thread takes the items of its own
 * range from the front, in order, then steals from the back of the others' ranges. Contiguous
 * ranges keep each thread's walk through a weight matrix one sequential memory stream (a
 * matrix-vector product with 64-row items handed out round-robin ran ~15% slower: every item
 * restarted the hardware prefetcher), stealing keeps the tolerance of a preempted helper.
 *
 * A range word packs (job seq << 42 | begin << 21 | end): a claim can only succeed on the job
 * the helper read the function and context of (they are written before the job is published
 * with a release store and never change while an item is unclaimed; the 22-bit tag wraps
 * after 4M jobs, ~50k decoded tokens, far beyond any preemption). Jobs larger than the 21-bit
 * item field are posted in parts. A range whose thread the OpenMP runtime did not start is
 * simply stolen.
 *
 * Results never depend on which thread runs an item (qc_opt_internal.h), so this keeps the
 * bit-identity across thread counts.
 */
#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qc_opt_internal.h"
#include "qc/qc_optimized_profile.h"

#define IDX_BITS 21
#define SEQ_BITS 22
#define IDX_MASK ((1ULL << IDX_BITS) - 1)
#define SEQ_MASK ((1ULL << SEQ_BITS) - 1)

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* spin briefly, then give the CPU away (other runnable threads first) */
static inline void backoff(int *spins) {
    if (++*spins < 4000) cpu_relax();
    else sched_yield();
}

static inline unsigned long long range_word(long seq, unsigned long long b, unsigned long long e) {
    return ((unsigned long long)seq & SEQ_MASK) << (2 * IDX_BITS) | b << IDX_BITS | e;
}

/* take one item of job `seq` from r: its first (front) or last unclaimed one; -1 if none */
static long take(qc_opt_range *r, long seq, int front) {
    unsigned long long w = atomic_load_explicit(&r->w, memory_order_acquire);
    for (;;) {
        if ((w >> (2 * IDX_BITS)) != ((unsigned long long)seq & SEQ_MASK)) return -1;
        const unsigned long long b = (w >> IDX_BITS) & IDX_MASK, e = w & IDX_MASK;
        if (b >= e) return -1;
        const unsigned long long nw = front ? range_word(seq, b + 1, e) : range_word(seq, b, e - 1);
        if (atomic_compare_exchange_weak_explicit(&r->w, &w, nw, memory_order_acq_rel,
                                                  memory_order_acquire))
            return front ? (long)b : (long)(e - 1);
    }
}

/* claim and run items of the current job: own range first, then steal; returns items run */
static long run_items(qc_opt_pool *p, int tid) {
    const long seq = atomic_load_explicit(&p->seq, memory_order_acquire);
    if (seq == 0) return 0;
    qc_opt_job_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
    void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
    const long base = atomic_load_explicit(&p->base, memory_order_relaxed);
    const int T = p->cap;
    long ran = 0, it;
    for (int k = 0; k < T; k++) {
        qc_opt_range *r = &p->range[(tid + k) % T];
        while ((it = take(r, seq, k == 0)) >= 0) {
            fn(ctx, base + it, tid);
            atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
            ran++;
        }
    }
    return ran;
}

/* The job sequence is never reset: tags stay unique across forward passes, so a helper that
 * read the previous pass's job can never claim an item of this one. */
void qc_opt_pool_reset(qc_opt_pool *p) {
    atomic_store(&p->done, 0);
    atomic_store(&p->quit, 0);
    for (int t = 0; t < p->cap; t++) atomic_store(&p->range[t].w, 0);
}

int qc_opt_pool_init(qc_opt_pool *p, int cap) {
    QC_ASSERT(cap >= 1);
    memset(p, 0, sizeof *p);
    p->range = aligned_alloc(64, (size_t)cap * sizeof *p->range);
    if (!p->range) return -1;
    p->cap = cap;
    qc_opt_pool_reset(p);
    return 0;
}

void qc_opt_pool_free(qc_opt_pool *p) {
    free(p->range);
    p->range = NULL;
    p->cap = 0;
}

void qc_opt_pool_helper(qc_opt_pool *p, int tid) {
    int spins = 0;
    while (!atomic_load_explicit(&p->quit, memory_order_acquire)) {
        if (run_items(p, tid)) spins = 0;
        else backoff(&spins);
    }
}

void qc_opt_pool_quit(qc_opt_pool *p) { atomic_store_explicit(&p->quit, 1, memory_order_release); }

/* post items [base, base + n), n <= IDX_MASK, run them with the helpers, wait for all */
static void run_part(qc_opt_pool *p, long base, long n, qc_opt_job_fn fn, void *ctx) {
    const int T = p->cap;
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->base, base, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    const long seq = ++p->last;
    for (int t = 0; t < T; t++)
        atomic_store_explicit(&p->range[t].w,
                              range_word(seq, (unsigned long long)(n * t / T),
                                         (unsigned long long)(n * (t + 1) / T)),
                              memory_order_relaxed);
    atomic_store_explicit(&p->seq, seq, memory_order_release);
    run_items(p, 0);
    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) < n) backoff(&spins);
}

/* the job itself (qc_opt_run without the timer) */
static void run_job(qc_opt *o, long n, int parallel, qc_opt_job_fn fn, void *ctx) {
    if (!parallel || !o->pool_active || n == 1) {
        for (long i = 0; i < n; i++) fn(ctx, i, 0);
        return;
    }
    for (long base = 0; base < n; base += (long)IDX_MASK)
        run_part(&o->pool, base, n - base < (long)IDX_MASK ? n - base : (long)IDX_MASK, fn, ctx);
}

/* ---- the per-op timer hook (qc/qc_optimized_profile.h) ---- */

const char *qc_opt_prof_name(int cls) {
    static const char *const names[QC_OP_N] = {"proj", "deltanet", "attention", "conv",
                                               "norms", "elementwise", "lm_head", "moe"};
    return cls >= 0 && cls < QC_OP_N ? names[cls] : NULL;
}

static double prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void qc_opt_run(qc_opt *o, long n, int parallel, qc_opt_job_fn fn, void *ctx) {
    if (n <= 0) return;
    qc_opt_profile *P = o->prof; /* the one check when off */
    if (!P) {
        run_job(o, n, parallel, fn, ctx);
        return;
    }
    const double t0 = prof_now();
    run_job(o, n, parallel, fn, ctx);
    const int c = P->cur >= 0 && P->cur < QC_OP_N ? P->cur : QC_OP_ELEM;
    P->sec[c] += prof_now() - t0;
    P->jobs[c]++;
}
