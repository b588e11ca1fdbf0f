/* jinja.h — a small interpreter for the Jinja subset that GGUF chat
 * templates (`tokenizer.chat_template`) use.
 *
 * Values are jansson json_t. Statements: if/elif/else, for (with loop.*,
 * `else`, inline `if` filter, tuple unpacking), set (also `set ns.attr`,
 * block set), macro, break/continue; `{%- -%}` whitespace control with the
 * trim_blocks + lstrip_blocks settings Hugging Face and llama.cpp render
 * chat templates with. Expressions: literals, lists, dicts, attribute and
 * index access, slicing, calls, filters, tests, arithmetic, `~`, comparisons,
 * `in`, `and/or/not`, `x if c else y`. What the subset lacks is reported as
 * ERR_UNSUPPORTED with the template line, never guessed at. */
#ifndef LLM170_JINJA_H
#define LLM170_JINJA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "../../common/err.h"

struct jinja_tmpl;

/* Parse template text. Syntax errors and unsupported statements are
 * ERR_UNSUPPORTED / ERR_FORMAT with "chat template line N: …". */
int jinja_parse(struct jinja_tmpl **out, const char *src, size_t len, struct err *e);
void jinja_free(struct jinja_tmpl *t);

struct jinja_opts {
    time_t now;        /* what strftime_now() formats; 0 = the current time */
    size_t max_output; /* output cap in bytes; 0 = 64 MiB */
    long long max_steps; /* loop iterations + macro calls; 0 = 2 000 000 */
};

/* Render with `vars` (an object of top-level variables; not modified).
 * *out is malloc'ed and NUL-terminated; *out_len may be NULL. A template
 * calling raise_exception(msg) fails with ERR_INVALID and msg. */
int jinja_render(const struct jinja_tmpl *t, json_t *vars, const struct jinja_opts *opts,
                 char **out, size_t *out_len, struct err *e);

#endif
