#include "model_chat.h"

#include <stdlib.h>
#include <string.h>

#include "chat_render.h"

/* Token text of id, or "" (the template's bos_token / eos_token). */
static const char *special_text(const struct tok_vocab *v, int32_t id)
{
    return id >= 0 && id < tok_n_vocab(v) ? tok_text(v, id) : "";
}

int model_chat_render(const struct model *m, json_t *messages, json_t *tools, json_t *extra_vars, char **out,
                      struct err *e)
{
    const struct tok_vocab *v = model_vocab(m);
    char *tmpl = NULL;
    struct gguf_str s;
    if (gguf_get_str(model_gguf(m), "tokenizer.chat_template", &s, NULL) == 0) {
        tmpl = malloc(s.len + 1);
        if (!tmpl)
            return err_set(e, ERR_NOMEM, "out of memory");
        memcpy(tmpl, s.ptr, s.len);
        tmpl[s.len] = '\0';
    }
    struct chat_params p = {
        .tmpl = tmpl,
        .messages = messages,
        .tools = tools,
        .add_generation_prompt = true,
        .bos = special_text(v, tok_bos(v)),
        .eos = special_text(v, tok_eos(v)),
        .strip_bos = tok_add_bos(v), /* the tokenizer adds BOS itself: no second one */
        .extra_vars = extra_vars,
    };
    int rc = chat_render_ex(&p, out, e);
    free(tmpl);
    return rc;
}

int model_chat_render_prompt(const struct model *m, const char *user_text, char **out, struct err *e)
{
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", user_text);
    if (!msgs)
        return err_set(e, ERR_INVALID, "the prompt is not valid UTF-8");
    int rc = model_chat_render(m, msgs, NULL, NULL, out, e);
    json_decref(msgs);
    return rc;
}
