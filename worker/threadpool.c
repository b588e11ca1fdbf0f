#include "threadpool.h"

#include <pthread.h>
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
 * So workers spin for a short while on the job counter before they sleep,
 * and the caller spins on the completion count before it waits. The spin is
 * bounded so idle pools cost nothing. */
#define SPIN_ITERS 20000

struct tpool {
    int n;                      /* threads including the caller */
    pthread_t *threads;         /* [n-1] */
    pthread_mutex_t mu;
    pthread_cond_t cv_work;     /* a new job was posted */
    pthread_cond_t cv_done;     /* the last worker finished the job */
    atomic_uint_fast64_t generation; /* bumped per job so workers see new work once */
    atomic_bool quit;
    /* current job: written by the caller before generation is bumped (release) */
    tpool_fn fn;
    void *ctx;
    int64_t n_items;
    atomic_int_fast64_t next;   /* next item index to claim */
    atomic_int busy;            /* workers still inside the current job */
};

static void work(struct tpool *tp, int worker)
{
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&tp->next, 1, memory_order_relaxed);
        if (i >= tp->n_items)
            break;
        tp->fn(tp->ctx, i, worker);
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
            cpu_relax();
            g = atomic_load_explicit(&tp->generation, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&tp->mu);
            while (!atomic_load(&tp->quit) && (g = atomic_load(&tp->generation)) == seen)
                pthread_cond_wait(&tp->cv_work, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->quit))
            break;
        seen = g;
        work(tp, id);
        if (atomic_fetch_sub_explicit(&tp->busy, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->cv_done);
            pthread_mutex_unlock(&tp->mu);
        }
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
    atomic_init(&tp->next, 0);
    atomic_init(&tp->busy, 0);
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
    if (!tp || tp->n == 1 || n == 1) {
        for (int64_t i = 0; i < n; i++)
            fn(ctx, i, 0);
        return;
    }
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n_items = n;
    atomic_store_explicit(&tp->next, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->busy, tp->n - 1, memory_order_relaxed);
    /* publish the job; sleepers re-check the generation under the mutex, so
     * bumping it before the broadcast cannot lose a wake-up */
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_acq_rel);
    pthread_mutex_lock(&tp->mu);
    pthread_cond_broadcast(&tp->cv_work);
    pthread_mutex_unlock(&tp->mu);
    work(tp, 0);
    for (int s = 0; atomic_load_explicit(&tp->busy, memory_order_acquire) > 0 && s < SPIN_ITERS; s++)
        cpu_relax();
    if (atomic_load_explicit(&tp->busy, memory_order_acquire) > 0) {
        pthread_mutex_lock(&tp->mu);
        while (atomic_load(&tp->busy) > 0)
            pthread_cond_wait(&tp->cv_done, &tp->mu);
        pthread_mutex_unlock(&tp->mu);
    }
}
