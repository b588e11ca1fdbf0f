/* test_daemon.c — llm170d end to end with real processes: the daemon, its
 * client library, and tests/tools/fake_worker (speaks the real protocol,
 * loads no model). Covers streaming, concurrency, cancel, queue full, worker
 * SIGKILL → error within 2 s and restart, systemd notify (READY only after
 * load, then WATCHDOG), drain on SIGTERM, abandoned streams, bad input; the
 * local IPC hardening: socket modes, the peer policy, other uids, foreign
 * stream ids, not-ready while draining or while a worker is stopped.
 * Every wait is bounded. */
#include <errno.h>
#include <fcntl.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <grp.h>
#include <sys/stat.h>

#include "../daemon/peer.c" /* the client socket's policy, unit-tested below */
#include "../daemon/pipeset.c" /* the refused connections' ids, likewise */
#include "../proto/client.h"
#include "../proto/wire.h"
#include "check.h"
#include "proc_util.h"

static char tmpdir[256], sockurl[400], fake[1024], daemon_bin[1024], model[1024];

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Start llm170d with the fake worker; extra flags / env (NAME=VALUE) follow. */
static pid_t start_daemon(const char *const *extra, const char *const *env)
{
    const char *argv[] = {daemon_bin, "--socket", sockurl, "--model", model, "--worker", fake,
                          "--devices", "cpu", "--ping-interval-ms", "200", NULL};
    return proc_spawn(argv, extra, env);
}

static int stop_daemon(pid_t pid)
{
    kill(pid, SIGTERM);
    int st = -1;
    for (int i = 0; i < 1750; i++) { /* 35 s: the daemon drains open requests for up to 30 s (slow under ASan
                                      * while a killed worker restarts) */
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* How long a daemon may take to report a ready worker. Only a failure waits
 * this long; a CI run under ASan on a busy 2-core box once missed 10 s. */
#define READY_MS 30000

/* Wait until the daemon reports a ready worker; returns the client or NULL
 * (and shows what the daemon and its workers logged). */
static struct pc_client *wait_ready(int timeout_ms)
{
    struct pc_client *c = NULL;
    struct err e;
    int64_t end = now_ms() + timeout_ms;
    while (now_ms() < end) {
        if (!c && pc_open(&c, sockurl, 2000, 0, &e)) {
            c = NULL;
            usleep(20000);
            continue;
        }
        struct proto_status st;
        if (pc_status(c, &st, &e) == 0) {
            bool ready = st.ready;
            proto_status_free(&st);
            if (ready)
                return c;
        }
        usleep(20000);
    }
    pc_close(c);
    proc_log_tail(30);
    return NULL;
}

/* Start llm170d with extra flags and connect once it is ready; NULL (the
 * daemon stopped again, the failure recorded) when it does not come up. */
static struct pc_client *daemon_up_env(const char **extra, const char *const *env, pid_t *d)
{
    *d = start_daemon(extra, env);
    struct pc_client *c = wait_ready(READY_MS);
    CHECK(c != NULL, "ready");
    if (!c)
        stop_daemon(*d);
    return c;
}
static struct pc_client *daemon_up(const char **extra, pid_t *d) { return daemon_up_env(extra, NULL, d); }


/* Run one request to the end; text appended to out. Returns the finish reason. */
static int collect(struct pc_client *c, int max_tokens, char *out, size_t cap, int *errc)
{
    struct proto_gen g;
    proto_gen_init(&g);
    g.prompt = "hello";
    g.max_tokens = max_tokens;
    g.set |= PG_MAX_TOKENS;
    struct pc_stream *s;
    struct err e;
    if (out)
        out[0] = 0;
    if (pc_generate(c, &g, &s, &e)) {
        if (errc)
            *errc = e.code;
        return -1;
    }
    int finish = PF_NONE;
    int64_t end = now_ms() + 20000;
    while (!pc_stream_done(s) && now_ms() < end) {
        struct proto_chunk *ch;
        size_t n;
        if (pc_next(s, 500, &ch, &n, &e))
            break;
        for (size_t i = 0; i < n; i++) {
            if (out && ch[i].text)
                strncat(out, ch[i].text, cap - strlen(out) - 1);
            if (ch[i].finish) {
                finish = ch[i].finish;
                if (errc)
                    *errc = ch[i].errc;
            }
        }
        proto_chunks_free(ch, n);
    }
    pc_stream_free(s);
    return finish;
}

static bool have_tools(void)
{
    return access(daemon_bin, X_OK) == 0 && access(fake, X_OK) == 0 && access(model, R_OK) == 0;
}

static void stream_basic(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    pid_t d = start_daemon(NULL, NULL);
    struct pc_client *c = wait_ready(READY_MS);
    CHECK(c != NULL, "daemon became ready");
    if (c) {
        char text[256];
        int f = collect(c, 5, text, sizeof text, NULL);
        CHECK_EQ_INT(f, PF_LENGTH);
        CHECK(!strcmp(text, "t0 t1 t2 t3 t4 "), "text '%s'", text);
        struct proto_status st;
        struct err e;
        CHECK(pc_status(c, &st, &e) == 0, "status");
        CHECK_EQ_INT(st.n_workers, 1);
        if (st.n_workers == 1) {
            CHECK(!strcmp(st.workers[0].state, "ready"), "state %s", st.workers[0].state);
            CHECK(st.workers[0].pid > 0, "pid");
            CHECK_EQ_INT(st.workers[0].slots, 4);
            CHECK(st.n_models == 1 && !strcmp(st.models[0], "stories260K"), "model name");
        }
        proto_status_free(&st);
        int32_t *ids;
        size_t n;
        CHECK(pc_tokenize(c, NULL, "AB", true, true, &ids, &n, &e) == 0 && n == 2 && ids[0] == 'A', "tokenize");
        free(ids);
        /* unknown model → 404 class */
        struct proto_gen g;
        proto_gen_init(&g);
        g.prompt = "x";
        g.model = "no-such-model";
        struct pc_stream *s;
        int rc = pc_generate(c, &g, &s, &e);
        CHECK(rc == ERR_NOTFOUND && pc_http_status(rc) == 404, "unknown model: %d %s", rc, e.msg);
        /* prompt longer than the fake's 64-position context */
        char longp[200];
        memset(longp, 'a', sizeof longp - 1);
        longp[sizeof longp - 1] = 0;
        g.model = NULL;
        g.prompt = longp;
        rc = pc_generate(c, &g, &s, &e);
        CHECK(rc == ERR_RANGE && pc_http_status(rc) == 400, "too long: %d %s", rc, e.msg);
        CHECK(strstr(e.msg, "context") != NULL, "message '%s'", e.msg);
    }
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

/* Start n streams of "hello" in a poll group (max_tokens max[k]) whose chunks
 * are read by pc_poll, not by their stream handles: their ids go to id[]. */
static void start_group(struct pc_client *c, uint64_t group, const int *max, int n, struct proto_sid *id)
{
    struct err e;
    for (int k = 0; k < n; k++) {
        struct proto_gen g;
        proto_gen_init(&g);
        g.prompt = "hello";
        g.max_tokens = max[k];
        g.set |= PG_MAX_TOKENS;
        g.group = group;
        struct pc_stream *s = NULL;
        CHECK(pc_generate(c, &g, &s, &e) == 0, "generate %d: %s", k, e.msg);
        if (s) {
            id[k] = pc_stream_id(s);
            pc_stream_detach(s);
        }
    }
}

/* Poll groups: one poll collects the chunks of every stream of its group (and
 * of no other), a reply that is not acknowledged comes again, acknowledged
 * chunks do not, and a stream whose final chunk was acknowledged is gone. */
static void poll_group(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    const char *extra[] = {"--slots", "8", NULL};
    pid_t d;
    struct pc_client *c = daemon_up(extra, &d);
    if (!c)
        return;
    const uint64_t group = 0x5eed0001;
    const int max[3] = {3, 5, 7};
    struct proto_sid id[3] = {0}, other = {0};
    struct err e;
    start_group(c, group, max, 3, id);
    struct proto_gen g;
    proto_gen_init(&g);
    g.prompt = "hello";
    g.max_tokens = 4;
    g.set |= PG_MAX_TOKENS;
    struct pc_stream *alone = NULL;
    CHECK(pc_generate(c, &g, &alone, &e) == 0, "a stream outside the group");
    if (alone)
        other = pc_stream_id(alone);
    usleep(400000); /* 20 ms a step: every stream has finished */

    struct proto_chunk *ch = NULL;
    size_t n = 0, n_again = 0;
    CHECK(pc_poll(c, group, NULL, 0, 1000, 0, &ch, &n, &e) == 0, "poll: %s", e.msg);
    char text[3][128] = {"", "", ""};
    int finish[3] = {0}, seen_other = 0, gaps = 0;
    uint64_t next[3] = {0};
    for (size_t i = 0; i < n; i++) {
        const struct proto_sid *cs = &ch[i].stream;
        int k = proto_sid_eq(cs, &id[0]) ? 0 : proto_sid_eq(cs, &id[1]) ? 1 : proto_sid_eq(cs, &id[2]) ? 2 : -1;
        if (k < 0) {
            seen_other += proto_sid_eq(cs, &other);
            continue;
        }
        gaps += ch[i].i != next[k];
        next[k] = ch[i].i + 1;
        strncat(text[k], ch[i].text ? ch[i].text : "", sizeof text[k] - strlen(text[k]) - 1);
        if (ch[i].finish)
            finish[k] = ch[i].finish;
    }
    proto_chunks_free(ch, n);
    CHECK_EQ_INT(n, 3 + 5 + 7 + 3); /* tokens and one final chunk each */
    CHECK(seen_other == 0 && gaps == 0, "only the group's streams, in order (%d foreign, %d gaps)", seen_other, gaps);
    CHECK(!strcmp(text[0], "t0 t1 t2 ") && !strcmp(text[1], "t0 t1 t2 t3 t4 ") &&
              !strcmp(text[2], "t0 t1 t2 t3 t4 t5 t6 "),
          "texts '%s' '%s' '%s'", text[0], text[1], text[2]);
    CHECK(finish[0] == PF_LENGTH && finish[1] == PF_LENGTH && finish[2] == PF_LENGTH, "each ends with 'length'");

    /* not acknowledged: the same chunks come again (a lost reply loses nothing) */
    CHECK(pc_poll(c, group, NULL, 0, 1000, 0, &ch, &n_again, &e) == 0, "poll again");
    proto_chunks_free(ch, n_again);
    CHECK_EQ_INT(n_again, n);
    /* acknowledged: nothing left, and the finished streams are forgotten */
    struct proto_ack acks[3] = {{.stream = id[0], .from = next[0]}, {.stream = id[1], .from = next[1]},
                                {.stream = id[2], .from = next[2]}};
    int64_t t0 = now_ms();
    CHECK(pc_poll(c, group, acks, 3, 300, 0, &ch, &n, &e) == 0, "poll with acks");
    proto_chunks_free(ch, n);
    CHECK(n == 0 && now_ms() - t0 >= 250, "nothing more: the poll waited its %d ms (%zu chunks)", 300, n);
    CHECK(pc_cancel_id(c, &id[0], &e) == 0, "cancel of a forgotten stream is not an error");
    /* the stream outside the group is still there for "next" */
    char rest[128] = "";
    int64_t end = now_ms() + 5000;
    while (alone && !pc_stream_done(alone) && now_ms() < end) {
        if (pc_next(alone, 500, &ch, &n, &e))
            break;
        for (size_t i = 0; i < n; i++)
            strncat(rest, ch[i].text ? ch[i].text : "", sizeof rest - strlen(rest) - 1);
        proto_chunks_free(ch, n);
    }
    CHECK(!strcmp(rest, "t0 t1 t2 t3 "), "the other stream by 'next': '%s'", rest);
    pc_stream_free(alone);
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

struct par {
    struct pc_client *c;
    int finish;
    char text[256];
};

/* A poll with hold_ms keeps mid-stream chunks until the hold ends, but a
 * stream's final chunk is answered at once, with the ended streams alone
 * (the running one's chunks stay for the next reply, none lost). */
static void poll_hold(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    const char *extra[] = {"--slots", "8", NULL};
    pid_t d;
    struct pc_client *c = daemon_up(extra, &d);
    if (!c)
        return;
    const uint64_t group = 0x5eed0002;
    const int max[2] = {3, 40}; /* 20 ms a step: the short one ends after ~80 ms, the long one runs ~0.8 s */
    struct proto_sid id[2] = {0};
    struct err e;
    start_group(c, group, max, 2, id);
    /* hold 600 ms: the short stream's end answers long before that */
    struct proto_chunk *ch = NULL;
    size_t n = 0;
    uint64_t next[2] = {0};
    int64_t t0 = now_ms();
    CHECK(pc_poll(c, group, NULL, 0, 2000, 600, &ch, &n, &e) == 0, "poll: %s", e.msg);
    int64_t waited = now_ms() - t0;
    int of_long = 0, finished_short = 0;
    for (size_t i = 0; i < n; i++) {
        of_long += proto_sid_eq(&ch[i].stream, &id[1]);
        if (proto_sid_eq(&ch[i].stream, &id[0])) {
            CHECK(ch[i].i == next[0], "in order: chunk %llu, expected %llu", (unsigned long long)ch[i].i,
                  (unsigned long long)next[0]);
            next[0] = ch[i].i + 1;
            finished_short |= ch[i].finish == PF_LENGTH;
        }
    }
    proto_chunks_free(ch, n);
    CHECK(waited < 450, "the final chunk was answered at once (%lld ms, hold 600)", (long long)waited);
    CHECK(finished_short && next[0] == 4 && of_long == 0,
          "only the ended stream, whole (%llu chunks, final %d; %d of the running one)", (unsigned long long)next[0],
          finished_short, of_long);
    /* the running stream: its chunks come when the hold ends, from index 0 on */
    struct proto_ack acks[1] = {{.stream = id[0], .from = next[0]}};
    t0 = now_ms();
    CHECK(pc_poll(c, group, acks, 1, 2000, 150, &ch, &n, &e) == 0, "poll again: %s", e.msg);
    waited = now_ms() - t0;
    int gaps = 0, finals = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(proto_sid_eq(&ch[i].stream, &id[1]), "a chunk of the running stream");
        gaps += ch[i].i != next[1];
        next[1] = ch[i].i + 1;
        finals += ch[i].finish != 0;
    }
    proto_chunks_free(ch, n);
    CHECK(waited >= 140 && n >= 2 && gaps == 0 && finals == 0,
          "mid-stream chunks held for the hold (%lld ms, %zu chunks, %d gaps, %d final)", (long long)waited, n, gaps,
          finals);
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

static void *par_main(void *arg)
{
    struct par *p = arg;
    p->finish = collect(p->c, 6, p->text, sizeof p->text, NULL);
    return NULL;
}

static void concurrent_streams(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    const char *extra[] = {"--slots", "4", "--queue", "16", NULL};
    pid_t d = start_daemon(extra, NULL);
    struct pc_client *c = wait_ready(READY_MS);
    CHECK(c != NULL, "ready");
    if (c) {
        struct par p[12];
        pthread_t t[12];
        for (int i = 0; i < 12; i++) {
            p[i].c = c; /* one client shared by all threads */
            pthread_create(&t[i], NULL, par_main, &p[i]);
        }
        int good = 0;
        for (int i = 0; i < 12; i++) {
            pthread_join(t[i], NULL);
            good += p[i].finish == PF_LENGTH && !strcmp(p[i].text, "t0 t1 t2 t3 t4 t5 ");
        }
        CHECK_EQ_INT(good, 12);
    }
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

static void cancel_and_queue_full(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    const char *extra[] = {"--slots", "2", "--queue", "1", NULL};
    pid_t d = start_daemon(extra, NULL);
    struct pc_client *c = wait_ready(READY_MS);
    CHECK(c != NULL, "ready");
    if (c) {
        struct proto_gen g;
        proto_gen_init(&g);
        g.prompt = "x";
        g.max_tokens = 100000;
        g.set |= PG_MAX_TOKENS;
        struct pc_stream *s[4] = {0};
        struct err e;
        for (int i = 0; i < 3; i++)
            CHECK(pc_generate(c, &g, &s[i], &e) == 0, "request %d: %s", i, e.msg);
        int rc = pc_generate(c, &g, &s[3], &e);
        CHECK(rc == ERR_FULL && pc_http_status(rc) == 429, "4th request: %d %s", rc, e.msg);
        /* cancel the first: its stream ends with "cancel" and the queued one runs */
        if (s[0]) {
            int fin = 0;
            CHECK(pc_cancel(s[0], &e) == 0, "cancel: %s", e.msg);
            int64_t end = now_ms() + 3000;
            while (!pc_stream_done(s[0]) && now_ms() < end) {
                struct proto_chunk *ch;
                size_t n;
                if (pc_next(s[0], 200, &ch, &n, &e))
                    break;
                for (size_t i = 0; i < n; i++)
                    if (ch[i].finish)
                        fin = ch[i].finish;
                proto_chunks_free(ch, n);
            }
            CHECK_EQ_INT(fin, PF_CANCEL);
        }
        if (s[2]) { /* the queued request now produces tokens */
            int n_tok = 0;
            int64_t end = now_ms() + 3000;
            while (n_tok < 3 && now_ms() < end) {
                struct proto_chunk *ch;
                size_t n;
                if (pc_next(s[2], 200, &ch, &n, &e))
                    break;
                for (size_t i = 0; i < n; i++)
                    n_tok += ch[i].token >= 0;
                proto_chunks_free(ch, n);
            }
            CHECK(n_tok >= 3, "queued request got a slot (%d tokens)", n_tok);
        }
        /* a slot and queue place are free again */
        struct pc_stream *s4;
        rc = pc_generate(c, &g, &s4, &e);
        CHECK(rc == 0, "after cancel: %s", e.msg);
        pc_stream_free(s4);
        for (int i = 0; i < 4; i++)
            pc_stream_free(s[i]);
    }
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

static void worker_killed(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    pid_t d = start_daemon(NULL, NULL);
    struct pc_client *c = wait_ready(READY_MS);
    CHECK(c != NULL, "ready");
    if (!c) {
        stop_daemon(d);
        return;
    }
    struct proto_gen g;
    proto_gen_init(&g);
    g.prompt = "x";
    g.max_tokens = 100000;
    g.set |= PG_MAX_TOKENS;
    struct pc_stream *s;
    struct err e;
    CHECK(pc_generate(c, &g, &s, &e) == 0, "generate: %s", e.msg);
    struct proto_status st;
    pc_status(c, &st, &e);
    pid_t wpid = st.n_workers ? st.workers[0].pid : 0;
    proto_status_free(&st);
    CHECK(wpid > 0, "worker pid");
    /* let a few tokens flow, then kill the worker */
    int n_tok = 0;
    int64_t end = now_ms() + 3000;
    while (n_tok < 3 && now_ms() < end) {
        struct proto_chunk *ch;
        size_t n;
        if (pc_next(s, 200, &ch, &n, &e))
            break;
        for (size_t i = 0; i < n; i++)
            n_tok += ch[i].token >= 0;
        proto_chunks_free(ch, n);
    }
    CHECK(n_tok >= 3, "tokens before the kill");
    if (wpid > 0)
        kill(wpid, SIGKILL);
    int64_t t_kill = now_ms();
    int fin = 0, errc = 0;
    while (!pc_stream_done(s) && now_ms() < t_kill + 5000) {
        struct proto_chunk *ch;
        size_t n;
        if (pc_next(s, 200, &ch, &n, &e))
            break;
        for (size_t i = 0; i < n; i++)
            if (ch[i].finish) {
                fin = ch[i].finish;
                errc = ch[i].errc;
            }
        proto_chunks_free(ch, n);
    }
    int64_t dt = now_ms() - t_kill;
    printf("# worker SIGKILL → stream error after %lld ms\n", (long long)dt);
    CHECK_EQ_INT(fin, PF_ERROR);
    CHECK_EQ_INT(errc, PE_INTERNAL);
    CHECK(dt < 2000, "error arrived after %lld ms", (long long)dt);
    pc_stream_free(s);
    /* meanwhile requests get a 503-class error or succeed once it is back */
    int rc = pc_generate(c, &g, &s, &e);
    if (rc == 0)
        pc_stream_free(s);
    else
        CHECK(pc_http_status(rc) == 503, "during restart: %d %s", rc, e.msg);
    pc_close(c);
    c = wait_ready(READY_MS);
    CHECK(c != NULL, "worker restarted");
    if (c) {
        char text[128];
        CHECK_EQ_INT(collect(c, 3, text, sizeof text, NULL), PF_LENGTH);
        pc_status(c, &st, &e);
        CHECK(st.n_workers == 1 && st.workers[0].restarts == 1 && st.workers[0].pid != wpid, "restart counted");
        proto_status_free(&st);
    }
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

static void systemd_notify(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    char path[300];
    snprintf(path, sizeof path, "%s/notify.sock", tmpdir);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path)
        SKIP("temporary directory path too long for a unix socket");
    memcpy(sa.sun_path, path, strlen(path) + 1);
    unlink(path);
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "bind %s", path);
    char env1[400], env2[] = "WATCHDOG_USEC=200000", env3[] = "FAKE_LOAD_MS=1200";
    snprintf(env1, sizeof env1, "NOTIFY_SOCKET=%s", path);
    const char *env[] = {env1, env2, env3, NULL};
    int64_t t0 = now_ms();
    pid_t d = start_daemon(NULL, env);
    int64_t t_ready = 0, n_wd_after = 0;
    bool status_seen = false, ready_when_ready = false;
    struct timeval tv = {0, 100000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    while (now_ms() - t0 < 8000 && n_wd_after < 2) {
        char buf[1024];
        ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = 0;
        if (strstr(buf, "STATUS="))
            status_seen = true;
        if (strstr(buf, "READY=1") && !t_ready) {
            t_ready = now_ms();
            /* at this moment the worker must already be ready */
            struct pc_client *c;
            struct err e;
            if (pc_open(&c, sockurl, 2000, 0, &e) == 0) {
                struct proto_status st;
                if (pc_status(c, &st, &e) == 0) {
                    ready_when_ready = st.ready;
                    proto_status_free(&st);
                }
                pc_close(c);
            }
        }
        if (t_ready && strstr(buf, "WATCHDOG=1"))
            n_wd_after++;
    }
    printf("# READY=1 after %lld ms (worker load takes 1200 ms)\n", (long long)(t_ready - t0));
    CHECK(t_ready > 0, "READY=1 received");
    CHECK(t_ready - t0 >= 1200, "READY=1 came before the model was loaded (%lld ms)", (long long)(t_ready - t0));
    CHECK(ready_when_ready, "status says ready when READY=1 arrives");
    CHECK(n_wd_after >= 2, "WATCHDOG=1 after READY (%lld)", (long long)n_wd_after);
    CHECK(status_seen, "STATUS= lines");
    close(fd);
    unlink(path);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

static void drain_on_sigterm(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    pid_t d = start_daemon(NULL, NULL);
    struct pc_client *c = wait_ready(READY_MS);
    CHECK(c != NULL, "ready");
    if (!c) {
        stop_daemon(d);
        return;
    }
    struct proto_gen g;
    proto_gen_init(&g);
    g.prompt = "x";
    g.max_tokens = 40; /* ~0.8 s at 20 ms a token */
    g.set |= PG_MAX_TOKENS;
    struct pc_stream *s;
    struct err e;
    CHECK(pc_generate(c, &g, &s, &e) == 0, "generate");
    kill(d, SIGTERM);
    usleep(100000);
    struct pc_stream *s2;
    int rc = pc_generate(c, &g, &s2, &e);
    CHECK(rc == ERR_IO && pc_http_status(rc) == 503, "new request while draining: %d %s", rc, e.msg);
    int fin = 0, n_tok = 0;
    int64_t end = now_ms() + 5000;
    while (!pc_stream_done(s) && now_ms() < end) {
        struct proto_chunk *ch;
        size_t n;
        if (pc_next(s, 200, &ch, &n, &e))
            break;
        for (size_t i = 0; i < n; i++) {
            n_tok += ch[i].token >= 0;
            if (ch[i].finish)
                fin = ch[i].finish;
        }
        proto_chunks_free(ch, n);
    }
    CHECK_EQ_INT(fin, PF_LENGTH);
    CHECK_EQ_INT(n_tok, 40);
    pc_stream_free(s);
    pc_close(c);
    int st = -1;
    for (int i = 0; i < 400 && waitpid(d, &st, WNOHANG) != d; i++)
        usleep(20000);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "daemon exited 0 after draining (status %d)", st);
    if (!(WIFEXITED(st)))
        stop_daemon(d);
}

static void abandoned_stream_and_bad_input(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    const char *extra[] = {"--stream-idle-ms", "500", "--slots", "1", "--queue", "0", NULL};
    pid_t d;
    struct pc_client *c = daemon_up(extra, &d);
    if (!c)
        return;
    struct proto_gen g;
    proto_gen_init(&g);
    g.prompt = "x";
    g.max_tokens = 100000;
    g.set |= PG_MAX_TOKENS;
    struct pc_stream *s;
    struct err e;
    CHECK(pc_generate(c, &g, &s, &e) == 0, "generate");
    /* never poll it: after 0.5 s the daemon cancels it and the slot frees */
    int rc = -1;
    int64_t end = now_ms() + 5000;
    struct pc_stream *s2 = NULL;
    while (now_ms() < end && (rc = pc_generate(c, &g, &s2, &e)) == ERR_FULL)
        usleep(100000);
    CHECK(rc == 0, "slot freed after the idle timeout: %d %s", rc, e.msg);
    struct proto_chunk *ch;
    size_t n;
    rc = pc_next(s, 0, &ch, &n, &e);
    CHECK(rc == ERR_NOTFOUND, "abandoned stream is gone: %d", rc);
    pc_stream_free(s2);
    free(s); /* already gone on the daemon side */

    /* garbage and wrong-typed messages get error replies; the daemon lives on */
    nng_socket raw;
    nng_req0_open(&raw);
    nng_socket_set_ms(raw, NNG_OPT_RECVTIMEO, 3000);
    CHECK(nng_dial(raw, sockurl, NULL, 0) == 0, "dial");
    const char *bad[] = {"\xc1", "\x81\xa1v\x01", "\xdd\xff\xff\xff\xff", "\x83\xa1v\x01\xa1t\xa4next\xa2id\243abc", /* octal: a hex escape would eat "abc" */
                         "\x82\xa1v\x02\xa1t\xa6status"};
    size_t lens[] = {1, 4, 5, 15, 13};
    for (int i = 0; i < 5; i++) {
        CHECK(nng_send(raw, (void *)bad[i], lens[i], 0) == 0, "send %d", i);
        char *buf = NULL;
        size_t sz = 0;
        rc = nng_recv(raw, &buf, &sz, NNG_FLAG_ALLOC);
        CHECK(rc == 0, "reply to bad message %d", i);
        if (rc == 0) {
            struct proto_msg m;
            CHECK(proto_decode(buf, sz, &m, &e) == 0 && m.type == PT_ERROR, "error reply %d", i);
            if (i == 4)
                CHECK_EQ_INT(m.errc, PE_VERSION);
            else
                CHECK_EQ_INT(m.errc, PE_BAD_REQUEST);
            proto_msg_free(&m);
            nng_free(buf, sz);
        }
    }
    nng_close(raw);
    struct proto_status st;
    CHECK(pc_status(c, &st, &e) == 0 && st.ready, "alive after bad input");
    proto_status_free(&st);
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

static void load_failure_exits(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    char env[] = "FAKE_FAIL_LOAD=1";
    const char *envs[] = {env, NULL};
    pid_t d = start_daemon(NULL, envs);
    int st = -1;
    int64_t end = now_ms() + 5000;
    while (now_ms() < end && waitpid(d, &st, WNOHANG) != d)
        usleep(20000);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "daemon exits 1 when no worker can load (status %d)", st);
    if (!WIFEXITED(st))
        stop_daemon(d);
    /* and a bad command line is usage error 2 */
    const char *bogus[] = {daemon_bin, "--bogus", NULL};
    pid_t p = proc_spawn(bogus, NULL, NULL);
    waitpid(p, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2, "bad flag → exit 2");
}

static void config_file_and_flags(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    char cfg[400];
    snprintf(cfg, sizeof cfg, "%s/llm170.conf", tmpdir);
    FILE *f = fopen(cfg, "w");
    CHECK(f != NULL, "write %s", cfg);
    if (!f)
        return;
    fprintf(f, "# test config\n[daemon]\nmodel = tiny\nslots = 3\nqueue = 7\nfuture_key = 1\n"
               "[gateway]\nlisten = 127.0.0.1:1\n[models]\ntiny = %s\n", model);
    fclose(f);
    const char *argv[] = {daemon_bin, "--config", cfg, "--socket", sockurl, "--worker", fake, "--slots", "2", NULL};
    pid_t d = proc_spawn(argv, NULL, NULL);
    struct pc_client *c = wait_ready(READY_MS);
    CHECK(c != NULL, "ready from the config file");
    if (c) {
        struct proto_status st;
        struct err e;
        CHECK(pc_status(c, &st, &e) == 0, "status");
        CHECK(st.n_models == 1 && !strcmp(st.models[0], "tiny"), "model named by [models]");
        CHECK(st.n_workers == 1 && st.workers[0].slots == 2, "--slots overrides the file (%d)",
              st.n_workers ? st.workers[0].slots : -1);
        proto_status_free(&st);
    }
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
    /* a missing explicit config file is an error */
    const char *missing[] = {daemon_bin, "--config", "/nonexistent/llm170.conf", NULL};
    pid_t p = proc_spawn(missing, NULL, NULL);
    int st = 0;
    waitpid(p, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "missing config → exit 1");
}

static void two_workers_one_dies(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    const char *extra[] = {"--devices", "cpu,cpu", NULL};
    pid_t d;
    struct pc_client *c = daemon_up(extra, &d);
    if (!c)
        return;
    struct proto_status st;
    struct err e;
    int64_t end = now_ms() + READY_MS;
    int ready = 0;
    pid_t victim = 0;
    while (now_ms() < end && ready < 2) { /* both loaded */
        pc_status(c, &st, &e);
        ready = 0;
        for (size_t i = 0; i < st.n_workers; i++)
            ready += !strcmp(st.workers[i].state, "ready");
        victim = st.n_workers ? st.workers[0].pid : 0;
        proto_status_free(&st);
        usleep(20000);
    }
    CHECK_EQ_INT(ready, 2);
    /* a burst is spread over both workers */
    struct proto_gen g;
    proto_gen_init(&g);
    g.prompt = "x";
    g.max_tokens = 50;
    g.set |= PG_MAX_TOKENS;
    struct pc_stream *burst[8] = {0};
    int per[2] = {0, 0};
    for (int i = 0; i < 8; i++)
        if (pc_generate(c, &g, &burst[i], &e) == 0)
            per[pc_stream_worker(burst[i]) & 1]++;
    CHECK(per[0] == 4 && per[1] == 4, "burst spread %d/%d", per[0], per[1]);
    for (int i = 0; i < 8; i++)
        pc_stream_free(burst[i]);
    kill(victim, SIGKILL);
    /* requests keep working on the other worker while the first restarts */
    int good = 0;
    for (int i = 0; i < 10; i++) {
        char text[128];
        int errc = 0;
        good += collect(c, 2, text, sizeof text, &errc) == PF_LENGTH;
    }
    CHECK(good >= 9, "%d/10 requests served while one worker restarts", good);
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

static void hung_worker_restarted(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    char env[] = "FAKE_NO_PONG=1";
    const char *envs[] = {env, NULL};
    const char *extra[] = {"--ping-timeout-ms", "800", NULL};
    pid_t d = start_daemon(extra, envs);
    struct pc_client *c = wait_ready(READY_MS);
    CHECK(c != NULL, "ready");
    int restarts = 0;
    int64_t end = now_ms() + 6000;
    while (c && now_ms() < end && restarts < 1) {
        struct proto_status st;
        struct err e;
        if (pc_status(c, &st, &e) == 0) {
            restarts = st.n_workers ? st.workers[0].restarts : 0;
            proto_status_free(&st);
        }
        usleep(50000);
    }
    CHECK(restarts >= 1, "a worker that stops answering pings is killed and restarted (%d)", restarts);
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

struct stress {
    struct pc_client *c;
    int idx;
    int outcome; /* 1 length, 2 canceled, 3 queue full, 0 other */
};

static void *stress_main(void *arg)
{
    struct stress *t = arg;
    struct proto_gen g;
    proto_gen_init(&g);
    g.prompt = "x";
    g.max_tokens = 10 + t->idx % 7;
    g.set |= PG_MAX_TOKENS;
    struct pc_stream *s;
    struct err e;
    int rc = pc_generate(t->c, &g, &s, &e);
    if (rc) {
        t->outcome = rc == ERR_FULL ? 3 : 0;
        return NULL;
    }
    int got = 0, fin = 0;
    int64_t end = now_ms() + 20000;
    while (!pc_stream_done(s) && now_ms() < end) {
        if (t->idx % 5 == 0 && got >= 3 && !fin) {
            pc_cancel(s, &e);
            fin = -1;
        }
        struct proto_chunk *ch;
        size_t n;
        if (pc_next(s, 300, &ch, &n, &e))
            break;
        for (size_t i = 0; i < n; i++) {
            got += ch[i].token >= 0;
            if (ch[i].finish)
                fin = ch[i].finish;
        }
        proto_chunks_free(ch, n);
    }
    if (t->idx % 7 == 3) { /* vanish without a word: the daemon's idle timer cleans up */
        free(s);
        t->outcome = 1;
        return NULL;
    }
    pc_stream_free(s);
    t->outcome = fin == PF_LENGTH ? 1 : fin == PF_CANCEL ? 2 : 0;
    return NULL;
}

/* 96 clients at once on 4 slots + 64 queue places: every request ends as
 * finished, canceled or refused with queue full — no hang, no lost stream. */
static void stress_many_streams(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    const char *extra[] = {"--slots", "8", "--queue", "64", "--stream-idle-ms", "1000", NULL};
    char env[] = "FAKE_TOKEN_MS=5";
    const char *envs[] = {env, NULL};
    pid_t d;
    struct pc_client *c = daemon_up_env(extra, envs, &d);
    if (!c)
        return;
    enum { N = 96 };
    static struct stress t[N];
    pthread_t th[N];
    int64_t t0 = now_ms();
    for (int i = 0; i < N; i++) {
        t[i] = (struct stress){.c = c, .idx = i};
        pthread_create(&th[i], NULL, stress_main, &t[i]);
    }
    int counts[4] = {0};
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        counts[t[i].outcome]++;
    }
    printf("# %d streams in %lld ms: %d finished, %d canceled, %d queue full, %d other\n", N,
           (long long)(now_ms() - t0), counts[1], counts[2], counts[3], counts[0]);
    CHECK_EQ_INT(counts[0], 0);
    CHECK(counts[2] >= 1 && counts[1] >= 30, "mix of outcomes");
    /* afterwards the worker is idle again */
    int active = -1, queued = -1;
    int64_t end = now_ms() + 5000;
    while (now_ms() < end && (active || queued)) {
        struct proto_status st;
        struct err e;
        usleep(200000);
        if (pc_status(c, &st, &e) == 0) {
            active = st.active;
            queued = st.queued;
            proto_status_free(&st);
        }
    }
    CHECK(active == 0 && queued == 0, "idle afterwards (%d active, %d queued)", active, queued);
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

/* Read /proc/<pid>/<what> (NUL-separated for environ) into buf; its length, or -1. */
static ssize_t proc_read(pid_t pid, const char *what, char *buf, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, what);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n >= 0)
        buf[n] = 0;
    return n;
}

/* Whether the NUL-separated environment block env[0..n) holds the entry kv. */
static bool env_has(const char *env, ssize_t n, const char *kv)
{
    for (ssize_t i = 0; i < n; i += (ssize_t)strlen(env + i) + 1)
        if (!strcmp(env + i, kv))
            return true;
    return false;
}

/* llm170d turns glibc's per-thread malloc cache off for itself by starting
 * itself again with the tunable added (same pid, same name, the operator's
 * tunables kept); the workers it starts get the environment it was given. */
static void malloc_tuned_for_itself_only(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    char tun[] = "GLIBC_TUNABLES=glibc.malloc.trim_threshold=131072";
    const char *envs[] = {tun, NULL};
    pid_t d;
    struct pc_client *c = daemon_up_env(NULL, envs, &d);
    if (!c)
        return;
    static char env[65536];
    char comm[64];
    ssize_t n = proc_read(d, "environ", env, sizeof env);
    /* glibc 2.36 cuts the variable at the first ':' in place as it parses it */
    CHECK(n > 0 &&
              (env_has(env, n, "GLIBC_TUNABLES=glibc.malloc.tcache_count=0:glibc.malloc.trim_threshold=131072") ||
               env_has(env, n, "GLIBC_TUNABLES=glibc.malloc.tcache_count=0")) &&
              env_has(env, n, "LLM170_MALLOC_REEXEC=glibc.malloc.trim_threshold=131072"),
          "llm170d restarted itself with the tcache off");
    CHECK(proc_read(d, "comm", comm, sizeof comm) > 0 && !strcmp(comm, "llm170d\n"), "named llm170d (%s)", comm);
    struct proto_status st;
    struct err e;
    int wpid = 0;
    if (pc_status(c, &st, &e) == 0) {
        wpid = st.n_workers ? st.workers[0].pid : 0;
        proto_status_free(&st);
    }
    n = wpid > 0 ? proc_read(wpid, "environ", env, sizeof env) : -1;
    CHECK(n > 0 && env_has(env, n, tun), "the worker gets the tunables llm170d was given");
    bool marked = false;
    for (ssize_t i = 0; i < n; i += (ssize_t)strlen(env + i) + 1)
        marked |= !strncmp(env + i, "LLM170_MALLOC", 13) || strstr(env + i, "tcache") != NULL;
    CHECK(!marked, "and nothing of the restart");
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

/* A worker that keeps crashing is restarted with growing delays, not in a hot loop. */
static void crash_loop_backs_off(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    char env[] = "FAKE_CRASH_MS=50";
    const char *envs[] = {env, NULL};
    pid_t d = start_daemon(NULL, envs);
    struct pc_client *c = NULL;
    struct err e;
    int64_t t0 = now_ms();
    while (now_ms() - t0 < 3000) {
        if (!c && pc_open(&c, sockurl, 1000, 0, &e))
            c = NULL;
        usleep(100000);
    }
    int restarts = -1;
    if (c) {
        struct proto_status st;
        if (pc_status(c, &st, &e) == 0) {
            restarts = st.n_workers ? st.workers[0].restarts : -1;
            proto_status_free(&st);
        }
    }
    printf("# crashing worker: %d restarts in 3 s (back-off 0.25, 0.5, 1, 2 s …)\n", restarts);
    CHECK(restarts >= 2 && restarts <= 5, "restarts %d", restarts);
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

/* ---------------------------------------------------------------- IPC hardening */

/* Under umask 0000 (as the shipped unit once ran) the daemon's own modes
 * hold: client socket 0660 in a 0750 directory it creates, worker sockets
 * 0600 in a private 0700 directory with an unpredictable name. */
static void socket_modes(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    char dir[400], url[500];
    snprintf(dir, sizeof dir, "%s/modes", tmpdir);
    snprintf(url, sizeof url, "ipc://%s/d.sock", dir);
    const char *argv[] = {daemon_bin, "--socket", url, "--model", model, "--worker", fake, NULL};
    mode_t old = umask(0);
    pid_t d = proc_spawn(argv, NULL, NULL);
    umask(old);
    struct stat st;
    bool up = false;
    for (int i = 0; i < 250 && !up; i++) {
        up = stat(url + 6, &st) == 0;
        if (!up)
            usleep(20000);
    }
    CHECK(up, "socket appeared");
    if (up) {
        CHECK(S_ISSOCK(st.st_mode) && (st.st_mode & 0777) == 0660, "client socket mode %o", st.st_mode & 0777);
        CHECK(stat(dir, &st) == 0 && (st.st_mode & 0777) == 0750, "its directory's mode %o", st.st_mode & 0777);
        char cmd[600], line[600] = "";
        snprintf(cmd, sizeof cmd, "find '%s' -mindepth 2 -name '*.sock'", dir);
        /* the client socket comes first; the worker's appears once the daemon has started the worker
         * (later still under a sanitizer): look for up to 5 s */
        for (int i = 0; i < 250 && !line[0]; i++) {
            FILE *f = popen(cmd, "r");
            if (f) {
                if (!fgets(line, sizeof line, f))
                    line[0] = 0;
                pclose(f);
            }
            line[strcspn(line, "\n")] = 0;
            if (!line[0])
                usleep(20000);
        }
        CHECK(line[0] && stat(line, &st) == 0 && (st.st_mode & 0777) == 0600, "worker socket '%s' mode %o", line,
              st.st_mode & 0777);
        char *slash = strrchr(line, '/');
        if (slash) {
            *slash = 0;
            CHECK(stat(line, &st) == 0 && (st.st_mode & 0777) == 0700, "worker directory '%s' mode %o", line,
                  st.st_mode & 0777);
            CHECK(!strstr(line, "XXXXXX") && strstr(line, "llm170d-workers."), "worker directory from mkdtemp: %s",
                  line);
        }
    }
    CHECK_EQ_INT(stop_daemon(d), 0);
    CHECK(access(url + 6, F_OK) != 0, "socket removed at exit");
}

/* The policy: root, the daemon's own uid, members (primary or supplementary)
 * of an allowed group, allow_uids; nobody else. */
static void peer_policy(void)
{
    struct peer_policy p;
    struct err e;
    CHECK(peer_policy_init(&p, 1000, 1000, "", "", &e) == 0, "defaults: %s", e.msg);
    CHECK(peer_allowed(&p, 0, 0, NULL, 0), "root");
    CHECK(peer_allowed(&p, 1000, 5, NULL, 0), "the daemon's own uid");
    CHECK(!peer_allowed(&p, 65534, 65534, NULL, 0), "another uid");
    CHECK(peer_allowed(&p, 2000, 1000, NULL, 0), "primary gid = the daemon's group");
    gid_t sup[] = {7, 1000};
    CHECK(peer_allowed(&p, 2000, 2000, sup, 2), "supplementary group = the daemon's group");
    gid_t other[] = {7, 8};
    CHECK(!peer_allowed(&p, 2000, 2000, other, 2), "unrelated groups");
    CHECK(peer_policy_init(&p, 1000, 1000, "4242, 4343", "65534", &e) == 0, "numbers: %s", e.msg);
    gid_t g43[] = {4343};
    CHECK(peer_allowed(&p, 3000, 4242, NULL, 0) && peer_allowed(&p, 3000, 3000, g43, 1), "allow_group by number");
    CHECK(peer_allowed(&p, 65534, 65534, NULL, 0), "allow_uids");
    CHECK(!peer_allowed(&p, 65533, 65533, NULL, 0), "a uid not listed");
    CHECK(peer_policy_init(&p, 1000, 1000, "no-such-group-llm170x", "", &e) == ERR_INVALID, "unknown group is an error");
    CHECK(strstr(e.msg, "no-such-group-llm170x") != NULL, "names it: %s", e.msg);
    CHECK(peer_policy_init(&p, 1000, 1000, "", "no-such-user-llm170x", &e) == ERR_INVALID, "unknown user is an error");
    struct group *gr = getgrnam("llm170");
    CHECK(peer_policy_init(&p, 1000, 1000, "", "", &e) == 0, "init");
    if (gr)
        CHECK(peer_allowed(&p, 3000, gr->gr_gid, NULL, 0), "group llm170 allowed by default");
    /* /proc groups of ourselves */
    gid_t mine[64];
    int n = peer_proc_groups(getpid(), mine, 64);
    CHECK(n == getgroups(0, NULL), "groups from /proc: %d vs %d", n, getgroups(0, NULL));
    CHECK(peer_proc_groups(999999999, mine, 64) == -1, "a gone pid");
}

/* The set of refused connections: ids in, found, out again, past its first growth. */
static void refused_pipe_ids(void)
{
    struct pipeset s;
    pipeset_init(&s);
    bool added = true;
    for (uint32_t id = 1; id <= 40; id++)
        added &= pipeset_add(&s, id * 7);
    CHECK(added && s.n == 40, "40 ids added (%zu held)", s.n);
    CHECK(pipeset_has(&s, 7) && pipeset_has(&s, 140) && pipeset_has(&s, 280), "first, middle, last found");
    CHECK(!pipeset_has(&s, 8) && !pipeset_has(&s, 0), "ids never added are not found");
    pipeset_del(&s, 140);
    pipeset_del(&s, 7);
    pipeset_del(&s, 9999); /* not there: nothing happens */
    CHECK(s.n == 38 && !pipeset_has(&s, 140) && !pipeset_has(&s, 7), "two removed (%zu held)", s.n);
    CHECK(pipeset_has(&s, 280) && pipeset_has(&s, 14) && pipeset_has(&s, 273), "the others stay");
    pipeset_free(&s);
}

/* `llm170 ps --socket url` as uid/gid 65534 (no supplementary groups): its
 * exit status (0: it got the daemon's status). exec, not a forked nng. */
static int ps_as_nobody(const char *url)
{
    char built[1100], cli[600];
    snprintf(built, sizeof built, "%s", daemon_bin);
    char *slash = strrchr(built, '/');
    snprintf(slash ? slash + 1 : built, sizeof built - (size_t)(slash ? slash + 1 - built : 0), "llm170");
    /* a copy in the test directory: the checkout may sit where uid 65534
     * cannot reach (under /root), and that must not read as a refusal */
    snprintf(cli, sizeof cli, "%s/llm170-cli", tmpdir);
    if (access(cli, X_OK)) {
        size_t n = 0;
        char *b = check_read_file(built, &n);
        int fd = b ? open(cli, O_WRONLY | O_CREAT | O_TRUNC, 0755) : -1;
        bool ok = fd >= 0 && write(fd, b, n) == (ssize_t)n;
        if (fd >= 0)
            close(fd);
        free(b);
        if (!ok)
            return 96;
    }
    pid_t p = fork();
    if (p == 0) {
        if (setgroups(0, NULL) || setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534))
            _exit(99);
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        if (!getenv("TEST_VERBOSE"))
            dup2(fd, 2);
        execl(cli, cli, "ps", "--socket", url, (char *)NULL);
        _exit(97);
    }
    int st = 0;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 98;
}

/* The credential check on its own (the file mode opened up by hand): a uid
 * the policy does not know is cut off; listed in allow_uids it gets in. */
static void other_uid_refused(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    if (geteuid() != 0)
        SKIP("needs root to act as uid 65534");
    char cfg[400];
    snprintf(cfg, sizeof cfg, "%s/allow.conf", tmpdir);
    for (int round = 0; round < 2; round++) {
        FILE *f = fopen(cfg, "w");
        CHECK(f != NULL, "write %s", cfg);
        if (!f)
            return;
        fprintf(f, "[daemon]\nallow_uids = %s\n", round ? "65534" : "");
        fclose(f);
        const char *extra[] = {"--config", cfg, NULL};
        pid_t d;
        struct pc_client *c = daemon_up(extra, &d);
        if (!c)
            return;
        /* past the file mode: the test directory is 0700, so open both */
        chmod(tmpdir, 0755);
        chmod(sockurl + 6, 0666);
        int rc = ps_as_nobody(sockurl);
        chmod(tmpdir, 0700);
        if (round == 0)
            CHECK(rc == 1, "uid 65534 refused by the credential check (llm170 ps exit %d)", rc);
        else
            CHECK(rc == 0, "uid 65534 in allow_uids gets in (llm170 ps exit %d)", rc);
        struct proto_status st;
        struct err e;
        CHECK(pc_status(c, &st, &e) == 0 && st.ready, "the daemon serves its own user meanwhile");
        proto_status_free(&st);
        pc_close(c);
        CHECK_EQ_INT(stop_daemon(d), 0);
    }
}

/* One raw request on a connection of its own. */
static int raw_call(const struct proto_msg *req, struct proto_msg *rep)
{
    nng_socket s;
    struct err e;
    proto_msg_init(rep, PT_NONE);
    if (nng_req0_open(&s))
        return -1;
    int rc = -1;
    nng_ctx ctx;
    if (nng_dial(s, sockurl, NULL, 0) == 0 && nng_ctx_open(&ctx, s) == 0) {
        rc = proto_ctx_send(ctx, req, 3000, &e);
        if (!rc)
            rc = proto_ctx_recv(ctx, rep, 3000, &e);
        nng_ctx_close(ctx);
    }
    nng_close(s);
    return rc;
}

/* A stream id belongs to the connection that created it: another one's
 * next / cancel / poll of it are errors (or see nothing) and the stream runs
 * to its end untouched. Ids are random, not a counter. */
static void foreign_stream_ids(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    pid_t d;
    struct pc_client *c = daemon_up(NULL, &d);
    if (!c)
        return;
    struct proto_gen g;
    proto_gen_init(&g);
    g.prompt = "x";
    g.max_tokens = 30; /* ~0.6 s */
    g.set |= PG_MAX_TOKENS;
    g.group = 77;
    struct pc_stream *s, *s2;
    struct err e;
    CHECK(pc_generate(c, &g, &s, &e) == 0, "generate: %s", e.msg);
    g.group = 0;
    CHECK(pc_generate(c, &g, &s2, &e) == 0, "second generate: %s", e.msg);
    struct proto_sid id = pc_stream_id(s), id2 = pc_stream_id(s2);
    char h1[33], h2[33];
    proto_sid_hex(&id, h1);
    proto_sid_hex(&id2, h2);
    int same = 0;
    for (int i = 0; i < PROTO_SID_BYTES; i++)
        same += id.b[i] == id2.b[i];
    /* 128 random bits: two ids share about 1/16 of their bytes, a counter 15 of 16 */
    CHECK(!proto_sid_is_zero(&id) && same < 8, "ids are random 128-bit values: %s %s", h1, h2);
    pc_stream_free(s2);
    usleep(200000); /* some chunks are waiting */

    struct proto_msg req, rep;
    proto_msg_init(&req, PT_NEXT);
    req.stream = id;
    req.wait_ms = 100;
    CHECK(raw_call(&req, &rep) == 0 && rep.type == PT_ERROR && rep.errc == PE_NOT_FOUND,
          "next from another connection: %s %s", proto_type_name(rep.type), rep.message ? rep.message : "");
    proto_msg_free(&rep);
    proto_msg_init(&req, PT_CANCEL);
    req.stream = id;
    CHECK(raw_call(&req, &rep) == 0 && rep.type == PT_ERROR && rep.errc == PE_NOT_FOUND,
          "cancel from another connection: %s", proto_type_name(rep.type));
    proto_msg_free(&rep);
    proto_msg_init(&req, PT_POLL);
    req.id = 77; /* the same group number */
    req.wait_ms = 100;
    struct proto_ack ack = {.stream = id, .from = 1000};
    req.acks = &ack; /* and an ack that would drop everything */
    req.n_acks = 1;
    CHECK(raw_call(&req, &rep) == 0 && rep.type == PT_CHUNKS && rep.n_chunks == 0,
          "poll of its group from another connection sees nothing (%zu chunks)", rep.n_chunks);
    proto_msg_free(&rep);

    /* the owner still gets every chunk, to the end */
    int fin = 0, n_tok = 0;
    uint64_t want = 0;
    int64_t end = now_ms() + 5000;
    bool gap = false;
    while (fin == 0 && now_ms() < end) {
        struct proto_chunk *ch;
        size_t n;
        struct proto_ack a = {.stream = id, .from = want};
        if (pc_poll(c, 77, &a, 1, 300, 0, &ch, &n, &e))
            break;
        for (size_t i = 0; i < n; i++) {
            if (!proto_sid_eq(&ch[i].stream, &id) || ch[i].i < want)
                continue;
            gap |= ch[i].i != want;
            want = ch[i].i + 1;
            n_tok += ch[i].token >= 0;
            if (ch[i].finish)
                fin = ch[i].finish;
        }
        proto_chunks_free(ch, n);
    }
    CHECK_EQ_INT(fin, PF_LENGTH);
    CHECK_EQ_INT(n_tok, 30);
    CHECK(!gap, "no chunk lost");
    pc_stream_free(s);
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

static bool status_ready(struct pc_client *c)
{
    struct proto_status st;
    struct err e;
    if (pc_status(c, &st, &e))
        return false;
    bool r = st.ready;
    proto_status_free(&st);
    return r;
}

/* /health's source: not ready while a worker is SIGSTOPped (long before the
 * ping timeout kills it), ready again after SIGCONT; not ready while draining. */
static void health_stopped_worker_and_drain(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    const char *extra[] = {"--ping-timeout-ms", "20000", NULL};
    pid_t d;
    struct pc_client *c = daemon_up(extra, &d);
    if (!c)
        return;
    struct proto_status st;
    struct err e;
    pc_status(c, &st, &e);
    pid_t wpid = st.n_workers ? st.workers[0].pid : 0;
    proto_status_free(&st);
    CHECK(wpid > 0, "worker pid");
    if (wpid <= 0) {
        pc_close(c);
        stop_daemon(d);
        return;
    }
    kill(wpid, SIGSTOP);
    int64_t t0 = now_ms(), end = t0 + 5000;
    bool ready = true;
    while (ready && now_ms() < end) {
        usleep(50000);
        ready = status_ready(c);
    }
    printf("# SIGSTOPped worker: not ready after %lld ms (ping every 200 ms)\n", (long long)(now_ms() - t0));
    CHECK(!ready, "not ready within 5 s of SIGSTOP (the kill timeout is 20 s)");
    /* and it stays so: every status in the next half second says the same */
    bool flip = false;
    for (int i = 0; i < 10; i++) {
        flip |= status_ready(c);
        usleep(50000);
    }
    CHECK(!flip, "not ready every time while stopped");
    CHECK(pc_status(c, &st, &e) == 0 && st.n_workers == 1 && !strcmp(st.workers[0].state, "unresponsive"),
          "the worker shows as unresponsive (%s)", st.n_workers ? st.workers[0].state : "-");
    proto_status_free(&st);
    kill(wpid, SIGCONT);
    end = now_ms() + 5000;
    while (!ready && now_ms() < end) {
        usleep(50000);
        ready = status_ready(c);
    }
    CHECK(ready, "ready again after SIGCONT");

    /* draining: a request in flight keeps the daemon up; status says not ready */
    struct proto_gen g;
    proto_gen_init(&g);
    g.prompt = "x";
    g.max_tokens = 60; /* ~1.2 s */
    g.set |= PG_MAX_TOKENS;
    struct pc_stream *s;
    CHECK(pc_generate(c, &g, &s, &e) == 0, "generate");
    kill(d, SIGTERM);
    usleep(200000);
    CHECK(pc_status(c, &st, &e) == 0 && !st.ready, "draining: status answers, not ready");
    proto_status_free(&st);
    int fin = 0;
    end = now_ms() + 5000;
    while (!pc_stream_done(s) && now_ms() < end) {
        struct proto_chunk *ch;
        size_t n;
        if (pc_next(s, 200, &ch, &n, &e))
            break;
        for (size_t i = 0; i < n; i++)
            if (ch[i].finish)
                fin = ch[i].finish;
        proto_chunks_free(ch, n);
    }
    CHECK_EQ_INT(fin, PF_LENGTH);
    pc_stream_free(s);
    pc_close(c);
    CHECK_EQ_INT(stop_daemon(d), 0);
}

/* A worker lost with requests queued behind a running one: the queued ones
 * (never started) end 503-class every time; the running one (it produced
 * tokens) with an internal error. */
static void worker_lost_queued_is_503(void)
{
    if (!have_tools())
        SKIP("llm170d or fake_worker not built");
    const char *extra[] = {"--slots", "1", "--queue", "4", NULL};
    for (int round = 0; round < 3; round++) {
        pid_t d;
        struct pc_client *c = daemon_up(extra, &d);
        if (!c)
            return;
        struct proto_gen g;
        proto_gen_init(&g);
        g.prompt = "x";
        g.max_tokens = 100000;
        g.set |= PG_MAX_TOKENS;
        struct pc_stream *s[3];
        struct err e;
        bool all = true;
        for (int i = 0; i < 3; i++)
            all &= pc_generate(c, &g, &s[i], &e) == 0;
        CHECK(all, "three accepted (one running, two queued)");
        if (!all) {
            pc_close(c);
            stop_daemon(d);
            return;
        }
        struct proto_chunk *ch;
        size_t n;
        pc_next(s[0], 1000, &ch, &n, &e); /* the running one has produced output */
        proto_chunks_free(ch, n);
        struct proto_status st;
        pc_status(c, &st, &e);
        pid_t wpid = st.n_workers ? st.workers[0].pid : 0;
        proto_status_free(&st);
        if (wpid > 0)
            kill(wpid, SIGKILL);
        int errc[3] = {0, 0, 0};
        for (int i = 0; i < 3; i++) {
            int64_t end = now_ms() + 3000;
            while (!pc_stream_done(s[i]) && now_ms() < end) {
                if (pc_next(s[i], 200, &ch, &n, &e))
                    break;
                for (size_t k = 0; k < n; k++)
                    if (ch[k].finish == PF_ERROR)
                        errc[i] = ch[k].errc;
                proto_chunks_free(ch, n);
            }
            pc_stream_free(s[i]);
        }
        CHECK(errc[0] == PE_INTERNAL, "round %d: the running stream: %s", round, proto_errc_name(errc[0]));
        CHECK(errc[1] == PE_UNAVAILABLE && errc[2] == PE_UNAVAILABLE, "round %d: queued: %s, %s (want unavailable = 503)",
              round, proto_errc_name(errc[1]), proto_errc_name(errc[2]));
        CHECK(proto_errc_http(errc[1]) == 503, "503");
        pc_close(c);
        CHECK_EQ_INT(stop_daemon(d), 0);
    }
}

/* [daemon] socket is read by the shared resolution (the gateway and the CLI use it). */
static void config_socket_key(void)
{
    char cfg[400], url[512];
    struct err e;
    snprintf(cfg, sizeof cfg, "%s/sock.conf", tmpdir);
    FILE *f = fopen(cfg, "w");
    if (!f)
        return;
    fprintf(f, "[gateway]\nsocket = ipc:///wrong/section.sock\n[daemon]\nsocket = \"ipc:///srv/x/d.sock\"  # quoted\n");
    fclose(f);
    setenv("LLM170_SOCKET", "ipc:///env/d.sock", 1);
    CHECK(pc_config_url(cfg, url, sizeof url, &e) == 0 && !strcmp(url, "ipc:///srv/x/d.sock"),
          "[daemon] socket wins over the environment, as in llm170d: %s", url);
    f = fopen(cfg, "w");
    fprintf(f, "socket = ipc:///top/d.sock\n[models]\nsocket = nope\n");
    fclose(f);
    CHECK(pc_config_url(cfg, url, sizeof url, &e) == 0 && !strcmp(url, "ipc:///top/d.sock"), "top-level key: %s", url);
    f = fopen(cfg, "w");
    fprintf(f, "[daemon]\nmodel = m\n");
    fclose(f);
    CHECK(pc_config_url(cfg, url, sizeof url, &e) == 0 && !strcmp(url, "ipc:///env/d.sock"), "no key: default: %s", url);
    unsetenv("LLM170_SOCKET");
    CHECK(pc_config_url("/nonexistent/llm170.conf", url, sizeof url, &e) == ERR_IO, "missing explicit file");
}

int main(void)
{
    const char *bin = getenv("LLM170_BIN"), *build = getenv("LLM170_BUILD");
    snprintf(daemon_bin, sizeof daemon_bin, "%s/llm170d", bin ? bin : "bin");
    snprintf(fake, sizeof fake, "%s/tests/tools/fake_worker", build ? build : "build");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/llm170-test-daemon.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    /* the fake loads nothing, but llm170d checks that the model file exists and names the
       model after it: without ../shared/data an empty stand-in of the same name will do */
    const char *shared = check_shared_dir();
    snprintf(model, sizeof model, "%.900s/models/stories260K.gguf", shared ? shared : "../shared/data");
    if (access(model, R_OK) != 0) {
        snprintf(model, sizeof model, "%s/stories260K.gguf", tmpdir);
        FILE *mf = fopen(model, "w");
        if (!mf) {
            perror(model);
            return 1;
        }
        fclose(mf);
    }
    snprintf(sockurl, sizeof sockurl, "ipc://%s/d.sock", tmpdir);
    char child_log[300];
    snprintf(child_log, sizeof child_log, "%s/children.log", tmpdir);
    setenv("TEST_CHILD_LOG", child_log, 0);
    signal(SIGPIPE, SIG_IGN);
    RUN(stream_basic);
    RUN(concurrent_streams);
    RUN(poll_group);
    RUN(poll_hold);
    RUN(cancel_and_queue_full);
    RUN(worker_killed);
    RUN(systemd_notify);
    RUN(drain_on_sigterm);
    RUN(abandoned_stream_and_bad_input);
    RUN(load_failure_exits);
    RUN(config_file_and_flags);
    RUN(two_workers_one_dies);
    RUN(hung_worker_restarted);
    RUN(stress_many_streams);
    RUN(crash_loop_backs_off);
    RUN(malloc_tuned_for_itself_only);
    RUN(socket_modes);
    RUN(peer_policy);
    RUN(refused_pipe_ids);
    RUN(other_uid_refused);
    RUN(foreign_stream_ids);
    RUN(health_stopped_worker_and_drain);
    RUN(worker_lost_queued_is_503);
    RUN(config_socket_key);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", tmpdir);
    CHECK_EXIT();
}
