/* quant_avx512.c — AVX-512 kernels. Compiled with AVX-512 F/BW/VL/DQ; the
 * VNNI instructions (vpdpbusd/vpdpwssd) are enabled by a target pragma and
 * installed only when the CPU reports avx512vnni. Only reached through
 * quant.c after the CPU was checked.
 *
 * With VNNI: the shared 256-bit kernels of quant_x86.h in their VNNI form,
 * plus 512-bit kernels for the hot types (Q4_K, Q5_K, Q6_K, Q8_0). Without
 * VNNI the AVX2 table already in place is kept. */
#include <immintrin.h>
#include <string.h>

#include "quant_internal.h"

#pragma GCC push_options
#pragma GCC target("avx512vnni")

#define QX(name) name##_vnni256
#define QX_VNNI
#include "quant_x86.h"

/* pshufb patterns: 128-bit lanes 0,1 ← int16 lane 2c; lanes 2,3 ← int16 lane 2c+1 */
static const uint8_t z_k4_pat[4][64] __attribute__((aligned(64))) = {
#define Z2(b) b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1
#define ZP(c) {Z2(4 * c), Z2(4 * c), Z2(4 * c + 2), Z2(4 * c + 2)}
    ZP(0), ZP(1), ZP(2), ZP(3)
#undef ZP
#undef Z2
};

QX_INLINE float z_hsum(__m512 v)
{
    return qx_hsum(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

QX_INLINE __m512i z_load(const void *p) { return _mm512_loadu_si512(p); }

/* Q4_K / Q5_K tail: wv[c] = 64 unsigned codes of sub-blocks 2c, 2c+1 (element order). */
QX_INLINE void z_k4_tokens(const __m512i wv[4], const uint8_t *S, float dw, float dmw, const void *a, size_t as,
                           int64_t i, const int NT, __m512 *acc, __m256 *accm)
{
    __m128i sc16, mn16;
    qx_k4_scales(S, &sc16, &mn16);
    const __m512i scb = _mm512_broadcast_i32x4(sc16);
    __m512i scv[4];
    QX_UNROLL
    for (int c = 0; c < 4; c++)
        scv[c] = _mm512_shuffle_epi8(scb, _mm512_load_si512(z_k4_pat[c]));
    const __m256i mins = _mm256_set_m128i(_mm_unpackhi_epi16(mn16, mn16), _mm_unpacklo_epi16(mn16, mn16));
    QX_UNROLL
    for (int t = 0; t < NT; t++) {
        const struct blk_q8_k *y = QX_ACT_K(t, i);
        __m512i is = _mm512_setzero_si512();
        QX_UNROLL
        for (int c = 0; c < 4; c++)
            is = _mm512_dpwssd_epi32(is, _mm512_maddubs_epi16(wv[c], z_load(y->qs + 64 * c)), scv[c]);
        __m256i ms = _mm256_madd_epi16(qx_load(y->bsums), mins);
        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(y->d * dw), _mm512_cvtepi32_ps(is), acc[t]);
        accm[t] = _mm256_fnmadd_ps(_mm256_set1_ps(y->d * dmw), _mm256_cvtepi32_ps(ms), accm[t]);
    }
}

QX_INLINE void z_q4_k(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q4_k *x = w;
    __m512 acc[QX_MAXT];
    __m256 accm[QX_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++) {
        acc[t] = _mm512_setzero_ps();
        accm[t] = _mm256_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m512i wv[4];
        QX_UNROLL
        for (int c = 0; c < 4; c++) {
            __m256i q = qx_load(x[i].qs + 32 * c);
            wv[c] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1), m4);
        }
        z_k4_tokens(wv, x[i].scales, QX_H2F(x[i].d), QX_H2F(x[i].dmin), a, as, i, NT, acc, accm);
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        out[t] = z_hsum(acc[t]) + qx_hsum(accm[t]);
}

QX_INLINE void z_q5_k(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q5_k *x = w;
    __m512 acc[QX_MAXT];
    __m256 accm[QX_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++) {
        acc[t] = _mm512_setzero_ps();
        accm[t] = _mm256_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m512i hz = _mm512_broadcast_i64x4(qx_load(x[i].qh));
        __m512i wv[4];
        QX_UNROLL
        for (int c = 0; c < 4; c++) {
            __m256i q = qx_load(x[i].qs + 32 * c);
            /* 5th bit: bit 2c of qh[l] for the low half, bit 2c+1 for the high half, moved to bit 4 */
            const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * c)), _mm256_set1_epi16((short)(2 * c + 1)), 1);
            __m512i h = _mm512_and_si512(_mm512_slli_epi16(_mm512_srlv_epi16(hz, sh), 4), b4);
            wv[c] = _mm512_or_si512(
                _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1), m4), h);
        }
        z_k4_tokens(wv, x[i].scales, QX_H2F(x[i].d), QX_H2F(x[i].dmin), a, as, i, NT, acc, accm);
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        out[t] = z_hsum(acc[t]) + qx_hsum(accm[t]);
}

QX_INLINE void z_q6_k(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q6_k *x = w;
    __m512 acc[QX_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    for (int64_t i = 0; i < n / QK_K; i++) {
        /* wv[p]: elements 64p..64p+63; p = 2h: low nibbles of ql[64h..], p = 2h+1: high nibbles */
        __m512i wv[4], scv[4];
        QX_UNROLL
        for (int h = 0; h < 2; h++) {
            __m512i L = z_load(x[i].ql + 64 * h);
            __m512i H = _mm512_broadcast_i64x4(qx_load(x[i].qh + 32 * h));
            wv[2 * h] = _mm512_or_si512(_mm512_and_si512(L, m4), _mm512_and_si512(_mm512_sllv_epi16(H, shl), m30));
            wv[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4),
                                            _mm512_and_si512(_mm512_srlv_epi16(H, shr), m30));
        }
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const __m512i scz = _mm512_castsi256_si512(sc16);
        QX_UNROLL
        for (int p = 0; p < 4; p++) {
            /* 128-bit lane L of pair p uses scale S[4p + L] */
            const __m512i idx = _mm512_add_epi16(_mm512_set1_epi16((short)(4 * p)),
                                                 _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3));
            scv[p] = _mm512_permutexvar_epi16(idx, scz);
        }
        float dw = QX_H2F(x[i].d);
        QX_UNROLL
        for (int t = 0; t < NT; t++) {
            const struct blk_q8_k *y = QX_ACT_K(t, i);
            __m512i is = _mm512_setzero_si512();
            QX_UNROLL
            for (int p = 0; p < 4; p++)
                is = _mm512_dpwssd_epi32(is, _mm512_maddubs_epi16(wv[p], z_load(y->qs + 64 * p)), scv[p]);
            __m256i off = _mm256_madd_epi16(qx_load(y->bsums), sc16);
            /* fold the −32·Σ S·bsums offset into the low half (8 lanes) */
            is = _mm512_sub_epi32(is, _mm512_castsi256_si512(_mm256_slli_epi32(off, 5)));
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(y->d * dw), _mm512_cvtepi32_ps(is), acc[t]);
        }
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        out[t] = z_hsum(acc[t]);
}

/* Q8_0 × Q8_0, two blocks per 512-bit step (an odd last block uses 256 bits). */
QX_INLINE void z_q8_0(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q8_0 *x = w;
    __m512 acc[QX_MAXT];
    __m256 acc2[QX_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++) {
        acc[t] = _mm512_setzero_ps();
        acc2[t] = _mm256_setzero_ps();
    }
    const int64_t nb = n / QK;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m512i wz = _mm512_inserti64x4(_mm512_castsi256_si512(qx_load(x[i].qs)), qx_load(x[i + 1].qs), 1);
        __mmask64 neg = _mm512_movepi8_mask(wz);
        __m512i wa = _mm512_abs_epi8(wz);
        float d0 = QX_H2F(x[i].d), d1 = QX_H2F(x[i + 1].d);
        QX_UNROLL
        for (int t = 0; t < NT; t++) {
            const struct blk_q8_0 *y = QX_ACT_0(t, i);
            __m512i az = _mm512_inserti64x4(_mm512_castsi256_si512(qx_load(y[0].qs)), qx_load(y[1].qs), 1);
            az = _mm512_mask_sub_epi8(az, neg, _mm512_setzero_si512(), az);
            __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wa, az);
            __m512 sc = _mm512_insertf32x8(_mm512_set1_ps(d0 * QX_H2F(y[0].d)), _mm256_set1_ps(d1 * QX_H2F(y[1].d)), 1);
            acc[t] = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(p), acc[t]);
        }
    }
    if (i < nb) {
        __m256i wv = qx_load(x[i].qs);
        __m256i wa = _mm256_abs_epi8(wv);
        float d0 = QX_H2F(x[i].d);
        QX_UNROLL
        for (int t = 0; t < NT; t++) {
            const struct blk_q8_0 *y = QX_ACT_0(t, i);
            __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wa, _mm256_sign_epi8(qx_load(y->qs), wv));
            acc2[t] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * QX_H2F(y->d)), _mm256_cvtepi32_ps(p), acc2[t]);
        }
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        out[t] = z_hsum(acc[t]) + qx_hsum(acc2[t]);
}

#define qx_z_q4_k z_q4_k
#define qx_z_q5_k z_q5_k
#define qx_z_q6_k z_q6_k
#define qx_z_q8_0 z_q8_0
QX_ENTRIES(z_q4_k)
QX_ENTRIES(z_q5_k)
QX_ENTRIES(z_q6_k)
QX_ENTRIES(z_q8_0)

static void install_vnni(struct quant_kernels *k)
{
    install_vnni256(k);
    QX_SET(k, QT_Q4_K, z_q4_k);
    QX_SET(k, QT_Q5_K, z_q5_k);
    QX_SET(k, QT_Q6_K, z_q6_k);
    QX_SET(k, QT_Q8_0, z_q8_0);
}

#pragma GCC pop_options

void quant_avx512_kernels(struct quant_kernels *k, int vnni)
{
    k->name = vnni ? "avx512vnni" : "avx512";
    if (vnni)
        install_vnni(k);
}
