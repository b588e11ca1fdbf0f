/* sampling.c — llama.cpp's sampler chain (shared/spec/sampling.md §1–§4, §6.2).
 *
 * Every sampler works on one candidate list `cur[0..size)` that starts as the
 * whole vocabulary in id order. The arithmetic follows the spec literally
 * (float sums where llama.cpp sums in float, double in dist) because the
 * cut points of top_p / min_p and the dist walk depend on those roundings. */
#include "sampling.h"

#include "../gguf/gguf.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define MT_N 624
#define MT_M 397

/* Sort keys for typical_p: score and the candidate's position. */
struct keyed {
    float key;
    int32_t idx;
};

struct smp_chain {
    struct smp_params p;    /* copy; the pointer fields are cleared */
    int32_t n_vocab;

    struct smp_cand *cur;   /* [n_vocab] working candidate list */
    const float *row;       /* [n_vocab] smp_sample's logits while cur is not written yet, else NULL */
    int32_t size;           /* live entries in cur */
    bool sorted;            /* cur is in descending logit order */
    int32_t selected;       /* index into cur chosen by dist, −1 none */
    struct smp_cand *tmp;   /* [n_vocab] scratch (min_p, typical_p, probs) */
    struct keyed *keys;     /* [n_vocab] scratch (typical_p scores) */

    struct smp_bias *bias;  /* [n_bias] merged logit-bias list */
    int32_t n_bias;

    int32_t last_n;         /* penalty window length (0 = penalties off) */
    int32_t *ring;          /* [last_n] accepted tokens, oldest at ring_head when full */
    int32_t ring_len, ring_head;
    int32_t *counts;        /* [n_vocab] occurrences of each token in the window */

    const uint32_t *allow;  /* [(n_vocab + 31) / 32] tokens a constraint allows, NULL none (smp_set_allowed) */

    uint32_t seed;          /* seed in use (drawn when params asked for random) */
    uint32_t mt[MT_N];      /* MT19937 state */
    int mti;
};

/* ---------------------------------------------------------------- RNG (§4) */

static void mt_seed(struct smp_chain *c, uint32_t s)
{
    c->mt[0] = s;
    for (int i = 1; i < MT_N; i++)
        c->mt[i] = 1812433253u * (c->mt[i - 1] ^ (c->mt[i - 1] >> 30)) + (uint32_t)i;
    c->mti = MT_N;
}

static uint32_t mt_next(struct smp_chain *c)
{
    if (c->mti >= MT_N) {
        for (int i = 0; i < MT_N; i++) {
            uint32_t y = (c->mt[i] & 0x80000000u) | (c->mt[(i + 1) % MT_N] & 0x7fffffffu);
            c->mt[i] = c->mt[(i + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        c->mti = 0;
    }
    uint32_t y = c->mt[c->mti++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* generate_canonical<double,53> over a 32-bit engine: two outputs, low first. */
static double mt_uniform(struct smp_chain *c)
{
    double x0 = (double)mt_next(c);
    double x1 = (double)mt_next(c);
    double u = (x0 + x1 * 4294967296.0) / 18446744073709551616.0;
    if (u >= 1.0)
        u = nextafter(1.0, 0.0);
    return u;
}

uint32_t smp_rng_next_u32(struct smp_chain *c) { return mt_next(c); }
double smp_rng_uniform(struct smp_chain *c) { return mt_uniform(c); }

/* ------------------------------------------------------------ ordering */

/* Descending logit; equal logits by ascending id so every sort is a total,
 * reproducible order (llama.cpp leaves ties implementation-defined). */
static inline bool cand_before(const struct smp_cand *a, const struct smp_cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static inline void cand_swap(struct smp_cand *a, struct smp_cand *b)
{
    struct smp_cand t = *a;
    *a = *b;
    *b = t;
}

/* Heap whose root is the *last* in cand_before order. */
static void cand_sift(struct smp_cand *h, int32_t n, int32_t i)
{
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && cand_before(&h[m], &h[l]))
            m = l;
        if (r < n && cand_before(&h[m], &h[r]))
            m = r;
        if (m == i)
            return;
        cand_swap(&h[i], &h[m]);
        i = m;
    }
}

/* Put the k first (in cand_before order) of a[0..n) at a[0..k), sorted.
 * O(n log k), in place, no allocation; k == n is a heapsort. The order of
 * a[k..n) afterwards is unspecified. */
static void cand_heap_select(struct smp_cand *a, int32_t n, int32_t k);

/* Up to this many candidates are sorted whole instead of heap-selected. */
#define CAND_INSERTION_MAX 96

/* A pre-selection pays when the k first are a small part of the n. */
static inline bool cand_preselect_pays(int32_t n, int32_t k) { return k > 1 && n > 4 * k; }

/* x ≥ t among the n logits at x, stride bytes apart (never −inf for a
 * finite t, never NaN). A logits row (stride 4) is counted eight at a time
 * with vector compares: the threshold search below counts a row several
 * times, and one counting pass must cost a fraction of a histogram's. */
typedef float cut_vf __attribute__((vector_size(16)));
typedef int32_t cut_vi __attribute__((vector_size(16)));

static int32_t cut_count(const char *x, size_t stride, int32_t n, float t)
{
    int32_t i = 0, c = 0;
    if (stride == sizeof(float)) {
        const cut_vf tv = {t, t, t, t};
        cut_vi a0 = {0}, a1 = {0};
        for (; i + 8 <= n; i += 8) {
            cut_vf v0, v1;
            memcpy(&v0, x + (size_t)i * sizeof(float), sizeof v0);
            memcpy(&v1, x + (size_t)(i + 4) * sizeof(float), sizeof v1);
            /* −1 where true; written t ≤ v, which x86 compares in one
             * ordered instruction (v ≥ t it does a lane at a time) */
            a0 += tv <= v0;
            a1 += tv <= v1;
        }
        a0 += a1;
        c = -(a0[0] + a0[1] + a0[2] + a0[3]);
    }
    for (; i < n; i++)
        c += *(const float *)(x + (size_t)i * stride) >= t;
    return c;
}

/* A long row's cut from a strided sample of CUT_SAMPLE logits: the j-th
 * largest of the sample (j a few times k·CUT_SAMPLE/n, at least 4) keeps
 * about j·n/CUT_SAMPLE logits, so the partition that follows is the only
 * pass over the row where a bisection makes a dozen counting passes first
 * (152k tokens: 13 passes of ~24 µs). Unchecked: the caller counts what it
 * keeps and takes cand_cut_find when that is fewer than k or more than
 * CUT_SAMPLE_KEEP (a few per cent of rows). False when n is too short. */
#define CUT_SAMPLE 2048
#define CUT_SAMPLE_J 64       /* most sample ranks looked at */
#define CUT_SAMPLE_KEEP 4096  /* most candidates a sampled cut may keep: they are heap-selected */

static bool cand_cut_sample(const char *x, size_t stride, int32_t n, int32_t k, float *cut)
{
    const int64_t j = 4 + (int64_t)3 * k * CUT_SAMPLE / n;
    if (n < 8 * CUT_SAMPLE || j > CUT_SAMPLE_J)
        return false;
    float top[CUT_SAMPLE_J]; /* the j largest sampled so far, descending */
    int32_t m = 0;
    const int32_t step = n / CUT_SAMPLE;
    for (int32_t s = 0, i = step / 2; s < CUT_SAMPLE; s++, i += step) {
        float v = *(const float *)(x + (size_t)i * stride);
        if (!(v > -INFINITY) || (m == j && v <= top[m - 1]))
            continue; /* NaN, −inf, or below the j-th */
        int32_t q = m < j ? m++ : m - 1;
        while (q > 0 && top[q - 1] < v) {
            top[q] = top[q - 1];
            q--;
        }
        top[q] = v;
    }
    if (m < j || top[m - 1] == INFINITY)
        return false;
    *cut = top[m - 1];
    return true;
}

/* Whether a pre-selection that kept m of n serves a top-k. */
static inline bool cand_kept_ok(int32_t m, int32_t n, int32_t k) { return m >= k && m <= CUT_SAMPLE_KEEP && m <= n / 2; }

/* The cut of a pre-selection (cand_preselect, row_preselect) over the n
 * logits at x, stride bytes apart (a candidate list's, or a logits row's):
 * a threshold t with k ≤ #{x ≥ t} ≤ a little over k, found by bisecting
 * [min, max] with counting passes (a long row tries cand_cut_sample first).
 * Every logit below t is below every one kept, so the k first in
 * cand_before order are among the kept ones whatever t is, as long as k are
 * kept: the result never depends on where the search stops.
 * False when no useful cut exists (fewer than k finite logits, or a cut
 * that keeps more than half). Why not a heap over all n: a heap of k sifts
 * whenever a later candidate beats its root, which trained models' logits
 * make frequent; why not a histogram: its scattered increments cost ~13
 * cycles a logit, eight vector counting passes a fraction of that. */
static bool cand_cut_find(const char *x, size_t stride, int32_t n, int32_t k, float *cut)
{
    /* the smallest finite and the largest logit; two of each side by side
     * (a row: four lanes of each), so that no compare waits on its own
     * previous result. −inf (masked) and NaN are never kept. */
    float mn0 = INFINITY, mx0 = -INFINITY, mn1 = INFINITY, mx1 = -INFINITY;
    int32_t i = 0;
    if (stride == sizeof(float) && n >= 4) {
        const cut_vf ninf = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
        cut_vf vmn = -ninf, vmx = ninf;
        for (; i + 4 <= n; i += 4) {
            cut_vf v;
            memcpy(&v, x + (size_t)i * sizeof(float), sizeof v);
            cut_vi lt = (v < vmn) & (v > ninf), gt = v > vmx; /* false for NaN */
            vmn = (cut_vf)(((cut_vi)v & lt) | ((cut_vi)vmn & ~lt));
            vmx = (cut_vf)(((cut_vi)v & gt) | ((cut_vi)vmx & ~gt));
        }
        for (int l = 0; l < 4; l += 2) {
            mn0 = vmn[l] < mn0 ? vmn[l] : mn0;
            mn1 = vmn[l + 1] < mn1 ? vmn[l + 1] : mn1;
            mx0 = vmx[l] > mx0 ? vmx[l] : mx0;
            mx1 = vmx[l + 1] > mx1 ? vmx[l + 1] : mx1;
        }
    }
#define X(i) (*(const float *)(x + (size_t)(i) * stride))
    for (; i + 1 < n; i += 2) {
        float l0 = X(i), l1 = X(i + 1);
        if (l0 > -INFINITY && l0 < mn0)
            mn0 = l0;
        if (l0 > mx0)
            mx0 = l0;
        if (l1 > -INFINITY && l1 < mn1)
            mn1 = l1;
        if (l1 > mx1)
            mx1 = l1;
    }
    if (i < n && X(i) > -INFINITY && X(i) < mn0)
        mn0 = X(i);
    if (i < n && X(i) > mx0)
        mx0 = X(i);
#undef X
    float lo = mn1 < mn0 ? mn1 : mn0, hi = mx1 > mx0 ? mx1 : mx0;
    if (!(hi > lo) || !isfinite(hi - lo))
        return false;
    /* #{x ≥ lo} ≥ k once a count says so (lo is the smallest finite logit
     * until then); #{x ≥ hi} < k or hi is the largest */
    /* how far past k the search may stop: every extra candidate is sorted
     * (insertion, ~k moves each), every extra pass reads all n; so a short
     * row is cut close (512 tokens: k + 9 took 5.6 → 3.4 µs a sample, k + 40
     * 4.0) and a long one stops early (152k tokens: 2k 405 µs, k + 9 451) */
    const int32_t cap = k + (n >= 16384 ? k : k / 8 + 4);
    int32_t c_lo = -1;
    for (int it = 0; it < 40; it++) {
        float t = lo + (hi - lo) * 0.5f;
        if (!(t > lo && t < hi))
            break; /* ties: the interval cannot shrink further */
        int32_t c = cut_count(x, stride, n, t);
        if (c < k) {
            hi = t;
        } else {
            lo = t;
            c_lo = c;
            if (c <= cap)
                break;
        }
    }
    if (c_lo < 0)
        c_lo = cut_count(x, stride, n, lo);
    if (c_lo < k || c_lo > n / 2)
        return false;
    *cut = lo;
    return true;
}

/* Move to a[0..m) every candidate whose logit is at least the cut of
 * cand_cut_find; returns m (k ≤ m ≤ n), or n when no useful cut exists.
 * Every candidate left behind is strictly below every one moved forward:
 * the k first in cand_before order are all among a[0..m). a stays a
 * permutation of its input. */
static int32_t cand_partition(struct smp_cand *a, int32_t n, float cut)
{
    int32_t j = 0;
    for (int32_t i = 0; i < n; i++)
        if (a[i].logit >= cut) {
            cand_swap(&a[i], &a[j]);
            j++;
        }
    return j;
}

static int32_t cand_preselect(struct smp_cand *a, int32_t n, int32_t k)
{
    float cut;
    if (cand_cut_sample((const char *)&a[0].logit, sizeof *a, n, k, &cut)) {
        int32_t m = cand_partition(a, n, cut);
        if (cand_kept_ok(m, n, k))
            return m;
    }
    if (!cand_cut_find((const char *)&a[0].logit, sizeof *a, n, k, &cut))
        return n;
    return cand_partition(a, n, cut);
}

/* The same pre-selection straight from a logits row (ids 0..n), before any
 * candidate list exists: the kept ones are written to out, in id order;
 * returns their number, or 0 when no useful cut exists. A row is a third of
 * a candidate list's bytes, and only the kept candidates are ever written:
 * for a 152k-token vocabulary, most of a sample's time was writing and
 * re-reading the whole list. out has room for n: every logit is written at
 * out[j] and j moves on only past a kept one (no branch to mispredict). */
static int32_t row_partition(const float *row, int32_t n, float cut, struct smp_cand *out)
{
    int32_t i = 0, j = 0;
    /* four at a time, skipping fours with none kept (most of them: a cut
     * keeps a few percent of a row) */
    const cut_vf tv = {cut, cut, cut, cut};
    for (; i + 4 <= n; i += 4) {
        cut_vf v;
        memcpy(&v, row + i, sizeof v);
        cut_vi m = tv <= v;
        uint64_t h[2];
        memcpy(h, &m, sizeof h);
        if (!(h[0] | h[1]))
            continue;
        for (int l = 0; l < 4; l++) {
            out[j] = (struct smp_cand){i + l, v[l], 0.0f};
            j -= m[l];
        }
    }
    for (; i < n; i++) {
        out[j] = (struct smp_cand){i, row[i], 0.0f};
        j += row[i] >= cut;
    }
    return j;
}

static int32_t row_preselect(const float *row, int32_t n, int32_t k, struct smp_cand *out)
{
    float cut;
    if (cand_cut_sample((const char *)row, sizeof *row, n, k, &cut)) {
        int32_t m = row_partition(row, n, cut, out);
        if (cand_kept_ok(m, n, k))
            return m;
    }
    if (!cand_cut_find((const char *)row, sizeof *row, n, k, &cut))
        return 0;
    return row_partition(row, n, cut, out);
}

/* a[0..n) sorted by insertion: for the few dozen candidates a pre-selection
 * leaves, fewer mispredicted branches than a heap's sifting */
static void cand_insertion_sort(struct smp_cand *a, int32_t n)
{
    for (int32_t i = 1; i < n; i++) {
        struct smp_cand x = a[i];
        int32_t j = i;
        while (j > 0 && cand_before(&x, &a[j - 1])) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

/* The k first of a[0..n) into a[0..k) by insertion (k < n): a[0..k) is
 * sorted first, then each later candidate that beats the k-th is inserted
 * and the k-th dropped. a[k..n) is left unspecified. */
static void cand_insertion_select(struct smp_cand *a, int32_t n, int32_t k)
{
    cand_insertion_sort(a, k);
    for (int32_t i = k; i < n; i++) {
        struct smp_cand x = a[i];
        if (!cand_before(&x, &a[k - 1]))
            continue;
        int32_t j = k - 1;
        while (j > 0 && cand_before(&x, &a[j - 1])) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

/* The k first of a[0..n) into a[0..k), sorted (k <= n); the order of
 * a[k..n) afterwards is unspecified. */
static void cand_select(struct smp_cand *a, int32_t n, int32_t k)
{
    if (k > 1 && n <= CAND_INSERTION_MAX)
        cand_insertion_select(a, n, k < n ? k : n);
    else
        cand_heap_select(a, n, k);
}

static void cand_partial_sort(struct smp_cand *a, int32_t n, int32_t k)
{
    if (k > n)
        k = n;
    if (cand_preselect_pays(n, k))
        n = cand_preselect(a, n, k);
    cand_select(a, n, k);
}

/* cand_partial_sort's heap: the k first of a[0..n) into a[0..k), sorted. */
static void cand_heap_select(struct smp_cand *a, int32_t n, int32_t k)
{
    if (k <= 1) {
        if (k == 1)
            for (int32_t j = 1; j < n; j++)
                if (cand_before(&a[j], &a[0]))
                    cand_swap(&a[j], &a[0]);
        return;
    }
    for (int32_t i = k / 2 - 1; i >= 0; i--)
        cand_sift(a, k, i);
    for (int32_t j = k; j < n; j++) {
        if (cand_before(&a[j], &a[0])) {
            cand_swap(&a[j], &a[0]);
            cand_sift(a, k, 0);
        }
    }
    for (int32_t end = k - 1; end > 0; end--) {
        cand_swap(&a[0], &a[end]);
        cand_sift(a, end, 0);
    }
}

/* Ascending key, ties by position; heapsort (root = largest). */
static inline bool keyed_after(const struct keyed *a, const struct keyed *b)
{
    return a->key > b->key || (a->key == b->key && a->idx > b->idx);
}

static void keyed_sift(struct keyed *h, int32_t n, int32_t i)
{
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && keyed_after(&h[l], &h[m]))
            m = l;
        if (r < n && keyed_after(&h[r], &h[m]))
            m = r;
        if (m == i)
            return;
        struct keyed t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void keyed_heapsort(struct keyed *a, int32_t n)
{
    for (int32_t i = n / 2 - 1; i >= 0; i--)
        keyed_sift(a, n, i);
    for (int32_t end = n - 1; end > 0; end--) {
        struct keyed t = a[0];
        a[0] = a[end];
        a[end] = t;
        keyed_sift(a, end, 0);
    }
}

static inline bool keyed_before(const struct keyed *a, const struct keyed *b) { return keyed_after(b, a); }
static inline void keyed_swap(struct keyed *a, struct keyed *b)
{
    struct keyed t = *a;
    *a = *b;
    *b = t;
}
static void cand_heapsort(struct smp_cand *a, int32_t n) { cand_partial_sort(a, n, n); }

/* Introsort (quicksort, median of three, heapsort past the depth limit,
 * insertion sort for short runs): in place, no allocation, and much kinder
 * to the cache than a heapsort over 150k entries. Both orders are total
 * (ties broken by id / position), so the result does not depend on the
 * algorithm. */
#define DEFINE_INTROSORT(NAME, T, BEFORE, SWAP, HEAPSORT)                         \
    static void NAME##_rec(T *a, int32_t n, int depth)                            \
    {                                                                             \
        while (n > 16) {                                                          \
            if (depth-- == 0) {                                                   \
                HEAPSORT(a, n);                                                   \
                return;                                                           \
            }                                                                     \
            int32_t mid = n / 2;                                                  \
            if (BEFORE(&a[mid], &a[0]))                                           \
                SWAP(&a[mid], &a[0]);                                             \
            if (BEFORE(&a[n - 1], &a[0]))                                         \
                SWAP(&a[n - 1], &a[0]);                                           \
            if (BEFORE(&a[n - 1], &a[mid]))                                       \
                SWAP(&a[n - 1], &a[mid]);                                         \
            SWAP(&a[mid], &a[n - 2]); /* pivot; a[0] ≤ pivot ≤ a[n-1] */         \
            T piv = a[n - 2];                                                     \
            int32_t i = 0, j = n - 2;                                             \
            for (;;) {                                                            \
                while (BEFORE(&a[++i], &piv)) {}                                  \
                while (BEFORE(&piv, &a[--j])) {}                                  \
                if (i >= j)                                                       \
                    break;                                                        \
                SWAP(&a[i], &a[j]);                                               \
            }                                                                     \
            SWAP(&a[i], &a[n - 2]);                                               \
            /* recurse into the smaller side, loop on the larger */              \
            if (i < n - 1 - i) {                                                  \
                NAME##_rec(a, i, depth);                                          \
                a += i + 1;                                                       \
                n -= i + 1;                                                       \
            } else {                                                              \
                NAME##_rec(a + i + 1, n - i - 1, depth);                          \
                n = i;                                                            \
            }                                                                     \
        }                                                                         \
        for (int32_t i = 1; i < n; i++)                                           \
            for (int32_t j = i; j > 0 && BEFORE(&a[j], &a[j - 1]); j--)           \
                SWAP(&a[j], &a[j - 1]);                                           \
    }                                                                             \
    static void NAME(T *a, int32_t n)                                             \
    {                                                                             \
        int depth = 2;                                                            \
        for (int32_t m = n; m > 1; m >>= 1)                                       \
            depth += 2;                                                           \
        NAME##_rec(a, n, depth);                                                  \
    }

DEFINE_INTROSORT(cand_sort, struct smp_cand, cand_before, cand_swap, cand_heapsort)
DEFINE_INTROSORT(keyed_sort, struct keyed, keyed_before, keyed_swap, keyed_heapsort)

static void sort_all(struct smp_chain *c)
{
    if (!c->sorted) {
        cand_sort(c->cur, c->size);
        c->sorted = true;
    }
}

/* Softmax helper of spec §3: max = first if sorted else maximum; float sum. */
static void softmax(struct smp_chain *c)
{
    struct smp_cand *d = c->cur;
    int32_t n = c->size;
    if (n == 0)
        return;
    float max = d[0].logit;
    if (!c->sorted)
        for (int32_t i = 1; i < n; i++)
            if (d[i].logit > max)
                max = d[i].logit;
    float sum = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        float p = expf(d[i].logit - max);
        d[i].p = p;
        sum += p;
    }
    for (int32_t i = 0; i < n; i++)
        d[i].p /= sum;
}

/* ------------------------------------------------------------ samplers (§3) */

/* Write the candidate list of smp_sample's row, if not written yet: every
 * token in id order, a NaN logit as −inf so a broken row cannot poison
 * sorting or the sums. */
static void cand_build(struct smp_chain *c)
{
    if (!c->row)
        return;
    for (int32_t i = 0; i < c->n_vocab; i++) {
        float l = c->row[i];
        c->cur[i].id = i;
        c->cur[i].logit = isnan(l) ? -INFINITY : l;
        c->cur[i].p = 0.0f;
    }
    c->row = NULL;
}

static bool penalties_active(const struct smp_chain *c)
{
    const struct smp_params *p = &c->p;
    return c->last_n > 0 && (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

static void apply_logit_bias(struct smp_chain *c)
{
    for (int32_t b = 0; b < c->n_bias; b++) {
        int32_t t = c->bias[b].token;
        if (t < c->size && c->cur[t].id == t) {
            c->cur[t].logit += c->bias[b].bias;
            continue;
        }
        /* the list was reordered: look the token up */
        for (int32_t i = 0; i < c->size; i++)
            if (c->cur[i].id == t) {
                c->cur[i].logit += c->bias[b].bias;
                break;
            }
    }
}

static void apply_penalties(struct smp_chain *c)
{
    const struct smp_params *p = &c->p;
    if (!penalties_active(c))
        return;
    for (int32_t i = 0; i < c->size; i++) {
        int32_t cnt = c->counts[c->cur[i].id];
        if (cnt <= 0)
            continue;
        float *l = &c->cur[i].logit;
        if (*l <= 0.0f)
            *l *= p->repeat_penalty;
        else
            *l /= p->repeat_penalty;
        *l -= (float)cnt * p->frequency_penalty + p->presence_penalty;
    }
    c->sorted = false;
}

static void apply_top_k(struct smp_chain *c, int32_t k)
{
    if (k <= 0)
        return;
    if (k > c->size)
        k = c->size;
    if (c->row && cand_preselect_pays(c->size, k)) {
        int32_t m = row_preselect(c->row, c->size, k, c->cur);
        if (m > 0) { /* cur holds the kept candidates only: the k first are among them */
            c->row = NULL;
            cand_select(c->cur, m, k);
            c->sorted = true;
            c->size = k;
            return;
        }
    }
    cand_build(c);
    if (!c->sorted) {
        cand_partial_sort(c->cur, c->size, k);
        c->sorted = true;
    }
    c->size = k;
}

static void apply_typical(struct smp_chain *c, float p, int32_t min_keep)
{
    if (p >= 1.0f || c->size == 0)
        return;
    sort_all(c);
    softmax(c);
    struct smp_cand *d = c->cur;
    int32_t n = c->size;
    float ent = 0.0f;
    for (int32_t i = 0; i < n; i++)
        if (d[i].p > 0.0f) /* 0·ln 0 = 0 (llama.cpp would produce NaN here) */
            ent += -d[i].p * logf(d[i].p);
    for (int32_t i = 0; i < n; i++) {
        c->keys[i].key = d[i].p > 0.0f ? fabsf(-logf(d[i].p) - ent) : INFINITY;
        c->keys[i].idx = i;
    }
    keyed_sort(c->keys, n);
    float cum = 0.0f;
    int32_t last = n;
    for (int32_t i = 0; i < n; i++) {
        cum += d[c->keys[i].idx].p;
        if (cum > p && (min_keep == 0 || i >= min_keep - 1)) {
            last = i + 1;
            break;
        }
    }
    for (int32_t i = 0; i < last; i++)
        c->tmp[i] = d[c->keys[i].idx];
    memcpy(d, c->tmp, (size_t)last * sizeof *d);
    c->size = last;
    c->sorted = false;
}

static void apply_top_p(struct smp_chain *c, float p, int32_t min_keep)
{
    if (p >= 1.0f || c->size == 0)
        return;
    softmax(c); /* sum in the current order, before sorting */
    int32_t n = c->size;
    int32_t k = n;
    if (!c->sorted) {
        /* most of the mass usually sits in a few hundred tokens: sort those
         * first and fall back to a full sort only if the cut lies beyond */
        k = n > 1024 ? 256 : n;
        if (k < n)
            cand_partial_sort(c->cur, n, k);
        else
            cand_sort(c->cur, n);
    }
    float cum = 0.0f;
    int32_t last = n;
    for (int32_t i = 0; i < n; i++) {
        cum += c->cur[i].p;
        if (cum >= p && i + 1 >= min_keep) {
            last = i + 1;
            break;
        }
        if (i == k - 1 && k < n) {
            /* the first k are already in place; order the rest behind them */
            cand_sort(c->cur + k, n - k);
            k = n;
        }
    }
    c->sorted = true;
    c->size = last;
}

static void apply_min_p(struct smp_chain *c, float p, int32_t min_keep)
{
    if (p <= 0.0f || c->size == 0)
        return;
    struct smp_cand *d = c->cur;
    if (!c->sorted) {
        float max = -FLT_MAX;
        for (int32_t i = 0; i < c->size; i++)
            if (d[i].logit > max)
                max = d[i].logit;
        float min_logit = max + logf(p);
        int32_t m = 0;
        for (int32_t i = 0; i < c->size; i++)
            if (d[i].logit >= min_logit)
                c->tmp[m++] = d[i];
        if (m > 0 && m >= min_keep) {
            memcpy(d, c->tmp, (size_t)m * sizeof *d);
            c->size = m;
            return;
        }
    }
    sort_all(c);
    float min_logit = d[0].logit + logf(p);
    int32_t i = 1;
    for (; i < c->size; i++)
        if (d[i].logit < min_logit && i >= min_keep)
            break;
    c->size = i;
}

static void apply_temp(struct smp_chain *c, float t)
{
    struct smp_cand *d = c->cur;
    if (t <= 0.0f) {
        if (c->size == 0)
            return;
        int32_t best = 0;
        for (int32_t i = 1; i < c->size; i++)
            if (d[i].logit > d[best].logit)
                best = i;
        for (int32_t i = 0; i < c->size; i++)
            if (i != best)
                d[i].logit = -INFINITY;
        return;
    }
    for (int32_t i = 0; i < c->size; i++)
        d[i].logit /= t;
}

/* §3.9: one uniform draw whenever size ≥ 1; cumulative walk in list order. */
static void apply_dist(struct smp_chain *c)
{
    struct smp_cand *d = c->cur;
    int32_t n = c->size;
    c->selected = -1;
    if (n == 0)
        return;
    if (n == 1) {
        d[0].p = 1.0f;
        (void)mt_uniform(c);
        c->selected = 0;
        return;
    }
    float max = d[0].logit;
    if (!c->sorted)
        for (int32_t i = 1; i < n; i++)
            if (d[i].logit > max)
                max = d[i].logit;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        d[i].p = expf(d[i].logit - max);
        sum += d[i].p;
    }
    double u = mt_uniform(c);
    double target = sum * u, run = 0.0;
    for (int32_t i = 0; i < n; i++) {
        if (c->selected < 0) {
            run += d[i].p;
            if (run >= target)
                c->selected = i;
        }
        d[i].p = (float)(d[i].p / sum);
    }
    if (c->selected < 0) /* only reachable when every p is NaN (all −inf) */
        c->selected = n - 1;
}

/* The chain over c's list of c->size (§1: the whole vocabulary, or what smp_sample_cands was given),
 * c->row the row the list is still to be written from (NULL when written). */
static int32_t run_chain(struct smp_chain *c)
{
    const struct smp_params *p = &c->p;
    c->sorted = false;
    c->selected = -1;
    if (c->allow) { /* the constraint first: what it forbids is not a candidate at all */
        cand_build(c);
        int32_t m = 0;
        for (int32_t i = 0; i < c->size; i++) {
            int32_t t = c->cur[i].id;
            if ((c->allow[t >> 5] >> (t & 31)) & 1u)
                c->cur[m++] = c->cur[i];
        }
        c->size = m;
    }
    if (c->n_bias > 0 || penalties_active(c)) /* they edit entries of the list */
        cand_build(c);
    if (c->n_bias > 0)
        apply_logit_bias(c);
    for (int32_t s = 0; s < p->n_samplers; s++) {
        switch (p->samplers[s]) {
        case SMP_PENALTIES: apply_penalties(c); break; /* the list is written when they are on */
        case SMP_TOP_K: apply_top_k(c, p->top_k); break;
        case SMP_TYPICAL_P: cand_build(c); apply_typical(c, p->typical_p, p->min_keep); break;
        case SMP_TOP_P: cand_build(c); apply_top_p(c, p->top_p, p->min_keep); break;
        case SMP_MIN_P: cand_build(c); apply_min_p(c, p->min_p, p->min_keep); break;
        case SMP_TEMPERATURE: cand_build(c); apply_temp(c, p->temp); break;
        /* validated as disabled in smp_new: no-ops */
        case SMP_DRY: case SMP_TOP_N_SIGMA: case SMP_XTC: case SMP_TYPE_COUNT: break;
        }
    }
    cand_build(c);
    apply_dist(c);
    if (c->selected < 0)
        return ERR_NOTFOUND;
    return c->cur[c->selected].id;
}

int32_t smp_sample(struct smp_chain *c, const float *logits)
{
    if (!c || !logits)
        return ERR_INVALID;
    /* §1: whole vocabulary in id order (written by cand_build when a sampler
     * first needs the list: top-k can start from the row itself) */
    c->row = logits;
    c->size = c->n_vocab;
    return run_chain(c);
}

bool smp_row_finite(const float *x, int32_t n)
{
    /* v·0 is 0 for a finite v and NaN for NaN or ±inf, and a NaN stays in a
     * sum: eight lanes of such sums, no branch in the loop */
    cut_vf a0 = {0}, a1 = {0};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        cut_vf v0, v1;
        memcpy(&v0, x + i, sizeof v0);
        memcpy(&v1, x + i + 4, sizeof v1);
        a0 += v0 * 0.0f;
        a1 += v1 * 0.0f;
    }
    a0 += a1;
    float t = a0[0] + a0[1] + a0[2] + a0[3];
    for (; i < n; i++)
        t += x[i] * 0.0f;
    return t == 0.0f;
}

void smp_set_allowed(struct smp_chain *c, const uint32_t *allow)
{
    if (c)
        c->allow = allow;
}

int32_t smp_topk_only(const struct smp_chain *c)
{
    if (!c || c->n_bias > 0 || penalties_active(c) || c->p.mirostat != 0)
        return 0;
    for (int32_t s = 0; s < c->p.n_samplers; s++) {
        switch (c->p.samplers[s]) {
        case SMP_PENALTIES: /* inactive (above) */
        case SMP_DRY: case SMP_TOP_N_SIGMA: case SMP_XTC: case SMP_TYPE_COUNT: /* disabled */
            continue;
        case SMP_TOP_K:
            return c->p.top_k > 0 && c->p.top_k < c->n_vocab ? c->p.top_k : 0;
        default:
            return 0; /* a sampler before top-k looks at the whole row */
        }
    }
    return 0;
}

int32_t smp_sample_cands(struct smp_chain *c, const int32_t *ids, const float *logits, int32_t n)
{
    if (!c || !ids || !logits || n < 0 || n > c->n_vocab)
        return ERR_INVALID;
    const int32_t k = smp_topk_only(c);
    if (k <= 0 || n < (c->allow ? 1 : k))
        return ERR_INVALID; /* the draw needs more of the row than the candidates */
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= c->n_vocab)
            return ERR_RANGE;
        c->cur[i] = (struct smp_cand){ids[i], isnan(logits[i]) ? -INFINITY : logits[i], 0.0f};
    }
    c->row = NULL; /* the list is written: top-k selects from it */
    c->size = n;
    return run_chain(c);
}

int32_t smp_candidates(const struct smp_chain *c, const struct smp_cand **out, int32_t *selected)
{
    *out = c->cur;
    if (selected)
        *selected = c->selected;
    return c->size;
}

/* ------------------------------------------------------------ penalties state */

int smp_accept(struct smp_chain *c, int32_t token)
{
    if (!c)
        return ERR_INVALID;
    if (token < 0 || token >= c->n_vocab)
        return ERR_RANGE;
    if (c->last_n == 0)
        return 0;
    c->counts[token]++;
    if (c->ring_len == c->last_n) {
        /* full: the oldest token leaves the window */
        int32_t old = c->ring[c->ring_head];
        c->counts[old]--;
        c->ring[c->ring_head] = token;
        c->ring_head = (c->ring_head + 1) % c->last_n;
    } else {
        c->ring[(c->ring_head + c->ring_len) % c->last_n] = token;
        c->ring_len++;
    }
    return 0;
}

void smp_reset(struct smp_chain *c)
{
    if (!c)
        return;
    if (c->last_n > 0) {
        for (int32_t i = 0; i < c->ring_len; i++)
            c->counts[c->ring[(c->ring_head + i) % c->last_n]] = 0;
    }
    c->ring_len = 0;
    c->ring_head = 0;
    c->size = 0;
    c->selected = -1;
    mt_seed(c, c->seed);
}

uint32_t smp_seed(const struct smp_chain *c) { return c->seed; }

/* ------------------------------------------------------------ probabilities (§6.2) */

static struct smp_prob make_prob(int32_t id, float p)
{
    struct smp_prob r = {id, p, p > 0.0f ? logf(p) : -INFINITY};
    return r;
}

int smp_probs(struct smp_chain *c, const float *logits, int32_t token, struct smp_prob *chosen,
              struct smp_prob *top, int32_t n_top)
{
    if (!c || n_top < 0 || (n_top > 0 && !top))
        return ERR_INVALID;
    if (c->p.post_sampling_probs) {
        int32_t n = c->size;
        if (chosen) {
            *chosen = make_prob(token, 0.0f);
            for (int32_t i = 0; i < n; i++)
                if (c->cur[i].id == token)
                    *chosen = make_prob(token, c->cur[i].p);
        }
        memcpy(c->tmp, c->cur, (size_t)n * sizeof *c->tmp);
        /* sort survivors by probability; dist's p is monotone in the logit,
         * so ordering by p with id ties matches ordering by logit */
        for (int32_t i = 0; i < n; i++)
            c->tmp[i].logit = c->tmp[i].p;
        int32_t k = n_top < n ? n_top : n;
        cand_partial_sort(c->tmp, n, k);
        /* llama-server stops the list at the first zero probability (e.g.
         * the −inf candidates of greedy sampling) */
        int32_t m = 0;
        while (m < k && c->tmp[m].p != 0.0f) {
            top[m] = make_prob(c->tmp[m].id, c->tmp[m].p);
            m++;
        }
        return m;
    }
    if (!logits)
        return ERR_INVALID;
    int32_t n = c->n_vocab;
    float max = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        float l = isnan(logits[i]) ? -INFINITY : logits[i];
        c->tmp[i].id = i;
        c->tmp[i].logit = l;
        if (l > max)
            max = l;
    }
    /* llama-server sums float p over the fully sorted vocab; a double sum
     * in id order gives the same value to within float rounding without
     * sorting 150k entries */
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        sum += expf(c->tmp[i].logit - max);
    if (chosen) {
        float l = (token >= 0 && token < n) ? c->tmp[token].logit : -INFINITY;
        *chosen = make_prob(token, (float)(expf(l - max) / sum));
    }
    int32_t k = n_top < n ? n_top : n;
    cand_partial_sort(c->tmp, n, k);
    for (int32_t i = 0; i < k; i++)
        top[i] = make_prob(c->tmp[i].id, (float)(expf(c->tmp[i].logit - max) / sum));
    return k;
}

/* ------------------------------------------------------------ params */

static const enum smp_type default_order[] = {
    SMP_PENALTIES, SMP_DRY, SMP_TOP_N_SIGMA, SMP_TOP_K, SMP_TYPICAL_P,
    SMP_TOP_P,     SMP_MIN_P, SMP_XTC,       SMP_TEMPERATURE,
};

struct smp_params smp_params_default(void)
{
    struct smp_params p;
    memset(&p, 0, sizeof p);
    p.temp = 0.80f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.typical_p = 1.0f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.0f;
    p.min_keep = 0;
    p.seed = SMP_DEFAULT_SEED;
    p.n_probs = 0;
    p.dry_multiplier = 0.0f;
    p.top_n_sigma = -1.0f;
    p.xtc_probability = 0.0f;
    p.xtc_threshold = 0.10f;
    p.mirostat = 0;
    p.mirostat_tau = 5.0f;
    p.mirostat_eta = 0.10f;
    p.dynatemp_range = 0.0f;
    p.n_samplers = (int32_t)(sizeof default_order / sizeof default_order[0]);
    memcpy(p.samplers, default_order, sizeof default_order);
    return p;
}

static const char *const type_names[SMP_TYPE_COUNT] = {
    [SMP_PENALTIES] = "penalties", [SMP_DRY] = "dry",     [SMP_TOP_N_SIGMA] = "top_n_sigma",
    [SMP_TOP_K] = "top_k",         [SMP_TYPICAL_P] = "typ_p", [SMP_TOP_P] = "top_p",
    [SMP_MIN_P] = "min_p",         [SMP_XTC] = "xtc",     [SMP_TEMPERATURE] = "temperature",
};

const char *smp_type_name(enum smp_type t)
{
    return (unsigned)t < SMP_TYPE_COUNT ? type_names[t] : "?";
}

/* llama.cpp's names (common_sampler_types_from_names): canonical, kebab-case,
 * without underscores, and three short aliases; matched case-insensitively.
 * Returns the type, -1 for an unknown name, -2 for a sampler llama.cpp
 * knows but we do not implement (infill, adaptive_p). */
static int type_from_name(const char *s, size_t n)
{
    static const struct { const char *name; int t; } names[] = {
        {"dry", SMP_DRY}, {"top_k", SMP_TOP_K}, {"top-k", SMP_TOP_K}, {"topk", SMP_TOP_K},
        {"top_p", SMP_TOP_P}, {"top-p", SMP_TOP_P}, {"topp", SMP_TOP_P}, {"nucleus", SMP_TOP_P},
        {"top_n_sigma", SMP_TOP_N_SIGMA}, {"top-n-sigma", SMP_TOP_N_SIGMA},
        {"topnsigma", SMP_TOP_N_SIGMA},
        {"typ_p", SMP_TYPICAL_P}, {"typ-p", SMP_TYPICAL_P}, {"typp", SMP_TYPICAL_P},
        {"typ", SMP_TYPICAL_P},
        {"min_p", SMP_MIN_P}, {"min-p", SMP_MIN_P}, {"minp", SMP_MIN_P},
        {"temperature", SMP_TEMPERATURE}, {"temp", SMP_TEMPERATURE},
        {"xtc", SMP_XTC}, {"penalties", SMP_PENALTIES},
        {"infill", -2}, {"adaptive_p", -2}, {"adaptive-p", -2}, {"adaptivep", -2},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i].name) == n && !strncasecmp(names[i].name, s, n))
            return names[i].t;
    return -1;
}

static int parse_sequence(struct smp_params *p, const char *text, const char *seps, struct err *e)
{
    enum smp_type out[SMP_MAX_SAMPLERS];
    int32_t n = 0;
    const char *s = text;
    while (*s) {
        size_t len = strcspn(s, seps);
        if (len > 0) {
            int t = type_from_name(s, len);
            if (t == -2)
                return err_set(e, ERR_UNSUPPORTED, "sampler sequence '%s': sampler '%.*s' is not supported",
                               text, (int)len, s);
            if (t < 0) { /* llama.cpp skips unknown names (with a warning) */
                s += len;
                if (*s)
                    s++;
                continue;
            }
            if (n == SMP_MAX_SAMPLERS)
                return err_set(e, ERR_RANGE, "sampler sequence '%s': more than %d samplers", text,
                               SMP_MAX_SAMPLERS);
            out[n++] = (enum smp_type)t;
        }
        s += len;
        if (*s)
            s++;
    }
    memcpy(p->samplers, out, (size_t)n * sizeof out[0]);
    p->n_samplers = n;
    return 0;
}

int smp_params_set_sequence(struct smp_params *p, const char *text, struct err *e)
{
    if (!p || !text)
        return err_set(e, ERR_INVALID, "smp_params_set_sequence: NULL argument");
    return parse_sequence(p, text, ";, ", e);
}

int smp_params_apply_model_value(struct smp_params *p, const char *name, const char *text,
                                 struct err *e)
{
    static const struct {
        const char *name;
        uint32_t bit;
        char kind; /* 'i' int, 'f' float, 's' sequence */
        size_t off;
    } keys[] = {
        {"sequence", SMP_SET_SEQUENCE, 's', 0},
        {"top_k", SMP_SET_TOP_K, 'i', offsetof(struct smp_params, top_k)},
        {"top_p", SMP_SET_TOP_P, 'f', offsetof(struct smp_params, top_p)},
        {"min_p", SMP_SET_MIN_P, 'f', offsetof(struct smp_params, min_p)},
        {"xtc_probability", SMP_SET_XTC_PROBABILITY, 'f', offsetof(struct smp_params, xtc_probability)},
        {"xtc_threshold", SMP_SET_XTC_THRESHOLD, 'f', offsetof(struct smp_params, xtc_threshold)},
        {"temp", SMP_SET_TEMP, 'f', offsetof(struct smp_params, temp)},
        {"penalty_last_n", SMP_SET_PENALTY_LAST_N, 'i', offsetof(struct smp_params, repeat_last_n)},
        {"penalty_repeat", SMP_SET_PENALTY_REPEAT, 'f', offsetof(struct smp_params, repeat_penalty)},
        {"mirostat", SMP_SET_MIROSTAT, 'i', offsetof(struct smp_params, mirostat)},
        {"mirostat_tau", SMP_SET_MIROSTAT_TAU, 'f', offsetof(struct smp_params, mirostat_tau)},
        {"mirostat_eta", SMP_SET_MIROSTAT_ETA, 'f', offsetof(struct smp_params, mirostat_eta)},
    };
    if (!p || !name || !text)
        return err_set(e, ERR_INVALID, "smp_params_apply_model_value: NULL argument");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (strcmp(keys[i].name, name))
            continue;
        if (p->set_mask & keys[i].bit)
            return 0; /* given explicitly: the model's recommendation loses */
        char *end = NULL;
        switch (keys[i].kind) {
        case 's': {
            int rc = smp_params_set_sequence(p, text, e);
            if (rc)
                err_prefix(e, "general.sampling.sequence");
            return rc;
        }
        case 'i': {
            errno = 0;
            long v = strtol(text, &end, 10);
            if (end == text || errno || v < INT32_MIN || v > INT32_MAX)
                return err_set(e, ERR_FORMAT, "general.sampling.%s: '%s' is not an integer", name,
                               text);
            int32_t v32 = (int32_t)v;
            memcpy((char *)p + keys[i].off, &v32, sizeof v32);
            return 0;
        }
        default: {
            float v = strtof(text, &end);
            if (end == text || isnan(v))
                return err_set(e, ERR_FORMAT, "general.sampling.%s: '%s' is not a number", name,
                               text);
            memcpy((char *)p + keys[i].off, &v, sizeof v);
            return 0;
        }
        }
    }
    return 0;
}

/* ------------------------------------------------------------ GGUF recommendations */

/* llama.cpp reads each general.sampling.* value as text (gguf_kv_to_str:
 * integers in decimal, floats through std::to_string = "%f", strings as
 * they are; bools and arrays do not parse as numbers) and parses it back. */
static int gguf_value_text(const struct gguf *g, const char *key, char *buf, size_t cap,
                           struct err *e)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv)
        return ERR_NOTFOUND;
    switch (kv->type) {
    case GGUF_STRING: {
        struct gguf_str s;
        int rc = gguf_get_str(g, key, &s, e);
        if (rc)
            return rc;
        size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
        memcpy(buf, s.ptr, n);
        buf[n] = 0;
        return 0;
    }
    case GGUF_FLOAT32:
    case GGUF_FLOAT64: {
        float v;
        int rc = gguf_get_f32(g, key, &v, e);
        if (rc)
            return rc;
        snprintf(buf, cap, "%f", (double)v);
        return 0;
    }
    case GGUF_UINT8: case GGUF_INT8: case GGUF_UINT16: case GGUF_INT16:
    case GGUF_UINT32: case GGUF_INT32: case GGUF_UINT64: case GGUF_INT64: {
        int64_t v;
        if (gguf_get_i64(g, key, &v, e))
            return ERR_NOTFOUND; /* a u64 beyond int64: not a usable number */
        snprintf(buf, cap, "%lld", (long long)v);
        return 0;
    }
    default:
        return ERR_NOTFOUND; /* bool, array: llama.cpp's text does not parse */
    }
}

int smp_params_apply_gguf(struct smp_params *p, const struct gguf *g, struct err *e)
{
    static const char *const names[] = {
        "sequence", "top_k", "top_p", "min_p", "xtc_probability", "xtc_threshold", "temp",
        "penalty_last_n", "penalty_repeat", "mirostat", "mirostat_tau", "mirostat_eta",
    };
    if (!p || !g)
        return err_set(e, ERR_INVALID, "smp_params_apply_gguf: NULL argument");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char key[64], text[512];
        snprintf(key, sizeof key, "general.sampling.%s", names[i]);
        int rc = gguf_value_text(g, key, text, sizeof text, e);
        if (rc == ERR_NOTFOUND)
            continue;
        if (rc)
            return rc;
        if (i == 0) {
            if (p->set_mask & SMP_SET_SEQUENCE)
                continue;
            /* llama.cpp splits the sequence on ';' only */
            rc = parse_sequence(p, text, ";", e);
            if (rc)
                return err_prefix(e, "%s", key);
            continue;
        }
        rc = smp_params_apply_model_value(p, names[i], text, e);
        if (rc == ERR_FORMAT)
            continue; /* llama.cpp ignores a value that does not parse */
        if (rc)
            return rc;
    }
    err_clear(e);
    return 0;
}

int smp_suppress_tokens_from_gguf(const struct gguf *g, int32_t n_vocab, int32_t **out, int32_t *n_out,
                                  struct err *e)
{
    *out = NULL;
    *n_out = 0;
    const struct gguf_kv *kv;
    int rc = gguf_get_arr(g, "tokenizer.ggml.suppress_tokens", GGUF_INT32, &kv, e);
    if (rc == ERR_NOTFOUND) {
        err_clear(e);
        return 0;
    }
    if (rc)
        return rc;
    if (kv->arr_n == 0)
        return 0;
    if (kv->arr_n > (uint64_t)INT32_MAX)
        return err_set(e, ERR_FORMAT, "tokenizer.ggml.suppress_tokens: %llu entries",
                       (unsigned long long)kv->arr_n);
    int32_t *ids = malloc((size_t)kv->arr_n * sizeof *ids);
    if (!ids)
        return err_set(e, ERR_NOMEM, "tokenizer.ggml.suppress_tokens: out of memory");
    int32_t n = 0;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        int64_t v = gguf_arr_i64(kv, i);
        if (v >= 0 && v < n_vocab) /* ids outside the vocabulary are dropped */
            ids[n++] = (int32_t)v;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

/* ------------------------------------------------------------ construction */

static bool in_chain(const struct smp_params *p, enum smp_type t)
{
    for (int32_t i = 0; i < p->n_samplers; i++)
        if (p->samplers[i] == t)
            return true;
    return false;
}

static uint32_t random_seed(void)
{
    uint32_t s;
    if (getrandom(&s, sizeof s, 0) == (ssize_t)sizeof s)
        return s;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec ^ ((uint32_t)getpid() << 16);
}

static int validate(const struct smp_params *p, int32_t n_vocab, struct err *e)
{
    if (n_vocab <= 0)
        return err_set(e, ERR_INVALID, "sampler: n_vocab %d must be positive", (int)n_vocab);
    const struct { const char *name; float v; } fl[] = {
        {"temperature", p->temp},           {"top_p", p->top_p},
        {"min_p", p->min_p},                {"typical_p", p->typical_p},
        {"repeat_penalty", p->repeat_penalty}, {"frequency_penalty", p->frequency_penalty},
        {"presence_penalty", p->presence_penalty},
    };
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++)
        if (!isfinite(fl[i].v))
            return err_set(e, ERR_INVALID, "sampler: %s is not a finite number", fl[i].name);
    if (p->repeat_penalty <= 0.0f || !isfinite(1.0f / p->repeat_penalty))
        return err_set(e, ERR_INVALID, "sampler: repeat_penalty %g must be greater than 0",
                       (double)p->repeat_penalty);
    if (p->repeat_last_n < -1)
        return err_set(e, ERR_INVALID, "sampler: repeat_last_n %d must be ≥ −1", (int)p->repeat_last_n);
    if (p->repeat_last_n == -1 && p->n_ctx <= 0)
        return err_set(e, ERR_INVALID, "sampler: repeat_last_n −1 needs the context size (n_ctx %d)",
                       (int)p->n_ctx);
    if (p->min_keep < 0)
        return err_set(e, ERR_INVALID, "sampler: min_keep %d must be ≥ 0", (int)p->min_keep);
    if (p->n_probs < 0)
        return err_set(e, ERR_INVALID, "sampler: n_probs %d must be ≥ 0", (int)p->n_probs);
    if (p->n_samplers < 0 || p->n_samplers > SMP_MAX_SAMPLERS)
        return err_set(e, ERR_INVALID, "sampler: %d samplers (0..%d allowed)", (int)p->n_samplers,
                       SMP_MAX_SAMPLERS);
    for (int32_t i = 0; i < p->n_samplers; i++)
        if ((unsigned)p->samplers[i] >= SMP_TYPE_COUNT)
            return err_set(e, ERR_INVALID, "sampler: unknown sampler type %d at position %d",
                           (int)p->samplers[i], (int)i);
    if (p->mirostat != 0)
        return err_set(e, ERR_UNSUPPORTED, "sampler: mirostat %d is not supported", (int)p->mirostat);
    if (in_chain(p, SMP_DRY) && p->dry_multiplier > 0.0f)
        return err_set(e, ERR_UNSUPPORTED, "sampler: dry (dry_multiplier %g) is not supported",
                       (double)p->dry_multiplier);
    if (in_chain(p, SMP_TOP_N_SIGMA) && p->top_n_sigma > 0.0f)
        return err_set(e, ERR_UNSUPPORTED, "sampler: top_n_sigma %g is not supported",
                       (double)p->top_n_sigma);
    if (in_chain(p, SMP_XTC) && p->xtc_probability > 0.0f && p->xtc_threshold <= 0.5f)
        return err_set(e, ERR_UNSUPPORTED, "sampler: xtc (probability %g) is not supported",
                       (double)p->xtc_probability);
    if (in_chain(p, SMP_TEMPERATURE) && p->dynatemp_range > 0.0f)
        return err_set(e, ERR_UNSUPPORTED, "sampler: dynamic temperature (range %g) is not supported",
                       (double)p->dynatemp_range);
    if ((p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias)) ||
        (p->ignore_eos && (p->n_eog_tokens < 0 || (p->n_eog_tokens > 0 && !p->eog_tokens))) ||
        (p->n_suppress_tokens < 0 || (p->n_suppress_tokens > 0 && !p->suppress_tokens)))
        return err_set(e, ERR_INVALID, "sampler: token list with a bad count or NULL array");
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        if (isnan(p->logit_bias[i].bias) || p->logit_bias[i].bias == INFINITY)
            return err_set(e, ERR_INVALID, "sampler: logit_bias for token %d is not a number or +inf",
                           (int)p->logit_bias[i].token);
    return 0;
}

struct smp_chain *smp_new(const struct smp_params *p, int32_t n_vocab, struct err *e)
{
    if (!p) {
        err_set(e, ERR_INVALID, "sampler: NULL params");
        return NULL;
    }
    if (validate(p, n_vocab, e))
        return NULL;
    struct smp_chain *c = calloc(1, sizeof *c);
    if (!c) {
        err_set(e, ERR_NOMEM, "sampler: out of memory");
        return NULL;
    }
    c->p = *p;
    c->p.logit_bias = NULL;
    c->p.eog_tokens = NULL;
    c->p.suppress_tokens = NULL;
    c->n_vocab = n_vocab;
    c->last_n = p->repeat_last_n == -1 ? p->n_ctx : p->repeat_last_n;

    int32_t nb = p->n_logit_bias + (p->ignore_eos ? p->n_eog_tokens : 0) + p->n_suppress_tokens;
    c->cur = malloc((size_t)n_vocab * sizeof *c->cur);
    c->tmp = malloc((size_t)n_vocab * sizeof *c->tmp);
    c->keys = malloc((size_t)n_vocab * sizeof *c->keys);
    c->counts = c->last_n > 0 ? calloc((size_t)n_vocab, sizeof *c->counts) : NULL;
    c->ring = c->last_n > 0 ? malloc((size_t)c->last_n * sizeof *c->ring) : NULL;
    c->bias = nb > 0 ? malloc((size_t)nb * sizeof *c->bias) : NULL;
    if (!c->cur || !c->tmp || !c->keys || (c->last_n > 0 && (!c->counts || !c->ring)) ||
        (nb > 0 && !c->bias)) {
        smp_free(c);
        err_set(e, ERR_NOMEM, "sampler: out of memory for a vocabulary of %d", (int)n_vocab);
        return NULL;
    }
    /* merged bias list (§2): request entries, ignore_eos, suppress_tokens;
     * ids outside the vocabulary are dropped */
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token >= 0 && p->logit_bias[i].token < n_vocab)
            c->bias[c->n_bias++] = p->logit_bias[i];
    if (p->ignore_eos)
        for (int32_t i = 0; i < p->n_eog_tokens; i++)
            if (p->eog_tokens[i] >= 0 && p->eog_tokens[i] < n_vocab)
                c->bias[c->n_bias++] = (struct smp_bias){p->eog_tokens[i], -INFINITY};
    for (int32_t i = 0; i < p->n_suppress_tokens; i++)
        if (p->suppress_tokens[i] >= 0 && p->suppress_tokens[i] < n_vocab)
            c->bias[c->n_bias++] = (struct smp_bias){p->suppress_tokens[i], -INFINITY};

    c->seed = p->seed == SMP_DEFAULT_SEED ? random_seed() : p->seed;
    smp_reset(c);
    return c;
}

void smp_free(struct smp_chain *c)
{
    if (!c)
        return;
    free(c->cur);
    free(c->tmp);
    free(c->keys);
    free(c->counts);
    free(c->ring);
    free(c->bias);
    free(c);
}
