/* fake_worker — a stand-in for llm170-worker that loads no model, for the
 * daemon's supervision tests. It speaks the real protocol: "ready" after
 * FAKE_LOAD_MS, then each generate streams max_tokens tokens "t0 ", "t1 " …
 * (one per FAKE_TOKEN_MS to every running request, like a scheduler step),
 * with slots/queue limits, cancel, ping/pong, tokenize (bytes) and shutdown.
 * FAKE_FAIL_LOAD=1 makes it exit 3 (cannot load) before "ready";
 * FAKE_CRASH_MS=N makes it die (status 70) N ms after "ready"; FAKE_NO_PONG=1 ignores pings. */
#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../proto/wire.h"

struct req {
    uint64_t id;
    int max, done;  /* tokens wanted / sent */
    int n_prompt;
    bool running;   /* holds a slot (else queued) */
    bool live;
};

static int env_int(const char *k, int def)
{
    const char *v = getenv(k);
    return v && *v ? atoi(v) : def;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static nng_socket sock;

static void send_msg(struct proto_msg *m)
{
    struct err e;
    if (proto_send(sock, m, 2000, &e))
        fprintf(stderr, "fake_worker: %s\n", e.msg);
}

/* The step in progress: its chunks go out as one message (id 0, each chunk
 * naming its stream), in order, as the real worker sends them. */
enum { MAXR = 1024 }; /* requests held at once */
static bool in_step;
static struct proto_chunk step_chunks[2 * MAXR];
static char step_text[2 * MAXR][32];
static size_t n_step;

static void finish(struct req *r, int why)
{
    if (in_step) {
        step_chunks[n_step++] = (struct proto_chunk){.sid = r->id, .i = (uint64_t)r->done, .token = -1, .text = "",
                                                     .finish = why, .n_prompt = r->n_prompt, .n_gen = r->done};
        r->live = false;
        return;
    }
    struct proto_msg m;
    proto_msg_init(&m, PT_CHUNKS);
    m.id = r->id;
    struct proto_chunk c = {.i = (uint64_t)r->done, .token = -1, .text = "", .finish = why,
                            .n_prompt = r->n_prompt, .n_gen = r->done};
    m.chunks = &c;
    m.n_chunks = 1;
    send_msg(&m);
    r->live = false;
}

int main(int argc, char **argv)
{
    const char *url = NULL, *name = "fake";
    int slots = 4, queue = 8, ctx = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--connect")) url = argv[i + 1];
        else if (!strcmp(argv[i], "--name")) name = argv[i + 1];
        else if (!strcmp(argv[i], "--slots")) slots = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--queue")) queue = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ctx") && atoi(argv[i + 1]) > 0) ctx = atoi(argv[i + 1]);
    }
    if (!url) {
        fprintf(stderr, "fake_worker: --connect URL required\n");
        return 2;
    }
    usleep((useconds_t)env_int("FAKE_LOAD_MS", 0) * 1000);
    if (env_int("FAKE_FAIL_LOAD", 0)) {
        fprintf(stderr, "fake_worker: cannot load model (FAKE_FAIL_LOAD)\n");
        return 3;
    }
    int token_ms = env_int("FAKE_TOKEN_MS", 20);
    if (nng_pair0_open(&sock) || nng_dial(sock, url, NULL, 0)) {
        fprintf(stderr, "fake_worker: cannot dial %s\n", url);
        return 1;
    }
    struct proto_msg m;
    proto_msg_init(&m, PT_READY);
    m.worker.model = (char *)name;
    m.worker.backend = "fake";
    m.worker.slots = slots;
    m.worker.n_ctx = ctx;
    m.worker.n_vocab = 256;
    m.worker.mem = 12345;
    send_msg(&m);

    static struct req reqs[MAXR];
    bool shutting = false;
    int crash_ms = env_int("FAKE_CRASH_MS", 0);
    int64_t t_crash = crash_ms > 0 ? now_ms() + crash_ms : 0;
    int64_t next_step = now_ms() + token_ms;
    for (;;) {
        int wait = (int)(next_step - now_ms());
        struct err e;
        int rc = proto_recv(sock, &m, wait > 0 ? wait : 0, &e);
        if (rc == ERR_IO && !proto_timed_out(&e))
            return 1; /* the daemon went away */
        if (rc == ERR_FORMAT) {
            struct proto_msg er;
            proto_error(&er, 0, PE_BAD_REQUEST, e.msg);
            send_msg(&er);
        } else if (rc == 0) {
            int running = 0, queued = 0;
            for (int i = 0; i < MAXR; i++)
                if (reqs[i].live) {
                    running += reqs[i].running;
                    queued += !reqs[i].running;
                }
            struct proto_msg r;
            switch (m.type) {
            case PT_GENERATE: {
                int n_prompt = m.gen.prompt ? (int)strlen(m.gen.prompt) : (int)m.gen.n_tokens;
                if (n_prompt > ctx) {
                    proto_error(&r, m.id, PE_TOO_LONG, "prompt longer than the context");
                } else if (shutting) {
                    proto_error(&r, m.id, PE_UNAVAILABLE, "worker is shutting down");
                } else if (running >= slots && queued >= queue) {
                    proto_error(&r, m.id, PE_QUEUE_FULL, "queue full");
                } else {
                    int k = 0;
                    while (k < MAXR && reqs[k].live)
                        k++;
                    if (k == MAXR) {
                        proto_error(&r, m.id, PE_QUEUE_FULL, "queue full");
                    } else {
                        reqs[k] = (struct req){.id = m.id, .max = (m.gen.set & PG_MAX_TOKENS) ? m.gen.max_tokens : 8,
                                               .n_prompt = n_prompt, .running = running < slots, .live = true};
                        proto_msg_init(&r, PT_ACCEPTED);
                        r.id = m.id;
                    }
                }
                send_msg(&r);
                break;
            }
            case PT_CANCEL:
                for (int i = 0; i < MAXR; i++)
                    if (reqs[i].live && reqs[i].id == m.id)
                        finish(&reqs[i], PF_CANCEL);
                break;
            case PT_PING:
                if (!env_int("FAKE_NO_PONG", 0)) {
                    proto_msg_init(&r, PT_PONG);
                    r.id = m.id;
                    r.worker.active = running;
                    r.worker.queued = queued;
                    r.worker.slots = slots;
                    send_msg(&r);
                }
                break;
            case PT_TOKENIZE: {
                size_t n = strlen(m.text);
                int32_t *t = calloc(n + 1, sizeof *t);
                for (size_t i = 0; i < n; i++)
                    t[i] = (unsigned char)m.text[i];
                proto_msg_init(&r, PT_TOKENS);
                r.id = m.id;
                r.tokens = t;
                r.n_tokens = n;
                send_msg(&r);
                free(t);
                break;
            }
            case PT_SHUTDOWN:
                shutting = true;
                break;
            default:
                break;
            }
            proto_msg_free(&m);
        }
        if (t_crash && now_ms() >= t_crash)
            _exit(70); /* a crash, as far as the daemon can tell (no core file) */
        if (now_ms() < next_step)
            continue;
        next_step += token_ms;
        /* one "step": every running request gets a token; free slots go to the queue */
        int running = 0;
        for (int i = 0; i < MAXR; i++) {
            struct req *q = &reqs[i];
            if (!q->live || !q->running)
                continue;
            in_step = true;
            snprintf(step_text[n_step], sizeof step_text[0], "t%d ", q->done);
            step_chunks[n_step] = (struct proto_chunk){.sid = q->id, .i = (uint64_t)q->done, .token = q->done,
                                                       .text = step_text[n_step]};
            n_step++;
            q->done++;
            if (q->max >= 0 && q->done >= q->max)
                finish(q, PF_LENGTH);
            else
                running++;
        }
        if (n_step) {
            struct proto_msg c;
            proto_msg_init(&c, PT_CHUNKS);
            c.chunks = step_chunks;
            c.n_chunks = n_step;
            send_msg(&c);
        }
        in_step = false;
        n_step = 0;
        int live = 0;
        for (int i = 0; i < MAXR; i++)
            if (reqs[i].live) {
                live++;
                if (!reqs[i].running && running < slots) {
                    reqs[i].running = true;
                    running++;
                }
            }
        if (shutting && !live)
            return 0;
    }
}
