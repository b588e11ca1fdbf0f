/* backend_daemon.h — the gateway backend that talks to llm170d (proto/client.h). */
#ifndef LLM170_GATEWAY_BACKEND_DAEMON_H
#define LLM170_GATEWAY_BACKEND_DAEMON_H

#include "backend.h"

/* url NULL = the daemon's default socket. Does not need the daemon to be up. */
int daemon_backend_open(struct gw_backend *out, const char *url, struct err *e);
/* Waits for the job threads (cancel them first), then closes. */
void daemon_backend_close(struct gw_backend *be);

#endif
