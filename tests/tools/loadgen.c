/* loadgen.c — load benchmark client for the HTTP API (a benchmark, not a test).
 *
 * N concurrent streaming clients loop on POST /v1/completions for D seconds,
 * all on one thread with epoll and non-blocking sockets, so the client costs
 * little CPU next to the server it measures (on a 2-core box a Python client
 * took a quarter of it). A response is read whole, then parsed once: the
 * status line, the `data:` events, the usage chunk's completion_tokens
 * (stream_options.include_usage) and the closing `data: [DONE]`. Requests are
 * HTTP/1.0, so the body is the raw event stream up to the server's close.
 *
 *   loadgen [--host 127.0.0.1] [--port 8080] [--clients 64] [--seconds 60] [--max-tokens 64]
 *           [--temperature 0.8] [--prompt "Once upon a time"] [--same-prompt] [--extra JSON]
 *
 * Prints one line: requests, errors, tokens (sum of completion_tokens of the
 * requests that finished), tokens/s over the wall time, events/s, and the RSS
 * (kB) and CPU seconds of every llm170 process (llm170d, llm170-worker,
 * llm170-gateway) at the start and the end of the run. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct client {
    int fd;
    int idx;
    unsigned n;          /* requests this client made */
    char *req;           /* the request bytes */
    size_t req_len, req_off;
    char *buf;           /* the response so far */
    size_t len, cap;
};

struct stats {
    long requests, errors, tokens, events;
    char first_error[512]; /* the start of the first failed response, printed at the end: why they fail */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* RSS and CPU time of the llm170 processes, from /proc. */
struct proc_info {
    int pid;
    char comm[32];
    long rss_kb;
    double cpu_s;
};

static int scan_procs(struct proc_info *out, int cap)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    int n = 0;
    long tck = sysconf(_SC_CLK_TCK);
    struct dirent *de;
    while ((de = readdir(d)) && n < cap) {
        int pid = atoi(de->d_name);
        if (pid <= 0)
            continue;
        char path[64], line[512];
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t got = fread(line, 1, sizeof line - 1, f);
        fclose(f);
        line[got] = 0;
        char *lp = strchr(line, '('), *rp = strrchr(line, ')');
        if (!lp || !rp || rp - lp - 1 >= 32)
            continue;
        char comm[32];
        memcpy(comm, lp + 1, (size_t)(rp - lp - 1));
        comm[rp - lp - 1] = 0;
        if (strncmp(comm, "llm170", 6))
            continue;
        /* fields after ')': state(3) … utime(14) stime(15) … rss(24), 1-based */
        unsigned long ut = 0, st = 0;
        long rss = 0;
        char *p = rp + 2;
        for (int field = 3; field <= 24 && p && *p; field++) {
            if (field == 14)
                ut = strtoul(p, NULL, 10);
            else if (field == 15)
                st = strtoul(p, NULL, 10);
            else if (field == 24)
                rss = strtol(p, NULL, 10);
            p = strchr(p, ' ');
            if (p)
                p++;
        }
        out[n].pid = pid;
        snprintf(out[n].comm, sizeof out[n].comm, "%s", comm);
        out[n].rss_kb = rss * (sysconf(_SC_PAGESIZE) / 1024);
        out[n].cpu_s = (double)(ut + st) / (double)tck;
        n++;
    }
    closedir(d);
    return n;
}

struct opts {
    int max_tokens;
    const char *temperature; /* as given: JSON number text */
    const char *prompt;      /* JSON-safe text; "%d %u" are not expanded */
    bool vary;               /* append the client and request numbers to the prompt */
    const char *extra;       /* more members of the body, as JSON text ("" none): "response_format":{…};
                              * each "{req}" in it becomes the request's number (a schema no other request has) */
};

/* extra with each "{req}" replaced by req, into out (cap); false when it does not fit */
static bool expand_extra(const char *extra, unsigned req, char *out, size_t cap)
{
    size_t o = 0;
    for (const char *p = extra; *p;) {
        if (!strncmp(p, "{req}", 5)) {
            int k = snprintf(out + o, cap - o, "%u", req);
            if (k < 0 || (size_t)k >= cap - o)
                return false;
            o += (size_t)k;
            p += 5;
        } else {
            if (o + 1 >= cap)
                return false;
            out[o++] = *p++;
        }
    }
    out[o] = 0;
    return true;
}

static int start_request(struct client *c, int ep, const struct sockaddr_in *sa, const struct opts *op)
{
    char body[4096], extra[3072];
    char suffix[32] = "";
    if (op->vary)
        snprintf(suffix, sizeof suffix, " %d %u", c->idx, c->n);
    if (!expand_extra(op->extra, (unsigned)c->idx * 1000000u + c->n, extra, sizeof extra))
        return -1;
    int bl = snprintf(body, sizeof body,
                      "{\"prompt\":\"%s%s\",\"max_tokens\":%d,\"temperature\":%s,"
                      "\"seed\":%u,\"stream\":true,\"stream_options\":{\"include_usage\":true}%s%s}",
                      op->prompt, suffix, op->max_tokens, op->temperature, (unsigned)c->idx * 1000u + c->n,
                      *extra ? "," : "", extra);
    if (bl >= (int)sizeof body)
        return -1;
    free(c->req);
    c->req = malloc(sizeof body + 256);
    if (!c->req)
        return -1;
    c->req_len = (size_t)snprintf(c->req, sizeof body + 256,
                                  "POST /v1/completions HTTP/1.0\r\nHost: loadgen\r\nContent-Type: application/json\r\n"
                                  "Content-Length: %d\r\n\r\n%s",
                                  bl, body);
    c->req_off = 0;
    c->len = 0;
    c->n++;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c->fd < 0)
        return -1;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (const struct sockaddr *)sa, sizeof *sa) && errno != EINPROGRESS) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.ptr = c};
    return epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
}

/* Parse a whole response; count it. */
static void finish_response(struct client *c, struct stats *st)
{
    st->requests++;
    if (c->len + 1 > c->cap) {
        char *nb = realloc(c->buf, c->len + 1);
        if (!nb) {
            st->errors++;
            return;
        }
        c->buf = nb;
        c->cap = c->len + 1;
    }
    c->buf[c->len] = 0;
    int code = 0;
    if (c->len > 12 && !strncmp(c->buf, "HTTP/1.", 7))
        code = atoi(c->buf + 9);
    long events = 0, tokens = -1;
    bool done = false, error = false;
    for (char *p = c->buf; (p = strstr(p, "data: ")); p += 6) {
        if (!strncmp(p + 6, "[DONE]", 6)) {
            done = true;
            continue;
        }
        events++;
        char *end = strstr(p, "\n\n");
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > 9 && !strncmp(p + 6, "{\"error\"", 8))
            error = true;
        char *u = memmem(p, n, "\"completion_tokens\":", 20);
        if (u)
            tokens = strtol(u + 20, NULL, 10);
    }
    st->events += events;
    if (code != 200 || !done || error || tokens < 0) {
        if (!st->errors++) {
            size_t n = c->len < sizeof st->first_error - 1 ? c->len : sizeof st->first_error - 1;
            memcpy(st->first_error, c->buf, n);
            st->first_error[n] = 0;
        }
        return;
    }
    st->tokens += tokens;
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    int port = 8080, n_clients = 64;
    struct opts op = {.max_tokens = 64, .temperature = "0.8", .prompt = "Once upon a time", .vary = true,
                   .extra = ""};
    double seconds = 60;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: loadgen [--host H] [--port P] [--clients N] [--seconds S] [--max-tokens N]\n"
                   "               [--temperature T] [--prompt TEXT] [--same-prompt] [--extra JSON]\n"
                   "Prompts are TEXT plus ' <client> <request>' unless --same-prompt.\n"
                   "--extra adds members to every request body, e.g. '\"response_format\":{\"type\":\"json_object\"}';\n"
                   "each {req} in it becomes the request's number.\n");
            return 0;
        }
        if (!strcmp(a, "--same-prompt")) {
            op.vary = false;
            continue;
        }
        if (!v) {
            fprintf(stderr, "loadgen: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--host")) host = v;
        else if (!strcmp(a, "--port")) port = atoi(v);
        else if (!strcmp(a, "--clients")) n_clients = atoi(v);
        else if (!strcmp(a, "--seconds")) seconds = atof(v);
        else if (!strcmp(a, "--max-tokens")) op.max_tokens = atoi(v);
        else if (!strcmp(a, "--temperature")) op.temperature = v;
        else if (!strcmp(a, "--prompt")) op.prompt = v;
        else if (!strcmp(a, "--extra")) op.extra = v;
        else {
            fprintf(stderr, "loadgen: unknown option '%s'\n", a);
            return 2;
        }
        i++;
    }
    if (n_clients < 1 || n_clients > 10000 || port <= 0 || seconds <= 0) {
        fprintf(stderr, "loadgen: bad --clients, --port or --seconds\n");
        return 2;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "loadgen: --host must be an IPv4 address\n");
        return 2;
    }
    int ep = epoll_create1(0);
    struct client *cl = calloc((size_t)n_clients, sizeof *cl);
    if (ep < 0 || !cl) {
        fprintf(stderr, "loadgen: out of resources\n");
        return 1;
    }
    struct proc_info p0[64], p1[64];
    int np0 = scan_procs(p0, 64);
    struct stats st = {0};
    double t0 = now_s(), deadline = t0 + seconds;
    int open = 0;
    for (int i = 0; i < n_clients; i++) {
        cl[i].idx = i;
        cl[i].fd = -1;
        if (start_request(&cl[i], ep, &sa, &op))
            st.errors++;
        else
            open++;
    }
    /* RSS every 10 s, to see whether it stays flat */
    enum { MAX_SAMPLES = 64 };
    struct proc_info samp[MAX_SAMPLES][64];
    int n_samp_procs[MAX_SAMPLES], n_samp = 0;
    double t_next_samp = t0 + 10;
    struct epoll_event evs[256];
    while (open > 0) {
        if (now_s() >= t_next_samp && n_samp < MAX_SAMPLES) {
            n_samp_procs[n_samp] = scan_procs(samp[n_samp], 64);
            n_samp++;
            t_next_samp += 10;
        }
        int k = epoll_wait(ep, evs, 256, 1000);
        if (k < 0 && errno != EINTR)
            break;
        for (int e = 0; e < k; e++) {
            struct client *c = evs[e].data.ptr;
            bool closed = false;
            if (c->req_off < c->req_len && (evs[e].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
                ssize_t w = write(c->fd, c->req + c->req_off, c->req_len - c->req_off);
                if (w > 0)
                    c->req_off += (size_t)w;
                else if (w < 0 && errno != EAGAIN)
                    closed = true;
                if (c->req_off == c->req_len) {
                    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                }
            }
            while (!closed && (evs[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
                if (c->cap - c->len < 16384) {
                    size_t cap = c->cap ? c->cap * 2 : 65536;
                    char *nb = realloc(c->buf, cap);
                    if (!nb) {
                        closed = true;
                        break;
                    }
                    c->buf = nb;
                    c->cap = cap;
                }
                ssize_t r = read(c->fd, c->buf + c->len, c->cap - c->len - 1);
                if (r > 0) {
                    c->len += (size_t)r;
                    continue;
                }
                if (r == 0 || errno != EAGAIN)
                    closed = true;
                break;
            }
            if (!closed)
                continue;
            close(c->fd);
            c->fd = -1;
            open--;
            finish_response(c, &st);
            if (now_s() < deadline) {
                if (start_request(c, ep, &sa, &op))
                    st.errors++;
                else
                    open++;
            }
        }
    }
    double dt = now_s() - t0;
    int np1 = scan_procs(p1, 64);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double self_cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
                      ru.ru_stime.tv_usec * 1e-6;
    printf("clients %d, %.1f s: %ld requests, %ld errors, %ld tokens, %.1f tokens/s, %.1f events/s; "
           "this client %.2f s CPU\n",
           n_clients, dt, st.requests, st.errors, st.tokens, (double)st.tokens / dt, (double)st.events / dt, self_cpu);
    if (st.first_error[0])
        fprintf(stderr, "loadgen: the first failed response began:\n%s\n", st.first_error);
    for (int i = 0; i < np1; i++) {
        long rss0 = -1;
        double cpu0 = 0;
        for (int j = 0; j < np0; j++)
            if (p0[j].pid == p1[i].pid) {
                rss0 = p0[j].rss_kb;
                cpu0 = p0[j].cpu_s;
            }
        printf("  %-15s pid %-7d RSS %ld -> %ld kB, CPU %.2f s; RSS every 10 s:", p1[i].comm, p1[i].pid, rss0,
               p1[i].rss_kb, p1[i].cpu_s - cpu0);
        for (int k = 0; k < n_samp; k++)
            for (int j = 0; j < n_samp_procs[k]; j++)
                if (samp[k][j].pid == p1[i].pid)
                    printf(" %ld", samp[k][j].rss_kb);
        printf("\n");
    }
    for (int i = 0; i < n_clients; i++) {
        free(cl[i].req);
        free(cl[i].buf);
    }
    free(cl);
    close(ep);
    return st.errors ? 1 : 0;
}
