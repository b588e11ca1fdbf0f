/* gdn_avx2.c — AVX2/FMA form of the token-by-token delta rule (gdn.h), chosen at run
 * time by gdn.c when d_k is a multiple of 8. Same math as gdn_recurrent_ref; the d_k dot
 * products are summed in 8 lanes, so results differ from the reference by f32 rounding only. */
#include <immintrin.h>
#include <math.h>

#include "gdn.h"

static inline float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void gdn_recurrent_avx2(const struct gdn_head *h, const int *rows, int T, float *S)
{
    const int dk = h->d_k, dv = h->d_v;
    for (int t = 0; t < T; t++) {
        const size_t r = (size_t)rows[t];
        const float *q = h->Q + r * h->qk_stride, *k = h->K + r * h->qk_stride, *v = h->V + r * h->v_stride;
        const float beta = h->beta[r * h->gate_stride];
        const __m256 decay = _mm256_set1_ps(expf(h->gdecay[r * h->gate_stride]));
        float *o = h->O + r * h->o_stride;
        for (int b = 0; b < dv; b++) {
            float *s = S + (size_t)b * (size_t)dk;
            __m256 u = _mm256_setzero_ps();
            for (int a = 0; a < dk; a += 8) {
                __m256 sv = _mm256_mul_ps(_mm256_loadu_ps(s + a), decay);
                _mm256_storeu_ps(s + a, sv);
                u = _mm256_fmadd_ps(sv, _mm256_loadu_ps(k + a), u);
            }
            const __m256 d = _mm256_set1_ps((v[b] - hsum(u)) * beta);
            __m256 y = _mm256_setzero_ps();
            for (int a = 0; a < dk; a += 8) {
                __m256 sv = _mm256_fmadd_ps(_mm256_loadu_ps(k + a), d, _mm256_loadu_ps(s + a));
                _mm256_storeu_ps(s + a, sv);
                y = _mm256_fmadd_ps(sv, _mm256_loadu_ps(q + a), y);
            }
            o[b] = hsum(y) * h->scale;
        }
    }
}

void gdn_axpy_avx2(float *y, float a, const float *x, int n)
{
    const __m256 av = _mm256_set1_ps(a);
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
}

float gdn_dot_avx2(const float *a, const float *b, int n)
{
    __m256 s = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8)
        s = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s);
    return hsum(s);
}
