/* intake.c — one thread preparing requests in arrival order (see intake.h). */
#include "intake.h"

#include <pthread.h>
#include <stdlib.h>

struct ijob {
    struct ijob *next;
    uint64_t id;
    void *job;
    bool canceled; /* under mu */
};

struct intake {
    struct intake_ops ops;
    void *user;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* a job arrived, or quit */
    pthread_cond_t done_cv;  /* a job left the intake */
    struct ijob *head, **tail;
    struct ijob *cur;        /* being prepared (taken off the queue) */
    int n;                   /* queued + cur */
    bool quit;
    pthread_t th;
};

static void *intake_main(void *arg)
{
    struct intake *in = arg;
    pthread_mutex_lock(&in->mu);
    for (;;) {
        while (!in->head && !in->quit)
            pthread_cond_wait(&in->cv, &in->mu);
        if (in->quit)
            break;
        struct ijob *j = in->head;
        in->head = j->next;
        if (!in->head)
            in->tail = &in->head;
        in->cur = j;
        bool canceled = j->canceled;
        pthread_mutex_unlock(&in->mu);
        if (!canceled)
            in->ops.prepare(in->user, j->job);
        pthread_mutex_lock(&in->mu);
        canceled = j->canceled;
        if (!canceled)
            in->ops.submit(in->user, j->job); /* under mu: see intake.h */
        in->cur = NULL;
        pthread_mutex_unlock(&in->mu);
        if (canceled)
            in->ops.canceled(in->user, j->job);
        in->ops.free(in->user, j->job);
        free(j);
        pthread_mutex_lock(&in->mu);
        in->n--;
        pthread_cond_broadcast(&in->done_cv);
    }
    pthread_mutex_unlock(&in->mu);
    return NULL;
}

int intake_create(struct intake **out, const struct intake_ops *ops, void *user, struct err *e)
{
    *out = NULL;
    struct intake *in = calloc(1, sizeof *in);
    if (!in)
        return err_set(e, ERR_NOMEM, "intake: out of memory");
    in->ops = *ops;
    in->user = user;
    in->tail = &in->head;
    pthread_mutex_init(&in->mu, NULL);
    pthread_cond_init(&in->cv, NULL);
    pthread_cond_init(&in->done_cv, NULL);
    if (pthread_create(&in->th, NULL, intake_main, in)) {
        pthread_mutex_destroy(&in->mu);
        pthread_cond_destroy(&in->cv);
        pthread_cond_destroy(&in->done_cv);
        free(in);
        return err_set(e, ERR_NOMEM, "intake: cannot start its thread");
    }
    *out = in;
    return 0;
}

void intake_free(struct intake *in)
{
    if (!in)
        return;
    pthread_mutex_lock(&in->mu);
    in->quit = true;
    pthread_cond_broadcast(&in->cv);
    pthread_mutex_unlock(&in->mu);
    pthread_join(in->th, NULL); /* finishes the job in hand first */
    while (in->head) {
        struct ijob *j = in->head;
        in->head = j->next;
        in->ops.canceled(in->user, j->job);
        in->ops.free(in->user, j->job);
        free(j);
    }
    pthread_mutex_destroy(&in->mu);
    pthread_cond_destroy(&in->cv);
    pthread_cond_destroy(&in->done_cv);
    free(in);
}

int intake_push(struct intake *in, uint64_t id, void *job)
{
    struct ijob *j = calloc(1, sizeof *j);
    if (!j)
        return ERR_NOMEM;
    j->id = id;
    j->job = job;
    pthread_mutex_lock(&in->mu);
    *in->tail = j;
    in->tail = &j->next;
    in->n++;
    pthread_cond_broadcast(&in->cv);
    pthread_mutex_unlock(&in->mu);
    return 0;
}

int intake_cancel(struct intake *in, uint64_t id, int (*other)(void *ctx, uint64_t id), void *ctx)
{
    int rc = ERR_NOTFOUND;
    pthread_mutex_lock(&in->mu);
    if (in->cur && in->cur->id == id) {
        in->cur->canceled = true;
        rc = 0;
    }
    for (struct ijob *j = in->head; j; j = j->next)
        if (j->id == id) {
            j->canceled = true;
            rc = 0;
        }
    if (rc && other)
        rc = other(ctx, id);
    pthread_mutex_unlock(&in->mu);
    return rc;
}

void intake_flush(struct intake *in)
{
    pthread_mutex_lock(&in->mu);
    while (in->n > 0 && !in->quit)
        pthread_cond_wait(&in->done_cv, &in->mu);
    pthread_mutex_unlock(&in->mu);
}

int intake_pending(struct intake *in)
{
    pthread_mutex_lock(&in->mu);
    int n = in->n;
    pthread_mutex_unlock(&in->mu);
    return n;
}
