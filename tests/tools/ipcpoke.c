/* ipcpoke — raw protocol moves against llm170d's sockets, for the IPC
 * attack tests (tests/redteam/ipc.sh). Each mode prints one line saying what
 * happened; the exit status is 0 when the move got through, 1 when it was
 * refused or failed, 2 on bad usage.
 *
 *   ipcpoke victim URL HOLD_MS MAX   generate (max MAX tokens), print "id=HEX" (its stream id),
 *                                    wait HOLD_MS, then read the stream to its end:
 *                                    "finish=REASON chunks=K" or "error: …"
 *   ipcpoke gen URL                  generate and read to the end ("generated N chunks: TEXT")
 *   ipcpoke next URL ID              poll stream ID once ("got K chunks" or "error: …")
 *   ipcpoke cancel URL ID            cancel stream ID ("ok" or "error: …")
 *   ipcpoke fakeworker URL SECS      dial a worker socket as a fake worker for SECS s:
 *                                    announce itself (model FAKE, 99 slots), answer pings,
 *                                    answer every generate with the text INJECTED;
 *                                    prints "connected N times, got M messages from the daemon" */
#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../proto/client.h"
#include "../../proto/wire.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One raw request/reply on a fresh REQ socket (a connection of its own). */
static int raw_call(const char *url, struct proto_msg *req, struct proto_msg *rep, struct err *e)
{
    nng_socket s;
    proto_msg_init(rep, PT_NONE);
    int rv = nng_req0_open(&s);
    if (rv)
        return err_set(e, ERR_IO, "cannot open a socket: %s", nng_strerror(rv));
    if ((rv = nng_dial(s, url, NULL, 0)) != 0) {
        nng_close(s);
        return err_set(e, ERR_IO, "cannot connect: %s", nng_strerror(rv));
    }
    nng_ctx ctx;
    nng_ctx_open(&ctx, s);
    int rc = proto_ctx_send(ctx, req, 3000, e);
    if (!rc)
        rc = proto_ctx_recv(ctx, rep, 3000, e);
    nng_ctx_close(ctx);
    nng_close(s);
    return rc;
}

static int stream_to_end(struct pc_stream *s, char *text, size_t cap, int *finish, size_t *chunks, struct err *e)
{
    int64_t end = now_ms() + 30000;
    *finish = PF_NONE;
    *chunks = 0;
    if (text)
        text[0] = 0;
    while (!pc_stream_done(s) && now_ms() < end) {
        struct proto_chunk *ch;
        size_t n;
        int rc = pc_next(s, 500, &ch, &n, e);
        if (rc)
            return rc;
        for (size_t i = 0; i < n; i++) {
            if (text && ch[i].text)
                strncat(text, ch[i].text, cap - strlen(text) - 1);
            if (ch[i].finish)
                *finish = ch[i].finish;
        }
        *chunks += n;
        proto_chunks_free(ch, n);
    }
    return 0;
}

static int victim(const char *url, int hold_ms, int max)
{
    struct pc_client *c;
    struct err e;
    if (pc_open(&c, url, 3000, 0, &e)) {
        printf("error: %s\n", e.msg);
        return 1;
    }
    struct proto_gen g;
    proto_gen_init(&g);
    g.prompt = "Once upon a time";
    g.max_tokens = max;
    g.set |= PG_MAX_TOKENS | PG_TEMPERATURE;
    g.temperature = 0;
    g.ignore_eos = true;
    struct pc_stream *s;
    if (pc_generate(c, &g, &s, &e)) {
        printf("error: %s\n", e.msg);
        pc_close(c);
        return 1;
    }
    struct proto_sid sid = pc_stream_id(s);
    char hex[2 * PROTO_SID_BYTES + 1];
    proto_sid_hex(&sid, hex);
    printf("id=%s\n", hex);
    fflush(stdout);
    usleep((useconds_t)hold_ms * 1000);
    int finish;
    size_t n;
    int rc = stream_to_end(s, NULL, 0, &finish, &n, &e);
    if (rc)
        printf("error: %s\n", e.msg);
    else
        printf("finish=%s chunks=%zu\n", finish ? proto_finish_name(finish) : "none", n);
    pc_stream_free(s);
    pc_close(c);
    return rc || finish == PF_NONE || finish == PF_CANCEL || finish == PF_ERROR;
}

static int gen(const char *url)
{
    struct pc_client *c;
    struct err e;
    if (pc_open(&c, url, 3000, 0, &e)) {
        printf("error: %s\n", e.msg);
        return 1;
    }
    struct proto_gen g;
    proto_gen_init(&g);
    g.prompt = "Once upon a time";
    g.max_tokens = 8;
    g.set |= PG_MAX_TOKENS;
    struct pc_stream *s;
    int rc = pc_generate(c, &g, &s, &e);
    if (rc) {
        printf("error: %s\n", e.msg);
        pc_close(c);
        return 1;
    }
    char text[512];
    int finish;
    size_t n;
    rc = stream_to_end(s, text, sizeof text, &finish, &n, &e);
    for (char *p = text; *p; p++)
        if (*p == '\n')
            *p = ' ';
    if (rc)
        printf("error: %s\n", e.msg);
    else
        printf("generated %zu chunks: %.80s\n", n, text);
    pc_stream_free(s);
    pc_close(c);
    return rc ? 1 : 0;
}

static int next_or_cancel(const char *url, const char *id, bool cancel)
{
    struct proto_msg req, rep;
    struct err e;
    proto_msg_init(&req, cancel ? PT_CANCEL : PT_NEXT);
    if (proto_sid_parse(id, &req.stream, &e)) {
        printf("error: %s\n", e.msg);
        return 2;
    }
    req.from = 0;
    req.wait_ms = 200;
    if (raw_call(url, &req, &rep, &e)) {
        printf("error: %s\n", e.msg);
        return 1;
    }
    int rc = 0;
    if (rep.type == PT_ERROR) {
        printf("error: %s: %s\n", proto_errc_name(rep.errc), rep.message ? rep.message : "");
        rc = 1;
    } else if (rep.type == PT_CHUNKS) {
        char text[128] = "";
        for (size_t i = 0; i < rep.n_chunks; i++)
            if (rep.chunks[i].text)
                strncat(text, rep.chunks[i].text, sizeof text - strlen(text) - 1);
        for (char *p = text; *p; p++)
            if (*p == '\n')
                *p = ' ';
        printf("got %zu chunks of the stream: %.60s\n", rep.n_chunks, text);
    } else {
        printf("%s\n", proto_type_name(rep.type));
    }
    proto_msg_free(&rep);
    return rc;
}

static atomic_int n_pipes;
static void on_pipe(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    (void)p, (void)arg;
    if (ev == NNG_PIPE_EV_ADD_POST)
        atomic_fetch_add(&n_pipes, 1);
}

static int fakeworker(const char *url, int secs)
{
    nng_socket s;
    if (nng_pair0_open(&s))
        return 1;
    nng_pipe_notify(s, NNG_PIPE_EV_ADD_POST, on_pipe, NULL);
    nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 10);
    nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 20);
    int rv = nng_dial(s, url, NULL, NNG_FLAG_NONBLOCK); /* keeps redialing in the background */
    if (rv) {
        printf("cannot dial: %s; connected 0 times, got 0 messages from the daemon\n", nng_strerror(rv));
        nng_close(s);
        return 1;
    }
    int64_t end = now_ms() + (int64_t)secs * 1000;
    int seen = 0, gens = 0, msgs = 0;
    struct err e;
    while (now_ms() < end) {
        int np = atomic_load(&n_pipes);
        if (np > seen) { /* a new connection got through: claim the slot */
            seen = np;
            struct proto_msg r;
            proto_msg_init(&r, PT_READY);
            r.worker.model = "FAKE";
            r.worker.backend = "fake";
            r.worker.device = "cpu";
            r.worker.slots = 99;
            r.worker.n_ctx = 64;
            proto_send(s, &r, 500, &e);
        }
        struct proto_msg m;
        if (proto_recv(s, &m, 100, &e))
            continue;
        msgs++;
        struct proto_msg r;
        if (m.type == PT_PING) {
            proto_msg_init(&r, PT_PONG);
            r.id = m.id;
            r.worker.slots = 99;
            proto_send(s, &r, 500, &e);
        } else if (m.type == PT_GENERATE) {
            gens++;
            proto_msg_init(&r, PT_ACCEPTED);
            r.id = m.id;
            proto_send(s, &r, 500, &e);
            struct proto_chunk c = {.token = -1, .text = "INJECTED", .finish = PF_STOP, .n_gen = 1};
            proto_msg_init(&r, PT_CHUNKS);
            r.id = m.id;
            r.chunks = &c;
            r.n_chunks = 1;
            proto_send(s, &r, 500, &e);
        }
        proto_msg_free(&m);
    }
    nng_close(s);
    /* a refused connection is made and closed at once: what counts is
     * whether the daemon ever talked to us */
    printf("connected %d times, got %d messages from the daemon (%d generates)\n", seen, msgs, gens);
    return msgs ? 0 : 1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 5 && !strcmp(argv[1], "victim"))
        return victim(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc >= 3 && !strcmp(argv[1], "gen"))
        return gen(argv[2]);
    if (argc >= 4 && (!strcmp(argv[1], "next") || !strcmp(argv[1], "cancel")))
        return next_or_cancel(argv[2], argv[3], !strcmp(argv[1], "cancel"));
    if (argc >= 4 && !strcmp(argv[1], "fakeworker"))
        return fakeworker(argv[2], atoi(argv[3]));
    fprintf(stderr, "usage: ipcpoke victim URL HOLD_MS MAX | gen URL | next URL ID | cancel URL ID | "
                    "fakeworker URL SECS\n");
    return 2;
}
