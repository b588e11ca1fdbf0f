/* chat.c — message checking and chat-template rendering (chat.h). */
#include "chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

const char chat_template_chatml[] =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

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

int chat_render_ex(const struct chat_params *p, char **out, struct err *e)
{
    *out = NULL;
    json_t *msgs = NULL;
    int rc = chat_check_messages(p->messages, &msgs, e);
    if (rc)
        return rc;
    json_t *vars = json_object();
    if (!vars) {
        json_decref(msgs);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    if (p->extra_vars && json_is_object(p->extra_vars))
        json_object_update(vars, p->extra_vars);
    json_object_set_new(vars, "messages", msgs);
    if (p->tools && !json_is_null(p->tools))
        json_object_set(vars, "tools", p->tools);
    json_object_set_new(vars, "add_generation_prompt", json_boolean(p->add_generation_prompt));
    json_object_set_new(vars, "bos_token", json_string(p->bos ? p->bos : ""));
    json_object_set_new(vars, "eos_token", json_string(p->eos ? p->eos : ""));

    const char *src = p->tmpl && *p->tmpl ? p->tmpl : chat_template_chatml;
    struct jinja_tmpl *t = NULL;
    rc = jinja_parse(&t, src, strlen(src), e);
    char *text = NULL;
    size_t len = 0;
    if (!rc) {
        struct jinja_opts o = {.now = p->now};
        rc = jinja_render(t, vars, &o, &text, &len, e);
    }
    jinja_free(t);
    json_decref(vars);
    if (rc)
        return rc;
    size_t bl = p->bos ? strlen(p->bos) : 0;
    if (p->strip_bos && bl && len >= bl && !memcmp(text, p->bos, bl))
        memmove(text, text + bl, len - bl + 1);
    *out = text;
    return 0;
}

int chat_render(const char *tmpl, json_t *messages, json_t *tools, bool add_generation_prompt, const char *bos,
                const char *eos, json_t *extra_vars, char **out, struct err *e)
{
    struct chat_params p = {
        .tmpl = tmpl, .messages = messages, .tools = tools, .add_generation_prompt = add_generation_prompt,
        .bos = bos, .eos = eos, .strip_bos = true, .extra_vars = extra_vars,
    };
    return chat_render_ex(&p, out, e);
}
