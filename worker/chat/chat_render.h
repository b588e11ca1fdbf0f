/* chat_render.h — OpenAI chat messages → prompt text through the model's
 * chat template (arch-dense.md §7). The worker (which holds the GGUF:
 * template and token strings) and `llm170 infer --chat` call this. */
#ifndef LLM170_CHAT_RENDER_H
#define LLM170_CHAT_RENDER_H

#include <jansson.h>
#include <stdbool.h>
#include <time.h>

#include "../../common/chat.h"

struct chat_params {
    const char *tmpl;           /* tokenizer.chat_template; NULL/"" = ChatML */
    json_t *messages;           /* OpenAI messages (checked + normalized inside) */
    json_t *tools;              /* array of tools, or NULL */
    bool add_generation_prompt;
    const char *bos, *eos;      /* token strings for bos_token / eos_token; NULL = "" */
    bool strip_bos;             /* the vocab adds BOS itself: drop a leading bos string */
    json_t *extra_vars;         /* object merged into the variables (enable_thinking …) or NULL */
    time_t now;                 /* strftime_now() time; 0 = now */
};

/* Render; *out is malloc'ed. Template errors (syntax, what the Jinja subset
 * lacks, raise_exception) come back as ERR_UNSUPPORTED / ERR_INVALID with a
 * message fit to show the API client. */
int chat_render_ex(const struct chat_params *p, char **out, struct err *e);

/* The same with the common arguments; strips a leading bos string (the
 * vocabularies of the supported models add BOS themselves). */
int chat_render(const char *tmpl, json_t *messages, json_t *tools, bool add_generation_prompt, const char *bos,
                const char *eos, json_t *extra_vars, char **out, struct err *e);

/* llama.cpp's fallback when a model has no template: ChatML. */
extern const char chat_template_chatml[];

#endif
