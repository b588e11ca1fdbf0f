/* anthropic.h — POST /v1/messages and /v1/messages/count_tokens: the
 * Anthropic Messages API over the same generation path as OpenAI chat.
 *
 * A Messages request is turned into the OpenAI chat request the worker's
 * chat templates already take (anth_parse): system → a system message,
 * text blocks → content, an assistant's tool_use blocks → tool_calls, a
 * user's tool_result blocks → role "tool" messages with tool_call_id, tools
 * (name, description, input_schema) → function tools, tool_choice auto / any
 * / tool / none → auto / required / a named function / none. The reply is
 * read as the OpenAI path reads it (a leading <think>…</think>, tool calls in
 * every template family's form: common/toolcall.h) and written as Anthropic
 * content blocks: thinking, text, tool_use {id "toolu_…", name, input}.
 * No I/O here: http.c owns the connection. */
#ifndef LLM170_GATEWAY_ANTHROPIC_H
#define LLM170_GATEWAY_ANTHROPIC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "backend.h"
#include "oai.h"

/* Validate a Messages body and fill rq as the chat request it becomes (kind
 * OAI_CHAT; rq->gen is what goes to the backend). count: a count_tokens body
 * (no max_tokens needed; nothing is generated: max_tokens 0, no tool prefill).
 * ERR_INVALID with the message in e and the field at fault in param. */
int anth_parse(json_t *body, bool count, struct oai_request *rq, char *param, size_t param_cap, struct err *e);

/* One streamed or collected reply. */
struct anth_state;

/* id "msg_…", model as reported; both copied. rq must outlive the state. */
struct anth_state *anth_state_new(const struct oai_request *rq, const char *id, const char *model);
void anth_state_free(struct anth_state *a);

/* Streaming: the SSE events (`event: NAME\ndata: {…}\n\n`) for one backend
 * TOKEN or DONE event, appended to *buf (malloc'ed, grown). The first call
 * writes message_start; DONE closes the open block and writes message_delta
 * and message_stop. */
int anth_sse_event(struct anth_state *a, const struct gw_event *ev, char **buf, size_t *len);
/* A failure after the stream started: `event: error`. */
int anth_sse_error(int http_status, int err_code, const char *msg, char **buf, size_t *len);

/* The whole non-streamed message for the reply text; finish "stop"/"length",
 * stop_hit as gw_event.stop_hit. Malloc'ed JSON, NULL when out of memory. */
char *anth_response_body(struct anth_state *a, const char *text, const char *finish, int stop_hit, int32_t n_prompt,
                         int32_t n_gen);
/* {"input_tokens": n} */
char *anth_count_body(int32_t n_prompt);

/* {"type":"error","error":{"type","message"}} for an HTTP status / ERR_* code. */
char *anth_error_body(int http_status, int err_code, const char *msg);
const char *anth_error_type(int http_status, int err_code);

#endif
