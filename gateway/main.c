/* main.c — llm170-gateway: the OpenAI-compatible HTTP front of llm170d.
 *
 * Settings come from (later wins): the config file's [gateway] section, the
 * environment (LLM170_API_KEY), then the command line. The daemon's socket:
 * --daemon, else [gateway] daemon, else llm170d's own [daemon] socket, else
 * $LLM170_SOCKET / the default (pc_config_url). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/ini.h"
#include "../common/malloc_tune.h"
#include "../common/version.h"
#include "../proto/client.h"
#include "backend_daemon.h"
#include "http.h"

static const char usage[] =
    "usage: llm170-gateway [--listen HOST:PORT] [--daemon URL] [--api-key KEY] [--config FILE]\n"
    "                      [--max-body BYTES] [--timeout SECONDS] [--threads N] [--max-connections N]\n"
    "                      [--header-timeout SECONDS] [--max-conns-per-ip N] [--cors-origin ORIGINS]\n"
    "\n"
    "OpenAI-compatible HTTP API in front of llm170d:\n"
    "  POST /v1/chat/completions, /v1/completions, /tokenize, /detokenize\n"
    "  GET  /v1/models, /health (200 when a worker is ready, else 503), /metrics (Prometheus)\n"
    "\n"
    "  --listen HOST:PORT   address to listen on (default 127.0.0.1:8080; [::1]:8080 for IPv6,\n"
    "                       :8080 for every interface)\n"
    "  --daemon URL         llm170d's socket (default the config's [daemon] socket, else $LLM170_SOCKET, else\n"
    "                       ipc://$XDG_RUNTIME_DIR/llm170/llm170d.sock, else ipc:///run/llm170/llm170d.sock)\n"
    "  --api-key KEY        require 'Authorization: Bearer KEY' (also api_key in the config, $LLM170_API_KEY)\n"
    "  --config FILE        config file (default $XDG_CONFIG_HOME/llm170/llm170.conf, else /etc/llm170/llm170.conf)\n"
    "  --max-body BYTES     largest request body (default 8388608; larger → 413)\n"
    "  --timeout SECONDS    idle connection timeout (default 120)\n"
    "  --threads N          HTTP event-loop threads (default 4)\n"
    "  --max-connections N  open connections at most (default 16384)\n"
    "  --header-timeout S   a request's whole header block must arrive within S seconds of the\n"
    "                       connection opening (or of its previous response), else the connection\n"
    "                       is closed; bounds slow-header clients (default 10; 0 = no deadline)\n"
    "  --max-conns-per-ip N connections from one client address at most; more are closed at once\n"
    "                       (default 512; 0 = no cap; behind a local proxy every client is one address)\n"
    "  --cors-origin LIST   browser origins allowed to call the API cross-origin, comma-separated\n"
    "                       (e.g. http://localhost:3000); default none: CORS off. '*' is refused\n"
    "  --drain-timeout S    on SIGTERM/SIGINT, let requests in flight finish this long (default 25;\n"
    "                       a second signal stops at once)\n"
    "  --version            version, commit and backends built in\n"
    "  --help               this text\n";

static volatile sig_atomic_t stop_flag;
static volatile int stop_now; /* a second signal: do not wait for requests */
static void on_signal(int sig)
{
    (void)sig;
    if (stop_flag)
        stop_now = 1;
    stop_flag = 1;
}

static int parse_listen(const char *v, struct gw_config *cfg)
{
    const char *colon = strrchr(v, ':');
    if (!colon || !colon[1])
        return -1;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535 || (size_t)(colon - v) >= sizeof cfg->host)
        return -1;
    memcpy(cfg->host, v, (size_t)(colon - v));
    cfg->host[colon - v] = 0;
    if (!cfg->host[0]) /* ":8080": every interface */
        snprintf(cfg->host, sizeof cfg->host, "0.0.0.0");
    cfg->port = (int)port;
    return 0;
}

static unsigned drain_timeout = 25;

static int parse_uint(const char *v, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || x > max || v[0] == '-')
        return -1;
    *out = x;
    return 0;
}

/* One setting by name, from the config file or a flag. */
static int apply(struct gw_config *cfg, char *daemon_url, size_t url_cap, const char *key, const char *val,
                 const char *where)
{
    unsigned long long x;
    if (!strcmp(key, "listen")) {
        if (parse_listen(val, cfg))
            return fprintf(stderr, "llm170-gateway: %s: bad listen address '%s' (want HOST:PORT)\n", where, val), -1;
    } else if (!strcmp(key, "daemon") || !strcmp(key, "socket")) {
        snprintf(daemon_url, url_cap, "%s", val);
    } else if (!strcmp(key, "api_key") || !strcmp(key, "api-key")) {
        snprintf(cfg->api_key, sizeof cfg->api_key, "%s", val);
    } else if (!strcmp(key, "max_body") || !strcmp(key, "max-body")) {
        if (parse_uint(val, 1ull << 34, &x) || x == 0)
            return fprintf(stderr, "llm170-gateway: %s: bad max body size '%s'\n", where, val), -1;
        cfg->max_body = (size_t)x;
    } else if (!strcmp(key, "timeout")) {
        if (parse_uint(val, 86400, &x))
            return fprintf(stderr, "llm170-gateway: %s: bad timeout '%s'\n", where, val), -1;
        cfg->timeout_s = (unsigned)x;
    } else if (!strcmp(key, "threads")) {
        if (parse_uint(val, 256, &x) || x == 0)
            return fprintf(stderr, "llm170-gateway: %s: bad thread count '%s'\n", where, val), -1;
        cfg->threads = (unsigned)x;
    } else if (!strcmp(key, "drain_timeout") || !strcmp(key, "drain-timeout")) {
        if (parse_uint(val, 3600, &x))
            return fprintf(stderr, "llm170-gateway: %s: bad drain timeout '%s'\n", where, val), -1;
        drain_timeout = (unsigned)x;
    } else if (!strcmp(key, "header_timeout") || !strcmp(key, "header-timeout")) {
        if (parse_uint(val, 3600, &x))
            return fprintf(stderr, "llm170-gateway: %s: bad header timeout '%s'\n", where, val), -1;
        cfg->header_timeout_s = (unsigned)x;
    } else if (!strcmp(key, "max_conns_per_ip") || !strcmp(key, "max-conns-per-ip")) {
        if (parse_uint(val, 1000000, &x))
            return fprintf(stderr, "llm170-gateway: %s: bad per-address connection cap '%s'\n", where, val), -1;
        cfg->max_per_ip = (unsigned)x;
    } else if (!strcmp(key, "cors_origin") || !strcmp(key, "cors-origin")) {
        /* "*" would let any web page read the answers of a server on this
         * machine or network: name the origins instead */
        if (strchr(val, '*') || strlen(val) >= sizeof cfg->cors_origins)
            return fprintf(stderr, "llm170-gateway: %s: bad CORS origin list '%s' (name the origins, e.g. "
                                   "http://localhost:3000; '*' is not allowed)\n", where, val), -1;
        snprintf(cfg->cors_origins, sizeof cfg->cors_origins, "%s", val);
    } else if (!strcmp(key, "max_connections") || !strcmp(key, "max-connections")) {
        if (parse_uint(val, 1000000, &x) || x == 0)
            return fprintf(stderr, "llm170-gateway: %s: bad connection limit '%s'\n", where, val), -1;
        cfg->max_connections = (unsigned)x;
    } else {
        return 1; /* not ours */
    }
    return 0;
}

struct load_ctx {
    struct gw_config *cfg;
    char *url;
    size_t url_cap;
};

/* The config file (common/ini.h, the reader llm170d uses): the [gateway]
 * section is ours; the daemon's socket comes from its own key ([daemon]
 * socket) through pc_config_url, so both read one setting. */
static int on_key(void *ctx, const char *path, int line, const char *section, const char *key, const char *val,
                  struct err *e)
{
    struct load_ctx *l = ctx;
    if (strcmp(section, "gateway") && strcmp(section, "llm170-gateway"))
        return 0; /* other sections belong to other programs */
    char where[600];
    snprintf(where, sizeof where, "%s:%d", path, line);
    if (apply(l->cfg, l->url, l->url_cap, key, val, where) < 0)
        return err_set(e, ERR_INVALID, "%s: bad value for '%s'", where, key);
    return 0;
}

static int load_config(const char *path, bool must_exist, struct gw_config *cfg, char *url, size_t url_cap)
{
    struct load_ctx l = {cfg, url, url_cap};
    struct err e;
    err_clear(&e);
    int rc = ini_read(path, must_exist, on_key, &l, &e);
    if (rc && e.code != ERR_INVALID) /* apply() already said what was wrong */
        fprintf(stderr, "llm170-gateway: %s\n", e.msg);
    return rc ? -1 : 0;
}

int main(int argc, char **argv)
{
    malloc_tune(argv, "llm170-gateway");
    struct gw_config cfg;
    gw_config_default(&cfg);
    char url[512] = "";
    const char *config = NULL;
    for (int i = 1; i < argc; i++) { /* --config and --help first: the file comes before the flags */
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--version")) {
            version_print(stdout, "llm170-gateway");
            return 0;
        }
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "llm170-gateway: --config needs a value\n%s", usage);
                return 2;
            }
            config = argv[i + 1];
        }
    }
    if (config) {
        if (load_config(config, true, &cfg, url, sizeof url))
            return 1;
    } else {
        char path[1024];
        ini_default_path(path, sizeof path); /* the file llm170d reads */
        if (path[0] && load_config(path, false, &cfg, url, sizeof url))
            return 1;
    }
    const char *env_key = getenv("LLM170_API_KEY");
    if (env_key && *env_key)
        snprintf(cfg.api_key, sizeof cfg.api_key, "%s", env_key);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--config")) {
            i++;
            continue;
        }
        if (strncmp(a, "--", 2) || i + 1 >= argc) {
            fprintf(stderr, "llm170-gateway: %s '%s'\n%s", strncmp(a, "--", 2) ? "unexpected argument" : "missing value for",
                    a, usage);
            return 2;
        }
        int rc = apply(&cfg, url, sizeof url, a + 2, argv[i + 1], "command line");
        if (rc > 0) {
            fprintf(stderr, "llm170-gateway: unknown option '%s'\n%s", a, usage);
            return 2;
        }
        if (rc < 0)
            return 2;
        i++;
    }
    struct err e;
    err_clear(&e);
    /* [daemon] socket, read as llm170d reads it, else $LLM170_SOCKET / the default */
    if (!url[0] && pc_config_url(config, url, sizeof url, &e)) {
        fprintf(stderr, "llm170-gateway: %s\n", e.msg);
        return 1;
    }
    struct gw_backend be;
    if (daemon_backend_open(&be, url, &e)) {
        fprintf(stderr, "llm170-gateway: cannot use daemon socket '%s': %s\n", url, e.msg);
        return 1;
    }
    struct gw_server *srv = NULL;
    if (gw_server_start(&srv, &cfg, &be, &e)) {
        fprintf(stderr, "llm170-gateway: %s\n", e.msg);
        daemon_backend_close(&be);
        return 1;
    }
    /* every open connection is a descriptor: gw_server_start raised the soft
     * limit as far as the connection limit needs, or lowered that limit */
    if (cfg.max_connections && gw_server_max_connections(srv) < cfg.max_connections)
        fprintf(stderr, "llm170-gateway: the descriptor limit (ulimit -n) holds only %u connections, not %u\n",
                gw_server_max_connections(srv), cfg.max_connections);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    fprintf(stderr, "llm170-gateway: listening on %s:%d (daemon %s%s)\n", cfg.host, gw_server_port(srv), url,
            cfg.api_key[0] ? ", API key required" : "");
    while (!stop_flag)
        pause();
    fprintf(stderr, "llm170-gateway: stopping (new connections refused; waiting up to %u s for requests in flight)\n",
            drain_timeout);
    int left = gw_server_drain(srv, drain_timeout, &stop_now);
    if (left)
        fprintf(stderr, "llm170-gateway: canceling %d requests still running\n", left);
    gw_server_stop(srv);
    daemon_backend_close(&be);
    return 0;
}
