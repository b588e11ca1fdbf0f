/* cmd_serve.c — `llm170 serve`: llm170d (with one worker) and the HTTP
 * gateway in the foreground, for trying things out without systemd. Ctrl-C
 * stops both (the daemon drains open requests first). */
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/clock.h"
#include "../proto/client.h"
#include "cli.h"


/* This run's private socket directory, removed at exit (empty by then: the
 * daemon removes its socket and its workers' directory when it stops). */
static char g_sock_dir[512];
static void remove_sock_dir(void)
{
    if (g_sock_dir[0])
        rmdir(g_sock_dir);
}

/* A fresh 0700 directory only we can enter (mkdtemp: a name nobody can
 * predict or pre-create), under $XDG_RUNTIME_DIR/llm170 or else /tmp, and
 * the daemon's socket in it: no other local user reaches this run's daemon. */
static int private_socket(char *sock, size_t cap)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (xdg && *xdg) {
        char base[400];
        snprintf(base, sizeof base, "%.380s/llm170", xdg);
        mkdir(base, 0700);
        snprintf(g_sock_dir, sizeof g_sock_dir, "%s/serve.XXXXXX", base);
    } else {
        snprintf(g_sock_dir, sizeof g_sock_dir, "/tmp/llm170-serve.XXXXXX");
    }
    if (!mkdtemp(g_sock_dir)) {
        fprintf(stderr, "llm170: serve: cannot create a private directory '%s': %s\n", g_sock_dir, strerror(errno));
        g_sock_dir[0] = 0;
        return -1;
    }
    atexit(remove_sock_dir);
    snprintf(sock, cap, "ipc://%s/llm170d.sock", g_sock_dir);
    return 0;
}

static volatile sig_atomic_t g_stop;
static void on_stop(int sig) { (void)sig; g_stop = 1; }

static void usage(FILE *f)
{
    fprintf(f, "usage: llm170 serve --model M [--host 127.0.0.1] [--port 8080] [--slots N] [--backend cpu|hip|vulkan]\n"
               "                    [--gpu N] [--api-key K] [--threads N] [--ctx N] [--socket URL]\n"
               "Runs llm170d, one worker and llm170-gateway in the foreground; Ctrl-C stops all.\n"
               "  --model M      GGUF file\n"
               "  --host H       address the HTTP gateway listens on (default 127.0.0.1)\n"
               "  --port P       its port (default 8080)\n"
               "  --slots N      requests decoded together (default 4)\n"
               "  --backend B    cpu (default), hip or vulkan (GPU --gpu N, default 0)\n"
               "  --api-key K    require 'Authorization: Bearer K' on the HTTP API\n"
               "  --socket URL   daemon socket (default: $LLM170_SOCKET, else a private one for this run)\n");
}

/* Directory of this executable, for its sibling programs. */
static void sibling(const char *name, char *out, size_t cap)
{
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(out, cap, "%s", name);
        return;
    }
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = 0;
    snprintf(out, cap, "%s/%s", self, name);
}

static pid_t spawn(const char *const *argv)
{
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0); /* the terminal's Ctrl-C reaches us only; we stop the children in order */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "llm170: cannot run '%s': %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

static const char *describe(int st, char *buf, size_t cap)
{
    if (WIFSIGNALED(st))
        snprintf(buf, cap, "was killed by signal %d", WTERMSIG(st));
    else
        snprintf(buf, cap, "exited with status %d", WEXITSTATUS(st));
    return buf;
}

/* SIGTERM, then wait up to grace_ms, then SIGKILL. */
static void stop_child(pid_t pid, int grace_ms)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    int64_t end = clock_now_ms() + grace_ms;
    while (clock_now_ms() < end) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Bind host:port once, as the gateway will (SO_REUSEADDR, as libmicrohttpd
 * sets it), so a port in use fails before the model loads, in one line. */
static int check_port(const char *host, const char *port)
{
    char h[256];
    snprintf(h, sizeof h, "%s", host);
    size_t hl = strlen(h);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        memmove(h, h + 1, hl - 2);
        h[hl - 2] = 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    int gai = getaddrinfo(h[0] ? h : NULL, port, &hints, &ai);
    if (gai) {
        fprintf(stderr, "llm170: serve: cannot resolve listen address '%s': %s\n", host, gai_strerror(gai));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, rc = 0;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) || bind(fd, ai->ai_addr, ai->ai_addrlen)) {
        fprintf(stderr, "llm170: serve: cannot listen on %s:%s: %s\n", host, port, strerror(errno));
        rc = -1;
    }
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return rc;
}

int cmd_serve(int argc, char **argv)
{
    const char *model = NULL, *host = "127.0.0.1", *port = "8080", *slots = "4", *backend = "cpu", *gpu = "0",
               *api_key = NULL, *threads = NULL, *ctx = NULL, *url = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        static const char *const names[] = {"--model", "--host", "--port", "--slots", "--backend", "--gpu",
                                            "--api-key", "--threads", "--ctx", "--socket"};
        const char **dst[] = {&model, &host, &port, &slots, &backend, &gpu, &api_key, &threads, &ctx, &url};
        size_t k;
        for (k = 0; k < sizeof names / sizeof *names; k++)
            if (!strcmp(argv[i], names[k]))
                break;
        if (k == sizeof names / sizeof *names) {
            fprintf(stderr, "llm170: serve: unknown argument '%s' (try --help)\n", argv[i]);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "llm170: serve: %s needs a value\n", argv[i]);
            return 2;
        }
        *dst[k] = argv[++i];
    }
    if (!model) {
        fprintf(stderr, "llm170: serve: --model is required (try --help)\n");
        return 2;
    }
    if (access(model, R_OK) != 0) {
        fprintf(stderr, "llm170: cannot open model '%s': %s\n", model, strerror(errno));
        return 1;
    }
    enum backend_kind bk;
    if (!engine_backend_parse(backend, &bk)) {
        fprintf(stderr, "llm170: serve: unknown backend '%s' (" ENGINE_BACKEND_NAMES ")\n", backend);
        return 2;
    }
    char sock[600], listen[300], dbin[1100], gbin[1100];
    const char *env_sock = getenv("LLM170_SOCKET");
    if (url) {
        snprintf(sock, sizeof sock, "%s", url);
    } else if (env_sock && *env_sock) { /* where `llm170 ps/run` in this environment look */
        snprintf(sock, sizeof sock, "%s", env_sock);
    } else if (private_socket(sock, sizeof sock)) {
        return 1;
    }
    snprintf(listen, sizeof listen, "%s:%s", host, port);
    if (check_port(host, port)) /* before the model loads: a busy port fails at once */
        return 1;
    sibling("llm170d", dbin, sizeof dbin);
    sibling("llm170-gateway", gbin, sizeof gbin);
    for (const char *b = dbin; b; b = b == dbin ? gbin : NULL)
        if (access(b, X_OK) != 0) {
            fprintf(stderr, "llm170: cannot run '%s': %s\n", b, strerror(errno));
            return 1;
        }

    struct sigaction sa = {0};
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    const char *dargv[24];
    int n = 0;
    dargv[n++] = dbin;
    dargv[n++] = "--socket"; dargv[n++] = sock;
    dargv[n++] = "--model"; dargv[n++] = model;
    dargv[n++] = "--devices"; dargv[n++] = strcmp(backend, "cpu") ? gpu : "cpu";
    if (strcmp(backend, "cpu")) {
        dargv[n++] = "--gpu-backend";
        dargv[n++] = backend;
    }
    dargv[n++] = "--slots"; dargv[n++] = slots;
    if (threads) {
        dargv[n++] = "--threads";
        dargv[n++] = threads;
    }
    if (ctx) {
        dargv[n++] = "--ctx";
        dargv[n++] = ctx;
    }
    dargv[n] = NULL;
    pid_t dpid = spawn(dargv), gpid = -1;
    if (dpid < 0) {
        fprintf(stderr, "llm170: cannot start llm170d: %s\n", strerror(errno));
        return 1;
    }
    /* wait for the model to load before opening the HTTP port */
    bool tty = isatty(STDERR_FILENO);
    if (tty)
        fprintf(stderr, "llm170: loading %s …\n", model);
    struct pc_client *c = NULL;
    struct err e;
    int rc = 0;
    char why[64];
    for (;;) {
        int st;
        if (waitpid(dpid, &st, WNOHANG) == dpid) {
            fprintf(stderr, "llm170: llm170d %s\n", describe(st, why, sizeof why));
            return 1;
        }
        if (g_stop) {
            stop_child(dpid, 10000);
            return 0;
        }
        if (!c && pc_open(&c, sock, 2000, 0, &e))
            c = NULL;
        struct proto_status stt;
        if (c && pc_status(c, &stt, &e) == 0) {
            bool ready = stt.ready;
            proto_status_free(&stt);
            if (ready)
                break;
        }
        usleep(100000);
    }
    pc_close(c);
    const char *gargv[] = {gbin, "--listen", listen, "--daemon", sock, api_key ? "--api-key" : NULL, api_key, NULL};
    gpid = spawn(gargv);
    fprintf(stderr, "llm170: serving %s at http://%s/v1 (daemon %s); Ctrl-C stops\n", model, listen, sock);
    while (!g_stop) {
        int st;
        pid_t p = waitpid(-1, &st, 0);
        if (p < 0 && errno == EINTR)
            continue;
        if (p == dpid || p == gpid) {
            fprintf(stderr, "llm170: %s %s\n", p == dpid ? "llm170d" : "llm170-gateway", describe(st, why, sizeof why));
            if (p == dpid)
                dpid = -1;
            else
                gpid = -1;
            rc = 1;
            break;
        }
        if (p < 0)
            break;
    }
    /* the gateway first (no new HTTP requests), then the daemon drains */
    stop_child(gpid, 5000);
    stop_child(dpid, 35000);
    if (!rc)
        fprintf(stderr, "llm170: stopped\n");
    return rc;
}
