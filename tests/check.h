/* check.h — the project's tiny test harness.
 *
 * A test program is a list of cases; each case records checks. The program
 * prints one line per case: "ok - name", "not ok - name" (with the failing
 * checks above it), or "skip - name: why". tests/run.sh counts those lines
 * over every test program and prints the closing "N passed, N failed" line.
 *
 * A case must check something: one that ends with no CHECK run and no SKIP
 * is "not ok" ("no check ran"), so a case that returns early on a failed
 * precondition cannot read as passing. A precondition that fails is either a
 * failed CHECK (the feature is broken) or an explicit SKIP("why") (a missing
 * resource: no GPU, no golden, not root). A failed CHECK before a SKIP still
 * fails the case. */
#ifndef LLM170_TESTS_CHECK_H
#define LLM170_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct check_state {
    int case_failed; /* checks failed in the current case */
    int case_checks; /* checks run in the current case, passed or not */
    int failed;      /* cases failed in this program */
    int skipped;
    const char *skip_why;
};
static struct check_state check_g;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        check_g.case_checks++;                                                  \
        if (!(cond)) {                                                          \
            check_g.case_failed++;                                              \
            fprintf(stdout, "#   %s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, \
                    #cond);                                                     \
            fprintf(stdout, __VA_ARGS__);                                       \
            fputc('\n', stdout);                                                \
        }                                                                       \
    } while (0)

#define CHECK_EQ_INT(a, b) CHECK((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a), (long long)(b))
#define CHECK_NEAR(a, b, tol) CHECK(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g (tol %g)", (double)(a), (double)(b), (double)(tol))

/* Mark the current case as skipped (a missing resource, not a failure). */
#define SKIP(why) do { check_g.skip_why = (why); return; } while (0)

static inline void check_run(const char *name, void (*fn)(void))
{
    check_g.case_failed = 0;
    check_g.case_checks = 0;
    check_g.skip_why = NULL;
    fn();
    if (check_g.case_failed) {
        printf("not ok - %s\n", name);
        check_g.failed++;
    } else if (check_g.skip_why) {
        printf("skip - %s: %s\n", name, check_g.skip_why);
        check_g.skipped++;
    } else if (check_g.case_checks == 0) {
        printf("#   %s: no check ran\n", name);
        printf("not ok - %s\n", name);
        check_g.failed++;
    } else {
        printf("ok - %s\n", name);
    }
    fflush(stdout);
}

#define RUN(fn) check_run(#fn, fn)
#define CHECK_EXIT() return check_g.failed ? 1 : 0

/* The whole file at path, NUL-terminated (malloc'ed; *len its size when len is
 * not NULL), or NULL when it cannot be read. */
static inline char *check_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        if (len)
            *len = (size_t)n;
    }
    return b;
}

/* Where the shared test data lives (../shared/data from the repo root), or
 * NULL when this machine has no copy. LLM170_SHARED overrides. */
static inline const char *check_shared_dir(void)
{
    static char path[4096];
    const char *env = getenv("LLM170_SHARED");
    snprintf(path, sizeof path, "%s", env ? env : "../shared/data");
    FILE *f;
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/README.md", path);
    if (!(f = fopen(probe, "r")))
        return NULL;
    fclose(f);
    return path;
}

#endif
