/* test_install.c — what the installed system service relies on in the
 * library: the GPU kernel cache under systemd's CacheDirectory=
 * ($CACHE_DIRECTORY), and the --version line every program prints. */
#include <stdlib.h>

#include "../common/version.h"
#include "../worker/hip/hip_rt.h"
#include "check.h"

static void set_env(const char *cache_directory, const char *xdg, const char *home)
{
    cache_directory ? setenv("CACHE_DIRECTORY", cache_directory, 1) : unsetenv("CACHE_DIRECTORY");
    xdg ? setenv("XDG_CACHE_HOME", xdg, 1) : unsetenv("XDG_CACHE_HOME");
    home ? setenv("HOME", home, 1) : unsetenv("HOME");
}

/* The system unit sets CacheDirectory=llm170; a dynamic user's $HOME is "/"
 * and unwritable, so without $CACHE_DIRECTORY every start recompiled. */
static void kernel_cache_dir(void)
{
    char d[1024];
    set_env("/var/cache/llm170", "/home/u/.xdg", "/home/u");
    hip_cache_dir(d, sizeof d);
    CHECK(!strcmp(d, "/var/cache/llm170/kernels"), "CACHE_DIRECTORY first: '%s'", d);
    /* several CacheDirectory= entries arrive colon-separated: the first is ours */
    set_env("/var/cache/llm170:/var/cache/other", NULL, "/");
    hip_cache_dir(d, sizeof d);
    CHECK(!strcmp(d, "/var/cache/llm170/kernels"), "first of a list: '%s'", d);
    /* without it, the order stays: XDG_CACHE_HOME, ~/.cache, /tmp */
    set_env("", "/home/u/.xdg", "/home/u");
    hip_cache_dir(d, sizeof d);
    CHECK(!strcmp(d, "/home/u/.xdg/llm170/kernels"), "XDG_CACHE_HOME: '%s'", d);
    set_env(NULL, NULL, "/home/u");
    hip_cache_dir(d, sizeof d);
    CHECK(!strcmp(d, "/home/u/.cache/llm170/kernels"), "HOME: '%s'", d);
    set_env(NULL, NULL, NULL);
    hip_cache_dir(d, sizeof d);
    CHECK(!strcmp(d, "/tmp/llm170-kernels"), "neither: '%s'", d);
}

static void version_line(void)
{
    char buf[256] = "";
    FILE *f = fmemopen(buf, sizeof buf, "w");
    CHECK(f != NULL, "fmemopen");
    if (!f)
        return;
    version_print(f, "llm170d");
    fclose(f);
    char want[256];
    snprintf(want, sizeof want, "llm170d %s (commit %s; backends: %s)\n", LLM170_VERSION, version_commit(),
             version_backends());
    CHECK(!strcmp(buf, want), "'%s' vs '%s'", buf, want);
    CHECK(!strncmp(version_backends(), "cpu hip", 7), "backends '%s'", version_backends());
    CHECK(version_commit()[0] != 0, "empty commit");
}

int main(void)
{
    RUN(kernel_cache_dir);
    RUN(version_line);
    CHECK_EXIT();
}
