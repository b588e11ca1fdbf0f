/* oai.h — the OpenAI JSON of the gateway: request parsing and validation
 * (system.md "Request fields honoured", sampling.md §6), response, chunk and
 * error objects. No I/O here: http.c moves bytes, backend.h generates. */
#ifndef LLM170_GATEWAY_OAI_H
#define LLM170_GATEWAY_OAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "../common/toolcall.h"
#include "backend.h"

enum oai_kind { OAI_CHAT = 1, OAI_COMPLETION = 2 };

#define OAI_MAX_N 8          /* choices per request */
#define OAI_MAX_STOP 16      /* stop strings (the wire's limit) */
#define OAI_MAX_TOP 20       /* top_logprobs, as OpenAI */

/* How a chat reply's tool calls are read (toolcall.h): family TC_NONE = no
 * parsing (no tools, or tool_choice "none"). The gateway does not see the
 * chat template, so the family is TC_AUTO: every form is recognised. */
struct oai_tools {
    int family;
    json_t *tools;     /* borrowed from the request */
    int max_calls;     /* 1 with parallel_tool_calls false, else 0 (no limit) */
};

struct oai_request {
    int kind;
    char *model;                  /* as given ("" when absent) */
    json_t *messages, *tools, *template_vars; /* chat */
    char *prompt;                 /* completion: text … */
    int32_t *tokens;              /* … or token ids [n_tokens] */
    size_t n_tokens;
    struct proto_gen gen;         /* the generation of choice 0: a view, pointers into this struct (backend.h) */
    int n;                        /* choices */
    bool stream, include_usage;
    bool logprobs;                /* report logprobs (gen.logprobs >= 0) */
    bool think;                   /* chat: split a leading <think>…</think> into reasoning_content */
    char *stop[OAI_MAX_STOP];
    struct proto_bias *bias;      /* [gen.n_logit_bias], texts owned here */
    struct tc_choice tool_choice; /* chat: tool_choice + parallel_tool_calls */
    struct oai_tools tool_parse;  /* chat: how the reply's tool calls are read */
    char *json_schema;            /* response_format's schema as compact JSON text (gen.json_schema), NULL none */
};

/* Parse a request body (an already-parsed JSON value). On failure returns
 * ERR_INVALID with the message in e and the offending field in param
 * ("" when none). */
int oai_parse_request(int kind, json_t *body, struct oai_request *rq, char *param, size_t param_cap,
                      struct err *e);
void oai_request_free(struct oai_request *rq);

/* A growable string. */
struct oai_str {
    char *p;
    size_t n, cap;
};
int oai_str_put(struct oai_str *s, const char *p, size_t n);

/* Reasoning split for chat (llama-server's default reasoning format): text
 * the model writes between a leading "<think>" and "</think>" is returned as
 * `reasoning_content`, the rest as `content` (whitespace right after
 * </think> dropped). Fed delta by delta for streams: a possible prefix of a
 * tag is held back until it resolves; flush at the end. */
struct oai_think {
    int state;          /* 0 undecided, 1 inside <think>, 2 content */
    bool strip_lead;    /* drop whitespace right after </think> */
    char hold[16];      /* withheld bytes: a possible prefix of <think> / </think> */
    size_t n_hold;
};
int oai_think_feed(struct oai_think *t, const char *text, bool flush, struct oai_str *reasoning, struct oai_str *content);

/* {"error":{"message","type","code","param"}} as a malloc'ed string. */
char *oai_error_body(int http_status, int err_code, const char *msg, const char *param);

/* What one choice has produced so far (non-streaming responses). */
struct oai_choice {
    char *text;
    size_t len, cap;
    json_t *logprobs;     /* chat: array of entries; completion: legacy object; NULL without logprobs */
    const char *finish;   /* static string once done */
    int32_t n_gen;
    bool done;
};
int oai_choice_add(int kind, struct oai_choice *c, const struct gw_event *ev, bool logprobs);
void oai_choice_free(struct oai_choice *c);

/* One token's logprobs entry in the form of `kind` (chat: {token, logprob,
 * bytes, top_logprobs}; completion: handled inside oai_choice_add). */
json_t *oai_logprob_entry(const struct gw_event *ev, int n_top);

struct oai_meta {
    const char *id;        /* "chatcmpl-…" / "cmpl-…" */
    long long created;
    const char *model;
    const struct oai_tools *tools; /* chat: read tool calls out of the reply; NULL = none */
};

/* The whole non-streaming response. */
char *oai_response_body(int kind, const struct oai_meta *m, struct oai_choice *choices, int n, int32_t n_prompt,
                        bool think);

/* SSE events (each "data: {…}\n\n"), appended to *buf (malloc'ed, grown). */
int oai_sse_role(int kind, const struct oai_meta *m, int index, bool usage_null, char **buf, size_t *len);
/* content / reasoning: the chat delta's parts (NULL content = ev->text) */
int oai_sse_token(int kind, const struct oai_meta *m, int index, const char *content, const char *reasoning,
                  const struct gw_event *ev, bool logprobs, int n_top, bool usage_null, char **buf, size_t *len);
/* Tool calls calls[0..n) of choice index, the first being the choice's call
 * number `first`: per call a chunk with its id, type and name (arguments
 * ""), then one with its arguments. */
int oai_sse_tool_calls(const struct oai_meta *m, int index, const struct tc_call *calls, size_t n, size_t first,
                       bool usage_null, char **buf, size_t *len);
int oai_sse_finish(int kind, const struct oai_meta *m, int index, const char *finish, bool usage_null, char **buf,
                   size_t *len);
int oai_sse_usage(int kind, const struct oai_meta *m, int32_t n_prompt, int32_t n_gen, char **buf, size_t *len);
int oai_sse_error(int http_status, int err_code, const char *msg, char **buf, size_t *len);
int oai_sse_done(char **buf, size_t *len);

/* Valid UTF-8 (no overlongs, no surrogates, ≤ U+10FFFF)? On failure *bad is
 * the byte offset of the first bad sequence. */
bool oai_utf8_valid(const char *s, size_t n, size_t *bad);

#endif
