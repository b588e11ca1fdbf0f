/* test_idle_conns.c — the gateway's HTTP layer with 10 000 idle TCP
 * connections open: it holds them all, still answers a normal request at
 * once, closes every idle one after the configured idle timeout (--timeout)
 * and not before, and serves again afterwards. Also: with the connection
 * limit reached, a new client waits (in the listen backlog) and is served
 * once idle connections time out — it is not refused (docs/serving.md).
 *
 * The server is tests/tools/fake_gateway (the product's http.c over the fake
 * backend) in its own process: 10 000 connections need 10 000 descriptors on
 * each side. Skipped when RLIMIT_NOFILE cannot be raised that far. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define N_IDLE 10000
#define IDLE_TIMEOUT_S 2

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct server {
    pid_t pid;
    FILE *in;  /* closing it stops the server */
    int port;
    unsigned max_conn;
};

static int server_start(struct server *sv, const char *max_conn)
{
    const char *build = getenv("LLM170_BUILD");
    char bin[1024];
    snprintf(bin, sizeof bin, "%s/tests/tools/fake_gateway", build && *build ? build : "build");
    int in[2], out[2];
    if (pipe(in) || pipe(out))
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        char t[16];
        snprintf(t, sizeof t, "%d", IDLE_TIMEOUT_S);
        execl(bin, bin, "--timeout", t, "--max-connections", max_conn, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    sv->pid = pid;
    sv->in = fdopen(in[1], "w");
    FILE *o = fdopen(out[0], "r");
    if (!sv->in || !o || fscanf(o, "port %d max_connections %u", &sv->port, &sv->max_conn) != 2) {
        if (o)
            fclose(o);
        return -1;
    }
    fclose(o);
    return 0;
}

static void server_stop(struct server *sv)
{
    if (sv->in)
        fclose(sv->in);
    int st;
    for (int i = 0; i < 100; i++) {
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid)
            return;
        usleep(50000);
    }
    kill(sv->pid, SIGKILL);
    waitpid(sv->pid, &st, 0);
}

static struct sockaddr_in addr_of(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/* Open n connections, a batch at a time (so the listen backlog never
 * overflows); 0 when all are established. */
static int open_idle(int port, int *fds, int n)
{
    struct sockaddr_in a = addr_of(port);
    if (n <= 0)
        return n == 0 ? 0 : -1;
    for (int i = 0; i < n; i++)
        fds[i] = -1;
    struct pollfd *pf = calloc((size_t)(unsigned)n, sizeof *pf);
    if (!pf)
        return -1;
    const int batch = 500;
    for (int b = 0; b < n; b += batch) {
        int k = n - b < batch ? n - b : batch;
        for (int i = b; i < b + k; i++) {
            fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
            if (fds[i] < 0)
                return -1;
            if (connect(fds[i], (struct sockaddr *)&a, sizeof a) && errno != EINPROGRESS)
                return -1;
            pf[i] = (struct pollfd){.fd = fds[i], .events = POLLOUT};
        }
        double end = now_s() + 10;
        int done = 0;
        while (done < k && now_s() < end) {
            int r = poll(pf + b, (nfds_t)k, 100);
            if (r < 0)
                return -1;
            done = 0;
            for (int i = b; i < b + k; i++) {
                if (pf[i].revents & (POLLERR | POLLHUP))
                    return -1;
                if (pf[i].revents & POLLOUT)
                    pf[i].events = 0;
                done += pf[i].events == 0;
            }
        }
        if (done < k)
            return -1;
    }
    free(pf);
    return 0;
}

/* Connections of fds[] the server has closed (or that hold data) now. */
static int count_closed(const int *fds, int n)
{
    struct pollfd *pf = calloc((size_t)n, sizeof *pf);
    for (int i = 0; i < n; i++)
        pf[i] = (struct pollfd){.fd = fds[i], .events = POLLIN | POLLRDHUP};
    int r = poll(pf, (nfds_t)n, 0);
    free(pf);
    return r < 0 ? -1 : r;
}

/* One request on a fresh connection; the whole response into out. Returns
 * the seconds it took, or -1. */
static double request(int port, const char *req, char *out, size_t cap, double limit_s)
{
    double t0 = now_s();
    struct sockaddr_in a = addr_of(port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {.tv_sec = (time_t)limit_s, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    size_t len = 0;
    out[0] = 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) || write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
        close(fd);
        return -1;
    }
    for (;;) {
        ssize_t r = read(fd, out + len, cap - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len == cap - 1)
            break;
    }
    out[len] = 0;
    close(fd);
    return len ? now_s() - t0 : -1;
}

static const char STREAM_REQ[] =
    "POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 47\r\n\r\n"
    "{\"prompt\":\"hello\",\"max_tokens\":4,\"stream\":true}";

/* RLIMIT_NOFILE of this process raised to `need`; false when it cannot be. */
static bool fd_limit(rlim_t need, char *why, size_t cap)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < need && rl.rlim_max >= need) {
        rl.rlim_cur = need;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur >= need)
        return true;
    snprintf(why, cap, "RLIMIT_NOFILE is %llu (hard %llu); %d idle connections need %llu descriptors",
             (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, N_IDLE, (unsigned long long)need);
    return false;
}

static char skip_why[256];

static void idle_10k(void)
{
    if (!fd_limit(N_IDLE + 256, skip_why, sizeof skip_why))
        SKIP(skip_why);
    struct server sv = {0};
    if (server_start(&sv, "10100")) {
        CHECK(0, "fake_gateway did not start");
        return;
    }
    if (sv.max_conn < N_IDLE + 10) {
        server_stop(&sv);
        snprintf(skip_why, sizeof skip_why, "the server can hold only %u connections (its descriptor limit)",
                 sv.max_conn);
        SKIP(skip_why);
    }
    int *fds = malloc(N_IDLE * sizeof *fds);
    double t_open0 = now_s();
    int rc = open_idle(sv.port, fds, N_IDLE);
    double t_open1 = now_s();
    CHECK(rc == 0, "%d connections established", N_IDLE);
    printf("# %d connections opened in %.2f s\n", N_IDLE, t_open1 - t_open0);
    usleep(300000);
    int closed = count_closed(fds, N_IDLE);
    CHECK(closed == 0, "the server holds all of them (%d closed early)", closed);

    char buf[16384];
    double dt = request(sv.port, "GET /health HTTP/1.0\r\n\r\n", buf, sizeof buf, 5);
    CHECK(dt >= 0 && dt < 1.0 && !strncmp(buf, "HTTP/1.1 200", 12),
          "GET /health answered 200 at once while they are open (%.3f s)", dt);
    dt = request(sv.port, STREAM_REQ, buf, sizeof buf, 5);
    CHECK(dt >= 0 && dt < 1.0 && !strncmp(buf, "HTTP/1.1 200", 12) && strstr(buf, "data: [DONE]"),
          "a streamed completion runs to [DONE] while they are open (%.3f s)", dt);
    printf("# normal requests answered while %d idle connections are open\n", N_IDLE);

    /* the idle ones are closed by the server after the idle timeout */
    struct pollfd *pf = calloc(N_IDLE, sizeof *pf);
    for (int i = 0; i < N_IDLE; i++)
        pf[i] = (struct pollfd){.fd = rc == 0 ? fds[i] : -1, .events = POLLIN | POLLRDHUP};
    int n_eof = 0, n_data = 0;
    double first = 0, last = 0, end = t_open1 + IDLE_TIMEOUT_S + 10;
    while (n_eof + n_data < N_IDLE && now_s() < end) {
        if (poll(pf, N_IDLE, 200) < 0)
            break;
        for (int i = 0; i < N_IDLE; i++) {
            if (pf[i].fd < 0 || !pf[i].revents)
                continue;
            char c;
            ssize_t r = recv(pf[i].fd, &c, 1, 0);
            if (r == 0 || (r < 0 && errno == ECONNRESET))
                n_eof++;
            else if (r > 0)
                n_data++; /* an idle connection gets no bytes: counted as wrong */
            else
                continue;
            double t = now_s();
            if (!first)
                first = t;
            last = t;
            close(pf[i].fd);
            pf[i].fd = -1;
        }
    }
    for (int i = 0; i < N_IDLE; i++)
        if (pf[i].fd >= 0)
            close(pf[i].fd);
    free(pf);
    CHECK(n_eof == N_IDLE && n_data == 0, "all %d closed by the server without a byte (%d closed, %d got data)",
          N_IDLE, n_eof, n_data);
    /* each was idle from its own connect on; the first ones connected at t_open0 */
    CHECK(first >= t_open0 + IDLE_TIMEOUT_S - 0.5, "none closed before the %d s idle timeout (first after %.2f s)",
          IDLE_TIMEOUT_S, first ? first - t_open0 : 0.0);
    printf("# closed between %.2f and %.2f s after the first connect\n", first - t_open0, last - t_open0);
    dt = request(sv.port, STREAM_REQ, buf, sizeof buf, 5);
    CHECK(dt >= 0 && strstr(buf, "data: [DONE]"), "serves again afterwards");
    free(fds);
    server_stop(&sv);
}

/* At the limit a new client waits for a free slot; it is not refused. */
static void at_limit_waits(void)
{
    if (!fd_limit(512, skip_why, sizeof skip_why))
        SKIP(skip_why);
    struct server sm = {0};
    if (server_start(&sm, "100")) {
        CHECK(0, "fake_gateway did not start");
        return;
    }
    int small[100];
    double t0 = now_s();
    CHECK(open_idle(sm.port, small, 100) == 0, "100 idle connections established");
    char buf[4096];
    double dt = request(sm.port, "GET /health HTTP/1.0\r\n\r\n", buf, sizeof buf, IDLE_TIMEOUT_S + 8);
    double waited = now_s() - t0;
    CHECK(dt >= 0 && !strncmp(buf, "HTTP/1.1 200", 12) && waited >= IDLE_TIMEOUT_S - 0.5,
          "the 101st client is served once idle ones time out (after %.2f s)", waited);
    for (int i = 0; i < 100; i++)
        close(small[i]);
    server_stop(&sm);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    RUN(idle_10k);
    RUN(at_limit_waits);
    CHECK_EXIT();
}
