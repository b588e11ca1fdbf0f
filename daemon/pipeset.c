/* pipeset.c — see pipeset.h. A plain array: refused connections that are
 * still open are few (each holds one of the attacker's file descriptors). */
#include "pipeset.h"

#include <stdlib.h>

void pipeset_init(struct pipeset *s)
{
    pthread_mutex_init(&s->mu, NULL);
    s->ids = NULL;
    s->n = s->cap = 0;
}

void pipeset_free(struct pipeset *s)
{
    free(s->ids);
    s->ids = NULL;
    s->n = s->cap = 0;
    pthread_mutex_destroy(&s->mu);
}

bool pipeset_add(struct pipeset *s, uint32_t id)
{
    pthread_mutex_lock(&s->mu);
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        uint32_t *v = realloc(s->ids, cap * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&s->mu);
            return false;
        }
        s->ids = v;
        s->cap = cap;
    }
    s->ids[s->n++] = id;
    pthread_mutex_unlock(&s->mu);
    return true;
}

void pipeset_del(struct pipeset *s, uint32_t id)
{
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n; i++)
        if (s->ids[i] == id) {
            s->ids[i] = s->ids[--s->n];
            break;
        }
    pthread_mutex_unlock(&s->mu);
}

bool pipeset_has(struct pipeset *s, uint32_t id)
{
    pthread_mutex_lock(&s->mu);
    bool found = false;
    for (size_t i = 0; i < s->n && !found; i++)
        found = s->ids[i] == id;
    pthread_mutex_unlock(&s->mu);
    return found;
}
