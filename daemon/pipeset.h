/* pipeset.h — a set of nng pipe ids: the client connections the peer policy
 * refused. nng's pipe callbacks fill and empty it; the client threads ask it
 * before serving a request.
 *
 * Why not close a refused pipe in its callback: with nng 1.5.2 (Debian 12),
 * pipes closed from NNG_PIPE_EV_ADD_PRE or ADD_POST callbacks of the REP
 * socket left it, after a few such refusals in a row, never again handing a
 * request to any context: any local user who could reach the socket stopped
 * the daemon for everyone (tests/redteam/ipc.sh reproduces it). A refused
 * connection now stays open and every request on it is answered "forbidden". */
#ifndef LLM170_DAEMON_PIPESET_H
#define LLM170_DAEMON_PIPESET_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pipeset {
    pthread_mutex_t mu;
    uint32_t *ids; /* [n], unordered */
    size_t n, cap;
};

void pipeset_init(struct pipeset *s);
void pipeset_free(struct pipeset *s);
/* false when out of memory (the caller then refuses the connection otherwise) */
bool pipeset_add(struct pipeset *s, uint32_t id);
void pipeset_del(struct pipeset *s, uint32_t id);
bool pipeset_has(struct pipeset *s, uint32_t id);

#endif
