/* oai.c — OpenAI request parsing and response JSON (oai.h). */
#include "oai.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/chat.h"
#include "../worker/serve/jsg_schema.h"

/* ---------------------------------------------------------------- status */

int gw_http_status(int code)
{
    switch (code) {
    case ERR_OK: return 200;
    case ERR_INVALID: case ERR_UNSUPPORTED: case ERR_RANGE: return 400;
    case ERR_NOTFOUND: return 404;
    case ERR_FULL: return 429;
    case ERR_IO: return 503;
    case ERR_CANCELED: return 499;
    default: return 500;
    }
}

const char *gw_error_type(int status, int code)
{
    if (status == 400 && code == ERR_RANGE)
        return "exceed_context_size_error"; /* llama-server's type for a prompt over the context */
    switch (status) {
    case 400: case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "unavailable_error";
    default: return "server_error";
    }
}

char *oai_error_body(int status, int code, const char *msg, const char *param)
{
    json_t *o = json_pack("{s:{s:s, s:s, s:i, s:o}}", "error", "message", msg ? msg : "", "type",
                          gw_error_type(status, code), "code", status, "param",
                          param && *param ? json_string(param) : json_null());
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* ---------------------------------------------------------------- UTF-8 */

bool oai_utf8_valid(const char *s, size_t n, size_t *bad)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len;
        unsigned cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; }
        else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; }
        else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; }
        else goto fail;
        if (i + len > n)
            goto fail;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                goto fail;
            cp = cp << 6 | (p[i + k] & 0x3f);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
            goto fail;
        i += len;
    }
    return true;
fail:
    if (bad)
        *bad = i;
    return false;
}

/* ---------------------------------------------------------------- parsing */

struct pctx {
    json_t *body;
    char *param;
    size_t param_cap;
    struct err *e;
};

static int bad(struct pctx *P, const char *field, const char *fmt, const char *what)
{
    snprintf(P->param, P->param_cap, "%s", field);
    char m[400];
    snprintf(m, sizeof m, fmt, field, what ? what : "");
    return err_set(P->e, ERR_INVALID, "%s", m);
}

static json_t *field(struct pctx *P, const char *name)
{
    json_t *v = json_object_get(P->body, name);
    return v && !json_is_null(v) ? v : NULL; /* null means "not given", as the SDKs send it */
}

static int get_num(struct pctx *P, const char *name, float *out, bool *given)
{
    json_t *v = field(P, name);
    *given = v != NULL;
    if (!v)
        return 0;
    if (!json_is_number(v))
        return bad(P, name, "'%s' must be a number", NULL);
    double d = json_number_value(v);
    if (!isfinite(d) || fabs(d) > 1e30)
        return bad(P, name, "'%s' is out of range", NULL);
    *out = (float)d;
    return 0;
}

static int get_int(struct pctx *P, const char *name, long long lo, long long hi, long long *out, bool *given)
{
    json_t *v = field(P, name);
    *given = v != NULL;
    if (!v)
        return 0;
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15) {
        x = (long long)json_real_value(v);
    } else {
        return bad(P, name, "'%s' must be an integer", NULL);
    }
    if (x < lo || x > hi) {
        char m[200];
        snprintf(m, sizeof m, "%lld and %lld", lo, hi);
        return bad(P, name, "'%s' must be between %s", m);
    }
    *out = x;
    return 0;
}

static int get_bool(struct pctx *P, const char *name, bool *out, bool *given)
{
    json_t *v = field(P, name);
    *given = v != NULL;
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return bad(P, name, "'%s' must be a boolean", NULL);
    *out = json_is_true(v);
    return 0;
}

static int parse_stop(struct pctx *P, struct oai_request *rq)
{
    json_t *v = field(P, "stop");
    if (!v)
        return 0;
    if (json_is_string(v)) {
        if (json_string_length(v) && !(rq->stop[rq->gen.n_stop++] = strdup(json_string_value(v))))
            return err_set(P->e, ERR_NOMEM, "out of memory");
        return 0;
    }
    if (!json_is_array(v))
        return bad(P, "stop", "'%s' must be a string or an array of strings", NULL);
    if (json_array_size(v) > OAI_MAX_STOP)
        return bad(P, "stop", "'%s' has more than 16 strings", NULL);
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s))
            return bad(P, "stop", "'%s' must be a string or an array of strings", NULL);
        if (!json_string_length(s))
            continue; /* empty stop strings are ignored, as llama-server does */
        if (!(rq->stop[rq->gen.n_stop++] = strdup(json_string_value(s))))
            return err_set(P->e, ERR_NOMEM, "out of memory");
    }
    return 0;
}

static int add_bias(struct pctx *P, struct oai_request *rq, size_t *cap, json_t *key, const char *skey, json_t *val)
{
    float b;
    if (json_is_false(val))
        b = -INFINITY;
    else if (json_is_number(val) && isfinite(json_number_value(val)))
        b = (float)json_number_value(val);
    else
        return bad(P, "logit_bias", "'%s' values must be numbers or false", NULL);
    if (rq->gen.n_logit_bias == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        struct proto_bias *nb = realloc(rq->bias, nc * sizeof *nb);
        if (!nb)
            return err_set(P->e, ERR_NOMEM, "out of memory");
        rq->bias = nb;
        *cap = nc;
    }
    struct proto_bias *x = &rq->bias[rq->gen.n_logit_bias];
    x->bias = b;
    x->token = -1;
    x->text = NULL;
    if (key && json_is_integer(key)) {
        long long t = json_integer_value(key);
        if (t < 0 || t > INT32_MAX)
            return 0; /* ids outside the vocabulary are dropped */
        x->token = (int32_t)t;
    } else {
        const char *s = key ? json_string_value(key) : skey;
        if (!s)
            return bad(P, "logit_bias", "'%s' keys must be token ids or strings", NULL);
        char *end;
        long long t = strtoll(s, &end, 10);
        if (*s && !*end) {
            if (t < 0 || t > INT32_MAX)
                return 0;
            x->token = (int32_t)t;
        } else if (!(x->text = strdup(s))) {
            return err_set(P->e, ERR_NOMEM, "out of memory");
        }
    }
    rq->gen.n_logit_bias++;
    return 0;
}

/* response_format (OpenAI): "text"; "json_object" (any object; a "schema"
 * beside it, as llama-server takes, narrows it); "json_schema" with
 * json_schema.schema. The schema is compiled here once so an unsupported one
 * is a 400 naming its keyword before anything is queued; the worker compiles
 * its text again for the sampler. */
static int parse_response_format(struct pctx *P, json_t *rf, struct oai_request *rq)
{
    json_t *t = json_object_get(rf, "type");
    if (!json_is_object(rf) || !json_is_string(t))
        return bad(P, "response_format", "'%s' must be an object with a 'type'", NULL);
    const char *type = json_string_value(t);
    json_t *sch = NULL;
    if (!strcmp(type, "text"))
        return 0;
    if (!strcmp(type, "json_object")) {
        sch = json_object_get(rf, "schema");
        if (sch && !json_is_object(sch))
            return bad(P, "response_format", "'%s.schema' must be an object", NULL);
    } else if (!strcmp(type, "json_schema")) {
        json_t *js = json_object_get(rf, "json_schema");
        if (!json_is_object(js))
            return bad(P, "response_format", "'%s' of type 'json_schema' needs a 'json_schema' object", NULL);
        json_t *strict = json_object_get(js, "strict"), *name = json_object_get(js, "name");
        if (strict && !json_is_null(strict) && !json_is_boolean(strict))
            return bad(P, "response_format", "'%s.json_schema.strict' must be a boolean", NULL);
        if (name && !json_is_null(name) && !json_is_string(name))
            return bad(P, "response_format", "'%s.json_schema.name' must be a string", NULL);
        sch = json_object_get(js, "schema");
        if (!sch || (!json_is_object(sch) && !json_is_boolean(sch)))
            return bad(P, "response_format", "'%s.json_schema.schema' must be a JSON Schema object", NULL);
    } else {
        return bad(P, "response_format", "'%s' of type '%s' is not supported (text, json_object, json_schema)", type);
    }
    json_t *own = sch ? json_incref(sch) : json_pack("{s:s}", "type", "object");
    char *text = own ? json_dumps(own, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    struct gram *g = NULL;
    int rc = text ? jsg_compile(own, &g, P->e) : err_set(P->e, ERR_NOMEM, "out of memory");
    json_decref(own);
    gram_free(g);
    if (rc) {
        free(text);
        snprintf(P->param, P->param_cap, "response_format");
        /* a schema too large is the request's fault too: 400 invalid_request_error, not a context overflow */
        if (rc == ERR_RANGE && P->e)
            P->e->code = ERR_INVALID;
        return rc == ERR_RANGE ? ERR_INVALID : rc;
    }
    rq->json_schema = text;
    return 0;
}

static int parse_bias(struct pctx *P, struct oai_request *rq)
{
    json_t *v = field(P, "logit_bias");
    size_t cap = 0;
    if (!v)
        return 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        if (json_object_size(v) > 4096)
            return bad(P, "logit_bias", "'%s' has too many entries", NULL);
        json_object_foreach(v, k, x) {
            int rc = add_bias(P, rq, &cap, NULL, k, x);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (json_is_array(v)) {
        size_t i;
        json_t *pair;
        if (json_array_size(v) > 4096)
            return bad(P, "logit_bias", "'%s' has too many entries", NULL);
        json_array_foreach(v, i, pair) {
            if (!json_is_array(pair) || json_array_size(pair) != 2 ||
                !(json_is_integer(json_array_get(pair, 0)) || json_is_string(json_array_get(pair, 0))))
                return bad(P, "logit_bias", "'%s' entries must be [token id or string, bias]", NULL);
            int rc = add_bias(P, rq, &cap, json_array_get(pair, 0), NULL, json_array_get(pair, 1));
            if (rc)
                return rc;
        }
        return 0;
    }
    return bad(P, "logit_bias", "'%s' must be an object mapping token ids to biases", NULL);
}

static int parse_token_array(struct pctx *P, struct oai_request *rq, json_t *arr)
{
    size_t n = json_array_size(arr), i;
    json_t *x;
    if (!n)
        return bad(P, "prompt", "'%s' must not be empty", NULL);
    rq->tokens = malloc(n * sizeof *rq->tokens);
    if (!rq->tokens)
        return err_set(P->e, ERR_NOMEM, "out of memory");
    json_array_foreach(arr, i, x) {
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
            return bad(P, "prompt", "'%s' must be a string or an array of token ids (non-negative integers)", NULL);
        rq->tokens[i] = (int32_t)json_integer_value(x);
    }
    rq->n_tokens = n;
    return 0;
}

static int parse_prompt(struct pctx *P, struct oai_request *rq)
{
    json_t *v = field(P, "prompt");
    if (!v)
        return bad(P, "prompt", "'%s' is required", NULL);
    if (json_is_string(v)) {
        rq->prompt = strdup(json_string_value(v));
        return rq->prompt ? 0 : err_set(P->e, ERR_NOMEM, "out of memory");
    }
    if (!json_is_array(v))
        return bad(P, "prompt", "'%s' must be a string or an array of token ids", NULL);
    json_t *first = json_array_get(v, 0);
    if (first && (json_is_string(first) || json_is_array(first))) {
        if (json_array_size(v) != 1)
            return bad(P, "prompt", "'%s': only one prompt per request is supported", NULL);
        if (json_is_string(first)) {
            rq->prompt = strdup(json_string_value(first));
            return rq->prompt ? 0 : err_set(P->e, ERR_NOMEM, "out of memory");
        }
        return parse_token_array(P, rq, first);
    }
    return parse_token_array(P, rq, v);
}

/* What chat templates are written for: a role they do not know is dropped
 * or rendered as garbage by some templates, so it is refused here. */
static const char *const chat_roles[] = {"system", "developer", "user", "assistant", "tool", "function"};

/* Roles and content presence (chat_check_messages checks the shapes): every
 * message names a known role and carries `content`; only an assistant message
 * that makes tool calls may leave it out (or null), as the OpenAI API allows. */
static int check_roles(struct pctx *P, json_t *msgs)
{
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m))
            continue; /* chat_check_messages names it */
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role)
            continue;
        bool known = false;
        for (size_t k = 0; k < sizeof chat_roles / sizeof *chat_roles; k++)
            known |= !strcmp(role, chat_roles[k]);
        snprintf(P->param, P->param_cap, "messages");
        if (!known)
            return err_set(P->e, ERR_INVALID,
                           "messages[%zu].role '%.40s' is not one of system, developer, user, assistant, tool", i, role);
        json_t *c = json_object_get(m, "content");
        json_t *calls = json_object_get(m, "tool_calls");
        bool calls_tools = !strcmp(role, "assistant") &&
                           ((json_is_array(calls) && json_array_size(calls)) || json_is_object(json_object_get(m, "function_call")));
        if ((!c || json_is_null(c)) && !calls_tools)
            return err_set(P->e, ERR_INVALID, "messages[%zu] (%s) has no 'content'", i, role);
    }
    P->param[0] = 0;
    return 0;
}

/* `tools`: an array of {"type": "function", "function": {"name": "...", ...}}. */
static int check_tools(struct pctx *P, json_t *tools)
{
    if (!json_is_array(tools))
        return bad(P, "tools", "'%s' must be an array", NULL);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *type = json_string_value(json_object_get(t, "type"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!json_is_object(t) || !type || strcmp(type, "function") || !json_is_object(fn) || !name || !*name) {
            snprintf(P->param, P->param_cap, "tools");
            return err_set(P->e, ERR_INVALID,
                           "tools[%zu] must be a function object: {\"type\": \"function\", \"function\": {\"name\": ...}}", i);
        }
    }
    return 0;
}

/* tool_choice and parallel_tool_calls (toolcall.h). "none" is as OpenAI
 * means it: the model must not call a tool, so the tools stay out of its
 * prompt and its reply is not read for calls. */
static int parse_tool_choice(struct pctx *P, struct oai_request *rq, json_t *tools)
{
    const char *param = "";
    int rc = tc_choice_parse(field(P, "tool_choice"), field(P, "parallel_tool_calls"), tools, &rq->tool_choice,
                             &param, P->e);
    if (rc)
        snprintf(P->param, P->param_cap, "%s", param);
    return rc;
}

int oai_parse_request(int kind, json_t *body, struct oai_request *rq, char *param, size_t param_cap, struct err *e)
{
    memset(rq, 0, sizeof *rq);
    proto_gen_init(&rq->gen); /* the wire's defaults: what a request leaves out stays out */
    rq->kind = kind;
    rq->n = 1;
    rq->gen.logprobs = -1;
    if (param_cap)
        param[0] = 0;
    struct pctx P = {body, param, param_cap, e};
    if (!json_is_object(body))
        return err_set(e, ERR_INVALID, "the request body must be a JSON object");
    int rc;
    bool given;
    long long x;

    json_t *m = json_object_get(body, "model");
    if (m && !json_is_null(m) && !json_is_string(m))
        return bad(&P, "model", "'%s' must be a string", NULL);
    rq->model = strdup(json_is_string(m) ? json_string_value(m) : "");
    if (!rq->model)
        return err_set(e, ERR_NOMEM, "out of memory");

    if (kind == OAI_CHAT) {
        json_t *msgs = json_object_get(body, "messages");
        if (!msgs)
            return bad(&P, "messages", "'%s' is required", NULL);
        if ((rc = chat_check_messages(msgs, &rq->messages, e))) {
            snprintf(param, param_cap, "messages");
            return rc;
        }
        if ((rc = check_roles(&P, msgs)))
            return rc;
        json_t *tools = field(&P, "tools");
        if (tools && (rc = check_tools(&P, tools)))
            return rc;
        if ((rc = parse_tool_choice(&P, rq, tools)))
            return rc;
        if (tools && json_array_size(tools) && rq->tool_choice.mode != TC_CHOICE_NONE)
            rq->tools = json_incref(tools);
        json_t *kw = field(&P, "chat_template_kwargs");
        if (kw && !json_is_object(kw))
            return bad(&P, "chat_template_kwargs", "'%s' must be an object", NULL);
        if (kw)
            rq->template_vars = json_deep_copy(kw);
        rq->gen.messages = rq->messages;
        rq->gen.tools = rq->tools;
        rq->gen.template_kwargs = rq->template_vars;
        if (rq->tools) {
            rq->tool_parse = (struct oai_tools){TC_AUTO, rq->tools, rq->tool_choice.parallel ? 0 : 1};
            rq->gen.tool_required = rq->tool_choice.mode == TC_CHOICE_REQUIRED || rq->tool_choice.mode == TC_CHOICE_NAMED;
            rq->gen.tool_name = rq->tool_choice.mode == TC_CHOICE_NAMED ? rq->tool_choice.name : NULL;
            rq->gen.tool_single = !rq->tool_choice.parallel;
        }
    } else {
        if ((rc = parse_prompt(&P, rq)))
            return rc;
        rq->gen.prompt = rq->prompt;
        rq->gen.tokens = rq->tokens;
        rq->gen.n_tokens = rq->n_tokens;
    }

    /* n_predict > max_completion_tokens > max_tokens (sampling.md §6) */
    static const char *const maxes[] = {"n_predict", "max_completion_tokens", "max_tokens"};
    for (int i = 0; i < 3; i++) {
        if ((rc = get_int(&P, maxes[i], -1, INT32_MAX, &x, &given)))
            return rc;
        if (given && !(rq->gen.set & PG_MAX_TOKENS)) {
            rq->gen.max_tokens = (int32_t)x;
            rq->gen.set |= PG_MAX_TOKENS;
        }
    }
    struct { const char *name; float *dst; uint32_t bit; float lo, hi; } nums[] = {
        {"temperature", &rq->gen.temperature, PG_TEMPERATURE, -1e30f, 1e30f},
        {"top_p", &rq->gen.top_p, PG_TOP_P, 0, 1},
        {"min_p", &rq->gen.min_p, PG_MIN_P, 0, 1},
        {"typical_p", &rq->gen.typical_p, PG_TYPICAL_P, 0, 1},
        {"repeat_penalty", &rq->gen.repeat_penalty, PG_REPEAT_PENALTY, 0, 1e30f},
        {"presence_penalty", &rq->gen.presence_penalty, PG_PRESENCE, -1e30f, 1e30f},
        {"frequency_penalty", &rq->gen.frequency_penalty, PG_FREQUENCY, -1e30f, 1e30f},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        if ((rc = get_num(&P, nums[i].name, nums[i].dst, &given)))
            return rc;
        if (given && (*nums[i].dst < nums[i].lo || *nums[i].dst > nums[i].hi))
            return bad(&P, nums[i].name, nums[i].hi == 1 ? "'%s' must be between 0 and 1" : "'%s' must not be negative",
                       NULL);
        if (given)
            rq->gen.set |= nums[i].bit;
    }
    if ((rc = get_int(&P, "top_k", -1, INT32_MAX, &x, &given)))
        return rc;
    if (given) {
        rq->gen.top_k = (int32_t)x;
        rq->gen.set |= PG_TOP_K;
    }
    if ((rc = get_int(&P, "repeat_last_n", -1, INT32_MAX, &x, &given)))
        return rc;
    if (given) {
        rq->gen.repeat_last_n = (int32_t)x;
        rq->gen.set |= PG_REPEAT_LAST_N;
    }
    if ((rc = get_int(&P, "seed", INT64_MIN, INT64_MAX, &x, &given)))
        return rc;
    if (given && x != -1) { /* -1 = random, as llama-server */
        rq->gen.seed = (uint32_t)x;
        rq->gen.set |= PG_SEED;
    }
    if ((rc = get_int(&P, "n", 1, OAI_MAX_N, &x, &given)))
        return rc;
    if (given)
        rq->n = (int)x;
    if ((rc = get_bool(&P, "stream", &rq->stream, &given)))
        return rc;
    json_t *so = field(&P, "stream_options");
    if (so) {
        if (!json_is_object(so))
            return bad(&P, "stream_options", "'%s' must be an object", NULL);
        json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_null(iu) && !json_is_boolean(iu))
            return bad(&P, "stream_options.include_usage", "'%s' must be a boolean", NULL);
        rq->include_usage = json_is_true(iu);
    }
    if ((rc = get_bool(&P, "ignore_eos", &rq->gen.ignore_eos, &given)))
        return rc;

    /* logprobs (sampling.md §6): chat takes a bool + top_logprobs, completions an int */
    long long n_probs = -1;
    if ((rc = get_int(&P, "n_probs", 0, OAI_MAX_TOP, &x, &given)))
        return rc;
    if (given)
        n_probs = x;
    if (kind == OAI_CHAT) {
        bool lp = false, lp_given;
        if ((rc = get_bool(&P, "logprobs", &lp, &lp_given)))
            return rc;
        long long top = 0;
        if ((rc = get_int(&P, "top_logprobs", 0, OAI_MAX_TOP, &top, &given)))
            return rc;
        if (given && !lp)
            return bad(&P, "top_logprobs", "'%s' requires 'logprobs': true", NULL);
        if (lp) {
            rq->logprobs = true;
            rq->gen.logprobs = (int32_t)(given ? top : n_probs >= 0 ? n_probs : OAI_MAX_TOP);
        }
    } else {
        json_t *lpv = field(&P, "logprobs");
        if (lpv && json_is_boolean(lpv)) {
            if (json_is_true(lpv)) {
                rq->logprobs = true;
                rq->gen.logprobs = (int32_t)(n_probs >= 0 ? n_probs : 0);
            }
        } else {
            if ((rc = get_int(&P, "logprobs", 0, OAI_MAX_TOP, &x, &given)))
                return rc;
            if (given || n_probs >= 0) {
                rq->logprobs = true;
                rq->gen.logprobs = (int32_t)(n_probs >= 0 ? n_probs : x);
            }
        }
    }
    if ((rc = parse_stop(&P, rq)))
        return rc;
    rq->gen.stop = rq->stop;
    if ((rc = parse_bias(&P, rq)))
        return rc;
    rq->gen.logit_bias = rq->bias;

    json_t *rf = field(&P, "response_format");
    if (rf && (rc = parse_response_format(&P, rf, rq)))
        return rc;
    rq->gen.json_schema = rq->json_schema;
    /* one grammar a reply: a call the tool choice forces, or the response format's */
    if (rq->json_schema && rq->gen.tool_required)
        return bad(&P, "response_format", "'%s' cannot be combined with tool_choice \"required\" or a function",
                   NULL);
    rq->think = kind == OAI_CHAT;
    json_t *rfmt = field(&P, "reasoning_format");
    if (rfmt && !json_is_string(rfmt))
        return bad(&P, "reasoning_format", "'%s' must be a string", NULL);
    if (rfmt && !strcmp(json_string_value(rfmt), "none"))
        rq->think = false;
    json_t *user = field(&P, "user");
    if (user && !json_is_string(user))
        return bad(&P, "user", "'%s' must be a string", NULL);
    rq->gen.model = rq->model;
    return 0;
}

void oai_request_free(struct oai_request *rq)
{
    free(rq->model);
    free(rq->json_schema);
    json_decref(rq->messages);
    json_decref(rq->tools);
    json_decref(rq->template_vars);
    free(rq->prompt);
    free(rq->tokens);
    for (size_t i = 0; i < OAI_MAX_STOP; i++)
        free(rq->stop[i]);
    for (size_t i = 0; i < rq->gen.n_logit_bias; i++)
        free(rq->bias[i].text);
    free(rq->bias);
    memset(rq, 0, sizeof *rq);
}

/* ---------------------------------------------------------------- reasoning */

int oai_str_put(struct oai_str *s, const char *p, size_t n)
{
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (cap < s->n + n + 1)
            cap *= 2;
        char *np = realloc(s->p, cap);
        if (!np)
            return ERR_NOMEM;
        s->p = np;
        s->cap = cap;
    }
    memcpy(s->p + s->n, p, n);
    s->n += n;
    s->p[s->n] = 0;
    return 0;
}

/* Longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t partial_tag(const char *s, size_t n, const char *tag)
{
    size_t tl = strlen(tag);
    for (size_t k = tl - 1 < n ? tl - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, tag, k))
            return k;
    return 0;
}

static int put_content(struct oai_think *t, struct oai_str *content, const char *p, size_t n)
{
    if (t->strip_lead) {
        while (n && (*p == '\n' || *p == ' ' || *p == '\r' || *p == '\t')) {
            p++;
            n--;
        }
        if (n)
            t->strip_lead = false;
    }
    return n ? oai_str_put(content, p, n) : 0;
}

int oai_think_feed(struct oai_think *t, const char *text, bool flush, struct oai_str *reasoning, struct oai_str *content)
{
    static const char open_tag[] = "<think>", close_tag[] = "</think>";
    struct oai_str buf = {0};
    int rc = 0;
    /* work on held bytes + the new text */
    if (oai_str_put(&buf, t->hold, t->n_hold) || oai_str_put(&buf, text ? text : "", text ? strlen(text) : 0)) {
        free(buf.p);
        return ERR_NOMEM;
    }
    t->n_hold = 0;
    const char *p = buf.p;
    size_t n = buf.n;
    if (t->state == 0) {
        size_t k = n < sizeof open_tag - 1 ? n : sizeof open_tag - 1;
        if (!memcmp(p, open_tag, k) && k < sizeof open_tag - 1 && !flush) {
            memcpy(t->hold, p, n); /* still a possible "<think>" */
            t->n_hold = n;
            free(buf.p);
            return 0;
        }
        if (n >= sizeof open_tag - 1 && !memcmp(p, open_tag, sizeof open_tag - 1)) {
            t->state = 1;
            p += sizeof open_tag - 1;
            n -= sizeof open_tag - 1;
            while (n && *p == '\n') { /* the newline after <think> is layout */
                p++;
                n--;
            }
        } else {
            t->state = 2;
        }
    }
    if (t->state == 1) {
        const char *end = memmem(p, n, close_tag, sizeof close_tag - 1);
        if (end) {
            size_t rl = (size_t)(end - p);
            while (rl && p[rl - 1] == '\n')
                rl--;
            rc = rl ? oai_str_put(reasoning, p, rl) : 0;
            n -= (size_t)(end - p) + sizeof close_tag - 1;
            p = end + sizeof close_tag - 1;
            t->state = 2;
            t->strip_lead = true;
        } else {
            size_t keep = flush ? 0 : partial_tag(p, n, close_tag);
            /* trailing newlines may precede </think>: hold them too */
            while (!flush && keep < n && keep < sizeof t->hold - 1 && p[n - keep - 1] == '\n')
                keep++;
            if (keep >= sizeof t->hold)
                keep = sizeof t->hold - 1;
            rc = oai_str_put(reasoning, p, n - keep);
            memcpy(t->hold, p + n - keep, keep);
            t->n_hold = keep;
            n = 0;
        }
    }
    if (!rc && t->state == 2 && n)
        rc = put_content(t, content, p, n);
    free(buf.p);
    return rc;
}

/* ---------------------------------------------------------------- responses */

static json_t *bytes_of(const char *s)
{
    json_t *a = json_array();
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++)
        json_array_append_new(a, json_integer(*p));
    return a;
}

/* json_string needs valid UTF-8; token pieces of byte tokens may not be */
static json_t *safe_string(const char *s)
{
    if (!s)
        return json_string("");
    json_t *v = json_string(s);
    if (v)
        return v;
    size_t n = strlen(s), o = 0;
    char *t = malloc(n * 3 + 1);
    if (!t)
        return json_string("");
    for (size_t i = 0; i < n;) {
        size_t badat;
        if (oai_utf8_valid(s + i, n - i, &badat)) {
            memcpy(t + o, s + i, n - i);
            o += n - i;
            break;
        }
        memcpy(t + o, s + i, badat);
        o += badat;
        i += badat + 1;
        memcpy(t + o, "\xef\xbf\xbd", 3); /* U+FFFD */
        o += 3;
    }
    v = json_stringn(t, o);
    free(t);
    return v ? v : json_string("");
}

json_t *oai_logprob_entry(const struct gw_event *ev, int n_top)
{
    json_t *top = json_array();
    for (size_t i = 0; i < ev->n_top && (int)i < n_top; i++)
        json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", safe_string(ev->top[i].text), "logprob",
                                             (double)ev->top[i].logprob, "bytes", bytes_of(ev->top[i].text)));
    return json_pack("{s:i, s:o, s:f, s:o, s:o}", "id", ev->token, "token", safe_string(ev->text), "logprob",
                     ev->has_logprob ? (double)ev->logprob : 0.0, "bytes", bytes_of(ev->text), "top_logprobs", top);
}

static json_t *completion_logprobs_new(void)
{
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

/* legacy completions logprobs: parallel arrays */
static void completion_logprobs_add(json_t *lp, const struct gw_event *ev, size_t offset, int n_top)
{
    json_array_append_new(json_object_get(lp, "tokens"), safe_string(ev->text));
    json_array_append_new(json_object_get(lp, "token_logprobs"), json_real(ev->has_logprob ? ev->logprob : 0));
    json_t *top = json_object();
    for (size_t i = 0; i < ev->n_top && (int)i < n_top; i++) {
        json_t *k = safe_string(ev->top[i].text);
        json_object_set_new(top, json_string_value(k), json_real(ev->top[i].logprob));
        json_decref(k);
    }
    json_array_append_new(json_object_get(lp, "top_logprobs"), top);
    json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)offset));
}

int oai_choice_add(int kind, struct oai_choice *c, const struct gw_event *ev, bool logprobs)
{
    if (ev->kind == GW_EV_DONE) {
        c->done = true;
        c->finish = ev->finish && !strcmp(ev->finish, "length") ? "length" : "stop";
        c->n_gen = ev->n_gen;
        return 0;
    }
    if (ev->kind != GW_EV_TOKEN)
        return 0;
    size_t tl = ev->text ? strlen(ev->text) : 0, offset = c->len;
    if (c->len + tl + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 256;
        while (cap < c->len + tl + 1)
            cap *= 2;
        char *p = realloc(c->text, cap);
        if (!p)
            return ERR_NOMEM;
        c->text = p;
        c->cap = cap;
    }
    memcpy(c->text + c->len, ev->text ? ev->text : "", tl);
    c->len += tl;
    c->text[c->len] = 0;
    if (logprobs && ev->token >= 0) {
        if (!c->logprobs)
            c->logprobs = kind == OAI_CHAT ? json_array() : completion_logprobs_new();
        if (kind == OAI_CHAT)
            json_array_append_new(c->logprobs, oai_logprob_entry(ev, OAI_MAX_TOP + 12));
        else
            completion_logprobs_add(c->logprobs, ev, offset, OAI_MAX_TOP + 12);
    }
    return 0;
}

void oai_choice_free(struct oai_choice *c)
{
    free(c->text);
    json_decref(c->logprobs);
    memset(c, 0, sizeof *c);
}

static json_t *usage_obj(int32_t p, int32_t g)
{
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", p, "completion_tokens", g, "total_tokens", p + g);
}

static json_t *tool_call_obj(const struct tc_call *c)
{
    return json_pack("{s:s, s:s, s:{s:o, s:o}}", "id", c->id, "type", "function", "function", "name",
                     safe_string(c->name), "arguments", safe_string(c->args));
}

/* The tool calls in a whole reply's content: NULL when none (*content
 * untouched); else the tool_calls array, and *content replaced by what is
 * left of the text (null when nothing is). */
static json_t *tool_calls_of(const struct oai_tools *t, const char *text, json_t **content)
{
    struct tc_parser p;
    char *rest = NULL;
    json_t *calls = NULL;
    if (!tc_parse_all(&p, t->family, t->tools, t->max_calls, 0, text ? text : "", &rest) && p.n_calls) {
        calls = json_array();
        for (size_t k = 0; calls && k < p.n_calls; k++)
            json_array_append_new(calls, tool_call_obj(&p.calls[k]));
        json_decref(*content);
        *content = *rest ? safe_string(rest) : json_null();
    }
    free(rest);
    tc_parser_free(&p);
    return calls;
}

char *oai_response_body(int kind, const struct oai_meta *m, struct oai_choice *choices, int n, int32_t n_prompt,
                        bool think)
{
    json_t *arr = json_array();
    int32_t gen = 0;
    for (int i = 0; i < n; i++) {
        struct oai_choice *c = &choices[i];
        json_t *text = safe_string(c->text ? c->text : "");
        json_t *lp = c->logprobs ? (kind == OAI_CHAT ? json_pack("{s:O}", "content", c->logprobs) : json_incref(c->logprobs))
                                 : json_null();
        json_t *ch;
        if (kind == OAI_CHAT) {
            json_t *msg = json_pack("{s:s}", "role", "assistant");
            struct oai_think t = {0};
            struct oai_str rs = {0}, cs = {0};
            if (think && !oai_think_feed(&t, c->text ? c->text : "", true, &rs, &cs)) {
                json_decref(text);
                text = safe_string(cs.p ? cs.p : "");
                if (rs.n)
                    json_object_set_new(msg, "reasoning_content", safe_string(rs.p));
            }
            free(rs.p);
            free(cs.p);
            const char *finish = c->finish ? c->finish : "stop";
            if (m->tools && m->tools->family) {
                json_t *calls = tool_calls_of(m->tools, json_string_value(text), &text);
                if (calls) {
                    json_object_set_new(msg, "tool_calls", calls);
                    if (!strcmp(finish, "stop"))
                        finish = "tool_calls";
                }
            }
            json_object_set_new(msg, "content", text);
            ch = json_pack("{s:i, s:o, s:o, s:s}", "index", i, "message", msg, "logprobs", lp, "finish_reason", finish);
        } else {
            ch = json_pack("{s:i, s:o, s:o, s:s}", "index", i, "text", text, "logprobs", lp, "finish_reason",
                           c->finish ? c->finish : "stop");
        }
        json_array_append_new(arr, ch);
        gen += c->n_gen;
    }
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o}", "id", m->id, "object",
                          kind == OAI_CHAT ? "chat.completion" : "text_completion", "created", (json_int_t)m->created,
                          "model", m->model, "system_fingerprint", "llm170", "choices", arr, "usage",
                          usage_obj(n_prompt, gen));
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static int sse_append(json_t *o, char **buf, size_t *len)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s)
        return ERR_NOMEM;
    size_t sl = strlen(s);
    char *nb = realloc(*buf, *len + sl + 9);
    if (!nb) {
        free(s);
        return ERR_NOMEM;
    }
    memcpy(nb + *len, "data: ", 6);
    memcpy(nb + *len + 6, s, sl);
    memcpy(nb + *len + 6 + sl, "\n\n", 3);
    *len += sl + 8;
    *buf = nb;
    free(s);
    return 0;
}

static json_t *chunk_obj(int kind, const struct oai_meta *m, json_t *choice, bool usage_null)
{
    json_t *choices = json_array();
    if (choice)
        json_array_append_new(choices, choice);
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o}", "id", m->id, "object",
                          kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)m->created, "model", m->model, "system_fingerprint", "llm170", "choices", choices);
    if (o && usage_null)
        json_object_set_new(o, "usage", json_null());
    return o;
}

int oai_sse_role(int kind, const struct oai_meta *m, int index, bool usage_null, char **buf, size_t *len)
{
    if (kind != OAI_CHAT)
        return 0;
    json_t *ch = json_pack("{s:i, s:{s:s, s:s}, s:n, s:n}", "index", index, "delta", "role", "assistant", "content", "",
                           "logprobs", "finish_reason");
    return sse_append(chunk_obj(kind, m, ch, usage_null), buf, len);
}

/* A JSON string (quoted, escaped as jansson's compact dump does) into out,
 * which has room for 6 bytes per input byte + 2. */
static size_t json_quote(char *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    out[o++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c >= 0x20) {
            out[o++] = (char)c;
        } else {
            out[o++] = '\\';
            switch (c) {
            case '\b': out[o++] = 'b'; break;
            case '\f': out[o++] = 'f'; break;
            case '\n': out[o++] = 'n'; break;
            case '\r': out[o++] = 'r'; break;
            case '\t': out[o++] = 't'; break;
            default:
                memcpy(out + o, "u00", 3);
                out[o + 3] = hex[c >> 4];
                out[o + 4] = hex[c & 15];
                o += 5;
            }
        }
    }
    out[o++] = '"';
    return o;
}

/* The common stream chunk (text only, no logprobs) formatted directly: the
 * same bytes as the jansson path, without building and freeing a JSON tree
 * per token (that was most of the gateway's CPU per token). Returns 1 when
 * the text is not valid UTF-8 (the caller takes the general path). */
static int sse_token_fast(int kind, const struct oai_meta *m, int index, const char *content, const char *reasoning,
                          bool usage_null, char **buf, size_t *len)
{
    size_t nc = strlen(content), nr = reasoning ? strlen(reasoning) : 0, bad;
    if (!oai_utf8_valid(content, nc, &bad) || (nr && !oai_utf8_valid(reasoning, nr, &bad)))
        return 1;
    size_t ni = strlen(m->id), nm = strlen(m->model);
    size_t cap = 256 + 6 * (nc + nr + ni + nm);
    char *nb = realloc(*buf, *len + cap);
    if (!nb)
        return ERR_NOMEM;
    *buf = nb;
    char *o = nb + *len, *o0 = o;
    memcpy(o, "data: {\"id\":", 12);
    o += 12;
    o += json_quote(o, m->id, ni);
    o += sprintf(o, ",\"object\":\"%s\",\"created\":%lld,\"model\":",
                 kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion", m->created);
    o += json_quote(o, m->model, nm);
    o += sprintf(o, ",\"system_fingerprint\":\"llm170\",\"choices\":[{\"index\":%d,", index);
    if (kind == OAI_CHAT) {
        memcpy(o, "\"delta\":{", 9);
        o += 9;
        if (nr) {
            memcpy(o, "\"reasoning_content\":", 20);
            o += 20;
            o += json_quote(o, reasoning, nr);
        }
        if (nc || !nr) {
            if (nr)
                *o++ = ',';
            memcpy(o, "\"content\":", 10);
            o += 10;
            o += json_quote(o, content, nc);
        }
        *o++ = '}';
    } else {
        memcpy(o, "\"text\":", 7);
        o += 7;
        o += json_quote(o, content, nc);
    }
    static const char tail[] = ",\"logprobs\":null,\"finish_reason\":null}]";
    memcpy(o, tail, sizeof tail - 1);
    o += sizeof tail - 1;
    if (usage_null) {
        memcpy(o, ",\"usage\":null", 13);
        o += 13;
    }
    memcpy(o, "}\n\n", 3);
    o += 3;
    *len += (size_t)(o - o0);
    return 0;
}

int oai_sse_token(int kind, const struct oai_meta *m, int index, const char *content, const char *reasoning,
                  const struct gw_event *ev, bool logprobs, int n_top, bool usage_null, char **buf, size_t *len)
{
    if (!content)
        content = ev && ev->text ? ev->text : "";
    bool with_lp = ev && logprobs && ev->token >= 0;
    if (!*content && !(reasoning && *reasoning) && !with_lp)
        return 0; /* nothing to tell the client yet (text held back) */
    if (!with_lp) {
        int rc = sse_token_fast(kind, m, index, content, reasoning, usage_null, buf, len);
        if (rc <= 0)
            return rc;
    }
    json_t *lp = json_null();
    if (with_lp) {
        json_decref(lp);
        if (kind == OAI_CHAT) {
            lp = json_pack("{s:[o]}", "content", oai_logprob_entry(ev, n_top));
        } else {
            lp = completion_logprobs_new();
            completion_logprobs_add(lp, ev, 0, n_top);
        }
    }
    json_t *ch;
    if (kind == OAI_CHAT) {
        json_t *delta = json_object();
        if (reasoning && *reasoning)
            json_object_set_new(delta, "reasoning_content", safe_string(reasoning));
        if (*content || !(reasoning && *reasoning))
            json_object_set_new(delta, "content", safe_string(content));
        ch = json_pack("{s:i, s:o, s:o, s:n}", "index", index, "delta", delta, "logprobs", lp, "finish_reason");
    } else {
        ch = json_pack("{s:i, s:o, s:o, s:n}", "index", index, "text", safe_string(content), "logprobs", lp,
                       "finish_reason");
    }
    return sse_append(chunk_obj(kind, m, ch, usage_null), buf, len);
}

int oai_sse_tool_calls(const struct oai_meta *m, int index, const struct tc_call *calls, size_t n, size_t first,
                       bool usage_null, char **buf, size_t *len)
{
    int rc = 0;
    for (size_t k = 0; !rc && k < n; k++) {
        const struct tc_call *c = &calls[k];
        json_t *head = json_pack("{s:i, s:{s:[{s:I, s:s, s:s, s:{s:o, s:s}}]}, s:n, s:n}", "index", index, "delta",
                                 "tool_calls", "index", (json_int_t)(first + k), "id", c->id, "type", "function",
                                 "function", "name", safe_string(c->name), "arguments", "", "logprobs",
                                 "finish_reason");
        rc = sse_append(chunk_obj(OAI_CHAT, m, head, usage_null), buf, len);
        if (rc || !*c->args)
            continue;
        json_t *args = json_pack("{s:i, s:{s:[{s:I, s:{s:o}}]}, s:n, s:n}", "index", index, "delta", "tool_calls",
                                 "index", (json_int_t)(first + k), "function", "arguments", safe_string(c->args),
                                 "logprobs", "finish_reason");
        rc = sse_append(chunk_obj(OAI_CHAT, m, args, usage_null), buf, len);
    }
    return rc;
}

int oai_sse_finish(int kind, const struct oai_meta *m, int index, const char *finish, bool usage_null, char **buf,
                   size_t *len)
{
    json_t *ch = kind == OAI_CHAT
                     ? json_pack("{s:i, s:{}, s:n, s:s}", "index", index, "delta", "logprobs", "finish_reason", finish)
                     : json_pack("{s:i, s:s, s:n, s:s}", "index", index, "text", "", "logprobs", "finish_reason", finish);
    return sse_append(chunk_obj(kind, m, ch, usage_null), buf, len);
}

int oai_sse_usage(int kind, const struct oai_meta *m, int32_t n_prompt, int32_t n_gen, char **buf, size_t *len)
{
    json_t *o = chunk_obj(kind, m, NULL, false);
    if (o)
        json_object_set_new(o, "usage", usage_obj(n_prompt, n_gen));
    return sse_append(o, buf, len);
}

int oai_sse_error(int status, int code, const char *msg, char **buf, size_t *len)
{
    char *s = oai_error_body(status, code, msg, NULL);
    json_t *o = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    return sse_append(o, buf, len);
}

int oai_sse_done(char **buf, size_t *len)
{
    static const char done[] = "data: [DONE]\n\n";
    char *nb = realloc(*buf, *len + sizeof done);
    if (!nb)
        return ERR_NOMEM;
    memcpy(nb + *len, done, sizeof done);
    *len += sizeof done - 1;
    *buf = nb;
    return 0;
}
