#include "tpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* A decode step runs a few hundred small parallel loops; waking sleeping
 * threads through a condition variable costs about as much as one of them.
 * So workers spin for a while on the job counter before they sleep, and the
 * caller spins on the completion count before it waits. The spins are
 * bounded (≈ 1 ms) so idle pools cost nothing.
 *
 * The caller waits for the job's items, never for its workers: items are
 * claimed from one word holding (job generation << 32 | next index), so a
 * worker that wakes late — descheduled on a busy machine — finds the job
 * gone (other generation) or exhausted, and cannot hold up the caller or
 * claim an item of a job it did not see published. */
#ifndef SPIN_ITERS /* -DSPIN_ITERS=… to time others: 1500 measured slower in-process and served */
#define SPIN_ITERS 16384
#endif
/* A spinning thread offers its core to other runnable threads every so many
 * pauses: a serving worker shares the machine with the gateway and llm170d,
 * whose work would otherwise wait for the spinner's time slice to end. When
 * nothing else is runnable the yield returns at once. */
#ifndef SPIN_YIELD_EVERY
#define SPIN_YIELD_EVERY 256
#endif

static inline void spin_pause(int s)
{
    cpu_relax();
    if (s % SPIN_YIELD_EVERY == SPIN_YIELD_EVERY - 1)
        sched_yield();
}

struct tpool {
    int n;                         /* threads including the caller */
    pthread_t *threads;            /* [n-1] */
    pthread_mutex_t mu;
    pthread_cond_t cv_work;        /* a new job was posted */
    pthread_cond_t cv_done;        /* the job's last item finished */
    atomic_uint_fast64_t generation; /* bumped per job; workers wait for it to change */
    atomic_bool quit;
    atomic_int sleepers;           /* workers blocked on cv_work */
    atomic_bool caller_waiting;    /* the caller is blocked on cv_done */
    /* current job: stored before its generation is published in `claim` (release) */
    _Atomic(tpool_fn) fn;
    _Atomic(void *) ctx;
    atomic_int_fast64_t n_items;
    atomic_uint_fast64_t claim;    /* (generation mod 2^32) << 32 | next item index */
    atomic_int_fast64_t done;      /* items of the current job finished */
};

/* Claim and run items of job `gen` until it has none left. */
static void work(struct tpool *tp, uint64_t gen, int worker)
{
    const uint64_t tag = gen & 0xffffffffu;
    for (;;) {
        uint64_t w = atomic_load_explicit(&tp->claim, memory_order_acquire);
        if (w >> 32 != tag)
            return; /* a later job replaced it: ours is finished */
        /* read after the acquire: at least job gen's values; if they are a
         * later job's, `claim` changed too and the exchange below fails */
        const int64_t n = atomic_load_explicit(&tp->n_items, memory_order_relaxed);
        tpool_fn fn = atomic_load_explicit(&tp->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&tp->ctx, memory_order_relaxed);
        const int64_t i = (int64_t)(w & 0xffffffffu);
        if (i >= n)
            return;
        /* pairs with the caller's release fence: if the fields were a later
         * job's, the retired claim word is visible to the exchange */
        atomic_thread_fence(memory_order_acquire);
        if (!atomic_compare_exchange_weak_explicit(&tp->claim, &w, w + 1, memory_order_acq_rel,
                                                   memory_order_relaxed))
            continue;
        fn(ctx, i, worker);
        if (atomic_fetch_add(&tp->done, 1) + 1 == n && atomic_load(&tp->caller_waiting)) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->cv_done);
            pthread_mutex_unlock(&tp->mu);
        }
    }
}

struct thread_arg {
    struct tpool *tp;
    int id;
};

static void *thread_main(void *p)
{
    struct thread_arg *a = p;
    struct tpool *tp = a->tp;
    int id = a->id;
    free(a);
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = atomic_load_explicit(&tp->generation, memory_order_acquire);
        for (int s = 0; g == seen && s < SPIN_ITERS && !atomic_load_explicit(&tp->quit, memory_order_relaxed); s++) {
            spin_pause(s);
            g = atomic_load_explicit(&tp->generation, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&tp->mu);
            atomic_fetch_add(&tp->sleepers, 1);
            while (!atomic_load(&tp->quit) && (g = atomic_load(&tp->generation)) == seen)
                pthread_cond_wait(&tp->cv_work, &tp->mu);
            atomic_fetch_sub(&tp->sleepers, 1);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->quit))
            break;
        seen = g;
        work(tp, g, id);
    }
    return NULL;
}

struct tpool *tpool_create(int n_threads)
{
    if (n_threads < 1)
        n_threads = 1;
    struct tpool *tp = calloc(1, sizeof *tp);
    if (!tp)
        return NULL;
    tp->n = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv_work, NULL);
    pthread_cond_init(&tp->cv_done, NULL);
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->quit, false);
    atomic_init(&tp->sleepers, 0);
    atomic_init(&tp->caller_waiting, false);
    atomic_init(&tp->fn, NULL);
    atomic_init(&tp->ctx, NULL);
    atomic_init(&tp->n_items, 0);
    atomic_init(&tp->claim, 0);
    atomic_init(&tp->done, 0);
    if (n_threads > 1) {
        tp->threads = calloc((size_t)n_threads - 1, sizeof *tp->threads);
        if (!tp->threads) {
            free(tp);
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            struct thread_arg *a = malloc(sizeof *a);
            if (!a || (a->tp = tp, a->id = i, pthread_create(&tp->threads[i - 1], NULL, thread_main, a) != 0)) {
                free(a);
                tp->n = i; /* keep the threads we have */
                break;
            }
        }
    }
    return tp;
}

void tpool_destroy(struct tpool *tp)
{
    if (!tp)
        return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->quit, true);
    pthread_cond_broadcast(&tp->cv_work);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++)
        pthread_join(tp->threads[i - 1], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv_work);
    pthread_cond_destroy(&tp->cv_done);
    free(tp->threads);
    free(tp);
}

int tpool_size(const struct tpool *tp) { return tp ? tp->n : 1; }

void tpool_run(struct tpool *tp, tpool_fn fn, void *ctx, int64_t n)
{
    if (n <= 0)
        return;
    if (!tp || tp->n == 1 || n == 1 || n > 0x7fffffff) {
        for (int64_t i = 0; i < n; i++)
            fn(ctx, i, 0);
        return;
    }
    const uint64_t gen = atomic_load_explicit(&tp->generation, memory_order_relaxed) + 1;
    /* seqlock-style: retire the finished job's claim word first, so a worker
     * that reads the fields below (the next job's) while holding an old
     * claim word fails its exchange instead of running them */
    const uint64_t prev = atomic_load_explicit(&tp->claim, memory_order_relaxed);
    atomic_store_explicit(&tp->claim, prev | 0xffffffffu, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&tp->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&tp->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&tp->n_items, n, memory_order_relaxed);
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->claim, (gen & 0xffffffffu) << 32, memory_order_release);
    /* wake-up: a sleeper counts itself under the mutex before re-checking the
     * generation, so either it sees the new one or we see it and broadcast */
    atomic_store(&tp->generation, gen);
    if (atomic_load(&tp->sleepers) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->cv_work);
        pthread_mutex_unlock(&tp->mu);
    }
    work(tp, gen, 0);
    for (int s = 0; atomic_load_explicit(&tp->done, memory_order_acquire) < n && s < SPIN_ITERS; s++)
        spin_pause(s);
    if (atomic_load(&tp->done) < n) {
        pthread_mutex_lock(&tp->mu);
        atomic_store(&tp->caller_waiting, true);
        while (atomic_load(&tp->done) < n)
            pthread_cond_wait(&tp->cv_done, &tp->mu);
        atomic_store(&tp->caller_waiting, false);
        pthread_mutex_unlock(&tp->mu);
    }
}
