/* err.h — integer error codes that carry a human message.
 *
 * Every fallible function in the project returns an int: 0 on success or a
 * negative ERR_* code, and fills a caller-owned `struct err` with one line
 * that names what failed (file, offset, key …). No global errno-like state:
 * the message travels with the call. */
#ifndef LLM170_ERR_H
#define LLM170_ERR_H

#include <stddef.h>

enum err_code {
    ERR_OK = 0,
    ERR_IO = -1,          /* open/read/write/mmap failed (errno text in msg) */
    ERR_FORMAT = -2,      /* malformed input file or message */
    ERR_NOMEM = -3,       /* allocation failed */
    ERR_UNSUPPORTED = -4, /* valid input we do not implement */
    ERR_INVALID = -5,     /* bad argument from the caller / user */
    ERR_RANGE = -6,       /* value out of its allowed range */
    ERR_NOTFOUND = -7,    /* a required key / tensor / file is missing */
    ERR_FULL = -8,        /* a bounded resource (queue, slots, context) is full */
    ERR_CANCELED = -9,    /* the operation was canceled by its owner */
    ERR_INTERNAL = -10,   /* a bug: an invariant did not hold */
};

struct err {
    int code;      /* one of enum err_code; ERR_OK when nothing failed */
    char msg[512]; /* one line, no trailing newline */
};

/* Record `code` with a printf-style message; returns `code` so callers can
 * write `return err_set(e, ERR_FORMAT, "...")`. `e` may be NULL. */
int err_set(struct err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix an existing message ("ctx: old message"), keeping the code. */
int err_prefix(struct err *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clear to ERR_OK with an empty message. */
void err_clear(struct err *e);

/* Short generic name of a code ("format error", …). */
const char *err_name(int code);

#endif
