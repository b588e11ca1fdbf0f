/* http.h — the gateway's HTTP server (libmicrohttpd): routing, API keys,
 * body/time limits, JSON and SSE responses, client-disconnect cancellation,
 * /health and /metrics. Generation goes through a struct gw_backend. */
#ifndef LLM170_GATEWAY_HTTP_H
#define LLM170_GATEWAY_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/err.h"
#include "backend.h"

struct gw_config {
    char host[256];          /* listen address ("127.0.0.1", "0.0.0.0", "::1", "localhost") */
    int port;                /* 0 = any free port (see gw_server_port) */
    char api_key[256];       /* "" = no API key required */
    size_t max_body;         /* request body limit in bytes (413 beyond) */
    unsigned timeout_s;      /* idle connection timeout (a client that stops sending) */
    unsigned threads;        /* MHD event-loop threads (epoll each) */
    unsigned max_connections;
    unsigned header_timeout_s; /* a connection's whole header block must arrive within this (0 = no deadline) */
    unsigned max_per_ip;       /* connections from one client address at most (0 = no cap) */
    char cors_origins[512];    /* comma-separated origins allowed cross-origin; "" = CORS off */
};

void gw_config_default(struct gw_config *c);

struct gw_server;

int gw_server_start(struct gw_server **out, const struct gw_config *cfg, const struct gw_backend *be, struct err *e);
int gw_server_port(const struct gw_server *s);
/* Stop accepting connections and wait up to timeout_s for the generation
 * requests in flight to finish (returns early when *abort becomes nonzero).
 * Returns how many were still running. */
/* The connection limit in force: the configured one, lowered when the
 * descriptor limit (RLIMIT_NOFILE, whose soft value gw_server_start raises
 * as far as needed and allowed) cannot hold that many connections. */
unsigned gw_server_max_connections(const struct gw_server *s);

int gw_server_drain(struct gw_server *s, unsigned timeout_s, volatile int *abort);
/* Cancel what is running, close connections, stop the threads. */
void gw_server_stop(struct gw_server *s);

#endif
