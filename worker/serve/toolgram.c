/* toolgram.c — tool-call grammars (toolgram.h). */
#include "toolgram.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsg_schema.h"

/* One call schema of tc_call_schema's ({"name", "arguments"}) as the grammar
 * wants it: no member besides the two (else the model could go on writing
 * members after the arguments, never closing the call), and for Llama 3,
 * which writes {"name": …, "parameters": …}, the member renamed, name first. */
static int call_shape(json_t *call, int family)
{
    if (json_object_set_new(call, "additionalProperties", json_false()))
        return -1;
    if (family != TC_LLAMA3)
        return 0;
    json_t *props = json_object_get(call, "properties");
    json_t *args = json_object_get(props, "arguments");
    if (!args)
        return -1;
    json_incref(args);
    int rc = json_object_del(props, "arguments") || json_object_set_new(props, "parameters", args) ||
             json_object_set_new(call, "required", json_pack("[s,s]", "name", "parameters"));
    return rc ? -1 : 0;
}

int toolgram_compile(json_t *tools, const struct tc_choice *c, int family, struct gram **out, struct err *e)
{
    *out = NULL;
    if ((c->mode != TC_CHOICE_REQUIRED && c->mode != TC_CHOICE_NAMED) ||
        (family != TC_HERMES && family != TC_LLAMA3 && family != TC_MISTRAL))
        return 0;
    json_t *schema = tc_call_schema(tools, c);
    if (!schema)
        return err_set(e, ERR_INVALID, "tool_choice: no function to call in 'tools'");
    int rc = 0;
    json_t *any = json_object_get(schema, "anyOf");
    if (any) {
        size_t i;
        json_t *t;
        json_array_foreach(any, i, t) rc |= call_shape(t, family);
    } else {
        rc = call_shape(schema, family);
    }
    if (rc) {
        json_decref(schema);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    const char *open, *close;
    tc_call_frame(family, &open, &close);
    /* the calls in a row: Hermes closes one and opens the next on a new line, Mistral lists them in its
     * array; Llama 3's bare object is one call */
    char sep[64];
    snprintf(sep, sizeof sep, "%s", family == TC_MISTRAL ? ", " : "");
    if (family == TC_HERMES)
        snprintf(sep, sizeof sep, "%s\n%s", close, open);
    struct jsg_frame f = {open, sep, close, c->parallel && family != TC_LLAMA3 ? TOOLGRAM_MAX_CALLS : 1};
    rc = jsg_compile_framed(schema, &f, out, e);
    json_decref(schema);
    if (rc && rc != ERR_NOMEM && e) { /* say where the schema came from */
        char msg[sizeof e->msg];
        snprintf(msg, sizeof msg, "%s", e->msg);
        err_set(e, rc, "tools: a function's parameters: %s", msg);
    }
    return rc;
}
