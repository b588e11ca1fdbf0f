/* ops_avx2.c — AVX2/FMA/F16C versions of the attention inner loops (ops.h).
 * Same roundings as the reference in ops.c (q and the probabilities go to
 * f16 with an f16 cache); products are fused (FMA), as ggml's SIMD does. */
#include <immintrin.h>
#include <string.h>

#include "ops.h"


static inline float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float dot_f16(const float *q, const uint16_t *k, int n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i))), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i + 8))), a1);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i))), a0);
    float s = hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++)
        s += q[i] * _cvtsh_ss(k[i]);
    return s;
}

static inline float dot_f32(const float *q, const float *k, int n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
    float s = hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++)
        s += q[i] * k[i];
    return s;
}

#define ATTN_MAX_HD 1024

void ops_attn_avx2(const float *q, int n_q, int hd, const void *K, const void *V, size_t stride, int n_kv,
                   float scale, const float *f16tab, float *out, float *scratch)
{
    float qr[ATTN_MAX_HD];
    const bool f16 = f16tab != NULL;
    for (int h = 0; h < n_q; h++) {
        const float *qh = q + (size_t)h * hd;
        float *oh = out + (size_t)h * hd;
        float *s = scratch;
        if (f16) {
            int d = 0;
            for (; d + 8 <= hd; d += 8)
                _mm256_storeu_ps(qr + d, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(qh + d), _MM_FROUND_TO_NEAREST_INT)));
            for (; d < hd; d++)
                qr[d] = _cvtsh_ss(_cvtss_sh(qh[d], _MM_FROUND_TO_NEAREST_INT));
            const uint16_t *k = K;
            for (int p = 0; p < n_kv; p++)
                s[p] = dot_f16(qr, k + (size_t)p * stride, hd) * scale;
        } else {
            const float *k = K;
            for (int p = 0; p < n_kv; p++)
                s[p] = dot_f32(qh, k + (size_t)p * stride, hd) * scale;
        }
        ops_softmax(s, n_kv);
        memset(oh, 0, sizeof(float) * (size_t)hd);
        const int hd8 = hd & ~7;
        for (int p = 0; p < n_kv; p++) {
            if (f16) {
                const float w = _cvtsh_ss(_cvtss_sh(s[p], _MM_FROUND_TO_NEAREST_INT)); /* probabilities to f16 */
                const uint16_t *vr = (const uint16_t *)V + (size_t)p * stride;
                const __m256 wv = _mm256_set1_ps(w);
                for (int d = 0; d < hd8; d += 8)
                    _mm256_storeu_ps(oh + d, _mm256_fmadd_ps(wv, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + d))),
                                                             _mm256_loadu_ps(oh + d)));
                for (int d = hd8; d < hd; d++)
                    oh[d] += w * _cvtsh_ss(vr[d]);
            } else {
                const float w = s[p];
                const float *vr = (const float *)V + (size_t)p * stride;
                const __m256 wv = _mm256_set1_ps(w);
                for (int d = 0; d < hd8; d += 8)
                    _mm256_storeu_ps(oh + d, _mm256_fmadd_ps(wv, _mm256_loadu_ps(vr + d), _mm256_loadu_ps(oh + d)));
                for (int d = hd8; d < hd; d++)
                    oh[d] += w * vr[d];
            }
        }
    }
}
