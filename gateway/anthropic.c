/* anthropic.c — the Anthropic Messages API (anthropic.h). Every static name
 * here starts with anth_: the gateway's tests compile the gateway's files as
 * one translation unit. */
#include "anthropic.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- errors */

const char *anth_error_type(int status, int code)
{
    (void)code;
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error"; /* no worker ready: try again later, as Anthropic's 529 means */
    default: return status >= 400 && status < 500 ? "invalid_request_error" : "api_error";
    }
}

char *anth_error_body(int status, int code, const char *msg)
{
    json_t *o = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", anth_error_type(status, code),
                          "message", msg ? msg : "");
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* ---------------------------------------------------------------- request */

struct anth_pctx {
    char *param;
    size_t param_cap;
    struct err *e;
};

static int anth_bad(struct anth_pctx *P, const char *field, const char *fmt, ...)
{
    snprintf(P->param, P->param_cap, "%s", field);
    char m[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return err_set(P->e, ERR_INVALID, "%s", m);
}

static json_t *anth_field(json_t *body, const char *name)
{
    json_t *v = json_object_get(body, name);
    return v && !json_is_null(v) ? v : NULL;
}

/* Text of `content`: a string, or an array of {"type":"text","text"} blocks
 * (joined with "\n"). where names it in errors. *out is malloc'ed. */
static int anth_text_of(struct anth_pctx *P, json_t *content, const char *field, const char *where, char **out)
{
    *out = NULL;
    if (!content)
        return (*out = strdup("")) ? 0 : err_set(P->e, ERR_NOMEM, "out of memory");
    if (json_is_string(content))
        return (*out = strdup(json_string_value(content))) ? 0 : err_set(P->e, ERR_NOMEM, "out of memory");
    if (!json_is_array(content))
        return anth_bad(P, field, "%s must be a string or an array of text blocks", where);
    struct oai_str s = {0};
    size_t k;
    json_t *b;
    json_array_foreach(content, k, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        json_t *text = json_object_get(b, "text");
        if (!type || strcmp(type, "text") || !json_is_string(text)) {
            free(s.p);
            return anth_bad(P, field, "%s[%zu] must be a text block {\"type\": \"text\", \"text\": ...}%s%s", where, k,
                            type && strcmp(type, "text") ? "; not supported here: " : "",
                            type && strcmp(type, "text") ? type : "");
        }
        if ((s.n && oai_str_put(&s, "\n", 1)) || oai_str_put(&s, json_string_value(text), json_string_length(text))) {
            free(s.p);
            return err_set(P->e, ERR_NOMEM, "out of memory");
        }
    }
    *out = s.p ? s.p : strdup("");
    return *out ? 0 : err_set(P->e, ERR_NOMEM, "out of memory");
}

/* A user message's text gathered so far becomes one message (before a
 * tool result, so the turn's order is kept). */
static int anth_flush_user(json_t *out, struct oai_str *text, bool force)
{
    if (!text->n && !force)
        return 0;
    json_t *m = json_pack("{s:s, s:s%}", "role", "user", "content", text->p ? text->p : "", text->n);
    text->n = 0;
    return m && !json_array_append_new(out, m) ? 0 : ERR_NOMEM;
}

/* One Anthropic message → the chat messages it becomes, appended to out. */
static int anth_message(struct anth_pctx *P, json_t *msg, size_t i, json_t *out)
{
    char where[96];
    const char *role = json_string_value(json_object_get(msg, "role"));
    if (!json_is_object(msg) || !role)
        return anth_bad(P, "messages", "messages[%zu] must be an object with a 'role'", i);
    bool user = !strcmp(role, "user"), asst = !strcmp(role, "assistant");
    if (!user && !asst)
        return anth_bad(P, "messages", "messages[%zu].role '%.40s' must be 'user' or 'assistant' (the system prompt "
                                       "goes in 'system')", i, role);
    json_t *content = json_object_get(msg, "content");
    if (json_is_string(content)) {
        json_t *m = json_pack("{s:s, s:O}", "role", role, "content", content);
        return m && !json_array_append_new(out, m) ? 0 : err_set(P->e, ERR_NOMEM, "out of memory");
    }
    if (!json_is_array(content))
        return anth_bad(P, "messages", "messages[%zu].content must be a string or an array of content blocks", i);
    struct oai_str text = {0};
    json_t *calls = json_array();
    bool had_result = false;
    int rc = calls ? 0 : err_set(P->e, ERR_NOMEM, "out of memory");
    size_t k;
    json_t *b;
    json_array_foreach(content, k, b) {
        if (rc)
            break;
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !type) {
            rc = anth_bad(P, "messages", "messages[%zu].content[%zu] must be a content block with a 'type'", i, k);
        } else if (!strcmp(type, "text")) {
            json_t *t = json_object_get(b, "text");
            if (!json_is_string(t))
                rc = anth_bad(P, "messages", "messages[%zu].content[%zu].text must be a string", i, k);
            else if ((text.n && oai_str_put(&text, "\n", 1)) || oai_str_put(&text, json_string_value(t), json_string_length(t)))
                rc = err_set(P->e, ERR_NOMEM, "out of memory");
        } else if (!strcmp(type, "tool_use")) {
            const char *id = json_string_value(json_object_get(b, "id"));
            const char *name = json_string_value(json_object_get(b, "name"));
            json_t *input = json_object_get(b, "input");
            if (!asst) {
                rc = anth_bad(P, "messages", "messages[%zu].content[%zu]: a tool_use block belongs to an assistant "
                                             "message", i, k);
            } else if (!id || !name || !*name || (input && !json_is_object(input))) {
                rc = anth_bad(P, "messages", "messages[%zu].content[%zu]: a tool_use block needs 'id', 'name' and an "
                                             "'input' object", i, k);
            } else {
                json_t *own = input ? json_incref(input) : json_object();
                char *args = own ? json_dumps(own, JSON_COMPACT) : NULL;
                json_decref(own);
                json_t *c = args ? json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function",
                                             "name", name, "arguments", args)
                                 : NULL;
                free(args);
                if (!c || json_array_append_new(calls, c))
                    rc = err_set(P->e, ERR_NOMEM, "out of memory");
            }
        } else if (!strcmp(type, "tool_result")) {
            const char *id = json_string_value(json_object_get(b, "tool_use_id"));
            char *res = NULL;
            snprintf(where, sizeof where, "messages[%zu].content[%zu].content", i, k);
            if (!user)
                rc = anth_bad(P, "messages", "messages[%zu].content[%zu]: a tool_result block belongs to a user "
                                             "message", i, k);
            else if (!id)
                rc = anth_bad(P, "messages", "messages[%zu].content[%zu]: a tool_result block needs 'tool_use_id'", i,
                              k);
            else if (!(rc = anth_text_of(P, anth_field(b, "content"), "messages", where, &res))) {
                /* a failed tool says so in the text the model reads */
                const char *pre = json_is_true(json_object_get(b, "is_error")) ? "Error: " : "";
                json_t *m = NULL;
                if (!anth_flush_user(out, &text, false)) {
                    size_t n = strlen(pre) + strlen(res) + 1;
                    char *t = malloc(n);
                    if (t) {
                        snprintf(t, n, "%s%s", pre, res);
                        m = json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", id, "content", t);
                        free(t);
                    }
                }
                if (!m || json_array_append_new(out, m))
                    rc = err_set(P->e, ERR_NOMEM, "out of memory");
                had_result = true;
            }
            free(res);
        } else if (!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking")) {
            /* earlier reasoning: templates drop it from past turns anyway */
        } else {
            rc = anth_bad(P, "messages", "messages[%zu].content[%zu]: content blocks of type '%.40s' are not supported "
                                         "(text, tool_use, tool_result)", i, k, type);
        }
    }
    if (!rc && user) {
        if (anth_flush_user(out, &text, !had_result))
            rc = err_set(P->e, ERR_NOMEM, "out of memory");
    } else if (!rc) {
        json_t *m = json_pack("{s:s, s:o}", "role", "assistant", "content",
                              text.n || !json_array_size(calls) ? json_stringn(text.p ? text.p : "", text.n) : json_null());
        if (m && json_array_size(calls))
            json_object_set(m, "tool_calls", calls);
        if (!m || json_array_append_new(out, m))
            rc = err_set(P->e, ERR_NOMEM, "out of memory");
    }
    json_decref(calls);
    free(text.p);
    return rc;
}

/* tools: [{name, description, input_schema}] → [{type: function, function: {name, description, parameters}}] */
static int anth_tools(struct anth_pctx *P, json_t *tools, json_t **out)
{
    if (!json_is_array(tools))
        return anth_bad(P, "tools", "'tools' must be an array");
    json_t *arr = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        const char *name = json_string_value(json_object_get(t, "name"));
        json_t *desc = anth_field(t, "description"), *schema = json_object_get(t, "input_schema");
        int rc = 0;
        if (!json_is_object(t))
            rc = anth_bad(P, "tools", "tools[%zu] must be an object", i);
        else if (type && strcmp(type, "custom"))
            rc = anth_bad(P, "tools", "tools[%zu]: tools of type '%.40s' are not supported (only client tools: name, "
                                      "description, input_schema)", i, type);
        else if (!name || !*name)
            rc = anth_bad(P, "tools", "tools[%zu] needs a 'name'", i);
        else if (desc && !json_is_string(desc))
            rc = anth_bad(P, "tools", "tools[%zu].description must be a string", i);
        else if (!json_is_object(schema))
            rc = anth_bad(P, "tools", "tools[%zu].input_schema must be a JSON Schema object", i);
        json_t *fn = rc ? NULL : json_pack("{s:s, s:O}", "name", name, "parameters", schema);
        if (fn && desc)
            json_object_set(fn, "description", desc);
        json_t *o = fn ? json_pack("{s:s, s:o}", "type", "function", "function", fn) : NULL;
        if (!rc && (!o || json_array_append_new(arr, o)))
            rc = err_set(P->e, ERR_NOMEM, "out of memory");
        if (rc) {
            json_decref(arr);
            return rc;
        }
    }
    *out = arr;
    return 0;
}

/* tool_choice {type: auto|any|tool|none, name, disable_parallel_tool_use} → OpenAI's tool_choice and
 * parallel_tool_calls in ob. */
static int anth_tool_choice(struct anth_pctx *P, json_t *tc, json_t *ob)
{
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || !type)
        return anth_bad(P, "tool_choice", "'tool_choice' must be an object with a 'type' (auto, any, tool, none)");
    json_t *v;
    if (!strcmp(type, "auto") || !strcmp(type, "none")) {
        v = json_string(type);
    } else if (!strcmp(type, "any")) {
        v = json_string("required");
    } else if (!strcmp(type, "tool")) {
        const char *name = json_string_value(json_object_get(tc, "name"));
        if (!name)
            return anth_bad(P, "tool_choice", "'tool_choice' of type 'tool' needs a 'name'");
        v = json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name);
    } else {
        return anth_bad(P, "tool_choice", "'tool_choice.type' '%.40s' is not one of auto, any, tool, none", type);
    }
    json_object_set_new(ob, "tool_choice", v);
    json_t *dp = anth_field(tc, "disable_parallel_tool_use");
    if (dp && !json_is_boolean(dp))
        return anth_bad(P, "tool_choice", "'tool_choice.disable_parallel_tool_use' must be a boolean");
    if (dp)
        json_object_set_new(ob, "parallel_tool_calls", json_boolean(!json_is_true(dp)));
    return 0;
}

/* The OpenAI chat body a Messages body stands for. */
static int anth_to_chat(struct anth_pctx *P, json_t *body, bool count, json_t *ob)
{
    int rc;
    json_t *model = json_object_get(body, "model");
    if (model)
        json_object_set(ob, "model", model);

    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs))
        return anth_bad(P, "messages", msgs ? "'messages' must be an array" : "'messages' is required");
    json_t *out = json_array();
    json_object_set_new(ob, "messages", out);
    json_t *sys = anth_field(body, "system");
    if (sys) {
        char *text = NULL;
        if ((rc = anth_text_of(P, sys, "system", "'system'", &text)))
            return rc;
        json_t *m = json_pack("{s:s, s:s}", "role", "system", "content", text);
        free(text);
        if (!m || json_array_append_new(out, m))
            return err_set(P->e, ERR_NOMEM, "out of memory");
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
        if ((rc = anth_message(P, m, i, out)))
            return rc;
    if (!json_array_size(msgs))
        return anth_bad(P, "messages", "'messages' must not be empty");

    json_t *tools = anth_field(body, "tools"), *tc = anth_field(body, "tool_choice");
    if (tools) {
        json_t *ot = NULL;
        if ((rc = anth_tools(P, tools, &ot)))
            return rc;
        json_object_set_new(ob, "tools", ot);
    }
    if (tc && (rc = anth_tool_choice(P, tc, ob)))
        return rc;

    json_t *mt = anth_field(body, "max_tokens");
    if (!count) {
        if (!mt)
            return anth_bad(P, "max_tokens", "'max_tokens' is required");
        if (!json_is_integer(mt) || json_integer_value(mt) < 1)
            return anth_bad(P, "max_tokens", "'max_tokens' must be a positive integer");
        json_object_set(ob, "max_tokens", mt);
    }
    json_t *stop = anth_field(body, "stop_sequences");
    if (stop) {
        size_t k;
        json_t *s;
        if (!json_is_array(stop))
            return anth_bad(P, "stop_sequences", "'stop_sequences' must be an array of strings");
        if (json_array_size(stop) > OAI_MAX_STOP)
            return anth_bad(P, "stop_sequences", "'stop_sequences' has more than %d strings", OAI_MAX_STOP);
        json_array_foreach(stop, k, s)
            if (!json_is_string(s))
                return anth_bad(P, "stop_sequences", "'stop_sequences' must be an array of strings");
        json_object_set(ob, "stop", stop);
    }
    /* the same names and meaning in both APIs; metadata and the rest are ignored */
    static const char *const same[] = {"temperature", "top_p", "top_k", "stream"};
    for (size_t k = 0; k < sizeof same / sizeof *same; k++) {
        json_t *v = anth_field(body, same[k]);
        if (v && !count)
            json_object_set(ob, same[k], v);
    }
    return 0;
}

int anth_parse(json_t *body, bool count, struct oai_request *rq, char *param, size_t param_cap, struct err *e)
{
    memset(rq, 0, sizeof *rq);
    if (param_cap)
        param[0] = 0;
    struct anth_pctx P = {param, param_cap, e};
    if (!json_is_object(body))
        return err_set(e, ERR_INVALID, "the request body must be a JSON object");
    json_t *ob = json_object();
    if (!ob)
        return err_set(e, ERR_NOMEM, "out of memory");
    int rc = anth_to_chat(&P, body, count, ob);
    if (!rc)
        rc = oai_parse_request(OAI_CHAT, ob, rq, param, param_cap, e);
    json_decref(ob);
    if (rc)
        return rc;
    if (count) { /* only the prompt: render and tokenize it, generate nothing */
        rq->gen.max_tokens = 0;
        rq->gen.set |= PG_MAX_TOKENS;
        rq->gen.tool_required = false;
        rq->gen.tool_name = NULL;
        rq->stream = false;
    }
    return 0;
}

/* ---------------------------------------------------------------- reply */

struct anth_state {
    const struct oai_request *rq;
    char id[64], model[256];
    bool started;           /* message_start sent */
    int open;               /* the open block: 0 none, 1 text, 2 thinking */
    int index;              /* the open block's index, or the next one's when none is open */
    struct oai_think think;
    struct tc_parser tc;
};

struct anth_state *anth_state_new(const struct oai_request *rq, const char *id, const char *model)
{
    struct anth_state *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->rq = rq;
    snprintf(a->id, sizeof a->id, "%s", id);
    snprintf(a->model, sizeof a->model, "%s", model);
    tc_parser_init(&a->tc, rq->tool_parse.family, rq->tool_parse.tools, rq->tool_parse.max_calls, 0);
    return a;
}

void anth_state_free(struct anth_state *a)
{
    if (!a)
        return;
    tc_parser_free(&a->tc);
    free(a);
}

/* json_string needs valid UTF-8: bad bytes become U+FFFD. */
static json_t *anth_string(const char *s, size_t n)
{
    size_t bad;
    if (oai_utf8_valid(s, n, &bad))
        return json_stringn(s, n);
    struct oai_str t = {0};
    for (size_t i = 0; i < n;) {
        if (oai_utf8_valid(s + i, n - i, &bad)) {
            oai_str_put(&t, s + i, n - i);
            break;
        }
        oai_str_put(&t, s + i, bad);
        oai_str_put(&t, "\xef\xbf\xbd", 3);
        i += bad + 1;
    }
    json_t *v = json_stringn(t.p ? t.p : "", t.n);
    free(t.p);
    return v;
}

/* "toolu_" + the call id's own characters */
static void anth_tool_id(const struct tc_call *c, char *out, size_t cap)
{
    const char *own = strncmp(c->id, "call_", 5) ? c->id : c->id + 5;
    snprintf(out, cap, "toolu_%s", own);
}

/* A call's arguments as the input object (a call whose arguments are not an object gets {}). */
static json_t *anth_input(const struct tc_call *c)
{
    json_t *v = json_loads(c->args ? c->args : "{}", JSON_DECODE_ANY, NULL);
    if (!json_is_object(v)) {
        json_decref(v);
        v = json_object();
    }
    return v;
}

static const char *anth_stop_reason(const struct anth_state *a, const char *finish, int stop_hit, bool calls,
                                    const char **seq)
{
    *seq = NULL;
    if (finish && !strcmp(finish, "length"))
        return "max_tokens";
    if (calls)
        return "tool_use";
    if (stop_hit > 0 && (size_t)stop_hit <= a->rq->gen.n_stop) {
        *seq = a->rq->gen.stop[stop_hit - 1];
        return "stop_sequence";
    }
    return "end_turn";
}

char *anth_response_body(struct anth_state *a, const char *text, const char *finish, int stop_hit, int32_t n_prompt,
                         int32_t n_gen)
{
    struct oai_str rs = {0}, cs = {0};
    struct oai_think t = {0};
    text = text ? text : "";
    if (a->rq->think)
        oai_think_feed(&t, text, true, &rs, &cs);
    else
        oai_str_put(&cs, text, strlen(text));
    json_t *content = json_array();
    if (rs.n)
        json_array_append_new(content, json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                                                 anth_string(rs.p, rs.n), "signature", ""));
    struct tc_parser p;
    char *rest = NULL;
    tc_parse_all(&p, a->rq->tool_parse.family, a->rq->tool_parse.tools, a->rq->tool_parse.max_calls, 0,
                 cs.p ? cs.p : "", &rest);
    if (rest && *rest)
        json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text", anth_string(rest, strlen(rest))));
    for (size_t k = 0; k < p.n_calls; k++) {
        char id[64];
        anth_tool_id(&p.calls[k], id, sizeof id);
        json_array_append_new(content, json_pack("{s:s, s:s, s:o, s:o}", "type", "tool_use", "id", id, "name",
                                                 anth_string(p.calls[k].name, strlen(p.calls[k].name)), "input",
                                                 anth_input(&p.calls[k])));
    }
    const char *seq;
    const char *reason = anth_stop_reason(a, finish, stop_hit, p.n_calls > 0, &seq);
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:{s:i, s:i}}", "id", a->id, "type", "message", "role",
                          "assistant", "model", a->model, "content", content, "stop_reason", reason, "stop_sequence",
                          seq ? json_string(seq) : json_null(), "usage", "input_tokens", n_prompt, "output_tokens",
                          n_gen);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    free(rest);
    tc_parser_free(&p);
    free(rs.p);
    free(cs.p);
    return s;
}

char *anth_count_body(int32_t n_prompt)
{
    json_t *o = json_pack("{s:i}", "input_tokens", n_prompt);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* ---------------------------------------------------------------- stream */

/* "event: NAME\ndata: {…}\n\n" (o is consumed) */
static int anth_sse_put(const char *name, json_t *o, char **buf, size_t *len)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s)
        return ERR_NOMEM;
    size_t nl = strlen(name), sl = strlen(s);
    char *nb = realloc(*buf, *len + nl + sl + 18);
    if (!nb) {
        free(s);
        return ERR_NOMEM;
    }
    *len += (size_t)sprintf(nb + *len, "event: %s\ndata: %s\n\n", name, s);
    *buf = nb;
    free(s);
    return 0;
}

static int anth_block_stop(struct anth_state *a, char **buf, size_t *len)
{
    if (!a->open)
        return 0;
    a->open = 0;
    return anth_sse_put("content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", a->index++),
                        buf, len);
}

/* Text for a block of kind 1 (text) or 2 (thinking): opened when another kind is open or none. */
static int anth_block_text(struct anth_state *a, int kind, const char *text, size_t n, char **buf, size_t *len)
{
    int rc = 0;
    if (a->open != kind) {
        rc = anth_block_stop(a, buf, len);
        json_t *cb = kind == 1 ? json_pack("{s:s, s:s}", "type", "text", "text", "")
                               : json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "");
        if (!rc)
            rc = anth_sse_put("content_block_start", json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index",
                                                              a->index, "content_block", cb),
                              buf, len);
        a->open = kind;
    }
    json_t *d = kind == 1 ? json_pack("{s:s, s:o}", "type", "text_delta", "text", anth_string(text, n))
                          : json_pack("{s:s, s:o}", "type", "thinking_delta", "thinking", anth_string(text, n));
    return rc ? rc : anth_sse_put("content_block_delta", json_pack("{s:s, s:i, s:o}", "type", "content_block_delta",
                                                                  "index", a->index, "delta", d),
                                  buf, len);
}

static int anth_block_tool(struct anth_state *a, const struct tc_call *c, char **buf, size_t *len)
{
    char id[64];
    anth_tool_id(c, id, sizeof id);
    int rc = anth_block_stop(a, buf, len);
    if (!rc)
        rc = anth_sse_put("content_block_start",
                          json_pack("{s:s, s:i, s:{s:s, s:s, s:o, s:{}}}", "type", "content_block_start", "index", a->index,
                                    "content_block", "type", "tool_use", "id", id, "name",
                                    anth_string(c->name, strlen(c->name)), "input"),
                          buf, len);
    /* the input's JSON text in one piece (compact, as the object reads back) */
    json_t *in = anth_input(c);
    char *js = in ? json_dumps(in, JSON_COMPACT) : NULL;
    json_decref(in);
    if (!rc && js)
        rc = anth_sse_put("content_block_delta",
                          json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", a->index, "delta",
                                    "type", "input_json_delta", "partial_json", js),
                          buf, len);
    free(js);
    a->open = 3;
    return rc ? rc : anth_block_stop(a, buf, len);
}

/* The reply's next text (flush: it ended): thinking, text and tool_use blocks. */
static int anth_feed(struct anth_state *a, const char *text, bool flush, char **buf, size_t *len)
{
    struct oai_str rs = {0}, cs = {0};
    int rc;
    if (a->rq->think)
        rc = oai_think_feed(&a->think, text, flush, &rs, &cs);
    else
        rc = text ? oai_str_put(&cs, text, strlen(text)) : 0;
    if (!rc && rs.n)
        rc = anth_block_text(a, 2, rs.p, rs.n, buf, len);
    struct tc_buf tb = {0};
    size_t first = a->tc.n_calls;
    if (!rc && (cs.n || flush))
        rc = tc_feed(&a->tc, cs.p ? cs.p : "", cs.n, flush, &tb, &first);
    if (!rc && tb.n)
        rc = anth_block_text(a, 1, tb.p, tb.n, buf, len);
    for (size_t k = first; !rc && k < a->tc.n_calls; k++)
        rc = anth_block_tool(a, &a->tc.calls[k], buf, len);
    tc_buf_free(&tb);
    free(rs.p);
    free(cs.p);
    return rc;
}

int anth_sse_event(struct anth_state *a, const struct gw_event *ev, char **buf, size_t *len)
{
    int rc = 0;
    if (!a->started) {
        a->started = true;
        /* the prompt's token count: the first token's event says it (a stream that ends at once tells
         * it with the end: message_delta's usage) */
        rc = anth_sse_put("message_start",
                          json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:{s:i, s:i}}}", "type", "message_start",
                                    "message", "id", a->id, "type", "message", "role", "assistant", "model", a->model,
                                    "content", "stop_reason", "stop_sequence", "usage", "input_tokens",
                                    (int)ev->n_prompt, "output_tokens", 0),
                          buf, len);
    }
    if (rc)
        return rc;
    if (ev->kind == GW_EV_TOKEN)
        return ev->text && *ev->text ? anth_feed(a, ev->text, false, buf, len) : 0;
    if (ev->kind != GW_EV_DONE)
        return 0;
    rc = anth_feed(a, NULL, true, buf, len);
    if (!rc)
        rc = anth_block_stop(a, buf, len);
    const char *seq;
    const char *reason = anth_stop_reason(a, ev->finish, ev->stop_hit, a->tc.n_calls > 0, &seq);
    if (!rc)
        rc = anth_sse_put("message_delta",
                          json_pack("{s:s, s:{s:s, s:o}, s:{s:i, s:i}}", "type", "message_delta", "delta", "stop_reason",
                                    reason, "stop_sequence", seq ? json_string(seq) : json_null(), "usage",
                                    "input_tokens", ev->n_prompt, "output_tokens", ev->n_gen),
                          buf, len);
    if (!rc)
        rc = anth_sse_put("message_stop", json_pack("{s:s}", "type", "message_stop"), buf, len);
    return rc;
}

int anth_sse_error(int status, int code, const char *msg, char **buf, size_t *len)
{
    char *s = anth_error_body(status, code, msg);
    json_t *o = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    return anth_sse_put("error", o, buf, len);
}
