/* chat.c — OpenAI chat message checking (chat.h), shared by the gateway and the worker. */
#include "chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_content(json_t *msg, size_t i, struct err *e)
{
    json_t *content = json_object_get(msg, "content");
    if (!content || json_is_null(content))
        return json_object_set_new(msg, "content", json_string("")) ? ERR_NOMEM : 0;
    if (json_is_string(content))
        return 0;
    if (!json_is_array(content))
        return err_set(e, ERR_INVALID, "messages[%zu].content must be a string or an array of content parts", i);
    /* array of parts: the text parts joined with "\n" */
    size_t total = 0, k;
    json_t *part;
    json_array_foreach(content, k, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type))
            return err_set(e, ERR_INVALID, "messages[%zu].content[%zu] must be an object with a string 'type'", i, k);
        if (strcmp(json_string_value(type), "text"))
            return err_set(e, ERR_INVALID, "messages[%zu].content[%zu]: content part type '%s' is not supported (only 'text')",
                           i, k, json_string_value(type));
        if (!json_is_string(text))
            return err_set(e, ERR_INVALID, "messages[%zu].content[%zu].text must be a string", i, k);
        total += json_string_length(text) + 1;
    }
    char *s = malloc(total + 1), *o = s;
    if (!s)
        return err_set(e, ERR_NOMEM, "out of memory");
    json_array_foreach(content, k, part) {
        json_t *text = json_object_get(part, "text");
        if (o != s)
            *o++ = '\n';
        memcpy(o, json_string_value(text), json_string_length(text));
        o += json_string_length(text);
    }
    int rc = json_object_set_new(msg, "content", json_stringn(s, (size_t)(o - s)));
    free(s);
    return rc ? err_set(e, ERR_NOMEM, "out of memory") : 0;
}

int chat_check_messages(json_t *messages, json_t **normalized, struct err *e)
{
    *normalized = NULL;
    if (!json_is_array(messages))
        return err_set(e, ERR_INVALID, "'messages' must be an array");
    if (json_array_size(messages) == 0)
        return err_set(e, ERR_INVALID, "'messages' must not be empty");
    json_t *out = json_deep_copy(messages);
    if (!out)
        return err_set(e, ERR_NOMEM, "out of memory");
    size_t i;
    json_t *m;
    json_array_foreach(out, i, m) {
        int rc = 0;
        if (!json_is_object(m))
            rc = err_set(e, ERR_INVALID, "messages[%zu] must be an object", i);
        else if (!json_is_string(json_object_get(m, "role")))
            rc = err_set(e, ERR_INVALID, "messages[%zu].role must be a string", i);
        else
            rc = check_content(m, i, e);
        if (rc) {
            json_decref(out);
            return rc;
        }
    }
    *normalized = out;
    return 0;
}

