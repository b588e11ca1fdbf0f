/* version.c — the --version line of every program (version.h). */
#include "version.h"

/* LLM170_COMMIT: generated into the build tree at each make (Makefile,
 * $(BUILD)/gen/version_gen.h), never committed; a build outside the
 * Makefile still compiles, with an unknown commit. */
#if defined(__has_include)
#if __has_include("version_gen.h")
#include "version_gen.h"
#endif
#endif
#ifndef LLM170_COMMIT
#define LLM170_COMMIT "unknown"
#endif

const char *version_commit(void)
{
    return LLM170_COMMIT;
}

const char *version_backends(void)
{
    /* every backend is built in: hip and vulkan dlopen their runtime (the CUDA or HIP driver, the Vulkan
     * loader) when an engine is created, and say so when it is absent */
    return "cpu hip vulkan";
}

void version_print(FILE *f, const char *prog)
{
    fprintf(f, "%s %s (commit %s; backends: %s)\n", prog, LLM170_VERSION, version_commit(), version_backends());
}
