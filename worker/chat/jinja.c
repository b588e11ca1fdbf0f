/* jinja.c — lexer and parser of the Jinja subset (see jinja.h).
 *
 * The template is lexed into one token array (text runs and the tokens inside
 * `{{ }}` / `{% %}`; comments dropped), applying whitespace control the way
 * Jinja does with trim_blocks + lstrip_blocks, which is how Hugging Face and
 * llama.cpp render chat templates. A recursive-descent parser following
 * Jinja's precedence then builds the tree. Every node and string lives in one
 * arena owned by the template, so error paths need no unwinding. */
#include "jinja.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

/* ---------------------------------------------------------------- arena */

struct jarena_blk {
    struct jarena_blk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

static void *arena_alloc(struct jinja_tmpl *t, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct jarena_blk *b = t->mem;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->next = t->mem;
        b->used = 0;
        b->cap = cap;
        t->mem = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

static char *arena_strndup(struct jinja_tmpl *t, const char *s, size_t n)
{
    char *p = arena_alloc(t, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

void jinja_free(struct jinja_tmpl *t)
{
    if (!t)
        return;
    for (struct jarena_blk *b = t->mem, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    json_decref(t->lits);
    free(t);
}

/* ---------------------------------------------------------------- lexer */

enum { TK_TEXT, TK_VBEGIN, TK_VEND, TK_BBEGIN, TK_BEND, TK_NAME, TK_STR, TK_INT, TK_FLOAT, TK_OP, TK_EOF };

struct jtok {
    int kind;
    int line;
    char *s;      /* TEXT / NAME / STR (decoded) / OP text */
    size_t len;   /* bytes of s */
    long long i;  /* INT */
    double f;     /* FLOAT */
};

struct lexer {
    struct jinja_tmpl *t;
    const char *src;
    size_t len, pos;
    int line;
    struct jtok *toks;
    int n, cap;
    struct err *e;
};

static int lex_fail(struct lexer *L, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int lex_fail(struct lexer *L, int code, const char *fmt, ...)
{
    char m[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return err_set(L->e, code, "chat template line %d: %s", L->line, m);
}

static struct jtok *lex_push(struct lexer *L, int kind)
{
    if (L->n == L->cap) {
        int cap = L->cap ? L->cap * 2 : 256;
        struct jtok *nt = realloc(L->toks, (size_t)cap * sizeof *nt);
        if (!nt)
            return NULL;
        L->toks = nt;
        L->cap = cap;
    }
    struct jtok *k = &L->toks[L->n++];
    memset(k, 0, sizeof *k);
    k->kind = kind;
    k->line = L->line;
    return k;
}

static int count_lines(const char *s, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += s[i] == '\n';
    return c;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Append one UTF-8 encoded code point. */
static size_t utf8_put(char *o, uint32_t cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A quoted string literal with Python escapes; L->pos is at the quote. */
static int lex_string(struct lexer *L)
{
    char q = L->src[L->pos++];
    size_t start = L->pos;
    char *buf = malloc(L->len - start + 1); /* decoded is never longer than the source */
    if (!buf)
        return err_set(L->e, ERR_NOMEM, "chat template: out of memory");
    size_t o = 0;
    while (L->pos < L->len && L->src[L->pos] != q) {
        char c = L->src[L->pos++];
        if (c == '\n')
            L->line++;
        if (c != '\\') {
            buf[o++] = c;
            continue;
        }
        if (L->pos >= L->len)
            break;
        char x = L->src[L->pos++];
        int nhex = 0;
        switch (x) {
        case 'n': buf[o++] = '\n'; break;
        case 't': buf[o++] = '\t'; break;
        case 'r': buf[o++] = '\r'; break;
        case '0': buf[o++] = '\0'; break;
        case 'b': buf[o++] = '\b'; break;
        case 'f': buf[o++] = '\f'; break;
        case '\\': buf[o++] = '\\'; break;
        case '\'': buf[o++] = '\''; break;
        case '"': buf[o++] = '"'; break;
        case '\n': L->line++; break; /* line continuation */
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        default: buf[o++] = '\\'; buf[o++] = x; break; /* Python keeps unknown escapes */
        }
        if (nhex) {
            uint32_t cp = 0;
            for (int k = 0; k < nhex; k++) {
                int h = L->pos < L->len ? hexval(L->src[L->pos]) : -1;
                if (h < 0) {
                    free(buf);
                    return lex_fail(L, ERR_FORMAT, "bad \\%c escape in a string literal", x);
                }
                cp = cp * 16 + (uint32_t)h;
                L->pos++;
            }
            if (cp > 0x10ffff) {
                free(buf);
                return lex_fail(L, ERR_FORMAT, "escape beyond U+10FFFF in a string literal");
            }
            /* a \u escape can take up to 4 bytes while its source took 6: room is fine */
            o += utf8_put(buf + o, cp);
        }
    }
    if (L->pos >= L->len) {
        free(buf);
        return lex_fail(L, ERR_FORMAT, "unterminated string literal");
    }
    L->pos++; /* closing quote */
    struct jtok *k = lex_push(L, TK_STR);
    char *s = k ? arena_strndup(L->t, buf, o) : NULL;
    free(buf);
    if (!s)
        return err_set(L->e, ERR_NOMEM, "chat template: out of memory");
    k->s = s;
    k->len = o;
    return 0;
}

/* Tokens inside a tag up to its end; `block` selects %} over }}. Sets
 * *strip_after when the end marker carries '-'. */
static int lex_tag(struct lexer *L, bool block, bool *strip_after)
{
    char endc = block ? '%' : '}';
    int depth = 0; /* open ( [ { — `}}` inside a dict literal is not the end */
    for (;;) {
        while (L->pos < L->len && is_ws(L->src[L->pos])) {
            if (L->src[L->pos] == '\n')
                L->line++;
            L->pos++;
        }
        if (L->pos >= L->len)
            return lex_fail(L, ERR_FORMAT, "unclosed %s tag", block ? "{%" : "{{");
        const char *s = L->src + L->pos;
        size_t left = L->len - L->pos;
        if (depth == 0) {
            if (left >= 3 && s[0] == '-' && s[1] == endc && s[2] == '}') {
                *strip_after = true;
                L->pos += 3;
                break;
            }
            if (left >= 2 && s[0] == endc && s[1] == '}') {
                *strip_after = false;
                L->pos += 2;
                break;
            }
        }
        char c = s[0];
        if (c == '"' || c == '\'') {
            int rc = lex_string(L);
            if (rc)
                return rc;
            continue;
        }
        if (isdigit((unsigned char)c)) {
            size_t i = 0;
            bool flt = false;
            while (i < left && isdigit((unsigned char)s[i])) i++;
            if (i + 1 < left && s[i] == '.' && isdigit((unsigned char)s[i + 1])) {
                flt = true;
                i++;
                while (i < left && isdigit((unsigned char)s[i])) i++;
            }
            if (i < left && (s[i] == 'e' || s[i] == 'E')) {
                size_t j = i + 1;
                if (j < left && (s[j] == '+' || s[j] == '-')) j++;
                if (j < left && isdigit((unsigned char)s[j])) {
                    flt = true;
                    i = j;
                    while (i < left && isdigit((unsigned char)s[i])) i++;
                }
            }
            char num[64];
            if (i >= sizeof num)
                return lex_fail(L, ERR_FORMAT, "number literal too long");
            memcpy(num, s, i);
            num[i] = 0;
            struct jtok *k = lex_push(L, flt ? TK_FLOAT : TK_INT);
            if (!k)
                return err_set(L->e, ERR_NOMEM, "chat template: out of memory");
            if (flt)
                k->f = strtod(num, NULL);
            else
                k->i = strtoll(num, NULL, 10);
            L->pos += i;
            continue;
        }
        if (isalpha((unsigned char)c) || c == '_') {
            size_t i = 0;
            while (i < left && (isalnum((unsigned char)s[i]) || s[i] == '_')) i++;
            struct jtok *k = lex_push(L, TK_NAME);
            if (!k || !(k->s = arena_strndup(L->t, s, i)))
                return err_set(L->e, ERR_NOMEM, "chat template: out of memory");
            k->len = i;
            L->pos += i;
            continue;
        }
        static const char *const two[] = {"//", "**", "==", "!=", "<=", ">="};
        size_t oplen = 0;
        for (size_t k = 0; k < sizeof two / sizeof two[0]; k++)
            if (left >= 2 && s[0] == two[k][0] && s[1] == two[k][1])
                oplen = 2;
        if (!oplen && strchr("+-*/%~<>=()[]{}.,:|", c))
            oplen = 1;
        if (!oplen)
            return lex_fail(L, ERR_FORMAT, "unexpected character '%c'", c);
        if (c == '(' || c == '[' || c == '{')
            depth++;
        if ((c == ')' || c == ']' || c == '}') && depth > 0)
            depth--;
        struct jtok *k = lex_push(L, TK_OP);
        if (!k || !(k->s = arena_strndup(L->t, s, oplen)))
            return err_set(L->e, ERR_NOMEM, "chat template: out of memory");
        k->len = oplen;
        L->pos += oplen;
    }
    struct jtok *k = lex_push(L, block ? TK_BEND : TK_VEND);
    return k ? 0 : err_set(L->e, ERR_NOMEM, "chat template: out of memory");
}

static int lex_all(struct lexer *L)
{
    bool strip_next = false;  /* previous tag ended with '-' */
    bool trim_next = false;   /* previous tag was a block/comment: trim_blocks */
    while (L->pos <= L->len) {
        /* find the next tag opener */
        size_t at = L->pos;
        int kind = 0; /* 0 none, 'v' {{, 'b' {%, 'c' {# */
        while (at + 1 < L->len) {
            if (L->src[at] == '{' && (L->src[at + 1] == '{' || L->src[at + 1] == '%' || L->src[at + 1] == '#')) {
                kind = L->src[at + 1] == '{' ? 'v' : L->src[at + 1] == '%' ? 'b' : 'c';
                break;
            }
            at++;
        }
        size_t tend = kind ? at : L->len;
        size_t ts = L->pos, te = tend;
        bool minus = kind && at + 2 < L->len && L->src[at + 2] == '-';
        bool plus = kind && at + 2 < L->len && L->src[at + 2] == '+';
        if (strip_next)
            while (ts < te && is_ws(L->src[ts])) ts++;
        else if (trim_next && ts < te) {
            if (L->src[ts] == '\n') ts++;
            else if (L->src[ts] == '\r' && ts + 1 < te && L->src[ts + 1] == '\n') ts += 2;
        }
        if (minus) {
            while (te > ts && is_ws(L->src[te - 1])) te--;
        } else if ((kind == 'b' || kind == 'c') && !plus) {
            /* lstrip_blocks: spaces/tabs from the line start up to the tag */
            size_t k = te;
            while (k > ts && (L->src[k - 1] == ' ' || L->src[k - 1] == '\t')) k--;
            if (k == 0 || L->src[k - 1] == '\n')
                te = k;
        }
        if (te > ts) {
            struct jtok *k = lex_push(L, TK_TEXT);
            if (!k || !(k->s = arena_strndup(L->t, L->src + ts, te - ts)))
                return err_set(L->e, ERR_NOMEM, "chat template: out of memory");
            k->len = te - ts;
        }
        L->line += count_lines(L->src + L->pos, tend - L->pos);
        if (!kind)
            break;
        L->pos = at + 2 + (minus || plus);
        strip_next = trim_next = false;
        if (kind == 'c') {
            const char *end = NULL;
            for (size_t i = L->pos; i + 1 < L->len; i++)
                if (L->src[i] == '#' && L->src[i + 1] == '}') {
                    end = L->src + i;
                    break;
                }
            if (!end)
                return lex_fail(L, ERR_FORMAT, "unclosed comment");
            size_t ci = (size_t)(end - L->src);
            strip_next = ci > L->pos && L->src[ci - 1] == '-';
            trim_next = true;
            L->line += count_lines(L->src + L->pos, ci - L->pos);
            L->pos = ci + 2;
            continue;
        }
        struct jtok *b = lex_push(L, kind == 'v' ? TK_VBEGIN : TK_BBEGIN);
        if (!b)
            return err_set(L->e, ERR_NOMEM, "chat template: out of memory");
        bool sa = false;
        int rc = lex_tag(L, kind == 'b', &sa);
        if (rc)
            return rc;
        strip_next = sa;
        trim_next = kind == 'b';
    }
    struct jtok *k = lex_push(L, TK_EOF);
    return k ? 0 : err_set(L->e, ERR_NOMEM, "chat template: out of memory");
}

/* ---------------------------------------------------------------- parser */

struct parser {
    struct jinja_tmpl *t;
    struct jtok *tk;
    int i, n;
    struct err *e;
    int depth; /* nesting, bounded so hostile templates cannot blow the stack */
};

#define MAX_NEST 200

static struct jtok *cur(struct parser *P) { return &P->tk[P->i]; }

static int pfail(struct parser *P, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pfail(struct parser *P, int code, const char *fmt, ...)
{
    if (P->e && P->e->code)
        return P->e->code;
    char m[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return err_set(P->e, code, "chat template line %d: %s", cur(P)->line, m);
}

static const char *tok_desc(const struct jtok *k)
{
    switch (k->kind) {
    case TK_TEXT: return "text";
    case TK_VBEGIN: return "'{{'";
    case TK_VEND: return "'}}'";
    case TK_BBEGIN: return "'{%'";
    case TK_BEND: return "'%}'";
    case TK_STR: return "a string";
    case TK_INT: case TK_FLOAT: return "a number";
    case TK_EOF: return "the end of the template";
    default: return k->s;
    }
}

static bool is_op(struct parser *P, const char *op)
{
    return cur(P)->kind == TK_OP && !strcmp(cur(P)->s, op);
}
static bool is_name(struct parser *P, const char *nm)
{
    return cur(P)->kind == TK_NAME && !strcmp(cur(P)->s, nm);
}
static bool accept_op(struct parser *P, const char *op)
{
    if (!is_op(P, op))
        return false;
    P->i++;
    return true;
}
static bool accept_name(struct parser *P, const char *nm)
{
    if (!is_name(P, nm))
        return false;
    P->i++;
    return true;
}
static int expect_op(struct parser *P, const char *op)
{
    if (accept_op(P, op))
        return 0;
    return pfail(P, ERR_FORMAT, "expected '%s', found %s", op, tok_desc(cur(P)));
}
static int expect_kind(struct parser *P, int kind, const char *what)
{
    if (cur(P)->kind == kind) {
        P->i++;
        return 0;
    }
    return pfail(P, ERR_FORMAT, "expected %s, found %s", what, tok_desc(cur(P)));
}

static struct jnode *node(struct parser *P, int kind)
{
    struct jnode *n = arena_alloc(P->t, sizeof *n);
    if (!n) {
        pfail(P, ERR_NOMEM, "out of memory");
        return NULL;
    }
    n->kind = kind;
    n->line = cur(P)->line;
    return n;
}

static struct jnode *lit(struct parser *P, json_t *v)
{
    if (!v || json_array_append_new(P->t->lits, v)) {
        pfail(P, ERR_NOMEM, "out of memory");
        return NULL;
    }
    struct jnode *n = node(P, JN_LIT);
    if (n)
        n->lit = v;
    return n;
}

/* growable child list while parsing */
struct kids {
    struct jnode **v;
    char **kw;
    int n, cap;
};
static int kids_add(struct parser *P, struct kids *k, struct jnode *n, char *kw)
{
    if (k->n == k->cap) {
        int cap = k->cap ? k->cap * 2 : 8;
        struct jnode **nv = arena_alloc(P->t, (size_t)cap * sizeof *nv);
        char **nk = arena_alloc(P->t, (size_t)cap * sizeof *nk);
        if (!nv || !nk)
            return pfail(P, ERR_NOMEM, "out of memory");
        if (k->n) {
            memcpy(nv, k->v, (size_t)k->n * sizeof *nv);
            memcpy(nk, k->kw, (size_t)k->n * sizeof *nk);
        }
        k->v = nv;
        k->kw = nk;
        k->cap = cap;
    }
    k->v[k->n] = n;
    k->kw[k->n] = kw;
    k->n++;
    return 0;
}
static void kids_set(struct jnode *n, struct kids *k)
{
    n->kids = k->v;
    n->kw = k->kw;
    n->n_kids = k->n;
}

static struct jnode *parse_expr(struct parser *P);
static struct jnode *parse_or(struct parser *P);
static struct jnode *parse_unary(struct parser *P, bool with_filter);
static struct jnode *parse_primary(struct parser *P);
static struct jnode *parse_postfix(struct parser *P, struct jnode *n);

/* '(' args ')' — positional and name=value arguments; P at '(' */
static int parse_args(struct parser *P, struct kids *k)
{
    if (expect_op(P, "("))
        return P->e->code;
    while (!is_op(P, ")")) {
        char *kw = NULL;
        if (cur(P)->kind == TK_NAME && P->i + 1 < P->n && P->tk[P->i + 1].kind == TK_OP &&
            !strcmp(P->tk[P->i + 1].s, "=")) {
            kw = cur(P)->s;
            P->i += 2;
        }
        struct jnode *a = parse_expr(P);
        if (!a || kids_add(P, k, a, kw))
            return P->e->code ? P->e->code : ERR_FORMAT;
        if (!accept_op(P, ","))
            break;
    }
    return expect_op(P, ")");
}

static struct jnode *parse_filter_or_test(struct parser *P, struct jnode *n)
{
    for (;;) {
        if (accept_op(P, "|")) {
            if (cur(P)->kind != TK_NAME) {
                pfail(P, ERR_FORMAT, "expected a filter name after '|', found %s", tok_desc(cur(P)));
                return NULL;
            }
            struct jnode *f = node(P, JN_FILTER);
            if (!f)
                return NULL;
            f->name = cur(P)->s;
            P->i++;
            f->a = n;
            struct kids k = {0};
            if (is_op(P, "(") && parse_args(P, &k))
                return NULL;
            kids_set(f, &k);
            n = f;
        } else if (is_name(P, "is")) {
            P->i++;
            struct jnode *t = node(P, JN_TEST);
            if (!t)
                return NULL;
            t->op = accept_name(P, "not");
            if (cur(P)->kind != TK_NAME) {
                pfail(P, ERR_FORMAT, "expected a test name after 'is', found %s", tok_desc(cur(P)));
                return NULL;
            }
            t->name = cur(P)->s;
            P->i++;
            t->a = n;
            struct kids k = {0};
            if (is_op(P, "(")) {
                if (parse_args(P, &k))
                    return NULL;
            } else {
                /* `is divisibleby 3`, `is sameas none`: one bare argument */
                int kd = cur(P)->kind;
                bool arg = kd == TK_STR || kd == TK_INT || kd == TK_FLOAT || is_op(P, "[") || is_op(P, "{") ||
                           (kd == TK_NAME && !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and") &&
                            !is_name(P, "if") && !is_name(P, "in") && !is_name(P, "not") && !is_name(P, "is"));
                if (arg) {
                    struct jnode *a = parse_primary(P);
                    if (a)
                        a = parse_postfix(P, a);
                    if (!a || kids_add(P, &k, a, NULL))
                        return NULL;
                }
            }
            kids_set(t, &k);
            n = t;
        } else if (is_op(P, "(")) {
            struct jnode *c = node(P, JN_CALL);
            if (!c)
                return NULL;
            c->a = n;
            struct kids k = {0};
            if (parse_args(P, &k))
                return NULL;
            kids_set(c, &k);
            n = c;
        } else {
            return n;
        }
    }
}

static struct jnode *parse_postfix(struct parser *P, struct jnode *n)
{
    while (n) {
        if (accept_op(P, ".")) {
            struct jnode *a = node(P, JN_ATTR);
            if (!a)
                return NULL;
            if (cur(P)->kind == TK_NAME) {
                a->name = cur(P)->s;
            } else if (cur(P)->kind == TK_INT) { /* tuple.0 */
                char b[32];
                snprintf(b, sizeof b, "%lld", cur(P)->i);
                a->name = arena_strndup(P->t, b, strlen(b));
                a->kind = JN_INDEX;
                a->b = lit(P, json_integer(cur(P)->i));
            } else {
                pfail(P, ERR_FORMAT, "expected an attribute name after '.', found %s", tok_desc(cur(P)));
                return NULL;
            }
            P->i++;
            a->a = n;
            n = a;
        } else if (accept_op(P, "[")) {
            struct jnode *parts[3] = {NULL, NULL, NULL};
            bool slice = false;
            if (!is_op(P, ":") && !(parts[0] = parse_expr(P)))
                return NULL;
            if (accept_op(P, ":")) {
                slice = true;
                if (!is_op(P, ":") && !is_op(P, "]") && !(parts[1] = parse_expr(P)))
                    return NULL;
                if (accept_op(P, ":") && !is_op(P, "]") && !(parts[2] = parse_expr(P)))
                    return NULL;
            }
            if (expect_op(P, "]"))
                return NULL;
            struct jnode *x = node(P, slice ? JN_SLICE : JN_INDEX);
            if (!x)
                return NULL;
            x->a = n;
            if (slice) {
                x->kids = arena_alloc(P->t, 3 * sizeof *x->kids);
                if (!x->kids)
                    return NULL;
                memcpy(x->kids, parts, sizeof parts);
                x->n_kids = 3;
            } else {
                x->b = parts[0];
            }
            n = x;
        } else if (is_op(P, "(")) {
            struct jnode *c = node(P, JN_CALL);
            if (!c)
                return NULL;
            c->a = n;
            struct kids k = {0};
            if (parse_args(P, &k))
                return NULL;
            kids_set(c, &k);
            n = c;
        } else {
            break;
        }
    }
    return n;
}

static struct jnode *parse_primary(struct parser *P)
{
    if (++P->depth > MAX_NEST) {
        pfail(P, ERR_UNSUPPORTED, "expression nested too deeply");
        return NULL;
    }
    struct jtok *k = cur(P);
    struct jnode *n = NULL;
    switch (k->kind) {
    case TK_NAME:
        P->i++;
        if (!strcmp(k->s, "true") || !strcmp(k->s, "True"))
            n = lit(P, json_true());
        else if (!strcmp(k->s, "false") || !strcmp(k->s, "False"))
            n = lit(P, json_false());
        else if (!strcmp(k->s, "none") || !strcmp(k->s, "None"))
            n = lit(P, json_null());
        else if ((n = node(P, JN_NAME)))
            n->name = k->s;
        break;
    case TK_STR: {
        /* adjacent literals concatenate, as in Python */
        size_t total = 0;
        int j = P->i;
        while (P->tk[j].kind == TK_STR)
            total += P->tk[j++].len;
        char *s = malloc(total + 1);
        if (!s) {
            pfail(P, ERR_NOMEM, "out of memory");
            break;
        }
        size_t o = 0;
        while (cur(P)->kind == TK_STR) {
            memcpy(s + o, cur(P)->s, cur(P)->len);
            o += cur(P)->len;
            P->i++;
        }
        n = lit(P, json_stringn_nocheck(s, o));
        free(s);
        break;
    }
    case TK_INT:
        P->i++;
        n = lit(P, json_integer(k->i));
        break;
    case TK_FLOAT:
        P->i++;
        n = lit(P, json_real(k->f));
        break;
    case TK_OP:
        if (accept_op(P, "(")) {
            if (accept_op(P, ")")) { /* empty tuple */
                n = node(P, JN_LIST);
                break;
            }
            struct jnode *first = parse_expr(P);
            if (!first)
                break;
            if (is_op(P, ",")) {
                struct kids kk = {0};
                if (kids_add(P, &kk, first, NULL))
                    break;
                while (accept_op(P, ",") && !is_op(P, ")")) {
                    struct jnode *x = parse_expr(P);
                    if (!x || kids_add(P, &kk, x, NULL))
                        return NULL;
                }
                if (!(n = node(P, JN_LIST)))
                    break;
                kids_set(n, &kk);
            } else {
                n = first;
            }
            if (expect_op(P, ")"))
                n = NULL;
        } else if (accept_op(P, "[")) {
            struct kids kk = {0};
            while (!is_op(P, "]")) {
                struct jnode *x = parse_expr(P);
                if (!x || kids_add(P, &kk, x, NULL))
                    return NULL;
                if (!accept_op(P, ","))
                    break;
            }
            if (expect_op(P, "]") || !(n = node(P, JN_LIST)))
                return NULL;
            kids_set(n, &kk);
        } else if (accept_op(P, "{")) {
            struct kids kk = {0};
            while (!is_op(P, "}")) {
                struct jnode *key = parse_expr(P);
                if (!key || expect_op(P, ":"))
                    return NULL;
                struct jnode *val = parse_expr(P);
                if (!val || kids_add(P, &kk, key, NULL) || kids_add(P, &kk, val, NULL))
                    return NULL;
                if (!accept_op(P, ","))
                    break;
            }
            if (expect_op(P, "}") || !(n = node(P, JN_DICT)))
                return NULL;
            kids_set(n, &kk);
        } else {
            pfail(P, ERR_FORMAT, "unexpected '%s' in an expression", k->s);
        }
        break;
    default:
        pfail(P, ERR_FORMAT, "expected an expression, found %s", tok_desc(k));
    }
    P->depth--;
    return n;
}

static struct jnode *binary(struct parser *P, int op, struct jnode *a, struct jnode *b)
{
    if (!a || !b)
        return NULL;
    struct jnode *n = node(P, JN_BINARY);
    if (n) {
        n->op = op;
        n->a = a;
        n->b = b;
    }
    return n;
}

static struct jnode *parse_unary(struct parser *P, bool with_filter)
{
    struct jnode *n;
    if (is_op(P, "-") || is_op(P, "+")) {
        int op = cur(P)->s[0];
        P->i++;
        if (++P->depth > MAX_NEST) {
            pfail(P, ERR_UNSUPPORTED, "expression nested too deeply");
            return NULL;
        }
        struct jnode *x = parse_unary(P, false);
        P->depth--;
        if (!x || !(n = node(P, JN_UNARY)))
            return NULL;
        n->op = op;
        n->a = x;
    } else {
        n = parse_postfix(P, parse_primary(P));
    }
    if (n && with_filter)
        n = parse_filter_or_test(P, n);
    return n;
}

static struct jnode *parse_pow(struct parser *P)
{
    struct jnode *a = parse_unary(P, true);
    while (a && accept_op(P, "**"))
        a = binary(P, OP_POW, a, parse_unary(P, true));
    return a;
}

static struct jnode *parse_math2(struct parser *P)
{
    struct jnode *a = parse_pow(P);
    for (;;) {
        int op = is_op(P, "*") ? OP_MUL : is_op(P, "/") ? OP_DIV : is_op(P, "//") ? OP_FLOORDIV
               : is_op(P, "%") ? OP_MOD : 0;
        if (!op || !a)
            return a;
        P->i++;
        a = binary(P, op, a, parse_pow(P));
    }
}

static struct jnode *parse_concat(struct parser *P)
{
    struct jnode *a = parse_math2(P);
    while (a && accept_op(P, "~"))
        a = binary(P, OP_CONCAT, a, parse_math2(P));
    return a;
}

static struct jnode *parse_math1(struct parser *P)
{
    struct jnode *a = parse_concat(P);
    for (;;) {
        int op = is_op(P, "+") ? OP_ADD : is_op(P, "-") ? OP_SUB : 0;
        if (!op || !a)
            return a;
        P->i++;
        a = binary(P, op, a, parse_concat(P));
    }
}

static struct jnode *parse_compare(struct parser *P)
{
    struct jnode *a = parse_math1(P);
    for (;;) {
        if (!a)
            return NULL;
        int op = is_op(P, "==") ? OP_EQ : is_op(P, "!=") ? OP_NE : is_op(P, "<") ? OP_LT : is_op(P, ">") ? OP_GT
               : is_op(P, "<=") ? OP_LE : is_op(P, ">=") ? OP_GE : is_name(P, "in") ? OP_IN : 0;
        if (op) {
            P->i++;
        } else if (is_name(P, "not") && P->i + 1 < P->n && P->tk[P->i + 1].kind == TK_NAME &&
                   !strcmp(P->tk[P->i + 1].s, "in")) {
            op = OP_NOTIN;
            P->i += 2;
        } else {
            return a;
        }
        a = binary(P, op, a, parse_math1(P));
    }
}

static struct jnode *parse_not(struct parser *P)
{
    if (accept_name(P, "not")) {
        if (++P->depth > MAX_NEST) {
            pfail(P, ERR_UNSUPPORTED, "expression nested too deeply");
            return NULL;
        }
        struct jnode *x = parse_not(P), *n;
        P->depth--;
        if (!x || !(n = node(P, JN_UNARY)))
            return NULL;
        n->op = 'n';
        n->a = x;
        return n;
    }
    return parse_compare(P);
}

static struct jnode *parse_and(struct parser *P)
{
    struct jnode *a = parse_not(P);
    while (a && accept_name(P, "and"))
        a = binary(P, OP_AND, a, parse_not(P));
    return a;
}

static struct jnode *parse_or(struct parser *P)
{
    struct jnode *a = parse_and(P);
    while (a && accept_name(P, "or"))
        a = binary(P, OP_OR, a, parse_and(P));
    return a;
}

static struct jnode *parse_expr(struct parser *P)
{
    if (++P->depth > MAX_NEST) {
        pfail(P, ERR_UNSUPPORTED, "expression nested too deeply");
        return NULL;
    }
    struct jnode *a = parse_or(P);
    while (a && is_name(P, "if")) {
        P->i++;
        struct jnode *c = node(P, JN_COND);
        if (!c)
            return NULL;
        c->a = a;
        if (!(c->b = parse_or(P)))
            return NULL;
        if (accept_name(P, "else") && !(c->c = parse_expr(P)))
            return NULL;
        a = c;
    }
    P->depth--;
    return a;
}

/* A comma-separated expression list becomes a tuple (`set a = 1, 2`). */
static struct jnode *parse_tuple_expr(struct parser *P)
{
    struct jnode *a = parse_expr(P);
    if (!a || !is_op(P, ","))
        return a;
    struct kids k = {0};
    if (kids_add(P, &k, a, NULL))
        return NULL;
    while (accept_op(P, ",")) {
        if (cur(P)->kind == TK_BEND)
            break;
        struct jnode *x = parse_expr(P);
        if (!x || kids_add(P, &k, x, NULL))
            return NULL;
    }
    struct jnode *t = node(P, JN_LIST);
    if (t)
        kids_set(t, &k);
    return t;
}

/* ---- statements ---- */

static struct jnode *parse_body(struct parser *P, const char *const *ends, const char **which);

/* Names a for/set statement assigns: `a` or `a, b` or `(a, b)`. */
static int parse_targets(struct parser *P, struct jnode *n)
{
    bool paren = accept_op(P, "(");
    char *names[16];
    int cnt = 0;
    for (;;) {
        if (cur(P)->kind != TK_NAME)
            return pfail(P, ERR_FORMAT, "expected a variable name, found %s", tok_desc(cur(P)));
        if (cnt == 16)
            return pfail(P, ERR_UNSUPPORTED, "too many loop variables");
        names[cnt++] = cur(P)->s;
        P->i++;
        if (!accept_op(P, ","))
            break;
    }
    if (paren && expect_op(P, ")"))
        return P->e->code;
    n->names = arena_alloc(P->t, (size_t)cnt * sizeof *n->names);
    if (!n->names)
        return pfail(P, ERR_NOMEM, "out of memory");
    memcpy(n->names, names, (size_t)cnt * sizeof *names);
    n->n_names = cnt;
    return 0;
}

static struct jnode *parse_if(struct parser *P)
{
    struct jnode *n = node(P, JN_IF);
    if (!n || !(n->a = parse_expr(P)) || expect_kind(P, TK_BEND, "'%}'"))
        return NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const char *which = NULL;
    if (!(n->b = parse_body(P, ends, &which)))
        return NULL;
    if (!strcmp(which, "elif")) {
        n->c = parse_if(P); /* consumes through endif */
        return n->c ? n : NULL;
    }
    if (!strcmp(which, "else")) {
        static const char *const ends2[] = {"endif", NULL};
        if (expect_kind(P, TK_BEND, "'%}'") || !(n->c = parse_body(P, ends2, &which)))
            return NULL;
    }
    return expect_kind(P, TK_BEND, "'%}'") ? NULL : n;
}

static struct jnode *parse_stmt(struct parser *P)
{
    struct jtok *k = cur(P);
    if (k->kind != TK_NAME) {
        pfail(P, ERR_FORMAT, "expected a statement name after '{%%', found %s", tok_desc(k));
        return NULL;
    }
    const char *kw = k->s;
    P->i++;
    if (!strcmp(kw, "if"))
        return parse_if(P);
    if (!strcmp(kw, "for")) {
        struct jnode *n = node(P, JN_FOR);
        if (!n || parse_targets(P, n))
            return NULL;
        if (!accept_name(P, "in")) {
            pfail(P, ERR_FORMAT, "expected 'in' in a for statement, found %s", tok_desc(cur(P)));
            return NULL;
        }
        if (!(n->a = parse_or(P)))
            return NULL;
        if (accept_name(P, "if") && !(n->d = parse_expr(P)))
            return NULL;
        if (is_name(P, "recursive")) {
            pfail(P, ERR_UNSUPPORTED, "recursive for loops are not supported");
            return NULL;
        }
        if (expect_kind(P, TK_BEND, "'%}'"))
            return NULL;
        static const char *const ends[] = {"else", "endfor", NULL};
        const char *which = NULL;
        if (!(n->b = parse_body(P, ends, &which)))
            return NULL;
        if (!strcmp(which, "else")) {
            static const char *const ends2[] = {"endfor", NULL};
            if (expect_kind(P, TK_BEND, "'%}'") || !(n->c = parse_body(P, ends2, &which)))
                return NULL;
        }
        return expect_kind(P, TK_BEND, "'%}'") ? NULL : n;
    }
    if (!strcmp(kw, "set")) {
        struct jnode *n = node(P, JN_SET);
        if (!n)
            return NULL;
        if (cur(P)->kind == TK_NAME && P->tk[P->i + 1].kind == TK_OP && !strcmp(P->tk[P->i + 1].s, ".")) {
            n->name = cur(P)->s;
            P->i += 2;
            if (cur(P)->kind != TK_NAME) {
                pfail(P, ERR_FORMAT, "expected an attribute name in set, found %s", tok_desc(cur(P)));
                return NULL;
            }
            n->attr = cur(P)->s;
            P->i++;
        } else {
            if (parse_targets(P, n))
                return NULL;
            n->name = n->names[0];
        }
        if (accept_op(P, "=")) {
            if (!(n->a = parse_tuple_expr(P)) || expect_kind(P, TK_BEND, "'%}'"))
                return NULL;
            return n;
        }
        if (n->attr || n->n_names != 1) {
            pfail(P, ERR_FORMAT, "expected '=' in set");
            return NULL;
        }
        if (is_op(P, "|")) {
            pfail(P, ERR_UNSUPPORTED, "filtered block set is not supported");
            return NULL;
        }
        if (expect_kind(P, TK_BEND, "'%}'"))
            return NULL;
        n->kind = JN_SETBLK;
        static const char *const ends[] = {"endset", NULL};
        const char *which = NULL;
        if (!(n->b = parse_body(P, ends, &which)) || expect_kind(P, TK_BEND, "'%}'"))
            return NULL;
        return n;
    }
    if (!strcmp(kw, "macro")) {
        struct jnode *n = node(P, JN_MACRO);
        if (!n)
            return NULL;
        if (cur(P)->kind != TK_NAME) {
            pfail(P, ERR_FORMAT, "expected a macro name, found %s", tok_desc(cur(P)));
            return NULL;
        }
        n->name = cur(P)->s;
        P->i++;
        if (expect_op(P, "("))
            return NULL;
        struct kids defs = {0};
        char *names[64];
        int cnt = 0;
        while (!is_op(P, ")")) {
            if (cur(P)->kind != TK_NAME || cnt == 64) {
                pfail(P, ERR_FORMAT, "expected a macro parameter name, found %s", tok_desc(cur(P)));
                return NULL;
            }
            names[cnt++] = cur(P)->s;
            P->i++;
            struct jnode *def = NULL;
            if (accept_op(P, "=") && !(def = parse_expr(P)))
                return NULL;
            if (kids_add(P, &defs, def, NULL))
                return NULL;
            if (!accept_op(P, ","))
                break;
        }
        if (expect_op(P, ")") || expect_kind(P, TK_BEND, "'%}'"))
            return NULL;
        kids_set(n, &defs);
        if (cnt) {
            if (!(n->names = arena_alloc(P->t, (size_t)cnt * sizeof *n->names)))
                return NULL;
            memcpy(n->names, names, (size_t)cnt * sizeof *names);
        }
        n->n_names = cnt;
        static const char *const ends[] = {"endmacro", NULL};
        const char *which = NULL;
        if (!(n->b = parse_body(P, ends, &which)))
            return NULL;
        if (cur(P)->kind == TK_NAME) /* {% endmacro name %} */
            P->i++;
        return expect_kind(P, TK_BEND, "'%}'") ? NULL : n;
    }
    if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        struct jnode *n = node(P, kw[0] == 'b' ? JN_BREAK : JN_CONTINUE);
        return n && !expect_kind(P, TK_BEND, "'%}'") ? n : NULL;
    }
    if (!strcmp(kw, "generation")) {
        /* a marker some templates put around assistant text (for training
         * masks): its body renders as is */
        if (expect_kind(P, TK_BEND, "'%}'"))
            return NULL;
        static const char *const ends[] = {"endgeneration", NULL};
        const char *which = NULL;
        struct jnode *b = parse_body(P, ends, &which);
        return b && !expect_kind(P, TK_BEND, "'%}'") ? b : NULL;
    }
    P->i--;
    pfail(P, ERR_UNSUPPORTED, "unsupported statement '{%% %s %%}'", kw);
    return NULL;
}

/* Statements until `{% <one of ends>` (left consumed up to and including the
 * end keyword; *which names it) or EOF when ends is NULL. */
static struct jnode *parse_body(struct parser *P, const char *const *ends, const char **which)
{
    if (++P->depth > MAX_NEST) {
        pfail(P, ERR_UNSUPPORTED, "statements nested too deeply");
        return NULL;
    }
    struct jnode *blk = node(P, JN_BLOCK);
    if (!blk)
        return NULL;
    struct kids k = {0};
    for (;;) {
        struct jtok *t = cur(P);
        struct jnode *s = NULL;
        if (t->kind == TK_EOF) {
            if (ends) {
                const char *need = ends[0];
                for (int j = 0; ends[j]; j++)
                    if (!strncmp(ends[j], "end", 3))
                        need = ends[j];
                pfail(P, ERR_FORMAT, "missing '{%% %s %%}'", need);
                return NULL;
            }
            break;
        }
        if (t->kind == TK_TEXT) {
            P->i++;
            if (!(s = node(P, JN_TEXT)) || !(s->lit = json_stringn_nocheck(t->s, t->len)) ||
                json_array_append_new(P->t->lits, s->lit)) {
                pfail(P, ERR_NOMEM, "out of memory");
                return NULL;
            }
        } else if (t->kind == TK_VBEGIN) {
            P->i++;
            if (!(s = node(P, JN_OUTPUT)) || !(s->a = parse_expr(P)) || expect_kind(P, TK_VEND, "'}}'"))
                return NULL;
        } else if (t->kind == TK_BBEGIN) {
            struct jtok *kw = &P->tk[P->i + 1];
            if (ends && kw->kind == TK_NAME) {
                for (int j = 0; ends[j]; j++)
                    if (!strcmp(kw->s, ends[j])) {
                        *which = ends[j];
                        P->i += 2;
                        kids_set(blk, &k);
                        P->depth--;
                        return blk;
                    }
            }
            if (kw->kind == TK_NAME && (!strncmp(kw->s, "end", 3) || !strcmp(kw->s, "elif") || !strcmp(kw->s, "else"))) {
                P->i++;
                pfail(P, ERR_FORMAT, "unexpected '{%% %s %%}'", kw->s);
                return NULL;
            }
            P->i++;
            if (!(s = parse_stmt(P)))
                return NULL;
        } else {
            pfail(P, ERR_FORMAT, "unexpected %s", tok_desc(t));
            return NULL;
        }
        if (kids_add(P, &k, s, NULL))
            return NULL;
    }
    kids_set(blk, &k);
    P->depth--;
    return blk;
}

int jinja_parse(struct jinja_tmpl **out, const char *src, size_t len, struct err *e)
{
    *out = NULL;
    struct jinja_tmpl *t = calloc(1, sizeof *t);
    if (!t || !(t->lits = json_array())) {
        free(t);
        return err_set(e, ERR_NOMEM, "chat template: out of memory");
    }
    struct err local;
    if (!e)
        e = &local;
    err_clear(e);
    struct lexer L = {.t = t, .src = src, .len = len, .line = 1, .e = e};
    int rc = lex_all(&L);
    if (!rc) {
        struct parser P = {.t = t, .tk = L.toks, .n = L.n, .e = e};
        t->root = parse_body(&P, NULL, NULL);
        if (!t->root)
            rc = e->code ? e->code : ERR_FORMAT;
    }
    free(L.toks);
    if (rc) {
        jinja_free(t);
        return rc;
    }
    *out = t;
    return 0;
}
