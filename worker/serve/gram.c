/* gram.c — byte grammar, pushdown parser over sets of stacks, token mask
 * by trie walk (see gram.h for the model). */
#include "gram.h"

#include <stdlib.h>
#include <string.h>

/* Flattened elements: ≥ 0 a byte-set id, END closes an alternative, ≤ −2 a
 * rule reference (rule = −e − 2). */
#define END (-1)
#define GRAM_MASK_MEMO 4
#define GRAM_DT_MAX 1024 /* next-set tables a state keeps (1 MiB), each 256 ids; past it the memo is cleared */
#define REF(r) (-(r) - 2)
#define REF_RULE(e) (-(e) - 2)

struct rule {
    int32_t *alt; /* [n] start position of each alternative in elems */
    int32_t n, cap;
};

struct gram {
    int32_t *elems;
    size_t n_elems, cap_elems;
    struct gram_set *sets;
    int32_t n_sets, cap_sets;
    int32_t single[256]; /* set id of each one-byte set, −1 not made yet */
    struct rule *rules;
    int32_t n_rules, cap_rules;
    int32_t root;
    bool oom, too_big;
};

/* ---------------------------------------------------------------- sets */

void gram_set_clear(struct gram_set *s) { memset(s, 0, sizeof *s); }

void gram_set_add(struct gram_set *s, unsigned lo, unsigned hi)
{
    for (unsigned b = lo; b <= hi && b < 256; b++)
        s->w[b >> 5] |= 1u << (b & 31);
}

bool gram_set_has(const struct gram_set *s, unsigned b) { return b < 256 && (s->w[b >> 5] >> (b & 31)) & 1u; }

/* ---------------------------------------------------------------- building */

static bool grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * size);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

void gram_seq_init(struct gram_seq *q) { memset(q, 0, sizeof *q); }
void gram_seq_free(struct gram_seq *q)
{
    free(q->e);
    memset(q, 0, sizeof *q);
}
void gram_seq_clear(struct gram_seq *q) { q->n = 0; }

static void seq_push(struct gram_seq *q, int32_t x)
{
    if (q->oom || !grow((void **)&q->e, &q->cap, q->n + 1, sizeof *q->e)) {
        q->oom = true;
        return;
    }
    q->e[q->n++] = x;
}

struct gram *gram_new(void)
{
    struct gram *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    for (int i = 0; i < 256; i++)
        g->single[i] = -1;
    return g;
}

void gram_free(struct gram *g)
{
    if (!g)
        return;
    for (int32_t i = 0; i < g->n_rules; i++)
        free(g->rules[i].alt);
    free(g->rules);
    free(g->sets);
    free(g->elems);
    free(g);
}

int gram_error(const struct gram *g, struct err *e)
{
    if (!g || g->oom)
        return err_set(e, ERR_NOMEM, "grammar: out of memory");
    if (g->too_big)
        return err_set(e, ERR_RANGE, "grammar: more than %d elements (the schema is too large)", GRAM_MAX_ELEMS);
    if (g->n_rules == 0)
        return err_set(e, ERR_INVALID, "grammar: no rules");
    return 0;
}

int32_t gram_rule_new(struct gram *g)
{
    size_t cap = (size_t)g->cap_rules;
    if (g->oom || !grow((void **)&g->rules, &cap, (size_t)g->n_rules + 1, sizeof *g->rules)) {
        g->oom = true;
        return 0;
    }
    g->cap_rules = (int32_t)cap;
    g->rules[g->n_rules] = (struct rule){0};
    return g->n_rules++;
}

static int32_t set_id(struct gram *g, const struct gram_set *s)
{
    size_t cap = (size_t)g->cap_sets;
    if (g->oom || !grow((void **)&g->sets, &cap, (size_t)g->n_sets + 1, sizeof *g->sets)) {
        g->oom = true;
        return 0;
    }
    g->cap_sets = (int32_t)cap;
    g->sets[g->n_sets] = *s;
    return g->n_sets++;
}

void gram_seq_set(struct gram *g, struct gram_seq *q, const struct gram_set *s) { seq_push(q, set_id(g, s)); }

void gram_seq_range(struct gram *g, struct gram_seq *q, unsigned lo, unsigned hi)
{
    if (lo == hi && lo < 256) {
        if (g->single[lo] < 0) {
            struct gram_set s;
            gram_set_clear(&s);
            gram_set_add(&s, lo, lo);
            g->single[lo] = set_id(g, &s);
        }
        seq_push(q, g->single[lo]);
        return;
    }
    struct gram_set s;
    gram_set_clear(&s);
    gram_set_add(&s, lo, hi);
    gram_seq_set(g, q, &s);
}

void gram_seq_lit(struct gram *g, struct gram_seq *q, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        gram_seq_range(g, q, (unsigned char)s[i], (unsigned char)s[i]);
}

void gram_seq_ref(struct gram_seq *q, int32_t rule) { seq_push(q, REF(rule)); }

void gram_seq_append(struct gram_seq *q, const struct gram_seq *tail)
{
    for (size_t i = 0; i < tail->n; i++)
        seq_push(q, tail->e[i]);
    q->oom |= tail->oom;
}

void gram_alt(struct gram *g, int32_t rule, const struct gram_seq *q)
{
    if (q->oom)
        g->oom = true;
    if (g->oom || g->too_big || rule < 0 || rule >= g->n_rules)
        return;
    if (g->n_elems + q->n + 1 > GRAM_MAX_ELEMS) {
        g->too_big = true;
        return;
    }
    struct rule *r = &g->rules[rule];
    size_t cap = (size_t)r->cap;
    if (!grow((void **)&g->elems, &g->cap_elems, g->n_elems + q->n + 1, sizeof *g->elems) ||
        !grow((void **)&r->alt, &cap, (size_t)r->n + 1, sizeof *r->alt)) {
        g->oom = true;
        return;
    }
    r->cap = (int32_t)cap;
    r->alt[r->n++] = (int32_t)g->n_elems;
    if (q->n)
        memcpy(g->elems + g->n_elems, q->e, q->n * sizeof *q->e);
    g->n_elems += q->n;
    g->elems[g->n_elems++] = END;
}

int32_t gram_rule_of(struct gram *g, const struct gram_seq *q)
{
    int32_t r = gram_rule_new(g);
    gram_alt(g, r, q);
    return r;
}

int32_t gram_rule_repeat(struct gram *g, int32_t rule, int32_t min, int32_t max)
{
    if (min < 0)
        min = 0;
    struct gram_seq q;
    gram_seq_init(&q);
    int32_t tail = -1;
    if (max < 0) { /* S ::= item S | ε — the ref ends its alternative: no stack growth */
        tail = gram_rule_new(g);
        gram_seq_ref(&q, rule);
        gram_seq_ref(&q, tail);
        gram_alt(g, tail, &q);
        gram_seq_clear(&q);
        gram_alt(g, tail, &q);
    } else if (max > min) { /* O_k ::= item O_{k−1} | ε, O_0 = ε */
        for (int32_t k = 1; k <= max - min && !g->oom && !g->too_big; k++) {
            int32_t o = gram_rule_new(g);
            gram_seq_clear(&q);
            gram_seq_ref(&q, rule);
            if (tail >= 0)
                gram_seq_ref(&q, tail);
            gram_alt(g, o, &q);
            gram_seq_clear(&q);
            gram_alt(g, o, &q);
            tail = o;
        }
    }
    gram_seq_clear(&q);
    for (int32_t i = 0; i < min && !q.oom; i++)
        gram_seq_ref(&q, rule);
    if (tail >= 0)
        gram_seq_ref(&q, tail);
    int32_t r = gram_rule_new(g);
    if (max < 0 || max >= min)
        gram_alt(g, r, &q); /* max < min: the rule matches nothing */
    gram_seq_free(&q);
    return r;
}

/* Left recursion: rule r reaches itself through references that can come
 * first (everything before them can match nothing). The parser would expand
 * such a rule until its depth bound, in as many ways as the rule has such
 * alternatives at every level — a schema must not be able to ask for that. */
int gram_check(const struct gram *g, struct err *e)
{
    int rc = gram_error(g, e);
    if (rc)
        return rc;
    int32_t n = g->n_rules;
    bool *nullable = calloc((size_t)n, sizeof *nullable);
    int32_t *first = malloc(((size_t)n + 1) * sizeof *first), *edges = NULL, *stack = NULL;
    uint8_t *color = calloc((size_t)n, 1);
    size_t n_edges = 0;
    if (!nullable || !first || !color)
        goto oom;
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < n; r++) {
            if (nullable[r])
                continue;
            for (int32_t a = 0; a < g->rules[r].n && !nullable[r]; a++) {
                int32_t p = g->rules[r].alt[a];
                while (g->elems[p] <= -2 && nullable[REF_RULE(g->elems[p])])
                    p++;
                if (g->elems[p] == END)
                    changed = nullable[r] = true;
            }
        }
    }
    /* the edges r → s of a reference that can come first, grouped by r (first[r]..first[r + 1]) */
    for (int pass = 0; pass < 2; pass++) {
        n_edges = 0;
        for (int32_t r = 0; r < n; r++) {
            first[r] = (int32_t)n_edges;
            for (int32_t a = 0; a < g->rules[r].n; a++)
                for (int32_t p = g->rules[r].alt[a]; g->elems[p] <= -2; p++) {
                    if (pass)
                        edges[n_edges] = REF_RULE(g->elems[p]);
                    n_edges++;
                    if (!nullable[REF_RULE(g->elems[p])])
                        break;
                }
        }
        first[n] = (int32_t)n_edges;
        if (!pass && !(edges = malloc((n_edges ? n_edges : 1) * sizeof *edges)))
            goto oom;
    }
    /* depth-first search, iterative (a deep grammar must not overflow the C stack): a grey rule met
     * again is a cycle */
    if (!(stack = malloc(2 * ((size_t)n + 1) * sizeof *stack)))
        goto oom;
    for (int32_t r0 = 0; r0 < n && !rc; r0++) {
        if (color[r0])
            continue;
        size_t sp = 0;
        stack[sp++] = r0;
        stack[sp++] = first[r0];
        color[r0] = 1;
        while (sp && !rc) {
            int32_t r = stack[sp - 2], i = stack[sp - 1];
            if (i == first[r + 1]) {
                color[r] = 2;
                sp -= 2;
                continue;
            }
            stack[sp - 1] = i + 1;
            int32_t t = edges[i];
            if (color[t] == 1)
                rc = err_set(e, ERR_INVALID, "grammar: a rule refers to itself before matching anything (left recursion)");
            else if (!color[t]) {
                color[t] = 1;
                stack[sp++] = t;
                stack[sp++] = first[t];
            }
        }
    }
    free(nullable);
    free(first);
    free(edges);
    free(stack);
    free(color);
    return rc;
oom:
    free(nullable);
    free(first);
    free(edges);
    free(stack);
    free(color);
    return err_set(e, ERR_NOMEM, "grammar: out of memory");
}

void gram_set_root(struct gram *g, int32_t rule) { g->root = rule; }
size_t gram_n_elems(const struct gram *g) { return g->n_elems; }

/* ---------------------------------------------------------------- parser state */

struct node {
    int32_t pos, parent, depth;
};

struct gram_state {
    const struct gram *g;
    struct node *nd; /* [n_nd] node 0 = the empty stack */
    size_t n_nd, cap_nd;
    int32_t *ht;     /* open addressing over nodes (0 = empty slot), cap a power of two */
    size_t ht_cap;
    int32_t *cur;    /* the live set of stacks, sorted */
    size_t n_cur, cap_cur;
    int32_t *scr;    /* scratch: sets as segments, used like a stack */
    size_t n_scr, cap_scr;
    bool oom;
    /* Memo of the byte steps: every set met is interned (equal sets, one id:
     * the stacks are hash-consed, so a set is its sorted ids), and (set, byte)
     * → next set is cached, in a table of 256 entries per set stepped from
     * (an array index per trie edge, not a hash probe: a mask walk inside a
     * bounded string meets new sets at every depth and visits most of the
     * trie). Inside an unbounded JSON string the set after each character is
     * the same one. Cleared whenever the node store is (gc). */
    struct iset *sets;    /* [n_sets] */
    size_t n_sets, cap_sets;
    int32_t *set_data;    /* the interned sets' stacks, back to back */
    size_t n_data, cap_data;
    int32_t *set_ht;      /* open addressing over set ids + 1 (0 empty), cap a power of two */
    size_t set_ht_cap;
    int32_t *dt;          /* [n_dt][256] next-set tables: −2 not stepped yet, −1 refused, else the set */
    size_t n_dt, cap_dt;  /* blocks; at most GRAM_DT_MAX (a walk past it steps without keeping them;
                           * the next gram_advance clears the memo) */
    /* The last masks made, by set: the text of a JSON string meets the same
     * set token after token, and its mask is then a copy. */
    struct mask_memo {
        const struct gram_vocab *v;
        int32_t sid;      /* −1 empty */
        int32_t count;
        uint32_t *bits;
    } masks[GRAM_MASK_MEMO];
    unsigned mask_next;   /* the entry to replace next (round robin) */
    /* gram_state_key's answer: the grammar's fingerprint, then the live set's stacks as positions, in an
     * order that does not depend on node ids */
    uint64_t fp;          /* gram_fingerprint of g, made once */
    int32_t *key;         /* [n_key] */
    size_t cap_key;
    size_t *koff;         /* [n_cur] scratch: where each stack starts in key */
    size_t cap_koff;
};

struct iset {
    size_t off;           /* stacks at set_data[off..off+len) */
    int32_t len;
    uint32_t hash;
    struct gram_set next; /* bytes some stack takes next */
    int32_t dt;           /* its block of dt, −1 none yet */
};

static inline uint32_t node_hash(int32_t pos, int32_t parent)
{
    uint64_t h = (uint64_t)(uint32_t)pos * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)parent * 0xC2B2AE3D27D4EB4Full;
    return (uint32_t)(h >> 32);
}

static bool ht_rebuild(struct gram_state *st, size_t cap)
{
    int32_t *h = calloc(cap, sizeof *h);
    if (!h)
        return false;
    for (size_t i = 1; i < st->n_nd; i++) {
        uint32_t k = node_hash(st->nd[i].pos, st->nd[i].parent) & (uint32_t)(cap - 1);
        while (h[k])
            k = (k + 1) & (uint32_t)(cap - 1);
        h[k] = (int32_t)i;
    }
    free(st->ht);
    st->ht = h;
    st->ht_cap = cap;
    return true;
}

/* The stack (pos, parent…), one id for equal stacks; −1 when out of memory
 * or too deep. */
static int32_t cons(struct gram_state *st, int32_t pos, int32_t parent)
{
    if (st->nd[parent].depth + 1 > GRAM_MAX_DEPTH)
        return -1;
    uint32_t mask = (uint32_t)(st->ht_cap - 1);
    uint32_t k = node_hash(pos, parent) & mask;
    for (int32_t i; (i = st->ht[k]); k = (k + 1) & mask)
        if (st->nd[i].pos == pos && st->nd[i].parent == parent)
            return i;
    if (st->n_nd >= INT32_MAX / 2 || !grow((void **)&st->nd, &st->cap_nd, st->n_nd + 1, sizeof *st->nd)) {
        st->oom = true;
        return -1;
    }
    int32_t id = (int32_t)st->n_nd++;
    st->nd[id] = (struct node){pos, parent, st->nd[parent].depth + 1};
    if (st->n_nd * 2 > st->ht_cap) {
        if (!ht_rebuild(st, st->ht_cap * 2)) {
            st->oom = true;
            st->n_nd--;
            return -1;
        }
    } else {
        st->ht[k] = id;
    }
    return id;
}

static void scr_push(struct gram_state *st, int32_t x)
{
    if (!grow((void **)&st->scr, &st->cap_scr, st->n_scr + 1, sizeof *st->scr)) {
        st->oom = true;
        return;
    }
    st->scr[st->n_scr++] = x;
}

/* Push onto scr every stack that stack s reaches without consuming a byte:
 * the ones whose top is a byte set, and the empty stack (complete). */
static void expand(struct gram_state *st, int32_t s, int level)
{
    const struct gram *g = st->g;
    if (level > GRAM_MAX_DEPTH)
        return; /* a rule that reaches itself without consuming (left recursion) */
    for (;;) {
        if (s < 0)
            return;
        if (s == 0) {
            scr_push(st, 0);
            return;
        }
        int32_t pos = st->nd[s].pos, parent = st->nd[s].parent;
        int32_t e = g->elems[pos];
        if (e >= 0) {
            scr_push(st, s);
            return;
        }
        if (e == END) {
            s = parent;
            continue;
        }
        const struct rule *r = &g->rules[REF_RULE(e)];
        int32_t cont = g->elems[pos + 1] == END ? parent : cons(st, pos + 1, parent);
        if (cont < 0)
            return;
        for (int32_t a = 0; a < r->n; a++) {
            int32_t start = r->alt[a];
            expand(st, g->elems[start] == END ? cont : cons(st, start, cont), level + 1);
        }
        return;
    }
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Sort and deduplicate scr[off..n_scr); returns the count left. */
static size_t dedupe(struct gram_state *st, size_t off)
{
    size_t n = st->n_scr - off;
    int32_t *a = st->scr + off;
    if (n > 1) {
        qsort(a, n, sizeof *a, cmp_i32);
        size_t m = 1;
        for (size_t i = 1; i < n; i++)
            if (a[i] != a[m - 1])
                a[m++] = a[i];
        n = m;
    }
    st->n_scr = off + n;
    return n;
}

/* The set after byte b from the set scr[in..in+n): appended to scr; its count. */
static size_t step(struct gram_state *st, size_t in, size_t n, unsigned b)
{
    const struct gram *g = st->g;
    size_t out = st->n_scr;
    for (size_t i = 0; i < n; i++) {
        int32_t s = st->scr[in + i];
        if (s == 0)
            continue;
        int32_t pos = st->nd[s].pos, parent = st->nd[s].parent;
        if (!gram_set_has(&g->sets[g->elems[pos]], b))
            continue;
        expand(st, g->elems[pos + 1] == END ? parent : cons(st, pos + 1, parent), 0);
    }
    return dedupe(st, out);
}

#define FNV_BASIS 0xcbf29ce484222325ull

/* FNV-1a over 32-bit words, continuing from h (sets here, a whole grammar in gram_fingerprint) */
static uint64_t fnv_words(uint64_t h, const int32_t *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)a[i]) * 0x100000001b3ull;
    return h;
}

static uint32_t set_hash(const int32_t *a, size_t n)
{
    uint64_t h = fnv_words(FNV_BASIS, a, n);
    return (uint32_t)(h ^ (h >> 32));
}

static void memo_clear(struct gram_state *st)
{
    for (int i = 0; i < GRAM_MASK_MEMO; i++)
        st->masks[i].sid = -1;
    st->n_sets = st->n_data = st->n_dt = 0;
    if (st->set_ht)
        memset(st->set_ht, 0, st->set_ht_cap * sizeof *st->set_ht);
}

static bool set_ht_put(int32_t *ht, size_t cap, const struct iset *sets, int32_t id)
{
    uint32_t mask = (uint32_t)(cap - 1), k = sets[id].hash & mask;
    while (ht[k])
        k = (k + 1) & mask;
    ht[k] = id + 1;
    return true;
}

/* The id of the set scr[off..off+n) (interned on first sight), −1 when out of memory. */
static int32_t set_intern(struct gram_state *st, size_t off, size_t n)
{
    const int32_t *a = st->scr + off;
    uint32_t h = set_hash(a, n);
    if (st->set_ht_cap) {
        uint32_t mask = (uint32_t)(st->set_ht_cap - 1);
        for (uint32_t k = h & mask; st->set_ht[k]; k = (k + 1) & mask) {
            const struct iset *x = &st->sets[st->set_ht[k] - 1];
            if (x->hash == h && (size_t)x->len == n && (n == 0 || !memcmp(st->set_data + x->off, a, n * sizeof *a)))
                return st->set_ht[k] - 1;
        }
    }
    if (!grow((void **)&st->sets, &st->cap_sets, st->n_sets + 1, sizeof *st->sets) ||
        !grow((void **)&st->set_data, &st->cap_data, st->n_data + n + 1, sizeof *st->set_data)) {
        st->oom = true;
        return -1;
    }
    a = st->scr + off;
    int32_t id = (int32_t)st->n_sets++;
    struct iset *x = &st->sets[id];
    x->off = st->n_data;
    x->len = (int32_t)n;
    x->hash = h;
    x->dt = -1;
    gram_set_clear(&x->next);
    for (size_t i = 0; i < n; i++) {
        if (a[i]) {
            const struct gram_set *b = &st->g->sets[st->g->elems[st->nd[a[i]].pos]];
            for (int w = 0; w < 8; w++)
                x->next.w[w] |= b->w[w];
        }
    }
    if (n)
        memcpy(st->set_data + st->n_data, a, n * sizeof *a);
    st->n_data += n;
    if (st->n_sets * 2 > st->set_ht_cap) {
        size_t cap = st->set_ht_cap ? st->set_ht_cap * 2 : 1024;
        int32_t *ht = calloc(cap, sizeof *ht);
        if (!ht) {
            st->n_sets--;
            st->n_data -= n;
            st->oom = true;
            return -1;
        }
        for (size_t i = 0; i < st->n_sets; i++)
            set_ht_put(ht, cap, st->sets, (int32_t)i);
        free(st->set_ht);
        st->set_ht = ht;
        st->set_ht_cap = cap;
    } else {
        set_ht_put(st->set_ht, st->set_ht_cap, st->sets, id);
    }
    return id;
}

/* The set after byte b from set sid: −1 when no stack takes b (or out of memory). */
static int32_t set_step(struct gram_state *st, int32_t sid, unsigned b)
{
    if (!gram_set_has(&st->sets[sid].next, b))
        return -1;
    int32_t blk = st->sets[sid].dt;
    if (blk >= 0 && st->dt[(size_t)blk * 256 + b] != -2)
        return st->dt[(size_t)blk * 256 + b];
    if (blk < 0 && st->n_dt < GRAM_DT_MAX &&
        grow((void **)&st->dt, &st->cap_dt, (st->n_dt + 1) * 256, sizeof *st->dt)) {
        blk = (int32_t)st->n_dt++;
        for (size_t i = 0; i < 256; i++)
            st->dt[(size_t)blk * 256 + i] = -2;
        st->sets[sid].dt = blk;
    }
    size_t base = st->n_scr;
    const struct iset *x = &st->sets[sid];
    for (int32_t i = 0; i < x->len; i++)
        scr_push(st, st->set_data[st->sets[sid].off + (size_t)i]);
    size_t m = st->oom ? 0 : step(st, base, (size_t)st->sets[sid].len, b);
    int32_t to = m ? set_intern(st, base + (size_t)st->sets[sid].len, m) : -1;
    st->n_scr = base;
    if (st->oom)
        return -1;
    if (blk >= 0)
        st->dt[(size_t)blk * 256 + b] = to;
    return to;
}

static void state_clear(struct gram_state *st)
{
    st->n_nd = 1;
    st->nd[0] = (struct node){-1, 0, 0};
    memset(st->ht, 0, st->ht_cap * sizeof *st->ht);
    st->n_cur = st->n_scr = 0;
    st->oom = false;
    memo_clear(st);
}

/* Make the set from scr[off..n_scr) the live one. */
static int set_cur(struct gram_state *st, size_t off, size_t n)
{
    if (!grow((void **)&st->cur, &st->cap_cur, n ? n : 1, sizeof *st->cur))
        return ERR_NOMEM;
    if (n)
        memcpy(st->cur, st->scr + off, n * sizeof *st->cur);
    st->n_cur = n;
    return 0;
}

int gram_state_reset(struct gram_state *st, struct err *e)
{
    state_clear(st);
    const struct gram *g = st->g;
    const struct rule *r = &g->rules[g->root];
    for (int32_t a = 0; a < r->n; a++) {
        int32_t start = r->alt[a];
        expand(st, g->elems[start] == END ? 0 : cons(st, start, 0), 0);
    }
    size_t n = dedupe(st, 0);
    if (st->oom || set_cur(st, 0, n))
        return err_set(e, ERR_NOMEM, "grammar: out of memory");
    st->n_scr = 0;
    return 0;
}

struct gram_state *gram_state_new(const struct gram *g, struct err *e)
{
    if (gram_error(g, e))
        return NULL;
    struct gram_state *st = calloc(1, sizeof *st);
    /* every buffer exists from the start: no arithmetic on a null pointer for an empty set */
    if (!st || !(st->nd = malloc(1024 * sizeof *st->nd)) || !(st->ht = calloc(4096, sizeof *st->ht)) ||
        !(st->scr = malloc(256 * sizeof *st->scr)) || !(st->set_data = malloc(256 * sizeof *st->set_data)) ||
        !(st->cur = malloc(16 * sizeof *st->cur))) {
        gram_state_free(st);
        err_set(e, ERR_NOMEM, "grammar: out of memory");
        return NULL;
    }
    st->g = g;
    st->fp = gram_fingerprint(g);
    st->cap_nd = 1024;
    st->ht_cap = 4096;
    st->cap_scr = st->cap_data = 256;
    st->cap_cur = 16;
    if (gram_state_reset(st, e)) {
        gram_state_free(st);
        return NULL;
    }
    return st;
}

void gram_state_free(struct gram_state *st)
{
    if (!st)
        return;
    free(st->nd);
    free(st->ht);
    free(st->cur);
    free(st->scr);
    free(st->sets);
    free(st->set_data);
    free(st->set_ht);
    free(st->dt);
    for (int i = 0; i < GRAM_MASK_MEMO; i++)
        free(st->masks[i].bits);
    free(st->key);
    free(st->koff);
    free(st);
}

bool gram_accepts_byte(const struct gram_state *st, unsigned b)
{
    const struct gram *g = st->g;
    for (size_t i = 0; i < st->n_cur; i++) {
        int32_t s = st->cur[i];
        if (s && gram_set_has(&g->sets[g->elems[st->nd[s].pos]], b))
            return true;
    }
    return false;
}

bool gram_complete(const struct gram_state *st)
{
    return st->n_cur > 0 && st->cur[0] == 0; /* sorted: the empty stack comes first */
}

bool gram_finished(const struct gram_state *st) { return st->n_cur == 0 || (st->n_cur == 1 && st->cur[0] == 0); }

/* Copy the live stacks into a fresh node store so what dead branches and
 * mask walks left behind goes away (nodes are never freed one by one). */
static int32_t gc_copy(struct gram_state *st, const struct node *old, int32_t *map, int32_t s)
{
    if (s <= 0)
        return s;
    if (map[s])
        return map[s];
    int32_t p = gc_copy(st, old, map, old[s].parent);
    if (p < 0)
        return -1;
    return map[s] = cons(st, old[s].pos, p);
}

static int gc(struct gram_state *st)
{
    size_t n_old = st->n_nd;
    struct node *old = st->nd;
    int32_t *map = calloc(n_old, sizeof *map);
    struct node *fresh = malloc(1024 * sizeof *fresh);
    if (!map || !fresh) {
        free(map);
        free(fresh);
        return 0; /* keep the old store: correct, only bigger */
    }
    memo_clear(st); /* its sets name the old nodes */
    st->nd = fresh;
    st->cap_nd = 1024;
    st->n_nd = 1;
    st->nd[0] = (struct node){-1, 0, 0};
    memset(st->ht, 0, st->ht_cap * sizeof *st->ht);
    int rc = 0;
    for (size_t i = 0; i < st->n_cur; i++) {
        int32_t c = gc_copy(st, old, map, st->cur[i]);
        if (c < 0) {
            rc = ERR_NOMEM;
            break;
        }
        st->cur[i] = c;
    }
    free(old);
    free(map);
    if (!rc)
        qsort(st->cur, st->n_cur, sizeof *st->cur, cmp_i32);
    return rc;
}

int gram_advance(struct gram_state *st, const void *bytes, size_t n, struct err *e)
{
    const unsigned char *p = bytes;
    st->n_scr = 0;
    for (size_t i = 0; i < st->n_cur; i++)
        scr_push(st, st->cur[i]);
    int32_t sid = st->oom ? -1 : set_intern(st, 0, st->n_cur);
    st->n_scr = 0;
    for (size_t i = 0; i < n && sid >= 0; i++)
        sid = set_step(st, sid, p[i]);
    if (st->oom) {
        st->oom = false;
        memo_clear(st);
        return err_set(e, ERR_NOMEM, "grammar: out of memory");
    }
    if (sid < 0)
        return err_set(e, ERR_INVALID, "grammar: the text leaves the grammar");
    const struct iset *x = &st->sets[sid];
    if (!grow((void **)&st->cur, &st->cap_cur, (size_t)x->len + 1, sizeof *st->cur))
        return err_set(e, ERR_NOMEM, "grammar: out of memory");
    if (x->len)
        memcpy(st->cur, st->set_data + x->off, (size_t)x->len * sizeof *st->cur);
    st->n_cur = (size_t)x->len;
    if ((st->n_nd > 65536 || st->n_data > (8u << 20) || st->n_dt >= GRAM_DT_MAX) && gc(st))
        return err_set(e, ERR_NOMEM, "grammar: out of memory");
    return 0;
}

int gram_state_compact(struct gram_state *st, struct err *e)
{
    if (gc(st))
        return err_set(e, ERR_NOMEM, "grammar: out of memory");
    return 0;
}

bool gram_match(const struct gram *g, const char *s, size_t n)
{
    struct gram_state *st = gram_state_new(g, NULL);
    bool ok = st && gram_advance(st, s, n, NULL) == 0 && gram_complete(st);
    gram_state_free(st);
    return ok;
}

uint64_t gram_fingerprint(const struct gram *g)
{
    /* n_elems ≤ GRAM_MAX_ELEMS: an int32 */
    const int32_t head[4] = { (int32_t)g->n_elems, g->n_sets, g->n_rules, g->root };
    uint64_t h = fnv_words(FNV_BASIS, head, 4);
    h = fnv_words(h, g->elems, g->n_elems);
    for (int32_t i = 0; i < g->n_sets; i++)
        h = fnv_words(h, (const int32_t *)g->sets[i].w, 8);
    for (int32_t r = 0; r < g->n_rules; r++) {
        h = fnv_words(h, &g->rules[r].n, 1);
        h = fnv_words(h, g->rules[r].alt, (size_t)g->rules[r].n);
    }
    return h;
}

/* Stacks i and j of the key under construction, compared position by position (a stack ends with −1,
 * below every position). */
static int key_cmp(const void *a, const void *b, void *ctx)
{
    const int32_t *k = ctx;
    const int32_t *x = k + *(const size_t *)a, *y = k + *(const size_t *)b;
    for (;; x++, y++) {
        if (*x != *y)
            return *x < *y ? -1 : 1;
        if (*x < 0)
            return 0;
    }
}

const int32_t *gram_state_key(struct gram_state *st, size_t *n, struct err *e)
{
    /* the stacks, each its positions top down and −1, after a scratch copy of the same size */
    size_t need = 4;
    for (size_t i = 0; i < st->n_cur; i++)
        need += (size_t)st->nd[st->cur[i]].depth + 1;
    if (!grow((void **)&st->key, &st->cap_key, 2 * need, sizeof *st->key) ||
        !grow((void **)&st->koff, &st->cap_koff, st->n_cur ? st->n_cur : 1, sizeof *st->koff)) {
        err_set(e, ERR_NOMEM, "grammar: out of memory");
        return NULL;
    }
    int32_t *tmp = st->key + need;
    size_t o = 0;
    for (size_t i = 0; i < st->n_cur; i++) {
        st->koff[i] = o;
        for (int32_t s = st->cur[i]; s > 0; s = st->nd[s].parent)
            tmp[o++] = st->nd[s].pos;
        tmp[o++] = -1;
    }
    qsort_r(st->koff, st->n_cur, sizeof *st->koff, key_cmp, tmp);
    st->key[0] = (int32_t)(uint32_t)st->fp;
    st->key[1] = (int32_t)(uint32_t)(st->fp >> 32);
    st->key[2] = (int32_t)st->n_cur;
    st->key[3] = (int32_t)(need - 4);
    o = 4;
    for (size_t i = 0; i < st->n_cur; i++)
        for (size_t j = st->koff[i];; j++) {
            st->key[o++] = tmp[j];
            if (tmp[j] < 0)
                break;
        }
    *n = o;
    return st->key;
}

/* ---------------------------------------------------------------- vocabulary trie */

struct gram_vocab {
    int32_t n_tok;
    char *bytes;      /* every piece, back to back */
    size_t *off;      /* [n_tok + 1] piece t is bytes[off[t]..off[t+1]) */
    /* trie: node 0 the root, the others numbered in depth-first preorder (children in ascending byte
     * order), so a walk is one pass over these arrays in memory order that jumps past dead subtrees */
    int32_t n_node;
    uint8_t *byte;    /* [n_node] the edge into the node */
    uint16_t *depth;  /* [n_node] its depth (the root 0): the piece's length up to it */
    int32_t *skip;    /* [n_node] the first node after its subtree (n_node at the end) */
    int32_t *tok_off; /* [n_node + 1] the tokens ending at node c are toks[tok_off[c] .. tok_off[c + 1]) */
    int32_t *toks;    /* [n_tok] grouped by node in node order: a walk reads them in order, not by a
                       * chain through token ids (a cache miss per token of a 152k vocabulary) */
};

void gram_vocab_free(struct gram_vocab *v)
{
    if (!v)
        return;
    free(v->bytes);
    free(v->off);
    free(v->byte);
    free(v->depth);
    free(v->skip);
    free(v->tok_off);
    free(v->toks);
    free(v);
}

int32_t gram_vocab_size(const struct gram_vocab *v) { return v->n_tok; }

const char *gram_vocab_piece(const struct gram_vocab *v, int32_t id, size_t *len)
{
    if (id < 0 || id >= v->n_tok) {
        *len = 0;
        return "";
    }
    *len = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

static int cmp_piece(const void *a, const void *b, void *ctx)
{
    const struct gram_vocab *sort_v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = sort_v->off[x + 1] - sort_v->off[x], ly = sort_v->off[y + 1] - sort_v->off[y];
    int c = memcmp(sort_v->bytes + sort_v->off[x], sort_v->bytes + sort_v->off[y], lx < ly ? lx : ly);
    if (c)
        return c;
    return (lx > ly) - (lx < ly);
}

struct gram_vocab *gram_vocab_new(int32_t n, size_t (*piece)(void *user, int32_t id, char *buf, size_t cap),
                                  void *user, struct err *e)
{
    struct gram_vocab *v = calloc(1, sizeof *v);
    int32_t *order = NULL, *endn = NULL, *last = NULL;
    char buf[1024];
    size_t total = 0, cap = 0;
    if (!v || n < 0 || !(v->off = malloc(((size_t)n + 1) * sizeof *v->off)) ||
        !(v->toks = malloc(((size_t)n ? (size_t)n : 1) * sizeof *v->toks)) ||
        !(endn = malloc(((size_t)n ? (size_t)n : 1) * sizeof *endn)))
        goto oom;
    v->n_tok = n;
    for (int32_t t = 0; t < n; t++) {
        size_t len = piece(user, t, buf, sizeof buf);
        if (len > sizeof buf)
            len = 0; /* longer than any real token: never in a mask */
        if (!grow((void **)&v->bytes, &cap, total + len + 1, 1))
            goto oom;
        v->off[t] = total;
        memcpy(v->bytes + total, buf, len);
        total += len;
        endn[t] = -1;
    }
    v->off[n] = total;
    if (!v->bytes && !(v->bytes = malloc(1)))
        goto oom;
    /* sorted pieces make the trie in one pass: each piece shares a path with
     * the one before for their common prefix, and a new child always has the
     * largest byte among its siblings */
    if (!(order = malloc(((size_t)n ? (size_t)n : 1) * sizeof *order)))
        goto oom;
    for (int32_t t = 0; t < n; t++)
        order[t] = t;
    qsort_r(order, (size_t)n, sizeof *order, cmp_piece, v);
    size_t max_nodes = total + 1;
    if (!(v->byte = malloc(max_nodes)) || !(v->depth = malloc(max_nodes * sizeof *v->depth)) ||
        !(v->skip = malloc(max_nodes * sizeof *v->skip)) || !(v->tok_off = calloc(max_nodes + 1, sizeof *v->tok_off)))
        goto oom;
    last = malloc(max_nodes * sizeof *last); /* the open nodes (a path), then a fill cursor */
    int32_t path[1025];
    if (!last)
        goto oom;
    v->n_node = 1;
    v->byte[0] = 0;
    v->depth[0] = 0;
    const char *prev = NULL;
    size_t prev_len = 0;
    path[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t t = order[i];
        size_t len = v->off[t + 1] - v->off[t];
        const char *p = v->bytes + v->off[t];
        if (len == 0)
            continue;
        size_t lcp = 0;
        while (prev && lcp < len && lcp < prev_len && p[lcp] == prev[lcp])
            lcp++;
        for (size_t d = lcp; d < len; d++) {
            int32_t c = v->n_node++;
            v->byte[c] = (uint8_t)p[d];
            v->depth[c] = (uint16_t)(d + 1);
            path[d + 1] = c;
        }
        endn[t] = path[len];
        v->tok_off[path[len] + 1]++;
        prev = p;
        prev_len = len;
    }
    /* skip: a node's subtree ends where the next node no deeper than it starts (preorder) */
    size_t n_open = 0;
    for (int32_t c = 0; c < v->n_node; c++) {
        while (n_open && v->depth[last[n_open - 1]] >= v->depth[c])
            v->skip[last[--n_open]] = c;
        last[n_open++] = c;
    }
    while (n_open)
        v->skip[last[--n_open]] = v->n_node;
    for (int32_t c = 0; c < v->n_node; c++) {
        v->tok_off[c + 1] += v->tok_off[c];
        last[c] = v->tok_off[c];
    }
    for (int32_t t = 0; t < n; t++)
        if (endn[t] >= 0)
            v->toks[last[endn[t]]++] = t;
    free(last);
    free(endn);
    free(order);
    return v;
oom:
    free(order);
    free(endn);
    free(last);
    gram_vocab_free(v);
    err_set(e, ERR_NOMEM, "grammar: out of memory building the vocabulary trie");
    return NULL;
}

/* Mask walk over the whole trie from the set sid: one pass in node order, the set at each depth on a
 * small stack, a dead edge jumping past its subtree. */
static int32_t walk(struct gram_state *st, const struct gram_vocab *v, int32_t sid, uint32_t *allow)
{
    int32_t count = 0, at[1026];
    at[0] = sid;
    for (int32_t c = 1; c < v->n_node && !st->oom;) {
        const int d = v->depth[c];
        const int32_t from = at[d - 1], blk = st->sets[from].dt;
        int32_t to = blk >= 0 ? st->dt[(size_t)blk * 256 + v->byte[c]] : -2;
        if (to == -2)
            to = set_step(st, from, v->byte[c]);
        if (to < 0) {
            c = v->skip[c];
            continue;
        }
        for (int32_t j = v->tok_off[c]; j < v->tok_off[c + 1]; j++) {
            const int32_t t = v->toks[j];
            allow[t >> 5] |= 1u << (t & 31);
            count++;
        }
        at[d] = to;
        c++;
    }
    return count;
}

int32_t gram_mask(struct gram_state *st, const struct gram_vocab *v, uint32_t *allow, struct err *e)
{
    size_t words = ((size_t)v->n_tok + 31) / 32;
    memset(allow, 0, words * sizeof *allow);
    st->n_scr = 0;
    for (size_t i = 0; i < st->n_cur; i++)
        scr_push(st, st->cur[i]);
    int32_t sid = st->oom ? -1 : set_intern(st, 0, st->n_cur);
    st->n_scr = 0;
    for (int i = 0; sid >= 0 && i < GRAM_MASK_MEMO; i++) {
        struct mask_memo *m = &st->masks[i];
        if (m->sid == sid && m->v == v) {
            memcpy(allow, m->bits, words * sizeof *allow);
            return m->count;
        }
    }
    int32_t count = sid < 0 ? 0 : walk(st, v, sid, allow);
    if (st->oom) {
        st->oom = false;
        memo_clear(st);
        return err_set(e, ERR_NOMEM, "grammar: out of memory computing the token mask");
    }
    struct mask_memo *m = &st->masks[st->mask_next];
    if (m->v != v || !m->bits) {
        free(m->bits);
        m->bits = malloc(words * sizeof *m->bits);
        m->v = v;
    }
    if (m->bits) { /* without memory for it, the next mask is walked again: no harm */
        memcpy(m->bits, allow, words * sizeof *allow);
        m->sid = sid;
        m->count = count;
        st->mask_next = (st->mask_next + 1) % GRAM_MASK_MEMO;
    }
    return count;
}
