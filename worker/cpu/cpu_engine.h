/* cpu_engine.h — the CPU backend's ops table (cpu_engine.c), for the table of
 * backends (engine/engine_backends.c); everything else of the backend is
 * reached through it. */
#ifndef LLM170_CPU_ENGINE_H
#define LLM170_CPU_ENGINE_H

#include "../backend/backend.h"

extern const struct backend_ops cpu_backend;

#endif
