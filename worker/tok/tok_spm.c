/* tok_spm.c — SentencePiece ("llama") encoding of one fragment, as llama.cpp's
 * llm_tokenizer_spm_session: split into UTF-8 characters by the lead byte's
 * high nibble (no validation), merge the adjacent pair whose concatenation is
 * the highest-scoring token (ties: leftmost), then byte-fall-back whatever is
 * not a token. The caller has already added the space prefix and turned
 * spaces into U+2581. */
#include "tok_internal.h"

#include <stdio.h>
#include <stdlib.h>

struct sym {
    int32_t prev, next;
    uint32_t off, n;
};






static int try_bigram(const struct tok_vocab *v, const char *t, const struct sym *s, int32_t l, int32_t r,
                      struct tok_heap *h)
{
    if (l < 0 || r < 0)
        return 0;
    int32_t id = tok_map_find(v, t + s[l].off, s[l].n + s[r].n);
    if (id < 0)
        return 0;
    return tok_heap_push(h, (struct tok_bigram){v->score[id], l, r, s[l].n + s[r].n});
}

int tok_spm_fragment(const struct tok_vocab *v, const char *t, size_t len, struct tok_out *o)
{
    if (!len)
        return 0;
    struct sym *s = malloc(len * sizeof *s);
    struct tok_heap h = {0};
    int rc = 0;
    if (!s)
        return ERR_NOMEM;
    int32_t ns = 0;
    for (size_t off = 0; off < len;) {
        size_t cl = tok_utf8_len((unsigned char)t[off]);
        if (cl > len - off)
            cl = len - off;
        s[ns] = (struct sym){ns - 1, off + cl == len ? -1 : ns + 1, (uint32_t)off, (uint32_t)cl};
        ns++;
        off += cl;
    }
    for (int32_t i = 1; i < ns && !rc; i++)
        rc = try_bigram(v, t, s, i - 1, i, &h);
    while (h.n && !rc) {
        struct tok_bigram b = tok_heap_pop(&h);
        struct sym *L = &s[b.left], *R = &s[b.right];
        if (!L->n || !R->n || L->n + R->n != b.size)
            continue;
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0)
            s[R->next].prev = b.left;
        if (!(rc = try_bigram(v, t, s, L->prev, b.left, &h)))
            rc = try_bigram(v, t, s, b.left, L->next, &h);
    }
    for (int32_t i = 0; i != -1 && !rc; i = s[i].next) {
        int32_t id = tok_map_find(v, t + s[i].off, s[i].n);
        if (id >= 0) {
            rc = tok_out_push(o, id);
            continue;
        }
        /* byte fallback: <0xXX>, else the one-byte token */
        for (uint32_t k = 0; k < s[i].n && !rc; k++) {
            unsigned char b = (unsigned char)t[s[i].off + k];
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            id = tok_map_find(v, hex, 6);
            if (id < 0)
                id = tok_map_find(v, (const char *)&t[s[i].off + k], 1);
            rc = id < 0 ? ERR_INVALID : tok_out_push(o, id);
        }
    }
    free(s);
    free(h.v);
    return rc;
}
