/* gram_cache.c — shared token-mask cache (see gram_cache.h). */
#include "gram_cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"

struct entry {
    struct entry *chain;        /* next in the bucket */
    struct entry *newer, *older;/* the age list: head newest, tail oldest */
    uint64_t hash;
    int32_t count;              /* gram_mask's answer */
    size_t n_key;
    int32_t *key;               /* [n_key] gram_state_key */
    uint32_t *bits;             /* [words] the mask */
};

struct gram_cache {
    const struct gram_vocab *v;
    size_t words;               /* (n_vocab + 31) / 32 */
    size_t max_bytes, bytes;
    struct entry **bucket;      /* [n_bucket], a power of two */
    size_t n_bucket, n_entries;
    struct entry *newest, *oldest;
    pthread_mutex_t mu;
    uint64_t hits, misses, evictions;
};

static uint64_t key_hash(const int32_t *k, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)k[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static size_t entry_bytes(const struct gram_cache *c, const struct entry *x)
{
    return sizeof *x + x->n_key * sizeof *x->key + c->words * sizeof *x->bits;
}

struct gram_cache *gram_cache_new(const struct gram_vocab *v, size_t max_bytes, struct err *e)
{
    struct gram_cache *c = calloc(1, sizeof *c);
    if (!c || !(c->bucket = calloc(1024, sizeof *c->bucket))) {
        free(c);
        err_set(e, ERR_NOMEM, "grammar cache: out of memory");
        return NULL;
    }
    c->v = v;
    c->words = ((size_t)gram_vocab_size(v) + 31) / 32;
    c->max_bytes = max_bytes;
    c->n_bucket = 1024;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void gram_cache_free(struct gram_cache *c)
{
    if (!c)
        return;
    for (struct entry *x = c->newest, *nx; x; x = nx) {
        nx = x->older;
        free(x->key);
        free(x->bits);
        free(x);
    }
    free(c->bucket);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static struct entry *find(const struct gram_cache *c, uint64_t h, const int32_t *k, size_t n)
{
    for (struct entry *x = c->bucket[h & (c->n_bucket - 1)]; x; x = x->chain)
        if (x->hash == h && x->n_key == n && !memcmp(x->key, k, n * sizeof *k))
            return x;
    return NULL;
}

/* Take the oldest entry out (mutex held). */
static void evict_oldest(struct gram_cache *c)
{
    struct entry *x = c->oldest;
    struct entry **p = &c->bucket[x->hash & (c->n_bucket - 1)];
    while (*p != x)
        p = &(*p)->chain;
    *p = x->chain;
    c->oldest = x->newer;
    if (c->oldest)
        c->oldest->older = NULL;
    else
        c->newest = NULL;
    c->bytes -= entry_bytes(c, x);
    c->n_entries--;
    c->evictions++;
    free(x->key);
    free(x->bits);
    free(x);
}

/* Double the buckets when the chains would grow long (mutex held); without memory it keeps the old. */
static void rehash(struct gram_cache *c)
{
    size_t nb = c->n_bucket * 2;
    struct entry **b = calloc(nb, sizeof *b);
    if (!b)
        return;
    for (struct entry *x = c->newest; x; x = x->older) {
        x->chain = b[x->hash & (nb - 1)];
        b[x->hash & (nb - 1)] = x;
    }
    free(c->bucket);
    c->bucket = b;
    c->n_bucket = nb;
}

/* Keep a copy of a walked mask (mutex held). Without memory it keeps nothing: the next one walks again. */
static void insert(struct gram_cache *c, uint64_t h, const int32_t *k, size_t n, const uint32_t *allow,
                   int32_t count)
{
    struct entry *x = calloc(1, sizeof *x);
    if (!x)
        return;
    x->hash = h;
    x->count = count;
    x->n_key = n;
    if (!(x->key = malloc(n * sizeof *k)) || !(x->bits = malloc(c->words * sizeof *x->bits))) {
        free(x->key);
        free(x);
        return;
    }
    memcpy(x->key, k, n * sizeof *k);
    memcpy(x->bits, allow, c->words * sizeof *allow);
    const size_t sz = entry_bytes(c, x);
    if (sz > c->max_bytes) { /* a cache too small for even one mask keeps none (and evicts nothing for it) */
        free(x->key);
        free(x->bits);
        free(x);
        return;
    }
    while (c->oldest && c->bytes + sz > c->max_bytes)
        evict_oldest(c);
    if (c->n_entries + 1 > c->n_bucket)
        rehash(c);
    x->chain = c->bucket[h & (c->n_bucket - 1)];
    c->bucket[h & (c->n_bucket - 1)] = x;
    x->older = c->newest;
    if (c->newest)
        c->newest->newer = x;
    c->newest = x;
    if (!c->oldest)
        c->oldest = x;
    c->bytes += sz;
    c->n_entries++;
}

int32_t gram_cache_mask(struct gram_cache *c, struct gram_state *st, uint32_t *allow, struct err *e)
{
    size_t n;
    const int32_t *k = gram_state_key(st, &n, e);
    if (!k)
        return ERR_NOMEM;
    const uint64_t h = key_hash(k, n);
    pthread_mutex_lock(&c->mu);
    const struct entry *x = find(c, h, k, n);
    if (x) {
        memcpy(allow, x->bits, c->words * sizeof *allow);
        int32_t count = x->count;
        c->hits++;
        pthread_mutex_unlock(&c->mu);
        return count;
    }
    c->misses++;
    pthread_mutex_unlock(&c->mu);
    /* the walk outside the lock (milliseconds); the key stays valid: gram_mask does not touch it */
    int32_t count = gram_mask(st, c->v, allow, e);
    if (count < 0)
        return count;
    pthread_mutex_lock(&c->mu);
    if (!find(c, h, k, n)) /* another thread may have walked the same set meanwhile */
        insert(c, h, k, n, allow, count);
    pthread_mutex_unlock(&c->mu);
    return count;
}

void gram_cache_stats(struct gram_cache *c, struct gram_cache_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = (struct gram_cache_stats){ c->hits, c->misses, c->evictions, c->n_entries, c->bytes };
    pthread_mutex_unlock(&c->mu);
}
