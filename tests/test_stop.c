/* test_stop.c — incremental stop-string matching (spec sampling.md §6.1):
 * the text is cut before the earliest stop string, a stop string never
 * reaches the stream, possible prefixes and unfinished UTF-8 are held back. */
#include <stdint.h>

#include "../worker/serve/stop.h"
#include "check.h"

/* Everything a stream produced: the emitted bytes concatenated. */
struct stream {
    char out[8192];
    size_t n;
    bool stopped;
    int which;
    uint64_t offset;
    size_t max_held; /* most bytes fed but not yet emitted after any call */
};

static void feed(struct stop_matcher *m, struct stream *s, const char *t, size_t len, size_t *fed)
{
    struct stop_result r;
    int rc = stop_feed(m, t, len, &r);
    CHECK_EQ_INT(rc, 0);
    *fed += len;
    if (s->n + r.n_emit < sizeof s->out) {
        memcpy(s->out + s->n, r.emit, r.n_emit);
        s->n += r.n_emit;
    }
    s->stopped = r.stopped;
    s->which = r.which;
    s->offset = r.stop_offset;
    if (!r.stopped && *fed - s->n > s->max_held)
        s->max_held = *fed - s->n;
}

static void finish(struct stop_matcher *m, struct stream *s)
{
    struct stop_result r;
    CHECK_EQ_INT(stop_flush(m, &r), 0);
    memcpy(s->out + s->n, r.emit, r.n_emit);
    s->n += r.n_emit;
    s->out[s->n] = 0;
}

/* Feed `text` in pieces of `chunk` bytes (0 = all at once), then flush. */
static struct stream run(const char *const *stops, int n_stops, const char *text, size_t chunk)
{
    struct stream s;
    memset(&s, 0, sizeof s);
    struct stop_matcher *m;
    struct err e;
    if (stop_new(&m, stops, n_stops, &e)) {
        CHECK(0, "stop_new: %s", e.msg);
        return s;
    }
    size_t len = strlen(text), fed = 0;
    if (chunk == 0)
        chunk = len ? len : 1;
    for (size_t i = 0; i < len; i += chunk)
        feed(m, &s, text + i, len - i < chunk ? len - i : chunk, &fed);
    finish(m, &s);
    stop_free(m);
    return s;
}

static void basic_cut(void)
{
    const char *stops[] = {"STOP"};
    struct stream s = run(stops, 1, "Hello STOP world", 0);
    CHECK(!strcmp(s.out, "Hello "), "'%s'", s.out);
    CHECK(s.stopped, "not stopped");
    CHECK_EQ_INT(s.which, 0);
    CHECK_EQ_INT(s.offset, 6);
    /* no stop string in the text: everything comes out */
    s = run(stops, 1, "Hello world", 3);
    CHECK(!strcmp(s.out, "Hello world"), "'%s'", s.out);
    CHECK(!s.stopped, "stopped");
}

static void split_across_feeds(void)
{
    const char *stops[] = {"<|im_end|>"};
    for (size_t chunk = 1; chunk <= 12; chunk++) {
        struct stream s = run(stops, 1, "The answer<|im_end|>\nmore text", chunk);
        CHECK(!strcmp(s.out, "The answer"), "chunk %zu: '%s'", chunk, s.out);
        CHECK(s.stopped && s.offset == 10, "chunk %zu: stopped %d offset %llu", chunk, s.stopped,
              (unsigned long long)s.offset);
        CHECK(s.max_held <= 9 + 3, "chunk %zu: held %zu bytes", chunk, s.max_held);
    }
}

static void at_start(void)
{
    const char *stops[] = {"##"};
    struct stream s = run(stops, 1, "##rest", 1);
    CHECK_EQ_INT(s.n, 0);
    CHECK(s.stopped && s.offset == 0, "stopped %d offset %llu", s.stopped,
          (unsigned long long)s.offset);
    s = run(stops, 1, "##", 0);
    CHECK_EQ_INT(s.n, 0);
    CHECK(s.stopped, "not stopped");
}

/* "aab" inside "aaab": after "aa" the matcher must hold both a's, and when
 * the third a arrives release exactly one. */
static void repeated_prefix(void)
{
    const char *stops[] = {"aab"};
    struct stop_matcher *m;
    struct err e;
    CHECK_EQ_INT(stop_new(&m, stops, 1, &e), 0);
    struct stop_result r;
    const size_t want_emit[] = {0, 0, 1, 0};
    const char *pieces[] = {"a", "a", "a", "b"};
    for (int i = 0; i < 4; i++) {
        stop_feed(m, pieces[i], 1, &r);
        CHECK(r.n_emit == want_emit[i], "feed %d: emitted %zu", i, r.n_emit);
        if (i == 2 && r.n_emit == 1)
            CHECK(r.emit[0] == 'a', "emitted '%c'", r.emit[0]);
    }
    CHECK(r.stopped && r.stop_offset == 1, "stopped %d offset %llu", r.stopped,
          (unsigned long long)r.stop_offset);
    /* nothing more once stopped */
    stop_feed(m, "zzz", 3, &r);
    CHECK(r.n_emit == 0 && r.stopped, "emitted after stop");
    stop_flush(m, &r);
    CHECK_EQ_INT(r.n_emit, 0);
    /* reset: a new generation */
    stop_reset(m);
    stop_feed(m, "xaa", 3, &r);
    CHECK_EQ_INT(r.n_emit, 1);
    stop_feed(m, "c", 1, &r);
    CHECK(r.n_emit == 3 && !memcmp(r.emit, "aac", 3), "false alarm released %zu", r.n_emit);
    stop_free(m);

    struct stream s = run(stops, 1, "aaaaaab tail", 1);
    CHECK(!strcmp(s.out, "aaaa"), "'%s'", s.out);
}

static void false_alarm_and_flush(void)
{
    const char *stops[] = {"</s>"};
    struct stream s = run(stops, 1, "a</b> ok", 1);
    CHECK(!strcmp(s.out, "a</b> ok"), "'%s'", s.out);
    CHECK(!s.stopped, "stopped");
    /* generation ends while a prefix is held: flush releases it */
    s = run(stops, 1, "text</", 1);
    CHECK(!strcmp(s.out, "text</"), "'%s'", s.out);
}

static void multiple_stops(void)
{
    const char *stops[] = {"world", "wor", "xyz"};
    struct stream s = run(stops, 3, "hello world", 0);
    CHECK(!strcmp(s.out, "hello "), "'%s'", s.out);
    CHECK(s.stopped, "not stopped");
    /* the earliest occurrence wins even when a longer stop started before it */
    const char *st2[] = {"abcd", "bc"};
    s = run(st2, 2, "xabce", 1);
    CHECK(!strcmp(s.out, "xa"), "'%s'", s.out);
    CHECK(s.which == 1 && s.offset == 2, "which %d offset %llu", s.which,
          (unsigned long long)s.offset);
    /* a stop string that overlaps the prefix of another */
    const char *st3[] = {"abc", "bcd"};
    s = run(st3, 2, "zabcd", 2);
    CHECK(!strcmp(s.out, "z"), "'%s'", s.out);
    CHECK_EQ_INT(s.which, 0);
    /* empty strings are ignored; none left → pass-through */
    const char *st4[] = {"", ""};
    s = run(st4, 2, "anything", 1);
    CHECK(!strcmp(s.out, "anything"), "'%s'", s.out);
    s = run(NULL, 0, "abc", 0);
    CHECK(!strcmp(s.out, "abc"), "'%s'", s.out);
}

static void utf8_held(void)
{
    struct stop_matcher *m;
    struct err e;
    CHECK_EQ_INT(stop_new(&m, NULL, 0, &e), 0);
    struct stop_result r;
    const char *ja = "\xe6\x97\xa5\xe6\x9c\xac"; /* 日本 */
    stop_feed(m, ja, 1, &r);
    CHECK_EQ_INT(r.n_emit, 0);
    stop_feed(m, ja + 1, 1, &r);
    CHECK_EQ_INT(r.n_emit, 0);
    stop_feed(m, ja + 2, 2, &r); /* completes 日, starts 本 */
    CHECK(r.n_emit == 3 && !memcmp(r.emit, ja, 3), "emitted %zu", r.n_emit);
    stop_feed(m, ja + 4, 2, &r);
    CHECK(r.n_emit == 3 && !memcmp(r.emit, ja + 3, 3), "emitted %zu", r.n_emit);
    /* 4-byte emoji split 1+3; an unfinished one is released by flush */
    stop_feed(m, "\xf0", 1, &r);
    CHECK_EQ_INT(r.n_emit, 0);
    stop_feed(m, "\x9f\x98\x80!", 4, &r);
    CHECK_EQ_INT(r.n_emit, 5);
    stop_feed(m, "\xc3", 1, &r);
    CHECK_EQ_INT(r.n_emit, 0);
    stop_flush(m, &r);
    CHECK_EQ_INT(r.n_emit, 1);
    /* invalid bytes are not held forever */
    stop_feed(m, "\x80\x80", 2, &r);
    CHECK_EQ_INT(r.n_emit, 2);
    stop_free(m);

    /* a multi-byte stop string split byte by byte never leaks */
    const char *stops[] = {"\xe3\x80\x82"}; /* 。 */
    struct stream s = run(stops, 1, "\xe6\x96\x87\xe3\x80\x82\xe6\x96\x87", 1); /* 文。文 */
    CHECK(!strcmp(s.out, "\xe6\x96\x87"), "'%s'", s.out);
    CHECK(s.stopped, "not stopped");
}

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* Random texts over a tiny alphabet, random piece sizes: the stream must be
 * exactly the text up to the earliest occurrence of any stop string (found
 * by a plain strstr over the whole text). */
static void random_against_strstr(void)
{
    const char *stops[] = {"abc", "cab", "bb", "aaab"};
    uint32_t seed = 1;
    int bad = 0;
    for (int round = 0; round < 3000; round++) {
        char text[64];
        int len = 1 + (int)(lcg(&seed) % 40);
        for (int i = 0; i < len; i++)
            text[i] = "abc"[lcg(&seed) % 3];
        text[len] = 0;
        size_t cut = (size_t)len;
        int which = -1;
        for (int k = 0; k < 4; k++) {
            const char *h = strstr(text, stops[k]);
            if (h && (size_t)(h - text) < cut) {
                cut = (size_t)(h - text);
                which = k;
            }
        }
        struct stop_matcher *m;
        struct err e;
        stop_new(&m, stops, 4, &e);
        struct stream s;
        memset(&s, 0, sizeof s);
        size_t fed = 0;
        for (int i = 0; i < len;) {
            int piece = 1 + (int)(lcg(&seed) % 5);
            if (piece > len - i)
                piece = len - i;
            feed(m, &s, text + i, (size_t)piece, &fed);
            i += piece;
        }
        finish(m, &s);
        stop_free(m);
        if (s.n != cut || memcmp(s.out, text, cut) || s.stopped != (which >= 0) ||
            (which >= 0 && s.offset != cut) || s.max_held > 3) {
            if (bad++ < 5)
                printf("#   '%s': got '%s' (stopped %d at %llu), want cut %zu\n", text, s.out,
                       s.stopped, (unsigned long long)s.offset, cut);
        }
    }
    CHECK_EQ_INT(bad, 0);
}

static void bad_input(void)
{
    struct stop_matcher *m;
    struct err e;
    const char *stops[] = {"x", NULL};
    CHECK_EQ_INT(stop_new(&m, stops, 2, &e), ERR_INVALID);
    CHECK(m == NULL, "matcher returned on error");
    CHECK_EQ_INT(stop_new(&m, NULL, 3, &e), ERR_INVALID);
    CHECK_EQ_INT(stop_new(&m, stops, 1, &e), 0);
    struct stop_result r;
    CHECK_EQ_INT(stop_feed(m, NULL, 4, &r), ERR_INVALID);
    CHECK_EQ_INT(stop_feed(m, NULL, 0, &r), 0);
    CHECK_EQ_INT(stop_max_len(m), 1);
    /* a long piece grows the buffer */
    static char big[100000];
    memset(big, 'y', sizeof big);
    CHECK_EQ_INT(stop_feed(m, big, sizeof big, &r), 0);
    CHECK_EQ_INT(r.n_emit, sizeof big);
    stop_free(m);
}

int main(void)
{
    RUN(basic_cut);
    RUN(split_across_feeds);
    RUN(at_start);
    RUN(repeated_prefix);
    RUN(false_alarm_and_flush);
    RUN(multiple_stops);
    RUN(utf8_held);
    RUN(random_against_strstr);
    RUN(bad_input);
    CHECK_EXIT();
}
