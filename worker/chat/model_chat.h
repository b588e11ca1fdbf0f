/* model_chat.h — render OpenAI chat messages with a loaded model's own chat
 * template (tokenizer.chat_template, else ChatML) and its BOS/EOS strings. */
#ifndef LLM170_MODEL_CHAT_H
#define LLM170_MODEL_CHAT_H

#include <jansson.h>

#include "../../common/err.h"
#include "../model/model.h"

/* messages: OpenAI array; tools / extra_vars may be NULL. *out is malloc'ed
 * text ready for tok_encode(add_special = true, parse_special = true). */
int model_chat_render(const struct model *m, json_t *messages, json_t *tools, json_t *extra_vars, char **out,
                      struct err *e);

/* One user message (the CLI's `infer --chat --prompt TEXT`). */
int model_chat_render_prompt(const struct model *m, const char *user_text, char **out, struct err *e);

#endif
