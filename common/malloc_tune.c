#include "malloc_tune.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Why. glibc keeps up to 7 freed blocks of each small size in a cache per
 * thread, counted as in use and scattered over the heap, so they pin its
 * pages; and it gives threads arenas of their own (up to 8 per core), each
 * keeping its high-water mark. llm170d's client pool (64 threads) and the
 * gateway's event loops and per-request threads fill those with the sizes
 * of the messages they handle: under load llm170d's RSS crept up for
 * minutes (16 cores, 64 streams: 4.3 → 18.7 MB in 4 minutes, +1.4 MB in the
 * last one, with ~0.4 MB of live heap; 30 MB in 2.5 minutes before the
 * arena limit). Our allocations are small and few per token, so neither
 * cache pays for itself here. Only a tunable read at start-up turns the
 * per-thread cache off, hence the restart. */
#define REEXEC_MARK "LLM170_MALLOC_REEXEC" /* set across the restart: the original GLIBC_TUNABLES, or "" */
#define TCACHE_OFF "glibc.malloc.tcache_count=0"

static void restore_tunables(const char *orig)
{
    if (orig && *orig)
        setenv("GLIBC_TUNABLES", orig, 1);
    else
        unsetenv("GLIBC_TUNABLES");
    unsetenv(REEXEC_MARK);
}

void malloc_tune(char **argv, const char *prog)
{
    const char *orig = getenv(REEXEC_MARK);
    if (orig) { /* the second start: children get the environment we were given */
        char keep[4096];
        snprintf(keep, sizeof keep, "%s", orig);
        restore_tunables(keep);
    } else {
        const char *t = getenv("GLIBC_TUNABLES");
        char self[4096], tun[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        /* an operator who sets the cache size keeps it */
        if ((!t || !strstr(t, "glibc.malloc.tcache_count")) && n > 0 && (size_t)n < sizeof self - 1 &&
            strlen(t ? t : "") + sizeof TCACHE_OFF + 1 < sizeof tun) {
            self[n] = 0;
            /* first: glibc 2.36 cuts the variable at its first ':' in place as it parses it, so
             * /proc/<pid>/environ then shows this one */
            snprintf(tun, sizeof tun, TCACHE_OFF "%s%s", t && *t ? ":" : "", t ? t : "");
            char keep[4096];
            snprintf(keep, sizeof keep, "%s", t ? t : "");
            if (!setenv(REEXEC_MARK, keep, 1) && !setenv("GLIBC_TUNABLES", tun, 1)) {
                execv(self, argv); /* the real path, so the process keeps its name */
                fprintf(stderr, "%s: cannot restart itself to tune malloc (%s); going on\n", prog, strerror(errno));
            }
            restore_tunables(keep);
        }
    }
    mallopt(M_ARENA_MAX, 2);
}
