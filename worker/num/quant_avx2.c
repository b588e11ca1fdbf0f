/* quant_avx2.c — AVX2 + FMA + F16C kernels. Compiled with -mavx2 -mfma -mf16c;
 * only reached through quant.c after the CPU was checked. Integer dot products
 * come from quant_x86.h (maddubs/madd form); this file adds the float types
 * and the activation quantizers, which give the same bytes as quant_ref.c. */
#include <immintrin.h>
#include <string.h>

#include "../../common/fp16.h"
#include "quant_internal.h"

#define QX(name) name##_avx2
#include "quant_x86.h"

/* ------------------------------------------------------------ float dots */

static float dot_f32_avx2(int64_t n, const void *w, const void *a)
{
    const float *x = w, *y = a;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s0);
    float s = qx_hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++)
        s += x[i] * y[i];
    return s;
}

static inline __m256 ld_h(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 ld_bf(const uint16_t *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

#define HALF_DOT(NAME, LD, CVT)                                                            \
    static float NAME(int64_t n, const void *w, const void *a)                             \
    {                                                                                      \
        const uint16_t *x = w, *y = a;                                                     \
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                        \
        int64_t i = 0;                                                                     \
        for (; i + 32 <= n; i += 32) {                                                     \
            s0 = _mm256_fmadd_ps(LD(x + i), LD(y + i), s0);                                \
            s1 = _mm256_fmadd_ps(LD(x + i + 8), LD(y + i + 8), s1);                        \
            s2 = _mm256_fmadd_ps(LD(x + i + 16), LD(y + i + 16), s2);                      \
            s3 = _mm256_fmadd_ps(LD(x + i + 24), LD(y + i + 24), s3);                      \
        }                                                                                  \
        for (; i + 8 <= n; i += 8)                                                         \
            s0 = _mm256_fmadd_ps(LD(x + i), LD(y + i), s0);                                \
        float s = qx_hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));    \
        for (; i < n; i++)                                                                 \
            s += CVT(x[i]) * CVT(y[i]);                                                    \
        return s;                                                                          \
    }

HALF_DOT(dot_f16_avx2, ld_h, fp16_to_f32)
HALF_DOT(dot_bf16_avx2, ld_bf, bf16_to_f32)

/* ------------------------------------------------- activation quantizers */

static void act_f16_avx2(const float *x, void *dst, int64_t n)
{
    uint16_t *y = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        y[i] = fp16_from_f32(x[i]);
}

/* One block of 32: x86 rule (id = 127/amax, RNE). Returns Σq; writes d (f32) and 32 int8. */
static inline int q8_block_avx2(const float *x, float *dout, int8_t *q)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16),
           v3 = _mm256_loadu_ps(x + 24);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float amax = _mm_cvtss_f32(m4);
    *dout = amax / 127.0f;
    __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
#define r (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), r));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), r));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), r));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), r));
#undef r
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    /* packs work per 128-bit lane; the final permute restores element order */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p);
    return _mm_cvtsi128_si32(s4);
}

static void act_q8_0_avx2(const float *x, void *dst, int64_t n)
{
    struct blk_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK; i++) {
        float d;
        q8_block_avx2(x + i * QK, &d, b[i].qs);
        b[i].d = fp16_from_f32(d);
    }
}

static void act_q8_1_avx2(const float *x, void *dst, int64_t n)
{
    struct blk_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK; i++) {
        float d;
        int sum = q8_block_avx2(x + i * QK, &d, b[i].qs);
        b[i].d = fp16_from_f32(d);
        b[i].s = fp16_from_f32(d * (float)sum);
    }
}

/* Q8_K (spec §4.3), same bytes as quant_act_q8_k_ref: the first element of
 * largest magnitude maps to −127, q = min(127, rne(x·iscale)), d = 1/iscale. */
static void act_q8_k_avx2(const float *x, void *dst, int64_t n)
{
    struct blk_q8_k *b = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8)
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float max = 0.0f;
        const __m256 va = _mm256_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 8) {
            int msk = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), va, _CMP_EQ_OQ));
            if (msk) {
                max = x[j + __builtin_ctz((unsigned)msk)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        const __m256i lim = _mm256_set1_epi32(127), perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (int j = 0; j < QK_K; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_min_epi32(lim, _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            p = _mm256_permutevar8x32_epi32(p, perm);
            _mm256_storeu_si256((__m256i *)(b[i].qs + j), p);
            /* bsums of the two 16-element groups: unsigned byte sums of q+128 via sad */
            __m256i s = _mm256_sad_epu8(_mm256_xor_si256(p, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
            b[i].bsums[j / 16] = (int16_t)(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1) - 16 * 128);
            b[i].bsums[j / 16 + 1] = (int16_t)(_mm256_extract_epi64(s, 2) + _mm256_extract_epi64(s, 3) - 16 * 128);
        }
        b[i].d = 1.0f / iscale;
    }
}

void quant_avx2_kernels(struct quant_kernels *k)
{
    k->name = "avx2";
    install_avx2(k);
    k->dot[QT_F32] = dot_f32_avx2;
    k->dot[QT_F16] = dot_f16_avx2;
    k->dot[QT_BF16] = dot_bf16_avx2;
    k->act[QT_F16] = act_f16_avx2;
    k->act[QT_Q8_0] = act_q8_0_avx2;
    k->act[QT_Q8_1] = act_q8_1_avx2;
    k->act[QT_Q8_K] = act_q8_k_avx2;
}
