/* chat.h — checking OpenAI chat messages: the gateway rejects bad requests
 * early with it, and the worker's template rendering (worker/chat/) starts
 * from its normalized copy. */
#ifndef LLM170_CHAT_H
#define LLM170_CHAT_H

#include <jansson.h>

#include "err.h"

/* Validate an OpenAI `messages` array and return a normalized copy the
 * templates can index safely: every message an object with a string `role`;
 * `content` a string (null/absent → "", an array of parts → its text parts
 * joined with "\n", as llama-server does for templates without typed
 * content). Other fields (tool_calls, reasoning_content, name …) are kept.
 * Errors (ERR_INVALID) name the offending message: "messages[2].content: …". */
int chat_check_messages(json_t *messages, json_t **normalized, struct err *e);

#endif
