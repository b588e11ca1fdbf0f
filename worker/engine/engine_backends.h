/* engine_backends.h — the table of backends (engine_backends.c): kind ⇄ name
 * ⇄ ops. Internal to engine/; front ends use engine_backend_parse/_name. */
#ifndef LLM170_ENGINE_BACKENDS_H
#define LLM170_ENGINE_BACKENDS_H

#include "../backend/backend.h"

/* The ops of backend k, NULL when it is not built in. */
const struct backend_ops *engine_backend_ops(enum backend_kind k);

#endif
