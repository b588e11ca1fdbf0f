/* stop.h — incremental stop-string matcher for streamed generation.
 *
 * Text is fed piece by piece as tokens are detokenized. The matcher holds
 * back every byte that could still turn out to be part of a stop string (the
 * longest tail that is a proper prefix of some stop string) and an incomplete
 * UTF-8 sequence at the end, and hands out the rest. When a stop string
 * appears, the text is cut right before its earliest occurrence: nothing at
 * or after it is ever handed out (spec sampling.md §6.1). */
#ifndef LLM170_STOP_H
#define LLM170_STOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

struct stop_matcher;

struct stop_result {
    const char *emit;      /* bytes safe to send now; valid until the next call */
    size_t n_emit;
    bool stopped;          /* a stop string matched; nothing more will be emitted */
    int which;             /* index (in the list given to stop_new) of the match, −1 none */
    uint64_t stop_offset;  /* byte offset of the match in all text fed so far */
};

/* Build a matcher for n stop strings (NUL-terminated; empty ones are
 * ignored, as llama-server does). n may be 0: everything passes through
 * except incomplete UTF-8. */
int stop_new(struct stop_matcher **out, const char *const *stops, int n, struct err *e);
void stop_free(struct stop_matcher *m);
/* Forget all text: ready for a new generation with the same stop strings. */
void stop_reset(struct stop_matcher *m);

/* Append len bytes of generated text and report what may be emitted. After a
 * match every further call emits nothing and reports stopped again. */
int stop_feed(struct stop_matcher *m, const char *text, size_t len, struct stop_result *r);

/* Generation ended without a stop string (EOG, length): release the held
 * tail (even a partial stop-string prefix or an incomplete UTF-8 sequence). */
int stop_flush(struct stop_matcher *m, struct stop_result *r);

/* Longest stop string in bytes (0 when none): at most this − 1 bytes, plus
 * up to 3 of an unfinished UTF-8 character, are ever held back. */
size_t stop_max_len(const struct stop_matcher *m);

#endif
