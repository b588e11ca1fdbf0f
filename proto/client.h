/* client.h — talking to llm170d: status, generate with incremental stream
 * chunks, cancel, tokenize. Used by the CLI (run, chat, ps) and the gateway.
 *
 * A pc_client is one connection (an nng REQ socket) and is thread-safe: any
 * number of threads may run calls on it at once (each call uses its own nng
 * context). A pc_stream belongs to one thread at a time.
 *
 * Every function returns 0 or a negative ERR_* code with a one-line message
 * in e. The code says what the HTTP layer should answer (pc_http_status):
 *   ERR_INVALID 400 bad request · ERR_RANGE 400 prompt too long for the context
 *   ERR_NOTFOUND 404 unknown model/stream · ERR_FULL 429 queue full
 *   ERR_IO 503 daemon/worker not reachable or not ready, or a timeout
 *   ERR_CANCELED (canceled) · ERR_INTERNAL 500 (a worker died mid-request …)
 *
 * Stream life: pc_generate waits until a worker has accepted the request (it
 * has tokenized the prompt and found it a slot or a queue place), so queue
 * full / too long / bad parameters come back from pc_generate itself. Then
 * pc_next returns the chunks produced since the last call (waiting up to
 * wait_ms for at least one). The last chunk has finish != PF_NONE; a stream
 * that fails later (its worker died) ends with finish == PF_ERROR and errc
 * set. A stream nobody polls for PC_STREAM_IDLE_MS is canceled by the daemon. */
#ifndef LLM170_PROTO_CLIENT_H
#define LLM170_PROTO_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "proto.h"

#define PC_TIMEOUT_MS 10000       /* default per-call deadline (plus wait_ms for pc_next) */
#define PC_STREAM_IDLE_MS 30000   /* daemon cancels a stream not polled for this long */

struct pc_client;
struct pc_stream;

enum {
    PC_LAZY = 1, /* do not fail when the daemon is not up yet: calls wait for it (gateway) */
};

/* The daemon's default socket URL: $LLM170_SOCKET, else
 * ipc://$XDG_RUNTIME_DIR/llm170/llm170d.sock, else ipc:///run/llm170/llm170d.sock. */
void pc_default_url(char *buf, size_t cap);

/* The socket llm170d listens on as its config says: `socket` of the config
 * file's [daemon] section (or before any section) in config, or when NULL in
 * the file llm170d reads by default ($XDG_CONFIG_HOME/llm170/llm170.conf, else
 * /etc/llm170/llm170.conf); pc_default_url when the file sets none. The one
 * resolution the daemon, the gateway and the CLI share (flags still win). An
 * explicit config that cannot be read is an error (buf holds the default). */
int pc_config_url(const char *config, char *buf, size_t cap, struct err *e);

/* Connect. url NULL = pc_config_url(NULL). timeout_ms <= 0 = PC_TIMEOUT_MS.
 * Without PC_LAZY a daemon that is not listening is an immediate ERR_IO. */
int pc_open(struct pc_client **out, const char *url, int timeout_ms, int flags, struct err *e);
void pc_close(struct pc_client *c);

/* Daemon status; free with proto_status_free. */
int pc_status(struct pc_client *c, struct proto_status *st, struct err *e);

/* Submit a request (build it with proto_gen_init, then set fields; the
 * request's strings are only borrowed). On success *out is the stream. */
int pc_generate(struct pc_client *c, const struct proto_gen *g, struct pc_stream **out, struct err *e);

/* Chunks produced since the last call, waiting up to wait_ms (0 = just look)
 * for at least one. *chunks is malloc'ed (free with proto_chunks_free), *n may
 * be 0. After the final chunk has been returned pc_stream_done is true and
 * further calls return 0 chunks. */
int pc_next(struct pc_stream *s, int wait_ms, struct proto_chunk **chunks, size_t *n, struct err *e);
bool pc_stream_done(const struct pc_stream *s);
/* Free the handle without canceling: its stream is collected by pc_poll (the
 * request was submitted with gen.group set). */
void pc_stream_detach(struct pc_stream *s);

/* Poll groups: one caller collects the chunks of many streams with one
 * request. A generate with gen.group = G puts its stream in group G (any
 * non-zero number the caller picks, unique to it). pc_poll returns the chunks
 * of every stream of G the daemon holds, each naming its stream in stream,
 * waiting up to wait_ms for at least one; acks[] tells the daemon which chunks
 * the caller already has (stream id, first index it lacks), so they are
 * dropped (a stream whose final chunk is acknowledged is forgotten). Chunks
 * not acknowledged come again in the next reply: the caller skips indexes it
 * has seen. hold_ms > 0 lets mid-stream chunks collect that long (so one
 * reply carries several steps) while a stream's final chunk is answered at
 * once, alone with the other streams that ended (proto/README.md).
 * *chunks is malloc'ed (proto_chunks_free). */
int pc_poll(struct pc_client *c, uint64_t group, const struct proto_ack *acks, size_t n_acks, int wait_ms,
            int hold_ms, struct proto_chunk **chunks, size_t *n, struct err *e);
/* Cancel a stream by id (a stream of a poll group); it then ends with PF_CANCEL. */
int pc_cancel_id(struct pc_client *c, const struct proto_sid *id, struct err *e);
/* The stream's id (128 random bits; only this client's connection may use it). */
struct proto_sid pc_stream_id(const struct pc_stream *s);
int pc_stream_worker(const struct pc_stream *s); /* worker index serving it */

/* Ask the daemon to stop the request; its stream then ends with PF_CANCEL. */
int pc_cancel(struct pc_stream *s, struct err *e);
/* Free; cancels the request first when its stream has not ended. */
void pc_stream_free(struct pc_stream *s);

/* Tokenize / detokenize with a served model's vocabulary (model NULL = any). */
int pc_tokenize(struct pc_client *c, const char *model, const char *text, bool add_special,
                bool parse_special, int32_t **ids, size_t *n, struct err *e);
int pc_detokenize(struct pc_client *c, const char *model, const int32_t *ids, size_t n, char **text,
                  struct err *e);

/* HTTP status for a code returned above (200 for 0). */
int pc_http_status(int err_code);

#endif
