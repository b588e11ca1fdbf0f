/* chat_render.c — OpenAI chat messages → prompt text through a chat template
 * (chat_render.h), on the Jinja subset beside it. */
#include "chat_render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

const char chat_template_chatml[] =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

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
