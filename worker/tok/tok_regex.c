/* tok_regex.c — a small backtracking regex engine over codepoint arrays.
 *
 * llama.cpp runs the pre-tokenizer regexes that have no hand-written splitter
 * through std::regex (ECMAScript): leftmost match, ordered alternation,
 * greedy quantifiers with backtracking. This engine implements that subset
 * (classes, escapes, ?, *, +, {m,n}, groups, (?!...), |, $) so the results
 * are the same. With `collapsed`, \p{L}/\p{N}/\p{P}/\p{M}/\p{S} mean the class
 * llama.cpp substitutes for them when it matches on its "collapsed" text (one
 * byte per codepoint: the ASCII members plus one stand-in byte).
 *
 * Matching is a backtracking VM with an explicit stack. A (pc, pos) state that
 * was fully explored without a match cannot match later either (no captures,
 * no back-references), so such states are memoized; that keeps every search
 * linear in pattern size x text length. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

enum { OP_CLASS, OP_SPLIT, OP_JMP, OP_MATCH, OP_END, OP_NLA };

struct inst {
    uint8_t op;
    int32_t x, y; /* CLASS: x = class; SPLIT: x first, y second; JMP: x; NLA: x = sub start, y = next */
};

struct range { uint32_t lo, hi; };
struct cls {
    bool neg;
    int n;
    struct range *r; /* [n] */
};

enum { N_CLASS, N_SEQ, N_ALT, N_REP, N_NLA, N_END };
struct node {
    int type;
    int cls;            /* N_CLASS */
    int n;              /* children count (SEQ/ALT) */
    struct node **kid;  /* [n]; REP/NLA use kid[0] */
    int min, max;       /* REP; max -1 = unbounded */
};

struct tok_regex {
    struct inst *code; /* [n_code] */
    int n_code, cap_code;
    struct cls *cls;   /* [n_cls] */
    int n_cls, cap_cls;
};

struct parser {
    const uint32_t *p; /* pattern as codepoints */
    size_t n, i;
    bool collapsed;
    struct tok_regex *re;
    bool fail;
};

static void node_free(struct node *nd)
{
    if (!nd)
        return;
    for (int i = 0; i < nd->n; i++)
        node_free(nd->kid[i]);
    free(nd->kid);
    free(nd);
}

static struct node *node_new(struct parser *ps, int type)
{
    struct node *nd = calloc(1, sizeof *nd);
    if (!nd)
        ps->fail = true;
    else
        nd->type = type;
    return nd;
}

static bool node_add(struct parser *ps, struct node *nd, struct node *kid)
{
    struct node **k = realloc(nd->kid, (size_t)(nd->n + 1) * sizeof *k);
    if (!k) {
        ps->fail = true;
        node_free(kid);
        return false;
    }
    nd->kid = k;
    nd->kid[nd->n++] = kid;
    return true;
}

static int cls_new(struct parser *ps, bool neg)
{
    struct tok_regex *re = ps->re;
    if (re->n_cls == re->cap_cls) {
        int cap = re->cap_cls ? re->cap_cls * 2 : 16;
        struct cls *c = realloc(re->cls, (size_t)cap * sizeof *c);
        if (!c) {
            ps->fail = true;
            return -1;
        }
        re->cls = c;
        re->cap_cls = cap;
    }
    re->cls[re->n_cls] = (struct cls){neg, 0, NULL};
    return re->n_cls++;
}

static void cls_add(struct parser *ps, int ci, uint32_t lo, uint32_t hi)
{
    if (ci < 0)
        return;
    struct cls *c = &ps->re->cls[ci];
    struct range *r = realloc(c->r, (size_t)(c->n + 1) * sizeof *r);
    if (!r) {
        ps->fail = true;
        return;
    }
    c->r = r;
    c->r[c->n++] = (struct range){lo, hi};
}

/* The members llama.cpp puts in place of \p{X} on collapsed text. */
static bool add_collapsed_cat(struct parser *ps, int ci, uint32_t cat)
{
    switch (cat) {
    case 'N':
        cls_add(ps, ci, 0xD1, 0xD1);
        cls_add(ps, ci, '0', '9');
        return true;
    case 'L':
        cls_add(ps, ci, 0xD2, 0xD2);
        cls_add(ps, ci, 'A', 'Z');
        cls_add(ps, ci, 'a', 'z');
        return true;
    case 'P':
        cls_add(ps, ci, 0xD3, 0xD3);
        cls_add(ps, ci, 0x21, 0x23);
        cls_add(ps, ci, 0x25, 0x2A);
        cls_add(ps, ci, 0x2C, 0x2F);
        cls_add(ps, ci, 0x3A, 0x3B);
        cls_add(ps, ci, 0x3F, 0x40);
        cls_add(ps, ci, 0x5B, 0x5D);
        cls_add(ps, ci, 0x5F, 0x5F);
        cls_add(ps, ci, 0x7B, 0x7B);
        cls_add(ps, ci, 0x7D, 0x7D);
        return true;
    case 'M':
        cls_add(ps, ci, 0xD4, 0xD4);
        return true;
    case 'S':
        cls_add(ps, ci, 0xD5, 0xD5);
        cls_add(ps, ci, 0x24, 0x24);
        cls_add(ps, ci, 0x2B, 0x2B);
        cls_add(ps, ci, 0x3C, 0x3E);
        cls_add(ps, ci, 0x5E, 0x5E);
        cls_add(ps, ci, 0x60, 0x60);
        cls_add(ps, ci, 0x7C, 0x7C);
        return true;
    }
    return false;
}

static int hexval(uint32_t c)
{
    if (c >= '0' && c <= '9') return (int)(c - '0');
    if (c >= 'a' && c <= 'f') return (int)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return (int)(c - 'A' + 10);
    return -1;
}

/* Parse an escape after '\'. Returns: 1 = single char in *ch, 2 = class
 * content added to ci (\s, \d, \p{X}), 3 = negated class kind in *ch ('S','D'),
 * 0 = error. */
static int parse_escape(struct parser *ps, int ci, uint32_t *ch)
{
    if (ps->i >= ps->n)
        return 0;
    uint32_t c = ps->p[ps->i++];
    switch (c) {
    case 'r': *ch = '\r'; return 1;
    case 'n': *ch = '\n'; return 1;
    case 't': *ch = '\t'; return 1;
    case 'v': *ch = '\v'; return 1;
    case 'f': *ch = '\f'; return 1;
    case '0': *ch = 0; return 1;
    case 'x': case 'u': {
        int nd = c == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int k = 0; k < nd; k++) {
            if (ps->i >= ps->n || hexval(ps->p[ps->i]) < 0)
                return 0;
            v = v * 16 + (uint32_t)hexval(ps->p[ps->i++]);
        }
        *ch = v;
        return 1;
    }
    case 's':
        cls_add(ps, ci, 0x09, 0x0D);
        cls_add(ps, ci, 0x20, 0x20);
        return 2;
    case 'd':
        cls_add(ps, ci, '0', '9');
        return 2;
    case 'S': case 'D':
        *ch = c;
        return 3;
    case 'p':
        if (!ps->collapsed || ps->i + 2 >= ps->n || ps->p[ps->i] != '{' || ps->p[ps->i + 2] != '}')
            return 0;
        if (!add_collapsed_cat(ps, ci, ps->p[ps->i + 1]))
            return 0;
        ps->i += 3;
        return 2;
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            return 0; /* an escape we do not know: refuse rather than guess */
        *ch = c;
        return 1;
    }
}

static struct node *class_node(struct parser *ps, int ci)
{
    struct node *nd = node_new(ps, N_CLASS);
    if (nd)
        nd->cls = ci;
    return nd;
}

static struct node *parse_bracket(struct parser *ps)
{
    bool neg = false;
    if (ps->i < ps->n && ps->p[ps->i] == '^') {
        neg = true;
        ps->i++;
    }
    int ci = cls_new(ps, neg);
    bool first = true;
    while (ps->i < ps->n && (ps->p[ps->i] != ']' || first)) {
        first = false;
        uint32_t lo = ps->p[ps->i++];
        if (lo == '\\') {
            int k = parse_escape(ps, ci, &lo);
            if (k == 2)
                continue;
            if (k != 1) {
                ps->fail = true;
                return NULL;
            }
        }
        uint32_t hi = lo;
        if (ps->i + 1 < ps->n && ps->p[ps->i] == '-' && ps->p[ps->i + 1] != ']') {
            ps->i++;
            hi = ps->p[ps->i++];
            if (hi == '\\') {
                if (parse_escape(ps, ci, &hi) != 1) {
                    ps->fail = true;
                    return NULL;
                }
            }
            if (hi < lo) {
                ps->fail = true;
                return NULL;
            }
        }
        cls_add(ps, ci, lo, hi);
    }
    if (ps->i >= ps->n) {
        ps->fail = true;
        return NULL;
    }
    ps->i++; /* ']' */
    return class_node(ps, ci);
}

static struct node *parse_alt(struct parser *ps);

static struct node *parse_atom(struct parser *ps)
{
    uint32_t c = ps->p[ps->i++];
    if (c == '(') {
        int type = 0; /* plain group */
        if (ps->i + 1 < ps->n && ps->p[ps->i] == '?') {
            if (ps->p[ps->i + 1] == ':') type = 0;
            else if (ps->p[ps->i + 1] == '!') type = 1;
            else { ps->fail = true; return NULL; }
            ps->i += 2;
        }
        struct node *inner = parse_alt(ps);
        if (!inner || ps->i >= ps->n || ps->p[ps->i] != ')') {
            node_free(inner);
            ps->fail = true;
            return NULL;
        }
        ps->i++;
        if (type == 0)
            return inner;
        struct node *nd = node_new(ps, N_NLA);
        if (!nd || !node_add(ps, nd, inner)) {
            node_free(nd);
            return NULL;
        }
        return nd;
    }
    if (c == '[')
        return parse_bracket(ps);
    if (c == '$')
        return node_new(ps, N_END);
    if (c == '.') { /* any char but line terminators */
        int ci = cls_new(ps, true);
        cls_add(ps, ci, '\n', '\n');
        cls_add(ps, ci, '\r', '\r');
        cls_add(ps, ci, 0x2028, 0x2029);
        return class_node(ps, ci);
    }
    if (c == '\\') {
        int ci = cls_new(ps, false);
        uint32_t ch = 0;
        int k = parse_escape(ps, ci, &ch);
        if (k == 1)
            cls_add(ps, ci, ch, ch);
        else if (k == 3) {
            ps->re->cls[ci].neg = true;
            if (ch == 'S') {
                cls_add(ps, ci, 0x09, 0x0D);
                cls_add(ps, ci, 0x20, 0x20);
            } else {
                cls_add(ps, ci, '0', '9');
            }
        } else if (k != 2) {
            ps->fail = true;
            return NULL;
        }
        return class_node(ps, ci);
    }
    if (c == ')' || c == '|' || c == '*' || c == '+' || c == '?') {
        ps->fail = true;
        return NULL;
    }
    int ci = cls_new(ps, false);
    cls_add(ps, ci, c, c);
    return class_node(ps, ci);
}

static bool parse_int(struct parser *ps, int *v)
{
    if (ps->i >= ps->n || ps->p[ps->i] < '0' || ps->p[ps->i] > '9')
        return false;
    int x = 0;
    while (ps->i < ps->n && ps->p[ps->i] >= '0' && ps->p[ps->i] <= '9' && x < 100000)
        x = x * 10 + (int)(ps->p[ps->i++] - '0');
    *v = x;
    return true;
}

static struct node *parse_seq(struct parser *ps)
{
    struct node *seq = node_new(ps, N_SEQ);
    if (!seq)
        return NULL;
    while (ps->i < ps->n && ps->p[ps->i] != '|' && ps->p[ps->i] != ')') {
        struct node *a = parse_atom(ps);
        if (!a) {
            node_free(seq);
            return NULL;
        }
        while (ps->i < ps->n) {
            uint32_t q = ps->p[ps->i];
            int mn, mx;
            if (q == '?') { mn = 0; mx = 1; ps->i++; }
            else if (q == '*') { mn = 0; mx = -1; ps->i++; }
            else if (q == '+') { mn = 1; mx = -1; ps->i++; }
            else if (q == '{') {
                size_t save = ps->i++;
                if (!parse_int(ps, &mn)) { ps->i = save; break; }
                mx = mn;
                if (ps->i < ps->n && ps->p[ps->i] == ',') {
                    ps->i++;
                    if (!parse_int(ps, &mx))
                        mx = -1;
                }
                if (ps->i >= ps->n || ps->p[ps->i] != '}' || (mx >= 0 && mx < mn) || mn > 1000 || mx > 1000) {
                    node_free(a);
                    node_free(seq);
                    ps->fail = true;
                    return NULL;
                }
                ps->i++;
            } else
                break;
            if (ps->i < ps->n && ps->p[ps->i] == '?') { /* lazy quantifiers: not used by any pattern */
                node_free(a);
                node_free(seq);
                ps->fail = true;
                return NULL;
            }
            struct node *r = node_new(ps, N_REP);
            if (!r || !node_add(ps, r, a)) {
                node_free(r);
                node_free(seq);
                return NULL;
            }
            r->min = mn;
            r->max = mx;
            a = r;
        }
        if (!node_add(ps, seq, a)) {
            node_free(seq);
            return NULL;
        }
    }
    return seq;
}

static struct node *parse_alt(struct parser *ps)
{
    struct node *first = parse_seq(ps);
    if (!first)
        return NULL;
    if (ps->i >= ps->n || ps->p[ps->i] != '|')
        return first;
    struct node *alt = node_new(ps, N_ALT);
    if (!alt || !node_add(ps, alt, first)) {
        node_free(alt);
        return NULL;
    }
    while (ps->i < ps->n && ps->p[ps->i] == '|') {
        ps->i++;
        struct node *s = parse_seq(ps);
        if (!s || !node_add(ps, alt, s)) {
            node_free(alt);
            return NULL;
        }
    }
    return alt;
}

static int emit(struct tok_regex *re, int op, int x, int y)
{
    if (re->n_code == re->cap_code) {
        int cap = re->cap_code ? re->cap_code * 2 : 64;
        struct inst *c = realloc(re->code, (size_t)cap * sizeof *c);
        if (!c)
            return -1;
        re->code = c;
        re->cap_code = cap;
    }
    re->code[re->n_code] = (struct inst){(uint8_t)op, x, y};
    return re->n_code++;
}

static int gen(struct tok_regex *re, const struct node *nd)
{
    switch (nd->type) {
    case N_CLASS:
        return emit(re, OP_CLASS, nd->cls, 0) < 0 ? -1 : 0;
    case N_END:
        return emit(re, OP_END, 0, 0) < 0 ? -1 : 0;
    case N_SEQ:
        for (int i = 0; i < nd->n; i++)
            if (gen(re, nd->kid[i]) < 0)
                return -1;
        return 0;
    case N_ALT: {
        /* SPLIT L1, next; L1: alt0; JMP end; next: SPLIT L2, next2 ... last alt */
        int *jumps = malloc((size_t)nd->n * sizeof *jumps);
        if (!jumps)
            return -1;
        for (int i = 0; i < nd->n; i++) {
            int split = -1;
            if (i + 1 < nd->n && (split = emit(re, OP_SPLIT, 0, 0)) < 0)
                goto fail;
            if (split >= 0)
                re->code[split].x = re->n_code;
            if (gen(re, nd->kid[i]) < 0)
                goto fail;
            jumps[i] = -1;
            if (i + 1 < nd->n) {
                if ((jumps[i] = emit(re, OP_JMP, 0, 0)) < 0)
                    goto fail;
                re->code[split].y = re->n_code;
            }
        }
        for (int i = 0; i + 1 < nd->n; i++)
            re->code[jumps[i]].x = re->n_code;
        free(jumps);
        return 0;
    fail:
        free(jumps);
        return -1;
    }
    case N_REP: {
        const struct node *a = nd->kid[0];
        for (int i = 0; i < nd->min; i++)
            if (gen(re, a) < 0)
                return -1;
        if (nd->max < 0) {
            /* L: SPLIT body, out; body; JMP L */
            int l = emit(re, OP_SPLIT, 0, 0);
            if (l < 0)
                return -1;
            re->code[l].x = re->n_code;
            if (gen(re, a) < 0 || emit(re, OP_JMP, l, 0) < 0)
                return -1;
            re->code[l].y = re->n_code;
            return 0;
        }
        int opt = nd->max - nd->min;
        int *splits = malloc((size_t)(opt ? opt : 1) * sizeof *splits);
        if (!splits)
            return -1;
        for (int i = 0; i < opt; i++) {
            if ((splits[i] = emit(re, OP_SPLIT, 0, 0)) < 0 || (re->code[splits[i]].x = re->n_code, gen(re, a) < 0)) {
                free(splits);
                return -1;
            }
        }
        for (int i = 0; i < opt; i++)
            re->code[splits[i]].y = re->n_code;
        free(splits);
        return 0;
    }
    case N_NLA: {
        int p = emit(re, OP_NLA, 0, 0);
        if (p < 0)
            return -1;
        re->code[p].x = re->n_code;
        if (gen(re, nd->kid[0]) < 0 || emit(re, OP_MATCH, 0, 0) < 0)
            return -1;
        re->code[p].y = re->n_code;
        return 0;
    }
    }
    return -1;
}

void tok_regex_free(struct tok_regex *re)
{
    if (!re)
        return;
    for (int i = 0; i < re->n_cls; i++)
        free(re->cls[i].r);
    free(re->cls);
    free(re->code);
    free(re);
}

int tok_regex_compile(struct tok_regex **out, const char *pattern, bool collapsed)
{
    *out = NULL;
    uint32_t *cp;
    size_t n;
    if (tok_utf8_decode(pattern, strlen(pattern), &cp, &n) < 0)
        return ERR_NOMEM;
    struct tok_regex *re = calloc(1, sizeof *re);
    if (!re) {
        free(cp);
        return ERR_NOMEM;
    }
    struct parser ps = {cp, n, 0, collapsed, re, false};
    struct node *root = parse_alt(&ps);
    int rc = 0;
    if (!root || ps.fail || ps.i != n)
        rc = ERR_FORMAT;
    else if (gen(re, root) < 0 || emit(re, OP_MATCH, 0, 0) < 0)
        rc = ERR_NOMEM;
    node_free(root);
    free(cp);
    if (rc) {
        tok_regex_free(re);
        return rc;
    }
    *out = re;
    return 0;
}

static bool cls_match(const struct cls *c, uint32_t ch)
{
    bool in = false;
    for (int i = 0; i < c->n; i++)
        if (ch >= c->r[i].lo && ch <= c->r[i].hi) {
            in = true;
            break;
        }
    return in != c->neg;
}

struct vm {
    const struct tok_regex *re;
    const uint32_t *s;
    size_t n;
    uint32_t *memo; /* [n_code * (n + 1)] generation stamps, or NULL */
    uint32_t gen;
    size_t *stack;  /* (pc, pos) pairs */
    size_t sp, cap;
};

static bool vm_push(struct vm *m, size_t pc, size_t pos)
{
    if (m->sp + 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 256;
        size_t *st = realloc(m->stack, cap * sizeof *st);
        if (!st)
            return false;
        m->stack = st;
        m->cap = cap;
    }
    m->stack[m->sp++] = pc;
    m->stack[m->sp++] = pos;
    return true;
}

/* Run from (pc0, pos0) until the first MATCH reached; 1 = matched (*end set),
 * 0 = no match, <0 = out of memory. `base` is the stack depth this run owns. */
static int vm_run(struct vm *m, size_t pc0, size_t pos0, bool use_memo, size_t *end)
{
    const struct inst *code = m->re->code;
    size_t base = m->sp;
    if (!vm_push(m, pc0, pos0))
        return ERR_NOMEM;
    while (m->sp > base) {
        size_t pos = m->stack[--m->sp];
        size_t pc = m->stack[--m->sp];
        for (;;) {
            if (use_memo && m->memo) {
                uint32_t *st = &m->memo[pc * (m->n + 1) + pos];
                if (*st == m->gen)
                    break;
                *st = m->gen;
            }
            const struct inst *in = &code[pc];
            if (in->op == OP_CLASS) {
                if (pos < m->n && cls_match(&m->re->cls[in->x], m->s[pos])) {
                    pc++;
                    pos++;
                    continue;
                }
                break;
            } else if (in->op == OP_JMP) {
                pc = (size_t)in->x;
            } else if (in->op == OP_SPLIT) {
                if (!vm_push(m, (size_t)in->y, pos))
                    return ERR_NOMEM;
                pc = (size_t)in->x;
            } else if (in->op == OP_MATCH) {
                *end = pos;
                m->sp = base;
                return 1;
            } else if (in->op == OP_END) {
                if (pos != m->n)
                    break;
                pc++;
            } else { /* OP_NLA: the sub-pattern must not match here */
                size_t e2;
                int r = vm_run(m, (size_t)in->x, pos, false, &e2);
                if (r < 0)
                    return r;
                if (r)
                    break;
                pc = (size_t)in->y;
            }
        }
    }
    return 0;
}

/* All non-overlapping leftmost matches in s[0..n), like std::regex_iterator.
 * *spans gets (start, end) pairs. Empty matches are dropped (they produce
 * no token in llama.cpp either). */
int tok_regex_find_all(struct tok_regex *re, const uint32_t *s, size_t n, size_t **spans, size_t *n_spans)
{
    struct vm m = {re, s, n, NULL, 1, NULL, 0, 0};
    size_t states = (size_t)re->n_code * (n + 1);
    if (states <= (size_t)4 << 20) /* 16 MiB; longer pieces backtrack without the memo */
        m.memo = calloc(states, sizeof *m.memo);
    size_t *out = NULL, n_out = 0, cap_out = 0;
    int rc = 0;
    size_t from = 0;
    while (from <= n) {
        size_t st, end = 0;
        int r = 0;
        for (st = from; st <= n; st++) {
            r = vm_run(&m, 0, st, true, &end);
            if (r)
                break;
        }
        if (r < 0) {
            rc = r;
            break;
        }
        if (!r)
            break;
        m.gen++; /* states explored in a successful search are not all failures */
        if (end > st) {
            if (n_out + 2 > cap_out) {
                cap_out = cap_out ? cap_out * 2 : 64;
                size_t *o = realloc(out, cap_out * sizeof *o);
                if (!o) {
                    rc = ERR_NOMEM;
                    break;
                }
                out = o;
            }
            out[n_out++] = st;
            out[n_out++] = end;
            from = end;
        } else {
            from = st + 1;
        }
    }
    free(m.memo);
    free(m.stack);
    if (rc) {
        free(out);
        return rc;
    }
    *spans = out;
    *n_spans = n_out / 2;
    return 0;
}
