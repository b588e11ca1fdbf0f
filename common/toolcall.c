/* toolcall.c — tool calls out of generated text, tool_choice (toolcall.h). */
#include "toolcall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* A call's JSON larger than this is not waited for: it is content. */
#define TC_MAX_CALL_BYTES (1u << 20)

/* ---------------------------------------------------------------- families */

int tc_family_from_template(const char *tmpl)
{
    if (!tmpl)
        return TC_NONE;
    if (strstr(tmpl, "<tool_call>"))
        return strstr(tmpl, "<function=") ? TC_QWEN_XML : TC_HERMES;
    if (strstr(tmpl, "[TOOL_CALLS]"))
        return TC_MISTRAL;
    /* Llama 3.1+: the ipython role / python tag; 3.2's template lacks the tag
     * but still asks for {"name": …, "parameters": …} with its header tokens */
    if (strstr(tmpl, "<|python_tag|>") || (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "\"parameters\"")))
        return TC_LLAMA3;
    return TC_NONE;
}

const char *tc_family_name(int family)
{
    switch (family) {
    case TC_HERMES: return "hermes";
    case TC_LLAMA3: return "llama3";
    case TC_MISTRAL: return "mistral";
    case TC_AUTO: return "auto";
    case TC_QWEN_XML: return "qwen-xml";
    default: return "none";
    }
}

/* ---------------------------------------------------------------- buffers */

int tc_buf_put(struct tc_buf *b, const char *p, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np)
            return ERR_NOMEM;
        b->p = np;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

void tc_buf_free(struct tc_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---------------------------------------------------------------- tool_choice */

static json_t *find_tool(json_t *tools, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (n && !strcmp(n, name))
            return t;
    }
    return NULL;
}

int tc_choice_parse(json_t *tool_choice, json_t *parallel, json_t *tools, struct tc_choice *out,
                    const char **param, struct err *e)
{
    memset(out, 0, sizeof *out);
    out->mode = TC_CHOICE_AUTO;
    out->parallel = true;
    *param = "";
    bool have_tools = json_is_array(tools) && json_array_size(tools);
    if (parallel && !json_is_null(parallel)) {
        if (!json_is_boolean(parallel)) {
            *param = "parallel_tool_calls";
            return err_set(e, ERR_INVALID, "'parallel_tool_calls' must be a boolean");
        }
        out->parallel = json_is_true(parallel);
    }
    if (!tool_choice || json_is_null(tool_choice))
        return 0;
    *param = "tool_choice";
    if (json_is_string(tool_choice)) {
        const char *s = json_string_value(tool_choice);
        if (!strcmp(s, "auto"))
            out->mode = TC_CHOICE_AUTO;
        else if (!strcmp(s, "none"))
            out->mode = TC_CHOICE_NONE;
        else if (!strcmp(s, "required"))
            out->mode = TC_CHOICE_REQUIRED;
        else
            return err_set(e, ERR_INVALID,
                           "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                           "\"function\": {\"name\": ...}}, not \"%.64s\"", s);
    } else if (json_is_object(tool_choice)) {
        const char *type = json_string_value(json_object_get(tool_choice, "type"));
        const char *name = json_string_value(json_object_get(json_object_get(tool_choice, "function"), "name"));
        if (!type || strcmp(type, "function") || !name || !*name)
            return err_set(e, ERR_INVALID,
                           "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
        if (strlen(name) >= sizeof out->name || !have_tools || !find_tool(tools, name))
            return err_set(e, ERR_INVALID, "'tool_choice' names the function '%.64s', which is not in 'tools'", name);
        out->mode = TC_CHOICE_NAMED;
        snprintf(out->name, sizeof out->name, "%s", name);
    } else {
        return err_set(e, ERR_INVALID, "'tool_choice' must be a string or an object");
    }
    if (out->mode == TC_CHOICE_REQUIRED && !have_tools)
        return err_set(e, ERR_INVALID, "'tool_choice' \"required\" needs a non-empty 'tools'");
    *param = "";
    return 0;
}

static json_t *one_call_schema(json_t *tool)
{
    json_t *fn = json_object_get(tool, "function");
    json_t *params = json_object_get(fn, "parameters");
    return json_pack("{s:s, s:{s:{s:O}, s:O}, s:[s,s]}", "type", "object", "properties", "name", "const",
                     json_object_get(fn, "name"), "arguments",
                     json_is_object(params) ? params : json_pack("{s:s}", "type", "object"), "required", "name",
                     "arguments");
}

json_t *tc_call_schema(json_t *tools, const struct tc_choice *c)
{
    if (c->mode == TC_CHOICE_NAMED) {
        json_t *t = find_tool(tools, c->name);
        return t ? one_call_schema(t) : NULL;
    }
    if (c->mode != TC_CHOICE_REQUIRED || !json_array_size(tools))
        return NULL;
    if (json_array_size(tools) == 1)
        return one_call_schema(json_array_get(tools, 0));
    json_t *any = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
        json_array_append_new(any, one_call_schema(t));
    return json_pack("{s:o}", "anyOf", any);
}

void tc_call_frame(int family, const char **open, const char **close)
{
    switch (family) {
    case TC_HERMES: *open = "<tool_call>\n"; *close = "\n</tool_call>"; break;
    case TC_MISTRAL: *open = "[TOOL_CALLS] ["; *close = "]"; break;
    default: *open = ""; *close = ""; break;
    }
}

char *tc_prefill(int family, const char *name)
{
    if (family == TC_QWEN_XML) {
        struct tc_buf b = {0};
        static const char open[] = "<tool_call>\n<function=";
        int rc = tc_buf_put(&b, open, sizeof open - 1);
        if (!rc && name)
            rc = tc_buf_put(&b, name, strlen(name)) || tc_buf_put(&b, ">\n", 2);
        if (rc)
            tc_buf_free(&b);
        return b.p;
    }
    const char *open = family == TC_HERMES ? "<tool_call>\n{\"name\": "
                       : family == TC_LLAMA3 ? "{\"name\": "
                       : family == TC_MISTRAL ? "[TOOL_CALLS] [{\"name\": "
                                              : NULL;
    if (!open)
        return NULL;
    const char *args = family == TC_LLAMA3 ? ", \"parameters\": " : ", \"arguments\": ";
    json_t *js = name ? json_string(name) : NULL;
    char *q = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL; /* the name as a JSON string */
    json_decref(js);
    if (name && !q)
        return NULL;
    struct tc_buf b = {0};
    int rc = tc_buf_put(&b, open, strlen(open));
    if (!rc && q)
        rc = tc_buf_put(&b, q, strlen(q)) || tc_buf_put(&b, args, strlen(args));
    else if (!rc)
        rc = tc_buf_put(&b, "\"", 1);
    free(q);
    if (rc)
        tc_buf_free(&b);
    return b.p;
}

/* ---------------------------------------------------------------- parser */

enum { F_BARE = 0, F_HERMES, F_MISTRAL, F_PYTAG, F_COUNT };
static const char *const openers[F_COUNT] = {"", "<tool_call>", "[TOOL_CALLS]", "<|python_tag|>"};
static const char hermes_close[] = "</tool_call>";

static bool family_has(int family, int form)
{
    switch (family) {
    case TC_HERMES: case TC_QWEN_XML: return form == F_HERMES;
    case TC_LLAMA3: return form == F_PYTAG || form == F_BARE;
    case TC_MISTRAL: return form == F_MISTRAL || form == F_BARE;
    case TC_AUTO: return true;
    default: return false;
    }
}

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void tc_parser_init(struct tc_parser *p, int family, json_t *tools, int max_calls, uint64_t id_seed)
{
    memset(p, 0, sizeof *p);
    p->family = family;
    p->tools = tools;
    p->max_calls = max_calls;
    p->bare_ok = true;
    if (!id_seed && getrandom(&id_seed, sizeof id_seed, GRND_NONBLOCK) != (ssize_t)sizeof id_seed)
        id_seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)p;
    p->id_seed = id_seed ? id_seed : 1;
}

void tc_parser_free(struct tc_parser *p)
{
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].args);
    }
    free(p->calls);
    tc_buf_free(&p->hold);
    memset(p, 0, sizeof *p);
}

static void consume(struct tc_parser *p, size_t k)
{
    memmove(p->hold.p, p->hold.p + k, p->hold.n - k + 1);
    p->hold.n -= k;
}

/* Scan the call's JSON object/array (starting at hold offset `from`) on
 * from where the last feed stopped: its end offset once complete, else 0.
 * Only brackets and strings are tracked (jansson judges the rest); the state
 * is kept so a long call costs one pass, not one per token. */
static size_t json_scan(struct tc_parser *p, size_t from)
{
    if (p->scan_end)
        return p->scan_end;
    if (p->scan_at < from)
        p->scan_at = from;
    const char *s = p->hold.p;
    for (size_t i = p->scan_at; i < p->hold.n; i++) {
        char c = s[i];
        if (p->scan_str) {
            if (p->scan_esc)
                p->scan_esc = false;
            else if (c == '\\')
                p->scan_esc = true;
            else if (c == '"')
                p->scan_str = false;
        } else if (c == '"') {
            p->scan_str = true;
        } else if (c == '{' || c == '[') {
            p->scan_depth++;
        } else if ((c == '}' || c == ']') && --p->scan_depth == 0) {
            p->scan_at = i + 1;
            return p->scan_end = i + 1;
        }
    }
    p->scan_at = p->hold.n;
    return 0;
}

/* Enter a call whose opener (form) is at hold offset at. */
static void enter_call(struct tc_parser *p, int form, size_t at)
{
    p->state = 1;
    p->form = form;
    p->call_at = at;
    p->scan_at = p->scan_end = 0;
    p->scan_depth = 0;
    p->scan_str = p->scan_esc = false;
}

static bool name_known(json_t *tools, const char *name)
{
    return !tools || find_tool(tools, name) != NULL;
}

/* One {"name", "arguments"|"parameters"} object → name and arguments text
 * (malloc'ed); false when it is not a call. */
static bool call_of(json_t *o, bool bare, json_t *tools, char **name, char **args)
{
    const char *n = json_string_value(json_object_get(o, "name"));
    if (!json_is_object(o) || !n || !*n)
        return false;
    json_t *a = json_object_get(o, "arguments");
    if (!a)
        a = json_object_get(o, "parameters");
    if (bare && (!a || !name_known(tools, n)))
        return false; /* plain JSON the model was asked for is not a call */
    *name = strdup(n);
    if (!a)
        *args = strdup("{}");
    else if (json_is_string(a))
        *args = strdup(json_string_value(a)); /* already the arguments' text */
    else
        *args = json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
    return true;
}

static int add_call(struct tc_parser *p, char *name, char *args)
{
    if (!name || !args) {
        free(name);
        free(args);
        return ERR_NOMEM;
    }
    size_t seen = p->n_seen++;
    if (p->max_calls && p->n_calls >= (size_t)p->max_calls) {
        free(name); /* parallel_tool_calls false: one call only */
        free(args);
        return 0;
    }
    if (p->n_calls == p->cap_calls) {
        size_t cap = p->cap_calls ? p->cap_calls * 2 : 4;
        struct tc_call *nc = realloc(p->calls, cap * sizeof *nc);
        if (!nc) {
            free(name);
            free(args);
            return ERR_NOMEM;
        }
        p->calls = nc;
        p->cap_calls = cap;
    }
    struct tc_call *c = &p->calls[p->n_calls++];
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    memcpy(c->id, "call_", 5);
    uint64_t h = 0;
    for (int i = 0; i < 24; i++) {
        if (i % 8 == 0) /* 8 digits of base 62 use 48 of a hash's 64 bits */
            h = mix64(p->id_seed ^ mix64(seen * 3 + (uint64_t)i / 8));
        c->id[5 + i] = al[h % 62];
        h /= 62;
    }
    c->id[29] = 0;
    c->name = name;
    c->args = args;
    return 0;
}

/* The call text s[0..n) → calls; 1 added, 0 not a call, <0 error. */
static int decode_calls(struct tc_parser *p, const char *s, size_t n, bool bare)
{
    json_t *v = json_loadb(s, n, 0, NULL);
    if (!v)
        return 0;
    size_t k = json_is_array(v) ? json_array_size(v) : 1;
    char **names = calloc(k ? k : 1, sizeof *names), **args = calloc(k ? k : 1, sizeof *args);
    int rc = names && args && k ? 1 : names && args ? 0 : ERR_NOMEM;
    for (size_t i = 0; rc == 1 && i < k; i++)
        if (!call_of(json_is_array(v) ? json_array_get(v, i) : v, bare, p->tools, &names[i], &args[i]))
            rc = 0;
    for (size_t i = 0; i < k && names && args; i++) {
        if (rc == 1) {
            int r = add_call(p, names[i], args[i]);
            if (r)
                rc = r;
        } else {
            free(names[i]);
            free(args[i]);
        }
    }
    free(names);
    free(args);
    json_decref(v);
    return rc;
}

/* A <parameter=…> value as JSON: a string, unless the tool's schema says
 * the parameter is something else and the text parses as JSON. */
static json_t *xml_value(json_t *tool, const char *key, const char *v, size_t n)
{
    json_t *props = json_object_get(json_object_get(json_object_get(tool, "function"), "parameters"), "properties");
    const char *type = json_string_value(json_object_get(json_object_get(props, key), "type"));
    if (type && strcmp(type, "string")) {
        json_t *j = json_loadb(v, n, JSON_DECODE_ANY, NULL);
        if (j)
            return j;
    }
    return json_stringn(v, n);
}

/* One <function=NAME>…</function> (s[0..n), n ending after </function>) → a call. */
static int decode_xml(struct tc_parser *p, const char *s, size_t n)
{
    static const char fn[] = "<function=", par[] = "<parameter=", epar[] = "</parameter>", efn[] = "</function>";
    size_t i = sizeof fn - 1, k = i;
    while (k < n && s[k] != '>' && s[k] != '\n' && s[k] != '<')
        k++;
    if (k == i || k >= n || s[k] != '>')
        return 0;
    char *name = strndup(s + i, k - i);
    json_t *args = json_object();
    if (!name || !args) {
        free(name);
        json_decref(args);
        return ERR_NOMEM;
    }
    json_t *tool = p->tools ? find_tool(p->tools, name) : NULL;
    int rc = 0;
    for (i = k + 1;;) {
        while (i < n && is_ws(s[i]))
            i++;
        if (n - i >= sizeof efn - 1 && !memcmp(s + i, efn, sizeof efn - 1)) {
            rc = 1;
            break;
        }
        if (n - i < sizeof par - 1 || memcmp(s + i, par, sizeof par - 1))
            break;
        size_t ks = i + sizeof par - 1, ke = ks;
        while (ke < n && s[ke] != '>' && s[ke] != '\n')
            ke++;
        if (ke >= n || s[ke] != '>' || ke == ks)
            break;
        const char *end = memmem(s + ke + 1, n - ke - 1, epar, sizeof epar - 1);
        if (!end)
            break;
        size_t vs = ke + 1, ve = (size_t)(end - s);
        if (vs < ve && s[vs] == '\n') /* the newlines around a value are layout */
            vs++;
        if (ve > vs && s[ve - 1] == '\n')
            ve--;
        char key[256];
        if (ke - ks >= sizeof key)
            break;
        memcpy(key, s + ks, ke - ks);
        key[ke - ks] = 0;
        json_object_set_new(args, key, xml_value(tool, key, s + vs, ve - vs));
        i = (size_t)(end - s) + sizeof epar - 1;
    }
    if (rc == 1) {
        char *a = json_dumps(args, JSON_COMPACT);
        int r = add_call(p, name, a);
        name = NULL;
        if (r)
            rc = r;
    }
    free(name);
    json_decref(args);
    return rc;
}

/* Longest suffix of s[0..n) that is a proper prefix of one of the family's openers. */
static size_t partial_opener(int family, const char *s, size_t n)
{
    size_t best = 0;
    for (int f = 1; f < F_COUNT; f++) {
        if (!family_has(family, f))
            continue;
        size_t tl = strlen(openers[f]);
        for (size_t k = tl - 1 < n ? tl - 1 : n; k > best; k--)
            if (!memcmp(s + n - k, openers[f], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Text state: 1 when a call starts (state changed), 0 when the rest waits for more text. */
static int step_text(struct tc_parser *p, bool flush, struct tc_buf *content)
{
    const char *h = p->hold.p;
    size_t n = p->hold.n;
    if (!n)
        return 0;
    if (p->bare_ok && family_has(p->family, F_BARE)) {
        size_t i = 0;
        /* Llama 3 writes several calls as "{…}; {…}" */
        while (i < n && (is_ws(h[i]) || (h[i] == ';' && p->n_seen)))
            i++;
        if (i == n && !flush)
            return 0; /* only separators so far: the next call may follow */
        if (i == n && p->n_seen) {
            consume(p, n); /* separators after the last call are layout */
            return 0;
        }
        /* "[TOOL_CALLS]" starts with a bracket too: the marker wins */
        size_t ml = strlen(openers[F_MISTRAL]), m = n - i < ml ? n - i : ml;
        bool marker = family_has(p->family, F_MISTRAL) && i < n && !memcmp(h + i, openers[F_MISTRAL], m);
        if (marker && m < ml && !flush)
            return 0; /* not yet known */
        if (i < n && !marker && (h[i] == '{' || h[i] == '[')) {
            enter_call(p, F_BARE, i);
            return 1;
        }
        if (i < n)
            p->bare_ok = false;
    }
    size_t best = n;
    int form = 0;
    for (int f = 1; f < F_COUNT; f++) {
        if (!family_has(p->family, f))
            continue;
        const char *at = memmem(h, best, openers[f], strlen(openers[f]));
        if (at && (size_t)(at - h) < best) {
            best = (size_t)(at - h);
            form = f;
        }
    }
    if (form) {
        size_t ws = 0;
        while (ws < best && is_ws(h[best - ws - 1]))
            ws++;
        if (best - ws && tc_buf_put(content, h, best - ws))
            return ERR_NOMEM;
        if (best - ws)
            p->bare_ok = false;
        consume(p, best - ws);
        enter_call(p, form, ws);
        return 1;
    }
    /* no opener: hold a possible opener's start and the whitespace before it
     * (whitespace right before a call is dropped, so it is undecided too) */
    size_t keep = partial_opener(p->family, h, n);
    while (keep < n && is_ws(h[n - keep - 1]))
        keep++;
    size_t emit = n - keep;
    if (flush) {
        emit = n;
        if (p->n_seen) /* whitespace after the last call is layout */
            while (emit && is_ws(h[emit - 1]))
                emit--;
        keep = 0;
    }
    if (emit && tc_buf_put(content, h, emit))
        return ERR_NOMEM;
    consume(p, n - keep);
    return 0;
}

/* Inside a call: 1 when decided (state changed), 0 when it waits for more text. */
static int step_call(struct tc_parser *p, bool flush, struct tc_buf *content)
{
    const char *h = p->hold.p + p->call_at;
    size_t n = p->hold.n - p->call_at;
    size_t olen = strlen(openers[p->form]);
    size_t i = olen;
    while (i < n && is_ws(h[i]))
        i++;
    if (i == n) {
        if (!flush)
            return 0;
        goto malformed;
    }
    size_t end;
    p->xml = p->form == F_HERMES && h[i] == '<';
    if (p->xml) {
        /* <function=…> … </function> (Qwen3-Coder / Qwen3.5) */
        static const char fn[] = "<function=", efn[] = "</function>";
        size_t m = n - i < sizeof fn - 1 ? n - i : sizeof fn - 1;
        if (memcmp(h + i, fn, m))
            goto malformed;
        /* search on from where the last feed's search stopped (hold offsets) */
        size_t from = p->scan_at > p->call_at + i + sizeof efn ? p->scan_at - p->call_at - sizeof efn : i;
        const char *e = m == sizeof fn - 1 ? memmem(h + from, n - from, efn, sizeof efn - 1) : NULL;
        if (!e) {
            p->scan_at = p->hold.n;
            if (flush || n > TC_MAX_CALL_BYTES)
                goto malformed;
            return 0;
        }
        end = (size_t)(e - h) + sizeof efn - 1 - i;
    } else {
        if (!(h[i] == '{' || (h[i] == '[' && p->form != F_HERMES && p->form != F_PYTAG)))
            goto malformed;
        end = json_scan(p, p->call_at + i);
        if (end)
            end -= p->call_at + i; /* the JSON's length */
        if (!end) {
            if (flush || n > TC_MAX_CALL_BYTES)
                goto malformed;
            return 0;
        }
    }
    size_t j = i + end;
    if (p->form == F_HERMES) {
        size_t k = j, cl = sizeof hermes_close - 1;
        while (k < n && is_ws(h[k]))
            k++;
        size_t rem = n - k;
        if (rem < cl && !memcmp(h + k, hermes_close, rem) && !flush)
            return 0; /* the closing tag may still come */
        if (rem >= cl && !memcmp(h + k, hermes_close, cl))
            j = k + cl;
        /* else a call without its closing tag (cut by a stop string): still a call */
    }
    int rc = p->xml ? decode_xml(p, h + i, end) : decode_calls(p, h + i, end, p->form == F_BARE);
    if (rc < 0)
        return rc;
    if (rc == 0)
        goto malformed;
    consume(p, p->call_at + j);
    p->state = 0;
    p->bare_ok = true;
    return 1;
malformed:
    /* not a call: its opener (the bare form's bracket) and the whitespace
     * before it are content; the rest is read as text again */
    {
        size_t k = p->call_at + (olen ? olen : 1);
        if (tc_buf_put(content, p->hold.p, k))
            return ERR_NOMEM;
        consume(p, k);
        p->state = 0;
        p->bare_ok = false;
        return 1;
    }
}

int tc_feed(struct tc_parser *p, const char *text, size_t n, bool flush, struct tc_buf *content, size_t *first_new)
{
    *first_new = p->n_calls;
    if (p->family == TC_NONE)
        return n ? tc_buf_put(content, text, n) : 0;
    if (tc_buf_put(&p->hold, text ? text : "", n))
        return ERR_NOMEM;
    for (int guard = 0; guard < 1 << 20; guard++) {
        int r = p->state == 0 ? step_text(p, flush, content) : step_call(p, flush, content);
        if (r < 0)
            return r;
        if (r == 0)
            break;
    }
    return 0;
}

int tc_parse_all(struct tc_parser *p, int family, json_t *tools, int max_calls, uint64_t id_seed, const char *text,
                 char **content)
{
    tc_parser_init(p, family, tools, max_calls, id_seed);
    struct tc_buf c = {0};
    size_t first;
    int rc = tc_feed(p, text, text ? strlen(text) : 0, true, &c, &first);
    if (!rc && !c.p)
        rc = tc_buf_put(&c, "", 0);
    if (rc) {
        tc_buf_free(&c);
        *content = NULL;
        return rc;
    }
    *content = c.p;
    return 0;
}
