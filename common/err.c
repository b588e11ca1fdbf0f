#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(struct err *e, int code, const char *fmt, ...)
{
    if (!e)
        return code;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return code;
}

int err_prefix(struct err *e, const char *fmt, ...)
{
    if (!e)
        return ERR_INTERNAL;
    char head[256], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    /* truncation is fine: the head matters most */
    size_t n = strlen(head);
    if (n > sizeof e->msg - 3)
        n = sizeof e->msg - 3;
    memcpy(e->msg, head, n);
    memcpy(e->msg + n, ": ", 2);
    size_t rest = sizeof e->msg - n - 3;
    size_t ol = strnlen(old, sizeof old);
    if (ol > rest)
        ol = rest;
    memcpy(e->msg + n + 2, old, ol);
    e->msg[n + 2 + ol] = '\0';
    return e->code;
}

void err_clear(struct err *e)
{
    if (!e)
        return;
    e->code = ERR_OK;
    e->msg[0] = '\0';
}

const char *err_name(int code)
{
    switch (code) {
    case ERR_OK: return "ok";
    case ERR_IO: return "i/o error";
    case ERR_FORMAT: return "format error";
    case ERR_NOMEM: return "out of memory";
    case ERR_UNSUPPORTED: return "unsupported";
    case ERR_INVALID: return "invalid argument";
    case ERR_RANGE: return "out of range";
    case ERR_NOTFOUND: return "not found";
    case ERR_FULL: return "full";
    case ERR_CANCELED: return "canceled";
    case ERR_INTERNAL: return "internal error";
    default: return "unknown error";
    }
}
