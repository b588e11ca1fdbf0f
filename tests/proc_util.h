/* proc_util.h — start a program under test as a child process.
 *
 * proc_spawn forks and runs argv (NULL-terminated) followed by extra (NULL-
 * terminated, may be NULL), with env's NAME=VALUE entries (may be NULL) added
 * to its environment. Its stderr goes to /dev/null unless TEST_VERBOSE is
 * set, so a daemon's log does not bury the "ok" lines; with TEST_CHILD_LOG
 * naming a file it is appended there instead, for a test to show when a
 * check fails (proc_log_tail). Returns the pid. */
#ifndef LLM170_TESTS_PROC_UTIL_H
#define LLM170_TESTS_PROC_UTIL_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static inline pid_t proc_spawn(const char *const *argv, const char *const *extra, const char *const *env)
{
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        const char *av[64];
        int n = 0;
        for (int i = 0; argv[i] && n < 63; i++)
            av[n++] = argv[i];
        for (int i = 0; extra && extra[i] && n < 63; i++)
            av[n++] = extra[i];
        av[n] = NULL;
        const char *log = getenv("TEST_CHILD_LOG");
        int fd = log && *log ? open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600) : -1;
        if (fd < 0)
            fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (!getenv("TEST_VERBOSE") && fd >= 0)
            dup2(fd, 2);
        execv(av[0], (char *const *)av);
        _exit(127);
    }
    return pid;
}

/* Print the last n lines of TEST_CHILD_LOG as "# " comment lines: what the
 * programs under test said before a check failed. */
static inline void proc_log_tail(int n)
{
    const char *log = getenv("TEST_CHILD_LOG");
    FILE *f = log && *log ? fopen(log, "r") : NULL;
    if (!f)
        return;
    enum { KEEP = 64 };
    static char ring[KEEP][240];
    int count = 0;
    while (fgets(ring[count % KEEP], sizeof ring[0], f))
        count++;
    fclose(f);
    if (n > KEEP)
        n = KEEP;
    int first = count > n ? count - n : 0;
    printf("# --- last %d lines the programs under test wrote (%s) ---\n", count - first, log);
    for (int i = first; i < count; i++) {
        char *line = ring[i % KEEP];
        line[strcspn(line, "\n")] = 0;
        printf("# %s\n", line);
    }
}

#endif
