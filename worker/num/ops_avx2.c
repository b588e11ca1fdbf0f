/* ops_avx2.c — AVX2/FMA/F16C versions of the attention inner loops (ops.h).
 * Same roundings as the reference in ops.c (q and the probabilities go to
 * f16 with an f16 cache); products are fused (FMA), as ggml's SIMD does. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "ops.h"


static inline float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* e^x for 8 lanes: Cody–Waite reduction x = n·ln2 + r, degree-7 Taylor for e^r (< 0.1 ulp of
 * truncation error), scale by 2^n. x < −87.3 gives 0, x > 88.7 is clamped (finite). */
static inline __m256 exp256(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.3f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.7f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^n in two halves so that n = 128 (x near 88.7) stays finite */
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i h1 = _mm256_srai_epi32(ni, 1), h2 = _mm256_sub_epi32(ni, h1);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h1, _mm256_set1_epi32(127)), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h2, _mm256_set1_epi32(127)), 23));
    return _mm256_andnot_ps(under, _mm256_mul_ps(_mm256_mul_ps(p, s1), s2));
}

/* ops_softmax with 8-lane exp: lane sums in f32 per block of 8, blocks summed in double (as ggml). */
void ops_softmax_avx2(float *x, int n)
{
    int i = 0;
    __m256 mx = _mm256_set1_ps(-INFINITY);
    for (; i + 8 <= n; i += 8)
        mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float max = _mm_cvtss_f32(m4);
    for (; i < n; i++)
        if (x[i] > max)
            max = x[i];
    double sum = 0.0;
    const __m256 vmax = _mm256_set1_ps(max);
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
        _mm256_storeu_ps(x + i, v);
        sum += (double)hsum256(v);
    }
    for (; i < n; i++) {
        float v = expf(x[i] - max);
        sum += (double)v;
        x[i] = v;
    }
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++)
        x[i] *= (float)(1.0 / sum);
}

/* g = silu(g)·u = g/(1 + e^−g)·u */
void ops_swiglu_avx2(float *g, const float *u, int n)
{
    int i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++)
        g[i] = ops_silu(g[i]) * u[i];
}

#define ATTN_MAX_HD 1024
#define ATTN_MAX_Q 64 /* query heads per KV head handled together */

/* Round n floats to f16 and back (RNE). */
static void round_f16(float *dst, const float *src, int n)
{
    int d = 0;
    for (; d + 8 <= n; d += 8)
        _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(src + d), _MM_FROUND_TO_NEAREST_INT)));
    for (; d < n; d++)
        dst[d] = _cvtsh_ss(_cvtss_sh(src[d], _MM_FROUND_TO_NEAREST_INT));
}

/* 8 elements of a cache row as f32 */
static inline __m256 load8(const void *row, int d, bool f16)
{
    if (f16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)));
    return _mm256_loadu_ps((const float *)row + d);
}

/* Prefetch for the attention of a decode step: the cache rows of one KV head lie a whole cache row
 * (rs bytes) apart and the weight stream has evicted them since the last step, so the scores loop
 * asks for the K row ATTN_PF_K positions ahead and for this position's V row (read by pv after the
 * softmax). Measured on qwen3-0.6b tg128, 2 threads: scores + pv went from 3.7 % to 1.9 % of the
 * decode's perf samples. */
#ifndef ATTN_PF_K
#define ATTN_PF_K 8
#endif
/* GCC 12 deletes an _mm_prefetch that sits under a condition or in a loop of its own (it has no
 * effect the compiler must keep), so this one is asm. */
static inline void pf_row(const char *p, int rb)
{
    for (int o = 0; o < rb; o += 64)
        __asm__ volatile("prefetcht0 %0" : : "m"(p[o]));
}

/* Scores of M query rows (qr: [M][hd], already f16-rounded for an f16 cache) against rows [0, P) of K:
 * every K chunk is loaded and converted once for all M queries; C independent partial sums per query
 * (over interleaved 8-dim chunks) keep the FMA pipes busy when M is small. s: [M][P]. */
#define DEF_SCORES(M, C)                                                                                  \
    static void scores_##M##_##C(const float *qr, int hd, const char *K, const char *V, size_t rs, int P,  \
                                 bool f16, float scale, float *s)                                         \
    {                                                                                                     \
        const int rb = hd * (f16 ? 2 : 4);                                                                \
        for (int p = 0; p < P && p < ATTN_PF_K; p++)                                                      \
            pf_row(K + (size_t)p * rs, rb);                                                               \
        for (int p = 0; p < P; p++, K += rs, V += rs) {                                                   \
            if (ATTN_PF_K && p + ATTN_PF_K < P)                                                           \
                pf_row(K + (size_t)ATTN_PF_K * rs, rb);                                                   \
            pf_row(V, rb);                                                                                \
            __m256 acc[M][C];                                                                             \
            _Pragma("GCC unroll 8") for (int j = 0; j < M; j++)                                           \
                _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) acc[j][c] = _mm256_setzero_ps();      \
            for (int d = 0; d < hd; d += 8 * C) {                                                         \
                _Pragma("GCC unroll 8") for (int c = 0; c < C; c++)                                       \
                {                                                                                         \
                    const __m256 kv = load8(K, d + 8 * c, f16);                                           \
                    _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) acc[j][c] =                       \
                        _mm256_fmadd_ps(_mm256_loadu_ps(qr + (size_t)j * hd + d + 8 * c), kv, acc[j][c]);  \
                }                                                                                         \
            }                                                                                             \
            _Pragma("GCC unroll 8") for (int j = 0; j < M; j++)                                           \
            {                                                                                             \
                __m256 t = acc[j][0];                                                                     \
                _Pragma("GCC unroll 8") for (int c = 1; c < C; c++) t = _mm256_add_ps(t, acc[j][c]);      \
                s[(size_t)j * P + p] = hsum256(t) * scale;                                                \
            }                                                                                             \
        }                                                                                                 \
    }

/* out[j][d] = Σ_p s[j][p]·V[p][d] for M queries. The sum over p is ggml's (its f32 mul_mat of V by
 * the probabilities, 8 lanes along p): eight FMA chains, chain l over p ≡ l (mod 8), then
 * ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). A single chain rounds differently in the last bit, and a
 * Q8_0 activation of the next matmul that sits on an exact .5 then rounds the other way (a logit
 * error of ~1e-2 on the tiny parity models). The eight chains are independent, so they also keep
 * the FMA pipes busy: per 8 dims and query, 8 accumulators over the cache rows. */
static void pv_lanes(const float *s, int M, int hd, const char *V, size_t rs, int P, bool f16, float *const *outs)
{
    for (int d = 0; d < hd; d += 8) {
        for (int j = 0; j < M; j++) {
            const float *sj = s + (size_t)j * P;
            __m256 a[8];
            _Pragma("GCC unroll 8") for (int l = 0; l < 8; l++) a[l] = _mm256_setzero_ps();
            const char *v = V;
            int p = 0;
            for (; p + 8 <= P; p += 8, v += 8 * rs) {
                _Pragma("GCC unroll 8") for (int l = 0; l < 8; l++) a[l] =
                    _mm256_fmadd_ps(_mm256_broadcast_ss(sj + p + l), load8(v + (size_t)l * rs, d, f16), a[l]);
            }
            for (int l = 0; p < P; p++, l++, v += rs)
                a[l] = _mm256_fmadd_ps(_mm256_broadcast_ss(sj + p), load8(v, d, f16), a[l]);
            const __m256 x = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
            const __m256 y = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
            _mm256_storeu_ps(outs[j] + d, _mm256_add_ps(x, y));
        }
    }
}

#define DEF_BOTH(M, T) DEF_SCORES(M, T)
DEF_BOTH(1, 1)
DEF_BOTH(1, 2)
DEF_BOTH(1, 4)
DEF_BOTH(1, 8)
DEF_BOTH(2, 1)
DEF_BOTH(2, 2)
DEF_BOTH(2, 4)
DEF_BOTH(4, 1)
DEF_BOTH(4, 2)
DEF_BOTH(8, 1)

typedef void (*scores_fn)(const float *, int, const char *, const char *, size_t, int, bool, float, float *);
/* [log2 M][log2 T], M·T <= 8 */
static const scores_fn g_scores[4][4] = {
    { scores_1_1, scores_1_2, scores_1_4, scores_1_8 },
    { scores_2_1, scores_2_2, scores_2_4, NULL },
    { scores_4_1, scores_4_2, NULL, NULL },
    { scores_8_1, NULL, NULL, NULL },
};

void ops_attn_multi_avx2(int m, const float *const *qs, float *const *outs, const int *n_kv, int hd,
                         const void *K, const void *V, size_t stride, float scale, const float *f16tab,
                         float *scratch)
{
    const bool f16 = f16tab != NULL;
    const size_t rs = stride * (f16 ? 2 : 4);
    if (hd & 7 || hd > ATTN_MAX_HD) {
        for (int j = 0; j < m; j++)
            ops_attn_ref(qs[j], 1, hd, K, V, stride, n_kv[j], scale, f16tab, outs[j], scratch);
        return;
    }
    float qr[8 * ATTN_MAX_HD];
    for (int j0 = 0; j0 < m; j0 += 8) {
        const int mj = m - j0 < 8 ? m - j0 : 8;
        const int lm = mj == 1 ? 0 : mj == 2 ? 1 : mj <= 4 ? 2 : 3; /* padded by repeating the last query */
        const int M = 1 << lm;
        int lt = 3 - lm; /* T = 8/M tiles, fewer when hd is not a multiple of 8·T */
        while (lt > 0 && hd % (8 << lt))
            lt--;
        int P = 0;
        for (int j = 0; j < mj; j++)
            if (n_kv[j0 + j] > P)
                P = n_kv[j0 + j];
        float *outp[8];
        for (int j = 0; j < M; j++) {
            const int src = j0 + (j < mj ? j : mj - 1);
            if (f16)
                round_f16(qr + (size_t)j * hd, qs[src], hd);
            else
                memcpy(qr + (size_t)j * hd, qs[src], sizeof(float) * (size_t)hd);
            outp[j] = j < mj ? outs[j0 + j] : outs[j0 + mj - 1]; /* a duplicate writes the same values */
        }
        float *s = scratch;
        g_scores[lm][lt](qr, hd, K, V, rs, P, f16, scale, s);
        for (int j = 0; j < M; j++) {
            const int nk = n_kv[j0 + (j < mj ? j : mj - 1)];
            float *sj = s + (size_t)j * P;
            ops_softmax_avx2(sj, nk);
            if (f16)
                round_f16(sj, sj, nk); /* probabilities go to f16 for V·p */
            for (int p = nk; p < P; p++)
                sj[p] = 0.0f; /* causal: later cells of the block's other tokens */
        }
        pv_lanes(s, M, hd, V, rs, P, f16, outp);
    }
}

void ops_attn_avx2(const float *q, int n_q, int hd, const void *K, const void *V, size_t stride, int n_kv,
                   float scale, const float *f16tab, float *out, float *scratch)
{
    const float *qs[ATTN_MAX_Q];
    float *outs[ATTN_MAX_Q];
    int nk[ATTN_MAX_Q];
    for (int h0 = 0; h0 < n_q; h0 += ATTN_MAX_Q) {
        const int m = n_q - h0 < ATTN_MAX_Q ? n_q - h0 : ATTN_MAX_Q;
        for (int j = 0; j < m; j++) {
            qs[j] = q + (size_t)(h0 + j) * hd;
            outs[j] = out + (size_t)(h0 + j) * hd;
            nk[j] = n_kv;
        }
        ops_attn_multi_avx2(m, qs, outs, nk, hd, K, V, stride, scale, f16tab, scratch);
    }
}
