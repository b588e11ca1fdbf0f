/* backend_daemon.c — the gateway's backend (backend.h) on llm170d through
 * proto/client.h. Each generation job submits its request on a thread of its
 * own (the call blocks until a worker accepted it). The accepted stream joins
 * this gateway's poll group, and one poller thread collects the chunks of all
 * streams with one "poll" round trip per wake-up and turns them into events:
 * the per-token cost does not grow with a round trip per stream. A cancel
 * raises a flag that the poller acts on at its next poll (within POLL_MS). */
#include "backend_daemon.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "../common/clock.h"
#include "../proto/client.h"

/* the longest a poll waits for a chunk; chunks end the wait at once, so this
 * only bounds how late a cancel is noticed while a request is queued */
#define POLL_MS 100
/* Polls start at least this far apart while chunks flow: a reply then
 * carries a few scheduler steps, so each stream's SSE write and the round
 * trip to llm170d are paid per few tokens instead of per token (a write costs
 * the same for one event as for four; 20 ms instead of 8 took the gateway
 * from ~14 to ~9 µs of CPU per token on 64 streams). A token waits at most
 * this long; a poll that finds nothing waits for the daemon, not for this.
 *
 * The wait is in llm170d (the poll's hold_ms), so that a stream's final
 * chunk is answered at once while mid-stream chunks still come this far
 * apart: the client's next request is not delayed by a poll interval, nor
 * is the slot it will fill (64 streams of 64 tokens on a 16-core machine:
 * 40 of 64 slots decoding per step, a slot empty ~17 ms between requests,
 * while the final chunk waited for the gap). With 64 streams one ends nearly
 * every step, so the poll returns about every step: on the 2-core machine
 * llm170d then spends ~2 µs more CPU per token (docs/benchmarks.md).
 * LLM170_POLL_FINAL_AT_ONCE=0 waits in the gateway instead (hold_ms 0). */
#define POLL_GAP_MS 20

struct daemon_backend {
    struct pc_client *pc;      /* generation and tokenization */
    struct pc_client *quick;   /* status: a short deadline so /health answers fast */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_jobs;                /* jobs whose final event is not delivered yet (submitting or polled) */
    atomic_bool suspect;       /* the daemon did not answer lately: probe with the quick client first */
    uint64_t group;            /* our poll group at the daemon (random, non-zero) */
    struct gw_job **live;      /* [n_live] accepted streams the poller collects */
    int n_live, cap_live;
    pthread_cond_t poll_cv;    /* a stream was registered, or quit */
    pthread_t poller;
    bool poller_started, quit;
};

struct gw_job {
    struct daemon_backend *b;
    gw_event_fn fn;
    void *user;
    atomic_bool cancel;
    pthread_mutex_t mu;
    bool finished, released;   /* final event delivered / gateway done with the handle */
    struct proto_sid sid;      /* the daemon's stream id once accepted */
    uint64_t next_i;           /* next chunk index expected (poller only) */
    bool cancel_sent;          /* (under the backend's mu) */
    struct proto_gen g;        /* the request, owned (a deep copy of what submit was given) */
};

static void job_free(struct gw_job *j)
{
    proto_gen_free(&j->g);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static void deliver(struct gw_job *j, const struct gw_event *ev) { j->fn(j->user, ev); }

static void deliver_error(struct gw_job *j, int code, const char *msg)
{
    struct gw_event ev = {.kind = GW_EV_ERROR, .err_code = code, .err_msg = msg};
    deliver(j, &ev);
}

static void deliver_chunk_token(struct gw_job *j, const struct proto_chunk *c)
{
    struct gw_top top[PROTO_MAX_TOP];
    size_t nt = c->n_top < PROTO_MAX_TOP ? c->n_top : PROTO_MAX_TOP;
    for (size_t k = 0; k < nt; k++)
        top[k] = (struct gw_top){c->top[k].token, c->top[k].logprob, c->top[k].text ? c->top[k].text : ""};
    struct gw_event ev = {.kind = GW_EV_TOKEN, .token = c->token, .text = c->text ? c->text : "",
                          .has_logprob = c->has_logprob, .logprob = c->logprob, .top = top, .n_top = nt,
                          .n_prompt = c->n_prompt}; /* the first token's chunk says it (0 on the others) */
    deliver(j, &ev);
}

/* One chunk of j's stream, in order; returns true when it was the last. */
static bool deliver_chunk(struct gw_job *j, const struct proto_chunk *c)
{
    if (c->finish == PF_NONE) {
        deliver_chunk_token(j, c);
        return false;
    }
    if (c->token >= 0 || (c->text && *c->text))
        deliver_chunk_token(j, c);
    if (c->finish == PF_STOP || c->finish == PF_LENGTH) {
        struct gw_event ev = {.kind = GW_EV_DONE, .finish = c->finish == PF_LENGTH ? "length" : "stop",
                              .n_prompt = c->n_prompt, .n_gen = c->n_gen, .embd = c->embd, .n_embd = c->n_embd,
                              .stop_hit = c->stop_hit};
        deliver(j, &ev);
    } else if (c->finish == PF_CANCEL) {
        deliver_error(j, ERR_CANCELED, "canceled");
    } else {
        deliver_error(j, proto_errc_to_err(c->errc), c->message ? c->message : "generation failed");
    }
    return true;
}

/* The job delivered its final event: the backend is done with it. */
static void job_finish(struct gw_job *j)
{
    struct daemon_backend *b = j->b;
    pthread_mutex_lock(&j->mu);
    j->finished = true;
    bool release = j->released;
    pthread_mutex_unlock(&j->mu);
    if (release)
        job_free(j);
    pthread_mutex_lock(&b->mu);
    b->n_jobs--;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* Submit the request; on acceptance hand the stream to the poller and return
 * true (the poller then owns the job), else deliver the error. */
static bool run_job(struct gw_job *j)
{
    struct err e;
    err_clear(&e);
    int rc;
    if (atomic_load(&j->cancel)) {
        deliver_error(j, ERR_CANCELED, "canceled");
        return false;
    }
    /* a daemon that is down would hold this request for the whole generate
     * deadline; after a failure, a quick status probe answers 503 at once */
    if (atomic_load(&j->b->suspect)) {
        struct proto_status ps;
        memset(&ps, 0, sizeof ps);
        rc = pc_status(j->b->quick, &ps, &e);
        proto_status_free(&ps);
        if (rc) {
            deliver_error(j, rc, e.msg);
            return false;
        }
        atomic_store(&j->b->suspect, false);
    }
    struct pc_stream *st = NULL;
    struct proto_gen pg = j->g; /* a view, with the poll group this backend's streams join */
    pg.group = j->b->group;
    rc = pc_generate(j->b->pc, &pg, &st, &e);
    if (rc) {
        if (rc == ERR_IO)
            atomic_store(&j->b->suspect, true);
        deliver_error(j, rc, e.msg);
        return false;
    }
    j->sid = pc_stream_id(st);
    pc_stream_detach(st);
    struct daemon_backend *b = j->b;
    pthread_mutex_lock(&b->mu);
    if (b->n_live == b->cap_live) {
        int cap = b->cap_live ? b->cap_live * 2 : 64;
        struct gw_job **nl = realloc(b->live, (size_t)cap * sizeof *nl);
        if (!nl) {
            pthread_mutex_unlock(&b->mu);
            struct err ce;
            pc_cancel_id(b->pc, &j->sid, &ce);
            deliver_error(j, ERR_NOMEM, "out of memory");
            return false;
        }
        b->live = nl;
        b->cap_live = cap;
    }
    b->live[b->n_live++] = j;
    pthread_cond_broadcast(&b->poll_cv);
    pthread_mutex_unlock(&b->mu);
    return true;
}

static void *job_main(void *arg)
{
    struct gw_job *j = arg;
    if (!run_job(j))
        job_finish(j);
    /* else the poller owns j now: touch nothing */
    return NULL;
}

/* Remove live[i] (b->mu held). */
static void live_drop(struct daemon_backend *b, int i) { b->live[i] = b->live[--b->n_live]; }

/* The poller: one thread collects the chunks of every running stream with
 * one "poll" per wake-up (proto/README.md, poll groups) and turns them into
 * events. Cancels are sent from here too. */
static void *poller_main(void *arg)
{
    struct daemon_backend *b = arg;
    struct proto_ack *acks = NULL;
    size_t cap_acks = 0;
    struct proto_ack *fin = NULL; /* final chunks received: acknowledged once, in the next poll */
    size_t n_fin = 0, cap_fin = 0;
    struct proto_sid *cancel = NULL;
    size_t cap_cancel = 0;
    int64_t t_flow = -(1 << 30); /* when the last reply that carried mid-stream chunks came */
    const char *gs = getenv("LLM170_POLL_GAP_MS");
    int gap_ms = gs ? atoi(gs) : POLL_GAP_MS;
    const char *fs = getenv("LLM170_POLL_FINAL_AT_ONCE");
    const bool final_at_once = !fs || atoi(fs) > 0;
    int64_t t_poll = 0;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        while (!b->n_live && !n_fin && !b->quit)
            pthread_cond_wait(&b->poll_cv, &b->mu);
        if (b->quit && !b->n_live) {
            pthread_mutex_unlock(&b->mu);
            break;
        }
        size_t need = (size_t)b->n_live + n_fin;
        if (need > cap_acks) {
            struct proto_ack *na = realloc(acks, need * 2 * sizeof *na);
            struct proto_sid *nc = realloc(cancel, need * 2 * sizeof *nc);
            if (na)
                acks = na;
            if (nc)
                cancel = nc;
            if (na && nc)
                cap_acks = cap_cancel = need * 2;
        }
        size_t n_acks = 0, n_cancel = 0;
        for (int i = 0; i < b->n_live && n_acks < cap_acks; i++) {
            struct gw_job *j = b->live[i];
            acks[n_acks++] = (struct proto_ack){.stream = j->sid, .from = j->next_i};
            if (atomic_load(&j->cancel) && !j->cancel_sent && n_cancel < cap_cancel) {
                j->cancel_sent = true;
                cancel[n_cancel++] = j->sid;
            }
        }
        for (size_t i = 0; i < n_fin && n_acks < cap_acks; i++)
            acks[n_acks++] = fin[i];
        n_fin = 0;
        pthread_mutex_unlock(&b->mu);

        struct err e;
        for (size_t i = 0; i < n_cancel; i++)
            pc_cancel_id(b->pc, &cancel[i], &e); /* the stream then ends with PF_CANCEL */
        struct proto_chunk *chunks = NULL;
        size_t n = 0;
        int64_t hold = final_at_once ? t_flow + gap_ms - clock_now_ms() : 0;
        hold = hold < 0 ? 0 : hold > gap_ms ? gap_ms : hold;
        t_poll = clock_now_ms();
        int rc = pc_poll(b->pc, b->group, acks, n_acks, POLL_MS + (int)hold, (int)hold, &chunks, &n, &e);
        if (rc) {
            /* the daemon is gone or stuck: every running stream fails (as a poll of its own would) */
            atomic_store(&b->suspect, true);
            pthread_mutex_lock(&b->mu);
            int k = b->n_live;
            struct gw_job **all = k ? malloc((size_t)k * sizeof *all) : NULL;
            if (all || !k) {
                if (k)
                    memcpy(all, b->live, (size_t)k * sizeof *all);
                b->n_live = 0;
            } else {
                k = 0;
            }
            pthread_mutex_unlock(&b->mu);
            for (int i = 0; i < k; i++) {
                deliver_error(all[i], rc, e.msg);
                job_finish(all[i]);
            }
            free(all);
            if (!k)
                usleep(100000);
            continue;
        }
        bool unknown = false, flow = false; /* flow: a stream that goes on had chunks */
        size_t delivered = 0;
        for (size_t c = 0; c < n;) {
            /* the chunks of one stream come together and in order */
            struct proto_sid sid = chunks[c].stream;
            size_t end = c;
            while (end < n && proto_sid_eq(&chunks[end].stream, &sid))
                end++;
            pthread_mutex_lock(&b->mu);
            struct gw_job *j = NULL;
            for (int i = 0; i < b->n_live && !j; i++)
                if (proto_sid_eq(&b->live[i]->sid, &sid))
                    j = b->live[i];
            pthread_mutex_unlock(&b->mu);
            if (!j)
                unknown = true; /* accepted but not registered yet: its chunks come again */
            flow |= j && !chunks[end - 1].finish;
            for (size_t k = c; j && k < end; k++) {
                if (chunks[k].i != j->next_i)
                    continue; /* seen before (a repeated reply) */
                j->next_i++;
                delivered++;
                if (!deliver_chunk(j, &chunks[k]))
                    continue;
                pthread_mutex_lock(&b->mu);
                for (int i = 0; i < b->n_live; i++)
                    if (b->live[i] == j) {
                        live_drop(b, i);
                        break;
                    }
                if (n_fin == cap_fin) {
                    size_t cf = cap_fin ? cap_fin * 2 : 64;
                    struct proto_ack *nf = realloc(fin, cf * sizeof *nf);
                    if (nf) {
                        fin = nf;
                        cap_fin = cf;
                    }
                }
                if (n_fin < cap_fin)
                    fin[n_fin++] = (struct proto_ack){.stream = sid, .from = j->next_i};
                pthread_mutex_unlock(&b->mu);
                job_finish(j);
                j = NULL;
            }
            c = end;
        }
        proto_chunks_free(chunks, n);
        if (unknown && !delivered)
            usleep(1000); /* only chunks of a stream whose job is still registering: do not spin */
        if (flow)
            t_flow = clock_now_ms();
        int64_t gap = t_poll + gap_ms - clock_now_ms();
        if (!final_at_once && delivered && gap > 0)
            usleep((useconds_t)gap * 1000);
    }
    free(acks);
    free(fin);
    free(cancel);
    return NULL;
}

static int db_submit(void *ctx, const struct proto_gen *g, gw_event_fn fn, void *user, struct gw_job **out,
                     struct err *e)
{
    struct daemon_backend *b = ctx;
    *out = NULL;
    struct gw_job *j = calloc(1, sizeof *j);
    if (!j)
        return err_set(e, ERR_NOMEM, "out of memory");
    pthread_mutex_init(&j->mu, NULL);
    j->b = b;
    j->fn = fn;
    j->user = user;
    /* a deep copy: the job's thread sends it after the request is gone (and jansson's counts are not
     * shared safely between threads) */
    int rc = proto_gen_copy(&j->g, g, e);
    if (rc) {
        pthread_mutex_destroy(&j->mu);
        free(j);
        return rc;
    }
    if (j->g.model && !*j->g.model) { /* "" = whatever the daemon serves */
        free(j->g.model);
        j->g.model = NULL;
    }
    if (j->g.tools && !json_array_size(j->g.tools)) {
        json_decref(j->g.tools);
        j->g.tools = NULL;
    }
    if (j->g.template_kwargs && !json_object_size(j->g.template_kwargs)) {
        json_decref(j->g.template_kwargs);
        j->g.template_kwargs = NULL;
    }
    pthread_mutex_lock(&b->mu);
    b->n_jobs++;
    pthread_mutex_unlock(&b->mu);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 256 << 10);
    pthread_t th;
    int prc = pthread_create(&th, &at, job_main, j);
    pthread_attr_destroy(&at);
    if (prc) {
        pthread_mutex_lock(&b->mu);
        b->n_jobs--;
        pthread_mutex_unlock(&b->mu);
        job_free(j);
        return err_set(e, ERR_FULL, "too many requests in flight (cannot start a thread)");
    }
    *out = j;
    return 0;
}

static void db_cancel(void *ctx, struct gw_job *j)
{
    (void)ctx;
    atomic_store(&j->cancel, true);
}

static void db_release(void *ctx, struct gw_job *j)
{
    (void)ctx;
    pthread_mutex_lock(&j->mu);
    j->released = true;
    bool fin = j->finished;
    pthread_mutex_unlock(&j->mu);
    if (fin)
        job_free(j);
}

static void copy_str(char *dst, size_t cap, const char *s) { snprintf(dst, cap, "%s", s ? s : ""); }

static int db_status(void *ctx, struct gw_status *st, struct err *e)
{
    struct daemon_backend *b = ctx;
    struct proto_status ps;
    memset(st, 0, sizeof *st);
    memset(&ps, 0, sizeof ps);
    int rc = pc_status(b->quick, &ps, e);
    if (rc)
        return rc;
    st->ready = ps.ready;
    st->active = ps.active;
    st->queued = ps.queued;
    for (size_t i = 0; i < ps.n_models && st->n_models < 16; i++)
        copy_str(st->models[st->n_models++], sizeof st->models[0], ps.models[i]);
    for (size_t i = 0; i < ps.n_workers && st->n_workers < 16; i++) {
        struct gw_worker_status *w = &st->workers[st->n_workers++];
        const struct proto_worker *p = &ps.workers[i];
        copy_str(w->device, sizeof w->device, p->device);
        copy_str(w->backend, sizeof w->backend, p->backend);
        copy_str(w->state, sizeof w->state, p->state);
        copy_str(w->model, sizeof w->model, p->model);
        w->idx = p->idx;
        w->slots = p->slots;
        w->active = p->active;
        w->queued = p->queued;
        w->n_ctx = p->n_ctx;
        w->mem = p->mem;
    }
    proto_status_free(&ps);
    return 0;
}

static int db_tokenize(void *ctx, const char *model, const char *text, bool add_special, bool parse_special,
                       int32_t **ids, size_t *n, struct err *e)
{
    struct daemon_backend *b = ctx;
    return pc_tokenize(b->pc, model && *model ? model : NULL, text, add_special, parse_special, ids, n, e);
}

static int db_detokenize(void *ctx, const char *model, const int32_t *ids, size_t n, char **text, struct err *e)
{
    struct daemon_backend *b = ctx;
    return pc_detokenize(b->pc, model && *model ? model : NULL, ids, n, text, e);
}

int daemon_backend_open(struct gw_backend *out, const char *url, struct err *e)
{
    memset(out, 0, sizeof *out);
    struct daemon_backend *b = calloc(1, sizeof *b);
    if (!b)
        return err_set(e, ERR_NOMEM, "out of memory");
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    atomic_init(&b->suspect, true); /* not heard from yet */
    pthread_cond_init(&b->poll_cv, NULL);
    while (!b->group) /* tells our streams from another gateway's at the same daemon */
        if (getrandom(&b->group, sizeof b->group, 0) != (ssize_t)sizeof b->group)
            b->group = ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)b;
    /* lazy: the gateway may start before llm170d; /health says 503 meanwhile */
    int rc = pc_open(&b->pc, url, 0, PC_LAZY, e);
    if (!rc)
        rc = pc_open(&b->quick, url, 1500, PC_LAZY, e);
    if (rc) {
        if (b->pc)
            pc_close(b->pc);
        free(b);
        return rc;
    }
    if (pthread_create(&b->poller, NULL, poller_main, b)) {
        pc_close(b->pc);
        pc_close(b->quick);
        free(b);
        return err_set(e, ERR_INTERNAL, "cannot start the poller thread");
    }
    b->poller_started = true;
    out->ctx = b;
    out->status = db_status;
    out->tokenize = db_tokenize;
    out->detokenize = db_detokenize;
    out->submit = db_submit;
    out->cancel = db_cancel;
    out->release = db_release;
    return 0;
}

void daemon_backend_close(struct gw_backend *be)
{
    struct daemon_backend *b = be->ctx;
    if (!b)
        return;
    /* jobs were canceled by the HTTP layer; wait for their threads */
    pthread_mutex_lock(&b->mu);
    while (b->n_jobs > 0)
        pthread_cond_wait(&b->cv, &b->mu);
    b->quit = true;
    pthread_cond_broadcast(&b->poll_cv);
    pthread_mutex_unlock(&b->mu);
    if (b->poller_started)
        pthread_join(b->poller, NULL);
    free(b->live);
    pthread_cond_destroy(&b->poll_cv);
    pc_close(b->pc);
    pc_close(b->quick);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
    be->ctx = NULL;
}
