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

/* All n_q heads of one KV head at once: every K and V row is read (and converted) once for the group.
 * Scores of head h live at scratch[h·n_kv …]; V·p is accumulated in register tiles of 16 dims. */
void ops_attn_avx2(const float *q, int n_q, int hd, const void *K, const void *V, size_t stride, int n_kv,
                   float scale, const float *f16tab, float *out, float *scratch)
{
    const bool f16 = f16tab != NULL;
    const size_t es = f16 ? 2 : 4, rs = stride * es;
    if (n_q > ATTN_MAX_Q || (hd & 15)) { /* unusual shapes: one head at a time, scalar tails */
        for (int h = 0; h < n_q; h++)
            ops_attn_ref(q + (size_t)h * hd, 1, hd, K, V, stride, n_kv, scale, f16tab, out + (size_t)h * hd, scratch);
        return;
    }
    float qr[ATTN_MAX_HD];
    /* scores, head by head (the q row stays in L1; K rows come from L1/L2 after the first head) */
    for (int h = 0; h < n_q; h++) {
        const float *qh = q + (size_t)h * hd;
        if (f16) {
            round_f16(qr, qh, hd);
            qh = qr;
        }
        float *s = scratch + (size_t)h * n_kv;
        const char *k = K;
        for (int p = 0; p < n_kv; p++, k += rs) {
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            for (int d = 0; d < hd; d += 16) {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qh + d), load8(k, d, f16), a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qh + d + 8), load8(k, d + 8, f16), a1);
            }
            s[p] = hsum256(_mm256_add_ps(a0, a1)) * scale;
        }
        ops_softmax_avx2(s, n_kv);
        if (f16)
            round_f16(s, s, n_kv); /* probabilities go to f16 for V·p */
    }
    /* out[h][d] = Σ_p s[h][p] · V[p][d], in tiles of 16 dims × up to 4 heads */
    for (int h0 = 0; h0 < n_q; h0 += 4) {
        const int nh = n_q - h0 < 4 ? n_q - h0 : 4;
        for (int d = 0; d < hd; d += 16) {
            __m256 acc[4][2];
            for (int h = 0; h < 4; h++)
                acc[h][0] = acc[h][1] = _mm256_setzero_ps();
            const char *v = V;
            for (int p = 0; p < n_kv; p++, v += rs) {
                const __m256 v0 = load8(v, d, f16), v1 = load8(v, d + 8, f16);
                for (int h = 0; h < nh; h++) {
                    const __m256 w = _mm256_broadcast_ss(scratch + (size_t)(h0 + h) * n_kv + p);
                    acc[h][0] = _mm256_fmadd_ps(w, v0, acc[h][0]);
                    acc[h][1] = _mm256_fmadd_ps(w, v1, acc[h][1]);
                }
            }
            for (int h = 0; h < nh; h++) {
                _mm256_storeu_ps(out + (size_t)(h0 + h) * hd + d, acc[h][0]);
                _mm256_storeu_ps(out + (size_t)(h0 + h) * hd + d + 8, acc[h][1]);
            }
        }
    }
}
