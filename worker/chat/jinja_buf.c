/* jinja_buf.c — what every part of the template engine writes with: the
 * growing output buffer and the first-failure-wins error of a render
 * (jinja_internal.h). Below both the evaluator and the builtins. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

json_t *jinja_err(struct jctx *c, int code, const char *fmt, ...)
{
    if (c->e->code)
        return NULL; /* the first failure is the one worth reporting */
    char m[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    err_set(c->e, code, "chat template line %d: %s", c->line, m);
    return NULL;
}

bool jinja_failed(const struct jctx *c) { return c->e->code != 0; }

int jinja_buf_put(struct jbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return ERR_NOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int jinja_buf_puts(struct jbuf *b, const char *s) { return jinja_buf_put(b, s, strlen(s)); }
