/* test_proto.c — the message schema: round trips of every type, unknown
 * fields ignored, missing/wrong-typed required fields rejected, and a decoder
 * fuzz (mutated, truncated and random buffers never crash). */
#include <math.h>
#include <msgpack.h>
#include <stdint.h>

#include "../proto/proto.h"
#include "check.h"

static int roundtrip(const struct proto_msg *in, struct proto_msg *out)
{
    char *buf;
    size_t len;
    struct err e;
    if (proto_encode(in, &buf, &len, &e))
        return -1;
    int rc = proto_decode(buf, len, out, &e);
    if (rc)
        printf("#   decode: %s\n", e.msg);
    free(buf);
    return rc;
}

static void generate_roundtrip(void)
{
    struct proto_msg m, d;
    proto_msg_init(&m, PT_GENERATE);
    m.id = 77;
    int32_t toks[] = {1, 2, 300000, 0};
    char *stop[] = {"\n\n", "User:"};
    /* messages with a field beyond role/content, nested parts, numbers, booleans and null: every one comes
     * back as it went (json_equal) */
    json_t *chat = json_loads("[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":"
                              "[{\"type\":\"text\",\"text\":\"héllo\"}],\"name\":\"bob\"},{\"role\":\"assistant\","
                              "\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"function\":{\"name\":\"f\",\"arguments\":"
                              "\"{\\\"n\\\":3}\"}}],\"x\":{\"i\":-7,\"r\":2.5,\"t\":true,\"f\":false}}]", 0, NULL);
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}]", 0, NULL);
    json_t *kwargs = json_loads("{\"enable_thinking\":false}", 0, NULL);
    CHECK(chat && tools && kwargs, "test JSON");
    struct proto_bias bias[] = {{.token = 5, .bias = -INFINITY}, {.token = 9, .bias = 2.5f}, {.token = -1, .text = "hello", .bias = -3.0f}};
    m.gen.model = "stories";
    m.gen.prompt = "Once upon";
    m.gen.tokens = toks;
    m.gen.n_tokens = 4;
    m.gen.messages = chat;
    m.gen.stop = stop;
    m.gen.n_stop = 2;
    m.gen.logit_bias = bias;
    m.gen.n_logit_bias = 3;
    m.gen.temperature = 0.0f;
    m.gen.top_k = 7;
    m.gen.seed = 1234;
    m.gen.max_tokens = 16;
    m.gen.set = PG_TEMPERATURE | PG_TOP_K | PG_SEED | PG_MAX_TOKENS;
    m.gen.logprobs = 3;
    m.gen.ignore_eos = true;
    m.gen.add_special = false;
    m.gen.tools = tools;
    m.gen.template_kwargs = kwargs;
    m.gen.tool_required = true;
    m.gen.tool_name = "get_weather";
    m.gen.tool_single = true;
    m.gen.json_schema = "{\"type\":\"object\"}";
    CHECK(roundtrip(&m, &d) == 0, "generate round trip");
    CHECK(d.gen.tool_required && d.gen.tool_name && !strcmp(d.gen.tool_name, "get_weather"), "tool_choice");
    CHECK(d.gen.tool_single, "parallel_tool_calls false");
    CHECK(d.gen.json_schema && !strcmp(d.gen.json_schema, m.gen.json_schema), "json_schema");
    CHECK(d.gen.messages && json_equal(d.gen.messages, chat), "messages, every field");
    CHECK(d.gen.tools && json_equal(d.gen.tools, tools), "tools");
    CHECK(d.gen.template_kwargs && json_equal(d.gen.template_kwargs, kwargs), "template kwargs");
    struct proto_gen cp;
    struct err ce;
    CHECK(proto_gen_copy(&cp, &d.gen, &ce) == 0 && cp.tools && cp.tools != d.gen.tools &&
              json_equal(cp.messages, chat) && cp.messages != d.gen.messages && cp.n_stop == 2 && !strcmp(cp.stop[1], "User:") &&
              cp.json_schema && cp.json_schema != d.gen.json_schema && !strcmp(cp.json_schema, d.gen.json_schema),
          "deep copy");
    CHECK(cp.tool_required && cp.tool_name && cp.tool_name != d.gen.tool_name && !strcmp(cp.tool_name, "get_weather"),
          "deep copy of tool_name");
    CHECK(cp.n_logit_bias == 3 && cp.logit_bias[2].text && cp.logit_bias[2].text != d.gen.logit_bias[2].text &&
              !strcmp(cp.logit_bias[2].text, "hello") && !cp.logit_bias[0].text,
          "deep copy of a text logit bias");
    proto_gen_free(&cp);
    CHECK_EQ_INT(d.type, PT_GENERATE);
    CHECK_EQ_INT(d.id, 77);
    CHECK(d.gen.model && !strcmp(d.gen.model, "stories"), "model");
    CHECK(d.gen.prompt && !strcmp(d.gen.prompt, "Once upon"), "prompt");
    CHECK_EQ_INT(d.gen.n_tokens, 4);
    CHECK(d.gen.tokens && d.gen.tokens[2] == 300000, "tokens");
    CHECK_EQ_INT(d.gen.n_stop, 2);
    CHECK(d.gen.stop && !strcmp(d.gen.stop[1], "User:"), "stop");
    CHECK_EQ_INT(d.gen.n_logit_bias, 3);
    CHECK(d.gen.logit_bias && isinf(d.gen.logit_bias[0].bias) && d.gen.logit_bias[1].bias == 2.5f, "bias");
    /* a text key travels as text (the worker tokenizes it); token entries carry no text */
    CHECK(d.gen.logit_bias && !d.gen.logit_bias[0].text && d.gen.logit_bias[1].token == 9 &&
          d.gen.logit_bias[2].text && !strcmp(d.gen.logit_bias[2].text, "hello") && d.gen.logit_bias[2].token == -1 &&
          d.gen.logit_bias[2].bias == -3.0f, "text bias");
    CHECK_EQ_INT(d.gen.set, PG_TEMPERATURE | PG_TOP_K | PG_SEED | PG_MAX_TOKENS);
    CHECK(d.gen.temperature == 0.0f, "temp");
    CHECK_EQ_INT(d.gen.top_k, 7);
    CHECK_EQ_INT(d.gen.seed, 1234);
    CHECK_EQ_INT(d.gen.max_tokens, 16);
    CHECK(d.gen.top_p == 0.95f, "unset fields keep their defaults");
    CHECK_EQ_INT(d.gen.logprobs, 3);
    CHECK(d.gen.ignore_eos && !d.gen.add_special && d.gen.parse_special && d.gen.cache_prompt, "flags");
    proto_msg_free(&d);
    json_decref(chat);
    json_decref(tools);
    json_decref(kwargs);
}

/* What a worker must refuse in a chat request's values: a messages that is not an array, a map key
 * that is not a string, a string that is not UTF-8, nesting past PROTO_MAX_DEPTH. */
static void chat_values_checked(void)
{
    struct proto_msg m, d;
    struct err e;
    proto_msg_init(&m, PT_GENERATE);
    m.id = 5;
    /* messages (1) → message (2) → content (3) → PROTO_MAX_DEPTH − 2 more arrays: one level too many, still
     * within msgpack's own limit, so the decoder's check is what refuses it */
    json_t *deep = json_array(), *in = deep;
    for (int i = 0; i < PROTO_MAX_DEPTH - 2; i++) {
        json_t *x = json_array();
        json_array_append_new(in, x);
        in = x;
    }
    json_t *msgs = json_pack("[{s:s, s:o}]", "role", "user", "content", deep);
    CHECK(proto_json_depth(msgs) == PROTO_MAX_DEPTH + 1, "depth %d", proto_json_depth(msgs));
    m.gen.messages = msgs;
    char *buf;
    size_t len;
    CHECK(proto_encode(&m, &buf, &len, &e) == 0, "encode: %s", e.msg);
    int rc = proto_decode(buf, len, &d, &e);
    CHECK(rc == ERR_FORMAT && strstr(e.msg, "messages") && strstr(e.msg, "nested"), "too deep: %d %s", rc, e.msg);
    if (!rc)
        proto_msg_free(&d);
    free(buf);
    json_decref(msgs);
    /* an object where the array belongs */
    msgs = json_pack("{s:s}", "role", "user");
    m.gen.messages = msgs;
    CHECK(proto_encode(&m, &buf, &len, &e) == 0, "encode: %s", e.msg);
    rc = proto_decode(buf, len, &d, &e);
    CHECK(rc == ERR_FORMAT && strstr(e.msg, "messages") && strstr(e.msg, "array"), "not an array: %d %s", rc, e.msg);
    if (!rc)
        proto_msg_free(&d);
    free(buf);
    json_decref(msgs);
    /* invalid UTF-8 in a content string (the gateway would never send it; a peer on the socket might) */
    msgs = json_loads("[{\"role\":\"user\",\"content\":\"abcd\"}]", 0, NULL);
    m.gen.messages = msgs;
    CHECK(proto_encode(&m, &buf, &len, &e) == 0, "encode: %s", e.msg);
    char *p = memmem(buf, len, "abcd", 4);
    CHECK(p != NULL, "content in the encoding");
    if (p)
        p[1] = (char)0xff;
    rc = proto_decode(buf, len, &d, &e);
    CHECK(rc == ERR_FORMAT && strstr(e.msg, "UTF-8"), "not UTF-8: %d %s", rc, e.msg);
    if (!rc)
        proto_msg_free(&d);
    free(buf);
    json_decref(msgs);
}

/* Every field of PROTO_SAMPLING_FIELDS at an edge of its kind (ints -1, seed 0xFFFFFFFF = random, floats
 * distinct) comes back with its bit; fields not given stay unmarked. */
static void sampling_fields_roundtrip(void)
{
    struct proto_msg m, d;
    proto_msg_init(&m, PT_GENERATE);
    m.id = 9;
    m.gen.prompt = "x";
    float k = 0.0f;
#define SET_I32(f) m.gen.f = -1
#define SET_SEED(f) m.gen.f = 0xFFFFFFFFu
#define SET_F32(f) m.gen.f = 0.25f * ++k
#define SET(f, bit, kind, lo, hi, sm, sbit) SET_##kind(f); m.gen.set |= (bit);
    PROTO_SAMPLING_FIELDS(SET)
#undef SET
    CHECK(roundtrip(&m, &d) == 0, "round trip");
    CHECK_EQ_INT(d.gen.set, m.gen.set);
#define SAME(f, bit, kind, lo, hi, sm, sbit) CHECK(d.gen.f == m.gen.f, "%s", #f);
    PROTO_SAMPLING_FIELDS(SAME)
#undef SAME
    proto_msg_free(&d);
    /* none given: none marked, the defaults kept */
    proto_msg_init(&m, PT_GENERATE);
    m.id = 9;
    m.gen.prompt = "x";
    CHECK(roundtrip(&m, &d) == 0, "round trip");
    CHECK_EQ_INT(d.gen.set, 0);
    CHECK(d.gen.top_p == 0.95f && d.gen.seed == 0xFFFFFFFFu, "defaults");
    proto_msg_free(&d);
}

static void chunks_roundtrip(void)
{
    struct proto_msg m, d;
    proto_msg_init(&m, PT_CHUNKS);
    m.id = 5;
    struct proto_top top[] = {{10, -0.5f, "a"}, {11, -1.5f, "b"}};
    struct proto_chunk c[3] = {
        /* a stream's first token carries the prompt's length; later ones do not send it */
        {.i = 0, .token = 10, .text = "a", .has_logprob = true, .logprob = -0.5f, .top = top, .n_top = 2,
         .n_prompt = 7, .n_gen = 1},
        {.i = 1, .token = 11, .text = "", .n_prompt = 7, .n_gen = 2},
        {.i = 2, .token = -1, .text = "", .finish = PF_ERROR, .n_prompt = 4, .n_gen = 2, .errc = PE_INTERNAL,
         .message = "worker 0 died"},
    };
    m.chunks = c;
    m.n_chunks = 3;
    m.done = true;
    CHECK(roundtrip(&m, &d) == 0, "chunks round trip");
    CHECK_EQ_INT(d.n_chunks, 3);
    CHECK(d.done, "done");
    if (d.n_chunks == 3) {
        CHECK(d.chunks[0].has_logprob && d.chunks[0].logprob == -0.5f, "logprob");
        CHECK_EQ_INT(d.chunks[0].n_top, 2);
        CHECK(d.chunks[0].top && !strcmp(d.chunks[0].top[1].text, "b"), "top text");
        CHECK(!d.chunks[1].has_logprob, "no logprob");
        CHECK_EQ_INT(d.chunks[0].n_prompt, 7);
        CHECK_EQ_INT(d.chunks[1].n_prompt, 0);
        CHECK_EQ_INT(d.chunks[2].finish, PF_ERROR);
        CHECK_EQ_INT(d.chunks[2].errc, PE_INTERNAL);
        CHECK_EQ_INT(d.chunks[2].n_prompt, 4);
        CHECK(d.chunks[2].message && !strcmp(d.chunks[2].message, "worker 0 died"), "message");
    }
    proto_msg_free(&d);
}

/* Poll groups: a generate naming its group, a poll with its acks, and the
 * multi-stream chunks message (id 0, each chunk naming its stream). */
static void poll_group_roundtrip(void)
{
    struct proto_msg m, d;
    proto_msg_init(&m, PT_GENERATE);
    m.gen.prompt = "hi";
    m.gen.group = 0xfeedface12345678ull;
    CHECK(roundtrip(&m, &d) == 0 && d.gen.group == 0xfeedface12345678ull, "generate keeps its group");
    proto_msg_free(&d);
    proto_msg_init(&m, PT_GENERATE);
    m.gen.prompt = "hi";
    CHECK(roundtrip(&m, &d) == 0 && d.gen.group == 0, "no group: 0");
    proto_msg_free(&d);

    struct proto_ack acks[] = {{.stream = {{7}}, .from = 3}, {.stream = {{9}}, .from = 0},
                               {.stream = {{[15] = 0xff}}, .from = 1ull << 40}};
    proto_msg_init(&m, PT_POLL);
    m.id = 77;
    m.acks = acks;
    m.n_acks = 3;
    m.wait_ms = 100;
    m.hold_ms = 20;
    CHECK(roundtrip(&m, &d) == 0 && d.type == PT_POLL && d.id == 77 && d.wait_ms == 100 && d.hold_ms == 20, "poll");
    CHECK_EQ_INT(d.n_acks, 3);
    if (d.n_acks == 3)
        CHECK(proto_sid_eq(&d.acks[0].stream, &acks[0].stream) && d.acks[0].from == 3 &&
                  proto_sid_eq(&d.acks[1].stream, &acks[1].stream) && d.acks[1].from == 0 &&
                  proto_sid_eq(&d.acks[2].stream, &acks[2].stream) && d.acks[2].from == 1ull << 40,
              "acks in order");
    proto_msg_free(&d);
    proto_msg_init(&m, PT_POLL);
    m.id = 77;
    CHECK(roundtrip(&m, &d) == 0 && d.n_acks == 0 && d.hold_ms == 0, "poll without acks (and without hold: 0)");
    proto_msg_free(&d);
    proto_msg_init(&m, PT_POLL); /* the group is required */
    CHECK(roundtrip(&m, &d) != 0, "poll without a group is refused");
    proto_msg_free(&d);

    struct proto_chunk c[3] = {
        {.sid = 4, .i = 0, .token = 10, .text = "a"},
        {.sid = 4, .i = 1, .token = -1, .text = "", .finish = PF_STOP, .n_prompt = 2, .n_gen = 1},
        {.sid = 6, .i = 5, .token = 12, .text = "b"},
    };
    proto_msg_init(&m, PT_CHUNKS);
    m.chunks = c;
    m.n_chunks = 3;
    CHECK(roundtrip(&m, &d) == 0 && d.id == 0 && d.n_chunks == 3, "chunks of several streams");
    if (d.n_chunks == 3)
        CHECK(d.chunks[0].sid == 4 && d.chunks[1].sid == 4 && d.chunks[1].finish == PF_STOP && d.chunks[2].sid == 6 &&
                  d.chunks[2].i == 5 && !strcmp(d.chunks[2].text, "b"),
              "each chunk keeps its stream");
    proto_msg_free(&d);
    c[2].sid = 0; /* id 0 and a chunk that names no stream: nobody could route it */
    CHECK(roundtrip(&m, &d) != 0, "a chunk without its stream in an id-0 message is refused");
    proto_msg_free(&d);
}

/* Client-facing stream ids: 16 random bytes as a msgpack bin under "id",
 * a chunk's "s" and an ack's first element; the worker side keeps 64-bit
 * integers under the same keys. */
static void stream_ids_128(void)
{
    struct proto_sid a, b;
    struct err e;
    CHECK(proto_sid_parse("00112233445566778899aabbccddeeff", &a, &e) == 0, "parse: %s", e.msg);
    char hex[33];
    proto_sid_hex(&a, hex);
    CHECK(!strcmp(hex, "00112233445566778899aabbccddeeff"), "hex %s", hex);
    CHECK(proto_sid_parse("0011", &b, &e) == ERR_INVALID, "short hex refused");
    CHECK(proto_sid_parse("00112233445566778899aabbccddeefg", &b, &e) == ERR_INVALID, "bad digit refused");
    CHECK(proto_sid_parse("00112233445566778899aabbccddeeff00", &b, &e) == ERR_INVALID, "long hex refused");
    struct proto_msg m, d;
    int types[] = {PT_ACCEPTED, PT_NEXT, PT_CANCEL, PT_CHUNKS};
    for (int i = 0; i < 4; i++) {
        proto_msg_init(&m, types[i]);
        m.stream = a;
        CHECK(roundtrip(&m, &d) == 0 && proto_sid_eq(&d.stream, &a) && d.id == 0, "%s keeps its 128-bit id",
              proto_type_name(types[i]));
        proto_msg_free(&d);
        proto_msg_init(&m, types[i]); /* daemon ↔ worker: the integer */
        m.id = 42;
        CHECK(roundtrip(&m, &d) == 0 && d.id == 42 && proto_sid_is_zero(&d.stream), "%s keeps its integer id",
              proto_type_name(types[i]));
        proto_msg_free(&d);
    }
    proto_msg_init(&m, PT_NEXT); /* neither: refused */
    CHECK(roundtrip(&m, &d) != 0, "next without an id is refused");
    proto_msg_free(&d);
    struct proto_chunk c[2] = {{.stream = a, .i = 0, .token = 1, .text = "x"}, {.sid = 5, .i = 0, .token = 2, .text = "y"}};
    proto_msg_init(&m, PT_CHUNKS);
    m.chunks = c;
    m.n_chunks = 2;
    CHECK(roundtrip(&m, &d) == 0 && d.n_chunks == 2, "chunks naming 128-bit and integer streams");
    if (d.n_chunks == 2)
        CHECK(proto_sid_eq(&d.chunks[0].stream, &a) && !d.chunks[0].sid && d.chunks[1].sid == 5 &&
                  proto_sid_is_zero(&d.chunks[1].stream),
              "each keeps its kind of id");
    proto_msg_free(&d);
    /* a bin of another length is no stream id */
    const char bad[] = "\x83\xa1v\x01\xa1t\xa4next\xa2id\xc4\x03" "abc";
    CHECK(proto_decode(bad, sizeof bad - 1, &d, &e) == ERR_FORMAT && strstr(e.msg, "id"), "3-byte id refused: %s", e.msg);
    proto_msg_free(&d);
}

/* The worker's step message built a chunk at a time: it decodes to the
 * chunks put in (texts given by length, without their NUL), in order, with
 * more than a msgpack fixarray holds, and the buffer is reused. */
static void chunkbuf_messages(void)
{
    struct proto_chunkbuf b = {0};
    struct err e;
    const char *buf;
    size_t len;
    struct proto_msg d;
    CHECK(proto_chunkbuf_end(&b, &buf, &len, &e) != 0, "an empty chunk buffer is not a message");
    struct proto_top top[2] = {{7, -0.25f, "x"}, {8, -1.5f, ""}};
    for (int k = 0; k < 20; k++) { /* "abcdef" cut to k % 4 bytes: the bytes after it must not leak */
        struct proto_chunk c = {.sid = 100 + (uint64_t)(k % 3), .token = k, .text = "abcdef"};
        if (k == 1) {
            c.has_logprob = true;
            c.logprob = -0.5f;
            c.top = top;
            c.n_top = 2;
        }
        if (k == 19) {
            c.finish = PF_ERROR;
            c.errc = PE_INTERNAL;
            c.message = "died";
            c.n_prompt = 3;
            c.n_gen = 4;
            c.n_cached = 1;
        }
        if (k == 18) {
            c.finish = PF_STOP;
            c.stop_hit = 3;
        }
        CHECK(proto_chunkbuf_add(&b, &c, (size_t)(k % 4), &e) == 0, "chunk added");
    }
    CHECK(proto_chunkbuf_end(&b, &buf, &len, &e) == 0, "message closed");
    CHECK(proto_decode(buf, len, &d, &e) == 0, "it decodes");
    CHECK(d.type == PT_CHUNKS && d.id == 0 && !d.done, "a chunks message of several streams");
    CHECK_EQ_INT(d.n_chunks, 20);
    if (d.n_chunks == 20) {
        CHECK(d.chunks[0].sid == 100 && d.chunks[4].sid == 101 && d.chunks[17].sid == 102 && d.chunks[17].token == 17,
              "streams and tokens in order");
        CHECK(!strcmp(d.chunks[0].text, "") && !strcmp(d.chunks[2].text, "ab") && !strcmp(d.chunks[7].text, "abc"),
              "texts cut to their length");
        CHECK(d.chunks[1].has_logprob && d.chunks[1].logprob == -0.5f && d.chunks[1].n_top == 2, "logprobs");
        if (d.chunks[1].n_top == 2)
            CHECK(d.chunks[1].top[0].token == 7 && !strcmp(d.chunks[1].top[0].text, "x") &&
                      d.chunks[1].top[1].logprob == -1.5f,
                  "top alternatives");
        CHECK(!d.chunks[2].has_logprob && d.chunks[2].finish == PF_NONE, "a plain chunk");
        CHECK(d.chunks[19].finish == PF_ERROR && d.chunks[19].errc == PE_INTERNAL &&
                  !strcmp(d.chunks[19].message, "died") && d.chunks[19].n_prompt == 3 && d.chunks[19].n_gen == 4 &&
                  d.chunks[19].n_cached == 1,
              "the final chunk");
        CHECK(d.chunks[18].finish == PF_STOP && d.chunks[18].stop_hit == 3 && d.chunks[19].stop_hit == 0,
              "stop_hit: %d", d.chunks[18].stop_hit);
    }
    proto_msg_free(&d);

    proto_chunkbuf_reset(&b); /* the next step's message, in the same allocation */
    char *data = b.sb.data;
    struct proto_chunk c = {.sid = 9, .token = 5, .text = "hé"};
    CHECK(proto_chunkbuf_add(&b, &c, 3, &e) == 0 && proto_chunkbuf_end(&b, &buf, &len, &e) == 0, "second message");
    CHECK(b.sb.data == data, "the buffer is reused");
    CHECK(proto_decode(buf, len, &d, &e) == 0 && d.n_chunks == 1, "second message decodes alone");
    if (d.n_chunks == 1)
        CHECK(d.chunks[0].sid == 9 && d.chunks[0].token == 5 && !strcmp(d.chunks[0].text, "hé"), "its chunk");
    proto_msg_free(&d);
    proto_chunkbuf_free(&b);
}

static void small_types_roundtrip(void)
{
    struct proto_msg m, d;
    proto_error(&m, 9, PE_QUEUE_FULL, "queue full (8 waiting)");
    CHECK(roundtrip(&m, &d) == 0, "error");
    CHECK(d.type == PT_ERROR && d.id == 9 && d.errc == PE_QUEUE_FULL, "error fields");
    CHECK(d.message && !strcmp(d.message, "queue full (8 waiting)"), "error message");
    CHECK_EQ_INT(proto_errc_http(d.errc), 429);
    proto_msg_free(&d);

    proto_msg_init(&m, PT_NEXT);
    m.id = 3;
    m.from = 12;
    m.wait_ms = 250;
    CHECK(roundtrip(&m, &d) == 0 && d.from == 12 && d.wait_ms == 250, "next");
    proto_msg_free(&d);

    proto_msg_init(&m, PT_TOKENIZE);
    m.text = "hi";
    m.add_special = false;
    CHECK(roundtrip(&m, &d) == 0 && d.text && !strcmp(d.text, "hi") && !d.add_special && d.parse_special,
          "tokenize");
    proto_msg_free(&d);

    int32_t t[] = {1, 2, 3};
    proto_msg_init(&m, PT_TOKENS);
    m.tokens = t;
    m.n_tokens = 3;
    CHECK(roundtrip(&m, &d) == 0 && d.n_tokens == 3 && d.tokens[2] == 3, "tokens");
    proto_msg_free(&d);

    proto_msg_init(&m, PT_TOKENS); /* an empty list is still a list */
    m.tokens = t;
    m.n_tokens = 0;
    CHECK(roundtrip(&m, &d) == 0 && d.n_tokens == 0, "empty tokens");
    proto_msg_free(&d);

    proto_msg_init(&m, PT_READY);
    m.worker = (struct proto_worker){.idx = 1, .device = "cpu", .backend = "cpu", .model = "stories260K",
                                     .slots = 4, .n_ctx = 512, .n_vocab = 512, .mem = 1u << 20};
    CHECK(roundtrip(&m, &d) == 0 && d.worker.slots == 4 && d.worker.mem == 1u << 20 &&
              !strcmp(d.worker.model, "stories260K"),
          "ready");
    proto_msg_free(&d);

    struct proto_worker ws[2] = {{.idx = 0, .device = "cpu", .state = "ready", .pid = 123},
                                 {.idx = 1, .device = "0", .state = "restarting", .restarts = 2}};
    char *models[] = {"stories260K"};
    proto_msg_init(&m, PT_STATUS_REPLY);
    m.status = (struct proto_status){.ready = true, .version = "0.1", .active = 3, .queued = 1,
                                     .models = models, .n_models = 1, .workers = ws, .n_workers = 2};
    CHECK(roundtrip(&m, &d) == 0 && d.status.ready && d.status.n_workers == 2 && d.status.workers[1].restarts == 2 &&
              !strcmp(d.status.workers[1].state, "restarting") && d.status.n_models == 1,
          "status");
    proto_msg_free(&d);

    int types[] = {PT_STATUS, PT_CANCEL, PT_OK, PT_PING, PT_PONG, PT_SHUTDOWN, PT_ACCEPTED};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        proto_msg_init(&m, types[i]);
        m.id = 42;
        CHECK(roundtrip(&m, &d) == 0 && d.type == types[i] && d.id == 42, "type %s", proto_type_name(types[i]));
        proto_msg_free(&d);
    }
}

/* Hand-packed maps: what another implementation might send. */
static int decode_packed(void (*pack)(msgpack_packer *), struct proto_msg *d, struct err *e)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack(&pk);
    int rc = proto_decode(sb.data, sb.size, d, e);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static void ps(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

static void pack_unknown(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 5);
    ps(pk, "v"); msgpack_pack_int(pk, 1);
    ps(pk, "t"); ps(pk, "cancel");
    ps(pk, "future_field"); msgpack_pack_array(pk, 2); msgpack_pack_nil(pk); msgpack_pack_true(pk);
    ps(pk, "id"); msgpack_pack_uint64(pk, 8);
    msgpack_pack_int(pk, 17); msgpack_pack_int(pk, 18); /* a non-string key is ignored too */
}
static void pack_no_version(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 2);
    ps(pk, "t"); ps(pk, "status");
    ps(pk, "id"); msgpack_pack_uint64(pk, 8);
}
static void pack_new_version(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 2);
    ps(pk, "v"); msgpack_pack_int(pk, 99);
    ps(pk, "t"); ps(pk, "status");
}
static void pack_gen_no_prompt(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    ps(pk, "v"); msgpack_pack_int(pk, 1);
    ps(pk, "t"); ps(pk, "generate");
    ps(pk, "gen"); msgpack_pack_map(pk, 1); ps(pk, "temperature"); msgpack_pack_float(pk, 0.5f);
}
static void pack_gen_bad_type(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    ps(pk, "v"); msgpack_pack_int(pk, 1);
    ps(pk, "t"); ps(pk, "generate");
    ps(pk, "gen"); msgpack_pack_map(pk, 2); ps(pk, "prompt"); ps(pk, "x");
    ps(pk, "top_k"); ps(pk, "forty");
}
static void pack_tokens_bad_elem(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    ps(pk, "v"); msgpack_pack_int(pk, 1);
    ps(pk, "t"); ps(pk, "tokens");
    ps(pk, "tokens"); msgpack_pack_array(pk, 2); msgpack_pack_int(pk, 1); msgpack_pack_double(pk, 2.5);
}
static void pack_next_no_id(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 2);
    ps(pk, "v"); msgpack_pack_int(pk, 1);
    ps(pk, "t"); ps(pk, "next");
}
static void pack_not_map(msgpack_packer *pk) { msgpack_pack_array(pk, 1); msgpack_pack_int(pk, 1); }
static void pack_unknown_type(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 2);
    ps(pk, "v"); msgpack_pack_int(pk, 1);
    ps(pk, "t"); ps(pk, "launch_rockets");
}

static void unknown_and_missing_fields(void)
{
    struct proto_msg d;
    struct err e;
    CHECK(decode_packed(pack_unknown, &d, &e) == 0 && d.type == PT_CANCEL && d.id == 8, "unknown fields ignored");
    proto_msg_free(&d);
    struct { void (*fn)(msgpack_packer *); int code; const char *needle; } bad[] = {
        {pack_no_version, ERR_FORMAT, "'v'"},
        {pack_new_version, ERR_UNSUPPORTED, "version 99"},
        {pack_gen_no_prompt, ERR_FORMAT, "prompt"},
        {pack_gen_bad_type, ERR_FORMAT, "top_k"},
        {pack_tokens_bad_elem, ERR_FORMAT, "tokens"},
        {pack_next_no_id, ERR_FORMAT, "'id'"},
        {pack_not_map, ERR_FORMAT, "not a map"},
        {pack_unknown_type, ERR_FORMAT, "launch_rockets"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = decode_packed(bad[i].fn, &d, &e);
        CHECK(rc == bad[i].code, "case %zu: rc %d", i, rc);
        CHECK(strstr(e.msg, bad[i].needle) != NULL, "case %zu: message '%s' lacks '%s'", i, e.msg, bad[i].needle);
        proto_msg_free(&d);
    }
    /* the type survives a failed decode so a receiver can answer in kind */
    decode_packed(pack_gen_bad_type, &d, &e);
    CHECK_EQ_INT(d.type, PT_GENERATE);
    proto_msg_free(&d);
}

/* A ready message as a worker from before the load split and the memory breakdown sends it. */
static void pack_old_ready(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    ps(pk, "v"); msgpack_pack_int(pk, 1);
    ps(pk, "t"); ps(pk, "ready");
    ps(pk, "worker"); msgpack_pack_map(pk, 3);
    ps(pk, "idx"); msgpack_pack_int(pk, 2);
    ps(pk, "slots"); msgpack_pack_int(pk, 4);
    ps(pk, "mem"); msgpack_pack_uint64(pk, 1234);
}
/* ... and one whose breakdown holds a negative number (a broken peer) */
static void pack_bad_breakdown(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    ps(pk, "v"); msgpack_pack_int(pk, 1);
    ps(pk, "t"); ps(pk, "ready");
    ps(pk, "worker"); msgpack_pack_map(pk, 1);
    ps(pk, "mem_snap"); msgpack_pack_int(pk, -5);
}

/* The load split and the memory breakdown travel in the worker record (ready, status), every field,
 * and an older peer's record without them decodes with zeros. */
static void worker_load_and_memory(void)
{
    struct proto_msg m, d;
    struct err e;
    proto_msg_init(&m, PT_READY);
    m.worker = (struct proto_worker){ .idx = 0, .device = "0", .backend = "hip", .model = "q", .slots = 32,
                                      .load_ms = 5200, .read_ms = 1100, .compile_ms = 400, .upload_ms = 3200,
                                      .alloc_ms = 500, .mem_weights = 15461882265ull, .mem_kv = 2147483648ull,
                                      .mem_state = 5020581888ull, .mem_snap = 20082327552ull, .mem_scratch = 7,
                                      .state_per_slot = 156893184ull, .n_snap = 4, .dev_used = 43000000000ull,
                                      .dev_total = 150754820096ull };
    CHECK(roundtrip(&m, &d) == 0, "ready with the breakdown decodes");
    const struct proto_worker *w = &d.worker;
    CHECK(w->load_ms == 5200 && w->read_ms == 1100 && w->compile_ms == 400 && w->upload_ms == 3200 &&
              w->alloc_ms == 500,
          "load split %llu %llu %llu %llu %llu", (unsigned long long)w->load_ms, (unsigned long long)w->read_ms,
          (unsigned long long)w->compile_ms, (unsigned long long)w->upload_ms, (unsigned long long)w->alloc_ms);
    CHECK(w->mem_weights == 15461882265ull && w->mem_kv == 2147483648ull && w->mem_state == 5020581888ull &&
              w->mem_snap == 20082327552ull && w->mem_scratch == 7 && w->state_per_slot == 156893184ull &&
              w->n_snap == 4 && w->dev_used == 43000000000ull && w->dev_total == 150754820096ull,
          "memory breakdown");
    /* the daemon hands its copy on in status replies */
    struct proto_worker cp;
    CHECK(proto_worker_copy(&cp, w, &e) == 0 && cp.mem_snap == w->mem_snap && cp.upload_ms == 3200, "copy");
    proto_worker_free(&cp);
    proto_msg_free(&d);

    CHECK(decode_packed(pack_old_ready, &d, &e) == 0 && d.worker.idx == 2 && d.worker.mem == 1234,
          "an older worker's ready decodes: %s", e.msg);
    CHECK(d.worker.load_ms == 0 && d.worker.mem_weights == 0 && d.worker.n_snap == 0 && d.worker.dev_total == 0,
          "... with the new fields 0");
    proto_msg_free(&d);
    CHECK(decode_packed(pack_bad_breakdown, &d, &e) == ERR_FORMAT && strstr(e.msg, "mem_snap"),
          "a negative byte count is refused by name: %s", e.msg);
    proto_msg_free(&d);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static void decoder_fuzz(void)
{
    /* seeds: one valid encoding of each rich type */
    struct proto_msg m;
    char *seeds[4];
    size_t lens[4];
    struct err e;
    proto_msg_init(&m, PT_GENERATE);
    int32_t toks[] = {1, 2, 3};
    char *stop[] = {"a", "bc"};
    struct proto_bias bias[] = {{.token = 5, .bias = 1.0f}};
    json_t *chat = json_pack("[{s:s, s:s}]", "role", "user", "content", "hi");
    m.gen.prompt = "x";
    m.gen.tokens = toks;
    m.gen.n_tokens = 3;
    m.gen.stop = stop;
    m.gen.n_stop = 2;
    m.gen.logit_bias = bias;
    m.gen.n_logit_bias = 1;
    m.gen.messages = chat;
    m.gen.set = 0x7ff;
    proto_encode(&m, &seeds[0], &lens[0], &e);
    json_decref(chat);
    struct proto_top top[] = {{1, -1.0f, "t"}};
    struct proto_chunk c[2] = {{.i = 0, .token = 1, .text = "a", .has_logprob = true, .top = top, .n_top = 1},
                               {.i = 1, .token = -1, .finish = PF_ERROR, .message = "m"}};
    proto_msg_init(&m, PT_CHUNKS);
    m.id = 1;
    m.chunks = c;
    m.n_chunks = 2;
    proto_encode(&m, &seeds[1], &lens[1], &e);
    struct proto_worker ws[1] = {{.device = "cpu", .model = "m"}};
    char *models[] = {"m"};
    proto_msg_init(&m, PT_STATUS_REPLY);
    m.status = (struct proto_status){.models = models, .n_models = 1, .workers = ws, .n_workers = 1};
    proto_encode(&m, &seeds[2], &lens[2], &e);
    proto_error(&m, 3, PE_TOO_LONG, "long");
    proto_encode(&m, &seeds[3], &lens[3], &e);

    int ok = 0, rejected = 0;
    uint8_t buf[4096];
    for (int it = 0; it < 100000; it++) {
        int s = (int)(rnd() % 4);
        size_t len = lens[s];
        memcpy(buf, seeds[s], len);
        int kind = (int)(rnd() % 4);
        if (kind == 0) { /* flip bytes */
            int k = 1 + (int)(rnd() % 4);
            for (int j = 0; j < k; j++)
                buf[rnd() % len] = (uint8_t)rnd();
        } else if (kind == 1) { /* truncate */
            len = rnd() % len;
        } else if (kind == 2) { /* type-confusing bytes: large container headers */
            static const uint8_t heads[] = {0xdd, 0xdf, 0xdc, 0xde, 0xc6, 0xdb, 0xc9, 0x9f, 0x8f, 0xc1};
            buf[rnd() % len] = heads[rnd() % sizeof heads];
        } else { /* random bytes */
            len = 1 + rnd() % 64;
            for (size_t j = 0; j < len; j++)
                buf[j] = (uint8_t)rnd();
        }
        struct proto_msg d;
        int rc = proto_decode(buf, len, &d, &e);
        if (rc == 0)
            ok++;
        else
            rejected++;
        proto_msg_free(&d);
    }
    printf("# fuzz: 100000 mutated messages, %d decoded, %d rejected\n", ok, rejected);
    CHECK(rejected > 50000, "most mutations are rejected (%d)", rejected);
    CHECK(proto_decode(NULL, 0, &m, &e) == ERR_FORMAT, "empty");
    uint8_t huge[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    CHECK(proto_decode(huge, sizeof huge, &m, &e) == ERR_FORMAT, "4G-element array header");
    for (int i = 0; i < 4; i++)
        free(seeds[i]);
}

/* Embeddings: a generate asking for one (embed, pooling) and the final chunk carrying the vector as
 * little-endian f32 bytes, exact through the encoder, the batched encoder and proto_chunk_copy. */
static void embedding_roundtrip(void)
{
    struct proto_msg m, d;
    proto_msg_init(&m, PT_GENERATE);
    m.id = 9;
    int32_t toks[] = {5, 6, 7};
    m.gen.tokens = toks;
    m.gen.n_tokens = 3;
    m.gen.embed = true;
    m.gen.pooling = 1;
    CHECK(roundtrip(&m, &d) == 0, "generate round trip");
    CHECK(d.gen.embed && d.gen.pooling == 1, "embed %d pooling %d", d.gen.embed, d.gen.pooling);
    proto_msg_free(&d);
    m.gen.embed = false;
    CHECK(roundtrip(&m, &d) == 0 && !d.gen.embed && d.gen.pooling == 0, "a generation says nothing of embeddings");
    proto_msg_free(&d);

    float v[300];
    for (int i = 0; i < 300; i++)
        v[i] = (float)sin(i * 0.37) * (i % 7 ? 1.0f : 1e-30f);
    v[5] = -0.0f;
    struct proto_chunk c = {.token = -1, .text = "", .finish = PF_STOP, .n_prompt = 3, .embd = v, .n_embd = 300};
    proto_msg_init(&m, PT_CHUNKS);
    m.id = 9;
    m.chunks = &c;
    m.n_chunks = 1;
    CHECK(roundtrip(&m, &d) == 0 && d.n_chunks == 1, "chunks round trip");
    if (d.n_chunks == 1) {
        CHECK(d.chunks[0].n_embd == 300 && !memcmp(d.chunks[0].embd, v, sizeof v), "the vector, bit for bit");
        struct proto_chunk cp;
        struct err e;
        CHECK(proto_chunk_copy(&cp, &d.chunks[0], &e) == 0, "copy");
        CHECK(cp.n_embd == 300 && cp.embd != d.chunks[0].embd && !memcmp(cp.embd, v, sizeof v), "a copy of its own");
        proto_chunk_free(&cp);
    }
    proto_msg_free(&d);
    struct proto_chunkbuf b = {0};
    struct err e;
    const char *buf = NULL;
    size_t len = 0;
    c.sid = 4;
    bool made = proto_chunkbuf_add(&b, &c, 0, &e) == 0 && proto_chunkbuf_end(&b, &buf, &len, &e) == 0;
    CHECK(made, "batched");
    CHECK(made && proto_decode(buf, len, &d, &e) == 0 && d.n_chunks == 1, "batched decodes");
    if (d.n_chunks == 1)
        CHECK(d.chunks[0].n_embd == 300 && !memcmp(d.chunks[0].embd, v, sizeof v), "batched vector, bit for bit");
    proto_msg_free(&d);
    proto_chunkbuf_free(&b);
}

int main(void)
{
    RUN(embedding_roundtrip);
    RUN(generate_roundtrip);
    RUN(chunks_roundtrip);
    RUN(poll_group_roundtrip);
    RUN(stream_ids_128);
    RUN(chunkbuf_messages);
    RUN(chat_values_checked);
    RUN(sampling_fields_roundtrip);
    RUN(small_types_roundtrip);
    RUN(unknown_and_missing_fields);
    RUN(worker_load_and_memory);
    RUN(decoder_fuzz);
    CHECK_EXIT();
}
