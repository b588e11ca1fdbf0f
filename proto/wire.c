/* wire.c — proto messages over nng (see wire.h). */
#include "wire.h"

#include <stdlib.h>
#include <string.h>

static int nng_fail(struct err *e, int rv, const char *what)
{
    return err_set(e, ERR_IO, "%s: %s", what, rv == NNG_ETIMEDOUT ? "timed out" : nng_strerror(rv));
}

int proto_timed_out(const struct err *e)
{
    return e && e->code == ERR_IO && strstr(e->msg, "timed out") != NULL;
}

static int bytes_msg(const void *buf, size_t len, nng_msg **out, struct err *e)
{
    if (nng_msg_alloc(out, len))
        return err_set(e, ERR_NOMEM, "proto: cannot allocate a %zu-byte message", len);
    memcpy(nng_msg_body(*out), buf, len);
    return 0;
}

static int to_msg(const struct proto_msg *m, nng_msg **out, struct err *e)
{
    char *buf;
    size_t len;
    int rc = proto_encode(m, &buf, &len, e);
    if (rc)
        return rc;
    rc = bytes_msg(buf, len, out, e);
    free(buf);
    return rc;
}

static int from_msg(nng_msg *msg, struct proto_msg *m, struct err *e)
{
    int rc = proto_decode(nng_msg_body(msg), nng_msg_len(msg), m, e);
    nng_msg_free(msg);
    return rc;
}

static nng_duration dur(int timeout_ms)
{
    return timeout_ms < 0 ? NNG_DURATION_DEFAULT : (nng_duration)timeout_ms;
}

/* Run one send or receive through an aio so every wait has a deadline. */
static int aio_op(nng_socket *s, nng_ctx *c, bool send, nng_msg **msg, int timeout_ms, struct err *e)
{
    nng_aio *aio;
    int rv = nng_aio_alloc(&aio, NULL, NULL);
    if (rv)
        return nng_fail(e, rv, "nng_aio_alloc");
    nng_aio_set_timeout(aio, dur(timeout_ms));
    if (send) {
        nng_aio_set_msg(aio, *msg);
        if (c) nng_ctx_send(*c, aio); else nng_send_aio(*s, aio);
    } else {
        if (c) nng_ctx_recv(*c, aio); else nng_recv_aio(*s, aio);
    }
    nng_aio_wait(aio);
    rv = nng_aio_result(aio);
    if (!send && rv == 0)
        *msg = nng_aio_get_msg(aio);
    nng_aio_free(aio);
    if (rv) {
        if (send)
            nng_msg_free(*msg); /* a failed send leaves the message with us */
        return nng_fail(e, rv, send ? "send" : "receive");
    }
    return 0;
}

int proto_send(nng_socket s, const struct proto_msg *m, int timeout_ms, struct err *e)
{
    nng_msg *msg;
    int rc = to_msg(m, &msg, e);
    return rc ? rc : aio_op(&s, NULL, true, &msg, timeout_ms, e);
}

int proto_send_bytes(nng_socket s, const void *buf, size_t len, int timeout_ms, struct err *e)
{
    nng_msg *msg;
    int rc = bytes_msg(buf, len, &msg, e);
    return rc ? rc : aio_op(&s, NULL, true, &msg, timeout_ms, e);
}

int proto_recv(nng_socket s, struct proto_msg *m, int timeout_ms, struct err *e)
{
    nng_msg *msg;
    proto_msg_init(m, PT_NONE);
    int rc = aio_op(&s, NULL, false, &msg, timeout_ms, e);
    return rc ? rc : from_msg(msg, m, e);
}

int proto_ctx_send(nng_ctx c, const struct proto_msg *m, int timeout_ms, struct err *e)
{
    nng_msg *msg;
    int rc = to_msg(m, &msg, e);
    return rc ? rc : aio_op(NULL, &c, true, &msg, timeout_ms, e);
}

int proto_ctx_recv(nng_ctx c, struct proto_msg *m, int timeout_ms, struct err *e)
{
    nng_msg *msg;
    proto_msg_init(m, PT_NONE);
    int rc = aio_op(NULL, &c, false, &msg, timeout_ms, e);
    return rc ? rc : from_msg(msg, m, e);
}

int proto_ctx_recv_pipe(nng_ctx c, struct proto_msg *m, int timeout_ms, uint32_t *pipe, struct err *e)
{
    nng_msg *msg;
    proto_msg_init(m, PT_NONE);
    *pipe = 0;
    int rc = aio_op(NULL, &c, false, &msg, timeout_ms, e);
    if (rc)
        return rc;
    int id = nng_pipe_id(nng_msg_get_pipe(msg));
    *pipe = id > 0 ? (uint32_t)id : 0;
    return from_msg(msg, m, e);
}
