/* tok_heap.c — the priority queue of candidate merges shared by the BPE and
 * SPM encoders: the pair with the highest key comes first, ties go to the
 * leftmost pair (both llama.cpp sessions order their queues this way; BPE
 * uses key = -rank, SPM key = score). */
#include <stdlib.h>

#include "tok_internal.h"

static bool bg_before(const struct tok_bigram *a, const struct tok_bigram *b)
{
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

int tok_heap_push(struct tok_heap *h, struct tok_bigram b)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct tok_bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return ERR_NOMEM;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bg_before(&b, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
    return 0;
}

struct tok_bigram tok_heap_pop(struct tok_heap *h)
{
    struct tok_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && bg_before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!bg_before(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}
