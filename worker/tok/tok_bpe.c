/* tok_bpe.c — byte-level BPE ("gpt2") encoding of one raw-text fragment, as
 * llama.cpp's llm_tokenizer_bpe_session: pre-tokenize, map bytes through the
 * GPT-2 alphabet, then merge adjacent symbols by lowest merge rank (ties:
 * leftmost), with the byte fallback for symbols that are not tokens. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

int tok_out_push(struct tok_out *o, int32_t id)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *p = realloc(o->ids, cap * sizeof *p);
        if (!p)
            return ERR_NOMEM;
        o->ids = p;
        o->cap = cap;
    }
    o->ids[o->n++] = id;
    return 0;
}

struct sym {
    int32_t prev, next;
    uint32_t off, n; /* bytes of the word; n = 0 once merged away */
    int32_t id;      /* vocab id of the text, -1 when not a token */
};






static int add_bigram(const struct tok_vocab *v, const char *w, const struct sym *s, int32_t l, int32_t r,
                      struct tok_heap *h)
{
    if (l < 0 || r < 0)
        return 0;
    int32_t rank = tok_merge_rank(v, s[l].id, s[r].id, w + s[l].off, s[l].n, w + s[r].off, s[r].n);
    if (rank < 0)
        return 0;
    return tok_heap_push(h, (struct tok_bigram){-(float)rank, l, r, s[l].n + s[r].n});
}

/* Merge one byte-encoded word and append its ids. */
static int bpe_word(const struct tok_vocab *v, const char *w, size_t wl, struct sym **symp, size_t *symcap,
                    struct tok_heap *h, struct tok_out *o)
{
    if (v->ignore_merges) {
        int32_t id = tok_map_find(v, w, wl);
        if (id >= 0)
            return tok_out_push(o, id);
    }
    if (wl > *symcap) {
        struct sym *ns = realloc(*symp, wl * sizeof *ns);
        if (!ns)
            return ERR_NOMEM;
        *symp = ns;
        *symcap = wl;
    }
    struct sym *s = *symp;
    int32_t ns = 0;
    for (size_t off = 0; off < wl;) {
        size_t cl = tok_utf8_len((unsigned char)w[off]);
        if (cl > wl - off)
            cl = wl - off;
        s[ns] = (struct sym){ns - 1, off + cl == wl ? -1 : ns + 1, (uint32_t)off, (uint32_t)cl,
                             tok_map_find(v, w + off, cl)};
        ns++;
        off += cl;
    }
    h->n = 0;
    int rc;
    for (int32_t i = 1; i < ns; i++)
        if ((rc = add_bigram(v, w, s, i - 1, i, h)))
            return rc;
    while (h->n) {
        struct tok_bigram b = tok_heap_pop(h);
        struct sym *L = &s[b.left], *R = &s[b.right];
        if (!L->n || !R->n || L->n + R->n != b.size)
            continue; /* stale */
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0)
            s[R->next].prev = b.left;
        L->id = tok_map_find(v, w + L->off, L->n);
        if ((rc = add_bigram(v, w, s, L->prev, b.left, h)) || (rc = add_bigram(v, w, s, b.left, L->next, h)))
            return rc;
    }
    for (int32_t i = 0; i != -1 && ns > 0; i = s[i].next) {
        if (!s[i].n)
            continue;
        if (s[i].id >= 0) {
            if ((rc = tok_out_push(o, s[i].id)))
                return rc;
            continue;
        }
        /* not a token: llama.cpp looks up each byte as a one-byte string */
        for (uint32_t k = 0; k < s[i].n; k++) {
            int32_t id = tok_map_find(v, w + s[i].off + k, 1);
            if (id >= 0 && (rc = tok_out_push(o, id)))
                return rc;
        }
    }
    return 0;
}

int tok_bpe_fragment(const struct tok_vocab *v, const char *text, size_t len, struct tok_out *o)
{
    uint32_t *cp = NULL;
    size_t ncp = 0, *lens = NULL, nl = 0;
    char *word = NULL;
    struct sym *sym = NULL;
    size_t symcap = 0;
    struct tok_heap h = {0};
    int rc = tok_utf8_decode(text, len, &cp, &ncp);
    if (rc)
        return rc;
    if ((rc = tok_pretok_split(v->pretok, cp, ncp, &lens, &nl)))
        goto done;
    /* a piece of k codepoints is at most 4k UTF-8 bytes, each at most 2 bytes byte-encoded */
    size_t maxl = 0;
    for (size_t i = 0; i < nl; i++)
        if (lens[i] > maxl)
            maxl = lens[i];
    if (!(word = malloc(maxl * 8 + 8))) {
        rc = ERR_NOMEM;
        goto done;
    }
    size_t at = 0;
    for (size_t i = 0; i < nl; i++) {
        size_t wl = 0;
        for (size_t k = at; k < at + lens[i]; k++) {
            char u[4];
            uint32_t c = cp[k];
            if (c > 0x10FFFF) {
                /* llama.cpp's unicode_cpt_to_utf8 throws here (F5..F7 leads); we refuse the input */
                rc = ERR_INVALID;
                goto done;
            }
            int ul = tok_utf8_encode(c, u);
            for (int b = 0; b < ul; b++)
                wl += (size_t)tok_utf8_encode(tok_byte_to_cpt((uint8_t)u[b]), word + wl);
        }
        at += lens[i];
        if ((rc = bpe_word(v, word, wl, &sym, &symcap, &h, o)))
            goto done;
    }
done:
    free(cp);
    free(lens);
    free(word);
    free(sym);
    free(h.v);
    return rc;
}
