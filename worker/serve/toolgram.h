/* toolgram.h — the grammar a reply follows when it must call a tool
 * (tool_choice "required" or a named function): the template family's call
 * frame around a call object that satisfies tc_call_schema (the function's
 * name and its parameters schema), one call, or with parallel_tool_calls
 * up to TOOLGRAM_MAX_CALLS in a row, and then nothing: the end of generation is
 * allowed only after a whole call.
 *
 * The reply's start is already in the prompt (tc_prefill): the grammar
 * covers the whole call, and the scheduler advances its state over that
 * prefilled text before the first token (sched_request.gram_prefix), so
 * the model writes only the rest. */
#ifndef LLM170_TOOLGRAM_H
#define LLM170_TOOLGRAM_H

#include <jansson.h>

#include "../../common/err.h"
#include "../../common/toolcall.h"
#include "gram.h"

#define TOOLGRAM_MAX_CALLS 16 /* calls in one reply with parallel_tool_calls: a model cannot call forever */

/* The grammar for choice c over tools in family's form; *out NULL (and 0)
 * when there is nothing to enforce: "auto" / "none", or a family whose
 * calls have no JSON text form here (TC_NONE, TC_AUTO, TC_QWEN_XML: those
 * replies are prefilled only). ERR_INVALID / ERR_RANGE: a parameters schema
 * outside jsg_schema.h's subset (the message names the keyword). */
int toolgram_compile(json_t *tools, const struct tc_choice *c, int family, struct gram **out, struct err *e);

#endif
