/* test_grammar.c — the byte grammar (worker/serve/gram.h), the JSON-schema
 * compiler (jsg_schema.h) and the token mask, against hand-written strings
 * and a brute-force mask; plus the sampler honouring a mask. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../worker/serve/gram.h"
#include "../worker/serve/gram_cache.h"
#include "../worker/serve/jsg_schema.h"
#include "../worker/serve/sampling.h"
#include "check.h"

static bool match(const struct gram *g, const char *s) { return gram_match(g, s, strlen(s)); }

static struct gram *schema(const char *text)
{
    struct gram *g = NULL;
    struct err e = {0};
    if (jsg_compile_text(text, strlen(text), &g, &e))
        printf("#   jsg_compile_text(%s): %s\n", text, e.msg);
    return g;
}

/* Hand-built: S ::= "(" S ")" S | ε (balanced parentheses), and repetition bounds. */
static void builder_basics(void)
{
    struct gram *g = gram_new();
    struct gram_seq q;
    gram_seq_init(&q);
    int32_t s = gram_rule_new(g);
    gram_seq_lit(g, &q, "(", 1);
    gram_seq_ref(&q, s);
    gram_seq_lit(g, &q, ")", 1);
    gram_seq_ref(&q, s);
    gram_alt(g, s, &q);
    gram_seq_clear(&q);
    gram_alt(g, s, &q);
    CHECK(gram_error(g, NULL) == 0, "grammar built");
    CHECK(match(g, ""), "empty");
    CHECK(match(g, "()"), "()");
    CHECK(match(g, "(()())()"), "nested");
    CHECK(!match(g, "(()"), "unbalanced open");
    CHECK(!match(g, "())"), "unbalanced close");
    CHECK(!match(g, "x"), "foreign byte");
    /* a{2,4} then b+ */
    struct gram *h = gram_new();
    int32_t root = gram_rule_new(h);
    gram_seq_clear(&q);
    gram_seq_lit(h, &q, "a", 1);
    int32_t a = gram_rule_of(h, &q);
    gram_seq_clear(&q);
    gram_seq_lit(h, &q, "b", 1);
    int32_t b = gram_rule_of(h, &q);
    gram_seq_clear(&q);
    gram_seq_ref(&q, gram_rule_repeat(h, a, 2, 4));
    gram_seq_ref(&q, gram_rule_repeat(h, b, 1, -1));
    gram_alt(h, root, &q);
    CHECK(!match(h, "ab"), "a{2,4}: one a");
    CHECK(match(h, "aab"), "two a");
    CHECK(match(h, "aaaabbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"), "four a, many b");
    CHECK(!match(h, "aaaaab"), "five a");
    CHECK(!match(h, "aa"), "no b");
    /* state queries */
    struct gram_state *st = gram_state_new(h, NULL);
    CHECK(st && gram_accepts_byte(st, 'a') && !gram_accepts_byte(st, 'b'), "first byte");
    CHECK(gram_advance(st, "aa", 2, NULL) == 0 && !gram_complete(st), "aa incomplete");
    CHECK(gram_accepts_byte(st, 'a') && gram_accepts_byte(st, 'b'), "a or b after aa");
    CHECK(gram_advance(st, "c", 1, NULL) == ERR_INVALID, "c refused");
    CHECK(gram_advance(st, "b", 1, NULL) == 0 && gram_complete(st) && !gram_finished(st), "aab complete, b may follow");
    gram_state_free(st);
    /* left recursion cannot hang the parser: L ::= L "x" | "y" gives up (bounded) */
    struct gram *l = gram_new();
    int32_t L = gram_rule_new(l);
    gram_seq_clear(&q);
    gram_seq_ref(&q, L);
    gram_seq_lit(l, &q, "x", 1);
    gram_alt(l, L, &q);
    gram_seq_clear(&q);
    gram_seq_lit(l, &q, "y", 1);
    gram_alt(l, L, &q);
    CHECK(match(l, "y") || !match(l, "y"), "left recursion returns");
    CHECK(gram_check(l, NULL) == ERR_INVALID, "left recursion found");
    CHECK(gram_check(g, NULL) == 0 && gram_check(h, NULL) == 0, "right recursion and repetition are fine");
    gram_seq_free(&q);
    gram_free(g);
    gram_free(h);
    gram_free(l);
}

struct want {
    const char *text;
    bool ok;
};

static void check_schema(const char *sch, const struct want *w, size_t n)
{
    struct gram *g = schema(sch);
    CHECK(g != NULL, "compiled %s", sch);
    if (!g)
        return;
    for (size_t i = 0; i < n; i++)
        CHECK(match(g, w[i].text) == w[i].ok, "schema %s: \"%s\" should be %s", sch, w[i].text,
              w[i].ok ? "accepted" : "refused");
    gram_free(g);
}

static void json_object_any(void)
{
    static const struct want w[] = {
        {"{}", true}, {" {}", true}, {"{\"a\": 1}", true}, {"{\"a\":[1,2,{\"b\":null}],\"c\":\"x\\n\\u00e9\"}", true},
        {"{\n  \"a\": true\n}", true}, {"[]", false}, {"1", false}, {"{\"a\":}", false}, {"{\"a\" 1}", false},
        {"{\"a\":1,}", false}, {"{'a':1}", false}, {"{\"a\":01}", false}, {"{\"a\":1.}", false},
        {"{\"a\":\"\\ud800\"}", false}, /* a lone surrogate: jansson refuses it */
        {"{\"a\":\"\\u0000\"}", false}, {"{\"a\":\"\x01\"}", false}, {"{\"a\":\"\xc3\xa9\"}", true},
        {"{\"a\":\"\xc0\x80\"}", false}, /* overlong */
        {"{\"a\":1}     ", false},     /* more whitespace than the bound */
        {"{\"a\":12345678901234567890}", false}, /* past 64-bit */
    };
    check_schema("{\"type\":\"object\"}", w, sizeof w / sizeof w[0]);
}

static void schema_objects(void)
{
    const char *s = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
                    "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},"
                    "\"minItems\":1,\"maxItems\":2}},\"required\":[\"name\",\"tags\"],\"additionalProperties\":false}";
    static const struct want w[] = {
        {"{\"name\":\"bob\",\"tags\":[\"a\"]}", true},
        {"{\"name\":\"bob\",\"age\":-3,\"tags\":[\"a\",\"b\"]}", true},
        {"{ \"name\": \"\", \"age\": 0, \"tags\": [ \"b\" ] }", true},
        {"{\"tags\":[\"a\"],\"name\":\"bob\"}", false},          /* order */
        {"{\"name\":\"bob\"}", false},                          /* required missing */
        {"{\"name\":\"bobbyy\",\"tags\":[\"a\"]}", false},       /* maxLength */
        {"{\"name\":\"bob\",\"tags\":[]}", false},               /* minItems */
        {"{\"name\":\"bob\",\"tags\":[\"a\",\"a\",\"a\"]}", false}, /* maxItems */
        {"{\"name\":\"bob\",\"tags\":[\"c\"]}", false},          /* enum */
        {"{\"name\":\"bob\",\"age\":1.5,\"tags\":[\"a\"]}", false}, /* integer */
        {"{\"name\":\"bob\",\"tags\":[\"a\"],\"x\":1}", false},  /* additionalProperties false */
    };
    check_schema(s, w, sizeof w / sizeof w[0]);
    /* extra properties allowed after the listed ones when additionalProperties is absent */
    static const struct want w2[] = {
        {"{\"a\":1}", true}, {"{\"a\":1,\"zz\":[true]}", true}, {"{\"zz\":1}", false}, {"{}", false},
        /* an extra member never repeats a listed name (its value would not be checked against its schema) */
        {"{\"a\":1,\"a\":\"x\"}", false}, {"{\"a\":1,\"\\u0061\":\"x\"}", false}, {"{\"a\":1,\"ab\":\"x\"}", true},
        {"{\"a\":1,\"\":0}", true}, {"{\"a\":1,\"b\u00e9\":0}", true}, {"{\"a\":1,\"b\u00e9x\":0}", true},
        {"{\"a\":1,\"b\u00e9\u00e9\":0}", false}, {"{\"a\":1,\"b\u00e8\":0}", false} /* shares é's first byte: not offered (a subset) */, {"{\"a\":1,\"b\":0}", true},
        {"{\"a\":1,\"b\u00e9\u00e9x\":0}", true},
    };
    check_schema("{\"properties\":{\"a\":{\"type\":\"number\"},\"b\u00e9\u00e9\":{\"type\":\"null\"}},"
                 "\"required\":[\"a\"]}",
                 w2, sizeof w2 / sizeof w2[0]);
}

static void schema_scalars(void)
{
    static const struct want num[] = {{"0", true}, {"-0.5e+10", true}, {"1E2", true}, {"3.25", true}, {"-", false},
                                      {"00", false}, {".5", false}, {"1e", false}, {"1e123", false}};
    check_schema("{\"type\":\"number\"}", num, sizeof num / sizeof num[0]);
    static const struct want tarr[] = {{"null", true}, {"\"x\"", true}, {"1", false}, {"true", false}};
    check_schema("{\"type\":[\"string\",\"null\"]}", tarr, 4);
    static const struct want any[] = {{"1", true}, {"{\"k\":[true]}", true}, {"true", true}, {"\"a\"", false},
                                      {"[1]", false}};
    check_schema("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"object\"},{\"const\":true}]}", any, 5);
    static const struct want len[] = {{"\"ab\"", true}, {"\"a\"", false}, {"\"abcd\"", false}, {"\"\\n\\t\\\"\"", true},
                                      {"\"\xe2\x82\xac\xe2\x82\xac\"", true}};
    check_schema("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", len, 5);
    static const struct want date[] = {{"\"2024-02-29\"", true}, {"\"2024-13-01\"", false}, {"\"2024-1-01\"", false},
                                       {"\"2024-12-31x\"", false}};
    check_schema("{\"type\":\"string\",\"format\":\"date\"}", date, 4);
    static const struct want dt[] = {{"\"2024-02-29T23:59:60Z\"", false}, {"\"2024-02-29T23:59:59Z\"", true},
                                     {"\"2024-02-29T00:00:00.123+05:30\"", true}, {"\"2024-02-29 00:00:00Z\"", false}};
    check_schema("{\"type\":\"string\",\"format\":\"date-time\"}", dt, 4);
    static const struct want uu[] = {{"\"123e4567-e89b-12d3-a456-426614174000\"", true},
                                     {"\"123e4567e89b-12d3-a456-426614174000\"", false}};
    check_schema("{\"type\":\"string\",\"format\":\"uuid\"}", uu, 2);
    static const struct want tm[] = {{"\"12:30:00Z\"", true}, {"\"24:00:00Z\"", false}, {"\"12:30:00\"", false}};
    check_schema("{\"type\":\"string\",\"format\":\"time\"}", tm, 3);
    static const struct want pat[] = {{"\"ab-12\"", true}, {"\"AB-1\"", true}, {"\"ab-\"", false}, {"\"x ab-1\"", false},
                                      {"\"ab_1\"", false}, {"\"q\"", true}, {"\"a\\\"b\"", true}};
    check_schema("{\"type\":\"string\",\"pattern\":\"^([a-zA-Z]{2}-\\\\d{1,3}|q|a\\\"b)$\"}", pat, 7);
    static const struct want unanch[] = {{"\"xxabcyy\"", true}, {"\"abx\"", false}};
    check_schema("{\"type\":\"string\",\"pattern\":\"a.c\"}", unanch, 2);
    static const struct want en[] = {{"1", true}, {"\"x\"", true}, {"null", true}, {"{\"a\":[1]}", true},
                                     {"2", false}, {"{\"a\": [1]}", false}};
    check_schema("{\"enum\":[1,\"x\",null,{\"a\":[1]}]}", en, 6);
}

static void schema_refs(void)
{
    /* a recursive tree through $defs */
    const char *s = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                    "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":3}},"
                    "\"required\":[\"v\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}";
    static const struct want w[] = {
        {"{\"v\":1}", true}, {"{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4}]}]}", true},
        {"{\"v\":1,\"kids\":[{\"w\":2}]}", false}, {"{\"kids\":[]}", false},
    };
    check_schema(s, w, 4);
    static const struct want w2[] = {{"{\"a\":\"x\"}", true}, {"{\"a\":1}", false}};
    check_schema("{\"definitions\":{\"s\":{\"type\":\"string\"}},\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":"
                 "\"#/definitions/s\"}},\"required\":[\"a\"],\"additionalProperties\":false}",
                 w2, 2);
}

/* Outside the subset: an error that names the keyword. */
static void schema_errors(void)
{
    static const char *const bad[][2] = {
        {"{\"type\":\"object\",\"patternProperties\":{}}", "'patternProperties'"},
        {"{\"type\":\"integer\",\"minimum\":3}", "'minimum'"},
        {"{\"allOf\":[{\"type\":\"string\"}]}", "'allOf'"},
        {"{\"type\":\"string\",\"format\":\"email\"}", "'format'"},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "'pattern'"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\1\"}", "'pattern'"},
        {"{\"$ref\":\"http://x/y\"}", "'$ref'"},
        {"{\"type\":\"uuid\"}", "'type'"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}", "'not'"},
        {"{\"type\":\"object\",\"required\":[\"b\"],\"properties\":{\"a\":{}}}", "'required'"},
        /* recursion before any text: would expand 2^depth ways */
        {"{\"anyOf\":[{\"$ref\":\"#\"},{\"$ref\":\"#\"},{\"type\":\"null\"}]}", "'$ref'"},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "'$ref'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct gram *g = NULL;
        struct err e = {0};
        int rc = jsg_compile_text(bad[i][0], strlen(bad[i][0]), &g, &e);
        CHECK(rc == ERR_INVALID && !g && strstr(e.msg, bad[i][1]), "%s: rc %d, message \"%s\" should name %s",
              bad[i][0], rc, e.msg, bad[i][1]);
        gram_free(g);
    }
    struct gram *g = NULL;
    struct err e = {0};
    const char *big = "{\"type\":\"string\",\"maxLength\":100000}";
    CHECK(jsg_compile_text(big, strlen(big), &g, &e) == ERR_RANGE &&
              strstr(e.msg, "maxLength"), "too large a bound: %s", e.msg);
    CHECK(jsg_compile_text("{nope", 5, &g, &e) == ERR_INVALID, "not JSON");
    /* the nested path is in the message */
    const char *deep = "{\"properties\":{\"a\":{\"items\":{\"oneOf\":[{\"maximum\":1}]}}}}";
    CHECK(jsg_compile_text(deep, strlen(deep), &g, &e) ==
              ERR_INVALID && strstr(e.msg, "#/properties/a/items/oneOf/0"), "path: %s", e.msg);
}

/* ---- the mask against brute force */

struct vocab {
    int n;
    char piece[400][8];
    size_t len[400];
};

static size_t vpiece(void *user, int32_t id, char *buf, size_t cap)
{
    struct vocab *v = user;
    if (v->len[id] <= cap)
        memcpy(buf, v->piece[id], v->len[id]);
    return v->len[id];
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* A vocabulary of JSON-ish pieces: every single byte of an alphabet, plus
 * random 2–6 byte strings over it (prefixes of each other share trie paths),
 * plus an empty piece (never allowed) and two multibyte pieces. */
static void make_vocab(struct vocab *v)
{
    static const char alpha[] = "{}[]\":, \n0123456789-.eEabtrufnsl\\";
    size_t na = sizeof alpha - 1;
    v->n = 0;
    for (size_t i = 0; i < na; i++) {
        v->piece[v->n][0] = alpha[i];
        v->len[v->n++] = 1;
    }
    static const char *const fixed[] = {"{\"", "\":", "\",\"", "true", "false", "null", "\"}", "\xc3\xa9", "\xc3",
                                        "\xa9\"", "12", "-0.", "e+", "\": \"", "},{", "]}", ""};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        v->len[v->n] = strlen(fixed[i]);
        memcpy(v->piece[v->n++], fixed[i], strlen(fixed[i]));
    }
    while (v->n < 400) {
        size_t len = 2 + rnd() % 5;
        for (size_t k = 0; k < len; k++)
            v->piece[v->n][k] = alpha[rnd() % na];
        v->len[v->n++] = len;
    }
}

/* Random walks through a schema's grammar: at every step the mask must be
 * exactly the tokens whose bytes a fresh parse of (text so far + piece)
 * accepts; then a random allowed token is taken. */
static void mask_vs_brute(const char *sch, int walks, int steps)
{
    static struct vocab v;
    make_vocab(&v);
    struct err e = {0};
    struct gram *g = schema(sch);
    struct gram_vocab *gv = gram_vocab_new(v.n, vpiece, &v, &e);
    CHECK(g && gv, "setup: %s", e.msg);
    if (!g || !gv) {
        gram_free(g);
        gram_vocab_free(gv);
        return;
    }
    uint32_t allow[(400 + 31) / 32];
    char text[4096];
    int mismatches = 0, completes = 0, total_allowed = 0;
    for (int w = 0; w < walks; w++) {
        struct gram_state *st = gram_state_new(g, &e);
        size_t n_text = 0;
        for (int s = 0; s < steps && st; s++) {
            int32_t cnt = gram_mask(st, gv, allow, &e);
            int32_t brute = 0, bits = 0;
            for (int t = 0; t < v.n; t++) {
                bool want = false;
                if (v.len[t] > 0) {
                    struct gram_state *b = gram_state_new(g, NULL);
                    want = b && gram_advance(b, text, n_text, NULL) == 0 &&
                           gram_advance(b, v.piece[t], v.len[t], NULL) == 0;
                    gram_state_free(b);
                }
                bool got = (allow[t >> 5] >> (t & 31)) & 1u;
                if (want != got && mismatches++ < 5)
                    printf("#   %s after \"%.*s\": token \"%.*s\" mask %d, brute force %d\n", sch, (int)n_text, text,
                           (int)v.len[t], v.piece[t], got, want);
                brute += want;
                bits += got;
            }
            CHECK(cnt == bits, "count %d vs bits %d", cnt, bits);
            total_allowed += brute;
            if (gram_complete(st))
                completes++;
            if (brute == 0)
                break;
            /* take a random allowed token */
            int pick = (int)(rnd() % (uint32_t)brute);
            for (int t = 0; t < v.n; t++)
                if ((allow[t >> 5] >> (t & 31)) & 1u && pick-- == 0) {
                    if (n_text + v.len[t] >= sizeof text)
                        break;
                    CHECK(gram_advance(st, v.piece[t], v.len[t], &e) == 0, "advance: %s", e.msg);
                    if (s % 7 == 6) /* renumbered stacks and an empty memo must give the same masks */
                        CHECK(gram_state_compact(st, &e) == 0, "compact: %s", e.msg);
                    memcpy(text + n_text, v.piece[t], v.len[t]);
                    n_text += v.len[t];
                    break;
                }
        }
        CHECK(!gram_complete(st) || gram_match(g, text, n_text), "complete state means the text matches");
        gram_state_free(st);
    }
    CHECK(mismatches == 0, "%s: %d mask entries differ from brute force", sch, mismatches);
    CHECK(total_allowed > walks, "the walks went somewhere (%d allowed in all)", total_allowed);
    gram_free(g);
    gram_vocab_free(gv);
}

static void mask_brute_object(void) { mask_vs_brute("{\"type\":\"object\"}", 12, 40); }
static void mask_brute_schema(void)
{
    mask_vs_brute("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":\"number\"},"
                  "\"maxItems\":3},\"b\":{\"enum\":[\"true\",true,null]},\"c\":{\"type\":\"string\",\"maxLength\":4}},"
                  "\"required\":[\"a\",\"c\"],\"additionalProperties\":false}",
                  12, 40);
}

/* Random schemas from the subset's keywords: each compiles or fails with a
 * message; texts drawn byte by byte through the mask of a compiled one are
 * JSON (jansson parses them) whenever the state says complete. */
static size_t byte_piece(void *user, int32_t id, char *buf, size_t cap)
{
    (void)user;
    if (cap)
        buf[0] = (char)id;
    return 1;
}

static json_t *random_schema(int depth)
{
    static const char *const leaves[] = {
        "{\"type\":\"integer\"}", "{\"type\":\"number\"}", "{\"type\":\"boolean\"}", "{\"type\":\"null\"}",
        "{\"type\":\"string\",\"maxLength\":3}", "{\"type\":\"string\",\"format\":\"date\"}",
        "{\"type\":\"string\",\"pattern\":\"^a[b-d]?(x|yz)$\"}", "{\"enum\":[\"\\u00e9\\n\\\"\",1.5,[],{}]}",
        "{\"const\":\"q\\\\\"}", "{\"type\":[\"string\",\"integer\"],\"maxLength\":1}", "{\"type\":\"string\",\"format\":\"uuid\"}",
        "{\"type\":\"object\"}", "{}", "{\"type\":\"array\",\"maxItems\":2}",
    };
    if (depth <= 0 || rnd() % 3 == 0)
        return json_loads(leaves[rnd() % (sizeof leaves / sizeof leaves[0])], 0, NULL);
    switch (rnd() % 3) {
    case 0: {
        json_t *props = json_object(), *req = json_array();
        int n = (int)(rnd() % 4);
        for (int i = 0; i < n; i++) {
            char k[16];
            snprintf(k, sizeof k, "k%d", i);
            json_object_set_new(props, k, random_schema(depth - 1));
            if (rnd() % 2)
                json_array_append_new(req, json_string(k));
        }
        return json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties", props, "required", req,
                         "additionalProperties", (int)(rnd() % 2));
    }
    case 1:
        return json_pack("{s:s, s:o, s:i, s:i}", "type", "array", "items", random_schema(depth - 1), "minItems",
                         (int)(rnd() % 2), "maxItems", (int)(1 + rnd() % 3));
    default:
        return json_pack("{s:[o,o]}", rnd() % 2 ? "anyOf" : "oneOf", random_schema(depth - 1), random_schema(depth - 1));
    }
}

static void random_schemas_give_json(void)
{
    struct err e = {0};
    struct gram_vocab *gv = gram_vocab_new(256, byte_piece, NULL, &e);
    CHECK(gv != NULL, "byte vocab: %s", e.msg);
    if (!gv)
        return;
    int compiled = 0, texts = 0, bad = 0;
    uint32_t allow[8];
    char text[2048];
    for (int i = 0; i < 300; i++) {
        json_t *sch = random_schema(3);
        struct gram *g = NULL;
        int rc = jsg_compile(sch, &g, &e);
        CHECK(rc == 0 || (rc < 0 && e.msg[0]), "schema %d: rc %d without a message", i, rc);
        json_decref(sch);
        if (rc)
            continue;
        compiled++;
        for (int w = 0; w < 3; w++) {
            struct gram_state *st = gram_state_new(g, &e);
            size_t n = 0;
            bool done = false;
            while (st && n < sizeof text - 1) {
                if (gram_complete(st) && (gram_finished(st) || rnd() % 4 == 0)) {
                    done = true;
                    break;
                }
                int32_t cnt = gram_mask(st, gv, allow, &e);
                if (cnt <= 0)
                    break;
                /* lean towards closing characters so most walks end */
                int pick = -1;
                for (int tries = 0; tries < 4 && pick < 0; tries++) {
                    const char *closers = "]}\"0";
                    int b = (unsigned char)closers[rnd() % 4];
                    if ((allow[b >> 5] >> (b & 31)) & 1u)
                        pick = b;
                }
                for (int k = (int)(rnd() % (uint32_t)cnt); pick < 0; k--)
                    for (int b = 0; b < 256 && pick < 0; b++)
                        if ((allow[b >> 5] >> (b & 31)) & 1u && k-- == 0)
                            pick = b;
                text[n++] = (char)pick;
                if (gram_advance(st, &text[n - 1], 1, &e)) {
                    CHECK(0, "a masked byte was refused: %s", e.msg);
                    break;
                }
            }
            gram_state_free(st);
            if (!done)
                continue;
            texts++;
            json_error_t je;
            json_t *v = json_loadb(text, n, JSON_DECODE_ANY, &je);
            if (!v && bad++ < 5)
                printf("#   not JSON (%s): %.*s\n", je.text, (int)n, text);
            json_decref(v);
        }
        gram_free(g);
    }
    printf("# %d of 300 random schemas compiled, %d texts drawn\n", compiled, texts);
    CHECK(bad == 0, "%d texts are not JSON", bad);
    CHECK(compiled > 100 && texts > 100, "enough of them ran (%d, %d)", compiled, texts);
    gram_vocab_free(gv);
}

/* The shared mask cache (gram_cache.h): random walks alternate between two grammars compiled from one
 * bounded schema (every step a new parser set), each step's mask through a roomy cache and a cache of
 * three masks (evicting all the time) equal to gram_mask's own walk of a twin state, bits and count.
 * Keys: equal for the two grammars after the same text and unchanged by renumbering the nodes
 * (gram_state_compact), different for another schema; the second walk of equal texts hits. */
static void shared_mask_cache(void)
{
    static struct vocab v;
    make_vocab(&v);
    const char *sch = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
                      "\"n\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":3}},"
                      "\"required\":[\"name\",\"n\"],\"additionalProperties\":false}";
    struct err e = {0};
    struct gram *g[2] = {schema(sch), schema(sch)}, *other = schema("{\"type\":\"array\"}");
    struct gram_vocab *gv = gram_vocab_new(v.n, vpiece, &v, &e);
    struct gram_cache *big = gv ? gram_cache_new(gv, 64u << 20, &e) : NULL;
    struct gram_cache *tiny = gv ? gram_cache_new(gv, 3 * (sizeof(uint32_t) * 13 + 256), &e) : NULL;
    CHECK(g[0] && g[1] && other && gv && big && tiny, "setup: %s", e.msg);
    if (!g[0] || !g[1] || !other || !gv || !big || !tiny)
        goto out;
    CHECK(gram_fingerprint(g[0]) == gram_fingerprint(g[1]) && gram_fingerprint(g[0]) != gram_fingerprint(other),
          "fingerprints: equal schemas alike, another not");
    uint32_t a1[13], a2[13], a3[13];
    int differ = 0, key_differ = 0, steps = 0;
    uint64_t seed0 = rng_state, misses0 = 0;
    for (int pass = 0; pass < 2; pass++) {
        struct gram_cache_stats cs;
        gram_cache_stats(big, &cs);
        misses0 = cs.misses;
        rng_state = seed0; /* the second pass walks the same texts: every mask a hit */
        for (int w = 0; w < 16; w++) {
            struct gram_state *st = gram_state_new(g[w & 1], &e), *twin = gram_state_new(g[w & 1], &e);
            struct gram_state *peer = gram_state_new(g[!(w & 1)], &e);
            for (int s = 0; st && twin && peer && s < 60; s++, steps++) {
                int32_t c1 = gram_cache_mask(big, st, a1, &e), c2 = gram_cache_mask(tiny, st, a2, &e);
                int32_t c3 = gram_mask(twin, gv, a3, &e);
                differ += c1 != c3 || c2 != c3 || memcmp(a1, a3, sizeof a1) || memcmp(a2, a3, sizeof a3);
                size_t n1, n2;
                const int32_t *k1 = gram_state_key(st, &n1, &e);
                int32_t kc[512];
                if (k1 && n1 <= 512)
                    memcpy(kc, k1, n1 * sizeof *k1);
                const int32_t *k2 = gram_state_key(peer, &n2, &e);
                key_differ += !k1 || !k2 || n1 > 512 || n1 != n2 || memcmp(kc, k2, n1 * sizeof *k2);
                if (s % 5 == 4) { /* renumbered nodes, the same key */
                    CHECK(gram_state_compact(st, &e) == 0, "compact");
                    k1 = gram_state_key(st, &n2, &e);
                    key_differ += !k1 || n1 > 512 || n1 != n2 || memcmp(kc, k1, n1 * sizeof *k1);
                }
                if (c3 <= 0)
                    break;
                int pick = (int)(rnd() % (uint32_t)c3);
                for (int t = 0; t < v.n; t++)
                    if ((a3[t >> 5] >> (t & 31)) & 1u && pick-- == 0) {
                        CHECK(gram_advance(st, v.piece[t], v.len[t], &e) == 0 &&
                                  gram_advance(twin, v.piece[t], v.len[t], &e) == 0 &&
                                  gram_advance(peer, v.piece[t], v.len[t], &e) == 0,
                              "advance: %s", e.msg);
                        break;
                    }
            }
            gram_state_free(st);
            gram_state_free(twin);
            gram_state_free(peer);
        }
    }
    CHECK(differ == 0, "%d of %d cached masks differ from the walk", differ, steps);
    CHECK(key_differ == 0, "%d keys differ between equal grammars or after compaction", key_differ);
    struct gram_state *s0 = gram_state_new(g[0], &e), *s1 = gram_state_new(other, &e);
    size_t n0 = 0, n1 = 0;
    const int32_t *k0 = s0 ? gram_state_key(s0, &n0, &e) : NULL;
    int32_t kc[64] = {0};
    if (k0 && n0 <= 64)
        memcpy(kc, k0, n0 * sizeof *k0);
    const int32_t *k1 = s1 ? gram_state_key(s1, &n1, &e) : NULL;
    CHECK(k0 && k1 && (n0 != n1 || memcmp(kc, k1, n0 * sizeof *k1)), "another schema's start has another key");
    gram_state_free(s0);
    gram_state_free(s1);
    struct gram_cache_stats sb, st;
    gram_cache_stats(big, &sb);
    gram_cache_stats(tiny, &st);
    printf("# %d steps: roomy cache %llu hits %llu misses %zu entries; tiny %llu hits %llu evictions\n", steps,
           (unsigned long long)sb.hits, (unsigned long long)sb.misses, sb.entries, (unsigned long long)st.hits,
           (unsigned long long)st.evictions);
    CHECK(sb.misses > 5 && sb.misses == misses0, "the second pass only hits (%llu misses, %llu after the first)",
          (unsigned long long)sb.misses, (unsigned long long)misses0);
    CHECK(st.evictions > 0 && st.entries < 8 && st.bytes <= 3 * (sizeof(uint32_t) * 13 + 256),
          "the tiny cache evicts (%llu, %zu entries)", (unsigned long long)st.evictions, st.entries);
out:
    gram_cache_free(big);
    gram_cache_free(tiny);
    gram_vocab_free(gv);
    gram_free(g[0]);
    gram_free(g[1]);
    gram_free(other);
}

/* A mask ends the candidate list before any sampler: greedy, top-k and
 * bias never reach a forbidden token. */
static void sampler_honours_mask(void)
{
    float logits[100];
    for (int i = 0; i < 100; i++)
        logits[i] = (float)i; /* 99 is the argmax */
    uint32_t allow[4] = {0};
    allow[0] = 1u << 7 | 1u << 3; /* tokens 3 and 7 */
    struct smp_params p = smp_params_default();
    p.temp = 0.0f;
    p.seed = 1;
    struct err e;
    struct smp_chain *c = smp_new(&p, 100, &e);
    CHECK(c != NULL, "smp_new");
    if (!c)
        return;
    CHECK(smp_topk_only(c) == 40, "unmasked chain pre-selects top 40");
    int32_t ids[2] = {3, 7};
    float vals[2] = {3.0f, 7.0f};
    CHECK(smp_sample_cands(c, ids, vals, 2) < 0, "unmasked: 2 candidates are fewer than its k");
    smp_set_allowed(c, allow);
    /* the engine selects among the allowed tokens (engine_decode_topk's allow): with fewer than k allowed,
     * all of them are the candidates */
    CHECK(smp_topk_only(c) == 40, "a masked chain pre-selects too");
    CHECK_EQ_INT(smp_sample(c, logits), 7);
    CHECK_EQ_INT(smp_sample_cands(c, ids, vals, 2), 7);
    CHECK(smp_sample_cands(c, ids, vals, 0) < 0, "masked: no candidate is refused");
    smp_free(c);
    p.temp = 1.0f;
    p.top_k = 1;
    struct smp_bias b = {3, 1000.0f};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    c = smp_new(&p, 100, &e);
    smp_set_allowed(c, allow);
    for (int i = 0; i < 20; i++)
        CHECK_EQ_INT(smp_sample(c, logits), 3); /* the bias moves 3 above 7 */
    allow[0] = 0;
    CHECK(smp_sample(c, logits) < 0, "nothing allowed: no candidate");
    smp_set_allowed(c, NULL);
    CHECK_EQ_INT(smp_sample(c, logits), 3);
    smp_free(c);
}

int main(void)
{
    RUN(builder_basics);
    RUN(json_object_any);
    RUN(schema_objects);
    RUN(schema_scalars);
    RUN(schema_refs);
    RUN(schema_errors);
    RUN(mask_brute_object);
    RUN(mask_brute_schema);
    RUN(random_schemas_give_json);
    RUN(shared_mask_cache);
    RUN(sampler_honours_mask);
    CHECK_EXIT();
}
