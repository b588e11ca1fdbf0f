/* toolcall.h — OpenAI tool calls out of a chat model's generated text.
 *
 * Chat templates teach a model one way of writing a call; the families here
 * are told apart by the markers their templates contain:
 *   TC_HERMES   Qwen2.5 / Qwen3, Hermes:
 *               <tool_call>\n{"name": "f", "arguments": {…}}\n</tool_call>   (several in a row)
 *   TC_QWEN_XML Qwen3-Coder / Qwen3.5 (templates that show <function=…>):
 *               <tool_call>\n<function=f>\n<parameter=k>\nvalue\n</parameter>\n</function>\n</tool_call>
 *               (a value is a string unless the tool's schema gives the
 *               parameter another type; then it is read as JSON)
 *               Both forms are read inside <tool_call> whichever family.
 *   TC_LLAMA3   Llama 3.x: {"name": "f", "parameters": {…}}, possibly after <|python_tag|>
 *   TC_MISTRAL  Mistral: [TOOL_CALLS] [{"name": "f", "arguments": {…}}, …]
 *   TC_AUTO     every marker above: for a reader (the gateway) that does not
 *               see the template; the forms do not overlap.
 * Control-token markers ([TOOL_CALLS], <|python_tag|>) are not rendered into
 * the output text by default, so a reply that *starts* with a bare JSON call
 * object or array ({"name": …} / [{"name": …}]) is a call too (TC_LLAMA3,
 * TC_MISTRAL, TC_AUTO) — only when its name is one of the request's tools, so
 * a model asked for plain JSON is not mistaken for a caller.
 *
 * The parser is fed the reply piece by piece (any split, down to single
 * bytes) and gives back the content and the calls; text that may still turn
 * out to be part of a call is held back until it is decided, so a stream and
 * a whole reply split the same text the same way. A call whose JSON does not
 * parse is content, as the model wrote it. */
#ifndef LLM170_COMMON_TOOLCALL_H
#define LLM170_COMMON_TOOLCALL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

enum tc_family { TC_NONE = 0, TC_HERMES, TC_LLAMA3, TC_MISTRAL, TC_AUTO, TC_QWEN_XML };

/* The family a chat template writes calls in (TC_NONE: no tool markers). */
int tc_family_from_template(const char *tmpl);
const char *tc_family_name(int family); /* "none", "hermes", "llama3", "mistral", "auto", "qwen-xml" */

/* ---------------------------------------------------------------- tool_choice */

enum tc_mode { TC_CHOICE_AUTO = 0, TC_CHOICE_NONE, TC_CHOICE_REQUIRED, TC_CHOICE_NAMED };

struct tc_choice {
    int mode;          /* TC_CHOICE_* */
    char name[128];    /* TC_CHOICE_NAMED: the function the reply must call */
    bool parallel;     /* parallel_tool_calls (default true): false = at most one call */
};

/* Validate OpenAI's tool_choice ("none" / "auto" / "required" /
 * {"type":"function","function":{"name":…}}) and parallel_tool_calls against
 * tools (either may be NULL = not given). ERR_INVALID with a message and
 * *param naming the field: a wrong type, an unknown mode, a named function
 * not in tools, "required"/a function without tools. */
int tc_choice_parse(json_t *tool_choice, json_t *parallel, json_t *tools, struct tc_choice *out,
                    const char **param, struct err *e);

/* Where constrained decoding attaches (the grammar engine turns a JSON
 * schema into a grammar): the schema the call object a reply must write
 * satisfies — {"name": const NAME, "arguments": <the function's parameters>}
 * for a named function, anyOf over every tool for "required"; NULL for
 * "auto"/"none" (nothing to enforce). The call is framed by
 * tc_call_frame(family) (the grammar's literal prefix and suffix). */
json_t *tc_call_schema(json_t *tools, const struct tc_choice *c);
/* The literal text before and after the call object (TC_HERMES:
 * "<tool_call>\n" / "\n</tool_call>"; "" / "" for the bare forms and for
 * TC_QWEN_XML, whose calls are not JSON: a grammar for them is XML-shaped). */
void tc_call_frame(int family, const char **open, const char **close);

/* The start of a call, written into the assistant's turn right after the
 * rendered prompt when the reply must call a tool (tool_choice "required" or
 * a function), so that even without constrained decoding the model's first
 * words are a call: the family's opener and {"name": "NAME", "arguments":
 * (Llama 3: "parameters"; TC_QWEN_XML: <function=NAME>\n), or only
 * {"name": " (<function=) when any tool will do (name NULL). The reply's text does not contain it: whoever reads the reply must
 * put it back in front (the worker sends it as the start of the stream).
 * NULL for a family without a text form (TC_NONE, TC_AUTO) or out of memory. */
char *tc_prefill(int family, const char *name);

/* ---------------------------------------------------------------- parser */

struct tc_call {
    char id[32];       /* "call_" + 24 characters, unique per parser */
    char *name;
    char *args;        /* the arguments as JSON text (OpenAI sends a string) */
};

struct tc_buf {
    char *p;
    size_t n, cap;
};
int tc_buf_put(struct tc_buf *b, const char *p, size_t n);
void tc_buf_free(struct tc_buf *b);

struct tc_parser {
    int family;             /* TC_* (TC_NONE: everything is content) */
    json_t *tools;          /* borrowed: the names a bare JSON call may have (NULL = any) */
    int max_calls;          /* 0 = no limit; parallel_tool_calls false = 1 (later calls are dropped) */
    uint64_t id_seed;       /* call ids derive from it and the call's index */
    /* state */
    int state;              /* 0 text, 1 inside a call */
    int form;               /* the opener that started the call */
    size_t call_at;         /* state 1: offset of the opener in hold (before it: whitespace) */
    bool xml;               /* state 1: the call is <function=…> inside <tool_call> */
    size_t scan_at, scan_end; /* state 1: the call's JSON scanned up to here (from hold's start); its end once complete */
    int scan_depth;         /* … bracket depth there */
    bool scan_str, scan_esc; /* … inside a string, after a backslash */
    struct tc_buf hold;     /* undecided text */
    bool bare_ok;           /* nothing but whitespace since the start or the last call */
    size_t n_seen;          /* calls recognised (also those dropped by max_calls) */
    struct tc_call *calls;  /* [n_calls] */
    size_t n_calls, cap_calls;
};

/* family TC_NONE parses nothing. id_seed 0 = draw one at random. */
void tc_parser_init(struct tc_parser *p, int family, json_t *tools, int max_calls, uint64_t id_seed);
void tc_parser_free(struct tc_parser *p);

/* Feed the next n bytes of the reply (flush: the reply ended; everything
 * held is decided now). Content that is decided is appended to *content;
 * calls recognised by this feed are p->calls[*first_new .. p->n_calls).
 * Whitespace right before a call is dropped. ERR_NOMEM only. */
int tc_feed(struct tc_parser *p, const char *text, size_t n, bool flush, struct tc_buf *content, size_t *first_new);

/* Whole-reply convenience: content (malloc'ed, "" when none) and the calls
 * in p (initialised here; free with tc_parser_free). */
int tc_parse_all(struct tc_parser *p, int family, json_t *tools, int max_calls, uint64_t id_seed, const char *text,
                 char **content);

#endif
