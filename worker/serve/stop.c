/* stop.c — incremental stop-string matcher (see stop.h).
 *
 * Invariant: every byte already emitted lies before the earliest position
 * from which the text could still become a stop string, so any future match
 * starts inside the pending (not yet emitted) bytes. Only the pending bytes
 * are kept and searched; their length stays below the longest stop string
 * plus the newest piece. */
#include "stop.h"

#include <stdlib.h>
#include <string.h>

struct stop_matcher {
    char **stops;       /* [n] copies of the non-empty stop strings */
    size_t *lens;       /* [n] their lengths */
    int *index;         /* [n] position of each in the caller's list */
    int n;
    size_t max_len;

    char *buf;          /* [cap] pending bytes live at buf[start..len) */
    size_t cap, start, len;
    uint64_t base;      /* offset in the whole text of buf[0] */
    bool stopped;
    int which;
    uint64_t stop_offset;
};

int stop_new(struct stop_matcher **out, const char *const *stops, int n, struct err *e)
{
    *out = NULL;
    if (n < 0 || (n > 0 && !stops))
        return err_set(e, ERR_INVALID, "stop strings: bad list (count %d)", n);
    struct stop_matcher *m = calloc(1, sizeof *m);
    if (!m)
        return err_set(e, ERR_NOMEM, "stop strings: out of memory");
    if (n > 0) {
        m->stops = calloc((size_t)n, sizeof *m->stops);
        m->lens = calloc((size_t)n, sizeof *m->lens);
        m->index = calloc((size_t)n, sizeof *m->index);
        if (!m->stops || !m->lens || !m->index)
            goto nomem;
    }
    for (int i = 0; i < n; i++) {
        if (!stops[i]) {
            stop_free(m);
            return err_set(e, ERR_INVALID, "stop strings: entry %d is NULL", i);
        }
        size_t l = strlen(stops[i]);
        if (l == 0)
            continue;
        if (!(m->stops[m->n] = malloc(l)))
            goto nomem;
        memcpy(m->stops[m->n], stops[i], l);
        m->lens[m->n] = l;
        m->index[m->n] = i;
        m->n++;
        if (l > m->max_len)
            m->max_len = l;
    }
    m->cap = m->max_len + 64;
    if (!(m->buf = malloc(m->cap)))
        goto nomem;
    stop_reset(m);
    *out = m;
    return 0;
nomem:
    stop_free(m);
    return err_set(e, ERR_NOMEM, "stop strings: out of memory");
}

void stop_free(struct stop_matcher *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n; i++)
        free(m->stops[i]);
    free(m->stops);
    free(m->lens);
    free(m->index);
    free(m->buf);
    free(m);
}

void stop_reset(struct stop_matcher *m)
{
    m->start = m->len = 0;
    m->base = 0;
    m->stopped = false;
    m->which = -1;
    m->stop_offset = 0;
}

size_t stop_max_len(const struct stop_matcher *m) { return m->max_len; }

/* Bytes of a[0..n) that end on a whole UTF-8 character: an unfinished
 * multi-byte sequence at the end is cut off. Invalid bytes count as whole
 * characters so that bad text is never held forever. */
static size_t utf8_complete(const unsigned char *a, size_t n)
{
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char b = a[n - back];
        if ((b & 0xc0) == 0x80)
            continue; /* continuation byte: look further back for the lead */
        size_t need = b < 0x80 ? 1 : (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3
                    : (b & 0xf8) == 0xf0 ? 4 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

static void report(const struct stop_matcher *m, const char *emit, size_t n, struct stop_result *r)
{
    r->emit = emit;
    r->n_emit = n;
    r->stopped = m->stopped;
    r->which = m->which;
    r->stop_offset = m->stop_offset;
}

int stop_feed(struct stop_matcher *m, const char *text, size_t len, struct stop_result *r)
{
    if (!m || !r || (len > 0 && !text))
        return ERR_INVALID;
    if (m->stopped) {
        report(m, m->buf, 0, r);
        return 0;
    }
    /* drop what the previous call handed out, then append */
    if (m->start > 0) {
        memmove(m->buf, m->buf + m->start, m->len - m->start);
        m->base += m->start;
        m->len -= m->start;
        m->start = 0;
    }
    if (m->len + len > m->cap) {
        size_t cap = (m->len + len) * 2;
        char *nb = realloc(m->buf, cap);
        if (!nb)
            return ERR_NOMEM;
        m->buf = nb;
        m->cap = cap;
    }
    if (len)
        memcpy(m->buf + m->len, text, len);
    m->len += len;

    const char *p = m->buf;
    size_t n = m->len;
    /* earliest full occurrence of any stop string */
    for (size_t s = 0; s < n; s++) {
        for (int k = 0; k < m->n; k++) {
            size_t l = m->lens[k];
            if (n - s >= l && !memcmp(p + s, m->stops[k], l)) {
                m->stopped = true;
                m->which = m->index[k];
                m->stop_offset = m->base + s;
                m->start = m->len = 0; /* the rest is dropped */
                report(m, p, s, r);
                return 0;
            }
        }
    }
    /* earliest tail that is a proper prefix of some stop string */
    size_t hold = n;
    for (size_t s = n > m->max_len ? n - m->max_len : 0; s < n && hold == n; s++)
        for (int k = 0; k < m->n; k++)
            if (n - s < m->lens[k] && !memcmp(p + s, m->stops[k], n - s)) {
                hold = s;
                break;
            }
    hold = utf8_complete((const unsigned char *)p, hold);
    m->start = hold;
    report(m, p, hold, r);
    return 0;
}

int stop_flush(struct stop_matcher *m, struct stop_result *r)
{
    if (!m || !r)
        return ERR_INVALID;
    if (m->stopped) {
        report(m, m->buf, 0, r);
        return 0;
    }
    const char *p = m->buf + m->start;
    size_t n = m->len - m->start;
    m->base += m->len;
    m->start = m->len = 0;
    report(m, p, n, r);
    return 0;
}
