/* front.c — the client side of llm170d: a REP socket served by a pool of
 * threads, one nng context each, and the open streams they serve.
 *
 * A generate is forwarded to a worker and answered once the worker accepts
 * it; its tokens then collect in the stream until the client's "next" long
 * poll picks them up (see proto/README.md). Chunks stay until a later poll's
 * "from" acknowledges them, so a lost reply loses nothing. */
#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../proto/client.h"
#include "../proto/wire.h"
#include "daemon.h"

#define ACCEPT_TIMEOUT_MS 15000 /* a worker answers a generate (tokenize + admit) within this */
#define CALL_TIMEOUT_MS 15000
#define MAX_WAIT_MS 60000        /* longest long poll */
#define DONE_GRACE_MS 5000       /* a finished stream stays this long after its last chunk went out */
#define MAX_CHUNKS_PER_REPLY 4096

/* ---------------------------------------------------------------- streams */

struct stream *stream_find(struct daemon *d, uint64_t id)
{
    for (struct stream *s = d->streams; s; s = s->next)
        if (s->id == id)
            return s;
    return NULL;
}

/* The stream a client names by its id, if that client's connection (pipe)
 * owns it: another local client that guesses or sniffs an id gets "unknown
 * stream", exactly as for an id that never existed, and the stream is left
 * alone. mu held. */
static struct stream *stream_find_key(struct daemon *d, const struct proto_sid *key, uint32_t pipe)
{
    if (proto_sid_is_zero(key))
        return NULL;
    for (struct stream *s = d->streams; s; s = s->next)
        if (proto_sid_eq(&s->key, key))
            return s->pipe == pipe ? s : NULL;
    return NULL;
}

/* 128 fresh random bits: the id clients know a stream by. A counter would
 * name every other client's stream. Never zero (= none), never one in use.
 * mu held. */
static int stream_new_key(struct daemon *d, struct proto_sid *key)
{
    for (int tries = 0; tries < 8; tries++) {
        size_t got = 0;
        while (got < sizeof key->b) {
            ssize_t n = getrandom(key->b + got, sizeof key->b - got, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return -1;
            got += (size_t)n;
        }
        bool used = false;
        for (struct stream *s = d->streams; s && !used; s = s->next)
            used = proto_sid_eq(&s->key, key);
        if (!proto_sid_is_zero(key) && !used)
            return 0;
    }
    return -1;
}

static struct stream *stream_new(struct daemon *d, int kind, int worker, uint32_t pipe)
{
    struct stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    if (stream_new_key(d, &s->key)) {
        free(s);
        return NULL; /* no randomness: refuse the stream rather than hand out a guessable id */
    }
    s->id = ++d->next_id; /* the worker's request id: never leaves the daemon */
    s->pipe = pipe;
    s->kind = kind;
    s->state = S_PENDING;
    s->worker = worker;
    s->t_poll_ms = d_now_ms();
    proto_msg_init(&s->reply, PT_NONE);
    pthread_cond_init(&s->cv, &d->cv_attr);
    s->next = d->streams;
    d->streams = s;
    return s;
}

static void stream_free(struct daemon *d, struct stream *s)
{
    for (struct stream **p = &d->streams; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    for (size_t i = 0; i < s->n; i++)
        proto_chunk_free(&s->q[i]);
    free(s->q);
    proto_msg_free(&s->reply);
    pthread_cond_destroy(&s->cv);
    free(s);
}

bool stream_append(struct stream *s, struct proto_chunk *c)
{
    /* the caller holds d->mu */
    if (s->state == S_DONE) {
        proto_chunk_free(c);
        return false;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        struct proto_chunk *q = realloc(s->q, cap * sizeof *q);
        if (!q) {
            proto_chunk_free(c);
            return false; /* the client sees a gap-free but shorter stream; its final chunk still comes */
        }
        s->q = q;
        s->cap = cap;
    }
    s->q[s->n] = *c;
    s->q[s->n].i = s->base + s->n; /* our numbering: gap-free by construction */
    memset(c, 0, sizeof *c);
    if (s->q[s->n].finish)
        s->state = S_DONE;
    s->n++;
    return true;
}

void stream_push(struct daemon *d, struct stream *s, struct proto_chunk *c)
{
    if (!stream_append(s, c))
        return;
    pthread_cond_broadcast(&s->cv);
    if (s->group)
        pthread_cond_broadcast(&d->poll_cv);
}

void stream_fail(struct daemon *d, struct stream *s, int errc, const char *msg)
{
    if (s->state == S_DONE)
        return;
    if (s->state == S_PENDING) {
        s->errc = errc;
        snprintf(s->errmsg, sizeof s->errmsg, "%s", msg);
        s->state = S_DONE;
        pthread_cond_broadcast(&s->cv);
        return;
    }
    struct proto_chunk c = {.token = -1, .text = strdup(""), .finish = PF_ERROR, .errc = errc,
                            .message = strdup(msg)};
    stream_push(d, s, &c);
}

void streams_fail_worker(struct daemon *d, int idx, int errc, const char *msg)
{
    for (struct stream *s = d->streams; s; s = s->next) {
        if (s->worker != idx || s->state == S_DONE)
            continue;
        if (s->kind == S_CALL) {
            proto_error(&s->reply, s->id, PE_UNAVAILABLE, NULL);
            s->reply.message = strdup(msg);
            s->state = S_DONE;
            pthread_cond_broadcast(&s->cv);
        } else {
            /* Not yet accepted, or accepted but still queued / in prefill (no
             * chunk produced): it never ran, so the client may simply retry,
             * and says so with 503 — the same answer whichever side of the
             * accept the worker died on. Only a stream that already produced
             * output ends with the caller's class (a fault mid-request). */
            bool started = s->base + s->n > 0;
            stream_fail(d, s, started ? errc : PE_UNAVAILABLE, msg);
        }
    }
}

/* Streams still running, or finished with chunks a client is still
 * collecting (polled lately): what a drain waits for. */
int streams_open(struct daemon *d)
{
    int n = 0;
    int64_t now = d_now_ms();
    for (struct stream *s = d->streams; s; s = s->next)
        if (s->kind == S_STREAM && !s->canceled &&
            (s->state != S_DONE || (s->n && !s->t_done_ms && now - s->t_poll_ms < 2000)))
            n++;
    return n;
}

static void send_cancel(struct daemon *d, int worker, uint64_t id)
{
    struct proto_msg m;
    struct err e;
    proto_msg_init(&m, PT_CANCEL);
    m.id = id;
    workers_send(d, worker, &m, &e);
}

void streams_tick(struct daemon *d)
{
    uint64_t cancel_id[64];
    int cancel_w[64], n_cancel = 0;
    pthread_mutex_lock(&d->mu);
    int64_t now = d_now_ms();
    for (struct stream *s = d->streams, *next; s; s = next) {
        next = s->next;
        if (s->waiters || s->kind != S_STREAM)
            continue;
        if ((s->t_done_ms && now - s->t_done_ms > DONE_GRACE_MS) ||
            (s->canceled && s->state == S_DONE && now - s->t_poll_ms > 1000)) {
            stream_free(d, s);
        } else if (now - s->t_poll_ms > d->cfg.stream_idle_ms) {
            if (s->state != S_DONE) {
                d_log("stream %llu: not polled for %.1f s; canceled", (unsigned long long)s->id,
                      d->cfg.stream_idle_ms / 1000.0);
                if (n_cancel < 64) {
                    cancel_id[n_cancel] = s->id;
                    cancel_w[n_cancel++] = s->worker;
                }
            }
            stream_free(d, s);
        }
    }
    pthread_mutex_unlock(&d->mu);
    for (int i = 0; i < n_cancel; i++)
        send_cancel(d, cancel_w[i], cancel_id[i]);
}

/* Wait on cv until `until` (ms, monotonic clock), at most 200 ms. mu held. */
static void wait_cv(struct daemon *d, pthread_cond_t *cv, int64_t until)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ms = until - d_now_ms();
    if (ms <= 0)
        return;
    if (ms > 200)
        ms = 200; /* wake up now and then to notice shutdown */
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(cv, &d->mu, &ts);
}

/* Wait for a change of s until `until`. mu held. */
static void wait_until(struct daemon *d, struct stream *s, int64_t until) { wait_cv(d, &s->cv, until); }

/* ---------------------------------------------------------------- handlers */

static void reply_error(struct proto_msg *rep, uint64_t id, int errc, const char *msg)
{
    proto_error(rep, id, errc, NULL);
    rep->message = strdup(msg);
}

/* "unknown stream <id>": for ids that never existed, expired, and those of
 * another connection alike (no way to tell which ids are live). */
static void reply_unknown(struct proto_msg *rep, const struct proto_msg *req)
{
    char hex[2 * PROTO_SID_BYTES + 1], msg[128];
    proto_sid_hex(&req->stream, hex);
    snprintf(msg, sizeof msg, "unknown stream %s (finished or expired)", hex);
    reply_error(rep, 0, PE_NOT_FOUND, msg);
}

static void h_status(struct daemon *d, struct proto_msg *rep)
{
    proto_msg_init(rep, PT_STATUS_REPLY);
    struct proto_status *st = &rep->status;
    st->version = strdup(D_VERSION);
    pthread_mutex_lock(&d->mu);
    int64_t now = d_now_ms();
    st->uptime_s = (uint64_t)((now - d->t0_ms) / 1000);
    st->workers = calloc((size_t)d->n_workers, sizeof *st->workers);
    st->models = calloc(1, sizeof *st->models);
    struct err e;
    for (int i = 0; st->workers && i < d->n_workers; i++) {
        struct worker *w = &d->w[i];
        proto_worker_copy(&st->workers[i], &w->info, &e);
        free(st->workers[i].state);
        bool alive = worker_alive(d, w, now);
        /* a ready worker that stopped answering pings says so (`llm170 ps`,
         * metrics) until it answers again or the ping timeout restarts it */
        st->workers[i].state = strdup(w->state == W_READY && !alive ? "unresponsive" : wstate_name(w->state));
        st->workers[i].idx = i;
        st->workers[i].pid = (int32_t)w->pid;
        st->workers[i].restarts = w->restarts;
        st->n_workers++;
        /* ready = takes new requests now: not while draining, and not a
         * worker that stopped answering pings (SIGSTOPped, hung) even before
         * the ping timeout kills it */
        if (w->state == W_READY && alive && !d->stop) {
            st->ready = true;
            st->active += w->info.active;
            st->queued += w->info.queued;
        }
    }
    if (st->ready && st->models) {
        st->models[0] = strdup(d->cfg.model_name);
        st->n_models = 1;
    }
    pthread_mutex_unlock(&d->mu);
}

static void h_generate(struct daemon *d, struct proto_msg *req, struct proto_msg *rep, uint32_t pipe)
{
    struct err e;
    int idx;
    pthread_mutex_lock(&d->mu);
    if (d->stop) {
        pthread_mutex_unlock(&d->mu);
        reply_error(rep, 0, PE_UNAVAILABLE, "llm170d is shutting down");
        return;
    }
    if (workers_pick(d, req->gen.model, &idx, &e)) {
        pthread_mutex_unlock(&d->mu);
        reply_error(rep, 0, proto_errc_from_err(e.code), e.msg);
        return;
    }
    struct stream *s = stream_new(d, S_STREAM, idx, pipe);
    if (!s) {
        pthread_mutex_unlock(&d->mu);
        reply_error(rep, 0, PE_INTERNAL, "cannot make a stream (out of memory or randomness)");
        return;
    }
    uint64_t id = s->id;
    struct proto_sid key = s->key;
    s->group = req->gen.group;
    s->waiters++;
    pthread_mutex_unlock(&d->mu);

    req->id = id;
    int rc = workers_send(d, idx, req, &e);

    pthread_mutex_lock(&d->mu);
    int64_t deadline = d_now_ms() + ACCEPT_TIMEOUT_MS;
    if (rc) {
        stream_fail(d, s, PE_UNAVAILABLE, e.msg);
    } else {
        while (s->state == S_PENDING && d_now_ms() < deadline && d->stop < 2)
            wait_until(d, s, deadline);
    }
    s->waiters--;
    if (s->state == S_PENDING) {
        stream_free(d, s);
        pthread_mutex_unlock(&d->mu);
        send_cancel(d, idx, id);
        reply_error(rep, 0, PE_TIMEOUT, "worker did not accept the request in time");
        return;
    }
    if (s->state == S_DONE && s->errc) { /* refused (queue full, too long …) or its worker died */
        reply_error(rep, 0, s->errc, s->errmsg);
        stream_free(d, s);
        pthread_mutex_unlock(&d->mu);
        return;
    }
    s->t_poll_ms = d_now_ms();
    pthread_mutex_unlock(&d->mu);
    proto_msg_init(rep, PT_ACCEPTED);
    rep->stream = key;
    rep->worker.idx = idx;
}

static void h_next(struct daemon *d, struct proto_msg *req, struct proto_msg *rep, uint32_t pipe)
{
    pthread_mutex_lock(&d->mu);
    struct stream *s = stream_find_key(d, &req->stream, pipe);
    if (!s || s->kind != S_STREAM) {
        pthread_mutex_unlock(&d->mu);
        reply_unknown(rep, req);
        return;
    }
    /* acknowledge what the client has */
    size_t drop = 0;
    while (drop < s->n && s->q[drop].i < req->from)
        proto_chunk_free(&s->q[drop++]);
    if (drop) {
        memmove(s->q, s->q + drop, (s->n - drop) * sizeof *s->q);
        s->n -= drop;
        s->base += drop;
    }
    s->t_poll_ms = d_now_ms();
    int wait = req->wait_ms < MAX_WAIT_MS ? req->wait_ms : MAX_WAIT_MS;
    int64_t deadline = d_now_ms() + wait;
    s->waiters++;
    while (s->n == 0 && s->state != S_DONE && d_now_ms() < deadline && d->stop < 2)
        wait_until(d, s, deadline);
    s->waiters--;
    s->t_poll_ms = d_now_ms();
    proto_msg_init(rep, PT_CHUNKS);
    rep->stream = s->key;
    size_t n = s->n < MAX_CHUNKS_PER_REPLY ? s->n : MAX_CHUNKS_PER_REPLY;
    rep->chunks = calloc(n + 1, sizeof *rep->chunks);
    struct err e;
    for (size_t i = 0; rep->chunks && i < n; i++) {
        if (proto_chunk_copy(&rep->chunks[i], &s->q[i], &e))
            break;
        rep->n_chunks++;
        if (s->q[i].finish && !s->t_done_ms)
            s->t_done_ms = d_now_ms();
    }
    /* done: the stream ended and this reply holds everything it still had */
    rep->done = s->state == S_DONE && rep->n_chunks == s->n;
    pthread_mutex_unlock(&d->mu);
}

/* Drop the chunks of s below `from` (the client has them). mu held. */
static void stream_ack(struct stream *s, uint64_t from)
{
    size_t drop = 0;
    while (drop < s->n && s->q[drop].i < from)
        proto_chunk_free(&s->q[drop++]);
    if (drop) {
        memmove(s->q, s->q + drop, (s->n - drop) * sizeof *s->q);
        s->n -= drop;
        s->base += drop;
    }
}

/* poll: the chunks of every stream of one group in one reply, so a client
 * with many streams (the gateway) makes one round trip per wake-up, not one
 * per stream and token. With hold_ms, chunks in the middle of a stream wait
 * up to that long so a reply carries several scheduler steps, but a final
 * chunk is answered at once (with only the streams that ended): the client's
 * next request, and the slot it frees, wait for no poll interval. */
static void h_poll(struct daemon *d, struct proto_msg *req, struct proto_msg *rep, uint32_t pipe)
{
    uint64_t group = req->id;
    pthread_mutex_lock(&d->mu);
    for (size_t k = 0; k < req->n_acks; k++) {
        struct stream *s = stream_find_key(d, &req->acks[k].stream, pipe);
        if (!s || s->kind != S_STREAM || s->group != group)
            continue;
        stream_ack(s, req->acks[k].from);
        if (s->state == S_DONE && s->n == 0 && !s->waiters)
            stream_free(d, s); /* its final chunk arrived: nothing left to keep */
    }
    int64_t t0 = d_now_ms();
    int wait = req->wait_ms < MAX_WAIT_MS ? req->wait_ms : MAX_WAIT_MS;
    int hold = req->hold_ms < wait ? req->hold_ms : wait;
    int64_t deadline = t0 + wait, hold_until = t0 + hold;
    bool only_ended = false; /* answer with the ended streams alone: the others' chunks keep collecting */
    for (;;) {
        int64_t now = d_now_ms();
        bool any = false, ended = false;
        for (struct stream *s = d->streams; s; s = s->next)
            if (s->group == group && s->pipe == pipe && s->kind == S_STREAM) {
                s->t_poll_ms = now;
                any |= s->n > 0;
                ended |= s->n > 0 && s->state == S_DONE;
            }
        if (d->stop >= 2 || now >= deadline || (any && now >= hold_until))
            break;
        if (ended) {
            only_ended = true;
            break;
        }
        wait_cv(d, &d->poll_cv, any ? hold_until : deadline);
    }
    proto_msg_init(rep, PT_CHUNKS);
    rep->id = 0;
    size_t total = 0;
    for (struct stream *s = d->streams; s; s = s->next)
        if (s->group == group && s->pipe == pipe && s->kind == S_STREAM && (!only_ended || s->state == S_DONE))
            total += s->n;
    if (total > MAX_CHUNKS_PER_REPLY)
        total = MAX_CHUNKS_PER_REPLY;
    rep->chunks = calloc(total + 1, sizeof *rep->chunks);
    struct err e;
    for (struct stream *s = d->streams; s && rep->chunks; s = s->next) {
        if (s->group != group || s->pipe != pipe || s->kind != S_STREAM || (only_ended && s->state != S_DONE))
            continue;
        for (size_t i = 0; i < s->n && rep->n_chunks < total; i++) {
            if (proto_chunk_copy(&rep->chunks[rep->n_chunks], &s->q[i], &e))
                break;
            rep->chunks[rep->n_chunks++].stream = s->key;
            if (s->q[i].finish && !s->t_done_ms)
                s->t_done_ms = d_now_ms();
        }
    }
    pthread_mutex_unlock(&d->mu);
}

static void h_cancel(struct daemon *d, struct proto_msg *req, struct proto_msg *rep, uint32_t pipe)
{
    pthread_mutex_lock(&d->mu);
    struct stream *s = NULL;
    for (struct stream *x = d->streams; x && !s; x = x->next)
        if (!proto_sid_is_zero(&req->stream) && proto_sid_eq(&x->key, &req->stream))
            s = x;
    if (s && s->pipe != pipe) {
        /* another client's stream: refused, and the stream runs on */
        pthread_mutex_unlock(&d->mu);
        reply_unknown(rep, req);
        return;
    }
    int worker = -1;
    uint64_t id = s ? s->id : 0;
    if (s && s->kind == S_STREAM) {
        s->canceled = true;
        if (s->state != S_DONE)
            worker = s->worker;
        s->t_poll_ms = d_now_ms();
    }
    pthread_mutex_unlock(&d->mu);
    if (worker >= 0) {
        struct proto_msg m;
        struct err e;
        proto_msg_init(&m, PT_CANCEL);
        m.id = id;
        if (workers_send(d, worker, &m, &e)) {
            /* the worker is gone: end the stream here */
            pthread_mutex_lock(&d->mu);
            if ((s = stream_find_key(d, &req->stream, pipe))) {
                struct proto_chunk c = {.token = -1, .text = strdup(""), .finish = PF_CANCEL};
                stream_push(d, s, &c);
            }
            pthread_mutex_unlock(&d->mu);
        }
    }
    proto_msg_init(rep, PT_OK); /* canceling a finished or unknown stream is not an error */
    rep->stream = req->stream;
}

/* tokenize / detokenize: forwarded to a worker, answered with its reply. */
static void h_call(struct daemon *d, struct proto_msg *req, struct proto_msg *rep, uint32_t pipe)
{
    struct err e;
    int idx;
    pthread_mutex_lock(&d->mu);
    if (workers_pick(d, req->gen.model, &idx, &e)) {
        pthread_mutex_unlock(&d->mu);
        reply_error(rep, 0, proto_errc_from_err(e.code), e.msg);
        return;
    }
    struct stream *s = stream_new(d, S_CALL, idx, pipe);
    if (!s) {
        pthread_mutex_unlock(&d->mu);
        reply_error(rep, 0, PE_INTERNAL, "out of memory");
        return;
    }
    s->waiters++;
    req->id = s->id;
    pthread_mutex_unlock(&d->mu);
    int rc = workers_send(d, idx, req, &e);
    pthread_mutex_lock(&d->mu);
    int64_t deadline = d_now_ms() + CALL_TIMEOUT_MS;
    while (!rc && s->state != S_DONE && d_now_ms() < deadline && d->stop < 2)
        wait_until(d, s, deadline);
    s->waiters--;
    if (rc) {
        reply_error(rep, 0, PE_UNAVAILABLE, e.msg);
    } else if (s->state != S_DONE) {
        reply_error(rep, 0, PE_TIMEOUT, "worker did not answer in time");
    } else {
        *rep = s->reply;
        proto_msg_init(&s->reply, PT_NONE);
        rep->id = 0;
    }
    stream_free(d, s);
    pthread_mutex_unlock(&d->mu);
}

/* Why the peer policy refuses a connection: the log line and the reply to each of its requests say it alike. */
static const char REFUSED_WHY[] =
    "not root, not the service user, not in an allowed group (allow_group) nor allow_uids";

/* Mark a connection refused; only when that fails (out of memory) is it
 * closed here, the one case left that takes the path pipeset.h warns of. */
static void front_refuse(struct daemon *d, nng_pipe p)
{
    int id = nng_pipe_id(p);
    if (id <= 0 || !pipeset_add(&d->refused, (uint32_t)id))
        nng_pipe_close(p);
}

/* ---------------------------------------------------------------- threads */

static void *front_main(void *arg)
{
    struct daemon *d = arg;
    nng_ctx ctx;
    if (nng_ctx_open(&ctx, d->front) != 0)
        return NULL;
    while (!d->quit_threads) {
        struct proto_msg req, rep;
        struct err e;
        /* no timeout (a deadline on each of the pool's waits keeps nng's
         * expiry thread busy): front_stop closes the socket, which ends it */
        uint32_t pipe = 0; /* the client connection it came on: owner of the streams it creates */
        int rc = proto_ctx_recv_pipe(ctx, &req, NNG_DURATION_INFINITE, &pipe, &e);
        if (rc == ERR_IO && proto_timed_out(&e))
            continue;
        if (rc == ERR_IO)
            break;
        proto_msg_init(&rep, PT_NONE);
        if (pipeset_has(&d->refused, pipe)) {
            char msg[160];
            snprintf(msg, sizeof msg, "llm170d refuses this user: %s", REFUSED_WHY);
            reply_error(&rep, 0, PE_FORBIDDEN, msg);
        } else if (rc) {
            reply_error(&rep, req.id, rc == ERR_UNSUPPORTED ? PE_VERSION : PE_BAD_REQUEST, e.msg);
        } else {
            switch (req.type) {
            case PT_STATUS: h_status(d, &rep); break;
            case PT_GENERATE: h_generate(d, &req, &rep, pipe); break;
            case PT_NEXT: h_next(d, &req, &rep, pipe); break;
            case PT_POLL: h_poll(d, &req, &rep, pipe); break;
            case PT_CANCEL: h_cancel(d, &req, &rep, pipe); break;
            case PT_TOKENIZE: case PT_DETOKENIZE: h_call(d, &req, &rep, pipe); break;
            default: {
                char msg[96];
                snprintf(msg, sizeof msg, "'%s' is not a request llm170d serves", proto_type_name(req.type));
                reply_error(&rep, req.id, PE_BAD_REQUEST, msg);
            }
            }
        }
        if (proto_ctx_send(ctx, &rep, 2000, &e) && !d->quit_threads)
            d_log("reply to a client failed: %s", e.msg);
        proto_msg_free(&req);
        proto_msg_free(&rep);
    }
    nng_ctx_close(ctx);
    return NULL;
}

/* A new client connection: on ipc://, only peers the policy allows (peer.h)
 * get anything served; the others' pipes go into d->refused, and each request
 * on them is answered "forbidden" (pipeset.h says why they are not closed
 * here). Runs on an nng thread before the pipe is used. */
static void front_on_pipe(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct daemon *d = arg;
    (void)ev;
    if (strncmp(d->cfg.socket, "ipc://", 6))
        return; /* tcp:// carries no credentials: the operator chose to open it */
    uint64_t uid, gid, pid;
    if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid) || nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_GID, &gid)) {
        d_log("client connection refused: cannot read its credentials");
        front_refuse(d, p);
        return;
    }
    if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_PID, &pid))
        pid = 0;
    gid_t groups[256];
    int n = pid ? peer_proc_groups((pid_t)pid, groups, 256) : -1;
    if (peer_allowed(&d->peers, (uid_t)uid, (gid_t)gid, groups, n > 0 ? n : 0))
        return;
    front_refuse(d, p);
    int64_t now = d_now_ms(), last = atomic_load(&d->t_refused_log_ms);
    if (now - last < 1000 || !atomic_compare_exchange_strong(&d->t_refused_log_ms, &last, now)) {
        atomic_fetch_add(&d->n_refused_quiet, 1);
        return;
    }
    int quiet = atomic_exchange(&d->n_refused_quiet, 0);
    char more[64] = "";
    if (quiet)
        snprintf(more, sizeof more, " (%d more refused since the last such line)", quiet);
    d_log("client connection from uid %llu (gid %llu, pid %llu) refused: %s%s", (unsigned long long)uid,
          (unsigned long long)gid, (unsigned long long)pid, REFUSED_WHY, more);
}

/* A connection went away: forget it if it was refused. */
static void front_on_pipe_gone(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct daemon *d = arg;
    (void)ev;
    int id = nng_pipe_id(p);
    if (id > 0)
        pipeset_del(&d->refused, (uint32_t)id);
}

int d_mkdir_mode(const char *dir, mode_t mode, struct err *e)
{
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0755); /* parents as a plain mkdir -p would */
            *p = '/';
        }
    if (mkdir(tmp, mode) == 0) {
        /* ours: exactly this mode, whatever the umask */
        if (chmod(tmp, mode))
            return err_set(e, ERR_IO, "cannot set the mode of '%s': %s", tmp, strerror(errno));
        return 0;
    }
    if (errno != EEXIST)
        return err_set(e, ERR_IO, "cannot create socket directory '%s': %s", tmp, strerror(errno));
    return 0; /* an existing directory (systemd's RuntimeDirectory, /tmp) keeps the mode its owner gave it */
}

int front_start(struct daemon *d, struct err *e)
{
    bool ipc = !strncmp(d->cfg.socket, "ipc://", 6);
    if (ipc) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s", d->cfg.socket + 6);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
            *slash = 0;
            /* a user's daemon: only that user; the system one: its group too */
            const char *xdg = getenv("XDG_RUNTIME_DIR");
            bool user = xdg && *xdg && !strncmp(dir, xdg, strlen(xdg)) && geteuid() != 0;
            int rc = d_mkdir_mode(dir, user ? 0700 : 0750, e);
            if (rc)
                return rc;
        }
    }
    int rc = peer_policy_init(&d->peers, geteuid(), getegid(), d->cfg.allow_group, d->cfg.allow_uids, e);
    if (rc)
        return rc;
    int rv = nng_rep0_open(&d->front);
    if (rv)
        return err_set(e, ERR_IO, "cannot open the client socket: %s", nng_strerror(rv));
    nng_socket_set_size(d->front, NNG_OPT_RECVMAXSZ, PROTO_MAX_MSG);
    if ((rv = nng_pipe_notify(d->front, NNG_PIPE_EV_ADD_PRE, front_on_pipe, d)) != 0 ||
        (rv = nng_pipe_notify(d->front, NNG_PIPE_EV_REM_POST, front_on_pipe_gone, d)) != 0)
        return err_set(e, ERR_IO, "cannot watch client connections: %s", nng_strerror(rv));
    nng_listener l;
    if ((rv = nng_listener_create(&l, d->front, d->cfg.socket)) != 0)
        return err_set(e, ERR_IO, "cannot listen on '%s': %s", d->cfg.socket, nng_strerror(rv));
    /* rw for the owner and the group, nothing for others (the shipped unit
     * once ran with UMask=0000, which made it srwxrwxrwx) */
    if (ipc && (rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, 0660)) != 0)
        return err_set(e, ERR_IO, "cannot set the mode of '%s': %s", d->cfg.socket, nng_strerror(rv));
    mode_t old = umask(0177); /* no window in which the file is more open than that */
    rv = nng_listener_start(l, 0);
    umask(old);
    if (rv)
        return err_set(e, ERR_IO, "cannot listen on '%s': %s", d->cfg.socket, nng_strerror(rv));
    d->front_threads = calloc((size_t)d->cfg.n_client_threads, sizeof *d->front_threads);
    if (!d->front_threads)
        return err_set(e, ERR_NOMEM, "out of memory");
    for (int i = 0; i < d->cfg.n_client_threads; i++) {
        if (pthread_create(&d->front_threads[i], NULL, front_main, d))
            return err_set(e, ERR_INTERNAL, "cannot start client thread %d", i);
        d->n_front_threads++;
    }
    return 0;
}

void front_stop(struct daemon *d)
{
    d->quit_threads = 1;
    pthread_mutex_lock(&d->mu);
    for (struct stream *s = d->streams; s; s = s->next)
        pthread_cond_broadcast(&s->cv);
    pthread_cond_broadcast(&d->poll_cv);
    pthread_mutex_unlock(&d->mu);
    nng_close(d->front); /* ends the pool's receives */
    for (int i = 0; i < d->n_front_threads; i++)
        pthread_join(d->front_threads[i], NULL);
    free(d->front_threads);
    while (d->streams)
        stream_free(d, d->streams);
}
