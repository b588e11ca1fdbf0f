/* proto.c — encode/decode of the llm170 message schema (proto.h). */
#include "proto.h"

#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- names */

static const char *const type_names[PT_COUNT] = {
    [PT_NONE] = "none", [PT_STATUS] = "status", [PT_STATUS_REPLY] = "status_reply",
    [PT_GENERATE] = "generate", [PT_ACCEPTED] = "accepted", [PT_NEXT] = "next",
    [PT_CHUNKS] = "chunks", [PT_CANCEL] = "cancel", [PT_OK] = "ok", [PT_ERROR] = "error",
    [PT_TOKENIZE] = "tokenize", [PT_TOKENS] = "tokens", [PT_DETOKENIZE] = "detokenize",
    [PT_TEXT] = "text", [PT_PING] = "ping", [PT_PONG] = "pong", [PT_READY] = "ready",
    [PT_SHUTDOWN] = "shutdown", [PT_POLL] = "poll",
};

const char *proto_type_name(int type)
{
    return type > PT_NONE && type < PT_COUNT ? type_names[type] : "none";
}

static const char *const errc_names[PE_COUNT] = {
    [PE_NONE] = "none", [PE_BAD_REQUEST] = "bad_request", [PE_NOT_FOUND] = "not_found",
    [PE_QUEUE_FULL] = "queue_full", [PE_UNAVAILABLE] = "unavailable", [PE_TOO_LONG] = "too_long",
    [PE_CANCELED] = "canceled", [PE_TIMEOUT] = "timeout", [PE_INTERNAL] = "internal",
    [PE_VERSION] = "version", [PE_FORBIDDEN] = "forbidden",
};

const char *proto_errc_name(int errc)
{
    return errc >= 0 && errc < PE_COUNT ? errc_names[errc] : "internal";
}

int proto_errc_parse(const char *name)
{
    for (int i = 1; i < PE_COUNT; i++)
        if (!strcmp(name, errc_names[i]))
            return i;
    return PE_INTERNAL;
}

int proto_errc_http(int errc)
{
    switch (errc) {
    case PE_NONE: return 200;
    case PE_BAD_REQUEST: case PE_TOO_LONG: case PE_VERSION: return 400;
    case PE_NOT_FOUND: return 404;
    case PE_QUEUE_FULL: return 429;
    case PE_FORBIDDEN: return 403;
    case PE_UNAVAILABLE: return 503;
    case PE_CANCELED: return 499;
    case PE_TIMEOUT: return 504;
    default: return 500;
    }
}

int proto_errc_to_err(int errc)
{
    switch (errc) {
    case PE_NONE: return ERR_OK;
    case PE_BAD_REQUEST: case PE_VERSION: return ERR_INVALID;
    case PE_TOO_LONG: return ERR_RANGE;
    case PE_NOT_FOUND: return ERR_NOTFOUND;
    case PE_QUEUE_FULL: return ERR_FULL;
    case PE_UNAVAILABLE: case PE_TIMEOUT: case PE_FORBIDDEN: return ERR_IO; /* the daemon is not there for us */
    case PE_CANCELED: return ERR_CANCELED;
    default: return ERR_INTERNAL;
    }
}

int proto_errc_from_err(int code)
{
    switch (code) {
    case ERR_OK: return PE_NONE;
    case ERR_INVALID: case ERR_FORMAT: case ERR_UNSUPPORTED: return PE_BAD_REQUEST;
    case ERR_RANGE: return PE_TOO_LONG;
    case ERR_NOTFOUND: return PE_NOT_FOUND;
    case ERR_FULL: return PE_QUEUE_FULL;
    case ERR_IO: return PE_UNAVAILABLE;
    case ERR_CANCELED: return PE_CANCELED;
    default: return PE_INTERNAL;
    }
}

static const char *const finish_names[] = {"", "stop", "length", "cancel", "error"};

const char *proto_finish_name(int f)
{
    return f >= 0 && f <= PF_ERROR ? finish_names[f] : "";
}

/* ---------------------------------------------------------------- init/free */

void proto_gen_init(struct proto_gen *g)
{
    memset(g, 0, sizeof *g);
    g->max_tokens = -1;
    g->temperature = 0.8f;
    g->top_k = 40;
    g->top_p = 0.95f;
    g->min_p = 0.05f;
    g->typical_p = 1.0f;
    g->repeat_penalty = 1.0f;
    g->repeat_last_n = 64;
    g->seed = 0xFFFFFFFFu;
    g->logprobs = -1;
    g->add_special = true;
    g->parse_special = true;
    g->cache_prompt = true;
}

void proto_msg_init(struct proto_msg *m, int type)
{
    memset(m, 0, sizeof *m);
    m->type = type;
    proto_gen_init(&m->gen);
    m->add_special = true;
    m->parse_special = true;
}

void proto_gen_free(struct proto_gen *g)
{
    free(g->model);
    free(g->prompt);
    free(g->tokens);
    json_decref(g->messages);
    json_decref(g->tools);
    json_decref(g->template_kwargs);
    free(g->tool_name);
    free(g->json_schema);
    for (size_t i = 0; i < g->n_stop; i++)
        free(g->stop[i]);
    free(g->stop);
    for (size_t i = 0; g->logit_bias && i < g->n_logit_bias; i++)
        free(g->logit_bias[i].text);
    free(g->logit_bias);
    proto_gen_init(g);
}

void proto_chunk_free(struct proto_chunk *c)
{
    free(c->text);
    for (size_t i = 0; i < c->n_top; i++)
        free(c->top[i].text);
    free(c->top);
    free(c->message);
    free(c->embd);
    memset(c, 0, sizeof *c);
}

void proto_chunks_free(struct proto_chunk *c, size_t n)
{
    if (!c)
        return;
    for (size_t i = 0; i < n; i++)
        proto_chunk_free(&c[i]);
    free(c);
}

void proto_worker_free(struct proto_worker *w)
{
    free(w->device);
    free(w->backend);
    free(w->state);
    free(w->model);
    free(w->model_path);
    memset(w, 0, sizeof *w);
}

void proto_status_free(struct proto_status *s)
{
    free(s->version);
    for (size_t i = 0; i < s->n_models; i++)
        free(s->models[i]);
    free(s->models);
    for (size_t i = 0; i < s->n_workers; i++)
        proto_worker_free(&s->workers[i]);
    free(s->workers);
    memset(s, 0, sizeof *s);
}

void proto_msg_free(struct proto_msg *m)
{
    int type = m->type;
    proto_gen_free(&m->gen);
    proto_chunks_free(m->chunks, m->n_chunks);
    free(m->acks);
    free(m->message);
    proto_status_free(&m->status);
    proto_worker_free(&m->worker);
    free(m->tokens);
    free(m->text);
    proto_msg_init(m, type);
}

void proto_error(struct proto_msg *m, uint64_t id, int errc, const char *message)
{
    proto_msg_init(m, PT_ERROR);
    m->id = id;
    m->errc = errc;
    m->message = (char *)message;
}

/* ---------------------------------------------------------------- copies */

static int dupstr(char **dst, const char *src, struct err *e)
{
    *dst = NULL;
    if (!src)
        return 0;
    if (!(*dst = strdup(src)))
        return err_set(e, ERR_NOMEM, "proto: out of memory");
    return 0;
}

static int dupmem(void **dst, const void *src, size_t n, size_t size, struct err *e)
{
    *dst = NULL;
    if (!src || !n)
        return 0;
    if (!(*dst = malloc(n * size)))
        return err_set(e, ERR_NOMEM, "proto: out of memory");
    memcpy(*dst, src, n * size);
    return 0;
}

int proto_chunk_copy(struct proto_chunk *d, const struct proto_chunk *s, struct err *e)
{
    *d = *s;
    d->text = d->message = NULL;
    d->top = NULL;
    d->n_top = 0;
    d->embd = NULL;
    d->n_embd = 0;
    if (dupstr(&d->text, s->text, e) || dupstr(&d->message, s->message, e))
        goto fail;
    if (s->n_embd) {
        if (!(d->embd = malloc(s->n_embd * sizeof *d->embd))) {
            err_set(e, ERR_NOMEM, "proto: out of memory");
            goto fail;
        }
        memcpy(d->embd, s->embd, s->n_embd * sizeof *d->embd);
        d->n_embd = s->n_embd;
    }
    if (s->n_top) {
        if (!(d->top = calloc(s->n_top, sizeof *d->top))) {
            err_set(e, ERR_NOMEM, "proto: out of memory");
            goto fail;
        }
        d->n_top = s->n_top;
        for (size_t i = 0; i < s->n_top; i++) {
            d->top[i] = s->top[i];
            d->top[i].text = NULL;
            if (dupstr(&d->top[i].text, s->top[i].text, e))
                goto fail;
        }
    }
    return 0;
fail:
    proto_chunk_free(d);
    return ERR_NOMEM;
}

int proto_gen_copy(struct proto_gen *d, const struct proto_gen *s, struct err *e)
{
    *d = *s;
    d->model = d->prompt = NULL;
    d->tool_name = d->json_schema = NULL;
    d->tokens = NULL;
    d->messages = d->tools = d->template_kwargs = NULL;
    d->stop = NULL;
    d->logit_bias = NULL;
    d->n_stop = 0;
    if (dupstr(&d->model, s->model, e) || dupstr(&d->prompt, s->prompt, e) || dupstr(&d->tool_name, s->tool_name, e) ||
        dupstr(&d->json_schema, s->json_schema, e) ||
        dupmem((void **)&d->tokens, s->tokens, s->n_tokens, sizeof *s->tokens, e) ||
        dupmem((void **)&d->logit_bias, s->logit_bias, s->n_logit_bias, sizeof *s->logit_bias, e))
        goto fail;
    if (!d->tokens)
        d->n_tokens = 0;
    if (!d->logit_bias)
        d->n_logit_bias = 0;
    for (size_t i = 0; i < d->n_logit_bias; i++)
        d->logit_bias[i].text = NULL;
    for (size_t i = 0; i < d->n_logit_bias; i++)
        if (dupstr(&d->logit_bias[i].text, s->logit_bias[i].text, e))
            goto fail;
    /* deep copies: a jansson value's reference count is not shared across threads */
    if ((s->messages && !(d->messages = json_deep_copy(s->messages))) ||
        (s->tools && !(d->tools = json_deep_copy(s->tools))) ||
        (s->template_kwargs && !(d->template_kwargs = json_deep_copy(s->template_kwargs))))
        goto nomem;
    if (s->n_stop) {
        if (!(d->stop = calloc(s->n_stop, sizeof *d->stop)))
            goto nomem;
        d->n_stop = s->n_stop;
        for (size_t i = 0; i < s->n_stop; i++)
            if (dupstr(&d->stop[i], s->stop[i], e))
                goto fail;
    }
    return 0;
nomem:
    err_set(e, ERR_NOMEM, "proto: out of memory");
fail:
    proto_gen_free(d);
    return ERR_NOMEM;
}

int proto_worker_copy(struct proto_worker *d, const struct proto_worker *s, struct err *e)
{
    *d = *s;
    d->device = d->backend = d->state = d->model = d->model_path = NULL;
    if (dupstr(&d->device, s->device, e) || dupstr(&d->backend, s->backend, e) ||
        dupstr(&d->state, s->state, e) || dupstr(&d->model, s->model, e) ||
        dupstr(&d->model_path, s->model_path, e)) {
        proto_worker_free(d);
        return ERR_NOMEM;
    }
    return 0;
}

/* ---------------------------------------------------------------- encode */

static void pk_str(msgpack_packer *pk, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s ? s : "", n);
}

static void pk_key(msgpack_packer *pk, const char *k) { pk_str(pk, k); }

/* A JSON value as the same msgpack structure: object → map, array → array, string → str, integer → int,
 * real → float64, true / false → bool, null → nil. */
static void pk_json(msgpack_packer *pk, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        msgpack_pack_map(pk, json_object_size(v));
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            pk_str(pk, k);
            pk_json(pk, x);
        }
        break;
    }
    case JSON_ARRAY:
        msgpack_pack_array(pk, json_array_size(v));
        for (size_t i = 0; i < json_array_size(v); i++)
            pk_json(pk, json_array_get(v, i));
        break;
    case JSON_STRING:
        msgpack_pack_str(pk, json_string_length(v));
        msgpack_pack_str_body(pk, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        msgpack_pack_int64(pk, (int64_t)json_integer_value(v));
        break;
    case JSON_REAL:
        msgpack_pack_double(pk, json_real_value(v));
        break;
    case JSON_TRUE:
        msgpack_pack_true(pk);
        break;
    case JSON_FALSE:
        msgpack_pack_false(pk);
        break;
    default:
        msgpack_pack_nil(pk);
    }
}

#define KV_STR(k, v) (pk_key(pk, k), pk_str(pk, v))
#define KV_INT(k, v) (pk_key(pk, k), msgpack_pack_int64(pk, (int64_t)(v)))
#define KV_UINT(k, v) (pk_key(pk, k), msgpack_pack_uint64(pk, (uint64_t)(v)))
#define KV_FLT(k, v) (pk_key(pk, k), msgpack_pack_float(pk, (float)(v)))
#define KV_BOOL(k, v) (pk_key(pk, k), (v) ? msgpack_pack_true(pk) : msgpack_pack_false(pk))

static void pk_tokens(msgpack_packer *pk, const int32_t *t, size_t n)
{
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_int32(pk, t[i]);
}

static void pk_gen(msgpack_packer *pk, const struct proto_gen *g)
{
    size_t n = 5; /* the booleans */
    n += !!g->model + !!g->prompt + !!g->tokens + !!g->messages + !!g->n_stop + 1 /* logprobs */ +
         !!g->n_logit_bias + !!g->tools + !!g->template_kwargs + !!g->group +
         !!g->json_schema;
    n += g->tool_required + !!g->tool_name + g->tool_single;
    n += 2 * (size_t)g->embed;
    n += (size_t)__builtin_popcount(g->set & 0x7ffu);
    msgpack_pack_map(pk, n);
    if (g->model)
        KV_STR("model", g->model);
    if (g->prompt)
        KV_STR("prompt", g->prompt);
    if (g->tokens) {
        pk_key(pk, "tokens");
        pk_tokens(pk, g->tokens, g->n_tokens);
    }
    if (g->messages) {
        pk_key(pk, "messages");
        pk_json(pk, g->messages);
    }
    if (g->tools) {
        pk_key(pk, "tools");
        pk_json(pk, g->tools);
    }
    if (g->template_kwargs) {
        pk_key(pk, "template_kwargs");
        pk_json(pk, g->template_kwargs);
    }
    if (g->tool_required)
        KV_BOOL("tool_required", true);
    if (g->tool_name)
        KV_STR("tool_name", g->tool_name);
    if (g->tool_single)
        KV_BOOL("tool_single", true);
    if (g->json_schema)
        KV_STR("json_schema", g->json_schema);
    if (g->set & PG_MAX_TOKENS) KV_INT("max_tokens", g->max_tokens);
#define KV_I32(m) KV_INT(#m, g->m)
#define KV_F32(m) KV_FLT(#m, g->m)
#define KV_SEED(m) KV_UINT(#m, g->m)
#define ENCODE(m, bit, kind, lo, hi, sm, sbit) if (g->set & (bit)) KV_##kind(m);
    PROTO_SAMPLING_FIELDS(ENCODE)
#undef ENCODE
#undef KV_I32
#undef KV_F32
#undef KV_SEED
    if (g->n_stop) {
        pk_key(pk, "stop");
        msgpack_pack_array(pk, g->n_stop);
        for (size_t i = 0; i < g->n_stop; i++)
            pk_str(pk, g->stop[i]);
    }
    KV_INT("logprobs", g->logprobs);
    if (g->n_logit_bias) {
        pk_key(pk, "logit_bias");
        msgpack_pack_array(pk, g->n_logit_bias);
        for (size_t i = 0; i < g->n_logit_bias; i++) {
            msgpack_pack_array(pk, 2);
            if (g->logit_bias[i].text)
                pk_str(pk, g->logit_bias[i].text);
            else
                msgpack_pack_int32(pk, g->logit_bias[i].token);
            msgpack_pack_float(pk, g->logit_bias[i].bias);
        }
    }
    KV_BOOL("ignore_eos", g->ignore_eos);
    KV_BOOL("add_special", g->add_special);
    KV_BOOL("parse_special", g->parse_special);
    KV_BOOL("special", g->special);
    KV_BOOL("cache_prompt", g->cache_prompt);
    if (g->group)
        KV_UINT("group", g->group);
    if (g->embed) {
        KV_BOOL("embed", true);
        KV_INT("pooling", g->pooling);
    }
}

static void pk_chunk_text(msgpack_packer *pk, const struct proto_chunk *c, const char *text, size_t n_text);

bool proto_sid_is_zero(const struct proto_sid *s)
{
    uint8_t any = 0;
    for (int i = 0; i < PROTO_SID_BYTES; i++)
        any |= s->b[i];
    return !any;
}

bool proto_sid_eq(const struct proto_sid *a, const struct proto_sid *b)
{
    return !memcmp(a->b, b->b, PROTO_SID_BYTES);
}

void proto_sid_hex(const struct proto_sid *s, char out[2 * PROTO_SID_BYTES + 1])
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < PROTO_SID_BYTES; i++) {
        out[2 * i] = hx[s->b[i] >> 4];
        out[2 * i + 1] = hx[s->b[i] & 15];
    }
    out[2 * PROTO_SID_BYTES] = 0;
}

int proto_sid_parse(const char *hex, struct proto_sid *s, struct err *e)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < 2 * PROTO_SID_BYTES; i++) {
        char c = hex[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0)
            return err_set(e, ERR_INVALID, "stream id '%.40s' is not %d hex digits", hex, 2 * PROTO_SID_BYTES);
        s->b[i / 2] = (uint8_t)(s->b[i / 2] << 4 | v);
    }
    if (hex[2 * PROTO_SID_BYTES])
        return err_set(e, ERR_INVALID, "stream id '%.40s' is not %d hex digits", hex, 2 * PROTO_SID_BYTES);
    return 0;
}

static void pk_sid(msgpack_packer *pk, const struct proto_sid *s)
{
    msgpack_pack_bin(pk, PROTO_SID_BYTES);
    msgpack_pack_bin_body(pk, s->b, PROTO_SID_BYTES);
}

static void pk_chunk(msgpack_packer *pk, const struct proto_chunk *c)
{
    pk_chunk_text(pk, c, c->text ? c->text : "", c->text ? strlen(c->text) : 0);
}

/* A chunk whose text is n_text bytes, not necessarily NUL-terminated. */
static void pk_chunk_text(msgpack_packer *pk, const struct proto_chunk *c, const char *text, size_t n_text)
{
    bool stream = !proto_sid_is_zero(&c->stream);
    /* a stream's first token also says the prompt's length (Anthropic's message_start carries it) */
    const bool first = !c->finish && c->n_gen == 1 && c->n_prompt > 0;
    size_t n = 3 + c->has_logprob + !!c->n_top + (stream || c->sid) + first;
    if (c->finish)
        n += 4 + (c->finish == PF_ERROR ? 2 : 0) + !!c->n_embd + !!c->stop_hit;
    msgpack_pack_map(pk, n);
    if (stream)
        (pk_key(pk, "s"), pk_sid(pk, &c->stream));
    else if (c->sid)
        KV_UINT("s", c->sid);
    KV_UINT("i", c->i);
    KV_INT("token", c->token);
    pk_key(pk, "text");
    msgpack_pack_str(pk, n_text);
    msgpack_pack_str_body(pk, text, n_text);
    if (c->has_logprob)
        KV_FLT("logprob", c->logprob);
    if (c->n_top) {
        pk_key(pk, "top");
        msgpack_pack_array(pk, c->n_top);
        for (size_t i = 0; i < c->n_top; i++) {
            msgpack_pack_array(pk, 3);
            msgpack_pack_int32(pk, c->top[i].token);
            msgpack_pack_float(pk, c->top[i].logprob);
            pk_str(pk, c->top[i].text);
        }
    }
    if (first)
        KV_INT("n_prompt", c->n_prompt);
    if (c->finish) {
        KV_STR("finish", proto_finish_name(c->finish));
        KV_INT("n_prompt", c->n_prompt);
        KV_INT("n_gen", c->n_gen);
        KV_INT("n_cached", c->n_cached);
        if (c->stop_hit)
            KV_INT("stop_hit", c->stop_hit);
        if (c->finish == PF_ERROR) {
            KV_STR("code", proto_errc_name(c->errc));
            KV_STR("message", c->message);
        }
        if (c->n_embd) { /* little-endian f32 whatever the host: exact, and 4 bytes a value */
            pk_key(pk, "emb");
            msgpack_pack_bin(pk, 4 * c->n_embd);
            unsigned char le[256];
            for (size_t i = 0; i < c->n_embd;) {
                size_t k = 0;
                for (; k < sizeof le / 4 && i < c->n_embd; k++, i++) {
                    uint32_t u;
                    memcpy(&u, &c->embd[i], 4);
                    for (int b = 0; b < 4; b++)
                        le[4 * k + (size_t)b] = (unsigned char)(u >> (8 * b));
                }
                msgpack_pack_bin_body(pk, le, 4 * k);
            }
        }
    }
}

static void pk_worker(msgpack_packer *pk, const struct proto_worker *w)
{
    msgpack_pack_map(pk, 14 + 14); /* the original fields, then the load split and the breakdown */
    KV_INT("idx", w->idx);
    KV_STR("device", w->device);
    KV_STR("backend", w->backend);
    KV_STR("state", w->state);
    KV_INT("pid", w->pid);
    KV_STR("model", w->model);
    KV_STR("model_path", w->model_path);
    KV_INT("restarts", w->restarts);
    KV_INT("slots", w->slots);
    KV_INT("active", w->active);
    KV_INT("queued", w->queued);
    KV_INT("n_ctx", w->n_ctx);
    KV_INT("n_vocab", w->n_vocab);
    KV_UINT("mem", w->mem);
    KV_UINT("load_ms", w->load_ms);
    KV_UINT("read_ms", w->read_ms);
    KV_UINT("compile_ms", w->compile_ms);
    KV_UINT("upload_ms", w->upload_ms);
    KV_UINT("alloc_ms", w->alloc_ms);
    KV_UINT("mem_weights", w->mem_weights);
    KV_UINT("mem_kv", w->mem_kv);
    KV_UINT("mem_state", w->mem_state);
    KV_UINT("mem_snap", w->mem_snap);
    KV_UINT("mem_scratch", w->mem_scratch);
    KV_UINT("state_per_slot", w->state_per_slot);
    KV_INT("n_snap", w->n_snap);
    KV_UINT("dev_used", w->dev_used);
    KV_UINT("dev_total", w->dev_total);
}

static void pk_status(msgpack_packer *pk, const struct proto_status *s)
{
    msgpack_pack_map(pk, 7);
    KV_BOOL("ready", s->ready);
    KV_STR("version", s->version);
    KV_UINT("uptime_s", s->uptime_s);
    KV_INT("active", s->active);
    KV_INT("queued", s->queued);
    pk_key(pk, "models");
    msgpack_pack_array(pk, s->n_models);
    for (size_t i = 0; i < s->n_models; i++)
        pk_str(pk, s->models[i]);
    pk_key(pk, "workers");
    msgpack_pack_array(pk, s->n_workers);
    for (size_t i = 0; i < s->n_workers; i++)
        pk_worker(pk, &s->workers[i]);
}

int proto_encode(const struct proto_msg *m, char **buf, size_t *len, struct err *e)
{
    if (m->type <= PT_NONE || m->type >= PT_COUNT)
        return err_set(e, ERR_INVALID, "proto: cannot encode message of type %d", m->type);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pkv, *pk = &pkv;
    msgpack_packer_init(pk, &sb, msgpack_sbuffer_write);

    size_t n = 3; /* v, t, id */
    switch (m->type) {
    case PT_GENERATE: n += 1; break;
    case PT_NEXT: n += 2; break;
    case PT_POLL: n += m->hold_ms > 0 ? 3 : 2; break;
    case PT_CHUNKS: n += 2; break;
    case PT_ERROR: n += 2; break;
    case PT_TOKENIZE: n += 4; break;
    case PT_DETOKENIZE: n += 2; break;
    case PT_TOKENS: n += 1; break;
    case PT_TEXT: n += 1; break;
    case PT_STATUS_REPLY: n += 1; break;
    case PT_READY: case PT_PONG: case PT_ACCEPTED: n += 1; break;
    default: break;
    }
    msgpack_pack_map(pk, n);
    KV_INT("v", PROTO_VERSION);
    KV_STR("t", proto_type_name(m->type));
    if (!proto_sid_is_zero(&m->stream))
        (pk_key(pk, "id"), pk_sid(pk, &m->stream));
    else
        KV_UINT("id", m->id);
    switch (m->type) {
    case PT_GENERATE:
        pk_key(pk, "gen");
        pk_gen(pk, &m->gen);
        break;
    case PT_NEXT:
        KV_UINT("from", m->from);
        KV_INT("wait_ms", m->wait_ms);
        break;
    case PT_POLL:
        pk_key(pk, "acks");
        msgpack_pack_array(pk, m->n_acks);
        for (size_t i = 0; i < m->n_acks; i++) {
            msgpack_pack_array(pk, 2);
            pk_sid(pk, &m->acks[i].stream);
            msgpack_pack_uint64(pk, m->acks[i].from);
        }
        KV_INT("wait_ms", m->wait_ms);
        if (m->hold_ms > 0) /* absent = 0: what a peer without it sends */
            KV_INT("hold_ms", m->hold_ms);
        break;
    case PT_CHUNKS:
        pk_key(pk, "chunks");
        msgpack_pack_array(pk, m->n_chunks);
        for (size_t i = 0; i < m->n_chunks; i++)
            pk_chunk(pk, &m->chunks[i]);
        KV_BOOL("done", m->done);
        break;
    case PT_ERROR:
        KV_STR("code", proto_errc_name(m->errc));
        KV_STR("message", m->message);
        break;
    case PT_TOKENIZE:
        KV_STR("model", m->gen.model);
        KV_STR("text", m->text);
        KV_BOOL("add_special", m->add_special);
        KV_BOOL("parse_special", m->parse_special);
        break;
    case PT_DETOKENIZE:
        KV_STR("model", m->gen.model);
        pk_key(pk, "tokens");
        pk_tokens(pk, m->tokens, m->n_tokens);
        break;
    case PT_TOKENS:
        pk_key(pk, "tokens");
        pk_tokens(pk, m->tokens, m->n_tokens);
        break;
    case PT_TEXT:
        KV_STR("text", m->text);
        break;
    case PT_STATUS_REPLY:
        pk_key(pk, "status");
        pk_status(pk, &m->status);
        break;
    case PT_READY: case PT_PONG: case PT_ACCEPTED:
        pk_key(pk, "worker");
        pk_worker(pk, &m->worker);
        break;
    default:
        break;
    }
    if (!sb.data) {
        msgpack_sbuffer_destroy(&sb);
        return err_set(e, ERR_NOMEM, "proto: out of memory encoding %s", proto_type_name(m->type));
    }
    *buf = sb.data;
    *len = sb.size;
    return 0;
}

/* ---------------------------------------------------------------- chunk buffer */

/* msgpack's sbuffer write, remembering a failure: the packer's helpers do
 * not all pass the writer's status on. */
static int cb_write(void *data, const char *buf, size_t len)
{
    struct proto_chunkbuf *b = data;
    if (b->oom || msgpack_sbuffer_write(&b->sb, buf, len)) {
        b->oom = true;
        return -1;
    }
    return 0;
}

void proto_chunkbuf_reset(struct proto_chunkbuf *b)
{
    msgpack_sbuffer_clear(&b->sb);
    b->n = 0;
    b->oom = false;
}

int proto_chunkbuf_add(struct proto_chunkbuf *b, const struct proto_chunk *c, size_t n_text, struct err *e)
{
    msgpack_packer pkv, *pk = &pkv;
    msgpack_packer_init(pk, b, cb_write);
    size_t len0 = b->sb.size;
    if (b->sb.size == 0 && !b->oom) { /* the message's head, as proto_encode writes it for id 0 */
        msgpack_pack_map(pk, 5);
        KV_INT("v", PROTO_VERSION);
        KV_STR("t", proto_type_name(PT_CHUNKS));
        KV_UINT("id", 0);
        pk_key(pk, "chunks");
        const char a32[5] = {(char)0xdd, 0, 0, 0, 0}; /* array 32, its length patched at the end */
        b->at_n = b->sb.size + 1; /* after the 0xdd marker */
        cb_write(b, a32, sizeof a32);
    }
    pk_chunk_text(pk, c, c->text ? c->text : "", c->text ? n_text : 0);
    if (b->oom) { /* back to the chunks before this one, which can still go out */
        b->sb.size = len0;
        b->oom = false;
        return err_set(e, ERR_NOMEM, "proto: out of memory encoding a chunk");
    }
    b->n++;
    return 0;
}

int proto_chunkbuf_end(struct proto_chunkbuf *b, const char **buf, size_t *len, struct err *e)
{
    if (!b->n || b->oom)
        return err_set(e, b->oom ? ERR_NOMEM : ERR_INVALID, "proto: %s chunks message",
                       b->oom ? "out of memory for the" : "no chunk in the");
    msgpack_packer pkv, *pk = &pkv;
    msgpack_packer_init(pk, b, cb_write);
    KV_BOOL("done", false);
    if (b->oom)
        return err_set(e, ERR_NOMEM, "proto: out of memory encoding a chunks message");
    uint8_t *p = (uint8_t *)b->sb.data + b->at_n; /* big-endian, as msgpack has it */
    p[0] = (uint8_t)(b->n >> 24);
    p[1] = (uint8_t)(b->n >> 16);
    p[2] = (uint8_t)(b->n >> 8);
    p[3] = (uint8_t)b->n;
    *buf = b->sb.data;
    *len = b->sb.size;
    return 0;
}

void proto_chunkbuf_free(struct proto_chunkbuf *b)
{
    msgpack_sbuffer_destroy(&b->sb);
    *b = (struct proto_chunkbuf){0};
}

/* ---------------------------------------------------------------- pre-check */

/* Walk the raw bytes once before msgpack-c sees them: every declared
 * container must fit in what is left of the buffer (each element takes at
 * least one byte), so a 5-byte message cannot make the unpacker reserve room
 * for four billion elements; nesting is bounded too. Returns the offset after
 * one object, or 0 on malformed input. */
static size_t scan(const uint8_t *p, size_t n, size_t off, int depth)
{
    if (depth > PROTO_WIRE_DEPTH || off >= n)
        return 0;
    uint8_t b = p[off++];
    uint64_t cnt = 0, len = 0;
    int kind = 0; /* 0 scalar/bytes, 1 array, 2 map */
#define NEED(k) do { if (n - off < (k)) return 0; } while (0)
#define BE(k) ({ uint64_t v_ = 0; NEED(k); for (int j_ = 0; j_ < (k); j_++) v_ = v_ << 8 | p[off + j_]; off += (k); v_; })
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return off;
    if ((b & 0xf0) == 0x80) { kind = 2; cnt = b & 0x0f; }
    else if ((b & 0xf0) == 0x90) { kind = 1; cnt = b & 0x0f; }
    else if ((b & 0xe0) == 0xa0) { len = b & 0x1f; }
    else switch (b) {
    case 0xc4: case 0xd9: len = BE(1); break;
    case 0xc5: case 0xda: len = BE(2); break;
    case 0xc6: case 0xdb: len = BE(4); break;
    case 0xc7: len = BE(1) + 1; break;
    case 0xc8: len = BE(2) + 1; break;
    case 0xc9: len = BE(4) + 1; break;
    case 0xca: len = 4; break;
    case 0xcb: len = 8; break;
    case 0xcc: case 0xd0: len = 1; break;
    case 0xcd: case 0xd1: len = 2; break;
    case 0xce: case 0xd2: len = 4; break;
    case 0xcf: case 0xd3: len = 8; break;
    case 0xd4: len = 2; break;
    case 0xd5: len = 3; break;
    case 0xd6: len = 5; break;
    case 0xd7: len = 9; break;
    case 0xd8: len = 17; break;
    case 0xdc: kind = 1; cnt = BE(2); break;
    case 0xdd: kind = 1; cnt = BE(4); break;
    case 0xde: kind = 2; cnt = BE(2); break;
    case 0xdf: kind = 2; cnt = BE(4); break;
    default: return 0; /* 0xc1 never used */
    }
#undef BE
    if (kind == 0) {
        NEED(len);
        return off + len;
    }
    uint64_t items = kind == 2 ? cnt * 2 : cnt;
    NEED(items);
#undef NEED
    for (uint64_t i = 0; i < items; i++)
        if (!(off = scan(p, n, off, depth + 1)))
            return 0;
    return off;
}

/* ---------------------------------------------------------------- decode */

struct rd {
    struct err *e;
    const char *where; /* "generate.gen" … for messages */
};

static const msgpack_object *get(const msgpack_object *map, const char *key)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == kl && !memcmp(k->via.str.ptr, key, kl))
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

static int bad(struct rd *r, const char *key, const char *what)
{
    return err_set(r->e, ERR_FORMAT, "proto: %s: key '%s' %s", r->where, key, what);
}

/* Integer in [lo, hi]; absent → *out untouched, returns 1 (0 when read). */
static int rd_int(struct rd *r, const msgpack_object *map, const char *key, int64_t lo, int64_t hi,
                  int64_t *out, bool required)
{
    const msgpack_object *o = get(map, key);
    if (!o || o->type == MSGPACK_OBJECT_NIL)
        return required ? bad(r, key, "is missing") : 1;
    int64_t v;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return bad(r, key, "is out of range");
        v = (int64_t)o->via.u64;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        v = o->via.i64;
    } else {
        return bad(r, key, "is not an integer");
    }
    if (v < lo || v > hi)
        return bad(r, key, "is out of range");
    *out = v;
    return 0;
}

/* An id: a 64-bit integer (daemon ↔ worker) into *out, or a 16-byte bin (a
 * client's stream id) into *sid. */
static int rd_id_obj(struct rd *r, const msgpack_object *o, const char *key, uint64_t *out, struct proto_sid *sid)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        *out = o->via.u64;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_BIN && o->via.bin.size == PROTO_SID_BYTES) {
        memcpy(sid->b, o->via.bin.ptr, PROTO_SID_BYTES);
        return 0;
    }
    return bad(r, key, "is neither a non-negative integer nor a 16-byte stream id");
}

static int rd_id(struct rd *r, const msgpack_object *map, const char *key, uint64_t *out, struct proto_sid *sid)
{
    const msgpack_object *o = get(map, key);
    if (!o || o->type == MSGPACK_OBJECT_NIL)
        return 1;
    return rd_id_obj(r, o, key, out, sid);
}

static int rd_u64(struct rd *r, const msgpack_object *map, const char *key, uint64_t *out, bool required)
{
    const msgpack_object *o = get(map, key);
    if (!o || o->type == MSGPACK_OBJECT_NIL)
        return required ? bad(r, key, "is missing") : 1;
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return bad(r, key, "is not a non-negative integer");
    *out = o->via.u64;
    return 0;
}

/* rd_int into an int32_t field; evaluates to 0 or a negative code. */
#define RD_I32(map, key, lo, hi, dst, req)                                   \
    ({                                                                       \
        int64_t v_ = 0;                                                      \
        int rc_ = rd_int(r, map, key, lo, hi, &v_, req);                     \
        if (rc_ == 0)                                                        \
            (dst) = (int32_t)v_;                                             \
        rc_ < 0 ? rc_ : 0;                                                   \
    })

static int rd_flt(struct rd *r, const msgpack_object *map, const char *key, float *out, bool *given)
{
    const msgpack_object *o = get(map, key);
    if (given)
        *given = false;
    if (!o || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    double v;
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32: case MSGPACK_OBJECT_FLOAT64: v = o->via.f64; break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: v = (double)o->via.u64; break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: v = (double)o->via.i64; break;
    default: return bad(r, key, "is not a number");
    }
    if (isnan(v))
        return bad(r, key, "is NaN");
    *out = (float)v;
    if (given)
        *given = true;
    return 0;
}

/* An optional integer in [lo, hi]: *given says whether it was there. */
static int rd_opt_int(struct rd *r, const msgpack_object *map, const char *key, int64_t lo, int64_t hi, int64_t *v,
                      bool *given)
{
    int rc = rd_int(r, map, key, lo, hi, v, false);
    if (rc < 0)
        return rc;
    *given = rc == 0;
    return 0;
}

static int rd_bool(struct rd *r, const msgpack_object *map, const char *key, bool *out)
{
    const msgpack_object *o = get(map, key);
    if (!o || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return bad(r, key, "is not a boolean");
    *out = o->via.boolean;
    return 0;
}

static int strobj(struct rd *r, const msgpack_object *o, const char *key, char **out)
{
    if (o->type != MSGPACK_OBJECT_STR && o->type != MSGPACK_OBJECT_BIN)
        return bad(r, key, "is not a string");
    uint32_t n = o->type == MSGPACK_OBJECT_STR ? o->via.str.size : o->via.bin.size;
    const char *p = o->type == MSGPACK_OBJECT_STR ? o->via.str.ptr : o->via.bin.ptr;
    if (memchr(p, 0, n))
        return bad(r, key, "holds a NUL byte");
    char *s = malloc((size_t)n + 1);
    if (!s)
        return err_set(r->e, ERR_NOMEM, "proto: out of memory");
    memcpy(s, p, n);
    s[n] = 0;
    *out = s;
    return 0;
}

/* msgpack → the JSON value of the same structure (pk_json's inverse): strings must be UTF-8, map keys
 * strings, nesting at most PROTO_MAX_DEPTH; floats stay reals, integers integers. */
static int json_of(struct rd *r, const msgpack_object *o, const char *key, int depth, json_t **out)
{
    *out = NULL;
    if ((o->type == MSGPACK_OBJECT_ARRAY || o->type == MSGPACK_OBJECT_MAP) && depth > PROTO_MAX_DEPTH)
        return bad(r, key, "is nested too deeply");
    json_t *v = NULL;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        v = json_null();
        break;
    case MSGPACK_OBJECT_BOOLEAN:
        v = json_boolean(o->via.boolean);
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 > (uint64_t)INT64_MAX) /* json_int_t is long long */
            return bad(r, key, "holds an integer out of range");
        v = json_integer((json_int_t)o->via.u64);
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        v = json_integer((json_int_t)o->via.i64);
        break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        if (!isfinite(o->via.f64))
            return bad(r, key, "holds a number that is not finite");
        v = json_real(o->via.f64);
        break;
    case MSGPACK_OBJECT_STR:
        if (!(v = json_stringn(o->via.str.ptr, o->via.str.size)))
            return bad(r, key, "holds a string that is not UTF-8");
        break;
    case MSGPACK_OBJECT_ARRAY:
        if (!(v = json_array()))
            break;
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            json_t *x;
            int rc = json_of(r, &o->via.array.ptr[i], key, depth + 1, &x);
            if (rc) {
                json_decref(v);
                return rc;
            }
            if (json_array_append_new(v, x)) {
                json_decref(v);
                return err_set(r->e, ERR_NOMEM, "proto: out of memory");
            }
        }
        break;
    case MSGPACK_OBJECT_MAP:
        if (!(v = json_object()))
            break;
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            if (k->type != MSGPACK_OBJECT_STR || memchr(k->via.str.ptr, 0, k->via.str.size)) {
                json_decref(v);
                return bad(r, key, "holds a map whose key is not a string");
            }
            json_t *x;
            int rc = json_of(r, &o->via.map.ptr[i].val, key, depth + 1, &x);
            if (rc) {
                json_decref(v);
                return rc;
            }
            if (json_object_setn_new(v, k->via.str.ptr, k->via.str.size, x)) {
                json_decref(v);
                return bad(r, key, "holds a map key that is not UTF-8");
            }
        }
        break;
    default:
        return bad(r, key, "holds a value JSON has no form for");
    }
    if (!v)
        return err_set(r->e, ERR_NOMEM, "proto: out of memory");
    *out = v;
    return 0;
}

/* An optional JSON value of type `want` (JSON_ARRAY / JSON_OBJECT) under key. */
static int rd_json(struct rd *r, const msgpack_object *map, const char *key, json_type want, json_t **out)
{
    const msgpack_object *o = get(map, key);
    if (!o || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if ((want == JSON_ARRAY && o->type != MSGPACK_OBJECT_ARRAY) || (want == JSON_OBJECT && o->type != MSGPACK_OBJECT_MAP))
        return bad(r, key, want == JSON_ARRAY ? "is not an array" : "is not a map");
    return json_of(r, o, key, 1, out);
}

int proto_json_depth(const json_t *v)
{
    int d = 0;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            int c = proto_json_depth(json_array_get(v, i));
            d = c > d ? c : d;
        }
        return d + 1;
    }
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            int c = proto_json_depth(x);
            d = c > d ? c : d;
        }
        return d + 1;
    }
    return 0;
}

static int rd_str(struct rd *r, const msgpack_object *map, const char *key, char **out, bool required)
{
    const msgpack_object *o = get(map, key);
    if (!o || o->type == MSGPACK_OBJECT_NIL)
        return required ? bad(r, key, "is missing") : 0;
    free(*out);
    *out = NULL;
    return strobj(r, o, key, out);
}

static int rd_tokens(struct rd *r, const msgpack_object *map, const char *key, int32_t **out, size_t *n,
                     bool required)
{
    const msgpack_object *o = get(map, key);
    if (!o || o->type == MSGPACK_OBJECT_NIL)
        return required ? bad(r, key, "is missing") : 0;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return bad(r, key, "is not an array");
    uint32_t cnt = o->via.array.size;
    if (cnt > PROTO_MAX_TOKENS)
        return bad(r, key, "has too many tokens");
    int32_t *t = malloc(((size_t)cnt + 1) * sizeof *t); /* +1: an empty array is still non-NULL */
    if (!t)
        return err_set(r->e, ERR_NOMEM, "proto: out of memory");
    for (uint32_t i = 0; i < cnt; i++) {
        const msgpack_object *x = &o->via.array.ptr[i];
        if (x->type == MSGPACK_OBJECT_POSITIVE_INTEGER && x->via.u64 <= INT32_MAX)
            t[i] = (int32_t)x->via.u64;
        else if (x->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && x->via.i64 >= INT32_MIN)
            t[i] = (int32_t)x->via.i64;
        else {
            free(t);
            return bad(r, key, "holds a non-int32 element");
        }
    }
    free(*out);
    *out = t;
    *n = cnt;
    return 0;
}

static int rd_gen(struct rd *r, const msgpack_object *o, struct proto_gen *g)
{
    if (!o || o->type != MSGPACK_OBJECT_MAP)
        return err_set(r->e, ERR_FORMAT, "proto: %s: key 'gen' is missing or not a map", r->where);
    int rc;
    if ((rc = rd_str(r, o, "model", &g->model, false)) || (rc = rd_str(r, o, "prompt", &g->prompt, false)) ||
        (rc = rd_tokens(r, o, "tokens", &g->tokens, &g->n_tokens, false)))
        return rc;
    if ((rc = rd_json(r, o, "messages", JSON_ARRAY, &g->messages)) ||
        (rc = rd_json(r, o, "tools", JSON_ARRAY, &g->tools)) ||
        (rc = rd_json(r, o, "template_kwargs", JSON_OBJECT, &g->template_kwargs)) ||
        (rc = rd_bool(r, o, "tool_required", &g->tool_required)) ||
        (rc = rd_str(r, o, "tool_name", &g->tool_name, false)) ||
        (rc = rd_bool(r, o, "tool_single", &g->tool_single)) ||
        (rc = rd_str(r, o, "json_schema", &g->json_schema, false)))
        return rc;
    if (!g->prompt && !g->tokens && !g->messages)
        return err_set(r->e, ERR_FORMAT, "proto: %s: none of 'prompt', 'tokens', 'messages' given", r->where);

    int64_t v;
    if ((rc = rd_int(r, o, "max_tokens", -1, INT32_MAX, &v, false)) < 0)
        return rc;
    if (rc == 0) {
        g->max_tokens = (int32_t)v;
        g->set |= PG_MAX_TOKENS;
    }
    bool given;
#define GEN_I32(m, lo, hi) (rc = rd_opt_int(r, o, #m, lo, hi, &v, &given)) || !given ? rc : (g->m = (int32_t)v, 0)
/* seed -1 → 0xFFFFFFFF: random, as llama-server takes it */
#define GEN_SEED(m, lo, hi) (rc = rd_opt_int(r, o, #m, lo, hi, &v, &given)) || !given ? rc : (g->m = (uint32_t)v, 0)
#define GEN_F32(m, lo, hi) rd_flt(r, o, #m, &g->m, &given)
#define DECODE(m, bit, kind, lo, hi, sm, sbit)                                                                      \
    if ((rc = GEN_##kind(m, lo, hi)))                                                                               \
        return rc;                                                                                                  \
    if (given)                                                                                                      \
        g->set |= (bit);
    PROTO_SAMPLING_FIELDS(DECODE)
#undef DECODE
#undef GEN_I32
#undef GEN_SEED
#undef GEN_F32
    if ((rc = rd_int(r, o, "logprobs", -1, PROTO_MAX_TOP, &v, false)) < 0)
        return rc;
    if (rc == 0)
        g->logprobs = (int32_t)v;

    const msgpack_object *st = get(o, "stop");
    if (st && st->type != MSGPACK_OBJECT_NIL) {
        if (st->type != MSGPACK_OBJECT_ARRAY)
            return bad(r, "stop", "is not an array");
        if (st->via.array.size > PROTO_MAX_STOP)
            return bad(r, "stop", "has too many strings");
        if (!(g->stop = calloc((size_t)st->via.array.size + 1, sizeof *g->stop)))
            return err_set(r->e, ERR_NOMEM, "proto: out of memory");
        g->n_stop = st->via.array.size;
        for (uint32_t i = 0; i < st->via.array.size; i++)
            if ((rc = strobj(r, &st->via.array.ptr[i], "stop", &g->stop[i])))
                return rc;
    }
    const msgpack_object *lb = get(o, "logit_bias");
    if (lb && lb->type != MSGPACK_OBJECT_NIL) {
        if (lb->type != MSGPACK_OBJECT_ARRAY)
            return bad(r, "logit_bias", "is not an array");
        uint32_t cnt = lb->via.array.size;
        if (cnt > PROTO_MAX_TOKENS)
            return bad(r, "logit_bias", "is too long");
        if (!(g->logit_bias = calloc((size_t)cnt + 1, sizeof *g->logit_bias)))
            return err_set(r->e, ERR_NOMEM, "proto: out of memory");
        g->n_logit_bias = cnt;
        for (uint32_t i = 0; i < cnt; i++) {
            const msgpack_object *x = &lb->via.array.ptr[i];
            if (x->type != MSGPACK_OBJECT_ARRAY || x->via.array.size != 2)
                return bad(r, "logit_bias", "holds an element that is not [token or text, bias]");
            const msgpack_object *t = &x->via.array.ptr[0], *b = &x->via.array.ptr[1];
            if (t->type == MSGPACK_OBJECT_STR) {
                int rc = strobj(r, t, "logit_bias", &g->logit_bias[i].text);
                if (rc)
                    return rc;
                if (!g->logit_bias[i].text[0])
                    return bad(r, "logit_bias", "holds an empty text");
                g->logit_bias[i].token = -1;
            } else if (t->type != MSGPACK_OBJECT_POSITIVE_INTEGER || t->via.u64 > INT32_MAX) {
                return bad(r, "logit_bias", "holds a bad token id");
            } else {
                g->logit_bias[i].token = (int32_t)t->via.u64;
            }
            if (b->type == MSGPACK_OBJECT_FLOAT32 || b->type == MSGPACK_OBJECT_FLOAT64)
                g->logit_bias[i].bias = (float)b->via.f64;
            else if (b->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                g->logit_bias[i].bias = (float)b->via.u64;
            else if (b->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
                g->logit_bias[i].bias = (float)b->via.i64;
            else
                return bad(r, "logit_bias", "holds a non-numeric bias");
            if (isnan(g->logit_bias[i].bias))
                return bad(r, "logit_bias", "holds a NaN bias");
        }
    }
    if ((rc = rd_bool(r, o, "ignore_eos", &g->ignore_eos)) ||
        (rc = rd_bool(r, o, "add_special", &g->add_special)) ||
        (rc = rd_bool(r, o, "parse_special", &g->parse_special)) ||
        (rc = rd_bool(r, o, "special", &g->special)) ||
        (rc = rd_bool(r, o, "cache_prompt", &g->cache_prompt)) ||
        (rc = rd_bool(r, o, "embed", &g->embed)) ||
        (rc = RD_I32(o, "pooling", 0, 3, g->pooling, false)))
        return rc;
    if ((rc = rd_u64(r, o, "group", &g->group, false)) < 0)
        return rc;
    return 0;
}

static int rd_chunk(struct rd *r, const msgpack_object *o, struct proto_chunk *c)
{
    if (o->type != MSGPACK_OBJECT_MAP)
        return err_set(r->e, ERR_FORMAT, "proto: %s: a chunk is not a map", r->where);
    int rc;
    c->token = -1;
    if ((rc = rd_id(r, o, "s", &c->sid, &c->stream)) < 0 ||
        (rc = rd_u64(r, o, "i", &c->i, true)) < 0 ||
        (rc = RD_I32(o, "token", -1, INT32_MAX, c->token, false)) ||
        (rc = rd_str(r, o, "text", &c->text, false)) ||
        (rc = rd_flt(r, o, "logprob", &c->logprob, &c->has_logprob)))
        return rc;
    const msgpack_object *top = get(o, "top");
    if (top && top->type != MSGPACK_OBJECT_NIL) {
        if (top->type != MSGPACK_OBJECT_ARRAY || top->via.array.size > PROTO_MAX_TOP)
            return bad(r, "top", "is not an array of at most 32 entries");
        if (!(c->top = calloc((size_t)top->via.array.size + 1, sizeof *c->top)))
            return err_set(r->e, ERR_NOMEM, "proto: out of memory");
        c->n_top = top->via.array.size;
        for (uint32_t i = 0; i < c->n_top; i++) {
            const msgpack_object *x = &top->via.array.ptr[i];
            if (x->type != MSGPACK_OBJECT_ARRAY || x->via.array.size != 3)
                return bad(r, "top", "holds an element that is not [token, logprob, text]");
            const msgpack_object *t = &x->via.array.ptr[0], *lp = &x->via.array.ptr[1];
            if (t->type != MSGPACK_OBJECT_POSITIVE_INTEGER || t->via.u64 > INT32_MAX ||
                (lp->type != MSGPACK_OBJECT_FLOAT32 && lp->type != MSGPACK_OBJECT_FLOAT64))
                return bad(r, "top", "holds a wrongly typed element");
            c->top[i].token = (int32_t)t->via.u64;
            c->top[i].logprob = (float)lp->via.f64;
            if ((rc = strobj(r, &x->via.array.ptr[2], "top", &c->top[i].text)))
                return rc;
        }
    }
    /* n_prompt before finish: a bad one then leaves nothing allocated behind */
    char *fin = NULL;
    if ((rc = RD_I32(o, "n_prompt", 0, INT32_MAX, c->n_prompt, false)) || (rc = rd_str(r, o, "finish", &fin, false)))
        return rc;
    if (fin) {
        int f = PF_NONE;
        for (int i = PF_STOP; i <= PF_ERROR; i++)
            if (!strcmp(fin, finish_names[i]))
                f = i;
        free(fin);
        if (f == PF_NONE)
            return bad(r, "finish", "names no known reason");
        c->finish = f;
        if ((rc = RD_I32(o, "n_gen", 0, INT32_MAX, c->n_gen, false)) ||
            (rc = RD_I32(o, "n_cached", 0, INT32_MAX, c->n_cached, false)) ||
            (rc = RD_I32(o, "stop_hit", 0, PROTO_MAX_STOP, c->stop_hit, false)))
            return rc;
        if (f == PF_ERROR) {
            char *code = NULL;
            if ((rc = rd_str(r, o, "code", &code, false)))
                return rc;
            c->errc = code ? proto_errc_parse(code) : PE_INTERNAL;
            free(code);
            if ((rc = rd_str(r, o, "message", &c->message, false)))
                return rc;
        }
        const msgpack_object *emb = get(o, "emb");
        if (emb && emb->type != MSGPACK_OBJECT_NIL) {
            if (emb->type != MSGPACK_OBJECT_BIN || emb->via.bin.size % 4 || !emb->via.bin.size ||
                emb->via.bin.size / 4 > PROTO_MAX_EMBD)
                return bad(r, "emb", "is not a bin of 1 to 2^20 little-endian f32");
            c->n_embd = emb->via.bin.size / 4;
            if (!(c->embd = malloc(c->n_embd * sizeof *c->embd)))
                return err_set(r->e, ERR_NOMEM, "proto: out of memory");
            const unsigned char *p = (const unsigned char *)emb->via.bin.ptr;
            for (size_t i = 0; i < c->n_embd; i++) {
                uint32_t u = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
                             (uint32_t)p[4 * i + 3] << 24;
                memcpy(&c->embd[i], &u, 4);
            }
        }
    }
    return 0;
}

static int rd_worker(struct rd *r, const msgpack_object *o, struct proto_worker *w)
{
    if (!o || o->type != MSGPACK_OBJECT_MAP)
        return err_set(r->e, ERR_FORMAT, "proto: %s: worker record missing or not a map", r->where);
    int rc;
    int64_t v;
    if ((rc = RD_I32(o, "idx", INT32_MIN, INT32_MAX, w->idx, false)) ||
        (rc = rd_str(r, o, "device", &w->device, false)) ||
        (rc = rd_str(r, o, "backend", &w->backend, false)) ||
        (rc = rd_str(r, o, "state", &w->state, false)) ||
        (rc = RD_I32(o, "pid", INT32_MIN, INT32_MAX, w->pid, false)) ||
        (rc = rd_str(r, o, "model", &w->model, false)) ||
        (rc = rd_str(r, o, "model_path", &w->model_path, false)) ||
        (rc = RD_I32(o, "restarts", 0, INT32_MAX, w->restarts, false)) ||
        (rc = RD_I32(o, "slots", 0, INT32_MAX, w->slots, false)) ||
        (rc = RD_I32(o, "active", 0, INT32_MAX, w->active, false)) ||
        (rc = RD_I32(o, "queued", 0, INT32_MAX, w->queued, false)) ||
        (rc = RD_I32(o, "n_ctx", 0, INT32_MAX, w->n_ctx, false)) ||
        (rc = RD_I32(o, "n_vocab", 0, INT32_MAX, w->n_vocab, false)))
        return rc;
    (void)v;
    if ((rc = rd_u64(r, o, "mem", &w->mem, false)) < 0)
        return rc;
    /* the load split and the memory breakdown: optional, an older worker sends none */
    const struct { const char *k; uint64_t *dst; } opt[] = {
        { "load_ms", &w->load_ms },         { "read_ms", &w->read_ms },       { "compile_ms", &w->compile_ms },
        { "upload_ms", &w->upload_ms },     { "alloc_ms", &w->alloc_ms },     { "mem_weights", &w->mem_weights },
        { "mem_kv", &w->mem_kv },           { "mem_state", &w->mem_state },   { "mem_snap", &w->mem_snap },
        { "mem_scratch", &w->mem_scratch }, { "state_per_slot", &w->state_per_slot },
        { "dev_used", &w->dev_used },       { "dev_total", &w->dev_total },
    };
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
        if ((rc = rd_u64(r, o, opt[i].k, opt[i].dst, false)) < 0)
            return rc;
    if ((rc = RD_I32(o, "n_snap", 0, INT32_MAX, w->n_snap, false)))
        return rc;
    return 0;
}

static int rd_status(struct rd *r, const msgpack_object *o, struct proto_status *s)
{
    if (!o || o->type != MSGPACK_OBJECT_MAP)
        return err_set(r->e, ERR_FORMAT, "proto: %s: key 'status' missing or not a map", r->where);
    int rc;
    if ((rc = rd_bool(r, o, "ready", &s->ready)) || (rc = rd_str(r, o, "version", &s->version, false)) ||
        (rc = rd_u64(r, o, "uptime_s", &s->uptime_s, false)) < 0 ||
        (rc = RD_I32(o, "active", 0, INT32_MAX, s->active, false)) ||
        (rc = RD_I32(o, "queued", 0, INT32_MAX, s->queued, false)))
        return rc;
    const msgpack_object *ms = get(o, "models");
    if (ms && ms->type == MSGPACK_OBJECT_ARRAY) {
        if (!(s->models = calloc((size_t)ms->via.array.size + 1, sizeof *s->models)))
            return err_set(r->e, ERR_NOMEM, "proto: out of memory");
        s->n_models = ms->via.array.size;
        for (uint32_t i = 0; i < s->n_models; i++)
            if ((rc = strobj(r, &ms->via.array.ptr[i], "models", &s->models[i])))
                return rc;
    } else if (ms && ms->type != MSGPACK_OBJECT_NIL) {
        return bad(r, "models", "is not an array");
    }
    const msgpack_object *ws = get(o, "workers");
    if (ws && ws->type == MSGPACK_OBJECT_ARRAY) {
        if (!(s->workers = calloc((size_t)ws->via.array.size + 1, sizeof *s->workers)))
            return err_set(r->e, ERR_NOMEM, "proto: out of memory");
        s->n_workers = ws->via.array.size;
        for (uint32_t i = 0; i < s->n_workers; i++)
            if ((rc = rd_worker(r, &ws->via.array.ptr[i], &s->workers[i])))
                return rc;
    } else if (ws && ws->type != MSGPACK_OBJECT_NIL) {
        return bad(r, "workers", "is not an array");
    }
    return 0;
}

static int decode_obj(const msgpack_object *root, struct proto_msg *m, struct err *e)
{
    struct rd rr = {e, "message"}, *r = &rr;
    if (root->type != MSGPACK_OBJECT_MAP)
        return err_set(e, ERR_FORMAT, "proto: message is not a map");
    int64_t ver = 0;
    int rc;
    if ((rc = rd_int(r, root, "v", 0, INT32_MAX, &ver, true)))
        return rc;
    char *t = NULL;
    if ((rc = rd_str(r, root, "t", &t, true)))
        return rc;
    int type = PT_NONE;
    for (int i = PT_NONE + 1; i < PT_COUNT; i++)
        if (!strcmp(t, type_names[i]))
            type = i;
    if (type == PT_NONE) {
        err_set(e, ERR_FORMAT, "proto: unknown message type '%.64s'", t);
        free(t);
        return ERR_FORMAT;
    }
    free(t);
    proto_msg_init(m, type);
    rr.where = type_names[type];
    if (ver != PROTO_VERSION)
        return err_set(e, ERR_UNSUPPORTED, "proto: %s: version %lld, this side speaks %d", rr.where,
                       (long long)ver, PROTO_VERSION);
    if ((rc = rd_id(r, root, "id", &m->id, &m->stream)) < 0)
        return rc;
    /* chunks with id 0 carry several streams, each chunk naming its own ("s") */
    bool need_id = type == PT_ACCEPTED || type == PT_NEXT || type == PT_CANCEL || type == PT_POLL;
    bool has_id = m->id || !proto_sid_is_zero(&m->stream);
    if (need_id && !has_id)
        return bad(r, "id", "is missing or zero");
    switch (type) {
    case PT_GENERATE:
        return rd_gen(r, get(root, "gen"), &m->gen);
    case PT_NEXT:
        if ((rc = rd_u64(r, root, "from", &m->from, false)) < 0 ||
            (rc = RD_I32(root, "wait_ms", 0, 600000, m->wait_ms, false)))
            return rc;
        return 0;
    case PT_CHUNKS: {
        const msgpack_object *cs = get(root, "chunks");
        if (!cs || cs->type != MSGPACK_OBJECT_ARRAY)
            return bad(r, "chunks", "is missing or not an array");
        if (!(m->chunks = calloc((size_t)cs->via.array.size + 1, sizeof *m->chunks)))
            return err_set(e, ERR_NOMEM, "proto: out of memory");
        for (uint32_t i = 0; i < cs->via.array.size; i++) {
            m->n_chunks = i + 1;
            if ((rc = rd_chunk(r, &cs->via.array.ptr[i], &m->chunks[i])))
                return rc;
            if (!has_id && !m->chunks[i].sid && proto_sid_is_zero(&m->chunks[i].stream))
                return bad(r, "chunks", "holds a chunk without its stream ('s') in a message without an id");
        }
        return rd_bool(r, root, "done", &m->done);
    }
    case PT_POLL: {
        const msgpack_object *as = get(root, "acks");
        if (as && as->type != MSGPACK_OBJECT_NIL) {
            if (as->type != MSGPACK_OBJECT_ARRAY || as->via.array.size > PROTO_MAX_ACKS)
                return bad(r, "acks", "is not an array of at most 1Mi entries");
            if (!(m->acks = calloc((size_t)as->via.array.size + 1, sizeof *m->acks)))
                return err_set(e, ERR_NOMEM, "proto: out of memory");
            for (uint32_t i = 0; i < as->via.array.size; i++) {
                const msgpack_object *x = &as->via.array.ptr[i];
                if (x->type != MSGPACK_OBJECT_ARRAY || x->via.array.size != 2 ||
                    x->via.array.ptr[0].type != MSGPACK_OBJECT_BIN ||
                    x->via.array.ptr[0].via.bin.size != PROTO_SID_BYTES ||
                    x->via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                    return bad(r, "acks", "holds an element that is not [stream id (16-byte bin), from]");
                memcpy(m->acks[i].stream.b, x->via.array.ptr[0].via.bin.ptr, PROTO_SID_BYTES);
                m->acks[i].from = x->via.array.ptr[1].via.u64;
                m->n_acks = i + 1;
            }
        }
        if ((rc = RD_I32(root, "hold_ms", 0, 600000, m->hold_ms, false)))
            return rc;
        return RD_I32(root, "wait_ms", 0, 600000, m->wait_ms, false);
    }
    case PT_ERROR: {
        char *code = NULL;
        if ((rc = rd_str(r, root, "code", &code, true)))
            return rc;
        m->errc = proto_errc_parse(code);
        free(code);
        return rd_str(r, root, "message", &m->message, false);
    }
    case PT_TOKENIZE:
        if ((rc = rd_str(r, root, "model", &m->gen.model, false)) ||
            (rc = rd_str(r, root, "text", &m->text, true)) ||
            (rc = rd_bool(r, root, "add_special", &m->add_special)) ||
            (rc = rd_bool(r, root, "parse_special", &m->parse_special)))
            return rc;
        return 0;
    case PT_DETOKENIZE:
        if ((rc = rd_str(r, root, "model", &m->gen.model, false)))
            return rc;
        return rd_tokens(r, root, "tokens", &m->tokens, &m->n_tokens, true);
    case PT_TOKENS:
        return rd_tokens(r, root, "tokens", &m->tokens, &m->n_tokens, true);
    case PT_TEXT:
        return rd_str(r, root, "text", &m->text, true);
    case PT_STATUS_REPLY:
        return rd_status(r, get(root, "status"), &m->status);
    case PT_READY:
        return rd_worker(r, get(root, "worker"), &m->worker);
    case PT_PONG: case PT_ACCEPTED: {
        const msgpack_object *w = get(root, "worker");
        return w && w->type != MSGPACK_OBJECT_NIL ? rd_worker(r, w, &m->worker) : 0;
    }
    default:
        return 0;
    }
}

int proto_decode(const void *buf, size_t len, struct proto_msg *m, struct err *e)
{
    proto_msg_init(m, PT_NONE);
    if (!buf || len == 0)
        return err_set(e, ERR_FORMAT, "proto: empty message");
    if (len > PROTO_MAX_MSG)
        return err_set(e, ERR_FORMAT, "proto: message of %zu bytes exceeds the %u-byte limit", len,
                       PROTO_MAX_MSG);
    size_t end = scan(buf, len, 0, 0);
    if (end == 0)
        return err_set(e, ERR_FORMAT, "proto: malformed or truncated msgpack (%zu bytes)", len);
    if (end != len)
        return err_set(e, ERR_FORMAT, "proto: %zu trailing bytes after the message", len - end);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    int ur = msgpack_unpack_next(&up, buf, len, &off);
    int rc;
    if (ur != MSGPACK_UNPACK_SUCCESS) {
        rc = err_set(e, ur == MSGPACK_UNPACK_NOMEM_ERROR ? ERR_NOMEM : ERR_FORMAT,
                     "proto: msgpack unpack failed (%d)", ur);
    } else {
        rc = decode_obj(&up.data, m, e);
    }
    msgpack_unpacked_destroy(&up);
    if (rc) {
        int type = m->type;
        proto_msg_free(m);
        m->type = type; /* keep the type so a receiver can say what it could not read */
    }
    return rc;
}
