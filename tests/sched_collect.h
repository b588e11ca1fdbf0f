/* sched_collect.h — what tests driving the scheduler directly keep of each request: its text, how it
 * ended and the message (sched_event as it comes, into out[id]). Define COLLECT_MAX before including
 * to change the text's room. */
#ifndef LLM170_TESTS_SCHED_COLLECT_H
#define LLM170_TESTS_SCHED_COLLECT_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "../worker/serve/sched.h"

#ifndef COLLECT_MAX
#define COLLECT_MAX 32768
#endif

struct out {
    char text[COLLECT_MAX];
    size_t n;
    int finish;
    bool overflow; /* the text did not fit */
    char message[160];
};

struct run {
    struct out *o; /* [n], by request id */
    int n;
};

/* sched's event callback (user: a struct run) */
static void on_event(void *user, const struct sched_event *ev)
{
    struct run *r = user;
    if (ev->id >= (uint64_t)r->n)
        return;
    struct out *o = &r->o[ev->id];
    if (o->n + ev->n_text < COLLECT_MAX) {
        memcpy(o->text + o->n, ev->text, ev->n_text);
        o->n += ev->n_text;
        o->text[o->n] = 0;
    } else {
        o->overflow = true;
    }
    if (ev->finish) {
        o->finish = ev->finish;
        snprintf(o->message, sizeof o->message, "%s", ev->message ? ev->message : "");
    }
}

#endif
