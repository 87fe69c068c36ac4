/* test_opt_pool.c — the optimized backend's job board (optimized/qc_opt_pool.c): every item
 * of every job runs exactly once, for 1-4 threads, jobs of 1 item to more than the 21-bit
 * item field (posted in parts), thousands of back-to-back jobs, and across the wrap of the
 * 22-bit job tag; a thread's own range runs front to back and a missing helper's range is
 * stolen from its back (checked on the exact order with the helper absent). */
#include <check.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../optimized/qc_opt_internal.h"

/* ===================================================================================== */
/* A bare qc_opt holding just a pool                                                      */
/* ===================================================================================== */

static qc_opt *pool_new(int cap) {
    qc_opt *o = calloc(1, sizeof *o);
    ck_assert_ptr_nonnull(o);
    o->nthreads = cap;
    ck_assert_int_eq(qc_opt_pool_init(&o->pool, cap), 0);
    return o;
}

static void pool_free(qc_opt *o) {
    qc_opt_pool_free(&o->pool);
    free(o);
}

typedef struct {
    _Atomic unsigned char *count; /* [n] times each item ran */
    long *order;                  /* [n] items in the order thread 0 ran them (or NULL) */
    _Atomic long pos;
} count_ctx;

static void count_item(void *ctx, long item, int tid) {
    count_ctx *c = ctx;
    atomic_fetch_add_explicit(&c->count[item], 1, memory_order_relaxed);
    if (c->order && tid == 0) c->order[atomic_fetch_add(&c->pos, 1)] = item;
}

typedef void (*body_fn)(qc_opt *o, void *arg);

/* run body on thread 0 of a region of `threads` threads, the others helping (as the
 * backend's forward does) */
static void in_region(qc_opt *o, int threads, body_fn body, void *arg) {
    qc_opt_pool_reset(&o->pool);
#pragma omp parallel num_threads(threads)
    {
        if (omp_get_thread_num() == 0) {
            o->pool_active = 1;
            body(o, arg);
            o->pool_active = 0;
            qc_opt_pool_quit(&o->pool);
        } else {
            qc_opt_pool_helper(&o->pool, omp_get_thread_num());
        }
    }
}

/* ===================================================================================== */
/* Every item exactly once                                                                */
/* ===================================================================================== */

typedef struct {
    long n;
    int jobs;
    long bad; /* items not run exactly once, over all jobs */
} once_arg;

static void once_body(qc_opt *o, void *arg) {
    once_arg *a = arg;
    count_ctx c = {.count = calloc((size_t)a->n, 1)};
    ck_assert_ptr_nonnull(c.count);
    for (int j = 0; j < a->jobs; j++) {
        memset((void *)c.count, 0, (size_t)a->n);
        qc_opt_run(o, a->n, 1, count_item, &c);
        for (long i = 0; i < a->n; i++) a->bad += c.count[i] != 1;
    }
    free((void *)c.count);
}

static const long sizes[] = {1, 2, 3, 7, 64, 1001, (1L << 21) + 5};

START_TEST(every_item_once) {
    const int threads = 1 + _i % 4;
    const long n = sizes[_i / 4];
    qc_opt *o = pool_new(threads);
    once_arg a = {.n = n, .jobs = n > 100000 ? 2 : 50};
    in_region(o, threads, once_body, &a);
    ck_assert_msg(a.bad == 0, "%d threads, %ld items: %ld items not run exactly once", threads,
                  n, a.bad);
    pool_free(o);
}
END_TEST

START_TEST(many_small_jobs_and_tag_wrap) {
    qc_opt *o = pool_new(3);
    /* start just below the wrap of the 22-bit job tag: the tags of this region go
     * 2^22 - 100 ... 2^22 - 1, 0, 1, ... */
    o->pool.last = (1L << 22) - 100;
    once_arg a = {.n = 5, .jobs = 5000};
    in_region(o, 3, once_body, &a);
    ck_assert_int_eq(a.bad, 0);
    ck_assert_int_eq(o->pool.last, (1L << 22) - 100 + 5000);
    /* a second region continues the sequence (tags are never reused by a reset) */
    in_region(o, 3, once_body, &a);
    ck_assert_int_eq(a.bad, 0);
    ck_assert_int_eq(o->pool.last, (1L << 22) - 100 + 10000);
    pool_free(o);
}
END_TEST

/* ===================================================================================== */
/* Order: own range front to back, then steal from the back                               */
/* ===================================================================================== */

typedef struct {
    long n;
    long *order;
    long ran;
} order_arg;

static void order_body(qc_opt *o, void *arg) {
    order_arg *a = arg;
    count_ctx c = {.count = calloc((size_t)a->n, 1), .order = a->order};
    ck_assert_ptr_nonnull(c.count);
    qc_opt_run(o, a->n, 1, count_item, &c);
    a->ran = atomic_load(&c.pos);
    free((void *)c.count);
}

START_TEST(absent_helper_range_is_stolen_from_the_back) {
    /* a pool sized for 3 threads, a region of 1: thread 0 runs its range [0, n/3) front to
     * back, then steals range 1 [n/3, 2n/3) and range 2 [2n/3, n), each from the back */
    const long n = 10;
    qc_opt *o = pool_new(3);
    long order[10];
    order_arg a = {.n = n, .order = order};
    in_region(o, 1, order_body, &a);
    ck_assert_int_eq(a.ran, n);
    const long want[10] = {0, 1, 2, 5, 4, 3, 9, 8, 7, 6};
    for (long i = 0; i < n; i++) ck_assert_msg(order[i] == want[i], "position %ld: item %ld, want %ld", i, order[i], want[i]);
    pool_free(o);
}
END_TEST

/* ===================================================================================== */

static Suite *suite(void) {
    Suite *s = suite_create("opt_pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, every_item_once, 0, 4 * (int)(sizeof sizes / sizeof *sizes));
    tcase_add_test(tc, many_small_jobs_and_tag_wrap);
    tcase_add_test(tc, absent_helper_range_is_stolen_from_the_back);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    /* a lost item makes the poster wait forever: fail (SIGALRM) instead of hanging CI */
    alarm(120);
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
