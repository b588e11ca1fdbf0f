/* jsg_schema.h — JSON Schema → byte grammar (gram.h) for structured output
 * (OpenAI response_format json_object / json_schema).
 *
 * The subset: type (object, array, string, number, integer, boolean, null,
 * or an array of them), properties, required, additionalProperties (false;
 * true / absent / a schema: further properties after the listed ones),
 * enum, const, items, minItems, maxItems, anyOf, oneOf (as anyOf: branches
 * are not made exclusive), minLength, maxLength, pattern (literals, [classes],
 * ., \d \w \s, * + ? {m,n}, groups, |, ^ $), format (date, time, date-time,
 * uuid), $ref to #/$defs/… or #/definitions/… (recursion allowed), and the
 * annotations title, description, default, examples, $schema, $id, $comment
 * (ignored). Any other keyword is an error that names it.
 *
 * Output shape: listed properties come in the schema's order (required ones
 * always, optional ones may be skipped), as OpenAI's strict mode writes
 * them; further members (additionalProperties not false) come after them,
 * with keys written without escapes that are none of the listed names. Whitespace between tokens is bounded (nothing, one space, or a
 * newline and up to 16 spaces) so a model cannot pad forever; numbers are
 * bounded too (integers up to 18 digits: they stay 64-bit; fractions up to
 * 16 digits, exponents up to 2), and a schema-less value nests at most
 * JSG_ANY_DEPTH deep. The text may start and end with that whitespace. */
#ifndef LLM170_JSG_SCHEMA_H
#define LLM170_JSG_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

#include "../../common/err.h"
#include "gram.h"

#define JSG_MAX_TEXT (1u << 20) /* bytes of schema text accepted */
#define JSG_MAX_BOUND 4096      /* largest maxLength / maxItems / {m,n} bound */
#define JSG_MAX_NEST 64         /* schema nesting the compiler follows */
#define JSG_ANY_DEPTH 8         /* nesting of a value whose schema says nothing */

/* Compile a schema. On failure returns ERR_INVALID (unsupported or bad
 * schema: the message names the keyword and where it is), ERR_RANGE (too
 * large) or ERR_NOMEM; *out is NULL then. */
int jsg_compile(const json_t *schema, struct gram **out, struct err *e);
/* A schema's values inside literal text: open V (sep V){0,max-1} close,
 * with no whitespace outside the frame (a tool call in a chat template's
 * form: "<tool_call>\n" … "\n</tool_call>"; toolgram.h builds them). sep
 * may be NULL when max is 1; open and close may be "". */
struct jsg_frame {
    const char *open, *sep, *close;
    int max; /* 1..JSG_MAX_BOUND values */
};
int jsg_compile_framed(const json_t *schema, const struct jsg_frame *f, struct gram **out, struct err *e);
/* The same from JSON text (at most JSG_MAX_TEXT bytes). */
int jsg_compile_text(const char *text, size_t len, struct gram **out, struct err *e);

#endif
