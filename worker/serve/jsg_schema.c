/* jsg_schema.c — JSON Schema subset → byte grammar (see jsg_schema.h).
 *
 * Every schema becomes one rule of the grammar. Shared pieces (whitespace,
 * a string character, numbers, any value per nesting depth) are made once,
 * on first use. A failure sets c->rc with the message and every function
 * then returns −1 up the recursion. */
#include "jsg_schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WS_INDENT 16

struct ref_memo {
    char *ref;
    int32_t rule;
};

struct jsg {
    struct gram *g;
    const json_t *root;
    struct err *e;
    int rc;
    char path[512];    /* where the compiler is, for messages ("#/properties/a") */
    int nest;
    int32_t ws, chr, dot, str_any, num, integer, boolean, null;
    int32_t any[JSG_ANY_DEPTH + 1];
    struct ref_memo *refs;
    size_t n_refs, cap_refs;
};

static int32_t fail(struct jsg *c, int code, const char *fmt, ...)
{
    if (c->rc)
        return -1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->rc = err_set(c->e, code, "json schema: %s (at %s)", msg, c->path[0] ? c->path : "#");
    return -1;
}

static int32_t unsupported(struct jsg *c, const char *kw)
{
    return fail(c, ERR_INVALID, "unsupported keyword '%s'", kw);
}

/* ---------------------------------------------------------------- small builders */

static int32_t lit_rule(struct jsg *c, const char *s)
{
    struct gram_seq q;
    gram_seq_init(&q);
    gram_seq_lit(c->g, &q, s, strlen(s));
    int32_t r = gram_rule_of(c->g, &q);
    gram_seq_free(&q);
    return r;
}

/* ws ::= "" | " " | "\n" " "{0,16} */
static int32_t ws(struct jsg *c)
{
    if (c->ws)
        return c->ws;
    struct gram *g = c->g;
    int32_t sp = lit_rule(c, " ");
    int32_t indent = gram_rule_repeat(g, sp, 0, WS_INDENT);
    int32_t r = gram_rule_new(g);
    struct gram_seq q;
    gram_seq_init(&q);
    gram_alt(g, r, &q);
    gram_seq_lit(g, &q, " ", 1);
    gram_alt(g, r, &q);
    gram_seq_clear(&q);
    gram_seq_lit(g, &q, "\n", 1);
    gram_seq_ref(&q, indent);
    gram_alt(g, r, &q);
    gram_seq_free(&q);
    return c->ws = r;
}

/* One UTF-8 character of 2–4 bytes, exactly the valid ones (no overlongs,
 * no surrogates, ≤ U+10FFFF): jansson refuses anything else. Leading bytes
 * in excl (NULL none) are left out; tail (≥ 0) follows each alternative. */
static void add_multibyte_excl(struct gram *g, int32_t r, const struct gram_set *excl, int32_t tail)
{
    static const unsigned char seqs[][4][2] = {
        {{0xc2, 0xdf}, {0x80, 0xbf}},
        {{0xe0, 0xe0}, {0xa0, 0xbf}, {0x80, 0xbf}},
        {{0xe1, 0xec}, {0x80, 0xbf}, {0x80, 0xbf}},
        {{0xed, 0xed}, {0x80, 0x9f}, {0x80, 0xbf}},
        {{0xee, 0xef}, {0x80, 0xbf}, {0x80, 0xbf}},
        {{0xf0, 0xf0}, {0x90, 0xbf}, {0x80, 0xbf}, {0x80, 0xbf}},
        {{0xf1, 0xf3}, {0x80, 0xbf}, {0x80, 0xbf}, {0x80, 0xbf}},
        {{0xf4, 0xf4}, {0x80, 0x8f}, {0x80, 0xbf}, {0x80, 0xbf}},
    };
    struct gram_seq q;
    gram_seq_init(&q);
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
        gram_seq_clear(&q);
        struct gram_set lead;
        gram_set_clear(&lead);
        bool any = false;
        for (unsigned b = seqs[i][0][0]; b <= seqs[i][0][1]; b++)
            if (!excl || !gram_set_has(excl, b)) {
                gram_set_add(&lead, b, b);
                any = true;
            }
        if (!any)
            continue;
        gram_seq_set(g, &q, &lead);
        for (int k = 1; k < 4 && seqs[i][k][0]; k++)
            gram_seq_range(g, &q, seqs[i][k][0], seqs[i][k][1]);
        if (tail >= 0)
            gram_seq_ref(&q, tail);
        gram_alt(g, r, &q);
    }
    gram_seq_free(&q);
}

static void add_multibyte(struct gram *g, int32_t r) { add_multibyte_excl(g, r, NULL, -1); }

static void add_hex(struct gram *g, struct gram_seq *q)
{
    struct gram_set s;
    gram_set_clear(&s);
    gram_set_add(&s, '0', '9');
    gram_set_add(&s, 'a', 'f');
    gram_set_add(&s, 'A', 'F');
    gram_seq_set(g, q, &s);
}

/* The unescaped alternatives of a string character into rule r: printable ASCII but " and \ (one
 * set, through q), and a multibyte character. */
static void add_plain(struct gram *g, int32_t r, struct gram_seq *q)
{
    struct gram_set s;
    gram_set_clear(&s);
    gram_set_add(&s, 0x20, 0x21);
    gram_set_add(&s, 0x23, 0x5b);
    gram_set_add(&s, 0x5d, 0x7f);
    gram_seq_set(g, q, &s);
    gram_alt(g, r, q);
    add_multibyte(g, r);
}

/* One character of a JSON string's body: printable ASCII but " and \, a
 * multibyte character, or an escape (\uXXXX neither a surrogate nor
 * \u0000, which jansson refuses). */
static int32_t chr(struct jsg *c)
{
    if (c->chr)
        return c->chr;
    struct gram *g = c->g;
    int32_t r = gram_rule_new(g);
    struct gram_seq q;
    gram_seq_init(&q);
    add_plain(g, r, &q);
    struct gram_set s;
    gram_seq_clear(&q);
    gram_seq_lit(g, &q, "\\", 1);
    gram_set_clear(&s);
    const char *esc = "\"\\/bfnrt";
    for (const char *p = esc; *p; p++)
        gram_set_add(&s, (unsigned char)*p, (unsigned char)*p);
    gram_seq_set(g, &q, &s);
    gram_alt(g, r, &q);
    /* \u: first digit 0-9 a-c (not 0000), d0-d7, e-f */
    struct gram_set nz, lo, d07, ef;
    gram_set_clear(&nz);
    gram_set_add(&nz, '1', '9');
    gram_set_add(&nz, 'a', 'f');
    gram_set_add(&nz, 'A', 'F');
    gram_set_clear(&lo);
    gram_set_add(&lo, '1', '9');
    gram_set_add(&lo, 'a', 'c');
    gram_set_add(&lo, 'A', 'C');
    gram_set_clear(&d07);
    gram_set_add(&d07, '0', '7');
    gram_set_clear(&ef);
    gram_set_add(&ef, 'e', 'f');
    gram_set_add(&ef, 'E', 'F');
    /* \u0 followed by 3 hex not all zero */
    gram_seq_clear(&q);
    gram_seq_lit(g, &q, "\\u000", 5);
    gram_seq_set(g, &q, &nz);
    gram_alt(g, r, &q);
    gram_seq_clear(&q);
    gram_seq_lit(g, &q, "\\u00", 4);
    gram_seq_set(g, &q, &nz);
    add_hex(g, &q);
    gram_alt(g, r, &q);
    gram_seq_clear(&q);
    gram_seq_lit(g, &q, "\\u0", 3);
    gram_seq_set(g, &q, &nz);
    add_hex(g, &q);
    add_hex(g, &q);
    gram_alt(g, r, &q);
    gram_seq_clear(&q);
    gram_seq_lit(g, &q, "\\u", 2);
    gram_seq_set(g, &q, &lo);
    add_hex(g, &q);
    add_hex(g, &q);
    add_hex(g, &q);
    gram_alt(g, r, &q);
    gram_seq_clear(&q);
    gram_seq_lit(g, &q, "\\u", 2);
    gram_seq_range(g, &q, 'd', 'd');
    gram_seq_set(g, &q, &d07);
    add_hex(g, &q);
    add_hex(g, &q);
    gram_alt(g, r, &q);
    gram_seq_clear(&q);
    gram_seq_lit(g, &q, "\\u", 2);
    gram_seq_range(g, &q, 'D', 'D');
    gram_seq_set(g, &q, &d07);
    add_hex(g, &q);
    add_hex(g, &q);
    gram_alt(g, r, &q);
    gram_seq_clear(&q);
    gram_seq_lit(g, &q, "\\u", 2);
    gram_seq_set(g, &q, &ef);
    add_hex(g, &q);
    add_hex(g, &q);
    add_hex(g, &q);
    gram_alt(g, r, &q);
    gram_seq_free(&q);
    return c->chr = r;
}

/* A regex '.': any string character but a newline (the escape \n). */
static int32_t dot(struct jsg *c)
{
    if (c->dot)
        return c->dot;
    struct gram *g = c->g;
    int32_t r = gram_rule_new(g);
    struct gram_seq q;
    gram_seq_init(&q);
    add_plain(g, r, &q);
    static const char *const esc[] = {"\\\"", "\\\\", "\\/", "\\t"};
    for (size_t i = 0; i < 4; i++) {
        gram_seq_clear(&q);
        gram_seq_lit(g, &q, esc[i], 2);
        gram_alt(g, r, &q);
    }
    gram_seq_free(&q);
    return c->dot = r;
}

static int32_t str_rule(struct jsg *c, int32_t body)
{
    struct gram_seq q;
    gram_seq_init(&q);
    gram_seq_lit(c->g, &q, "\"", 1);
    gram_seq_ref(&q, body);
    gram_seq_lit(c->g, &q, "\"", 1);
    int32_t r = gram_rule_of(c->g, &q);
    gram_seq_free(&q);
    return r;
}

static int32_t str_any(struct jsg *c)
{
    if (!c->str_any)
        c->str_any = str_rule(c, gram_rule_repeat(c->g, chr(c), 0, -1));
    return c->str_any;
}

/* digits{min,max} */
static int32_t digits(struct jsg *c, int32_t min, int32_t max)
{
    struct gram_seq q;
    gram_seq_init(&q);
    gram_seq_range(c->g, &q, '0', '9');
    int32_t d = gram_rule_of(c->g, &q);
    gram_seq_free(&q);
    return gram_rule_repeat(c->g, d, min, max);
}

/* "-"? ("0" | [1-9] [0-9]{0,more}) */
static int32_t int_part(struct jsg *c, int32_t more)
{
    struct gram *g = c->g;
    int32_t mag = gram_rule_new(g);
    struct gram_seq q;
    gram_seq_init(&q);
    gram_seq_lit(g, &q, "0", 1);
    gram_alt(g, mag, &q);
    gram_seq_clear(&q);
    gram_seq_range(g, &q, '1', '9');
    gram_seq_ref(&q, digits(c, 0, more));
    gram_alt(g, mag, &q);
    int32_t r = gram_rule_new(g);
    gram_seq_clear(&q);
    gram_seq_ref(&q, mag);
    gram_alt(g, r, &q);
    gram_seq_clear(&q);
    gram_seq_lit(g, &q, "-", 1);
    gram_seq_ref(&q, mag);
    gram_alt(g, r, &q);
    gram_seq_free(&q);
    return r;
}

static int32_t integer(struct jsg *c)
{
    if (!c->integer)
        c->integer = int_part(c, 17); /* ≤ 18 digits: within a 64-bit integer */
    return c->integer;
}

static int32_t number(struct jsg *c)
{
    if (c->num)
        return c->num;
    struct gram *g = c->g;
    struct gram_seq q;
    gram_seq_init(&q);
    int32_t frac = gram_rule_new(g);
    gram_alt(g, frac, &q);
    gram_seq_lit(g, &q, ".", 1);
    gram_seq_ref(&q, digits(c, 1, 16));
    gram_alt(g, frac, &q);
    int32_t ex = gram_rule_new(g);
    gram_seq_clear(&q);
    gram_alt(g, ex, &q);
    struct gram_set s;
    gram_set_clear(&s);
    gram_set_add(&s, 'e', 'e');
    gram_set_add(&s, 'E', 'E');
    int32_t sign = gram_rule_new(g);
    gram_alt(g, sign, &q);
    gram_seq_range(g, &q, '+', '+');
    gram_alt(g, sign, &q);
    gram_seq_clear(&q);
    gram_seq_range(g, &q, '-', '-');
    gram_alt(g, sign, &q);
    gram_seq_clear(&q);
    gram_seq_set(g, &q, &s);
    gram_seq_ref(&q, sign);
    gram_seq_ref(&q, digits(c, 1, 2));
    gram_alt(g, ex, &q);
    gram_seq_clear(&q);
    gram_seq_ref(&q, int_part(c, 15));
    gram_seq_ref(&q, frac);
    gram_seq_ref(&q, ex);
    c->num = gram_rule_of(g, &q);
    gram_seq_free(&q);
    return c->num;
}

static int32_t boolean(struct jsg *c)
{
    if (c->boolean)
        return c->boolean;
    struct gram_seq q;
    gram_seq_init(&q);
    int32_t r = gram_rule_new(c->g);
    gram_seq_lit(c->g, &q, "true", 4);
    gram_alt(c->g, r, &q);
    gram_seq_clear(&q);
    gram_seq_lit(c->g, &q, "false", 5);
    gram_alt(c->g, r, &q);
    gram_seq_free(&q);
    return c->boolean = r;
}

static int32_t null_rule(struct jsg *c)
{
    if (!c->null)
        c->null = lit_rule(c, "null");
    return c->null;
}

/* ---------------------------------------------------------------- composites */

/* "{" ws ( first (ws "," ws member)* )? ws "}" over a member rule. */
static int32_t object_of(struct jsg *c, int32_t member)
{
    struct gram *g = c->g;
    struct gram_seq q;
    gram_seq_init(&q);
    gram_seq_ref(&q, ws(c));
    gram_seq_lit(g, &q, ",", 1);
    gram_seq_ref(&q, ws(c));
    gram_seq_ref(&q, member);
    int32_t more = gram_rule_repeat(g, gram_rule_of(g, &q), 0, -1);
    int32_t body = gram_rule_new(g);
    gram_seq_clear(&q);
    gram_alt(g, body, &q);
    gram_seq_ref(&q, member);
    gram_seq_ref(&q, more);
    gram_seq_ref(&q, ws(c));
    gram_alt(g, body, &q);
    gram_seq_clear(&q);
    gram_seq_lit(g, &q, "{", 1);
    gram_seq_ref(&q, ws(c));
    gram_seq_ref(&q, body);
    gram_seq_lit(g, &q, "}", 1);
    int32_t r = gram_rule_of(g, &q);
    gram_seq_free(&q);
    return r;
}

/* key ws ":" ws value, key a rule matching the quoted name */
static int32_t member_of(struct jsg *c, int32_t key, int32_t value)
{
    struct gram_seq q;
    gram_seq_init(&q);
    gram_seq_ref(&q, key);
    gram_seq_ref(&q, ws(c));
    gram_seq_lit(c->g, &q, ":", 1);
    gram_seq_ref(&q, ws(c));
    gram_seq_ref(&q, value);
    int32_t r = gram_rule_of(c->g, &q);
    gram_seq_free(&q);
    return r;
}

/* "[" ws ( item (ws "," ws item){min−1,max−1} ws )? "]" */
static int32_t array_of(struct jsg *c, int32_t item, int32_t min, int32_t max)
{
    struct gram *g = c->g;
    struct gram_seq q;
    gram_seq_init(&q);
    int32_t r = gram_rule_new(g);
    if (min == 0) {
        gram_seq_lit(g, &q, "[", 1);
        gram_seq_ref(&q, ws(c));
        gram_seq_lit(g, &q, "]", 1);
        gram_alt(g, r, &q);
    }
    if (max != 0) {
        gram_seq_clear(&q);
        gram_seq_ref(&q, ws(c));
        gram_seq_lit(g, &q, ",", 1);
        gram_seq_ref(&q, ws(c));
        gram_seq_ref(&q, item);
        int32_t next = gram_rule_of(g, &q);
        int32_t rest = gram_rule_repeat(g, next, min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1);
        gram_seq_clear(&q);
        gram_seq_lit(g, &q, "[", 1);
        gram_seq_ref(&q, ws(c));
        gram_seq_ref(&q, item);
        gram_seq_ref(&q, rest);
        gram_seq_ref(&q, ws(c));
        gram_seq_lit(g, &q, "]", 1);
        gram_alt(g, r, &q);
    }
    gram_seq_free(&q);
    return r;
}

/* ---- a key that is none of an object's listed names (its extra members)
 *
 * Without it a model could write a listed name again as an "extra" member,
 * with a value the name's schema refuses. The names go into a trie of whole
 * characters; a key follows it while it spells a prefix of a name and may
 * leave it by any other character, or end where no name ends. Extra keys
 * are written without escapes (so "\u0061" cannot spell "a"); a character
 * whose leading byte starts some branch of the trie only ever follows it. */
struct ktrie {
    int32_t child, sib;    /* first child, next sibling (−1 none) */
    unsigned char ch[4];   /* the character into this node */
    int nb;
    bool end;              /* a name ends here */
};

static int32_t kt_add(struct ktrie **t, size_t *n, size_t *cap, int32_t parent, const unsigned char *ch, int nb)
{
    for (int32_t c = (*t)[parent].child; c >= 0; c = (*t)[c].sib)
        if ((*t)[c].nb == nb && !memcmp((*t)[c].ch, ch, (size_t)nb))
            return c;
    if (*n == *cap) {
        size_t nc = *cap * 2;
        struct ktrie *x = realloc(*t, nc * sizeof *x);
        if (!x)
            return -1;
        *t = x;
        *cap = nc;
    }
    int32_t id = (int32_t)(*n)++;
    (*t)[id] = (struct ktrie){-1, (*t)[parent].child, {0}, nb, false};
    memcpy((*t)[id].ch, ch, (size_t)nb);
    (*t)[parent].child = id;
    return id;
}

/* chars* '"' without escapes */
static int32_t key_rest(struct jsg *c)
{
    struct gram *g = c->g;
    int32_t uchr = gram_rule_new(g);
    struct gram_seq q;
    gram_seq_init(&q);
    struct gram_set s;
    gram_set_clear(&s);
    gram_set_add(&s, 0x20, 0x21);
    gram_set_add(&s, 0x23, 0x5b);
    gram_set_add(&s, 0x5d, 0x7f);
    gram_seq_set(g, &q, &s);
    gram_alt(g, uchr, &q);
    add_multibyte(g, uchr);
    gram_seq_clear(&q);
    gram_seq_ref(&q, gram_rule_repeat(g, uchr, 0, -1));
    gram_seq_lit(g, &q, "\"", 1);
    int32_t r = gram_rule_of(g, &q);
    gram_seq_free(&q);
    return r;
}

static int32_t kt_rule(struct jsg *c, const struct ktrie *t, int32_t at, int32_t rest)
{
    struct gram *g = c->g;
    int32_t r = gram_rule_new(g);
    struct gram_seq q;
    gram_seq_init(&q);
    if (!t[at].end) {
        gram_seq_lit(g, &q, "\"", 1);
        gram_alt(g, r, &q);
    }
    struct gram_set leads; /* first bytes of the characters the trie goes on with */
    gram_set_clear(&leads);
    for (int32_t k = t[at].child; k >= 0; k = t[k].sib) {
        gram_set_add(&leads, t[k].ch[0], t[k].ch[0]);
        int32_t sub = kt_rule(c, t, k, rest);
        gram_seq_clear(&q);
        gram_seq_lit(g, &q, (const char *)t[k].ch, (size_t)t[k].nb);
        gram_seq_ref(&q, sub);
        gram_alt(g, r, &q);
    }
    struct gram_set a;
    gram_set_clear(&a);
    for (unsigned b = 0x20; b < 0x80; b++)
        if (b != '"' && b != '\\' && !gram_set_has(&leads, b))
            gram_set_add(&a, b, b);
    gram_seq_clear(&q);
    gram_seq_set(g, &q, &a);
    gram_seq_ref(&q, rest);
    gram_alt(g, r, &q);
    add_multibyte_excl(g, r, &leads, rest);
    gram_seq_free(&q);
    return r;
}

static int32_t other_key(struct jsg *c, const json_t *props)
{
    size_t n = 1, cap = 16;
    struct ktrie *t = malloc(cap * sizeof *t);
    if (!t)
        return fail(c, ERR_NOMEM, "out of memory");
    t[0] = (struct ktrie){-1, -1, {0}, 0, false};
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)props, key, val) {
        const unsigned char *p = (const unsigned char *)key;
        bool plain = true; /* a name that needs escapes cannot be spelled without them: nothing to avoid */
        for (const unsigned char *x = p; *x; x++)
            plain &= *x >= 0x20 && *x != '"' && *x != '\\';
        if (!plain)
            continue;
        int32_t at = 0;
        while (*p && at >= 0) {
            int nb = *p < 0x80 ? 1 : *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : 2;
            at = kt_add(&t, &n, &cap, at, p, nb);
            p += nb;
        }
        if (at < 0) {
            free(t);
            return fail(c, ERR_NOMEM, "out of memory");
        }
        t[at].end = true;
    }
    struct gram_seq q;
    gram_seq_init(&q);
    gram_seq_lit(c->g, &q, "\"", 1);
    gram_seq_ref(&q, kt_rule(c, t, 0, key_rest(c)));
    int32_t r = gram_rule_of(c->g, &q);
    gram_seq_free(&q);
    free(t);
    return r;
}

/* Any JSON value nested at depth d (containers only below JSG_ANY_DEPTH). */
static int32_t any(struct jsg *c, int d)
{
    if (d > JSG_ANY_DEPTH)
        d = JSG_ANY_DEPTH;
    if (c->any[d])
        return c->any[d];
    struct gram *g = c->g;
    int32_t r = c->any[d] = gram_rule_new(g);
    int32_t alts[6] = {str_any(c), number(c), boolean(c), null_rule(c), 0, 0};
    int n = 4;
    if (d < JSG_ANY_DEPTH) {
        int32_t inner = any(c, d + 1);
        alts[n++] = object_of(c, member_of(c, str_any(c), inner));
        alts[n++] = array_of(c, inner, 0, -1);
    }
    struct gram_seq q;
    gram_seq_init(&q);
    for (int i = 0; i < n; i++) {
        gram_seq_clear(&q);
        gram_seq_ref(&q, alts[i]);
        gram_alt(g, r, &q);
    }
    gram_seq_free(&q);
    return r;
}

/* ---------------------------------------------------------------- regex subset */

struct rx {
    struct jsg *c;
    const char *s;
    size_t i, n;
};

static int32_t rx_alt(struct rx *x, int depth);

/* The JSON-string form of one ASCII character (escaped where JSON needs it). */
static void rx_char_seq(struct gram *g, struct gram_seq *q, unsigned ch)
{
    char buf[8];
    if (ch == '"' || ch == '\\') {
        buf[0] = '\\';
        buf[1] = (char)ch;
        gram_seq_lit(g, q, buf, 2);
    } else if (ch < 0x20) {
        int n = snprintf(buf, sizeof buf, "\\u%04x", ch);
        gram_seq_lit(g, q, buf, (size_t)n);
    } else {
        gram_seq_range(g, q, ch, ch);
    }
}

/* A class as a rule: its plain ASCII members as one byte set, " and \ and
 * control characters as their escapes; negated: every other character,
 * multibyte ones included. */
static int32_t rx_class_rule(struct rx *x, const bool *member, bool negate)
{
    struct gram *g = x->c->g;
    int32_t r = gram_rule_new(g);
    struct gram_set s;
    gram_set_clear(&s);
    struct gram_seq q;
    gram_seq_init(&q);
    for (unsigned ch = 0; ch < 128; ch++) {
        bool in = member[ch] != negate;
        if (!in)
            continue;
        if (ch >= 0x20 && ch != '"' && ch != '\\') {
            gram_set_add(&s, ch, ch);
        } else {
            gram_seq_clear(&q);
            rx_char_seq(g, &q, ch);
            gram_alt(g, r, &q);
        }
    }
    gram_seq_clear(&q);
    gram_seq_set(g, &q, &s);
    gram_alt(g, r, &q);
    if (negate)
        add_multibyte(g, r);
    gram_seq_free(&q);
    return r;
}

static void rx_shorthand(char k, bool *m)
{
    switch (k) {
    case 'd': case 'D':
        for (int ch = '0'; ch <= '9'; ch++) m[ch] = true;
        break;
    case 'w': case 'W':
        for (int ch = 0; ch < 128; ch++)
            if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_')
                m[ch] = true;
        break;
    case 's': case 'S':
        m[' '] = m['\t'] = m['\n'] = m['\r'] = m['\f'] = m['\v'] = true;
        break;
    }
}

static int rx_escape_char(char k)
{
    switch (k) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    default: return (unsigned char)k;
    }
}

static int32_t rx_fail(struct rx *x, const char *what)
{
    return fail(x->c, ERR_INVALID, "unsupported keyword 'pattern': %s at offset %zu of \"%.*s\"", what, x->i,
                (int)(x->n > 80 ? 80 : x->n), x->s);
}

static int32_t rx_class(struct rx *x)
{
    bool m[128] = {0};
    bool negate = false;
    x->i++; /* [ */
    if (x->i < x->n && x->s[x->i] == '^') {
        negate = true;
        x->i++;
    }
    bool first = true;
    while (x->i < x->n && (x->s[x->i] != ']' || first)) {
        first = false;
        unsigned char a = (unsigned char)x->s[x->i++];
        if (a == '\\') {
            if (x->i >= x->n)
                return rx_fail(x, "a trailing backslash");
            char k = x->s[x->i++];
            if (strchr("dwsDWS", k)) {
                if (k >= 'A' && k <= 'Z')
                    return rx_fail(x, "a negated shorthand inside a class");
                rx_shorthand(k, m);
                continue;
            }
            a = (unsigned char)rx_escape_char(k);
        }
        if (a >= 0x80)
            return rx_fail(x, "a non-ASCII character in a class");
        unsigned b = a;
        if (x->i + 1 < x->n && x->s[x->i] == '-' && x->s[x->i + 1] != ']') {
            x->i++;
            unsigned char z = (unsigned char)x->s[x->i++];
            if (z == '\\') {
                if (x->i >= x->n)
                    return rx_fail(x, "a trailing backslash");
                z = (unsigned char)rx_escape_char(x->s[x->i++]);
            }
            if (z >= 0x80 || z < a)
                return rx_fail(x, "a bad range in a class");
            b = z;
        }
        for (unsigned ch = a; ch <= b; ch++)
            m[ch] = true;
    }
    if (x->i >= x->n)
        return rx_fail(x, "an unclosed '['");
    x->i++; /* ] */
    return rx_class_rule(x, m, negate);
}

/* One atom as a rule, or 0 at the end of a branch. */
static int32_t rx_atom(struct rx *x, int depth)
{
    struct gram *g = x->c->g;
    char ch = x->s[x->i];
    if (ch == '(') {
        x->i++;
        if (x->i + 1 < x->n && x->s[x->i] == '?') {
            if (x->s[x->i + 1] != ':')
                return rx_fail(x, "a group construct other than (?:");
            x->i += 2;
        }
        int32_t r = rx_alt(x, depth + 1);
        if (r < 0)
            return -1;
        if (x->i >= x->n || x->s[x->i] != ')')
            return rx_fail(x, "an unclosed '('");
        x->i++;
        return r;
    }
    if (ch == '[')
        return rx_class(x);
    if (ch == '.') {
        x->i++;
        return dot(x->c);
    }
    struct gram_seq q;
    gram_seq_init(&q);
    if (ch == '\\') {
        x->i++;
        if (x->i >= x->n)
            return rx_fail(x, "a trailing backslash");
        char k = x->s[x->i++];
        if (strchr("dwsDWS", k)) {
            bool m[128] = {0};
            rx_shorthand(k, m);
            return rx_class_rule(x, m, k >= 'A' && k <= 'Z');
        }
        if ((k >= '0' && k <= '9') || strchr("bBkpPu", k))
            return rx_fail(x, "a backreference, word boundary or property escape");
        rx_char_seq(g, &q, (unsigned)rx_escape_char(k));
    } else if (strchr("*+?{", ch)) {
        return rx_fail(x, "a quantifier without an atom");
    } else {
        /* a literal character: its UTF-8 bytes as they are (ASCII escaped for JSON) */
        unsigned char u = (unsigned char)ch;
        size_t len = u < 0x80 ? 1 : u >= 0xf0 ? 4 : u >= 0xe0 ? 3 : 2;
        if (x->i + len > x->n)
            return rx_fail(x, "a truncated UTF-8 character");
        if (len == 1)
            rx_char_seq(g, &q, u);
        else
            gram_seq_lit(g, &q, x->s + x->i, len);
        x->i += len;
    }
    int32_t r = gram_rule_of(g, &q);
    gram_seq_free(&q);
    return r;
}

static bool rx_int(struct rx *x, int32_t *v)
{
    if (x->i >= x->n || x->s[x->i] < '0' || x->s[x->i] > '9')
        return false;
    long n = 0;
    while (x->i < x->n && x->s[x->i] >= '0' && x->s[x->i] <= '9') {
        n = n * 10 + (x->s[x->i++] - '0');
        if (n > JSG_MAX_BOUND)
            n = JSG_MAX_BOUND + 1;
    }
    *v = (int32_t)n;
    return true;
}

/* A branch: atoms with quantifiers up to '|' or ')' or the end. */
static int32_t rx_seq(struct rx *x, int depth)
{
    struct gram *g = x->c->g;
    struct gram_seq q;
    gram_seq_init(&q);
    while (x->i < x->n && x->s[x->i] != '|' && x->s[x->i] != ')') {
        if (x->s[x->i] == '^' || x->s[x->i] == '$') {
            /* anchors: the pattern as a whole was checked for them; inside, they match where they stand */
            if (!((x->s[x->i] == '^' && x->i == 0) || (x->s[x->i] == '$' && x->i + 1 == x->n))) {
                gram_seq_free(&q);
                return rx_fail(x, "an anchor inside the pattern");
            }
            x->i++;
            continue;
        }
        int32_t a = rx_atom(x, depth);
        if (a < 0) {
            gram_seq_free(&q);
            return -1;
        }
        int32_t min = 1, max = 1;
        if (x->i < x->n) {
            char k = x->s[x->i];
            if (k == '*') { min = 0; max = -1; x->i++; }
            else if (k == '+') { min = 1; max = -1; x->i++; }
            else if (k == '?') { min = 0; max = 1; x->i++; }
            else if (k == '{') {
                size_t save = x->i++;
                if (!rx_int(x, &min)) {
                    x->i = save;
                    gram_seq_free(&q);
                    return rx_fail(x, "a malformed {m,n}");
                }
                max = min;
                if (x->i < x->n && x->s[x->i] == ',') {
                    x->i++;
                    if (!rx_int(x, &max))
                        max = -1;
                }
                if (x->i >= x->n || x->s[x->i] != '}' || (max >= 0 && max < min) || min > JSG_MAX_BOUND ||
                    max > JSG_MAX_BOUND) {
                    gram_seq_free(&q);
                    return rx_fail(x, "a malformed or too large {m,n}");
                }
                x->i++;
            }
            if (x->i < x->n && x->s[x->i] == '?' && (min != 1 || max != 1))
                x->i++; /* lazy: the same language */
        }
        gram_seq_ref(&q, (min == 1 && max == 1) ? a : gram_rule_repeat(g, a, min, max));
    }
    int32_t r = gram_rule_of(g, &q);
    gram_seq_free(&q);
    return r;
}

static int32_t rx_alt(struct rx *x, int depth)
{
    if (depth > JSG_MAX_NEST)
        return rx_fail(x, "groups nested too deeply");
    struct gram *g = x->c->g;
    int32_t r = gram_rule_new(g);
    struct gram_seq q;
    gram_seq_init(&q);
    for (;;) {
        int32_t b = rx_seq(x, depth);
        if (b < 0) {
            gram_seq_free(&q);
            return -1;
        }
        gram_seq_clear(&q);
        gram_seq_ref(&q, b);
        gram_alt(g, r, &q);
        if (x->i < x->n && x->s[x->i] == '|') {
            x->i++;
            continue;
        }
        break;
    }
    gram_seq_free(&q);
    return r;
}

/* A string whose body matches the pattern (a search unless anchored). */
static int32_t pattern_string(struct jsg *c, const char *pat)
{
    struct rx x = {c, pat, 0, strlen(pat)};
    int32_t body = rx_alt(&x, 0);
    if (body < 0)
        return -1;
    if (x.i != x.n)
        return rx_fail(&x, "an unbalanced ')'");
    bool head = x.n > 0 && pat[0] == '^';
    bool tail = x.n > 0 && pat[x.n - 1] == '$' && (x.n < 2 || pat[x.n - 2] != '\\');
    struct gram_seq q;
    gram_seq_init(&q);
    int32_t free_chars = gram_rule_repeat(c->g, chr(c), 0, -1);
    if (!head)
        gram_seq_ref(&q, free_chars);
    gram_seq_ref(&q, body);
    if (!tail)
        gram_seq_ref(&q, free_chars);
    int32_t r = str_rule(c, gram_rule_of(c->g, &q));
    gram_seq_free(&q);
    return r;
}

/* ---------------------------------------------------------------- schema walk */

static int32_t compile(struct jsg *c, const json_t *s);

static size_t path_push(struct jsg *c, const char *fmt, ...)
{
    size_t at = strlen(c->path);
    if (!at) {
        c->path[0] = '#';
        c->path[1] = 0;
        at = 0;
    }
    size_t cur = strlen(c->path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->path + cur, sizeof c->path - cur, fmt, ap);
    va_end(ap);
    return at;
}

static void path_pop(struct jsg *c, size_t at) { c->path[at] = 0; }

static int32_t compile_at(struct jsg *c, const json_t *s, const char *fmt, const char *name)
{
    size_t at = path_push(c, fmt, name);
    int32_t r = compile(c, s);
    path_pop(c, at);
    return r;
}

/* A rule matching exactly the compact JSON text of v. */
static int32_t literal_value(struct jsg *c, const json_t *v)
{
    char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!t)
        return fail(c, ERR_NOMEM, "out of memory");
    int32_t r = lit_rule(c, t);
    free(t);
    return r;
}

static bool get_bound(struct jsg *c, const json_t *s, const char *kw, int32_t *out)
{
    const json_t *v = json_object_get(s, kw);
    if (!v)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        fail(c, ERR_INVALID, "'%s' must be a non-negative integer", kw);
        return false;
    }
    if (json_integer_value(v) > JSG_MAX_BOUND) {
        fail(c, ERR_RANGE, "'%s' %lld is larger than %d (the grammar's bound)", kw,
             (long long)json_integer_value(v), JSG_MAX_BOUND);
        return false;
    }
    *out = (int32_t)json_integer_value(v);
    return true;
}

static const char *const fmt_re[][2] = {
    {"date", "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$"},
    {"time", "^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"},
    {"date-time", "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
                  "(\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
};

static int32_t string_type(struct jsg *c, const json_t *s)
{
    const json_t *f = json_object_get(s, "format"), *p = json_object_get(s, "pattern");
    if (f && p)
        return fail(c, ERR_INVALID, "unsupported keyword 'format' together with 'pattern'");
    if (f) {
        if (!json_is_string(f))
            return fail(c, ERR_INVALID, "'format' must be a string");
        for (size_t i = 0; i < sizeof fmt_re / sizeof fmt_re[0]; i++)
            if (!strcmp(json_string_value(f), fmt_re[i][0]))
                return pattern_string(c, fmt_re[i][1]);
        return fail(c, ERR_INVALID, "unsupported keyword 'format' (\"%.40s\"; supported: date, time, date-time, uuid)",
                    json_string_value(f));
    }
    if (p) {
        if (!json_is_string(p))
            return fail(c, ERR_INVALID, "'pattern' must be a string");
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
            return fail(c, ERR_INVALID, "unsupported keyword 'minLength'/'maxLength' together with 'pattern'");
        return pattern_string(c, json_string_value(p));
    }
    int32_t min = 0, max = -1;
    if (!get_bound(c, s, "minLength", &min) || !get_bound(c, s, "maxLength", &max))
        return -1;
    if (max >= 0 && max < min)
        return fail(c, ERR_INVALID, "'maxLength' is below 'minLength'");
    if (min == 0 && max < 0)
        return str_any(c);
    return str_rule(c, gram_rule_repeat(c->g, chr(c), min, max));
}

static int32_t array_type(struct jsg *c, const json_t *s)
{
    int32_t min = 0, max = -1;
    if (!get_bound(c, s, "minItems", &min) || !get_bound(c, s, "maxItems", &max))
        return -1;
    if (max >= 0 && max < min)
        return fail(c, ERR_INVALID, "'maxItems' is below 'minItems'");
    const json_t *items = json_object_get(s, "items");
    int32_t item;
    if (items) {
        if (!json_is_object(items) && !json_is_boolean(items))
            return fail(c, ERR_INVALID, "'items' must be a schema (tuple 'items' arrays are not supported)");
        if (json_is_false(items))
            max = 0;
        item = compile_at(c, items, "/items", NULL);
    } else {
        item = any(c, 1);
    }
    if (item < 0)
        return -1;
    if (max >= 0 && max < min)
        return fail(c, ERR_INVALID, "'items' false with 'minItems' above 0");
    return array_of(c, item, min, max);
}

static int32_t object_type(struct jsg *c, const json_t *s)
{
    struct gram *g = c->g;
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return fail(c, ERR_INVALID, "'properties' must be an object");
    if (req && !json_is_array(req))
        return fail(c, ERR_INVALID, "'required' must be an array of names");
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return fail(c, ERR_INVALID, "'additionalProperties' must be a boolean or a schema");
    size_t n_req = json_array_size(req);
    for (size_t i = 0; i < n_req; i++) {
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r))
            return fail(c, ERR_INVALID, "'required' must be an array of names");
        if (!json_object_get(props, json_string_value(r)))
            return fail(c, ERR_INVALID, "unsupported keyword 'required': \"%.40s\" is not in 'properties'",
                        json_string_value(r));
    }
    /* extra members: none when additionalProperties is false */
    int32_t extra = -1;
    if (!json_is_false(addl)) {
        int32_t v = addl && json_is_object(addl) ? compile_at(c, addl, "/additionalProperties", NULL) : any(c, 1);
        if (v < 0)
            return -1;
        extra = member_of(c, json_object_size(props) ? other_key(c, props) : str_any(c), v);
        if (c->rc)
            return -1;
    }
    size_t n = json_object_size(props);
    if (n == 0)
        return extra < 0 ? lit_rule(c, "{}") /* only {} (and its whitespace) */ : object_of(c, extra);
    /* Listed properties in schema order: B_i = members from i on with none
     * written yet, A_i = the same after one was written (each preceded by a comma). */
    struct gram_seq q;
    gram_seq_init(&q);
    int32_t sep = 0; /* ws "," ws */
    gram_seq_ref(&q, ws(c));
    gram_seq_lit(g, &q, ",", 1);
    gram_seq_ref(&q, ws(c));
    sep = gram_rule_of(g, &q);
    int32_t A, B;
    if (extra < 0) {
        gram_seq_clear(&q);
        A = B = gram_rule_of(g, &q); /* ε */
    } else {
        gram_seq_clear(&q);
        gram_seq_ref(&q, sep);
        gram_seq_ref(&q, extra);
        int32_t ex = gram_rule_repeat(g, gram_rule_of(g, &q), 0, -1);
        A = ex;
        B = gram_rule_new(g);
        gram_seq_clear(&q);
        gram_alt(g, B, &q);
        gram_seq_ref(&q, extra);
        gram_seq_ref(&q, ex);
        gram_alt(g, B, &q);
    }
    /* walk the properties backwards: jansson keeps insertion (= schema) order */
    const char **names = calloc(n, sizeof *names);
    const json_t **vals = calloc(n, sizeof *vals);
    if (!names || !vals) {
        free(names);
        free((void *)vals);
        gram_seq_free(&q);
        return fail(c, ERR_NOMEM, "out of memory");
    }
    size_t k = 0;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)props, key, val) {
        names[k] = key;
        vals[k++] = val;
    }
    int32_t rc = 0;
    for (size_t i = n; i-- > 0 && rc >= 0;) {
        int32_t v = compile_at(c, vals[i], "/properties/%s", names[i]);
        if (v < 0) {
            rc = -1;
            break;
        }
        json_t *nm = json_string(names[i]);
        int32_t keyr = nm ? literal_value(c, nm) : fail(c, ERR_NOMEM, "out of memory");
        json_decref(nm);
        if (keyr < 0) {
            rc = -1;
            break;
        }
        int32_t mem = member_of(c, keyr, v);
        bool required = false;
        for (size_t j = 0; j < n_req; j++)
            if (!strcmp(json_string_value(json_array_get(req, j)), names[i]))
                required = true;
        int32_t a = gram_rule_new(g), b = gram_rule_new(g);
        gram_seq_clear(&q);
        gram_seq_ref(&q, sep);
        gram_seq_ref(&q, mem);
        gram_seq_ref(&q, A);
        gram_alt(g, a, &q);
        gram_seq_clear(&q);
        gram_seq_ref(&q, mem);
        gram_seq_ref(&q, A);
        gram_alt(g, b, &q);
        if (!required) {
            gram_seq_clear(&q);
            gram_seq_ref(&q, A);
            gram_alt(g, a, &q);
            gram_seq_clear(&q);
            gram_seq_ref(&q, B);
            gram_alt(g, b, &q);
        }
        A = a;
        B = b;
    }
    free(names);
    free((void *)vals);
    if (rc < 0) {
        gram_seq_free(&q);
        return -1;
    }
    gram_seq_clear(&q);
    gram_seq_lit(g, &q, "{", 1);
    gram_seq_ref(&q, ws(c));
    gram_seq_ref(&q, B);
    gram_seq_ref(&q, ws(c));
    gram_seq_lit(g, &q, "}", 1);
    int32_t r = gram_rule_of(g, &q);
    gram_seq_free(&q);
    return r;
}

static int32_t type_rule(struct jsg *c, const char *t, const json_t *s)
{
    if (!strcmp(t, "object")) return object_type(c, s);
    if (!strcmp(t, "array")) return array_type(c, s);
    if (!strcmp(t, "string")) return string_type(c, s);
    if (!strcmp(t, "number")) return number(c);
    if (!strcmp(t, "integer")) return integer(c);
    if (!strcmp(t, "boolean")) return boolean(c);
    if (!strcmp(t, "null")) return null_rule(c);
    return fail(c, ERR_INVALID, "unsupported keyword 'type' value \"%.40s\"", t);
}

static const char *const known_kw[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items", "minItems", "maxItems",
    "anyOf", "oneOf", "minLength", "maxLength", "pattern", "format", "$ref", "$defs", "definitions",
    /* annotations: no effect on what is valid */
    "title", "description", "default", "examples", "$schema", "$id", "$comment",
};

static int32_t ref_rule(struct jsg *c, const char *ref)
{
    for (size_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref))
            return c->refs[i].rule;
    const json_t *target = NULL;
    if (!strcmp(ref, "#")) {
        target = c->root;
    } else {
        static const char *const bases[][2] = {{"#/$defs/", "$defs"}, {"#/definitions/", "definitions"}};
        for (int b = 0; b < 2 && !target; b++) {
            size_t l = strlen(bases[b][0]);
            if (!strncmp(ref, bases[b][0], l) && !strchr(ref + l, '/'))
                target = json_object_get(json_object_get(c->root, bases[b][1]), ref + l);
        }
    }
    if (!target)
        return fail(c, ERR_INVALID, "unsupported keyword '$ref': \"%.60s\" (only #, #/$defs/NAME, #/definitions/NAME)",
                    ref);
    /* the rule exists before its body so a recursive schema refers to it */
    size_t cap = c->cap_refs;
    if (cap <= c->n_refs) {
        cap = cap ? cap * 2 : 8;
        struct ref_memo *m = realloc(c->refs, cap * sizeof *m);
        if (!m)
            return fail(c, ERR_NOMEM, "out of memory");
        c->refs = m;
        c->cap_refs = cap;
    }
    char *dup = strdup(ref);
    if (!dup)
        return fail(c, ERR_NOMEM, "out of memory");
    int32_t r = gram_rule_new(c->g);
    c->refs[c->n_refs++] = (struct ref_memo){dup, r};
    char save[sizeof c->path];
    memcpy(save, c->path, sizeof save);
    snprintf(c->path, sizeof c->path, "%s", ref);
    int32_t body = compile(c, target);
    memcpy(c->path, save, sizeof save);
    if (body < 0)
        return -1;
    struct gram_seq q;
    gram_seq_init(&q);
    gram_seq_ref(&q, body);
    gram_alt(c->g, r, &q);
    gram_seq_free(&q);
    return r;
}

static int32_t compile(struct jsg *c, const json_t *s)
{
    if (c->rc)
        return -1;
    if (++c->nest > JSG_MAX_NEST) {
        c->nest--;
        return fail(c, ERR_RANGE, "schema nested deeper than %d", JSG_MAX_NEST);
    }
    int32_t r = -1;
    if (json_is_true(s)) {
        r = any(c, 0);
        goto out;
    }
    if (json_is_false(s)) {
        r = fail(c, ERR_INVALID, "the schema 'false' matches nothing");
        goto out;
    }
    if (!json_is_object(s)) {
        r = fail(c, ERR_INVALID, "a schema must be an object");
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)s, key, val) {
        bool ok = false;
        for (size_t i = 0; i < sizeof known_kw / sizeof known_kw[0] && !ok; i++)
            ok = !strcmp(key, known_kw[i]);
        if (!ok) {
            r = unsupported(c, key);
            goto out;
        }
    }
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        r = json_is_string(ref) ? ref_rule(c, json_string_value(ref)) : fail(c, ERR_INVALID, "'$ref' must be a string");
        goto out;
    }
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (cn) {
        r = literal_value(c, cn);
        goto out;
    }
    if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0) {
            r = fail(c, ERR_INVALID, "'enum' must be a non-empty array");
            goto out;
        }
        r = gram_rule_new(c->g);
        struct gram_seq q;
        gram_seq_init(&q);
        size_t i;
        json_t *v;
        json_array_foreach(en, i, v) {
            int32_t l = literal_value(c, v);
            if (l < 0)
                break;
            gram_seq_clear(&q);
            gram_seq_ref(&q, l);
            gram_alt(c->g, r, &q);
        }
        gram_seq_free(&q);
        if (c->rc)
            r = -1;
        goto out;
    }
    const char *comb = json_object_get(s, "anyOf") ? "anyOf" : json_object_get(s, "oneOf") ? "oneOf" : NULL;
    if (comb) {
        const json_t *list = json_object_get(s, comb);
        if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf")) {
            r = fail(c, ERR_INVALID, "unsupported keyword 'oneOf' together with 'anyOf'");
            goto out;
        }
        static const char *const siblings[] = {"type", "properties", "items", "pattern", "format", "minLength",
                                               "maxLength", "minItems", "maxItems", "additionalProperties",
                                               "required"};
        for (size_t i = 0; i < sizeof siblings / sizeof siblings[0]; i++)
            if (json_object_get(s, siblings[i])) {
                r = fail(c, ERR_INVALID, "unsupported keyword '%s' beside '%s'", siblings[i], comb);
                goto out;
            }
        if (!json_is_array(list) || json_array_size(list) == 0) {
            r = fail(c, ERR_INVALID, "'%s' must be a non-empty array of schemas", comb);
            goto out;
        }
        r = gram_rule_new(c->g);
        struct gram_seq q;
        gram_seq_init(&q);
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) {
            char part[32];
            snprintf(part, sizeof part, "/%s/%zu", comb, i);
            int32_t b = compile_at(c, v, "%s", part);
            if (b < 0)
                break;
            gram_seq_clear(&q);
            gram_seq_ref(&q, b);
            gram_alt(c->g, r, &q);
        }
        gram_seq_free(&q);
        if (c->rc)
            r = -1;
        goto out;
    }
    const json_t *type = json_object_get(s, "type");
    if (!type) {
        /* no type: what the other keywords say, else any value */
        if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") ||
            json_object_get(s, "required"))
            r = object_type(c, s);
        else if (json_object_get(s, "items") || json_object_get(s, "minItems") || json_object_get(s, "maxItems"))
            r = array_type(c, s);
        else if (json_object_get(s, "pattern") || json_object_get(s, "format") || json_object_get(s, "minLength") ||
                 json_object_get(s, "maxLength"))
            r = string_type(c, s);
        else
            r = any(c, 0);
        goto out;
    }
    if (json_is_string(type)) {
        r = type_rule(c, json_string_value(type), s);
        goto out;
    }
    if (!json_is_array(type) || json_array_size(type) == 0) {
        r = fail(c, ERR_INVALID, "'type' must be a name or a non-empty array of names");
        goto out;
    }
    r = gram_rule_new(c->g);
    struct gram_seq q;
    gram_seq_init(&q);
    size_t i;
    json_t *v;
    json_array_foreach(type, i, v) {
        if (!json_is_string(v)) {
            fail(c, ERR_INVALID, "'type' must be a name or a non-empty array of names");
            break;
        }
        int32_t t = type_rule(c, json_string_value(v), s);
        if (t < 0)
            break;
        gram_seq_clear(&q);
        gram_seq_ref(&q, t);
        gram_alt(c->g, r, &q);
    }
    gram_seq_free(&q);
    if (c->rc)
        r = -1;
out:
    c->nest--;
    return c->rc ? -1 : r;
}

int jsg_compile(const json_t *schema, struct gram **out, struct err *e)
{
    return jsg_compile_framed(schema, NULL, out, e);
}

int jsg_compile_framed(const json_t *schema, const struct jsg_frame *f, struct gram **out, struct err *e)
{
    *out = NULL;
    if (f && (!f->open || !f->close || f->max < 1 || (f->max > 1 && !f->sep) || f->max > JSG_MAX_BOUND))
        return err_set(e, ERR_INVALID, "json schema: bad frame (open, close, max 1..%d, sep when max > 1)",
                       JSG_MAX_BOUND);
    struct jsg c = {0};
    c.e = e;
    c.root = schema;
    if (!(c.g = gram_new()))
        return err_set(e, ERR_NOMEM, "out of memory");
    /* rule 0 is the start: ws value ws; framed: open value (sep value){0,max-1} close, nothing around */
    int32_t root = gram_rule_new(c.g);
    gram_set_root(c.g, root);
    int32_t v = compile(&c, schema);
    if (v >= 0) {
        struct gram_seq q;
        gram_seq_init(&q);
        if (!f) {
            gram_seq_ref(&q, ws(&c));
            gram_seq_ref(&q, v);
            gram_seq_ref(&q, ws(&c));
        } else {
            gram_seq_lit(c.g, &q, f->open, strlen(f->open));
            gram_seq_ref(&q, v);
            if (f->max > 1) {
                struct gram_seq more;
                gram_seq_init(&more);
                gram_seq_lit(c.g, &more, f->sep, strlen(f->sep));
                gram_seq_ref(&more, v);
                gram_seq_ref(&q, gram_rule_repeat(c.g, gram_rule_of(c.g, &more), 0, f->max - 1));
                q.oom |= more.oom;
                gram_seq_free(&more);
            }
            gram_seq_lit(c.g, &q, f->close, strlen(f->close));
        }
        gram_alt(c.g, root, &q);
        gram_seq_free(&q);
    }
    for (size_t i = 0; i < c.n_refs; i++)
        free(c.refs[i].ref);
    free(c.refs);
    int rc = c.rc;
    if (!rc && (rc = gram_check(c.g, e)) == ERR_RANGE)
        err_set(e, ERR_RANGE, "json schema: too large for a grammar (more than %d elements)", GRAM_MAX_ELEMS);
    else if (rc == ERR_INVALID && !c.rc)
        err_set(e, ERR_INVALID, "json schema: unsupported keyword '$ref': a schema that refers to itself before "
                                "any text (left recursion)");
    if (rc) {
        gram_free(c.g);
        return rc;
    }
    *out = c.g;
    return 0;
}

int jsg_compile_text(const char *text, size_t len, struct gram **out, struct err *e)
{
    *out = NULL;
    if (len > JSG_MAX_TEXT)
        return err_set(e, ERR_RANGE, "json schema: %zu bytes, more than %u", len, JSG_MAX_TEXT);
    json_error_t je;
    json_t *s = json_loadb(text, len, JSON_DECODE_ANY, &je);
    if (!s)
        return err_set(e, ERR_INVALID, "json schema: not JSON: %s", je.text);
    int rc = jsg_compile(s, out, e);
    json_decref(s);
    return rc;
}
