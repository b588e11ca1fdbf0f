/* client.c — the daemon client library (client.h). */
#include "client.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/ini.h"
#include "wire.h"

struct pc_client {
    nng_socket sock;
    int timeout_ms;
    char url[512];
};

struct pc_stream {
    struct pc_client *c;
    struct proto_sid id;
    uint64_t next_i; /* first chunk index not yet handed to the caller */
    int worker;
    bool done;
};

void pc_default_url(char *buf, size_t cap)
{
    const char *env = getenv("LLM170_SOCKET");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (env && *env)
        snprintf(buf, cap, "%s", env);
    else if (xdg && *xdg)
        snprintf(buf, cap, "ipc://%s/llm170/llm170d.sock", xdg);
    else
        snprintf(buf, cap, "ipc:///run/llm170/llm170d.sock");
}

static int on_socket_key(void *ctx, const char *path, int line, const char *section, const char *key,
                         const char *val, struct err *e)
{
    (void)path, (void)line, (void)e;
    if (ini_is_daemon_section(section) && !strcmp(key, "socket") && *val)
        snprintf(ctx, 512, "%s", val);
    return 0;
}

int pc_config_url(const char *config, char *buf, size_t cap, struct err *e)
{
    pc_default_url(buf, cap);
    char path[1024], url[512] = "";
    if (config)
        snprintf(path, sizeof path, "%s", config);
    else
        ini_default_path(path, sizeof path);
    if (!path[0])
        return 0;
    int rc = ini_read(path, config != NULL, on_socket_key, url, e);
    if (rc)
        return rc;
    if (url[0])
        snprintf(buf, cap, "%s", url);
    return 0;
}

int pc_http_status(int code)
{
    switch (code) {
    case ERR_OK: return 200;
    case ERR_INVALID: case ERR_RANGE: case ERR_FORMAT: case ERR_UNSUPPORTED: return 400;
    case ERR_NOTFOUND: return 404;
    case ERR_FULL: return 429;
    case ERR_IO: return 503;
    case ERR_CANCELED: return 499;
    default: return 500;
    }
}

int pc_open(struct pc_client **out, const char *url, int timeout_ms, int flags, struct err *e)
{
    *out = NULL;
    struct pc_client *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(e, ERR_NOMEM, "out of memory");
    if (url)
        snprintf(c->url, sizeof c->url, "%s", url);
    else if (pc_config_url(NULL, c->url, sizeof c->url, e))
        pc_default_url(c->url, sizeof c->url); /* an unreadable config must not keep `llm170 ps` from trying */
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : PC_TIMEOUT_MS;
    int rv = nng_req0_open(&c->sock);
    if (rv) {
        free(c);
        return err_set(e, ERR_IO, "cannot open a request socket: %s", nng_strerror(rv));
    }
    /* No automatic resend: a repeated generate would start a second stream.
     * Our calls carry their own deadlines instead. */
    nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 50);
    nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, 1000);
    nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, PROTO_MAX_MSG);
    rv = nng_dial(c->sock, c->url, NULL, (flags & PC_LAZY) ? NNG_FLAG_NONBLOCK : 0);
    if (rv) {
        nng_close(c->sock);
        err_set(e, ERR_IO, "cannot connect to llm170d at '%s': %s", c->url, nng_strerror(rv));
        free(c);
        return ERR_IO;
    }
    *out = c;
    return 0;
}

void pc_close(struct pc_client *c)
{
    if (!c)
        return;
    nng_close(c->sock);
    free(c);
}

/* One request/reply exchange on a fresh context. An "error" reply becomes
 * the matching ERR_* code with the daemon's message. */
static int call(struct pc_client *c, const struct proto_msg *req, struct proto_msg *rep, int extra_ms,
                struct err *e)
{
    nng_ctx ctx;
    proto_msg_init(rep, PT_NONE);
    int rv = nng_ctx_open(&ctx, c->sock);
    if (rv)
        return err_set(e, ERR_IO, "llm170d at '%s': %s", c->url, nng_strerror(rv));
    int rc = proto_ctx_send(ctx, req, c->timeout_ms, e);
    if (!rc)
        rc = proto_ctx_recv(ctx, rep, c->timeout_ms + extra_ms, e);
    nng_ctx_close(ctx);
    if (rc) {
        if (rc == ERR_IO)
            err_prefix(e, "llm170d at '%s'", c->url);
        return rc;
    }
    if (rep->type == PT_ERROR) {
        rc = err_set(e, proto_errc_to_err(rep->errc), "%s", rep->message ? rep->message : proto_errc_name(rep->errc));
        if (rc == ERR_OK)
            rc = err_set(e, ERR_INTERNAL, "llm170d answered with an error without a code");
        proto_msg_free(rep);
        return rc;
    }
    if (rep->type != (req->type == PT_STATUS ? PT_STATUS_REPLY
                      : req->type == PT_GENERATE ? PT_ACCEPTED
                      : req->type == PT_NEXT || req->type == PT_POLL ? PT_CHUNKS
                      : req->type == PT_TOKENIZE ? PT_TOKENS
                      : req->type == PT_DETOKENIZE ? PT_TEXT : PT_OK)) {
        err_set(e, ERR_INTERNAL, "llm170d answered a %s with an unexpected %s", proto_type_name(req->type),
                proto_type_name(rep->type));
        proto_msg_free(rep);
        return ERR_INTERNAL;
    }
    return 0;
}

int pc_status(struct pc_client *c, struct proto_status *st, struct err *e)
{
    struct proto_msg req, rep;
    proto_msg_init(&req, PT_STATUS);
    memset(st, 0, sizeof *st);
    int rc = call(c, &req, &rep, 0, e);
    if (rc)
        return rc;
    *st = rep.status;
    memset(&rep.status, 0, sizeof rep.status);
    proto_msg_free(&rep);
    return 0;
}

int pc_generate(struct pc_client *c, const struct proto_gen *g, struct pc_stream **out, struct err *e)
{
    *out = NULL;
    struct proto_msg req, rep;
    proto_msg_init(&req, PT_GENERATE);
    req.gen = *g;
    int rc = call(c, &req, &rep, 0, e);
    if (rc)
        return rc;
    struct pc_stream *s = calloc(1, sizeof *s);
    if (!s) {
        proto_msg_free(&rep);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    s->c = c;
    s->id = rep.stream;
    if (proto_sid_is_zero(&s->id)) {
        free(s);
        proto_msg_free(&rep);
        return err_set(e, ERR_INTERNAL, "llm170d accepted the request without a stream id (an older daemon?)");
    }
    s->worker = rep.worker.idx;
    proto_msg_free(&rep);
    *out = s;
    return 0;
}

int pc_next(struct pc_stream *s, int wait_ms, struct proto_chunk **chunks, size_t *n, struct err *e)
{
    *chunks = NULL;
    *n = 0;
    if (s->done)
        return 0;
    struct proto_msg req, rep;
    proto_msg_init(&req, PT_NEXT);
    req.stream = s->id;
    req.from = s->next_i;
    req.wait_ms = wait_ms < 0 ? 0 : wait_ms;
    int rc = call(s->c, &req, &rep, req.wait_ms, e);
    if (rc)
        return rc;
    /* Keep only chunks we have not handed out yet, in order and without gaps
     * (the daemon keeps unacknowledged chunks, so a retried poll is safe). */
    size_t k = 0;
    for (size_t i = 0; i < rep.n_chunks; i++) {
        struct proto_chunk *ch = &rep.chunks[i];
        if (ch->i != s->next_i || s->done) {
            proto_chunk_free(ch);
            continue;
        }
        s->next_i++;
        if (ch->finish)
            s->done = true;
        rep.chunks[k++] = *ch;
        if (k - 1 != i)
            memset(ch, 0, sizeof *ch);
    }
    if (rep.done && !s->done && k == 0 && rep.n_chunks == 0) {
        /* The daemon says the stream ended but had nothing left for us. */
        s->done = true;
    }
    if (k) {
        *chunks = rep.chunks;
        *n = k;
        rep.chunks = NULL;
        rep.n_chunks = 0;
    }
    proto_msg_free(&rep);
    return 0;
}

int pc_poll(struct pc_client *c, uint64_t group, const struct proto_ack *acks, size_t n_acks, int wait_ms,
            int hold_ms, struct proto_chunk **chunks, size_t *n, struct err *e)
{
    *chunks = NULL;
    *n = 0;
    struct proto_msg req, rep;
    proto_msg_init(&req, PT_POLL);
    req.id = group;
    req.acks = (struct proto_ack *)acks;
    req.n_acks = n_acks;
    req.wait_ms = wait_ms < 0 ? 0 : wait_ms;
    req.hold_ms = hold_ms < 0 ? 0 : hold_ms > req.wait_ms ? req.wait_ms : hold_ms;
    int rc = call(c, &req, &rep, req.wait_ms, e);
    if (rc)
        return rc;
    for (size_t i = 0; i < rep.n_chunks; i++)
        if (proto_sid_is_zero(&rep.chunks[i].stream))
            rep.chunks[i].stream = rep.stream;
    *chunks = rep.chunks;
    *n = rep.n_chunks;
    rep.chunks = NULL;
    rep.n_chunks = 0;
    proto_msg_free(&rep);
    return 0;
}

int pc_cancel_id(struct pc_client *c, const struct proto_sid *id, struct err *e)
{
    struct proto_msg req, rep;
    proto_msg_init(&req, PT_CANCEL);
    req.stream = *id;
    int rc = call(c, &req, &rep, 0, e);
    if (!rc)
        proto_msg_free(&rep);
    return rc;
}

void pc_stream_detach(struct pc_stream *s) { free(s); }

bool pc_stream_done(const struct pc_stream *s) { return s->done; }
struct proto_sid pc_stream_id(const struct pc_stream *s) { return s->id; }
int pc_stream_worker(const struct pc_stream *s) { return s->worker; }

int pc_cancel(struct pc_stream *s, struct err *e)
{
    struct proto_msg req, rep;
    proto_msg_init(&req, PT_CANCEL);
    req.stream = s->id;
    int rc = call(s->c, &req, &rep, 0, e);
    if (!rc)
        proto_msg_free(&rep);
    return rc;
}

void pc_stream_free(struct pc_stream *s)
{
    if (!s)
        return;
    if (!s->done) {
        struct err e;
        pc_cancel(s, &e); /* best effort: the daemon's idle timeout catches the rest */
    }
    free(s);
}

int pc_tokenize(struct pc_client *c, const char *model, const char *text, bool add_special,
                bool parse_special, int32_t **ids, size_t *n, struct err *e)
{
    *ids = NULL;
    *n = 0;
    struct proto_msg req, rep;
    proto_msg_init(&req, PT_TOKENIZE);
    req.gen.model = (char *)model;
    req.text = (char *)text;
    req.add_special = add_special;
    req.parse_special = parse_special;
    int rc = call(c, &req, &rep, 0, e);
    if (rc)
        return rc;
    *ids = rep.tokens;
    *n = rep.n_tokens;
    rep.tokens = NULL;
    rep.n_tokens = 0;
    proto_msg_free(&rep);
    return 0;
}

int pc_detokenize(struct pc_client *c, const char *model, const int32_t *ids, size_t n, char **text,
                  struct err *e)
{
    *text = NULL;
    struct proto_msg req, rep;
    proto_msg_init(&req, PT_DETOKENIZE);
    req.gen.model = (char *)model;
    req.tokens = (int32_t *)ids;
    req.n_tokens = n;
    int rc = call(c, &req, &rep, 0, e);
    if (rc)
        return rc;
    *text = rep.text;
    rep.text = NULL;
    proto_msg_free(&rep);
    return 0;
}
