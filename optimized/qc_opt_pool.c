/* qc_opt_pool.c — the work distribution of one forward pass over OpenMP threads.
 *
 * A forward pass runs inside ONE `omp parallel` region: thread 0 executes the forward code and
 * posts jobs (a function over items 0..n-1); the other threads loop, claiming items of the
 * current job with an atomic compare-and-swap and executing them. The poster works on its own
 * job too and continues as soon as every item is DONE, without waiting for helpers that never
 * claimed anything. So a helper descheduled by the OS (a shared, busy machine) costs at most
 * the item it holds, instead of every barrier of every parallel loop (the cost of one
 * `omp parallel for` per operation: ~120 regions per decoded token).
 *
 * The claim word packs (job sequence << 32 | next item): a claim can only succeed on the job
 * the helper read the function, context and count of (they are written before the job is
 * published with a release store and never change while an item is unclaimed).
 *
 * Results never depend on which thread runs an item (qc_opt_internal.h), so this keeps the
 * bit-identity across thread counts.
 */
#include <omp.h>
#include <sched.h>
#include <string.h>

#include "qc_opt_internal.h"

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

/* claim and run items of the job published as claim word `cur`; returns items run */
static long run_items(qc_opt_pool *p, int tid) {
    long ran = 0;
    for (;;) {
        long cur = atomic_load_explicit(&p->claim, memory_order_acquire);
        const long seq = cur >> 32, item = cur & 0xFFFFFFFFL;
        if (seq == 0) return ran;
        qc_opt_job_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
        const long n = atomic_load_explicit(&p->n, memory_order_relaxed);
        if (item >= n) return ran;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &cur, cur + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        fn(ctx, item, tid);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        ran++;
    }
}

void qc_opt_pool_reset(qc_opt_pool *p) {
    atomic_store(&p->claim, 0);
    atomic_store(&p->done, 0);
    atomic_store(&p->quit, 0);
    p->seq = 0;
    atomic_store(&p->fn, NULL);
    atomic_store(&p->ctx, NULL);
    atomic_store(&p->n, 0);
}

void qc_opt_pool_helper(qc_opt_pool *p, int tid) {
    int spins = 0;
    while (!atomic_load_explicit(&p->quit, memory_order_acquire)) {
        if (run_items(p, tid)) spins = 0;
        else backoff(&spins);
    }
}

void qc_opt_pool_quit(qc_opt_pool *p) { atomic_store_explicit(&p->quit, 1, memory_order_release); }

void qc_opt_run(qc_opt *o, long n, int parallel, qc_opt_job_fn fn, void *ctx) {
    if (n <= 0) return;
    if (!parallel || !o->pool_active || n == 1) {
        for (long i = 0; i < n; i++) fn(ctx, i, 0);
        return;
    }
    qc_opt_pool *p = &o->pool;
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->n, n, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    p->seq++;
    atomic_store_explicit(&p->claim, p->seq << 32, memory_order_release);
    run_items(p, 0);
    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) < n) backoff(&spins);
    /* close the job: late helpers see seq 0 and wait for the next one */
    atomic_store_explicit(&p->claim, 0, memory_order_release);
}
