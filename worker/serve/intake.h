/* intake.h — preparing received requests off the thread that receives them.
 *
 * Tokenizing a prompt and rendering a chat template take time that grows
 * with the text (~1 s for 4 MB). Done where the daemon's messages are read,
 * every cancel, ping and later request waits behind it. An intake is one
 * thread that takes jobs in arrival order, runs `prepare` on each (the slow
 * part, no lock held) and then `submit` (hand the tokens to the scheduler,
 * answer the daemon), so jobs reach the scheduler in the order they came.
 *
 * Cancel: intake_cancel marks a job that is still waiting or being prepared;
 * such a job never reaches `submit`, `canceled` answers for it instead. A
 * job's `submit` runs under the intake's lock and intake_cancel calls its
 * fallback (the scheduler's cancel) under the same lock, so a cancel finds
 * the request on one side or the other, never in between. */
#ifndef LLM170_INTAKE_H
#define LLM170_INTAKE_H

#include <stdbool.h>
#include <stdint.h>

#include "../../common/err.h"

struct intake;

struct intake_ops {
    void (*prepare)(void *user, void *job);  /* intake thread, no lock */
    void (*submit)(void *user, void *job);   /* intake thread, under the intake's lock */
    void (*canceled)(void *user, void *job); /* instead of submit, for a job canceled before it */
    void (*free)(void *user, void *job);     /* last, for every job pushed */
};

int intake_create(struct intake **out, const struct intake_ops *ops, void *user, struct err *e);
/* Stop the thread; jobs not submitted yet go to `canceled`. */
void intake_free(struct intake *in);
/* Queue a job (any thread). ERR_NOMEM. */
int intake_push(struct intake *in, uint64_t id, void *job);
/* Cancel job id when it is still in the intake (0), else return
 * other(ctx, id) (called under the intake's lock). */
int intake_cancel(struct intake *in, uint64_t id, int (*other)(void *ctx, uint64_t id), void *ctx);
/* Block until every job pushed so far has been submitted or canceled. */
void intake_flush(struct intake *in);
/* Jobs waiting or being prepared. */
int intake_pending(struct intake *in);

#endif
