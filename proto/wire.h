/* wire.h — moving proto messages over nng sockets and contexts.
 *
 * Every function encodes/decodes with proto.h and waits at most timeout_ms
 * (< 0 = the socket's own setting / forever). A message that arrives but does
 * not decode is consumed and reported as ERR_FORMAT (m->type tells what it
 * claimed to be, when that much was readable); a timeout is ERR_IO with
 * "timed out" in the message; a closed socket is ERR_IO too. */
#ifndef LLM170_PROTO_WIRE_H
#define LLM170_PROTO_WIRE_H

#include <nng/nng.h>

#include "proto.h"

/* Socket-level (pair0 between the daemon and a worker). */
int proto_send(nng_socket s, const struct proto_msg *m, int timeout_ms, struct err *e);
/* An already encoded message (proto_chunkbuf_end's bytes), sent as it is. */
int proto_send_bytes(nng_socket s, const void *buf, size_t len, int timeout_ms, struct err *e);
int proto_recv(nng_socket s, struct proto_msg *m, int timeout_ms, struct err *e);

/* Context-level (REQ/REP between clients and the daemon). */
int proto_ctx_send(nng_ctx c, const struct proto_msg *m, int timeout_ms, struct err *e);
int proto_ctx_recv(nng_ctx c, struct proto_msg *m, int timeout_ms, struct err *e);
/* proto_ctx_recv that also says which connection (nng pipe id) the message came on. */
int proto_ctx_recv_pipe(nng_ctx c, struct proto_msg *m, int timeout_ms, uint32_t *pipe, struct err *e);

/* True when e says the wait ran out (as opposed to a closed socket or bad data). */
int proto_timed_out(const struct err *e);

#endif
