#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct tpool {
    int n;                      /* threads including the caller */
    pthread_t *threads;         /* [n-1] */
    pthread_mutex_t mu;
    pthread_cond_t cv_work;     /* a new job was posted */
    pthread_cond_t cv_done;     /* the last worker finished the job */
    uint64_t generation;        /* bumped per job so workers see new work once */
    int quit;
    /* current job */
    tpool_fn fn;
    void *ctx;
    int64_t n_items;
    atomic_int_fast64_t next;   /* next item index to claim */
    int busy;                   /* workers still inside the current job */
};

static void work(struct tpool *tp, int worker)
{
    for (;;) {
        int64_t i = atomic_fetch_add(&tp->next, 1);
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
    pthread_mutex_lock(&tp->mu);
    for (;;) {
        while (!tp->quit && tp->generation == seen)
            pthread_cond_wait(&tp->cv_work, &tp->mu);
        if (tp->quit)
            break;
        seen = tp->generation;
        pthread_mutex_unlock(&tp->mu);
        work(tp, id);
        pthread_mutex_lock(&tp->mu);
        if (--tp->busy == 0)
            pthread_cond_signal(&tp->cv_done);
    }
    pthread_mutex_unlock(&tp->mu);
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
    tp->quit = 1;
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
    pthread_mutex_lock(&tp->mu);
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n_items = n;
    atomic_store(&tp->next, 0);
    tp->busy = tp->n - 1;
    tp->generation++;
    pthread_cond_broadcast(&tp->cv_work);
    pthread_mutex_unlock(&tp->mu);
    work(tp, 0);
    pthread_mutex_lock(&tp->mu);
    while (tp->busy > 0)
        pthread_cond_wait(&tp->cv_done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}
