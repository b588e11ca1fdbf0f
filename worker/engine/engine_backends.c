/* engine_backends.c — every backend the engine knows, in one table: the
 * kind, its --backend names and its ops (NULL: named, not built in yet).
 * Adding a backend is a row here plus its folder and its build rules
 * (docs/architecture.md, "Adding a backend"). */
#include <string.h>

#include "../cpu/cpu_engine.h"
#include "../hip/hip_engine.h"
#include "../vulkan/vk_engine.h"
#include "engine.h"
#include "engine_backends.h"

static const struct {
    enum backend_kind kind;
    const char *name;              /* the --backend value */
    const char *alias;             /* another accepted name, or NULL */
    const struct backend_ops *ops; /* NULL: not built in */
} g_backends[] = {
    { BACKEND_CPU, "cpu", NULL, &cpu_backend },
    { BACKEND_HIP, "hip", "cuda", &hip_backend },
    { BACKEND_VULKAN, "vulkan", NULL, &vk_backend },
};

#define N_BACKENDS (sizeof g_backends / sizeof g_backends[0])

const struct backend_ops *engine_backend_ops(enum backend_kind k)
{
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (g_backends[i].kind == k)
            return g_backends[i].ops;
    return NULL;
}

const char *engine_backend_name(enum backend_kind k)
{
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (g_backends[i].kind == k)
            return g_backends[i].name;
    return NULL;
}

bool engine_backend_parse(const char *name, enum backend_kind *out)
{
    for (size_t i = 0; name && i < N_BACKENDS; i++)
        if (!strcmp(name, g_backends[i].name) || (g_backends[i].alias && !strcmp(name, g_backends[i].alias))) {
            *out = g_backends[i].kind;
            return true;
        }
    return false;
}
