/* proc_util.h — start a program under test as a child process.
 *
 * proc_spawn forks and runs argv (NULL-terminated) followed by extra (NULL-
 * terminated, may be NULL), with env's NAME=VALUE entries (may be NULL) added
 * to its environment. Its stderr goes to /dev/null unless TEST_VERBOSE is
 * set, so a daemon's log does not bury the "ok" lines. Returns the pid. */
#ifndef LLM170_TESTS_PROC_UTIL_H
#define LLM170_TESTS_PROC_UTIL_H

#include <fcntl.h>
#include <stdlib.h>
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
        int fd = open("/dev/null", O_WRONLY);
        if (!getenv("TEST_VERBOSE"))
            dup2(fd, 2);
        execv(av[0], (char *const *)av);
        _exit(127);
    }
    return pid;
}

#endif
