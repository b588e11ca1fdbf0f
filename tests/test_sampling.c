/* test_sampling.c — the sampler chain against shared/spec/sampling.md.
 *
 * Expected values come from the spec: its RNG check values (§4), its worked
 * example (§5), and small hand-built cases whose results were derived from
 * the sampler definitions in §3 (the arithmetic is written next to each). */
#include <math.h>
#include <stdint.h>

#include "../worker/gguf/gguf.h"
#include "../worker/gguf/gguf_write.h"
#include "../worker/serve/sampling.h"
#include "check.h"

/* A chain with only the given samplers between logit-bias and dist. */
static struct smp_params only(int n, const enum smp_type *t)
{
    struct smp_params p = smp_params_default();
    p.n_samplers = n;
    for (int i = 0; i < n; i++)
        p.samplers[i] = t[i];
    p.seed = 42;
    return p;
}

/* Run one sample; return the survivors' ids (list order) in ids[]. */
static int run_ids(const struct smp_params *p, const float *logits, int n_vocab, int32_t *ids,
                   int32_t *tok, const struct smp_cand **cand_out)
{
    struct err e;
    struct smp_chain *c = smp_new(p, n_vocab, &e);
    if (!c) {
        printf("#   smp_new: %s\n", e.msg);
        return -1;
    }
    int32_t t = smp_sample(c, logits);
    if (tok)
        *tok = t;
    const struct smp_cand *cand;
    int n = smp_candidates(c, &cand, NULL);
    for (int i = 0; i < n; i++)
        ids[i] = cand[i].id;
    static struct smp_cand keep[64];
    if (cand_out) {
        for (int i = 0; i < n && i < 64; i++)
            keep[i] = cand[i];
        *cand_out = keep;
    }
    smp_free(c);
    return n;
}

#define CHECK_IDS(n, ids, ...)                                                      \
    do {                                                                            \
        const int32_t want_[] = {__VA_ARGS__};                                      \
        int nw_ = (int)(sizeof want_ / sizeof want_[0]);                            \
        CHECK_EQ_INT(n, nw_);                                                       \
        for (int i_ = 0; i_ < nw_ && i_ < (n); i_++)                                \
            CHECK((ids)[i_] == want_[i_], "position %d: id %d, want %d", i_,        \
                  (int)(ids)[i_], (int)want_[i_]);                                  \
    } while (0)

/* ---------------------------------------------------------------- §4 RNG */

static void rng_reference_values(void)
{
    struct err e;
    struct smp_params p = smp_params_default();
    p.seed = 5489;
    struct smp_chain *c = smp_new(&p, 4, &e);
    CHECK(c != NULL, "%s", e.msg);
    if (!c)
        return;
    CHECK_EQ_INT(smp_rng_next_u32(c), 3499211612u);
    /* C++ [rand.predef]: the 10000th output of a default mt19937 is 4123659995 */
    for (int i = 2; i < 10000; i++)
        smp_rng_next_u32(c);
    CHECK_EQ_INT(smp_rng_next_u32(c), 4123659995u);
    smp_free(c);

    p.seed = 42;
    c = smp_new(&p, 4, &e);
    CHECK_EQ_INT(smp_rng_next_u32(c), 1608637542u);
    CHECK_EQ_INT(smp_rng_next_u32(c), 3421126067u);
    smp_reset(c); /* same seed again */
    CHECK_NEAR(smp_rng_uniform(c), 0.796542984287846, 1e-15);
    CHECK_EQ_INT(smp_seed(c), 42);
    smp_free(c);

    /* the seeds of the worked example's "other seeds" line */
    const uint32_t seeds[] = {1, 2, 1234};
    const double u[] = {0.997185, 0.185082, 0.497664};
    for (int i = 0; i < 3; i++) {
        p.seed = seeds[i];
        c = smp_new(&p, 4, &e);
        CHECK_NEAR(smp_rng_uniform(c), u[i], 5e-7);
        smp_free(c);
    }
}

/* ---------------------------------------------------------------- §5 */

static const float ex_logits[6] = {2.0f, 1.0f, 0.5f, 3.0f, -1.0f, 0.0f};

static void worked_example(void)
{
    struct smp_params p = smp_params_default();
    p.top_k = 3;
    const uint32_t seeds[] = {42, 1, 2, 1234};
    const int32_t want[] = {0, 1, 3, 3};
    for (int i = 0; i < 4; i++) {
        p.seed = seeds[i];
        int32_t ids[6], tok;
        const struct smp_cand *cand;
        int n = run_ids(&p, ex_logits, 6, ids, &tok, &cand);
        CHECK(tok == want[i], "seed %u: token %d, want %d", seeds[i], (int)tok, (int)want[i]);
        CHECK_IDS(n, ids, 3, 0, 1);
        if (n == 3) {
            /* temp 0.8 → 3.75, 2.5, 1.25 */
            CHECK_NEAR(cand[0].logit, 3.75, 1e-6);
            CHECK_NEAR(cand[1].logit, 2.5, 1e-6);
            CHECK_NEAR(cand[2].logit, 1.25, 1e-6);
            CHECK_NEAR(cand[0].p, 0.73068, 1e-5);
            CHECK_NEAR(cand[1].p, 0.20934, 1e-5);
            CHECK_NEAR(cand[2].p, 0.05998, 1e-5);
        }
    }
}

static void worked_example_greedy(void)
{
    struct err e;
    struct smp_params p = smp_params_default();
    p.top_k = 3;
    p.temp = 0.0f;
    for (uint32_t seed = 0; seed < 50; seed++) {
        p.seed = seed;
        struct smp_chain *c = smp_new(&p, 6, &e);
        CHECK_EQ_INT(smp_sample(c, ex_logits), 3);
        /* exactly one draw (two MT outputs) was consumed */
        double next = smp_rng_uniform(c);
        struct smp_chain *r = smp_new(&p, 6, &e);
        smp_rng_uniform(r);
        CHECK(next == smp_rng_uniform(r), "seed %u: greedy did not consume one draw", seed);
        smp_free(r);
        smp_free(c);
    }
    /* temp < 0 is greedy too */
    p.temp = -1.0f;
    int32_t ids[6], tok;
    run_ids(&p, ex_logits, 6, ids, &tok, NULL);
    CHECK_EQ_INT(tok, 3);
}

/* The default chain with the default top_k 40 on the same logits:
 * top_k → [3,0,1,2,5,4]; top_p: p = .6048 .2225 .0819 .0496 .0301 .0111,
 * cumulative .6048 .8273 .9092 .9588 ≥ .95 → keep 4; min_p threshold
 * 0.004268 keeps all 4; temp 0.8 → p .70795 .20283 .05811 .03111,
 * cumulative .70795 .91078 .96889 1. */
static void default_chain(void)
{
    struct smp_params p = smp_params_default();
    const uint32_t seeds[] = {42, 1, 2, 1234};
    const int32_t want[] = {0, 2, 3, 3}; /* u = .7965 .9972 .1851 .4977 */
    for (int i = 0; i < 4; i++) {
        p.seed = seeds[i];
        int32_t ids[6], tok;
        const struct smp_cand *cand;
        int n = run_ids(&p, ex_logits, 6, ids, &tok, &cand);
        CHECK(tok == want[i], "seed %u: token %d, want %d", seeds[i], (int)tok, (int)want[i]);
        CHECK_IDS(n, ids, 3, 0, 1, 2);
        if (n == 4) {
            CHECK_NEAR(cand[0].p, 0.707951, 1e-5);
            CHECK_NEAR(cand[3].p, 0.031105, 1e-5);
        }
    }
}

static void defaults(void)
{
    struct smp_params p = smp_params_default();
    CHECK_NEAR(p.temp, 0.80, 1e-7);
    CHECK_EQ_INT(p.top_k, 40);
    CHECK_NEAR(p.top_p, 0.95, 1e-7);
    CHECK_NEAR(p.min_p, 0.05, 1e-7);
    CHECK_NEAR(p.typical_p, 1.0, 0);
    CHECK_NEAR(p.repeat_penalty, 1.0, 0);
    CHECK_EQ_INT(p.repeat_last_n, 64);
    CHECK_NEAR(p.frequency_penalty, 0, 0);
    CHECK_NEAR(p.presence_penalty, 0, 0);
    CHECK_NEAR(p.dry_multiplier, 0, 0);
    CHECK(p.top_n_sigma <= 0, "top_n_sigma %g", (double)p.top_n_sigma);
    CHECK_NEAR(p.xtc_probability, 0, 0);
    CHECK_EQ_INT(p.min_keep, 0);
    CHECK_EQ_INT(p.seed, 0xFFFFFFFFu);
    CHECK_EQ_INT(p.n_probs, 0);
    CHECK_EQ_INT(p.mirostat, 0);
    const enum smp_type order[] = {SMP_PENALTIES, SMP_DRY, SMP_TOP_N_SIGMA, SMP_TOP_K, SMP_TYPICAL_P,
                                   SMP_TOP_P, SMP_MIN_P, SMP_XTC, SMP_TEMPERATURE};
    CHECK_EQ_INT(p.n_samplers, 9);
    for (int i = 0; i < 9 && i < p.n_samplers; i++)
        CHECK(p.samplers[i] == order[i], "position %d is %s", i, smp_type_name(p.samplers[i]));
    /* a random seed is drawn when asked for (two chains almost surely differ) */
    struct err e;
    struct smp_chain *a = smp_new(&p, 4, &e), *b = smp_new(&p, 4, &e);
    CHECK(smp_seed(a) != smp_seed(b) || smp_rng_next_u32(a) != smp_rng_next_u32(b) ||
              smp_rng_next_u32(a) != smp_rng_next_u32(b),
          "two random-seeded chains agree");
    smp_free(a);
    smp_free(b);
}

/* ---------------------------------------------------------------- §3 samplers */

static void top_k_small(void)
{
    const enum smp_type t[] = {SMP_TOP_K};
    struct smp_params p = only(1, t);
    const float l[5] = {0.5f, 2.0f, -1.0f, 3.0f, 1.0f};
    int32_t ids[5];
    const struct smp_cand *cand;
    p.top_k = 2;
    int n = run_ids(&p, l, 5, ids, NULL, &cand);
    CHECK_IDS(n, ids, 3, 1);
    if (n == 2) /* dist normalizes: 1/(1+e^-1) */
        CHECK_NEAR(cand[0].p, 0.7310586, 1e-6);
    p.top_k = 99; /* clamped to the size, still sorted */
    n = run_ids(&p, l, 5, ids, NULL, NULL);
    CHECK_IDS(n, ids, 3, 1, 4, 0, 2);
    p.top_k = 0; /* off: whole vocabulary in id order */
    n = run_ids(&p, l, 5, ids, NULL, NULL);
    CHECK_IDS(n, ids, 0, 1, 2, 3, 4);
}

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* top_k on a Qwen-sized vocabulary: the survivors are the k largest logits,
 * descending (reference: qsort of a copy). */
static void top_k_large_vocab(void)
{
    enum { N = 151936 };
    static float l[N], sorted[N];
    uint32_t s = 7;
    for (int i = 0; i < N; i++)
        l[i] = sorted[i] = (float)(lcg(&s) % 1000000) / 1000.0f - 500.0f;
    qsort(sorted, N, sizeof sorted[0], cmp_desc);
    const enum smp_type t[] = {SMP_TOP_K};
    struct smp_params p = only(1, t);
    struct err e;
    const int ks[] = {1, 40, 1000};
    for (int ki = 0; ki < 3; ki++) {
        p.top_k = ks[ki];
        struct smp_chain *c = smp_new(&p, N, &e);
        smp_sample(c, l);
        const struct smp_cand *cand;
        int n = smp_candidates(c, &cand, NULL);
        CHECK_EQ_INT(n, ks[ki]);
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += cand[i].logit != sorted[i] || l[cand[i].id] != cand[i].logit;
        CHECK(bad == 0, "k=%d: %d survivors out of place", ks[ki], bad);
        smp_free(c);
    }
}

struct id_logit { int id; float l; };

/* descending logit, ties by ascending id */
static int cmp_id_logit(const void *a, const void *b)
{
    const struct id_logit *x = a, *y = b;
    if (x->l != y->l)
        return (x->l < y->l) - (x->l > y->l);
    return (x->id > y->id) - (x->id < y->id);
}

/* top_k on logit shapes that stress a selection: ascending ids (each later
 * logit beats the heap), descending, heavy ties, masked (−inf) entries, one
 * outlier above a flat field, values a few ulps apart; lengths whole
 * vectors do not divide too. The survivors must be the k first in (logit
 * desc, id asc) order (reference: qsort of a copy). */
static void top_k_shapes(void)
{
    enum { N = 40000 };
    static float l[N];
    static struct id_logit ref[N];
    const enum smp_type t[] = {SMP_TOP_K};
    struct smp_params p = only(1, t);
    struct err e;
    const int sizes[] = {509, 512, 4997, N - 3}; /* the longest takes the sampled cut */
    const int ks[] = {2, 40, 100};
    uint32_t s = 11;
    for (int shape = 0; shape < 7; shape++)
        for (int si = 0; si < 4; si++)
            for (int ki = 0; ki < 3; ki++) {
                int n = sizes[si];
                for (int i = 0; i < n; i++) {
                    float r = (float)(lcg(&s) % 100000) / 1000.0f;
                    switch (shape) {
                    case 0: l[i] = (float)i * 0.01f; break;             /* ascending */
                    case 1: l[i] = -(float)i * 0.01f; break;            /* descending */
                    case 2: l[i] = (float)(lcg(&s) % 7); break;         /* seven values, many ties */
                    case 3: l[i] = i % 3 ? -INFINITY : r; break;        /* two thirds masked */
                    case 4: l[i] = i == n / 2 ? 1000.0f : r * 1e-3f; break; /* one outlier */
                    case 5: l[i] = 1.0f + (float)(lcg(&s) % 64) * 1.2e-7f; break; /* ulps apart */
                    default: l[i] = r - 50.0f; break;                   /* random */
                    }
                    ref[i] = (struct id_logit){i, l[i]};
                }
                qsort(ref, (size_t)n, sizeof ref[0], cmp_id_logit);
                p.top_k = ks[ki];
                struct smp_chain *c = smp_new(&p, n, &e);
                smp_sample(c, l);
                const struct smp_cand *cand;
                int m = smp_candidates(c, &cand, NULL);
                CHECK_EQ_INT(m, ks[ki]);
                int bad = 0;
                for (int i = 0; i < m; i++)
                    bad += cand[i].id != ref[i].id || cand[i].logit != ref[i].l;
                CHECK(bad == 0, "shape %d n=%d k=%d: %d survivors out of place", shape, n, ks[ki], bad);
                smp_free(c);
            }
}

/* Two chains drew the same token and were left with the same candidates (ids, logits, p). */
static bool same_draw(struct smp_chain *a, int32_t ta, struct smp_chain *b, int32_t tb)
{
    const struct smp_cand *xa, *xb;
    int na = smp_candidates(a, &xa, NULL), nb = smp_candidates(b, &xb, NULL);
    bool same = ta == tb && na == nb;
    for (int i = 0; same && i < na; i++)
        same = xa[i].id == xb[i].id && xa[i].logit == xb[i].logit && xa[i].p == xb[i].p;
    return same;
}

/* top-k starts from the logits row when nothing before it edits the list
 * (no logit bias, penalties off); with a bias entry of +0 the whole list is
 * written first, as every other chain does. Both must pick the same tokens
 * with the same survivors: the default chain over rows with NaN, −inf, ties
 * and a flat stretch, 511, 512 and 20000 tokens, 300 draws each. */
static void row_path_equals_list_path(void)
{
    enum { N = 20000 };
    static float l[N];
    const struct smp_bias zero = {5, 0.0f};
    struct err e;
    uint32_t s = 5;
    int differ = 0, draws = 0;
    const int sizes[] = {511, 512, N};
    for (int si = 0; si < 3; si++) {
        int n = sizes[si];
        struct smp_params a = smp_params_default(), b = smp_params_default();
        a.seed = b.seed = 9;
        b.logit_bias = &zero;
        b.n_logit_bias = 1;
        struct smp_chain *ca = smp_new(&a, n, &e), *cb = smp_new(&b, n, &e);
        CHECK(ca && cb, "chains");
        for (int d = 0; ca && cb && d < 300; d++) {
            for (int i = 0; i < n; i++) {
                uint32_t r = lcg(&s);
                l[i] = r % 97 == 0 ? NAN : r % 89 == 0 ? -INFINITY : r % 5 == 0 ? 3.0f
                                                                      : (float)(r % 100000) / 5000.0f - 10.0f;
            }
            int32_t ta = smp_sample(ca, l), tb = smp_sample(cb, l);
            differ += !same_draw(ca, ta, cb, tb);
            draws++;
            smp_accept(ca, ta);
            smp_accept(cb, tb);
        }
        smp_free(ca);
        smp_free(cb);
    }
    CHECK(differ == 0 && draws == 900, "%d of %d draws differ", differ, draws);
}

/* smp_topk_only of a 512-token chain made with p (−1 when it cannot be made). */
static int32_t topk_only_of(const struct smp_params *p)
{
    struct err e;
    struct smp_chain *c = smp_new(p, 512, &e);
    int32_t k = c ? smp_topk_only(c) : -1;
    smp_free(c);
    return k;
}

/* A chain whose first working sampler is top-k draws the same from a
 * pre-selection of the row (smp_sample_cands: what a GPU hands back) as from
 * the row: candidates = every logit at or above the (k + extra)-th largest,
 * ties included, shuffled; rows with NaN, −inf and ties; the default chain,
 * greedy, top-k 1 and 100; 512 and 20000 tokens, 200 draws each. And which
 * chains qualify (smp_topk_only). */
static void sample_cands_equals_row(void)
{
    enum { N = 20000 };
    static float l[N];
    static struct id_logit ref[N];
    static int32_t ids[N];
    static float vals[N];
    struct err e;
    uint32_t s = 17;
    int differ = 0, draws = 0;
    const int sizes[] = {512, N};
    for (int si = 0; si < 2; si++)
        for (int variant = 0; variant < 4; variant++) {
            int n = sizes[si];
            struct smp_params p = smp_params_default();
            p.seed = 21;
            if (variant == 1)
                p.temp = 0.0f;
            if (variant == 2)
                p.top_k = 1;
            if (variant == 3)
                p.top_k = 100;
            struct smp_chain *a = smp_new(&p, n, &e), *b = smp_new(&p, n, &e);
            CHECK(a && b, "chains");
            int32_t k = a ? smp_topk_only(a) : 0;
            CHECK_EQ_INT(k, p.top_k);
            for (int d = 0; a && b && k > 0 && d < 200; d++) {
                for (int i = 0; i < n; i++) {
                    uint32_t r = lcg(&s);
                    l[i] = r % 101 == 0 ? NAN : r % 83 == 0 ? -INFINITY : r % 7 == 0 ? 2.5f
                                                                         : (float)(r % 100000) / 6000.0f - 8.0f;
                    ref[i] = (struct id_logit){i, isnan(l[i]) ? -INFINITY : l[i]};
                }
                qsort(ref, (size_t)n, sizeof ref[0], cmp_id_logit);
                const float t = ref[k - 1 + (int)(lcg(&s) % 50)].l;
                int32_t m = 0;
                for (int i = 0; i < n; i++)
                    if (l[i] >= t) {
                        ids[m] = i;
                        vals[m++] = l[i];
                    }
                for (int32_t i = m - 1; i > 0; i--) { /* any order */
                    int32_t j = (int32_t)(lcg(&s) % (uint32_t)(i + 1)), ti = ids[i];
                    float tv = vals[i];
                    ids[i] = ids[j], vals[i] = vals[j];
                    ids[j] = ti, vals[j] = tv;
                }
                int32_t ta = smp_sample(a, l), tb = smp_sample_cands(b, ids, vals, m);
                differ += !same_draw(a, ta, b, tb);
                draws++;
                smp_accept(a, ta);
                smp_accept(b, tb);
            }
            smp_free(a);
            smp_free(b);
        }
    CHECK(differ == 0 && draws == 1600, "%d of %d draws differ", differ, draws);
    /* chains that look at the whole row before (or instead of) top-k */
    struct smp_params p = smp_params_default();
    const struct smp_bias bias = {3, 1.0f};
    p.logit_bias = &bias;
    p.n_logit_bias = 1;
    CHECK_EQ_INT(topk_only_of(&p), 0); /* a logit bias edits the row first */
    p = smp_params_default();
    p.repeat_penalty = 1.1f;
    CHECK_EQ_INT(topk_only_of(&p), 0); /* penalties edit the row first */
    p = smp_params_default();
    CHECK_EQ_INT(smp_params_set_sequence(&p, "top_p;top_k;temperature", &e), 0);
    CHECK_EQ_INT(topk_only_of(&p), 0); /* top-p before top-k */
    p = smp_params_default();
    p.top_k = 0;
    struct smp_chain *c = smp_new(&p, 512, &e);
    CHECK(c && smp_topk_only(c) == 0, "top-k off");
    CHECK(c && smp_sample_cands(c, ids, vals, 10) == ERR_INVALID, "refused for a chain that needs the row");
    smp_free(c);
    p = smp_params_default();
    c = smp_new(&p, 512, &e);
    CHECK(c && smp_sample_cands(c, ids, vals, 10) == ERR_INVALID, "refused with fewer than k candidates");
    smp_free(c);
}

/* logits 0,1,2,3 → p = .03206 .08714 .23688 .64391 */
static void top_p_small(void)
{
    const enum smp_type t[] = {SMP_TOP_P};
    struct smp_params p = only(1, t);
    const float l[4] = {0.0f, 1.0f, 2.0f, 3.0f};
    int32_t ids[4];
    p.top_p = 0.8f; /* cum .6439, .8808 ≥ .8 */
    int n = run_ids(&p, l, 4, ids, NULL, NULL);
    CHECK_IDS(n, ids, 3, 2);
    p.top_p = 0.9f; /* .8808 < .9, .9679 ≥ .9 */
    n = run_ids(&p, l, 4, ids, NULL, NULL);
    CHECK_IDS(n, ids, 3, 2, 1);
    p.top_p = 0.5f; /* first token alone reaches it ... */
    n = run_ids(&p, l, 4, ids, NULL, NULL);
    CHECK_IDS(n, ids, 3);
    p.min_keep = 3; /* ... but min_keep 3 keeps three */
    n = run_ids(&p, l, 4, ids, NULL, NULL);
    CHECK_IDS(n, ids, 3, 2, 1);
    p.min_keep = 0;
    p.top_p = 1.0f; /* off: id order untouched */
    n = run_ids(&p, l, 4, ids, NULL, NULL);
    CHECK_IDS(n, ids, 0, 1, 2, 3);
}

/* A list > 1024 entries whose top_p cut lies beyond the first 256: the
 * result must be the spec's rule applied to the fully sorted list (float
 * softmax summed in id order, float cumulative sum in sorted order). */
static void top_p_large_cut(void)
{
    enum { N = 3000 };
    static float l[N], ref[N];
    uint32_t s = 11;
    for (int i = 0; i < N; i++)
        l[i] = (float)(lcg(&s) % 1000) / 1000.0f; /* flat: the mass is spread wide */
    float max = l[0];
    for (int i = 1; i < N; i++)
        max = l[i] > max ? l[i] : max;
    float sum = 0.0f;
    for (int i = 0; i < N; i++)
        sum += expf(l[i] - max);
    for (int i = 0; i < N; i++)
        ref[i] = l[i];
    qsort(ref, N, sizeof ref[0], cmp_desc);
    float cum = 0.0f;
    int want = N;
    for (int i = 0; i < N; i++) {
        cum += expf(ref[i] - max) / sum;
        if (cum >= 0.7f) {
            want = i + 1;
            break;
        }
    }
    CHECK(want > 256, "test setup: cut at %d", want);
    const enum smp_type t[] = {SMP_TOP_P};
    struct smp_params p = only(1, t);
    p.top_p = 0.7f;
    struct err e;
    struct smp_chain *c = smp_new(&p, N, &e);
    smp_sample(c, l);
    const struct smp_cand *cand;
    int n = smp_candidates(c, &cand, NULL);
    CHECK_EQ_INT(n, want);
    int bad = 0;
    for (int i = 0; i < n && i < want; i++)
        bad += cand[i].logit != ref[i];
    CHECK_EQ_INT(bad, 0);
    smp_free(c);
}

/* min_p 0.3 on logits 0,1,2,3: min_logit = 3 + ln 0.3 = 1.79603 */
static void min_p_small(void)
{
    const enum smp_type t1[] = {SMP_MIN_P};
    struct smp_params p = only(1, t1);
    const float l[4] = {0.0f, 1.0f, 2.0f, 3.0f};
    int32_t ids[4];
    p.min_p = 0.3f;
    int n = run_ids(&p, l, 4, ids, NULL, NULL); /* unsorted: kept in id order */
    CHECK_IDS(n, ids, 2, 3);
    p.min_keep = 3; /* unsorted path fails (2 < 3) → sorted prefix: stop at i=3 */
    n = run_ids(&p, l, 4, ids, NULL, NULL);
    CHECK_IDS(n, ids, 3, 2, 1);
    p.min_keep = 0;
    const enum smp_type t2[] = {SMP_TOP_K, SMP_MIN_P}; /* sorted list path */
    struct smp_params q = only(2, t2);
    q.top_k = 4;
    q.min_p = 0.3f;
    n = run_ids(&q, l, 4, ids, NULL, NULL);
    CHECK_IDS(n, ids, 3, 2);
    p.min_p = 0.0f; /* off */
    n = run_ids(&p, l, 4, ids, NULL, NULL);
    CHECK_IDS(n, ids, 0, 1, 2, 3);
    /* min_p 1: only the maximum (and its exact ties) survive */
    p.min_p = 1.0f;
    const float l2[4] = {1.0f, 3.0f, 3.0f, 2.0f};
    n = run_ids(&p, l2, 4, ids, NULL, NULL);
    CHECK_IDS(n, ids, 1, 2);
}

/* p = .5 .3 .2 → H = 1.029653; scores |−ln p − H| = .33651 .17432 .57978
 * → score order id1, id0, id2 with cumulative p .3, .8, 1.0 */
static void typical_p_small(void)
{
    const enum smp_type t[] = {SMP_TYPICAL_P};
    struct smp_params p = only(1, t);
    const float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    int32_t ids[3];
    p.typical_p = 0.5f;
    int n = run_ids(&p, l, 3, ids, NULL, NULL);
    CHECK_IDS(n, ids, 1, 0);
    p.typical_p = 0.2f; /* .3 > .2 at once */
    n = run_ids(&p, l, 3, ids, NULL, NULL);
    CHECK_IDS(n, ids, 1);
    p.min_keep = 2;
    n = run_ids(&p, l, 3, ids, NULL, NULL);
    CHECK_IDS(n, ids, 1, 0);
    p.min_keep = 0;
    p.typical_p = 0.3f; /* strict: .3 is not > .3 → two */
    n = run_ids(&p, l, 3, ids, NULL, NULL);
    CHECK_IDS(n, ids, 1, 0);
    p.typical_p = 1.0f; /* off */
    n = run_ids(&p, l, 3, ids, NULL, NULL);
    CHECK_IDS(n, ids, 0, 1, 2);
}

/* typical_p on 5000 distinct logits against the §3.4 rule written out here
 * (qsort by logit, float softmax summed in sorted order, float entropy,
 * scores ascending, strict cumulative cut). */
struct ref_tok {
    int id;
    float logit, p, score;
};
static int ref_by_logit(const void *a, const void *b)
{
    const struct ref_tok *x = a, *y = b;
    return (x->logit < y->logit) - (x->logit > y->logit);
}
static int ref_by_score(const void *a, const void *b)
{
    const struct ref_tok *x = a, *y = b;
    return (x->score > y->score) - (x->score < y->score);
}

static void typical_p_large(void)
{
    enum { N = 5000 };
    static float l[N];
    static struct ref_tok ref[N];
    uint32_t s = 21;
    for (int i = 0; i < N; i++) {
        l[i] = (float)i * 0.0013f - (float)(lcg(&s) % 1000) * 0.004f; /* distinct enough */
        ref[i].id = i;
        ref[i].logit = l[i];
    }
    qsort(ref, N, sizeof ref[0], ref_by_logit);
    float sum = 0.0f;
    for (int i = 0; i < N; i++)
        sum += (ref[i].p = expf(ref[i].logit - ref[0].logit));
    float ent = 0.0f;
    for (int i = 0; i < N; i++) {
        ref[i].p /= sum;
        ent += -ref[i].p * logf(ref[i].p);
    }
    for (int i = 0; i < N; i++)
        ref[i].score = fabsf(-logf(ref[i].p) - ent);
    qsort(ref, N, sizeof ref[0], ref_by_score);
    float cum = 0.0f;
    int want = N;
    for (int i = 0; i < N; i++) {
        cum += ref[i].p;
        if (cum > 0.6f) {
            want = i + 1;
            break;
        }
    }
    CHECK(want > 100 && want < N, "test setup: cut at %d", want);
    const enum smp_type t[] = {SMP_TYPICAL_P};
    struct smp_params p = only(1, t);
    p.typical_p = 0.6f;
    struct err e;
    struct smp_chain *c = smp_new(&p, N, &e);
    smp_sample(c, l);
    const struct smp_cand *cand;
    int n = smp_candidates(c, &cand, NULL);
    CHECK_EQ_INT(n, want);
    int bad = 0;
    for (int i = 0; i < n && i < want; i++)
        bad += cand[i].id != ref[i].id;
    CHECK_EQ_INT(bad, 0);
    smp_free(c);
}

static void temperature(void)
{
    const enum smp_type t[] = {SMP_TEMPERATURE};
    struct smp_params p = only(1, t);
    const float l[2] = {1.0f, 2.0f};
    int32_t ids[4];
    const struct smp_cand *cand;
    p.temp = 0.5f; /* logits 2, 4 → p = 1/(1+e^2), e^2/(1+e^2) */
    int n = run_ids(&p, l, 2, ids, NULL, &cand);
    CHECK_IDS(n, ids, 0, 1);
    if (n == 2) {
        CHECK_NEAR(cand[0].logit, 2.0, 1e-6);
        CHECK_NEAR(cand[1].p, 0.8807971, 1e-6);
    }
    /* greedy: first maximum wins, the rest become −inf, size unchanged */
    p.temp = 0.0f;
    const float l2[4] = {1.0f, 3.0f, 3.0f, 2.0f};
    int32_t tok;
    n = run_ids(&p, l2, 4, ids, &tok, &cand);
    CHECK_EQ_INT(tok, 1);
    CHECK_EQ_INT(n, 4);
    if (n == 4) {
        CHECK(isinf(cand[0].logit) && cand[0].logit < 0, "id0 logit %g", (double)cand[0].logit);
        CHECK(isinf(cand[2].logit) && cand[2].logit < 0, "id2 logit %g", (double)cand[2].logit);
        CHECK_NEAR(cand[1].p, 1.0, 0);
        CHECK_NEAR(cand[2].p, 0.0, 0);
    }
}

/* temp 0 with the default chain = argmax of the raw logits, any seed. */
static void temp0_is_argmax(void)
{
    enum { N = 50000 };
    static float l[N];
    struct err e;
    struct smp_params p = smp_params_default();
    p.temp = 0.0f;
    uint32_t s = 3;
    for (int round = 0; round < 20; round++) {
        int best = 0;
        for (int i = 0; i < N; i++) {
            l[i] = (float)(lcg(&s) % 100000) / 997.0f;
            if (l[i] > l[best])
                best = i;
        }
        p.seed = (uint32_t)round;
        struct smp_chain *c = smp_new(&p, N, &e);
        int32_t tok = smp_sample(c, l);
        CHECK(tok == best, "round %d: %d, want %d", round, (int)tok, best);
        smp_free(c);
    }
}

/* History 1, 2, 2; logits 1, 2, −1, 0.5; repeat 2, freq 0.5, presence 0.25:
 * id1 (c=1): 2/2 − (0.5 + 0.25) = 0.25; id2 (c=2): −1·2 − (1 + 0.25) = −3.25. */
static void penalties(void)
{
    const enum smp_type t[] = {SMP_PENALTIES};
    struct smp_params p = only(1, t);
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    const float l[4] = {1.0f, 2.0f, -1.0f, 0.5f};
    struct err e;
    struct smp_chain *c = smp_new(&p, 4, &e);
    CHECK(c != NULL, "%s", e.msg);
    if (!c)
        return;
    CHECK_EQ_INT(smp_accept(c, 1), 0);
    smp_accept(c, 2);
    smp_accept(c, 2);
    CHECK_EQ_INT(smp_accept(c, 4), ERR_RANGE);
    CHECK_EQ_INT(smp_accept(c, -1), ERR_RANGE);
    smp_sample(c, l);
    const struct smp_cand *cand;
    int n = smp_candidates(c, &cand, NULL);
    CHECK_EQ_INT(n, 4);
    CHECK_NEAR(cand[0].logit, 1.0, 0);
    CHECK_NEAR(cand[1].logit, 0.25, 1e-6);
    CHECK_NEAR(cand[2].logit, -3.25, 1e-6);
    CHECK_NEAR(cand[3].logit, 0.5, 0);
    /* reset empties the window */
    smp_reset(c);
    smp_sample(c, l);
    n = smp_candidates(c, &cand, NULL);
    CHECK_NEAR(cand[1].logit, 2.0, 0);
    CHECK_NEAR(cand[2].logit, -1.0, 0);
    smp_free(c);

    /* window of 2: after 1, 2, 2 only the two 2s count; after one more 3
     * the window is (2, 3) */
    p.repeat_last_n = 2;
    c = smp_new(&p, 4, &e);
    smp_accept(c, 1);
    smp_accept(c, 2);
    smp_accept(c, 2);
    smp_sample(c, l);
    n = smp_candidates(c, &cand, NULL);
    CHECK_NEAR(cand[1].logit, 2.0, 0);
    CHECK_NEAR(cand[2].logit, -3.25, 1e-6);
    smp_accept(c, 3); /* 0.5/2 − 0.75 = −0.5; id2 now c=1: −2 − 0.75 */
    smp_sample(c, l);
    n = smp_candidates(c, &cand, NULL);
    CHECK_NEAR(cand[2].logit, -2.75, 1e-6);
    CHECK_NEAR(cand[3].logit, -0.5, 1e-6);
    smp_free(c);

    /* last_n 0 → off; last_n −1 → the context size */
    p.repeat_last_n = 0;
    c = smp_new(&p, 4, &e);
    smp_accept(c, 1);
    smp_sample(c, l);
    n = smp_candidates(c, &cand, NULL);
    CHECK_NEAR(cand[1].logit, 2.0, 0);
    smp_free(c);
    p.repeat_last_n = -1;
    CHECK(smp_new(&p, 4, &e) == NULL, "last_n −1 without n_ctx accepted");
    p.n_ctx = 3;
    c = smp_new(&p, 4, &e);
    smp_accept(c, 1);
    smp_accept(c, 0);
    smp_accept(c, 0);
    smp_accept(c, 0); /* window of 3: id1 left */
    smp_sample(c, l);
    n = smp_candidates(c, &cand, NULL);
    CHECK_NEAR(cand[1].logit, 2.0, 0);
    smp_free(c);
}

static void logit_bias(void)
{
    struct smp_params p = only(0, NULL);
    const struct smp_bias b[] = {{0, 1.0f}, {0, 0.5f}, {2, -INFINITY}, {99, 5.0f}, {-3, 1.0f}};
    p.logit_bias = b;
    p.n_logit_bias = 5;
    const float l[4] = {1.0f, 2.0f, 10.0f, 0.5f};
    struct err e;
    struct smp_chain *c = smp_new(&p, 4, &e);
    CHECK(c != NULL, "%s", e.msg);
    if (!c)
        return;
    int picked2 = 0;
    for (int i = 0; i < 500; i++)
        picked2 += smp_sample(c, l) == 2;
    CHECK_EQ_INT(picked2, 0);
    const struct smp_cand *cand;
    smp_candidates(c, &cand, NULL);
    CHECK_NEAR(cand[0].logit, 2.5, 0); /* duplicates add up */
    CHECK_NEAR(cand[1].logit, 2.0, 0);
    CHECK(isinf(cand[2].logit), "id2 %g", (double)cand[2].logit);
    CHECK_NEAR(cand[2].p, 0.0, 0);
    smp_free(c);

    /* ignore_eos and suppress_tokens add −inf entries */
    const int32_t eog[] = {1}, sup[] = {0, 77};
    p.n_logit_bias = 0;
    p.ignore_eos = true;
    p.eog_tokens = eog;
    p.n_eog_tokens = 1;
    p.suppress_tokens = sup;
    p.n_suppress_tokens = 2;
    p.temp = 0.0f;
    const enum smp_type t[] = {SMP_TEMPERATURE};
    p.n_samplers = 1;
    p.samplers[0] = t[0];
    const float l2[4] = {9.0f, 8.0f, 1.0f, 2.0f};
    int32_t ids[4], tok;
    run_ids(&p, l2, 4, ids, &tok, NULL);
    CHECK_EQ_INT(tok, 3);
}

/* ---------------------------------------------------------------- seeds, distribution */

static void seeds_reproduce(void)
{
    enum { N = 1000, STEPS = 200 };
    static float l[N];
    uint32_t s = 5;
    for (int i = 0; i < N; i++)
        l[i] = (float)(lcg(&s) % 4000) / 1000.0f;
    struct smp_params p = smp_params_default();
    p.top_k = 0;
    p.temp = 1.5f;
    p.repeat_penalty = 1.1f;
    struct err e;
    int32_t a[STEPS], b[STEPS], r[STEPS], d[STEPS];
    p.seed = 123;
    struct smp_chain *c1 = smp_new(&p, N, &e), *c2 = smp_new(&p, N, &e);
    p.seed = 124;
    struct smp_chain *c3 = smp_new(&p, N, &e);
    for (int i = 0; i < STEPS; i++) {
        a[i] = smp_sample(c1, l);
        smp_accept(c1, a[i]);
        b[i] = smp_sample(c2, l);
        smp_accept(c2, b[i]);
        d[i] = smp_sample(c3, l);
        smp_accept(c3, d[i]);
    }
    smp_reset(c1);
    for (int i = 0; i < STEPS; i++) {
        r[i] = smp_sample(c1, l);
        smp_accept(c1, r[i]);
    }
    int same = 0, same_r = 0, same_d = 0;
    for (int i = 0; i < STEPS; i++) {
        same += a[i] == b[i];
        same_r += a[i] == r[i];
        same_d += a[i] == d[i];
    }
    CHECK_EQ_INT(same, STEPS);
    CHECK_EQ_INT(same_r, STEPS);
    CHECK(same_d < STEPS / 2, "seed 124 reproduced seed 123 (%d of %d)", same_d, STEPS);
    smp_free(c1);
    smp_free(c2);
    smp_free(c3);
}

/* Pearson chi-square of observed counts against expected probabilities. */
static double chi2(const int *obs, const double *prob, int k, int n)
{
    double x = 0;
    for (int i = 0; i < k; i++) {
        double ex = prob[i] * n;
        x += (obs[i] - ex) * (obs[i] - ex) / ex;
    }
    return x;
}

static void dist_distribution(void)
{
    enum { DRAWS = 200000 };
    struct err e;
    /* pure dist: logits ln .1 .. ln .4 → p = .1 .2 .3 .4 */
    struct smp_params p = only(0, NULL);
    p.seed = 2024;
    const float l[4] = {logf(0.1f), logf(0.2f), logf(0.3f), logf(0.4f)};
    const double want[4] = {0.1, 0.2, 0.3, 0.4};
    int obs[4] = {0};
    struct smp_chain *c = smp_new(&p, 4, &e);
    for (int i = 0; i < DRAWS; i++)
        obs[smp_sample(c, l)]++;
    smp_free(c);
    /* 3 degrees of freedom: P(χ² > 16.27) = 0.001 */
    double x = chi2(obs, want, 4, DRAWS);
    CHECK(x < 16.27, "chi2 %.2f (%d %d %d %d)", x, obs[0], obs[1], obs[2], obs[3]);

    /* temperature 2 reshapes p ∝ sqrt(p): .1→.3162 .2→.4472 .3→.5477 .4→.6325 */
    const enum smp_type t[] = {SMP_TEMPERATURE};
    p = only(1, t);
    p.temp = 2.0f;
    p.seed = 99;
    double w2[4], s2 = 0;
    for (int i = 0; i < 4; i++)
        s2 += (w2[i] = sqrt(want[i]));
    for (int i = 0; i < 4; i++)
        w2[i] /= s2;
    int obs2[4] = {0};
    c = smp_new(&p, 4, &e);
    for (int i = 0; i < DRAWS; i++)
        obs2[smp_sample(c, l)]++;
    smp_free(c);
    x = chi2(obs2, w2, 4, DRAWS);
    CHECK(x < 16.27, "chi2 %.2f (%d %d %d %d)", x, obs2[0], obs2[1], obs2[2], obs2[3]);
}

/* ---------------------------------------------------------------- §6.2 probabilities */

static void reported_probs(void)
{
    struct err e;
    struct smp_params p = smp_params_default();
    p.seed = 1;
    p.top_k = 2;
    /* raw p = .1 .2 .3 .4 */
    const float l[4] = {logf(0.1f), logf(0.2f), logf(0.3f), logf(0.4f)};
    struct smp_chain *c = smp_new(&p, 4, &e);
    int32_t tok = smp_sample(c, l);
    CHECK(tok == 2 || tok == 3, "token %d", (int)tok);
    struct smp_prob chosen, top[8];
    int n = smp_probs(c, l, 1, &chosen, top, 3);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(chosen.token, 1);
    CHECK_NEAR(chosen.p, 0.2, 1e-6);
    CHECK_NEAR(chosen.logprob, log(0.2), 1e-5);
    CHECK_EQ_INT(top[0].token, 3);
    CHECK_NEAR(top[0].p, 0.4, 1e-6);
    CHECK_EQ_INT(top[1].token, 2);
    CHECK_EQ_INT(top[2].token, 1);
    CHECK_NEAR(top[2].logprob, log(0.2), 1e-5);
    n = smp_probs(c, l, 0, &chosen, top, 8); /* more than the vocab */
    CHECK_EQ_INT(n, 4);
    smp_free(c);

    /* post-sampling: survivors of top_k 2 after temp 0.8: p ∝ .4^1.25, .3^1.25 */
    p.post_sampling_probs = true;
    c = smp_new(&p, 4, &e);
    smp_sample(c, l);
    n = smp_probs(c, NULL, 1, &chosen, top, 3);
    CHECK_EQ_INT(n, 2);
    double a = pow(0.4, 1.25), b = pow(0.3, 1.25);
    CHECK_EQ_INT(top[0].token, 3);
    CHECK_NEAR(top[0].p, a / (a + b), 1e-5);
    CHECK_EQ_INT(top[1].token, 2);
    CHECK_NEAR(chosen.p, 0.0, 0);
    CHECK(isinf(chosen.logprob) && chosen.logprob < 0, "logprob %g", (double)chosen.logprob);
    smp_free(c);
    /* greedy: only the chosen token has p > 0, the list stops there */
    p.temp = 0.0f;
    c = smp_new(&p, 4, &e);
    tok = smp_sample(c, l);
    CHECK_EQ_INT(tok, 3);
    n = smp_probs(c, NULL, tok, &chosen, top, 3);
    CHECK_EQ_INT(n, 1);
    CHECK_NEAR(chosen.p, 1.0, 0);
    CHECK_NEAR(chosen.logprob, 0.0, 0);
    smp_free(c);
}

/* ---------------------------------------------------------------- params */

static void model_values(void)
{
    struct err e;
    struct smp_params p = smp_params_default();
    CHECK_EQ_INT(smp_params_apply_model_value(&p, "top_k", "20", &e), 0);
    CHECK_EQ_INT(smp_params_apply_model_value(&p, "min_p", "0.000000", &e), 0);
    CHECK_EQ_INT(smp_params_apply_model_value(&p, "temp", "1.000000", &e), 0);
    CHECK_EQ_INT(smp_params_apply_model_value(&p, "penalty_last_n", "128", &e), 0);
    CHECK_EQ_INT(smp_params_apply_model_value(&p, "some_future_key", "x", &e), 0);
    CHECK_EQ_INT(p.top_k, 20);
    CHECK_NEAR(p.min_p, 0.0, 0);
    CHECK_NEAR(p.temp, 1.0, 0);
    CHECK_EQ_INT(p.repeat_last_n, 128);
    CHECK_EQ_INT(smp_params_apply_model_value(&p, "top_p", "abc", &e), ERR_FORMAT);
    /* a value given explicitly wins over the model's */
    p.top_p = 0.5f;
    p.set_mask |= SMP_SET_TOP_P;
    CHECK_EQ_INT(smp_params_apply_model_value(&p, "top_p", "0.9", &e), 0);
    CHECK_NEAR(p.top_p, 0.5, 0);
    CHECK_EQ_INT(smp_params_apply_model_value(&p, "sequence", "top_k;top_p;min_p;temperature", &e), 0);
    CHECK_EQ_INT(p.n_samplers, 4);
    CHECK(p.samplers[0] == SMP_TOP_K && p.samplers[1] == SMP_TOP_P && p.samplers[2] == SMP_MIN_P &&
              p.samplers[3] == SMP_TEMPERATURE,
          "sequence parsed wrong");
    /* llama.cpp's aliases, case-insensitive; unknown names are skipped */
    CHECK_EQ_INT(smp_params_set_sequence(&p, "temp;nucleus;typ;Top-K;bogus;penalties", &e), 0);
    CHECK_EQ_INT(p.n_samplers, 5);
    CHECK(p.samplers[0] == SMP_TEMPERATURE && p.samplers[1] == SMP_TOP_P &&
              p.samplers[2] == SMP_TYPICAL_P && p.samplers[3] == SMP_TOP_K &&
              p.samplers[4] == SMP_PENALTIES,
          "aliases");
    CHECK(smp_params_set_sequence(&p, "top_k;infill", &e) == ERR_UNSUPPORTED, "infill accepted");
    CHECK(strstr(e.msg, "infill") != NULL, "msg '%s'", e.msg);

    /* the order matters: temperature first, then top_p on the tempered list */
    struct smp_params q = smp_params_default();
    q.seed = 42;
    q.top_k = 0;
    q.min_p = 0;
    q.top_p = 0.8f;
    q.temp = 0.25f; /* logits 0..3 → 0,4,8,12: p(3) = .98 → top_p keeps only id3 */
    smp_params_set_sequence(&q, "temperature;top_p", &e);
    const float l[4] = {0.0f, 1.0f, 2.0f, 3.0f};
    int32_t ids[4];
    int n = run_ids(&q, l, 4, ids, NULL, NULL);
    CHECK_IDS(n, ids, 3);
}

/* general.sampling.* from a GGUF built in memory; values are read the way
 * llama.cpp's common_init_sampler_from_model reads them (as text). */
static void gguf_recommendations(void)
{
    struct err e;
    struct gguf_w *w = gguf_w_new();
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_i32(w, "general.sampling.top_k", 20);
    gguf_w_f32(w, "general.sampling.min_p", 0.0f);
    gguf_w_f32(w, "general.sampling.temp", 1.0f);
    gguf_w_f32(w, "general.sampling.top_p", 0.8f);
    gguf_w_str(w, "general.sampling.penalty_repeat", "1.05");   /* text also parses */
    gguf_w_u32(w, "general.sampling.penalty_last_n", 128);
    gguf_w_bool(w, "general.sampling.mirostat", true);          /* "true": ignored */
    gguf_w_f32(w, "general.sampling.xtc_threshold", 1e-7f);     /* "%f" → 0.000000 */
    gguf_w_str(w, "general.sampling.mirostat_tau", "abc");      /* ignored */
    /* split on ';' only: " top_p" is not a name, llama.cpp skips it */
    gguf_w_str(w, "general.sampling.sequence", "top_k; top_p;min_p;temperature");
    const int32_t sup[] = {5, -1, 99999, 7};
    gguf_w_arr_i32(w, "tokenizer.ggml.suppress_tokens", 4, sup);
    uint8_t *buf = NULL;
    size_t size = 0;
    int rc = gguf_w_to_buffer(w, &buf, &size, &e);
    gguf_w_free(w);
    CHECK(rc == 0, "writer: %s", e.msg);
    if (rc)
        return;
    struct gguf *g = NULL;
    rc = gguf_open_buffer(&g, buf, size, "mem.gguf", &e);
    CHECK(rc == 0, "open: %s", e.msg);
    if (rc) {
        free(buf);
        return;
    }
    struct smp_params p = smp_params_default();
    p.top_p = 0.5f; /* given on the command line: the model's 0.8 loses */
    p.set_mask = SMP_SET_TOP_P;
    CHECK_EQ_INT(smp_params_apply_gguf(&p, g, &e), 0);
    CHECK_EQ_INT(p.top_k, 20);
    CHECK_NEAR(p.min_p, 0.0, 0);
    CHECK_NEAR(p.temp, 1.0, 0);
    CHECK_NEAR(p.top_p, 0.5, 0);
    CHECK_NEAR(p.repeat_penalty, 1.05f, 0);
    CHECK_EQ_INT(p.repeat_last_n, 128);
    CHECK_EQ_INT(p.mirostat, 0);
    CHECK_NEAR(p.xtc_threshold, 0.0, 0);
    CHECK_NEAR(p.mirostat_tau, 5.0, 0);
    CHECK_EQ_INT(p.n_samplers, 3);
    CHECK(p.samplers[0] == SMP_TOP_K && p.samplers[1] == SMP_MIN_P && p.samplers[2] == SMP_TEMPERATURE,
          "sequence");
    int32_t *ids = NULL, n = 0;
    CHECK_EQ_INT(smp_suppress_tokens_from_gguf(g, 100, &ids, &n, &e), 0);
    CHECK_EQ_INT(n, 2);
    if (n == 2)
        CHECK(ids[0] == 5 && ids[1] == 7, "suppress %d %d", ids[0], ids[1]);
    free(ids);
    gguf_close(g);
    free(buf);

    /* no general.sampling keys: the built-in defaults stay */
    w = gguf_w_new();
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_to_buffer(w, &buf, &size, &e);
    gguf_w_free(w);
    if (gguf_open_buffer(&g, buf, size, "empty.gguf", &e) == 0) {
        p = smp_params_default();
        CHECK_EQ_INT(smp_params_apply_gguf(&p, g, &e), 0);
        CHECK_EQ_INT(p.top_k, 40);
        CHECK_EQ_INT(p.n_samplers, 9);
        CHECK_EQ_INT(smp_suppress_tokens_from_gguf(g, 100, &ids, &n, &e), 0);
        CHECK_EQ_INT(n, 0);
        gguf_close(g);
    }
    free(buf);
}

static void bad_params(void)
{
    struct err e;
    struct smp_params p = smp_params_default();
    CHECK(smp_new(&p, 0, &e) == NULL && e.code == ERR_INVALID, "n_vocab 0");
    p.temp = NAN;
    CHECK(smp_new(&p, 4, &e) == NULL && e.code == ERR_INVALID, "NaN temp");
    p = smp_params_default();
    p.mirostat = 2;
    CHECK(smp_new(&p, 4, &e) == NULL && e.code == ERR_UNSUPPORTED, "mirostat");
    p = smp_params_default();
    p.xtc_probability = 0.5f;
    CHECK(smp_new(&p, 4, &e) == NULL && e.code == ERR_UNSUPPORTED, "xtc");
    p.xtc_threshold = 0.6f; /* threshold > 0.5 disables xtc */
    struct smp_chain *c = smp_new(&p, 4, &e);
    CHECK(c != NULL, "xtc off by threshold: %s", e.msg);
    smp_free(c);
    p = smp_params_default();
    p.dry_multiplier = 0.8f;
    CHECK(smp_new(&p, 4, &e) == NULL && e.code == ERR_UNSUPPORTED, "dry");
    p = smp_params_default();
    p.n_logit_bias = 3;
    CHECK(smp_new(&p, 4, &e) == NULL && e.code == ERR_INVALID, "bias NULL");
    /* every logit −inf or NaN: still a token in range, no crash */
    p = smp_params_default();
    p.seed = 1;
    const float l[3] = {NAN, -INFINITY, NAN};
    c = smp_new(&p, 3, &e);
    int32_t tok = smp_sample(c, l);
    CHECK(tok >= 0 && tok < 3, "token %d", (int)tok);
    smp_free(c);
}

/* ---------------------------------------------------------------- llama.cpp goldens */

/* tests/golden/sampling_chain.txt: tokens llama.cpp's own chain (libllama
 * 80fb11a through its C API) chose for random logits, parameters, seeds,
 * histories and biases; the format is described in gen_sampling.py. */
static int parse_ids(char *s, int32_t *out, int cap)
{
    int n = 0;
    if (!strcmp(s, "-"))
        return 0;
    for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ","))
        out[n++] = (int32_t)strtol(tok, NULL, 10);
    return n;
}

static void llama_goldens(void)
{
    FILE *f = fopen("tests/golden/sampling_chain.txt", "r");
    if (!f)
        SKIP("tests/golden/sampling_chain.txt not found (run from the repository root)");
    static char line[65536];
    static float logits[151936];
    int n_cases = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        char *fld[18];
        int nf = 0;
        for (char *tok = strtok(line, " \n"); tok && nf < 18; tok = strtok(NULL, " \n"))
            fld[nf++] = tok;
        if (nf != 18) {
            CHECK(0, "golden line with %d fields", nf);
            continue;
        }
        struct smp_params p = smp_params_default();
        int32_t n_vocab = (int32_t)strtol(fld[0], NULL, 10);
        uint32_t lseed = (uint32_t)strtoul(fld[1], NULL, 10);
        p.seed = (uint32_t)strtoul(fld[2], NULL, 10);
        p.top_k = (int32_t)strtol(fld[3], NULL, 10);
        p.top_p = strtof(fld[4], NULL);
        p.min_p = strtof(fld[5], NULL);
        p.typical_p = strtof(fld[6], NULL);
        p.temp = strtof(fld[7], NULL);
        p.repeat_penalty = strtof(fld[8], NULL);
        p.frequency_penalty = strtof(fld[9], NULL);
        p.presence_penalty = strtof(fld[10], NULL);
        p.repeat_last_n = (int32_t)strtol(fld[11], NULL, 10);
        p.min_keep = (int32_t)strtol(fld[12], NULL, 10);
        struct err e;
        p.n_samplers = 0;
        if (strcmp(fld[13], "-"))
            smp_params_set_sequence(&p, fld[13], &e);
        char order_text[256];
        snprintf(order_text, sizeof order_text, "%s", fld[13]);
        static int32_t hist[64], want[64];
        int n_hist = parse_ids(fld[14], hist, 64);
        static struct smp_bias bias[8];
        int n_bias = 0;
        if (strcmp(fld[15], "-"))
            for (char *tok = strtok(fld[15], ","); tok && n_bias < 8; tok = strtok(NULL, ",")) {
                char *colon = strchr(tok, ':');
                bias[n_bias].token = (int32_t)strtol(tok, NULL, 10);
                bias[n_bias++].bias = colon ? strtof(colon + 1, NULL) : 0.0f;
            }
        p.logit_bias = bias;
        p.n_logit_bias = n_bias;
        int steps = (int)strtol(fld[16], NULL, 10);
        int n_want = parse_ids(fld[17], want, 64);
        if (n_want != steps || n_vocab > 151936) {
            CHECK(0, "golden line: %d tokens for %d steps", n_want, steps);
            continue;
        }
        struct smp_chain *c = smp_new(&p, n_vocab, &e);
        if (!c) {
            CHECK(0, "case %d: smp_new: %s", n_cases, e.msg);
            continue;
        }
        for (int i = 0; i < n_hist; i++)
            smp_accept(c, hist[i]);
        uint32_t st = lseed;
        for (int s = 0; s < steps; s++) {
            for (int i = 0; i < n_vocab; i++) {
                st = st * 1664525u + 1013904223u;
                logits[i] = (float)((int32_t)(st >> 8) - (1 << 23)) / (float)(1 << 20);
            }
            int32_t tok = smp_sample(c, logits);
            if (tok != want[s]) {
                if (bad++ < 5)
                    printf("#   case %d step %d: token %d, llama.cpp %d (n_vocab %d order %s)\n",
                           n_cases, s, (int)tok, (int)want[s], (int)n_vocab, order_text);
                break;
            }
            smp_accept(c, tok);
        }
        smp_free(c);
        n_cases++;
    }
    fclose(f);
    CHECK(n_cases >= 400, "only %d golden cases", n_cases);
    CHECK_EQ_INT(bad, 0);
}

/* smp_row_finite: every position of a row, the vector body and the tail, for NaN, +inf and −inf. */
static void row_finite(void)
{
    float row[37];
    for (int i = 0; i < 37; i++)
        row[i] = (float)(i * 7 % 13) - 6.0f;
    CHECK(smp_row_finite(row, 37), "a finite row");
    CHECK(smp_row_finite(row, 0), "an empty row");
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    int missed = 0;
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 37; i++) {
            float keep = row[i];
            row[i] = bad[b];
            missed += smp_row_finite(row, 37);
            row[i] = keep;
        }
    CHECK(missed == 0, "%d non-finite values missed", missed);
    row[0] = 3e38f; /* huge but finite: no overflow in the check */
    row[8] = 3e38f;
    CHECK(smp_row_finite(row, 37), "large finite values");
}

int main(void)
{
    RUN(row_finite);
    RUN(rng_reference_values);
    RUN(worked_example);
    RUN(worked_example_greedy);
    RUN(default_chain);
    RUN(defaults);
    RUN(top_k_small);
    RUN(top_k_large_vocab);
    RUN(top_k_shapes);
    RUN(row_path_equals_list_path);
    RUN(sample_cands_equals_row);
    RUN(top_p_small);
    RUN(top_p_large_cut);
    RUN(min_p_small);
    RUN(typical_p_small);
    RUN(typical_p_large);
    RUN(temperature);
    RUN(temp0_is_argmax);
    RUN(penalties);
    RUN(logit_bias);
    RUN(seeds_reproduce);
    RUN(dist_distribution);
    RUN(reported_probs);
    RUN(model_values);
    RUN(gguf_recommendations);
    RUN(bad_params);
    RUN(llama_goldens);
    CHECK_EXIT();
}
