/* clock.h — the monotonic clock every program reads for timeouts and
 * durations (never the wall clock, which jumps). */
#ifndef LLM170_CLOCK_H
#define LLM170_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline int64_t clock_now_ms(void) { return (int64_t)(clock_now_ns() / 1000000u); }

#endif
